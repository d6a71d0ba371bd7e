"""The native executor: its actors and its pools.

* :class:`NativeExecutor` is what ``set_executor`` installs. ``submit``
  hands a batch to an idle :class:`ExecutorActor` (pooled, one batch at a
  time) in a ``RunBatch`` message.
* :class:`ExecutorActor` runs batches' :class:`~.batch.BatchRun`\\ s (the
  schedule, see ``scheduling/batch.py``). A run holds no thread while it
  waits: the actor that receives ``RunBatch`` takes the first step and
  drains the batch's inbox (``Settled``, ``BodyEnded``, ``Wake``,
  ``Deadline``); when it is empty the actor goes back to the idle pool, and
  the next message for that batch hands the run to an idle executor actor
  in a ``Resume`` (see :class:`~.inbox.BatchInbox`). So executor threads
  count the batches taking a step (or running a call inline) at once, not
  the batches waiting for bodies.
* :class:`CallActor` serves work mailboxes (``Serve``): it takes the
  batch's next startable call, dispatches it (``tools/execute`` wrappers,
  the body, output validation, render), reports ``Settled`` (and, with
  nothing queued for it and nobody running the batch, takes the batch's
  step itself: ``BatchInbox.offer``), and goes on until it is told to
  leave; then the runtime's :class:`~.dispatcher.Dispatcher` sends it to
  the next batch waiting for a call actor, or keeps it idle.

Both kinds of actor hold a slot of the runtime's capacity, which the
:class:`~.dispatcher.Dispatcher` owns (step slots, call-actor slots), and
lend it while they wait (:class:`Lent`).
"""

from __future__ import annotations

import contextvars
import threading
import weakref
from collections.abc import Callable, Sequence
from concurrent import futures
from concurrent.futures import Future
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any, assert_never, cast

from loguru import logger

from ..actors import ActorGroup, Address, MailboxActor, actor_thread_ident, settle
from ..definition import validate_definition
from ..errors import (
    STOPPED_REFUSAL,
    InvalidStateError,
    InvalidTypeError,
    RuntimeStoppedError,
    ToolBatchExecutionError,
    exception_text,
    log_exception,
    safe_str,
)
from ..executor_protocol import ToolModelInput
from ..json import thaw
from ..kernel import BatchFuture, refuse_blocking_a_loop
from ..model import ToolBatchInput, ToolBatchResult
from ..pipeline.intake import bind_context, check_batch, check_limit
from ..pipeline.results import failure_from_exception
from ..pipeline.stages import dispatch
from .batch import BatchRun
from .dispatcher import Dispatcher
from .inbox import RUNNING
from .interrupt import Interruptible
from .messages import (
    BatchHost,
    BatchPolicy,
    Begin,
    CallStart,
    Deadline,
    Fed,
    FeedSink,
    Reply,
    Resume,
    RunBatch,
    Sealed,
    Serve,
)
from .pool import LEAVE, WorkMailbox

if TYPE_CHECKING:  # pragma: no cover
    from ..definition import ToolDefinition
    from ..kernel import Kernel
    from ..signals import AbortSignal

__all__ = ["CallActor", "ExecutorActor", "Lent", "LentOnDemand", "NativeExecutor", "SubBatch", "lend_waiter"]


