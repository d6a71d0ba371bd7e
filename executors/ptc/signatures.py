"""Tools as Python functions: names, signatures and call bindings.

A program calls tool ``read_file`` as ``await tools.read_file(path="a")``.
This module turns the tool definitions a scope can see into

* Python names: a tool or parameter name that is not an identifier is
  sanitized (``my-tool`` → ``my_tool``, ``from`` → ``from_``, a leading
  digit or underscore gets a prefix); collisions get ``_2``, ``_3``...;
* signatures for the prompt, generated from the JSON schemas::

      async def read_file(path: str, limit: int | None = None) -> str:
          \"\"\"Read a text file.

          path: the file to read
          \"\"\"

  (``string`` → ``str``, ``integer`` → ``int``, ``number`` → ``float``,
  ``boolean`` → ``bool``, ``null`` → ``None``, a type list, ``anyOf`` or
  ``oneOf`` → a union (``X | None`` when nullable), arrays →
  ``list[...]``, ``enum``/``const`` → ``Literal[...]``, objects →
  ``dict`` (``dict[str, X]`` with ``additionalProperties``), ``{}`` →
  ``Any``; a local ``$ref`` into ``$defs`` is resolved, and a model (a
  ``$ref`` or titled object with properties, as pydantic generates) is a
  ``TypedDict`` class listed once before the signatures, recursion
  included; required parameters first, optional ones default to their
  ``default`` or ``None``);
* the bindings the worker needs to turn a Python call back into
  arguments (see :func:`bindings`).

Pure functions of the schemas; thread-safe.
"""

from __future__ import annotations

import json
import keyword
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Binding", "Types", "bindings", "py_name", "render_signatures", "signature", "type_hint"]

_NOT_IDENT = re.compile(r"[^0-9A-Za-z_]")


def py_name(name: str, taken: set[str], *, prefix: str) -> str:
    """A Python identifier for ``name``, not in ``taken`` (added to it).

    Characters other than letters, digits and ``_`` become ``_``; a name
    that starts with a digit or an underscore (or is empty) gets ``prefix``
    in front (so no tool can shadow a dunder attribute); a keyword gets a
    trailing ``_``; a collision gets ``_2``, ``_3``, ...
    """
    base = _NOT_IDENT.sub("_", name.encode("ascii", "replace").decode("ascii").replace("?", "_"))
    if not base or base[0].isdigit() or base[0] == "_":
        base = f"{prefix}_{base}" if base else prefix
    if keyword.iskeyword(base) or keyword.issoftkeyword(base) or base in ("None", "True", "False"):
        base += "_"
    candidate = base
    n = 2
    while candidate in taken:
        candidate = f"{base}_{n}"
        n += 1
    taken.add(candidate)
    return candidate


_SCALARS = (type(None), bool, int, float, str)
_DEFAULT_MAX = 40  # longer defaults are shown as ``...``
# Names a generated class must not take: the ones the hints use.
_RESERVED = ("Any", "Literal", "TypedDict", "NotRequired", "str", "int", "float", "bool", "list", "dict")


def _literal(values: Sequence[object]) -> str:
    if not values or any(type(v) not in _SCALARS for v in values):
        return "Any"
    return f"Literal[{', '.join(_unique(repr(v) for v in values))}]"


def _default(value: object) -> str:
    """A Python literal for a JSON default (``...`` when long or odd)."""
    try:
        text = repr(_plain(value))
    except ValueError:
        return "..."
    return text if len(text) <= _DEFAULT_MAX else "..."


def _plain(value: object) -> object:
    if type(value) in _SCALARS:
        return value
    if isinstance(value, Sequence):  # a list (frozen as a tuple in a registered schema)
        return [_plain(v) for v in value]
    if isinstance(value, Mapping) and all(type(k) is str for k in value):
        return {k: _plain(v) for k, v in value.items()}
    raise ValueError("not a JSON value")


def _branches(schema: Mapping[str, Any]) -> Sequence[Any] | None:
    for key in ("anyOf", "oneOf"):
        found = schema.get(key)
        if isinstance(found, Sequence) and not isinstance(found, str):
            return found
    found = schema.get("allOf")
    if isinstance(found, Sequence) and not isinstance(found, str) and len(found) == 1:
        return found
    return None


