"""Full enforcement: any Draft 2020-12 (or draft-07) schema, checked by jsonschema.

Raw definitions opt in with ``ToolDefinition(schema_mode="full")``, and
:mod:`dsh_actors.mcp` does so for the tools it mounts. Their
schemas may use every keyword of the dialect (``anyOf``, ``minimum``,
``pattern``, ``format``, ``$defs``/``$ref``...). The schema is compiled once,
by :func:`compile_full_json_schema`, into a validator with the interface of
:class:`~dsh_actors.schema.CompiledJsonSchema` (``schema``, ``is_valid``,
``validate``). A schema that the enforced subset already covers compiles to
the subset's fast validator, which gives the same verdicts (the differential
test pins that). Only schemas outside the subset pay for jsonschema.

What registration refuses, every problem listed with its path from
``schema``:

* a schema that is not lossless JSON (docs/reference.md, section 2);
* a root ``$schema`` naming another dialect (:mod:`._dialect`);
* a schema the dialect's meta-schema rejects;
* a reference (``$ref``, ``$dynamicRef``) that is not local (anything but a
  fragment: ``#``, ``#/$defs/x``, ``#anchor``), or a local one that does not
  resolve. Nothing is ever fetched;
* an ``$id`` below the root (an embedded resource would move the base of the
  references under it);
* a standard ``format`` this process cannot assert (:mod:`._formats`);
* with ``object_root``, a root that does not declare ``"type": "object"``.

Values are checked with exact JSON types, as in the subset: ``True`` is not
a number, ``1.0`` is an integer, tuples are arrays, frozen mappings are
objects. Violations name their path from ``value``, and the common keywords
use the subset's words (see :mod:`dsh_actors.schema`). A value nested too
deeply for the recursive jsonschema validator gives a violation, never a
``RecursionError``.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final, final
from urllib.parse import urlsplit

from jsonschema import Draft7Validator, Draft202012Validator, ValidationError, validators
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT7, DRAFT202012

from ..errors import JsonSchemaError, LosslessJsonError
from ..json import FrozenDict, dumps, materialize, thaw
from ._compile import CompiledJsonSchema, compile_json_schema
from ._dialect import DIALECTS, dialect_of, dialect_problem
from ._formats import STANDARD_FORMATS, format_checker, unchecked_standard_formats
from ._paths import child_path, index_path, json_text, quote
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


def _is_object(checker: Any, value: Any) -> bool:
    return type(value) is dict or type(value) is FrozenDict


def _is_array(checker: Any, value: Any) -> bool:
    return type(value) is list or type(value) is tuple


def _is_integer(checker: Any, value: Any) -> bool:
    t = type(value)
    return t is int or (t is float and value.is_integer())


def _is_number(checker: Any, value: Any) -> bool:
    return type(value) is int or type(value) is float


def _is_string(checker: Any, value: Any) -> bool:
    return type(value) is str


def _is_boolean(checker: Any, value: Any) -> bool:
    return type(value) is bool


def _is_null(checker: Any, value: Any) -> bool:
    return value is None


def _exact(base: Any) -> Any:
    checker = base.TYPE_CHECKER.redefine_many(
        {
            "object": _is_object,
            "array": _is_array,
            "integer": _is_integer,
            "number": _is_number,
            "string": _is_string,
            "boolean": _is_boolean,
            "null": _is_null,
        }
    )
    return validators.extend(base, type_checker=checker)


_VALIDATORS: Final = {"2020-12": _exact(Draft202012Validator), "draft-07": _exact(Draft7Validator)}
_META: Final = {"2020-12": Draft202012Validator, "draft-07": Draft7Validator}
_SPECS: Final = {"2020-12": DRAFT202012, "draft-07": DRAFT7}


def _schema_path(parts: Sequence[object]) -> str:
    path = "schema"
    for part in parts:
        path = index_path(path, part) if type(part) is int else child_path(path, str(part))
    return path


def _value_path(root: str, parts: Iterator[object] | Sequence[object]) -> str:
    path = root
    for part in parts:
        path = index_path(path, part) if type(part) is int else child_path(path, str(part))
    return path


def _walk(schema: Any) -> Iterator[tuple[Any, list[object]]]:
    """Every schema node (a mapping) with its path, without recursion."""
    stack: list[tuple[Any, list[object]]] = [(schema, [])]
    while stack:
        node, parts = stack.pop()
        if not isinstance(node, Mapping):
            if isinstance(node, list):
                for i, item in enumerate(node):
                    stack.append((item, [*parts, i]))
            continue
        yield node, parts
        for key, sub in node.items():
            if key in _DATA_KEYWORDS:
                continue
            if key in _NAMED_SCHEMAS and isinstance(sub, Mapping):
                for name, named in sub.items():
                    stack.append((named, [*parts, key, name]))
            elif isinstance(sub, (Mapping, list)):
                stack.append((sub, [*parts, key]))


def check_full_json_schema(schema: object, *, object_root: bool = False) -> list[str]:
    """Every reason full mode refuses ``schema`` (empty: it is enforceable).
    See the module docstring for the rules."""
    try:
        frozen = materialize(schema, path="schema")
    except LosslessJsonError as err:
        return [str(err)]
    return _problems(thaw(frozen), object_root)[0]


def _problems(plain: Any, object_root: bool) -> tuple[list[str], str]:
    out: list[str] = []
    if type(plain) is not dict and type(plain) is not bool:
        return [f"schema: a schema must be a JSON object or a boolean (got {json_kind(plain)})"], "2020-12"
    if type(plain) is dict and "$schema" in plain:
        problem = dialect_problem(plain["$schema"])
        if problem is not None:
            return [f"{child_path('schema', '$schema')}: {problem}"], "2020-12"
    dialect = dialect_of(plain)
    meta = _META[dialect]
    meta_validator = meta(meta.META_SCHEMA, format_checker=meta.FORMAT_CHECKER)
    try:
        meta_errors = list(meta_validator.iter_errors(plain))
    except RecursionError:
        return ["schema: is nested too deeply to check"], dialect
    for error in meta_errors:
        out.append(f"{_schema_path(list(error.absolute_path))}: {error.message}")
    if out:
        return out, dialect
    if object_root and (type(plain) is not dict or plain.get("type") != "object"):
        shown = json_text(plain.get("type")) if type(plain) is dict and "type" in plain else "no type"
        out.append(f'schema.type: the root must declare "type": "object" (got {shown})')
    if type(plain) is bool:
        return out, dialect
    unchecked = unchecked_standard_formats(dialect)
    resolver = Registry().with_resource("", _SPECS[dialect].create_resource(plain)).resolver(base_uri="")
    for node, parts in _walk(plain):
        if parts and "$id" in node and type(node["$id"]) is str and not node["$id"].startswith("#"):
            out.append(f"{_schema_path([*parts, '$id'])}: embedded resources ($id below the root) are not supported")
        fmt = node.get("format")
        if type(fmt) is str and fmt in unchecked and fmt in STANDARD_FORMATS:
            out.append(
                f"{_schema_path([*parts, 'format'])}: format {quote(fmt)} cannot be asserted here "
                "(its checker needs a package that is not installed)"
            )
        for keyword in ("$ref", "$dynamicRef", "$recursiveRef"):
            ref = node.get(keyword)
            if type(ref) is not str:
                continue
            where = _schema_path([*parts, keyword])
            split = urlsplit(ref)
            if split.scheme or split.netloc or split.path or split.query or not ref.startswith("#"):
                out.append(
                    f"{where}: remote reference {quote(ref)} is not supported; "
                    'only local references ("#/$defs/...") are resolved'
                )
                continue
            try:
                resolver.lookup(ref)
            except Unresolvable:
                out.append(f"{where}: reference {quote(ref)} does not resolve within the schema")
    return out, dialect


_FALSE: Final[dict[str, Any]] = {"not": {}}
_SCHEMA_MAPS: Final = frozenset({"properties", "patternProperties", "dependentSchemas", "$defs", "definitions"})
_SCHEMA_LISTS: Final = frozenset({"prefixItems", "allOf", "anyOf", "oneOf"})


def _no_false_subschemas(schema: Any) -> Any:
    """``schema`` with each ``false`` subschema under a property (or in a
    list of branches) written ``{"not": {}}``: the same verdicts, but
    jsonschema then reports the violation at the value's own path (for a
    bare ``false`` it leaves the last step out). ``additionalProperties``,
    ``items`` and the like keep their ``false``: their own messages name
    the keys. The paths a ``$ref`` points along are unchanged."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, sub in schema.items():
        if key in _DATA_KEYWORDS:
            out[key] = sub
        elif key in _SCHEMA_MAPS and isinstance(sub, dict):
            out[key] = {k: dict(_FALSE) if v is False else _no_false_subschemas(v) for k, v in sub.items()}
        elif key in _SCHEMA_LISTS and isinstance(sub, list):
            out[key] = [dict(_FALSE) if v is False else _no_false_subschemas(v) for v in sub]
        elif isinstance(sub, dict):
            out[key] = _no_false_subschemas(sub)
        else:
            out[key] = sub
    return out


