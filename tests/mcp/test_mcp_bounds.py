"""Every request a mount sends is bounded, an answer the SDK cannot read
fails its call naming the problem, a tool that must run as an MCP task is
not offered, and the mount's records hold up (concurrent calls, a
re-listing a listener refuses, a reserved name) against
tests/mcp/server_raw.py, a server written by hand over stdio."""

from __future__ import annotations

import ast
import json
import textwrap
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from loguru import logger
from mcp_harness import ServerConnection

from dsh_actors import (
    AbortController,
    AbortSignal,
    Agent,
    InvalidValueError,
    ToolBatchInput,
    ToolCall,
    ToolExecutionInput,
    ToolRuntime,
)
from dsh_actors.errors import RegistrationError
from dsh_actors.json import materialize, thaw
from dsh_actors.mcp import McpProtocolError, mount
from dsh_actors.messages import ExecuteBatch


@pytest.fixture
def raw(tmp_path: Path) -> Iterator[ServerConnection]:
    connection = ServerConnection("server_raw.py", tmp_path / "server.log").start()
    try:
        yield connection
    finally:
        connection.close()


@contextmanager
def mounted(rt: ToolRuntime, conn: ServerConnection, **options: Any) -> Iterator[None]:
    """``conn``'s server mounted on ``rt`` (with ``options``) for the block."""
    assert conn.session is not None
    unmount = conn.run(mount(rt, conn.session, **options))
    try:
        yield
    finally:
        unmount()


def run(rt: ToolRuntime, name: str, arguments: dict[str, Any] | None = None) -> Any:
    future = rt.tools.submit(ToolBatchInput(calls=(ToolCall(id="c1", name=name, arguments=arguments or {}),)))
    return future.result(20).results[0].result


def cancellations(raw: ServerConnection, count: int) -> list[dict[str, Any]]:
    """The cancellations the server has received, once there are ``count``:
    a cancellation is a notification, sent after the call has settled."""
    result = raw.call_directly("cancellations", {"count": count})
    return json.loads(result.content[0].text)  # type: ignore[no-any-return]


def test_a_result_that_is_not_an_object_fails_the_call_at_once(raw: ServerConnection, rt: ToolRuntime) -> None:
    with mounted(rt, raw):  # the default bound: DEFAULT_TIMEOUT_MS, a minute
        outcome = run(rt, "bad_result")
        assert outcome.is_error and outcome.error.info.code == "MCP_PROTOCOL_ERROR"
        assert outcome.error.message == (
            'MCP protocol error calling "bad_result": the server answered with a result that is not an object (5)'
        )
        assert not run(rt, "echo", {"a": 1}).is_error  # the session goes on


def test_an_unanswered_call_fails_after_the_mounts_timeout_and_is_cancelled_on_the_server(
    raw: ServerConnection, rt: ToolRuntime
) -> None:
    with mounted(rt, raw, timeout_ms=300):
        outcome = run(rt, "silent")
        assert outcome.is_error and outcome.error.info.code == "TOOL_TIMEOUT"
        assert outcome.error.message == "tool call timed out after 300ms"
        assert [c.get("reason") for c in cancellations(raw, 1)] == ["tool call timed out after 300ms"]


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
    with mounted(rt, raw):
        controller = AbortController()
        future = rt.tools.submit(
            ToolBatchInput(calls=(ToolCall(id="c1", name="silent", arguments={}),), signal=controller.signal)
        )
        assert raw.call_directly("wait_silent").content[0].text == "arrived"
        controller.abort("the user pressed stop")
        assert future.result(20).results[0].result.error.info.code == "ABORTED"
        reasons = [c.get("reason") for c in cancellations(raw, 1)]
        assert reasons == ["the user pressed stop"]


def test_a_server_error_with_the_code_the_sdk_uses_for_a_closed_connection_fails_that_call_only(
    raw: ServerConnection, rt: ToolRuntime
) -> None:
    # -32000 opens JSON-RPC's server-error range: a server may answer one
    # request with it over a connection that is fine.
    with mounted(rt, raw):
        outcome = run(rt, "busy")
        assert outcome.is_error and outcome.error.info.code == "MCP_PROTOCOL_ERROR"
        assert outcome.error.message == 'MCP protocol error -32000 calling "busy": rate limited, try again'
        assert not run(rt, "echo", {"a": 1}).is_error  # the mount goes on


