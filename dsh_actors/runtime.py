"""ToolRuntime: starts and stops the whole actor system of one runtime.

``rt = ToolRuntime().start()`` (or ``with ToolRuntime() as rt:``) spawns the
registry actor (which owns the scope actors), the asyncio loop thread for
``async def`` bodies, and the default :class:`NativeExecutor`. ``stop()``
stops exactly the actors and threads this runtime started; two runtimes in
one process never affect each other (pykka's process-global ``stop_all()``
is never called).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import numbers
import threading
import time
import weakref
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, ClassVar, Protocol

import pykka
from loguru import logger

from .actors import ActorGroup, PendingReplies, RegistryRef, actor_thread_ident
from .approvals import ApprovalChannel, ApprovalService
from .definition import LONGEST_WAIT_MS
from .errors import (
    InvalidStateError,
    InvalidTypeError,
    InvalidValueError,
    RegistrationError,
    RuntimeStoppedError,
    callable_name,
    exception_text,
    log_exception,
)
from .events import Disposer, EventBus
from .kernel import NEW_RUNTIME, STOPPED_REFUSAL, Claims, RuntimeKernel, refuse_blocking_a_loop
from .loop import LoopThread
from .messages import ExecuteBatch, ResolveToolSet
from .model import ApprovalRequest  # re-exported: dsh_actors.runtime.ApprovalRequest is importable too
from .pipeline.flights import LoopWatch
from .pipeline.intake import check_limit
from .registry.actor import RegistryActor
from .registry.service import ServiceLinks, ToolsService
from .scheduling.blocking import BlockingPool
from .scheduling.dispatcher import Dispatcher
from .scheduling.executor import CallActor, ExecutorActor, Lent, LentOnDemand, NativeExecutor, refuse_step
from .signals import AbortController, AbortSignal
from .visibility import RegistryState

__all__ = ["DEFAULT_CALL_ACTORS", "ApprovalChannel", "ApprovalRequest", "ApprovalService", "Plugin", "ToolRuntime"]


class Plugin(Protocol):
    """A module or object with ``apply(rt, **config) -> disposer``."""

    def apply(self, rt: ToolRuntime, /, **config: Any) -> Callable[[], Any]: ...


#: The default budget of call actors (threads running sync tool bodies)
#: shared by every batch of a runtime.
DEFAULT_CALL_ACTORS = 64


#: The longest ``stop(timeout)`` honoured, in seconds: the longest wait
#: any option asks for (``LONGEST_WAIT_MS``, about 11.6 days).
_LONGEST_STOP_S = LONGEST_WAIT_MS / 1000.0


class ToolRuntime:
    """The runtime: the registry actor, its scopes, executors and policies.

    ``max_parallel_tool_calls`` is the default executor's limit per batch (a
    positive int, default 10). ``max_call_actors`` bounds the call actors
    (threads that run sync tool bodies) serving all batches at once (default
    ``DEFAULT_CALL_ACTORS``, 64): concurrent batches share them first come,
    first served, each within its own limit; a body waiting on a nested
    batch lends its slot meanwhile, so nested batches never deadlock.
    ``loop`` binds the runtime to an application's event loop: the async
    tool bodies of every batch run there (``execute_async`` runs a batch's on
    the loop that awaits it anyway); without one, batches started from
    sync code run theirs on the runtime's own loop thread.
    """

    #: Seconds :meth:`stop` gives, past its timeout, to each part it then
    #: tells to end (a batch committing its calls still out, the actors and
    #: their threads, the loop and its tasks) before it leaves it running
    #: (twice that to a stop hook: see :meth:`on_stop`).
    STOP_GRACE: ClassVar[float] = 0.5

    def __init__(
        self,
        max_parallel_tool_calls: int = 10,
        *,
        max_call_actors: int = DEFAULT_CALL_ACTORS,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        check_limit(max_parallel_tool_calls)
        check_limit(max_call_actors, "max_call_actors")
        if loop is not None and not isinstance(loop, asyncio.AbstractEventLoop):
            raise InvalidTypeError(f"loop must be an asyncio event loop, not {type(loop).__qualname__}")
        self.max_parallel_tool_calls = max_parallel_tool_calls
        self.max_call_actors = max_call_actors
        self.bound_loop = loop
        self._dispatcher: Dispatcher | None = None
        self._halted = False
        self._halted_event = threading.Event()
        # The threads running the stop: the one finishing it and its hooks' (see _run_stop_hooks).
        self._stopping_threads: set[threading.Thread] = set()
        self._unfinished = False  # a stop begun that no thread has taken on to finish yet (see _finish_stop)
        self._escaped: BaseException | None = None  # what the finished stop kept for a stop() to raise
        self._stop_deadline = 0.0
        self._abandoned: tuple[str, ...] = ()
        self.events = EventBus()
        self.approvals = ApprovalChannel()
        # The suspensions this runtime resumed (each is resumed once).
        self.suspensions = Claims()
        self._lock = threading.Lock()
        self._started = False
        self._stopped = False
        self._group = ActorGroup()
        self._loop: LoopThread | None = None
        # The loops async bodies are in flight on (its thread starts with the first).
        self.loop_watch = LoopWatch()
        self._workers: BlockingPool | None = None
        self._registry: pykka.ActorRef[Any] | None = None
        self._state: RegistryState | None = None
        self._kernel: RuntimeKernel | None = None
        self._bindings = _Bindings()
        self._tools: ToolsService | None = None
        self._native: NativeExecutor | None = None
        # The hooks of on_stop, in registration order (a key each: see on_stop).
        # (Each with whether it runs last: see on_stop.)
        self._stop_hooks: dict[int, tuple[Callable[[], Any], bool]] = {}
        self._hook_keys = itertools.count()
        self._stop_controller = AbortController()
        # Callers blocked on the runtime (a batch, a registry ask) and on a
        # registry write: failed by stop(), at its end and at its start.
        self.pending_replies = PendingReplies()
        self.pending_writes = PendingReplies()

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> ToolRuntime:
        with self._lock:
            if self._stopped:
                raise RuntimeStoppedError(f"a stopped ToolRuntime cannot be started again: {NEW_RUNTIME}")
            if self._started:
                return self
            self._started = True
        try:
            self._loop = LoopThread()
            self._state = RegistryState()
            kernel = self._kernel = RuntimeKernel(
                events=self.events,
                state=self._state,
                stop_signal=self.stop_signal,
                approvals=self.approvals,
                loop=self._loop,
                bound_loop=self.bound_loop,
                loop_watch=self.loop_watch,
                claims=self.suspensions,
                lend=Lent,
                lend_on_demand=LentOnDemand,
                is_running=lambda: self.running,
                worker_pool=self.workers,
                group=self._group,
                stop_clock=self.stop_remaining,
                teardown_clock=self.teardown_remaining,
            )
            self._dispatcher = Dispatcher(kernel, self.max_call_actors, CallActor.open, ExecutorActor.open, refuse_step)
            ref = RegistryActor.spawn(self._group, kernel, self._bind_executor)
            actor = self._group.actor(ref)
            assert actor is not None
            self._registry = RegistryRef(actor, self.pending_replies, self._registry_wait)
            links = ServiceLinks(
                kernel=kernel,
                registry=self._registry,
                pending_replies=self.pending_replies,
                pending_writes=self.pending_writes,
                claims=self.suspensions,
            )
            self._tools = ToolsService(links, scope=None)
            self._native = NativeExecutor(self.max_parallel_tool_calls)
            self._tools.set_executor(self._native)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Stop every actor and thread this runtime started, within about
        ``timeout`` seconds in all. Idempotent.

        Running batches drain first: no call starts any more, every unstarted
        call gets ``ABORTED_BEFORE_DISPATCH``, running bodies see their
        signal fire and finish, and each call gets exactly one result (and,
        when logged, its ``tool/result``). A body still running at the
        timeout is committed ``ABORTED`` and named in its batch's
        ``ToolBatchExecutionError``. Past the timeout each part told to end
        gets :attr:`STOP_GRACE` more; what still runs then is left behind,
        never joined, and named in :attr:`abandoned` and in a warning: a
        sync body's thread, an async task that survived its cancellation
        (the loop closes without it), a loop thread an async body blocks.
        A batch whose own thread is stuck (its only call run inline) is
        answered by the stop itself, with that ``ToolBatchExecutionError``.
        The :meth:`on_stop` hooks are bounded too (one that blocks is left
        running, named in :attr:`abandoned`); a ``SystemExit`` or
        ``KeyboardInterrupt`` a hook raises does not cut the stop short:
        this ``stop()`` raises it once the runtime is stopped.

        The stop runs on a thread of its own (``dsh-stop``, in the
        context of the ``stop()`` that began it) while the caller waits for
        it, so a ``KeyboardInterrupt`` (Ctrl-C) or a ``SystemExit`` (a
        signal handler's ``sys.exit``) raised in that wait, or as the stop
        begins, does not cut it short either: the first is raised once the
        runtime is stopped (a
        hook's is then logged). Every ``stop()`` returns only once the runtime is
        stopped: a second one, concurrent with the first, waits for it.
        Called on one of the runtime's own threads (from a tool body, a
        listener or an observer running on an actor of this runtime, its
        loop thread or its worker threads, or an event loop its async calls
        run on), ``stop()`` cannot wait for that thread to end: it starts
        the stop (``stop_signal`` fires, nothing new is accepted), leaves
        ``dsh-stop`` to finish it and returns at once; the
        stop then runs as above (the caller's call drains like any other)
        and :attr:`halted` tells when it is done (a hook's ``SystemExit``
        or ``KeyboardInterrupt`` is then logged; when no thread can be
        started for it, the next ``stop()`` on another thread finishes it).
        A ``stop()`` on a thread that runs the stop (a stop hook, or a
        done-callback of a batch's future that the stop answers itself)
        returns at once too.

        ``timeout`` is a number of seconds, 0 or more (past about 11 days it
        is taken as 11 days: no stop waits longer)."""
        given: object = timeout
        if type(given) is bool or not isinstance(given, numbers.Real) or not float(given) >= 0:  # (NaN too)
            raise InvalidValueError(f"stop(timeout=...) must be a number of seconds, 0 or more, got {given!r}")
        waited, interrupted = self._await_stop(time.monotonic() + min(float(given), _LONGEST_STOP_S))
        if not waited:  # (begun on a thread of the runtime, or a stop's own: dsh-stop finishes it)
            if interrupted is not None:
                raise interrupted
            return
        escaped = self._take_escaped()
        if interrupted is not None:
            if escaped is not None:
                log_exception(
                    escaped,
                    "rt.stop() met {} (see the traceback); it raises the {} that interrupted it instead",
                    type(escaped).__name__,
                    type(interrupted).__name__,
                )
            raise interrupted
        if escaped is not None:
            raise escaped

    def _on_own_thread(self) -> bool:
        """Whether the calling thread is one a stop waits for: an actor of
        this runtime's group, its loop thread, a worker, or a loop its async
        calls are in flight on."""
        actor = actor_thread_ident()
        if actor is not None and actor.group is self._group:
            return True
        current = threading.current_thread()
        if self._loop is not None and current is self._loop.thread:
            return True
        workers = self._workers
        if workers is not None and workers.owns(current):
            return True
        loop = _running_loop()  # an async body on the caller's loop (execute_async): it runs this loop's flights
        return loop is not None and self.loop_watch.carries(loop)

    def _begin_stop(self) -> None:
        # (Idempotent: a stop begun on a thread of the runtime is begun
        # there, and again by the thread that finishes it.)
        # Nothing new attaches to a stopping runtime (rt.tools and rt.use
        # check _stopped; the bus and the channel are told).
        self.events.close(STOPPED_REFUSAL)
        self.approvals.close(STOPPED_REFUSAL)
        self.pending_writes.fail_all()  # a registry change waited on fails now
        # Then (after the closes, so nothing an abort callback or a woken body
        # attaches gets in) every running body and batch sees the runtime going away.
        self._stop_controller.abort("the runtime is stopping")

    def _start_stopper(self, finish: Callable[[], object]) -> RuntimeError | None:
        """Start the ``dsh-stop`` thread, which runs ``finish``, in the
        calling ``stop()``'s context (its stop hooks run in a copy of it);
        the error when no thread can be started."""
        stopper = threading.Thread(target=contextvars.copy_context().run, args=(finish,), name="dsh-stop", daemon=True)
        try:
            stopper.start()
        except RuntimeError as exc:
            return exc
        return None

    def _await_stop(self, deadline: float) -> tuple[bool, BaseException | None]:
        """:meth:`stop` on its caller's thread, past the check of its
        ``timeout``: mark the stop begun (the first ``stop()``, due by
        ``deadline``); on one of the runtime's own threads, begin it and
        leave the ``dsh-stop`` thread to finish it, without waiting
        (``(False, ...)``); elsewhere start that thread (unless a thread
        has taken the stop on already) and wait until the stop is done
        (``(True, ...)``: :meth:`_finish_stop` always ends it). A
        ``KeyboardInterrupt`` (Ctrl-C) or a ``SystemExit`` (a signal
        handler's ``sys.exit``), which Python raises on the main thread
        alone, ends only what it lands in, from the mark on, not the stop:
        that part is done again (each is idempotent, and ``dsh-stop`` is
        started again while no thread has taken the stop on: one started
        twice finds it taken and ends), and the first is returned, to be
        raised once the stop is done (the others are dropped; the stop is
        bounded by its timeout). So no interrupt leaves a stop begun that
        no thread finishes, nor a caller waiting for a thread that was
        never started. The thread is started within the ``try``, so
        nothing it runs (a hook sending a signal) can interrupt this
        thread outside it. When no thread can be started, the stop
        finishes here."""
        interrupted: BaseException | None = None
        first: bool | None = None  # whether this call began the stop (None: not marked yet)
        waits = False  # dsh-stop started (or the stop finished here): only the wait is left
        while True:
            try:
                if first is None:
                    with self._lock:  # (nothing in it is a call: an interrupt lands before, or once first is set)
                        first = not self._stopped
                        if first:
                            self._stopped = True
                            self._unfinished = True  # (until a thread takes it on: _finish_stop)
                            self._stop_deadline = deadline
                if not waits:
                    if not first and threading.current_thread() in self._stopping_threads:
                        return False, interrupted  # (a stop hook, or a done-callback the running stop answers)
                    if self._on_own_thread():
                        if first:
                            self._begin_stop()  # (here, before returning)
                            failed = self._start_stopper(self._finish_and_log) if self._untaken() else None
                            if failed is not None:  # (the next stop() elsewhere finishes it)
                                logger.error(
                                    "rt.stop() could not start its thread ({}); call rt.stop() again",
                                    exception_text(failed),
                                )
                        return False, interrupted
                    running = _running_loop()
                    if running is not None:
                        # This thread runs an event loop and no flight of ours is on it
                        # (else the stop would have returned above): one launched onto
                        # it now could never start while this stop (the first, or one
                        # waiting for it) blocks it. The stop begins here first (it is
                        # idempotent: dsh-stop, or a first stop, begins it too), so the
                        # signals have fired when the halt ends such a flight: its call
                        # is aborted before dispatch, not failed by a halted loop.
                        self._begin_stop()
                        self.loop_watch.halt(running)
                    failed = self._start_stopper(self._finish_stop) if self._untaken() else None
                    if failed is not None:
                        logger.warning(
                            "rt.stop() could start no thread of its own ({}): it finishes on the caller's thread",
                            exception_text(failed),
                        )
                        self._finish_stop()
                    waits = True
                self._halted_event.wait()
            except BaseException as exc:  # noqa: BLE001 - raised by stop() once the runtime is stopped
                if interrupted is None:
                    interrupted = exc
            else:
                return True, interrupted

    def _untaken(self) -> bool:
        """Whether no thread has taken the begun stop on yet (see :meth:`_finish_stop`)."""
        with self._lock:
            return self._unfinished

    def _finish_stop(self) -> None:
        """Take the stop on, unless a thread has already (the first to
        come: ``dsh-stop``, or a ``stop()`` caller's when no thread can be
        started), and finish it on the calling thread: begin it, if the
        ``stop()`` that was first has not (it is idempotent), and tear the
        runtime down. What a stop hook raised that is no ``Exception``
        (``SystemExit``, ``KeyboardInterrupt``), or what the teardown
        itself raised, is kept (``_escaped``) for a ``stop()`` waiting for
        it to raise once the stop is done."""
        with self._lock:
            if not self._unfinished:
                return
            self._unfinished = False
        self._stopping_threads.add(threading.current_thread())
        escaped: BaseException | None = None
        try:
            self._begin_stop()
            escaped = self._stop_all()
        except BaseException as exc:  # noqa: BLE001 - raised by the stop() that waits, or logged
            escaped = exc
        finally:
            self._escaped = escaped  # (before the stop is done: whoever waits for it takes it then)
            self._halted = True
            self._halted_event.set()

    def _take_escaped(self) -> BaseException | None:
        """What the finished stop kept for a ``stop()`` to raise, once."""
        with self._lock:
            escaped, self._escaped = self._escaped, None
        return escaped

    def _finish_and_log(self) -> None:
        """Finish a stop begun on one of the runtime's own threads (on
        ``dsh-stop``): what it kept, no ``stop()`` waiting for it has
        taken, is logged (nobody would raise it)."""
        self._finish_stop()
        escaped = self._take_escaped()
        if escaped is not None:
            log_exception(
                escaped,
                "rt.stop() met {} (see the traceback); called on a thread of the runtime, it has nobody to raise it to",
                type(escaped).__name__,
            )

    def _stop_all(self) -> BaseException | None:
        """The stop's teardown; returns what a hook raised that is no
        ``Exception`` (see :meth:`_run_stop_hooks`)."""
        abandoned: list[str] = []
        escaped = self._run_stop_hooks(abandoned)
        if self._dispatcher is not None:
            self._dispatcher.close()
        # Past the drain's deadline, what is still running gets STOP_GRACE
        # more to end (each part below); then it is left behind, named.
        abandoned.extend(self._group.stop_all(self.teardown_remaining()))
        if self._dispatcher is not None:
            self._dispatcher.refuse_queued()  # (steps queued behind actors left stuck: nothing runs them now)
        if self._workers is not None:
            self._workers.shutdown()
            end = time.monotonic() + self.teardown_remaining()
            for thread in self._workers.threads():
                thread.join(max(0.0, end - time.monotonic()))
                if thread.is_alive():
                    abandoned.append(thread.name)
        if self._loop is not None:
            left_on_loop = self._loop.stop(self.teardown_remaining())
            if left_on_loop is None:  # something blocks the loop's thread itself
                abandoned.append(self._loop.thread.name)
            else:
                tasks, threads = left_on_loop
                abandoned.extend(self.loop_watch.describe(task) for task in tasks)
                abandoned.extend(threads)  # (its default executor's: asyncio.to_thread work still running)
        left = self.loop_watch.stop()  # (releases whoever waits for a flight of the closed loop)
        abandoned.extend(name for name in left if name not in abandoned)
        self.pending_replies.fail_all()  # answers nobody will give any more
        self._abandoned = tuple(abandoned)
        if abandoned:
            logger.warning(
                "rt.stop() abandoned {} thread(s) and task(s) still running {:.1f} s after its timeout "
                "(code that ignores its signal or survives its cancellation; they are never joined): {}",
                len(abandoned),
                self.STOP_GRACE,
                ", ".join(abandoned),
            )
        return escaped

    def _run_stop_hooks(self, abandoned: list[str]) -> BaseException | None:
        """Run the :meth:`on_stop` hooks, the last registered first (those
        registered with ``last=True`` after all the others), each
        on a thread of its own (``dsh-stop-hook (<its name>)``), waited for
        until the stop's deadline and then twice :attr:`STOP_GRACE` (a hook
        may give what it tells to end at the deadline the grace itself, as
        the default executor's drain does its batches). A hook still
        running then is left running, never joined, and named in
        ``abandoned``; the next one runs. A hook's exception is logged; what
        it raises that is no ``Exception`` (``SystemExit``,
        ``KeyboardInterrupt``) does not cut the stop short either: the
        first is returned, to go on once the stop is done (the others are
        logged, and so is one an abandoned hook raises later). When no
        thread can be started, a hook runs on the calling thread,
        unbounded."""
        hooks, self._stop_hooks = self._stop_hooks, {}
        escaped: BaseException | None = None
        ordered = list(reversed(hooks.values()))
        for hook in [hook for hook, last in ordered if not last] + [hook for hook, last in ordered if last]:
            run = _StopHookRun(hook)
            thread = threading.Thread(
                target=contextvars.copy_context().run,
                args=(run,),
                name=f"dsh-stop-hook ({callable_name(hook)})",
                daemon=True,
            )
            self._stopping_threads.add(thread)
            try:
                thread.start()
            except RuntimeError as exc:  # no thread can be started: it runs here
                logger.warning(
                    "rt.stop() could start no thread for a stop hook ({}): it runs on the stop's thread, unbounded",
                    exception_text(exc),
                )
                run()
            else:
                thread.join(self.stop_remaining() + 2 * self.STOP_GRACE)
                if run.abandon():
                    abandoned.append(thread.name)
                    continue
            if run.raised is None:
                continue
            if escaped is None:
                escaped = run.raised
            else:
                log_exception(run.raised, "a runtime stop hook raised {}; the stop went on", type(run.raised).__name__)
        return escaped

    def waiting(self) -> Lent:
        """Around a wait of the calling thread for work this runtime must do
        (a nested batch, an async body or policy on a loop, an approval): a
        call actor lends its slot of the call-actor budget, an executor
        actor its step slot (to the dispatcher), so the wait never holds
        back the work it waits for (a context manager: ``with
        rt.waiting(): ...``; the kernel's ``waiting``)."""
        return Lent()

    def _bind_executor(self, executor: Any) -> None:
        """``executor.bind(self)``, once per executor object (the scope
        actors' hook: ``set_executor``). Runs on the calling scope actor's
        thread and holds no lock while ``bind`` runs."""
        self._bindings.bind(executor, self)

    def stop_remaining(self) -> float:
        """Seconds left until the running :meth:`stop`'s deadline, the end
        of its drain (0 when none is running)."""
        return max(0.0, self._stop_deadline - time.monotonic()) if self._stopped else 0.0

    def teardown_remaining(self) -> float:
        """Seconds left for the running :meth:`stop`'s teardown: until its
        deadline, and at least :attr:`STOP_GRACE` more past it for each part
        told to end then (a batch committing its calls still out, the
        actors, the loop)."""
        return max(self.STOP_GRACE, self.stop_remaining())

    @property
    def halted(self) -> bool:
        """Whether :meth:`stop` has finished (every thread joined or named)."""
        return self._halted

    @property
    def abandoned(self) -> tuple[str, ...]:
        """What :meth:`stop` left running once it had waited its timeout
        (and :attr:`STOP_GRACE`): the names of threads (``dsh-CallActor``,
        ``dsh-ExecutorActor``: a sync body ignoring its signal;
        ``dsh-asyncio``: something blocking the runtime's loop;
        ``dsh-stop-hook (<its name>)``: a stop hook that has not returned)
        and of async tasks (``async tool "fetch" (call c3)``: a body that survived its
        cancellation, never resumed once the loop closed). Empty until the
        stop is done, and when nothing was left."""
        return self._abandoned

    def __enter__(self) -> ToolRuntime:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._started and not self._stopped

    def _require(self) -> None:
        if not self._started:
            raise InvalidStateError("the ToolRuntime is not started: call start() or use it as a context manager")
        if self._stopped:
            raise RuntimeStoppedError(STOPPED_REFUSAL)

    # -- public parts ------------------------------------------------------

    @property
    def tools(self) -> ToolsService:
        """The global :class:`ToolsService`; ``rt.tools.scope(agent)`` for a scope."""
        self._require()
        assert self._tools is not None
        return self._tools

    @property
    def registry(self) -> pykka.ActorRef[Any]:
        """The registry actor (messages in :mod:`dsh_actors.messages`)."""
        self._require()
        assert self._registry is not None
        return self._registry

    @property
    def native_executor(self) -> NativeExecutor:
        """The default executor every runtime installs globally."""
        self._require()
        assert self._native is not None
        return self._native

    def use(self, plugin: Plugin, /, **config: Any) -> Disposer:
        """Apply ``plugin`` (``plugin.apply(rt, **config) -> disposer``) and
        return an idempotent disposer that undoes it. A stopped runtime
        raises ``RuntimeError``, as ``rt.events.on`` and
        ``rt.approvals.set`` do then."""
        if self._stopped:
            raise RuntimeStoppedError(STOPPED_REFUSAL)
        apply = getattr(plugin, "apply", None)
        if not callable(apply):
            raise InvalidTypeError(f"{plugin!r} is not a plugin: it has no apply(rt, **config)")
        undo = apply(self, **config)
        if undo is None:
            return Disposer(lambda: None)
        if not callable(undo):
            raise InvalidTypeError(f"{plugin!r}.apply() must return a disposer (a callable)")
        return undo if isinstance(undo, Disposer) else Disposer(undo)

    # -- internals shared by the runtime's parts ---------------------------

    @property
    def stop_signal(self) -> AbortSignal:
        """Fires when :meth:`stop` begins: fused into every tool body's
        signal, so cooperative bodies end when the runtime stops."""
        return self._stop_controller.signal

    @property
    def group(self) -> ActorGroup:
        return self._group

    @property
    def dispatcher(self) -> Dispatcher:
        """The runtime's capacity: the call actors every batch shares (the
        budget) and the executor actors' step slots."""
        assert self._dispatcher is not None
        return self._dispatcher

    @property
    def kernel(self) -> RuntimeKernel:
        """What the layers below the runtime are given of it (built once by
        :meth:`start`; see :mod:`dsh_actors.kernel`)."""
        assert self._kernel is not None
        return self._kernel

    @property
    def state(self) -> RegistryState:
        assert self._state is not None
        return self._state

    @property
    def loop(self) -> LoopThread:
        assert self._loop is not None
        return self._loop

    def _registry_wait(self, message: Any) -> AbstractContextManager[Any]:
        """What a blocking ``rt.registry.ask(message)`` waits in: refused on
        a loop the work needs (as ``rt.tools.execute`` and ``resolve``
        are), lending the calling actor's slot meanwhile."""
        if type(message) is ExecuteBatch:
            refuse_blocking_a_loop(
                self.kernel, "rt.registry.ask(ExecuteBatch(...))", "execute_async(batch)", "its async tools run"
            )
            waited_on = self.kernel.loop_watch.blocking_wait()  # (as rt.tools.execute: see ToolsService._blocking)
            if waited_on is not None:
                stack = contextlib.ExitStack()
                stack.enter_context(self.kernel.waiting())
                stack.enter_context(waited_on)
                return stack
        elif type(message) is ResolveToolSet:
            refuse_blocking_a_loop(
                self.kernel,
                "rt.registry.ask(ResolveToolSet(...))",
                "resolve_async(context)",
                "its async conditions run",
            )
        return self.kernel.waiting()

    def workers(self) -> BlockingPool:
        """Threads for work that blocks outside the actors: executors that
        only offer a blocking ``execute`` (a batch gets one at once, however
        many wait on nested batches) and the approval service of a batch's
        call, asked while the batch commits what settles
        (``scheduling/blocking.py``, ``BatchRun._meanwhile``)."""
        with self._lock:
            if self._workers is None:
                self._workers = BlockingPool("dsh-worker")
            return self._workers

    def on_stop(self, hook: Callable[[], Any], *, last: bool = False) -> Disposer:
        """Run ``hook`` early in :meth:`stop` (after ``stop_signal`` fired;
        hooks run last-registered first): executors close pools, policies
        stop their threads. ``last=True``: after every other hook, so after
        the executors' drains (which answer every batch, and commit what
        they can): for a hook that looks at what the stop left unfinished
        (``policies.otel`` ends the spans of calls still open there); such
        hooks too run last-registered first. Each hook runs on a thread of its own
        (``dsh-stop-hook (<its name>)``, in the context of the ``stop()``
        call that began the stop, even on a thread of the runtime) and is
        waited for until the stop's deadline, then twice
        :attr:`STOP_GRACE` (a hook may give the grace itself to what it
        tells to end at the deadline, as the default executor's drain does
        its batches): one that has not returned then is left running,
        never joined, named in :attr:`abandoned`, and the stop goes on with
        the next hook. A hook that waits for something bounds its wait by
        :meth:`teardown_remaining`. Its exception is logged; a
        ``SystemExit`` or ``KeyboardInterrupt`` is raised by ``stop()``
        once the runtime is stopped (logged, raised by a hook already
        abandoned). The disposer unregisters the hook (it
        takes no lock of the runtime's: it may run in a weakref callback,
        wherever the collector runs, e.g. once an executor is freed)."""
        if type(last) is not bool:
            raise InvalidTypeError(f"on_stop's last must be True or False, got {type(last).__name__}")
        with self._lock:
            key = next(self._hook_keys)
            hooks = self._stop_hooks  # (a stop that begins takes them all: a removal then is moot)
            hooks[key] = (hook, last)

        def remove() -> None:
            hooks.pop(key, None)

        return Disposer(remove)

    def __repr__(self) -> str:
        state = "running" if self.running else ("stopped" if self._stopped else "new")
        return f"<ToolRuntime {state} actors={len(self._group)}>"


