"""One call on its trip through the pipeline: :class:`Call` (its mutable
trip state, owned by one thread at a time) and :func:`begin` (arguments
materialized once, before any policy).

A call's one named state is the schedule's: the ``CallState`` its batch
keeps for it (``scheduling/batch.py``). A :class:`Call` carries no state
of its own, only facts that are data, written by whoever holds the
call:

* ``outcome`` (with ``run_post`` and ``dispatched``): None until
  :meth:`Call.settle`, the one function that settles it, decided without
  dispatch (denied, aborted, bad arguments: ``dispatched=False``) or by
  the dispatch (the body's, a wrapper's, or the failure of a dispatch
  that broke: ``dispatched=True``); :meth:`Call.unprepare` clears it for
  a call prepared again (it never dispatched);
* ``ask``: set by :meth:`Call.defer` when the approval service answered
  ``"deferred"`` (the call waits for a decision, without an outcome);
* ``final``: set by ``finalize``, once (the result is frozen and
  published).

So after ``prepare`` a call is settled (``outcome``), deferred (``ask``),
or allowed to dispatch (neither).
"""

from __future__ import annotations

import contextvars
import difflib
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import (
    LosslessJsonError,
    ToolArgsError,
    ToolNotFoundError,
    ToolPolicyError,
)
from ..execution import CALL_DEPS, ToolExecution, ToolExecutionInput, found_definition, found_tool, settle_arguments
from ..json import FrozenDict, materialize
from ..model import (
    ToolExecutionResult,
    UserMessage,
)
from ..schema import absent_null_plan
from ..signals import AbortSignal
from ..visibility import executable, visible
from .results import (
    aborted,
    failure_from_exception,
)

if TYPE_CHECKING:  # pragma: no cover
    from ..kernel import Kernel
    from ..visibility import RegistryState


