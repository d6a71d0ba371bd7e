"""Deferred approvals (issue 24, items 1, 2 and 4): an approval service
answers ``"deferred"``; the batch runs what does not depend on the deferred
call and returns at once with ``pending`` and a JSON ``suspension``;
``rt.tools.resume`` finishes it, in the same runtime or another one (here
also another process), exactly once."""

from __future__ import annotations

import asyncio
import enum
import json
import subprocess
import sys
import textwrap
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh_actors import (
    AbortController,
    Agent,
    Ask,
    LogStep,
    Session,
    ToolBatchInput,
    ToolCall,
    ToolExecutionInput,
    ToolRuntime,
)
from dsh_actors.cli import main as cli_main
from dsh_actors.errors import InvalidStateError

from .helpers import GUARD, code_of, events_of, make_tool, started_runtime

# ---------------------------------------------------------------------------
# A small world: "safe" (parallel) and "excl" (exclusive) tools whose bodies
# record their runs; a pre-execute listener that asks for the calls whose
# arguments say so; an approval service that defers every question.
# ---------------------------------------------------------------------------


class World:
    def __init__(self) -> None:
        self.ran: list[str] = []
        self.results: list[str] = []  # call ids, one per tools/result


def install(rt: ToolRuntime, world: World, *, service: Any = None) -> None:
    def body(args: Any, ctx: Any) -> str:
        world.ran.append(ctx.call_id)
        return f"done {ctx.call_id}"

    rt.tools.register(make_tool("safe", body))
    rt.tools.register(make_tool("safe2", body))
    rt.tools.register(make_tool("excl", body, classifier=None))

    def ask_when_told(execution: Any, next_: Any) -> Any:
        if execution.arguments.get("ask"):
            return Ask(reason="a person must approve", display_reason={"en": "May I?"})
        return next_()

    rt.events.on("tools/pre-execute", ask_when_told)
    rt.events.on("tools/result", lambda execution, result: world.results.append(execution.call_id))
    rt.approvals.set(service if service is not None else (lambda request: "deferred"))


def c(call_id: str, name: str = "safe", *, ask: bool = False) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=json.dumps({"ask": ask}))


def roundtrip(value: Any) -> Any:
    return json.loads(json.dumps(value))


def texts(result: Any) -> list[tuple[str, str]]:
    return [(item.call_id, item.result.content[0].text) for item in result.results]


def states(suspension: Any) -> list[tuple[str, str]]:
    return [(entry["id"], entry["state"]) for entry in suspension["calls"]]


# ---------------------------------------------------------------------------
# What runs while a call is deferred
# ---------------------------------------------------------------------------


def test_parallel_calls_behind_a_deferred_call_run_and_an_exclusive_one_waits_with_all_behind_it() -> None:
    world = World()
    with started_runtime() as rt:
        install(rt, world)
        batch = ToolBatchInput(
            calls=(c("c0", ask=True), c("c1"), c("c2", "excl"), c("c3")),
            agent=Agent("main"),
        )
        result = rt.tools.execute(batch)

    assert texts(result) == [("c1", "done c1")]
    assert result.pending == ("c0", "c2", "c3")
    assert world.ran == ["c1"]
    assert world.results == ["c1"]  # deferred and waiting calls emit nothing yet
    suspension = result.suspension
    assert suspension == roundtrip(suspension)  # plain JSON
    assert states(suspension) == [("c0", "deferred"), ("c1", "settled"), ("c2", "pending"), ("c3", "pending")]
    assert suspension["calls"][0]["approval"] == {"reason": "a person must approve", "display_reason": {"en": "May I?"}}
    assert suspension["calls"][2]["waits_for"] == ["c0"]


def test_a_deferred_exclusive_call_is_a_barrier_nothing_behind_it_starts() -> None:
    world = World()
    with started_runtime() as rt:
        install(rt, world)
        batch = ToolBatchInput(calls=(c("c0"), c("c1", "excl", ask=True), c("c2"), c("c3")), agent=Agent("main"))
        result = rt.tools.execute(batch)

    assert texts(result) == [("c0", "done c0")]
    assert result.pending == ("c1", "c2", "c3")
    assert world.ran == ["c0"]


def test_a_complete_batch_has_no_pending_calls_and_no_suspension(rt: Any) -> None:
    world = World()
    install(rt, world)
    result = rt.tools.execute(ToolBatchInput(calls=(c("c0"), c("c1")), agent=Agent("main")))
    assert result.pending == () and result.suspension is None


def test_the_calls_behind_a_deferred_one_commit_in_model_order_among_themselves() -> None:
    world = World()
    session = Session()
    with started_runtime() as rt:
        install(rt, world)
        batch = ToolBatchInput(
            calls=(c("c0"), c("c1", ask=True), c("c2"), c("c3", ask=True), c("c4")),
            agent=Agent("main", session=session),
            log=LogStep(turn=1, step=1),
        )
        result = rt.tools.execute(batch)

    assert [item.call_id for item in result.results] == ["c0", "c2", "c4"]
    assert result.pending == ("c1", "c3")
    assert [e["call_id"] for e in events_of(session, "tool/result")] == ["c0", "c2", "c4"]
    requests = events_of(session, "tool/approval-request")
    assert [e["call_id"] for e in requests] == ["c1", "c3"]
    assert {e["suspension"] for e in requests} == {result.suspension["id"]}
    assert session.pending_calls() == ["c1", "c3"]
    assert session.awaiting_approval() == [("c1", result.suspension["id"]), ("c3", result.suspension["id"])]


# ---------------------------------------------------------------------------
# Resuming: another runtime, a JSON round trip, exactly once
# ---------------------------------------------------------------------------


