"""Async tool bodies in flight on an event loop, and the watch over those loops.

A :class:`Flight` is one coroutine (an ``async def`` body, an async
condition or listener, an MCP request) run as a task on one event loop:
the batch's loop (the one that awaited ``execute_async``, or the runtime's
bound loop), the runtime's own loop thread, or an MCP session's loop. It
is the one way the runtime runs a coroutine on another loop: a batch's
async body reports its end in a message; a thread that needs the value
waits with ``body.await_on_loop``; a coroutine on another loop awaits it
with :func:`await_flight` (the MCP mount); the tool-set actor takes its
conditions' ends as messages. It is started from any thread with
``call_soon_threadsafe`` and reports its end exactly once, through the
``on_end(value, error)`` callback it was given, on whichever thread ended
it (the loop's thread, or the watch's when the loop went away). It never
blocks the loop: the callback of a batch's body puts one message in the
batch's inbox; a thread that must wait for the value (a ``tools/execute``
wrapper around an async body) waits on its own future.

Cancellation: when the flight's signal fires, its *task* is cancelled (so
the body's ``await`` raises ``CancelledError``), and the flight still ends
only when the task has ended: a body that catches the cancellation to
clean up is never abandoned. A task that ends cancelled because of the
signal ends with :class:`AbortError` (``ABORTED`` once its body had
started; ``ABORTED_BEFORE_DISPATCH`` when it was cancelled before its first
step, and then its coroutine is closed, never left un-awaited).

The :class:`LoopWatch` (one thread per runtime, started with the first
flight) looks at the loops that have flights every ``PERIOD`` seconds:

* a loop that is closed, or no longer running, ends its flights with a
  clear :class:`LoopGoneError` (the batch never hangs on a loop that is
  gone);
* a loop that has not run a heartbeat callback for ``BLOCK_WARNING``
  seconds while one of its flights' tasks is the one running logs one
  warning naming that tool: a body that blocks the loop is the
  application's bug, and it stalls everything else on that loop;
* a loop that has not run a heartbeat for ``BLOCK_WARNING`` seconds while
  a flight waits for its first step there logs one warning naming that
  tool: something else blocks the loop (typically a blocking
  ``rt.tools.execute()`` on that loop's own thread), and the flight will
  start only once it returns.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any, ClassVar

from loguru import logger

from ..errors import AbortError, InvalidStateError, safe_str
from ..signals import AbortSignal

#: The call id of a tool-set condition's flight (it has no call).
WHEN = "when"

__all__ = ["WHEN", "Flight", "LoopGoneError", "LoopWatch", "Outbox", "Wave", "await_flight", "await_settled"]

#: ``on_end(value, error)``: exactly one of them is meaningful (error None: value).
OnEnd = Callable[[Any, BaseException | None], None]

# How a flight onto a loop halted by the stop is told it cannot run there.
_HALTED = "is blocked: rt.stop() was called on its thread"
_WAITED_ON = (
    "is blocked: its own thread waits in a blocking rt.tools.execute() (or resume, recover, dispatch), so the "
    "call could never start; on that loop, use await rt.tools.execute_async()"
)
# How a flight whose task ended cancelled, not by its signal, ends (see
# _cancelled_by_others): something cancelled the task, or its coroutine
# raised CancelledError itself (or let through that of something it
# awaited); one message names both.
_CANCELLED_BY_OTHERS = (
    "{} ended with CancelledError, not cancelled by the runtime: it raised CancelledError itself (or "
    "awaited something that was cancelled), or something else cancelled its task (its event loop shutting "
    "down, or the application cancelling its tasks)"
)


def _cancelled_by_others(label: str, raised: BaseException | None) -> asyncio.CancelledError:
    """The error a flight ends with when its task ended cancelled and its
    signal had not fired: says so, with what the coroutine raised (its
    text, and the exception itself as ``__cause__``, so the failure keeps it)."""
    message = _CANCELLED_BY_OTHERS.format(label)
    said = "" if raised is None else safe_str(raised)
    if said:
        message = f"{message}; the CancelledError says: {said}"
    error = asyncio.CancelledError(message)
    error.__cause__ = raised
    return error


class LoopGoneError(RuntimeError):
    """The loop a flight runs on closed or stopped before the flight ended
    (or was not running when it was launched)."""


class _Escaped:
    """SystemExit/KeyboardInterrupt from a body, carried out of the task
    (escaping a task they would stop the loop)."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class Flight:
    """One coroutine run as a task on one loop (see the module docstring).

    State: ``task``, ``started`` and ``cancelled`` are written on the
    loop's thread only (the task is cancelled at most once);
    ``ended`` is written once, under the watch's lock (whoever ends the
    flight first wins: the task's last step, or its done callback when that
    step cannot be sure how the task ends (see :meth:`_ends_here`), or the
    watch when the loop went away); ``watch`` and ``wave`` are set once, at
    launch, under the watch's lock. Invariants: ``on_end`` is called exactly
    once, after which the flight is no longer in its watch nor in its wave;
    when ``signal`` fires, ``ahead`` (if any) runs before the cancel is sent
    to the loop.
    """

    __slots__ = (
        "coro",
        "signal",
        "loop",
        "name",
        "call_id",
        "on_end",
        "task",
        "started",
        "by_signal",
        "ended",
        "wave",
        "watch",
        "context",
        "cancelled",
        "ahead",
        "cancel_first",
        "label",
        "raised",
    )

    def __init__(
        self,
        coro: Any,
        signal: AbortSignal,
        loop: asyncio.AbstractEventLoop,
        name: str,
        call_id: str,
        on_end: OnEnd,
        ahead: Callable[[AbortSignal], None] | None = None,
        what: str | None = None,
    ) -> None:
        self.coro = coro
        # How messages name what runs (an async tool body unless told).
        self.label = f'async tool "{name}"' if what is None else what
        self.signal = signal
        # Run on the aborting thread when `signal` fires, before the cancel
        # is sent to the loop (a body's signal fused from `signal`, aborted
        # before the body can see its task cancelled).
        self.ahead = ahead
        self.loop = loop
        self.name = name
        self.call_id = call_id
        self.on_end = on_end
        self.task: asyncio.Task[Any] | None = None
        self.started = False  # the coroutine took its first step
        self.by_signal = False  # the signal fired (and cancelled the task)
        self.cancelled = False  # the task was cancelled (once; the loop's thread only)
        # cancel() reached the loop before the start did (a launch that
        # joined a pending start): start() then cancels it at once.
        self.cancel_first = False  # (the loop's thread only)
        # The CancelledError the coroutine ended with (the loop's thread only).
        self.raised: BaseException | None = None
        self.ended = False
        self.wave: Wave | None = None  # the flights launched with it on its signal (one subscription)
        self.watch: LoopWatch | None = None
        # Its task runs in a copy of the context it was made in (a call's
        # stage: the call's context), as asyncio.create_task would copy it.
        self.context = contextvars.copy_context()

    def __repr__(self) -> str:
        return f"<Flight {self.name} {self.call_id} started={self.started} ended={self.ended}>"

    # -- on the loop's thread ------------------------------------------------

    def start(self) -> None:
        """Start the task (on the loop's thread; its watch schedules it)."""
        if self.ended:
            return  # ended before its start ran (its loop stopped meanwhile: the watch ended it)
        if self.end_if_aborted():
            return
        if self.cancel_first:
            # Cancelled (by whoever waited for it) before it started.
            self.coro.close()
            self._end(None, asyncio.CancelledError())
            return
        shielded = self._shielded()
        try:
            task = self.loop.create_task(shielded, context=self.context)
        except BaseException as exc:  # noqa: BLE001 - a task factory that fails ends this flight only
            shielded.close()
            self.coro.close()
            self._end(None, exc)
            return
        self.task = task
        task.add_done_callback(self._done)

    def end_if_aborted(self) -> bool:
        """Its signal fired before its first step: it never starts (its
        coroutine is closed) and ends with ``AbortError(before_dispatch)``.
        True if so. What :meth:`start` decides first, on the loop; a caller
        about to launch it may ask the same before the launch (a loop
        blocked by the stop itself would never run the start)."""
        if not self.signal.aborted:
            return False
        self.coro.close()
        self._end(None, AbortError(before_dispatch=True))
        return True

    async def _shielded(self) -> Any:
        self.started = True
        try:
            value = await self.coro
        except asyncio.CancelledError as exc:
            self.raised = exc  # (kept as the __cause__ of the error it ends with)
            raise
        except BaseException as exc:  # noqa: BLE001 - see _Escaped
            if self._ends_here():
                self._end(None, exc)
                return None
            return _Escaped(exc)
        if self._ends_here():
            self._end(value, None)
            return None
        return value

    def _ends_here(self) -> bool:
        """At the end of the task's last step (the coroutine returned or
        raised): whether the task is sure to end with what the coroutine
        gave, so the flight ends here, in that step, and its done callback
        (another callback of the loop, its handle, and the task's three
        reads) is taken back. Not when a cancellation is pending or was
        swallowed (``cancelling()``: the task may still end cancelled, the
        done callback decides as for a cancellation), nor when the task is
        not known yet (a task factory that runs the first step eagerly)."""
        task = self.task
        if task is None or task.cancelling():
            return False
        task.remove_done_callback(self._done)
        return True

    def _done(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            if not self.started:
                self.coro.close()  # cancelled before its first step: never awaited
            if self.by_signal or self.signal.aborted:
                self._end(None, AbortError(before_dispatch=not self.started))
            else:
                # Cancelled by someone else (the loop's shutdown, the
                # application), or the coroutine raised CancelledError:
                # a message that says so, not a bare class name.
                self._end(None, _cancelled_by_others(self.label, self.raised))
            return
        error = task.exception()
        if error is not None:  # pragma: no cover - _shielded returns every exception
            self._end(None, error)
            return
        value = task.result()
        if type(value) is _Escaped:
            self._end(None, value.exc)
        else:
            self._end(value, None)

    def _cancel(self) -> None:
        # Once: a coroutine cleaning up after its cancellation (the MCP SDK
        # writing notifications/cancelled under a shield) must not be
        # interrupted by a second request (the signal and the awaiter both ask).
        task = self.task
        if task is None:
            self.cancel_first = True  # its start has not run yet: it cancels it
        elif not self.cancelled:
            self.cancelled = True
            task.cancel()

    # -- any thread --------------------------------------------------------------

    def watched_by(self, watch: LoopWatch, wave: Wave) -> None:
        """``watch`` now watches this flight, and ``wave`` cancels its task
        when its signal fires (under the watch's lock, at launch, once)."""
        self.watch = watch
        self.wave = wave

    def mark_ended(self) -> bool:
        """Record the end; False if it had ended already (whoever ends a
        flight first wins). Called under its watch's lock."""
        if self.ended:
            return False
        self.ended = True
        return True

    def aborted_by(self, signal: AbortSignal) -> None:
        """Its signal fired (on the aborting thread, from its wave's
        subscription): ``ahead``, then the task's cancel is sent to the loop."""
        self.by_signal = True
        ahead = self.ahead
        try:
            if ahead is not None:
                ahead(signal)
        finally:
            try:
                self.loop.call_soon_threadsafe(self._cancel)  # FIFO: always after start
            except RuntimeError:  # the loop closed meanwhile: the watch ends the flight
                pass

    def cancel(self) -> None:
        """Cancel the task (from any thread), e.g. when what waits for it
        gave up; it still ends only when the task has ended, and then
        reports ``CancelledError`` unless its signal fired."""
        try:
            self.loop.call_soon_threadsafe(self._cancel)  # FIFO: always after start
        except RuntimeError:  # the loop closed meanwhile: the watch ends the flight
            pass

    def _end(self, value: Any, error: BaseException | None) -> None:
        watch = self.watch
        if watch is not None and not watch.remove(self):
            return  # ended already (the watch saw its loop go)
        wave = self.wave
        if wave is not None:
            wave.ended_one(self)
        try:
            self.on_end(value, error)
        except BaseException as exc:  # noqa: BLE001 - never into the loop
            logger.opt(exception=exc).error("reporting the end of async tool {!r} failed", self.name)

    def never_starts(self, state: str) -> None:
        """Launched onto a loop that can no longer run its start (its thread
        is blocked by the runtime's stop, or by a blocking wait for a
        batch): it ends now, aborted before its first step if its signal
        fired (as the stop's abort has), else :class:`LoopGoneError` for a
        stop, ``InvalidStateError`` for a wait (the loop is not gone: the
        application blocks it), ``state`` saying why."""
        if self.end_if_aborted():
            return
        if state is _HALTED:
            self.fail_gone(state)
            return
        self.coro.close()
        self._end(None, InvalidStateError(f"the event loop that runs {self.label} {state}"))

    def fail_gone(self, state: str) -> None:
        """The loop is closed or stopped with this flight still on it."""
        if not self.started:
            try:
                self.coro.close()
            except BaseException:  # noqa: BLE001 - pragma: no cover - a coroutine that resists closing
                pass
        self._end(None, LoopGoneError(f"the event loop that runs {self.label} {state} before the call ended"))


def describe(flight: Flight) -> str:
    """``async tool "<name>" (call <id>)``: how a stop names a flight it left."""
    return f"{flight.label} (call {flight.call_id})" if flight.call_id != WHEN else flight.label


async def await_flight(
    watch: LoopWatch,
    coro: Any,
    signal: AbortSignal,
    loop: asyncio.AbstractEventLoop,
    name: str,
    call_id: str,
) -> Any:
    """Run ``coro`` as a :class:`Flight` on ``loop`` (another loop than the
    awaiting one, or the same) and await its end here: its value, or what
    it raised (``AbortError`` when ``signal`` cancelled it, ``LoopGoneError``
    when ``loop`` went away). When the awaiting task is cancelled, the
    flight is cancelled too, and this still waits for it to end (it is
    never abandoned) before the ``CancelledError`` goes on."""
    done: concurrent.futures.Future[Any] = concurrent.futures.Future()

    def on_end(value: Any, error: BaseException | None) -> None:
        # On the flight's loop's thread, or the watch's.
        if type(error) is asyncio.CancelledError:
            done.cancel()  # cancelled by flight.cancel(), not by its signal
        elif error is not None:
            done.set_exception(error)
        else:
            done.set_result(value)

    flight = Flight(coro, signal, loop, name, call_id, on_end)
    watch.launch(flight)
    return await await_settled(done, flight.cancel)


async def await_settled(done: concurrent.futures.Future[Any], on_cancel: Callable[[], object]) -> Any:
    """Await ``done`` (set from any thread) here. When the awaiting task is
    cancelled, ``on_cancel()`` asks what ``done`` waits for to stop (once,
    if it has not ended), and this still waits for it to end (it is never
    abandoned) before the ``CancelledError`` goes on (the one the task was
    cancelled with, its message kept): a cancellation wins over the value. The one way the runtime awaits work of its own from a
    task: a flight (:func:`await_flight`), a batch (``execute_async``).

    ``done`` settling wakes the task through one future of this loop's
    (one ``call_soon_threadsafe``, one more iteration to resume the task):
    no ``wrap_future``, whose cancellation would cancel ``done``, and no
    ``asyncio.wait`` around it, which costs the loop a third iteration."""
    loop = asyncio.get_running_loop()
    wake = [loop.create_future()]  # (the current one: a cancellation cancels it)

    def ring() -> None:
        # On the loop: wake the task (unless a cancellation already did).
        if not wake[0].done():
            wake[0].set_result(None)

    def settled(_: concurrent.futures.Future[Any]) -> None:
        # On whichever thread settled ``done``.
        try:
            loop.call_soon_threadsafe(ring)
        except RuntimeError:  # the loop is closed: nothing awaits on it any more
            pass

    done.add_done_callback(settled)  # (called at once if it has settled)
    # The first cancellation, raised again once ``done`` has settled: the
    # very error (its message, e.g. anyio's "Cancelled via cancel scope",
    # by which a cancel scope knows it for its own and catches it).
    cancellation: asyncio.CancelledError | None = None
    while True:
        try:
            await wake[0]
            break  # woken by ring(): ``done`` has settled
        except asyncio.CancelledError as exc:
            # (``done`` may have settled and ring() found the wake cancelled:
            # ask ``done`` itself before waiting on a new one.)
            settled_now = done.done()
            if cancellation is None:
                cancellation = exc
                if not settled_now:
                    on_cancel()
            if settled_now:
                break
            wake[0] = loop.create_future()
    if cancellation is not None:
        raise cancellation  # (the cancellation wins over the value)
    try:
        return done.result()
    except concurrent.futures.CancelledError:  # whoever set it cancelled it
        raise asyncio.CancelledError() from None


class Wave:
    """The flights on one signal that one :meth:`LoopWatch.launch_all`
    launched (a batch's step starts its async calls together, all on the
    batch's body signal): one subscription to that signal for all of them,
    not one each. When it fires, each of them that has not ended is
    cancelled (:meth:`Flight.aborted_by`, in launch order). Invariants:
    ``flights`` holds those of them that have not ended (one that ends
    leaves it: the wave keeps nothing of it alive); the subscription lasts
    until the last of them has ended (each ends once: ``Flight._end`` after
    its watch's ``remove``), and that one ends it."""

    __slots__ = ("flights", "size", "_ends", "_unsubscribe")

    def __init__(self, flights: list[Flight]) -> None:
        self.flights = dict.fromkeys(flights)  # (insertion order: launch order)
        self.size = len(flights)
        self._ends = itertools.count(1)  # (next() on a count is atomic under the GIL)
        self._unsubscribe: Callable[[], None] | None = None

    def add(self, flight: Flight) -> None:
        """One more of them (at launch, before :meth:`subscribe`)."""
        self.flights[flight] = None
        self.size += 1

    def subscribe(self, signal: AbortSignal) -> None:
        """Subscribe to ``signal`` (at launch, before any of them starts;
        an aborted one cancels them at once, and each start then sees it)."""
        self._unsubscribe = signal.add_callback(self._fire)

    def _fire(self, signal: AbortSignal) -> None:
        for flight in list(self.flights):  # (a copy: they end meanwhile, on the loop's thread)
            if not flight.ended:  # (a stale read only sends a cancel that finds the task done)
                flight.aborted_by(signal)

    def ended_one(self, flight: Flight) -> None:
        """``flight``, one of them, has ended (on the thread that ended it);
        the last one ends the subscription."""
        self.flights.pop(flight, None)
        if next(self._ends) == self.size:
            unsubscribe = self._unsubscribe
            if unsubscribe is not None:
                unsubscribe()


class Outbox:
    """The loop side of a batch's inbox: the ends of the batch's flights
    that happen on the loop's thread in one iteration of the loop go to
    the batch together, in one message (one wake of the executor, not one
    per body; rarely two, when a flight launched after a flush ends in the
    same iteration). The ends are held until the loop's next iteration,
    unless the end just added leaves none of the batch's flights in
    flight: then they go at once (nothing else could join them; the batch
    hears of a lone body, or of its last one in flight, an iteration
    sooner).

    An end reported from another thread (the watch's, for a loop that
    stopped or closed; a closed loop's caller) goes at once, and takes
    whatever is held with it: a loop that stopped in the iteration that
    held ends never runs the flush it scheduled, and the watch ending the
    batch's other flights is what is left to send them.

    ``launched`` is written by the batch's step only (before it launches
    flights), read here: it only grows, and a flight's launch is counted
    before the flight can end, so an end never sees fewer launches than
    have ended. ``_ended`` counts the ends (``next()`` on a count is
    atomic under the GIL, whichever thread ends a flight); ``_ends``, the
    ends held, is guarded by ``_lock``."""

    __slots__ = ("loop", "put", "launched", "_ends", "_ended", "_lock")

    def __init__(self, loop: asyncio.AbstractEventLoop, put: Callable[[tuple[Any, ...]], None]) -> None:
        self.loop = loop
        self.put = put  # put(ends): one message with these ends, to the batch
        self.launched = 0  # flights the batch has launched onto ``loop`` so far
        self._ends: list[Any] = []
        self._ended = itertools.count(1)
        self._lock = threading.Lock()

    def add(self, end: Any) -> None:
        ended = next(self._ended)
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # not on a loop's thread (the watch's, a closed loop's caller)
            running = None
        lock = self._lock
        lock.acquire()
        try:
            ends = self._ends
            ends.append(end)
            if running is self.loop and ended < self.launched:
                if len(ends) == 1:
                    self.loop.call_soon(self._flush)
                return
            # Another thread's end, or none left in flight: all at once.
            self._ends = []
        finally:
            lock.release()
        self.put(tuple(ends))

    def _flush(self) -> None:
        lock = self._lock
        lock.acquire()
        try:
            ends, self._ends = self._ends, []
        finally:
            lock.release()
        if ends:  # (empty when a last end, or another thread's, put them already)
            self.put(tuple(ends))


class _Beat:
    __slots__ = ("sent", "answered", "warned")

    def __init__(self, sent: float) -> None:
        self.sent = sent
        self.answered = False
        self.warned = False

    def answer(self) -> None:
        self.answered = True


class _WaitedOn:
    """:meth:`LoopWatch.blocking_wait` on a thread that runs ``loop``."""

    __slots__ = ("_watch", "_loop")

    def __init__(self, watch: LoopWatch, loop: asyncio.AbstractEventLoop) -> None:
        self._watch = watch
        self._loop = loop

    def __enter__(self) -> None:
        self._watch.wait_begins(self._loop)

    def __exit__(self, *exc: object) -> None:
        self._watch.wait_ends(self._loop)


class LoopWatch:
    """The runtime's watch over the loops its flights run on (see the
    module docstring). State, under ``_lock``: ``_flights`` (loop → the
    flights in flight on it), ``_beats`` (loop → its last heartbeat),
    ``_inlets`` (loop → the flights launched onto it whose start the loop
    has not run yet: one ``call_soon_threadsafe`` for all of them, however
    many launches join it before the loop runs it); ``_thread`` runs from
    the first :meth:`launch` until :meth:`stop`. Invariants: a flight is in
    ``_flights`` from its launch until it ends, and ends at most once; one
    in an inlet has no task yet (a flight that ended there never starts)."""

    #: Seconds between two looks at the loops.
    PERIOD: ClassVar[float] = 0.25
    #: Seconds a loop may go without running a callback, while one of its
    #: flights' tasks runs, before that tool is named in a warning.
    BLOCK_WARNING: ClassVar[float] = 1.0

    def __init__(self, name: str = "dsh-loop-watch") -> None:
        self._name = name
        # A plain lock (taken twice a flight: at launch and at its end) and,
        # on it, the condition the watch's thread waits on.
        self._lock = threading.Lock()
        self._wakeup = threading.Condition(self._lock)
        self._flights: dict[asyncio.AbstractEventLoop, set[Flight]] = {}
        self._beats: dict[asyncio.AbstractEventLoop, _Beat] = {}
        self._thread: threading.Thread | None = None
        self._stopped = False
        # loop -> the flights launched onto it whose start is scheduled and
        # not yet run: a launch while its loop has not yet run the pending
        # start joins it (one wake of the loop for them all).
        self._inlets: dict[asyncio.AbstractEventLoop, list[Flight]] = {}
        # The watch waits for a first flight (no timer): a launch wakes it.
        # While it looks every PERIOD, a launch does not (a batch's flights
        # come and go every few microseconds; a wake each time would cost
        # more thread switches than the flights themselves).
        self._idle = False
        # Loops whose thread a blocking stop holds (rt.stop() called there),
        # or a blocking wait for a batch, by why: a flight launched onto one
        # never starts (see halt, blocking_wait). Invariant: a loop a stop
        # halted stays so; a wait's entry leaves with its last wait.
        self._halted: set[asyncio.AbstractEventLoop] = set()
        self._waited_on: dict[asyncio.AbstractEventLoop, int] = {}

    def launch(self, flight: Flight) -> None:
        """Start ``flight`` on its loop. A loop that is closed or not running
        ends it at once (``on_end`` runs on this thread, with the error)."""
        self.launch_all(flight.loop, [flight])

    def launch_all(self, loop: asyncio.AbstractEventLoop, flights: list[Flight]) -> None:
        """Start ``flights`` (all on ``loop``) with one wake of the loop."""
        if loop.is_closed() or not loop.is_running():
            state = "is closed" if loop.is_closed() else "is not running"
            for flight in flights:
                flight.coro.close()
                flight.on_end(
                    None,
                    LoopGoneError(
                        f"the event loop that runs {flight.label} {state} "
                        "(the batch's loop must run until the batch settles)"
                    ),
                )
            return
        # One subscription per signal (a batch's flights share one), before
        # any of them starts.
        waves: dict[AbortSignal, Wave] = {}
        for flight in flights:
            wave = waves.get(flight.signal)
            if wave is None:
                waves[flight.signal] = Wave([flight])
            else:
                wave.add(flight)
        for signal, wave in waves.items():
            wave.subscribe(signal)
        with self._lock:
            watched = self._flights.get(loop)
            if watched is None:
                watched = self._flights[loop] = set()
                if self._idle:
                    self._wakeup.notify()  # the watch has loops to look at again
            for flight in flights:
                flight.watched_by(self, waves[flight.signal])
                watched.add(flight)
            if self._thread is None and not self._stopped:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            halted = _HALTED if loop in self._halted else _WAITED_ON if loop in self._waited_on else None
            if halted is None:
                inlet = self._inlets.get(loop)
                if inlet is not None:
                    inlet.extend(flights)  # the loop has not run the pending start yet
                    return
                self._inlets[loop] = list(flights)
        if halted is not None:
            for flight in flights:
                flight.never_starts(halted)
            return
        try:
            loop.call_soon_threadsafe(self._start_pending, loop)
        except RuntimeError:  # closed just now
            with self._lock:
                pending = self._inlets.pop(loop, [])
            for flight in pending:
                flight.fail_gone("closed")

    def halt(self, loop: asyncio.AbstractEventLoop) -> None:
        """``loop``'s thread is about to block in the runtime's stop (a
        ``stop()`` called there, with no flight of this runtime in flight
        on it): the start of a flight launched onto it would never run. The
        flights whose start is pending end now, and so does every flight
        launched onto it from now on (aborted before dispatch: the stop
        fires their signals before it halts the loop), so the stop does not
        wait its timeout for them."""
        with self._lock:
            self._halted.add(loop)
            pending = self._inlets.pop(loop, [])
        for flight in pending:
            flight.never_starts(_HALTED)

    def blocking_wait(self) -> _WaitedOn | None:
        """Around a blocking wait of the calling thread for a batch
        (``rt.tools.execute``, ``resume``, ``recover``,
        ``NativeExecutor.execute``): when this thread runs an event loop
        (the application's, a notebook's), the start of a flight launched
        onto that loop could not run before the wait ends, and the wait
        may be for that very flight. So, as :meth:`halt` does for a stop,
        the flights whose start is pending end now, and so does every
        flight launched onto it until the wait ends (``LoopGoneError``
        naming the fix), instead of a hang. None on a thread without one
        (use ``with`` on what it returns otherwise)."""
        loop = asyncio._get_running_loop()
        return None if loop is None else _WaitedOn(self, loop)

    def wait_begins(self, loop: asyncio.AbstractEventLoop) -> None:
        """A blocking wait on ``loop``'s thread begins (see :meth:`blocking_wait`)."""
        with self._lock:
            self._waited_on[loop] = self._waited_on.get(loop, 0) + 1
            pending = self._inlets.pop(loop, [])
        for flight in pending:
            flight.never_starts(_WAITED_ON)

    def wait_ends(self, loop: asyncio.AbstractEventLoop) -> None:
        """That wait has ended."""
        with self._lock:
            left = self._waited_on[loop] - 1
            if left:
                self._waited_on[loop] = left
            else:
                del self._waited_on[loop]

    def _start_pending(self, loop: asyncio.AbstractEventLoop) -> None:
        # On the loop's thread: start every flight launched onto it since
        # the start was scheduled, in launch order.
        with self._lock:
            pending = self._inlets.pop(loop, ())
        for flight in pending:
            flight.start()

    def assert_invariants(self) -> None:
        """(The property tests.) A flight in the watch has not ended, and
        its wave holds it (it leaves its wave after the watch)."""
        with self._lock:
            for flights in self._flights.values():
                assert flights, "an empty set of flights is kept"
                for flight in flights:
                    assert not flight.ended, f"{flight!r} ended and is still watched"
                    wave = flight.wave
                    assert wave is not None and flight in wave.flights, f"{flight!r} is not in its wave"
            assert set(self._inlets) <= set(self._flights), "a start is pending for a loop without flights"
            for loop, pending in self._inlets.items():
                for flight in pending:
                    assert flight.task is None, f"{flight!r} waits for its start and has a task"
                    assert flight.ended or flight in self._flights.get(loop, ()), f"{flight!r} is not watched"

    def in_flight(self) -> int:
        with self._lock:
            return sum(len(flights) for flights in self._flights.values())

    def carries(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Whether flights are in flight on ``loop``."""
        with self._lock:
            return bool(self._flights.get(loop))

    def stop(self) -> list[str]:
        """End the watch (the runtime's stop, after its loop thread ended).
        A flight still on a loop that is gone now (the runtime's own loop,
        closed without a task that survived its cancellation) ends with
        :class:`LoopGoneError`, so whoever waits for it is released. Returns
        what is still in flight on loops that run on (an application's),
        described as :meth:`describe` does: the stop leaves them there."""
        with self._lock:
            self._stopped = True
            thread = self._thread
            self._wakeup.notify()
            snapshot = [(loop, tuple(flights)) for loop, flights in self._flights.items()]
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        left: list[str] = []
        for loop, flights in snapshot:
            if loop.is_closed() or not loop.is_running():
                state = "closed" if loop.is_closed() else "stopped"
                for flight in flights:
                    flight.fail_gone(state)
            else:
                left.extend(describe(flight) for flight in flights if not flight.ended)
        return left

    def describe(self, task: asyncio.Task[Any]) -> str:
        """How a stop names ``task`` it abandoned: the async tool whose
        flight it is, else the task's own name."""
        with self._lock:
            for flights in self._flights.values():
                for flight in flights:
                    if flight.task is task:
                        return describe(flight)
        return f"asyncio task {task.get_name()!r}"

    def _stopping(self) -> bool:
        return self._stopped

    def remove(self, flight: Flight) -> bool:
        """``flight`` has ended: forget it. False if it had ended already
        (whoever ends a flight first wins)."""
        with self._lock:
            if not flight.mark_ended():
                return False
            flights = self._flights.get(flight.loop)
            if flights is not None:
                flights.discard(flight)
                if not flights:
                    del self._flights[flight.loop]
                    self._beats.pop(flight.loop, None)
                    # (What is left in its inlet ended too: a loop that went
                    # away never runs that start, and it is not kept.)
                    self._inlets.pop(flight.loop, None)
            return True

    def _run(self) -> None:
        wakeup = self._wakeup
        while True:
            with self._lock:
                while not self._flights and not self._stopped:
                    self._idle = True
                    wakeup.wait()
                    self._idle = False
                if self._stopped:
                    return
                wakeup.wait(self.PERIOD)
                if self._stopping():  # stop() during the wait
                    return
                snapshot = [(loop, tuple(flights)) for loop, flights in self._flights.items()]
            for loop, flights in snapshot:
                try:
                    self._look(loop, flights)
                except BaseException as exc:  # noqa: BLE001 - the watch outlives a bad loop
                    logger.opt(exception=exc).error("watching an event loop failed")

    def _look(self, loop: asyncio.AbstractEventLoop, flights: tuple[Flight, ...]) -> None:
        if loop.is_closed() or not loop.is_running():
            state = "closed" if loop.is_closed() else "stopped"
            for flight in flights:
                flight.fail_gone(state)
            return
        now = time.monotonic()
        beat = self._beats.get(loop)
        if beat is None or beat.answered:
            beat = _Beat(now)
            with self._lock:
                if loop in self._flights:
                    self._beats[loop] = beat
            try:
                loop.call_soon_threadsafe(beat.answer)
            except RuntimeError:
                for flight in flights:
                    flight.fail_gone("closed")
            return
        if beat.warned or now - beat.sent < self.BLOCK_WARNING:
            return
        running = asyncio.current_task(loop)
        for flight in flights:
            if flight.task is not None and flight.task is running:
                beat.warned = True
                logger.warning(
                    "{} (call {}) has blocked its event loop for {:.1f} s: an async body must not "
                    "make blocking calls (everything else on that loop waits; run blocking work in a thread "
                    "or make the tool sync)",
                    flight.label,
                    flight.call_id,
                    now - beat.sent,
                )
                return
        for flight in flights:
            if flight.task is None and not flight.ended:
                beat.warned = True
                logger.warning(
                    "{} (call {}) has waited {:.1f} s for its event loop to start it: something "
                    "else blocks that loop, such as a blocking rt.tools.execute() on the loop's own thread "
                    "(use await rt.tools.execute_async() there instead); it starts once the loop runs again",
                    flight.label,
                    flight.call_id,
                    now - beat.sent,
                )
                return
