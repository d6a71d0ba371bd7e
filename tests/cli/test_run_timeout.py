"""``dsh-actors run`` enforces a tool's ``timeout_ms`` (``policies.timeout``)
as an application that applies the policy does, unless ``--no-timeout``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import Cli, assert_one_line_error

# ``hold`` waits until its signal fires (the deadline's abort), or until a
# ``release`` call of the same batch lets it go; the 10 s bound only keeps a
# run whose deadline never fires from hanging the test (it then returns
# "never aborted" and the assertions say so).
TOOLS = """
import threading

from dsh_actors import ToolOutput, define_tool, text

started = threading.Event()
go = threading.Event()
runtime = []


def hold(args, ctx):
    ctx.signal.add_callback(lambda signal: go.set())
    started.set()
    go.wait(10)
    return "aborted" if ctx.signal.aborted else ("released" if go.is_set() else "never aborted")


def release(args, ctx):
    started.wait(10)
    go.set()
    return "released"


def deadlines(args, ctx):
    return str(len(runtime[0].events.listeners("tools/execute")))


def _tool(name, body, timeout_ms=None):
    return define_tool(
        name=name, description=name, parameters={},
        output=ToolOutput(schema={"type": "string"}, render=lambda a, v: [text(v)]),
        execute=body, is_concurrency_safe=True, timeout_ms=timeout_ms,
    )


def register(rt):
    runtime.append(rt)
    rt.tools.register(_tool("hold", hold, timeout_ms=TIMEOUT_MS))
    rt.tools.register(_tool("release", release))
    rt.tools.register(_tool("deadlines", deadlines))
"""


def _module(write_module: Any, timeout_ms: int, *, applies_policy: bool = False) -> Path:
    source = TOOLS.replace("TIMEOUT_MS", str(timeout_ms))
    if applies_policy:
        source += "\n\n_register = register\n\n\ndef register(rt):\n    import policies\n\n"
        source += "    _register(rt)\n    rt.use(policies.timeout)\n"
    return write_module("timed_tools", source)


def _batch(folder: Path, *names: str) -> Path:
    path = folder / "batch.json"
    path.write_text(json.dumps({"calls": [{"id": name[0], "name": name} for name in names]}))
    return path


def test_a_tool_past_its_timeout_ms_fails_with_the_timeout_error(cli: Cli, root: Path, write_module: Any) -> None:
    # The policy was never applied: the body waited for an abort that never
    # came, and the call succeeded whatever its tool declared.
    module = _module(write_module, 50)
    outcome = cli("run", _batch(root, "hold"), "--tools", module)
    assert outcome.code == 0, outcome.err
    assert outcome.out == ("✗ h hold  TOOL_TIMEOUT\n    Error: tool call timed out after 50ms\n1 call: 0 ok, 1 error\n")
    document = json.loads(cli("run", _batch(root, "hold"), "--tools", module, "--json").out)
    (result,) = document["results"]
    assert result["is_error"] and "value" not in result
    assert result["error"]["message"] == "tool call timed out after 50ms"
    assert result["error"]["info"]["code"] == "TOOL_TIMEOUT"


def test_no_timeout_leaves_a_tools_timeout_ms_unenforced(cli: Cli, root: Path, write_module: Any) -> None:
    # hold's 1 ms budget is long past when release lets it go.
    outcome = cli("run", _batch(root, "hold", "release"), "--tools", _module(write_module, 1), "--no-timeout", "--json")
    assert outcome.code == 0, outcome.err
    results = json.loads(outcome.out)["results"]
    assert [(r["name"], r["is_error"], r.get("value")) for r in results] == [
        ("hold", False, "released"),
        ("release", False, "released"),
    ]


@pytest.mark.parametrize(
    ("applies_policy", "option", "wrappers"),
    [(False, [], "1"), (False, ["--no-timeout"], "0"), (True, [], "1"), (True, ["--no-timeout"], "1")],
)
def test_the_timeout_policy_is_applied_once_even_when_the_module_applies_it(
    cli: Cli, root: Path, write_module: Any, applies_policy: bool, option: list[str], wrappers: str
) -> None:
    module = _module(write_module, 50, applies_policy=applies_policy)
    outcome = cli("run", _batch(root, "deadlines"), "--tools", module, *option, "--json")
    assert outcome.code == 0, outcome.err
    assert json.loads(outcome.out)["results"][0]["value"] == wrappers


def test_a_missing_timeout_policy_is_a_clear_error_naming_the_way_out(
    cli: Cli, root: Path, write_module: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "policies.timeout", None)  # import raises ModuleNotFoundError
    module = _module(write_module, 50)
    outcome = cli("run", _batch(root, "deadlines"), "--tools", module)
    assert_one_line_error(
        outcome,
        "run",
        "the timeout policy: not installed (no module policies.timeout); reinstall dsh-actors, or run with --no-timeout",
    )
    assert cli("run", _batch(root, "deadlines"), "--tools", module, "--no-timeout").code == 0
