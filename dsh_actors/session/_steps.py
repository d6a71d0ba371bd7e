"""Reading one model step back from the log: which calls it had and, for
each, whether it has a logged ``tool/result``, started without one (a
``tool/start``), or never started. Crash recovery (``rt.tools.recover``)
reads a step this way."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from ..errors import LosslessJsonError
from ._events import APPROVAL, APPROVAL_REQUEST, BATCH, CALL, RESULT, START, LoggedResult

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
    last approval decision logged for it (``tool/approval``), or None."""

    call_id: str
    name: str
    arguments: Any
    logged: bool
    started: bool
    result: LoggedResult | None
    awaiting: str | None = None
    decision: str | None = None

    @property
    def state(self) -> CallState:
        if self.result is not None:
            return "settled"
        return "started" if self.started else "unstarted"


class _Entry:
    __slots__ = ("call_id", "name", "arguments", "logged", "started", "result", "awaiting", "decision")

    def __init__(self, call_id: str, name: str, arguments: Any) -> None:
        self.call_id = call_id
        self.name = name
        self.arguments = arguments
        self.logged = False
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
        )


def _str(value: object, path: str) -> str:
    if type(value) is not str:
        raise LosslessJsonError(path, "must be a str")
    return value


def _batch_calls(event: Mapping[str, Any]) -> list[_Entry]:
    calls = event.get("calls")
    if type(calls) is not list:
        raise LosslessJsonError("event.calls", "must be a list")
    entries: list[_Entry] = []
    for i, item in enumerate(calls):
        if not isinstance(item, Mapping):
            raise LosslessJsonError(f"event.calls[{i}]", "must be an object")
        call_id = _str(item.get("call_id"), f"event.calls[{i}].call_id")
        entries.append(_Entry(call_id, _str(item.get("name"), f"event.calls[{i}].name"), item.get("arguments")))
    return entries


def step_calls(events: Iterable[Mapping[str, Any]], turn: int, step: int) -> tuple[LoggedCall, ...]:
    """The calls of model step ``(turn, step)`` in ``events``, in model
    order; :func:`read_step` tells more."""
    return read_step(events, turn, step).calls


@dataclass(frozen=True, slots=True)
class LoggedStep:
    """A model step as the log knows it: its ``calls`` (model order) and
    the batch's own ``max_parallel_tool_calls`` (None: the executor's, or a
    step logged without a ``tool/batch``)."""

    calls: tuple[LoggedCall, ...]
    max_parallel_tool_calls: int | None = None


def read_step(events: Iterable[Mapping[str, Any]], turn: int, step: int) -> LoggedStep:
    """The calls of model step ``(turn, step)`` in ``events``, in model
    order (empty when the log has none).

    The step's last ``tool/batch`` gives its calls (a step run again is
    read from its latest run); without one (a log written before that
    event existed, or a crash that tore it) its ``tool/call`` events do.
    A ``tool/start`` or ``tool/result`` pairs with the latest ``tool/call``
    of its id that has no result yet, as replay pairs them (ids may repeat
    across steps). Raises :class:`LosslessJsonError` naming the field of a
    malformed ``tool/batch``, ``tool/call`` or ``tool/result``."""
    entries: list[_Entry] | None = None  # from the latest tool/batch of the step
    limit: int | None = None
    by_id: dict[str, _Entry] = {}
    open_calls: dict[str, _Entry | None] = {}  # call id -> the latest tool/call's entry (None: another step's)
    fallback: dict[str, _Entry] = {}  # the step's tool/call events, when there is no tool/batch
    entry: _Entry | None
    for event in events:
        kind = event.get("type")
        if kind == BATCH:
            if event.get("turn") == turn and event.get("step") == step and type(event.get("turn")) is int:
                entries = _batch_calls(event)
                limit = event.get("max_parallel_tool_calls")
                if limit is not None and (type(limit) is not int or limit < 1):
                    raise LosslessJsonError("event.max_parallel_tool_calls", "must be null or a positive int")
                by_id = {entry.call_id: entry for entry in entries}
                fallback.clear()
                for call_id in list(open_calls):  # an earlier run's calls are not this run's
                    open_calls[call_id] = None
        elif kind == CALL:
            call_id = _str(event.get("call_id"), "event.call_id")
            ours = event.get("turn") == turn and event.get("step") == step and type(event.get("turn")) is int
            entry = None
            if ours:
                if entries is not None:
                    entry = by_id.get(call_id)
                    if entry is not None and entry.logged:
                        entry = None  # a second tool/call of one id in a run: not the batch's
                else:
                    entry = _Entry(call_id, _str(event.get("name"), "event.name"), event.get("arguments"))
                    fallback.pop(call_id, None)
                    fallback[call_id] = entry
            if entry is not None:
                entry.logged = True
            open_calls[call_id] = entry
        elif kind == START or kind == RESULT or kind == APPROVAL_REQUEST or kind == APPROVAL:
            call_id = _str(event.get("call_id"), "event.call_id")
            entry = open_calls.get(call_id)
            if entry is None:
                continue
            if kind == START:
                entry.started = True
            elif kind == RESULT:
                entry.result = LoggedResult.from_event(event)
                del open_calls[call_id]
            elif kind == APPROVAL_REQUEST:
                entry.awaiting = _str(event.get("suspension"), "event.suspension")
            else:
                entry.awaiting = None
                entry.decision = _str(event.get("decision"), "event.decision")
    chosen = entries if entries is not None else list(fallback.values())
    return LoggedStep(tuple(entry.frozen() for entry in chosen), limit)
