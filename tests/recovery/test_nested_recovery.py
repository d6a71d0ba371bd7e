"""Recovering a step whose interrupted call ran a nested logged batch in its
body (``rt.tools.execute`` of another step, whose ``tool/batch`` names the
call as its ``parent``): the nested run's open calls are closed, nothing
that is not idempotent runs twice, and the log holds no open call
afterwards, whichever step is recovered first."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from scheduling.helpers import GUARD
from scheduling.helpers import TEXT_OUTPUT as OUTPUT

from dsh_actors import (
    AbortController,
    Agent,
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
from dsh_actors.session import INTERRUPTED

REPO = Path(__file__).resolve().parents[2]

# A child that runs step 1 (the idempotent "plan") whose body runs step 2
# ("charge", not idempotent, then "lookup"), and kills itself with SIGKILL
# in charge's body once its effect is written.
NESTED_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from dsh_actors import Agent, LogStep, Session, ToolBatchInput, ToolCall, ToolOutput, ToolRuntime, define_tool
    log, effects = sys.argv[1], sys.argv[2]
    output = ToolOutput(schema={"type": "string"})
    with ToolRuntime() as rt:
        def charge(args, ctx):
            with open(effects, "a") as f:
                f.write(ctx.call_id + "\\n")
            os.kill(os.getpid(), signal.SIGKILL)

        def plan(args, ctx):
            rt.tools.execute(ToolBatchInput(
                calls=(ToolCall("i0", "charge", {}), ToolCall("i1", "lookup", {})),
                agent=ctx.agent, log=LogStep(1, 2)))
            return "planned"

        for name, body, idempotent in (("plan", plan, True), ("charge", charge, False), ("lookup", plan, True)):
            rt.tools.register(define_tool(name=name, description=name, parameters={}, output=output,
                                          execute=body, is_concurrency_safe=False, idempotent=idempotent))
        rt.tools.execute(ToolBatchInput(calls=(ToolCall("o1", "plan", {}),),
                                        agent=Agent("a", session=Session(log)), log=LogStep(1, 1)))
    """
)


class Tools:
    """``plan`` (idempotent) runs step 2 of its agent, ``inner`` (the calls
    given), in its body; ``charge`` (not idempotent) and ``lookup``
    (idempotent) record their runs. ``names``: the ones registered now."""

    def __init__(
        self, rt: ToolRuntime, inner: tuple[tuple[str, str], ...], names: tuple[str, ...] = ("plan", "charge", "lookup")
    ) -> None:
        self.rt = rt
        self.ran: list[str] = []
        self.blocking: set[str] = set()  # calls whose body waits for release
        self.entered = threading.Event()  # one of them is running
        self.release = threading.Event()

        def plan(args: Any, ctx: Any) -> str:
            self.ran.append(ctx.call_id)
            batch = ToolBatchInput(
                calls=tuple(ToolCall(i, n, {}) for i, n in inner), agent=ctx.agent, log=LogStep(1, 2)
            )
            result = rt.tools.execute(batch)
            return ";".join(f"{r.call_id}={'error' if r.result.is_error else 'ok'}" for r in result.results)

        def leaf(args: Any, ctx: Any) -> str:
            self.ran.append(ctx.call_id)
            if ctx.call_id in self.blocking:
                self.entered.set()
                assert self.release.wait(GUARD)
            return f"{ctx.name} {ctx.call_id}"

        self.bodies = {"plan": plan, "charge": leaf, "lookup": leaf}
        self.register(*names)

    def register(self, *names: str, idempotent: dict[str, bool] | None = None) -> None:
        """Register ``names`` (``idempotent``: flags other than their own)."""
        flags = {"plan": True, "charge": False, "lookup": True, **(idempotent or {})}
        for name in names:
            self.rt.tools.register(
                define_tool(
                    name=name,
                    description=name,
                    parameters={},
                    output=OUTPUT,
                    execute=self.bodies[name],
                    is_concurrency_safe=False,
                    idempotent=flags[name],
                )
            )


