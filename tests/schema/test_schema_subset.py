"""The enforced raw subset: one test per rejection rule, each pinning the path."""

from __future__ import annotations

from typing import Any

import pytest

from dsh_actors.errors import ErrorCode, JsonSchemaError
from dsh_actors.json import materialize
from dsh_actors.schema import assert_object_json_schema, assert_supported_json_schema


def violations_of(schema: Any) -> tuple[str, ...]:
    with pytest.raises(JsonSchemaError) as caught:
        assert_supported_json_schema(schema)
    return caught.value.violations


def nested_items(depth: int) -> dict[str, Any]:
    root: dict[str, Any] = {"type": "array"}
    node = root
    for _ in range(depth - 1):
        child: dict[str, Any] = {"type": "array"}
        node["items"] = child
        node = child
    return root


# --- accepted --------------------------------------------------------------


@pytest.mark.parametrize(
    "schema",
    [
        {},
        {
            "description": "anything",
            "title": "Any",
            "default": [1, {"a": None}],
            "examples": [1, "x"],
        },
        {
            "type": "object",
            "properties": {"a": {"type": "string"}},
            "required": ["a"],
            "additionalProperties": False,
        },
        {"type": "object", "required": []},
        {"type": "array", "items": {"type": "integer", "enum": [1, 2.0]}},
        {"type": "string", "enum": ["a", "b"], "const": "a"},
        {"type": "integer", "const": 3.0},
        {"type": "number", "enum": [1, 2.5]},
        {"type": "boolean", "enum": [True, False]},
        {"type": "null", "const": None},
        {"oneOf": [{"type": "string"}, {"type": "null"}]},
        {"type": "string", "default": 5},
    ],
)
def test_a_schema_inside_the_subset_is_accepted(schema: dict[str, Any]) -> None:
    assert_supported_json_schema(schema)


def test_annotations_beside_one_of_are_accepted() -> None:
    assert_supported_json_schema(
        {
            "description": "a or b",
            "title": "Choice",
            "default": "a",
            "oneOf": [{"const": "a", "type": "string"}, {"type": "null"}],
        }
    )


def test_frozen_schemas_with_tuples_are_accepted() -> None:
    schema = materialize(
        {
            "type": "object",
            "properties": {"a": {"type": "string", "enum": ["x"]}},
            "required": ["a"],
        }
    )
    assert_supported_json_schema(schema)


def test_a_property_named_like_a_keyword_is_just_a_property() -> None:
    assert_supported_json_schema({"type": "object", "properties": {"$ref": {}, "type": {}, "anyOf": {"type": "null"}}})


def test_the_default_is_never_checked_against_the_node_type() -> None:
    assert_supported_json_schema({"type": "integer", "default": "not an integer"})


# --- rejected, one rule each ----------------------------------------------


def test_an_unknown_keyword_is_rejected_with_its_path() -> None:
    assert violations_of({"type": "object", "properties": {"a": {"type": "string", "pattern": "x"}}}) == (
        'schema.properties.a.pattern: keyword "pattern" is not supported',
    )


@pytest.mark.parametrize("keyword", ["anyOf", "allOf", "not", "minimum", "format", "prefixItems", "$defs"])
def test_each_unsupported_keyword_is_rejected(keyword: str) -> None:
    (violation,) = violations_of({"type": "string", keyword: 1})
    assert violation.endswith(f'keyword "{keyword}" is not supported')


def test_a_dollar_ref_is_rejected_with_a_quoted_path() -> None:
    assert violations_of({"$ref": "#/x"}) == ('schema["$ref"]: keyword "$ref" is not supported',)


def test_a_type_array_is_rejected() -> None:
    assert violations_of({"type": ["string", "null"]}) == ("schema.type: type arrays are not supported; use oneOf",)


def test_an_unknown_type_name_is_rejected() -> None:
    (violation,) = violations_of({"type": "array", "items": {"type": "float"}})
    assert violation.startswith('schema.items.type: unknown type "float"')


