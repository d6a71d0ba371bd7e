"""Reading one model step back from the log: which calls it had and, for
each, whether it has a logged ``tool/result``, started without one (a
``tool/start``), or never started. Crash recovery (``rt.tools.recover``)
reads a step this way."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from ..errors import InvalidStateError, InvalidValueError, LosslessJsonError, UsageError, safe_str
from ._events import (
    APPROVAL,
    APPROVAL_REQUEST,
    BATCH,
    CALL,
    RESULT,
    START,
    CallLines,
    LoggedResult,
    StepKey,
    agent_matches,
    drop_redeferred,
    leave_redeferred,
    same_step,
    step_key,
    take_redeferred,
)

CallState = Literal["settled", "started", "unstarted"]
"""Where a logged call stands: ``"settled"`` (its ``tool/result`` is in the
log), ``"started"`` (its ``tool/start`` is, its result is not: its body may
have run, whole or in part), ``"unstarted"`` (its body never started)."""

SETTLED: Final = "settled"
STARTED: Final = "started"
UNSTARTED: Final = "unstarted"


@dataclass(frozen=True, slots=True)
class LoggedCall:
    """One call of a logged step, as the log knows it.

    ``arguments`` are what the model sent (the ``tool/batch`` event's: JSON
    text as it is, or a JSON object), or the ``tool/call``'s normalized
    arguments for a step logged without a ``tool/batch``. ``logged``: its
    ``tool/call`` is in the log. ``started``: its ``tool/start`` is.
    ``result``: its logged result, or None. ``awaiting``: the id of the
    suspension whose resume would decide its deferred approval (a
    ``tool/approval-request`` not decided yet), or None. ``decision``: the
    last approval decision logged for it (``tool/approval``), or None.
    ``known``: whether its agent could call its tool when the step's
    ``tool/batch`` was logged (False: it fails ``UNKNOWN_TOOL``, the model
    called a tool it did not have), or None when the log does not say (a
    ``tool/batch`` written before it recorded that, or none)."""

    call_id: str
    name: str
    arguments: Any
    logged: bool
    started: bool
    result: LoggedResult | None
    awaiting: str | None = None
    decision: str | None = None
    known: bool | None = None

    @property
    def state(self) -> CallState:
        if self.result is not None:
            return "settled"
        return "started" if self.started else "unstarted"


class _Entry:
    __slots__ = ("call_id", "name", "arguments", "logged", "step", "started", "result", "awaiting", "decision", "known")

    def __init__(self, call_id: str, name: str, arguments: Any, known: bool | None = None) -> None:
        self.call_id = call_id
        self.name = name
        self.arguments = arguments
        self.known = known
        self.logged = False
        self.step: StepKey | None = None  # (the step its tool/call named, once logged)
        self.started = False
        self.result: LoggedResult | None = None
        self.awaiting: str | None = None
        self.decision: str | None = None

    def frozen(self) -> LoggedCall:
        return LoggedCall(
            self.call_id,
            self.name,
            self.arguments,
            self.logged,
            self.started,
            self.result,
            None if self.result is not None else self.awaiting,
            self.decision,
            self.known,
        )


def _str(value: object, path: str) -> str:
    if type(value) is not str:
        raise LosslessJsonError(path, "must be a str")
    return value


def _batch_calls(event: Mapping[str, Any]) -> list[_Entry]:
    calls = event.get("calls")
    if type(calls) is not list:
        raise LosslessJsonError("event.calls", "must be a list")
    unknown = event.get("unknown")  # (None: a log written before the batch recorded it)
    if unknown is not None and (type(unknown) is not list or any(type(i) is not str for i in unknown)):
        raise LosslessJsonError("event.unknown", "must be null or a list of call ids")
    unknown_ids = None if unknown is None else frozenset(unknown)
    entries: list[_Entry] = []
    for i, item in enumerate(calls):
        if not isinstance(item, Mapping):
            raise LosslessJsonError(f"event.calls[{i}]", "must be an object")
        call_id = _str(item.get("call_id"), f"event.calls[{i}].call_id")
        known = None if unknown_ids is None else call_id not in unknown_ids
        entries.append(_Entry(call_id, _str(item.get("name"), f"event.calls[{i}].name"), item.get("arguments"), known))
    return entries


def step_calls(
    events: Iterable[Mapping[str, Any]], turn: int, step: int, agent: str | None = None
) -> tuple[LoggedCall, ...]:
    """The calls of model step ``(turn, step)`` (of ``agent``, when given)
    in ``events``, in model order; :func:`read_step` tells more."""
    return read_step(events, turn, step, agent).calls


@dataclass(frozen=True, slots=True)
class LoggedStep:
    """A model step as the log knows it: its ``calls`` (model order) and
    the batch's own ``max_parallel_tool_calls`` (None: the executor's, or a
    step logged without a ``tool/batch``)."""

    calls: tuple[LoggedCall, ...]
    max_parallel_tool_calls: int | None = None


def read_step(events: Iterable[Mapping[str, Any]], turn: int, step: int, agent: str | None = None) -> LoggedStep:
    """The calls of model step ``(turn, step)`` in ``events``, in model
    order (empty when the log has none). With ``agent`` (an agent's id),
    only that agent's step: events that name another agent are not its
    (agents sharing a session number their steps alike); events that name
    none (a log written before events carried their agent) are.

    The step's last ``tool/batch`` gives its calls (a step run again is
    read from its latest run); without one (a log written before that
    event existed, or a crash that tore it) its ``tool/call`` events do; a
    ``tool/call`` line that is not a call (:class:`CallLines`: a copy of a
    line, as the session has it) is passed over.
    A ``tool/start``, ``tool/result`` or ``tool/approval-request`` pairs
    with the latest ``tool/call`` of its id and of its step (its ``turn``
    and ``step``, and its agent; of any step for one that names none, as
    logs written before they carried them) that has no result yet, as replay pairs them
    (ids may repeat across steps); a ``tool/approval`` with the request of
    its suspension and call id. Raises
    :class:`LosslessJsonError` naming the field of a malformed
    ``tool/batch``, ``tool/call`` or ``tool/result``."""
    entries: list[_Entry] | None = None  # from the latest tool/batch of the step
    limit: int | None = None
    by_id: dict[str, _Entry] = {}
    # call id -> its open tool/calls' (step, entry), latest last (entry None:
    # another step's, or an earlier run's)
    open_calls: dict[str, list[tuple[StepKey | None, _Entry | None]]] = {}
    # (suspension, call id) -> the requesting entry
    requests: dict[tuple[str, str], _Entry | None] = {}
    # (call id, agent) -> the entry a "deferred" decision left waiting (its
    # next request is that entry's; agents sharing a session reuse ids)
    redeferred: dict[tuple[str, str | None], _Entry] = {}
    here: StepKey = (turn, step, agent)  # (the step of every entry)
    fallback: dict[str, _Entry] = {}  # the step's tool/call events, when there is no tool/batch
    lines = CallLines()  # (which tool/call lines are calls, as the session has it)
    entry: _Entry | None
    for event in events:
        kind = event.get("type")
        if kind == BATCH:
            if (
                event.get("turn") == turn
                and event.get("step") == step
                and type(event.get("turn")) is int
                and agent_matches(event.get("agent"), agent)
            ):
                entries = _batch_calls(event)
                limit = event.get("max_parallel_tool_calls")
                if limit is not None and (type(limit) is not int or limit < 1):
                    raise LosslessJsonError("event.max_parallel_tool_calls", "must be null or a positive int")
                by_id = {entry.call_id: entry for entry in entries}
                fallback.clear()
                # An earlier run's calls are not this run's.
                for stack in open_calls.values():
                    stack[:] = [(at, None) for at, _ in stack]
                for key in requests:
                    requests[key] = None
                redeferred.clear()
            lines.batch(event)
        elif kind == CALL:
            call_id = _str(event.get("call_id"), "event.call_id")
            call_step = step_key(event)
            if not lines.is_call(event, call_step):
                continue  # a copy of a line (or one its batch does not name): its call's start and result are the first's
            ours = (
                event.get("turn") == turn
                and event.get("step") == step
                and type(event.get("turn")) is int
                and agent_matches(event.get("agent"), agent)
            )
            entry = None
            if ours:
                if entries is not None:
                    entry = by_id.get(call_id)
                    if entry is not None and entry.logged:
                        entry = None  # a second tool/call of one id in a run (naming no agent): not the batch's
                else:
                    entry = _Entry(call_id, _str(event.get("name"), "event.name"), event.get("arguments"))
                    fallback.pop(call_id, None)
                    fallback[call_id] = entry
            if entry is not None:
                entry.logged = True
                entry.step = call_step
            open_calls.setdefault(call_id, []).append((call_step, entry))
        elif kind == START or kind == RESULT or kind == APPROVAL_REQUEST:
            call_id = _str(event.get("call_id"), "event.call_id")
            latest = open_calls.get(call_id)
            if not latest:
                continue
            named_step = step_key(event)
            at = _latest_of_step(latest, named_step)
            if at < 0:
                continue  # (its step has no open call of that id)
            entry = latest[at][1]
            if kind == APPROVAL_REQUEST:
                # Deferred again: the call that decision was for (a request
                # of another step is that step's call's), as the session
                # and replay pair it.
                again = take_redeferred(redeferred, call_id, event, lambda _: here)
                if again is not None:
                    entry = again
            if kind == RESULT:
                del latest[at]
                if not latest:
                    del open_calls[call_id]
            if entry is None:
                continue
            if kind == START:
                entry.started = True
            elif kind == RESULT:
                entry.result = LoggedResult.from_event(event)
                # Settled: a "deferred" decision no longer leaves it waiting
                # for a request (its resume halted before asking again), as
                # the session has it.
                drop_redeferred(redeferred, call_id, entry.step, entry)
            else:
                entry.awaiting = _str(event.get("suspension"), "event.suspension")
                requests[(entry.awaiting, call_id)] = entry
        elif kind == APPROVAL:
            call_id = _str(event.get("call_id"), "event.call_id")
            suspension = _str(event.get("suspension"), "event.suspension")
            entry = requests.pop((suspension, call_id), None)
            if entry is None:
                continue
            if entry.awaiting == suspension:
                entry.awaiting = None
            entry.decision = _str(event.get("decision"), "event.decision")
            if entry.decision == "deferred":
                leave_redeferred(redeferred, call_id, entry.step, entry)
    chosen = entries if entries is not None else list(fallback.values())
    return LoggedStep(tuple(entry.frozen() for entry in chosen), limit)


def _latest_of_step(stack: list[tuple[StepKey | None, Any]], step: StepKey | None) -> int:
    """Where in ``stack`` (open calls of one id, latest last) the latest call
    of step ``step`` is (None: of any step); -1 when there is none."""
    at = len(stack) - 1
    if step is not None:
        while at >= 0:
            key = stack[at][0]
            if key is not None and same_step(key, step):
                break
            at -= 1
    return at


#: What a refusal of a logged suspension adds when the log lacks what the
#: suspension holds (a request, a result): the log may have lost its last
#: events, which a recovery of the step finishes from what it holds.
LOST_END: Final = (
    "; if it is unchanged, the log lost its last events (the machine stopped before they reached the disk: "
    "Session(path, fsync=True) keeps each one), and rt.tools.recover(agent, turn, step) finishes the step "
    "(asking for its approvals again)"
)


def approval_refusal(
    events: Iterable[Mapping[str, Any]], suspension: str, call_id: str, path: str | os.PathLike[str] | None = None
) -> UsageError:
    """The error that says why call ``call_id`` cannot be decided by a
    resume of ``suspension`` in the log whose events are ``events`` (it
    does not await that suspension there), and what to do:

    * the suspension decided it already (``InvalidStateError``: it was
      resumed already; when it deferred the call again, the suspension
      that awaits it now is named);
    * a recovery of the step asked again (``InvalidStateError``: the call
      now awaits another suspension, named), or the call was settled
      without a decision (``repair()`` or ``recover()``: nothing to decide);
    * the log never deferred that call under that suspension
      (``InvalidValueError``): the suspension deferred other calls here (it
      does not match the log), or none at all (it comes from another log,
      or its id was changed).

    Once the suspension's request for the call is found, the events of
    another step (a call of the same id another agent, or another step,
    logged) are passed over: they are not that call's.
    ``path`` names the log in the messages."""
    where = "this log" if path is None else f"the log {os.fspath(path)}"
    shown = safe_str(repr(call_id))
    requested = False
    decision: str | None = None  # the suspension's decision for the call
    current: str | None = None  # the suspension the call awaits now (None: decided or settled)
    reasked = False  # a request without a decision before it (a recovery asking again)
    after_deferred = False  # a "deferred" decision: the next request is the call's
    fresh = False  # a tool/call of the same id since the request: a call of its own
    here: StepKey | None = None  # the step of the suspension's request (None: it names none)
    others: list[str] = []  # the other calls the suspension deferred
    for event in events:
        kind = event.get("type")
        if event.get("call_id") != call_id:
            other = event.get("call_id")
            if kind == APPROVAL_REQUEST and event.get("suspension") == suspension and type(other) is str:
                others.append(other)
            continue
        by = event.get("suspension")
        if requested and here is not None and (at := step_key(event)) is not None and not same_step(here, at):
            continue  # another step's call of the same id (another agent's, or ids reused across steps)
        if kind == CALL and requested:
            fresh = True
        elif kind == APPROVAL_REQUEST and by == suspension:
            requested, current, fresh = True, suspension, False
            here = step_key(event)
        elif kind == APPROVAL_REQUEST and requested and type(by) is str and current is not None:
            if after_deferred:
                current, after_deferred = by, False
            elif not fresh:
                current, reasked = by, True
        elif kind == APPROVAL and requested and by == current:
            if by == suspension:
                decision = safe_str(event.get("decision"))
            after_deferred = event.get("decision") == "deferred"
            if not after_deferred:
                current = None
        elif kind == RESULT and requested and not fresh:
            current = None
    if requested and decision is not None:
        then = (
            f"; the call now awaits suspension {current}: resume that one"
            if current is not None and current != suspension
            else (
                " (resume the suspension the last resume returned, if it suspended again; if that resume "
                "never returned, its process or runtime stopped, rt.tools.recover(agent, turn, step) "
                "finishes the step)"
            )
        )
        return InvalidStateError(
            f"suspension {suspension} was resumed already: {where} holds its decision for call {shown} "
            f"({decision}), and a suspension is resumed once{then}"
        )
    if requested and reasked and current is not None:
        return InvalidStateError(
            f"call {shown} no longer awaits suspension {suspension}: a recovery of its step asked for its "
            f"approval again, and it now awaits suspension {current}: resume that one"
        )
    if requested:
        return InvalidStateError(
            f"call {shown} has no open approval request in {where}: it was settled without a decision for "
            f"suspension {suspension} (repair() or recover() ended it), so there is nothing left to decide"
        )
    if others:
        return InvalidValueError(
            f"suspension {suspension} did not defer call {shown} in {where} (it deferred "
            f"{', '.join(safe_str(repr(c)) for c in others)}): the suspension does not match the log; resume the "
            f"suspension value the batch returned, unchanged{LOST_END}"
        )
    return InvalidValueError(
        f"{where} never deferred a call under suspension {suspension}: the suspension comes from another log, "
        "or its id was changed; resume it with the agent whose session is the log its batch wrote "
        f"(agent=Agent(..., session=Session.open(that path))){LOST_END}"
    )
