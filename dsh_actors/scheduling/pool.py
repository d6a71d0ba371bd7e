"""The batches' work mailboxes: a batch's queue of startable calls for the
call actors that serve it.

A batch's :class:`WorkMailbox` is a balancing pool's shared mailbox (Akka's
``BalancingPool``, Erlang's worker pools): the batch's executor puts each
startable call into it (an owned :class:`~dsh_actors.pipeline.stages.Call`,
in model order), the call actors serving the batch take the next one when
they are free and report ``Settled`` to the batch's inbox. The executor
alone decides *what* starts and when; the mailbox is the runtime's
:class:`~.dispatcher.Dispatcher`'s queue for that batch: its counters are
under the dispatcher's one lock, and the dispatcher decides which call
actors serve it, within the runtime-wide budget
(``ToolRuntime(max_call_actors=...)``) shared fairly between batches. Each
batch still respects its own cap (its executor never has more than
``limit`` calls out, and at most ``limit`` call actors serve it).
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from ..errors import ExecutorUnavailableError, exception_text
from ..pipeline.results import failure_from_exception
from .messages import Capacity, Returned, Settled

if TYPE_CHECKING:  # pragma: no cover
    from ..actors import Address
    from ..pipeline.stages import Call
    from .inbox import BatchInbox

__all__ = ["LEAVE", "WorkMailbox"]


class _Leave:
    __slots__ = ()

    def __repr__(self) -> str:
        return "LEAVE"


#: The sentinel a call actor takes to leave a mailbox.
LEAVE: Final[_Leave] = _Leave()


class WorkMailbox:
    """One batch's work mailbox (see the module docstring).

    The executor calls :meth:`put`, :meth:`all_taken`, :meth:`resume`,
    :meth:`reclaim`, :meth:`release_idle` and :meth:`close`; call actors
    call :meth:`arrive`, :meth:`take`, :meth:`give_back` and :meth:`report`. Its state is the
    mailbox's own (the executor reads none of it), guarded by the
    dispatcher's one lock (``_lock``: the mailbox is the dispatcher's queue
    for this batch):
    the queued items (calls and LEAVE sentinels) are a deque taken from
    under the lock, and a server with nothing to take waits on a doorbell
    (a ``SimpleQueue`` of wake-ups) outside it. Invariants, under the lock:

    * ``0 <= asked <= spare <= servers <= limit``: ``servers`` counts call
      actors serving or on their way (``spare`` of them not arrived yet,
      ``asked`` of those still waiting for a slot of the budget: the
      dispatcher's ``wanting`` holds them).
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
      prepared again. A later call whose body runs on a loop starts only
      once nothing is queued here (:meth:`all_taken`); until then it is
      queued too, behind them.
    * No server idles on a draining mailbox (the executor said nothing more
      is coming for now): one that runs out of calls leaves. Nor while
      another batch waits for a slot of the budget: a server that runs out
      of calls then leaves, and when a batch starts waiting the dispatcher
      sends idle servers of other mailboxes away, as many as free a slot (:meth:`shed_idle_locked`).
      So idle servers never hold the budget that another batch (a nested
      one, say) needs to finish, and nothing waits on a timer.
    * Capacity is shared: a server about to take its next call (not its
      first, just arrived) leaves instead when another batch waits holding
      none, or at least two call actors fewer than this one
      (``Dispatcher.yields``); if calls are still queued here and no server
      is idle or on its way, the mailbox asks for one again. So does a
      server that took its slot back above the budget (a lend ended)
      while the runtime still holds more slots than the budget
      (:meth:`give_back`): the budget is passed only until its next call.
    * When the runtime stops, servers idle here leave, and so does one
      that runs out of calls (``Dispatcher.close``, ``waits_for``): only a
      thread stuck in a body stays behind a batch that is stuck.
    * LEAVEs never outnumber the idle servers beyond the queued calls: a
      put that would leave its call without an idle server that stays
      takes one LEAVE back (that server stays for it), and
      :meth:`release_idle` tells only the idle servers beyond the queued
      calls to leave. So a call does not wait for a busy server's body
      while a server idled beside it.
    * While a call is queued and the mailbox is open, ``servers -
      sentinels >= 1``: someone will take it (a put rings the doorbell for
      a waiting server; a server woken for nothing looks again; one woken
      that leaves for another batch rings for a server idle here).
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
        "asked",
        "idle",
        "rung",
        "sentinels",
        "closed",
        "draining",
        "held",
        "_dispatcher",
        "inbox",
        "_stale",
    )

    def __init__(
        self,
        limit: int,
        dispatcher: Capacity[WorkMailbox],
        inbox: BatchInbox,
        stale: Callable[[Call], bool] | None = None,
    ) -> None:
        self._items: deque[Any] = deque()
        self._bell: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._lock: threading.Lock = dispatcher.lock
        self.limit = limit
        self.servers = 0
        self.spare = 0
        self.asked = 0  # servers waiting for a slot of the budget
        self.idle = 0  # servers waiting on the doorbell
        self.rung = 0  # wake-ups in the doorbell not taken yet
        self.sentinels = 0
        self.closed = False
        self.draining = False  # the executor has nothing more to put for now
        self.held = False  # a stale call went back: nothing moves until resume()
        self._dispatcher = dispatcher
        self.inbox = inbox  # the batch's inbox: where Settled goes
        # stale(call): what the call was prepared under has changed; it goes
        # back to the executor instead of starting (see take()). Called
        # under the lock: it reads two counters.
        self._stale = stale
        dispatcher.opened(self)

    def __repr__(self) -> str:
        return (
            f"<WorkMailbox servers={self.servers} spare={self.spare} asked={self.asked} idle={self.idle} "
            f"held={self.held} closed={self.closed}>"
        )

    def assert_invariants(self) -> None:
        with self._lock:
            assert 0 <= self.asked <= self.spare <= self.servers <= self.limit, self
            assert 0 <= self.sentinels <= self.servers, self
            assert 0 <= self.idle <= self.servers, self
            queued = sum(1 for item in self._items if item is not LEAVE)
            assert queued == len(self._items) - self.sentinels, self
            assert not (self.held and queued), "a call is queued while the mailbox is held"

    def granted(self) -> int:
        """(Under the lock.) Servers that hold a slot and stay (not waiting
        for the budget, not told to leave)."""
        return self.servers - self.asked - self.sentinels

    def queued(self) -> int:
        """(Under the lock.) Calls put here that no server has taken yet
        (read by ``Dispatcher.snapshot``)."""
        return len(self._items) - self.sentinels

    def _ring(self) -> None:
        # (Under the lock.) Wake one waiting server, unless enough are rung.
        if self.idle > self.rung:
            self.rung += 1
            self._bell.put(None)

    def _reclaim(self, keep: Callable[[Call], bool] | None = None) -> list[Call]:
        # (Under the lock.) The queued calls ``keep`` does not keep (every
        # one without it), in order; LEAVEs and the kept calls stay queued
        # in their order.
        items = self._items
        staying: list[Any] = []
        taken: list[Call] = []
        for item in items:
            if item is LEAVE or (keep is not None and keep(item)):
                staying.append(item)
            else:
                taken.append(item)
        if taken:
            items.clear()
            items.extend(staying)
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
        # (acquire/release, not ``with``, and _ring() inline: a put a call;
        # benchmarks/HOPS.md, "The shared protocol's CPU")
        lock = self._lock
        lock.acquire()
        try:
            if self.held:
                return False
            items = self._items
            items.append(call)
            self.draining = False
            idle = self.idle
            if self.sentinels and idle < len(items) and not self.closed:
                # The idle servers here that stay (``idle - sentinels``: the
                # others were told to leave, nothing more being expected or
                # another batch waiting for the budget) are fewer than the
                # calls queued (``len(items) - sentinels``), this one
                # included: one told to leave stays for it instead (its
                # wake-up is rung already), rather than this call waiting
                # for a busy server. Another batch waiting for the budget
                # is then served as at any take (``Dispatcher.yields``).
                self._unleave()
            if idle > self.rung:
                self.rung += 1
                self._bell.put(None)
            staying = self.servers - self.sentinels
            # Nobody serves, or everybody is busy and nobody is on the way:
            # one more (below the limit), so a call never waits behind
            # bodies that block.
            need = not self.closed and (staying == 0 or (idle == 0 and self.spare == 0 and staying < self.limit))
            if need:
                self.servers += 1
                self.spare += 1
                sends = self._dispatcher.want_locked(self)
        finally:
            lock.release()
        if need:
            self._dispatcher.send(sends)
            # Let the woken call actor take the GIL now and start the call,
            # rather than after this thread has prepared the calls behind it.
            time.sleep(0)
        return True

    def all_taken(self) -> bool:
        """Whether every call put here has been taken (its start decided, in
        model order) and none is on its way back (not held): a later call
        may then start elsewhere, its body on a loop, without starting
        ahead of one queued here."""
        with self._lock:
            return not self.held and len(self._items) == self.sentinels

    def resume(self) -> None:
        """The executor has the calls that went back (a ``Returned``)."""
        with self._lock:
            self.held = False

    def reclaim(self, keep: Callable[[Call], bool] | None = None) -> list[Call]:
        """Take back every call no server has taken yet (an abort), in
        order; with ``keep``, only those it does not keep, the kept ones
        staying queued in their order (and decided, if they were)."""
        with self._lock:
            return self._reclaim(keep)

    def release_idle(self) -> None:
        """Nothing more will be put for now: servers blocked waiting leave,
        and so does every server that runs out of calls from now on (until
        the next :meth:`put`), going back to the dispatcher for other batches."""
        with self._lock:
            self.draining = True
            # The idle servers beyond the queued calls, which the others
            # take (``idle - sentinels`` stay, ``len(items) - sentinels``
            # calls are queued).
            self._leave(self.idle - len(self._items))

    def close(self) -> None:
        """The batch is over: every server leaves (after its current call)."""
        with self._lock:
            self.closed = True
            self._dispatcher.closed_mailbox_locked(self)
            self._leave(self.servers - self.sentinels)

    def shed_idle_locked(self, most: int) -> int:
        """(Under the lock.) Another batch waits for a slot of the budget
        (the dispatcher asks): up to ``most`` servers idle here leave, when
        no call is queued. How many do."""
        if self.closed or len(self._items) > self.sentinels:
            return 0
        count = min(most, self.idle - self.sentinels)
        if count <= 0:
            return 0
        self._leave(count)
        return count

    def _unleave(self) -> None:
        # (Under the lock.) One LEAVE queued is taken back (the first).
        items = self._items
        for at, item in enumerate(items):
            if item is LEAVE:
                del items[at]
                break
        self.sentinels -= 1

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

    def drop_asked_locked(self) -> None:
        """(Under the lock.) Its requests still waiting for a slot of the
        budget will never be granted (the batch closed, or the runtime
        stops)."""
        self.spare -= self.asked
        self.servers -= self.asked
        self.asked = 0

    def refused_locked(self, *, reclaim: bool) -> list[Call]:
        """(Under the lock.) A granted server will never come: the runtime is
        stopping (its batches are aborted, their queued calls reclaimed), or
        its actor could not be started (``reclaim``). Then, if no other
        server serves or is on its way here, the queued calls are taken
        back (to fail: :meth:`fail_unserved`), else they wait for the
        others."""
        self.spare -= 1
        self.servers -= 1
        if not reclaim or self.closed or self.servers - self.sentinels > 0:
            return []
        return self._reclaim()

    def fail_unserved(self, calls: list[Call], cause: BaseException) -> None:
        """``calls``, taken back because no server could be started for
        them, settle without running (their bodies never started) with an
        ``EXECUTOR_UNAVAILABLE`` failure caused by ``cause``, and go back to
        the batch in order, as any settled call."""
        detail = exception_text(cause)
        for call in calls:
            execution = call.execution
            error = ExecutorUnavailableError(
                f'call {execution.call_id} (tool "{execution.name}"): no call actor could be started '
                f"to run it ({detail})"
            )
            error.__cause__ = cause
            call.settle(failure_from_exception(error), run_post=call.phases_ran, dispatched=False)
            self.report(call)

    def take(self, *, wait: bool = True, arriving: bool = False) -> Call | None | _Leave:
        """The next call to run (now owned by the caller), or LEAVE (the
        caller no longer serves this mailbox). ``wait=False``: None when no
        item is queued right now. ``arriving``: the caller has just come to
        serve this mailbox, so it takes a call before it may leave for
        another batch (two batches would otherwise hand it back and forth).

        Taking a call is where its body starts: a call found stale here
        (see ``pipeline.call.stale``) goes back to the executor with every
        call queued behind it, in one :class:`Returned`, so the executor
        prepares them again in model order under what holds now."""
        lock = self._lock
        items = self._items
        dispatcher = self._dispatcher
        while True:
            returned: Returned | None = None
            grow = leaving = False
            lock.acquire()  # (acquire/release, not ``with``: a take a call)
            try:
                if not arriving and dispatcher.wanting and items and items[0] is not LEAVE and dispatcher.yields(self):
                    # Another batch waits with fewer call actors: this one
                    # leaves for it (the dispatcher sends it there).
                    sends = self._depart_locked()
                    leaving = True
                elif items:
                    item = items.popleft()
                    if item is LEAVE:
                        self.sentinels -= 1
                        self.servers -= 1
                        return item
                    if self._stale is not None and self._stale(item):
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
                            sends = dispatcher.want_locked(self)
                elif not wait:
                    return None
                elif self.draining or dispatcher.waits_for(self):
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
            finally:
                lock.release()
            if leaving:
                dispatcher.send(sends)
                return LEAVE
            if returned is not None:
                self.inbox.put(returned)
                continue
            if item is not None:
                if grow:
                    dispatcher.send(sends)
                return item  # type: ignore[no-any-return]
            self._wait()

    def give_back(self, worker: Address) -> bool:
        """The server at ``worker`` is about to take its next call: whether
        it leaves instead, its slot going back to the dispatcher (the
        caller releases it), because it took its slot back above the
        budget (its lend ended: ``Dispatcher.unlend``) and the runtime
        still holds more call-actor slots than the budget
        (``Dispatcher.repays_locked``). Its calls still queued wait their
        turn, as at a yield."""
        lock = self._lock
        dispatcher = self._dispatcher
        with lock:
            if not dispatcher.repays_locked(worker):
                return False
            if self.sentinels >= self.servers:
                # (Closing: every server is told to leave, this one too: it
                # takes its LEAVE now.)
                self._unleave()
            sends = self._depart_locked()
        dispatcher.send(sends)
        return True

    def _depart_locked(self) -> list[Any]:
        # (Under the lock.) A server leaves before taking its next call (it
        # yields to another batch, or gives back a slot above the budget).
        # Its calls still queued are not left behind a body that blocks:
        # unless a server stays idle or is on its way, the mailbox asks for
        # one again (it waits its turn). The sends to make after the lock.
        self.servers -= 1
        if len(self._items) == self.sentinels:
            return []
        if self.idle:
            # The wake-up this server may have had is passed on: a server
            # idle here takes the queued calls (it was lost, and the calls
            # waited forever beside it).
            self._ring()
            return []
        if self.closed or self.spare:
            return []
        self.servers += 1
        self.spare += 1
        return self._dispatcher.want_locked(self)

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
