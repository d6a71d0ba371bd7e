"""Strict function calling: a parameter schema in OpenAI's strict form, and
the ``null`` a strict model sends for an optional parameter read as absent.

OpenAI's strict mode (``"strict": true`` on a function tool) constrains the
model's output to the schema, but accepts only a subset of JSON Schema:

* the root is an object (``"type": "object"``), not an ``anyOf``;
* every object has ``additionalProperties: false`` and lists every property
  in ``required`` (an optional property is made nullable instead);
* the keywords are those of :data:`STRICT_KEYWORDS`: ``type``,
  ``properties``, ``required``, ``items``, ``enum``, ``const``, ``anyOf``,
  local ``$ref`` with ``$defs`` (or ``definitions``), ``pattern``,
  ``format`` (:data:`STRICT_FORMATS`), ``minimum``, ``maximum``,
  ``exclusiveMinimum``, ``exclusiveMaximum``, ``multipleOf``, ``minItems``,
  ``maxItems``, and the annotations ``description``, ``title``,
  ``$comment`` (``default`` and ``examples`` are dropped);
* OpenAI's documented size limits: at most 5000 properties in all and 10
  levels of object nesting (local references followed as if written in
  place), 1000 enum values in all, 15,000 characters of values in an enum
  of more than 250 values, and 120,000 characters of property names,
  definition names, enum and const values in all (strings by their length,
  other values by their JSON text);
* no keyword beside ``$ref`` (a ``description`` there is inlined with its
  target; a recursive target so annotated is sent non-strict).

:func:`strict_json_schema` turns a parameter schema into that form, or
answers ``None`` when it cannot (then the tool is sent non-strict): a
keyword outside the list (``oneOf``, ``allOf``, ``not``, ``if``,
``patternProperties``, ``minLength``, ``uniqueItems``...), an object that
allows other properties (``additionalProperties`` true or a schema, or an
object without ``properties``), a schema without a ``type`` (``{}``),
``$ref`` with other keywords beside it, a remote reference, the limits, or
a union of two or more objects of which one has a ``null`` to drop (the
plan below could not tell which of them a strict model's object is).

:func:`absent_null_plan` is the other half: compiled once from the tool's
own (original) schema, it says which properties are optional and do not
accept ``null``; the pipeline drops such a ``null`` before anything reads
the arguments, so a strict model's ``null`` is an absent argument and the
call validates against the original schema. Properties are followed
through nested objects, array items, local ``$ref``\\ s (a recursive schema
included) and a union's one branch that has nulls to drop (an
``Optional``'s ``anyOf``), the shapes pydantic generates; a ``null`` the
property's own schema accepts (``{}``, annotations only, a ``null`` type
or branch) is kept, and so is every null of a union with several such
branches.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, Final, final

from ..errors import DshError
from ..json import FrozenDict, dumps
from ._paths import local_target

__all__ = ["STRICT_FORMATS", "STRICT_KEYWORDS", "AbsentNullPlan", "absent_null_plan", "strict_json_schema"]

STRICT_KEYWORDS: Final = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "const",
        "anyOf",
        "$ref",
        "$defs",
        "definitions",
        "pattern",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minItems",
        "maxItems",
        "description",
        "title",
        "$comment",
        "default",
        "examples",
        "$schema",
    }
)
"""The keywords a schema sent strict may use (``default``, ``examples`` and
a root ``$schema`` are dropped from it)."""

STRICT_FORMATS: Final = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}
)
"""The string formats strict mode supports."""

_DROPPED: Final = frozenset({"default", "examples", "$schema"})
_MAX_PROPERTIES: Final = 5000
_MAX_NESTING: Final = 10
_MAX_ENUM_VALUES: Final = 1000
_LARGE_ENUM: Final = 250  # an enum of more values has a character limit of its own
_MAX_LARGE_ENUM_CHARS: Final = 15_000
_MAX_CHARS: Final = 120_000
_NULL: Final[dict[str, Any]] = {"type": "null"}
# Keywords that may refuse null and that _accepts_null does not look into.
_MAY_REFUSE_NULL: Final = ("not", "if", "$dynamicRef", "$recursiveRef")


class _NotStrict(Exception):
    """The schema cannot be made strict."""


class _Budget:
    """What the strict form written so far spends of OpenAI's documented
    size limits (module docstring, but the nesting: ``_nesting``); each
    method raises :class:`_NotStrict` past one."""

    __slots__ = ("properties", "enum_values", "chars")

    def __init__(self) -> None:
        self.properties = 0
        self.enum_values = 0
        self.chars = 0

    def spend(self, properties: int = 0, enum_values: int = 0, chars: int = 0) -> None:
        self.properties += properties
        self.enum_values += enum_values
        self.chars += chars
        if self.properties > _MAX_PROPERTIES or self.enum_values > _MAX_ENUM_VALUES or self.chars > _MAX_CHARS:
            raise _NotStrict

    def names(self, names: Any, *, properties: bool) -> None:
        """An object's property names (``properties``) or definition names."""
        self.spend(properties=len(names) if properties else 0, chars=sum(len(name) for name in names))

    def values(self, node: Mapping[str, Any]) -> None:
        """A node's ``enum`` and ``const`` values."""
        if "const" in node:
            self.spend(chars=_chars(node["const"]))
        enum = node.get("enum")
        if isinstance(enum, (list, tuple)):
            chars = sum(_chars(value) for value in enum)
            if len(enum) > _LARGE_ENUM and sum(len(v) for v in enum if type(v) is str) > _MAX_LARGE_ENUM_CHARS:
                raise _NotStrict
            self.spend(enum_values=len(enum), chars=chars)


