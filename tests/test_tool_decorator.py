"""``@tool``: a tool from a typed function (issue 21), and the define_tool
and rendering fixes that came with it."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import sys
from typing import Annotated, Any, Literal, Optional

import pytest
from pydantic import BaseModel, Field
from typing_extensions import TypedDict  # pydantic needs it for a TypedDict before Python 3.12

from dsh_actors import (
    Accept,
    ErrorCode,
    InvalidTypeError,
    JsonSchemaError,
    RegistrationError,
    TextBlock,
    ToolBatchInput,
    ToolCall,
    ToolDefinition,
    ToolOutput,
    ToolRunContext,
    define_tool,
    thaw,
    tool,
)
from dsh_actors.definition import validate_definition
from dsh_actors.json import FrozenDict
from dsh_actors.typed import PydanticEnforcer


class Point(BaseModel):
    """A point on the grid."""

    x: int
    y: int = 0


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


@dataclasses.dataclass
class Box:
    width: int
    height: int


class Options(TypedDict):
    verbose: bool
    depth: int


def run(rt: Any, definition: ToolDefinition, arguments: Any, **batch: Any) -> Any:
    """Register ``definition``, run one call of it and unregister it; the
    call's result."""
    unregister = rt.tools.register(definition)
    try:
        result = rt.tools.execute(
            ToolBatchInput(calls=[ToolCall(id="c1", name=definition.name, arguments=arguments)], **batch)
        )
    finally:
        unregister()
    return result.results[0].result


def code_of(result: Any) -> str:
    assert result.is_error, result
    return str(result.error.info.code)


def properties(definition: ToolDefinition) -> dict[str, Any]:
    return thaw(definition.parameters)["properties"]  # type: ignore[no-any-return]


# --------------------------------------------------------------------------
# What the model is offered
# --------------------------------------------------------------------------


