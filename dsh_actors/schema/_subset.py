"""The enforced raw JSON Schema subset (``docs/reference.md``, section 3).

:func:`assert_supported_json_schema` walks a raw schema with an explicit
stack (model output and dynamic registrations are untrusted, so a 10,000-deep
schema must give a :class:`JsonSchemaError`, never a ``RecursionError``) and
collects **every** violation, each prefixed by its path from ``schema``.

Accepted keywords, per node:

* ``type``: one string of ``object``, ``array``, ``string``, ``number``,
  ``integer``, ``boolean``, ``null``;
* ``oneOf``: a list of at least two branch schemas; only the annotations may
  sit beside it (see below);
* ``properties`` (an object of schemas), ``required`` (unique strings, each
  declared in ``properties``), ``additionalProperties`` (``true``/``false``
  only): with ``"type": "object"``;
* ``items`` (one schema): with ``"type": "array"``;
* ``enum`` (a non-empty list of scalars of the node's type) and ``const`` (a
  scalar of the node's type, one of ``enum`` when both are given): with a
  scalar ``type``;
* annotations ``description`` and ``title`` (strings), ``default`` and
  ``examples`` (any lossless JSON; never checked against the node, as
  jsonschema does not either);
* at the root only, ``$schema`` naming Draft 2020-12 or draft-07 (an
  annotation: the subset's keywords mean the same in both; see
  :mod:`._dialect`). Schemas outside the subset can still be enforced, in
  full mode (:mod:`._full`).

Decision on annotations beside ``oneOf``: the contract rejects "a keyword beside
``oneOf``". We read that as a *constraint* keyword: the four annotations
constrain nothing, so ``{"description": "...", "oneOf": [...]}`` is accepted,
while ``{"oneOf": [...], "properties": {...}}`` is rejected.

A node with neither ``type`` nor ``oneOf`` must carry annotations only; it
(like ``{}``) accepts any lossless value.

Violation order is deterministic: a pre-order walk of the schema (properties
in their mapping order, then ``items``, then the ``oneOf`` branches); within
one node, bad keys and unknown keywords in the node's key order, then the
node's own problems keyword by keyword in a fixed order (``type``, ``oneOf``,
keywords that do not belong to the node's type, ``properties``, ``required``,
``additionalProperties``, ``items``, ``enum``, ``const``, annotations).

Depth is counted as :mod:`dsh_actors.json` counts it (the root schema object
is level 1; ``properties`` and ``oneOf`` add two levels per schema, ``items``
one): a schema node beyond level ``MAX_JSON_DEPTH`` is reported once, with
its path, and not entered.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeGuard

from ..errors import JsonSchemaError, LosslessJsonError
from ..json import MAX_JSON_DEPTH, FrozenDict, materialize
from ._dialect import dialect_problem
from ._paths import child_path, index_path, json_text, quote, type_name

__all__ = [
    "ANNOTATION_KEYWORDS",
    "JSON_TYPES",
    "SCALAR_TYPES",
    "assert_object_json_schema",
    "assert_supported_json_schema",
    "check_json_schema",
    "check_annotation",
    "check_scalar_values",
    "is_mapping",
    "is_sequence",
    "json_kind",
    "value_has_type",
]

JSON_TYPES: Final = ("object", "array", "string", "number", "integer", "boolean", "null")
SCALAR_TYPES: Final = frozenset({"string", "number", "integer", "boolean", "null"})
ANNOTATION_KEYWORDS: Final = ("description", "title", "default", "examples")
_OBJECT_KEYWORDS: Final = ("properties", "required", "additionalProperties")
_CONSTRAINT_KEYWORDS: Final = (
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
)
_KNOWN_KEYWORDS: Final = frozenset(("type", "oneOf", *_CONSTRAINT_KEYWORDS, *ANNOTATION_KEYWORDS))
_TYPE_LIST: Final = ", ".join(quote(t) for t in JSON_TYPES)

_MAPPING_TYPES: Final = (dict, FrozenDict)
_SEQUENCE_TYPES: Final = (list, tuple)


def is_mapping(value: object) -> TypeGuard[Mapping[str, Any]]:
    """``value`` is a JSON object as this package sees it: an exact ``dict``
    or the frozen mapping of :mod:`dsh_actors.json` (no other subclass)."""
    return type(value) in _MAPPING_TYPES


def is_sequence(value: object) -> TypeGuard[Sequence[Any]]:
    """``value`` is a JSON array: an exact ``list`` or ``tuple``."""
    return type(value) in _SEQUENCE_TYPES


def value_has_type(value: object, json_type: str) -> bool:
    """Whether ``value`` is of JSON ``json_type``, with jsonschema's Draft
    2020-12 semantics on exact types: ``True`` is neither an integer nor a
    number, ``1.0`` is an integer, every int is a number."""
    t = type(value)
    if json_type == "string":
        return t is str
    if json_type == "integer":
        return t is int or (t is float and value.is_integer())  # type: ignore[attr-defined]
    if json_type == "number":
        return t is int or t is float
    if json_type == "boolean":
        return t is bool
    if json_type == "null":
        return value is None
    if json_type == "object":
        return t in _MAPPING_TYPES
    if json_type == "array":
        return t in _SEQUENCE_TYPES
    return False


def json_kind(value: object) -> str:
    """The JSON kind of ``value`` for messages (``string``, ``integer``,
    ``number``, ``boolean``, ``null``, ``object``, ``array``), or the Python
    type name when it is not JSON at all."""
    t = type(value)
    if t is str:
        return "string"
    if t is bool:
        return "boolean"
    if t is int:
        return "integer"
    if t is float:
        return "number"
    if value is None:
        return "null"
    if t in _MAPPING_TYPES:
        return "object"
    if t in _SEQUENCE_TYPES:
        return "array"
    return f"Python {type_name(value)}"


def _scalar_key(value: object) -> tuple[str, object]:
    """A hashable key under which two scalars are equal exactly when
    jsonschema's ``equal`` says so (bools apart from numbers; ``1 == 1.0``)."""
    t = type(value)
    if t is bool:
        return ("b", value)
    if t is int or t is float:
        return ("n", value)
    return (json_kind(value), value)


