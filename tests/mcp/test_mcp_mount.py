"""mount() against a real MCP server over stdio (tests/mcp/server_tools.py):
every mapping of a tool, its result and its cancellation."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from mcp_harness import ServerConnection

import policies.timeout
from dsh_actors import (
    AbortController,
    Agent,
    ImageBlock,
    TextBlock,
    ToolBatchInput,
    ToolCall,
    ToolOutput,
    ToolRuntime,
    define_tool,
    is_fault,
)
from dsh_actors.json import dumps, materialize, thaw
from dsh_actors.mcp import mount
from dsh_actors.mcp._mount import _progress_to, _registered_names
from dsh_actors.model import ToolBatchResult

PNG = "iVBORw0KGgo="
LONG_NAME = "a_tool_whose_name_is_longer_than_the_sixty_four_characters_models_accept"  # as in server_tools.py


@pytest.fixture(scope="module")
def conn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerConnection]:
    connection = ServerConnection("server_tools.py", tmp_path_factory.mktemp("mcp") / "server.log").start()
    try:
        yield connection
    finally:
        connection.close()


@pytest.fixture
def mounted(conn: ServerConnection, rt: ToolRuntime) -> Iterator[ToolRuntime]:
    assert conn.session is not None
    unmount = conn.run(mount(rt, conn.session, prefix="t_"))
    try:
        yield rt
    finally:
        unmount()


def run(rt: ToolRuntime, name: str, arguments: dict[str, Any] | None = None, **batch: Any) -> Any:
    result = rt.tools.execute(ToolBatchInput(calls=(ToolCall(id="c1", name=name, arguments=arguments or {}),), **batch))
    return result.results[0].result


def code(outcome: Any) -> str | None:
    assert outcome.is_error, outcome
    return None if outcome.error.info is None else outcome.error.info.code


def test_mount_registers_every_tool_under_the_prefix_with_the_servers_schemas(mounted: ToolRuntime) -> None:
    schemas = {s["name"]: s for s in mounted.tools.schemas()}
    assert {"t_add", "t_search", "t_text_kind", "t_chart", "t_fail", "t_slow"} <= set(schemas)
    add = schemas["t_add"]
    assert add["description"] == "Add x, inner.a and y."
    params = add["parameters"]
    assert params["properties"]["inner"] == {"$ref": "#/$defs/Inner"}
    assert params["$defs"]["Inner"]["properties"]["a"]["minimum"] == 0
    assert params["properties"]["y"]["anyOf"] == [{"type": "integer"}, {"type": "null"}]
    definition = mounted.tools.get("t_add")
    assert definition is not None and definition.schema_mode == "full"
    assert definition.meta is not None and definition.meta["mcp"]["tool"]["name"] == "add"


def test_names_the_model_apis_refuse_are_offered_mapped_and_called_with_the_servers_name(
    mounted: ToolRuntime,
) -> None:
    names = {s["name"] for s in mounted.tools.schemas()}
    assert all(re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", name) for name in names), names
    originals = {}
    for name in names:
        definition = mounted.tools.get(name)
        assert definition is not None and definition.meta is not None
        originals[definition.meta["mcp"]["tool"]["name"]] = name
    # "t_notes_read" is a fitting name of its own, so "notes.read" takes the hashed form.
    assert originals["notes_read"] == "t_notes_read"
    dotted = originals["notes.read"]
    assert re.fullmatch(r"t_notes_read_[0-9a-f]{8}", dotted)
    assert originals["caf\u00e9 menu"] == "t_caf__menu"
    long = originals[LONG_NAME]
    assert len(long) == 64 and long.startswith("t_a_tool_whose_name") and re.search(r"_[0-9a-f]{8}$", long)
    assert run(mounted, dotted, {"topic": "x"}).value[0]["text"] == "notes.read on x"
    assert run(mounted, "t_notes_read", {"topic": "y"}).value[0]["text"] == "notes_read on y"
    assert run(mounted, "t_caf__menu").value[0]["text"] == "cafe menu"
    assert run(mounted, long).value[0]["text"] == "long"


def test_the_mapped_names_are_stable_across_mounts(conn: ServerConnection, rt: ToolRuntime) -> None:
    assert conn.session is not None
    first = conn.run(mount(rt, conn.session, prefix="t_"))
    before = {s["name"] for s in rt.tools.schemas()}
    first()
    second = conn.run(mount(rt, conn.session, prefix="t_"))
    try:
        assert {s["name"] for s in rt.tools.schemas()} == before
    finally:
        second()


def test_a_dotted_name_alone_maps_to_underscores() -> None:
    assert _registered_names("fs.", ["notes.read", "ok"]) == {"notes.read": "fs_notes_read", "ok": "fs_ok"}


def test_structured_content_is_the_value_and_the_servers_blocks_the_content(mounted: ToolRuntime) -> None:
    outcome = run(mounted, "t_add", {"x": 1, "inner": {"a": 2}, "y": 4})
    assert not outcome.is_error, outcome
    assert thaw(outcome.value) == {"total": 7, "note": "with y"}
    assert len(outcome.content) == 1 and '"total": 7' in outcome.content[0].text

    chart = run(mounted, "t_chart", {"points": 2})
    assert thaw(chart.value) == {"total": 2, "note": "chart"}
    assert chart.content == (TextBlock("2 points"), ImageBlock(data=PNG, mime_type="image/png"))


def test_pydantic_schemas_are_enforced_before_the_call_reaches_the_server(mounted: ToolRuntime) -> None:
    outcome = run(mounted, "t_add", {"x": "one", "inner": {"a": -1}, "y": "s", "z": 1})
    assert code(outcome) == "INVALID_ARGS"
    assert outcome.error.message == (
        'invalid arguments: "value.x" must be an integer; "value.inner.a" must be >= 0; '
        '"value.y" must be an integer or null'
    )
    missing = run(mounted, "t_add", {"x": 1})
    assert missing.error.message == 'invalid arguments: missing required property "value.inner"'
    search = run(mounted, "t_search", {"query": "", "limit": 99, "filters": {"tags": ["a", "b", "c", "d"]}})
    assert code(search) == "INVALID_ARGS"
    assert '"value.query" must be at least 1 character long' in search.error.message
    assert '"value.limit" must be <= 50' in search.error.message
    assert '"value.filters.tags" must have at most 3 items' in search.error.message
    ok = run(mounted, "t_search", {"query": "q", "limit": None, "filters": {"tags": ["a"], "inner": {"a": 0}}})
    assert not ok.is_error, ok
    assert thaw(ok.value) == {"result": "q:None:['a']"}


def test_the_models_bad_arguments_are_an_outcome_not_logged_under_a_tools_execute_wrapper(
    mounted: ToolRuntime, log_records: Any
) -> None:
    # (The body runs on the session's loop and, under a wrapper, its
    # exception comes back through a concurrent.futures.Future, whose frames
    # is_fault counted as the application's: the model's bad arguments were
    # logged at ERROR with a traceback, as a fault.)
    errors = log_records("WARNING")
    mounted.events.on("tools/execute", lambda execution, next_: next_())
    outcome = run(mounted, "t_add", {"x": "one", "inner": {"a": 1}})
    assert code(outcome) == "INVALID_ARGS"
    assert outcome.error.message == 'invalid arguments: "value.x" must be an integer'
    assert not is_fault(outcome.error.exception)
    assert errors.items == []


def test_text_and_image_blocks_map_to_their_own_blocks(mounted: ToolRuntime) -> None:
    text = run(mounted, "t_text_kind")
    assert text.content == (TextBlock("first"), TextBlock("second"))
    assert thaw(text.value) == [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}]
    image = run(mounted, "t_image_kind")
    assert image.content == (ImageBlock(data=PNG, mime_type="image/png"),)


def test_an_unstructured_results_blocks_are_converted_once_and_a_policys_value_is_rendered(
    mounted: ToolRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before, the body converted the blocks (checking every image's base64)
    # and render converted the same blocks again: twice the cost of an image.
    from dsh_actors import Accept
    from dsh_actors.mcp import _mount

    converted: list[int] = []
    convert = _mount.blocks_from_wire

    def counting(content: Any) -> Any:
        converted.append(len(content))
        return convert(content)

    monkeypatch.setattr(_mount, "blocks_from_wire", counting)
    image = run(mounted, "t_image_kind")
    assert image.content == (ImageBlock(data=PNG, mime_type="image/png"),)
    assert converted == [1]
    # A value a post-execute policy puts in is rendered from that value.
    swapped = [{"type": "text", "text": "swapped"}]
    mounted.events.on("tools/post-execute", lambda execution, result, next_: Accept(value=swapped))
    assert run(mounted, "t_text_kind").content == (TextBlock("swapped"),)
    assert converted == [1, 2, 1]


def test_audio_resources_and_links_map_to_a_block_or_a_text_rendering(mounted: ToolRuntime) -> None:
    assert run(mounted, "t_audio_kind").content == (TextBlock("[audio audio/wav, 12 bytes]"),)
    assert run(mounted, "t_resource_kind").content == (
        TextBlock("[resource file:///notes.txt (text/plain)]\nthe notes"),
        ImageBlock(data=PNG, mime_type="image/png"),
        TextBlock("[resource file:///data.bin (application/octet-stream), 12 bytes]"),
    )
    assert run(mounted, "t_link_kind").content == (
        TextBlock("[resource link report: file:///report.pdf (application/pdf)]\nthe quarterly report"),
    )


def test_an_image_whose_data_is_not_base64_fails_its_call_as_the_servers_protocol_error(mounted: ToolRuntime) -> None:
    unstructured = run(mounted, "t_bad_image_kind")
    assert code(unstructured) == "MCP_PROTOCOL_ERROR"
    assert unstructured.error.message == (
        'MCP protocol error calling "t_bad_image_kind": the server\'s result is not valid: content.1: ImageBlock data '
        'is a data URL, not base64 text: strip its "data:<type>;base64," prefix (the type goes in mime_type)'
    )
    structured = run(mounted, "t_bad_image_chart")  # (an image for the user only)
    assert code(structured) == "MCP_PROTOCOL_ERROR"
    assert "content.1: ImageBlock data is not base64 text" in structured.error.message
    # A failure keeps the server's text; the image has none.
    failed = run(mounted, "t_bad_image_error")
    assert code(failed) == "MCP_TOOL_ERROR" and failed.error.message == "the camera is off"
    assert not run(mounted, "t_image_kind").is_error  # and the session goes on


def test_an_image_whose_mime_type_is_not_an_image_type_fails_its_call_as_the_servers_protocol_error(
    mounted: ToolRuntime,
) -> None:
    """(It used to reach the model as a note that an image of type png was
    left out.)"""
    outcome = run(mounted, "t_bad_image_type")
    assert code(outcome) == "MCP_PROTOCOL_ERROR"
    assert outcome.error.message == (
        'MCP protocol error calling "t_bad_image_type": the server\'s result is not valid: content.1: ImageBlock '
        "mime_type 'png' is not an image media type: give 'image/png'"
    )
    assert not run(mounted, "t_image_kind").is_error  # and the session goes on


def test_is_error_is_a_failure_with_the_servers_text(mounted: ToolRuntime) -> None:
    outcome = run(mounted, "t_fail", {"reason": "the disk is full"})
    assert code(outcome) == "MCP_TOOL_ERROR"
    assert outcome.error.message == "Error executing tool fail: the disk is full"
    assert outcome.content == (TextBlock("Error: Error executing tool fail: the disk is full"),)


def test_a_protocol_error_is_a_failure_with_a_clear_code(mounted: ToolRuntime) -> None:
    outcome = run(mounted, "t_protocol_error")
    assert code(outcome) == "MCP_PROTOCOL_ERROR"
    assert outcome.error.message == 'MCP protocol error -32602 calling "protocol_error": this request is not acceptable'


def test_read_only_tools_are_concurrency_safe_and_everything_else_exclusive(mounted: ToolRuntime) -> None:
    def classifier(name: str) -> Any:
        definition = mounted.tools.get(name)
        assert definition is not None
        return definition.is_concurrency_safe

    assert classifier("t_add")({"x": 1, "inner": {"a": 1}}) is True
    assert classifier("t_add")({"x": "bad"}) is False  # invalid arguments: exclusive
    assert classifier("t_search")({"query": "q"}) is True
    assert classifier("t_read_but_destructive") is None
    assert classifier("t_fail") is None


def test_read_only_and_idempotent_hinted_tools_are_idempotent(mounted: ToolRuntime) -> None:
    def idempotent(name: str) -> bool:
        definition = mounted.tools.get(name)
        assert definition is not None
        return definition.idempotent

    assert idempotent("t_add") and idempotent("t_read_but_destructive")  # readOnlyHint
    assert idempotent("t_fail")  # idempotentHint
    assert not idempotent("t_protocol_error") and not idempotent("t_slow")
    assert "idempotent" not in dumps(mounted.tools.schemas()).decode()


def test_the_title_names_the_call_card(mounted: ToolRuntime) -> None:
    def title(name: str, args: dict[str, Any]) -> str:
        definition = mounted.tools.get(name)
        assert definition is not None and definition.present_call is not None
        view = definition.present_call(args)
        assert view is not None
        return view.title  # type: ignore[attr-defined, no-any-return]

    assert title("t_add", {"x": 1, "inner": {"a": 1}}) == "Adder"
    assert title("t_search", {"query": "q"}) == "Search things"  # annotations.title
    assert title("t_fail", {"reason": "r"}) == "t_fail"


def abort_once_started(conn: ServerConnection, rt: ToolRuntime, tag: str, **batch: Any) -> Any:
    """Run slow(tag) in a batch, abort it once the server runs it, and return
    the call's outcome."""
    controller = AbortController()
    results: list[ToolBatchResult] = []
    worker = threading.Thread(
        target=lambda: results.append(
            rt.tools.execute(
                ToolBatchInput(
                    calls=(ToolCall(id="s", name="t_slow", arguments={"tag": tag}),), signal=controller.signal, **batch
                )
            )
        )
    )
    worker.start()
    assert conn.call_directly("wait_started", {"tag": tag}).structured_content == {"result": True}
    controller.abort()
    worker.join(20)
    assert not worker.is_alive()
    return results[0].results[0].result