class NativeExecutor:
    """The built-in executor (the default of every runtime).

    ``max_parallel_tool_calls`` (default 10) bounds how many calls of a batch
    dispatch at once; a batch's own ``max_parallel_tool_calls`` overrides
    it; 1 runs the batch serially. Call actors come from the runtime's
    budget (``ToolRuntime(max_call_actors=...)``), shared by every batch.
    """

    sections: tuple[Any, ...] = ()

    def __init__(self, max_parallel_tool_calls: int = 10) -> None:
        self.max_parallel_tool_calls = check_limit(max_parallel_tool_calls)
        self._rt: Kernel | None = None
        self._dispatcher: Dispatcher | None = None  # the runtime's (set with _rt)
        # A plain lock (taken twice a batch, and once more by a submit); the
        # stop waits for the running batches on a condition of it, which a
        # batch's end notifies only once the stop has closed the executor.
        self._lock = threading.Lock()
        self._drained = threading.Condition(self._lock)
        self._closed = False
        self._checked_own: dict[int, Any] = {}
        # The batch policies without tools of its own (a batch's, a
        # sub-batch's), made as it is bound (see batch_policy).
        self._plain: tuple[BatchPolicy, BatchPolicy] | None = None
        # The inboxes of the batches running now (for rt.stop()'s drain).
        self._running: dict[int, BatchRun] = {}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} max_parallel_tool_calls={self.max_parallel_tool_calls}>"

    # -- extension points (for executors built on this one, e.g. PTC) -------

    def executor_tools(self) -> Sequence[ToolDefinition]:
        """Tools this executor provides itself, callable by the model and
        run through the full pipeline, but not in the registry (PTC's
        ``run_code``). Called once per batch; the default is none."""
        return ()

    def direct_call_hint(self, name: str) -> str | None:
        """For a model-direct call of ``name`` that is not one of
        :meth:`executor_tools`: ``None`` lets the registry decide (the
        default); a string fails the call as ``UNKNOWN_TOOL`` with that hint
        appended, before any policy (PTC routes the model to ``run_code``)."""
        return None

    def tool_body(self, definition: ToolDefinition) -> Any:
        """The body a call of ``definition`` runs under this executor, or
        ``None`` for ``definition.execute`` (the default). An executor that
        runs bodies elsewhere (a cluster) returns a replacement with the same
        signature, ``fn(args, ctx)``, sync or ``async def``. Everything else
        stays here: policies, wrappers, validation, render, the log. Called
        on the thread that dispatches the call; it must not block. A
        replacement that raises ``AbortError(before_dispatch=True)`` settles
        the call ``ABORTED_BEFORE_DISPATCH`` (the work never started)."""
        return None

    def _body_hook(self) -> Any:
        # The default tool_body always answers None: skip the call.
        return self.tool_body if type(self).tool_body is not NativeExecutor.tool_body else None

    def _hints(self) -> bool:
        return type(self).direct_call_hint is not NativeExecutor.direct_call_hint

    def _own(self) -> dict[str, Any]:
        tools = self.executor_tools()
        if not tools:
            if self._checked_own:
                self._checked_own = {}
            return {}
        cache = self._checked_own
        # Only the latest answer's definitions are kept: an executor that
        # builds its tools afresh for each batch does not grow the cache
        # (each entry keeps its definition alive) for the runtime's life.
        kept: dict[int, Any] = {}
        out: dict[str, Any] = {}
        for definition in tools:
            checked = cache.get(id(definition))
            if checked is None or checked.definition is not definition:
                checked = validate_definition(definition)
            kept[id(definition)] = checked
            out[definition.name] = checked
        self._checked_own = kept  # (one assignment: batches on other threads read the old or the new one)
        return out

    def batch_policy(self, *, nested: bool = False) -> BatchPolicy:
        """What a batch of this executor takes from it (internal: asked by
        the batch as it opens, on its executor actor). ``nested``: a
        sub-batch's (its calls are not the model's: neither the executor's
        own tools nor its direct-call hint apply). Without tools of its own
        (:meth:`executor_tools` answered none) the policy is the one made
        as the executor was bound: the rest of it is fixed by its class."""
        own = {} if nested else self._own()
        if own:
            return self._policy(own, nested)
        plain = self._plain
        assert plain is not None  # (bound: its batches run only then)
        return plain[nested]

    def _policy(self, own: dict[str, Any], nested: bool) -> BatchPolicy:
        dispatcher = self._dispatcher
        assert dispatcher is not None
        return BatchPolicy(
            own=own,
            hook=self._body_hook(),
            hint=self.direct_call_hint if self._hints() and not nested else None,
            dispatcher=dispatcher,
        )

    # -- the executor protocol ---------------------------------------------

    def bind(self, runtime: Any) -> None:
        """Attach to ``runtime``, a started ``ToolRuntime`` (called by
        ``set_executor``). Keeps its kernel (``runtime.kernel``) and its
        dispatcher (``runtime.dispatcher``), and has ``runtime.on_stop`` run
        the executor's shutdown."""
        kernel = runtime.kernel
        with self._lock:
            if self._rt is kernel:
                return
            if self._rt is not None:
                name = type(self).__name__
                raise InvalidStateError(
                    f"this {name} is already installed in another runtime: make one {name} per runtime"
                )
            self._rt = kernel
            self._dispatcher = runtime.dispatcher
            self._plain = (self._policy({}, False), self._policy({}, True))  # (see batch_policy)
        _ShutdownHook.register(self._shutdown, runtime)

    def describe(self, tools: Sequence[ToolDefinition]) -> ToolModelInput:
        schemas = tuple({"name": d.name, "description": d.description, "parameters": thaw(d.parameters)} for d in tools)
        return ToolModelInput(schemas=schemas, known_names=tuple(d.name for d in tools))

    def execute(self, batch: ToolBatchInput) -> ToolBatchResult:
        """Run ``batch`` and block the calling thread until it settles (as
        ``rt.tools.execute`` does: refused on a loop its async bodies need,
        lending the calling actor's slot meanwhile, aborted by Ctrl-C)."""
        rt = self._rt
        if rt is None:
            return self.submit(batch).result()  # (not bound: submit says so)
        refuse_blocking_a_loop(rt, "NativeExecutor.execute()", "execute_async(batch)", "its async tools run")
        if not isinstance(cast(object, batch), ToolBatchInput):
            return self.submit(batch).result()  # (submit refuses it, naming the type)
        with Interruptible(batch.signal) as guard:
            # (Ctrl-C on the main thread aborts the batch: scheduling.interrupt)
            signal = guard.signal
            waited_on = rt.loop_watch.blocking_wait()  # (see ToolsService._blocking)
            future: Future[ToolBatchResult] = Future()
            try:
                guard.started(future.done, partial(futures.wait, (future,)))  # (before the start: see _blocking)
                self.submit_into(batch if signal is None else replace(batch, signal=signal), future)
            except BaseException as exc:
                settle(future, error=exc)  # (not handed on: settled, so nothing waits for it)
                raise
            with rt.waiting():
                if waited_on is None:
                    return future.result()
                with waited_on:
                    return future.result()

    def submit(self, batch: ToolBatchInput) -> Future[ToolBatchResult]:
        """Start ``batch``; the future settles once every started call has
        (a ``BatchFuture``: its ``result()`` waits as :meth:`execute` does)."""
        rt = self._rt
        future: Future[ToolBatchResult] = Future() if rt is None else BatchFuture(rt)
        self.submit_into(batch, future)  # (not bound: refused)
        return future

    def submit_into(
        self,
        batch: ToolBatchInput,
        reply: Reply,
        *,
        checked: bool = False,
        loop: Any = None,
        starts: tuple[CallStart, ...] | None = None,
    ) -> None:
        """:meth:`submit` into a given reply (internal: ``checked``, the
        caller ran ``check_batch`` already, as ``scheduling.start.start_batch``
        does; ``loop``, where the batch's async bodies run; ``starts``, a
        continued batch, see ``scheduling.start.continue_batch``)."""
        rt = self._rt
        if rt is None:
            raise InvalidStateError("this NativeExecutor is not installed in a runtime (rt.tools.set_executor)")
        if not checked and not isinstance(batch, ToolBatchInput):
            raise InvalidTypeError(f"expected a ToolBatchInput, got {type(batch).__qualname__}")
        limit = (
            self.max_parallel_tool_calls
            if batch.max_parallel_tool_calls is None
            else check_limit(batch.max_parallel_tool_calls)
        )
        if not checked:
            lend_waiter()  # (a batch an async body starts: see LentOnDemand; start_batch lends for a checked one)
            check_batch(batch, rt.state)
            batch = bind_context(batch)  # (start_batch binds a checked one)
        with self._lock:
            if self._closed:
                raise RuntimeStoppedError(STOPPED_REFUSAL)
        self._post(
            RunBatch(
                batch=batch,
                reply=reply,
                limit=limit,
                loop=loop if loop is not None else rt.bound_loop,
                starts=starts,
                native=self,
            )
        )

    def open_sub_batch(self, batch: ToolBatchInput, sink: FeedSink, limit: int) -> SubBatch:
        """Open a sub-batch that its caller feeds one call at a time (a PTC
        program's tool calls): the same ``BatchRun`` as any batch of this
        executor, on its executor actors, its calls on the runtime's call
        actors, at most ``limit`` at once (see ``scheduling/batch.py``).
        ``batch`` gives the agent, step, signal and context (its ``calls``
        and ``log`` are not used); ``sink`` gets every call's start and
        final result. Raises ``RuntimeStoppedError`` once the executor is
        shut down."""
        rt = self._rt
        if rt is None:
            raise InvalidStateError("this NativeExecutor is not installed in a runtime (rt.tools.set_executor)")
        with self._lock:
            if self._closed:
                raise RuntimeStoppedError(STOPPED_REFUSAL)
        lend_waiter()  # (opened by an async body: see LentOnDemand)
        reply: Future[ToolBatchResult] = Future()
        run = BatchRun(
            rt,
            self,
            bind_context(replace(batch, calls=(), log=None)),
            check_limit(limit),
            reply,
            rt.bound_loop,
            self.resume_run,
            sink=sink,
            run_here=self.run_here,
        )
        self._post(Begin(run))
        return SubBatch(run.inbox, reply)

    # -- steps ----------------------------------------------------------------
    #
    # A batch's steps run on the runtime's executor actors, within the step
    # slots the runtime's Dispatcher owns (Dispatcher.STEPPING_MAX at once,
    # lent ones not counted; work beyond that queues, first come first served).

    def _post(self, work: RunBatch | Begin | Resume) -> None:
        """Hand ``work`` to an executor actor (see ``Dispatcher.post``)."""
        dispatcher = self._dispatcher
        assert dispatcher is not None
        dispatcher.post(work)

    def run_here(self, run: BatchRun) -> Any:
        """A call actor serving ``run`` takes its step (``BatchInbox.offer``):
        what settles the reply once the batch has ended, else None."""
        outcome = _drain_until_paused(self, run, run.drain())
        if outcome is RUNNING:
            return None
        return lambda: _settle_reply(run, outcome)

    def resume_run(self, run: BatchRun) -> None:
        """A message reached ``run``'s inbox while no executor actor ran it:
        hand the run to one (see ``BatchInbox``)."""
        self._post(Resume(run=run))

    def run_started(self, run: BatchRun) -> None:
        """An executor actor began ``run`` (the stop answers for it if it
        cannot: see ``_shutdown``)."""
        with self._lock:
            self._running[id(run)] = run

    def run_finished(self, run: BatchRun) -> None:
        """``run`` has replied (or was answered by the stop)."""
        with self._lock:
            self._running.pop(id(run), None)
            if self._closed and not self._running:
                self._drained.notify_all()  # (only the stop waits for it, after closing)

    def _shutdown(self) -> None:
        """Runtime stop (after ``rt.stop_signal`` fired, which every running
        batch and body observes): refuse new batches, let the running ones
        drain until the stop's deadline, then tell the rest to commit what is
        still out as ABORTED (a body ignoring its signal) and answer. A batch
        that cannot, because the thread running it is stuck (a body run
        inline, a listener or an approval service ignoring its signal), is
        answered by the stop itself, as pykka fails the asks a stopped actor
        never answered: its caller gets a ``ToolBatchExecutionError`` now,
        and the batch still commits (and logs) its calls when that thread
        comes back, its answer then dropped (its call actors idle meanwhile
        leave once the stop closes the dispatcher: ``Dispatcher.close``). A
        batch that no thread runs by then (its step waits in the
        dispatcher's queue: no executor actor could be started, or every
        step slot is held by a stuck one) has its step taken out of the
        queue and its work mailbox closed, so its call actors leave, and is
        answered the same way; the stop runs none of its code (a listener
        there could hold the stop past its bound)."""
        rt = self._rt
        assert rt is not None
        with self._lock:
            self._closed = True
            self._drained.wait_for(lambda: not self._running, timeout=rt.stop_remaining())
            late = list(self._running.values())
        for run in late:
            try:
                run.inbox.put(Deadline())
            except BaseException as exc:  # noqa: BLE001 - no executor actor for it: answered below
                logger.opt(exception=exc).debug("the stop's deadline could not reach {!r}", run)
        if not late:
            return
        with self._lock:
            self._drained.wait_for(lambda: not self._running, timeout=rt.teardown_remaining())
            stuck = list(self._running.values())
        dispatcher = self._dispatcher
        assert dispatcher is not None
        for run in stuck:
            unscheduled = dispatcher.withdraw(run)
            if unscheduled:
                run.unscheduled()
            error = run.abandoned_error(unscheduled)
            logger.warning("rt.stop() answered a batch it could not wait for any longer: {}", error.detail)
            _answer(lambda: settle(run.reply, error=error))  # noqa: B023 - called at once