def _chars(value: Any) -> int:
    """What a value counts toward the character limits: a str its length,
    anything else its compact JSON text's."""
    if type(value) is str:
        return len(value)
    try:
        return len(dumps(value))
    except DshError:
        raise _NotStrict from None  # (not lossless JSON: no schema to send strict)


def _resolve(root: Any, ref: Any) -> Any:
    """The node a local reference (``#`` or ``#/a/b``) points to, else raise."""
    target = local_target(root, ref)
    if target is None:
        raise _NotStrict  # (an anchor, a remote reference, or nothing there: not in strict mode)
    return target


def _accepts_null(root: Any, node: Any, seen: frozenset[str] = frozenset()) -> bool:
    """Whether ``node`` surely accepts ``null`` (the shapes that say so:
    a ``type`` naming it, ``const``/``enum`` holding it, an ``anyOf`` or
    ``oneOf`` branch accepting it, a reference to such a node, ``{}``)."""
    if node is True or (isinstance(node, Mapping) and not node):
        return True
    if not isinstance(node, Mapping):
        return False
    kind = node.get("type")
    if kind is not None:
        names = (kind,) if type(kind) is str else tuple(kind) if isinstance(kind, (list, tuple)) else ()
        if "null" not in names:
            return False
    if "const" in node:
        return node["const"] is None
    if "enum" in node:
        enum = node["enum"]
        return isinstance(enum, (list, tuple)) and None in enum
    ref = node.get("$ref")
    if type(ref) is str:
        if ref in seen:
            return False
        try:
            target = _resolve(root, ref)
        except _NotStrict:
            return False
        if not _accepts_null(root, target, seen | {ref}):
            return False
    branches = node.get("anyOf")
    if isinstance(branches, (list, tuple)) and not any(_accepts_null(root, b, seen) for b in branches):
        return False
    branches = node.get("oneOf")
    # Two branches that accept null make oneOf refuse it.
    if isinstance(branches, (list, tuple)) and sum(1 for b in branches if _accepts_null(root, b, seen)) != 1:
        return False
    if isinstance(node.get("allOf"), (list, tuple)) and not all(_accepts_null(root, b, seen) for b in node["allOf"]):
        return False
    # Every other keyword (annotations, and those of other types: minLength,
    # properties...) lets null through; these may refuse it.
    return not any(keyword in node for keyword in _MAY_REFUSE_NULL)


