"""The scheduler's vocabulary (internal).

Every message carries values, or exactly one owned object: a :class:`Call`
(whoever holds the message owns the call), or a batch's ``BatchRun`` handed
to the one executor actor that runs it next (:class:`Resume`,
:class:`Begin`). A :class:`Serve` carries a reference to the batch's work
mailbox, as a message carries an actor's address: the mailbox is the
dispatcher's queue for that batch, its state under the dispatcher's lock.

* caller → executor actor (its mailbox): :class:`RunBatch`, or
  :class:`Begin` for a sub-batch the caller feeds (``open_sub_batch``).
* a batch's inbox → an idle executor actor: :class:`Resume` (run the batch
  again: a message arrived while no executor actor was running it).
* the dispatcher → call actor (its mailbox): :class:`Serve`.
* call actor → the batch's inbox: :class:`Settled`, or :class:`Returned`
  (calls whose prepare went stale before their body started); a flight's loop → the
  batch's inbox: :class:`BodyEnded`; the batch's signal, the runtime's stop
  signal → the batch's inbox: :class:`Wake`; ``rt.stop()`` past its
  timeout → the batch's inbox: :class:`Deadline`; the feeder of a
  sub-batch → its inbox: :class:`Fed`, :class:`Sealed`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Generic, Protocol, TypeVar

if TYPE_CHECKING:  # pragma: no cover
    import threading

    from ..actors import Address
    from ..model import Ask, ToolBatchInput, ToolExecutionResult
    from ..pipeline.stages import Call


class Reply(Protocol):
    """What a batch's result is settled into: a
    ``concurrent.futures.Future``, or anything with the same four methods
    (``ToolsService.execute`` uses a lighter one-shot reply)."""

    def set_running_or_notify_cancel(self) -> bool: ...

    def set_result(self, result: Any) -> None: ...

    def set_exception(self, exception: BaseException | None) -> None: ...

    def done(self) -> bool: ...


class ServedMailbox(Protocol):
    """A batch's :class:`~.pool.WorkMailbox` as the dispatcher and these
    messages know it (the bound of ``MailboxT``: ``Capacity``'s mailboxes,
    ``Serve.mailbox``): the servers it holds, and what it is told when a
    granted one will never come. The pool module imports this one, which
    does not name it."""

    def granted(self) -> int: ...

    def refused_locked(self, *, reclaim: bool) -> list[Call]: ...

    def fail_unserved(self, calls: list[Call], cause: BaseException) -> None: ...


#: The mailbox type a ``Capacity`` is given, a ``Serve`` carries: a
#: ``WorkMailbox`` (``Capacity[WorkMailbox]``, ``Serve[WorkMailbox]``).
MailboxT = TypeVar("MailboxT", bound=ServedMailbox)


class Capacity(Protocol[MailboxT]):
    """The runtime's :class:`~.dispatcher.Dispatcher` as a batch and its
    :class:`~.pool.WorkMailbox` (each ``mailbox`` here, ``MailboxT``) use
    it: both modules import this one, which names neither."""

    @property
    def lock(self) -> threading.Lock: ...

    @property
    def wanting(self) -> Collection[MailboxT]: ...

    def opened(self, mailbox: MailboxT) -> None: ...

    def closed_mailbox_locked(self, mailbox: MailboxT) -> None: ...

    def want_locked(self, mailbox: MailboxT) -> list[tuple[Address | None, Any]]: ...

    def send(self, sends: list[tuple[Address | None, Any]]) -> None: ...

    def waits_for(self, mailbox: MailboxT) -> bool: ...

    def yields(self, mailbox: MailboxT) -> bool: ...

    def repays_locked(self, worker: Address) -> bool: ...

    def assert_invariants(self) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchPolicy:
    """What a batch takes from its executor, as values (the executor's
    hooks asked once, as the batch opens): the batch never calls into its
    executor's state."""

    own: Mapping[str, Any]
    """Checked definitions of the tools the executor provides itself, by name."""
    hook: Any
    """``tool_body(definition)``, or None (the definitions' own bodies run)."""
    hint: Callable[[str], str | None] | None
    """``direct_call_hint(name)``, or None (it always answers None)."""
    dispatcher: Capacity[Any]
    """The runtime's capacity (the work mailbox asks it for servers): a
    ``Capacity[WorkMailbox]``, which this module does not name."""

    def route(self, name: str) -> tuple[Any, str | None]:
        """Where a model's call of ``name`` goes, before the registry: the
        executor's own tool (its checked definition) if it provides one, else
        the executor's direct-call hint (a str: the call fails
        ``UNKNOWN_TOOL`` with it), else ``(None, None)``: the registry
        decides. The one rule for a batch's calls and for what recovery
        reads of them (``recovery.unknown_calls``)."""
        own = self.own
        hint_of = self.hint
        if not own and hint_of is None:
            return _REGISTRY_DECIDES  # (the common case: nothing made per call)
        override = own.get(name) if own else None
        return override, (hint_of(name) if hint_of is not None and override is None else None)


_REGISTRY_DECIDES: Final[tuple[Any, str | None]] = (None, None)