def batch(step: int, *calls: tuple[str, str], parent: dict[str, Any] | None = None) -> dict[str, Any]:
    event = {
        "type": "tool/batch",
        "turn": 1,
        "step": step,
        "max_parallel_tool_calls": None,
        "calls": [{"call_id": i, "name": n, "arguments": "{}"} for i, n in calls],
        "agent": "a",
    }
    if parent is not None:
        event["parent"] = parent
    return event


#: What a nested tool/batch of step 1's o1 names as its parent.
IN_O1 = {"turn": 1, "step": 1, "agent": "a", "call_id": "o1"}


def call(step: int, call_id: str, name: str) -> dict[str, Any]:
    return {
        "type": "tool/call",
        "turn": 1,
        "step": step,
        "call_id": call_id,
        "name": name,
        "arguments": {},
        "agent": "a",
    }


def start(step: int, call_id: str) -> dict[str, Any]:
    return {"type": "tool/start", "call_id": call_id, "turn": 1, "step": step, "agent": "a"}


def done(step: int, call_id: str, text: str) -> dict[str, Any]:
    return {
        "type": "tool/result",
        "call_id": call_id,
        "turn": 1,
        "step": step,
        "is_error": False,
        "content": [{"type": "text", "text": text}],
        "error": None,
        "meta": None,
        "agent": "a",
    }


def crashed_log(path: Path, *events: dict[str, Any]) -> None:
    with Session(path) as session:
        for event in events:
            session.append(event)


def outer_started(*inner: tuple[str, str]) -> tuple[dict[str, Any], ...]:
    """Step 1's plan o1 started, and its body's step 2 logged."""
    return (batch(1, ("o1", "plan")), call(1, "o1", "plan"), start(1, "o1"), batch(2, *inner, parent=IN_O1))


def texts(result: Any) -> list[tuple[str, str]]:
    return [(item.call_id, item.result.content[0].text) for item in result.results]


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_a_call_killed_in_its_nested_batch_is_not_run_again_and_leaves_no_open_call(tmp_path: Path) -> None:
    log, effects = tmp_path / "log.jsonl", tmp_path / "effects"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.run(
        [sys.executable, "-c", NESTED_CHILD, str(log), str(effects)], cwd=REPO, env=env, timeout=GUARD * 3
    )
    assert child.returncode == -signal.SIGKILL
    assert effects.read_text() == "i0\n"
    with Session.open(log) as crashed:
        assert crashed.pending_calls() == ["o1", "i0"]
        nested = [e for e in crashed.events() if e["type"] == "tool/batch" and e["step"] == 2]
        assert [e.get("parent") for e in nested] == [IN_O1]  # the link the body's batch wrote
    with ToolRuntime() as rt, Session.open(log) as session:
        tools = Tools(rt, (("i0", "charge"), ("i1", "lookup")))
        result = rt.tools.recover(Agent("a", session=session), 1, 1)
        # Running plan again would charge again: it is interrupted, as a
        # call that is not idempotent is (it declared itself idempotent).
        assert result.results[0].result == INTERRUPTED
        assert tools.ran == []
        assert session.pending_calls() == []
    assert effects.read_text() == "i0\n"
    written = [json.loads(line) for line in log.read_text().splitlines()][6:]
    assert [(e["type"], e["call_id"], e["step"]) for e in written] == [
        ("tool/result", "i0", 2),  # the nested run's open call, closed first
        ("tool/result", "o1", 1),
    ]
    assert written[0]["error"]["info"]["code"] == "INTERRUPTED"


def test_a_nested_batch_of_idempotent_calls_runs_again_with_its_call_and_its_open_call_is_closed(
    rt: Any, tmp_path: Path
) -> None:
    tools = Tools(rt, (("i0", "lookup"), ("i1", "lookup")))
    path = tmp_path / "log.jsonl"
    crashed_log(
        path,
        *outer_started(("i0", "lookup"), ("i1", "lookup")),
        call(2, "i0", "lookup"),
        start(2, "i0"),
        done(2, "i0", "lookup i0"),
        call(2, "i1", "lookup"),
        start(2, "i1"),  # the crash
    )
    with Session.open(path) as session:
        result = rt.tools.recover(Agent("a", session=session), 1, 1)
        assert texts(result) == [("o1", "i0=ok;i1=ok")]
        assert tools.ran == ["o1", "i0", "i1"]
        assert session.pending_calls() == []
        assert [c.state for c in session.step_calls(1, 2, "a")] == ["settled", "settled"]
        events = session.events()
    closing = events[len(outer_started()) + 5]
    assert (closing["type"], closing["call_id"], closing["step"]) == ("tool/result", "i1", 2)
    assert closing["error"]["info"]["code"] == "INTERRUPTED"


