"""A complete Agent Client Protocol agent over stdio, on the tools of
``examples/tools.py``: an editor (Zed, a JetBrains IDE, any ACP client)
shows its tool calls with their cards, asks for permission, and cancels.

    python -m examples.acp_agent [--log-dir DIR] [--ptc]

Each ACP session gets its own scope (an :class:`~dsh_actors.Agent`) with
the four tools confined to the session's working folder, the shell deny
list, and "writes outside scratch/ ask first" (asked through the editor).
``--log-dir`` keeps each session's durable log in ``DIR/<session>.jsonl``;
``--ptc`` runs the calls under the PTC executor (the model then writes
``run_code`` programs, and their sub-calls appear under them).

The model is a script, deterministic and offline: each line of a prompt of
the form ``TOOL JSON_ARGS`` (``read_file {"path": "notes.txt"}``) becomes one
tool call, all of a prompt's calls one batch, and the agent answers with a
summary of the results. Other lines are ignored.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import sys
import uuid
from pathlib import Path
from typing import Any

from acp import PROTOCOL_VERSION, RequestError, update_agent_message_text
from acp.interfaces import Client
from acp.schema import (
    AgentCapabilities,
    Implementation,
    InitializeResponse,
    NewSessionResponse,
    PromptCapabilities,
    PromptResponse,
)
from loguru import logger

import examples.tools
from dsh_actors import (
    Agent,
    DshError,
    LogStep,
    Session,
    ToolBatchInput,
    ToolBatchResult,
    ToolCall,
    ToolRuntime,
    printable,
)
from dsh_actors.acp import AcpSession, attach, serve

_CALL_LINE = re.compile(r"^\s*([A-Za-z_][\w.-]*)\s*(\{.*)?$")


def scripted_calls(text: str, turn: int) -> tuple[ToolCall, ...]:
    """The scripted model: one call per ``TOOL JSON_ARGS`` line (a bare
    ``TOOL`` has no arguments). Arguments that are not JSON are passed on as
    they are: the tool fails them ``INVALID_ARGS``, as it would a model's."""
    calls: list[ToolCall] = []
    for line in text.splitlines():
        match = _CALL_LINE.match(line)
        if match is not None:
            name, arguments = match.group(1), (match.group(2) or "").strip()
            calls.append(ToolCall(id=f"call_{turn}_{len(calls) + 1}", name=name, arguments=arguments))
    return tuple(calls)


def summary(batch: ToolBatchResult, cancelled: bool) -> str:
    """The scripted model's answer once the batch ran."""
    lines = []
    for item in batch.results:
        result = item.result
        status = f"failed: {result.error.message}" if result.error is not None else "ok"
        lines.append(f"- {item.call_id}: {status}")
    ok = sum(not item.result.is_error for item in batch.results)
    head = f"Ran {len(batch.results)} tool call(s): {ok} ok, {len(batch.results) - ok} failed."
    if cancelled:
        head = "Cancelled. " + head
    return "\n".join([head, *lines])


