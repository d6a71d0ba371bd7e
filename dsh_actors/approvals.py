"""The approval channel: where ``Ask`` decisions are routed (``rt.approvals``).

``dsh_actors.runtime`` re-exports both names (they lived there first)."""

from __future__ import annotations

import threading
from collections.abc import Awaitable
from typing import Protocol

from .errors import InvalidTypeError, RuntimeStoppedError
from .events import Disposer
from .model import ApprovalRequest

__all__ = ["ApprovalChannel", "ApprovalService"]


class ApprovalService(Protocol):
    """``fn(request) -> str``: ``"allowed-once"`` runs the call; ``"rejected"``,
    ``"cancelled"``, ``"unavailable"`` deny it with the pinned reasons;
    ``"deferred"`` leaves it waiting for a person (the batch suspends:
    ``result.suspension``, finished by ``rt.tools.resume``; a nested call,
    which cannot suspend, fails); any other answer fails it without
    running it. A sync service runs on a
    worker thread of the runtime for a call of a batch (while the batch
    commits the calls before it that end meanwhile), on the thread that
    prepares the call for a nested one, and may block (a person
    answering); an ``async def`` service runs on the batch's event loop
    (the one that awaited ``execute_async``, the bound loop, or the
    runtime's own), and must not block it."""

    def __call__(self, request: ApprovalRequest) -> str | Awaitable[str]: ...


class ApprovalChannel:
    """``rt.approvals``: where ``Ask`` decisions are routed. Once its runtime
    stopped (:meth:`close`), :meth:`set` raises; disposers still work."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stack: list[tuple[object, ApprovalService]] = []
        self._closed: str | None = None

    def close(self, reason: str = "the approval channel is closed") -> None:
        """Refuse :meth:`set` from now on (``RuntimeError(reason)``)."""
        with self._lock:
            if self._closed is None:
                self._closed = reason

    @property
    def service(self) -> ApprovalService | None:
        """The service installed last (and not yet disposed), if any."""
        stack = self._stack
        return stack[-1][1] if stack else None

    def set(self, service: ApprovalService) -> Disposer:
        """Install ``service``; its disposer restores the previous one."""
        if not callable(service):
            raise InvalidTypeError("an approval service must be callable: fn(request) -> str")
        if isinstance(service, type):  # (the class itself: calling it with a request would make one)
            raise InvalidTypeError(
                f"an approval service is a function or an instance, not the class {service.__qualname__}: "
                f"pass {service.__qualname__}(...)"
            )
        key = object()
        with self._lock:
            if self._closed is not None:
                raise RuntimeStoppedError(self._closed)
            self._stack = [*self._stack, (key, service)]

        def remove() -> None:
            with self._lock:
                self._stack = [item for item in self._stack if item[0] is not key]

        return Disposer(remove)
