"""An MCP server written by hand over stdio (newline-delimited JSON-RPC), for
the answers the SDK's server API never sends: a ``tools/call`` result that
is not an object, a request left unanswered, a tool that requires task
augmentation. It records every ``notifications/cancelled`` it receives;
the ``cancellations`` tool returns them once at least ``count`` (an
argument, default 0) have arrived, and ``wait_silent`` answers once a
``silent`` call has arrived. ``gather`` (read-only) answers once ``count``
calls of it have arrived, each with its own number in a block for the
model and in one for the user only. ``relist`` switches between two
listings (the second without ``echo``, with ``busy`` changed and ``added``
new) and sends ``notifications/tools/list_changed``. ``batch`` (read-only)
answers once ``count`` calls of it have arrived, with one JSON-RPC batch
(an array) holding every answer (``deep: true``: each nested as
``deep_result``'s). ``deep_result`` and ``deep_error`` answer with a value
nested deeper than Python's JSON parser reads, the id last; ``not_utf8``
with a line that is not UTF-8. Run as a script.

``SILENT_LISTING=1`` in the environment: ``tools/list`` is never answered.
``BAD_LISTING=<kind>``: ``tools/list`` is answered badly (see
``BAD_LISTINGS``; ``too_deep``: with a listing nested deeper than Python's
JSON parser reads).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

OBJECT: dict[str, Any] = {"type": "object", "properties": {}}
TOOLS: list[dict[str, Any]] = [
    {"name": "bad_result", "description": "answers with a result that is not an object", "inputSchema": OBJECT},
    {"name": "silent", "description": "never answers", "inputSchema": OBJECT},
    {"name": "echo", "description": "answers with its arguments as text", "inputSchema": OBJECT},
    {"name": "busy", "description": "answers with a -32000 server error", "inputSchema": OBJECT},
    {"name": "deep", "description": "answers with structuredContent 300 levels deep", "inputSchema": OBJECT},
    {"name": "surrogate", "description": "answers with a lone surrogate in its text", "inputSchema": OBJECT},
    {"name": "cancellations", "description": "the cancellations received so far", "inputSchema": OBJECT},
    {"name": "wait_silent", "description": "answers once a silent call has arrived", "inputSchema": OBJECT},
    {"name": "hologram", "description": "answers with a block of a type MCP lacks", "inputSchema": OBJECT},
    {"name": "struct_list", "description": "answers with structuredContent that is a list", "inputSchema": OBJECT},
    {
        "name": "gather",
        "description": "answers once count calls have arrived",
        "inputSchema": OBJECT,
        "annotations": {"readOnlyHint": True},
    },
    {"name": "relist", "description": "switches the listing", "inputSchema": OBJECT},
    {
        "name": "batch",
        "description": "answers once count calls have arrived, in one JSON-RPC batch",
        "inputSchema": OBJECT,
        "annotations": {"readOnlyHint": True},
    },
    {"name": "deep_result", "description": "answers with structuredContent nested too deep", "inputSchema": OBJECT},
    {"name": "deep_error", "description": "answers with an error whose data is nested too deep", "inputSchema": OBJECT},
    {"name": "not_utf8", "description": "answers with a line that is not UTF-8", "inputSchema": OBJECT},
    {
        "name": "task_only",
        "description": "must be called as a task",
        "inputSchema": OBJECT,
        "execution": {"taskSupport": "required"},
    },
    {
        "name": "task_optional",
        "description": "may be called as a task",
        "inputSchema": OBJECT,
        "execution": {"taskSupport": "optional"},
    },
]

# The listing after an odd number of relist calls.
SWITCHED: list[dict[str, Any]] = [
    {**tool, "description": "busy, changed"} if tool["name"] == "busy" else tool
    for tool in TOOLS
    if tool["name"] != "echo"
] + [{"name": "added", "description": "listed after relist", "inputSchema": OBJECT}]

# What tools/list answers under BAD_LISTING=<kind>: a result, or an error.
BAD_LISTINGS: dict[str, dict[str, Any]] = {
    "not_a_list": {"result": {"tools": 5}},
    "schema_not_an_object": {"result": {"tools": [{"name": "x", "inputSchema": "object"}]}},
    "second_schema_bad": {
        "result": {"tools": [{"name": "fine", "inputSchema": OBJECT}, {"name": "notes.read", "inputSchema": []}]}
    },
    "nameless": {"result": {"tools": [{"name": "fine", "inputSchema": OBJECT}, {"inputSchema": "object"}]}},
    "error": {"error": {"code": -32603, "message": "internal"}},
    "run_code": {
        "result": {
            "tools": [
                {"name": "run_code", "inputSchema": OBJECT},
                {"name": "typo", "inputSchema": {"type": "object", "properties": {"x": {"type": "strin"}}}},
            ]
        }
    },
}

cancelled: list[dict[str, Any]] = []
silent_calls = 0
waiting: list[Any] = []  # ids of wait_silent requests not answered yet
counting: list[tuple[Any, int]] = []  # (id, count) of cancellations requests not answered yet
gathered: list[Any] = []  # ids of gather requests not answered yet
batched: list[Any] = []  # ids of batch requests not answered yet
#: Deeper than Python's JSON parser reads (its recursion limit, ~1,000 levels).
TOO_DEEP = '{"a":' * 100_000 + "1" + "}" * 100_000
switched = False


def send(message: dict[str, Any]) -> None:
    write(json.dumps(message))


def write(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def too_deep(rid: Any) -> str:
    """An answer whose structuredContent is nested too deep, its id last."""
    return '{"jsonrpc":"2.0","result":{"content":[],"structuredContent":' + TOO_DEEP + '},"id":' + json.dumps(rid) + "}"


def text(value: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}], "isError": False}


def answer(request: dict[str, Any]) -> None:
    global switched
    method, rid, params = request.get("method"), request.get("id"), request.get("params") or {}
    if method == "initialize":
        send(
            {
                "jsonrpc": "2.0",
                "id": rid,
                "result": {
                    "protocolVersion": params.get("protocolVersion", "2025-11-25"),
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "raw-server", "version": "1"},
                },
            }
        )
    elif method == "tools/list":
        bad = os.environ.get("BAD_LISTING")
        if bad == "too_deep":  # JSON the SDK's parser refuses, the id last
            write('{"jsonrpc":"2.0","result":{"tools":' + TOO_DEEP + '},"id":' + json.dumps(rid) + "}")
        elif bad is not None:
            send({"jsonrpc": "2.0", "id": rid, **BAD_LISTINGS[bad]})
        elif os.environ.get("SILENT_LISTING") != "1":
            send({"jsonrpc": "2.0", "id": rid, "result": {"tools": SWITCHED if switched else TOOLS}})
    elif method == "tools/call":
        name = params.get("name")
        if name == "bad_result":
            send({"jsonrpc": "2.0", "id": rid, "result": 5})
        elif name == "silent":
            global silent_calls
            silent_calls += 1
            for waiter in waiting:
                send({"jsonrpc": "2.0", "id": waiter, "result": text("arrived")})
            waiting.clear()
        elif name == "wait_silent":
            if silent_calls:
                send({"jsonrpc": "2.0", "id": rid, "result": text("arrived")})
            else:
                waiting.append(rid)
        elif name == "busy":
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32000, "message": "rate limited, try again"}})
        elif name == "deep":
            nested: Any = 1
            for _ in range(300):
                nested = {"a": nested}
            send({"jsonrpc": "2.0", "id": rid, "result": {**text("deep"), "structuredContent": nested}})
        elif name == "surrogate":
            send({"jsonrpc": "2.0", "id": rid, "result": text("x\ud800y")})  # written as the escape \ud800
        elif name == "hologram":
            send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "hologram", "data": "x"}]}})
        elif name == "struct_list":
            send({"jsonrpc": "2.0", "id": rid, "result": {**text("[1, 2]"), "structuredContent": [1, 2]}})
        elif name == "gather":
            gathered.append(rid)
            if len(gathered) >= int((params.get("arguments") or {}).get("count", 1)):
                for n, waiter in enumerate(gathered):
                    user = {"type": "text", "text": f"user {n}", "annotations": {"audience": ["user"]}}
                    content = [{"type": "text", "text": f"model {n}"}, user]
                    send({"jsonrpc": "2.0", "id": waiter, "result": {"content": content, "isError": False}})
                gathered.clear()
        elif name == "batch":
            arguments = params.get("arguments") or {}
            batched.append(rid)
            if len(batched) >= int(arguments.get("count", 1)):
                if arguments.get("deep"):
                    write("[" + ",".join(too_deep(waiter) for waiter in batched) + "]")
                else:
                    answers = [{"jsonrpc": "2.0", "id": waiter, "result": text("batched")} for waiter in batched]
                    write(json.dumps(answers))
                batched.clear()
        elif name == "deep_result":
            write(too_deep(rid))
        elif name == "deep_error":
            write(
                '{"jsonrpc":"2.0","error":{"code":-32000,"message":"m","data":'
                + TOO_DEEP
                + '},"id":'
                + json.dumps(rid)
                + "}"
            )
        elif name == "not_utf8":
            text_not_utf8 = b'{"type":"text","text":"\xff"}'  # (0xff is never in UTF-8)
            sys.stdout.buffer.write(b'{"jsonrpc":"2.0","id":%d,"result":{"content":[%s]}}\n' % (rid, text_not_utf8))
            sys.stdout.flush()
        elif name == "relist":
            switched = not switched
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
            send({"jsonrpc": "2.0", "id": rid, "result": text("switched" if switched else "switched back")})
        elif name == "echo":
            send({"jsonrpc": "2.0", "id": rid, "result": text(json.dumps(params.get("arguments")))})
        elif name == "cancellations":
            counting.append((rid, int((params.get("arguments") or {}).get("count", 0))))
            answer_counts()
        elif name == "task_only" and "task" not in params:
            error = {"code": -32601, "message": "tool 'task_only' requires task augmentation"}
            send({"jsonrpc": "2.0", "id": rid, "error": error})
        else:
            send({"jsonrpc": "2.0", "id": rid, "result": text(f"called {name}")})
    elif method == "ping":
        send({"jsonrpc": "2.0", "id": rid, "result": {}})
    elif rid is not None:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"no method {method}"}})


def answer_counts() -> None:
    for entry in list(counting):
        if len(cancelled) >= entry[1]:
            counting.remove(entry)
            send({"jsonrpc": "2.0", "id": entry[0], "result": text(json.dumps(cancelled))})


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        if message.get("method") == "notifications/cancelled":
            cancelled.append(message.get("params") or {})
            answer_counts()
        elif "method" in message and "id" in message:
            answer(message)


if __name__ == "__main__":
    main()
