"""A server process killed mid-call: the call fails clearly, later calls fail
fast, nothing hangs (tests/mcp/server_tools.py, killed with SIGKILL)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

from mcp_harness import ServerConnection

from dsh_actors import ToolBatchInput, ToolCall, ToolRuntime
from dsh_actors.mcp import mount
from dsh_actors.model import ToolBatchResult


def test_a_server_killed_mid_call_fails_that_call_and_later_ones_fast(tmp_path: Path, rt: ToolRuntime) -> None:
    conn = ServerConnection("server_tools.py", tmp_path / "server.log").start()
    try:
        assert conn.session is not None
        unmount = conn.run(mount(rt, conn.session))
        pid = conn.call_directly("pid").structured_content["result"]
        results: list[ToolBatchResult] = []
        worker = threading.Thread(
            target=lambda: results.append(
                rt.tools.execute(ToolBatchInput(calls=(ToolCall(id="s", name="slow", arguments={"tag": "doomed"}),)))
            )
        )
        worker.start()
        assert conn.call_directly("wait_started", {"tag": "doomed"}).structured_content == {"result": True}
        os.kill(pid, signal.SIGKILL)
        worker.join(20)
        assert not worker.is_alive(), "the call in flight hangs after the server died"
        outcome = results[0].results[0].result
        assert outcome.is_error and outcome.error.info is not None
        assert outcome.error.info.code == "MCP_CONNECTION_CLOSED"
        assert outcome.error.message.startswith('MCP server "tools-under-test" is not reachable: ')
        # The fix, not only what happened (before, the message ended at the SDK's "Connection closed").
        assert outcome.error.message.endswith(
            "(if the server exited, its stderr says why; start it again and mount the new session)"
        ), outcome.error.message

        started = time.monotonic()
        later = (
            rt.tools.execute(
                ToolBatchInput(calls=(ToolCall(id="a", name="add", arguments={"x": 1, "inner": {"a": 1}}),))
            )
            .results[0]
            .result
        )
        assert time.monotonic() - started < 2.0
        assert later.is_error and later.error.info is not None
        assert later.error.info.code == "MCP_CONNECTION_CLOSED"
        unmount()
    finally:
        conn.close()
