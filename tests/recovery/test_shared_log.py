"""Many agents sharing one session log: reading one agent's step back (a
recovery, a resume, ``read_step``) reads that step's lines, through the
index the session keeps of where each step's events are, not the whole log
once per agent; and it says what a read of every event says, as the log
grows, after a torn last line, and refuses a log cut short under it."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from scheduling.helpers import TEXT_OUTPUT as OUTPUT

from dsh_actors import Agent, Session, define_tool
from dsh_actors.model import TextBlock, ToolExecutionSuccess
from dsh_actors.session import (
    SessionCorruptError,
    batch_event,
    call_event,
    read_step,
    result_event,
    start_event,
)
from dsh_actors.session import step_key as key_of


def batch(agent: str, step: int, *ids: str, parent: tuple[int, int, str, str] | None = None) -> dict[str, Any]:
    return batch_event(1, step, [(i, "work", "{}") for i in ids], agent=agent, parent=parent, unknown=[])


def call(agent: str, step: int, call_id: str) -> dict[str, Any]:
    return call_event(1, step, call_id, "work", {}, agent)


def start(agent: str, step: int, call_id: str) -> dict[str, Any]:
    return start_event(call_id, 1, step, agent)


def done(agent: str, step: int, call_id: str) -> dict[str, Any]:
    result = ToolExecutionSuccess(value=None, content=(TextBlock(f"{agent} {call_id}"),))
    return result_event(call_id, result, turn=1, step=step, agent=agent)


def shared_log(agents: int, steps: int) -> Iterator[dict[str, Any]]:
    """What ``agents`` agents running ``steps`` steps side by side log (the
    same call ids in each step), each agent's last step cut by a crash: its
    c0 settled, its c1 started (its body may have run)."""
    for step in range(1, steps + 1):
        for a in range(agents):
            agent = f"a{a}"
            yield batch(agent, step, "c0", "c1")
            for call_id in ("c0", "c1"):
                yield call(agent, step, call_id)
                yield start(agent, step, call_id)
                if call_id == "c0" or step < steps:
                    yield done(agent, step, call_id)


def write(path: Path, events: Any) -> None:
    with Session(path) as session:
        for event in events:
            session.append(event)


def register_work(rt: Any, idempotent: bool = False) -> list[str]:
    ran: list[str] = []

    def body(args: Any, ctx: Any) -> str:
        ran.append(f"{ctx.agent.id} {ctx.call_id}")
        return f"{ctx.agent.id} {ctx.call_id}"

    rt.tools.register(
        define_tool(name="work", description="work", parameters={}, output=OUTPUT, execute=body, idempotent=idempotent)
    )
    return ran


def texts(result: Any) -> list[str]:
    return [item.result.content[0].text for item in result.results]


def steps_of(session: Session) -> set[tuple[int, int, str | None]]:
    return {key for event in session.events() if (key := key_of(event)) is not None}


def assert_reads_agree(session: Session) -> None:
    """Each step read through the session's index is what a read of every event says."""
    events = session.events()
    for turn, step, agent in steps_of(session):
        for who in (agent, None):
            assert session.read_step(turn, step, who) == read_step(events, turn, step, who), (turn, step, who)


