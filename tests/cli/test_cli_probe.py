"""What a stdio MCP server (or a tool) writes reaches the terminal safely:
bytes that are not UTF-8 do not stop the session, escape sequences in the
command's stderr lines are shown escaped, progress numbers stay short, and a
server transport that fails as it stops is one line, not a traceback."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dsh_actors.model import ToolProgress

from .conftest import EXAMPLES, Cli, assert_one_line_error

#: A hand-written MCP server over stdio (newline-delimited JSON-RPC). Its
#: first argument is what ``initialize`` gets: "ok", "error" (a JSON-RPC
#: error whose message holds an escape sequence), "not_an_object" (a result
#: that is not an object) or "no_info" (a result without its serverInfo).
SERVER = r"""
import json
import sys

INIT = sys.argv[1]
TOOLS = [{"name": name, "inputSchema": {"type": "object"}} for name in ("latin1", "escapes", "plain")]


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    message = json.loads(line)
    rid, method, params = message.get("id"), message.get("method"), message.get("params") or {}
    if rid is None:
        continue
    if method == "initialize" and INIT == "error":
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": "no \x1b]0;owned\x07 way"}})
    elif method == "initialize" and INIT == "not_an_object":
        send({"jsonrpc": "2.0", "id": rid, "result": 5})
    elif method == "initialize" and INIT == "no_info":
        send({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": params["protocolVersion"], "capabilities": {}}})
    elif method == "initialize":
        info = {"name": "probe", "version": "1"}
        result = {"protocolVersion": params["protocolVersion"], "capabilities": {"tools": {}}, "serverInfo": info}
        send({"jsonrpc": "2.0", "id": rid, "result": result})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": rid, "result": {"tools": TOOLS}})
    elif method == "tools/call" and params["name"] == "latin1":
        # "café" in Latin-1: the byte 0xe9 is not UTF-8
        line = '{"jsonrpc": "2.0", "id": %d, "result": {"content": [{"type": "text", "text": "caf\xe9"}]}}\n' % rid
        sys.stdout.buffer.write(line.encode("latin-1"))
        sys.stdout.flush()
    elif method == "tools/call" and params["name"] == "escapes":
        text = "bad \x1b]0;owned\x07 \x1b[2J news"
        send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": text}], "isError": True}})
    elif method == "tools/call":
        send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": "plain"}]}})
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no such method"}})
"""


def _server(tmp_path: Path, init: str = "ok") -> str:
    script = tmp_path / "probe_server.py"
    script.write_text(SERVER)
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(script))} {init}"


def _batch(root: Path, *names: str) -> Path:
    batch = root / "batch.json"
    batch.write_text(json.dumps([{"id": f"c{n}", "name": name} for n, name in enumerate(names, 1)]))
    return batch


def test_bytes_that_are_not_utf8_from_a_server_do_not_stop_its_session(
    cli: Cli, root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dsh_actors.mcp._mount as mount_module

    # (so the old behaviour, every later answer lost, fails in seconds, not minutes)
    monkeypatch.setattr(mount_module, "DEFAULT_TIMEOUT_MS", 5_000.0)
    outcome = cli("run", _batch(root, "latin1", "plain"), "--mcp", _server(tmp_path), "--json")
    assert outcome.code == 0, outcome.err
    results = json.loads(outcome.out)["results"]
    assert [r["is_error"] for r in results] == [False, False], results
    assert results[0]["content"] == [{"type": "text", "text": "caf\ufffd"}]
    assert results[1]["content"] == [{"type": "text", "text": "plain"}]
    assert "Traceback" not in outcome.err


def test_a_servers_escape_sequences_in_the_stderr_lines_are_shown_escaped(cli: Cli, root: Path, tmp_path: Path) -> None:
    outcome = cli("run", _batch(root, "escapes"), "--mcp", _server(tmp_path), "--color", "never")
    assert outcome.code == 0, outcome.err
    assert "\x1b" not in outcome.err and "\x07" not in outcome.err, outcome.err
    assert "bad \\x1b]0;owned\\x07 \\x1b[2J news" in outcome.err
    assert "\x1b" not in outcome.out  # (the card was escaped already)


def test_escape_sequences_in_the_verbose_log_and_its_tracebacks_are_shown_escaped(
    cli: Cli, root: Path, tmp_path: Path
) -> None:
    outcome = cli("run", _batch(root, "escapes"), "--mcp", _server(tmp_path), "--color", "never", "-v")
    assert outcome.code == 0, outcome.err
    assert "McpToolError: bad \\x1b]0;owned\\x07 \\x1b[2J news" in outcome.err  # the traceback's last line
    assert "\x1b" not in outcome.err and "\x07" not in outcome.err


def test_a_one_line_error_shows_a_servers_escape_sequences_escaped(cli: Cli, root: Path, tmp_path: Path) -> None:
    outcome = cli("schemas", "--mcp", _server(tmp_path, "error"))
    assert_one_line_error(outcome, "schemas", "the server answered with an error: no \\x1b]0;owned\\x07 way")
    assert "\x1b" not in outcome.err


def test_a_server_transport_that_fails_as_it_stops_is_one_line_not_a_traceback(
    cli: Cli, root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dsh_actors.cli.mcp_servers import McpServers

    serve = McpServers._serve

    async def failing_at_the_end(self: McpServers, rt: Any) -> None:
        await serve(self, rt)
        raise ExceptionGroup("unhandled errors in a TaskGroup", [UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad")])

    monkeypatch.setattr(McpServers, "_serve", failing_at_the_end)
    outcome = cli("run", _batch(root, "plain"), "--mcp", _server(tmp_path), "--color", "never")
    assert outcome.code == 0, outcome.err
    assert outcome.out.endswith("1 call: 1 ok, 0 errors\n")
    assert "Traceback" not in outcome.err
    assert outcome.err.splitlines() == [
        "dsh-actors: WARNING: --mcp: a server did not stop cleanly: UnicodeDecodeError: "
        "'utf-8' codec can't decode byte 0xff in position 0: bad"
    ]


def test_progress_numbers_too_large_for_digits_are_shown_short() -> None:
    from dsh_actors.cli.run import progress_text

    assert progress_text(ToolProgress(1e300, 1e-300)) == "1e+300/1e-300"
    assert progress_text(ToolProgress(2.0, 5.0, "copying")) == "2/5 (40%) copying"
    assert progress_text(ToolProgress(3.0)) == "3"


def test_an_empty_file_name_is_refused_as_such_not_as_a_directory(cli: Cli, root: Path, tmp_path: Path) -> None:
    batch = _batch(root, "plain")
    no_log = cli("run", batch, "--mcp", _server(tmp_path), "--log", "")
    assert_one_line_error(no_log, "run", "--log needs a file name (got an empty one)")
    no_batch = cli("run", "", "--mcp", _server(tmp_path))
    assert_one_line_error(no_batch, "run", "the batch file needs a name (got an empty one; '-' is standard input)")
    no_file = cli("replay", "")
    assert_one_line_error(
        no_file, "replay", "the session log needs a file name (got an empty one; '-' is standard input)"
    )


def test_a_server_command_that_cannot_be_executed_says_so(cli: Cli, root: Path, tmp_path: Path) -> None:
    outcome = cli("schemas", "--mcp", str(tmp_path))
    assert_one_line_error(outcome, "schemas", f"cannot start the server: Permission denied: {tmp_path}")


#: Says it started (on its stderr, the command's), then reads its stdin and
#: never answers the MCP handshake.
MUTE_SERVER = """
import os
import sys

sys.stderr.write(f"mute server {os.getpid()} listening\\n")
sys.stderr.flush()
for line in sys.stdin:
    pass
"""


def test_ctrl_c_while_a_server_does_not_answer_the_handshake_quits_at_once(tmp_path: Path) -> None:
    script = tmp_path / "mute.py"
    script.write_text(MUTE_SERVER)
    command = [sys.executable, "-m", "dsh_actors.cli", "run", str(EXAMPLES / "batch_mcp.json")]
    command += ["--mcp", f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"]
    env = {**os.environ, "PYTHONPATH": str(EXAMPLES.parent)}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert process.stderr is not None
        started = process.stderr.readline()  # (the handshake is under way: the CLI waits up to 30 s for it)
        assert started.startswith("mute server ") and started.endswith(" listening\n"), started
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=15)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 130, err
    assert err == "dsh-actors run: error: interrupted\n"
    assert out == ""
    assert _gone(int(started.split()[2])), "the server process is left running"


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")  # exited, not yet reaped
    except FileNotFoundError:
        return True


@pytest.mark.parametrize(
    ("init", "problem"),
    [
        ("not_an_object", "the server answered with a result that is not an object (5)"),
        ("no_info", "serverInfo: Field required"),
    ],
)
def test_a_handshake_answer_the_sdk_cannot_read_fails_at_once_naming_the_problem(
    cli: Cli, root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, init: str, problem: str
) -> None:
    import dsh_actors.cli.mcp_servers as mcp_servers

    monkeypatch.setattr(mcp_servers, "_HANDSHAKE_S", 10.0)  # (the old behaviour waited all of it)
    outcome = cli("schemas", "--mcp", _server(tmp_path, init))
    lines = outcome.err.splitlines()
    assert outcome.code == 1 and outcome.out == "", outcome
    assert "Traceback" not in outcome.err
    expected = f"--mcp {_server(tmp_path, init)!r}: the server's answer to the MCP handshake is not valid: {problem}"
    assert lines[-1] == f"dsh-actors schemas: error: {expected}", lines