class Types:
    """The classes (TypedDicts) that signatures refer to, shared by the
    tools of one listing so a model used by several tools is listed once.

    A local ``$ref`` (``#/$defs/Name`` or ``#/definitions/Name``) to an
    object with properties becomes a class named after the model; any
    other ``$ref`` is resolved in place (a cycle through such refs is
    ``Any``). Two refs share a class when their schemas (with everything
    they reach) are equal; other models with the same title get ``_2``...
    """

    def __init__(self, taken: Iterable[str] = ()) -> None:
        self._taken: set[str] = set(_RESERVED) | set(taken)
        self._names: dict[str, str] = {}  # canonical schema -> class name
        self.blocks: dict[str, str] = {}  # class name -> its definition
        self._deps: dict[str, tuple[str, ...]] = {}  # class name -> the classes its fields name

    def definitions(self, names: Iterable[str]) -> tuple[str, ...]:
        """The definitions of ``names`` and of every class they reach,
        each once, in first-use order."""
        out: list[str] = []
        todo = list(names)[::-1]
        while todo:
            name = todo.pop()
            if name in out:
                continue
            out.append(name)
            todo.extend(reversed(self._deps.get(name, ())))
        return tuple(self.blocks[name] for name in out)

    def hint(self, schema: object, root: object = None) -> tuple[str, tuple[str, ...]]:
        """The annotation for ``schema`` (its refs resolved in ``root``)
        and the names of the classes it uses, in first-use order."""
        used: list[str] = []
        return _Hinter(self, root if isinstance(root, Mapping) else {}, used).hint(schema, ()), tuple(used)

    def _class(self, hinter: _Hinter, ref: str | None, target: Mapping[str, Any]) -> str:
        key = _canonical(hinter.root, target)
        name = self._names.get(key)
        if name is not None:
            return name
        title = target.get("title")
        base = title if isinstance(title, str) and title.strip() else str(ref).rsplit("/", 1)[-1]
        name = py_name(base, self._taken, prefix="Model")
        self._names[key] = name
        self.blocks[name] = ""  # placeholder: a recursive model refers to itself
        fields = _Hinter(self, hinter.root, [])
        self.blocks[name] = _typed_dict(name, target, fields)
        self._deps[name] = tuple(fields.used)
        return name


def _canonical(root: Mapping[str, Any], node: Mapping[str, Any]) -> str:
    """``node`` with every definition it reaches, as canonical JSON."""
    reached: dict[str, Any] = {}
    todo = _refs_in(node)
    while todo:
        current = todo.pop()
        if current in reached:
            continue
        node = _resolve(root, current)
        reached[current] = node
        todo.extend(_refs_in(node))
    return json.dumps([_jsonable(node), _jsonable(reached)], sort_keys=True, default=repr)


def _jsonable(node: object) -> object:
    if isinstance(node, Mapping):
        return {str(k): _jsonable(v) for k, v in node.items()}
    if isinstance(node, Sequence) and not isinstance(node, str):
        return [_jsonable(v) for v in node]
    return node


def _refs_in(node: object) -> list[str]:
    if isinstance(node, Mapping):
        out = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        for value in node.values():
            out.extend(_refs_in(value))
        return out
    if isinstance(node, Sequence) and not isinstance(node, str):
        return [r for value in node for r in _refs_in(value)]
    return []


def _resolve(root: Mapping[str, Any], ref: str) -> Any:
    """The local definition ``ref`` names, or ``None``."""
    for prefix in ("#/$defs/", "#/definitions/"):
        if ref.startswith(prefix):
            table = root.get(prefix[2:-1])
            name = ref[len(prefix) :].replace("~1", "/").replace("~0", "~")
            if isinstance(table, Mapping) and isinstance(table.get(name), Mapping):
                return table[name]
    return None


def _is_model(schema: Mapping[str, Any]) -> bool:
    props = schema.get("properties")
    return schema.get("type") in ("object", None) and isinstance(props, Mapping) and bool(props)


def _typed_dict(name: str, schema: Mapping[str, Any], hinter: _Hinter) -> str:
    props: Mapping[str, Any] = schema["properties"]
    raw_required = schema.get("required")
    required = set(raw_required) if isinstance(raw_required, Sequence) and not isinstance(raw_required, str) else set()
    fields: list[tuple[str, str, str]] = []
    for key, spec in props.items():
        hint = hinter.hint(spec, ())
        if key not in required:
            hint = f"NotRequired[{hint}]"
        note = ""
        if isinstance(spec, Mapping) and "default" in spec:
            note = f"  # default: {_default(spec['default'])}"
        fields.append((key, hint, note))
    if all(k.isidentifier() and not keyword.iskeyword(k) for k in props):
        lines = [f"class {name}(TypedDict):"] + [f"    {k}: {h}{n}" for k, h, n in fields]
        return "\n".join(lines)
    lines = [f"{name} = TypedDict({name!r}, {{"] + [f"    {k!r}: {h},{n}" for k, h, n in fields] + ["})"]
    return "\n".join(lines)


