"""The README's contract with a newcomer: its first code block holds exactly
the two commands, and its first Python example runs as written."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), re.S)


def test_the_first_code_block_is_the_main_job_then_the_tests() -> None:
    first = re.search(r"```\w*\n(.*?)```", README.read_text(), re.S)
    assert first is not None
    assert first.group(1).strip().splitlines() == ["./dev bench --quick", "./dev test"]


def test_ci_runs_the_readme_test_command() -> None:
    ci = (README.parent / ".ci" / "run").read_text()
    assert "./dev test" in ci.splitlines()


def test_the_first_use_example_runs_as_written(capsys: object) -> None:
    example = next(b for b in blocks("python") if b.startswith("from dsh_actors import"))
    namespace: dict[str, object] = {}
    exec(compile(example, "README.md", "exec"), namespace)  # noqa: S102
