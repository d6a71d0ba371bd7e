"""A listing a mount must take as the server sent it: a tool whose ``_meta``
holds an integer beyond 64 bits (valid JSON, which the MCP SDK keeps) mounts,
is called, and survives re-listings, against a server written by hand."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from loguru import logger
from mcp_harness import ServerConnection

from dsh_actors import TextBlock, ToolBatchInput, ToolCall, ToolRuntime
from dsh_actors.mcp import mount

#: Lists ``big`` (its ``_meta`` holds 2**70); ``relist`` adds ``bigger``
#: (the same) and sends ``notifications/tools/list_changed``.
SERVER = r"""
import json
import sys

OBJECT = {"type": "object", "properties": {}}
TOOLS = [
    {"name": "big", "inputSchema": OBJECT, "_meta": {"example.com/id": 2**70}},
    {"name": "relist", "inputSchema": OBJECT},
]


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def text(value):
    return {"content": [{"type": "text", "text": value}], "isError": False}


for line in sys.stdin:
    message = json.loads(line)
    rid, method, params = message.get("id"), message.get("method"), message.get("params") or {}
    if rid is None:
        continue
    if method == "initialize":
        info = {"name": "big-meta", "version": "1"}
        result = {"protocolVersion": params["protocolVersion"], "capabilities": {"tools": {}}, "serverInfo": info}
        send({"jsonrpc": "2.0", "id": rid, "result": result})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": rid, "result": {"tools": TOOLS}})
    elif method == "tools/call" and params["name"] == "relist":
        TOOLS.append({"name": "bigger", "inputSchema": OBJECT, "_meta": {"example.com/id": 2**71}})
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        send({"jsonrpc": "2.0", "id": rid, "result": text("relisted")})
    elif method == "tools/call":
        send({"jsonrpc": "2.0", "id": rid, "result": text("called " + params["name"])})
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no such method"}})
"""


@pytest.fixture
def big_meta(tmp_path: Path) -> Iterator[ServerConnection]:
    script = tmp_path / "big_meta_server.py"
    script.write_text(SERVER)
    connection = ServerConnection(str(script), tmp_path / "server.log").start()  # (an absolute path)
    try:
        yield connection
    finally:
        connection.close()


def run(rt: ToolRuntime, name: str) -> Any:
    future = rt.tools.submit(ToolBatchInput(calls=(ToolCall(id="c1", name=name, arguments={}),)))
    return future.result(20).results[0].result


def names(rt: ToolRuntime) -> set[str]:
    return {s["name"] for s in rt.tools.schemas()}


@pytest.mark.usefixtures("library_logs")
def test_a_tool_whose_meta_holds_an_int_beyond_64_bits_mounts_and_relists(
    big_meta: ServerConnection, rt: ToolRuntime
) -> None:
    assert big_meta.session is not None
    unmount = big_meta.run(mount(rt, big_meta.session))
    errors: list[str] = []
    sink = logger.add(lambda message: errors.append(str(message)), level="ERROR", filter="dsh_actors")
    relisted = threading.Event()

    def on_change() -> None:
        if "bigger" in names(rt):
            relisted.set()

    off = rt.events.on("tools/change", on_change)
    try:
        assert names(rt) == {"big", "relist"}
        definition = rt.tools.get("big")
        assert definition is not None
        assert definition.meta["mcp"]["tool"]["_meta"] == {"example.com/id": 2**70}
        assert run(rt, "big").content == (TextBlock("called big"),)
        assert run(rt, "relist").content == (TextBlock("relisted"),)
        assert relisted.wait(20), (names(rt), errors)
        assert rt.tools.get("big") is definition  # unchanged: the same registration
        assert run(rt, "bigger").content == (TextBlock("called bigger"),)
        assert not errors, errors
    finally:
        off()
        logger.remove(sink)
        unmount()
    assert not names(rt)
