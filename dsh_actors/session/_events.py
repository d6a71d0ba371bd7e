"""The session log's events: their names, the functions that build them
(``call_event``, ``result_event``, the PTC dispatch events), the error
shape they share, and :class:`LoggedResult`, a result rebuilt from its
logged fields. ``dsh_actors.session`` documents the format."""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final, Protocol, TypeAlias, TypeVar

from ..errors import (
    AbortError,
    ErrorCode,
    InvalidTypeError,
    InvalidValueError,
    LosslessJsonError,
    is_fault,
    safe_str,
    traceback_text,
)
from ..json import materialize
from ..model import (
    ContentBlock,
    TextBlock,
    ToolErrorInfo,
    ToolExecutionFailure,
    ToolFailure,
    content_from_json,
    content_to_json,
)
from ..presentation import ToolResultProjection

BATCH: Final = "tool/batch"
CALL: Final = "tool/call"
START: Final = "tool/start"
RESULT: Final = "tool/result"
PTC_DISPATCH_START: Final = "tool/ptc-dispatch-start"
PTC_DISPATCH: Final = "tool/ptc-dispatch"
APPROVAL_REQUEST: Final = "tool/approval-request"
APPROVAL: Final = "tool/approval"
SUSPEND: Final = "tool/suspend"

REPAIR_MESSAGE: Final = "tool call interrupted: the session ended before its result was recorded"
"""The message of the synthetic failure :meth:`Session.repair` appends."""
REPAIR_ERROR_NAME: Final = "SessionRepair"
REPAIR_ERROR_CODE: Final = str(ErrorCode.INTERRUPTED)

INTERRUPTED: Final = ToolExecutionFailure(
    error=ToolFailure(REPAIR_MESSAGE, ToolErrorInfo(REPAIR_ERROR_NAME, REPAIR_ERROR_CODE)),
    content=(TextBlock("Error: " + REPAIR_MESSAGE),),
)
"""The synthetic failure of a call that a crash interrupted after its body
started: what :meth:`Session.repair` logs, and crash recovery gives a call
that may not run again."""
_INTERRUPTED: Final = INTERRUPTED


class SessionCorruptError(LosslessJsonError):
    """A line of a session file, other than a torn last one (see
    ``Session.open``), is not a valid event:
    ``<file>:<lineno>: <problem>``. ``file`` and ``lineno`` (1-based) locate
    it; ``path`` (inherited) is ``"<file>:<lineno>"``. Its code is
    ``INVALID_JSON``."""

    def __init__(self, file: str, lineno: int, problem: str) -> None:
        self.file = file
        self.lineno = lineno
        super().__init__(f"{file}:{lineno}", problem)


# --------------------------------------------------------------------------
# Event builders
# --------------------------------------------------------------------------


class ResultFields(Protocol):
    """What :func:`result_event` reads: the durable fields of a result (a
    live ``ToolExecutionSuccess``/``ToolExecutionFailure``, a
    ``ToolResultProjection`` or a :class:`LoggedResult`)."""

    @property
    def is_error(self) -> bool: ...

    @property
    def content(self) -> Sequence[ContentBlock]: ...

    @property
    def error(self) -> ToolFailure | None: ...

    @property
    def meta(self) -> Any: ...


def _plain_str(value: object, where: str) -> str:
    """``value`` as an exact ``str`` (a str enum such as ``ErrorCode`` gives
    its value); anything else is a TypeError naming ``where``."""
    if type(value) is str:
        return value
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, str):
        return str.__str__(value)
    raise InvalidTypeError(f"{where} must be a str, got {type(value).__qualname__}")


def _int(value: object, where: str) -> int:
    if type(value) is not int:
        raise InvalidTypeError(f"{where} must be an int, got {type(value).__qualname__}")
    return value


