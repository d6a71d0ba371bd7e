"""dsh_actors.acp in process: the example's agent class served with
``serve()`` over a socket pair, the SDK's client on the other end, and the
test's own runtime (stopped by the fixture, which checks no thread leaked).
What the subprocess tests cannot reach lives here: async bodies on the
connection's loop, a web card, approvals of other agents, detaching."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import threading
from collections.abc import AsyncIterator
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
    DiffCallView,
    FileDiff,
    GenericCallView,
    NativeExecutor,
    ToolBatchInput,
    ToolCall,
    ToolOutput,
    ToolRuntime,
    WebResultView,
    define_tool,
    text,
)
from dsh_actors.acp import serve
from examples.acp_agent import ScriptedAgent


@dataclass
class InProcess:
    agent: ScriptedAgent
    conn: ClientSideConnection
    client: RecordingClient
    session_id: str

    async def prompt(self, text: str) -> Any:
        return await asyncio.wait_for(self.conn.prompt(session_id=self.session_id, prompt=[text_block(text)]), BOUND)


@asynccontextmanager
async def in_process(rt: ToolRuntime, root: Path, client: RecordingClient | None = None) -> AsyncIterator[InProcess]:
    client = client or RecordingClient()
    agent = ScriptedAgent(rt)
    near, far = socket.socketpair()
    agent_reader, agent_writer = await asyncio.open_connection(sock=near)
    client_reader, client_writer = await asyncio.open_connection(sock=far)
    server = asyncio.get_running_loop().create_task(serve(agent, agent_reader, agent_writer))
    conn = connect_to_agent(client, client_writer, client_reader)
    try:
        await asyncio.wait_for(conn.initialize(protocol_version=PROTOCOL_VERSION), BOUND)
        session = await asyncio.wait_for(conn.new_session(cwd=str(root), mcp_servers=[]), BOUND)
        yield InProcess(agent, conn, client, session.session_id)
    finally:
        await conn.close()
        client_writer.close()
        await asyncio.wait_for(server, BOUND)  # the agent saw the client go
        await agent.aclose()
        for undo in agent.undo:
            undo()


def test_an_async_body_runs_on_the_connections_loop_and_a_web_card_becomes_text(
    rt: ToolRuntime, tmp_path: Path
) -> None:
    async def fetch(args: Any, ctx: Any) -> str:
        await asyncio.sleep(0)  # an await on the connection's loop, which must keep serving
        return "page body"

    web = define_tool(
        name="fetch_page",
        description="Fetch a page.",
        parameters={"url": {"type": "string", "required": True}},
        output=ToolOutput(schema={"type": "string"}, render=lambda args, value: [text(value)]),
        execute=fetch,
        present_call=lambda args: GenericCallView(title=f"fetch {args['url']}", kind="fetch"),
        present_result=lambda args, result: WebResultView(kind="fetch", url=args["url"], status_code=200),
    )

    async def scenario() -> None:
        async with in_process(rt, tmp_path) as running:
            session = running.agent.sessions[running.session_id]
            rt.tools.scope(session.agent).register(web)
            response = await running.prompt(call("fetch_page", url="https://example.org"))
            assert response.stop_reason == "end_turn"
            updates = running.client.tool_updates("call_1_1")
            assert [(u["sessionUpdate"], u["status"]) for u in updates] == [
                ("tool_call", "pending"),
                ("tool_call_update", "in_progress"),
                ("tool_call_update", "completed"),
            ]
            assert (updates[0]["title"], updates[0]["kind"]) == ("fetch https://example.org", "fetch")
            assert updates[2]["content"][0]["content"]["text"] == "https://example.org (200)\n\npage body"

    asyncio.run(scenario())


def test_a_large_result_reaches_the_client_once_in_the_cards_content(rt: ToolRuntime, tmp_path: Path) -> None:
    body = "0123456789abcde\n" * (512 * 1024)  # 8 MiB of text
    dump = define_tool(
        name="dump",
        description="Return a large text.",
        parameters={},
        output=ToolOutput(schema={"type": "string"}, render=lambda args, value: [text(value)]),
        execute=lambda args, ctx: body,
    )

    async def scenario() -> None:
        async with in_process(rt, tmp_path) as running:
            session = running.agent.sessions[running.session_id]
            rt.tools.scope(session.agent).register(dump)
            await running.prompt("dump {}")
            end = running.client.tool_updates("call_1_1")[-1]
            assert end["status"] == "completed"
            assert end["content"] == [{"type": "content", "content": {"type": "text", "text": body}}]
            assert end["rawOutput"]["truncated"] is True and end["rawOutput"]["size"] > len(body)
            # The update is about 8 MiB on the wire, not twice that.
            once = len(json.dumps(body))
            size = len(json.dumps(end, separators=(",", ":")))
            assert once < size < once + 1024, (size, once)

    asyncio.run(scenario())


def test_approvals_of_other_agents_go_to_the_service_installed_before(rt: ToolRuntime, tmp_path: Path) -> None:
    asked: list[str] = []

    def before(request: Any) -> str:
        asked.append(request.agent.id)
        return "allowed-once"

    rt.approvals.set(before)
    rt.events.on("tools/pre-execute", lambda execution, next: Ask(reason="check"))
    rt.tools.register(
        define_tool(
            name="ping",
            description="Ping.",
            parameters={},
            output=ToolOutput(schema={"type": "string"}, render=lambda args, value: [text(value)]),
            execute=lambda args, ctx: "pong",
        )
    )

    async def scenario() -> None:
        client = RecordingClient(choices=["allow-once"])
        async with in_process(rt, tmp_path, client) as running:
            other = Agent("other")
            batch = await rt.tools.execute_async(ToolBatchInput(calls=[ToolCall(id="o1", name="ping")], agent=other))
            assert batch.results[0].result.value == "pong"
            assert asked == ["other"] and client.permissions == []
            assert client.tool_updates("o1") == []  # not this session's agent: not shown
            # The session's own calls are asked through the client.
            await running.prompt("ping {}")
            assert len(client.permissions) == 1 and client.status_of("call_1_1") == "completed"
            assert asked == ["other"]

    asyncio.run(scenario())


def test_a_detached_session_shows_nothing_and_gives_the_approval_service_back(rt: ToolRuntime, tmp_path: Path) -> None:
    def before(request: Any) -> str:
        return "rejected"

    rt.approvals.set(before)

    async def scenario() -> None:
        async with in_process(rt, tmp_path) as running:
            session = running.agent.sessions[running.session_id]
            assert rt.approvals.service is not before
            await session.aclose()
            assert rt.approvals.service is before
            assert rt.events.listeners("tools/execute", session.agent) == ()
            assert rt.events.listeners("tools/result", session.agent) == ()
            (tmp_path / "a.txt").write_text("x\n")
            batch = await rt.tools.execute_async(
                ToolBatchInput(
                    calls=[ToolCall(id="d1", name="read_file", arguments={"path": "a.txt"})], agent=session.agent
                )
            )
            assert not batch.results[0].result.is_error
            with pytest.raises(RequestError) as refused:  # a detached session runs no turn
                await running.prompt(call("read_file", path="a.txt"))
            assert "is detached from its runtime" in str(refused.value.data)
            assert running.client.tool_updates() == []

    asyncio.run(scenario())


class ProgressSeen(RecordingClient):
    """Records; each progress update it receives releases one ``seen``."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = threading.Semaphore(0)

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        await super().session_update(session_id, update, **kwargs)
        if update.field_meta is not None:
            self.seen.release()


