"""Value validation: pinned messages, JSON-type edge cases, compiled cache."""

from __future__ import annotations

import copy
import enum
from typing import Any

import pytest

from dsh_actors.errors import ErrorCode, JsonSchemaError, ToolArgsError
from dsh_actors.json import FrozenDict, materialize
from dsh_actors.schema import (
    CompiledJsonSchema,
    _compile,
    compile_json_schema,
    validate_args,
    validate_json_schema_value,
)

SERVER = {
    "type": "object",
    "properties": {
        "host": {"type": "string"},
        "port": {"type": "integer"},
        "items": {"type": "array", "items": {"type": "integer"}},
        "mode": {"type": "string", "enum": ["a", "b"]},
        "odd key": {"type": "null"},
    },
    "required": ["host"],
    "additionalProperties": False,
}


# --- the pinned messages, verbatim --------------------------------------------


def test_a_wrong_array_item_names_its_path() -> None:
    assert validate_json_schema_value(SERVER, {"host": "h", "items": [1, 2, "3"]}) == [
        '"value.items[2]" must be an integer'
    ]


def test_a_missing_required_property_is_reported() -> None:
    assert validate_json_schema_value(SERVER, {}) == ['missing required property "value.host"']


def test_an_undeclared_property_of_a_closed_object_is_reported() -> None:
    assert validate_json_schema_value(SERVER, {"host": "h", "x": 1}) == [
        '"value.x" is not a declared property (additionalProperties: false)'
    ]


def test_a_value_matching_two_one_of_branches_is_reported() -> None:
    schema = {"oneOf": [{"type": "integer"}, {"type": "number"}]}
    assert validate_json_schema_value(schema, 1) == ['"value" must match exactly one oneOf branch (matched 2)']


def test_a_value_matching_no_one_of_branch_is_reported() -> None:
    schema = {"oneOf": [{"type": "integer"}, {"type": "null"}]}
    assert validate_json_schema_value(schema, "x") == ['"value" must match exactly one oneOf branch (matched 0)']


def test_a_value_outside_the_enum_is_reported_with_compact_json() -> None:
    assert validate_json_schema_value({"type": "string", "enum": ["a", "b"]}, "c") == [
        '"value" must be one of ["a","b"]'
    ]


def test_a_value_other_than_the_const_is_reported() -> None:
    assert validate_json_schema_value({"type": "string", "const": "x"}, "y") == ['"value" must be "x"']


@pytest.mark.parametrize(
    ("json_type", "value", "message"),
    [
        ("string", 1, '"value" must be a string'),
        ("integer", "1", '"value" must be an integer'),
        ("number", None, '"value" must be a number'),
        ("boolean", 0, '"value" must be a boolean'),
        ("null", False, '"value" must be null'),
        ("object", [], '"value" must be an object'),
        ("array", {}, '"value" must be an array'),
    ],
)
def test_a_wrong_type_gets_its_type_message(json_type: str, value: Any, message: str) -> None:
    assert validate_json_schema_value({"type": json_type}, value) == [message]


def test_a_wrong_type_gets_only_the_type_message_not_the_enum_one() -> None:
    assert validate_json_schema_value({"type": "string", "enum": ["a"]}, 3) == ['"value" must be a string']


def test_every_violation_of_an_object_is_listed_in_order() -> None:
    value = {"port": True, "items": ["x"], "mode": "c", "odd key": 1, "extra": 2, "host2": 3}
    assert validate_json_schema_value(SERVER, value) == [
        'missing required property "value.host"',
        '"value.port" must be an integer',
        '"value.items[0]" must be an integer',
        '"value.mode" must be one of ["a","b"]',
        '"value["odd key"]" must be null',
        '"value.extra" is not a declared property (additionalProperties: false)',
        '"value.host2" is not a declared property (additionalProperties: false)',
    ]


def test_the_root_path_can_be_named() -> None:
    assert validate_json_schema_value({"type": "string"}, 1, path="result") == ['"result" must be a string']


# --- JSON types ---------------------------------------------------------------


def test_true_is_not_an_integer() -> None:
    assert validate_json_schema_value({"type": "integer"}, True) == ['"value" must be an integer']


def test_true_is_not_a_number() -> None:
    assert validate_json_schema_value({"type": "number"}, True) == ['"value" must be a number']


def test_an_integral_float_is_an_integer() -> None:
    assert validate_json_schema_value({"type": "integer"}, 1.0) == []