def test_a_suspension_resumes_in_another_runtime_after_a_json_round_trip() -> None:
    first, second = World(), World()
    with started_runtime() as rt:
        install(rt, first)
        batch = ToolBatchInput(
            calls=(c("c0", ask=True), c("c1"), c("c2", "excl"), c("c3")),
            agent=Agent("main"),
            max_parallel_tool_calls=2,
        )
        suspended = rt.tools.execute(batch)
    text = json.dumps(suspended.suspension)

    with started_runtime() as rt2:
        install(rt2, second)
        result = rt2.tools.resume(json.loads(text), {"c0": "allowed-once"})

    assert texts(result) == [("c0", "done c0"), ("c1", "done c1"), ("c2", "done c2"), ("c3", "done c3")]
    assert result.pending == () and result.suspension is None
    # No call ran twice, none was lost; each emitted tools/result once.
    assert Counter(first.ran + second.ran) == Counter(["c0", "c1", "c2", "c3"])
    assert first.ran == ["c1"]
    assert sorted(first.results + second.results) == ["c0", "c1", "c2", "c3"]


def test_a_rejected_decision_fails_the_call_without_running_it() -> None:
    world = World()
    with started_runtime() as rt:
        install(rt, world)
        post: list[str] = []
        rt.events.on("tools/post-execute", lambda execution, result, next_: post.append(execution.call_id) or next_())
        suspended = rt.tools.execute(ToolBatchInput(calls=(c("c0", ask=True), c("c1")), agent=Agent("main")))
        result = rt.tools.resume(roundtrip(suspended.suspension), {"c0": "rejected"})

    assert result.results[0].result.error.message == 'the user rejected tool "safe"'
    assert "c0" not in world.ran
    assert post == ["c1", "c0"]  # a denial passes through post-execute, as always


def test_a_suspension_resumed_twice_fails_clearly_and_nothing_runs() -> None:
    world = World()
    with started_runtime() as rt:
        install(rt, world)
        suspended = rt.tools.execute(ToolBatchInput(calls=(c("c0", ask=True), c("c1", "excl")), agent=Agent("main")))
        suspension = roundtrip(suspended.suspension)
        rt.tools.resume(suspension, {"c0": "allowed-once"})
        ran = list(world.ran)

        with pytest.raises(RuntimeError, match=r"was resumed already in this runtime: a suspension is resumed once"):
            rt.tools.resume(suspension, {"c0": "allowed-once"})

    assert world.ran == ran == ["c0", "c1"]


