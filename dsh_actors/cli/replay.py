"""``dsh-actors replay FILE [--tools MODULE]``: show a session log.

Each logged call is drawn with its tool's cards (``present_call`` from the
logged arguments, ``present_result`` from the logged result projection),
grouped by model step (an agent's: named in its header when the log has
more than one agent); PTC sub-dispatches are nested under the call that
made them. Without ``--tools``, or for a name the module does not
register, or when a presenter answers ``None``, the generic cards are used.

The file is only read (never repaired or truncated), with the session's
rules (``Session.open``'s): blank lines are skipped and a *last* line that
is not whole JSON is a torn write from a crash, ignored with a note on
stderr (the only line too, when it begins as an event does: a crash while
the first event was written); any other bad line (one that is not JSON, or whole JSON that is no
session event, wherever it is), or an event of a known type that is
malformed (a ``tool/call`` or ``tool/batch`` without an int ``turn`` and
``step``, say), is an error naming ``FILE:LINE``. With
``-v`` a call whose tool (or a policy) raised shows the traceback its
``tool/result`` logged. Exit status 0, or 1 when the file cannot be read or
is not a session log, or the tools cannot be loaded.
"""

from __future__ import annotations

import argparse
import re
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from ..definition import ToolDefinition
from ..errors import DshError, LosslessJsonError
from ..json import loads
from ..runtime import ToolRuntime
from ..session import Session, whole_json
from .exits import write_output
from .loading import CliError, install_tools, load_tool_source
from .render import LogShapeError, Lookup, choose_style, log_entries, render_log, summary_line

__all__ = ["read_log", "replay_command"]


def read_log(path: str) -> tuple[list[dict[str, Any]], list[int], int | None]:
    """The events of the session log at ``path``, the line number of each,
    and the line number of a torn last line that was ignored (or ``None``)."""
    if not path:  # (Path("") is the current directory)
        raise CliError("the session log needs a file name (got an empty one)")
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise CliError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise CliError(f"{path}: is a directory, not a session log") from None
    except OSError as err:
        raise CliError(f"{path}: cannot read: {err.strerror or err}") from None
    lines = [(number, line) for number, line in enumerate(data.split(b"\n"), 1) if line.strip()]
    events: list[dict[str, Any]] = []
    numbers: list[int] = []
    # Each event goes through a session's append (in memory): what it
    # refuses, Session.open refuses in the file too.
    check = Session()
    for index, (number, line) in enumerate(lines):
        last = index == len(lines) - 1
        try:
            event = loads(line, frozen=False, path="event")
        except LosslessJsonError as err:
            if last and not whole_json(line):
                # A torn write: only a cut line is one (a cut event is not JSON).
                # A lone one is a log's only when it begins as an event does
                # (a crash while its first event was written, as
                # Session.open reads it); other text is no log at all.
                if not events and not _EVENT_START.match(line):
                    raise _not_an_event(path, number, err.problem, alone=True) from None
                return events, numbers, number
            raise _not_an_event(path, number, err.problem, alone=last and not events) from None
        if type(event) is not dict:
            raise _not_an_event(path, number, "a session event is a JSON object", alone=last and not events)
        try:
            check.append(event)
        except DshError as err:
            problem = err.message.removeprefix("invalid session event: ")
            raise _not_an_event(path, number, problem, alone=last and not events) from None
        events.append(event)
        numbers.append(number)
    return events, numbers, None


#: How a session event's line begins (``"type"`` first, as the runtime and
#: ``json.dumps`` of an event built ``{"type": ...}`` write it).
_EVENT_START = re.compile(rb'\s*\{\s*"type"\s*:')


def _not_an_event(path: str, number: int, problem: str, *, alone: bool) -> CliError:
    if alone:  # its only line: not a log at all
        return CliError(f"{path}: not a session log (line {number} is not a session event)")
    return CliError(f"{path}:{number}: not a session event: {problem}")


def replay_command(args: argparse.Namespace) -> int:
    events, numbers, torn = read_log(args.file)
    try:
        entries = log_entries(events)
    except LogShapeError as err:
        raise CliError(f"{args.file}:{numbers[err.index]}: bad {err.kind} event: {err.problem}") from None
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
        lines = render_log(entries, lookup, style, max_lines=args.max_lines or None, tracebacks=verbose)
        last = summary_line(entries) if entries else style.dim("(no tool calls in the log)")
        write_output(out, [*(line + "\n" for line in lines), last + "\n"])
    if torn is not None:
        sys.stderr.write(f"dsh-actors replay: {args.file}:{torn}: ignored a torn last line (an interrupted write)\n")
    return 0


def _unknown(name: str) -> ToolDefinition | None:
    return None
