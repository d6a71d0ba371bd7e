"""The end of the trip (SPEC section 5): ``finalize_content`` exactly once
for every outcome, the final freeze, and contained ``tools/result``
observers."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from dsh_actors import (
    AbortController,
    AbortSignal,
    Accept,
    Agent,
    Ask,
    Block,
    Cancel,
    Deny,
    UserMessage,
    text,
    thaw,
)
from dsh_actors.json import FrozenDict

from .helpers import Journal, call, echo_tool, run, run_one


def raising_body(args: Any, ctx: Any) -> Any:
    raise ValueError("the disk is on fire")


def raise_in_pre(execution: Any, next_: Any) -> Any:
    raise RuntimeError("pre broke")


def raise_in_wrapper(execution: Any, next_: Any) -> Any:
    raise RuntimeError("wrapper broke")


Setup = Callable[[Any], dict[str, Any]]


def success(rt: Any) -> dict[str, Any]:
    return {}


def tool_error(rt: Any) -> dict[str, Any]:
    return {"execute": raising_body}


def deny(rt: Any) -> dict[str, Any]:
    rt.events.on("tools/pre-execute", lambda execution, next_: Deny("denied"))
    return {}


def cancel(rt: Any) -> dict[str, Any]:
    rt.events.on("tools/pre-execute", lambda execution, next_: Cancel())
    return {}


def pre_aborted(rt: Any) -> dict[str, Any]:
    controller = AbortController()
    controller.abort()
    return {"signal": controller.signal}


def throwing_pre_execute(rt: Any) -> dict[str, Any]:
    rt.events.on("tools/pre-execute", raise_in_pre)
    return {}


def throwing_wrapper(rt: Any) -> dict[str, Any]:
    rt.events.on("tools/execute", raise_in_wrapper)
    return {}


def non_json_arguments(rt: Any) -> dict[str, Any]:
    return {"arguments": {"message": "hi", "bad": float("nan")}}


def invalid_output(rt: Any) -> dict[str, Any]:
    return {"execute": lambda args, ctx: 42}


def guard_denial(rt: Any) -> dict[str, Any]:
    rt.tools.guard(lambda execution: "guarded")
    return {}


def blocked(rt: Any) -> dict[str, Any]:
    rt.events.on("tools/post-execute", lambda execution, result, next_: Block(feedback=[text("no")]))
    return {}


def unknown_approval_answer(rt: Any) -> dict[str, Any]:
    rt.approvals.set(lambda request: "perhaps")
    rt.events.on("tools/pre-execute", lambda execution, next_: Ask())
    return {}


def aborted_after_the_body(rt: Any) -> dict[str, Any]:
    controller = AbortController()

    def body(args: Any, ctx: Any) -> Any:
        controller.abort()
        return args["message"]

    return {"execute": body, "signal": controller.signal}


OUTCOMES = [
    pytest.param(success, False, id="success"),
    pytest.param(tool_error, True, id="tool-error"),
    pytest.param(deny, True, id="deny"),
    pytest.param(cancel, True, id="cancel"),
    pytest.param(pre_aborted, True, id="pre-aborted"),
    pytest.param(throwing_pre_execute, True, id="throwing-pre-execute"),
    pytest.param(throwing_wrapper, True, id="throwing-wrapper"),
    pytest.param(non_json_arguments, True, id="non-json-arguments"),
    pytest.param(invalid_output, True, id="invalid-output"),
    pytest.param(guard_denial, True, id="guard-denial"),
    pytest.param(blocked, True, id="block"),
    pytest.param(unknown_approval_answer, True, id="unknown-approval-answer"),
    pytest.param(aborted_after_the_body, True, id="aborted-after-the-body"),
]


def run_scenario(rt: Any, setup: Setup, finalize: Callable[[Any, Any], Any]) -> tuple[Any, list[Any]]:
    options = setup(rt)
    published: list[Any] = []
    rt.events.on("tools/result", lambda execution, result: published.append(result))
    tool_options = {"execute": options["execute"]} if "execute" in options else {}
    rt.tools.register(echo_tool(finalize_content=finalize, **tool_options))
    the_call = call(arguments=options.get("arguments", '{"message": "hi"}'))
    result = run_one(rt, the_call, agent=Agent("main"), signal=options.get("signal"))
    return result, published


@pytest.mark.parametrize(("setup", "is_error"), OUTCOMES)
def test_finalize_content_is_called_exactly_once_for_every_outcome(rt: Any, setup: Setup, is_error: bool) -> None:
    journal = Journal()

    def finalize(execution: Any, result: Any) -> Any:
        journal.add((execution.call_id, result.is_error, result.content))
        return None

    result, published = run_scenario(rt, setup, finalize)

    assert result.is_error is is_error
    assert journal.entries == [("c1", is_error, result.content)]
    assert published == [result]


@pytest.mark.parametrize(("setup", "is_error"), OUTCOMES)
def test_the_content_finalize_content_returns_becomes_the_content(rt: Any, setup: Setup, is_error: bool) -> None:
    def finalize(execution: Any, result: Any) -> Any:
        return [text("final: " + result.content[0].text if result.content else "final")]

    result, published = run_scenario(rt, setup, finalize)

    assert result.is_error is is_error
    assert len(result.content) == 1 and result.content[0].text.startswith("final")
    assert published == [result]


def test_finalize_content_keeps_the_value_meta_and_contexts_of_a_success(rt: Any) -> None:
    deferred = UserMessage(content=[text("ctx")])

    def body(args: Any, ctx: Any) -> Any:
        ctx.defer_context(deferred)
        return args["message"]

    rt.tools.register(
        echo_tool(
            execute=body,
            presentation_meta=lambda args, value: {"chars": len(value)},
            finalize_content=lambda execution, result: [text("bounded")],
        )
    )
    result = run_one(rt)
    assert not result.is_error
    assert result.value == "hi"
    assert result.content == (text("bounded"),)
    assert result.meta == {"chars": 2}
    assert result.additional_contexts == (deferred,)


def test_finalize_content_keeps_the_error_of_a_failure(rt: Any) -> None:
    rt.events.on("tools/pre-execute", lambda execution, next_: Deny("denied"))
    rt.tools.register(echo_tool(finalize_content=lambda execution, result: [text("bounded")]))
    result = run_one(rt, agent=Agent("main"))
    assert result.is_error
    assert result.error.message == "denied"
    assert result.content == (text("bounded"),)


def test_finalize_content_sees_the_outcome_after_post_execute(rt: Any) -> None:
    seen: list[Any] = []
    rt.events.on(
        "tools/post-execute",
        lambda execution, result, next_: Accept(content=[text("from policy")]),
    )
    rt.tools.register(echo_tool(finalize_content=lambda execution, result: seen.append(result.content)))
    assert run_one(rt).content == (text("from policy"),)
    assert seen == [(text("from policy"),)]


@pytest.mark.parametrize(
    "finalize",
    [
        pytest.param(lambda execution, result: 1 / 0, id="raises"),
        pytest.param(lambda execution, result: "not a list", id="returns-a-str"),
        pytest.param(lambda execution, result: [object()], id="returns-non-blocks"),
    ],
)
def test_a_misbehaving_finalize_content_is_contained(rt: Any, finalize: Any) -> None:
    published: list[Any] = []
    rt.events.on("tools/result", lambda execution, result: published.append(result))
    rt.tools.register(echo_tool(finalize_content=finalize))
    rt.tools.register(echo_tool(name="plain"))

    batch = run(rt, call(), call(name="plain", id="c2"))

    assert [item.call_id for item in batch.results] == ["c1", "c2"]
    assert len(published) == 2
    assert not batch.results[1].result.is_error
    assert batch.results[1].result.value == "hi"


# --------------------------------------------------------------------------
# The final freeze and tools/result
# --------------------------------------------------------------------------


def structured_tool(**options: Any) -> Any:
    return echo_tool(
        execute=lambda args, ctx: {"items": [1, 2], "nested": {"k": "v"}},
        schema={"type": "object", "additional_properties": True},
        render=lambda args, value: [text("structured")],
        presentation_meta=lambda args, value: {"lines": [1, 2], "more": {"a": [3]}},
        **options,
    )


def test_tools_result_receives_the_frozen_execution_that_traversed_the_pipeline(rt: Any) -> None:
    seen: dict[str, Any] = {}

    def pre(execution: Any, next_: Any) -> Any:
        seen["pre"] = execution
        return next_()

    def observe(execution: Any, result: Any) -> None:
        seen["result"] = execution
        try:
            execution.signal = AbortSignal()
        except (AttributeError, TypeError):
            seen["set raised"] = True

    rt.events.on("tools/pre-execute", pre)
    rt.events.on("tools/result", observe)
    rt.tools.register(echo_tool())

    assert not run_one(rt, agent=Agent("main")).is_error
    assert seen["result"] is seen["pre"]
    assert seen["set raised"] is True
    with pytest.raises((AttributeError, TypeError)):
        seen["result"].signal = AbortSignal()
    with pytest.raises(AttributeError):
        seen["result"].name = "other"


def test_tools_result_receives_a_deep_frozen_result_equal_to_the_returned_one(rt: Any) -> None:
    published: list[Any] = []
    rt.events.on("tools/result", lambda execution, result: published.append(result))
    rt.tools.register(structured_tool())

    result = run_one(rt)

    assert not result.is_error
    assert published == [result]
    frozen = published[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        frozen.content = (text("changed"),)  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        frozen.value = None  # type: ignore[misc]
    assert type(frozen.content) is tuple
    assert type(frozen.additional_contexts) is tuple
    for value in (frozen.value, frozen.meta, result.value, result.meta):
        assert type(value) is FrozenDict
        with pytest.raises(TypeError):
            value["new"] = 1
    assert thaw(frozen.value) == {"items": [1, 2], "nested": {"k": "v"}}
    assert type(frozen.value["items"]) is tuple
    assert type(frozen.value["nested"]) is FrozenDict
    assert thaw(frozen.meta) == {"lines": [1, 2], "more": {"a": [3]}}
    assert type(frozen.meta["lines"]) is tuple
    assert type(frozen.meta["more"]["a"]) is tuple


def test_a_failure_published_to_tools_result_is_frozen_too(rt: Any) -> None:
    published: list[Any] = []
    rt.events.on("tools/result", lambda execution, result: published.append(result))
    rt.tools.register(echo_tool(execute=raising_body))

    result = run_one(rt)

    assert published == [result]
    with pytest.raises(dataclasses.FrozenInstanceError):
        published[0].error = None  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        published[0].error.message = "changed"  # type: ignore[misc]


def test_a_raising_tools_result_observer_is_contained(rt: Any) -> None:
    journal = Journal()

    def broken(execution: Any, result: Any) -> None:
        journal.add("broken")
        raise RuntimeError("observer broke")

    def healthy(execution: Any, result: Any) -> None:
        journal.add("healthy")

    rt.events.on("tools/result", broken)
    rt.events.on("tools/result", healthy)
    rt.tools.register(echo_tool())

    result = run_one(rt)

    assert not result.is_error and result.value == "hi"
    assert journal.entries == ["broken", "healthy"]
    assert not run_one(rt).is_error


def test_tools_result_is_published_once_per_call_in_model_order(rt: Any) -> None:
    order: list[str] = []
    rt.events.on("tools/result", lambda execution, result: order.append(execution.call_id))
    rt.tools.register(echo_tool())
    run(rt, *(call(id=f"c{i}") for i in range(5)))
    assert order == [f"c{i}" for i in range(5)]