@dataclass(frozen=True, slots=True, kw_only=True)
class CallStart:
    """Where one call of a *continued* batch starts (see
    ``scheduling.start.continue_batch``): a value, one per call of the batch.

    The default, ``CallStart()``, is a call that never started: the whole
    pipeline runs, as in a fresh batch, and its ``tool/call`` is logged.
    """

    result: ToolExecutionResult | None = None
    """The call settled already: this is its final result. Nothing of the
    pipeline runs for it and nothing is emitted or logged again (no
    ``tools/result``, no ``tool/call``, no ``tool/result``); the batch's
    result carries it in its place."""
    log_result: bool = False
    """With ``result``: a result decided now, not in an earlier run (crash
    recovery's ``INTERRUPTED`` failure of a call that started): its
    ``tool/result`` is written when it commits, in model order, and its
    ``tools/result`` is emitted (the call ends now). Still no phase runs."""
    logged: bool = False
    """Its ``tool/call`` is in the session log already: not written again
    (its ``tool/result`` is written when it commits, as always)."""
    answer: str | None = None
    """An approval answer given in advance (``"allowed-once"``,
    ``"rejected"``, ``"cancelled"``, ``"deferred"``): prepare skips the
    ``tools/pre-execute`` waterfall and the approval service and takes this
    answer; guards, the cancellation recheck and the rest run as usual (a
    deferred call resumed). None: prepare from the start."""
    ask: Ask | None = None
    """With ``answer``: the ``Ask`` the answer replies to (a call deferred
    again keeps it for its next suspension)."""
    known: bool | None = None
    """Whether the agent could call its tool when its batch was logged or
    suspended (``LoggedCall.known``, a suspension's ``unknown``; None: not
    recorded): what the batch records again if it suspends once more."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunBatch:
    """Run ``batch`` and settle ``reply`` with its ToolBatchResult."""

    batch: ToolBatchInput
    """The raw batch from the caller (already checked)."""
    reply: Reply
    """Settled once every call has committed."""
    limit: int
    """The concurrency limit for this batch (already validated)."""
    loop: Any = None
    """The event loop the batch's async bodies run on (the one that awaited
    ``execute_async``, or the runtime's bound loop); None: the runtime's own
    loop thread."""
    starts: tuple[CallStart, ...] | None = None
    """A continued batch: where each call starts (one per call, in model
    order); None: a fresh batch (every call from the start)."""
    native: Any = None
    """The ``NativeExecutor`` whose batch this is (its policy and pool of
    running batches; any executor actor of the runtime may run it)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Serve(Generic[MailboxT]):
    """Serve ``mailbox``: take its calls, dispatch each, report each
    ``Settled``, until a LEAVE; then go back to the dispatcher."""

    mailbox: MailboxT
    """The batch's work mailbox, a ``WorkMailbox`` (a reference, like an actor ref)."""


@dataclass(frozen=True, slots=True)
class Settled:
    """A call actor dispatched ``call``; the call is the executor's again."""

    call: Call
    """The call, settled with the dispatch's outcome."""


@dataclass(frozen=True, slots=True)
class Returned:
    """Calls taken back from the work mailbox unrun: the first was found
    stale (the registry or the pre-execute listeners changed since it was
    prepared) as a call actor took it, and the rest were queued behind it;
    in model order. They are the executor's again, to prepare again."""

    calls: tuple[Call, ...]


@dataclass(frozen=True, slots=True)
class BodyEnded:
    """Async bodies of the batch ended on its loop (the flights' reports:
    put by the loop's thread, one message for the ends of one iteration of
    the loop, or by the loop watch when the loop went away)."""

    ends: tuple[tuple[Call, Any, BaseException | None], ...]
    """``(call, value, error)`` per body: the call (not settled yet: the
    executor finishes it), what the body returned (when ``error`` is None),
    what it raised (an ``AbortError`` when its signal cancelled it)."""


@dataclass(frozen=True, slots=True)
class Resume:
    """Run ``run`` again: a message reached its inbox while no executor actor
    was running it (see ``BatchInbox``)."""

    run: Any
    """The batch's ``BatchRun`` (one owned object: one actor runs it at a time)."""


@dataclass(frozen=True, slots=True)
class Begin:
    """Open the prebuilt ``run`` (a sub-batch, see ``open_sub_batch``) and
    take its first step, as for a :class:`RunBatch`."""

    run: Any
    """The sub-batch's ``BatchRun`` (one owned object: its feeder only
    puts messages in its inbox)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Fed:
    """One more call for a sub-batch, made by its feeder (a PTC program):
    it is the batch's last call, in the order the feeder made them."""

    call_id: str
    name: str
    arguments: Any
    """The arguments object (materialized as the call is built)."""
    schema: Any = None
    """``execution.schema`` (the binding-time schema the feeder used)."""
    root_call_id: str | None = None
    parent: Any = None
    """``execution.parent``: the token of the call that feeds the batch."""
    signal: Any = None
    """An ``AbortSignal`` of this call alone, or None: its abort aborts
    this call as the batch's signal aborts every call (the feeder gave up
    on it: a program cancelled it)."""


@dataclass(frozen=True, slots=True)
class Sealed:
    """The feeder of a sub-batch makes no more calls: the batch ends once
    every call it was fed has committed."""


class BatchHost(Protocol):
    """A batch's executor (``NativeExecutor``) as the batch and its executor
    actor see it: where the batch takes its :class:`BatchPolicy` as it
    opens, and who hears that the run has finished."""

    def batch_policy(self, *, nested: bool = False) -> BatchPolicy: ...

    def run_finished(self, run: Any) -> None: ...


class FeedSink(Protocol):
    """Where a sub-batch's calls go as they start and commit (its feeder's
    side). Called on the executor actor running the batch, in the order the
    batch decides; neither method may block for long."""

    def started(self, execution: Any) -> None:
        """The call starts (before any policy): log it. Raising fails the
        batch as a session write error does (the call does not run)."""

    def committed(self, execution: Any, result: Any) -> None:
        """The call committed with its final ``result`` (every call fed
        commits exactly once, an unstarted one too). Must not raise."""


@dataclass(frozen=True, slots=True)
class Wake:
    """The batch's signal or the runtime's stop signal fired: look again."""


@dataclass(frozen=True, slots=True)
class Deadline:
    """``rt.stop()``'s timeout passed with this batch still running: commit
    the calls still out as ABORTED and reply now."""
