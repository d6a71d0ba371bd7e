"""dsh_actors.acp as a demanding editor hits it: answers that are no
JSON-RPC responses, error objects that are not JSON-RPC errors, a runtime
that stops (or a registry that changes) while a call runs, and a
connection whose event loop ended without detaching its session."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("acp", reason="the acp extra is part of the test extra")
sys.path.insert(0, str(Path(__file__).parent))

from acp import PROTOCOL_VERSION, RequestError, connect_to_agent, text_block
from acp.client.connection import ClientSideConnection
from harness import BOUND, RecordingClient, call

from dsh_actors import (
    Agent,
    Ask,
    GenericCallView,
    GenericResultView,
    ToolBatchInput,
    ToolCall,
    ToolOutput,
    ToolRuntime,
    define_tool,
    text,
)
from dsh_actors.acp import _stdio, attach, message_problem, serve
from examples.acp_agent import ScriptedAgent


class Holding(RecordingClient):
    """Records a permission request and never answers it itself: the test
    answers with a raw line."""

    async def request_permission(self, options: list[Any], session_id: str, tool_call: Any, **kwargs: Any) -> Any:
        self.permissions.append((tool_call, options))
        await self._note()
        await asyncio.Event().wait()


@dataclass
class Wired:
    conn: ClientSideConnection
    client: RecordingClient
    session_id: str
    raw: asyncio.StreamWriter
    agent: ScriptedAgent

    async def answer_permission_with(self, line: bytes) -> None:
        """Answer the open permission request with ``line`` % its id, as it is."""
        await self.client.wait_for(lambda: len(self.client.permissions) == 1)
        asked = [m for m in self.client.incoming if m.get("method") == "session/request_permission"][-1]
        self.raw.write(line % asked["id"])
        await self.raw.drain()


@asynccontextmanager
async def wired(rt: ToolRuntime, root: Path, client: RecordingClient) -> AsyncIterator[Wired]:
    """The example's agent served over a socket pair, the SDK's client on
    the other end (recording what it receives), its writer at hand."""
    agent = ScriptedAgent(rt)
    near, far = socket.socketpair()
    agent_reader, agent_writer = await asyncio.open_connection(sock=near)
    client_reader, client_writer = await asyncio.open_connection(sock=far)
    server = asyncio.get_running_loop().create_task(serve(agent, agent_reader, agent_writer))
    conn = connect_to_agent(client, client_writer, client_reader, observers=[client.observe])
    try:
        await asyncio.wait_for(conn.initialize(protocol_version=PROTOCOL_VERSION), BOUND)
        session = await asyncio.wait_for(conn.new_session(cwd=str(root), mcp_servers=[]), BOUND)
        yield Wired(conn, client, session.session_id, client_writer, agent)
    finally:
        await conn.close()
        client_writer.close()
        await asyncio.wait_for(server, BOUND)
        await agent.aclose()
        for undo in agent.undo:
            undo()


async def write_answered_with(running: Any, answer: bytes) -> Any:
    """Prompt a ``write_file`` call, answer its permission request with the
    raw line ``answer`` (``%d``: the request's id) and return the turn's
    response (cancelling the turn if it did not end)."""
    turn = asyncio.ensure_future(
        running.conn.prompt(
            session_id=running.session_id,
            prompt=[text_block(call("write_file", path="a.txt", content="1\n"))],
        )
    )
    try:
        await running.answer_permission_with(answer)
        return await asyncio.wait_for(asyncio.shield(turn), BOUND)
    finally:
        if not turn.done():
            await running.conn.cancel(session_id=running.session_id)
            await asyncio.wait_for(turn, BOUND)


def test_a_response_with_an_id_but_no_result_or_error_fails_the_request_it_answers_unanswered(
    rt: ToolRuntime, tmp_path: Path
) -> None:
    # {"jsonrpc": "2.0", "id": N} can only be a response (it has no method):
    # not answered (an error with the id N could fail the client's own
    # request N), and the permission request it answers fails at once.
    async def scenario() -> None:
        client = Holding()
        async with wired(rt, tmp_path, client) as running:
            response = await write_answered_with(running, b'{"jsonrpc": "2.0", "id": %d}\n')
            assert response.stop_reason == "end_turn"
            error = client.tool_updates("call_1_1")[-1]["rawOutput"]["error"]
            assert error["message"] == (
                "approval: the ACP client answered the permission request with an error: "
                "a response has a result or an error"
            )
            assert [m for m in client.incoming if "error" in m] == []  # not answered
            assert not (tmp_path / "a.txt").exists()

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "error",
    [b'{"code": 1, "message": {"a": [1]}}', b'{"code": "-32601", "message": "nf"}', b"{}"],
)
def test_an_error_without_an_integer_code_and_a_string_message_fails_the_approval_saying_so(
    rt: ToolRuntime, tmp_path: Path, error: bytes
) -> None:
    # (A message that is an object showed as Python's repr: "{'a': [1]}".)
    async def scenario() -> None:
        client = Holding()
        async with wired(rt, tmp_path, client) as running:
            response = await write_answered_with(running, b'{"jsonrpc": "2.0", "id": %d, "error": ' + error + b"}\n")
            assert response.stop_reason == "end_turn"
            failure = client.tool_updates("call_1_1")[-1]["rawOutput"]["error"]
            assert failure["info"]["code"] == "POLICY_FAILED"
            assert failure["message"] == (
                "approval: the ACP client answered the permission request with an error: "
                "a response's error has an integer code and a string message"
            )

    asyncio.run(scenario())


def test_a_malformed_response_s_id_is_logged_printable_and_cut(
    rt: ToolRuntime, tmp_path: Path, log_records: Callable[[str], Any]
) -> None:
    # The warning showed the peer's id as it was: its escape sequences
    # reached the terminal of whoever reads the agent's stderr, whole.
    records = log_records("WARNING")

    async def scenario() -> None:
        async with wired(rt, tmp_path, RecordingClient()) as running:
            ident = "\x1b]0;owned\x07" + "i" * 300  # (10 characters, then 300)
            running.raw.write(json.dumps({"jsonrpc": "2.0", "id": ident, "error": "nope"}).encode() + b"\n")
            # The next request is read after it: its answer means the line was logged.
            await asyncio.wait_for(running.conn.initialize(protocol_version=PROTOCOL_VERSION), BOUND)

    asyncio.run(scenario())
    logged = [r["message"] for r in records.items if "malformed response" in r["message"]]
    assert logged == [
        "ACP: ignored a malformed response (id \\x1b]0;owned\\x07"
        + "i" * 190
        + "...): a response's error must be an object"
    ]


def test_message_problem_requires_a_responses_error_to_be_a_json_rpc_error() -> None:
    problem = "a response's error has an integer code and a string message"
    assert message_problem({"jsonrpc": "2.0", "id": 1, "error": {"code": 1, "message": {}}}) == problem
    assert message_problem({"jsonrpc": "2.0", "id": 1, "error": {"code": True, "message": "x"}}) == problem
    assert message_problem({"jsonrpc": "2.0", "id": 1, "error": {"message": "x"}}) == problem
    assert message_problem({"jsonrpc": "2.0", "id": 1, "error": {"code": -1, "message": "x", "data": [1]}}) is None


def test_a_line_longer_than_the_limit_is_skipped_and_answered_naming_it_and_the_agent_reads_on(
    rt: ToolRuntime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The transport read a line of any length into memory (a peer that never
    # sent a newline grew the agent without bound). Now a line over the
    # limit is read to its end and dropped, and answered -32600 naming the
    # limit (with the request's id); a line of exactly the limit is read (here 100,000 bytes: longer
    # than the socket reader's own 64 KiB limit, so both are read in parts).
    monkeypatch.setattr(_stdio, "STREAM_LIMIT", 100_000)

    def initialize(ident: str, size: int) -> bytes:
        head = json.dumps({"jsonrpc": "2.0", "id": ident, "method": "initialize", "params": {"protocolVersion": 1}})
        return head[:-1].encode() + b" " * (size - len(head)) + b"}\n"  # (spaces inside the object)

    async def scenario() -> None:
        async with wired(rt, tmp_path, RecordingClient()) as running:
            client = running.client
            running.raw.write(initialize("too long", 100_001) + initialize("fits", 100_000))
            await running.raw.drain()
            await client.wait_for(lambda: any(m.get("id") == "fits" for m in client.incoming))
            answered = [m for m in client.incoming if "id" in m and m["id"] in (None, "too long", "fits")]
            assert [(m.get("id"), "result" in m) for m in answered] == [("too long", False), ("fits", True)]
            assert answered[0]["error"] == {
                "code": -32600,
                "message": "Invalid Request",
                "data": {
                    "details": "a message line longer than the limit of 100,000 bytes was skipped unread: "
                    "send each message on one line of at most 100,000 bytes"
                },
            }

    asyncio.run(scenario())


class Updates:
    """An ACP client for an in-process attach: records the tool updates."""

    def __init__(self) -> None:
        self.updates: list[dict[str, Any]] = []

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update.model_dump(mode="json", by_alias=True, exclude_none=True))

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("no permission is asked")


def _carded(started: threading.Event, stop_waiting: threading.Event | None = None) -> Any:
    """A tool with its own cards whose body returns once its signal aborts
    (or ``stop_waiting`` is set)."""

    def body(args: Any, ctx: Any) -> str:
        started.set()
        if stop_waiting is None:
            assert ctx.signal.wait(BOUND), "the runtime to stop"
        else:
            assert stop_waiting.wait(BOUND), "the test to release the call"
        return "value"

    return define_tool(
        name="carded",
        description="A tool with cards.",
        parameters={},
        output=ToolOutput(schema={"type": "string"}),
        execute=body,
        present_call=lambda args: GenericCallView(title="the call card"),
        present_result=lambda args, result: GenericResultView(title="the result card", content=(text("shown"),)),
    )


def test_a_call_that_ends_while_the_runtime_stops_ends_with_its_own_result_card() -> None:
    # (The registry no longer answers once stop began: the generic card was shown.)
    started = threading.Event()

    async def scenario(rt: ToolRuntime) -> None:
        agent = Agent("a")
        rt.tools.scope(agent).register(_carded(started))
        client = Updates()
        session = attach(rt, client, "s1", agent=agent)  # type: ignore[arg-type]
        async with session, session.turn() as turn:
            batch = asyncio.ensure_future(
                rt.tools.execute_async(
                    ToolBatchInput(calls=[ToolCall(id="c1", name="carded")], agent=agent, signal=turn.signal)
                )
            )
            assert await asyncio.to_thread(started.wait, BOUND)
            await asyncio.to_thread(rt.stop)
            await asyncio.wait_for(batch, BOUND)
        end = client.updates[-1]
        assert (end["toolCallId"], end["status"]) == ("c1", "failed")
        assert end.get("title") == "the result card"
        assert end["content"] == [{"type": "content", "content": {"type": "text", "text": "shown"}}]

    with ToolRuntime() as rt:
        asyncio.run(scenario(rt))


def test_a_call_whose_tool_is_unregistered_while_it_runs_ends_with_its_own_result_card(rt: ToolRuntime) -> None:
    started, release = threading.Event(), threading.Event()

    async def scenario() -> None:
        agent = Agent("a")
        unregister = rt.tools.scope(agent).register(_carded(started, release))
        client = Updates()
        async with attach(rt, client, "s1", agent=agent) as session, session.turn() as turn:  # type: ignore[arg-type]
            batch = asyncio.ensure_future(
                rt.tools.execute_async(
                    ToolBatchInput(calls=[ToolCall(id="c1", name="carded")], agent=agent, signal=turn.signal)
                )
            )
            assert await asyncio.to_thread(started.wait, BOUND)
            unregister()
            release.set()
            result = (await asyncio.wait_for(batch, BOUND)).results[0].result
            assert result.value == "value"
        end = client.updates[-1]
        assert (end["toolCallId"], end["status"], end.get("title")) == ("c1", "completed", "the result card")

    try:
        asyncio.run(scenario())
    finally:
        release.set()


def test_a_card_still_running_when_a_turn_ends_cancelled_ends_with_it_and_its_late_end_is_not_shown(
    rt: ToolRuntime,
) -> None:
    # The prompt's handler fails while its batch still runs a body that
    # ignores its signal: the turn ends cancelled, and so does the card.
    started, release = threading.Event(), threading.Event()

    async def scenario() -> None:
        agent = Agent("a")
        rt.tools.scope(agent).register(_carded(started, release))
        client = Updates()
        async with attach(rt, client, "s1", agent=agent) as session:  # type: ignore[arg-type]
            with pytest.raises(LookupError, match="the model failed"):
                async with session.turn() as turn:
                    batch = asyncio.ensure_future(
                        rt.tools.execute_async(
                            ToolBatchInput(calls=[ToolCall(id="c1", name="carded")], agent=agent, signal=turn.signal)
                        )
                    )
                    assert await asyncio.to_thread(started.wait, BOUND)
                    raise LookupError("the model failed")
            end = client.updates[-1]
            assert (end["toolCallId"], end["status"]) == ("c1", "failed")
            stopped = "stopped: the prompt turn was cancelled before the call ended"
            assert end["content"] == [{"type": "content", "content": {"type": "text", "text": stopped}}]
            release.set()
            error = (await asyncio.wait_for(batch, BOUND)).results[0].result.error
            assert error is not None and error.info is not None and error.info.code == "ABORTED"
            await session.flush()
            assert client.updates[-1] == end

    try:
        asyncio.run(scenario())
    finally:
        release.set()


def test_an_approval_asked_after_the_connections_loop_ended_answers_unavailable_at_once(rt: ToolRuntime) -> None:
    # The agent never detached its session and its event loop is gone: no
    # one will ever answer, so the call must not wait (it waited until the
    # runtime stopped).
    agent = Agent("a")
    rt.tools.scope(agent).register(
        define_tool(
            name="ping",
            description="Ping.",
            parameters={},
            output=ToolOutput(schema={"type": "string"}),
            execute=lambda args, ctx: "pong",
        )
    )
    rt.events.on("tools/pre-execute", lambda execution, next_: Ask(reason="ok?"), scope=agent)

    async def connection() -> None:
        attach(rt, Updates(), "s1", agent=agent)  # type: ignore[arg-type]

    asyncio.run(connection())
    results: list[Any] = []
    batch = threading.Thread(
        target=lambda: results.append(
            rt.tools.execute(ToolBatchInput(calls=[ToolCall(id="c1", name="ping")], agent=agent))
        )
    )
    batch.start()
    batch.join(BOUND)
    assert not batch.is_alive(), "the approval waited for an answer no one will give"
    error = results[0].results[0].result.error
    assert error.message == 'tool "ping" requires approval, but no approval channel is available'


class HeldAtFirstProgress(Updates):
    """Records the tool updates; sending the first progress update waits
    (the connection is slow) until the test releases it."""

    def __init__(self) -> None:
        super().__init__()
        self.holding = threading.Event()
        self.release = asyncio.Event()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        await super().session_update(session_id, update, **kwargs)
        if self.updates[-1].get("_meta") and not self.holding.is_set():
            self.holding.set()
            await self.release.wait()


def test_progress_reported_while_an_update_is_being_sent_is_merged_into_the_latest(rt: ToolRuntime) -> None:
    # Each report was its own update: a body reporting faster than the
    # client reads left a backlog that the call's result waited behind.
    reported = threading.Event()

    def count(args: Any, ctx: Any) -> str:
        ctx.report_progress(0, 1000)
        assert client.holding.wait(BOUND), "the first report's update to be sending"
        for n in range(1, 1001):
            ctx.report_progress(n, 1000, f"item {n}")
        reported.set()
        return "counted"

    agent = Agent("a")
    rt.tools.scope(agent).register(
        define_tool(
            name="count",
            description="Count.",
            parameters={},
            output=ToolOutput(schema={"type": "string"}),
            execute=count,
        )
    )
    client = HeldAtFirstProgress()

    async def scenario() -> None:
        async with attach(rt, client, "s1", agent=agent) as session, session.turn() as turn:  # type: ignore[arg-type]
            batch = asyncio.ensure_future(
                rt.tools.execute_async(
                    ToolBatchInput(calls=[ToolCall(id="c1", name="count")], agent=agent, signal=turn.signal)
                )
            )
            assert await asyncio.to_thread(reported.wait, BOUND)
            client.release.set()
            assert (await asyncio.wait_for(batch, BOUND)).results[0].result.value == "counted"
        shown = [
            (u.get("status"), u["content"][0]["content"]["text"] if "_meta" in u else None) for u in client.updates
        ]
        assert shown == [
            ("pending", None),
            ("in_progress", None),
            (None, "0/1000 (0%)"),
            (None, "1000/1000 (100%) item 1000"),
            ("completed", None),
        ]
        assert client.updates[3]["_meta"]["dsh_actors"]["progress"] == {
            "progress": 1000,
            "total": 1000,
            "message": "item 1000",
        }

    try:
        asyncio.run(scenario())
    finally:
        reported.set()


class Gone(Updates):
    """A client whose connection has closed, as the SDK's is once the peer
    left: sending raises ``ConnectionError`` (a permission request only, or
    every update too)."""

    def __init__(self, updates_fail: bool) -> None:
        super().__init__()
        self.updates_fail = updates_fail

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if self.updates_fail:
            raise ConnectionError("Connection closed")
        await super().session_update(session_id, update, **kwargs)

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("Connection closed")


@pytest.mark.parametrize("updates_fail", [False, True], ids=["permission request", "update"])
def test_a_closed_connection_cancels_the_running_turn_before_its_next_call_starts(
    rt: ToolRuntime, updates_fail: bool
) -> None:
    # The SDK cancels the prompt's handler (which aborts the turn) some loop
    # iterations after its connection closed; meanwhile the batch went on:
    # a permission request answered "unavailable" and the next call ran
    # after the client had left.
    ran: list[str] = []

    def body(args: Any, ctx: Any) -> str:
        if args["wait"]:  # (the turn ends only by the abort: its updates fail)
            assert ctx.signal.wait(BOUND), "the turn to be cancelled"
        ran.append(ctx.call_id)
        return "done"

    agent = Agent("a")
    rt.tools.scope(agent).register(
        define_tool(
            name="work",
            description="Work.",
            parameters={"wait": {"type": "boolean", "required": True}, "ask": {"type": "boolean", "required": True}},
            output=ToolOutput(schema={"type": "string"}),
            execute=body,
        )
    )
    rt.events.on(
        "tools/pre-execute",
        lambda execution, next_: Ask(reason="ok?") if execution.arguments["ask"] else next_(),
        scope=agent,
    )
    first = {"wait": updates_fail, "ask": not updates_fail}
    calls = [
        ToolCall(id="c1", name="work", arguments=first),
        ToolCall(id="c2", name="work", arguments={"wait": False, "ask": False}),
    ]

    async def scenario() -> None:
        async with attach(rt, Gone(updates_fail), "s1", agent=agent) as session:  # type: ignore[arg-type]
            async with session.turn() as turn:
                batch = await asyncio.wait_for(
                    rt.tools.execute_async(ToolBatchInput(calls=calls, agent=agent, signal=turn.signal)), BOUND
                )
            assert turn.stop_reason == "cancelled"
            second = batch.results[1].result
            assert second.error is not None and second.error.info.code == "ABORTED_BEFORE_DISPATCH", second
            assert "c2" not in ran

    asyncio.run(scenario())


def test_a_call_made_while_a_change_is_pending_is_carded_by_the_tool_it_runs(rt: ToolRuntime) -> None:
    # A shadowing registration published but not yet accepted (its
    # tools/change listener still deciding) is not what a call runs: the
    # call's cards were drawn by it all the same (the bridge read the
    # published registry).
    def tool_titled(title: str) -> Any:
        return define_tool(
            name="work",
            description="Work.",
            parameters={},
            output=ToolOutput(schema={"type": "string"}),
            execute=lambda args, ctx: title,
            present_call=lambda args: GenericCallView(title=f"{title} call"),
            present_result=lambda args, result: GenericResultView(title=f"{title} result"),
        )

    agent = Agent("a")
    rt.tools.register(tool_titled("global"))
    client = Updates()
    deciding, decided = threading.Event(), threading.Event()

    def listener() -> None:  # holds the change published, then refuses it
        deciding.set()
        assert decided.wait(BOUND)
        raise ValueError("refused")

    off = rt.events.on("tools/change", listener)
    refused: list[BaseException] = []

    def change() -> None:
        try:
            rt.tools.scope(agent).register(tool_titled("shadow"))
        except Exception as exc:  # noqa: BLE001 - checked below
            refused.append(exc)

    changing = threading.Thread(target=change)
    changing.start()

    async def scenario() -> None:
        async with attach(rt, client, "s1", agent=agent):  # type: ignore[arg-type]
            batch = await asyncio.wait_for(
                rt.tools.execute_async(ToolBatchInput(calls=[ToolCall(id="c1", name="work")], agent=agent)), BOUND
            )
            assert batch.results[0].result.content == (text("global"),)

    try:
        assert deciding.wait(BOUND)
        asyncio.run(scenario())
    finally:
        decided.set()
        changing.join(BOUND)
        off()
    assert len(refused) == 1
    titles = [update["title"] for update in client.updates if "title" in update]
    assert titles == ["global call", "global result"], client.updates


def test_a_sub_agent_s_call_is_carded_by_the_tool_its_own_scope_runs(rt: ToolRuntime) -> None:
    # The bridge looked the tool up in the attached agent's scope: a tool a
    # sub-agent's scope shadows was drawn with the parent's card.
    def looking(title: str) -> Any:
        return define_tool(
            name="look",
            description="Look.",
            parameters={},
            output=ToolOutput(schema={"type": "string"}),
            execute=lambda args, ctx: title,
            present_call=lambda args: GenericCallView(title=title),
        )

    parent = Agent("main")
    child = Agent("sub", parent=parent)
    rt.tools.scope(parent).register(looking("the parent's look"))
    rt.tools.scope(child).register(looking("the child's look"))
    client = Updates()

    async def scenario() -> None:
        async with attach(rt, client, "s1", agent=parent):  # type: ignore[arg-type]
            batch = await asyncio.wait_for(
                rt.tools.execute_async(ToolBatchInput(calls=[ToolCall(id="c1", name="look")], agent=child)), BOUND
            )
            assert batch.results[0].result.content == (text("the child's look"),)

    asyncio.run(scenario())
    assert [update["title"] for update in client.updates if "title" in update] == ["the child's look"]


def _held(started: threading.Event, aborted: threading.Event, release: threading.Event) -> Any:
    """A tool whose body notes its signal abort (``aborted``) and returns
    only once ``release`` is set: a cancelled turn still finishing."""

    def body(args: Any, ctx: Any) -> str:
        started.set()
        assert ctx.signal.wait(BOUND), "the turn to be cancelled"
        aborted.set()
        assert release.wait(BOUND), "the test to release the call"
        return "value"

    return define_tool(
        name="held", description="Held.", parameters={}, output=ToolOutput(schema={"type": "string"}), execute=body
    )


def test_a_prompt_sent_while_a_cancelled_turn_finishes_is_told_to_wait_for_that_turns_response(
    rt: ToolRuntime, tmp_path: Path
) -> None:
    # (It was told "...or cancel it", which the client had done already.)
    started, aborted, release = threading.Event(), threading.Event(), threading.Event()

    async def scenario() -> None:
        async with wired(rt, tmp_path, RecordingClient()) as running:
            session = running.agent.sessions[running.session_id]
            unregister = rt.tools.scope(session.agent).register(_held(started, aborted, release))
            turn = asyncio.ensure_future(
                running.conn.prompt(session_id=running.session_id, prompt=[text_block(call("held"))])
            )
            assert await asyncio.to_thread(started.wait, BOUND)
            await running.conn.cancel(session_id=running.session_id)
            assert await asyncio.to_thread(aborted.wait, BOUND)
            with pytest.raises(RequestError) as second:
                await asyncio.wait_for(
                    running.conn.prompt(session_id=running.session_id, prompt=[text_block(call("held"))]), BOUND
                )
            assert second.value.data == {
                "sessionId": f"session {running.session_id!r} is still finishing its cancelled prompt: "
                "send this prompt once that prompt's response arrives"
            }
            release.set()
            assert (await asyncio.wait_for(turn, BOUND)).stop_reason == "cancelled"
            unregister()

    try:
        asyncio.run(scenario())
    finally:
        release.set()


def test_a_later_turns_call_reusing_a_call_id_still_running_from_a_cancelled_turn_is_shown(
    rt: ToolRuntime,
) -> None:
    # The cancelled turn's c1 ignores its signal and outlives its card;
    # the next turn's c1 (the model reused the id) gets its own card, and
    # the old call's late end shows nothing.
    first_started, first_release = threading.Event(), threading.Event()
    second_started, second_release = threading.Event(), threading.Event()
    runs = [(first_started, first_release), (second_started, second_release)]

    def body(args: Any, ctx: Any) -> str:
        started, release = runs.pop(0)
        started.set()
        assert release.wait(BOUND), "the test to release the call"
        return "value"

    async def scenario() -> None:
        agent = Agent("a")
        rt.tools.scope(agent).register(
            define_tool(
                name="carded",
                description="A tool with cards.",
                parameters={},
                output=ToolOutput(schema={"type": "string"}),
                execute=body,
                present_call=lambda args: GenericCallView(title="the call card"),
            )
        )
        client = Updates()
        async with attach(rt, client, "s1", agent=agent) as session:  # type: ignore[arg-type]
            with pytest.raises(LookupError, match="the model failed"):
                async with session.turn() as turn:
                    first = asyncio.ensure_future(
                        rt.tools.execute_async(
                            ToolBatchInput(calls=[ToolCall(id="c1", name="carded")], agent=agent, signal=turn.signal)
                        )
                    )
                    assert await asyncio.to_thread(first_started.wait, BOUND)
                    raise LookupError("the model failed")
            shown = len(client.updates)
            async with session.turn() as turn:
                second = rt.tools.execute_async(
                    ToolBatchInput(calls=[ToolCall(id="c1", name="carded")], agent=agent, signal=turn.signal)
                )
                second_release.set()
                result = (await asyncio.wait_for(second, BOUND)).results[0].result
                assert result.value == "value"
            first_release.set()
            await asyncio.wait_for(first, BOUND)
            await session.flush()
            later = [(u["sessionUpdate"], u["toolCallId"], u.get("status")) for u in client.updates[shown:]]
            assert later == [
                ("tool_call", "c1", "pending"),
                ("tool_call_update", "c1", "in_progress"),
                ("tool_call_update", "c1", "completed"),
            ]

    try:
        asyncio.run(scenario())
    finally:
        first_release.set()
        second_release.set()


class Leaving(Updates):
    """A client connection that the client left once :attr:`gone` is set:
    every send raises the SDK's ``ConnectionError``."""

    def __init__(self) -> None:
        super().__init__()
        self.gone = False

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if self.gone:
            raise ConnectionError("Connection closed")
        await super().session_update(session_id, update, **kwargs)


def test_a_client_that_leaves_after_a_cancel_ends_the_example_s_turn_quietly(rt: ToolRuntime, tmp_path: Path) -> None:
    # The cancelled turn's reply found the connection closed and raised
    # into the SDK, which logged "Unhandled error ... Connection closed".
    started, aborted, release = threading.Event(), threading.Event(), threading.Event()

    async def scenario() -> None:
        client = Leaving()
        agent = ScriptedAgent(rt)
        agent.on_connect(client)  # type: ignore[arg-type]
        session_id = (await agent.new_session(cwd=str(tmp_path))).session_id
        rt.tools.scope(agent.sessions[session_id].agent).register(_held(started, aborted, release))
        try:
            turn = asyncio.ensure_future(agent.prompt([text_block(call("held"))], session_id))
            assert await asyncio.to_thread(started.wait, BOUND)
            await agent.cancel(session_id)
            assert await asyncio.to_thread(aborted.wait, BOUND)
            client.gone = True
            release.set()
            assert (await asyncio.wait_for(turn, BOUND)).stop_reason == "cancelled"
        finally:
            await agent.aclose()
            for undo in agent.undo:
                undo()

    try:
        asyncio.run(scenario())
    finally:
        release.set()
