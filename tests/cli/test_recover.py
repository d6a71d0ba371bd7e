"""``dsh-actors recover``: a batch whose ``run --log`` a crash interrupted
is finished from its log (``rt.tools.recover``), printed as ``run``
prints; what cannot be recovered is one line naming the fix, and a log
with nothing to recover says so."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dsh_actors.model import ToolExecutionSuccess
from dsh_actors.session import (
    Session,
    approval_request_event,
    batch_event,
    call_event,
    result_event,
    start_event,
    suspend_event,
)

from .conftest import Cli, assert_one_line_error, started_cli

#: ``hold`` (not idempotent), in the process whose environment has
#: DSH_TEST_HOLD, says its body started and blocks until the process is
#: killed; elsewhere it returns at once (were it run again, the test sees it).
CRASHING_TOOLS = """
import os
import sys
import threading

from dsh_actors import tool


@tool
def echo(text: str) -> str:
    \"\"\"Say it back.\"\"\"
    return f"echo {text}"


@tool
def hold(what: str) -> str:
    \"\"\"Hold on.\"\"\"
    if os.environ.get("DSH_TEST_HOLD"):
        sys.stderr.write("body started\\n")
        sys.stderr.flush()
        threading.Event().wait()  # until the process is killed
    return f"held {what}"


def register(rt):
    rt.tools.register(echo)
    rt.tools.register(hold)
"""

BATCH = [
    {"id": "e1", "name": "echo", "arguments": {"text": "one"}},  # settles before the crash
    {"id": "h", "name": "hold", "arguments": {"what": "x"}},  # started when the process is killed
    {"id": "e2", "name": "echo", "arguments": {"text": "two"}},  # never started
]


def _holding_run(root: Path, module: Path) -> tuple[subprocess.Popen[str], Path]:
    """A ``run --log`` process whose ``hold`` body runs (``e1`` settled,
    ``e2`` waits behind it), and its log; the caller kills it."""
    (root / "batch.json").write_text(json.dumps({"calls": BATCH}))
    log = root / "run.jsonl"
    command = [sys.executable, "-m", "dsh_actors.cli", "run", "batch.json", "--tools", str(module)]
    command += ["--log", str(log), "--max-parallel", "1"]
    return started_cli(command, root, {**os.environ, "DSH_TEST_HOLD": "1"}), log


def _killed_run(root: Path, module: Path) -> Path:
    """The log of ``run --log`` whose process was killed (SIGKILL) while
    ``hold``'s body ran: ``e1`` settled, ``h`` started, ``e2`` never did."""
    proc, log = _holding_run(root, module)
    proc.kill()  # SIGKILL: a crash, nothing runs after it
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    return log


@pytest.fixture
def crashed(root: Path, write_module: Any) -> tuple[Path, Path]:
    """(the log of a killed run, its tools module)."""
    module = write_module("crashing_tools", CRASHING_TOOLS)
    return _killed_run(root, module), module


def _open_calls(log: Path) -> list[str]:
    session = Session.open(log)
    try:
        return session.pending_calls()
    finally:
        session.close()


def test_a_run_killed_mid_batch_is_finished_by_recover_from_its_log(
    cli: Cli, crashed: tuple[Path, Path], root: Path
) -> None:
    # (The command line could not finish it: only rt.tools.recover in a program could.)
    log, module = crashed
    assert _open_calls(log) == ["h"]  # e2 never reached its tool/call
    outcome = cli("recover", "--log", log, "--tools", module)
    assert outcome.code == 0 and outcome.err == "", outcome.err
    assert "echo one" in outcome.out and "echo two" in outcome.out and "held x" not in outcome.out
    assert '✗ h hold · {"what":"x"}  INTERRUPTED\n    Error: tool call interrupted' in outcome.out
    assert outcome.out.endswith("3 calls: 2 ok, 1 error\n")
    assert _open_calls(log) == []
    cards = cli("replay", log, "--tools", module)
    assert cards.code == 0 and cards.out.endswith("3 calls: 2 ok, 1 error\n")

    again = cli("recover", "--log", log, "--tools", module)  # the log is complete now
    assert again.code == 0 and again.out == ""
    assert again.err == (
        f"dsh-actors recover: nothing to recover: every call of the log {log} has its result "
        f"(dsh-actors replay {log} shows them)\n"
    )


