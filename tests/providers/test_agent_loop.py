"""examples/agent_loop.py: the scripted three-step loop in both wire formats."""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path

import pytest
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming

from examples import agent_loop

from .helpers import validate

REPO = Path(__file__).resolve().parents[2]


def test_the_openai_loop_reads_searches_writes_and_logs_each_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    messages, events = agent_loop.main("openai", tmp_path)
    assert (tmp_path / "todo.md").read_text() == "- tests\n- docs\n"
    assert [m["role"] for m in messages] == ["user"] + ["assistant", "tool"] * 3 + ["assistant"]
    assert messages[-1]["content"] == "Done: see todo.md."
    assert [(e["type"], e.get("call_id")) for e in events] == [
        (kind, None if kind == "tool/batch" else f"call_{n}")
        for n in range(3)
        for kind in ("tool/batch", "tool/call", "tool/start", "tool/result")
    ]
    assert [e["name"] for e in events if e["type"] == "tool/call"] == ["read_file", "search_text", "write_file"]
    assert not any(e["is_error"] for e in events if e["type"] == "tool/result")
    validate(CompletionCreateParamsNonStreaming, {"model": "gpt-4.1", "messages": messages}, exact=False)
    out = capsys.readouterr().out
    assert '"tool_call_id": "call_2", "content": "created todo.md (15 bytes)"' in out
    assert "tool/result  call_2   ok" in out and "tool/batch   step 3: call_2" in out


def test_the_anthropic_loop_speaks_tool_use_and_tool_result(tmp_path: Path) -> None:
    messages, events = agent_loop.main("anthropic", tmp_path)
    assert (tmp_path / "todo.md").exists()
    assert [m["role"] for m in messages] == ["user"] + ["assistant", "user"] * 3 + ["assistant"]
    assert [b["tool_use_id"] for m in messages[2::2] for b in m["content"]] == ["toolu_0", "toolu_1", "toolu_2"]
    assert len(events) == 12
    validate(
        MessageCreateParamsNonStreaming,
        {"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": messages},
        exact=False,
    )


def test_the_approval_policy_guards_the_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = [*agent_loop.PLAN[:2], ("write_file", {"path": "todo.txt", "content": "x"})]
    monkeypatch.setattr(agent_loop, "PLAN", plan)
    messages, events = agent_loop.main("openai", tmp_path)
    assert not (tmp_path / "todo.txt").exists()
    assert messages[6] == {
        "role": "tool",
        "tool_call_id": "call_2",
        "content": 'Error: the user rejected tool "write_file"',
    }
    assert events[-1]["is_error"] is True


def test_python_dash_m_runs_the_loop_in_either_shape(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # One process proves that `python -m` runs it; the other shape's
    # --provider reaches main() as well run as __main__ in this process.
    done = subprocess.run(
        [sys.executable, "-m", "examples.agent_loop"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert '"role": "tool"' in done.stdout and "tool/result  " in done.stdout
    code, out, err = _run_as_main(monkeypatch, capsys, "--provider", "anthropic")
    assert code is None, err  # (it ends without sys.exit, as the process above: status 0)
    assert '"type": "tool_result"' in out and "tool/result  " in out


def _run_as_main(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *argv: str
) -> tuple[int | str | None, str, str]:
    """examples/agent_loop.py run as ``__main__`` with ``ARGV``, in this
    process (the test above runs it as a process): its exit code (None if
    it ran to its end), standard output and error."""
    monkeypatch.setattr(sys, "argv", ["agent_loop.py", *argv])
    monkeypatch.setenv("COLUMNS", "80")  # (argparse's width, as on a pipe)
    code: int | str | None = None  # (no SystemExit: it ran to its end)
    try:
        runpy.run_path(str(REPO / "examples" / "agent_loop.py"), run_name="__main__")
    except SystemExit as exited:
        code = exited.code
    done = capsys.readouterr()
    return code, done.out, done.err


def test_help_prints_the_usage_and_runs_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run_as_main(monkeypatch, capsys, "--help")
    assert code == 0, err
    assert out.startswith("usage: python -m examples.agent_loop [-h] [--provider {openai,anthropic}]")
    assert '"role"' not in out and "tool/result" not in out


def test_an_unknown_provider_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run_as_main(monkeypatch, capsys, "--provider", "bogus")
    assert code == 2
    assert out == ""
    assert "argument --provider: invalid choice: 'bogus' (choose from" in err
    assert "Traceback" not in err and "KeyError" not in err
