"""The actor base every dsh-actors actor derives from.

pykka's ``ThreadingActor`` runs one thread per actor. This base changes two
things about how a message is handled, and nothing else:

* A handler may return a :class:`Deferred` to reply *later*, from any thread,
  without blocking the actor (the registry forwards a batch to an executor
  and replies when the executor is done). This is how "no actor blocks
  waiting for another inside a handler" holds for request/reply protocols.
* Nothing a handler raises escapes the loop. pykka's own loop answers a
  ``BaseException`` by calling the process-global ``ActorRegistry.stop_all()``,
  which would stop every actor of every runtime in the process; here the
  exception goes to the asker (or to the log) and the actor keeps running.

Every actor a runtime starts is recorded in its :class:`ActorGroup`, and
``ToolRuntime.stop()`` stops exactly that group (never ``stop_all``).
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from concurrent.futures import Future as ConcurrentFuture
from typing import Any

import pykka
from loguru import logger
from pykka import messages as pykka_messages

__all__ = ["ActorBase", "ActorGroup", "Deferred", "ASK_TIMEOUT", "actor_thread_ident", "acquire_politely", "PoliteLock"]

#: pykka's own messages (stop, proxy calls): they go through pykka's handler;
#: everything else goes straight to ``receive``.
_PYKKA_MESSAGES = (
    pykka_messages._ActorStop,
    pykka_messages.ProxyCall,
    pykka_messages.ProxyGetAttr,
    pykka_messages.ProxySetAttr,
)

#: Seconds any ``ask``/``get`` between runtime parts waits before giving up.
#: pykka can lose an ask that races with ``stop()``; nothing waits forever.
ASK_TIMEOUT = 30.0

_local = threading.local()


def actor_thread_ident() -> ActorBase | None:
    """The actor whose handler is running on this thread, if any."""
    return getattr(_local, "actor", None)


class Deferred:
    """A reply that a handler promises to give later, from any thread.

    Resolve it exactly once with :meth:`resolve` or :meth:`fail`; later calls
    are ignored. It forwards the outcome to the asker's pykka future (bound
    by the actor loop when the handler returns it) and to an optional
    ``concurrent.futures.Future`` given at construction.
    """

    __slots__ = ("_lock", "_done", "_value", "_exc", "_pykka", "_future")

    def __init__(self, future: ConcurrentFuture[Any] | None = None) -> None:
        self._lock = threading.Lock()
        self._done = False
        self._value: Any = None
        self._exc: BaseException | None = None
        self._pykka: pykka.Future[Any] | None = None
        self._future = future

    @property
    def done(self) -> bool:
        return self._done

    def _bind(self, reply: pykka.Future[Any]) -> None:
        with self._lock:
            if not self._done:
                self._pykka = reply
                return
        self._deliver_pykka(reply)

    def _deliver_pykka(self, reply: pykka.Future[Any]) -> None:
        if self._exc is not None:
            exc = self._exc
            reply.set_exception(exc_info=(type(exc), exc, exc.__traceback__))
        else:
            reply.set(self._value)

    def resolve(self, value: Any) -> None:
        self._settle(value, None)

    def fail(self, exc: BaseException) -> None:
        self._settle(None, exc)

    def _settle(self, value: Any, exc: BaseException | None) -> None:
        with self._lock:
            if self._done:
                return
            self._done = True
            self._value = value
            self._exc = exc
            reply = self._pykka
        if reply is not None:
            self._deliver_pykka(reply)
        future = self._future
        if future is not None and future.set_running_or_notify_cancel():
            if exc is not None:
                future.set_exception(exc)
            else:
                future.set_result(value)


class ActorGroup:
    """The actors one runtime started: stopped together, never process-wide."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._refs: dict[str, pykka.ActorRef[Any]] = {}
        self._threads: dict[str, threading.Thread] = {}
        self._retiring: list[threading.Thread] = []
        self._closed = False

    def add(self, ref: pykka.ActorRef[Any], thread: threading.Thread | None = None) -> None:
        with self._lock:
            if self._closed:
                closed = True
            else:
                closed = False
                self._refs[ref.actor_urn] = ref
                if thread is not None:
                    self._threads[ref.actor_urn] = thread
        if closed:
            ref.stop(block=False)
            raise RuntimeError("the runtime is stopped")

    def discard(self, ref: pykka.ActorRef[Any]) -> None:
        with self._lock:
            self._refs.pop(ref.actor_urn, None)
            self._threads.pop(ref.actor_urn, None)

    def retire(self, ref: pykka.ActorRef[Any]) -> None:
        """Stop one actor now (a pool's surplus) and forget it once its
        thread has ended, so bursts do not grow the group for good;
        :meth:`stop_all` still joins a thread that has not ended yet."""
        with self._lock:
            self._refs.pop(ref.actor_urn, None)
            thread = self._threads.pop(ref.actor_urn, None)
            self._retiring = [t for t in self._retiring if t.is_alive()]
            if thread is not None:
                self._retiring.append(thread)
        try:
            ref.stop(block=False)
        except Exception:  # noqa: BLE001 - already dead
            pass

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        return len(self._refs)

    def stop_all(self, timeout: float = ASK_TIMEOUT) -> None:
        """Stop every actor of this group and wait for their threads, all
        within ``timeout`` seconds in total (an actor stuck in a body that
        ignores its signal is left behind, with a warning)."""
        import time

        deadline = time.monotonic() + timeout
        with self._lock:
            self._closed = True
            refs = list(self._refs.values())
            threads = list(self._threads.values()) + self._retiring
            self._refs.clear()
            self._threads.clear()
            self._retiring = []
        futures = []
        for ref in refs:
            try:
                futures.append(ref.stop(block=False))
            except Exception:  # noqa: BLE001 - already dead
                pass
        stuck = 0
        for fut in futures:
            try:
                fut.get(timeout=max(0.0, deadline - time.monotonic()))
            except Exception:  # noqa: BLE001
                stuck += 1
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))
        alive = sum(1 for t in threads if t.is_alive())
        if stuck or alive:
            logger.warning(
                "{} actor thread(s) did not stop within {}s (a tool body ignoring its signal?)",
                max(stuck, alive),
                timeout,
            )