def test_a_type_that_is_not_a_string_is_rejected() -> None:
    (violation,) = violations_of({"type": 3})
    assert violation.startswith("schema.type: must be one of") and violation.endswith("(got integer)")


def test_one_of_with_one_branch_is_rejected() -> None:
    assert violations_of({"oneOf": [{}]}) == ("schema.oneOf: must list at least two schemas (got 1)",)


def test_one_of_that_is_not_a_list_is_rejected() -> None:
    assert violations_of({"oneOf": {"type": "string"}}) == (
        "schema.oneOf: must be a list of at least two schemas (got object)",
    )


def test_a_bad_one_of_branch_is_reported_at_its_index() -> None:
    assert violations_of({"oneOf": [{"type": "string"}, {"minimum": 1}]}) == (
        'schema.oneOf[1].minimum: keyword "minimum" is not supported',
    )


def test_a_one_of_branch_that_is_not_an_object_is_rejected() -> None:
    assert violations_of({"oneOf": [{"type": "string"}, True]}) == (
        "schema.oneOf[1]: boolean schemas are not supported; use {} for any value",
    )


def test_type_and_one_of_together_are_rejected() -> None:
    assert violations_of({"type": "string", "oneOf": [{}, {}]}) == (
        'schema.oneOf: "oneOf" cannot be combined with "type"',
    )


def test_a_constraint_keyword_beside_one_of_is_rejected() -> None:
    assert violations_of({"oneOf": [{}, {}], "properties": {}}) == (
        'schema.properties: keyword "properties" cannot appear beside "oneOf"',
    )


def test_properties_with_a_string_type_are_rejected() -> None:
    assert violations_of({"type": "string", "properties": {}}) == (
        'schema.properties: "properties" requires "type": "object" (got "string")',
    )


def test_items_with_an_object_type_are_rejected() -> None:
    assert violations_of({"type": "object", "items": {}}) == (
        'schema.items: "items" requires "type": "array" (got "object")',
    )


@pytest.mark.parametrize("json_type", ["object", "array"])
def test_enum_and_const_on_a_container_node_are_rejected(json_type: str) -> None:
    violations = violations_of({"type": json_type, "enum": ["a"], "const": "a"})
    assert (
        violations[0].startswith('schema.enum: "enum" requires a scalar "type"')
        and f'(got "{json_type}")' in violations[0]
    )
    assert violations[1].startswith('schema.const: "const" requires a scalar "type"')


def test_a_constraint_keyword_with_neither_type_nor_one_of_is_rejected() -> None:
    assert violations_of({"properties": {"a": {}}}) == (
        'schema.properties: "properties" requires "type": "object" (no "type" given)',
    )


def test_const_without_a_type_is_rejected() -> None:
    (violation,) = violations_of({"const": "x"})
    assert violation.startswith('schema.const: "const" requires a scalar "type"')


def test_a_properties_value_that_is_not_a_mapping_is_rejected() -> None:
    assert violations_of({"type": "object", "properties": ["a"]}) == (
        "schema.properties: must be an object mapping names to schemas (got array)",
    )


def test_a_property_schema_that_is_not_an_object_is_rejected() -> None:
    assert violations_of({"type": "object", "properties": {"a": "string"}}) == (
        "schema.properties.a: a schema must be a JSON object (got string)",
    )


def test_a_required_name_not_declared_in_properties_is_rejected() -> None:
    assert violations_of({"type": "object", "properties": {"a": {}}, "required": ["a", "b"]}) == (
        'schema.required[1]: required property "b" is not declared in "properties"',
    )


def test_a_duplicate_required_name_is_rejected() -> None:
    assert violations_of({"type": "object", "properties": {"a": {}}, "required": ["a", "a"]}) == (
        'schema.required[1]: duplicate required property "a"',
    )


