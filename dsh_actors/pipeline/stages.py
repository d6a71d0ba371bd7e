"""One call's trip through the pipeline (docs/reference.md, section 5), as three stages.

* :func:`prepare` (the batch's executor actor, in model order): the
  pre-aborted check, the ``tools/pre-execute`` waterfall, approval routing
  for ``Ask``, guards, and the recheck of cancellation.
* :func:`dispatch` (a call actor, or the executor itself for a call it runs
  inline; the only stage that overlaps): the ``tools/execute`` waterfall
  around the body, output validation, ``render`` and
  ``presentation_meta``.
* :func:`finalize` (the executor actor, in model order):
  ``project_content``, the ``tools/post-execute`` waterfall, the
  cancellation replacement, ``finalize_content`` (exactly once), the final
  freeze and ``tools/result``.

A :class:`Call` carries one call between the stages. It is owned by exactly
one thread at a time: the executor puts it in the batch's work mailbox, a
call actor takes it from there, dispatches it and hands it back in a
``Settled`` message. ``rt.tools.dispatch`` runs all three stages inline on
the caller's thread (:func:`run_inline`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
from collections.abc import Callable
from dataclasses import replace
from enum import Enum
from types import CoroutineType
from typing import TYPE_CHECKING, Any

from loguru import logger

from ..definition import is_async_callable
from ..errors import (
    AbortError,
    LosslessJsonError,
    ToolArgsError,
    ToolNotFoundError,
    ToolPolicyError,
    safe_str,
)
from ..execution import ToolExecution, ToolExecutionInput, ToolRunContext
from ..json import materialize
from ..model import (
    Accept,
    Allow,
    ApprovalRequest,
    Ask,
    Block,
    Cancel,
    Deny,
    TextBlock,
    ToolExecutionFailure,
    ToolExecutionResult,
    ToolExecutionSuccess,
    UNSET,
    UserMessage,
    check_content,
)
from ..signals import AbortSignal
from .flights import Flight
from ..visibility import check_guards, executable
from .results import aborted, failure, failure_from_exception, freeze_result, is_result, render_success

if TYPE_CHECKING:  # pragma: no cover
    from ..runtime import ToolRuntime

__all__ = [
    "BadArguments",
    "Call",
    "CallPhase",
    "LOOK_UP",
    "begin",
    "begin_call",
    "dispatch",
    "finalize",
    "finish_on_loop",
    "prepare",
    "run_inline",
    "start_on_loop",
    "target_loop",
    "wants_loop",
]

BLOCKED_DEFAULT = "tool result blocked by post-execute policy"


class CallPhase(str, Enum):
    """Where a call is on its trip. Transitions only move forward:
    PENDING → (READY → DISPATCHING → DISPATCHED | RESOLVED) → DONE."""

    PENDING = "pending"
    READY = "ready"  # prepared and allowed: waits for a call actor
    DISPATCHING = "dispatching"  # a call actor runs its wrappers and body
    DISPATCHED = "dispatched"  # the dispatch outcome is back
    RESOLVED = "resolved"  # decided without dispatch (denied, aborted, ...)
    DONE = "done"  # finalized: the final result is frozen and published


class Call:
    """One call's mutable trip state (see the module docstring for which
    thread owns it when)."""

    __slots__ = (
        "index",
        "execution",
        "caller",
        "phase",
        "registration",
        "outcome",
        "run_post",
        "body_invoked",
        "body_contexts",
        "body_results",
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
    )

    def __init__(self, index: int, execution: ToolExecution, raw_arguments: Any) -> None:
        self.index = index
        self.execution = execution
        self.caller: AbortSignal = execution.signal
        self.phase = CallPhase.PENDING
        self.registration: Any = None
        self.outcome: ToolExecutionResult | None = None
        # Invariant: run_post is False only for outcomes that bypass
        # post-execute (no phases at all, or a throwing policy/wrapper).
        self.run_post = False
        self.body_invoked = False
        self.body_contexts: tuple[UserMessage, ...] = ()
        self.body_results: list[ToolExecutionResult] = []
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

    def resolve(self, outcome: ToolExecutionResult, *, run_post: bool) -> None:
        self.outcome = outcome
        self.run_post = run_post
        self.phase = CallPhase.RESOLVED

    def __repr__(self) -> str:
        return f"<Call #{self.index} {self.execution.name} {self.phase.value}>"


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
    execution. Non-JSON arguments resolve the call at once with
    ``INVALID_ARGS``: no phase runs, but it still publishes its result.

    ``override`` is a checked definition the executor provides for this
    call (instead of the registry's). ``route_to_executor`` resolves the call
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
    )


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
) -> Call:
    """:func:`begin` from the fields of a ``ToolExecutionInput`` (the batch
    executor's hot path builds no input record per call)."""
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
    )
    call = Call(index, execution, raw)
    call.override = override
    call.unknown_hint = unknown_hint
    if route_to_executor:
        call.resolve(failure_from_exception(ToolNotFoundError(name, unknown_hint)), run_post=False)
    elif bad is not None:
        call.resolve(
            failure_from_exception(ToolArgsError([f"arguments are not lossless JSON: {bad.message}"])),
            run_post=False,
        )
    return call


