"""How a command ends when it cannot end normally: the exit statuses of
the table in ``README.md`` beside this file that are not 0, 1 or 2, and
standard output that cannot be written.

It imports nothing of the runtime: :func:`.main.main` has it before it
imports the commands, so Ctrl-C while they load ends the command as
anywhere else.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Final, TextIO

from ..errors import disk_full

__all__ = ["EXIT_INTERRUPTED", "EXIT_OUTPUT_FAILED", "OutputError", "silence_output", "write_output"]

EXIT_INTERRUPTED: Final = 130
"""Ctrl-C: 128 + SIGINT, what a shell reports for a process SIGINT ended."""
EXIT_OUTPUT_FAILED: Final = 74
"""Standard output is closed, or writing it failed (``sysexits.h``'s
``EX_IOERR``)."""

OUTPUT_CLOSED: Final = (
    "standard output is closed, so nothing could be shown; "
    "give the command somewhere to write (a file, a pipe, or /dev/null)"
)


class OutputError(Exception):
    """Standard output cannot be written; the message (one line) says why
    (exit status :data:`EXIT_OUTPUT_FAILED`)."""


def write_output(out: TextIO, lines: Iterable[str], *, json: bool = False) -> None:
    """Write ``lines`` (each with its newline) to ``out``, standard output,
    and flush it. A failed write raises :class:`OutputError` naming why (a
    full disk); ``BrokenPipeError`` (the reader went away: ``| head``)
    passes as it is. A character ``out``'s encoding cannot write (an
    ``ascii`` or Windows code page standard output) is shown escaped:
    ``\\xe9``, or, in JSON text (``json``), ``\\u00e9``, so the document
    stays valid JSON of the same value."""
    encoding = getattr(out, "encoding", None) or "utf-8"
    try:
        for line in lines:
            try:
                out.write(line)
            except UnicodeEncodeError:  # (the encoding checks the whole line before anything is written)
                out.write(_encodable(line, encoding, json))
        out.flush()
    except BrokenPipeError:
        raise
    except OSError as err:
        reason = err.strerror or str(err) or type(err).__name__
        if disk_full(err):
            raise OutputError(f"cannot write standard output: the disk is full ({reason})") from None
        raise OutputError(f"cannot write standard output: {reason}") from None


def _encodable(text: str, encoding: str, json: bool) -> str:
    """``text`` with each character ``encoding`` cannot write escaped: as
    Python's ``backslashreplace`` does, or, in JSON text (where such a
    character can only be inside a string), as JSON's ``\\uXXXX``."""
    if not json:
        return text.encode(encoding, "backslashreplace").decode(encoding)
    shown = []
    for char in text:
        try:
            char.encode(encoding)
        except UnicodeEncodeError:
            units = char.encode("utf-16-be")  # (a surrogate pair beyond U+FFFF)
            char = "".join(f"\\u{int.from_bytes(units[i : i + 2], 'big'):04x}" for i in range(0, len(units), 2))
        shown.append(char)
    return "".join(shown)


def file_descriptor(stream: object) -> int:
    """The file descriptor of a standard stream, or -1: it has none (the
    process started without it, ``<&-``; a test's capture)."""
    try:
        fd = -1 if stream is None else stream.fileno()  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):  # (io.UnsupportedOperation is both of the last)
        return -1
    return fd if type(fd) is int else -1


def silence_output() -> None:
    """Point the process's standard output at ``/dev/null``: after it
    failed (or its reader went away), what its buffer still holds would
    fail again when Python flushes it at exit, with a message of Python's
    own. A standard output that is no file of the process (none, or a
    test's capture) is left to its owner."""
    fd = file_descriptor(sys.stdout)
    if fd < 0:
        return
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, fd)
        finally:
            os.close(null)
    except OSError:
        pass
