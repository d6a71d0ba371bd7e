"""A step finished by a runtime that lacks one of its tools: ``recover`` (and
a logged ``resume``) refuses, before anything is written, a call that would
run a tool its agent could call when the step was logged (the step's
``tool/batch`` records the calls it could not: ``unknown``), rather than
settling it ``UNKNOWN_TOOL`` for good; so does a started call whose tool,
missing, cannot say whether it runs again (idempotent) or ends
``INTERRUPTED``. A call the model made to a tool it did not have settles
``UNKNOWN_TOOL`` as before, and so does every call of a log written before
``tool/batch`` recorded that. An unlogged ``resume`` is refused alike, by
the ``unknown`` its suspension records (one made before it did resumes as
before)."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from scheduling.helpers import GUARD
from scheduling.helpers import TEXT_OUTPUT as OUTPUT

from dsh_actors import (
    AbortController,
    Agent,
    Ask,
    LogStep,
    ModelSelection,
    Session,
    ToolActivationContext,
    ToolBatchInput,
    ToolCall,
    ToolRestriction,
    ToolRuntime,
    define_tool,
)
from dsh_actors.errors import InvalidStateError, InvalidValueError
from dsh_actors.scheduling.executor import NativeExecutor
from dsh_actors.session import INTERRUPTED


def tool(name: str, ran: list[str], **options: Any) -> Any:
    def body(args: Any, ctx: Any) -> str:
        ran.append(ctx.call_id)
        return f"{ctx.name} {ctx.call_id}"

    return define_tool(name=name, description=name, parameters={}, output=OUTPUT, execute=body, **options)


class Hold:
    """``hold``: an exclusive tool whose body waits until released (the
    calls after it wait, unlogged beyond the ``tool/batch``). Registered in
    the recovering runtime too: a started call's own tool decides whether
    it runs again (not idempotent: it ends INTERRUPTED)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def register(self, *runtimes: ToolRuntime, idempotent: bool = False) -> None:
        def body(args: Any, ctx: Any) -> str:
            self.entered.set()
            assert self.release.wait(GUARD)
            return "held"

        for rt in runtimes:
            rt.tools.register(
                define_tool(
                    name="hold",
                    description="hold",
                    parameters={},
                    output=OUTPUT,
                    execute=body,
                    is_concurrency_safe=False,
                    idempotent=idempotent,
                )
            )


def crash_copy(rt: ToolRuntime, hold: Hold, batch: ToolBatchInput, log: Path, crashed: Path) -> None:
    """Run ``batch`` (its first call is ``hold``) and copy its log while
    ``hold``'s body runs: the copy is the log a crash there leaves (the
    ``tool/batch``, ``hold``'s ``tool/call`` and ``tool/start``)."""
    future = rt.tools.submit(batch)
    try:
        assert hold.entered.wait(GUARD)
        shutil.copyfile(log, crashed)
    finally:
        hold.release.set()
        future.result(GUARD)


def logged_batch_event(path: Path) -> dict[str, Any]:
    with Session.open(path) as session:
        (event,) = [e for e in session.events() if e["type"] == "tool/batch"]
    return event


def outcome(result: Any) -> list[tuple[str, str]]:
    return [
        (item.call_id, item.result.error.info.code if item.result.error is not None else item.result.content[0].text)
        for item in result.results
    ]


def test_a_call_of_a_tool_the_recovering_runtime_lacks_is_refused_until_it_is_registered(
    runtime_pair: Any, tmp_path: Path
) -> None:
    crashing, recovering = runtime_pair
    hold, ran = Hold(), []
    hold.register(crashing, recovering)
    crashing.tools.register(tool("write", []))
    log, crashed = tmp_path / "log.jsonl", tmp_path / "crashed.jsonl"
    with Session(log) as session:
        calls = (ToolCall("c0", "hold", {}), ToolCall("c1", "write", {}), ToolCall("c2", "nope", {}))
        crash_copy(
            crashing, hold, ToolBatchInput(calls, agent=Agent("a", session=session), log=LogStep(1, 1)), log, crashed
        )
    # The model called "nope", which the agent did not have: the log says so.
    assert logged_batch_event(crashed)["unknown"] == ["c2"]
    written = crashed.read_bytes()

    with Session.open(crashed) as session:
        agent = Agent("a", session=session)
        with pytest.raises(InvalidStateError) as refused:
            recovering.tools.recover(agent, 1, 1)
        assert str(refused.value) == (
            'cannot recover step (turn 1, step 1) of agent "a": call "c1" would run tool "write", which the '
            "agent could call when the step was logged and cannot call in this runtime (not registered, not "
            "visible to the agent, or conditional and not admitted by the tool_set passed): register it "
            "(rt.tools.register, or mount the MCP server or set the executor that provides it; lift the "
            "restriction that hides it from the agent; pass the step's tool_set= for a conditional one) and "
            "recover again (nothing was run or written)"
        )
        assert crashed.read_bytes() == written

        recovering.tools.register(tool("write", ran))
        result = recovering.tools.recover(agent, 1, 1)
    # hold started (its body may have run) and is not idempotent: INTERRUPTED.
    assert result.results[0].result == INTERRUPTED
    assert outcome(result)[1:] == [("c1", "write c1"), ("c2", "UNKNOWN_TOOL")]
    assert ran == ["c1"]


