"""The wire protocol between the PTC executor and its worker process.

Both sides import this module, so it uses only the standard library (and
orjson when it is installed): the worker must run in a bare Python, e.g.
inside a container that has none of this project's dependencies.

**Framing.** One JSON object per line, UTF-8, ``\\n``-terminated, in each
direction: the parent writes to the worker's stdin, the worker writes to
its (original) stdout. Every message has a ``"t"`` key naming its kind. A
line longer than the receiver's limit is a protocol violation.

**Messages, worker → parent**

``{"t": "ready", "v": VERSION, "pid": int}``
    The interpreter is up and the worker waits for its one run. Written
    once, right after start-up (so a spare worker's ``ready`` sits in the
    pipe until a run picks the worker).
``{"t": "out", "data": str}``
    Captured ``print``/``sys.stdout``/``sys.stderr`` text, in order (long
    writes are split into chunks of at most :data:`OUT_CHUNK` characters).
``{"t": "call", "id": n, "name": str, "args": {...}}``
    The program calls tool ``name`` with ``args``. ``n`` counts from 1 in
    the order the program made its calls.
``{"t": "cancel", "id": n}``
    The program stopped waiting for call ``n`` before its result came (the
    task awaiting it was cancelled: ``asyncio.wait_for`` timing out,
    ``task.cancel()``, a ``TaskGroup`` whose other task failed). The parent
    aborts that sub-call alone (its signal fires; it settles ``ABORTED``,
    or ``ABORTED_BEFORE_DISPATCH`` if its body had not started), which
    frees its place under ``max_parallel_sub_calls`` once its body returns.
    Its ``result`` may still come: the worker drops it.
``{"t": "progress", "progress": number, "total": number | null, "message": str | null}``
    The program called ``report_progress(...)``: the parent publishes it as
    the ``run_code`` call's ``tools/progress`` event.
``{"t": "done", "ok": true, "result": <JSON>}``
    The program returned ``result``.
``{"t": "done", "ok": false, "kind": str, "message": str, "traceback": str}``
    The program failed: ``kind`` is ``error`` (an uncaught exception),
    ``syntax`` (it does not compile), ``memory`` (``MemoryError``) or
    ``result`` (the returned value is not JSON); ``message`` is one line
    (cut at 2,000 characters), ``traceback`` the last lines of the
    traceback (its last 8,000 characters; may be empty).

**Messages, parent → worker**

``{"t": "run", "v": VERSION, "code": str, "tools": [...], "limits": {...}, "own": [str]}``
    Run ``code``. ``tools`` lists the bindings (see
    :func:`executors.ptc.signatures.bindings`): ``{"py", "name", "params",
    "omit_none", "summary", "signature"}`` each (``summary`` and
    ``signature``, ``{"params": [[py, hint, default | null], ...],
    "returns": hint}``, optional). ``limits``: ``memory_bytes``, ``cpu_seconds``,
    ``file_bytes`` (each an int or null; a key the worker does not know is
    ignored). ``own``: the names of the executor's own tools
    (``run_code``), which a program cannot call (optional).
``{"t": "result", "id": n, "ok": true, "value": <JSON>}``
``{"t": "result", "id": n, "ok": false, "name": str, "error": str, "code": str | null, "error_name": str | null, "sub_call_id": str}``
    The outcome of call ``n``: its value, or the tool's name, the failure
    message, code and error class name (``info.name``: ``FileNotFoundError``,
    ``ToolArgsError``), and the sub-call's id.

A worker runs one program and then exits; the parent kills its whole
process group in any case, and never reuses a worker.
"""

from __future__ import annotations

import inspect
import json
import math
import types
from typing import Any

_orjson: Any
try:  # orjson is faster; the worker falls back to json in a bare Python
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the interpreter
    _orjson = None

__all__ = [
    "CALL",
    "CANCEL",
    "DONE",
    "EXIT_MEMORY",
    "EXIT_ORPHANED",
    "EXIT_PIPE_CLOSED",
    "FAILURE_KINDS",
    "FrameTooLong",
    "LineFramer",
    "MAX_DEPTH",
    "OUT",
    "OUT_CHUNK",
    "PROGRESS",
    "READY",
    "RESULT",
    "RUN",
    "VERSION",
    "decode",
    "encode",
    "json_problem",
]

VERSION = 1

READY = "ready"
OUT = "out"
CALL = "call"
CANCEL = "cancel"
DONE = "done"
RUN = "run"
RESULT = "result"
PROGRESS = "progress"

#: The ``kind`` values a worker may report in a failed ``done``.
FAILURE_KINDS = frozenset({"error", "syntax", "memory", "result"})

#: Exit status of a worker that ran out of memory and could not say so.
EXIT_MEMORY = 86

#: Exit status of a worker whose parent went away (its lifeline closed).
EXIT_ORPHANED = 87

#: Exit status of a worker that found a protocol pipe's file descriptor
#: closed (``EBADF``): its program closed a descriptor it did not open.
EXIT_PIPE_CLOSED = 88

