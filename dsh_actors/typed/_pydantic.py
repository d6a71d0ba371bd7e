"""pydantic-core behind the interface of the compiled schemas.

A :class:`PydanticEnforcer` wraps a ``SchemaValidator`` built from the
core schema pydantic made for a type (once, at decoration, by
:func:`json_validator`) and answers what a compiled JSON Schema
answers (``schema``, ``is_valid``, ``validate``), so registration and the
pipeline treat a :func:`~dsh_actors.tool` definition like any other. Values
are checked in JSON mode, from their JSON text: what a model sent (or a
tool's value in its JSON form, read as pydantic dumped it) is judged as
pydantic judges JSON, with the type's own configuration (lax by default;
``Strict()`` or ``ConfigDict(strict=True)`` where the author asks).

Violations use the words of the subset's messages where they mean the same
thing (``missing required property "value.a"``, ``"value.n" must be an
integer``; a ``Literal``'s or an ``Enum``'s values in JSON, ``"value.k"
must be one of ["cat","dog"]``); anything else keeps pydantic's message
(``"value.n": Input should be greater than or equal to 0``). Paths are
data paths from ``value``: pydantic's location tags that are not keys of
the data (a union member's name) are left out of paths; they tell which
member of a union each error is from, so a value that no member takes gets its members'
violations grouped by member (see :func:`violations_of`).
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, fields, is_dataclass
from enum import Enum
from typing import Any, Final, final

from pydantic import BaseModel, ValidationError
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaWarningKind
from pydantic_core import PydanticSerializationError, SchemaValidator, to_json

from ..errors import ToolOutputError, safe_str
from ..json import FrozenDict, dumps, path_for_index, path_for_key, thaw

__all__ = [
    "CoreSchemaRefs",
    "PydanticEnforcer",
    "ToolJsonSchema",
    "bytes_error",
    "json_validator",
    "serialization_error",
    "violations_of",
    "without_negative_zero",
]

_WORDS: Final = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "string_type": "a string",
    "bool_type": "a boolean",
    "bool_parsing": "a boolean",
    "none_required": "null",
    "list_type": "an array",
    "tuple_type": "an array",
    "set_type": "an array",
    "frozen_set_type": "an array",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "dataclass_type": "an object",
    "dataclass_args_type": "an object",
    "typed_dict_type": "an object",
    # (pydantic's words show the class: "a valid path for <class 'pathlib.Path'>".)
    "path_type": "a string",
    "bytes_type": "a string",
}


#: The types of the values JSON text gives: an input of another type is a
#: tool's value (a Python object), named in its violation.
_JSON_TYPES: Final = frozenset({FrozenDict, dict, list, tuple, str, int, float, bool, type(None)})

#: The type errors of a class (a model, a dataclass, a ``dict``), whose
#: message says which: "must be an object" misleads for an object of another
#: class.
_CLASS_KINDS: Final = frozenset(
    {"dict_type", "model_type", "model_attributes_type", "dataclass_type", "dataclass_args_type", "typed_dict_type"}
)

#: The errors of a value that is none of a few (a ``Literal``'s, an
#: ``Enum``'s), whose context lists them: worded as the subset words
#: ``const`` and ``enum``, in JSON (see :func:`_values_word`).
_VALUE_KINDS: Final = frozenset({"literal_error", "enum"})

#: pydantic's error types that mean what another one means for JSON data: a
#: dataclass is validated as a call with keyword arguments, a JSON object's
#: properties.
_KINDS: Final = {
    "unexpected_keyword_argument": "extra_forbidden",
    "missing_argument": "missing",
    "missing_keyword_only_argument": "missing",
    "missing_positional_only_argument": "missing",
}


class ToolJsonSchema(GenerateJsonSchema):
    """pydantic's JSON Schema without a title on every property (the
    property's name says it; a model reads fewer tokens), and without
    pydantic's warnings of what it leaves out of a schema: a default it
    cannot write as JSON (a sentinel, ``since: object = _UNSET``: the
    parameter is optional, shown without its default, and the function
    gets its own default when the model leaves it out), a union member or
    discriminator it cannot describe. Those are warnings pydantic emits
    through :mod:`warnings`, which would print to stderr or, under ``-W
    error``, refuse the tool naming nothing: left out, the tool is made the
    same way whatever the warning filters."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def emit_warning(self, kind: JsonSchemaWarningKind, detail: str) -> None:
        return None


