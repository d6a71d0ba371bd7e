"""Fixtures for the PTC tests: the runtime of tests/conftest.py with a
PtcExecutor installed; after every test, no child process may survive.
A run's sub-calls are a sub-batch of the runtime's scheduler: its
invariants are asserted after every step (``BatchRun._assert_invariants``),
as in the scheduler tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from dsh_actors.scheduling.batch import BatchRun
from executors.ptc import PtcExecutor

from .helpers import children, install


@pytest.fixture(autouse=True)
def assert_schedule_invariants() -> Iterator[None]:
    BatchRun.check_invariants = True
    try:
        yield
    finally:
        BatchRun.check_invariants = False


@pytest.fixture(autouse=True)
def no_process_left() -> Iterator[None]:
    """Set up before (so torn down after) the runtime: once it has
    stopped, this process has no child left, zombies included."""
    before = children()
    yield
    left = [pid for pid in children() if pid not in before]
    assert left == [], f"child processes left after the test: {left}"


@pytest.fixture
def ptc(rt: Any) -> Iterator[PtcExecutor]:
    """A PtcExecutor (2 s timeout) installed globally in ``rt``; after the
    test the runtime is stopped and the executor has no worker left."""
    executor = install(rt, timeout_ms=2000)
    yield executor
    rt.stop()
    assert executor.worker_pids() == []
