"""``rt.tools.recover(agent, turn, step)`` in one process: what it keeps,
runs, runs again or interrupts, the approvals it does not ask twice, and
the errors that name the fix. (The crash trials with real processes are in
``test_crash_trials.py``.)"""

from __future__ import annotations

import asyncio
import json
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
    Session,
    ToolBatchInput,
    ToolCall,
    ToolExecutionSuccess,
    ToolRuntime,
    define_tool,
    text,
)
from dsh_actors.session import INTERRUPTED, SessionCorruptError


class Tools:
    """``safe`` (idempotent) and ``once`` (not), both recording their runs;
    a pre-execute listener that asks for approval when the arguments say so."""

    def __init__(self, rt: ToolRuntime, *, approvals: Any = None) -> None:
        self.ran: list[str] = []
        self.asked: list[str] = []

        def body(args: Any, ctx: Any) -> str:
            self.ran.append(ctx.call_id)
            return f"{ctx.name} {ctx.call_id}"

        for name, idempotent in (("safe", True), ("once", False)):
            rt.tools.register(
                define_tool(
                    name=name,
                    description=name,
                    parameters={"ask": {"type": "boolean"}},
                    output=OUTPUT,
                    execute=body,
                    is_concurrency_safe=True,
                    idempotent=idempotent,
                )
            )

        def ask_when_told(execution: Any, next_: Any) -> Any:
            return Ask(reason="a person must approve") if execution.arguments.get("ask") else next_()

        def service(request: Any) -> str:
            self.asked.append(request.call_id)
            return approvals if approvals is not None else "allowed-once"

        rt.events.on("tools/pre-execute", ask_when_told)
        rt.approvals.set(service)


def batch_event(*calls: tuple[str, str], ask: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "type": "tool/batch",
        "turn": 1,
        "step": 1,
        "max_parallel_tool_calls": None,
        "calls": [
            {"call_id": i, "name": n, "arguments": json.dumps({"ask": True}) if i in ask else "{}"} for i, n in calls
        ],
    }


def call_event(call_id: str, name: str) -> dict[str, Any]:
    return {"type": "tool/call", "turn": 1, "step": 1, "call_id": call_id, "name": name, "arguments": {}}


def crashed_log(path: Path, *events: dict[str, Any]) -> None:
    """A log as a crashed process left it (the events it had written)."""
    with Session(path) as session:
        for event in events:
            session.append(event)


def kinds(path: Path) -> list[tuple[str, str | None]]:
    with Session.open(path) as session:
        return [(e["type"], e.get("call_id")) for e in session.events()]


def texts(result: Any) -> list[tuple[str, str]]:
    return [(item.call_id, item.result.content[0].text) for item in result.results]


def test_each_call_is_kept_run_run_again_or_interrupted_as_its_log_and_its_tool_say(rt: Any, tmp_path: Path) -> None:
    tools = Tools(rt)
    path = tmp_path / "log.jsonl"
    crashed_log(
        path,
        batch_event(("c0", "once"), ("c1", "once"), ("c2", "safe"), ("c3", "once"), ("c4", "safe")),
        call_event("c0", "once"),
        {"type": "tool/start", "call_id": "c0"},
        {
            "type": "tool/result",
            "call_id": "c0",
            "is_error": False,
            "content": [{"type": "text", "text": "kept"}],
            "error": None,
            "meta": {"shown": 1},
        },  # fmt: skip
        call_event("c1", "once"),
        {"type": "tool/start", "call_id": "c1"},  # started, not idempotent: may not run again
        call_event("c2", "safe"),
        {"type": "tool/start", "call_id": "c2"},  # started, idempotent: runs again
        call_event("c3", "once"),  # logged, never started: runs
        # c4: in the tool/batch only (the crash came before its tool/call): runs
    )
    ended: list[str] = []
    rt.events.on("tools/result", lambda execution, result: ended.append(execution.call_id))
    with Session.open(path) as session:
        result = rt.tools.recover(Agent("a", session=session), 1, 1)

    # Every call that ends in this run is seen to end once (c0 ended before the crash).
    assert sorted(ended) == ["c1", "c2", "c3", "c4"]
    assert texts(result) == [
        ("c0", "kept"),
        ("c1", "Error: " + INTERRUPTED.error.message),
        ("c2", "safe c2"),
        ("c3", "once c3"),
        ("c4", "safe c4"),
    ]
    assert sorted(tools.ran) == ["c2", "c3", "c4"]
    kept = result.results[0].result
    # A logged result is rebuilt from the log: content, error and meta; never the value.
    assert isinstance(kept, ToolExecutionSuccess) and kept.value is None and kept.meta == {"shown": 1}
    assert result.results[1].result == INTERRUPTED
    written = kinds(path)[9:]  # what recovery wrote
    assert [k[1] for k in written if k[0] == "tool/result"] == ["c1", "c2", "c3", "c4"]  # model order
    assert [k[1] for k in written if k[0] == "tool/call"] == ["c4"]  # the one call never logged
    # A tool/start for each call that ran (c2's second: it runs again).
    assert sorted(k[1] for k in written if k[0] == "tool/start") == ["c2", "c3", "c4"]
    with Session.open(path) as session:
        assert session.pending_calls() == []
        assert [c.state for c in session.step_calls(1, 1)] == ["settled"] * 5