class Call:
    """One call's mutable trip state (see the module docstring for which
    thread owns it when)."""

    __slots__ = (
        "index",
        "execution",
        "caller",
        "registration",
        "outcome",
        "run_post",
        "dispatched",
        "phases_ran",
        "unprepared",
        "body_invoked",
        "body_contexts",
        "body_successes",
        "final",
        "unknown_hint",
        "mode",
        "raw_arguments",
        "override",
        "sealed",
        "body_parent",
        "body_hook",
        "loop",
        "body",
        "entered",
        "settled_aborted",
        "seen_generation",
        "seen_listeners",
        "context",
        "arguments_settled",
        "start_log",
        "start_step",
        "start_error",
        "ask",
        "answer",
        "found",
    )

    def __init__(
        self, index: int, execution: ToolExecution, raw_arguments: Any, found: dict[str, tuple[Any, int]] | None = None
    ) -> None:
        self.index = index
        self.execution = execution
        self.caller: AbortSignal = execution.signal
        self.registration: Any = None
        # What settle() wrote (see the module docstring): the outcome
        # (None: not settled), and whether it came from the dispatch.
        self.outcome: ToolExecutionResult | None = None
        # Invariant: run_post is False only for outcomes that bypass
        # post-execute (no phases at all, or a throwing policy/wrapper).
        self.run_post = False
        self.dispatched = False
        # Whether prepare() ran the pre-execute phases for it (got past its
        # pre-aborted check, and was not sent back before its hooks: see
        # prepare's before_hooks), once or more: never cleared, not even by
        # unprepare(). What abort_unstarted() decides post-execute by.
        self.phases_ran = False
        # How many times it was prepared and then sent back (unprepare()).
        self.unprepared = 0
        self.body_invoked = False
        self.body_contexts: tuple[UserMessage, ...] = ()
        # The successes its body produced (a wrapper may run it more than
        # once), each with whether the abort had fired when it settled.
        self.body_successes: list[tuple[ToolExecutionResult, bool]] = []
        self.final: ToolExecutionResult | None = None
        self.unknown_hint: str | None = None
        self.mode: str | None = None
        self.raw_arguments = raw_arguments
        # A tool the executor itself provides (PTC's run_code): a checked
        # definition used instead of the registry's for this call.
        self.override: Any = None
        # The body's result when render_success built it from frozen parts
        # only (no deferred contexts): finalize skips re-freezing exactly
        # that object. Compared by identity, so a replacement is frozen.
        self.sealed: ToolExecutionResult | None = None
        # Set by the batch executor: the batch's signal already fused with
        # the runtime's stop signal, so the body's fresh signal needs one
        # subscription instead of two. None: fuse both here.
        self.body_parent: AbortSignal | None = None
        # The executor's ``tool_body(definition)`` (None: the definition's
        # own body runs), asked when the body is about to run.
        self.body_hook: Any = None
        # The event loop an async body runs on (the batch's); None: the
        # runtime's own loop thread.
        self.loop: Any = None
        # (registration, body, is_async) once body_of() has answered.
        self.body: tuple[Any, Any, bool | None] | None = None
        # A body in flight on its loop (start_on_loop): what finish_on_loop needs.
        self.entered: Any = None
        # Whether the caller (or the runtime's stop) was aborted when the
        # dispatch outcome settled (the body returned; for a success a
        # tools/execute wrapper made, the waterfall did); None until then.
        # Finalize replaces a success with ABORTED only when this is True:
        # an abort after a body settled never rewrites its outcome, however
        # long the call waits for its turn to commit.
        self.settled_aborted: bool | None = None
        # What the call was classified and prepared under (see stamp()):
        # the registry's generation and the pre-execute listeners' version.
        self.seen_generation = -1
        self.seen_listeners = -1
        # The caller's contextvars, copied for this call: every hook of the
        # call runs in it (the stage functions enter it; see in_context).
        self.context: contextvars.Context = _EMPTY_CONTEXT
        # Whether lookup() settled the arguments against the registration.
        self.arguments_settled = False
        # The session that records the body's start (a logged batch's root
        # call), and the error if that write failed (the body then did not
        # run; the batch reads it when the call commits).
        self.start_log: Any = None
        # The step (turn, step, agent id) its tool/call named: its tool/start
        # names it too, so it pairs with this call even while another open
        # call shares its id (None: the event names no step).
        self.start_step: tuple[int, int, str | None] | None = None
        self.start_error: BaseException | None = None
        # The Ask the call waits on: set only when the approval service
        # deferred it (the suspension shows it to the person).
        self.ask: Any = None
        # An approval answer given in advance (a continued batch), with the
        # Ask it answers: prepare takes it instead of running the
        # pre-execute waterfall and asking the approval service again;
        # None: prepare from the start.
        self.answer: tuple[str, Any] | None = None
        # What lookup() found in the registry (not None), by tool name, with
        # the generation it found it at: found again without a walk while
        # nothing changed. Shared by a batch's calls (one agent, one tool
        # set: the same name finds the same registration).
        self.found: dict[str, tuple[Any, int]] = {} if found is None else found

    def settle(self, outcome: ToolExecutionResult, *, run_post: bool, dispatched: bool) -> None:
        """The call's outcome: the one place it is written. ``dispatched``:
        the dispatch's outcome (the body's, a wrapper's, or the failure of a
        dispatch that broke); False: decided without dispatch (denied,
        aborted, bad arguments). ``run_post``: whether post-execute sees it.
        (Whether an abort replaces it is ``settled_aborted``'s, set where
        the body or the ``tools/execute`` waterfall settled.)"""
        self.outcome = outcome
        self.run_post = run_post
        self.dispatched = dispatched

    def abort_unstarted(self) -> None:
        """Cancelled before its body started: ``ABORTED_BEFORE_DISPATCH``,
        whoever cancels it (the pre-aborted check, a listener's ``Cancel``,
        an abort found after the phases, a halt reclaiming it from its slot,
        one prepared again or deferred, one never prepared). Post-execute
        sees it if its pre-execute phases ran (``phases_ran``), once or
        more: the one place that rule is written."""
        self.settle(aborted(before_dispatch=True), run_post=self.phases_ran, dispatched=False)

    def give_up_preparing(self) -> None:
        """It was sent back to be prepared again ``MAX_UNPREPARED`` times:
        what it runs changed every time before its body could start (a hook
        that registers, unregisters or restricts tools, or adds listeners,
        whenever a call is prepared). It fails ``POLICY_FAILED`` without
        running; post-execute sees it, as any call whose phases ran."""
        name = self.execution.name
        error = ToolPolicyError(
            "prepare",
            f'tool "{name}" was prepared {self.unprepared} times, and each time the registry or the '
            "pre-execute listeners changed before its body could start: it did not run (does a listener, "
            "guard, approval service or is_concurrency_safe classifier, of this call or a later one, "
            "register, unregister or restrict tools, or add listeners, every time it runs?)",
        )
        self.settle(failure_from_exception(error), run_post=self.phases_ran, dispatched=False)

    def defer(self, ask: Any) -> None:
        """The approval service answered ``"deferred"`` for ``ask``: the
        call waits for a decision, with no outcome."""
        self.ask = ask

    def unprepare(self) -> None:
        """Unprepared again: the call was prepared, but what it was prepared
        under changed before its body started (see :func:`stale`); it will
        be classified and prepared again. (It never dispatched.)"""
        assert not self.dispatched, self
        self.unprepared += 1
        self.mode = None
        self.registration = None
        self.body = None
        self.outcome = None
        self.run_post = False

    def __repr__(self) -> str:
        if self.final is not None:
            facts = "final"
        elif self.outcome is not None:
            facts = "dispatched" if self.dispatched else "settled undispatched"
        elif self.ask is not None:
            facts = "deferred"
        else:
            facts = "unsettled"
        return f"<Call #{self.index} {self.execution.name} {facts}>"


