"""One ACP session attached to a runtime: the listeners that turn calls into
``session/update`` notifications, the approval service that asks through
``session/request_permission``, and the prompt turn that ``session/cancel``
aborts. The only module of the core (with :mod:`._stdio`) that imports the
``acp`` SDK.

Threads. The listeners run where the pipeline runs them (the thread that
prepares, dispatches or finalizes a call); each one computes the wire fields
of its card there (presenters are pure and fast) and posts one small record
to the session's queue with ``loop.call_soon_threadsafe``. One task on the
connection's event loop, the *pump*, takes the records in order and alone
owns what the session knows about its calls (which appeared, their titles);
it sends every update itself, so a call's updates reach the client in the
order the runtime produced them. The approval service runs on a thread of the
runtime (a worker, for a call of a batch) and waits there (never on the
loop) for the answer the pump obtains.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeAlias

from acp.exceptions import RequestError
from acp.interfaces import Client
from acp.schema import (
    AllowedOutcome,
    PermissionOption,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
)
from loguru import logger
from pydantic import ValidationError

from ..definition import ToolDefinition
from ..errors import InvalidStateError, InvalidTypeError, ToolPolicyError, safe_str
from ..events import Disposer, in_scope
from ..execution import ToolExecution, ToolExecutionToken
from ..model import Agent, ApprovalRequest, ToolExecutionFailure, ToolExecutionSuccess, ToolProgress
from ..presentation import ToolCallView, ToolResultView, generic_call_view, generic_result_view
from ..presentation._projection import checked_view
from ..runtime import ToolRuntime
from ..signals import AbortController, AbortSignal
from ._cards import call_fields, raw_output, result_fields, text_content
from ._stdio import peer_text

__all__ = ["PERMISSION_OPTIONS", "AcpSession", "Turn", "attach"]

PermissionKind: TypeAlias = Literal["allow_once", "allow_always", "reject_once", "reject_always"]

PERMISSION_OPTIONS: Final[tuple[tuple[str, str, PermissionKind], ...]] = (
    ("allow-once", "Allow once", "allow_once"),
    ("allow-always", "Always allow", "allow_always"),
    ("reject-once", "Reject", "reject_once"),
    ("reject-always", "Always reject", "reject_always"),
)
"""``(option id, label, ACP kind)`` of the four options every permission
request offers, in the order the client shows them."""

_ANSWERS: Final[dict[str, tuple[str, bool]]] = {
    "allow_once": ("allowed-once", False),
    "allow_always": ("allowed-once", True),
    "reject_once": ("rejected", False),
    "reject_always": ("rejected", True),
}
_KIND_OF_OPTION: Final = {option_id: kind for option_id, _, kind in PERMISSION_OPTIONS}
#: JSON-RPC "method not found": a client that does not take permission requests.
_METHOD_NOT_FOUND: Final = -32601
_META_KEY: Final = "dsh_actors"
_UNSEEN: Final[Any] = object()
_RUNTIME_STOPPED: Final = "stopped: the runtime stopped before the call ended"
_TURN_CANCELLED: Final = "stopped: the prompt turn was cancelled before the call ended"


# --------------------------------------------------------------------------
# What the listeners post to the pump (values only)
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Appeared:
    call_id: str
    token: ToolExecutionToken
    parent_id: str | None
    fields: dict[str, Any]


@dataclass(frozen=True, slots=True)
class _Started:
    call_id: str
    token: ToolExecutionToken


@dataclass(frozen=True, slots=True)
class _Progressed:
    """The call has a progress report to show: the latest one, held in
    :attr:`_State.progress` until the pump sends it (reports made meanwhile
    replace it)."""

    call_id: str
    token: ToolExecutionToken


@dataclass(frozen=True, slots=True)
class _Settled:
    call_id: str
    token: ToolExecutionToken
    parent_id: str | None
    call: dict[str, Any]
    """The call card's fields, used when the call never appeared (it ran no
    phase: aborted before dispatch, arguments that are not JSON)."""
    failed: bool
    fields: dict[str, Any]


@dataclass(frozen=True, slots=True)
class _Ask:
    call_id: str
    tool_name: str
    reason: str | None
    answer: concurrent.futures.Future[str]


@dataclass(frozen=True, slots=True)
class _Flush:
    done: asyncio.Future[None]


@dataclass(frozen=True, slots=True)
class _Stopped:
    """The turn ended stopped (cancelled, or the runtime stopping): every
    card still open ends ``failed`` with ``text``, at once."""

    text: str


_Item: TypeAlias = _Appeared | _Started | _Progressed | _Settled | _Ask | _Flush | _Stopped | None


@dataclass(slots=True)
class _Known:
    """What the pump knows of a call that appeared."""

    token: ToolExecutionToken
    title: str
    fields: dict[str, Any]


@dataclass(frozen=True, slots=True, eq=False)
class Turn:
    """One prompt turn: run its batches with :attr:`signal`; after them,
    :attr:`cancelled` says whether the client cancelled the turn (answer the
    prompt with the stop reason ``"cancelled"`` then)."""

    signal: AbortSignal

    @property
    def cancelled(self) -> bool:
        return self.signal.aborted

    @property
    def stop_reason(self) -> Literal["cancelled", "end_turn"]:
        """``"cancelled"`` when the turn was cancelled, else ``"end_turn"``."""
        return "cancelled" if self.signal.aborted else "end_turn"


@dataclass(eq=False)
class _State:
    """The fields several threads touch, under :attr:`AcpSession._lock`."""

    remembered: dict[str, str] = field(default_factory=dict)
    progress: dict[ToolExecutionToken, ToolProgress] = field(default_factory=dict)
    """Each call's latest progress report not sent yet (its ``_Progressed``
    is queued), by execution (a call id may be reused)."""
    turn: AbortController | None = None
    detached: bool = False


class AcpSession:
    """A runtime attached to one ACP session (see :func:`attach`).

    :meth:`turn` runs a prompt turn (:attr:`turn_running` says whether one
    runs), :meth:`cancel` (the handler of the client's ``session/cancel``)
    aborts it, :meth:`flush` waits until every
    update posted so far was sent, :meth:`detach` (or ``await aclose()``,
    or ``async with``) removes the listeners and the approval service.
    """

    def __init__(
        self,
        rt: ToolRuntime,
        client: Client,
        session_id: str,
        *,
        agent: Agent,
        cwd: str | None,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.rt = rt
        self.client = client
        self.session_id = session_id
        self.agent = agent
        self.cwd = cwd
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._lock = threading.Lock()
        self._state = _State()
        self._queue: asyncio.Queue[_Item] = asyncio.Queue()
        # Invariant: only the pump task reads or writes _known and _closed.
        self._known: dict[str, _Known] = {}
        # The executions whose card a stopped turn's end closed while they
        # ran: nothing more of them is shown (their own end removes them).
        # By token, not call id: a later turn's call may reuse the id, and
        # its card is shown (with that id, as the model named the call).
        self._closed: set[ToolExecutionToken] = set()
        self._asks: dict[asyncio.Task[None], _Ask] = {}
        # The definition each prepared call runs with (from its pre-execute
        # phase to its result): its result card is that definition's, even
        # when the registry no longer answers (the runtime stopping) or no
        # longer holds it (unregistered while the call ran).
        self._definitions: dict[ToolExecutionToken, ToolDefinition | None] = {}
        self._previous_service = rt.approvals.service
        self._pump = loop.create_task(self._run_pump(), name=f"dsh_actors.acp pump {session_id}")
        self._disposers: list[Disposer] = []
        events = rt.events
        try:
            self._disposers.append(events.on("tools/pre-execute", self._on_pre_execute, scope=agent, prepend=True))
            self._disposers.append(events.on("tools/execute", self._on_execute, scope=agent, prepend=True))
            self._disposers.append(events.on("tools/progress", self._on_progress, scope=agent))
            self._disposers.append(events.on("tools/result", self._on_result, scope=agent))
            self._disposers.append(rt.approvals.set(self._approve))
        except BaseException:
            self.detach()
            raise

    def __repr__(self) -> str:
        state = "detached" if self._state.detached else "attached"
        return f"<AcpSession {self.session_id!r} {state} agent={self.agent.path!r}>"

    # -- the prompt turn ---------------------------------------------------

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[Turn]:
        """A prompt turn: yields a :class:`Turn` whose signal the client's
        ``session/cancel`` (:meth:`cancel`) aborts. Leaving it flushes the
        updates of its batches; leaving it with an exception (the prompt's
        handler was cancelled: the client went away) also aborts its signal.
        Leaving it cancelled, or with the runtime stopping, first ends every
        card of the session still open (a body that ignores its signal, on
        the batch's own thread, outlives the batch a stop answered):
        ``failed``, its content a line saying why; nothing more of such a
        call is shown, its own end included."""
        controller = AbortController()
        with self._lock:
            if self._state.detached:
                raise InvalidStateError(f"ACP session {self.session_id!r} is detached from its runtime")
            if self._state.turn is not None:
                raise InvalidStateError(f"ACP session {self.session_id!r} is already running a prompt turn")
            self._state.turn = controller
        try:
            yield Turn(controller.signal)
        except BaseException:
            controller.abort()
            raise
        finally:
            with self._lock:
                self._state.turn = None
            if self.rt.stop_signal.aborted:
                self._post(_Stopped(_RUNTIME_STOPPED))
            elif controller.signal.aborted:
                self._post(_Stopped(_TURN_CANCELLED))
            await self.flush()

    @property
    def turn_cancelled(self) -> bool:
        """Whether the running prompt turn was cancelled and is still
        finishing (its batches ending): a ``session/prompt`` handler that
        refuses a second prompt says to send it once the cancelled
        prompt's response arrives."""
        with self._lock:
            return self._state.turn is not None and self._state.turn.signal.aborted

    @property
    def turn_running(self) -> bool:
        """Whether a prompt turn is running (:meth:`turn` would refuse
        another): a ``session/prompt`` handler answers a second prompt with
        a JSON-RPC error instead of starting it."""
        with self._lock:
            return self._state.turn is not None

    def cancel(self) -> bool:
        """Abort the running prompt turn (its batches stop starting calls,
        started ones see their signal, pending permission requests answer
        ``"cancelled"``). Returns whether a turn was running. Any thread."""
        with self._lock:
            controller = self._state.turn
        return controller is not None and controller.abort()

    async def flush(self) -> None:
        """Wait until every update posted before this call was sent (or
        dropped, if the connection is gone)."""
        if self._pump.done():
            return
        done: asyncio.Future[None] = self._loop.create_future()
        self._queue.put_nowait(_Flush(done))
        await done

    # -- detaching ---------------------------------------------------------

    def detach(self) -> None:
        """Remove the listeners and the approval service; the pump sends what
        was posted before and stops. Idempotent; any thread."""
        with self._lock:
            if self._state.detached:
                return
            self._state.detached = True
            controller = self._state.turn
            self._post(None)  # after every question posted so far (see _approve)
        for dispose in reversed(self._disposers):
            dispose()
        # (A call whose tools/result comes as another execution, a deferred
        # one resumed, left its entry: nothing reads them from now on.)
        self._definitions.clear()
        if controller is not None:
            controller.abort()

    async def aclose(self) -> None:
        """:meth:`detach`, then wait for the pump to finish."""
        self.detach()
        await asyncio.shield(self._pump)

    async def __aenter__(self) -> AcpSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- listeners (runtime threads) ----------------------------------------

    def _post(self, item: _Item) -> bool:
        """Queue ``item`` for the pump; False when no pump will take it (the
        loop is closed, or the pump ended without a detach: the loop shut
        down)."""
        if self._pump.done():
            logger.debug("ACP session {}: the pump has ended; update dropped", self.session_id)
            return False
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the loop is closed: nobody is left to show it
            logger.debug("ACP session {}: event loop closed; update dropped", self.session_id)
            return False
        return True

    def _call_card(self, execution: ToolExecution, definition: ToolDefinition | None) -> dict[str, Any]:
        view: ToolCallView | None = None
        presenter = None if definition is None else definition.present_call
        if presenter is not None:  # (a raw definition's may raise: the generic card, warned about once)
            view = checked_view(execution.name, "present_call", ToolCallView, presenter, (execution.arguments,))
        if view is None:
            view = generic_call_view(execution.name, execution.arguments)
        return call_fields(view, execution.arguments, self.cwd)

    def _result_card(
        self,
        execution: ToolExecution,
        definition: ToolDefinition | None,
        result: ToolExecutionSuccess | ToolExecutionFailure,
    ) -> dict[str, Any]:
        view: ToolResultView | None = None
        presenter = None if definition is None else definition.present_result
        if presenter is not None:
            view = checked_view(
                execution.name, "present_result", ToolResultView, presenter, (execution.arguments, result)
            )
        if view is None:
            view = generic_result_view(result)
        fields = result_fields(view, result, self.cwd)
        fields["rawOutput"] = raw_output(execution.call_id, result, view)
        return fields

    @staticmethod
    def _parent_id(execution: ToolExecution) -> str | None:
        if execution.parent is None:
            return None
        root = execution.root_call_id
        return root if root and root != execution.call_id else None

    def _on_pre_execute(self, execution: ToolExecution, next: Callable[[], Any]) -> Any:
        """Outermost ``tools/pre-execute`` listener: the call appears (pending)."""
        try:
            definition = self._definitions[execution.token] = execution.definition
            fields = self._call_card(execution, definition)
            self._post(_Appeared(execution.call_id, execution.token, self._parent_id(execution), fields))
        except Exception as exc:  # noqa: BLE001 - showing a call never decides it
            logger.opt(exception=exc).error("ACP session {}: cannot show call {}", self.session_id, execution.call_id)
        return next()

    def _on_execute(self, execution: ToolExecution, next: Callable[[], Any]) -> Any:
        """Outermost ``tools/execute`` wrapper: the body starts (in progress)."""
        self._post(_Started(execution.call_id, execution.token))
        return next()

    def _on_progress(self, execution: ToolExecution, progress: ToolProgress) -> None:
        """``tools/progress``: the running call's progress, as an update.
        The runtime delivers a call's reports in order (after its body
        started) and none after its ``tools/result``; the pump keeps that
        order on the wire. Reports are merged: while one is queued and not
        yet sent, a newer one replaces it (the latest progress wins), so a
        body that reports faster than the client reads costs no backlog."""
        token = execution.token
        with self._lock:
            queued = token in self._state.progress
            self._state.progress[token] = progress
            if not queued and not self._post(_Progressed(execution.call_id, token)):
                del self._state.progress[token]  # no pump will send it

    def _on_result(self, execution: ToolExecution, result: ToolExecutionSuccess | ToolExecutionFailure) -> None:
        """``tools/result``: the call ends, completed or failed, with its result card."""
        definition = self._definitions.pop(execution.token, _UNSEEN)
        if definition is _UNSEEN:  # (it ran no phase)
            definition = execution.definition
        self._post(
            _Settled(
                call_id=execution.call_id,
                token=execution.token,
                parent_id=self._parent_id(execution),
                call=self._call_card(execution, definition),
                failed=result.is_error,
                fields=self._result_card(execution, definition, result),
            )
        )

    # -- approvals (a thread of the runtime: a worker, for a batch's call) --

    def _approve(self, request: ApprovalRequest) -> Any:
        """The approval service: this session's calls are asked through
        ``session/request_permission``; others go to the service installed
        before this session attached."""
        with self._lock:
            detached = self._state.detached
            remembered = self._state.remembered.get(request.tool_name)
        if detached or not in_scope(self.agent, request.agent):
            previous = self._previous_service
            return "unavailable" if previous is None else previous(request)
        if remembered is not None:
            return remembered
        if threading.get_ident() == self._loop_thread:
            logger.error(
                "ACP session {}: an approval was asked on the connection's event loop thread, which must "
                "keep running to get the answer; run batches with execute_async (or from another thread)",
                self.session_id,
            )
            return "unavailable"
        answer: concurrent.futures.Future[str] = concurrent.futures.Future()
        unsubscribe = request.signal.add_callback(lambda _signal: answer.cancel())
        try:
            with self._lock:
                # Posted under the lock detach() takes: the question is queued
                # before the pump's stop, so the pump answers it either way.
                posted = (
                    not self._state.detached
                    and not answer.cancelled()
                    and self._post(_Ask(request.call_id, request.tool_name, _reason_text(request), answer))
                )
            if not posted and not answer.cancelled():
                return "unavailable"  # detached meanwhile, or the connection's loop is gone
            try:
                return answer.result()
            except concurrent.futures.CancelledError:
                return "cancelled"
        finally:
            unsubscribe()

    # -- the pump (the connection's event loop) ------------------------------

    async def _run_pump(self) -> None:
        try:
            while True:
                item = await self._queue.get()
                if item is None:
                    break
                try:
                    await self._handle(item)
                except Exception as exc:  # noqa: BLE001 - the connection may be gone; keep serving flushes
                    self._lost(exc)
                    logger.debug("ACP session {}: update not sent: {}", self.session_id, safe_str(exc))
        finally:  # (also when the loop shuts down and cancels the pump)
            self._end_pump()

    def _end_pump(self) -> None:
        """Open questions end (a task cancelled before its first step never
        runs, so its future is settled here too); a flush still queued is done."""
        for task, ask in list(self._asks.items()):
            task.cancel()
            _settle(ask.answer, "unavailable")
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if isinstance(item, _Flush) and not item.done.done():
                item.done.set_result(None)
            elif isinstance(item, _Ask):
                _settle(item.answer, "unavailable")

    async def _handle(self, item: _Item) -> None:
        match item:
            case _Flush(done=done):
                if not done.done():
                    done.set_result(None)
            case _Appeared(call_id=call_id, token=token, parent_id=parent_id, fields=fields):
                if call_id not in self._known and token not in self._closed:  # (prepared again: shown already)
                    await self._appear(call_id, token, parent_id, fields)
            case _Started(call_id=call_id, token=token):
                if self._showing(call_id, token):
                    await self._update(call_id, {"status": "in_progress"})
            case _Progressed(call_id=call_id, token=token):
                with self._lock:
                    progress = self._state.progress.pop(token)
                if self._showing(call_id, token):
                    await self._update(call_id, _progress_fields(progress))
            case _Settled():
                if item.token in self._closed:  # its card ended with its turn
                    self._closed.discard(item.token)
                    return
                if item.call_id not in self._known:
                    await self._appear(item.call_id, item.token, item.parent_id, item.call)
                fields = {"status": "failed" if item.failed else "completed", **item.fields}
                title = fields.get("title")
                if title is not None:
                    fields["title"] = self._titled(item.parent_id, title)
                # Invariant: a call is known from its pending update to its end
                # (its nested calls end before it does), or to a stopped turn's.
                del self._known[item.call_id]
                await self._update(item.call_id, fields)
            case _Stopped(text=text):
                still_open = list(reversed(self._known))  # (nested calls first)
                self._closed.update(known.token for known in self._known.values())
                self._known.clear()
                for call_id in still_open:
                    await self._update(call_id, {"status": "failed", "content": [text_content(text)]})
            case _Ask():
                if item.answer.done():
                    return
                task = self._loop.create_task(self._ask(item))
                self._asks[task] = item
                task.add_done_callback(self._asks.pop)
                item.answer.add_done_callback(lambda answer: self._cancel_ask(answer, task))
            case None:  # pragma: no cover - the loop stops before
                pass

    def _lost(self, exc: Exception) -> None:
        """Sending raised ``exc``: if it is a ``ConnectionError`` (the SDK's
        once the client left), the running turn is cancelled now, before the
        batch starts another call for a client that is gone (the prompt's
        handler learns it only later, when the SDK cancels it)."""
        if isinstance(exc, ConnectionError):
            self.cancel()

    def _cancel_ask(self, answer: concurrent.futures.Future[str], task: asyncio.Task[None]) -> None:
        """The call's signal cancelled the question: withdraw the request
        (runs on the thread that aborted, or on the loop)."""
        if answer.cancelled():
            try:
                self._loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:
                pass  # the loop is closed: nothing left to withdraw

    def _showing(self, call_id: str, token: ToolExecutionToken) -> bool:
        """Whether ``call_id`` has an open card this execution updates: not
        when its card ended with a stopped turn (the id's open card, if
        any, is then a later turn's call reusing the id)."""
        return call_id in self._known and token not in self._closed

    def _titled(self, parent_id: str | None, title: str) -> str:
        """A nested call's title shows its parent's first (ACP has no nesting)."""
        parent = None if parent_id is None else self._known.get(parent_id)
        return title if parent is None else f"{parent.title} \u203a {title}"

    async def _appear(
        self, call_id: str, token: ToolExecutionToken, parent_id: str | None, fields: dict[str, Any]
    ) -> None:
        title = self._titled(parent_id, fields["title"])
        wire = {**fields, "title": title, "sessionUpdate": "tool_call", "toolCallId": call_id, "status": "pending"}
        if parent_id is not None:
            wire["_meta"] = {_META_KEY: {"parentToolCallId": parent_id}}
        self._known[call_id] = _Known(token=token, title=title, fields=fields)
        await self.client.session_update(self.session_id, ToolCallStart.model_validate(wire))

    async def _update(self, call_id: str, fields: dict[str, Any]) -> None:
        wire = {**fields, "sessionUpdate": "tool_call_update", "toolCallId": call_id}
        await self.client.session_update(self.session_id, ToolCallProgress.model_validate(wire))

    async def _ask(self, item: _Ask) -> None:
        known = self._known.get(item.call_id)
        tool_call: dict[str, Any] = {"toolCallId": item.call_id}
        if known is not None:
            tool_call.update(known.fields)
            tool_call["title"] = known.title
        # ACP's content replaces the card's: the reason comes first, then
        # what the call card showed pending (a proposed diff), to judge.
        content = [text_content(item.reason)] if item.reason else []
        content += tool_call.pop("content", [])
        if content:
            tool_call["content"] = content
        options = [
            PermissionOption.model_validate({"optionId": i, "name": n, "kind": k}) for i, n, k in PERMISSION_OPTIONS
        ]
        try:
            response = await self.client.request_permission(
                session_id=self.session_id, tool_call=ToolCallUpdate.model_validate(tool_call), options=options
            )
        except asyncio.CancelledError:
            _settle(item.answer, "cancelled")
            raise
        except RequestError as exc:
            if exc.code == _METHOD_NOT_FOUND:  # a client that asks no one: no channel
                _settle(item.answer, "unavailable")
            else:
                _refuse(item.answer, f"the ACP client answered the permission request with an error: {_said(exc)}")
            return
        except ValidationError as exc:
            # (A message may repeat what the client sent: a tag that matches no outcome.)
            shown = "; ".join(
                f"{peer_text('.'.join(map(str, e['loc'])) or 'result')}: {peer_text(e['msg'])}"
                for e in exc.errors()[:3]
            )
            _refuse(item.answer, f"the ACP client's answer to the permission request is not valid ({shown})")
            return
        except Exception as exc:  # noqa: BLE001 - a closed connection: no channel
            self._lost(exc)
            logger.warning("ACP session {}: permission request failed: {}", self.session_id, safe_str(exc))
            _settle(item.answer, "unavailable")
            return
        outcome = response.outcome
        if not isinstance(outcome, AllowedOutcome):
            _settle(item.answer, "cancelled")
            return
        kind = _KIND_OF_OPTION.get(outcome.option_id)
        if kind is None:
            shown = safe_str(repr(outcome.option_id))[:60]
            offered = ", ".join(option_id for option_id, _, _ in PERMISSION_OPTIONS)
            _refuse(
                item.answer,
                f"the ACP client selected the option {shown}, which was not offered (offered: {offered})",
            )
            return
        answer, remember = _ANSWERS[kind]
        if remember:
            with self._lock:
                self._state.remembered[item.tool_name] = answer
        _settle(item.answer, answer)


def _progress_fields(progress: ToolProgress) -> dict[str, Any]:
    """A progress report as a ``tool_call_update``: the call's content shows
    it as a line of text (``3/4 (75%) copying b.txt``) until the result's
    card replaces it, and ``_meta`` carries the numbers for a client that
    draws a bar."""
    shown = _number(progress.progress)
    if progress.total is not None:
        shown += f"/{_number(progress.total)}"
        if progress.total > 0:
            shown += f" ({progress.progress / progress.total:.0%})"
    if progress.message:
        shown += f" {progress.message}"
    numbers = {"progress": progress.progress, "total": progress.total, "message": progress.message}
    return {
        "content": [text_content(shown)],
        "_meta": {_META_KEY: {"progress": numbers}},
    }


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _said(error: RequestError) -> str:
    """A JSON-RPC error the client sent, as a failure names it: its message,
    then what its ``data`` says (the SDK's client puts the text of the
    exception its handler raised in ``data["details"]``), each as
    :func:`~._stdio.peer_text` shows it."""
    text = peer_text(safe_str(error))
    data = error.data
    if isinstance(data, Mapping) and isinstance(data.get("details"), str):
        data = data["details"]
    if data is None:
        return text
    try:
        said = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):  # not JSON (an in-process client's): not shown
        return text
    if not said:
        return text
    return f"{text} ({peer_text(said)})"


def _refuse(future: concurrent.futures.Future[str], detail: str) -> None:
    """The client's answer was not one: the approval fails
    (``POLICY_FAILED``, ``approval: <detail>``)."""
    try:
        future.set_exception(ToolPolicyError("approval", detail))
    except concurrent.futures.InvalidStateError:
        pass  # cancelled meanwhile


def _settle(future: concurrent.futures.Future[str], answer: str) -> None:
    try:
        future.set_result(answer)
    except concurrent.futures.InvalidStateError:
        pass  # cancelled meanwhile (the call's signal fired): it answers "cancelled"


def _reason_text(request: ApprovalRequest) -> str | None:
    """What the person reads: the display reason (a str, or a mapping of
    languages: English first), else the audited reason."""
    shown = request.display_reason
    if isinstance(shown, str) and shown:
        return shown
    if isinstance(shown, Mapping):
        preferred = shown.get("en")
        if isinstance(preferred, str) and preferred:
            return preferred
        for value in shown.values():
            if isinstance(value, str) and value:
                return value
    return request.reason


def attach(
    rt: ToolRuntime,
    client: Client,
    session_id: str,
    *,
    agent: Agent,
    cwd: str | None = None,
) -> AcpSession:
    """Attach ``rt`` to the ACP session ``session_id`` of ``client`` (on the
    agent side: the connection the SDK hands the agent in ``on_connect``)
    for the calls of ``agent`` and its descendants. Call it on the
    connection's event loop (in ``new_session``); run the session's batches
    with ``await rt.tools.execute_async(...)`` inside :meth:`AcpSession.turn`.

    ``cwd``: the session's working folder (``session/new``'s ``cwd``);
    relative paths of locations and diffs are resolved against it."""
    if not isinstance(agent, Agent):
        raise InvalidTypeError(f"attach(): agent must be an Agent, got {type(agent).__qualname__}")
    if not isinstance(session_id, str) or not session_id:
        raise InvalidTypeError("attach(): session_id must be a non-empty str")
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        raise InvalidStateError(
            "attach() must be called on the ACP connection's event loop (from an async handler)"
        ) from None
    return AcpSession(rt, client, session_id, agent=agent, cwd=cwd, loop=loop)