class _ShutdownHook:
    """A native executor's ``rt.on_stop`` hook: it runs the executor's
    shutdown, holding it weakly. An executor its application no longer
    sets anywhere and drops (an agent's own, say) is freed, not kept until
    the runtime stops, and its hook is unregistered then (a batch it runs
    holds it, so it lives until its batches have ended)."""

    __slots__ = ("_shutdown", "_off")

    def __init__(self, shutdown: Callable[[], None]) -> None:
        self._shutdown = weakref.WeakMethod(shutdown, self._gone)
        self._off: Callable[[], object] | None = None

    @classmethod
    def register(cls, shutdown: Callable[[], None], runtime: Any) -> None:
        """Have ``runtime`` run ``shutdown`` (a bound method) in its stop."""
        hook = cls(shutdown)
        hook._off = runtime.on_stop(hook)

    def _gone(self, _ref: object) -> None:
        # (A weakref callback, wherever the collector runs: on_stop's
        # disposer takes no lock of the runtime's.)
        off, self._off = self._off, None
        if off is not None:
            off()

    def __call__(self) -> None:
        shutdown = self._shutdown()
        if shutdown is not None:
            shutdown()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._shutdown()!r}>"


def refuse_step(message: RunBatch | Begin | Resume, cause: BaseException | None) -> None:
    """The step ``message`` will never run (the dispatcher's
    ``StepRefuser``, and a retired executor actor's refusal): its batch's
    caller is answered instead of waiting forever. ``cause`` None: the
    runtime stopped (``RuntimeStoppedError``); else no executor actor could
    be started for a batch that has not begun (a ``RunBatch``: a
    ``ToolBatchExecutionError`` caused by ``cause``; a begun batch's step
    waits for one instead, see ``Dispatcher._undelivered``). A batch that
    had begun no longer counts as running for the stop."""
    if cause is None:
        when = "started" if isinstance(message, RunBatch) else "finished"
        error: BaseException = RuntimeStoppedError(f"the runtime stopped before the batch {when}")
    else:
        error = ToolBatchExecutionError(
            f"no executor actor could be started to run the batch ({exception_text(cause)})"
        )
        error.__cause__ = cause
    if isinstance(message, RunBatch):
        reply = message.reply
    else:
        run = message.run
        run.native.run_finished(run)  # (a Resume's batch had begun: the stop no longer waits for it)
        run.unscheduled()  # (no thread runs it again: its call actors leave)
        reply = run.reply
    _answer(lambda: settle(reply, error=error))  # (the sender goes on: see _answer)