def test_a_logged_suspension_is_resumed_once_across_runtimes_that_share_its_log(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    world = World()
    with started_runtime() as rt:
        install(rt, world)
        session = Session(path)
        batch = ToolBatchInput(
            calls=(c("c0", ask=True), c("c1")), agent=Agent("main", session=session), log=LogStep(turn=1, step=1)
        )
        suspension = roundtrip(rt.tools.execute(batch).suspension)
        session.close()

    with started_runtime() as rt2:
        install(rt2, world)
        session2 = Session.open(path)
        result = rt2.tools.resume(suspension, {"c0": "allowed-once"}, agent=Agent("main", session=session2))
        session2.close()
    assert texts(result) == [("c0", "done c0"), ("c1", "done c1")]

    with started_runtime() as rt3:  # a third runtime, which never saw the suspension resumed
        install(rt3, world)
        session3 = Session.open(path)
        with pytest.raises(
            RuntimeError, match=r"was resumed already: the log .* holds its decision for call 'c0' \(allowed-once\)"
        ) as refused:
            rt3.tools.resume(suspension, {"c0": "allowed-once"}, agent=Agent("main", session=session3))
        session3.close()
    # What to do if that resume never returned (it stopped after the decision reached the log).
    assert str(refused.value).endswith(
        "(resume the suspension the last resume returned, if it suspended again; if that resume never returned, "
        "its process or runtime stopped, rt.tools.recover(agent, turn, step) finishes the step)"
    )

    assert world.ran == ["c1", "c0"]
    with Session.open(path) as reopened:
        events = reopened.events()
    assert [(e["type"], e.get("call_id")) for e in events] == [
        ("tool/batch", None),
        ("tool/call", "c0"),
        ("tool/approval-request", "c0"),
        ("tool/call", "c1"),
        ("tool/start", "c1"),
        ("tool/result", "c1"),
        ("tool/suspend", None),
        ("tool/approval", "c0"),
        ("tool/start", "c0"),
        ("tool/result", "c0"),
    ]
    assert events[7]["decision"] == "allowed-once"


def test_an_approval_deferred_again_suspends_again_and_only_the_new_suspension_resumes() -> None:
    world = World()
    session = Session()
    agent = Agent("main", session=session)
    with started_runtime() as rt:
        install(rt, world)
        batch = ToolBatchInput(calls=(c("c0", ask=True), c("c1", "excl")), agent=agent, log=LogStep(turn=3, step=2))
        first = rt.tools.execute(batch).suspension

        again = rt.tools.resume(roundtrip(first), {"c0": "deferred"}, agent=agent)
        assert again.results == ()
        assert again.pending == ("c0", "c1")
        second = again.suspension
        assert second["id"] != first["id"]
        assert states(second) == [("c0", "deferred"), ("c1", "pending")]
        assert second["calls"][0]["approval"]["reason"] == "a person must approve"
        assert world.ran == []

        with pytest.raises(RuntimeError, match="was resumed already"):
            rt.tools.resume(first, {"c0": "allowed-once"}, agent=agent)

        done = rt.tools.resume(roundtrip(second), {"c0": "allowed-once"}, agent=agent)

    assert texts(done) == [("c0", "done c0"), ("c1", "done c1")]
    assert world.ran == ["c0", "c1"]
    kinds = [(e["type"], e.get("decision")) for e in session.events() if e.get("call_id") == "c0"]
    assert kinds == [
        ("tool/call", None),
        ("tool/approval-request", None),
        ("tool/approval", "deferred"),
        ("tool/approval-request", None),
        ("tool/approval", "allowed-once"),
        ("tool/start", None),
        ("tool/result", None),
    ]
    assert [e["type"] for e in session.events()].count("tool/call") == 2  # c0 and c1, once each


def test_a_call_left_out_of_the_decisions_stays_deferred() -> None:
    world = World()
    with started_runtime() as rt:
        install(rt, world)
        suspended = rt.tools.execute(
            ToolBatchInput(calls=(c("c0", ask=True), c("c1", ask=True), c("c2")), agent=Agent("main"))
        )
        result = rt.tools.resume(suspended.suspension, {"c1": "allowed-once"})

    assert [item.call_id for item in result.results] == ["c1", "c2"]
    assert result.pending == ("c0",)
    assert world.ran == ["c2", "c1"]


# ---------------------------------------------------------------------------
# Aborts
# ---------------------------------------------------------------------------


def test_a_resume_aborted_before_it_starts_settles_every_open_call_aborted_and_runs_nothing() -> None:
    world = World()
    session = Session()
    agent = Agent("main", session=session)
    with started_runtime() as rt:
        install(rt, world)
        batch = ToolBatchInput(
            calls=(c("c0", ask=True), c("c1"), c("c2", "excl")), agent=agent, log=LogStep(turn=1, step=1)
        )
        suspended = rt.tools.execute(batch)
        controller = AbortController()
        controller.abort("the user went away")
        result = rt.tools.resume(
            roundtrip(suspended.suspension), {"c0": "allowed-once"}, agent=agent, signal=controller.signal
        )

    assert [(item.call_id, code_of(item.result)) for item in result.results] == [
        ("c0", "ABORTED_BEFORE_DISPATCH"),
        ("c1", None),
        ("c2", "ABORTED_BEFORE_DISPATCH"),
    ]
    assert world.ran == ["c1"]
    assert session.pending_calls() == []
    assert session.awaiting_approval() == []
    assert [e["call_id"] for e in events_of(session, "tool/result")] == ["c1", "c0", "c2"]


def test_an_abort_while_a_call_is_deferred_ends_the_batch_without_a_suspension() -> None:
    world = World()
    controller = AbortController()
    session = Session()

    def service(request: Any) -> str:
        return "deferred"

    with started_runtime() as rt:
        install(rt, world, service=service)

        def abort_then_pass(execution: Any, next_: Any) -> Any:
            if execution.call_id == "c1":
                controller.abort("stop")  # after c0 was deferred, before c1 starts
            return next_()

        rt.events.on("tools/pre-execute", abort_then_pass, prepend=True)
        batch = ToolBatchInput(
            calls=(c("c0", ask=True), c("c1"), c("c2")),
            agent=Agent("main", session=session),
            log=LogStep(turn=1, step=1),
            signal=controller.signal,
        )
        result = rt.tools.execute(batch)

    assert result.suspension is None and result.pending == ()
    assert [(item.call_id, code_of(item.result)) for item in result.results] == [
        ("c0", "ABORTED_BEFORE_DISPATCH"),
        ("c1", "ABORTED_BEFORE_DISPATCH"),
        ("c2", "ABORTED_BEFORE_DISPATCH"),
    ]
    assert world.ran == []
    assert sorted(world.results) == ["c0", "c1", "c2"]
    assert session.pending_calls() == [] and session.awaiting_approval() == []


@pytest.mark.parametrize("logged", [False, True], ids=["unlogged", "logged"])
@pytest.mark.parametrize("asked_on", ["a worker", "the stepping thread"])
def test_a_deferral_answered_once_the_batch_is_aborted_is_not_announced(
    monkeypatch: pytest.MonkeyPatch, asked_on: str, logged: bool
) -> None:
    """The service answers "deferred" after the batch's abort (which it
    made itself: deterministic). The call ends ``ABORTED_BEFORE_DISPATCH``
    and is never announced as deferred: no ``tools/deferred``, no
    ``tool/approval-request`` (which a person would be shown). Asked on a
    worker while the batch commits meanwhile, or on the stepping thread
    when no worker thread can be started."""
    from dsh_actors.scheduling.blocking import BlockingPool

    world = World()
    controller = AbortController()
    session = Session() if logged else None
    heard: list[str] = []
    answered: list[tuple[str, str]] = []
    asked_from: list[str] = []

    def service(request: Any) -> str:
        asked_from.append(threading.current_thread().name)
        controller.abort("the user pressed stop while the person was asked")
        return "deferred"

    def no_thread(self: Any, fn: Any, *args: Any) -> Any:
        raise RuntimeError("can't start new thread")

    with started_runtime() as rt:
        install(rt, world, service=service)
        rt.events.on("tools/deferred", lambda execution, ask: heard.append(execution.call_id))
        rt.events.on("tools/approval", lambda execution, ask, answer: answered.append((execution.call_id, answer)))
        if asked_on == "the stepping thread":
            monkeypatch.setattr(BlockingPool, "submit", no_thread)
        result = rt.tools.execute(
            ToolBatchInput(
                calls=(c("c0", ask=True), c("c1")),
                agent=Agent("main", session=session),
                log=LogStep(turn=1, step=1) if logged else None,
                signal=controller.signal,
            )
        )

    assert asked_from and asked_from[0].startswith("dsh-worker-") == (asked_on == "a worker")
    assert answered == [("c0", "deferred")]  # (the service's answer is published, as any)
    assert heard == []
    assert result.suspension is None and result.pending == ()
    assert [(item.call_id, code_of(item.result)) for item in result.results] == [
        ("c0", "ABORTED_BEFORE_DISPATCH"),
        ("c1", "ABORTED_BEFORE_DISPATCH"),
    ]
    assert world.ran == [] and world.results == ["c0", "c1"]
    if session is not None:
        assert events_of(session, "tool/approval-request") == []
        assert [e["call_id"] for e in events_of(session, "tool/result")] == ["c0", "c1"]
        assert session.pending_calls() == [] and session.awaiting_approval() == []


# ---------------------------------------------------------------------------
# What is checked again at resume
# ---------------------------------------------------------------------------


def test_guards_and_the_registration_are_checked_again_at_resume() -> None:
    world = World()
    with started_runtime() as rt:
        install(rt, world)
        suspended = rt.tools.execute(
            ToolBatchInput(calls=(c("c0", ask=True), c("c1", "safe2", ask=True)), agent=Agent("main"))
        )
        assert states(suspended.suspension) == [("c0", "deferred"), ("c1", "deferred")]

    with started_runtime() as rt2:  # the second runtime: a guard, and no "safe2" any more
        rt2.tools.register(make_tool("safe", lambda args, ctx: "ran"))
        rt2.tools.guard(lambda execution: "closed for the night" if execution.name == "safe" else None)
        suspension = roundtrip(suspended.suspension)
        # safe2 was there as the batch suspended: c1 is refused, not failed UNKNOWN_TOOL for good.
        with pytest.raises(InvalidStateError, match='call "c1" would run tool "safe2"'):
            rt2.tools.resume(suspension, {"c0": "allowed-once", "c1": "allowed-once"})
        result = rt2.tools.resume(suspension, {"c0": "allowed-once", "c1": "rejected"})

    assert result.results[0].result.error.message == "closed for the night"
    assert result.results[1].result.error.message == 'the user rejected tool "safe2"'


def test_a_call_allowed_at_resume_whose_tool_is_replaced_before_its_body_starts_is_asked_about_again() -> None:
    """An ``"allowed-once"`` given at resume stands as an approval given in
    the batch does: for the tool the person was shown. c1, allowed and
    waiting for a call actor (c0 holds the only one), is prepared again
    when c0's body replaces its tool; the person is asked about the new
    tool (here the service defers: the batch suspends again), and c1 runs
    it only once allowed."""
    world = World()
    c1_allowed = threading.Event()
    with started_runtime(max_call_actors=1) as rt:
        install(rt, world)
        rt.tools.guard(lambda execution: c1_allowed.set() if execution.call_id == "c1" else None)
        unregister = rt.tools.register(make_tool("t", lambda args, ctx: "the old t"))

        def replace_t(args: Any, ctx: Any) -> str:
            assert c1_allowed.wait(GUARD), "c1 was never allowed"
            unregister()
            rt.tools.register(make_tool("t", lambda args, ctx: "the new t"))
            return "replaced"

        rt.tools.register(make_tool("replace_t", replace_t))
        calls = (c("c0", "replace_t", ask=True), c("c1", "t", ask=True))
        suspended = rt.tools.execute(ToolBatchInput(calls=calls, agent=Agent("main"), max_parallel_tool_calls=3))
        assert suspended.pending == ("c0", "c1")
        again = rt.tools.resume(suspended.suspension, {"c0": "allowed-once", "c1": "allowed-once"})
        assert texts(again) == [("c0", "replaced")]
        assert again.pending == ("c1",)  # asked about the new t, and deferred
        done = rt.tools.resume(again.suspension, {"c1": "allowed-once"})

    assert texts(done) == [("c0", "replaced"), ("c1", "the new t")]
    assert world.results == ["c0", "c1"]


def test_bad_decisions_are_refused_before_anything_runs_and_the_suspension_stays_resumable() -> None:
    world = World()
    with started_runtime() as rt:
        install(rt, world)
        suspension = rt.tools.execute(
            ToolBatchInput(calls=(c("c0", ask=True), c("c1")), agent=Agent("main"))
        ).suspension
        with pytest.raises(ValueError, match=r"decisions name call 'c1', which does not wait for an approval"):
            rt.tools.resume(suspension, {"c1": "allowed-once"})
        with pytest.raises(ValueError, match=r"the decision for call 'c0' is 'yes please': answer one of"):
            rt.tools.resume(suspension, {"c0": "yes please"})
        with pytest.raises(ValueError, match="not a suspension"):
            rt.tools.resume({"calls": []}, {})
        with pytest.raises(
            TypeError, match=r'a suspension\'s "version" is an int \(this runtime reads 1\), got str \'1\''
        ):
            rt.tools.resume({**suspension, "version": "1"}, {"c0": "allowed-once"})
        with pytest.raises(ValueError, match=r"suspension version 2 is not supported \(this runtime reads 1\)"):
            rt.tools.resume({**suspension, "version": 2}, {"c0": "allowed-once"})
        with pytest.raises(ValueError, match=r'made for agent "main", not agent "other"'):
            rt.tools.resume(suspension, {"c0": "allowed-once"}, agent=Agent("other"))
        assert world.ran == ["c1"]
        result = rt.tools.resume(suspension, {"c0": "allowed-once"})
    assert texts(result) == [("c0", "done c0"), ("c1", "done c1")]


class Decision(enum.StrEnum):
    ALLOW = "allowed-once"
    MAYBE = "maybe"


class MixedDecision(str, enum.Enum):
    REJECT = "rejected"


def test_a_decision_of_a_str_subclass_is_read_as_the_text_it_holds_and_a_bad_one_named_without_its_repr() -> None:
    # (A StrEnum "allowed-once" was refused as "<Decision.ALLOW: 'allowed-once'>".)
    world = World()
    with started_runtime() as rt:
        install(rt, world)
        suspended = rt.tools.execute(ToolBatchInput(calls=(c("c0", ask=True), c("c1", ask=True)), agent=Agent("main")))
        with pytest.raises(ValueError) as caught:
            rt.tools.resume(suspended.suspension, {"c0": Decision.MAYBE})
        assert str(caught.value).startswith("the decision for call 'c0' is 'maybe' (of type Decision): answer one of")
        for bad, shown in ((3, "of type int, not a str"), (None, "None")):
            with pytest.raises(ValueError, match=rf"the decision for call 'c0' is {shown}: answer one of"):
                rt.tools.resume(suspended.suspension, {"c0": bad})
        assert world.ran == []
        done = rt.tools.resume(suspended.suspension, {"c0": Decision.ALLOW, "c1": MixedDecision.REJECT})
    assert texts(done) == [("c0", "done c0"), ("c1", 'Error: the user rejected tool "safe"')]
    assert world.ran == ["c0"]


def test_a_logged_suspension_needs_the_agent_with_its_session() -> None:
    world = World()
    with started_runtime() as rt:
        install(rt, world)
        batch = ToolBatchInput(
            calls=(c("c0", ask=True),), agent=Agent("main", session=Session()), log=LogStep(turn=1, step=1)
        )
        suspension = rt.tools.execute(batch).suspension
        with pytest.raises(ValueError, match="the suspended batch is logged: pass agent= with the session"):
            rt.tools.resume(suspension, {"c0": "allowed-once"})


def test_a_batch_with_log_whose_agent_has_no_session_suspends_unlogged_and_resumes() -> None:
    """The session opts an agent in: with none, log= logs nothing, and the
    suspension is an unlogged one (resumed without a session)."""
    world = World()
    with started_runtime() as rt:
        install(rt, world)
        agent = Agent("main")
        batch = ToolBatchInput(calls=(c("c0", ask=True), c("c1")), agent=agent, log=LogStep(turn=1, step=1))
        suspension = roundtrip(rt.tools.execute(batch).suspension)
        assert suspension["log"] is None
        done = rt.tools.resume(suspension, {"c0": "allowed-once"}, agent=agent)
    assert texts(done) == [("c0", "done c0"), ("c1", "done c1")]


def test_a_nested_call_cannot_be_deferred_and_fails_clearly(rt: Any) -> None:
    world = World()
    install(rt, world)
    result = rt.tools.dispatch(
        ToolExecutionInput(
            call_id="n0", name="safe", arguments={"ask": True}, agent=Agent("main"), signal=AbortController().signal
        )
    )
    assert result.error.message == (
        'tool "safe" requires approval, but the approval service deferred it and a nested call '
        "cannot wait for a decision (only a batch suspends): call the tool as a tool call of its own, not from "
        "code or another tool, for a person to decide"
    )
    assert world.ran == []


def test_resume_async_finishes_the_batch_on_the_awaiting_loop() -> None:
    world = World()
    with started_runtime() as rt:
        install(rt, world)
        suspended = rt.tools.execute(ToolBatchInput(calls=(c("c0", ask=True), c("c1")), agent=Agent("main")))

        async def finish() -> Any:
            return await rt.tools.resume_async(roundtrip(suspended.suspension), {"c0": "allowed-once"})

        result = asyncio.run(asyncio.wait_for(finish(), GUARD))
    assert texts(result) == [("c0", "done c0"), ("c1", "done c1")]


# ---------------------------------------------------------------------------
# The log stays valid: replay and repair
# ---------------------------------------------------------------------------


def test_a_suspended_log_replays_and_repairs_and_a_repaired_call_is_no_longer_resumable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "log.jsonl"
    world = World()
    with started_runtime() as rt:
        install(rt, world)
        session = Session(path)
        agent = Agent("main", session=session)
        batch = ToolBatchInput(calls=(c("c0", ask=True), c("c1")), agent=agent, log=LogStep(turn=1, step=1))
        suspension = rt.tools.execute(batch).suspension

        assert cli_main(["replay", str(path)]) == 0
        out = capsys.readouterr().out
        assert "c0" in out and "c1" in out

        repaired = session.repair()  # a caller that gives up on the person
        assert [(e["call_id"], e["error"]["info"]["code"]) for e in repaired] == [("c0", "INTERRUPTED")]
        with pytest.raises(
            RuntimeError,
            match=r"call 'c0' has no open approval request in the log .*: it was settled without a decision",
        ):
            rt.tools.resume(suspension, {"c0": "allowed-once"}, agent=agent)
        session.close()
    assert world.ran == ["c1"]


# ---------------------------------------------------------------------------
# Another process
# ---------------------------------------------------------------------------

CHILD = textwrap.dedent(
    """
    import json, sys
    from dsh_actors import Agent, Ask, Session, ToolRuntime, define_tool, ToolOutput

    ran = []
    def body(args, ctx):
        ran.append(ctx.call_id)
        return "child " + ctx.call_id

    suspension = json.loads(sys.stdin.read())
    with ToolRuntime() as rt:
        for name, safe in (("safe", True), ("excl", False)):
            rt.tools.register(define_tool(
                name=name, description=name, parameters={"ask": {"type": "boolean"}},
                output=ToolOutput(schema={"type": "string"}), execute=body,
                is_concurrency_safe=(lambda args: True) if safe else None,
            ))
        session = Session.open(sys.argv[1])
        result = rt.tools.resume(suspension, {"c0": "allowed-once"}, agent=Agent("main", session=session))
        session.close()
    print(json.dumps({"ran": ran, "results": [[i.call_id, i.result.content[0].text] for i in result.results]}))
    """
)


def test_a_suspension_finishes_in_another_process_with_the_same_tools(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    world = World()
    with started_runtime() as rt:
        install(rt, world)
        session = Session(path)
        batch = ToolBatchInput(
            calls=(c("c0", ask=True), c("c1"), c("c2", "excl")),
            agent=Agent("main", session=session),
            log=LogStep(turn=1, step=1),
        )
        suspended = rt.tools.execute(batch)
        session.close()

    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(path)],
        input=json.dumps(suspended.suspension),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert child.returncode == 0, child.stderr
    report = json.loads(child.stdout)
    assert world.ran == ["c1"]
    assert report["ran"] == ["c0", "c2"]
    assert report["results"] == [["c0", "child c0"], ["c1", "done c1"], ["c2", "child c2"]]
    reopened = Session.open(path)
    assert reopened.pending_calls() == [] and reopened.awaiting_approval() == []
    assert [e["call_id"] for e in events_of(reopened, "tool/result")] == ["c1", "c0", "c2"]
    assert len(events_of(reopened, "tool/call")) == 3
    reopened.close()


def test_a_scoped_service_resumes_its_own_agents_batch() -> None:
    world = World()
    session = Session()
    agent = Agent("main", session=session)
    with started_runtime() as rt:
        install(rt, world)
        scoped = rt.tools.scope(agent)
        suspended = scoped.execute(ToolBatchInput(calls=(c("c0", ask=True),), log=LogStep(turn=1, step=1)))
        result = scoped.resume(roundtrip(suspended.suspension), {"c0": "allowed-once"})
    assert texts(result) == [("c0", "done c0")]
    assert session.pending_calls() == []


# ---------------------------------------------------------------------------
# The rule, over random batches (the schedule's invariants checked after
# every step: tests/scheduling/conftest.py)
# ---------------------------------------------------------------------------


def expected_states(shape: list[tuple[str, bool]]) -> list[str]:
    """What each call is once the batch suspends: a call behind a barrier
    (a deferred exclusive call, or an exclusive call waiting for a deferred
    one) is pending; an exclusive call waits for a deferred call before it."""
    states_: list[str] = []
    deferred_seen = blocked = False
    for name, ask in shape:
        if blocked:
            states_.append("pending")
        elif name == "excl" and deferred_seen:
            states_.append("pending")
            blocked = True
        elif ask:
            states_.append("deferred")
            deferred_seen = True
            blocked = name == "excl"
        else:
            states_.append("settled")
    return states_


@settings(max_examples=25)
@given(
    shape=st.lists(st.tuples(st.sampled_from(["safe", "excl"]), st.booleans()), min_size=1, max_size=7),
    cap=st.integers(min_value=1, max_value=3),
)
def test_what_runs_while_approvals_wait_and_the_resume_finish_every_call_exactly_once(
    shape: list[tuple[str, bool]], cap: int
) -> None:
    calls = tuple(c(f"c{i}", name, ask=ask) for i, (name, ask) in enumerate(shape))
    expected = expected_states(shape)
    first, second = World(), World()
    with started_runtime() as rt:
        install(rt, first)
        result = rt.tools.execute(ToolBatchInput(calls=calls, agent=Agent("main"), max_parallel_tool_calls=cap))
    settled = [call.id for call, state in zip(calls, expected, strict=True) if state == "settled"]
    assert [item.call_id for item in result.results] == settled
    assert sorted(first.ran) == sorted(settled)
    if "deferred" not in expected:
        assert result.suspension is None and result.pending == ()
        return
    assert result.pending == tuple(call.id for call, state in zip(calls, expected, strict=True) if state != "settled")
    assert [state for _, state in states(roundtrip(result.suspension))] == expected

    decisions = {call.id: "allowed-once" for call, state in zip(calls, expected, strict=True) if state == "deferred"}
    with started_runtime() as rt2:
        install(rt2, second, service=lambda request: "allowed-once")
        done = rt2.tools.resume(roundtrip(result.suspension), decisions)
    assert texts(done) == [(call.id, f"done {call.id}") for call in calls]
    assert done.pending == ()
    assert Counter(first.ran + second.ran) == Counter(call.id for call in calls)


def test_deps_are_given_again_at_resume_since_the_suspension_cannot_hold_them() -> None:
    seen: list[Any] = []
    with started_runtime() as rt:
        install(rt, World())
        rt.tools.register(make_tool("deps", lambda args, ctx: seen.append(ctx.deps) or "ok"))
        first = rt.tools.execute(
            ToolBatchInput(
                calls=(ToolCall(id="c0", name="deps", arguments='{"ask": true}'),), agent=Agent("main"), deps="db-1"
            )
        )
        rt.tools.resume(roundtrip(first.suspension), {"c0": "allowed-once"}, deps="db-2")
    assert seen == ["db-2"]


def test_tools_deferred_observers_hear_of_each_deferred_call_in_the_callers_context() -> None:
    import contextvars

    request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="none")
    world = World()
    heard: list[tuple[str, str, str]] = []
    with started_runtime() as rt:
        install(rt, world)
        rt.events.on(
            "tools/deferred", lambda execution, ask: heard.append((execution.call_id, ask.reason, request_id.get()))
        )
        request_id.set("req-7")
        result = rt.tools.execute(
            ToolBatchInput(calls=(c("c0", ask=True), c("c1"), c("c2", ask=True)), agent=Agent("main"))
        )
        assert result.pending == ("c0", "c2")
        assert heard == [("c0", "a person must approve", "req-7"), ("c2", "a person must approve", "req-7")]
        assert world.results == ["c1"]  # the deferred calls' tools/result comes at resume
        rt.tools.resume(roundtrip(result.suspension), {"c0": "allowed-once", "c2": "rejected"})
    assert len(heard) == 2  # a decided call is not deferred again


