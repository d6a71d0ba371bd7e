"""Schemas: the enforced raw JSON Schema subset, its compiled validator, and
the author DSL (``docs/reference.md``, section 3).

* :func:`assert_supported_json_schema` / :func:`assert_object_json_schema`
  reject anything outside the subset with a :class:`~dsh_actors.errors.JsonSchemaError`
  that lists every violation with its path from ``schema``.
* :func:`compile_json_schema` checks and compiles a schema once (cached by
  content, and by identity for frozen schemas) into a
  :class:`CompiledJsonSchema` whose ``is_valid`` is the hot path and whose
  ``validate`` lists violations; :func:`validate_json_schema_value` and
  :func:`validate_args` are the one-call forms.
* :func:`compile_full_json_schema` (and :func:`check_full_json_schema`)
  is full mode, for raw definitions with ``schema_mode="full"``: any Draft
  2020-12 / draft-07 schema enforced by jsonschema-rs (references within
  the schema only, formats asserted), or the subset's validator when the schema fits the
  subset. :class:`FullJsonSchema` has ``CompiledJsonSchema``'s interface.
* :func:`strict_json_schema` gives a parameter schema in OpenAI's strict
  form (or ``None``), and :func:`absent_null_plan` what the pipeline drops
  so that a strict model's ``null`` for an optional parameter is absent.
* A root ``"$schema"`` naming Draft 2020-12 or draft-07 is accepted as an
  annotation by both.
* :func:`value_schema_spec_to_json_schema` and
  :func:`parameter_schema_spec_to_json_schema` compile the author DSL.

Paths: ``value`` is the root; ``value.host`` for an identifier-like property
name, ``value["odd key"]`` (JSON string) for any other, ``value[2]`` for an
array item. Schema paths read the same from ``schema`` (``schema.properties.a.type``,
``schema.oneOf[1]``), DSL paths from ``spec`` or ``parameters``.

Validation messages:

=========================  ==================================================================
violation                  message
=========================  ==================================================================
wrong type                 ``"value.x" must be a string`` (``an integer``, ``a number``,
                           ``a boolean``, ``null``, ``an object``, ``an array``)
not in ``enum``            ``"value" must be one of ["a","b"]`` (compact JSON)
not the ``const``          ``"value" must be "x"`` (compact JSON)
missing required           ``missing required property "value.host"``
undeclared (closed)        ``"value.x" is not a declared property (additionalProperties: false)``
``oneOf``                  ``"value" must match exactly one oneOf branch (matched 2)``
=========================  ==================================================================

A value of the wrong type gets only the type message (not also ``enum`` /
``const``); an object of the right type lists its declared properties'
problems in schema order (a missing required one where it is declared),
then its undeclared keys in the value's order; an array lists its items'
problems in index order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._compile import (
    CompiledJsonSchema,
    args_error,
    compile_json_schema,
    validate_args,
    validate_json_schema_value,
)
from ._dsl import (
    ParameterSchemaSpec,
    ValueSchemaSpec,
    parameter_schema_spec_to_json_schema,
    value_schema_spec_to_json_schema,
)
from ._full import FullJsonSchema, SchemaValidator, check_full_json_schema, compile_full_json_schema
from ._strict import STRICT_FORMATS, STRICT_KEYWORDS, AbsentNullPlan, absent_null_plan, strict_json_schema
from ._subset import assert_object_json_schema, assert_supported_json_schema

JsonSchemaNode = Mapping[str, Any]
"""One raw JSON Schema node (trusted only after
:func:`assert_supported_json_schema`)."""

__all__ = [
    "STRICT_FORMATS",
    "STRICT_KEYWORDS",
    "AbsentNullPlan",
    "CompiledJsonSchema",
    "FullJsonSchema",
    "JsonSchemaNode",
    "ParameterSchemaSpec",
    "SchemaValidator",
    "ValueSchemaSpec",
    "absent_null_plan",
    "args_error",
    "assert_object_json_schema",
    "assert_supported_json_schema",
    "check_full_json_schema",
    "compile_full_json_schema",
    "compile_json_schema",
    "parameter_schema_spec_to_json_schema",
    "strict_json_schema",
    "validate_args",
    "validate_json_schema_value",
    "value_schema_spec_to_json_schema",
]
