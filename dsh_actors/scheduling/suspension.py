"""A suspended batch as a plain JSON value, and what resuming it means.

A batch whose approval service answered ``"deferred"`` for some calls ends
with ``result.suspension`` (:func:`suspension_value`): the batch's calls in
model order, each ``settled`` (its final result), ``deferred`` (waiting for
a decision: the tool, its arguments and the ``Ask`` shown to a person) or
``pending`` (never started: it waits behind a deferred call); plus the
batch's log step and limit, its agent's path, the calls that run no tool
(``unknown``, as a logged batch's ``tool/batch`` records them) and a fresh
id. Nothing in it refers to a live object, so it survives
``json.dumps``/``json.loads`` and another process.

Resuming (:func:`resume_plan`) reads it back, checks the decisions, and
turns it into the one continuation every interrupted batch uses
(``scheduling.start.continue_batch``): settled calls are given their
results, deferred ones their answers, pending ones start from the start.
The kernel's ``Claims`` make a suspension resumable once per runtime; a logged
batch is also claimed in its session (``Session.decide``), which is what
holds across processes sharing the log.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

import orjson

from ..errors import InvalidTypeError, InvalidValueError, LosslessJsonError, safe_str
from ..json import materialize, thaw
from ..kernel import Claims
from ..model import (
    Agent,
    Ask,
    LogStep,
    ToolBatchInput,
    ToolCall,
    ToolExecutionFailure,
    ToolExecutionResult,
    ToolExecutionSuccess,
    UserMessage,
    content_from_json,
    content_to_json,
    is_text_by_language,
)
from ..pipeline.intake import batch_arguments, parse_arguments, stand_in
from ..pipeline.stages import DECISIONS
from ..session import LOST_END, LoggedCall, LoggedResult, Session, approval_refusal, error_from_json, error_to_json
from .messages import CallStart
from .recovery import logged_arguments

__all__ = ["ResumePlan", "checked_with_log", "new_suspension_id", "resume_plan", "suspension_value"]

FORMAT: Final = "dsh-actors/suspension"
VERSION: Final = 1

SETTLED: Final = "settled"
DEFERRED: Final = "deferred"
PENDING: Final = "pending"


def new_suspension_id() -> str:
    return uuid.uuid4().hex


# --------------------------------------------------------------------------
# Results as JSON (the value included: a final result is frozen, so lossless)
# --------------------------------------------------------------------------


def _contexts_to_json(contexts: Sequence[UserMessage]) -> list[dict[str, Any]]:
    return [{"content": content_to_json(m.content), "source": m.source, "meta": thaw(m.meta)} for m in contexts]


def result_to_json(result: ToolExecutionResult) -> dict[str, Any]:
    """A final result as plain JSON: everything the batch's result carries
    (the canonical ``value`` too, unlike the session log), except a kept
    exception (its message and info stay)."""
    out: dict[str, Any] = {
        "is_error": bool(result.is_error),
        "content": content_to_json(result.content),
        "error": error_to_json(result.error),
        "meta": thaw(result.meta),
        "additional_contexts": _contexts_to_json(result.additional_contexts),
    }
    if type(result) is ToolExecutionSuccess:
        out["value"] = thaw(result.value)
        out["concludes_turn"] = bool(result.concludes_turn)
    return out


def _field(item: Mapping[str, Any], key: str, path: str) -> Any:
    if key not in item:
        raise LosslessJsonError(f"{path}.{key}", "is missing")
    return item[key]


def _object(item: object, path: str) -> Mapping[str, Any]:
    if not isinstance(item, Mapping):
        raise LosslessJsonError(path, f"must be an object, got {type(item).__qualname__}")
    return item


def result_from_json(item: object, path: str) -> ToolExecutionResult:
    """Inverse of :func:`result_to_json`; raises ``LosslessJsonError``
    naming the bad field."""
    fields = _object(item, path)
    is_error = _field(fields, "is_error", path)
    if type(is_error) is not bool:
        raise LosslessJsonError(f"{path}.is_error", "must be a bool")
    content = content_from_json(_field(fields, "content", path), f"{path}.content")
    meta = materialize(fields.get("meta"), f"{path}.meta")
    raw_contexts = fields.get("additional_contexts", [])
    if not isinstance(raw_contexts, list):
        raise LosslessJsonError(f"{path}.additional_contexts", "must be a list")
    contexts: list[UserMessage] = []
    for i, raw in enumerate(raw_contexts):
        where = f"{path}.additional_contexts[{i}]"
        message = _object(raw, where)
        source = message.get("source")
        if source is not None and type(source) is not str:
            raise LosslessJsonError(f"{where}.source", "must be null or a str")
        contexts.append(
            UserMessage(
                content=content_from_json(_field(message, "content", where), f"{where}.content"),
                source=source,
                meta=materialize(message.get("meta"), f"{where}.meta"),
            )
        )
    if is_error:
        error = error_from_json(_field(fields, "error", path), f"{path}.error")
        if error is None:
            raise LosslessJsonError(f"{path}.error", "a failed result needs its error")
        return ToolExecutionFailure(error=error, content=content, meta=meta, additional_contexts=tuple(contexts))
    concludes = fields.get("concludes_turn", False)
    if type(concludes) is not bool:
        raise LosslessJsonError(f"{path}.concludes_turn", "must be a bool")
    return ToolExecutionSuccess(
        value=materialize(fields.get("value"), f"{path}.value"),
        content=content,
        meta=meta,
        additional_contexts=tuple(contexts),
        concludes_turn=concludes,
    )


# --------------------------------------------------------------------------
# Writing a suspension
# --------------------------------------------------------------------------


def display_reason_value(display_reason: Any) -> dict[str, str] | None:
    """An ``Ask``'s ``display_reason`` as plain JSON: a mapping of
    language to text; anything else was refused when the call deferred
    (``pipeline/prepare.py``), so here it is None."""
    return dict(display_reason) if is_text_by_language(display_reason) else None


def plain_arguments(arguments: Any) -> Any:
    """A call's arguments as plain JSON (a text the model sent stays text)."""
    if type(arguments) is str:
        return arguments
    try:
        return thaw(materialize(arguments, "arguments"))
    except LosslessJsonError as exc:
        return stand_in(exc)


