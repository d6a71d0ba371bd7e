"""``dsh-actors replay``: a session log drawn with the tools' cards, generic
cards where a tool is unknown, PTC sub-calls nested under their call."""

from __future__ import annotations

import io
import json
import os
import sys
import threading
import tracemalloc
from pathlib import Path
from typing import Any

import orjson
import pytest

from dsh_actors import text
from dsh_actors.cli import main
from dsh_actors.presentation import ToolResultProjection
from dsh_actors.session import (
    approval_event,
    approval_request_event,
    batch_event,
    call_event,
    ptc_dispatch_event,
    ptc_dispatch_start_event,
    result_event,
    start_event,
)

from .conftest import EXAMPLES, Cli, assert_one_line_error

BATCH = EXAMPLES / "batch.json"


def _log(path: Path, *events: dict[str, Any]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
    return path


def _ok(content: str, meta: Any = None) -> ToolResultProjection:
    return ToolResultProjection(content=(text(content),), is_error=False, meta=meta)


def test_a_log_written_by_run_replays_with_the_same_cards(cli: Cli, root: Path) -> None:
    ran = cli("run", BATCH, "--tools", "examples.tools", "--log", "run.jsonl")
    assert ran.code == 0
    replayed = cli("replay", "run.jsonl", "--tools", "examples.tools")
    assert replayed.code == 0 and replayed.err == ""
    header, _, cards = replayed.out.partition("\n")
    assert header == "── turn 1 · step 1 ──"
    assert cards == ran.out
    assert "+def greet(name):" in cards  # the diff card
    assert "$ echo hello from the shell\n    hello from the shell\n    exit 0" in cards  # the terminal card


def test_the_log_holds_a_call_and_a_result_event_per_call_of_step_one(cli: Cli, root: Path) -> None:
    cli("run", BATCH, "--tools", "examples.tools", "--log", "run.jsonl", "--agent", "me")
    events = [orjson.loads(line) for line in (root / "run.jsonl").read_bytes().splitlines()]
    calls = [e["call_id"] for e in events if e["type"] == "tool/call"]
    results = [e["call_id"] for e in events if e["type"] == "tool/result"]
    assert calls == results == ["c1", "c2", "c3", "c4"]
    assert {(e["turn"], e["step"]) for e in events if e["type"] == "tool/call"} == {(1, 1)}


def test_without_tools_the_replay_uses_generic_cards(cli: Cli, root: Path) -> None:
    cli("run", BATCH, "--tools", "examples.tools", "--log", "run.jsonl")
    out = cli("replay", "run.jsonl").out
    assert "+def greet" not in out and "$ echo" not in out
    assert (
        '✓ c4 run_shell · {"command":"echo hello from the shell"}\n    hello from the shell\n    [exit code 0]' in out
    )
    assert '✓ c2 read_file · {"path":"scratch/hello.py"}\n    scratch/hello.py (lines 1-5 of 5)' in out
    assert out.endswith("4 calls: 4 ok, 0 errors\n")


def test_a_tool_the_module_does_not_register_degrades_to_the_generic_cards(cli: Cli, root: Path) -> None:
    log = _log(
        root / "log.jsonl",
        call_event(1, 1, "m", "mystery_tool", {"depth": 3}),
        result_event("m", _ok("the answer is 42")),
        call_event(1, 1, "s", "run_shell", {"command": "echo known"}),
        result_event("s", _ok("known\n[exit code 0]", {"output": "known\n", "exit_code": 0, "signal": None})),
    )
    out = cli("replay", log, "--tools", "examples.tools").out
    assert '✓ m mystery_tool · {"depth":3}\n    the answer is 42\n' in out
    assert "✓ s run_shell · $ echo known\n    known\n    exit 0\n" in out


def test_a_presenter_that_raises_or_answers_none_gives_the_generic_card(
    cli: Cli, root: Path, write_module: Any
) -> None:
    module = write_module(
        "odd_presenters",
        """
        from dsh_actors import ToolDefinition, ToolOutput, text

        def boom(*args):
            raise RuntimeError("presenter bug")

        TOOLS = [ToolDefinition(
            name="odd", description="", parameters={"type": "object"},
            output=ToolOutput(schema={}, render=lambda a, v: [text(str(v))]),
            execute=lambda a, c: 1, present_call=boom, present_result=lambda args, result: None,
        )]
        """,
    )
    log = _log(root / "log.jsonl", call_event(1, 1, "o", "odd", {"x": 1}), result_event("o", _ok("1")))
    outcome = cli("replay", log, "--tools", module)
    assert outcome.code == 0
    assert '✓ o odd · {"x":1}\n    1\n' in outcome.out


def test_ptc_dispatches_are_nested_under_their_root_call(cli: Cli, root: Path) -> None:
    code = "a = await tools.read_file(path='notes.md')\nreturn a"
    log = _log(
        root / "log.jsonl",
        call_event(1, 1, "rc", "run_code", {"code": code}),
        ptc_dispatch_start_event("rc", "rc", "rc:ptc:1", "run_shell", {"command": "echo nested"}),
        ptc_dispatch_start_event("rc", "rc", "rc:ptc:2", "nope", {}),
        ptc_dispatch_event("rc", "rc", "rc:ptc:1", "run_shell", False, [text("nested\n[exit code 0]")], None, None),
        ptc_dispatch_event("rc", "rc", "rc:ptc:2", "nope", True, [text('Error: unknown tool "nope"')], None, None),
        result_event("rc", _ok('{"result": "done", "output": ""}')),
        call_event(1, 2, "after", "run_shell", {"command": "true"}),
    )
    out = cli("replay", log, "--tools", "examples.tools").out
    assert out == (
        "── turn 1 · step 1 ──\n"
        '✓ rc run_code · {"code":"a = await tools.read_file(path=\'notes.md\')\\nreturn a"}\n'
        "    code:\n"
        "      │ a = await tools.read_file(path='notes.md')\n"
        "      │ return a\n"
        "    ✓ rc:ptc:1 run_shell · $ echo nested\n"  # a known tool's pending card: a log without the sub-call's meta
        "        nested\n"
        "        [exit code 0]\n"
        "    ✗ rc:ptc:2 nope  error\n"
        '        Error: unknown tool "nope"\n'
        '    {"result": "done", "output": ""}\n'
        "── turn 1 · step 2 ──\n"
        "· after run_shell · $ true  never started (no tool/start logged)\n"
        "2 calls: 1 ok, 0 errors, 1 without a result (1 never started) (2 nested calls)\n"
    )


def test_a_result_whose_call_is_not_in_the_log_is_still_shown(cli: Cli, root: Path) -> None:
    log = _log(root / "log.jsonl", result_event("lost", _ok("orphan")))
    out = cli("replay", log).out
    assert "✓ lost ? (call not in the log)\n    orphan\n" in out


def test_a_torn_last_line_is_ignored_with_a_note(cli: Cli, root: Path) -> None:
    log = _log(root / "log.jsonl", call_event(1, 1, "a", "x", {}), result_event("a", _ok("fine")))
    log.write_bytes(log.read_bytes() + b'{"type": "tool/call", "call_')
    outcome = cli("replay", log)
    assert outcome.code == 0
    assert "✓ a x\n    fine\n" in outcome.out
    assert outcome.err == f"dsh-actors replay: {log}:3: ignored a torn last line (an interrupted write)\n"
    assert log.read_bytes().endswith(b'"call_'), "replay never changes the file"


@pytest.mark.parametrize("last", [b'{"type": "tool/call", "call_', b"...}}", b"nope"])
def test_a_bad_newline_terminated_last_line_is_an_error_as_for_the_session(cli: Cli, root: Path, last: bytes) -> None:
    # Each event is written with its newline in one write: only an
    # unterminated line can be a torn one. Replay said "ignored a torn last
    # line" and exited 0 where Session.open raises SessionCorruptError.
    from dsh_actors.session import Session, SessionCorruptError

    log = _log(root / "log.jsonl", call_event(1, 1, "a", "x", {}), result_event("a", _ok("fine")))
    log.write_bytes(log.read_bytes() + last + b"\n\n")  # (a blank line after it: still the last line)
    with pytest.raises(SessionCorruptError, match=":3: "):
        Session.open(log).close()
    assert_one_line_error(cli("replay", log), "replay", f"{log}:3: not a session event: ")


def test_an_empty_log_shows_that_it_holds_no_calls(cli: Cli, root: Path) -> None:
    (root / "empty.jsonl").write_text("\n")
    outcome = cli("replay", "empty.jsonl")
    assert (outcome.code, outcome.out) == (0, "(no tool calls in the log)\n")


def test_a_file_that_is_not_a_session_log_exits_1_with_one_line(cli: Cli, root: Path) -> None:
    (root / "middle.jsonl").write_text(
        '{"type": "tool/call", "call_id": "a", "name": "x", "turn": 1, "step": 1}\nnope\n{}\n'
    )
    (root / "one.json").write_text('{"calls": []}')
    (root / "bad_result.jsonl").write_text('{"type": "tool/result", "call_id": "a", "is_error": "no"}\n')
    cases = {
        "missing.jsonl": ["missing.jsonl: no such file"],
        "middle.jsonl": ["middle.jsonl:2: not a session event: invalid JSON text"],
        "one.json": ["one.json: not a session log (line 1 is not a session event)"],
        str(BATCH): ["batch.json:1: not a session event"],
        "bad_result.jsonl": ["bad_result.jsonl:1: bad tool/result event:", "is_error"],
        ".": ["is a directory"],
    }
    for name, fragments in cases.items():
        assert_one_line_error(cli("replay", name), "replay", *fragments)
    (root / "good.jsonl").write_text("")
    assert_one_line_error(cli("replay", "good.jsonl", "--tools", "nowhere_module"), "replay", "no module named")


def test_colour_is_used_only_when_asked_for_or_on_a_terminal(cli: Cli, root: Path) -> None:
    log = _log(root / "log.jsonl", call_event(1, 1, "a", "x", {}), result_event("a", _ok("fine")))
    assert "\x1b[" not in cli("replay", log).out  # captured output is not a terminal
    coloured = cli("replay", log, "--color", "always").out
    assert "\x1b[32m✓\x1b[0m" in coloured
    assert "\x1b[" not in cli("replay", log, "--color", "never").out


def test_control_characters_from_the_log_are_shown_escaped_and_only_the_commands_colours_pass(
    cli: Cli, root: Path
) -> None:
    # A tool's output that would retitle the terminal, clear it, ring it,
    # paint it and reverse what is read; and a name with a cursor move.
    output = "before\x1b]0;PWNED\x07\x1b[2J\x1b[32mgreen\u202eafter"
    log = _log(root / "log.jsonl", call_event(1, 1, "a", "x\x1b[1A", {}), result_event("a", _ok(output)))
    shown = "before\\x1b]0;PWNED\\x07\\x1b[2J\\x1b[32mgreen\\u202eafter"
    plain = cli("replay", log).out
    assert shown in plain and "\x1b" not in plain and "\x07" not in plain and "\u202e" not in plain
    assert "x\\x1b[1A" in plain
    coloured = cli("replay", log, "--color", "always").out
    assert "before\\x1b]0;PWNED\\x07\\x1b[2J" in coloured and "\x1b]" not in coloured and "\x1b[2J" not in coloured
    assert "\x1b[32m✓\x1b[0m" in coloured, "the command's own colours still pass"


def test_max_lines_caps_each_card_body(cli: Cli, root: Path) -> None:
    output = "\n".join(f"line {i}" for i in range(100))
    log = _log(root / "log.jsonl", call_event(1, 1, "a", "x", {}), result_event("a", _ok(output)))
    capped = cli("replay", log, "--max-lines", "3").out
    assert "    line 2\n    ... 97 more lines\n" in capped and "line 3\n" not in capped
    assert "line 99" in cli("replay", log, "--max-lines", "0").out


def test_a_run_code_batch_under_the_ptc_executor_replays_its_sub_calls_nested(cli: Cli, root: Path) -> None:
    ptc = pytest.importorskip("executors.ptc")
    if not hasattr(ptc, "PtcExecutor"):
        pytest.skip("executors.ptc has no PtcExecutor yet")
    code = "await tools.write_file(path='scratch/a.txt', content='hi\\n')\nreturn (await tools.run_shell(command='cat scratch/a.txt'))['output']"
    batch = root / "ptc.json"
    batch.write_text(json.dumps({"calls": [{"id": "p", "name": "run_code", "arguments": {"code": code}}]}))
    ran = cli("run", batch, "--tools", "examples.tools", "--executor", "ptc", "--log", "ptc.jsonl")
    assert ran.code == 0, ran.err
    out = cli("replay", "ptc.jsonl", "--tools", "examples.tools").out
    assert "✓ p run_code · " in out
    assert "    ✓ p:ptc:1 write_file · write scratch/a.txt\n" in out
    assert "    ✓ p:ptc:2 run_shell · $ cat scratch/a.txt\n        hi\n" in out
    assert out.endswith("1 call: 1 ok, 0 errors (2 nested calls)\n")


def test_a_ptc_sub_call_is_drawn_with_the_card_its_tool_draws_for_a_direct_call(cli: Cli, root: Path) -> None:
    ptc = pytest.importorskip("executors.ptc")
    if not hasattr(ptc, "PtcExecutor"):
        pytest.skip("executors.ptc has no PtcExecutor yet")
    (root / "notes.md").write_text("# Notes\nhello\n")
    direct = root / "direct.json"
    direct.write_text(json.dumps({"calls": [{"id": "r", "name": "read_file", "arguments": {"path": "notes.md"}}]}))
    card = (
        "✓ r read_file · read notes.md\n"
        "    notes.md · lines 1–2 of 2 (markdown)\n"  # the read card, drawn from the logged meta
        "    1 │ # Notes\n"
        "    2 │ hello\n"
    )
    assert cli("run", direct, "--tools", "examples.tools").out.startswith(card)
    code = "return (await tools.read_file(path='notes.md'))['total_lines']"
    batch = root / "ptc.json"
    batch.write_text(json.dumps({"calls": [{"id": "p", "name": "run_code", "arguments": {"code": code}}]}))
    ran = cli("run", batch, "--tools", "examples.tools", "--executor", "ptc", "--log", "ptc.jsonl")
    assert ran.code == 0, ran.err
    replayed = cli("replay", "ptc.jsonl", "--tools", "examples.tools")
    assert replayed.code == 0 and replayed.err == ""
    # The same card, nested under run_code: the sub-call's tool/ptc-dispatch
    # logs the presentation meta the direct call's tool/result logs.
    nested = "".join("    " + line for line in card.replace("✓ r ", "✓ p:ptc:1 ").splitlines(keepends=True))
    assert nested in ran.out
    assert nested in replayed.out
    assert replayed.out.endswith("1 call: 1 ok, 0 errors (1 nested call)\n")


def test_a_suspended_log_shows_its_approvals_and_the_calls_that_wait_in_the_batch(cli: Cli, root: Path) -> None:
    ask = {"ask": True}
    log = _log(
        root / "log.jsonl",
        batch_event(1, 1, [("c0", "refund", '{"ask": true}'), ("c1", "lookup", "{}"), ("c2", "ship", '{"to": "A7"}')]),
        call_event(1, 1, "c0", "refund", ask),
        approval_request_event("c0", "s-one", "refund", "refunds need a person", {"en": "Refund 30 EUR?"}),
        call_event(1, 1, "c1", "lookup", {}),
        result_event("c1", _ok("found")),
        approval_event("c0", "s-one", "deferred"),
        approval_request_event("c0", "s-two", "refund", "refunds need a person", None),
        batch_event(1, 2, [("c0", "refund", '{"ask": true}')]),  # the next step reuses the id
        call_event(1, 2, "c0", "refund", ask),
        approval_request_event("c0", "s-three", "refund", None, None),
        approval_event("c0", "s-three", "allowed-once"),
        result_event("c0", _ok("refunded")),
    )
    replayed = cli("replay", log)
    assert replayed.code == 0 and replayed.err == ""
    assert replayed.out == (
        "── turn 1 · step 1 ──\n"
        '⏸ c0 refund · {"ask":true}  awaiting approval\n'
        "    approval asked: refunds need a person (suspension s-one)\n"
        "    shown to the person: en: Refund 30 EUR?\n"
        "    decision: deferred\n"
        "    approval asked: refunds need a person (suspension s-two)\n"
        "✓ c1 lookup\n"
        "    found\n"
        '· c2 ship · {"to":"A7"}  never started (only its batch names it)\n'
        "── turn 1 · step 2 ──\n"
        '✓ c0 refund · {"ask":true}\n'
        "    approval asked: no reason given (suspension s-three)\n"
        "    decision: allowed-once\n"
        "    refunded\n"
        "4 calls: 2 ok, 0 errors, 2 without a result (1 awaiting approval, 1 never started)\n"
    )


def test_a_crashed_step_tells_calls_that_may_have_run_from_calls_that_never_started(cli: Cli, root: Path) -> None:
    # A crash after "run" and "code" logged their tool/start (and "code" a
    # sub-call), "asked" its tool/call only (its approval service had not
    # answered), and before "after" reached its tool/call. Each showed "no
    # result recorded" but "after", and the summary counted 1 never started.
    named = [("done", "x", "{}"), ("run", "x", "{}"), ("code", "run_code", "{}"), ("asked", "x", "{}")]
    log = _log(
        root / "log.jsonl",
        batch_event(1, 1, [*named, ("after", "x", "{}")]),
        call_event(1, 1, "done", "x", {}),
        start_event("done", 1, 1),
        call_event(1, 1, "run", "x", {}),
        start_event("run", 1, 1),
        call_event(1, 1, "code", "run_code", {}),
        start_event("code", 1, 1),
        ptc_dispatch_start_event("code", "code", "code:ptc:1", "x", {}),
        call_event(1, 1, "asked", "x", {}),
        result_event("done", _ok("fine"), turn=1, step=1),
    )
    replayed = cli("replay", log)
    assert replayed.code == 0 and replayed.err == ""
    assert replayed.out == (
        "── turn 1 · step 1 ──\n"
        "✓ done x\n"
        "    fine\n"
        "… run x  started, no result recorded (it may have run)\n"
        "… code run_code  started, no result recorded (it may have run)\n"
        "    … code:ptc:1 x  started, no result recorded (it may have run)\n"
        "· asked x  never started (no tool/start logged)\n"
        "· after x  never started (only its batch names it)\n"
        "5 calls: 1 ok, 0 errors, 4 without a result (2 may have run, 2 never started) (1 nested call)\n"
    )


def test_a_request_after_a_deferral_is_its_own_step_s_call_s_as_the_session_has_it(cli: Cli, root: Path) -> None:
    # Step 1's c0 is deferred again (its new request comes later) while
    # step 2, reusing the id, asks for its own c0: replay showed step 2's
    # request (s2) under step 1's call, and step 2's call with none.
    from dsh_actors.session import Session

    def asked(suspension: str, step: int) -> dict[str, Any]:
        return approval_request_event("c0", suspension, "refund", "why", None, turn=1, step=step, agent="a")

    log = _log(
        root / "log.jsonl",
        call_event(1, 1, "c0", "refund", {}, agent="a"),
        asked("s1", 1),
        approval_event("c0", "s1", "deferred"),
        call_event(1, 2, "c0", "refund", {}, agent="a"),
        asked("s2", 2),
        asked("s3", 1),
    )
    with Session.open(log) as session:
        assert session.awaiting_approval() == [("c0", "s2"), ("c0", "s3")]
        assert [c.awaiting for c in session.step_calls(1, 1, "a")] == ["s3"]
        assert [c.awaiting for c in session.step_calls(1, 2, "a")] == ["s2"]
    replayed = cli("replay", log)
    assert replayed.code == 0 and replayed.err == ""
    assert replayed.out == (
        "── turn 1 · step 1 ──\n"
        "⏸ c0 refund  awaiting approval\n"
        "    approval asked: why (suspension s1)\n"
        "    decision: deferred\n"
        "    approval asked: why (suspension s3)\n"
        "── turn 1 · step 2 ──\n"
        "⏸ c0 refund  awaiting approval\n"
        "    approval asked: why (suspension s2)\n"
        "2 calls: 0 ok, 0 errors, 2 without a result (2 awaiting approval)\n"
    )


def test_a_copy_of_a_tool_call_line_is_the_same_call_as_the_session_has_it(cli: Cli, root: Path) -> None:
    # In the agent's latest run of the step, after its tool/batch, a second
    # tool/call of one id is a copy of the line (docs, section 10): the
    # session, read_step and replay pair it alike, one call with its result.
    from dsh_actors.session import Session

    call = call_event(1, 1, "a", "echo", {}, agent="cli")
    log = _log(
        root / "log.jsonl",
        batch_event(1, 1, [("a", "echo", "{}")], agent="cli"),
        call,
        call,
        start_event("a", 1, 1, agent="cli"),
        result_event("a", _ok("fine"), turn=1, step=1, agent="cli"),
    )
    with Session.open(log) as session:
        assert session.pending_calls() == [] and session.call_count == 1  # (two tool/call lines, one call)
        assert [c.state for c in session.read_step(1, 1, "cli").calls] == ["settled"]
    replayed = cli("replay", log)
    assert replayed.code == 0 and replayed.err == ""
    assert replayed.out == "── turn 1 · step 1 ──\n✓ a echo\n    fine\n1 call: 1 ok, 0 errors\n"


def test_a_copy_of_an_older_steps_tool_call_line_is_no_call_of_its_own(cli: Cli, root: Path) -> None:
    # A copy of step 1's line logged after the agent's next batch. Before,
    # the session (whose call_count replay reads) took it for a call, where
    # read_step had it a copy: replay drew a third call, without a result.
    from dsh_actors.session import Session

    call = call_event(1, 1, "a", "echo", {}, agent="cli")
    log = _log(
        root / "log.jsonl",
        batch_event(1, 1, [("a", "echo", "{}")], agent="cli"),
        call,
        result_event("a", _ok("fine"), turn=1, step=1, agent="cli"),
        batch_event(1, 2, [("b", "echo", "{}")], agent="cli"),
        call_event(1, 2, "b", "echo", {}, agent="cli"),
        call,
        result_event("b", _ok("good"), turn=1, step=2, agent="cli"),
    )
    with Session.open(log) as session:
        assert session.pending_calls() == [] and session.call_count == 2
        assert [c.state for c in session.read_step(1, 1, "cli").calls] == ["settled"]
    replayed = cli("replay", log)
    assert replayed.code == 0 and replayed.err == ""
    assert replayed.out == (
        "── turn 1 · step 1 ──\n✓ a echo\n    fine\n── turn 1 · step 2 ──\n✓ b echo\n    good\n"
        "2 calls: 2 ok, 0 errors\n"
    )


def test_each_reading_appends_each_event_once_to_one_session_as_read(
    cli: Cli, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each of replay's two readings appends each event to one session (its
    # LogTree's, whose call_count tells a copied tool/call line), as read:
    # loads made its values lossless, so append_lossless does not walk them
    # again. Before, each reading appended each event to two sessions (the
    # reader's check and the LogTree's pairing, the second through the
    # checked append): half as much CPU again for a replay.
    from dsh_actors.session import Session

    appended: list[tuple[str, str]] = []
    checked, lossless = Session.append, Session.append_lossless

    def spy_append(self: Session, event: Any) -> None:
        appended.append(("append", event["type"]))
        checked(self, event)

    def spy_append_lossless(self: Session, event: dict[str, Any]) -> None:
        appended.append(("append_lossless", event["type"]))
        lossless(self, event)

    monkeypatch.setattr(Session, "append", spy_append)
    monkeypatch.setattr(Session, "append_lossless", spy_append_lossless)
    call = call_event(1, 1, "a", "echo", {}, agent="cli")
    events = (
        batch_event(1, 1, [("a", "echo", "{}")], agent="cli"),
        call,
        call,  # (a copy of the line: the same call)
        result_event("a", _ok("fine"), turn=1, step=1, agent="cli"),
    )
    replayed = cli("replay", _log(root / "log.jsonl", *events))
    assert replayed.code == 0 and replayed.err == ""
    assert replayed.out == "── turn 1 · step 1 ──\n✓ a echo\n    fine\n1 call: 1 ok, 0 errors\n"
    assert appended == 2 * [("append_lossless", event["type"]) for event in events]


def test_agents_sharing_a_session_each_show_their_step_under_a_header_naming_them(cli: Cli, root: Path) -> None:
    # Two agents number their steps alike and reuse the call id c1: each
    # step is its agent's, in log order (bob's step 1 ran between alice's).
    def step(agent: str, number: int, said: str) -> list[dict[str, Any]]:
        return [
            batch_event(1, number, [("c1", "echo", "{}")], agent=agent),
            call_event(1, number, "c1", "echo", {}, agent=agent),
            result_event("c1", _ok(said), turn=1, step=number, agent=agent),
        ]

    log = _log(root / "log.jsonl", *step("alice", 1, "a1"), *step("bob", 1, "b1"), *step("alice", 2, "a2"))
    replayed = cli("replay", log)
    assert replayed.code == 0 and replayed.err == ""
    assert replayed.out == (
        "── agent alice · turn 1 · step 1 ──\n✓ c1 echo\n    a1\n"
        "── agent bob · turn 1 · step 1 ──\n✓ c1 echo\n    b1\n"
        "── agent alice · turn 1 · step 2 ──\n✓ c1 echo\n    a2\n"
        "3 calls: 3 ok, 0 errors\n"
    )


@pytest.mark.parametrize(
    "last",
    [
        b"[1,2]",
        b'{"a":1}',
        b"12",
        b'"text"',
        b'{"type":""}',
        b'{"type":"tool/start"}',
        b"123456789012345678901234567890",
    ],
)
def test_a_whole_json_last_line_that_is_no_event_is_an_error_as_for_the_session(
    cli: Cli, root: Path, last: bytes
) -> None:
    # Only a line that is not whole JSON can be a torn write: Session.open
    # raises SessionCorruptError for any other bad last line, and replay
    # agrees (it said "a torn last line" and exited 0).
    from dsh_actors.session import Session, SessionCorruptError

    log = _log(root / "log.jsonl", call_event(1, 1, "a", "x", {}), result_event("a", _ok("fine")))
    log.write_bytes(log.read_bytes() + last + b"\n")
    with pytest.raises(SessionCorruptError):
        Session.open(log).close()
    assert_one_line_error(cli("replay", log), "replay", f"{log}:3: ")


@pytest.mark.parametrize(
    ("field", "value"),
    [("step", [1]), ("turn", "one"), ("step", None), ("turn", True), ("step", 1.0)],
)
def test_a_tool_call_line_without_an_int_turn_and_step_is_an_error_naming_its_line(
    cli: Cli, root: Path, field: str, value: Any
) -> None:
    # It was drawn (under "turn -5 · step None", or under no header) and
    # the replay exited 0; a tool/batch line is refused so, by the same rule.
    bad = {**call_event(1, 1, "c2", "x", {}), field: value}
    log = _log(root / "log.jsonl", call_event(1, 1, "c1", "x", {}), result_event("c1", _ok("fine")), bad)
    log.write_bytes(log.read_bytes().replace(b"\n", b"\n\n", 1))  # a blank line: line numbers are not event numbers
    expected = f"{log}:4: bad tool/call event: needs an int turn and step"
    assert_one_line_error(cli("replay", log), "replay", expected)
    batch = {**batch_event(1, 2, [("c3", "x", {})]), field: value}
    _log(log, call_event(1, 1, "c1", "x", {}), batch)
    assert_one_line_error(cli("replay", log), "replay", f"{log}:2: bad tool/batch event: needs an int turn and step")


class _Sink(io.TextIOBase):
    """Standard output that keeps only its last line and a count."""

    def __init__(self) -> None:
        self.lines = 0
        self.last = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.lines += text.count("\n")
        self.last = text
        return len(text)


def _long_log(path: Path, steps: int) -> Path:
    """A crash's call that never got its result, then ``steps`` steps of a
    shell call and a run_code call with one sub-call, each settled."""
    ok = _ok("hello\n[exit code 0]", {"output": "hello\n", "exit_code": 0, "signal": None})
    with path.open("wb") as out:
        out.write(orjson.dumps(call_event(1, 1, "lost", "run_shell", {"command": "true"}, agent="a")) + b"\n")
        for step in range(2, steps + 2):
            shell, code = f"s{step}", f"r{step}"
            calls = [(shell, "run_shell", {"command": "echo hello"}), (code, "run_code", {"code": "return 1"})]
            events = [batch_event(1, step, calls, agent="a")]
            for call_id, name, arguments in calls:
                events.append(call_event(1, step, call_id, name, arguments, agent="a"))
                events.append(start_event(call_id, 1, step, agent="a"))
            sub = f"{code}:ptc:1"
            events.append(ptc_dispatch_start_event(code, code, sub, "run_shell", {"command": "echo hello"}))
            events.append(ptc_dispatch_event(code, code, sub, "run_shell", False, [text("hello")], None, None))
            events.append(result_event(shell, ok, turn=1, step=step, agent="a"))
            events.append(result_event(code, _ok("1"), turn=1, step=step, agent="a"))
            out.write(b"".join(orjson.dumps(e) + b"\n" for e in events))
    return path


def _replay_peak(log: Path, steps: int, monkeypatch: pytest.MonkeyPatch) -> int:
    """The peak of the memory a replay of ``log`` allocated (tracemalloc)."""
    sink = _Sink()
    monkeypatch.setattr(sys, "stdout", sink)
    tracemalloc.start()
    try:
        code = main(["replay", str(log)])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert code == 0
    assert sink.last == (
        f"{2 * steps + 1} calls: {2 * steps} ok, 0 errors, 1 without a result (1 never started) ({steps} nested calls)\n"
    )
    assert sink.lines == 2 + 8 * steps + 1  # the lost call under its header, 8 lines a step, the summary
    return peak


def test_replay_holds_what_is_open_in_the_log_not_the_whole_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It held all of it, about 1.4 KB a line: the bytes, every line, every
    # event (twice in sessions), every call and every line drawn, at once.
    # Even behind a call that never gets its result, each call is drawn
    # once it is complete and forgotten.
    short, long = 30, 120
    short_log, long_log = _long_log(tmp_path / "short.jsonl", short), _long_log(tmp_path / "long.jsonl", long)
    _replay_peak(short_log, short, monkeypatch)  # (what the first replay imports and caches)
    lines = (long - short) * 10  # 10 lines a step
    growth = _replay_peak(long_log, long, monkeypatch) - _replay_peak(short_log, short, monkeypatch)
    assert growth < lines * 20, f"{growth} bytes more for {lines} more lines"


def test_calls_logged_after_a_call_without_its_result_wait_for_it_and_keep_their_order(cli: Cli, root: Path) -> None:
    log = _log(
        root / "log.jsonl",
        call_event(1, 1, "slow", "x", {}),
        call_event(1, 2, "quick", "x", {}),
        result_event("quick", _ok("first done"), turn=1, step=2),
        ptc_dispatch_start_event("slow", "slow", "slow:ptc:1", "y", {}),
        result_event("slow", _ok("last done"), turn=1, step=1),
        ptc_dispatch_event("slow", "slow", "slow:ptc:1", "y", False, [text("nested")], None, None),
        call_event(1, 3, "never", "x", {}),
        call_event(1, 4, "after", "x", {}),
        result_event("after", _ok("after it"), turn=1, step=4),
    )
    replayed = cli("replay", log)
    assert replayed.code == 0 and replayed.err == ""
    assert replayed.out == (
        "── turn 1 · step 1 ──\n"
        "✓ slow x\n"
        "    ✓ slow:ptc:1 y\n"
        "        nested\n"
        "    last done\n"
        "── turn 1 · step 2 ──\n"
        "✓ quick x\n"
        "    first done\n"
        "── turn 1 · step 3 ──\n"
        "· never x  never started (no tool/start logged)\n"
        "── turn 1 · step 4 ──\n"
        "✓ after x\n"
        "    after it\n"
        "4 calls: 3 ok, 0 errors, 1 without a result (1 never started) (1 nested call)\n"
    )


def test_a_log_read_from_a_pipe_replays_as_from_a_file(cli: Cli, root: Path) -> None:
    # (The log is read twice: a pipe's bytes are copied to a temporary file.)
    log = _log(root / "log.jsonl", call_event(1, 1, "a", "x", {}), result_event("a", _ok("fine")))
    fifo = root / "log.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=fifo.write_bytes, args=(log.read_bytes(),))
    writer.start()
    try:
        replayed = cli("replay", fifo)
    finally:
        if writer.is_alive():  # (in case the replay never opened the pipe: let the writer go)
            os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
        writer.join()
    assert (replayed.code, replayed.err) == (0, "")
    assert replayed.out == cli("replay", log).out == "── turn 1 · step 1 ──\n✓ a x\n    fine\n1 call: 1 ok, 0 errors\n"
