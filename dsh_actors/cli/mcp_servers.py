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
SDK closes its stdin, then terminates and kills it). Every error names the server as the user gave it
(its ``--mcp`` value, or its ``--mcp-config`` file and name), the backstop's too (a server still
starting when :meth:`McpServers.start` stops waiting for them, past every step's own bound). An answer the SDK
cannot read fails the handshake at once, naming what is wrong; Ctrl-C
while a server starts (:meth:`McpServers.close` before it is ready) stops
it at once. A server's output is read as UTF-8, with ``U+FFFD`` for bytes
that are not (the SDK's default, ``strict``, would stop reading it). A mount's
refusal is told in the command line's words (:func:`_mount_problem`): a
prefix as ``--mcp 'mcp_=COMMAND ...'``, a server gone before its tools were
mounted as such. Needs the ``mcp`` extra.

``--mcp-config FILE`` (repeatable) mounts the servers a JSON file lists the
way Claude Desktop, Claude Code and Cursor keep them, ``{"mcpServers":
{"NAME": {"command": ..., "args": [...], "env": {...}}}}``, each as an
``--mcp`` value is, after the ``--mcp`` ones (:func:`read_config`): its
tools keep their names, ``command`` ``python`` is this command's own
interpreter, ``env`` is added to the environment the SDK gives a server,
and a server marked ``"disabled": true`` is left out. The whole file is
checked before any server starts; what cannot be used (text that is not
JSON, another shape, a server without ``command``, a transport other than
stdio: ``"url"``, ``"type": "sse"``) is a one-line error naming the file,
the server and the fix.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shlex
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from loguru import logger

from ..errors import DshError, RegistrationError, safe_str
from ..providers._common import kind
from ..runtime import ToolRuntime
from .batchfile import read_json_file
from .loading import CliError, one_line

__all__ = ["McpServers", "read_config"]

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
#: How a mount's refusal names a prefix as its fix (``prefix="mcp_"``).
_PREFIX_FIX: Final = re.compile(rf'prefix="({_PREFIX.pattern})"')


#: The options a server comes from (_Server.option).
_MCP: Final = "--mcp"
_MCP_CONFIG: Final = "--mcp-config"
#: The shape of a server of an --mcp-config file, and of the file, for its errors.
_SERVER_SHAPE: Final = '{"command": "...", "args": ["..."], "env": {"KEY": "VALUE"}}'
_CONFIG_SHAPE: Final = f'{{"mcpServers": {{"NAME": {_SERVER_SHAPE}}}}}'


@dataclass(frozen=True, slots=True)
class _Server:
    """One stdio server to mount, from an ``--mcp`` value or an
    ``--mcp-config`` file: the option it came from (``option``), how
    messages name it (``where``: the option's value, and a file's server by
    its name), the command
    that starts it (``argv``, ``python`` already this interpreter), its
    tools' ``prefix``, the environment variables it adds (``env``), and
    how a mount refusal's prefix fix names it: the ``--mcp`` value that
    mounts it without the prefix (``line``), and, for a file's server,
    which server of which file that value stands in for (``instead``)."""

    option: str
    where: str
    argv: list[str]
    prefix: str
    line: str
    env: dict[str, str] | None = None
    instead: str = ""


def _own_python(argv: list[str]) -> list[str]:
    """``argv`` with a first word ``python`` (or ``python3``) as this
    command's own interpreter."""
    return [sys.executable, *argv[1:]] if argv[0] in _PYTHONS else argv


def _from_option(command: str) -> _Server:
    """The server of one ``--mcp`` value."""
    prefix, line = split_prefix(command)
    where = f"{_MCP} {command!r}"
    try:
        argv = shlex.split(line)
    except ValueError as err:
        raise CliError(f"{where}: {err}") from None
    if not argv:
        raise CliError(f"{where}: needs a command line (got an empty one)")
    return _Server(_MCP, where, _own_python(argv), prefix, line)


def read_config(path: str) -> list[_Server]:
    """The servers an ``--mcp-config`` file lists (module docstring), in
    the file's order, the disabled ones left out; :class:`CliError` with a
    one-line message naming the file, the server and the fix for a file
    that cannot be used."""
    where = f"{_MCP_CONFIG} {shlex.quote(path)}"
    value, source = read_json_file(
        path,
        what="config file of MCP servers",
        holds=f"the MCP servers, {_CONFIG_SHAPE}",
        root="config",
        stdin=False,
        error=CliError,
        label=where,
    )
    servers = value.get("mcpServers") if isinstance(value, Mapping) else None
    if not isinstance(servers, Mapping):
        found = (
            f'"mcpServers" is {kind(servers)}'
            if isinstance(value, Mapping) and "mcpServers" in value
            else f"the file holds {_describe_value(value)}"
        )
        raise CliError(
            f"{where}: expected the MCP servers by name, {_CONFIG_SHAPE} (as Claude Desktop, Claude Code "
            f"and Cursor write them), but {found}"
        )
    if not servers:
        raise CliError(f'{where}: "mcpServers" lists no servers; add one: {_CONFIG_SHAPE}')
    return [
        server
        for name, entry in servers.items()
        if (server := _config_server(f"{where}: server {json.dumps(name, ensure_ascii=False)}", source, name, entry))
    ]


def _describe_value(value: Any) -> str:
    if isinstance(value, Mapping):
        keys = ", ".join(json.dumps(key, ensure_ascii=False) for key in list(value)[:5])
        return f"an object with the keys {keys}" if keys else "an empty object"
    return kind(value)


def _config_server(where: str, source: str, name: str, entry: Any) -> _Server | None:
    """The server ``name`` of the file ``source`` lists as ``entry``; None
    when it is disabled."""
    if not isinstance(entry, Mapping):
        raise CliError(f"{where}: expected an object, {_SERVER_SHAPE}, got {kind(entry)}")
    disabled = entry.get("disabled", False)
    if type(disabled) is not bool:
        raise CliError(f'{where}: "disabled" should be true or false, got {kind(disabled)}')
    if disabled:
        return None
    transport = entry.get("type", "stdio")
    if not isinstance(transport, str):
        raise CliError(
            f'{where}: "type" should be "stdio" (the one transport dsh-actors supports), got {kind(transport)}'
        )
    if transport != "stdio" or ("url" in entry and "command" not in entry):
        how = f"the {json.dumps(transport, ensure_ascii=False)} transport" if transport != "stdio" else 'a URL ("url")'
        raise CliError(
            f"{where}: it is reached by {how}, which dsh-actors does not support: only stdio servers, "
            'started from "command" and "args"; give the command that starts it over stdio, '
            "or leave the server out of the file"
        )
    command = entry.get("command")
    if "command" not in entry:
        raise CliError(f'{where}: no "command": name the program that starts it, as "command": "npx", "args": [...]')
    if not isinstance(command, str) or not command.strip():
        raise CliError(f'{where}: "command" should be the program that starts it, got {kind(command)}')
    args = entry.get("args", [])
    if not isinstance(args, list):
        raise CliError(f'{where}: "args" should be a list of strings, got {kind(args)}')
    for index, arg in enumerate(args):
        if not isinstance(arg, str):
            raise CliError(f'{where}: "args"[{index}] should be a string, got {kind(arg)} (write it in quotes)')
    env = entry.get("env") or {}
    if not isinstance(env, Mapping):
        raise CliError(f'{where}: "env" should be an object of strings, {{"KEY": "VALUE"}}, got {kind(env)}')
    for key, text in env.items():
        if not isinstance(text, str):
            shown = json.dumps(key, ensure_ascii=False)
            raise CliError(f'{where}: "env".{shown} should be a string, got {kind(text)} (write it in quotes)')
    argv = [command, *args]
    # (the --mcp value a prefix fix names: the variables' values are not shown)
    line = shlex.join(["env", *(f"{key}=..." for key in env), *argv] if env else argv)
    instead = f", given instead of server {json.dumps(name, ensure_ascii=False)} of {shlex.quote(source)},"
    return _Server(_MCP_CONFIG, where, _own_python(argv), "", line, dict(env) or None, instead)


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

    def __init__(self, commands: Sequence[str], configs: Sequence[str] = ()) -> None:
        self.commands = list(commands)
        self._servers = [_from_option(command) for command in self.commands]
        for path in configs:
            self._servers.extend(read_config(path))
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._failure: str | None = None
        # The server being started (they start one at a time, in order):
        # the one a failure that is no server's own, and the backstop, name.
        self._starting = self._servers[0] if self._servers else None
        # Set as the servers' thread ends (close() waits for it, not for a
        # join: on Python < 3.13 a join a Ctrl-C interrupted takes the thread
        # for ended, and a later one returns at once).
        self._stopped = threading.Event()

    def start(self, rt: ToolRuntime) -> McpServers:
        if not self._servers:
            return self
        try:
            import mcp  # noqa: F401 - the optional "mcp" extra: only --mcp needs it
        except ImportError:
            raise CliError(f"{self._servers[0].option} needs the MCP SDK: pip install 'dsh-actors[mcp]'") from None
        self._loop = asyncio.new_event_loop()
        self._task = self._loop.create_task(self._serve(rt))  # (the loop runs it once the thread starts)
        self._thread = threading.Thread(target=self._main, name="dsh-cli-mcp", daemon=True)
        self._thread.start()
        waited = (_HANDSHAKE_S + _LISTING_S + _SLACK_S) * len(self._servers)
        if not self._ready.wait(waited):
            where = self._where()
            self.close()
            raise CliError(
                f"{where}: the server had not finished starting {waited:g} s after the MCP servers began to "
                "start (spawning it, its MCP handshake, listing its tools); its stderr may say why: check that "
                "its command starts an MCP server that answers over stdio, or leave the server out"
            )
        if self._failure is not None:
            failure = self._failure
            self.close()
            raise CliError(failure)
        return self

    def _main(self) -> None:
        assert self._loop is not None and self._task is not None
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._task)
        except asyncio.CancelledError:
            pass  # close() while the servers were starting (Ctrl-C): each one started is stopped
        except Exception as err:  # noqa: BLE001 - a server's transport failing as it stops: one line, no traceback
            if self._ready.is_set():
                options = "/".join(dict.fromkeys(server.option for server in self._servers))
                logger.warning("{}: a server did not stop cleanly: {}", options, _describe(err))
            elif self._failure is None:
                self._failure = f"{self._where()}: {_describe(err)}"
        finally:
            self._ready.set()
            try:
                self._loop.run_until_complete(self._loop.shutdown_asyncgens())
                self._loop.close()
            finally:
                self._stopped.set()

    async def _serve(self, rt: ToolRuntime) -> None:
        # The optional "mcp" extra (dsh_actors.mcp imports the SDK at module
        # level): imported here, so the command runs without it unless --mcp.
        from mcp import ClientSession, StdioServerParameters, stdio_client

        from ..mcp import mount, server_errlog
        from ..mcp._mount import answer_failed_malformed

        self._stop = asyncio.Event()
        async with contextlib.AsyncExitStack() as stack:
            for server in self._servers:
                self._starting = server
                where, argv, prefix = server.where, server.argv, server.prefix
                try:
                    # "replace": a server's bytes that are not UTF-8 become U+FFFD; with the
                    # SDK's "strict" its reader dies on them, and every later answer is lost.
                    params = StdioServerParameters(
                        command=argv[0], args=argv[1:], env=server.env, encoding_error_handler="replace"
                    )
                    read, write = await stack.enter_async_context(stdio_client(params, errlog=server_errlog()))
                    handshake = _Handshake(answer_failed_malformed)
                    session = await stack.enter_async_context(
                        ClientSession(read, write, message_handler=handshake.on_message)
                    )
                    handshake.session = session
                    try:
                        async with asyncio.timeout(_HANDSHAKE_S):
                            await session.initialize()
                        handshake.session = None
                    except TimeoutError:
                        # Leaving the stack stops the server process (the SDK's stdio shutdown).
                        self._failure = (
                            f"{where}: the server did not answer the MCP handshake within {_HANDSHAKE_S:g} s"
                        )
                        break
                    stack.callback(await mount(rt, session, prefix=prefix))
                except DshError as err:
                    self._failure = f"{where}: {_mount_problem(err, server)}"
                except Exception as err:  # noqa: BLE001 - one line for the user (anyio may wrap it in a group)
                    self._failure = f"{where}: {_describe(err, prefix, server)}"
                if self._failure is not None:
                    break
            self._ready.set()
            if self._failure is None:
                await self._stop.wait()

    def _where(self) -> str:
        """How messages name the server being started (there is one once
        :meth:`start` goes on to start them)."""
        assert self._starting is not None
        return self._starting.where

    def close(self) -> None:
        """Stop the servers and wait until they are (each within the SDK's
        bounds: it closes the server's stdin, waits 2 s, terminates it,
        waits 2 s, kills it). A Ctrl-C meanwhile does not cut the wait
        short (a server that does not end with its input, say, would be left
        running): it is raised once they are stopped; a second one quits."""
        try:
            self._close()
        except KeyboardInterrupt:
            self._close()
            raise

    def _close(self) -> None:
        loop, stop, thread, task = self._loop, self._stop, self._thread, self._task
        if thread is None:
            return
        if loop is not None and not self._stopped.is_set():
            try:
                if self._ready.is_set():
                    if stop is not None:
                        loop.call_soon_threadsafe(stop.set)
                elif task is not None:  # still starting (a handshake may wait 30 s): cancel it
                    loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:
                pass
        if self._stopped.wait(_SLACK_S):
            thread.join()  # (it has ended its work: it returns)

    def __enter__(self) -> McpServers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Handshake:
    """The session's message handler while it shakes hands: an answer the
    SDK cannot read (``{"result": 5}``) fails ``initialize`` at once, as a
    mount does for its requests, instead of leaving it to wait for its
    bound (then it does nothing: a mount chains its own in front)."""

    def __init__(self, fail: Any) -> None:
        self.fail = fail
        self.session: Any = None

    async def on_message(self, message: Any) -> None:
        if self.session is not None and isinstance(message, Exception):
            self.fail(self.session, message)