@pytest.mark.parametrize("idempotent", [True, False])
def test_a_started_call_of_a_tool_the_recovering_runtime_lacks_is_refused_until_it_is_registered(
    runtime_pair: Any, tmp_path: Path, idempotent: bool
) -> None:
    # Registered, an idempotent tool runs again and another ends INTERRUPTED:
    # missing, its flag is unknown, so neither is settled (it was INTERRUPTED).
    crashing, recovering = runtime_pair
    hold, ran = Hold(), []
    hold.register(crashing, idempotent=idempotent)
    log, crashed = tmp_path / "log.jsonl", tmp_path / "crashed.jsonl"
    with Session(log) as session:
        batch = ToolBatchInput((ToolCall("c0", "hold", {}),), agent=Agent("a", session=session), log=LogStep(1, 1))
        crash_copy(crashing, hold, batch, log, crashed)
    written = crashed.read_bytes()

    with Session.open(crashed) as session:
        agent = Agent("a", session=session)
        with pytest.raises(InvalidStateError) as refused:
            recovering.tools.recover(agent, 1, 1)
        assert str(refused.value).startswith(
            'cannot recover step (turn 1, step 1) of agent "a": call "c0" would run tool "hold" (it started: it '
            "runs again if its tool is idempotent, else ends INTERRUPTED), which the agent could call when the "
            "step was logged and cannot call in this runtime"
        )
        assert str(refused.value).endswith("and recover again (nothing was run or written)")
        assert crashed.read_bytes() == written

        recovering.tools.register(tool("hold", ran, idempotent=idempotent))
        result = recovering.tools.recover(agent, 1, 1)
    if idempotent:
        assert outcome(result) == [("c0", "hold c0")] and ran == ["c0"]
    else:
        assert result.results[0].result == INTERRUPTED and ran == []


def test_a_tool_a_restriction_hides_from_the_agent_is_refused_naming_the_restriction(tmp_path: Path) -> None:
    """Registered, but hidden from the agent by a restriction of the
    resuming runtime: the refusal names that fix too, not only registering
    it (which would change nothing)."""
    ran: list[str] = []
    log = tmp_path / "log.jsonl"
    with ToolRuntime() as rt:
        rt.tools.register(tool("write", ran))
        rt.events.on("tools/pre-execute", lambda execution, next_: Ask(reason="a person decides"))
        rt.approvals.set(lambda request: "deferred")
        with Session(log) as session:
            batch = ToolBatchInput((ToolCall("c0", "write", {}),), agent=Agent("a", session=session), log=LogStep(1, 1))
            suspension = json.loads(json.dumps(rt.tools.execute(batch).suspension))
    with ToolRuntime() as rt, Session.open(log) as session:
        rt.tools.register(tool("write", ran))
        agent = Agent("a", session=session)
        lift = rt.tools.scope(agent).restrict(ToolRestriction(deny=["write"]))
        with pytest.raises(InvalidStateError) as refused:
            rt.tools.resume(suspension, {"c0": "allowed-once"}, agent=agent)
        assert "lift the restriction that hides it from the agent" in str(refused.value)
        lift()
        done = rt.tools.resume(suspension, {"c0": "allowed-once"}, agent=agent)
    assert outcome(done) == [("c0", "write c0")] and ran == ["c0"]


