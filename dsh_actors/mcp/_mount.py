"""``mount``: an initialized MCP ``ClientSession``'s tools as registrations."""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import json
import re
import threading
import weakref
from collections.abc import Coroutine, Mapping
from typing import TYPE_CHECKING, Any, Final

import orjson
from loguru import logger
from mcp import ClientSession, types
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from ..definition import ToolDefinition, ToolOutput, reserved_name_problem, timeout_problem, validate_definition
from ..errors import (
    AbortError,
    DshError,
    InvalidStateError,
    InvalidTypeError,
    InvalidValueError,
    RegistrationError,
    ToolOutputError,
    ToolTimeoutError,
    safe_str,
)
from ..events import Disposer, disposer
from ..json import materialize, thaw
from ..model import ContentBlock, TextBlock
from ..pipeline.flights import LoopGoneError, await_flight
from ..presentation import GenericCallView, GenericResultView, ToolCallView, ToolResultView
from ..registry.scope import duplicate_problem
from ..signals import AbortController, AbortSignal
from ._content import blocks_from_wire, error_text, for_model
from ._errors import McpConnectionError, McpProtocolError, McpToolError

if TYPE_CHECKING:  # pragma: no cover
    from ..execution import ToolExecution, ToolRunContext
    from ..model import Agent, ToolExecutionResult
    from ..runtime import ToolRuntime

__all__ = ["DEFAULT_TIMEOUT_MS", "mount"]

#: The bound of every request a mount sends when ``mount`` gets no
#: ``timeout_ms``: a ``tools/call`` or ``tools/list`` page unanswered after
#: this long fails (a server that never answers cannot hang a batch).
DEFAULT_TIMEOUT_MS: Final = 60_000.0
#: JSON-RPC code and message of the error the SDK raises for a closed
#: connection (mcp_types.jsonrpc). The code alone is not enough: -32000 opens
#: JSON-RPC's server-error range, and a server may answer one request with it
#: ("rate limited") over a connection that is fine.
_CONNECTION_CLOSED: Final = -32000
_CLOSED_MESSAGE: Final = "Connection closed"
#: ``ErrorData.data`` of the error the mount hands the SDK's waiter for an
#: answer the SDK could not read (see ``_fail_malformed``).
_MALFORMED: Final = "dsh-actors: malformed answer"
#: A server that keeps handing out cursors is cut off after this many pages.
_MAX_PAGES: Final = 1000
#: The names registration accepts (``TOOL_NAME_RULE``), and what is replaced.
_NAME_RE: Final = re.compile(r"[a-zA-Z0-9_-]{1,64}", re.ASCII)
_OTHER_RE: Final = re.compile(r"[^a-zA-Z0-9_-]", re.ASCII)
#: Hex digits of the hash that keeps a cut or colliding name apart.
_SUFFIX_LEN: Final = 8


async def mount(
    rt: ToolRuntime,
    session: ClientSession,
    *,
    agent: Agent | None = None,
    prefix: str = "",
    timeout_ms: float | None = None,
) -> Disposer:
    """Register every tool of ``session`` (an initialized
    ``mcp.ClientSession``) in ``rt``: in the global scope, or in ``agent``'s.

    Await it on the event loop that runs the session; that loop owns every
    call to the server from then on (see :mod:`dsh_actors.mcp`). Each tool is
    registered as ``prefix + tool.name``, in full schema mode, with
    ``timeout_ms`` (enforced by :mod:`policies.timeout` when it is in use).
    ``timeout_ms`` also bounds every request the mount sends
    (:data:`DEFAULT_TIMEOUT_MS`, 60 s, without it): an unanswered
    ``tools/call`` fails ``TOOL_TIMEOUT`` and is cancelled on the server, an
    unanswered ``tools/list`` page raises
    :class:`~dsh_actors.mcp.McpProtocolError`. A tool whose
    ``execution.taskSupport`` is ``"required"`` is left out (logged): the
    MCP SDK cannot call a tool as a task.
    ``notifications/tools/list_changed`` re-lists the tools and swaps the
    registrations in one registry change (a batch sees the old listing or
    the new one, never a changed tool missing in between).

    The tools are registered in one change (``rt.tools.register_all``).
    Raises :class:`~dsh_actors.errors.RegistrationError`, registering
    nothing, when a tool cannot be registered (a schema full mode refuses,
    the reserved name ``run_code``, a name already taken in that scope...):
    every problem of the listing itself is listed, a taken name with the
    mount's fix (a ``prefix``). A listing
    the server answers with a JSON-RPC error, with a result that is not a
    valid listing, or with JSON the SDK cannot parse (at once), raises
    :class:`~dsh_actors.mcp.McpProtocolError` naming the problem; a connection that closed meanwhile,
    :class:`~dsh_actors.mcp.McpConnectionError`.

    Returns the disposer that withdraws every registration the mount made
    (also those a re-listing made) and detaches from the session. It may be
    called from any thread; it does not close the session.
    """
    if not isinstance(session, ClientSession):
        raise InvalidTypeError(f"mount() needs an mcp.ClientSession (got {type(session).__qualname__})")
    wrong = timeout_problem(timeout_ms)
    if wrong is not None:  # (before the bound is used on the first request)
        raise InvalidValueError(f"mount(): {wrong}")
    mounted = _Mount(rt, session, asyncio.get_running_loop(), agent, prefix, timeout_ms)
    await mounted.start()
    return mounted.disposer


_UNLISTED = b""
"""The fingerprint of a tool that may or may not be registered (a swap
timed out): no listing has it (``_fingerprint`` is never empty), so the
next re-listing replaces it."""


class _Tool:
    """One mounted tool: its registration and the listing it came from."""

    __slots__ = ("fingerprint", "dispose")

    def __init__(self, fingerprint: bytes, dispose: Disposer) -> None:
        self.fingerprint = fingerprint
        self.dispose = dispose


class _UserContent:
    """A call's blocks for the user only, with its arguments and value (the
    objects ``presentation_meta`` is given)."""

    __slots__ = ("args", "value", "blocks")

    def __init__(self, args: Any, value: Any, blocks: list[dict[str, Any]]) -> None:
        self.args = args
        self.value = value
        self.blocks = blocks


