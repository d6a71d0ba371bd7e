"""A tool body's run: entering it (lookup, the fresh signal, the body to
call), invoking it, and leaving it (validation and render). A sync body
runs on the thread that dispatches it; an async one runs as a
:class:`~.flights.Flight` on the batch's loop, either waited for by that
thread (:func:`await_on_loop`, under a ``tools/execute`` wrapper) or
started by the executor and finished when its end arrives as a message
(:func:`start_on_loop` / :func:`finish_on_loop`: no thread waits).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from types import CoroutineType
from typing import TYPE_CHECKING, Any

from loguru import logger

from ..definition import is_async_callable
from ..errors import (
    InvalidStateError,
)
from ..execution import ToolExecution, ToolRunContext, close_context, flight_signal, fused_context
from ..model import (
    ToolExecutionResult,
    ToolExecutionSuccess,
)
from ..presentation._projection import first_failure
from ..session import ENCLOSING_CALL, start_event
from ..signals import AbortSignal
from .call import Call, abort_seen, in_context, not_found
from .flights import Flight
from .results import (
    aborted,
    failure_from_exception,
    render_success,
)

if TYPE_CHECKING:  # pragma: no cover
    from ..kernel import Kernel

EXECUTE_EVENTS = ("tools/execute",)


class _Entered:
    """A body about to run: its context, what it renders with, and the
    callable (the definition's, or the executor's replacement)."""

    __slots__ = ("ctx", "registration", "body", "is_async", "stopping")

    def __init__(
        self, ctx: ToolRunContext, registration: Any, body: Any, is_async: bool | None, stopping: AbortSignal
    ) -> None:
        self.ctx = ctx
        self.registration = registration
        self.body = body
        self.is_async = is_async
        self.stopping = stopping  # the runtime's stop signal


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


def _enter_body(rt: Kernel, call: Call, registration: Any) -> _Entered | ToolExecutionResult:
    """Everything before the body's first line: ``registration`` is what
    the call runs (``call.registration``, the one it was prepared with,
    None if it found no tool), the not-found and aborted checks, the fresh
    signal, the body to call. A result when the body does not run."""
    execution = call.execution
    if registration is None:
        result: ToolExecutionResult = failure_from_exception(not_found(rt, call))
        return result
    stopping = rt.stop_signal
    if call.caller.aborted or stopping.aborted:
        # Aborted after it was prepared, before its body ran: not invoked.
        result = aborted(before_dispatch=True)
        return result
    session = call.start_log
    if session is not None:
        # The durable "started" marker, before the body's first line: after
        # a crash, a call with it and no tool/result may have run.
        try:
            at = call.start_step
            event = start_event(execution.call_id) if at is None else start_event(execution.call_id, *at)
            session.append_lossless(event)
        except BaseException as exc:  # noqa: BLE001 - the batch fails once the call commits
            call.start_error = exc
            result = aborted(before_dispatch=True)
            return result
        if at is not None:
            # In the call's context (this stage runs in it): a logged batch
            # the body runs names this call as its parent (crash recovery).
            ENCLOSING_CALL.set((session, (*at, execution.call_id)))
    wrapper_signal = execution.signal
    # A fresh signal for the body: the caller's, the wrapper's replacement
    # (if any), and the runtime's stop signal; the first abort wins. It is
    # fused only if the body (or the async path) reads ctx.signal, and
    # closed by close_context(ctx) in _leave_body (see ToolRunContext._fused).
    if wrapper_signal is not call.caller:
        signals: tuple[AbortSignal, ...] = (call.caller, wrapper_signal, stopping)
    else:
        if registration.definition.timeout_ms is not None and execution.definition is not None:
            _no_deadline(execution)
        if call.body_parent is not None:
            signals = (call.body_parent,)  # fires exactly when the caller or the stop does
        else:
            signals = (call.caller, stopping)
    ctx = fused_context(execution, signals, rt.events)
    body, is_async = body_of(call, registration)
    call.body_invoked = True
    return _Entered(ctx, registration, body, is_async, stopping)


def _no_deadline(execution: ToolExecution) -> None:
    """A registry tool that declares ``timeout_ms`` is entered with the
    caller's own signal: no ``tools/execute`` wrapper gave it a deadline
    (``policies.timeout`` swaps one in: it is not applied). DEBUG, once
    per tool in the process (:func:`first_failure`): an application may
    leave timeouts unenforced on purpose (the command's ``--no-timeout``),
    but one that forgot the policy learns why none fires."""
    if first_failure(execution.name, "timeout_ms", "no deadline"):
        logger.debug(
            'tool "{}" declares timeout_ms={}, but nothing enforces it: its call "{}" runs with no deadline (no '
            "tools/execute wrapper replaced its signal); apply policies.timeout (rt.use(policies.timeout)) to "
            "enforce it",
            execution.name,
            execution.definition.timeout_ms,
            execution.call_id,
        )


def _leave_body(
    call: Call, entered: _Entered, value: Any, error: BaseException | None, aborted: bool | None = None
) -> ToolExecutionResult:
    """Everything after the body's last line: its value validated and
    rendered (or its exception as a failure), with the contexts it added.
    ``aborted``: whether the caller or the stop had aborted when the body
    settled, if that was earlier than now (an async body's end, seen on
    its loop); None: now."""
    # The body has settled: an abort from now on does not replace its outcome.
    call.settled_aborted = abort_seen(call, entered.stopping) if aborted is None else aborted
    # Closed first: nothing the body's context sees after its last line
    # (a late report_progress or defer_context) reaches the result.
    contexts, concludes = close_context(entered.ctx)
    result: ToolExecutionResult
    if error is not None:
        result = failure_from_exception(error, contexts)
    else:
        result = render_success(
            call.execution,
            entered.registration.definition,
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
    if contexts:
        call.body_contexts = call.body_contexts + contexts
    if type(result) is ToolExecutionSuccess:
        # With whether the abort had fired as it settled: a wrapper that
        # returns it (after a retry, say) is held to that moment.
        call.body_successes.append((result, call.settled_aborted is True))
    return result


def run_body(rt: Kernel, call: Call) -> ToolExecutionResult:
    """The innermost step of ``tools/execute`` on this thread: enter, invoke
    the body (an async one on its loop, this thread waiting), leave. It
    runs ``call.registration``, what the call was prepared with: a change
    after its last check for one (while its wrappers run, say) does not
    apply to it."""
    entered = _enter_body(rt, call, call.registration)
    if not isinstance(entered, _Entered):
        return entered
    call.settled_aborted = None  # (an async body's end on its loop records it: _invoke)
    try:
        value = _invoke(
            rt, entered.body, call.execution.arguments, entered.ctx, entered.is_async, call, entered.stopping
        )
    except BaseException as exc:  # noqa: BLE001 - any exception from user code is a failure
        return _leave_body(call, entered, None, exc, call.settled_aborted)
    return _leave_body(call, entered, value, None, call.settled_aborted)


def _invoke(
    rt: Kernel, fn: Any, args: Any, ctx: ToolRunContext, is_async: bool | None, call: Call, stopping: AbortSignal
) -> Any:
    """Call a tool body on this thread: a sync body here; an ``async def``
    body (or a sync one that returns a coroutine) as a :class:`Flight` on
    its loop, this thread waiting for it, and whether the abort had fired
    when it ended there recorded in ``call.settled_aborted`` (not when this
    thread wakes). ``is_async`` is what registration found
    (``is_async_callable(fn)``, computed once); ``None`` computes it."""
    declared_async = is_async_callable(fn) if is_async is None else is_async
    coro = fn(args, ctx)
    if not declared_async and not isinstance(coro, CoroutineType):  # inspect.iscoroutine
        return coro
    signal = ctx.signal  # the task's cancellation needs it: fuse it now

    def ended() -> None:
        # On the loop's thread, as the body ends: what the abort rule holds it against.
        call.settled_aborted = abort_seen(call, stopping)

    return await_on_loop(rt, coro, signal, call.loop, ctx.name, ctx.call_id, ended, on_demand=True)


def target_loop(rt: Kernel, loop: Any) -> asyncio.AbstractEventLoop:
    """The loop an async body runs on: the batch's, or the runtime's own."""
    if loop is not None:
        return loop  # type: ignore[no-any-return]
    return rt.loop.loop


def await_on_loop(
    rt: Kernel,
    coro: Any,
    signal: AbortSignal,
    loop: Any = None,
    name: str = "?",
    call_id: str = "?",
    ended: Callable[[], None] | None = None,
    what: str | None = None,
    on_demand: bool = False,
) -> Any:
    """Run ``coro`` as a :class:`Flight` on ``loop`` (None: the runtime's
    own loop thread) and wait for it to end, on this thread: for a body
    under a ``tools/execute`` wrapper (the wrapper needs the result on its
    thread) and for ``rt.tools.dispatch``, and for an async pre-execute
    listener or approval service. An actor waiting here lends its slot
    (``rt.waiting()``); ``on_demand`` (a body's wait), only once the
    flight needs the runtime's capacity (it starts a batch: see
    ``scheduling.executor.LentOnDemand``), so an async body that only awaits
    holds its call actor as a sync body does. Cancellation and a loop that
    is gone behave as for a batch's async call (``pipeline/flights.py``)."""
    target = target_loop(rt, loop)
    if target.is_running() and _on_thread_of(target):  # (the runtime's own loop thread too)
        coro.close()
        label = f'async tool "{name}"' if what is None else what
        raise InvalidStateError(
            f"{label} would be awaited on its own event loop's thread, blocking it (use execute_async from a coroutine)"
        )
    done: concurrent.futures.Future[Any] = concurrent.futures.Future()

    def on_end(value: Any, error: BaseException | None) -> None:
        if ended is not None:
            ended()  # (before the waiting thread can see the end)
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(value)

    flight = Flight(coro, signal, target, name, call_id, on_end, what=what)
    if flight.end_if_aborted():
        # Aborted (the runtime's stop, say) before its launch: it ends here,
        # as its start would, without waiting for the loop (a stop called
        # on that loop's thread blocks it).
        return done.result()  # (raises its AbortError)
    with rt.waiting(flight.context if on_demand else None):  # (before the launch: the flight's context is set)
        rt.loop_watch.launch(flight)
        return done.result()


def _on_thread_of(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


@in_context
def start_on_loop(rt: Kernel, call: Call, on_end: Callable[[Call, Any, BaseException | None], None]) -> Flight | None:
    """``call``'s async body as a :class:`Flight` for its loop, ready to
    launch (``rt.loop_watch.launch_all``), nobody waiting for it: the
    batch's executor does this for an async call that no ``tools/execute``
    wrapper observes, so no thread waits for the body. ``on_end(call,
    value, error)`` is called once when the body has ended (on the loop's
    thread: it must only post a message), and the executor then calls
    :func:`finish_on_loop`. None: the call did not start (not found,
    aborted, or it settled at once) and has its outcome already."""
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

    stopping = entered.stopping

    def ended(value: Any, error: BaseException | None) -> None:
        # The body has settled, here on its loop: an abort from now on does
        # not replace its outcome, however late the batch finishes it.
        call.settled_aborted = abort_seen(call, stopping)
        on_end(call, value, error)

    execution = call.execution
    # The task is cancelled when the body's one parent signal fires (the
    # fused ctx.signal is made only if the body reads it); the flight's
    # subscription first aborts ctx.signal, if made, so the body sees it
    # aborted by the time its await raises (a parent's callbacks run in
    # subscription order, and the cancel would race the fused signal's).
    # With several parents, through ctx.signal itself.
    signal, ahead = flight_signal(ctx)
    return Flight(coro, signal, target_loop(rt, call.loop), execution.name, execution.call_id, ended, ahead)


def finish_on_loop(call: Call, value: Any, error: BaseException | None) -> None:
    """The end of a body :func:`start_on_loop` started, on the executor:
    validate and render its value (in the call's context), which settles
    the call."""
    call.context.run(_finish_on_loop, call, value, error)


def _finish_on_loop(call: Call, value: Any, error: BaseException | None) -> None:
    entered = call.entered
    assert entered is not None, call
    call.entered = None
    _dispatched(call, _leave_body(call, entered, value, error, call.settled_aborted))


def _dispatched(call: Call, result: ToolExecutionResult) -> None:
    call.settle(result, run_post=True, dispatched=True)


def wants_loop(rt: Kernel, call: Call, registration: Any) -> bool:
    """Whether ``call`` (about to dispatch) runs as a flight the executor
    does not wait for: its body is ``async def`` and no ``tools/execute``
    wrapper observes it (a wrapper needs the body's result on its thread)."""
    return _async_body(call, registration) and not rt.events.observed(EXECUTE_EVENTS, call.execution.agent)


def waits_on_loop(rt: Kernel, call: Call, registration: Any) -> bool:
    """Whether a thread will wait for ``call``'s body on a loop: it is
    ``async def`` and a ``tools/execute`` wrapper observes it. That wait
    holds its slot until the body needs the runtime's capacity
    (:func:`await_on_loop`'s ``on_demand``), which only a call actor's
    slot can do: such a call never runs inline on the thread stepping its
    batch, which lends its step slot for whatever it runs inline, and so
    would take one thread per batch beyond the budget."""
    return _async_body(call, registration) and rt.events.observed(EXECUTE_EVENTS, call.execution.agent)


def _async_body(call: Call, registration: Any) -> bool:
    if registration is None:
        return False
    if call.body_hook is None:
        return registration.is_async  # type: ignore[no-any-return]  # (the common case: no replacement to ask)
    return body_of(call, registration)[1] is True
