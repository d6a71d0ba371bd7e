"""A real ACP client for the tests: the SDK's client side, over stdio, to
``python -m examples.acp_agent`` in a subprocess.

:class:`RecordingClient` records every ``session/update`` and answers
``session/request_permission`` from a script of choices; :func:`agent_process`
starts the agent, connects, initializes and opens one session in a fresh
project folder. Waiting is on conditions (an update arrived), never on time:
each wait is bounded only so that a broken agent fails the test instead of
hanging it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acp import PROTOCOL_VERSION, connect_to_agent, text_block
from acp.client.connection import ClientSideConnection
from acp.connection import StreamDirection, StreamEvent
from acp.schema import AllowedOutcome, DeniedOutcome, RequestPermissionResponse

REPO = Path(__file__).resolve().parents[2]
BOUND = 30.0
"""How long a wait may take before the test fails (a bound, not a sleep)."""


@dataclass
class RecordingClient:
    """The client side (``acp.interfaces.Client``): records updates and
    permission requests; ``choices`` are the option ids (or ``"cancelled"``)
    it answers permission requests with, in order."""

    choices: list[str] = field(default_factory=list)
    updates: list[Any] = field(default_factory=list)
    permissions: list[Any] = field(default_factory=list)
    incoming: list[dict[str, Any]] = field(default_factory=list)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def _note(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)
        await self._note()

    async def request_permission(self, options: list[Any], session_id: str, tool_call: Any, **kwargs: Any) -> Any:
        self.permissions.append((tool_call, options))
        await self._note()
        choice = self.choices.pop(0) if self.choices else "cancelled"
        if choice == "cancelled":
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=choice))

    def observe(self, event: StreamEvent) -> None:
        if event.direction is StreamDirection.INCOMING:
            self.incoming.append(event.message)
            asyncio.get_running_loop().create_task(self._note())

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        async def wait() -> None:
            async with self.changed:
                await self.changed.wait_for(predicate)

        await asyncio.wait_for(wait(), BOUND)

    # -- reading the updates ------------------------------------------------

    def tool_updates(self, call_id: str | None = None) -> list[dict[str, Any]]:
        """The tool_call / tool_call_update updates as wire JSON (camelCase)."""
        out = []
        for update in self.updates:
            wire = update.model_dump(mode="json", by_alias=True, exclude_none=True)
            if wire["sessionUpdate"] in ("tool_call", "tool_call_update"):
                if call_id is None or wire["toolCallId"] == call_id:
                    out.append(wire)
        return out

    def statuses(self, call_id: str) -> list[tuple[str, str | None]]:
        return [(u["sessionUpdate"], u.get("status")) for u in self.tool_updates(call_id)]

    def status_of(self, call_id: str) -> str | None:
        statuses = [status for _, status in self.statuses(call_id) if status]
        return statuses[-1] if statuses else None

    def messages(self) -> list[str]:
        out = []
        for update in self.updates:
            if update.session_update == "agent_message_chunk":
                out.append(update.content.text)
        return out


@dataclass
class Running:
    conn: ClientSideConnection
    process: asyncio.subprocess.Process
    client: RecordingClient
    session_id: str
    root: Path
    logs: Path
    stderr: str = ""
    """What the agent wrote on stderr (once it exited: after the block)."""

    async def prompt(self, text: str) -> Any:
        return await asyncio.wait_for(self.conn.prompt(session_id=self.session_id, prompt=[text_block(text)]), BOUND)

    def start_prompt(self, text: str) -> asyncio.Task[Any]:
        return asyncio.get_running_loop().create_task(
            self.conn.prompt(session_id=self.session_id, prompt=[text_block(text)])
        )

    async def send_raw(self, line: bytes) -> None:
        """Write ``line`` to the agent's stdin as it is (beside the SDK's own writes)."""
        assert self.process.stdin is not None
        self.process.stdin.write(line)
        await self.process.stdin.drain()

    def log_events(self) -> list[dict[str, Any]]:
        events = []
        for path in sorted(self.logs.glob("*.jsonl")):
            events.extend(json.loads(line) for line in path.read_text().splitlines() if line.strip())
        return events


class Fifo:
    """A named pipe in the project folder: a shell command run by the agent
    blocks on it (``cat gate.fifo``) until the test writes, or tells the
    test it runs (``echo up > up.fifo``) when the test reads."""

    def __init__(self, root: Path, name: str) -> None:
        self.name = name
        self.path = root / name
        os.mkfifo(self.path)

    async def read(self) -> str:
        """Wait until a writer (the tool's shell) wrote and closed it."""

        def read() -> str:
            with open(self.path) as pipe:
                return pipe.read()

        try:
            return await asyncio.wait_for(asyncio.to_thread(read), BOUND)
        except BaseException:
            self._unblock(os.O_WRONLY)  # no writer came: free the reading thread
            raise

    async def write(self, text: str) -> None:
        """Write ``text`` to the reader waiting on it (the tool's shell)."""

        def write() -> None:
            with open(self.path, "w") as pipe:
                pipe.write(text)

        try:
            await asyncio.wait_for(asyncio.to_thread(write), BOUND)
        except BaseException:
            self._unblock(os.O_RDONLY)  # no reader came: free the writing thread
            raise

    def _unblock(self, mode: int) -> None:
        try:
            os.close(os.open(self.path, mode | os.O_NONBLOCK))
        except OSError:
            pass


def call(name: str, **arguments: Any) -> str:
    """One prompt line of the scripted model."""
    return f"{name} {json.dumps(arguments)}"


@asynccontextmanager
async def agent_process(
    tmp_path: Path, *args: str, client: RecordingClient | None = None, module: str = "examples.acp_agent"
) -> AsyncIterator[Running]:
    """The example agent (or ``module``, run with ``-m``) in a subprocess,
    initialized, with one session whose working folder is
    ``tmp_path / "project"``. On exit the client closes its end and the
    agent must exit 0 by itself."""
    root = tmp_path / "project"
    (root / "scratch").mkdir(parents=True)
    logs = tmp_path / "logs"
    client = client or RecordingClient()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        module,
        "--log-dir",
        str(logs),
        *args,
        cwd=REPO,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdin is not None and process.stdout is not None
    conn = connect_to_agent(client, process.stdin, process.stdout, observers=[client.observe])
    running: Running | None = None
    try:
        await asyncio.wait_for(conn.initialize(protocol_version=PROTOCOL_VERSION), BOUND)
        session = await asyncio.wait_for(conn.new_session(cwd=str(root), mcp_servers=[]), BOUND)
        running = Running(conn, process, client, session.session_id, root, logs)
        yield running
    finally:
        await conn.close()
        if process.returncode is None:
            process.stdin.close()
        try:
            await asyncio.wait_for(process.wait(), BOUND)
        except TimeoutError:
            process.kill()
            await process.wait()
            raise AssertionError("the agent did not exit after its client closed stdin") from None
    assert process.stderr is not None
    stderr = (await process.stderr.read()).decode()
    assert process.returncode == 0, f"the agent exited {process.returncode}:\n{stderr}"
    if running is not None:
        running.stderr = stderr


def run(scenario: Callable[[], Any]) -> Any:
    return asyncio.run(scenario())
