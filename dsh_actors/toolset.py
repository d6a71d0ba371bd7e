"""Conditional activation: one step's admitted registrations.

``rt.tools.resolve(context)`` asks the registry for a :class:`ToolSetActor`,
which evaluates every ``when`` condition visible to ``context.agent`` exactly
once, on its own thread (an ``async def`` condition runs on the runtime's
loop thread; the actor waits for it as a message, never blocking), and then
publishes the complete selection as a :class:`ResolvedToolSet`: every
unconditional visible registration plus the conditional ones whose condition
returned exactly ``True``. A cancelled resolution (``context.signal``) or a
raising condition publishes nothing.

Admission only ever shrinks. From the moment resolution starts, the set is
live: after every committed registry change on its agent's chain, the scope
actor that made the change records (synchronously, before it handles another
write) every candidate that the agent no longer sees as the same
registration. Such a candidate is withdrawn for good: a same-name
replacement, a new restriction, an unregistration (during resolution or
after) stops calls that have not started from using the old admission, even
if the change is undone later. Reads also intersect with the current
visibility, so a change is honoured from the moment it is published.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Awaitable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, TypeAlias, Union, assert_never

import pykka

from .actors import ActorBase, ActorGroup, settle
from .errors import AbortError, DshError, ToolPolicyError, safe_str
from .model import Agent, ToolActivationContext
from .registry._private import STOPPED
from .registry.state import Registration, RegistryState, _visible, describe_scope

if TYPE_CHECKING:  # pragma: no cover
    from .definition import ToolDefinition
    from .runtime import ToolRuntime
    from .signals import AbortSignal

__all__ = ["ResolvedToolSet", "ToolSetActor"]

_EMPTY: Final[Mapping[str, Any]] = MappingProxyType({})


class ResolvedToolSet:
    """One step's admission, for exactly one agent (``agent``).

    Reads (:meth:`view`, and the registry read functions given this set)
    take no lock and no thread hop; they are safe from any thread.
    :meth:`dispose` closes admission (idempotent, any thread) A disposed set, or one used with another agent or another
    runtime, admits nothing.
    """

    __slots__ = (
        "_state",
        "_agent",
        "_lock",
        "_candidates",
        "_admitted_map",
        "_withdrawn",
        "_wversion",
        "_disposed",
        "_cache",
        "__weakref__",
    )

    def __init__(self, state: RegistryState, agent: Agent | None) -> None:
        self._state = state
        self._agent = agent
        self._lock = threading.Lock()
        # Invariant: _withdrawn only grows, _wversion counts its changes.
        self._candidates: Mapping[str, Registration] | None = None
        self._admitted_map: Mapping[str, Registration] | None = None
        self._withdrawn: frozenset[int] = frozenset()
        self._wversion = 0
        self._disposed = False
        self._cache: tuple[Any, int, Mapping[str, Registration], Mapping[str, ToolDefinition]] | None = None

    @property
    def agent(self) -> Agent | None:
        """The agent the set was resolved for."""
        return self._agent

    @property
    def disposed(self) -> bool:
        return self._disposed

    # -- reads -------------------------------------------------------------

    def _views(
        self, state: RegistryState, agent: Agent | None
    ) -> tuple[Mapping[str, Registration], Mapping[str, ToolDefinition]]:
        admitted = self._admitted_map
        if admitted is None or self._disposed or agent is not self._agent or state is not self._state:
            return _EMPTY, _EMPTY
        wversion = self._wversion  # read before _withdrawn: a stale tag only forces a recompute
        current = _visible(state, agent)
        cache = self._cache
        if cache is not None and cache[0] is current and cache[1] == wversion:
            return cache[2], cache[3]
        withdrawn = self._withdrawn
        regs = {
            name: reg
            for name, reg in admitted.items()
            if current.get(name) is reg and reg.seq not in withdrawn
        }
        result = (
            MappingProxyType(regs),
            MappingProxyType({name: reg.definition for name, reg in regs.items()}),
        )
        self._cache = (current, wversion, *result)
        return result

    def _admitted(self, state: RegistryState, agent: Agent | None) -> Mapping[str, Registration]:
        return self._views(state, agent)[0]

    def view(self, scope: Agent | None) -> Mapping[str, ToolDefinition]:
        """The admitted definitions that ``scope`` still sees as the very
        registrations admitted, by name, read-only. Only for the agent the
        set was resolved for: any other scope (``None`` included, unless the
        set was resolved for the global view) gets an empty mapping."""
        return self._views(self._state, scope)[1]

    # -- lifecycle ---------------------------------------------------------

    def dispose(self) -> None:
        """Close admission. Idempotent; any thread."""
        with self._lock:
            if self._disposed:
                return
            self._disposed = True
        self._state._remove_toolset(self)

    def __enter__(self) -> ResolvedToolSet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.dispose()

    def __repr__(self) -> str:
        if self._disposed:
            state = "disposed"
        elif self._admitted_map is None:
            state = "resolving"
        else:
            names = list(self._views(self._state, self._agent)[0])
            state = f"admitted={names}"
        return f"<ResolvedToolSet {describe_scope(self._agent)} {state}>"

    # -- the actor's and the scope actors' side ------------------------------

    def _begin(self) -> Mapping[str, Registration]:
        # Under the lock that _note_visible takes: a change committed while
        # the candidates are read is either already in them or noted after.
        with self._lock:
            candidates = _visible(self._state, self._agent)
            self._candidates = candidates
            return candidates

    def _note_visible(self, current: Mapping[str, Registration]) -> None:
        """Withdraw, for good, every candidate ``current`` (the agent's
        visibility after a committed change) does not show as the same
        registration. Called by scope actors."""
        with self._lock:
            candidates = self._candidates
            if candidates is None or self._disposed:
                return
            withdrawn = self._withdrawn
            gone = [
                reg.seq
                for name, reg in candidates.items()
                if reg.seq not in withdrawn and current.get(name) is not reg
            ]
            if gone:
                self._withdrawn = withdrawn.union(gone)
                self._wversion += 1

    def _publish(self, admitted: Mapping[str, Registration]) -> None:
        with self._lock:
            withdrawn = self._withdrawn
            self._admitted_map = MappingProxyType(
                {name: reg for name, reg in admitted.items() if reg.seq not in withdrawn}
            )

    def _abandon(self) -> None:
        with self._lock:
            self._disposed = True
        self._state._remove_toolset(self)


# --------------------------------------------------------------------------
# The actor
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class _Begin:
    """Registry → tool-set actor: start evaluating."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _ConditionDone:
    """Loop thread → tool-set actor: an ``async`` condition settled."""

    registration: Registration
    future: Future[Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class _Cancelled:
    """Aborting thread → tool-set actor: ``context.signal`` aborted."""


_Inbox: TypeAlias = Union[_Begin, _ConditionDone, _Cancelled]


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


class ToolSetActor(ActorBase):
    """Resolves one :class:`ResolvedToolSet` (see the module doc), then
    stops: a published set needs no thread.

    Sync conditions run on this actor's thread, one after the other (they
    should be quick and must observe ``context.signal`` if they wait);
    ``async def`` conditions run concurrently on the resolution's event
    loop (the one that awaits ``resolve_async``, or the runtime's bound
    loop; else the runtime's own loop thread) and are cancelled if the
    resolution fails or is cancelled.
    """

    def __init__(
        self, group: ActorGroup, runtime: ToolRuntime, context: ToolActivationContext, reply: Any, loop: Any = None
    ) -> None:
        super().__init__(group)
        self._loop = loop  # where async conditions run (None: the runtime's loop thread)
        self._runtime = runtime
        self._context = context
        self._reply = reply
        self._set: ResolvedToolSet | None = None
        self._candidates: Mapping[str, Registration] = _EMPTY
        self._answers: dict[int, Any] = {}
        self._pending: dict[int, Future[Any]] = {}
        self._finished = False
        self._unsubscribe: Any = None

    def __repr__(self) -> str:
        return f"<ToolSetActor {describe_scope(self._context.agent)} finished={self._finished}>"

    def receive(self, message: Any) -> Any:
        if not isinstance(message, (_Begin, _ConditionDone, _Cancelled)):
            raise TypeError(f"a tool-set actor does not understand {type(message).__qualname__}")
        inbox: _Inbox = message
        match inbox:
            case _Begin():
                try:
                    self._begin()
                except BaseException as exc:  # noqa: BLE001 - never leave the resolver waiting
                    self._fail(exc)
            case _ConditionDone():
                self._condition_done(inbox)
            case _Cancelled():
                self._fail(self._abort_error())
            case _:
                assert_never(inbox)
        return None

    def on_stop(self) -> None:
        # Stopped before it finished (the runtime stopping): never leave the
        # resolver waiting.
        self._fail(RuntimeError(STOPPED), stop=False)

    # -- evaluation --------------------------------------------------------

    def _begin(self) -> None:
        context = self._context
        signal: AbortSignal = context.signal
        ts = ResolvedToolSet(self._runtime.state, context.agent)
        self._set = ts
        self._runtime.state._add_toolset(ts)
        self._candidates = candidates = ts._begin()
        if signal.aborted:
            self._fail(self._abort_error())
            return
        self._unsubscribe = signal.add_callback(self._on_abort)
        for reg in candidates.values():
            when = reg.when
            if when is None:
                continue
            if signal.aborted or self._finished:
                self._fail(self._abort_error())
                return
            try:
                answer = when(context)
            except BaseException as exc:  # noqa: BLE001 - fails the resolution
                self._fail(self._condition_error(reg, exc))
                return
            if inspect.isawaitable(answer):
                coro = _awaited(answer)
                try:
                    if self._loop is None:
                        future = self._runtime.loop.submit(coro)
                    else:
                        if self._loop.is_closed() or not self._loop.is_running():
                            raise RuntimeError(
                                f'the event loop that runs the activation condition of tool "{reg.name}" '
                                "is not running"
                            )
                        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
                except BaseException as exc:  # noqa: BLE001 - the loop is gone (stopping)
                    coro.close()
                    if inspect.iscoroutine(answer):
                        answer.close()
                    self._fail(exc)
                    return
                self._pending[reg.seq] = future
                future.add_done_callback(partial(self._async_done, reg))
            else:
                self._answers[reg.seq] = answer
        self._maybe_finish()

    def _on_abort(self, _signal: AbortSignal) -> None:
        # On the aborting thread: hand it to the mailbox.
        try:
            self.actor_ref.tell(_Cancelled())
        except pykka.ActorDeadError:
            pass

    def _async_done(self, reg: Registration, future: Future[Any]) -> None:
        # On the loop thread (or here, if it settled at once).
        try:
            self.actor_ref.tell(_ConditionDone(registration=reg, future=future))
        except pykka.ActorDeadError:
            pass

    def _condition_done(self, message: _ConditionDone) -> None:
        if self._finished:
            return
        reg = message.registration
        future = message.future
        self._pending.pop(reg.seq, None)
        if future.cancelled():
            self._fail(self._abort_error())
            return
        exc = future.exception()
        if exc is not None:
            self._fail(self._condition_error(reg, exc))
            return
        self._answers[reg.seq] = future.result()
        self._maybe_finish()

    def _maybe_finish(self) -> None:
        if self._finished or self._pending:
            return
        if self._context.signal.aborted:
            self._fail(self._abort_error())
            return
        ts = self._set
        assert ts is not None
        answers = self._answers
        admitted = {
            name: reg
            for name, reg in self._candidates.items()
            if reg.when is None or answers.get(reg.seq) is True
        }
        ts._publish(admitted)
        self._finished = True
        self._detach()
        # From here on only the caller holds the set: this actor's work is
        # done, and it stops (the set needs no thread).
        self._set = None
        self._candidates = _EMPTY
        self._answers = {}
        reply, self._reply = self._reply, None
        settle(reply, ts)
        self.stop()

    # -- endings -----------------------------------------------------------

    def _detach(self) -> None:
        unsubscribe, self._unsubscribe = self._unsubscribe, None
        if unsubscribe is not None:
            unsubscribe()

    def _fail(self, exc: BaseException, *, stop: bool = True) -> None:
        if self._finished:
            return
        self._finished = True
        self._detach()
        pending, self._pending = self._pending, {}
        for future in pending.values():
            future.cancel()
        if self._set is not None:
            self._set._abandon()
        reply, self._reply = self._reply, None
        settle(reply, error=exc)
        if stop:
            self.stop()

    def _abort_error(self) -> AbortError:
        reason = self._context.signal.reason
        err = AbortError(reason=reason)
        if isinstance(reason, BaseException):
            err.__cause__ = reason
        return err

    def _condition_error(self, reg: Registration, exc: BaseException) -> DshError:
        if self._context.signal.aborted:
            err: DshError = self._abort_error()
        else:
            detail = safe_str(exc)
            err = ToolPolicyError(
                f'the activation condition of tool "{reg.name}" ({describe_scope(reg.scope)})',
                f"raised {type(exc).__name__}" + (f": {detail}" if detail else ""),
            )
        err.__cause__ = exc
        return err
