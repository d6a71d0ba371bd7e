"""A logged suspension is checked against its log before it resumes: the
log is the authority for the step's calls, their arguments, which calls
settled and their results. A suspension that disagrees is refused naming
what disagrees, nothing runs, and the untouched suspension still resumes.
Each refusal says what really happened (resumed already, from another
log, an id that was changed). Open approval requests are told apart by
their suspension, so call ids reused across steps or agents sharing a
session never close or decide the wrong one."""

from __future__ import annotations

import copy
import threading
from pathlib import Path
from typing import Any

import orjson
import pytest

from dsh_actors import Agent, LogStep, Session, ToolBatchInput
from dsh_actors.cli.render import log_entries
from dsh_actors.errors import InvalidStateError, InvalidValueError
from dsh_actors.session import INTERRUPTED, approval_refusal, approval_request_event, call_event, result_event

from .helpers import GUARD, make_tool, started_runtime
from .test_deferred_approvals import World, c, install, roundtrip, texts


def suspend(rt: Any, world: World, session: Session, *, step: int = 1, agent: str = "main") -> tuple[Agent, Any]:
    """A logged batch (c0 deferred, c1 settled, c2 exclusive and pending)
    of ``agent`` at turn 1, ``step``; the agent and its suspension (through
    JSON)."""
    who = Agent(agent, session=session)
    batch = ToolBatchInput(calls=(c("c0", ask=True), c("c1"), c("c2", "excl")), agent=who, log=LogStep(1, step))
    return who, roundtrip(rt.tools.execute(batch).suspension)


def changed(suspension: Any, change: Any) -> Any:
    altered = copy.deepcopy(suspension)
    change(altered)
    return altered


def set_arguments(index: int, value: Any) -> Any:
    return lambda s: s["calls"][index].__setitem__("arguments", value)


def set_content(s: Any) -> None:
    s["calls"][1]["result"]["content"] = [{"type": "text", "text": "done c1, and refunded twice"}]


def set_state(index: int, state: str) -> Any:
    return lambda s: s["calls"][index].__setitem__("state", state)


def without_result(s: Any) -> None:
    entry = s["calls"][1]
    entry["state"] = "pending"
    entry["waits_for"] = ["c0"]
    del entry["result"]


def with_a_result(s: Any) -> None:
    s["calls"][2]["state"] = "settled"
    s["calls"][2]["result"] = copy.deepcopy(s["calls"][1]["result"])


def drop_call(s: Any) -> None:
    del s["calls"][2]


def rename_tool(s: Any) -> None:
    s["calls"][1]["name"] = "safe2"


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (
            set_arguments(2, '{"ask": false, "amount": 1000}'),
            r"call 'c2' has other arguments in the suspension than in",
        ),
        (set_arguments(0, {"ask": True, "to": "mallory"}), r"call 'c0' has other arguments in the suspension than in"),
        (set_content, r"call 'c1' has another result in the suspension than in .* \(its content differs\)"),
        (without_result, r"call 'c1' has a result in .*, but is pending in the suspension"),
        (with_a_result, r"call 'c2' is settled in the suspension, but .* has no result for it"),
        (drop_call, r"the suspension's calls \('c0', 'c1'\) are not the calls .* \('c0', 'c1', 'c2'\)"),
        (rename_tool, r"call 'c1' is a call of tool 'safe2' in the suspension, but of 'safe' in"),
    ],
)
def test_a_logged_suspension_that_disagrees_with_its_log_is_refused_and_nothing_runs(
    tmp_path: Path, change: Any, says: str
) -> None:
    world = World()
    seen: list[Any] = []
    with started_runtime() as rt:
        install(rt, world)
        rt.events.on("tools/result", lambda execution, result: seen.append((execution.call_id, execution.arguments)))
        agent, suspension = suspend(rt, world, Session(tmp_path / "log.jsonl"))
        with pytest.raises(InvalidValueError, match=says) as refused:
            rt.tools.resume(changed(suspension, change), {"c0": "allowed-once"}, agent=agent)
        assert "the suspension does not match its log" in str(refused.value)
        assert "resume the suspension value its batch returned, unchanged (nothing ran)" in str(refused.value)
        assert world.ran == ["c1"]  # nothing ran, nothing was logged
        assert agent.session is not None
        assert agent.session.awaiting_approval() == [("c0", suspension["id"])]
        # Nothing was claimed: the suspension resumes, and arguments that
        # hold the same JSON written another way (text for an object, an
        # object for text) agree with the log.
        same = changed(suspension, set_arguments(0, '{"ask": true}'))
        same["calls"][2]["arguments"] = {"ask": False}
        done = rt.tools.resume(same, {"c0": "allowed-once"}, agent=agent)
        agent.session.close()
    assert texts(done) == [("c0", "done c0"), ("c1", "done c1"), ("c2", "done c2")]
    assert sorted(world.ran) == ["c0", "c1", "c2"]
    assert seen == [("c1", {"ask": False}), ("c0", {"ask": True}), ("c2", {"ask": False})]