#: Characters of captured output per ``out`` message.
OUT_CHUNK = 16384

#: Deepest nesting the worker sends (the envelope adds one level; the core
#: accepts 256, orjson writes 254).
MAX_DEPTH = 250

_MIN_INT = -(2**63)
_MAX_INT = 2**64 - 1


def encode(message: dict[str, Any]) -> bytes:
    """One message as a ``\\n``-terminated line (the worker's side: values
    were checked with :func:`json_problem` first)."""
    if _orjson is not None:
        try:
            data: bytes = _orjson.dumps(message)
            return data + b"\n"
        except (TypeError, _orjson.JSONEncodeError):  # pragma: no cover - checked values
            pass
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode() + b"\n"


def decode(line: bytes) -> Any:
    """Parse one line (the worker's side; the parent parses with the
    core's lossless ``loads``)."""
    if _orjson is not None:
        return _orjson.loads(line)
    return json.loads(line)  # pragma: no cover - depends on the interpreter


class FrameTooLong(ValueError):
    """A line passed the receiver's limit; ``head``: its first bytes (what
    kind of message it is)."""

    def __init__(self, message: str, head: bytes = b"") -> None:
        super().__init__(message)
        self.head = head


class LineFramer:
    """Splits a byte stream into lines of at most ``max_line`` bytes.

    ``feed(chunk)`` returns the complete lines (without the ``\\n``) that
    ``chunk`` finished, in order; a line that grows past ``max_line``
    raises :class:`FrameTooLong` (the stream is then unusable).
    """

    __slots__ = ("_buffer", "_max")

    def __init__(self, max_line: int) -> None:
        self._buffer = bytearray()
        self._max = max_line

    def feed(self, chunk: bytes) -> list[bytes]:
        buffer = self._buffer
        start = len(buffer)
        buffer += chunk
        lines: list[bytes] = []
        begin = 0
        search = start
        while True:
            end = buffer.find(b"\n", search)
            if end < 0:
                break
            if end - begin > self._max:
                raise FrameTooLong(f"a message of more than {self._max} bytes", bytes(buffer[begin : begin + 64]))
            lines.append(bytes(buffer[begin:end]))
            begin = search = end + 1
        if begin:
            del buffer[:begin]
        if len(buffer) > self._max:
            raise FrameTooLong(f"a message of more than {self._max} bytes", bytes(buffer[:64]))
        return lines

    @property
    def pending(self) -> int:
        """Bytes of an unfinished line."""
        return len(self._buffer)


#: A path of more than this many steps shows its first and last
#: :data:`_PATH_ENDS` and how many it leaves out between them: the rule of
#: every path the core writes (``docs/reference.md`` section 2,
#: ``dsh_actors.json.path_for_key``), which the worker, needing only the
#: standard library, cannot import (a test holds the two to the same text).
_MAX_PATH_STEPS = 20
_PATH_ENDS = 8

#: A key longer than this is shown by its first :data:`_KEY_PREFIX_IN_PATH`
#: characters and an ellipsis (the core's ``_MAX_KEY_IN_PATH`` and
#: ``_KEY_PREFIX_IN_PATH``; a test holds the two equal).
_MAX_KEY_IN_PATH = 64
_KEY_PREFIX_IN_PATH = 48

#: A dict key with a lone surrogate is named by its first this many
#: characters (the core's; a test holds the two equal).
_KEY_IN_PROBLEM = 40

#: A step on the way to a value: the steps before it (None at the root) and its own.
_Steps = tuple[Any, str] | None


