"""An MCP server (the SDK's MCPServer) with one tool per mapping the mount
makes: a tool per content kind, structured output from pydantic models, an
error tool, a protocol error, a slow tool that records its cancellation, and
annotation combinations. Run as a script: it serves over stdio."""

from __future__ import annotations

import asyncio
import base64
import json
import os

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import (
    Annotations,
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
    ToolAnnotations,
)
from pydantic import BaseModel, Field

app = MCPServer("tools-under-test")

PNG = "iVBORw0KGgo="  # 8 bytes, base64
WAV = "UklGRiQAAABXQVZF"  # 12 bytes, base64
TEXT_BLOB = base64.b64encode("héllo\nworld".encode()).decode()
LATIN_BLOB = base64.b64encode("a;é".encode("latin-1")).decode()
NOT_UTF8_BLOB = base64.b64encode(b"\xff\xfe\x00").decode()

started: dict[str, asyncio.Event] = {}
cancelled: list[str] = []
cancelled_changed = asyncio.Event()


class Inner(BaseModel):
    a: int = Field(ge=0, description="a non-negative count")


class Filters(BaseModel):
    tags: list[str] = Field(default_factory=list, max_length=3)
    inner: Inner | None = None


class Total(BaseModel):
    total: int
    note: str | None = None


@app.tool(annotations=ToolAnnotations(readOnlyHint=True), title="Adder")
def add(x: int, inner: Inner, y: int | None = None) -> Total:
    """Add x, inner.a and y."""
    return Total(total=x + inner.a + (y or 0), note=None if y is None else "with y")


@app.tool(annotations=ToolAnnotations(readOnlyHint=True, title="Search things"))
def search(
    query: str = Field(min_length=1),
    limit: int | None = Field(default=None, ge=1, le=50),
    filters: Filters | None = None,
) -> str:
    """Search; returns a line of text."""
    return f"{query}:{limit}:{filters.tags if filters else []}"


@app.tool(annotations=ToolAnnotations(readOnlyHint=True, destructiveHint=True))
def read_but_destructive() -> str:
    return "ok"


@app.tool(structured_output=False)
def text_kind() -> list:
    return [TextContent(type="text", text="first"), TextContent(type="text", text="second")]


@app.tool(structured_output=False)
def image_kind() -> list:
    return [ImageContent(type="image", data=PNG, mimeType="image/png")]


@app.tool(structured_output=False)
def audio_kind() -> list:
    return [AudioContent(type="audio", data=WAV, mimeType="audio/wav")]


@app.tool(structured_output=False)
def resource_kind() -> list:
    return [
        EmbeddedResource(
            type="resource",
            resource=TextResourceContents(uri="file:///notes.txt", mimeType="text/plain", text="the notes"),
        ),
        EmbeddedResource(
            type="resource",
            resource=BlobResourceContents(uri="file:///pic.png", mimeType="image/png", blob=PNG),
        ),
        EmbeddedResource(
            type="resource",
            resource=BlobResourceContents(uri="file:///data.bin", mimeType="application/octet-stream", blob=WAV),
        ),
    ]


@app.tool(structured_output=False)
def link_kind() -> list:
    return [
        ResourceLink(
            type="resource_link",
            name="report",
            uri="file:///report.pdf",
            mimeType="application/pdf",
            description="the quarterly report",
        )
    ]


@app.tool(structured_output=False)
def audience_kind() -> list:
    return [
        TextContent(type="text", text="for both"),
        TextContent(type="text", text="for the user", annotations=Annotations(audience=["user"])),
        TextContent(type="text", text="for the assistant", annotations=Annotations(audience=["assistant"])),
        TextContent(type="text", text="for either", annotations=Annotations(audience=["user", "assistant"])),
    ]


@app.tool()
def audience_structured() -> Total:
    """Structured content, a text block for everyone and one for the user only."""
    return CallToolResult(
        content=[
            TextContent(type="text", text="3 in all"),
            TextContent(type="text", text="the user sees this", annotations=Annotations(audience=["user"])),
        ],
        structured_content={"total": 3, "note": None},
    )


@app.tool(structured_output=False)
def text_blob_kind() -> list:
    return [
        EmbeddedResource(
            type="resource",
            resource=BlobResourceContents(uri="file:///a.txt", mimeType="text/plain", blob=TEXT_BLOB),
        ),
        EmbeddedResource(
            type="resource",
            resource=BlobResourceContents(uri="file:///b.csv", mimeType="text/csv; charset=latin-1", blob=LATIN_BLOB),
        ),
        EmbeddedResource(
            type="resource",
            resource=BlobResourceContents(uri="file:///c.txt", mimeType="text/plain", blob=NOT_UTF8_BLOB),
        ),
    ]