def test_an_aborted_call_is_cancelled_on_the_server_and_settles_aborted(
    conn: ServerConnection, mounted: ToolRuntime
) -> None:
    outcome = abort_once_started(conn, mounted, "aborted-1")
    assert code(outcome) == "ABORTED"
    seen = conn.call_directly("cancellations", {"tag": "aborted-1"}).structured_content
    assert "aborted-1" in seen["result"]


def test_a_timeout_cancels_the_request_on_the_server(conn: ServerConnection, rt: ToolRuntime) -> None:
    assert conn.session is not None
    rt.use(policies.timeout)
    unmount = conn.run(mount(rt, conn.session, prefix="slow_", timeout_ms=1000))
    try:
        definition = rt.tools.get("slow_slow")
        assert definition is not None and definition.timeout_ms == 1000
        future = rt.tools.submit(
            ToolBatchInput(calls=(ToolCall(id="c1", name="slow_slow", arguments={"tag": "timed-out"}),))
        )
        # the body must be running on the server when the bound fires: a
        # cancellation that overtakes a handler's start is dropped by the SDK
        assert conn.call_directly("wait_started", {"tag": "timed-out"}).structured_content["result"] is True
        outcome = future.result(20).results[0].result
        assert code(outcome) == "TOOL_TIMEOUT"
        seen = conn.call_directly("cancellations", {"tag": "timed-out"}).structured_content
        assert "timed-out" in seen["result"]
    finally:
        unmount()


