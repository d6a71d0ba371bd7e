"""The README's contract with a newcomer: its first code block holds exactly
the two commands, its first Python example runs as written, and so do all
its Python blocks, in order, in one namespace (as a reader pasting them
into one session would run them)."""

from __future__ import annotations

import ast
import builtins
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai.types.chat import ChatCompletion
from scheduling.helpers import assert_no_new_threads, live_threads

README = Path(__file__).resolve().parents[1] / "README.md"


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), re.S)


@pytest.fixture
def namespace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """A namespace to run README blocks in, from an empty folder (they may
    write files such as trace.json); any runtime they left running is
    stopped afterwards, and no thread may survive that."""
    monkeypatch.chdir(tmp_path)
    # As from the checkout's root, where the README's commands run: `python
    # -m examples...` finds the examples (run from the checkout, not
    # installed), also in a subprocess that gets a minimal environment.
    (tmp_path / "examples").symlink_to(README.parent / "examples", target_is_directory=True)
    before = live_threads()
    names: dict[str, Any] = {"__name__": "readme"}
    try:
        yield names
    finally:
        rt = names.get("rt")
        if rt is not None:
            rt.stop()
    assert_no_new_threads(before)


def run(block: str, names: dict[str, Any]) -> None:
    exec(compile(block, "README.md", "exec"), names)  # noqa: S102


def test_the_first_code_block_is_the_main_job_then_the_tests() -> None:
    first = re.search(r"```\w*\n(.*?)```", README.read_text(), re.S)
    assert first is not None
    assert first.group(1).strip().splitlines() == ["./dev bench --quick", "./dev test"]


def test_ci_runs_the_readme_test_command() -> None:
    ci = (README.parent / ".ci" / "run").read_text()
    assert "./dev test" in ci.splitlines()


