"""The author DSL: value and parameter schema specs compiled to raw schemas.

A :data:`ValueSchemaSpec` is a mapping with a ``type`` (``string``,
``number``, ``integer``, ``boolean``, ``null``, ``array``, ``object``, or the
author-only ``json``) or a ``oneOf`` list, plus optional annotations
(``description``, ``title``, ``default``, ``examples``):

* scalar types may carry ``enum`` (non-empty, values of the type) and
  ``const`` (a value of the type, in ``enum`` when both are given);
* ``array`` may carry ``items`` (a spec; absent means any item);
* ``object`` must say ``additional_properties`` (or ``additionalProperties``)
  explicitly, ``true`` or ``false``, and may carry ``properties``: a map of
  property specs, each optionally marked ``"required": True``;
* ``json`` compiles to ``{}`` (any lossless value), keeping annotations;
* ``oneOf`` lists at least two specs; only annotations may sit beside it.

A :data:`ParameterSchemaSpec` is a map of property specs (``"required":
True`` marks a required one; ``False`` is rejected: omit it). It compiles to
an *open* object root: ``{"type": "object", "properties": {...},
"required": [...]}`` (``required`` omitted when empty, no
``additionalProperties``).

Errors are :class:`JsonSchemaError` listing every problem with its path from
``spec`` (value specs) or ``parameters`` (parameter specs). Specs are walked
with an explicit stack, so a hostile depth gives an error, never a
``RecursionError``. The output always passes
:func:`~dsh_actors.schema.assert_supported_json_schema`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ..errors import JsonSchemaError, LosslessJsonError
from ..json import MAX_JSON_DEPTH, materialize, thaw
from ._paths import child_path, index_path, quote
from ._subset import (
    ANNOTATION_KEYWORDS,
    SCALAR_TYPES,
    check_annotation,
    check_json_schema,
    check_scalar_values,
    is_mapping,
    is_sequence,
    json_kind,
)

__all__ = [
    "ParameterSchemaSpec",
    "ValueSchemaSpec",
    "parameter_schema_spec_to_json_schema",
    "value_schema_spec_to_json_schema",
]

ValueSchemaSpec = Mapping[str, Any]
"""An author-facing value schema (module docstring)."""

ParameterSchemaSpec = Mapping[str, ValueSchemaSpec]
"""An author-facing parameter map: property name to spec (``required: True``
allowed on each)."""

_SPEC_TYPES: Final = ("string", "number", "integer", "boolean", "null", "array", "object", "json")
_SPEC_TYPE_LIST: Final = ", ".join(quote(t) for t in _SPEC_TYPES)
_ADDITIONAL_KEYS: Final = ("additional_properties", "additionalProperties")
_KEYS_BY_TYPE: Final[dict[str, frozenset[str]]] = {
    **{t: frozenset({"enum", "const"}) for t in SCALAR_TYPES},
    "array": frozenset({"items"}),
    "object": frozenset({"properties", *_ADDITIONAL_KEYS}),
    "json": frozenset(),
}
_CONSTRAINT_KEYS: Final = frozenset({"enum", "const", "items", "properties", *_ADDITIONAL_KEYS})
_KNOWN_KEYS: Final = frozenset({"type", "oneOf", "required", *_CONSTRAINT_KEYS, *ANNOTATION_KEYWORDS})

# One pending spec node: (spec, path, depth, is a property, output container,
# key in that container). Depth counts JSON levels of the output schema.
_Pending = tuple[object, str, int, bool, Any, Any]


def _copy_json(value: Any) -> Any:
    """A detached plain (dicts and lists) copy of a lossless value."""
    try:
        return thaw(materialize(value))
    except LosslessJsonError:
        return None  # already reported by check_annotation


def _compile_spec_node(item: _Pending, out: list[str], stack: list[_Pending]) -> None:
    spec, path, depth, is_property, container, slot = item
    if not is_mapping(spec):
        out.append(f"{path}: a schema spec must be an object (got {json_kind(spec)})")
        return
    if depth > MAX_JSON_DEPTH:
        out.append(f"{path}: spec is nested deeper than {MAX_JSON_DEPTH} levels")
        return
    node: dict[str, Any] = {}
    container[slot] = node
    children: list[_Pending] = []

    for key in spec:
        if type(key) is not str:
            out.append(f"{path}: keys must be strings (got a key of kind {json_kind(key)})")
        elif key not in _KNOWN_KEYS:
            out.append(f"{child_path(path, key)}: unknown key {quote(key)}")

    if "required" in spec:
        flag = spec["required"]
        req_path = child_path(path, "required")
        if not is_property:
            out.append(f'{req_path}: "required" is only allowed on a property spec')
        elif flag is False:
            out.append(f'{req_path}: must be true when given; omit "required" for an optional property')
        elif flag is not True:
            out.append(f"{req_path}: must be true (got {json_kind(flag)})")

    spec_type: str | None = None
    if "oneOf" in spec:
        one_of_path = child_path(path, "oneOf")
        if "type" in spec:
            out.append(f'{one_of_path}: "oneOf" cannot be combined with "type"')
        for key in sorted(_CONSTRAINT_KEYS & spec.keys()):
            out.append(f'{child_path(path, key)}: key {quote(key)} cannot appear beside "oneOf"')
        branches = spec["oneOf"]
        if not is_sequence(branches):
            out.append(f"{one_of_path}: must be a list of at least two specs (got {json_kind(branches)})")
        else:
            if len(branches) < 2:
                out.append(f"{one_of_path}: must list at least two specs (got {len(branches)})")
            compiled_branches: list[Any] = [None] * len(branches)
            node["oneOf"] = compiled_branches
            for i, branch in enumerate(branches):
                children.append((branch, index_path(one_of_path, i), depth + 2, False, compiled_branches, i))
    elif "type" not in spec:
        out.append(f'{path}: a spec needs a "type" ({_SPEC_TYPE_LIST}) or a "oneOf"')
    else:
        raw_type = spec["type"]
        type_path = child_path(path, "type")
        if type(raw_type) is str and raw_type in _SPEC_TYPES:
            spec_type = raw_type
        elif type(raw_type) is str:
            out.append(f"{type_path}: unknown type {quote(raw_type)} (expected one of {_SPEC_TYPE_LIST})")
        else:
            out.append(f"{type_path}: must be one of {_SPEC_TYPE_LIST} (got {json_kind(raw_type)})")
        if spec_type is not None:
            allowed = _KEYS_BY_TYPE[spec_type]
            for key in spec:
                if key in _CONSTRAINT_KEYS and key not in allowed:
                    out.append(f"{child_path(path, key)}: key {quote(key)} does not apply to type {quote(spec_type)}")
            if spec_type != "json":
                node["type"] = spec_type
            if spec_type == "object":
                _object_node(spec, path, depth, node, out, children)
            elif spec_type == "array" and "items" in spec:
                children.append((spec["items"], child_path(path, "items"), depth + 1, False, node, "items"))
            elif spec_type in SCALAR_TYPES:
                check_scalar_values(spec, spec_type, path, out)
                if "enum" in spec and is_sequence(spec["enum"]):
                    node["enum"] = [_copy_json(v) for v in spec["enum"]]
                if "const" in spec:
                    node["const"] = _copy_json(spec["const"])

    for keyword in ANNOTATION_KEYWORDS:
        if keyword in spec:
            value = spec[keyword]
            check_annotation(keyword, value, child_path(path, keyword), out)
            node[keyword] = _copy_json(value)
    stack.extend(reversed(children))


def _object_node(
    spec: Mapping[str, Any],
    path: str,
    depth: int,
    node: dict[str, Any],
    out: list[str],
    children: list[_Pending],
) -> None:
    given = [key for key in _ADDITIONAL_KEYS if key in spec]
    if not given:
        out.append(
            f"{child_path(path, 'additional_properties')}: an object spec must state "
            "additional_properties (or additionalProperties) explicitly: true or false"
        )
    elif len(given) == 2:
        out.append(
            f"{child_path(path, 'additionalProperties')}: give only one of additional_properties / additionalProperties"
        )
    additional: object = None
    for key in given:
        value = spec[key]
        if type(value) is not bool:
            out.append(f"{child_path(path, key)}: must be true or false (got {json_kind(value)})")
        else:
            additional = value
    if "properties" in spec:
        _properties(spec["properties"], child_path(path, "properties"), depth, node, out, children)
    if type(additional) is bool:
        node["additionalProperties"] = additional


def _properties(
    properties: object,
    props_path: str,
    depth: int,
    node: dict[str, Any],
    out: list[str],
    children: list[_Pending],
) -> None:
    """Fill ``node``'s ``properties`` (and ``required``) from a property map
    whose path is ``props_path``; ``depth`` is ``node``'s depth."""
    if not is_mapping(properties):
        out.append(f"{props_path}: must be an object mapping property names to specs (got {json_kind(properties)})")
        return
    compiled: dict[str, Any] = {}
    node["properties"] = compiled
    required: list[str] = []
    for name, sub in properties.items():
        if type(name) is not str:
            out.append(f"{props_path}: property names must be strings (got a key of kind {json_kind(name)})")
            continue
        compiled[name] = None
        if is_mapping(sub) and sub.get("required") is True:
            required.append(name)
        children.append((sub, child_path(props_path, name), depth + 2, True, compiled, name))
    if required:
        node["required"] = required