class _Mount:
    """The state of one ``mount``: which registrations it owns, and the
    session's loop. ``_tools`` is changed only on the session's loop (start,
    re-listing) and by the disposer, under ``_lock``."""

    def __init__(
        self,
        rt: ToolRuntime,
        session: ClientSession,
        loop: asyncio.AbstractEventLoop,
        agent: Agent | None,
        prefix: str,
        timeout_ms: float | None,
    ) -> None:
        if type(prefix) is not str:
            raise InvalidTypeError(f"prefix must be a str (got {type(prefix).__qualname__})")
        self.rt = rt
        self.session = session
        self.loop = loop
        self.agent = agent
        self.prefix = prefix
        self.timeout_ms = timeout_ms
        self.bound_ms = DEFAULT_TIMEOUT_MS if timeout_ms is None else float(timeout_ms)
        self.service = rt.tools if agent is None else rt.tools.scope(agent)
        self.server = _server_name(session)
        self._lock = threading.Lock()
        self._tools: dict[str, _Tool] = {}
        self._disposed = False
        self._closed: str | None = None  # why the connection is gone, once it is
        self._relisting: asyncio.Task[None] | None = None
        self._relist_again = False
        self._started = False  # the first listing is registered
        self._original_handler: Any = None
        self._handler: Any = None
        # Content blocks of structured results, from the body to project_content.
        self._content: weakref.WeakKeyDictionary[Any, list[ContentBlock]] = weakref.WeakKeyDictionary()
        # An unstructured result's value and its blocks (converted by the body, which checks them), from the
        # body to render, by the call's token: render takes them rather than converting the value again.
        self._rendered: weakref.WeakKeyDictionary[Any, tuple[Any, list[ContentBlock]]] = weakref.WeakKeyDictionary()
        self._content_lock = threading.Lock()
        # Blocks for the user only, from the body to presentation_meta, by the call's token.
        self._for_user: weakref.WeakKeyDictionary[Any, _UserContent] = weakref.WeakKeyDictionary()
        self.disposer = disposer(self._dispose)
        self._stop_hook: Disposer | None = None

    # -- listing and registering ------------------------------------------

    async def start(self) -> None:
        # Attached before the listing: an answer to it that the SDK cannot
        # read fails it at once, and a list_changed that arrives meanwhile
        # re-lists once the listing is registered.
        self._attach()
        _KeepListings.wrap(self.session)
        try:
            await self._register_listing()
        except BaseException:
            self._detach()
            raise
        self._started = True
        if self._relist_again:
            self._schedule_relist()
        _forward_cancel_reasons(self.session)
        self._stop_hook = self.rt.on_stop(self._detach)

    async def _register_listing(self) -> None:
        tools = await self._list_all()
        built, problems = self._build_all(tools)
        if problems:
            raise RegistrationError(f'cannot mount MCP server "{self.server}": ' + "; ".join(problems))
        try:  # (one change: the server's tools appear together, or none does)
            disposers = self.service.register_all([definition for _, definition in built.values()])
        except RegistrationError as err:
            refusals = self._refusals(err, built)
            raise RegistrationError(
                f'cannot mount MCP server "{self.server}": ' + "; ".join(refusals.values() or [err.message])
            ) from err
        with self._lock:
            self._tools = _recorded(built, disposers)

    async def _list_all(self) -> list[types.Tool]:
        tools: list[types.Tool] = []
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(_MAX_PAGES):
            params = None if cursor is None else types.PaginatedRequestParams(cursor=cursor)
            answers: list[Any] = []  # the page as the server answered it (_KeepListings)
            keeping = _LISTING_ANSWERS.set(answers)
            try:
                async with asyncio.timeout(self.bound_ms / 1000):
                    page = await self.session.list_tools(params=params)
            except TimeoutError:
                raise McpProtocolError("tools/list", f"the server did not answer within {self.bound_ms:g} ms") from None
            except MCPError as err:
                if _closed_by_sdk(err):
                    raise McpConnectionError(self.server, safe_str(err.message)) from err
                raise _answered_error("tools/list", err) from err
            except ValidationError as err:  # a result the SDK cannot read as a listing
                raise McpProtocolError("tools/list", _invalid_listing(err, answers)) from None
            finally:
                _LISTING_ANSWERS.reset(keeping)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                return tools
            if cursor in seen:
                raise McpProtocolError("tools/list", f"the server repeated the cursor {cursor!r}")
            seen.add(cursor)
        raise McpProtocolError("tools/list", f"the listing did not end after {_MAX_PAGES} pages")

    def _build_all(self, tools: list[types.Tool]) -> tuple[dict[str, tuple[bytes, ToolDefinition]], list[str]]:
        built: dict[str, tuple[bytes, ToolDefinition]] = {}
        problems: list[str] = []
        names = _registered_names(self.prefix, [tool.name for tool in tools])
        for tool in tools:
            if tool.execution is not None and tool.execution.task_support == "required":
                logger.warning(
                    "MCP server {!r}: tool {!r} left out: it must be called as an MCP task, "
                    "which the MCP SDK does not support",
                    self.server,
                    tool.name,
                )
                continue
            if tool.name in built:
                problems.append(f'the server lists tool "{tool.name}" twice')
                continue
            reserved = reserved_name_problem(names[tool.name])
            if reserved is not None:  # (registration's words, and the mount's fix)
                problems.append(
                    RegistrationError(f"{reserved}: {self._prefix_fix(tool.name)}", tool=names[tool.name]).message
                )
                continue
            try:
                definition = self._definition(tool, names[tool.name])
                validate_definition(definition)
            except DshError as err:
                problems.append(err.message)
                continue
            built[tool.name] = (_fingerprint(tool), definition)
        return built, problems

    def _prefix_fix(self, name: str) -> str:
        """The one way to another name a server's tool ``name`` has: the prefix."""
        which = "another" if self.prefix else "a"
        example = "mcp2_" if self.prefix == "mcp_" else "mcp_"
        return f'mount the server with {which} prefix (prefix="{example}" registers it as "{example}{name}")'

    def _refusals(self, err: RegistrationError, built: Mapping[str, tuple[bytes, ToolDefinition]]) -> dict[str, str]:
        """The tools of ``built`` (by the server's name) that ``register_all``
        refused, each with registration's refusal; for a name taken in the
        scope, with the mount's fix instead of registration's
        (``@tool(name=...)`` and the like, which a server's tool cannot
        take). Empty when the change failed whole (a listener raised)."""
        names = {definition.name: name for name, (_, definition) in built.items()}
        out: dict[str, str] = {}
        for refused in err.errors:
            name = names.get(refused.tool) if refused.tool is not None else None
            if name is None:
                continue
            if refused.problem != duplicate_problem(self.agent):
                out[name] = refused.message
                continue
            fix = f"{self._prefix_fix(name)}, or withdraw the other tool first"
            out[name] = RegistrationError(duplicate_problem(self.agent, fix), tool=refused.tool).message
        return out

    def _definition(self, tool: types.Tool, registered: str) -> ToolDefinition:
        name = tool.name
        annotations = tool.annotations
        read_only = annotations is not None and annotations.read_only_hint is True
        destructive = annotations is not None and annotations.destructive_hint is True
        # The server's word, as for concurrency: a read-only tool, or one that
        # declares repeated calls have no further effect, may run again when
        # rt.tools.recover finds its call started and unfinished.
        idempotent = read_only or (annotations is not None and annotations.idempotent_hint is True)
        title = tool.title or (annotations.title if annotations is not None else None) or self.prefix + name
        output_schema = tool.output_schema
        wire = tool.model_dump(mode="json", by_alias=True, exclude_none=True)

        async def execute(args: Any, ctx: ToolRunContext) -> Any:
            return await self.call(name, registered, output_schema is not None, args, ctx)

        def present_call(args: Any) -> ToolCallView:
            return GenericCallView(title=title, raw_input=args)

        return ToolDefinition(
            name=registered,
            description=tool.description or "",
            parameters=tool.input_schema,
            output=ToolOutput(
                schema={} if output_schema is None else output_schema,
                render=self._render,
                presentation_meta=self._presentation_meta,
            ),
            execute=execute,
            is_concurrency_safe=_safe if read_only and not destructive else None,
            timeout_ms=self.timeout_ms,
            idempotent=idempotent,
            project_content=self._project_content,
            present_call=present_call,
            present_result=_present_result,
            meta={"mcp": {"server": self.server, "tool": wire}},
            schema_mode="full",
        )

    def _attach(self) -> None:
        """Chain a handler in front of the session's ``message_handler`` (a
        ``ClientSession`` takes its handler only at construction)."""
        original = getattr(self.session, "_message_handler", None)
        if original is None:
            logger.warning(
                "MCP server {!r}: this ClientSession has no message handler to chain; "
                "notifications/tools/list_changed will not re-list its tools",
                self.server,
            )
            return

        async def handler(message: Any) -> None:
            if isinstance(message, types.ToolListChangedNotification):
                self._schedule_relist()
            elif isinstance(message, Exception):
                logger.debug("MCP server {!r}: transport error {}", self.server, safe_str(message))
                self._fail_malformed(message)
            await original(message)

        self._original_handler = original
        self._handler = handler
        self.session._message_handler = handler

    def _fail_malformed(self, error: Exception) -> None:
        """An answer the SDK could not read (its transport hands the parse
        error to the message handler and drops the message, so the request
        would wait for its bound): when the error holds the answer's id (or
        a batch's ids), the SDK's waiter for each gets an error at once,
        which the request maps to ``MCP_PROTOCOL_ERROR``. Uses the
        dispatcher's waiter table (no public hook exists); without it the
        request's bound applies."""
        for request_id, detail in answer_failed_malformed(self.session, error):
            logger.warning("MCP server {!r}: unreadable answer to request {!r}: {}", self.server, request_id, detail)

    def _schedule_relist(self) -> None:
        # On the session's loop (the message handler). One re-listing at a
        # time; notifications that arrive meanwhile cause one more, as do
        # those that arrive while start() lists (it schedules that one).
        if self._disposed:
            return
        if not self._started or (self._relisting is not None and not self._relisting.done()):
            self._relist_again = True
            return
        self._relisting = self.loop.create_task(self._relist())

    async def _relist(self) -> None:
        while not self._disposed:
            self._relist_again = False
            try:
                tools = await self._list_all()
            except Exception as exc:  # noqa: BLE001 - a re-listing never raises into the SDK
                logger.error("MCP server {!r}: re-listing tools failed: {}", self.server, safe_str(exc))
                return
            try:
                self._swap(tools)
            except Exception as exc:  # noqa: BLE001 - _swap contains its own; never an unretrieved task error
                logger.error("MCP server {!r}: swapping the re-listed tools failed: {}", self.server, _text(exc))
            if not self._relist_again:
                return

    def _swap(self, tools: list[types.Tool]) -> None:
        """Withdraw the tools the listing removed or changed and register the
        new and changed ones as ONE registry change (``register_all``): a
        batch sees the old listing or the new one, never a changed tool
        missing in between. A tool that cannot be registered is left out
        (logged) and the change is made without it; when the change fails
        whole (a ``tools/change`` listener refused it), every tool stays as
        it was (logged) and the next re-listing tries again. When it times
        out (``TimeoutError``), only the kept tools are known to stay: the
        others are recorded with no listing's fingerprint, so the next
        re-listing withdraws whichever is still registered and registers the
        listed ones again. ``_tools`` always holds what is registered (or,
        after a timeout, may be), so the next re-listing starts from the
        truth."""
        built, problems = self._build_all(tools)
        for problem in problems:
            logger.error("MCP server {!r}: tool left out after re-listing: {}", self.server, problem)
        with self._lock:
            if self._disposed:
                return
            record = dict(self._tools)
        kept = {name: tool for name, tool in record.items() if name in built and built[name][0] == tool.fingerprint}
        replaced = [tool.dispose for name, tool in record.items() if name not in kept]
        new = {name: entry for name, entry in built.items() if name not in kept}
        if not replaced and not new:
            return
        while True:
            try:
                disposers = self.service.register_all(
                    [definition for _, definition in new.values()], replacing=replaced
                )
                record = {**kept, **_recorded(new, disposers)}
                break
            except TimeoutError as err:
                # Not started (nothing changed), rolled back, or applied late
                # and then undone (what it replaced stays withdrawn): which
                # one is unknown here.
                logger.error(
                    "MCP server {!r}: the registry did not take the re-listed tools in time ({}); only the "
                    "unchanged tools are sure to stay registered (the next re-listing registers the others again)",
                    self.server,
                    safe_str(err),
                )
                record = {
                    **kept,
                    **{name: _Tool(_UNLISTED, tool.dispose) for name, tool in record.items() if name not in kept},
                }
                break
            except RegistrationError as err:
                refusals = self._refusals(err, new)
                if not refusals:
                    logger.error(
                        "MCP server {!r}: the re-listed tools were not swapped, every tool stays as it was "
                        "(the next re-listing tries again): {}",
                        self.server,
                        err.message,
                    )
                    return
                for name, text in refusals.items():
                    logger.error("MCP server {!r}: tool {!r} left out after re-listing: {}", self.server, name, text)
                    del new[name]
        leftovers: list[_Tool] = []
        with self._lock:
            if self.disposed():  # (a method: mypy would take the check above as still holding)
                leftovers = list(record.values())  # disposed meanwhile: undo what this swap made (idempotent)
            else:
                self._tools = record
        for tool in leftovers:
            try:
                tool.dispose()
            except DshError as err:  # the runtime stopped meanwhile
                logger.debug("MCP server {!r}: {}", self.server, err.message)

    # -- disposing ----------------------------------------------------------

    def disposed(self) -> bool:
        """Whether the mount was disposed (or its runtime stopped)."""
        return self._disposed

    def _dispose(self) -> None:
        with self._lock:
            self._disposed = True
            tools, self._tools = self._tools, {}
        for tool in tools.values():
            try:
                tool.dispose()
            except DshError as err:  # the runtime stopped meanwhile
                logger.debug("MCP server {!r}: {}", self.server, err.message)
        self._detach()
        if self._stop_hook is not None:
            self._stop_hook()

    def _detach(self) -> None:
        self._disposed = True
        if self._handler is not None and getattr(self.session, "_message_handler", None) is self._handler:
            self.session._message_handler = self._original_handler
        task = self._relisting
        if task is not None and not task.done():
            try:
                self.loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:  # the loop is closed: the task is gone with it
                pass

    # -- calling ------------------------------------------------------------

    async def call(self, name: str, registered: str, structured: bool, args: Any, ctx: ToolRunContext) -> Any:
        """The body of every mounted tool: call ``name`` (the server's own
        name for it) on the session's loop, map the result (module docstring
        of :mod:`dsh_actors.mcp`); errors name the tool as ``registered``."""
        if self._closed is not None:
            raise McpConnectionError(self.server, self._closed)
        request = self._request(name, thaw(args), _request_meta(), _progress_to(ctx))
        # The mount's bound cancels the request as an abort does (one path:
        # the SDK's shielded notifications/cancelled, with the reason).
        loop = asyncio.get_running_loop()
        bound = ToolTimeoutError(self.bound_ms)
        deadline = AbortController()
        timer = loop.call_later(self.bound_ms / 1000, deadline.abort, bound)
        signal = AbortSignal.any(ctx.signal, deadline.signal)
        # The request's task copies this context (here or on the session's loop).
        reset = _CALL_SIGNALS.set((signal, ctx.signal, deadline.signal))
        try:
            result = await self._on_session_loop(request, signal, registered, ctx.call_id)
        except asyncio.CancelledError:
            if signal.reason is bound:  # the bound fired before the caller's signal
                raise bound from None
            raise
        finally:
            _CALL_SIGNALS.reset(reset)
            timer.cancel()
            signal.close()
        return self._value(registered, structured, result, args, ctx)

    async def _request(
        self, name: str, arguments: Any, meta: dict[str, Any] | None, progress: Any
    ) -> types.CallToolResult:
        try:
            return await self.session.send_request(
                types.CallToolRequest(
                    params=types.CallToolRequestParams(name=name, arguments=arguments, _meta=meta)  # type: ignore[arg-type]
                ),
                types.CallToolResult,
                progress_callback=progress,
            )
        except MCPError as err:
            if _closed_by_sdk(err):
                self._closed = safe_str(err.message) or "connection closed"
                raise McpConnectionError(self.server, self._closed) from err
            raise _answered_error(name, err) from err
        except asyncio.CancelledError:
            raise
        except RuntimeError as err:
            # Before the session was entered, or after it exited.
            self._closed = safe_str(err)
            raise McpConnectionError(self.server, self._closed) from err
        except ValidationError as err:  # a result the SDK cannot read as a tools/call result
            raise McpProtocolError(name, f"the server's result is not valid: {_problems(err)}") from None
        except Exception as err:  # noqa: BLE001 - a broken stream, or something else the SDK raised
            if _is_closed_stream(err):
                self._closed = "the connection was closed"
                raise McpConnectionError(self.server, self._closed) from err
            raise McpProtocolError(name, safe_str(err) or type(err).__name__) from err

    async def _on_session_loop(
        self, request: Coroutine[Any, Any, types.CallToolResult], signal: AbortSignal, name: str, call_id: str
    ) -> types.CallToolResult:
        """Run ``request`` as a flight on the session's loop (the runtime's
        one way to run a coroutine on a loop, ``pipeline/flights.py``) and
        await it here, on this loop or another. When ``signal`` fires, or
        this task is cancelled, the request's task is cancelled there (the
        SDK then sends ``notifications/cancelled``), and this waits until
        the SDK has returned before the cancellation goes on."""
        try:
            return await await_flight(self.rt.loop_watch, request, signal, self.loop, name, call_id)  # type: ignore[no-any-return]
        except AbortError:  # the signal cancelled the request (or it never started)
            raise asyncio.CancelledError() from None
        except LoopGoneError as err:
            self._closed = f"the event loop that owns the session stopped ({safe_str(err)})"
            raise McpConnectionError(self.server, self._closed) from None

    def _value(self, name: str, structured: bool, result: types.CallToolResult, args: Any, ctx: ToolRunContext) -> Any:
        every = [block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in result.content]
        visible = [for_model(block) for block in every]
        content = [block for block, seen in zip(every, visible, strict=True) if seen]
        if result.is_error:
            raise McpToolError(name, error_text(content))
        try:
            # (Converted once, here: a bad image is the server's fault. The
            # blocks the model sees are kept for render or project_content.)
            blocks = blocks_from_wire(every)
        except InvalidValueError as err:
            raise McpProtocolError(name, f"the server's result is not valid: {err.message}") from None
        shown = [block for block, seen in zip(blocks, visible, strict=True) if seen]
        value: Any
        if result.structured_content is None:
            if structured:
                raise ToolOutputError(
                    name,
                    ['"value" is missing: the tool declares an outputSchema but returned no structuredContent'],
                )
            value = self._keep_rendered(content, shown, ctx)
        else:
            with self._content_lock:
                self._content[ctx.token] = shown or [TextBlock(_json_text(result.structured_content))]
            value = result.structured_content
        if len(content) < len(every):
            value = self._keep_for_user(
                [block for block, seen in zip(every, visible, strict=True) if not seen], args, value, ctx
            )
        return value

    def _keep_rendered(self, content: list[dict[str, Any]], shown: list[ContentBlock], ctx: ToolRunContext) -> Any:
        """An unstructured result's value (its wire blocks the model sees),
        frozen, which the runtime keeps as it is: ``render`` is given that
        very object and takes ``shown``, the blocks made of it, rather than
        converting it again (``_render``). The entry goes with the call's
        token, and at ``project_content`` if render did not take it."""
        try:
            value = materialize(content)
        except DshError:
            return content  # not lossless JSON: the runtime fails the call (INVALID_TOOL_OUTPUT)
        if shown:  # (an empty value is the one empty tuple: nothing to keep)
            with self._content_lock:
                self._rendered[ctx.token] = (value, shown)
        return value

    def _render(self, args: Any, value: Any) -> list[ContentBlock]:
        """The content of a value: the blocks the body made of it when it is
        an unstructured result's value as the body returned it; else (a
        value a policy put in) :func:`_render`'s."""
        if type(value) is tuple and value:
            with self._content_lock:
                for token, (kept, blocks) in self._rendered.items():
                    if kept is value:
                        del self._rendered[token]
                        return blocks
        return _render(args, value)

    def _keep_for_user(self, blocks: list[dict[str, Any]], args: Any, value: Any, ctx: ToolRunContext) -> Any:
        """Keep a call's blocks for the user only for ``presentation_meta``,
        which sees the call's arguments and value, not its token: the value
        is returned frozen, which the runtime keeps as it is, so the value
        object ``presentation_meta`` gets tells the calls apart even when
        they share one arguments object. The entry goes with the call's
        token, and at ``project_content`` (every outcome, failures included,
        but a PTC sub-call's success, whose ``presentation_meta`` is asked
        after it) if ``presentation_meta`` did not take it."""
        try:
            value = materialize(value)
        except DshError:
            return value  # not lossless JSON: the runtime fails the call (INVALID_TOOL_OUTPUT)
        with self._content_lock:
            self._for_user[ctx.token] = _UserContent(args, value, blocks)
        return value

    def _presentation_meta(self, args: Any, value: Any) -> Any:
        """``{"mcp": {"user_content": [...]}}``: the result's blocks for the
        user only (wire form), logged with the result for the cards. Calls
        that cannot be told apart (given one arguments object, each with
        every block for the user only, so the same empty value) get none:
        better no blocks than another call's."""
        with self._content_lock:
            found = [token for token, kept in self._for_user.items() if kept.value is value and kept.args is args]
            if len(found) != 1:
                return None
            kept = self._for_user.pop(found[0])
        return {"mcp": {"user_content": kept.blocks}}

    def _project_content(self, execution: ToolExecution, result: ToolExecutionResult) -> list[ContentBlock] | None:
        with self._content_lock:
            blocks = self._content.pop(execution.token, None)
            if execution.parent is None or result.is_error:
                # (A failure after the body: never presented. A sub-call's
                # success keeps its blocks: its presentation meta is asked
                # after this hook, for the session log's copy,
                # dsh_actors.logged_meta; the token's going drops them else.)
                self._for_user.pop(execution.token, None)
            self._rendered.pop(execution.token, None)  # (a failure before render, or a policy's value)
        if blocks is None or result.is_error:
            return None
        return blocks