def test_a_complete_step_is_returned_as_logged_and_nothing_is_written_or_run(rt: Any, tmp_path: Path) -> None:
    tools = Tools(rt)
    path = tmp_path / "log.jsonl"
    with Session(path) as session:
        done = rt.tools.execute(
            ToolBatchInput(
                calls=(ToolCall("c0", "once", "{}"), ToolCall("c1", "missing", "{}")),
                agent=Agent("a", session=session),
                log=LogStep(1, 1),
            )
        )
    size = path.stat().st_size
    with Session.open(path) as session:
        again = rt.tools.recover(Agent("a", session=session), 1, 1)
    assert texts(again) == texts(done)
    assert [item.result.error for item in again.results] == [item.result.error for item in done.results]
    assert tools.ran == ["c0"]
    assert path.stat().st_size == size


def test_a_decided_approval_is_not_asked_again_and_a_waiting_one_is(runtime_pair: Any, tmp_path: Path) -> None:
    crashing, recovering = runtime_pair
    path = tmp_path / "log.jsonl"
    deferring = Tools(crashing, approvals="deferred")
    session = Session(path)
    suspended = crashing.tools.execute(
        ToolBatchInput(
            calls=(ToolCall("c0", "once", '{"ask": true}'), ToolCall("c1", "once", '{"ask": true}')),
            agent=Agent("a", session=session),
            log=LogStep(1, 1),
        )
    )
    assert suspended.pending == ("c0", "c1") and deferring.ran == []
    # A person decides c0 only; the process dies before c0 runs (its decision is logged).
    session.decide(suspended.suspension["id"], {"c0": "allowed-once"})
    session.close()

    tools = Tools(recovering, approvals="allowed-once")
    with Session.open(path) as reopened:
        agent = Agent("a", session=reopened)
        result = recovering.tools.recover(agent, 1, 1)
        assert texts(result) == [("c0", "once c0"), ("c1", "once c1")]
        assert tools.asked == ["c1"]  # c0's decision was in the log
        assert sorted(tools.ran) == ["c0", "c1"]
        # The old suspension can no longer decide what recovery settled.
        with pytest.raises(RuntimeError, match="was resumed already"):
            recovering.tools.resume(suspended.suspension, {"c1": "allowed-once"}, agent=agent)
        assert reopened.pending_calls() == []


def test_the_sub_calls_a_crashed_program_left_open_are_closed_as_repair_closes_them(rt: Any, tmp_path: Path) -> None:
    Tools(rt)
    path = tmp_path / "log.jsonl"
    start = {"type": "tool/ptc-dispatch-start", "root_call_id": "c0", "parent_call_id": None, "name": "safe"}
    crashed_log(
        path,
        batch_event(("c0", "once")),
        call_event("c0", "once"),
        {"type": "tool/start", "call_id": "c0"},
        {**start, "sub_call_id": "c0:ptc:1", "arguments": {}},
        {**start, "root_call_id": "elsewhere", "sub_call_id": "elsewhere:ptc:1", "arguments": {}},
    )
    with Session.open(path) as session:
        rt.tools.recover(Agent("a", session=session), 1, 1)
        assert session.pending_calls() == []
        assert session.pending_sub_calls() == ["elsewhere:ptc:1"]  # another step's: not this recovery's
        settled = [e for e in session.events() if e["type"] == "tool/ptc-dispatch"]
    assert [(e["sub_call_id"], e["error"]["info"]["code"]) for e in settled] == [("c0:ptc:1", "INTERRUPTED")]
    assert kinds(path)[-2:] == [("tool/ptc-dispatch", None), ("tool/result", "c0")]


