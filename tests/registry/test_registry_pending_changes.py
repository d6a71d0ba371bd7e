"""What decides a call, and what the model is offered, while a registry
change is announced (published, its ``tools/change`` listeners running, so
one of them may still roll it back): the committed registry, never the
pending change. Inspection reads (``get``, ``definitions``, ``schemas``
without a set) see the change at once, as the listener told of it does."""

from __future__ import annotations

import threading
from typing import Any

from dsh_actors.definition import define_tool
from dsh_actors.model import Agent, ToolBatchInput, ToolCall, ToolRestriction

from .helpers import TEXT, WAIT, activation, change_in_flight, names, tool, vetoed

AGENT = Agent("main")


def recording(name: str, ran: list[str]) -> Any:
    """A tool whose body records that it ran."""

    def body(args: Any, ctx: Any) -> str:
        ran.append(name)
        return name

    return define_tool(name=name, description=f"the {name} tool", parameters={}, output=TEXT, execute=body)


def run(rt: Any, name: str, agent: Agent = AGENT, tool_set: Any = None) -> Any:
    batch = ToolBatchInput(calls=(ToolCall("c1", name, "{}"),), agent=agent, tool_set=tool_set)
    return rt.tools.execute(batch).results[0].result


def code(result: Any) -> str | None:
    return result.error.info.code if result.is_error else None


def offered(rt: Any, agent: Agent = AGENT) -> list[str]:
    return names(list(rt.tools.model_tools(agent).schemas))


def test_a_restricted_tool_is_not_run_nor_offered_while_a_vetoed_lift_is_announced(rt: Any) -> None:
    ran: list[str] = []
    rt.tools.register(recording("x", ran))
    rt.tools.register(tool("y"))
    lift = rt.tools.scope(AGENT).restrict(ToolRestriction(deny=["x"]))
    with change_in_flight(rt, lift) as errors:
        assert rt.tools.get("x", AGENT) is not None  # inspection: the published lift
        assert rt.tools.executable("x", AGENT) is None
        assert offered(rt) == ["y"]
        assert code(run(rt, "x")) == "UNKNOWN_TOOL"
    assert vetoed(errors)  # "...; the restriction stays in place"
    assert ran == []
    assert code(run(rt, "x")) == "UNKNOWN_TOOL"


def test_a_scoped_tool_is_not_run_nor_offered_while_its_vetoed_registration_is_announced(rt: Any) -> None:
    ran: list[str] = []
    rt.tools.register(tool("y"))
    with change_in_flight(rt, lambda: rt.tools.scope(AGENT).register(recording("newt", ran))) as errors:
        assert rt.tools.get("newt", AGENT) is not None  # inspection: the published registration
        assert rt.tools.executable("newt", AGENT) is None
        assert offered(rt) == ["y"]
        assert code(run(rt, "newt")) == "UNKNOWN_TOOL"
    assert vetoed(errors)  # "...; the registration was rolled back"
    assert ran == []


def test_a_set_keeps_what_it_admitted_while_a_vetoed_restriction_is_announced(rt: Any) -> None:
    rt.tools.register(tool("a"))
    with rt.tools.resolve(activation(AGENT)) as ts:
        kept = rt.tools.executable("a", AGENT, ts)
        assert kept is not None
        with change_in_flight(rt, lambda: rt.tools.scope(AGENT).restrict(ToolRestriction(deny=["a"]))) as errors:
            assert rt.tools.executable("a", AGENT, ts) is kept
            assert names(list(rt.tools.model_tools(AGENT, ts).schemas)) == ["a"]
            assert code(run(rt, "a", tool_set=ts)) is None
        assert vetoed(errors)
        assert rt.tools.executable("a", AGENT, ts) is kept


def test_a_call_looked_up_while_an_accepted_restriction_is_announced_is_looked_up_again_once_it_commits(
    rt: Any,
) -> None:
    # The call finds x in the committed registry while the restriction is
    # pending; the restriction is accepted before the call's body starts:
    # settling the change moves the registry's generation, so the call is
    # prepared again and finds nothing.
    ran: list[str] = []
    rt.tools.register(recording("x", ran))
    looked_up, accepted = threading.Event(), threading.Event()

    def pre_execute(execution: Any, next_: Any) -> Any:
        if execution.tool_found and not accepted.is_set():
            looked_up.set()
            assert accepted.wait(WAIT)
        return next_()

    rt.events.on("tools/pre-execute", pre_execute)
    outcome: list[Any] = []

    def batch() -> None:
        try:
            outcome.append(run(rt, "x"))
        finally:
            looked_up.set()  # (ends the wait below if x was never found)

    worker = threading.Thread(target=batch)
    try:
        with change_in_flight(
            rt, lambda: rt.tools.scope(AGENT).restrict(ToolRestriction(deny=["x"])), veto=False
        ) as errors:
            worker.start()
            assert looked_up.wait(WAIT)
            assert not outcome, "x was found while the restriction was pending"
    finally:
        accepted.set()  # (also when the block failed: the call's listener must not wait on)
        if worker.is_alive() or worker.ident is not None:
            worker.join(WAIT)
    assert not worker.is_alive(), "the batch did not end"
    assert errors == []
    assert code(outcome[0]) == "UNKNOWN_TOOL"
    assert ran == []
