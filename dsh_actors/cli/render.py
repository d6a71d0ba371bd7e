"""Terminal rendering of session-log events with the tools' cards.

:func:`log_entries` turns the events of a session log into a tree: one
:class:`CallEntry` per root ``tool/call`` (paired with its ``tool/result``),
with the PTC sub-dispatches of that call (``tool/ptc-dispatch-start`` and
``tool/ptc-dispatch``) nested under it; :class:`LogTree` builds it one
event at a time and hands out each root call once it is complete (replay
draws a log of any length so, with :func:`render_lines` and a
:class:`Tally` for the summary line). :func:`render_log` draws that tree,
asking each tool for its cards (``present_call(args)`` and
``present_result(args, projection)``) and falling back to the generic cards
when the tool is unknown, its presenter returns ``None``, or fails (raises,
or returns something else than a card: logged at WARNING once per tool,
presenter and kind of failure, as the runtime logs it).

A card becomes lines of text:

* terminal: ``$ command``, the captured output and the exit status;
* diff: a unified diff (``difflib``) with ``+``/``-`` lines (one hunk for a
  change too costly to match line by line);
* read: a line-numbered window of the file;
* search: matches grouped by file, and whether the result was capped;
* web: the answer and sources of a search, or the URL and status of a fetch;
* generic: the title and the content's text.

Colour is an ANSI :class:`Style`; :func:`choose_style` turns it on only for
a terminal, and never when ``NO_COLOR`` is set. Everything here is pure and
runs on the calling thread.
"""

from __future__ import annotations

import difflib
import os
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, Final, Literal

from ..definition import ToolDefinition
from ..errors import DshError, LosslessJsonError, printable, safe_str
from ..json import dumps, loads, thaw
from ..model import ContentBlock, ImageBlock, ReasoningBlock, TextBlock
from ..presentation import (
    DiffCallView,
    DiffResultView,
    FileDiff,
    GenericCallView,
    GenericResultView,
    ReadResultView,
    SearchResultView,
    TerminalCallView,
    TerminalResultView,
    ToolCallView,
    ToolResultProjection,
    ToolResultView,
    WebResultView,
    generic_call_view,
    generic_result_view,
)
from ..presentation._projection import checked_view
from ..session import (
    APPROVAL,
    APPROVAL_REQUEST,
    BATCH,
    CALL,
    PTC_DISPATCH,
    PTC_DISPATCH_START,
    RESULT,
    START,
    LoggedResult,
    Session,
    StepKey,
    agent_of,
    drop_redeferred,
    leave_redeferred,
    step_of,
    take_redeferred,
)

__all__ = [
    "Approval",
    "CallEntry",
    "ColorMode",
    "LogTree",
    "Lookup",
    "Style",
    "Tally",
    "choose_style",
    "count_results",
    "index_only_session",
    "log_entries",
    "note_agent",
    "render_lines",
    "render_log",
    "terminal_safe",
    "resolve_views",
    "summary_line",
]

ColorMode = Literal["auto", "always", "never"]
Lookup = Callable[[str], "ToolDefinition | None"]
"""Finds the definition of a tool by name (``None``: unknown)."""

_HEAD_ARGS_WIDTH: Final = 80
_DIFF_BUDGET: Final = 1_000_000
"""How many lines a diff's matcher may scan (a few tenths of a second) before a
card shows the change as one hunk (:func:`_diff_groups`)."""
_INDENT: Final = "    "


# --------------------------------------------------------------------------
# Style
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Style:
    """How text is painted: ANSI colours or none, Unicode glyphs or ASCII."""

    color: bool = False
    unicode: bool = True

    def paint(self, value: str, code: str) -> str:
        return f"\x1b[{code}m{value}\x1b[0m" if self.color and value else value

    def bold(self, value: str) -> str:
        return self.paint(value, "1")

    def dim(self, value: str) -> str:
        return self.paint(value, "2")

    def red(self, value: str) -> str:
        return self.paint(value, "31")

    def green(self, value: str) -> str:
        return self.paint(value, "32")

    def yellow(self, value: str) -> str:
        return self.paint(value, "33")

    def cyan(self, value: str) -> str:
        return self.paint(value, "36")

    def glyph(self, fancy: str, plain: str) -> str:
        return fancy if self.unicode else plain


#: The colours a :class:`Style` paints: what a line may hold besides
#: printable text, and only while it paints them.
_PAINTED: Final = re.compile("\x1b\\[(?:0|1|2|31|32|33|36)m")


def terminal_safe(line: str, style: Style) -> str:
    """``line`` as a terminal may show it: every control or format
    character that a tool's output, its arguments or a log may carry is
    shown escaped (:func:`~dsh_actors.printable`), but the colour codes
    ``style`` paints, while it paints (the same code in a tool's text passes
    too: it can only colour)."""
    if line.isprintable():
        return line
    if not style.color:
        return printable(line)
    parts = _PAINTED.split(line)
    out = [printable(parts[0])]
    for code, part in zip(_PAINTED.findall(line), parts[1:], strict=True):
        out.append(code)
        out.append(printable(part))
    return "".join(out)


def choose_style(stream: IO[str], mode: ColorMode = "auto") -> Style:
    """Colour for ``always``; for ``auto`` only when ``stream`` is a
    terminal and ``NO_COLOR`` is unset (or empty). Unicode glyphs when the
    stream's encoding is UTF-8."""
    if mode == "always":
        color = True
    elif mode == "never":
        color = False
    else:
        isatty = getattr(stream, "isatty", None)
        color = bool(isatty and isatty()) and not os.environ.get("NO_COLOR")
    encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
    return Style(color=color, unicode=encoding in ("utf8", "utf_8"))