def _data_path(
    root: str, loc: tuple[int | str, ...], data: Any, missing: bool
) -> tuple[str, str | None, tuple[tuple[str, str], ...]]:
    """The path of pydantic's ``loc`` in ``data``: each part that is a key
    (or an index) of the value reached so far; other parts are tags. With
    the key, when ``loc`` names a mapping's key rather than a value
    (pydantic's ``[key]`` tag after it, ``dict[int, str]``): the mapping's
    path and that key. Last, the union members ``loc`` went through: each
    tag (a member's name, or a discriminator's value) with the path of the
    value that union judged, outermost first."""
    path = root
    parent = root  # the path before the last key stepped into
    stepped: str | None = None  # that key, while it is the last part walked
    current = data
    last = len(loc) - 1
    members: list[tuple[str, str]] = []
    for i, part in enumerate(loc):
        key, stepped = stepped, None
        if not isinstance(part, str):
            if isinstance(current, (list, tuple)) and -len(current) <= part < len(current):
                path = path_for_index(path, part)
                current = current[part]
            elif i == last and missing:  # (a tuple's item past the array's end)
                path = path_for_index(path, part)
            continue
        if isinstance(current, Mapping):
            if part in current:
                parent, path, stepped = path, path_for_key(path, part), part
                current = current[part]
                continue
        elif current is not None and not isinstance(current, (str, int, float, list, tuple)):
            attribute = getattr(current, part, _MISSING)
            if attribute is not _MISSING:
                path = path_for_key(path, part)
                current = attribute
                continue
        if part == "[key]" and key is not None:
            return parent, key, tuple(members)  # (the rest are tags: a union member's name)
        if i == last and missing:
            path = path_for_key(path, part)
        elif part != "[key]":
            members.append((path, part))
    return path, None, tuple(members)


_MISSING: Final = object()


@dataclass(frozen=True, slots=True)
class _Error:
    """One of pydantic's errors, placed in the data: ``subject`` (its
    quoted path, or a mapping's ``key`` and the mapping's ``path``), the union
    members it went through (see :func:`_data_path`), and its words: what
    the value must be when the subset has words for it (``an integer``,
    ``"auto"``), else pydantic's message."""

    subject: str
    path: str
    key: str | None
    members: tuple[tuple[str, str], ...]
    kind: str
    word: str | None  # "must be <word>": of a type or of a few values (see _WORDS, _VALUE_KINDS)
    nullable: bool  # whether null is allowed there too (see _nullable_at): "must be <word> or null"
    message: str
    got: str  # the Python type of a value JSON has no word for, as " (got T)"


class CoreSchemaRefs:
    """A core schema for :func:`violations_of` (``schema``), with its refs
    (:func:`_collect_refs`), collected the first time a violation needs
    them and kept: one per validator (:class:`PydanticEnforcer`), so a
    tool's schema is walked for its refs at most once, not once per failed
    validation, and they go with it. Any thread may read it (two that
    collect at once each build the same refs; one is kept)."""

    __slots__ = ("schema", "_definitions")

    def __init__(self, schema: Any) -> None:
        self.schema = schema
        self._definitions: dict[str, Any] | None = None

    def definitions(self) -> dict[str, Any]:
        found = self._definitions
        if found is None:
            found = {}
            _collect_refs(self.schema, found)
            self._definitions = found
        return found


def violations_of(
    err: ValidationError,
    data: Any,
    root: str = "value",
    schema: CoreSchemaRefs | None = None,
    under: Collection[str] = (),
) -> list[str]:
    """``err``'s errors as violations naming their data paths from ``root``,
    in pydantic's order, each once. With ``schema`` (the core schema that
    made ``err``, with its refs), a value that must be of a type (or one of
    a few values) where ``null`` is allowed too is told so (``int | None``: ``"value.x" must be
    an integer or null``; pydantic reports only the inner type's error). The types one value failed (each member
    of a union, ``int | str``) are one violation: ``"value.v" must be an
    integer or a string``, not one a member, which would read as a
    contradiction; a ``Literal``'s values are told with them
    (``Literal["auto"] | int``: ``"value.x" must be "auto" or an integer``).
    A value that no member of a union takes gets the violations of the
    members of its type (a member that only says the value is not of its
    type, or not one of its values, is left out); with one such member
    (``Circle | None``, ``Circle | int``, or the member a discriminator
    picks), that member's violations as they are; with several, one
    violation that names each member with its own: ``"value.shape" matches
    none of its alternatives: Circle [missing required property
    "value.shape.radius"], Square [...]``. A discriminated union's unknown
    tag is told at its key, as a ``Literal``'s values. With ``under``, only
    the errors inside those properties of ``data`` (the key an error's
    location starts with; as if ``err`` had no other)."""
    errors: list[_Error] = []
    for error in err.errors(include_url=False):
        kind = _KINDS.get(error["type"], error["type"])
        loc = error["loc"]
        if under and (not loc or loc[0] not in under):
            continue
        path, key, members = _data_path(root, loc, data, kind == "missing")
        if kind == "missing" and loc and type(loc[-1]) is int:
            kind = "missing_item"  # a tuple's item: the array is too short
        ctx = error.get("ctx", {})
        word = _values_word(ctx.get("expected")) if kind in _VALUE_KINDS else _WORDS.get(kind)
        if kind == "union_tag_invalid" and key is None:  # a discriminated union's tag: told at its key, as values
            tag = _tag_key(ctx.get("discriminator"), error["input"])
            word = None if tag is None else _values_word(ctx.get("expected_tags"))
            if tag is not None and word is not None:
                path = path_for_key(path, tag)
        subject = f'"{path}"' if key is None else f'key {dumps(key).decode()} of "{path}"'
        # A tool's value is a Python object: one that JSON has no word for is named.
        got = "" if type(error.get("input")) in _JSON_TYPES else f" (got {type(error['input']).__qualname__})"
        nullable = False
        if word is not None and schema is not None:
            nullable = _nullable_at(schema.schema, loc, schema.definitions())
        errors.append(_Error(subject, path, key, members, kind, word, nullable, error["msg"], got))
    return _violations(errors, 0) or [f'"{root}" does not match the schema']