@final
class FullJsonSchema:
    """A schema outside the subset, compiled once into a jsonschema validator
    (Draft 2020-12, or draft-07 when its root says so) with exact JSON types
    and asserted formats.

    Same interface as :class:`~dsh_actors.schema.CompiledJsonSchema`:
    ``schema`` is the detached deep-frozen copy, ``is_valid`` the fast
    check, ``validate`` every violation with its path. Thread-safe (a
    jsonschema validator keeps no per-call state); compares by content.
    """

    __slots__ = ("schema", "dialect", "_key", "_validator")

    schema: Any
    dialect: str
    _key: str
    _validator: Any

    def __init__(self, schema: Any, key: str, plain: Any, dialect: str) -> None:
        self.schema = schema
        self.dialect = dialect
        self._key = key
        self._validator = _VALIDATORS[dialect](_no_false_subschemas(plain), format_checker=format_checker(dialect))

    def is_valid(self, value: Any) -> bool:
        """Whether ``value`` (lossless JSON) conforms. A value too deeply
        nested to check does not."""
        try:
            return bool(self._validator.is_valid(value))
        except RecursionError:
            return False

    def validate(self, value: Any, path: str = "value") -> list[str]:
        """Every violation of ``value``, each naming its path from ``path``
        (empty: valid). Defaults are never filled in."""
        try:
            errors = list(self._validator.iter_errors(value))
        except RecursionError:
            return [f'"{path}" is nested too deeply to validate against this schema']
        out: list[str] = []
        seen: set[str] = set()
        for error in errors:
            for message in _messages(self._validator, error, path):
                if message not in seen:
                    seen.add(message)
                    out.append(message)
        return out

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


