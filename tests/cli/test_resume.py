"""``dsh-actors resume``: a batch ``run`` suspended on a deferred approval
is finished from its ``run --json`` document (or its suspension) and its
log, with ``--decide`` or ``--approve``; what cannot be resumed is one
line naming the fix, and nothing runs."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import Cli, PipedStdin, assert_one_line_error, run_cli, started_cli
from .test_run import DEFERRING_CALLS, DEFERRING_TOOLS


@pytest.fixture
def suspended(cli: Cli, root: Path, write_module: Any) -> tuple[Path, Path, Path]:
    """A batch run with ``--log`` and ``--json`` that suspended: (its
    ``run --json`` document, its log, the tools module)."""
    module = write_module("deferring_tools", DEFERRING_TOOLS)
    batch = root / "batch.json"
    batch.write_text(json.dumps({"calls": DEFERRING_CALLS}))
    log = root / "run.jsonl"
    outcome = cli("run", batch, "--tools", module, "--log", log, "--json")
    assert outcome.code == 0, outcome.err
    document = root / "suspended.json"
    document.write_text(outcome.out)
    assert json.loads(outcome.out)["suspension"] is not None
    return document, log, module


def test_a_suspended_run_is_resumed_in_another_process_with_its_decisions_and_only_once(
    cli: Cli, root: Path, write_module: Any
) -> None:
    # (There was no way to resume from the command line: run ended with a
    # suspension that only rt.tools.resume could take.)
    module = write_module("deferring_tools", DEFERRING_TOOLS)
    (root / "batch.json").write_text(json.dumps({"calls": DEFERRING_CALLS}))
    run = run_cli("run", "batch.json", "--tools", module, "--log", "run.jsonl", "--json", cwd=root)
    assert run.returncode == 0 and run.stderr == "", run.stderr
    assert json.loads(run.stdout)["summary"]["awaiting_approval"] == 1
    (root / "suspended.json").write_text(run.stdout)

    options = ("--tools", module, "--log", "run.jsonl", "--decide", "a=yes")
    resumed = run_cli("resume", "suspended.json", *options, "--json", cwd=root)
    assert resumed.returncode == 0 and resumed.stderr == "", resumed.stderr
    document = json.loads(resumed.stdout)
    assert document["version"] == 1 and document["shape"] == "dsh"
    assert [(r["call_id"], r["name"], r["value"]) for r in document["results"]] == [
        ("a", "pay", "paid bob"),
        ("b", "look", "looked x"),
        ("c", "write", "wrote p"),
    ]
    assert document["pending"] == [] and document["suspension"] is None
    assert document["summary"]["ok"] == 3
    cards = cli("replay", "run.jsonl")  # (replay only reads the log: in this process)
    assert "decision: allowed-once" in cards.out and cards.out.endswith("3 calls: 3 ok, 0 errors\n")

    again = run_cli("resume", "suspended.json", *options, cwd=root)
    assert again.returncode == 1 and again.stdout == ""
    assert again.stderr.count("\n") == 1 and "Traceback" not in again.stderr
    assert again.stderr.startswith("dsh-actors resume: error: cannot resume the batch: suspension ")
    assert "was resumed already: the log run.jsonl holds its decision for call 'a' (allowed-once)" in again.stderr


def test_a_call_deferred_again_suspends_again_and_the_new_document_resumes_with_approve(
    cli: Cli, suspended: tuple[Path, Path, Path], root: Path
) -> None:
    document, log, module = suspended
    outcome = cli("resume", document, "--tools", module, "--log", log, "--decide", "a=deferred", "--json")
    assert outcome.code == 0, outcome.err
    again = json.loads(outcome.out)
    assert [call["call_id"] for call in again["pending"]] == ["a", "c"]
    assert again["suspension"]["id"] != json.loads(document.read_text())["suspension"]["id"]
    (root / "again.json").write_text(json.dumps(again["suspension"]))  # the suspension value alone reads too

    cards = cli("resume", root / "again.json", "--tools", module, "--log", log, "--approve", "no")
    assert cards.code == 0 and cards.err == "", cards.err
    assert 'Error: the user rejected tool "pay"' in cards.out
    assert cards.out.endswith("3 calls: 2 ok, 1 error\n")


def test_approve_prompt_asks_for_each_deferred_call_with_runs_prompt(
    cli: Cli, suspended: tuple[Path, Path, Path], piped_stdin: PipedStdin
) -> None:
    document, log, module = suspended
    piped_stdin.send("y\n")
    outcome = cli("resume", document, "--tools", module, "--log", log, "--approve", "prompt")
    assert outcome.code == 0
    assert "Tool call needs approval" in outcome.err and "pay" in outcome.err
    assert "paid bob" in outcome.out and outcome.out.endswith("3 calls: 3 ok, 0 errors\n")


def test_what_cannot_be_resumed_is_one_line_naming_the_fix_and_nothing_runs(
    cli: Cli, suspended: tuple[Path, Path, Path], root: Path
) -> None:
    document, log, module = suspended
    before = log.read_bytes()
    base = ("--tools", module, "--log", log)

    def refused(*argv: Any) -> str:
        outcome = cli("resume", *argv)
        assert_one_line_error(outcome, "resume")
        assert log.read_bytes() == before  # nothing ran, nothing was written
        return outcome.err

    batch = root / "batch.json"
    assert "batch.json: not a suspension; give the JSON document 'dsh-actors run --json'" in refused(
        batch, *base, "--decide", "a=yes"
    )
    complete = root / "complete.json"
    complete.write_text(json.dumps({"version": 1, "results": [], "suspension": None}))
    assert 'its batch did not suspend ("suspension" is null)' in refused(complete, *base, "--decide", "a=yes")
    assert "--decide 'z': that is no call of this suspension; decide the calls that do: a" in refused(
        document, *base, "--decide", "z=yes"
    )
    assert "--decide 'b': that does not await an approval (it is 'settled')" in refused(
        document, *base, "--decide", "b=no"
    )
    assert "give --decide a=yes (or no, cancelled, deferred) for each, or --approve" in refused(document, *base)
    assert "name its log with --log FILE" in refused(document, "--tools", module, "--decide", "a=yes")
    assert f"--log {root}: is a directory, not a session log; name the log the suspended batch's run wrote" in (
        refused(document, "--tools", module, "--log", root, "--decide", "a=yes")
    )
    other = root / "other.jsonl"
    other.write_text("")
    assert "the suspension comes from another log" in refused(
        document, "--tools", module, "--log", other, "--decide", "a=yes"
    )
    assert "--agent bob: the suspended batch ran as agent 'cli'" in refused(
        document, *base, "--decide", "a=yes", "--agent", "bob"
    )


def test_values_of_the_suspension_file_in_a_refusal_are_shown_printable_and_cut(
    cli: Cli, suspended: tuple[Path, Path, Path], root: Path
) -> None:
    # A suspension file is input: a call's state, the logged step's turn and
    # the agent id went into the refusal whole (10,000 characters of it).
    document, _log, module = suspended
    hostile = "\x1b]0;owned\x07" + "x" * 10_000
    value = json.loads(document.read_text())
    suspension = value["suspension"]
    next(call for call in suspension["calls"] if call["id"] == "b")["state"] = hostile
    suspension["log"]["turn"] = hostile
    suspension["agent"] = [hostile]
    edited = root / "edited.json"
    edited.write_text(json.dumps(value))
    for argv, fragment in [
        (("--decide", "b=no"), "--decide 'b': that does not await an approval (it is '\\x1b]0;owned\\x07xxx"),
        (("--decide", "a=yes"), "the suspended batch is logged (turn '\\x1b]0;owned\\x07xxx"),
        (("--decide", "a=yes", "--agent", "bob"), "--agent bob: the suspended batch ran as agent '\\x1b]0;owned"),
    ]:
        outcome = cli("resume", edited, "--tools", module, *argv)
        assert_one_line_error(outcome, "resume", fragment)
        assert "\x1b" not in outcome.err and "\x07" not in outcome.err
        assert len(outcome.err) < 500, len(outcome.err)
    # A call of the file without a state is one of its calls all the same.
    del next(call for call in suspension["calls"] if call["id"] == "b")["state"]
    edited.write_text(json.dumps(value))
    outcome = cli("resume", edited, "--tools", module, "--decide", "b=no")
    assert_one_line_error(outcome, "resume", "--decide 'b': that does not await an approval (it is null)")


def test_a_bad_decision_is_a_bad_command_line(cli: Cli, suspended: tuple[Path, Path, Path]) -> None:
    document, log, module = suspended
    outcome = cli("resume", document, "--tools", module, "--log", log, "--decide", "a=maybe")
    assert outcome.code == 2 and outcome.out == ""
    assert "argument --decide: expected CALL_ID=ANSWER, ANSWER one of yes, no, allowed-once" in outcome.err


def test_help_of_resume_states_its_exit_statuses(capsys: pytest.CaptureFixture[str]) -> None:
    from dsh_actors.cli import main

    assert main(["resume", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "exit status: 0 when the batch ran on" in text and "130 when interrupted" in text
    assert "--decide CALL_ID=ANSWER" in text


#: ``pay`` is deferred; ``hold``, behind it (exclusive), says it started
#: and waits for its signal (the 30 s bound only keeps a broken abort from
#: hanging the test: it then returns "never aborted").
HOLDING_TOOLS = """
import sys
import threading

