"""ToolsService: the blocking facade over the registry actor's messages.

``rt.tools`` is the global service; ``rt.tools.scope(agent)`` is the same
service seen from, and writing into, ``agent``'s scope. Reads
(:meth:`~ToolsService.get`, :meth:`~ToolsService.executable`,
:meth:`~ToolsService.definitions`, :meth:`~ToolsService.schemas`,
:meth:`~ToolsService.check_guards`) read published snapshots on the calling
thread; writes send a message and wait for the reply, at most
``ASK_TIMEOUT`` seconds, in the calling thread. A write that raises
``TimeoutError`` leaves nothing behind: one that had not started is never
applied, one that had is undone once applied (its caller has no disposer;
what a ``register_all`` replaced stays withdrawn).

Every effect returns a :class:`~dsh_actors.events.Disposer` that undoes
exactly that effect; calling it again does nothing, and calling it after
``rt.stop()`` does nothing. If a ``tools/change`` listener makes the undo
fail (and rolls it back), the disposer raises and stays armed.

Writes cannot wait from a ``tools/change`` listener: the listener runs on the
very scope actor that would have to handle the write. There, ``register``,
``register_all``, ``restrict``, ``guard`` and ``set_executor`` raise
``RegistrationError``; a disposer is queued instead (it takes effect right
after the change being announced settles, and returns at once).
"""

from __future__ import annotations

import _thread
import asyncio
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import nullcontext
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast, final

import pykka
from loguru import logger

from ..actors import ASK_TIMEOUT, actor_thread_ident
from ..errors import InvalidTypeError, RegistrationError, RuntimeStoppedError, safe_str
from ..events import Disposer
from ..execution import ToolExecutionInput
from ..kernel import STOPPED_REFUSAL, BatchFuture, refuse_blocking_a_loop
from ..messages import (
    AddGuard,
    Register,
    RegisterAll,
    ResolveToolSet,
    Restrict,
    Retract,
    SetExecutor,
    Unregister,
)
from ..model import (
    Agent,
    ModelSelection,
    ToolActivationContext,
    ToolBatchInput,
    ToolBatchResult,
    ToolExecutionResult,
    ToolRestriction,
)
from ..pipeline.flights import await_settled
from ..pipeline.stages import run_inline
from ..scheduling.interrupt import Interruptible
from ..scheduling.messages import CallStart, Reply
from ..scheduling.recovery import close_nested, recovery_plan, recovery_session, refuse_missing_tools
from ..scheduling.start import check_continuable, continue_batch, start_batch
from ..scheduling.suspension import checked_with_log, in_step, resume_plan
from ..signals import AbortController, AbortSignal
from ..toolset import ResolvedToolSet
from ..visibility import (
    Condition,
    Guard,
    Registration,
    check_guards,
    definitions,
    executable,
    lookup,
    schemas,
)
from ._private import STOPPED, WriteReply, WriteRequest
from .actor import RegistryActor
from .offer import model_tools
from .scope import ScopeActor

if TYPE_CHECKING:  # pragma: no cover
    from ..actors import PendingReplies
    from ..definition import ToolDefinition, ToolSchema
    from ..execution import ToolExecution
    from ..executor_protocol import ToolModelInput
    from ..kernel import Claims, Kernel
    from ..session import Session

__all__ = ["ToolsService"]

T = TypeVar("T")


class _Reply:
    """Where a caller blocked in :meth:`ToolsService.execute` gets its batch
    result: the part of ``concurrent.futures.Future`` an executor settles
    (``set_running_or_notify_cancel``, ``set_result``, ``set_exception``,
    ``done``) on one lock the caller waits on, without a Condition and its
    waiter list (nobody else can see this object: it is never cancelled
    and has no callbacks). Settled once; later settlements are ignored."""

    __slots__ = ("_lock", "_settled", "_value", "_error")

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self._lock.acquire()  # released once, when settled
        self._settled = _thread.allocate_lock()
        self._value: Any = None
        self._error: BaseException | None = None

    def set_running_or_notify_cancel(self) -> bool:
        return not self._settled.locked()

    def set_result(self, result: Any) -> None:
        if self._settled.acquire(False):
            self._value = result
            self._lock.release()

    def set_exception(self, exception: BaseException | None) -> None:
        if self._settled.acquire(False):
            self._error = exception if exception is not None else RuntimeError("the batch failed")
            self._lock.release()

    def done(self) -> bool:
        return self._settled.locked()

    def wait(self, timeout: float) -> bool:
        """Whether it is settled, waiting up to ``timeout`` seconds."""
        if self._lock.acquire(timeout=timeout):
            self._lock.release()  # (so that a second wait returns at once)
            return True
        return False

    def outcome(self) -> Any:
        error = self._error
        if error is not None:
            raise error
        return self._value