def test_the_nested_step_recovered_first_does_not_let_its_call_charge_again(rt: Any, tmp_path: Path) -> None:
    tools = Tools(rt, (("i0", "charge"), ("i1", "lookup")))
    path = tmp_path / "log.jsonl"
    crashed_log(
        path,
        *outer_started(("i0", "charge"), ("i1", "lookup")),
        call(2, "i0", "charge"),
        start(2, "i0"),  # the crash, in charge
    )
    with Session.open(path) as session:
        agent = Agent("a", session=session)
        inner = rt.tools.recover(agent, 1, 2)
        assert texts(inner) == [("i0", "Error: " + INTERRUPTED.error.message), ("i1", "lookup i1")]
        outer = rt.tools.recover(agent, 1, 1)
        assert outer.results[0].result == INTERRUPTED
        assert tools.ran == ["i1"]  # charge never ran again, nor plan
        assert session.pending_calls() == []


def test_a_call_whose_nested_batch_charged_before_the_crash_is_not_run_again(rt: Any, tmp_path: Path) -> None:
    tools = Tools(rt, (("i0", "charge"), ("i1", "lookup")))
    path = tmp_path / "log.jsonl"
    crashed_log(
        path,
        *outer_started(("i0", "charge"), ("i1", "lookup")),
        call(2, "i0", "charge"),
        start(2, "i0"),
        done(2, "i0", "charge i0"),
        call(2, "i1", "lookup"),
        start(2, "i1"),
        done(2, "i1", "lookup i1"),  # the nested step is complete: the crash came after it
    )
    with Session.open(path) as session:
        result = rt.tools.recover(Agent("a", session=session), 1, 1)
        assert result.results[0].result == INTERRUPTED
        assert tools.ran == []
        assert session.pending_calls() == []


def test_a_nested_step_being_recovered_now_is_not_closed_under_it(rt: Any, tmp_path: Path) -> None:
    tools = Tools(rt, (("i0", "lookup"),))
    tools.blocking.add("i0")
    path = tmp_path / "log.jsonl"
    crashed_log(path, *outer_started(("i0", "lookup")), call(2, "i0", "lookup"), start(2, "i0"))
    with Session.open(path) as session:
        agent = Agent("a", session=session)
        finished: list[Any] = []
        worker = threading.Thread(target=lambda: finished.append(rt.tools.recover(agent, 1, 2)))
        worker.start()
        try:
            assert tools.entered.wait(GUARD)  # step 2's recovery runs i0 again
            size = len(session)
            with pytest.raises(InvalidStateError, match=r"ran step \(turn 1, step 2\) .* wait for it to finish"):
                rt.tools.recover(agent, 1, 1)
            assert len(session) == size  # nothing written
        finally:
            tools.release.set()
            worker.join(GUARD)
        assert texts(finished[0]) == [("i0", "lookup i0")]
        # Once it is done, the step recovers: plan runs again, and so does its nested step.
        assert texts(rt.tools.recover(agent, 1, 1)) == [("o1", "i0=ok")]
        assert session.pending_calls() == []


