"""Visibility: the registry's published state (immutable per-scope
snapshots) and the pure read functions over them.

This is layer 2 of the core (docs/ARCHITECTURE.md, "Layers"): it imports
only the values, and the pipeline, the scheduler and the registry's actors
all read through it. (It is not inside ``registry/``: importing a module of
a package runs the package's ``__init__`` first, and the registry package
holds the actors of layer 5.)

Every scope written to (and not retired: an empty layer whose actor
retired is dropped) has one :class:`ScopeSnapshot` in
:attr:`RegistryState.scopes` (``None`` is the global layer). Only that
scope's :class:`~dsh_actors.registry.scope.ScopeActor` replaces its entry,
always with a new immutable snapshot, and then bumps
:attr:`RegistryState.generation`. Everybody else reads without a thread
hop, and without a lock but for a read of the committed registry while a
change is pending (:func:`committed`).

Visibility of a scope S (``docs/reference.md``, section 4): the global
registrations, overlaid by each ancestor's own registrations farthest to nearest (nearer
shadows farther); a name is kept only if every restriction on S's chain
(its ancestors' and its own) admits it; then S's own registrations are
overlaid, which no restriction hides. The result is cached per agent for
the current generation, so a repeated read is a dict lookup; the cache
refers to agents weakly, and a publication drops the previous
generation's cache at once, so it never keeps a dropped agent (and its
session) alive, not even through the agent's own registrations that a
disposer just removed.

What decides a call or what the model is offered (:func:`executable`,
:func:`callable_view`, a resolved set's reads) reads the *committed*
registry (:func:`committed`): a change whose ``tools/change`` listeners
may still roll it back is not acted on. Inspection without a set
(:func:`visible`, :func:`lookup`, :func:`definitions`, :func:`schemas`)
reads what is published, so a listener sees the change it is told of.

Every function here is pure, thread-safe, and may be called from any thread
(the pipeline calls them from executor and call actors). Guards run on the
calling thread.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from operator import attrgetter
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, TypeAlias

import orjson

from .definition import (
    RESERVED_NAMES,  # (re-exported: where the registry's readers look for it)
    classifier_failed,
)
from .errors import callable_name, exception_text
from .events import in_scope
from .json import dumps
from .model import Agent, ToolActivationContext, ToolRestriction

if TYPE_CHECKING:  # pragma: no cover
    from .definition import CheckedDefinition, SchemaEnforcer, ToolDefinition, ToolSchema
    from .execution import ToolExecution

__all__ = [
    "RESERVED_NAMES",
    "Condition",
    "Contribution",
    "ContributionKind",
    "ExecutionMode",
    "Guard",
    "Registration",
    "RegistryState",
    "ScopeKey",
    "ScopeSnapshot",
    "callable_view",
    "is_callable",
    "check_guards",
    "committed",
    "definitions",
    "describe_scope",
    "executable",
    "executable_in",
    "execution_mode",
    "in_chain",
    "inherited",
    "lookup",
    "schemas",
    "select_executor",
    "visible",
]

ScopeKey: TypeAlias = "Agent | None"
"""A layer of the registry: an agent's scope, or ``None`` for the global layer."""

Condition: TypeAlias = Callable[[ToolActivationContext], Any]
"""``when(context) -> bool`` (or an awaitable of one): whether a conditional
registration takes part in a step. Only an exact ``True`` admits it."""

Guard: TypeAlias = "Callable[[ToolExecution], str | None]"
"""``guard(execution) -> str | None``: a reason denies the call."""

ContributionKind: TypeAlias = Literal["restriction", "guard", "executor"]
ExecutionMode: TypeAlias = Literal["parallel", "exclusive"]

_seqs = itertools.count(1)


def _next_seq() -> int:
    # itertools.count.__next__ is atomic under the GIL: unique across threads.
    return next(_seqs)


