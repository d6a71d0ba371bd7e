"""Full schema mode: any Draft 2020-12 / draft-07 schema, enforced by
jsonschema-rs, compiled once, references within the schema only; and the root ``$schema``
annotation, which the subset accepts too."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsh_actors import (
    JsonSchemaError,
    RegistrationError,
    ToolBatchInput,
    ToolCall,
    ToolDefinition,
    ToolOutput,
    ToolRuntime,
    text,
)
from dsh_actors.definition import validate_definition
from dsh_actors.json import dumps, materialize, thaw
from dsh_actors.schema import (
    CompiledJsonSchema,
    FullJsonSchema,
    assert_supported_json_schema,
    check_full_json_schema,
    compile_full_json_schema,
    compile_json_schema,
)

from .strategies import schemas, values_for

DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"
DRAFT_07 = "http://json-schema.org/draft-07/schema#"

PYDANTIC = {
    "$schema": DRAFT_2020_12,
    "type": "object",
    "title": "addArguments",
    "properties": {
        "x": {"title": "X", "type": "integer"},
        "inner": {"$ref": "#/$defs/Inner"},
        "y": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None, "title": "Y"},
        "when": {"type": "string", "format": "date-time"},
    },
    "required": ["x", "inner"],
    "$defs": {
        "Inner": {
            "type": "object",
            "title": "Inner",
            "properties": {"a": {"type": "integer", "minimum": 0}},
            "required": ["a"],
            "additionalProperties": False,
        }
    },
}


# -- $schema, everywhere ------------------------------------------------------


@pytest.mark.parametrize(
    "uri",
    [DRAFT_2020_12, DRAFT_2020_12 + "#", DRAFT_07, "http://json-schema.org/draft-07/schema"],
)
def test_a_root_schema_naming_2020_12_or_draft_07_is_an_annotation_in_the_subset(uri: str) -> None:
    schema = {"$schema": uri, "type": "object", "properties": {"a": {"type": "string"}}}
    assert_supported_json_schema(schema)
    assert compile_json_schema(schema).validate({"a": 1}) == ['"value.a" must be a string']


def test_the_subset_refuses_another_dialect_and_a_nested_schema_keyword() -> None:
    with pytest.raises(JsonSchemaError) as caught:
        assert_supported_json_schema({"$schema": "http://json-schema.org/draft-04/schema#", "type": "string"})
    assert caught.value.violations[0].startswith('schema["$schema"]: $schema \'http://json-schema.org/draft-04')
    with pytest.raises(JsonSchemaError) as nested:
        assert_supported_json_schema({"type": "array", "items": {"$schema": DRAFT_2020_12}})
    assert list(nested.value.violations) == ['schema.items["$schema"]: keyword "$schema" is not supported']


# -- compiling -------------------------------------------------------------------


def test_a_schema_inside_the_subset_compiles_to_the_fast_validator() -> None:
    assert type(compile_full_json_schema({"type": "string"})) is CompiledJsonSchema
    full = compile_full_json_schema(PYDANTIC, object_root=True)
    assert type(full) is FullJsonSchema
    assert compile_full_json_schema(dict(PYDANTIC), object_root=True) is full  # compiled once
    assert thaw(full.schema) == PYDANTIC


def test_local_refs_resolve_and_violations_name_their_paths() -> None:
    full = compile_full_json_schema(PYDANTIC, object_root=True)
    assert full.validate({"x": 1, "inner": {"a": 0}, "when": "2024-02-29T23:59:60Z"}) == []
    assert full.validate({"x": True, "inner": {"a": -1, "b": 1}, "y": "s", "when": "2023-02-29T00:00:00Z"}) == [
        '"value.x" must be an integer',
        '"value.inner.a" must be >= 0',
        '"value.inner.b" is not a declared property (additionalProperties: false)',
        '"value.y" must be an integer or null',
        '"value.when" must be a valid "date-time"',
    ]
    assert full.validate({}) == ['missing required property "value.x"', 'missing required property "value.inner"']


def test_values_are_judged_by_exact_json_types() -> None:
    full = compile_full_json_schema({"type": "array", "items": {"type": "integer"}, "minItems": 1})
    assert full.is_valid((1, 2.0))  # a tuple is an array, 2.0 an integer
    assert not full.is_valid([True])
    assert full.validate(materialize([1, "2"])) == ['"value[1]" must be an integer']
    obj = compile_full_json_schema({"type": "object", "minProperties": 1})
    assert obj.is_valid(materialize({"a": 1})) and not obj.is_valid({})


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        ({"$ref": "https://example.com/s.json"}, 'remote reference "https://example.com/s.json" is not supported'),
        ({"$ref": "other.json#/x"}, 'schema["$ref"]: remote reference "other.json#/x" is not supported'),
        ({"$ref": "#/$defs/missing"}, 'reference "#/$defs/missing" does not resolve within the schema'),
        ({"$ref": "#nowhere"}, 'schema["$ref"]: reference "#nowhere" does not resolve within the schema'),
        (
            {"$id": "https://example.com/root.json", "$ref": "other.json"},
            'schema["$ref"]: remote reference "other.json" is not supported',
        ),
        ({"type": 3}, "schema.type: 3 is not valid under any of the given schemas"),
        ({"$schema": "https://example.com/meta"}, "is not supported; name Draft 2020-12"),
        # References that lead back to themselves without reaching into the
        # value: the validator would accept every value.
        (
            {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
            'schema["$defs"].a["$ref"]: reference "#/$defs/a" leads back to itself without reaching into the value',
        ),
        ({"allOf": [{"$ref": "#"}]}, 'schema.allOf[0]["$ref"]: reference "#" leads back to itself'),
        (
            {
                "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/a"}]}},
                "$ref": "#/$defs/a",
            },
            "leads back to itself",
        ),
    ],
)
def test_full_mode_refuses_what_it_cannot_enforce(schema: dict[str, Any], problem: str) -> None:
    problems = check_full_json_schema(schema)
    assert any(problem in p for p in problems), problems
    with pytest.raises(JsonSchemaError):
        compile_full_json_schema(schema)


def test_a_recursive_schema_that_reaches_into_the_value_is_kept() -> None:
    linked = {"$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}}}, "$ref": "#/$defs/n"}
    tree = {"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#"}}}}
    # A definition that refers to itself but that nothing uses is never run.
    unused = {"type": "object", "properties": {"a": {"type": "integer"}}, "$defs": {"loop": {"$ref": "#/$defs/loop"}}}
    for schema in (linked, tree, unused):
        assert check_full_json_schema(schema) == []
    assert not compile_full_json_schema(linked).is_valid(materialize({"next": {"next": 3}}))


def test_a_parameters_schema_must_stay_object_rooted_and_lossless() -> None:
    assert check_full_json_schema({"anyOf": [{"type": "object"}]}, object_root=True) == [
        'schema.type: the root must declare "type": "object" (got no type)'
    ]
    assert check_full_json_schema({"type": "number", "minimum": float("nan")})[0].startswith("schema.minimum")


def test_a_draft_07_schema_is_validated_under_draft_07_rules() -> None:
    tuple_items = {"$schema": DRAFT_07, "type": "array", "items": [{"type": "string"}, {"type": "integer"}]}
    full = compile_full_json_schema(tuple_items)
    assert full.is_valid(["a", 1]) and not full.is_valid([1, "a"])
    refs = {"$schema": DRAFT_07, "definitions": {"n": {"type": "integer", "minimum": 1}}, "$ref": "#/definitions/n"}
    assert compile_full_json_schema(refs).validate(0) == ['"value" must be >= 1']


def test_standard_formats_are_asserted_and_unknown_ones_are_annotations() -> None:
    def ok(fmt: str, value: str) -> bool:
        return compile_full_json_schema({"type": "string", "format": fmt}).is_valid(value)

    assert ok("date-time", "2024-01-01T10:00:00.5Z") and not ok("date-time", "2024-01-01 10:00")
    assert ok("uri", "https://example.com/a?b#c") and not ok("uri", "no scheme")
    assert ok("email", "a@b.c") and not ok("email", "nope")
    assert ok("uuid", "12345678-1234-5678-1234-567812345678") and not ok("uuid", "1234")
    assert ok("duration", "P1DT2H") and not ok("duration", "P")
    assert ok("hostname", "a-b.example") and not ok("hostname", "-bad-")
    assert ok("password", "anything")  # not a standard format: no assertion


def test_embedded_resources_anchors_and_relative_refs_resolve() -> None:
    schema = {
        "$id": "https://example.com/root.json",
        "type": "object",
        "properties": {"n": {"$ref": "count.json"}, "s": {"$ref": "#short"}},
        "$defs": {
            "count": {"$id": "count.json", "type": "integer", "minimum": 1},
            "short": {"$anchor": "short", "type": "string", "maxLength": 2},
        },
    }
    full = compile_full_json_schema(schema, object_root=True)
    assert full.is_valid({"n": 1, "s": "ab"})
    assert full.validate({"n": 0, "s": "abc"}) == [
        '"value.n" must be >= 1',
        '"value.s" must be at most 2 characters long',
    ]


def test_a_value_as_deep_as_lossless_json_allows_is_judged_and_a_deeper_one_refused() -> None:
    recursive = compile_full_json_schema({"type": "array", "items": {"$ref": "#"}, "minItems": 0, "$comment": "tree"})
    deep: list[Any] = []
    node = deep
    for _ in range(250):
        child: list[Any] = []
        node.append(child)
        node = child
    assert recursive.is_valid(materialize(deep)) is True
    node.append(1)
    # (a path of more than 20 steps shows its first and last 8)
    shown = "value" + "[0]" * 8 + " … (235 more) … " + "[0]" * 8
    assert recursive.validate(materialize(deep)) == [f'"{shown}" must be an array']
    for _ in range(100_000):  # far deeper than the validator's own recursion could take
        child = []
        node.append(child)
        node = child
    assert recursive.is_valid(deep) is False
    assert recursive.validate(deep)[0].startswith('"value" is not lossless JSON')


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_the_full_validator_agrees_with_the_subset_on_every_subset_schema(data: st.DataObject) -> None:
    schema = data.draw(schemas(), label="schema")
    value = data.draw(values_for(schema), label="value")
    frozen = materialize(schema)
    full = FullJsonSchema(frozen, dumps(frozen).decode(), thaw(frozen), "2020-12")
    expected = compile_json_schema(schema).is_valid(value)
    assert full.is_valid(value) is expected
    assert full.is_valid(materialize(value)) is expected
    assert (full.validate(value) == []) is expected


# -- raw definitions in full mode -------------------------------------------------


def raw(schema_mode: str = "full", **fields: Any) -> ToolDefinition:
    calls: list[Any] = []
    defaults: dict[str, Any] = {
        "name": "add",
        "description": "add",
        "parameters": PYDANTIC,
        "output": ToolOutput(schema={"type": "integer", "minimum": 0}, render=lambda a, v: [text(str(v))]),
        "execute": lambda args, ctx: calls.append(args) or args["x"] + args["inner"]["a"],
        "schema_mode": schema_mode,
    }
    defaults.update(fields)
    return ToolDefinition(**defaults)


def outcome(rt: ToolRuntime, name: str, arguments: Any) -> Any:
    return rt.tools.execute(ToolBatchInput(calls=(ToolCall(id="c", name=name, arguments=arguments),))).results[0].result


def test_the_default_subset_mode_refuses_such_a_schema_and_points_at_full_mode() -> None:
    with pytest.raises(RegistrationError) as caught:
        validate_definition(raw(schema_mode="subset"))
    assert 'keyword "$ref" is not supported' in caught.value.message
    assert caught.value.message.endswith('schema_mode="full" would enforce any Draft 2020-12 schema instead')


def test_a_full_mode_definition_validates_arguments_before_the_body_and_its_output(rt: ToolRuntime) -> None:
    seen: list[Any] = []
    rt.tools.register(raw(execute=lambda args, ctx: seen.append(args) or args["x"] + args["inner"]["a"]))
    bad = outcome(rt, "add", {"x": 1, "inner": {"a": -1}})
    assert bad.error.info.code == "INVALID_ARGS"
    assert bad.error.message == 'invalid arguments: "value.inner.a" must be >= 0'
    assert seen == []  # the body never ran
    negative = outcome(rt, "add", {"x": -5, "inner": {"a": 1}})
    assert negative.error.info.code == "INVALID_TOOL_OUTPUT"
    assert negative.error.message == 'tool "add" returned invalid output: "value" must be >= 0'
    good = outcome(rt, "add", '{"x": 2, "inner": {"a": 3}}')
    assert not good.is_error and good.value == 5 and good.content == (text("5"),)


def test_full_mode_wraps_the_callbacks_once_and_keeps_the_originals(rt: ToolRuntime) -> None:
    def classifier(args: Any) -> bool:
        return True

    async def body(args: Any, ctx: Any) -> int:
        return 1

    definition = raw(execute=body, is_concurrency_safe=classifier, present_call=lambda args: None)
    assert definition.execute.__wrapped__ is body
    assert definition.is_concurrency_safe is not None
    assert definition.is_concurrency_safe.__wrapped__ is classifier
    assert definition.is_concurrency_safe({"x": 1, "inner": {"a": 1}}) is True
    assert definition.is_concurrency_safe({"x": "no"}) is False
    copy = dataclasses.replace(definition, name="add2")
    assert copy.execute.__wrapped__ is body  # not a wrapper of the wrapper
    assert validate_definition(copy).is_async
    rt.tools.register(copy)
    assert outcome(rt, "add2", {"x": 1, "inner": {"a": 1}}).value == 1
    assert outcome(rt, "add2", {"x": 1}).error.info.code == "INVALID_ARGS"


def test_registration_lists_every_problem_of_a_full_mode_definition() -> None:
    with pytest.raises(RegistrationError) as caught:
        validate_definition(
            raw(
                parameters={"type": "object", "properties": {"r": {"$ref": "https://example.com/x"}}},
                output=ToolOutput(schema={"$ref": "#/nowhere"}, render=lambda a, v: []),
            )
        )
    message = caught.value.message
    assert "output.schema: unsupported JSON schema" in message and '"#/nowhere" does not resolve' in message
    assert 'parameters: unsupported JSON schema: schema.properties.r["$ref"]: remote reference' in message
    with pytest.raises(RegistrationError, match='schema_mode must be "subset" or "full"'):
        validate_definition(raw(schema_mode="strict"))


@pytest.mark.parametrize(
    ("schema", "value", "messages"),
    [
        ({"type": "string", "pattern": "^a"}, "b", ['"value" must match the pattern "^a"']),
        ({"type": "integer", "exclusiveMaximum": 3}, 3, ['"value" must be < 3']),
        ({"type": "number", "multipleOf": 0.5}, 0.3, ['"value" must be a multiple of 0.5']),
        ({"type": "array", "minItems": 2}, [1], ['"value" must have at least 2 items']),
        ({"type": "array", "uniqueItems": True}, [[1], [1]], ['"value" must not contain duplicate items']),
        ({"type": "object", "maxProperties": 1}, {"a": 1, "b": 2}, ['"value" must have at most 1 property']),
        ({"not": {"type": "null"}}, None, ['"value" must not match the "not" schema']),
        ({"enum": [{"a": 1}, "x"]}, "y", ['"value" must be one of [{"a":1},"x"]']),
        ({"const": [1, 2]}, [2, 1], ['"value" must be [1,2]']),
        (
            {"type": "object", "propertyNames": {"maxLength": 2}},
            {"abc": 1},
            ['the property name "abc" of "value" must be at most 2 characters long'],
        ),
        (
            {"type": "array", "prefixItems": [{"type": "string"}], "items": False},
            ["a", 1],
            ['"value" must have at most 1 item (no items beyond "prefixItems")'],
        ),
        (
            {"dependentRequired": {"card": ["cvc"]}},
            {"card": "x"},
            ['missing required property "value.cvc" (required by "value.card")'],
        ),
        (
            {"oneOf": [{"type": "integer"}, {"type": "number"}]},
            1,
            ['"value" must match exactly one oneOf branch (matched 2)'],
        ),
        (
            {"anyOf": [{"type": "string", "minLength": 3}, {"type": "null"}]},
            "ab",
            ['"value" must be at least 3 characters long'],
        ),
        ({"properties": {"a": False}}, {"a": 1}, ['"value.a" is not allowed here (false schema)']),
    ],
)
def test_violations_read_like_the_subsets(schema: dict[str, Any], value: Any, messages: list[str]) -> None:
    assert compile_full_json_schema(schema).validate(materialize(value)) == messages


def test_an_ecma_pattern_python_s_re_cannot_read_is_enforced_and_a_bad_one_is_named_at_its_path() -> None:
    # JSON Schema patterns are ECMA-262 regular expressions: `\p{L}` (a
    # letter, with the u flag) is one. The meta-schema check asserted the
    # "regex" format with Python's re, which has no \p, and refused the
    # schema (an MCP server's whole listing with it), although the
    # validator compiles and enforces it.
    letters = compile_full_json_schema(
        {"type": "object", "properties": {"name": {"type": "string", "pattern": r"^\p{L}+$"}}}
    )
    assert letters.validate({"name": "Zoë"}) == []
    assert letters.validate({"name": "R2D2"}) == [r'"value.name" must match the pattern "^\\p{L}+$"']
    with pytest.raises(JsonSchemaError) as refused:
        compile_full_json_schema({"type": "object", "properties": {"name": {"type": "string", "pattern": "(a"}}})
    assert str(refused.value).endswith('schema.properties.name.pattern: "(a" is not a "regex"')
    # (A value whose format is "regex" is still asserted, by the validator.)
    regex = compile_full_json_schema({"type": "object", "properties": {"re": {"type": "string", "format": "regex"}}})
    assert regex.validate({"re": r"^\p{L}+$"}) == []
    assert regex.validate({"re": "(a"}) != []
