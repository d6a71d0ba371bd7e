"""The ``tools/execute`` waterfall and the signals of one call (SPEC
section 5): a wrapper may replace ``execution.signal``; the body always
gets a fresh fused signal; post-execute sees the caller's signal again;
nothing else about the execution can be set."""

from __future__ import annotations

from typing import Any

import pytest

from dsh_actors import AbortController, AbortSignal, Agent, ErrorCode

from .helpers import Journal, assert_failure, echo_tool, run_one


def replacing_wrapper(replacement: AbortController, seen: dict[str, Any]) -> Any:
    def wrapper(execution: Any, next_: Any) -> Any:
        seen["wrapper caller signal"] = execution.signal
        execution.signal = replacement.signal
        seen["wrapper after setting"] = execution.signal
        return next_()

    return wrapper


def recording_pre(seen: dict[str, Any]) -> Any:
    def pre(execution: Any, next_: Any) -> Any:
        seen["pre signal"] = execution.signal
        return next_()

    return pre


def test_the_body_gets_a_fresh_signal_even_without_a_wrapper(rt: Any) -> None:
    seen: dict[str, Any] = {}

    def body(args: Any, ctx: Any) -> Any:
        seen["body signal"] = ctx.signal
        return args["message"]

    rt.events.on("tools/pre-execute", recording_pre(seen))
    rt.tools.register(echo_tool(execute=body))

    assert not run_one(rt, agent=Agent("main")).is_error
    assert isinstance(seen["body signal"], AbortSignal)
    assert seen["body signal"] is not seen["pre signal"]


def test_a_wrapper_may_replace_the_signal_and_the_body_gets_a_fresh_fused_one(rt: Any) -> None:
    replacement = AbortController()
    seen: dict[str, Any] = {}

    def body(args: Any, ctx: Any) -> Any:
        seen["body signal"] = ctx.signal
        return args["message"]

    rt.events.on("tools/pre-execute", recording_pre(seen))
    rt.events.on("tools/execute", replacing_wrapper(replacement, seen))
    rt.tools.register(echo_tool(execute=body))

    result = run_one(rt, agent=Agent("main"))

    assert not result.is_error and result.value == "hi"
    assert seen["wrapper caller signal"] is seen["pre signal"]
    assert seen["wrapper after setting"] is replacement.signal
    assert seen["body signal"] is not replacement.signal
    assert seen["body signal"] is not seen["pre signal"]


def test_the_next_wrapper_sees_the_replacement_signal(rt: Any) -> None:
    replacement = AbortController()
    seen: dict[str, Any] = {}

    def inner(execution: Any, next_: Any) -> Any:
        seen["inner"] = execution.signal
        return next_()

    rt.events.on("tools/execute", replacing_wrapper(replacement, seen))
    rt.events.on("tools/execute", inner)
    rt.tools.register(echo_tool())

    assert not run_one(rt).is_error
    assert seen["inner"] is replacement.signal


def test_aborting_the_caller_aborts_the_bodys_signal_but_not_the_wrappers_replacement(rt: Any) -> None:
    caller = AbortController()
    replacement = AbortController()
    seen: dict[str, Any] = {}

    def body(args: Any, ctx: Any) -> Any:
        seen["before"] = ctx.signal.aborted
        caller.abort()
        seen["body aborted"] = ctx.signal.aborted
        seen["replacement aborted"] = replacement.signal.aborted
        return args["message"]

    rt.events.on("tools/execute", replacing_wrapper(replacement, seen))
    rt.tools.register(echo_tool(execute=body))

    result = run_one(rt, agent=Agent("main"), signal=caller.signal)

    assert seen["before"] is False
    assert seen["body aborted"] is True
    assert seen["replacement aborted"] is False
    assert_failure(result, "tool call aborted", ErrorCode.ABORTED)


def test_aborting_the_wrappers_replacement_aborts_the_bodys_signal_but_not_the_callers(rt: Any) -> None:
    replacement = AbortController()
    seen: dict[str, Any] = {}

    def body(args: Any, ctx: Any) -> Any:
        replacement.abort()
        seen["body aborted"] = ctx.signal.aborted
        seen["caller aborted"] = seen["wrapper caller signal"].aborted
        return args["message"]

    rt.events.on("tools/execute", replacing_wrapper(replacement, seen))
    rt.tools.register(echo_tool(execute=body))

    result = run_one(rt, agent=Agent("main"))

    assert seen["body aborted"] is True
    assert seen["caller aborted"] is False
    # Only the caller's cancellation replaces a success.
    assert not result.is_error and result.value == "hi"


def test_a_replacement_that_is_already_aborted_gives_the_body_an_aborted_signal(rt: Any) -> None:
    replacement = AbortController()
    replacement.abort()
    seen: dict[str, Any] = {}

    def body(args: Any, ctx: Any) -> Any:
        seen["body aborted"] = ctx.signal.aborted
        return args["message"]

    rt.events.on("tools/execute", replacing_wrapper(replacement, seen))
    rt.tools.register(echo_tool(execute=body))

    run_one(rt)
    assert seen["body aborted"] is True