# --------------------------------------------------------------------------
# prepare
# --------------------------------------------------------------------------


#: ``prepare(..., registration=LOOK_UP)``: look the tool up now.
LOOK_UP: Any = object()


def prepare(rt: ToolRuntime, call: Call, registration: Any = LOOK_UP) -> None:
    """Run the pre-dispatch phases of ``call`` on the calling thread.

    Leaves the call READY (allowed: dispatch it) or RESOLVED. Pre-execute
    listeners, the approval service and guards run here; they may block
    (an approval waits for a person) but must observe ``execution.signal``.

    ``registration``: what the caller looked up for this call just now, on
    this thread (the executor classifies a call right before preparing it);
    by default the tool is looked up here.
    """
    if call.phase is CallPhase.RESOLVED:
        return
    execution = call.execution
    if call.caller.aborted:
        call.resolve(aborted(before_dispatch=True), run_post=False)
        return
    call.registration = _lookup(rt, call) if registration is LOOK_UP else registration
    state = rt.state
    reason: str | None
    events = rt.events
    # Without a listener the waterfall is its default, Allow(): skip it.
    if events.listeners("tools/pre-execute", execution.agent):
        try:
            decision: Any = events.waterfall(
                "tools/pre-execute", _allow, execution, agent=execution.agent, awaiter=_awaiter(rt, call)
            )
            if type(decision) is Ask:
                decision = _route_approval(rt, call, decision)
        except BaseException as exc:  # noqa: BLE001 - a throwing policy skips post-execute
            call.resolve(failure_from_exception(exc), run_post=False)
            return
    else:
        decision = _ALLOW
    match decision:
        case Allow():
            pass
        case Deny(reason=reason, info=info):
            call.resolve(failure(safe_str(reason), info), run_post=True)
            return
        case Cancel():
            call.resolve(aborted(before_dispatch=True), run_post=True)
            return
        case ToolExecutionFailure():  # from approval routing: a denial
            call.resolve(decision, run_post=True)
            return
        case _:
            problem = ToolPolicyError(
                "tools/pre-execute",
                f"a listener returned {type(decision).__qualname__}; expected Allow, Deny, Cancel or Ask",
            )
            call.resolve(failure_from_exception(problem), run_post=False)
            return
    # Guards run only after an allow, and nothing can turn their denial back.
    reason = check_guards(state, execution)
    if reason is not None:
        call.resolve(failure(reason), run_post=True)
        return
    caller: AbortSignal = call.caller  # the listeners may have aborted it meanwhile
    if caller.aborted:
        call.resolve(aborted(before_dispatch=True), run_post=True)
        return
    call.phase = CallPhase.READY


def _awaiter(rt: ToolRuntime, call: Call) -> Callable[[Any], Any]:
    """How prepare waits for an async listener or approval service: as a
    flight on the batch's loop, observing the call's signal."""
    execution = call.execution

    def wait(coro: Any) -> Any:
        return _await_on_loop(rt, coro, call.caller, call.loop, execution.name, execution.call_id)

    return wait