class ExecutorActor(MailboxActor):
    """Runs one batch at a time (pooled). See the module docstring."""

    def __init__(self, group: ActorGroup, rt: Kernel, dispatcher: Dispatcher) -> None:
        super().__init__(group)
        self._rt = rt
        self._address: Address | None = None
        self.dispatcher = dispatcher  # (read-only: whose step slot it holds)
        self.lends = 0  # the waits its step slot is lent for (see Lent); its own thread only

    def handle(self, message: RunBatch | Begin | Resume) -> None:
        if self._address is None:
            self._address = Address(self)
        work: RunBatch | Begin | Resume | None = message
        while work is not None:
            match work:
                case RunBatch() | Begin():
                    if isinstance(work, Begin):
                        run = work.run
                        native = run.native
                    else:
                        native = work.native
                        try:
                            run = BatchRun(
                                self._rt,
                                native,
                                work.batch,
                                work.limit,
                                work.reply,
                                work.loop,
                                native.resume_run,
                                starts=work.starts,
                                run_here=native.run_here,
                            )
                        except BaseException as exc:  # noqa: BLE001 - a bug: fail the batch, never leave it waiting
                            work = self._unstarted(work, exc)
                            continue
                    native.run_started(run)
                    try:
                        outcome = run.begin()
                    except BaseException:  # pragma: no cover - begin contains everything
                        native.run_finished(run)
                        raise
                    work = self._go_on(run, outcome)
                case Resume():
                    work = self._go_on(work.run, work.run.drain())
                case _:
                    assert_never(work)

    def refuse(self, message: RunBatch | Begin | Resume) -> None:
        """``message`` reached this actor after it retired (the runtime's
        stop won the race with the send): its slot goes back to the
        dispatcher and its batch's caller gets ``RuntimeStoppedError``
        instead of waiting forever (any thread: see ``MailboxActor``)."""
        self.dispatcher.refused(message)

    def _unstarted(self, work: RunBatch, exc: BaseException) -> RunBatch | Begin | Resume | None:
        """``work``'s batch could not even be set up (a bug): its caller
        gets a ``ToolBatchExecutionError`` caused by ``exc``, nothing of it
        ran, and the step slot goes on to the next work."""
        logger.opt(exception=exc).error("setting up a batch failed")
        error = ToolBatchExecutionError(f"the batch could not be set up (a bug in the runtime): {safe_str(exc)}")
        error.__cause__ = exc
        assert self._address is not None
        _answer(lambda: settle(work.reply, error=error))  # (while this actor holds its slot: see _go_on)
        next_work: RunBatch | Begin | Resume | None = self.dispatcher.step_ended(self._address)
        return next_work

    def _go_on(self, run: BatchRun, outcome: Any) -> RunBatch | Begin | Resume | None:
        """Drain ``run`` until it ends or its inbox is empty; then the next
        runnable work, or back to the idle pool.

        The caller hears back first, while this actor still holds its step
        slot: settling the reply runs the future's done-callbacks here, and
        a callback that runs a batch and waits for it lends that slot
        (``rt.waiting()``). Given back first, the callback would lend a slot
        it does not hold, and the nested batch could be sent to this very
        actor, on the idle shelf while it blocks. (A caller that submits its
        next batch at once still finds this actor idle: it needs the GIL,
        which this thread keeps until it waits on its mailbox.)"""
        outcome = _drain_until_paused(run.native, run, outcome)
        assert self._address is not None
        if outcome is not RUNNING:
            _answer(lambda: _settle_reply(run, outcome))
        work: RunBatch | Begin | Resume | None = self.dispatcher.step_ended(self._address)
        return work


