"""The native executor: its actors and its pools.

* :class:`NativeExecutor` is what ``set_executor`` installs. ``submit``
  hands a batch to an idle :class:`ExecutorActor` (pooled, one batch at a
  time) in a ``RunBatch`` message.
* :class:`ExecutorActor` runs the batch's :class:`~.batch.BatchRun` (the
  schedule, see ``scheduling/batch.py``): while a batch runs, the actor
  reads that batch's inbox (``Settled``, ``Wake``, ``Deadline``), and its
  pykka inbox only ever holds the next ``RunBatch`` or pykka's stop.
* :class:`CallActor` serves work mailboxes (``Serve``): it takes the
  batch's next startable call, dispatches it (``tools/execute`` wrappers,
  the body, output validation, render), reports ``Settled``, and goes on
  until it is told to leave; then the runtime's
  :class:`~.pool.CallPool` sends it to the next batch waiting for a call
  actor, or keeps it idle.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, assert_never

from loguru import logger

from ..actors import ActorGroup, Address, MailboxActor, settle
from ..executor_protocol import ToolModelInput
from ..json import thaw
from ..model import ToolBatchInput, ToolBatchResult
from ..pipeline.intake import check_batch, check_limit
from ..pipeline.results import failure_from_exception
from ..pipeline.stages import CallPhase, dispatch
from .batch import BatchRun
from .messages import Deadline, Reply, RunBatch, Serve
from .pool import LEAVE, CallPool, WorkMailbox

if TYPE_CHECKING:  # pragma: no cover
    from ..definition import ToolDefinition
    from ..runtime import ToolRuntime

__all__ = ["CallActor", "ExecutorActor", "NativeExecutor"]

_IDLE_EXECUTORS_KEPT = 32


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
        self._rt: ToolRuntime | None = None
        self._lock = threading.Condition()
        self._idle_executors: list[Address] = []
        self._closed = False
        self._checked_own: dict[int, Any] = {}
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

    def _pool(self) -> CallPool:
        rt = self._rt
        assert rt is not None
        return rt.call_pool

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

    def _submit(self, batch: ToolBatchInput, reply: Reply, *, checked: bool, loop: Any = None) -> None:
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
        executor.tell(RunBatch(batch=batch, reply=reply, limit=limit, loop=loop if loop is not None else rt.bound_loop))

    # -- the executor actors' pool ------------------------------------------

    def _acquire_executor(self, rt: ToolRuntime) -> Address:
        with self._lock:
            if self._closed:
                raise RuntimeError("the runtime is stopped")
            if self._idle_executors:
                return self._idle_executors.pop()
        return ExecutorActor.open(rt.group, self, rt)

    def _release_executor(self, address: Address) -> None:
        with self._lock:
            if not self._closed and len(self._idle_executors) < _IDLE_EXECUTORS_KEPT:
                self._idle_executors.append(address)
                return
        rt = self._rt
        if rt is not None:
            rt.group.retire(address.ref)

    def _started(self, run: BatchRun) -> None:
        with self._lock:
            self._running[id(run)] = run

    def _finished(self, run: BatchRun) -> None:
        with self._lock:
            self._running.pop(id(run), None)
            if not self._running:
                self._lock.notify_all()

    def _shutdown(self) -> None:
        """Runtime stop (after ``rt.stop_signal`` fired, which every running
        batch and body observes): refuse new batches, let the running ones
        drain until the stop's deadline, then tell the rest to commit what is
        still out as ABORTED (a body ignoring its signal)."""
        rt = self._rt
        assert rt is not None
        with self._lock:
            self._closed = True
            self._idle_executors.clear()
            self._lock.wait_for(lambda: not self._running, timeout=rt.stop_remaining())
            late = list(self._running.values())
        for run in late:
            run.inbox.put(Deadline())
        if late:
            with self._lock:
                self._lock.wait_for(lambda: not self._running, timeout=min(1.0, rt.stop_remaining()))


class ExecutorActor(MailboxActor):
    """Runs one batch at a time (pooled). See the module docstring."""

    def __init__(self, group: ActorGroup, native: NativeExecutor, rt: ToolRuntime) -> None:
        super().__init__(group)
        self._native = native
        self._rt = rt
        self._address: Address | None = None

    def handle(self, message: RunBatch) -> None:
        match message:
            case RunBatch():
                native = self._native
                run = BatchRun(self._rt, native, message.batch, message.limit, message.reply, message.loop)
                native._started(run)
                try:
                    outcome = run.run()
                finally:
                    native._finished(run)
                # Idle again before the caller hears back: a caller that
                # submits its next batch at once finds this actor free.
                if self._address is None:
                    self._address = Address(self.actor_ref, self.mailbox)
                native._release_executor(self._address)
                if isinstance(outcome, BaseException):
                    settle(message.reply, error=outcome)
                else:
                    settle(message.reply, outcome)
            case _:
                assert_never(message)


class CallActor(MailboxActor):
    """Dispatches calls from the work mailboxes it is sent to serve (pooled,
    one call at a time, on its own thread)."""

    def __init__(self, group: ActorGroup, rt: ToolRuntime, pool: CallPool) -> None:
        super().__init__(group)
        self.rt = rt
        self.pool = pool
        self.address = Address(self.actor_ref, self.mailbox)

    def handle(self, message: Serve) -> None:
        match message:
            case Serve():
                mailbox: WorkMailbox | None = message.mailbox
                while mailbox is not None:
                    mailbox = self._serve(mailbox)
            case _:
                assert_never(message)

    def _serve(self, mailbox: WorkMailbox) -> WorkMailbox | None:
        """Serve ``mailbox`` until told to leave; the next mailbox the pool
        sends this actor to, or None (idle)."""
        rt = self.rt
        pool = self.pool
        mailbox.arrive()
        item = mailbox.take()
        while item is not LEAVE:
            call: Any = item
            try:
                dispatch(rt, call)
            except BaseException as exc:  # noqa: BLE001 - dispatch never raises; be sure
                logger.opt(exception=exc).error("dispatch of {!r} failed", call)
                call.outcome = failure_from_exception(exc)
                call.run_post = False
                call.phase = CallPhase.DISPATCHED
            item = mailbox.take(wait=False)
            if item is LEAVE:
                # Back in the pool before the executor hears of this call: a
                # batch the caller sends next finds this actor idle.
                nxt = pool.release(self.address)
                mailbox.report(call)
                return nxt
            mailbox.report(call)
            if item is None:
                item = mailbox.take()
        return pool.release(self.address)
