"""The native executor: a rolling pool with exclusive barriers.

One :class:`ExecutorActor` runs one batch at a time (executor actors are
pooled and reused across batches). It prepares and finalizes calls on its
own thread, strictly in model order, and hands each allowed call's dispatch
to a pooled :class:`CallActor`: the next call goes to whichever call actor
reported done first. Only dispatch overlaps.

When the pool is full the executor may prepare up to ``limit`` more calls
ahead and put them, READY, in the batch's :class:`ReadyQueue`: a call actor
that finishes a call takes the first of them itself instead of going to
sleep (one thread wake-up less per call) and says so in its
``CallSettled(took=index)``. Only the executor writes its counters.

When preparing is unobservable (no pre-execute listener, no guard; see
:meth:`ExecutorActor._observed`) and the batch writes no session log, the
batch is *self-served*: a :class:`SelfServe` run lets the executor and up to
``limit - 1`` call actors (woken one at a time with ``Serve``, while calls
are left) claim calls in model order and run each one's prepare and
dispatch, as a thread pool's workers would; each call actor goes back to the
pool by itself when nothing is left to claim, and the last server to leave
ends the run (a call actor tells the executor ``Served``). Finalize stays
on the executor, in model order: it commits what is ready between its own
calls and after the run. So post-execute, ``tools/result`` listeners and
finalize hooks see what they see on the executor's path.

The schedule is one state machine. Each call has a :class:`CallPhase`; after
every message the actor runs :meth:`ExecutorActor._advance`, which commits
what may be committed and starts what may start. Its invariants:

* ``calls[:next_commit]`` are DONE and their results are in ``results``, in
  model order; ``next_commit <= next_start``. A committed call is dropped
  from ``calls`` (``None``): nothing reads it again, and a 10,000-call batch
  then keeps 10,000 results alive, not 10,000 trips (less for the cyclic GC
  to walk).
* ``calls[next_start:]`` are PENDING (never prepared, never logged); a
  call whose arguments are JSON text may not even be built yet (``None``
  until :meth:`ExecutorActor._call_at` builds it, as it is about to start).
* ``running`` is the number of DISPATCHING calls the executor knows of (a
  call a call actor took from the ready queue counts once its
  ``CallSettled(took=...)`` arrives, and replaces that actor's own settled
  call); the calls actually dispatching are never more, so at most
  ``limit`` run at once. The executor sends a Dispatch only while
  ``running < limit``, and then first from the ready queue (model order).
* ``queued`` counts calls put in the ready queue and not yet reported taken
  or reclaimed; ``running + queued <= 2 * limit``. A call is prepared ahead
  (while ``running == limit``) only if preparing it runs nothing observable
  (no ``tools/pre-execute`` listener, no guard for its agent) and the batch
  is not serial (``limit >= 2``: a serial batch commits each call before
  the next one is prepared). The queue's lock makes a call either taken by
  a call actor or reclaimed by the executor, never both.
* ``barrier`` is the index of the exclusive call that has started and is
  not yet committed, or None. While it is set nothing else starts, and an
  exclusive call starts only when ``next_commit == next_start`` (everything
  before it has committed, so nothing runs or is queued) — so an exclusive
  call never overlaps another, and nothing after it is prepared until it
  commits.
* Once the batch signal has fired (or the batch failed internally), no call
  starts: every PENDING call becomes RESOLVED as ``ABORTED_BEFORE_DISPATCH``
  without running any phase, and is committed in its turn. Calls still in
  the ready queue are reclaimed and resolved the same way (their prepare
  ran no observable phase, so they end as unstarted calls do:
  ``run_post=False``); a call actor takes no call once the signal fired.
* While a self-served run is open (``serving`` is set) its lock owns
  ``next_start`` and the building of calls: a claimer builds and classifies
  call ``next_start`` and claims it (``next_start += 1``) unless it is
  exclusive, which closes the run, so nothing after it starts before the
  executor's path has it. (An exclusive call of a known tool may be the
  executor's opening claim, when nothing runs and everything before has
  committed: it closes the run behind it and runs alone, on the executor.)
  A run never opens on a call whose prepare is observed; if a pre-execute
  listener or guard appears while a run is open, each later call is
  prepared by its claimer under the lock (one at a time, in model order).
  The run claims nothing once the batch's signal or the runtime's stop
  fired. Only the executor commits (``_commit_ready``), reading
  ``next_start`` and the phases servers write (DISPATCHED last). Its
  ``_step`` does nothing else until the last server has left the run
  (``SelfServe.active`` is 0); at most ``limit`` calls run at once (the
  executor and ``limit - 1`` call actors). A run starts only when nothing
  else is running or queued and no barrier is set.
* The batch replies only when ``next_commit == len(calls)``,
  ``running == 0``, ``queued == 0`` and no run is open: a started call is
  never abandoned.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, assert_never

import pykka
from loguru import logger
from pykka._envelope import Envelope

from ..actors import ActorBase, PoliteLock
from ..errors import ToolBatchExecutionError, safe_str
from ..executor import ToolModelInput
from ..json import thaw
from ..model import (
    ToolBatchInput,
    ToolBatchResult,
    ToolCall,
    ToolCallResult,
    ToolExecutionResult,
    ToolExecutionSuccess,
    UserMessage,
    slot_setters,
)
from ..pipeline.intake import check_batch, check_limit, loggable, parse_arguments
from ..pipeline.results import aborted
from ..pipeline.stages import (
    LOOK_UP,
    Call,
    CallPhase,
    begin_call,
    dispatch,
    finalize,
    prepare,
    registry_functions,
)
from ..signals import AbortController, AbortSignal
from .messages import AbortBatch, CallSettled, Dispatch, Reply, RunBatch, Serve, Served

if TYPE_CHECKING:  # pragma: no cover
    from ..definition import ToolDefinition
    from ..runtime import ToolRuntime
    from ..session import Session

__all__ = ["CallActor", "ExecutorActor", "NativeExecutor"]

#: What ExecutorActor._serve_run did: no run (the call needs the executor's
#: path), a run that is over, a run that call actors still serve.
_NO_RUN, _RUN_OVER, _RUN_OPEN = object(), object(), object()

#: The events whose listeners see a call's prepare (so where and in which
#: order it runs); finalize always runs on the executor, in model order.
_OBSERVERS = ("tools/pre-execute",)

_IDLE_EXECUTORS_KEPT = 32
_IDLE_WORKERS_KEPT = 256


class NativeExecutor:
    """The built-in executor (the default of every runtime).

    ``max_parallel_tool_calls`` (default 10) bounds how many calls of a batch
    dispatch at once; a batch's own ``max_parallel_tool_calls`` overrides
    it; 1 runs the batch serially.
    """

    sections: tuple[Any, ...] = ()

    def __init__(self, max_parallel_tool_calls: int = 10) -> None:
        self.max_parallel_tool_calls = check_limit(max_parallel_tool_calls)
        self._rt: ToolRuntime | None = None
        self._lock = threading.Lock()
        self._idle_executors: list[pykka.ActorRef[Any]] = []
        self._idle_workers: list[pykka.ActorRef[Any]] = []
        self._closed = False
        self._checked_own: dict[int, Any] = {}

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

    def _own(self) -> dict[str, Any]:
        tools = self.executor_tools()
        if not tools:
            return {}
        from ..definition import validate_definition

        cache = self._checked_own
        out: dict[str, Any] = {}
        for definition in tools:
            checked = cache.get(id(definition))
            if checked is None or checked.definition is not definition:
                checked = validate_definition(definition)
                cache[id(definition)] = checked
            out[definition.name] = checked
        return out

    # -- the executor protocol ---------------------------------------------

    def bind(self, runtime: ToolRuntime) -> None:
        """Attach to ``runtime`` (called by ``set_executor``)."""
        with self._lock:
            if self._rt is runtime:
                return
            if self._rt is not None:
                raise RuntimeError("this NativeExecutor is already installed in another runtime")
            self._rt = runtime
        runtime.on_stop(self._shutdown)

    def describe(self, tools: Sequence[ToolDefinition]) -> ToolModelInput:
        schemas = tuple(
            {"name": d.name, "description": d.description, "parameters": thaw(d.parameters)}
            for d in tools
        )
        return ToolModelInput(schemas=schemas, known_names=tuple(d.name for d in tools))

    def execute(self, batch: ToolBatchInput) -> ToolBatchResult:
        """Run ``batch`` and block the calling thread until it settles."""
        return self.submit(batch).result()

    def submit(self, batch: ToolBatchInput) -> Future[ToolBatchResult]:
        """Start ``batch``; the future settles once every started call has."""
        future: Future[ToolBatchResult] = Future()
        self._submit(batch, future, checked=False)
        return future

    def _submit(self, batch: ToolBatchInput, reply: Reply, *, checked: bool) -> None:
        """:meth:`submit` into a given future (``checked``: the caller ran
        ``check_batch`` already, as the registry's ``start_batch`` does)."""
        rt = self._rt
        if rt is None:
            raise RuntimeError("this NativeExecutor is not installed in a runtime (rt.tools.set_executor)")
        if not checked and not isinstance(batch, ToolBatchInput):
            raise TypeError(f"expected a ToolBatchInput, got {type(batch).__qualname__}")
        limit = (
            self.max_parallel_tool_calls
            if batch.max_parallel_tool_calls is None
            else check_limit(batch.max_parallel_tool_calls)
        )
        if not checked:
            check_batch(batch)
        executor = self._acquire_executor(rt)
        executor.tell(RunBatch(batch=batch, reply=reply, limit=limit))

    # -- pools ---------------------------------------------------------------

    def _acquire_executor(self, rt: ToolRuntime) -> pykka.ActorRef[Any]:
        with self._lock:
            if self._closed:
                raise RuntimeError("the runtime is stopped")
            if self._idle_executors:
                return self._idle_executors.pop()
        return ExecutorActor.spawn(rt.group, self, rt)

    def _release_executor(self, ref: pykka.ActorRef[Any]) -> None:
        with self._lock:
            if not self._closed and len(self._idle_executors) < _IDLE_EXECUTORS_KEPT:
                self._idle_executors.append(ref)
                return
        self._retire(ref)

    def _acquire_worker(self, rt: ToolRuntime) -> pykka.ActorRef[Any]:
        with self._lock:
            if self._idle_workers:
                return self._idle_workers.pop()
        return CallActor.spawn(rt.group, rt)

    def _release_worker(self, ref: pykka.ActorRef[Any]) -> None:
        # Invariant: a worker is idle here, so handing it to the next call
        # is "whichever call actor reported done first".
        with self._lock:
            if not self._closed and len(self._idle_workers) < _IDLE_WORKERS_KEPT:
                self._idle_workers.append(ref)
                return
        self._retire(ref)

    def _retire(self, ref: pykka.ActorRef[Any]) -> None:
        rt = self._rt
        if rt is None:
            ref.stop(block=False)
        else:
            rt.group.retire(ref)

    def _shutdown(self) -> None:
        """Runtime stop (after ``rt.stop_signal`` fired, which every running
        batch and body observes): close the pools; the group stops actors."""
        with self._lock:
            self._closed = True
            self._idle_executors.clear()
            self._idle_workers.clear()


class ReadyQueue:
    """One batch's prepared, allowed calls (READY) waiting for a call actor,
    in model order. The executor appends; a call actor that has just
    finished a call takes the first one (and reports it in its
    ``CallSettled``); on abort the executor reclaims what is left. Both sides
    hold ``lock``, so a call is either taken or reclaimed, never both."""

    __slots__ = ("lock", "calls", "closed", "signal", "stopping")

    def __init__(self, signal: AbortSignal | None, stopping: AbortSignal) -> None:
        self.lock = PoliteLock()  # call actors race for it
        self.calls: deque[Call] = deque()
        self.closed = False
        self.signal = signal
        self.stopping = stopping

    def take(self) -> Call | None:
        """The next ready call, now DISPATCHING, or None (a call actor)."""
        if not self.calls or self.closed:
            return None
        signal = self.signal
        if (signal is not None and signal.aborted) or self.stopping.aborted:
            return None  # the executor reclaims it
        with self.lock:
            if self.closed or not self.calls:
                return None
            call = self.calls.popleft()
            call.phase = CallPhase.DISPATCHING
            return call


class SelfServe:
    """A run of *self-served* calls: calls whose prepare runs nothing anyone
    can observe (see :meth:`ExecutorActor._observed`), claimed in model
    order by whoever is free (the executor itself and up to ``limit - 1``
    call actors), each preparing and dispatching its call like a thread
    pool's worker, without a hand-off per call; the executor finalizes
    them, in model order.

    While a run is open its ``lock`` guards the executor's ``_next_start``,
    the building of calls and the counters below; a claimer builds and
    classifies the next call under the lock, so an exclusive call ends the
    run *before* anything after it starts. The run ends for good
    (``closed``) at an exclusive call, at the end of the batch, when the
    batch's signal or the runtime's stop fired, or on a bug.

    Call actors join lazily, one at a time. Invariant: a server that has
    claimed a call and is about to run it, while calls are left to claim,
    makes sure a *spare* server is on its way (woken, not yet claiming) as
    long as fewer than ``limit`` serve the run. So a body that blocks
    always has someone behind it to take the next call (the run reaches
    ``limit`` calls at once, one wake-up after another), and a run of quick
    calls wakes one call actor, not ``limit - 1``: the executor has usually
    served them all before the spare gets the GIL.
    """

    __slots__ = (
        "lock",
        "executor",
        "closed",
        "signal",
        "stopping",
        "rt",
        "active",
        "servers",
        "spare",
        "limit",
        "error",
        "message",
    )

    def __init__(self, executor: ExecutorActor, signal: AbortSignal, stopping: AbortSignal, limit: int) -> None:
        self.lock = PoliteLock()  # every server claims through it
        self.executor = executor
        self.closed = False
        # Servers inside the run (the executor counts from the start); the
        # last to leave ends it.
        self.active = 1
        # Servers that ever joined (at most `limit`), and woken call actors
        # that have not tried to claim yet.
        self.servers = 1
        self.spare = 0
        self.limit = limit
        self.error: BaseException | None = None  # the first bug a server met
        self.signal = signal
        self.stopping = stopping
        self.rt = executor._rt
        self.message: Serve | None = None  # made when a first spare is woken

    def claim(self, alone: bool = False, woken: bool = False) -> tuple[Call, Any, bool] | None:
        """The next call, claimed, with the registration it runs (looked up
        just now) and whether the claimer must wake a spare server first;
        or None (and the run is closed).

        ``alone``: the executor opening a run, with nothing running and
        everything before committed. Then an exclusive call may be claimed
        too: the run closes behind it, so it runs alone, on the executor,
        and nothing after it starts until it has committed. ``woken``: a
        spare call actor's first claim (it is no longer spare)."""
        with self.lock:
            if woken:
                self.spare -= 1
            if self.closed:
                return None
            executor = self.executor
            index = executor._next_start
            total = len(executor._calls)
            if index >= total or self.signal.aborted or self.stopping.aborted:
                self.closed = True
                return None
            call = executor._call_at(index)
            if call.mode is None:
                call.mode, looked_up = executor._classify(call)
            else:
                looked_up = LOOK_UP  # classified by an earlier claim: look again
            if call.override is not None:
                looked_up = call.override
            elif looked_up is LOOK_UP and call.phase is CallPhase.PENDING:
                looked_up = executor._executable(call)
            exclusive = call.mode != "parallel"
            if exclusive and not alone:
                self.closed = True  # a barrier: the executor's path takes it
                return None
            observed = call.phase is CallPhase.PENDING and executor._observed(call)
            if alone and (observed or (exclusive and looked_up is None)):
                # Not worth a run: the executor's path prepares it (and an
                # unknown tool is a barrier there).
                self.closed = True
                return None
            executor._next_start = index + 1
            if observed:
                # A pre-execute listener or guard appeared while the run was
                # open: prepare this call now, under the lock, so prepares
                # still run one at a time in model order (on this thread).
                prepare(self.rt, call, looked_up)
            if exclusive:
                self.closed = True  # a barrier: nothing else joins this run
                return call, looked_up, False
            wake = not self.spare and self.servers < self.limit and index + 1 < total
            if wake:
                self.spare += 1
                self.servers += 1
                self.active += 1
            return call, looked_up, wake

    def _wake_spare(self) -> None:
        """Wake the spare server :meth:`claim` reserved (a pooled call actor)."""
        executor = self.executor
        message = self.message
        if message is None:
            message = self.message = Serve(serving=self, executor=executor.actor_ref, batch_id=executor._batch_id)
        try:
            worker = executor._native._acquire_worker(self.rt)
            _tell(worker, message)
        except (RuntimeError, pykka.ActorDeadError):
            # The runtime is stopping (the claims see it): nobody is coming.
            with self.lock:
                self.spare -= 1
                self.servers -= 1  # a later claim may wake another
                self.active -= 1  # never the last: the waker is inside

    def leave(self, error: BaseException | None) -> bool:
        """A server is done; True for the last one (the run is over)."""
        with self.lock:
            if error is not None and self.error is None:
                self.error = error
            self.active -= 1
            return self.active == 0

    def serve(
        self, first: tuple[Call, Any, bool] | None = None, *, woken: bool = False
    ) -> BaseException | None:
        """Run ``first`` (already claimed), then claim and run calls until
        none is left; the bug that stopped it, if any. ``woken``: a spare call
        actor."""
        rt = self.rt
        executor = self.executor
        on_executor = not woken
        try:
            while True:
                if first is not None:
                    claimed: tuple[Call, Any, bool] | None = first
                    first = None
                else:
                    first_claim, woken = woken, False
                    claimed = self.claim(woken=first_claim)
                if claimed is None:
                    return None
                call, looked_up, wake = claimed
                if wake:
                    self._wake_spare()
                if call.phase is CallPhase.PENDING:  # (a resolved one only commits)
                    prepare(rt, call, looked_up, True)  # unobserved: claim() just checked
                if call.phase is CallPhase.READY:
                    call.phase = CallPhase.DISPATCHING
                    dispatch(rt, call, fresh=True)  # ends DISPATCHED: the executor commits it
                if on_executor:
                    executor._commit_ready()  # finalize what is ready, in model order
        except BaseException as exc:  # noqa: BLE001 - a bug: close the run, fail the batch
            logger.opt(exception=exc).error("a self-served call failed")
            with self.lock:
                self.closed = True
            return exc


class CallActor(ActorBase):
    """Runs one call's dispatch at a time on its own thread (pooled); when
    done, it takes the batch's next ready call, if any, before sleeping."""

    def __init__(self, rt: ToolRuntime) -> None:
        super().__init__()
        self._rt = rt

    def receive(self, message: Dispatch | Serve) -> None:
        if type(message) is Serve:
            serving: SelfServe = message.serving
            error = serving.serve(woken=True)
            # Back to the pool first, so the batch's next run finds it idle.
            serving.executor._native._release_worker(self.actor_ref)
            if serving.leave(error):
                try:
                    _tell(message.executor, Served(batch_id=message.batch_id, error=serving.error))
                except pykka.ActorDeadError:
                    pass  # the runtime is stopping
            return
        assert type(message) is Dispatch
        call = message.call
        ready: ReadyQueue | None = message.ready
        rt = self._rt
        while True:
            try:
                dispatch(rt, call)
            except BaseException as exc:  # noqa: BLE001 - dispatch never raises; be sure
                from ..pipeline.results import failure_from_exception

                logger.opt(exception=exc).error("dispatch of {!r} failed", call)
                call.outcome = failure_from_exception(exc)
                call.run_post = False
                call.phase = CallPhase.DISPATCHED
            nxt = None if ready is None else ready.take()
            try:
                if nxt is None:
                    _tell(message.executor, CallSettled(batch_id=message.batch_id, index=call.index, worker=self.actor_ref))
                else:
                    _tell(
                        message.executor,
                        CallSettled(batch_id=message.batch_id, index=call.index, worker=None, took=nxt.index),
                    )
            except pykka.ActorDeadError:
                return  # the runtime is stopping
            if nxt is None:
                return
            call = nxt


class ExecutorActor(ActorBase):
    """Schedules one batch at a time (see the module docstring)."""

    def __init__(self, native: NativeExecutor, rt: ToolRuntime) -> None:
        super().__init__()
        self._native = native
        self._rt = rt
        self._batch_id = 0
        self._rt_stopping = rt.stop_signal
        self._reset()
        # One subscription for the actor's life, not one per batch: when the
        # runtime stops, the batch running here (if any) is woken up.
        self._unsubscribe_stop = self._rt_stopping.add_callback(self._on_runtime_stop)

    def _reset(self) -> None:
        self._active = False
        self._batch: ToolBatchInput | None = None
        self._reply: Reply | None = None
        # A call, or None (not built yet, or committed).
        self._calls: list[Call | None] = []
        # For each call not built yet: (the model's call, override, hint).
        self._unbuilt: list[tuple[ToolCall, Any, str | None] | None] = []
        self._limit = 1
        self._next_start = 0
        self._next_commit = 0
        self._running = 0
        # Calls appended to the ready queue and not yet reported taken (a
        # call actor's CallSettled(took=...)) nor reclaimed.
        self._queued = 0
        self._ready: ReadyQueue | None = None
        self._barrier: int | None = None
        self._results: list[ToolCallResult] = []
        self._committed = 0  # results whose tool/result reached the session
        self._session: Session | None = None
        self._bug: BaseException | None = None
        self._log_error: BaseException | None = None
        self._signal: AbortSignal | None = None
        self._unsubscribe: Any = None
        # What every body's fresh signal of this batch subscribes to: the
        # batch's signal fused once with the runtime's stop signal (or the
        # stop signal alone when the batch has none: nothing else can fire).
        self._body_parent: AbortSignal | None = None
        self._owns_body_parent = False
        self._halted = False
        self._body_hook: Any = None
        # The open self-served run (call actors still serve it).
        self._may_serve = False
        self._serving: SelfServe | None = None

    # -- messages -------------------------------------------------------------

    def receive(self, message: RunBatch | AbortBatch | CallSettled | Served) -> None:
        match message:
            case RunBatch():
                self._start(message)
            case CallSettled():
                worker = message.worker
                if worker is not None:
                    self._native._release_worker(worker)
                if not self._active or message.batch_id != self._batch_id:
                    return
                if message.took is not None:
                    self._queued -= 1  # it left the queue and runs: running is unchanged
                else:
                    self._running -= 1
                self._advance()
            case Served():
                if not self._active or message.batch_id != self._batch_id:
                    return
                self._serving = None
                if message.error is not None and self._bug is None:
                    self._bug = message.error
                self._advance()
            case AbortBatch():
                if self._active and message.batch_id == self._batch_id:
                    self._advance()
            case _:
                assert_never(message)

    def _on_runtime_stop(self, _: AbortSignal) -> None:
        # On the thread that stops the runtime, so it reads two fields this
        # actor writes; a stale read is harmless: a batch that starts after
        # the stop signal fired sees it in its first _step.
        if self._active:
            try:
                _tell(self.actor_ref, AbortBatch(batch_id=self._batch_id))
            except pykka.ActorDeadError:
                pass

    def on_stop(self) -> None:
        self._unsubscribe_stop()
        reply = self._reply
        if self._active and reply is not None and not reply.done():
            reply.set_exception(
                ToolBatchExecutionError(
                    "the runtime stopped while the batch was running", results=self._results
                )
            )

    # -- the batch --------------------------------------------------------------

    def _start(self, message: RunBatch) -> None:
        if self._active:  # pragma: no cover - the pool hands out idle actors only
            self._reset()
        self._batch_id += 1
        batch_id = self._batch_id
        batch = message.batch
        self._active = True
        self._batch = batch
        self._reply = message.reply
        self._limit = message.limit
        try:
            # The caller's signal is the batch's own (every phase sees that
            # very object); a batch without one gets a private never-fired one.
            signal = AbortController().signal if batch.signal is None else batch.signal
            self._signal = signal
            if batch.signal is None:
                body_parent = self._rt_stopping
            else:
                body_parent = AbortSignal.any(signal, self._rt_stopping)
                self._owns_body_parent = True
            self._body_parent = body_parent
            agent = batch.agent
            if batch.log is not None and agent is not None:
                self._session = agent.session
            # A logged batch commits tool/call and tool/result in model order.
            self._may_serve = self._session is None
            native = self._native
            own = native._own()
            # The default tool_body always answers None: skip the call.
            self._body_hook = (
                native.tool_body if type(native).tool_body is not NativeExecutor.tool_body else None
            )
            # The default direct_call_hint always answers None: skip the call.
            hinting = type(native).direct_call_hint is not NativeExecutor.direct_call_hint
            calls: list[Call | None] = []
            unbuilt: list[tuple[ToolCall, Any, str | None] | None] = []
            self._calls = calls
            self._unbuilt = unbuilt
            for i, tool_call in enumerate(batch.calls):
                name = tool_call.name
                override = own.get(name) if own else None
                hint = native.direct_call_hint(name) if hinting and override is None else None
                if type(tool_call.arguments) is str:
                    # JSON text cannot change: it is parsed and materialized,
                    # and its call built, when the call is about to start, so
                    # the first call does not wait for the whole batch.
                    calls.append(None)
                    unbuilt.append((tool_call, override, hint))
                else:
                    # A mapping is materialized now, as the batch arrives.
                    unbuilt.append(None)
                    calls.append(self._build(i, tool_call, override, hint))
            if batch.signal is not None:
                # (A batch without a signal has a private one nobody can
                # abort; the runtime's stop reaches it through
                # _on_runtime_stop.)
                ref = self.actor_ref

                def on_abort(_: AbortSignal) -> None:
                    try:
                        ref.tell(AbortBatch(batch_id=batch_id))
                    except pykka.ActorDeadError:
                        pass

                self._unsubscribe = signal.add_callback(on_abort)
        except BaseException as exc:  # noqa: BLE001
            self._bug = exc
        self._advance()

    def _build(self, index: int, tool_call: ToolCall, override: Any, hint: str | None) -> Call:
        batch = self._batch
        assert batch is not None and self._signal is not None
        call = begin_call(
            index,
            tool_call.id,
            tool_call.name,
            parse_arguments(tool_call.arguments),  # may be BadArguments
            self._signal,
            batch.agent,
            batch.tool_set,
            override=override,
            unknown_hint=hint,
            route_to_executor=hint is not None,
        )
        call.body_parent = self._body_parent
        if self._body_hook is not None:
            call.body_hook = self._body_hook
        return call

    def _call_at(self, index: int) -> Call:
        """Call ``index``, built now if it was not yet."""
        call = self._calls[index]
        if call is None:
            pending = self._unbuilt[index]
            assert pending is not None
            self._unbuilt[index] = None
            call = self._calls[index] = self._build(index, *pending)
        return call

    def _advance(self) -> None:
        try:
            self._step()
        except BaseException as exc:  # noqa: BLE001 - a bug: drain, then fail the batch
            logger.opt(exception=exc).error("the batch scheduler failed")
            if self._bug is None:
                self._bug = exc
        self._maybe_finish()

    def _step(self) -> None:
        if self._serving is not None:
            # Call actors still serve the run (its lock owns _next_start);
            # they see an abort themselves. Their Served reports resume us.
            return
        calls = self._calls
        total = len(calls)
        signal = self._signal
        assert signal is not None or total == 0 or self._bug is not None
        while True:
            progressed = self._commit_ready()
            if self._bug is not None:
                self._reclaim()
                return
            if self._next_commit == total:
                return  # every call committed: nothing runs, is queued or can start
            stopping = (
                (signal is not None and signal.aborted)
                or self._rt_stopping.aborted
                or self._log_error is not None
                or self._halted
            )
            if stopping:
                # No barrier and no call starts after an abort; prepared
                # calls still in the ready queue do not dispatch.
                if self._reclaim():
                    progressed = True
                while self._next_start < total:
                    call = self._call_at(self._next_start)
                    self._next_start += 1
                    self._log_call(call)
                    call.resolve(aborted(before_dispatch=True), run_post=False)
                    progressed = True
            else:
                if (
                    self._may_serve
                    and self._running == 0
                    and not self._queued
                    and self._barrier is None
                    and self._next_start < total
                ):
                    served = self._serve_run()
                    if served is _RUN_OPEN:
                        return  # call actors still serve: the last one's Served resumes us
                    if served is _RUN_OVER:
                        continue  # commit what was served, then go on
                if self._queued and self._running < self._limit and self._refill():
                    progressed = True
                while self._next_start < total and self._barrier is None:
                    call = self._call_at(self._next_start)
                    looked_up: Any = LOOK_UP
                    if call.mode is None:
                        # Lazily, as it is about to start. The lookup behind
                        # the answer is handed to prepare() only if it runs
                        # right now, in this iteration.
                        call.mode, looked_up = self._classify(call)
                    exclusive = call.mode == "exclusive"
                    if exclusive:
                        if self._next_commit < self._next_start:
                            break  # an exclusive call waits for everything before it
                    elif self._running >= self._limit and (
                        self._running + self._queued >= 2 * self._limit or not self._may_prepare_ahead(call)
                    ):
                        break  # the pool is full (and `limit` calls are ready ahead)
                    self._next_start += 1
                    if not self._log_call(call):
                        # Its tool/call could not be written: it does not run.
                        call.resolve(aborted(before_dispatch=True), run_post=False)
                        progressed = True
                        break
                    prepare(self._rt, call, looked_up)
                    progressed = True
                    if exclusive:
                        self._barrier = call.index
                    if call.phase is CallPhase.READY:
                        if self._running < self._limit and not self._queued:
                            self._send(call)
                        else:
                            self._enqueue(call)
                    if signal is not None and signal.aborted:
                        break
            if not progressed:
                return

    def _commit_ready(self) -> bool:
        """Commit (finalize, record, log) in model order every started call
        that has its outcome; whether any was. The executor's thread only:
        also between its own calls of a self-served run, while call actors
        still serve (their calls become DISPATCHED last thing, and
        ``_next_start`` only grows)."""
        calls = self._calls
        progressed = False
        while self._next_commit < self._next_start:
            call = calls[self._next_commit]
            assert call is not None  # built when it started, dropped once committed
            if call.phase is not CallPhase.DISPATCHED and call.phase is not CallPhase.RESOLVED:
                break
            self._commit(call)
            if self._barrier == call.index:
                self._barrier = None
            calls[self._next_commit] = None
            self._next_commit += 1
            progressed = True
        return progressed

    def _classify(self, call: Call) -> tuple[str, Any]:
        """The call's mode, and the registration the answer came from (or
        ``LOOK_UP`` when none was looked up)."""
        if call.phase is CallPhase.RESOLVED:
            return "parallel", LOOK_UP  # it will not dispatch: no reason to hold others back
        fns = registry_functions()
        definition_mode = fns.definition_mode
        execution = call.execution
        if call.override is not None:
            return definition_mode(call.override.definition, execution.arguments), LOOK_UP
        try:
            # What registry.execution_mode does, keeping the lookup.
            registration = fns.executable(self._rt.state, execution.name, execution.agent, execution.tool_set)
            if registration is None:
                return "exclusive", registration
            return definition_mode(registration.definition, execution.arguments), registration
        except BaseException:  # noqa: BLE001 - anything odd means exclusive
            return "exclusive", LOOK_UP

    def _may_prepare_ahead(self, call: Call) -> bool:
        """Whether ``call`` may be prepared before a slot frees: only when
        preparing it runs nothing anyone can observe (no pre-execute
        listener, no guard) and the batch is not serial (a serial batch
        commits each call before the next starts)."""
        return self._limit >= 2 and not self._observed(call)

    def _executable(self, call: Call) -> Any:
        """The registration ``call`` would run now (None when none)."""
        execution = call.execution
        try:
            return registry_functions().executable(
                self._rt.state, execution.name, execution.agent, execution.tool_set
            )
        except BaseException:  # noqa: BLE001 - as _classify: anything odd takes the executor's path
            return None

    def _observed(self, call: Call) -> bool:
        """Whether preparing ``call`` runs something anyone can observe (a
        ``tools/pre-execute`` listener or a guard for its agent): then it is
        neither prepared ahead nor does a run open on it (see
        :meth:`SelfServe.claim`). Finalize always
        runs on the executor, in model order (:meth:`_commit_ready`), and a
        batch with a session log is never self-served."""
        agent = call.execution.agent
        rt = self._rt
        return rt.events.observed(_OBSERVERS, agent) or registry_functions().has_guards(rt.state, agent)

    def _serve_run(self) -> object:
        """Open a self-served run at ``_next_start`` if that call may be
        self-served and serve it here, with up to ``limit - 1`` call actors
        woken one at a time (see :class:`SelfServe`), until nothing is left
        to claim (an exclusive call is served here alone). False (and nothing started) when the call
        needs the executor's path: ``_NO_RUN``; else ``_RUN_OVER`` (this
        thread left last) or ``_RUN_OPEN`` (call actors still serve it)."""
        signal = self._signal
        assert signal is not None
        serving = SelfServe(self, signal, self._rt_stopping, self._limit)
        # Nothing runs or is queued (the caller checked) and, once everything
        # before has committed, an exclusive call may run here, alone.
        first = serving.claim(alone=self._next_commit == self._next_start)
        if first is None:
            return _NO_RUN
        self._serving = serving
        error = serving.serve(first)
        if not serving.leave(error):
            return _RUN_OPEN
        self._serving = None
        if serving.error is not None and self._bug is None:
            self._bug = serving.error
        return _RUN_OVER

    def _enqueue(self, call: Call) -> None:
        """Put a READY call in the ready queue (a call actor that finishes
        takes it; see :meth:`_refill` and :meth:`_reclaim`)."""
        ready = self._ready
        assert ready is not None
        with ready.lock:
            ready.calls.append(call)
        self._queued += 1

    def _refill(self) -> bool:
        """Free slots go to the ready queue's first calls, in model order."""
        ready = self._ready
        assert ready is not None
        sent = False
        while self._running < self._limit and self._queued:
            with ready.lock:
                call = ready.calls.popleft() if ready.calls else None
            if call is None:
                return sent  # taken by call actors whose reports are on the way
            self._queued -= 1
            self._send(call)
            sent = True
        return sent

    def _reclaim(self) -> bool:
        """Take back every call still in the ready queue: it was prepared
        but never dispatches (resolved ABORTED_BEFORE_DISPATCH, post-execute
        runs, as for the pipeline's own recheck of the signal)."""
        ready = self._ready
        if ready is None:
            return False
        with ready.lock:
            ready.closed = True
            left = list(ready.calls)
            ready.calls.clear()
        for call in left:
            self._queued -= 1
            # Prepared ahead only when that ran no observable phase (see
            # _may_prepare_ahead): it ends as an unstarted call does.
            call.resolve(aborted(before_dispatch=True), run_post=False)
        return bool(left)

    def _send(self, call: Call) -> None:
        try:
            worker = self._native._acquire_worker(self._rt)
        except RuntimeError:
            # The runtime is stopping under the batch: this call never runs.
            self._halted = True
            call.resolve(aborted(before_dispatch=True), run_post=False)
            return
        call.phase = CallPhase.DISPATCHING
        self._running += 1
        ready = self._ready
        if ready is None and self._limit >= 2:
            # Made on the first Dispatch (a self-served batch needs none).
            assert self._signal is not None
            ready = self._ready = ReadyQueue(self._signal, self._rt_stopping)
        _tell(worker, Dispatch(call=call, executor=self.actor_ref, batch_id=self._batch_id, ready=ready))

    def _log_call(self, call: Call) -> bool:
        """Write the call's ``tool/call``; False if the session failed."""
        session = self._session
        if session is None:
            return True
        if self._log_error is not None:
            return False
        from ..session import call_event

        batch = self._batch
        assert batch is not None and batch.log is not None
        execution = call.execution
        arguments = execution.arguments
        logged = thaw(arguments) if arguments is not None else loggable(call.raw_arguments)
        try:
            session.append(
                call_event(batch.log.turn, batch.log.step, execution.call_id, execution.name, logged)
            )
        except BaseException as exc:  # noqa: BLE001 - a write failure fails the batch after draining
            self._log_error = exc
            return False
        return True

    def _commit(self, call: Call) -> None:
        result = finalize(self._rt, call)
        self._results.append(_call_result(call.execution.call_id, result))
        session = self._session
        if session is None:
            self._committed = len(self._results)
            return
        if self._log_error is not None:
            return
        from ..session import result_event

        try:
            session.append(result_event(call.execution.call_id, result))
        except BaseException as exc:  # noqa: BLE001
            self._log_error = exc
            return
        self._committed = len(self._results)

    def _maybe_finish(self) -> None:
        if not self._active or self._running > 0 or self._queued > 0 or self._serving is not None:
            return
        done = self._next_commit == len(self._calls)
        if not done and self._bug is None:
            return
        reply = self._reply
        results = tuple(self._results)
        failure = self._bug or self._log_error
        if failure is None:
            outcome: ToolBatchResult | BaseException = _batch_result(results)
        else:
            detail = (
                f"the session log could not be written: {safe_str(failure)}"
                if failure is self._log_error
                else f"internal error: {type(failure).__name__}: {safe_str(failure)}"
            )
            error = ToolBatchExecutionError(
                detail, results=results[: self._committed], partial=_batch_result(results)
            )
            error.__cause__ = failure
            outcome = error
        self._cleanup()
        self._native._release_executor(self.actor_ref)
        if reply is not None and reply.set_running_or_notify_cancel():
            if isinstance(outcome, BaseException):
                reply.set_exception(outcome)
            else:
                reply.set_result(outcome)

    def _cleanup(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
        if self._owns_body_parent and self._body_parent is not None:
            self._body_parent.close()
        self._reset()


_new_call_result = ToolCallResult.__new__
_set_result_id, _set_result = slot_setters(ToolCallResult, ("call_id", "result"))


def _call_result(call_id: str, result: ToolExecutionResult) -> ToolCallResult:
    """``ToolCallResult(call_id, result)`` through its slot descriptors (a
    frozen dataclass's ``__init__`` goes through ``object.__setattr__`` per
    field); a test compares the two."""
    item = _new_call_result(ToolCallResult)
    _set_result_id(item, call_id)
    _set_result(item, result)
    return item


def _tell(ref: pykka.ActorRef[Any], message: Any) -> None:
    """``ref.tell(message)`` inlined for the two hand-offs every call makes
    (Dispatch, CallSettled): the same liveness check and envelope, minus two
    method calls."""
    if ref.actor_stopped.is_set():
        raise pykka.ActorDeadError(f"{ref} not found")
    ref.actor_inbox.put(Envelope(message))


def _batch_result(results: tuple[ToolCallResult, ...]) -> ToolBatchResult:
    contexts: list[UserMessage] = []
    concluded = False
    for item in results:
        result: ToolExecutionResult = item.result
        contexts.extend(result.additional_contexts)
        if type(result) is ToolExecutionSuccess and result.concludes_turn:
            concluded = True
    return ToolBatchResult(results=results, additional_contexts=tuple(contexts), concluded=concluded)
