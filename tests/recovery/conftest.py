"""Fixtures shared by the recovery tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from scheduling.helpers import assert_no_new_threads, live_threads

from dsh_actors import ToolRuntime


@pytest.fixture
def runtime_pair() -> Iterator[tuple[ToolRuntime, ToolRuntime]]:
    """Two runtimes: the one whose step is cut short (a crash) and the one
    that finishes it (a recovery, a resume)."""
    before = live_threads()
    first, second = ToolRuntime().start(), ToolRuntime().start()
    try:
        yield first, second
    finally:
        first.stop()
        second.stop()
    assert_no_new_threads(before)