def test_an_abort_settles_the_calls_that_did_not_start_and_the_log_is_complete(rt: Any, tmp_path: Path) -> None:
    tools = Tools(rt)
    path = tmp_path / "log.jsonl"
    crashed_log(path, batch_event(("c0", "once"), ("c1", "safe")), call_event("c0", "once"))
    controller = AbortController()
    controller.abort("shutting down")
    with Session.open(path) as session:
        result = rt.tools.recover(Agent("a", session=session), 1, 1, signal=controller.signal)
        assert session.pending_calls() == []
    assert [item.result.error.info.code for item in result.results] == ["ABORTED_BEFORE_DISPATCH"] * 2
    assert tools.ran == []


def test_recover_async_does_not_block_the_loop_and_gives_the_same_result(rt: Any, tmp_path: Path) -> None:
    tools = Tools(rt)
    path = tmp_path / "log.jsonl"
    crashed_log(path, batch_event(("c0", "safe")))

    async def main() -> Any:
        with Session.open(path) as session:
            return await asyncio.wait_for(rt.tools.recover_async(Agent("a", session=session), 1, 1), 10)

    assert texts(asyncio.run(main())) == [("c0", "safe c0")]
    assert tools.ran == ["c0"]


def test_what_cannot_be_recovered_is_refused_naming_the_fix(rt: Any, tmp_path: Path) -> None:
    Tools(rt)
    with pytest.raises(ValueError, match=r"agent 'a' has no session to recover from: .*Session\.open\(path\)"):
        rt.tools.recover(Agent("a"), 1, 1)
    with pytest.raises(TypeError, match="recover\\(\\) takes the Agent whose step it finishes, not str"):
        rt.tools.recover("a", 1, 1)
    with pytest.raises(TypeError, match="recover\\(\\) takes the step as an int, not str"):
        rt.tools.recover(Agent("a", session=Session()), 1, "1")
    path = tmp_path / "log.jsonl"
    crashed_log(path, batch_event(("c0", "safe")))
    with Session.open(path) as session, pytest.raises(ValueError) as info:
        rt.tools.recover(Agent("a", session=session), 1, 2)
    assert str(info.value) == (
        f"the session log of agent 'a' ({path}) has no call of turn 1, step 2: nothing to recover (a step "
        "whose tool/batch never reached the log never started: run it with rt.tools.execute)"
    )


def test_a_malformed_logged_result_is_named_by_its_line_and_nothing_runs(rt: Any, tmp_path: Path) -> None:
    """A logged result a reader refuses (a content block type of a newer
    version, an edit by hand): the recovery names the log's line, as
    ``Session.open`` names a bad line, runs nothing and writes nothing."""
    tools = Tools(rt)
    path = tmp_path / "log.jsonl"
    crashed_log(
        path,
        batch_event(("c0", "once"), ("c1", "safe")),
        call_event("c0", "once"),
        {"type": "tool/start", "call_id": "c0"},
        {
            "type": "tool/result",
            "call_id": "c0",
            "is_error": False,
            "content": [{"type": "audio", "data": "x"}],
            "error": None,
            "meta": None,
        },
    )
    size = path.stat().st_size
    with Session.open(path) as session:
        with pytest.raises(SessionCorruptError) as caught:
            rt.tools.recover(Agent("a", session=session), 1, 1)
        assert not session.held
    assert str(caught.value).startswith(
        f"{path}:4: bad tool/result event: event.content[0]: unknown content block type 'audio'"
    )
    assert tools.ran == [] and path.stat().st_size == size


def test_a_refused_recovery_leaves_its_session_as_it_found_it(rt: Any, tmp_path: Path) -> None:
    """A recovery that is refused writes nothing and gives the log back (a
    session that held it before keeps it); a wrong argument is named before
    the log is taken, whoever holds it."""
    tools = Tools(rt)
    path = tmp_path / "log.jsonl"
    crashed_log(path, batch_event(("c0", "safe")))
    refused = Session.open(path)
    with pytest.raises(ValueError, match="has no call of turn 1, step 2: nothing to recover"):
        rt.tools.recover(Agent("a", session=refused), 1, 2)
    assert not refused.held
    with Session.open(path) as holder:
        holder.hold()
        with Session.open(path) as other:
            with pytest.raises(TypeError, match=r"recover\(\) takes the turn as an int, not str"):
                rt.tools.recover(Agent("a", session=other), "1", 1)
            with pytest.raises(TypeError, match="signal must be an AbortSignal, not str"):
                rt.tools.recover(Agent("a", session=other), 1, 1, signal="stop")  # type: ignore[arg-type]
            assert not other.held
        with pytest.raises(ValueError, match="nothing to recover"):
            rt.tools.recover(Agent("a", session=holder), 1, 2)
        assert holder.held  # (held before the call: it stays held)
    assert kinds(path) == [("tool/batch", None)]  # nothing was written
    # The log is free: the session refused first recovers the step.
    assert texts(rt.tools.recover(Agent("a", session=refused), 1, 1)) == [("c0", "safe c0")]
    refused.close()
    assert tools.ran == ["c0"]