class ActorBase(pykka.ThreadingActor):
    """A pykka actor with deferred replies and a loop nothing can kill.

    Subclasses implement :meth:`receive` (``match`` on their closed message
    union). ``receive`` runs on the actor's own thread, one message at a time.
    """

    use_daemon_thread = True

    @staticmethod
    def _create_actor_inbox() -> Any:
        # Hot path: a hand-off is one put and one get. queue.SimpleQueue does
        # both in C (its get waits with the GIL released), where pykka's
        # default queue.Queue runs a Python Condition on each side; every
        # caller uses only put, get and empty, which both provide.
        return queue.SimpleQueue()

    def __init__(self) -> None:
        super().__init__()
        self._thread: threading.Thread | None = None

    @classmethod
    def spawn(cls: type[Any], group: ActorGroup, *args: Any, **kwargs: Any) -> pykka.ActorRef[Any]:
        """Start an actor of this class and record it in ``group``."""
        ref: pykka.ActorRef[Any] = cls.start(*args, **kwargs)
        actor = ref._actor_weakref()
        group.add(ref, None if actor is None else actor._thread)
        return ref

    def _start_actor_loop(self) -> None:
        thread = threading.Thread(
            target=self._actor_loop, name=f"dsh-{type(self).__name__}", daemon=True
        )
        self._thread = thread
        thread.start()

    def receive(self, message: Any) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    def on_receive(self, message: Any) -> Any:
        return self.receive(message)

    def on_failure(self, exception_type: Any, exception_value: Any, traceback: Any) -> None:
        logger.opt(exception=(exception_type, exception_value, traceback)).error(
            "{} failed handling a message", type(self).__name__
        )

    def _actor_loop_running(self) -> None:
        _local.actor = self
        try:
            while not self.actor_stopped.is_set():
                # One call per envelope: its locals (the message, the reply)
                # are released when it returns, not when the next one arrives.
                self._handle_envelope(self.actor_inbox.get())
        finally:
            _local.actor = None

    def _handle_envelope(self, envelope: Any) -> None:
        reply = envelope.reply_to
        message = envelope.message
        try:
            if isinstance(message, _PYKKA_MESSAGES):
                response = self._handle_receive(message)
            else:
                response = self.receive(message)  # what pykka's handler ends in
        except BaseException as exc:  # noqa: BLE001 - nothing escapes the loop
            if reply is not None:
                reply.set_exception(exc_info=(type(exc), exc, exc.__traceback__))
            elif not isinstance(message, pykka_messages._ActorStop):
                self.on_failure(*sys.exc_info())
            return
        if reply is None:
            return
        if isinstance(response, Deferred):
            response._bind(reply)
        else:
            reply.set(response)


_POLITE_SPINS = 64


def acquire_politely(lock: threading.Lock) -> None:
    """Take ``lock``, shared by threads that all run Python, without a lock
    convoy.

    A plain blocking ``acquire`` waits *without* the GIL, so a waiter is
    handed the lock while it cannot run; the thread that holds the GIL then
    blocks on the lock at its next turn, and from then on every acquisition
    costs two context switches (measured: 2 per call, 36 -> 81 us per
    self-served call, with only two threads). Here a waiter tries without
    blocking and, between tries, yields the GIL (``time.sleep(0)``) so the
    holder can run and release; it blocks only after ``_POLITE_SPINS``
    yields (a holder that is really busy: never burn a core waiting)."""
    if lock.acquire(False):
        return
    for _ in range(_POLITE_SPINS):
        time.sleep(0)
        if lock.acquire(False):
            return
    lock.acquire()


class PoliteLock:
    """A lock that ``with`` takes through :func:`acquire_politely`: for
    state that several Python threads reach on a hot path."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def __enter__(self) -> None:
        lock = self._lock
        if not lock.acquire(False):  # (uncontended: no second call)
            acquire_politely(lock)

    def __exit__(self, *exc: object) -> None:
        self._lock.release()