def suspension_value(
    suspension_id: str,
    batch: ToolBatchInput,
    settled: Mapping[str, ToolExecutionResult],
    deferred: Mapping[str, tuple[Any, Ask | None]],
    unknown: Iterable[str],
) -> dict[str, Any]:
    """The suspension of ``batch``: ``settled`` (call id → final result),
    ``deferred`` (call id → (normalized arguments, the ``Ask``)); every
    other call is pending. ``unknown``: the ids of the calls that run no
    tool as the batch suspends (``recovery.unknown_calls``, by the batch's
    routing), so that a resume tells them from calls of a tool its runtime
    lacks (a logged batch's resume reads its ``tool/batch``'s instead).
    Plain JSON (dicts, lists, str, numbers, bools, None)."""
    calls: list[dict[str, Any]] = []
    waiting: list[str] = []  # the deferred calls before the current one
    for tool_call in batch.calls:
        call_id = tool_call.id
        entry: dict[str, Any] = {"id": call_id, "name": tool_call.name}
        result = settled.get(call_id)
        if result is not None:
            entry["arguments"] = plain_arguments(tool_call.arguments)
            entry["state"] = SETTLED
            entry["result"] = result_to_json(result)
        elif call_id in deferred:
            arguments, ask = deferred[call_id]
            entry["arguments"] = plain_arguments(tool_call.arguments if arguments is None else arguments)
            entry["state"] = DEFERRED
            entry["approval"] = {
                "reason": None if ask is None else ask.reason,
                "display_reason": None if ask is None else display_reason_value(ask.display_reason),
            }
            waiting.append(call_id)
        else:
            entry["arguments"] = plain_arguments(tool_call.arguments)
            entry["state"] = PENDING
            entry["waits_for"] = list(waiting)
        calls.append(entry)
    agent = batch.agent
    # Only a batch that logged its step is a logged one: an agent without a
    # session runs a batch with log= unlogged, and resumes it so.
    logged = logged_step(batch)
    return {
        "format": FORMAT,
        "version": VERSION,
        "id": suspension_id,
        "agent": None if agent is None else [a.id for a in agent.chain()],
        "log": None if logged is None else {"turn": logged[1], "step": logged[2]},
        "max_parallel_tool_calls": batch.max_parallel_tool_calls,
        "calls": calls,
        "unknown": list(unknown),
    }