def test_a_step_this_process_runs_meanwhile_is_not_taken_as_nested(rt: Any, tmp_path: Path) -> None:
    # A step of the same agent logged after the crashed call's start, that
    # no body of it ran (its tool/batch names no parent), is not nested in it.
    tools = Tools(rt, ())
    tools.blocking.add("c1")
    path = tmp_path / "log.jsonl"
    crashed_log(path, batch(1, ("o1", "lookup")), call(1, "o1", "lookup"), start(1, "o1"))
    with Session.open(path) as session:
        agent = Agent("a", session=session)
        calls = (ToolCall("c0", "charge", {}), ToolCall("c1", "lookup", {}))
        live = rt.tools.submit(ToolBatchInput(calls=calls, agent=agent, log=LogStep(1, 2)))
        try:
            assert tools.entered.wait(GUARD)  # step 2 runs, its charge done
            assert texts(rt.tools.recover(agent, 1, 1)) == [("o1", "lookup o1")]
        finally:
            tools.release.set()
            result = live.result(GUARD)
        assert texts(result) == [("c0", "charge c0"), ("c1", "lookup c1")]
        # and after it: the step is complete
        assert texts(rt.tools.recover(agent, 1, 1)) == [("o1", "lookup o1")]
        assert tools.ran == ["c0", "c1", "o1"] and session.pending_calls() == []


def test_a_later_step_that_names_no_parent_is_left_to_its_own_recovery(rt: Any, tmp_path: Path) -> None:
    # Logged after the crashed call's start, but not run by its body (the
    # application ran it, or another thread): it is not nested in o1.
    tools = Tools(rt, ())
    path = tmp_path / "log.jsonl"
    crashed_log(
        path,
        batch(1, ("o1", "lookup")),
        call(1, "o1", "lookup"),
        start(1, "o1"),
        batch(2, ("c0", "charge")),
        call(2, "c0", "charge"),
        start(2, "c0"),
    )
    with Session.open(path) as session:
        agent = Agent("a", session=session)
        assert texts(rt.tools.recover(agent, 1, 1)) == [("o1", "lookup o1")]  # idempotent: runs again
        assert session.pending_calls() == ["c0"]  # step 2's own, untouched
        assert rt.tools.recover(agent, 1, 2).results[0].result == INTERRUPTED
        assert tools.ran == ["o1"] and session.pending_calls() == []


def test_steps_nested_two_deep_are_closed_and_their_charge_is_not_run_again(rt: Any, tmp_path: Path) -> None:
    tools = Tools(rt, ())
    path = tmp_path / "log.jsonl"
    in_i0 = {"turn": 1, "step": 2, "agent": "a", "call_id": "i0"}
    crashed_log(
        path,
        *outer_started(("i0", "lookup")),
        call(2, "i0", "lookup"),
        start(2, "i0"),
        batch(3, ("j0", "charge"), parent=in_i0),
        call(3, "j0", "charge"),
        start(3, "j0"),  # the crash
    )
    with Session.open(path) as session:
        result = rt.tools.recover(Agent("a", session=session), 1, 1)
        assert result.results[0].result == INTERRUPTED
        assert tools.ran == []
        assert session.pending_calls() == []
        closed = [e["call_id"] for e in session.events()[9:]]
    assert closed == ["i0", "j0", "o1"]


def test_a_sub_agents_nested_step_in_the_same_session_is_closed_too(rt: Any, tmp_path: Path) -> None:
    tools = Tools(rt, ())
    path = tmp_path / "log.jsonl"
    sub = [dict(e, agent="sub") for e in (batch(1, ("s0", "charge"), parent=IN_O1), call(1, "s0", "charge"))]
    crashed_log(
        path,
        batch(1, ("o1", "plan")),
        call(1, "o1", "plan"),
        start(1, "o1"),
        *sub,
        dict(start(1, "s0"), agent="sub"),  # the crash
    )
    with Session.open(path) as session:
        result = rt.tools.recover(Agent("a", session=session), 1, 1)
        assert result.results[0].result == INTERRUPTED
        assert tools.ran == []
        assert session.pending_calls() == []
        assert [c.state for c in session.step_calls(1, 1, "sub")] == ["settled"]