def _mount_problem(err: DshError, server: _Server) -> str:
    """Why mounting ``server`` failed, in the command line's words: a
    prefix is ``--mcp 'mcp_=COMMAND'`` here (the mount names
    ``prefix="mcp_"``, its keyword; for a server of an ``--mcp-config``
    file, that value given instead of it), and a server gone before its
    tools were mounted is to be started again by running the command
    again, not by mounting a new session."""
    from ..mcp import McpConnectionError  # (the SDK's module: only --mcp needs it)

    if isinstance(err, McpConnectionError):
        return "the server exited or closed its connection before its tools were mounted (its stderr may say why)"
    text = one_line(err)
    if isinstance(err, RegistrationError):
        text = _PREFIX_FIX.sub(lambda fix: f"{_MCP} {shlex.quote(fix[1] + '=' + server.line)}{server.instead}", text)
    return text


def _split_command_hint(argv: list[str]) -> str:
    """When ``argv[0]``, an ``--mcp-config`` server's ``"command"``, holds
    whitespace (a whole command line, ``"npx -y pkg"``, which is run as the
    name of one program), the fix to append to its failure to start: the
    program in ``command``, its arguments (then ``args``'s) in ``args``;
    else ``""``."""
    command = argv[0]
    if not any(char.isspace() for char in command):
        return ""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    if len(words) < 2:
        return ""
    program, arguments = (
        json.dumps(words[0], ensure_ascii=False),
        json.dumps([*words[1:], *argv[1:]], ensure_ascii=False),
    )
    return (
        ' ("command" is the program alone, run as it is, without a shell: put its arguments in "args", '
        f'"command": {program}, "args": {arguments})'
    )