# --------------------------------------------------------------------------
# Reading one back and resuming it
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResumePlan:
    """A suspension read back, with its decisions: the batch to continue
    and where each of its calls starts."""

    id: str
    batch: ToolBatchInput
    starts: tuple[CallStart, ...]
    decisions: Mapping[str, str]
    """Every deferred call's answer (a deferred call without a decision
    stays deferred), in model order."""
    known: tuple[bool | None, ...] | None = None
    """Whether the agent could call each call's tool: an unlogged batch's as
    it suspended (the suspension's ``unknown``), a logged batch's when the
    step was logged, once :func:`checked_with_log` read its log
    (``LoggedCall.known``); None: a suspension made before it recorded
    ``unknown`` (its calls run as they would)."""


def _str(value: object, path: str) -> str:
    if type(value) is not str:
        raise InvalidValueError(f"not a suspension: {path} must be a str, got {type(value).__qualname__}")
    return value


def _approval_ask(approval: object, path: str) -> Ask:
    """A deferred call's ``approval`` read back as the ``Ask`` it answers:
    without it, a call deferred again would have nothing to wait on (and
    would run as allowed), so a missing or malformed one is refused."""
    if not isinstance(approval, Mapping):
        raise InvalidValueError(
            f"not a suspension: {path} must be an object (reason, display_reason), got {type(approval).__qualname__}"
        )
    reason = approval.get("reason")
    if reason is not None and type(reason) is not str:
        raise InvalidValueError(f"not a suspension: {path}.reason must be null or a str")
    display = approval.get("display_reason")
    if display is not None and not is_text_by_language(display):
        raise InvalidValueError(
            f"not a suspension: {path}.display_reason must be null or an object of language to text"
        )
    return Ask(reason=reason, display_reason=None if display is None else dict(display))