def test_a_refused_resume_leaves_its_session_as_it_found_it(tmp_path: Path) -> None:
    """A resume refused after its session took the log (a suspension that
    disagrees with it) writes nothing and gives the log back; a session
    that held it before keeps it."""
    world = World()
    path = tmp_path / "log.jsonl"
    with started_runtime() as rt:
        install(rt, world)
        origin, suspension = suspend(rt, world, Session(path))
        assert origin.session is not None
        origin.session.close()
        size = path.stat().st_size
        disagrees = changed(suspension, set_content)
        with Session.open(path) as refused:
            with pytest.raises(InvalidValueError, match="the suspension does not match its log"):
                rt.tools.resume(disagrees, {"c0": "allowed-once"}, agent=Agent("main", session=refused))
            assert not refused.held
            with Session.open(path) as holder:
                holder.hold()
                with pytest.raises(InvalidValueError, match="the suspension does not match its log"):
                    rt.tools.resume(disagrees, {"c0": "allowed-once"}, agent=Agent("main", session=holder))
                assert holder.held
        assert path.stat().st_size == size  # nothing was written
        # The log is free: another session of it resumes the suspension.
        with Session.open(path) as session:
            done = rt.tools.resume(suspension, {"c0": "allowed-once"}, agent=Agent("main", session=session))
    assert texts(done) == [("c0", "done c0"), ("c1", "done c1"), ("c2", "done c2")]


def test_a_logged_suspension_resumed_with_another_agent_is_told_to_pass_its_agent_and_session(
    tmp_path: Path,
) -> None:
    """agent=None would be refused for a logged batch: the message does not
    suggest it."""
    world = World()
    with started_runtime() as rt:
        install(rt, world)
        origin, suspension = suspend(rt, world, Session(tmp_path / "log.jsonl"))
        with pytest.raises(InvalidValueError) as refused:
            rt.tools.resume(suspension, {"c0": "allowed-once"}, agent=Agent("other", session=origin.session))
        assert origin.session is not None
        origin.session.close()
    assert str(refused.value) == (
        'the suspension was made for agent "main", not agent "other": pass the agent whose batch was '
        "suspended, with the session it logs to (Agent(..., session=Session.open(path)))"
    )


def test_a_suspension_resumed_with_another_log_says_it_comes_from_another_log(tmp_path: Path) -> None:
    world = World()
    with started_runtime() as rt:
        install(rt, world)
        origin, suspension = suspend(rt, world, Session(tmp_path / "a.jsonl"))
        # Another log of the same agent, where step 1 was never run ...
        elsewhere = Agent("main", session=Session(tmp_path / "b.jsonl"))
        with pytest.raises(InvalidValueError, match=r"has no call of turn 1, step 1, the step suspension") as refused:
            rt.tools.resume(suspension, {"c0": "allowed-once"}, agent=elsewhere)
        assert "comes from another log" in str(refused.value)
        assert "was resumed already" not in str(refused.value)
        # ... and one where an identical batch suspended under its own id.
        twin, _ = suspend(rt, world, Session(tmp_path / "c.jsonl"))
        with pytest.raises(
            InvalidValueError, match=r"never deferred a call under suspension [0-9a-f]+: the suspension"
        ):
            rt.tools.resume(suspension, {"c0": "allowed-once"}, agent=twin)
        for session in (origin.session, elsewhere.session, twin.session):
            assert session is not None
            session.close()
    assert world.ran == ["c1", "c1"]


