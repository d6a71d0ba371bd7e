"""``--mcp "COMMAND ..."``: run and schemas mount a stdio MCP server
(examples/mcp_server.py), alone or next to --tools."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import EXAMPLES, Cli, Outcome, assert_one_line_error

SERVER = f"{shlex.quote(sys.executable)} {shlex.quote(str(EXAMPLES / 'mcp_server.py'))}"


def test_run_mounts_the_server_and_prints_each_result(cli: Cli, root: Path) -> None:
    outcome = cli("run", EXAMPLES / "batch_mcp.json", "--mcp", SERVER)
    assert outcome.code == 0, outcome.err
    out = outcome.out
    assert "✓ c1 add · Add a note" in out
    assert '"title": "groceries"' in out
    assert "✗ c2 add" in out and 'invalid arguments: "value.title" must be at least 1 character long' in out
    assert "✓ c3 search · Search notes" in out
    assert "✗ c4 read · Read a note  MCP_TOOL_ERROR" in out and "no note 7" in out
    assert out.endswith("4 calls: 2 ok, 2 errors\n")


def test_schemas_lists_the_servers_tools_next_to_a_modules(cli: Cli, root: Path) -> None:
    outcome = cli("schemas", "--mcp", SERVER, "--tools", "examples.tools", "--format", "raw")
    assert outcome.code == 0, outcome.err
    schemas = {s["name"]: s for s in json.loads(outcome.out)}
    assert {"add", "search", "read", "read_file", "write_file"} <= set(schemas)
    limit = schemas["search"]["parameters"]["properties"]["limit"]
    assert limit["minimum"] == 1 and limit["maximum"] == 100


def test_without_tools_or_mcp_the_command_line_is_refused(cli: Cli) -> None:
    outcome = cli("schemas")
    assert outcome.code == 2
    assert "one of the arguments --tools, --mcp or --mcp-config is required" in outcome.err


def test_a_server_that_cannot_start_is_a_one_line_error(cli: Cli, root: Path) -> None:
    missing = cli("schemas", "--mcp", "no-such-mcp-server --flag")
    assert_one_line_error(missing, "schemas", "--mcp 'no-such-mcp-server --flag': cannot start the server")
    exits = cli("schemas", "--mcp", f"{shlex.quote(sys.executable)} -c 'raise SystemExit(3)'")
    assert_one_line_error(exits, "schemas", "the server exited or closed its connection during the MCP handshake")


REPO = EXAMPLES.parent


def test_python_in_a_command_is_the_clis_own_interpreter_without_an_active_venv(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "dsh-actors"
    if not script.exists():
        pytest.skip("the dsh-actors console script is not installed (./dev setup installs it)")
    bare = tmp_path / "bin"  # a PATH whose python (if any) is not the venv's: it has no MCP SDK
    bare.mkdir()
    (bare / "python").write_text("#!/bin/sh\necho 'not the venv python' >&2\nexit 3\n")
    (bare / "python").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = f"{bare}{os.pathsep}/usr/bin{os.pathsep}/bin"
    done = subprocess.run(
        [str(script), "run", "examples/batch_mcp.json", "--mcp", "python -m examples.mcp_server"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith("4 calls: 2 ok, 2 errors\n")
    assert "not the venv python" not in done.stderr


def test_a_prefix_mounts_two_servers_with_the_same_tool_names_together(cli: Cli, root: Path) -> None:
    outcome = cli("schemas", "--mcp", f"a_={SERVER}", "--mcp", f"b-={SERVER}", "--format", "raw")
    assert outcome.code == 0, outcome.err
    names = {s["name"] for s in json.loads(outcome.out)}
    assert names == {"a_add", "a_search", "a_read", "b-add", "b-search", "b-read"}
    batch = root / "two.json"
    batch.write_text(
        json.dumps(
            {
                "calls": [
                    {"id": "c1", "name": "a_add", "arguments": {"title": "in a"}},
                    {"id": "c2", "name": "b-add", "arguments": {"title": "in b"}},
                    {"id": "c3", "name": "b-search", "arguments": {"query": "in"}},
                ]
            }
        )
    )
    ran = cli("run", batch, "--mcp", f"a_={SERVER}", "--mcp", f"b-={SERVER}", "--json")
    assert ran.code == 0, ran.err
    values = [r["value"] for r in json.loads(ran.out)["results"]]
    assert values[0]["title"] == "in a" and values[1]["title"] == "in b"
    assert [n["title"] for n in values[2]["notes"]] == ["in b"]  # each server is its own notebook
    unprefixed = cli("schemas", "--mcp", SERVER, "--mcp", SERVER)
    assert_one_line_error(unprefixed, "schemas", "add")


def test_only_a_word_of_name_characters_before_the_first_equals_sign_is_a_prefix() -> None:
    from dsh_actors.cli.mcp_servers import split_prefix

    assert split_prefix("a_=python -m x") == ("a_", "python -m x")
    assert split_prefix("python -c 'x=1'") == ("", "python -c 'x=1'")
    assert split_prefix("=odd=name --flag") == ("", "odd=name --flag")
    assert split_prefix("./server --port=3") == ("", "./server --port=3")


SILENT_SERVER = """
import os
import sys
import time