@pytest.mark.parametrize("agents", [2, 20])
def test_recovering_an_agent_parses_its_step_s_lines_not_the_other_agents(
    rt: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, agents: int
) -> None:
    # (Every recovery parsed the whole log, twice: 200 agents of 20 steps
    # took a minute to recover.)
    register_work(rt)
    path = tmp_path / "log.jsonl"
    write(path, shared_log(agents, 5))
    parsed = 0
    loads = orjson.loads

    def counting(data: Any) -> Any:
        nonlocal parsed
        if bytes(data[:8]) == b'{"type":':  # (a log line, not a call's arguments)
            parsed += 1
        return loads(data)

    with Session.open(path) as session:
        rt.tools.recover(Agent("a0", session=session), 1, 5)  # (the first read indexes the log)
        monkeypatch.setattr(orjson, "loads", counting)
        result = rt.tools.recover(Agent("a1", session=session), 1, 5)
        monkeypatch.undo()
        assert texts(result) == [
            "a1 c0",
            "Error: tool call interrupted: the session ended before its result was recorded",
        ]
        assert session.pending_calls() == ["c1"] * (agents - 2)
    # What a0's recovery logged since (one result), and a1's step (batch,
    # calls, starts, c0's result) with a1's first batch (step 1's: it tells
    # that a1's tool/call lines are calls as its batches name them),
    # whatever else the log holds.
    assert parsed == 1 + 6 + 1


@pytest.mark.parametrize("on_file", [True, False])
def test_a_shared_log_read_step_by_step_says_what_a_read_of_every_event_says_as_it_grows(
    rt: Any, tmp_path: Path, on_file: bool
) -> None:
    register_work(rt, idempotent=True)
    session = Session(tmp_path / "log.jsonl") if on_file else Session()
    with session:
        for event in shared_log(3, 3):
            session.append(event)
        # a1's step 3 run again after a repair-like close (its ids open twice
        # across runs), and a nested step of a2's c1
        session.append(done("a1", 3, "c1"))
        for event in (batch("a1", 3, "c1"), call("a1", 3, "c1"), start("a1", 3, "c1")):
            session.append(event)
        in_c1 = (1, 3, "a2", "c1")
        for event in (batch("a2", 4, "n0", parent=in_c1), call("a2", 4, "n0"), start("a2", 4, "n0")):
            session.append(event)
        assert_reads_agree(session)
        assert session.child_steps(1, 3, "a2", "c1") == ((1, 4, "a2"),)
        assert session.step_calls(1, 3, "a1")[0].state == "started"

        # The log grows between reads: recoveries (the index takes what they
        # logged), and a live agent's new step.
        assert texts(rt.tools.recover(Agent("a0", session=session), 1, 3)) == ["a0 c0", "a0 c1"]
        assert texts(rt.tools.recover(Agent("a2", session=session), 1, 3)) == ["a2 c0", "a2 c1"]
        for event in (batch("a9", 1, "c0"), call("a9", 1, "c0"), start("a9", 1, "c0")):
            session.append(event)
        assert [c.state for c in session.step_calls(1, 1, "a9")] == ["started"]
        assert_reads_agree(session)
        session.append(done("a9", 1, "c0"))
        assert [c.state for c in session.step_calls(1, 1, "a9")] == ["settled"]
        assert_reads_agree(session)


def test_a_torn_last_line_is_not_indexed_and_the_log_continues_after_it(rt: Any, tmp_path: Path) -> None:
    register_work(rt)
    path = tmp_path / "log.jsonl"
    write(path, shared_log(3, 2))
    whole = path.read_bytes()
    with path.open("ab") as log:
        log.write(orjson.dumps(done("a0", 2, "c1"))[:30])  # a crash mid-write
    with Session.open(path) as session:
        assert session.torn_line == whole.count(b"\n") + 1
        assert_reads_agree(session)
        assert [c.state for c in session.step_calls(1, 2, "a0")] == ["settled", "started"]
        result = rt.tools.recover(Agent("a0", session=session), 1, 2)  # (its first write cuts the torn line)
        assert texts(result)[0] == "a0 c0" and result.results[1].result.is_error
        assert [c.state for c in session.step_calls(1, 2, "a0")] == ["settled", "settled"]
        assert rt.tools.recover(Agent("a1", session=session), 1, 2).results[1].result.is_error
        assert_reads_agree(session)
    assert path.read_bytes().startswith(whole + b'{"type":"tool/result","call_id":"c1"')
    with Session.open(path) as reopened:
        assert reopened.torn_line is None and reopened.pending_calls() == ["c1"]  # (a2's)