def abort_seen(call: Call, stopping: AbortSignal) -> bool:
    """Whether the call's caller or the runtime's stop (``stopping``) has
    aborted: what an outcome settling now is held against (a success that
    settles after an abort becomes ``ABORTED``; see ``settled_aborted``)."""
    return call.caller.aborted or stopping.aborted


class BadArguments:
    """Argument text that parsed as JSON but is not lossless (an integer out
    of range): the call fails ``INVALID_ARGS`` without any phase."""

    __slots__ = ("error",)

    def __init__(self, error: LosslessJsonError) -> None:
        self.error = error

    def __repr__(self) -> str:
        return f"BadArguments({self.error.message!r})"


def begin(
    index: int,
    inp: ToolExecutionInput,
    *,
    override: Any = None,
    unknown_hint: str | None = None,
    route_to_executor: bool = False,
) -> Call:
    """Materialize the arguments (once, before any policy) and create the
    execution. Non-JSON arguments settle the call at once with
    ``INVALID_ARGS``: no phase runs, but it still publishes its result.

    ``override`` is a checked definition the executor provides for this
    call (instead of the registry's). ``route_to_executor`` settles the call
    at once as ``UNKNOWN_TOOL`` with ``unknown_hint`` (the PTC-only rule:
    a model-direct call to a native tool), again without any phase.
    """
    return begin_call(
        index,
        inp.call_id,
        inp.name,
        inp.arguments,
        inp.signal,
        inp.agent,
        inp.tool_set,
        root_call_id=inp.root_call_id,
        parent=inp.parent,
        schema=inp.schema,
        override=override,
        unknown_hint=unknown_hint,
        route_to_executor=route_to_executor,
        deps=inp.deps,
    )


_EMPTY_CONTEXT = contextvars.Context()


def begin_call(
    index: int,
    call_id: str,
    name: str,
    raw: Any,
    signal: AbortSignal,
    agent: Any,
    tool_set: Any,
    *,
    root_call_id: str | None = None,
    parent: Any = None,
    schema: Any = None,
    override: Any = None,
    unknown_hint: str | None = None,
    route_to_executor: bool = False,
    context: contextvars.Context | None = None,
    deps: Any = None,
    found: dict[str, tuple[Any, int]] | None = None,
) -> Call:
    """:func:`begin` from the fields of a ``ToolExecutionInput`` (the batch
    executor's hot path builds no input record per call).

    ``context``: the batch's context (bound with its deps, see
    ``intake.bind_context``), copied for this call; None: a copy of the
    current one, where ``deps`` None inherits the enclosing call's.
    ``found``: what :func:`lookup` found for calls of the same agent and
    tool set (a batch's), shared with this one (None: its own)."""
    if context is None:
        context = contextvars.copy_context()
        if deps is None:
            deps = context.get(CALL_DEPS)
        elif context.get(CALL_DEPS) is not deps:
            context.run(CALL_DEPS.set, deps)
    else:
        context = context.copy()
    bad: LosslessJsonError | None = None
    arguments: Any = None
    if type(raw) is BadArguments:
        bad = raw.error
    else:
        try:
            arguments = materialize(raw, "arguments")
        except LosslessJsonError as exc:
            bad = exc
    execution = ToolExecution(
        call_id=call_id,
        name=name,
        arguments=arguments,
        signal=signal,
        root_call_id=root_call_id,
        agent=agent,
        tool_set=tool_set,
        parent=parent,
        schema=schema,
        deps=deps,
    )
    call = Call(index, execution, raw, found)
    call.context = context
    call.override = override
    call.unknown_hint = unknown_hint
    if route_to_executor:
        call.settle(failure_from_exception(ToolNotFoundError(name, unknown_hint)), run_post=False, dispatched=False)
    elif bad is not None:
        call.settle(
            failure_from_exception(ToolArgsError([f"arguments are not lossless JSON: {bad.message}"])),
            run_post=False,
            dispatched=False,
        )
    return call


#: How many times a call may be sent back to be prepared again (what it
#: runs changed before its body started) before it fails instead.
MAX_UNPREPARED = 16

#: ``prepare(..., registration=LOOK_UP)``: look the tool up now.
LOOK_UP: Any = object()


