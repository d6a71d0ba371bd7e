"""Serving an ACP agent over stdio, answering malformed messages.

The SDK's own stdio framing skips a line that is not JSON without a word,
and a line that is JSON but not a JSON-RPC message (an array, a number, a
response whose ``error`` is a string) stops its receive loop: the agent
goes deaf. :class:`CheckedTransport` reads the lines itself and answers
each such line with a JSON-RPC error (``-32700`` parse error, ``-32600``
invalid request, with the message's ``id`` when it has a usable one) and
hands only well-formed messages to the SDK, which answers the rest
(``-32601`` unknown method, ``-32602`` invalid parameters). A malformed
response (an ``error`` that is not an object with an integer ``code`` and
a string ``message``, a result and an error both, or neither: an id
without a method) is not answered (JSON-RPC answers requests; answering a response
could start the peers answering each other's errors): it is logged, and
the SDK gets it as an error response (``-32600``, the problem as its
message), so the agent's request it answers fails instead of waiting.
A line longer than :data:`STREAM_LIMIT` bytes is not read whole: it is
read to its end in parts (the stdio reader's limit is :data:`READ_LIMIT`)
and dropped (no more of it held than the limit, besides the reader's
buffer and the part just read: under 1 MiB) and answered with a
``-32600`` error naming the limit, the agent reading on: with the
request's id when its first :data:`HEAD_LIMIT` bytes show a request (a
``"method"`` member and a string or integer ``"id"`` whole in them), so
the client's request fails instead of waiting; else without an id
(``null``: JSON-RPC's answer to an invalid request whose id is not known,
as for a notification, which a line not read whole cannot be told to be).
But when those bytes show a response (a ``"result"`` or ``"error"``
member, no ``"method"``) with an id a request of ours may have, it is not
answered: that request fails with the problem, as for a malformed response.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import sys
from typing import Any, Final

from acp import run_agent, stdio_streams
from acp.interfaces import Agent
from loguru import logger

from ..errors import InvalidTypeError, printable, safe_str

__all__ = ["CheckedTransport", "serve"]

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
_RESPONSE_KEYS: Final = ("id", "result", "error")
STREAM_LIMIT: Final = 50 * 1024 * 1024
"""The longest message line read, in bytes, its newline (``\\n`` or
``\\r\\n``) not counted (the SDK's default for stdio): a longer one is
skipped and answered with an error."""
READ_LIMIT: Final = 64 * 1024
"""The stdio reader's own limit, in bytes: a longer line is read in parts
of about this size (its buffer holds at most about twice it)."""
HEAD_LIMIT: Final = 4096
"""How many bytes of a line longer than :data:`STREAM_LIMIT` are kept to
tell whether it is a response, and to what (its ``"id"``)."""
PEER_TEXT_LIMIT: Final = 200
"""The most characters of a text the peer sent that a message of ours shows."""


def peer_text(text: str) -> str:
    """Text the peer sent (an id, an error's message), as a failure or a log
    line shows it: at most :data:`PEER_TEXT_LIMIT` characters of it, shown
    with :func:`printable` (no escape sequence of the peer's reaches the
    model, the session log or a terminal)."""
    if len(text) > PEER_TEXT_LIMIT:
        text = f"{text[:PEER_TEXT_LIMIT]}..."
    return printable(text)


def _usable_id(value: object) -> bool:
    return value is None or type(value) is str or type(value) is int


def message_problem(message: object) -> str | None:
    """Why ``message`` (parsed JSON) is not a JSON-RPC 2.0 message the SDK
    can take, or ``None`` when it is one."""
    if not isinstance(message, dict):
        return f"a JSON-RPC message is a JSON object, not {type(message).__name__}"
    if message.get("jsonrpc") != "2.0":
        return 'a JSON-RPC message has "jsonrpc": "2.0"'
    if "id" in message and not _usable_id(message["id"]):
        return "id must be a string, an integer or null"
    if "method" in message:
        if type(message["method"]) is not str:
            return "method must be a string"
        params = message.get("params")
        if params is not None and not isinstance(params, (dict, list)):
            return "params must be an object or an array"
        return None
    if "id" not in message:
        return "a message has a method (a request or notification) or an id (a response)"
    if "result" not in message and "error" not in message:
        return "a response has a result or an error"
    if "result" in message and "error" in message:
        return "a response has a result or an error, not both"
    if "error" in message:
        error = message["error"]
        if not isinstance(error, dict):
            return "a response's error must be an object"
        if type(error.get("code")) is not int or type(error.get("message")) is not str:
            return "a response's error has an integer code and a string message"
    return None


def _is_response(message: object) -> bool:
    """Whether ``message`` is meant as a response: an object without a
    method, with an id, a result or an error (a request has a method)."""
    return isinstance(message, dict) and "method" not in message and any(key in message for key in _RESPONSE_KEYS)


def _answers_a_request(message: object) -> bool:
    """Whether ``message`` is a response (no method) with an id a request of
    ours may have (a string or an integer), whatever else is wrong with it
    (its ``"jsonrpc"`` missing, say): that request fails, not waits."""
    return (
        isinstance(message, dict)
        and "method" not in message
        and (type(message.get("id")) is str or type(message.get("id")) is int)
    )


class Overlong:
    """A line longer than :data:`STREAM_LIMIT`, dropped: its first
    :data:`HEAD_LIMIT` bytes kept (``head``)."""

    __slots__ = ("_members", "head")

    def __init__(self, head: bytes) -> None:
        self.head = head
        self._members: dict[str, Any] | None = None

    def members(self) -> dict[str, Any]:
        """:meth:`_read_members`, read once (:meth:`answers` and
        :meth:`request` both ask)."""
        if self._members is None:
            self._members = self._read_members()
        return self._members

    def _read_members(self) -> dict[str, Any]:
        """The members of the JSON object the head begins, in order, that it
        holds whole (a later one of the same name replacing an earlier, as
        ``json.loads`` has it); a member whose value is cut by the head's
        end is there with the value None, as is one whose value no ``,``
        or ``}`` follows inside the head (a number cut there reads whole). Empty when the head begins no
        object; the members up to where it stops being JSON."""
        text = self.head.decode("utf-8", "replace")
        decoder = json.JSONDecoder(parse_constant=_not_json)
        members: dict[str, Any] = {}
        at = _skip_space(text, 0)
        if not text.startswith("{", at):
            return members
        at += 1
        try:
            while True:
                at = _skip_space(text, at)
                if not text.startswith('"', at):
                    return members
                name, at = decoder.raw_decode(text, at)
                at = _skip_space(text, at)
                if not text.startswith(":", at):
                    return members
                at = _skip_space(text, at + 1)
                if at >= len(text):
                    return members
                members[name] = None  # (its value cut, until read whole)
                value, at = decoder.raw_decode(text, at)
                at = _skip_space(text, at)
                if not text.startswith((",", "}"), at):
                    return members  # (a number the head's end cut reads whole: 12 of 12345)
                members[name] = value
                if not text.startswith(",", at):
                    return members
                at += 1
        except (ValueError, RecursionError):  # cut, or not JSON from here
            return members

    def answers(self) -> object:
        """The id of the request of ours this line answers, as far as its
        head shows (a response, see the module docstring), or None."""
        members = self.members()
        if ("result" in members or "error" in members) and _answers_a_request(members):
            return members["id"]
        return None

    def request(self) -> object:
        """The id of the request this line is, as far as its head shows (a
        ``"method"`` member and a string or integer ``"id"`` whole in it),
        or None: a notification, an id the head does not show, or no
        method there (the line may be a response)."""
        members = self.members()
        ident = members.get("id")
        return ident if "method" in members and _usable_id(ident) else None


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at] in " \t\n\r":
        at += 1
    return at


def _not_json(constant: str) -> Any:
    """``NaN``, ``Infinity``, ``-Infinity``: Python's JSON reads them, JSON
    has no such words (a peer that sent one sent a line that is not JSON)."""
    raise ValueError(f"{constant} is not a JSON value")


def _sendable(value: Any) -> Any:
    """``value`` with what JSON text in UTF-8 cannot carry replaced: a lone
    surrogate by U+FFFD, a number that is not finite by null."""
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {_sendable(key): _sendable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_sendable(item) for item in value]
    return value


class CheckedTransport:
    """The SDK's message transport over a byte stream pair (newline-
    delimited JSON), answering malformed lines with JSON-RPC errors itself."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._lock = asyncio.Lock()
        self._closed = False

    async def send(self, message: dict[str, Any]) -> None:
        try:
            text = json.dumps(message, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
            data = (text + "\n").encode("utf-8")
        except (ValueError, UnicodeEncodeError):
            # Text UTF-8 cannot carry (a lone surrogate: a peer's method name
            # repeated in an error, a card title from os.fsdecode) or a
            # number JSON has no word for: sent as what it can be, rather
            # than not at all (a request never answered, a card never shown).
            text = json.dumps(_sendable(message), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
            data = (text + "\n").encode("utf-8")
        async with self._lock:
            self._writer.write(data)
            await self._writer.drain()

    async def receive(self) -> dict[str, Any] | None:
        while True:
            line = await self._read_line()
            if isinstance(line, Overlong):
                limit = STREAM_LIMIT
                too_long = (
                    f"a message line longer than the limit of {limit:,} bytes was skipped unread: "
                    f"send each message on one line of at most {limit:,} bytes"
                )
                answered = line.answers()
                if answered is not None:  # a response: not answered, its request fails
                    logger.warning(
                        "ACP: ignored a malformed response (id {}): {}", peer_text(safe_str(answered)), too_long
                    )
                    return _failed(answered, too_long)
                await self._answer(line.request(), INVALID_REQUEST, "Invalid Request", too_long)
                continue
            if not line:
                return None
            line = line.strip()
            if not line:
                continue
            try:
                message = json.loads(line, parse_constant=_not_json)
            except ValueError as exc:
                await self._answer(None, PARSE_ERROR, "Parse error", f"not JSON: {safe_str(exc)}")
                continue
            except RecursionError:  # nested deeper than the parser recurses
                await self._answer(None, PARSE_ERROR, "Parse error", "JSON nested too deep to read")
                continue
            problem = message_problem(message)
            if problem is None:
                return message  # type: ignore[no-any-return]
            ident = message.get("id") if isinstance(message, dict) else None
            if _is_response(message):
                # Not answered: JSON-RPC answers requests, and an error sent
                # back for a response could start the two peers answering
                # each other's errors.
                logger.warning("ACP: ignored a malformed response (id {}): {}", peer_text(safe_str(ident)), problem)
                if _answers_a_request(message):
                    # The request of ours it may answer fails with the problem
                    # (a JSON-RPC error the SDK raises) instead of waiting for
                    # an answer that will not come.
                    return _failed(ident, problem)
                continue
            await self._answer(ident if _usable_id(ident) else None, INVALID_REQUEST, "Invalid Request", problem)

    async def close(self) -> None:
        """Close the writer. What the peer has not read by then is dropped
        (the transport aborted): a send waiting for it to read ends, and
        later ones fail (``ConnectionResetError``). A peer that closed our
        input and stopped reading would otherwise keep that send, and the
        agent's exit that waits for it, waiting for ever."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            transport = self._writer.transport
            if transport.get_write_buffer_size():
                transport.abort()
            else:
                self._writer.close()

    async def _answer(self, ident: object, code: int, message: str, detail: str) -> None:
        logger.warning("ACP: answered a malformed message with {} ({}): {}", code, message, detail)
        error = {"code": code, "message": message, "data": {"details": detail}}
        try:
            await self.send({"jsonrpc": "2.0", "id": ident, "error": error})
        except Exception as exc:  # noqa: BLE001 - the peer is gone: nothing to answer
            logger.debug("ACP: could not answer a malformed message: {}", safe_str(exc))

    async def _read_line(self) -> bytes | Overlong:
        """The next line (``b""`` at the end of the input), or an
        :class:`Overlong` for one longer than :data:`STREAM_LIMIT` bytes
        (its newline, ``\\n`` or ``\\r\\n``, not counted): read to its end
        (or the input's) in the parts the reader gives and dropped, holding
        no more of it than the limit besides the part just read."""
        chunks: list[bytes] | None = []
        head = b""  # (the line's first HEAD_LIMIT bytes)
        size = 0  # (the line's bytes read so far)
        tail = b""  # (its last two bytes: a newline read in two parts is still one)
        while True:
            try:
                try:
                    chunk = await self._reader.readuntil(b"\n")
                    ended = True
                except asyncio.LimitOverrunError as exc:  # (longer than the reader's own limit: in parts)
                    chunk = await self._reader.readexactly(exc.consumed)
                    ended = False
            except asyncio.IncompleteReadError as exc:  # the input ended within the line
                chunk = exc.partial
                ended = True
            except (ConnectionError, OSError):
                return b""
            size += len(chunk)
            if len(head) < HEAD_LIMIT:
                head += chunk[: HEAD_LIMIT - len(head)]
            tail = (tail + chunk[-2:])[-2:]
            # The newline does not count; nor a "\r" that may be its first
            # byte (the "\n" not read yet).
            newline = 2 if tail == b"\r\n" else 1 if tail.endswith(b"\n") or (not ended and tail.endswith(b"\r")) else 0
            if chunks is not None and size - newline > STREAM_LIMIT:
                chunks = None  # too long: the rest is read and dropped
            if chunks is not None:
                chunks.append(chunk)
            if ended:
                return Overlong(head) if chunks is None else b"".join(chunks)


def _failed(ident: object, problem: str) -> dict[str, Any]:
    """What the SDK gets for a malformed response of ``ident``: an error
    response, so that the request of ours it answers fails with
    ``problem`` (a JSON-RPC error the SDK raises) instead of waiting for an
    answer that will not come."""
    return {"jsonrpc": "2.0", "id": ident, "error": {"code": INVALID_REQUEST, "message": problem}}


async def _stdio_streams() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """This process's stdin and stdout as streams. On POSIX the writer's
    protocol is asyncio's own, which ends a send waiting to drain once the
    pipe is lost (the peer closed it, or :meth:`CheckedTransport.close`
    aborted it); the SDK's stdio writer ignores the loss, and the send
    waited for ever. (Windows: the SDK's streams, which read stdin on a
    thread.)"""
    if sys.platform == "win32":
        return await stdio_streams(limit=READ_LIMIT)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=READ_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, sys.stdout)
    return reader, asyncio.StreamWriter(transport, protocol, None, loop)


async def serve(
    agent: Agent,
    reader: asyncio.StreamReader | None = None,
    writer: asyncio.StreamWriter | None = None,
) -> None:
    """Run ``agent`` (an ``acp.interfaces.Agent``) over ``reader`` and
    ``writer`` (default: this process's stdin and stdout) until the client
    closes its end; malformed messages are answered (see the module
    docstring). Returns when the client disconnected; the SDK has then
    cancelled the handlers still running, and what the client had not
    read of the agent's output is dropped: a client that closed stdin and
    stopped reading stdout does not keep the agent from exiting (its sends
    end instead of waiting for ever)."""
    if reader is None or writer is None:
        if reader is not None or writer is not None:
            raise InvalidTypeError("serve(): pass both reader and writer, or neither (stdio)")
        reader, writer = await _stdio_streams()
    await run_agent(agent, CheckedTransport(reader, writer))
