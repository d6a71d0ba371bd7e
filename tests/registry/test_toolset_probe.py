"""What the model is offered with a step's tool set: ``model_tools`` refuses
a set it would read as empty (resolved by another runtime or for another
agent, or disposed), as a batch given one is refused, instead of offering
the model no tool at all."""

from __future__ import annotations

from typing import Any

import pytest

from dsh_actors.errors import InvalidStateError, InvalidValueError
from dsh_actors.model import Agent

from .helpers import activation, names, tool


def test_model_tools_refuses_a_set_resolved_for_another_agent(rt: Any) -> None:
    rt.tools.register(tool("plain"))
    rt.tools.register(tool("cond"), when=lambda ctx: True)
    main = Agent("main")
    with rt.tools.resolve(activation(main)) as ts:
        assert names(list(rt.tools.model_tools(main, ts).schemas)) == ["plain", "cond"]
        assert names(list(rt.tools.scope(main).model_tools(tool_set=ts).schemas)) == ["plain", "cond"]
        with pytest.raises(InvalidValueError) as other:
            rt.tools.model_tools(Agent("sub", parent=main), ts)
        assert str(other.value) == (
            "the tool_set was resolved for agent 'main', but the tools are offered to agent 'sub': "
            "pass the agent the set was resolved for (and run its batch as that agent)"
        )
        with pytest.raises(InvalidValueError, match=r"offered to no agent \(the global view\)"):
            rt.tools.model_tools(None, ts)
        with pytest.raises(InvalidValueError, match=r"\(another Agent object: agents compare by identity\)"):
            rt.tools.model_tools(Agent("main"), ts)
    # The reads still answer for the set as documented: it admits nothing elsewhere.
    assert dict(ts.view(main)) == {}


def test_model_tools_refuses_a_disposed_set(rt: Any) -> None:
    rt.tools.register(tool("plain"))
    main = Agent("main")
    ts = rt.tools.resolve(activation(main))
    ts.dispose()
    with pytest.raises(InvalidStateError, match="^the tool_set was disposed: resolve a new set for this step"):
        rt.tools.model_tools(main, ts)
    assert names(list(rt.tools.model_tools(main).schemas)) == ["plain"]


def test_model_tools_refuses_a_set_resolved_by_another_runtime(rt: Any) -> None:
    # (It offered no tool at all: the set admits nothing in this runtime.)
    from dsh_actors.runtime import ToolRuntime

    rt.tools.register(tool("plain"))
    main = Agent("main")
    with ToolRuntime() as other:
        other.tools.register(tool("plain"))
        with other.tools.resolve(activation(main)) as ts:
            assert names(list(other.tools.model_tools(main, ts).schemas)) == ["plain"]
            with pytest.raises(InvalidValueError) as err:
                rt.tools.model_tools(main, ts)
    assert str(err.value) == (
        "the tool_set was resolved by another ToolRuntime, whose registrations this one does not run: "
        "resolve the set with the runtime that uses it (its rt.tools.resolve(...))"
    )


def test_a_batch_refuses_a_set_resolved_by_another_runtime_before_anything_runs(rt: Any) -> None:
    # (It ran, every call failing "unknown tool": the set admits nothing here.)
    from dsh_actors import ToolBatchInput, ToolCall
    from dsh_actors.runtime import ToolRuntime

    rt.tools.register(tool("plain"))
    main = Agent("main")
    ran: list[str] = []
    rt.events.on("tools/result", lambda execution, result: ran.append(execution.call_id))
    with ToolRuntime() as other:
        other.tools.register(tool("plain"))
        with other.tools.resolve(activation(main)) as ts:
            batch = ToolBatchInput(calls=(ToolCall("c1", "plain", "{}"),), agent=main, tool_set=ts)
            for execute in (rt.tools.execute, lambda b: rt.tools.submit(b).result()):
                with pytest.raises(
                    InvalidValueError, match="^ToolBatchInput.tool_set was resolved by another ToolRuntime"
                ):
                    execute(batch)
    assert ran == []


def test_a_set_for_the_global_view_is_offered_to_the_global_view(rt: Any) -> None:
    rt.tools.register(tool("cond"), when=lambda ctx: True)
    with rt.tools.resolve(activation(None)) as ts:
        assert names(list(rt.tools.model_tools(None, ts).schemas)) == ["cond"]
        with pytest.raises(InvalidValueError, match="resolved for no agent"):
            rt.tools.model_tools(Agent("main"), ts)
