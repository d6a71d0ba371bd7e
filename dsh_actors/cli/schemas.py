"""``dsh-actors schemas --tools MODULE``: the model-facing tool schemas.

The schemas are what the executor offers the model (``describe``): with the
native executor, one per registered tool; with ``--executor ptc``, the one
``run_code`` tool. ``--format`` writes them in a provider's tool format:

* ``openai``: ``{"type": "function", "function": {"name", "description",
  "parameters"}}`` (Chat Completions ``tools``);
* ``anthropic``: ``{"name", "description", "input_schema"}`` (Messages
  ``tools``);
* ``raw``: ours, ``{"name", "description", "parameters"}``.

``--mcp "COMMAND ..."`` (repeatable) adds the tools of a stdio MCP server.
Printed as one indented JSON list. Exit status 0, or 1 when the tools or
the executor cannot be loaded.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Mapping
from typing import Any, Final

import orjson

from ..json import thaw
from ..runtime import ToolRuntime
from .loading import install_executor, install_tools, load_tool_source
from .mcp_servers import McpServers

__all__ = ["FORMATS", "provider_schemas", "schemas_command"]

FORMATS: Final = ("openai", "anthropic", "raw")


def provider_schemas(schemas: Iterable[Mapping[str, Any]], fmt: str) -> list[dict[str, Any]]:
    """``schemas`` (``{"name", "description", "parameters"}``) in the tool
    format of ``fmt`` (one of :data:`FORMATS`)."""
    out: list[dict[str, Any]] = []
    for schema in schemas:
        name, description, parameters = schema["name"], schema["description"], thaw(schema["parameters"])
        if fmt == "openai":
            out.append({"type": "function", "function": {"name": name, "description": description, "parameters": parameters}})
        elif fmt == "anthropic":
            out.append({"name": name, "description": description, "input_schema": parameters})
        else:
            out.append({"name": name, "description": description, "parameters": parameters})
    return out


def schemas_command(args: argparse.Namespace) -> int:
    source = None if args.tools is None else load_tool_source(args.tools)
    servers = McpServers(getattr(args, "mcp", None) or [])
    with ToolRuntime() as rt, servers:
        if source is not None:
            install_tools(source, rt)
        servers.start(rt)
        executor = install_executor(args.executor, rt)
        model_input = executor.describe(rt.tools.definitions())
        document = provider_schemas(model_input.schemas, args.format)
    sys.stdout.write(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode("utf-8") + "\n")
    sys.stdout.flush()
    return 0