def error_to_json(error: ToolFailure | None) -> dict[str, Any] | None:
    """The logged form of a failure: ``None``, or ``{"message", "info"}``
    with ``info`` ``None`` or ``{"name", "code", "reason"}``."""
    if error is None:
        return None
    info = error.info
    return {
        "message": _plain_str(error.message, "error.message"),
        "info": None
        if info is None
        else {
            "name": _plain_str(info.name, "error.info.name"),
            "code": _plain_str(info.code, "error.info.code"),
            "reason": None if info.reason is None else _plain_str(info.reason, "error.info.reason"),
        },
    }


def error_from_json(item: object, path: str = "error") -> ToolFailure | None:
    """Inverse of :func:`error_to_json`; raises :class:`LosslessJsonError`
    naming the bad field."""
    if item is None:
        return None
    if not isinstance(item, Mapping):
        raise LosslessJsonError(path, "must be null or an object")
    message = item.get("message")
    if type(message) is not str:
        raise LosslessJsonError(f"{path}.message", "must be a str")
    info = item.get("info")
    if info is None:
        return ToolFailure(message)
    if not isinstance(info, Mapping):
        raise LosslessJsonError(f"{path}.info", "must be null or an object")
    fields: list[str | None] = []
    for key in ("name", "code", "reason"):
        value = info.get(key)
        if type(value) is not str and not (key == "reason" and value is None):
            raise LosslessJsonError(f"{path}.info.{key}", "must be a str")
        fields.append(value)
    name, code, reason = fields
    assert name is not None and code is not None
    return ToolFailure(message, ToolErrorInfo(name, code, reason))


def call_event(
    turn: int, step: int, call_id: str, name: str, arguments: Any, agent: str | None = None
) -> dict[str, Any]:
    """A ``tool/call`` event. ``arguments``: the call's normalized arguments
    (frozen or plain JSON), or the raw text when it was not JSON. ``agent``:
    the id of the agent whose step it is (see :func:`step_key`)."""
    # (Each check inline for the common case, its function for the rest:
    # the executor builds one of these per call.)
    event = {
        "type": CALL,
        "turn": turn if type(turn) is int else _int(turn, "turn"),
        "step": step if type(step) is int else _int(step, "step"),
        "call_id": call_id if type(call_id) is str else _plain_str(call_id, "call_id"),
        "name": name if type(name) is str else _plain_str(name, "name"),
        "arguments": arguments,
    }
    if agent is not None:
        event["agent"] = agent if type(agent) is str else _plain_str(agent, "agent")
    return event


#: The logged call whose body runs in the current context, as
#: ``(session, (turn, step, agent id or None, call_id))``: set in the call's
#: context as its ``tool/start`` is written, so a logged batch its body
#: runs (``rt.tools.execute`` from the body, which binds the body's
#: context) in the same session names it as its ``parent`` in its
#: ``tool/batch`` (in another session the call is not there to name).
ENCLOSING_CALL: contextvars.ContextVar[tuple[object, tuple[int, int, str | None, str]] | None] = contextvars.ContextVar(
    "dsh_actors.enclosing_call", default=None
)