def check_annotation(keyword: str, value: object, path: str, out: list[str]) -> None:
    """Check one annotation keyword's value at ``path`` (the keyword's own
    path): ``description``/``title`` must be strings, ``default``/``examples``
    lossless JSON."""
    if keyword in ("description", "title"):
        if type(value) is not str:
            out.append(f"{path}: must be a string (got {json_kind(value)})")
        return
    try:
        materialize(value, path=path)
    except LosslessJsonError as err:
        out.append(str(err))
    except RecursionError:  # pragma: no cover - materialize promises never to
        out.append(f"{path}: is nested too deeply")


def check_scalar_values(
    node: Mapping[str, Any],
    json_type: str | None,
    path: str,
    out: list[str],
    *,
    enum_key: str = "enum",
    const_key: str = "const",
) -> None:
    """Check ``enum``/``const`` of a scalar node whose ``type`` is
    ``json_type`` (``None``: no valid type, so only scalar-ness is checked).

    ``enum`` must be a non-empty list of scalars of the node's type; ``const``
    a scalar of the node's type that, when ``enum`` is also given, is one of
    its values."""
    enum_keys: set[tuple[str, object]] | None = None
    if enum_key in node:
        enum = node[enum_key]
        enum_path = child_path(path, enum_key)
        if not is_sequence(enum):
            out.append(f"{enum_path}: must be a non-empty list of values (got {json_kind(enum)})")
        elif len(enum) == 0:
            out.append(f"{enum_path}: must list at least one value")
        else:
            enum_keys = set()
            for i, member in enumerate(enum):
                problem = _scalar_problem(member, json_type)
                if problem is not None:
                    out.append(f"{index_path(enum_path, i)}: {problem}")
                else:
                    enum_keys.add(_scalar_key(member))
    if const_key in node:
        const = node[const_key]
        const_path = child_path(path, const_key)
        problem = _scalar_problem(const, json_type)
        if problem is not None:
            out.append(f"{const_path}: {problem}")
        elif enum_keys is not None and _scalar_key(const) not in enum_keys:
            out.append(f"{const_path}: {json_text(const)} is not one of the {quote(enum_key)} values")


def _scalar_problem(value: object, json_type: str | None) -> str | None:
    kind = json_kind(value)
    if kind not in SCALAR_TYPES:
        return f"must be a scalar (string, number, boolean or null), not {kind}"
    if type(value) is float and not math.isfinite(value):
        return f"float {value!r} is not lossless JSON"
    if type(value) is float and value == 0.0 and math.copysign(1.0, value) < 0:
        return "float -0.0 is not lossless JSON"
    if type(value) is int and not (-(2**63) <= value <= 2**64 - 1):
        return "integer is out of the lossless range [-2**63, 2**64-1]"
    if json_type is not None and not value_has_type(value, json_type):
        return f"must be of the node's type {quote(json_type)} (got {kind})"
    return None


