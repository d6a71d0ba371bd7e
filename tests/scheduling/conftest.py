"""Every scheduler test runs with the schedule's invariants asserted after
every step (``BatchRun._assert_invariants``): a broken invariant fails the
batch (ToolBatchExecutionError, "internal error") where it breaks."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dsh_actors.scheduling.batch import BatchRun


@pytest.fixture(autouse=True)
def assert_schedule_invariants() -> Iterator[None]:
    BatchRun.check_invariants = True
    try:
        yield
    finally:
        BatchRun.check_invariants = False