def _recorded(built: Mapping[str, tuple[bytes, ToolDefinition]], disposers: list[Disposer]) -> dict[str, _Tool]:
    """The mounted tools ``register_all`` registered: ``built``'s, by the
    server's name, with the disposers it returned (in the same order)."""
    return {
        name: _Tool(fingerprint, dispose)
        for (name, (fingerprint, _)), dispose in zip(built.items(), disposers, strict=True)
    }


def _text(exc: BaseException) -> str:
    """An exception as a log line: a DshError's message, else its text (or
    its class name when it has none)."""
    if isinstance(exc, DshError) and type(exc.message) is str:
        return exc.message
    return safe_str(exc) or type(exc).__name__


def _fits(name: str) -> bool:
    return _NAME_RE.fullmatch(name) is not None


def _suffixed(text: str, full: str) -> str:
    """``text`` cut to leave room for ``_`` and a hash of ``full`` (stable
    across processes and re-listings)."""
    digest = hashlib.sha256(full.encode("utf-8", "surrogatepass")).hexdigest()[:_SUFFIX_LEN]
    return f"{text[: 64 - _SUFFIX_LEN - 1]}_{digest}"


def _registered_names(prefix: str, names: list[str]) -> dict[str, str]:
    """The name each listed tool is registered under: ``prefix + name`` when
    that fits ``TOOL_NAME_RULE``; otherwise every other character replaced
    by ``_`` (``notes.read`` -> ``notes_read``) and, when that is longer than
    64 characters or is also another tool's name, cut and given a short hash
    of the full name as a suffix."""
    out: dict[str, str] = {}
    taken = {prefix + name for name in names if _fits(prefix + name)}
    mapped: dict[str, list[str]] = {}
    for name in names:
        full = prefix + name
        if _fits(full):
            out[name] = full
            continue
        cleaned = _OTHER_RE.sub("_", full) or "_"
        out[name] = cleaned if len(cleaned) <= 64 else _suffixed(cleaned, full)
        mapped.setdefault(out[name], []).append(name)
    for candidate, sources in mapped.items():
        if len(sources) > 1 or candidate in taken:
            for name in sources:
                out[name] = _suffixed(_OTHER_RE.sub("_", prefix + name), prefix + name)
    return out