# --------------------------------------------------------------------------
# The log as a tree of calls
# --------------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class Approval:
    """One approval request of a call (``tool/approval-request``: its
    suspension, the reason and what to show the person) and the decision a
    resume gave it (``tool/approval``), None while it waits."""

    suspension: str
    reason: str | None
    shown: dict[str, str] | None
    decision: str | None = None


@dataclass(slots=True, eq=False)
class CallEntry:
    """One call of the log: a root call (``tool/call``) or a PTC sub-call
    (``tool/ptc-dispatch-start``), its result when one was logged, and the
    sub-calls it made."""

    call_id: str
    name: str | None
    arguments: Any
    turn: int | None = None
    step: int | None = None
    agent: str | None = None
    """The id of the agent whose step it is (its ``tool/call``'s or
    ``tool/batch``'s ``agent``), or None when the log names none."""
    result: LoggedResult | None = None
    children: list[CallEntry] = field(default_factory=list)
    logged_call: bool = True
    """False when only a result was logged (its call is not in the log)."""
    traceback: str | None = None
    """The logged traceback of the exception a hook raised (``-v`` shows it)."""
    approvals: list[Approval] = field(default_factory=list)
    """Its deferred approvals, in log order (the last one may still wait)."""
    batch_only: bool = False
    """Only its batch's ``tool/batch`` names it: it never reached its
    ``tool/call`` (it waits behind a deferred call, or a crash came first)."""
    started: bool = False
    """Its body may have run: its ``tool/start`` is logged (a PTC sub-call:
    its ``tool/ptc-dispatch-start``)."""

    @property
    def awaiting(self) -> bool:
        """It has no result and its last approval request is undecided."""
        return self.result is None and bool(self.approvals) and self.approvals[-1].decision is None

    @property
    def never_started(self) -> bool:
        """It has no result and never started: its call is in the log (or
        its batch names it) without a ``tool/start`` (section 10 of the
        reference: a call without one had not run), and it does not await
        an approval. A call without a result that started may have run."""
        return self.result is None and not self.started and self.logged_call and not self.awaiting


class LogShapeError(ValueError):
    """An event of a known type is malformed: the one at ``index`` (from 0)
    of the events read, of type ``kind``, for the reason ``problem``; the
    message (``event 3 (tool/call): ...``) says all three."""

    def __init__(self, index: int, event: Mapping[str, Any], problem: str) -> None:
        self.index = index
        self.kind = safe_str(event.get("type"))
        self.problem = problem
        super().__init__(f"event {index + 1} ({self.kind}): {problem}")


def _str_field(event: Mapping[str, Any], key: str, index: int) -> str:
    value = event.get(key)
    if type(value) is not str:
        raise LogShapeError(index, event, f"{key!r} must be a string")
    return value


def _logged_step(event: Mapping[str, Any], index: int) -> tuple[int, int]:
    """The ``turn`` and ``step`` a ``tool/batch`` or ``tool/call`` event
    must name (both ints, as the executor logs them)."""
    turn, step = event.get("turn"), event.get("step")
    if type(turn) is not int or type(step) is not int:
        raise LogShapeError(index, event, "needs an int turn and step")
    return turn, step


def _result(event: Mapping[str, Any], index: int) -> LoggedResult:
    try:
        return LoggedResult.from_event(event)
    except Exception as err:  # LosslessJsonError naming the field, ValueError
        raise LogShapeError(index, event, safe_str(err)) from None


def _batch_arguments(raw: Any) -> Any:
    """A ``tool/batch`` call's arguments (as the model sent them) as its
    ``tool/call`` would hold them: JSON text parsed when it holds an
    object, anything else as it is."""
    if type(raw) is str:
        try:
            parsed = loads(raw, frozen=False, path="arguments") if raw.strip() else {}
        except LosslessJsonError:
            return raw
        return parsed if type(parsed) is dict else raw
    return raw


def _text_by_language(value: Any) -> dict[str, str] | None:
    if isinstance(value, Mapping) and value and all(type(k) is str and type(v) is str for k, v in value.items()):
        return dict(value)
    return None


def _call_of(
    event: Mapping[str, Any],
    call_id: str,
    latest: Mapping[str, CallEntry],
    stepped: Mapping[tuple[int, int, str | None, str], CallEntry],
) -> CallEntry | None:
    """The call ``event`` (a ``tool/result`` or an approval request) is
    for: the latest of its id in the step it names (its agent's; a call
    that names no agent when there is none of it), or the latest of its id
    when it names none (a log written before events carried their step)."""
    at = step_of(event)
    if at is None:
        return latest.get(call_id)
    agent = agent_of(event)
    found = stepped.get((at[0], at[1], agent, call_id))
    if found is None and agent is not None:
        found = stepped.get((at[0], at[1], None, call_id))  # (a call logged before events named their agent)
    return found


def index_only_session() -> Session:
    """An in-memory :class:`Session` that keeps no event, only its index
    (the open calls, sub-calls and requests, the latest run of each agent):
    what ``Session.open`` keeps of a log on a file. A reading of a log
    (:class:`LogTree`'s) appends every event to one, to check them and to
    pair calls as the session does, in memory bounded by what is open
    rather than by the log's length."""
    return Session(keep_events=False)


@dataclass(slots=True, eq=False)
class _Open:
    """A root call that later events may still change: its place among the
    roots, the index of the last event that changed it (or a call nested in
    it), its sub-calls without a result and its requests without a
    decision."""

    ordinal: int
    changed: int
    sub_calls: int = 0
    requests: int = 0
    sub_ids: list[str] = field(default_factory=list)


