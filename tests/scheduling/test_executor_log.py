"""Session write failures (SPEC sections 6 and 10): the batch fails with
``ToolBatchExecutionError`` only after every started call has settled, and
the error carries what was committed before the failure.

Threads are synchronised with Events; every wait is bounded.
"""

from __future__ import annotations

import errno
import threading
from pathlib import Path
from typing import Any

import pytest

from dsh_actors import Agent, Ask, LogStep, Session, ToolBatchExecutionError, ToolBatchInput, ToolCall
from dsh_actors.scheduling.batch import BatchRun

from .helpers import GUARD, Timeline, calls, counting_body, logged_batch, make_tool, must


class FailingSession(Session):
    """An in-memory session whose append of the event ``fail_on`` names
    (its type and call id) raises ``OSError`` (disk full); every other
    append works."""

    def __init__(self, fail_on: tuple[str, str]) -> None:
        super().__init__()
        self.fail_on = fail_on
        self.failed = threading.Event()

    def append(self, event: Any) -> None:
        if (event["type"], event.get("call_id")) == self.fail_on:
            self.failed.set()
            raise OSError(errno.ENOSPC, "No space left on device")
        super().append(event)


def kinds(session: Session) -> list[tuple[str, str | None]]:
    return [(e["type"], e.get("call_id")) for e in session.events()]


def gated_tools(
    rt: Any, timeline: Timeline, release: threading.Event, started: threading.Event, finished: threading.Event
) -> None:
    """``first``: exclusive and quick; ``gated``: blocks until ``release``;
    ``quick``: returns at once. All record on ``timeline``."""

    def gated(args: Any, ctx: Any) -> str:
        started.set()
        must(release, "the test to release the gated call")
        finished.set()
        return "gated"

    rt.tools.register(make_tool("first", counting_body(timeline, lambda a, c: "first"), classifier=None))
    rt.tools.register(make_tool("gated", counting_body(timeline, gated)))
    rt.tools.register(make_tool("quick", counting_body(timeline, lambda a, c: "quick")))


def test_a_session_write_failure_raises_only_after_every_started_call_settled_with_the_committed_results(
    rt: Any,
) -> None:
    timeline = Timeline()
    release, started, finished = threading.Event(), threading.Event(), threading.Event()
    gated_tools(rt, timeline, release, started, finished)
    # The tool/call of c2 fails while the gated body is running.
    session = FailingSession(fail_on=("tool/call", "c2"))
    settled_while_running: list[bool] = []
    try:
        future = rt.tools.submit(logged_batch(calls("first", "gated", "quick"), session))
        future.add_done_callback(lambda _: settled_while_running.append(not finished.is_set()))
        must(session.failed, "the session write to fail")
        must(started, "the gated call to start")
        assert not future.done()
    finally:
        release.set()
    with pytest.raises(ToolBatchExecutionError) as info:
        future.result(GUARD)
    assert settled_while_running == [False], "the batch failed while a started call was still running"
    err = info.value
    assert [r.call_id for r in err.results] == ["c0"]
    assert err.results[0].result.value == "first"
    assert isinstance(err.__cause__, OSError)
    assert kinds(session) == [
        ("tool/batch", None),
        ("tool/call", "c0"),
        ("tool/start", "c0"),
        ("tool/result", "c0"),
        ("tool/call", "c1"),
        ("tool/start", "c1"),
    ]


def test_execute_raises_the_batch_error_carrying_the_results_committed_before_a_failed_result_write(
    rt: Any,
) -> None:
    rt.tools.register(make_tool("t", lambda args, ctx: f"v{args['i']}"))
    session = FailingSession(fail_on=("tool/result", "c1"))
    with pytest.raises(ToolBatchExecutionError) as info:
        rt.tools.execute(logged_batch(calls("t", "t", "t"), session))
    err = info.value
    assert [r.call_id for r in err.results] == ["c0"]
    assert err.results[0].result.value == "v0"
    assert "session" in str(err)
    assert [e["type"] for e in session.events() if e["type"] != "tool/start"] == ["tool/batch"] + ["tool/call"] * 3 + [
        "tool/result"
    ]


def test_a_call_whose_tool_call_event_could_not_be_written_is_not_run(rt: Any) -> None:
    """A call must be in the log before it runs: a body that ran without its
    ``tool/call`` on record could not be repaired after a crash."""
    timeline = Timeline()
    timeline.listen(rt)
    rt.tools.register(make_tool("first", counting_body(timeline), classifier=None))
    rt.tools.register(make_tool("quick", counting_body(timeline)))
    session = FailingSession(fail_on=("tool/call", "c1"))
    with pytest.raises(ToolBatchExecutionError):
        rt.tools.execute(logged_batch(calls("first", "quick"), session))
    assert "c1" not in timeline.starts, "c1 ran although its tool/call was never logged"


def test_no_call_starts_after_a_session_write_failure(rt: Any) -> None:
    timeline = Timeline()
    timeline.listen(rt)
    release, started, finished = threading.Event(), threading.Event(), threading.Event()
    gated_tools(rt, timeline, release, started, finished)
    session = FailingSession(fail_on=("tool/call", "c2"))  # while c1 runs
    try:
        future = rt.tools.submit(logged_batch(calls("first", "gated", "quick", "quick", "first"), session))
        must(session.failed, "the session write to fail")
    finally:
        release.set()
    with pytest.raises(ToolBatchExecutionError):
        future.result(GUARD)
    assert set(timeline.starts) == {"c0", "c1"}, "calls started after the session failed"
    assert set(timeline.pre) == {"c0", "c1"}, "calls were prepared after the session failed"


