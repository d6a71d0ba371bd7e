"""The failures an MCP server's answers become (each a :class:`DshError`)."""

from __future__ import annotations

from ..errors import DshError, ErrorCode

__all__ = ["McpConnectionError", "McpProtocolError", "McpToolError"]


class McpToolError(DshError):
    """The server ran the tool and reported ``isError: true``; the message is
    the server's text (its text content blocks, joined by newlines)."""

    code = ErrorCode.MCP_TOOL_ERROR

    def __init__(self, tool: str, text: str) -> None:
        self.tool = tool
        self.text = text
        super().__init__(text if text else f'MCP tool "{tool}" reported an error without a message')


class McpProtocolError(DshError):
    """The server answered with a JSON-RPC error (``rpc_code`` is its code),
    or with something that is not a valid result."""

    code = ErrorCode.MCP_PROTOCOL_ERROR

    def __init__(self, tool: str, detail: str, rpc_code: int | None = None) -> None:
        self.tool = tool
        self.detail = detail
        self.rpc_code = rpc_code
        shown = "" if rpc_code is None else f" {rpc_code}"
        super().__init__(f'MCP protocol error{shown} calling "{tool}": {detail}')


class McpConnectionError(DshError):
    """The connection to the server is gone: the server process died or
    closed its side, the session was closed, or the event loop that owns the
    session stopped. Once this happened, every later call of the mounted
    tools fails with it at once. The message names the fix: a new session,
    mounted again."""

    code = ErrorCode.MCP_CONNECTION_CLOSED

    def __init__(self, server: str, detail: str) -> None:
        self.server = server
        self.detail = detail
        super().__init__(
            f'MCP server "{server}" is not reachable: {detail} (if the server exited, its stderr says why; '
            "start it again and mount the new session)"
        )
