"""Full enforcement: any Draft 2020-12 (or draft-07) schema, checked by jsonschema-rs.

Raw definitions opt in with ``ToolDefinition(schema_mode="full")``, and
:mod:`dsh_actors.mcp` does so for the tools it mounts. Their
schemas may use every keyword of the dialect (``anyOf``, ``minimum``,
``pattern``, ``format``, ``$defs``/``$ref``, ``$id``, ``$anchor``,
``$dynamicRef``...). The schema is compiled once,
by :func:`compile_full_json_schema`, into a validator with the interface of
:class:`~dsh_actors.schema.CompiledJsonSchema` (``schema``, ``is_valid``,
``validate``). A schema that the enforced subset already covers compiles to
the subset's fast validator, which gives the same verdicts (the differential
test pins that). Any other schema is compiled by jsonschema-rs (a validator
written in Rust; about a microsecond per call for a pydantic-shaped schema).

What registration refuses, every problem listed with its path from
``schema`` where it has one:

* a schema that is not lossless JSON (docs/reference.md, section 2);
* a root ``$schema`` naming another dialect (:mod:`._dialect`);
* a schema the dialect's meta-schema rejects (checked by jsonschema, which
  lists every problem);
* a reference (``$ref``, ``$dynamicRef``) that does not resolve within the
  schema: a remote one (nothing is ever fetched) or a local one that points
  nowhere. References resolve against the root's and embedded resources'
  ``$id`` as the specification says (``$anchor``, relative references);
* a ``pattern`` or ``format: "regex"`` value the validator cannot compile,
  and anything else it refuses to compile;
* with ``object_root``, a root that does not declare ``"type": "object"``.

Every format the specification defines is asserted (a format it does not
define, such as ``"password"``, is an annotation, as Draft 2020-12 requires).

Values are checked with exact JSON types, as in the subset: ``True`` is not
a number, ``1.0`` is an integer, tuples are arrays, frozen mappings are
objects. Violations name their path from ``value``, and the common keywords
use the subset's words (see :mod:`dsh_actors.schema`). A value nested deeper
than lossless JSON allows (``MAX_JSON_DEPTH``) is a violation, never handed
to the validator.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Final, final

import jsonschema_rs
from jsonschema import Draft7Validator, Draft202012Validator, FormatChecker

from ..errors import JsonSchemaError, LosslessJsonError
from ..json import FrozenDict, dumps, materialize, thaw
from ..json._rules import join_path
from ._compile import CompiledJsonSchema, compile_json_schema
from ._dialect import DIALECTS, dialect_of, dialect_problem
from ._paths import child_path, json_text, local_target, quote
from ._subset import check_json_schema, json_kind

__all__ = [
    "FullJsonSchema",
    "SchemaValidator",
    "check_full_json_schema",
    "compile_full_json_schema",
]

_TYPE_WORDS: Final = {
    "object": "an object",
    "array": "an array",
    "string": "a string",
    "number": "a number",
    "integer": "an integer",
    "boolean": "a boolean",
    "null": "null",
}

# Keywords whose values are data, not schemas: never searched for references.
_DATA_KEYWORDS: Final = frozenset({"const", "enum", "default", "examples"})
# Keywords whose values map names to schemas (a "$ref" key there is a name).
_NAMED_SCHEMAS: Final = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
_REFS: Final = ("$ref", "$dynamicRef", "$recursiveRef")

_META: Final = {"2020-12": Draft202012Validator, "draft-07": Draft7Validator}
#: The formats the meta-schema check asserts: its dialect's, but ``regex``,
#: which jsonschema checks with Python's ``re`` (no ``\p{L}``, which an
#: ECMA-262 pattern with the ``u`` flag has); the validator compiles each
#: pattern itself, and refuses one it cannot ("is not a regex").
_META_FORMATS: Final = {
    dialect: FormatChecker([name for name in meta.FORMAT_CHECKER.checkers if name != "regex"])
    for dialect, meta in _META.items()
}
_DRAFTS: Final = {"2020-12": jsonschema_rs.Draft202012, "draft-07": jsonschema_rs.Draft7}

_MISSING_RESOURCE: Final = re.compile(r"Resource '(.*?)' is not present in a registry")
_MISSING_POINTER: Final = re.compile(r"(?:Pointer|Anchor) '(.*?)' does not exist")


def _path(root: str, parts: Sequence[object]) -> str:
    return join_path(root, [part if type(part) is int else str(part) for part in parts])


def _walk(schema: Any) -> list[tuple[Any, list[object]]]:
    """Every schema node (a mapping) with its path, without recursion."""
    out: list[tuple[Any, list[object]]] = []
    stack: list[tuple[Any, list[object]]] = [(schema, [])]
    while stack:
        node, parts = stack.pop()
        if not isinstance(node, Mapping):
            if isinstance(node, list):
                for i, item in enumerate(node):
                    stack.append((item, [*parts, i]))
            continue
        out.append((node, parts))
        for key, sub in node.items():
            if key in _DATA_KEYWORDS:
                continue
            if key in _NAMED_SCHEMAS and isinstance(sub, Mapping):
                for name, named in sub.items():
                    stack.append((named, [*parts, key, name]))
            elif isinstance(sub, (Mapping, list)):
                stack.append((sub, [*parts, key]))
    out.sort(key=lambda entry: [str(p) for p in entry[1]])
    return out


def check_full_json_schema(schema: object, *, object_root: bool = False) -> list[str]:
    """Every reason full mode refuses ``schema`` (empty: it is enforceable).
    See the module docstring for the rules."""
    try:
        frozen = materialize(schema, path="schema")
    except LosslessJsonError as err:
        return [str(err)]
    return _problems(thaw(frozen), object_root)[0]


def _problems(plain: Any, object_root: bool) -> tuple[list[str], Any]:
    """The problems of ``plain`` and, when there are none, its compiled
    jsonschema-rs validator."""
    out: list[str] = []
    if type(plain) is not dict and type(plain) is not bool:
        return [f"schema: a schema must be a JSON object or a boolean (got {json_kind(plain)})"], None
    if type(plain) is dict and "$schema" in plain:
        problem = dialect_problem(plain["$schema"])
        if problem is not None:
            return [f"{child_path('schema', '$schema')}: {problem}"], None
    dialect = dialect_of(plain)
    meta = _META[dialect]
    meta_validator = meta(meta.META_SCHEMA, format_checker=_META_FORMATS[dialect])
    try:
        meta_errors = list(meta_validator.iter_errors(plain))
    except RecursionError:
        return ["schema: is nested too deeply to check"], None
    for error in meta_errors:
        out.append(f"{_path('schema', list(error.absolute_path))}: {error.message}")
    if out:
        return out, None
    loop = _endless_reference(plain)
    if loop is not None:
        return [loop], None
    if object_root and (type(plain) is not dict or plain.get("type") != "object"):
        shown = json_text(plain.get("type")) if type(plain) is dict and "type" in plain else "no type"
        out.append(f'schema.type: the root must declare "type": "object" (got {shown})')
    try:
        # offline: a reference to anything outside the schema fails here.
        validator = jsonschema_rs.validator_for(plain, validate_formats=True, offline=True)
    except (jsonschema_rs.ValidationError, jsonschema_rs.ReferencingError, ValueError) as err:
        # (A ValidationError's instance path is where in the schema: a pattern it cannot compile.)
        where = list(err.instance_path) if isinstance(err, jsonschema_rs.ValidationError) else []
        out.append(_compile_problem(plain, str(err).split("\n", 1)[0], where))
        return out, None
    return out, None if out else validator


# Keywords that apply their schema(s) to the value itself, not to a part of it.
_IN_PLACE: Final = ("allOf", "anyOf", "oneOf", "not", "if", "then", "else")


def _endless_reference(plain: Any) -> str | None:
    """A ``$ref`` that leads back to where it is without reaching into the
    value (``{"$ref": "#"}`` under ``allOf``, two ``$defs`` that refer to
    each other): checking any value would never end, and the validator
    accepts every value instead. Local JSON pointers only (a schema with an
    ``$id`` below its root, whose references resolve elsewhere, is left to
    the validator)."""
    nodes = _walk(plain)
    if any("$id" in node for node, parts in nodes if parts):
        return None
    paths = {id(node): parts for node, parts in nodes}

    def edges(node: Any) -> list[tuple[Any, str | None]]:
        out: list[tuple[Any, str | None]] = []
        ref = node.get("$ref")
        if type(ref) is str:
            target = local_target(plain, ref)
            if isinstance(target, Mapping):
                out.append((target, ref))
        for keyword in _IN_PLACE:
            sub = node.get(keyword)
            for item in sub if isinstance(sub, list) else [sub]:
                if isinstance(item, Mapping):
                    out.append((item, None))
        return out

    done: set[int] = set()
    for start in _reachable(plain):
        if id(start) in done:
            continue
        # Depth-first over in-place edges; a node met again on the path is a loop.
        on_path: dict[int, str | None] = {id(start): None}
        stack = [(start, iter(edges(start)))]
        while stack:
            node, children = stack[-1]
            step = next(children, None)
            if step is None:
                stack.pop()
                on_path.pop(id(node), None)
                done.add(id(node))
                continue
            child, ref = step
            if id(child) in on_path:
                # The loop: the path from ``child`` on, closed by this edge.
                # Named by its last reference (the node holding it, and it).
                first = next(i for i, (n, _) in enumerate(stack) if n is child)
                entered = [on_path[id(n)] for n, _ in stack[first + 1 :]] + [ref]
                last = max((k for k, r in enumerate(entered) if r is not None), default=None)
                if last is None:
                    continue  # (a loop without a reference: not possible in a tree)
                holder, where = stack[first + last][0], entered[last]
                return (
                    f"{_path('schema', [*paths.get(id(holder), []), '$ref'])}: reference {quote(str(where))} leads "
                    "back to itself without reaching into the value (checking a value would never end)"
                )
            if id(child) not in done:
                on_path[id(child)] = ref
                stack.append((child, iter(edges(child))))
    return None


def _reachable(plain: Any) -> list[Any]:
    """The schema nodes a value's check can reach from the root: through
    every keyword that holds schemas, and local references, but not into
    ``$defs`` (a definition no reference uses is never run)."""
    out: list[Any] = []
    seen: set[int] = set()
    stack = [plain]
    while stack:
        node = stack.pop()
        if not isinstance(node, Mapping) or id(node) in seen:
            continue
        seen.add(id(node))
        out.append(node)
        for key, sub in node.items():
            if key in _DATA_KEYWORDS or key in ("$defs", "definitions"):
                continue
            if key == "$ref":
                stack.append(local_target(plain, sub))
            elif key in _NAMED_SCHEMAS and isinstance(sub, Mapping):
                stack.extend(sub.values())
            elif isinstance(sub, Mapping):
                stack.append(sub)
            elif isinstance(sub, list):
                stack.extend(sub)
    return out


def _compile_problem(plain: Any, message: str, at: Sequence[str | int] = ()) -> str:
    """A problem naming the schema path of what jsonschema-rs refused to
    compile (``at``, when it says, for anything but a reference)."""
    missing = _MISSING_RESOURCE.search(message)
    pointer = _MISSING_POINTER.search(message)
    refs = [
        (_path("schema", [*parts, keyword]), node[keyword])
        for node, parts in _walk(plain)
        for keyword in _REFS
        if type(node.get(keyword)) is str
    ]
    if missing is not None:
        uri = missing.group(1)
        where = next((path for path, ref in refs if ref and _names(uri, ref)), "schema")
        shown = next((ref for path, ref in refs if path == where), uri)
        return (
            f"{where}: remote reference {quote(shown)} is not supported; only references "
            "within the schema (to its own $defs, $id or $anchor) are resolved, nothing is fetched"
        )
    if pointer is not None:
        target = pointer.group(1)
        where, shown = next(
            ((path, ref) for path, ref in refs if ref.endswith(target) or ref.endswith("#" + target)),
            ("schema", target),
        )
        return f"{where}: reference {quote(shown)} does not resolve within the schema"
    return f"{_path('schema', list(at))}: {message}"


def _names(uri: str, ref: str) -> bool:
    """Whether the unresolvable ``uri`` jsonschema-rs reports is ``ref``
    (the reference as written, possibly relative to a base)."""
    document, _, fragment = ref.partition("#")
    uri_document, _, uri_fragment = uri.partition("#")
    if not document:
        return False
    return uri_document.endswith(document) and (not fragment or uri_fragment == fragment)


@final
class FullJsonSchema:
    """A schema outside the subset, compiled once by jsonschema-rs (Draft
    2020-12, or draft-07 when its root says so) with exact JSON types and
    asserted formats.

    Same interface as :class:`~dsh_actors.schema.CompiledJsonSchema`:
    ``schema`` is the detached deep-frozen copy, ``is_valid`` the fast
    check, ``validate`` every violation with its path. Thread-safe (the
    compiled validator keeps no per-call state); compares by content.
    """

    __slots__ = ("schema", "dialect", "_key", "_plain", "_validator", "_is_valid")

    schema: Any
    dialect: str
    _key: str
    _plain: Any
    _validator: Any
    _is_valid: Any

    def __init__(self, schema: Any, key: str, plain: Any, dialect: str, validator: Any = None) -> None:
        if validator is None:
            validator = jsonschema_rs.validator_for(plain, validate_formats=True, offline=True)
        self.schema = schema
        self.dialect = dialect
        self._key = key
        self._plain = plain
        self._validator = validator
        self._is_valid = validator.is_valid

    def is_valid(self, value: Any) -> bool:
        """Whether ``value`` (lossless JSON) conforms. A value that is not
        lossless JSON (too deep, a NaN...) does not."""
        # Frozen values are lossless JSON by construction (depth capped);
        # anything else is checked first, so no value too deep for the
        # validator's recursion ever reaches it.
        if type(value) is not FrozenDict:
            try:
                value = materialize(value)
            except LosslessJsonError:
                return False
        return bool(self._is_valid(value))

    def validate(self, value: Any, path: str = "value") -> list[str]:
        """Every violation of ``value``, each naming its path from ``path``
        (empty: valid). Defaults are never filled in."""
        if type(value) is not FrozenDict:
            try:
                value = materialize(value, path=path)
            except LosslessJsonError as err:  # its message names the part, from ``path``
                return [f'"{path}" is not lossless JSON: {err.message}']
        if self._is_valid(value):
            return []
        out: list[str] = []
        seen: set[str] = set()
        for error in self._validator.iter_errors(value):
            for message in _messages(self._plain, error, path):
                if message not in seen:
                    seen.add(message)
                    out.append(message)
        return out or [f'"{path}" does not match the schema']

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FullJsonSchema):
            return NotImplemented
        return self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        text = self._key if len(self._key) <= 80 else self._key[:77] + "..."
        return f"FullJsonSchema({text})"


def _type_message(expected: Any) -> str:
    if type(expected) is str:
        return f"must be {_TYPE_WORDS.get(expected, quote(expected))}"
    words = [_TYPE_WORDS.get(t, quote(str(t))) for t in expected]
    return "must be " + (" or ".join(words) if len(words) <= 2 else ", ".join(words[:-1]) + " or " + words[-1])


def _node_at(plain: Any, parts: Sequence[object]) -> Any:
    """The schema value at ``parts`` from the root (``None`` when the path
    does not lead anywhere, as for a keyword inside an embedded resource
    reached through its ``$id``)."""
    node = plain
    for part in parts:
        if isinstance(node, Mapping) and type(part) is str and part in node:
            node = node[part]
        elif isinstance(node, list) and type(part) is int and 0 <= part < len(node):
            node = node[part]
        else:
            return None
    return node


def _types_of(plain: Any, error: Any) -> list[str]:
    """The types a ``type`` error names, in the schema's order when the
    schema can be looked up."""
    declared = _node_at(plain, list(error.schema_path))
    if type(declared) is str:
        return [declared]
    if isinstance(declared, list) and all(type(t) is str for t in declared):
        return list(declared)
    return [str(t) for t in error.kind.types]


def _is_type_error_at(error: Any, here: list[object]) -> bool:
    return bool(error.kind.name == "type" and list(error.instance_path) == here)


def _branches(plain: Any, error: Any, keyword: str, root: str) -> list[str]:
    """The messages of an ``anyOf`` / ``oneOf`` that no branch matched."""
    path = _path(root, list(error.instance_path))
    here = list(error.instance_path)
    branches: list[list[Any]] = [list(branch) for branch in error.kind.context]
    matched = sum(1 for branch in branches if not branch)
    if matched:
        # oneOf with more than one match (a branch without errors matched).
        count = str(matched) if matched > 1 else "more than one"
        return [f'"{path}" must match exactly one oneOf branch (matched {count})']
    # Every branch failed only on its type: name the types they accept.
    if all(len(branch) == 1 and _is_type_error_at(branch[0], here) for branch in branches):
        types: list[str] = []
        for branch in branches:
            for t in _types_of(plain, branch[0]):
                if t not in types:
                    types.append(t)
        return [f'"{path}" {_type_message(types)}']
    # Exactly one branch is of the value's type (an Optional[X]'s X): its
    # own violations say what is wrong.
    compatible = [branch for branch in branches if not any(_is_type_error_at(e, here) for e in branch)]
    if len(compatible) == 1:
        out: list[str] = []
        for sub in compatible[0]:
            out.extend(_messages(plain, sub, root))
        return out
    if keyword == "oneOf":
        return [f'"{path}" must match exactly one oneOf branch (matched 0)']
    return [f'"{path}" must match at least one anyOf branch']


def _messages(plain: Any, error: Any, root: str) -> list[str]:
    kind = error.kind
    keyword = kind.name
    schema_path = list(error.schema_path)
    path = _path(root, list(error.instance_path))
    if keyword == "type":
        types = _types_of(plain, error)
        return [f'"{path}" {_type_message(types[0] if len(types) == 1 else types)}']
    if keyword == "required":
        name = kind.property
        if schema_path and schema_path[-1] == "dependentRequired":
            deps = _node_at(plain, schema_path)
            instance = error.instance
            if isinstance(deps, Mapping) and isinstance(instance, Mapping):
                owners = [key for key, need in deps.items() if key in instance and name in need]
                if owners:
                    return [
                        f'missing required property "{child_path(path, name)}" '
                        f'(required by "{child_path(path, owners[0])}")'
                    ]
        return [f'missing required property "{child_path(path, name)}"']
    if keyword in ("additionalProperties", "unevaluatedProperties"):
        return [
            f'"{child_path(path, str(key))}" is not a declared property ({keyword}: false)' for key in kind.unexpected
        ]
    if keyword in ("enum", "const"):
        return [f'"{path}" {text}' for text in _value_texts(plain, error)]
    if keyword in ("anyOf", "oneOf"):
        return _branches(plain, error, keyword, root)
    if keyword == "falseSchema":
        parent = _node_at(plain, schema_path[:-1])
        if schema_path and schema_path[-1] == "items" and isinstance(parent, Mapping) and "prefixItems" in parent:
            allowed = len(parent["prefixItems"]) if isinstance(parent["prefixItems"], list) else 0
            parent_path = _path(root, list(error.instance_path)[:-1])
            return [f'"{parent_path}" must have at most {_plural(allowed, "item")} (no items beyond "prefixItems")']
        if schema_path and schema_path[-1] == "propertyNames" and isinstance(error.instance, Mapping):
            return [f'"{path}" must have no properties (propertyNames: false)']
        return [f'"{path}" is not allowed here (false schema)']
    if keyword == "not" and kind.schema in ({}, True):
        return [f'"{path}" is not allowed here (false schema)']
    if keyword == "propertyNames":
        inner = kind.error
        named = inner.instance
        texts = _simple(plain, inner) or _value_texts(plain, inner)
        if not texts:  # a combinator or a false schema: say which keyword refuses it
            texts = ['is not allowed by "propertyNames"']
        return [f'the property name {quote(str(named))} of "{path}" {text}' for text in texts]
    simple = _simple(plain, error)
    if simple:
        return [f'"{path}" {text}' for text in simple]
    return [f'"{path}" does not satisfy {quote(str(keyword))}: {error.message}']


def _value_texts(plain: Any, error: Any) -> list[str]:
    """The message of an ``enum`` or ``const`` error, without the path."""
    kind = error.kind
    declared = _node_at(plain, list(error.schema_path))
    if kind.name == "enum":
        return [f"must be one of {_shown(declared or kind.options)}"]
    if kind.name == "const":
        return [f"must be {_shown(kind.expected_value if declared is None else declared)}"]
    return []


def _simple(plain: Any, error: Any) -> list[str]:
    """The message of a keyword that compares the value to one limit."""
    keyword = error.kind.name
    schema_path = list(error.schema_path)
    if keyword == "contains" and schema_path and schema_path[-1] in ("minContains", "maxContains"):
        keyword = schema_path[-1]  # jsonschema-rs reports both as "contains"
    word = _SIMPLE.get(keyword)
    if word is None:
        return []
    declared = _node_at(plain, list(error.schema_path))
    if declared is None:
        declared = _limit(error.kind)
    return [word(declared)]


def _limit(kind: Any) -> Any:
    for attribute in ("limit", "multiple_of", "pattern", "format"):
        value = getattr(kind, attribute, None)
        if value is not None:
            return value
    return None


def _shown(value: Any) -> str:
    try:
        return json_text(value)
    except (TypeError, ValueError):  # pragma: no cover - checked schemas are lossless
        return repr(value)


def _plural(n: Any, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


_SIMPLE: Final[dict[str, Any]] = {
    "minimum": lambda x: f"must be >= {_shown(x)}",
    "maximum": lambda x: f"must be <= {_shown(x)}",
    "exclusiveMinimum": lambda x: f"must be > {_shown(x)}",
    "exclusiveMaximum": lambda x: f"must be < {_shown(x)}",
    "multipleOf": lambda x: f"must be a multiple of {_shown(x)}",
    "minLength": lambda x: f"must be at least {_plural(x, 'character')} long",
    "maxLength": lambda x: f"must be at most {_plural(x, 'character')} long",
    "pattern": lambda x: f"must match the pattern {quote(str(x))}",
    "format": lambda x: f"must be a valid {quote(str(x))}",
    "minItems": lambda x: f"must have at least {_plural(x, 'item')}",
    "maxItems": lambda x: f"must have at most {_plural(x, 'item')}",
    "uniqueItems": lambda x: "must not contain duplicate items",
    "minProperties": lambda x: f"must have at least {_plural(x, 'property')}".replace("propertys", "properties"),
    "maxProperties": lambda x: f"must have at most {_plural(x, 'property')}".replace("propertys", "properties"),
    "contains": lambda x: 'must contain an item matching the "contains" schema',
    "minContains": lambda x: f'must contain at least {_plural(x, "item")} matching the "contains" schema',
    "maxContains": lambda x: f'must contain at most {_plural(x, "item")} matching the "contains" schema',
    "not": lambda x: 'must not match the "not" schema',
    "unevaluatedItems": lambda x: "has items no keyword evaluated (unevaluatedItems)",
    "additionalItems": lambda x: "has more items than allowed (additionalItems: false)",
}


SchemaValidator = CompiledJsonSchema | FullJsonSchema
"""What a definition's schemas compile to: the subset's fast validator or a
full one (both have ``schema``, ``is_valid`` and ``validate``)."""


# --------------------------------------------------------------------------
# Compilation and its cache
# --------------------------------------------------------------------------

_CACHE_LIMIT: Final = 1024
_lock = threading.Lock()
# Invariant: every value was compiled from the schema whose compact JSON
# text (and object_root flag) is the key.
_cache: dict[tuple[str, bool], CompiledJsonSchema | FullJsonSchema] = {}


def compile_full_json_schema(schema: object, *, object_root: bool = False) -> CompiledJsonSchema | FullJsonSchema:
    """Compile ``schema`` for full enforcement, once (cached by content).

    A schema inside the enforced subset (``object_root``: with a root
    ``"type": "object"``) gives the subset's fast
    :class:`~dsh_actors.schema.CompiledJsonSchema`; any other enforceable
    schema a :class:`FullJsonSchema`. Raises :class:`JsonSchemaError`
    (``UNSUPPORTED_SCHEMA``) listing every problem when full mode refuses it
    (module docstring). A validator passed in is returned as it is."""
    if type(schema) is CompiledJsonSchema or type(schema) is FullJsonSchema:
        return schema
    try:
        frozen = materialize(schema, path="schema")
    except LosslessJsonError as err:
        raise JsonSchemaError([str(err)]) from None
    key = (dumps(frozen).decode(), object_root)
    hit = _cache.get(key)
    if hit is not None:
        return hit
    compiled: CompiledJsonSchema | FullJsonSchema
    if not check_json_schema(frozen, object_root=object_root):
        compiled = compile_json_schema(frozen)
    else:
        plain = thaw(frozen)
        problems, validator = _problems(plain, object_root)
        if problems:
            raise JsonSchemaError(problems)
        compiled = FullJsonSchema(frozen, key[0], plain, dialect_of(plain), validator)
    with _lock:
        compiled = _cache.setdefault(key, compiled)
        if len(_cache) > _CACHE_LIMIT:
            _cache.pop(next(iter(_cache)))
    return compiled


assert set(DIALECTS.values()) == set(_META) == set(_DRAFTS)