def _violations(errors: list[_Error], depth: int) -> list[str]:
    """The violations of ``errors``, whose first ``depth`` union members
    are accounted for; those that went through one more are told by
    :func:`_union_violations`, where the first of them stood."""
    out: list[str | list[_Error]] = []  # a list: the errors of a union's members, told where the first stood
    typed: dict[str, tuple[int, list[str]]] = {}  # subject -> (its line in out, the types it must be, null last)
    unions: dict[str, list[_Error]] = {}  # the path of a union's value -> the errors of its members
    for error in errors:
        subject, kind, word, got = error.subject, error.kind, error.word, error.got
        if len(error.members) > depth:
            at = error.members[depth][0]
            union = unions.get(at)
            if union is None:
                union = unions[at] = []
                out.append(union)
            union.append(error)
            continue
        if word is not None and not (got and kind in _CLASS_KINDS):
            known = typed.get(subject)
            if known is None:
                known = typed[subject] = (len(out), [])
                out.append("")
            words = known[1]
            if word not in words:
                words.insert(len(words) - (words[-1:] == ["null"]), word)  # (null stays last)
            if error.nullable and "null" not in words:
                words.append("null")
            out[known[0]] = f"{subject} must be {' or '.join(words)}{got}"
            continue
        if kind == "missing" and error.key is None:
            out.append(f'missing required property "{error.path}"')
        elif kind == "missing_item" and error.key is None:
            out.append(f'missing required item "{error.path}"')
        elif kind == "extra_forbidden" and error.key is None:
            out.append(f'"{error.path}" is not a declared property (additionalProperties: false)')
        else:
            out.append(f"{subject}: {error.message}{got}")
    lines: dict[str, None] = {}  # (each once, in order)
    for item in out:
        lines.update(dict.fromkeys([item] if isinstance(item, str) else _union_violations(item, depth)))
    return list(lines)


def _union_violations(errors: list[_Error], depth: int) -> list[str]:
    """The violations of a value that no member of a union takes:
    ``errors`` are its members' (each went through ``depth`` unions
    before), in the members' order."""
    at = errors[0].members[depth][0]
    by_member: dict[str, list[_Error]] = {}
    for error in errors:
        by_member.setdefault(error.members[depth][1], []).append(error)
    # A member is of the value's type unless all it says is that the value is
    # not (in words: not of its type, or none of its values; or naming the
    # class a tool's value is not).
    fitting = {
        member: own
        for member, own in by_member.items()
        if not all(e.word is not None and e.subject == f'"{at}"' for e in own)
    }
    if len(fitting) < 2:  # none (the types it must be, in one violation) or one: its violations
        return _violations(next(iter(fitting.values()), errors), depth + 1)
    each = ", ".join(f"{member} [{'; '.join(_violations(own, depth + 1))}]" for member, own in fitting.items())
    return [f'"{at}" matches none of its alternatives: {each}']


def _nullable_at(schema: Any, loc: tuple[int | str, ...], definitions: dict[str, Any]) -> bool:
    """Whether the core ``schema`` allows ``null`` where pydantic's ``loc``
    leads (a ``nullable`` schema there, or around the union a member's tag
    in ``loc`` names). Walked only for a failing value; False when ``loc``
    does not lead through ``schema`` to one answer (a union member its tag
    does not name alone, a key of no field). ``definitions``: its refs
    (:func:`_collect_refs`)."""
    answers: set[bool] = set()
    _walk_loc(schema, loc, 0, False, definitions, answers, set())
    return answers == {True}


