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


def _fake_benchmarks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, main: str) -> None:
    """A benchmarks package ``name`` whose ``__main__`` is ``main``, the one
    ``bench`` runs."""
    package = tmp_path / name
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text(main)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(cli_main, "BENCH_PACKAGE", name)


def test_bench_runs_the_benchmarks_main_with_its_arguments(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_benchmarks(
        tmp_path,
        monkeypatch,
        "fake_benchmarks_for_the_cli",
        "import sys\nprint('args', sys.argv[1:], __name__)\nraise SystemExit(3 if '--fail' in sys.argv else 0)\n",
    )
    argv_before = list(sys.argv)
    outcome = cli("bench", "--quick", "--json", "out.json")
    assert outcome.code == 0
    assert outcome.out == "args ['--quick', '--json', 'out.json'] __main__\n"  # as python -m runs it
    assert cli("bench", "--fail").code == 3
    assert sys.argv == argv_before, "sys.argv is restored"


@pytest.mark.parametrize(
    "argv",
    [
        ["-v", "bench", "--quick"],
        ["--verbose", "bench", "--quick"],
        ["bench", "-v", "--quick"],
        ["bench", "--quick", "--verbose"],
        ["-v", "bench", "-v", "--quick"],
    ],
)
def test_bench_takes_verbose_before_or_after_its_name_and_does_not_forward_it(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    # "Every command takes -v/--verbose (before or after the command name)":
    # bench took it nowhere (KeyError: 'bench', a usage error, or the
    # benchmarks refusing it).
    _fake_benchmarks(
        tmp_path,
        monkeypatch,
        "fake_benchmarks_verbose",
        "import sys\nfrom loguru import logger\nlogger.debug('a debug message')\nprint('args', sys.argv[1:])\n",
    )
    outcome = cli(*argv)
    assert (outcome.code, outcome.out) == (0, "args ['--quick']\n"), outcome
    assert "a debug message" in outcome.err  # -v: the messages from DEBUG up
    quiet = cli("bench", "--quick")
    assert (quiet.code, quiet.out, quiet.err) == (0, "args ['--quick']\n", "")


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


@pytest.mark.parametrize("module", ["dsh_actors", "dsh_actors.cli"])
def test_python_m_runs_the_command_by_either_name(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: dsh-actors")


REPO = Path(__file__).resolve().parents[2]


def test_only_the_three_libraries_are_packaged() -> None:
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert config["tool"]["setuptools"]["packages"]["find"]["include"] == ["dsh_actors*", "executors*", "policies*"]
    from importlib import metadata

    top_level = metadata.distribution("dsh-actors").read_text("top_level.txt")
    if top_level is not None:  # the installed distribution says the same
        assert sorted(top_level.split()) == ["dsh_actors", "executors", "policies"]


def test_bench_finds_the_benchmarks_of_the_checkout_it_runs_in(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkout = tmp_path / "checkout"
    (checkout / "fake_benchmarks_in_the_cwd").mkdir(parents=True)
    (checkout / "fake_benchmarks_in_the_cwd" / "__init__.py").write_text("")
    (checkout / "fake_benchmarks_in_the_cwd" / "__main__.py").write_text("print('ran from the checkout')\n")
    monkeypatch.chdir(checkout)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(checkout))])
    monkeypatch.setattr(cli_main, "BENCH_PACKAGE", "fake_benchmarks_in_the_cwd")
    outcome = cli("bench")
    assert outcome.code == 0 and outcome.out == "ran from the checkout\n"


def test_dev_help_names_the_benchmark_as_the_main_job_lists_every_command_and_no_code() -> None:
    done = subprocess.run([str(REPO / "dev"), "help"], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "./dev bench [ARGS]    the main job" in text
    for command in ("bench", "test", "setup", "demo", "mypy", "python", "help"):
        assert f"./dev {command}" in text
    for code in ("set -euo", "here=", "$(", "case ", "esac"):
        assert code not in text, f"help prints the script's code: {code!r}"
    unknown = subprocess.run(
        [str(REPO / "dev"), "no-such-command"], capture_output=True, text=True, timeout=30, check=False
    )
    assert unknown.returncode == 1 and unknown.stdout == text


def test_bench_help_shows_the_benchmarks_own_usage_with_every_section() -> None:
    script = Path(sys.executable).parent / "dsh-actors"
    if not script.exists():
        pytest.skip("the dsh-actors console script is not installed (./dev setup installs it)")
    from benchmarks.__main__ import SECTIONS

    done = subprocess.run([str(script), "bench", "--help"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: dsh-actors bench [-h] [--quick]")
    only = " ".join(done.stdout.split("--only SECTION [SECTION ...]")[-1].split())
    assert f"run only these sections: {', '.join(SECTIONS)}" in only
    readme = (REPO / "benchmarks" / "README.md").read_text()
    assert f"# some sections ({', '.join(SECTIONS)})" in readme