@pytest.mark.parametrize("tool", ["deep", "surrogate"])
def test_an_answer_the_sdk_cannot_parse_fails_the_call_at_once(
    raw: ServerConnection, rt: ToolRuntime, tool: str
) -> None:
    # The server answers at once with JSON the SDK's parser refuses (nested
    # deeper than it reads, a lone surrogate): the call fails then, not at
    # the mount's bound (a minute here).
    with mounted(rt, raw):
        outcome = run(rt, tool)
        assert outcome.is_error and outcome.error.info.code == "MCP_PROTOCOL_ERROR", outcome
        assert not run(rt, "echo", {"a": 1}).is_error


#: The bound of the tests of answers the SDK drops: the call must fail long
#: before it (one that waits for it fails TOOL_TIMEOUT).
DROPPED_BOUND_MS = 10_000


@pytest.mark.parametrize("tool", ["deep_result", "deep_error"])
def test_an_answer_nested_deeper_than_pythons_parser_reads_fails_the_call_at_once(
    raw: ServerConnection, rt: ToolRuntime, tool: str
) -> None:
    # 100,000 levels (the standard library's parser recurses, and gives up
    # at ~1,000), the answer's id after them: read without parsing them.
    with mounted(rt, raw, timeout_ms=DROPPED_BOUND_MS):
        outcome = run(rt, tool)
        assert outcome.is_error and outcome.error.info.code == "MCP_PROTOCOL_ERROR", outcome
        assert outcome.error.message.startswith(
            f'MCP protocol error calling "{tool}": the MCP SDK cannot read the answer of MCP server "raw-server" '
            "(Invalid JSON: recursion limit exceeded"
        )
        assert not run(rt, "echo", {"a": 1}).is_error


@pytest.mark.parametrize("deep", [False, True])
def test_a_json_rpc_batch_fails_every_call_it_answers_at_once(
    raw: ServerConnection, rt: ToolRuntime, deep: bool
) -> None:
    # One array answers both calls (each nested too deep, with deep): the
    # SDK reads no batch, so each call fails, naming the server.
    with mounted(rt, raw, timeout_ms=DROPPED_BOUND_MS):
        calls = tuple(ToolCall(id=f"c{i}", name="batch", arguments={"count": 2, "deep": deep}) for i in range(2))
        results = rt.tools.submit(ToolBatchInput(calls=calls)).result(20).results
        for item in results:
            assert item.result.is_error and item.result.error.info.code == "MCP_PROTOCOL_ERROR", item.result
            assert item.result.error.message == (
                'MCP protocol error calling "batch": the MCP server "raw-server" answered with a JSON-RPC batch '
                "(an array), which the MCP SDK cannot read"
            )
        assert not run(rt, "echo", {"a": 1}).is_error


