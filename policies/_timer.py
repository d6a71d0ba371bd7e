"""One timer thread serving many deadlines from a heap.

A policy that needs deadlines owns one :class:`DeadlineTimer`: a single
thread sleeps on a condition until the earliest deadline is due, then runs
its callback. No thread or ``threading.Timer`` per deadline.

Cancelled deadlines are skipped lazily when they come due, and the heap
is compacted whenever cancelled entries outnumber live ones, so a
long-running runtime that cancels almost every deadline (calls that finish
in time) keeps the heap at most about twice its live size. The thread
sleeps until the head of the heap is due (cancelled or not) and is woken
only for a deadline due before that: calls that schedule the same timeout
one after another, and cancel it, never wake it.

The thread starts with the first :meth:`DeadlineTimer.schedule` and ends
with :meth:`DeadlineTimer.stop`, which drops every pending deadline
without running it.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable
from typing import Final

from loguru import logger

__all__ = ["Deadline", "DeadlineTimer"]

_PENDING: Final = 0
_CANCELLED: Final = 1
_FIRED: Final = 2

_NEVER: Final = float("inf")
_LONGEST_WAIT_S: Final = 86_400.0

#: Compact only past this many cancelled entries (small heaps are cheap).
_COMPACT_MIN: Final = 64


class Deadline:
    """One scheduled callback; :meth:`cancel` it when the work it bounds
    settles first."""

    __slots__ = ("when", "_fn", "_state", "_timer")

    def __init__(self, when: float, fn: Callable[[], object], timer: DeadlineTimer) -> None:
        self.when = when
        self._fn: Callable[[], object] | None = fn
        self._state = _PENDING
        self._timer = timer

    @property
    def fired(self) -> bool:
        return self._state == _FIRED

    def cancel(self) -> bool:
        """Cancel the deadline; ``True`` if it had not fired (it never will)."""
        return self._timer._cancel(self)

    def __repr__(self) -> str:
        state = {_PENDING: "pending", _CANCELLED: "cancelled", _FIRED: "fired"}[self._state]
        return f"<Deadline {state} at {self.when:.3f}>"


class DeadlineTimer:
    """Deadlines on one lazily started thread.

    ``schedule`` and ``cancel`` are thread-safe and O(log n). Callbacks run
    on the timer thread, one after another, with no lock held: they must not
    block (aborting a signal is what they are for).
    """

    def __init__(self, name: str = "dsh-policy-timer", clock: Callable[[], float] = time.monotonic) -> None:
        self._name = name
        self._clock = clock
        # The lock alone where nothing waits or is woken (``with self._cond``
        # would take it through two Python-level calls).
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        # Invariant: every PENDING deadline is in the heap; ``_cancelled``
        # counts the CANCELLED ones still in it.
        self._heap: list[tuple[float, int, Deadline]] = []
        self._cancelled = 0
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._stopped = False
        # When the waiting thread wakes by itself (the head of the heap when
        # it went to sleep, cancelled or not): only a deadline due earlier
        # needs to wake it.
        self._wake_at = _NEVER

    # -- reading ------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Deadlines that may still fire."""
        with self._lock:
            return len(self._heap) - self._cancelled

    @property
    def heap_size(self) -> int:
        """Entries held, cancelled ones not yet dropped included."""
        with self._lock:
            return len(self._heap)

    @property
    def thread(self) -> threading.Thread | None:
        """The timer thread, once started."""
        return self._thread

    @property
    def stopped(self) -> bool:
        return self._stopped

    # -- scheduling ------------------------------------------------------------

    def schedule(self, delay: float, fn: Callable[[], object]) -> Deadline | None:
        """Run ``fn()`` on the timer thread ``delay`` seconds from now.

        Returns the :class:`Deadline`, or ``None`` once the timer is stopped
        (nothing will ever fire then).
        """
        self._lock.acquire()
        try:
            if self._stopped:
                return None
            when = self._clock() + (delay if delay > 0.0 else 0.0)
            deadline = Deadline(when, fn, self)
            heapq.heappush(self._heap, (when, next(self._seq), deadline))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            elif when < self._wake_at:
                # Due before the thread wakes by itself: wake it. (A deadline
                # behind cancelled ones, or due later, waits for that wake.)
                self._wake_at = when
                self._cond.notify()
        finally:
            self._lock.release()
        return deadline

    def _cancel(self, deadline: Deadline) -> bool:
        self._lock.acquire()
        try:
            if deadline._state != _PENDING:
                return False
            deadline._state = _CANCELLED
            deadline._fn = None
            if self._stopped:
                return True
            cancelled = self._cancelled = self._cancelled + 1
            heap = self._heap
            if cancelled >= _COMPACT_MIN and cancelled * 2 > len(heap):
                self._heap = [entry for entry in heap if entry[2]._state == _PENDING]
                heapq.heapify(self._heap)
                self._cancelled = 0
            return True
        finally:
            self._lock.release()

    def stop(self, timeout: float | None = None) -> None:
        """Drop every pending deadline and end the thread (joined, unless
        called from a callback on the timer thread itself; at most
        ``timeout`` seconds: a callback that blocks keeps the thread, which
        ends once it returns, and is named in a warning). Idempotent."""
        with self._cond:
            self._stopped = True
            for _, _, deadline in self._heap:
                if deadline._state == _PENDING:
                    deadline._state = _CANCELLED
                deadline._fn = None
            self._heap = []
            self._cancelled = 0
            thread = self._thread
            self._cond.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                logger.warning(
                    "timer thread {} is still in a deadline's callback after {} s (a signal callback that "
                    "blocks?); it ends once the callback returns",
                    thread.name,
                    timeout,
                )

    # -- the thread ------------------------------------------------------------

    def _run(self) -> None:
        cond = self._cond
        while True:
            due: list[Callable[[], object]] = []
            with cond:
                while True:
                    if self._stopped:
                        return
                    heap = self._heap
                    # Sleep until the head is due even when it was cancelled
                    # (dropped then, below): a thread that woke to find only
                    # cancelled entries would otherwise wait for a wake-up at
                    # every next deadline.
                    if not heap:
                        self._wake_at = _NEVER
                        cond.wait()
                        continue
                    wake_at = heap[0][0]
                    delay = wake_at - self._clock()
                    if delay > 0:
                        self._wake_at = wake_at
                        # (At most a day at a time: a deadline further off,
                        # a tool's timeout_ms of 1e13 say, is still waited
                        # for, and Python's waits fail past about 3e11 s.)
                        cond.wait(min(delay, _LONGEST_WAIT_S))
                        continue
                    break
                now = self._clock()
                while heap and heap[0][0] <= now:
                    _, _, deadline = heapq.heappop(heap)
                    if deadline._state != _PENDING:
                        self._cancelled -= 1
                        continue
                    deadline._state = _FIRED
                    fn, deadline._fn = deadline._fn, None
                    if fn is not None:
                        due.append(fn)
            for fn in due:  # no lock held: a callback may schedule or cancel
                try:
                    fn()
                except Exception:  # noqa: BLE001 - one bad callback must not stop the others
                    logger.exception("a deadline callback raised; ignored")

    def __repr__(self) -> str:
        state = "stopped" if self._stopped else ("running" if self._thread else "idle")
        return f"<DeadlineTimer {state} pending={self.pending}>"