def test_recover_json_prints_the_steps_results_as_run_json_does(cli: Cli, crashed: tuple[Path, Path]) -> None:
    log, module = crashed
    outcome = cli("recover", "--log", log, "--tools", module, "--json")
    assert outcome.code == 0, outcome.err
    document = json.loads(outcome.out)
    assert document["version"] == 1 and document["shape"] == "dsh"
    assert [(r["call_id"], r["name"], r["is_error"]) for r in document["results"]] == [
        ("e1", "echo", False),
        ("h", "hold", True),
        ("e2", "echo", False),
    ]
    assert document["results"][1]["error"]["info"]["code"] == "INTERRUPTED"
    assert document["results"][2]["value"] == "echo two"  # ran now
    assert document["results"][0]["value"] is None  # kept from the log, which holds no value
    assert document["summary"]["ok"] == 2 and document["summary"]["error"] == 1
    assert document["summary"]["without_result"] == 0


def test_what_cannot_be_recovered_is_one_line_naming_the_fix(
    cli: Cli, crashed: tuple[Path, Path], root: Path, write_module: Any
) -> None:
    log, module = crashed
    before = log.read_bytes()

    def refused(*argv: Any) -> str:
        outcome = cli("recover", *argv)
        assert_one_line_error(outcome, "recover")
        assert log.read_bytes() == before  # nothing ran, nothing was written
        return outcome.err

    missing = root / "missing.jsonl"
    assert f"--log {missing}: no such file; name the log the interrupted batch's run wrote" in refused(
        "--log", missing, "--tools", module
    )
    assert "--turn and --step name a step together: give both" in refused(
        "--log", log, "--tools", module, "--turn", "1"
    )
    assert (
        f"--log {log}: the log has no call of turn 2, step 1 (its unfinished steps: turn 1, step 1 of agent "
        "'cli' (2 of 3 calls without a result)); name a step the log holds"
    ) in refused("--log", log, "--tools", module, "--turn", "2", "--step", "1")
    echo_only = write_module("echo_only", CRASHING_TOOLS.replace("    rt.tools.register(hold)\n", ""))
    assert "cannot recover the step: " in refused("--log", log, "--tools", echo_only)
    assert "nothing to recover" in cli("recover", "--log", log, "--tools", module, "--agent", "bob").err


def test_a_log_whose_run_still_runs_is_refused_and_nothing_runs(cli: Cli, root: Path, write_module: Any) -> None:
    module = write_module("crashing_tools", CRASHING_TOOLS)
    proc, log = _holding_run(root, module)
    try:
        before = log.read_bytes()
        outcome = cli("recover", "--log", log, "--tools", module)
        assert_one_line_error(outcome, "recover", f"cannot recover the step: the session log {log} is being written")
        assert log.read_bytes() == before
    finally:
        proc.kill()
        proc.communicate(timeout=30)


def _unfinished_log(path: Path) -> None:
    """A log with two unfinished steps of agent ``cli`` (their batches
    logged, no call started) and a complete one."""
    session = Session(path)
    try:
        session.append(batch_event(1, 1, [("a", "echo", {"text": "a"})], agent="cli"))
        session.append(batch_event(1, 2, [("b", "echo", {"text": "b"})], agent="cli"))
        session.append(batch_event(1, 3, [("c", "echo", {"text": "c"})], agent="cli"))
        session.append(call_event(1, 3, "c", "echo", {"text": "c"}, agent="cli"))
        done = ToolExecutionSuccess(value="echo c", content=())
        session.append(result_event("c", done, turn=1, step=3, agent="cli"))
    finally:
        session.close()


def test_several_unfinished_steps_are_listed_and_turn_and_step_name_one(
    cli: Cli, root: Path, write_module: Any
) -> None:
    module = write_module("crashing_tools", CRASHING_TOOLS)
    log = root / "steps.jsonl"
    _unfinished_log(log)
    outcome = cli("recover", "--log", log, "--tools", module)
    assert_one_line_error(
        outcome,
        "recover",
        f"--log {log}: 2 steps are unfinished: turn 1, step 1 of agent 'cli' (1 of 1 calls without a result); "
        "turn 1, step 2 of agent 'cli' (1 of 1 calls without a result); name the one to recover with "
        "--turn T --step S",
    )
    complete = cli("recover", "--log", log, "--tools", module, "--turn", "1", "--step", "3")
    assert (
        complete.code == 0
        and complete.out == ""
        and "nothing to recover: every call of turn 1, step 3" in (complete.err)
    )

    second = cli("recover", "--log", log, "--tools", module, "--turn", "1", "--step", "2")
    assert second.code == 0 and second.err == "", second.err
    assert "echo b" in second.out and "echo a" not in second.out and "echo c" not in second.out
    assert second.out.endswith("1 call: 1 ok, 0 errors\n")  # only the recovered step's calls
    first = cli("recover", "--log", log, "--tools", module)  # the one unfinished step left
    assert first.code == 0 and "echo a" in first.out and first.out.endswith("1 call: 1 ok, 0 errors\n")
    assert _open_calls(log) == []