def test_a_suspension_whose_id_was_changed_is_unknown_to_the_log_not_resumed_already(tmp_path: Path) -> None:
    world = World()
    with started_runtime() as rt:
        install(rt, world)
        agent, suspension = suspend(rt, world, Session(tmp_path / "log.jsonl"))
        forged = changed(suspension, lambda s: s.__setitem__("id", "0" * 32))
        with pytest.raises(InvalidValueError) as refused:
            rt.tools.resume(forged, {"c0": "allowed-once"}, agent=agent)
        message = str(refused.value)
        assert message.startswith(f"the log {tmp_path / 'log.jsonl'} never deferred a call under suspension 0000")
        assert "comes from another log, or its id was changed" in message
        assert "resumed already" not in message
        assert agent.session is not None
        agent.session.close()
    assert world.ran == ["c1"]


def test_a_suspension_resumed_again_names_the_suspension_that_awaits_the_call_now(tmp_path: Path) -> None:
    world = World()
    with started_runtime() as rt:
        install(rt, world)
        agent, first = suspend(rt, world, Session(tmp_path / "log.jsonl"))
        second = rt.tools.resume(first, {"c0": "deferred"}, agent=agent).suspension
        with pytest.raises(InvalidStateError) as refused:
            rt.tools.resume(first, {"c0": "allowed-once"}, agent=agent)
        assert str(refused.value) == (
            f"suspension {first['id']} was resumed already: the log {tmp_path / 'log.jsonl'} holds its decision "
            f"for call 'c0' (deferred), and a suspension is resumed once; the call now awaits suspension "
            f"{second['id']}: resume that one"
        )
        done = rt.tools.resume(second, {"c0": "allowed-once"}, agent=agent)
        assert agent.session is not None
        agent.session.close()
    assert [item.call_id for item in done.results] == ["c0", "c1", "c2"]


def test_a_recovery_that_asked_again_is_named_when_the_old_suspension_is_resumed(tmp_path: Path) -> None:
    world = World()
    with started_runtime() as rt:
        install(rt, world)
        agent, old = suspend(rt, world, Session(tmp_path / "log.jsonl"))
        asked = rt.tools.recover(agent, 1, 1).suspension  # the service defers again
        with pytest.raises(InvalidStateError, match=r"a recovery of its step asked for its approval again") as refused:
            rt.tools.resume(old, {"c0": "allowed-once"}, agent=agent)
        assert f"it now awaits suspension {asked['id']}: resume that one" in str(refused.value)
        assert agent.session is not None
        agent.session.close()


def test_a_refusal_reads_its_own_step_when_another_agent_s_call_shares_the_id(tmp_path: Path) -> None:
    """Agents sharing a session log calls of the same ids: the refusal of
    alice's old suspension (a recovery of her step asked again) names the
    suspension her call awaits now, not "settled", though bob's call of
    the same id was logged in between."""
    world = World()
    session = Session(tmp_path / "log.jsonl")
    with started_runtime() as rt:
        install(rt, world)
        alice, old = suspend(rt, world, session, agent="alice")
        suspend(rt, world, session, agent="bob")  # bob's c0: same turn, step and id
        asked = rt.tools.recover(alice, 1, 1).suspension  # the service defers again
        with pytest.raises(InvalidStateError) as refused:
            rt.tools.resume(old, {"c0": "allowed-once"}, agent=alice)
        session.close()
    assert str(refused.value) == (
        f"call 'c0' no longer awaits suspension {old['id']}: a recovery of its step asked for its approval "
        f"again, and it now awaits suspension {asked['id']}: resume that one"
    )


@pytest.mark.parametrize("lost", ["the request", "the settled call's result"])
def test_a_suspension_whose_log_lost_its_last_events_is_told_to_recover_the_step(tmp_path: Path, lost: str) -> None:
    """A machine that stops before the log's last writes reach the disk
    (``fsync=False``) leaves a log without them, while the application
    kept the suspension: the refusal names the way on (``recover``, which
    asks again), not only "another log"."""
    world = World()
    log = tmp_path / "log.jsonl"
    with started_runtime() as rt:
        install(rt, world)
        who = Agent("main", session=Session(log))
        # c0 deferred, c1 settled after it; or c1 settled, c0 deferred after it
        # (one call at a time: otherwise c1's result and c0's request race for
        # the last line).
        calls = (c("c0", ask=True), c("c1")) if lost == "the settled call's result" else (c("c1"), c("c0", ask=True))
        batch = ToolBatchInput(calls=calls, agent=who, log=LogStep(1, 1), max_parallel_tool_calls=1)
        suspension = roundtrip(rt.tools.execute(batch).suspension)
        assert who.session is not None
        who.session.close()
        lines = log.read_bytes().splitlines(keepends=True)
        assert lines[-1].startswith(b'{"type":"tool/suspend"')
        assert lines[-2].startswith(
            b'{"type":"tool/result"' if lost != "the request" else b'{"type":"tool/approval-req'
        )
        log.write_bytes(b"".join(lines[:-2]) + lines[-2][:20])  # its last events lost, the one before them torn
        with Session.open(log) as session:
            agent = Agent("main", session=session)
            with pytest.raises(InvalidValueError) as refused:
                rt.tools.resume(suspension, {"c0": "allowed-once"}, agent=agent)
            assert "the log lost its last events" in str(refused.value)
            assert "rt.tools.recover(agent, turn, step) finishes the step" in str(refused.value)
            rt.approvals.set(lambda request: "allowed-once")
            done = rt.tools.recover(agent, 1, 1)
    # (c1 started and lost its result: its tool is not idempotent, so it ends INTERRUPTED.)
    c1 = "done c1" if lost == "the request" else "Error: " + INTERRUPTED.error.message
    assert sorted(texts(done)) == [("c0", "done c0"), ("c1", c1)]


