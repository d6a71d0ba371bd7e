"""Conditional activation: one step's admitted registrations.

``rt.tools.resolve(context)`` asks the registry for a
:class:`~dsh_actors.registry.toolset_actor.ToolSetActor`,
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
if the change is undone later. Reads also intersect with what the agent
sees in the committed registry, so a change is honoured from the moment it
is committed. Candidates, withdrawals and reads all follow the committed
registry (:func:`~dsh_actors.visibility.committed`): a change whose
``tools/change`` listeners are still running (and may roll it back) is
neither among the candidates, nor a reason to withdraw one, nor hides one.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

from .errors import InvalidStateError, InvalidValueError, safe_repr
from .model import Agent
from .visibility import Registration, RegistryState, committed, describe_scope

if TYPE_CHECKING:  # pragma: no cover
    from .definition import ToolDefinition

__all__ = ["Admission", "ResolvedToolSet"]

_EMPTY: Final[Mapping[str, Any]] = MappingProxyType({})


class Admission:
    """The writer side of one :class:`ResolvedToolSet`: its candidates,
    what was withdrawn from them, and the published selection, under one
    lock. The tool-set actor that resolves the set creates it and calls
    :meth:`begin` and :meth:`publish` (or :meth:`abandon`); scope actors
    call :meth:`note_visible` after every committed change (the registry
    lists live admissions, :meth:`RegistryState.live_toolsets`); the set
    itself only reads. Applications never see it."""

    __slots__ = (
        "state",
        "agent",
        "_lock",
        "_candidates",
        "_admitted",
        "_withdrawn",
        "_wversion",
        "_disposed",
        "__weakref__",
    )

    def __init__(self, state: RegistryState, agent: Agent | None) -> None:
        self.state = state
        self.agent = agent
        self._lock = threading.Lock()
        # Invariant: _withdrawn only grows, _wversion counts its changes.
        self._candidates: Mapping[str, Registration] | None = None
        self._admitted: Mapping[str, Registration] | None = None
        self._withdrawn: frozenset[int] = frozenset()
        self._wversion = 0
        self._disposed = False

    # -- reads (any thread, no lock) ------------------------------------------

    @property
    def admitted(self) -> Mapping[str, Registration] | None:
        """The published selection (None while resolving)."""
        return self._admitted

    @property
    def withdrawn(self) -> frozenset[int]:
        """The ``seq`` of every candidate withdrawn for good."""
        return self._withdrawn

    @property
    def wversion(self) -> int:
        """How often :attr:`withdrawn` changed (read it first: a stale
        version only forces a recompute)."""
        return self._wversion

    @property
    def disposed(self) -> bool:
        return self._disposed

    # -- writes --------------------------------------------------------------

    def begin(self) -> Mapping[str, Registration]:
        """Read and keep the candidates (the tool-set actor, once): what the
        agent sees in the committed registry (a change whose listeners may
        still roll it back is not in them)."""
        # Under the lock that note_visible takes: a change committed while
        # the candidates are read is either already in them or noted after.
        with self._lock:
            candidates = committed(self.state, self.agent)
            self._candidates = candidates
            return candidates

    def note_visible(self, current: Mapping[str, Registration]) -> None:
        """Withdraw, for good, every candidate ``current`` (what the agent
        sees in the committed registry after a change) does not show as the
        same registration. Called by scope actors."""
        with self._lock:
            candidates = self._candidates
            if candidates is None or self._disposed:
                return
            withdrawn = self._withdrawn
            gone = [
                reg.seq for name, reg in candidates.items() if reg.seq not in withdrawn and current.get(name) is not reg
            ]
            if gone:
                self._withdrawn = withdrawn.union(gone)
                self._wversion += 1

    def publish(self, admitted: Mapping[str, Registration]) -> None:
        """Publish the selection, minus what was withdrawn (the tool-set actor, once)."""
        with self._lock:
            withdrawn = self._withdrawn
            self._admitted = MappingProxyType({name: reg for name, reg in admitted.items() if reg.seq not in withdrawn})

    def abandon(self) -> None:
        """Close admission and leave the registry's list. Idempotent; any thread."""
        with self._lock:
            if self._disposed:
                return
            self._disposed = True
        self.state.remove_toolset(self)


