"""``tools/approval-request``: the pipeline asks for an approval for a
call, published once, ``fn(execution, ask)``, on the thread that prepares
the call, in its context, before the approval service is asked (also when
no one can be asked); for the decision the call gets, whichever listener
made it; not for a decision given at resume; an observer that raises is
contained. (Not when an approval given earlier stands:
tests/scheduling/test_executor_pool.py.)"""

from __future__ import annotations

import contextvars
import dataclasses
import threading
from typing import Any

import pytest

from dsh_actors import (
    AbortSignal,
    Agent,
    Allow,
    Ask,
    InvalidTypeError,
    ToolBatchInput,
    ToolCall,
    ToolExecutionInput,
    ToolOutput,
    define_tool,
    text,
)

MAIN = Agent("main")
REQUEST = contextvars.ContextVar[str]("REQUEST", default="none")


class World:
    """A tool ``t`` whose body notes its runs (``requires_approval``: the
    tool's own Ask), or a pre-execute listener that asks about every call
    (noting the Ask it returned); ``order`` notes the requests heard
    (``tools/approval-request``), the service's questions and the answers
    published (``tools/approval``), in order."""

    def __init__(self, rt: Any, *, asker: str = "listener") -> None:
        self.ran: list[str] = []
        self.asks: list[Ask] = []
        self.requests: list[tuple[Any, Ask, str, threading.Thread]] = []  # (execution, ask, REQUEST, thread)
        self.order: list[str] = []
        self.threads: list[threading.Thread] = []
        definition = define_tool(
            name="t",
            description="t",
            parameters={},
            output=ToolOutput(schema={"type": "string"}, render=lambda args, value: [text(value)]),
            execute=lambda args, ctx: self.ran.append(ctx.call_id) or "done",
        )
        if asker == "listener":
            rt.events.on("tools/pre-execute", self.ask)
        else:
            definition = dataclasses.replace(definition, requires_approval=True)
        rt.tools.register(definition)
        rt.events.on("tools/approval-request", self.observe)
        rt.events.on("tools/approval", lambda execution, ask, answer: self.order.append(f"answer {answer}"))

    def ask(self, execution: Any, next_: Any) -> Any:
        ask = Ask(reason="check")
        self.asks.append(ask)
        self.threads.append(threading.current_thread())
        return ask

    def observe(self, execution: Any, ask: Ask) -> None:
        self.requests.append((execution, ask, REQUEST.get(), threading.current_thread()))
        self.order.append(f"request {execution.call_id}")

    def service(self, answer: str, *, is_async: bool = False) -> Any:
        def asked(request: Any) -> str:
            self.order.append(f"service {request.call_id}")
            return answer

        if not is_async:
            return asked

        async def aservice(request: Any) -> str:
            return asked(request)

        return aservice


def run(rt: Any, *call_ids: str, agent: Agent | None = MAIN) -> Any:
    calls = tuple(ToolCall(call_id, "t", "{}") for call_id in call_ids or ("c1",))
    return rt.tools.execute(ToolBatchInput(calls=calls, agent=agent))


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("asker", ["listener", "requires_approval"])
@pytest.mark.parametrize("answer", ["allowed-once", "rejected", "deferred"])
def test_a_request_is_published_once_before_the_service_is_asked(
    rt: Any, asker: str, answer: str, is_async: bool
) -> None:
    world = World(rt, asker=asker)
    rt.approvals.set(world.service(answer, is_async=is_async))

    result = run(rt)

    ((execution, ask, _, thread),) = world.requests
    assert execution.call_id == "c1"
    if asker == "listener":
        assert ask is world.asks[0] and thread is world.threads[0]  # (the thread that prepares the call)
    else:
        assert ask == Ask()  # the tool's own: no reason
    assert world.order == ["request c1", "service c1", f"answer {answer}"]
    if answer == "deferred":
        assert result.pending == ("c1",)
    else:
        assert world.ran == (["c1"] if answer == "allowed-once" else [])


@pytest.mark.parametrize("case", ["no service", "no agent"])
def test_it_is_published_when_no_one_can_be_asked_and_the_call_is_denied(rt: Any, case: str) -> None:
    world = World(rt)
    if case == "no agent":
        rt.approvals.set(world.service("allowed-once"))

    outcome = run(rt, agent=None if case == "no agent" else MAIN).results[0].result

    assert world.order == ["request c1"]  # no one asked, no answer
    assert outcome.is_error and world.ran == []
    assert outcome.error.message == (
        "check"  # (no service: the Ask's reason)
        if case == "no service"
        else 'tool "t" requires approval, but the call has no agent to route it through'
    )


