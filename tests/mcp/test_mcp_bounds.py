"""Every request a mount sends is bounded, an answer the SDK cannot read
fails its call, and a tool that must run as an MCP task is not offered
(tests/mcp/server_raw.py, a server written by hand over stdio)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_harness import ServerConnection

from dsh_actors import AbortController, Agent, InvalidValueError, ToolBatchInput, ToolCall, ToolRuntime
from dsh_actors.mcp import McpProtocolError, mount


@pytest.fixture
def raw(tmp_path: Path) -> Iterator[ServerConnection]:
    connection = ServerConnection("server_raw.py", tmp_path / "server.log").start()
    try:
        yield connection
    finally:
        connection.close()


def run(rt: ToolRuntime, name: str, arguments: dict[str, Any] | None = None) -> Any:
    future = rt.tools.submit(ToolBatchInput(calls=(ToolCall(id="c1", name=name, arguments=arguments or {}),)))
    return future.result(20).results[0].result


def cancellations(raw: ServerConnection, count: int) -> list[dict[str, Any]]:
    """The cancellations the server has received, once there are ``count``:
    a cancellation is a notification, sent after the call has settled."""
    result = raw.call_directly("cancellations", {"count": count})
    return json.loads(result.content[0].text)  # type: ignore[no-any-return]


def test_a_result_that_is_not_an_object_fails_the_call_at_once(raw: ServerConnection, rt: ToolRuntime) -> None:
    assert raw.session is not None
    unmount = raw.run(mount(rt, raw.session))  # the default bound: DEFAULT_TIMEOUT_MS, a minute
    try:
        outcome = run(rt, "bad_result")
        assert outcome.is_error and outcome.error.info.code == "MCP_PROTOCOL_ERROR"
        assert outcome.error.message == (
            'MCP protocol error calling "bad_result": the server answered with a result that is not an object (5)'
        )
        assert not run(rt, "echo", {"a": 1}).is_error  # the session goes on
    finally:
        unmount()


def test_an_unanswered_call_fails_after_the_mounts_timeout_and_is_cancelled_on_the_server(
    raw: ServerConnection, rt: ToolRuntime
) -> None:
    assert raw.session is not None
    unmount = raw.run(mount(rt, raw.session, timeout_ms=300))
    try:
        outcome = run(rt, "silent")
        assert outcome.is_error and outcome.error.info.code == "TOOL_TIMEOUT"
        assert outcome.error.message == "tool call timed out after 300ms"
        assert [c.get("reason") for c in cancellations(raw, 1)] == ["tool call timed out after 300ms"]
    finally:
        unmount()


def test_an_unanswered_listing_fails_the_mount_after_its_timeout(tmp_path: Path, rt: ToolRuntime) -> None:
    conn = ServerConnection("server_raw.py", tmp_path / "server.log", env={"SILENT_LISTING": "1"}).start()
    try:
        assert conn.session is not None
        with pytest.raises(McpProtocolError, match=r'calling "tools/list": the server did not answer within 200 ms'):
            conn.run(mount(rt, conn.session, timeout_ms=200))
        assert rt.tools.get("echo") is None
    finally:
        conn.close()


@pytest.mark.usefixtures("library_logs")
def test_a_tool_that_requires_a_task_is_not_offered_and_is_logged(raw: ServerConnection, rt: ToolRuntime) -> None:
    from loguru import logger

    assert raw.session is not None
    lines: list[str] = []
    lock = threading.Lock()

    def sink(message: Any) -> None:
        with lock:
            lines.append(str(message))

    handle = logger.add(sink, level="WARNING", format="{message}")
    try:
        unmount = raw.run(mount(rt, raw.session, prefix="r_"))
    finally:
        logger.remove(handle)
    try:
        names = {s["name"] for s in rt.tools.schemas()}
        assert "r_task_only" not in names
        assert {"r_task_optional", "r_echo"} <= names  # optional: called as a plain tools/call
        assert not run(rt, "r_task_optional").is_error
        assert run(rt, "r_task_only").error.info.code == "UNKNOWN_TOOL"
        assert any("'task_only' left out: it must be called as an MCP task" in line for line in lines), lines
    finally:
        unmount()


def test_an_aborted_call_forwards_the_aborts_reason_to_the_server(raw: ServerConnection, rt: ToolRuntime) -> None:
    assert raw.session is not None
    unmount = raw.run(mount(rt, raw.session))
    try:
        controller = AbortController()
        future = rt.tools.submit(
            ToolBatchInput(calls=(ToolCall(id="c1", name="silent", arguments={}),), signal=controller.signal)
        )
        assert raw.call_directly("wait_silent").content[0].text == "arrived"
        controller.abort("the user pressed stop")
        assert future.result(20).results[0].result.error.info.code == "ABORTED"
        reasons = [c.get("reason") for c in cancellations(raw, 1)]
        assert reasons == ["the user pressed stop"]
    finally:
        unmount()


def test_a_server_error_with_the_code_the_sdk_uses_for_a_closed_connection_fails_that_call_only(
    raw: ServerConnection, rt: ToolRuntime
) -> None:
    # -32000 opens JSON-RPC's server-error range: a server may answer one
    # request with it over a connection that is fine.
    assert raw.session is not None
    unmount = raw.run(mount(rt, raw.session))
    try:
        outcome = run(rt, "busy")
        assert outcome.is_error and outcome.error.info.code == "MCP_PROTOCOL_ERROR"
        assert outcome.error.message == 'MCP protocol error -32000 calling "busy": rate limited, try again'
        assert not run(rt, "echo", {"a": 1}).is_error  # the mount goes on
    finally:
        unmount()


@pytest.mark.parametrize("tool", ["deep", "surrogate"])
def test_an_answer_the_sdk_cannot_parse_fails_the_call_at_once(
    raw: ServerConnection, rt: ToolRuntime, tool: str
) -> None:
    # The server answers at once with JSON the SDK's parser refuses (nested
    # deeper than it reads, a lone surrogate): the call fails then, not at
    # the mount's bound (a minute here).
    assert raw.session is not None
    unmount = raw.run(mount(rt, raw.session))
    try:
        outcome = run(rt, tool)
        assert outcome.is_error and outcome.error.info.code == "MCP_PROTOCOL_ERROR", outcome
        assert not run(rt, "echo", {"a": 1}).is_error
    finally:
        unmount()


@pytest.mark.parametrize(
    ("kind", "detail"),
    [
        ("not_a_list", "the server's listing is not valid: tools: Input should be a valid list"),
        (
            "schema_not_an_object",
            "the server's listing is not valid: tools.0.inputSchema: Input should be a valid dictionary or instance of InputSchema",
        ),
        ("error", "internal"),
    ],
)
def test_a_listing_the_sdk_cannot_read_fails_the_mount_naming_the_problem(
    tmp_path: Path, rt: ToolRuntime, kind: str, detail: str
) -> None:
    conn = ServerConnection("server_raw.py", tmp_path / "server.log", env={"BAD_LISTING": kind}).start()
    try:
        assert conn.session is not None
        with pytest.raises(McpProtocolError) as caught:
            conn.run(mount(rt, conn.session))
        shown = " -32603" if kind == "error" else ""
        assert caught.value.message == f'MCP protocol error{shown} calling "tools/list": {detail}'
        assert rt.tools.get("echo") is None
    finally:
        conn.close()


@pytest.mark.parametrize("bad", ["abc", "5", -1, 0, float("nan"), float("inf"), True])
def test_a_timeout_that_is_not_a_positive_finite_number_is_refused_before_anything_is_sent(
    raw: ServerConnection, rt: ToolRuntime, bad: Any
) -> None:
    # Before, a str that float() could not read raised its ValueError, and a
    # bound of zero or less (or True, 1 ms) failed the first tools/list as
    # if the server had not answered.
    assert raw.session is not None
    with pytest.raises(InvalidValueError) as raised:
        raw.run(mount(rt, raw.session, timeout_ms=bad))
    assert str(raised.value) == f"mount(): timeout_ms must be a positive finite number (got {bad!r})"
    assert rt.tools.model_tools(Agent("a")).known_names == ()  # nothing was registered