def _describe(err: BaseException, prefix: str = "", server: _Server | None = None) -> str:
    """``err``, which starting a server raised, in one line; when spawning
    it failed and its ``--mcp`` value had a ``prefix``, a shell's habit is
    named too: ``NAME=VALUE COMMAND`` reads ``NAME`` as the prefix here,
    not as an environment variable; and when an ``--mcp-config`` file's
    ``command`` is a whole command line (it holds whitespace), the fix:
    its arguments in ``args`` (:func:`_split_command_hint`)."""
    leaves: list[BaseException] = []

    def collect(e: BaseException) -> None:
        if isinstance(e, BaseExceptionGroup):
            for sub in e.exceptions:
                collect(sub)
        else:
            leaves.append(e)

    collect(err)
    first: Any = leaves[0] if leaves else err
    if isinstance(first, (FileNotFoundError, PermissionError, NotADirectoryError)):  # spawning it failed
        shown = f"cannot start the server: {first.strerror or 'no such file'}: {first.filename or ''}".rstrip(": ")
        if prefix:
            shown += (
                f" (the text before the first '=' is the tools' prefix, {prefix!r}, and the command follows it; "
                f"to set an environment variable, start the command with env: --mcp 'env {prefix}=VALUE COMMAND ...')"
            )
        if server is not None and server.instead:  # (a file's server: its "command" is one word, the program)
            shown += _split_command_hint(server.argv)
        return shown
    if type(first).__name__ == "ValidationError":  # pydantic's: an answer the SDK cannot read as what it expects
        from ..mcp._mount import _problems

        return f"the server's answer to the MCP handshake is not valid: {_problems(first)}"
    text = " ".join(safe_str(first).split())
    if type(first).__name__ == "MCPError":
        from ..mcp._mount import _MALFORMED  # (the SDK's module: only --mcp needs it)

        if getattr(first, "data", None) == _MALFORMED:
            return f"the server's answer to the MCP handshake is not valid: {text}"
        if getattr(first, "code", None) == -32000:  # the SDK's CONNECTION_CLOSED
            return "the server exited or closed its connection during the MCP handshake"
        return f"the server answered with an error: {text}"
    return f"{type(first).__name__}: {text}" if text else type(first).__name__