def test_a_log_that_does_not_record_unknown_calls_settles_a_missing_tool_unknown_as_before(
    rt: Any, tmp_path: Path
) -> None:
    log = tmp_path / "log.jsonl"
    with Session(log) as session:  # written before tool/batch recorded its unknown calls
        session.append(
            {
                "type": "tool/batch",
                "turn": 1,
                "step": 1,
                "max_parallel_tool_calls": None,
                "calls": [{"call_id": "c0", "name": "write", "arguments": "{}"}],
            }
        )
    with Session.open(log) as session:
        assert [c.known for c in session.step_calls(1, 1)] == [None]
        result = rt.tools.recover(Agent("a", session=session), 1, 1)
    assert outcome(result) == [("c0", "UNKNOWN_TOOL")]


def test_a_log_that_does_not_record_unknown_calls_settles_a_started_call_of_a_missing_tool_interrupted(
    rt: Any, tmp_path: Path
) -> None:
    log = tmp_path / "log.jsonl"
    with Session(log) as session:  # written before tool/batch recorded its unknown calls
        for event in (
            {
                "type": "tool/batch",
                "turn": 1,
                "step": 1,
                "max_parallel_tool_calls": None,
                "calls": [{"call_id": "c0", "name": "write", "arguments": "{}"}],
            },
            {"type": "tool/call", "turn": 1, "step": 1, "call_id": "c0", "name": "write", "arguments": {}},
            {"type": "tool/start", "call_id": "c0", "turn": 1, "step": 1},
        ):
            session.append(event)
    with Session.open(log) as session:
        (call,) = session.step_calls(1, 1)
        assert call.started and call.known is None
        result = rt.tools.recover(Agent("a", session=session), 1, 1)
    assert result.results[0].result == INTERRUPTED


def test_a_conditional_tool_is_refused_without_the_step_s_tool_set_and_runs_with_it(
    runtime_pair: Any, tmp_path: Path
) -> None:
    crashing, recovering = runtime_pair
    hold, ran = Hold(), []
    hold.register(crashing, recovering)
    crashing.tools.register(tool("write", []), when=lambda context: True)
    recovering.tools.register(tool("write", ran), when=lambda context: True)
    log, crashed = tmp_path / "log.jsonl", tmp_path / "crashed.jsonl"

    def step(rt: ToolRuntime, agent: Agent) -> Any:
        return rt.tools.resolve(ToolActivationContext(agent, ModelSelection("p", "m"), AbortController().signal))

    with Session(log) as session:
        agent = Agent("a", session=session)
        with step(crashing, agent) as tool_set:
            calls = (ToolCall("c0", "hold", {}), ToolCall("c1", "write", {}))
            batch = ToolBatchInput(calls, agent=agent, tool_set=tool_set, log=LogStep(1, 1))
            crash_copy(crashing, hold, batch, log, crashed)
    assert logged_batch_event(crashed)["unknown"] == []

    with Session.open(crashed) as session:
        agent = Agent("a", session=session)
        with pytest.raises(InvalidStateError, match='call "c1" would run tool "write".*tool_set='):
            recovering.tools.recover(agent, 1, 1)
        with step(recovering, agent) as tool_set:
            result = recovering.tools.recover(agent, 1, 1, tool_set=tool_set)
    assert outcome(result)[1:] == [("c1", "write c1")]
    assert ran == ["c1"]


class OwnTool(NativeExecutor):
    """An executor that provides tool ``own`` itself (as PTC provides ``run_code``)."""

    def __init__(self, ran: list[str]) -> None:
        super().__init__()
        self.own = tool("own", ran)

    def executor_tools(self) -> Any:
        return (self.own,)


def test_an_executor_s_own_tool_counts_as_known_and_is_refused_under_another_executor(
    runtime_pair: Any, tmp_path: Path
) -> None:
    crashing, recovering = runtime_pair
    hold, ran = Hold(), []
    hold.register(crashing, recovering)
    crashing.tools.set_executor(OwnTool([]))
    log, crashed = tmp_path / "log.jsonl", tmp_path / "crashed.jsonl"
    with Session(log) as session:
        calls = (ToolCall("c0", "hold", {}), ToolCall("c1", "own", {}))
        crash_copy(
            crashing, hold, ToolBatchInput(calls, agent=Agent("a", session=session), log=LogStep(1, 1)), log, crashed
        )
    assert logged_batch_event(crashed)["unknown"] == []

    with Session.open(crashed) as session:
        agent = Agent("a", session=session)
        with pytest.raises(InvalidStateError, match='call "c1" would run tool "own"'):
            recovering.tools.recover(agent, 1, 1)
        recovering.tools.set_executor(OwnTool(ran))
        result = recovering.tools.recover(agent, 1, 1)
    assert outcome(result)[1:] == [("c1", "own c1")]
    assert ran == ["c1"]