def check_json_schema(schema: object, *, object_root: bool = False) -> list[str]:
    """Every violation of the enforced subset in ``schema`` (empty: supported).

    Walks with an explicit stack; a node deeper than ``MAX_JSON_DEPTH`` JSON
    levels is reported once and not entered. With ``object_root``, the root
    must also declare ``"type": "object"``."""
    out: list[str] = []
    # Each entry: (node, path, depth in JSON container levels, root = 1).
    stack: list[tuple[object, str, int]] = [(schema, "schema", 1)]
    while stack:
        node, path, depth = stack.pop()
        children: list[tuple[object, str, int]] = []
        _check_node(node, path, depth, out, children)
        stack.extend(reversed(children))
    if is_mapping(schema) and "$schema" in schema:
        # The root's dialect is an annotation (see ._dialect); only the root
        # (depth 1) may carry it.
        problem = dialect_problem(schema["$schema"])
        if problem is not None:
            out.insert(0, f"{child_path('schema', '$schema')}: {problem}")
    if object_root and is_mapping(schema):
        root_type = schema.get("type")
        if type(root_type) is not str or root_type != "object":
            shown = json_text_or_kind(root_type) if "type" in schema else "no type"
            out.insert(0, f'schema.type: the root must declare "type": "object" (got {shown})')
    if not out:
        # The per-node checks make every part lossless; this catches what
        # only the whole shows (total nesting of annotations, shared cycles).
        try:
            materialize(schema, path="schema")
        except LosslessJsonError as err:
            out.append(str(err))
    return out


def json_text_or_kind(value: object) -> str:
    """JSON text of a small scalar, else its JSON kind (for messages)."""
    if type(value) in (str, bool, int, float) or value is None:
        try:
            return json_text(value)
        except ValueError:
            pass
    return json_kind(value)


def _check_node(
    node: object,
    path: str,
    depth: int,
    out: list[str],
    children: list[tuple[object, str, int]],
) -> None:
    if not is_mapping(node):
        if type(node) is bool:
            out.append(f"{path}: boolean schemas are not supported; use {{}} for any value")
        else:
            out.append(f"{path}: a schema must be a JSON object (got {json_kind(node)})")
        return
    if depth > MAX_JSON_DEPTH:
        out.append(f"{path}: schema is nested deeper than {MAX_JSON_DEPTH} levels")
        return
    for key in node:
        if type(key) is not str:
            out.append(f"{path}: keys must be strings (got a key of kind {json_kind(key)})")
        elif key not in _KNOWN_KEYWORDS and not (key == "$schema" and depth == 1):
            out.append(f"{child_path(path, key)}: keyword {quote(key)} is not supported")

    has_type = "type" in node
    has_one_of = "oneOf" in node
    json_type: str | None = None
    if has_type:
        raw_type = node["type"]
        type_path = child_path(path, "type")
        if type(raw_type) is str and raw_type in JSON_TYPES:
            json_type = raw_type
        elif is_sequence(raw_type):
            out.append(f"{type_path}: type arrays are not supported; use oneOf")
        elif type(raw_type) is str:
            out.append(f"{type_path}: unknown type {quote(raw_type)} (expected one of {_TYPE_LIST})")
        else:
            out.append(f"{type_path}: must be one of {_TYPE_LIST} (got {json_kind(raw_type)})")

    if has_one_of:
        one_of_path = child_path(path, "oneOf")
        if has_type:
            out.append(f'{one_of_path}: "oneOf" cannot be combined with "type"')
        for keyword in _CONSTRAINT_KEYWORDS:
            if keyword in node:
                out.append(f'{child_path(path, keyword)}: keyword {quote(keyword)} cannot appear beside "oneOf"')
        branches = node["oneOf"]
        if not is_sequence(branches):
            out.append(f"{one_of_path}: must be a list of at least two schemas (got {json_kind(branches)})")
        else:
            if len(branches) < 2:
                out.append(f"{one_of_path}: must list at least two schemas (got {len(branches)})")
            if depth + 1 > MAX_JSON_DEPTH and branches:
                out.append(f"{one_of_path}: schema is nested deeper than {MAX_JSON_DEPTH} levels")
            else:
                for i, branch in enumerate(branches):
                    children.append((branch, index_path(one_of_path, i), depth + 2))
    else:
        _check_typed_keywords(node, path, depth, has_type, json_type, out, children)

    for keyword in ANNOTATION_KEYWORDS:
        if keyword in node:
            check_annotation(keyword, node[keyword], child_path(path, keyword), out)


