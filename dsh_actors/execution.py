"""Execution identity: what every phase of one call's trip sees.

A :class:`ToolExecution` is created by the pipeline once the arguments have
been materialized (so every phase sees the same frozen object). Its identity
fields are read-only; the one field a ``tools/execute`` wrapper may set is
``signal``, and only while the call is dispatching. The pipeline freezes the
whole object before ``tools/result`` observers run.

A :class:`ToolRunContext` is what a tool body receives: the same identity,
the body's own fused signal, and the two channels a body has back to the
pipeline (``defer_context`` and ``conclude_turn``).

Frozen means what :func:`~dsh_actors.json.materialize` returns: dicts are a read-only
mapping equal to the same dict, lists are tuples, so ``arguments ==
{"paths": ["a"]}`` is False (it equals ``{"paths": ("a",)}``). Compare with
tuples, or take a plain copy with :func:`~dsh_actors.json.thaw`.
"""

from __future__ import annotations

import contextvars
import itertools
import math
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Generic

from .errors import InvalidStateError, InvalidTypeError, InvalidValueError, shown_value
from .json._frozen import materialize
from .json._rules import MAX_INT, surrogate_index, value_problem
from .model import Agent, TextBlock, ToolProgress, UserMessage, slot_setters
from .signals import AbortController, AbortSignal, follow, fuse_late

if TYPE_CHECKING:  # pragma: no cover
    from .toolset import ResolvedToolSet

if sys.version_info >= (3, 13):
    from typing import TypeVar
else:  # (the TypeVar default of PEP 696)
    from typing_extensions import TypeVar

__all__ = ["DepsT", "ToolExecution", "ToolExecutionInput", "ToolExecutionToken", "ToolRunContext"]

#: The type of ``ctx.deps`` (:class:`ToolRunContext`'s type parameter);
#: ``Any`` when a body annotates its context ``ToolRunContext`` bare.
DepsT = TypeVar("DepsT", default=Any)

_token_ids = itertools.count(1)


class ToolExecutionToken:
    """Opaque identity of one execution, shared with nested calls only as
    their ``parent``. Compares by identity."""

    __slots__ = ("_id", "__weakref__")

    def __init__(self) -> None:
        self._id = next(_token_ids)

    def __repr__(self) -> str:
        return f"<ToolExecutionToken #{self._id}>"

    def __reduce__(self) -> Any:
        raise InvalidTypeError("a ToolExecutionToken cannot be copied")


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolExecutionInput:
    """Parsed input to the shared pipeline; the pipeline adds the token.

    ``root_call_id`` is omitted for a root execution (it defaults to
    ``call_id``); nested dispatchers pass the enclosing value, the enclosing
    execution's ``token`` as ``parent``, and (PTC) the binding-time
    ``schema``.
    """

    call_id: str
    name: str
    arguments: Any
    signal: AbortSignal
    root_call_id: str | None = None
    schema: Mapping[str, Any] | None = None
    agent: Agent | None = None
    tool_set: ResolvedToolSet | None = None
    parent: ToolExecutionToken | None = None
    deps: Any = field(default=None, compare=False, repr=False)
    """The application's dependencies for this call (``ctx.deps``); None:
    the enclosing call's (read from the context the call runs in)."""


_IDENTITY = frozenset(
    {"call_id", "root_call_id", "name", "arguments", "agent", "tool_set", "parent", "token", "schema", "deps"}
)

#: The deps of the call whose hooks run in the current context: what a
#: batch or a nested dispatch submitted from there inherits.
CALL_DEPS: contextvars.ContextVar[Any] = contextvars.ContextVar("dsh_actors.deps", default=None)


