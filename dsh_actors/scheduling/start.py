"""start_batch: what ``ExecuteBatch`` means, for both of its entry points.

The registry actor's handler and ``ToolsService.submit`` (on the caller's
thread) both call :func:`start_batch`; it lives here, in the scheduling
layer, because it only reads the published registry (layer 2) and hands the
batch to an executor.
"""

from __future__ import annotations

import contextvars
from collections.abc import Sequence
from concurrent.futures import CancelledError, Future
from typing import TYPE_CHECKING, Any

from loguru import logger

from ..errors import (
    ExecutorUnavailableError,
    InvalidStateError,
    InvalidTypeError,
    InvalidValueError,
    ToolBatchExecutionError,
    safe_str,
)
from ..model import ToolBatchInput, ToolBatchResult
from ..pipeline.intake import bind_context, check_batch, check_limit
from ..visibility import describe_scope, select_executor
from .executor import NativeExecutor, lend_waiter
from .messages import CallStart, Reply
from .suspension import in_step, logged_step

if TYPE_CHECKING:  # pragma: no cover
    from ..kernel import Kernel
    from ..session import Session
    from ..signals import AbortSignal

__all__ = ["check_continuable", "continue_batch", "start_batch"]


def start_batch(
    runtime: Kernel,
    batch: ToolBatchInput,
    reply: Reply,
    loop: Any = None,
    context: contextvars.Context | None = None,
    starts: Sequence[CallStart] | None = None,
    signal: AbortSignal | None = None,
) -> None:
    """What ``ExecuteBatch`` means: check ``batch``, pick the nearest
    executor on its agent's chain, start the batch there and settle
    ``reply`` with its ``ToolBatchResult`` or its error. Never raises.

    The one implementation behind both entry points: the registry actor's
    handler, and ``ToolsService.submit`` on the caller's thread (selection
    reads a published snapshot and an executor's ``submit`` must not block,
    so neither needs the registry's thread, and a batch saves a hop).

    An executor with ``submit(batch)`` is called on the calling thread; one
    with only a blocking ``execute(batch)`` runs on the runtime's workers.
    The native executor (``submit`` not overridden) settles ``reply`` itself.

    ``context``: the submitter's contextvars (``ExecuteBatch`` carries
    them to the registry's thread); None: the current thread's, which is
    the submitter's. The batch handed to the executor has it bound
    (``intake.bind_context``).

    ``starts``: a continued batch (see :func:`continue_batch`).

    ``signal``: the batch's signal replaced, as its context is bound (a
    blocking caller's ``Interruptible``, which follows the batch's own).

    A batch that logs its step holds the step while it runs
    (:func:`~.suspension.in_step`): a second batch of it in this runtime is
    answered ``InvalidStateError``. (A continued batch's step is held by
    its resume or recovery, from before it reads the log.)
    """
    try:
        # Started by an async body a thread waits for on demand: that
        # thread's slot is lent now (see executor.Lent), before the batch
        # needs any.
        lend_waiter(context)
        check_batch(batch, runtime.state)
        step = logged_step(batch) if starts is None else None
        if step is None:
            _start_checked(runtime, batch, reply, loop, context, starts, signal)
        else:

            def start(held: Reply) -> None:
                refuse_open_step(*step)  # (holding the step: nothing runs it meanwhile)
                _start_checked(runtime, batch, held, loop, context, None, signal)

            in_step(runtime.claims, *step, reply, start)
    except BaseException as exc:  # noqa: BLE001 - a malformed batch, or its step held: goes to the requester
        _refuse(reply, exc)


def refuse_open_step(session: Session, turn: int, step: int, agent: str) -> None:
    """Refuse running logged step ``(turn, step)`` of agent ``agent`` again
    while its last run left calls without a result (a crash, a suspension):
    their bodies may have run, and a new run would run them again. Raises
    ``InvalidStateError`` naming the call ids and the way to finish it."""
    left = session.open_calls(turn, step, agent)
    if not left:
        return
    shown = ", ".join(repr(call_id) for call_id in left[:5]) + (", ..." if len(left) > 5 else "")
    raise InvalidStateError(
        f'step (turn {turn}, step {step}) of agent "{agent}" has calls its last run left without a result '
        f"({shown}): their bodies may have run, and running the step again would run them again; finish that "
        f"run first: rt.tools.recover(agent, {turn}, {step}) after a crash, rt.tools.resume(suspension, "
        "decisions) for a suspended batch (or session.repair() to close them as failed)"
    )


def _refuse(reply: Reply, exc: BaseException) -> None:
    """Answer ``reply`` with ``exc``, unless its owner cancelled it."""
    if reply.set_running_or_notify_cancel():
        reply.set_exception(exc)


def _start_checked(
    runtime: Kernel,
    batch: ToolBatchInput,
    reply: Reply,
    loop: Any,
    context: contextvars.Context | None,
    starts: Sequence[CallStart] | None,
    signal: AbortSignal | None = None,
) -> None:
    """:func:`start_batch` of a checked batch. Never raises."""
    try:
        batch = bind_context(batch, context, signal)
        executor = select_executor(runtime.state, batch.agent)
        if executor is None:
            raise ExecutorUnavailableError(describe_scope(batch.agent))
        if _native(executor):
            executor.submit_into(batch, reply, checked=True, loop=loop, starts=_checked_starts(batch, starts))
            return
        if starts is not None:
            raise _not_continuable(executor)
        submit = getattr(executor, "submit", None)
        if callable(submit):
            future = submit(batch)
            if not isinstance(future, Future):
                raise InvalidTypeError(
                    f"{type(executor).__qualname__}.submit() must return a concurrent.futures.Future, "
                    f"not {type(future).__qualname__}"
                )
        else:
            future = runtime.workers().submit(executor.execute, batch)
        name = type(executor).__qualname__
        calls = len(batch.calls)
        future.add_done_callback(lambda done: _chain(done, reply, name, calls))
    except BaseException as exc:  # noqa: BLE001 - goes to the requester
        _refuse(reply, exc)


