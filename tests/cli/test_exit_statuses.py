"""How every command ends when it cannot end normally: Ctrl-C (130, in
any command and while the commands load) and standard output that is
closed or cannot be written (74), each with one line and no traceback."""

from __future__ import annotations

import errno
import io
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .conftest import EXAMPLES, Cli

BATCH = EXAMPLES / "batch.json"


def _interrupt_when_ready(command: list[str], cwd: Path, ready: str) -> tuple[int, str, str]:
    """Start ``command``; once it prints the line ``ready`` (it then waits
    on its stdin, which stays open), send it SIGINT; its exit status and
    output."""
    process = subprocess.Popen(
        command, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line == ready + "\n", (line, process.stderr.read() if process.stderr else "")
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return process.returncode, out, err


def test_ctrl_c_during_bench_exits_130_with_one_line(tmp_path: Path) -> None:
    # bench was not under the command's handler: a KeyboardInterrupt
    # traceback, and the process killed by the signal.
    benchmarks = tmp_path / "benchmarks"
    benchmarks.mkdir()
    (benchmarks / "__init__.py").write_text("")
    (benchmarks / "__main__.py").write_text(
        "import sys\nprint('benchmarks running', flush=True)\nsys.stdin.readline()\n"
    )
    code, out, err = _interrupt_when_ready(
        [sys.executable, "-m", "dsh_actors.cli", "bench", "--quick"], tmp_path, "benchmarks running"
    )
    assert (code, out, err) == (130, "", "dsh-actors bench: error: interrupted\n")


#: Runs the command in-process as its console script does, after making the
#: import of its ``run`` module wait for the test's Ctrl-C.
STALLED_IMPORT = """
import sys

class Stall:
    def find_spec(self, name, path=None, target=None):
        if name == "dsh_actors.cli.run":
            print("importing dsh_actors.cli.run", flush=True)
            sys.stdin.readline()
        return None

sys.meta_path.insert(0, Stall())
from dsh_actors.cli.main import main
raise SystemExit(main(["run", "batch.json", "--tools", "examples.tools"]))
"""


def test_ctrl_c_while_the_commands_load_exits_130_with_one_line(tmp_path: Path) -> None:
    # The handler is in place before the entry module imports the commands:
    # dsh_actors.cli.main imported them first, so a Ctrl-C meanwhile (a good
    # part of the start-up) was a traceback.
    code, out, err = _interrupt_when_ready(
        [sys.executable, "-c", textwrap.dedent(STALLED_IMPORT)], tmp_path, "importing dsh_actors.cli.run"
    )
    assert (code, out, err) == (130, "", "dsh-actors run: error: interrupted\n")


@pytest.mark.parametrize(
    "argv",
    [
        ["run", str(BATCH), "--tools", "examples.tools"],
        ["schemas", "--tools", "examples.tools"],
        ["replay", "log.jsonl"],
        ["bench"],
    ],
)
def test_a_closed_standard_output_is_one_line_and_exit_74_and_nothing_runs(
    cli: Cli, root: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    # It was "internal error: AttributeError: 'NoneType' object has no
    # attribute 'write'" (after the batch ran). Python starts with
    # sys.stdout None when its standard output is closed (>&-).
    (root / "log.jsonl").write_text("")
    with monkeypatch.context() as patch:
        patch.setattr(sys, "stdout", None)
        outcome = cli(*argv)
    assert outcome.code == 74
    assert outcome.err == (
        f"dsh-actors {argv[0]}: error: standard output is closed, so nothing could be shown; "
        "give the command somewhere to write (a file, a pipe, or /dev/null)\n"
    )
    assert not (root / "scratch").exists(), "the batch ran"


class _FullDisk(io.StringIO):
    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")


def test_results_that_cannot_be_written_are_one_line_and_exit_74_naming_the_log(
    cli: Cli, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It was "internal error: OSError: [Errno 28] No space left on device".
    with monkeypatch.context() as patch:
        patch.setattr(sys, "stdout", _FullDisk())
        outcome = cli("run", BATCH, "--tools", "examples.tools", "--log", "run.jsonl")
    assert outcome.code == 74
    assert outcome.err == (
        "dsh-actors run: error: cannot write standard output: the disk is full (No space left on device); "
        "the batch ran; dsh-actors replay run.jsonl shows its results\n"
    )
    assert (root / "scratch" / "hello.py").exists()


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_standard_output_on_a_full_device_is_one_line_and_exit_74(tmp_path: Path) -> None:
    # A process of its own: what Python says when it flushes standard
    # output at exit is part of what the user sees.
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "dsh_actors.cli", "schemas", "--tools", "examples.tools"],
            cwd=EXAMPLES.parent,
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    assert (done.returncode, done.stderr) == (
        74,
        "dsh-actors schemas: error: cannot write standard output: the disk is full (No space left on device)\n",
    )
