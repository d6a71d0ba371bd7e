"""Strict function calling: ``tools(..., strict=True)`` for both OpenAI wire
formats, checked against the SDK's own param types, and the ``null`` a
strict model sends for an optional parameter read as absent by the pipeline."""

from __future__ import annotations

import enum
import json
from typing import Any

import pytest
from openai.types.chat import ChatCompletionFunctionToolParam
from openai.types.responses import FunctionToolParam
from pydantic import BaseModel, Field

from dsh_actors import ToolBatchInput, ToolCall, ToolDefinition, ToolOutput, ToolRuntime, define_tool, text
from dsh_actors.json import FrozenDict, materialize
from dsh_actors.providers import openai, openai_responses
from dsh_actors.schema import absent_null_plan, strict_json_schema

from .helpers import validate


class Options(BaseModel):
    depth: float = Field(gt=0)
    follow: str | None = None
    retries: int = Field(default=3, ge=0)


class ScanArguments(BaseModel):
    path: str = Field(pattern="^[^\\s]", description="what to scan")
    limit: int = Field(default=10, ge=1)
    mode: str = Field(default="fast", pattern="^(fast|thorough)$")
    options: Options
    extra: Options | None = None
    tags: list[str] = Field(default_factory=list)


PYDANTIC = ScanArguments.model_json_schema()


def raw(name: str, parameters: Any, seen: list[Any]) -> ToolDefinition:
    def execute(args: Any, ctx: Any) -> str:
        seen.append(args)
        return "ok"

    return ToolDefinition(
        name=name,
        description=name,
        parameters=parameters,
        output=ToolOutput(schema={"type": "string"}, render=lambda a, v: [text(v)]),
        execute=execute,
        schema_mode="full",
    )


@pytest.fixture
def seen() -> list[Any]:
    return []


@pytest.fixture
def strict_rt(rt: ToolRuntime, seen: list[Any]) -> ToolRuntime:
    rt.tools.register(raw("scan", PYDANTIC, seen))
    rt.tools.register(raw("loose", {"type": "object", "properties": {"q": {"type": "string", "minLength": 1}}}, seen))
    rt.tools.register(raw("open_map", {"type": "object", "additionalProperties": {"type": "integer"}}, seen))

    def read(args: Any, ctx: Any) -> str:
        seen.append(args)
        return "read"

    rt.tools.register(
        define_tool(
            name="read_file",
            description="read a file",
            parameters={"path": {"type": "string", "required": True}, "limit": {"type": "integer"}},
            execute=read,
            output=ToolOutput(schema={"type": "string"}, render=lambda a, v: [text(v)]),
        )
    )
    return rt