def test_post_execute_sees_the_callers_signal_again(rt: Any) -> None:
    replacement = AbortController()
    seen: dict[str, Any] = {}

    def post(execution: Any, result: Any, next_: Any) -> Any:
        seen["post signal"] = execution.signal
        return next_()

    def observe(execution: Any, result: Any) -> None:
        seen["result signal"] = execution.signal

    rt.events.on("tools/pre-execute", recording_pre(seen))
    rt.events.on("tools/execute", replacing_wrapper(replacement, seen))
    rt.events.on("tools/post-execute", post)
    rt.events.on("tools/result", observe)
    rt.tools.register(echo_tool())

    assert not run_one(rt, agent=Agent("main")).is_error
    assert seen["post signal"] is seen["pre signal"]
    assert seen["post signal"] is not replacement.signal
    assert seen["result signal"] is seen["pre signal"]


def test_a_wrapper_that_throws_after_replacing_the_signal_leaves_the_callers_signal(rt: Any) -> None:
    replacement = AbortController()
    seen: dict[str, Any] = {}

    def wrapper(execution: Any, next_: Any) -> Any:
        execution.signal = replacement.signal
        raise RuntimeError("wrapper broke")

    def observe(execution: Any, result: Any) -> None:
        seen["result signal"] = execution.signal

    rt.events.on("tools/pre-execute", recording_pre(seen))
    rt.events.on("tools/execute", wrapper)
    rt.events.on("tools/result", observe)
    rt.tools.register(echo_tool())

    assert_failure(run_one(rt), "wrapper broke")
    assert seen["result signal"] is seen["pre signal"]


@pytest.mark.parametrize(
    ("attribute", "value"),
    [
        ("call_id", "other"),
        ("root_call_id", "other"),
        ("name", "other"),
        ("arguments", {"message": "rewritten"}),
        ("agent", None),
        ("tool_set", None),
        ("parent", None),
        ("token", None),
        ("schema", None),
        ("invented", 1),
    ],
)
def test_a_wrapper_cannot_set_any_other_execution_attribute(rt: Any, attribute: str, value: Any) -> None:
    outcome: dict[str, Any] = {}

    def wrapper(execution: Any, next_: Any) -> Any:
        before = getattr(execution, attribute, "missing")
        try:
            setattr(execution, attribute, value)
        except AttributeError:
            outcome["raised"] = True
        outcome["unchanged"] = getattr(execution, attribute, "missing") is before
        return next_()

    rt.events.on("tools/execute", wrapper)
    rt.tools.register(echo_tool())

    result = run_one(rt, agent=Agent("main"))

    assert outcome == {"raised": True, "unchanged": True}
    assert not result.is_error and result.value == "hi"


def test_a_wrapper_cannot_remove_the_signal(rt: Any) -> None:
    outcome: dict[str, Any] = {}

    def wrapper(execution: Any, next_: Any) -> Any:
        before = execution.signal
        try:
            execution.signal = None
        except (AttributeError, TypeError):
            outcome["set None raised"] = True
        try:
            del execution.signal
        except (AttributeError, TypeError):
            outcome["del raised"] = True
        outcome["unchanged"] = execution.signal is before
        return next_()

    rt.events.on("tools/execute", wrapper)
    rt.tools.register(echo_tool())

    assert not run_one(rt).is_error
    assert outcome == {"set None raised": True, "del raised": True, "unchanged": True}


@pytest.mark.parametrize("event", ["tools/pre-execute", "tools/post-execute"])
def test_setting_the_signal_outside_a_wrapper_raises(rt: Any, event: str) -> None:
    outcome: dict[str, Any] = {}
    other = AbortController()

    def attempt(execution: Any) -> None:
        before = execution.signal
        try:
            execution.signal = other.signal
        except (AttributeError, TypeError):
            outcome["raised"] = True
        outcome["unchanged"] = execution.signal is before

    if event == "tools/pre-execute":
        rt.events.on(event, lambda execution, next_: (attempt(execution), next_())[1])
    else:
        rt.events.on(event, lambda execution, result, next_: (attempt(execution), next_())[1])
    rt.tools.register(echo_tool())

    run_one(rt, agent=Agent("main"))
    assert outcome == {"raised": True, "unchanged": True}


def test_a_guard_cannot_set_the_signal(rt: Any) -> None:
    outcome: dict[str, Any] = {}

    def guard(execution: Any) -> str | None:
        try:
            execution.signal = AbortController().signal
        except (AttributeError, TypeError):
            outcome["raised"] = True
        return None

    rt.tools.guard(guard)
    rt.tools.register(echo_tool())
    assert not run_one(rt).is_error
    assert outcome == {"raised": True}


def test_wrappers_nest_with_the_first_registered_outermost(rt: Any) -> None:
    journal = Journal()

    def wrapper(label: str) -> Any:
        def wrap(execution: Any, next_: Any) -> Any:
            journal.add(f"{label} in")
            result = next_()
            journal.add(f"{label} out")
            return result

        return wrap

    def body(args: Any, ctx: Any) -> Any:
        journal.add("body")
        return args["message"]

    rt.events.on("tools/execute", wrapper("outer"))
    rt.events.on("tools/execute", wrapper("inner"))
    rt.tools.register(echo_tool(execute=body))

    assert not run_one(rt).is_error
    assert journal.entries == ["outer in", "inner in", "body", "inner out", "outer out"]
