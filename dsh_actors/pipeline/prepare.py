"""The first stage, :func:`prepare` (the batch's executor actor, in model
order): the pre-aborted check, the ``tools/pre-execute`` waterfall (async
listeners awaited on the batch's loop), approval routing for ``Ask`` (an
async approval service awaited there too), guards, and the recheck of
cancellation.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Final

from ..errors import (
    AbortError,
    ToolPolicyError,
    safe_str,
)
from ..execution import approve, recheck_approval
from ..model import (
    Allow,
    ApprovalRequest,
    Ask,
    Cancel,
    Deny,
    ToolExecutionFailure,
)
from ..signals import AbortSignal
from ..visibility import guard_verdict
from .body import await_on_loop
from .call import LOOK_UP, Call, in_context, lookup
from .results import (
    FORGOT_NEXT,
    failure,
    failure_from_exception,
    policy_failure,
)

if TYPE_CHECKING:  # pragma: no cover
    from ..kernel import Kernel


@in_context
def prepare(
    rt: Kernel,
    call: Call,
    registration: Any = LOOK_UP,
    before_hooks: Callable[[], object] | None = None,
    meanwhile: Callable[[Call, Callable[[], Any]], Any] | None = None,
) -> bool:
    """Run the pre-dispatch phases of ``call`` on the calling thread.

    Leaves the call settled without dispatch (its ``outcome``), deferred
    (its ``ask``: the approval service answered ``"deferred"``), or
    neither: allowed, to dispatch. A call with a given ``answer`` (a
    continued batch) skips the waterfall and the service and takes that
    answer, once; guards and the recheck run as usual (prepared again, it
    runs the waterfall, and an ``allowed-once`` stands as any approval
    does). A call prepared again
    (what it was prepared under changed) is not asked the same ``Ask``
    twice about the same tool definition: the approval it had stands. Pre-execute
    listeners, the approval service and guards run here; they may block
    (an approval waits for a person) but must observe ``execution.signal``.

    ``registration``: what the caller looked up for this call just now, on
    this thread (the executor classifies a call right before preparing it);
    by default the tool is looked up here. ``before_hooks``: called once,
    just before the pre-execute listeners (or a given answer) are run, if
    they are (the executor launches the bodies it started before them); if
    it answers true (one of those went back to be prepared again), nothing
    more runs: the call is left unsettled, for the caller to prepare again
    after that one, and ``prepare`` returns True (else False).
    ``meanwhile(call, ask)``: how the approval service is asked, if it is
    (the batch runs ``ask`` on a thread of its own and commits what
    settles while it waits: ``BatchRun._meanwhile``); by default it is
    asked on this thread.
    """
    if call.outcome is not None:
        return False  # settled as it began (bad arguments, routed to the executor)
    execution = call.execution
    if call.caller.aborted:
        call.abort_unstarted()
        return False
    again = call.phases_ran  # (prepared again: what it was prepared under changed)
    call.phases_ran = True
    registration = call.registration = lookup(rt, call) if registration is LOOK_UP else registration
    # The tool's requires_approval (on the hot path, read once: False for most tools).
    required = False if registration is None else registration.definition.requires_approval
    if again:
        recheck_approval(execution, _definition(call))  # (before any listener asks approval_stands)
    state = rt.state
    reason: str | None
    events = rt.events
    decision: Any
    if call.answer is not None:
        # A continued batch: the waterfall ran and asked in the batch that
        # deferred the call; the answer given now takes the service's place.
        if before_hooks is not None and before_hooks():
            call.phases_ran = again  # (no phase ran this time: see abort_unstarted)
            return True
        answer, ask = call.answer
        # Taken once: an allowed call prepared again (what it was prepared
        # under changed before its body started) meets its listeners again,
        # as any call does, and the approval stands only for the same
        # question about the same tool definition (the person was not asked
        # about a tool that replaced it meanwhile).
        call.answer = None
        try:
            answer = _answer(call, answer)
        except BaseException as exc:  # noqa: BLE001 - an answer that is not one
            _policy_raised(call, "approval", exc)
            return False
        if ask is not None and answer != "deferred":
            # A decision given at resume, published as the service's would be
            # (a logged decision a recovery applies again has no Ask: it was
            # published when it was given; a call left deferred got none).
            _published(rt, execution, ask, answer)
        decision = _decide(call, ask, answer)
        if type(decision) is Allow and ask is not None:
            approve(execution, ask, _definition(call))
    # Without a listener the waterfall is its default, Allow() (unless the
    # tool requires approval): skip it.
    elif required is not False or events.listeners("tools/pre-execute", execution.agent):
        if before_hooks is not None and before_hooks():
            call.phases_ran = again  # (no phase ran this time: see abort_unstarted)
            return True
        default = _allow if required is False else _approval_default(execution, required)
        try:
            decision = events.waterfall(
                "tools/pre-execute", default, execution, agent=execution.agent, awaiter=_awaiter(rt, call)
            )
        except BaseException as exc:  # noqa: BLE001 - a throwing policy skips post-execute
            _policy_raised(call, "tools/pre-execute", exc)
            return False
        if type(decision) is Ask:
            if execution.approval_stands(decision):
                # Asked and allowed already, for this tool, before the call
                # was prepared again (what it was prepared under changed):
                # not asked twice (the person said yes to this call).
                decision = _ALLOW
            else:
                try:
                    decision = _route_approval(rt, call, decision, meanwhile)
                except BaseException as exc:  # noqa: BLE001 - a throwing approval service, too
                    _policy_raised(call, "approval", exc)
                    return False
    else:
        decision = _ALLOW
    match decision:
        case Allow():
            pass
        case Deny(reason=reason, info=info):
            call.settle(failure(safe_str(reason), info), run_post=True, dispatched=False)
            return False
        case Cancel():
            call.abort_unstarted()
            return False
        case ToolExecutionFailure():  # from approval routing: a denial
            call.settle(decision, run_post=True, dispatched=False)
            return False
        case _Deferred(ask=ask):
            # The service answered "deferred": the call waits for a decision
            # (guards run when it is continued, with what holds then). What it
            # asked goes into a plain-JSON suspension: an Ask holds only text
            # (it refuses anything else as it is made).
            call.defer(ask)
            return False
        case _:
            problem = ToolPolicyError(
                "tools/pre-execute",
                f"a listener returned {type(decision).__qualname__}; expected Allow, Deny, Cancel or Ask"
                f"{FORGOT_NEXT if decision is None else ''}",
            )
            call.settle(failure_from_exception(problem), run_post=False, dispatched=False)
            return False
    # Guards run only after an allow, and nothing can turn their denial back.
    reason, raised = guard_verdict(state, execution)
    if reason is not None:
        call.settle(failure(reason, exception=raised), run_post=True, dispatched=False)
        return False
    caller: AbortSignal = call.caller  # the listeners may have aborted it meanwhile
    if caller.aborted:
        call.abort_unstarted()
    # Else allowed: neither settled nor deferred, the call is ready to dispatch.
    return False


def _awaiter(rt: Kernel, call: Call) -> Callable[[Any], Any]:
    """How prepare waits for an async listener or approval service: as a
    flight on the batch's loop, observing the call's signal."""
    execution = call.execution

    what = f'the async pre-execute listener or approval service of tool "{execution.name}"'

    def wait(coro: Any) -> Any:
        return await_on_loop(rt, coro, call.caller, call.loop, execution.name, execution.call_id, what=what)

    return wait


def _allow() -> Allow:
    return Allow()


_ALLOW = Allow()


#: The default's ``Ask``, one for every call (frozen; approvals compare
#: asks by equality): no reason of its own, so the denials say what is
#: missing (no service, no agent), and the service sees the tool and its
#: arguments.
_ASK: Final = Ask()


def _asked() -> Ask:
    return _ASK


def _approval_default(execution: Any, required: Any) -> Callable[[], Allow | Ask]:
    """The ``tools/pre-execute`` waterfall's default (what the last
    ``next()`` returns) for a call of a tool whose ``requires_approval`` is
    ``True`` or a predicate: ``Ask()``, with no reason of its own (the
    predicate answered ``True``), or ``Allow()`` (it answered
    ``False``). The predicate gets the frozen arguments each time the
    default is reached; if it raises or answers anything but a bool, the
    default raises :class:`ToolPolicyError` (``requires_approval: ...``,
    naming the tool), which fails the call as a raising listener does."""
    name = execution.name
    ask = _ASK
    if required is True:
        return _asked
    arguments = execution.arguments

    def default() -> Allow | Ask:
        try:
            answer = required(arguments)
        except BaseException as exc:  # noqa: BLE001 - the call fails, naming the predicate
            problem = ToolPolicyError(
                "requires_approval",
                f'the predicate of tool "{name}" raised {type(exc).__name__}: {safe_str(exc)}; '
                "it must return True or False for any arguments the tool accepts",
            )
            raise problem from exc
        if answer is True:
            return ask
        if answer is False:
            return _ALLOW
        raise ToolPolicyError(
            "requires_approval",
            f'the predicate of tool "{name}" returned {type(answer).__qualname__}; it must return True or False',
        )

    return default


def _route_approval(
    rt: Kernel, call: Call, ask: Ask, meanwhile: Callable[[Call, Callable[[], Any]], Any] | None = None
) -> Any:
    """Ask the approval service (through ``meanwhile``, if given: see
    :func:`prepare`); ``Allow()`` only for ``"allowed-once"``,
    ``_Deferred`` for ``"deferred"`` (the batch suspends the call), else a
    denial (a failure). A raising service, or an answer that is none of
    :data:`ANSWERS`, propagates (the caller makes it a ``POLICY_FAILED``
    failure). The request is published first (``tools/approval-request``,
    also when no one can be asked: no service, no agent), and a valid
    answer before it takes effect (``tools/approval``), both in the call's
    context (``prepare`` runs in it)."""
    execution = call.execution
    name = execution.name
    rt.events.emit("tools/approval-request", execution, ask, agent=execution.agent)  # (none listening: one dict test)
    service = rt.approvals.service
    if service is None:
        return failure(
            ask.reason
            if type(ask.reason) is str and ask.reason
            else f'tool "{name}" requires approval, but no approval service is installed'
        )
    if execution.agent is None:
        return failure(f'tool "{name}" requires approval, but the call has no agent to route it through')
    request = ApprovalRequest(
        agent=execution.agent,
        tool_name=name,
        call_id=execution.call_id,
        reason=ask.reason,
        display_reason=ask.display_reason,
        signal=call.caller,
        arguments=execution.arguments,
    )
    asking = partial(_asked_service, rt, call, service, request)
    if meanwhile is None:
        with rt.waiting():  # a person may take a while: other batches step meanwhile
            answer: Any = asking()
    else:
        answer = meanwhile(call, asking)
    answer = _answer(call, answer)
    _published(rt, execution, ask, answer)
    decision = _decide(call, ask, answer)
    if type(decision) is Allow:
        approve(execution, ask, _definition(call))
    return decision


def _asked_service(rt: Kernel, call: Call, service: Any, request: ApprovalRequest) -> Any:
    """The approval service's answer to ``request`` (an ``async def``
    service's awaited on the batch's loop: the calling thread waits)."""
    answer = service(request)
    if inspect.iscoroutine(answer):
        answer = _awaiter(rt, call)(answer)
    return answer


def _published(rt: Kernel, execution: Any, ask: Ask, answer: str) -> None:
    """``tools/approval``: ``answer`` was given to ``ask`` (the approval
    service's, or a resume's decision), before it takes effect."""
    events = rt.events
    if events.has_listeners("tools/approval"):
        events.emit("tools/approval", execution, ask, answer, agent=execution.agent)


def _definition(call: Call) -> Any:
    """The definition ``call`` runs (what a person approved), or None."""
    registration = call.registration
    return None if registration is None else registration.definition


class _Deferred:
    """The approval service answered ``"deferred"`` for ``ask``."""

    __slots__ = ("ask",)
    __match_args__ = ("ask",)

    def __init__(self, ask: Ask) -> None:
        self.ask = ask


#: The approval answers a person may give (``rt.tools.resume`` decisions).
DECISIONS = ("allowed-once", "rejected", "cancelled", "deferred")

#: The answers an approval service may give.
ANSWERS = ("allowed-once", "rejected", "cancelled", "unavailable", "deferred")


def _decide(call: Call, ask: Ask, answer: str) -> Any:
    """What an approval ``answer`` (one of :data:`ANSWERS`, as
    :func:`_answer` reads it) means for ``call``: ``Allow()`` only for
    ``"allowed-once"``, ``_Deferred`` for ``"deferred"``, else a denial (a
    failure)."""
    name = call.execution.name
    if answer == "allowed-once":
        return Allow()
    if answer == "rejected":
        return failure(f'the user rejected tool "{name}"')
    if answer == "cancelled":
        return failure(f'approval for tool "{name}" was cancelled')
    if answer == "unavailable":
        return failure(f'tool "{name}" requires approval, but no approval channel is available')
    return _Deferred(ask)


def _answer(call: Call, answer: Any) -> str:
    """``answer``, an approval service's (or a resume's), as the one of
    :data:`ANSWERS` it is, a plain ``str``: a ``str`` subclass (a
    ``StrEnum`` member, a ``(str, Enum)`` one) is read as the text it holds,
    ``"allowed-once"`` included; anything else raises ``ToolPolicyError``,
    naming its type (and the text a ``str`` holds), never its repr. The
    text is taken with ``str.__str__`` and compared as a plain ``str``: an
    answer's own ``__eq__``, ``__hash__`` or ``__str__`` never runs, so one
    that says yes to everything is no grant, and one that raises is named
    as a wrong answer, not taken for the service raising."""
    if not issubclass(type(answer), str):  # (not isinstance: a __class__ that says str is not a str)
        what = type(answer).__qualname__
    else:
        text = str.__str__(answer)
        if text in ANSWERS:
            return text
        shown = repr(text if len(text) <= 60 else text[:57] + "...")
        what = f"the string {shown}"
        if type(answer) is not str:
            what += f" (of type {type(answer).__qualname__})"
    raise ToolPolicyError(
        "approval",
        f'the approval service answered {what} for tool "{call.execution.name}"; expected one of '
        '"allowed-once", "rejected", "cancelled", "unavailable" or "deferred"',
    )


def _policy_raised(call: Call, where: str, exc: BaseException) -> None:
    """A pre-execute listener or the approval service raised. Cancelled
    while it ran (sync or async): the body never started, so
    ``ABORTED_BEFORE_DISPATCH``, as when a listener returns and the recheck
    finds the abort. Anything else is ``POLICY_FAILED`` (the tool did
    nothing wrong), and post-execute is skipped."""
    now: AbortSignal = call.caller  # (a listener may have aborted it meanwhile)
    if isinstance(exc, AbortError) and now.aborted:
        call.abort_unstarted()
    else:
        call.settle(policy_failure(where, exc), run_post=False, dispatched=False)