def test_a_fractional_float_is_not_an_integer() -> None:
    assert validate_json_schema_value({"type": "integer"}, 1.5) == ['"value" must be an integer']


def test_an_int_is_a_number() -> None:
    assert validate_json_schema_value({"type": "number"}, 2**64 - 1) == []


def test_one_is_not_true_for_a_boolean_const() -> None:
    assert validate_json_schema_value({"type": "boolean", "const": True}, 1) == ['"value" must be a boolean']


def test_an_integral_float_equals_an_integer_enum_member() -> None:
    assert validate_json_schema_value({"type": "integer", "enum": [1, 2]}, 2.0) == []
    assert validate_json_schema_value({"type": "number", "const": 1.0}, 1) == []


def test_frozen_values_and_tuples_are_objects_and_arrays() -> None:
    value = materialize({"host": "h", "items": [1, 2]})
    assert type(value) is FrozenDict and type(value["items"]) is tuple
    assert validate_json_schema_value(SERVER, value) == []
    assert validate_json_schema_value({"type": "array", "items": {"type": "string"}}, ("a", 1)) == [
        '"value[1]" must be a string'
    ]


def test_a_frozen_schema_validates_like_the_plain_one() -> None:
    assert validate_json_schema_value(materialize(SERVER), {"host": 1}) == ['"value.host" must be a string']


@pytest.mark.parametrize(
    ("key", "path"),
    [
        ("odd key", 'value["odd key"]'),
        ("", 'value[""]'),
        ("$ref", 'value["$ref"]'),
        ('quo"te', 'value["quo\\"te"]'),
        ("new\nline", 'value["new\\nline"]'),
        ("0", 'value["0"]'),
        ("名前", "value.名前"),
    ],
)
def test_hostile_but_lossless_keys_get_unambiguous_paths(key: str, path: str) -> None:
    closed = {"type": "object", "additionalProperties": False}
    assert validate_json_schema_value(closed, {key: 1}) == [
        f'"{path}" is not a declared property (additionalProperties: false)'
    ]
    declared = {"type": "object", "properties": {key: {"type": "string"}}, "required": [key]}
    assert validate_json_schema_value(declared, {key: 1}) == [f'"{path}" must be a string']
    assert validate_json_schema_value(declared, {}) == [f'missing required property "{path}"']


def test_an_open_object_accepts_undeclared_properties() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert validate_json_schema_value(schema, {"a": "x", "b": [1]}) == []


def test_an_empty_schema_accepts_any_value() -> None:
    values: list[Any] = [None, True, 1, 1.5, "x", [], {}, {"a": [1, {"b": None}]}]
    for value in values:
        assert validate_json_schema_value({}, value) == []


def test_defaults_are_never_filled_in() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string", "default": "x"}}}
    value: dict[str, Any] = {}
    assert validate_json_schema_value(schema, value) == []
    assert value == {}


# --- deep values ---------------------------------------------------------------


