"""The stages up to dispatch (SPEC section 5): the first use, argument
materialization, calls that run no phase, the ``tools/pre-execute``
waterfall, guards and the recheck of cancellation."""

from __future__ import annotations

from typing import Any

import pytest

from dsh_actors import (
    AbortController,
    Accept,
    Agent,
    Allow,
    Cancel,
    Deny,
    ErrorCode,
    TextBlock,
    ToolDefinition,
    ToolErrorInfo,
    text,
    thaw,
)

from .helpers import Journal, Trip, assert_failure, call, code_of, echo_tool, run, run_one


def test_the_first_use_example_of_spec_section_1_works_as_written() -> None:
    from dsh_actors import Agent, LogStep, Session, ToolBatchInput, ToolCall, ToolOutput, ToolRuntime, define_tool, text

    echo = define_tool(
        name="echo",
        description="Repeat a message.",
        parameters={"message": {"type": "string", "required": True}},
        output=ToolOutput(schema={"type": "string"}, render=lambda args, value: [text(value)]),
        execute=lambda args, ctx: args["message"],
        is_concurrency_safe=lambda args: True,
    )

    with ToolRuntime() as rt:
        rt.tools.register(echo)
        agent = Agent("main", session=Session())
        batch = rt.tools.execute(
            ToolBatchInput(
                calls=[ToolCall(id="c1", name="echo", arguments='{"message": "hi"}')],
                agent=agent,
                log=LogStep(turn=1, step=1),
            )
        )
        outcome = batch.results[0].result
        assert batch.results[0].call_id == "c1"
        assert not outcome.is_error and outcome.value == "hi"
        assert outcome.content == (text("hi"),)


def test_an_unknown_tool_fails_with_unknown_tool_naming_it(rt: Any) -> None:
    trip = Trip(rt)
    result = run_one(rt, call("nope"), agent=Agent("main"))
    assert_failure(result, 'unknown tool "nope"', ErrorCode.UNKNOWN_TOOL)
    assert len(trip.results) == 1


# --------------------------------------------------------------------------
# Argument materialization
# --------------------------------------------------------------------------


def test_every_phase_sees_the_very_same_frozen_arguments_object(rt: Any) -> None:
    seen: dict[str, Any] = {}

    def body(args: Any, ctx: Any) -> Any:
        seen["body"] = args
        seen["ctx"] = ctx.arguments
        return args["message"]

    def pre(execution: Any, next_: Any) -> Any:
        seen["pre"] = execution.arguments
        return next_()

    def wrapper(execution: Any, next_: Any) -> Any:
        seen["execute"] = execution.arguments
        return next_()

    def post(execution: Any, result: Any, next_: Any) -> Any:
        seen["post"] = execution.arguments
        return next_()

    def observe(execution: Any, result: Any) -> None:
        seen["result"] = execution.arguments

    rt.tools.register(echo_tool(execute=body))
    rt.events.on("tools/pre-execute", pre)
    rt.events.on("tools/execute", wrapper)
    rt.events.on("tools/post-execute", post)
    rt.events.on("tools/result", observe)

    raw = '{"message": "hi", "tags": ["a", "b"], "options": {"depth": 2}}'
    result = run_one(rt, call(arguments=raw), agent=Agent("main"))

    assert not result.is_error and result.value == "hi"
    assert set(seen) == {"pre", "execute", "body", "ctx", "post", "result"}
    arguments = seen["pre"]
    for phase, value in seen.items():
        assert value is arguments, f"{phase} saw another arguments object"
    assert thaw(arguments) == {"message": "hi", "tags": ["a", "b"], "options": {"depth": 2}}


