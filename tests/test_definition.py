"""Tool definitions: the author path (define_tool) and the registration check."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import math
from collections.abc import Callable
from typing import Any

import pytest

import dsh_actors.definition as definition_module
from dsh_actors.definition import (
    CheckedDefinition,
    ToolDefinition,
    ToolOutput,
    define_tool,
    is_async_callable,
    validate_definition,
)
from dsh_actors.errors import ErrorCode, JsonSchemaError, RegistrationError, ToolArgsError
from dsh_actors.json import FrozenDict, materialize, thaw
from dsh_actors.model import ToolExecutionSuccess, text
from dsh_actors.presentation import (
    GenericCallView,
    GenericResultView,
    ToolResultProjection,
)

CTX: Any = object()  # the body's context: define_tool's wrappers pass it through untouched
STRING_OUTPUT = ToolOutput(schema={"type": "string"}, render=lambda args, value: [text(value)])
MESSAGE = {"message": {"type": "string", "required": True}}


def echo_tool(**overrides: Any) -> ToolDefinition:
    options: dict[str, Any] = {
        "name": "echo",
        "description": "Repeat a message.",
        "parameters": MESSAGE,
        "output": STRING_OUTPUT,
        "execute": lambda args, ctx: args["message"],
    }
    options.update(overrides)
    return define_tool(**options)


def raw_tool(**overrides: Any) -> ToolDefinition:
    options: dict[str, Any] = {
        "name": "raw",
        "description": "A raw, MCP-style tool.",
        "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}},
        "output": ToolOutput(schema={"type": "integer"}, render=lambda args, value: [text(str(value))]),
        "execute": lambda args, ctx: args["n"],
    }
    options.update(overrides)
    return ToolDefinition(**options)


def registration_problem(defn: object) -> str:
    with pytest.raises(RegistrationError) as info:
        validate_definition(defn)
    return str(info.value)


# --------------------------------------------------------------------------
# define_tool
# --------------------------------------------------------------------------


def test_the_first_use_example_defines_a_plain_tool_definition() -> None:
    echo = define_tool(
        name="echo",
        description="Repeat a message.",
        parameters={"message": {"type": "string", "required": True}},
        output=ToolOutput(schema={"type": "string"}, render=lambda args, value: [text(value)]),
        execute=lambda args, ctx: args["message"],
        is_concurrency_safe=lambda args: True,
    )
    assert type(echo) is ToolDefinition
    assert thaw(echo.parameters) == {
        "type": "object",
        "properties": {"message": {"type": "string"}},
        "required": ["message"],
    }
    assert echo.output.schema == {"type": "string"}
    args = materialize({"message": "hi"})
    assert echo.execute(args, CTX) == "hi"
    assert echo.output.render(args, "hi") == [text("hi")]
    assert echo.is_concurrency_safe is not None and echo.is_concurrency_safe(args) is True


def test_the_compiled_schemas_on_a_defined_tool_are_frozen_and_detached() -> None:
    parameters = {"message": {"type": "string", "required": True}}
    echo = echo_tool(parameters=parameters)
    parameters["extra"] = {"type": "integer", "required": True}
    assert list(echo.parameters["properties"]) == ["message"]
    assert type(echo.parameters) is FrozenDict and type(echo.output.schema) is FrozenDict
    with pytest.raises(TypeError):
        echo.parameters["type"] = "string"  # type: ignore[index]


def test_execute_validates_the_arguments_before_the_body_runs() -> None:
    calls: list[Any] = []
    tool = echo_tool(
        parameters={"message": {"type": "string", "required": True}, "times": {"type": "integer"}},
        execute=lambda args, ctx: calls.append(args),
    )
    with pytest.raises(ToolArgsError) as info:
        tool.execute(materialize({"times": "2", "extra": 1}), CTX)
    assert (
        str(info.value)
        == 'invalid arguments: missing required property "value.message"; "value.times" must be an integer'
    )
    assert info.value.code is ErrorCode.INVALID_ARGS
    with pytest.raises(
        ToolArgsError,
        match=r"^invalid arguments: the arguments must be a JSON object of the tool's parameters, got an array$",
    ):
        tool.execute(materialize(["not", "an object"]), CTX)
    with pytest.raises(
        ToolArgsError,
        match=r"^invalid arguments: arguments are not valid JSON: invalid literal, expected 'null' "
        r"at line 1 column 1$",
    ):
        tool.execute("not json", CTX)
    assert calls == []


def test_execute_gives_valid_arguments_and_the_context_to_the_body_unchanged() -> None:
    seen: list[tuple[Any, Any]] = []
    tool = echo_tool(execute=lambda args, ctx: seen.append((args, ctx)) or "ok")
    args = materialize({"message": "hi", "undeclared": True})  # the parameter root is open
    assert tool.execute(args, CTX) == "ok"
    assert seen[0][0] is args and seen[0][1] is CTX


def test_a_sync_body_gets_a_sync_wrapper_and_stays_reachable() -> None:
    def body(args: Any, ctx: Any) -> str:
        return str(args["message"])

    tool = echo_tool(execute=body)
    assert not inspect.iscoroutinefunction(tool.execute)
    assert tool.execute.__wrapped__ is body
    assert validate_definition(tool).is_async is False


def test_an_async_body_gets_an_async_wrapper_that_validates_first() -> None:
    calls: list[Any] = []

    async def body(args: Any, ctx: Any) -> str:
        calls.append(args)
        return str(args["message"]).upper()

    tool = echo_tool(execute=body)
    assert inspect.iscoroutinefunction(tool.execute)
    assert validate_definition(tool).is_async is True
    assert asyncio.run(tool.execute(materialize({"message": "hi"}), CTX)) == "HI"
    with pytest.raises(ToolArgsError, match="value.message"):
        asyncio.run(tool.execute(materialize({}), CTX))
    assert len(calls) == 1


def test_is_async_callable_sees_through_partials_and_async_call_methods() -> None:
    import functools

    async def body(args: Any, ctx: Any) -> None:
        return None

    class AsyncCallable:
        async def __call__(self, args: Any, ctx: Any) -> None:
            return None

    assert is_async_callable(functools.partial(body))
    assert is_async_callable(AsyncCallable())
    assert not is_async_callable(lambda args, ctx: None)
    assert not is_async_callable(AsyncCallable)
    assert inspect.iscoroutinefunction(echo_tool(execute=AsyncCallable()).execute)


def test_the_classifier_answers_false_on_invalid_arguments_without_asking_the_tool() -> None:
    asked: list[Any] = []
    tool = echo_tool(is_concurrency_safe=lambda args: asked.append(args) or True)
    assert tool.is_concurrency_safe is not None
    assert tool.is_concurrency_safe(materialize({"message": 3})) is False
    assert asked == []
    assert tool.is_concurrency_safe(materialize({"message": "m"})) is True


def test_the_classifier_answers_false_when_it_raises_and_passes_other_answers_through() -> None:
    def explode(args: Any) -> bool:
        raise RuntimeError("boom")

    raising = echo_tool(is_concurrency_safe=explode)
    truthy = echo_tool(is_concurrency_safe=lambda args: "yes")
    valid = materialize({"message": "m"})
    assert raising.is_concurrency_safe is not None and raising.is_concurrency_safe(valid) is False
    # The registry requires exactly True; the wrapper does not coerce.
    assert truthy.is_concurrency_safe is not None and truthy.is_concurrency_safe(valid) == "yes"
    assert echo_tool().is_concurrency_safe is None


def test_presenters_answer_none_on_invalid_arguments_without_asking_the_tool() -> None:
    asked: list[Any] = []
    tool = echo_tool(
        present_call=lambda args: asked.append(args) or GenericCallView(title="echo"),
        present_result=lambda args, result: asked.append(args) or GenericResultView(title="done"),
    )
    assert tool.present_call is not None and tool.present_result is not None
    projection = ToolResultProjection(content=(text("x"),), is_error=False)
    assert tool.present_call(materialize({})) is None
    assert tool.present_result(materialize({"message": None}), projection) is None
    assert asked == []
    valid = materialize({"message": "m"})
    assert tool.present_call(valid) == GenericCallView(title="echo")
    assert tool.present_result(valid, projection) == GenericResultView(title="done")


def test_presenters_answer_none_when_they_raise_or_return_something_that_is_not_a_view() -> None:
    def explode(*args: Any) -> Any:
        raise ValueError("bad presenter")

    valid = materialize({"message": "m"})
    success = ToolExecutionSuccess(value="m", content=[text("m")])
    raising = echo_tool(present_call=explode, present_result=explode)
    assert raising.present_call is not None and raising.present_call(valid) is None
    assert raising.present_result is not None and raising.present_result(valid, success) is None
    wrong = echo_tool(
        present_call=lambda args: GenericResultView(),  # a result card where a call card is due
        present_result=lambda args, result: {"card": "generic"},
    )
    assert wrong.present_call is not None and wrong.present_call(valid) is None
    assert wrong.present_result is not None and wrong.present_result(valid, success) is None


def test_a_raising_presenter_is_logged_as_a_warning(library_logs: None) -> None:
    from loguru import logger

    def explode(args: Any) -> Any:
        raise ValueError("bad presenter")

    records: list[Any] = []
    sink = logger.add(lambda message: records.append(message.record), level="DEBUG")
    try:
        # (A name of its own: each tool's presenter is warned about once per kind of failure.)
        tool = echo_tool(name="echo_with_a_raising_presenter", present_call=explode)
        assert tool.present_call is not None and tool.present_call(materialize({"message": "m"})) is None
    finally:
        logger.remove(sink)
    assert [r["level"].name for r in records] == ["WARNING"]
    assert records[0]["message"].startswith(
        'tool "echo_with_a_raising_presenter": present_call raised ValueError: bad presenter; the generic card'
    )


def test_callbacks_the_runtime_calls_with_the_execution_stay_as_given() -> None:
    def project(execution: Any, result: Any) -> None:
        return None

    meta = {"idempotent": True}
    tool = echo_tool(project_content=project, finalize_content=project, meta=meta, timeout_ms=250)
    assert tool.project_content is project and tool.finalize_content is project
    assert tool.meta is meta and tool.timeout_ms == 250


@pytest.mark.parametrize("timeout_ms", [0, -1, math.nan, math.inf, -math.inf, True, "5"])
def test_define_tool_rejects_a_timeout_that_is_not_a_positive_finite_number(timeout_ms: Any) -> None:
    with pytest.raises(RegistrationError) as info:
        echo_tool(timeout_ms=timeout_ms)
    assert str(info.value) == (
        f'cannot register tool "echo": timeout_ms must be a positive finite number (got {timeout_ms!r})'
    )
    assert info.value.tool == "echo"


@pytest.mark.parametrize("timeout_ms", [1, 0.5, 30_000, None])
def test_define_tool_accepts_a_positive_finite_timeout(timeout_ms: Any) -> None:
    assert echo_tool(timeout_ms=timeout_ms).timeout_ms == timeout_ms


def test_a_tool_is_not_idempotent_unless_it_says_so() -> None:
    assert echo_tool().idempotent is False
    assert raw_tool().idempotent is False
    assert echo_tool(idempotent=True).idempotent is True
    assert validate_definition(raw_tool(idempotent=True)).definition.idempotent is True


def test_a_tool_requires_no_approval_unless_it_says_so() -> None:
    assert echo_tool().requires_approval is False
    assert raw_tool().requires_approval is False
    assert echo_tool(requires_approval=True).requires_approval is True
    assert validate_definition(raw_tool(requires_approval=True)).definition.requires_approval is True


@pytest.mark.parametrize("requires_approval", [None, 1, "yes"])
def test_requires_approval_must_be_a_bool_or_a_callable_on_either_path(requires_approval: Any) -> None:
    expected = (
        "requires_approval must be True, False or a callable requires_approval(args) -> bool "
        f"(got {requires_approval!r})"
    )
    with pytest.raises(RegistrationError) as info:
        echo_tool(requires_approval=requires_approval)
    assert str(info.value) == f'cannot register tool "echo": {expected}'
    with pytest.raises(RegistrationError) as info:
        validate_definition(raw_tool(requires_approval=requires_approval))
    assert str(info.value) == f'cannot register tool "raw": {expected}'


def test_the_requires_approval_predicate_answers_false_on_invalid_arguments_without_asking_the_tool() -> None:
    # (The body will not run on them: the call fails INVALID_ARGS, nobody is asked.)
    asked: list[Any] = []
    tool = echo_tool(requires_approval=lambda args: asked.append(args) or args["message"] == "rm")
    assert callable(tool.requires_approval)
    assert tool.requires_approval(materialize({"message": 3})) is False
    assert asked == []
    assert tool.requires_approval(materialize({"message": "rm"})) is True
    assert tool.requires_approval(materialize({"message": "ls"})) is False
    full = raw_tool(schema_mode="full", requires_approval=lambda args: asked.append(args) or True)
    assert callable(full.requires_approval)
    assert full.requires_approval(materialize({"n": "x"})) is False
    assert full.requires_approval(materialize({"n": 1})) is True
    assert asked == [{"message": "rm"}, {"message": "ls"}, {"n": 1}]


def test_what_the_requires_approval_predicate_raises_is_not_caught_by_the_definition() -> None:
    # (The pipeline fails the call with it, naming the tool: see tests/pipeline/test_requires_approval.py.)
    def explode(args: Any) -> bool:
        raise RuntimeError("boom")

    tool = echo_tool(requires_approval=explode)
    assert callable(tool.requires_approval)
    with pytest.raises(RuntimeError, match="boom"):
        tool.requires_approval(materialize({"message": "m"}))


@pytest.mark.parametrize("idempotent", [None, 1, "yes"])
def test_idempotent_must_be_a_bool_on_either_path(idempotent: Any) -> None:
    expected = f"idempotent must be True or False (got {idempotent!r})"
    with pytest.raises(RegistrationError) as info:
        echo_tool(idempotent=idempotent)
    assert str(info.value) == f'cannot register tool "echo": {expected}'
    with pytest.raises(RegistrationError) as info:
        validate_definition(raw_tool(idempotent=idempotent))
    assert str(info.value) == f'cannot register tool "raw": {expected}'


def test_schema_spec_errors_name_the_tool_and_list_both_specs_violations() -> None:
    with pytest.raises(JsonSchemaError) as info:
        echo_tool(
            parameters={"q": {"type": "strng"}, "r": {"type": "string", "required": False}},
            output=ToolOutput(schema={"type": "array", "items": {"type": "object"}}, render=lambda a, v: []),
        )
    violations = info.value.violations
    assert all(v.startswith('tool "echo": ') for v in violations)
    assert [v.split(": ")[1] for v in violations] == [
        "parameters.q.type",
        "parameters.r.required",
        "output.schema.items.additional_properties",
    ]
    assert info.value.code is ErrorCode.UNSUPPORTED_SCHEMA


def test_define_tool_reports_every_structural_problem_at_once_naming_the_tool() -> None:
    with pytest.raises(RegistrationError) as info:
        define_tool(
            name="bad",
            description=None,  # type: ignore[arg-type]
            parameters=MESSAGE,
            output={"type": "string"},  # type: ignore[arg-type]
            execute="run",  # type: ignore[arg-type]
            present_call=3,  # type: ignore[arg-type]
            timeout_ms=-1,
        )
    assert str(info.value) == (
        'cannot register tool "bad": description must be a str (got None); '
        "output must be a ToolOutput (got dict); execute must be callable (got 'run'); "
        "timeout_ms must be a positive finite number (got -1); "
        "present_call must be callable or None (got 3)"
    )


def test_define_tool_rejects_a_missing_name() -> None:
    with pytest.raises(RegistrationError, match=r"^name must be a non-empty str \(got ''\)$"):
        echo_tool(name="")


def test_the_parameter_validator_is_compiled_once_at_definition_not_per_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    compiled: list[Any] = []
    real = definition_module.compile_json_schema

    def counting(schema: object) -> Any:
        compiled.append(schema)
        return real(schema)

    monkeypatch.setattr(definition_module, "compile_json_schema", counting)
    tool = echo_tool(
        is_concurrency_safe=lambda args: True,
        present_call=lambda args: None,
        present_result=lambda args, result: None,
    )
    at_definition = len(compiled)
    assert at_definition >= 1
    valid, invalid = materialize({"message": "m"}), materialize({})
    projection = ToolResultProjection(content=(), is_error=False)
    assert tool.is_concurrency_safe is not None and tool.present_call is not None
    assert tool.present_result is not None
    for _ in range(50):
        tool.execute(valid, CTX)
        tool.is_concurrency_safe(valid)
        tool.is_concurrency_safe(invalid)
        tool.present_call(valid)
        tool.present_result(invalid, projection)
        with pytest.raises(ToolArgsError):
            tool.execute(invalid, CTX)
    checked = validate_definition(tool)
    assert len(compiled) == at_definition  # registration reuses define_tool's check
    assert checked.parameter_validator.schema is tool.parameters


def test_a_replaced_copy_of_a_defined_tool_is_checked_afresh() -> None:
    tool = echo_tool()
    copy = dataclasses.replace(tool, name="echo2")
    checked = validate_definition(copy)
    assert checked.definition is copy and checked.name == "echo2"
    with pytest.raises(ToolArgsError):  # the copied execute still validates
        copy.execute(materialize({}), CTX)


def test_definitions_compare_by_identity() -> None:
    a = raw_tool()
    b = dataclasses.replace(a)
    assert a == a and a != b
    assert len({a, b}) == 2


# --------------------------------------------------------------------------
# validate_definition
# --------------------------------------------------------------------------


def test_a_valid_raw_definition_yields_a_checked_record_with_frozen_schemas() -> None:
    parameters = {"type": "object", "properties": {"n": {"type": "integer"}}}
    defn = raw_tool(parameters=parameters, meta={"idempotent": True})
    checked = validate_definition(defn)
    assert isinstance(checked, CheckedDefinition)
    assert checked.definition is defn and checked.name == "raw" and checked.output is defn.output
    assert checked.is_async is False
    assert checked.output_validator.is_valid(3) and not checked.output_validator.is_valid("3")
    assert checked.parameter_validator.is_valid({"n": 1}) and not checked.parameter_validator.is_valid({"n": "1"})
    parameters["properties"]["m"] = {"type": "string"}  # type: ignore[index]
    assert checked.parameters == {"type": "object", "properties": {"n": {"type": "integer"}}}
    with pytest.raises(dataclasses.FrozenInstanceError):
        checked.is_async = True  # type: ignore[misc]


def test_the_tool_schema_is_a_fresh_model_facing_projection() -> None:
    checked = validate_definition(raw_tool(timeout_ms=5, is_concurrency_safe=lambda args: True, requires_approval=True))
    schema = checked.tool_schema()
    assert schema == {
        "name": "raw",
        "description": "A raw, MCP-style tool.",
        "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}},
    }
    assert type(schema["parameters"]) is dict and type(schema["parameters"]["properties"]) is dict
    schema["parameters"]["properties"].clear()
    assert checked.tool_schema()["parameters"]["properties"] == {"n": {"type": "integer"}}


def test_a_raw_definition_is_not_argument_validated() -> None:
    seen: list[Any] = []
    defn = raw_tool(execute=lambda args, ctx: seen.append(args))
    validate_definition(defn)
    defn.execute({"n": "not an integer"}, CTX)
    assert seen == [{"n": "not an integer"}]


def test_an_async_raw_definition_is_marked_async() -> None:
    async def body(args: Any, ctx: Any) -> int:
        return 1

    assert validate_definition(raw_tool(execute=body)).is_async is True


def test_something_that_is_not_a_definition_is_rejected_naming_how_to_make_one() -> None:
    def add(a: int, b: int) -> int:
        return a + b

    assert registration_problem({"name": "x"}) == (
        "expected a ToolDefinition, got dict: make one with @tool on a typed function, or with define_tool(...)"
    )
    assert registration_problem(add) == (
        "expected a ToolDefinition, got the function add: decorate it with @tool (from dsh_actors import tool), "
        "or make a definition with define_tool(...)"
    )
    # Was "got list: make one with @tool ...", though the list held definitions.
    assert registration_problem([raw_tool(), raw_tool()]) == (
        "expected a ToolDefinition, got a list: register several at once with rt.tools.register_all(definitions) "
        "(one change, a disposer for each), or one per call with rt.tools.register(definition)"
    )


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        ({"name": ""}, "name must be a non-empty str (got '')"),
        ({"description": 3}, "description must be a str (got 3)"),
        ({"output": None}, "output is required"),
        ({"output": {"schema": {}}}, "output must be a ToolOutput (got dict)"),
        ({"output": ToolOutput(schema={}, render="x")}, "output.render must be callable or None (got 'x')"),  # type: ignore[arg-type]
        (
            {"output": ToolOutput(schema={}, render=lambda a, v: [], presentation_meta="m")},  # type: ignore[arg-type]
            "output.presentation_meta must be callable or None (got 'm')",
        ),
        ({"execute": None}, "execute must be callable (got None)"),
        ({"timeout_ms": 0}, "timeout_ms must be a positive finite number (got 0)"),
        ({"timeout_ms": math.nan}, "timeout_ms must be a positive finite number (got nan)"),
        ({"timeout_ms": False}, "timeout_ms must be a positive finite number (got False)"),
        ({"is_concurrency_safe": True}, "is_concurrency_safe must be callable or None (got True)"),
        ({"project_content": "x"}, "project_content must be callable or None (got 'x')"),
        ({"finalize_content": 1}, "finalize_content must be callable or None (got 1)"),
        ({"present_call": []}, "present_call must be callable or None (got [])"),
        ({"present_result": {}}, "present_result must be callable or None (got {})"),
        ({"meta": ["idempotent"]}, "meta must be a mapping or None (got list)"),
    ],
)
def test_registration_rejects_each_malformed_field(overrides: dict[str, Any], problem: str) -> None:
    message = registration_problem(raw_tool(**overrides))
    tool = overrides.get("name", "raw")
    expected = problem if not tool else f'cannot register tool "{tool}": {problem}'
    assert message == expected


def test_registration_rejects_a_definition_built_without_an_output() -> None:
    defn = ToolDefinition(name="x", description="", parameters={"type": "object"}, execute=lambda a, c: None)
    assert registration_problem(defn) == 'cannot register tool "x": output is required'


def test_registration_rejects_an_unsupported_output_schema_with_its_violations() -> None:
    output = ToolOutput(schema={"type": "string", "pattern": "^a"}, render=lambda a, v: [])
    message = registration_problem(raw_tool(output=output))
    assert message.startswith('cannot register tool "raw": output.schema: unsupported JSON schema: schema.pattern')


@pytest.mark.parametrize(
    ("parameters", "fragment"),
    [
        ({"type": "string"}, "parameters: unsupported JSON schema: schema"),
        (
            {"type": "object", "properties": {"a": {"anyOf": []}}},
            "parameters: unsupported JSON schema: schema.properties.a",
        ),
        ("object", "parameters: unsupported JSON schema: schema"),
    ],
)
def test_registration_rejects_parameters_that_are_not_a_supported_object_schema(parameters: Any, fragment: str) -> None:
    message = registration_problem(raw_tool(parameters=parameters))
    assert message.startswith(f'cannot register tool "raw": {fragment}')


def test_registration_reports_every_problem_together() -> None:
    defn = raw_tool(
        description=None,
        output=None,
        parameters={"type": "object", "properties": {"a": {"type": "date"}}},
        execute=None,
        timeout_ms=-1,
        present_call="p",
    )
    message = registration_problem(defn)
    problems = message.removeprefix('cannot register tool "raw": ').split("; ")
    assert problems[0] == "description must be a str (got None)"
    assert problems[1] == "output is required"
    assert problems[2].startswith("parameters: unsupported JSON schema: schema.properties.a.type")
    assert problems[-3:] == [
        "execute must be callable (got None)",
        "timeout_ms must be a positive finite number (got -1)",
        "present_call must be callable or None (got 'p')",
    ]


def test_a_definition_with_a_hostile_repr_is_still_reported() -> None:
    class Hostile:
        def __repr__(self) -> str:
            raise RuntimeError("no")

    message = registration_problem(raw_tool(present_call=Hostile()))
    assert "present_call must be callable or None (got <unprintable" in message


def _signature_of(fn: Callable[..., Any]) -> list[str]:
    return list(inspect.signature(fn).parameters)


def test_define_tool_takes_exactly_the_documented_keyword_arguments() -> None:
    assert _signature_of(define_tool) == [
        "name",
        "description",
        "parameters",
        "output",
        "execute",
        "is_concurrency_safe",
        "timeout_ms",
        "idempotent",
        "requires_approval",
        "project_content",
        "finalize_content",
        "present_call",
        "present_result",
        "meta",
    ]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in inspect.signature(define_tool).parameters.values())


@pytest.mark.parametrize("name", ["my tool", "café", "notes.read", "a" * 65, "tab\there"])
def test_registration_refuses_a_name_the_model_apis_refuse_and_names_the_rule(rt: Any, name: str) -> None:
    with pytest.raises(RegistrationError) as caught:
        rt.tools.register(raw_tool(name=name))
    assert "does not match ^[a-zA-Z0-9_-]{1,64}$" in caught.value.message
    assert rt.tools.get(name) is None


@pytest.mark.parametrize("name", ["a", "read_file", "web-search", "A1_b-2", "a" * 64])
def test_registration_accepts_every_name_the_model_apis_accept(rt: Any, name: str) -> None:
    dispose = rt.tools.register(raw_tool(name=name))
    assert rt.tools.get(name) is not None
    dispose()
