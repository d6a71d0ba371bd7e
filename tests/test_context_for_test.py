"""``ToolRunContext.for_test``: a context for calling a tool body in a unit
test, without a runtime (what the README's unit-testing example uses)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from dsh_actors import (
    AbortController,
    Agent,
    InvalidTypeError,
    InvalidValueError,
    ToolOutput,
    ToolRunContext,
    define_tool,
    materialize,
    tool,
)


def test_the_defaults_make_a_context_a_body_can_read() -> None:
    ctx = ToolRunContext.for_test()

    assert ctx.arguments == {} and ctx.arguments == materialize({})
    assert (ctx.name, ctx.call_id, ctx.root_call_id) == ("tool", "test-call", "test-call")
    assert isinstance(ctx.agent, Agent) and ctx.agent.id == "test"
    assert ctx.deps is None and ctx.tool_set is None and ctx.parent is None and ctx.schema is None
    assert not ctx.signal.aborted
    assert ctx.execution.arguments is ctx.arguments


def test_a_typed_tool_gets_the_deps_and_the_signal_the_test_fires() -> None:
    started = threading.Event()

    @tool
    def wait_for_stop(label: str, ctx: ToolRunContext[dict[str, str]]) -> str:
        """Wait until the call is cancelled."""
        started.set()
        ctx.signal.wait()
        return f"{label} {ctx.deps['word']} by {ctx.agent.id if ctx.agent else None}"

    stop = AbortController()
    ctx = ToolRunContext.for_test(deps={"word": "stopped"}, signal=stop.signal, agent="main")
    out: list[str] = []
    body = threading.Thread(target=lambda: out.append(wait_for_stop("x", ctx)))
    body.start()
    assert started.wait(10)
    stop.abort()
    body.join(10)
    assert out == ["x stopped by main"]
    assert ctx.signal is stop.signal


def test_a_define_tool_body_gets_frozen_arguments_and_its_channels_work() -> None:
    def body(args: Any, ctx: ToolRunContext) -> str:
        ctx.defer_context("seen")
        ctx.conclude_turn()
        ctx.report_progress(1, 2, "half")  # no runtime: checked, published nowhere
        return "/".join(args["paths"])

    echo = define_tool(
        name="join",
        description="Join paths.",
        parameters={"paths": {"type": "array", "items": {"type": "string"}, "required": True}},
        output=ToolOutput(schema={"type": "string"}),
        execute=body,
    )
    ctx = ToolRunContext.for_test(arguments={"paths": ["a", "b"]}, name="join", call_id="c7")

    assert ctx.arguments == {"paths": ("a", "b")}  # frozen, as a call's
    assert echo.execute(ctx.arguments, ctx) == "a/b"
    assert (ctx.name, ctx.call_id) == ("join", "c7")
    with pytest.raises(InvalidValueError, match="must be finite"):
        ctx.report_progress(float("nan"))


def test_an_agent_is_kept_and_none_means_no_agent() -> None:
    agent = Agent("sub", parent=Agent("main"))
    assert ToolRunContext.for_test(agent=agent).agent is agent
    assert ToolRunContext.for_test(agent=None).agent is None


@pytest.mark.parametrize(
    ("keywords", "named"),
    [
        ({"name": 3}, "name=..."),
        ({"call_id": None}, "call_id=..."),
        ({"agent": 5}, "agent=..."),
        ({"signal": AbortController()}, "signal=..."),
    ],
)
def test_a_wrong_keyword_is_refused_naming_it(keywords: dict[str, Any], named: str) -> None:
    with pytest.raises(InvalidTypeError, match=rf"for_test\({named}\)"):
        ToolRunContext.for_test(**keywords)
