"""Compile a supported schema once into a fast validator.

Each schema node becomes two closures specialised to what the node says:

* ``ok(value) -> bool``: the hot path. Exact-type checks (``type(v) is
  str``), set membership for ``enum``, no path strings, no messages.
* ``errs(value, path, out)``: the slow path, run only when ``ok`` said no.
  It walks the same structure, builds each offending path lazily and appends
  the messages (see the table in :mod:`dsh_actors.schema`).

Invariant: for every node, ``ok(v)`` is ``False`` exactly when ``errs(v,
...)`` appends at least one message; so ``validate(v) == []`` iff
``is_valid(v)``.

The recursion of both closures is bounded by the schema's depth (at most
``MAX_JSON_DEPTH`` levels, enforced by the subset check): a value deeper than
its schema is never entered, and a ``{}`` node accepts its value without
looking at it. Compiled validators assume lossless JSON (materialized
arguments or body values) and judge anything else by exact types only; the
one-call forms :func:`validate_json_schema_value` and :func:`validate_args`
check losslessness first, so they are total over any Python value.

Compiled validators are cached by content (the compact JSON text of the
materialized schema, key order included so message order stays that of the
schema) and, for schemas already frozen by :func:`dsh_actors.json.materialize`,
by identity, so a schema compiles once. A plain-dict schema is looked up by
its orjson text first (no materialize) when that text is provably faithful.
Hot paths should still hold the :class:`CompiledJsonSchema` (or a frozen
schema) rather than hand a plain dict over on every call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, final

import orjson

from ..errors import JsonSchemaError, LosslessJsonError, ToolArgsError
from ..json import FrozenDict, check_lossless, dumps, is_lossless, materialize, text_problem
from ._paths import child_path, index_path, json_text
from ._subset import check_json_schema, json_kind

__all__ = [
    "CompiledJsonSchema",
    "compile_json_schema",
    "args_error",
    "validate_args",
    "validate_json_schema_value",
]

_Ok = Callable[[Any], bool]
_Errs = Callable[[Any, str, list[str]], None]

_TYPE_WORDS: Final = {
    "object": "an object",
    "array": "an array",
    "string": "a string",
    "number": "a number",
    "integer": "an integer",
    "boolean": "a boolean",
    "null": "null",
}

#: Upper bound on cached validators; the oldest entry goes first.
_CACHE_LIMIT: Final = 4096


def _accept(value: Any) -> bool:
    return True


def _no_errors(value: Any, path: str, out: list[str]) -> None:
    return None


def _type_check(json_type: str) -> _Ok:
    """The exact-type predicate of one JSON type (jsonschema's Draft 2020-12
    semantics: bool is not a number; an integral float is an integer)."""
    if json_type == "string":
        return lambda v: type(v) is str
    if json_type == "integer":

        def is_integer(v: Any) -> bool:
            t = type(v)
            return t is int or (t is float and v.is_integer())

        return is_integer
    if json_type == "number":
        return lambda v: type(v) is int or type(v) is float
    if json_type == "boolean":
        return lambda v: type(v) is bool
    if json_type == "null":
        return lambda v: v is None
    if json_type == "object":
        return lambda v: type(v) is dict or type(v) is FrozenDict
    if json_type == "array":
        return lambda v: type(v) is list or type(v) is tuple
    raise AssertionError(f"unchecked type {json_type!r}")  # pragma: no cover


class _Compiled:
    """One compiled node: its two closures, and whether it accepts anything
    (so a parent can skip it altogether)."""

    __slots__ = ("ok", "errs", "accepts_any")

    def __init__(self, ok: _Ok, errs: _Errs, accepts_any: bool = False) -> None:
        self.ok = ok
        self.errs = errs
        self.accepts_any = accepts_any


_ANY: Final = _Compiled(_accept, _no_errors, accepts_any=True)


def _compile_node(node: Mapping[str, Any]) -> _Compiled:
    # Recursion depth is bounded by the schema depth (<= MAX_JSON_DEPTH),
    # which the subset check has already enforced.
    if "oneOf" in node:
        return _compile_one_of(node["oneOf"])
    json_type = node.get("type")
    if json_type is None:
        return _ANY
    if json_type == "object":
        return _compile_object(node)
    if json_type == "array":
        return _compile_array(node)
    return _compile_scalar(node, json_type)


def _compile_one_of(branches: Any) -> _Compiled:
    oks = tuple(_compile_node(b).ok for b in branches)

    def ok(v: Any) -> bool:
        matched = False
        for branch_ok in oks:
            if branch_ok(v):
                if matched:
                    return False
                matched = True
        return matched

    def errs(v: Any, path: str, out: list[str]) -> None:
        matched = sum(1 for branch_ok in oks if branch_ok(v))
        if matched != 1:
            out.append(f'"{path}" must match exactly one oneOf branch (matched {matched})')

    return _Compiled(ok, errs)


def _compile_scalar(node: Mapping[str, Any], json_type: str) -> _Compiled:
    is_type = _type_check(json_type)
    type_message = f"must be {_TYPE_WORDS[json_type]}"
    member: _Ok | None = None
    value_message = ""
    if "const" in node:
        # The subset check guarantees const is of the node's type (and in
        # enum when both are given), so once the type matched, == is JSON
        # equality: bools never meet numbers here, and 1 == 1.0 as in
        # jsonschema.
        const = node["const"]
        value_message = f"must be {json_text(const)}"

        def member(v: Any) -> bool:
            return bool(v == const)

    elif "enum" in node:
        allowed = frozenset(node["enum"])
        value_message = f"must be one of {json_text(node['enum'])}"

        def member(v: Any) -> bool:
            return v in allowed

    ok: _Ok
    if member is None:
        ok = is_type
    else:
        is_member = member

        def ok(v: Any) -> bool:
            return is_type(v) and is_member(v)

    def errs(v: Any, path: str, out: list[str]) -> None:
        if not is_type(v):
            out.append(f'"{path}" {type_message}')
        elif member is not None and not member(v):
            out.append(f'"{path}" {value_message}')

    return _Compiled(ok, errs)


def _compile_array(node: Mapping[str, Any]) -> _Compiled:
    items = _compile_node(node["items"]) if "items" in node else _ANY

    if items.accepts_any:

        def ok(v: Any) -> bool:
            return type(v) is list or type(v) is tuple

    else:
        item_ok = items.ok

        def ok(v: Any) -> bool:
            if type(v) is not list and type(v) is not tuple:
                return False
            for item in v:
                if not item_ok(item):
                    return False
            return True

    item_ok_ = items.ok
    item_errs = items.errs

    def errs(v: Any, path: str, out: list[str]) -> None:
        if type(v) is not list and type(v) is not tuple:
            out.append(f'"{path}" must be an array')
            return
        if items.accepts_any:
            return
        for i, item in enumerate(v):
            if not item_ok_(item):
                item_errs(item, index_path(path, i), out)

    return _Compiled(ok, errs)


def _compile_object(node: Mapping[str, Any]) -> _Compiled:
    properties: Mapping[str, Any] = node.get("properties", {})
    compiled = {name: _compile_node(sub) for name, sub in properties.items()}
    required = tuple(node.get("required", ()))
    closed = node.get("additionalProperties", True) is False
    declared = frozenset(properties)
    # Only the properties that constrain anything are checked on the hot path.
    checked = tuple((name, c.ok) for name, c in compiled.items() if not c.accepts_any)
    required_set = frozenset(required)
    # The slow path walks properties in schema order; required names are all
    # declared (the subset check guarantees it).
    ordered = tuple((name, name in required_set, c) for name, c in compiled.items())
    missing = object()

    def ok(v: Any) -> bool:
        if type(v) is not dict and type(v) is not FrozenDict:
            return False
        for name in required:
            if name not in v:
                return False
        if checked:
            get = v.get
            for name, prop_ok in checked:
                x = get(name, missing)
                if x is not missing and not prop_ok(x):
                    return False
        if closed and not declared.issuperset(v):
            return False
        return True

    def errs(v: Any, path: str, out: list[str]) -> None:
        if type(v) is not dict and type(v) is not FrozenDict:
            out.append(f'"{path}" must be an object')
            return
        for name, is_required, prop in ordered:
            if name not in v:
                if is_required:
                    out.append(f'missing required property "{child_path(path, name)}"')
            elif not prop.accepts_any:
                x = v[name]
                if not prop.ok(x):
                    prop.errs(x, child_path(path, name), out)
        if closed:
            for key in v:
                if key not in declared:
                    out.append(f'"{child_path(path, key)}" is not a declared property (additionalProperties: false)')

    return _Compiled(ok, errs)


@final
class CompiledJsonSchema:
    """A supported schema compiled once into a validator.

    Obtain one with :func:`compile_json_schema` (which caches). ``schema`` is
    the materialized (deep-frozen, detached) copy that was compiled, so later
    changes to the caller's dict cannot change what is enforced. Compares and
    hashes by schema content. Thread-safe: it holds no mutable state, so any
    thread may call it concurrently.
    """

    __slots__ = ("schema", "_key", "_ok", "_errs")

    schema: Any
    _key: str
    _ok: _Ok
    _errs: _Errs

    def __init__(self, schema: Any, key: str, compiled: _Compiled) -> None:
        self.schema = schema
        self._key = key
        self._ok = compiled.ok
        self._errs = compiled.errs

    def is_valid(self, value: Any) -> bool:
        """Whether ``value`` (lossless JSON; dicts or frozen mappings, lists
        or tuples) conforms. Builds no message: the fast path."""
        return self._ok(value)

    def validate(self, value: Any, path: str = "value") -> list[str]:
        """Every violation of ``value``, each naming its path from ``path``
        (empty: valid). Defaults are never filled in."""
        if self._ok(value):
            return []
        out: list[str] = []
        self._errs(value, path, out)
        if not out:  # pragma: no cover - would break the module invariant
            out.append(f'"{path}" does not match the schema')
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CompiledJsonSchema):
            return NotImplemented
        return self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        text = self._key if len(self._key) <= 80 else self._key[:77] + "..."
        return f"CompiledJsonSchema({text})"


_lock = threading.Lock()
# Invariant: every value is the validator compiled from the schema whose
# compact JSON text is the key.
_by_content: dict[str, CompiledJsonSchema] = {}
# Frozen roots only (they cannot change under us); the entry keeps the root
# alive, so its id cannot be reused while the entry exists.
_by_identity: dict[int, tuple[object, CompiledJsonSchema]] = {}
_compilations = 0


def _remember(cache: dict[Any, Any], key: Any, value: Any) -> None:
    if len(cache) >= _CACHE_LIMIT:
        cache.pop(next(iter(cache)))
    cache[key] = value


def _fast_key(schema: dict[str, Any]) -> str | None:
    """The cache key of a plain-dict schema without materializing it, or
    None when it cannot be trusted.

    orjson with ``OPT_PASSTHROUGH_SUBCLASS`` refuses every subclass (str
    enums, OrderedDict, FrozenDict), non-str keys, ints out of range, lone
    surrogates, cycles and deep nesting, so its text equals the canonical key
    of the materialized schema, with one conflation: it writes NaN and
    infinities as ``null``. A text without ``null`` has neither."""
    try:
        text = orjson.dumps(schema, option=orjson.OPT_PASSTHROUGH_SUBCLASS)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return None
    if b"null" in text:
        return None
    return text.decode()


def compile_json_schema(schema: object) -> CompiledJsonSchema:
    """Check ``schema`` against the enforced subset and compile it, once.

    Returns the cached :class:`CompiledJsonSchema` when the same schema
    (the same frozen object, or equal content) was compiled before; a
    :class:`CompiledJsonSchema` passed in is returned as it is. Raises
    :class:`JsonSchemaError` listing every violation when the schema is
    unsupported."""
    global _compilations
    if type(schema) is CompiledJsonSchema:
        return schema
    if type(schema) is FrozenDict:
        hit = _by_identity.get(id(schema))
        if hit is not None and hit[0] is schema:
            return hit[1]
    elif type(schema) is dict:
        fast = _fast_key(schema)
        if fast is not None:
            hit_ = _by_content.get(fast)
            if hit_ is not None:
                return hit_
    try:
        frozen = materialize(schema, path="schema")
    except LosslessJsonError as err:
        # Not even lossless: let the subset check name every problem.
        raise JsonSchemaError(check_json_schema(schema) or [str(err)]) from None
    # Faithful: a lossless value has exact types, so equal text means the
    # same schema (True and 1, or 1 and 1.0, never share a key).
    key = dumps(frozen).decode()
    compiled = _by_content.get(key)
    if compiled is None:
        violations = check_json_schema(frozen)
        if violations:
            raise JsonSchemaError(violations)
        assert isinstance(frozen, dict)  # the subset check accepted it: a mapping
        compiled = CompiledJsonSchema(frozen, key, _compile_node(frozen))
        with _lock:
            _compilations += 1
            compiled = _by_content.setdefault(key, compiled)
            if len(_by_content) > _CACHE_LIMIT:
                _by_content.pop(next(iter(_by_content)))
    if type(schema) is FrozenDict:
        with _lock:
            _remember(_by_identity, id(schema), (schema, compiled))
    return compiled


def lossless_violation(value: Any, path: str = "value") -> str | None:
    """Why ``value`` is not lossless JSON, as a violation naming its path
    (``"value[2]": float nan is not lossless JSON``, ``"value.a": cycle:
    ...``, ``"value[0]...": nesting deeper than 256``), or ``None``. Builds
    nothing; a ``FrozenDict`` answers in O(1)."""
    if type(value) is FrozenDict:
        return None
    try:
        check_lossless(value, path)
    except LosslessJsonError as err:
        return f'"{err.path}": {err.problem}'
    return None


def validate_json_schema_value(schema: object, value: Any, path: str = "value") -> list[str]:
    """The violations of ``value`` against ``schema`` (empty: valid), each
    naming its path from ``path``. ``schema`` may be raw (checked and
    compiled once, cached) or a :class:`CompiledJsonSchema`; an unsupported
    schema raises :class:`JsonSchemaError`.

    Total over any Python value: one that is not lossless JSON (NaN, an
    infinity, ``-0.0``, an int out of range, a str enum or any other
    subclass, a dict with a non-str key, a cycle, nesting deeper than
    ``MAX_JSON_DEPTH``) gives the one violation saying where, whatever the
    schema (``{}`` included). The compiled form
    (:meth:`CompiledJsonSchema.validate`) skips that check: it is for values
    already materialized, as the pipeline's are."""
    compiled = compile_json_schema(schema)
    problem = lossless_violation(value, path)
    if problem is not None:
        return [problem]
    return compiled.validate(value, path)


