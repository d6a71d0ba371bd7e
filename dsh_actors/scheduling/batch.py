"""One batch's schedule: the rolling pool with exclusive barriers.

A :class:`BatchRun` holds everything one batch needs while it runs, and
only the executor actor's thread touches it. The executor actor makes one
per ``RunBatch`` and drops it when the batch has replied: resetting an
executor is dropping that object.

The schedule is one state machine. After every message (``Settled``,
``Wake``, ``Deadline``; the ends of calls, ``Settled`` and ``BodyEnded``,
queued together count as one) :meth:`BatchRun._step` commits what may be
committed and starts what may start; :meth:`BatchRun._assert_invariants`
states what holds between steps (the property tests run it after every
step). Starting a call means: build it (arguments parsed and materialized
as it is about to start), classify it (lazily, so a barrier that changes
the registry affects later calls), log its ``tool/call``, prepare it (the
pre-execute waterfall, approval, guards: in model order, here), then

* run it **inline**, here, when it is the only call that can start
  (nothing else is out, and it is exclusive, or the batch is serial, or it
  is the last call): no hop at all;
* or put it in the batch's :class:`~.pool.WorkMailbox`, where the next free
  call actor serving the batch takes it and reports ``Settled``.

A call commits (finalize, ``tools/result``, its result and ``tool/result``)
as soon as it has settled and every call before it has committed: a call's
``tools/result`` never waits for unrelated siblings.

A **sub-batch** (``NativeExecutor.open_sub_batch``: a PTC program's tool
calls) is the same state machine with two differences. Its calls arrive one
by one (``Fed``) until its feeder seals it (``Sealed``), and the feeder may
make its next call only once it has the result of an earlier one: so a
call of a sub-batch commits as soon as it has settled, whatever the calls
before it do (model order still decides when calls *start*, an exclusive
call still waits for every call before it to commit and holds back every
call after it until it has committed). Its calls' starts and results go to
the feeder's :class:`~.messages.FeedSink`, not to the session's
``tool/call``/``tool/result``.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from enum import IntEnum
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar

from loguru import logger

from ..errors import AbortError, ToolBatchExecutionError, safe_str
from ..execution import freeze
from ..model import (
    ToolBatchInput,
    ToolBatchResult,
    ToolCall,
    ToolCallResult,
    ToolExecutionResult,
    ToolExecutionSuccess,
    UserMessage,
    slot_setters,
)
from ..pipeline.flights import Outbox
from ..pipeline.intake import batch_arguments, loggable, parse_arguments
from ..pipeline.results import aborted, failure_from_exception
from ..pipeline.stages import (
    LOOK_UP,
    MAX_UNPREPARED,
    Call,
    begin_call,
    dispatch,
    finalize,
    finish_on_loop,
    lookup,
    prepare,
    refuse_deferral,
    stale,
    stamp,
    start_on_loop,
    waits_on_loop,
    wants_loop,
)
from ..session import (
    ENCLOSING_CALL,
    approval_request_event,
    batch_event,
    call_event,
    result_event,
    suspend_event,
)
from ..signals import AbortController, AbortSignal
from ..visibility import definition_mode
from .inbox import RUNNING, BatchInbox
from .messages import BodyEnded, CallStart, Deadline, Fed, Reply, Returned, Sealed, Settled, Wake
from .pool import WorkMailbox
from .recovery import unknown_calls
from .suspension import new_suspension_id, suspension_value

if TYPE_CHECKING:  # pragma: no cover
    from ..kernel import Kernel
    from ..session import Session
    from .messages import BatchHost

__all__ = ["BatchRun", "CallState"]


class CallState(IntEnum):
    """Where a call of a batch is: its one named state, which the
    :class:`BatchRun` keeps per call (``BatchRun.state``), changed only by
    ``BatchRun._move`` along :data:`NEXT`. Its ``Call`` carries no state,
    only facts that are data (``outcome``, ``dispatched``, ``ask``,
    ``final``: see ``pipeline/call.py``), which
    :meth:`BatchRun._assert_invariants` checks against this state while
    the batch holds the call."""

    UNSTARTED = 0
    """Not started yet (from ``next_start`` on): not built, or built and not
    prepared (with no outcome, or one settled as it began: bad arguments)."""
    REDO = 1
    """Started, came back unrun (what it was prepared under changed before
    its body started): unprepared, prepared again before ``next_start``."""
    OUT = 2
    """In the work mailbox or on a call actor (owned there until ``Settled``
    or ``Returned``)."""
    EARLY = 3
    """As OUT, but prepared ahead of a free slot (at most ``limit`` of
    them: no call actor is free for it yet)."""
    FLIGHT = 4
    """Its async body is in flight on the batch's loop (until ``BodyEnded``),
    or, while the step that decided it runs, waits to be started and
    launched (``launching``): found stale then, it goes back to REDO."""
    HELD = 5
    """The batch holds it with its outcome (dispatched inline or back, or
    settled without dispatch): it commits in its turn."""
    DEFERRED = 6
    """The approval service deferred it (it has an ``ask``, no outcome): the
    commit passes it in its turn; it waits for a decision (the batch
    suspends), or for an abort that ends it."""
    STUCK = 7
    """Still out when ``rt.stop()``'s deadline came: it commits ABORTED, its
    ``Call`` left with whoever runs its body."""
    COMMITTED = 8
    """Its result is recorded (and logged)."""
    PREPARING = 9
    """Being prepared (after UNSTARTED or REDO), its approval service
    asked on a thread of its own while the thread that steps the batch
    waits for the answer and meanwhile commits the calls that settle
    (:meth:`BatchRun._meanwhile`): a person taking their time holds no
    earlier call's result back. Nothing else starts meanwhile. At most one
    call is PREPARING; a call whose preparation asks nobody never is."""


#: The states whose call is owned elsewhere (a call actor, the mailbox, a
#: loop): OUT, EARLY and FLIGHT, consecutive (``_out_state`` tests the range).
OUTS = frozenset({CallState.OUT, CallState.EARLY, CallState.FLIGHT})
assert OUTS == {s for s in CallState if CallState.OUT <= s <= CallState.FLIGHT}

#: Where a call goes once prepared: settled or deferred, on towards its
#: body, or back to be prepared again.
_PREPARED = frozenset(
    {CallState.REDO, CallState.OUT, CallState.EARLY, CallState.FLIGHT, CallState.HELD, CallState.DEFERRED}
)

#: The only moves ``BatchRun._move`` makes.
NEXT: dict[CallState, frozenset[CallState]] = {
    CallState.UNSTARTED: _PREPARED | {CallState.PREPARING},
    CallState.REDO: _PREPARED | {CallState.PREPARING},
    CallState.PREPARING: _PREPARED,
    CallState.OUT: frozenset({CallState.HELD, CallState.REDO, CallState.STUCK}),
    CallState.EARLY: frozenset({CallState.HELD, CallState.REDO, CallState.STUCK}),
    CallState.FLIGHT: frozenset({CallState.HELD, CallState.REDO, CallState.STUCK}),
    CallState.HELD: frozenset({CallState.COMMITTED}),
    CallState.DEFERRED: frozenset({CallState.COMMITTED}),
    CallState.STUCK: frozenset({CallState.COMMITTED}),
    CallState.COMMITTED: frozenset(),
}

# The states as module constants: an Enum member read through its class is
# a slow attribute lookup, and the schedule reads them on every call.
_UNSTARTED = CallState.UNSTARTED
_REDO = CallState.REDO
_OUT = CallState.OUT
_EARLY = CallState.EARLY
_FLIGHT = CallState.FLIGHT
_HELD = CallState.HELD
_DEFERRED = CallState.DEFERRED
_STUCK = CallState.STUCK
_COMMITTED = CallState.COMMITTED
_PREPARING = CallState.PREPARING
#: NEXT as bit masks, by state (an Enum member hashes in Python: no set
#: lookups on the hot path).
_NEXT_MASKS = tuple(sum(1 << to for to in NEXT[state]) for state in CallState)
_STATES = len(CallState)


def _unasked(caller: AbortSignal) -> AbortError:
    """Why a call's approval service was not asked: its ``caller`` aborted
    (``prepare`` settles it ``ABORTED_BEFORE_DISPATCH``)."""
    return AbortError(before_dispatch=True, reason=caller.reason)


def _out_state(state: CallState) -> bool:
    """Whether a call in ``state`` is out (see :data:`OUTS`)."""
    return _OUT <= state <= _FLIGHT


class BatchRun:
    """The schedule of one batch (see the module docstring).

    State (the executor actor's thread only):

    * ``calls[i]``: call ``i``, or None (not built yet, or committed).
    * ``next_start``: calls before it have started (built, logged, prepared,
      then out, inline, settled or deferred); calls from it on are UNSTARTED.
    * ``next_commit``: calls before it have committed.
    * ``state[i]``: call ``i``'s :class:`CallState`, ``count[s]`` how many
      calls are in state ``s`` and ``outs`` how many are out; all change
      only in :meth:`_move`.
      OUT, EARLY and FLIGHT calls are *out*: owned by whoever holds them
      (the mailbox, a call actor, the loop), the executor does not read
      them until their ``Settled``, ``Returned`` or ``BodyEnded`` arrives.
      At most ``limit`` run: no more call actors serve the batch. Beyond
      ``limit`` out, a call is put only as prepared ahead (EARLY): at most
      ``2 * limit`` are out. With a FLIGHT out, at most ``limit`` are:
      nothing is prepared ahead then, and a flight starts only once every
      call put has been taken (an EARLY call taken runs in a freed slot).
    * REDO calls came back unrun because what they were prepared under
      changed before their body started (``Returned``): unprepared again, and
      the next to start (the first in model order, before ``next_start``),
      classified and prepared again (their ``tool/call`` is not written
      twice).
    * ``barrier``: the exclusive call that started and has not committed.
    * ``halted``: why no call starts any more (None while calls may start).
    * DEFERRED calls (the approval service answered ``"deferred"``: they
      stay held in ``calls``, and the commit passes them in their turn):
      the calls behind one commit in their turn, but an
      exclusive call behind one waits (it needs every call before it
      committed), and a deferred exclusive call stays the ``barrier``. When
      nothing is out and nothing else may start, the batch suspends
      (:meth:`_suspended`): it replies with the settled results, the open
      ids and the suspension. An abort ends them ``ABORTED_BEFORE_DISPATCH``.
    * ``starts``: a continued batch (``continue_batch``): where each call
      starts. A call given its result is never built: it starts as soon
      as it is next (even behind a barrier: nothing of it runs) and commits
      its given result in its turn, without emitting or logging anything.
    * ``sink``: a sub-batch's feeder (None for a batch); ``sealed``: no more
      calls will be fed (always True for a batch). In a sub-batch, calls
      between ``next_commit`` and ``next_start`` commit as they settle:
      ``calls[i]`` is None there once call ``i`` has committed.
    """

    #: Set by the property tests: assert the invariants after every step.
    check_invariants: ClassVar[bool] = False

    __slots__ = (
        "rt",
        "native",
        "batch",
        "limit",
        "inbox",
        "mailbox",
        "calls",
        "unbuilt",
        "next_start",
        "next_commit",
        "state",
        "count",
        "outs",
        "barrier",
        "results",
        "committed",
        "session",
        "log_step",
        "signal",
        "body_parent",
        "owns_body_parent",
        "unsubscribe",
        "bug",
        "log_error",
        "stuck",
        "inline",
        "halted",
        "hook",
        "reply",
        "loop",
        "launching",
        "outbox",
        "policy",
        "starts",
        "late",
        "suspension_id",
        "unknown",
        "sink",
        "sealed",
        "found",
    )

    def __init__(
        self,
        rt: Kernel,
        native: BatchHost,
        batch: ToolBatchInput,
        limit: int,
        reply: Reply,
        loop: Any = None,
        schedule: Any = None,
        starts: tuple[CallStart, ...] | None = None,
        sink: Any = None,
        run_here: Any = None,
    ) -> None:
        self.rt = rt
        self.loop = loop  # where async bodies run (None: the runtime's loop thread)
        self.native = native
        self.batch = batch
        self.limit = limit
        self.reply = reply
        # schedule(): hand this run to an executor actor; run_here(): run it
        # on the calling call actor (see BatchInbox).
        self.inbox = BatchInbox(
            None if schedule is None else lambda: schedule(self),
            None if run_here is None else lambda: run_here(self),
        )
        self.mailbox: WorkMailbox | None = None  # made on the first call put in it
        self.calls: list[Call | None] = []
        # For each call not built yet: (the model's call, override, hint).
        self.unbuilt: list[tuple[ToolCall, Any, str | None] | None] = []
        # What its calls' lookups found (one agent, one tool set): shared by them.
        self.found: dict[str, tuple[Any, int]] = {}
        self.next_start = 0
        self.next_commit = 0
        self.state: list[CallState] = []  # each call's CallState (see _move)
        self.count = [0] * _STATES  # how many calls are in each state
        self.outs = 0  # how many are out: OUT, EARLY or FLIGHT
        self.barrier: int | None = None
        # The committed results, in commit order; a sub-batch keeps none
        # (each goes to its sink as it commits: a program's thousands of
        # results are not held until it ends, and its reply holds none).
        self.results: list[ToolCallResult] = []
        self.committed = 0  # results whose tool/result reached the session (a sub-batch's: its sink)
        self.session: Session | None = None
        # The step (turn, step, agent id) of a logged batch, set with
        # ``session``: every event it logs names it, so its tool/start,
        # tool/result and approval requests pair with its calls even while
        # another open call (another step's, another agent's sharing the
        # session) has the same id; agents sharing a session number their
        # steps alike.
        self.log_step: tuple[int, int, str | None] | None = None
        # The batch's signal (without one, the stop's until _open).
        self.signal: AbortSignal = rt.stop_signal if batch.signal is None else batch.signal
        # The batch's signal and the runtime's stop, the first abort wins:
        # every call's execution.signal (what its hooks see: pre-execute
        # listeners, the approval service, wrappers, guards, post-execute)
        # and the one parent of its body's fresh signal. Fused once in
        # _open (without a batch signal, from the stop alone, and then the
        # batch's signal too), closed at the end: a batch's calls share one
        # execution.signal that no other batch's calls have (but a sub-batch's
        # call fed with a signal of its own: see _fed).
        self.body_parent: AbortSignal = rt.stop_signal
        self.owns_body_parent = False
        self.unsubscribe: Any = None
        self.bug: BaseException | None = None
        self.log_error: BaseException | None = None
        self.stuck: list[Call] = []  # still out when the stop's deadline came
        self.inline: Call | None = None  # the call whose body runs here now (see abandoned_error)
        self.halted: str | None = None
        self.hook: Any = None
        # The async calls this step decided to start as flights (FLIGHT, their
        # slots taken): each is checked once more and started as it is
        # launched, with the others, before a later call is handed on or its
        # pre-execute hooks run, or at the end of the step (see _launch).
        self.launching: list[Call] = []
        self.outbox: Outbox | None = None  # the loop side of the inbox (made with the first flight)
        self.policy: Any = None  # what the executor gives the batch (BatchPolicy), asked as it opens
        # A continued batch: where each call starts (None: all from the start).
        self.starts = starts
        # A call committed ahead of its turn: an abort's deferred call, or a
        # call settled behind one that waits as the batch suspends.
        self.late = False
        self.suspension_id: str | None = None  # minted when the first call defers
        # The calls that run no tool, as its tool/batch logged them (None:
        # not logged yet); a suspension records the same.
        self.unknown: list[str] | None = None
        self.sink = sink  # a sub-batch's FeedSink (None: a batch)
        self.sealed = sink is None  # no more calls will be fed

    # -- the run -------------------------------------------------------------------

    def begin(self) -> ToolBatchResult | BaseException | Any:
        """Open the batch and take its first step (on the executor actor
        that received it); its outcome, or RUNNING."""
        try:
            self._open()
        except BaseException as exc:  # noqa: BLE001 - a bug: fail the batch
            self.bug = exc
        self._advance()
        return self.drain()

    def drain(self) -> ToolBatchResult | BaseException | Any:
        """Handle every message queued now; the batch's outcome once it has
        ended, else RUNNING (the caller then pauses the inbox, and whoever
        puts the next message schedules the run again)."""
        inbox = self.inbox
        # An end (Settled, BodyEnded) with more messages queued behind it is
        # taken without a step: one step for the ends queued together. Until
        # that step has run, whether the batch is done is not asked (a
        # suspension, say, holds only once a step has seen every message:
        # an abort's Wake may be queued behind the end).
        unstepped = False
        while unstepped or not self._done():
            message = inbox.get()
            if message is None:
                if unstepped:  # (not expected: more() said one was queued)
                    unstepped = False
                    self._advance()
                    continue
                return RUNNING
            unstepped = False
            try:
                if self._receive(message) and self.bug is None and inbox.more():
                    unstepped = True
                    continue  # one step for the ends queued now
            except BaseException as exc:  # noqa: BLE001 - a bug: drain, then fail the batch
                self._failed(exc)
            self._advance()
        inbox.end()
        try:
            return self._close()
        except BaseException as exc:  # noqa: BLE001 - a bug: the batch fails, it never hangs
            logger.opt(exception=exc).error("the batch scheduler failed")
            return self._error(_internal(exc), exc)

    def _receive(self, message: Any) -> bool:
        """Take in one message of the inbox (no step); whether it was an end
        (``Settled``, ``BodyEnded``)."""
        kind = type(message)
        if kind is Settled:
            index = message.call.index
            # (Not out: committed ABORTED already, at the stop's deadline.)
            if _OUT <= self.state[index] <= _FLIGHT:
                self._move(index, _HELD)
            return True
        if kind is BodyEnded:
            self._body_ended(message)
            return True
        if kind is Returned:
            self._returned(message)
        elif kind is Fed:
            self._fed(message)
        elif kind is Sealed:
            self.sealed = True
        elif kind is Deadline:
            self._deadline()
        else:
            assert kind is Wake, message
        return False

    def _meanwhile(self, call: Call, ask: Callable[[], Any]) -> Any:
        """``call``'s approval: ``ask()`` (the approval service, awaited if
        async) runs on a worker thread (``rt.workers()``: a thread of the
        runtime, which a stop called there counts as its own and names if it
        is left running) in a copy of this thread's context (the call's),
        while this thread, which steps the batch, waits for the answer
        (lending its slot while it only waits) and meanwhile takes in the
        messages put in the inbox and commits what settled: a call before
        ``call`` whose body ended records its result (``tools/result``,
        ``tool/result``) now, not when a person has answered. Nothing
        starts meanwhile: ``call`` is PREPARING (see :class:`CallState`).
        What the service set in its context is set in the call's, as if it
        had run here. The answer, or what ``ask`` raised."""
        caller = call.caller
        if caller.aborted:  # (the stop may have shut the workers down: asked of nobody)
            raise _unasked(caller)
        before = contextvars.copy_context()
        context = before.copy()
        try:
            answer = self.rt.workers().submit(context.run, ask)
        except RuntimeError:
            if caller.aborted:  # (the stop shut the workers down meanwhile)
                raise _unasked(caller) from None
            # No thread could be started: asked here, as a nested call's is
            # (the calls before it then commit once it has answered).
            with self.rt.waiting():
                return ask()
        self._move(call.index, _PREPARING)
        inbox = self.inbox
        waker = threading.Event()
        inbox.waker = waker
        try:
            answer.add_done_callback(lambda _: waker.set())
            while True:
                waker.clear()
                self._take_ends()  # (first: what was queued before the waker was set)
                if answer.done():
                    break
                with self.rt.waiting():
                    waker.wait()
        finally:
            inbox.waker = None
        if answer.cancelled():  # (the stop shut the workers down before one took it)
            raise _unasked(caller)
        for var, value in context.items():
            if var not in before or before[var] is not value:
                var.set(value)
        return answer.result()

    def _take_ends(self) -> None:
        """While a call is PREPARING (:meth:`_meanwhile`): the messages
        queued now taken in, and what settled committed (no call starts)."""
        inbox = self.inbox
        try:
            message = inbox.get()
            while message is not None:
                self._receive(message)
                message = inbox.get()
            self._commit_ready()
            if BatchRun.check_invariants and self.bug is None:
                self._assert_invariants()
        except BaseException as exc:  # noqa: BLE001 - a bug: no call starts; the batch fails
            self._failed(exc)

    def abandoned_error(self, unscheduled: bool = False) -> ToolBatchExecutionError:
        """The batch's answer when ``rt.stop()`` cannot wait for it any
        longer: the thread running it is stuck (a body run inline, a
        listener or an approval service that ignores its signal), so the
        stop answers for it (``NativeExecutor._shutdown``, on the stop's
        thread). It reads only ``inline``, ``results`` and ``committed``,
        which that thread does not write while it is stuck, but for one
        waiting for an approval service (:meth:`_meanwhile`), which may
        commit a call meanwhile: the stop then reads the results committed
        so far (``results`` is appended before ``committed`` counts it); the
        batch goes on when the thread comes back, and its own answer is then
        dropped.
        ``unscheduled``: no thread runs it (its step waited in the
        dispatcher's queue, taken back by the stop): see :meth:`unscheduled`."""
        call = self.inline
        if unscheduled:
            detail = (
                "the runtime stopped while the batch waited for an executor actor to take its step (none "
                "could be started, or every step slot was held by one that did not end), so it could not "
                "commit the calls still out, nor answer"
            )
        elif call is not None:
            execution = call.execution
            detail = (
                "the runtime stopped while tool bodies were still running: "
                f'{execution.call_id} (tool "{execution.name}"), run by the batch\'s executor, which '
                "could not answer"
            )
        else:
            detail = (
                "the runtime stopped while the batch's executor was still busy (a listener, an approval "
                "service or a tool body ignoring its signal) and could not answer"
            )
        return self._error(detail, None)

    def unscheduled(self) -> None:
        """(``rt.stop()``: past its teardown, or refusing the batch's step.)
        The batch's step was taken out of the dispatcher's queue, or will
        never be read: no thread will run it again. Its work mailbox
        closes, so the call actors waiting on it leave instead of being
        left behind. Nothing else of the batch is
        touched (its calls still out stay uncommitted: the stop runs no
        batch code, which may be a listener that never returns)."""
        mailbox = self.mailbox
        if mailbox is not None:
            mailbox.close()

    def _error(self, detail: str, failure: BaseException | None) -> ToolBatchExecutionError:
        """The batch's failure: ``detail``, the results committed so far
        and the partial result, with ``failure`` (a bug, a log write
        error) as its cause."""
        results = tuple(self.results)
        error = ToolBatchExecutionError(detail, results=results[: self.committed], partial=_batch_result(results))
        if failure is not None:
            error.__cause__ = failure
        return error

    def _body_ended(self, message: BodyEnded) -> None:
        for call, value, error in message.ends:
            index = call.index
            if self.state[index] is not _FLIGHT:
                continue  # committed ABORTED already (the stop's deadline)
            self._move(index, _HELD)
            try:
                finish_on_loop(call, value, error)
            except BaseException as exc:  # noqa: BLE001 - finish_on_loop contains render; be sure
                logger.opt(exception=exc).error("finishing {!r} failed", call)
                call.settle(failure_from_exception(exc), run_post=False, dispatched=True)

    def _returned(self, message: Returned) -> None:
        mailbox = self.mailbox
        assert mailbox is not None  # (it sent them)
        mailbox.resume()  # held since they were found stale
        for call in message.calls:
            index = call.index
            state = self.state[index]
            if not _out_state(state):
                continue  # committed ABORTED already (the stop's deadline)
            if self.halted is not None:
                # Halted meanwhile: it never starts (as a reclaimed call).
                call.abort_unstarted()
                self._move(index, _HELD)
                continue
            call.unprepare()
            self._move(index, _REDO)

    def _fed(self, fed: Fed) -> None:
        """One more call of a sub-batch: built now (its arguments are a
        value already), the last in model order."""
        index = len(self.calls)
        batch = self.batch
        # A call fed with a signal of its own follows the batch's and that
        # one (subscribed only once something waits on it: see AbortController).
        signal = self.body_parent if fed.signal is None else AbortController(self.body_parent, fed.signal).signal
        call = begin_call(
            index,
            fed.call_id,
            fed.name,
            fed.arguments,
            signal,
            batch.agent,
            batch.tool_set,
            root_call_id=fed.root_call_id,
            parent=fed.parent,
            schema=fed.schema,
            context=batch.context,
            deps=batch.deps,
            found=self.found,
        )
        call.body_parent = signal
        call.body_hook = self.hook
        call.loop = self.loop
        self.unbuilt.append(None)
        self.calls.append(call)
        self._added()

    def _open(self) -> None:
        batch = self.batch
        rt = self.rt
        stopping = rt.stop_signal
        if batch.signal is not None:
            self.body_parent = AbortSignal.any(self.signal, stopping)
        else:
            self.signal = self.body_parent = AbortSignal.any(stopping)
        self.owns_body_parent = True
        inbox = self.inbox

        def wake(_: AbortSignal) -> None:
            inbox.put(Wake())

        self.unsubscribe = self.body_parent.add_callback(wake)
        policy = self.policy = self.native.batch_policy(nested=self.sink is not None)
        agent = batch.agent
        log = batch.log
        if log is not None and agent is not None:
            self.session = agent.session
            if self.session is not None:
                self.log_step = (log.turn, log.step, agent.id)
                if batch.calls and self.starts is None:
                    # (A continued batch continues a step whose tool/batch is logged.)
                    self._log_batch()
        self.hook = policy.hook
        route = policy.route
        calls = self.calls
        unbuilt = self.unbuilt
        starts = self.starts
        for i, tool_call in enumerate(batch.calls):
            if starts is not None and starts[i].result is not None:
                # Settled already (a continued batch): never built, never run.
                calls.append(None)
                unbuilt.append(None)
                self._added()
                continue
            override, hint = route(tool_call.name)
            if type(tool_call.arguments) is str:
                # JSON text cannot change: it is parsed and materialized, and
                # its call built, when the call is about to start, so the
                # first call does not wait for the whole batch.
                calls.append(None)
                unbuilt.append((tool_call, override, hint))
            else:
                # A mapping is materialized now, as the batch arrives.
                unbuilt.append(None)
                calls.append(self._build(i, tool_call, override, hint))
            self._added()

    def _added(self) -> None:
        """One more call (the last), UNSTARTED."""
        self.state.append(_UNSTARTED)
        self.count[_UNSTARTED] += 1

    def _move(self, index: int, to: CallState) -> None:
        """Call ``index`` is now in state ``to``: the one place a call's
        :class:`CallState` changes, along :data:`NEXT` only."""
        state = self.state
        was = state[index]
        assert _NEXT_MASKS[was] >> to & 1, f"call {index} cannot go from {was.name} to {to.name}"
        state[index] = to
        count = self.count
        count[was] -= 1
        count[to] += 1
        if _OUT <= was <= _FLIGHT:
            self.outs -= 1
        if _OUT <= to <= _FLIGHT:
            self.outs += 1

    def _first_redo(self) -> int | None:
        """The first call (model order) to prepare again, if any."""
        if not self.count[_REDO]:
            return None
        state = self.state
        for index in range(self.next_commit, self.next_start):
            if state[index] is _REDO:
                return index
        raise AssertionError("a call to prepare again is out of range")  # pragma: no cover

    def _deferred(self) -> list[int]:
        """The DEFERRED calls, in model order: those the commit passed, and
        those behind a call it has not reached (a call prepared again that
        waits for a deferred call before it)."""
        if not self.count[_DEFERRED]:
            return []
        state = self.state
        return [i for i in range(self.next_start) if state[i] is _DEFERRED]

    def _deferred_before(self, index: int) -> bool:
        """Whether a call before ``index`` is DEFERRED."""
        if not self.count[_DEFERRED]:
            return False
        state = self.state
        return any(state[i] is _DEFERRED for i in range(index))

    def _done(self) -> bool:
        # A started call is never abandoned: nothing may be out. After a bug,
        # what settled has committed (_step commits first) and the batch fails.
        # A sub-batch ends once its feeder has sealed it.
        if self.outs:
            return False
        return (
            self.bug is not None
            or (self.sealed and self.next_commit == len(self.calls))
            or (bool(self.count[_DEFERRED]) and self._suspended())
        )

    def _suspended(self) -> bool:
        """Whether the batch waits for deferred approvals and nothing else:
        nothing is out, the batch has not halted, and (``_step`` having
        started and committed everything it could) what has not committed
        waits behind a deferred call: a deferred exclusive call is a
        barrier, an exclusive call waits for every call before it, a
        deferred one included. That holds for a call to prepare again
        (REDO) too: one that became exclusive while it was queued waits for
        the deferred call before it. Such a call is pending in the
        suspension (its body never started); :meth:`_close` commits the
        calls settled behind it first."""
        return bool(self.count[_DEFERRED]) and not self.outs and self.halted is None

    def _close(self) -> ToolBatchResult | BaseException:
        if self.unsubscribe is not None:
            self.unsubscribe()
        if self.mailbox is not None:
            self.mailbox.close()
        try:
            if self.count[_DEFERRED] and self.bug is None and self.log_error is None and not self.stuck:
                self._commit_behind_waiting()
                self._log_suspend()
        finally:
            if self.owns_body_parent:
                # (After the last commits: their post-execute listeners and
                # tools/result observers still see the signal live.)
                self.body_parent.close()
        if self.late:
            # A deferred call committed after the calls behind it (an abort):
            # results are in model order all the same.
            order = {tool_call.id: i for i, tool_call in enumerate(self.batch.calls)}
            self.results.sort(key=lambda item: order[item.call_id])
        failure = self.bug or self.log_error
        if failure is None and not self.stuck:
            results = tuple(self.results)
            if self.count[_DEFERRED]:
                return self._suspend(results)
            return _batch_result(results)
        if self.stuck:
            names = ", ".join(f'{c.execution.call_id} (tool "{c.execution.name}")' for c in self.stuck)
            detail = f"the runtime stopped while tool bodies were still running: {names}"
        elif failure is self.log_error:
            detail = f"the session log could not be written: {safe_str(failure)}"
        else:
            assert failure is not None  # (neither stuck nor a log error: a bug)
            detail = _internal(failure)
        return self._error(detail, failure)

    # -- the state machine -----------------------------------------------------------

    def _advance(self) -> None:
        try:
            try:
                self._step()
            finally:
                if self.launching:
                    self._launch()  # every flight started is launched (and so ends)
            if BatchRun.check_invariants and self.bug is None:
                self._assert_invariants()  # a broken one fails the batch, naming it
        except BaseException as exc:  # noqa: BLE001 - a bug: drain, then fail the batch
            self._failed(exc)

    def _failed(self, exc: BaseException) -> None:
        """A bug: no call starts any more; what is out drains; the batch
        fails with ``exc`` (it never hangs)."""
        logger.opt(exception=exc).error("the batch scheduler failed")
        if self.bug is None:
            self.bug = exc
        try:
            self._halt("internal error", reclaim=False)
        except BaseException:  # noqa: BLE001
            pass

    def _halt(self, why: str, *, reclaim: bool, ahead_only: bool = False) -> None:
        """No call starts any more. ``reclaim``: an abort, so calls still in
        the mailbox come back unrun; ``ahead_only``: a log failure, so only
        the calls prepared ahead of a slot (EARLY) do, and a call put in its
        slot before the failure still runs (its start was logged, as a
        running call's was). After a bug, what was put still runs (the
        schedule itself may be what broke)."""
        if self.halted is None:
            self.halted = why
        mailbox = self.mailbox
        if mailbox is not None:
            if reclaim:
                state = self.state
                keep = (lambda call: state[call.index] is not _EARLY) if ahead_only else None
                for call in mailbox.reclaim(keep):
                    # Prepared but never dispatched (in its slot or ahead of one).
                    call.abort_unstarted()
                    self._move(call.index, _HELD)
            mailbox.release_idle()

    def _step(self) -> None:
        # Starts first: a slot that freed is refilled before the calls that
        # settled are committed (commit runs post-execute, tools/result and
        # the log; it gates only a barrier, which waits for it below).
        while True:
            self._start_ready()
            if self.launching and self._launch():
                continue  # the flights, before the commits; one went back: start again
            if not self._commit_ready():
                return

    def _start_ready(self) -> None:
        """Start every call that may start now (see the class docstring)."""
        calls = self.calls
        total = len(calls)
        while True:
            if not self.outs:
                # Nothing runs, so no slot waits for this: what settled
                # commits first (the next call may run here, inline, and
                # their tools/result must not wait for its body).
                self._commit_ready()
            if self.next_commit == total and not self.count[_DEFERRED]:
                return  # (with deferred calls held, an abort must still end them)
            if self._halts():
                if self.bug is not None:
                    return  # started calls drain; nothing more is committed
                # No barrier and no call starts after an abort: every unstarted
                # call gets its tool/call and ABORTED_BEFORE_DISPATCH.
                redo = self._first_redo()
                while redo is not None:  # (logged already)
                    self._call_at(redo).abort_unstarted()
                    self._move(redo, _HELD)
                    redo = self._first_redo()
                if self.count[_DEFERRED]:
                    self._abort_deferred()
                while self.next_start < total:
                    index = self.next_start
                    self.next_start += 1
                    if not self._given(index):  # (else settled already: it commits its given result)
                        call = self._call_at(index)
                        self._log_call(call, started=False)
                        call.abort_unstarted()
                    self._move(index, _HELD)
                if self._commit_ready():
                    continue
                return
            redo = self._first_redo() if self.count[_REDO] else None
            if redo is None and self.next_start == total:
                self._release_idle()  # nothing left to start: idle servers go
                return
            starts = self.starts
            if starts is not None and redo is None and starts[self.next_start].result is not None:
                # Settled already (a continued batch): it starts as it is, even
                # behind a barrier (nothing of it runs), and commits in its turn.
                self.next_start += 1
                self._move(self.next_start - 1, _HELD)
                continue
            if self.barrier is not None:
                return  # (servers stay: calls after the barrier start soon)
            again = redo is not None
            index = redo if redo is not None else self.next_start
            call = self._call_at(index)
            if again and call.unprepared >= MAX_UNPREPARED:
                # What it runs changed every time it was prepared: it fails
                # instead of being prepared forever (a hook that changes the
                # registry whenever a call is prepared).
                call.give_up_preparing()
                self._move(index, _HELD)
                continue
            looked_up: Any = LOOK_UP
            if call.mode is None or stale(self.rt, call):
                # Lazily, as it is about to start (again, if the registry or the
                # listeners changed since it was classified while it waited).
                # The stamp is read first: a change from now until its body
                # starts sends it back here (stale()). The lookup behind the
                # answer is handed to prepare(), which runs right now.
                stamp(self.rt, call)
                call.mode, looked_up = self._classify(call)
            exclusive = call.mode == "exclusive"
            early = False
            out = self.outs
            if exclusive:
                if self.next_commit < index or out or self._deferred_before(index):
                    # An exclusive call waits for everything before it (and,
                    # started again, for the calls after it that run), a
                    # deferred call included: until the batch is resumed.
                    # (A deferred call after it, which it may pass when it
                    # starts again, does not run: it does not hold it.)
                    return
            elif out >= self.limit:
                # The pool is full. A call may still be prepared ahead (at most
                # `limit` of them): the call actor that frees a slot then takes
                # it without a hop here.
                if out >= 2 * self.limit or not self._may_prepare_ahead(call, looked_up):
                    return
                early = True
            if not again:
                self.next_start = index + 1
                if not self._log_call(call):
                    # Its tool/call could not be written: it does not run.
                    call.abort_unstarted()
                    self._move(index, _HELD)
                    continue
            # The flights this step started are launched before this call's
            # pre-execute listeners or approval run (they may block, or change
            # what holds): a body that started is not held behind them.
            if prepare(self.rt, call, looked_up, self._launch if self.launching else None, self._meanwhile):
                # A flight before it was found stale as it was launched: it
                # is prepared again first, and this call after it.
                self._put_back(call)
                continue
            # Prepared: settled without dispatch (an outcome), deferred (an
            # ask), or allowed (neither), to dispatch.
            settled = call.outcome is not None
            deferred = not settled and call.ask is not None
            if self.state[index] is _PREPARING:
                # Its approval was awaited while the calls that settled
                # committed: what is out may have dropped, a call before it
                # may have come back to be prepared again, calls may have
                # been fed (a sub-batch), the batch may have halted (a bug,
                # the stop's deadline, a log write).
                total = len(calls)
                out = self.outs
                early = early and out >= self.limit
                if not settled and not deferred:
                    if self._halts():
                        call.abort_unstarted()
                        self._move(index, _HELD)
                        continue
                    redo = self._first_redo()
                    if redo is not None and redo < index:
                        self._put_back(call)  # (its approval stands: not asked again)
                        continue
            if not settled and not deferred and stale(self.rt, call):
                # Changed while it was prepared: once more, under what holds now.
                call.unprepare()
                self._move(index, _REDO)
                continue
            if exclusive:
                self.barrier = index
            if deferred:
                if self.sink is not None:
                    refuse_deferral(call)  # a program cannot wait for a decision
                elif self._halts():
                    # The batch halted while its approval was asked (on a
                    # worker or here: the service itself may have aborted
                    # it): the call will not wait for a decision, so its
                    # deferral is never announced (no tools/deferred, no
                    # tool/approval-request); it ends as _abort_deferred
                    # would end it, and commits in its turn.
                    call.abort_unstarted()
                else:
                    self._defer(call)
                    self._move(index, _DEFERRED)  # the commit passes it in its turn
                    continue
                settled = True
            if settled:
                self._move(index, _HELD)
                continue  # settled without dispatch: it commits in its turn
            if (
                not early
                and wants_loop(self.rt, call, call.registration)
                and (self.mailbox is None or self.mailbox.all_taken())
            ):
                # An async body: a flight on its loop, which reports its end
                # in a message; no thread waits for it. Started and launched
                # at the end of this step, or sooner: before a later call is
                # put in the mailbox or its pre-execute hooks run (launches
                # join into one wake of the loop: LoopWatch). With calls
                # still queued before it, it is queued too (below): calls
                # start in model order, each under what holds when a call
                # actor takes it, and that call actor waits for its body on
                # the loop.
                self._move(index, _FLIGHT)
                self.launching.append(call)
            elif (
                not out
                and (exclusive or self.limit == 1 or (self.next_start == total and self.sealed))
                and not waits_on_loop(self.rt, call, call.registration)
            ):
                # The only call that can start: run it here, no hop. (The last
                # call of a sub-batch is not: its feeder may make more.)
                # (A body run here may block: this actor's step slot serves
                # other batches meanwhile. An async body under a wrapper goes
                # to a call actor instead, which holds its slot while the
                # body only awaits: see waits_on_loop.)
                with self.rt.waiting():
                    self.inline = call
                    dispatch(self.rt, call)
                    self.inline = None
                self._move(index, _HELD)
            else:
                if self.launching and self._launch():
                    # The flights before it go first: calls start in model
                    # order (a call actor may take it at once). One was
                    # stale: it is prepared again first, and this call after it.
                    self._put_back(call)
                    continue
                if not self._put(call, early):
                    self._put_back(call)
                    return

    def _halts(self) -> bool:
        """Whether no call starts any more: the batch halted, or halts now
        (``halted`` set: its signal or the runtime's stop aborted, a log
        write failed, a bug). Read anew, as the step goes on and as a step
        may have taken that in while this one waited (see
        :meth:`_meanwhile`): the one test of a halt before a call starts
        or is announced as deferred."""
        if self.halted is None:
            if self.signal.aborted or self.rt.stop_signal.aborted:
                self._halt("aborted", reclaim=True)
            elif self.log_error is not None or self.bug is not None:
                self._halt("failed", reclaim=self.bug is None, ahead_only=True)
        return self.halted is not None

    def _put_back(self, call: Call) -> None:
        """``call`` was prepared to start, but a stale call before it is on
        its way back (a ``Returned``), or went back as its flight was to be
        launched: it is prepared again after that one, in model order."""
        index = call.index
        if self.barrier == index:
            self.barrier = None
        call.unprepare()
        self._move(index, _REDO)

    def _may_prepare_ahead(self, call: Call, looked_up: Any) -> bool:
        """Whether ``call`` may be prepared before a slot frees: the batch is
        not serial, nothing of it is in flight on a loop, and a call actor
        would run it (an async body waits for a slot unprepared: it runs as
        a flight, started by this executor when a slot frees). Its hooks
        and its ``tool/call`` then run earlier, still in model order, and a
        change before its body starts still applies to it (``stale``: it
        comes back and is prepared again)."""
        if self.limit < 2 or self.count[_FLIGHT]:
            # (With bodies in flight on a loop, which take no call actor, the
            # `limit` servers could run more than `limit` calls at once.)
            return False
        registration = lookup(self.rt, call) if looked_up is LOOK_UP else looked_up
        return not wants_loop(self.rt, call, registration)

    def _body_ended_on_loop(self, call: Call, value: Any, error: BaseException | None) -> None:
        # On the loop's thread (or the watch's): into the loop side's outbox,
        # nothing else (the outbox is not this run's state: see Outbox).
        outbox = self.outbox
        assert outbox is not None  # made before the first launch
        outbox.add((call, value, error))

    def _launch(self) -> bool:
        """Start the calls waiting to launch (FLIGHT, in model order) and
        launch their flights together. This is where their bodies start: a
        call found stale now (a change since its last check) does not start
        and goes back to REDO, as a stale call a call actor takes does, and
        so does every call after it (calls start in model order). True if
        one did. A call it did not get to (a
        bug raised) is settled as failed; the flights made are launched."""
        calls, self.launching = self.launching, []
        rt = self.rt
        flights = []
        back = False
        done = 0
        try:
            for call in calls:
                index = call.index
                if back or (self.halted is None and stale(rt, call)):
                    if self.barrier == index:
                        self.barrier = None
                    call.unprepare()
                    self._move(index, _REDO)
                    back = True
                else:
                    flight = start_on_loop(rt, call, self._body_ended_on_loop)
                    if flight is None:
                        self._move(index, _HELD)  # (it settled at once)
                    else:
                        flights.append(flight)
                done += 1
        except BaseException as exc:
            for call in calls[done:]:  # (never left FLIGHT with no flight: the batch would wait for it)
                if self.state[call.index] is _FLIGHT:
                    if call.outcome is None:
                        call.settle(failure_from_exception(exc), run_post=False, dispatched=False)
                    self._move(call.index, _HELD)
            raise
        finally:
            if flights:
                outbox = self.outbox
                if outbox is None:
                    outbox = self.outbox = Outbox(flights[0].loop, self._put_ends)
                outbox.launched += len(flights)  # (before any of them can end)
                rt.loop_watch.launch_all(flights[0].loop, flights)
        return back

    def _put_ends(self, ends: tuple[Any, ...]) -> None:
        self.inbox.put(BodyEnded(ends))

    def _put(self, call: Call, early: bool) -> bool:
        """Into the work mailbox (OUT, or EARLY: prepared ahead); False while
        it is held (see ``WorkMailbox``)."""
        mailbox = self.mailbox
        if mailbox is None:
            rt = self.rt
            mailbox = self.mailbox = WorkMailbox(self.limit, self.policy.dispatcher, self.inbox, partial(stale, rt))
        index = call.index
        if not mailbox.put(call):
            return False
        self._move(index, _EARLY if early else _OUT)  # (the call is the mailbox's now)
        return True

    def _release_idle(self) -> None:
        if self.mailbox is not None:
            self.mailbox.release_idle()

    def _commit_ready(self) -> bool:
        """Commit (finalize, record, log), in model order, every started call
        that has its outcome; whether any was. (A sub-batch's: as they settle.)"""
        if self.sink is not None:
            return self._commit_settled()
        state = self.state
        progressed = False
        while self.next_commit < self.next_start:
            index = self.next_commit
            where = state[index]
            if where is _DEFERRED:
                # Waits for a decision: the commit passes it (it stays held,
                # and a barrier it is stays up); the calls behind it commit.
                self.next_commit = index + 1
                progressed = True
                continue
            if where is _COMMITTED:
                # Committed ahead of its turn (late): an abort's deferred call.
                self.next_commit = index + 1
                progressed = True
                continue
            if where is not _HELD and where is not _STUCK:
                break  # out, or to prepare again
            self._commit_one(index, where)
            self.next_commit = index + 1
            progressed = True
        return progressed

    def _commit_one(self, index: int, where: CallState) -> None:
        """Commit call ``index`` (``where``: HELD, STUCK, or DEFERRED that an
        abort settled): finalize, record and log it (a continued batch's
        given result as it is), and drop it."""
        calls = self.calls
        call = calls[index]
        if call is None:
            # Settled already (a continued batch): its given result, as it is.
            self._record_given(index)
        elif where is _STUCK:
            self._commit_stuck(call)
        else:
            self._commit(call)
        self._move(index, _COMMITTED)
        if self.barrier == index:
            self.barrier = None
        calls[index] = None

    def _commit_settled(self) -> bool:
        """A sub-batch's :meth:`_commit_ready`: every started call that has
        its outcome commits now, whatever the calls before it do (its feeder
        may wait for this result before it makes the call that lets an
        earlier one finish)."""
        calls = self.calls
        state = self.state
        progressed = False
        for index in range(self.next_commit, self.next_start):
            where = state[index]
            if where is not _HELD and where is not _STUCK:
                continue  # committed already, out, or to prepare again
            self._commit_one(index, where)
            progressed = True
        while self.next_commit < self.next_start and calls[self.next_commit] is None:
            self.next_commit += 1
        return progressed

    def _deadline(self) -> None:
        """``rt.stop()`` gave up waiting: the calls still out commit as
        ABORTED now, in their turn (the batch names them in its error). Their
        ``Call`` stays with the call actor still running the body: the
        executor commits a result of its own for each, never touching it."""
        self._halt("the runtime stopped", reclaim=True)
        state = self.state
        for index in range(self.next_commit, self.next_start):
            if _out_state(state[index]):
                call = self.calls[index]
                assert call is not None
                self.stuck.append(call)
                self._move(index, _STUCK)

    # -- one call --------------------------------------------------------------------

    def _build(self, index: int, tool_call: ToolCall, override: Any, hint: str | None) -> Call:
        batch = self.batch
        call = begin_call(
            index,
            tool_call.id,
            tool_call.name,
            parse_arguments(tool_call.arguments),  # may be BadArguments
            self.body_parent,
            batch.agent,
            batch.tool_set,
            override=override,
            unknown_hint=hint,
            route_to_executor=hint is not None,
            context=batch.context,
            deps=batch.deps,
            found=self.found,
        )
        call.body_parent = self.body_parent
        call.body_hook = self.hook
        call.loop = self.loop
        call.start_log = self.session
        call.start_step = self.log_step  # (None: not logged)
        starts = self.starts
        if starts is not None:
            start = starts[index]
            if start.answer is not None:
                call.answer = (start.answer, start.ask)
        return call

    def _given(self, index: int) -> bool:
        """Whether call ``index`` was given its final result (a continued batch)."""
        starts = self.starts
        return starts is not None and starts[index].result is not None

    def _call_at(self, index: int) -> Call:
        """Call ``index``, built now if it was not yet."""
        call = self.calls[index]
        if call is None:
            pending = self.unbuilt[index]
            assert pending is not None
            self.unbuilt[index] = None
            call = self.calls[index] = self._build(index, *pending)
        return call

    def _classify(self, call: Call) -> tuple[str, Any]:
        """The call's mode, and the registration the answer came from (or
        ``LOOK_UP`` when none was looked up)."""
        if call.outcome is not None:
            return "parallel", LOOK_UP  # it will not dispatch: no reason to hold others back
        execution = call.execution
        try:
            # What registry.execution_mode does, keeping the lookup (the
            # pipeline's, which settles the arguments first).
            registration = lookup(self.rt, call)
            # The classifier is the tool's code: in the call's context, as
            # every hook of the call.
            run = call.context.run
            if call.override is not None:
                return run(definition_mode, call.override.definition, execution.arguments), LOOK_UP
            if registration is None:
                return "exclusive", registration
            return run(definition_mode, registration.definition, execution.arguments), registration
        except BaseException:  # noqa: BLE001 - anything odd means exclusive
            return "exclusive", LOOK_UP

    def _log_batch(self) -> None:
        """Write the batch's ``tool/batch`` (every call, as the model sent
        it, and which of them name a tool the agent cannot call now: the
        executor's own tools count) before any call starts; a failure halts
        the batch."""
        session = self.session
        batch = self.batch
        at = self.log_step
        assert session is not None and at is not None
        turn, step, agent = at
        calls = [(c.id, c.name, batch_arguments(c.arguments)) for c in batch.calls]
        try:
            # (The registry read once for the batch: recovery tells these
            # calls, which fail UNKNOWN_TOOL, from calls of a tool its
            # runtime lacks.)
            unknown = self.unknown = unknown_calls(self.rt.state, batch.calls, batch.agent, batch.tool_set, self.policy)
            session.append_lossless(
                batch_event(
                    turn,
                    step,
                    calls,
                    batch.max_parallel_tool_calls,
                    agent,
                    self._enclosing_call(),
                    unknown,
                )
            )
        except BaseException as exc:  # noqa: BLE001 - a write failure fails the batch after draining
            self.log_error = exc

    def _enclosing_call(self) -> tuple[int, int, str | None, str] | None:
        """The logged call whose body runs this batch, if any, and logged in
        this batch's session (its context says so: see
        ``session.ENCLOSING_CALL``)."""
        context = self.batch.context
        enclosing = None if context is None else context.get(ENCLOSING_CALL)
        if enclosing is None or enclosing[0] is not self.session:
            return None
        return enclosing[1]

    def _log_call(self, call: Call, *, started: bool = True) -> bool:
        """Write the call's ``tool/call``; False if the session failed.
        (A sub-batch's call goes to its sink, only if it ``started``: one
        settled unstarted after an abort is not logged.)"""
        sink = self.sink
        if sink is not None:
            if not started:
                return True
            if self.log_error is not None:
                return False
            try:
                sink.started(call.execution)
            except BaseException as exc:  # noqa: BLE001 - as a session write failure
                self.log_error = exc
                return False
            return True
        session = self.session
        if session is None:
            return True
        if self.log_error is not None:
            return False
        starts = self.starts
        if starts is not None and starts[call.index].logged:
            return True  # (a continued batch: logged when the call first started)
        at = self.log_step
        assert at is not None
        turn, step, agent = at
        execution = call.execution
        arguments = execution.arguments
        # Materialized arguments are lossless JSON as they are (orjson writes
        # the frozen mapping and tuples); others get a readable stand-in.
        logged = arguments if arguments is not None else loggable(call.raw_arguments)
        try:
            session.append_lossless(call_event(turn, step, execution.call_id, execution.name, logged, agent))
        except BaseException as exc:  # noqa: BLE001 - a write failure fails the batch after draining
            self.log_error = exc
            return False
        return True

    def _commit(self, call: Call) -> None:
        result = finalize(self.rt, call)
        assert call.final is result, call  # COMMITTED: its final result frozen and published
        self._record(call, result)
        signal = call.body_parent
        if signal is not self.body_parent and signal is not None:
            signal.close()  # a fed call's own (see _fed): its work has settled

    def _record_given(self, index: int) -> None:
        """A call given its final result (a continued batch): recorded as it
        is. A result settled in an earlier run is neither emitted nor logged
        again; one decided now (``log_result``: recovery's ``INTERRUPTED``)
        is logged and gets its ``tools/result``, as every call does once."""
        assert self._given(index), f"call {index} committed unbuilt"
        starts = self.starts
        assert starts is not None
        start = starts[index]
        result = start.result
        assert result is not None
        call_id = self.batch.calls[index].id
        self.results.append(_call_result(call_id, result))
        if self.log_error is not None:
            return
        session = self.session
        if start.log_result and session is not None:
            at = self.log_step
            assert at is not None  # (set with the session)
            try:
                turn, step, agent = at
                session.append(result_event(call_id, result, turn=turn, step=step, agent=agent))
            except BaseException as exc:  # noqa: BLE001
                self.log_error = exc
                return
        self.committed = len(self.results)
        if start.log_result and self.rt.events.has_listeners("tools/result"):
            # Its observers see it end, with the execution it would have had
            # (built for them; nothing of the pipeline runs).
            call = self._build(index, self.batch.calls[index], None, None)
            execution = call.execution
            freeze(execution)
            call.context.run(self.rt.events.emit, "tools/result", execution, result, agent=execution.agent)

    def _defer(self, call: Call) -> None:
        """``call`` is DEFERRED (the approval service answered
        ``"deferred"`` and the batch has not halted: see ``_start_ready``):
        a logged batch logs the request (with the id of the suspension the
        batch will return), and ``tools/deferred`` observers hear of it (in
        the call's context, as its other hooks). The one place a deferral
        is announced."""
        if self.suspension_id is None:
            self.suspension_id = new_suspension_id()
        execution = call.execution
        session = self.session
        if session is not None and self.log_error is None:
            ask = call.ask
            at = self.log_step
            assert at is not None  # (set with the session)
            turn, step, agent = at
            try:
                session.append(
                    approval_request_event(
                        execution.call_id,
                        self.suspension_id,
                        execution.name,
                        None if ask is None else ask.reason,
                        None if ask is None else ask.display_reason,
                        turn=turn,
                        step=step,
                        agent=agent,
                    )
                )
            except BaseException as exc:  # noqa: BLE001 - a write failure fails the batch after draining
                self.log_error = exc
        events = self.rt.events
        if events.has_listeners("tools/deferred"):
            call.context.run(events.emit, "tools/deferred", execution, call.ask, agent=execution.agent)

    def _commit_behind_waiting(self) -> None:
        """The batch suspends while a call to prepare again (REDO) waits for
        a deferred call before it: the calls behind it that settled commit
        now, ahead of their turn (late), so the suspension holds their
        results and they never run again; the REDO call is pending."""
        state = self.state
        for index in range(self.next_commit, self.next_start):
            if state[index] is _HELD:
                self._commit_one(index, _HELD)
                self.late = True

    def _log_suspend(self) -> None:
        """The batch suspends: a logged batch logs it (``tool/suspend``,
        after every result it committed), so that its log tells a step that
        suspended from one a crash cut after its approval requests. A write
        that fails fails the batch, as every log write does."""
        session = self.session
        if session is None or self.log_error is not None:
            return
        at = self.log_step
        assert at is not None and self.suspension_id is not None  # (set with the session; minted by _defer)
        turn, step, agent = at
        try:
            session.append(suspend_event(self.suspension_id, turn=turn, step=step, agent=agent))
        except BaseException as exc:  # noqa: BLE001 - a write failure fails the batch
            self.log_error = exc

    def _abort_deferred(self) -> None:
        """The batch halted: its deferred calls will not wait for a decision.
        Each ends ``ABORTED_BEFORE_DISPATCH`` (post-execute sees it: its
        pre-execute phases ran) and commits now, after the calls behind it
        that committed already (the batch's result is in model order all
        the same)."""
        calls = self.calls
        for index in self._deferred():
            call = calls[index]
            assert call is not None
            call.abort_unstarted()
            self._commit_one(index, _DEFERRED)
        self.late = True

    def _suspend(self, results: tuple[ToolCallResult, ...]) -> ToolBatchResult:
        """The batch's result while it waits for deferred approvals: the
        settled calls' results, the open ones' ids and the suspension."""
        assert self.suspension_id is not None
        batch = self.batch
        calls = self.calls
        deferred: dict[str, tuple[Any, Any]] = {}
        for index in self._deferred():
            call = calls[index]
            assert call is not None
            arguments = call.execution.arguments
            deferred[call.execution.call_id] = (
                arguments if arguments is not None else loggable(call.raw_arguments),
                call.ask,
            )
        settled = {item.call_id: item.result for item in results}
        pending = tuple(c.id for c in batch.calls if c.id not in settled)
        unknown = self.unknown  # (a logged batch's, as its tool/batch has them)
        starts = self.starts
        if unknown is None and starts is not None and all(s.known is not None for s in starts):
            # A continued batch: what its log or suspension recorded.
            unknown = [c.id for c, s in zip(batch.calls, starts, strict=True) if s.known is False]
        if unknown is None:
            unknown = unknown_calls(self.rt.state, batch.calls, batch.agent, batch.tool_set, self.policy)
        value = suspension_value(self.suspension_id, batch, settled, deferred, unknown)
        return _batch_result(results, pending=pending, suspension=value)

    def _commit_stuck(self, call: Call) -> None:
        """A call whose body outlived ``rt.stop()``'s timeout: ABORTED, with
        its ``tools/result`` and ``tool/result``; no other phase runs."""
        result = aborted(before_dispatch=False)
        # (A copy: the call actor that still runs the body is in call.context.)
        call.context.copy().run(self.rt.events.emit, "tools/result", call.execution, result, agent=call.execution.agent)
        self._record(call, result)

    def _record(self, call: Call, result: ToolExecutionResult) -> None:
        sink = self.sink
        if sink is not None:
            try:
                sink.committed(call.execution, result)
            except BaseException as exc:  # noqa: BLE001 - the sink must not raise; a bug: fail the batch
                self._failed(exc)
            self.committed += 1  # (the result is the sink's: not kept, see results)
            return
        self.results.append(_call_result(call.execution.call_id, result))
        session = self.session
        if session is None:
            self.committed = len(self.results)
            return
        if call.start_error is not None and self.log_error is None:
            self.log_error = call.start_error  # its tool/start could not be written: it did not run
        if self.log_error is not None:
            return
        at = self.log_step
        assert at is not None  # (set with the session)
        try:
            # The final result is frozen: every value in it is lossless JSON.
            turn, step, agent = at
            session.append_lossless(result_event(call.execution.call_id, result, turn=turn, step=step, agent=agent))
        except BaseException as exc:  # noqa: BLE001
            self.log_error = exc
            return
        self.committed = len(self.results)

    # -- invariants ------------------------------------------------------------------

    def _assert_invariants(self) -> None:
        """What holds between two steps (see the class docstring)."""
        calls = self.calls
        state = self.state
        total = len(calls)
        assert len(state) == total == len(self.unbuilt), "a call has no state"
        assert self.count == [sum(1 for x in state if x is s) for s in CallState], "the state counts drifted"
        assert 0 <= self.next_commit <= self.next_start <= total
        fed = self.sink is not None
        count = self.count
        deferred = self._deferred()
        committed = count[_COMMITTED]
        assert (self.committed if fed else len(self.results)) == committed, (len(self.results), committed)
        assert not (fed and self.results), "a sub-batch keeps no results"
        assert not (fed and count[_DEFERRED]), "a sub-batch never suspends"
        # Each state against the facts of its Call (pipeline/call.py), read
        # only where the batch holds the call: an OUT, EARLY or FLIGHT call
        # is owned by whoever runs it, a STUCK one by the body that outlived
        # the stop; a COMMITTED one was dropped (its `final` is asserted as
        # it commits, see _commit).
        for index in range(total):
            where = state[index]
            call = calls[index]
            if index >= self.next_start:
                assert where is _UNSTARTED, f"call {index} is {where.name} before it started"
                # Not prepared: no outcome, or one settled as it began (bad arguments).
                assert call is None or (
                    not call.dispatched and not call.phases_ran and call.ask is None and call.final is None
                ), f"call {index} was prepared before it started: {call}"
                continue
            assert where is not _UNSTARTED, f"started call {index} is UNSTARTED"
            if index < self.next_commit:
                # The commit passed the deferred calls: held, waiting for a decision.
                assert where in (_COMMITTED, _DEFERRED), f"call {index} behind the commit is {where.name}"
            elif not fed and not self.late:
                assert where is not _COMMITTED, f"call {index} ahead of the commit is COMMITTED"
            if where is _COMMITTED:
                assert call is None, f"committed call {index} is held"
            elif where is _DEFERRED:
                assert (
                    call is not None
                    and call.phases_ran
                    and call.ask is not None
                    and call.outcome is None
                    and call.final is None
                ), f"deferred call {index} is {call}"
            elif where is _REDO:
                # (Prepared once, or put back before its hooks first ran, when
                # phases_ran says so: an abort then passes it through
                # post-execute only if they ever ran.)
                assert call is not None and call.outcome is None and call.ask is None, (
                    f"call {index} to prepare again is {call}"
                )
            elif where is _HELD:
                assert (call is None and self._given(index)) or (
                    call is not None and call.outcome is not None and call.final is None
                ), f"held call {index} is {call}"
            elif where is _STUCK:
                assert any(c is call for c in self.stuck), f"stuck call {index} is not named"
            elif where is _PREPARING:
                # Its approval is awaited (between two steps only while the
                # thread that steps the batch commits what settles meanwhile).
                assert call is not None and call.phases_ran and call.outcome is None and call.ask is None, (
                    f"call {index} being prepared is {call}"
                )
        assert count[_PREPARING] <= 1, "two calls are being prepared at once"
        assert self.sealed or fed, "a batch is not sealed"
        if fed:
            assert self.next_commit == self.next_start or calls[self.next_commit] is not None
        out = self.outs
        assert out == count[_OUT] + count[_EARLY] + count[_FLIGHT], "the calls out drifted"
        # Calls on a loop take no call actor: with any of them out, nothing
        # more is prepared ahead, so at most `limit` calls run. (A call
        # prepared ahead may still wait in the mailbox when a slot frees and
        # an async call starts as a flight in that slot: it is within the
        # limit then.)
        assert not count[_FLIGHT] or out <= self.limit, "more than `limit` calls run beside async ones"
        # Between steps every flight a step decided is launched (or went back).
        assert not self.launching, "a flight decided in a step was not launched"
        # At most `limit` run (no more call actors serve the batch), and at
        # most `limit` more wait, prepared ahead, in the mailbox.
        assert out <= 2 * self.limit, f"{out} calls out at cap {self.limit}"
        if self.barrier is not None:
            barrier = self.barrier
            assert self.next_commit <= barrier < self.next_start or barrier in deferred
            assert not any(_out_state(state[i]) for i in range(total) if i != barrier), (
                "a call runs beside an exclusive one"
            )
            # Nothing started after it: the calls behind it are unstarted,
            # or (it was prepared again) settled before it started or waiting
            # to be prepared again. (After an abort they are settled unstarted.)
            for index in range(barrier + 1, self.next_start):
                behind = calls[index]
                assert (
                    self.halted is not None
                    or state[index] is _REDO
                    or self._given(index)
                    or (behind is None and fed)  # (a sub-batch's: committed as it settled)
                    or state[index] is _HELD  # (its outcome: see above)
                ), "a call started after an exclusive one before it committed"
        if self.halted is not None and self.bug is None and not count[_PREPARING]:
            # (A call being prepared is ended, and the calls after it, once
            # its approval has answered.)
            assert self.next_start == total, "a call stayed unstarted after the batch halted"
        if not out and self.bug is None and self.next_commit < self.next_start:
            # Nothing is out, so the next call in order has its outcome (or waits
            # for a decision, or is stuck, or for its approval), or it is to
            # prepare again and waits for a deferred call before it, or for
            # the call being prepared (it came back meanwhile).
            where = state[self.next_commit]
            assert calls[self.next_commit] is not None and (
                where in (_HELD, _DEFERRED, _STUCK, _PREPARING)
                or (where is _REDO and (self._deferred_before(self.next_commit) or bool(count[_PREPARING])))
            ), where.name
        if self.mailbox is not None:
            self.mailbox.assert_invariants()
        if count[_FLIGHT]:
            self.rt.loop_watch.assert_invariants()
        if self.policy is not None:
            self.policy.dispatcher.assert_invariants()


_new_call_result = ToolCallResult.__new__
_set_result_id, _set_result = slot_setters(ToolCallResult, ("call_id", "result"))


def _call_result(call_id: str, result: ToolExecutionResult) -> ToolCallResult:
    """``ToolCallResult(call_id, result)`` through its slot descriptors (a
    frozen dataclass's ``__init__`` goes through ``object.__setattr__`` per
    field); a test compares the two."""
    item = _new_call_result(ToolCallResult)
    _set_result_id(item, call_id)
    _set_result(item, result)
    return item


def _internal(failure: BaseException) -> str:
    """What a batch that a bug broke says of it."""
    return f"internal error: {type(failure).__name__}: {safe_str(failure)}"


def _batch_result(
    results: tuple[ToolCallResult, ...], *, pending: tuple[str, ...] = (), suspension: Any = None
) -> ToolBatchResult:
    contexts: list[UserMessage] = []
    concluded = False
    for item in results:
        result: ToolExecutionResult = item.result
        contexts.extend(result.additional_contexts)
        if type(result) is ToolExecutionSuccess and result.concludes_turn:
            concluded = True
    if suspension is not None:
        return ToolBatchResult(
            results=results,
            additional_contexts=tuple(contexts),
            concluded=concluded,
            pending=pending,
            suspension=suspension,
        )
    return ToolBatchResult(results=results, additional_contexts=tuple(contexts), concluded=concluded)
