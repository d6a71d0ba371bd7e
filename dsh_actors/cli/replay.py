"""``dsh-actors replay FILE [--tools MODULE]``: show a session log.

Each logged call is drawn with its tool's cards (``present_call`` from the
logged arguments, ``present_result`` from the logged result projection),
grouped by model step; PTC sub-dispatches are nested under the call that
made them. Without ``--tools``, or for a name the module does not
register, or when a presenter answers ``None``, the generic cards are used.

The file is only read (never repaired or truncated), with the session's
rules: blank lines are skipped and a bad *last* line is a torn write from a
crash, ignored with a note on stderr; any other bad line is an error naming
``FILE:LINE``. With ``-v`` a call whose tool (or a policy) raised shows the
traceback its ``tool/result`` logged. Exit status 0, or 1 when the file cannot be read or is not a
session log, or the tools cannot be loaded.
"""

from __future__ import annotations

import argparse
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from ..definition import ToolDefinition
from ..errors import LosslessJsonError
from ..json import loads
from ..runtime import ToolRuntime
from .loading import CliError, install_tools, load_tool_source
from .render import LogShapeError, Lookup, choose_style, log_entries, render_log, summary_line

__all__ = ["read_log", "replay_command"]


def read_log(path: str) -> tuple[list[dict[str, Any]], int | None]:
    """The events of the session log at ``path``, and the line number of a
    torn last line that was ignored (or ``None``)."""
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
    torn: int | None = None
    for index, (number, line) in enumerate(lines):
        try:
            event = loads(line, frozen=False, path="event")
            if type(event) is not dict:
                raise LosslessJsonError("event", "a session event is a JSON object")
            kind = event.get("type")
            if type(kind) is not str or not kind:
                raise LosslessJsonError("event", 'a session event has a non-empty string "type"')
        except LosslessJsonError as err:
            if index < len(lines) - 1:
                raise CliError(f"{path}:{number}: not a session event: {err.problem}") from None
            torn = number
            break
        events.append(event)
    if not events and torn is not None:
        raise CliError(f"{path}: not a session log (line {torn} is not a session event)")
    return events, torn


def replay_command(args: argparse.Namespace) -> int:
    events, torn = read_log(args.file)
    try:
        entries = log_entries(events)
    except LogShapeError as err:
        raise CliError(f"{args.file}: {err}") from None
    out = sys.stdout
    with ExitStack() as stack:
        lookup: Lookup = _unknown
        if args.tools is not None:
            source = load_tool_source(args.tools)
            rt = stack.enter_context(ToolRuntime())
            install_tools(source, rt)
            lookup = rt.tools.get
        style = choose_style(out, args.color)
        if not entries:
            out.write(style.dim("(no tool calls in the log)") + "\n")
        verbose = bool(getattr(args, "verbose", False))
        for line in render_log(entries, lookup, style, max_lines=args.max_lines or None, tracebacks=verbose):
            out.write(line + "\n")
        if entries:
            out.write(summary_line(entries) + "\n")
        out.flush()
    if torn is not None:
        sys.stderr.write(f"dsh-actors replay: {args.file}:{torn}: ignored a torn last line (an interrupted write)\n")
    return 0


def _unknown(name: str) -> ToolDefinition | None:
    return None
