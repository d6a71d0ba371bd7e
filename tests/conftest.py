"""Shared fixtures: a started runtime that is always stopped, and a check
that no test leaves a thread behind."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "dsh",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("dsh")


def live_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.is_alive()}


def assert_no_new_threads(before: set[threading.Thread]) -> None:
    """Every thread started since ``before`` has ended."""
    leaked = [t for t in live_threads() - before if not t.name.startswith("pytest_timeout")]
    for thread in leaked:  # stop() joins; this only absorbs a thread's last instructions
        thread.join(5.0)
    leaked = [t.name for t in leaked if t.is_alive()]
    assert not leaked, f"threads left running: {leaked}"


LIBRARY_LOGGERS = ("dsh_actors", "policies", "executors")


class LogRecords:
    """The loguru records a sink took (thread-safe): ``items``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: list[Any] = []

    def sink(self, message: Any) -> None:
        with self.lock:
            self.items.append(message.record)


@pytest.fixture
def log_records(library_logs: None) -> Iterator[Callable[[str], LogRecords]]:
    """``log_records(level)``: the records the libraries log at ``level`` or
    above from then on, until the test ends."""
    from loguru import logger

    handles: list[int] = []

    def capture(level: str) -> LogRecords:
        records = LogRecords()
        handles.append(logger.add(records.sink, level=level))
        return records

    try:
        yield capture
    finally:
        for handle in handles:
            logger.remove(handle)


@pytest.fixture
def errors(library_logs: None) -> Iterator[list[str]]:
    """The libraries' ERROR log messages while the test runs."""
    from loguru import logger

    messages: list[str] = []
    sink = logger.add(lambda message: messages.append(message.record["message"]), level="ERROR")
    try:
        yield messages
    finally:
        logger.remove(sink)


@pytest.fixture
def library_logs() -> Iterator[None]:
    """The libraries' loguru messages on (they are disabled at import, as a
    library's should be), and off again afterwards. Tests that capture log
    records with a sink of their own use it."""
    from loguru import logger

    for name in LIBRARY_LOGGERS:
        logger.enable(name)
    try:
        yield
    finally:
        for name in LIBRARY_LOGGERS:
            logger.disable(name)


@pytest.fixture
def runtime() -> Iterator[object]:
    """A started ``ToolRuntime``; stopped afterwards, leaving no thread."""
    from dsh_actors.runtime import ToolRuntime

    before = live_threads()
    rt = ToolRuntime().start()
    try:
        yield rt
    finally:
        rt.stop()
    assert_no_new_threads(before)


@pytest.fixture
def rt(runtime: object) -> object:
    return runtime
