"""After the body (SPEC section 5): wrapper results, output validation,
``render`` and ``presentation_meta``, ``project_content``, the
``tools/post-execute`` waterfall, context order and ``conclude_turn``."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from dsh_actors import (
    UNSET,
    Accept,
    Agent,
    Block,
    Deny,
    ErrorCode,
    TextBlock,
    ToolExecutionFailure,
    ToolExecutionSuccess,
    ToolFailure,
    text,
    thaw,
)

from .helpers import (
    Journal,
    Trip,
    assert_failure,
    call,
    code_of,
    context,
    echo_tool,
    run,
    run_one,
)


def rendered(args: Any, value: Any) -> list[TextBlock]:
    return [text("rendered: " + value)]


def chars(args: Any, value: Any) -> Any:
    return {"chars": len(value)}


def post_returning(decision: Any) -> Any:
    def post(execution: Any, result: Any, next_: Any) -> Any:
        return decision

    return post


def raising_body(args: Any, ctx: Any) -> Any:
    raise ValueError("the disk is on fire")


# --------------------------------------------------------------------------
# What a wrapper returns
# --------------------------------------------------------------------------


def test_a_success_a_wrapper_returns_without_the_body_is_revalidated_and_re_rendered(rt: Any) -> None:
    trip = Trip(rt)

    def wrapper(execution: Any, next_: Any) -> Any:
        return ToolExecutionSuccess(value="from the wrapper", content=[text("the wrapper's own content")])

    rt.events.on("tools/execute", wrapper)
    rt.tools.register(echo_tool(execute=trip.body, render=rendered, presentation_meta=chars))

    result = run_one(rt, agent=Agent("main"))

    assert not result.is_error
    assert result.value == "from the wrapper"
    assert result.content == (text("rendered: from the wrapper"),)
    assert result.meta == {"chars": len("from the wrapper")}
    assert "body" not in trip.journal


@pytest.mark.parametrize("wrappers", [1, 2])
def test_a_wrapper_that_passes_an_argument_to_next_fails_the_call_without_the_body(rt: Any, wrappers: int) -> None:
    """``next()`` takes no arguments, the innermost wrapper's (the body's
    default itself) as any other: an argument is the wrapper's own
    TypeError, never something handed on to the body."""
    trip = Trip(rt)
    for _ in range(wrappers - 1):
        rt.events.on("tools/execute", lambda execution, next_: next_())
    rt.events.on("tools/execute", lambda execution, next_: next_("some registration"))
    rt.tools.register(echo_tool(execute=trip.body))

    result = run_one(rt, agent=Agent("main"))

    assert code_of(result) == ErrorCode.TOOL_FAILED
    assert result.error.info.name == "TypeError"
    assert "body" not in trip.journal


def test_an_invalid_value_from_a_wrapper_is_invalid_tool_output(rt: Any) -> None:
    trip = Trip(rt)
    rt.events.on(
        "tools/execute",
        lambda execution, next_: ToolExecutionSuccess(value=42, content=[text("42")]),
    )
    rt.tools.register(echo_tool(execute=trip.body))

    result = run_one(rt, agent=Agent("main"))

    assert code_of(result) == ErrorCode.INVALID_TOOL_OUTPUT
    assert result.error.message.startswith('tool "echo" returned invalid output: ')
    assert "body" not in trip.journal


def test_a_wrapper_success_for_a_tool_unregistered_meanwhile_is_rendered_by_the_tool_the_call_runs(rt: Any) -> None:
    # A change that lands while the wrappers run does not apply to the call
    # (it was UNKNOWN_TOOL, while the body, called instead, ran the tool).
    trip = Trip(rt)
    unregister: list[Any] = []

    def wrapper(execution: Any, next_: Any) -> Any:
        unregister[0]()
        return ToolExecutionSuccess(value="stale", content=[text("stale")])

    rt.events.on("tools/execute", wrapper)
    unregister.append(rt.tools.register(echo_tool(execute=trip.body)))

    result = run_one(rt, agent=Agent("main"))

    assert not result.is_error and result.value == "stale", result
    assert "body" not in trip.journal


def test_a_failure_a_wrapper_returns_without_the_body_is_kept(rt: Any) -> None:
    rt.events.on(
        "tools/execute",
        lambda execution, next_: ToolExecutionFailure(
            error=ToolFailure("rate limited"), content=[text("Error: rate limited")]
        ),
    )
    trip = Trip(rt)
    rt.tools.register(echo_tool(execute=trip.body))

    result = run_one(rt, agent=Agent("main"))

    assert_failure(result, "rate limited")
    assert "body" not in trip.journal
    assert "post" in trip.journal


@pytest.mark.parametrize("calls_next", [False, True], ids=["before-next", "after-next"])
def test_a_throwing_wrapper_fails_the_call_and_skips_post_execute(rt: Any, calls_next: bool) -> None:
    def wrapper(execution: Any, next_: Any) -> Any:
        if calls_next:
            next_()
        raise RuntimeError("the wrapper broke")

    rt.events.on("tools/execute", wrapper)
    trip = Trip(rt)
    rt.tools.register(echo_tool(execute=trip.body))

    result = run_one(rt, agent=Agent("main"))

    assert_failure(result, "the wrapper broke")
    assert ("body" in trip.journal) is calls_next
    assert "post" not in trip.journal
    assert trip.journal.count(("result", "c1")) == 1


def test_a_wrapper_returning_something_that_is_not_a_result_fails_the_call(rt: Any) -> None:
    rt.events.on("tools/execute", lambda execution, next_: "hi")
    rt.tools.register(echo_tool())
    result = run_one(rt)
    assert result.is_error and result.value is None


@pytest.mark.parametrize("calls_next", [False, True], ids=["without-next", "after-next"])
def test_a_wrapper_success_without_a_value_fails_the_call_naming_the_fix(rt: Any, calls_next: bool) -> None:
    # (Its message was the tool's INVALID_TOOL_OUTPUT, naming our class:
    # 'value: dsh_actors.model._Unset is not lossless JSON'.)
    def wrapper(execution: Any, next_: Any) -> Any:
        if calls_next:
            next_()
        return ToolExecutionSuccess(value=UNSET, content=[text("done")])

    rt.events.on("tools/execute", wrapper)
    trip = Trip(rt)
    rt.tools.register(echo_tool(execute=trip.body))

    result = run_one(rt)

    assert_failure(
        result,
        "tools/execute: a wrapper returned a ToolExecutionSuccess without a value (value=UNSET): "
        "give it the tool's value (None is one), or return next()'s result",
        ErrorCode.POLICY_FAILED,
    )
    assert ("body" in trip.journal) is calls_next
    assert "post" not in trip.journal  # (as for any wrapper that broke its contract)


def test_accept_with_value_unset_keeps_the_result(rt: Any) -> None:
    rt.events.on("tools/post-execute", post_returning(Accept(value=UNSET)))
    rt.tools.register(echo_tool())
    result = run_one(rt)
    assert not result.is_error and result.value == "hi"


def test_a_wrapper_that_retries_calls_the_body_again(rt: Any) -> None:
    journal = Journal()

    def body(args: Any, ctx: Any) -> Any:
        journal.add("body")
        if len(journal) == 1:
            raise RuntimeError("flaky")
        return args["message"]

    def retry(execution: Any, next_: Any) -> Any:
        result = next_()
        return next_() if result.is_error else result

    rt.events.on("tools/execute", retry)
    rt.tools.register(echo_tool(execute=body))

    result = run_one(rt)
    assert not result.is_error and result.value == "hi"
    assert journal.entries == ["body", "body"]


# --------------------------------------------------------------------------
# Output validation, render, presentation_meta
# --------------------------------------------------------------------------


def test_a_value_failing_the_output_schema_is_invalid_tool_output(rt: Any) -> None:
    rt.tools.register(echo_tool(execute=lambda args, ctx: 42))

    result = run_one(rt)

    assert code_of(result) == ErrorCode.INVALID_TOOL_OUTPUT
    prefix = 'tool "echo" returned invalid output: '
    assert result.error.message.startswith(prefix)
    assert len(result.error.message) > len(prefix)
    assert result.content == (TextBlock("Error: " + result.error.message),)
    assert result.value is None


@pytest.mark.parametrize(
    "value",
    [pytest.param(float("nan"), id="nan"), pytest.param(float("inf"), id="inf"), pytest.param(-0.0, id="minus-zero")],
)
def test_a_value_that_is_not_lossless_json_is_invalid_tool_output(rt: Any, value: float) -> None:
    rt.tools.register(
        echo_tool(
            execute=lambda args, ctx: value,
            schema={"type": "number"},
            render=lambda args, v: [text(str(v))],
        )
    )
    result = run_one(rt)
    assert code_of(result) == ErrorCode.INVALID_TOOL_OUTPUT
    assert result.error.message.startswith('tool "echo" returned invalid output: ')


def test_a_render_that_raises_fails_the_call(rt: Any) -> None:
    def render(args: Any, value: Any) -> Any:
        raise RuntimeError("cannot render")

    rt.tools.register(echo_tool(render=render))
    result = run_one(rt)
    assert result.is_error and result.value is None
    assert result.error.message == 'output.render of tool "echo": raised RuntimeError: cannot render'
    # The message, and its fix, are the developer's: the model reads that the tool ran.
    assert result.content == (
        TextBlock('Error: tool "echo" ran, but its output could not be rendered: a fault in the tool, not in the call'),
    )


def test_presentation_meta_appears_in_the_meta_of_a_root_call(rt: Any) -> None:
    rt.tools.register(echo_tool(presentation_meta=lambda args, value: {"chars": len(value), "tags": ["x"]}))
    result = run_one(rt)
    assert not result.is_error
    assert thaw(result.meta) == {"chars": 2, "tags": ["x"]}


def test_without_presentation_meta_the_meta_is_none(rt: Any) -> None:
    rt.tools.register(echo_tool())
    assert run_one(rt).meta is None


@pytest.mark.parametrize(
    "meta",
    [
        pytest.param(lambda args, value: float("nan"), id="not-lossless"),
        pytest.param(lambda args, value: 1 / 0, id="raises"),
    ],
)
def test_a_failing_presentation_meta_fails_the_call(rt: Any, meta: Any) -> None:
    rt.tools.register(echo_tool(presentation_meta=meta))
    result = run_one(rt)
    assert result.is_error and result.value is None


# --------------------------------------------------------------------------
# project_content
# --------------------------------------------------------------------------


def test_project_content_replaces_the_content_before_post_execute(rt: Any) -> None:
    projected: list[Any] = []

    def project(execution: Any, result: Any) -> Any:
        projected.append((execution.call_id, result.value, result.content))
        return [text("projected")]

    trip = Trip(rt)
    rt.tools.register(echo_tool(project_content=project, presentation_meta=chars))

    result = run_one(rt, agent=Agent("main"))

    assert projected == [("c1", "hi", (text("hi"),))]
    assert trip.post_results[0].content == (text("projected"),)
    assert not result.is_error
    assert result.content == (text("projected"),)
    assert result.value == "hi"
    assert result.meta == {"chars": 2}


def test_project_content_returning_none_keeps_the_rendered_content(rt: Any) -> None:
    rt.tools.register(echo_tool(project_content=lambda execution, result: None))
    assert run_one(rt).content == (text("hi"),)


def test_a_post_execute_replacement_wins_over_project_content(rt: Any) -> None:
    rt.events.on("tools/post-execute", post_returning(Accept(content=[text("policy")])))
    rt.tools.register(echo_tool(project_content=lambda execution, result: [text("projected")]))
    assert run_one(rt).content == (text("policy"),)


def test_project_content_runs_for_a_denial_entering_post_execute(rt: Any) -> None:
    journal = Journal()

    def project(execution: Any, result: Any) -> Any:
        journal.add(("project", result.is_error))
        return None

    rt.events.on("tools/pre-execute", lambda execution, next_: Deny("no"))
    rt.tools.register(echo_tool(project_content=project))

    assert_failure(run_one(rt, agent=Agent("main")), "no")
    assert journal.entries == [("project", True)]


def throwing_pre(execution: Any, next_: Any) -> Any:
    raise RuntimeError("pre broke")


def throwing_wrapper(execution: Any, next_: Any) -> Any:
    raise RuntimeError("wrapper broke")


@pytest.mark.parametrize(
    ("event", "listener"),
    [
        pytest.param("tools/pre-execute", throwing_pre, id="throwing-pre-execute"),
        pytest.param("tools/execute", throwing_wrapper, id="throwing-wrapper"),
    ],
)
def test_project_content_is_not_called_for_failures_that_bypass_post_execute(
    rt: Any, event: str, listener: Any
) -> None:
    journal = Journal()

    def project(execution: Any, result: Any) -> Any:
        journal.add("project")
        return [text("projected")]

    rt.events.on(event, listener)
    rt.tools.register(echo_tool(project_content=project))

    result = run_one(rt, agent=Agent("main"))

    assert result.is_error
    assert journal.entries == []
    assert result.content != (text("projected"),)


# --------------------------------------------------------------------------
# The tools/post-execute waterfall
# --------------------------------------------------------------------------


def test_post_execute_accepts_by_default_and_next_returns_accept(rt: Any) -> None:
    decisions: list[Any] = []

    def post(execution: Any, result: Any, next_: Any) -> Any:
        decision = next_()
        decisions.append(decision)
        return decision

    rt.events.on("tools/post-execute", post)
    rt.tools.register(echo_tool())

    result = run_one(rt)

    assert decisions == [Accept()]
    assert not result.is_error and result.value == "hi" and result.content == (text("hi"),)


def test_accept_content_replaces_the_content_and_keeps_value_and_meta(rt: Any) -> None:
    rt.events.on("tools/post-execute", post_returning(Accept(content=[text("replaced")])))
    rt.tools.register(echo_tool(presentation_meta=chars))

    result = run_one(rt)

    assert not result.is_error
    assert result.content == (text("replaced"),)
    assert result.value == "hi"
    assert result.meta == {"chars": 2}


def test_accept_content_on_a_failure_keeps_it_a_failure(rt: Any) -> None:
    rt.events.on("tools/post-execute", post_returning(Accept(content=[text("softened")])))
    rt.tools.register(echo_tool(execute=raising_body))

    result = run_one(rt)

    assert result.is_error
    assert result.error.message == "the disk is on fire"
    assert result.content == (text("softened"),)


def test_accept_value_revalidates_re_renders_and_recomputes_meta(rt: Any) -> None:
    rt.events.on("tools/post-execute", post_returning(Accept(value="replacement")))
    rt.tools.register(echo_tool(render=rendered, presentation_meta=chars))

    result = run_one(rt)

    assert not result.is_error
    assert result.value == "replacement"
    assert result.content == (text("rendered: replacement"),)
    assert result.meta == {"chars": len("replacement")}


def test_an_invalid_accept_value_is_invalid_tool_output(rt: Any) -> None:
    rt.events.on("tools/post-execute", post_returning(Accept(value=7)))
    rt.tools.register(echo_tool())

    result = run_one(rt)

    assert code_of(result) == ErrorCode.INVALID_TOOL_OUTPUT
    assert result.error.message.startswith('tool "echo" returned invalid output: ')


@pytest.mark.parametrize(
    "failing",
    [pytest.param("tool-error", id="tool-error"), pytest.param("deny", id="deny")],
)
def test_accept_value_is_not_allowed_on_a_failure(rt: Any, failing: str) -> None:
    rt.events.on("tools/post-execute", post_returning(Accept(value="sneaky success")))
    if failing == "deny":
        rt.events.on("tools/pre-execute", lambda execution, next_: Deny("denied"))
        rt.tools.register(echo_tool())
    else:
        rt.tools.register(echo_tool(execute=raising_body))

    result = run_one(rt, agent=Agent("main"))

    assert result.is_error
    assert result.value is None
    assert result.content == (TextBlock("Error: " + result.error.message),)


def test_accept_with_both_content_and_value_fails_the_call(rt: Any) -> None:
    rt.events.on("tools/post-execute", post_returning(Accept(content=[text("c")], value="v")))
    rt.tools.register(echo_tool())

    result = run_one(rt)

    assert result.is_error
    assert result.value is None
    assert result.content == (TextBlock("Error: " + result.error.message),)


def test_block_makes_a_failure_from_its_feedback_and_drops_the_bodys_contexts(rt: Any) -> None:
    from_body = context("from the body")
    from_post = context("from post-execute")

    def body(args: Any, ctx: Any) -> Any:
        ctx.defer_context(from_body)
        return args["message"]

    rt.events.on(
        "tools/post-execute",
        post_returning(Block(feedback=[text("no")], additional_contexts=[from_post])),
    )
    rt.tools.register(echo_tool(execute=body))

    batch = run(rt)
    result = batch.results[0].result

    assert result.is_error
    assert result.value is None
    assert result.content == (text("no"),)
    assert result.error.message == "no"
    assert result.additional_contexts == (from_post,)
    assert batch.additional_contexts == (from_post,)


def test_block_drops_only_the_contexts_the_body_deferred(rt: Any) -> None:
    from_body, from_wrapper, from_post = context("body"), context("wrapper"), context("post")

    def body(args: Any, ctx: Any) -> Any:
        ctx.defer_context(from_body)
        return args["message"]

    def wrapper(execution: Any, next_: Any) -> Any:
        result = next_()
        return dataclasses.replace(result, additional_contexts=result.additional_contexts + (from_wrapper,))

    rt.events.on("tools/execute", wrapper)
    rt.events.on(
        "tools/post-execute",
        post_returning(Block(feedback=[text("no")], additional_contexts=[from_post])),
    )
    rt.tools.register(echo_tool(execute=body))

    result = run_one(rt)

    assert result.is_error
    assert result.additional_contexts == (from_wrapper, from_post)


def test_block_with_empty_feedback_has_the_pinned_message(rt: Any) -> None:
    rt.events.on("tools/post-execute", post_returning(Block(feedback=[])))
    rt.tools.register(echo_tool())

    result = run_one(rt)

    assert result.is_error
    assert result.error.message == "tool result blocked by post-execute policy"
    assert result.content == ()


def test_block_turns_a_failure_into_a_failure_with_the_feedback(rt: Any) -> None:
    rt.events.on("tools/post-execute", post_returning(Block(feedback=[text("try again")])))
    rt.tools.register(echo_tool(execute=raising_body))

    result = run_one(rt)

    assert result.is_error
    assert result.error.message == "try again"
    assert result.content == (text("try again"),)


def test_a_throwing_post_execute_listener_fails_the_call(rt: Any) -> None:
    def post(execution: Any, result: Any, next_: Any) -> Any:
        raise RuntimeError("post-execute broke")

    rt.events.on("tools/post-execute", post)
    rt.tools.register(echo_tool())

    assert_failure(run_one(rt), "tools/post-execute: post-execute broke", "POLICY_FAILED")


@pytest.mark.parametrize(
    "wrong",
    [pytest.param(None, id="None"), pytest.param("accept", id="str"), pytest.param(Deny("x"), id="a-pre-decision")],
)
def test_a_post_execute_listener_returning_a_wrong_type_fails_the_call(rt: Any, wrong: Any) -> None:
    rt.events.on("tools/post-execute", post_returning(wrong))
    rt.tools.register(echo_tool())
    result = run_one(rt)
    assert result.is_error and result.value is None


def test_an_outer_post_execute_listener_sees_what_the_inner_one_decided(rt: Any) -> None:
    seen: list[Any] = []

    def outer(execution: Any, result: Any, next_: Any) -> Any:
        decision = next_()
        seen.append(decision)
        return decision

    rt.events.on("tools/post-execute", outer)
    rt.events.on("tools/post-execute", post_returning(Accept(content=[text("inner")])))
    rt.tools.register(echo_tool())

    assert run_one(rt).content == (text("inner"),)
    assert seen == [Accept(content=[text("inner")])]


# --------------------------------------------------------------------------
# Contexts and conclude_turn
# --------------------------------------------------------------------------


def test_contexts_come_from_the_body_then_the_wrapper_then_post_execute(rt: Any) -> None:
    first, second, third = context("body"), context("wrapper"), context("post")

    def body(args: Any, ctx: Any) -> Any:
        ctx.defer_context(first)
        return args["message"]

    def wrapper(execution: Any, next_: Any) -> Any:
        result = next_()
        return dataclasses.replace(result, additional_contexts=result.additional_contexts + (second,))

    rt.events.on("tools/execute", wrapper)
    rt.events.on("tools/post-execute", post_returning(Accept(additional_contexts=[third])))
    rt.tools.register(echo_tool(execute=body))

    batch = run(rt)
    result = batch.results[0].result

    assert not result.is_error and result.value == "hi"
    assert result.additional_contexts == (first, second, third)
    assert batch.additional_contexts == (first, second, third)


def test_deferred_contexts_keep_their_call_order(rt: Any) -> None:
    contexts = [context(str(i)) for i in range(3)]

    def body(args: Any, ctx: Any) -> Any:
        for item in contexts:
            ctx.defer_context(item)
        return args["message"]

    rt.tools.register(echo_tool(execute=body))
    assert run_one(rt).additional_contexts == tuple(contexts)


def test_batch_contexts_follow_model_order(rt: Any) -> None:
    def body(args: Any, ctx: Any) -> Any:
        ctx.defer_context(context(args["message"]))
        return args["message"]

    rt.tools.register(echo_tool(execute=body))
    batch = run(
        rt,
        call(arguments='{"message": "a"}', id="a"),
        call(arguments='{"message": "b"}', id="b"),
    )
    assert batch.additional_contexts == (context("a"), context("b"))


def test_conclude_turn_marks_the_success_and_concludes_the_batch(rt: Any) -> None:
    def body(args: Any, ctx: Any) -> Any:
        ctx.conclude_turn()
        return args["message"]

    rt.tools.register(echo_tool(execute=body))
    batch = run(rt)
    result = batch.results[0].result
    assert not result.is_error
    assert result.concludes_turn is True
    assert batch.concluded is True


def test_without_conclude_turn_the_batch_is_not_concluded(rt: Any) -> None:
    rt.tools.register(echo_tool())
    batch = run(rt)
    assert batch.results[0].result.concludes_turn is False
    assert batch.concluded is False


def test_conclude_turn_does_not_conclude_a_failure(rt: Any) -> None:
    def body(args: Any, ctx: Any) -> Any:
        ctx.conclude_turn()
        raise RuntimeError("failed after concluding")

    rt.tools.register(echo_tool(execute=body))
    batch = run(rt)
    assert batch.results[0].result.is_error
    assert batch.results[0].result.concludes_turn is False
    assert batch.concluded is False