_ANNOTATIONS: Final = frozenset({"title", "description", "default", "examples", "$comment"})


def _branch_types(branches: Any) -> list[str] | None:
    """The types of branches that each say only ``"type": <one type>`` (an
    ``Optional[int]``'s ``anyOf``), else None."""
    if not isinstance(branches, Sequence):
        return None
    types: list[str] = []
    for branch in branches:
        if not isinstance(branch, Mapping) or type(branch.get("type")) is not str:
            return None
        if any(key != "type" and key not in _ANNOTATIONS for key in branch):
            return None
        types.append(branch["type"])
    return types


def _only_compatible_branch(error: ValidationError) -> list[ValidationError] | None:
    """The errors of the one failing branch whose type fits the value (its
    errors include no ``type`` error at the value itself), else None."""
    here = list(error.absolute_path)
    by_branch: dict[object, list[ValidationError]] = {}
    for sub in error.context or ():
        if sub.relative_schema_path:
            by_branch.setdefault(sub.relative_schema_path[0], []).append(sub)
    compatible = [
        errors
        for errors in by_branch.values()
        if not any(e.validator == "type" and list(e.absolute_path) == here for e in errors)
    ]
    return compatible[0] if len(compatible) == 1 else None


def _is_type(validator: Any, instance: Any, json_type: str) -> bool:
    try:
        return bool(validator.is_type(instance, json_type))
    except Exception:  # noqa: BLE001 - an unknown type name
        return False


