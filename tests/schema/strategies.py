"""Hypothesis strategies for the schema tests.

``schemas()`` draws raw schemas *inside* the enforced subset: nested objects
(properties, required, additionalProperties), arrays (with or without
items), scalar nodes with ``enum``/``const`` of the right type, ``oneOf`` with
two or three branches, ``{}`` and annotation-only nodes. Values come from
small pools so that enum members, consts and values collide often, and the
numeric pools mix ``1``, ``1.0`` and ``True`` on purpose.

``values_for(schema)`` draws plain (dict/list) lossless values that mostly
conform to ``schema``, with random mutations at any node, so both verdicts
are well represented.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

SCALAR_TYPES = ("string", "number", "integer", "boolean", "null")
PROPERTY_NAMES = ("a", "b", "host", "items", "type", "odd key", "$ref", "", "é名")
UNSUPPORTED_KEYWORDS = (
    "anyOf",
    "allOf",
    "not",
    "$ref",
    "$defs",
    "pattern",
    "minimum",
    "maximum",
    "format",
    "minLength",
    "minItems",
    "uniqueItems",
    "prefixItems",
    "patternProperties",
    "dependentRequired",
    "if",
    "contains",
    "nullable",
)

strings = st.sampled_from(["a", "b", "c", "", "odd key", "é"]) | st.text(max_size=3)
integers = st.sampled_from([0, 1, 2, -1, 2**63 - 1, 2**64 - 1, -(2**63)]) | st.integers(-5, 5)
# Finite, never -0.0 (not lossless); integral floats are integers.
floats = st.sampled_from([0.0, 1.0, 2.0, 1.5, -2.5, 1e300]) | st.floats(allow_nan=False, allow_infinity=False).map(
    lambda f: 0.0 if f == 0.0 else f
)
booleans = st.booleans()
scalars = st.one_of(st.none(), booleans, integers, floats, strings)
keys = st.sampled_from(PROPERTY_NAMES) | st.text(max_size=3)

json_values: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(keys, children, max_size=3),
    max_leaves=8,
)


def values_of_type(json_type: str) -> st.SearchStrategy[Any]:
    """Lossless values of one scalar JSON type (jsonschema's view)."""
    if json_type == "string":
        return strings
    if json_type == "integer":
        return integers | st.sampled_from([0.0, 1.0, -3.0])
    if json_type == "number":
        return integers | floats
    if json_type == "boolean":
        return booleans
    return st.none()


@st.composite
def annotation_maps(draw: st.DrawFn) -> dict[str, Any]:
    """Zero or more annotations (never checked against the node)."""
    out: dict[str, Any] = {}
    if draw(st.integers(0, 5)) == 0:
        out["description"] = draw(st.text(max_size=5))
    if draw(st.integers(0, 7)) == 0:
        out["title"] = draw(st.text(max_size=5))
    if draw(st.integers(0, 7)) == 0:
        out["default"] = draw(json_values)
    if draw(st.integers(0, 9)) == 0:
        out["examples"] = draw(st.lists(json_values, max_size=2))
    return out


@st.composite
def scalar_schemas(draw: st.DrawFn) -> dict[str, Any]:
    """A scalar node, maybe with ``enum`` and/or ``const`` of its type."""
    json_type = draw(st.sampled_from(SCALAR_TYPES))
    node: dict[str, Any] = {"type": json_type}
    shape = draw(st.sampled_from(["plain", "plain", "enum", "const", "both"]))
    if shape in ("enum", "both"):
        node["enum"] = draw(st.lists(values_of_type(json_type), min_size=1, max_size=4))
    if shape == "const":
        node["const"] = draw(values_of_type(json_type))
    elif shape == "both":
        node["const"] = draw(st.sampled_from(node["enum"]))
    node.update(draw(annotation_maps()))
    return node


def _leaf_schemas() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        scalar_schemas(),
        st.just({}),
        annotation_maps(),
        st.sampled_from([{"type": "object"}, {"type": "array"}]),
    )


