"""A small MCP server: an in-memory notebook, written with the MCP SDK's
MCPServer. Run it over stdio (``python -m examples.mcp_server``) and mount it
with :func:`dsh_actors.mcp.mount`, or from the command line::

    dsh-actors run examples/batch_mcp.json --mcp "python -m examples.mcp_server"

Its schemas are what pydantic generates (``anyOf`` for ``Optional``,
``minimum``/``maximum`` for ``Field(ge=..., le=...)``, ``$defs`` for the
nested model), so the runtime enforces them in full schema mode. ``search``
is read-only (concurrency-safe once mounted); ``add`` is not.
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

app = MCPServer("notebook")


class Note(BaseModel):
    id: int
    title: str
    body: str
    tags: list[str] = Field(default_factory=list)


class Found(BaseModel):
    query: str
    notes: list[Note]


NOTES: dict[int, Note] = {}


@app.tool(title="Add a note")
def add(title: str = Field(min_length=1), body: str = "", tags: list[str] | None = None) -> Note:
    """Add a note to the notebook and return it with its id."""
    note = Note(id=len(NOTES) + 1, title=title, body=body, tags=tags or [])
    NOTES[note.id] = note
    return note


@app.tool(title="Search notes", annotations=ToolAnnotations(read_only_hint=True))
def search(query: str = Field(min_length=1), limit: int = Field(default=10, ge=1, le=100)) -> Found:
    """Notes whose title or body contains the query (case-insensitive)."""
    needle = query.lower()
    hits = [n for n in NOTES.values() if needle in n.title.lower() or needle in n.body.lower()]
    return Found(query=query, notes=hits[:limit])


@app.tool(title="Read a note", annotations=ToolAnnotations(read_only_hint=True))
def read(id: int = Field(ge=1)) -> str:
    """The note's text."""
    note = NOTES.get(id)
    if note is None:
        raise ToolError(f"no note {id}")
    return f"# {note.title}\n\n{note.body}"


if __name__ == "__main__":
    app.run("stdio")