def test_a_calls_progress_reaches_the_client_in_order_between_start_and_end(rt: ToolRuntime, tmp_path: Path) -> None:
    # Each report waits until the client has its update (reports made while
    # one is unsent are merged: see test_acp_probe).
    client = ProgressSeen()

    def copy(args: Any, ctx: Any) -> str:
        for report in ((1, 4, "a.txt"), (2, 4), (2.5,)):
            ctx.report_progress(*report)
            assert client.seen.acquire(timeout=BOUND), "the client to receive the report"
        return "copied"

    copier = define_tool(
        name="copy_files",
        description="Copy files.",
        parameters={},
        output=ToolOutput(schema={"type": "string"}),
        execute=copy,
    )

    async def scenario() -> None:
        async with in_process(rt, tmp_path, client) as running:
            session = running.agent.sessions[running.session_id]
            rt.tools.scope(session.agent).register(copier)
            response = await running.prompt(call("copy_files"))
            assert response.stop_reason == "end_turn"
            updates = running.client.tool_updates("call_1_1")
            assert [u.get("status") for u in updates] == ["pending", "in_progress", None, None, None, "completed"]
            shown = [u["content"][0]["content"]["text"] for u in updates[2:5]]
            assert shown == ["1/4 (25%) a.txt", "2/4 (50%)", "2.5"]
            numbers = [u["_meta"]["dsh_actors"]["progress"] for u in updates[2:5]]
            assert numbers == [
                {"progress": 1, "total": 4, "message": "a.txt"},
                {"progress": 2, "total": 4, "message": None},
                {"progress": 2.5, "total": None, "message": None},
            ]
            assert updates[5]["content"][0]["content"]["text"] == "copied"  # the result's card replaces it

    asyncio.run(scenario())