def test_a_session_closed_mid_batch_fails_the_batch_and_the_file_can_be_repaired(rt: Any, tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    session = Session(path)

    def closer(args: Any, ctx: Any) -> str:
        session.close()
        return "closed"

    rt.tools.register(make_tool("closer", closer, classifier=None))
    rt.tools.register(make_tool("after", lambda args, ctx: "after"))
    batch = ToolBatchInput(
        calls=calls("closer", "after"), agent=Agent("a", session=session), log=LogStep(turn=1, step=1)
    )
    with pytest.raises(ToolBatchExecutionError) as info:
        rt.tools.execute(batch)
    assert info.value.results == ()

    reopened = Session.open(path)
    try:
        assert kinds(reopened) == [("tool/batch", None), ("tool/call", "c0"), ("tool/start", "c0")]
        repaired = reopened.repair()
        assert [(e["type"], e["call_id"]) for e in repaired] == [("tool/result", "c0")]
        assert reopened.pending_calls() == []
    finally:
        reopened.close()


def test_a_call_whose_start_could_not_be_written_does_not_run_and_the_batch_fails(rt: Any) -> None:
    """The body runs only once its ``tool/start`` is on record: a recovery
    would otherwise run again a call that had already run."""
    timeline = Timeline()
    timeline.listen(rt)
    rt.tools.register(make_tool("first", counting_body(timeline), classifier=None))
    session = FailingSession(fail_on=("tool/start", "c1"))
    with pytest.raises(ToolBatchExecutionError) as info:
        rt.tools.execute(logged_batch(calls("first", "first", "first"), session))
    assert "c1" not in timeline.starts and "c2" not in timeline.starts
    assert isinstance(info.value.__cause__, OSError)
    assert [r.call_id for r in info.value.results] == ["c0"]
    # Nothing is written after the failure: c1 stays open, never started.
    assert kinds(session)[-2:] == [("tool/result", "c0"), ("tool/call", "c1")]


def test_a_batch_whose_tool_batch_could_not_be_written_runs_nothing(rt: Any) -> None:
    timeline = Timeline()
    timeline.listen(rt)
    rt.tools.register(make_tool("quick", counting_body(timeline)))
    session = FailingSession(fail_on=("tool/batch", None))  # type: ignore[arg-type]
    with pytest.raises(ToolBatchExecutionError) as info:
        rt.tools.execute(logged_batch(calls("quick", "quick"), session))
    assert not timeline.starts and not timeline.pre
    assert info.value.results == ()
    assert session.events() == []


def test_a_batch_whose_ending_breaks_fails_with_the_bug_as_its_cause_and_its_committed_results(
    rt: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Boom(Exception):
        pass

    def broken(self: Any, results: Any) -> Any:
        raise Boom("the suspension could not be written")

    monkeypatch.setattr(BatchRun, "_suspend", broken)
    rt.tools.register(make_tool("t", lambda args, ctx: "ok"))
    rt.events.on("tools/pre-execute", lambda e, next_: Ask(reason="r") if e.call_id == "c1" else next_())
    rt.approvals.set(lambda request: "deferred")
    with pytest.raises(ToolBatchExecutionError) as info:
        rt.tools.execute(ToolBatchInput(calls=[ToolCall("c0", "t", "{}"), ToolCall("c1", "t", "{}")], agent=Agent("a")))
    error = info.value
    assert "internal error: Boom: the suspension could not be written" in str(error)
    assert isinstance(error.__cause__, Boom)  # kept, as for a bug the run itself caught
    assert [item.call_id for item in error.results] == ["c0"]


def test_no_call_prepared_ahead_starts_once_a_log_write_failed(rt: Any) -> None:
    """c0's ``tool/result`` cannot be written while calls wait prepared
    ahead of a free slot. c0's call actor may take c2 before the failure
    (as c0 ends), never after it: c3 and the calls after it never start
    (ABORTED_BEFORE_DISPATCH), so no body starts once the batch knows its
    log is broken."""
    timeline = Timeline()
    timeline.listen(rt)
    session = FailingSession(fail_on=("tool/result", "c0"))
    release_c0, release = threading.Event(), threading.Event()
    c1_running, c3_prepared = threading.Event(), threading.Event()

    def work(args: Any, ctx: Any) -> str:
        i = args["i"]
        if i == 0:
            must(release_c0, "the test to release c0")
        elif i == 1:
            c1_running.set()
            must(release, "the test to release c1")
        elif i == 2:
            must(session.failed, "c0's tool/result write to fail")
        return "v"

    def note(execution: Any, next_: Any) -> Any:
        if execution.call_id == "c3":
            c3_prepared.set()
        return next_()

    rt.tools.register(make_tool("t", counting_body(timeline, work)))
    rt.events.on("tools/pre-execute", note)
    future = rt.tools.submit(logged_batch(calls(*["t"] * 6), session, max_parallel_tool_calls=2))
    try:
        must(c1_running, "c1 to run")
        must(c3_prepared, "c3 to be prepared ahead")
        release_c0.set()
        must(session.failed, "c0's tool/result write to fail")
    finally:
        release_c0.set()
        release.set()
    with pytest.raises(ToolBatchExecutionError) as raised:
        future.result(GUARD)
    assert {"c0", "c1"} <= set(timeline.starts) <= {"c0", "c1", "c2"}, "a call started after the log failed"
    results = raised.value.partial.results
    assert [r.result.error.info.code for r in results[3:]] == ["ABORTED_BEFORE_DISPATCH"] * 3