def test_the_materialized_arguments_are_read_only_all_the_way_down(rt: Any) -> None:
    seen: dict[str, Any] = {}

    def body(args: Any, ctx: Any) -> Any:
        seen["args"] = args
        return args["message"]

    rt.tools.register(echo_tool(execute=body))
    run_one(rt, call(arguments='{"message": "hi", "tags": ["a"], "options": {"depth": 2}}'))
    args = seen["args"]
    with pytest.raises(TypeError):
        args["message"] = "changed"
    with pytest.raises(TypeError):
        del args["message"]
    with pytest.raises(TypeError):
        args.update(message="changed")
    with pytest.raises(TypeError):
        args["tags"][0] = "z"
    with pytest.raises(TypeError):
        args["options"]["depth"] = 3
    assert thaw(args) == {"message": "hi", "tags": ["a"], "options": {"depth": 2}}


def test_dict_arguments_are_copied_so_the_callers_dict_does_not_leak_in(rt: Any) -> None:
    seen: dict[str, Any] = {}

    def body(args: Any, ctx: Any) -> Any:
        seen["args"] = args
        return args["message"]

    rt.tools.register(echo_tool(execute=body))
    raw = {"message": "hi", "tags": ["a"]}
    run_one(rt, call(arguments=raw))
    assert seen["args"] is not raw
    assert thaw(seen["args"]) == raw
    raw["tags"].append("b")
    assert seen["args"]["tags"] == ("a",)


# --------------------------------------------------------------------------
# Calls that run no phase
# --------------------------------------------------------------------------


def test_a_call_of_an_already_aborted_batch_runs_no_phase_but_publishes_one_result(rt: Any) -> None:
    trip = Trip(rt)
    rt.tools.register(echo_tool(execute=trip.body))
    controller = AbortController()
    controller.abort()

    result = run_one(rt, agent=Agent("main"), signal=controller.signal)

    assert_failure(result, "tool call aborted before dispatch", ErrorCode.ABORTED_BEFORE_DISPATCH)
    assert trip.phases == []
    assert trip.journal.count(("result", "c1")) == 1
    assert trip.results[0][1] == result


def nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = {"d": value}
    return value


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(float("nan"), id="nan"),
        pytest.param(object(), id="object"),
        pytest.param({1: "int key"}, id="int-key"),
        pytest.param(nested(300), id="deeper-than-MAX_JSON_DEPTH"),
        pytest.param(2**64, id="int-out-of-range"),
    ],
)
def test_non_json_arguments_run_no_phase_and_fail_with_invalid_args(rt: Any, bad: Any) -> None:
    trip = Trip(rt)
    rt.tools.register(echo_tool(execute=trip.body))

    result = run_one(rt, call(arguments={"message": "hi", "extra": bad}), agent=Agent("main"))

    assert result.is_error and result.value is None
    assert code_of(result) == ErrorCode.INVALID_ARGS
    assert result.error.message.startswith("invalid arguments: ")
    assert result.content == (TextBlock("Error: " + result.error.message),)
    assert trip.phases == []
    assert trip.journal.count(("result", "c1")) == 1


def test_the_same_object_twice_in_sibling_positions_is_fine(rt: Any) -> None:
    rt.tools.register(echo_tool())
    shared = ["x"]
    result = run_one(rt, call(arguments={"message": "hi", "a": shared, "b": shared}))
    assert not result.is_error and result.value == "hi"


def test_argument_text_that_is_not_json_goes_through_the_phases_and_fails_validation(rt: Any) -> None:
    trip = Trip(rt)
    rt.tools.register(echo_tool(execute=trip.body))

    result = run_one(rt, call(arguments="{not json"), agent=Agent("main"))

    assert code_of(result) == ErrorCode.INVALID_ARGS
    assert "body" not in trip.journal
    assert "pre" in trip.journal and "post" in trip.journal