def test_batches_awaited_on_the_sessions_loop_run_without_blocking_it(
    conn: ServerConnection, mounted: ToolRuntime
) -> None:
    batch = ToolBatchInput(
        calls=tuple(ToolCall(id=f"c{i}", name="t_add", arguments={"x": i, "inner": {"a": 1}}) for i in range(5))
    )
    result = conn.run(mounted.tools.execute_async(batch))
    assert [thaw(r.result.value)["total"] for r in result.results] == [1, 2, 3, 4, 5]


def test_mounting_into_an_agents_scope_and_unmounting(conn: ServerConnection, rt: ToolRuntime) -> None:
    assert conn.session is not None
    agent = Agent("worker")
    handler = conn.session._message_handler
    unmount = conn.run(mount(rt, conn.session, agent=agent))
    assert rt.tools.get("add") is None
    assert rt.tools.scope(agent).get("add") is not None
    assert conn.session._message_handler is not handler
    outcome = (
        rt.tools.execute(
            ToolBatchInput(calls=(ToolCall(id="c", name="add", arguments={"x": 1, "inner": {"a": 1}}),), agent=agent)
        )
        .results[0]
        .result
    )
    assert thaw(outcome.value)["total"] == 2
    unmount()
    unmount()  # idempotent
    assert rt.tools.scope(agent).get("add") is None
    assert conn.session._message_handler is handler