class ResolvedToolSet:
    """One step's admission, for exactly one agent (``agent``).

    Reads (:meth:`view`, and the registry read functions given this set)
    take no thread hop, and no lock unless a registry change is being
    announced (its ``tools/change`` listeners run: the committed registry
    is then read under the state's lock); they are safe from any thread.
    :meth:`dispose` closes admission (idempotent, any thread). A disposed
    set, or one used with another agent or another runtime, admits nothing
    (a batch given one for another agent, or a disposed one, is refused at
    intake; see :meth:`check_usable`).
    """

    __slots__ = ("_admission", "_cache", "__weakref__")

    def __init__(self, admission: Admission) -> None:
        self._admission = admission
        self._cache: tuple[Any, int, Mapping[str, Registration], Mapping[str, ToolDefinition]] | None = None

    @property
    def agent(self) -> Agent | None:
        """The agent the set was resolved for."""
        return self._admission.agent

    @property
    def disposed(self) -> bool:
        return self._admission.disposed

    def check_usable(
        self, agent: Agent | None, subject: str, role: str, fix: str, *, state: RegistryState | None = None
    ) -> None:
        """Refuse using this set for ``agent`` when it admits nothing there:
        resolved by another runtime than the one whose registry is
        ``state`` (``InvalidValueError``; ``None``: not checked), resolved
        for another agent (``InvalidValueError``), or disposed
        (``InvalidStateError``). The message names ``subject`` (what holds
        the set), ``role`` (what ``agent`` is doing: "the batch runs as")
        and, for another agent, ``fix``. (A batch's intake, a nested
        dispatch and the tools offered to a model refuse alike: a set that
        admits nothing fails every call, or offers no tool at all.)"""
        if state is not None and state is not self._admission.state:
            raise InvalidValueError(
                f"{subject} was resolved by another ToolRuntime, whose registrations this one does not run: "
                "resolve the set with the runtime that uses it (its rt.tools.resolve(...))"
            )
        resolved_for = self._admission.agent
        if resolved_for is not agent:
            twin = resolved_for is not None and agent is not None and resolved_for.id == agent.id
            raise InvalidValueError(
                f"{subject} was resolved for {_agent_name(resolved_for)}, but {role} {_agent_name(agent)}"
                f"{' (another Agent object: agents compare by identity)' if twin else ''}: {fix}"
            )
        if self._admission.disposed:
            raise InvalidStateError(
                f"{subject} was disposed: resolve a new set for this step (a set admits nothing once disposed)"
            )

    # -- reads -------------------------------------------------------------

    def _views(
        self, state: RegistryState, agent: Agent | None
    ) -> tuple[Mapping[str, Registration], Mapping[str, ToolDefinition]]:
        admission = self._admission
        admitted = admission.admitted
        if admitted is None or admission.disposed or agent is not admission.agent or state is not admission.state:
            return _EMPTY, _EMPTY
        wversion = admission.wversion  # read before withdrawn: a stale tag only forces a recompute
        current = committed(state, agent)
        cache = self._cache
        if cache is not None and cache[0] is current and cache[1] == wversion:
            return cache[2], cache[3]
        withdrawn = admission.withdrawn
        regs = {name: reg for name, reg in admitted.items() if current.get(name) is reg and reg.seq not in withdrawn}
        result = (
            MappingProxyType(regs),
            MappingProxyType({name: reg.definition for name, reg in regs.items()}),
        )
        self._cache = (current, wversion, *result)
        return result

    def admitted_in(self, state: RegistryState, agent: Agent | None) -> Mapping[str, Registration]:
        """The registrations admitted that ``agent`` still sees in ``state``
        (committed) as the very ones admitted, by name (what the registry
        read functions use; empty for another agent or another runtime's
        registry)."""
        return self._views(state, agent)[0]

    def view(self, scope: Agent | None) -> Mapping[str, ToolDefinition]:
        """The admitted definitions that ``scope`` still sees as the very
        registrations admitted, by name, read-only. Only for the agent the
        set was resolved for: any other scope (``None`` included, unless the
        set was resolved for the global view) gets an empty mapping."""
        return self._views(self._admission.state, scope)[1]

    # -- lifecycle ---------------------------------------------------------

    def dispose(self) -> None:
        """Close admission. Idempotent; any thread."""
        self._admission.abandon()

    def __enter__(self) -> ResolvedToolSet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.dispose()

    def __repr__(self) -> str:
        admission = self._admission
        if admission.disposed:
            state = "disposed"
        elif admission.admitted is None:
            state = "resolving"
        else:
            names = list(self._views(admission.state, admission.agent)[0])
            state = f"admitted={names}"
        return f"<ResolvedToolSet {describe_scope(admission.agent)} {state}>"


def _agent_name(agent: Agent | None) -> str:
    return "no agent (the global view)" if agent is None else f"agent {safe_repr(agent.id)}"
