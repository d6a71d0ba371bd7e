"""The runtime's asyncio loop thread: where ``async def`` tool bodies and
``async def`` activation conditions run."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from loguru import logger

__all__ = ["LoopThread"]

T = TypeVar("T")

#: Seconds a stop gives, past its timeout, to closing the loop (its async
#: generators) once the tasks had their time to end.
_LEFT_FOR_CLOSING = 0.1


def _quiet_about_abandoned(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    # A task the stop abandoned is reported as "destroyed but pending" when
    # it is collected: stop() named it already. Anything else is logged.
    task = context.get("task")
    if isinstance(task, asyncio.Task) and not task.done():
        return
    logger.error("the runtime's event loop: {}", context.get("message", "an error"))


class _ContextExecutor(ThreadPoolExecutor):
    """The loop's default executor (``loop.run_in_executor(None, ...)``):
    asyncio's own, except that each function runs in a copy of its
    submitter's contextvars, as ``asyncio.to_thread`` runs it. So a body's
    blocking work handed to it is still that body's: a nested batch it
    starts lends the slot of the call actor waiting for the body
    (``scheduling.executor.LentOnDemand``) instead of waiting for it.
    It knows its threads, so the loop's stop joins them (:meth:`left`)."""

    def __init__(self, thread_name_prefix: str) -> None:
        self._started: list[threading.Thread] = []
        super().__init__(thread_name_prefix=thread_name_prefix, initializer=self._one_more)

    def _one_more(self) -> None:
        self._started.append(threading.current_thread())  # (on the new thread, before its first work)

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        return super().submit(contextvars.copy_context().run, fn, *args, **kwargs)

    def left(self, deadline: float) -> list[str]:
        """Once shut down (the loop's close does it, without waiting): join
        its threads until ``deadline`` (``time.monotonic()``); the names of
        those still running then (work a cancelled body handed to
        ``asyncio.to_thread`` goes on: it is never interrupted)."""
        for thread in self._started:
            thread.join(max(0.0, deadline - time.monotonic()))
        return [thread.name for thread in self._started if thread.is_alive()]


class LoopThread:
    """One asyncio event loop on one daemon thread, owned by a runtime."""

    def __init__(self, name: str = "dsh-asyncio") -> None:
        self._loop = asyncio.new_event_loop()
        # (asyncio's default size; its threads start at the first use, and
        # the loop's close shuts them down; the stop joins them)
        self._executor = _ContextExecutor(thread_name_prefix=f"{name}-executor")
        self._loop.set_default_executor(self._executor)
        self._stopping = False
        # stop()'s: how long the tasks left may take to end once cancelled,
        # and when its default executor's threads must have ended; the tasks
        # that did not end, and those threads' names (written by the loop's
        # thread as it ends).
        self._grace = 0.0
        self._deadline = 0.0
        self._abandoned: list[asyncio.Task[Any]] = []
        self._threads_left: list[str] = []
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
            loop = self._loop
            try:
                pending = asyncio.all_tasks(loop)
                for task in pending:
                    task.cancel()
                if pending:
                    # Each task may clean up after its cancellation until the
                    # stop's grace ends; one that is still going then (it
                    # caught the cancellation and goes on) is abandoned.
                    done, left = loop.run_until_complete(asyncio.wait(pending, timeout=self._grace))
                    for task in done:
                        if not task.cancelled():
                            task.exception()  # (retrieved: whoever awaited it is gone)
                    self._abandoned = sorted(left, key=lambda task: task.get_name())
                    if left:
                        # Collected later as "destroyed but pending": already named by stop().
                        loop.set_exception_handler(_quiet_about_abandoned)
                closing = loop.create_task(loop.shutdown_asyncgens())
                loop.run_until_complete(asyncio.wait((closing,), timeout=_LEFT_FOR_CLOSING))
            except BaseException as exc:  # noqa: BLE001 - the loop closes whatever a task did
                logger.opt(exception=exc).error("the runtime's event loop could not end cleanly")
            finally:
                loop.close()
                self._threads_left = self._executor.left(self._deadline)

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        """Schedule ``coro`` on the loop; a ``concurrent.futures.Future``."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def stop(self, timeout: float = 30.0) -> tuple[list[asyncio.Task[Any]], list[str]] | None:
        """Stop the loop and end its thread within about ``timeout`` seconds:
        the tasks still on it are cancelled and get that long to end; then
        the loop closes without the ones that did not (they are never
        resumed), and its default executor's threads are joined until that
        timeout. Returns those abandoned tasks and the names of the
        executor's threads still running (left, never joined), or None when
        the thread itself did not end in time (a callback or task blocks
        it; it stays behind, a daemon thread)."""
        if not self._stopping:
            self._grace = max(0.0, timeout)
            self._deadline = time.monotonic() + self._grace
            self._stopping = True
            try:
                self._loop.call_soon_threadsafe(self._loop.stop)
            except RuntimeError:  # closed already
                pass
        if threading.current_thread() is self._thread:
            return [], []
        self._thread.join(max(0.0, timeout) + 2 * _LEFT_FOR_CLOSING)
        if self._thread.is_alive():
            return None
        abandoned, self._abandoned = self._abandoned, []
        return abandoned, self._threads_left
