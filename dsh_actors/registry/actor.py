"""RegistryActor: the runtime's front door (``rt.registry``).

It understands :data:`dsh_actors.messages.RegistryMessage` and never blocks
inside a handler:

* writes go to the scope actor of the written layer (spawned on first use,
  retired when its layer is empty again), which settles the reply;
* ``ExecuteBatch`` picks the nearest executor on the batch's chain when the
  message is handled and chains the executor's future to the reply (an
  executor with ``submit(batch)`` is called on this thread and must not
  block; one with only a blocking ``execute(batch)`` runs on the runtime's
  worker threads);
* ``ResolveToolSet`` spawns a tool-set actor that settles the reply.

Every request's reply travels in the request (its ``reply`` future), and
whoever finishes the work settles it; pykka's ``ask`` on ``rt.registry``
(a :class:`~dsh_actors.actors.RegistryRef`) answers from that future. When
the runtime stops, a caller waiting on a reply gets ``RuntimeError``.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, TypeAlias, assert_never

import pykka

from ..actors import ActorBase, ActorGroup, settle
from ..errors import InvalidTypeError
from ..messages import (
    AddGuard,
    ExecuteBatch,
    Register,
    RegisterAll,
    ResolveToolSet,
    Restrict,
    Retract,
    SetExecutor,
    Unregister,
)
from ..model import Agent, ToolActivationContext, ToolBatchInput
from ..scheduling.start import start_batch
from ._private import RELEASE, WriteRequest, _Apply, _ScopeIdle, release_last_message
from .scope import ScopeActor
from .toolset_actor import ToolSetActor, _Begin

if TYPE_CHECKING:  # pragma: no cover
    from ..kernel import Kernel

__all__ = ["RegistryActor"]

_Inbox: TypeAlias = (
    Register
    | RegisterAll
    | Unregister
    | Restrict
    | AddGuard
    | SetExecutor
    | Retract
    | ExecuteBatch
    | ResolveToolSet
    | _ScopeIdle
)
_ACCEPTED = (
    Register,
    RegisterAll,
    Unregister,
    Restrict,
    AddGuard,
    SetExecutor,
    Retract,
    ExecuteBatch,
    ResolveToolSet,
    _ScopeIdle,
)


class _ScopeEntry:
    __slots__ = ("ref", "forwarded")

    def __init__(self, ref: pykka.ActorRef[Any]) -> None:
        self.ref = ref
        self.forwarded = 0


class RegistryActor(ActorBase):
    """See the module doc. Spawned by ``ToolRuntime.start()``, with the
    runtime's kernel and its ``bind_executor(executor)`` hook (which runs
    ``executor.bind(runtime)`` once per executor; the scope actors call it
    on ``set_executor``)."""

    def __init__(self, group: ActorGroup, kernel: Kernel, bind_executor: Callable[[Any], None]) -> None:
        super().__init__(group)
        self.kernel = kernel
        self._bind_executor = bind_executor
        self._state = kernel.state
        self._scopes: dict[Agent | None, _ScopeEntry] = {}

    def __repr__(self) -> str:
        return f"<RegistryActor scopes={len(self._scopes)}>"

    @staticmethod
    def check_message(message: Any) -> None:
        """Raise ``TypeError`` for a message the registry does not understand
        (``rt.registry``'s ``ask`` asks it first, so an asker gets the error)."""
        if not isinstance(message, _ACCEPTED):
            raise InvalidTypeError(
                f"the registry does not understand {type(message).__qualname__} (see dsh_actors.messages)"
            )

    def receive(self, message: Any) -> Any:
        if message is RELEASE:
            return None
        self.check_message(message)
        inbox: _Inbox = message
        match inbox:
            case Register() | RegisterAll() | Restrict() | AddGuard() | SetExecutor():
                self._forward(inbox, inbox.scope, spawn=True)
            case Unregister():
                self._forward(inbox, getattr(inbox.registration, "scope", None), spawn=False)
            case Retract():
                self._forward(inbox, getattr(inbox.contribution, "scope", None), spawn=False)
            case ExecuteBatch():
                self._execute(inbox)
            case ResolveToolSet():
                self._resolve(inbox)
            case _ScopeIdle():
                self._retire(inbox)
            case _:
                assert_never(inbox)
        release_last_message(self)  # (an agent the application dropped is not kept by this loop)
        return None

    # -- writes ------------------------------------------------------------

    def _forward(self, request: WriteRequest, scope: Any, *, spawn: bool) -> None:
        try:
            if scope is not None and not isinstance(scope, Agent):
                raise InvalidTypeError(f"a scope is an Agent or None, not {type(scope).__qualname__}")
            entry = self._scopes.get(scope)
            if entry is None:
                if not spawn:
                    # No actor, so an empty layer: the effect is already gone.
                    settle(request.reply, False)
                    return
                ref = ScopeActor.spawn(self.group, self.kernel, self._bind_executor, scope, self.actor_ref)
                entry = self._scopes[scope] = _ScopeEntry(ref)
            entry.forwarded += 1
            entry.ref.tell(_Apply(request=request, reply=request.reply))
        except BaseException as exc:  # noqa: BLE001 - goes to the requester
            settle(request.reply, error=exc)

    def _retire(self, idle: _ScopeIdle) -> None:
        entry = self._scopes.get(idle.scope)
        if entry is None or entry.ref.actor_urn != idle.actor_urn or entry.forwarded != idle.handled:
            return  # something was forwarded since: the actor reports again if still empty
        del self._scopes[idle.scope]
        # The retired actor has handled everything it was sent and will never
        # publish again, so the registry may remove its (empty) entry.
        self._state.retire(idle.scope)
        self.group.retire(entry.ref)

    # -- batches -----------------------------------------------------------

    def _execute(self, message: ExecuteBatch) -> None:
        batch: Any = message.batch  # a sender may put anything in a message
        if not isinstance(batch, ToolBatchInput):
            settle(
                message.reply,
                error=TypeError(f"ExecuteBatch.batch must be a ToolBatchInput, not {type(batch).__qualname__}"),
            )
            return
        if message.reply is None:
            done: Future[Any] = Future()  # nobody waits: still run it
            start_batch(self.kernel, batch, done, context=message.caller_context)
        else:
            start_batch(self.kernel, batch, message.reply, context=message.caller_context)

    # -- conditional activation ----------------------------------------------

    def _resolve(self, message: ResolveToolSet) -> None:
        try:
            context = message.context
            if not isinstance(context, ToolActivationContext):
                raise InvalidTypeError(f"resolve() takes a ToolActivationContext, not {type(context).__qualname__}")
            loop = message.loop if message.loop is not None else self.kernel.bound_loop
            ref = ToolSetActor.spawn(
                self.group, self.kernel, context, message.reply, loop, caller_context=message.caller_context
            )
            ref.tell(_Begin())
        except BaseException as exc:  # noqa: BLE001 - goes to the requester
            settle(message.reply, error=exc)