class _Own:
    """The default ``scope`` of a read: the service's own scope."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<the service's scope>"


_OWN: Final = _Own()


class _EffectDisposer(Disposer):
    """A disposer that stays armed when the undo fails (a ``tools/change``
    listener rolled it back, so the effect is still in place). ``_handle``:
    what it undoes (the registry's reply), for ``register_all(replacing=)``."""

    __slots__ = ("_handle",)

    def __init__(self, fn: Callable[[], Any], handle: Any) -> None:
        super().__init__(fn)
        self._handle = handle

    def spend(self) -> None:
        """Disarm it: its effect was undone otherwise (a ``register_all``
        replaced its registration)."""
        with self._lock:
            self._fn = self._handle = None

    def __call__(self) -> None:
        # (The handle goes with the undo: a registration holds its agent.)
        with self._lock:
            fn, self._fn = self._fn, None
            handle, self._handle = self._handle, None
        if fn is None:
            return
        try:
            fn()
        except BaseException:
            with self._lock:
                if self._fn is None:
                    self._fn, self._handle = fn, handle
            raise


@final
@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class ServiceLinks:
    """What a :class:`ToolsService` is given of its runtime (built once by
    ``ToolRuntime.start()``; every scoped service shares it)."""

    kernel: Kernel
    registry: pykka.ActorRef[Any]
    """The registry actor (``rt.registry``): where writes go."""
    pending_replies: PendingReplies
    """Callers blocked on a batch, failed at the end of ``rt.stop()``."""
    pending_writes: PendingReplies
    """Callers blocked on a registry write, failed when ``rt.stop()`` begins."""
    claims: Claims
    """The suspensions and logged steps this runtime resumed or recovers."""


class ToolsService:
    """The registry of one runtime, seen from one scope (``agent``; ``None``
    for the global service). Thread-safe; create scoped services freely
    with :meth:`scope` (they are cheap views)."""

    __slots__ = ("_links", "_kernel", "_state", "_scope")

    def __init__(self, links: ServiceLinks, scope: Agent | None = None) -> None:
        if scope is not None and not isinstance(scope, Agent):
            raise InvalidTypeError(f"a scope is an Agent or None, not {type(scope).__qualname__}")
        self._links = links
        self._kernel = links.kernel
        self._state = links.kernel.state
        self._scope = scope

    @property
    def agent(self) -> Agent | None:
        """The scope this service reads from and writes into (``None``: global)."""
        return self._scope

    def scope(self, agent: Agent | None) -> ToolsService:
        """The same registry seen from, and registering into, ``agent``'s
        scope (``None``: the global service)."""
        return ToolsService(self._links, agent)

    def __repr__(self) -> str:
        where = "global" if self._scope is None else repr(self._scope)
        return f"<ToolsService {where}>"

    # -- effects -----------------------------------------------------------

    def register(self, definition: ToolDefinition, *, when: Condition | None = None) -> Disposer:
        """Register ``definition`` in this service's layer; scoped tools
        shadow inherited ones of the same name, whichever came first.

        ``when(context)`` (sync or ``async def``) makes the tool conditional:
        only a step whose :meth:`resolve` admitted it may call it.

        Raises ``RegistrationError`` naming the tool: an invalid definition
        (every problem at once), the reserved name ``run_code``, a duplicate
        name in this layer, a ``when`` that is not callable, or a
        ``tools/change`` listener that raised (rolled back; its exception is
        the ``__cause__``). Returns the disposer that unregisters exactly
        this registration.
        """
        return self._effect(
            lambda f: Register(definition=definition, scope=self._scope, when=when, reply=f), _unregister
        )

    def register_all(
        self,
        definitions: Sequence[ToolDefinition],
        *,
        when: Condition | None = None,
        replacing: Sequence[Disposer] = (),
    ) -> list[Disposer]:
        """Register every one of ``definitions`` in this service's layer, and
        withdraw the registrations of ``replacing`` (disposers that
        :meth:`register` or :meth:`register_all` of this layer returned), as
        ONE change: a batch's lookup, what the model is offered and a
        resolution see the layer as it was or as it is after, never a part
        of it (a tool replaced by a definition of the same name is never
        missing), and ``tools/change`` is announced once. ``when`` applies
        to each definition (see :meth:`register`).

        Raises ``RegistrationError``, changing nothing, when definitions are
        refused (each refusal :meth:`register` would give, or a name given
        twice: the message lists every one, ``errors`` holds each
        definition's own), or when a ``tools/change`` listener raised
        (rolled back; its exception is the ``__cause__``). Returns one
        disposer per definition, in order, each unregistering exactly its
        registration; the disposers in ``replacing`` are spent (calling one
        does nothing). A ``TimeoutError`` once the change had started
        withdraws what it registered once it is applied (what it replaced
        stays withdrawn).
        """
        if not isinstance(cast(object, definitions), (list, tuple)):
            raise InvalidTypeError(
                "register_all(definitions) takes a list of ToolDefinitions, not "
                f"{type(definitions).__qualname__} (one definition: register(definition))"
            )
        if not isinstance(cast(object, replacing), (list, tuple)):
            raise InvalidTypeError(
                f"register_all(replacing=) takes a list of disposers, not {type(replacing).__qualname__}"
            )
        scope = self._scope
        replaced = [found for found in map(_replaced, replacing) if found is not None]
        withdrawn = tuple(reg for _, reg in replaced)
        done: tuple[Registration, ...] = self._write(
            lambda f: RegisterAll(tuple(definitions), scope=scope, when=when, replacing=withdrawn, reply=f),
            partial(_withdraw_all, scope),
        )
        for disposer, _ in replaced:
            disposer.spend()
        return [self._disposer(partial(_unregister, reg), reg) for reg in done]

    def restrict(self, restriction: ToolRestriction) -> Disposer:
        """Filter what this scope (and its descendants) inherit: the global
        layer and its ancestors' own tools. This scope's own registrations
        are never hidden from it; its descendants inherit them, so the
        restriction filters them there (an allow-list, which cannot name
        them, hides them from the descendants). Restrictions intersect; a deny-only filter admits
        inherited tools registered later, an allow-list excludes them. The
        names are copied now.

        Raises ``RegistrationError`` on the global service, for an empty
        filter, ``run_code``, or any name this scope does not inherit (its
        own names count as unknown; the message lists the known names).
        Returns the disposer that lifts exactly this restriction.
        """
        return self._effect(lambda f: Restrict(restriction=restriction, scope=self._scope, reply=f), _retract)

    def guard(self, fn: Guard) -> Disposer:
        """Add a monotonic guard ``fn(execution) -> str | None`` to this
        layer: it runs (on the thread preparing a call) only after
        pre-execute policy allowed the call, and a reason denies it. Returns
        the disposer that removes exactly this guard."""
        return self._effect(lambda f: AddGuard(guard=fn, scope=self._scope, reply=f), _retract)

    def set_executor(self, executor: Any) -> Disposer:
        """Provide the executor for this scope (global: the deployment
        default). Batches go to the nearest contribution on their agent's
        chain, chosen when each batch starts. ``executor.bind(runtime)``,
        if present, runs once per runtime first. Disposing leaves the scope
        without an executor until another is set (or restores the one it
        replaced in this scope)."""
        return self._effect(lambda f: SetExecutor(executor=executor, scope=self._scope, reply=f), _retract)

    # -- reads -------------------------------------------------------------

    def _viewer(self, scope: Agent | None | _Own) -> Agent | None:
        if isinstance(scope, _Own):
            return self._scope
        if scope is not None and not isinstance(scope, Agent):
            raise InvalidTypeError(f"a scope is an Agent or None, not {type(scope).__qualname__}")
        return scope

    @staticmethod
    def _set(tool_set: ResolvedToolSet | None) -> ResolvedToolSet | None:
        if tool_set is not None and not isinstance(tool_set, ResolvedToolSet):
            raise InvalidTypeError(
                f"tool_set is a ResolvedToolSet (from rt.tools.resolve) or None, not {type(tool_set).__qualname__}"
            )
        return tool_set

    def get(
        self,
        name: str,
        scope: Agent | None | _Own = _OWN,
        tool_set: ResolvedToolSet | None = None,
    ) -> ToolDefinition | None:
        """The definition ``scope`` resolves ``name`` to (scoped shadows
        inherited; restricted-away reads as absent), or ``None``. ``scope``
        defaults to this service's scope; pass ``None`` for the global view.
        Without ``tool_set`` conditional registrations are included
        (inspection); with one, only what it admits."""
        _check_name("get", name)
        reg = lookup(self._state, name, self._viewer(scope), self._set(tool_set))
        return None if reg is None else reg.definition

    def executable(
        self,
        name: str,
        scope: Agent | None | _Own = _OWN,
        tool_set: ResolvedToolSet | None = None,
    ) -> ToolDefinition | None:
        """The definition a call of ``name`` may run, or ``None`` (the call
        fails as ``UNKNOWN_TOOL``). With ``tool_set`` the set decides;
        without one, conditional registrations are not executable. Reads
        the committed registry, as a call's lookup does (a change whose
        ``tools/change`` listeners may still roll it back is not in it)."""
        _check_name("executable", name)
        reg = executable(self._state, name, self._viewer(scope), self._set(tool_set))
        return None if reg is None else reg.definition

    def definitions(
        self, scope: Agent | None | _Own = _OWN, tool_set: ResolvedToolSet | None = None
    ) -> list[ToolDefinition]:
        """The visible definitions, in registration order (a fresh list)."""
        return definitions(self._state, self._viewer(scope), self._set(tool_set))

    def schemas(self, scope: Agent | None | _Own = _OWN, tool_set: ResolvedToolSet | None = None) -> list[ToolSchema]:
        """One fresh, detached ``{"name", "description", "parameters"}`` dict
        per visible tool, in registration order: an inspection read, so
        without ``tool_set`` it lists conditional tools too, which
        :meth:`model_tools` leaves out (only a step whose set admits one is
        offered it); pass the step's set for what it admits. Raises
        ``RuntimeStoppedError`` once the runtime stops (as
        :meth:`model_tools`: it runs no step any more)."""
        _require(self._kernel)
        return schemas(self._state, self._viewer(scope), self._set(tool_set))

    def model_tools(self, agent: Agent | None = None, tool_set: ResolvedToolSet | None = None) -> ToolModelInput:
        """What the model is offered for ``agent``'s next step (``None``:
        this service's scope): the ``ToolModelInput`` that the executor
        which would run the agent's batch (the nearest on its chain) gives
        for what the agent may call. Under the native executor, one schema
        per callable tool; under PTC, only ``run_code`` (its description
        listing the tools as Python signatures). Without ``tool_set``
        conditional tools are left out (they are callable only in a step
        that admitted them); with one, exactly what it admits. It reads the
        committed registry: a change whose ``tools/change`` listeners may
        still roll it back is not offered (nor run). The schemas
        are fresh dicts. Runs ``describe`` on the calling thread; raises
        ``ExecutorUnavailableError`` when no executor is set, and
        ``RuntimeStoppedError`` once the runtime stops (it runs no step any
        more: a model offered its tools would call them in vain)."""
        _require(self._kernel)
        return model_tools(self._state, self._scope if agent is None else self._viewer(agent), self._set(tool_set))

    def check_guards(self, execution: ToolExecution) -> str | None:
        """The first denial of the guards that apply to ``execution.agent``
        (global first, then the chain farthest first), or ``None``. Guards
        run on the calling thread; one that fails denies."""
        return check_guards(self._state, execution)

    # -- conditional activation ----------------------------------------------

    def resolve(self, context: ToolActivationContext) -> ResolvedToolSet:
        """Evaluate every condition visible to ``context.agent`` once and
        return the step's complete selection; dispose it after the step's
        batch settles. Blocks the calling thread (conditions run elsewhere).

        Raises ``AbortError`` if ``context.signal`` aborts first, and
        ``ToolPolicyError`` (the condition's exception as ``__cause__``) if
        a condition raises; either way nothing is published. A sync
        condition cannot be stopped: one that waits must watch
        ``context.signal``, and an abort takes effect when it returns.
        """
        _check_context(context, "resolve()")
        refuse_blocking_a_loop(self._kernel, "resolve()", "resolve_async(context)", "its async conditions run")
        future: Future[ResolvedToolSet] = Future()
        self._tell(ResolveToolSet(context=context, reply=future), future)
        return self._wait(future, "the tool set resolution", limit=None)

    async def resolve_async(self, context: ToolActivationContext) -> ResolvedToolSet:
        """:meth:`resolve` without blocking the event loop: ``await`` it.
        ``async def`` conditions run on this very loop (so they may use what
        is bound to it); sync ones on the tool-set actor's thread."""
        _check_context(context, "resolve_async()")
        # Cancelling the awaiting task (asyncio.timeout does) cancels the
        # resolution: its conditions see their signal abort, and the
        # CancelledError goes on once the resolution has ended.
        controller = _following(context.signal)
        if controller is not None:
            context = replace(context, signal=controller.signal)
        asked = context

        def start(reply: Future[ResolvedToolSet], loop: Any) -> None:
            self._tell(ResolveToolSet(context=asked, reply=reply, loop=loop), reply)

        return await self._awaited(start, controller)

    # -- batches -----------------------------------------------------------

    def submit(self, batch: ToolBatchInput) -> Future[ToolBatchResult]:
        """Start ``batch`` on the nearest executor of its agent (a scoped
        service fills in its own agent when the batch has none) and return
        the future of its result. Never blocks; the future's ``result()``
        waits as :meth:`execute` does (a ``BatchFuture``: refused on a loop
        the batch's async tools need, lending the calling actor's slot)."""
        future: Future[ToolBatchResult] = BatchFuture(self._kernel)
        self._start(batch, future)
        return future

    def _start(
        self,
        batch: ToolBatchInput,
        reply: Reply,
        loop: Any = None,
        starts: Sequence[CallStart] | None = None,
        signal: AbortSignal | None = None,
    ) -> None:
        """Start ``batch`` into ``reply``. ``starts``: a continued batch
        (``scheduling.start.continue_batch``: a resumed suspension, a
        recovered step), one ``CallStart`` per call. ``signal``: the batch's
        signal replaced (an ``Interruptible``'s)."""
        if not isinstance(batch, ToolBatchInput):
            raise InvalidTypeError(f"execute() takes a ToolBatchInput, not {type(batch).__qualname__}")
        if batch.agent is None and self._scope is not None:
            batch = replace(batch, agent=self._scope)
        rt = self._kernel
        _require(rt)  # a stopped runtime raises here, as a tell to its registry would
        # What the registry actor does with ExecuteBatch(batch), run here:
        # one implementation, minus the hop to the registry's thread.
        if starts is None:
            start_batch(rt, batch, reply, loop, signal=signal)  # (a logged batch holds its step: see start_batch)
        else:
            continue_batch(rt, batch, starts, reply, loop)  # (its step held by its resume or recovery)

    # -- suspended batches ----------------------------------------------------

    def resume(
        self,
        suspension: Any,
        decisions: Mapping[str, str],
        *,
        agent: Agent | None = None,
        signal: AbortSignal | None = None,
        tool_set: ResolvedToolSet | None = None,
        deps: Any = None,
    ) -> ToolBatchResult:
        """Finish a batch that suspended for deferred approvals, blocking
        the calling thread: ``suspension`` is the batch's
        ``result.suspension`` (as it is, or through JSON), ``decisions``
        maps its deferred call ids to an answer (``"allowed-once"``,
        ``"rejected"``, ``"cancelled"``, or ``"deferred"`` again; a deferred
        call left out stays deferred). Works in this runtime or another one
        with the same tools registered.

        The calls run on from where they stopped: a deferred call from its
        answer (guards and its registration are checked again, then
        dispatch, post-execute, finalize, its ``tool/result``), a call that
        never started through the whole pipeline, under the same barriers
        and limit; a settled call keeps its result and does not run again.
        The result has one entry per call of the original batch, in model
        order (or suspends again, when a call is deferred again).

        ``agent``: the agent whose batch it was (checked against the ids the
        suspension records; a logged batch needs it, for its session);
        None: a scoped service's own agent, else an ``Agent`` rebuilt from
        those ids (new scopes, no session).
        ``signal`` cancels the resumed batch. ``tool_set`` and ``deps`` are
        the step's admission and the application's object, as in
        ``ToolBatchInput`` (neither is JSON, so the suspension has neither:
        pass the step's again, if it had them).

        A suspension is resumed once: a second ``resume`` of it in this
        runtime, or in any process whose session log records the first
        one's decisions, raises ``InvalidStateError`` and nothing runs.
        For a logged batch the log is the authority: the session takes the
        log (``Session.holding``: a refusal gives it back) and a
        suspension whose calls, arguments or settled results disagree with
        it raises ``InvalidValueError`` naming what differs, before
        anything runs or is claimed. A call that would run a tool the agent
        could call when the step was logged (or, unlogged, when the batch
        suspended: the suspension's ``unknown``) and that this runtime does
        not offer raises ``InvalidStateError`` before anything is claimed
        (register it first: it would fail ``UNKNOWN_TOOL`` for good). A
        suspension or ``decisions`` of the wrong type raises
        ``InvalidTypeError``, a malformed one ``InvalidValueError``.
        Ctrl-C while it waits aborts the resumed batch (see ``execute``)."""
        guard = Interruptible(signal)
        return self._blocking(
            lambda reply: self._resume(
                suspension, decisions, agent, guard.signal or signal, reply, None, tool_set, deps
            ),
            guard,
            "resume()",
            "resume_async(suspension, decisions)",
        )

    async def resume_async(
        self,
        suspension: Any,
        decisions: Mapping[str, str],
        *,
        agent: Agent | None = None,
        signal: AbortSignal | None = None,
        tool_set: ResolvedToolSet | None = None,
        deps: Any = None,
    ) -> ToolBatchResult:
        """:meth:`resume` without blocking the event loop: ``await`` it (its
        async tool bodies run on this loop, as for :meth:`execute_async`)."""
        controller = _following(signal)
        if controller is not None:
            signal = controller.signal
        return await self._awaited(
            lambda reply, loop: self._resume(suspension, decisions, agent, signal, reply, loop, tool_set, deps),
            controller,
        )

    def _resume(
        self,
        suspension: Any,
        decisions: Any,
        agent: Agent | None,
        signal: AbortSignal | None,
        reply: Reply,
        loop: Any = None,
        tool_set: ResolvedToolSet | None = None,
        deps: Any = None,
    ) -> None:
        rt = self._kernel
        _require(rt)
        if signal is not None and not isinstance(signal, AbortSignal):
            raise InvalidTypeError(f"signal must be an AbortSignal, not {type(signal).__qualname__}")
        if agent is None:
            agent = self._scope  # a scoped service resumes its own agent's batch
        plan = resume_plan(suspension, decisions, agent=agent, signal=signal, tool_set=tool_set, deps=deps)
        batch = plan.batch
        # Whatever would refuse the batch is asked before it is claimed: a
        # claimed suspension cannot be resumed again.
        check_continuable(rt, batch)
        log = batch.log
        session = None if log is None or batch.agent is None else batch.agent.session
        if session is None:
            self._resume_claimed(plan, None, reply, loop)
        else:
            assert log is not None
            assert batch.agent is not None  # (a session is an agent's)
            # Held from before the log is read (see scheduling.suspension.in_step).
            in_step(
                self._links.claims,
                session,
                log.turn,
                log.step,
                batch.agent.id,
                reply,
                lambda r: self._resume_claimed(plan, session, r, loop),
            )

    def _resume_claimed(self, plan: Any, session: Session | None, reply: Reply, loop: Any) -> None:
        # The log is taken for this session's writes (no other process
        # writes it meanwhile); a refusal that wrote nothing gives it back.
        with nullcontext() if session is None else session.holding():
            if session is not None:
                # The log is the authority: the suspension must agree with
                # what it says of the step (its arguments are taken from it).
                # Refused before anything is claimed.
                plan = checked_with_log(plan, session)
                assert plan.known is not None  # (read from the log)
            if plan.known is not None:  # (None: a suspension made before it recorded its unknown calls)
                # Refused before anything is claimed: a call that would run a
                # tool the agent could call then and cannot call now.
                refuse_missing_tools(
                    self._kernel, plan.batch, plan.starts, plan.known, "resume", f"suspension {plan.id}"
                )
            claims = self._links.claims
            claims.claim(plan.id)
            if session is not None:
                # The decisions reach the log before anything runs; a log whose
                # requests were decided already refuses (resumed elsewhere).
                try:
                    # Not once the runtime stopped. (A stop from the write on
                    # leaves the decisions logged and nothing run, as a crash
                    # would: recover() finishes the step.)
                    _require(self._kernel)
                    session.decide(plan.id, plan.decisions)
                except BaseException:
                    # Nothing was written and nothing ran: the claim goes back (a
                    # suspension decided in the log stays refused by the log).
                    claims.release(plan.id)
                    raise
            self._start(plan.batch, reply, loop, plan.starts)

    # -- interrupted steps -----------------------------------------------------

    def recover(
        self,
        agent: Agent,
        turn: int,
        step: int,
        *,
        signal: AbortSignal | None = None,
        tool_set: ResolvedToolSet | None = None,
        deps: Any = None,
    ) -> ToolBatchResult:
        """Finish model step ``(turn, step)`` that a crash interrupted, from
        ``agent``'s session log (``Agent(..., session=Session.open(path))``
        in a new process), blocking the calling thread. The runtime needs
        the same tools registered.

        Every call of the step (its ``tool/batch`` lists them all, so none
        is lost) ends with exactly one result, in model order:

        * a call whose ``tool/result`` is in the log keeps it and does not
          run: its content, error and meta are the logged ones and a
          success's ``value`` is None (the canonical value is never logged);
        * a call that never started (no ``tool/start``) runs, through the
          whole pipeline (its ``tool/call`` is not written twice);
        * a call that started and has no result runs again only if its tool
          is ``idempotent``; otherwise it gets the ``INTERRUPTED`` failure
          that ``Session.repair`` gives (a body that may have run, whole or
          in part, never runs twice).

        The log then holds one ``tool/result`` per ``tool/call`` of the
        step and needs no ``repair()``; a step that is complete already is
        returned as logged and nothing is written. The batch runs with the
        step's own limit, under the same barriers; ``signal`` cancels it;
        ``tool_set`` (a resolved step admission) makes conditional tools
        executable, ``deps`` reaches the bodies as ``ctx.deps``. Its
        arguments are checked first; then the session takes the log
        (``Session.holding``: a refusal gives it back): while another
        process writes it (the original batch, another recovery), or when
        it wrote to it after this session read it, this raises
        ``InvalidStateError`` and nothing runs; so does a call that would
        run a tool the agent could call when the step was logged and that
        this runtime does not offer it (register it first: it would fail
        ``UNKNOWN_TOOL`` for good), or a started call of such a tool (its
        ``idempotent`` would decide whether it runs again), or one whose
        nested logged steps started a call of such a tool (whose
        ``idempotent`` would decide it too).
        Raises
        ``TypeError``/``ValueError`` for an agent without a session or a
        step the log has no call of. Ctrl-C while it waits aborts the
        recovered batch (see ``execute``)."""
        guard = Interruptible(signal)
        return self._blocking(
            lambda reply: self._recover(agent, turn, step, guard.signal or signal, tool_set, deps, reply),
            guard,
            "recover()",
            "recover_async(agent, turn, step)",
        )

    async def recover_async(
        self,
        agent: Agent,
        turn: int,
        step: int,
        *,
        signal: AbortSignal | None = None,
        tool_set: ResolvedToolSet | None = None,
        deps: Any = None,
    ) -> ToolBatchResult:
        """:meth:`recover` without blocking the event loop: ``await`` it (its
        async tool bodies run on this loop, as for :meth:`execute_async`)."""
        controller = _following(signal)
        if controller is not None:
            signal = controller.signal
        return await self._awaited(
            lambda reply, loop: self._recover(agent, turn, step, signal, tool_set, deps, reply, loop),
            controller,
        )

    def _recover(
        self,
        agent: Any,
        turn: Any,
        step: Any,
        signal: AbortSignal | None,
        tool_set: ResolvedToolSet | None,
        deps: Any,
        reply: Reply,
        loop: Any = None,
    ) -> None:
        rt = self._kernel
        _require(rt)
        # The arguments first: a wrong one is named whoever holds the log.
        session = recovery_session(agent, turn, step, signal)

        def start(claimed: Reply) -> None:
            # Nothing else writes the log while the step is read and run:
            # another process's batch or recovery holds it, or wrote to it
            # since this session read it, and this refuses. A refusal that
            # wrote nothing gives it back.
            with session.holding():
                plan = recovery_plan(rt, agent, turn, step, signal=signal, tool_set=tool_set, deps=deps)
                check_continuable(rt, plan.batch)
                refuse_missing_tools(
                    rt,
                    plan.batch,
                    plan.starts,
                    plan.known,
                    "recover",
                    f'step (turn {turn}, step {step}) of agent "{agent.id}"',
                    plan.rerun,
                )
                # Written only now that nothing refuses: the open calls of the
                # logged steps the interrupted calls ran, then a run_code call's
                # sub-calls that the crash left open (as repair() ends them):
                # whatever the call becomes, they are over.
                close_nested(rt, plan)
                session.close_sub_calls([call.id for call in plan.batch.calls])
                self._start(plan.batch, claimed, loop, plan.starts)

        # Claimed before the log is read: a resume or recovery of the step
        # running now would change what the plan must be.
        in_step(self._links.claims, session, turn, step, agent.id, reply, start)

    def dispatch(self, execution: ToolExecutionInput) -> ToolExecutionResult:
        """Run ONE call through the whole pipeline on the calling thread and
        return its final result: nested dispatch (a PTC program's sub-call,
        a composite tool calling another tool).

        Every policy applies (pre-execute, approval, guards, wrappers,
        post-execute, ``tools/result``); nothing is scheduled or logged: the
        caller decides concurrency and writes its own events. Pass the
        enclosing execution's ``token`` as ``parent`` and its
        ``root_call_id``. A sync body runs on this thread, an async one on
        the runtime's loop thread (so do not call this from the loop).
        A scoped service fills in its agent when ``execution.agent`` is None.
        A ``tool_set`` that admits nothing here (resolved by another
        runtime or for another agent, or disposed) is refused before
        anything runs, as a batch given it is.
        """
        if not isinstance(execution, ToolExecutionInput):
            raise InvalidTypeError(f"dispatch() takes a ToolExecutionInput, not {type(execution).__qualname__}")
        rt = self._kernel
        _require(rt)
        if execution.agent is None and self._scope is not None:
            execution = replace(execution, agent=self._scope)
        tool_set = execution.tool_set
        if isinstance(tool_set, ResolvedToolSet):
            tool_set.check_usable(
                execution.agent,
                "ToolExecutionInput.tool_set",
                "the call runs as",
                "resolve the set for the call's agent, or pass the enclosing execution's agent and tool_set",
                state=self._state,
            )
        waited_on = rt.loop_watch.blocking_wait()  # (this thread's loop cannot start its async body: see _blocking)
        if waited_on is None:
            return run_inline(rt, execution)
        with waited_on:
            return run_inline(rt, execution)

    def execute(self, batch: ToolBatchInput) -> ToolBatchResult:
        """Run ``batch`` and return its settled result, blocking the calling
        thread (however long the batch takes, but not past ``rt.stop()``).
        Raises ``ExecutorUnavailableError`` when no executor is available.
        Ctrl-C while it waits (on the main thread) aborts the batch, waits
        for it to settle, and goes on (``scheduling.interrupt``)."""
        guard = Interruptible(batch.signal if isinstance(batch, ToolBatchInput) else None)
        return self._blocking(
            lambda reply: self._start(batch, reply, signal=guard.signal), guard, "execute()", "execute_async(batch)"
        )

    def _blocking(
        self, start: Callable[[Reply], None], guard: Interruptible, what: str, instead: str
    ) -> ToolBatchResult:
        """``start(reply)`` a batch and block the calling thread until it
        settles; ``guard`` aborts it if an interrupt ends the wait."""
        rt = self._kernel
        reply = _Reply()
        # A stopping runtime drains its batches and answers them; only a
        # batch stuck past the end of stop() has no answer: stop fails it.
        with (
            self._links.pending_replies.tracked(
                reply, lambda: RuntimeStoppedError(f"{STOPPED} (before the batch finished)")
            ),
            guard,
        ):
            refuse_blocking_a_loop(rt, what, instead, "its async tools run")
            waited_on = rt.loop_watch.blocking_wait()  # (None: this thread runs no event loop)
            # Before the start: an interrupt from its first line on aborts
            # the batch and waits for it; one that ends the start before it
            # handed the reply on settles the reply, so nothing waits for it.
            try:
                guard.started(reply.done, partial(reply.wait, -1))
                start(reply)
            except BaseException as exc:
                if not reply.done():
                    reply.set_exception(exc)
                raise
            with rt.waiting():  # a tool body's nested batch holds no slot
                if waited_on is None:
                    reply.wait(-1)
                else:
                    with waited_on:  # its flights cannot start: they end, naming the fix
                        reply.wait(-1)
            result: ToolBatchResult = reply.outcome()
            return result

    async def execute_async(self, batch: ToolBatchInput) -> ToolBatchResult:
        """``await`` the batch without blocking the event loop. Its async
        tool bodies run on this very loop (so they may use clients, futures
        and locks bound to it); its sync bodies, listeners and policies run
        on the runtime's threads, as for :meth:`execute`.

        Cancelling the task that awaits it aborts the batch (as its
        ``signal`` would), and the ``CancelledError`` goes on once the batch
        has settled: nothing of it is abandoned."""
        controller = _following(batch.signal) if isinstance(batch, ToolBatchInput) else None
        if controller is not None:
            batch = replace(batch, signal=controller.signal)
        return await self._awaited(lambda reply, loop: self._start(batch, reply, loop), controller)

    # -- plumbing ----------------------------------------------------------

    async def _awaited(self, start: Callable[[Future[T], Any], None], controller: AbortController | None) -> T:
        """``start(reply, loop)`` work whose async parts run on the running
        loop (a batch's bodies, a resolution's conditions), and await its
        result without blocking that loop. If the awaiting task is
        cancelled, ``controller`` (whose signal the work has) aborts it, and
        this still waits for it to settle before the ``CancelledError``
        goes on."""
        future: Future[T] = Future()
        try:
            start(future, asyncio.get_running_loop())
            # (A loop run by a tool body's or a hook's thread, asyncio.run(...):
            # its slot is lent while it waits, as execute's.)
            with self._kernel.waiting():
                if controller is None:
                    return await asyncio.wrap_future(future)
                result: T = await await_settled(future, partial(controller.abort, "the task awaiting it was cancelled"))
            return result
        finally:
            if controller is not None:
                controller.signal.close()

    def _on_registry_thread(self) -> bool:
        actor = actor_thread_ident()
        return isinstance(actor, (ScopeActor, RegistryActor)) and actor.kernel is self._kernel

    def _tell(self, message: Any, future: Future[Any]) -> None:
        try:
            self._links.registry.tell(message)
        except pykka.ActorDeadError:
            raise RuntimeStoppedError(STOPPED_REFUSAL) from None

    def _effect(
        self, make: Callable[[Future[Any]], WriteRequest], undo: Callable[[Any, Future[Any] | None], WriteRequest]
    ) -> Disposer:
        """Apply the write ``make(reply)`` and return the disposer that
        sends ``undo(its answer, reply)``."""
        done = self._write(make, undo)
        return self._disposer(partial(undo, done), done)

    def _write(
        self, make: Callable[[Future[Any]], WriteRequest], undo: Callable[[Any, Future[Any] | None], WriteRequest]
    ) -> Any:
        if self._on_registry_thread():
            raise RegistrationError(
                "the registry cannot be changed from a tools/change listener "
                "(it runs on the scope actor that would apply the change): make the change after the write being "
                "announced returns, from the code that made that write or from a thread this listener does not "
                "wait for (a disposer called here is queued instead)"
            )
        future: WriteReply = WriteReply()
        self._tell(make(future), future)
        try:
            return self._wait(future, "the registry change", limit=ASK_TIMEOUT)
        except TimeoutError:
            if not future.abandoned:
                # It had started: the caller, who gets no disposer, must not
                # be left with the effect once it is applied.
                future.add_done_callback(partial(_undo_late, self._links.registry, undo))
            raise

    def _disposer(self, make: Callable[[Future[Any]], WriteRequest], handle: Any) -> Disposer:
        """The disposer that sends ``make(reply)``, undoing ``handle``."""
        rt = self._kernel
        registry = self._links.registry

        def undo() -> None:
            if not rt.running:
                return  # stopped: everything is gone already
            future: WriteReply = WriteReply()
            try:
                registry.tell(make(future))
            except (pykka.ActorDeadError, RuntimeError):
                return
            if self._on_registry_thread():
                future.add_done_callback(_log_queued_failure)
                return  # queued: applied right after the change being announced
            try:
                self._wait(future, "the undo", limit=ASK_TIMEOUT)
            except RuntimeError:
                if _running(rt):
                    raise

        return _EffectDisposer(undo, handle)

    def _wait(self, future: Future[T], what: str, *, limit: float | None) -> T:
        # A stopping runtime fails the wait at once (no polling).
        with self._links.pending_writes.tracked(
            future, lambda: RuntimeStoppedError(f"{STOPPED} (before {what} finished)")
        ):
            try:
                return future.result(timeout=limit)
            except FutureTimeout:
                pass
            if isinstance(future, WriteReply) and future.abandon():
                raise TimeoutError(
                    f"{what} did not start within {limit}s (the registry is busy: is a tools/change listener "
                    "blocked?); nothing was changed"
                ) from None
            if future.done():
                return future.result()
            raise TimeoutError(f"{what} did not finish within {limit}s (a tools/change listener has not returned)")


def _check_name(method: str, name: object) -> None:
    if type(name) is not str:
        raise InvalidTypeError(f"rt.tools.{method}(name): a tool's name is a str, not {type(name).__qualname__}")


def _running(rt: Kernel) -> bool:
    return rt.running


def _unregister(registration: Any, reply: Future[Any] | None) -> WriteRequest:
    return Unregister(registration=registration, reply=reply)


def _retract(contribution: Any, reply: Future[Any] | None) -> WriteRequest:
    return Retract(contribution=contribution, reply=reply)


def _withdraw_all(scope: Agent | None, registrations: Any, reply: Future[Any] | None) -> WriteRequest:
    return RegisterAll((), scope=scope, replacing=registrations, reply=reply)


def _replaced(disposer: object) -> tuple[_EffectDisposer, Registration] | None:
    """``disposer`` (from ``register`` or ``register_all``) and the
    registration it undoes; None when it was disposed already (nothing to
    withdraw); else an error naming the fix. (The scope actor refuses a
    registration of another layer.)"""
    if isinstance(disposer, _EffectDisposer):
        handle = disposer._handle
        if handle is None:
            return None
        if isinstance(handle, Registration):
            return disposer, handle
        what = "another effect's disposer"
    else:
        what = type(disposer).__qualname__
    raise InvalidTypeError(
        f"register_all(replacing=) takes the disposers register() or register_all() returned, not {what}"
    )


def _undo_late(
    registry: pykka.ActorRef[Any], undo: Callable[[Any, Future[Any] | None], WriteRequest], done: Future[Any]
) -> None:
    """Undo a write whose caller gave up waiting (``TimeoutError``) once it
    is applied. On the thread that settled it: a message, nothing else."""
    if done.cancelled() or done.exception() is not None:
        return
    try:
        registry.tell(undo(done.result(), None))
    except (pykka.ActorDeadError, RuntimeError):
        pass  # stopped: everything is gone already


def _following(signal: Any) -> AbortController | None:
    """A controller whose signal follows ``signal`` (None: a fresh one),
    for a batch awaited by a task: cancelling that task aborts it. None
    when ``signal`` is not a signal: the entry point's own check says so."""
    if signal is None:
        return AbortController()
    if isinstance(signal, AbortSignal):
        return AbortController(signal)
    return None


def _require(rt: Kernel) -> None:
    """Refuse work on a stopped (or stopping) runtime, naming the fix
    (a service held from before the stop gets here)."""
    if not rt.running:
        raise RuntimeStoppedError(STOPPED_REFUSAL)


def _log_queued_failure(future: Future[Any]) -> None:
    exc = future.exception()
    if exc is not None:
        logger.opt(exception=exc).error("a disposer queued from a tools/change listener failed: {}", safe_str(exc))


def _check_context(context: object, fn: str) -> None:
    """``context`` is a ToolActivationContext whose fields are what the
    conditions are promised (else a clear error, before anything runs)."""
    if not isinstance(context, ToolActivationContext):
        raise InvalidTypeError(f"{fn} takes a ToolActivationContext, not {type(context).__qualname__}")
    for field, kind, shown in (
        ("agent", Agent, "an Agent or None"),
        ("model_selection", ModelSelection, "a ModelSelection"),
        ("signal", AbortSignal, "an AbortSignal"),
    ):
        value = getattr(context, field)
        if not isinstance(value, kind) and not (field == "agent" and value is None):
            raise InvalidTypeError(f"{fn}: ToolActivationContext.{field} is {shown}, not {type(value).__qualname__}")