# --------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class Registration:
    """One registered tool in one layer. Compares by identity: registering
    the same definition again (elsewhere, or after unregistering) is a
    different registration, and its disposer removes exactly this one."""

    definition: ToolDefinition
    """The definition as registered (borrowed, never copied)."""

    checked: CheckedDefinition
    """What registration checked and compiled (validators, frozen schemas)."""

    scope: Agent | None
    """The layer it was registered in (``None``: global)."""

    when: Condition | None
    """The activation condition, or ``None`` for an unconditional tool."""

    seq: int
    """Unique, increasing in registration order across the process; also
    the order in which reads list tools."""

    schema_json: bytes = field(init=False, repr=False)
    """The model-facing projection (``name``, ``description``, the checked
    ``parameters``) as JSON, encoded once: :func:`schemas` parses a fresh,
    detached copy from it (several times faster than a deep copy)."""

    def __post_init__(self) -> None:
        projection = {
            "name": self.definition.name,
            "description": self.definition.description,
            "parameters": self.checked.parameters,
        }
        object.__setattr__(self, "schema_json", dumps(projection))

    @property
    def name(self) -> str:
        return self.definition.name

    @property
    def conditional(self) -> bool:
        """Whether a step must admit it (``when`` given)."""
        return self.when is not None

    # (Read per call on the pipeline's path: C getters, not Python frames.)
    if TYPE_CHECKING:

        @property
        def output_validator(self) -> SchemaEnforcer: ...

        @property
        def parameter_validator(self) -> SchemaEnforcer: ...

        @property
        def is_async(self) -> bool:
            """Whether the body is an ``async def`` (runs on the loop thread)."""

    else:
        output_validator = property(attrgetter("checked.output_validator"))
        parameter_validator = property(attrgetter("checked.parameter_validator"))
        is_async = property(
            attrgetter("checked.is_async"), doc="Whether the body is an ``async def`` (runs on the loop thread)."
        )

    def __repr__(self) -> str:
        cond = " conditional" if self.when is not None else ""
        return f"<Registration {self.name!r} in {describe_scope(self.scope)}{cond} #{self.seq}>"


@dataclass(frozen=True, slots=True, eq=False)
class Contribution:
    """One restriction, guard or executor contributed to a scope. Compares
    by identity; its disposer retracts exactly this contribution."""

    kind: ContributionKind
    scope: Agent | None
    value: Any
    """A :class:`ToolRestriction` (a copy taken at the call), a guard
    function, or an executor."""

    seq: int

    def __repr__(self) -> str:
        return f"<Contribution {self.kind} in {describe_scope(self.scope)} #{self.seq}>"


_Filter: TypeAlias = "tuple[frozenset[str] | None, frozenset[str] | None]"


def _compile_filter(restriction: ToolRestriction) -> _Filter:
    """``restriction`` as ``(allow, deny)`` sets. An empty list names no
    tool, as ``None`` does: it filters nothing (``restrict`` refuses a
    restriction whose lists both name nothing, and an empty ``allow``
    beside a ``deny`` is a deny-only filter)."""
    allow = frozenset(restriction.allow) if restriction.allow else None
    deny = frozenset(restriction.deny) if restriction.deny else None
    return allow, deny


