"""Messages between the registry actor and its scope actors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeAlias

from ..messages import AddGuard, Register, Restrict, Retract, SetExecutor, Unregister
from ..model import Agent

WriteRequest: TypeAlias = Register | Unregister | Restrict | AddGuard | SetExecutor | Retract

STOPPED = "the ToolRuntime is stopped"


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
