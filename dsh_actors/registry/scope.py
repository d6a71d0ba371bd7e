"""ScopeActor: the only writer of one layer of the registry.

A scope actor is spawned by the registry actor the first time a write for
its scope arrives, and retired (stopped, its empty entry removed) when its
layer becomes empty again; the global layer's actor lives as long as the
runtime. It handles one write at a time, on its own thread:

1. validate the request against its layer (and the published layers it
   inherits),
2. publish the new immutable snapshot (readers see it at once); a
   ``RegisterAll`` (registrations and withdrawals together) is one
   snapshot, as a ``Register`` or an ``Unregister`` is (``_change``, the one
   way registrations change), so no reader sees a part of it,
3. for registrations and restrictions, announce ``tools/change`` to every
   listener, on this thread; if a listener raises, publish the previous
   layer again, tell the listeners that already ran (their errors are
   logged and contained), and fail the request with a ``RegistrationError``
   whose ``__cause__`` is the listener's exception. Until the listeners
   accepted it the change is pending: what decides a call, what the model
   is offered and resolutions read the registry as committed
   (:func:`~dsh_actors.visibility.committed`), without it, so a
   rolled-back change never runs a tool nor reaches a resolved set,
4. once the change is committed, tell every live resolved tool set on the
   affected chains what they can still see (committed), so a replaced or
   restricted admission is withdrawn for good before this actor handles
   another write.

``tools/change`` listeners therefore run on a scope actor's thread: they may
read the registry (reads never wait), but a write from there would wait for
this very actor; ``ToolsService`` refuses it with a clear error (and
queues a disposer instead).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import CoroutineType
from typing import TYPE_CHECKING, Any, assert_never

import pykka
from loguru import logger

from ..actors import ActorBase, ActorGroup, settle
from ..definition import ToolDefinition, is_async_callable, reserved_name_problem, validate_definition
from ..errors import InvalidTypeError, RegistrationError, callable_name, safe_str
from ..events import drop_coroutine
from ..messages import AddGuard, Register, RegisterAll, Restrict, Retract, SetExecutor, Unregister
from ..model import Agent, ToolRestriction
from ..visibility import (
    RESERVED_NAMES,
    Contribution,
    Registration,
    ScopeSnapshot,
    _compile_filter,
    _next_seq,
    committed,
    describe_scope,
    inherited,
)
from ._private import RELEASE, WriteReply, WriteRequest, _Apply, _ScopeIdle, release_last_message

if TYPE_CHECKING:  # pragma: no cover
    from ..kernel import Kernel

__all__ = ["ScopeActor"]


def _quoted(names: list[str] | tuple[str, ...]) -> str:
    return ", ".join(f'"{n}"' for n in names) if names else "(none)"


def _notify(fn: Callable[[], object]) -> None:
    """Tell a ``tools/change`` listener (one that returns a coroutine, an
    ``async def`` behind a sync wrapper, has it closed and logged)."""
    if type(result := fn()) is CoroutineType:
        drop_coroutine("tools/change", fn, result)


def _listener_problem(exc: BaseException) -> str:
    detail = safe_str(exc)
    return f"a tools/change listener raised {type(exc).__name__}" + (f": {detail}" if detail else "")


def _when_problem(when: object) -> str | None:
    if when is not None and not callable(when):
        return f"when must be callable or None (got {type(when).__qualname__})"
    return None


def _first(errors: list[RegistrationError]) -> RegistrationError:
    """A one-tool change's refusal: that tool's error."""
    return errors[0]


def _items(value: object, field: str, kind: str) -> Sequence[Any]:
    """``RegisterAll.<field>``, a tuple (or list) of ``kind``."""
    if not isinstance(value, (tuple, list)):
        raise RegistrationError(f"RegisterAll.{field} is a tuple of {kind}, not {type(value).__qualname__}")
    return value


def duplicate_problem(scope: Agent | None, fix: str | None = None) -> str:
    """A duplicate name in ``scope``'s layer, and the ways out (``fix``, or
    registration's own: replace the first registration, ``register_all``'s
    ``replacing``; rename this one; or shadow it from a nearer scope;
    section 4 of docs/reference.md).
    The one wording of it: ``dsh_actors.mcp`` gives a server's tool the
    mount's fix."""
    taken = f"a tool with this name is already registered in {describe_scope(scope)}"
    if fix is not None:
        return f"{taken}: {fix}"
    nearer = (
        "register it in an agent's scope, rt.tools.scope(agent).register(...), to shadow it for that agent"
        if scope is None
        else "register it in a sub-agent's scope (Agent(..., parent=...)) to shadow it there"
    )
    return (
        f"{taken} (to replace it, pass the disposer the first register() returned to "
        "register_all([definition], replacing=[disposer]), which swaps them in one change; "
        f"or give this one another name, @tool(name=...) or define_tool(name=...); or {nearer})"
    )


