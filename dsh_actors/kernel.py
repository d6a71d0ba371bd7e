"""The kernel: what the layers below the runtime may use of it.

The pipeline, the scheduler (``NativeExecutor``, its executor and call
actors, ``BatchRun``, the ``Dispatcher``, ``start_batch``) and the registry's
actors never see the :class:`~dsh_actors.runtime.ToolRuntime` (no module
below it imports ``dsh_actors.runtime``, even for an annotation;
``tests/test_ownership.py`` checks it). They are given a :class:`Kernel`:
the event bus, the published registry, the stop signal and the stop's
deadlines, the loops, the approval channel, the claims (:class:`Claims`,
defined here), the actor group, the
threads for blocking executors and the one way to lend capacity while
blocked (:meth:`Kernel.waiting`). ``ToolRuntime.start()``
builds it once (:class:`RuntimeKernel`, frozen: nobody below the runtime
replaces a part of it) and hands it down; ``rt.kernel`` is that object.
``NativeExecutor.bind(runtime)`` keeps ``runtime.kernel`` and the
runtime's dispatcher (``runtime.dispatcher``, which owns the capacity the
kernel lends), and registers its stop hook with ``runtime.on_stop``. The
kernel does not carry the dispatcher: the scheduler is above the kernel,
and the kernel's module imports nothing of it when it runs (only its
annotations name ``BlockingPool`` and the layers above it), so the layers
import one way.

:class:`Kernel` is the protocol those layers are typed against, so anything
that has these members serves (a test's fake).
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from concurrent.futures import Future
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, final

from .errors import NEW_RUNTIME, STOPPED, STOPPED_REFUSAL, InvalidStateError, RuntimeStoppedError

if TYPE_CHECKING:  # pragma: no cover
    from .actors import ActorGroup
    from .approvals import ApprovalChannel
    from .events import EventBus
    from .loop import LoopThread
    from .pipeline.flights import LoopWatch
    from .scheduling.blocking import BlockingPool
    from .signals import AbortSignal
    from .visibility import RegistryState

__all__ = ["NEW_RUNTIME", "STOPPED", "STOPPED_REFUSAL", "Claims", "Kernel", "RuntimeKernel", "refuse_blocking_a_loop"]


class Kernel(Protocol):
    """What a layer below the runtime may use of it (see the module doc)."""

    @property
    def events(self) -> EventBus:
        """The runtime's listener bus (``rt.events``)."""
        ...

    @property
    def state(self) -> RegistryState:
        """The published registry: read by everyone, written by the scope
        actors through its public writer methods."""
        ...

    @property
    def stop_signal(self) -> AbortSignal:
        """Fires when ``rt.stop()`` begins."""
        ...

    @property
    def approvals(self) -> ApprovalChannel:
        """Where ``Ask`` decisions go (``rt.approvals``)."""
        ...

    @property
    def loop(self) -> LoopThread:
        """The runtime's own loop thread."""
        ...

    @property
    def bound_loop(self) -> asyncio.AbstractEventLoop | None:
        """The application's loop the runtime is bound to (``ToolRuntime(loop=)``), if any."""
        ...

    @property
    def loop_watch(self) -> LoopWatch:
        """The watch over the loops flights run on."""
        ...

    @property
    def claims(self) -> Claims:
        """The suspensions this runtime resumed and the logged steps its
        batches run now (one batch of a step at a time)."""
        ...

    @property
    def running(self) -> bool:
        """Whether the runtime is started and not stopping."""
        ...

    @property
    def group(self) -> ActorGroup:
        """The runtime's actors (the dispatcher starts its call and executor
        actors in it; ``rt.stop()`` stops them all)."""
        ...

    def stop_remaining(self) -> float:
        """Seconds left until the running ``rt.stop()``'s deadline (0 when
        none is running)."""
        ...

    def teardown_remaining(self) -> float:
        """Seconds left for the running ``rt.stop()``'s teardown (at least
        ``ToolRuntime.STOP_GRACE``)."""
        ...

    def waiting(self, context: contextvars.Context | None = None) -> AbstractContextManager[Any]:
        """Around a wait of the calling thread for work the runtime must do:
        the calling actor lends its capacity for the wait (the one way to
        lend: see ``scheduling.executor.Lent``). ``context``: the work
        waited for runs in it (an async body's flight): the capacity is
        lent on demand, once that work needs some (it starts a batch)."""
        ...

    def workers(self) -> BlockingPool:
        """Threads for executors that only offer a blocking ``execute``."""
        ...


@final
@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class RuntimeKernel:
    """The one :class:`Kernel` of a runtime, built by ``ToolRuntime.start()``.

    The lending, the worker threads and the stop's clock belong to layers
    above (scheduling, the runtime), so the runtime passes them in as
    callables."""

    events: EventBus
    state: RegistryState
    stop_signal: AbortSignal
    approvals: ApprovalChannel
    loop: LoopThread
    bound_loop: asyncio.AbstractEventLoop | None
    loop_watch: LoopWatch
    claims: Claims
    group: ActorGroup
    #: ``lend()``: the context manager :meth:`waiting` returns;
    #: ``lend_on_demand(context)``: the one ``waiting(context)`` returns.
    lend: Callable[[], AbstractContextManager[Any]]
    lend_on_demand: Callable[[contextvars.Context], AbstractContextManager[Any]]
    #: The runtime's lifecycle: whether it is started and not stopping.
    is_running: Callable[[], bool]
    #: The pool of worker threads (made on first use).
    worker_pool: Callable[[], BlockingPool]
    #: ``rt.stop_remaining`` and ``rt.teardown_remaining``.
    stop_clock: Callable[[], float]
    teardown_clock: Callable[[], float]

    @property
    def running(self) -> bool:
        return self.is_running()

    def stop_remaining(self) -> float:
        return self.stop_clock()

    def teardown_remaining(self) -> float:
        return self.teardown_clock()

    def waiting(self, context: contextvars.Context | None = None) -> AbstractContextManager[Any]:
        return self.lend() if context is None else self.lend_on_demand(context)

    def workers(self) -> BlockingPool:
        return self.worker_pool()

    def __repr__(self) -> str:
        return f"<RuntimeKernel generation={self.state.generation} running={self.running}>"


