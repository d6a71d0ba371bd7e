"""``tools/approval``: the approval service's answer for a call, published
once, ``fn(execution, ask, answer)``, on the thread that prepares the call,
in its context, before the answer takes effect; not when no one was asked
or the service failed; scope-filtered; an observer that raises is
contained."""

from __future__ import annotations

import contextvars
import enum
import threading
from typing import Any

import pytest

from dsh_actors import (
    AbortSignal,
    Agent,
    Ask,
    InvalidTypeError,
    ToolBatchInput,
    ToolCall,
    ToolExecutionInput,
    ToolOutput,
    define_tool,
    text,
)

ANSWERS = ("allowed-once", "rejected", "cancelled", "unavailable", "deferred")
MAIN = Agent("main")
REQUEST = contextvars.ContextVar[str]("REQUEST", default="none")


class World:
    """A tool ``t`` whose body notes its runs; a pre-execute listener that
    asks about every call (noting the Ask it returned and its thread); an
    observer of ``tools/approval`` noting what it heard."""

    def __init__(self, rt: Any, *, scope: Agent | None = None) -> None:
        self.ran: list[str] = []
        self.asks: list[Ask] = []
        self.executions: list[Any] = []
        self.threads: list[threading.Thread] = []
        self.heard: list[tuple[Any, Ask, str]] = []
        self.seen: list[tuple[str, list[str], str, threading.Thread]] = []  # (answer, ran then, REQUEST, thread)
        rt.tools.register(
            define_tool(
                name="t",
                description="t",
                parameters={},
                output=ToolOutput(schema={"type": "string"}, render=lambda args, value: [text(value)]),
                execute=lambda args, ctx: self.ran.append(ctx.call_id) or "done",
            )
        )
        rt.events.on("tools/pre-execute", self.ask)
        rt.events.on("tools/approval", self.observe, scope=scope)

    def ask(self, execution: Any, next_: Any) -> Any:
        ask = Ask(reason="check")
        self.asks.append(ask)
        self.executions.append(execution)
        self.threads.append(threading.current_thread())
        return ask

    def observe(self, execution: Any, ask: Ask, answer: str) -> None:
        self.heard.append((execution, ask, answer))
        self.seen.append((answer, list(self.ran), REQUEST.get(), threading.current_thread()))


def service_answering(answer: Any, *, is_async: bool) -> Any:
    if is_async:

        async def aservice(request: Any) -> Any:
            return answer

        return aservice
    return lambda request: answer


def run(rt: Any, *call_ids: str, agent: Agent | None = MAIN) -> Any:
    calls = tuple(ToolCall(call_id, "t", "{}") for call_id in call_ids or ("c1",))
    return rt.tools.execute(ToolBatchInput(calls=calls, agent=agent))


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("answer", ANSWERS)
def test_each_answer_is_published_once_with_the_execution_and_the_ask_before_it_takes_effect(
    rt: Any, answer: str, is_async: bool
) -> None:
    world = World(rt)
    deferred: list[str] = []
    rt.events.on("tools/deferred", lambda execution, ask: deferred.append(f"deferred after {len(world.heard)}"))
    rt.approvals.set(service_answering(answer, is_async=is_async))

    result = run(rt)

    ((execution, ask, heard),) = world.heard
    assert execution is world.executions[0] and execution.call_id == "c1"
    assert ask is world.asks[0]
    assert heard == answer and type(heard) is str
    # Published on the thread that prepares the call (its listeners'),
    # before the answer took effect: the body had not run.
    ((_, ran_then, _, thread),) = world.seen
    assert ran_then == [] and thread is world.threads[0]
    # ... and it took effect after: the call goes on per the answer.
    if answer == "deferred":
        assert result.pending == ("c1",) and deferred == ["deferred after 1"]
        return
    assert deferred == []
    outcome = result.results[0].result
    assert outcome.is_error is (answer != "allowed-once")
    assert world.ran == (["c1"] if answer == "allowed-once" else [])


class Answer(enum.StrEnum):
    ALLOWED = "allowed-once"
    REJECTED = "rejected"


@pytest.mark.parametrize("given", [Answer.REJECTED, Answer.ALLOWED])
def test_an_answer_of_a_str_subclass_is_published_as_the_str_itself(rt: Any, given: Answer) -> None:
    world = World(rt)
    rt.approvals.set(lambda request: given)

    assert run(rt).results[0].result.is_error is (given is Answer.REJECTED)
    ((_, _, answer),) = world.heard
    assert answer == given.value and type(answer) is str


@pytest.mark.parametrize("case", ["no service", "no agent", "raises", "not an answer"])
def test_it_is_not_published_when_no_one_was_asked_or_the_service_failed(rt: Any, case: str) -> None:
    world = World(rt)

    def raises(request: Any) -> str:
        raise RuntimeError("no person here")

    services = {
        "no agent": lambda request: "allowed-once",
        "raises": raises,
        "not an answer": lambda request: "maybe",
    }
    if case in services:
        rt.approvals.set(services[case])

    outcome = run(rt, agent=None if case == "no agent" else MAIN).results[0].result

    assert world.heard == [] and world.ran == []
    assert outcome.is_error
    info = outcome.error.info  # (a denial has none)
    failed = case in ("raises", "not an answer")
    assert (info is not None and info.code == "POLICY_FAILED") is failed