def _has_lone_surrogate(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate: it cannot be encoded as UTF-8."""
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _quote_key(key: str) -> str:
    """``key`` as a JSON string, as the core quotes it: non-ASCII as it is,
    but a key with a lone surrogate escaped, ASCII only."""
    return json.dumps(key, ensure_ascii=_has_lone_surrogate(key))


def _key_step(key: str) -> str:
    """The path step of dict key ``key``, as the core writes it
    (``dsh_actors.json.path_for_key``): ``.name``, ``["content-type"]``, or a
    long key's start ``["abc…"]``."""
    if len(key) > _MAX_KEY_IN_PATH:
        return f'[{_quote_key(key[:_KEY_PREFIX_IN_PATH])[:-1]}…"]'
    if key.isidentifier():
        return f".{key}"
    return f"[{_quote_key(key)}]"


def _path(root: str, steps: _Steps) -> str:
    """``root`` and ``steps``, shortened as the core shortens a path."""
    shown: list[str] = []
    while steps is not None:
        steps, step = steps
        shown.append(step)
    shown.reverse()
    if len(shown) <= _MAX_PATH_STEPS:
        return root + "".join(shown)
    hidden = len(shown) - 2 * _PATH_ENDS
    return f"{root}{''.join(shown[:_PATH_ENDS])} … ({hidden} more) … {''.join(shown[-_PATH_ENDS:])}"


def _int_text(value: int) -> str:
    """An int as the core's lossless-JSON errors show it
    (``dsh_actors/json/_rules.py``; a test holds the two equal): ``2**64``
    for a power of two, its digits up to 256 bits, else ``of N bits`` (past
    4,300 digits ``str`` raises, and the digits would swamp the message)."""
    magnitude = -value if value < 0 else value
    bits = magnitude.bit_length()
    if bits > 1 and magnitude & (magnitude - 1) == 0:
        return f"{'-' if value < 0 else ''}2**{bits - 1}"
    if bits <= 256:
        return int.__repr__(value)
    return f"of {bits} bits"


#: Key types shown with their value (the builtin ``repr``, which runs no
#: code of the program's); any other key by its type alone.
_SHOWN_KEYS = (float, bool, type(None), bytes, complex)


def _key_text(key: object) -> str:
    """A dict key that is not a str, as a problem names it: ``int 1``,
    ``int of 16610 bits``, ``bytes b'k'`` (cut at 60 characters), ``tuple``."""
    if type(key) is int:
        return f"int {_int_text(key)}"
    kind = type(key)
    if kind in _SHOWN_KEYS:
        text = repr(key)  # (an exact builtin type: its own repr)
        return f"{kind.__name__} {text if len(text) <= 60 else text[:57] + '...'}"
    return kind.__name__


def _not_awaited(coroutine: Any) -> str:
    """The problem of a coroutine where a value belongs: a call made
    without ``await`` (a tool's is named ``tools.NAME``). One that never
    started is closed: as a value it can never run, and Python would warn
    that it was never awaited from wherever it is dropped (the worker's
    own code, for a returned one)."""
    if inspect.getcoroutinestate(coroutine) == inspect.CORO_CREATED:
        coroutine.close()
    return f"the call to {coroutine.__qualname__}() was not awaited: await it"


def json_problem(value: object, path: str = "value") -> str | None:
    """Why ``value`` is not lossless JSON (the core's rules,
    ``docs/reference.md`` section 2), or None: exact ``dict`` (``str``
    keys, no lone surrogates), ``list``/``tuple``, ``str`` (no lone
    surrogates), ``int`` in [-2**63, 2**64-1], finite ``float``
    other than ``-0.0``, ``bool``, ``None``; no cycles, at most
    :data:`MAX_DEPTH` levels. The problem's path starts at ``path``, its
    keys are written as the core writes them (``["content-type"]``, a long
    key cut), and one of more than 20 steps is shortened as the core's are; an int is
    shown as the core shows it (past 256 bits by its size). A coroutine is
    named as a call that was not awaited (and closed if it never started).
    Iterative, so a deep value cannot exhaust the stack; runs no code of
    the value's own (no ``repr``)."""
    stack: list[tuple[Any, _Steps, int]] = [(value, None, 0)]
    open_ids: set[int] = set()
    exits: list[tuple[int, int]] = []  # (stack length, id) to release on the way back
    while stack:
        while exits and exits[-1][0] > len(stack):
            open_ids.discard(exits.pop()[1])
        item, steps, depth = stack.pop()
        kind = type(item)
        if item is None or kind is bool:
            continue
        if kind is str:
            if _has_lone_surrogate(item):
                return f"{_path(path, steps)}: a str with a lone surrogate is not JSON"
            continue
        if kind is int:
            if not _MIN_INT <= item <= _MAX_INT:
                shown = _int_text(item)
                article = "an int" if shown.startswith("of ") else "the int"
                return f"{_path(path, steps)}: {article} {shown} is outside [-2**63, 2**64-1]"
            continue
        if kind is float:
            if not math.isfinite(item):
                return f"{_path(path, steps)}: the float {item!r} is not JSON"
            if item == 0.0 and math.copysign(1.0, item) < 0:
                return f"{_path(path, steps)}: -0.0 is not lossless JSON"
            continue
        if kind is dict or kind is list or kind is tuple:
            if depth >= MAX_DEPTH:
                return f"{_path(path, steps)}: nesting deeper than {MAX_DEPTH} levels"
            ident = id(item)
            if ident in open_ids:
                return f"{_path(path, steps)}: a value that contains itself is not JSON"
            open_ids.add(ident)
            exits.append((len(stack) + 1, ident))
            if kind is dict:
                pairs = list(item.items())
                for key, _child in pairs:
                    if type(key) is not str:
                        return f"{_path(path, steps)}: a dict key must be a str, not {_key_text(key)}"
                    if _has_lone_surrogate(key):
                        shown = _quote_key(key[:_KEY_IN_PROBLEM])
                        return f"{_path(path, steps)}: the dict key {shown} has a lone surrogate and is not JSON"
                for key, child in reversed(pairs):
                    stack.append((child, (steps, _key_step(key)), depth + 1))
            else:
                children = list(item)
                for index in range(len(children) - 1, -1, -1):
                    stack.append((children[index], (steps, f"[{index}]"), depth + 1))
            continue
        if kind is types.CoroutineType:
            return f"{_path(path, steps)}: {_not_awaited(item)}"
        return f"{_path(path, steps)}: a {kind.__name__} is not JSON (use dict, list, str, int, float, bool or None)"
    return None
