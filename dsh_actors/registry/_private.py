"""Messages between the registry actor and its scope actors, and the helper
that fails whatever is still queued when one of them stops."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeAlias, Union

import pykka
from pykka import messages as pykka_messages

from ..actors import Deferred
from ..messages import AddGuard, Register, Restrict, Retract, SetExecutor, Unregister
from ..model import Agent

WriteRequest: TypeAlias = Union[Register, Unregister, Restrict, AddGuard, SetExecutor, Retract]

STOPPED = "the ToolRuntime is stopped"


@dataclass(frozen=True, slots=True, kw_only=True)
class _Apply:
    """Registry → scope actor: apply ``request`` to your layer and settle
    ``deferred`` with the reply."""

    request: WriteRequest
    deferred: Deferred


@dataclass(frozen=True, slots=True, kw_only=True)
class _ScopeIdle:
    """Scope actor → registry: my layer is empty after handling ``handled``
    requests; retire me if you have not forwarded me anything since."""

    scope: Agent
    actor_urn: str
    handled: int


def fail_queued(actor: pykka.Actor, settle: Any = None) -> None:
    """Drain ``actor``'s inbox after it stopped, failing every reply that
    would otherwise never come: pykka asks (like pykka does), the ``reply``
    future of a public request, and the deferred of a forwarded one."""
    inbox = actor.actor_inbox
    while not inbox.empty():
        envelope = inbox.get()
        message = envelope.message
        if isinstance(message, _Apply):
            message.deferred.fail(RuntimeError(STOPPED))
        else:
            reply = getattr(message, "reply", None)
            if isinstance(reply, Future):
                try:
                    if reply.set_running_or_notify_cancel():
                        reply.set_exception(RuntimeError(STOPPED))
                except RuntimeError:  # already settled by someone else
                    pass
            if settle is not None:
                settle(message)
        if envelope.reply_to is not None:
            if isinstance(message, pykka_messages._ActorStop):
                envelope.reply_to.set(None)
            else:
                exc = pykka.ActorDeadError(f"{actor.actor_ref} stopped before handling the message")
                envelope.reply_to.set_exception(exc_info=(type(exc), exc, None))