# --------------------------------------------------------------------------
# The strict form
# --------------------------------------------------------------------------


def strict_json_schema(schema: Any) -> dict[str, Any] | None:
    """``schema`` (a tool's parameters, plain or frozen) in OpenAI's strict
    form, as fresh plain dicts, or ``None`` when it cannot be made strict
    (module docstring)."""
    if not isinstance(schema, Mapping) or schema.get("type") != "object" or "anyOf" in schema:
        return None
    try:
        out = _strict(schema, schema, _Budget())
        if _nesting(schema, schema, frozenset(), {}) > _MAX_NESTING:
            return None  # (references followed: pydantic puts every nested model in $defs)
    except (_NotStrict, RecursionError):
        return None
    return out if isinstance(out, dict) else None


def _nesting(root: Any, node: Any, refs: frozenset[str], memo: dict[int, int]) -> int:
    """How many levels of objects ``node`` nests, its local references
    followed as if written in place (a recursive one is not followed again:
    it adds no level a value must have)."""
    if not isinstance(node, Mapping):
        return 0
    known = memo.get(id(node))
    if known is not None:
        return known
    ref = node.get("$ref")
    if type(ref) is str:
        if ref in refs:
            return 0
        try:
            target = _resolve(root, ref)
        except _NotStrict:
            return 0
        return _nesting(root, target, refs | {ref}, memo)
    inner = 0
    properties = node.get("properties")
    if isinstance(properties, Mapping):
        inner = max((_nesting(root, sub, refs, memo) for sub in properties.values()), default=0)
    if isinstance(node.get("items"), Mapping):
        inner = max(inner, _nesting(root, node["items"], refs, memo))
    if isinstance(node.get("anyOf"), (list, tuple)):
        inner = max([inner, *(_nesting(root, branch, refs, memo) for branch in node["anyOf"])])
    levels = inner + (1 if isinstance(properties, Mapping) else 0)
    memo[id(node)] = levels
    return levels


def _strict(root: Any, node: Any, budget: _Budget) -> Any:
    if not isinstance(node, Mapping):
        raise _NotStrict
    if any(key not in STRICT_KEYWORDS for key in node):
        raise _NotStrict
    if "$ref" in node:
        target = _resolve(root, node["$ref"])
        siblings = {key: value for key, value in node.items() if key not in _DROPPED and key != "$ref"}
        if not siblings:
            return {"$ref": node["$ref"]}
        # Strict mode takes no keyword beside "$ref": inline the target
        # (a recursive one ends in RecursionError: sent non-strict).
        if not isinstance(target, Mapping) or any(key not in ("description", "title", "$comment") for key in siblings):
            raise _NotStrict
        return _strict(
            root, {**{k: v for k, v in target.items() if k not in ("$defs", "definitions")}, **siblings}, budget
        )
    budget.values(node)
    if "anyOf" in node:
        branches = node["anyOf"]
        if not isinstance(branches, (list, tuple)) or not branches:
            raise _NotStrict
        union: dict[str, Any] = {
            key: _plain(value) for key, value in node.items() if key not in _DROPPED and key != "anyOf"
        }
        if any(key in union for key in ("type", "properties", "items")):
            raise _NotStrict  # keywords beside anyOf: not in the strict subset
        union["anyOf"] = [_strict(root, branch, budget) for branch in branches]
        _check_distinguishable(root, branches)
        return union
    kind = node.get("type")
    names = (kind,) if type(kind) is str else tuple(kind) if isinstance(kind, (list, tuple)) else None
    if not names:
        raise _NotStrict  # no type: any value, which strict mode cannot express
    fmt = node.get("format")
    if fmt is not None and fmt not in STRICT_FORMATS:
        raise _NotStrict
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED or key in ("properties", "required", "additionalProperties", "items"):
            continue
        if key in ("$defs", "definitions"):
            if not isinstance(value, Mapping):
                raise _NotStrict
            budget.names(value, properties=False)
            out[key] = {name: _strict(root, sub, budget) for name, sub in value.items()}
        else:
            out[key] = _plain(value)
    if "object" in names:
        properties = node.get("properties")
        # An object without "properties" is free-form, and one whose
        # additionalProperties is true or a schema takes other keys: closing
        # either would change what it accepts.
        if not isinstance(properties, Mapping) or node.get("additionalProperties", False) is not False:
            raise _NotStrict
        required = node.get("required", ())
        if isinstance(required, (list, tuple)) and any(name not in properties for name in required):
            raise _NotStrict  # a required key it does not declare: a closed object could never hold it
        budget.names(properties, properties=True)
        strict_properties: dict[str, Any] = {}
        for name, sub in properties.items():
            converted = _strict(root, sub, budget)
            if name not in required and not _accepts_null(root, sub):
                converted = _nullable(converted)
            strict_properties[name] = converted
        out["properties"] = strict_properties
        out["required"] = list(properties)
        out["additionalProperties"] = False
    if "items" in node:
        out["items"] = _strict(root, node["items"], budget)
    elif "array" in names:
        # An array of any items: strict mode needs their schema (OpenAI
        # refuses "array schema missing items"), and {} cannot be one.
        raise _NotStrict
    return out