def _entry_step(entry: CallEntry) -> StepKey | None:
    """The step of a call drawn from the log, or None when its events named none."""
    return None if entry.turn is None or entry.step is None else (entry.turn, entry.step, entry.agent)


class LogTree:
    """:func:`log_entries` one event at a time, keeping only what later
    events may still change: :meth:`feed` hands out each root call, in log
    order, once it is complete, so a log of any length is read in memory
    bounded by what is open in it.

    A root call is complete once it has its result, each of its sub-calls
    has one and none of its approval requests awaits a decision: it is
    forgotten then, and a later event of its id is one of a call not in the
    log (a ``tool/result`` or sub-call of a call that has its result gets an
    entry of its own). A call that stays open is handed out at the end, or,
    given ``done_after`` (from :meth:`open_roots` of an earlier reading of
    the same events), right after the last event that changes it; the roots
    after it wait for it. ``keep=False`` hands out nothing (a first reading,
    for :meth:`open_roots` and :attr:`agents` only).

    Each event goes into a session (:func:`index_only_session`), whose
    :attr:`~dsh_actors.Session.call_count` says which ``tool/call`` is a
    copy of an earlier line, so calls pair as the session pairs them: the
    tree's own, to which :meth:`feed` appends each event (checked), or
    ``session``, to which the caller appends each event before feeding it
    (replay's reader, which reports what the session refuses), and only
    then: one session a reading."""

    def __init__(
        self, done_after: Mapping[int, int] | None = None, *, keep: bool = True, session: Session | None = None
    ) -> None:
        self._done_after: Mapping[int, int] = done_after or {}
        self._keep = keep
        self._appends = session is None  # (the tree's own session: feed appends each event)
        self._session = index_only_session() if session is None else session
        self._calls = self._session.call_count  # its calls up to the last tool/call fed
        self._roots: deque[CallEntry] = deque()  # made, not yet handed out, in log order
        self._open: dict[CallEntry, _Open] = {}  # root -> what keeps it open
        self._made = 0  # roots made so far
        self._changed: list[CallEntry] = []  # the roots the current event changed
        self._latest: dict[str, CallEntry] = {}  # root call id -> its latest entry
        # (turn, step, agent, root call id) -> its latest entry: a tool/result
        # (or request) that names its step pairs with its step's call, even
        # while another step's call shares the id (agents sharing a session)
        self._stepped: dict[tuple[int, int, str | None, str], CallEntry] = {}
        # sub-call id -> its latest entry, and its root call
        self._subs: dict[str, tuple[CallEntry, CallEntry]] = {}
        # (turn, step, agent) -> the calls its latest tool/batch names that have no tool/call yet
        self._announced: dict[tuple[int, int, str | None], dict[str, CallEntry]] = {}
        # (suspension, call id) -> its request
        self._requests: dict[tuple[str, str], tuple[CallEntry, Approval]] = {}
        # (call id, agent) -> the call a "deferred" decision left waiting
        self._redeferred: dict[tuple[str, str | None], CallEntry] = {}
        self.agents: set[str | None] = set()
        """The agents whose steps the roots are, up to two (:func:`note_agent`)."""

    def open_roots(self) -> dict[int, int]:
        """The roots still open (by their place among the roots, from 0),
        each with the index of the last event that changed it."""
        return {state.ordinal: state.changed for state in self._open.values()}

    def finish(self) -> list[CallEntry]:
        """The roots not handed out yet, in log order (after the last event)."""
        roots = list(self._roots)
        self._roots.clear()
        return roots

    def feed(self, event: Mapping[str, Any], index: int) -> list[CallEntry]:
        """Read ``event``, the one at ``index`` (from 0); the roots it
        completed (and those after them that were waiting), in log order.
        Raises :class:`LogShapeError` as :func:`log_entries` does (the
        reading ends there: the tree is fed no more)."""
        self._read(event, index)
        for root in self._changed:
            state = self._open.get(root)
            if state is None:
                continue  # (handed out already)
            state.changed = index
            if root.result is not None and not state.sub_calls and not state.requests:
                self._forget(root, state)
            elif self._done_after.get(state.ordinal) == index:
                del self._open[root]  # (nothing changes it any more: it stays where later events look)
        self._changed.clear()
        roots = self._roots
        done: list[CallEntry] = []
        while roots and roots[0] not in self._open:
            done.append(roots.popleft())
        return done

    def _forget(self, root: CallEntry, state: _Open) -> None:
        del self._open[root]
        if self._latest.get(root.call_id) is root:
            del self._latest[root.call_id]
        drop_redeferred(self._redeferred, root.call_id, _entry_step(root), root)  # (deferred again, then settled)
        if root.turn is not None and root.step is not None:
            key = (root.turn, root.step, root.agent, root.call_id)
            if self._stepped.get(key) is root:
                del self._stepped[key]
        subs = self._subs
        for sub_id in state.sub_ids:
            found = subs.get(sub_id)
            if found is not None and found[1] is root:
                del subs[sub_id]

    def _root(self, entry: CallEntry) -> CallEntry:
        """A new root call, in log order."""
        self._open[entry] = _Open(ordinal=self._made, changed=-1)
        self._made += 1
        if self._keep:
            self._roots.append(entry)
        note_agent(self.agents, entry)
        self._changed.append(entry)
        return entry

    def _parent_of(self, event: Mapping[str, Any], index: int) -> tuple[CallEntry, CallEntry]:
        """The entry a sub-call event nests under, and its root call."""
        parent_id = event.get("parent_call_id")
        subs, latest = self._subs, self._latest
        if type(parent_id) is str and parent_id in subs:
            return subs[parent_id]
        root_id = _str_field(event, "root_call_id", index)
        if type(parent_id) is str and parent_id in latest:
            return latest[parent_id], latest[parent_id]
        if root_id in latest:
            return latest[root_id], latest[root_id]
        placeholder = self._root(CallEntry(call_id=root_id, name=None, arguments=None, logged_call=False))
        latest[root_id] = placeholder
        return placeholder, placeholder

    def _request_done(self, root: CallEntry) -> None:
        state = self._open.get(root)
        if state is not None:
            state.requests -= 1
        self._changed.append(root)

    def _read(self, event: Mapping[str, Any], index: int) -> None:
        kind = event.get("type")
        if kind == CALL:  # (this command's messages, before the session's)
            _str_field(event, "call_id", index)
            _logged_step(event, index)
        session = self._session
        # (An event without a str type is none the session logs: ignored, as any unknown type.)
        if self._appends and type(kind) is str and kind:
            try:
                session.append(event)
            except DshError as err:  # InvalidValueError, InvalidTypeError, LosslessJsonError
                raise LogShapeError(index, event, err.message) from None
        if kind == CALL:
            counted = session.call_count
            if counted == self._calls:
                return  # the session took it for a copy of an earlier line: that call is the one shown
            self._calls = counted
        latest, stepped, changed = self._latest, self._stepped, self._changed
        if kind == BATCH:
            turn, step = _logged_step(event, index)
            calls = event.get("calls")
            if type(calls) is not list:
                raise LogShapeError(index, event, "needs a list of calls")
            waiting: dict[str, CallEntry] = {}
            made: list[CallEntry] = []
            for item in calls:
                if not isinstance(item, Mapping):
                    raise LogShapeError(index, event, "each call must be an object")
                made.append(
                    CallEntry(
                        call_id=_str_field(item, "call_id", index),
                        name=_str_field(item, "name", index),
                        arguments=_batch_arguments(item.get("arguments")),
                        turn=turn,
                        step=step,
                        agent=agent_of(event),
                        batch_only=True,
                    )
                )
            for entry in made:
                waiting[self._root(entry).call_id] = entry
            at = (turn, step, agent_of(event))
            if waiting:
                self._announced[at] = waiting
            else:
                self._announced.pop(at, None)
        elif kind == CALL:
            call_id = _str_field(event, "call_id", index)
            turn, step = _logged_step(event, index)
            name = _str_field(event, "name", index)
            agent = agent_of(event)
            at = (turn, step, agent)
            waiting_or_none = self._announced.get(at)
            entry_or_none = None if waiting_or_none is None else waiting_or_none.pop(call_id, None)
            if entry_or_none is not None:  # its batch named it: it starts where the batch put it
                if not waiting_or_none:
                    del self._announced[at]
                entry_or_none.batch_only = False
                entry_or_none.name = name
                entry_or_none.arguments = event.get("arguments")
                changed.append(entry_or_none)
            else:
                entry_or_none = self._root(
                    CallEntry(
                        call_id=call_id, name=name, arguments=event.get("arguments"), turn=turn, step=step, agent=agent
                    )
                )
            latest[call_id] = entry_or_none
            stepped[(turn, step, agent, call_id)] = entry_or_none
        elif kind == START:
            # (Pairs as a result does: the latest call of its id, in its step.)
            entry_or_none = _call_of(event, _str_field(event, "call_id", index), latest, stepped)
            if entry_or_none is not None and entry_or_none.result is None and not entry_or_none.started:
                entry_or_none.started = True
                changed.append(entry_or_none)
        elif kind == RESULT:
            result = _result(event, index)
            entry_or_none = _call_of(event, result.call_id, latest, stepped)
            if entry_or_none is None or entry_or_none.result is not None:
                entry_or_none = self._root(
                    CallEntry(call_id=result.call_id, name=None, arguments=None, logged_call=False)
                )
                latest[result.call_id] = entry_or_none
            entry_or_none.result = result
            entry_or_none.traceback = _traceback(event)
            changed.append(entry_or_none)
        elif kind == APPROVAL_REQUEST:
            call_id = _str_field(event, "call_id", index)
            suspension = _str_field(event, "suspension", index)
            # (The session's pairing of a request after a "deferred" decision.)
            entry_or_none = take_redeferred(self._redeferred, call_id, event, _entry_step)
            if entry_or_none is None or entry_or_none.result is not None:
                entry_or_none = _call_of(event, call_id, latest, stepped)
            if entry_or_none is None or entry_or_none.result is not None:
                return  # (a request whose call is not open in the log: nothing to show it on)
            reason = event.get("reason")
            approval = Approval(
                suspension=suspension,
                reason=reason if type(reason) is str else None,
                shown=_text_by_language(event.get("display_reason")),
            )
            entry_or_none.approvals.append(approval)
            replaced = self._requests.get((suspension, call_id))
            if replaced is not None:
                self._request_done(replaced[0])
            self._requests[(suspension, call_id)] = (entry_or_none, approval)
            state = self._open.get(entry_or_none)
            if state is not None:
                state.requests += 1
            changed.append(entry_or_none)
        elif kind == APPROVAL:
            key = (_str_field(event, "suspension", index), _str_field(event, "call_id", index))
            request = self._requests.pop(key, None)
            if request is not None:
                asked, approval = request
                approval.decision = _str_field(event, "decision", index)
                if approval.decision == "deferred":  # (the request that follows is this call's)
                    leave_redeferred(self._redeferred, key[1], _entry_step(asked), asked)
                self._request_done(asked)
        elif kind == PTC_DISPATCH_START:
            sub_id = _str_field(event, "sub_call_id", index)
            child = CallEntry(
                call_id=sub_id, name=_str_field(event, "name", index), arguments=event.get("arguments"), started=True
            )
            parent, root = self._parent_of(event, index)
            parent.children.append(child)
            self._subs[sub_id] = (child, root)
            state = self._open.get(root)
            if state is not None:
                state.sub_calls += 1
                state.sub_ids.append(sub_id)
            changed.append(root)
        elif kind == PTC_DISPATCH:
            result = _result(event, index)
            found = self._subs.get(result.call_id)
            if found is None or found[0].result is not None:
                child = CallEntry(
                    call_id=result.call_id, name=_str_field(event, "name", index), arguments=None, logged_call=False
                )
                parent, root = self._parent_of(event, index)
                parent.children.append(child)
                self._subs[result.call_id] = (child, root)
                state = self._open.get(root)
                if state is not None:
                    state.sub_ids.append(result.call_id)
            else:
                child, root = found
                state = self._open.get(root)
                if state is not None:
                    state.sub_calls -= 1
            child.result = result
            child.traceback = _traceback(event)
            changed.append(root)