@dataclass(slots=True)
class _Hinter:
    types: Types
    root: Mapping[str, Any]
    used: list[str]

    def _named(self, ref: str | None, target: Mapping[str, Any]) -> str:
        name = self.types._class(self, ref, target)
        if name not in self.used:
            self.used.append(name)
        return name

    def hint(self, schema: object, inlining: tuple[str, ...]) -> str:
        if not isinstance(schema, Mapping):
            return "Any"
        ref = schema.get("$ref")
        if isinstance(ref, str):
            target = _resolve(self.root, ref)
            if target is None or ref in inlining:
                return "Any"
            if _is_model(target):
                return self._named(ref, target)
            return self.hint(target, (*inlining, ref))
        if isinstance(schema.get("title"), str) and _is_model(schema):  # a model inline (a tool's output)
            return self._named(None, schema)
        if "const" in schema:
            return _literal([schema["const"]])
        if "enum" in schema and isinstance(schema["enum"], Sequence) and not isinstance(schema["enum"], str):
            return _literal(schema["enum"])
        branches = _branches(schema)
        if branches is not None:
            return _union(self.hint(b, inlining) for b in branches)
        kind = schema.get("type")
        if isinstance(kind, Sequence) and not isinstance(kind, str):
            return _union(self.hint({**schema, "type": k}, inlining) for k in kind)
        if kind == "string":
            return "str"
        if kind == "integer":
            return "int"
        if kind == "number":
            return "float"
        if kind == "boolean":
            return "bool"
        if kind == "null":
            return "None"
        if kind == "array":
            items = schema.get("items")
            return "list" if items is None else f"list[{self.hint(items, inlining)}]"
        if kind == "object":
            extra = schema.get("additionalProperties")
            if isinstance(extra, Mapping) and extra and not schema.get("properties"):
                return f"dict[str, {self.hint(extra, inlining)}]"
            return "dict"
        return "Any"


def _union(hints: Iterable[str]) -> str:
    parts = _unique(part for hint in hints for part in hint.split(" | "))
    if not parts or "Any" in parts:
        return "Any"
    if "None" in parts:  # ``X | None``: the null last
        parts = [p for p in parts if p != "None"] + ["None"]
    return " | ".join(parts)


def type_hint(schema: object, root: object = None) -> str:
    """The Python annotation for a JSON schema node; local ``$ref``s
    resolve in ``root`` (a model is named, its class left out: see
    :class:`Types` for the listing)."""
    return Types().hint(schema, root)[0]


def _unique(items: Iterable[str]) -> list[str]:
    out: list[str] = []
    for item in items:
        if item not in out:
            out.append(item)
    return out


def accepts_null(schema: object, root: object = None, _seen: tuple[str, ...] = ()) -> bool:
    """Whether ``null`` can match ``schema`` (conservatively: an unknown
    shape counts as accepting it); local ``$ref``s resolve in ``root``."""
    if not isinstance(schema, Mapping):
        return True
    ref = schema.get("$ref")
    if isinstance(ref, str):
        target = _resolve(root, ref) if isinstance(root, Mapping) else None
        return True if target is None or ref in _seen else accepts_null(target, root, (*_seen, ref))
    if "const" in schema:
        return schema["const"] is None
    if "enum" in schema and isinstance(schema["enum"], Sequence):
        return any(v is None for v in schema["enum"])
    branches = _branches(schema)
    if branches is not None:
        return any(accepts_null(b, root, _seen) for b in branches)
    kind = schema.get("type")
    if isinstance(kind, Sequence) and not isinstance(kind, str):
        return "null" in kind
    return kind is None or kind == "null"


@dataclass(frozen=True, slots=True)
class Binding:
    """How one tool appears inside a program.

    ``py``: its attribute on ``tools``; ``name``: the registered name;
    ``params``: ``(python name, argument name)`` pairs in signature order
    (required first; positional arguments bind in this order);
    ``omit_none``: optional arguments whose schema does not accept
    ``null``, dropped when the program passes ``None`` (so
    ``limit=None`` means "no limit"); ``signature``: the prompt text;
    ``types``: the definitions of the classes it names (its models, as
    each a ``TypedDict``), listed before the signatures; ``summary``: the
    first line of its description (``repr(tools)`` lists them);
    ``parameters`` and ``returns``: the signature's parts as text,
    ``(python name, type hint, default or None when required)`` each (a
    tool without parameters has one, ``("**arguments", "Any", None)``),
    from which the worker gives ``tools.NAME`` its ``inspect`` signature
    (``repr``, ``help``).
    """

    py: str
    name: str
    params: tuple[tuple[str, str], ...]
    omit_none: tuple[str, ...]
    signature: str
    types: tuple[str, ...] = ()
    summary: str = ""
    parameters: tuple[tuple[str, str, str | None], ...] = ()
    returns: str = "Any"

    def wire(self) -> dict[str, Any]:
        """The form sent to the worker in the ``run`` message."""
        return {
            "py": self.py,
            "name": self.name,
            "params": [list(pair) for pair in self.params],
            "omit_none": list(self.omit_none),
            "summary": self.summary,
            "signature": {"params": [list(p) for p in self.parameters], "returns": self.returns},
        }


