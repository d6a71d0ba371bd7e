"""The continuation entry (``scheduling.start.continue_batch``): a batch in
which some calls are settled already (their results given) and the others
run on from a given point of the pipeline, on the one state machine every
batch runs. Resuming a suspension is built on it; so is crash recovery."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest

from dsh_actors import Ask, Session, TextBlock, ToolBatchInput, ToolBatchResult, ToolExecutionSuccess
from dsh_actors.scheduling.messages import CallStart
from dsh_actors.scheduling.start import continue_batch
from dsh_actors.session import call_event

from .helpers import GUARD, call, calls, events_of, logged_batch, make_tool, started_runtime


def text_result(text: str) -> ToolExecutionSuccess:
    return ToolExecutionSuccess(value=text, content=(TextBlock(text),))


def run_continued(rt: Any, batch: ToolBatchInput, starts: list[CallStart]) -> ToolBatchResult:
    reply: Future[ToolBatchResult] = Future()
    continue_batch(rt, batch, starts, reply)
    return reply.result(GUARD)


def test_a_given_result_is_kept_and_nothing_of_its_call_runs_emits_or_logs() -> None:
    ran: list[int] = []
    seen: list[str] = []
    with started_runtime() as rt:
        rt.tools.register(make_tool("t", lambda args, ctx: ran.append(args["i"]) or f"ran {args['i']}"))
        rt.events.on("tools/result", lambda execution, result: seen.append(execution.call_id))
        session = Session()
        given = text_result("from before")
        batch = logged_batch(calls("t", "t", "t"), session)

        result = run_continued(rt, batch, [CallStart(), CallStart(result=given), CallStart()])

    assert [r.call_id for r in result.results] == ["c0", "c1", "c2"]
    assert result.results[1].result is given
    assert sorted(ran) == [0, 2]
    assert seen == ["c0", "c2"]
    assert [e["call_id"] for e in events_of(session, "tool/call")] == ["c0", "c2"]
    assert [e["call_id"] for e in events_of(session, "tool/result")] == ["c0", "c2"]
    assert result.pending == () and result.suspension is None


def test_a_logged_call_is_not_logged_twice_and_gets_its_result() -> None:
    with started_runtime() as rt:
        rt.tools.register(make_tool("t", lambda args, ctx: "done"))
        session = Session()
        session.append(call_event(1, 1, "c0", "t", {"i": 0}))  # started before a crash
        batch = logged_batch([call(0, "t")], session)

        result = run_continued(rt, batch, [CallStart(logged=True)])

    assert result.results[0].result.content[0].text == "done"
    assert [e["type"] for e in session.events()] == ["tool/call", "tool/start", "tool/result"]
    assert session.pending_calls() == []


@pytest.mark.parametrize(("answer", "body_runs"), [("allowed-once", True), ("rejected", False)])
def test_a_given_answer_replaces_the_waterfall_and_the_service(answer: str, body_runs: bool) -> None:
    ran: list[str] = []
    waterfall: list[str] = []
    asked: list[str] = []
    guarded: list[str] = []
    with started_runtime() as rt:
        rt.tools.register(make_tool("t", lambda args, ctx: ran.append("body") or "done"))
        rt.events.on("tools/pre-execute", lambda execution, next_: waterfall.append("pre") or Ask())
        rt.approvals.set(lambda request: asked.append("asked") or "rejected")
        rt.tools.guard(lambda execution: guarded.append("guard") or None)
        batch = logged_batch([call(0, "t")], Session())

        result = run_continued(rt, batch, [CallStart(answer=answer, ask=Ask(reason="why"))])

    assert waterfall == [] and asked == []
    assert ran == (["body"] if body_runs else [])
    assert guarded == (["guard"] if body_runs else [])  # guards run after an allow only
    assert result.results[0].result.is_error is not body_runs


def test_given_results_start_behind_a_barrier_and_commit_in_model_order() -> None:
    order: list[str] = []
    with started_runtime() as rt:
        rt.tools.register(make_tool("x", lambda args, ctx: order.append(f"x{args['i']}") or "x", classifier=None))
        batch = ToolBatchInput(calls=(call(0, "x"), call(1, "x"), call(2, "x")))
        given = text_result("given")

        result = run_continued(rt, batch, [CallStart(), CallStart(result=given), CallStart()])

    assert order == ["x0", "x2"]
    assert [r.call_id for r in result.results] == ["c0", "c1", "c2"]
    assert result.results[1].result is given


def test_a_continuation_needs_one_start_per_call() -> None:
    with started_runtime() as rt:
        rt.tools.register(make_tool("t", lambda args, ctx: "done"))
        reply: Future[ToolBatchResult] = Future()
        continue_batch(rt, ToolBatchInput(calls=(call(0, "t"),)), [], reply)
        with pytest.raises(ValueError, match="one CallStart per call: 0 for 1"):
            reply.result(GUARD)


def test_a_given_result_marked_log_result_is_logged_in_model_order() -> None:
    with started_runtime() as rt:
        rt.tools.register(make_tool("t", lambda args, ctx: "ran"))
        session = Session()
        session.append(call_event(1, 1, "c0", "t", {"i": 0}))
        interrupted = text_result("interrupted")
        batch = logged_batch(calls("t", "t"), session)

        result = run_continued(rt, batch, [CallStart(result=interrupted, log_result=True, logged=True), CallStart()])

    assert [e["type"] + ":" + e["call_id"] for e in session.events()] == [
        "tool/call:c0",
        "tool/result:c0",
        "tool/call:c1",
        "tool/start:c1",
        "tool/result:c1",
    ]
    assert result.results[0].result is interrupted
