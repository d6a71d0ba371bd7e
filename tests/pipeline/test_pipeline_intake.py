"""Batch intake (``pipeline/intake.py: check_batch``): a malformed batch is
refused with a clear error before any call runs, any listener sees it, or
anything reaches the session log."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from dsh_actors import Agent, LogStep, Session, ToolBatchInput, ToolCall
from dsh_actors.messages import ExecuteBatch

from .helpers import HI, echo_tool

WAIT = 5.0


class Counting:
    """An echo tool that counts its runs, and a listener that counts results."""

    def __init__(self, rt: Any) -> None:
        self.runs = 0
        self.results = 0
        self._lock = threading.Lock()

        def body(args: Any, ctx: Any) -> Any:
            with self._lock:
                self.runs += 1
            return args["message"]

        def observe(execution: Any, result: Any) -> None:
            with self._lock:
                self.results += 1

        rt.tools.register(echo_tool(execute=body))
        rt.events.on("tools/result", observe)


def test_two_calls_with_one_id_are_refused_naming_the_id_before_anything_runs_or_is_logged(rt: Any) -> None:
    seen = Counting(rt)
    session = Session()
    batch = ToolBatchInput(
        calls=(ToolCall("a", "echo", HI), ToolCall("dup", "echo", HI), ToolCall("dup", "echo", HI)),
        agent=Agent("main", session=session),
        log=LogStep(turn=1, step=1),
    )
    with pytest.raises(ValueError, match=r"calls\[2\] has the id 'dup' of calls\[1\]: call ids must be unique"):
        rt.tools.execute(batch)
    with pytest.raises(ValueError, match="'dup'"):
        rt.tools.submit(batch).result(WAIT)
    with pytest.raises(ValueError, match="'dup'"):
        rt.registry.ask(ExecuteBatch(batch), timeout=WAIT)
    assert (seen.runs, seen.results) == (0, 0)
    assert session.events() == [] and session.pending_calls() == []


def test_a_duplicate_id_is_refused_without_a_log_too_and_distinct_ids_still_run(rt: Any) -> None:
    seen = Counting(rt)
    with pytest.raises(ValueError, match="'x'"):
        rt.tools.execute(ToolBatchInput(calls=[ToolCall("x", "echo", HI), ToolCall("x", "echo", HI)]))
    assert seen.runs == 0
    batch = rt.tools.execute(ToolBatchInput(calls=[ToolCall("x", "echo", HI), ToolCall("y", "echo", HI)]))
    assert [r.call_id for r in batch.results] == ["x", "y"] and seen.runs == 2


def test_a_very_long_duplicate_id_is_shown_cut() -> None:
    from dsh_actors.pipeline.intake import check_batch

    long_id = "i" * 10_000
    with pytest.raises(ValueError) as info:
        check_batch(ToolBatchInput(calls=[ToolCall(long_id, "echo", "{}"), ToolCall(long_id, "echo", "{}")]))
    assert len(str(info.value)) < 300 and "call ids must be unique" in str(info.value)


def test_a_log_without_an_agent_is_refused_before_anything_runs(rt: Any) -> None:
    seen = Counting(rt)
    with pytest.raises(ValueError, match="ToolBatchInput.log needs an agent"):
        rt.tools.execute(ToolBatchInput(calls=[ToolCall("c1", "echo", HI)], log=LogStep(turn=1, step=1)))
    assert (seen.runs, seen.results) == (0, 0)


@pytest.mark.parametrize(("turn", "step"), [("1", 1), (1, 1.0), (True, 1), (1, None)])
def test_a_log_step_that_is_not_two_ints_is_refused_before_anything_runs_or_is_logged(
    rt: Any, turn: Any, step: Any
) -> None:
    # Before, it was logged as it was: a step that read_step, recovery and
    # resume (which take ints) could never find.
    seen = Counting(rt)
    session = Session()
    with pytest.raises(TypeError) as raised:
        rt.tools.execute(
            ToolBatchInput(
                calls=[ToolCall("c1", "echo", HI)],
                agent=Agent("main", session=session),
                log=LogStep(turn=turn, step=step),
            )
        )
    assert str(raised.value) == (
        f"ToolBatchInput.log's turn and step must be ints, got LogStep(turn={turn!r}, step={step!r})"
    )
    assert (seen.runs, seen.results) == (0, 0) and session.events() == []


@pytest.mark.parametrize("bad", [5, None, b"main"])
def test_an_agent_id_that_is_not_a_str_is_refused_when_the_agent_is_made(bad: Any) -> None:
    # Before, Agent(5) was made, and its repr and every message naming it failed.
    with pytest.raises(TypeError, match=rf"^Agent\(id\) must be a str, not {type(bad).__qualname__}$"):
        Agent(bad)
    with pytest.raises(TypeError, match=r"^Agent\(parent=...\) must be an Agent or None, not str$"):
        Agent("child", parent="main")  # type: ignore[arg-type]


def test_a_log_for_an_agent_without_a_session_runs_and_logs_nowhere(rt: Any) -> None:
    seen = Counting(rt)
    batch = rt.tools.execute(
        ToolBatchInput(calls=[ToolCall("c1", "echo", HI)], agent=Agent("main"), log=LogStep(turn=1, step=1))
    )
    assert not batch.results[0].result.is_error and seen.runs == 1