def test_an_abort_while_a_call_is_deferred_and_a_later_one_runs_ends_the_batch_without_a_suspension() -> None:
    import threading

    world = World()
    controller = AbortController()
    deferred, running = threading.Event(), threading.Event()
    with started_runtime() as rt:
        install(rt, world)

        def slow(args: Any, ctx: Any) -> str:
            running.set()
            ctx.signal.wait(GUARD)
            return "late"

        rt.tools.register(make_tool("slow", slow))
        rt.events.on("tools/deferred", lambda execution, ask: deferred.set())
        future = rt.tools.submit(
            ToolBatchInput(calls=(c("c0", ask=True), c("c1", "slow")), agent=Agent("main"), signal=controller.signal)
        )
        assert deferred.wait(GUARD) and running.wait(GUARD)
        controller.abort("stop")  # c1 then commits last: the abort must still end c0
        result = future.result(GUARD)
    assert result.suspension is None and result.pending == ()
    assert [(item.call_id, code_of(item.result)) for item in result.results] == [
        ("c0", "ABORTED_BEFORE_DISPATCH"),
        ("c1", "ABORTED"),
    ]


@pytest.mark.parametrize("shown", [5, ["en", "x"], {"en": 1}])
def test_an_ask_whose_display_reason_is_not_text_by_language_fails_the_call_clearly(shown: Any) -> None:
    # (Refused as the Ask is made, in the listener: before, only once the call deferred.)
    world = World()
    with started_runtime() as rt:
        install(rt, world)
        rt.events.on(
            "tools/pre-execute",
            lambda execution, next_: Ask(reason="r", display_reason=shown) if execution.call_id == "c1" else next_(),
            prepend=True,
        )
        result = rt.tools.execute(ToolBatchInput(calls=(c("c0"), c("c1"), c("c2")), agent=Agent("main")))
    assert result.pending == () and result.suspension is None
    outcome = result.results[1].result
    assert code_of(outcome) == "POLICY_FAILED"
    assert outcome.error.message.startswith(
        "tools/pre-execute: Ask(display_reason=...) must be the English text (a str) or a mapping of language to text, such as"
    )
    assert sorted(world.ran) == ["c0", "c2"]


