"""The event bus: ``emit`` and ``waterfall`` dispatch, scope-filtered.

Listener lists are immutable tuples, one per scope (and one of the unscoped
listeners), each replaced when a listener of it comes or goes (copy on write),
so dispatching an event takes no lock and never waits for a subscriber. The
scopes' tuples are filed in a dict changed in place, so a change copies only
its own scope's tuple: subscribing a farm's thousands of scoped listeners
costs each the same, not the number already there (an unscoped one copies
the unscoped tuple, in C, which every event walks anyway). What a dispatch
needs is worked out at that change, not per event: whether each listener is
``async def``, and (when no listener of the event is scoped) the tuple every
event reaches.

Scope filtering: a listener subscribed with ``scope=agent`` sees events of
that agent and of its descendants; a listener without a scope sees every
event. ``tools/change`` is unfiltered: a change anywhere can affect every
agent's next request, so scoped listeners receive it too.

The events, their listeners' signatures and the threads that run them are in
the package docstring (:mod:`dsh_actors.events`).
"""

from __future__ import annotations

import difflib
import inspect
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from operator import attrgetter
from types import CoroutineType
from typing import Any, Final, Literal, TypeAlias, TypeVar, get_args

from loguru import logger

from ..definition import is_async_callable
from ..errors import (
    InvalidStateError,
    InvalidTypeError,
    InvalidValueError,
    RuntimeStoppedError,
    ToolPolicyError,
    callable_name,
    log_exception,
    safe_str,
)
from ..model import Agent

__all__ = [
    "EVENT_NAMES",
    "UNFILTERED_EVENTS",
    "Disposer",
    "EventBus",
    "EventName",
    "Listener",
    "disposer",
    "drop_coroutine",
    "in_scope",
]

T = TypeVar("T")
Listener = Callable[..., Any]

EventName: TypeAlias = Literal[
    "tools/pre-execute",
    "tools/execute",
    "tools/post-execute",
    "tools/result",
    "tools/change",
    "tools/ptc-dispatch-log",
    "tools/progress",
    "tools/deferred",
    "tools/approval",
    "tools/approval-request",
]
"""The events the runtime and the PTC executor dispatch (the bus itself
accepts any name: a plugin may dispatch events of its own)."""

#: Every :data:`EventName`, in the order of the table in the package docstring.
EVENT_NAMES: Final[tuple[EventName, ...]] = get_args(EventName)

#: Events every listener receives whatever its scope.
UNFILTERED_EVENTS = frozenset({"tools/change"})

#: The events whose listeners decide what a call runs with (its prepare):
#: subscribing to or disposing of one of them moves ``EventBus.version``.
PREPARE_EVENTS = frozenset({"tools/pre-execute"})

#: The runtime's events whose listeners may be ``async def`` (awaited on
#: the batch's loop); an ``async def`` listener of any other of them is
#: refused when it subscribes (its coroutine would never run).
ASYNC_EVENTS = frozenset({"tools/pre-execute"})


#: What a listener of each of the runtime's events is called with (the
#: parameter names the reference gives): one that cannot take them is
#: refused when it subscribes, not at its first event.
LISTENER_ARGUMENTS: Final[dict[str, tuple[str, ...]]] = {
    "tools/pre-execute": ("execution", "next"),
    "tools/execute": ("execution", "next"),
    "tools/post-execute": ("execution", "result", "next"),
    "tools/result": ("execution", "result"),
    "tools/change": (),
    "tools/ptc-dispatch-log": ("dispatch", "next"),
    "tools/progress": ("execution", "progress"),
    "tools/deferred": ("execution", "ask"),
    "tools/approval": ("execution", "ask", "answer"),
    "tools/approval-request": ("execution", "ask"),
}


def arity_problem(name: str, listener: Callable[..., Any]) -> str | None:
    """Why ``listener`` cannot be called as a ``name`` listener is (its
    positional arguments, :data:`LISTENER_ARGUMENTS`), or None (also when
    Python cannot tell: a builtin without a signature)."""
    arguments = LISTENER_ARGUMENTS.get(name)
    if arguments is None:
        return None
    try:
        signature = inspect.signature(listener)
    except (TypeError, ValueError):
        return None
    try:
        signature.bind(*arguments)
    except TypeError:
        shown = ", ".join(arguments)
        return (
            f"{callable_name(listener)} cannot be a {name!r} listener: it is called as fn({shown}), "
            f"{len(arguments)} positional argument{'' if len(arguments) == 1 else 's'}, and its signature is "
            f"{signature}"
        )
    return None