def _collect_refs(node: Any, definitions: dict[str, Any]) -> None:
    """Each schema of ``node`` that has a ``ref``, under it."""
    if type(node) is dict:
        if type(node.get("ref")) is str:
            definitions.setdefault(node["ref"], node)
        for key, item in node.items():
            if key not in _NOT_VALIDATED:
                _collect_refs(item, definitions)
    elif type(node) is list or type(node) is tuple:
        for item in node:
            _collect_refs(item, definitions)


#: The keys of the schemas a core schema wraps without a step of ``loc``.
_INNER: Final = ("schema", "steps", "lax_schema", "strict_schema", "json_schema", "python_schema")


def _walk_loc(
    node: Any,
    loc: tuple[int | str, ...],
    at: int,
    nullable: bool,
    definitions: dict[str, Any],
    answers: set[bool],
    seen: set[tuple[int, int]],
) -> None:
    """Adds to ``answers`` whether null is allowed where ``loc[at:]`` leads
    from ``node`` (``nullable``: a ``nullable`` schema stood since the last
    step into the data)."""
    if type(node) is not dict or (id(node), at) in seen:
        return
    seen.add((id(node), at))
    kind = node.get("type")
    if kind == "definition-ref":
        return _walk_loc(definitions.get(node.get("schema_ref", "")), loc, at, nullable, definitions, answers, seen)
    if kind == "nullable":
        nullable = True
    elif kind == "union" and at < len(loc):  # a member's tag: no step into the data
        for choice in node.get("choices", ()):
            if type(choice) is tuple and len(choice) == 2:
                if choice[1] == loc[at]:
                    _walk_loc(choice[0], loc, at + 1, nullable, definitions, answers, seen)
            else:  # (pydantic names it: tried, a wrong one seldom leads as far)
                _walk_loc(choice, loc, at + 1, nullable, definitions, answers, seen)
        return
    elif kind == "tagged-union" and at < len(loc):
        choices = node.get("choices", {})
        named = [choice for tag, choice in choices.items() if str(_json_value(tag)) == str(loc[at])]
        for choice in named or choices.values():
            _walk_loc(choice, loc, at + 1, nullable, definitions, answers, seen)
        return
    elif at < len(loc):
        stepped = _stepped_into(node, loc, at)
        if stepped is not None:
            return _walk_loc(stepped[0], loc, stepped[1], False, definitions, answers, seen)
    inner = [item for key in _INNER for item in _as_list(node.get(key))]
    if kind in ("model-fields", "typed-dict", "dataclass-args") or not inner:
        if at == len(loc):
            answers.add(nullable)
        return
    for item in inner:
        _walk_loc(item, loc, at, nullable, definitions, answers, seen)
    return


def _as_list(item: Any) -> list[Any]:
    return item if type(item) is list else [] if item is None else [item]


def _stepped_into(node: dict[str, Any], loc: tuple[int | str, ...], at: int) -> tuple[Any, int] | None:
    """The schema of the part of the data ``loc[at]`` names in the data
    ``node`` judges (a field, an item, a mapping's value or key), with the
    index in ``loc`` after it; None when ``node`` holds no such part."""
    kind, part = node.get("type"), loc[at]
    if kind in ("model-fields", "typed-dict", "dataclass-args"):
        fields = node.get("fields", {})
        for name, field in fields.items() if type(fields) is dict else ((f.get("name"), f) for f in fields):
            if part in (name, field.get("validation_alias"), field.get("serialization_alias")):
                return field, at + 1
        return None
    if kind in ("list", "set", "frozenset", "generator") and type(part) is int:
        return node.get("items_schema", {"type": "any"}), at + 1
    if kind == "tuple" and type(part) is int:
        items, variadic = node.get("items_schema", []), node.get("variadic_item_index")
        if variadic is not None and part >= variadic:
            return items[variadic], at + 1
        return (items[part], at + 1) if 0 <= part < len(items) else None
    if kind == "dict":
        if at + 1 < len(loc) and loc[at + 1] == "[key]":
            return node.get("keys_schema", {"type": "any"}), at + 2
        return node.get("values_schema", {"type": "any"}), at + 1
    return None