@dataclass(frozen=True, slots=True, eq=False)
class ScopeSnapshot:
    """One layer as its scope actor last published it. Immutable."""

    scope: Agent | None
    version: int
    """Increases with every publication (unique across the process)."""

    registrations: Mapping[str, Registration]
    """The layer's own registrations by name (read-only), in registration order."""

    restrictions: tuple[Contribution, ...] = ()
    """Restrictions (``.value`` a :class:`ToolRestriction`), in order."""

    guards: tuple[Contribution, ...] = ()
    """Guards (``.value`` the function), in registration order."""

    executors: tuple[Contribution, ...] = ()
    """Executor contributions, a stack: the last one is the scope's executor."""

    filters: tuple[_Filter, ...] = field(init=False, repr=False)
    """``restrictions`` compiled to ``(allow, deny)`` frozensets."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "filters", tuple(_compile_filter(c.value) for c in self.restrictions))

    @property
    def empty(self) -> bool:
        return not (self.registrations or self.restrictions or self.guards or self.executors)

    def evolve(self, **changes: Any) -> ScopeSnapshot:
        """A new snapshot with ``changes`` and a fresh version."""
        fields: dict[str, Any] = {
            "scope": self.scope,
            "registrations": self.registrations,
            "restrictions": self.restrictions,
            "guards": self.guards,
            "executors": self.executors,
        }
        fields.update(changes)
        regs = fields["registrations"]
        if not isinstance(regs, MappingProxyType):
            fields["registrations"] = MappingProxyType(dict(regs))
        return ScopeSnapshot(version=_next_seq(), **fields)

    def __repr__(self) -> str:
        return (
            f"<ScopeSnapshot {describe_scope(self.scope)} v{self.version} "
            f"tools={list(self.registrations)} restrictions={len(self.restrictions)} "
            f"guards={len(self.guards)} executors={len(self.executors)}>"
        )


def empty_snapshot(scope: Agent | None) -> ScopeSnapshot:
    return ScopeSnapshot(scope=scope, version=0, registrations=MappingProxyType({}))


# A per-generation cache of computed views may hold at most this many agents
# (past it, the view computed longest ago goes; every publication drops the
# whole cache).
_CACHE_LIMIT: Final = 4096


class _ViewCache:
    """The views computed for one generation, at most ``_CACHE_LIMIT``
    agents', in the order they were computed: a full cache lets the oldest
    go, so a farm of more agents still finds the views it computed last
    (a read does not reorder them: a hit stays one dict lookup). It never
    keeps an agent alive: each agent's view is filed under ``id(agent)``
    beside a weak reference that proves the id still names that agent, and
    the entry is removed when the agent is freed. (A view holds
    registrations, and the agent's own hold the agent as their ``scope``: so
    does its layer, until they are disposed, and the publication that
    disposes them drops this cache too, see :meth:`RegistryState._bump`.)"""

    __slots__ = ("generation", "views", "global_view", "scopes", "__weakref__")

    def __init__(self, generation: int) -> None:
        self.generation = generation
        self.views: OrderedDict[int, tuple[weakref.ref[Agent], Mapping[str, Registration]]] = OrderedDict()
        self.global_view: Mapping[str, Registration] | None = None
        # The scopes the views are of, when not the state's own (the
        # committed ones while a change is pending: see committed()).
        self.scopes: Mapping[Agent | None, ScopeSnapshot] | None = None


def _forget_view(cache: _ViewCache, key: int) -> Callable[[weakref.ref[Agent]], None]:
    # The callback refers to its cache weakly too: no reference cycle, so a
    # cache a publication replaced is freed at once.
    cache_ref = weakref.ref(cache)

    def forget(ref: weakref.ref[Agent]) -> None:
        # Runs while the agent is being freed, before its id can be reused.
        live = cache_ref()
        if live is not None:
            entry = live.views.get(key)
            if entry is not None and entry[0] is ref:
                live.views.pop(key, None)

    return forget


class LiveToolSet(Protocol):
    """A tool set being resolved or live, as :class:`RegistryState` lists it
    for the scope actors: a :class:`~dsh_actors.toolset.Admission`, which
    this module does not name (the tool sets' module imports it)."""

    @property
    def agent(self) -> Agent | None: ...

    def note_visible(self, current: Mapping[str, Registration]) -> None: ...


class ToolSetRef(Protocol):
    """A step's tool set as the read functions below take it (their
    ``tool_set``): a :class:`~dsh_actors.toolset.ResolvedToolSet`, which
    this module does not name (the tool sets' module imports it)."""

    def admitted_in(self, state: RegistryState, agent: Agent | None) -> Mapping[str, Registration]: ...


class RegistryState:
    """The published registry of one runtime.

    ``scopes`` maps a scope to its latest snapshot; a scope that was never
    written (or whose layer became empty and was retired) has no entry and
    reads as empty. ``generation`` increases on every publication (and
    when a pending change settles), and
    ``changed_at[agent]`` (``global_changed_at`` for the global scope) is
    the generation of that scope's last publication (settlement or retirement),
    written before ``generation`` moves to it: a reader that sees
    generation ``g`` sees every scope changed at ``g`` or before.
    Only scope actors write (each its own entry); reads take no lock, but
    for :func:`committed` while a change is pending.

    A change published ``pending`` (its ``tools/change`` listeners are
    running and may roll it back) is seen by inspection reads at once, but
    not by :func:`committed`: until :meth:`settle`, that read keeps the
    scope's previous snapshot (``_pending``), so neither a call, nor what
    the model is offered, nor a resolution acts on a state a rollback may
    undo. Settling moves the generation either way (an accepted change is
    committed now, a rolled-back one is published no more), so what was
    read while the change was pending is read again.
    """

    def __init__(self) -> None:
        self.scopes: dict[Agent | None, ScopeSnapshot] = {}
        self.generation = 0
        # (Agents held weakly: a dropped agent's scope is retired and its
        # agent freed; a call's own agent is alive, so its entry is too.)
        self.changed_at: weakref.WeakKeyDictionary[Agent, int] = weakref.WeakKeyDictionary()
        self.global_changed_at = 0
        self._gen_lock = threading.Lock()
        # Only _bump replaces it (before it moves the generation), dropping
        # the previous generation's views with the state they describe.
        self._cache = _ViewCache(0)
        # The committed views while a change is pending (committed()),
        # under _pending_lock; _bump drops it as it drops _cache.
        self._committed_cache = _ViewCache(0)
        # Resolved tool sets that are being resolved or are live: scope
        # actors tell them what became invisible after every committed change.
        # Weak: a set its owner dropped without disposing stops being told.
        self._toolsets: weakref.WeakValueDictionary[int, LiveToolSet] = weakref.WeakValueDictionary()
        # The same admissions filed under every agent on their agent's chain,
        # so a change of one agent's scope tells only the sets it can affect
        # (not every live set of a farm's thousands of agents).
        self._toolsets_in: weakref.WeakKeyDictionary[Agent, weakref.WeakValueDictionary[int, LiveToolSet]] = (
            weakref.WeakKeyDictionary()
        )
        self._toolsets_lock = threading.Lock()
        # The committed snapshot of every scope whose change is pending; only
        # changed under _pending_lock, which committed() takes when a change
        # is (or was, during its read) pending.
        self._pending: dict[Agent | None, ScopeSnapshot] = {}
        self._pending_lock = threading.Lock()

    def snapshot(self, scope: Agent | None) -> ScopeSnapshot:
        """``scope``'s latest snapshot (an empty one if it has none)."""
        snap = self.scopes.get(scope)
        return empty_snapshot(scope) if snap is None else snap

    # -- writers (scope actors and the registry actor only) -----------------

    def publish(self, snapshot: ScopeSnapshot, *, pending: bool = False) -> None:
        """Publish ``snapshot`` as its scope's latest (its scope actor only).
        ``pending``: listeners may still roll it back; :meth:`settle` ends it."""
        scope = snapshot.scope
        if pending:
            # Recorded before the snapshot is visible: see committed().
            with self._pending_lock:
                self._pending[scope] = self.snapshot(scope)
        # Invariant: the snapshot is visible before the generation moves, so a
        # reader that saw generation g computes from data at least as new as g.
        self.scopes[scope] = snapshot
        self._bump(scope)

    def settle(self, scope: Agent | None, undo: ScopeSnapshot | None = None) -> None:
        """End ``scope``'s pending change: accepted, or rolled back by
        publishing ``undo`` (its scope actor only). Either way the
        generation moves: what reads see changed (see committed())."""
        with self._pending_lock:
            if undo is not None:
                self.publish(undo)  # (before the entry goes: see committed())
            else:
                self._bump(scope)
            del self._pending[scope]

    def retire(self, scope: Agent | None) -> None:
        """Drop ``scope``'s entry if its layer is empty (the registry actor,
        once the scope's actor has handled everything and retires)."""
        snap = self.scopes.get(scope)
        if snap is not None and snap.empty:
            del self.scopes[scope]
            self._bump(scope)

    def views(self) -> _ViewCache:
        """The cache of computed views for the current generation. A read
        racing a publication (the generation it read was replaced
        meanwhile) gets a fresh cache that nobody keeps."""
        gen = self.generation  # read first: see publish
        cache = self._cache
        if cache.generation != gen:
            return _ViewCache(gen)
        return cache

    def _bump(self, scope: Agent | None) -> None:
        with self._gen_lock:
            generation = self.generation + 1
            if scope is None:
                self.global_changed_at = generation
            else:
                self.changed_at[scope] = generation
            # The previous generation's views go with it, now: they may hold
            # registrations just removed, and through them their agent.
            self._cache = _ViewCache(generation)
            self._committed_cache = _ViewCache(generation)
            self.generation = generation

    def changed_since(self, generation: int, agent: Agent | None) -> bool:
        """Whether a scope on ``agent``'s chain (the global scope included)
        was published or retired after ``generation``: what a call of
        ``agent`` sees may have changed. (Read ``generation`` before the
        call that leads here; a change landing meanwhile may be seen or
        not, as any change racing a read.)"""
        if self.global_changed_at > generation:
            return True
        changed_at = self.changed_at
        node = agent
        while node is not None:
            if changed_at.get(node, 0) > generation:
                return True
            node = node.parent
        return False

    # -- live admissions (tool-set actors add them, scope actors read them) ---

    def add_toolset(self, admission: LiveToolSet) -> None:
        """List ``admission`` as live: scope actors tell it what every later
        change withdrew."""
        key = id(admission)
        with self._toolsets_lock:
            self._toolsets[key] = admission
            for node in _chain(admission.agent):
                self._toolsets_in.setdefault(node, weakref.WeakValueDictionary())[key] = admission

    def remove_toolset(self, admission: LiveToolSet) -> None:
        key = id(admission)
        with self._toolsets_lock:
            if self._toolsets.get(key) is not admission:
                return
            del self._toolsets[key]
            for node in _chain(admission.agent):
                filed = self._toolsets_in.get(node)
                if filed is not None:
                    filed.pop(key, None)
                    if not filed:
                        del self._toolsets_in[node]

    def live_toolsets(self, scope: Agent | None = None) -> tuple[LiveToolSet, ...]:
        """The admissions being resolved or live now that a change of
        ``scope`` can affect (:func:`in_chain`): those of ``scope`` and its
        descendants (every one for the global scope, ``None``)."""
        toolsets = self._toolsets
        if not toolsets:
            return ()
        with self._toolsets_lock:
            if scope is None:
                return tuple(toolsets.values())
            filed = self._toolsets_in.get(scope)
            return () if filed is None else tuple(filed.values())

    def __repr__(self) -> str:
        return f"<RegistryState generation={self.generation} scopes={len(self.scopes)}>"


# --------------------------------------------------------------------------
# Visibility
# --------------------------------------------------------------------------


def describe_scope(scope: Agent | None) -> str:
    """``agent "main/sub"`` or ``the global scope``, for messages."""
    if scope is None:
        return "the global scope"
    try:
        return f'agent "{scope.path}"'
    except Exception:  # noqa: BLE001 - a hostile id
        return "an agent"


def _chain(agent: Agent | None) -> tuple[Agent, ...]:
    return () if agent is None else agent.chain()


def in_chain(scope: Agent | None, agent: Agent | None) -> bool:
    """Whether a change in ``scope`` can affect what ``agent`` sees."""
    return scope is None or in_scope(scope, agent)


def _admits(filters: tuple[_Filter, ...], name: str) -> bool:
    for allow, deny in filters:
        if allow is not None and name not in allow:
            return False
        if deny is not None and name in deny:
            return False
    return True


def _layered(
    scopes: Mapping[Agent | None, ScopeSnapshot], agent: Agent | None, *, own: bool
) -> dict[str, Registration]:
    """The visibility rule. ``own=False`` gives what ``agent`` *inherits*:
    global plus ancestors' own registrations, filtered by the ancestors'
    restrictions only (what a new restriction of ``agent`` may name)."""
    glob = scopes.get(None)
    result: dict[str, Registration] = dict(glob.registrations) if glob is not None else {}
    if agent is None:
        return result
    chain = agent.chain()
    ancestors = chain[:-1]
    for node in ancestors:
        snap = scopes.get(node)
        if snap is not None and snap.registrations:
            result.update(snap.registrations)
    filtered_by = chain if own else ancestors
    for node in filtered_by:
        snap = scopes.get(node)
        if snap is not None and snap.filters:
            filters = snap.filters
            result = {name: reg for name, reg in result.items() if _admits(filters, name)}
    if own:
        mine = scopes.get(agent)
        if mine is not None and mine.registrations:
            result.update(mine.registrations)
    return result


def inherited(state: RegistryState, agent: Agent) -> dict[str, Registration]:
    """What ``agent`` inherits (global + ancestors' own, filtered by the
    ancestors' restrictions): the names a restriction of ``agent`` may use."""
    return _layered(state.scopes, agent, own=False)


def _visible(state: RegistryState, agent: Agent | None) -> Mapping[str, Registration]:
    return _cached_view(state.views(), state.scopes, agent)


def _cached_view(
    cache: _ViewCache, scopes: Mapping[Agent | None, ScopeSnapshot], agent: Agent | None
) -> Mapping[str, Registration]:
    """``agent``'s view of ``scopes``, from ``cache`` (the views of the
    generation ``scopes`` describe), computed and kept there on a miss."""
    if agent is None:
        view = cache.global_view
        if view is None:
            view = cache.global_view = _compute_view(scopes, None)
        return view
    key = id(agent)
    entry = cache.views.get(key)
    if entry is not None and entry[0]() is agent:
        return entry[1]
    view = _compute_view(scopes, agent)
    views = cache.views
    if len(views) >= _CACHE_LIMIT:
        try:
            views.popitem(last=False)  # the view computed longest ago (one call, safe among threads)
        except KeyError:  # (other threads emptied it meanwhile)
            pass
    views[key] = (weakref.ref(agent, _forget_view(cache, key)), view)
    return view


def _compute_view(scopes: Mapping[Agent | None, ScopeSnapshot], agent: Agent | None) -> Mapping[str, Registration]:
    layered = _layered(scopes, agent, own=True)
    ordered = sorted(layered.values(), key=_by_seq)
    return MappingProxyType({reg.name: reg for reg in ordered})


def _by_seq(reg: Registration) -> int:
    return reg.seq


def committed(state: RegistryState, agent: Agent | None) -> Mapping[str, Registration]:
    """What ``agent`` sees in the committed registry: :func:`visible`
    without the changes still pending (published, their ``tools/change``
    listeners running). What decides a call and the tools the model is
    offered (:func:`callable_view`), what a resolution reads its candidates
    from, and what scope actors tell live sets they still see, so none of
    them depends on a state a rollback undoes. With no change pending it
    is the cached view, read without a lock."""
    generation = state.generation  # read first: settling a change moves it
    if not state._pending:
        view = _visible(state, agent)
        # Nothing was pending before the read, nothing is after it, and
        # nothing was settled meanwhile: ``view`` is committed.
        if not state._pending and state.generation == generation:
            return view
    with state._pending_lock:  # no change starts or settles meanwhile
        pending = state._pending
        if not pending:
            return _visible(state, agent)
        # Cached for the generation: a change starts, settles or is
        # published elsewhere only by moving it (every call's lookup reads
        # this while a tools/change listener runs).
        cache = state._committed_cache
        if cache.generation != state.generation:
            cache = state._committed_cache = _ViewCache(state.generation)
        scopes = cache.scopes
        if scopes is None:
            scopes = cache.scopes = {**state.scopes, **pending}  # (this generation's committed scopes)
        return _cached_view(cache, scopes, agent)


def visible(
    state: RegistryState, agent: Agent | None, tool_set: ToolSetRef | None = None
) -> Mapping[str, Registration]:
    """The registrations ``agent`` (``None``: the global view) sees, by name,
    in registration order (read-only; do not keep it across changes).

    Without ``tool_set``: every visible registration, conditional ones
    included (inspection). With one: only what the set admitted for exactly
    this agent and still sees (another agent's set admits nothing).
    """
    if tool_set is None:
        return _visible(state, agent)
    return tool_set.admitted_in(state, agent)


def lookup(
    state: RegistryState, name: str, agent: Agent | None, tool_set: ToolSetRef | None = None
) -> Registration | None:
    """``get``: the registration ``agent`` resolves ``name`` to, conditional
    ones included when no ``tool_set`` is given."""
    return visible(state, agent, tool_set).get(name)


def callable_view(
    state: RegistryState, agent: Agent | None, tool_set: ToolSetRef | None = None
) -> Mapping[str, Registration]:
    """What decides the calls of ``agent`` and the tools it is offered, by
    name: with ``tool_set``, what the set admits; without one, what
    ``agent`` sees in the committed registry, conditional registrations
    included (which only a set makes callable: see :func:`executable`).
    Never a change a ``tools/change`` listener may still roll back."""
    if tool_set is not None:
        return tool_set.admitted_in(state, agent)
    return committed(state, agent)


def executable(
    state: RegistryState, name: str, agent: Agent | None, tool_set: ToolSetRef | None = None
) -> Registration | None:
    """The registration a call of ``name`` by ``agent`` may run, or ``None``
    (the call fails as ``UNKNOWN_TOOL``), from :func:`callable_view`. With
    ``tool_set`` the set decides; without one, conditional registrations
    are not executable."""
    return executable_in(callable_view(state, agent, tool_set), name, tool_set)


def executable_in(
    view: Mapping[str, Registration], name: str, tool_set: ToolSetRef | None = None
) -> Registration | None:
    """:func:`executable`, in ``view``: a :func:`callable_view` read once
    for many names (the calls of a batch)."""
    reg = view.get(name)
    if reg is None or not is_callable(reg, tool_set):
        return None
    return reg


def is_callable(reg: Registration, tool_set: ToolSetRef | None) -> bool:
    """Whether ``reg``, read from :func:`callable_view` with ``tool_set``,
    may be called: the set decides; without one, a conditional tool may not
    (only a step that admitted it calls it)."""
    return tool_set is not None or reg.when is None


def definitions(state: RegistryState, agent: Agent | None, tool_set: ToolSetRef | None = None) -> list[ToolDefinition]:
    """The visible definitions (see :func:`visible`), in registration order.
    A fresh list of the registered (borrowed) definitions."""
    return [reg.definition for reg in visible(state, agent, tool_set).values()]


def schemas(state: RegistryState, agent: Agent | None, tool_set: ToolSetRef | None = None) -> list[ToolSchema]:
    """One fresh ``{"name", "description", "parameters"}`` dict per visible
    tool (see :func:`visible`: without ``tool_set``, conditional tools
    included, which the model is offered only by a set that admits them).
    ``parameters`` is a deep plain copy of the schema checked at
    registration: mutating the result never affects the registry, and no
    callback, ``timeout_ms``, classifier or ``meta`` ever appears in it."""
    loads = orjson.loads
    return [loads(reg.schema_json) for reg in visible(state, agent, tool_set).values()]


def has_guards(state: RegistryState, agent: Agent | None) -> bool:
    """Whether any guard applies to calls of ``agent`` (whether
    :func:`check_guards` would run one). Without a generator: the executor
    asks it per call."""
    scopes = state.scopes
    snap = scopes.get(None)
    if snap is not None and snap.guards:
        return True
    if agent is not None:
        for layer in agent.chain():
            snap = scopes.get(layer)
            if snap is not None and snap.guards:
                return True
    return False


def check_guards(state: RegistryState, execution: ToolExecution) -> str | None:
    """Run the guards that apply to ``execution.agent``: the global layer's
    first, then the scope chain farthest first, each layer in registration
    order. The first reason (a ``str``) denies: it is returned and no later
    guard runs. ``None`` when no guard denies.

    Fail closed: a guard that raises, or returns something that is neither a
    ``str`` nor ``None``, denies with ``guard <name> failed: ...``; an empty
    string denies with ``guard <name> denied the call``. Guards run on the
    calling thread (the executor preparing the call), in this call.
    """
    return guard_verdict(state, execution)[0]


def guard_verdict(state: RegistryState, execution: ToolExecution) -> tuple[str | None, BaseException | None]:
    """:func:`check_guards`'s reason, and the exception of the guard that
    raised (None when no guard raised)."""
    # (No generator over the layers: the executor asks this per call.)
    scopes = state.scopes
    snap = scopes.get(None)
    if snap is not None and snap.guards:
        verdict = _layer_verdict(snap.guards, execution)
        if verdict is not None:
            return verdict
    agent = execution.agent
    if agent is not None:
        for layer in agent.chain():
            snap = scopes.get(layer)
            if snap is not None and snap.guards:
                verdict = _layer_verdict(snap.guards, execution)
                if verdict is not None:
                    return verdict
    return _NO_VERDICT


_NO_VERDICT: tuple[None, None] = (None, None)


def _layer_verdict(guards: Any, execution: ToolExecution) -> tuple[str, BaseException | None] | None:
    """The first denial among one layer's ``guards`` (in registration
    order), or None when none of them denies."""
    for contribution in guards:
        fn = contribution.value
        try:
            reason = fn(execution)
        except BaseException as exc:  # noqa: BLE001 - fail closed, never propagate
            return f"guard {_guard_name(fn)} failed: {exception_text(exc)}", exc
        if reason is None:
            continue
        if type(reason) is not str:
            return (
                f"guard {_guard_name(fn)} failed: it returned {type(reason).__qualname__} (expected str or None)"
            ), None
        return (reason if reason else f"guard {_guard_name(fn)} denied the call"), None
    return None


def _guard_name(fn: Any) -> str:
    """How a guard is named in the message the model reads: its name as
    written (``check_paths``), not where it was defined
    (``make.<locals>.check_paths``)."""
    return callable_name(fn).rpartition("<locals>.")[2]


def execution_mode(
    state: RegistryState,
    name: str,
    args: Any,
    agent: Agent | None,
    tool_set: ToolSetRef | None = None,
) -> ExecutionMode:
    """``"parallel"`` only when the executable definition's
    ``is_concurrency_safe(args)`` returns exactly ``True``; a missing
    classifier, an exception, any other answer (truthy non-bools included)
    or an unknown tool mean ``"exclusive"``. The classifier runs on the
    calling thread."""
    reg = executable(state, name, agent, tool_set)
    if reg is None:
        return "exclusive"
    return definition_mode(reg.definition, args)


def definition_mode(definition: ToolDefinition, args: Any) -> ExecutionMode:
    """The execution mode ``definition``'s classifier gives ``args`` (see
    :func:`execution_mode`)."""
    classifier = definition.is_concurrency_safe
    if classifier is None:
        return "exclusive"
    try:
        answer = classifier(args)
    except BaseException as err:  # noqa: BLE001 - a failing classifier means exclusive
        classifier_failed(definition.name, err)
        return "exclusive"
    return "parallel" if answer is True else "exclusive"


def select_executor(state: RegistryState, agent: Agent | None) -> Any:
    """The executor for a batch of ``agent``: the nearest contribution on its
    chain (its own scope, then its ancestors nearest first, then global);
    ``None`` when no scope on the chain contributes one."""
    scopes = state.scopes
    node = agent
    while node is not None:
        snap = scopes.get(node)
        if snap is not None and snap.executors:
            return snap.executors[-1].value
        node = node.parent
    glob = scopes.get(None)
    if glob is not None and glob.executors:
        return glob.executors[-1].value
    return None
