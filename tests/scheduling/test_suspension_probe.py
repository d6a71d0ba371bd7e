"""Suspend and resume, from a probe of their edges: a deferred call whose
suspension lost its ``approval`` cannot be deferred again (it would run
unapproved), and a logged suspension whose calls' arguments are not lossless
JSON still agrees with its log (which keeps a stand-in for them)."""

from __future__ import annotations

import json
from concurrent.futures import Future
from typing import Any

import pytest

from dsh_actors import Agent, Ask, LogStep, Session, ToolBatchInput, ToolBatchResult, ToolCall
from dsh_actors.scheduling.messages import CallStart
from dsh_actors.scheduling.start import continue_batch

from .helpers import GUARD, code_of, events_of, make_tool, started_runtime


def install(rt: Any, ran: list[str]) -> None:
    """ "safe" (parallel) and "excl" (exclusive) tools recording their runs;
    call "c0" asks for approval, and the service defers every question."""

    def body(args: Any, ctx: Any) -> str:
        ran.append(ctx.call_id)
        return f"done {ctx.call_id}"

    rt.tools.register(make_tool("safe", body))
    rt.tools.register(make_tool("excl", body, classifier=None))
    rt.events.on(
        "tools/pre-execute", lambda execution, next_: Ask(reason="approve?") if execution.call_id == "c0" else next_()
    )
    rt.approvals.set(lambda request: "deferred")


# ---------------------------------------------------------------------------
# A deferred call needs the Ask it waits on
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "approval",
    [
        "missing",
        None,
        [],
        "approve?",
        {"reason": 5, "display_reason": None},
        {"reason": "approve?", "display_reason": ["May I?"]},
        {"reason": "approve?", "display_reason": {"en": 5}},
    ],
)
@pytest.mark.parametrize("answer", ["deferred", "allowed-once"])
def test_a_deferred_call_whose_approval_is_missing_or_malformed_is_refused_and_nothing_runs(
    approval: Any, answer: str
) -> None:
    ran: list[str] = []
    with started_runtime() as rt:
        install(rt, ran)
        suspended = rt.tools.execute(
            ToolBatchInput(calls=(ToolCall(id="c0", name="safe", arguments="{}"),), agent=Agent("main"))
        )
        suspension = json.loads(json.dumps(suspended.suspension))
        if approval == "missing":
            del suspension["calls"][0]["approval"]
        else:
            suspension["calls"][0]["approval"] = approval

        with pytest.raises(ValueError, match=r"not a suspension: calls\[0\]\.approval"):
            rt.tools.resume(suspension, {"c0": answer})
        assert ran == []

        # Nothing was claimed: the suspension as the batch returned it resumes.
        again = rt.tools.resume(suspended.suspension, {"c0": "deferred"})
        assert again.pending == ("c0",) and ran == []
        done = rt.tools.resume(again.suspension, {"c0": "allowed-once"})

    assert [item.result.content[0].text for item in done.results] == ["done c0"]
    assert ran == ["c0"]


def test_a_continued_call_deferred_again_without_its_ask_is_refused_and_does_not_run() -> None:
    ran: list[str] = []
    with started_runtime() as rt:
        install(rt, ran)
        reply: Future[ToolBatchResult] = Future()
        batch = ToolBatchInput(calls=(ToolCall(id="c1", name="safe", arguments="{}"),), agent=Agent("main"))
        continue_batch(rt, batch, [CallStart(answer="deferred")], reply)
        with pytest.raises(ValueError, match=r'a CallStart deferred again \("deferred"\) needs the Ask'):
            reply.result(GUARD)

        # With its Ask, it waits for a decision (and does not run).
        reply2: Future[ToolBatchResult] = Future()
        continue_batch(rt, batch, [CallStart(answer="deferred", ask=Ask(reason="approve?"))], reply2)
        assert reply2.result(GUARD).pending == ("c1",)
    assert ran == []


# ---------------------------------------------------------------------------
# Arguments that are not lossless JSON, against the log
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["pending", "settled"])
@pytest.mark.parametrize("arguments", ['{"a": "\ud800"}', "\udfff"])
def test_a_logged_suspension_whose_call_has_arguments_that_are_not_lossless_json_resumes(
    where: str, arguments: str
) -> None:
    # A call whose arguments text holds a lone surrogate is logged with a
    # stand-in text; the suspension holds the text itself. Unchanged, the
    # suspension agrees with its log and resumes.
    ran: list[str] = []
    session = Session()
    agent = Agent("main", session=session)
    first = "excl" if where == "pending" else "safe"
    with started_runtime() as rt:
        install(rt, ran)
        batch = ToolBatchInput(
            calls=(ToolCall(id="c0", name=first, arguments="{}"), ToolCall(id="c1", name="safe", arguments=arguments)),
            agent=agent,
            log=LogStep(turn=1, step=1),
        )
        suspended = rt.tools.execute(batch)
        assert [(e["id"], e["state"]) for e in suspended.suspension["calls"]] == [("c0", "deferred"), ("c1", where)]

        done = rt.tools.resume(json.loads(json.dumps(suspended.suspension)), {"c0": "allowed-once"}, agent=agent)

    assert done.pending == ()
    assert done.results[0].result.content[0].text == "done c0"
    assert code_of(done.results[1].result) == "INVALID_ARGS"
    assert ran == ["c0"]
    assert [e["call_id"] for e in events_of(session, "tool/call")] == ["c0", "c1"]
    assert sorted(e["call_id"] for e in events_of(session, "tool/result")) == ["c0", "c1"]
    assert session.awaiting_approval() == []