def test_a_resume_refused_as_resumed_already_reads_its_step_not_the_whole_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second resume (an approval form sent twice) is refused from the
    step's events (``Session.step_events``): a session on a file keeps
    memory flat however long its log, and reading every event of it into
    memory for the refusal would not."""
    world = World()
    session = Session(tmp_path / "log.jsonl")
    with started_runtime() as rt:
        install(rt, world)
        agent, suspension = suspend(rt, world, session)
        rt.tools.resume(suspension, {"c0": "rejected"}, agent=agent)

        def whole_log() -> Any:
            raise AssertionError("the refusal read every event of the log")

        monkeypatch.setattr(session, "events", whole_log)
        with pytest.raises(InvalidStateError, match=r"was resumed already: the log .* holds its decision"):
            rt.tools.resume(suspension, {"c0": "rejected"}, agent=agent)
        session.close()


@pytest.mark.parametrize(
    ("suspension", "call_id", "parsed_lines"),
    [("s1", "c0", 3), ("s1", "c1", 3), ("s9", "c0", 0)],  # resumed already; did not defer c1; from another log
)
def test_a_refused_decision_parses_its_suspension_s_step_not_the_whole_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suspension: str, call_id: str, parsed_lines: int
) -> None:
    """``Session.decide`` refused (an approval form sent twice) reads the
    events of the step of the suspension's request (``step_events``), not
    every event of the log under the session's lock, which blocked every
    writer of the session for seconds on a large log; its message is what
    ``approval_refusal`` says over every event."""
    with Session(tmp_path / "log.jsonl") as session:
        session.append(call_event(1, 1, "c0", "safe", {}, agent="alice"))
        session.append(approval_request_event("c0", "s1", "safe", "why", None, turn=1, step=1, agent="alice"))
        session.decide("s1", {"c0": "rejected"})
        for step in range(1, 51):  # (another agent's steps, logged since)
            session.append(call_event(1, step, "c0", "safe", {}, agent="bob"))
            session.append(result_event("c0", INTERRUPTED, turn=1, step=step, agent="bob"))
        session.read_step(1, 1, "alice")  # (the first read indexes the log)
        parsed = 0
        loads = orjson.loads

        def counting(data: Any) -> Any:
            nonlocal parsed
            if bytes(data[:8]) == b'{"type":':  # (a log line)
                parsed += 1
            return loads(data)

        monkeypatch.setattr(orjson, "loads", counting)
        with pytest.raises((InvalidStateError, InvalidValueError)) as refused:
            session.decide(suspension, {call_id: "allowed-once"})
        monkeypatch.undo()
        assert parsed == parsed_lines  # (alice's call, request and decision, or nothing: not bob's 100)
        assert str(refused.value) == str(approval_refusal(session.events(), suspension, call_id, session.path))
        assert type(refused.value) is type(approval_refusal(session.events(), suspension, call_id, session.path))


def test_a_refusal_names_the_suspension_the_call_was_deferred_to_not_another_step_s() -> None:
    """A call deferred again: the next request of its own step is its new
    one, not the request another agent's call of the same id made first."""
    session = Session()
    session.append(call_event(1, 1, "c0", "safe", {}, agent="alice"))
    session.append(approval_request_event("c0", "s1", "safe", "why", None, turn=1, step=1, agent="alice"))
    session.decide("s1", {"c0": "deferred"})
    session.append(call_event(1, 1, "c0", "safe", {}, agent="bob"))
    session.append(approval_request_event("c0", "s2", "safe", "why", None, turn=1, step=1, agent="bob"))
    session.append(approval_request_event("c0", "s3", "safe", "why", None, turn=1, step=1, agent="alice"))
    assert session.awaiting_approval() == [("c0", "s2"), ("c0", "s3")]
    with pytest.raises(InvalidStateError, match="the call now awaits suspension s3: resume that one"):
        session.decide("s1", {"c0": "allowed-once"})


