"""Show a runtime's tool calls in an editor: an Agent Client Protocol bridge
(the optional extra ``dsh-actors[acp]``, on the ``agent-client-protocol`` SDK).

An ACP agent (the SDK's ``acp.interfaces.Agent``) attaches each session it
creates to the runtime, and runs each prompt turn's batches inside the
session's turn::

    class MyAgent:
        def on_connect(self, conn):
            self.conn = conn                      # the client connection

        async def new_session(self, cwd, mcp_servers=None, **kwargs):
            agent = Agent(session_id, session=Session())
            self.sessions[session_id] = dsh_actors.acp.attach(rt, self.conn, session_id, agent=agent, cwd=cwd)
            ...

        async def prompt(self, prompt, session_id, **kwargs):
            acp_session = self.sessions[session_id]
            async with acp_session.turn() as turn:
                batch = await rt.tools.execute_async(ToolBatchInput(calls, agent=..., signal=turn.signal))
            return PromptResponse(stop_reason=turn.stop_reason)

        async def cancel(self, session_id, **kwargs):
            self.sessions[session_id].cancel()

    await dsh_actors.acp.serve(MyAgent())        # stdio, malformed messages answered

``examples/acp_agent.py`` is a complete one (``python -m examples.acp_agent``).

While a session is attached:

* every call of its agent (and of the agent's descendants) appears as a
  ``tool_call`` update, status ``pending``, with the title, kind, locations,
  raw input and content of its ``present_call`` card (the generic card when
  the tool has none), when its ``tools/pre-execute`` phase starts (before
  any approval); a call that runs no phase (aborted before dispatch)
  appears when it settles (one whose arguments are not JSON, or whose tool
  is unknown, runs its phases as any call and fails in its body's place);
* it turns ``in_progress`` when its body starts (the outermost
  ``tools/execute`` wrapper is entered), and ends ``completed`` or
  ``failed`` with the content of its ``present_result`` card (see
  :mod:`._cards`: a diff card as ACP diff content, a terminal card as its
  output and exit status, a read, search or web card as its text) and its
  durable projection as raw output (``is_error``, ``content``, ``error``,
  ``meta``, as the ``tool/result`` log event holds them) when that is at
  most :data:`RAW_OUTPUT_LIMIT` (65,536) characters of JSON; a larger one
  (the session log holds it whole) is cut, with ``"truncated": true`` and
  ``"size": <its JSON length>``: to ``{"is_error", "truncated", "size"}``
  when the card's content is the result's own text (the result's content,
  a terminal's output, a read's window, a web fetch's body), not sent a
  second time, else (a card's own content, a diff, search rows, web search
  sources) to the projection with its strings cut to prefixes, at most the
  limit long;
* the text a card shows (titles, text content, progress lines, a
  permission request's reason) is safe to show: terminal escape sequences
  (ANSI CSI colours and cursor moves, OSC window titles and hyperlinks, the
  other ESC sequences) are left out, ``\\r\\n`` and a lone ``\\r`` end a
  line, and every other control character (C0 but tab and newline, DEL,
  C1), the bidi controls and the line separators are shown in their
  ``\\x..`` / ``\\u....`` form (:func:`dsh_actors.printable`'s); other
  format characters (a zero-width joiner in an emoji) stay. Diffs keep the files' text, the raw
  input and raw output their strings (JSON escapes control characters), and
  the model's result is not changed;
* a nested call (a PTC sub-call of ``run_code``, or any call dispatched with
  a ``parent``) is its own ``tool_call``, its title prefixed with its root
  call's (``run_code › read notes.txt``), and its ``_meta`` naming the
  parent: ``{"dsh_actors": {"parentToolCallId": "<root call id>"}}``;
* an ``Ask`` is asked through ``session/request_permission`` with the four
  options of :data:`PERMISSION_OPTIONS` (allow once, always allow, reject,
  always reject); the request's tool call is the call's pending card, its
  content the ask's reason (as text) followed by the card's own (a diff
  card's proposed diff stays shown while the person decides). An "always" answer is remembered for that tool name for
  the rest of the session (later calls are not asked). A request the client
  answers ``cancelled``, or whose call's signal fires first, answers
  ``"cancelled"`` (so does a closed connection's, for a call of the running
  turn, which the closed connection cancels: see below). A signal that
  fires first (the turn cancelled, the runtime stopping) settles the call
  at once, but the client's dialog stays open: the SDK has no way to
  withdraw a request it sent (no ``$/cancel_request``), and the answer
  the person gives later is ignored; the call's card has ended meanwhile. A closed
  connection otherwise, or a client that does not take
  permission requests (``-32601``), ``"unavailable"``. An answer that is
  none (an option that was not offered, a result that is not a permission
  response, a JSON-RPC error, a malformed response) fails the approval:
  the call fails ``POLICY_FAILED``, ``approval: <what the client sent>``
  (of a JSON-RPC error, its message and what its data says: ``Internal
  error (<the text of the exception the client's handler raised>)``);
  each text the client sent in it is cut to 200 characters and shown
  with :func:`dsh_actors.printable` (the model reads it, the log holds it).
  Calls of other agents go to the approval service installed before the
  session attached;
* :meth:`AcpSession.cancel` (the handler of ``session/cancel``) aborts the
  running turn's signal: its batches start no new call, running bodies see
  their signal, and the prompt answers the stop reason ``"cancelled"``. So
  does a closed connection, as soon as an update or a permission request
  of the session fails with the SDK's ``ConnectionError`` (before the SDK
  cancels the prompt's handler): no call starts for a client that left.
* a turn that ends cancelled, or while the runtime stops, ends every card
  of the session still open (pending or in progress) at once: ``failed``
  (ACP has no cancelled status), its content the line ``stopped: the
  prompt turn was cancelled before the call ended`` (or ``stopped: the
  runtime stopped before the call ended``), and nothing more of that call
  is shown, its own late end included (even when a later turn's call
  reuses its call id: that call gets its own card, with that id). Only a call that outlives its
  batch is still open then (a batch drains before it answers): a body
  that ignores its signal on the batch's own thread, whose batch the stop
  answered (the reference, section 7), or a batch the turn did not await.

* each ``tools/progress`` of a running call (``ctx.report_progress``, an
  MCP server's progress) is a ``tool_call_update`` whose content is the
  report as a line of text (``2/4 (50%) copying b.txt``) and whose
  ``_meta["dsh_actors"]["progress"]`` holds its numbers; the runtime
  delivers them in order and none after the call's ``tools/result``.
  Reports are merged: while a call's progress update waits to be sent, a
  newer report replaces it (the latest wins), so a body reporting faster
  than the client reads sends fewer updates, never a backlog.

Threads: see :mod:`._bridge`. Attach on the connection's event loop, and
run the turn's batches with ``await rt.tools.execute_async(...)`` there: a
blocking ``rt.tools.execute`` on that loop's thread would block the loop
that sends the updates and receives the permission answers.
"""

from __future__ import annotations

from ._bridge import PERMISSION_OPTIONS, AcpSession, Turn, attach
from ._cards import RAW_OUTPUT_LIMIT, call_fields, raw_output, result_fields
from ._stdio import CheckedTransport, message_problem, serve

__all__ = [
    "PERMISSION_OPTIONS",
    "RAW_OUTPUT_LIMIT",
    "AcpSession",
    "CheckedTransport",
    "Turn",
    "attach",
    "call_fields",
    "message_problem",
    "raw_output",
    "result_fields",
    "serve",
]
