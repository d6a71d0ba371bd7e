"""The threads for executors that offer only a blocking execute(batch):
every task gets a thread at once, idle ones are reused, then retire."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from dsh_actors.scheduling.blocking import BlockingPool

from .helpers import GUARD


def test_every_task_runs_at_once_however_many_block() -> None:
    pool = BlockingPool("test-pool")
    release = threading.Event()
    count = 50  # more than any fixed pool size the runtime had (32)
    all_in = threading.Barrier(count + 1, timeout=GUARD)

    def blocking(i: int) -> int:
        all_in.wait()  # only passes once every task runs at the same time
        release.wait(GUARD)
        return i

    futures = [pool.submit(blocking, i) for i in range(count)]
    all_in.wait()
    release.set()
    assert [f.result(GUARD) for f in futures] == list(range(count))
    pool.shutdown()
    for thread in pool.threads():
        thread.join(GUARD)
    assert pool.threads() == []


def test_an_idle_thread_retires_by_itself(monkeypatch: Any) -> None:
    # (Reuse: the runtime's test in tests/registry/test_registry_executors.py.)
    monkeypatch.setattr(BlockingPool, "IDLE_S", 0.05)
    pool = BlockingPool("test-pool")
    thread = pool.submit(threading.current_thread).result(GUARD)
    thread.join(GUARD)  # idle for IDLE_S: it retires by itself
    assert not thread.is_alive()
    for other in pool.threads():
        other.join(GUARD)
    assert pool.threads() == []
    assert pool.submit(lambda: 7).result(GUARD) == 7  # a new one then
    pool.shutdown()


def test_a_shut_down_pool_refuses_tasks_and_its_errors_reach_the_future() -> None:
    pool = BlockingPool("test-pool")

    def fails() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        pool.submit(fails).result(GUARD)
    pool.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        pool.submit(lambda: None)
    for thread in pool.threads():
        thread.join(GUARD)
