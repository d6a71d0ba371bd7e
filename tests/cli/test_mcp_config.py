"""``--mcp-config FILE``: run and schemas mount every stdio MCP server a
Claude Desktop / Claude Code / Cursor style ``{"mcpServers": {...}}`` file
lists, as ``--mcp`` mounts one; a file that cannot be used is one line
naming the file, the server and the fix."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import EXAMPLES, Cli, assert_one_line_error

NOTES = str(EXAMPLES / "mcp_server.py")
RAW = str(EXAMPLES.parent / "tests" / "mcp" / "server_raw.py")


def _config(folder: Path, document: Any, name: str = "mcp.json") -> Path:
    path = folder / name
    path.write_text(json.dumps(document) if not isinstance(document, str) else document)
    return path


def test_each_server_of_the_file_is_mounted_the_disabled_one_left_out(cli: Cli, root: Path) -> None:
    config = _config(
        root,
        {
            "globalShortcut": "",  # (a Claude Desktop file holds its other settings too)
            "mcpServers": {
                "notes": {"command": "python", "args": [NOTES]},  # python: the command's own interpreter
                "raw": {"type": "stdio", "command": sys.executable, "args": [RAW], "autoApprove": []},
                "off": {"command": "no-such-mcp-server", "disabled": True},
            },
        },
    )
    outcome = cli("run", EXAMPLES / "batch_mcp.json", "--mcp-config", config)
    assert outcome.code == 0, outcome.err
    assert "✓ c1 add · Add a note" in outcome.out
    assert outcome.out.endswith("4 calls: 2 ok, 2 errors\n")
    schemas = cli("schemas", "--mcp-config", config, "--mcp", f"b_={sys.executable} {NOTES}", "--format", "raw")
    assert schemas.code == 0, schemas.err
    names = {s["name"] for s in json.loads(schemas.out)}
    assert {"add", "search", "read", "echo", "b_add", "b_search", "b_read"} <= names


def test_a_servers_env_reaches_it(cli: Cli, root: Path) -> None:
    # (server_raw answers tools/list badly when BAD_LISTING is set: the mount refuses its listing)
    plain = {"command": sys.executable, "args": [RAW]}
    assert cli("schemas", "--mcp-config", _config(root, {"mcpServers": {"raw": plain}})).code == 0
    config = _config(root, {"mcpServers": {"raw": {**plain, "env": {"BAD_LISTING": "nameless"}}}}, "env.json")
    outcome = cli("schemas", "--mcp-config", config)
    assert_one_line_error(outcome, "schemas", f'--mcp-config {config}: server "raw": ', "listing is not valid")


def test_two_servers_of_a_file_with_the_same_tool_names_are_told_the_prefix_without_the_envs_values(
    cli: Cli, root: Path
) -> None:
    server = {"command": sys.executable, "args": [NOTES]}
    config = _config(root, {"mcpServers": {"a": server, "b": {**server, "env": {"TOKEN": "s3cret"}}}})
    outcome = cli("schemas", "--mcp-config", config)
    last = outcome.err.splitlines()[-1]
    assert outcome.code == 1 and "Traceback" not in outcome.err
    assert last.startswith(f'dsh-actors schemas: error: --mcp-config {config}: server "b": ')
    fixed = f"--mcp 'mcp_=env TOKEN=... {sys.executable} {NOTES}', given instead of server \"b\" of {config},"
    assert f'{fixed} registers it as "mcp_add"' in last
    assert "s3cret" not in outcome.err


SHAPE = '{"mcpServers": {"NAME": {"command": "...", "args": ["..."], "env": {"KEY": "VALUE"}}}}'
STDIO_ONLY = 'which dsh-actors does not support: only stdio servers, started from "command" and "args"'


@pytest.mark.parametrize(
    ("document", "fragments"),
    [
        ("{not json", ["not valid JSON"]),
        ("", ["empty; it should hold the MCP servers, " + SHAPE]),
        ([{"command": "x"}], ["expected the MCP servers by name, " + SHAPE, "but the file holds a list"]),
        ({"servers": {"a": {}}}, ['but the file holds an object with the keys "servers"']),
        ({"mcpServers": ["a"]}, ['but "mcpServers" is a list']),
        ({"mcpServers": {}}, ['"mcpServers" lists no servers; add one: ' + SHAPE]),
        ({"mcpServers": {"web": "npx web"}}, ['server "web": expected an object, {"command": "..."', "got a string"]),
        ({"mcpServers": {"web": {"args": ["x"]}}}, ['server "web": no "command": name the program that starts it']),
        ({"mcpServers": {"web": {"command": ""}}}, ['server "web": "command" should be the program that starts it']),
        ({"mcpServers": {"web": {"url": "https://example.com/mcp"}}}, ['server "web": it is reached by a URL ("url")']),
        ({"mcpServers": {"web": {"type": "sse", "url": "https://x"}}}, ['server "web": it is reached by the "sse" ']),
        ({"mcpServers": {"web": {"type": "http", "command": "x"}}}, ['the "http" transport, ' + STDIO_ONLY]),
        ({"mcpServers": {"web": {"type": 3, "command": "x"}}}, ['"type" should be "stdio"', "got a number"]),
        ({"mcpServers": {"web": {"command": "x", "args": "-y"}}}, ['"args" should be a list of strings, got a string']),
        ({"mcpServers": {"web": {"command": "x", "args": ["-p", 80]}}}, ['"args"[1] should be a string, got a number']),
        ({"mcpServers": {"web": {"command": "x", "env": {"PORT": 80}}}}, ['"env"."PORT" should be a string']),
        ({"mcpServers": {"web": {"command": "x", "env": ["A=1"]}}}, ['"env" should be an object of strings']),
        ({"mcpServers": {"web": {"command": "x", "disabled": "yes"}}}, ['"disabled" should be true or false']),
    ],
)
def test_a_file_that_cannot_be_used_is_one_line_naming_the_file_the_server_and_the_fix(
    cli: Cli, root: Path, document: Any, fragments: list[str]
) -> None:
    config = _config(root, document)
    for command in ("run", "schemas"):
        argv = ["run", EXAMPLES / "batch_mcp.json"] if command == "run" else ["schemas"]
        outcome = cli(*argv, "--mcp-config", config)
        assert_one_line_error(outcome, command, f"--mcp-config {config}: ", *fragments)
        assert "{'" not in outcome.err and "Error(" not in outcome.err  # (no Python repr)


def test_a_missing_file_or_a_directory_is_one_line(cli: Cli, root: Path) -> None:
    assert_one_line_error(
        cli("schemas", "--mcp-config", "nope.json"), "schemas", "--mcp-config nope.json: no such file"
    )
    assert_one_line_error(
        cli("schemas", "--mcp-config", root), "schemas", f"--mcp-config {root}: is a directory, not a config file"
    )


def test_the_file_is_checked_whole_before_any_server_starts(cli: Cli, root: Path, tmp_path: Path) -> None:
    started = tmp_path / "started"
    first = {"command": sys.executable, "args": ["-c", f"open({str(started)!r}, 'w')"]}
    config = _config(root, {"mcpServers": {"first": first, "second": {"url": "https://x"}}})
    assert_one_line_error(cli("schemas", "--mcp-config", config), "schemas", 'server "second"')
    assert not started.exists()


def test_the_help_names_the_option_and_the_files_shape(cli: Cli) -> None:
    for command in ("run", "schemas"):
        outcome = cli(command, "--help")
        assert outcome.code == 0
        assert "--mcp-config FILE" in outcome.out and '{"mcpServers": {"NAME": {"command":' in outcome.out


def test_a_command_that_is_a_whole_command_line_and_cannot_start_is_told_to_put_its_arguments_in_args(
    cli: Cli, root: Path
) -> None:
    # ("command": "npx -y pkg" is run as one program's name: it failed with
    # "cannot start the server: ...: npx -y pkg" and no word of "args".)
    config = _config(root, {"mcpServers": {"github": {"command": "no-such-mcp-server -y @scope/pkg"}}})
    outcome = cli("schemas", "--mcp-config", config)
    assert_one_line_error(
        outcome,
        "schemas",
        f'--mcp-config {config}: server "github": cannot start the server',
        'put its arguments in "args", "command": "no-such-mcp-server", "args": ["-y", "@scope/pkg"])',
    )
    # One word that cannot start: no such hint (nothing to split).
    plain = cli(
        "schemas", "--mcp-config", _config(root, {"mcpServers": {"x": {"command": "no-such-mcp-server"}}}, "b.json")
    )
    assert_one_line_error(plain, "schemas", "cannot start the server")
    assert '"args"' not in plain.err


#: A server that answers the handshake but never lists its tools (it ends with its input).
NEVER_LISTS = r"""
import json
import sys

