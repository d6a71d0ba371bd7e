"""A stdio MCP server and its ClientSession, run on an event loop thread of
their own (the application's loop, as far as the runtime is concerned).

Tests drive it from the test thread: ``conn.run(coro)`` runs a coroutine on
the session's loop and waits for it (with a timeout, so nothing hangs)."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from mcp import ClientSession, StdioServerParameters, stdio_client

T = TypeVar("T")
HERE = Path(__file__).parent
WAIT_S = 20.0


class ServerConnection:
    """``script`` (a file next to this one) served over stdio, with an
    initialized ``ClientSession`` on ``loop``; ``options``, more fields of
    its ``StdioServerParameters``."""

    def __init__(
        self, script: str, errlog: Path, env: dict[str, str] | None = None, options: dict[str, Any] | None = None
    ) -> None:
        self.params = StdioServerParameters(
            command=sys.executable, args=[str(HERE / script)], cwd=str(HERE), env=env, **(options or {})
        )
        self.errlog_path = errlog
        self.loop = asyncio.new_event_loop()
        self.session: ClientSession | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name=f"mcp-session-{script}", daemon=True)

    def start(self) -> ServerConnection:
        self._thread.start()
        if not self._ready.wait(WAIT_S):
            raise TimeoutError("the MCP server did not start")
        if self._failure is not None:
            raise self._failure
        return self

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._serve())
        except BaseException as exc:  # noqa: BLE001 - reported by start()
            self._failure = exc
        finally:
            self._ready.set()
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        with open(self.errlog_path, "w") as errlog:
            async with stdio_client(self.params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    self.session = session
                    self._ready.set()
                    await self._stop.wait()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = WAIT_S) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def idle(self) -> None:
        """Wait until the session's loop is through with the step it runs
        now: a re-listing swaps the registrations in one step of its task,
        so a ``tools/change`` listener's event is set before the mount has
        recorded the swap, and this waits for that."""

        async def nothing() -> None:
            return None

        self.run(nothing())

    def call_directly(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        """A tools/call straight through the SDK (not through the runtime)."""
        assert self.session is not None
        return self.run(self.session.call_tool(name, arguments or {}))

    def close(self) -> None:
        if self._thread.is_alive() and self._stop is not None:
            try:
                self.loop.call_soon_threadsafe(self._stop.set)
            except RuntimeError:
                pass
        self._thread.join(WAIT_S)
        assert not self._thread.is_alive(), "the MCP session's loop thread did not end"

    def server_log(self) -> str:
        try:
            return self.errlog_path.read_text()
        except OSError:
            return ""
