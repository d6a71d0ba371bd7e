"""Mistakes a newcomer makes in a first hour, each told where it is made
and how to fix it: a listener of the wrong shape is refused when it
subscribes, a waterfall listener that forgot ``return next()`` is named so,
and a ``KeyError`` a tool raises reads as one."""

from __future__ import annotations

from typing import Any

import pytest

from dsh_actors import AbortController, InvalidTypeError, RegistrationError, ToolBatchInput, ToolCall, ToolRuntime, tool


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return {"known": "value"}[key]


def run(rt: ToolRuntime, key: str) -> Any:
    return rt.tools.execute(ToolBatchInput(calls=(ToolCall("c1", "lookup", {"key": key}),))).results[0].result


@pytest.mark.parametrize(
    ("event", "listener", "called_as"),
    [
        ("tools/pre-execute", lambda execution: None, "fn(execution, next), 2 positional arguments"),
        ("tools/post-execute", lambda execution, next_: None, "fn(execution, result, next), 3 positional"),
        ("tools/result", lambda: None, "fn(execution, result), 2 positional"),
        ("tools/change", lambda execution: None, "fn(), 0 positional"),
    ],
)
def test_a_listener_that_cannot_take_its_events_arguments_is_refused_when_it_subscribes(
    event: str, listener: Any, called_as: str
) -> None:
    with ToolRuntime() as rt:
        with pytest.raises(InvalidTypeError, match=f"cannot be a '{event}' listener: it is called as") as refused:
            rt.events.on(event, listener)
        assert called_as in str(refused.value)
        assert not rt.events.has_listeners(event)


def test_listeners_that_take_their_arguments_however_they_like_subscribe() -> None:
    with ToolRuntime() as rt:
        rt.events.on("tools/result", lambda *args: None)
        rt.events.on("tools/pre-execute", lambda execution, next_, extra=None: next_())
        rt.events.on("tools/result", print)  # (a builtin: its signature may not tell)
        rt.events.on("my-plugin/event", lambda: None)  # (a plugin's own event: its own rules)


def test_a_waterfall_listener_that_forgot_to_return_next_is_named_so() -> None:
    with ToolRuntime() as rt:
        rt.tools.register(lookup)
        rt.events.on("tools/pre-execute", lambda execution, next_: None)
        message = run(rt, "known").error.message
    assert message == (
        "tools/pre-execute: a listener returned NoneType; expected Allow, Deny, Cancel or Ask "
        "(did it forget to return next()?)"
    )


def test_a_wrapper_and_a_post_execute_listener_that_forgot_to_return_next_are_named_so() -> None:
    with ToolRuntime() as rt:
        rt.tools.register(lookup)
        dispose = rt.events.on("tools/execute", lambda execution, next_: None)
        assert run(rt, "known").error.message.endswith(
            "expected a ToolExecutionResult (did it forget to return next()?)"
        )
        dispose()
        rt.events.on("tools/post-execute", lambda execution, result, next_: None)
        assert run(rt, "known").error.message.endswith("expected Accept or Block (did it forget to return next()?)")


def test_a_key_error_from_a_tool_reads_as_one() -> None:
    with ToolRuntime() as rt:
        rt.tools.register(lookup)
        result = run(rt, "missing")
    assert result.error.message == "KeyError: 'missing'"
    assert result.content[0].text == "Error: KeyError: 'missing'"
    assert (result.error.info.name, result.error.info.code) == ("KeyError", "TOOL_FAILED")


@pytest.mark.parametrize(
    ("calls", "said"),
    [
        (ToolCall("c1", "lookup", {}), "got ToolCall: wrap the one call, calls=[ToolCall(...)]"),
        ("abc", "got str"),
        ({"id": "c1"}, "got dict"),
        (5, "got int"),
    ],
)
def test_calls_that_are_not_a_list_of_calls_are_refused_naming_the_shape(calls: Any, said: str) -> None:
    with pytest.raises(InvalidTypeError, match="ToolBatchInput.calls is a list \\(or tuple\\) of ToolCall") as refused:
        ToolBatchInput(calls=calls)
    assert str(refused.value).endswith(said)
    assert ToolBatchInput(calls=[ToolCall("c1", "lookup", {})]).calls == (ToolCall("c1", "lookup", {}),)


def test_a_controller_given_for_the_signal_is_told_to_pass_its_signal() -> None:
    with ToolRuntime() as rt:
        with pytest.raises(InvalidTypeError) as refused:
            rt.tools.execute(ToolBatchInput(calls=(), signal=AbortController()))  # type: ignore[arg-type]
    assert str(refused.value) == (
        "ToolBatchInput.signal must be an AbortSignal or None, got AbortController: pass its .signal"
    )


def test_an_unannotated_ctx_parameter_is_refused_naming_the_annotation() -> None:
    def summarize(text: str, ctx) -> str:  # type: ignore[no-untyped-def]  # noqa: ANN001
        return text

    with pytest.raises(RegistrationError, match="parameter 'ctx' has no annotation") as refused:
        tool(summarize)
    assert "annotate it ctx: ToolRunContext" in str(refused.value)

    def other(text: str, note) -> str:  # type: ignore[no-untyped-def]  # noqa: ANN001
        return text

    assert "note" in tool(other).parameters["properties"]  # (any other name: offered, any JSON)