def _values_word(expected: object) -> str | None:
    """What a value must be that is none of the values pydantic's
    ``expected`` lists (a ``literal_error``'s or an ``enum`` error's
    context, a tag error's ``expected_tags``: their Python reprs, ``'a', 1,
    True or None``, ``'a', 'b'``), in the subset's words: ``"a"`` for one,
    ``one of ["a",1,true,null]`` for several. None unless each is a JSON
    scalar (not bytes, nor an enum member of another value) and the reprs
    read back are ``expected`` (no value's text taken for two)."""
    if type(expected) is not str:
        return None
    try:
        body = ast.parse(expected, mode="eval").body  # ('a', 'b' or 'c'): a tuple whose last is an `or`
        parts = body.elts if isinstance(body, ast.Tuple) else [body]
        leaves = [leaf for part in parts for leaf in (part.values if isinstance(part, ast.BoolOp) else [part])]
        values = [ast.literal_eval(leaf) for leaf in leaves]
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        return None
    shown = [repr(value) for value in values]
    if not all(isinstance(value, _JSON_SCALARS) for value in values) or expected not in (
        ", ".join(shown),
        f"{', '.join(shown[:-1])} or {shown[-1]}",
    ):
        return None
    return dumps(values[0]).decode() if len(values) == 1 else f"one of {dumps(values).decode()}"


def _tag_key(discriminator: object, value: object) -> str | None:
    """The key of the object ``value`` that holds its discriminated union's
    tag: of the keys pydantic's ``discriminator`` context names (``'kind'``,
    or ``'kind' | 'Kind'``, a field's name and alias), the first ``value``
    has; None for a function's (``f()``)."""
    if type(discriminator) is not str or not isinstance(value, Mapping):
        return None
    try:
        names = [
            node.value for node in ast.walk(ast.parse(discriminator, mode="eval")) if isinstance(node, ast.Constant)
        ]
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    return next((name for name in names if type(name) is str and name in value), None)


def json_validator(schema: Any, *, dumped: bool = False) -> SchemaValidator:
    """The validator of a type's JSON values, from a copy of its core
    ``schema`` (a tool's arguments model's; with ``dumped``, a return
    annotation's, to check the value's JSON form), built once, without the
    classes' prebuilt validators, which would keep their own schemas (the
    classes' schemas and validators are left as they are). In the copy:

    * every ``float`` refuses NaN and infinity (``allow_inf_nan=False``),
      whatever the config of the model, dataclass or ``Field`` that holds
      it says. JSON has no such number, but lax mode reads the strings
      ``"nan"``, ``"inf"`` and ``"1e400"`` as floats, and pydantic's
      default allows them: refused, ``finite_number``, at its path;
    * a ``Literal`` of enum members (``Literal[Kind.CAT]``) takes their
      values, which its JSON Schema shows (``"cat"``), and gives the
      members: pydantic takes only the member itself for a plain ``Enum``'s,
      so no JSON value would do, and its messages would show the members'
      reprs (``<Kind.CAT: 'cat'>``); so does a discriminated union whose
      tags are enum members;
    * with ``dumped``, what the JSON form holds as it was dumped (by alias,
      as the output schema shows it): each field under its serialization
      alias (or its name), a field the dump leaves out (``exclude=True``)
      optional, a computed field an optional property, and a part that has
      a serializer of its own (``field_serializer``, ``PlainSerializer``,
      ``model_serializer``) the serializer's return annotation (any JSON
      value without one); a discriminated union a plain union of its
      members (its discriminator names the tag's validation alias).

    It validates as fast as the type's own (a ``Literal`` of enum members
    calls one function more)."""
    copy: Any = _for_json(schema, dumped)
    top = copy["schema"] if copy["type"] == "definitions" else copy
    return SchemaValidator(copy, top.get("config"), _use_prebuilt=False)


#: The keys of a core schema whose values are no schema the validator
#: builds: the author's data (a default, a ``Literal``'s values, an enum's
#: members, an error's context), metadata and the serializer's schema.
_NOT_VALIDATED: Final = frozenset(
    {"default", "metadata", "expected", "members", "custom_error_context", "serialization"}
)

#: The serializers that are the author's functions, whose value is what the
#: dump holds.
_SERIALIZER_FUNCTIONS: Final = frozenset({"function-plain", "function-wrap"})

#: The serializers' ``when_used`` that leave ``None`` as it is.
_NONE_KEPT: Final = frozenset({"unless-none", "json-unless-none"})

_JSON_SCALARS: Final = (str, int, float, bool, type(None))