def _suspended_run(cli: Cli, root: Path, write_module: Any) -> tuple[Path, Path, Path, str]:
    """A batch of DEFERRING_CALLS run with ``--log`` and ``--json``, which
    suspended: (its tools module, its log, its ``run --json`` document,
    its suspension id)."""
    from .test_run import DEFERRING_CALLS, DEFERRING_TOOLS

    module = write_module("deferring_tools", DEFERRING_TOOLS)
    (root / "batch.json").write_text(json.dumps({"calls": DEFERRING_CALLS}))
    log = root / "run.jsonl"
    run = cli("run", root / "batch.json", "--tools", module, "--log", log, "--json")
    assert run.code == 0, run.err
    document = root / "suspended.json"
    document.write_text(run.out)
    return module, log, document, json.loads(run.out)["suspension"]["id"]


#: DEFERRING_TOOLS (``{tools}``) whose ``tools/deferred`` listener, in the
#: process whose environment has DSH_TEST_HOLD, says ``body started`` (what
#: ``started_cli`` waits for) and blocks until the process is killed: the
#: run is held right after the deferral is logged, before its batch suspends.
HELD_AFTER_DEFERRAL = """{tools}
import os
import sys
import threading

_register = register


def register(rt):
    _register(rt)
    if os.environ.get("DSH_TEST_HOLD"):
        def hold(execution, ask):
            sys.stderr.write("body started\\n")
            sys.stderr.flush()
            threading.Event().wait()  # until the process is killed

        rt.events.on("tools/deferred", hold)
"""

DEFERRED_PAY = {"id": "a", "name": "pay", "arguments": {"to": "bob"}}
EXCLUSIVE_WRITE = {"id": "c", "name": "write", "arguments": {"path": "p"}}  # (waits for "a": never logged)


def _cut_after_an_approval_request(path: Path, agent: str = "cli", suspension: str = "s1") -> Session:
    """A session log at ``path`` as a run of DEFERRING_CALLS left it when
    killed right after "a"'s approval request, before "b" was logged (the
    log opened: the caller appends more, or closes it)."""
    session = Session(path)
    calls = [("a", "pay", {"to": "bob"}), ("b", "look", {"q": "x"}), ("c", "write", {"path": "p"})]
    session.append(batch_event(1, 1, calls, agent=agent, unknown=()))
    session.append(call_event(1, 1, "a", "pay", {"to": "bob"}, agent=agent))
    session.append(approval_request_event("a", suspension, "pay", None, None, turn=1, step=1, agent=agent))
    return session


def test_resume_names_dsh_actors_recover_where_the_library_names_rt_tools_recover(
    cli: Cli, root: Path, write_module: Any
) -> None:
    # (Its refusals told a command-line user to call rt.tools.recover(agent, turn, step).)
    module, log, document, _ = _suspended_run(cli, root, write_module)
    lines = log.read_text().splitlines(keepends=True)
    lost = root / "lost.jsonl"  # the log as a machine that stopped left it: its last events did not reach the disk
    lost.write_text("".join(lines[: next(i for i, line in enumerate(lines) if "approval-request" in line)]))
    cut = cli("resume", document, "--tools", module, "--log", lost, "--decide", "a=yes")
    assert_one_line_error(cut, "resume", "the log lost its last events", f"dsh-actors recover --log {lost} finishes")
    assert "rt.tools.recover" not in cut.err
    recovered = cli("recover", "--log", lost, "--tools", module, "--approve", "yes")  # what it names works
    assert recovered.code == 0 and "paid bob" in recovered.out, recovered.err
    assert recovered.out.endswith("3 calls: 3 ok, 0 errors\n")

    options = ("--tools", module, "--log", log, "--decide", "a=yes")
    assert cli("resume", document, *options).code == 0
    again = cli("resume", document, *options)  # resumed already
    assert_one_line_error(again, "resume", f"its process or runtime stopped, dsh-actors recover --log {log} finishes")
    assert "rt.tools.recover" not in again.err


