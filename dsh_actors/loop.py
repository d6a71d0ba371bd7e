"""The runtime's asyncio loop thread: where ``async def`` tool bodies and
``async def`` activation conditions run."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

from loguru import logger

__all__ = ["LoopThread"]

T = TypeVar("T")


class LoopThread:
    """One asyncio event loop on one daemon thread, owned by a runtime."""

    def __init__(self, name: str = "dsh-asyncio") -> None:
        self._loop = asyncio.new_event_loop()
        self._stopping = False
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.call_soon(self._ready.set)
        try:
            while not self._stopping:
                try:
                    self._loop.run_forever()
                except BaseException as exc:  # noqa: BLE001 - e.g. SystemExit from a task
                    # asyncio re-raises SystemExit/KeyboardInterrupt out of
                    # run_forever; the loop must outlive whatever user code did.
                    logger.opt(exception=exc).error("the runtime's event loop caught {!r}", exc)
        finally:
            try:
                pending = asyncio.all_tasks(self._loop)
                for task in pending:
                    task.cancel()
                if pending:
                    self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            finally:
                self._loop.close()

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        """Schedule ``coro`` on the loop; a ``concurrent.futures.Future``."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def stop(self, timeout: float = 30.0) -> None:
        if self._loop.is_closed():
            return
        self._stopping = True
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            if threading.current_thread() is not self._thread:
                self._thread.join(timeout)