def resume_plan(
    suspension: object,
    decisions: object,
    *,
    agent: Agent | None,
    signal: Any,
    tool_set: Any = None,
    deps: Any = None,
) -> ResumePlan:
    """Check ``suspension`` (a value :func:`suspension_value` made, maybe
    through JSON) and ``decisions`` (call id → answer), and plan the
    continuation. Raises ``InvalidValueError``/``InvalidTypeError`` naming
    what is wrong; nothing has run then."""
    if not isinstance(suspension, Mapping):
        raise InvalidTypeError(
            f"resume() takes the suspension a suspended batch returned (result.suspension), "
            f"not {type(suspension).__qualname__}"
        )
    if suspension.get("format") != FORMAT:
        raise InvalidValueError(
            'not a suspension: its "format" is not "dsh-actors/suspension" (pass result.suspension as it is)'
        )
    version = suspension.get("version")
    if type(version) is not int:
        raise InvalidTypeError(
            f'a suspension\'s "version" is an int (this runtime reads {VERSION}), '
            f"got {type(version).__qualname__} {safe_str(repr(version))[:40]}"
        )
    if version != VERSION:
        raise InvalidValueError(f"suspension version {version} is not supported (this runtime reads {VERSION})")
    suspension_id = _str(suspension.get("id"), "id")
    if not isinstance(decisions, Mapping):
        raise InvalidTypeError(
            f'decisions map call ids to approval answers ("allowed-once", ...), not {type(decisions).__qualname__}'
        )
    raw_calls = suspension.get("calls")
    if not isinstance(raw_calls, list) or not raw_calls:
        raise InvalidValueError("not a suspension: calls must be a non-empty list")
    calls: list[ToolCall] = []
    starts: list[CallStart] = []
    answers: dict[str, str] = {}
    deferred_ids: list[str] = []
    for i, raw in enumerate(raw_calls):
        where = f"calls[{i}]"
        if not isinstance(raw, Mapping):
            raise InvalidValueError(f"not a suspension: {where} must be an object")
        call_id = _str(raw.get("id"), f"{where}.id")
        name = _str(raw.get("name"), f"{where}.name")
        arguments = raw.get("arguments")
        if type(arguments) is not str:
            try:
                arguments = materialize(arguments, f"{where}.arguments")
            except LosslessJsonError as exc:
                raise InvalidValueError(f"not a suspension: {exc.message}") from None
            if not isinstance(arguments, Mapping):
                # The model sent a JSON value that is not an object: as text,
                # so the call meets the same intake (and its error) as at first.
                arguments = orjson.dumps(thaw(arguments)).decode()
        calls.append(ToolCall(id=call_id, name=name, arguments=arguments))
        state = raw.get("state")
        logged = suspension.get("log") is not None
        if state == SETTLED:
            try:
                result = result_from_json(raw.get("result"), f"{where}.result")
            except LosslessJsonError as exc:
                raise InvalidValueError(f"not a suspension: {exc.message}") from None
            starts.append(CallStart(result=result))
        elif state == DEFERRED:
            deferred_ids.append(call_id)
            given = decisions.get(call_id, "deferred")
            # A str subclass (a StrEnum member) is read as the text it holds
            # (str.__str__: its own methods never run), as a service's answer is.
            answer = str.__str__(given) if issubclass(type(given), str) else ""
            if answer not in DECISIONS:  # (named by its type and text, never its repr)
                if type(given) is str:
                    what = repr(answer[:60])
                elif issubclass(type(given), str):
                    what = f"{answer[:60]!r} (of type {type(given).__qualname__})"
                else:
                    what = "None" if given is None else f"of type {type(given).__qualname__}, not a str"
                raise InvalidValueError(
                    f"the decision for call {safe_str(call_id)!r} is {what}: "
                    f"answer one of {', '.join(repr(d) for d in DECISIONS)}"
                )
            answers[call_id] = answer
            ask = _approval_ask(raw.get("approval"), f"{where}.approval")
            # Its tool/call is in the log (it started): not written again.
            starts.append(CallStart(answer=answer, ask=ask, logged=logged))
        elif state == PENDING:
            starts.append(CallStart())
        else:
            raise InvalidValueError(
                f'not a suspension: {where}.state is {safe_str(repr(state))} ("settled", "deferred" or "pending")'
            )
    for call_id in decisions:
        if call_id not in answers:
            raise InvalidValueError(
                f"decisions name call {safe_str(repr(call_id))}, which does not wait for an approval in this "
                f"suspension (the deferred calls: {', '.join(repr(c) for c in deferred_ids) or 'none'})"
            )
    path = suspension.get("agent")
    if path is not None and (not isinstance(path, list) or not path or any(type(p) is not str for p in path)):
        raise InvalidValueError("not a suspension: agent must be null or a list of agent ids")
    if agent is None:
        if path is not None:
            # Rebuilt from its ids: its own scopes are new (global tools and
            # policies apply) and it has no session.
            for agent_id in path:
                agent = Agent(agent_id, parent=agent)
    else:
        if not isinstance(agent, Agent):
            raise InvalidTypeError(f"agent must be an Agent, not {type(agent).__qualname__}")
        actual = [a.id for a in agent.chain()]
        if path is None or actual != path:
            if path is None:
                wanted, fix = "no agent", "pass agent=None"
            elif suspension.get("log") is not None:
                # (agent=None rebuilds an agent without a session: a logged batch refuses it)
                wanted = f'agent "{"/".join(path)}"'
                fix = (
                    "pass the agent whose batch was suspended, with the session it logs to "
                    "(Agent(..., session=Session.open(path)))"
                )
            else:
                wanted = f'agent "{"/".join(path)}"'
                fix = "pass the agent whose batch was suspended (or agent=None)"
            raise InvalidValueError(f'the suspension was made for {wanted}, not agent "{agent.path}": {fix}')
    raw_log = suspension.get("log")
    log: LogStep | None = None
    if raw_log is not None:
        if (
            not isinstance(raw_log, Mapping)
            or type(raw_log.get("turn")) is not int
            or type(raw_log.get("step")) is not int
        ):
            raise InvalidValueError('not a suspension: log must be null or {"turn": int, "step": int}')
        log = LogStep(turn=raw_log["turn"], step=raw_log["step"])
        if agent is None or agent.session is None:
            raise InvalidValueError(
                "the suspended batch is logged: pass agent= with the session it logs to "
                "(Agent(..., session=Session.open(path)))"
            )
    limit = suspension.get("max_parallel_tool_calls")
    if limit is not None and type(limit) is not int:
        raise InvalidValueError("not a suspension: max_parallel_tool_calls must be null or an int")
    unknown = suspension.get("unknown")  # (absent: a suspension made before it was recorded)
    if unknown is not None and (not isinstance(unknown, list) or any(type(i) is not str for i in unknown)):
        raise InvalidValueError("not a suspension: unknown must be null or a list of call ids")
    ids = None if unknown is None else frozenset(unknown)
    known = None if ids is None else tuple(call.id not in ids for call in calls)
    if known is not None:
        starts = [replace(start, known=was) for start, was in zip(starts, known, strict=True)]
    batch = ToolBatchInput(
        calls=tuple(calls),
        signal=signal,
        max_parallel_tool_calls=limit,
        agent=agent,
        tool_set=tool_set,
        log=log,
        deps=deps,
    )
    return ResumePlan(id=suspension_id, batch=batch, starts=tuple(starts), decisions=answers, known=known)