def _suspended_note(log: Path, suspension: str, agent: str = "'cli'") -> str:
    return (
        f"dsh-actors recover: note: turn 1, step 1 of agent {agent} had suspended (suspension {suspension}), waiting "
        "for a deferred approval, and this recovery asked for it again; to finish a suspended step with the "
        f"decisions already asked for, resume it instead: dsh-actors resume SUSPENSION.json --log "
        f"{shlex.quote(str(log))}, SUSPENSION.json being the document run --json printed for it\n"
    )


def test_a_batch_that_suspends_logs_it_after_its_results_and_a_resume_that_suspends_again_too(
    cli: Cli, root: Path, write_module: Any
) -> None:
    # (The log held the approval requests alone: a step that suspended
    # looked like one a crash cut right after them.)
    module, log, document, suspension = _suspended_run(cli, root, write_module)
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e["type"] for e in events][-2:] == ["tool/result", "tool/suspend"]  # after "b"'s result
    assert events[-1] == {"type": "tool/suspend", "suspension": suspension, "turn": 1, "step": 1, "agent": "cli"}
    replayed = cli("replay", log, "--tools", module)  # (a log with the event reads as before)
    assert replayed.code == 0 and replayed.err == "", replayed.err
    assert replayed.out.endswith("3 calls: 1 ok, 0 errors, 2 without a result (1 awaiting approval, 1 never started)\n")

    again = cli("resume", document, "--log", log, "--tools", module, "--decide", "a=deferred", "--json")
    assert again.code == 0 and again.err == "", again.err
    second = json.loads(again.out)["suspension"]["id"]
    assert second != suspension
    assert json.loads(log.read_text().splitlines()[-1]) == {
        "type": "tool/suspend", "suspension": second, "turn": 1, "step": 1, "agent": "cli"
    }  # fmt: skip
    recovered = cli("recover", "--log", log, "--tools", module, "--approve", "yes")
    assert recovered.code == 0 and recovered.err == _suspended_note(log, second), recovered.err
    assert recovered.out.endswith("3 calls: 3 ok, 0 errors\n")


def test_recovering_a_suspended_step_notes_that_resume_finishes_it_without_asking_again(
    cli: Cli, root: Path, write_module: Any
) -> None:
    # (recover asked the step's approvals again and printed a new suspension
    # id, never naming dsh-actors resume, which decides the ones asked for.)
    module, log, document, suspension = _suspended_run(cli, root, write_module)
    cards_log, json_log, resumed_log = (root / f"{name} log.jsonl" for name in ("cards", "json", "resumed"))
    for copy in (cards_log, json_log, resumed_log):
        copy.write_bytes(log.read_bytes())

    cards = cli("recover", "--log", cards_log, "--tools", module)
    assert cards.code == 0 and cards.err == _suspended_note(cards_log, suspension)  # one line, the path quoted
    assert cards.out.endswith("3 calls: 1 ok, 0 errors, 2 without a result (1 awaiting approval, 1 never started)\n")
    assert "dsh-actors" not in cards.out

    as_json = cli("recover", "--log", json_log, "--tools", module, "--json")
    assert as_json.code == 0 and as_json.err == _suspended_note(json_log, suspension)
    again = json.loads(as_json.out)  # stdout holds the document alone
    assert again["suspension"]["id"] != suspension and again["summary"]["awaiting_approval"] == 1

    resumed = cli("resume", document, "--log", resumed_log, "--tools", module, "--decide", "a=yes")  # what it names
    assert resumed.code == 0 and resumed.err == "", resumed.err
    assert "paid bob" in resumed.out and resumed.out.endswith("3 calls: 3 ok, 0 errors\n")