def _requirement(keyword: str) -> str:
    if keyword in _OBJECT_KEYWORDS:
        return '"type": "object"'
    if keyword == "items":
        return '"type": "array"'
    return 'a scalar "type" (string, number, integer, boolean or null)'


def _check_typed_keywords(
    node: Mapping[str, Any],
    path: str,
    depth: int,
    has_type: bool,
    json_type: str | None,
    out: list[str],
    children: list[tuple[object, str, int]],
) -> None:
    """The constraint keywords of a node without ``oneOf``: each must belong
    to the node's (valid) type; an invalid ``type`` was already reported, so
    only the keywords' own shapes are checked then."""
    type_known = json_type is not None
    for keyword in _CONSTRAINT_KEYWORDS:
        if keyword not in node:
            continue
        if keyword in _OBJECT_KEYWORDS:
            belongs = json_type == "object"
        elif keyword == "items":
            belongs = json_type == "array"
        else:
            belongs = json_type in SCALAR_TYPES
        if not has_type:
            out.append(
                f'{child_path(path, keyword)}: {quote(keyword)} requires {_requirement(keyword)} (no "type" given)'
            )
        elif type_known and not belongs:
            out.append(
                f"{child_path(path, keyword)}: {quote(keyword)} requires {_requirement(keyword)} "
                f"(got {quote(json_type or '')})"
            )

    declared: Mapping[str, Any] | None = None
    if "properties" in node:
        properties = node["properties"]
        props_path = child_path(path, "properties")
        if not is_mapping(properties):
            out.append(f"{props_path}: must be an object mapping names to schemas (got {json_kind(properties)})")
        elif depth + 1 > MAX_JSON_DEPTH and properties:
            out.append(f"{props_path}: schema is nested deeper than {MAX_JSON_DEPTH} levels")
        else:
            declared = properties
            for name, sub in properties.items():
                if type(name) is not str:
                    out.append(f"{props_path}: property names must be strings (got a key of kind {json_kind(name)})")
                    continue
                children.append((sub, child_path(props_path, name), depth + 2))

    if "required" in node:
        required = node["required"]
        req_path = child_path(path, "required")
        if not is_sequence(required):
            out.append(f"{req_path}: must be a list of property names (got {json_kind(required)})")
        else:
            seen: set[str] = set()
            for i, name in enumerate(required):
                item_path = index_path(req_path, i)
                if type(name) is not str:
                    out.append(f"{item_path}: must be a string (got {json_kind(name)})")
                elif name in seen:
                    out.append(f"{item_path}: duplicate required property {quote(name)}")
                else:
                    seen.add(name)
                    if declared is None or name not in declared:
                        out.append(f'{item_path}: required property {quote(name)} is not declared in "properties"')

    if "additionalProperties" in node:
        additional = node["additionalProperties"]
        if type(additional) is not bool:
            out.append(
                f"{child_path(path, 'additionalProperties')}: must be true or false "
                f"(got {json_kind(additional)}; schemas are not supported)"
            )

    if "items" in node:
        items = node["items"]
        items_path = child_path(path, "items")
        if is_sequence(items):
            out.append(f"{items_path}: must be one schema (the array form is not supported)")
        else:
            children.append((items, items_path, depth + 1))

    if "enum" in node or "const" in node:
        scalar_type = json_type if json_type in SCALAR_TYPES else None
        check_scalar_values(node, scalar_type, path, out)


def assert_supported_json_schema(schema: object) -> None:
    """Raise :class:`JsonSchemaError` listing every violation when ``schema``
    is outside the enforced subset (module docstring); return ``None`` when
    it is supported. Any JSON root is accepted; ``{}`` means any lossless
    value."""
    violations = check_json_schema(schema)
    if violations:
        raise JsonSchemaError(violations)


def assert_object_json_schema(schema: object) -> None:
    """:func:`assert_supported_json_schema`, and the root must also declare
    ``"type": "object"`` (structured outputs that must stay object-rooted)."""
    violations = check_json_schema(schema, object_root=True)
    if violations:
        raise JsonSchemaError(violations)