class ToolExecution:
    """One pending call inside the pipeline.

    Identity (``call_id``, ``root_call_id``, ``name``, ``arguments`` (frozen
    lossless JSON), ``agent``, ``tool_set``, ``parent``, ``token``,
    ``schema``, ``deps``) is read-only. ``deps`` is the batch's
    ``ToolBatchInput.deps`` (or the enclosing call's), as given: not frozen. ``signal`` is the caller's signal, except while
    ``tools/execute`` wrappers run, when a wrapper may replace it for its
    delegated lifetime. After :meth:`freeze` nothing may be set.
    """

    __slots__ = (
        "call_id",
        "root_call_id",
        "name",
        "arguments",
        "agent",
        "tool_set",
        "parent",
        "token",
        "schema",
        "deps",
        "_signal",
        "_mutable_signal",
        "_frozen",
        "_approved",
        "_tool_found",
        "_definition",
    )

    call_id: str
    root_call_id: str
    name: str
    arguments: Any
    agent: Agent | None
    tool_set: ResolvedToolSet | None
    parent: ToolExecutionToken | None
    token: ToolExecutionToken
    schema: Any
    deps: Any
    _signal: AbortSignal
    _mutable_signal: bool
    _frozen: bool
    # (Set only once an approval service allowed the call: unset until then,
    # so an execution pays nothing for it. See approval_stands.)
    _approved: tuple[Any, Any] | None
    # (Set by the pipeline's lookup of the call's tool: unset until then. See
    # tool_found and definition.)
    _tool_found: bool
    _definition: Any

    def __init__(
        self,
        *,
        call_id: str,
        name: str,
        arguments: Any,
        signal: AbortSignal,
        root_call_id: str | None = None,
        agent: Agent | None = None,
        tool_set: ResolvedToolSet | None = None,
        parent: ToolExecutionToken | None = None,
        schema: Any = None,
        token: ToolExecutionToken | None = None,
        deps: Any = None,
    ) -> None:
        # __setattr__ refuses everything: write the slots through their
        # descriptors (bound once below; object.__setattr__ would look each
        # name up on every call, ~0.7 µs per execution).
        _set_call_id(self, call_id)
        _set_root_call_id(self, call_id if root_call_id is None else root_call_id)
        _set_name(self, name)
        _set_arguments(self, arguments)
        _set_agent(self, agent)
        _set_tool_set(self, tool_set)
        _set_parent(self, parent)
        _set_token(self, ToolExecutionToken() if token is None else token)
        _set_schema(self, schema)
        _set_deps(self, deps)
        _set_signal(self, signal)
        _set_mutable_signal(self, False)
        _set_frozen(self, False)

    if TYPE_CHECKING:

        @property
        def signal(self) -> AbortSignal:
            """The caller's cancellation signal (a wrapper's replacement while
            ``tools/execute`` runs)."""

        @signal.setter
        def signal(self, value: AbortSignal) -> None: ...

    else:

        def _set_signal_attribute(self, value: AbortSignal) -> None:
            self.__setattr__("signal", value)  # (where the rule is: __setattr__ sees every assignment)

        # (Its getter a C one: read per call on the pipeline's path.)
        signal = property(
            attrgetter("_signal"),
            _set_signal_attribute,
            doc="The caller's cancellation signal (a wrapper's replacement while ``tools/execute`` runs).",
        )
        del _set_signal_attribute

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "signal":
            # A wrapper's replacement (or its restore) while tools/execute
            # runs, and only then.
            if self._frozen:
                raise AttributeError("the execution is frozen")
            if not self._mutable_signal:
                raise AttributeError("execution.signal may be set only by a tools/execute wrapper")
            if not isinstance(value, AbortSignal):
                raise InvalidTypeError("execution.signal must be an AbortSignal (it cannot be removed)")
            _set_signal(self, value)
            return
        if name in _IDENTITY:
            raise AttributeError(f"execution.{name} is read-only")
        raise AttributeError(f"ToolExecution has no settable attribute {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"execution.{name} cannot be deleted")

    @property
    def frozen(self) -> bool:
        return self._frozen

    def approval_stands(self, ask: Any) -> bool:
        """Whether an approval this call was given stands for ``ask`` (the
        ``Ask`` its pre-execute waterfall decided): the approval service
        allowed an equal ``Ask`` for it, and it was then prepared again
        before its body started (what it was prepared under changed), still
        to run the very tool definition that was approved. The pipeline then
        does not ask the service twice: the call runs as allowed, and its
        guards run again. An observer of approvals (``policies.otel``) asks
        this in the waterfall to tell a request from an approval that
        stands: it is the pipeline's own rule, not a copy."""
        try:
            approved = self._approved
        except AttributeError:
            return False  # never approved
        return approved is not None and approved[0] == ask

    @property
    def approval(self) -> Any:
        """The ``Ask`` this call was allowed for (by the approval service,
        or by an ``"allowed-once"`` given at resume) while that approval
        stands, else None: what an observer that did not see the question
        asked (a policy applied since, a resumed call, whose pre-execute
        waterfall ran in the batch that deferred it) learns of it."""
        try:
            approved = self._approved
        except AttributeError:
            return None  # never approved
        return None if approved is None else approved[0]

    @property
    def tool_found(self) -> bool | None:
        """Whether the pipeline found a tool for this call's name when it last
        looked it up: a definition the call's agent may run (the registry's,
        admitted by the call's ``tool_set``, or one its executor provides
        itself, PTC's ``run_code``). False: the name runs no tool (one the
        model made up, or a tool the agent may not call), and the call fails
        ``UNKNOWN_TOOL`` unless something settles it first (arguments that
        are not JSON, a denial, a deferral, an abort). None: not looked up.
        The pipeline looks every call up before its ``tools/pre-execute``
        listeners run or, for one that runs no phase, before its
        ``tools/result``. An observer that keeps something per tool name
        (``policies.metrics``, ``policies.otel``) reads it rather than look
        the name up again: it is the pipeline's own answer, not a copy."""
        try:
            return self._tool_found
        except AttributeError:
            return None  # never looked up

    @property
    def definition(self) -> Any:
        """The tool definition this call runs, as the pipeline last looked
        it up (a ``ToolDefinition``: the registry's, or the one its executor
        provides itself, PTC's ``run_code``): what its body, its argument
        and output checks and its ``tools/execute`` wrappers go by (a change
        before its body starts sends the call back to be looked up and
        prepared again, so a wrapper reads what the body runs). None when
        not looked up, and for a name that runs no tool (``tool_found``
        False). A policy that reads a tool's settings
        (``timeout_ms``, ``idempotent``) reads them here rather than look
        the name up again."""
        try:
            return self._definition
        except AttributeError:
            return None  # never looked up

    # -- pipeline-only -----------------------------------------------------

    def _open_signal(self) -> None:
        _set_mutable_signal(self, True)

    def _restore_signal(self, caller: AbortSignal) -> None:
        _set_mutable_signal(self, False)
        _set_signal(self, caller)

    def _freeze(self) -> None:
        _set_mutable_signal(self, False)
        _set_frozen(self, True)

    def _approve(self, ask: Any, definition: Any) -> None:
        """The approval service allowed ``ask`` for this call, about
        ``definition`` (see :meth:`approval_stands`)."""
        _set_approved(self, (ask, definition))

    def _recheck_approval(self, definition: Any) -> None:
        """Prepared again, the call runs ``definition`` now (what the pipeline
        looked up for it): an approval about another definition (the tool
        was replaced meanwhile) no longer stands."""
        try:
            approved = self._approved
        except AttributeError:
            return
        if approved is not None and approved[1] is not definition:
            _set_approved(self, None)

    def _settle_arguments(self, arguments: Any) -> None:
        """The pipeline's one rewrite of ``arguments``: when the call meets
        its registration, before any phase, listener or classifier reads
        them (a strict model's ``null`` for an optional parameter dropped)."""
        if self._frozen:
            raise AttributeError("the execution is frozen")
        _set_arguments(self, arguments)

    def __repr__(self) -> str:
        return f"<ToolExecution {self.name} call_id={self.call_id!r}>"


(
    _set_call_id,
    _set_root_call_id,
    _set_name,
    _set_arguments,
    _set_agent,
    _set_tool_set,
    _set_parent,
    _set_token,
    _set_schema,
    _set_deps,
    _set_signal,
    _set_mutable_signal,
    _set_frozen,
    _set_approved,
    _set_tool_found,
    _set_definition,
) = slot_setters(ToolExecution, ToolExecution.__slots__)  # every slot, in __slots__ order


class ToolRunContext(Generic[DepsT]):
    """What a tool body receives: the execution's identity, the body's own
    signal (fused from the caller's and any wrapper's), and
    :meth:`defer_context` / :meth:`conclude_turn`.

    Generic in the type of :attr:`deps`: annotate a body's context
    ``ctx: ToolRunContext[MyDeps]`` and a type checker knows ``ctx.deps`` is
    a ``MyDeps`` (nothing checks it at runtime: ``deps`` is what
    ``ToolBatchInput.deps`` was given); ``ToolRunContext`` alone is
    ``ToolRunContext[Any]``.

    A sync body runs on a call actor's worker thread; an ``async def`` body on
    the batch's event loop: the loop that awaits ``rt.tools.execute_async``,
    else the loop the runtime is bound to (``ToolRuntime(loop=...)``), else
    the runtime's own loop thread, which also runs those of a nested
    ``rt.tools.dispatch`` (the README's "which loop runs what").
    Both methods are thread-safe.

    Cancellation is cooperative: a sync body should poll or wait on
    ``signal``. An async body's task is also cancelled when ``signal`` fires,
    so ``CancelledError`` may arrive at any ``await`` (cleanup included); the
    runtime still waits for the task to finish, and a body that ends
    cancelled that way settles as ``ABORTED``.
    """

    __slots__ = (
        "_execution",
        "_signal",
        "_parents",
        "_closed",
        "_lock",
        "_contexts",
        "_concludes",
        "_events",
        "_progress_lock",
    )

    def __init__(self, execution: ToolExecution, signal: AbortSignal, events: Any = None) -> None:
        self._execution = execution
        self._signal: AbortSignal | None = signal
        self._parents: tuple[AbortSignal, ...] = ()
        self._closed = False
        self._lock = threading.Lock()
        self._contexts: list[UserMessage] = []
        self._concludes = False
        self._events = events
        self._progress_lock: threading.RLock | None = None

    @classmethod
    def for_test(
        cls,
        *,
        arguments: Any = None,
        name: str = "tool",
        call_id: str = "test-call",
        agent: Agent | str | None = "test",
        deps: Any = None,
        signal: AbortSignal | None = None,
    ) -> ToolRunContext[Any]:
        """A context for calling a tool body yourself, in a unit test:
        ``add_note("x", ToolRunContext.for_test(deps=db))`` for an ``@tool``
        function, ``echo.execute(ctx.arguments, ctx)`` for a ``define_tool``
        body (``ctx = ToolRunContext.for_test(arguments={...})``).

        ``arguments`` (default ``{}``) is frozen as the pipeline freezes a
        call's (``ctx.arguments``); ``agent`` is an :class:`Agent` of that
        id (``"test"``), an ``Agent`` as given, or None; ``deps`` is
        ``ctx.deps``; ``signal`` is ``ctx.signal`` as given: pass an
        :class:`AbortController`'s signal and abort it to cancel the body
        (default: a signal nothing aborts). ``defer_context`` and
        ``conclude_turn`` work as in a call (the context is never closed);
        ``report_progress`` checks its arguments and publishes nothing (no
        runtime). ``root_call_id`` is ``call_id``; ``tool_set``, ``parent``
        and ``schema`` are None."""
        for label, text_value in (("name", name), ("call_id", call_id)):
            if type(text_value) is not str:
                raise InvalidTypeError(
                    f"ToolRunContext.for_test({label}=...) must be a str, not {type(text_value).__qualname__}"
                )
        if signal is None:
            signal = AbortController().signal
        elif not isinstance(signal, AbortSignal):
            raise InvalidTypeError(
                "ToolRunContext.for_test(signal=...) must be an AbortSignal (an AbortController's .signal), "
                f"not {type(signal).__qualname__}"
            )
        if isinstance(agent, str):
            agent = Agent(agent)
        elif agent is not None and not isinstance(agent, Agent):
            raise InvalidTypeError(
                "ToolRunContext.for_test(agent=...) must be an Agent, an agent id (a str) or None, "
                f"not {type(agent).__qualname__}"
            )
        execution = ToolExecution(
            call_id=call_id,
            name=name,
            arguments=materialize({} if arguments is None else arguments, "arguments"),
            signal=signal,
            agent=agent,
            deps=deps,
        )
        return cls(execution, signal)

    @classmethod
    def _fused(cls, execution: ToolExecution, parents: tuple[AbortSignal, ...], events: Any = None) -> ToolRunContext:
        """The pipeline's context: its signal, ``AbortSignal.any(*parents)``,
        is made only when somebody first reads :attr:`signal` (most bodies
        never do; fusing costs a few microseconds per call). Call
        :meth:`_close` when the body has returned.

        Invariants that make the lazy signal indistinguishable from one
        fused before the body started and closed after it:

        * made later it is born aborted if a parent has aborted meanwhile,
          with the reason of the parent that aborted first
          (:func:`~dsh_actors.signals.fuse_late`);
        * made at most once: under ``_lock`` (a body may hand ``ctx`` to
          other threads);
        * made after :meth:`_close` it is closed, and aborted only if a
          parent had aborted by the time of the close.
        """
        ctx = cls.__new__(cls)
        ctx._execution = execution
        ctx._signal = None
        ctx._parents = parents
        ctx._closed = False
        ctx._lock = threading.Lock()
        ctx._contexts = []
        ctx._concludes = False
        ctx._events = events
        ctx._progress_lock = None
        return ctx

    @property
    def signal(self) -> AbortSignal:
        """The body's signal: aborts when the caller's signal, a
        ``tools/execute`` wrapper's replacement or the runtime's stop signal
        does; closed (detached from them) once the body has returned."""
        signal = self._signal
        if signal is None:
            with self._lock:
                signal = self._signal
                if signal is None:
                    signal = fuse_late(self._parents)
                    if self._closed:
                        signal.close()
                    self._signal = signal
        return signal

    def _flight_signal(self) -> tuple[AbortSignal, Callable[[AbortSignal], None] | None]:
        """What a flight running this body (on a loop, no thread waiting
        for it) cancels its task on, and what its subscription runs first
        when that fires. With one parent: the parent itself, and
        :meth:`_catch_up`, so the signal is still fused only if the body
        reads it, and a body whose ``await`` raises the cancellation sees
        ``ctx.signal`` aborted all the same. With more: the fused signal."""
        parents = self._parents
        if self._signal is None and len(parents) == 1:
            return parents[0], self._catch_up
        return self.signal, None

    def _catch_up(self, parent: AbortSignal) -> None:
        """``parent`` aborted (on the aborting thread, in a callback of
        ``parent`` that may run before the fused signal's own): the fused
        signal, if it was made, aborts now. Under the lock: a signal being
        made now is assigned, subscribed (or born aborted), first."""
        with self._lock:
            signal = self._signal
        if signal is not None:
            follow(signal, parent)

    def _close(self) -> tuple[tuple[UserMessage, ...], bool]:
        """The body has returned: detach its signal from the parents (or,
        if it was never made, fix what a later read gets), and wait for a
        progress report that another thread is publishing (none is
        published from now on). What the body deferred
        (:meth:`defer_context`) and whether it concluded the turn, read
        under the same lock."""
        self._lock.acquire()
        try:
            self._closed = True
            taken = (tuple(self._contexts), self._concludes)
            progress = self._progress_lock
            signal = self._signal
            if signal is None:
                for parent in self._parents:
                    if parent.aborted:
                        break  # a later read is born aborted with that reason
                else:
                    # A signal closed with no parent aborted never aborts:
                    # a later read gets a closed fusion of nothing.
                    self._parents = ()
        finally:
            self._lock.release()
        if progress is not None:
            with progress:
                pass  # Invariant: no tools/progress of this call is published after this.
        if signal is not None:
            signal.close()
        return taken

    call_id = property(lambda self: self._execution.call_id, doc="The call's id.")
    root_call_id = property(lambda self: self._execution.root_call_id, doc="The root call's id.")
    name = property(lambda self: self._execution.name, doc="The tool's name.")
    arguments = property(
        lambda self: self._execution.arguments,
        doc="The frozen arguments (the body's ``args``): lists are tuples; ``thaw()`` gives plain ones.",
    )
    agent = property(lambda self: self._execution.agent, doc="The calling agent, if any.")
    tool_set = property(lambda self: self._execution.tool_set, doc="The step's admission, if any.")
    parent = property(lambda self: self._execution.parent, doc="The enclosing execution's token.")
    token = property(lambda self: self._execution.token, doc="This execution's token.")
    schema = property(lambda self: self._execution.schema, doc="Binding-time schema (PTC).")

    @property
    def deps(self) -> DepsT:
        """The application's dependencies (``ToolBatchInput.deps``, or the
        enclosing call's), as given; typed ``DepsT``
        (``ToolRunContext[MyDeps]``), never checked."""
        deps: DepsT = self._execution.deps  # (Any: no cast to call)
        return deps

    @property
    def execution(self) -> ToolExecution:
        return self._execution

    def report_progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        """Publish a ``tools/progress`` event for this call: its listeners
        get ``(execution, ToolProgress(progress, total, message))``, on this
        thread, before this returns. Call it from the body (sync or async)
        or a thread the body waits for; a call's reports are delivered in
        the order they are made and never after its ``tools/result``: once
        the body has returned, a report raises ``InvalidStateError``.
        ``progress`` and ``total`` are finite numbers, ``message`` text."""
        record = ToolProgress(_number(progress, "progress"), _number(total, "total", optional=True), message)
        if message is not None:
            if type(message) is not str:
                raise InvalidTypeError(f"report_progress(message=...) must be a str, not {type(message).__qualname__}")
            if surrogate_index(message) >= 0:  # (a listener writing JSON, ACP's or the CLI's, could not)
                raise InvalidValueError(f"report_progress(message=...): {value_problem(message)}")
        events = self._events
        if events is None:
            return
        with self._lock:
            lock = self._progress_lock
            if lock is None:
                lock = self._progress_lock = threading.RLock()
        with lock:
            if self._closed:
                raise self._settled("report_progress")
            execution = self._execution
            events.emit("tools/progress", execution, record, agent=execution.agent)

    def defer_context(self, context: UserMessage | str) -> None:
        """Attach ``context`` to this call's own result; the agent loop
        appends it only after the ``tool/result``. A ``str`` is the text of
        the message: ``ctx.defer_context("x")`` is
        ``ctx.defer_context(UserMessage([text("x")]))``. Once the body has
        returned, this raises ``InvalidStateError``."""
        if isinstance(context, str):
            context = UserMessage((TextBlock(context),))
        elif not isinstance(context, UserMessage):
            raise InvalidTypeError(
                f"defer_context takes a UserMessage or a str (its text), not {type(context).__qualname__}: "
                'ctx.defer_context("...") or ctx.defer_context(UserMessage([text("...")], source=...))'
            )
        with self._lock:
            if self._closed:
                raise self._settled("defer_context")
            self._contexts.append(context)

    def conclude_turn(self) -> None:
        """Mark a successful final result as terminal for the agent's turn.
        Once the body has returned, this raises ``InvalidStateError``."""
        with self._lock:
            if self._closed:
                raise self._settled("conclude_turn")
            self._concludes = True

    def _settled(self, method: str) -> InvalidStateError:
        """The one rule of the methods whose effect :meth:`_close` collects
        or ends: called after it, they raise this, never act unseen."""
        execution = self._execution
        return InvalidStateError(
            f'ctx.{method}() came after the body of tool "{execution.name}" (call "{execution.call_id}") '
            f"returned: the call has settled, so it would have no effect. Call ctx.{method}() before the "
            "body returns; a body that hands ctx to a thread or a task must wait for it (thread.join(), "
            "await the task)"
        )


# -- the pipeline's side ------------------------------------------------------
# What the pipeline (dsh_actors.pipeline) does to an execution and a body's
# context: functions of the module that owns both classes, not methods, so
# the objects listeners and bodies see offer none of it. Not exported.


#: ``open_signal(execution)``: let the ``tools/execute`` wrappers set
#: ``execution.signal``. ``restore_signal(execution, caller)``: the wrappers
#: are done, ``execution.signal`` is the caller's again, read-only. (The
#: methods themselves, as ``freeze`` below.)
open_signal = ToolExecution._open_signal
restore_signal = ToolExecution._restore_signal


#: ``freeze(execution)``: the call is final, nothing of ``execution``
#: changes any more. (The methods themselves, not wrappers around them:
#: these run once a call, and a Python frame less is a few hundred
#: instructions less.)
freeze = ToolExecution._freeze


#: ``approve(execution, ask, definition)``: the approval service allowed
#: ``ask`` for the call, about ``definition`` (see
#: :meth:`ToolExecution.approval_stands`).
approve = ToolExecution._approve

#: ``recheck_approval(execution, definition)``: prepared again, the call
#: runs ``definition`` (see :meth:`ToolExecution._recheck_approval`).
recheck_approval = ToolExecution._recheck_approval

#: ``found_tool(execution, found)``: what the pipeline's lookup of the
#: call's tool found (see :attr:`ToolExecution.tool_found`; the slot's own
#: setter: a lookup runs once or twice a call).
found_tool = _set_tool_found
#: ``found_definition(execution, definition)``: the registry's definition
#: that lookup found (see :attr:`ToolExecution.definition`).
found_definition = _set_definition


def settle_arguments(execution: ToolExecution, arguments: Any) -> None:
    """The pipeline's one rewrite of ``execution.arguments`` (see
    :meth:`ToolExecution._settle_arguments`)."""
    execution._settle_arguments(arguments)


#: ``fused_context(execution, parents, events=None)``: a body's context,
#: its signal fused lazily from ``parents`` (see
#: :meth:`ToolRunContext._fused`); :func:`close_context` it when the body
#: has returned.
fused_context = ToolRunContext._fused

#: ``close_context(ctx)``: the body has returned (see
#: :meth:`ToolRunContext._close`): what it deferred (``ctx.defer_context``)
#: and whether it concluded the turn.
close_context = ToolRunContext._close

#: ``flight_signal(ctx)``: what a flight running the body cancels its task
#: on, and what runs first when it fires (see :meth:`ToolRunContext._flight_signal`).
flight_signal = ToolRunContext._flight_signal


def _number(value: Any, name: str, *, optional: bool = False) -> Any:
    if value is None and optional:
        return None
    if type(value) is not int and type(value) is not float:
        raise InvalidTypeError(f"report_progress({name}=...) must be a number, not {type(value).__qualname__}")
    if type(value) is int:
        if -(2**63) <= value <= MAX_INT:
            return value
        raise InvalidValueError(
            f"report_progress({name}=...) must be a JSON number: an int in [-2**63, 2**64-1] (got {shown_value(value)})"
        )
    if not math.isfinite(value):
        raise InvalidValueError(f"report_progress({name}=...) must be finite, not {value!r}")
    return value