def batch_event(
    turn: int,
    step: int,
    calls: Iterable[tuple[str, str, Any]],
    max_parallel_tool_calls: int | None = None,
    agent: str | None = None,
    parent: tuple[int, int, str | None, str] | None = None,
    unknown: Iterable[str] | None = None,
) -> dict[str, Any]:
    """A ``tool/batch`` event: every call of a logged batch, in model order,
    written before any of them starts, so that a crash loses none of them.
    ``calls``: ``(call_id, name, arguments)`` with ``arguments`` as the
    model sent them (JSON text as it is, or lossless JSON);
    ``max_parallel_tool_calls``: the batch's own limit (None: the
    executor's); ``agent``: as for :func:`call_event`; ``parent``: the
    logged call whose body runs this batch (:data:`ENCLOSING_CALL`), as
    ``(turn, step, agent id or None, call_id)``; ``unknown``: the ids of
    the calls whose tool the agent could not call as the batch was logged
    (they fail ``UNKNOWN_TOOL``), so that recovery tells them from calls of
    a tool the recovering runtime lacks (None: not recorded, as in a log
    written before the key existed)."""
    event = {
        "type": BATCH,
        "turn": _int(turn, "turn"),
        "step": _int(step, "step"),
        "max_parallel_tool_calls": None
        if max_parallel_tool_calls is None
        else _int(max_parallel_tool_calls, "max_parallel_tool_calls"),
        "calls": [
            {
                "call_id": call_id if type(call_id) is str else _plain_str(call_id, "call_id"),
                "name": name if type(name) is str else _plain_str(name, "name"),
                "arguments": arguments,
            }
            for call_id, name, arguments in calls
        ],
    }
    if agent is not None:
        event["agent"] = _plain_str(agent, "agent")
    if parent is not None:
        p_turn, p_step, p_agent, p_call = parent
        named: dict[str, Any] = {"turn": _int(p_turn, "turn"), "step": _int(p_step, "step")}
        if p_agent is not None:
            named["agent"] = _plain_str(p_agent, "agent")
        named["call_id"] = _plain_str(p_call, "call_id")
        event["parent"] = named
    if unknown is not None:
        event["unknown"] = [_plain_str(call_id, "unknown") for call_id in unknown]
    return event


def parent_of(event: Mapping[str, Any]) -> tuple[StepKey, str] | None:
    """The logged call a ``tool/batch`` names as its ``parent`` (the call
    whose body ran it): its step and its call id; None when it names none
    or names it in another shape (a hand-written log)."""
    parent = event.get("parent")
    if type(parent) is not dict:
        return None
    key = step_key(parent)
    call_id = parent.get("call_id")
    if key is None or type(call_id) is not str:
        return None
    return key, call_id


def step_of(event: Mapping[str, Any]) -> tuple[int, int] | None:
    """The model step ``(turn, step)`` an event names, or None when it names
    none (``turn`` and ``step`` both ints, else None: a ``tool/start`` or
    ``tool/result`` written before they carried them, or by hand)."""
    turn, step = event.get("turn"), event.get("step")
    if type(turn) is int and type(step) is int:
        return (turn, step)
    return None


StepKey: TypeAlias = tuple[int, int, str | None]
"""A step as events name it: ``(turn, step, agent id or None)``."""


def step_key(event: Mapping[str, Any]) -> StepKey | None:
    """The step an event names with the agent it names: ``(turn, step,
    agent)``, the agent None when it names none (a log written before
    events carried it); None when it names no step (see :func:`step_of`).
    Agents sharing a session number their steps alike: the agent tells
    their steps apart."""
    turn, step = event.get("turn"), event.get("step")
    if type(turn) is int and type(step) is int:
        return (turn, step, agent_of(event))
    return None


def agent_of(event: Mapping[str, Any]) -> str | None:
    """The id of the agent an event names (its ``"agent"``), or None when
    it names none."""
    agent = event.get("agent")
    return agent if type(agent) is str else None


def redeferred_key(
    waiting: Mapping[tuple[str, str | None], object], call_id: str, agent: str | None
) -> tuple[str, str | None] | None:
    """The key in ``waiting`` (``(call id, agent)`` -> the call a "deferred"
    decision left waiting) of the call that a new approval request for
    ``call_id`` naming ``agent`` is for, or None: that agent's, else one
    whose request named no agent (a log written before events carried it).
    The session, ``read_step`` and replay ask it alike, through
    :func:`take_redeferred`."""
    key = (call_id, agent)
    if key in waiting:
        return key
    if agent is not None and (call_id, None) in waiting:
        return (call_id, None)
    return None


_Waiting = TypeVar("_Waiting")


def _redeferred_at(call_id: str, step: StepKey | None) -> tuple[str, str | None]:
    return (call_id, None if step is None else step[2])


