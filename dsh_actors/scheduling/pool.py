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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

import pykka

from ..actors import ActorGroup, Address, actor_thread_ident
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

    The executor calls :meth:`put`, :meth:`reclaim`, :meth:`release_idle`
    and :meth:`close`; call actors call :meth:`arrive`, :meth:`take` and
    :meth:`report`. Its counters are the mailbox's own (the executor reads
    none of them), guarded by ``_lock``; items move through a
    ``SimpleQueue`` without it. Invariants, under the lock:

    * ``0 <= spare <= servers <= limit``: ``servers`` counts call actors
      serving or on their way (``spare`` of them not arrived yet).
    * ``0 <= sentinels <= servers``: LEAVE items queued and not yet taken;
      each takes one server away. ``servers - sentinels`` are the servers
      that stay.
    * No server idles on a draining mailbox (the executor said nothing more
      is coming for now): one that runs out of calls leaves. Nor while
      another batch waits for a slot of the budget: a server that runs out
      of calls then leaves, and when a batch starts waiting the pool asks
      the open mailboxes to send one idle server away (:meth:`shed_idle`).
      So idle servers never hold the budget that another batch (a nested
      one, say) needs to finish, and nothing waits on a timer.
    * While a call is queued and the mailbox is open, ``servers -
      sentinels >= 1``: someone will take it.
    * Nobody waits behind a blocking body: when a call is queued while no
      server is idle and none is on the way, or a server takes a call while
      others still wait with none on the way, one more server is asked for
      (below ``limit``). Growth is one server at a time, so a run of quick
      calls that one server keeps up with wakes few call actors.
    """

    __slots__ = (
        "_q",
        "_lock",
        "limit",
        "servers",
        "spare",
        "idle",
        "sentinels",
        "closed",
        "draining",
        "_pool",
        "inbox",
        "_stale",
    )

    def __init__(
        self, limit: int, pool: CallPool, inbox: BatchInbox, stale: Callable[[Call], bool] | None = None
    ) -> None:
        self._q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self.limit = limit
        self.servers = 0
        self.spare = 0
        self.idle = 0  # servers blocked in take()
        self.sentinels = 0
        self.closed = False
        self.draining = False  # the executor has nothing more to put for now
        self._pool = pool
        self.inbox = inbox  # the batch's inbox: where Settled goes
        # stale(call): what the call was prepared under has changed; it goes
        # back to the executor instead of starting (see take()).
        self._stale = stale
        pool.opened(self)

    def __repr__(self) -> str:
        return f"<WorkMailbox servers={self.servers} spare={self.spare} idle={self.idle} closed={self.closed}>"

    def assert_invariants(self) -> None:
        with self._lock:
            assert 0 <= self.spare <= self.servers <= self.limit, self
            assert 0 <= self.sentinels <= self.servers, self
            assert 0 <= self.idle <= self.servers, self

    # -- the executor's side -------------------------------------------------

    def put(self, call: Call) -> None:
        """Queue a startable call; make sure someone will take it."""
        with self._lock:
            self._q.put(call)
            self.draining = False
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

    def reclaim(self) -> list[Call]:
        """Take back every call no server has taken yet (an abort)."""
        taken: list[Call] = []
        leaves = 0
        with self._lock:
            while True:
                try:
                    item = self._q.get_nowait()
                except queue.Empty:
                    break
                if item is LEAVE:
                    leaves += 1
                else:
                    taken.append(item)
            for _ in range(leaves):
                self._q.put(LEAVE)
        return taken

    def release_idle(self) -> None:
        """Nothing more will be put for now: servers blocked waiting leave,
        and so does every server that runs out of calls from now on (until
        the next :meth:`put`), going back to the pool for other batches."""
        with self._lock:
            self.draining = True
            extra = self.idle - self.sentinels
            for _ in range(extra):
                self._q.put(LEAVE)
            if extra > 0:
                self.sentinels += extra

    def close(self) -> None:
        """The batch is over: every server leaves (after its current call)."""
        with self._lock:
            self.closed = True
            extra = self.servers - self.sentinels
            for _ in range(extra):
                self._q.put(LEAVE)
            if extra > 0:
                self.sentinels += extra
        self._pool.closed_mailbox(self)

    def shed_idle(self) -> bool:
        """Another batch waits for a slot of the budget (the pool asks): one
        server idle here with nothing queued leaves. Whether one does."""
        with self._lock:
            if self.idle <= self.sentinels or not self._q.empty():
                return False
            self._q.put(LEAVE)
            self.sentinels += 1
            return True

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
        while True:
            item = self._take(wait)
            if item is None or item is LEAVE:
                return item
            stale = self._stale
            if stale is None or not stale(item):  # type: ignore[arg-type]
                return item
            self._give_back(item)  # type: ignore[arg-type]

    def _give_back(self, call: Call) -> None:
        """A stale call goes back to its batch with every call queued behind
        it (to be prepared again in model order)."""
        self.inbox.put(Returned((call, *self.reclaim())))

    def _take(self, wait: bool) -> Call | None | _Leave:
        q = self._q
        item: Any
        try:
            item = q.get_nowait()
        except queue.Empty:
            if not wait:
                return None
            with self._lock:
                # Nothing more is coming for now, or another batch waits for
                # a slot: leave instead of holding it while idle. (A batch
                # that starts waiting after this read finds this server idle
                # and sends it a LEAVE: shed_idle takes this lock too.)
                if (self.draining or self._pool.waiting) and self._q.empty():
                    self.servers -= 1
                    return LEAVE
                self.idle += 1
            try:
                item = q.get()
            finally:
                with self._lock:
                    self.idle -= 1
        if isinstance(item, _Leave):
            with self._lock:
                self.sentinels -= 1
                self.servers -= 1
            return item
        call: Call = item
        if not self.spare and self.servers < self.limit and not q.empty():
            with self._lock:
                grow = (
                    not self.closed
                    and self.spare == 0
                    and self.servers - self.sentinels < self.limit
                    and self._q.qsize() > self.sentinels
                )
                if grow:
                    self.servers += 1
                    self.spare += 1
            if grow:
                self._pool.request(self)
        return call

    def report(self, call: Call) -> None:
        """Hand ``call`` (dispatched) back to its executor."""
        self.inbox.put(Settled(call=call))


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
        self._closed = False
        # The open work mailboxes (asked to shed an idle server when a
        # mailbox has to wait for the budget).
        self._mailboxes: dict[WorkMailbox, None] = {}

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

    @contextmanager
    def lent(self, bounded: bool = False) -> Iterator[None]:
        """Around a wait that needs the runtime to make progress (a nested
        batch, an async body): on one of this pool's call actors, lend its
        slot for the wait; anywhere else, nothing."""
        if getattr(actor_thread_ident(), "pool", None) is not self or not self.lend(bounded):
            yield
            return
        try:
            yield
        finally:
            self.unlend()

    def close(self) -> None:
        """Runtime stop: no more grants; idle call actors are forgotten (the
        runtime's group stops them)."""
        with self._lock:
            self._closed = True
            self._idle.close()
            waiting, self._waiting = list(self._waiting), deque()
        for mailbox in waiting:
            mailbox.refused()