@app.tool()
def chart(points: int = Field(ge=1)) -> Total:
    """Structured content plus an image and a text block."""
    return CallToolResult(
        content=[
            TextContent(type="text", text=f"{points} points"),
            ImageContent(type="image", data=PNG, mimeType="image/png"),
        ],
        structured_content={"total": points, "note": "chart"},
    )


BAD_IMAGE = "data:image/png;base64," + PNG  # a data URL, not base64


@app.tool(structured_output=False)
def bad_image_kind() -> list:
    return [
        TextContent(type="text", text="a screenshot"),
        ImageContent(type="image", data=BAD_IMAGE, mimeType="image/png"),
    ]


@app.tool()
def bad_image_chart() -> Total:
    """Structured content with an image the user only sees, whose data is not base64."""
    return CallToolResult(
        content=[
            TextContent(type="text", text="1 point"),
            ImageContent(
                type="image", data="not base64!", mimeType="image/png", annotations=Annotations(audience=["user"])
            ),
        ],
        structured_content={"total": 1, "note": None},
    )


@app.tool(structured_output=False)
def bad_image_error() -> list:
    return CallToolResult(
        is_error=True,
        content=[
            TextContent(type="text", text="the camera is off"),
            ImageContent(type="image", data=BAD_IMAGE, mimeType="image/png"),
        ],
    )


@app.tool(structured_output=False)
def bad_image_type() -> list:
    """An image whose MIME type is not image/<subtype>."""
    return [
        TextContent(type="text", text="a screenshot"),
        ImageContent(type="image", data=PNG, mimeType="png"),
    ]


@app.tool(annotations=ToolAnnotations(idempotentHint=True))
def fail(reason: str) -> str:
    """Always fails with the reason."""
    raise ToolError(reason)


@app.tool()
def protocol_error() -> str:
    raise MCPError(code=-32602, message="this request is not acceptable")


@app.tool()
async def slow(tag: str) -> str:
    """Waits until cancelled; records the cancellation."""
    started.setdefault(tag, asyncio.Event()).set()
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        cancelled.append(tag)
        cancelled_changed.set()
        raise
    return "never"


@app.tool()
async def wait_started(tag: str) -> bool:
    """Returns once slow(tag) is running (False after 10 s)."""
    event = started.setdefault(tag, asyncio.Event())
    try:
        await asyncio.wait_for(event.wait(), 10)
    except TimeoutError:
        return False
    return True


@app.tool()
async def cancellations(tag: str) -> list[str]:
    """The tags of the slow calls cancelled so far, once ``tag`` is among
    them (or after 10 s)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while tag not in cancelled and loop.time() < deadline:
        cancelled_changed.clear()
        try:
            await asyncio.wait_for(cancelled_changed.wait(), max(0.0, deadline - loop.time()))
        except TimeoutError:
            break
    return list(cancelled)


LONG_NAME = "a_tool_whose_name_is_longer_than_the_sixty_four_characters_models_accept"


@app.tool(name="notes.read", structured_output=False)
def notes_read(topic: str) -> str:
    """Read the notes on topic (a name with a dot)."""
    return f"notes.read on {topic}"


@app.tool(name="notes_read", structured_output=False)
def notes_underscore(topic: str) -> str:
    """The same name written with an underscore (collides once mapped)."""
    return f"notes_read on {topic}"


@app.tool(name="caf\u00e9 menu", structured_output=False)
def cafe_menu() -> str:
    return "cafe menu"


@app.tool(name=LONG_NAME, structured_output=False)
def long_named() -> str:
    return "long"


@app.tool()
def pid() -> int:
    return os.getpid()


@app.tool()
async def progressing(steps: int, ctx: Context) -> str:
    """Reports ``steps`` progress notifications, then returns."""
    for i in range(1, steps + 1):
        await ctx.report_progress(i, total=steps, message=f"step {i}")
    return "done"


@app.tool()
def request_meta(ctx: Context) -> str:
    """The ``_meta`` this tools/call carried (trace context, progress
    token), as JSON text."""
    params = ctx.request_context.params or {}
    return json.dumps(dict(params.get("_meta") or {}))


if __name__ == "__main__":
    app.run("stdio")
