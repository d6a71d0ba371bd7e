"""``dsh-actors bench`` forwards to ``python -m benchmarks``; the console
script is installed."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import Cli, assert_one_line_error

cli_main = importlib.import_module("dsh_actors.cli.main")  # the module (the package exports the function)


def test_bench_runs_the_benchmarks_main_with_its_arguments(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "fake_benchmarks_for_the_cli"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text(
        "import sys\nprint('args', sys.argv[1:], __name__)\nraise SystemExit(3 if '--fail' in sys.argv else 0)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(cli_main, "BENCH_PACKAGE", "fake_benchmarks_for_the_cli")
    argv_before = list(sys.argv)
    outcome = cli("bench", "--quick", "--json", "out.json")
    assert outcome.code == 0
    assert outcome.out == "args ['--quick', '--json', 'out.json'] __main__\n"  # as python -m runs it
    assert cli("bench", "--fail").code == 3
    assert sys.argv == argv_before, "sys.argv is restored"


def test_bench_without_the_benchmarks_is_a_one_line_error(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_main, "BENCH_PACKAGE", "no_benchmarks_here")
    assert_one_line_error(cli("bench", "--quick"), "bench", "the benchmarks are not installed")


def test_the_installed_console_script_prints_its_help() -> None:
    script = Path(sys.executable).parent / "dsh-actors"
    if not script.exists():
        pytest.skip("the dsh-actors console script is not installed (./dev setup installs it)")
    done = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: dsh-actors")
    for command in ("run", "schemas", "replay", "bench"):
        assert command in done.stdout
