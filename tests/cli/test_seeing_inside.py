"""``dsh-actors run`` shows the progress of running calls on stderr, and
``-v`` (``run`` and ``replay``) shows the traceback of a tool that raised."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .conftest import Cli

TOOLS = """
from dsh_actors import ToolOutput, define_tool, text

def copy(args, ctx):
    for i in range(1, 3):
        ctx.report_progress(i, total=4, message=f"file {i}")
    ctx.report_progress(3)
    return "copied"

def retitle(args, ctx):
    ctx.report_progress(1, message="\x1b]0;RETITLED\x07\x1b[2J\tcleared")
    return "done"

def explode(args, ctx):
    return helper_that_divides()

def helper_that_divides():
    return 1 / 0

def complain(args, ctx):
    raise ValueError("first line\\nsecond line")

OUT = ToolOutput(schema={"type": "string"}, render=lambda a, v: [text(v)])
TOOLS = [
    define_tool(name="copy", description="Copy files.", parameters={}, output=OUT, execute=copy),
    define_tool(name="retitle", description="Drive the terminal.", parameters={}, output=OUT, execute=retitle),
    define_tool(name="explode", description="Fail.", parameters={}, output=OUT, execute=explode),
    define_tool(name="complain", description="Fail in two lines.", parameters={}, output=OUT, execute=complain),
]
"""


def batch(folder: Path, *names: str) -> Path:
    path = folder / "batch.json"
    path.write_text(json.dumps({"calls": [{"id": f"c{i}", "name": n, "arguments": {}} for i, n in enumerate(names)]}))
    return path


def test_run_shows_each_progress_report_on_stderr(cli: Cli, root: Path, write_module: Any) -> None:
    tools = write_module("progress_tools", TOOLS)
    outcome = cli("run", batch(root, "copy"), "--tools", tools)
    assert outcome.code == 0, outcome.err
    assert outcome.err.splitlines() == [
        "… c0 copy: 1/4 (25%) file 1",
        "… c0 copy: 2/4 (50%) file 2",
        "… c0 copy: 3",
    ]
    assert "✓ c0 copy" in outcome.out


def test_a_progress_message_cannot_drive_the_terminal(cli: Cli, root: Path, write_module: Any) -> None:
    tools = write_module("progress_tools", TOOLS)
    outcome = cli("run", batch(root, "retitle"), "--tools", tools)
    assert outcome.code == 0, outcome.err
    assert outcome.err == "… c0 retitle: 1 \\x1b]0;RETITLED\\x07\\x1b[2J\tcleared\n"


def test_run_names_a_failing_tool_and_shows_its_traceback_with_v(
    cli: Cli, root: Path, write_module: Any, tmp_path: Path
) -> None:
    tools = write_module("failing_tools", TOOLS)
    quiet = cli("run", batch(root, "explode"), "--tools", tools)
    assert quiet.code == 0
    assert quiet.err == 'dsh-actors: ERROR: tool "explode" (call c0) failed: division by zero\n'
    assert "Traceback" not in quiet.out
    log = tmp_path / "run.jsonl"
    verbose = cli("-v", "run", batch(root, "explode"), "--tools", tools, "--log", log)
    assert verbose.code == 0
    assert "helper_that_divides" in verbose.err  # the log record's traceback
    assert "ZeroDivisionError: division by zero" in verbose.out  # under the call's card
    replay = cli("replay", log)
    assert "helper_that_divides" not in replay.out
    replay_v = cli("replay", "-v", log)
    assert "helper_that_divides" in replay_v.out and "ZeroDivisionError: division by zero" in replay_v.out


def test_a_failure_message_of_several_lines_is_one_line_on_stderr(cli: Cli, root: Path, write_module: Any) -> None:
    tools = write_module("complaining_tools", TOOLS)
    outcome = cli("run", batch(root, "complain"), "--tools", tools)
    assert outcome.code == 0
    assert outcome.err == 'dsh-actors: ERROR: tool "complain" (call c0) failed: first line | second line\n'


@pytest.mark.parametrize("verbose", [False, True])
def test_another_library_s_stdlib_logging_is_one_line_with_its_traceback_only_with_v(
    verbose: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    # (The MCP SDK logs a server's non-JSON stdout line with
    # logging.exception: with no handler, Python's last resort printed its
    # whole traceback under a command that promises one line.) What a
    # handler handles (an application's, a tools module's basicConfig) is
    # left to it: nothing prints twice.
    import logging

    from dsh_actors.cli.main import library_logging

    unhandled = logging.getLogger("mcp.client.stdio.test")
    unhandled.propagate = False  # (no handler on its way: what the command's process has)
    kept, unhandled.handlers = unhandled.handlers, []  # (pytest's own capture may sit there)
    handled = logging.getLogger("handled.test")
    handled.propagate = False
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    handled.addHandler(handler)
    before = logging.lastResort
    try:
        with library_logging(verbose):
            try:
                raise ValueError("Invalid JSON: expected value at line 1 column 1")
            except ValueError:
                unhandled.exception("Failed to parse JSONRPC message from server")
            unhandled.info("not shown")
            handled.warning("its own handler's")
    finally:
        handled.removeHandler(handler)
        unhandled.handlers = kept
    err = capsys.readouterr().err
    assert err.startswith("dsh-actors: ERROR: mcp.client.stdio.test: Failed to parse JSONRPC message from server\n")
    assert "not shown" not in err and "its own handler's" not in err and seen == ["its own handler's"]
    assert ("Traceback (most recent call last)" in err) is verbose
    assert logging.lastResort is before
