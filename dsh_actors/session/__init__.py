"""The durable session log (``docs/reference.md``, section 10): one JSON
object per line.

A :class:`Session` records what a batch did, in commit order, as *events*:
plain JSON objects, each with a ``"type"`` key. The executor writes six
kinds, built by the functions below, and three more for deferred approvals: a request, a decision and a
batch's suspension (keys are snake_case):

``tool/batch``
    ``{"type", "turn", "step", "calls"}``, ``calls`` a list of ``{"call_id",
    "name", "arguments"}`` in model order, ``arguments`` as the model sent
    them (JSON text as it is): every call of the batch, written before any
    of them starts, so a crash loses none (crash recovery reads it).
``tool/call``
    ``{"type", "turn", "step", "call_id", "name", "arguments"}``:
    ``arguments`` is the call's normalized arguments as JSON, or the raw
    string when the model sent text that is not JSON (or a JSON string).
    One for each call of the step's ``tool/batch``: another line (a copy)
    is no call (:class:`CallLines` says which are, for the session,
    ``read_step`` and replay alike).
``tool/start``
    ``{"type", "call_id", "turn", "step"}``: the call's body is about to be
    invoked (written by whoever runs it, after the call's ``tool/call``), so
    that a call without a ``tool/result`` is known to have started or not.
``tool/result``
    ``{"type", "call_id", "turn", "step", "is_error", "content", "error",
    "meta"}``:
    ``content`` as :func:`~dsh_actors.model.content_to_json` writes it,
    ``error`` ``None`` or ``{"message", "info"}`` with ``info`` ``None`` or
    ``{"name", "code", "reason"}``. The canonical ``value`` is never logged.
``tool/ptc-dispatch-start``
    ``{"type", "root_call_id", "parent_call_id", "sub_call_id", "name",
    "arguments"}``: pairing ids, name and arguments only (never the schema
    or the description).
``tool/ptc-dispatch``
    ``{"type", "root_call_id", "parent_call_id", "sub_call_id", "name",
    "is_error", "content", "error", "meta"}``: the settled sub-call's
    durable copy, same field shapes as ``tool/result``.
``tool/approval-request``
    ``{"type", "call_id", "turn", "step", "suspension", "name", "reason",
    "display_reason"}``: the approval service deferred a logged call (it
    has its ``tool/call``, and no ``tool/result`` until it is decided); its
    batch suspended as ``suspension``.
``tool/approval``
    ``{"type", "call_id", "suspension", "decision"}``: the decision a
    resume of that suspension gave, written before anything of the resumed
    batch runs (``"deferred"`` again is followed by a new request).
``tool/suspend``
    ``{"type", "suspension", "turn", "step", "agent"}``: the step's batch
    suspended as ``suspension``, written after every result it committed,
    as it returns the suspension (a batch, a resume or a recovery that
    suspends again). A request whose suspension has none was cut by a
    crash before its batch suspended, or logged before this event existed.

A request is keyed by its suspension and call id (what names one step's
call even when ids repeat across steps, or agents share the session); a
``tool/start``, ``tool/result`` or request pairs with the latest open
``tool/call`` of its id and of the step it names (``turn`` and ``step``,
its call's; one that names none, as logs written before these events
carried them, pairs with the latest open ``tool/call`` of its id), and a
request made again after a ``"deferred"`` decision with the call that
decision was for (a request of another step is that step's call's).

**Storage.** ``Session()`` keeps events in memory; ``Session(path)``
keeps none (only the pending call and sub-call ids that pair calls with
results): :meth:`Session.events` reads the file. Once a step is read back
(:meth:`Session.read_step`: a resume, a recovery) the session also keeps
where each step's events are (``_index.py``), so that a step's read parses
that step's lines only (:meth:`Session.step_events`). It
appends them to a JSONL file (orjson, compact, ``\\n``-terminated) through
an unbuffered handle, so each event is one ``write`` that reaches the OS
before :meth:`Session.append` returns (``fsync=True`` also makes it reach
the disk). On a regular file of a local file system that ``write(2)`` keeps
the GIL (``_write.py`` says why and where). Every method is thread-safe: one lock orders the appends, so
lines from several threads never interleave. The session is the only
writer of its file: it takes an exclusive ``flock`` on it before its first
write (:meth:`Session.hold`; ``Session(path)`` when it creates it) and
keeps it until :meth:`Session.close` or its process's end, so another
session, in this process or another one, may read the file but not write
it meanwhile (nor later, if it read the file before those writes: its
view is stale).

**Failures.** An event that is not lossless JSON raises
:class:`~dsh_actors.errors.LosslessJsonError` (path starting at ``event``)
and writes nothing. A failed write raises an ``OSError`` of its errno (so
of its class) whose message names the log and what to do (free space, then
finish the step with ``rt.tools.recover``; the executor turns it into
``ToolBatchExecutionError``) and leaves the session
consistent: the event is not in :meth:`Session.events`, and the bytes it
may have left are cut off the file. If they cannot be cut (the file cannot
be truncated), the next append first writes a ``\\n`` when the file does
not end with one, so the torn line never merges with a good one (it then
stands as a line of its own, which a later :meth:`Session.open` reports as
corrupt: that takes a failed write *and* a failed truncate). As a step's
writes begin (its ``tool/batch``, a resume's ``tool/approval``,
:meth:`Session.hold`), and before every write once that found a change,
a session on a regular file checks that its path still leads to
the file it opened, of the size it made it: a log replaced (an editor's
save, ``sed -i``), moved, removed, cut short or written to by something
else under it makes the write raise ``InvalidStateError`` naming the log,
how it changed and what to do (``Session.open(path)`` again, then
``rt.tools.recover``), and writes nothing, rather than lose the event or
append it after a cut line.
Appending to a closed session raises ``OSError("session is closed ...")``,
naming its log and how to go on (``Session.open(path)``).

**Reading back.** :meth:`Session.open` reads an existing file and continues
it, a chunk (1 MiB) at a time: it holds one chunk and the line it parses,
never the whole file. Blank lines are skipped. A valid event without its trailing ``\\n`` is
kept as the last line, and the next append starts on a fresh line. A last
line without its ``\\n`` that is not whole JSON is a torn write from a
crash (each event is written with its newline in one write, so a cut one
never ends in a newline): it is ignored, reported by
:attr:`Session.torn_line`, and cut off the file before the first append (a
read-only use never changes the file). Any other line that is not a valid
event, a newline-terminated last one included, raises
:class:`SessionCorruptError` naming ``<path>:<line number>``.

**Repair and replay.** :meth:`Session.repair` appends a synthetic failure
``tool/ptc-dispatch`` for every ``tool/ptc-dispatch-start`` still without
one (start order), then a synthetic failure ``tool/result`` for every
``tool/call`` still without a result (call order); both carry
:data:`REPAIR_MESSAGE` and info ``SessionRepair`` / ``INTERRUPTED``.
:meth:`Session.pending_calls` and :meth:`Session.pending_sub_calls` say
what is still open. :meth:`Session.results_by_call` gives each call's
:class:`LoggedResult`, rebuilt from logged fields only, whose
:meth:`LoggedResult.projection` is what ``present_result`` takes on replay;
it is keyed by call id, so an id logged in several steps keeps its latest
result: :meth:`Session.step_calls` pairs one step's results with its calls.
On a file, an event these reads refuse (a malformed field: a content block
type of a newer version, an edit by hand) raises :class:`SessionCorruptError`
naming its ``<path>:<line number>``.
"""