def log_entries(events: Iterable[Mapping[str, Any]]) -> list[CallEntry]:
    """The root calls of ``events`` in log order, each with its result,
    its approvals and nested sub-calls. A logged batch's calls come in
    model order when its ``tool/batch`` is read; a call it names that never
    reached its ``tool/call`` stays ``batch_only``; a call whose
    ``tool/start`` is logged is ``started`` (without a result, it may have
    run; without either, it never started). A result or an approval
    request pairs with the latest call of its id that has no result yet
    (ids may repeat across steps), in the step it names when it names one
    (its ``turn`` and ``step``), a decision with the request of its
    suspension; a result or a sub-call whose call is not in the log, or
    comes after that call is complete (see :class:`LogTree`), gets an
    entry of its own (``logged_call`` False). Events of other types are
    ignored. A second ``tool/call`` of one id in the latest run of an
    agent's step, after its ``tool/batch``, is a copy of the line, not a
    call, as the session has it (its start and result are the first's).
    Raises :class:`LogShapeError` for a malformed batch, call, result,
    approval or dispatch event (a batch or call without an int turn and
    step, say), or one the session refuses."""
    tree = LogTree()
    roots: list[CallEntry] = []
    for index, event in enumerate(events):
        roots.extend(tree.feed(event, index))
    roots.extend(tree.finish())
    return roots