def deep_list(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


def test_a_100000_deep_value_against_an_empty_schema_is_accepted_by_the_compiled_form_without_walking() -> None:
    assert compile_json_schema({}).is_valid(deep_list(100_000))
    assert compile_json_schema({}).validate(deep_list(100_000)) == []


def test_the_compiled_form_checks_a_100000_deep_value_only_as_deep_as_the_schema() -> None:
    assert compile_json_schema({"type": "array"}).validate(deep_list(100_000)) == []
    schema = {
        "type": "array",
        "items": {"type": "array", "items": {"type": "array", "items": {"type": "string"}}},
    }
    assert compile_json_schema(schema).validate(deep_list(100_000)) == ['"value[0][0][0]" must be a string']


def test_the_one_call_form_reports_a_value_nested_deeper_than_max_json_depth_whatever_the_schema() -> None:
    for schema in ({}, {"type": "array"}):
        (violation,) = validate_json_schema_value(schema, deep_list(100_000))
        # (a path of more than 20 steps shows its first and last 8)
        assert violation == '"value' + "[0]" * 8 + " … (240 more) … " + "[0]" * 8 + '": nesting deeper than 256'


def test_a_value_as_deep_as_a_256_level_schema_validates() -> None:
    schema: dict[str, Any] = {"type": "null"}
    for _ in range(255):
        schema = {"type": "array", "items": schema}
    value: Any = None
    for _ in range(255):
        value = [value]
    compiled = compile_json_schema(schema)
    assert compiled.is_valid(value)
    bad: Any = 1
    for _ in range(255):
        bad = [bad]
    (violation,) = compiled.validate(bad)
    assert violation == '"value' + "[0]" * 8 + " … (239 more) … " + "[0]" * 8 + '" must be null'


# --- the one-call forms are total over any Python value ------------------------


class Colour(str, enum.Enum):
    RED = "red"


def _cyclic_list() -> list[Any]:
    value: list[Any] = [1]
    value.append(value)
    return value


def _cyclic_dict() -> dict[str, Any]:
    value: dict[str, Any] = {"a": 1}
    value["self"] = {"again": value}
    return value


@pytest.mark.parametrize(
    ("schema", "value", "violation"),
    [
        ({"type": "number"}, float("nan"), '"value": float nan is not lossless JSON'),
        ({"type": "number"}, float("inf"), '"value": float inf is not lossless JSON'),
        ({"type": "number"}, -0.0, '"value": -0.0 is not lossless JSON'),
        ({"type": "integer"}, 2**64, '"value": int 2**64 is out of range [-2**63, 2**64-1]'),
        ({}, Colour.RED, f'"value": str subclass {Colour.__module__}.Colour is not lossless JSON (exact types only)'),
        (
            {"type": "string", "enum": ["red"]},
            Colour.RED,
            f'"value": str subclass {Colour.__module__}.Colour is not lossless JSON (exact types only)',
        ),
        ({}, _cyclic_list(), '"value[1]": cycle: value[1] refers back to value'),
        ({}, _cyclic_dict(), '"value.self.again": cycle: value.self.again refers back to value'),
        ({}, {1: "a"}, '"value": dict key 1 (int) is not a string'),
        ({"type": "object"}, {"ok": {2.5: 1}}, '"value.ok": dict key 2.5 (float) is not a string'),
        ({"type": "array"}, [1, {"x": [float("nan")]}], '"value[1].x[0]": float nan is not lossless JSON'),
        ({}, {"a": {1, 2}}, '"value.a": set is not lossless JSON'),
        (
            {"type": "string"},
            "a\ud800",
            '"value": str with a lone surrogate (U+D800 at index 1) is not lossless JSON '
            "(it cannot be encoded as UTF-8)",
        ),
    ],
)
def test_a_value_that_is_not_lossless_json_is_one_violation_naming_its_path(
    schema: Any, value: Any, violation: str
) -> None:
    (found,) = validate_json_schema_value(schema, value)
    assert found == violation
    with pytest.raises(ToolArgsError) as caught:
        validate_args(schema, value)
    assert caught.value.violations == (found,)


def test_three_hundred_nested_lists_are_a_violation_not_a_recursion_error() -> None:
    (violation,) = validate_json_schema_value({}, deep_list(300))
    assert violation.endswith('": nesting deeper than 256')


def test_the_path_of_a_lossless_violation_starts_at_the_root_name_given() -> None:
    assert validate_json_schema_value({}, [float("nan")], path="output") == [
        '"output[0]": float nan is not lossless JSON'
    ]


def test_an_unsupported_schema_still_raises_for_a_value_that_is_not_lossless() -> None:
    with pytest.raises(JsonSchemaError):
        validate_json_schema_value({"type": "string", "format": "uri"}, float("nan"))


def test_a_frozen_value_is_not_walked_again_by_the_one_call_form(monkeypatch: pytest.MonkeyPatch) -> None:
    frozen = materialize({"a": [1, 2], "b": {"c": None}})

    def walked(*args: Any) -> None:
        raise AssertionError("a FrozenDict is lossless by construction")

    monkeypatch.setattr(_compile, "check_lossless", walked)
    assert validate_json_schema_value({"type": "object"}, frozen) == []


# --- compile, cache, errors -------------------------------------------------------


def test_an_unsupported_schema_raises_when_validating() -> None:
    with pytest.raises(JsonSchemaError) as caught:
        validate_json_schema_value({"type": "string", "format": "uri"}, "x")
    assert caught.value.violations == ('schema.format: keyword "format" is not supported',)


def test_a_schema_that_is_not_lossless_raises_a_schema_error() -> None:
    with pytest.raises(JsonSchemaError) as caught:
        compile_json_schema({"type": "number", "default": float("inf")})
    assert caught.value.violations == ("schema.default: float inf is not lossless JSON",)


def test_the_same_schema_object_compiles_once() -> None:
    schema = {"type": "object", "properties": {"unique_to_this_test": {"type": "string"}}}
    before = _compile._compilations
    first = compile_json_schema(schema)
    assert compile_json_schema(schema) is first
    assert _compile._compilations == before + 1


def test_an_equal_schema_reuses_the_compiled_validator() -> None:
    schema = {"type": "array", "items": {"type": "string", "const": "reuse-by-content"}}
    first = compile_json_schema(schema)
    assert compile_json_schema(copy.deepcopy(schema)) is first
    assert compile_json_schema(materialize(schema)) is first


def test_a_frozen_schema_is_found_by_identity() -> None:
    schema = materialize({"type": "string", "const": "by-identity"})
    first = compile_json_schema(schema)
    before = _compile._compilations
    assert compile_json_schema(schema) is first
    assert _compile._compilations == before


def test_true_and_one_never_share_a_compiled_validator() -> None:
    with pytest.raises(JsonSchemaError):
        compile_json_schema({"type": "integer", "const": True})
    assert compile_json_schema({"type": "integer", "const": 1}).is_valid(1)


def test_mutating_a_schema_after_compiling_changes_nothing_already_compiled() -> None:
    schema: dict[str, Any] = {"type": "string", "enum": ["mutation-a"]}
    compiled = compile_json_schema(schema)
    schema["enum"].append("mutation-b")
    assert not compiled.is_valid("mutation-b")
    assert compile_json_schema(schema).is_valid("mutation-b")


def test_a_compiled_schema_passes_through_compile() -> None:
    compiled = compile_json_schema({"type": "boolean"})
    assert compile_json_schema(compiled) is compiled
    assert validate_json_schema_value(compiled, "x") == ['"value" must be a boolean']


def test_a_compiled_schema_keeps_a_frozen_copy_and_compares_by_content() -> None:
    compiled = compile_json_schema({"type": "object", "required": []})
    assert type(compiled.schema) is FrozenDict
    assert compiled == compile_json_schema({"type": "object", "required": []})
    assert hash(compiled) == hash(compile_json_schema({"type": "object", "required": []}))
    assert compiled != compile_json_schema({"type": "object"})
    assert repr(compiled) == 'CompiledJsonSchema({"type":"object","required":[]})'


def test_is_valid_agrees_with_validate() -> None:
    compiled = compile_json_schema(SERVER)
    assert compiled.is_valid({"host": "h"}) and compiled.validate({"host": "h"}) == []
    assert not compiled.is_valid({"host": 1})


# --- validate_args ---------------------------------------------------------------------


def test_validate_args_accepts_valid_arguments() -> None:
    validate_args({"type": "object", "properties": {"x": {"type": "string"}}}, {"x": "a"})


def test_validate_args_raises_tool_args_error_with_every_violation() -> None:
    schema = {"type": "object", "properties": {"x": {"type": "string"}, "y": {}}, "required": ["y"]}
    with pytest.raises(ToolArgsError) as caught:
        validate_args(compile_json_schema(schema), {"x": 1})
    err = caught.value
    assert err.code is ErrorCode.INVALID_ARGS
    assert str(err) == 'invalid arguments: "value.x" must be a string; missing required property "value.y"'
    assert isinstance(compile_json_schema(schema), CompiledJsonSchema)


def test_validate_args_raises_schema_error_for_an_unsupported_schema() -> None:
    with pytest.raises(JsonSchemaError):
        validate_args({"type": "object", "minProperties": 1}, {})


def test_a_nan_default_never_hits_the_cached_validator_of_its_null_twin() -> None:
    compile_json_schema({"type": "number", "enum": [7], "default": None})
    with pytest.raises(JsonSchemaError) as caught:
        compile_json_schema({"type": "number", "enum": [7], "default": float("nan")})
    assert caught.value.violations == ("schema.default: float nan is not lossless JSON",)


def test_a_str_subclass_never_hits_the_cached_validator_of_its_plain_twin() -> None:
    class Name(str):
        pass

    compile_json_schema({"type": "string", "title": "twin"})
    with pytest.raises(JsonSchemaError):
        compile_json_schema({"type": Name("string"), "title": "twin"})
    with pytest.raises(JsonSchemaError):
        compile_json_schema({"type": "string", "title": Name("twin")})