class ScopeActor(ActorBase):
    """Owns the layer of ``scope`` (``None``: global). See the module doc."""

    def __init__(
        self,
        group: ActorGroup,
        kernel: Kernel,
        bind_executor: Callable[[Any], None],
        scope: Agent | None,
        registry: pykka.ActorRef[Any],
    ) -> None:
        super().__init__(group)
        self.kernel = kernel
        self._bind_executor = bind_executor
        self.scope = scope
        self._state = kernel.state
        self._registry = registry
        self._snap: ScopeSnapshot = self._state.snapshot(scope)
        self._handled = 0

    def __repr__(self) -> str:
        return f"<ScopeActor {describe_scope(self.scope)} v{self._snap.version}>"

    # -- the loop ----------------------------------------------------------

    def receive(self, message: Any) -> Any:
        if message is RELEASE:
            return None
        if not isinstance(message, _Apply):
            raise InvalidTypeError(f"a scope actor does not understand {type(message).__qualname__}")
        self._handled += 1
        value: Any = None
        error: BaseException | None = None
        reply = message.reply
        if isinstance(reply, WriteReply) and not reply.begin():
            pass  # its caller gave up waiting before it started (and was told nothing changed)
        else:
            try:
                value = self._apply(message.request)
            except BaseException as exc:  # noqa: BLE001 - goes to the requester
                error = exc
        if self.scope is not None and self._snap.empty:
            # Before replying: whatever the requester sends the registry next
            # is handled after this notice.
            try:
                self._registry.tell(_ScopeIdle(scope=self.scope, actor_urn=self.actor_urn, handled=self._handled))
            except pykka.ActorDeadError:
                pass
        settle(reply, value, error)
        release_last_message(self)  # (what it held, a definition or a reply, is not kept by this loop)
        return None

    def _apply(self, request: WriteRequest) -> Any:
        match request:
            case Register():
                return self._register(request)
            case RegisterAll():
                return self._register_all(request)
            case Unregister():
                return self._unregister(request)
            case Restrict():
                return self._restrict(request)
            case AddGuard():
                return self._add_guard(request)
            case SetExecutor():
                return self._set_executor(request)
            case Retract():
                return self._retract(request)
            case _:
                assert_never(request)

    # -- publication -------------------------------------------------------

    def _publish(self, snap: ScopeSnapshot) -> None:
        self._snap = snap
        self._state.publish(snap)

    def _commit(
        self,
        snap: ScopeSnapshot,
        *,
        announce: bool,
        failure: Callable[[BaseException], RegistrationError] | None = None,
    ) -> None:
        """Publish ``snap``; with ``announce``, emit ``tools/change`` and roll
        back (raising ``failure(exc)`` from ``exc``) if a listener raises."""
        if not announce:
            self._publish(snap)
            return
        old = self._snap
        state = self._state
        listeners = self.kernel.events.listeners("tools/change")
        self._snap = snap
        state.publish(snap, pending=True)
        notified = 0
        try:
            for fn in listeners:
                _notify(fn)
                notified += 1
        except BaseException as exc:  # noqa: BLE001 - rolled back, reported to the caller
            self._snap = undo = old.evolve()
            state.settle(self.scope, undo)
            for fn in listeners[:notified]:
                try:
                    _notify(fn)  # they saw the change: let them see it undone
                except BaseException as again:  # noqa: BLE001 - contained, as emit does
                    logger.opt(exception=again).error(
                        "tools/change listener raised while a change was rolled back: {}", safe_str(again)
                    )
            assert failure is not None
            raise failure(exc) from exc
        state.settle(self.scope)
        self._note_toolsets()

    def _note_toolsets(self) -> None:
        # Runs after the change is committed and before this actor handles
        # anything else, so no later write of this scope (a lift, an
        # unregister of a shadowing tool) can re-expose a withdrawn admission.
        # (Only the sets on this scope's chains: those of it and its descendants.)
        state = self._state
        for ts in state.live_toolsets(self.scope):
            try:
                ts.note_visible(committed(state, ts.agent))
            except Exception:  # pragma: no cover - defensive: never fail a committed change
                logger.exception("recording a withdrawal in {!r} failed", ts)

    # -- registrations -----------------------------------------------------

    def _register(self, request: Register) -> Registration:
        defn = request.definition
        name = defn.name if isinstance(defn, ToolDefinition) else None

        def failure(exc: BaseException) -> RegistrationError:
            return RegistrationError(f"{_listener_problem(exc)}; the registration was rolled back", tool=name)

        return self._change((defn,), request.when, (), failure)[0][0]

    def _unregister(self, request: Unregister) -> bool:
        reg = request.registration
        if not isinstance(reg, Registration):
            raise RegistrationError(f"Unregister takes a Registration, got {type(reg).__qualname__}")

        def failure(exc: BaseException) -> RegistrationError:
            return RegistrationError(
                f'cannot unregister tool "{reg.name}" from {describe_scope(self.scope)}: '
                f"{_listener_problem(exc)}; the tool stays registered"
            )

        if self._snap.registrations.get(reg.name) is not reg:
            return False  # (withdrawn already: nothing to copy or announce)
        return self._change((), None, (reg,), failure)[1]

    def _register_all(self, request: RegisterAll) -> tuple[Registration, ...]:
        where = describe_scope(self.scope)
        definitions = _items(request.definitions, "definitions", "ToolDefinitions")
        replacing = _items(request.replacing, "replacing", "Registrations")
        wrong_when = _when_problem(request.when)
        if wrong_when is not None:
            raise RegistrationError(f"cannot register tools in {where}: {wrong_when}")
        for reg in replacing:
            if not isinstance(reg, Registration):
                raise RegistrationError(f"RegisterAll.replacing holds Registrations, not {type(reg).__qualname__}")
            if reg.scope is not self.scope:
                raise RegistrationError(
                    f'cannot replace tool "{reg.name}" in {where}: it is registered in {describe_scope(reg.scope)} '
                    "(replace it in its own scope: rt.tools.scope(agent) for an agent's, rt.tools for the global one)"
                )

        def refused(errors: list[RegistrationError]) -> RegistrationError:
            return RegistrationError("; ".join(err.message for err in errors), errors=tuple(errors))

        def failure(exc: BaseException) -> RegistrationError:
            return RegistrationError(
                f"cannot change the tools of {where}: {_listener_problem(exc)}; the change was rolled back"
            )

        return self._change(definitions, request.when, replacing, failure, refused)[0]

    def _change(
        self,
        definitions: Sequence[Any],
        when: Any,
        withdraw: Sequence[Registration],
        failure: Callable[[BaseException], RegistrationError],
        refused: Callable[[list[RegistrationError]], RegistrationError] = _first,
    ) -> tuple[tuple[Registration, ...], bool]:
        """The one way this layer's registrations change: register
        ``definitions`` (each with ``when``) and withdraw the registrations
        of ``withdraw`` still in the layer, as ONE snapshot, published and
        announced once (not at all when it changes nothing), so no reader
        sees a part of it: a definition may take a withdrawn one's name and
        the name is never missing. Refused definitions raise
        ``refused(their errors)`` before anything is published; a listener
        that raises rolls it all back (``failure``). Returns the new
        registrations, in order, and whether anything was withdrawn."""
        regs = dict(self._snap.registrations)
        withdrawn = False
        for reg in withdraw:
            if regs.get(reg.name) is reg:
                del regs[reg.name]
                withdrawn = True
        made: list[Registration] = []
        ours: set[str] = set()
        errors: list[RegistrationError] = []
        for defn in definitions:
            try:
                reg = self._registration(defn, when, regs, ours)
            except RegistrationError as err:
                errors.append(err)
                continue
            regs[reg.name] = reg
            ours.add(reg.name)
            made.append(reg)
        if errors:
            raise refused(errors)
        if made or withdrawn:
            self._commit(self._snap.evolve(registrations=regs), announce=True, failure=failure)
        return tuple(made), withdrawn

    def _registration(self, defn: Any, when: Any, regs: Mapping[str, Registration], ours: set[str]) -> Registration:
        """``defn`` registered with ``when`` in this layer, which holds
        ``regs`` (``ours``: the names the change registers before it); or
        the ``RegistrationError`` naming the tool and every problem."""
        problems: list[str] = []
        checked = None
        try:
            checked = validate_definition(defn)
        except RegistrationError as err:
            if not isinstance(defn, ToolDefinition):
                raise
            problems.append(err.problem)
        name = defn.name if type(defn.name) is str and defn.name else None
        reserved = reserved_name_problem(name)
        if reserved is not None:
            problems.insert(0, reserved)
        wrong_when = _when_problem(when)
        if wrong_when is not None:
            problems.append(wrong_when)
        if name is not None and name in ours:
            problems.append("another of the definitions registered with it has this name")
        elif name is not None and name in regs:
            problems.append(duplicate_problem(self.scope))
        if problems or checked is None:
            raise RegistrationError("; ".join(problems), tool=name)
        return Registration(definition=defn, checked=checked, scope=self.scope, when=when, seq=_next_seq())

    # -- restrictions ------------------------------------------------------

    def _restrict(self, request: Restrict) -> Contribution:
        scope = self.scope
        if scope is None:
            raise RegistrationError(
                "restrict() needs a scoped service (rt.tools.scope(agent).restrict(...)): "
                "the global layer inherits nothing to filter"
            )
        where = describe_scope(scope)
        restriction = request.restriction
        if not isinstance(restriction, ToolRestriction):
            raise RegistrationError(
                f"cannot restrict {where}: expected a ToolRestriction, got {type(restriction).__qualname__}"
            )
        allow = _names(restriction.allow, "allow", where)
        deny = _names(restriction.deny, "deny", where)
        copy = ToolRestriction(allow=allow, deny=deny)
        if _compile_filter(copy) == (None, None):  # (what the filter is read as: an empty list names nothing)
            raise RegistrationError(
                f"cannot restrict {where}: the restriction is empty (give allow and/or deny tool names)"
            )
        named = tuple(dict.fromkeys((*(allow or ()), *(deny or ()))))
        reserved = [n for n in named if n in RESERVED_NAMES]
        if reserved:
            raise RegistrationError(
                f"cannot restrict {where}: {_quoted(reserved)} is the reserved code-mode transport "
                "and cannot be restricted"
            )
        known = inherited(self._state, scope)
        unknown = [n for n in named if n not in known]
        if unknown:
            own = [n for n in unknown if n in self._snap.registrations]
            note = (
                f" ({_quoted(own)} {'is' if len(own) == 1 else 'are'} registered in this scope itself, "
                "and a scope's own tools are never restricted for the scope itself)"
                if own
                else ""
            )
            raise RegistrationError(
                f"cannot restrict {where}: unknown tool name{'s' if len(unknown) > 1 else ''} "
                f"{_quoted(unknown)}{note}; the names it inherits are: {_quoted(sorted(known))}"
            )
        contribution = Contribution(
            kind="restriction",
            scope=scope,
            value=copy,
            seq=_next_seq(),
        )

        def failure(exc: BaseException) -> RegistrationError:
            return RegistrationError(
                f"cannot restrict {where}: {_listener_problem(exc)}; the restriction was rolled back"
            )

        self._commit(
            self._snap.evolve(restrictions=(*self._snap.restrictions, contribution)),
            announce=True,
            failure=failure,
        )
        return contribution

    # -- guards and executors ----------------------------------------------

    def _add_guard(self, request: AddGuard) -> Contribution:
        fn = request.guard
        if not callable(fn):
            raise RegistrationError(
                f"a guard must be callable: fn(execution) -> str | None (got {type(fn).__qualname__})"
            )
        if is_async_callable(fn):
            raise RegistrationError(
                f"guard {callable_name(fn)} is async def, but guards run on the runtime's threads and are never "
                "awaited: make it a plain def (an async check belongs in an async tools/pre-execute listener)"
            )
        contribution = Contribution(kind="guard", scope=self.scope, value=fn, seq=_next_seq())
        self._commit(self._snap.evolve(guards=(*self._snap.guards, contribution)), announce=False)
        return contribution

    def _set_executor(self, request: SetExecutor) -> Contribution:
        executor = request.executor
        runs = callable(getattr(executor, "submit", None)) or callable(getattr(executor, "execute", None))
        if not callable(getattr(executor, "describe", None)) or not runs:
            raise RegistrationError(
                "an executor needs describe(tools) and submit(batch) or execute(batch); "
                f"{type(executor).__qualname__} does not have them"
            )
        self._bind_executor(executor)  # once per executor and runtime; holds no lock while bind runs
        contribution = Contribution(kind="executor", scope=self.scope, value=executor, seq=_next_seq())
        self._commit(self._snap.evolve(executors=(*self._snap.executors, contribution)), announce=False)
        return contribution

    def _retract(self, request: Retract) -> bool:
        contribution = request.contribution
        if not isinstance(contribution, Contribution):
            raise RegistrationError(f"Retract takes a Contribution, got {type(contribution).__qualname__}")
        snap = self._snap
        kind = contribution.kind
        field = {"restriction": "restrictions", "guard": "guards", "executor": "executors"}[kind]
        items: tuple[Contribution, ...] = getattr(snap, field)
        if not any(item is contribution for item in items):
            return False
        kept = tuple(item for item in items if item is not contribution)

        def failure(exc: BaseException) -> RegistrationError:
            return RegistrationError(
                f"cannot lift a restriction of {describe_scope(self.scope)}: "
                f"{_listener_problem(exc)}; the restriction stays in place"
            )

        self._commit(snap.evolve(**{field: kept}), announce=kind == "restriction", failure=failure)
        return True


def _names(names: object, field: str, where: str) -> tuple[str, ...] | None:
    if names is None:
        return None
    if isinstance(names, str) or not isinstance(names, (tuple, list, frozenset, set)):
        raise RegistrationError(
            f"cannot restrict {where}: {field} must be a sequence of tool names (got {type(names).__qualname__})"
        )
    out = tuple(names)
    bad = [n for n in out if type(n) is not str]
    if bad:
        raise RegistrationError(f"cannot restrict {where}: {field} names must be str (got {type(bad[0]).__qualname__})")
    return out