def _traceback(event: Mapping[str, Any]) -> str | None:
    text = event.get("traceback")
    return text if type(text) is str and text else None


def _walk(entries: Iterable[CallEntry]) -> Iterable[CallEntry]:
    for entry in entries:
        yield entry
        yield from _walk(entry.children)


def count_results(entries: Iterable[CallEntry]) -> tuple[int, int, int, int]:
    """``(calls, ok, errors, without a result)`` over the root calls."""
    tally = Tally()
    for entry in entries:
        tally.add(entry)
    return tally.calls, tally.ok, tally.errors, tally.calls - tally.ok - tally.errors


def _plural(count: int, word: str, plural: str | None = None) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {plural or word + 's'}"


@dataclass(slots=True)
class Tally:
    """What :func:`summary_line` counts, added up one root call at a time
    (:meth:`add`), so that a log need not be held to be summed up."""

    calls: int = 0
    ok: int = 0
    errors: int = 0
    awaiting: int = 0
    """Calls without a result whose last approval request is undecided."""
    started: int = 0
    """Calls without a result that started (they may have run)."""
    never: int = 0
    """Calls without a result that never started (:attr:`CallEntry.never_started`)."""
    nested: int = 0
    """PTC sub-calls, at any depth."""

    def add(self, entry: CallEntry) -> None:
        """Count the root call ``entry`` (and the sub-calls under it)."""
        self.calls += 1
        result = entry.result
        if result is None:
            if entry.awaiting:
                self.awaiting += 1
            elif entry.never_started:
                self.never += 1
            else:
                self.started += 1
        elif result.is_error:
            self.errors += 1
        else:
            self.ok += 1
        self.nested += sum(1 for _ in _walk(entry.children))

    def line(self) -> str:
        """``3 calls: 2 ok, 1 error`` (see :func:`summary_line`)."""
        line = f"{_plural(self.calls, 'call')}: {self.ok} ok, {_plural(self.errors, 'error')}"
        pending = self.calls - self.ok - self.errors
        if pending:
            line += f", {pending} without a result"
            why = [f"{self.awaiting} awaiting approval"] if self.awaiting else []
            if self.started:
                why.append(f"{self.started} may have run")
            if self.never:
                why.append(f"{self.never} never started")
            if why:
                line += f" ({', '.join(why)})"
        if self.nested:
            line += f" ({_plural(self.nested, 'nested call')})"
        return line


def summary_line(entries: Iterable[CallEntry]) -> str:
    """``3 calls: 2 ok, 1 error`` (and the calls without a result, those
    awaiting an approval, those that started (they may have run) and those
    that never started among them, and the PTC sub-calls, when there are
    any)."""
    tally = Tally()
    for entry in entries:
        tally.add(entry)
    return tally.line()


# --------------------------------------------------------------------------
# Views
# --------------------------------------------------------------------------


def _present_call(definition: ToolDefinition | None, name: str, args: Any) -> ToolCallView | None:
    presenter = None if definition is None else definition.present_call
    if presenter is None:
        return None
    return checked_view(name, "present_call", ToolCallView, presenter, (args,))


def _present_result(
    definition: ToolDefinition | None, name: str, args: Any, result: ToolResultProjection
) -> ToolResultView | None:
    presenter = None if definition is None else definition.present_result
    if presenter is None:
        return None
    return checked_view(name, "present_result", ToolResultView, presenter, (args, result))