def unknown_event_problem(name: str) -> str | None:
    """Why ``name``, not one of the runtime's events, cannot be subscribed
    to, or None: a plugin's own event (``"my-plugin/event"``) may be. A
    name in the runtime's namespace (``tools/``, or ``tool/``), or one of
    its events without it (``"pre-execute"``), is a misspelling: a
    listener subscribed under it would never run (a policy that denies,
    silently off)."""
    namespace, slash, bare = name.lower().replace("_", "-").rpartition("/")
    if slash:
        if namespace not in ("tools", "tool"):
            return None
        close = difflib.get_close_matches(f"tools/{bare}", EVENT_NAMES, n=1, cutoff=0.75)
    else:
        close = [known for known in EVENT_NAMES if known == f"tools/{bare}"]
        if not close:
            return None
    hint = f"did you mean {close[0]!r}? " if close else ""
    return (
        f"no event is named {safe_str(name)!r}: {hint}the runtime's events are "
        f"{', '.join(repr(known) for known in EVENT_NAMES)} (a plugin's own event takes a name of its own, "
        "such as 'my-plugin/event')"
    )


class Disposer:
    """Undoes exactly one effect. Calling it again does nothing."""

    __slots__ = ("_fn", "_lock", "__weakref__")

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._fn: Callable[[], Any] | None = fn
        self._lock = threading.Lock()

    @property
    def disposed(self) -> bool:
        return self._fn is None

    def __call__(self) -> None:
        with self._lock:
            fn, self._fn = self._fn, None
        if fn is not None:
            fn()

    def __repr__(self) -> str:
        return f"<Disposer {'disposed' if self._fn is None else 'active'}>"


def disposer(fn: Callable[[], Any]) -> Disposer:
    """Wrap ``fn`` as an idempotent :class:`Disposer`."""
    return Disposer(fn)


@dataclass(frozen=True, slots=True, eq=False)
class _Entry:
    listener: Listener
    scope: Agent | None
    order: int  # where it runs among the event's listeners: prepended ones < 0, newest first; appended ones after
    is_async: bool  # an ``async def`` (or async ``__call__``): decided once, when it subscribes


class _Subscribers:
    """One event's subscriptions, changed in place under the bus's lock. A
    dispatch reads only immutable tuples from it, each replaced by a change
    (never altered), so a dispatch keeps the listeners it started with.
    With no scoped listener (the common case) every event reaches the
    unscoped ones, :attr:`all` (and :attr:`all_listeners`, their
    functions); otherwise the scoped ones are filed by their scope, so an
    event looks up only its agent's chain, never every agent's listeners,
    and a change copies only its own scope's tuple (a farm of thousands of
    agents, each with listeners scoped to it). Every tuple is in
    ``_Entry.order``."""

    __slots__ = ("unfiltered", "count", "all", "all_listeners", "unscoped", "unscoped_listeners", "scoped")

    def __init__(self, unfiltered: bool) -> None:
        self.unfiltered = unfiltered  # (every entry is filed as unscoped: an event of any agent reaches it)
        self.count = 0
        self.unscoped: tuple[_Entry, ...] = ()
        self.unscoped_listeners: tuple[Listener, ...] = ()  # (each unscoped entry's listener, in step)
        self.scoped: dict[Agent, tuple[_Entry, ...]] = {}
        # The unscoped ones, when an event's agent cannot filter any out.
        self.all: tuple[_Entry, ...] | None = ()
        self.all_listeners: tuple[Listener, ...] | None = ()

    def add(self, entry: _Entry) -> None:
        first = entry.order < 0
        scope = None if self.unfiltered else entry.scope
        if scope is None:
            entries, listeners = self.unscoped, self.unscoped_listeners
            if first:
                self.unscoped, self.unscoped_listeners = (entry, *entries), (entry.listener, *listeners)
            else:
                self.unscoped, self.unscoped_listeners = (*entries, entry), (*listeners, entry.listener)
        else:
            group = self.scoped.get(scope, ())
            self.scoped[scope] = (entry, *group) if first else (*group, entry)
        self.count += 1
        self._refile()

    def remove(self, entry: _Entry) -> None:
        scope = None if self.unfiltered else entry.scope
        if scope is None:
            entries = self.unscoped
            at = entries.index(entry)  # (by identity: _Entry has no __eq__)
            listeners = self.unscoped_listeners
            self.unscoped = entries[:at] + entries[at + 1 :]
            self.unscoped_listeners = listeners[:at] + listeners[at + 1 :]
        else:
            group = self.scoped[scope]
            at = group.index(entry)
            if len(group) > 1:
                self.scoped[scope] = group[:at] + group[at + 1 :]
            else:
                del self.scoped[scope]
        self.count -= 1
        self._refile()

    def _refile(self) -> None:
        if self.scoped:
            self.all = self.all_listeners = None
        else:
            self.all, self.all_listeners = self.unscoped, self.unscoped_listeners

    def reaches(self, agent: Agent | None) -> bool:
        """Whether an event of ``agent`` reaches any entry."""
        if self.all is not None or self.unscoped:
            return True
        scoped = self.scoped
        node = agent
        while node is not None:
            if node in scoped:
                return True
            node = node.parent
        return False

    def reaching(self, agent: Agent | None) -> tuple[_Entry, ...]:
        """The entries an event of ``agent`` reaches, outermost first: the
        unscoped ones and those scoped to ``agent`` or an ancestor."""
        found = self.all
        if found is not None:
            return found
        parts = [self.unscoped] if self.unscoped else []
        scoped = self.scoped
        node = agent
        while node is not None:
            found = scoped.get(node)
            if found is not None:
                parts.append(found)
            node = node.parent
        if not parts:
            return ()
        return parts[0] if len(parts) == 1 else tuple(sorted(itertools.chain.from_iterable(parts), key=_order))