def leave_redeferred(
    waiting: MutableMapping[tuple[str, str | None], _Waiting], call_id: str, step: StepKey | None, call: _Waiting
) -> None:
    """Keep ``call`` (of ``call_id``, its ``tool/call`` naming ``step``, or
    None when it names none) in ``waiting`` as the call a "deferred"
    decision left waiting for its next request (:func:`take_redeferred`
    finds it): under ``(call_id, the agent of step)``, the one key rule
    the session, ``read_step`` and replay share with
    :func:`drop_redeferred`."""
    waiting[_redeferred_at(call_id, step)] = call


def drop_redeferred(
    waiting: MutableMapping[tuple[str, str | None], _Waiting], call_id: str, step: StepKey | None, call: _Waiting
) -> None:
    """``call`` (as :func:`leave_redeferred` took it) settled: no request
    is for it any more (its resume halted before asking again), so a
    "deferred" decision no longer leaves it waiting; a later call of the
    id that waits there instead stays. The session, ``read_step`` and
    replay drop it alike."""
    key = _redeferred_at(call_id, step)
    if key in waiting and waiting[key] == call:
        del waiting[key]


def take_redeferred(
    waiting: MutableMapping[tuple[str, str | None], _Waiting],
    call_id: str,
    request: Mapping[str, Any],
    step_of: Callable[[_Waiting], StepKey | None],
) -> _Waiting | None:
    """The call a "deferred" decision left waiting that the approval
    ``request`` for ``call_id`` is for, taken out of ``waiting``, or None:
    the one :func:`redeferred_key` finds, when the request names no step,
    ``step_of`` it gives none, or both name the same step (a request of
    another step, of a call that reuses the id, is that step's call's: the
    waiting one stays). The session, ``read_step`` and replay pair requests
    alike."""
    again = redeferred_key(waiting, call_id, agent_of(request))
    if again is None:
        return None
    at, waited = step_key(request), step_of(waiting[again])
    if at is None or waited is None or same_step(waited, at):
        return waiting.pop(again)
    return None


class CallLines:
    """Which ``tool/call`` lines are calls: the one rule the session,
    ``read_step`` and replay share (each feeds it the ``tool/batch`` and
    ``tool/call`` events it reads, in log order).

    An agent's batch logs a ``tool/call`` once for each call of its
    ``tool/batch`` (a batch's ids are unique), after that batch. So once an
    agent has logged a ``tool/batch``, a ``tool/call`` naming one of its
    steps is a call only as one of that step's latest ``tool/batch``'s
    calls that has no ``tool/call`` in that run yet; any other line is not
    a call: a copy of a line (by hand, a tool that rewrote the file),
    whenever it was logged (after its call's result, or after the agent's next
    batch), or a line its step's batch does not name. A ``tool/call`` that
    names no step or no agent, or of an agent that has logged no
    ``tool/batch`` (a log written before events carried them, or by hand),
    is a call.

    It keeps the agents that logged a ``tool/batch`` and, for each step, its
    latest batch's calls without a ``tool/call`` yet (until each has one):
    what is open, never a step's history."""

    __slots__ = ("_agents", "_unlogged")

    def __init__(self) -> None:
        self._agents: set[str] = set()
        self._unlogged: dict[StepKey, set[str]] = {}

    def batch(self, event: Mapping[str, Any]) -> None:
        """Take a ``tool/batch`` event: a new run of its step, whose calls
        are new calls (a malformed ``calls`` names none)."""
        at = step_key(event)
        if at is None or at[2] is None:
            return  # (a batch of no step, or of no agent, is none of an agent's runs)
        self._agents.add(at[2])
        calls = event.get("calls")
        ids = (
            {item["call_id"] for item in calls if isinstance(item, Mapping) and type(item.get("call_id")) is str}
            if type(calls) is list
            else set()
        )
        if ids:
            self._unlogged[at] = ids
        else:
            self._unlogged.pop(at, None)

    def is_call(self, event: Mapping[str, Any], at: StepKey | None) -> bool:
        """Whether ``tool/call`` ``event`` (its ``call_id`` a str), naming
        step ``at`` (its :func:`step_key`, which the caller keeps too), is a
        call, and not a line to pass over (see the class); a call of its
        step's batch is no longer awaited."""
        if at is None or at[2] is None or at[2] not in self._agents:
            return True
        waiting = self._unlogged.get(at)
        if waiting is None or event["call_id"] not in waiting:
            return False
        waiting.discard(event["call_id"])
        if not waiting:
            del self._unlogged[at]
        return True


