"""The ``null`` a strict model sends for an
optional parameter (which nulls are dropped, and that what a strict model
may send validates once they are), full mode's messages, and the JSON text
problem shown to a model."""

from __future__ import annotations

import random
from typing import Any

import jsonschema
import pytest

from dsh_actors import ToolBatchInput, ToolCall, ToolOutput, ToolRuntime, define_tool, text
from dsh_actors.json import materialize, text_problem
from dsh_actors.schema import absent_null_plan, compile_full_json_schema, strict_json_schema


def settled(schema: Any, value: Any) -> Any:
    """``value`` as the pipeline hands it on: its absent nulls dropped."""
    plan = absent_null_plan(materialize(schema))
    frozen = materialize(value)
    return frozen if plan is None else plan.apply(frozen)


def strict_output_validates(schema: dict[str, Any], value: Any) -> list[str]:
    """``value`` is what a strict model may send for ``schema``; the
    violations of the original schema once its nulls are dropped."""
    strict = strict_json_schema(schema)
    assert strict is not None
    assert jsonschema.Draft202012Validator(strict).is_valid(value)
    return compile_full_json_schema(schema, object_root=True).validate(settled(schema, value))


# -- a null the parameter's own schema accepts is kept -------------------------


@pytest.mark.parametrize(
    "sub",
    [{"description": "any value"}, {"title": "X", "default": 5}, {"minLength": 2}, {"$comment": "free"}],
)
def test_a_null_for_an_optional_parameter_that_accepts_any_value_is_kept(sub: dict[str, Any]) -> None:
    schema = {"type": "object", "properties": {"x": sub}}
    assert settled(schema, {"x": None}) == {"x": None}


def test_a_null_for_an_optional_json_parameter_reaches_the_tool() -> None:
    seen: list[Any] = []

    def execute(args: Any, ctx: Any) -> str:
        seen.append(args)
        return "ok"

    with ToolRuntime() as rt:
        rt.tools.register(
            define_tool(
                name="put",
                description="store any value",
                parameters={"key": {"type": "string", "required": True}, "value": {"type": "json", "description": "v"}},
                execute=execute,
                output=ToolOutput(schema={"type": "string"}, render=lambda a, v: [text(v)]),
            )
        )
        batch = rt.tools.execute(
            ToolBatchInput(calls=(ToolCall(id="c", name="put", arguments='{"key": "k", "value": null}'),))
        )
    assert not batch.results[0].result.is_error
    assert seen == [{"key": "k", "value": None}]


def test_a_oneof_with_two_branches_accepting_null_does_not_accept_null() -> None:
    schema = {"type": "object", "properties": {"x": {"oneOf": [{"type": "null"}, {"description": "any"}]}}}
    assert settled(schema, {"x": None}) == {}


# -- what a strict model may send validates once its nulls are dropped ----------


def test_a_null_deep_in_a_recursive_schema_is_dropped() -> None:
    tree = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#"}}},
        "required": ["name"],
    }
    value = {"name": "a", "children": [{"name": "b", "children": [{"name": "c", "children": None}]}]}
    assert strict_output_validates(tree, value) == []
    assert settled(tree, value) == {"name": "a", "children": ({"name": "b", "children": ({"name": "c"},)},)}


def test_a_null_in_a_recursive_definition_is_dropped() -> None:
    linked = {
        "type": "object",
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {"v": {"type": "integer"}, "next": {"$ref": "#/$defs/Node"}},
                "additionalProperties": False,
            }
        },
        "properties": {"head": {"$ref": "#/$defs/Node"}},
        "required": ["head"],
    }
    assert strict_output_validates(linked, {"head": {"v": 1, "next": {"v": None, "next": None}}}) == []


def test_a_union_of_objects_with_a_null_to_drop_is_not_made_strict_and_its_nulls_are_kept() -> None:
    def obj(required: tuple[str, ...] = (), **properties: Any) -> dict[str, Any]:
        return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}

    # pydantic's A | B: A(k: str = "d", m: str = "d"), B(k: str | None, m: int, z: str = "").
    a = obj(k={"type": "string"}, m={"type": "string"})
    b = obj(
        ("k", "m"), k={"anyOf": [{"type": "string"}, {"type": "null"}]}, m={"type": "integer"}, z={"type": "string"}
    )
    union = {"type": "object", "properties": {"x": {"anyOf": [a, b]}}, "required": ["x"]}
    rows = {
        "type": "object",
        "properties": {"rows": {"anyOf": [{"type": "array", "items": a}, {"type": "array", "items": b}]}},
    }
    # Which branch {"k": null, "m": 5} is, its keys cannot tell: B's (valid), or A's with k absent.
    assert strict_json_schema(union) is None and strict_json_schema(rows) is None
    assert settled(union, {"x": {"k": None, "m": 5}}) == {"x": {"k": None, "m": 5}}
    assert compile_full_json_schema(union, object_root=True).validate(settled(union, {"x": {"k": None, "m": 5}})) == []
    # One object branch (an Optional's): its nulls are dropped, and it is strict.
    optional = {"type": "object", "properties": {"x": {"anyOf": [a, {"type": "null"}]}}, "required": ["x"]}
    assert strict_output_validates(optional, {"x": {"k": None, "m": "v"}}) == []
    assert settled(optional, {"x": {"k": None, "m": "v"}}) == {"x": {"m": "v"}}