def _check_distinguishable(root: Any, branches: Any) -> None:
    """Raise _NotStrict when a union holds two or more objects (as branches,
    or as the items of array branches) and a null may be dropped in one of
    them: which branch a strict model's object is, the absent-null plan
    cannot tell by its keys alone, and it could drop a null that the branch
    the model chose requires (so a union has the plan of its one branch
    with one, and none when several have)."""
    objects: list[Any] = []
    # (A node and whether it is reached as an array's items: one model as a
    # branch and as the items of another, A | list[A], is two objects.)
    stack: list[tuple[Any, bool]] = [(branch, False) for branch in branches]
    seen: set[tuple[int, bool]] = set()
    while stack:
        branch, as_items = stack.pop()
        while isinstance(branch, Mapping) and type(branch.get("$ref")) is str and (id(branch), as_items) not in seen:
            seen.add((id(branch), as_items))
            branch = _resolve(root, branch["$ref"])
        if not isinstance(branch, Mapping) or (id(branch), as_items) in seen:
            continue
        seen.add((id(branch), as_items))
        if isinstance(branch.get("anyOf"), (list, tuple)):
            stack.extend((sub, as_items) for sub in branch["anyOf"])
        elif isinstance(branch.get("items"), Mapping):
            stack.append((branch["items"], True))  # items of arrays are told apart alike
        elif isinstance(branch.get("properties"), Mapping):
            objects.append(branch)
    if len(objects) > 1 and any(_build(root, branch) is not None for branch in objects):
        raise _NotStrict


def _nullable(node: dict[str, Any]) -> dict[str, Any]:
    """``node`` accepting ``null`` too (its annotations kept outside)."""
    kind = node.get("type")
    if type(kind) is str and not any(key in node for key in ("enum", "const")):
        return {**node, "type": [kind, "null"]}
    notes: dict[str, Any] = {key: node[key] for key in ("description", "title") if key in node}
    rest = {key: value for key, value in node.items() if key not in notes}
    return {**notes, "anyOf": [rest, dict(_NULL)]}


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _plain(sub) for key, sub in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(sub) for sub in value]
    return value


# --------------------------------------------------------------------------
# A strict model's null for an optional parameter: absent
# --------------------------------------------------------------------------