def objects(node: Any) -> list[dict[str, Any]]:
    """Every object node of a schema (plain JSON)."""
    found: list[dict[str, Any]] = []
    if isinstance(node, dict):
        if node.get("type") == "object" or (isinstance(node.get("type"), list) and "object" in node["type"]):
            found.append(node)
        for value in node.values():
            found.extend(objects(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(objects(value))
    return found


def accepts_null(node: dict[str, Any]) -> bool:
    kind = node.get("type")
    return (
        kind == "null"
        or (isinstance(kind, list) and "null" in kind)
        or any(accepts_null(branch) for branch in node.get("anyOf", ()))
    )


def test_strict_tools_are_valid_sdk_params_and_only_strictable_schemas_are_strict(strict_rt: ToolRuntime) -> None:
    chat = {t["function"]["name"]: t for t in openai.tools(strict_rt, strict=True)}
    responses = {t["name"]: t for t in openai_responses.tools(strict_rt, strict=True)}
    for tool in chat.values():
        validate(ChatCompletionFunctionToolParam, tool)
    for tool in responses.values():
        validate(FunctionToolParam, tool)
    assert {name: t["function"]["strict"] for name, t in chat.items()} == {
        "scan": True,
        "read_file": True,
        "loose": False,  # minLength is not in the strict subset
        "open_map": False,  # an object that takes other keys
    }
    assert {name: t["strict"] for name, t in responses.items()} == {
        name: t["function"]["strict"] for name, t in chat.items()
    }
    assert chat["loose"]["function"]["parameters"] == strict_rt.tools.get("loose").parameters  # type: ignore[union-attr]
    for name in ("scan", "read_file"):
        parameters = chat[name]["function"]["parameters"]
        assert responses[name]["parameters"] == parameters
        for obj in objects(parameters):
            assert obj["additionalProperties"] is False
            assert obj["required"] == list(obj["properties"])
        assert "default" not in json.dumps(parameters)


def test_optional_parameters_are_made_nullable_and_required_ones_stay_as_they_are() -> None:
    strict = strict_json_schema(PYDANTIC)
    assert strict is not None
    props = strict["properties"]
    assert props["path"] == {"type": "string", "pattern": "^[^\\s]", "description": "what to scan", "title": "Path"}
    assert props["limit"]["type"] == ["integer", "null"] and props["limit"]["minimum"] == 1
    assert props["options"] == {"$ref": "#/$defs/Options"}
    assert accepts_null(props["extra"]) and accepts_null(props["tags"])
    options = strict["$defs"]["Options"]
    assert options["required"] == ["depth", "follow", "retries"]
    assert accepts_null(options["properties"]["retries"]) and not accepts_null(options["properties"]["depth"])


def test_without_strict_the_tools_are_sent_as_before(strict_rt: ToolRuntime) -> None:
    assert all("strict" not in t["function"] for t in openai.tools(strict_rt))
    assert {t["strict"] for t in openai_responses.tools(strict_rt)} == {False}
    assert [t["function"]["parameters"] for t in openai.tools(strict_rt)] == [
        s["parameters"] for s in strict_rt.tools.schemas()
    ]


def call(rt: ToolRuntime, name: str, arguments: str) -> Any:
    batch = rt.tools.execute(ToolBatchInput(calls=(ToolCall(id="c1", name=name, arguments=arguments),)))
    return batch.results[0].result


def test_a_strict_models_null_for_an_optional_parameter_is_absent_and_the_call_validates(
    strict_rt: ToolRuntime, seen: list[Any]
) -> None:
    # What a strict model sends: every property, null for those it leaves out.
    arguments = {
        "path": "src",
        "limit": None,
        "mode": None,
        "options": {"depth": 1.5, "follow": None, "retries": None},
        "extra": None,
        "tags": None,
    }
    result = call(strict_rt, "scan", json.dumps(arguments))
    assert not result.is_error, result
    # follow and extra accept null in the tool's own schema: kept.
    assert seen[-1] == {"path": "src", "options": {"depth": 1.5, "follow": None}, "extra": None}
    result = call(strict_rt, "read_file", '{"path": "a.txt", "limit": null}')
    assert not result.is_error, result
    assert seen[-1] == {"path": "a.txt"}


def test_a_null_for_a_required_parameter_still_fails_invalid_args(strict_rt: ToolRuntime, seen: list[Any]) -> None:
    result = call(strict_rt, "scan", '{"path": null, "options": {"depth": 1}}')
    assert result.is_error and result.error.info.code == "INVALID_ARGS"
    assert '"value.path" must be a string' in result.error.message
    assert seen == []


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"oneOf": [{"type": "string"}, {"type": "integer"}]}}},
        {"type": "object", "properties": {"a": {}}},
        {"type": "object", "properties": {"a": {"type": "string", "format": "uri"}}},
        {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}}},
        {"type": "object", "properties": {"a": {"type": "object"}}},
        # An array of any items (OpenAI refuses "array schema missing items").
        {"type": "object", "properties": {"a": {"type": "array"}}},
        {"type": "object", "properties": {"a": {"type": ["array", "null"]}}},
        {"anyOf": [{"type": "object", "properties": {}}]},
        {"type": "object", "properties": {"a": {"$ref": "https://example.com/s.json"}}},
        # A required key it does not declare: a closed object could never hold it.
        {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a", "b"]},
    ],
)
def test_schemas_outside_the_strict_subset_are_not_made_strict(schema: dict[str, Any]) -> None:
    assert strict_json_schema(schema) is None


def test_a_recursive_schema_is_strict_with_its_reference_kept() -> None:
    tree = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#"}}},
        "required": ["name"],
    }
    strict = strict_json_schema(tree)
    assert strict is not None
    assert strict["properties"]["children"] == {"type": ["array", "null"], "items": {"$ref": "#"}}


def test_the_plan_follows_array_items_and_keeps_frozen_values_frozen() -> None:
    schema = materialize(
        {
            "type": "object",
            "properties": {
                "rows": {
                    "type": "array",
                    "items": {"type": "object", "properties": {"k": {"type": "string"}, "n": {"type": "integer"}}},
                }
            },
            "required": ["rows"],
        }
    )
    plan = absent_null_plan(schema)
    assert plan is not None
    value = materialize({"rows": [{"k": "a", "n": None}, {"k": None}]})
    settled = plan.apply(value)
    assert settled == {"rows": ({"k": "a"}, {})} and type(settled) is FrozenDict
    untouched = materialize({"rows": [{"k": "a"}]})
    assert plan.apply(untouched) is untouched


class _A(BaseModel):
    a: int
    x: int = 0


class _B(BaseModel):
    b: int
    x: int | None = 5


class _C(BaseModel):
    c: int
    x: int | None