def test_the_modules_example_server_parameters_survive_an_answer_that_is_not_utf8(
    tmp_path: Path, rt: ToolRuntime
) -> None:
    # The StdioServerParameters dsh_actors.mcp's docstring shows. With the
    # SDK's default (encoding_error_handler="strict") a line that is not
    # UTF-8 stops the SDK's reader: that call and every later one would
    # wait for the bound.
    import dsh_actors.mcp

    assert dsh_actors.mcp.__doc__ is not None
    example = dsh_actors.mcp.__doc__.split("::\n", 1)[1].split("\n\n", 1)[0]
    tree = compile(textwrap.dedent(example), "example", "exec", ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    [params] = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "StdioServerParameters"
    ]
    options = {kw.arg: ast.literal_eval(kw.value) for kw in params.keywords if kw.arg not in ("command", "args")}
    conn = ServerConnection("server_raw.py", tmp_path / "server.log", options=options).start()
    try:
        with mounted(rt, conn, timeout_ms=DROPPED_BOUND_MS):
            outcome = run(rt, "not_utf8")
            assert not outcome.is_error, outcome
            assert outcome.value[0]["text"] == "\ufffd"  # the byte that is not UTF-8, replaced
            assert not run(rt, "echo", {"a": 1}).is_error
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("kind", "detail"),
    [
        ("not_a_list", "the server's listing is not valid: tools: Input should be a valid list"),
        # A listed tool's entry is named by the tool's name (before: by its
        # index, tools.0), with the fix; by its index when it has no name.
        (
            "schema_not_an_object",
            'the server\'s listing is not valid: tool "x": inputSchema: Input should be a valid dictionary or '
            'instance of InputSchema (the MCP SDK refuses the whole listing for it: fix tool "x" on the server)',
        ),
        (
            "second_schema_bad",
            'the server\'s listing is not valid: tool "notes.read": inputSchema: Input should be a valid dictionary '
            'or instance of InputSchema (the MCP SDK refuses the whole listing for it: fix tool "notes.read" on the '
            "server)",
        ),
        (
            "nameless",
            "the server's listing is not valid: tools.1.inputSchema: Input should be a valid dictionary or instance "
            "of InputSchema; tools.1.name: Field required",
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


def test_a_listing_the_sdk_cannot_parse_fails_the_mount_at_once_naming_the_problem(
    tmp_path: Path, rt: ToolRuntime
) -> None:
    # Before, the mount attached its handler (which fails the waiter of an
    # answer the SDK drops) only after listing: the listing waited for its
    # bound and failed saying the server had not answered.
    conn = ServerConnection("server_raw.py", tmp_path / "server.log", env={"BAD_LISTING": "too_deep"}).start()
    try:
        assert conn.session is not None
        handler = conn.session._message_handler
        with pytest.raises(McpProtocolError) as caught:
            conn.run(mount(rt, conn.session, timeout_ms=DROPPED_BOUND_MS))
        assert caught.value.message.startswith(
            'MCP protocol error calling "tools/list": the MCP SDK cannot read the answer of MCP server "raw-server" '
            "(Invalid JSON: recursion limit exceeded"
        ), caught.value.message
        assert conn.session._message_handler is handler  # the failed mount detached
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


@pytest.mark.parametrize(
    ("tool", "detail"),
    [
        ("hologram", 'content.0: unknown type "hologram"'),
        ("struct_list", "structuredContent: Input should be a valid dictionary"),
    ],
)
def test_a_result_the_sdk_refuses_fails_naming_the_problem_in_one_line(
    raw: ServerConnection, rt: ToolRuntime, tool: str, detail: str
) -> None:
    # Before, the message was pydantic's dump: one complaint per member of
    # the content block union, with inputs and URLs, over 34 lines.
    with mounted(rt, raw):
        outcome = run(rt, tool)
        assert outcome.is_error and outcome.error.info.code == "MCP_PROTOCOL_ERROR"
        assert (
            outcome.error.message == f'MCP protocol error calling "{tool}": the server\'s result is not valid: {detail}'
        )


def test_calls_given_one_arguments_object_each_get_their_own_content_for_the_user(
    raw: ServerConnection, rt: ToolRuntime
) -> None:
    # The server answers the eight calls of a batch together, each with its
    # number in a block for the model and in one for the user only. Before,
    # the blocks for the user were kept by the arguments object's id: a call
    # got another's, or none (in most batches; five make it certain).
    with mounted(rt, raw):
        arguments = materialize({"count": 8})
        calls = tuple(ToolCall(id=f"c{i}", name="gather", arguments=arguments) for i in range(8))
        for _ in range(5):
            batch = ToolBatchInput(calls=calls, max_parallel_tool_calls=8)
            numbers = set()
            for entry in rt.tools.submit(batch).result(20).results:
                outcome = entry.result
                assert not outcome.is_error, outcome
                [block] = outcome.content
                number = block.text.removeprefix("model ")
                assert outcome.meta is not None, entry.call_id
                assert thaw(outcome.meta)["mcp"]["user_content"][0]["text"] == f"user {number}", entry.call_id
                numbers.add(number)
            assert numbers == {str(n) for n in range(8)}


@pytest.mark.usefixtures("library_logs")
def test_a_relisting_a_listener_refuses_leaves_every_tool_as_it_was_and_the_mount_true_to_the_registry(
    raw: ServerConnection, rt: ToolRuntime
) -> None:
    # The switch withdraws echo and the old busy and registers the changed
    # busy and added, as one change, which a tools/change listener refuses
    # once: every tool stays as it was (before, one change per tool, a
    # refusal left a mix of the two listings). Switching back lists what is
    # registered: nothing changes; switching again swaps them.
    assert raw.session is not None
    unmount = raw.run(mount(rt, raw.session))
    changes: list[set[str]] = []
    refused, switched = threading.Event(), threading.Event()

    def on_change() -> None:
        known = {s["name"] for s in rt.tools.schemas()}
        changes.append(known)
        if len(changes) == 1:
            raise RuntimeError("not now")
        if "added" in known:
            switched.set()

    errors: list[str] = []

    def sink(message: Any) -> None:
        errors.append(str(message))
        if "the re-listed tools were not swapped" in str(message):
            refused.set()

    handle = logger.add(sink, level="ERROR", filter="dsh_actors")
    off = rt.events.on("tools/change", on_change)
    try:
        echo, busy = rt.tools.get("echo"), rt.tools.get("busy")
        raw.call_directly("relist")
        assert refused.wait(20), errors
        assert any("every tool stays as it was" in e and "not now" in e for e in errors), errors
        assert (rt.tools.get("echo"), rt.tools.get("busy"), rt.tools.get("added")) == (echo, busy, None)
        assert not run(rt, "echo", {"a": 1}).is_error
        raw.call_directly("relist")  # back: the listing the registry holds
        raw.call_directly("relist")
        assert switched.wait(20), errors
        raw.idle()
        assert rt.tools.get("echo") is None
        changed = rt.tools.get("busy")
        assert changed is not None and changed.description == "busy, changed"
        assert len(changes) == 2, changes  # the refused change and the swap: switching back changed nothing
    finally:
        off()
        logger.remove(handle)
        unmount()
    assert not {s["name"] for s in rt.tools.schemas()}


def test_names_taken_in_the_scope_are_all_listed_with_the_mount_s_context(tmp_path: Path, rt: ToolRuntime) -> None:
    # Before, the first taken name stopped the mount, its message without
    # the server's name; the others were found one attempt at a time.
    from dsh_actors import ToolOutput, define_tool

    for name in ("echo", "busy"):
        rt.tools.register(
            define_tool(
                name=name,
                description="mine",
                parameters={},
                output=ToolOutput(schema={"type": "string"}),
                execute=lambda args, ctx: "mine",
            )
        )
    conn = ServerConnection("server_raw.py", tmp_path / "server.log").start()
    try:
        assert conn.session is not None
        with pytest.raises(RegistrationError) as caught:
            conn.run(mount(rt, conn.session))
        message = caught.value.message
        assert message.startswith('cannot mount MCP server "raw-server": '), message
        assert '"echo"' in message and '"busy"' in message, message
        assert sorted(s["name"] for s in rt.tools.schemas()) == ["busy", "echo"]  # nothing of the server's left
        # The mount's fix, not registration's (@tool(name=...), which a server's tool cannot take).
        assert message.count("@tool(name=") == 0, message
        assert (
            'cannot register tool "echo": a tool with this name is already registered in the global scope: mount '
            'the server with a prefix (prefix="mcp_" registers it as "mcp_echo"), or withdraw the other tool first'
        ) in message, message
    finally:
        conn.close()


def test_a_tool_named_run_code_is_listed_with_the_other_problems_and_the_fix(tmp_path: Path, rt: ToolRuntime) -> None:
    # Before, run_code was found only at registration, after the other
    # problems had been reported (here: only the schema's), and without
    # the fix.
    conn = ServerConnection("server_raw.py", tmp_path / "server.log", env={"BAD_LISTING": "run_code"}).start()
    try:
        assert conn.session is not None
        with pytest.raises(RegistrationError) as caught:
            conn.run(mount(rt, conn.session))
        assert caught.value.message.startswith(
            'cannot mount MCP server "raw-server": cannot register tool "run_code": "run_code" is reserved '
            "for the code-mode transport; give the tool another name: mount the server with a prefix "
            '(prefix="mcp_" registers it as "mcp_run_code"); cannot register tool "typo": parameters: '
        ), caught.value.message
        assert not {s["name"] for s in rt.tools.schemas()}
    finally:
        conn.close()


def test_a_blocking_execute_on_the_sessions_own_loop_fails_its_calls_at_once_naming_the_fix(
    raw: ServerConnection, rt: ToolRuntime
) -> None:
    # The natural mistake: the sync API from async code on the loop that
    # owns the session. Its call could never start there: it fails at once
    # (it hung), and the mount goes on serving once the loop runs again.
    batch = ToolBatchInput(calls=(ToolCall(id="c1", name="echo", arguments={"a": 1}),))

    async def blocking_on_the_loop() -> Any:
        return rt.tools.execute(batch).results[0].result

    async def asked_on_the_loop() -> Any:
        return rt.registry.ask(ExecuteBatch(batch)).results[0].result

    async def dispatched_on_the_loop() -> Any:
        execution = ToolExecutionInput(call_id="d1", name="echo", arguments={"a": 1}, signal=AbortSignal())
        return rt.tools.dispatch(execution)

    with mounted(rt, raw):
        for blocking in (blocking_on_the_loop, asked_on_the_loop, dispatched_on_the_loop):
            outcome = raw.run(blocking())
            assert outcome.is_error and outcome.error.info.code == "INVALID_USE"
            assert "its own thread waits in a blocking rt.tools.execute()" in outcome.error.message
            assert outcome.error.message.endswith("on that loop, use await rt.tools.execute_async()")

        async def awaited() -> Any:
            return await rt.tools.execute_async(batch)

        assert not raw.run(awaited()).results[0].result.is_error
        assert not run(rt, "echo", {"a": 1}).is_error