_order = attrgetter("order")


def in_scope(scope: Agent, agent: Agent | None) -> bool:
    """Whether ``agent`` is ``scope`` or one of its descendants."""
    node = agent
    while node is not None:
        if node is scope:
            return True
        node = node.parent
    return False


def drop_coroutine(name: str, fn: Callable[..., Any], coroutine: Any) -> None:
    """A notified listener ``fn`` of ``name`` returned ``coroutine``: an
    ``async def`` behind a sync wrapper (a decorator's), which ``on()``
    could not see. Nothing awaits it where notifications are sent, so it is
    closed (its body never runs) and logged, naming the fix."""
    coroutine.close()
    logger.error(
        "{} listener {} returned a coroutine, which nothing awaits (its body did not run): make it a plain def",
        name,
        callable_name(fn),
    )


class EventBus:
    """Subscriptions and dispatch for the ``tools/*`` events.

    Dispatch runs listeners on the thread that dispatches: the docstring of
    each event's producer says which thread that is. Subscribing and
    disposing are thread-safe and may happen during a dispatch; a dispatch
    already running keeps the listener list it started with.

    Its owner closes it (:meth:`close`; ``ToolRuntime.stop`` does): then
    :meth:`on` raises, while dispatch and disposers keep working, so calls
    that are draining still reach their listeners.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lists: dict[str, _Subscribers] = {}
        self._seq = itertools.count(1)  # (from 1: a prepended entry's order is its -seq)
        self._closed: str | None = None
        # Moves whenever a listener of PREPARE_EVENTS comes or goes (under
        # _lock; read without it): a call prepared under an older version
        # is prepared again before its body starts (the batch scheduler).
        self.version = 0

    def close(self, reason: str = "the event bus is closed") -> None:
        """Refuse new subscriptions from now on: :meth:`on` raises
        ``RuntimeError(reason)``. Idempotent (the first reason stays)."""
        with self._lock:
            if self._closed is None:
                self._closed = reason

    @property
    def closed(self) -> bool:
        return self._closed is not None

    def on(
        self,
        name: str,
        listener: Listener,
        scope: Agent | None = None,
        prepend: bool = False,
    ) -> Disposer:
        """Subscribe ``listener`` to ``name``; returns its disposer.

        ``scope``: receive only events of that agent and its descendants.
        ``prepend``: put the listener first (outermost in a waterfall).
        """
        if type(name) is not str:
            raise InvalidTypeError(f"an event name is a str, such as 'tools/result', not {type(name).__qualname__}")
        if name not in EVENT_NAMES:
            unknown = unknown_event_problem(name)
            if unknown is not None:
                raise InvalidValueError(unknown)
        if not callable(listener):
            raise InvalidTypeError(f"listener for {name!r} must be callable")
        arity = arity_problem(name, listener)
        if arity is not None:
            raise InvalidTypeError(arity)
        if scope is not None and not isinstance(scope, Agent):
            raise InvalidTypeError(f"on(scope=...) is an Agent or None, not {type(scope).__qualname__}")
        if type(prepend) is not bool:
            raise InvalidTypeError(f"on(prepend=...) is True or False, not {safe_str(prepend)!r}")
        is_async = is_async_callable(listener)
        if is_async and name in EVENT_NAMES and name not in ASYNC_EVENTS:
            raise InvalidTypeError(
                f"{callable_name(listener)} is async def, but {name!r} listeners run on the runtime's threads "
                "and are never awaited: make it a plain def (only 'tools/pre-execute' listeners and "
                "approval services may be async def)"
            )
        with self._lock:
            if self._closed is not None:
                raise RuntimeStoppedError(self._closed)
            seq = next(self._seq)
            entry = _Entry(listener, scope, -seq if prepend else seq, is_async)
            subscribers = self._lists.get(name)
            if subscribers is None:
                subscribers = _Subscribers(name in UNFILTERED_EVENTS)
            subscribers.add(entry)
            self._lists[name] = subscribers  # (once it has its entry: has_listeners tells)
            if name in PREPARE_EVENTS:
                self.version += 1

        def remove() -> None:
            # (Called once, by its Disposer: the entry is in the event's
            # subscriptions, which stay filed while they hold an entry.)
            with self._lock:
                subscribers = self._lists[name]
                subscribers.remove(entry)
                if not subscribers.count:
                    del self._lists[name]
                if name in PREPARE_EVENTS:
                    self.version += 1

        return Disposer(remove)

    def has_listeners(self, name: str) -> bool:
        return name in self._lists

    def observed(self, names: tuple[str, ...], agent: Agent | None = None) -> bool:
        """Whether an event of ``agent`` named any of ``names`` would reach a
        listener (what ``any(listeners(n, agent) for n in names)`` says,
        without building the tuples: the executor asks it per call)."""
        lists = self._lists
        if not lists:
            return False
        for name in names:
            subscribers = lists.get(name)
            if subscribers is not None and subscribers.reaches(agent):
                return True
        return False

    def listeners(self, name: str, agent: Agent | None = None) -> tuple[Listener, ...]:
        """The listeners an event of ``agent`` reaches, outermost first."""
        subscribers = self._lists.get(name)
        if subscribers is None:
            return ()
        listeners = subscribers.all_listeners
        if listeners is not None:
            return listeners
        return tuple(e.listener for e in subscribers.reaching(agent))

    def emit(self, name: str, *args: Any, agent: Agent | None = None) -> None:
        """Call every listener with ``args``; a listener that raises is
        logged (loguru) and the others still run."""
        if name not in self._lists:
            return  # (the executor emits per call: no frame for no listener)
        for fn in self.listeners(name, agent):
            try:
                result = fn(*args)
            except BaseException as exc:  # noqa: BLE001 - observers are contained
                log_exception(exc, "{} listener {} raised: {}", name, callable_name(fn), safe_str(exc))
                continue
            if type(result) is CoroutineType:
                drop_coroutine(name, fn, result)

    def waterfall(
        self,
        name: str,
        default: Callable[[], T],
        *args: Any,
        agent: Agent | None = None,
        awaiter: Callable[[Any], Any] | None = None,
    ) -> T:
        """Run ``name``'s listeners as a chain ending in ``default``.

        Each listener is called ``fn(*args, next)``; ``next()`` (no
        arguments) runs the rest of the chain and returns its result (the
        last listener's ``next`` is ``default`` itself). A
        listener that returns without calling ``next()`` vetoes the rest.
        ``next`` may be called more than once (a retry wrapper does).
        Exceptions propagate to the caller, who decides what they mean.

        ``awaiter(coroutine)``: how this caller waits for an ``async def``
        listener (the pipeline runs it on the batch's event loop). An async
        listener gets an async ``next``: ``decision = await next()`` runs
        the rest of the chain on that loop; one that returns ``next()``
        without awaiting it raises ``InvalidStateError`` saying so. Without
        an awaiter, a coroutine a listener of one of the runtime's other
        waterfalls returns (an ``async def`` behind a sync decorator: nothing
        awaits those) is closed and raises ``ToolPolicyError`` naming the
        fix; a plugin's own event's coroutine is its result.
        """
        subscribers = self._lists.get(name)
        if subscribers is None:
            return default()
        chain = subscribers.all  # (reaching()'s common case, one call less)
        if chain is None:
            chain = subscribers.reaching(agent)
        if not chain:
            return default()
        if awaiter is None:
            awaiter = _REFUSERS.get(name)  # (a runtime event nothing awaits: refuse a coroutine)
        return _run_chain(chain, 0, default, args, awaiter)


def _refuse_coroutine(name: str, coroutine: Any) -> Any:
    """The ``awaiter`` of a runtime waterfall nothing awaits: a sync
    listener of ``name`` returned ``coroutine``, an ``async def`` behind a
    sync wrapper (a decorator's) that ``on()`` could not see. Closed (its
    body never runs), and the call fails naming the fix."""
    coroutine.close()
    raise ToolPolicyError(
        name,
        f"a listener returned a coroutine ({safe_str(getattr(coroutine, '__qualname__', '?'))}), which nothing "
        f"awaits (its body did not run): {name!r} listeners run on the runtime's threads, so make it a plain def",
    )


#: The awaiter of each runtime waterfall whose listeners are never awaited.
_REFUSERS: Final[dict[str, Callable[[Any], Any]]] = {
    name: partial(_refuse_coroutine, name) for name in EVENT_NAMES if name not in ASYNC_EVENTS
}


def _awaited(fn: Listener, value: Any) -> Any:
    """What the ``async def`` listener ``fn`` returned, once awaited: refused
    when it is the coroutine of its own ``next()``, which it forgot to
    await (the rest of the chain never ran)."""
    if type(value) is CoroutineType and value.cr_code is _arun_chain.__code__:
        value.close()
        raise InvalidStateError(
            f"the async listener {callable_name(fn)} returned next() without awaiting it, so the rest of the "
            "chain never ran: return await next()"
        )
    return value


def _run_chain(
    chain: tuple[_Entry, ...],
    index: int,
    default: Callable[[], T],
    args: tuple[Any, ...],
    awaiter: Callable[[Any], Any] | None = None,
) -> T:
    if index == len(chain):
        return default()
    entry = chain[index]
    fn = entry.listener
    if awaiter is not None and entry.is_async:

        def anext_() -> Any:
            return _arun_chain(chain, index + 1, default, args, awaiter)

        return _awaited(fn, awaiter(fn(*args, anext_)))  # type: ignore[no-any-return]

    if index + 1 == len(chain):
        next_ = default  # the last listener's next runs the default itself (two frames less)
    else:

        def next_() -> T:
            return _run_chain(chain, index + 1, default, args, awaiter)

    result: T = fn(*args, next_)
    if awaiter is not None and isinstance(result, CoroutineType):  # (inspect.iscoroutine, one call less)
        return awaiter(result)  # type: ignore[no-any-return]
    return result


async def _arun_chain(
    chain: tuple[_Entry, ...],
    index: int,
    default: Callable[[], T],
    args: tuple[Any, ...],
    awaiter: Callable[[Any], Any],
) -> T:
    """The rest of a chain, awaited by an async listener (on its loop): async
    listeners are awaited here; a sync one is called here with a sync
    ``next``, which fails with a clear error if it reaches an async
    listener after it (the loop's own thread cannot wait for one)."""
    if index == len(chain):
        return default()
    entry = chain[index]
    fn = entry.listener
    if entry.is_async:

        def anext_() -> Any:
            return _arun_chain(chain, index + 1, default, args, awaiter)

        return _awaited(fn, await fn(*args, anext_))  # type: ignore[no-any-return]

    def refuse(coro: Any) -> Any:
        # An async listener reached from this sync listener's next(): its
        # caller is the loop's own thread, which cannot wait for it.
        coro.close()
        raise InvalidStateError(
            f"the sync listener {callable_name(fn)} runs on the event loop of the async listener before it, "
            "and its next() reached another async listener, which it cannot wait for on that loop's own "
            "thread: make it async def (or subscribe it before the async ones)"
        )

    def next_() -> T:
        return _run_chain(chain, index + 1, default, args, refuse)

    result = fn(*args, next_)
    if inspect.iscoroutine(result):
        return await result  # type: ignore[no-any-return]
    return result  # type: ignore[no-any-return]
