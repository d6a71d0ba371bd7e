"""The :class:`Session` itself: the in-memory list of events, or the JSONL
file behind it (appends, torn lines, repair). ``dsh_actors.session``
documents the format and the guarantees.

A session on a file keeps no event in memory: only what pairs calls with
their results (the pending call and sub-call ids), the number of events and
where the good bytes end; :meth:`Session.events` reads the file. Once a step
is read back, it keeps where each step's events are (``_index.py``):
:meth:`Session.step_events` reads those lines only."""

from __future__ import annotations

import errno
import io
import json
import os
import stat
import sys
import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import IO, Any, TypeVar

import orjson

from ..errors import InvalidStateError, InvalidTypeError, InvalidValueError, LosslessJsonError, disk_full, safe_str
from ..json import FrozenDict, dumps, loads
from ._events import (
    _INTERRUPTED,
    APPROVAL,
    APPROVAL_REQUEST,
    BATCH,
    CALL,
    PTC_DISPATCH,
    PTC_DISPATCH_START,
    RESULT,
    START,
    CallLines,
    LoggedResult,
    SessionCorruptError,
    StepKey,
    _interrupted_dispatch,
    approval_event,
    drop_redeferred,
    leave_redeferred,
    result_event,
    results_by_call,
    same_step,
    step_key,
    take_redeferred,
)
from ._index import StepIndex
from ._steps import LoggedCall, LoggedStep, approval_refusal, read_step
from ._write import SessionFile

if sys.platform != "win32":
    import fcntl

_T = TypeVar("_T")


def _loads_ok(line: bytes) -> bool:
    try:
        orjson.loads(line)
    except orjson.JSONDecodeError:
        return False
    return True


def whole_json(line: bytes) -> bool:
    """Whether ``line`` is whole JSON to a lenient reader (Python's, which
    takes any int, and nesting as deep as it recurses; one nested deeper
    counts as whole): how a torn last line (a write cut short never leaves
    whole JSON, nor a newline after it) is told from a corrupt one. A line
    is only cut off when it surely is a cut: unterminated and not whole."""
    try:
        json.loads(line)
    except RecursionError:
        return True
    except ValueError:
        return False
    return True


def _shape_problem(event: Mapping[str, Any]) -> str | None:
    """Why ``event`` cannot be a session event, or None. Checks only what
    the session itself relies on: a non-empty str ``type`` and, for calls
    results and starts, a str ``call_id``."""
    kind = event.get("type")
    if type(kind) is not str or not kind:
        if "type" not in event:
            return 'an event needs a "type" (a non-empty str)'
        return f'"type" must be a non-empty str, got {safe_str(kind)!r}'
    if (kind == CALL or kind == RESULT or kind == START) and type(event.get("call_id")) is not str:
        return f'a {kind} event needs a str "call_id"'
    return None


def _check_options(path: object, fsync: object, where: str, *, none_ok: bool) -> None:
    if not isinstance(path, (str, os.PathLike)) and not (none_ok and path is None):
        also = " or None (in memory)" if none_ok else ""
        raise InvalidTypeError(f"{where}(path) is a str or an os.PathLike{also}, not {type(path).__qualname__}")
    if type(fsync) is not bool:
        raise InvalidTypeError(f"{where}(fsync=...) is True or False, not {safe_str(fsync)!r}")


def _encode(event: Mapping[str, Any]) -> bytes:
    """One event as a line of compact JSON (its newline included), or the
    error saying why not."""
    if not isinstance(event, Mapping):
        raise InvalidTypeError(f"a session event must be a mapping, got {type(event).__qualname__}")
    problem = _shape_problem(event)
    if problem is not None:
        raise InvalidValueError(f"invalid session event: {problem}")
    value = event if type(event) is dict or type(event) is FrozenDict else dict(event)
    try:
        return dumps(value) + _NEWLINE  # (an exact-size copy: see _line)
    except LosslessJsonError as err:
        path = err.path
        if path == "value" or path.startswith(("value.", "value[")):
            path = "event" + path[5:]
        raise LosslessJsonError(path, err.problem) from None


_NEWLINE = b"\n"

#: What a bad line of the log (other than a torn last one) says to do.
_DAMAGED = (
    "; the log is damaged at that line (edited by hand, or written by another program or a newer dsh-actors), "
    "and only a torn last line (a write a crash cut short) is cut off: mend or remove that line in a copy of "
    "the log, and open the copy"
)


def _corrupt(file: str, lineno: int, problem: str) -> SessionCorruptError:
    """The error for line ``lineno`` of ``file``, which is no event a
    session reads (``problem``: why), naming what to do."""
    return SessionCorruptError(file, lineno, problem + _DAMAGED)


def _id_or_none(value: object) -> str | None:
    return value if type(value) is str else None