@final
class AbsentNullPlan:
    """Where a ``null`` means "absent" in arguments of one schema: the
    optional properties that do not accept ``null`` (``drop``), and the plans
    of nested objects (``properties``, ``items``). A union (``anyOf``,
    ``oneOf``, ``allOf``) has the plan of its one branch that has one (an
    ``Optional``'s), and none when several have (it is then never sent
    strict: see ``_check_distinguishable``). A recursive schema gives a plan
    that refers to itself. Immutable once built."""

    __slots__ = ("drop", "properties", "items")

    def __init__(self) -> None:
        self.drop: frozenset[str] = frozenset()
        self.properties: dict[str, AbsentNullPlan] = {}
        self.items: AbsentNullPlan | None = None

    def apply(self, value: Any) -> Any:
        """``value`` without the nulls this plan drops (``value`` itself when
        there are none: the common case only reads). Frozen values stay
        frozen."""
        kind = type(value)
        if (
            kind is FrozenDict
            or kind is dict
            or (kind is not tuple and kind is not list and isinstance(value, Mapping))
        ):
            drop = self.drop
            properties = self.properties
            if not properties:  # a flat plan: only a null can change anything
                return self._rebuilt(value) if None in value.values() and not drop.isdisjoint(value) else value
            for key, item in value.items():
                if item is None:
                    if key in drop:
                        return self._rebuilt(value)
                elif key in properties and properties[key].apply(item) is not item:
                    return self._rebuilt(value)
            return value
        if self.items is not None and (kind is tuple or kind is list):
            items = [self.items.apply(item) for item in value]
            if all(new is old for new, old in zip(items, value, strict=True)):
                return value
            return tuple(items) if type(value) is tuple else items
        return value

    def _rebuilt(self, value: Mapping[str, Any]) -> Any:
        out: dict[str, Any] = {}
        for key, item in value.items():
            if item is None and key in self.drop:
                continue
            sub = self.properties.get(key)
            out[key] = sub.apply(item) if sub is not None and item is not None else item
        return FrozenDict(out) if type(value) is FrozenDict else out


_CACHE_LIMIT: Final = 1024
_lock = threading.Lock()
# Invariant: each value was built from a schema equal to its key (None: no
# null is ever dropped for that schema).
_plans: dict[Any, AbsentNullPlan | None] = {}


def absent_null_plan(schema: Any) -> AbsentNullPlan | None:
    """The plan of ``schema`` (a tool's frozen parameter schema), or
    ``None`` when no null would ever be dropped. Cached by content."""
    try:
        return _plans[schema]
    except KeyError:
        pass
    except TypeError:  # an unhashable (plain) schema: build it each time
        return _build(schema, schema)
    plan = _build(schema, schema)
    with _lock:
        _plans[schema] = plan
        if len(_plans) > _CACHE_LIMIT:
            _plans.pop(next(iter(_plans)))
    return plan


class _Node:
    """What one schema node says about nulls, while the plan is built: the
    node it refers to (``ref``: it says nothing of its own), or its own
    ``drop``/``properties``/``items`` and its union's ``branches``.
    ``useful``: a null may be dropped somewhere below it."""

    __slots__ = ("ref", "drop", "properties", "items", "branches", "useful")

    def __init__(self) -> None:
        self.ref: _Node | None = None
        self.drop: frozenset[str] = frozenset()
        self.properties: dict[str, _Node] = {}
        self.items: _Node | None = None
        self.branches: list[_Node] = []
        self.useful = False

    @property
    def own(self) -> bool:
        """It says something of its own (it is not only a union)."""
        return bool(self.drop or self.properties or self.items is not None)