class _Bindings:
    """Which executors' ``bind(runtime)`` has run in one runtime, so each
    runs once per executor object. ``bind`` is user code: it runs outside
    the lock. A second scope that sets the same executor meanwhile waits
    for that first ``bind`` (and tries itself if it failed). An executor
    is recorded weakly when it can be: one the application no longer sets
    anywhere and drops (an agent's own, say) is freed, and its record goes
    with it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # By id; the value is a weak reference whose callback drops the
        # record before the object's memory (and so its id) can be reused,
        # or, for an object that takes no weak reference, the object itself
        # (kept alive so its id is never reused while recorded). Invariant:
        # an id is in at most one of the two.
        self._bound: dict[int, object] = {}
        self._binding: dict[int, threading.Event] = {}

    def bind(self, executor: Any, runtime: ToolRuntime) -> None:
        bind = getattr(executor, "bind", None)
        if bind is None:
            return
        if not callable(bind):
            raise RegistrationError(f"{type(executor).__qualname__}.bind must be callable")
        key = id(executor)
        while True:
            with self._lock:
                if key in self._bound:
                    return
                running = self._binding.get(key)
                if running is None:
                    done = self._binding[key] = threading.Event()
                    break
            running.wait()  # another scope actor is running this executor's bind
        bound = False
        try:
            bind(runtime)
            bound = True
        except BaseException as exc:  # noqa: BLE001 - reported to the caller
            raise RegistrationError(
                f"{type(executor).__qualname__}.bind(runtime) failed: {exception_text(exc)}"
            ) from exc
        finally:
            with self._lock:
                del self._binding[key]
                if bound:
                    self._bound[key] = _record(executor, key, self._bound)
            done.set()


def _record(executor: object, key: int, bound: dict[int, object]) -> object:
    """What :class:`_Bindings` keeps for ``executor`` (see its ``_bound``)."""

    def forget(ref: object) -> None:
        # (A weakref callback: it may run on any thread, wherever the
        # collector runs, so it takes no lock. The id cannot be recorded
        # again before this runs: the object's memory is not freed yet.)
        if bound.get(key) is ref:
            bound.pop(key, None)

    try:
        return weakref.ref(executor, forget)
    except TypeError:  # (no weak reference to it: kept alive instead)
        return executor


class _StopHookRun:
    """One run of a stop hook (called on its thread): its exception is
    logged; what it raises that is no ``Exception`` (``SystemExit``,
    ``KeyboardInterrupt``) is kept in :attr:`raised`, for the stop, unless
    the stop has abandoned the hook by then (:meth:`abandon`): then nobody
    will raise it, and it is logged."""

    def __init__(self, hook: Callable[[], Any]) -> None:
        self._hook = hook
        self._lock = threading.Lock()
        self._done = False
        self._abandoned = False
        self.raised: BaseException | None = None

    def __call__(self) -> None:
        raised: BaseException | None = None
        try:
            self._hook()
        except Exception as exc:  # noqa: BLE001 - the application's code: logged, the stop goes on
            log_exception(exc, "a runtime stop hook failed")
        except BaseException as exc:  # noqa: BLE001 - SystemExit, KeyboardInterrupt: raised once the stop is done
            raised = exc
        with self._lock:
            self._done = True
            abandoned = self._abandoned
            if not abandoned:
                self.raised = raised
        if raised is not None and abandoned:
            log_exception(
                raised,
                "a runtime stop hook raised {} after rt.stop() had left it running (named in rt.abandoned); "
                "it is not raised",
                type(raised).__name__,
            )

    def abandon(self) -> bool:
        """Once the stop has waited for the hook: whether it is still
        running, and so abandoned (what it raises from then on is logged)."""
        with self._lock:
            self._abandoned = not self._done
            return self._abandoned


def _running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running on the calling thread, if any."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
