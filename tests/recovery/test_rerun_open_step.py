"""Running a logged step again while its last run left calls without a
result (a crash, a suspension) is refused, naming the way to finish that
run: the calls' bodies may have run, and a new run would run them again.
A step whose run is finished may run again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from scheduling.helpers import TEXT_OUTPUT as OUTPUT

from dsh_actors import Agent, Ask, LogStep, Session, ToolBatchInput, ToolCall, ToolRuntime, define_tool
from dsh_actors.errors import InvalidStateError
from dsh_actors.session import INTERRUPTED


def charge_tool(rt: ToolRuntime, ran: list[str]) -> None:
    def body(args: Any, ctx: Any) -> str:
        ran.append(ctx.call_id)
        return "charged"

    rt.tools.register(define_tool(name="charge", description="charge", parameters={}, output=OUTPUT, execute=body))


def step_batch(agent: Agent, *ids: str) -> ToolBatchInput:
    return ToolBatchInput(calls=tuple(ToolCall(i, "charge", {}) for i in ids), agent=agent, log=LogStep(1, 1))


def crashed(path: Path) -> None:
    """Step (1, 1): c1 started, then the process died."""
    with Session(path) as session:
        session.append(
            {
                "type": "tool/batch",
                "turn": 1,
                "step": 1,
                "max_parallel_tool_calls": None,
                "calls": [{"call_id": "c1", "name": "charge", "arguments": "{}"}],
                "agent": "a",
            }
        )
        session.append(
            {
                "type": "tool/call",
                "turn": 1,
                "step": 1,
                "call_id": "c1",
                "name": "charge",
                "arguments": {},
                "agent": "a",
            }
        )
        session.append({"type": "tool/start", "call_id": "c1", "turn": 1, "step": 1, "agent": "a"})


def test_running_a_crashed_step_again_is_refused_until_it_is_recovered(rt: Any, tmp_path: Path) -> None:
    ran: list[str] = []
    charge_tool(rt, ran)
    path = tmp_path / "log.jsonl"
    crashed(path)
    with Session.open(path) as session:
        agent = Agent("a", session=session)
        size = len(session)
        with pytest.raises(InvalidStateError) as refused:
            rt.tools.execute(step_batch(agent, "c1"))
        assert str(refused.value) == (
            "step (turn 1, step 1) of agent \"a\" has calls its last run left without a result ('c1'): their "
            "bodies may have run, and running the step again would run them again; finish that run first: "
            "rt.tools.recover(agent, 1, 1) after a crash, rt.tools.resume(suspension, decisions) for a suspended "
            "batch (or session.repair() to close them as failed)"
        )
        assert ran == [] and len(session) == size  # nothing ran, nothing written
        assert rt.tools.recover(agent, 1, 1).results[0].result == INTERRUPTED  # not idempotent: not run again
        assert ran == []
        # Finished: the step may run again (a new run of it).
        assert not rt.tools.execute(step_batch(agent, "c1")).results[0].result.is_error
        assert ran == ["c1"]


def test_a_suspended_step_is_not_run_again_behind_its_suspension(rt: Any) -> None:
    ran: list[str] = []
    charge_tool(rt, ran)
    rt.events.on("tools/pre-execute", lambda execution, next_: Ask(reason="costs money"))
    rt.approvals.set(lambda request: "deferred")
    agent = Agent("a", session=Session())
    suspended = rt.tools.execute(step_batch(agent, "c1"))
    assert suspended.suspension is not None
    with pytest.raises(InvalidStateError, match=r"left without a result \('c1'\).*rt.tools.resume"):
        rt.tools.execute(step_batch(agent, "c1"))
    assert ran == []


def test_another_step_or_another_agents_step_is_not_held_back(rt: Any, tmp_path: Path) -> None:
    ran: list[str] = []
    charge_tool(rt, ran)
    path = tmp_path / "log.jsonl"
    crashed(path)
    with Session.open(path) as session:
        rt.tools.execute(
            ToolBatchInput(calls=(ToolCall("n1", "charge", {}),), agent=Agent("a", session=session), log=LogStep(1, 2))
        )
        rt.tools.execute(step_batch(Agent("b", session=session), "b1"))
        assert ran == ["n1", "b1"]
        assert session.open_calls(1, 1, "a") == ["c1"] and session.open_calls(1, 1, "b") == []