def _docstring(description: str, params: Sequence[tuple[str, Mapping[str, Any]]], indent: str) -> str:
    lines = [line.rstrip() for line in description.strip().splitlines()] or [""]
    documented = [
        (py, str(spec.get("description")).strip())
        for py, spec in params
        if isinstance(spec.get("description"), str) and spec.get("description", "").strip()
    ]
    if documented:
        lines.append("")
        for py, text in documented:
            lines.append(f"{py}: {' '.join(text.split())}")
    body = "\n".join(f"{indent}{line}" if line else "" for line in lines)
    body = body.replace('"""', '\\"\\"\\"')
    if len(lines) == 1:
        return f'{indent}"""{body.strip()}"""'
    return f'{indent}"""{body.lstrip()}\n{indent}"""'


def signature(
    py: str, name: str, description: str, parameters: object, output: object, types: Types | None = None
) -> Binding:
    """The binding (with its prompt signature) of tool ``name``, called
    ``py`` in programs; ``parameters`` and ``output`` are its JSON schemas
    (local ``$ref``s resolve in each). ``types`` names the models of the
    tools listed together (a new one when ``None``)."""
    types = Types(taken=[py]) if types is None else types
    used: list[str] = []
    props: Mapping[str, Any] = {}
    required: set[str] = set()
    if isinstance(parameters, Mapping):
        raw_props = parameters.get("properties")
        if isinstance(raw_props, Mapping):
            props = raw_props
        raw_required = parameters.get("required")
        if isinstance(raw_required, Sequence) and not isinstance(raw_required, str):
            required = {r for r in raw_required if type(r) is str}
    order = [k for k in props if k in required] + [k for k in props if k not in required]
    taken: set[str] = set()
    pairs: list[tuple[str, str]] = []
    documented: list[tuple[str, Mapping[str, Any]]] = []
    omit_none: list[str] = []
    shown: list[tuple[str, str, str | None]] = []
    for real in order:
        spec = props[real] if isinstance(props[real], Mapping) else {}
        param = py_name(real, taken, prefix="arg")
        pairs.append((param, real))
        documented.append((param, spec))
        hint, names = types.hint(spec, parameters)
        used.extend(names)
        if real in required:
            shown.append((param, hint, None))
        else:
            default = spec.get("default")
            if default is None:  # absent or null: omitted means "not given"
                shown.append((param, _union([hint, "None"]), "None"))
            else:
                shown.append((param, hint, _default(default)))
            if not accepts_null(spec, parameters):
                omit_none.append(real)
    if not props:
        shown.append(("**arguments", "Any", None))
    rendered = [f"{p}: {h}" if d is None else f"{p}: {h} = {d}" for p, h, d in shown]
    returns, names = types.hint(output, output)
    used.extend(names)
    header = f"async def {py}({', '.join(rendered)}) -> {returns}:"
    text = f"{header}\n{_docstring(description, documented, '    ')}"
    return Binding(
        py=py,
        name=name,
        params=tuple(pairs),
        omit_none=tuple(omit_none),
        signature=text,
        types=types.definitions(used),
        summary=next((line.strip() for line in description.splitlines() if line.strip()), ""),
        parameters=tuple(shown),
        returns=returns,
    )


def bindings(definitions: Iterable[Any]) -> tuple[Binding, ...]:
    """One :class:`Binding` per definition (``run_code`` excluded), in the
    given order, with unique Python names; a model several of them use
    is one class."""
    taken: set[str] = set()
    listed = [(py_name(d.name, taken, prefix="tool"), d) for d in definitions if d.name != "run_code"]
    types = Types(taken=taken)
    out: list[Binding] = []
    for py, definition in listed:
        output = getattr(definition.output, "schema", None)
        out.append(signature(py, definition.name, definition.description, definition.parameters, output, types))
    return tuple(out)


def render_signatures(items: Sequence[Binding]) -> str:
    """All signatures as one block of Python (empty text for no tools),
    after the classes they name, each once."""
    blocks = _unique(block for b in items for block in b.types)
    return "\n\n".join([*blocks, *(b.signature for b in items)])