def same_step(a: StepKey, b: StepKey) -> bool:
    """Whether two step keys name the same step: the same turn and step,
    and the same agent unless one of them names none (an event written
    before events carried their agent pairs with either)."""
    return a[0] == b[0] and a[1] == b[1] and (a[2] is None or b[2] is None or a[2] == b[2])


def agent_matches(logged: object, agent: str | None) -> bool:
    """Whether an event naming agent ``logged`` (its ``"agent"``) belongs
    to ``agent``'s steps: any event when ``agent`` is None; else one that
    names it, or names none."""
    return agent is None or logged is None or logged == agent


def _stepped(event: dict[str, Any], turn: int | None, step: int | None) -> dict[str, Any]:
    """``event`` with the step of its call, when given (both or neither).
    A builder may place ``turn`` and ``step`` in its literal already, where
    they belong in the event's key order: they are checked and kept there,
    or dropped when neither is given."""
    if type(turn) is int and type(step) is int:  # (the common case, checked inline)
        event["turn"] = turn
        event["step"] = step
        return event
    if (turn is None) != (step is None):
        raise InvalidValueError("give both turn and step (the call's model step), or neither")
    if turn is not None:
        event["turn"] = _int(turn, "turn")
        event["step"] = _int(step, "step")
    else:
        event.pop("turn", None)
        event.pop("step", None)
    return event


def start_event(
    call_id: str, turn: int | None = None, step: int | None = None, agent: str | None = None
) -> dict[str, Any]:
    """A ``tool/start`` event: the call's body is about to run (written
    before it is invoked, so a crash that leaves no ``tool/result`` tells
    "started" from "never started"). ``turn``, ``step`` and ``agent``: its
    ``tool/call``'s, so it pairs with that call even while another open
    call shares its id."""
    event = {"type": START, "call_id": call_id, "turn": turn, "step": step}
    if type(turn) is not int or type(step) is not int:
        _stepped(event, turn, step)
    if agent is not None:
        event["agent"] = agent if type(agent) is str else _plain_str(agent, "agent")
    return event


def result_event(
    call_id: str,
    result: ResultFields,
    *,
    turn: int | None = None,
    step: int | None = None,
    agent: str | None = None,
) -> dict[str, Any]:
    """A ``tool/result`` event: ``is_error``, ``content``, ``error`` and
    ``meta`` of ``result``; never its canonical ``value``. ``turn``,
    ``step`` and ``agent``: its ``tool/call``'s (see :func:`start_event`)."""
    call_id = call_id if type(call_id) is str else _plain_str(call_id, "call_id")
    error = result.error
    # One literal, in the log's key order (a success has no error to
    # convert or trace); the step checked by _stepped unless both are ints.
    event = {
        "type": RESULT,
        "call_id": call_id,
        "turn": turn,
        "step": step,
        "is_error": bool(result.is_error),
        "content": content_to_json(result.content),
        "error": None if error is None else error_to_json(error),
        "meta": result.meta,
    }
    if type(turn) is not int or type(step) is not int:
        _stepped(event, turn, step)
    if agent is not None:
        event["agent"] = agent if type(agent) is str else _plain_str(agent, "agent")
    return event if error is None else _traced(event, error)


