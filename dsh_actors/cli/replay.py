"""``dsh-actors replay FILE [--tools MODULE]``: show a session log.

Each logged call is drawn with its tool's cards (``present_call`` from the
logged arguments, ``present_result`` from the logged result projection),
grouped by model step (an agent's: named in its header when the log has
more than one agent); PTC sub-dispatches are nested under the call that
made them. Without ``--tools``, or for a name the module does not
register, or when a presenter answers ``None``, the generic cards are used.

The file is only read (never repaired or truncated), with the session's
rules (``Session.open``'s): blank lines are skipped and a *last* line
without its newline that is not whole JSON is a torn write from a crash
(each event is written with its newline in one write), ignored with a note
on stderr (the only line too, when it begins as an event does: a crash
while the first event was written); any other bad line (one that is not
JSON, a newline-terminated last one included, or whole JSON that is no
session event, wherever it is), or an event of a known type that is
malformed (a ``tool/call`` or ``tool/batch`` without an int ``turn`` and
``step``, say), is an error naming ``FILE:LINE``. With
``-v`` a call whose tool (or a policy) raised shows the traceback its
``tool/result`` logged. Exit status 0, or 1 when the file cannot be read or
is not a session log, or the tools cannot be loaded.

The log is read twice, a line at a time, and never held: the first reading
checks every line (nothing is drawn from a log with a bad one) and learns
which calls stay open to its end and whether the steps are more than one
agent's; the second draws each root call as soon as it is complete, or
after the last event that changes it (:class:`~.render.LogTree`), so
memory holds what is open in the log (calls without a result, and the
calls logged after such a call until it is complete), not the log. A
pipe's bytes (a FIFO, ``/dev/stdin``, ``-``: standard input) are first
copied to a temporary file.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import IO, Any

from ..definition import ToolDefinition
from ..errors import DshError, LosslessJsonError
from ..json import loads
from ..runtime import ToolRuntime
from ..session import Session, whole_json
from .batchfile import unreadable
from .exits import file_descriptor, write_output
from .loading import CliError, install_tools, load_tool_source
from .render import (
    CallEntry,
    LogShapeError,
    LogTree,
    Lookup,
    Style,
    Tally,
    choose_style,
    index_only_session,
    render_lines,
)

__all__ = ["replay_command"]


def _open_log(path: str) -> IO[bytes]:
    """The session log at ``path``, open for reading from its start, as many
    times as replay reads it: a pipe's bytes (a FIFO, ``/dev/stdin``) are
    first copied to a temporary file."""
    if not path:  # (Path("") is the current directory)
        raise CliError("the session log needs a file name (got an empty one; '-' is standard input)")
    try:
        file = _stdin() if path == "-" else open(path, "rb")  # (closed by replay_command)
    except OSError as err:
        raise CliError(unreadable(path, err, "session log")) from None
    if file.seekable():
        return file
    with file:
        spool = tempfile.TemporaryFile()  # (returned, as the log)
        try:
            shutil.copyfileobj(file, spool)
        except OSError as err:
            spool.close()
            raise CliError(unreadable(path, err, "session log")) from None
    return spool


def _stdin() -> IO[bytes]:
    """Standard input (``-``), as a file of its own: closing it leaves the
    process's ``sys.stdin`` open."""
    fd = file_descriptor(sys.stdin)  # (read by lines from a file of its own: it needs the descriptor)
    if fd < 0:
        raise CliError("standard input is closed; name the session log, or pipe the log to '-'")
    return open(os.dup(fd), "rb")