def test_unmounting_from_a_tools_change_listener_withdraws_every_tool(conn: ServerConnection, rt: ToolRuntime) -> None:
    # A tools/change listener runs on the registry's thread, where a change
    # cannot be waited for: the mount's disposers are queued, and run once
    # the change that called the listener is done.
    assert conn.session is not None
    unmount = conn.run(mount(rt, conn.session))
    assert len(rt.tools.definitions()) > 1
    unmounted = threading.Event()

    def on_change() -> None:
        if not unmounted.is_set():
            unmounted.set()
            unmount()

    off = rt.events.on("tools/change", on_change)
    try:
        rt.tools.register(
            define_tool(
                name="marker",
                description="m",
                parameters={},
                output=ToolOutput(schema={"type": "string"}),
                execute=lambda args, ctx: "m",
            )
        )
    finally:
        off()
    assert unmounted.is_set()
    # (A write after the queued disposers: the registry has run them by its reply.)
    rt.tools.register(
        define_tool(
            name="after",
            description="a",
            parameters={},
            output=ToolOutput(schema={"type": "string"}),
            execute=lambda args, ctx: "a",
        )
    )
    assert sorted(d.name for d in rt.tools.definitions()) == ["after", "marker"]


def test_the_same_server_mounted_twice_under_one_name_is_refused_whole(
    conn: ServerConnection, mounted: ToolRuntime
) -> None:
    assert conn.session is not None
    from dsh_actors.errors import RegistrationError

    with pytest.raises(RegistrationError, match="t_add"):
        conn.run(mount(mounted, conn.session, prefix="t_"))
    assert mounted.tools.get("t_add") is not None  # the first mount is untouched