def test_the_decision_the_call_gets_is_what_is_requested_whichever_listener_made_it(rt: Any) -> None:
    # A listener prepended outside the asking one: it turns c1's Ask into
    # Allow (no one is asked) and c2's Allow into Ask (asked).
    world = World(rt, asker="requires_approval")

    def outer(execution: Any, next_: Any) -> Any:
        decision = next_()
        if execution.call_id == "c1":
            return Allow()
        return Ask(reason="outer") if type(decision) is Allow else decision

    rt.events.on("tools/pre-execute", outer, prepend=True)
    rt.events.on("tools/pre-execute", lambda execution, next_: Allow() if execution.call_id == "c2" else next_())
    rt.approvals.set(world.service("allowed-once"))

    run(rt, "c1", "c2")

    assert [(execution.call_id, ask) for execution, ask, _, _ in world.requests] == [("c2", Ask(reason="outer"))]
    assert world.order == ["request c2", "service c2", "answer allowed-once"]
    assert world.ran == ["c1", "c2"]


@pytest.mark.parametrize("decision", ["allowed-once", "rejected", "deferred"])
def test_a_decision_given_at_resume_is_not_requested_again(rt: Any, decision: str) -> None:
    world = World(rt)
    rt.approvals.set(world.service("deferred"))
    suspended = run(rt)
    assert world.order == ["request c1", "service c1", "answer deferred"]

    rt.tools.resume(suspended.suspension, {"c1": decision})

    assert len(world.requests) == 1  # (published in the batch that deferred it)
    assert world.order[3:] == ([] if decision == "deferred" else [f"answer {decision}"])


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_it_runs_in_the_callers_context(rt: Any, is_async: bool) -> None:
    world = World(rt)
    rt.approvals.set(world.service("allowed-once", is_async=is_async))

    def submit() -> None:
        REQUEST.set("req-7")
        run(rt)

    contextvars.Context().run(submit)

    assert [request for _, _, request, _ in world.requests] == ["req-7"]
    assert REQUEST.get() == "none"


def test_a_nested_call_that_asks_publishes_its_request_too(rt: Any) -> None:
    world = World(rt)
    rt.approvals.set(world.service("allowed-once"))
    nested = ToolExecutionInput(call_id="n1", name="t", arguments={}, signal=AbortSignal(), agent=MAIN)

    assert not rt.tools.dispatch(nested).is_error
    assert world.order == ["request n1", "service n1", "answer allowed-once"]


def test_an_observer_that_raises_or_returns_a_coroutine_is_contained_and_logged(rt: Any, errors: list[str]) -> None:
    def broken(execution: Any, ask: Any) -> None:
        raise ValueError("observer bug")

    async def never_awaited(execution: Any, ask: Any) -> None:
        raise AssertionError("its body never runs")

    def wrapped(execution: Any, ask: Any) -> Any:  # (an async def behind a sync wrapper)
        return never_awaited(execution, ask)

    rt.events.on("tools/approval-request", broken)
    rt.events.on("tools/approval-request", wrapped)
    world = World(rt)  # (its observer comes after the broken ones: it still hears)
    rt.approvals.set(world.service("allowed-once"))

    outcome = run(rt).results[0].result

    assert not outcome.is_error and world.ran == ["c1"]  # the service was asked, the call went on
    assert world.order == ["request c1", "service c1", "answer allowed-once"]
    assert any(m.startswith("tools/approval-request listener") and "observer bug" in m for m in errors)
    assert any("returned a coroutine, which nothing awaits" in m for m in errors)


def test_an_async_def_or_misshapen_observer_is_refused_as_it_subscribes(rt: Any) -> None:
    async def observer(execution: Any, ask: Any) -> None:
        pass

    with pytest.raises(InvalidTypeError, match="make it a plain def"):
        rt.events.on("tools/approval-request", observer)
    with pytest.raises(InvalidTypeError, match=r"it is called as fn\(execution, ask\)"):
        rt.events.on("tools/approval-request", lambda execution: None)