def test_agents_sharing_a_session_recover_their_own_calls_of_the_same_id(rt: Any, tmp_path: Path) -> None:
    """Agent a's call c1 starts and settles while agent b's call c1 (another
    step, the same session) is open: each step reads back its own result."""
    b_logged, a_done = threading.Event(), threading.Event()

    def body(args: Any, ctx: Any) -> str:
        return f"{ctx.agent.id}'s"

    def gate(execution: Any, next_: Any) -> Any:
        if execution.agent.id == "a":
            assert b_logged.wait(GUARD)  # b's tool/call is in the log before a's body starts
        else:
            b_logged.set()
            assert a_done.wait(GUARD)  # b's body starts once a's result is logged
        return next_()

    rt.tools.register(
        define_tool(name="t", description="t", parameters={}, output=OUTPUT, execute=body, is_concurrency_safe=True)
    )
    rt.events.on("tools/pre-execute", gate)
    rt.events.on("tools/result", lambda execution, result: a_done.set() if execution.agent.id == "a" else None)
    path = tmp_path / "log.jsonl"
    with Session(path) as session:
        futures = [
            rt.tools.submit(
                ToolBatchInput(
                    calls=[ToolCall("c1", "t", "{}")], agent=Agent(name, session=session), log=LogStep(turn, 1)
                )
            )
            for name, turn in (("a", 1), ("b", 2))
        ]
        for future in futures:
            future.result(GUARD)
    with Session.open(path) as reopened:
        for name, turn in (("a", 1), ("b", 2)):
            recovered = rt.tools.recover(Agent(name, session=reopened), turn, 1)
            assert [item.result.content for item in recovered.results] == [(text(f"{name}'s"),)]


def test_agents_sharing_a_session_and_numbering_their_steps_alike_each_recover_their_own_step(
    rt: Any, tmp_path: Path
) -> None:
    """Agents a and b log the same turn and step into one session: every
    event names its agent, so each recovers its own step, not the one
    logged last. Here b's step is complete and a's crashed before its body
    started (a log written by hand, as the crashed process left it)."""
    tools = Tools(rt)
    path = tmp_path / "log.jsonl"
    with Session(path) as session:
        rt.tools.execute(
            ToolBatchInput(calls=[ToolCall("c0", "once", "{}")], agent=Agent("b", session=session), log=LogStep(1, 1))
        )
    assert tools.ran == ["c0"]
    with Session.open(path) as session:  # a's step, as a crash left it: announced and logged, never started
        session.append({**batch_event(("c0", "once")), "agent": "a"})
        session.append({**call_event("c0", "once"), "agent": "a"})
    with Session.open(path) as reopened:
        b = rt.tools.recover(Agent("b", session=reopened), 1, 1)
        assert tools.ran == ["c0"]  # b's step is complete: nothing runs (a's step is not b's)
        a = rt.tools.recover(Agent("a", session=reopened), 1, 1)
        assert reopened.pending_calls() == []
    assert texts(b) == [("c0", "once c0")]  # as logged: nothing ran again
    assert texts(a) == [("c0", "once c0")]  # a's own call, never started: it runs now
    assert tools.ran == ["c0", "c0"]
    events = kinds(path)
    assert events.count(("tool/result", "c0")) == 2
    with Session.open(path) as reopened:
        logged = [(e["type"], e.get("agent")) for e in reopened.events() if e["type"] != "tool/batch"]
    assert logged[-2:] == [("tool/start", "a"), ("tool/result", "a")]


