"""Finishing a model step that a crash interrupted, from the session log.

:func:`recovery_plan` reads the step back (``Session.read_step``) and turns
it into the one continuation every interrupted batch uses
(``scheduling.start.continue_batch``, as a resumed suspension does):

* a call with a logged ``tool/result`` is given that result (rebuilt from
  the logged fields: ``content``, ``error``, ``meta``; its ``value`` is
  None, since the canonical value is never logged) and does not run;
* a call that never started (no ``tool/start``) runs through the whole
  pipeline; its ``tool/call`` is not written twice;
* a call that started and has no result runs again only when its tool, as
  registered now, is ``idempotent``; otherwise it is given the
  ``INTERRUPTED`` failure ``Session.repair`` gives, logged as its
  ``tool/result`` in model order.

An approval decided in the log (a resumed suspension's ``tool/approval``)
is given to its call as its answer, so nobody is asked twice; a call still
waiting for a deferred approval is asked again (its old suspension can
then no longer decide it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import InvalidTypeError, InvalidValueError
from ..json import dumps, thaw
from ..model import (
    Agent,
    LogStep,
    ToolBatchInput,
    ToolCall,
    ToolExecutionFailure,
    ToolExecutionResult,
    ToolExecutionSuccess,
    ToolFailure,
)
from ..session import INTERRUPTED, LoggedCall, LoggedResult
from ..signals import AbortSignal
from ..visibility import executable
from .messages import CallStart

if TYPE_CHECKING:  # pragma: no cover
    from ..kernel import Kernel
    from ..toolset import ResolvedToolSet

__all__ = ["logged_arguments", "recovered_result", "recovery_plan"]

#: Decisions that end a deferred approval (``"deferred"`` asks again later).
_FINAL_DECISIONS = frozenset({"allowed-once", "rejected", "cancelled"})


def recovered_result(logged: LoggedResult) -> ToolExecutionResult:
    """The final result a logged ``tool/result`` stands for: its content,
    error and meta as logged; a success's ``value`` is None (the log never
    holds it), and there are no additional contexts."""
    if logged.is_error and logged.error is not None:
        return ToolExecutionFailure(error=logged.error, content=logged.content, meta=logged.meta)
    if logged.is_error:  # (a hand-written event without its error)
        return ToolExecutionFailure(error=ToolFailure("tool call failed"), content=logged.content, meta=logged.meta)
    return ToolExecutionSuccess(value=None, content=logged.content, meta=logged.meta)


def logged_arguments(logged: Any) -> Any:
    """What the model sent, as a ``ToolCall`` takes it: text or an object;
    any other JSON becomes its text (so the tool fails it ``INVALID_ARGS``,
    as it did)."""
    if type(logged) is str or type(logged) is dict:
        return logged
    return dumps(thaw(logged)).decode()


def _idempotent(rt: Kernel, call: LoggedCall, agent: Agent, tool_set: ResolvedToolSet | None) -> bool:
    registration = executable(rt.state, call.name, agent, tool_set)
    return registration is not None and registration.definition.idempotent is True


def _start(rt: Kernel, call: LoggedCall, agent: Agent, tool_set: ResolvedToolSet | None) -> CallStart:
    if call.result is not None:
        return CallStart(result=recovered_result(call.result), logged=True)
    answer = call.decision if call.awaiting is None and call.decision in _FINAL_DECISIONS else None
    if call.started and not _idempotent(rt, call, agent, tool_set):
        # Its body may have run, whole or in part: it must not run twice.
        return CallStart(result=INTERRUPTED, log_result=True, logged=True)
    return CallStart(logged=call.logged, answer=answer)


def recovery_plan(
    rt: Kernel,
    agent: Any,
    turn: Any,
    step: Any,
    *,
    signal: AbortSignal | None = None,
    tool_set: ResolvedToolSet | None = None,
    deps: Any = None,
) -> tuple[ToolBatchInput, tuple[CallStart, ...]]:
    """The batch that finishes step ``(turn, step)`` of ``agent``'s session
    log and where each of its calls starts (see the module docstring).
    Raises ``TypeError``/``ValueError`` naming the fix: an agent without a
    session, a turn or step that is not an int, a step the log has no call
    of."""
    if not isinstance(agent, Agent):
        raise InvalidTypeError(f"recover() takes the Agent whose step it finishes, not {type(agent).__qualname__}")
    session = agent.session
    if session is None:
        raise InvalidValueError(
            f"agent {agent.id!r} has no session to recover from: open its log with "
            "Agent(..., session=Session.open(path))"
        )
    for name, value in (("turn", turn), ("step", step)):
        if type(value) is not int:
            raise InvalidTypeError(f"recover() takes the {name} as an int, not {type(value).__qualname__}")
    if signal is not None and not isinstance(signal, AbortSignal):
        raise InvalidTypeError(f"signal must be an AbortSignal, not {type(signal).__qualname__}")
    logged = session.read_step(turn, step, agent.id)  # (its own step: agents may share the session)
    if not logged.calls:
        where = "" if session.path is None else f" ({session.path})"
        raise InvalidValueError(
            f"the session log of agent {agent.id!r}{where} has no call of turn {turn}, step {step}: "
            "nothing to recover (a step whose tool/batch never reached the log never started: run it "
            "with rt.tools.execute)"
        )
    calls = tuple(ToolCall(id=c.call_id, name=c.name, arguments=logged_arguments(c.arguments)) for c in logged.calls)
    batch = ToolBatchInput(
        calls=calls,
        signal=signal,
        max_parallel_tool_calls=logged.max_parallel_tool_calls,
        agent=agent,
        tool_set=tool_set,
        log=LogStep(turn=turn, step=step),
        deps=deps,
    )
    return batch, tuple(_start(rt, c, agent, tool_set) for c in logged.calls)