def test_a_deferred_ask_whose_display_reason_is_a_str_suspends_with_it_as_the_english_text() -> None:
    # (A str was taken when the Ask was made, then failed the call once it deferred.)
    world = World()
    with started_runtime() as rt:
        install(rt, world)
        rt.events.on(
            "tools/pre-execute",
            lambda execution, next_: Ask(reason="r", display_reason="May I?") if execution.call_id == "c1" else next_(),
            prepend=True,
        )
        result = rt.tools.execute(ToolBatchInput(calls=(c("c0"), c("c1"), c("c2")), agent=Agent("main")))
        assert result.pending == ("c1",)
        assert result.suspension["calls"][1]["approval"] == {"reason": "r", "display_reason": {"en": "May I?"}}
        done = rt.tools.resume(roundtrip(result.suspension), {"c1": "allowed-once"}, agent=Agent("main"))
    assert texts(done) == [("c0", "done c0"), ("c1", "done c1"), ("c2", "done c2")]
    assert sorted(world.ran) == ["c0", "c1", "c2"]


@pytest.mark.parametrize("text", ["[1, 2]", "42", "true"])
def test_a_deferred_call_whose_arguments_are_not_an_object_resumes_to_the_same_intake_error(text: str) -> None:
    world = World()
    with started_runtime() as rt:
        install(rt, world)
        rt.events.on(
            "tools/pre-execute",
            lambda execution, next_: Ask(reason="r") if execution.call_id == "c0" else next_(),
            prepend=True,
        )
        suspended = rt.tools.execute(
            ToolBatchInput(calls=(ToolCall(id="c0", name="safe", arguments=text), c("c1")), agent=Agent("main"))
        )
        # asked before its arguments were read (and, its classifier unable
        # to read them, an exclusive call: c1 waits behind it)
        assert suspended.pending == ("c0", "c1")
        done = rt.tools.resume(roundtrip(suspended.suspension), {"c0": "allowed-once"})
    assert done.pending == ()
    assert [item.call_id for item in done.results] == ["c0", "c1"]
    assert code_of(done.results[0].result) == "INVALID_ARGS"