def refuse_blocking_a_loop(rt: Kernel, what: str, instead: str, runs: str) -> None:
    """Refuse a blocking wait for work that needs the loop the calling
    thread runs (``runs``: what runs there): the runtime's own loop, or the
    loop it is bound to; and any wait once the runtime is stopped. The one
    rule of ``rt.tools.execute``, ``resolve``, ``NativeExecutor.execute``
    and the registry's blocking ``ask`` of the same requests."""
    bound = rt.bound_loop
    if bound is not None and bound.is_running():
        try:
            on_bound = asyncio.get_running_loop() is bound
        except RuntimeError:
            on_bound = False
        if on_bound:
            raise InvalidStateError(
                f"{what} would block the event loop this runtime is bound to ({runs} "
                f"there): use await rt.tools.{instead} from that loop"
            )
    if not rt.running:  # (a stopped runtime raises here, before the loop is asked)
        raise RuntimeStoppedError(STOPPED_REFUSAL)
    if rt.loop.in_loop_thread():
        # On the runtime's own loop: what it waits for would need this very
        # loop, which the call would block.
        raise InvalidStateError(
            f"{what} would block the runtime's own event loop ({runs} there, "
            f"so it could never finish): use await rt.tools.{instead} from an async body"
        )


_T = TypeVar("_T")


class BatchFuture(Future[_T]):
    """The future ``submit`` returns (``rt.tools.submit``,
    ``NativeExecutor.submit``): a ``concurrent.futures.Future`` whose
    blocking ``result()`` and ``exception()`` wait as ``rt.tools.execute``
    does: refused on a loop the batch's async tools need
    (:func:`refuse_blocking_a_loop`), and lending the calling actor's slot
    while they wait (``rt.waiting()``), so a tool body or a hook that waits
    on a nested batch this way never holds the budget others need.
    (``concurrent.futures.wait`` and ``as_completed`` wait without it: in a
    body, wait inside ``with rt.waiting():``.)"""

    def __init__(self, rt: Kernel) -> None:
        super().__init__()
        self._kernel = rt

    def result(self, timeout: float | None = None) -> _T:
        if self.done():
            return super().result(timeout)
        with self._waiting():
            return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if self.done():
            return super().exception(timeout)
        with self._waiting():
            return super().exception(timeout)

    def _waiting(self) -> AbstractContextManager[Any]:
        rt = self._kernel
        if rt.running:  # (stopped: the stop answers the batch; waiting for that is fine)
            refuse_blocking_a_loop(rt, "submit(batch).result()", "execute_async(batch)", "its async tools run")
        return rt.waiting()


class Claims:
    """The suspensions a runtime has resumed (``rt`` keeps one): a
    suspension is resumed at most once per runtime, whatever its origin.
    An id is a few dozen bytes; they are kept for the runtime's life."""

    __slots__ = ("_lock", "_taken", "_steps")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._taken: set[str] = set()
        # Logged steps that a batch of this runtime runs now (the step's own
        # batch, a resume of it, a recovery of it): (the session, turn,
        # step, agent id). A second one of the same step is refused.
        self._steps: set[tuple[Any, int, int, str]] = set()

    def claim_step(self, session: Any, turn: int, step: int, agent: str) -> None:
        """Take logged step ``(turn, step)`` of ``agent`` (its id) in
        ``session`` for a batch; raises ``InvalidStateError`` while another
        batch of this runtime runs it."""
        with self._lock:
            key = (session, turn, step, agent)
            if key in self._steps:
                raise InvalidStateError(
                    f'step (turn {turn}, step {step}) of agent "{agent}" in this session is being run, resumed or '
                    "recovered already: wait for that batch to finish (a call could otherwise run twice)"
                )
            self._steps.add(key)

    def release_step(self, session: Any, turn: int, step: int, agent: str) -> None:
        with self._lock:
            self._steps.discard((session, turn, step, agent))

    def claim(self, suspension_id: str) -> None:
        """Take ``suspension_id``; raises ``InvalidStateError`` if it was taken."""
        with self._lock:
            if suspension_id in self._taken:
                raise InvalidStateError(already_resumed(suspension_id))
            self._taken.add(suspension_id)

    def release(self, suspension_id: str) -> None:
        """Give back a claim whose resume could not start (nothing ran)."""
        with self._lock:
            self._taken.discard(suspension_id)


def already_resumed(suspension_id: str) -> str:
    return (
        f"suspension {suspension_id} was resumed already in this runtime: a suspension is resumed once "
        "(resume the suspension the last resume returned, if it suspended again)"
    )
