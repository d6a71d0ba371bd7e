"""``./dev demo`` (``dsh_actors.demo``): what it prints agrees with itself
and shows every message whole."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from dsh_actors import demo


def test_the_header_time_covers_the_schedule_and_no_message_is_cut(capsys: pytest.CaptureFixture[str]) -> None:
    demo.main()
    out = capsys.readouterr().out
    header = re.search(r"one batch of 7 calls, cap 3, in ([\d.]+) ms", out)
    assert header is not None, out
    schedule = out.split("schedule (ms since")[1].split("\n\n")[0]
    times = [float(at) for at in re.findall(r"^\s+([\d.]+)  c\d (?:start|end)$", schedule, re.M)]
    assert len(times) == 2 * 4  # c1 to c4 start and end (c5 is denied, c6 invalid, c7 unknown)
    assert max(times) <= float(header.group(1))
    # The INVALID_ARGS row wraps at a word boundary: its message is all there.
    joined = " ".join(out.split())
    assert 'Error: invalid arguments: "value.url" must be a string; missing required property "value.ms"' in joined


def test_the_aborted_batch_s_rows_name_their_tools(capsys: pytest.CaptureFixture[str]) -> None:
    demo.main()
    aborted = capsys.readouterr().out.split("an aborted batch:")[1].split("\n\n")[0]
    rows = [line.split()[:3] for line in aborted.splitlines()[1:]]
    assert rows == [["a1", "fetch", "ok"], ["a2", "write_file", "error"], ["a3", "fetch", "error"]]


def _demo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dsh_actors.demo", *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_help_describes_the_demo_and_exits_0_without_running_it(capsys: pytest.CaptureFixture[str]) -> None:
    # In this process: the test below runs the command line as a process.
    with pytest.raises(SystemExit) as exited:
        demo.main(["--help"])
    done = capsys.readouterr()
    assert exited.value.code == 0 and done.err == ""
    assert done.out.startswith("usage: python -m dsh_actors.demo [-h]\n")
    assert "A two-second tour of dsh-actors (./dev demo)" in done.out
    assert "dsh-actors demo:" not in done.out and "session log:" not in done.out  # (it ran the tour)


def test_an_unknown_argument_is_refused_naming_it_with_exit_2() -> None:
    done = _demo("--quick", "x")
    assert done.returncode == 2 and done.stdout == ""  # (it ignored them and ran the tour)
    assert "error: unrecognized arguments: --quick x" in done.stderr