# --------------------------------------------------------------------------
# A logged batch: the log is the authority
# --------------------------------------------------------------------------


def _canonical_arguments(arguments: Any) -> Any:
    """Arguments as the intake reads them, as plain JSON (JSON text parsed,
    empty text ``{}``), so text and the object it holds compare equal.
    Taken as ``tool/batch`` records them first: arguments that are not
    lossless JSON (a lone surrogate) are logged as a stand-in text."""
    parsed = parse_arguments(batch_arguments(arguments))
    if type(parsed) is str:
        return ("text", parsed)
    try:
        return thaw(materialize(parsed, "arguments"))
    except LosslessJsonError:
        return ("text", arguments if type(arguments) is str else repr(arguments))


def _result_difference(given: ToolExecutionResult, logged: LoggedResult) -> str | None:
    """Which logged field of ``given`` differs from ``logged``, or None."""
    if bool(given.is_error) != logged.is_error:
        return "is_error"
    if tuple(given.content) != tuple(logged.content):
        return "content"
    error = given.error if type(given) is ToolExecutionFailure else None
    if error != logged.error:
        return "error"
    if given.meta != logged.meta:
        return "meta"
    return None


def checked_with_log(plan: ResumePlan, session: Session) -> ResumePlan:
    """``plan`` (a logged batch's) checked against what its session's log
    says of the step (``Session.read_step``): the same calls in the same
    order, each with the same tool and arguments; each deferred call still
    awaiting this very suspension; the calls the suspension says settled,
    and only those, settled in the log with the same result (``is_error``,
    ``content``, ``error``, ``meta``: the fields the log keeps). Raises,
    naming what disagrees (``InvalidValueError``; ``InvalidStateError``
    for a suspension resumed already, or whose calls were asked again or
    settled since, see ``session.approval_refusal``). Returns the plan with
    the log's arguments and the limit its ``tool/batch`` logged: the log is
    the authority for what it holds (the suspension alone carries a
    result's ``value`` and its contexts), and what it says of each call's
    tool (``known``)."""
    batch = plan.batch
    log = batch.log
    assert log is not None
    where = f"the log {session.path}" if session.path is not None else "the session's log"
    step = f"turn {log.turn}, step {log.step}"
    agent_id = None if batch.agent is None else batch.agent.id
    read = session.read_step(log.turn, log.step, agent_id)
    logged = read.calls
    tail = "; resume the suspension value its batch returned, unchanged (nothing ran)"
    if not logged:
        raise InvalidValueError(
            f"{where} has no call of {step}, the step suspension {plan.id} continues: the suspension comes from "
            "another log; resume it with the agent whose session is the log its batch wrote "
            "(agent=Agent(..., session=Session.open(that path)))"
        )
    ours = [call.id for call in batch.calls]
    theirs = [call.call_id for call in logged]
    if ours != theirs:
        raise InvalidValueError(
            f"the suspension's calls ({_ids(ours)}) are not the calls {where} holds for {step} "
            f"({_ids(theirs)}): the suspension does not match its log{tail}"
        )
    for call, start, entry in zip(batch.calls, plan.starts, logged, strict=True):
        if call.name != entry.name:
            raise InvalidValueError(
                f"call {_ids([call.id])} is a call of tool {_ids([call.name])} in the suspension, but of "
                f"{_ids([entry.name])} in "
                f"{where}: the suspension does not match its log{tail}"
            )
        if start.answer is not None and entry.awaiting != plan.id:
            # (From the step's events, as read_step reads them: memory stays
            # flat however long the log.)
            raise approval_refusal(session.step_events(log.turn, log.step, agent_id), plan.id, call.id, session.path)
    calls: list[ToolCall] = []
    starts: list[CallStart] = []
    for call, start, entry in zip(batch.calls, plan.starts, logged, strict=True):
        _check_call(call, start, entry, where, tail)
        calls.append(ToolCall(id=call.id, name=entry.name, arguments=logged_arguments(entry.arguments)))
        if start.result is None and start.answer is None and entry.logged and not start.logged:
            # Pending, but its tool/call is in the log: it was prepared, then
            # came back unrun to be prepared again and waited behind a
            # deferred call. It starts from the start, not logged twice.
            start = replace(start, logged=True)
        starts.append(replace(start, known=entry.known))
    return replace(
        plan,
        batch=replace(batch, calls=tuple(calls), max_parallel_tool_calls=read.max_parallel_tool_calls),
        starts=tuple(starts),
        known=tuple(entry.known for entry in logged),
    )


