"""Where a stdio MCP server's stderr goes: :func:`server_errlog`."""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import TextIO

__all__ = ["server_errlog"]

_devnull: TextIO | None = None
_devnull_lock = threading.Lock()


def server_errlog() -> TextIO:
    """A stream for the ``errlog`` of the MCP SDK's ``stdio_client``: the
    server process inherits it as its stderr, so it needs a file descriptor.

    That is :data:`sys.stderr` when it has one; else the process's own
    stderr, :data:`sys.__stderr__` (where a notebook kernel's, or a
    ``redirect_stderr``'s, real stderr goes); else :data:`os.devnull`
    (opened once, closed at exit). Pass it explicitly: the SDK's
    default is ``sys.stderr`` as it was when ``mcp.client.stdio`` was first
    imported, which under Jupyter, pytest's ``capsys`` or
    ``contextlib.redirect_stderr`` has no descriptor (or is closed by now),
    and starting the server then fails with ``io.UnsupportedOperation:
    fileno``.
    """
    global _devnull
    for stream in (sys.stderr, sys.__stderr__):
        if stream is not None and _has_fd(stream):
            return stream
    with _devnull_lock:
        if _devnull is None:
            _devnull = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
            atexit.register(_devnull.close)
        return _devnull


def _has_fd(stream: TextIO) -> bool:
    try:
        return stream.fileno() >= 0
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both; a closed file is ValueError
        return False
