"""The durable session log (``docs/reference.md``, section 10): one JSON
object per line.

A :class:`Session` records what a batch did, in commit order, as *events*:
plain JSON objects, each with a ``"type"`` key. The executor writes four
kinds, built by the functions below (keys are snake_case):

``tool/call``
    ``{"type", "turn", "step", "call_id", "name", "arguments"}``:
    ``arguments`` is the call's normalized arguments as JSON, or the raw
    string when the model sent text that is not JSON.
``tool/result``
    ``{"type", "call_id", "is_error", "content", "error", "meta"}``:
    ``content`` as :func:`~dsh_actors.model.content_to_json` writes it,
    ``error`` ``None`` or ``{"message", "info"}`` with ``info`` ``None`` or
    ``{"name", "code", "reason"}``. The canonical ``value`` is never logged.
``tool/ptc-dispatch-start``
    ``{"type", "root_call_id", "parent_call_id", "sub_call_id", "name",
    "arguments"}``: pairing ids, name and arguments only (never the schema
    or the description).
``tool/ptc-dispatch``
    ``{"type", "root_call_id", "parent_call_id", "sub_call_id", "name",
    "is_error", "content", "error", "meta"}``: the settled sub-call's
    durable copy, same field shapes as ``tool/result``.

**Storage.** ``Session()`` keeps events in memory; ``Session(path)`` also
appends them to a JSONL file (orjson, compact, ``\\n``-terminated) through
an unbuffered handle, so each event is one ``write`` that reaches the OS
before :meth:`Session.append` returns (``fsync=True`` also makes it reach
the disk). Every method is thread-safe: one lock orders the appends, so
lines from several threads never interleave. The session is the only
writer of its file.

**Failures.** An event that is not lossless JSON raises
:class:`~dsh_actors.errors.LosslessJsonError` (path starting at ``event``)
and writes nothing. A failed write re-raises the ``OSError`` as it is (the
executor turns it into ``ToolBatchExecutionError``) and leaves the session
consistent: the event is not in :meth:`Session.events`, and the bytes it
may have left are cut off the file. If they cannot be cut (the file cannot
be truncated), the next append first writes a ``\\n`` when the file does
not end with one, so the torn line never merges with a good one (it then
stands as a line of its own, which a later :meth:`Session.open` reports as
corrupt: that takes a failed write *and* a failed truncate). Appending
to a closed session raises ``OSError("session is closed")``.

**Reading back.** :meth:`Session.open` reads an existing file and continues
it. Blank lines are skipped. The *last* line is accepted only if it parses
as an event (a valid event without its trailing ``\\n`` is kept, and the
next append starts on a fresh line); otherwise it is a torn write from a
crash: it is ignored, reported by :attr:`Session.torn_line`, and cut off
the file before the first append (a read-only use never changes the file).
Any other line that is not a valid event raises :class:`SessionCorruptError`
naming ``<path>:<line number>``.

**Repair and replay.** :meth:`Session.repair` appends a synthetic failure
``tool/ptc-dispatch`` for every ``tool/ptc-dispatch-start`` still without
one (start order), then a synthetic failure ``tool/result`` for every
``tool/call`` still without a result (call order); both carry
:data:`REPAIR_MESSAGE` and info ``SessionRepair`` / ``INTERRUPTED``.
:meth:`Session.pending_calls` and :meth:`Session.pending_sub_calls` say
what is still open. :meth:`Session.results_by_call` gives each call's
:class:`LoggedResult`, rebuilt from logged fields only, whose
:meth:`LoggedResult.projection` is what ``present_result`` takes on replay.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Final, Protocol

import orjson

from .errors import LosslessJsonError, safe_str
from .json import FrozenDict, dumps, loads, materialize
from .model import (
    ContentBlock,
    TextBlock,
    ToolErrorInfo,
    ToolExecutionFailure,
    ToolFailure,
    content_from_json,
    content_to_json,
)
from .presentation import ToolResultProjection

__all__ = [
    "CALL",
    "PTC_DISPATCH",
    "PTC_DISPATCH_START",
    "REPAIR_ERROR_CODE",
    "REPAIR_ERROR_NAME",
    "REPAIR_MESSAGE",
    "RESULT",
    "LoggedResult",
    "Session",
    "SessionCorruptError",
    "call_event",
    "error_from_json",
    "error_to_json",
    "ptc_dispatch_event",
    "ptc_dispatch_start_event",
    "result_event",
    "results_by_call",
]

CALL: Final = "tool/call"
RESULT: Final = "tool/result"
PTC_DISPATCH_START: Final = "tool/ptc-dispatch-start"
PTC_DISPATCH: Final = "tool/ptc-dispatch"

REPAIR_MESSAGE: Final = "tool call interrupted: the session ended before its result was recorded"
"""The message of the synthetic failure :meth:`Session.repair` appends."""
REPAIR_ERROR_NAME: Final = "SessionRepair"
REPAIR_ERROR_CODE: Final = "INTERRUPTED"

_INTERRUPTED: Final = ToolExecutionFailure(
    error=ToolFailure(REPAIR_MESSAGE, ToolErrorInfo(REPAIR_ERROR_NAME, REPAIR_ERROR_CODE)),
    content=(TextBlock("Error: " + REPAIR_MESSAGE),),
)


class SessionCorruptError(LosslessJsonError):
    """A line of a session file, other than the last, is not a valid event:
    ``<file>:<lineno>: <problem>``. ``file`` and ``lineno`` (1-based) locate
    it; ``path`` (inherited) is ``"<file>:<lineno>"``. Its code is
    ``INVALID_JSON``."""

    def __init__(self, file: str, lineno: int, problem: str) -> None:
        self.file = file
        self.lineno = lineno
        super().__init__(f"{file}:{lineno}", problem)


# --------------------------------------------------------------------------
# Event builders
# --------------------------------------------------------------------------


class ResultFields(Protocol):
    """What :func:`result_event` reads: the durable fields of a result (a
    live ``ToolExecutionSuccess``/``ToolExecutionFailure``, a
    ``ToolResultProjection`` or a :class:`LoggedResult`)."""

    @property
    def is_error(self) -> bool: ...

    @property
    def content(self) -> Sequence[ContentBlock]: ...

    @property
    def error(self) -> ToolFailure | None: ...

    @property
    def meta(self) -> Any: ...


def _plain_str(value: object, where: str) -> str:
    """``value`` as an exact ``str`` (a str enum such as ``ErrorCode`` gives
    its value); anything else is a TypeError naming ``where``."""
    if type(value) is str:
        return value
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, str):
        return str.__str__(value)
    raise TypeError(f"{where} must be a str, got {type(value).__qualname__}")


def _int(value: object, where: str) -> int:
    if type(value) is not int:
        raise TypeError(f"{where} must be an int, got {type(value).__qualname__}")
    return value


def error_to_json(error: ToolFailure | None) -> dict[str, Any] | None:
    """The logged form of a failure: ``None``, or ``{"message", "info"}``
    with ``info`` ``None`` or ``{"name", "code", "reason"}``."""
    if error is None:
        return None
    info = error.info
    return {
        "message": _plain_str(error.message, "error.message"),
        "info": None
        if info is None
        else {
            "name": _plain_str(info.name, "error.info.name"),
            "code": _plain_str(info.code, "error.info.code"),
            "reason": None if info.reason is None else _plain_str(info.reason, "error.info.reason"),
        },
    }


def error_from_json(item: object, path: str = "error") -> ToolFailure | None:
    """Inverse of :func:`error_to_json`; raises :class:`LosslessJsonError`
    naming the bad field."""
    if item is None:
        return None
    if not isinstance(item, Mapping):
        raise LosslessJsonError(path, "must be null or an object")
    message = item.get("message")
    if type(message) is not str:
        raise LosslessJsonError(f"{path}.message", "must be a str")
    info = item.get("info")
    if info is None:
        return ToolFailure(message)
    if not isinstance(info, Mapping):
        raise LosslessJsonError(f"{path}.info", "must be null or an object")
    fields: list[str | None] = []
    for key in ("name", "code", "reason"):
        value = info.get(key)
        if type(value) is not str and not (key == "reason" and value is None):
            raise LosslessJsonError(f"{path}.info.{key}", "must be a str")
        fields.append(value)
    name, code, reason = fields
    assert name is not None and code is not None
    return ToolFailure(message, ToolErrorInfo(name, code, reason))


def call_event(turn: int, step: int, call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    """A ``tool/call`` event. ``arguments``: the call's normalized arguments
    (frozen or plain JSON), or the raw text when it was not JSON."""
    return {
        "type": CALL,
        "turn": _int(turn, "turn"),
        "step": _int(step, "step"),
        "call_id": _plain_str(call_id, "call_id"),
        "name": _plain_str(name, "name"),
        "arguments": arguments,
    }


def result_event(call_id: str, result: ResultFields) -> dict[str, Any]:
    """A ``tool/result`` event: ``is_error``, ``content``, ``error`` and
    ``meta`` of ``result``; never its canonical ``value``."""
    return {
        "type": RESULT,
        "call_id": _plain_str(call_id, "call_id"),
        "is_error": bool(result.is_error),
        "content": content_to_json(result.content),
        "error": error_to_json(result.error),
        "meta": result.meta,
    }


def ptc_dispatch_start_event(
    root_call_id: str, parent_call_id: str | None, sub_call_id: str, name: str, arguments: Any
) -> dict[str, Any]:
    """A ``tool/ptc-dispatch-start`` event: pairing ids, name and normalized
    arguments of a started ``run_code`` sub-dispatch (no schema, no
    description)."""
    return {
        "type": PTC_DISPATCH_START,
        **_pairing(root_call_id, parent_call_id, sub_call_id, name),
        "arguments": arguments,
    }


def _pairing(root_call_id: str, parent_call_id: str | None, sub_call_id: str, name: str) -> dict[str, Any]:
    """The ids and name both sub-dispatch events carry, checked."""
    return {
        "root_call_id": _plain_str(root_call_id, "root_call_id"),
        "parent_call_id": None if parent_call_id is None else _plain_str(parent_call_id, "parent_call_id"),
        "sub_call_id": _plain_str(sub_call_id, "sub_call_id"),
        "name": _plain_str(name, "name"),
    }


def ptc_dispatch_event(
    root_call_id: str,
    parent_call_id: str | None,
    sub_call_id: str,
    name: str,
    is_error: bool,
    content: Iterable[ContentBlock],
    error: ToolFailure | None,
    meta: Any,
) -> dict[str, Any]:
    """A ``tool/ptc-dispatch`` event: the durable copy of a settled
    sub-dispatch (``content`` is the logged, possibly replaced, copy)."""
    return {
        "type": PTC_DISPATCH,
        **_pairing(root_call_id, parent_call_id, sub_call_id, name),
        "is_error": bool(is_error),
        "content": content_to_json(content),
        "error": error_to_json(error),
        "meta": meta,
    }


# --------------------------------------------------------------------------
# Reading results back
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoggedResult:
    """A result rebuilt from a ``tool/result`` (or ``tool/ptc-dispatch``)
    event alone: ``call_id`` (the ``sub_call_id`` of a dispatch), content
    blocks, ``is_error``, ``error`` and frozen ``meta``. It has the
    attributes presenters read; :meth:`projection` gives the
    ``ToolResultProjection`` that ``present_result`` is typed to take."""

    call_id: str
    content: tuple[ContentBlock, ...]
    is_error: bool
    error: ToolFailure | None = None
    meta: Any = None

    @classmethod
    def from_event(cls, event: Mapping[str, Any]) -> LoggedResult:
        """Rebuild a result; raises :class:`LosslessJsonError` naming the
        bad field (``event.content[0].text: ...``) or ``ValueError`` for an
        event of another type."""
        kind = event.get("type")
        if kind == RESULT:
            id_key = "call_id"
        elif kind == PTC_DISPATCH:
            id_key = "sub_call_id"
        else:
            raise ValueError(f"not a {RESULT} or {PTC_DISPATCH} event: type {safe_str(kind)!r}")
        call_id = event.get(id_key)
        if type(call_id) is not str:
            raise LosslessJsonError(f"event.{id_key}", "must be a str")
        is_error = event.get("is_error")
        if type(is_error) is not bool:
            raise LosslessJsonError("event.is_error", "must be a bool")
        return cls(
            call_id=call_id,
            content=content_from_json(event.get("content"), "event.content"),
            is_error=is_error,
            error=error_from_json(event.get("error"), "event.error"),
            meta=materialize(event.get("meta"), "event.meta"),
        )

    def projection(self) -> ToolResultProjection:
        """The durable projection ``present_result`` takes."""
        return ToolResultProjection(
            content=self.content, is_error=self.is_error, error=self.error, meta=self.meta
        )


def results_by_call(events: Iterable[Mapping[str, Any]], *, ptc: bool = False) -> dict[str, LoggedResult]:
    """Each call's logged result, by call id, in log order. ``tool/result``
    events only, or with ``ptc`` only ``tool/ptc-dispatch`` events (keyed by
    ``sub_call_id``). A call id logged twice keeps its last result."""
    wanted = PTC_DISPATCH if ptc else RESULT
    out: dict[str, LoggedResult] = {}
    for event in events:
        if event.get("type") == wanted:
            result = LoggedResult.from_event(event)
            out[result.call_id] = result
    return out


# --------------------------------------------------------------------------
# The session
# --------------------------------------------------------------------------


def _shape_problem(event: Mapping[str, Any]) -> str | None:
    """Why ``event`` cannot be a session event, or None. Checks only what
    the session itself relies on: a non-empty str ``type`` and, for calls
    and results, a str ``call_id``."""
    kind = event.get("type")
    if type(kind) is not str or not kind:
        return f'"type" must be a non-empty str, got {safe_str(kind)!r}'
    if (kind == CALL or kind == RESULT) and type(event.get("call_id")) is not str:
        return f'a {kind} event needs a str "call_id"'
    return None


def _encode(event: Mapping[str, Any]) -> bytes:
    """One event as compact JSON (no newline), or the error saying why not."""
    if not isinstance(event, Mapping):
        raise TypeError(f"a session event must be a mapping, got {type(event).__qualname__}")
    problem = _shape_problem(event)
    if problem is not None:
        raise ValueError(f"invalid session event: {problem}")
    value = event if type(event) is dict or type(event) is FrozenDict else dict(event)
    try:
        # orjson's buffer is allocated with room to spare (about 4 KB for a
        # 100-byte event) and the session keeps every line: keep an
        # exact-size copy (the benchmark ``session.bytes_per_event`` shows it).
        return bytes(memoryview(dumps(value)))
    except LosslessJsonError as err:
        path = err.path
        if path == "value" or path.startswith(("value.", "value[")):
            path = "event" + path[5:]
        raise LosslessJsonError(path, err.problem) from None


def _id_or_none(value: object) -> str | None:
    return value if type(value) is str else None


def _interrupted_dispatch(
    sub_call_id: str, root_call_id: str | None, parent_call_id: str | None, name: str | None
) -> dict[str, Any]:
    """The synthetic ``tool/ptc-dispatch`` :meth:`Session.repair` appends for
    a sub-call that started and never settled (the ids and name of its start
    event; one that was not a str is ``None``)."""
    return {
        "type": PTC_DISPATCH,
        "root_call_id": root_call_id,
        "parent_call_id": parent_call_id,
        "sub_call_id": sub_call_id,
        "name": name,
        "is_error": True,
        "content": content_to_json(_INTERRUPTED.content),
        "error": error_to_json(_INTERRUPTED.error),
        "meta": None,
    }


def _write_all(file: IO[bytes], data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = file.write(view)
        if not written:
            raise OSError(errno.EIO, "session write made no progress")
        view = view[written:]


class Session:
    """A durable, append-only log of tool events (see the module docstring).

    ``Session()`` is in memory. ``Session(path)`` writes JSONL to ``path``:
    the file is created if missing; its directory must exist
    (``FileNotFoundError`` otherwise) and an existing file must be empty
    (``FileExistsError``: continue one with :meth:`open`). ``fsync=True``
    fsyncs after every event.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *, fsync: bool = False) -> None:
        self._lock = threading.Lock()
        self._lines: list[bytes] = []  # each event's JSON, without the newline
        self._pending: dict[str, None] = {}  # call ids without a result, in call order
        # sub_call_id -> (root_call_id, parent_call_id, name) of each started
        # sub-call without a settle event, in start order
        self._pending_sub_calls: dict[str, tuple[str | None, str | None, str | None]] = {}
        self._fsync = bool(fsync)
        self._closed = False
        self._path: Path | None = None
        self._file: IO[bytes] | None = None
        self._size = 0  # bytes of the file that hold good events
        self._dirty = False  # the file may hold bytes past _size to cut
        self._newline_needed = False  # the good bytes do not end with a newline
        self._torn_line: int | None = None
        if path is not None:
            self._path = Path(path)
            parent = self._path.parent
            if not parent.is_dir():
                raise FileNotFoundError(
                    errno.ENOENT, "session log directory does not exist", str(parent)
                )
            file = self._open_file(self._path)
            try:
                size = os.fstat(file.fileno()).st_size
            except BaseException:
                file.close()
                raise
            if size:
                file.close()
                raise FileExistsError(
                    errno.EEXIST,
                    "session log already holds events; use Session.open(path) to continue it",
                    str(self._path),
                )
            self._file = file

    @staticmethod
    def _open_file(path: Path) -> IO[bytes]:
        # Unbuffered: a write either reaches the OS or fails; nothing of a
        # failed event lingers in a buffer to be flushed later. Readable, to
        # check the last byte after a failure.
        return open(path, "a+b", buffering=0)  # noqa: SIM115 - closed by close()

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, fsync: bool = False) -> Session:
        """Read the existing JSONL file at ``path`` and continue appending to
        it. Raises ``FileNotFoundError`` when it does not exist and
        :class:`SessionCorruptError` for a bad line other than the last (a
        bad last line is a torn write: ignored, see :attr:`torn_line`)."""
        file_path = Path(path)
        if not file_path.is_file():
            raise FileNotFoundError(
                errno.ENOENT,
                "session log does not exist (Session(path) creates a new one)",
                str(file_path),
            )
        session = cls(fsync=fsync)
        session._path = file_path
        file = cls._open_file(file_path)
        try:
            file.seek(0)
            data = file.read()
            session._load(data, str(file_path))
        except BaseException:
            file.close()
            raise
        session._file = file
        return session

    def _load(self, data: bytes, name: str) -> None:
        """Index the events of ``data`` (a whole file); see :meth:`open`."""
        # (line number, start offset, end offset without the newline, terminated)
        spans: list[tuple[int, int, int, bool]] = []
        start = 0
        lineno = 0
        size = len(data)
        while start < size:
            lineno += 1
            end = data.find(b"\n", start)
            terminated = end >= 0
            if not terminated:
                end = size
            if data[start:end].strip():
                spans.append((lineno, start, end, terminated))
            start = end + 1
        for index, (lineno, start, end, terminated) in enumerate(spans):
            line = data[start:end]
            last = index == len(spans) - 1
            try:
                event = loads(line, frozen=False, path="event")
                if type(event) is not dict:
                    raise LosslessJsonError("event", "a session event must be a JSON object")
                problem = _shape_problem(event)
                if problem is not None:
                    raise LosslessJsonError("event", problem)
            except LosslessJsonError as err:
                if not last:
                    raise SessionCorruptError(name, lineno, err.message) from None
                # A torn write: ignore it, and cut it off before appending.
                self._torn_line = lineno
                self._size = start
                self._dirty = True
                self._newline_needed = False  # a line starts after a newline
                return
            self._index(event["type"], event)
            self._lines.append(line)
            if last:
                self._size = size
                self._newline_needed = not data.endswith(b"\n")
        if not spans:
            # Only blank text (or nothing): continue after it.
            self._size = size
            self._newline_needed = size > 0 and not data.endswith(b"\n")

    # -- appending ------------------------------------------------------

    def append(self, event: Mapping[str, Any]) -> None:
        """Log one event (a mapping with a non-empty str ``"type"``; calls
        and results also need a str ``"call_id"``).

        Raises ``TypeError``/``ValueError`` for a malformed event,
        :class:`LosslessJsonError` for one that is not lossless JSON,
        ``OSError("session is closed")`` after :meth:`close`, and the
        ``OSError`` of a failed write as it is. On any error nothing is
        logged."""
        line = _encode(event)
        kind = event["type"]
        with self._lock:
            self._append_line(line, kind, event)

    def append_lossless(self, event: dict[str, Any]) -> None:
        """:meth:`append` for an event whose values are all lossless JSON
        already (materialized, or built from materialized values, as the
        executor's ``tool/call`` and ``tool/result`` events are): the check is
        not made twice. A subclass that overrides :meth:`append` gets every
        event through its :meth:`append`, as before."""
        if type(self).append is not Session.append or type(event) is not dict:
            self.append(event)
            return
        problem = _shape_problem(event)
        if problem is not None:
            raise ValueError(f"invalid session event: {problem}")
        try:
            line = bytes(memoryview(orjson.dumps(event)))  # exact size, as _encode keeps it
        except orjson.JSONEncodeError:
            line = _encode(event)  # too deep for orjson: the checked path says why
        with self._lock:
            self._append_line(line, event["type"], event)

    def _append_line(self, line: bytes, kind: str, event: Mapping[str, Any]) -> None:
        # Called with the lock held.
        if self._closed:
            raise OSError("session is closed")
        if self._file is not None:
            self._write(self._file, line)
        self._lines.append(line)
        self._index(kind, event)

    def _index(self, kind: str, event: Mapping[str, Any]) -> None:
        """Track what is still unsettled: calls without a result, and
        sub-calls (``tool/ptc-dispatch-start``) without a settle event."""
        if kind == CALL:
            # Calls and results always have a str call_id (_shape_problem).
            self._pending[event["call_id"]] = None
        elif kind == RESULT:
            self._pending.pop(event["call_id"], None)
        elif kind == PTC_DISPATCH_START:
            sub_call_id = event.get("sub_call_id")
            if type(sub_call_id) is str:
                self._pending_sub_calls[sub_call_id] = (
                    _id_or_none(event.get("root_call_id")),
                    _id_or_none(event.get("parent_call_id")),
                    _id_or_none(event.get("name")),
                )
        elif kind == PTC_DISPATCH:
            sub_call_id = event.get("sub_call_id")
            if type(sub_call_id) is str:
                self._pending_sub_calls.pop(sub_call_id, None)

    def _write(self, file: IO[bytes], line: bytes) -> None:
        if self._dirty:
            self._recover(file)
        data = b"".join((b"\n" if self._newline_needed else b"", line, b"\n"))
        try:
            _write_all(file, data)
            file.flush()
            if self._fsync:
                os.fsync(file.fileno())
        except BaseException:
            self._dirty = True
            try:
                self._recover(file)
            except OSError:
                pass  # still dirty: the next append tries again
            raise
        self._size += len(data)
        self._newline_needed = False

    def _recover(self, file: IO[bytes]) -> None:
        """Cut whatever follows the good bytes (a failed write, a torn last
        line). When that is impossible, keep those bytes as a line of their
        own: the next write starts on a fresh line."""
        fd = file.fileno()
        current = os.fstat(fd).st_size
        if current > self._size:
            try:
                os.ftruncate(fd, self._size)
                current = self._size
            except OSError:
                pass
        if current != self._size:
            self._size = current
            self._newline_needed = current > 0 and os.pread(fd, 1, current - 1) != b"\n"
        self._dirty = False

    # -- reading ----------------------------------------------------------

    def events(self) -> list[dict[str, Any]]:
        """Every event in log order, as fresh plain dicts (the caller may
        change them)."""
        with self._lock:
            lines = list(self._lines)
        return [orjson.loads(line) for line in lines]

    def __len__(self) -> int:
        """The number of events logged."""
        with self._lock:
            return len(self._lines)

    def pending_calls(self) -> list[str]:
        """Call ids that have a ``tool/call`` event but no ``tool/result``
        yet, in call order."""
        with self._lock:
            return list(self._pending)

    def pending_sub_calls(self) -> list[str]:
        """Sub-call ids that have a ``tool/ptc-dispatch-start`` event but no
        ``tool/ptc-dispatch`` yet, in start order."""
        with self._lock:
            return list(self._pending_sub_calls)

    def results_by_call(self, *, ptc: bool = False) -> dict[str, LoggedResult]:
        """:func:`results_by_call` over :meth:`events`."""
        return results_by_call(self.events(), ptc=ptc)

    def repair(self) -> list[dict[str, Any]]:
        """Settle everything a crash left open, and return the events
        appended (none when nothing is pending, so repairing twice appends
        nothing): first a synthetic failure ``tool/ptc-dispatch`` for every
        sub-call started but not settled, in start order (so replay never
        shows a sub-call that neither ended nor failed), then a synthetic
        failure ``tool/result`` for every pending call, in call order. A
        write failure raises after the events already appended; repair
        again to finish."""
        with self._lock:
            appended: list[dict[str, Any]] = []
            for sub_call_id, fields in list(self._pending_sub_calls.items()):
                event = _interrupted_dispatch(sub_call_id, *fields)
                self._append_line(_encode(event), PTC_DISPATCH, event)
                appended.append(event)
            for call_id in list(self._pending):
                event = result_event(call_id, _INTERRUPTED)
                self._append_line(_encode(event), RESULT, event)
                appended.append(event)
            return appended

    # -- lifecycle --------------------------------------------------------

    @property
    def path(self) -> Path | None:
        """The JSONL file, or None for an in-memory session."""
        return self._path

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def torn_line(self) -> int | None:
        """The line number of the torn last line :meth:`open` ignored, if any."""
        return self._torn_line

    def close(self) -> None:
        """Close the file (idempotent). Events stay readable; appends raise."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            file, self._file = self._file, None
        if file is not None:
            file.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        where = "memory" if self._path is None else repr(str(self._path))
        state = ", closed" if self._closed else ""
        return f"<Session {where}: {len(self._lines)} events{state}>"