def test_the_name_is_the_functions_and_the_description_the_docstrings_text_before_its_sections() -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers.

        Integers only.

        Args:
            a: The first number.
            b: The second
                number.
        """
        return a + b

    assert isinstance(add, ToolDefinition)
    assert add.name == "add"
    assert add.description == "Add two numbers.\n\nIntegers only."
    assert properties(add) == {
        "a": {"type": "integer", "description": "The first number."},
        "b": {"type": "integer", "description": "The second number."},
    }
    assert thaw(add.parameters)["required"] == ["a", "b"]
    assert thaw(add.parameters)["additionalProperties"] is False
    assert thaw(add.output.schema) == {"type": "integer"}


def test_numpy_style_parameter_descriptions_are_read() -> None:
    @tool
    def scale(value: float, factor: float = 2.0) -> float:
        """Scale a value.

        Parameters
        ----------
        value : float
            What to scale.
        factor : float
            By how much.
        """
        return value * factor

    assert scale.description == "Scale a value."
    assert properties(scale)["value"]["description"] == "What to scale."
    assert properties(scale)["factor"] == {"type": "number", "description": "By how much.", "default": 2.0}


def test_sphinx_style_parameter_descriptions_are_read() -> None:
    @tool
    def greet(name: str, shout: bool = False) -> str:
        """Greet someone.

        :param name: Whom to greet.
        :param shout: Whether to shout.
        :returns: The greeting.
        """
        return name

    assert greet.description == "Greet someone."
    assert properties(greet)["name"]["description"] == "Whom to greet."
    assert properties(greet)["shout"]["description"] == "Whether to shout."


def test_the_options_override_the_name_and_description_and_a_field_description_wins_over_the_docstring() -> None:
    @tool(name="sum_two", description="Sum.")
    def add(a: Annotated[int, Field(description="From the hint.")], b: int) -> int:
        """Add.

        Args:
            a: From the docstring.
            b: The second.
        """
        return a + b

    assert (add.name, add.description) == ("sum_two", "Sum.")
    assert properties(add)["a"]["description"] == "From the hint."


def test_every_kind_of_annotation_becomes_its_json_schema() -> None:
    @tool
    def everything(
        count: int,
        ratio: float,
        label: str,
        flag: bool,
        numbers: list[int],
        counts: dict[str, int],
        mode: Literal["fast", "slow"],
        color: Color,
        maybe: str | None,
        bounded: Annotated[int, Field(ge=0, le=10)],
        code: Annotated[str, Field(pattern=r"^[A-Z]{3}$")],
        point: Point,
        box: Box,
        options: Options,
        anything: Any,
        untyped,  # type: ignore[no-untyped-def]  # noqa: ANN001
    ) -> None:
        return None

    props = properties(everything)
    assert props["count"] == {"type": "integer"}
    assert props["ratio"] == {"type": "number"}
    assert props["label"] == {"type": "string"}
    assert props["flag"] == {"type": "boolean"}
    assert props["numbers"] == {"type": "array", "items": {"type": "integer"}}
    assert props["counts"] == {"type": "object", "additionalProperties": {"type": "integer"}}
    assert props["mode"] == {"type": "string", "enum": ["fast", "slow"]}
    assert props["color"] == {"$ref": "#/$defs/Color"}
    assert props["maybe"] == {"anyOf": [{"type": "string"}, {"type": "null"}]}
    assert props["bounded"] == {"type": "integer", "minimum": 0, "maximum": 10}
    assert props["code"] == {"type": "string", "pattern": "^[A-Z]{3}$"}
    assert props["point"] == {"$ref": "#/$defs/Point"}
    assert props["box"] == {"$ref": "#/$defs/Box"}
    assert props["options"] == {"$ref": "#/$defs/Options"}
    assert props["anything"] == {} and props["untyped"] == {}
    defs = thaw(everything.parameters)["$defs"]
    assert defs["Color"]["enum"] == ["red", "green"]
    assert defs["Point"]["properties"] == {"x": {"type": "integer"}, "y": {"type": "integer", "default": 0}}
    assert defs["Box"]["required"] == ["width", "height"]
    assert defs["Options"]["properties"] == {"verbose": {"type": "boolean"}, "depth": {"type": "integer"}}
    assert thaw(everything.output.schema) == {"type": "null"}
    assert "title" not in thaw(everything.parameters)


def test_a_parameter_with_a_default_is_optional_and_shows_its_default() -> None:
    @tool
    def search(query: str, limit: int = 10, path: str | None = None) -> list[str]:
        return []

    schema = thaw(search.parameters)
    assert schema["required"] == ["query"]
    assert schema["properties"]["limit"] == {"type": "integer", "default": 10}
    assert schema["properties"]["path"]["default"] is None


def test_a_default_its_own_parameter_refuses_is_refused_at_decoration_naming_it_and_the_fix(rt: Any) -> None:
    # Before, pydantic left the default unchecked: the schema offered
    # {"default": 20, "maximum": 10}, a call leaving n out ran with 20, and
    # one sending the advertised 20 failed INVALID_ARGS.
    def page(query: str, n: Annotated[int, Field(le=10)] = 20) -> int:
        return n

    with pytest.raises(RegistrationError) as caught:
        tool(page)
    assert str(caught.value) == (
        "cannot register tool \"page\": parameter 'n' has the default 20, which it refuses itself "
        '("value.n": Input should be less than or equal to 10): give it a default it accepts, or loosen its type '
        "or constraint to take this one (pydantic does not check defaults: the schema would offer the model a "
        "default the tool rejects when sent, and a call that leaves the parameter out would run with it unchecked)"
    )

    # The implicit-optional idiom is not refused: it runs as written (left
    # out, or sent as null by a strict model, the function gets None).
    @tool
    def search(query: str, limit: int = None) -> str:  # type: ignore[assignment]
        return repr(limit)

    assert run(rt, search, {"query": "q"}).value == "None"
    assert run(rt, search, {"query": "q", "limit": None}).value == "None"
    assert run(rt, search, {"query": "q", "limit": 3}).value == "3"

    # Each one is named: a Field() default, a part of a model's, under its alias.
    class Window(BaseModel):
        size: Annotated[int, Field(ge=1)]

    closed = Window.model_construct(size=0)

    def nested(
        window: Window = closed,
        x: int = Field(5, ge=6),
        since: Annotated[str, Field(alias="from", max_length=2)] = "abc",
    ) -> int:
        return 0

    with pytest.raises(RegistrationError) as caught:
        tool(nested)
    message = str(caught.value)
    assert """parameter 'window' has the default {"size":0}, which it refuses itself ("value.window.size": """ in (
        message
    )
    assert "parameter 'x' has the default 5, which it refuses itself (\"value.x\": Input should be greater" in message
    assert 'parameter \'since\' has the default "abc", which it refuses itself ("value.from": String should' in message

    # Defaults the parameters accept (and one the schema cannot show) are as before.
    unset, origin = object(), Point(x=1)

    @tool
    def fine(
        n: Annotated[int, Field(le=10)] = 10, limit: int | None = None, since: object = unset, point: Point = origin
    ) -> int:
        return n

    assert thaw(fine.parameters)["properties"]["n"] == {"type": "integer", "maximum": 10, "default": 10}
    assert run(rt, fine, {}).value == 10


def test_a_context_parameter_is_not_offered_and_the_schemas_are_what_the_model_is_offered(rt: Any) -> None:
    @tool
    def where(path: str, ctx: ToolRunContext) -> str:
        return path

    assert set(properties(where)) == {"path"}
    rt.tools.register(where)
    assert rt.tools.schemas() == [{"name": "where", "description": "", "parameters": thaw(where.parameters)}]


def test_the_output_schema_is_the_return_annotation_in_serialization_mode_and_any_json_without_one() -> None:
    @tool
    def when() -> datetime.datetime:
        return datetime.datetime(2026, 1, 1)

    @tool
    def unannotated():  # type: ignore[no-untyped-def]  # noqa: ANN202
        return 1

    assert thaw(when.output.schema) == {"type": "string", "format": "date-time"}
    assert thaw(unannotated.output.schema) == {}


def test_what_cannot_be_a_tool_is_refused_naming_the_tool() -> None:
    def variadic(*names: str) -> str:
        return ""

    with pytest.raises(RegistrationError, match=r'cannot register tool "variadic": parameter \'names\': \*args'):
        tool(variadic)

    class Opaque:
        pass

    def opaque(thing: Opaque) -> str:
        return ""

    with pytest.raises(
        RegistrationError, match=r'tool "opaque": parameter \'thing\': pydantic cannot validate or describe this type'
    ) as caught:
        tool(opaque)
    assert "arbitrary_types_allowed" not in str(caught.value) and "https://" not in str(caught.value)
    assert "annotate it with types that JSON can carry" in str(caught.value)

    def returns_a_type() -> type:
        return int

    with pytest.raises(RegistrationError, match=r'tool "returns_a_type": the return annotation: pydantic cannot'):
        tool(returns_a_type)

    class Callable_:
        def __call__(self, x: int) -> int:
            return x

    with pytest.raises(RegistrationError, match=r"@tool decorates a function defined with def or async def, not a"):
        tool(name="callable")(Callable_())

    def unresolved(thing: NoSuchType) -> str:  # type: ignore[name-defined]  # noqa: F821
        return ""

    with pytest.raises(RegistrationError, match=r'tool "unresolved": cannot read the function'):
        tool(unresolved)

    def slow() -> str:
        return ""

    with pytest.raises(RegistrationError, match=r'tool "slow": timeout_ms must be a positive finite number'):
        tool(timeout_ms=-1)(slow)


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="pydantic takes typing.TypedDict from Python 3.12 on")
def test_a_context_that_may_be_none_is_refused_naming_the_fix() -> None:
    # Before, pydantic's refusal of the type was shown, with a Python repr:
    # "<class 'dsh_actors.execution.ToolRunContext'>".
    def maybe_context(x: int, ctx: ToolRunContext | None = None) -> int:
        return x

    def optional_context(ctx: Optional[ToolRunContext[dict[str, int]]]) -> str:  # noqa: UP045 - the old spelling
        return ""

    def described(ctx: Annotated[ToolRunContext | None, "the call's context"]) -> str:
        return ""

    for fn in (maybe_context, optional_context, described):
        with pytest.raises(RegistrationError) as caught:
            tool(fn)
        assert caught.value.message == (
            f"cannot register tool \"{fn.__name__}\": parameter 'ctx' is annotated with a union that holds "
            "ToolRunContext (such as ToolRunContext | None): annotate it ctx: ToolRunContext (or "
            "ToolRunContext[Deps]); the call's context is always given, never None"
        )


def test_a_typing_typed_dict_before_python_3_12_is_refused_naming_typing_extensions() -> None:
    """(The error used to offer "a TypedDict" among the types to use.)"""
    import typing

    class Plain(typing.TypedDict):
        a: int

    def takes(td: Plain) -> int:
        return td["a"]

    def gives(a: int) -> Plain:
        return {"a": a}

    for fn, where in ((takes, "parameter 'td'"), (gives, "the return annotation")):
        with pytest.raises(RegistrationError) as caught:
            tool(fn)
        assert str(caught.value) == (
            f'cannot register tool "{fn.__name__}": {where}: pydantic cannot validate a typing.TypedDict on '
            "Python < 3.12; define it with typing_extensions.TypedDict (from typing_extensions import TypedDict)"
        )


def test_a_decorated_tool_is_a_full_mode_definition_enforced_by_pydantic_core_also_after_replace() -> None:
    @tool
    def add(a: int, b: int) -> int:
        return a + b

    assert add.schema_mode == "full"
    checked = validate_definition(add)
    assert isinstance(checked.parameter_validator, PydanticEnforcer)
    assert isinstance(checked.output_validator, PydanticEnforcer)
    assert checked.parameter_validator.schema is add.parameters
    assert add.execute.__wrapped__.__name__ == "add"  # type: ignore[attr-defined]
    copy = dataclasses.replace(add, timeout_ms=1000)
    again = validate_definition(copy)
    assert isinstance(again.parameter_validator, PydanticEnforcer)
    assert copy.execute is add.execute  # not wrapped a second time


# --------------------------------------------------------------------------
# Calls
# --------------------------------------------------------------------------


def no_frozen(value: Any) -> bool:
    if isinstance(value, (FrozenDict, tuple)):
        return False
    if isinstance(value, dict):
        return all(no_frozen(v) for v in value.values())
    if isinstance(value, list):
        return all(no_frozen(v) for v in value)
    return True


def test_the_body_gets_validated_typed_values_never_frozen_ones(rt: Any) -> None:
    seen: dict[str, Any] = {}

    @tool
    def take(
        point: Point,
        box: Box,
        options: Options,
        color: Color,
        numbers: list[int],
        counts: dict[str, list[int]],
        anything: Any,
        maybe: str | None = None,
        limit: int = 5,
    ) -> str:
        seen.update(locals())
        return "ok"

    arguments = {
        "point": {"x": 1},
        "box": {"width": 2, "height": 3},
        "options": {"verbose": True, "depth": 2},
        "color": "green",
        "numbers": [1, 2],
        "counts": {"a": [1]},
        "anything": {"k": [1, {"z": [2]}]},
    }
    result = run(rt, take, arguments)
    assert not result.is_error, result
    assert seen["point"] == Point(x=1, y=0)
    assert seen["box"] == Box(2, 3)
    assert seen["options"] == {"verbose": True, "depth": 2} and type(seen["options"]) is dict
    assert seen["color"] is Color.GREEN
    assert seen["numbers"] == [1, 2] and type(seen["numbers"]) is list
    assert seen["counts"] == {"a": [1]}
    assert seen["anything"] == {"k": [1, {"z": [2]}]}
    assert all(no_frozen(seen[key]) for key in ("options", "numbers", "counts", "anything"))
    assert seen["maybe"] is None and seen["limit"] == 5


def test_sync_and_async_functions_run_and_the_context_is_injected(rt: Any) -> None:
    @tool
    def add(a: int, b: int) -> int:
        return a + b

    @tool(concurrency_safe=True)
    async def fetch(url: str, ctx: ToolRunContext) -> dict[str, str]:
        """Fetch a URL."""
        return {"url": url, "call": ctx.call_id}

    assert run(rt, add, '{"a": 1, "b": 2}').value == 3
    fetched = run(rt, fetch, {"url": "https://example.test"})
    assert thaw(fetched.value) == {"url": "https://example.test", "call": "c1"}
    assert fetched.content == (TextBlock('{"url":"https://example.test","call":"c1"}'),)


def test_a_positional_only_context_and_parameters_are_passed_in_place(rt: Any) -> None:
    @tool
    def ordered(a: int, ctx: ToolRunContext, b: int, /, c: int = 0) -> list[Any]:
        return [a, ctx.call_id, b, c]

    assert set(properties(ordered)) == {"a", "b", "c"}
    assert thaw(run(rt, ordered, {"a": 1, "b": 2, "c": 3}).value) == [1, "c1", 2, 3]


def test_bad_arguments_fail_invalid_args_naming_each_path_and_the_body_does_not_run(rt: Any) -> None:
    calls: list[Any] = []

    @tool
    def move(point: Point, steps: Annotated[int, Field(ge=0)], tags: list[str] = []) -> str:  # noqa: B006
        calls.append(point)
        return "moved"

    result = run(rt, move, {"point": {"x": "far"}, "steps": -1, "tags": ["a", 2], "speed": 3})
    assert code_of(result) == ErrorCode.INVALID_ARGS
    assert result.error.message == (
        'invalid arguments: "value.point.x" must be an integer; '
        '"value.steps": Input should be greater than or equal to 0; '
        '"value.tags[1]" must be a string; '
        '"value.speed" is not a declared property (additionalProperties: false)'
    )
    missing = run(rt, move, {"steps": 1})
    assert missing.error.message == 'invalid arguments: missing required property "value.point"'
    not_json = run(rt, move, "not json")  # (what is wrong with the text, and where: as for any tool)
    assert not_json.error.message == (
        "invalid arguments: arguments are not valid JSON: invalid literal, expected 'null' at line 1 column 1"
    )
    not_an_object = run(rt, move, '["a point"]')
    assert not_an_object.error.message == (
        "invalid arguments: the arguments must be a JSON object of the tool's parameters, got an array"
    )
    assert calls == []


def test_a_union_member_name_never_appears_in_a_path(rt: Any) -> None:
    @tool
    def pick(choice: int | list[int]) -> str:
        return "ok"

    message = run(rt, pick, {"choice": "x"}).error.message
    assert '"value.choice" must be an integer' in message and "value.choice.int" not in message


def test_the_value_is_validated_and_dumped_as_json_and_a_wrong_one_fails_invalid_tool_output(rt: Any) -> None:
    @tool
    def where() -> Point:
        return Point(x=1)

    @tool
    def when() -> datetime.date:
        return datetime.date(2026, 12, 3)

    @tool
    def wrong() -> int:
        return "many"  # type: ignore[return-value]

    @tool
    def opaque():  # type: ignore[no-untyped-def]  # noqa: ANN202
        return object()

    point = run(rt, where, {})
    assert type(point.value) is FrozenDict and point.value == {"x": 1, "y": 0}
    assert run(rt, when, {}).value == "2026-12-03"
    bad = run(rt, wrong, {})
    assert code_of(bad) == ErrorCode.INVALID_TOOL_OUTPUT
    assert bad.error.message == 'tool "wrong" returned invalid output: "value" must be an integer'
    unserializable = run(rt, opaque, {})
    assert code_of(unserializable) == ErrorCode.INVALID_TOOL_OUTPUT
    assert "object at 0x" not in unserializable.error.message


def test_a_value_the_serializer_cannot_dump_fails_invalid_tool_output_naming_the_tool(rt: Any) -> None:
    @tool
    def raw() -> bytes:
        return b"\xff\x00"

    @tool
    def cyclic() -> list[Any]:
        value: list[Any] = []
        value.append(value)
        return value

    @tool
    def deep() -> Any:
        value: Any = 1
        for _ in range(1000):
            value = [value]
        return value

    for definition, why in (
        (raw, "holds bytes that are not UTF-8 text, which JSON cannot carry"),
        (cyclic, "cannot be turned into JSON: Circular reference detected (id repeated)"),
        (deep, "cannot be turned into JSON: Maximum serialization depth exceeded"),
    ):
        result = run(rt, definition, {})
        assert code_of(result) == ErrorCode.INVALID_TOOL_OUTPUT
        assert result.error.message == f'tool "{definition.name}" returned invalid output: "value" {why}'


def test_a_replacement_value_is_validated_against_the_return_annotation(rt: Any) -> None:
    @tool
    def count() -> int:
        return 1

    def replace_value(execution: Any, result: Any, next_: Any) -> Any:
        next_()
        return Accept(value="not a number")

    rt.events.on("tools/post-execute", replace_value)
    result = run(rt, count, {})
    assert code_of(result) == ErrorCode.INVALID_TOOL_OUTPUT
    assert result.error.message == 'tool "count" returned invalid output: "value" must be an integer'


def test_the_classifier_and_presenters_get_frozen_arguments_and_answer_safely_on_invalid_ones() -> None:
    from dsh_actors import GenericCallView

    @tool(
        concurrency_safe=lambda args: args["path"].startswith("/tmp"),
        present_call=lambda args: GenericCallView(title=f"read {args['path']}"),
    )
    def read(path: str) -> str:
        return path

    assert read.is_concurrency_safe is not None and read.present_call is not None
    assert read.is_concurrency_safe(FrozenDict({"path": "/tmp/x"})) is True
    assert read.is_concurrency_safe(FrozenDict({"path": "/etc/x"})) is False
    assert read.is_concurrency_safe(FrozenDict({"path": 3})) is False
    view = read.present_call(FrozenDict({"path": "a"}))
    assert view is not None and view.title == "read a"
    assert read.present_call(FrozenDict({})) is None

    @tool(concurrency_safe=True)
    def always(path: str) -> str:
        return path

    assert always.is_concurrency_safe is not None
    assert always.is_concurrency_safe(FrozenDict({"path": "x"})) is True
    assert always.is_concurrency_safe(FrozenDict({"path": 1})) is False


# --------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------


def test_without_render_a_str_is_sent_as_it_is_and_anything_else_as_compact_json(rt: Any) -> None:
    @tool
    def say() -> str:
        return "héllo"

    @tool
    def data() -> dict[str, list[int]]:
        return {"k": [1, 2]}

    @tool
    def nothing() -> None:
        return None

    assert run(rt, say, {}).content == (TextBlock("héllo"),)
    assert run(rt, data, {}).content == (TextBlock('{"k":[1,2]}'),)
    assert run(rt, nothing, {}).content == (TextBlock("null"),)


def test_a_tool_output_needs_no_render_and_never_shows_a_python_repr(rt: Any) -> None:
    nested = define_tool(
        name="nested",
        description="A nested value.",
        parameters={},
        output=ToolOutput(schema={"type": "json"}),
        execute=lambda args, ctx: {"k": (1, 2), "s": "é"},
    )
    result = run(rt, nested, {})
    assert result.content == (TextBlock('{"k":[1,2],"s":"é"}'),)
    assert "FrozenDict" not in result.content[0].text


def test_a_render_returning_no_content_blocks_fails_naming_the_render_not_the_value(rt: Any) -> None:
    @tool(render=lambda args, value: f"{value} secret")  # type: ignore[arg-type,return-value]
    def answer() -> dict[str, str]:
        return {"token": "secret-value"}

    result = run(rt, answer, {})
    assert code_of(result) == ErrorCode.POLICY_FAILED
    assert result.error.message.startswith(
        'output.render of tool "answer": returned a str, not a list of content blocks'
    )
    assert "secret-value" not in result.error.message and "FrozenDict" not in result.error.message


def test_a_render_that_raises_fails_naming_the_render(rt: Any) -> None:
    def render(args: Any, value: Any) -> Any:
        raise ValueError("bad template")

    @tool(render=render)
    def answer() -> int:
        return 42

    result = run(rt, answer, {})
    assert code_of(result) == ErrorCode.POLICY_FAILED
    assert result.error.message == 'output.render of tool "answer": raised ValueError: bad template'


# --------------------------------------------------------------------------
# define_tool fixes
# --------------------------------------------------------------------------


def echo_tool(**options: Any) -> ToolDefinition:
    """``define_tool`` of an ``echo`` of its string ``m``."""
    return define_tool(
        name="echo",
        description="Echo.",
        parameters={"m": {"type": "string", "required": True}},
        output=ToolOutput(schema={"type": "string"}),
        execute=lambda args, ctx: args["m"],
        **options,
    )


def test_define_tool_takes_a_bool_as_a_constant_classifier() -> None:
    echo = echo_tool(is_concurrency_safe=True)
    assert echo.is_concurrency_safe is not None
    assert echo.is_concurrency_safe(FrozenDict({"m": "x"})) is True
    assert echo.is_concurrency_safe(FrozenDict({"m": 1})) is False  # invalid arguments: exclusive
    never = define_tool(
        name="never",
        description="",
        parameters={},
        output=ToolOutput(schema={"type": "null"}),
        execute=lambda args, ctx: None,
        is_concurrency_safe=False,
    )
    assert never.is_concurrency_safe is not None and never.is_concurrency_safe(FrozenDict({})) is False


def test_an_execute_that_cannot_take_args_and_ctx_is_refused_at_definition_and_at_registration(rt: Any) -> None:
    def add(a: int, b: int, c: int) -> int:
        return a + b + c

    with pytest.raises(RegistrationError) as info:
        define_tool(
            name="add",
            description="",
            parameters={},
            output=ToolOutput(schema={"type": "integer"}),
            execute=add,
        )
    assert "execute must accept two positional arguments, (args, ctx)" in info.value.message
    assert "and add(a, b, c) does not" in info.value.message
    assert "@tool" in info.value.message
    with pytest.raises(RegistrationError, match=r"execute must accept two positional arguments"):
        define_tool(
            name="one",
            description="",
            parameters={},
            output=ToolOutput(schema={"type": "integer"}),
            execute=lambda args: 1,  # type: ignore[arg-type,misc]
        )
    raw = ToolDefinition(
        name="raw",
        description="",
        parameters={"type": "object"},
        output=ToolOutput(schema={}),
        execute=lambda: None,  # type: ignore[arg-type,misc]
    )
    with pytest.raises(RegistrationError, match=r"execute must accept two positional arguments"):
        rt.tools.register(raw)
    # What still passes: defaults, *args, keyword-capable second parameter.
    for fine in (lambda args, ctx=None: 1, lambda *a: 1, lambda args, ctx, extra=0: 1):
        define_tool(
            name="fine", description="", parameters={}, output=ToolOutput(schema={"type": "json"}), execute=fine
        )


def test_a_raw_json_schema_given_to_define_tool_says_so_and_names_both_fixes() -> None:
    with pytest.raises(JsonSchemaError) as info:
        define_tool(
            name="search",
            description="",
            parameters={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
            output=ToolOutput(schema={"type": "string"}),
            execute=lambda args, ctx: "",
        )
    message = info.value.message
    assert 'tool "search": parameters is a raw JSON Schema (it has "type": "object" at its root)' in message
    assert "@tool" in message and 'ToolDefinition(..., schema_mode="full")' in message


@pytest.mark.parametrize(
    "spec",
    [
        {"type": "integer", "minimum": 0},
        {"type": "string", "pattern": "^a"},
        {"anyOf": [{"type": "string"}, {"type": "null"}]},
        {"type": ["string", "null"]},
    ],
)
def test_a_json_schema_keyword_the_dsl_lacks_gets_the_hint_to_the_two_fixes(spec: dict[str, Any]) -> None:
    with pytest.raises(JsonSchemaError) as info:
        define_tool(
            name="t",
            description="",
            parameters={"x": spec},
            output=ToolOutput(schema={"type": "json"}),
            execute=lambda args, ctx: None,
        )
    assert info.value.violations[-1].startswith("the DSL has no anyOf, minimum, pattern")
    assert 'schema_mode="full"' in info.value.violations[-1] and "@tool" in info.value.violations[-1]


def test_an_ordinary_dsl_mistake_gets_no_hint() -> None:
    with pytest.raises(JsonSchemaError) as info:
        define_tool(
            name="t",
            description="",
            parameters={"x": {"type": "strng"}},
            output=ToolOutput(schema={"type": "json"}),
            execute=lambda args, ctx: None,
        )
    assert not any("the DSL has no" in v for v in info.value.violations)


def test_calls_sharing_one_frozen_argument_object_each_get_their_own_typed_values(rt: Any) -> None:
    from dsh_actors import materialize

    @tool(concurrency_safe=True)
    def grow(items: list[int]) -> list[int]:
        items.append(2)
        return items

    shared = materialize({"items": [1]})
    rt.tools.register(grow)
    batch = rt.tools.execute(
        ToolBatchInput(calls=[ToolCall(id=f"c{i}", name="grow", arguments=shared) for i in range(6)])
    )
    assert [thaw(call.result.value) for call in batch.results] == [[1, 2]] * 6
    assert thaw(shared) == {"items": [1]}


def test_keyword_and_other_parameter_sections_of_a_google_docstring_describe_their_parameters() -> None:
    @tool
    def forecast(city: str, *, days: int = 3, units: str = "metric", lang: str = "en") -> str:
        """Get the weather forecast.

        Args:
            city: The city.

        Keyword Args:
            days: How many days.
            units: metric or imperial.

        Other Parameters:
            lang: The language of the text.

        Note:
            Cached for an hour.
        """
        return city

    assert forecast.description == "Get the weather forecast.\n\nNote:\n    Cached for an hour."
    assert {k: v["description"] for k, v in properties(forecast).items()} == {
        "city": "The city.",
        "days": "How many days.",
        "units": "metric or imperial.",
        "lang": "The language of the text.",
    }

    @tool
    def options(*, verbose: bool = False) -> str:
        """List the options.

        Keyword Arguments:
            verbose: Show each option's default.
        """
        return ""

    assert options.description == "List the options."
    assert properties(options)["verbose"]["description"] == "Show each option's default."


def test_a_docstring_without_a_summary_still_describes_its_parameters() -> None:
    @tool
    def google(x: int) -> int:
        """
        Args:
            x: The x.
        """
        return x

    assert google.description == ""
    assert properties(google)["x"]["description"] == "The x."


def test_numpy_parameters_documented_together_each_get_the_description() -> None:
    @tool
    def numpy(x: int, y: int) -> int:
        """Add two numbers.

        Parameters
        ----------
        x, y : int
            The numbers.
        """
        return x + y

    assert numpy.description == "Add two numbers."
    assert {k: v["description"] for k, v in properties(numpy).items()} == {"x": "The numbers.", "y": "The numbers."}


def test_a_summary_wrapped_over_several_lines_stays_one_paragraph() -> None:
    @tool
    def read(path: str) -> str:
        """Read a text file under the project root; use offset
        and limit to page through long files.

        Args:
            path: Relative to the root.
        """
        return path

    assert (
        read.description == "Read a text file under the project root; use offset\nand limit to page through long files."
    )


def test_a_classifier_put_in_by_replace_is_guarded_like_the_decorators_own() -> None:
    @tool
    def read(path: str) -> str:
        return path

    copy = dataclasses.replace(read, is_concurrency_safe=lambda args: True)
    assert copy.is_concurrency_safe is not None
    assert copy.is_concurrency_safe(FrozenDict({"path": "a"})) is True
    assert copy.is_concurrency_safe(FrozenDict({"path": 3})) is False  # invalid arguments: exclusive


def test_requires_approval_is_a_bool_or_a_predicate_on_frozen_arguments_answering_false_on_invalid_ones(
    rt: Any,
) -> None:
    from dsh_actors import Agent

    @tool(requires_approval=lambda args: args["path"].startswith("/etc"))
    def delete(path: str) -> str:
        return f"deleted {path}"

    assert callable(delete.requires_approval)
    assert delete.requires_approval(FrozenDict({"path": "/etc/x"})) is True
    assert delete.requires_approval(FrozenDict({"path": "/tmp/x"})) is False
    assert delete.requires_approval(FrozenDict({"path": 3})) is False  # invalid: the body will not run
    copy = dataclasses.replace(delete, requires_approval=lambda args: True)
    assert callable(copy.requires_approval) and copy.requires_approval(FrozenDict({"path": 3})) is False

    asked: list[str] = []
    rt.approvals.set(lambda request: asked.append(request.arguments["path"]) or "rejected")
    assert run(rt, delete, {"path": "/tmp/x"}, agent=Agent("a")).value == "deleted /tmp/x"
    assert run(rt, delete, {"path": "/etc/x"}, agent=Agent("a")).error.message == 'the user rejected tool "delete"'
    assert asked == ["/etc/x"]

    @tool(requires_approval=True)
    def drop() -> str:
        return "dropped"

    assert drop.requires_approval is True and tool(drop.execute.__wrapped__).requires_approval is False
    with pytest.raises(RegistrationError, match=r'tool "drop": requires_approval must be True, False or a callable'):
        tool(requires_approval="yes")(drop.execute.__wrapped__)  # type: ignore[arg-type]


def test_parameter_names_pydantic_reserves_on_models_are_fine(rt: Any) -> None:
    @tool
    def configure(model_name: str, schema: str, json: int, copy: bool = False) -> list[Any]:
        return [model_name, schema, json, copy]

    assert set(properties(configure)) == {"model_name", "schema", "json", "copy"}
    result = run(rt, configure, {"model_name": "m", "schema": "s", "json": 1})
    assert thaw(result.value) == ["m", "s", 1, False]


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def test_values_nested_as_deep_as_lossless_json_allows_pass_both_ways(rt: Any) -> None:
    """pydantic's JSON parser stops at 200 levels; lossless JSON allows
    MAX_JSON_DEPTH (256): a value between the two was refused as invalid
    JSON, arguments and return value alike."""
    from dsh_actors import MAX_JSON_DEPTH

    @tool
    def depth(data: Any) -> Any:
        """Gives the value back."""
        return data

    value = _nested(MAX_JSON_DEPTH - 6)
    result = run(rt, depth, {"data": value})
    assert not result.is_error, result.error.message
    assert thaw(result.value) == value


def test_a_function_that_forgets_to_return_is_told_so(rt: Any) -> None:
    @tool
    def greet(name: str) -> str:
        """Greets."""
        f"hello {name}"  # noqa: B018 - the mistake under test

    result = run(rt, greet, {"name": "Ada"})
    assert result.error.message == (
        'tool "greet" returned invalid output: "value" must be a string; '
        "greet returned None: is a return statement missing?"
    )


def test_a_value_that_fits_no_member_of_a_union_gets_one_violation_naming_each_type(rt: Any) -> None:
    @tool
    def pick(v: int | str, items: list[int | bool]) -> str:
        """Picks."""
        return "ok"

    result = run(rt, pick, {"v": [1], "items": [1, "x"]})
    assert result.error.message == (
        'invalid arguments: "value.v" must be an integer or a string; "value.items[1]" must be an integer or a boolean'
    )


def test_a_value_that_fits_no_member_of_a_union_of_models_gets_each_members_violations_under_its_name(
    rt: Any,
) -> None:
    class Circle(BaseModel):
        radius: float

    class Square(BaseModel):
        side: float
        label: str = ""

    class Dot(BaseModel):
        kind: Literal["dot"]
        x: int

    class Line(BaseModel):
        kind: Literal["line"]
        length: int

    @tool
    def area(shape: Circle | Square | int, shapes: list[Circle | Square] | None = None) -> float:
        """Area."""
        return 0.0

    @tool
    def mark(at: Annotated[Dot | Line, Field(discriminator="kind")]) -> str:
        """Mark."""
        return "ok"

    neither = run(rt, area, {"shape": {"label": 5}, "shapes": [{"radius": 1}, {"radius": "big"}]}).error.message
    assert neither == (
        'invalid arguments: "value.shape" matches none of its alternatives: '
        'Circle [missing required property "value.shape.radius"], '
        'Square [missing required property "value.shape.side"; "value.shape.label" must be a string]; '
        '"value.shapes[1]" matches none of its alternatives: '
        'Circle ["value.shapes[1].radius" must be a number], Square [missing required property "value.shapes[1].side"]'
    )
    # Only the members of the value's type speak: an object is not told it must be an integer...
    one_object_member = run(rt, area, {"shape": {"side": 1, "label": []}}).error.message
    assert one_object_member == (
        'invalid arguments: "value.shape" matches none of its alternatives: '
        'Circle [missing required property "value.shape.radius"], Square ["value.shape.label" must be a string]'
    )
    # ...and a value of no member's type is told the types, in one violation.
    assert run(rt, area, {"shape": "big"}).error.message == (
        'invalid arguments: "value.shape" must be an object or an integer'
    )
    # A discriminator picks the member: its violations alone, as they are.
    assert run(rt, mark, {"at": {"kind": "line", "x": 1}}).error.message == (
        'invalid arguments: missing required property "value.at.length"'
    )


def test_a_literal_or_an_enum_is_told_in_json_with_every_other_alternative_of_its_union(rt: Any) -> None:
    # (A union told only its Literal's values, in Python's spelling: 3.5 for
    # Literal["auto"] | int was told "Input should be 'auto'", never that an
    # integer does too.)
    @tool
    def pick(
        x: Literal["auto"] | int = "auto",
        mode: Literal["a", "b"] | bool = False,
        flag: Literal["on", True, None] = None,
        color: Color | int = 0,
        where: Point | Literal["here"] = "here",
        weights: dict[Literal["a", "b"], int] | None = None,
    ) -> Literal["done"] | int:
        return 2.5  # type: ignore[return-value]

    def refused(arguments: Any) -> str:
        result = run(rt, pick, arguments)
        assert code_of(result) == ErrorCode.INVALID_ARGS
        return str(result.error.message).removeprefix("invalid arguments: ")

    assert refused({"x": 3.5}) == '"value.x" must be "auto" or an integer'
    assert refused({"x": "fast"}) == '"value.x" must be "auto" or an integer'
    assert refused({"mode": "c"}) == '"value.mode" must be one of ["a","b"] or a boolean'
    assert refused({"flag": "off"}) == '"value.flag" must be one of ["on",true,null]'
    assert refused({"color": "blue"}) == '"value.color" must be one of ["red","green"] or an integer'
    assert refused({"where": "there"}) == '"value.where" must be an object or "here"'
    # An object is told its model's violations alone (not that it must be "here").
    assert refused({"where": {"x": "far"}}) == '"value.where.x" must be an integer'
    assert refused({"weights": {"c": 1}}) == 'key "c" of "value.weights" must be one of ["a","b"]'
    returned = run(rt, pick, {})
    assert returned.error.message == 'tool "pick" returned invalid output: "value" must be "done" or an integer'


def test_a_value_where_null_is_allowed_too_is_told_or_null(rt: Any) -> None:
    # (pydantic reports only the inner type's error for an optional type:
    # `x: int | None` sent "a" was told "value.x" must be an integer.)
    @tool
    def pick(
        x: int | None = None,
        k: Literal["a", "b"] | None = None,
        u: int | str | None = None,
        at: Point | None = None,
        where: Point | Literal["here"] | None = None,
        xs: list[int | None] | None = None,
        by: dict[str, Point | None] | None = None,
        n: int = 0,
    ) -> int | None:
        return "q"  # type: ignore[return-value]

    def refused(arguments: Any) -> str:
        result = run(rt, pick, arguments)
        assert code_of(result) == ErrorCode.INVALID_ARGS
        return str(result.error.message).removeprefix("invalid arguments: ")

    assert refused({"x": "a"}) == '"value.x" must be an integer or null'
    assert refused({"k": "c"}) == '"value.k" must be one of ["a","b"] or null'
    assert refused({"u": [1]}) == '"value.u" must be an integer or a string or null'
    assert refused({"at": 1}) == '"value.at" must be an object or null'
    assert refused({"where": "there"}) == '"value.where" must be an object or "here" or null'
    assert refused({"xs": [1, "a"]}) == '"value.xs[1]" must be an integer or null'
    assert refused({"xs": 1}) == '"value.xs" must be an array or null'
    assert refused({"by": {"p": 1}}) == '"value.by.p" must be an object or null'
    # Null is told only where it is allowed: a field of an optional object, a required value.
    assert refused({"at": {"x": "a"}}) == '"value.at.x" must be an integer'
    assert refused({"where": {"x": "a"}}) == '"value.where.x" must be an integer'
    assert refused({"n": "a"}) == '"value.n" must be an integer'
    returned = run(rt, pick, {})
    assert returned.error.message == 'tool "pick" returned invalid output: "value" must be an integer or null'


def test_a_discriminated_unions_unknown_tag_is_told_at_its_key_as_the_tags_in_json(rt: Any) -> None:
    # (It was pydantic's "Input tag 'None' found using 'kind' does not match
    # any of the expected tags: 'dot', 'line'" at the union's path.)
    class Dot(BaseModel):
        kind: Literal["dot"] = Field(alias="Kind")

    class Line(BaseModel):
        kind: Literal["line", 2] = Field(alias="Kind")

    @tool
    def mark(at: Annotated[Dot | Line, Field(discriminator="kind")]) -> str:
        return "ok"

    for tag in ("circle", None, [1]):
        assert run(rt, mark, {"at": {"Kind": tag}}).error.message == (
            'invalid arguments: "value.at.Kind" must be one of ["dot","line",2]'
        )


# --------------------------------------------------------------------------
# Authoring: a tool called in a unit test, refusals that name the fix, the
# whole docstring, a typed context, a classifier that raises
# --------------------------------------------------------------------------


def test_only_a_decorated_tool_is_callable_and_it_is_called_as_its_function() -> None:
    import asyncio

    from dsh_actors.typed import TypedToolDefinition

    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    @tool
    async def fetch(url: str, ctx: ToolRunContext) -> str:
        """Fetch."""
        return f"{url} with {ctx!r}"

    assert add(1, 2) == 3 and add(a=2, b=3) == 5  # as written: no validation, no runtime
    assert asyncio.run(fetch("a.test", "a context")) == "a.test with 'a context'"  # type: ignore[arg-type]
    plus = dataclasses.replace(add, name="plus")
    assert type(plus) is TypedToolDefinition and plus(1, 1) == 2  # the same body, the same function
    assert isinstance(add, ToolDefinition) and callable(add)
    echo = echo_tool()
    raw = ToolDefinition(
        name="raw",
        description="Raw.",
        parameters={"type": "object"},
        output=ToolOutput(schema={}),
        execute=echo.execute,
    )
    # A definition that has only execute(args, ctx) does not pass for a function with callable().
    assert not callable(echo) and not callable(raw)
    with pytest.raises(TypeError, match="^'ToolDefinition' object is not callable$"):
        echo({"m": "x"})  # type: ignore[operator]
    # A copy of a decorated tool given another execute has no function to call, and says how to run it.
    with pytest.raises(
        InvalidTypeError,
        match=r'^tool "add" has an execute that @tool did not make, so there is no function to call: run it as the '
        r'model would, rt\.tools\.execute\(ToolBatchInput\(calls=\[ToolCall\(id="c1", name="add", '
        r"arguments=\{\.\.\.\}\)\]\)\)$",
    ):
        dataclasses.replace(add, execute=echo.execute)(1, 2)


def test_refusals_of_the_decorator_name_the_fix() -> None:
    def variadic(query: str, *terms: str) -> str:
        return query

    def options(query: str, **flags: bool) -> str:
        return query

    with pytest.raises(RegistrationError) as caught:
        tool(variadic)
    assert str(caught.value) == (
        "cannot register tool \"variadic\": parameter 'terms': *args and **kwargs cannot be offered to a model; "
        "take a list instead (terms: list[str])"
    )
    with pytest.raises(RegistrationError) as caught:
        tool(options)
    assert str(caught.value).endswith(
        "take one parameter holding them (flags: Options, a pydantic model or TypedDict whose fields are the "
        "options, or a dict[str, ...])"
    )
    with pytest.raises(RegistrationError) as caught:
        tool("search")  # type: ignore[call-overload]  # @tool("search") def ...
    assert str(caught.value) == "@tool takes the tool's name as a keyword: @tool(name='search'), not @tool('search')"


def test_the_reserved_name_is_refused_by_the_decorator_as_registration_refuses_it(rt: Any) -> None:
    def run_code(code: str) -> str:
        return code

    reserved = '"run_code" is reserved for the code-mode transport; give the tool another name'
    with pytest.raises(RegistrationError) as caught:
        tool(run_code)
    assert str(caught.value) == f'cannot register tool "run_code": {reserved}'
    with pytest.raises(RegistrationError) as caught:
        tool(name="run_code")(lambda: "")
    assert str(caught.value) == f'cannot register tool "run_code": {reserved}'
    renamed = tool(name="run_python")(run_code)
    with pytest.raises(RegistrationError) as caught:
        rt.tools.register(dataclasses.replace(renamed, name="run_code"))
    assert str(caught.value) == f'cannot register tool "run_code": {reserved}'


def test_the_description_keeps_every_docstring_section_but_the_signatures_in_each_style() -> None:
    @tool
    def google(sql: str, limit: int = 100) -> str:
        """Run a read-only SQL query.

        Note:
            Only SELECT statements are allowed.

        Args:
            sql: The query.
            limit: Row cap.
        Warning:
            Large results are truncated.

        Returns:
            The rows as text.

        Raises:
            ValueError: On a write.

        Example:
            google(sql="SELECT 1")
        """
        return sql

    assert google.description == (
        "Run a read-only SQL query.\n\nNote:\n    Only SELECT statements are allowed.\n\n"
        'Warning:\n    Large results are truncated.\n\nExample:\n    google(sql="SELECT 1")'
    )
    assert {k: v["description"] for k, v in properties(google).items()} == {"sql": "The query.", "limit": "Row cap."}

    @tool
    def numpy(sql: str) -> str:
        """Run a query.

        Parameters
        ----------
        sql : str
            The query.

        Returns
        -------
        str
            The rows.

        Notes
        -----
        Large results are truncated.
        """
        return sql

    assert numpy.description == "Run a query.\n\nNotes\n-----\nLarge results are truncated."
    assert properties(numpy)["sql"]["description"] == "The query."

    @tool
    def sphinx(sql: str, limit: int = 1) -> str:
        """Run a query.

        :param sql: The query,
        read-only.
        :param limit: Row cap.
        :returns: The rows.
        :raises ValueError: On a write.

        .. note:: Large results are truncated.
        """
        return sql

    assert sphinx.description == "Run a query.\n\n.. note:: Large results are truncated."
    assert {k: v["description"] for k, v in properties(sphinx).items()} == {
        "sql": "The query, read-only.",
        "limit": "Row cap.",
    }


def test_a_context_typed_by_its_deps_is_the_context(rt: Any) -> None:
    @dataclasses.dataclass
    class Deps:
        db: dict[str, str]

    @tool
    def lookup(key: str, ctx: ToolRunContext[Deps]) -> str:
        """Look a key up."""
        return ctx.deps.db[key]

    @tool
    def described(ctx: Annotated[ToolRunContext[Deps], "the call's context"]) -> str:
        """Which call."""
        return ctx.call_id

    assert set(properties(lookup)) == {"key"} and properties(described) == {}
    assert run(rt, lookup, {"key": "a"}, deps=Deps(db={"a": "found"})).value == "found"
    assert run(rt, described, {}).value == "c1"


def test_a_classifier_that_raises_runs_the_call_exclusive_and_is_warned_about_once_per_tool(
    library_logs: None,
) -> None:
    from loguru import logger

    class Query(BaseModel):
        path: str

    # (A name of its own: each tool's classifier is warned about once per kind of failure.)
    @tool(name="read_with_a_typed_classifier", concurrency_safe=lambda args: args.q.path.startswith("/tmp"))
    def read(q: Query) -> str:
        return q.path

    records: list[Any] = []
    sink = logger.add(lambda message: records.append(message.record), level="DEBUG")
    try:
        assert read.is_concurrency_safe is not None
        assert read.is_concurrency_safe(FrozenDict({"q": FrozenDict({"path": "/tmp/x"})})) is False
        assert read.is_concurrency_safe(FrozenDict({"q": FrozenDict({"path": "/tmp/y"})})) is False
    finally:
        logger.remove(sink)
    assert [r["level"].name for r in records] == ["WARNING", "DEBUG"]
    assert records[0]["message"] == (
        'tool "read_with_a_typed_classifier": is_concurrency_safe (@tool\'s concurrency_safe) raised '
        "AttributeError: 'FrozenDict' object has no attribute 'q', so its call runs exclusive; it gets the "
        'arguments as frozen JSON, not typed values (args["path"], not args.path): fix it to answer True or False '
        "for any valid arguments"
    )