def _traced(event: dict[str, Any], error: ToolFailure | None) -> dict[str, Any]:
    """``event`` with a ``traceback`` field (text, for people: no model
    ever sees it) when the failure kept the exception a hook raised and it
    is a fault (``errors.is_fault``) or a cancellation: not for the model's
    bad arguments that the validation the library wraps around a body
    refused, an expected outcome with nothing of the application's to show."""
    exc = None if error is None else getattr(error, "exception", None)
    if exc is not None and (is_fault(exc) or isinstance(exc, AbortError)):
        event["traceback"] = traceback_text(exc)
    return event


def approval_request_event(
    call_id: str,
    suspension: str,
    name: str,
    reason: str | None,
    display_reason: Mapping[str, str] | None,
    *,
    turn: int | None = None,
    step: int | None = None,
    agent: str | None = None,
) -> dict[str, Any]:
    """A ``tool/approval-request`` event: the approval service deferred the
    call; the batch suspends as ``suspension`` (its id) until a decision.
    ``turn``, ``step`` and ``agent``: its ``tool/call``'s (see
    :func:`start_event`)."""
    event = _stepped(
        {"type": APPROVAL_REQUEST, "call_id": _plain_str(call_id, "call_id")},
        turn,
        step,
    )
    event["suspension"] = _plain_str(suspension, "suspension")
    event["name"] = _plain_str(name, "name")
    event["reason"] = reason if type(reason) is str else None
    event["display_reason"] = None if display_reason is None else dict(display_reason)
    if agent is not None:
        event["agent"] = _plain_str(agent, "agent")
    return event


def approval_event(call_id: str, suspension: str, decision: str) -> dict[str, Any]:
    """A ``tool/approval`` event: the decision the resume of ``suspension``
    gave for the call (``"allowed-once"``, ``"rejected"``, ``"cancelled"``,
    or ``"deferred"`` again)."""
    return {
        "type": APPROVAL,
        "call_id": _plain_str(call_id, "call_id"),
        "suspension": _plain_str(suspension, "suspension"),
        "decision": _plain_str(decision, "decision"),
    }


def suspend_event(
    suspension: str, *, turn: int | None = None, step: int | None = None, agent: str | None = None
) -> dict[str, Any]:
    """A ``tool/suspend`` event: the batch of step ``(turn, step)`` (of
    ``agent``) suspended as ``suspension`` (its id), waiting for the
    decisions its ``tool/approval-request`` events ask; written after every
    result it committed, as it returns the suspension. A request whose
    suspension has none was cut by a crash before its batch suspended (or
    logged before this event existed)."""
    event = _stepped({"type": SUSPEND, "suspension": _plain_str(suspension, "suspension")}, turn, step)
    if agent is not None:
        event["agent"] = _plain_str(agent, "agent")
    return event


def ptc_dispatch_start_event(
    root_call_id: str, parent_call_id: str | None, sub_call_id: str, name: str, arguments: Any
) -> dict[str, Any]:
    """A ``tool/ptc-dispatch-start`` event: pairing ids, name and normalized
    arguments of a started ``run_code`` sub-dispatch (no schema, no
    description)."""
    return {
        "type": PTC_DISPATCH_START,
        **_pairing(root_call_id, parent_call_id, sub_call_id, name),
        "arguments": arguments,
    }


def _pairing(root_call_id: str, parent_call_id: str | None, sub_call_id: str, name: str) -> dict[str, Any]:
    """The ids and name both sub-dispatch events carry, checked."""
    return {
        "root_call_id": _plain_str(root_call_id, "root_call_id"),
        "parent_call_id": None if parent_call_id is None else _plain_str(parent_call_id, "parent_call_id"),
        "sub_call_id": _plain_str(sub_call_id, "sub_call_id"),
        "name": _plain_str(name, "name"),
    }