def test_a_resume_refused_for_a_bad_limit_or_a_closed_log_claims_nothing_and_can_be_retried(tmp_path: Path) -> None:
    world = World()
    path = tmp_path / "log.jsonl"
    with started_runtime() as rt:
        install(rt, world)
        agent = Agent("main", session=Session(path))
        suspended = rt.tools.execute(
            ToolBatchInput(calls=(c("c0", ask=True), c("c1")), agent=agent, log=LogStep(turn=1, step=1))
        )
        bad = roundtrip(suspended.suspension)
        bad["max_parallel_tool_calls"] = 0
        with pytest.raises(ValueError, match="max_parallel_tool_calls must be a positive integer"):
            rt.tools.resume(bad, {"c0": "allowed-once"}, agent=agent)
        closed = Agent("main", session=Session.open(path))
        closed.session.close()
        with pytest.raises(OSError, match="session is closed"):
            rt.tools.resume(roundtrip(suspended.suspension), {"c0": "allowed-once"}, agent=closed)
        done = rt.tools.resume(roundtrip(suspended.suspension), {"c0": "allowed-once"}, agent=agent)
        agent.session.close()
    assert done.pending == () and [item.call_id for item in done.results] == ["c0", "c1"]
    assert sorted(world.ran) == ["c0", "c1"]