def stamp(rt: Kernel, call: Call) -> None:
    """Record what ``call`` is about to be classified and prepared under:
    read before the classification, so a change made during it makes the
    call :func:`stale`. A call stamped again (it went stale before its body
    started) meets its registration again: its arguments are settled again
    from the model's, against the registration found then."""
    call.seen_generation = rt.state.generation
    call.seen_listeners = rt.events.version
    if call.arguments_settled:
        call.arguments_settled = False
        settle_arguments(call.execution, materialize(call.raw_arguments, "arguments"))


def stale(rt: Kernel, call: Call) -> bool:
    """Whether the registry (a registration, restriction, guard, executor)
    on the call's agent's chain, or the pre-execute listeners, changed since
    ``call`` was stamped: its body must not start with what it was
    prepared under. A change in a scope off the chain (another agent's)
    does not make it stale: the call's stamp moves past it, so the next
    look is two reads again. (Called by whoever holds the call, or takes
    it from the work mailbox under its lock.)"""
    if call.seen_listeners != rt.events.version:
        return True
    state = rt.state
    generation = state.generation  # read first (see RegistryState.changed_since)
    if call.seen_generation == generation:
        return False
    if state.changed_since(call.seen_generation, call.execution.agent):
        return True
    call.seen_generation = generation
    return False


def not_found(rt: Kernel, call: Call) -> ToolNotFoundError:
    """``UNKNOWN_TOOL`` for ``call``: with its executor's hint (PTC routes a
    direct call to ``run_code``), else with the names the agent may call
    that are nearest the one sent, for a model that misspelled one."""
    execution = call.execution
    hint = call.unknown_hint
    if hint is None:
        hint = _nearest(rt.state, execution.name, execution.agent, execution.tool_set)
    return ToolNotFoundError(execution.name, hint)


def _nearest(state: RegistryState, name: str, agent: Any, tool_set: Any) -> str | None:
    if len(name) > _NEAREST_LONGEST:
        return None  # (no tool has such a name: not worth difflib's quadratic time)
    names = [known for known in visible(state, agent, tool_set) if executable(state, known, agent, tool_set)]
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    if not close:
        return None
    quoted = [f'"{known}"' for known in close]
    listed = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
    return f"Did you mean {listed}?"


#: The longest name whose nearest tool names are looked for (a tool's is at most 64 characters).
_NEAREST_LONGEST = 128


def lookup(rt: Kernel, call: Call) -> Any:
    """The registration ``call`` runs (the executor's override, or the
    registry's; ``None``: unknown). The one place a call meets it, so the
    arguments are settled here, before any phase reads them: a ``null`` for
    an optional parameter whose schema does not accept ``null`` (what a
    strict model sends for one it leaves out) is dropped, keyed on the
    tool's own schema (:func:`~dsh_actors.schema.absent_null_plan`), when
    the arguments as sent do not validate. Whether it found one is the
    execution's ``tool_found``, and the definition it found (the
    override's or the registry's) its ``definition``."""
    execution = call.execution
    if call.override is not None:
        registration = call.override
    else:
        state = rt.state
        generation = state.generation  # read first, as the registry's view cache does
        name = execution.name
        found = call.found.get(name)
        tool_set = execution.tool_set
        if found is None or found[1] != generation or (tool_set is not None and tool_set.disposed):
            # What the registry says now. The same registration again while
            # the generation has not moved (the registry's views are cached
            # by generation too) and the call's tool set is not disposed
            # (the one change that moves no generation).
            registration = executable(state, name, execution.agent, tool_set)
            if registration is not None:
                call.found[name] = (registration, generation)
        else:
            registration = found[0]
    found_tool(execution, registration is not None)
    found_definition(execution, None if registration is None else registration.definition)
    if registration is not None and not call.arguments_settled:
        call.arguments_settled = True
        arguments = execution.arguments
        if type(arguments) is FrozenDict:
            checked = registration if call.override is not None else registration.checked
            validator = checked.parameter_validator
            plan = absent_null_plan(validator.schema)
            if plan is not None:
                settled = plan.apply(arguments)
                # Only arguments the schema refuses as sent (a strict model's
                # nulls): a null that one branch of a union drops, another
                # may take, and what is valid as sent is what the model meant.
                if settled is not arguments and not validator.is_valid(arguments):
                    settle_arguments(execution, settled)
    return registration


_Stage = TypeVar("_Stage", bound=Callable[..., Any])


def in_context(stage: _Stage) -> _Stage:
    """``stage(rt, call, ...)`` run in ``call.context``: how every hook of a
    call (listeners, guards, the approval service, wrappers, the body,
    render, ``tools/result`` observers) sees the caller's contextvars. One
    stage at a time holds a call (its owner's thread), so the context is
    never entered twice at once; an async body runs as a task in a copy."""

    @functools.wraps(stage)
    def run(rt: Any, call: Call, *args: Any) -> Any:
        return call.context.run(stage, rt, call, *args)

    return run  # type: ignore[return-value]
