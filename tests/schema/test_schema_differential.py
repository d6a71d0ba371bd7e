"""Differential properties: on every schema the subset accepts, our verdict
equals jsonschema's (Draft 2020-12), for plain and frozen values alike."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsh_actors.errors import JsonSchemaError
from dsh_actors.json import materialize
from dsh_actors.schema import assert_supported_json_schema, compile_json_schema
from dsh_actors.schema._paths import child_path

from .strategies import UNSUPPORTED_KEYWORDS, json_values, schema_nodes, schemas, values_for

_settings = settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@_settings
@given(st.data())
def test_our_verdict_equals_jsonschema_on_every_supported_schema(data: st.DataObject) -> None:
    schema = data.draw(schemas(), label="schema")
    value = data.draw(values_for(schema), label="value")
    expected = jsonschema.Draft202012Validator(schema).is_valid(value)
    compiled = compile_json_schema(schema)
    assert compiled.is_valid(value) is expected
    assert compiled.is_valid(materialize(value)) is expected
    violations = compiled.validate(value)
    assert (violations == []) is expected
    assert compiled.validate(materialize(value)) == violations


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schemas(), json_values)
def test_random_values_get_the_same_verdict_as_jsonschema(schema: dict[str, Any], value: Any) -> None:
    expected = jsonschema.Draft202012Validator(schema).is_valid(value)
    assert compile_json_schema(schema).is_valid(value) is expected
    assert (compile_json_schema(schema).validate(value) == []) is expected


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schemas())
def test_every_generated_schema_is_supported_and_a_valid_draft_2020_12_schema(
    schema: dict[str, Any],
) -> None:
    assert_supported_json_schema(schema)
    jsonschema.Draft202012Validator.check_schema(schema)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_an_unsupported_keyword_anywhere_is_rejected_with_its_path(data: st.DataObject) -> None:
    schema = data.draw(schemas(), label="schema")
    node, path = data.draw(st.sampled_from(schema_nodes(schema)), label="node")
    keyword = data.draw(st.sampled_from(UNSUPPORTED_KEYWORDS), label="keyword")
    node[keyword] = 1
    with pytest.raises(JsonSchemaError) as caught:
        assert_supported_json_schema(schema)
    assert f'{child_path(path, keyword)}: keyword "{keyword}" is not supported' in caught.value.violations


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_type_array_anywhere_is_rejected_with_its_path(data: st.DataObject) -> None:
    schema = data.draw(schemas(), label="schema")
    node, path = data.draw(st.sampled_from(schema_nodes(schema)), label="node")
    if "oneOf" in node:
        node.clear()
    node["type"] = ["string", "null"]
    with pytest.raises(JsonSchemaError) as caught:
        assert_supported_json_schema(schema)
    assert f"{path}.type: type arrays are not supported; use oneOf" in caught.value.violations
