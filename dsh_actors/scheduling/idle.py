"""Idle pooled actors and their retirement (:class:`IdleShelf`).

The executor actors and the call actors are pooled: an actor that ends its
work waits on its pool's shelf for the next, so a burst of batches does not
start threads for every batch. An actor idle for ``IDLE_TTL`` seconds
retires, so the threads go back to the runtime's own few soon after a
burst. Nothing polls: the first actor shelved arms one timer on the
runtime's loop thread (``loop.call_later``), which retires what has been
idle long enough and re-arms itself for the next one while any is left.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Final

from loguru import logger

if TYPE_CHECKING:  # pragma: no cover
    from ..actors import ActorGroup, Address
    from ..loop import LoopThread

__all__ = ["IDLE_TTL", "IdleShelf"]

#: Seconds an idle pooled actor is kept before it retires.
IDLE_TTL: Final = 0.5


class IdleShelf:
    """Idle actors of one pool, the longest idle first (see the module
    docstring). State, under ``_lock``: ``_idle`` (address, idle since),
    ``_armed`` (a timer is pending). Invariant: while ``_idle`` is not
    empty, a timer is armed (unless the shelf is closed)."""

    __slots__ = ("_lock", "_idle", "_armed", "_closed", "kept", "_group", "_loop")

    def __init__(self, group: ActorGroup, loop: LoopThread, kept: int) -> None:
        self._lock = threading.Lock()
        self._idle: deque[tuple[Address, float]] = deque()
        self._armed = False
        self._closed = False
        self.kept = kept
        self._group = group
        self._loop = loop

    def __len__(self) -> int:
        return len(self._idle)

    def take(self) -> Address | None:
        """The most recently idle actor (the warmest), or None."""
        with self._lock:
            return self._idle.pop()[0] if self._idle else None

    def shelve(self, address: Address) -> bool:
        """Keep ``address`` idle; False when the shelf is full or closed
        (the caller retires it)."""
        with self._lock:
            if self._closed or len(self._idle) >= self.kept:
                return False
            self._idle.append((address, time.monotonic()))
            arm = not self._armed
            self._armed = True
        if arm:
            self._arm(IDLE_TTL)
        return True

    def close(self) -> None:
        """Runtime stop: forget the idle actors (the group stops them)."""
        with self._lock:
            self._closed = True
            self._idle.clear()

    def _arm(self, delay: float) -> None:
        loop = self._loop.loop
        try:
            loop.call_soon_threadsafe(loop.call_later, delay, self._expire)
        except RuntimeError:  # the loop is closed: the runtime is stopping
            with self._lock:
                self._armed = False

    def _expire(self) -> None:
        # On the loop's thread: retire what has been idle long enough.
        now = time.monotonic()
        retiring: list[Address] = []
        with self._lock:
            idle = self._idle
            while idle and now - idle[0][1] >= IDLE_TTL:
                retiring.append(idle.popleft()[0])
            delay = (idle[0][1] + IDLE_TTL - now) if idle and not self._closed else None
            self._armed = delay is not None
        for address in retiring:
            try:
                self._group.retire(address.ref)  # (does not block)
            except BaseException as exc:  # noqa: BLE001 - never into the loop
                logger.opt(exception=exc).error("retiring an idle actor failed")
        if delay is not None:
            self._arm(max(delay, 0.0))
