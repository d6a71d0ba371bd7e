"""``dsh-actors schemas --tools MODULE``: the model-facing tool schemas.

The schemas are what the model is offered (``rt.tools.model_tools()``, the
executor's ``describe``): with the native executor, one per registered
tool; with ``--executor ptc``, the one ``run_code`` tool. ``--format``
writes them as a provider's ``tools`` parameter, with
:mod:`dsh_actors.providers`:

* ``openai``: ``{"type": "function", "function": {"name", "description",
  "parameters"}}`` (Chat Completions);
* ``openai-responses``: ``{"type": "function", "name", "description",
  "parameters", "strict": false}`` (Responses API);
* ``anthropic``: ``{"name", "description", "input_schema"}`` (Messages);
* ``raw``: ours, ``{"name", "description", "parameters"}``.

``--mcp "COMMAND ..."`` (repeatable) adds the tools of a stdio MCP server,
``--mcp-config FILE`` (repeatable) those of each server a JSON file lists.
Printed as one indented JSON list. Exit status 0, or 1 when the tools or
the executor cannot be loaded (74: standard output cannot be written).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, Final

import orjson

from ..providers import anthropic, openai, openai_responses
from ..runtime import ToolRuntime
from .exits import write_output
from .loading import install_executor, install_tools, load_tool_source
from .mcp_servers import McpServers

__all__ = ["FORMATS", "schemas_command"]


def _raw(rt: ToolRuntime) -> list[dict[str, Any]]:
    return list(rt.tools.model_tools().schemas)


_FORMATTERS: Final[dict[str, Callable[[ToolRuntime], list[dict[str, Any]]]]] = {
    "openai": openai.tools,
    "openai-responses": openai_responses.tools,
    "anthropic": anthropic.tools,
    "raw": _raw,
}

FORMATS: Final = tuple(_FORMATTERS)


def schemas_command(args: argparse.Namespace) -> int:
    source = None if args.tools is None else load_tool_source(args.tools)
    servers = McpServers(getattr(args, "mcp", None) or [], getattr(args, "mcp_config", None) or [])
    with ToolRuntime() as rt, servers:
        if source is not None:
            install_tools(source, rt)
        servers.start(rt)
        install_executor(args.executor, rt)
        document = _FORMATTERS[args.format](rt)
    write_output(sys.stdout, [orjson.dumps(document, option=orjson.OPT_INDENT_2).decode("utf-8") + "\n"], json=True)
    return 0
