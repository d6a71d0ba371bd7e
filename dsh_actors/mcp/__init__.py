"""Mount an MCP server's tools (the optional extra ``dsh-actors[mcp]``).

``await mount(rt, session, *, agent=None, prefix="", timeout_ms=None)``
registers every tool of an initialized ``mcp.ClientSession`` (``tools/list``,
every page) in ``rt``'s global scope or in ``agent``'s, and returns the
disposer that withdraws them again::

    server = StdioServerParameters(command="python", args=["server.py"], encoding_error_handler="replace")
    async with stdio_client(server, errlog=server_errlog()) as (r, w):
        async with ClientSession(r, w) as session:
            await session.initialize()
            unmount = await mount(rt, session, prefix="files_")
            batch = await rt.tools.execute_async(ToolBatchInput(calls=[...]))
            unmount()

``server_errlog()`` is the server's stderr: ``sys.stderr`` when it has a
file descriptor, else the process's own stderr (``sys.__stderr__``), else
``os.devnull``. The SDK's default ``errlog`` is ``sys.stderr`` as it was
when ``mcp.client.stdio`` was first imported, which in a notebook, under
pytest's ``capsys`` or ``contextlib.redirect_stderr`` has no descriptor:
the server then fails to start (``io.UnsupportedOperation: fileno``).
``encoding_error_handler="replace"``: bytes of the server's that are not
UTF-8 become U+FFFD. With the SDK's default (``"strict"``) the SDK's
reader stops at the first such line and discards the server's output
until the server exits, without closing the session: the call it answers
and every later one wait for the mount's bound (``TOOL_TIMEOUT``), and
the mount, which sees only the session, cannot tell.

How a tool maps:

* The tool is registered as ``prefix + name`` when that fits
  ``TOOL_NAME_RULE`` (``^[a-zA-Z0-9_-]{1,64}$``, what the model APIs
  accept). Otherwise every other character becomes ``_`` (``notes.read``
  is offered as ``notes_read``); a result longer than 64 characters, or
  one that another tool of the listing also maps to, is cut and ends in
  ``_`` and 8 hex digits of a hash of the full name (stable across runs).
  The server is always called with its own name, which
  ``meta["mcp"]["tool"]["name"]`` keeps.
* ``inputSchema`` / ``outputSchema`` are the definition's ``parameters`` /
  ``output.schema`` in full schema mode (``ToolDefinition.schema_mode``):
  enforced by the full-mode validator where the subset does not suffice, so real
  schemas (pydantic's ``anyOf`` for ``Optional``, ``minimum``, ``$defs``)
  register and are checked. Invalid arguments fail ``INVALID_ARGS``
  without reaching the server.
* The value is ``structuredContent`` when the server sent one (validated
  against ``outputSchema`` when declared: ``INVALID_TOOL_OUTPUT``
  otherwise, also when an ``outputSchema`` is declared and no structured
  content came). Without structured content the value is the list of
  content blocks in MCP's wire form (``[{"type": "text", "text": ...}]``).
* The content is the server's content blocks (see :mod:`._content`): text
  and images as they are, audio, resources and resource links as the
  matching block or a text rendering.
* Content blocks whose ``annotations.audience`` is for the user only
  (``["user"]``) are kept from the model: they are left out of the content
  and of the value, and go to the result's ``meta`` as
  ``{"mcp": {"user_content": [...]}}`` (wire form), which the log keeps (a
  program's sub-call: its ``tool/ptc-dispatch`` event's ``meta``) and
  the tool's result card shows after the model's content. (Calls running at
  once with one arguments object, whose every block is for the user only,
  cannot be told apart: they get no ``user_content`` rather than another
  call's.)
* ``isError: true`` is a failure (``MCP_TOOL_ERROR``) whose message is the
  server's text. A JSON-RPC error, or an answer that is not a valid result
  (a content block of a type the MCP SDK does not know, ``structuredContent``
  that is not an object, a ``result`` that is not an object, or JSON the
  SDK's parser refuses, such as a lone surrogate or nesting deeper than it
  reads, fails its call at once, though the SDK drops that message; so
  does a JSON-RPC batch, an array of answers, each call it answers), is
  ``MCP_PROTOCOL_ERROR``, its message naming what is wrong
  (``content.0: unknown type "hologram"``). Only
  the SDK's own "Connection closed" error closes the mount: a server's error
  with the same code (-32000, the first of JSON-RPC's server-error range)
  fails that call alone. A ``tools/list`` answered with an error, with a
  result that is not a valid listing, or with JSON the SDK's parser
  refuses (at once, as for a call), raises ``McpProtocolError`` from
  :func:`mount`. A tool whose name is taken in the scope fails the mount
  (``RegistrationError``), naming the mount's fix: a ``prefix``.
* Every request is bounded by the mount's ``timeout_ms`` (default
  :data:`DEFAULT_TIMEOUT_MS`, 60 s): a ``tools/call`` left unanswered fails
  ``TOOL_TIMEOUT`` and is cancelled on the server; a ``tools/list`` page left
  unanswered raises ``McpProtocolError``.
* A tool whose ``execution.taskSupport`` is ``"required"`` is not
  registered (logged as a warning): it can only be called as an MCP task,
  and the MCP SDK (2.3) has the task types but no client for them, nor do
  tasks remain in the 2026 protocol core. ``"optional"`` tools are called
  with a plain ``tools/call``. A connection that is gone (the server died,
  the session closed, its loop stopped) is ``MCP_CONNECTION_CLOSED``, and
  every later call of the mount fails with it at once; its message names
  the fix (start the server again and mount the new session).
* ``annotations.readOnlyHint: true`` without ``destructiveHint: true`` makes
  the tool concurrency-safe; anything else is exclusive.
  ``readOnlyHint: true`` or ``idempotentHint: true`` makes it
  ``idempotent`` (``rt.tools.recover`` may run an interrupted call of it
  again). The tool's
  ``title`` (or ``annotations.title``) is the title of its call card. The
  definition's ``meta["mcp"]`` holds the server's name and the tool as listed.
* ``notifications/tools/list_changed`` re-lists: removed tools are
  withdrawn, new ones registered, changed ones replaced, all in one
  registry change (``rt.tools.register_all``), so a batch sees the old
  listing or the new one, never a changed tool missing in between; tools
  that did not change keep their registration. A tool that a re-listing
  cannot register is left out and logged; when a ``tools/change`` listener
  refuses the change, every tool stays as it was, logged, and the next
  re-listing tries again. A listing the SDK refuses names the tool whose
  entry is wrong (``tool "x": inputSchema: ...``). ``mount``
  chains its handler in front of the session's ``message_handler`` (the SDK
  takes one only at construction) before it lists, so a notification that
  arrives while it lists re-lists once that listing is registered; the
  disposer (or a failed ``mount``) puts the original back.

Cancellation: when a call's signal fires, the SDK request is cancelled (the
SDK sends ``notifications/cancelled`` to the server, whose ``reason`` is the
abort's reason as text, e.g. ``tool call timed out after 200ms``), and the
call settles ``ABORTED`` once the SDK has returned.

Loops. The session belongs to the event loop ``mount`` was awaited on, and
every call runs its SDK request there. Today async tool bodies run on the
runtime's own loop thread, so each call hands its request over to the
session's loop and waits for it (one thread hop each way). When the body
already runs on the session's loop it awaits the SDK directly. So the
session's loop must keep running while batches execute: run them with
``await rt.tools.execute_async(batch)`` from that loop (or ``execute`` from
another thread). A blocking ``rt.tools.execute(batch)`` on the loop's own
thread would block the loop the calls need, and the batch would wait forever.
"""

from __future__ import annotations

from ._errors import McpConnectionError, McpProtocolError, McpToolError
from ._mount import DEFAULT_TIMEOUT_MS, mount
from ._stderr import server_errlog

__all__ = ["DEFAULT_TIMEOUT_MS", "McpConnectionError", "McpProtocolError", "McpToolError", "mount", "server_errlog"]