def _count_matches(validator: Any, branches: Sequence[Any], instance: Any) -> int | None:
    try:
        return sum(1 for branch in branches if validator.evolve(schema=branch).is_valid(instance))
    except Exception:  # noqa: BLE001 - a count for the message only
        return None


def _messages(validator: Any, error: ValidationError, root: str) -> list[str]:
    keyword = error.validator
    expected: Any = error.validator_value
    instance = error.instance
    path = _value_path(root, error.absolute_path)
    if keyword == "type":
        return [f'"{path}" {_type_message(expected)}']
    if keyword == "required" and isinstance(instance, Mapping):
        return [f'missing required property "{child_path(path, name)}"' for name in expected if name not in instance]
    if keyword == "additionalProperties" and expected is False and isinstance(instance, Mapping):
        parent = error.schema if isinstance(error.schema, Mapping) else {}
        declared = parent.get("properties", {})
        patterns = parent.get("patternProperties", {})
        extras = [key for key in instance if key not in declared and not any(re.search(p, key) for p in patterns)]
        return [f'"{child_path(path, key)}" is not a declared property (additionalProperties: false)' for key in extras]
    if keyword == "enum":
        return [f'"{path}" must be one of {_shown(expected)}']
    if keyword == "const":
        return [f'"{path}" must be {_shown(expected)}']
    if keyword in ("anyOf", "oneOf") and error.context:
        # No branch matched. When exactly one branch is of the value's type
        # (an Optional[X]'s X), its own violations say what is wrong.
        chosen = _only_compatible_branch(error)
        if chosen is not None:
            out: list[str] = []
            for sub in chosen:
                out.extend(_messages(validator, sub, root))
            return out
        types = _branch_types(expected)
        if types is not None and not any(_is_type(validator, instance, t) for t in types):
            return [f'"{path}" {_type_message(types)}']
    if keyword == "oneOf":
        matched = 0 if error.context else _count_matches(validator, expected, instance)
        count = "more than one" if matched is None else str(matched)
        return [f'"{path}" must match exactly one oneOf branch (matched {count})']
    if keyword == "anyOf":
        return [f'"{path}" must match at least one anyOf branch']
    if keyword == "dependentRequired" and isinstance(instance, Mapping) and isinstance(expected, Mapping):
        return [
            f'missing required property "{child_path(path, dep)}" (required by "{child_path(path, name)}")'
            for name, deps in expected.items()
            if name in instance and isinstance(deps, Sequence)
            for dep in deps
            if dep not in instance
        ]
    if keyword == "items" and expected is False and isinstance(error.schema, Mapping):
        prefix = error.schema.get("prefixItems", ())
        allowed = len(prefix) if isinstance(prefix, Sequence) else 0
        return [f'"{path}" must have at most {_plural(allowed, "item")} (no items beyond "prefixItems")']
    if keyword == "not" and expected == {}:
        return [f'"{path}" is not allowed here (false schema)']
    simple = _SIMPLE.get(keyword)
    if simple is not None:
        if "propertyNames" in error.absolute_schema_path and type(instance) is str:
            # The instance is a property name of the object at ``path``.
            return [f'the property name {quote(instance)} of "{path}" {simple(expected)}']
        return [f'"{path}" {simple(expected)}']
    if keyword is None or error.schema is False:
        return [f'"{path}" is not allowed here (false schema)']
    return [f'"{path}" does not satisfy {quote(str(keyword))}: {error.message}']


def _shown(value: Any) -> str:
    try:
        return json_text(value)
    except (TypeError, ValueError):  # pragma: no cover - checked schemas are lossless
        return repr(value)


def _plural(n: Any, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


_SIMPLE: Final[dict[str, Callable[[Any], str]]] = {
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
    "not": lambda x: 'must not match the "not" schema',
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
        problems, dialect = _problems(plain, object_root)
        if problems:
            raise JsonSchemaError(problems)
        compiled = FullJsonSchema(frozen, key[0], plain, dialect)
    with _lock:
        compiled = _cache.setdefault(key, compiled)
        if len(_cache) > _CACHE_LIMIT:
            _cache.pop(next(iter(_cache)))
    return compiled


assert set(DIALECTS.values()) == set(_VALIDATORS)