from dsh_actors import tool


@tool(requires_approval=True)
def pay(to: str) -> str:
    \"\"\"Pay someone.\"\"\"
    return f"paid {to}"


def hold(args, ctx):
    go = threading.Event()
    ctx.signal.add_callback(lambda signal: go.set())
    sys.stderr.write("body started\\n")
    sys.stderr.flush()
    go.wait(30)
    return "aborted" if ctx.signal.aborted else "never aborted"


def register(rt):
    from dsh_actors import ToolOutput, define_tool, text

    rt.tools.register(pay)
    rt.tools.register(
        define_tool(
            name="hold", description="hold", parameters={}, execute=hold,
            output=ToolOutput(schema={"type": "string"}, render=lambda a, v: [text(v)]),
        )
    )
    rt.approvals.set(lambda request: "deferred")
"""


def test_ctrl_c_while_the_resumed_batch_runs_aborts_it_prints_the_results_and_exits_130(
    cli: Cli, root: Path, write_module: Any
) -> None:
    module = write_module("holding_tools", HOLDING_TOOLS)
    calls = [{"id": "a", "name": "pay", "arguments": {"to": "bob"}}, {"id": "h", "name": "hold", "arguments": {}}]
    (root / "batch.json").write_text(json.dumps({"calls": calls}))
    run = cli("run", "batch.json", "--tools", module, "--log", "run.jsonl", "--json")  # (the resume is the process)
    assert run.code == 0, run.err
    (root / "suspended.json").write_text(run.out)
    command = [sys.executable, "-m", "dsh_actors.cli", "resume", "suspended.json", "--tools", str(module)]
    command += ["--log", "run.jsonl", "--decide", "a=yes"]
    proc = started_cli(command, root)
    try:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130
    assert err.startswith("dsh-actors resume: interrupted; aborting the batch"), err
    assert "paid bob" in out and "✗ h hold  ABORTED\n    Error: tool call aborted\n" in out
    assert out.endswith("2 calls: 1 ok, 1 error\n")
