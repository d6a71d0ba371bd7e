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
  ``boolean`` → ``bool``, ``null`` → ``None``, arrays → ``list[...]``,
  objects → ``dict``, ``enum``/``const`` → ``Literal[...]``, ``oneOf`` →
  a union, ``{}`` → ``Any``; required parameters first, optional ones
  default to ``None``);
* the bindings the worker needs to turn a Python call back into
  arguments (see :func:`bindings`).

Pure functions of the schemas; thread-safe.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Binding", "bindings", "py_name", "render_signatures", "signature", "type_hint"]

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


def _literal(value: object) -> str:
    if value is None or type(value) in (bool, int, float):
        return repr(value)
    if type(value) is str:
        return repr(value)
    return "Any"  # pragma: no cover - the subset allows only scalars


def type_hint(schema: object) -> str:
    """The Python annotation for a node of the enforced JSON Schema subset."""
    if not isinstance(schema, Mapping):
        return "Any"
    if "const" in schema:
        return f"Literal[{_literal(schema['const'])}]"
    if "enum" in schema and isinstance(schema["enum"], Sequence):
        return f"Literal[{', '.join(_literal(v) for v in schema['enum'])}]"
    branches = schema.get("oneOf")
    if isinstance(branches, Sequence) and not isinstance(branches, str):
        hints = _unique(type_hint(b) for b in branches)
        return "Any" if "Any" in hints else " | ".join(hints)
    kind = schema.get("type")
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
        return "list" if items is None else f"list[{type_hint(items)}]"
    if kind == "object":
        return "dict"
    return "Any"


def _unique(items: Iterable[str]) -> list[str]:
    out: list[str] = []
    for item in items:
        if item not in out:
            out.append(item)
    return out


def accepts_null(schema: object) -> bool:
    """Whether ``null`` can match ``schema`` (conservatively: an unknown
    shape counts as accepting it)."""
    if not isinstance(schema, Mapping):
        return True
    if "const" in schema:
        return schema["const"] is None
    if "enum" in schema and isinstance(schema["enum"], Sequence):
        return any(v is None for v in schema["enum"])
    branches = schema.get("oneOf")
    if isinstance(branches, Sequence) and not isinstance(branches, str):
        return any(accepts_null(b) for b in branches)
    kind = schema.get("type")
    return kind is None or kind == "null"


@dataclass(frozen=True, slots=True)
class Binding:
    """How one tool appears inside a program.

    ``py``: its attribute on ``tools``; ``name``: the registered name;
    ``params``: ``(python name, argument name)`` pairs in signature order
    (required first; positional arguments bind in this order);
    ``omit_none``: optional arguments whose schema does not accept
    ``null``, dropped when the program passes ``None`` (so
    ``limit=None`` means "no limit"); ``signature``: the prompt text.
    """

    py: str
    name: str
    params: tuple[tuple[str, str], ...]
    omit_none: tuple[str, ...]
    signature: str

    def wire(self) -> dict[str, Any]:
        """The form sent to the worker in the ``run`` message."""
        return {
            "py": self.py,
            "name": self.name,
            "params": [list(pair) for pair in self.params],
            "omit_none": list(self.omit_none),
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


def signature(py: str, name: str, description: str, parameters: object, output: object) -> Binding:
    """The binding (with its prompt signature) of tool ``name``, called
    ``py`` in programs; ``parameters`` and ``output`` are its JSON schemas."""
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
    rendered: list[str] = []
    documented: list[tuple[str, Mapping[str, Any]]] = []
    omit_none: list[str] = []
    for real in order:
        spec = props[real] if isinstance(props[real], Mapping) else {}
        param = py_name(real, taken, prefix="arg")
        pairs.append((param, real))
        documented.append((param, spec))
        hint = type_hint(spec)
        if real in required:
            rendered.append(f"{param}: {hint}")
        else:
            if hint != "Any" and "None" not in hint.split(" | "):
                hint = f"{hint} | None"
            rendered.append(f"{param}: {hint} = None")
            if not accepts_null(spec):
                omit_none.append(real)
    if not props:
        rendered.append("**arguments: Any")
    header = f"async def {py}({', '.join(rendered)}) -> {type_hint(output)}:"
    text = f"{header}\n{_docstring(description, documented, '    ')}"
    return Binding(py=py, name=name, params=tuple(pairs), omit_none=tuple(omit_none), signature=text)


def bindings(definitions: Iterable[Any]) -> tuple[Binding, ...]:
    """One :class:`Binding` per definition (``run_code`` excluded), in the
    given order, with unique Python names."""
    taken: set[str] = set()
    out: list[Binding] = []
    for definition in definitions:
        name = definition.name
        if name == "run_code":
            continue
        py = py_name(name, taken, prefix="tool")
        output = getattr(definition.output, "schema", None)
        out.append(signature(py, name, definition.description, definition.parameters, output))
    return tuple(out)


def render_signatures(items: Sequence[Binding]) -> str:
    """All signatures as one block of Python (empty text for no tools)."""
    return "\n\n".join(b.signature for b in items)
