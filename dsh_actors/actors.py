"""The actor base every dsh-actors actor derives from, on pykka's public API.

Every actor is a pykka ``ThreadingActor`` (one thread each). This base uses
only pykka's documented hooks (``on_start``, ``on_receive``, ``on_stop``,
``on_failure``) and references (``ActorRef.tell``/``ask``/``stop``), and adds
three things around them:

* **Nothing a handler raises escapes the loop.** pykka stops an actor whose
  handler raised and answers a ``BaseException`` with the process-global
  ``ActorRegistry.stop_all()``, which would stop every actor of every runtime
  in the process. :meth:`ActorBase.on_receive` contains everything and logs
  it; an actor keeps running.
* **Replies travel in the messages.** Requests that are answered later (a
  batch, a registry write forwarded to a scope actor) carry a ``reply``
  future that whoever finishes the work settles once (:func:`settle`), so no
  actor blocks inside a handler waiting for another. pykka's ``ask`` on
  ``rt.registry`` works too: :class:`RegistryRef` puts its own future in the
  request and answers the ask from it.
* **A runtime stops exactly what it started.** Each actor enlists in its
  runtime's :class:`ActorGroup` when it is constructed and records its
  thread when it starts; :meth:`ActorGroup.stop_all` stops those actors and
  joins those threads (and only those), within one overall timeout.

Supported pykka: ``pykka>=4.3,<5`` (pinned in ``pyproject.toml``).
"""

from __future__ import annotations

import queue
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

import pykka
from loguru import logger

from .errors import STOPPED_REFUSAL, InvalidTypeError, RuntimeStoppedError

__all__ = [
    "ASK_TIMEOUT",
    "RETIRE",
    "ActorBase",
    "ActorGroup",
    "Address",
    "MailboxActor",
    "RegistryRef",
    "actor_thread_ident",
    "settle",
]

#: Seconds any wait between runtime parts gives up after (nothing waits forever).
ASK_TIMEOUT = 30.0

_local = threading.local()


def actor_thread_ident() -> ActorBase | None:
    """The actor whose thread this is, if any (set when the actor starts)."""
    return getattr(_local, "actor", None)


def settle(reply: Any, value: Any = None, error: BaseException | None = None) -> None:
    """Settle ``reply`` (a ``concurrent.futures.Future``, anything with the
    same four methods, or ``None``) once; a second settlement is ignored."""
    if reply is None:
        return
    try:
        if reply.done() and not getattr(reply, "cancelled", _never)():
            return  # settled already (rt.stop() answers a batch whose thread is stuck, which settles it later)
        if not reply.set_running_or_notify_cancel():
            return  # cancelled by its owner
        if error is not None:
            reply.set_exception(error)
        else:
            reply.set_result(value)
    except (RuntimeError, InvalidStateError):  # settled already
        pass


def _never() -> bool:
    return False


class PendingReplies:
    """Replies that callers block on, failed by the runtime's stop the way
    pykka fails the asks a stopped actor never answered: a caller waits on
    its reply alone (no polling), and :meth:`fail_all` settles every reply
    still pending with its error. Once failed, a reply tracked later fails
    at once."""

    __slots__ = ("_lock", "_items", "_closed")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[int, tuple[Any, Callable[[], BaseException]]] = {}
        self._closed = False

    def tracked(self, reply: Any, error: Callable[[], BaseException]) -> _Tracked:
        """While the block runs, ``reply`` is failed with ``error()`` by
        :meth:`fail_all` (unless it has settled before). A plain object,
        not a generator: it wraps every blocking ``rt.tools.execute``."""
        return _Tracked(self, reply, error)

    def track(self, reply: Any, error: Callable[[], BaseException]) -> None:
        """From now until :meth:`untrack`, ``reply`` is failed with
        ``error()`` by :meth:`fail_all` (at once if that has run)."""
        with self._lock:
            closed = self._closed
            if not closed:
                self._items[id(reply)] = (reply, error)
        if closed:
            settle(reply, error=error())

    def untrack(self, reply: Any) -> None:
        with self._lock:
            self._items.pop(id(reply), None)

    def fail_all(self) -> None:
        with self._lock:
            self._closed = True
            items, self._items = list(self._items.values()), {}
        for reply, error in items:
            settle(reply, error=error())