# ---------------------------------------------------------------------------
# Call ids reused across steps and agents sharing a session
# ---------------------------------------------------------------------------


def test_a_result_of_another_step_s_call_with_the_same_id_leaves_the_open_request_open() -> None:
    session = Session()
    session.append(call_event(1, 1, "c0", "safe", {}))
    session.append(approval_request_event("c0", "s1", "safe", "why", None))
    session.append(call_event(1, 2, "c0", "safe", {}))  # the next step reuses the id
    session.append(result_event("c0", INTERRUPTED))
    assert session.awaiting_approval() == [("c0", "s1")]
    assert session.pending_calls() == ["c0"]  # step 1's c0
    session.decide("s1", {"c0": "allowed-once"})
    assert session.awaiting_approval() == []
    assert [call.decision for call in session.step_calls(1, 1)] == ["allowed-once"]
    assert session.repair() and session.pending_calls() == []


def test_two_requests_for_one_call_id_under_two_suspensions_are_decided_apart() -> None:
    session = Session()
    for step, suspension in ((1, "s1"), (2, "s2")):
        session.append(call_event(1, step, "c0", "safe", {}))
        session.append(approval_request_event("c0", suspension, "safe", "why", None))
    assert session.awaiting_approval() == [("c0", "s1"), ("c0", "s2")]
    assert session.pending_calls() == ["c0", "c0"]
    session.decide("s1", {"c0": "rejected"})
    assert session.awaiting_approval() == [("c0", "s2")]
    with pytest.raises(InvalidStateError, match="suspension s1 was resumed already"):
        session.decide("s1", {"c0": "allowed-once"})
    session.decide("s2", {"c0": "allowed-once"})
    assert session.awaiting_approval() == []
    assert [(call.awaiting, call.decision) for call in session.step_calls(1, 1)] == [(None, "rejected")]
    assert [(call.awaiting, call.decision) for call in session.step_calls(1, 2)] == [(None, "allowed-once")]


def test_two_agents_sharing_a_session_resume_their_own_suspensions_of_the_same_call_ids() -> None:
    world = World()
    session = Session()
    with started_runtime() as rt:
        install(rt, world)
        alice, for_alice = suspend(rt, world, session, step=1, agent="alice")
        bob, for_bob = suspend(rt, world, session, step=2, agent="bob")
        assert session.awaiting_approval() == [("c0", for_alice["id"]), ("c0", for_bob["id"])]
        done_bob = rt.tools.resume(for_bob, {"c0": "allowed-once"}, agent=bob)
        assert session.awaiting_approval() == [("c0", for_alice["id"])]  # bob's c0 closed only bob's request
        done_alice = rt.tools.resume(for_alice, {"c0": "rejected"}, agent=alice)
    assert texts(done_bob) == [("c0", "done c0"), ("c1", "done c1"), ("c2", "done c2")]
    assert [item.result.is_error for item in done_alice.results] == [True, False, False]
    assert session.pending_calls() == [] and session.awaiting_approval() == []
    assert sorted(world.ran) == ["c0", "c1", "c1", "c2", "c2"]


def test_a_request_deferred_again_stays_with_its_call_while_another_step_s_call_shares_its_id() -> None:
    session = Session()
    session.append(call_event(1, 1, "c0", "safe", {}))
    session.append(approval_request_event("c0", "s1", "safe", "why", None))
    session.append(call_event(1, 2, "c0", "safe", {}))  # another step's c0, open meanwhile
    session.decide("s1", {"c0": "deferred"})
    session.append(approval_request_event("c0", "s2", "safe", "why", None))  # step 1's c0, asked again
    session.append(result_event("c0", INTERRUPTED))  # step 2's c0 ends
    assert session.awaiting_approval() == [("c0", "s2")]
    assert [(call.awaiting, call.decision) for call in session.step_calls(1, 1)] == [("s2", "deferred")]
    assert [call.state for call in session.step_calls(1, 2)] == ["settled"]
    with pytest.raises(InvalidStateError, match="now awaits suspension s2: resume that one"):
        session.decide("s1", {"c0": "allowed-once"})
    entries = log_entries(session.events())
    assert [[a.suspension for a in entry.approvals] for entry in entries] == [["s1", "s2"], []]
    session.decide("s2", {"c0": "allowed-once"})
    assert session.awaiting_approval() == []