def test_a_logged_batch_a_body_runs_names_its_call_as_parent(rt: Any) -> None:
    session = Session()
    agent = Agent("a", session=session)

    def outer(args: Any, ctx: Any) -> str:
        # logged at once, and through an unlogged batch whose call's body logs one
        rt.tools.execute(ToolBatchInput(calls=(ToolCall("n1", "leaf", {}),), agent=ctx.agent, log=LogStep(1, 2)))
        rt.tools.execute(ToolBatchInput(calls=(ToolCall("u1", "middle", {}),), agent=ctx.agent))
        return "done"

    def middle(args: Any, ctx: Any) -> str:
        rt.tools.execute(ToolBatchInput(calls=(ToolCall("n2", "leaf", {}),), agent=ctx.agent, log=LogStep(1, 3)))
        return "middle"

    for name, body in (("outer", outer), ("middle", middle), ("leaf", lambda args, ctx: "leaf")):
        rt.tools.register(define_tool(name=name, description=name, parameters={}, output=OUTPUT, execute=body))
    rt.tools.execute(ToolBatchInput(calls=(ToolCall("o1", "outer", {}),), agent=agent, log=LogStep(1, 1)))
    rt.tools.execute(ToolBatchInput(calls=(ToolCall("n3", "leaf", {}),), agent=agent, log=LogStep(1, 4)))
    parents = {e["step"]: e.get("parent") for e in session.events() if e["type"] == "tool/batch"}
    assert parents == {1: None, 2: IN_O1, 3: IN_O1, 4: None}


def test_a_refused_recovery_writes_nothing_to_the_log(rt: Any, tmp_path: Path) -> None:
    Tools(rt, ())
    path = tmp_path / "log.jsonl"
    crashed_log(path, *outer_started(("i0", "charge")), call(2, "i0", "charge"), start(2, "i0"))
    other = Agent("b")
    wrong = rt.tools.resolve(
        ToolActivationContext(agent=other, model_selection=ModelSelection("p", "m"), signal=AbortController().signal)
    )
    try:
        with Session.open(path) as session:
            size = len(session)
            with pytest.raises(ValueError, match="resolved for agent 'b'"):
                rt.tools.recover(Agent("a", session=session), 1, 1, tool_set=wrong)
            assert len(session) == size  # the nested step's open call is not closed by a refused recovery
            assert session.pending_calls() == ["o1", "i0"]
    finally:
        wrong.dispose()


def test_a_nested_batch_logged_in_another_session_names_no_parent(rt: Any) -> None:
    here, there = Session(), Session()

    def outer(args: Any, ctx: Any) -> str:
        rt.tools.execute(
            ToolBatchInput(calls=(ToolCall("n1", "leaf", {}),), agent=Agent("b", session=there), log=LogStep(1, 2))
        )
        return "done"

    for name, body in (("outer", outer), ("leaf", lambda args, ctx: "leaf")):
        rt.tools.register(define_tool(name=name, description=name, parameters={}, output=OUTPUT, execute=body))
    rt.tools.execute(
        ToolBatchInput(calls=(ToolCall("o1", "outer", {}),), agent=Agent("a", session=here), log=LogStep(1, 1))
    )
    (nested,) = [e for e in there.events() if e["type"] == "tool/batch"]
    assert "parent" not in nested  # (o1 is not in that log: nothing there to name)


def known(event: dict[str, Any]) -> dict[str, Any]:
    """A ``tool/batch`` that records the calls whose tool the agent could not call (none)."""
    return dict(event, unknown=[])


def charge_started(*, recorded: bool = True, also: tuple[tuple[str, str], ...] = ()) -> tuple[dict[str, Any], ...]:
    """Step 1's plan o1 started; its body's step 2 started i0 (charge), and
    the calls ``also``; ``recorded``: the nested tool/batch records its
    unknown calls."""
    nested = batch(2, ("i0", "charge"), *also, parent=IN_O1)
    return (
        known(batch(1, ("o1", "plan"))),
        call(1, "o1", "plan"),
        start(1, "o1"),
        known(nested) if recorded else nested,
        call(2, "i0", "charge"),
        start(2, "i0"),  # the crash, in charge
        *(e for i, n in also for e in (call(2, i, n), start(2, i), done(2, i, f"{n} {i}"))),
    )