with open(sys.argv[1], "w") as f:
    f.write(str(os.getpid()))
time.sleep(600)  # never reads its stdin, never answers the handshake
"""


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")  # exited, not yet reaped
    except FileNotFoundError:
        return True


def test_a_server_that_never_answers_the_handshake_fails_at_the_stated_time_and_is_stopped(
    cli: Cli, root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dsh_actors.cli.mcp_servers as mcp_servers

    monkeypatch.setattr(mcp_servers, "_HANDSHAKE_S", 0.5)
    (tmp_path / "silent.py").write_text(SILENT_SERVER)
    pid_file = tmp_path / "silent.pid"
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(tmp_path / 'silent.py'))} {shlex.quote(str(pid_file))}"
    outcome = cli("schemas", "--mcp", command)
    assert_one_line_error(outcome, "schemas", "the server did not answer the MCP handshake within 0.5 s")
    assert _gone(int(pid_file.read_text())), "the server process is left running"


RAW_SERVER = f"{shlex.quote(sys.executable)} {shlex.quote(str(REPO / 'tests' / 'mcp' / 'server_raw.py'))}"


def test_a_name_taken_by_a_tools_module_names_the_prefix_as_mcp_writes_it(
    cli: Cli, root: Path, write_module: Callable[[str, str], Path]
) -> None:
    module = write_module(
        "mine",
        """
        from dsh_actors import tool

        @tool
        def echo(text: str) -> str:
            \"\"\"Echo the text.\"\"\"
            return text

        TOOLS = [echo]
        """,
    )
    outcome = cli("run", EXAMPLES / "batch_mcp.json", "--tools", module, "--mcp", RAW_SERVER)
    fixed = shlex.quote(f"mcp_={RAW_SERVER}")
    error = _last_line_error(outcome, "run")  # (after the server's warning about its task-only tool)
    assert 'cannot register tool "echo": a tool with this name is already registered in the global scope' in error
    assert f'mount the server with a prefix (--mcp {fixed} registers it as "mcp_echo")' in error
    assert 'prefix="' not in error  # (the library's keyword, which the command line does not take)
    # ... and a prefix taken too: another one
    taken = cli("schemas", "--mcp", f"mcp_={RAW_SERVER}", "--mcp", f"mcp_={RAW_SERVER}")
    another = shlex.quote(f"mcp2_={RAW_SERVER}")
    assert f'another prefix (--mcp {another} registers it as "mcp2_echo")' in _last_line_error(taken, "schemas")


def _last_line_error(outcome: Outcome, command: str) -> str:
    """The one-line error that ends a failed command's stderr."""
    assert outcome.code == 1 and outcome.out == "", outcome
    assert "Traceback" not in outcome.err
    last = outcome.err.splitlines()[-1]
    assert last.startswith(f"dsh-actors {command}: error: "), outcome.err
    return last


