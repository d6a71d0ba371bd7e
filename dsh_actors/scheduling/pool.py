"""Delivery of startable calls to call actors: the batches' work mailboxes
and the runtime's budget of call actors.

A batch's :class:`WorkMailbox` is a balancing pool's shared mailbox (Akka's
``BalancingPool``, Erlang's worker pools): the batch's executor puts each
startable call into it (an owned :class:`~dsh_actors.pipeline.stages.Call`,
in model order), the call actors serving the batch take the next one when
they are free and report ``Settled`` to the batch's inbox. The executor
alone decides *what* starts and when; the mailbox decides only *which call
actor* runs it, and how many serve the batch.

The :class:`CallPool` lends call actors to mailboxes within one
runtime-wide budget (``ToolRuntime(max_call_actors=...)``): a mailbox that
wants one more server gets an idle call actor, a new one, or, at the
budget, a place in a first-come first-served queue; a call actor that
leaves a mailbox serves the next waiting one before it goes idle. So
concurrent batches share the budget fairly, and each batch still respects
its own cap (its executor never has more than ``limit`` calls out, and at
most ``limit`` call actors serve it).

A body that blocks on a nested batch (``rt.tools.execute`` from a tool
body) *lends* its slot back while it waits (:meth:`CallPool.lend`), so
nested batches do not deadlock the budget. An async body needs no call
actor at all: the executor runs it as a flight on its loop. Only one under
a ``tools/execute`` wrapper has a call actor wait for it, and those waits
lend at most as many slots as the budget (so many of them cannot grow the
threads past twice the budget).
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import pykka

from ..actors import ActorGroup, Address
from .idle import IdleShelf
from .messages import Returned, Serve, Settled

if TYPE_CHECKING:  # pragma: no cover
    from ..pipeline.stages import Call
    from ..runtime import ToolRuntime
    from .inbox import BatchInbox

__all__ = ["CallPool", "LEAVE", "WorkMailbox"]


class _Leave:
    __slots__ = ()

    def __repr__(self) -> str:
        return "LEAVE"


#: The sentinel a call actor takes to leave a mailbox.
LEAVE: Final[_Leave] = _Leave()

#: How many slots may be lent at once, per slot of the budget.
LENT_PER_SLOT = 1


class WorkMailbox:
    """One batch's work mailbox (see the module docstring).

    The executor calls :meth:`put`, :meth:`clear_queued`, :meth:`resume`,
    :meth:`reclaim`, :meth:`release_idle` and :meth:`close`; call actors
    call :meth:`arrive`, :meth:`take` and :meth:`report`. Its state is the
    mailbox's own (the executor reads none of it), guarded by ``_lock``:
    the queued items (calls and LEAVE sentinels) are a deque taken from
    under the lock, and a server with nothing to take waits on a doorbell
    (a ``SimpleQueue`` of wake-ups) outside it. Invariants, under the lock:

    * ``0 <= spare <= servers <= limit``: ``servers`` counts call actors
      serving or on their way (``spare`` of them not arrived yet).
    * ``0 <= sentinels <= servers``: LEAVE items queued and not yet taken;
      each takes one server away. ``servers - sentinels`` are the servers
      that stay.
    * **Starts are decided in model order.** Taking a call and deciding
      that its body may start (it is not stale) is one step under the lock,
      so no call starts before every call queued ahead of it has been
      decided. A stale call goes back to the executor with every call
      queued behind it, in one :class:`Returned`, and the mailbox is
      ``held`` (nothing is taken or put) until the executor has that
      message (:meth:`resume`): no call behind it starts before it has been
      prepared again. ``cleared`` counts the calls at the head of the queue
      decided already (:meth:`clear_queued`: a later call started on a
      loop); they start without a second check.
    * No server idles on a draining mailbox (the executor said nothing more
      is coming for now): one that runs out of calls leaves. Nor while
      another batch waits for a slot of the budget: a server that runs out
      of calls then leaves, and when a batch starts waiting the pool asks
      the open mailboxes to send one idle server away (:meth:`shed_idle`).
      So idle servers never hold the budget that another batch (a nested
      one, say) needs to finish, and nothing waits on a timer.
    * While a call is queued and the mailbox is open, ``servers -
      sentinels >= 1``: someone will take it (a put rings the doorbell for
      a waiting server; a server woken for nothing looks again).
    * Nobody waits behind a blocking body: when a call is queued while no
      server is idle and none is on the way, or a server takes a call while
      others still wait with none on the way, one more server is asked for
      (below ``limit``). Growth is one server at a time, so a run of quick
      calls that one server keeps up with wakes few call actors.
    """

    __slots__ = (
        "_items",
        "_bell",
        "_lock",
        "limit",
        "servers",
        "spare",
        "idle",
        "rung",
        "sentinels",
        "closed",
        "draining",
        "held",
        "cleared",
        "_pool",
        "inbox",
        "_stale",
    )

    def __init__(
        self, limit: int, pool: CallPool, inbox: BatchInbox, stale: Callable[[Call], bool] | None = None
    ) -> None:
        self._items: deque[Any] = deque()
        self._bell: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self.limit = limit
        self.servers = 0
        self.spare = 0
        self.idle = 0  # servers waiting on the doorbell
        self.rung = 0  # wake-ups in the doorbell not taken yet
        self.sentinels = 0
        self.closed = False
        self.draining = False  # the executor has nothing more to put for now
        self.held = False  # a stale call went back: nothing moves until resume()
        self.cleared = 0  # queued calls (at the head) whose start is decided already
        self._pool = pool
        self.inbox = inbox  # the batch's inbox: where Settled goes
        # stale(call): what the call was prepared under has changed; it goes
        # back to the executor instead of starting (see take()). Called
        # under the lock: it reads two counters.
        self._stale = stale
        pool.opened(self)

    def __repr__(self) -> str:
        return (
            f"<WorkMailbox servers={self.servers} spare={self.spare} idle={self.idle} "
            f"held={self.held} closed={self.closed}>"
        )

    def assert_invariants(self) -> None:
        with self._lock:
            assert 0 <= self.spare <= self.servers <= self.limit, self
            assert 0 <= self.sentinels <= self.servers, self
            assert 0 <= self.idle <= self.servers, self
            queued = sum(1 for item in self._items if item is not LEAVE)
            assert 0 <= self.cleared <= queued, self
            assert not (self.held and queued), "a call is queued while the mailbox is held"

    def _ring(self) -> None:
        # (Under the lock.) Wake one waiting server, unless enough are rung.
        if self.idle > self.rung:
            self.rung += 1
            self._bell.put(None)

    def _reclaim(self) -> list[Call]:
        # (Under the lock.) Every queued call, in order; LEAVEs stay.
        items = self._items
        taken = [item for item in items if item is not LEAVE]
        if taken:
            leaves = len(items) - len(taken)
            items.clear()
            items.extend([LEAVE] * leaves)
        self.cleared = 0
        return taken

    def _give_back(self, first: Call) -> Returned:
        # (Under the lock.) ``first`` is stale: it and every call queued
        # behind it go back, and nothing moves until the executor has them.
        self.held = True
        return Returned((first, *self._reclaim()))

    # -- the executor's side -------------------------------------------------

    def put(self, call: Call) -> bool:
        """Queue a startable call; make sure someone will take it. False
        (not queued) while the mailbox is held: a stale call is on its way
        back, and ``call`` is to be prepared again after it."""
        with self._lock:
            if self.held:
                return False
            self._items.append(call)
            self.draining = False
            self._ring()
            staying = self.servers - self.sentinels
            # Nobody serves, or everybody is busy and nobody is on the way:
            # one more (below the limit), so a call never waits behind
            # bodies that block.
            need = not self.closed and (staying == 0 or (self.idle == 0 and self.spare == 0 and staying < self.limit))
            if need:
                self.servers += 1
                self.spare += 1
        if need:
            self._pool.request(self)
            # Let the woken call actor take the GIL now and start the call,
            # rather than after this thread has prepared the calls behind it.
            time.sleep(0)
        return True

    def clear_queued(self) -> bool:
        """A call after the queued ones is about to start elsewhere (its
        body on a loop): decide the queued calls' starts now, in model
        order, so none of them is found stale after a later call started.
        False when one is stale (it goes back with the rest, as in
        :meth:`take`) or the mailbox is held: the later call does not
        start now, and is to be prepared again after them."""
        returned: Returned | None = None
        with self._lock:
            if self.held:
                return False
            stale = self._stale
            items = self._items
            calls = [item for item in items if item is not LEAVE]
            for position in range(self.cleared, len(calls)):
                if stale is not None and stale(calls[position]):
                    # It and the calls behind it go back; those ahead of it
                    # are decided (they start as they are taken).
                    kept = calls[:position]
                    leaves = len(items) - len(calls)
                    items.clear()
                    items.extend(kept)
                    items.extend([LEAVE] * leaves)
                    self.held = True
                    returned = Returned(tuple(calls[position:]))
                    self.cleared = position
                    break
            else:
                self.cleared = len(calls)
        if returned is not None:
            self.inbox.put(returned)
            return False
        return True

    def resume(self) -> None:
        """The executor has the calls that went back (a ``Returned``)."""
        with self._lock:
            self.held = False

    def reclaim(self) -> list[Call]:
        """Take back every call no server has taken yet (an abort)."""
        with self._lock:
            return self._reclaim()

    def release_idle(self) -> None:
        """Nothing more will be put for now: servers blocked waiting leave,
        and so does every server that runs out of calls from now on (until
        the next :meth:`put`), going back to the pool for other batches."""
        with self._lock:
            self.draining = True
            self._leave(self.idle - self.sentinels)

    def close(self) -> None:
        """The batch is over: every server leaves (after its current call)."""
        with self._lock:
            self.closed = True
            self._leave(self.servers - self.sentinels)
        self._pool.closed_mailbox(self)

    def shed_idle(self) -> bool:
        """Another batch waits for a slot of the budget (the pool asks): one
        server idle here with nothing queued leaves. Whether one does."""
        with self._lock:
            if self.idle <= self.sentinels or self._items:
                return False
            self._leave(1)
            return True

    def _leave(self, extra: int) -> None:
        # (Under the lock.) ``extra`` more servers leave.
        if extra > 0:
            self.sentinels += extra
            for _ in range(extra):
                self._items.append(LEAVE)
                self._ring()

    # -- the call actors' side -----------------------------------------------

    def arrive(self) -> None:
        """A requested server has arrived (it is no longer spare)."""
        with self._lock:
            self.spare -= 1

    def refused(self) -> None:
        """A requested server will never come (the runtime is stopping)."""
        with self._lock:
            self.spare -= 1
            self.servers -= 1

    def take(self, *, wait: bool = True) -> Call | None | _Leave:
        """The next call to run (now owned by the caller), or LEAVE (the
        caller no longer serves this mailbox). ``wait=False``: None when no
        item is queued right now.

        Taking a call is where its body starts: a call found stale here
        (see ``pipeline.call.stale``) goes back to the executor with every
        call queued behind it, in one :class:`Returned`, so the executor
        prepares them again in model order under what holds now."""
        lock = self._lock
        items = self._items
        while True:
            returned: Returned | None = None
            grow = False
            with lock:
                if items:
                    item = items.popleft()
                    if item is LEAVE:
                        self.sentinels -= 1
                        self.servers -= 1
                        return item
                    if self.cleared:
                        self.cleared -= 1
                    elif self._stale is not None and self._stale(item):
                        returned = self._give_back(item)
                    if returned is None:
                        # Others still wait and nobody is on the way: one
                        # more server (below the limit).
                        grow = (
                            not self.closed
                            and self.spare == 0
                            and self.servers < self.limit
                            and len(items) > self.sentinels
                        )
                        if grow:
                            self.servers += 1
                            self.spare += 1
                elif not wait:
                    return None
                elif self.draining or self._pool.waiting:
                    # Nothing more is coming for now, or another batch waits
                    # for a slot: leave instead of holding it while idle. (A
                    # batch that starts waiting after this read finds this
                    # server idle and sends it a LEAVE: shed_idle takes this
                    # lock too.)
                    self.servers -= 1
                    return LEAVE
                else:
                    self.idle += 1
                    item = None
            if returned is not None:
                self.inbox.put(returned)
                continue
            if item is not None:
                if grow:
                    self._pool.request(self)
                return item  # type: ignore[no-any-return]
            self._wait()

    def _wait(self) -> None:
        """Wait for a wake-up (this server is counted idle), with no timer:
        a put, a LEAVE (draining, closing, or another batch waiting for the
        budget: :meth:`shed_idle`) or a resume rings; then look again."""
        self._bell.get()
        with self._lock:
            self.idle -= 1
            self.rung -= 1

    def report(self, call: Call) -> None:
        """Hand ``call`` (dispatched) back to its batch."""
        self.inbox.put(Settled(call=call))

    def report_and_step(self, call: Call) -> Any:
        """Hand ``call`` back to its batch, and take the batch's step here
        when nobody runs it (see ``BatchInbox.offer``): what settles the
        batch's reply once it has ended, else None."""
        return self.inbox.offer(Settled(call=call))


