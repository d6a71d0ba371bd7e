"""Lossless JSON as text: :func:`dumps` (orjson, with a writer of its own
for values deeper than orjson goes) and :func:`loads` (orjson, with the
checks that keep what it parses lossless).
"""

from __future__ import annotations

import json as _stdlib_json
from typing import Any

import orjson

from ..errors import LosslessJsonError
from ._frozen import FrozenDict, check, scalar_ok, walk
from ._rules import BIG_FLOAT, MAX_JSON_DEPTH, value_problem

__all__ = ["dumps", "loads", "text_problem"]


def dumps(value: object, *, sort_keys: bool = False) -> bytes:
    """``value`` as compact UTF-8 JSON (orjson), keys in insertion order
    unless ``sort_keys``. Accepts frozen and plain values alike; raises
    LosslessJsonError for anything that is not lossless JSON (checked first:
    orjson would write ``-0.0``, ``NaN`` as ``null``, or a str enum).
    Pure and thread-safe."""
    check(value, "value", False, True)
    option = orjson.OPT_SORT_KEYS if sort_keys else 0
    try:
        return orjson.dumps(value, option=option)
    except orjson.JSONEncodeError as err:
        if "recursion" not in str(err).lower():
            raise LosslessJsonError("value", f"cannot be serialized: {err}") from err
    # orjson stops at 254 levels; MAX_JSON_DEPTH is 256.
    return _dumps_deep(value, option)


def _dumps_deep(value: object, option: int) -> bytes:
    """Same bytes as ``orjson.dumps`` would give, for values too deep for it:
    containers are written here, scalars and keys by orjson."""
    parts: list[bytes] = []
    write = parts.append
    sort_keys = bool(option & orjson.OPT_SORT_KEYS)
    stack: list[tuple[Any, bool, bytes]] = []
    it: Any = iter((value,))
    in_dict, closer, first = False, b"", True
    while True:
        for item in it:
            if not first:
                write(b",")
            first = False
            if in_dict:
                k, v = item
                write(orjson.dumps(k))
                write(b":")
            else:
                v = item
            t = type(v)
            if t is dict or t is FrozenDict:
                write(b"{")
                stack.append((it, in_dict, closer))
                items = sorted(v.items(), key=_first) if sort_keys else v.items()
                it, in_dict, closer, first = iter(items), True, b"}", True
                break
            if t is list or t is tuple:
                write(b"[")
                stack.append((it, in_dict, closer))
                it, in_dict, closer, first = iter(v), False, b"]", True
                break
            write(orjson.dumps(v))
        else:
            write(closer)
            if not stack:
                return b"".join(parts)
            it, in_dict, closer = stack.pop()
            first = False


def _first(item: tuple[str, object]) -> str:
    return item[0]


def loads(data: bytes | bytearray | memoryview | str, *, frozen: bool = True, path: str = "value") -> Any:
    """Parse JSON text (orjson) into a lossless value: materialized (frozen)
    by default, plain ``dict``/``list`` with ``frozen=False``.

    Raises LosslessJsonError for malformed text (the problem quotes orjson's
    message, which gives line, column and character offset) and for text
    orjson accepts but that is not lossless: ``-0.0``, an integer literal
    outside ``[-2**63, 2**64-1]`` (orjson would silently make it a float),
    nesting deeper than :data:`MAX_JSON_DEPTH`. ``path`` names the value in
    errors. Pure and thread-safe.
    """
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError as err:
        message = str(err)
        if "depth limit" in message or "recursion" in message.lower():
            problem = f"nesting deeper than {MAX_JSON_DEPTH} (JSON text: {message})"
        else:
            problem = f"invalid JSON text: {message}"
        raise LosslessJsonError(path, problem) from err
    if type(parsed) is not dict and type(parsed) is not list:
        if not scalar_ok(parsed, False):  # -0.0: orjson never makes nan or inf
            raise LosslessJsonError(path, value_problem(parsed))
        if type(parsed) is float and (parsed >= BIG_FLOAT or parsed <= -BIG_FLOAT):
            _reject_big_int_literals(data, path)
        return parsed
    big_floats: list[bool] = []
    result = walk(parsed, path, frozen, False, big_floats)
    if big_floats:
        _reject_big_int_literals(data, path)
    return result if frozen else parsed


def text_problem(text: str) -> str | None:
    """What is wrong with ``text`` as JSON, phrased for a model to fix it
    (``unexpected end of data at line 1 column 17``), or ``None`` when it
    parses. Only orjson's syntax check: losslessness is :func:`loads`'s."""
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError as err:
        problem = err.msg or "not JSON"
        if not problem[1:2].isupper():  # "Unexpected ..." but not "UTF-8 ..."
            problem = problem[:1].lower() + problem[1:]
        return f"{problem} at line {err.lineno} column {err.colno}"
    return None


def _reject_big_int_literals(data: bytes | bytearray | memoryview | str, path: str) -> None:
    """Parse ``data`` again, with the standard library (exact ints), to tell
    an out-of-range integer literal from a genuinely big float. Only called
    when orjson produced a float of magnitude >= 9.2e18, after the depth
    check, so the recursive stdlib parser stays far from its limit."""
    text = bytes(data) if isinstance(data, (bytearray, memoryview)) else data
    try:
        exact = _stdlib_json.loads(text)
    except (ValueError, RecursionError) as err:  # pragma: no cover - orjson parsed it
        raise LosslessJsonError(path, f"invalid JSON text: {err}") from err
    check(exact, path, False, False)