def test_a_log_cut_short_under_its_session_is_refused_not_read_as_it_is_now(tmp_path: Path) -> None:
    # (A read of the log, by read_step or events(), read what was left of it
    # as if it were the log: here, a step without a call.)
    path = tmp_path / "log.jsonl"
    write(path, shared_log(3, 2))
    lines = path.read_bytes().splitlines(keepends=True)
    with Session.open(path) as session:
        assert len(session.step_calls(1, 2, "a2")) == 2
        with path.open("r+b") as log:
            log.truncate(sum(len(line) for line in lines[: len(lines) // 2]))  # (at a line's end)
        for read in (lambda: session.step_calls(1, 2, "a2"), session.events):
            with pytest.raises(SessionCorruptError, match="the log changed under this session: something else wrote"):
                read()


def test_a_log_replaced_under_its_open_session_is_still_read_from_its_own_file(tmp_path: Path) -> None:
    path, other = tmp_path / "log.jsonl", tmp_path / "other.jsonl"
    write(path, shared_log(2, 2))
    write(other, shared_log(1, 1))
    with Session.open(path) as session:
        assert len(session.step_calls(1, 2, "a1")) == 2
        os.replace(other, path)  # (the session reads the file it opened)
        assert [c.state for c in session.step_calls(1, 2, "a1")] == ["settled", "started"]
        assert_reads_agree(session)


def test_a_failed_write_s_bytes_left_in_the_file_are_skipped_by_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Failing:
        """The session's file, whose next write leaves 9 bytes and fails."""

        def __init__(self, real: Any) -> None:
            self.real, self.failing = real, True

        def write(self, data: Any) -> int:
            if self.failing:
                self.real.write(bytes(data[:9]))
                raise OSError(errno.ENOSPC, "No space left on device")
            return int(self.real.write(data))

        def __getattr__(self, name: str) -> Any:
            return getattr(self.real, name)

    def no_truncate(fd: int, size: int) -> None:
        raise OSError(errno.EPERM, "cannot truncate")

    path = tmp_path / "log.jsonl"
    with Session(path) as session:
        for event in shared_log(2, 1):
            session.append(event)
        assert_reads_agree(session)  # (indexed up to here)
        failing = Failing(session._file)
        monkeypatch.setattr(session, "_file", failing)
        monkeypatch.setattr(os, "ftruncate", no_truncate)
        with pytest.raises(OSError, match="No space left"):
            session.append(done("a1", 1, "c1"))
        failing.failing = False
        session.append(done("a1", 1, "c1"))
        assert b'\n{"type":"\n{"type":"tool/result"' in path.read_bytes()  # (the 9 bytes stand as a line)
        assert [c.state for c in session.step_calls(1, 1, "a1")] == ["settled", "settled"]
        assert_reads_agree(session)


@pytest.mark.parametrize("on_file", [True, False])
def test_a_call_s_nested_steps_are_listed_once_each_in_the_order_first_logged(tmp_path: Path, on_file: bool) -> None:
    # (The index keeps them as a dict's keys: a step run again, its
    # tool/batch logged again, is found without a scan of the others.)
    in_c1 = (1, 1, "a", "c1")
    session = Session(tmp_path / "log.jsonl") if on_file else Session()
    with session:
        session.append(batch("a", 1, "c1"))
        for step, agent in ((3, "a"), (2, "a"), (3, "a"), (4, "b"), (2, "a")):
            session.append(batch(agent, step, "n0", parent=in_c1))
        session.append(batch("a", 5, "n0", parent=(1, 1, "a", "c2")))  # (another call's)
        assert session.child_steps(1, 1, "a", "c1") == ((1, 3, "a"), (1, 2, "a"), (1, 4, "b"))
        assert session.child_steps(1, 1, "a", "c2") == ((1, 5, "a"),)
        assert session.child_steps(1, 1, "b", "c1") == ()