def test_argument_text_that_is_not_json_tells_the_model_what_is_wrong_and_where(rt: Any) -> None:
    rt.tools.register(echo_tool())
    not_json = "invalid arguments: arguments are not valid JSON: "
    not_an_object = "invalid arguments: the arguments must be a JSON object of the tool's parameters, got "
    cases = {
        '{"message": "hi"': not_json + "unexpected end of data at line 1 column 17",
        '{"message": "hi",}': not_json + "trailing comma is not allowed at line 1 column 17",
        '{\n  "message": hi\n}': not_json + "unexpected character, expected a JSON value at line 2 column 14",
        "{'message': 'hi'}": not_json + "unexpected character, expected a string key at line 1 column 2",
        # JSON, but not an object: an array, an object encoded twice, a string, a number.
        '["hi"]': not_an_object + "an array",
        '"{\\"message\\": \\"hi\\"}"': not_an_object
        + "a JSON string that holds one (encoded twice): send the object itself",
        '"hi"': not_an_object + "a string",
        "3": not_an_object + "an integer",
        "null": not_an_object + "null",
    }
    batch = run(rt, *(call(arguments=text, id=f"c{i}") for i, text in enumerate(cases)))
    for item, message in zip(batch.results, cases.values(), strict=True):
        assert_failure(item.result, message, ErrorCode.INVALID_ARGS)


