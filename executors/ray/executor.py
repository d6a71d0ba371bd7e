"""RayExecutor: the native executor, with chosen tool bodies run on Ray.

Scheduling (the cap, exclusive barriers, model-order prepare and
finalize), policies, ``tools/execute`` wrappers, output validation, render
and the session log all stay in the driver, exactly as under
:class:`~dsh_actors.NativeExecutor`: this executor only replaces the body
of a tool placed on Ray (:meth:`RayExecutor.tool_body`) with an
``async def`` that submits a Ray task (or calls a method of a Ray actor)
and awaits its ObjectRef on the batch's event loop (the caller's under
``execute_async``, else the runtime's). No thread waits for a remote call;
the ref's future settles it.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import pickle
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Final

import ray
from ray import cloudpickle
from ray import exceptions as rex

from dsh_actors import (
    AbortError,
    DshError,
    InvalidTypeError,
    InvalidValueError,
    NativeExecutor,
    ToolOutputError,
    dumps,
    loads,
)

from . import connection
from .errors import (
    RayExecutionError,
    RayObjectLostError,
    RayUnavailableError,
    RayWorkerDiedError,
    RemoteToolError,
)
from .options import ActorMethod, RayActor, RayTask, Remote, check_amount, check_retries, placement
from .worker import BAD_OUTPUT, CANCELLED, ERROR, OK, ToolHost, contexts_from_json, task_entry

__all__ = ["RayExecutor"]

_DIED = (
    rex.WorkerCrashedError,
    rex.RayActorError,  # ActorDiedError, ActorUnavailableError
    rex.NodeDiedError,
    rex.LocalRayletDiedError,
    rex.OutOfMemoryError,
)
_LOST = (rex.ObjectLostError, rex.ObjectStoreFullError)

_remote_classes: dict[str, Any] = {}
_remote_classes_lock = threading.Lock()


def _remote_class(cls: type) -> Any:
    with _remote_classes_lock:
        made = _remote_classes.get(cls.__name__)
        if made is None:
            made = _remote_classes[cls.__name__] = ray.remote(cls)
        return made


def _ms(value: Any, name: str, *, allow_none: bool = False) -> float | None:
    if value is None and allow_none:
        return None
    if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
        raise InvalidValueError(f"{name} must be a finite number of milliseconds >= 0, got {value!r}")
    return float(value)


def _first_line(text: str) -> str:
    for line in _ANSI.sub("", text).splitlines():
        line = line.strip()
        if line:
            return line
    return ""


def _pickling_problem(exc: BaseException) -> str | None:
    """What did not pickle, when ``exc`` (a failed submission) is Ray's
    serializer refusing the body or an actor's arguments: the line that
    names the object (Ray puts it after a first line that ends in a
    colon); None for any other failure."""
    if not isinstance(exc, (TypeError, pickle.PicklingError)):
        return None
    text = _ANSI.sub("", str(exc))  # (Ray's serialization report is colored)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines or not any("pickle" in line or "serializ" in line for line in lines):
        return None
    for line in lines:
        at = line.find("cannot pickle")
        if at >= 0:
            return line[at:]
    return lines[-1].rstrip(":")


_ANSI: Final = re.compile(r"\x1b\[[0-9;]*m")


class _InFlight:
    __slots__ = ("ref", "actor")

    def __init__(self, ref: Any, actor: bool) -> None:
        self.ref = ref
        self.actor = actor


class RayExecutor(NativeExecutor):
    """An executor that runs chosen tool bodies on a Ray cluster.

    ``address`` joins an existing cluster (``"auto"``, ``"host:port"``,
    ``"ray://..."``); ``None`` starts a local one (no dashboard,
    ``local_cpus`` CPUs, a small object store), shut down on :meth:`close`
    by the last executor of this process that used it. ``rt.stop()``
    closes an executor installed in that runtime (``set_executor``). If
    the application has already called ``ray.init``, that connection is
    used and never shut down here.

    Which bodies run on Ray: ``remote`` (a predicate over definitions, a
    collection of tool names, or a mapping of names to placements; see
    :func:`executors.ray.options.placement`), else each tool's
    ``meta["ray"]``. Everything else runs locally, as native.

    Keyword options:

    * ``num_cpus`` (default 1): CPUs a Ray task reserves per call, unless
      the tool's placement says otherwise;
    * ``actors``: named :class:`RayActor` s that ``meta["ray"]["actor"]``
      refers to;
    * ``max_parallel_tool_calls``: the batch cap, as native;
    * ``cancel_grace_ms`` (default 1000): after an abort, how long a body
      that has started gets to end by itself (it sees ``ctx.signal``)
      before ``ray.cancel`` interrupts it (``KeyboardInterrupt`` in the
      body, once it runs Python code again: not while it is blocked in a C
      call); a call that has not started is cancelled at once, and so is
      the task of an ``async def`` body on its worker;
    * ``force_cancel_ms`` (default 5000, ``None``: never): how long an
      interrupted task then has before ``ray.cancel(force=True)`` kills its
      worker (tasks only: Ray cannot force-cancel an actor's method);
    * ``max_retries`` (default 0): Ray's retries of a task whose worker died;
    * ``local_cpus``, ``object_store_memory`` and ``init_options`` (more
      ``ray.init`` keywords): for the local cluster / the connection this
      executor makes (a local cluster keeps Ray from ending the driver
      60 s after its GCS is gone: ``gcs_rpc_server_reconnect_timeout_s`` is
      :data:`connection.RECONNECT_TIMEOUT_S` unless ``init_options``'
      ``_system_config`` says otherwise).
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        remote: Remote = None,
        num_cpus: float = 1,
        actors: Mapping[str, RayActor] | None = None,
        max_parallel_tool_calls: int = 10,
        cancel_grace_ms: float = 1000,
        force_cancel_ms: float | None = 5000,
        max_retries: int = 0,
        local_cpus: int | None = None,
        object_store_memory: int | None = 100 * 1024 * 1024,
        init_options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(max_parallel_tool_calls)
        if address is not None and (type(address) is not str or not address):
            raise InvalidValueError("address must be a non-empty str or None")
        if isinstance(remote, str):
            raise InvalidTypeError("remote= takes a predicate, a collection of tool names or a mapping, not a str")
        if remote is not None and not (callable(remote) or isinstance(remote, (Mapping, set, frozenset, list, tuple))):
            raise InvalidTypeError(
                f"remote= must be a predicate, a collection of names or a mapping, got {type(remote).__qualname__}"
            )
        check_amount(num_cpus, "num_cpus")
        check_retries(max_retries, "max_retries")
        if actors is not None and not isinstance(actors, Mapping):
            raise InvalidTypeError(f"actors= maps names (str) to RayActor objects, got {type(actors).__qualname__}")
        if init_options is not None and not isinstance(init_options, Mapping):
            raise InvalidTypeError(
                f"init_options= must be a mapping of ray.init keywords, got {type(init_options).__qualname__}"
            )
        actors = dict(actors or {})
        for key, actor in actors.items():
            if type(key) is not str or not isinstance(actor, RayActor):
                raise InvalidTypeError("actors= maps names (str) to RayActor objects")
        self.address = address
        self.remote = remote
        self.num_cpus = num_cpus
        self.actors = actors
        self.max_retries = max_retries
        self.cancel_grace_ms = _ms(cancel_grace_ms, "cancel_grace_ms")
        self.force_cancel_ms = _ms(force_cancel_ms, "force_cancel_ms", allow_none=True)
        options: dict[str, Any] = {}
        if address is None:
            options["include_dashboard"] = False
            if local_cpus is not None:
                options["num_cpus"] = local_cpus
            if object_store_memory is not None:
                options["object_store_memory"] = object_store_memory
        # A library stays quiet: workers' output goes to Ray's log files and
        # Ray's own logger says only warnings, unless the application asks
        # (init_options={"log_to_driver": True, "logging_level": "INFO"}).
        options["log_to_driver"] = False
        options["logging_level"] = "WARNING"
        options.update(init_options or {})
        if address is None:
            # Ray would end the whole driver process 60 s after its local
            # cluster's GCS is gone; the calls fail here (connection.watch).
            system = options.get("_system_config")
            if system is None or isinstance(system, Mapping):
                options["_system_config"] = {
                    "gcs_rpc_server_reconnect_timeout_s": connection.RECONNECT_TIMEOUT_S,
                    **(system or {}),
                }
        self._id = uuid.uuid4().hex[:12]
        self._seq = itertools.count()
        self._state_lock = threading.Lock()
        self._settled = threading.Condition(self._state_lock)
        self._inflight: dict[str, _InFlight] = {}
        self._tasks: dict[tuple[Any, ...], tuple[Any, Any]] = {}
        self._handles: dict[int, tuple[RayActor, Any]] = {}
        self._stopping = False
        self._ray_closed = False
        self._owned, self._local = connection.acquire(address, options)
        self._connection = connection.token()  # the connection this executor's handles belong to
        try:
            self._board = connection.board()
        except BaseException:
            connection.release()
            raise

    def __repr__(self) -> str:
        where = self.address or "local"
        return f"<RayExecutor {where} max_parallel_tool_calls={self.max_parallel_tool_calls}>"

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._ray_closed

    @property
    def owns_connection(self) -> bool:
        """Whether this process's executors made the Ray connection: the
        last one to close calls ``ray.shutdown()`` (False when the
        application had called ``ray.init`` itself)."""
        return self._owned

    @property
    def started_cluster(self) -> bool:
        """Whether this process's executors started the (local) cluster
        they use, so that the last ``close()`` stops it."""
        return self._local

    # -- the hook --------------------------------------------------------

    def tool_body(self, definition: Any) -> Any:
        """The replacement body of a tool placed on Ray (an ``async def``),
        or ``None``: it runs locally."""
        try:
            where = placement(definition, self.remote, self.actors)
        except Exception as exc:  # noqa: BLE001 - a bad placement fails the call, clearly
            if isinstance(exc, DshError):
                error = RayExecutionError("placement", exc.message)
            else:  # the application's remote= raised: say so (a KeyError's text alone is only its key)
                error = RayExecutionError(
                    "placement",
                    f'tool "{definition.name}": remote= raised {type(exc).__name__}: {_first_line(_safe_text(exc))}',
                )

            def misplaced(args: Any, ctx: Any) -> Any:
                raise error

            return misplaced
        if where is None:
            return None
        if isinstance(where, ActorMethod):
            actor = where.actor
            method = where.name or definition.name

            def submit_actor(payload: bytes, info: Any) -> Any:
                return self._handle(actor).call.remote(method, payload, info, self._board)

            return self._body(definition, submit_actor, actor=actor)
        try:
            function = self._task(definition, where)
        except Exception as exc:  # noqa: BLE001 - options Ray refuses fail the call, not the batch
            refused = RayExecutionError(
                "placement", f'tool "{definition.name}": Ray refused the task options: {_first_line(str(exc))}'
            )

            def refused_task(args: Any, ctx: Any) -> Any:
                raise refused

            return refused_task

        def submit_task(payload: bytes, info: Any) -> Any:
            return function.remote(payload, info, self._board)

        return self._body(definition, submit_task, actor=None)

    def _task(self, definition: Any, spec: RayTask) -> Any:
        key = (id(definition), spec.key())
        with self._state_lock:
            hit = self._tasks.get(key)
            if hit is not None and hit[0] is definition:
                return hit[1]
        entry = task_entry(definition.execute, definition.name)
        function = ray.remote(**spec.ray_options(self.num_cpus, self.max_retries))(entry)
        with self._state_lock:
            if len(self._tasks) >= 4096:
                self._tasks.clear()
            self._tasks[key] = (definition, function)
        return function

    def _handle(self, actor: RayActor) -> Any:
        with actor._lock:
            with self._state_lock:
                hit = self._handles.get(id(actor))
            if hit is not None and hit[0] is actor:
                return hit[1]
            options: dict[str, Any] = dict(actor.options)
            options.setdefault("num_cpus", actor.num_cpus)
            options["max_concurrency"] = actor.max_concurrency
            if actor.name is not None:
                options["name"] = actor.name
                options["get_if_exists"] = True
                if actor.namespace is not None:
                    options["namespace"] = actor.namespace
            factory = cloudpickle.dumps((actor.cls, actor.args, actor.kwargs))  # type: ignore[no-untyped-call]
            try:
                made = _remote_class(ToolHost).options(**options)
            except (TypeError, ValueError) as exc:
                # The RayActor's options (checked by Ray): the call's
                # placement is wrong, the cluster did not refuse anything.
                raise RayExecutionError(
                    "placement", f"{_label(actor)}: Ray refused the actor options: {_first_line(str(exc))}"
                ) from None
            handle = made.remote(factory)
            with self._state_lock:
                self._handles[id(actor)] = (actor, handle)
            return handle

    def _body(self, definition: Any, submit: Callable[[bytes, Any], Any], *, actor: RayActor | None) -> Any:
        name = definition.name

        async def ray_body(args: Any, ctx: Any) -> Any:
            return await self._run(name, submit, actor, args, ctx)

        ray_body.__qualname__ = f"RayExecutor.tool_body({name!r})"
        return ray_body

    # -- one call ----------------------------------------------------------

    async def _run(
        self, name: str, submit: Callable[[bytes, Any], Any], actor: RayActor | None, args: Any, ctx: Any
    ) -> Any:
        signal = ctx.signal
        if signal.aborted:
            raise AbortError(before_dispatch=True)
        key = f"{self._id}:{next(self._seq)}"
        agent = ctx.agent
        info = (
            key,
            ctx.call_id,
            ctx.root_call_id,
            ctx.name,
            None if agent is None else agent.id,
            None if agent is None else agent.path,
        )
        payload = dumps(args)
        if self._ray_closed:
            raise RayUnavailableError(_CLOSED)
        if self._lost():
            raise RayUnavailableError(_CONNECTION_GONE)
        try:
            ref = submit(payload, info)
        except DshError:
            raise  # ours, precise already (a RayActor's options Ray refused)
        except Exception as exc:  # noqa: BLE001 - the cluster refused the call: it never started
            unpicklable = _pickling_problem(exc)
            if unpicklable is not None:
                # The tool's own doing, not the cluster's: what did not pickle.
                raise RayExecutionError(
                    "cannot send the call",
                    f"{unpicklable} (a remote tool's body, what it closes over, and a RayActor's constructor "
                    'arguments must pickle: see "What must be picklable" in executors/ray/README.md)',
                    ray_error=type(exc).__name__,
                ) from None
            raise RayUnavailableError(
                f"the call could not be submitted: {type(exc).__name__}: {_first_line(str(exc))}",
                ray_error=type(exc).__name__,
            ) from None
        with self._state_lock:
            entry = self._inflight[key] = _InFlight(ref, actor is not None)
            stopping = self._stopping
        if stopping:  # stop() or close() began while it was being submitted
            self._cancel(ref, key, "the runtime is stopping")
        future = asyncio.wrap_future(ref.future())
        try:
            try:
                envelope = await self._outcome(future)
            except asyncio.CancelledError:
                return self._apply(name, await self._abort(key, entry, future, signal, absorb=0), ctx)
            except rex.RayError as exc:
                if self._lost():
                    raise RayUnavailableError(_LOST_WHILE_RUNNING) from None
                cancelled = isinstance(exc, rex.TaskCancelledError) or isinstance(
                    getattr(exc, "cause", None), rex.TaskCancelledError
                )
                if cancelled and (self._stopping or signal.aborted):
                    # Our own cancel (rt.stop(), close()) settled the ref
                    # before the body's task was cancelled (that cancel is
                    # still on its way: absorb it): an abort.
                    return self._apply(name, await self._abort(key, entry, future, signal, absorb=1), ctx)
                raise _translate(exc, actor) from None
            return self._apply(name, envelope, ctx)
        except AbortError:
            if self.closed and not signal.aborted:  # (read again: close() may have run meanwhile)
                # close() cancelled it, not the caller nor rt.stop(): an
                # abort would read as the caller's doing.
                raise RayUnavailableError(_CLOSED_WHILE_RUNNING) from None
            raise
        finally:
            with self._state_lock:
                self._inflight.pop(key, None)
                self._settled.notify_all()

    def _lost(self) -> bool:
        """Whether the Ray connection this executor joined is gone (see
        :mod:`connection`): none of its handles may be used again."""
        return not connection.alive(self._connection)

    async def _outcome(self, future: Any) -> Any:
        """The call's envelope (or its Ray error), watching the connection
        meanwhile (``ray.shutdown()``, and its GCS through
        :func:`connection.watch`): a connection lost under a submitted call
        (running or queued by Ray) fails it with ``RayUnavailableError``
        instead of waiting for a ref that will never settle. Never cancels
        ``future`` (``asyncio.wait`` does not)."""
        while True:
            done, _ = await asyncio.wait({future}, timeout=_LOST_POLL_S)
            if done:
                return future.result()
            connection.watch(self._connection)
            if self._lost():
                raise RayUnavailableError(_LOST_WHILE_RUNNING)

    async def _abort(self, key: str, entry: _InFlight, future: Any, signal: Any, *, absorb: int) -> Any:
        """The driver aborted a submitted call: tell its signal, give a
        started body ``cancel_grace_ms`` to end, then ``ray.cancel`` (and
        ``force_cancel_ms`` later, for a task, ``force=True``). Returns the
        call's envelope, or raises the abort (``ABORTED_BEFORE_DISPATCH``
        when the body never started).

        It runs shielded: ``absorb`` more cancellations of the body's task
        are expected (the runtime's own, still on its way) and ignored; one
        more means the runtime's loop is going away, and it stops waiting."""
        inner = asyncio.ensure_future(self._settle_aborted(key, entry, future, signal))
        try:
            while True:
                try:
                    return await asyncio.shield(inner)
                except asyncio.CancelledError:
                    if inner.done() and not inner.cancelled():
                        return inner.result()
                    if absorb > 0:
                        absorb -= 1
                        continue
                    self._ray_cancel(entry.ref, force=not entry.actor)
                    inner.cancel()
                    raise AbortError(before_dispatch=False) from None
        finally:
            self._forget(key)

    async def _settle_aborted(self, key: str, entry: _InFlight, future: Any, signal: Any) -> Any:
        reason = signal.reason
        text = None if reason is None else _safe_text(reason)
        ref = entry.ref
        started: bool | None
        if self._lost():
            raise RayUnavailableError(_LOST_WHILE_RUNNING)
        try:
            started = bool(await asyncio.wrap_future(self._board.abort.remote(key, text).future()))
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - the board (or Ray) is gone: the outcome decides
            started = None
        if started is False:
            # The board now refuses its start: its body never runs. Settle
            # at once; Ray drops the task when it gets to it (a call queued
            # on a busy actor would otherwise wait for the running one).
            self._ray_cancel(ref, force=False)
            future.add_done_callback(_retrieved)  # (its TaskCancelledError is expected: not "never retrieved")
            raise AbortError(before_dispatch=True)
        grace = self.cancel_grace_ms
        rt = self._rt
        stopping = self._stopping or (rt is not None and rt.stop_signal.aborted)
        if started and not stopping and grace:
            await asyncio.wait({future}, timeout=grace / 1000.0)
        forced = False
        if not future.done():
            self._ray_cancel(ref, force=False)
            force = self.force_cancel_ms
            if not entry.actor and force is not None:
                await asyncio.wait({future}, timeout=force / 1000.0)
                if not future.done():
                    started = True  # interrupted and still running: it had started
                    forced = True
                    self._ray_cancel(ref, force=True)
        try:
            return await self._outcome(future)
        except rex.RayTaskError as exc:
            if (
                isinstance(exc, rex.TaskCancelledError)
                or isinstance(exc.cause, rex.TaskCancelledError)
                or (forced and isinstance(exc.cause, _DIED))
            ):
                # Interrupted on the worker, outside the body's wrapper
                # (e.g. while it reported its start), or its worker killed by
                # the force cancel (Ray may report that as the worker's death).
                raise AbortError(before_dispatch=started is False) from None
            raise _translate(exc) from None
        except rex.RayError:
            # Cancelled before it ran (or killed by the force cancel).
            raise AbortError(before_dispatch=not started) from None

    def _apply(self, name: str, envelope: Any, ctx: Any) -> Any:
        """A worker's envelope: its value (deferred contexts and
        ``conclude_turn`` applied to the driver's ``ctx``), or the error."""
        try:
            kind = envelope[0]
            if kind == OK:
                _, value_json, contexts, concludes = envelope
                value = loads(value_json)
            elif kind == ERROR:
                _, pickled, class_name, message, remote_tb, contexts, concludes = envelope
            elif kind == BAD_OUTPUT:
                _, problem, contexts, concludes = envelope
            elif kind == CANCELLED:
                _, entered, contexts, concludes = envelope
            else:
                raise ValueError(f"unknown envelope kind {kind!r}")
            deferred = contexts_from_json(contexts)
        except Exception as exc:  # noqa: BLE001 - a worker of another version, a corrupt reply
            raise RayExecutionError("protocol", f"the worker's reply could not be read: {exc}") from None
        for context in deferred:
            ctx.defer_context(context)
        if kind == OK:
            if concludes:
                ctx.conclude_turn()
            return value
        if kind == BAD_OUTPUT:
            raise ToolOutputError(name, [problem])
        if kind == CANCELLED:
            if not (ctx.signal.aborted or self._stopping):
                # Interrupted, but not by us: reported as an abort, the call
                # would read as the caller's doing.
                raise RayExecutionError(
                    "cancelled",
                    "the body was interrupted (KeyboardInterrupt) but this runtime did not abort the call: a "
                    "ray.cancel from outside the runtime, or the body raised KeyboardInterrupt itself",
                )
            raise AbortError(before_dispatch=not entered)
        error: BaseException | None = None
        if pickled is not None:
            try:
                error = cloudpickle.loads(pickled)
            except Exception:  # noqa: BLE001 - its class does not load here
                error = None
        if not isinstance(error, DshError):
            error = RemoteToolError(class_name, message, remote_tb)
        raise error

    # -- cancellation and lifecycle ---------------------------------------

    def _ray_cancel(self, ref: Any, *, force: bool) -> None:
        if self._lost():
            return  # its handles must not be used (and the call fails anyway)
        try:
            ray.cancel(ref, force=force)
        except Exception:  # noqa: BLE001 - finished meanwhile, or Ray is gone
            pass

    def _cancel(self, ref: Any, key: str, reason: str) -> None:
        if self._lost():
            return
        try:
            self._board.abort.remote(key, reason)
        except Exception:  # noqa: BLE001
            pass
        self._ray_cancel(ref, force=False)

    def _cancel_all(self, inflight: list[tuple[str, _InFlight]], reason: str, limit: float = 5.0) -> None:
        """Abort every call of ``inflight`` on the board first (and, off the
        loop, wait, at most ``limit`` seconds, for the board to have them),
        then cancel their tasks: a queued call that a cancelled one makes
        room for then finds itself aborted when it asks to start, and never
        enters its body."""
        if not inflight or self._lost():
            return
        told = []
        for key, _ in inflight:
            try:
                told.append(self._board.abort.remote(key, reason))
            except Exception:  # noqa: BLE001 - the board (or Ray) is gone
                pass
        if told and not self._on_loop():
            try:
                ray.wait(told, num_returns=len(told), timeout=limit)
            except Exception:  # noqa: BLE001
                pass
        for _, entry in inflight:
            self._ray_cancel(entry.ref, force=False)

    def _forget(self, key: str) -> None:
        if self._lost():
            return
        try:
            self._board.forget.remote(key)
        except Exception:  # noqa: BLE001
            pass

    def bind(self, runtime: Any) -> None:
        """Attach to ``runtime`` (``set_executor`` calls it): ``rt.stop()``
        then cancels the remote calls in flight (:meth:`_on_runtime_stop`)
        and, once this executor's batches have drained, runs :meth:`close`
        (:meth:`_shutdown`)."""
        super().bind(runtime)
        runtime.on_stop(self._on_runtime_stop)

    def _shutdown(self) -> None:
        """``rt.stop()``: native's drain of this executor's batches, then
        :meth:`close` within the stop's deadline. An executor serves one
        runtime, so a stopped runtime's could run nothing again; closing it
        releases the connection (the last executor of the process shuts
        down one they made, stopping a local cluster they started; never
        the application's own ``ray.init``)."""
        rt = self._rt
        assert rt is not None  # (bound: its stop runs this)
        try:
            super()._shutdown()
        finally:
            self.close(timeout=rt.teardown_remaining())

    def _on_runtime_stop(self) -> None:
        """``rt.stop()``: cancel every remote call in flight at once (no
        grace for cooperative bodies), and give them a moment to settle
        (``force_cancel_ms`` plus a second, at most, and never past the
        stop's deadline) so that their batches can still reply before the
        runtime's actors stop."""
        rt = self._rt
        with self._state_lock:
            self._stopping = True
            inflight = list(self._inflight.items())
        remaining = rt.teardown_remaining() if rt is not None else 5.0
        end = time.monotonic() + remaining
        self._cancel_all(inflight, "the runtime is stopping", min(5.0, remaining))
        if inflight and not self._on_loop():
            limit = 1.0 + (self.force_cancel_ms or 0.0) / 1000.0
            with self._state_lock:
                self._settled.wait_for(lambda: not self._inflight, max(0.0, min(limit, end - time.monotonic())))

    def _on_loop(self) -> bool:
        rt = self._rt
        try:
            return rt is not None and rt.loop.in_loop_thread()
        except Exception:  # noqa: BLE001 - a runtime that never started
            return False

    def in_flight(self) -> int:
        """How many remote calls are submitted and not yet settled."""
        with self._state_lock:
            return len(self._inflight)

    def close(self, timeout: float = 10.0) -> None:
        """Cancel what is still in flight (waiting up to ``timeout`` seconds
        for it to settle), drop this executor's handles of tool actors
        (an unnamed one then ends; a named one lives on for whoever else
        uses it), and release the connection: the last executor of the
        process kills the signal board and closes a cluster it started.
        Idempotent."""
        with self._state_lock:
            if self._ray_closed:
                return
            self._ray_closed = True
            self._stopping = True
            inflight = list(self._inflight.items())
        self._cancel_all(inflight, "the executor is closing")
        if not self._on_loop():
            with self._state_lock:
                self._settled.wait_for(lambda: not self._inflight, timeout)
        with self._state_lock:
            self._handles.clear()
            self._tasks.clear()
        connection.release()


_LOST_POLL_S = 0.25
"""Seconds between two looks at the connection while a call is in flight."""
_CLOSED = "the RayExecutor is closed: make a new RayExecutor (and set it) to run these tools on Ray again"
_CONNECTION_GONE = (
    "the Ray connection this executor joined is gone (ray.shutdown() was called, or the cluster was lost): "
    "make a new RayExecutor to use Ray again (once a connection whose cluster was lost is shut down: "
    'executors/ray/README.md, "The cluster connection")'
)
_CLOSED_WHILE_RUNNING = (
    "the RayExecutor was closed while the call was on the cluster: its Ray call was cancelled (its body may have "
    "run in part)"
)
_LOST_WHILE_RUNNING = (
    "the Ray connection was lost while the call was on the cluster (ray.shutdown() was called, or the "
    "cluster went away): its body may have run in part"
)


def _retrieved(future: Any) -> None:
    if not future.cancelled():
        future.exception()


def _safe_text(value: object) -> str:
    try:
        return str(value)
    except Exception:  # noqa: BLE001
        return "<unprintable reason>"


def _label(actor: RayActor) -> str:
    """How a message names a RayActor: its name and class (never a repr)."""
    cls = getattr(actor.cls, "__qualname__", "?")
    return f'the RayActor "{actor.name}" ({cls})' if actor.name is not None else f"the RayActor of {cls}"


def _translate(exc: BaseException, actor: RayActor | None = None) -> DshError:
    """A Ray exception from a call's ref (not after an abort) as the
    call's error; ``actor``: the RayActor the call was sent to."""
    name = type(exc).__name__
    if isinstance(exc, rex.RayTaskError):
        cause = exc.cause
        if isinstance(cause, _DIED):
            return RayWorkerDiedError(_first_line(str(cause)), ray_error=type(cause).__name__)
        if isinstance(cause, rex.TaskCancelledError):
            return RayExecutionError("cancelled", "the Ray task was cancelled outside this runtime", ray_error=name)
        cause_name = type(cause).__name__ if cause is not None else name
        text = _safe_text(cause if cause is not None else exc)
        if "Traceback (most recent call last)" in text:
            # Ray's own message, then the traceback: its last line is the cause.
            lines = [line.strip() for line in text.splitlines() if line.strip()]
            detail = lines[-1] if lines else cause_name
        else:
            detail = f"{cause_name}: {_first_line(text)}"
        return RayExecutionError(
            "task failed",
            f"the call's Ray task could not run its body ({detail}); is the tool's module "
            "importable on the workers? (executors/ray/README.md)",
            ray_error=cause_name,
        )
    if isinstance(exc, rex.RayActorError) and getattr(exc, "actor_init_failed", False):
        # Its constructor raised (Ray's message: its own line, then the
        # constructor's traceback, whose last line is the cause).
        lines = [line.strip() for line in _ANSI.sub("", str(exc)).splitlines() if line.strip()]
        cause = lines[-1] if len(lines) > 1 else "an error"
        return RayExecutionError(
            "actor failed",
            f"the RayActor's constructor raised {cause}; the actor is dead and every call on it fails: fix the "
            "class or its arguments, then make a new RayExecutor",
            ray_error=name,
        )
    if isinstance(exc, rex.ActorDiedError) and actor is not None:
        # Dead for good (Ray restarts an actor only within its max_restarts):
        # this call and every later one on it fail the same way.
        return RayWorkerDiedError(
            f"{_first_line(str(exc)).rstrip('.')}; {_label(actor)} is dead and every later call on it fails: give it "
            'options={"max_restarts": -1} for Ray to restart it (its state then starts afresh), or make a new '
            "RayExecutor",
            ray_error=name,
        )
    if isinstance(exc, _DIED):
        return RayWorkerDiedError(_first_line(str(exc)), ray_error=name)
    if isinstance(exc, _LOST):
        return RayObjectLostError(_first_line(str(exc)), ray_error=name)
    if isinstance(exc, rex.TaskCancelledError):
        return RayExecutionError("cancelled", "the Ray task was cancelled outside this runtime", ray_error=name)
    return RayExecutionError("error", f"{name}: {_first_line(str(exc))}", ray_error=name)
