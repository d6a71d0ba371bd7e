"""``dsh-actors resume SUSPENSION.json --log FILE --tools MODULE``: finish a
batch ``run`` suspended.

A batch whose approval service answered ``"deferred"`` ends suspended:
``run --json`` prints its ``suspension`` (``rt.tools.resume``'s input,
``docs/reference.md`` section 6). ``resume`` reads it back, from the
whole ``run --json`` document or the ``suspension`` value alone (``-``:
standard input), decides its deferred calls and runs the batch on with
``rt.tools.resume``: the settled calls keep their results, the deferred
ones go on from their answers, the ones behind them run.

The decisions: ``--decide CALL_ID=ANSWER`` (repeatable), ``ANSWER``
``yes`` or ``allowed-once`` (run it), ``no`` or ``rejected``,
``cancelled``, or ``deferred`` (it waits again); each deferred call
without one is answered by ``--approve`` (``yes``, ``no``, or ``prompt``:
the terminal prompt ``run`` asks with, shown the suspension's reason and
the call's arguments), by that prompt when stdin and stderr are terminals,
else it stays deferred (and the batch suspends again, with a new
suspension). ``--approve`` also answers the calls that ask for approval
as they run, as in ``run``.

The batch's log: a suspended batch of ``run`` is logged (its step, turn
1, step 1, in the session log ``run --log FILE`` wrote), and the log is
the authority a resume checks the suspension against
(``Session.open``): ``--log`` names that file. A batch ``run`` ran
without ``--log`` kept its log in memory and cannot be resumed. Once
resumed, the log records the decisions, so the same suspension is
refused afterwards, from any process.

The tools, the executor, ``--no-timeout``, the output (cards drawn from
the log, or ``--json``, whose document has a new ``suspension`` when the
batch suspended again), Ctrl-C and the exit statuses are ``run``'s
(:func:`.run.run_batch`, one implementation): 0 when the batch ran, 1
when it could not (a wrong suspension file, a decision for a call that
does not wait, a suspension resumed already: one line naming the fix, and
nothing runs), 2, 74 and 130 as for every command.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any, Final

from ..errors import safe_str, shown_value
from ..model import Agent, ApprovalRequest, ToolBatchResult
from ..pipeline.stages import DECISIONS
from ..providers import _common
from ..runtime import ToolRuntime
from ..scheduling.suspension import DEFERRED, FORMAT
from ..session import Session
from ..signals import AbortController, AbortSignal
from .batchfile import read_json_file
from .loading import CliError
from .run import APPROVE_ANSWERS, approver, check_prompt_input, in_thread, open_written_log, run_batch

__all__ = ["DECIDE_ANSWERS", "decision", "read_suspension", "resume_command"]

DECIDE_ANSWERS: Final = {**APPROVE_ANSWERS, **{answer: answer for answer in DECISIONS}}
"""What ``--decide CALL_ID=ANSWER`` accepts, and the decision each is:
``run --approve``'s ``yes`` and ``no``, and ``rt.tools.resume``'s own."""


def decision(text: str) -> tuple[str, str]:
    """``--decide CALL_ID=ANSWER`` as ``(call id, decision)`` (an
    ``argparse`` type: a bad one is a bad command line)."""
    call_id, equals, answer = text.rpartition("=")  # (an answer has no '=': an id may)
    decided = DECIDE_ANSWERS.get(answer)
    if not equals or not call_id or decided is None:
        raise argparse.ArgumentTypeError(
            f"expected CALL_ID=ANSWER, ANSWER one of {', '.join(DECIDE_ANSWERS)}; got {safe_str(repr(text))}"
        )
    return call_id, decided


def read_suspension(path: str) -> tuple[Mapping[str, Any], str, str]:
    """The suspension in the file at ``path`` (``-``: standard input): the
    ``suspension`` of a ``run --json`` document, or a suspension value
    itself; the shape the ``--json`` document states (the run document's,
    else ``dsh``: a suspension's calls are in ours); and the file's name
    for messages."""
    value, source = read_json_file(
        path, what="suspension file", holds="a suspension", root="suspension", error=CliError
    )
    fix = (
        "give the JSON document 'dsh-actors run --json' (or 'resume --json') printed for a batch that suspended, "
        'or its "suspension" value, unchanged'
    )
    if isinstance(value, Mapping) and value.get("format") == FORMAT:
        return value, "dsh", source
    if isinstance(value, Mapping) and "suspension" in value and "results" in value:
        suspension = value["suspension"]
        if suspension is None:
            raise CliError(
                f'{source}: its batch did not suspend ("suspension" is null): nothing waits for a decision; {fix}'
            )
        if isinstance(suspension, Mapping) and suspension.get("format") == FORMAT:
            shape = value.get("shape")
            return suspension, shape if type(shape) is str else "dsh", source
    raise CliError(f"{source}: not a suspension; {fix}")


def _shown(value: object) -> str:
    """A value read from the suspension file, as a message shows it: an int
    as itself (:func:`shown_value`: a huge one by its size), anything else
    as ``providers._common.shown`` does (a string quoted, escaped and cut
    to 60 characters; else what it is: ``an object``)."""
    return shown_value(value) if type(value) is int else _common.shown(value)


def _calls(suspension: Mapping[str, Any], source: str) -> list[Mapping[str, Any]]:
    """The suspension's calls, each with a str ``id`` and ``name`` (what
    the command reads of them before ``rt.tools.resume`` checks the rest)."""
    calls = suspension.get("calls")
    if (
        not isinstance(calls, list)
        or not calls
        or not all(isinstance(c, Mapping) and type(c.get("id")) is str and type(c.get("name")) is str for c in calls)
    ):
        raise CliError(
            f'{source}: not a suspension: "calls" is not a list of calls with an "id" and a "name"; give the '
            "suspension dsh-actors run printed, unchanged"
        )
    return calls


def _given_decisions(args: argparse.Namespace, calls: list[Mapping[str, Any]], deferred: list[str]) -> dict[str, str]:
    """The ``--decide`` decisions, each of a call that awaits one."""
    decided: dict[str, str] = {}
    states = {call["id"]: call.get("state") for call in calls}
    waiting = ", ".join(safe_str(call_id) for call_id in deferred) or "none"
    for call_id, answer in args.decide:
        shown = safe_str(repr(call_id))
        if call_id not in deferred:
            what = (
                "is no call of this suspension"
                if call_id not in states
                else f"does not await an approval (it is {_shown(states[call_id])})"
            )
            raise CliError(f"--decide {shown}: that {what}; decide the calls that do: {waiting}")
        if call_id in decided:
            raise CliError(f"--decide {shown}: given twice; decide each call once")
        decided[call_id] = answer
    return decided


def _open_log(path: str | None, suspension: Mapping[str, Any], source: str) -> Session:
    """The log the suspended batch wrote (``Session.open``): the authority
    ``rt.tools.resume`` checks the suspension against, and where the
    resumed batch goes on."""
    step = suspension.get("log")
    if step is None:
        raise CliError(
            f'{source}: its batch was not logged ("log" is null): this command resumes a logged batch, as '
            "dsh-actors run --log FILE suspends one; resume this one with rt.tools.resume in the program that ran it"
        )
    where = (
        f"turn {_shown(step.get('turn'))}, step {_shown(step.get('step'))}" if isinstance(step, Mapping) else "its step"
    )
    if path is None:
        raise CliError(
            f"the suspended batch is logged ({where}): name its log with --log FILE, the file its "
            "'dsh-actors run --log FILE' wrote (a batch run without --log kept its log in memory, so it cannot be "
            "resumed: run it again with --log FILE)"
        )
    return open_written_log(path, "the suspended batch's")


def _agent_ids(args: argparse.Namespace, suspension: Mapping[str, Any], source: str) -> list[str]:
    """The ids of the agent whose batch it was, from the root, as the
    suspension records them; ``--agent``, when given, must be it."""
    ids = suspension.get("agent")
    if not isinstance(ids, list) or not ids or not all(type(i) is str and i for i in ids):
        raise CliError(
            f'{source}: not a suspension: "agent" is not a list of agent ids; give the suspension '
            "dsh-actors run printed, unchanged"
        )
    if args.agent is not None and [args.agent] != ids:
        raise CliError(
            f"--agent {args.agent}: the suspended batch ran as agent {_shown('/'.join(ids))}; leave out --agent "
            "(the suspension names its agent)"
        )
    return ids


def _agent(ids: list[str], session: Session) -> Agent:
    """The agent of ``ids`` (from the root), its session the log."""
    agent: Agent | None = None
    for index, agent_id in enumerate(ids):
        agent = Agent(agent_id, parent=agent, session=session if index == len(ids) - 1 else None)
    assert agent is not None
    return agent


def _asked(mode: str, agent: Agent, deferred: list[Mapping[str, Any]], decided: Mapping[str, str]) -> dict[str, str]:
    """``decided`` and, for each deferred call without a decision, the
    answer of ``--approve MODE`` (``run``'s approval service: the prompt
    is shown the suspension's reason and the call's arguments); an answer
    that is no decision (``unavailable``: the input ended) leaves the call
    deferred."""
    service = approver(mode)
    signal = AbortController().signal  # (Ctrl-C at the prompt interrupts the command: nothing ran)
    answers = dict(decided)
    for call in deferred:
        if call["id"] in answers:
            continue
        approval = call.get("approval")
        approval = approval if isinstance(approval, Mapping) else {}
        request = ApprovalRequest(
            agent=agent,
            tool_name=call["name"],
            call_id=call["id"],
            reason=approval.get("reason"),
            display_reason=approval.get("display_reason"),
            signal=signal,
            arguments=call.get("arguments"),
        )
        answer = service(request)
        if type(answer) is str and answer in DECISIONS:
            answers[call["id"]] = answer
    return answers


def resume_command(args: argparse.Namespace) -> int:
    """Resume the suspension; see the module docstring for the exit status."""
    check_prompt_input(args)
    suspension, shape, source = read_suspension(args.suspension)
    calls = _calls(suspension, source)
    deferred = [call for call in calls if call.get("state") == DEFERRED]
    decided = _given_decisions(args, calls, [call["id"] for call in deferred])
    terminal = sys.stdin is not None and sys.stdin.isatty() and sys.stderr.isatty()
    mode = args.approve if args.approve is not None else "prompt" if terminal else None
    if mode is None and deferred and not decided:
        first = safe_str(deferred[0]["id"])
        raise CliError(
            f"nothing decides the deferred calls ({', '.join(safe_str(call['id']) for call in deferred)}) without a "
            f"terminal to ask on: give --decide {first}=yes (or no, cancelled, deferred) for each, or --approve "
            "yes, no or prompt"
        )
    ids = _agent_ids(args, suspension, source)
    session = _open_log(args.log, suspension, source)
    agent = _agent(ids, session)

    def prepare(rt: ToolRuntime) -> Callable[[AbortSignal], Future[ToolBatchResult]]:
        answers = decided if mode is None else _asked(mode, agent, deferred, decided)
        return lambda abort: in_thread(
            lambda: rt.tools.resume(suspension, answers, agent=agent, signal=abort), "resume"
        )

    names = {call["id"]: call["name"] for call in calls}
    return run_batch(args, session, prepare, names, shape, keep_log=True, failed="cannot resume the batch")
