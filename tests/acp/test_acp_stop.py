"""A runtime that stops while a prompt turn runs, driven as an editor
drives it: the SDK's client side over stdio to ``python -m
tests.acp.stopping_agent`` (the example agent, a tool whose body ignores its
signal, and a ``stop`` extension method) in a subprocess. The tests wait on
named pipes, updates and answers, never for time."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("acp", reason="the acp extra is part of the test extra")
sys.path.insert(0, str(Path(__file__).parent))

from acp.connection import StreamDirection, StreamEvent
from acp.schema import AllowedOutcome, RequestPermissionResponse
from harness import BOUND, Fifo, RecordingClient, agent_process, call, run

pytestmark = pytest.mark.slow

STOPPING = "tests.acp.stopping_agent"


def test_a_card_running_when_the_runtime_stops_ends_failed_with_the_turn_and_its_late_end_is_not_shown(
    tmp_path: Path,
) -> None:
    # The stop answers the batch's caller while the body (on the batch's
    # own thread) still runs: the card must not spin until it returns.
    async def scenario() -> None:
        async with agent_process(tmp_path, module=STOPPING) as agent:
            up, gate = Fifo(agent.root, "up.fifo"), Fifo(agent.root, "gate.fifo")
            client = agent.client
            turn = agent.start_prompt(call("stuck"))
            try:
                await up.read()
                await client.wait_for(lambda: client.status_of("call_1_1") == "in_progress")
                await asyncio.wait_for(agent.conn.ext_method("stop", {}), BOUND)
                # The stop failed the batch: the turn ends cancelled, saying why.
                answer = await asyncio.wait_for(turn, BOUND)
                assert answer.stop_reason == "cancelled"
                said = "Stopped: tool batch failed: the runtime stopped while tool bodies were still running: call_1_1"
                await client.wait_for(lambda: any(text.startswith(said) for text in client.messages()))
                end = client.tool_updates("call_1_1")[-1]
                assert end == {
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": "call_1_1",
                    "status": "failed",
                    "content": [
                        {
                            "type": "content",
                            "content": {"type": "text", "text": "stopped: the runtime stopped before the call ended"},
                        }
                    ],
                }
            finally:
                await gate.write("late")
            # The body returns now and its call settles: the card stays ended.
            await asyncio.wait_for(
                agent.conn.ext_method("settled", {"sessionId": agent.session_id, "callId": "call_1_1"}), BOUND
            )
            assert client.tool_updates("call_1_1")[-1] == end
            assert [status for _, status in client.statuses("call_1_1")] == ["pending", "in_progress", "failed"]

    run(scenario)


def test_a_permission_request_whose_call_is_stopped_ends_at_once_and_its_late_answer_is_ignored(
    tmp_path: Path,
) -> None:
    # No session/cancel: the call's own signal fires (the runtime stops).
    # The SDK has no way to withdraw the request (no $/cancel_request), so
    # the dialog stays open; the call must not wait for it.
    class Undecided(RecordingClient):
        """Answers the permission request "allow once" only when released."""

        def __init__(self) -> None:
            super().__init__()
            self.release = asyncio.Event()
            self.answered: list[Any] = []

        async def request_permission(self, options: list[Any], session_id: str, tool_call: Any, **kwargs: Any) -> Any:
            self.permissions.append((tool_call, options))
            await self._note()
            await self.release.wait()
            return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id="allow-once"))

        def observe(self, event: StreamEvent) -> None:
            super().observe(event)
            if event.direction is StreamDirection.OUTGOING and "result" in event.message:
                self.answered.append(event.message)
                asyncio.get_running_loop().create_task(self._note())

    async def scenario() -> None:
        client = Undecided()
        async with agent_process(tmp_path, client=client, module=STOPPING) as agent:
            turn = agent.start_prompt(call("write_file", path="a.txt", content="1\n"))
            await client.wait_for(lambda: len(client.permissions) == 1)
            await asyncio.wait_for(agent.conn.ext_method("stop", {}), BOUND)
            response = await asyncio.wait_for(turn, BOUND)
            assert response.stop_reason == "end_turn"  # (the client did not cancel the turn)
            end = client.tool_updates("call_1_1")[-1]
            assert end["status"] == "failed"
            assert end["rawOutput"]["error"]["message"] == 'approval for tool "write_file" was cancelled'
            assert not client.answered, "the dialog is still open on the client's side"

            client.release.set()  # the person answers late: nothing happens
            await client.wait_for(lambda: len(client.answered) == 1)
            await asyncio.wait_for(
                agent.conn.ext_method("settled", {"sessionId": agent.session_id, "callId": "call_1_1"}), BOUND
            )
            assert client.tool_updates("call_1_1")[-1] == end
            assert not (agent.root / "a.txt").exists()

    run(scenario)