def _for_json(node: Any, dumped: bool) -> Any:
    """A copy of the core schema ``node`` for :func:`json_validator`. A
    schema (a dict with a ``type``) keeps the author's data under
    :data:`_NOT_VALIDATED` as it is; any other dict (``fields`` by the
    user's field names, a tagged union's ``choices`` by tag,
    ``definitions``) has schemas under every key, whatever its name (a
    field called ``members`` or a tag ``"default"``)."""
    if type(node) is dict:
        kind = node.get("type")
        if type(kind) is not str:
            return {key: _for_json(item, dumped) for key, item in node.items()}
        serializer = node.get("serialization")
        if dumped and type(serializer) is dict and serializer.get("type") in _SERIALIZER_FUNCTIONS:
            return _as_serialized(node, serializer)
        out = {key: item if key in _NOT_VALIDATED else _for_json(item, dumped) for key, item in node.items()}
        if kind == "float":
            out["allow_inf_nan"] = False
        elif kind == "literal":
            return _literal_by_value(out)
        elif kind == "tagged-union" and dumped:
            # (Its discriminator names the field's validation alias, which the dump need not hold.)
            union = {"type": "union", "choices": list(out["choices"].values())}
            return union | {key: out[key] for key in ("ref", "metadata") if key in out}
        elif kind == "tagged-union" and not callable(out["discriminator"]):
            out["choices"] = _tags_by_value(out["choices"])
        elif dumped and kind in ("model-field", "dataclass-field", "typed-dict-field"):
            _field_as_dumped(out)
        elif dumped and kind == "dataclass":
            out["post_init"] = False  # (its InitVars are not in the dump; the values are final)
        elif dumped and out.get("computed_fields"):
            _computed_as_fields(out)
        if dumped and type(out.get("config")) is dict:
            # (The dump holds the fields under their aliases, which a config
            # with validate_by_alias=False would not read.)
            out["config"] = out["config"] | {"validate_by_alias": True}
        return out
    if type(node) is list:
        return [_for_json(item, dumped) for item in node]
    if type(node) is tuple:
        return tuple(_for_json(item, dumped) for item in node)
    return node


def _json_value(value: Any) -> Any:
    """The JSON value of a ``Literal``'s value or a tag: an enum member's
    value, anything else as it is."""
    return value.value if isinstance(value, Enum) else value


def _literal_by_value(node: dict[str, Any]) -> dict[str, Any]:
    """A ``literal`` schema whose enum members are taken as their values
    (see :func:`json_validator`) and given as the members; ``node`` as it
    is when it holds none, or a value JSON has no scalar for."""
    expected = node["expected"]
    if not any(isinstance(value, Enum) for value in expected):
        return node
    members: dict[tuple[type, Any], Any] = {}
    for value in expected:
        shown = _json_value(value)
        if not isinstance(shown, _JSON_SCALARS):
            return node
        members.setdefault((type(shown), shown), value)
    by_value = {key: value for key, value in node.items() if key not in ("ref", "metadata")}
    by_value["expected"] = [shown for _, shown in members]

    def member(value: Any) -> Any:
        return members.get((type(value), value), value)

    wrapper = {"type": "function-after", "function": {"type": "no-info", "function": member}, "schema": by_value}
    return wrapper | {key: node[key] for key in ("ref", "metadata") if key in node}


def _tags_by_value(choices: dict[Any, Any]) -> dict[Any, Any]:
    """A discriminated union's ``choices`` with each enum member's tag its
    value (the JSON value the discriminator reads), unless one is no JSON
    scalar or two would be one."""
    if not all(isinstance(_json_value(tag), _JSON_SCALARS) for tag in choices):
        return choices
    by_value = {_json_value(tag): choice for tag, choice in choices.items()}
    return by_value if len(by_value) == len(choices) else choices


def _as_serialized(node: dict[str, Any], serializer: dict[str, Any]) -> dict[str, Any]:
    """What a schema whose serializer is the author's function dumps: the
    function's return annotation's schema (any value without one; ``None``
    too where the serializer leaves it as it is), in place of ``node``."""
    shown: dict[str, Any] = _for_json(serializer.get("return_schema", {"type": "any"}), True)
    if serializer.get("when_used") in _NONE_KEPT:
        shown = {"type": "nullable", "schema": shown}
    # (Under the node's ref, which the schema may use elsewhere, beside any of its own.)
    return {"type": "chain", "steps": [shown], "ref": node["ref"]} if "ref" in node else shown


def _field_as_dumped(field: dict[str, Any]) -> None:
    """A field read as the dump holds it: under its serialization alias,
    else its name; optional when the dump may leave it out (excluded, or a
    dataclass's ``InitVar``); a dataclass's ``field(init=False)``, which the
    dump holds, taken."""
    alias = field.pop("serialization_alias", None)
    field.pop("validation_alias", None)
    field.pop("init", None)
    if type(alias) is str:
        field["validation_alias"] = alias
    if (
        field.get("serialization_exclude")
        or field.get("serialization_exclude_if") is not None
        or field.get("init_only")
    ):
        if field["type"] == "typed-dict-field":
            field["required"] = False
        else:
            field["schema"] = {"type": "default", "schema": field["schema"], "default": None}