def test_arguments_valid_as_sent_keep_their_nulls_whichever_union_branch_they_are() -> None:
    # A's x drops a null; B's and C's take one: {"b": 1, "x": null} is a B as
    # sent (a non-strict model's), and must reach the function as one.
    from dsh_actors import tool

    seen: list[Any] = []

    @tool
    def t1(u: _A | _B) -> str:
        seen.append(u)
        return "ok"

    @tool
    def t2(u: _A | _C) -> str:
        seen.append(u)
        return "ok"

    with ToolRuntime() as rt:
        rt.tools.register(t1)
        rt.tools.register(t2)
        assert [tool["function"]["strict"] for tool in openai.tools(rt, strict=True)] == [False, False]
        calls = (
            ToolCall("c1", "t1", '{"u": {"b": 1, "x": null}}'),
            ToolCall("c2", "t2", '{"u": {"c": 1, "x": null}}'),
            ToolCall("c3", "t1", '{"u": {"a": 1, "x": null}}'),  # refused as sent: A's null is an absent x
        )
        results = rt.tools.execute(ToolBatchInput(calls=calls)).results
    assert [r.result.is_error for r in results] == [False, False, False]
    assert seen == [_B(b=1, x=None), _C(c=1, x=None), _A(a=1, x=0)]


def test_a_model_and_a_list_of_it_is_two_objects_of_a_union_so_not_strict() -> None:
    schema = {
        "type": "object",
        "$defs": {
            "A": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "x": {"type": "integer"}},
                "required": ["a"],
            }
        },
        "properties": {"u": {"anyOf": [{"$ref": "#/$defs/A"}, {"type": "array", "items": {"$ref": "#/$defs/A"}}]}},
        "required": ["u"],
    }
    assert strict_json_schema(schema) is None


def test_objects_nested_more_than_ten_levels_through_defs_are_not_strict() -> None:
    def chain(levels: int) -> dict[str, Any]:
        defs = {
            f"L{i}": {"type": "object", "properties": {"next": {"$ref": f"#/$defs/L{i + 1}"}}} for i in range(levels)
        }
        defs[f"L{levels}"] = {"type": "object", "properties": {"v": {"type": "integer"}}}
        return {"type": "object", "$defs": defs, "properties": {"head": {"$ref": "#/$defs/L0"}}}

    assert strict_json_schema(chain(8)) is not None  # 10 levels: the root and L0..L8
    assert strict_json_schema(chain(9)) is None


def test_objects_nested_more_than_ten_levels_inline_are_not_strict() -> None:
    def inline(levels: int) -> dict[str, Any]:
        node: dict[str, Any] = {"type": "object", "properties": {"v": {"type": "integer"}}}
        for _ in range(levels - 1):
            node = {"type": "object", "properties": {"n": node}}
        return node

    assert strict_json_schema(inline(10)) is not None
    assert strict_json_schema(inline(11)) is None


def enums(*sizes: int, width: int = 4) -> dict[str, Any]:
    """An object schema with one string enum property per size, each value
    ``width`` characters long."""
    return {
        "type": "object",
        "properties": {
            f"e{n}": {"type": "string", "enum": [f"{i:0{width}d}" for i in range(size)]} for n, size in enumerate(sizes)
        },
    }


@pytest.mark.parametrize(
    ("schema", "strict"),
    [
        # At most 1000 enum values in all.
        (enums(500, 500), True),
        (enums(500, 501), False),
        # An enum of more than 250 values: at most 15,000 characters of them.
        (enums(250, width=70), True),  # (17,500 characters, but only 250 values)
        (enums(251, width=59), True),  # 14,809 characters
        (enums(251, width=60), False),  # 15,060 characters
        # At most 120,000 characters of property names, definition names,
        # enum and const values in all.
        (enums(*[200] * 5, width=119), True),  # 119,000 characters
        (enums(*[200] * 5, width=121), False),  # 121,000
        ({"type": "object", "properties": {f"{i:060d}": {"type": "integer"} for i in range(2000)}}, True),
        ({"type": "object", "properties": {f"{i:061d}": {"type": "integer"} for i in range(2000)}}, False),
        (
            {
                "type": "object",
                "$defs": {f"{i:0100d}": {"const": "x" * 500, "type": "string"} for i in range(201)},
                "properties": {"a": {"$ref": f"#/$defs/{0:0100d}"}},
            },
            False,  # 201 * (100 + 500) characters
        ),
    ],
)
def test_schemas_past_openais_enum_and_size_limits_are_not_made_strict(schema: dict[str, Any], strict: bool) -> None:
    assert (strict_json_schema(schema) is not None) is strict


def test_a_typed_tool_with_more_enum_values_than_strict_mode_takes_is_sent_non_strict(rt: ToolRuntime) -> None:
    from dsh_actors import tool

    Airport = enum.Enum("Airport", {f"A{i:04d}": f"A{i:04d}" for i in range(1200)})  # type: ignore[misc]

    @tool
    def fly(dest: Airport) -> str:  # type: ignore[valid-type]
        """Fly somewhere."""
        return "ok"

    rt.tools.register(fly)
    (chat,) = openai.tools(rt, strict=True)
    (responses,) = openai_responses.tools(rt, strict=True)
    assert chat["function"]["strict"] is False and responses["strict"] is False
    assert chat["function"]["parameters"] == responses["parameters"] == openai.tools(rt)[0]["function"]["parameters"]