class ScriptedAgent:
    """The ACP agent side (``acp.interfaces.Agent``): sessions, prompt
    turns, cancellation. The SDK calls these methods on its event loop."""

    def __init__(self, rt: ToolRuntime, log_dir: Path | None = None) -> None:
        self.rt = rt
        self.log_dir = log_dir
        self.client: Client | None = None
        self.sessions: dict[str, AcpSession] = {}
        self.turns: dict[str, int] = {}
        self.undo: list[Any] = []
        self.logs: list[Session] = []

    def on_connect(self, conn: Client) -> None:
        self.client = conn

    async def initialize(self, protocol_version: int, **kwargs: Any) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(prompt_capabilities=PromptCapabilities()),
            agent_info=Implementation(name="dsh-actors-example", title="dsh-actors example agent", version="0.1.0"),
        )

    async def authenticate(self, method_id: str, **kwargs: Any) -> None:
        # initialize offers no authentication method: none is known.
        raise RequestError.invalid_params(
            {"methodId": f"unknown authentication method {method_id!r}: this agent needs no authentication"}
        )

    async def new_session(self, cwd: str, mcp_servers: Any = None, **kwargs: Any) -> NewSessionResponse:
        assert self.client is not None, "the SDK connects before any request"
        if not os.path.isabs(cwd):
            raise RequestError.invalid_params({"cwd": f"{cwd!r} is not an absolute path (ACP requires one)"})
        if not Path(cwd).is_dir():
            raise RequestError.invalid_params({"cwd": f"{cwd!r} is not a folder"})
        session_id = f"sess_{uuid.uuid4().hex[:12]}"
        log = Session(self.log_dir / f"{session_id}.jsonl") if self.log_dir is not None else Session()
        self.logs.append(log)
        agent = Agent(session_id, session=log)
        self.undo.append(examples.tools.register(self.rt, root=cwd, agent=agent))
        self.sessions[session_id] = attach(self.rt, self.client, session_id, agent=agent, cwd=str(Path(cwd).resolve()))
        self.turns[session_id] = 0
        return NewSessionResponse(session_id=session_id)

    def _session(self, session_id: str) -> AcpSession:
        session = self.sessions.get(session_id)
        if session is None:
            raise RequestError.invalid_params({"sessionId": f"unknown session {session_id!r}"})
        return session

    async def prompt(self, prompt: list[Any], session_id: str, **kwargs: Any) -> PromptResponse:
        session = self._session(session_id)
        if session.turn_running:  # (ACP: one prompt at a time; a turn not started takes no turn number)
            if session.turn_cancelled:
                why = "is still finishing its cancelled prompt: send this prompt once that prompt's response arrives"
            else:
                why = "is already running a prompt: wait for its answer or cancel it"
            raise RequestError.invalid_request({"sessionId": f"session {session_id!r} {why}"})
        self.turns[session_id] += 1
        turn_number = self.turns[session_id]
        text = "\n".join(block.text for block in prompt if getattr(block, "type", None) == "text")
        # The model. A real one plugs in here: send the conversation and
        # rt.tools.model_tools(session.agent).schemas (or providers.openai.tools(rt, session.agent))
        # to it, take its response's tool calls with providers.openai.calls(response),
        # run them below, send providers.openai.results(batch) back, and loop
        # until it answers without calls. Stream its text with update_agent_message_text.
        calls = scripted_calls(text, turn_number)
        if not calls:
            await self._say(session, 'No tool calls. Write one per line: TOOL {"arg": "value"}')
            return PromptResponse(stop_reason="end_turn")
        try:
            async with session.turn() as turn:
                batch = await self.rt.tools.execute_async(
                    ToolBatchInput(
                        calls=calls, agent=session.agent, signal=turn.signal, log=LogStep(turn=turn_number, step=1)
                    )
                )
        except DshError as error:
            if not self.rt.stop_signal.aborted:
                raise  # (a failed log write: the prompt fails with the error's message)
            # The host is shutting the runtime down (its stop answered the
            # batch while a body still ran, or came before it started): the
            # turn ends cancelled, not with an internal error.
            await self._say(session, f"Stopped: {error}")
            return PromptResponse(stop_reason="cancelled")
        await self._say(session, summary(batch, turn.cancelled))
        return PromptResponse(stop_reason=turn.stop_reason)

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        session = self.sessions.get(session_id)
        if session is not None:
            session.cancel()

    async def _say(self, session: AcpSession, text: str) -> None:
        assert self.client is not None
        try:
            await self.client.session_update(session.session_id, update_agent_message_text(text))
        except ConnectionError:  # (the SDK's, once the client left): nobody is left to read it
            logger.debug("ACP session {}: the client left; reply not sent", session.session_id)

    async def aclose(self) -> None:
        """The client went away: cancel every turn and detach every session."""
        for session in self.sessions.values():
            session.cancel()
            await session.aclose()


class _StdlibToLoguru(logging.Handler):
    """What the SDK logs through the standard ``logging`` module (a client's
    notification whose parameters are not valid, say) as one loguru line,
    without the traceback Python's last resort printed whole."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
            if record.exc_info is not None and record.exc_info[1] is not None:
                text += f": {record.exc_info[1]}"
            lines = [line.strip() for line in text.splitlines() if line.strip()]
            level = "ERROR" if record.levelno >= logging.ERROR else "WARNING"  # (the root logger takes WARNING and up)
            logger.log(level, "{}", printable(" | ".join(lines)))
        except Exception:  # noqa: BLE001 - logging never raises into the code that logged
            self.handleError(record)


async def run(agent: ScriptedAgent) -> None:
    try:
        # The SDK's Agent protocol lists every ACP method; this agent has the
        # ones it needs, and the SDK answers the others "method not found".
        await serve(agent)  # type: ignore[arg-type]
    finally:
        await agent.aclose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.acp_agent", description=__doc__.split("\n\n")[0])
    parser.add_argument("--log-dir", type=Path, help="keep each session's log in DIR/<session>.jsonl")
    parser.add_argument("--ptc", action="store_true", help="run calls under the PTC executor (run_code)")
    options = parser.parse_args(argv)
    if options.log_dir is not None:
        options.log_dir.mkdir(parents=True, exist_ok=True)
    # stdout carries the protocol: everything else goes to stderr.
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    logging.basicConfig(level=logging.WARNING, handlers=[_StdlibToLoguru()])
    for name in ("dsh_actors", "policies", "executors"):
        logger.enable(name)
    with ToolRuntime() as rt:  # stopping it drains the batches a disconnect cancelled
        if options.ptc:
            from executors.ptc import PtcExecutor

            rt.tools.set_executor(PtcExecutor())
        agent = ScriptedAgent(rt, options.log_dir)
        asyncio.run(run(agent))
    for log in agent.logs:  # after the runtime stopped: every result is in
        log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
