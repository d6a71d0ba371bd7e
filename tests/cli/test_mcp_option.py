"""``--mcp "COMMAND ..."``: run and schemas mount a stdio MCP server
(examples/mcp_server.py), alone or next to --tools."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from .conftest import EXAMPLES, Cli, assert_one_line_error

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
    assert "one of the arguments --tools or --mcp is required" in outcome.err


def test_a_server_that_cannot_start_is_a_one_line_error(cli: Cli, root: Path) -> None:
    missing = cli("schemas", "--mcp", "no-such-mcp-server --flag")
    assert_one_line_error(missing, "schemas", "--mcp 'no-such-mcp-server --flag': cannot start the server")
    exits = cli("schemas", "--mcp", f"{shlex.quote(sys.executable)} -c 'raise SystemExit(3)'")
    assert_one_line_error(exits, "schemas", "the server exited or closed its connection during the MCP handshake")