class SubBatch:
    """The feeder's handle on a sub-batch (``NativeExecutor.open_sub_batch``):
    it puts messages in the batch's inbox, nothing else."""

    __slots__ = ("_inbox", "reply")

    def __init__(self, inbox: Any, reply: Future[ToolBatchResult]) -> None:
        self._inbox = inbox
        self.reply = reply
        """Settles once the batch is sealed and every call fed has committed
        (its value holds no results: each went to the sink as it committed)."""

    def __repr__(self) -> str:
        return f"<SubBatch done={self.reply.done()}>"

    def feed(
        self,
        call_id: str,
        name: str,
        arguments: Any,
        *,
        schema: Any = None,
        root_call_id: str | None = None,
        parent: Any = None,
        signal: AbortSignal | None = None,
    ) -> None:
        """One more call, the last in model order (any thread; one feeder).
        ``signal``: one of this call alone, whose abort aborts it (before
        its body starts: ``ABORTED_BEFORE_DISPATCH``; its body's signal
        fires, and a success becomes ``ABORTED``) as the batch's signal
        aborts every call."""
        self._inbox.put(
            Fed(
                call_id=call_id,
                name=name,
                arguments=arguments,
                schema=schema,
                root_call_id=root_call_id,
                parent=parent,
                signal=signal,
            )
        )

    def seal(self) -> None:
        """No more calls: the batch ends once every call fed has committed."""
        self._inbox.put(Sealed())


