"""Fixtures for the command-line tests: the CLI run in-process, a root
folder for the example tools, tool modules written on the fly, a pipe
as standard input (``piped_stdin``), and the command run as a process of
its own (``run_cli``, ``started_cli``)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from dsh_actors.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@dataclass(frozen=True)
class Outcome:
    """What one ``dsh-actors`` invocation did."""

    code: int
    out: str
    err: str


Cli = Callable[..., Outcome]


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test leaves ``sys.path`` as it was, runs without colour by
    default, and leaves no thread running (each command stops its runtime)."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delenv("NO_COLOR", raising=False)
    before = set(threading.enumerate())
    yield
    leaked = [
        t for t in set(threading.enumerate()) - before if t.is_alive() and not t.name.startswith("pytest_timeout")
    ]
    for thread in leaked:
        thread.join(5.0)
    assert not [t.name for t in leaked if t.is_alive()], "a command left threads running"


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty project folder: the current directory and the examples' root."""
    folder = tmp_path / "project"
    folder.mkdir()
    monkeypatch.chdir(folder)
    monkeypatch.setenv("DSH_EXAMPLES_ROOT", str(folder))
    return folder


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    """``cli("run", "batch.json", ...)`` runs ``main`` in-process."""

    def run(*argv: str) -> Outcome:
        capsys.readouterr()
        code = main([str(a) for a in argv])
        captured = capsys.readouterr()
        return Outcome(code, captured.out, captured.err)

    return run


@pytest.fixture
def write_module(tmp_path: Path) -> Callable[[str, str], Path]:
    """``write_module("name", source)`` writes ``name.py`` in a folder of its
    own and returns its path (give ``--tools`` the path: no import cache)."""

    def write(name: str, source: str) -> Path:
        folder = tmp_path / "modules"
        folder.mkdir(exist_ok=True)
        path = folder / f"{name}.py"
        path.write_text(textwrap.dedent(source))
        return path

    return write


def assert_one_line_error(outcome: Outcome, command: str, *fragments: str) -> None:
    """A failure that says why in one line, with no traceback."""
    assert outcome.code == 1, outcome
    assert outcome.out == ""
    lines = outcome.err.splitlines()
    assert len(lines) == 1, outcome.err
    assert lines[0].startswith(f"dsh-actors {command}: error: "), outcome.err
    assert "Traceback" not in outcome.err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


class PipedStdin:
    """A pipe as ``sys.stdin``, as a shell's ``|`` gives it: the prompt waits
    on its descriptor until a line comes (or the write end is closed)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        read_end, self.write_end = os.pipe()
        self.stream = os.fdopen(read_end, "r")
        monkeypatch.setattr(sys, "stdin", self.stream)

    def send(self, text: str) -> None:
        os.write(self.write_end, text.encode())

    def close(self) -> None:
        """End of input (once; later calls do nothing)."""
        if self.write_end >= 0:
            os.close(self.write_end)
            self.write_end = -1


@pytest.fixture
def piped_stdin(monkeypatch: pytest.MonkeyPatch) -> Iterator[PipedStdin]:
    stdin = PipedStdin(monkeypatch)
    try:
        yield stdin
    finally:
        stdin.close()
        stdin.stream.close()


def run_cli(*argv: object, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m dsh_actors.cli ARGV`` run to its end in ``cwd``, with no
    input, its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "dsh_actors.cli", *map(str, argv)],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def started_cli(command: Sequence[str], cwd: Path, env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
    """``command`` (a dsh-actors command line) started in ``cwd`` with no
    input and its output piped, returned once a tool body says ``body
    started`` on its stderr (killed if it says anything else first)."""
    proc = subprocess.Popen(
        list(command),
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        assert proc.stderr.readline() == "body started\n"
    except BaseException:
        proc.kill()
        proc.communicate(timeout=30)
        raise
    return proc