class CallPool:
    """The runtime's call actors and their budget (see the module docstring).

    Invariants, under ``_lock``: ``serving`` counts call actors lent to a
    mailbox and not lent back (:meth:`lend`); a request waits in
    ``waiting`` only while ``serving >= budget``; ``len(idle) <= idle_kept``.

    ``open_server(group, rt, pool)`` starts one more call actor and returns
    its address (the runtime passes ``CallActor.open``: the call actor lives
    in ``executor.py``, which imports this module, so the pool is given it).
    """

    def __init__(
        self,
        rt: ToolRuntime,
        budget: int,
        open_server: Callable[[ActorGroup, ToolRuntime, CallPool], Address],
        idle_kept: int | None = None,
    ) -> None:
        self._rt = rt
        self._open_server = open_server
        self.budget = budget
        self.idle_kept = budget if idle_kept is None else idle_kept
        self._lock = threading.Lock()
        self.serving = 0
        self.lent_count = 0  # call actors waiting with their slot lent out
        self.peak = 0
        # Idle call actors (at most idle_kept; each retires after IDLE_TTL).
        self._idle = IdleShelf(rt.group, rt.loop, self.idle_kept)
        self._waiting: deque[WorkMailbox] = deque()
        # The open work mailboxes (asked to shed an idle server when a
        # mailbox has to wait for the budget).
        self._mailboxes: dict[WorkMailbox, None] = {}
        self._closed = False

    def __repr__(self) -> str:
        return f"<CallPool serving={self.serving}/{self.budget} idle={len(self._idle)} waiting={len(self._waiting)}>"

    def request(self, mailbox: WorkMailbox) -> None:
        """``mailbox`` wants one more server (its counters say so already)."""
        with self._lock:
            grant: bool | None = None
            worker = None
            others: list[WorkMailbox] = []
            if self._closed:
                grant = False
            elif self.serving < self.budget:
                grant = True
                self.serving += 1
                self.peak = max(self.peak, self.serving)
                worker = self._idle.take()
            else:
                self._waiting.append(mailbox)
                others = [m for m in self._mailboxes if m is not mailbox]
        if grant is None:
            # At the budget: an idle server elsewhere leaves for it (if any
            # is idle now; one that runs out of calls later sees `waiting`).
            for other in others:
                if other.shed_idle():
                    return
            return
        if not grant:
            mailbox.refused()
            return
        self._send(worker, mailbox)

    def _send(self, worker: Address | None, mailbox: WorkMailbox) -> None:
        try:
            if worker is None:
                worker = self._open_server(self._rt.group, self._rt, self)
            worker.tell(Serve(mailbox=mailbox))
        except (RuntimeError, pykka.ActorDeadError):
            # The runtime is stopping: nobody is coming.
            with self._lock:
                self.serving -= 1
            mailbox.refused()

    def release(self, worker: Address) -> WorkMailbox | None:
        """A call actor left a mailbox: the next waiting mailbox it should
        serve, or None (it is idle now, or retired if the pool keeps
        enough idle ones)."""
        with self._lock:
            while self._waiting:
                mailbox = self._waiting.popleft()
                if not mailbox.closed:
                    return mailbox
            self.serving -= 1
            if not self._closed and self._idle.shelve(worker):
                return None
        self._rt.group.retire(worker.ref)
        return None

    @property
    def waiting(self) -> bool:
        """Whether a mailbox waits for a slot of the budget (a racy read: a
        server that runs out of calls reads it to decide to leave; see
        :meth:`WorkMailbox.shed_idle` for the other half)."""
        return bool(self._waiting)

    def opened(self, mailbox: WorkMailbox) -> None:
        with self._lock:
            self._mailboxes[mailbox] = None

    def closed_mailbox(self, mailbox: WorkMailbox) -> None:
        with self._lock:
            self._mailboxes.pop(mailbox, None)

    def lend(self, bounded: bool = False) -> bool:
        """The calling call actor blocks on work the runtime must do (a
        nested batch, an async body): its slot serves a waiting mailbox
        meanwhile. ``bounded`` (an async body's wait): only while fewer than
        ``LENT_PER_SLOT`` times the budget are lent, so many parked async
        bodies do not grow the threads without bound; past that the slot is
        kept and False returned. A nested batch's wait always lends: it is
        what keeps nesting from deadlocking the budget."""
        with self._lock:
            if bounded and self.lent_count >= LENT_PER_SLOT * self.budget:
                return False
            self.lent_count += 1
            self.serving -= 1
            if not self._waiting or self._closed or self.serving >= self.budget:
                return True
            mailbox = self._waiting.popleft()
            self.serving += 1
            worker = self._idle.take()
        self._send(worker, mailbox)
        return True

    def unlend(self) -> None:
        with self._lock:
            self.lent_count -= 1
            self.serving += 1  # may exceed the budget until it leaves its mailbox

    def close(self) -> None:
        """Runtime stop: no more grants; idle call actors are forgotten (the
        runtime's group stops them)."""
        with self._lock:
            self._closed = True
            self._idle.close()
            waiting, self._waiting = list(self._waiting), deque()
        for mailbox in waiting:
            mailbox.refused()