@pytest.mark.parametrize("decision", ["allowed-once", "rejected", "cancelled"])
def test_a_decision_given_at_resume_is_published_as_the_service_s_answer_is(rt: Any, decision: str) -> None:
    world = World(rt)
    rt.approvals.set(lambda request: "deferred")
    suspended = run(rt)
    assert [answer for _, _, answer in world.heard] == ["deferred"]
    asked = world.heard[0][1]

    done = rt.tools.resume(suspended.suspension, {"c1": decision})

    assert done.results[0].result.is_error is (decision != "allowed-once")
    assert world.ran == (["c1"] if decision == "allowed-once" else [])
    ((execution, ask, answer),) = world.heard[1:]
    assert (execution.call_id, answer) == ("c1", decision)
    assert ask == asked  # (the deferred Ask, read back from the suspension)


def test_a_call_left_deferred_at_resume_is_not_published_again(rt: Any) -> None:
    world = World(rt)
    rt.approvals.set(lambda request: "deferred")
    suspended = run(rt)
    again = rt.tools.resume(suspended.suspension, {})
    assert again.suspension is not None and len(world.heard) == 1


def test_scoped_observers_hear_their_agent_and_its_descendants_only(rt: Any) -> None:
    child = Agent("child", parent=MAIN)
    other = Agent("other")
    world = World(rt, scope=MAIN)
    everyone: list[str] = []
    rt.events.on("tools/approval", lambda execution, ask, answer: everyone.append(execution.call_id))
    rt.approvals.set(lambda request: "rejected")

    for call_id, agent in (("main", MAIN), ("child", child), ("other", other)):
        run(rt, call_id, agent=agent)

    assert [execution.call_id for execution, _, _ in world.heard] == ["main", "child"]
    assert everyone == ["main", "child", "other"]


@pytest.mark.parametrize("answer", ["allowed-once", "rejected"])
def test_an_observer_that_raises_or_returns_a_coroutine_is_contained_and_logged(
    rt: Any, errors: list[str], answer: str
) -> None:
    def broken(execution: Any, ask: Any, answer: str) -> None:
        raise ValueError("observer bug")

    async def never_awaited(execution: Any, ask: Any, answer: str) -> None:
        raise AssertionError("its body never runs")

    def wrapped(execution: Any, ask: Any, answer: str) -> Any:  # (an async def behind a sync wrapper)
        return never_awaited(execution, ask, answer)

    rt.events.on("tools/approval", broken)
    rt.events.on("tools/approval", wrapped)
    world = World(rt)  # (its observer comes after the broken ones: it still hears)
    rt.approvals.set(lambda request: answer)

    outcome = run(rt).results[0].result

    assert [heard for _, _, heard in world.heard] == [answer]
    assert outcome.is_error is (answer != "allowed-once")  # the call went on per the answer
    assert world.ran == (["c1"] if answer == "allowed-once" else [])
    assert any(m.startswith("tools/approval listener") and "observer bug" in m for m in errors)
    assert any("returned a coroutine, which nothing awaits" in m for m in errors)


def test_an_async_def_or_misshapen_observer_is_refused_as_it_subscribes(rt: Any) -> None:
    async def observer(execution: Any, ask: Any, answer: str) -> None:
        pass

    with pytest.raises(InvalidTypeError, match="make it a plain def"):
        rt.events.on("tools/approval", observer)
    with pytest.raises(InvalidTypeError, match=r"it is called as fn\(execution, ask, answer\)"):
        rt.events.on("tools/approval", lambda execution, ask: None)


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_it_runs_in_the_callers_context(rt: Any, is_async: bool) -> None:
    world = World(rt)
    rt.approvals.set(service_answering("allowed-once", is_async=is_async))

    def submit() -> None:
        REQUEST.set("req-7")
        run(rt)

    contextvars.Context().run(submit)

    assert [request for _, _, request, _ in world.seen] == ["req-7"]
    assert REQUEST.get() == "none"


@pytest.mark.parametrize("answer", ["allowed-once", "deferred"])
def test_a_nested_call_that_asks_publishes_its_answer_too(rt: Any, answer: str) -> None:
    world = World(rt)
    rt.approvals.set(lambda request: answer)
    nested = ToolExecutionInput(call_id="n1", name="t", arguments={}, signal=AbortSignal(), agent=MAIN)

    outcome = rt.tools.dispatch(nested)

    ((execution, _, heard),) = world.heard
    assert (execution.call_id, heard) == ("n1", answer)
    # A nested call cannot wait for a decision: "deferred" fails it.
    assert outcome.is_error is (answer == "deferred")