def test_the_first_use_example_runs_as_written(namespace: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    example = next(b for b in blocks("python") if b.startswith("from dsh_actors import"))
    assert "providers import openai" in example
    run(example, namespace)
    assert "tool/result" in capsys.readouterr().out


def test_every_python_block_runs_in_order_in_one_namespace(namespace: dict[str, Any]) -> None:
    python = blocks("python")
    assert len(python) >= 5
    for index, block in enumerate(python):
        try:
            run(block, namespace)
        except Exception as exc:
            raise AssertionError(f"README Python block {index + 1} failed:\n{block}") from exc
    assert (Path.cwd() / "trace.json").exists()
    assert not namespace["rt"].running  # the last snippets stop it
    # A reader may run them again from the same checkout: the blocks that
    # write a session log start from a fresh one.
    for index, block in enumerate(python):
        if ".jsonl" in block:
            try:
                run(block, namespace)
            except Exception as exc:
                raise AssertionError(f"README Python block {index + 1} failed when run again:\n{block}") from exc
    # What the blocks write where a reader runs them (the checkout) stays out of git.
    written = sorted(path.name for path in Path.cwd().iterdir() if path.name != "examples")
    assert written
    kept = [name for name in written if not _git_ignored(name)]
    assert not kept, f"README blocks write files that .gitignore does not ignore: {kept}"


def _git_ignored(name: str) -> bool:
    found = subprocess.run(["git", "check-ignore", "-q", "--no-index", name], cwd=README.parent, check=False)
    assert found.returncode in (0, 1), f"git check-ignore failed on {name!r}"
    return found.returncode == 0


def _free_names(block: str) -> set[str]:
    """The names a block uses without importing, defining or assigning them
    (builtins aside): what it needs from the blocks before it."""
    bound: set[str] = set(dir(builtins))
    used: set[str] = set()
    for node in ast.walk(ast.parse(block)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):  # parameters, of functions and lambdas
            bound.add(node.arg)
        elif isinstance(node, ast.Name):  # assignments, loop, with and comprehension targets
            (used if isinstance(node.ctx, ast.Load) else bound).add(node.id)
    return used - bound


@pytest.mark.parametrize("section", ["## Ray: past one machine"])
def test_a_sections_first_block_imports_what_it_uses(section: str) -> None:
    """A reader who jumps to a section pastes its first block alone."""
    text = README.read_text()
    block = re.search(rf"{re.escape(section)}\n.*?```python\n(.*?)```", text, re.S)
    assert block is not None, section
    assert _free_names(block.group(1)) == set()


def test_the_loop_of_the_first_use_runs_against_a_chat_client(namespace: dict[str, Any]) -> None:
    python = blocks("python")
    first_use = python[0]
    loop = next(block for block in python if block.startswith("def agent_turn("))
    run(first_use, namespace)
    run(loop, namespace)

    class Completions:
        """A scripted client.chat.completions: one add call, then an answer."""

        def __init__(self) -> None:
            self.requests: list[dict[str, Any]] = []

        def create(self, **request: Any) -> ChatCompletion:
            self.requests.append(request)
            if len(self.requests) == 1:
                call = {
                    "id": "call_3",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 4, "b": 5}'},
                }
                message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call]}
            else:
                message = {"role": "assistant", "content": "It is 9."}
            return ChatCompletion.model_validate({
                "id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": 1, "model": request["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}],
            })  # fmt: skip

    class Client:
        class chat:  # noqa: N801 - the SDK's attribute names
            completions = Completions()

    messages = namespace["messages"]
    answer = namespace["agent_turn"](Client(), "gpt-4.1", messages, 2)
    assert answer == "It is 9."
    assert messages[-2] == {"role": "tool", "tool_call_id": "call_3", "content": "9"}
    requests = Client.chat.completions.requests
    assert [t["function"]["name"] for t in requests[0]["tools"]] == ["fetch", "add"]
    logged = [e for e in namespace["agent"].session.events() if e["type"] == "tool/call"]
    assert [(e["call_id"], e["turn"], e["step"]) for e in logged] == [
        ("call_1", 1, 1),
        ("call_2", 1, 1),
        ("call_3", 2, 1),
    ]


def test_the_first_uses_two_tools_take_no_more_lines_than_in_the_peers() -> None:
    # pydantic-ai, the OpenAI Agents SDK and LangGraph write the same two tools
    # (an async fetch, a sync add) in 9 lines, blank lines aside.
    first_use = blocks("python")[0]
    tools = first_use[first_use.index("@tool") : first_use.index("rt = ToolRuntime")]
    lines = [line for line in tools.splitlines() if line.strip()]
    assert len(lines) <= 9, lines


def test_the_quick_benchmark_and_the_first_install_take_the_same_time_in_every_document() -> None:
    docs = {name: " ".join((README.parent / name).read_text().split()) for name in ("README.md", "dev", "benchmarks/README.md")}  # fmt: skip
    quick = {
        "README.md": re.findall(r"quick mode, (\d+–\d+) s|`\./dev bench --quick` \((\d+–\d+) s\)", docs["README.md"]),
        "dev": re.findall(r"--quick: (\d+–\d+) s", docs["dev"]),
        "benchmarks/README.md": re.findall(r"\./dev bench --quick # (\d+–\d+) s", docs["benchmarks/README.md"]),
    }
    said = {"".join(match) for matches in quick.values() for match in matches}
    assert all(quick.values()) and len(said) == 1, quick
    assert not any("under a minute" in text for text in docs.values())
    install = {name: re.findall(r"the first install takes about (\d+) s", text) for name, text in docs.items()}
    assert all(install.values()) and len({s for found in install.values() for s in found}) == 1, install


def test_the_mcp_block_runs_where_stderr_has_no_file_descriptor() -> None:
    """As in a notebook: a fresh interpreter whose ``sys.stderr`` had no file
    descriptor before anything was imported (so neither has the MCP SDK's
    default ``errlog``). A failure's traceback goes to the real stderr."""
    block = next(b for b in blocks("python") if "stdio_client" in b)
    notebook = (
        "import io, sys, traceback\n"
        "sys.stderr = io.StringIO()\n"
        "try:\n"
        f"    exec(compile({block!r}, 'README.md', 'exec'), {{'__name__': 'readme'}})\n"
        "except BaseException:\n"
        "    traceback.print_exc(file=sys.__stderr__)\n"
        "    raise SystemExit(1)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", notebook], cwd=README.parent, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "must be >= 1" in done.stdout