class _Token:
    """An execution token stand-in (weak-referenceable, like the real one)."""


class _Context:
    """What a mounted tool's body reads from its ToolRunContext."""

    def __init__(self, controller: AbortController) -> None:
        self.signal = controller.signal
        self.token = _Token()
        self.call_id = "direct"


def test_a_body_running_on_the_sessions_loop_awaits_the_sdk_there(conn: ServerConnection, mounted: ToolRuntime) -> None:
    # Today bodies run on the runtime's loop thread; an application loop
    # that runs them (the async-native runtime) takes this direct path.
    add = mounted.tools.get("t_add")
    slow = mounted.tools.get("t_slow")
    assert add is not None and slow is not None and conn.session is not None
    session = conn.session
    value = conn.run(add.execute(materialize({"x": 1, "inner": {"a": 2}}), _Context(AbortController())))
    assert thaw(value) == {"total": 3, "note": None}

    controller = AbortController()

    async def abort_once_started() -> None:
        task = asyncio.ensure_future(slow.execute(materialize({"tag": "direct"}), _Context(controller)))
        assert (await session.call_tool("wait_started", {"tag": "direct"})).structured_content == {"result": True}
        controller.abort()
        with pytest.raises(asyncio.CancelledError):
            await task

    conn.run(abort_once_started())
    assert "direct" in conn.call_directly("cancellations", {"tag": "direct"}).structured_content["result"]


