"""An MCP server (the SDK's low-level Server) whose tool list changes: it
lists two tools per page, and its ``swap`` tool removes ``alpha``, adds
``delta`` and ``remote`` (whose schema has a remote reference), changes
``beta``'s description and sends
``notifications/tools/list_changed`` (called again, it changes them
back). It also has tools whose structured output breaks their
outputSchema. With ``CHANGE_WHILE_LISTING=1`` in the
environment, the first request for a second page makes the same change
(without ``remote``) and sends the notification before answering it. Run
as a script: it serves over stdio."""

from __future__ import annotations

import os
from typing import Any

import anyio
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.types import CallToolResult, ListToolsResult, TextContent, Tool

PAGE = 2
OBJECT: dict[str, Any] = {"type": "object", "properties": {}}
COUNT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"n": {"type": "integer", "minimum": 0}},
    "required": ["n"],
}

tools: dict[str, Tool] = {
    name: Tool(name=name, description=f"the {name} tool", input_schema=OBJECT) for name in ("alpha", "beta", "gamma")
}
tools["swap"] = Tool(name="swap", description="change the tool list", input_schema=OBJECT)
tools["bad_output"] = Tool(
    name="bad_output", description="breaks its outputSchema", input_schema=OBJECT, output_schema=COUNT_SCHEMA
)
tools["no_structured"] = Tool(
    name="no_structured",
    description="declares an outputSchema, sends no structured content",
    input_schema=OBJECT,
    output_schema=COUNT_SCHEMA,
)
tools["good_output"] = Tool(
    name="good_output", description="keeps its outputSchema", input_schema=OBJECT, output_schema=COUNT_SCHEMA
)

REMOTE = Tool(
    name="remote",
    description="its schema points elsewhere",
    input_schema={"type": "object", "properties": {"x": {"$ref": "https://schemas.invalid/x.json"}}},
)
if os.environ.get("START_WITH_REMOTE") == "1":
    tools["remote"] = REMOTE


changing_while_listing = os.environ.get("CHANGE_WHILE_LISTING") == "1"


def swap() -> None:
    """Remove ``alpha``, add ``delta``, change ``beta``'s description; the
    next call changes them back (as listed at first), and so on."""
    if "alpha" in tools:
        del tools["alpha"]
        tools["delta"] = Tool(name="delta", description="the delta tool", input_schema=OBJECT)
        tools["beta"] = Tool(name="beta", description="the changed beta tool", input_schema=OBJECT)
    else:
        del tools["delta"]
        tools["alpha"] = Tool(name="alpha", description="the alpha tool", input_schema=OBJECT)
        tools["beta"] = Tool(name="beta", description="the beta tool", input_schema=OBJECT)


async def list_tools(ctx: Any, params: Any) -> ListToolsResult:
    global changing_while_listing
    start = int(params.cursor) if params is not None and params.cursor else 0
    if start and changing_while_listing:  # (CHANGE_WHILE_LISTING=1: once, asked for the second page)
        changing_while_listing = False
        swap()
        await ctx.session.send_tool_list_changed()
    names = list(tools)
    page = names[start : start + PAGE]
    cursor = str(start + PAGE) if start + PAGE < len(names) else None
    return ListToolsResult(tools=[tools[n] for n in page], next_cursor=cursor)


async def call_tool(ctx: Any, params: Any) -> CallToolResult:
    name = params.name
    if name == "swap":
        swap()
        if "alpha" in tools:
            del tools["remote"]
        else:
            tools["remote"] = REMOTE
        await ctx.session.send_tool_list_changed()
        return CallToolResult(content=[TextContent(type="text", text="swapped")])
    if name == "bad_output":
        return CallToolResult(
            content=[TextContent(type="text", text='{"n": -1}')], structured_content={"n": -1, "extra": True}
        )
    if name == "no_structured":
        return CallToolResult(content=[TextContent(type="text", text="no structure")])
    if name == "good_output":
        return CallToolResult(content=[TextContent(type="text", text='{"n": 3}')], structured_content={"n": 3})
    if name in tools:
        return CallToolResult(content=[TextContent(type="text", text=f"{name}: {tools[name].description}")])
    return CallToolResult(content=[TextContent(type="text", text=f"unknown tool {name}")], is_error=True)


server: Server[Any] = Server("changing", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
