"""A step finished by a runtime that lacks one of its tools: ``recover`` (and
a logged ``resume``) refuses, before anything is written, a call that would
run a tool its agent could call when the step was logged (the step's
``tool/batch`` records the calls it could not: ``unknown``), rather than
settling it ``UNKNOWN_TOOL`` for good; a call the model made to a tool it
did not have settles ``UNKNOWN_TOOL`` as before, and so does every call of
a log written before ``tool/batch`` recorded that."""

from __future__ import annotations

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
    ToolRuntime,
    define_tool,
)
from dsh_actors.errors import InvalidStateError
from dsh_actors.scheduling.executor import NativeExecutor
from dsh_actors.session import INTERRUPTED


def tool(name: str, ran: list[str], **options: Any) -> Any:
    def body(args: Any, ctx: Any) -> str:
        ran.append(ctx.call_id)
        return f"{ctx.name} {ctx.call_id}"

    return define_tool(name=name, description=name, parameters={}, output=OUTPUT, execute=body, **options)


class Hold:
    """``hold``: an exclusive tool whose body waits until released (the
    calls after it wait, unlogged beyond the ``tool/batch``)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def register(self, rt: ToolRuntime) -> None:
        def body(args: Any, ctx: Any) -> str:
            self.entered.set()
            assert self.release.wait(GUARD)
            return "held"

        rt.tools.register(
            define_tool(
                name="hold", description="hold", parameters={}, output=OUTPUT, execute=body, is_concurrency_safe=False
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
    hold.register(crashing)
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
            "(rt.tools.register, or mount the MCP server or set the executor that provides it; pass the step's "
            "tool_set= for a conditional one) and recover again (nothing was run or written)"
        )
        assert crashed.read_bytes() == written

        recovering.tools.register(tool("write", ran))
        result = recovering.tools.recover(agent, 1, 1)
    # hold started (its body may have run): INTERRUPTED, present or not.
    assert result.results[0].result == INTERRUPTED
    assert outcome(result)[1:] == [("c1", "write c1"), ("c2", "UNKNOWN_TOOL")]
    assert ran == ["c1"]


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


def test_a_conditional_tool_is_refused_without_the_step_s_tool_set_and_runs_with_it(
    runtime_pair: Any, tmp_path: Path
) -> None:
    crashing, recovering = runtime_pair
    hold, ran = Hold(), []
    hold.register(crashing)
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
    hold.register(crashing)
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
    hold.register(crashing)
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