def _drain_until_paused(native: BatchHost, run: BatchRun, outcome: Any) -> Any:
    """Drain ``run`` until it ends (its outcome) or its inbox is empty
    (RUNNING: paused, the next message schedules it again)."""
    inbox = run.inbox
    while outcome is RUNNING:
        if inbox.pause():
            break
        outcome = run.drain()
    if outcome is not RUNNING:
        native.run_finished(run)
    return outcome


def _settle_reply(run: BatchRun, outcome: Any) -> None:
    if isinstance(outcome, BaseException):
        settle(run.reply, error=outcome)
    else:
        settle(run.reply, outcome)


#: The on-demand waiter (:class:`LentOnDemand`) whose slot work running in
#: this context lends when it needs capacity: set in the context of the
#: flight that waiter's thread waits for.
_WAITER: contextvars.ContextVar[LentOnDemand | None] = contextvars.ContextVar("dsh_waiter", default=None)

# A LentOnDemand's state (under its lock): its thread waits holding its
# slot; the slot is lent; the wait has ended (nothing is lent any more).
_HOLDING, _LENT, _ENDED = 0, 1, 2


class Lent:
    """``rt.waiting()``: around a wait of the calling thread for work the
    runtime must do (a body run inline, a nested batch, an approval, an
    async body or listener). The one way to lend capacity: an executor
    actor lends its step slot, a call actor its call-actor slot, to the
    runtime's :class:`~.dispatcher.Dispatcher` for the wait (a nested wait
    lends nothing more); anywhere else, nothing of its own, but a wait in
    the work of an on-demand waiter (its loop's thread) lends that
    waiter's slot (:class:`LentOnDemand`). A plain object, not a
    generator: it wraps every body run inline."""

    __slots__ = ("_actor",)

    _actor: ExecutorActor | CallActor | None  # (set as it is entered: no __init__ frame per wait)

    def __enter__(self) -> None:
        self._actor = None
        lend_waiter()  # (in an on-demand waiter's flight, on any thread: its slot too)
        actor = actor_thread_ident()
        if type(actor) is ExecutorActor or type(actor) is CallActor:
            # Waits nest, and on a loop this thread runs they interleave (two
            # coroutines, each in a `with` of its own, end in any order): the
            # slot is lent at the first and taken back at the last (a depth).
            lends = actor.lends
            actor.lends = lends + 1
            self._actor = actor
            if lends:
                return
            stepper = type(actor) is ExecutorActor
            try:
                actor.dispatcher.lend(stepper)
            except BaseException:
                # The slot was lent before the sends it decided failed (the
                # runtime is stopping): taken back, since __exit__ never runs.
                _take_back(actor)
                actor.lends = lends
                self._actor = None
                raise

    def __exit__(self, *exc: object) -> None:
        actor = self._actor
        if actor is not None:
            self._actor = None
            lends = actor.lends - 1
            actor.lends = lends
            if not lends:
                _take_back(actor)


