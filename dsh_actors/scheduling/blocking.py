"""Threads for executors that offer only a blocking ``execute(batch)``.

Such an executor's batch runs on a thread of its own, taken from
:class:`BlockingPool`: an idle one, or a new one when none is idle. There is
no bound on the threads, for the same reason as the dispatcher lends a slot
while a body waits: a body that runs a nested batch blocks its thread, and a
bounded pool would make the nested batch wait behind the very batches that
wait for it (with a bound of 32, the 33rd nested level never ran). A thread
that has been idle for :attr:`BlockingPool.IDLE_S` retires, so a burst
leaves nothing behind.

State, under ``_cond``'s lock: ``_tasks`` (submitted, not yet taken),
``_idle`` (threads waiting for a task, counted until they take the lock
again), ``_threads`` (alive), ``_closed``. Invariant: while a task is
queued and the pool is open, ``_idle`` threads plus the ones starting are
at least the tasks queued (a submit starts a thread when the idle ones are
fewer than the tasks): no task waits for a thread that runs another.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, ClassVar

__all__ = ["BlockingPool"]


class BlockingPool:
    """An unbounded pool of threads, idle ones reused (see the module
    docstring)."""

    #: Seconds an idle thread waits for a task before it retires.
    IDLE_S: ClassVar[float] = 0.5

    def __init__(self, name: str) -> None:
        self._name = name
        self._cond = threading.Condition(threading.Lock())
        self._tasks: deque[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]] = deque()
        self._idle = 0
        self._threads: set[threading.Thread] = set()
        self._closed = False
        self._started = 0

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        """Run ``fn(*args)`` on a pool thread at once; its future. Raises
        ``RuntimeError`` once the pool is shut down."""
        future: Future[Any] = Future()
        with self._cond:
            if self._closed:
                raise RuntimeError("the pool is shut down")
            self._tasks.append((future, fn, args))
            if len(self._tasks) <= self._idle:
                self._cond.notify()
                return future
            self._started += 1
            thread = threading.Thread(target=self._serve, name=f"{self._name}-{self._started}", daemon=True)
            self._threads.add(thread)
        try:
            thread.start()
        except BaseException:
            with self._cond:
                self._threads.discard(thread)
                for at, task in enumerate(self._tasks):
                    if task[0] is future:
                        del self._tasks[at]
                        break
                else:  # a thread took it meanwhile: it runs
                    return future
            raise
        return future

    def owns(self, thread: threading.Thread) -> bool:
        """Whether ``thread`` is one of this pool's."""
        with self._cond:
            return thread in self._threads

    def threads(self) -> list[threading.Thread]:
        """The pool's threads alive now."""
        with self._cond:
            return list(self._threads)

    def shutdown(self) -> None:
        """No more tasks: the queued ones are cancelled, idle threads retire,
        busy ones once their task ends (the caller joins :meth:`threads`)."""
        with self._cond:
            self._closed = True
            queued = list(self._tasks)
            self._tasks.clear()
            self._cond.notify_all()
        for future, _, _ in queued:
            future.cancel()

    def _serve(self) -> None:
        cond = self._cond
        try:
            while True:
                with cond:
                    while not self._tasks:
                        if self._closed:
                            return
                        self._idle += 1
                        woken = cond.wait(self.IDLE_S)
                        self._idle -= 1
                        if not woken and not self._tasks:
                            return  # idle for IDLE_S: retire
                    future, fn, args = self._tasks.popleft()
                if not future.set_running_or_notify_cancel():
                    continue
                try:
                    result = fn(*args)
                except BaseException as exc:  # noqa: BLE001 - the future carries it
                    future.set_exception(exc)
                else:
                    future.set_result(result)
                del future, fn, args
        finally:
            with cond:
                self._threads.discard(threading.current_thread())