def resolve_views(entry: CallEntry, lookup: Lookup) -> tuple[ToolCallView, ToolResultView | None]:
    """The call's cards: its tool's, or the generic ones."""
    name = entry.name if entry.name is not None else "?"
    definition = lookup(name) if entry.name is not None else None
    call_view = _present_call(definition, name, entry.arguments) or generic_call_view(name, entry.arguments)
    if entry.result is None:
        return call_view, None
    projection = entry.result.projection()
    result_view = _present_result(definition, name, entry.arguments, projection) or generic_result_view(projection)
    return call_view, result_view


# --------------------------------------------------------------------------
# Drawing
# --------------------------------------------------------------------------


def _compact(value: Any) -> str:
    try:
        return dumps(value).decode("utf-8")
    except Exception:  # noqa: BLE001 - not lossless: show its repr
        return repr(value)


def _split(value: str) -> list[str]:
    return value.splitlines() or ([""] if value else [])


def _block_lines(blocks: Iterable[ContentBlock], style: Style, error: bool) -> list[str]:
    lines: list[str] = []
    for block in blocks:
        if isinstance(block, TextBlock):
            paint = style.red if error else str
            lines.extend(paint(line) for line in _split(block.text))
        elif isinstance(block, ImageBlock):
            size = len(block.data) * 3 // 4
            lines.append(style.dim(f"[image {block.mime_type}, about {size} bytes]"))
        elif isinstance(block, ReasoningBlock):
            lines.extend(style.dim(f"(reasoning) {line}") for line in _split(block.text))
    return lines


def _head(view: ToolCallView, name: str, style: Style) -> tuple[str, list[str]]:
    """The call's one-line summary, and the argument lines to show under it
    when the summary had to cut them."""
    if isinstance(view, TerminalCallView):
        head = style.bold(f"$ {view.title}")
        return (f"{head}  {style.dim('in ' + view.cwd)}" if view.cwd else head), []
    if isinstance(view, GenericCallView) and view.title == name:
        if view.raw_input is None or view.raw_input == {}:
            return "", []
        shown = _compact(view.raw_input)
        cut = len(shown) > _HEAD_ARGS_WIDTH
        if cut:
            shown = shown[: _HEAD_ARGS_WIDTH - 3] + "..."
        # Arguments the one line cannot show well are listed under it.
        return style.dim(shown), _argument_lines(view.raw_input, style) if cut or "\\n" in shown else []
    return view.title if isinstance(view, (GenericCallView, DiffCallView)) else "", []


def _argument_lines(raw: Any, style: Style) -> list[str]:
    if not isinstance(raw, Mapping):
        return [style.dim(line) for line in _split(raw if isinstance(raw, str) else _compact(thaw(raw)))]
    lines: list[str] = []
    bar = style.glyph("│", "|")
    for key, value in raw.items():
        if isinstance(value, str) and "\n" in value:
            lines.append(style.dim(f"{key}:"))
            lines.extend(style.dim(f"  {bar} {line}") for line in value.splitlines())
        else:
            lines.append(style.dim(f"{key}: {_compact(thaw(value))}"))
    return lines


class _DiffTooCostly(Exception):
    """The matcher spent its budget (:data:`_DIFF_BUDGET`)."""


class _BoundedMatcher(difflib.SequenceMatcher[str]):
    """``difflib``'s matcher, which raises :class:`_DiffTooCostly` once the
    lines its searches scan pass ``budget``: its time grows with the square
    of the lines on inputs whose matches are many and short (every other
    line changed), minutes for a file of 40,000 lines."""

    def __init__(self, old: Sequence[str], new: Sequence[str], budget: int) -> None:
        self._left = budget
        self._sizes = (len(old), len(new))
        super().__init__(None, old, new)

    def find_longest_match(
        self, alo: int = 0, ahi: int | None = None, blo: int = 0, bhi: int | None = None
    ) -> difflib.Match:
        ahi = self._sizes[0] if ahi is None else ahi
        bhi = self._sizes[1] if bhi is None else bhi
        self._left -= ahi - alo + bhi - blo
        if self._left < 0:
            raise _DiffTooCostly
        return super().find_longest_match(alo, ahi, blo, bhi)


def _text_lines(value: str) -> list[str]:
    """``value``'s lines, each with its ``\\n`` (the last one may have none):
    split at ``\\n`` only, as a file's lines are, so a ``\\r`` or a form feed
    stays in its line."""
    lines = value.split("\n")
    last = lines.pop()
    return [line + "\n" for line in lines] + ([last] if last else [])


def _diff_groups(old: list[str], new: list[str]) -> list[list[tuple[str, int, int, int, int]]]:
    """The hunks (``difflib`` opcodes, 3 lines of context) that turn ``old``
    into ``new``; past :data:`_DIFF_BUDGET`, one hunk replacing every line
    between their common first and last lines (a true diff, not the
    shortest)."""
    try:
        return list(_BoundedMatcher(old, new, _DIFF_BUDGET).get_grouped_opcodes(3))
    except _DiffTooCostly:
        pass
    start = 0
    while start < min(len(old), len(new)) and old[start] == new[start]:
        start += 1
    end = 0
    while end < min(len(old), len(new)) - start and old[-1 - end] == new[-1 - end]:
        end += 1
    first, old_end, new_end = max(start - 3, 0), len(old) - end, len(new) - end
    return [
        [
            ("equal", first, start, first, start),
            ("replace", start, old_end, start, new_end),
            ("equal", old_end, min(old_end + 3, len(old)), new_end, min(new_end + 3, len(new))),
        ]
    ]


def _hunk_range(start: int, stop: int) -> str:
    """A hunk header's range, as ``diff -u`` writes it."""
    length = stop - start
    if length == 1:
        return str(start + 1)
    return f"{start + 1 if length else start},{length}"