def _allow() -> Allow:
    return Allow()


_ALLOW = Allow()


def _route_approval(rt: ToolRuntime, call: Call, ask: Ask) -> Any:
    """Ask the approval service; ``Allow()`` only for ``"allowed-once"``,
    else a denial (a failure). A raising service propagates."""
    execution = call.execution
    name = execution.name
    service = rt.approvals.service
    if service is None:
        return failure(
            ask.reason
            if type(ask.reason) is str and ask.reason
            else f'tool "{name}" requires approval, but no approval service is installed'
        )
    if execution.agent is None:
        return failure(f'tool "{name}" requires approval, but the call has no agent to route it through')
    request = ApprovalRequest(
        agent=execution.agent,
        tool_name=name,
        call_id=execution.call_id,
        reason=ask.reason,
        display_reason=ask.display_reason,
        signal=call.caller,
        arguments=execution.arguments,
    )
    with rt.waiting():  # a person may take a while: other batches step meanwhile
        answer: Any = service(request)
    if inspect.iscoroutine(answer):
        # An async approval service: awaited on the batch's loop (this thread waits).
        answer = _awaiter(rt, call)(answer)
    if answer == "allowed-once" and type(answer) is str:
        return Allow()
    if answer == "rejected":
        return failure(f'the user rejected tool "{name}"')
    if answer == "cancelled":
        return failure(f'approval for tool "{name}" was cancelled')
    if answer == "unavailable":
        return failure(f'tool "{name}" requires approval, but no approval channel is available')
    raise ToolPolicyError(
        "approval", f'the approval service answered {safe_str(repr(answer))} for tool "{name}"'
    )


# --------------------------------------------------------------------------
# dispatch
# --------------------------------------------------------------------------


_EXECUTE = ("tools/execute",)


def dispatch(rt: ToolRuntime, call: Call) -> None:
    """Run the ``tools/execute`` waterfall around the body (on a call actor,
    or on the executor for a call run inline). Leaves the call DISPATCHED
    with its outcome; never raises."""
    execution = call.execution
    if not rt.events.observed(_EXECUTE, execution.agent):
        # No wrapper: nothing can replace the signal, or hand back a result
        # the body did not produce, or unregister the tool in between.
        try:
            result: Any = _run_body(rt, call)
            skip_post = False
        except BaseException as exc:  # noqa: BLE001 - _run_body contains the body; be sure
            result = failure_from_exception(exc)
            skip_post = True
        call.outcome = result
        call.run_post = not skip_post
        call.phase = CallPhase.DISPATCHED
        return
    caller = call.caller
    execution._open_signal()
    try:
        events = rt.events
        result = events.waterfall(
            "tools/execute", lambda: _run_body(rt, call), execution, agent=execution.agent
        )
        skip_post = False
        if not is_result(result):
            result = failure_from_exception(
                ToolPolicyError(
                    "tools/execute",
                    f"a wrapper returned {type(result).__qualname__}; expected a ToolExecutionResult",
                )
            )
            skip_post = True
        elif type(result) is ToolExecutionSuccess and not _produced(result, call.body_results):
            # A success the body did not produce: revalidate and re-render it.
            result = _revalidate(rt, call, result)
    except BaseException as exc:  # noqa: BLE001 - a throwing wrapper skips post-execute
        result = failure_from_exception(exc)
        skip_post = True
    finally:
        execution._restore_signal(caller)
    call.outcome = result
    call.run_post = not skip_post
    call.phase = CallPhase.DISPATCHED


def _produced(result: Any, body_results: list[ToolExecutionResult]) -> bool:
    for produced in body_results:
        if produced is result:
            return True
    return False


def _lookup(rt: ToolRuntime, call: Call) -> Any:
    if call.override is not None:
        return call.override
    execution = call.execution
    return executable(rt.state, execution.name, execution.agent, execution.tool_set)