def test_a_logged_resume_is_refused_a_tool_its_runtime_lacks_unless_the_call_does_not_run(
    runtime_pair: Any, tmp_path: Path
) -> None:
    suspending, resuming = runtime_pair
    ran: list[str] = []
    suspending.tools.register(tool("write", ran))
    suspending.events.on("tools/pre-execute", lambda execution, next_: Ask(reason="a person must approve"))
    suspending.approvals.set(lambda request: "deferred")
    log = tmp_path / "log.jsonl"
    with Session(log) as session:
        suspended = suspending.tools.execute(
            ToolBatchInput((ToolCall("c0", "write", {}),), agent=Agent("a", session=session), log=LogStep(1, 1))
        )
    suspension = suspended.suspension
    assert suspended.pending == ("c0",)
    written = log.read_bytes()

    with Session.open(log) as session:
        agent = Agent("a", session=session)
        with pytest.raises(InvalidStateError) as refused:
            resuming.tools.resume(suspension, {"c0": "allowed-once"}, agent=agent)
        assert str(refused.value).startswith(
            f'cannot resume suspension {suspension["id"]}: call "c0" would run tool "write", which the agent '
            "could call when the step was logged and cannot call in this runtime"
        )
        assert str(refused.value).endswith("and resume again (nothing was run or written)")
        assert log.read_bytes() == written
        # Rejected, the call does not run: its tool is not needed.
        result = resuming.tools.resume(suspension, {"c0": "rejected"}, agent=agent)
    assert result.results[0].result.is_error and ran == []


def test_an_unlogged_resume_is_refused_a_tool_its_runtime_lacks_until_it_is_registered(runtime_pair: Any) -> None:
    # (It ran them as unknown tools: UNKNOWN_TOOL for good, the suspension used up.)
    suspending, resuming = runtime_pair
    for name in ("write", "read"):
        suspending.tools.register(tool(name, []))
    suspending.events.on(
        "tools/pre-execute",
        lambda execution, next_: Ask(reason="a person must approve") if execution.call_id == "c0" else next_(),
    )
    suspending.approvals.set(lambda request: "deferred")
    calls = (ToolCall("c0", "write", {}), ToolCall("c1", "read", {}), ToolCall("c2", "nope", {}))
    suspended = suspending.tools.execute(ToolBatchInput(calls, agent=Agent("a")))
    assert suspended.pending == ("c0", "c1", "c2")
    suspension = json.loads(json.dumps(suspended.suspension))
    assert suspension["unknown"] == ["c2"]

    with pytest.raises(InvalidStateError) as refused:
        resuming.tools.resume(suspension, {"c0": "allowed-once"})
    assert str(refused.value) == (
        f'cannot resume suspension {suspension["id"]}: calls "c0", "c1" would run tools "write", "read", which '
        "the agent could call when the batch suspended and cannot call in this runtime (not registered, not "
        "visible to the agent, or conditional and not admitted by the tool_set passed): register them "
        "(rt.tools.register, or mount the MCP server or set the executor that provides them; lift the "
        "restriction that hides them from the agent; pass the step's tool_set= for a conditional one) and "
        "resume again (nothing was run or written)"
    )
    ran: list[str] = []
    for name in ("write", "read"):
        resuming.tools.register(tool(name, ran))
    result = resuming.tools.resume(suspension, {"c0": "allowed-once"})  # (the refusal did not use it up)
    assert outcome(result) == [("c0", "write c0"), ("c1", "read c1"), ("c2", "UNKNOWN_TOOL")]
    assert ran == ["c0", "c1"]