def _computed_as_fields(fields_schema: dict[str, Any]) -> None:
    """The computed fields of a model's, dataclass's or ``TypedDict``'s
    fields schema as optional fields, under the names they are dumped as."""
    for computed in fields_schema.pop("computed_fields"):
        name = computed["property_name"]
        alias = {"validation_alias": computed["alias"]} if type(computed.get("alias")) is str else {}
        value = {"type": "default", "schema": computed["return_schema"], "default": None}
        if fields_schema["type"] == "model-fields":
            fields_schema["fields"][name] = {"type": "model-field", "schema": value, **alias}
        elif fields_schema["type"] == "typed-dict":
            schema = computed["return_schema"]
            fields_schema["fields"][name] = {"type": "typed-dict-field", "schema": schema, "required": False, **alias}
        else:  # dataclass-args
            fields_schema["fields"].append({"type": "dataclass-field", "name": name, "schema": value, **alias})


_STASH_LIMIT: Final = 256


@final
class PydanticEnforcer:
    """A pydantic-core validator with the interface of
    :class:`~dsh_actors.schema.CompiledJsonSchema`: ``schema`` (the frozen
    JSON Schema pydantic generated for the type), ``is_valid`` and
    ``validate`` for lossless JSON values, and :meth:`parse` for the typed
    value. Any thread may call it.

    With ``hand_over`` (the arguments' enforcer), the typed value that
    ``is_valid`` built for a frozen argument object (the classifier asks
    first, on the executor's thread) is kept for the one :meth:`parse` of
    that same object that follows (the body's step), so a call's arguments
    are validated once. Invariant: a kept value is handed to at most one
    ``parse`` (``dict.pop`` is atomic), so two bodies never share one; at
    most ``_STASH_LIMIT`` are kept (a call denied after it was classified
    leaves its entry behind until the limit clears them)."""

    __slots__ = ("schema", "_core", "_validate_json", "_validate_python", "_stash")

    def __init__(self, validator: Any, schema: Any, *, hand_over: bool = False, core: Any = None) -> None:
        self.schema = schema
        # The core schema ``validator`` was built from: read for violations only.
        self._core = None if core is None else CoreSchemaRefs(core)
        self._validate_json = validator.validate_json
        self._validate_python = validator.validate_python
        self._stash: dict[int, tuple[Any, Any]] | None = {} if hand_over else None

    def _typed(self, value: Any) -> Any:
        """``value`` validated: from its JSON text (faster than walking the
        frozen value), or, nested deeper than pydantic's JSON parser goes
        (200 levels, where lossless JSON allows ``MAX_JSON_DEPTH``), from
        the value itself."""
        try:
            return self._validate_json(dumps(value))
        except ValidationError as err:
            if not _too_deep_for_json(err):
                raise
        return self._validate_python(thaw(value))

    def parse(self, value: Any) -> Any:
        """The typed value for a lossless JSON ``value`` (a model instance,
        a list...); raises pydantic's ``ValidationError``."""
        stash = self._stash
        if stash:
            kept = stash.pop(id(value), None)
            if kept is not None and kept[0] is value:
                return kept[1]
        return self._typed(value)

    def is_valid(self, value: Any) -> bool:
        try:
            parsed = self._typed(value)
        except (ValidationError, TypeError, ValueError):
            return False
        stash = self._stash
        if stash is not None and type(value) is FrozenDict:  # frozen: the same object means the same arguments
            if len(stash) >= _STASH_LIMIT:
                stash.clear()
            stash[id(value)] = (value, parsed)
        return True

    def validate(self, value: Any, path: str = "value") -> list[str]:
        try:
            self._typed(value)
        except ValidationError as err:  # (a ValueError: caught first)
            return self.violations(err, value, path)
        except (TypeError, ValueError) as err:  # not lossless JSON: not what the pipeline hands over
            return [f'"{path}" is not JSON ({type(err).__name__})']
        return []

    def violations(
        self, err: ValidationError, value: Any, path: str = "value", under: Collection[str] = ()
    ) -> list[str]:
        """The violations of ``err``, raised for ``value`` by this
        validator, or by another built from the same core schema (see
        :func:`violations_of`)."""
        return violations_of(err, value, path, self._core, under)

    def __repr__(self) -> str:
        return f"PydanticEnforcer({dumps(self.schema).decode()[:77]})"


def _too_deep_for_json(err: ValidationError) -> bool:
    """Whether pydantic's JSON parser gave up on the text's nesting (its
    recursion limit), rather than finding the value invalid."""
    return any(
        error["type"] == "json_invalid" and "recursion limit" in str(error.get("ctx", {}).get("error", error["msg"]))
        for error in err.errors(include_url=False, include_input=False)
    )