@pytest.mark.parametrize("entry", ["rt.tools.submit", "rt.registry.tell(ExecuteBatch)"])
def test_a_step_still_running_is_not_recovered_beside_it_through_its_own_session(
    rt: Any, tmp_path: Path, entry: str
) -> None:
    """The step's own batch holds its step, whichever way it was started: a
    recovery (or a second batch) of it in the same runtime, through the
    very session the batch writes (which the session's own lock lets
    through), is refused while it runs, so no call runs twice; another
    agent's step of the same number, in the same session, runs beside it;
    once the batch ended, the step recovers to what it logged."""
    from concurrent.futures import Future

    from dsh_actors.messages import ExecuteBatch

    tools = Tools(rt)
    running, release = threading.Event(), threading.Event()

    def slow(args: Any, ctx: Any) -> str:
        tools.ran.append(ctx.call_id)
        running.set()
        assert release.wait(GUARD)
        return "slow"

    rt.tools.register(
        define_tool(
            name="slow", description="slow", parameters={}, output=OUTPUT, execute=slow, is_concurrency_safe=True
        )
    )
    path = tmp_path / "log.jsonl"
    with Session(path) as session:
        agent = Agent("a", session=session)
        step = ToolBatchInput(
            calls=[ToolCall("c0", "slow", "{}"), ToolCall("c1", "once", "{}")], agent=agent, log=LogStep(1, 1)
        )
        if entry == "rt.tools.submit":
            future = rt.tools.submit(step)
        else:
            future = Future()
            rt.registry.tell(ExecuteBatch(batch=step, reply=future))
        try:
            assert running.wait(GUARD)
            for attempt in (lambda: rt.tools.recover(agent, 1, 1), lambda: rt.tools.execute(step)):
                with pytest.raises(
                    Exception,
                    match=r'step \(turn 1, step 1\) of agent "a" in this session is being run, '
                    r"resumed or recovered already: wait for that batch to finish",
                ) as refused:
                    attempt()
                assert type(refused.value).__name__ == "InvalidStateError"
            other = ToolBatchInput(
                calls=[ToolCall("c0", "once", "{}")], agent=Agent("b", session=session), log=LogStep(1, 1)
            )
            assert texts(rt.tools.execute(other)) == [("c0", "once c0")]
        finally:
            release.set()
        assert texts(future.result(GUARD)) == [("c0", "slow"), ("c1", "once c1")]
        again = rt.tools.recover(agent, 1, 1)  # complete: returned as logged, nothing runs
    assert texts(again) == [("c0", "slow"), ("c1", "once c1")]
    assert sorted(tools.ran) == ["c0", "c0", "c1"]  # a's c0 and c1 once each, and b's c0
    assert kinds(path).count(("tool/result", "c1")) == 1


def test_a_step_whose_batch_s_future_was_cancelled_is_free_once_the_batch_ended(
    rt: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelling the future ``submit`` returned does not stop the batch
    (it runs on, its step held); once it ended the step is free again: it
    would otherwise stay held for the runtime's life, refusing every later
    batch of the step."""
    from dsh_actors.kernel import Claims

    tools = Tools(rt)
    running, release, freed = threading.Event(), threading.Event(), threading.Event()
    release_step = Claims.release_step

    def noted(claims: Any, *step: Any) -> None:
        release_step(claims, *step)
        freed.set()

    monkeypatch.setattr(Claims, "release_step", noted)

    def slow(args: Any, ctx: Any) -> str:
        running.set()
        assert release.wait(GUARD)
        return "slow"

    rt.tools.register(define_tool(name="slow", description="slow", parameters={}, output=OUTPUT, execute=slow))
    with Session(tmp_path / "log.jsonl") as session:
        agent = Agent("a", session=session)
        future = rt.tools.submit(ToolBatchInput(calls=[ToolCall("c0", "slow", "{}")], agent=agent, log=LogStep(1, 1)))
        assert running.wait(GUARD)
        assert future.cancel()  # (the batch's future is not running until the batch ends)
        release.set()
        assert freed.wait(GUARD), "the step stayed held after its batch ended"
        again = rt.tools.recover(agent, 1, 1)  # complete: returned as logged, nothing runs
    assert texts(again) == [("c0", "slow")]
    assert tools.ran == []


def test_a_copy_of_a_tool_call_line_does_not_make_a_finished_call_run_again(rt: Any, tmp_path: Path) -> None:
    """A complete step whose tool/call line was copied (by hand, a tool
    that rewrote the file): the agent's batch logs an id once a run, so the
    copy is not a second call; the step is complete and nothing runs."""
    tools = Tools(rt)
    path = tmp_path / "log.jsonl"
    with Session(path) as session:
        rt.tools.execute(
            ToolBatchInput(calls=[ToolCall("c0", "once", "{}")], agent=Agent("a", session=session), log=LogStep(1, 1))
        )
    lines = path.read_bytes().splitlines(keepends=True)
    assert json.loads(lines[1])["type"] == "tool/call"
    path.write_bytes(b"".join([lines[0], lines[1], lines[1], *lines[2:]]))
    with Session.open(path) as reopened:
        recovered = rt.tools.recover(Agent("a", session=reopened), 1, 1)
    assert texts(recovered) == [("c0", "once c0")]
    assert tools.ran == ["c0"]  # not run again
    assert kinds(path).count(("tool/result", "c0")) == 1  # nothing written
