"""``--mcp "COMMAND ..."``: stdio MCP servers mounted for one command.

Each value is a command line (split like a shell would, no shell involved),
optionally after ``PREFIX=``: the server is started with the MCP SDK's stdio
client, its session initialized, and its tools mounted into the runtime
with :func:`dsh_actors.mcp.mount`, in the global scope, as ``PREFIX +
name`` (their own names without a prefix). A prefix is the text before the
first ``=`` when it is made of letters, digits, ``_`` and ``-`` only (so
``python -c 'x=1'`` has none; ``=CMD`` gives an empty one, for a command
whose first word holds an ``=``). A first word ``python`` (or
``python3``) is this command's own interpreter, :data:`sys.executable`, so
``--mcp "python -m examples.mcp_server"`` runs with the packages the
command sees whether or not a virtual environment is active.
The sessions live on one event loop thread of their own, so the command's
batch (run from the main thread) reaches them while that loop runs. The
servers' stderr is the command's stderr, or, when the command runs
in-process with a ``sys.stderr`` that has no file descriptor, the
process's own (else ``os.devnull``): :func:`dsh_actors.mcp.server_errlog`.
A server has 30 s to answer the MCP handshake; one that does not is a one-line error and is stopped (the
SDK closes its stdin, then terminates and kills it). Needs the ``mcp``
extra.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shlex
import sys
import threading
from collections.abc import Sequence
from typing import Any, Final

from ..errors import DshError, safe_str
from ..runtime import ToolRuntime
from .loading import CliError

__all__ = ["McpServers"]

#: How long a server may take to answer the MCP handshake (``initialize``).
#: A module attribute, read when a server starts, so tests can shorten it.
_HANDSHAKE_S: float = 30.0
#: How long start() waits for each server at most: the handshake, listing
#: its tools (each page bounded by dsh_actors.mcp.DEFAULT_TIMEOUT_MS, 60 s)
#: and spawning it, and how long close() waits for the servers to stop (the
#: SDK closes stdin, waits 2 s, sends SIGTERM, waits 2 s, sends SIGKILL). A
#: backstop: every step has a bound of its own.
_LISTING_S: Final = 60.0
_SLACK_S: Final = 30.0
#: First words of a --mcp command that mean this command's own interpreter.
_PYTHONS: Final = frozenset({"python", "python3"})
_PREFIX: Final = re.compile(r"[A-Za-z0-9_-]*")


def split_prefix(command: str) -> tuple[str, str]:
    """``"PREFIX=COMMAND ..."`` as ``(PREFIX, "COMMAND ...")``; ``("",
    command)`` when the text before the first ``=`` is not a prefix (module
    docstring)."""
    head, sep, rest = command.partition("=")
    if sep and _PREFIX.fullmatch(head):
        return head, rest
    return "", command


class McpServers:
    """The stdio MCP servers of one command, mounted into ``rt`` by
    :meth:`start` and stopped by :meth:`close` (a context manager)."""

    def __init__(self, commands: Sequence[str]) -> None:
        self.commands = list(commands)
        self._argvs: list[list[str]] = []
        self._prefixes: list[str] = []
        for command in self.commands:
            prefix, line = split_prefix(command)
            try:
                argv = shlex.split(line)
            except ValueError as err:
                raise CliError(f"--mcp {command!r}: {err}") from None
            if not argv:
                raise CliError(f"--mcp {command!r}: needs a command line (got an empty one)")
            if argv[0] in _PYTHONS:
                argv[0] = sys.executable
            self._argvs.append(argv)
            self._prefixes.append(prefix)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._failure: str | None = None

    def start(self, rt: ToolRuntime) -> McpServers:
        if not self._argvs:
            return self
        try:
            import mcp  # noqa: F401 - the optional "mcp" extra: only --mcp needs it
        except ImportError:
            raise CliError("--mcp needs the MCP SDK: pip install 'dsh-actors[mcp]'") from None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, args=(rt,), name="dsh-cli-mcp", daemon=True)
        self._thread.start()
        if not self._ready.wait((_HANDSHAKE_S + _LISTING_S + _SLACK_S) * len(self._argvs)):
            self.close()
            raise CliError("--mcp: the servers did not start")
        if self._failure is not None:
            failure = self._failure
            self.close()
            raise CliError(failure)
        return self

    def _main(self, rt: ToolRuntime) -> None:
        assert self._loop is not None
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._serve(rt))
        finally:
            self._ready.set()
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    async def _serve(self, rt: ToolRuntime) -> None:
        # The optional "mcp" extra (dsh_actors.mcp imports the SDK at module
        # level): imported here, so the command runs without it unless --mcp.
        from mcp import ClientSession, StdioServerParameters, stdio_client

        from ..mcp import mount, server_errlog

        self._stop = asyncio.Event()
        async with contextlib.AsyncExitStack() as stack:
            for command, argv, prefix in zip(self.commands, self._argvs, self._prefixes, strict=True):
                where = f"--mcp {command!r}"
                try:
                    params = StdioServerParameters(command=argv[0], args=argv[1:])
                    read, write = await stack.enter_async_context(stdio_client(params, errlog=server_errlog()))
                    session = await stack.enter_async_context(ClientSession(read, write))
                    try:
                        async with asyncio.timeout(_HANDSHAKE_S):
                            await session.initialize()
                    except TimeoutError:
                        # Leaving the stack stops the server process (the SDK's stdio shutdown).
                        self._failure = (
                            f"{where}: the server did not answer the MCP handshake within {_HANDSHAKE_S:g} s"
                        )
                        break
                    stack.callback(await mount(rt, session, prefix=prefix))
                except DshError as err:
                    self._failure = f"{where}: {' '.join(err.message.split())}"
                except Exception as err:  # noqa: BLE001 - one line for the user (anyio may wrap it in a group)
                    self._failure = f"{where}: {_describe(err)}"
                if self._failure is not None:
                    break
            self._ready.set()
            if self._failure is None:
                await self._stop.wait()

    def close(self) -> None:
        loop, stop, thread = self._loop, self._stop, self._thread
        if thread is not None and thread.is_alive() and loop is not None and stop is not None:
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:
                pass
        if thread is not None:
            thread.join(_SLACK_S)

    def __enter__(self) -> McpServers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _describe(err: BaseException) -> str:
    leaves: list[BaseException] = []

    def collect(e: BaseException) -> None:
        if isinstance(e, BaseExceptionGroup):
            for sub in e.exceptions:
                collect(sub)
        else:
            leaves.append(e)

    collect(err)
    first: Any = leaves[0] if leaves else err
    if isinstance(first, FileNotFoundError):
        return f"cannot start the server: {first.strerror or 'no such file'}: {first.filename or ''}".rstrip(": ")
    text = " ".join(safe_str(first).split())
    if type(first).__name__ == "MCPError":
        if getattr(first, "code", None) == -32000:  # the SDK's CONNECTION_CLOSED
            return "the server exited or closed its connection during the MCP handshake"
        return f"the server answered with an error: {text}"
    return f"{type(first).__name__}: {text}" if text else type(first).__name__