class _Tracked:
    """``PendingReplies.tracked``: tracks its reply while the block runs."""

    __slots__ = ("_replies", "_reply", "_error")

    def __init__(self, replies: PendingReplies, reply: Any, error: Callable[[], BaseException]) -> None:
        self._replies = replies
        self._reply = reply
        self._error = error

    def __enter__(self) -> None:
        self._replies.track(self._reply, self._error)

    def __exit__(self, *exc: object) -> None:
        self._replies.untrack(self._reply)


class _Member:
    __slots__ = ("ref", "actor", "thread")

    def __init__(self, ref: pykka.ActorRef[Any], actor: ActorBase) -> None:
        self.ref = ref
        self.actor: weakref.ref[ActorBase] = weakref.ref(actor)
        self.thread: threading.Thread | None = None


class ActorGroup:
    """The actors one runtime started: stopped together, never process-wide.

    Invariant: every actor of the runtime is a member from its construction
    until its thread has ended (members whose thread ended are dropped
    lazily, so a long-lived runtime does not accumulate them), so
    :meth:`stop_all` can stop and join every one of them.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._members: dict[str, _Member] = {}
        self._closed = False
        self._enlisted = 0

    def enlist(self, actor: ActorBase) -> None:
        """Record ``actor`` (its constructor calls this, on the spawning
        thread, before its thread starts). Raises once the group is closed."""
        with self._lock:
            if self._closed:
                raise RuntimeStoppedError(STOPPED_REFUSAL)
            self._members[actor.actor_urn] = _Member(actor.actor_ref, actor)
            self._enlisted += 1
            if self._enlisted % 64 == 0:
                self._prune()

    def forget(self, actor: ActorBase) -> None:
        """Drop ``actor``, whose thread could not be started (it never ran)."""
        with self._lock:
            self._members.pop(actor.actor_urn, None)

    def started(self, urn: str, thread: threading.Thread) -> None:
        with self._lock:
            member = self._members.get(urn)
            if member is not None:
                member.thread = thread

    def actor(self, ref: pykka.ActorRef[Any]) -> ActorBase | None:
        """The actor object behind ``ref`` (for :class:`RegistryRef`)."""
        with self._lock:
            member = self._members.get(ref.actor_urn)
        return None if member is None else member.actor()

    def _prune(self) -> None:
        # Under the lock: drop members that stopped and whose thread ended.
        dead = [urn for urn, m in self._members.items() if m.thread is not None and not m.thread.is_alive()]
        for urn in dead:
            del self._members[urn]

    def retire(self, ref: pykka.ActorRef[Any]) -> None:
        """Stop one actor now (a pool's surplus, an idle scope); it stays a
        member until its thread has ended, so :meth:`stop_all` still joins it."""
        actor = self.actor(ref)
        if isinstance(actor, MailboxActor):
            actor.mailbox.put(RETIRE)
        try:
            ref.stop(block=False)
        except pykka.ActorDeadError:
            pass

    @property
    def closed(self) -> bool:
        return self._closed

    def threads(self) -> list[threading.Thread]:
        """The threads of the members that started (alive or not)."""
        with self._lock:
            return [m.thread for m in self._members.values() if m.thread is not None]

    def __len__(self) -> int:
        with self._lock:
            return sum(1 for m in self._members.values() if not m.ref.actor_stopped.is_set())

    def stop_all(self, timeout: float = ASK_TIMEOUT) -> list[str]:
        """Stop every member and join its thread, all within ``timeout``
        seconds in total. Returns the names of threads still alive then (an
        actor stuck in a tool body that ignores its signal; the runtime's
        stop names them in its warning and in ``rt.abandoned``)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            self._closed = True
            members = list(self._members.values())
        futures = []
        for member in members:
            actor = member.actor()
            if isinstance(actor, MailboxActor):
                actor.mailbox.put(RETIRE)
            try:
                futures.append((member, member.ref.stop(block=False)))
            except pykka.ActorDeadError:
                pass
        for member, fut in futures:
            with self._lock:
                forgotten = self._members.get(member.ref.actor_urn) is not member
            if forgotten:
                continue  # its thread never started (ActorBase.start): nobody answers its stop
            try:
                fut.get(timeout=max(0.0, deadline - time.monotonic()))
            except Exception:  # noqa: BLE001 - a stuck actor: joined (and reported) below
                pass
        me = threading.current_thread()
        for member in members:
            thread = member.thread
            if thread is not None and thread is not me:
                thread.join(max(0.0, deadline - time.monotonic()))
        alive = [m.thread.name for m in members if m.thread is not None and m.thread is not me and m.thread.is_alive()]
        with self._lock:
            self._members = {urn: m for urn, m in self._members.items() if m.thread is None or m.thread.is_alive()}
        return alive


class ActorBase(pykka.ThreadingActor):
    """A pykka actor whose handler cannot kill its loop, enlisted in its
    runtime's :class:`ActorGroup`.

    Subclasses implement :meth:`receive` (``match`` on their closed message
    union); it runs on the actor's own thread, one message at a time. The
    first constructor argument is always the group.
    """

    use_daemon_thread = True

    def __init__(self, group: ActorGroup) -> None:
        super().__init__()
        self.group = group
        group.enlist(self)
        _local.constructed = self  # (for start(), should its thread not start)

    @classmethod
    def start(cls, *args: Any, **kwargs: Any) -> Any:
        """pykka's ``start``; when the actor's thread cannot be started (the
        process is at its thread limit: ``RuntimeError``), the actor pykka
        made and registered is undone (unregistered, out of its group,
        stopped) before the error goes on, so nothing waits for it: what was
        asked of it meanwhile (a stop's request, queued before it was marked
        stopped) is answered as pykka answers a stopped actor's inbox."""
        outer = getattr(_local, "constructed", None)  # (an actor whose __init__ starts this one)
        _local.constructed = None
        try:
            return super().start(*args, **kwargs)
        except Exception:
            actor = _local.constructed
            if isinstance(actor, ActorBase) and actor.actor_ref is not None:
                actor._undo()
            raise
        finally:
            _local.constructed = outer

    def _undo(self) -> None:
        # (On the thread that started it, which its thread never did.)
        self.actor_stopped.set()  # first: a stop that asks it from now on is refused at once
        pykka.ActorRegistry.unregister(self.actor_ref)
        self.group.forget(self)
        # Last: a request queued before it was marked stopped is answered
        # here, as pykka answers a stopped actor's inbox; one put after it
        # finds it forgotten (stop_all).
        self._actor_loop_teardown()

    @classmethod
    def spawn(cls: type[Any], group: ActorGroup, *args: Any, **kwargs: Any) -> pykka.ActorRef[Any]:
        """Start an actor of this class in ``group``."""
        ref: pykka.ActorRef[Any] = cls.start(group, *args, **kwargs)
        return ref

    def on_start(self) -> None:
        thread = threading.current_thread()
        thread.name = f"dsh-{type(self).__name__}"
        _local.actor = self
        self.group.started(self.actor_urn, thread)

    def receive(self, message: Any) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    def on_receive(self, message: Any) -> Any:
        try:
            return self.receive(message)
        except BaseException as exc:  # noqa: BLE001 - nothing escapes the loop
            logger.opt(exception=exc).error("{} failed handling {}", type(self).__name__, type(message).__qualname__)
            return None

    def on_failure(self, exception_type: Any, exception_value: Any, traceback: Any) -> None:
        logger.opt(exception=(exception_type, exception_value, traceback)).error("{} failed", type(self).__name__)


class _Open:
    __slots__ = ()

    def __repr__(self) -> str:
        return "OPEN"


class _Retire:
    __slots__ = ()

    def __repr__(self) -> str:
        return "RETIRE"


_OPEN = _Open()
#: Put in a :class:`MailboxActor`'s mailbox: it stops reading it (and then
#: handles pykka's stop like any actor).
RETIRE: Any = _Retire()


class MailboxActor(ActorBase):
    """An actor on the hot path that reads a mailbox of its own.

    pykka's inbox is a ``queue.Queue`` whose every hand-off runs a Python
    ``Condition`` on both sides (about 6 µs a message here, against 1 µs for a
    ``queue.SimpleQueue``, whose put and get are C). A mailbox actor gets one
    pykka message when it starts (``OPEN``) and from then on reads
    :attr:`mailbox`, a ``SimpleQueue``, one message at a time, on its own
    thread, until it takes :data:`RETIRE`; pykka's inbox then only carries its
    stop. Senders put messages in :attr:`mailbox` (what :meth:`tell` does);
    its group retires it by putting ``RETIRE`` there before pykka's stop.
    Subclasses implement :meth:`handle`; like :meth:`receive`, nothing it
    raises escapes the loop.

    A message that reaches the mailbox after ``RETIRE``, or after pykka
    stopped the actor before it ever read its mailbox (a sender that saw
    the actor alive, then lost the race with its stop) is never handled:
    it is given to :meth:`refuse`, which answers whoever waits for it. Both
    sides take such messages: the actor, once it has set ``retired``, and
    a sender that finds ``retired`` set after its put (see
    :meth:`Address.tell`); each message is taken once (``get_nowait``), so
    each is refused once, and none is left unanswered.
    """

    def __init__(self, group: ActorGroup) -> None:
        self.mailbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.retired = False  # it took RETIRE (written by its own thread, once)
        super().__init__(group)

    @classmethod
    def spawn(cls: type[Any], group: ActorGroup, *args: Any, **kwargs: Any) -> pykka.ActorRef[Any]:
        ref: pykka.ActorRef[Any] = cls.start(group, *args, **kwargs)
        ref.tell(_OPEN)
        return ref

    @classmethod
    def open(cls: type[Any], group: ActorGroup, *args: Any, **kwargs: Any) -> Address:
        """Start one and return its :class:`Address`."""
        ref = cls.spawn(group, *args, **kwargs)
        actor = group.actor(ref)
        assert isinstance(actor, MailboxActor)
        return Address(actor)

    def receive(self, message: Any) -> Any:
        if message is not _OPEN:
            raise InvalidTypeError(f"a {type(self).__name__} reads its mailbox, not pykka's inbox: got {message!r}")
        mailbox = self.mailbox
        name = type(self).__name__
        while True:
            item = mailbox.get()
            if item is RETIRE:
                self.retired = True
                self.refuse_queued()
                return None
            try:
                self.handle(item)
            except BaseException as exc:  # noqa: BLE001 - nothing escapes the loop
                logger.opt(exception=exc).error("{} failed handling {}", name, type(item).__qualname__)
            # Not held while waiting for the next one (a batch keeps its
            # agent, session and results alive).
            del item

    def handle(self, message: Any) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def on_stop(self) -> None:
        # pykka's stop can come before the actor ever read its mailbox (a
        # stop that reached pykka's inbox ahead of OPEN): what was queued
        # there, or lands later, is refused as after RETIRE.
        self.retired = True
        self.refuse_queued()

    def refuse(self, message: Any) -> None:
        """Answer ``message``, which arrived after ``RETIRE`` and is never
        handled (any thread: the actor's, or the sender's). The default
        drops it; an actor whose messages carry a reply settles it."""

    def refuse_queued(self) -> None:
        """Refuse every message queued now (after ``retired`` was set)."""
        mailbox = self.mailbox
        while True:
            try:
                item = mailbox.get_nowait()
            except queue.Empty:
                return
            if item is RETIRE:
                continue
            try:
                self.refuse(item)
            except BaseException as exc:  # noqa: BLE001 - refuse the others too
                logger.opt(exception=exc).error("{} failed refusing {}", type(self).__name__, type(item).__qualname__)


class Address:
    """Where to send a :class:`MailboxActor` messages: its pykka ref (for its
    life), its mailbox (for its messages) and the actor (whether it has
    retired, and how it refuses a message that arrived too late)."""

    __slots__ = ("ref", "mailbox", "actor")

    def __init__(self, actor: MailboxActor) -> None:
        self.ref = actor.actor_ref
        self.mailbox = actor.mailbox
        self.actor = actor

    def tell(self, message: Any) -> None:
        """Queue ``message``; raises ``pykka.ActorDeadError`` once the actor
        has stopped. A message that lands after the actor took ``RETIRE``
        is refused (``MailboxActor.refuse``), never left unread."""
        if not self.ref.is_alive():
            raise pykka.ActorDeadError(f"{self.ref} is stopped")
        self.mailbox.put(message)
        actor = self.actor
        if actor.retired:
            # It retired after the check above: it may have emptied its
            # mailbox before this put landed. What is left is refused here.
            actor.refuse_queued()

    def __repr__(self) -> str:
        return f"<Address {self.ref}>"


class RegistryRef(pykka.ActorRef[Any]):
    """``rt.registry``: a pykka ``ActorRef`` whose :meth:`ask` answers a
    request of :mod:`dsh_actors.messages` when the work is done (the
    registry forwards it and replies later), not when the registry has
    handled the message. Other messages go through pykka's own ``ask``."""

    def __init__(
        self, actor: Any, pending: PendingReplies, waiting: Callable[[Any], AbstractContextManager[Any]]
    ) -> None:
        super().__init__(actor)
        # The runtime's: an answer still pending when it has stopped fails.
        self._pending = pending
        # waiting(message): what a blocking ask waits in (the runtime's: it
        # refuses a wait that would block the loop the work needs, and
        # lends the calling actor's slot meanwhile, as rt.tools.execute does).
        self._waiting = waiting
        # The registry's own check of what it understands: one rule, asked
        # here so that an asker gets the error (a handler's is only logged).
        self._check: Callable[[Any], None] = type(actor).check_message

    def ask(self, message: Any, *, block: bool = True, timeout: float | None = None) -> Any:
        if type(message).__module__ == "pykka.messages":
            return super().ask(message, block=block, timeout=timeout)  # pykka's own (proxies, stop)
        self._check(message)
        if not hasattr(message, "reply"):  # understood, answered by nobody: like a tell
            self.tell(message)
            return None if block else _answered(None)
        # (Before anything is sent: a wait that would block the loop the
        # work needs is refused.)
        wait = self._waiting(message) if block else None
        answer: Future[Any] = Future()
        theirs = message.reply
        if theirs is not None:
            answer.add_done_callback(lambda done: _copy(done, theirs))
        try:
            self.tell(replace(message, reply=answer))
        except pykka.ActorDeadError as exc:
            settle(answer, error=exc)
        if not block:
            out: pykka.ThreadingFuture[Any] = pykka.ThreadingFuture()
            answer.add_done_callback(lambda done: _to_pykka(done, out))
            return out
        with self._pending.tracked(answer, lambda: pykka.ActorDeadError(f"{self} stopped before answering")):
            assert wait is not None
            with wait:
                try:
                    return answer.result(timeout=timeout)
                except FutureTimeout:
                    raise pykka.Timeout(f"{timeout} seconds") from None


def _answered(value: Any) -> pykka.ThreadingFuture[Any]:
    out: pykka.ThreadingFuture[Any] = pykka.ThreadingFuture()
    out.set(value)
    return out


def _copy(done: Future[Any], theirs: Any) -> None:
    if done.cancelled():
        settle(theirs, error=RuntimeError("cancelled"))
    elif done.exception() is not None:
        settle(theirs, error=done.exception())
    else:
        settle(theirs, done.result())


def _to_pykka(done: Future[Any], out: pykka.ThreadingFuture[Any]) -> None:
    exc = done.exception()
    if exc is not None:
        out.set_exception((type(exc), exc, exc.__traceback__))
    else:
        out.set(done.result())