for line in sys.stdin:
    message = json.loads(line)
    if message.get("method") == "initialize":
        info = {"name": "slow", "version": "1"}
        result = {"protocolVersion": message["params"]["protocolVersion"], "capabilities": {"tools": {}}, "serverInfo": info}
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}) + "\n")
        sys.stdout.flush()
"""


def test_a_server_of_the_file_still_starting_at_the_backstop_is_named_by_the_file_and_its_name(
    cli: Cli, root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (It was "--mcp: the servers did not start": the option the user did
    # not give, no server, no fix.) The backstop, shortened, runs out while
    # the server lists its tools (the listing's own bound is 60 s).
    import dsh_actors.cli.mcp_servers as mcp_servers

    monkeypatch.setattr(mcp_servers, "_HANDSHAKE_S", 2.0)
    monkeypatch.setattr(mcp_servers, "_LISTING_S", 0.0)
    monkeypatch.setattr(mcp_servers, "_SLACK_S", 0.0)
    (tmp_path / "slow.py").write_text(NEVER_LISTS)
    config = _config(root, {"mcpServers": {"slow": {"command": sys.executable, "args": [str(tmp_path / "slow.py")]}}})
    outcome = cli("schemas", "--mcp-config", config)
    assert_one_line_error(
        outcome,
        "schemas",
        f'--mcp-config {config}: server "slow": the server had not finished starting 2 s after',
        "check that its command starts an MCP server that answers over stdio, or leave the server out",
    )
    assert "--mcp:" not in outcome.err
