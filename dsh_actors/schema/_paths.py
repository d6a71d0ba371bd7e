"""Path and value rendering shared by the subset check, the validator and the DSL.

Paths follow the one convention of :mod:`dsh_actors.json` (whose helpers
they reuse), so a lossless-JSON error and a validation error name the same
position the same way:

* ``root.name`` for a key that is a Python identifier (of at most 64
  characters),
* ``root["odd key"]`` (the key as a JSON string) for any other key, including
  the empty string and keys such as ``$ref``; a key longer than 64 characters
  is cut to its first 48 and shown as ``["abc…"]``,
* ``root[3]`` for an array item.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import orjson

from ..json import path_for_index, path_for_key

__all__ = ["child_path", "index_path", "json_text", "quote", "type_name"]

_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape_surrogate(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def quote(text: str) -> str:
    """``text`` as a JSON string literal. Non-ASCII characters stay readable;
    control characters and lone surrogates are escaped, so the result is
    always printable and encodable as UTF-8."""
    rendered = json.dumps(text, ensure_ascii=False)
    if not rendered.isascii():
        rendered = _SURROGATE.sub(_escape_surrogate, rendered)
    return rendered


def child_path(path: str, key: str) -> str:
    """The path of property ``key`` under ``path`` (``value.host`` or
    ``value["odd key"]``)."""
    return path_for_key(path, key)


def index_path(path: str, index: int) -> str:
    """The path of item ``index`` under ``path`` (``value[2]``)."""
    return path_for_index(path, index)


def json_text(value: Any) -> str:
    """Compact JSON text of a lossless value as orjson writes it
    (``["a","b"]``, no spaces). Tuples render as arrays; any dict (also the
    frozen mapping) as an object."""
    try:
        return orjson.dumps(value).decode()
    except (orjson.JSONEncodeError, TypeError):
        pass
    rendered = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    if not rendered.isascii():
        rendered = _SURROGATE.sub(_escape_surrogate, rendered)
    return rendered


def type_name(value: object) -> str:
    """A short, never-raising name for the Python type of ``value``, used in
    messages about values that are not what a keyword requires."""
    name = getattr(type(value), "__name__", None)
    return name if type(name) is str else "object"


def local_target(root: Any, ref: object) -> Any:
    """The node of ``root`` a local JSON-pointer reference (``#`` or
    ``#/a/b``, ``~1`` and ``~0`` escaped) names, or None (another kind of
    reference: an anchor, a remote one; or a pointer to nothing)."""
    if type(ref) is not str or not ref.startswith("#"):
        return None
    if ref in ("#", "#/"):
        return root
    if not ref.startswith("#/"):
        return None
    node = root
    for raw in ref[2:].split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, (list, tuple)) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node