class _Entered:
    """A body about to run: its context, what it renders with, and the
    callable (the definition's, or the executor's replacement)."""

    __slots__ = ("ctx", "definition", "registration", "body", "is_async")

    def __init__(self, ctx: ToolRunContext, definition: Any, registration: Any, body: Any, is_async: bool | None) -> None:
        self.ctx = ctx
        self.definition = definition
        self.registration = registration
        self.body = body
        self.is_async = is_async


def body_of(call: Call, registration: Any) -> tuple[Any, bool | None]:
    """The callable ``call`` runs for ``registration`` and whether it is
    ``async def`` (None: unknown, find out when it is called): the
    executor's ``tool_body`` replacement, asked once per call, or the
    definition's own body."""
    memo = call.body
    if memo is not None and memo[0] is registration:
        return memo[1], memo[2]
    definition = registration.definition
    body: Any = definition.execute
    is_async: bool | None = registration.is_async
    hook = call.body_hook
    if hook is not None:
        replacement = hook(definition)
        if replacement is not None:
            body, is_async = replacement, is_async_callable(replacement)
    call.body = (registration, body, is_async)
    return body, is_async


def _enter_body(rt: ToolRuntime, call: Call, registration: Any) -> _Entered | ToolExecutionResult:
    """Everything before the body's first line: the lookup (unless
    ``registration`` is given), the not-found and aborted checks, the fresh
    signal, the body to call. A result when the body does not run."""
    execution = call.execution
    if registration is None:
        registration = _lookup(rt, call)
    if registration is None:
        result: ToolExecutionResult = failure_from_exception(ToolNotFoundError(execution.name, call.unknown_hint))
        call.body_results.append(result)
        return result
    if call.registration is None:
        call.registration = registration
    stopping = rt.stop_signal
    if call.caller.aborted or stopping.aborted:
        # Aborted after it was prepared, before its body ran: not invoked.
        result = aborted(before_dispatch=True)
        call.body_results.append(result)
        return result
    wrapper_signal = execution.signal
    # A fresh signal for the body: the caller's, the wrapper's replacement
    # (if any), and the runtime's stop signal; the first abort wins. It is
    # fused only if the body (or the async path) reads ctx.signal, and
    # closed by ctx._close() in _leave_body (see ToolRunContext._fused).
    if wrapper_signal is not call.caller:
        signals: tuple[AbortSignal, ...] = (call.caller, wrapper_signal, stopping)
    elif call.body_parent is not None:
        signals = (call.body_parent,)  # fires exactly when the caller or the stop does
    else:
        signals = (call.caller, stopping)
    ctx = ToolRunContext._fused(execution, signals)
    body, is_async = body_of(call, registration)
    call.body_invoked = True
    return _Entered(ctx, registration.definition, registration, body, is_async)


def _leave_body(call: Call, entered: _Entered, value: Any, error: BaseException | None) -> ToolExecutionResult:
    """Everything after the body's last line: its value validated and
    rendered (or its exception as a failure), with the contexts it added."""
    ctx = entered.ctx
    result: ToolExecutionResult
    try:
        contexts, concludes = ctx._take()
        if error is not None:
            result = failure_from_exception(error, contexts)
        else:
            result = render_success(
                call.execution,
                entered.definition,
                entered.registration.output_validator,
                value,
                additional_contexts=contexts,
                concludes_turn=concludes,
            )
            if not contexts and type(result) is ToolExecutionSuccess:
                # Invariant: render_success materialized the value and the meta
                # and checked the content; with no deferred contexts (which it
                # does not check) nothing in it is left to freeze.
                call.sealed = result
    finally:
        ctx._close()
    if contexts:
        call.body_contexts = call.body_contexts + contexts
    call.body_results.append(result)
    return result


def _run_body(rt: ToolRuntime, call: Call, registration: Any = None) -> ToolExecutionResult:
    """The innermost step of ``tools/execute`` on this thread: enter, invoke
    the body (an async one on its loop, this thread waiting), leave."""
    entered = _enter_body(rt, call, registration)
    if not isinstance(entered, _Entered):
        return entered
    try:
        value = _invoke(rt, entered.body, call.execution.arguments, entered.ctx, entered.is_async, call.loop)
    except BaseException as exc:  # noqa: BLE001 - any exception from user code is a failure
        return _leave_body(call, entered, None, exc)
    return _leave_body(call, entered, value, None)


