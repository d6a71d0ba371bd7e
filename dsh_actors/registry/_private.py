"""Messages between the registry actor and its scope actors."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

import pykka

from ..kernel import STOPPED as STOPPED  # (the state, as registry/service.py's messages say it)
from ..messages import AddGuard, Register, RegisterAll, Restrict, Retract, SetExecutor, Unregister
from ..model import Agent

WriteRequest: TypeAlias = Register | RegisterAll | Unregister | Restrict | AddGuard | SetExecutor | Retract


class WriteReply(Future[Any]):
    """The reply of a write ``ToolsService`` waits for, which the waiter may
    give up on before the change starts: whichever comes first, the scope
    actor's :meth:`begin` or the waiter's :meth:`abandon`, wins, so a write
    whose caller got "nothing was changed" is never applied later."""

    def __init__(self) -> None:
        super().__init__()
        self._claim = threading.Lock()
        self._begun = False
        self.abandoned = False

    def begin(self) -> bool:
        """The scope actor, before it applies the write: False if abandoned."""
        with self._claim:
            self._begun = not self.abandoned
            return self._begun

    def abandon(self) -> bool:
        """The waiter, on its timeout: True if the write will never start."""
        with self._claim:
            self.abandoned = not self._begun
            return self.abandoned


@dataclass(frozen=True, slots=True, kw_only=True)
class _Apply:
    """Registry → scope actor: apply ``request`` to your layer and settle
    ``reply`` (``request.reply``, or the facade's own) with the answer."""

    request: WriteRequest
    reply: Any


@dataclass(frozen=True, slots=True, kw_only=True)
class _ScopeIdle:
    """Scope actor → registry: my layer is empty after handling ``handled``
    requests; retire me if you have not forwarded me anything since."""

    scope: Agent
    actor_urn: str
    handled: int


@dataclass(frozen=True, slots=True)
class _Release:
    """An actor → itself: nothing to do (see :func:`release_last_message`)."""


RELEASE: Final = _Release()


def release_last_message(actor: pykka.Actor) -> None:
    """Let pykka's loop of ``actor`` drop the message it just handled.

    The loop keeps the last message it took until the next one arrives, and
    the registry's actors may wait long for another: their last write or
    resolution (its agent and session, a definition, the reply holding a
    resolved set) would stay alive after the application dropped it. Sent
    after a message only when the inbox is empty (the next message does it
    otherwise); handling :data:`RELEASE` sends nothing."""
    if actor.actor_inbox.empty():
        try:
            actor.actor_ref.tell(RELEASE)
        except pykka.ActorDeadError:
            pass