def _pread(fd: int, start: int, end: int) -> bytes:
    """The bytes of ``fd`` from ``start`` to ``end`` (fewer where it ends first)."""
    chunks: list[bytes] = []
    offset = start
    while offset < end:
        chunk = os.pread(fd, end - offset, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


#: How many bytes :meth:`Session.open`, and a step index's reading of the
#: lines logged since it was last extended, read of the log at a time: they
#: hold one chunk and the line they parse, never the whole file.
_READ_CHUNK = 1 << 20


def _file_lines(read: Callable[[int, int], bytes], start: int, stop: int | None) -> Iterator[tuple[int, bytes, bool]]:
    """The lines of a file from offset ``start`` (where a line starts) to
    ``stop`` (None: to its end), read :data:`_READ_CHUNK` bytes at a time by
    ``read(begin, end)`` (the bytes from ``begin`` to ``end``, fewer where the
    file ends first): each line's start offset, its bytes without the
    newline, and whether a newline ends it (only the last one may not). It
    holds a chunk and one line (a line longer than a chunk is joined from
    its pieces)."""
    offset = start  # where the next chunk starts
    pieces: list[bytes] = []  # the beginning of a line the chunks before hold
    while stop is None or offset < stop:
        chunk = read(offset, offset + _READ_CHUNK if stop is None else min(offset + _READ_CHUNK, stop))
        if not chunk:
            break
        at = 0
        while (newline := chunk.find(b"\n", at)) >= 0:
            line = chunk[at:newline]
            if pieces:
                pieces.append(line)
                line = b"".join(pieces)
                pieces.clear()
            yield start, line, True
            at = newline + 1
            start = offset + at
        if at < len(chunk):
            pieces.append(chunk[at:])
        offset += len(chunk)
    if pieces:
        yield start, b"".join(pieces), False


def _line_spans(data: bytes, base: int, junk: list[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """The ``(start, end)`` file offsets of the lines of ``data`` (the file's
    bytes from offset ``base``), without their newline, skipping the byte
    ranges ``junk`` (a failed write's bytes that hold no event)."""
    stop = base + len(data)
    segments: list[tuple[int, int]] = []
    at = base
    for start, end in sorted(junk):
        segments.append((at, start))
        at = end
    segments.append((at, stop))
    for at, stop in segments:
        while at < stop:
            newline = data.find(b"\n", at - base, stop - base)
            end = stop if newline < 0 else newline + base
            if end > at:
                yield at, end
            at = end + 1


def _refuse_folder(path: Path) -> None:
    """Raise ``IsADirectoryError`` naming the fix when ``path`` is a folder."""
    if path.is_dir():
        raise IsADirectoryError(
            errno.EISDIR, "that is a folder: give the session log's file (a .jsonl file)", str(path)
        )


def _write_rest(file: IO[bytes], data: bytes, written: int | None) -> None:
    """Finish a short write: ``written`` of ``data``'s bytes went out."""
    view = memoryview(data)
    while True:
        if not written:
            raise OSError(errno.EIO, "session write made no progress")
        view = view[written:]
        if not view:
            return
        written = file.write(view)


class Session:
    """A durable, append-only log of tool events (see the module docstring).

    ``Session()`` is in memory. ``Session(path)`` writes JSONL to ``path``:
    the file is created if missing; its directory must exist
    (``FileNotFoundError`` otherwise) and an existing file must be empty
    (``FileExistsError``: continue one with :meth:`open`). ``fsync=True``
    fsyncs after every event. ``keep_events=False`` (in memory) keeps no
    event, only what pairs calls with their results, as a session on a file
    keeps: it checks and pairs a stream of events of any length (a replay)
    in memory bounded by what is open; reading events back from it
    (:meth:`events`, :meth:`read_step`) raises ``InvalidStateError``.
    """

    def __init__(
        self, path: str | os.PathLike[str] | None = None, *, fsync: bool = False, keep_events: bool = True
    ) -> None:
        _check_options(path, fsync, "Session", none_ok=True)
        if type(keep_events) is not bool:
            raise InvalidTypeError(f"Session(keep_events=...) is True or False, not {safe_str(keep_events)!r}")
        self._lock = threading.Lock()
        # In memory: each event's JSON, without the newline (None: kept by
        # no one, keep_events=False). On a file: None (events() reads the
        # file), and _count counts the events.
        self._lines: list[bytes] | None = [] if path is None and keep_events else None
        self._count = 0
        # Byte ranges of the file below _size that hold no event: a failed
        # write's bytes that could not be cut off (see _recover).
        self._junk: list[tuple[int, int]] = []
        # The calls without a result, in call order: serial -> call id (ids may
        # repeat across steps, so each tool/call gets a serial of its own).
        self._pending: dict[int, str] = {}
        # call id -> the serials of its open calls, latest last: a tool/start,
        # tool/result or tool/approval-request pairs with the latest one of
        # its step (its turn and step), or of any step when it names none (as
        # replay and read_step pair them).
        self._open: dict[str, list[int]] = {}
        # serial -> the (turn, step) its tool/call named (None: none), while open
        self._call_steps: dict[int, StepKey | None] = {}
        # Which tool/call lines are calls (a copy of a line is not), as
        # read_step and replay have it: the one rule, CallLines.
        self._call_lines = CallLines()
        self._serial = 0
        # sub_call_id -> (root_call_id, parent_call_id, name) of each started
        # sub-call without a settle event, in start order
        self._pending_sub_calls: dict[str, tuple[str | None, str | None, str | None]] = {}
        # Open approval requests, keyed by what identifies one step's call
        # across steps and agents sharing the session: (the suspension, the
        # call id), a suspension being one batch's. Each maps to the serial of
        # the open call it belongs to (its tool/result closes it), in request
        # order; _requests is the reverse map.
        self._awaiting: dict[tuple[str, str], int] = {}
        self._requests: dict[int, tuple[str, str]] = {}
        # (call id, its agent) -> the serial of the call a "deferred" decision left
        # waiting: the new request that follows is that call's, even when
        # another open call shares its id. Only open calls: an entry goes
        # with that request, or with its call's tool/result.
        self._redeferred: dict[tuple[str, str | None], int] = {}
        # Whether this session holds its file's lock (see hold()), and the
        # file's size when this session read it (another writer since then
        # means what it read is stale).
        self._held = False
        self._read_only = False  # opened where it cannot be written: read, never held
        self._seen_size = 0
        # The device and inode of the file this session opened, and what
        # reads those of the file its path leads to now (None: one it never
        # writes, or no regular file), for the check as a step's writes
        # begin (see _check_file); whether one found the file changed (then
        # every write checks, until one finds it as it was).
        self._device = self._inode = -1
        self._at_path: Callable[[], tuple[int, int, int]] | None = None
        self._file_changed = False
        self._fsync = bool(fsync)
        self._closed = False
        self._path: Path | None = None
        self._file: IO[bytes] | None = None
        self._size = 0  # bytes of the file that hold good events
        self._dirty = False  # the file may hold bytes past _size to cut
        self._newline_needed = False  # the good bytes do not end with a newline
        self._torn_line: int | None = None
        # Where each step's events are (see _index.py): made when a step is
        # first read, extended by what was logged since at each read, under
        # its own lock (appends go on meanwhile).
        self._index_lock = threading.Lock()
        self._step_index: StepIndex | None = None
        if path is not None:
            self._path = Path(path)
            parent = self._path.parent
            if not parent.is_dir():
                raise FileNotFoundError(errno.ENOENT, "session log directory does not exist", str(parent))
            _refuse_folder(self._path)
            file = self._open_file(self._path)
            try:
                size = self._know_file(file)
            except BaseException:
                file.close()
                raise
            if size:
                file.close()
                raise FileExistsError(
                    errno.EEXIST,
                    "the file is not empty: Session(path) starts a new log in an empty or new file; "
                    "Session.open(path) continues a session log that is there",
                    str(self._path),
                )
            self._file = file
            try:
                self._hold()  # a new log is for writing: take it now
            except BaseException:
                self._file = None
                file.close()
                raise

    @staticmethod
    def _open_file(path: Path) -> IO[bytes]:
        # Unbuffered: a write either reaches the OS or fails; nothing of a
        # failed event lingers in a buffer to be flushed later. Readable, to
        # check the last byte after a failure. On a local disk, its write
        # keeps the GIL across write(2) (see _write.py).
        return SessionFile(path)

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, fsync: bool = False) -> Session:
        """Read the existing JSONL file at ``path`` (a chunk at a time: never
        the whole file at once) and continue appending to it. Raises
        ``FileNotFoundError`` when it does not exist, ``IsADirectoryError``
        for a folder, ``OSError`` (``EINVAL``) for a
        path that is no regular file (a pipe, a device), and
        :class:`SessionCorruptError` for a bad line, but a torn write: a
        last line without its newline that is not whole JSON (a write cut
        short by a crash), which is ignored (see :attr:`torn_line`)."""
        _check_options(path, fsync, "Session.open", none_ok=False)
        file_path = Path(path)
        _refuse_folder(file_path)
        if not file_path.is_file():
            if file_path.exists():  # (a pipe, a device, a socket)
                raise OSError(
                    errno.EINVAL,
                    "that is not a regular file: a session log is a file (a .jsonl file) it reads and continues",
                    str(file_path),
                )
            raise FileNotFoundError(
                errno.ENOENT,
                "session log does not exist (Session(path) creates a new one)",
                str(file_path),
            )
        session = cls(fsync=fsync)
        session._path = file_path
        session._lines = None  # on a file: events() reads it
        try:
            file = cls._open_file(file_path)
        except OSError as err:
            if err.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise
            # Readable, not writable (a read-only file or file system): read
            # as any log is; a write, a hold, a resume or recovery of it is
            # refused, naming why.
            file = io.FileIO(os.fspath(file_path), "r")
            session._read_only = True
        try:
            session._know_file(file)
            session._load(file, str(file_path))
        except BaseException:
            file.close()
            raise
        session._file = file
        return session

    def _know_file(self, file: IO[bytes]) -> int:
        """Remember which file ``file`` (just opened by the log's path) is,
        for :meth:`_check_file`; its size."""
        status = os.fstat(file.fileno())
        self._device, self._inode = status.st_dev, status.st_ino
        # (A pipe or a device has no size to keep, nor lines to lose.)
        regular = stat.S_ISREG(status.st_mode)
        self._at_path = file.at_path if regular and isinstance(file, SessionFile) else None
        return status.st_size

    def _load(self, file: IO[bytes], name: str) -> None:
        """Index the events of ``file`` (the whole file, read a chunk at a
        time: see :func:`_file_lines`); see :meth:`open`."""
        fd = file.fileno()
        size = 0  # the bytes read
        terminated = True  # whether the last line read ended with a newline
        lines = _file_lines(lambda begin, end: _pread(fd, begin, end), 0, None)
        for lineno, (start, line, terminated) in enumerate(lines, 1):
            size = start + len(line) + int(terminated)
            if not line.strip():
                continue
            try:
                event = loads(line, frozen=False, path="event")
                # Whole JSON: a torn write never leaves that (a cut event
                # object is not JSON), so one that is no event is corrupt
                # wherever it is.
                if type(event) is not dict:
                    raise _corrupt(name, lineno, "event: a session event must be a JSON object")
                problem = _shape_problem(event)
                if problem is not None:
                    raise _corrupt(name, lineno, f"event: {problem}")
            except SessionCorruptError:
                raise
            except LosslessJsonError as err:
                if terminated or whole_json(line):
                    # Only an unterminated line can be a torn write: each
                    # event is written with its newline in one write, so a
                    # write cut short never ends in one. A bad line that does
                    # (the last one too: edited by hand, say) was written so,
                    # and so was a whole line the lossless reader refuses (an
                    # int past 64 bits): cutting either off would lose it.
                    raise _corrupt(name, lineno, err.message) from None
                # A torn write (the last line: only it is unterminated):
                # ignore it, and cut it off before appending.
                self._torn_line = lineno
                self._size = start
                self._dirty = True
                self._newline_needed = False  # a line starts after a newline
                break
            self._index(event["type"], event)
            self._count += 1
        self._seen_size = size
        if self._torn_line is None:
            # (After the last event, or blank text after it, or nothing but
            # blank text: continue there.)
            self._size = size
            self._newline_needed = not terminated

    # -- appending ------------------------------------------------------

    def append(self, event: Mapping[str, Any]) -> None:
        """Log one event (a mapping with a non-empty str ``"type"``; calls
        and results also need a str ``"call_id"``).

        Raises ``TypeError``/``ValueError`` for a malformed event,
        :class:`LosslessJsonError` for one that is not lossless JSON,
        ``OSError("session is closed ...")`` after :meth:`close`, for a
        failed write an ``OSError`` of its errno (``ENOSPC``: disk full) whose
        message names the log and what to do, and ``InvalidStateError`` when
        the log's file was replaced, moved, removed, cut short or written to
        by something else under this session (see :meth:`_check_file`). On
        any error nothing is logged."""
        line = _encode(event)
        kind = event["type"]
        with self._lock:
            self._append_line(line, kind, event)

    def append_lossless(self, event: dict[str, Any]) -> None:
        """:meth:`append` for an event whose values are all lossless JSON
        already (materialized, or built from materialized values, as the
        executor's ``tool/batch``, ``tool/call``, ``tool/start`` and
        ``tool/result`` events are): the check is not made twice. A subclass
        that overrides :meth:`append` gets every event through its
        :meth:`append`, as before."""
        if type(self).append is not Session.append or type(event) is not dict:
            self.append(event)
            return
        problem = _shape_problem(event)
        if problem is not None:
            raise InvalidValueError(f"invalid session event: {problem}")
        try:
            # orjson's buffer is allocated with room to spare (about 4 KB for
            # a 100-byte event) and an in-memory session keeps every line:
            # adding the newline is also the exact-size copy (the benchmark
            # ``session.bytes_per_event`` shows it), as in _encode.
            line = orjson.dumps(event) + _NEWLINE
        except orjson.JSONEncodeError:
            line = _encode(event)  # too deep for orjson: the checked path says why
        # (acquire/release, not ``with``: half the instructions, on a path
        # taken three times a logged call; benchmarks/HOPS.md)
        lock = self._lock
        lock.acquire()
        try:
            self._append_line(line, event["type"], event)
        finally:
            lock.release()

    def _append_line(self, line: bytes, kind: str, event: Mapping[str, Any]) -> None:
        # Called with the lock held. ``line``: the event's JSON and its newline.
        if self._closed:
            raise self._closed_error()
        file = self._file
        if file is not None:
            if not self._held:
                self._hold()
            if kind == BATCH or kind == APPROVAL or self._file_changed:
                # (As a step's writes begin: its batch opens, or a resume
                # logs its decisions. Not before every write: a stat(2) an
                # event was a tenth of a logged call's cost.)
                self._check_file()
            # One write(2) for the line on the unbuffered handle: nothing is
            # left in a buffer to flush.
            if self._dirty:
                self._recover(file)
            data = _NEWLINE + line if self._newline_needed else line
            try:
                written = file.write(data)
                if written != len(data):
                    _write_rest(file, data, written)
                if self._fsync:
                    os.fsync(file.fileno())
            except BaseException as err:
                self._dirty = True
                try:
                    self._recover(file)
                except OSError:
                    pass  # still dirty: the next append tries again
                if isinstance(err, OSError):
                    raise self._write_error(err) from err
                raise
            self._size += len(data)
            self._newline_needed = False
        lines = self._lines
        if lines is not None:
            lines.append(line)
        self._count += 1
        if kind != START:  # (a tool/start pairs with nothing the index keeps)
            self._index(kind, event)

    def _index(self, kind: str, event: Mapping[str, Any]) -> None:
        """Track what is still unsettled: calls without a result, open
        approval requests, and sub-calls (``tool/ptc-dispatch-start``)
        without a settle event."""
        if kind == CALL:
            # Calls and results always have a str call_id (_shape_problem).
            at = step_key(event)
            if not self._call_lines.is_call(event, at):
                return  # a copy of a line (or one its batch does not name): no call of its own
            call_id = event["call_id"]
            self._serial += 1
            self._pending[self._serial] = call_id
            self._open.setdefault(call_id, []).append(self._serial)
            self._call_steps[self._serial] = at
        elif kind == BATCH:
            self._call_lines.batch(event)  # a new run of its step: its ids are new calls
        elif kind == RESULT:
            serial = self._latest_open(event["call_id"], step_key(event), pop=True)
            if serial is not None:
                call_id = self._pending.pop(serial)
                step = self._call_steps.pop(serial)
                key = self._requests.pop(serial, None)
                if key is not None:
                    del self._awaiting[key]
                # A call settled while a "deferred" decision left it waiting
                # (its resume halted before asking again, repair()): no
                # request is for it any more.
                drop_redeferred(self._redeferred, call_id, step, serial)
        elif kind == APPROVAL_REQUEST:
            call_id, suspension = event.get("call_id"), event.get("suspension")
            if type(call_id) is str and type(suspension) is str:
                # The call a "deferred" decision was for, if this is its
                # request again; else the latest open call of its step.
                serial = take_redeferred(self._redeferred, call_id, event, self._call_steps.get)
                if serial is None:
                    serial = self._latest_open(call_id, step_key(event))
                if serial is not None:  # (a request without its tool/call awaits nothing)
                    earlier = self._requests.pop(serial, None)
                    if earlier is not None:
                        del self._awaiting[earlier]
                    # _awaiting and _requests are each other's inverse: a
                    # request with the key of another call's (the same
                    # suspension and call id, of another step: by hand, or
                    # a log of events without steps) takes it over.
                    key = (suspension, call_id)
                    other = self._awaiting.get(key)
                    if other is not None:
                        del self._requests[other]
                    self._awaiting[key] = serial
                    self._requests[serial] = key
        elif kind == APPROVAL:
            call_id, suspension = event.get("call_id"), event.get("suspension")
            if type(call_id) is str and type(suspension) is str:
                serial = self._awaiting.pop((suspension, call_id), None)
                if serial is not None:
                    del self._requests[serial]
                    if event.get("decision") == "deferred":
                        leave_redeferred(self._redeferred, call_id, self._call_steps.get(serial), serial)
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

    def _latest_open(self, call_id: str, step: StepKey | None, *, pop: bool = False) -> int | None:
        """The serial of the latest open call of ``call_id`` whose
        ``tool/call`` named step ``step`` (its agent's, see ``same_step``;
        None: of any step), removed with ``pop``; None when there is none."""
        serials = self._open.get(call_id)
        if not serials:
            return None
        at = len(serials) - 1
        if step is not None:
            steps = self._call_steps
            while at >= 0:
                key = steps[serials[at]]
                # (Equal keys first: a result names its call's step as its
                # tool/call did, and a tuple compare is no Python call.)
                if key is not None and (key == step or same_step(key, step)):
                    break
                at -= 1
            if at < 0:
                return None
        if not pop:
            return serials[at]
        serial = serials.pop(at)
        if not serials:
            del self._open[call_id]
        return serial

    # -- the writer's lock --------------------------------------------------

    def hold(self) -> None:
        """Take the log file for this session's writes, now: an exclusive
        advisory lock (``flock``) on the file, held until :meth:`close` (or
        the end of the process: the OS releases it when the process dies,
        SIGKILL included). A session takes it by itself before its first
        write (``Session(path)`` when it creates the file); ``rt.tools.resume``
        and ``rt.tools.recover`` take it before they read the step, so
        nothing else writes the log while they plan and run it.

        Raises ``InvalidStateError`` when another ``Session`` (in this
        process or another one still running) holds the file, or when the
        file changed after this session read it (another one wrote to it
        since: what this one knows of it is stale; open it again), and
        ``OSError("session is closed ...")`` after :meth:`close`. Idempotent; an
        in-memory session holds nothing."""
        with self._lock:
            if self._closed:
                raise self._closed_error()
            if self._file is not None and not self._held:
                self._hold()
            if self._file is not None:
                self._check_file()  # (what recover and resume hold it for: a step's writes)

    @contextmanager
    def holding(self) -> Iterator[None]:
        """:meth:`hold` for the work of the ``with`` block, which may be
        refused: when the block raises, and this session did not hold its
        file before it and logged no event in it, the file is given back
        (another ``Session`` may then write the log, and this one takes it
        again before its next write). A refused resume or recovery leaves
        the session as it found it this way. When the block ends normally,
        the session keeps the file, as after :meth:`hold`."""
        with self._lock:
            held, count = self._held, self._count
        self.hold()
        try:
            yield
        except BaseException:
            if not held:
                with self._lock:
                    if self._held and self._count == count:
                        self._give_back()
            raise

    def _give_back(self) -> None:
        # Called with the lock held, holding the file, when this session
        # logged nothing since it took it: as hold() found it. Whatever the
        # file holds now, this session knows (it was the one writer).
        file = self._file
        assert file is not None
        fd = file.fileno()
        self._seen_size = os.fstat(fd).st_size
        if sys.platform != "win32":
            fcntl.flock(fd, fcntl.LOCK_UN)
        self._held = False

    @property
    def held(self) -> bool:
        """Whether this session holds its file's lock (see :meth:`hold`)."""
        return self._held

    def _hold(self) -> None:
        # Called with the lock held, on an open file session.
        if self._read_only:
            raise InvalidStateError(
                f"the session log {self._path} was opened read-only (its file or its file system cannot be "
                "written): it can be read, not written, resumed or recovered; make it writable, or open a "
                "writable copy"
            )
        file = self._file
        assert file is not None
        fd = file.fileno()
        if sys.platform != "win32":
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise InvalidStateError(
                    f"the session log {self._path} is being written by another Session (in this process, or in "
                    "another process that is still running): a log has one writer at a time. Close that session "
                    "(or let its process end) before this one writes to the log, resumes or recovers a step of it"
                ) from None
        size = os.fstat(fd).st_size
        if size != self._seen_size:
            if sys.platform != "win32":
                fcntl.flock(fd, fcntl.LOCK_UN)
            raise InvalidStateError(
                f"the session log {self._path} changed after this Session read it ({self._seen_size} bytes then, "
                f"{size} now: another session wrote to it since), so what this session knows of it is stale: "
                "open it again with Session.open(path) before writing to it, resuming or recovering a step of it"
            )
        self._held = True

    def _check_file(self) -> None:
        """Refuse a write (before it) when the log's path no longer leads to
        this session's file, or that file is not the size this session made
        it: it was replaced (an editor's save, ``sed -i``: a new file renamed
        over it), removed, cut short, or written to by something else. What
        this session wrote then would be lost (in a file no path leads to) or
        follow a cut line (the log no longer opens). One ``stat(2)``
        (``SessionFile.at_path``), as a step's writes begin (its
        ``tool/batch``, a resume's ``tool/approval``, :meth:`hold`), and
        before every write once one found the file changed: a change in
        the middle of a step is found at the next step. Called with the
        lock held."""
        at_path = self._at_path
        if at_path is None:
            return  # (opened read-only, or no regular file: see _know_file)
        self._file_changed = True  # (until it is found as it was, below)
        try:
            device, inode, size = at_path()
        except FileNotFoundError:
            raise self._not_its_file("was removed") from None
        except OSError as err:
            raise self._write_error(err) from err
        if (
            inode == self._inode
            and device == self._device
            and (size == self._size or (self._dirty and size > self._size))  # (dirty: bytes to cut)
        ):
            self._file_changed = False
            return
        if inode != self._inode or device != self._device:
            raise self._not_its_file("was replaced by another file (an editor's save, sed -i, a rename over it)")
        if size < self._size:
            raise self._not_its_file(f"was cut short ({size} bytes; this Session wrote {self._size})")
        raise self._not_its_file(f"grew by {size - self._size} bytes this Session did not write")

    def _not_its_file(self, what: str) -> InvalidStateError:
        """What a write raises when the log's file changed under this session
        (``what``: how; see :meth:`_check_file`)."""
        return InvalidStateError(
            f"the session log {self._path} {what} while this Session was writing it: the event was not logged "
            "(it would be lost, or follow a cut line). Leave a log's file alone while a Session writes it; open "
            "the log again with Session.open(path) (a removed one: put it back first; this Session's events() "
            "still reads what it held), then finish the step with rt.tools.recover(agent, turn, step)"
        )

    def _closed_error(self) -> OSError:
        """What a write to this session raises once it is closed."""
        if self._path is None:
            return OSError(
                "session is closed (an in-memory session: it logs nothing more); "
                "give the agent an open session (Session(), or Session(path) for a log file)"
            )
        return OSError(
            f"session is closed (its log: {self._path}); open the log again with Session.open(path) "
            "and give the agent that session: Agent(..., session=Session.open(path))"
        )

    def _write_error(self, err: OSError) -> OSError:
        """A failed write's ``OSError`` (its errno, so its class), naming
        the log and what to do."""
        if disk_full(err):
            fix = "free space on its disk"
        elif err.errno == errno.EFBIG:
            fix = "let the file grow (the process's file-size limit: ulimit -f)"
        else:
            fix = "make it writable again"
        text = (
            f"{err.strerror or safe_str(err)}, writing the session log {self._path}: the event was not logged; "
            f"{fix}, then finish the step with rt.tools.recover(agent, turn, step)"
        )
        return OSError(text) if err.errno is None else OSError(err.errno, text)

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
            if current > self._size:  # bytes that hold no event stay in the file: skip them on read
                self._junk.append((self._size, current))
            self._size = current
            self._newline_needed = current > 0 and os.pread(fd, 1, current - 1) != b"\n"
        self._dirty = False

    # -- reading ----------------------------------------------------------

    def events(self) -> list[dict[str, Any]]:
        """Every event in log order, as fresh plain dicts (the caller may
        change them). A session on a file reads them from the file (the
        good bytes: not a torn last line, nor a failed write's leftovers)."""
        with self._lock:
            lines = self._lines_locked()
        return self._parsed(lines)

    def _parsed(self, lines: list[bytes]) -> list[dict[str, Any]]:
        try:
            return [orjson.loads(line) for line in lines]
        except orjson.JSONDecodeError:
            # Its good bytes are not what it wrote: something that is not a
            # Session wrote to the file meanwhile (the lock is advisory).
            raise self._changed(next(i for i, line in enumerate(lines, 1) if not _loads_ok(line))) from None

    def _changed(self, lineno: int) -> SessionCorruptError:
        """What a read raises when the good bytes of the file are not what
        this session wrote or read there (line ``lineno``)."""
        return SessionCorruptError(
            str(self._path),
            lineno,
            "the log changed under this session: something else wrote to the file (a log has one writer "
            "at a time); open it again to read what it holds now",
        )

    def _lines_locked(self) -> list[bytes]:
        # Called with the lock held (no append moves _size meanwhile).
        if self._lines is not None:
            return list(self._lines)
        data = self._read_good_bytes()
        if len(data) != self._size:  # (cut short by something else: what it held is gone)
            raise self._changed(data.count(b"\n") + 1)
        # (The lines the step index reads: a failed write's bytes skipped.)
        return [line for start, end in _line_spans(data, 0, self._junk) if (line := data[start:end]).strip()]

    def _read_good_bytes(self) -> bytes:
        # Called with the lock held (no append moves _size meanwhile).
        return self._read_ranges([(0, self._size)])[0]

    def _read_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """The bytes of the file from each ``(start, end)`` of ``ranges``
        (fewer where the file ends first). Called with the lock held."""
        file = self._file
        if file is not None:
            return [_pread(file.fileno(), start, end) for start, end in ranges]
        if self._path is None:
            raise self._keeps_none()
        # (Closed: read it again by its path.)
        with open(self._path, "rb") as closed:
            return [_pread(closed.fileno(), start, end) for start, end in ranges]

    @staticmethod
    def _keeps_none() -> InvalidStateError:
        """What reading events back from a ``Session(keep_events=False)`` raises."""
        return InvalidStateError(
            "this Session keeps no events (Session(keep_events=False)): it only pairs calls with their "
            "results; keep them in memory with Session(), or log to a file with Session(path)"
        )

    # -- reading one step ---------------------------------------------------

    def step_events(self, turn: int, step: int, agent: str | None = None) -> list[dict[str, Any]]:
        """The events :meth:`read_step` reads for model step ``(turn,
        step)`` (of ``agent``, when given: events naming another agent are
        left out), in log order, as fresh dicts: the ``tool/batch``,
        ``tool/call``, ``tool/start``, ``tool/result`` and
        ``tool/approval-request`` events naming the step, the first
        ``tool/batch`` of each of their agents (whether a ``tool/call`` is a
        call: :class:`~dsh_actors.session.CallLines`), and the
        ``tool/approval`` decisions of the suspensions its requests name.

        Only their lines are read and parsed: the session keeps where each
        step's events are (an index of positions, a few dozen bytes an
        event, made at the first step read and extended by the events
        logged since at each one), so reading one agent's step of a log many
        agents share costs what that step holds, not what the log holds. A
        log that holds an event naming no step or no agent (written before
        events carried them, or by hand) pairs it with any step's calls:
        every event is read and returned. Raises
        :class:`SessionCorruptError` when the file's good bytes are not what
        this session wrote or read there (something else wrote to it)."""
        return self._steps_events(lambda index: [(turn, step, agent)])

    def _steps_events(self, steps: Callable[[StepIndex], Iterable[StepKey]]) -> list[dict[str, Any]]:
        """What :meth:`step_events` reads for each of the steps ``steps``
        names (from the step index, extended), together, in log order (a
        step's agent None: every agent's)."""
        with self._index_lock:
            index = self._extended_index()
            if index.whole:
                return self.events()
            keys = list(steps(index))
            pairs = {(turn, step) for turn, step, _ in keys}
            found = self._events_at(
                sorted({span for turn, step, agent in keys for span in index.step_spans(turn, step, agent)}),
                lambda event: (event.get("turn"), event.get("step")) in pairs or event.get("type") == BATCH,
            )
            suspensions = {
                e["suspension"]
                for _, e in found
                if e.get("type") == APPROVAL_REQUEST and type(e.get("suspension")) is str
            }
            if suspensions:
                decided = self._events_at(
                    index.approval_spans(suspensions),
                    lambda event: event.get("type") == APPROVAL and event.get("suspension") in suspensions,
                )
                found = sorted(found + decided, key=lambda item: item[0])
        return [event for _, event in found]

    def child_steps(self, turn: int, step: int, agent: str | None, call_id: str) -> tuple[StepKey, ...]:
        """The steps whose ``tool/batch`` names call ``call_id`` of step
        ``(turn, step)`` of ``agent`` as its ``parent`` (the logged batches
        its body ran: see ``batch_event``), as ``(turn, step, agent id)``, in
        log order; read from the index :meth:`step_events` keeps."""
        with self._index_lock:
            return self._extended_index().children((turn, step, agent), call_id)

    def _extended_index(self) -> StepIndex:
        """The step index, extended by the events logged since it was last.
        Called with the index lock held (appends go on meanwhile)."""
        index = self._step_index
        new: list[bytes] = []
        junk: list[tuple[int, int]] = []
        with self._lock:
            lines = self._lines
            if lines is None and self._path is None:
                raise self._keeps_none()
            stop = self._size if lines is None else len(lines)
            if index is None or index.end > stop:
                index = StepIndex()  # (the first read, or the file shrank under this session: read it again)
            begin = index.end
            if lines is not None:
                new = lines[begin:stop]
            else:
                junk = sorted((start, end) for start, end in self._junk if begin <= start and end <= stop)
        self._step_index = None  # (a failed read leaves none: the next one starts again)
        for number, line in enumerate(new, begin):
            index.add(number, number + 1, orjson.loads(line))
        if lines is None:
            # The file from begin to stop, a chunk at a time (appends go on
            # meanwhile, after stop): its lines, and a failed write's bytes
            # (junk: read, as the file must still hold them, not indexed).
            at = begin
            for start, end in [*junk, (stop, stop)]:
                self._index_lines(index, at, start)
                self._index_lines(None, start, end)
                at = end
        index.end = stop
        self._step_index = index
        return index

    def _index_lines(self, index: StepIndex | None, begin: int, stop: int) -> None:
        """Add the events of the file's lines from ``begin`` to ``stop`` to
        ``index`` (None: only read them), reading a chunk at a time, each
        under the lock; raise when they are not what this session wrote or
        read there (the file changed under it)."""
        reached = begin
        for start, line, terminated in _file_lines(self._read_at, begin, stop):
            reached = start + len(line) + int(terminated)
            if index is None or not line:
                continue
            try:
                event = orjson.loads(line)
            except orjson.JSONDecodeError:
                if not line.strip():
                    continue  # (a blank line)
                raise self._changed(self._line_number(start)) from None
            index.add(start, start + len(line), event)
        if reached != stop:  # (cut short by something else: what it held is gone)
            raise self._changed(self._line_number(reached))

    def _read_at(self, start: int, end: int) -> bytes:
        """The file's bytes from ``start`` to ``end`` (fewer where it ends
        first), read under the lock."""
        with self._lock:
            (data,) = self._read_ranges([(start, end)])
        return data

    def _events_at(
        self, spans: list[tuple[int, int]], fits: Callable[[dict[str, Any]], bool]
    ) -> list[tuple[int, dict[str, Any]]]:
        """The events at ``spans`` (from the step index), each with its
        position; each must be one ``fits`` accepts, as it was when it was
        indexed (else the file changed under this session)."""
        if not spans:
            return []
        with self._lock:
            lines = self._lines
            raw = [lines[start] for start, _ in spans] if lines is not None else self._read_ranges(spans)
        found: list[tuple[int, dict[str, Any]]] = []
        for (start, end), line in zip(spans, raw, strict=True):
            try:
                event = orjson.loads(line)
            except orjson.JSONDecodeError:
                event = None
            if type(event) is not dict or not fits(event) or (lines is None and len(line) != end - start):
                raise self._changed(self._line_number(start))
            found.append((start, event))
        return found

    def _line_number(self, offset: int) -> int:
        """The number of the line of the file at byte ``offset`` (for an
        error: it reads the file up to there)."""
        with self._lock:
            (data,) = self._read_ranges([(0, offset)])
        return data.count(b"\n") + 1

    def __len__(self) -> int:
        """The number of events logged."""
        with self._lock:
            return self._count

    def pending_calls(self) -> list[str]:
        """Call ids that have a ``tool/call`` event but no ``tool/result``
        yet, in call order (an id twice when two open calls share it: ids
        may repeat across steps)."""
        with self._lock:
            return list(self._pending.values())

    @property
    def call_count(self) -> int:
        """The number of ``tool/call`` events taken as calls: one more
        after each one appended, except a line that is not a call (a copy
        of a line: :class:`~dsh_actors.session.CallLines` says which, as
        for :func:`read_step`; :meth:`pending_calls` does not list it
        either). Replay reads it to pair calls as the session does."""
        return self._serial

    def open_calls(self, turn: int, step: int, agent: str | None = None) -> list[str]:
        """:meth:`pending_calls` of one step (with ``agent``, that agent's:
        a call that names another agent is left out), in call order."""
        here = (turn, step, agent)
        with self._lock:
            steps = self._call_steps
            return [
                call_id
                for serial, call_id in self._pending.items()
                if (at := steps[serial]) is not None and same_step(here, at)
            ]

    def pending_sub_calls(self) -> list[str]:
        """Sub-call ids that have a ``tool/ptc-dispatch-start`` event but no
        ``tool/ptc-dispatch`` yet, in start order."""
        with self._lock:
            return list(self._pending_sub_calls)

    def awaiting_approval(self) -> list[tuple[str, str]]:
        """Calls whose approval was deferred and is not decided yet, in
        request order: ``(call id, the id of the suspension whose resume
        decides it)``. (A call id may appear under two suspensions: ids may
        repeat across steps and agents sharing the session.)"""
        with self._lock:
            return [(call_id, suspension) for suspension, call_id in self._awaiting]

    def decide(self, suspension: str, decisions: Mapping[str, str]) -> None:
        """Log the decisions of a resume of ``suspension`` (call id →
        answer), one ``tool/approval`` each, in the order given: atomically,
        and only if every one of those calls still awaits that very
        suspension (so a suspension is decided once per log). Otherwise
        nothing is logged and it raises, naming the call and why
        (:func:`~dsh_actors.session.approval_refusal`): ``InvalidStateError``
        when the suspension was resumed already, or its call was asked again
        or settled since; ``InvalidValueError`` when this log never deferred
        that call under that suspension (a suspension from another log, or
        an id that was changed). A write failure raises after the events
        already logged. The refusal reads the events of the steps the
        suspension's requests name (as :meth:`step_events` does), after
        the session's lock is released: not every event of the log."""
        with self._lock:
            if self._closed:
                raise self._closed_error()
            refused = next((call_id for call_id in decisions if (suspension, call_id) not in self._awaiting), None)
            if refused is None:
                for call_id, decision in decisions.items():
                    event = approval_event(call_id, suspension, decision)
                    self._append_line(_encode(event), APPROVAL, event)
                return
        read = self._steps_events(lambda index: index.request_steps(suspension))
        raise approval_refusal(read, suspension, refused, self._path)

    def results_by_call(self, *, ptc: bool = False) -> dict[str, LoggedResult]:
        """:func:`results_by_call` over :meth:`events`."""
        return self._read_back(self.events(), lambda events: results_by_call(events, ptc=ptc))

    def step_calls(self, turn: int, step: int, agent: str | None = None) -> tuple[LoggedCall, ...]:
        """The calls of model step ``(turn, step)``, in model order, each
        with where it stands (:attr:`LoggedCall.state`: ``"settled"``,
        ``"started"`` or ``"unstarted"``); :func:`step_calls` over
        :meth:`step_events` (what it says over every event)."""
        return self.read_step(turn, step, agent).calls

    def read_step(self, turn: int, step: int, agent: str | None = None) -> LoggedStep:
        """:func:`read_step` over :meth:`step_events` (what it says over
        every event): the step's calls and its batch's own limit."""
        return self._read_back(self.step_events(turn, step, agent), lambda events: read_step(events, turn, step, agent))

    def _read_back(self, events: list[dict[str, Any]], read: Callable[[Iterable[dict[str, Any]]], _T]) -> _T:
        """``read(events)`` (events of this session, in log order, that it
        reads one at a time): on a file, the :class:`LosslessJsonError` it
        raises for a malformed event (a field a reader refuses: a content
        block type of a newer version, an edit by hand) is raised as a
        :class:`SessionCorruptError` naming the event's line, as
        :meth:`open` names a bad line."""
        current: list[dict[str, Any]] = []

        def each() -> Iterator[dict[str, Any]]:
            for event in events:
                current[:] = (event,)
                yield event

        try:
            return read(each())
        except SessionCorruptError:
            raise
        except LosslessJsonError as err:
            lineno = self._line_of(current[0]) if self._path is not None and current else None
            if lineno is None:
                raise
            kind = safe_str(current[0].get("type"))
            raise _corrupt(str(self._path), lineno, f"bad {kind} event: {err.message}") from None

    def _line_of(self, event: Mapping[str, Any]) -> int | None:
        """The number of the first line of the file that holds ``event``
        (None: none does now), for an error: it reads the file."""
        with self._lock:
            data = self._read_good_bytes()
            junk = list(self._junk)
        for start, end in _line_spans(data, 0, junk):
            try:
                found = orjson.loads(data[start:end])
            except orjson.JSONDecodeError:
                continue
            if found == event:
                return data.count(b"\n", 0, start) + 1
        return None

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
            appended = self._close_sub_calls_locked(None)
            # One result at a time, for the first call still pending: a result
            # pairs with the latest open call of its id in its step, which
            # may be another one than the call it was written for (a step
            # run again from its start after a crash, its ids open twice).
            for _ in range(len(self._pending)):
                if not self._pending:
                    break
                serial, call_id = next(iter(self._pending.items()))
                turn, step, agent = self._call_steps[serial] or (None, None, None)
                event = result_event(call_id, _INTERRUPTED, turn=turn, step=step, agent=agent)
                self._append_line(_encode(event), RESULT, event)
                appended.append(event)
            return appended

    def close_sub_calls(self, root_call_ids: Collection[str]) -> list[dict[str, Any]]:
        """:meth:`repair`'s first half for some calls only: a synthetic
        failure ``tool/ptc-dispatch`` for every sub-call started under one
        of ``root_call_ids`` and not settled, in start order; the events
        appended. (Crash recovery closes the sub-calls of the calls it
        settles or runs again.)"""
        roots = set(root_call_ids)
        with self._lock:
            return self._close_sub_calls_locked(roots)

    def close_steps(self, steps: Collection[StepKey]) -> list[dict[str, Any]]:
        """:meth:`repair` for some steps only: a synthetic failure
        ``tool/ptc-dispatch`` for every open sub-call of their open calls,
        then a synthetic failure ``tool/result`` for every call without a
        result whose ``tool/call`` named one of ``steps`` (``(turn, step,
        agent id)``), in call order; the events appended. (Crash recovery
        closes the logged steps nested in the calls it settles or runs
        again.)"""
        wanted = set(steps)
        with self._lock:
            if self._closed:
                raise self._closed_error()
            ours = [call_id for serial, call_id in self._pending.items() if self._call_steps[serial] in wanted]
            appended = self._close_sub_calls_locked(set(ours)) if ours else []
            for _ in range(len(ours)):
                # As repair(): one at a time, the first of those still open.
                serial = next((s for s in self._pending if self._call_steps[s] in wanted), None)
                if serial is None:
                    break
                turn, step, agent = self._call_steps[serial] or (None, None, None)
                event = result_event(self._pending[serial], _INTERRUPTED, turn=turn, step=step, agent=agent)
                self._append_line(_encode(event), RESULT, event)
                appended.append(event)
            return appended

    def _close_sub_calls_locked(self, roots: set[str] | None) -> list[dict[str, Any]]:
        # Called with the lock held. ``roots`` None: every open sub-call.
        appended: list[dict[str, Any]] = []
        for sub_call_id, fields in list(self._pending_sub_calls.items()):
            if roots is None or fields[0] in roots:
                event = _interrupted_dispatch(sub_call_id, *fields)
                self._append_line(_encode(event), PTC_DISPATCH, event)
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
        """Close the file (idempotent). Events stay readable (a session on a
        file reads them from its path again); appends raise."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            held, self._held = self._held, False
            file, self._file = self._file, None
        if file is not None:
            if held and sys.platform != "win32":
                # Released now, not when the last descriptor of the open file
                # is closed: a process forked meanwhile (a subprocess another
                # thread is starting, until its exec closes it) holds one,
                # and would keep the log locked after this close.
                try:
                    fcntl.flock(file.fileno(), fcntl.LOCK_UN)
                except OSError:
                    pass
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
        return f"<Session {where}: {self._count} events{state}>"
