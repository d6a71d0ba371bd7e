"""The example ACP agent (``examples/acp_agent.py``) with what the tests of
a runtime that stops mid-turn need: a tool whose body ignores its signal,
and extension methods a test calls with the SDK client's ``ext_method``.

    python -m tests.acp.stopping_agent [--log-dir DIR]

* ``stuck`` (a prompt line ``stuck``): the body opens ``up.fifo`` in the
  session's folder for writing (the test reads it: the body runs), then
  blocks reading ``gate.fifo`` until the test writes it, whatever its
  signal says: the only call of its batch, it runs on the batch's thread;
* ``stop``: ``rt.stop(timeout=0)`` (a host shutting the agent's runtime
  down), answered once the stop returned;
* ``settled`` (``{"sessionId": ..., "callId": ...}``): answered once the
  call's ``tools/result`` was delivered and the session sent (or dropped)
  every update posted until then.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path
from typing import Any

from acp import RequestError

from dsh_actors import ToolExecution, ToolOutput, ToolRuntime, define_tool
from examples import acp_agent
from examples.acp_agent import ScriptedAgent

BOUND = 30.0
"""How long ``settled`` waits for a result (the test's own bound)."""


def stuck_tool(root: Path) -> Any:
    def body(args: Any, ctx: Any) -> str:
        (root / "up.fifo").write_text("up")
        return (root / "gate.fifo").read_text()

    return define_tool(
        name="stuck",
        description="Block until the test writes gate.fifo, ignoring the signal.",
        parameters={},
        output=ToolOutput(schema={"type": "string"}),
        execute=body,
    )


class StoppingAgent(ScriptedAgent):
    def __init__(self, rt: ToolRuntime, log_dir: Path | None = None) -> None:
        super().__init__(rt, log_dir)
        self._lock = threading.Lock()
        self._results: dict[str, threading.Event] = {}

    def _result_of(self, call_id: str) -> threading.Event:
        with self._lock:
            return self._results.setdefault(call_id, threading.Event())

    def _on_result(self, execution: ToolExecution, result: Any) -> None:
        self._result_of(execution.call_id).set()

    async def new_session(self, cwd: str, mcp_servers: Any = None, **kwargs: Any) -> Any:
        response = await super().new_session(cwd, mcp_servers, **kwargs)
        agent = self.sessions[response.session_id].agent
        self.undo.append(self.rt.tools.scope(agent).register(stuck_tool(Path(cwd))))
        # After the session's own tools/result listener: it has posted the update.
        self.undo.append(self.rt.events.on("tools/result", self._on_result, scope=agent))
        return response

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "stop":
            await asyncio.to_thread(self.rt.stop, 0)
            return {}
        if method == "settled":
            if not await asyncio.to_thread(self._result_of(params["callId"]).wait, BOUND):
                raise RequestError.internal_error({"details": f"no result for {params['callId']}"})
            await self._session(params["sessionId"]).flush()
            return {}
        raise RequestError.method_not_found(f"_{method}")


if __name__ == "__main__":
    acp_agent.ScriptedAgent = StoppingAgent  # type: ignore[misc]
    sys.exit(acp_agent.main())