def _ids(values: Sequence[str]) -> str:
    return ", ".join(safe_str(repr(value)) for value in values)


def _check_call(call: ToolCall, start: CallStart, entry: LoggedCall, where: str, tail: str) -> None:
    shown = _ids([call.id])
    if _canonical_arguments(call.arguments) != _canonical_arguments(entry.arguments):
        raise InvalidValueError(
            f"call {shown} has other arguments in the suspension than in {where} (its tool/batch): the "
            f"suspension does not match its log{tail}"
        )
    state = SETTLED if start.result is not None else DEFERRED if start.answer is not None else PENDING
    if state == SETTLED and entry.result is None:
        raise InvalidValueError(
            f"call {shown} is settled in the suspension, but {where} has no result for it: the suspension "
            f"does not match its log{tail}{LOST_END}"
        )
    if state != SETTLED and entry.result is not None:
        raise InvalidValueError(
            f"call {shown} has a result in {where}, but is {state} in the suspension: the suspension does not "
            f"match its log{tail}"
        )
    if state == PENDING and entry.started:
        raise InvalidValueError(
            f"call {shown} started in {where} (its tool/start), but is pending (never started) in the "
            f"suspension: the suspension does not match its log{tail}"
        )
    if start.result is not None and entry.result is not None:
        field = _result_difference(start.result, entry.result)
        if field is not None:
            raise InvalidValueError(
                f"call {shown} has another result in the suspension than in {where} (its {field} differs): the "
                f"suspension does not match its log{tail}"
            )


class ReleasingReply:
    """A reply that gives back a step claim once it is settled (or once
    :meth:`release` is called: the batch never started)."""

    __slots__ = ("_reply", "_release")

    def __init__(self, reply: Any, release: Any) -> None:
        self._reply = reply
        self._release: Any = release

    def release(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            release()

    def set_running_or_notify_cancel(self) -> bool:
        running = bool(self._reply.set_running_or_notify_cancel())
        if not running:
            self.release()  # cancelled by its owner: nothing more will settle it
        return running

    def cancelled(self) -> bool:
        # (What settle() asks of a reply that is done: one its owner
        # cancelled is still told the batch ended, which releases the claim.)
        cancelled = getattr(self._reply, "cancelled", None)
        return bool(cancelled()) if callable(cancelled) else False

    def set_result(self, result: Any) -> None:
        try:
            self.release()
        finally:
            self._reply.set_result(result)

    def set_exception(self, exception: BaseException | None) -> None:
        try:
            self.release()
        finally:
            self._reply.set_exception(exception)

    def done(self) -> bool:
        return bool(self._reply.done())


def in_step(
    claims: Claims, session: Session, turn: int, step: int, agent: str, reply: Any, start: Callable[[Any], None]
) -> None:
    """``start(reply)`` holding logged step ``(turn, step)`` of agent
    ``agent`` (its id) in ``session``: one batch of a runtime runs a step at
    a time (the step's own, a resume of it, a recovery of it), or a call
    could run twice (through one ``Session`` the log's own lock lets a
    second batch in). Raises ``InvalidStateError`` while another holds it.
    The claim is given back when the batch's reply is settled (its owner
    may have cancelled it: it is settled all the same when the batch ends),
    or at once if ``start`` raises or the reply was cancelled before the
    batch started."""
    claims.claim_step(session, turn, step, agent)
    claimed = ReleasingReply(reply, lambda: claims.release_step(session, turn, step, agent))
    try:
        start(claimed)
    except BaseException:
        claimed.release()
        raise


def logged_step(batch: ToolBatchInput) -> tuple[Session, int, int, str] | None:
    """``(session, turn, step, agent id)`` of a batch that logs its step
    (checked already: ``check_batch``), or None."""
    log, agent = batch.log, batch.agent
    if log is None or agent is None or agent.session is None:
        return None
    return agent.session, log.turn, log.step, agent.id
