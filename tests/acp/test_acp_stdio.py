"""The ACP stdio transport's reading of lines at and over STREAM_LIMIT."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import tracemalloc
from typing import Any

import pytest

from dsh_actors.acp import _stdio


class _Writer:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def write(self, data: bytes) -> None:
        self.sent.append(json.loads(data))

    async def drain(self) -> None:
        pass


async def _received(data: bytes) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """What the SDK gets from ``data`` and what the transport answered."""
    reader = asyncio.StreamReader(limit=64)
    writer = _Writer()
    transport = _stdio.CheckedTransport(reader, writer)  # type: ignore[arg-type]
    reader.feed_data(data)
    reader.feed_eof()
    got = []
    while (message := await transport.receive()) is not None:
        got.append(message)
    return got, writer.sent


NOTE = {"jsonrpc": "2.0", "method": "session/cancel", "params": {}}
LIMIT = 200
TOO_LONG = "a message line longer than the limit of 200 bytes was skipped unread: send each message on one line of at most 200 bytes"


@pytest.mark.parametrize("ident", [7, "r-7"])
def test_an_overlong_response_fails_the_request_it_answers_unanswered(
    monkeypatch: pytest.MonkeyPatch, ident: object
) -> None:
    # It was dropped and answered -32600 with no id: the agent's request
    # it answers waited for ever.
    monkeypatch.setattr(_stdio, "STREAM_LIMIT", LIMIT)
    response = json.dumps({"jsonrpc": "2.0", "id": ident, "result": {"content": "x" * 300}}).encode()
    got, sent = asyncio.run(_received(response + b"\n" + json.dumps(NOTE).encode() + b"\n"))
    assert got == [{"jsonrpc": "2.0", "id": ident, "error": {"code": -32600, "message": TOO_LONG}}, NOTE]
    assert sent == []


@pytest.mark.parametrize(
    "line",
    [
        {"jsonrpc": "2.0", "result": {"content": "x" * 300}, "id": 7},  # (its id past the head: not known)
        {"jsonrpc": "2.0", "method": "session/prompt", "params": {"x": "x" * 300}, "id": 7},  # (id past the head)
        {"jsonrpc": "2.0", "method": "session/cancel", "params": {"x": "x" * 300}},  # (an id may follow: not known)
        {"jsonrpc": "2.0", "id": True, "method": "session/prompt", "params": "x" * 300},  # not an id
        {"jsonrpc": "2.0", "id": 7, "params": {"x": "x" * 300}},  # (a request's method may follow)
        {"jsonrpc": "2.0", "id": True, "result": "x" * 300},  # no id of ours
    ],
)
def test_an_overlong_line_not_shown_a_response_to_us_is_answered_without_an_id(
    monkeypatch: pytest.MonkeyPatch, line: dict[str, Any]
) -> None:
    monkeypatch.setattr(_stdio, "STREAM_LIMIT", LIMIT)
    monkeypatch.setattr(_stdio, "HEAD_LIMIT", 100)
    got, sent = asyncio.run(_received(json.dumps(line).encode() + b"\n" + json.dumps(NOTE).encode() + b"\n"))
    assert got == [NOTE]
    assert [(m["id"], m["error"]["data"]["details"]) for m in sent] == [(None, TOO_LONG)]


@pytest.mark.parametrize("ident", [7, "r-7"])
@pytest.mark.parametrize("id_first", [True, False])
def test_an_overlong_request_is_answered_with_its_id(
    monkeypatch: pytest.MonkeyPatch, ident: object, id_first: bool
) -> None:
    # It was answered -32600 with id null: the client's request waited for ever.
    monkeypatch.setattr(_stdio, "STREAM_LIMIT", LIMIT)
    monkeypatch.setattr(_stdio, "HEAD_LIMIT", 100)
    members: list[tuple[str, object]] = [("id", ident), ("method", "session/prompt")]
    line = dict([("jsonrpc", "2.0"), *(members if id_first else members[::-1]), ("params", {"x": "x" * 300})])
    got, sent = asyncio.run(_received(json.dumps(line).encode() + b"\n" + json.dumps(NOTE).encode() + b"\n"))
    assert got == [NOTE]
    assert sent == [
        {
            "jsonrpc": "2.0",
            "id": ident,
            "error": {"code": -32600, "message": "Invalid Request", "data": {"details": TOO_LONG}},
        }
    ]


@pytest.mark.parametrize("cut", ['"id":12', '"id":"r-1'])
def test_an_overlong_request_whose_id_the_head_cuts_is_answered_without_an_id(
    monkeypatch: pytest.MonkeyPatch, cut: str
) -> None:
    monkeypatch.setattr(_stdio, "STREAM_LIMIT", LIMIT)
    monkeypatch.setattr(_stdio, "HEAD_LIMIT", 100)
    start = '{"jsonrpc":"2.0","method":"session/prompt",'
    head = start + " " * (100 - len(start) - len(cut)) + cut
    rest = "345," if cut.endswith("12") else '2",'
    line = head + rest + '"params":{"x":"' + "y" * 300 + '"}}'
    assert json.loads(line)["id"] in (12345, "r-12")
    got, sent = asyncio.run(_received(line.encode() + b"\n" + json.dumps(NOTE).encode() + b"\n"))
    assert got == [NOTE]
    assert [(m["id"], m["error"]["data"]["details"]) for m in sent] == [(None, TOO_LONG)]


def test_an_overlong_response_whose_id_the_head_cuts_is_answered_without_an_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The head ended two digits into "id":12345, which read whole as 12:
    # request 12 failed, and 12345 waited for ever.
    monkeypatch.setattr(_stdio, "STREAM_LIMIT", LIMIT)
    monkeypatch.setattr(_stdio, "HEAD_LIMIT", 100)
    start = '{"jsonrpc":"2.0","result":null,'
    head = start + " " * (100 - len(start) - len('"id":12')) + '"id":12'
    line = head + '345,"x":"' + "y" * 300 + '"}'
    got, sent = asyncio.run(_received(line.encode() + b"\n" + json.dumps(NOTE).encode() + b"\n"))
    assert got == [NOTE]
    assert [(m["id"], m["error"]["data"]["details"]) for m in sent] == [(None, TOO_LONG)]


def test_a_line_of_the_limit_ended_by_crlf_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    # The "\r" of "\r\n" was counted: a line of exactly the limit was dropped.
    monkeypatch.setattr(_stdio, "STREAM_LIMIT", LIMIT)
    note = json.dumps(NOTE).encode()
    fits = note[:-1] + b" " * (LIMIT - len(note)) + b"}"
    for newline in (b"\n", b"\r\n"):
        got, sent = asyncio.run(_received(fits + newline + fits + newline))
        assert (got, sent) == ([NOTE, NOTE], []), newline
    got, sent = asyncio.run(_received(b" " + fits + b"\r\n" + note + b"\n"))  # one byte over
    assert (got, [m["id"] for m in sent]) == ([NOTE], [None])


def test_an_overlong_line_on_stdio_is_dropped_holding_little_more_than_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The stdio reader's own limit was STREAM_LIMIT: its buffer grew to
    # twice the limit besides the parts kept (about 3.2 times the limit).
    limit = 2 * 1024 * 1024
    monkeypatch.setattr(_stdio, "STREAM_LIMIT", limit)
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    monkeypatch.setattr(sys, "stdin", os.fdopen(stdin_r, "rb", 0))
    monkeypatch.setattr(sys, "stdout", os.fdopen(stdout_w, "wb", 0))

    def write() -> None:
        piece = b"x" * 65536
        for _ in range(3 * limit // len(piece)):
            os.write(stdin_w, piece)
        os.write(stdin_w, b"\n")
        os.close(stdin_w)

    async def scenario() -> tuple[object, int]:
        reader, writer = await _stdio._stdio_streams()
        transport = _stdio.CheckedTransport(reader, writer)
        writing = threading.Thread(target=write)
        tracemalloc.start()
        try:
            writing.start()
            line = await transport._read_line()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
            writing.join()
            writer.close()
        return line, peak

    try:
        line, peak = asyncio.run(scenario())
    finally:
        os.close(stdout_r)
    assert peak < limit + 1024 * 1024, peak / limit
    assert not isinstance(line, bytes)  # (dropped)