def ptc_dispatch_event(
    root_call_id: str,
    parent_call_id: str | None,
    sub_call_id: str,
    name: str,
    is_error: bool,
    content: Iterable[ContentBlock],
    error: ToolFailure | None,
    meta: Any,
) -> dict[str, Any]:
    """A ``tool/ptc-dispatch`` event: the durable copy of a settled
    sub-dispatch (``content`` is the logged, possibly replaced, copy)."""
    return _traced(
        {
            "type": PTC_DISPATCH,
            **_pairing(root_call_id, parent_call_id, sub_call_id, name),
            "is_error": bool(is_error),
            "content": content_to_json(content),
            "error": error_to_json(error),
            "meta": meta,
        },
        error,
    )


# --------------------------------------------------------------------------
# Reading results back
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoggedResult:
    """A result rebuilt from a ``tool/result`` (or ``tool/ptc-dispatch``)
    event alone: ``call_id`` (the ``sub_call_id`` of a dispatch), content
    blocks, ``is_error``, ``error`` and frozen ``meta``. It has the
    attributes presenters read; :meth:`projection` gives the
    ``ToolResultProjection`` that ``present_result`` is typed to take."""

    call_id: str
    content: tuple[ContentBlock, ...]
    is_error: bool
    error: ToolFailure | None = None
    meta: Any = None

    @classmethod
    def from_event(cls, event: Mapping[str, Any]) -> LoggedResult:
        """Rebuild a result; raises :class:`LosslessJsonError` naming the
        bad field (``event.content[0].text: ...``) or ``ValueError`` for an
        event of another type."""
        kind = event.get("type")
        if kind == RESULT:
            id_key = "call_id"
        elif kind == PTC_DISPATCH:
            id_key = "sub_call_id"
        else:
            raise InvalidValueError(f"not a {RESULT} or {PTC_DISPATCH} event: type {safe_str(kind)!r}")
        call_id = event.get(id_key)
        if type(call_id) is not str:
            raise LosslessJsonError(f"event.{id_key}", "must be a str")
        is_error = event.get("is_error")
        if type(is_error) is not bool:
            raise LosslessJsonError("event.is_error", "must be a bool")
        return cls(
            call_id=call_id,
            content=content_from_json(event.get("content"), "event.content"),
            is_error=is_error,
            error=error_from_json(event.get("error"), "event.error"),
            meta=materialize(event.get("meta"), "event.meta"),
        )

    def projection(self) -> ToolResultProjection:
        """The durable projection ``present_result`` takes."""
        return ToolResultProjection(content=self.content, is_error=self.is_error, error=self.error, meta=self.meta)


def results_by_call(events: Iterable[Mapping[str, Any]], *, ptc: bool = False) -> dict[str, LoggedResult]:
    """Each call's logged result, by call id, in log order. ``tool/result``
    events only, or with ``ptc`` only ``tool/ptc-dispatch`` events (keyed by
    ``sub_call_id``). A call id logged twice (reused across steps, agents
    sharing a session, a step run again) keeps its last result: one step's
    results, each with its call, are :func:`step_calls`'s."""
    wanted = PTC_DISPATCH if ptc else RESULT
    out: dict[str, LoggedResult] = {}
    for event in events:
        if event.get("type") == wanted:
            result = LoggedResult.from_event(event)
            out[result.call_id] = result
    return out


def _interrupted_dispatch(
    sub_call_id: str, root_call_id: str | None, parent_call_id: str | None, name: str | None
) -> dict[str, Any]:
    """The synthetic ``tool/ptc-dispatch`` :meth:`Session.repair` appends for
    a sub-call that started and never settled (the ids and name of its start
    event; one that was not a str is ``None``)."""
    return {
        "type": PTC_DISPATCH,
        "root_call_id": root_call_id,
        "parent_call_id": parent_call_id,
        "sub_call_id": sub_call_id,
        "name": name,
        "is_error": True,
        "content": content_to_json(_INTERRUPTED.content),
        "error": error_to_json(_INTERRUPTED.error),
        "meta": None,
    }