def test_the_resumed_batch_runs_under_the_limit_its_log_holds_not_the_suspension_s(tmp_path: Path) -> None:
    world = World()
    both = threading.Barrier(2, timeout=GUARD)

    def meet(args: Any, ctx: Any) -> str:
        both.wait()  # only two calls running at once get past this
        return f"met {ctx.call_id}"

    with started_runtime() as rt:
        install(rt, world)
        rt.tools.register(make_tool("meet", meet))
        agent = Agent("main", session=Session(tmp_path / "log.jsonl"))
        calls = (c("c0", ask=True), c("c1", "excl"), c("c2", "meet"), c("c3", "meet"))
        batch = ToolBatchInput(calls=calls, agent=agent, log=LogStep(1, 1), max_parallel_tool_calls=2)
        suspension = roundtrip(rt.tools.execute(batch).suspension)
        assert suspension["max_parallel_tool_calls"] == 2
        serial = changed(suspension, lambda s: s.__setitem__("max_parallel_tool_calls", 1))
        done = rt.tools.resume(serial, {"c0": "allowed-once"}, agent=agent)
        assert agent.session is not None
        agent.session.close()
    assert texts(done)[2:] == [("c2", "met c2"), ("c3", "met c3")]


def test_agents_sharing_a_session_keep_their_own_deferred_calls_of_one_id_and_step() -> None:
    """A's resume defers its c0 again while B's batch, logging the same
    turn, step and call id into the same session, defers its own c0: each
    new request is its own agent's call's, so B's suspension is resumable
    (not taken for A's), the session lists both requests, and replay shows
    each under its own call."""
    import json

    from dsh_actors import Ask, ToolCall

    def call_(call_id: str, name: str) -> Any:
        return ToolCall(id=call_id, name=name, arguments=json.dumps({"ask": True}))

    with started_runtime() as rt:
        gate, entered = threading.Event(), threading.Event()

        def blocking(args: Any, ctx: Any) -> str:
            entered.set()
            assert gate.wait(GUARD)
            return "ex"

        rt.tools.register(make_tool("t", lambda args, ctx: "done " + ctx.call_id))
        rt.tools.register(make_tool("ex", blocking))
        rt.events.on(
            "tools/pre-execute", lambda execution, next_: Ask(reason="r") if execution.arguments.get("ask") else next_()
        )
        rt.approvals.set(lambda request: "deferred")
        session = Session()
        a, b = Agent("A", session=session), Agent("B", session=session)
        first = ToolBatchInput(
            calls=(call_("x0", "ex"), call_("c0", "t")), agent=a, log=LogStep(1, 1), max_parallel_tool_calls=1
        )
        suspended = rt.tools.execute(first).suspension
        resumed: dict[str, Any] = {}
        thread = threading.Thread(
            target=lambda: resumed.setdefault(
                "a", rt.tools.resume(suspended, {"x0": "allowed-once", "c0": "deferred"}, agent=a)
            )
        )
        thread.start()
        assert entered.wait(GUARD)  # A's resume runs x0; its c0 is deferred again after it
        b_suspended = rt.tools.execute(ToolBatchInput(calls=(call_("c0", "t"),), agent=b, log=LogStep(1, 1))).suspension
        gate.set()
        thread.join(GUARD)
        a_again = resumed["a"].suspension
        assert sorted(session.awaiting_approval()) == sorted([("c0", a_again["id"]), ("c0", b_suspended["id"])])
        done = rt.tools.resume(b_suspended, {"c0": "allowed-once"}, agent=b)
        assert [(r.call_id, r.result.content[0].text) for r in done.results] == [("c0", "done c0")]
        shown = [(entry.call_id, [x.decision for x in entry.approvals]) for entry in log_entries(session.events())]
        assert shown == [("x0", ["allowed-once"]), ("c0", ["deferred", None]), ("c0", ["allowed-once"])]