def continue_batch(
    runtime: Kernel,
    batch: ToolBatchInput,
    starts: Sequence[CallStart],
    reply: Reply,
    loop: Any = None,
    context: contextvars.Context | None = None,
) -> None:
    """Start ``batch`` as the continuation of a batch that stopped part way
    (suspended for an approval, or interrupted by a crash): ``starts[i]``
    says where call ``i`` starts (a :class:`~.messages.CallStart`, one per
    call, in model order). Settles ``reply`` as :func:`start_batch` does;
    never raises.

    The batch runs the one state machine every batch runs (``BatchRun``):
    the same barriers, limits, cancellation and commit order. A call given
    its ``result`` is settled: nothing runs, nothing is emitted or logged
    for it (with ``log_result``, its ``tool/result`` and ``tools/result``
    are), and its result takes its place in the batch's result. A call
    with an ``answer`` runs from its approval answer on (guards, the
    cancellation recheck, dispatch, post-execute, finalize, its
    ``tool/result``); any other call runs the whole pipeline. ``logged``:
    its ``tool/call`` is not written again.
    """
    start_batch(runtime, batch, reply, loop, context, tuple(starts))


def check_continuable(runtime: Kernel, batch: ToolBatchInput) -> None:
    """Raise what :func:`continue_batch` would answer ``batch`` with before
    it runs anything: a malformed batch, no executor for its agent, or an
    executor that runs batches itself. (A caller that must not consume
    anything before the batch is accepted asks this first.)"""
    check_batch(batch, runtime.state)
    if batch.max_parallel_tool_calls is not None:
        check_limit(batch.max_parallel_tool_calls)
    executor = select_executor(runtime.state, batch.agent)
    if executor is None:
        raise ExecutorUnavailableError(describe_scope(batch.agent))
    if not _native(executor):
        raise _not_continuable(executor)


def _native(executor: Any) -> bool:
    return isinstance(executor, NativeExecutor) and type(executor).submit is NativeExecutor.submit


def _not_continuable(executor: Any) -> InvalidStateError:
    return InvalidStateError(
        f"{type(executor).__qualname__} runs batches itself (it overrides submit or has only "
        "execute): a suspended or interrupted batch can be continued only by a NativeExecutor "
        "or an executor built on it"
    )


def _checked_starts(batch: ToolBatchInput, starts: Sequence[CallStart] | None) -> tuple[CallStart, ...] | None:
    if starts is None:
        return None
    starts = tuple(starts)
    if len(starts) != len(batch.calls):
        raise InvalidValueError(f"a continued batch needs one CallStart per call: {len(starts)} for {len(batch.calls)}")
    for start in starts:
        if not isinstance(start, CallStart):
            raise InvalidTypeError(f"a continued batch takes CallStart values, not {type(start).__qualname__}")
        if start.answer == "deferred" and start.ask is None:
            # (Its call would have nothing to wait on, and would run as allowed.)
            raise InvalidValueError('a CallStart deferred again ("deferred") needs the Ask it waits on (ask=)')
    return starts


def _chain(future: Future[Any], reply: Reply, name: str, calls: int) -> None:
    # On whichever thread completed the executor's future. An executor is a
    # plugin: what it answers is checked before the caller sees it.
    try:
        if future.cancelled():
            outcome: Any = CancelledError("the executor cancelled the batch")
            failed = True
        else:
            outcome = future.exception()
            failed = outcome is not None
            if not failed:
                outcome = future.result()
                problem = _answer_problem(outcome, calls)
                if problem is not None:
                    outcome = ToolBatchExecutionError(f"the executor {name} {problem}")
                    failed = True
            elif not isinstance(outcome, Exception):
                # SystemExit, KeyboardInterrupt...: the executor's, not the
                # application's to act on.
                message = safe_str(outcome)
                error = ToolBatchExecutionError(
                    f"the executor {name} raised {type(outcome).__qualname__}" + (f": {message}" if message else "")
                )
                error.__cause__ = outcome
                outcome = error
    except BaseException as exc:  # noqa: BLE001 - never lose a reply
        logger.opt(exception=exc).error("settling a batch reply failed")
        outcome, failed = exc, True
    if reply.set_running_or_notify_cancel():
        if failed:
            reply.set_exception(outcome)
        else:
            reply.set_result(outcome)


def _answer_problem(outcome: Any, calls: int) -> str | None:
    """What is wrong with an executor's answer for a batch of ``calls``
    calls, or None."""
    if not isinstance(outcome, ToolBatchResult):
        return f"answered {type(outcome).__qualname__}, not a ToolBatchResult"
    answered = len(outcome.results) + len(outcome.pending)
    if answered != calls:
        return f"answered {answered} results for a batch of {calls} calls (one per call, in model order)"
    return None