def test_a_step_being_resumed_is_not_recovered_beside_it_and_recovers_to_nothing_after(tmp_path: Path) -> None:
    import threading

    world = World()
    running, release = threading.Event(), threading.Event()
    with started_runtime() as rt:
        install(rt, world)

        def charge(args: Any, ctx: Any) -> str:
            world.ran.append(ctx.call_id)
            running.set()
            release.wait(GUARD)
            return "charged"

        rt.tools.register(make_tool("charge", charge, classifier=None))
        agent = Agent("main", session=Session(tmp_path / "log.jsonl"))
        suspended = rt.tools.execute(
            ToolBatchInput(
                calls=(ToolCall(id="c0", name="charge", arguments='{"ask": true}'), c("c1")),
                agent=agent,
                log=LogStep(turn=1, step=1),
            )
        )
        assert suspended.pending == ("c0", "c1")
        resumed: list[Any] = []
        resumer = threading.Thread(
            target=lambda: resumed.append(rt.tools.resume(suspended.suspension, {"c0": "allowed-once"}, agent=agent))
        )
        resumer.start()
        try:
            assert running.wait(GUARD)
            with pytest.raises(Exception, match=r"being run, resumed or recovered already") as refused:
                rt.tools.recover(agent, 1, 1)
            assert type(refused.value).__name__ == "InvalidStateError"
        finally:
            release.set()
            resumer.join(GUARD)
        assert [item.call_id for item in resumed[0].results] == ["c0", "c1"]
        again = rt.tools.recover(agent, 1, 1)  # complete now: nothing runs
        agent.session.close()
    assert [item.call_id for item in again.results] == ["c0", "c1"]
    assert world.ran.count("c0") == 1


# ---------------------------------------------------------------------------
# A call that comes back unrun (its tool changed while it was queued) beside
# a deferred call: the batch still suspends, whichever side the deferred
# call is on
# ---------------------------------------------------------------------------