def _diff_lines(diffs: Sequence[FileDiff], style: Style) -> list[str]:
    """Each diff as a unified diff of its lines. A change of line ending or
    of the newline at the end shows too: a ``\\r`` is shown escaped in its
    line, and a last line without a newline is followed by ``\\ No newline
    at end of file``."""
    lines: list[str] = []
    for diff in diffs:
        old = [] if diff.old_text is None else _text_lines(diff.old_text)
        new = _text_lines(diff.new_text)
        groups = [] if old == new else _diff_groups(old, new)
        if not groups:
            lines.append(style.dim(f"{diff.path}: no changes"))
            continue
        before = "/dev/null" if diff.old_text is None else f"a/{diff.path}"
        lines.extend((style.bold(f"--- {before}"), style.bold(f"+++ b/{diff.path}")))
        for group in groups:
            old_range = _hunk_range(group[0][1], group[-1][2])
            new_range = _hunk_range(group[0][3], group[-1][4])
            lines.append(style.cyan(f"@@ -{old_range} +{new_range} @@"))
            for tag, i1, i2, j1, j2 in group:
                shown: list[tuple[str, Callable[[str], str], str]]
                if tag == "equal":
                    shown = [(" ", str, line) for line in old[i1:i2]]
                else:
                    shown = [("-", style.red, line) for line in old[i1:i2]]
                    shown.extend(("+", style.green, line) for line in new[j1:j2])
                for sign, paint, line in shown:
                    lines.append(paint(sign + line.removesuffix("\n")))
                    if not line.endswith("\n"):
                        lines.append("\\ No newline at end of file")
    return lines


def _call_body(view: ToolCallView, style: Style) -> list[str]:
    """What a pending call shows (its result is not in the log)."""
    if isinstance(view, TerminalCallView):
        return [style.dim(view.description)] if view.description else []
    if isinstance(view, DiffCallView):
        return _diff_lines(view.diffs, style)
    if isinstance(view, GenericCallView):
        lines = _block_lines(view.content or (), style, error=False)
        arrow = style.glyph("↳", "->")
        for location in view.locations:
            where = location.path if location.line is None else f"{location.path}:{location.line}"
            lines.append(style.dim(f"{arrow} {where}"))
        return lines
    return []


def _result_body(view: ToolResultView, result: LoggedResult, head: str, style: Style) -> list[str]:
    lines: list[str] = []
    title = getattr(view, "title", None)
    if isinstance(title, str) and title and title not in head:
        lines.append(style.bold(title))
    if isinstance(view, TerminalResultView):
        if view.output:
            lines.extend(_split(view.output.rstrip("\n")))
        if view.signal is not None:
            lines.append(style.red(f"killed by {view.signal}"))
        elif view.exit_code is not None:
            status = f"exit {view.exit_code}"
            lines.append(style.green(status) if view.exit_code == 0 else style.red(status))
        elif not view.output:
            lines.append(style.dim("(no output)"))
    elif isinstance(view, DiffResultView):
        lines.extend(_diff_lines(view.diffs, style))
    elif isinstance(view, ReadResultView):
        lines.extend(_read_lines(view, style))
    elif isinstance(view, SearchResultView):
        lines.extend(_search_lines(view, style))
    elif isinstance(view, WebResultView):
        lines.extend(_web_lines(view, result, style))
    elif isinstance(view, GenericResultView):
        content = result.content if view.content is None else view.content
        lines.extend(_block_lines(content, style, error=result.is_error))
    return lines


def _read_lines(view: ReadResultView, style: Style) -> list[str]:
    if not view.lines:
        return [style.dim(f"{view.path}: no lines at offset {view.offset} (the file has {view.total_lines})")]
    last = view.lines[-1].number
    dot, dash = style.glyph(" ·", ":"), style.glyph("–", "-")
    about = f"{view.path}{dot} lines {view.offset}{dash}{last} of {view.total_lines}"
    if view.lang:
        about += f" ({view.lang})"
    width = len(str(last))
    bar = style.glyph("│", "|")
    return [style.dim(about), *(f"{style.dim(f'{line.number:>{width}} {bar}')} {line.text}" for line in view.lines)]


def _search_lines(view: SearchResultView, style: Style) -> list[str]:
    lines: list[str] = []
    if view.shape == "paths":
        lines.extend(view.paths)
        shown = len(view.paths)
        summary = _plural(view.total, "path")
    else:
        shown = 0
        for group in view.matches:
            lines.append(style.cyan(group.path))
            width = max((len(str(m.line)) for m in group.lines), default=1)
            for match in group.lines:
                lines.append(f"  {style.dim(f'{match.line:>{width}}:')} {match.text}")
                shown += 1
        files = len(view.matches)
        summary = f"{_plural(view.total, 'match', 'matches')} in {_plural(files, 'file')}"
    if view.truncated:
        summary += f" (truncated: {shown} shown)"
    lines.append(style.dim(summary))
    return lines


def _web_lines(view: WebResultView, result: LoggedResult, style: Style) -> list[str]:
    lines: list[str] = []
    if view.kind == "search":
        if view.answer:
            lines.extend(_split(view.answer))
        for number, source in enumerate(view.sources, 1):
            lines.append(f"[{number}] {style.bold(source.title)} {style.dim(source.url)}")
            if source.snippet:
                lines.extend(style.dim(f"    {line}") for line in _split(source.snippet))
        if view.truncated:
            lines.append(style.dim("(truncated)"))
        return lines
    status = "" if view.status_code is None else f" {style.glyph('→', '->')} {view.status_code}"
    lines.append(f"{view.url or '?'}{status}" + (style.dim(" (truncated)") if view.truncated else ""))
    lines.extend(_block_lines(result.content, style, error=result.is_error))
    return lines


