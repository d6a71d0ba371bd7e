"""While a call's approval service waits for a person, the calls before it
that settle commit at once (their ``tools/result``, their result in the
session log), and nothing after it starts (``BatchRun._meanwhile``,
``CallState.PREPARING``)."""

from __future__ import annotations

import asyncio
import contextvars
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from dsh_actors import AbortController, Agent, LogStep, Session, ToolBatchInput, ToolCall, tool

from .helpers import GUARD, code_of, must, started_runtime

WHO: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")


def _tools(later_ran: threading.Event) -> list[Any]:
    @tool(concurrency_safe=True)
    def fast(x: int) -> str:
        """Ends at once."""
        return f"fast {x}"

    @tool(concurrency_safe=True, requires_approval=True)
    def pay(x: int) -> str:
        """Needs a person."""
        return f"paid {x}"

    @tool(concurrency_safe=True)
    def later(x: int) -> str:
        """After the call that asks."""
        later_ran.set()
        return f"later {x}"

    return [fast, pay, later]


def _logged(path: Path) -> list[tuple[str, str | None]]:
    with path.open("rb") as file:
        return [(event["type"], event.get("call_id")) for event in map(json.loads, file)]


@pytest.mark.parametrize("service_kind", ["sync", "async"])
def test_a_call_that_settles_while_a_later_call_waits_for_approval_commits_and_is_logged_at_once(
    tmp_path: Path, service_kind: str
) -> None:
    # The result of "a" used to wait for the person answering about "b": a
    # crash meanwhile left a finished call with no result in the log.
    later_ran = threading.Event()
    a_committed = threading.Event()
    asked = threading.Event()
    answer = threading.Event()
    seen: dict[str, Any] = {}
    path = tmp_path / "log.jsonl"
    with started_runtime() as rt:
        for definition in _tools(later_ran):
            rt.tools.register(definition)
        rt.events.on("tools/result", lambda execution, result: a_committed.set() if execution.call_id == "a" else None)
        if service_kind == "sync":

            def person(request: Any) -> str:
                seen["who"] = WHO.get()
                asked.set()
                must(answer, "the test's answer")
                return "allowed-once"

            rt.approvals.set(person)
        else:

            async def person_async(request: Any) -> str:
                seen["who"] = WHO.get()
                asked.set()
                await asyncio.get_running_loop().run_in_executor(None, must, answer, "the test's answer")
                return "allowed-once"

            rt.approvals.set(person_async)
        agent = Agent("ag", session=Session(path))
        WHO.set("the caller")
        batch = ToolBatchInput(
            calls=(ToolCall("a", "fast", {"x": 1}), ToolCall("b", "pay", {"x": 2}), ToolCall("c", "later", {"x": 3})),
            agent=agent,
            log=LogStep(turn=1, step=1),
        )
        future = rt.tools.submit(batch)
        must(asked, "the approval service is asked")
        must(a_committed, "a's tools/result while b waits for its approval")
        assert ("tool/result", "a") in _logged(path)
        assert not later_ran.is_set(), "a call after the one waiting for approval started"
        answer.set()
        result = future.result(GUARD)
        agent.session.close()
    assert [r.call_id for r in result.results] == ["a", "b", "c"]
    assert [r.result.value for r in result.results] == ["fast 1", "paid 2", "later 3"]
    assert seen["who"] == "the caller"  # the service runs in the call's context
    types = _logged(path)
    assert types.index(("tool/result", "a")) < types.index(("tool/start", "b")) < types.index(("tool/start", "c"))


def test_an_abort_while_a_call_waits_for_approval_ends_it_and_the_calls_after_it_unstarted() -> None:
    later_ran = threading.Event()
    a_committed = threading.Event()
    asked = threading.Event()
    with started_runtime() as rt:
        for definition in _tools(later_ran):
            rt.tools.register(definition)
        rt.events.on("tools/result", lambda execution, result: a_committed.set() if execution.call_id == "a" else None)

        def person(request: Any) -> str:
            asked.set()
            assert request.signal.wait(GUARD), "the abort reaches the approval service"
            return "allowed-once"  # (too late: the call was cancelled before its body started)

        rt.approvals.set(person)
        controller = AbortController()
        future = rt.tools.submit(
            ToolBatchInput(
                calls=(
                    ToolCall("a", "fast", {"x": 1}),
                    ToolCall("b", "pay", {"x": 2}),
                    ToolCall("c", "later", {"x": 3}),
                ),
                agent=Agent("ag"),
                signal=controller.signal,
            )
        )
        must(asked, "the approval service is asked")
        must(a_committed, "a commits while b waits")
        controller.abort("the user pressed stop")
        result = future.result(GUARD)
    codes = [code_of(r.result) for r in result.results]
    assert codes == [None, "ABORTED_BEFORE_DISPATCH", "ABORTED_BEFORE_DISPATCH"]
    assert not later_ran.is_set()


def test_a_stop_while_a_call_waits_for_approval_is_prompt_and_leaves_no_thread() -> None:
    later_ran = threading.Event()
    asked = threading.Event()
    with started_runtime() as rt:  # (asserts no thread is left, the approval's included)
        for definition in _tools(later_ran):
            rt.tools.register(definition)

        def person(request: Any) -> str:
            asked.set()
            assert request.signal.wait(GUARD), "the stop reaches the approval service"
            return "cancelled"

        rt.approvals.set(person)
        future = rt.tools.submit(
            ToolBatchInput(
                calls=(ToolCall("a", "fast", {"x": 1}), ToolCall("b", "pay", {"x": 2})),
                agent=Agent("ag"),
            )
        )
        must(asked, "the approval service is asked")
        rt.stop()
        result = future.result(GUARD)
    assert result.results[0].result.value == "fast 1"
    assert result.results[1].result.is_error
