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
        token = WHO.set("the caller")
        batch = ToolBatchInput(
            calls=(ToolCall("a", "fast", {"x": 1}), ToolCall("b", "pay", {"x": 2}), ToolCall("c", "later", {"x": 3})),
            agent=agent,
            log=LogStep(turn=1, step=1),
        )
        future = rt.tools.submit(batch)
        WHO.reset(token)
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
    a_committed = threading.Event()
    asked = threading.Event()
    with started_runtime() as rt:  # (asserts no thread is left, the approval's included)
        for definition in _tools(later_ran):
            rt.tools.register(definition)
        rt.events.on("tools/result", lambda execution, result: a_committed.set() if execution.call_id == "a" else None)

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
        # ("a" is launched before b's approval is asked, not started: a stop
        # before its body starts ends it unstarted, as it should.)
        must(a_committed, "a commits while b waits")
        rt.stop()
        result = future.result(GUARD)
    assert result.results[0].result.value == "fast 1"
    assert result.results[1].result.is_error


def test_calls_fed_to_a_sub_batch_while_its_call_waits_for_approval_start_and_the_sealed_batch_ends() -> None:
    # (The step went on with the number of calls it had read before the
    # approval: a call fed meanwhile stayed unstarted, and a sub-batch sealed
    # meanwhile never ended.)
    from dsh_actors import NativeExecutor

    committed: dict[str, threading.Event] = {"s0": threading.Event(), "s1": threading.Event()}

    class Sink:
        def started(self, execution: Any) -> None:
            pass

        def committed(self, execution: Any, result: Any) -> None:
            committed[execution.call_id].set()

    later_ran = threading.Event()
    with started_runtime() as rt:
        for definition in _tools(later_ran):
            rt.tools.register(definition)
        executor = NativeExecutor()
        rt.tools.set_executor(executor)
        sub = executor.open_sub_batch(ToolBatchInput(calls=(), agent=Agent("ag")), Sink(), 4)

        def person(request: Any) -> str:
            sub.feed("s1", "fast", {"x": 2})
            sub.seal()
            return "allowed-once"

        rt.approvals.set(person)
        sub.feed("s0", "pay", {"x": 1})
        sub.reply.result(GUARD)
    assert committed["s0"].is_set() and committed["s1"].is_set()


def test_a_stop_called_by_the_approval_service_returns_at_once_and_ends_the_call_unstarted() -> None:
    later_ran = threading.Event()
    took: list[bool] = []
    with started_runtime() as rt:
        for definition in _tools(later_ran):
            rt.tools.register(definition)

        def person(request: Any) -> str:
            rt.stop(timeout=GUARD)  # (on a thread of the runtime: it begins the stop and returns)
            took.append(request.signal.aborted)
            return "allowed-once"

        rt.approvals.set(person)
        result = rt.tools.execute(ToolBatchInput(calls=(ToolCall("b", "pay", {"x": 2}),), agent=Agent("ag")))
        assert rt.abandoned == ()
    assert took == [True]
    assert code_of(result.results[0].result) == "ABORTED_BEFORE_DISPATCH"


def test_what_the_approval_service_sets_in_its_context_the_calls_later_hooks_see() -> None:
    later_ran = threading.Event()
    seen: dict[str, str] = {}
    with started_runtime() as rt:
        for definition in _tools(later_ran):
            rt.tools.register(definition)

        def person(request: Any) -> str:
            WHO.set("the approver")
            return "allowed-once"

        def post(execution: Any, result: Any, next_: Any) -> Any:
            seen[execution.call_id] = WHO.get()
            return next_()

        rt.approvals.set(person)
        rt.events.on("tools/post-execute", post)
        rt.tools.execute(
            ToolBatchInput(calls=(ToolCall("a", "fast", {"x": 1}), ToolCall("b", "pay", {"x": 2})), agent=Agent("ag"))
        )
    assert seen == {"a": "nobody", "b": "the approver"}


def test_a_log_write_that_fails_while_a_call_waits_for_approval_keeps_that_call_from_running(tmp_path: Path) -> None:
    ran: list[str] = []
    a_go = threading.Event()
    a_tried = threading.Event()

    class Failing(Session):
        def append_lossless(self, event: Any) -> Any:
            if event.get("type") == "tool/result" and event.get("call_id") == "a":
                a_tried.set()
                raise OSError(28, "No space left on device (the test's)")
            return super().append_lossless(event)

    @tool(concurrency_safe=True)
    def fast(x: int) -> str:
        """Ends once the approval is asked."""
        must(a_go, "b's approval to be asked")
        ran.append("a")
        return "fast"

    @tool(concurrency_safe=True, requires_approval=True)
    def pay(x: int) -> str:
        """Needs a person."""
        ran.append("b")
        return "paid"

    with started_runtime() as rt:
        rt.tools.register(fast)
        rt.tools.register(pay)

        def person(request: Any) -> str:
            a_go.set()
            must(a_tried, "a's tool/result to be written meanwhile")
            return "allowed-once"

        rt.approvals.set(person)
        agent = Agent("ag", session=Failing(tmp_path / "log.jsonl"))
        future = rt.tools.submit(
            ToolBatchInput(
                calls=(ToolCall("a", "fast", {"x": 1}), ToolCall("b", "pay", {"x": 2})),
                agent=agent,
                log=LogStep(turn=1, step=1),
            )
        )
        with pytest.raises(Exception, match="the session log could not be written") as caught:
            future.result(GUARD)
        agent.session.close()
    partial = caught.value.partial  # type: ignore[attr-defined]
    assert code_of(partial.results[1].result) == "ABORTED_BEFORE_DISPATCH"
    assert ran == ["a"]


def test_a_call_aborted_before_its_approval_is_asked_is_aborted_before_dispatch_and_nobody_is_asked() -> None:
    # (Past a stop that shut the workers down, the service's failure to be
    # asked was reported as the approval service's failure: POLICY_FAILED.)
    later_ran = threading.Event()
    asked: list[str] = []
    controller = AbortController()
    with started_runtime() as rt:
        for definition in _tools(later_ran):
            rt.tools.register(definition)

        def aborting(execution: Any, next_: Any) -> Any:
            controller.abort("the user pressed stop while a listener ran")
            return next_()

        rt.approvals.set(lambda request: asked.append(request.call_id) or "allowed-once")
        rt.events.on("tools/pre-execute", aborting)
        result = rt.tools.execute(
            ToolBatchInput(calls=(ToolCall("b", "pay", {"x": 2}),), agent=Agent("ag"), signal=controller.signal)
        )
    assert code_of(result.results[0].result) == "ABORTED_BEFORE_DISPATCH"
    assert asked == []


def test_when_no_worker_thread_can_be_started_the_approval_is_asked_on_the_stepping_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dsh_actors.scheduling.blocking import BlockingPool

    def no_thread(self: Any, fn: Any, *args: Any) -> Any:
        raise RuntimeError("can't start new thread")

    later_ran = threading.Event()
    with started_runtime() as rt:
        for definition in _tools(later_ran):
            rt.tools.register(definition)
        rt.approvals.set(lambda request: "allowed-once")
        monkeypatch.setattr(BlockingPool, "submit", no_thread)
        result = rt.tools.execute(ToolBatchInput(calls=(ToolCall("b", "pay", {"x": 2}),), agent=Agent("ag")))
    assert result.results[0].result.value == "paid 2"