#: The signals of the mounted tool call whose SDK request runs in this
#: context: the fused one, then its parents (the call's and the bound's). A
#: parent is read too because the fused signal aborts on the thread that
#: aborted the parent, possibly after the request was already cancelled.
_CALL_SIGNALS: contextvars.ContextVar[tuple[AbortSignal, ...]] = contextvars.ContextVar(
    "dsh_mcp_call_signals", default=()
)


#: The ``tools/list`` answers the SDK's dispatcher returned to the task that
#: runs in this context (``_Mount._list_all`` sets a fresh list per page).
_LISTING_ANSWERS: contextvars.ContextVar[list[Any] | None] = contextvars.ContextVar(
    "dsh_mcp_listing_answers", default=None
)


class _KeepListings:
    """The session's dispatcher's ``send_raw_request``, wrapped once per
    session: a ``tools/list`` answer is kept, as the server sent it, for
    the listing that asked for it (``_LISTING_ANSWERS``), so a listing the
    SDK refuses can be told by the names of its tools (its validation
    error gives their indexes only). The SDK has no hook for it; without
    that method (another SDK version) the complaints give indexes."""

    __slots__ = ("original",)

    def __init__(self, original: Any) -> None:
        self.original = original

    @classmethod
    def wrap(cls, session: ClientSession) -> None:
        dispatcher = getattr(session, "_dispatcher", None)
        original = getattr(dispatcher, "send_raw_request", None)
        if original is not None and not isinstance(original, cls):
            dispatcher.send_raw_request = cls(original)  # type: ignore[union-attr]

    async def __call__(self, method: str, *args: Any, **kwargs: Any) -> Any:
        answer = await self.original(method, *args, **kwargs)
        kept = _LISTING_ANSWERS.get()
        if kept is not None and method == "tools/list":
            kept.append(answer)
        return answer