def _invoke(
    rt: ToolRuntime, fn: Any, args: Any, ctx: ToolRunContext, is_async: bool | None = None, loop: Any = None
) -> Any:
    """Call a tool body on this thread: a sync body here; an ``async def``
    body (or a sync one that returns a coroutine) as a :class:`Flight` on
    its loop, this thread waiting for it. ``is_async`` is what registration
    found (``is_async_callable(fn)``, computed once); ``None`` computes it."""
    if is_async_callable(fn) if is_async is None else is_async:
        signal = ctx.signal  # the task's cancellation needs it: fuse it now
        return _await_on_loop(rt, fn(args, ctx), signal, loop, ctx.name, ctx.call_id)
    value = fn(args, ctx)
    if isinstance(value, CoroutineType):  # inspect.iscoroutine
        return _await_on_loop(rt, value, ctx.signal, loop, ctx.name, ctx.call_id)
    return value


def target_loop(rt: ToolRuntime, loop: Any) -> asyncio.AbstractEventLoop:
    """The loop an async body runs on: the batch's, or the runtime's own."""
    if loop is not None:
        return loop  # type: ignore[no-any-return]
    return rt.loop.loop


def _await_on_loop(
    rt: ToolRuntime, coro: Any, signal: AbortSignal, loop: Any = None, name: str = "?", call_id: str = "?"
) -> Any:
    """Run ``coro`` as a :class:`Flight` on ``loop`` (None: the runtime's
    own loop thread) and wait for it to end, on this thread: for a body
    under a ``tools/execute`` wrapper (the wrapper needs the result on its
    thread) and for ``rt.tools.dispatch``. A call actor waiting here lends
    its slot (within a bound). Cancellation and a loop that is gone behave
    as for a batch's async call (``pipeline/flights.py``)."""
    target = target_loop(rt, loop)
    if loop is None and rt.loop.in_loop_thread():  # pragma: no cover - defensive
        coro.close()
        raise RuntimeError("an async tool body cannot be awaited from the runtime's loop thread")
    if target.is_running() and _on_thread_of(target):
        coro.close()
        raise RuntimeError(
            f'async tool "{name}" would be awaited on its own event loop\'s thread, blocking it '
            "(use execute_async from a coroutine)"
        )
    done: concurrent.futures.Future[Any] = concurrent.futures.Future()

    def on_end(value: Any, error: BaseException | None) -> None:
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(value)

    rt.loop_watch.launch(Flight(coro, signal, target, name, call_id, on_end))
    with rt.waiting(bounded=True):  # a parked call actor holds no slot (within a bound)
        return done.result()