def _build(schema: Any, node: Any) -> AbsentNullPlan | None:
    """The plan of ``node``, a node of ``schema`` (references resolve from
    ``schema``)."""
    # Every schema node gets its _Node before its children are visited, so a
    # recursive schema (a $ref back to an ancestor) gives a cyclic plan.
    memo: dict[int, _Node] = {}
    try:
        root = _node(schema, node, memo)
    except RecursionError:
        return None
    if root is None:
        return None
    nodes = list(memo.values())
    changed = True
    while changed:  # usefulness is monotone: iterate to the fixpoint
        changed = False
        for node in nodes:
            if not node.useful and _useful(node):
                node.useful = changed = True
    plans: dict[int, AbsentNullPlan] = {}
    todo: list[tuple[_Node, AbsentNullPlan]] = []

    def plan_of(node: _Node | None) -> AbsentNullPlan | None:
        node = _chosen(node)
        if node is None or not node.useful or not node.own:
            return None
        plan = plans.get(id(node))
        if plan is None:
            plan = plans[id(node)] = AbsentNullPlan()
            todo.append((node, plan))
        return plan

    result = plan_of(root)
    while todo:
        node, plan = todo.pop()
        plan.drop = node.drop
        plan.properties = {name: sub for name, c in node.properties.items() if (sub := plan_of(c)) is not None}
        plan.items = plan_of(node.items)
    return result


def _useful(node: _Node) -> bool:
    if node.ref is not None:
        return node.ref.useful
    return (
        bool(node.drop)
        or any(c.useful for c in node.properties.values())
        or (node.items is not None and node.items.useful)
        or any(c.useful for c in node.branches)
    )


def _target(node: _Node | None) -> _Node | None:
    """``node`` with its references followed (None: they go round in a circle)."""
    seen: set[int] = set()
    while node is not None and node.ref is not None:
        if id(node) in seen:
            return None
        seen.add(id(node))
        node = node.ref
    return node


def _chosen(node: _Node | None) -> _Node | None:
    """The node whose plan ``node`` has: itself, with its references
    followed, and a union (one that says nothing of its own) followed into
    its one branch where a null may be dropped. A union with several such
    branches has none: which of them an object is, its keys alone cannot
    tell (a null one branch drops another may require), so nothing is
    dropped (None)."""
    seen: set[int] = set()
    node = _target(node)
    while node is not None and node.branches and not node.own and id(node) not in seen:
        seen.add(id(node))
        useful = [leaf for leaf in _leaves(node) if leaf.useful]
        if len(useful) != 1:
            return None
        node = useful[0]
    return node


def _leaves(node: _Node) -> list[_Node]:
    """The branches of ``node``'s union, unions within it flattened."""
    out: list[_Node] = []
    seen = {id(node)}
    stack = list(reversed(node.branches))
    while stack:
        branch = _target(stack.pop())
        if branch is None or id(branch) in seen:
            continue
        seen.add(id(branch))
        if branch.branches and not branch.own:
            stack.extend(reversed(branch.branches))
        else:
            out.append(branch)
    return out


def _node(root: Any, node: Any, memo: dict[int, _Node]) -> _Node | None:
    if not isinstance(node, Mapping):
        return None
    key = id(node)
    if key in memo:
        return memo[key]
    out = memo[key] = _Node()
    ref = node.get("$ref")
    if type(ref) is str:
        try:
            target = _resolve(root, ref)
        except _NotStrict:
            target = None
        if target is not None:
            out.ref = _node(root, target, memo)
            return out
    for keyword in ("anyOf", "oneOf", "allOf"):
        branches = node.get(keyword)
        if isinstance(branches, (list, tuple)):
            for branch in branches:
                if not _is_null(branch):
                    sub = _node(root, branch, memo)
                    if sub is not None:
                        out.branches.append(sub)
    properties = node.get("properties")
    if isinstance(properties, Mapping):
        required = node.get("required", ())
        required = required if isinstance(required, (list, tuple)) else ()
        out.drop = frozenset(
            name for name, sub in properties.items() if name not in required and not _accepts_null(root, sub)
        )
        for name, sub in properties.items():
            nested = _node(root, sub, memo)
            if nested is not None:
                out.properties[name] = nested
    items = node.get("items")
    if isinstance(items, Mapping):
        out.items = _node(root, items, memo)
    return out


def _is_null(node: Any) -> bool:
    return isinstance(node, Mapping) and node.get("type") == "null" and len(node) == 1