class LentOnDemand(Lent):
    """The kernel's ``waiting(context)``: an actor's thread waits for an
    async body's flight (under a ``tools/execute`` wrapper) that runs in
    ``context``, and lends its slot **on demand**: it keeps the slot while
    the body only awaits (as a sync body does), and lends it once the work
    in ``context`` needs the runtime's capacity: it starts a batch
    (:func:`lend_waiter`, at every batch start) or waits inside
    ``rt.waiting()`` (on the body's loop, whatever thread runs it). So
    those waits count in the budget, one call actor each, and nesting
    cannot deadlock it, as long as the body's nested batch starts with the
    body's contextvars (its task, ``asyncio.to_thread``, the runtime's
    loop's default executor; a thread that has not them, such as a plain
    ``Thread``, lends nothing, as a sync
    body's wait outside ``rt.waiting()`` does not). Its state (holding, lent, ended) is this object's,
    under its own lock: the lend comes from another thread, and the waiting
    thread gives the slot back at its end only if it was lent. On a thread
    that is no actor, or an actor whose slot is lent already, it does
    nothing (the flight, whose context copies the current one, lends the
    same waiter as the current context, if any)."""

    __slots__ = ("_context", "_lock", "_state")

    def __init__(self, context: contextvars.Context) -> None:
        self._actor = None
        self._context = context
        self._lock = threading.Lock()
        self._state = _HOLDING

    def __enter__(self) -> None:
        actor = actor_thread_ident()
        if (type(actor) is ExecutorActor or type(actor) is CallActor) and not actor.lends:
            actor.lends = 1  # (its slot is this object's to lend: its thread waits, so no other wait nests)
            self._actor = actor
            self._context.run(_WAITER.set, self)

    def __exit__(self, *exc: object) -> None:
        actor = self._actor
        if actor is None:
            return
        with self._lock:
            lent = self._state == _LENT
            self._state = _ENDED
        self._actor = None  # (after _ENDED: lend reads it only while holding)
        if lent:
            _take_back(actor)
        actor.lends = 0

    def lend(self) -> None:
        """(Any thread.) The work this waiter waits for needs the runtime's
        capacity: its slot is lent now, unless it is lent already or the
        wait has ended. The dispatcher counts the lend under this waiter's
        lock, so the end of the wait gives back only a slot counted lent;
        the sends the lend decided are made after that lock."""
        with self._lock:
            actor = self._actor
            if self._state != _HOLDING or actor is None:
                return
            self._state = _LENT
            dispatcher = actor.dispatcher
            sends = dispatcher.lend_decided(type(actor) is ExecutorActor)
        dispatcher.send(sends)


def _take_back(actor: ExecutorActor | CallActor) -> None:
    """(On ``actor``'s thread.) Its wait is over: its slot is its own again
    (``Dispatcher.unlend``); a call actor that took it back above the
    budget owes it (the dispatcher's ``owing``), and gives it back before
    it takes another call (``CallActor._repay``)."""
    actor.dispatcher.unlend(actor.address if type(actor) is CallActor else None)


def lend_waiter(context: contextvars.Context | None = None) -> None:
    """Work in ``context`` (None: the calling thread's) is about to need
    the runtime's capacity (it starts a batch, or waits inside
    ``rt.waiting()`` on a thread that is no actor): when that is the
    context of a flight an on-demand waiter waits for (:class:`LentOnDemand`),
    the waiter's slot is lent (once). A context variable read otherwise."""
    waiter = _WAITER.get() if context is None else context.get(_WAITER)
    if waiter is not None:
        waiter.lend()