@st.composite
def _object_schemas(draw: st.DrawFn, children: st.SearchStrategy[dict[str, Any]]) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "object"}
    properties = draw(st.dictionaries(st.sampled_from(PROPERTY_NAMES), children, max_size=4))
    keep_empty: bool = draw(booleans)
    if properties or keep_empty:
        node["properties"] = properties
    with_required: bool = draw(booleans)
    if properties and with_required:
        node["required"] = draw(st.lists(st.sampled_from(sorted(properties)), unique=True))
    additional = draw(st.sampled_from(["absent", True, False, False]))
    if additional != "absent":
        node["additionalProperties"] = additional
    node.update(draw(annotation_maps()))
    return node


@st.composite
def _array_schemas(draw: st.DrawFn, children: st.SearchStrategy[dict[str, Any]]) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "array"}
    if draw(st.integers(0, 4)) > 0:
        node["items"] = draw(children)
    node.update(draw(annotation_maps()))
    return node


@st.composite
def _one_of_schemas(draw: st.DrawFn, children: st.SearchStrategy[dict[str, Any]]) -> dict[str, Any]:
    node: dict[str, Any] = {"oneOf": draw(st.lists(children, min_size=2, max_size=3))}
    if draw(st.integers(0, 3)) == 0:
        node["description"] = draw(st.text(max_size=5))
    return node


def schemas(max_depth: int = 3) -> st.SearchStrategy[dict[str, Any]]:
    """Raw schemas inside the enforced subset, nested up to ``max_depth``."""
    if max_depth <= 0:
        return _leaf_schemas()
    children = schemas(max_depth - 1)
    return st.one_of(
        _leaf_schemas(),
        _object_schemas(children),
        _array_schemas(children),
        _one_of_schemas(children),
    )


def _conforming(draw: st.DrawFn, node: dict[str, Any]) -> Any:
    # Recursion is bounded by the generated schema's depth.
    if draw(st.integers(0, 9)) == 0:
        return draw(json_values)  # a random mutation at this node
    if "oneOf" in node:
        return _conforming(draw, draw(st.sampled_from(node["oneOf"])))
    json_type = node.get("type")
    if json_type is None:
        return draw(json_values)
    if "const" in node:
        return node["const"]
    if "enum" in node:
        return draw(st.sampled_from(node["enum"]))
    if json_type in SCALAR_TYPES:
        return draw(values_of_type(json_type))
    if json_type == "array":
        items = node.get("items", {})
        return [_conforming(draw, items) for _ in range(draw(st.integers(0, 3)))]
    properties: dict[str, Any] = node.get("properties", {})
    required = set(node.get("required", ()))
    value: dict[str, Any] = {}
    for name, sub in properties.items():
        if name in required or draw(booleans):
            value[name] = _conforming(draw, sub)
    if node.get("additionalProperties", True) is not False or draw(st.integers(0, 5)) == 0:
        for extra in draw(st.lists(keys, max_size=2)):
            value.setdefault(extra, draw(json_values))
    return value


@st.composite
def values_for(draw: st.DrawFn, schema: dict[str, Any]) -> Any:
    """A plain lossless value that mostly conforms to ``schema``."""
    return _conforming(draw, schema)


def schema_nodes(schema: dict[str, Any], path: str = "schema") -> list[tuple[dict[str, Any], str]]:
    """Every node of a generated schema with its path, in pre-order."""
    from dsh_actors.schema._paths import child_path, index_path

    out: list[tuple[dict[str, Any], str]] = []
    stack = [(schema, path)]
    while stack:
        node, node_path = stack.pop()
        out.append((node, node_path))
        children: list[tuple[dict[str, Any], str]] = []
        for name, sub in node.get("properties", {}).items():
            children.append((sub, child_path(child_path(node_path, "properties"), name)))
        if "items" in node:
            children.append((node["items"], child_path(node_path, "items")))
        for i, branch in enumerate(node.get("oneOf", ())):
            children.append((branch, index_path(child_path(node_path, "oneOf"), i)))
        stack.extend(reversed(children))
    return out