def _forward_cancel_reasons(session: ClientSession) -> None:
    """Make the SDK's ``notifications/cancelled`` for a mounted call carry
    the abort's reason (the SDK writes ``"caller cancelled"``). The SDK has
    no option for it and mints the request ids itself, so this wraps its
    dispatcher's cancel writer once per session; outside a mounted call
    (no ``_CALL_SIGNALS``) the SDK's own reason stays. Without that writer
    (another SDK version) the reason is not forwarded."""
    dispatcher = getattr(session, "_dispatcher", None)
    original = getattr(dispatcher, "_cancel_outbound", None)
    if original is None or getattr(original, "_dsh_forwards_reasons", False):
        return

    async def cancel_outbound(request_id: Any, reason: str, related_request_id: Any) -> None:
        for signal in _CALL_SIGNALS.get():
            if signal.aborted:
                reason = safe_str(signal.reason) or reason
                break
        await original(request_id, reason, related_request_id)

    cancel_outbound._dsh_forwards_reasons = True  # type: ignore[attr-defined]
    dispatcher._cancel_outbound = cancel_outbound  # type: ignore[union-attr]


def _safe(args: Any) -> bool:
    return True


def _json_text(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return safe_str(value)


def _render(args: Any, value: Any) -> list[ContentBlock]:
    """Content of a value: MCP content blocks (an unstructured result) are
    converted; any other value (structured content, or a value a policy put
    in) is shown as compact JSON. The body's own unstructured value is not
    converted again (``_Mount._render`` takes the blocks the body made), and
    a structured result's own content blocks replace this rendering
    (``project_content``)."""
    if type(value) is tuple and all(isinstance(b, Mapping) and type(b.get("type")) is str for b in value):
        return blocks_from_wire(value)
    if type(value) is str:
        return [TextBlock(value)]
    return [TextBlock(_json_text(value))]


def _present_result(args: Any, result: Any) -> ToolResultView | None:
    """The generic card, with the blocks for the user only (kept in the
    result's meta, off the model's content) after the model's content."""
    meta = result.meta
    mcp = meta.get("mcp") if isinstance(meta, Mapping) else None
    user = mcp.get("user_content") if isinstance(mcp, Mapping) else None
    if not user:
        return None
    return GenericResultView(content=(*result.content, *blocks_from_wire(user)))


def _fingerprint(tool: types.Tool) -> bytes:
    """The tool as listed, as canonical bytes (what a re-listing compares).
    The standard library's JSON: orjson refuses an int beyond 64 bits,
    which a tool's ``_meta`` or schema may hold."""
    wire = tool.model_dump(mode="json", by_alias=True, exclude_none=True)
    return json.dumps(wire, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass")


def _server_name(session: ClientSession) -> str:
    try:
        info = session.server_info
    except Exception:  # noqa: BLE001 - a name for messages only
        info = None
    name = getattr(info, "name", None)
    return name if type(name) is str and name else "mcp"


def _invalid_listing(err: ValidationError, answers: list[Any]) -> str:
    """A listing page the SDK refused (``err``), as ``_problems`` says it,
    a complaint about a tool naming the tool (``tool "x": inputSchema:
    ...``, not ``tools.0.inputSchema``) when the page as the server
    answered it (``answers``, kept by ``_KeepListings``) gives its entry a
    name, and then the fix."""
    answer = answers[-1] if answers else None
    entries = answer.get("tools") if isinstance(answer, Mapping) else None
    names: dict[int, str] = {}
    if type(entries) is list:
        for index, entry in enumerate(entries):
            name = entry.get("name") if isinstance(entry, Mapping) else None
            if type(name) is str:
                names[index] = _json_text(name[:64])
    detail = f"the server's listing is not valid: {_problems(err, names)}"
    indexes = {_tool_index(tuple(detail["loc"])) for detail in err.errors(include_url=False)}
    named = sorted({names[index] for index in indexes if index is not None and index in names})
    if not named:
        return detail
    which = f"tool {named[0]}" if len(named) == 1 else f"tools {', '.join(named)}"
    return (
        f"{detail} (the MCP SDK refuses the whole listing for {'it' if len(named) == 1 else 'them'}: "
        f"fix {which} on the server)"
    )


def _tool_index(loc: tuple[Any, ...]) -> int | None:
    """The index of the listed tool a complaint's path is in (``tools.3....``)."""
    return loc[1] if len(loc) >= 2 and loc[0] == "tools" and type(loc[1]) is int else None


class _ToolEntry(str):
    """A listed tool in a complaint's path: its name, as JSON (see ``_problem``)."""

    __slots__ = ()


def _problems(err: ValidationError, names: Mapping[int, str] | None = None) -> str:
    """pydantic's complaints about a server's answer, each as ``path:
    message``, the first three (see ``_collapsed`` for unions). ``names``:
    of a listing, the listed tools' names by index, which a complaint
    about a named tool shows instead of its index."""
    found = [(_named(tuple(d["loc"]), names), d) for d in err.errors(include_url=False, include_context=False)]
    parts = _collapsed(found)
    more = f" (and {len(parts) - 3} more)" if len(parts) > 3 else ""
    return "; ".join(parts[:3]) + more


def _collapsed(found: list[tuple[tuple[Any, ...], Any]]) -> list[str]:
    """pydantic tries every member of a union (a content block is text,
    image, audio, resource link or resource) and complains once per member,
    naming it in the path (``content.0.TextContent.text``). Those become the
    complaints of the members whose ``type`` matched, without their names
    (``content.0.text: Field required``); when no member's did,
    ``content.0: unknown type "hologram"``."""
    parts: list[str | tuple[Any, ...]] = []
    unions: dict[tuple[Any, ...], dict[str, list[tuple[tuple[Any, ...], Any]]]] = {}
    for loc, detail in found:
        at = next((i for i, part in enumerate(loc) if _is_member(part)), None)
        if at is None:
            parts.append(_problem(loc, detail["msg"]))
            continue
        prefix = loc[:at]
        if prefix not in unions:
            unions[prefix] = {}
            parts.append(prefix)
        unions[prefix].setdefault(loc[at], []).append((loc[at + 1 :], detail))
    out: list[str] = []
    for part in parts:
        if isinstance(part, str):
            out.append(part)
            continue
        members = unions[part]
        matched = [tried for tried in members.values() if all(rest != ("type",) for rest, _ in tried)]
        if matched:
            out.extend(_collapsed([(part + rest, d) for tried in matched for rest, d in tried]))
            continue
        kinds = [d.get("input") for tried in members.values() for rest, d in tried if rest == ("type",)]
        kind = next((k for k in kinds if type(k) is str), None)
        what = f'unknown type "{kind[:40]}"' if kind is not None else "no type, or a type that is not a string"
        out.append(_problem(part, what))
    return list(dict.fromkeys(out))


def _named(loc: tuple[Any, ...], names: Mapping[int, str] | None) -> tuple[Any, ...]:
    index = _tool_index(loc) if names else None
    if names is None or index is None or index not in names:
        return loc
    return (_ToolEntry(names[index]), *loc[2:])


def _problem(loc: tuple[Any, ...], message: str) -> str:
    if loc and isinstance(loc[0], _ToolEntry):  # (a listed tool, by name)
        rest = ".".join(str(part) for part in loc[1:])
        return f"tool {loc[0]}: {rest + ': ' if rest else ''}{message}"
    return f"{'.'.join(str(part) for part in loc) or 'result'}: {message}"


def _is_member(part: object) -> bool:
    """Whether a path element names the member of a union pydantic tried
    (a model's class name; MCP's own fields start in lower case)."""
    return type(part) is str and part[:1].isupper()


def _answered_error(tool: str, err: MCPError) -> McpProtocolError:
    """A request's JSON-RPC error as ``MCP_PROTOCOL_ERROR``: with the
    server's code, or without one for an answer the SDK could not read (the
    error ``_fail_malformed`` handed its waiter)."""
    if err.data == _MALFORMED:
        return McpProtocolError(tool, safe_str(err.message))
    return McpProtocolError(tool, safe_str(err.message), err.code)


def _closed_by_sdk(err: MCPError) -> bool:
    """Whether ``err`` is the SDK saying the connection closed, not a
    server's own error that happens to use the same code."""
    return err.code == _CONNECTION_CLOSED and err.message == _CLOSED_MESSAGE and err.data is None


def _is_closed_stream(err: BaseException) -> bool:
    try:
        import anyio
    except ImportError:  # pragma: no cover - the SDK depends on anyio
        return False
    return isinstance(err, (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError))


def _progress_to(ctx: ToolRunContext) -> Any:
    """The SDK's progress callback for one call (the SDK sends the request
    id as ``_meta.progressToken``): each ``notifications/progress`` becomes
    the call's ``tools/progress``, its listeners run in the call's context
    (a copy, on the session's loop). After the body returned, a late
    notification is dropped (``report_progress`` raises, saying so)."""
    context = contextvars.copy_context()

    async def progress(value: float, total: float | None, message: str | None) -> None:
        try:
            context.run(ctx.report_progress, value, total, message)
        except InvalidStateError:
            pass  # the server's notification came after the call's result: nobody waits for it
        except (TypeError, ValueError) as exc:  # a server's bad numbers: never the call's failure
            logger.warning("MCP progress for {} ignored: {}", ctx.call_id, safe_str(exc))

    return progress


def _request_meta() -> dict[str, Any] | None:
    """``params._meta`` of a ``tools/call``: the current trace context
    (W3C ``traceparent``/``tracestate``, as the OpenTelemetry MCP
    conventions carry it) when OpenTelemetry is installed and a span is
    current (``policies.otel`` makes the call's span current); else None."""
    if _propagate is None:
        return None
    carrier: dict[str, Any] = {}
    try:
        _propagate.inject(carrier)
    except Exception:  # noqa: BLE001 - a broken propagator never fails the call
        return None
    return carrier or None


def _load_propagate() -> Any:
    try:
        from opentelemetry import propagate
    except ImportError:  # the otel extra is not installed: no trace context to carry
        return None
    return propagate


_propagate: Any = _load_propagate()


def answer_failed_malformed(session: ClientSession, error: Exception) -> list[tuple[Any, str]]:
    """An answer the SDK could not read (``error``, handed to the message
    handler): the session's waiter for each id it holds (one, or each
    answer's of a JSON-RPC batch) fails at once (a mount's requests, or the
    CLI's handshake before any mount). Returns ``(id, what is wrong)`` for
    each; none when ``error`` holds no answer's id (the request's bound
    applies). Uses the dispatcher's waiter table: no public hook exists."""
    answers = _malformed_answers(error, _server_name(session))
    resolve = getattr(getattr(session, "_dispatcher", None), "_resolve_pending", None)
    if resolve is None:
        return []
    for request_id, detail in answers:
        resolve(request_id, types.ErrorData(code=types.INVALID_REQUEST, message=detail, data=_MALFORMED))
    return answers


def _malformed_answers(error: Exception, server: str) -> list[tuple[Any, str]]:
    """``(id, what is wrong)`` of each JSON-RPC answer in the message the
    SDK failed to read, when ``error`` is that failure (a pydantic
    ``ValidationError`` whose input is an answer, an ``id`` with a
    ``result`` or an ``error``, or a JSON-RPC batch: an array of them);
    else none."""
    errors = getattr(error, "errors", None)
    if not callable(errors):
        return []
    try:
        details = errors()
    except Exception:  # noqa: BLE001 - not a pydantic error after all
        return []
    for detail in details:
        value: Any = detail.get("input") if isinstance(detail, Mapping) else None
        unreadable: str | None = None  # why the SDK's parser refused the line's JSON
        if type(value) is str and detail.get("type") == "json_invalid":
            # JSON the SDK's parser refuses (nested deeper than it reads, a
            # lone surrogate): the ids are read without parsing what is nested.
            try:
                value = _shallow_json(value)
            except ValueError:
                continue
            unreadable = safe_str(detail.get("msg"))
        batch = type(value) is list
        answers = [
            message
            for message in (value if batch else [value])
            if isinstance(message, Mapping) and "id" in message and ("result" in message or "error" in message)
        ]
        if answers:
            return [
                (message["id"], _what_is_wrong(message, server, batch, unreadable))
                for message in answers
                if type(message["id"]) in (int, str)
            ]
    return []


def _what_is_wrong(message: Mapping[str, Any], server: str, batch: bool, unreadable: str | None) -> str:
    if batch:
        return f'the MCP server "{server}" answered with a JSON-RPC batch (an array), which the MCP SDK cannot read'
    if unreadable is not None:
        return f'the MCP SDK cannot read the answer of MCP server "{server}" ({unreadable})'
    if "result" in message:
        result = message["result"]
        if not isinstance(result, Mapping):
            return f"the server answered with a result that is not an object ({_json_text(result)[:80]})"
        return "the server's answer is not a valid JSON-RPC response"
    return f"the server answered with an unreadable error ({_json_text(message['error'])[:80]})"


#: A JSON string, escapes and all.
_STRING_RE: Final = r'"[^"\\]*(?:\\.[^"\\]*)*"'
_STRING: Final = re.compile(_STRING_RE, re.DOTALL)
#: One JSON token after any whitespace, colons and commas (which
#: ``_shallow_json`` does not check): a string, an opening bracket, a
#: closing one, or anything else up to the next of those (a number, ``true``).
_JSON_TOKEN: Final = re.compile(rf'[\s:,]*(?:({_STRING_RE})|([{{\[])|([}}\]])|([^\s"{{}}\[\]:,]+))', re.DOTALL)
#: Everything up to the next closing bracket that is not in a string.
_TO_CLOSING: Final = re.compile(rf'[^"}}\]]*(?:{_STRING_RE}[^"}}\]]*)*', re.DOTALL)
#: Closing brackets in a row (and whitespace and commas between them).
_CLOSINGS: Final = re.compile(r"[}\]][\s,}\]]*")


def _shallow_json(text: str, keep: int = 2) -> Any:
    """``text``'s JSON value read without recursion (the standard library's
    parser recurses, and fails on nesting deeper than Python's recursion
    limit): arrays and objects ``keep`` levels down or deeper are read past
    (``_past_nested``) and stand as ``...``. Enough to read an answer's id,
    not a validator (colons and commas are not checked). Raises
    ``ValueError`` when ``text`` is not one JSON value as far as it reads."""
    stack: list[Any] = []  # the open arrays and objects, outermost first
    keys: list[Any] = []  # of each: the key whose value comes next (an object's)
    found: list[Any] = []
    pos, end = 0, len(text.rstrip())
    while pos < end:
        match = _JSON_TOKEN.match(text, pos)
        if match is None:
            raise ValueError("not JSON")
        pos = match.end()
        string, opening, closing, scalar = match.groups()
        value: Any
        if opening is not None and len(stack) < keep:
            stack.append({} if opening == "{" else [])
            keys.append(None)
            continue
        if opening is not None:
            pos = _past_nested(text, match.start(2))
            value = ...
        elif closing is not None:
            if not stack:
                raise ValueError("a closing bracket without its opening one")
            keys.pop()
            value = stack.pop()
        else:
            value = json.loads(string if string is not None else scalar)
        if not stack:
            found.append(value)
        elif type(stack[-1]) is list:
            stack[-1].append(value)
        elif keys[-1] is None:
            if type(value) is not str:
                raise ValueError("an object's key that is not a string")
            keys[-1] = value
        else:
            stack[-1][keys[-1]] = value
            keys[-1] = None
    if stack or len(found) != 1:
        raise ValueError("not one JSON value")
    return found[0]


def _past_nested(text: str, pos: int) -> int:
    """Where the array or object that opens at ``text[pos]`` ends. Read in
    runs (everything up to the next closing bracket outside a string, then
    the closing brackets in a row), not token by token: nesting a hundred
    thousand levels deep is a few steps."""
    depth = 0
    while True:
        run = _TO_CLOSING.match(text, pos)
        assert run is not None  # (it matches the empty string)
        outside = _STRING.sub("", run.group())
        depth += outside.count("{") + outside.count("[")
        closings = _CLOSINGS.match(text, run.end())
        if closings is None:
            raise ValueError("an array or object that does not end")
        first, start, end = closings.start(), closings.start(), closings.end()
        found = _closings(text, start, end)
        if found < depth:
            depth -= found
            pos = end
            continue
        while end - start > 1:  # the depth-th of them closes it: where is it?
            middle = (start + end) // 2
            if _closings(text, first, middle) >= depth:
                end = middle
            else:
                start = middle
        return end


def _closings(text: str, start: int, end: int) -> int:
    return text.count("}", start, end) + text.count("]", start, end)