def test_a_required_entry_that_is_not_a_string_is_rejected() -> None:
    assert violations_of({"type": "object", "properties": {"a": {}}, "required": [1]}) == (
        "schema.required[0]: must be a string (got integer)",
    )


def test_required_that_is_not_a_list_is_rejected() -> None:
    assert violations_of({"type": "object", "properties": {"a": {}}, "required": "a"}) == (
        "schema.required: must be a list of property names (got string)",
    )


def test_additional_properties_as_a_schema_is_rejected() -> None:
    assert violations_of({"type": "object", "additionalProperties": {"type": "string"}}) == (
        "schema.additionalProperties: must be true or false (got object; schemas are not supported)",
    )


def test_items_in_the_array_form_is_rejected() -> None:
    assert violations_of({"type": "array", "items": [{}, {}]}) == (
        "schema.items: must be one schema (the array form is not supported)",
    )


def test_an_empty_enum_is_rejected() -> None:
    assert violations_of({"type": "string", "enum": []}) == ("schema.enum: must list at least one value",)


def test_an_enum_value_of_another_type_is_rejected_at_its_index() -> None:
    assert violations_of({"type": "array", "items": {"type": "string", "enum": [1, "a"]}}) == (
        'schema.items.enum[0]: must be of the node\'s type "string" (got integer)',
    )


def test_true_is_not_an_integer_enum_value() -> None:
    assert violations_of({"type": "integer", "enum": [True]}) == (
        'schema.enum[0]: must be of the node\'s type "integer" (got boolean)',
    )


def test_a_non_integral_float_is_not_an_integer_const() -> None:
    assert violations_of({"type": "integer", "const": 1.5}) == (
        'schema.const: must be of the node\'s type "integer" (got number)',
    )


def test_an_object_enum_value_is_rejected_even_without_a_type_mismatch() -> None:
    assert violations_of({"type": "string", "enum": [{"a": 1}]}) == (
        "schema.enum[0]: must be a scalar (string, number, boolean or null), not object",
    )


def test_a_const_outside_the_enum_is_rejected() -> None:
    assert violations_of({"type": "string", "enum": ["a", "b"], "const": "c"}) == (
        'schema.const: "c" is not one of the "enum" values',
    )


def test_a_const_equal_to_an_enum_number_by_json_equality_is_accepted() -> None:
    assert_supported_json_schema({"type": "number", "enum": [1, 2], "const": 1.0})


def test_a_description_that_is_not_a_string_is_rejected() -> None:
    assert violations_of({"description": 5}) == ("schema.description: must be a string (got integer)",)


def test_a_title_that_is_not_a_string_is_rejected() -> None:
    assert violations_of({"type": "null", "title": None}) == ("schema.title: must be a string (got null)",)


def test_a_default_that_is_not_lossless_is_rejected_with_its_path() -> None:
    assert violations_of({"type": "number", "default": {"x": [float("nan")]}}) == (
        "schema.default.x[0]: float nan is not lossless JSON",
    )


def test_examples_that_are_not_lossless_are_rejected() -> None:
    (violation,) = violations_of({"examples": [{1, 2}]})
    assert violation.startswith("schema.examples[0]: set is not lossless JSON")


def test_a_boolean_schema_is_rejected() -> None:
    assert violations_of(True) == ("schema: boolean schemas are not supported; use {} for any value",)


def test_a_non_string_key_is_rejected() -> None:
    assert violations_of({"type": "string", 1: "x"}) == ("schema: keys must be strings (got a key of kind integer)",)


def test_a_non_plain_mapping_is_rejected() -> None:
    from collections import OrderedDict

    assert violations_of(OrderedDict(type="string")) == (
        "schema: a schema must be a JSON object (got Python OrderedDict)",
    )


def test_a_str_subclass_type_is_rejected() -> None:
    class Name(str):
        pass

    (violation,) = violations_of({"type": Name("string")})
    assert violation.startswith("schema.type: must be one of")


