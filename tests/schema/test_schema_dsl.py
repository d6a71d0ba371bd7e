"""The author DSL: each rule with its error path, and typical round trips."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from dsh_actors.errors import JsonSchemaError
from dsh_actors.json import materialize
from dsh_actors.schema import (
    assert_object_json_schema,
    assert_supported_json_schema,
    parameter_schema_spec_to_json_schema,
    validate_json_schema_value,
    value_schema_spec_to_json_schema,
)


def value_errors(spec: Any) -> tuple[str, ...]:
    with pytest.raises(JsonSchemaError) as caught:
        value_schema_spec_to_json_schema(spec)
    return caught.value.violations


def parameter_errors(spec: Any) -> tuple[str, ...]:
    with pytest.raises(JsonSchemaError) as caught:
        parameter_schema_spec_to_json_schema(spec)
    return caught.value.violations


# --- round trips -------------------------------------------------------------------


def test_a_typical_parameter_spec_compiles_to_an_open_object_root() -> None:
    spec: dict[str, Any] = {
        "path": {"type": "string", "description": "File to read", "required": True},
        "offset": {"type": "integer"},
        "encoding": {"type": "string", "enum": ["utf-8", "latin-1"]},
        "options": {
            "type": "object",
            "additional_properties": False,
            "properties": {
                "follow": {"type": "boolean", "required": True},
                "depth": {"type": "number"},
            },
        },
        "tags": {"type": "array", "items": {"type": "string"}},
        "extra": {"type": "json", "description": "anything"},
        "target": {"oneOf": [{"type": "string"}, {"type": "null"}], "required": True},
    }
    schema = parameter_schema_spec_to_json_schema(spec)
    assert schema == {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File to read"},
            "offset": {"type": "integer"},
            "encoding": {"type": "string", "enum": ["utf-8", "latin-1"]},
            "options": {
                "type": "object",
                "properties": {"follow": {"type": "boolean"}, "depth": {"type": "number"}},
                "required": ["follow"],
                "additionalProperties": False,
            },
            "tags": {"type": "array", "items": {"type": "string"}},
            "extra": {"description": "anything"},
            "target": {"oneOf": [{"type": "string"}, {"type": "null"}]},
        },
        "required": ["path", "target"],
    }
    assert_object_json_schema(schema)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert validate_json_schema_value(schema, {"path": "a", "target": None, "whatever": 1}) == []
    assert validate_json_schema_value(schema, {"options": {"follow": True, "x": 1}}) == [
        'missing required property "value.path"',
        '"value.options.x" is not a declared property (additionalProperties: false)',
        'missing required property "value.target"',
    ]


def test_an_empty_parameter_spec_compiles_to_an_object_without_required() -> None:
    assert parameter_schema_spec_to_json_schema({}) == {"type": "object", "properties": {}}


def test_a_frozen_parameter_spec_compiles_too() -> None:
    spec = materialize({"q": {"type": "string", "required": True}, "n": {"type": "integer", "enum": [1, 2]}})
    assert parameter_schema_spec_to_json_schema(spec) == {  # type: ignore[arg-type]
        "type": "object",
        "properties": {"q": {"type": "string"}, "n": {"type": "integer", "enum": [1, 2]}},
        "required": ["q"],
    }


@pytest.mark.parametrize(
    ("spec", "schema"),
    [
        ({"type": "string"}, {"type": "string"}),
        ({"type": "null", "title": "Nothing"}, {"type": "null", "title": "Nothing"}),
        ({"type": "json"}, {}),
        ({"type": "json", "description": "d", "title": "t"}, {"description": "d", "title": "t"}),
        ({"type": "array"}, {"type": "array"}),
        (
            {"type": "integer", "const": 3, "default": 3},
            {"type": "integer", "const": 3, "default": 3},
        ),
        (
            {"type": "object", "additionalProperties": True},
            {"type": "object", "additionalProperties": True},
        ),
        (
            {
                "type": "object",
                "additional_properties": False,
                "properties": {"a": {"type": "json", "required": True}},
            },
            {
                "type": "object",
                "properties": {"a": {}},
                "required": ["a"],
                "additionalProperties": False,
            },
        ),
        (
            {
                "oneOf": [{"type": "array", "items": {"type": "number"}}, {"type": "boolean"}],
                "description": "x",
            },
            {
                "oneOf": [{"type": "array", "items": {"type": "number"}}, {"type": "boolean"}],
                "description": "x",
            },
        ),
    ],
)
def test_value_specs_compile_to_raw_schemas_in_the_subset(spec: dict[str, Any], schema: dict[str, Any]) -> None:
    compiled = value_schema_spec_to_json_schema(spec)
    assert compiled == schema
    assert_supported_json_schema(compiled)


def test_the_output_is_detached_from_the_spec() -> None:
    enum = ["a"]
    default = {"k": ["v"]}
    schema = value_schema_spec_to_json_schema({"type": "string", "enum": enum, "default": default})
    assert schema["enum"] is not enum and schema["default"] is not default
    assert schema["default"]["k"] is not default["k"]


def test_a_deep_but_legal_spec_compiles_without_recursion() -> None:
    spec: dict[str, Any] = {"type": "string"}
    for _ in range(255):
        spec = {"type": "array", "items": spec}
    schema = value_schema_spec_to_json_schema(spec)
    assert_supported_json_schema(schema)


# --- rules, each with its path ---------------------------------------------------------


def test_an_object_spec_without_additional_properties_is_rejected() -> None:
    assert value_errors({"type": "object", "properties": {}}) == (
        "spec.additional_properties: an object spec must state additional_properties "
        "(or additionalProperties) explicitly: true or false",
    )


def test_a_nested_object_spec_without_additional_properties_is_rejected_with_its_path() -> None:
    errors = parameter_errors(
        {
            "opts": {
                "type": "object",
                "properties": {"inner": {"type": "object"}},
                "additional_properties": True,
            }
        }
    )
    assert errors == (
        "parameters.opts.properties.inner.additional_properties: an object spec must state "
        "additional_properties (or additionalProperties) explicitly: true or false",
    )


def test_both_spellings_of_additional_properties_are_rejected() -> None:
    assert value_errors({"type": "object", "additional_properties": True, "additionalProperties": True}) == (
        "spec.additionalProperties: give only one of additional_properties / additionalProperties",
    )


def test_additional_properties_that_is_not_a_bool_is_rejected() -> None:
    assert value_errors({"type": "object", "additional_properties": {}}) == (
        "spec.additional_properties: must be true or false (got object)",
    )


def test_required_false_is_rejected() -> None:
    assert parameter_errors({"x": {"type": "string", "required": False}}) == (
        'parameters.x.required: must be true when given; omit "required" for an optional property',
    )


def test_required_false_in_a_nested_object_is_rejected_with_its_path() -> None:
    errors = value_errors(
        {
            "type": "object",
            "additional_properties": False,
            "properties": {"x": {"type": "string", "required": False}},
        }
    )
    assert errors == ('spec.properties.x.required: must be true when given; omit "required" for an optional property',)


def test_required_that_is_not_a_bool_is_rejected() -> None:
    assert parameter_errors({"x": {"type": "string", "required": "yes"}}) == (
        "parameters.x.required: must be true (got string)",
    )


def test_required_on_a_value_root_is_rejected() -> None:
    assert value_errors({"type": "string", "required": True}) == (
        'spec.required: "required" is only allowed on a property spec',
    )


def test_required_on_array_items_is_rejected() -> None:
    assert value_errors({"type": "array", "items": {"type": "string", "required": True}}) == (
        'spec.items.required: "required" is only allowed on a property spec',
    )


def test_an_unknown_type_is_rejected() -> None:
    (error,) = parameter_errors({"n": {"type": "int"}})
    assert error.startswith('parameters.n.type: unknown type "int"')


def test_a_spec_with_neither_type_nor_one_of_is_rejected() -> None:
    (error,) = value_errors({"description": "x"})
    assert error.startswith('spec: a spec needs a "type"')


def test_an_unknown_key_is_rejected() -> None:
    assert value_errors({"type": "string", "pattern": "x"}) == ('spec.pattern: unknown key "pattern"',)


def test_a_key_of_another_type_is_rejected() -> None:
    assert value_errors({"type": "string", "items": {"type": "string"}}) == (
        'spec.items: key "items" does not apply to type "string"',
    )


def test_enum_on_json_is_rejected() -> None:
    assert value_errors({"type": "json", "enum": [1]}) == ('spec.enum: key "enum" does not apply to type "json"',)


def test_an_enum_value_of_the_wrong_type_is_rejected_with_its_path() -> None:
    assert value_errors({"type": "array", "items": {"type": "integer", "enum": [1, True]}}) == (
        'spec.items.enum[1]: must be of the node\'s type "integer" (got boolean)',
    )


def test_a_const_outside_the_enum_is_rejected() -> None:
    assert parameter_errors({"m": {"type": "string", "enum": ["a"], "const": "b"}}) == (
        'parameters.m.const: "b" is not one of the "enum" values',
    )


def test_one_of_with_a_single_branch_is_rejected() -> None:
    assert value_errors({"oneOf": [{"type": "string"}]}) == ("spec.oneOf: must list at least two specs (got 1)",)


def test_type_beside_one_of_is_rejected() -> None:
    assert value_errors({"type": "string", "oneOf": [{"type": "string"}, {"type": "null"}]}) == (
        'spec.oneOf: "oneOf" cannot be combined with "type"',
    )


def test_a_bad_one_of_branch_is_rejected_with_its_index() -> None:
    (error,) = value_errors({"oneOf": [{"type": "string"}, {"type": "object"}]})
    assert error.startswith("spec.oneOf[1].additional_properties: an object spec must state")


def test_a_spec_that_is_not_a_mapping_is_rejected() -> None:
    assert parameter_errors({"x": "string"}) == ("parameters.x: a schema spec must be an object (got string)",)
    assert parameter_errors(["x"]) == ("parameters: must be an object mapping property names to specs (got array)",)


def test_a_bad_annotation_is_rejected() -> None:
    assert value_errors({"type": "number", "description": 1, "default": float("nan")}) == (
        "spec.description: must be a string (got integer)",
        "spec.default: float nan is not lossless JSON",
    )


def test_an_odd_parameter_name_gets_a_quoted_path() -> None:
    assert parameter_errors({"odd name": {"type": "strng"}})[0].startswith('parameters["odd name"].type: unknown type')


def test_every_problem_is_listed() -> None:
    errors = parameter_errors(
        {
            "a": {"type": "string", "required": False},
            "b": {"type": "object"},
            "c": {"type": "array", "items": {"type": "float"}},
        }
    )
    assert len(errors) == 3
    assert [e.split(":")[0] for e in errors] == [
        "parameters.a.required",
        "parameters.b.additional_properties",
        "parameters.c.items.type",
    ]


def test_a_10000_deep_spec_is_rejected_without_a_recursion_error() -> None:
    spec: dict[str, Any] = {"type": "string"}
    for _ in range(10_000):
        spec = {"type": "array", "items": spec}
    (error,) = value_errors(spec)
    assert error.endswith("spec is nested deeper than 256 levels")