@pytest.mark.parametrize("idempotent", [True, False])
def test_a_call_whose_nested_step_started_a_tool_the_runtime_lacks_is_refused_until_it_is_registered(
    rt: Any, tmp_path: Path, idempotent: bool
) -> None:
    # (It ended INTERRUPTED for good: the missing tool counted as not
    # idempotent, where the same tools would run plan again.)
    tools = Tools(rt, (("i0", "charge"),), names=("plan", "lookup"))
    path = tmp_path / "log.jsonl"
    crashed_log(path, *charge_started())
    written = path.read_bytes()
    with Session.open(path) as session:
        agent = Agent("a", session=session)
        with pytest.raises(InvalidStateError) as refused:
            rt.tools.recover(agent, 1, 1)
        assert str(refused.value) == (
            'cannot recover step (turn 1, step 1) of agent "a": call "o1" started and its body ran tool "charge" in '
            'a nested step ("i0" in step (turn 1, step 2): "o1" runs again if every tool it ran is idempotent, else '
            "ends INTERRUPTED), which the agent could call when their steps were logged and cannot call in this "
            "runtime (not registered, not visible to the agent, or conditional and not admitted by the tool_set "
            "passed): register it (rt.tools.register, or mount the MCP server or set the executor that provides it; "
            "lift the restriction that hides it from the agent; pass the step's tool_set= for a conditional one) "
            "and recover again (nothing was run or written)"
        )
        assert path.read_bytes() == written and session.pending_calls() == ["o1", "i0"]

        tools.register("charge", idempotent={"charge": idempotent})
        result = rt.tools.recover(agent, 1, 1)
        assert session.pending_calls() == []
    if idempotent:
        assert texts(result) == [("o1", "i0=ok")]  # plan ran again, and so did its nested step
        assert tools.ran == ["o1", "i0"]
    else:
        assert result.results[0].result == INTERRUPTED and tools.ran == []


@pytest.mark.parametrize(
    "case",
    [
        "the nested step does not record its unknown calls",
        "plan is not idempotent",
        "the nested step started a call that is not idempotent",
    ],
)
def test_a_nested_missing_tool_is_not_asked_for_when_the_call_ends_interrupted_whatever_it_says(
    rt: Any, tmp_path: Path, case: str
) -> None:
    tools = Tools(rt, (), names=())
    tools.register(
        "plan",
        "lookup",
        idempotent={
            "plan": case != "plan is not idempotent",
            "lookup": case != "the nested step started a call that is not idempotent",
        },
    )
    also = (("i1", "lookup"),)
    path = tmp_path / "log.jsonl"
    crashed_log(path, *charge_started(recorded=case != "the nested step does not record its unknown calls", also=also))
    with Session.open(path) as session:
        result = rt.tools.recover(Agent("a", session=session), 1, 1)
        assert result.results[0].result == INTERRUPTED
        assert session.pending_calls() == []
    assert tools.ran == []


@pytest.mark.parametrize("where", ["in the sub-agent's scope", "nowhere"])
def test_a_sub_agents_nested_call_of_a_tool_the_agent_does_not_see_ends_the_call_interrupted(
    rt: Any, tmp_path: Path, where: str
) -> None:
    # (It was refused for good, "register it", even when it was registered:
    # the sub-agent's step says what the sub-agent could call, and no
    # registration makes the recovering agent see a tool of its scope.)
    tools = Tools(rt, (), names=("plan", "lookup"))
    path = tmp_path / "log.jsonl"
    crashed_log(
        path,
        known(batch(1, ("o1", "plan"))),
        call(1, "o1", "plan"),
        start(1, "o1"),
        dict(known(batch(1, ("s0", "charge"), parent=IN_O1)), agent="sub"),
        dict(call(1, "s0", "charge"), agent="sub"),
        dict(start(1, "s0"), agent="sub"),  # the crash, in charge
    )
    with Session.open(path) as session:
        agent = Agent("a", session=session)
        sub = Agent("sub", parent=agent, session=session)
        if where == "in the sub-agent's scope":
            charge = define_tool(
                name="charge",
                description="charge",
                parameters={},
                output=OUTPUT,
                execute=tools.bodies["charge"],
                idempotent=True,
            )
            rt.tools.scope(sub).register(charge)
        result = rt.tools.recover(agent, 1, 1)
        assert result.results[0].result == INTERRUPTED
        assert session.pending_calls() == []
        assert [c.state for c in session.step_calls(1, 1, "sub")] == ["settled"]
    assert tools.ran == []