class CallActor(MailboxActor):
    """Dispatches calls from the work mailboxes it is sent to serve (pooled,
    one call at a time, on its own thread)."""

    def __init__(self, group: ActorGroup, rt: Kernel, dispatcher: Dispatcher) -> None:
        super().__init__(group)
        self.rt = rt
        self.dispatcher = dispatcher  # (read-only: whose call-actor slot it holds)
        self.address = Address(self)
        self.lends = 0  # the waits its slot is lent for (see Lent); its own thread only

    def handle(self, message: Serve[WorkMailbox]) -> None:
        match message:
            case Serve():
                mailbox: WorkMailbox | None = message.mailbox
                while mailbox is not None:
                    mailbox = self._serve(mailbox)
            case _:
                assert_never(message)

    def refuse(self, message: Serve[WorkMailbox]) -> None:
        """``message`` reached this actor after it retired: its slot goes
        back and its mailbox hears that nobody comes (any thread: see
        ``MailboxActor``)."""
        self.dispatcher.refused(message)

    def _serve(self, mailbox: WorkMailbox) -> WorkMailbox | None:
        """Serve ``mailbox`` until told to leave; the next mailbox the dispatcher
        sends this actor to, or None (idle)."""
        rt = self.rt
        # This actor owes its slot (it took it back above the budget, a lend
        # ended) when its address is in the dispatcher's owing: it asks
        # under the lock before its next take (_repay). Read without the
        # lock: only this actor's thread puts it in or takes it out, so it
        # is seen exactly whenever it owes (another's debt costs it nothing).
        owing = self.dispatcher.owing
        address = self.address
        reply = None  # settles the batch's reply, when this actor ended it
        mailbox.arrive()
        item = mailbox.take(arriving=True)
        while item is not LEAVE:
            call: Any = item
            try:
                dispatch(rt, call)
            except BaseException as exc:  # noqa: BLE001 - dispatch never raises; be sure
                logger.opt(exception=exc).error("dispatch of {!r} failed", call)
                call.settle(failure_from_exception(exc), run_post=False, dispatched=True)
            item = self._repay(mailbox, False) if owing and address in owing else mailbox.take(wait=False)
            if item is LEAVE:
                # Back with the dispatcher before the batch hears of this call: a
                # batch the caller sends next finds this actor idle.
                nxt = self._release(mailbox)
                mailbox.report(call)
                return nxt
            if item is None:
                # Nothing queued: take the batch's step here when nobody
                # runs it (it commits, prepares the next calls and puts
                # them), then take the next call: the slot this call freed
                # is refilled without a hop to an executor actor and back.
                reply = mailbox.report_and_step(call)
                item = self._repay(mailbox, True) if owing and address in owing else mailbox.take()
            else:
                mailbox.report(call)
        if reply is not None:
            _answer(reply)  # while this actor holds its slot (see ExecutorActor._go_on)
        return self._release(mailbox)

    def _repay(self, mailbox: WorkMailbox, wait: bool) -> Any:
        """This call actor owes its slot (a body or a step it ran lent it,
        and it took it back above the budget: the dispatcher's ``owing``)
        and is about to take its next call: it leaves ``mailbox`` instead
        (LEAVE: :meth:`_release` gives the slot back) while the runtime
        still holds more call-actor slots than the budget; else it takes the
        call as ever (``WorkMailbox.give_back``)."""
        if mailbox.give_back(self.address):
            return LEAVE
        return mailbox.take(wait=wait)

    def _release(self, mailbox: WorkMailbox) -> WorkMailbox | None:
        # Its slot goes back to the dispatcher (the debt with it, if it owes
        # it): the next mailbox it serves, or None.
        return self.dispatcher.release(self.address, mailbox)


def _answer(settle_reply: Callable[[], object]) -> None:
    """Settle a batch's reply on an actor that still holds its slot. The
    future's done-callbacks run here, and ``concurrent.futures`` lets a
    callback's ``BaseException`` (``SystemExit``, say) escape: it is
    logged, and the actor goes on to give its slot back."""
    try:
        settle_reply()
    except BaseException as exc:  # noqa: BLE001 - nothing a callback raises keeps the slot
        log_exception(exc, "a done-callback of a batch's future raised {}", type(exc).__name__)