class _LogReader:
    """The events of a session log read from its start, one line at a time,
    with ``Session.open``'s rules (see the module docstring): after a
    reading, :attr:`last` is the number of the last line read as an event
    (0: none) and :attr:`torn` the number of a torn last line that was
    ignored (or ``None``). Raises :class:`CliError` naming ``FILE:LINE``
    for a bad line."""

    def __init__(self, file: IO[bytes], path: str) -> None:
        self.file = file
        self.path = path
        self.last = 0
        self.torn: int | None = None

    def _lines(self, until: int | None) -> Iterator[tuple[int, bytes, bool, bool]]:
        """The lines that are not blank, up to line ``until`` (``None``:
        all), each with its number (from 1), whether it ended in a newline
        and whether it is the last."""
        held: tuple[int, bytes, bool] | None = None
        try:
            self.file.seek(0)
            for number, raw in enumerate(self.file, 1):
                if until is not None and number > until:
                    break
                terminated = raw.endswith(b"\n")
                line = raw[:-1] if terminated else raw
                if not line.strip():
                    continue
                if held is not None:
                    yield (*held, False)
                held = (number, line, terminated)
        except OSError as err:
            raise CliError(unreadable(self.path, err, "session log")) from None
        if held is not None:
            yield (*held, True)

    def events(self, session: Session, until: int | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
        """Each event and the number of its line, up to line ``until``,
        appended to ``session`` (:func:`~.render.index_only_session`: the
        reading's, its :class:`LogTree`'s) before it is yielded: what the
        session refuses, ``Session.open`` refuses in the file too."""
        path = self.path
        first = True
        for number, line, terminated, last in self._lines(until):
            try:
                event = loads(line, frozen=False, path="event")
            except LosslessJsonError as err:
                if last and not terminated and not whole_json(line):
                    # A torn write: only a cut line is one (a cut event is
                    # not JSON, and each event is written with its newline
                    # in one write, so a cut one never ends in a newline).
                    # A lone one is a log's only when it begins as an event does
                    # (a crash while its first event was written, as
                    # Session.open reads it); other text is no log at all.
                    if first and not _EVENT_START.match(line):
                        raise _not_an_event(path, number, err.problem, alone=True) from None
                    self.torn = number
                    return
                raise _not_an_event(path, number, err.problem, alone=last and first) from None
            if type(event) is not dict:
                raise _not_an_event(path, number, "a session event is a JSON object", alone=last and first)
            try:
                session.append_lossless(event)  # (lossless, as read)
            except DshError as err:
                problem = err.message.removeprefix("invalid session event: ")
                raise _not_an_event(path, number, problem, alone=last and first) from None
            first = False
            self.last = number
            yield number, event


#: How a session event's line begins (``"type"`` first, as the runtime and
#: ``json.dumps`` of an event built ``{"type": ...}`` write it).
_EVENT_START = re.compile(rb'\s*\{\s*"type"\s*:')


def _not_an_event(path: str, number: int, problem: str, *, alone: bool) -> CliError:
    if alone:  # its only line: not a log at all
        return CliError(f"{path}: not a session log (line {number} is not a session event)")
    return CliError(f"{path}:{number}: not a session event: {problem}")


def replay_command(args: argparse.Namespace) -> int:
    name = "<stdin>" if args.file == "-" else args.file  # (in messages)
    with _open_log(args.file) as file:
        scan = _scan(_LogReader(file, name))
        out = sys.stdout
        with ExitStack() as stack:
            lookup: Lookup = _unknown
            if args.tools is not None:
                source = load_tool_source(args.tools)
                rt = stack.enter_context(ToolRuntime())
                install_tools(source, rt)
                lookup = rt.tools.get
            style = choose_style(out, args.color)
            verbose = bool(getattr(args, "verbose", False))
            tally = Tally()
            entries = _entries(_LogReader(file, name), scan, tally)
            lines = render_lines(
                entries, lookup, style, named=scan.named, max_lines=args.max_lines or None, tracebacks=verbose
            )
            write_output(out, _with_summary(lines, tally, style))
    if scan.torn is not None:
        sys.stderr.write(f"dsh-actors replay: {name}:{scan.torn}: ignored a torn last line (an interrupted write)\n")
    return 0


@dataclass(frozen=True, slots=True)
class _Scan:
    """What a first reading of the log tells the second, which draws it."""

    last: int
    """The number of the last line to read (a torn last line excluded)."""
    torn: int | None
    """The number of the torn last line that was ignored, or ``None``."""
    named: bool
    """Whether the steps are more than one agent's (their headers name them)."""
    done_after: dict[int, int]
    """The root calls still open at the end (:meth:`LogTree.open_roots`)."""


def _scan(reader: _LogReader) -> _Scan:
    """Read the whole log once, keeping only what is open in it: every
    line is checked before anything is drawn (a bad line's error wins over
    a malformed event's, as when the log was read whole), and the second
    reading learns which calls stay open to the end, and whether the
    headers name agents."""
    session = index_only_session()
    tree = LogTree(keep=False, session=session)
    malformed: CliError | None = None
    for index, (number, event) in enumerate(reader.events(session)):
        if malformed is None:
            try:
                tree.feed(event, index)
            except LogShapeError as err:
                malformed = _bad_event(reader.path, number, err)
    if malformed is not None:
        raise malformed
    return _Scan(last=reader.last, torn=reader.torn, named=len(tree.agents) > 1, done_after=tree.open_roots())


def _entries(reader: _LogReader, scan: _Scan, tally: Tally) -> Iterator[CallEntry]:
    """The root calls of the log, each as soon as it is complete (see
    :class:`LogTree`), counted in ``tally``."""
    session = index_only_session()
    tree = LogTree(scan.done_after, session=session)
    for index, (number, event) in enumerate(reader.events(session, until=scan.last)):
        try:
            done = tree.feed(event, index)
        except LogShapeError as err:  # (the file changed since the first reading)
            raise _bad_event(reader.path, number, err) from None
        for entry in done:
            tally.add(entry)
            yield entry
    for entry in tree.finish():
        tally.add(entry)
        yield entry


def _bad_event(path: str, number: int, err: LogShapeError) -> CliError:
    return CliError(f"{path}:{number}: bad {err.kind} event: {err.problem}")


def _with_summary(lines: Iterable[str], tally: Tally, style: Style) -> Iterator[str]:
    """``lines``, each with its newline, then the summary line."""
    for line in lines:
        yield line + "\n"
    last = tally.line() if tally.calls else style.dim("(no tool calls in the log)")
    yield last + "\n"


def _unknown(name: str) -> ToolDefinition | None:
    return None