def test_recovering_a_step_a_crash_cut_has_no_note_even_with_a_deferred_approval(
    cli: Cli, crashed: tuple[Path, Path], root: Path, write_module: Any
) -> None:
    log, module = crashed  # no approval asked, a call started
    outcome = cli("recover", "--log", log, "--tools", module, "--json")
    assert outcome.code == 0 and outcome.err == "", outcome.err
    assert json.loads(outcome.out)["summary"]["error"] == 1

    # The run was killed after "a" was deferred, while "b"'s body ran: a
    # crash (its suspension was never returned), not a suspension to resume.
    from .test_run import DEFERRING_TOOLS

    deferring = write_module("deferring_tools", DEFERRING_TOOLS)
    cut = root / "cut.jsonl"
    session = _cut_after_an_approval_request(cut)
    try:
        session.append(call_event(1, 1, "b", "look", {"q": "x"}, agent="cli"))
        session.append(start_event("b", 1, 1, agent="cli"))
    finally:
        session.close()
    recovered = cli("recover", "--log", cut, "--tools", deferring, "--approve", "yes")
    assert recovered.code == 0 and recovered.err == "", recovered.err
    assert "paid bob" in recovered.out and "INTERRUPTED" in recovered.out and "wrote p" in recovered.out


def test_a_step_cut_before_it_suspended_has_no_note(cli: Cli, root: Path, write_module: Any) -> None:
    # A run killed right after "a"'s approval request (its tools/deferred
    # listener holds it there), before the batch suspended: no suspension
    # was ever printed, yet the note named dsh-actors resume SUSPENSION.json,
    # hedged ("if the run that suspended it printed its suspension").
    from .test_run import DEFERRING_TOOLS

    module = write_module("held_after_deferral", HELD_AFTER_DEFERRAL.format(tools=DEFERRING_TOOLS))
    (root / "batch.json").write_text(json.dumps({"calls": [DEFERRED_PAY, EXCLUSIVE_WRITE]}))
    log = root / "cut.jsonl"
    command = [sys.executable, "-m", "dsh_actors.cli", "run", "batch.json", "--tools", str(module), "--log", str(log)]
    proc = started_cli(command, root, {**os.environ, "DSH_TEST_HOLD": "1"})
    proc.kill()  # SIGKILL: a crash, nothing runs after it
    proc.communicate(timeout=30)
    assert [json.loads(line)["type"] for line in log.read_text().splitlines()] == [
        "tool/batch", "tool/call", "tool/approval-request"
    ]  # fmt: skip
    recovered = cli("recover", "--log", log, "--tools", module, "--approve", "yes")
    assert recovered.code == 0 and recovered.err == "", recovered.err
    assert "paid bob" in recovered.out and recovered.out.endswith("2 calls: 2 ok, 0 errors\n")

    # A log written before batches logged their suspension reads as that
    # one: recovered, without a note.
    old = root / "old.jsonl"
    _cut_after_an_approval_request(old).close()
    recovered = cli("recover", "--log", old, "--tools", module, "--approve", "yes")
    assert recovered.code == 0 and recovered.err == "", recovered.err
    assert recovered.out.endswith("3 calls: 3 ok, 0 errors\n")


def test_the_note_shows_the_logs_ids_escaped_on_one_line(cli: Cli, root: Path, write_module: Any) -> None:
    # (The suspension id reached the terminal raw, its newline and escape
    # sequence too; the agent id as a Python repr.)
    from .test_run import DEFERRING_TOOLS

    module = write_module("deferring_tools", DEFERRING_TOOLS)
    cut = root / "odd.jsonl"
    session = _cut_after_an_approval_request(cut, agent="ag\u00e9nt\u200b'x", suspension="s1\n\x1b[31mRED")
    try:
        session.append(suspend_event("s1\n\x1b[31mRED", turn=1, step=1, agent="ag\u00e9nt\u200b'x"))
    finally:
        session.close()
    recovered = cli("recover", "--log", cut, "--tools", module, "--approve", "yes")
    note = _suspended_note(cut, "s1\\x0a\\x1b[31mRED", agent="'ag\u00e9nt\\u200b'x'")
    assert recovered.code == 0 and recovered.err == note, recovered.err


def test_help_of_recover_states_its_exit_statuses(cli: Cli) -> None:
    outcome = cli("recover", "--help")
    assert outcome.code == 0
    text = " ".join(outcome.out.split())
    assert "exit status: 0 when the step was finished" in text and "nothing to recover" in text
    assert "130 when interrupted" in text
    assert "  dsh-actors recover --log run.jsonl --tools my_tools.py\n" in outcome.out