def validate_args(schema: object, args: Any, *, path: str = "value") -> None:
    """Raise :class:`ToolArgsError` listing every violation of ``args``
    against a tool's parameter schema (raw or compiled); arguments that are
    not lossless JSON are one violation, as in
    :func:`validate_json_schema_value`.

    Paths are rooted at ``"value"`` (``invalid arguments: "value.x" must be
    a string``), the same root as every other validation message, so a
    model sees one vocabulary for arguments and outputs."""
    violations = validate_json_schema_value(schema, args, path)
    if violations:
        raise args_error(args, violations)


def args_error(args: Any, violations: Sequence[str]) -> ToolArgsError:
    """The error for arguments that broke a parameter schema. Text that is
    not JSON (the batch intake keeps a model's argument text as it is when
    it does not parse) gets what is wrong with its JSON and where
    (``arguments are not valid JSON: unexpected end of data at line 1
    column 17``) instead of ``"value" must be an object``, which would not
    tell the model what to fix; arguments that are JSON but no object (the
    intake keeps the text of a JSON string as sent) are named by their kind,
    and a JSON string that holds a JSON object as encoded twice; anything
    else (a string that is not lossless JSON included), its
    ``violations``."""
    if type(args) is str and is_lossless(args):
        problem = text_problem(args)
        if problem is not None:
            return ToolArgsError([f"arguments are not valid JSON: {problem}"])
        inner = orjson.loads(args)
        if type(inner) is str:
            if inner.lstrip().startswith("{") and text_problem(inner) is None:
                return ToolArgsError(
                    [_NOT_AN_OBJECT + "a JSON string that holds one (encoded twice): send the object itself"]
                )
            return ToolArgsError([_NOT_AN_OBJECT + "a string"])
    elif not isinstance(args, Mapping) and is_lossless(args):
        return ToolArgsError([_NOT_AN_OBJECT + _TYPE_WORDS[json_kind(args)]])
    return ToolArgsError(violations)


_NOT_AN_OBJECT: Final = "the arguments must be a JSON object of the tool's parameters, got "
