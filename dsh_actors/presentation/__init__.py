"""How a tool asks to be shown in a UI: ``card``-tagged render intents.

A tool's ``present_call(args)`` returns a :class:`ToolCallView` (the pending
state of a call) and its ``present_result(args, result)`` a
:class:`ToolResultView` (the completed state), or ``None`` to fall back to
the generic cards built by :func:`generic_call_view` and
:func:`generic_result_view`. The vocabulary is provider-neutral: a UI bridge
(an editor card, a CLI log line) switches on ``card`` and projects it into
its own views; a UI without a card's capability falls back to the result's
raw content.

Every record is frozen and slotted, compares by value, normalises its
sequences to tuples and checks its field types at construction, so a view
that exists is well formed. ``to_json()`` gives plain JSON (snake_case keys,
``"card"`` on cards, ``None`` fields omitted) and
:meth:`ToolCallView.from_json` / :meth:`ToolResultView.from_json` read it
back, raising :class:`~dsh_actors.errors.LosslessJsonError` (with the path of
the bad field) on anything malformed.

Presenters run on the thread that asks for the view (the executor's, or a
replaying reader's): they must be pure, fast and non-blocking, and depend
only on their arguments, because a session replay calls them again from the
durable log alone (see :class:`ToolResultProjection`).
"""

from __future__ import annotations

from ._cards import (
    CALL_CARD_CLASSES,
    CARD_CLASSES,
    RESULT_CARD_CLASSES,
    DiffCallView,
    DiffResultView,
    FileDiff,
    FileLocation,
    GenericCallView,
    GenericResultView,
    ReadFileLine,
    ReadResultView,
    SearchFileMatches,
    SearchMatchLine,
    SearchResultView,
    TerminalCallView,
    TerminalResultView,
    ToolCallKind,
    ToolCallView,
    ToolResultView,
    WebResultView,
    WebSource,
)
from ._cards import SearchShape as SearchShape  # the cards' field vocabularies
from ._cards import WebKind as WebKind
from ._projection import PresentedResult, ToolResultProjection, generic_call_view, generic_result_view

__all__ = [
    "CALL_CARD_CLASSES",
    "CARD_CLASSES",
    "RESULT_CARD_CLASSES",
    "DiffCallView",
    "DiffResultView",
    "FileDiff",
    "FileLocation",
    "GenericCallView",
    "GenericResultView",
    "PresentedResult",
    "ReadFileLine",
    "ReadResultView",
    "SearchFileMatches",
    "SearchMatchLine",
    "SearchResultView",
    "TerminalCallView",
    "TerminalResultView",
    "ToolCallKind",
    "ToolCallView",
    "ToolResultProjection",
    "ToolResultView",
    "WebResultView",
    "WebSource",
    "generic_call_view",
    "generic_result_view",
]