#: A server that answers the handshake, then exits when asked for its tools.
GONE_AT_LISTING = r"""
import json
import sys

for line in sys.stdin:
    message = json.loads(line)
    if message.get("method") == "initialize":
        info = {"name": "gone", "version": "1"}
        result = {"protocolVersion": message["params"]["protocolVersion"], "capabilities": {"tools": {}}, "serverInfo": info}
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}) + "\n")
        sys.stdout.flush()
    elif message.get("method") == "tools/list":
        sys.stderr.write("gone: no tools today\n")
        raise SystemExit(4)
"""


def test_a_server_that_exits_as_its_tools_are_listed_is_one_line_without_the_librarys_fix(
    cli: Cli, root: Path, tmp_path: Path
) -> None:
    (tmp_path / "gone.py").write_text(GONE_AT_LISTING)
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(tmp_path / 'gone.py'))}"
    outcome = cli("schemas", "--mcp", command)
    assert _last_line_error(outcome, "schemas") == (
        f"dsh-actors schemas: error: --mcp {command!r}: the server exited or closed its connection "
        "before its tools were mounted (its stderr may say why)"
    )
    assert "mount the new session" not in outcome.err  # (the library's fix: a program's, not the command's)


#: A server that lists one tool and keeps running once its input ends (until
#: it is terminated), saying so on its stderr with its pid.
LINGERING_SERVER = r"""
import json
import os
import sys
import threading

for line in sys.stdin:
    message = json.loads(line)
    rid, method = message.get("id"), message.get("method")
    if method == "initialize":
        info = {"name": "lingering", "version": "1"}
        result = {"protocolVersion": message["params"]["protocolVersion"], "capabilities": {"tools": {}}, "serverInfo": info}
    elif method == "tools/list":
        result = {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}
    else:
        continue
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}) + "\n")
    sys.stdout.flush()
sys.stderr.write(f"stdin closed {os.getpid()}\n")
sys.stderr.flush()
threading.Event().wait()
"""


def test_ctrl_c_while_the_servers_stop_still_stops_them_then_exits_130(tmp_path: Path) -> None:
    # (The Ctrl-C cut the wait short: the command exited at once, leaving the server running.)
    (tmp_path / "lingering.py").write_text(LINGERING_SERVER)
    command = [sys.executable, "-m", "dsh_actors.cli", "schemas"]
    command += ["--mcp", f"{shlex.quote(sys.executable)} {shlex.quote(str(tmp_path / 'lingering.py'))}"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    pid = None
    try:
        assert process.stderr is not None
        closed = process.stderr.readline()  # (the schemas are built: the command stops the server)
        assert closed.startswith("stdin closed "), closed
        pid = int(closed.split()[2])
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 130
        assert _gone(pid), "the server process is left running"
    finally:
        if pid is not None and not _gone(pid):
            os.kill(pid, signal.SIGKILL)
        if process.poll() is None:
            process.kill()
        out, err = process.communicate()
    assert err == "dsh-actors schemas: error: interrupted\n"
    assert out == ""


def test_an_environment_assignment_before_the_command_is_named_as_the_prefix_it_is_read_as(
    cli: Cli, root: Path
) -> None:
    # (A shell's habit: NAME=VALUE COMMAND. Here NAME is the prefix, VALUE the command that cannot start.)
    outcome = cli("schemas", "--mcp", f"API_TOKEN=secret-value {RAW_SERVER}")
    assert_one_line_error(
        outcome,
        "schemas",
        "cannot start the server: No such file or directory: secret-value",
        "the text before the first '=' is the tools' prefix, 'API_TOKEN', and the command follows it",
        "to set an environment variable, start the command with env: --mcp 'env API_TOKEN=VALUE COMMAND ...'",
    )
    plain = cli("schemas", "--mcp", "no-such-mcp-server --flag")  # (no prefix: nothing to say about it)
    assert_one_line_error(plain, "schemas", "cannot start the server")
    assert "prefix" not in plain.err