@pytest.mark.usefixtures("library_logs")
def test_a_call_the_blocked_session_loop_cannot_start_is_logged_then_runs(
    conn: ServerConnection, mounted: ToolRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loguru import logger

    from dsh_actors.pipeline.flights import LoopWatch

    monkeypatch.setattr(LoopWatch, "BLOCK_WARNING", 0.05)
    warned = threading.Event()
    sink = logger.add(
        lambda m: (
            warned.set() if 'async tool "t_add"' in str(m) and "for its event loop to start it" in str(m) else None
        ),
        level="WARNING",
    )
    gate = threading.Event()
    conn.loop.call_soon_threadsafe(gate.wait, 20)  # the session's loop is blocked until the gate opens
    try:
        future = mounted.tools.submit(
            ToolBatchInput(calls=(ToolCall(id="c", name="t_add", arguments={"x": 1, "inner": {"a": 1}}),))
        )
        assert warned.wait(20)
        assert not future.done()
    finally:
        gate.set()
        logger.remove(sink)
    outcome = future.result(20).results[0].result
    assert thaw(outcome.value)["total"] == 2


def test_an_aborted_call_awaited_on_the_sessions_loop_is_cancelled_on_the_server(
    conn: ServerConnection, mounted: ToolRuntime
) -> None:
    """The cancellation matrix's MCP row on the application's loop: the
    batch is awaited on the session's own loop, its body runs there as a
    flight, and the abort cancels the request on the server."""
    controller = AbortController()
    batch = ToolBatchInput(
        calls=(ToolCall(id="s", name="t_slow", arguments={"tag": "aborted-on-loop"}),), signal=controller.signal
    )
    future = asyncio.run_coroutine_threadsafe(mounted.tools.execute_async(batch), conn.loop)
    assert conn.call_directly("wait_started", {"tag": "aborted-on-loop"}).structured_content == {"result": True}
    controller.abort()
    outcome = future.result(20).results[0].result
    assert code(outcome) == "ABORTED"
    seen = conn.call_directly("cancellations", {"tag": "aborted-on-loop"}).structured_content
    assert "aborted-on-loop" in seen["result"]


def test_server_progress_notifications_become_tools_progress_events_before_the_result(mounted: ToolRuntime) -> None:
    journal: list[Any] = []
    lock = threading.Lock()

    def on_progress(execution: Any, progress: Any) -> None:
        with lock:
            journal.append((execution.call_id, progress.progress, progress.total, progress.message))

    def on_result(execution: Any, result: Any) -> None:
        with lock:
            journal.append((execution.call_id, "result"))

    mounted.events.on("tools/progress", on_progress)
    mounted.events.on("tools/result", on_result)
    outcome = run(mounted, "t_progressing", {"steps": 3})
    assert not outcome.is_error, outcome
    assert journal == [
        ("c1", 1.0, 3.0, "step 1"),
        ("c1", 2.0, 3.0, "step 2"),
        ("c1", 3.0, 3.0, "step 3"),
        ("c1", "result"),
    ]


def test_a_progress_notification_after_the_body_returned_is_dropped(rt: ToolRuntime) -> None:
    # A server may notify after its tools/call answered: the call has
    # settled (ctx.report_progress raises there), and the notification is dropped.
    kept: list[Any] = []
    seen: list[Any] = []
    rt.tools.register(
        define_tool(
            name="keeper",
            description="Keeps its context.",
            parameters={},
            output=ToolOutput(schema={"type": "string"}),
            execute=lambda args, ctx: kept.append(ctx) or "done",
        )
    )
    rt.events.on("tools/progress", lambda execution, progress: seen.append(progress))
    assert not run(rt, "keeper").is_error
    asyncio.run(_progress_to(kept[0])(1.0, 2.0, "late"))  # raises nothing
    assert seen == []


def test_a_tools_call_carries_a_progress_token(mounted: ToolRuntime) -> None:
    outcome = run(mounted, "t_request_meta")
    assert not outcome.is_error, outcome
    [block] = outcome.content
    assert "progressToken" in json.loads(block.text)


def test_a_tools_call_carries_the_call_spans_trace_context(mounted: ToolRuntime) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import policies.otel

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        mounted.use(policies.otel, tracer_provider=provider)
        outcome = run(mounted, "t_request_meta")
        [span] = [s for s in exporter.get_finished_spans() if s.name == "execute_tool t_request_meta"]
    finally:
        provider.shutdown()
    [block] = outcome.content
    traceparent = json.loads(block.text)["traceparent"]
    context = span.context
    assert traceparent == f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def test_content_for_the_user_only_reaches_the_log_and_the_cards_not_the_model(mounted: ToolRuntime) -> None:
    from dsh_actors import LogStep, Session
    from dsh_actors.presentation import ToolResultProjection

    agent = Agent("a", session=Session())
    outcome = run(mounted, "t_audience_kind", agent=agent, log=LogStep(turn=1, step=1))
    model = (TextBlock("for both"), TextBlock("for the assistant"), TextBlock("for either"))
    assert outcome.content == model
    assert [b["text"] for b in thaw(outcome.value)] == ["for both", "for the assistant", "for either"]
    user = [{"type": "text", "text": "for the user", "annotations": {"audience": ["user"]}}]
    assert thaw(outcome.meta) == {"mcp": {"user_content": user}}
    logged = [e for e in agent.session.events() if e["type"] == "tool/result"][-1]
    assert logged["meta"] == {"mcp": {"user_content": user}}
    assert all("for the user" not in block.get("text", "") for block in logged["content"])
    definition = mounted.tools.get("t_audience_kind")
    assert definition is not None and definition.present_result is not None
    replayed = ToolResultProjection(content=outcome.content, is_error=False, meta=logged["meta"])
    card = definition.present_result({}, replayed)
    assert card is not None and card.content == (*model, TextBlock("for the user"))

    structured = run(mounted, "t_audience_structured")
    assert thaw(structured.value) == {"total": 3, "note": None}
    assert structured.content == (TextBlock("3 in all"),)
    assert thaw(structured.meta)["mcp"]["user_content"][0]["text"] == "the user sees this"
    assert run(mounted, "t_text_kind").meta is None  # nothing for the user only


def test_a_programs_sub_call_logs_the_content_for_the_user_only_as_a_direct_call_does(mounted: ToolRuntime) -> None:
    # Before, the sub-call's project_content dropped the blocks before the
    # log's copy asked presentation_meta for them: its meta was null.
    from dsh_actors import LogStep, Session
    from executors.ptc import PtcExecutor

    agent = Agent("a", session=Session())
    run(mounted, "t_audience_kind", agent=agent, log=LogStep(turn=1, step=1))
    [direct] = [e for e in agent.session.events() if e["type"] == "tool/result"]
    executor = PtcExecutor(timeout_ms=20_000)
    mounted.tools.set_executor(executor)
    program = {"code": "blocks = await tools.t_audience_kind()\nreturn len(blocks)"}
    batch = ToolBatchInput(
        calls=(ToolCall(id="p1", name="run_code", arguments=program),), agent=agent, log=LogStep(turn=1, step=2)
    )
    try:
        outcome = mounted.tools.execute(batch).results[0].result
    finally:
        mounted.stop()
    assert not outcome.is_error and thaw(outcome.value)["result"] == 3, outcome
    assert executor.worker_pids() == []
    [dispatch] = [e for e in agent.session.events() if e["type"] == "tool/ptc-dispatch"]
    user = [{"type": "text", "text": "for the user", "annotations": {"audience": ["user"]}}]
    assert direct["meta"] == dispatch["meta"] == {"mcp": {"user_content": user}}
    assert dispatch["content"] == direct["content"]


def test_a_text_blob_resource_is_decoded_in_its_charset(mounted: ToolRuntime) -> None:
    assert run(mounted, "t_text_blob_kind").content == (
        TextBlock("[resource file:///a.txt (text/plain)]\nhéllo\nworld"),
        TextBlock("[resource file:///b.csv (text/csv; charset=latin-1)]\na;é"),
        TextBlock("[resource file:///c.txt (text/plain), 3 bytes]"),  # not UTF-8: noted by size
    )
