"""Driver-side helpers of the Ray tests (imported by the test modules)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import ray


def live_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.is_alive()}


def children(pid: int | None = None) -> dict[int, str]:
    """The child processes of ``pid`` (this process: Ray's raylet, GCS,
    workers), each with its name, from /proc."""
    parent = str(os.getpid() if pid is None else pid)
    out: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1 and fields[1] == parent:
            out[int(entry.name)] = stat[stat.find("(") + 1 : stat.rfind(")")]
    return out


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Poll ``predicate`` (a driver-side state with no event to wait on)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.002)


def gate_wait(gate: Any, name: str, timeout: float = 45.0) -> Any:
    """Wait for a body to set ``name`` on the gate (generous: a loaded
    2-core machine may take many seconds to start a Ray worker)."""
    return ray.get(gate.wait.remote(name, timeout), timeout=timeout + 5)


def result_of(future: Future[Any], timeout: float = 30.0) -> Any:
    return future.result(timeout)


def first_started(gate: Any, *calls: str, timeout: float = 45.0) -> str:
    """Which of ``calls`` started first (its body set ``started:<call>``)."""
    name = ray.get(gate.wait_any.remote([f"started:{c}" for c in calls], timeout), timeout=timeout + 5)
    return str(name).split(":", 1)[1]
