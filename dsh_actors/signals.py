"""Abort signals: a level-triggered, thread-safe cancellation flag, and fusion.

A running tool body cannot read a mailbox, so an :class:`AbortSignal` is the
one piece of state the runtime shares between threads (ARCHITECTURE.md, "The
abort flag itself"). It follows trio's model rather than an event's:

* **Level-triggered.** Once aborted, always aborted: every later
  :attr:`~AbortSignal.aborted`, :meth:`~AbortSignal.wait` and
  :meth:`~AbortSignal.add_callback` sees it.
* **First reason wins.** Only the first :meth:`AbortController.abort` takes
  effect and returns ``True``; later ones are no-ops returning ``False``.
* **Fusion is a subscription.** :meth:`AbortSignal.any` returns a child
  subscribed to each parent. The child unsubscribes from *every* parent as
  soon as it fires or is closed, so a long-lived signal never accumulates
  listeners (Node's ``AbortSignal.any`` leaked exactly there,
  nodejs/node#55351). The signal of ``AbortController(*parents)`` is the
  same, except that it subscribes only when something first subscribes to
  it or waits on it; until then its reads look at the parents.

Each signal has one small lock guarding its state; callbacks never run under
it, so a callback may read the signal, subscribe, unsubscribe or abort other
signals freely.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from functools import partial
from numbers import Real
from operator import attrgetter
from types import TracebackType
from typing import TYPE_CHECKING, Final

from .errors import AbortError, InvalidTypeError, InvalidValueError, callable_name, log_exception, safe_repr

__all__ = ["AbortCallback", "AbortController", "AbortSignal", "Unsubscribe"]

AbortCallback = Callable[["AbortSignal"], object]
"""``fn(signal)``, run once when the signal aborts (see :meth:`AbortSignal.add_callback`)."""

Unsubscribe = Callable[[], None]
"""Removes one subscription; idempotent and O(1)."""


class _Pending:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<pending>"


# ``_reason is _PENDING`` is the whole "not aborted" state: one slot, written
# once under the lock, so a lock-free reader sees the flag and the reason
# change together.
_PENDING: Final = _Pending()


def _noop() -> None:
    return None


def _not_callable(fn: object) -> InvalidTypeError:
    return InvalidTypeError(
        f"add_callback() takes a function, fn(signal), not {type(fn).__qualname__} {safe_repr(fn)[:60]} "
        "(pass the function itself, not what calling it returned)"
    )


def _seconds(timeout: object) -> float | None:
    """``wait(timeout=...)`` as :meth:`threading.Event.wait` takes it: None
    (no limit) for one longer than the platform can wait."""
    if isinstance(timeout, int) and type(timeout) is not bool:  # (compared exactly: past a float's range too)
        return None if timeout > threading.TIMEOUT_MAX else float(timeout)
    if type(timeout) is bool or not isinstance(timeout, Real):
        raise InvalidTypeError(f"wait(timeout=...) is a number of seconds or None, not {type(timeout).__qualname__}")
    seconds = float(timeout)
    if seconds != seconds:
        raise InvalidValueError("wait(timeout=...) is a number of seconds or None, not NaN")
    return None if seconds > threading.TIMEOUT_MAX else seconds


# Stamps each abort in the order aborts happen (``next`` on a count is atomic
# under the GIL), so a signal fused *after* several parents aborted can take
# the reason of the one that aborted first, as it would have had it been
# subscribed all along (see :func:`fuse_late`).
_abort_order = itertools.count(1)


class AbortSignal:
    """A level-triggered, thread-safe abort flag.

    Obtain one from :class:`AbortController` (which can abort it) or from
    :meth:`AbortSignal.any` (which aborts when a parent does). A bare
    ``AbortSignal()`` has no controller and never aborts.

    Signals compare and hash by identity. Creating one is cheap (a lock and
    an empty dict); the :class:`threading.Event` behind :meth:`wait` is made
    only when somebody actually waits.
    """

    __slots__ = (
        "_lock",
        "_reason",
        "_callbacks",
        "_next_token",
        "_event",
        "_links",
        "_closed",
        "_order",
        "_aborted",
        "__weakref__",
    )

    _lock: threading.Lock
    _reason: object
    # Pending callbacks keyed by a per-signal token, so unsubscribe is O(1).
    # Invariant: empty once the signal has aborted and dispatch has finished.
    _callbacks: dict[int, AbortCallback]
    _next_token: int
    _event: threading.Event | None
    # ``None`` for a plain signal. For a fused signal: the unsubscribers of
    # its live parent subscriptions. Invariant: empty once it fired or closed.
    _links: list[Unsubscribe] | None
    # Only a fused signal is ever closed; a closed signal never aborts.
    _closed: bool
    # When it aborted, from ``_abort_order`` (0 while pending). Written
    # before ``_reason``, so a reader that sees the reason sees the order.
    _order: int
    # What ``aborted`` reads: True once ``_reason`` is written (after it, so
    # a reader that sees True sees the reason). A slot read through a C
    # getter: the runtime reads it several times a call.
    _aborted: bool

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reason = _PENDING
        self._callbacks = {}
        self._next_token = 0
        self._event = None
        self._links = None
        self._closed = False
        self._order = 0
        self._aborted = False

    # -- reading ------------------------------------------------------------

    if TYPE_CHECKING:

        @property
        def aborted(self) -> bool:
            """Whether the signal has aborted; once ``True``, always ``True``. Lock-free
            (but for a controller's with parents, see :class:`AbortController`)."""

    else:
        aborted = property(
            attrgetter("_aborted"),
            doc=(
                "Whether the signal has aborted; once ``True``, always ``True``. Lock-free (but for a "
                "controller's with parents, see :class:`AbortController`)."
            ),
        )

    @property
    def reason(self) -> object:
        """The reason given to the first abort (an :class:`AbortError` when
        none was given); ``None`` while the signal is pending."""
        reason = self._reason
        return None if reason is _PENDING else reason

    @property
    def listener_count(self) -> int:
        """How many callbacks are subscribed right now (a debugging aid:
        fused children that are still open count one each)."""
        return len(self._callbacks)

    def wait(self, timeout: float | None = None) -> bool:
        """Block the calling thread until the signal aborts or ``timeout``
        seconds pass; return :attr:`aborted`.

        Returns ``True`` at once if the signal has already aborted. Waiting
        does not poll: it sleeps on a :class:`threading.Event`. A signal that
        can no longer abort (no controller, or a closed fused signal) makes
        ``wait()`` without a timeout block forever, as does a timeout
        longer than the platform can wait (``math.inf``). A timeout that is
        not a number of seconds raises ``InvalidTypeError`` (NaN:
        ``InvalidValueError``).
        """
        if timeout is not None:
            timeout = _seconds(timeout)
        if self._reason is not _PENDING:
            return True
        with self._lock:
            if self._reason is not _PENDING:
                return True
            event = self._event
            if event is None:
                event = self._event = threading.Event()
        return event.wait(timeout)

    def throw_if_aborted(self) -> None:
        """Raise if the signal has aborted, else return.

        Raises the reason itself when it is an exception instance (the same
        instance every time), otherwise ``AbortError(reason=reason)``.
        """
        reason = self._reason
        if reason is _PENDING:
            return
        if isinstance(reason, BaseException):
            raise reason
        raise AbortError(reason=reason)

    # -- subscribing ----------------------------------------------------------

    def add_callback(self, fn: AbortCallback) -> Unsubscribe:
        """Call ``fn(signal)`` once, when the signal aborts; return an
        unsubscribe function (idempotent, O(1)).

        Which thread runs ``fn``: the thread that aborts (inside its
        :meth:`AbortController.abort` call, or inside the parent's abort for
        a fused signal), after :attr:`aborted` is already visible and with no
        lock held. If the signal has already aborted, ``fn`` runs right now
        on the calling thread and the returned unsubscribe does nothing.

        ``fn`` must not block: it delays the aborter and every callback after
        it. Exceptions it raises are logged and contained; they never reach
        the aborter and never stop the other callbacks. Callbacks run in
        subscription order; one may unsubscribe itself or others meanwhile
        (an unsubscribed callback that has not run yet will not run).

        On a closed fused signal that has not aborted (it never will),
        ``fn`` is not kept and the unsubscribe does nothing. ``fn`` that is
        not callable raises ``InvalidTypeError`` here, not when the signal
        aborts.
        """
        if not callable(fn):
            raise _not_callable(fn)
        self._lock.acquire()
        try:
            if self._reason is _PENDING:
                if self._closed:
                    return _noop
                token = self._next_token
                self._next_token = token + 1
                self._callbacks[token] = fn
                return partial(self._unsubscribe, token)
        finally:
            self._lock.release()
        self._invoke(fn)
        return _noop

    def _unsubscribe(self, token: int) -> None:
        self._lock.acquire()
        try:
            self._callbacks.pop(token, None)
        finally:
            self._lock.release()

    def _invoke(self, fn: AbortCallback) -> None:
        try:
            fn(self)
        except BaseException as exc:  # noqa: BLE001 - one callback must not stop the fan-out
            log_exception(exc, "abort callback {} raised; ignored", callable_name(fn))

    # -- aborting -------------------------------------------------------------

    def _abort(self, reason: object, order: int = 0) -> bool:
        """Abort with ``reason`` unless already aborted (or closed); return
        whether this call did it. Runs the callbacks on the calling thread.
        ``order``: its place in abort order, when it takes a parent's
        (0: now)."""
        with self._lock:
            if self._reason is not _PENDING or self._closed:
                return False
            self._order = order if order else next(_abort_order)
            self._reason = reason
            self._aborted = True
            event = self._event
            links = self._links
            if links is not None:
                self._links = []
            tokens = list(self._callbacks) if self._callbacks else None
        # `aborted` is now visible to every thread; nothing below holds our lock.
        if event is not None:
            event.set()
        if links:
            for unlink in links:
                unlink()
        if tokens is not None:
            for token in tokens:
                # Pop before running: an earlier callback may have
                # unsubscribed this one. No callback is added after the abort
                # (add_callback runs it at once), so `tokens` is complete.
                with self._lock:
                    fn = self._callbacks.pop(token, None)
                if fn is not None:
                    self._invoke(fn)
        return True

    # -- fusion ---------------------------------------------------------------

    @classmethod
    def any(cls, *signals: AbortSignal) -> AbortSignal:
        """A fresh signal that aborts, with that parent's reason, as soon as
        any of ``signals`` aborts (first abort wins).

        If a parent has already aborted, the result is born aborted with the
        reason of the first such parent in argument order. With no parents
        the result never aborts; with one it is still a distinct signal.
        Passing a signal twice subscribes once.

        The result subscribes once to each parent and unsubscribes from all
        of them when it fires or when it is closed (:meth:`close`),
        whichever comes first. Close it when the work it guards settles (or
        use it as a context manager): an unclosed child of a long-lived
        parent stays subscribed, and so stays alive, for as long as the
        parent does. Its callbacks run on the thread that aborted the parent.
        """
        child = cls()
        _fuse(child, signals, "AbortSignal.any()")
        return child

    def _on_parent_abort(self, parent: AbortSignal) -> None:
        self._abort(parent._reason)

    def close(self) -> None:
        """Detach a fused signal from its parents; idempotent.

        For a signal from :meth:`any`: unsubscribes from every parent (each
        parent's :attr:`listener_count` drops by one) and, if the signal has
        not aborted, freezes it as not aborted for good and drops its pending
        callbacks, which could never run. ``aborted``, ``reason`` and
        ``wait()`` keep working. Closing a fused signal that already fired
        changes nothing (it detached when it fired).

        For a signal of ``AbortController(*parents)`` with parents, the
        same: its controller can no longer abort it either. For a plain
        controller's signal (or a bare ``AbortSignal()``) ``close()`` does
        nothing: its controller may still abort it, and its callbacks belong
        to their subscribers, who remove them with their unsubscribe
        (dropping them here would silently disconnect fused children).
        """
        self._lock.acquire()
        try:
            links = self._links
            if links is None or self._closed:
                return
            self._closed = True
            self._links = []
            if self._reason is _PENDING:
                self._callbacks = {}
        finally:
            self._lock.release()
        for unlink in links:
            unlink()

    def __enter__(self) -> AbortSignal:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        reason = self._reason
        if reason is not _PENDING:
            return f"<AbortSignal aborted reason={safe_repr(reason)}>"
        if self._closed:
            return "<AbortSignal pending closed>"
        return f"<AbortSignal pending listeners={len(self._callbacks)}>"


class _Following(AbortSignal):
    """The signal of ``AbortController(*parents)``: a fused signal that
    subscribes to its parents only when something first subscribes to it
    (:meth:`add_callback`, a fused child) or waits on it (:meth:`wait`).
    Until that subscription is complete, each read of its state
    (``aborted``, ``reason``, ``wait``, ``abort``, ``close``) looks at the
    parents and takes the abort of the one that aborted first, in that
    parent's place in abort order: what the subscription would have
    delivered. Such a read may take the signal's lock, and it runs the
    callbacks (subscribed while it linked) on the reading thread. A fused
    child of it hears of such an abort when the linking or a read of this
    signal delivers it, not before.

    State: ``_parents``, the parents, until the subscription to all of them
    is complete (or it closed); ``None`` after. ``_links`` is ``None`` until
    a first subscriber starts linking (a list from then on). Invariant:
    while ``_links`` is ``None`` the signal has no callbacks and no waiter.
    """

    __slots__ = ("_parents",)

    _parents: tuple[AbortSignal, ...] | None

    def __init__(self, parents: tuple[AbortSignal, ...]) -> None:
        super().__init__()
        self._parents = parents  # (repeats dropped when it links)
        for parent in parents:
            if parent.aborted:
                # Born aborted, as AbortSignal.any: with the first aborted
                # parent in argument order, in its place in abort order.
                self._order = parent._order
                self._reason = parent._reason
                self._aborted = True
                self._parents = None
                return

    if not TYPE_CHECKING:

        @property
        def aborted(self) -> bool:
            return self._aborted or (self._parents is not None and self._caught_up())

    def _caught_up(self) -> bool:
        """Abort with the parent that aborted first, if one has; return
        whether the signal has aborted."""
        if self._aborted:
            return True
        parents = self._parents
        if parents is None:
            return False
        for parent in parents:
            if parent.aborted:
                break
        else:
            return False
        # One has. A second look, begun after that abort, sees every parent
        # that aborted before it: the first of them is the earliest.
        first = parent
        for parent in parents:
            if parent.aborted and parent._order < first._order:
                first = parent
        AbortSignal._abort(self, first._reason, first._order)
        return self._aborted

    def _link(self) -> None:
        """Subscribe to the parents (once). Reads keep looking at the
        parents until every subscription is made, so an abort that lands
        meanwhile is neither lost nor taken out of order."""
        self._lock.acquire()
        try:
            parents = self._parents
            if parents is None or self._links is not None or self._reason is not _PENDING or self._closed:
                return  # linking or linked already, aborted, or closed
            self._links = []
        finally:
            self._lock.release()
        if len(parents) > 1:
            parents = tuple(dict.fromkeys(parents))
        if not self._caught_up():
            _subscribe(self, parents)
        self._parents = None  # (every parent's abort now reaches it, or has)

    @property
    def reason(self) -> object:
        if self._parents is not None:
            self._caught_up()
        return AbortSignal.reason.fget(self)  # type: ignore[attr-defined]

    def wait(self, timeout: float | None = None) -> bool:
        if timeout is not None:
            timeout = _seconds(timeout)  # (before it links)
        if self._parents is not None:
            self._link()
            if self._caught_up():  # (another thread may be linking it still)
                return True
        return super().wait(timeout)

    def throw_if_aborted(self) -> None:
        if self._parents is not None:
            self._caught_up()
        super().throw_if_aborted()

    def add_callback(self, fn: AbortCallback) -> Unsubscribe:
        if not callable(fn):
            raise _not_callable(fn)  # (before it links)
        if self._parents is not None:
            self._link()
        return super().add_callback(fn)

    def _abort(self, reason: object, order: int = 0) -> bool:
        # A parent that aborted first wins (its controller's abort, or a
        # parent's callback while linking: either way the earliest).
        if self._parents is not None and self._caught_up():
            return False
        return super()._abort(reason, order)

    def close(self) -> None:
        if self._parents is not None:
            self._caught_up()  # a parent aborted before the close: it is aborted
        self._lock.acquire()
        try:
            if self._links is None and self._reason is _PENDING and not self._closed:
                # Never subscribed: nothing to undo. Pending for good.
                self._closed = True
                self._parents = None
                return
        finally:
            self._lock.release()
        super().close()  # (its subscriptions; or nothing, if aborted or closed)
        self._parents = None

    def __repr__(self) -> str:
        if self._parents is not None:
            self._caught_up()
        return super().__repr__()


class AbortController:
    """Owns an :class:`AbortSignal` and is the only way to abort it.

    ``AbortController(*parents)``: its signal also aborts, with that
    parent's reason, as soon as one of ``parents`` does (first abort wins,
    :meth:`abort` included), exactly like ``AbortSignal.any(*parents)``
    would, without a second signal: a deadline or a retry budget that must
    also follow a caller's signal. It is born aborted when a parent has
    aborted already. Close it (``controller.signal.close()``) when the work
    it guards settles: that unsubscribes it from the parents, and a closed
    signal that has not aborted never aborts (:meth:`abort` returns
    ``False``). Without parents nothing is subscribed and ``close()`` does
    nothing.

    With parents, the signal subscribes to them only when something first
    subscribes to it or waits on it; until then every read of its state
    (:attr:`~AbortSignal.aborted`, :attr:`~AbortSignal.reason`, ``wait``,
    ``abort``, ``close``) looks at the parents instead, and takes the abort of the one
    that aborted first, as a subscribed signal would have. A deadline that
    nobody waits on (a tool body that never reads its signal) then costs no
    subscription at all. What tells the two apart: a parent's
    :attr:`~AbortSignal.listener_count`; such a read may take the signal's
    lock (the one that finds a parent aborted); and a parent's abort that
    lands while a first subscriber is subscribing it to the parents reaches
    its callbacks (a fused child's included) on that subscriber's thread, or
    a reader's, rather than inside the parent's ``abort()``.
    """

    __slots__ = ("_signal",)

    def __init__(self, *parents: AbortSignal) -> None:
        if not parents:
            self._signal = AbortSignal()
            return
        for parent in parents:
            if not isinstance(parent, AbortSignal):
                raise InvalidTypeError(f"AbortController() takes AbortSignals, not {type(parent).__name__}")
        self._signal = _Following(parents)

    @property
    def signal(self) -> AbortSignal:
        """The signal this controller aborts."""
        return self._signal

    def abort(self, reason: object = None) -> bool:
        """Abort the signal; return ``True`` if this call did it, ``False``
        if it had already aborted (the first reason stays).

        ``reason=None`` means a fresh :class:`AbortError`. The signal's
        callbacks, and those of fused children that fire with it, run on the
        calling thread before this returns.
        """
        signal = self._signal
        if signal._reason is not _PENDING:
            return False
        return signal._abort(AbortError() if reason is None else reason)

    def __repr__(self) -> str:
        return f"<AbortController {self._signal!r}>"


def _fuse(child: AbortSignal, signals: tuple[AbortSignal, ...], where: str) -> None:
    """Make ``child``, a fresh signal (nobody else holds it yet), a fusion of
    ``signals``: born aborted if one has aborted, else subscribed to
    each (``any`` and ``AbortController(*parents)``)."""
    for signal in signals:
        if not isinstance(signal, AbortSignal):
            raise InvalidTypeError(f"{where} takes AbortSignals, not {type(signal).__name__}")
    count = len(signals)
    if count == 2:
        parents = signals if signals[0] is not signals[1] else signals[:1]
    elif count > 2:
        parents = tuple(dict.fromkeys(signals))
    else:
        parents = signals
    child._links = []
    for parent in parents:
        # (``aborted``: a following parent reads its own parents first.)
        if parent.aborted:
            # Born aborted: nothing to subscribe or notify. It aborted
            # "with" this parent, so it takes the parent's place in order.
            child._order = parent._order
            child._reason = parent._reason
            child._aborted = True
            return
    _subscribe(child, parents)


def _subscribe(child: AbortSignal, parents: tuple[AbortSignal, ...]) -> None:
    """Subscribe ``child`` (its ``_links`` an empty list, set under its lock
    or before anybody else held it) to each of ``parents`` (no repeats)."""
    links = child._links
    assert links is not None
    on_parent_abort = child._on_parent_abort
    for parent in parents:
        # A parent may abort, here or on another thread, at any point of
        # this loop, and a following signal may be closed meanwhile: a fire
        # or a close swaps `_links` out under the lock and unlinks what it
        # took; the check below unlinks whatever it missed.
        unlink = parent.add_callback(on_parent_abort)
        if unlink is not _noop:
            links.append(unlink)
        if child._reason is not _PENDING or child._closed:
            break
    child._lock.acquire()
    try:
        detached = child._reason is not _PENDING or child._closed
    finally:
        child._lock.release()
    if detached:
        # Invariant restored: a fired or closed fusion holds no subscription.
        for unlink in links:
            unlink()  # idempotent, so overlapping the fire's sweep is fine


def fuse_late(parents: tuple[AbortSignal, ...]) -> AbortSignal:
    """``AbortSignal.any(*parents)`` for a fused signal made lazily, some
    time after the moment it stands for (a tool body's signal, created when
    the body first reads ``ctx.signal``).

    The one difference from ``any``: when several parents have aborted
    already, the result takes the reason (and the place in abort order) of
    the parent that aborted *first*, not of the first in argument order,
    which is what a signal subscribed since that moment would have fired
    with. With at most one parent aborted the two are the same.
    """
    child = AbortSignal.any(*parents)
    if len(parents) > 1 and child._reason is not _PENDING:
        # Nobody else holds `child` yet and it has no callbacks or waiters;
        # an aborted signal ignores later parent aborts, so nothing races
        # these two writes.
        first = min((p for p in parents if p.aborted), key=_abort_order_of)  # (a following one reads its own)
        child._order = first._order
        child._reason = first._reason
    return child


def follow(child: AbortSignal, parent: AbortSignal) -> None:
    """``parent``, a parent of the fused ``child``, has aborted: ``child``
    aborts now with its reason, as its own subscription to ``parent`` is
    about to make it (that one is then a no-op: the first abort wins; a
    closed ``child`` never aborts). For a callback of ``parent`` that must
    leave ``child`` aborted before it goes on, whatever the order of the two
    subscriptions (a flight that cancels a body's task: the body must see
    its signal aborted when its ``await`` raises)."""
    child._on_parent_abort(parent)


def _abort_order_of(signal: AbortSignal) -> int:
    return signal._order