def test_a_resumed_batch_that_suspends_again_records_the_unknown_calls_its_suspension_recorded(
    runtime_pair: Any,
) -> None:
    # A resume in a runtime that lacks "write" and has "nope" deferred c0
    # again (c1 waits behind it): the new suspension said c0 ("write") was
    # unknown and c1 ("nope", which the model made up) known, so resuming it
    # there ran c0 as an unknown tool (UNKNOWN_TOOL for good) where the
    # first suspension is refused until "write" is registered.
    suspending, resuming = runtime_pair
    suspending.tools.register(tool("write", []))
    resuming.tools.register(tool("nope", []))
    suspending.events.on("tools/pre-execute", lambda execution, next_: Ask(reason="a person must approve"))
    suspending.approvals.set(lambda request: "deferred")
    calls = (ToolCall("c0", "write", {}), ToolCall("c1", "nope", {}))
    first = suspending.tools.execute(ToolBatchInput(calls, agent=Agent("a"))).suspension
    assert first["unknown"] == ["c1"]
    again = resuming.tools.resume(first, {"c0": "deferred"}).suspension
    assert again["unknown"] == ["c1"]
    with pytest.raises(InvalidStateError, match='call "c0" would run tool "write"'):
        resuming.tools.resume(again, {"c0": "allowed-once"})


def made_before_unknown() -> dict[str, Any]:
    """An unlogged suspension as the code made it before it recorded its
    ``unknown`` calls (an application may have stored one)."""
    return {
        "format": "dsh-actors/suspension",
        "version": 1,
        "id": "915ee5ade696440e9532ad32205d35f3",
        "agent": ["a"],
        "log": None,
        "max_parallel_tool_calls": None,
        "calls": [
            {
                "id": "c0",
                "name": "write",
                "arguments": {},
                "state": "deferred",
                "approval": {"reason": "a person must approve", "display_reason": None},
            },
            {"id": "c1", "name": "read", "arguments": {}, "state": "pending", "waits_for": ["c0"]},
        ],
    }


def test_a_suspension_made_before_it_recorded_unknown_calls_resumes_as_before(runtime_pair: Any) -> None:
    complete, lacking = runtime_pair
    ran: list[str] = []
    for name in ("write", "read"):
        complete.tools.register(tool(name, ran))
    result = complete.tools.resume(made_before_unknown(), {"c0": "allowed-once"})
    assert outcome(result) == [("c0", "write c0"), ("c1", "read c1")]
    # Nothing tells a missing tool from one the agent never had: as before.
    lacking.tools.register(tool("write", ran))
    result = lacking.tools.resume(made_before_unknown(), {"c0": "allowed-once"})
    assert outcome(result) == [("c0", "write c0"), ("c1", "UNKNOWN_TOOL")]
    assert ran == ["c0", "c1", "c0"]


@pytest.mark.parametrize("unknown", ["c1", [1], {"c1": True}])
def test_a_suspension_whose_unknown_is_not_a_list_of_call_ids_is_refused(rt: Any, unknown: Any) -> None:
    suspension = {**made_before_unknown(), "unknown": unknown}
    with pytest.raises(InvalidValueError, match="^not a suspension: unknown must be null or a list of call ids$"):
        rt.tools.resume(suspension, {"c0": "allowed-once"})


class Hinting(NativeExecutor):
    """An executor that lets no direct call of ``echo`` run (as PTC sends the
    model to ``run_code``): such a call fails ``UNKNOWN_TOOL`` with a hint."""

    def direct_call_hint(self, name: str) -> str | None:
        return "call it from a program" if name == "echo" else None


def test_a_call_the_executor_s_direct_call_hint_refuses_is_logged_unknown_and_recovers_unknown(
    runtime_pair: Any, tmp_path: Path
) -> None:
    # (It was logged as known, and recovering without echo was refused with
    # "the agent could call it when the step was logged".)
    crashing, recovering = runtime_pair
    hold, ran = Hold(), []
    hold.register(crashing, recovering)
    crashing.tools.register(tool("echo", ran))
    crashing.tools.set_executor(Hinting())
    log, crashed = tmp_path / "log.jsonl", tmp_path / "crashed.jsonl"
    with Session(log) as session:
        calls = (ToolCall("c0", "hold", {}), ToolCall("c1", "echo", {}))
        crash_copy(
            crashing, hold, ToolBatchInput(calls, agent=Agent("a", session=session), log=LogStep(1, 1)), log, crashed
        )
    assert logged_batch_event(crashed)["unknown"] == ["c1"]

    recovering.tools.set_executor(Hinting())
    with Session.open(crashed) as session:
        result = recovering.tools.recover(Agent("a", session=session), 1, 1)
    assert outcome(result)[1:] == [("c1", "UNKNOWN_TOOL")]
    assert ran == []