def _clip(lines: list[str], max_lines: int | None, style: Style) -> list[str]:
    if max_lines is None or len(lines) <= max_lines:
        return lines
    hidden = len(lines) - max_lines
    return [*lines[:max_lines], style.dim(f"... {_plural(hidden, 'more line')}")]


def _status(entry: CallEntry, style: Style) -> tuple[str, str]:
    result = entry.result
    if result is None:
        if entry.awaiting:
            return style.yellow(style.glyph("⏸", "||")), style.yellow("awaiting approval")
        if entry.batch_only:
            return style.dim(style.glyph("·", ".")), style.dim("never started (only its batch names it)")
        if entry.never_started:
            return style.dim(style.glyph("·", ".")), style.dim("never started (no tool/start logged)")
        return style.yellow(style.glyph("…", "?")), style.yellow("started, no result recorded (it may have run)")
    if not result.is_error:
        return style.green(style.glyph("✓", "ok")), ""
    code = None if result.error is None or result.error.info is None else result.error.info.code
    return style.red(style.glyph("✗", "error")), style.red(code or "error")


def _render_entry(
    entry: CallEntry,
    lookup: Lookup,
    style: Style,
    pad: str,
    max_lines: int | None,
    out: list[str],
    tracebacks: bool = False,
) -> None:
    name = entry.name if entry.name is not None else "?"
    call_view, result_view = resolve_views(entry, lookup)
    icon, note = _status(entry, style)
    head, argument_lines = _head(call_view, name, style)
    parts = [icon, style.dim(entry.call_id), style.bold(name)]
    if head:
        parts.extend((style.dim(style.glyph("·", "-")), head))
    if note:
        parts.append(f" {note}")
    if not entry.logged_call:
        parts.append(style.dim("(call not in the log)"))
    out.append(pad + " ".join(parts))
    inner = pad + _INDENT
    body = list(argument_lines)
    if result_view is None:
        body.extend(_call_body(call_view, style))
    out.extend(inner + line for line in _clip(body, max_lines, style))
    out.extend(inner + line for line in _approval_lines(entry.approvals, style))
    for child in entry.children:
        _render_entry(child, lookup, style, inner, max_lines, out, tracebacks)
    if result_view is not None and entry.result is not None:
        lines = _result_body(result_view, entry.result, head, style)
        out.extend(inner + line for line in _clip(lines, max_lines, style))
    if tracebacks and entry.traceback is not None:
        out.extend(inner + style.dim(line) for line in entry.traceback.rstrip("\n").split("\n"))


def _approval_lines(approvals: Sequence[Approval], style: Style) -> list[str]:
    lines: list[str] = []
    for approval in approvals:
        reason = approval.reason if approval.reason is not None else "no reason given"
        lines.append(style.yellow(f"approval asked: {reason}") + style.dim(f" (suspension {approval.suspension})"))
        if approval.shown is not None:
            shown = "; ".join(f"{language}: {text}" for language, text in approval.shown.items())
            lines.append(style.dim(f"shown to the person: {shown}"))
        decision = approval.decision
        if decision is not None:
            paint = style.green if decision == "allowed-once" else style.yellow if decision == "deferred" else style.red
            lines.append(paint(f"decision: {decision}"))
    return lines


def render_log(
    entries: Sequence[CallEntry],
    lookup: Lookup,
    style: Style,
    *,
    max_lines: int | None = None,
    steps: bool = True,
    tracebacks: bool = False,
) -> list[str]:
    """The lines that show ``entries``: a header per model step (when
    ``steps``), then each call with its cards, sub-calls nested under their
    root call. A step is an agent's: when the entries name more than one
    agent (agents sharing a session), each header names its agent.
    ``max_lines`` caps each card's body; ``tracebacks`` adds the logged
    traceback of a call whose hook raised."""
    agents: set[str | None] = set()
    for entry in entries:
        note_agent(agents, entry)
    named = len(agents) > 1
    return list(
        render_lines(entries, lookup, style, named=named, max_lines=max_lines, steps=steps, tracebacks=tracebacks)
    )


def note_agent(agents: set[str | None], entry: CallEntry) -> None:
    """Add to ``agents`` the agent whose step ``entry`` is (None: a step
    that names none), up to two: the headers name each step's agent when
    the entries are more than one agent's steps."""
    if entry.turn is not None and len(agents) < 2:
        agents.add(entry.agent)


def render_lines(
    entries: Iterable[CallEntry],
    lookup: Lookup,
    style: Style,
    *,
    named: bool,
    max_lines: int | None = None,
    steps: bool = True,
    tracebacks: bool = False,
) -> Iterator[str]:
    """:func:`render_log`'s lines, drawn one root call at a time as
    ``entries`` yields them; ``named``: whether each header names its
    agent (more than one agent's steps, which :func:`note_agent` tells)."""
    rule = style.glyph("──", "--")
    dot = style.glyph(" ·", ",")
    step: tuple[int | None, int | None, str | None] | None = None
    out: list[str] = []
    for entry in entries:
        here = (entry.turn, entry.step, entry.agent)
        if steps and entry.turn is not None and here != step:
            where = f"turn {entry.turn}{dot} step {entry.step}"
            if named:
                where = f"{'no agent' if entry.agent is None else 'agent ' + entry.agent}{dot} {where}"
            out.append(style.dim(f"{rule} {where} {rule}"))
        if entry.turn is not None:
            step = here
        _render_entry(entry, lookup, style, "", max_lines, out, tracebacks)
        for line in out:
            yield terminal_safe(line, style)
        out.clear()