def _on_thread_of(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def start_on_loop(
    rt: ToolRuntime, call: Call, on_end: Callable[[Call, Any, BaseException | None], None]
) -> Flight | None:
    """``call``'s async body as a :class:`Flight` for its loop, ready to
    launch (``rt.loop_watch.launch_all``), nobody waiting for it: the
    batch's executor does this for an async call that no ``tools/execute``
    wrapper observes, so no thread waits for the body. ``on_end(call,
    value, error)`` is called once when the body has ended (on the loop's
    thread: it must only post a message), and the executor then calls
    :func:`finish_on_loop`. None: the call did not start (not found,
    aborted, or it settled at once) and is DISPATCHED already."""
    entered = _enter_body(rt, call, call.registration)
    if not isinstance(entered, _Entered):
        _dispatched(call, entered)
        return None
    ctx = entered.ctx
    try:
        coro = entered.body(call.execution.arguments, ctx)
    except BaseException as exc:  # noqa: BLE001 - a body that fails when called
        _dispatched(call, _leave_body(call, entered, None, exc))
        return None
    if not isinstance(coro, CoroutineType) and not asyncio.iscoroutine(coro):
        # Not a coroutine after all (a callable object that said async).
        _dispatched(call, _leave_body(call, entered, coro, None))
        return None
    call.entered = entered

    def ended(value: Any, error: BaseException | None) -> None:
        on_end(call, value, error)

    execution = call.execution
    return Flight(coro, ctx.signal, target_loop(rt, call.loop), execution.name, execution.call_id, ended)


def finish_on_loop(call: Call, value: Any, error: BaseException | None) -> None:
    """The end of a body :func:`start_on_loop` started, on the executor:
    validate and render its value; the call is DISPATCHED."""
    entered = call.entered
    assert entered is not None, call
    call.entered = None
    _dispatched(call, _leave_body(call, entered, value, error))


def _dispatched(call: Call, result: ToolExecutionResult) -> None:
    call.outcome = result
    call.run_post = True
    call.phase = CallPhase.DISPATCHED


def wants_loop(rt: ToolRuntime, call: Call, registration: Any) -> bool:
    """Whether ``call`` (about to dispatch) runs as a flight the executor
    does not wait for: its body is ``async def`` and no ``tools/execute``
    wrapper observes it (a wrapper needs the body's result on its thread)."""
    if registration is None or rt.events.observed(_EXECUTE, call.execution.agent):
        return False
    return body_of(call, registration)[1] is True


def _revalidate(rt: ToolRuntime, call: Call, result: ToolExecutionSuccess) -> ToolExecutionResult:
    return _render_value(rt, call, result.value, result.additional_contexts, result.concludes_turn)


def _render_value(
    rt: ToolRuntime, call: Call, value: Any, contexts: tuple[UserMessage, ...], concludes_turn: bool
) -> ToolExecutionResult:
    """``value`` validated and rendered by the tool as registered now (a
    success a wrapper or a post-execute policy supplied), or UNKNOWN_TOOL."""
    registration = _lookup(rt, call)
    if registration is None:
        return failure_from_exception(ToolNotFoundError(call.execution.name, call.unknown_hint), contexts)
    return render_success(
        call.execution,
        registration.definition,
        registration.output_validator,
        value,
        additional_contexts=contexts,
        concludes_turn=concludes_turn,
    )


# --------------------------------------------------------------------------
# finalize
# --------------------------------------------------------------------------


def finalize(rt: ToolRuntime, call: Call) -> ToolExecutionResult:
    """Post-execute, cancellation, ``finalize_content``, freeze and
    ``tools/result`` (the executor's thread). Never raises."""
    execution = call.execution
    result = call.outcome
    assert result is not None, "finalize() before the call was prepared or dispatched"
    if call.registration is None:
        # Resolved without any phase (pre-aborted, non-JSON, skipped): its
        # finalize_content still runs exactly once.
        call.registration = _lookup(rt, call)
    definition = None if call.registration is None else call.registration.definition
    if call.run_post and (
        (definition is not None and definition.project_content is not None)
        or rt.events.listeners("tools/post-execute", execution.agent)
    ):
        # (Without either, post-execute is Accept() with nothing to apply.)
        result = _post_execute(rt, call, result, definition)
    # Caller cancellation (or the runtime stopping under the call) replaces
    # only a successful outcome.
    if type(result) is ToolExecutionSuccess and (call.caller.aborted or rt.stop_signal.aborted):
        result = aborted(
            before_dispatch=not call.body_invoked, additional_contexts=result.additional_contexts
        )
    if result is not call.sealed:
        result = _freeze_or_fail(result)
    finalize_content = None if definition is None else definition.finalize_content
    if finalize_content is not None:
        try:
            replacement = finalize_content(execution, result)
            if replacement is not None:
                result = replace(result, content=check_content(replacement))
        except BaseException as exc:  # noqa: BLE001 - finalize_content must be total; contain it
            logger.opt(exception=exc).error(
                "finalize_content of tool {!r} raised: {}", execution.name, safe_str(exc)
            )
            result = failure_from_exception(
                ToolPolicyError("finalize_content", safe_str(exc)), result.additional_contexts
            )
        result = _freeze_or_fail(result)
    execution._freeze()
    call.final = result
    call.phase = CallPhase.DONE
    rt.events.emit("tools/result", execution, result, agent=execution.agent)
    return result


def _freeze_or_fail(result: ToolExecutionResult) -> ToolExecutionResult:
    try:
        return freeze_result(result)
    except LosslessJsonError as exc:
        fallback = failure_from_exception(ToolPolicyError("result", f"not lossless JSON: {exc.message}"))
        return freeze_result(fallback)
    except BaseException as exc:  # noqa: BLE001 - hostile objects in a result
        fallback = failure_from_exception(ToolPolicyError("result", safe_str(exc)))
        return freeze_result(fallback)


def _post_execute(
    rt: ToolRuntime, call: Call, result: ToolExecutionResult, definition: Any
) -> ToolExecutionResult:
    execution = call.execution
    project = None if definition is None else definition.project_content
    if project is not None:
        try:
            projected = project(execution, result)
            if projected is not None:
                result = replace(result, content=check_content(projected))
        except BaseException as exc:  # noqa: BLE001
            return failure_from_exception(
                ToolPolicyError("project_content", safe_str(exc)), result.additional_contexts
            )
    entering = result
    try:
        decision = rt.events.waterfall(
            "tools/post-execute", _accept, execution, entering, agent=execution.agent
        )
    except BaseException as exc:  # noqa: BLE001
        return failure_from_exception(exc, entering.additional_contexts)
    return _apply_post_decision(rt, call, entering, decision)


def _accept() -> Accept:
    return Accept()


def _apply_post_decision(
    rt: ToolRuntime, call: Call, result: ToolExecutionResult, decision: Any
) -> ToolExecutionResult:
    kind = type(decision)
    if kind is Block:
        try:
            feedback = check_content(decision.feedback, "feedback")
        except LosslessJsonError as exc:
            return failure_from_exception(ToolPolicyError("tools/post-execute", exc.message))
        message = "".join(b.text for b in feedback if type(b) is TextBlock) or BLOCKED_DEFAULT
        body = call.body_contexts
        kept = tuple(c for c in result.additional_contexts if not any(c is b for b in body))
        return ToolExecutionFailure(
            error=failure(message).error,
            content=feedback,
            meta=result.meta,
            additional_contexts=kept + tuple(decision.additional_contexts),
        )
    if kind is not Accept:
        return failure_from_exception(
            ToolPolicyError(
                "tools/post-execute",
                f"a listener returned {kind.__qualname__}; expected Accept or Block",
            ),
            result.additional_contexts,
        )
    contexts = result.additional_contexts + tuple(decision.additional_contexts)
    has_value = decision.value is not UNSET
    if decision.content is not None and has_value:
        return failure_from_exception(
            ToolPolicyError("tools/post-execute", "Accept cannot replace both content and value"),
            result.additional_contexts,
        )
    if has_value:
        if type(result) is not ToolExecutionSuccess:
            return failure_from_exception(
                ToolPolicyError("tools/post-execute", "Accept(value=...) is not allowed on a failure"),
                result.additional_contexts,
            )
        return _render_value(rt, call, decision.value, contexts, result.concludes_turn)
    if decision.content is not None:
        try:
            content = check_content(decision.content)
        except LosslessJsonError as exc:
            return failure_from_exception(ToolPolicyError("tools/post-execute", exc.message), contexts)
        return replace(result, content=content, additional_contexts=contexts)
    if decision.additional_contexts:
        return replace(result, additional_contexts=contexts)
    return result


def run_inline(rt: ToolRuntime, inp: ToolExecutionInput) -> ToolExecutionResult:
    """One call's whole trip (prepare, dispatch, finalize) on the calling
    thread: nested dispatch (PTC sub-calls, composite tools). The caller
    does the scheduling."""
    call = begin(0, inp)
    prepare(rt, call)
    if call.phase is CallPhase.READY:
        call.phase = CallPhase.DISPATCHING
        dispatch(rt, call)
    return finalize(rt, call)