def test_an_odd_property_name_gets_a_quoted_path() -> None:
    assert violations_of({"type": "object", "properties": {"odd key": {"type": "strin"}}})[0].startswith(
        'schema.properties["odd key"].type: unknown type "strin"'
    )


# --- every violation, order, depth ------------------------------------------


def test_every_violation_is_listed_in_a_deterministic_order() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "strin"}, "b": {"anyOf": []}},
        "required": ["c"],
    }
    expected = (
        'schema.required[0]: required property "c" is not declared in "properties"',
        'schema.properties.a.type: unknown type "strin" (expected one of "object", "array", "string", '
        '"number", "integer", "boolean", "null")',
        'schema.properties.b.anyOf: keyword "anyOf" is not supported',
    )
    assert violations_of(schema) == expected
    assert violations_of(schema) == expected


def test_the_error_lists_every_violation_in_its_message() -> None:
    with pytest.raises(JsonSchemaError) as caught:
        assert_supported_json_schema({"type": "string", "pattern": "x", "minLength": 1, "items": {}})
    err = caught.value
    assert err.code is ErrorCode.UNSUPPORTED_SCHEMA
    assert len(err.violations) == 3
    assert str(err) == "unsupported JSON schema: " + "; ".join(err.violations)


def test_a_schema_nested_256_levels_is_accepted() -> None:
    assert_supported_json_schema(nested_items(256))


def test_a_10000_deep_schema_is_rejected_without_a_recursion_error() -> None:
    (violation,) = violations_of(nested_items(10_000))
    items = ".items" * 8  # (a path of more than 20 steps shows its first and last 8)
    assert violation == f"schema{items} … (240 more) … {items}: schema is nested deeper than 256 levels"


def test_a_deep_properties_chain_is_rejected() -> None:
    root: dict[str, Any] = {}
    node = root
    for _ in range(5_000):
        child: dict[str, Any] = {}
        node.update(type="object", properties={"a": child})
        node = child
    (violation,) = violations_of(root)
    assert violation.endswith("schema is nested deeper than 256 levels")


def test_a_cyclic_schema_is_rejected() -> None:
    schema: dict[str, Any] = {"type": "array"}
    schema["items"] = schema
    (violation,) = violations_of(schema)
    assert violation.endswith("schema is nested deeper than 256 levels")


def test_a_deep_default_that_makes_the_whole_schema_too_deep_is_rejected() -> None:
    default: Any = 0
    for _ in range(200):
        default = [default]
    schema = nested_items(100)
    node = schema
    while "items" in node:
        node = node["items"]
    node["default"] = default
    (violation,) = violations_of(schema)
    assert violation.startswith("schema.items.") and "nesting deeper than 256" in violation


# --- object root --------------------------------------------------------------


def test_an_object_root_is_accepted_by_the_object_check() -> None:
    assert_object_json_schema({"type": "object", "properties": {}})


@pytest.mark.parametrize(
    ("schema", "shown"),
    [
        ({}, "no type"),
        ({"type": "array"}, '"array"'),
        ({"oneOf": [{"type": "object"}, {"type": "null"}]}, "no type"),
    ],
)
def test_a_root_that_is_not_an_object_fails_the_object_check(schema: dict[str, Any], shown: str) -> None:
    with pytest.raises(JsonSchemaError) as caught:
        assert_object_json_schema(schema)
    assert caught.value.violations == (f'schema.type: the root must declare "type": "object" (got {shown})',)


def test_the_object_check_also_lists_the_other_violations() -> None:
    with pytest.raises(JsonSchemaError) as caught:
        assert_object_json_schema({"type": "string", "pattern": "x"})
    assert caught.value.violations == (
        'schema.type: the root must declare "type": "object" (got "string")',
        'schema.pattern: keyword "pattern" is not supported',
    )