def _run(stack: list[_Pending], out: list[str]) -> None:
    while stack:
        _compile_spec_node(stack.pop(), out, stack)


def _finish(schema: dict[str, Any], out: list[str]) -> dict[str, Any]:
    if out:
        raise JsonSchemaError(out)
    # Belt and braces: the output must be in the enforced subset.
    violations = check_json_schema(schema)
    if violations:  # pragma: no cover - the DSL checks mirror the subset's
        raise JsonSchemaError(violations)
    return schema


def value_schema_spec_to_json_schema(spec: ValueSchemaSpec) -> dict[str, Any]:
    """Compile an author value spec to a raw schema in the enforced subset
    (plain dicts and lists, detached from ``spec``). Raises
    :class:`JsonSchemaError` with every problem, paths rooted at ``spec``."""
    out: list[str] = []
    root: list[Any] = [None]
    _run([(spec, "spec", 1, False, root, 0)], out)
    result = root[0]
    return _finish(result if isinstance(result, dict) else {}, out)


def parameter_schema_spec_to_json_schema(spec: ParameterSchemaSpec) -> dict[str, Any]:
    """Compile a parameter spec (a map of property specs) to an open object
    root ``{"type": "object", "properties": {...}, "required": [...]}``
    (``required`` omitted when empty). Raises :class:`JsonSchemaError` with
    every problem, paths rooted at ``parameters`` (``parameters.x.type``)."""
    out: list[str] = []
    schema: dict[str, Any] = {"type": "object"}
    stack: list[_Pending] = []
    if not is_mapping(spec):
        out.append(f"parameters: must be an object mapping property names to specs (got {json_kind(spec)})")
        schema["properties"] = {}
    else:
        _properties(spec, "parameters", 1, schema, out, stack)
        stack.reverse()
    _run(stack, out)
    return _finish(schema, out)