def test_a_union_of_objects_with_the_same_keys_and_nulls_to_drop_is_not_made_strict() -> None:
    schema = {
        "type": "object",
        "properties": {
            "x": {
                "anyOf": [
                    {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False},
                    {"type": "object", "properties": {"a": {"type": ["string", "null"]}}, "required": ["a"]},
                ]
            }
        },
    }
    # {"x": {"a": null}} is the second branch's; dropping "a" would break it.
    assert strict_json_schema(schema) is None


def _random_schema(r: random.Random, depth: int, defs: dict[str, Any]) -> dict[str, Any]:
    c = r.random()
    if depth > 3 or c < 0.35:
        return r.choice(
            [
                {"type": "string"},
                {"type": "integer"},
                {"type": "null"},
                {"type": "string", "enum": ["a", "b"]},
                {"type": ["string", "null"]},
            ]
        )
    if c < 0.6:
        props = {f"p{i}": _random_schema(r, depth + 1, defs) for i in range(r.randint(0, 3))}
        node: dict[str, Any] = {
            "type": "object",
            "properties": props,
            "required": [k for k in props if r.random() < 0.4],
        }
        if r.random() < 0.5:
            node["additionalProperties"] = False
        return node
    if c < 0.72:
        return {"type": "array", "items": _random_schema(r, depth + 1, defs)}
    if c < 0.85:
        return {"anyOf": [_random_schema(r, depth + 1, defs) for _ in range(r.randint(1, 3))]}
    name = f"D{len(defs)}"
    defs[name] = None
    defs[name] = _random_schema(r, depth + 1, defs)
    return {"$ref": "#/$defs/" + name}


def _random_value(r: random.Random, root: dict[str, Any], node: dict[str, Any], depth: int) -> Any:
    while "$ref" in node:
        node = root if node["$ref"] == "#" else root["$defs"][node["$ref"].rsplit("/", 1)[1]]
    if "anyOf" in node:
        return _random_value(r, root, r.choice(node["anyOf"]), depth)
    if "enum" in node:
        return r.choice(node["enum"])
    kind = node["type"]
    if type(kind) is list:
        kind = "null" if depth > 8 and "null" in kind else r.choice(kind)
    if kind == "array":
        return [] if depth > 8 else [_random_value(r, root, node["items"], depth + 1) for _ in range(r.randint(0, 2))]
    if kind == "object":
        return {k: _random_value(r, root, s, depth + 1) for k, s in node["properties"].items()}
    return {"string": "x", "integer": 1, "null": None}[kind]


def test_what_a_strict_model_may_send_validates_once_its_nulls_are_dropped_on_random_schemas() -> None:
    checked = 0
    for seed in range(400):
        r = random.Random(seed)
        defs: dict[str, Any] = {}
        props = {f"a{i}": _random_schema(r, 1, defs) for i in range(r.randint(1, 4))}
        if r.random() < 0.2:
            props["self"] = {"type": "array", "items": {"$ref": "#"}}
        schema: dict[str, Any] = {
            "type": "object",
            "properties": props,
            "required": [k for k in props if r.random() < 0.5],
        }
        if defs:
            schema["$defs"] = defs
        strict = strict_json_schema(schema)
        if strict is None:
            continue
        strict_validator = jsonschema.Draft202012Validator(strict)
        validator = compile_full_json_schema(schema, object_root=True)
        for _ in range(10):
            value = _random_value(r, strict, strict, 0)
            if strict_validator.is_valid(value):
                checked += 1
                assert validator.validate(settled(schema, value)) == [], (seed, schema, value)
    assert checked > 1000


# -- full mode's messages ------------------------------------------------------


@pytest.mark.parametrize(
    ("names", "message"),
    [
        ({"enum": ["a", "c"]}, 'the property name "b" of "value" must be one of ["a","c"]'),
        ({"const": "a"}, 'the property name "b" of "value" must be "a"'),
        (
            {"anyOf": [{"const": "a"}, {"maxLength": 0}]},
            'the property name "b" of "value" is not allowed by "propertyNames"',
        ),
        (False, '"value" must have no properties (propertyNames: false)'),
    ],
)
def test_a_property_name_refused_by_property_names_is_named(names: Any, message: str) -> None:
    compiled = compile_full_json_schema({"type": "object", "propertyNames": names})
    assert compiled.validate({"b": 1}) == [message]


def test_min_and_max_contains_say_how_many_items_must_match() -> None:
    compiled = compile_full_json_schema(
        {"type": "array", "contains": {"type": "string"}, "minContains": 2, "maxContains": 3}
    )
    assert compiled.validate(["a"]) == ['"value" must contain at least 2 items matching the "contains" schema']
    assert compiled.validate(["a", "b", "c", "d"]) == [
        '"value" must contain at most 3 items matching the "contains" schema'
    ]
    assert compiled.validate([1]) == ['"value" must contain at least 2 items matching the "contains" schema']


def test_a_value_that_is_not_lossless_is_named_from_the_path_given() -> None:
    compiled = compile_full_json_schema({"type": "object", "minProperties": 1})
    assert compiled.validate({"a": float("nan")}, "args") == [
        '"args" is not lossless JSON: args.a: float nan is not lossless JSON'
    ]


# -- JSON text ---------------------------------------------------------------


def test_the_text_problem_of_a_byte_order_mark_keeps_its_capitals() -> None:
    assert text_problem('\ufeff{"a": 1}') == "UTF-8 byte order mark (BOM) is not supported at line 1 column 1"
    assert text_problem('{"a": 1') == "unexpected end of data at line 1 column 8"
