"""A batch's inbox (:class:`BatchInbox`): the messages for its
:class:`~.batch.BatchRun`, and whether an executor actor is running it."""

from __future__ import annotations

import queue
import threading
from typing import Any

__all__ = ["RUNNING", "BatchInbox"]


class _Running:
    __slots__ = ()

    def __repr__(self) -> str:
        return "RUNNING"


#: What :meth:`BatchRun.drain` answers while the batch has not ended.
RUNNING: Any = _Running()


class BatchInbox:
    """A batch's inbox: the messages for its :class:`BatchRun`, and whether
    an executor actor is running it.

    The run holds no thread while it waits: :meth:`put` (any thread: a call
    actor's ``Settled``, a loop's ``BodyEnded``, a signal's ``Wake``) queues
    the message and, when no executor actor is running the batch, calls
    ``schedule`` once, which hands the run to one; :meth:`offer` (a call
    actor's ``Settled``) runs it on the calling call actor instead. That actor drains the
    inbox and :meth:`pause`\\ s. Invariant, under ``_lock``: ``scheduled``
    is True from a ``schedule`` (or the run's start) until a ``pause`` that
    found the queue empty; so exactly one thread runs the batch at a time,
    and a message put is always drained by someone. While the runner waits
    in the middle of a step (``waker`` set: an approval, see
    ``BatchRun._meanwhile``), a message put also wakes it.
    """

    __slots__ = ("_q", "_lock", "scheduled", "ended", "schedule", "run_here", "waker")

    def __init__(self, schedule: Any, run_here: Any = None) -> None:
        self._q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self.scheduled = True  # the executor actor that starts the run runs it
        self.ended = False
        self.schedule = schedule
        # run_here(): run the batch on the calling thread until it pauses;
        # what settles its reply once it has ended (else None). See offer().
        self.run_here = run_here
        # Set by the runner while it waits in the middle of a step (an
        # approval, see BatchRun._meanwhile): every message put sets it.
        self.waker: threading.Event | None = None

    def put(self, message: Any) -> None:
        self._q.put(message)
        waker = self.waker
        if waker is not None:
            waker.set()
        lock = self._lock  # (acquire/release, not ``with``: a put a call)
        lock.acquire()
        try:
            if self.scheduled or self.ended:
                return
            self.scheduled = True
        finally:
            lock.release()
        self.schedule()

    def offer(self, message: Any) -> Any:
        """:meth:`put` from a call actor that is free to run the batch's
        step itself (it has just settled a call and serves the batch): when
        nobody runs the batch, it runs it now, on its own thread, instead
        of handing it to an executor actor (no hop there and back before
        the slot it freed is refilled). What settles the batch's reply once
        it has ended (the caller calls it after going back to its pool),
        else None."""
        self._q.put(message)
        waker = self.waker
        if waker is not None:
            waker.set()
        with self._lock:
            if self.scheduled or self.ended:
                return None
            self.scheduled = True
        if self.run_here is None:
            self.schedule()
            return None
        return self.run_here()

    def get(self) -> Any:
        """The next message, or None when there is none now (the runner's side)."""
        try:
            return self._q.get_nowait()
        except queue.Empty:
            return None

    def more(self) -> bool:
        """Whether a message is queued now (the runner's side)."""
        return not self._q.empty()

    def pause(self) -> bool:
        """The runner stops running the batch, if nothing is queued (True);
        otherwise it goes on (False)."""
        with self._lock:
            if not self._q.empty():
                return False
            self.scheduled = False
            return True

    def end(self) -> None:
        """The batch has replied: later messages (a late ``BodyEnded``) are dropped."""
        with self._lock:
            self.ended = True