def test_a_call_prepared_again_appears_once_and_its_approval_is_not_asked_again(
    rt: ToolRuntime, tmp_path: Path
) -> None:
    """At a limit of 2, c3 and c4 wait prepared ahead (shown pending, their
    permission asked) while the first two run; a registry change prepares
    them again: the client still sees one pending update and one permission
    request per call."""
    release = threading.Event()
    prepared = threading.Event()

    def hold(args: Any, ctx: Any) -> str:
        if args["n"] < 3:
            assert release.wait(BOUND), "the test to release the first two calls"
        return "held"

    holder = define_tool(
        name="hold",
        description="Hold.",
        parameters={"n": {"type": "integer", "required": True}},
        output=ToolOutput(schema={"type": "string"}),
        execute=hold,
        is_concurrency_safe=lambda args: True,
    )

    def note(execution: Any, next_: Any) -> Any:
        if execution.call_id == "call_1_4":
            prepared.set()
        return next_()

    async def scenario() -> None:
        client = RecordingClient(choices=["allow-once"] * 4)
        async with in_process(rt, tmp_path, client) as running:
            session = running.agent.sessions[running.session_id]
            scope = rt.tools.scope(session.agent)
            scope.register(holder)
            scope.set_executor(NativeExecutor(max_parallel_tool_calls=2))
            rt.events.on("tools/pre-execute", lambda execution, next_: Ask(reason="hold on?"), scope=session.agent)
            rt.events.on("tools/pre-execute", note, prepend=True)
            lines = "\n".join(call("hold", n=n) for n in range(1, 5))
            prompt = asyncio.ensure_future(running.prompt(lines))
            assert await asyncio.to_thread(prepared.wait, BOUND), "call_1_4 to be prepared ahead"
            other = define_tool(
                name="other",
                description="Another tool.",
                parameters={},
                output=ToolOutput(schema={"type": "string"}),
                execute=lambda args, ctx: "x",
            )
            rt.tools.register(other)  # prepares call_1_3 and call_1_4 again
            release.set()
            response = await prompt
            assert response.stop_reason == "end_turn"
            for n in range(1, 5):
                statuses = [u.get("status") for u in running.client.tool_updates(f"call_1_{n}")]
                assert statuses.count("pending") == 1, (n, statuses)
                assert statuses[-1] == "completed", (n, statuses)
            asked = [tool_call.tool_call_id for tool_call, _ in running.client.permissions]
            assert sorted(asked) == [f"call_1_{n}" for n in range(1, 5)]

    try:
        asyncio.run(scenario())
    finally:
        release.set()


def test_a_permission_request_shows_the_reason_and_keeps_the_proposed_diff(rt: ToolRuntime, tmp_path: Path) -> None:
    # ACP's content replaces the card's: a request carrying the reason alone
    # wiped the diff the person has to judge.
    edit = define_tool(
        name="edit",
        description="Edit a file.",
        parameters={"path": {"type": "string", "required": True}},
        output=ToolOutput(schema={"type": "string"}),
        execute=lambda args, ctx: "edited",
        present_call=lambda args: DiffCallView(
            title=f"edit {args['path']}", diffs=(FileDiff(args["path"], "old\n", "new\n"),)
        ),
    )

    async def scenario() -> None:
        client = RecordingClient(choices=["allow-once"])
        async with in_process(rt, tmp_path, client) as running:
            session = running.agent.sessions[running.session_id]
            rt.tools.scope(session.agent).register(edit)
            reason = "edit \x1b[1mx.py\x1b[0m?"  # (card text: the escape sequences are left out)
            rt.events.on("tools/pre-execute", lambda execution, next_: Ask(reason=reason), scope=session.agent)
            response = await running.prompt(call("edit", path="x.py"))
            assert response.stop_reason == "end_turn"
            diff = {"type": "diff", "path": f"{tmp_path}/x.py", "oldText": "old\n", "newText": "new\n"}
            assert client.tool_updates("call_1_1")[0]["content"] == [diff]
            [(tool_call, _)] = client.permissions
            asked = tool_call.model_dump(mode="json", by_alias=True, exclude_none=True)
            assert asked["content"] == [{"type": "content", "content": {"type": "text", "text": "edit x.py?"}}, diff]
            assert (asked["title"], asked["kind"]) == ("edit x.py", "edit")
            assert client.status_of("call_1_1") == "completed"

    asyncio.run(scenario())


def test_a_permission_request_the_client_fails_names_what_its_error_says(rt: ToolRuntime, tmp_path: Path) -> None:
    # The SDK's client answers a handler that raised with "Internal error"
    # and the exception's text in the error's data: the failure showed the
    # message alone, which says nothing of what went wrong.
    class Failing(RecordingClient):
        async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("the dialog\x1b[2J could not open")

    async def scenario() -> None:
        async with in_process(rt, tmp_path, Failing()) as running:
            await running.prompt(call("write_file", path="a.txt", content="1\n"))
            error = running.client.tool_updates("call_1_1")[-1]["rawOutput"]["error"]
            assert error["info"]["code"] == "POLICY_FAILED"
            assert error["message"] == (
                "approval: the ACP client answered the permission request with an error: "
                "Internal error (the dialog\\x1b[2J could not open)"
            )
            assert not (tmp_path / "a.txt").exists()

    asyncio.run(scenario())
