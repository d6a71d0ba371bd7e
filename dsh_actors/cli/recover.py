"""``dsh-actors recover --log FILE --tools MODULE``: finish a batch a crash
interrupted.

A batch ``run --log FILE`` ran whose process ended before the batch did
(killed: ``SIGKILL``, the machine stopped) leaves its step unfinished in
the log: calls without a result, some of which may have started. ``recover``
opens the log (``Session.open``), finds the unfinished steps (a call of
the step's ``tool/batch`` or a ``tool/call`` of it without a
``tool/result``) and finishes one with ``rt.tools.recover``
(``docs/reference.md`` section 10): a call with a logged result keeps it,
one that never started runs, one that started runs again only if its tool
is ``idempotent``, else ends ``INTERRUPTED``; the log then holds one result
per call. One unfinished step is taken; with several, each is listed and
``--turn T --step S`` (and ``--agent ID``, when agents share the log)
names one; ``--agent`` also narrows the search to that agent's steps.

A batch that suspended on a deferred approval is unfinished too: recovering
it asks for its deferred calls' approvals again (``--approve``, as in
``run``), and its suspension can no longer be resumed; ``dsh-actors
resume`` with its ``run --json`` document keeps the decisions instead.
The log tells a suspended step from one a crash cut right after an
approval request: a batch that suspends logs its ``tool/suspend``. So
when a call of the step recovered waits for a deferred approval (its
``tool/approval-request`` has no decision) under a suspension the log
holds the ``tool/suspend`` of, one note on stderr after the results says
that the step had suspended, that this recovery asked for the approval
again, and that ``dsh-actors resume SUSPENSION.json --log FILE``, given
the ``run --json`` document that printed the suspension, finishes such a
step with the decisions already asked for (:func:`_suspended_note`). A
step a crash cut before it suspended (or logged before that event
existed) has no note: there was no suspension to resume. The output and
exit status are the same either way.

The tools, the executor, ``--no-timeout``, ``--approve``, the output
(cards of the step's calls drawn from the log, or ``--json``, whose
``shape`` is ``dsh``: the log does not keep the batch file's) and Ctrl-C
are ``run``'s (:func:`.run.run_batch`, one implementation). Exit status:
0 when the step was finished (whatever its calls returned), and when the
log has nothing to recover (one line on stderr says so, nothing on
stdout); 1 when it could not be (no such log, several unfinished steps
and none named, a step the log does not have, a tool the step needs
missing, the log held by a process still running it: one line naming the
fix, nothing runs); 2, 74 and 130 as for every command.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable
from concurrent.futures import Future

from ..errors import DshError, printable
from ..model import Agent, ToolBatchResult
from ..runtime import ToolRuntime
from ..session import BATCH, CALL, SUSPEND, LoggedCall, Session, StepKey, agent_matches, step_key
from ..signals import AbortSignal
from .loading import CliError, one_line
from .run import in_thread, open_written_log, run_batch

__all__ = ["recover_command", "unfinished_steps"]


def unfinished_steps(session: Session, agent: str | None = None) -> list[tuple[StepKey, tuple[LoggedCall, ...]]]:
    """Each step of the log (of ``agent``'s steps, when given) with a call
    that has no result, in log order, with its calls
    (``session.step_calls``: the step's latest run)."""
    keys: dict[StepKey, None] = {}
    for event in session.events():
        if event.get("type") in (BATCH, CALL):
            key = step_key(event)
            if key is not None and agent_matches(key[2], agent):
                keys.setdefault(key, None)
    found = []
    for key in keys:
        calls = session.step_calls(key[0], key[1], key[2])
        if any(call.result is None for call in calls):
            found.append((key, calls))
    return found


def _quoted(agent: str) -> str:
    """``'cli'``: an agent id as messages show it, its control and format
    characters escaped (:func:`~dsh_actors.printable`), no Python repr."""
    return f"'{printable(agent)}'"


def _step_name(key: StepKey) -> str:
    """``turn 1, step 1 of agent 'cli'`` (no agent when the log names none)."""
    agent = "" if key[2] is None else f" of agent {_quoted(key[2])}"
    return f"turn {key[0]}, step {key[1]}{agent}"


def _listed(steps: list[tuple[StepKey, tuple[LoggedCall, ...]]]) -> str:
    """The steps, each with how many of its calls have no result."""
    shown = []
    for key, calls in steps:
        open_calls = sum(call.result is None for call in calls)
        shown.append(f"{_step_name(key)} ({open_calls} of {len(calls)} calls without a result)")
    return "; ".join(shown)


def _suspended(session: Session, calls: tuple[LoggedCall, ...]) -> str | None:
    """The suspension a call of ``calls`` waits under (its
    ``tool/approval-request`` has no decision) when the log holds its
    ``tool/suspend`` (the step's batch suspended); else None (no call
    waits, or a crash cut the step before it suspended)."""
    awaited = {call.awaiting for call in calls if call.awaiting is not None}
    if not awaited:
        return None
    found = (event.get("suspension") for event in session.events() if event.get("type") == SUSPEND)
    return next((suspension for suspension in found if suspension in awaited), None)


def _suspended_note(key: StepKey, suspension: str, path: str) -> str:
    """The line for stderr after the recovery of step ``key``, which had
    suspended as ``suspension``: this recovery asked for its approvals
    again, and ``dsh-actors resume`` with the log ``path`` would have
    finished it with the decisions already asked for."""
    return (
        f"dsh-actors recover: note: {_step_name(key)} had suspended (suspension {printable(suspension)}), "
        "waiting for a deferred approval, and this recovery asked for it again; to finish a suspended step with "
        "the decisions already asked for, resume it instead: dsh-actors resume SUSPENSION.json --log "
        f"{printable(shlex.quote(path))}, SUSPENSION.json being the document run --json printed for it\n"
    )


def _chosen(
    args: argparse.Namespace, path: str, steps: list[tuple[StepKey, tuple[LoggedCall, ...]]], session: Session
) -> tuple[StepKey, tuple[LoggedCall, ...]] | None:
    """The unfinished step to recover (None: there is none, or the one
    ``--turn``/``--step`` name is complete); a CliError when they name
    none of the log's, or several steps are unfinished and none is named."""
    if args.turn is None and args.step is None:
        if len(steps) == 1:
            return steps[0]
        if not steps:
            return None
        agents = {key[2] for key, _ in steps}
        agent = " --agent ID" if len(agents) > 1 else ""
        raise CliError(
            f"--log {path}: {len(steps)} steps are unfinished: {_listed(steps)}; name the one to recover with "
            f"--turn T --step S{agent}"
        )
    if args.turn is None or args.step is None:
        raise CliError("--turn and --step name a step together: give both (or neither, for the one unfinished step)")
    named = [(key, calls) for key, calls in steps if key[0] == args.turn and key[1] == args.step]
    if len(named) == 1:
        return named[0]
    if named:
        raise CliError(
            f"--log {path}: turn {args.turn}, step {args.step} is unfinished for several agents: "
            f"{_listed(named)}; name one with --agent ID"
        )
    if session.step_calls(args.turn, args.step, args.agent):
        return None  # the step is complete
    where = f"turn {args.turn}, step {args.step}" + ("" if args.agent is None else f" of agent {_quoted(args.agent)}")
    unfinished = f"its unfinished steps: {_listed(steps)}" if steps else "it has no unfinished step"
    raise CliError(f"--log {path}: the log has no call of {where} ({unfinished}); name a step the log holds")


def recover_command(args: argparse.Namespace) -> int:
    """Recover the log's unfinished step; see the module docstring for the
    exit status."""
    path = args.log
    session = open_written_log(path, "the interrupted batch's")
    try:
        try:
            steps = unfinished_steps(session, args.agent)
            chosen = _chosen(args, path, steps, session)
            # (Read before the recovery logs anything.)
            suspension = None if chosen is None else _suspended(session, chosen[1])
        except DshError as err:  # (a malformed event of a step: its line is named)
            raise CliError(f"--log {path}: {one_line(err)}") from None
    except BaseException:
        session.close()
        raise
    if chosen is None:
        session.close()
        which = "" if args.turn is None else f"turn {args.turn}, step {args.step} of "
        whose = "" if args.agent is None else f" (agent {_quoted(args.agent)})"
        sys.stderr.write(
            f"dsh-actors recover: nothing to recover: every call of {which}the log {path}{whose} has its result "
            f"(dsh-actors replay {path} shows them)\n"
        )
        return 0
    key, calls = chosen
    turn, step, agent_id = key
    agent = Agent(agent_id if agent_id is not None else args.agent or "cli", session=session)

    def prepare(rt: ToolRuntime) -> Callable[[AbortSignal], Future[ToolBatchResult]]:
        return lambda abort: in_thread(lambda: rt.tools.recover(agent, turn, step, signal=abort), "recover")

    names = {call.call_id: call.name for call in calls}
    status = run_batch(args, session, prepare, names, "dsh", keep_log=True, failed="cannot recover the step", step=key)
    if suspension is not None:
        sys.stderr.write(_suspended_note(key, suspension, path))  # (after the results, as run's notes)
    return status
