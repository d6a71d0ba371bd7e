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

A call that started and has no result may have run nested logged batches
in its body (``rt.tools.execute`` with ``log=LogStep(...)`` from the body:
their ``tool/batch`` names the call as its ``parent``, and so on down).
Their run is over with the crash: their calls without a result are closed
first (``Session.close_steps``, as ``repair`` closes them), and the call is
not run again, idempotent or not, when a call of a tool that is not
idempotent started in them (its body would run that call again), tools
looked up as the recovering agent sees them: one it cannot call counts as
not idempotent, unless the step is its own and says it could call it then
(below). Another agent's step (a sub-agent's) says what that agent could
call, which the recovering one need not see: such a tool stops the call.

A call that would run (started from the start, run again, or run from an
``"allowed-once"`` in the log) must find its tool: when the step's
``tool/batch`` says the agent could call it then (its ``unknown`` key:
:func:`unknown_calls` as the batch was logged) and the recovering runtime
does not offer it, :func:`refuse_missing_tools` refuses the recovery before
anything is written (the call would fail ``UNKNOWN_TOOL`` for good). So does
a started call whose own tool decides whether it runs again (its nested
steps started no call that stops it) and is missing: its ``idempotent`` is
the registration's, which the runtime lacks, and ``INTERRUPTED`` for good
would settle a call the same tools would run again; and so does one whose
own tool would let it run again while its nested steps of its own agent
started a call of a tool the runtime lacks that was known as their step
was logged (that tool's ``idempotent`` decides too). A call of a tool that
was unknown then settles ``UNKNOWN_TOOL`` as it would have. A resume is
refused alike (a logged one by its log's ``unknown``, an unlogged one by its
suspension's).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias

from ..errors import InvalidStateError, InvalidTypeError, InvalidValueError, safe_str
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
from ..session import (
    BATCH,
    CALL,
    INTERRUPTED,
    START,
    LoggedCall,
    LoggedResult,
    Session,
    StepKey,
    same_step,
    step_key,
)
from ..signals import AbortSignal
from ..visibility import callable_view, executable, executable_in, select_executor
from .messages import BatchPolicy, CallStart

if TYPE_CHECKING:  # pragma: no cover
    from ..kernel import Kernel
    from ..toolset import ResolvedToolSet
    from ..visibility import Registration, RegistryState

__all__ = [
    "RecoveryPlan",
    "close_nested",
    "logged_arguments",
    "recovered_result",
    "recovery_plan",
    "recovery_session",
    "refuse_missing_tools",
    "unknown_calls",
]

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


def _idempotent(rt: Kernel, name: str, agent: Agent | None, tool_set: ResolvedToolSet | None) -> bool:
    registration = executable(rt.state, name, agent, tool_set)
    return registration is not None and registration.definition.idempotent is True


def _start(
    rt: Kernel, call: LoggedCall, agent: Agent, tool_set: ResolvedToolSet | None, nested_idempotent: bool
) -> CallStart:
    """Where logged ``call`` starts; ``nested_idempotent``: whether every
    tool its nested steps started a call of is idempotent (True: none)."""
    if call.result is not None:
        return CallStart(result=recovered_result(call.result), logged=True)
    answer = call.decision if call.awaiting is None and call.decision in _FINAL_DECISIONS else None
    if call.started and not (nested_idempotent and _idempotent(rt, call.name, agent, tool_set)):
        # Its body may have run, whole or in part (a nested batch's call of
        # a tool that is not idempotent included): it must not run twice.
        return CallStart(result=INTERRUPTED, log_result=True, logged=True)
    return CallStart(logged=call.logged, answer=answer)


#: A call that started in a nested step: its step, its id, its tool's name,
#: and whether the agent could call that tool as its step was logged
#: (``LoggedCall.known``: None, the log does not say).
NestedCall: TypeAlias = tuple[StepKey, str, str, bool | None]


def _nested_steps(
    session: Session, here: StepKey, open_ids: Collection[str]
) -> dict[str, tuple[set[StepKey], list[NestedCall]]]:
    """For each call of ``open_ids`` (the started calls without a result of
    step ``here``): the logged steps its body ran, directly or through
    their calls' bodies in turn (each such ``tool/batch`` names its
    ``parent``: ``Session.child_steps``), and the calls that started in
    them (each step's events read once: ``Session.step_events``)."""
    ran_in: dict[StepKey, list[tuple[str, str | None, bool | None]]] = {}
    nested: dict[str, tuple[set[StepKey], list[NestedCall]]] = {}
    for call_id in open_ids:
        steps: set[StepKey] = set()
        ran: list[NestedCall] = []
        todo = [(here, call_id)]
        while todo:
            key, enclosing = todo.pop()
            for child in session.child_steps(key[0], key[1], key[2], enclosing):
                if child in steps or same_step(child, here):
                    continue
                steps.add(child)
                started = ran_in.get(child)
                if started is None:
                    started = ran_in[child] = _started_in(session.step_events(child[0], child[1], child[2]), child)
                for inner, name, known in started:
                    if name is not None:
                        ran.append((child, inner, name, known))
                    todo.append((child, inner))
        nested[call_id] = (steps, ran)
    return nested


def _started_in(events: list[dict[str, Any]], here: StepKey) -> list[tuple[str, str | None, bool | None]]:
    """The calls of step ``here`` (exactly: its agent's) in ``events`` that
    have a ``tool/start``, each with its tool's name (its ``tool/batch``'s
    or its ``tool/call``'s, the latest; None: neither) and whether the
    agent could call it as the step was logged (its latest ``tool/batch``
    that lists it: not in its ``unknown``; None when it does not say)."""
    names: dict[str, str] = {}
    known: dict[str, bool | None] = {}
    started: dict[str, None] = {}
    for event in events:
        if step_key(event) != here:
            continue
        kind = event.get("type")
        if kind == BATCH:
            unknown = event.get("unknown")
            ids = frozenset(unknown) if type(unknown) is list and all(type(i) is str for i in unknown) else None
            for logged in event.get("calls") or ():
                if type(logged) is dict and type(logged.get("call_id")) is str and type(logged.get("name")) is str:
                    names[logged["call_id"]] = logged["name"]
                    known[logged["call_id"]] = None if ids is None else logged["call_id"] not in ids
        elif kind == CALL and type(event.get("call_id")) is str and type(event.get("name")) is str:
            names[event["call_id"]] = event["name"]
        elif kind == START and type(event.get("call_id")) is str:
            started[event["call_id"]] = None
    return [(call_id, names.get(call_id), known.get(call_id)) for call_id in started]


class RecoveryPlan(NamedTuple):
    """What :func:`recovery_plan` found: the batch that finishes the step,
    where each of its calls starts, the logged steps its interrupted calls
    ran (for :func:`close_nested`), whether the agent could call each
    call's tool when the step was logged (``LoggedCall.known``), and the
    interrupted calls whose tools decide whether they run again
    (``rerun``: nothing their nested steps started stops them; each with
    the calls of its nested steps of the recovering agent whose tool is
    not registered here and was known as their step was logged: their
    ``idempotent`` decides too;
    both for :func:`refuse_missing_tools`)."""

    batch: ToolBatchInput
    starts: tuple[CallStart, ...]
    nested: frozenset[StepKey]
    known: tuple[bool | None, ...]
    rerun: Mapping[str, tuple[NestedCall, ...]] = MappingProxyType({})


def unknown_calls(
    state: RegistryState,
    calls: Iterable[ToolCall],
    agent: Agent | None,
    tool_set: ResolvedToolSet | None,
    policy: BatchPolicy | None,
) -> list[str]:
    """The ids of ``calls`` that run no tool, so that they fail
    ``UNKNOWN_TOOL``, routed as a batch routes them
    (:meth:`BatchPolicy.route`: the executor's own tool, PTC's ``run_code``,
    runs; a call its direct-call hint answers runs nothing; else the tool
    runs if it is executable in ``state``: registered, visible to the agent
    and, if conditional, admitted by ``tool_set``). ``policy``: the
    executor's (None: an executor without one). What a logged batch records
    (its ``tool/batch``'s ``unknown``, written as it opens) and what
    :func:`refuse_missing_tools` checks. The registry is read once, for
    all of them."""
    unknown = []
    view: Mapping[str, Registration] | None = None
    for c in calls:
        override, hint = (None, None) if policy is None else policy.route(c.name)
        if override is not None:
            continue
        if hint is None:
            if view is None:
                view = callable_view(state, agent, tool_set)
            if executable_in(view, c.name, tool_set) is not None:
                continue
        unknown.append(c.id)
    return unknown


#: The answers a continued call runs its tool from (None: prepared from the
#: start); "rejected", "cancelled" and "deferred" end or hold it unrun.
_RUNS = (None, "allowed-once")


def refuse_missing_tools(
    rt: Kernel,
    batch: ToolBatchInput,
    starts: Sequence[CallStart],
    known: Sequence[bool | None],
    verb: str,
    what: str,
    rerun: Mapping[str, Sequence[NestedCall]] = MappingProxyType({}),
) -> None:
    """Refuse to continue ``batch``, a step read back (a recovery, a resume),
    when a call of it that would run (``starts``: no given result, no
    answer that ends it unrun; or one of ``rerun``, started calls that run
    again if their tool, registered now, is idempotent: a missing one
    cannot say) names a tool the agent could call when the step was logged,
    or when the batch suspended (``known``, per call: ``LoggedCall.known``,
    or an unlogged suspension's; None, a log or suspension that does not
    say, runs as it would) and cannot call in this runtime: it would fail
    ``UNKNOWN_TOOL`` for good, a lie about a call the model made right (or,
    started, end ``INTERRUPTED`` where the same tools would run it again).
    So does a call of ``rerun`` whose own tool would let it run again
    (idempotent, or missing as above) when a call its nested steps started
    (``rerun``'s: in steps of its own agent, known then) is of such a tool: its ``idempotent`` decides
    too. Raises ``InvalidStateError`` naming the calls, their tools and the
    fix (``cannot <verb> <what>: ...``). Reads only: called before anything
    is written or claimed."""
    runs = [
        c
        for c, start, was in zip(batch.calls, starts, known, strict=True)
        if was and ((start.result is None and start.answer in _RUNS) or c.id in rerun)
    ]
    if not runs and not any(rerun.values()):
        return
    agent, state = batch.agent, rt.state
    policy = _policy(state, agent)  # (what the recovered batch would run with)
    missing = set(unknown_calls(state, runs, agent, batch.tool_set, policy))
    # Per started call whose own tool would let it run again: the calls of
    # its nested steps whose tool this runtime lacks.
    lacking: dict[str, list[NestedCall]] = {}
    for c in batch.calls:
        inner = rerun.get(c.id)
        if inner and (c.id in missing or _idempotent(rt, c.name, agent, batch.tool_set)):
            absent = unknown_calls(state, (ToolCall(i, n, {}) for _, i, n, _ in inner), agent, batch.tool_set, policy)
            found = [n for n in inner if n[1] in absent]
            if found:
                lacking[c.id] = found
    if not missing and not lacking:
        return
    calls = [c for c in runs if c.id in missing]
    names = list(dict.fromkeys([*(c.name for c in calls), *(n[2] for found in lacking.values() for n in found)]))
    one = len(names) == 1
    parts = []
    if calls:
        own = list(dict.fromkeys(c.name for c in calls))
        again = [c.id for c in calls if c.id in rerun]
        started = ""
        if again:
            which = "it" if len(calls) == 1 else ", ".join(_quoted(i) for i in again)
            started = (
                f" ({which} started: it runs again if its tool is idempotent, else ends INTERRUPTED)"
                if len(again) == 1
                else f" ({which} started: they run again if their tools are idempotent, else end INTERRUPTED)"
            )
        parts.append(
            f"{'call' if len(calls) == 1 else 'calls'} {', '.join(_quoted(c.id) for c in calls)} would run "
            f"{'tool' if len(own) == 1 else 'tools'} {', '.join(_quoted(n) for n in own)}{started}"
        )
    for call_id, found in lacking.items():
        tools = list(dict.fromkeys(n[2] for n in found))
        where = ", ".join(f"{_quoted(i)} in {_step_shown(at, agent)}" for at, i, _, _ in found)
        parts.append(
            f"call {_quoted(call_id)} started and its body ran {'tool' if len(tools) == 1 else 'tools'} "
            f"{', '.join(_quoted(n) for n in tools)} in a nested step ({where}: {_quoted(call_id)} runs again if "
            "every tool it ran is idempotent, else ends INTERRUPTED)"
        )
    when = (
        "the batch suspended" if batch.log is None else "their steps were logged" if lacking else "the step was logged"
    )
    raise InvalidStateError(
        f"cannot {verb} {what}: {'; '.join(parts)}, which the agent could call when {when} and "
        "cannot call in this runtime (not registered, not visible to the agent, or conditional and not "
        f"admitted by the tool_set passed): register {'it' if one else 'them'} (rt.tools.register, or mount "
        f"the MCP server or set the executor that provides {'it' if one else 'them'}; lift the restriction that "
        f"hides {'it' if one else 'them'} from the agent; pass the step's tool_set= for a conditional one) and "
        f"{verb} again (nothing was run or written)"
    )


def _policy(state: RegistryState, agent: Agent | None) -> BatchPolicy | None:
    """The ``BatchPolicy`` a batch of ``agent`` would run with (None: its
    executor has none)."""
    policy_of = getattr(select_executor(state, agent), "batch_policy", None)
    return policy_of() if callable(policy_of) else None


def _step_shown(key: StepKey, agent: Agent | None) -> str:
    shown = f"step (turn {key[0]}, step {key[1]})"
    if key[2] is not None and (agent is None or key[2] != agent.id):
        shown += f" of agent {_quoted(key[2])}"
    return shown


def _quoted(text: str) -> str:
    return f'"{safe_str(text)}"'


def close_nested(rt: Kernel, plan: RecoveryPlan) -> None:
    """Close the calls without a result of ``plan.nested`` (the logged
    steps the crash left open in the step's interrupted calls), holding
    each step as a batch of it would: one that a batch of this runtime
    runs now is not closed under it (``InvalidStateError``, before
    anything is written). Called once nothing else refuses the recovery."""
    steps = plan.nested
    if not steps:
        return
    batch = plan.batch
    agent, log = batch.agent, batch.log
    assert agent is not None and log is not None
    turn, step, session = log.turn, log.step, agent.session
    assert session is not None  # (recovery_plan refuses an agent without one)
    held: list[tuple[int, int, str]] = []
    try:
        for key in sorted(steps, key=lambda k: (k[0], k[1], k[2] or "")):
            owner = agent.id if key[2] is None else key[2]
            try:
                rt.claims.claim_step(session, key[0], key[1], owner)
            except InvalidStateError:
                raise InvalidStateError(
                    f'step (turn {turn}, step {step}) of agent "{agent.id}" ran step (turn {key[0]}, step '
                    f'{key[1]}) of agent "{owner}" in a call the crash interrupted, and a batch of this runtime '
                    "is running, resuming or recovering that step now: wait for it to finish, then recover this step"
                ) from None
            held.append((key[0], key[1], owner))
        session.close_steps(steps)
    finally:
        for t, s_, owner in held:
            rt.claims.release_step(session, t, s_, owner)


def recovery_session(agent: Any, turn: Any, step: Any, signal: Any) -> Session:
    """The session a recovery of step ``(turn, step)`` of ``agent`` reads,
    once its arguments are checked: asked before anything is claimed or
    held, so a wrong argument is named whatever holds the log. Raises
    ``TypeError``/``ValueError`` naming the fix: an agent without a
    session, a turn or step that is not an int, a signal that is not an
    ``AbortSignal``."""
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
    return session


def recovery_plan(
    rt: Kernel,
    agent: Any,
    turn: Any,
    step: Any,
    *,
    signal: AbortSignal | None = None,
    tool_set: ResolvedToolSet | None = None,
    deps: Any = None,
) -> RecoveryPlan:
    """The batch that finishes step ``(turn, step)`` of ``agent``'s session
    log, where each of its calls starts, and the logged steps nested in its
    interrupted calls (see the module docstring; :func:`close_nested`
    closes those). Reads the log only. Raises ``TypeError``/``ValueError``
    naming the fix: what :func:`recovery_session` refuses, a step the log
    has no call of."""
    session = recovery_session(agent, turn, step, signal)
    logged = session.read_step(turn, step, agent.id)  # (its own step: agents may share the session)
    if not logged.calls:
        where = "" if session.path is None else f" ({session.path})"
        raise InvalidValueError(
            f"the session log of agent {agent.id!r}{where} has no call of turn {turn}, step {step}: "
            "nothing to recover (a step whose tool/batch never reached the log never started: run it "
            "with rt.tools.execute)"
        )
    interrupted = [c.call_id for c in logged.calls if c.started and c.result is None]
    nested: dict[str, tuple[set[StepKey], list[NestedCall]]] = {}
    if interrupted:
        nested = _nested_steps(session, (turn, step, agent.id), interrupted)
    steps: frozenset[StepKey] = frozenset().union(*(found for found, _ in nested.values()))
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
    # Per interrupted call, the calls its nested steps started: a tool that
    # is registered and not idempotent, or missing and not known then (the
    # log does not say), stops it running again whatever its own tool;
    # else its own tool decides, with the missing ones known then. Only in
    # the agent's own steps: another agent's (a sub-agent's) "known" says
    # what that agent could call, which this one need not see (nor can a
    # registration here make it see it): missing, it stops the call too.
    rerun: dict[str, tuple[NestedCall, ...]] = {}
    for call_id, (_, started) in nested.items():
        undecided: list[NestedCall] = []
        for inner in started:
            registration = executable(rt.state, inner[2], agent, tool_set)
            if registration is None and inner[3] is True and inner[0][2] == agent.id:
                undecided.append(inner)
            elif registration is None or registration.definition.idempotent is not True:
                break
        else:
            rerun[call_id] = tuple(undecided)
    # (True: its nested steps let it run again whatever they started; its own tool decides.)
    nested_idempotent = {call_id: rerun.get(call_id) == () for call_id in nested}
    starts = tuple(
        replace(_start(rt, c, agent, tool_set, nested_idempotent.get(c.call_id, True)), known=c.known)
        for c in logged.calls
    )
    return RecoveryPlan(batch, starts, steps, tuple(c.known for c in logged.calls), MappingProxyType(rerun))