from __future__ import annotations

from ._events import (
    APPROVAL,
    APPROVAL_REQUEST,
    BATCH,
    CALL,
    ENCLOSING_CALL,
    INTERRUPTED,
    PTC_DISPATCH,
    PTC_DISPATCH_START,
    REPAIR_ERROR_CODE,
    REPAIR_ERROR_NAME,
    REPAIR_MESSAGE,
    RESULT,
    START,
    SUSPEND,
    CallLines,
    LoggedResult,
    SessionCorruptError,
    StepKey,
    agent_matches,
    agent_of,
    approval_event,
    approval_request_event,
    batch_event,
    call_event,
    drop_redeferred,
    error_from_json,
    error_to_json,
    leave_redeferred,
    parent_of,
    ptc_dispatch_event,
    ptc_dispatch_start_event,
    redeferred_key,
    result_event,
    results_by_call,
    same_step,
    start_event,
    step_key,
    step_of,
    suspend_event,
    take_redeferred,
)
from ._file import Session, whole_json
from ._steps import (
    LOST_END,
    SETTLED,
    STARTED,
    UNSTARTED,
    CallState,
    LoggedCall,
    LoggedStep,
    approval_refusal,
    read_step,
    step_calls,
)

__all__ = [
    "BATCH",
    "APPROVAL",
    "APPROVAL_REQUEST",
    "CALL",
    "CallLines",
    "ENCLOSING_CALL",
    "INTERRUPTED",
    "LOST_END",
    "PTC_DISPATCH",
    "PTC_DISPATCH_START",
    "REPAIR_ERROR_CODE",
    "REPAIR_ERROR_NAME",
    "REPAIR_MESSAGE",
    "RESULT",
    "SETTLED",
    "START",
    "SUSPEND",
    "StepKey",
    "agent_matches",
    "agent_of",
    "drop_redeferred",
    "leave_redeferred",
    "redeferred_key",
    "take_redeferred",
    "same_step",
    "step_key",
    "STARTED",
    "UNSTARTED",
    "CallState",
    "LoggedCall",
    "LoggedStep",
    "LoggedResult",
    "Session",
    "SessionCorruptError",
    "batch_event",
    "approval_event",
    "approval_refusal",
    "approval_request_event",
    "call_event",
    "error_from_json",
    "error_to_json",
    "parent_of",
    "ptc_dispatch_event",
    "ptc_dispatch_start_event",
    "result_event",
    "results_by_call",
    "start_event",
    "step_of",
    "suspend_event",
    "read_step",
    "step_calls",
    "whole_json",
]