def test_a_full_mode_definition_tells_the_model_what_is_wrong_with_its_json(rt: Any) -> None:
    tool = echo_tool()
    full = ToolDefinition(
        name="full_echo",
        description=tool.description,
        parameters={"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]},
        output=tool.output,
        execute=lambda args, ctx: args["message"],
        schema_mode="full",
    )
    rt.tools.register(full)
    result = run_one(rt, call("full_echo", '{"message": "hi"'))
    assert_failure(
        result,
        "invalid arguments: arguments are not valid JSON: unexpected end of data at line 1 column 17",
        ErrorCode.INVALID_ARGS,
    )


def test_a_typed_tool_tells_the_model_what_is_wrong_with_its_json_as_any_tool_does(rt: Any) -> None:
    from dsh_actors import tool

    @tool
    def typed_echo(message: str) -> str:
        """Echoes."""
        return message

    rt.tools.register(typed_echo)
    batch = run(rt, call("typed_echo", '{"message": "hi"', id="c0"), call("typed_echo", '["hi"]', id="c1"))
    assert_failure(
        batch.results[0].result,
        "invalid arguments: arguments are not valid JSON: unexpected end of data at line 1 column 17",
        ErrorCode.INVALID_ARGS,
    )
    assert_failure(
        batch.results[1].result,
        "invalid arguments: the arguments must be a JSON object of the tool's parameters, got an array",
        ErrorCode.INVALID_ARGS,
    )


# --------------------------------------------------------------------------
# The tools/pre-execute waterfall
# --------------------------------------------------------------------------


def test_pre_execute_allows_by_default(rt: Any) -> None:
    trip = Trip(rt)
    rt.tools.register(echo_tool(execute=trip.body))
    result = run_one(rt, agent=Agent("main"))
    assert not result.is_error and result.value == "hi"
    assert trip.phases == ["pre", "execute", "body", "post"]


def test_a_listener_calling_next_gets_allow(rt: Any) -> None:
    decisions: list[Any] = []

    def pre(execution: Any, next_: Any) -> Any:
        decision = next_()
        decisions.append(decision)
        return decision

    rt.tools.register(echo_tool())
    rt.events.on("tools/pre-execute", pre)
    assert not run_one(rt).is_error
    assert decisions == [Allow()]


def test_deny_fails_the_call_with_its_reason_and_info_and_still_runs_post_execute(rt: Any) -> None:
    info = ToolErrorInfo(name="PolicyDenied", code="POLICY_DENIED", reason="raw detail for the user")
    rt.events.on("tools/pre-execute", lambda execution, next_: Deny("not in this sandbox", info))
    trip = Trip(rt)
    rt.tools.register(echo_tool(execute=trip.body))

    result = run_one(rt, agent=Agent("main"))

    assert_failure(result, "not in this sandbox")
    assert result.error.info == info
    assert result.content == (TextBlock("Error: not in this sandbox"),)
    assert "body" not in trip.journal
    assert "post" in trip.journal
    assert trip.post_results[0].is_error
    assert trip.post_results[0].error.message == "not in this sandbox"


def test_deny_without_info_has_no_structured_identity(rt: Any) -> None:
    rt.events.on("tools/pre-execute", lambda execution, next_: Deny("no"))
    rt.tools.register(echo_tool())
    result = run_one(rt)
    assert_failure(result, "no")
    assert result.error.info is None


def test_cancel_gives_aborted_before_dispatch_and_still_runs_post_execute(rt: Any) -> None:
    rt.events.on("tools/pre-execute", lambda execution, next_: Cancel())
    trip = Trip(rt)
    rt.tools.register(echo_tool(execute=trip.body))

    result = run_one(rt, agent=Agent("main"))

    assert_failure(result, "tool call aborted before dispatch", ErrorCode.ABORTED_BEFORE_DISPATCH)
    assert "body" not in trip.journal
    assert "post" in trip.journal


def test_a_throwing_pre_execute_listener_fails_the_call_and_skips_post_execute(rt: Any) -> None:
    def pre(execution: Any, next_: Any) -> Any:
        raise RuntimeError("policy exploded")

    rt.events.on("tools/pre-execute", pre)
    trip = Trip(rt)
    rt.tools.register(echo_tool(execute=trip.body))

    result = run_one(rt, agent=Agent("main"))

    assert_failure(result, "tools/pre-execute: policy exploded", "POLICY_FAILED")
    assert "body" not in trip.journal
    assert "execute" not in trip.journal
    assert "post" not in trip.journal
    assert trip.journal.count(("result", "c1")) == 1


@pytest.mark.parametrize(
    "wrong",
    [
        pytest.param("allow", id="str"),
        pytest.param(None, id="None"),
        pytest.param(True, id="True"),
        pytest.param(Allow, id="the-Allow-class"),
    ],
)
def test_a_pre_execute_listener_returning_a_wrong_type_fails_the_call_and_skips_post_execute(
    rt: Any, wrong: Any
) -> None:
    rt.events.on("tools/pre-execute", lambda execution, next_: wrong)
    trip = Trip(rt)
    rt.tools.register(echo_tool(execute=trip.body))

    result = run_one(rt, agent=Agent("main"))

    assert result.is_error and result.value is None
    assert result.content == (TextBlock("Error: " + result.error.message),)
    assert "body" not in trip.journal
    assert "post" not in trip.journal


def test_a_prepended_listener_is_outermost(rt: Any) -> None:
    journal = Journal()

    def listener(label: str) -> Any:
        def pre(execution: Any, next_: Any) -> Any:
            journal.add(f"{label} in")
            decision = next_()
            journal.add(f"{label} out")
            return decision

        return pre

    rt.events.on("tools/pre-execute", listener("first"))
    rt.events.on("tools/pre-execute", listener("prepended"), prepend=True)
    rt.events.on("tools/pre-execute", listener("last"))
    rt.tools.register(echo_tool())

    assert not run_one(rt).is_error
    assert journal.entries == [
        "prepended in",
        "first in",
        "last in",
        "last out",
        "first out",
        "prepended out",
    ]


def test_a_listener_that_does_not_call_next_vetoes_the_rest_of_the_chain(rt: Any) -> None:
    journal = Journal()

    def outer(execution: Any, next_: Any) -> Any:
        journal.add("outer")
        return Allow()

    def inner(execution: Any, next_: Any) -> Any:
        journal.add("inner")
        return Deny("the inner listener would have denied it")

    rt.events.on("tools/pre-execute", outer)
    rt.events.on("tools/pre-execute", inner)
    rt.tools.register(echo_tool())

    result = run_one(rt)

    assert not result.is_error and result.value == "hi"
    assert journal.entries == ["outer"]


def test_scoped_listeners_see_only_their_agents_and_descendants_calls(rt: Any) -> None:
    lead = Agent("lead")
    helper = Agent("helper", parent=lead)
    other = Agent("other")
    seen = Journal()

    def pre(execution: Any, next_: Any) -> Any:
        seen.add(("pre", execution.agent))
        return next_()

    def wrapper(execution: Any, next_: Any) -> Any:
        seen.add(("execute", execution.agent))
        return next_()

    def post(execution: Any, result: Any, next_: Any) -> Any:
        seen.add(("post", execution.agent))
        return next_()

    def observe(execution: Any, result: Any) -> None:
        seen.add(("result", execution.agent))

    rt.tools.register(echo_tool())
    rt.events.on("tools/pre-execute", pre, scope=lead)
    rt.events.on("tools/execute", wrapper, scope=lead)
    rt.events.on("tools/post-execute", post, scope=lead)
    rt.events.on("tools/result", observe, scope=lead)

    for agent in (lead, helper, other):
        assert not run_one(rt, agent=agent).is_error
    assert not run_one(rt, agent=None).is_error

    entries = seen.entries
    for phase in ("pre", "execute", "post", "result"):
        agents = [agent for name, agent in entries if name == phase]
        assert len(agents) == 2, f"{phase}: {agents}"
        assert agents[0] is lead and agents[1] is helper, f"{phase}: {agents}"


# --------------------------------------------------------------------------
# Guards
# --------------------------------------------------------------------------


def test_a_guard_sees_the_execution_after_an_allow_and_its_reason_denies(rt: Any) -> None:
    seen: list[Any] = []

    def guard(execution: Any) -> str | None:
        seen.append((execution.call_id, execution.name, execution.arguments))
        return "the sandbox forbids it"

    rt.tools.guard(guard)
    trip = Trip(rt)
    rt.tools.register(echo_tool(execute=trip.body))

    result = run_one(rt, agent=Agent("main"))

    assert_failure(result, "the sandbox forbids it")
    assert seen == [("c1", "echo", {"message": "hi"})]
    assert "body" not in trip.journal
    assert "execute" not in trip.journal


def test_a_guard_returning_none_leaves_the_call_allowed(rt: Any) -> None:
    rt.tools.guard(lambda execution: None)
    rt.tools.register(echo_tool())
    result = run_one(rt)
    assert not result.is_error and result.value == "hi"


@pytest.mark.parametrize(
    "decision",
    [pytest.param(Deny("denied first"), id="deny"), pytest.param(Cancel(), id="cancel")],
)
def test_guards_do_not_run_when_the_decision_is_not_allow(rt: Any, decision: Any) -> None:
    journal = Journal()

    def guard(execution: Any) -> str | None:
        journal.add("guard")
        return None

    rt.tools.guard(guard)
    rt.events.on("tools/pre-execute", lambda execution, next_: decision)
    rt.tools.register(echo_tool())

    assert run_one(rt, agent=Agent("main")).is_error
    assert journal.entries == []


def test_guards_run_global_first_then_the_scope_chain_farthest_first_each_in_registration_order(
    rt: Any,
) -> None:
    root = Agent("root")
    middle = Agent("middle", parent=root)
    leaf = Agent("leaf", parent=middle)
    stranger = Agent("stranger")
    journal = Journal()

    def guard(label: str) -> Any:
        def check(execution: Any) -> str | None:
            journal.add(label)
            return None

        return check

    rt.tools.scope(leaf).guard(guard("leaf 1"))
    rt.tools.scope(middle).guard(guard("middle 1"))
    rt.tools.guard(guard("global 1"))
    rt.tools.scope(stranger).guard(guard("stranger"))
    rt.tools.scope(root).guard(guard("root 1"))
    rt.tools.scope(leaf).guard(guard("leaf 2"))
    rt.tools.guard(guard("global 2"))
    rt.tools.scope(root).guard(guard("root 2"))
    rt.tools.register(echo_tool())

    assert not run_one(rt, agent=leaf).is_error
    assert journal.entries == ["global 1", "global 2", "root 1", "root 2", "middle 1", "leaf 1", "leaf 2"]


def test_the_first_guard_reason_is_the_denial(rt: Any) -> None:
    agent = Agent("main")
    rt.tools.guard(lambda execution: None)
    rt.tools.guard(lambda execution: "the global guard says no")
    rt.tools.scope(agent).guard(lambda execution: "the scoped guard says no")
    rt.tools.register(echo_tool())

    assert_failure(run_one(rt, agent=agent), "the global guard says no")


def test_disposing_a_guard_lifts_its_denial(rt: Any) -> None:
    dispose = rt.tools.guard(lambda execution: "no")
    rt.tools.register(echo_tool())
    assert run_one(rt).is_error
    dispose()
    dispose()
    assert not run_one(rt).is_error


@pytest.mark.parametrize(
    "decision",
    [
        pytest.param(Accept(value="hi"), id="accept-value"),
        pytest.param(Accept(content=[text("all fine")]), id="accept-content"),
        pytest.param(Accept(), id="accept"),
    ],
)
def test_a_post_execute_listener_cannot_turn_a_guard_denial_into_success(rt: Any, decision: Any) -> None:
    trip = Trip(rt)
    rt.tools.guard(lambda execution: "guarded")
    rt.events.on("tools/post-execute", lambda execution, result, next_: decision)
    rt.tools.register(echo_tool(execute=trip.body))

    result = run_one(rt, agent=Agent("main"))

    assert result.is_error
    assert result.value is None
    assert "body" not in trip.journal


def test_a_pre_execute_listener_that_aborts_then_allows_is_rechecked_and_never_runs_the_body(
    rt: Any,
) -> None:
    controller = AbortController()

    def pre(execution: Any, next_: Any) -> Any:
        controller.abort()
        return next_()

    rt.events.on("tools/pre-execute", pre)
    trip = Trip(rt)
    rt.tools.register(echo_tool(execute=trip.body))

    result = run_one(rt, agent=Agent("main"), signal=controller.signal)

    assert_failure(result, "tool call aborted before dispatch", ErrorCode.ABORTED_BEFORE_DISPATCH)
    assert "body" not in trip.journal
    assert "execute" not in trip.journal
    assert trip.journal.count(("result", "c1")) == 1


def test_a_batch_returns_one_result_per_call_in_order(rt: Any) -> None:
    rt.tools.register(echo_tool())
    batch = run(
        rt,
        call(arguments='{"message": "a"}', id="a"),
        call(arguments='{"message": "b"}', id="b"),
    )
    assert [item.call_id for item in batch.results] == ["a", "b"]
    assert [item.result.value for item in batch.results] == ["a", "b"]


def test_the_execution_names_the_definition_its_call_runs_even_after_a_replacement(rt: Any) -> None:
    # execution.definition: the registry's definition the call runs, as the
    # pipeline looked it up (what policies.timeout, retry and otel read a
    # tool's settings from instead of looking the name up again); a tool
    # replaced before the body starts is looked up again, and so is the
    # definition the hooks see.
    first = echo_tool(timeout_ms=1_000)
    second = echo_tool(timeout_ms=2_000, execute=lambda args, ctx: "second")
    off = [rt.tools.register(first)]
    seen: list[tuple[str, Any]] = []

    def pre_execute(execution: Any, next_: Any) -> Any:
        seen.append((f"{execution.call_id} pre-execute", execution.definition))
        if execution.definition is first:  # replaced as the call is prepared: it is prepared again
            off.pop()()
            off.append(rt.tools.register(second))
        return next_()

    def wrapper(execution: Any, next_: Any) -> Any:
        seen.append((f"{execution.call_id} execute", execution.definition))
        return next_()

    rt.events.on("tools/pre-execute", pre_execute)
    rt.events.on("tools/execute", wrapper)
    rt.events.on(
        "tools/result", lambda execution, result: seen.append((f"{execution.call_id} result", execution.definition))
    )
    result, unknown = (one.result for one in run(rt, call(id="a"), call("made_up", id="b")).results)
    assert result.content == (text("second"),) and code_of(unknown) == "UNKNOWN_TOOL"
    shown = sorted((phase, d.timeout_ms if d is not None else None) for phase, d in seen)
    assert shown == [
        ("a execute", 2_000),
        ("a pre-execute", 1_000),
        ("a pre-execute", 2_000),
        ("a result", 2_000),
        ("b execute", None),  # (an unknown tool's call fails in its body's place)
        ("b pre-execute", None),
        ("b result", None),
    ]
    assert all(d is second for phase, d in seen if phase in ("a execute", "a result"))