def serialization_error(name: str, value: Any, err: Exception) -> ToolOutputError:
    """The failure of a value the serializer cannot dump (``err``, its
    complaint). A part of it that JSON cannot carry (a lock, a function, an
    exception returned instead of raised) is named by its path and type,
    for the model, with the fix for the developer as a note on the
    exception (as :func:`bytes_error` does); anything else (a cycle, nesting
    past the serializer's depth limit) in the serializer's words. Only a
    failing value is walked: the call that succeeds pays nothing here."""
    found = _unserializable_part(value)
    if found is None:
        return ToolOutputError(name, [f'"value" cannot be turned into JSON: {safe_str(err)}'])
    path, part = found
    kind = type(part)
    shown = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    returned = f'tool "{name}" returned ' + ("" if path == "value" else f'a value whose "{path}" is ')
    if isinstance(part, BaseException):
        error = ToolOutputError(name, [f'"{path}" is an exception ({shown}), which JSON cannot carry'])
        error.add_note(
            f"{returned}an exception ({shown}) instead of raising it: raise it "
            f"(raise {kind.__qualname__}(...)), so the call fails with its message as an error result the model "
            "sees, or return its message as text (str(err))"
        )
        return error
    article = "an" if shown[:1].lower() in ("a", "e", "i", "o", "u") else "a"
    error = ToolOutputError(name, [f'"{path}" is {article} {shown}, which JSON cannot carry'])
    error.add_note(
        f"{returned}{article} {shown}: a tool's value must be JSON (str, int, float, "
        "bool, None, lists and dicts of those, or a BaseModel, a dataclass or a TypedDict of them). Return what "
        "the model needs to know of it instead (its text, a number, a dict of its fields), or leave it out"
    )
    return error


def _unserializable_part(value: Any) -> tuple[str, Any] | None:
    """The path and the object of the part of ``value`` the serializer
    fails on: from the value down, the first part of each container that
    does not dump on its own, to one that is not a container. None when
    there is none (a cycle, or nesting too deep: a container whose parts
    all dump; a value that dumps on its own, which its annotation's
    serializer failed)."""
    if _dumps(value):
        return None
    path, current, seen = "value", value, set()
    while id(current) not in seen:
        seen.add(id(current))
        parts = _parts(current, path)
        if parts is None:
            return path, current
        for step, part in parts:
            if not _dumps(part):
                path, current = step, part
                break
        else:
            return None
    return None  # (a cycle)


def _parts(value: Any, path: str) -> Iterator[tuple[str, Any]] | None:
    """The parts of a container the serializer walks (a mapping, a list, a
    tuple, a set, a model, a dataclass), each with its path (a key that is
    not a str as the core's paths show one, ``value[<int key>]``); None for
    anything else."""
    if isinstance(value, Mapping):
        return ((path_for_key(path, key), part) for key, part in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        return ((path_for_index(path, index), part) for index, part in enumerate(value))
    if isinstance(value, BaseModel):
        return ((path_for_key(path, key), part) for key, part in value)  # (fields and extras)
    if is_dataclass(value) and not isinstance(value, type):
        return ((path_for_key(path, f.name), getattr(value, f.name)) for f in fields(value))
    return None


def _dumps(part: Any) -> bool:
    """Whether pydantic-core's serializer dumps ``part`` on its own."""
    try:
        to_json(part)
    except (PydanticSerializationError, ValueError, TypeError, RecursionError):
        return False
    return True


def bytes_error(name: str) -> ToolOutputError:
    """The failure of a value that holds bytes that are not UTF-8 (pydantic
    writes bytes as UTF-8 text): a short violation for the model, and the
    fix, for the developer, as a note on the exception (shown with its
    traceback, in the log and the session log)."""
    error = ToolOutputError(name, ['"value" holds bytes that are not UTF-8 text, which JSON cannot carry'])
    error.add_note(
        f'tool "{name}" returned bytes (or a value holding bytes) that are not UTF-8 text: a tool\'s value must '
        "be JSON, and bytes become JSON only as UTF-8 text. Return base64 text instead "
        "(base64.b64encode(data).decode(), annotated -> str); for an image the model should see, return it as an "
        'image, annotated -> ImageBlock: ImageBlock(base64.b64encode(data).decode(), "image/png")'
    )
    return error


def without_negative_zero(value: Any) -> Any:
    """``value`` (a JSON-mode dump: dicts, lists, scalars) with every
    ``-0.0`` made ``0.0``, sharing what holds none. Lossless JSON refuses
    ``-0.0`` (``docs/reference.md``, section 2), but arithmetic makes it
    (``round(-0.04, 1)``, ``0.0 * -1``) and Python holds it equal to
    ``0.0``: a typed tool's value is not refused for it. Called only once
    the value failed to materialize, so a value without one costs nothing
    here."""
    if type(value) is float:
        return 0.0 if value == 0.0 else value
    if type(value) is dict:
        return {key: without_negative_zero(item) for key, item in value.items()}
    if type(value) is list or type(value) is tuple:
        return [without_negative_zero(item) for item in value]
    return value
