"""The runtime's one dispatcher: every slot of capacity, one lock, one
assignment step.

Capacity is of two kinds, and the :class:`Dispatcher` owns both:

* **call-actor slots** (``ToolRuntime(max_call_actors=...)``, the budget):
  a batch's :class:`~.pool.WorkMailbox` that wants one more server asks
  for one (:meth:`Dispatcher.want`); a call actor that leaves a mailbox
  gives its slot back (:meth:`Dispatcher.release`);
* **step slots** (:attr:`Dispatcher.STEPPING_MAX`): an executor actor
  takes one to run a batch's step (``RunBatch``, ``Begin``, ``Resume``:
  :meth:`Dispatcher.post`) and gives it back when the batch pauses
  (:meth:`Dispatcher.step_ended`).

A thread that blocks on work the runtime must do (a body run inline, a
nested batch, an approval) **lends** its slot for the wait, whichever kind
it holds (:class:`~.executor.Lent`, ``rt.waiting()``: :meth:`Dispatcher.lend`
and :meth:`Dispatcher.unlend`). It is the one way to lend, and there is no
bound on it: a thread that waits never holds capacity another batch needs,
so nested batches cannot deadlock it at any budget. A thread that lent
never waits to take its slot back: one that comes back over the bound
gives it back at its next decision point (an executor actor as its work
ends, a call actor before it takes another call:
:meth:`Dispatcher.repays_locked`). A thread waiting for an async body
under a ``tools/execute`` wrapper lends on demand
(:class:`~.executor.LentOnDemand`: once the body starts a batch, counted
by :meth:`Dispatcher.lend_decided`), and holds its slot until then.

Everything is decided under :attr:`Dispatcher.lock` (the work mailboxes
share it: a mailbox's counters are the dispatcher's per-batch queue), by
one step, :meth:`Dispatcher._assign`, run after every event that frees or
wants capacity (a request, a slot given back or lent, a lend ending): it
grants free step slots to queued steps, first come first served, and free
call-actor slots to the waiting mailboxes, the one holding the fewest call
actors first (round-robin by batch). The sends it decides (``Serve`` to a
call actor, the step's work to an executor actor, starting one when none
is idle) are made outside the lock, the shape of httpcore's connection
pool. And a call actor that ends a call while another batch waits with
no call actor, or at least two fewer than its own, leaves its batch for it
(:meth:`Dispatcher.yields`): one long batch does not keep the whole budget
while another waits.

The dispatcher decides only *where* capacity goes. *What* may start, and
in which order, is each batch's own policy (its ``BatchRun``: model
order, barriers, prepare and commit, its cap).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import pykka
from loguru import logger

from ..actors import ActorGroup, Address
from ..errors import RuntimeStoppedError
from .idle import IdleShelf
from .messages import Resume, RunBatch, Serve

if TYPE_CHECKING:  # pragma: no cover
    from ..kernel import Kernel
    from .messages import Begin
    from .pool import WorkMailbox

__all__ = ["Dispatcher"]

#: Idle executor actors kept (each retires after IDLE_TTL).
IDLE_STEPPERS_KEPT = 32

Opener = Callable[[ActorGroup, "Kernel", "Dispatcher"], Address]
#: Answers the batch of a step that will never run (``RunBatch``, ``Begin``,
#: ``Resume``), with the cause when it is not the runtime's stop.
StepRefuser = Callable[[Any, "BaseException | None"], None]


class Dispatcher:
    """Capacity for the whole runtime (see the module docstring).

    State, under ``lock`` (the work mailboxes' counters too):

    * ``serving``: call actors holding a call-actor slot (serving a
      mailbox, or on their way to one), lent ones not counted;
      ``lent_servers``: call actors waiting with their slot lent;
      ``owing``: the call actors (their addresses) that took their slot
      back above the budget (:meth:`unlend`) and have not yet reached
      their next take, where each gives it back if ``serving`` is still
      above the budget (:meth:`repays_locked`), or left their mailbox
      (:meth:`release`). The one record of who owes: a call actor keeps
      none of its own (it reads this set before its next take: only its
      own thread adds or removes it).
    * ``stepping``: executor actors holding a step slot; ``lent_steppers``:
      executor actors waiting with their slot lent.
    * ``wanting``: mailboxes waiting for a call-actor slot, with how many
      each asked for (its ``asked``), in the order they first asked.
    * ``runnable``: steps waiting for a step slot, first come first served
      (a begun batch's step that no executor actor could be started for
      goes back to its head).
    * ``starved``: an executor actor could not be started (no thread could
      be); until the retry timer, queued steps take only idle executor
      actors, and those that end their work. ``retry_armed``: that timer
      is pending (one at a time); ``retrying``: the timer is trying to start
      one for the step it took from the head (the spell lasts until that
      start succeeds).
    * ``finished``: the stop has refused the steps still queued
      (:meth:`refuse_queued`): no thread will run a step any more, so one
      that would wait from now on is refused instead.

    Invariants (:meth:`assert_invariants`): ``wanting`` is not empty only
    while ``serving >= budget`` (or the dispatcher is closed: then it is
    empty); ``runnable`` is not empty only while ``stepping >=
    steps_max`` or ``starved``; each waiting mailbox's ``asked`` is what ``wanting``
    holds for it; the call actors the open mailboxes count as granted are
    at most ``serving + lent_servers``; ``serving <= budget + len(owing)``,
    and ``len(owing) <= serving + lent_servers`` (each call actor that owes
    holds its slot, or lent it again): after a lend ends, ``serving`` may
    pass the budget only until that call actor's next take (the rest of its
    body or step), and ``stepping`` its bound until that executor actor's
    work ends: a thread that lent never waits to continue.
    """

    #: Executor actors taking steps at once, for the whole runtime (lent
    #: ones not counted). Read when the dispatcher is made.
    STEPPING_MAX: ClassVar[int] = 16
    #: Seconds before executor actors are tried again for queued steps,
    #: after one could not be started (no thread could be).
    STEP_RETRY_S: ClassVar[float] = 0.05

    def __init__(
        self,
        rt: Kernel,
        budget: int,
        open_server: Opener,
        open_stepper: Opener,
        refuse_step: StepRefuser,
    ) -> None:
        self.lock = threading.Lock()
        self._rt = rt
        self._open_server = open_server
        self._open_stepper = open_stepper
        self._refuse_step = refuse_step
        self.budget = budget
        self.steps_max = Dispatcher.STEPPING_MAX
        self.serving = 0
        self.lent_servers = 0
        self.owing: set[Address] = set()
        self.stepping = 0
        self.lent_steppers = 0
        self.peak = 0
        self._servers = IdleShelf(rt.group, rt.loop, budget)
        self._steppers = IdleShelf(rt.group, rt.loop, IDLE_STEPPERS_KEPT)
        self.wanting: dict[WorkMailbox, None] = {}
        self.runnable: deque[Any] = deque()
        self._mailboxes: dict[WorkMailbox, None] = {}
        self.closed = False
        self.starved = False
        self.retry_armed = False
        self.retrying = False
        self.finished = False

    def __repr__(self) -> str:
        return (
            f"<Dispatcher serving={self.serving}/{self.budget} lent={self.lent_servers} owing={len(self.owing)} "
            f"stepping={self.stepping}/{self.steps_max} lent_steppers={self.lent_steppers} "
            f"wanting={len(self.wanting)} runnable={len(self.runnable)}>"
        )

    def snapshot(self) -> dict[str, int]:
        """How busy the runtime is, read at once under the lock, for
        monitoring (``policies.metrics`` reads it for its ``capacity`` and
        its gauges; nothing on a call's path does). Read-only::

            call_actors_in_use   call-actor slots held: call actors serving
                                 a batch (running a call, idle with it, or
                                 on their way to it), lent ones not counted
                                 (above call_actors_max after a lend ends,
                                 until that call actor's next take)
            call_actors_lent     call actors waiting with their slot lent
            call_actors_max      the budget (max_call_actors)
            call_actors_peak     the most slots held at once so far
            call_actors_wanted   call actors batches asked for that wait
                                 for a slot of the budget
            calls_queued         calls put in the batches' work mailboxes
                                 that no call actor has taken yet
            steps_in_use         step slots held (executor actors running
                                 a batch's step), lent ones not counted
            steps_lent           executor actors waiting with their slot lent
            steps_max            STEPPING_MAX
            steps_queued         steps waiting for a step slot (a batch to
                                 begin or go on)
        """
        with self.lock:
            return {
                "call_actors_in_use": self.serving,
                "call_actors_lent": self.lent_servers,
                "call_actors_max": self.budget,
                "call_actors_peak": self.peak,
                "call_actors_wanted": sum(mailbox.asked for mailbox in self.wanting),
                "calls_queued": sum(mailbox.queued() for mailbox in self._mailboxes),
                "steps_in_use": self.stepping,
                "steps_lent": self.lent_steppers,
                "steps_max": self.steps_max,
                "steps_queued": len(self.runnable),
            }

    # -- the one assignment step ---------------------------------------------------

    def _assign(self, retry: bool = False) -> list[tuple[Address | None, Any]]:
        """(Under the lock.) Grant every free slot: queued steps first come
        first served, then waiting mailboxes, the one holding the fewest call
        actors first. The sends to make outside the lock: ``(an idle actor
        or None to start one, its message)``. ``retry``: the retry timer's, in a starved spell: one new executor
        actor may be tried (see :meth:`_retry_steps`)."""
        sends: list[tuple[Address | None, Any]] = []
        runnable = self.runnable
        while runnable and self.stepping < self.steps_max:
            stepper = self._steppers.take()
            if stepper is None and self.starved:
                if not retry:
                    break  # (no new one until the retry timer: see _undelivered)
                retry = False
                self.retrying = True
            self.stepping += 1
            sends.append((stepper, runnable.popleft()))
        wanting = self.wanting
        while wanting and self.serving < self.budget:
            mailbox = self._fairest()
            self._grant(mailbox)
            sends.append((self._servers.take(), Serve(mailbox=mailbox)))
        return sends

    def _fairest(self, left: WorkMailbox | None = None) -> WorkMailbox:
        """(Under the lock.) The waiting mailbox holding the fewest call
        actors (the first to ask among equals): round-robin by batch. A call
        actor that just ``left`` a mailbox goes back to it only when no
        other mailbox waits (it left for another: see :meth:`yields`)."""
        best: WorkMailbox | None = None
        fewest = 0
        for mailbox in self.wanting:
            if mailbox is left:
                continue
            held = mailbox.granted()
            if best is None or held < fewest:
                best, fewest = mailbox, held
        if best is None:
            assert left is not None and left in self.wanting
            return left
        return best

    def _grant(self, mailbox: WorkMailbox) -> None:
        # (Under the lock.) One of ``mailbox``'s requests gets a slot.
        mailbox.asked -= 1
        if not mailbox.asked:
            del self.wanting[mailbox]
        self.serving += 1
        if self.serving > self.peak:
            self.peak = self.serving

    def _send(self, sends: list[tuple[Address | None, Any]], retrying: bool = False) -> None:
        """Make the sends :meth:`_assign` decided (outside the lock). A send
        that cannot be made is answered where it belongs, never raised to
        this caller (whose own work may be another batch's), and the slot
        it gives back is granted again: see :meth:`_undelivered`. (Each
        failure takes one queued step or one request away, so this ends.)

        Starting an actor waits for its thread to start: on the main thread
        (a batch posted there), Ctrl-C's ``KeyboardInterrupt``, or another
        exception a signal handler raises (one that is no ``Exception``),
        may end that wait. It ends only the wait, not the send (else the
        slot decided for it would stay counted with no actor to hold it,
        and its message would never arrive): the actor is opened again for
        the message (nothing was sent to the one whose start it
        interrupted, which idles until the stop stops it), the other sends
        are made, and then the first such exception is raised (the others
        are dropped: each ended a start that was made again). (One that
        lands in the ``tell`` itself, a few instructions, is raised after
        the other sends too, that message taken as sent.)"""
        rt = self._rt
        interrupted: BaseException | None = None
        while sends:
            again: list[tuple[Address | None, Any]] = []
            for address, message in sends:
                try:
                    if address is None:
                        opener = self._open_server if type(message) is Serve else self._open_stepper
                        address = opener(rt.group, rt, self)
                    address.tell(message)
                except Exception as exc:  # noqa: BLE001 - no thread, a stopped group or actor, or a bug
                    again.extend(self._undelivered(message, exc, retrying))
                except BaseException as exc:  # noqa: BLE001 - an interrupt: raised once the sends are made
                    if interrupted is None:
                        interrupted = exc
                    if address is None:
                        again.append((None, message))  # (its actor's start was interrupted: opened again)
            sends = again
        if interrupted is not None:
            raise interrupted

    def _undelivered(
        self, message: Serve[WorkMailbox] | RunBatch | Begin | Resume, exc: BaseException, retrying: bool
    ) -> list[tuple[Address | None, Any]]:
        """``message`` could not be sent: its actor could not be started (no
        thread could be: ``RuntimeError``), or the runtime stops (its group
        refuses new actors, or the actor had stopped: an idle actor leaves
        its shelf before it retires, so only a stop ends one that a send
        was decided for). Its slot is given back and granted again (the
        sends returned). Then:

        * a ``Serve``'s mailbox hears that nobody comes; when no other
          server serves it or is on its way, and the runtime does not stop
          (a stop aborts its batch, which reclaims them), its queued calls
          fail ``EXECUTOR_UNAVAILABLE`` rather than wait for nobody;
        * a ``RunBatch`` (nothing of its batch has run) fails: a
          ``ToolBatchExecutionError`` naming ``exc``, or
          ``RuntimeStoppedError`` in a stop;
        * a ``Resume`` or ``Begin`` (its batch has begun: calls may be out)
          is never answered early: it waits at the head of the queue, for an
          executor actor that ends its work (``step_ended``) or for the
          retry timer (:attr:`STEP_RETRY_S`), which tries to start one
          again (``starved``: meanwhile queued steps take only idle
          executor actors, so no batch fails on another's account); in a
          stop, its batch is answered ``RuntimeStoppedError``, and so is
          any step once the stop has refused the queue (``finished``);
        * ``retrying`` (the retry timer's sends, on the loop's thread): a
          step of any kind waits so, and nothing is answered there."""
        stopping = isinstance(exc, (RuntimeStoppedError, pykka.ActorDeadError))
        served: WorkMailbox | None = None  # a Serve's mailbox
        unserved: list[Any] = []
        refuse = arm = False
        with self.lock:
            stopping = stopping or self.finished  # (past the stop's refusal of the queue: as in a stop)
            starved = self.starved
            if type(message) is Serve:
                self.serving -= 1
                served = message.mailbox
                unserved = served.refused_locked(reclaim=not stopping)
            else:
                self.stepping -= 1
                if stopping or (type(message) is RunBatch and not retrying):
                    # (Finished: the stop is past refusing the queue, and no
                    # thread will run a step. The retry's own is refused
                    # then too, on the loop's thread: a stop() its callbacks
                    # call there returns at once.)
                    refuse = True
                else:
                    self.runnable.appendleft(message)
                    self.starved = True
                    arm = not self.retry_armed  # (one timer, however the spell began)
                    self.retry_armed = True
            sends = [] if self.closed else self._assign()
        if not stopping and not retrying and not (starved and type(message) is not Serve):
            # (Once a starved spell, not at every retry.)
            logger.opt(exception=exc).error("the dispatcher could not start an actor for {}", type(message).__name__)
        if served is not None and unserved:
            served.fail_unserved(unserved, exc)
        if refuse:
            self._refuse_step(message, None if stopping else exc)
        if arm:
            self._arm_retry()
        return sends

    def _arm_retry(self) -> None:
        loop = self._rt.loop.loop
        try:
            loop.call_soon_threadsafe(loop.call_later, self.STEP_RETRY_S, self._retry_steps)
        except RuntimeError:  # the loop is closed: the runtime stops (refuse_queued answers them)
            with self.lock:
                self.retry_armed = False

    def _retry_steps(self) -> None:
        # On the loop's thread: the starved spell's retry. An executor actor
        # is tried again for the head of the queue and, once one starts, for
        # the rest; a step that still cannot start goes back to the head,
        # whatever its kind (nothing is answered on the loop's thread), and
        # the timer is armed again.
        # The spell lasts until that start succeeds (``retrying`` meanwhile):
        # a batch submitted while it is tried waits behind it, as before it.
        with self.lock:
            self.retry_armed = False
            if self.closed or not self.starved:
                return
            sends = self._assign(retry=True)
            if not self.retrying:
                self.starved = False  # (nothing to try: the queue waits for a step slot as ever)
        try:
            try:
                self._send(sends, retrying=True)
            finally:
                with self.lock:
                    self.retrying = False
                    # Failed again: the step went back to the head and armed the timer.
                    if self.retry_armed or self.closed:
                        sends = []
                    else:
                        self.starved = False
                        sends = self._assign()
            self._send(sends, retrying=True)
        except BaseException as exc:  # noqa: BLE001 - never into the loop
            logger.opt(exception=exc).error("retrying the queued steps failed")

    def refused(self, message: Serve[WorkMailbox] | RunBatch | Begin | Resume) -> None:
        """A send :meth:`_assign` decided reached its actor after it retired
        (the runtime stops), and the actor refuses it: answered as any send
        that could not be made in a stop (:meth:`_undelivered`: the slot
        comes back and is granted again, a ``Serve``'s mailbox hears that
        nobody comes, a step's batch gets ``RuntimeStoppedError``)."""
        self.send(self._undelivered(message, RuntimeStoppedError("the actor retired"), False))

    # -- call-actor slots ------------------------------------------------------------

    def opened(self, mailbox: WorkMailbox) -> None:
        with self.lock:
            self._mailboxes[mailbox] = None

    def closed_mailbox_locked(self, mailbox: WorkMailbox) -> None:
        # (Under the lock.) Its requests still waiting are dropped.
        self._mailboxes.pop(mailbox, None)
        self.wanting.pop(mailbox, None)
        mailbox.drop_asked_locked()

    def want_locked(self, mailbox: WorkMailbox) -> list[tuple[Address | None, Any]]:
        """(Under the lock.) ``mailbox`` wants one more server (it counted it
        in ``servers`` and ``spare`` already). The sends to make once the
        lock is released (:meth:`send`)."""
        if self.closed:
            mailbox.refused_locked(reclaim=False)
            return []
        mailbox.asked += 1
        self.wanting[mailbox] = None
        sends = self._assign()
        if mailbox.asked:
            # At the budget: call actors idle elsewhere (nothing queued for
            # them) leave for it now, as many as free a slot (more than one
            # when lends that ended left ``serving`` above the budget); one
            # that runs out of calls later sees the waiting mailbox
            # (waits_for) and leaves then.
            needed = self.serving - self.budget + 1
            for other in self._mailboxes:
                if needed <= 0:
                    break
                if other is not mailbox:
                    needed -= other.shed_idle_locked(needed)
        return sends

    def send(self, sends: list[tuple[Address | None, Any]]) -> None:
        if sends:
            self._send(sends)

    def waits_for(self, mailbox: WorkMailbox) -> bool:
        """(Under the lock.) Whether another mailbox waits for a slot, or
        the runtime stops (closed: a batch still running then starts no
        call): a call actor of ``mailbox`` with nothing to take leaves."""
        wanting = self.wanting
        return self.closed or (bool(wanting) and (len(wanting) > 1 or mailbox not in wanting))

    def yields(self, mailbox: WorkMailbox) -> bool:
        """(Under the lock.) Whether a call actor of ``mailbox`` that is
        about to take its next call leaves instead, for a waiting mailbox
        that holds none, or at least two call actors fewer (capacity is
        shared between batches: :meth:`release` sends it there; the calls
        still queued here wait their turn, see ``WorkMailbox.take``). So at
        a budget of one, or when every batch holds one call actor, the
        batches take turns call by call; a difference of one does not move
        a call actor (it would only move back)."""
        if not self.wanting:
            return False
        mine = mailbox.granted()
        if mine < 1:
            return False
        for other in self.wanting:
            if other is not mailbox:
                held = other.granted()
                if held == 0 or held + 1 < mine:
                    return True
        return False

    def repays_locked(self, worker: Address) -> bool:
        """(Under the lock.) The call actor at ``worker`` is about to take
        its next call: whether it gives its slot back instead, leaving its
        mailbox (True when it owes it, :meth:`unlend`, and ``serving`` is
        still above the budget: :meth:`release` takes the slot and the
        debt). False when it owes nothing, or nothing any more (other call
        actors gave slots back meanwhile: the debt is cleared)."""
        owing = self.owing
        if worker not in owing:
            return False
        if self.serving > self.budget:
            return True
        owing.discard(worker)
        return False

    def release(self, worker: Address, left: WorkMailbox | None = None) -> WorkMailbox | None:
        """The call actor at ``worker`` left a mailbox (``left``): the next
        mailbox it serves (the fairest waiting one, another than ``left``
        when another waits), or None (it is idle now, or retired if enough
        are idle). A slot it owed (:meth:`unlend`) is given back with its
        debt."""
        with self.lock:
            self.serving -= 1
            self.owing.discard(worker)
            if self.wanting and self.serving < self.budget:
                mailbox = self._fairest(left)
                self._grant(mailbox)
                return mailbox
            if not self.closed and self._servers.shelve(worker):
                return None
        self._rt.group.retire(worker.ref)
        return None

    # -- step slots ------------------------------------------------------------------

    def post(self, work: Any) -> None:
        """Run ``work`` (``RunBatch``, ``Begin``, ``Resume``) on an idle
        executor actor, a new one, or when a step slot frees."""
        with self.lock:
            finished = self.finished
            if not finished:
                if (
                    self.starved
                    and not self.retrying
                    and not any(type(queued) is not RunBatch for queued in self.runnable)
                ):
                    self.starved = False  # (no begun batch waits: this batch tries a thread itself)
                self.runnable.append(work)
                sends = self._assign()
        if finished:
            self._refuse_step(work, None)  # (the stop is past refusing the queue: nothing would run it)
            return
        self.send(sends)

    def step_ended(self, address: Address) -> Any:
        """The executor actor at ``address`` ended its work: the next
        queued step for it, or None (it is idle, or retired)."""
        with self.lock:
            if self.runnable and self.stepping <= self.steps_max:
                return self.runnable.popleft()
            self.stepping -= 1
            sends = self._assign()
            kept = not self.closed and self._steppers.shelve(address)
        self.send(sends)
        if not kept:
            self._rt.group.retire(address.ref)
        return None

    # -- lending ---------------------------------------------------------------------

    def lend(self, stepper: bool) -> None:
        """An actor (an executor actor when ``stepper``, else a call actor)
        blocks on work the runtime must do: its slot serves others until
        :meth:`unlend`."""
        sends = self.lend_decided(stepper)
        if sends:
            self._send(sends)

    def lend_decided(self, stepper: bool) -> list[tuple[Address | None, Any]]:
        """:meth:`lend`'s counts and grants, under the lock; the sends to
        make with :meth:`send` (an on-demand lend counts under its own lock
        and sends after it: see ``executor.Lent.lend``)."""
        self.lock.acquire()
        try:
            if stepper:
                self.stepping -= 1
                self.lent_steppers += 1
            else:
                self.serving -= 1
                self.lent_servers += 1
            # (The slot lent serves a queued step or a waiting mailbox, if any.)
            return self._assign() if self.runnable or self.wanting else []
        finally:
            self.lock.release()

    def unlend(self, worker: Address | None = None) -> None:
        """The wait is over: the actor holds a slot again, at once (the
        count may pass its bound): the call actor at ``worker``, else (None)
        an executor actor. A call actor that took its slot back above the
        budget owes it (``owing``; it may owe it already, from an earlier
        lend of the same body or step), and gives it back at its next take
        while ``serving`` is still above (:meth:`repays_locked`) or as it
        leaves its mailbox (:meth:`release`). An executor actor gives its
        step slot back as its work ends (:meth:`step_ended`)."""
        self.lock.acquire()
        try:
            if worker is None:
                self.lent_steppers -= 1
                self.stepping += 1
                return
            self.lent_servers -= 1
            serving = self.serving = self.serving + 1
            if serving > self.budget:
                self.owing.add(worker)
        finally:
            self.lock.release()

    # -- stop ------------------------------------------------------------------------

    def close(self) -> None:
        """Runtime stop (past the stop hooks: the executors' drain): no more
        call-actor grants (waiting mailboxes are told nobody comes); idle
        actors are forgotten (the runtime's group stops them). A batch still
        running now is stuck, or drains past the stop's signal, starting no
        call: the call actors idle on its mailbox leave (a ``LEAVE`` each,
        :meth:`WorkMailbox.shed_idle_locked`), and so does one that runs out
        of calls from now on (:meth:`waits_for`), so only a thread stuck in
        a body is left behind. Queued steps still run (an executor actor
        that ends its work takes the next), so their batches drain."""
        with self.lock:
            self.closed = True
            self._servers.close()
            self._steppers.close()
            for mailbox in list(self.wanting):
                mailbox.drop_asked_locked()
            self.wanting.clear()
            for mailbox in self._mailboxes:
                mailbox.shed_idle_locked(mailbox.servers)

    def withdraw(self, run: Any) -> bool:
        """(Runtime stop, past its teardown.) Take the ``Resume`` queued for
        ``run`` out of the queue (its batch waits for a step slot, or for an
        executor actor none could be started for): whether there was one.
        No thread will run the batch again (its inbox stays scheduled)."""
        with self.lock:
            for at, work in enumerate(self.runnable):
                if type(work) is Resume and work.run is run:
                    del self.runnable[at]
                    return True
        return False

    def refuse_queued(self) -> None:
        """Runtime stop, once its actors are stopped (or left behind, stuck):
        a step still queued (a batch waiting for a slot behind executor
        actors the stop could not wait for) is answered with
        ``RuntimeStoppedError``, as pykka fails the asks a stopped actor
        never answered; from now on a step is refused as it comes
        (``finished``), the retry timer's too."""
        with self.lock:
            self.finished = True
            queued = list(self.runnable)
            self.runnable.clear()
        for work in queued:
            self._refuse_step(work, None)

    # -- invariants ------------------------------------------------------------------

    def assert_invariants(self) -> None:
        """What holds between two events (see the class docstring)."""
        with self.lock:
            assert self.serving >= 0 and self.lent_servers >= 0, self
            # (Above the budget only until the call actors that took their
            # slot back there reach their next take; each holds its slot,
            # or lent it again.)
            owing = len(self.owing)
            assert self.serving <= self.budget + owing, self
            assert owing <= self.serving + self.lent_servers, self
            assert self.stepping >= 0 and self.lent_steppers >= 0, self
            assert not self.wanting or (self.serving >= self.budget and not self.closed), self
            # (Starved: a retry is armed, and no executor actor is idle.)
            assert not self.starved or self.retry_armed or self.retrying or self.closed, self
            assert not self.retrying or self.starved, self
            assert not self.runnable or self.stepping >= self.steps_max or (self.starved and not len(self._steppers)), (
                self
            )
            for mailbox in self.wanting:
                assert mailbox.asked > 0, f"{mailbox} waits for nothing"
            granted = 0
            for mailbox in self._mailboxes:
                if mailbox not in self.wanting:
                    assert mailbox.asked == 0, f"{mailbox} asked and is not waiting"
                granted += mailbox.granted()
            assert granted <= self.serving + self.lent_servers, f"{granted} call actors granted: {self}"