def _queued_behind_a_running_call(rt: ToolRuntime, world: World, calls: tuple[ToolCall, ...], session: Any) -> Any:
    """Run ``calls`` (the first a "block" call) with one call actor: once the
    block call runs and the deferred call was asked, replace tool "t" by an
    exclusive one, so the calls queued behind the block call come back
    unrun and are prepared again; then let the block call end."""
    import threading

    gate, running, deferred = threading.Event(), threading.Event(), threading.Event()

    def block(args: Any, ctx: Any) -> str:
        running.set()
        gate.wait(30)
        world.ran.append(ctx.call_id)
        return "blocked"

    def body(version: str) -> Any:
        def run(args: Any, ctx: Any) -> str:
            world.ran.append(f"{ctx.call_id} {version}")
            return f"t {version}"

        return run

    rt.tools.register(make_tool("block", block))
    undo = rt.tools.register(make_tool("t", body("v1")))
    rt.events.on("tools/deferred", lambda execution, ask: deferred.set())
    agent = Agent("main", session=session)
    log = None if session is None else LogStep(turn=1, step=1)
    future = rt.tools.submit(ToolBatchInput(calls=calls, agent=agent, log=log))
    assert running.wait(30) and deferred.wait(30)
    undo()
    rt.tools.register(make_tool("t", body("v2"), classifier=None))  # now exclusive
    gate.set()
    return future.result(30)


@pytest.mark.parametrize("logged", [False, True])
def test_a_call_turned_exclusive_while_queued_runs_before_a_deferred_call_behind_it(logged: bool) -> None:
    world = World()
    session = Session() if logged else None
    with started_runtime(max_call_actors=1) as rt:
        install(rt, world)
        calls = (c("p", "block"), c("a", "t"), c("b", ask=True))
        result = _queued_behind_a_running_call(rt, world, calls, session)
        # It hung here: the exclusive call waited for the deferred call behind it.
        assert texts(result) == [("p", "blocked"), ("a", "t v2")]
        assert result.pending == ("b",)
        assert states(result.suspension) == [("p", "settled"), ("a", "settled"), ("b", "deferred")]
        done = rt.tools.resume(
            roundtrip(result.suspension), {"b": "allowed-once"}, agent=Agent("main", session=session)
        )
    assert texts(done) == [("p", "blocked"), ("a", "t v2"), ("b", "done b")]
    assert world.ran == ["p", "a v2", "b"]


@pytest.mark.parametrize("logged", [False, True])
def test_a_call_turned_exclusive_while_queued_behind_a_deferred_call_suspends_pending(logged: bool) -> None:
    world = World()
    session = Session() if logged else None
    with started_runtime(max_call_actors=1) as rt:
        install(rt, world)
        calls = (c("p", "block"), c("b", ask=True), c("a", "t"), c("d"))
        result = _queued_behind_a_running_call(rt, world, calls, session)
        # It hung here: "a" waits for the deferred "b" (it needs every call
        # before it), "d" behind it; nothing else could run.
        assert texts(result) == [("p", "blocked")]
        assert result.pending == ("b", "a", "d")
        assert states(result.suspension) == [("p", "settled"), ("b", "deferred"), ("a", "pending"), ("d", "pending")]
        assert world.ran == ["p"]
        done = rt.tools.resume(
            roundtrip(result.suspension), {"b": "allowed-once"}, agent=Agent("main", session=session)
        )
    assert texts(done) == [("p", "blocked"), ("b", "done b"), ("a", "t v2"), ("d", "done d")]
    assert world.ran == ["p", "b", "a v2", "d"]
    if session is not None:
        calls_logged = [e["call_id"] for e in session.events() if e["type"] == "tool/call"]
        assert sorted(calls_logged) == ["a", "b", "d", "p"]  # once each, though "a" and "d" started twice


def test_the_calls_committed_as_a_batch_suspends_still_see_a_live_signal() -> None:
    """A batch that suspends commits the calls settled behind a call that
    waits for a deferred one as it closes: their post-execute listeners run
    with execution.signal still following the batch's signal (an abort wakes
    a listener waiting on it), not a signal closed for good."""
    import threading

    from dsh_actors import Deny

    from .helpers import calls, must

    with started_runtime(max_call_actors=1) as rt:
        release, blocking_runs, c3_prepared = threading.Event(), threading.Event(), threading.Event()

        def blocking(args: Any, ctx: Any) -> str:
            blocking_runs.set()
            must(release, "the test to release call 1")
            return "b"

        rt.tools.register(make_tool("d", lambda args, ctx: "d"))
        rt.tools.register(make_tool("blocking", blocking))
        dispose_x = rt.tools.register(make_tool("x", lambda args, ctx: "x"))
        rt.tools.register(make_tool("y", lambda args, ctx: "y"))

        def pre(execution: Any, next_: Any) -> Any:
            if execution.name == "d":
                return Ask("ok?")
            if execution.name == "y":
                c3_prepared.set()
                return Deny("no y")
            return next_()

        rt.events.on("tools/pre-execute", pre)
        rt.approvals.set(lambda request: "deferred")
        controller = AbortController()
        woken: list[bool] = []

        def post(execution: Any, result: Any, next_: Any) -> Any:
            if execution.name == "y":
                threading.Thread(target=controller.abort).start()
                woken.append(execution.signal.wait(GUARD))
            return next_()

        rt.events.on("tools/post-execute", post)
        future = rt.tools.submit(
            ToolBatchInput(
                calls=tuple(calls("d", "blocking", "x", "y")),
                signal=controller.signal,
                agent=Agent("a"),
                max_parallel_tool_calls=4,
            )
        )
        must(blocking_runs, "call 1 to run")
        must(c3_prepared, "call 3 to be prepared (call 2 queued behind call 1)")
        dispose_x()
        rt.tools.register(make_tool("x", lambda args, ctx: "x", classifier=None))  # exclusive: call 2 goes back
        release.set()
        result = future.result(GUARD)
        assert result.pending == ("c0", "c2")
        assert woken == [True]
