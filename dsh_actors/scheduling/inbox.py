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
    ``schedule`` once, which hands the run to one. That actor drains the
    inbox and :meth:`pause`\\ s. Invariant, under ``_lock``: ``scheduled``
    is True from a ``schedule`` (or the run's start) until a ``pause`` that
    found the queue empty; so exactly one thread runs the batch at a time,
    and a message put is always drained by someone.
    """

    __slots__ = ("_q", "_lock", "scheduled", "ended", "schedule")

    def __init__(self, schedule: Any) -> None:
        self._q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self.scheduled = True  # the executor actor that starts the run runs it
        self.ended = False
        self.schedule = schedule

    def put(self, message: Any) -> None:
        self._q.put(message)
        with self._lock:
            if self.scheduled or self.ended:
                return
            self.scheduled = True
        self.schedule()

    def get(self) -> Any:
        """The next message, or None when there is none now (the runner's side)."""
        try:
            return self._q.get_nowait()
        except queue.Empty:
            return None

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
