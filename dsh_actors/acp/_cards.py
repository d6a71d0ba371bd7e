"""The cards in ACP's wire vocabulary: pure functions from a call's
``present_call`` card and its result's ``present_result`` card to the JSON
fields of a ``tool_call`` / ``tool_call_update`` session update (camelCase,
as on the wire). No SDK import: :mod:`._bridge` validates these dicts into
the SDK's models.

Call cards (the ``tool_call`` a call appears with):

* generic: its ``title``, ``kind`` (``"other"`` when it has none), ``locations``,
  ``raw_input`` (left out when the card has none) and ``content``;
* terminal: the command as the title, kind ``"execute"``, the description and
  working folder as text, the call's arguments as raw input;
* diff: kind ``"edit"``, each :class:`FileDiff` as ACP ``diff`` content (the
  proposed change, shown before the call runs or is approved), the diffs'
  files as locations when the card names none, the arguments as raw input.

Result cards (the content of the final ``tool_call_update``):

* generic: its ``content`` (``None``: the result's own content);
* terminal: the captured output as a fenced block and the exit status;
* diff: each diff as ACP ``diff`` content;
* read: the window's text in a fenced block tagged with the card's ``lang``;
* search: ``path:line: text`` rows grouped by file (or the paths), and a
  note when the result was capped;
* web: a search's answer and sources as Markdown links, one list item a
  source (its title and snippet read as text, their punctuation escaped,
  and its URL written so that the link ends where the URL does: a page
  cannot point the link elsewhere or add one of its own),
  or a fetch's URL and status followed by the result's own text.

A card's title, when it has one, replaces the pending title. The raw
output is the result's durable projection: ``is_error``, ``content``,
``error`` and ``meta`` exactly as the ``tool/result`` log event holds them,
when its JSON is at most :data:`RAW_OUTPUT_LIMIT` characters. A longer one
(the session log holds it whole) is cut, marked ``"truncated": true`` with
``"size"``, the whole projection's JSON length: when the card's content is
the result's own text (a generic card showing the result's content, the
fallback, a terminal, read or web fetch card) that text is not sent a
second time, and the raw output is ``{"is_error": ..., "truncated": true,
"size": ...}``; beside a card that shows something else (a generic card's
own content, a diff, search rows, a web search's sources) it is the
projection with its strings cut to prefixes, at most the limit long, so
the editor still gets the result up to the limit. Relative paths (locations, diffs) are resolved against the
session's working folder, since ACP clients expect absolute paths.

Card text (titles and text content, here and in :mod:`._bridge`'s progress
and permission requests) is what a tool wrote made safe to show
(:func:`card_text`): an editor renders it as Markdown or plain text, and
may hand it to a terminal, so terminal escape sequences are left out and
other control characters shown. Diffs keep the files' text as it is, and
the raw input and raw output their strings (JSON escapes their control
characters); the model's result is never changed.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from typing import Any, Final

from ..errors import escaped
from ..json import thaw
from ..model import ContentBlock, ImageBlock, TextBlock
from ..presentation import (
    DiffCallView,
    DiffResultView,
    FileDiff,
    FileLocation,
    GenericCallView,
    GenericResultView,
    PresentedResult,
    ReadResultView,
    SearchResultView,
    TerminalCallView,
    TerminalResultView,
    ToolCallView,
    ToolResultView,
    WebResultView,
)
from ..session import result_event

__all__ = [
    "RAW_OUTPUT_LIMIT",
    "block_content",
    "call_fields",
    "card_text",
    "raw_output",
    "result_fields",
    "text_content",
]

_UNPRINTABLE: Final = "<arguments that are not JSON>"

RAW_OUTPUT_LIMIT: Final = 64 * 1024
"""The longest raw output, in characters of compact JSON, that a result's
final update carries whole (see :func:`raw_output`)."""

#: The escape sequences card text leaves out (ECMA-48's 7-bit forms): a CSI
#: (colours, cursor motion, erasing), an OSC, DCS, SOS, PM or APC string
#: ended by BEL or ST (window titles, hyperlinks, clipboard writes), and
#: every other ESC sequence (character sets, keypad modes). A string never
#: ended (before a control character) loses only its ESC and introducer; an
#: ESC that starts no sequence is shown, like any other control character.
_ESCAPE: Final = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|[\]PX^_][^\x00-\x1f\x7f]*(?:\x07|\x1b\\)|[ -/]*[0-~])")
_LINE_END: Final = re.compile(r"\r\n?")
#: The characters card text shows in their visible form (``errors.escaped``):
#: the C0 and C1 controls but tab and newline, DEL, the bidi controls (which
#: reorder what is read), the line and paragraph separators, and lone
#: surrogates. Other format characters stay, as an editor shows them: a
#: zero-width joiner inside an emoji, a soft hyphen, private-use icons.
_SHOWN: Final = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")


def _shown(match: re.Match[str]) -> str:
    return escaped(match.group())


def card_text(value: str) -> str:
    """``value`` as a card shows it: terminal escape sequences (colours, a
    window title, a hyperlink) left out, ``\\r\\n`` and a lone ``\\r`` as a
    line break, and every other control character (C0, DEL, C1), the bidi
    controls and the line separators in their visible ``\\x..`` /
    ``\\u....`` form, as :func:`~dsh_actors.errors.printable` shows them;
    tabs, newlines and the other format characters (a zero-width joiner
    in an emoji) stay."""
    return _SHOWN.sub(_shown, _LINE_END.sub("\n", _ESCAPE.sub("", value)))


def _path(path: str, cwd: str | None) -> str:
    if cwd is None or os.path.isabs(path):
        return path
    return os.path.normpath(os.path.join(cwd, path))


def _location(location: FileLocation, cwd: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"path": _path(location.path, cwd)}
    if location.line is not None:
        out["line"] = location.line
    return out


def _diff(diff: FileDiff, cwd: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "diff", "path": _path(diff.path, cwd), "newText": diff.new_text}
    if diff.old_text is not None:
        out["oldText"] = diff.old_text
    return out


def text_content(value: str) -> dict[str, Any]:
    """``value`` as ACP tool-call content: text, as :func:`card_text` shows it."""
    return {"type": "content", "content": {"type": "text", "text": card_text(value)}}


def block_content(block: ContentBlock) -> dict[str, Any]:
    """One content block as ACP tool-call content: text and images as they
    are, reasoning as text."""
    if isinstance(block, ImageBlock):
        return {"type": "content", "content": {"type": "image", "data": block.data, "mimeType": block.mime_type}}
    return text_content(block.text)  # a TextBlock or a ReasoningBlock


def _blocks(blocks: Sequence[ContentBlock]) -> list[dict[str, Any]]:
    return [block_content(block) for block in blocks]


def _plain(value: Any) -> Any:
    try:
        return thaw(value)
    except Exception:  # noqa: BLE001 - not lossless JSON: say so instead of showing a repr
        return _UNPRINTABLE


def call_fields(view: ToolCallView, arguments: Any, cwd: str | None = None) -> dict[str, Any]:
    """The ``tool_call`` fields (without id and status) of a call card.
    ``arguments``: the call's (frozen) arguments, the raw input of the cards
    that do not carry their own."""
    fields: dict[str, Any]
    if isinstance(view, TerminalCallView):
        notes = [note for note in (view.description, None if view.cwd is None else f"in {view.cwd}") if note]
        fields = {"title": card_text(view.title), "kind": "execute", "rawInput": _plain(arguments)}
        if notes:
            fields["content"] = [text_content("\n".join(notes))]
        return fields
    if isinstance(view, DiffCallView):
        locations = view.locations or tuple(FileLocation(diff.path) for diff in view.diffs)
        return {
            "title": card_text(view.title),
            "kind": "edit",
            "rawInput": _plain(arguments),
            "content": [_diff(diff, cwd) for diff in view.diffs],
            "locations": [_location(location, cwd) for location in locations],
        }
    if isinstance(view, GenericCallView):
        fields = {"title": card_text(view.title), "kind": view.kind or "other"}
        if view.raw_input is not None:
            fields["rawInput"] = _plain(view.raw_input)
        if view.content:
            fields["content"] = _blocks(view.content)
        if view.locations:
            fields["locations"] = [_location(location, cwd) for location in view.locations]
        return fields
    return {"title": type(view).__name__, "kind": "other", "rawInput": _plain(arguments)}  # pragma: no cover


def _fenced(body: str, lang: str | None = None) -> str:
    fence = "```"
    shown = _ESCAPE.sub("", body)  # (leaving escape sequences out can join backticks)
    while fence in shown:
        fence += "`"
    return f"{fence}{lang or ''}\n{body}\n{fence}"


def _terminal_text(view: TerminalResultView) -> str:
    parts: list[str] = []
    output = (view.output or "").rstrip("\r\n")
    if output:
        parts.append(_fenced(output))
    if view.signal is not None:
        parts.append(f"killed by {view.signal}")
    elif view.exit_code is not None:
        parts.append(f"exit code {view.exit_code}")
    return "\n".join(parts)


def _read_text(view: ReadResultView) -> str:
    body = view.content if view.content is not None else "\n".join(line.text for line in view.lines)
    if not view.lines and not body:
        return f"{view.path}: no lines at line {view.offset} ({view.total_lines} lines)"
    return _fenced(body, view.lang)


def _search_text(view: SearchResultView) -> str:
    if view.shape == "paths":
        rows = list(view.paths)
    else:
        rows = [f"{match.path}:{line.line}: {line.text}" for match in view.matches for line in match.lines]
    if not rows:
        return "no matches"
    text = "\n".join(rows)
    if view.truncated:
        text += f"\n[{view.total} in all; the rest are not shown]"
    return text


#: What a page's own text (a source's title and snippet) escapes: every
#: ASCII punctuation character, as CommonMark allows, so that none of it
#: is Markdown (a title cannot end its link early, a backtick open a code
#: span that swallows the link, a snippet add a link or HTML of its own).
_PUNCTUATION: Final = re.compile(r"([!-/:-@\[-`{-~])")
#: A link destination written as is: no whitespace, parenthesis, angle
#: bracket or backslash (else it is written ``<...>``, those percent-encoded).
_PLAIN_TARGET: Final = re.compile(r"[^\s()<>\\]*")
_POINTY: Final = {ord(c): f"%{ord(c):02X}" for c in "<>\\\n\r"}


def _one_line(text: str) -> str:
    """``text`` on one line (a source's line of the list stays one item)."""
    return " ".join(text.split())


def _page_text(text: str) -> str:
    """A page's text (a title, a snippet) on one line, read as text, not
    Markdown."""
    return _PUNCTUATION.sub(r"\\\1", _one_line(text))


def _link_target(url: str) -> str:
    """``url`` as a Markdown link's destination that ends where it does."""
    if _PLAIN_TARGET.fullmatch(url):
        return url
    return f"<{url.translate(_POINTY)}>"


def _web_text(view: WebResultView, result: PresentedResult) -> str:
    if view.kind == "search":
        parts = [view.answer] if view.answer else []
        for source in view.sources:
            line = f"- [{_page_text(source.title)}]({_link_target(source.url)})"
            parts.append(f"{line}: {_page_text(source.snippet)}" if source.snippet else line)
        if view.truncated:
            parts.append("[more results were not shown]")
        return "\n".join(parts)
    head = view.url or ""
    if view.status_code is not None:
        head = f"{head} ({view.status_code})" if head else f"status {view.status_code}"
    body = "\n".join(block.text for block in result.content if isinstance(block, TextBlock))
    if view.truncated:
        body += "\n[truncated]"
    return "\n\n".join(part for part in (head, body) if part)


def result_fields(view: ToolResultView, result: PresentedResult, cwd: str | None = None) -> dict[str, Any]:
    """The final ``tool_call_update`` fields (without id, status and raw
    output) of a result card: ``content``, and ``title`` when the card has one."""
    content: list[dict[str, Any]]
    if isinstance(view, DiffResultView):
        content = [_diff(diff, cwd) for diff in view.diffs]
    elif isinstance(view, GenericResultView):
        content = _blocks(view.content if view.content is not None else result.content)
    else:
        if isinstance(view, TerminalResultView):
            text = _terminal_text(view)
        elif isinstance(view, ReadResultView):
            text = _read_text(view)
        elif isinstance(view, SearchResultView):
            text = _search_text(view)
        elif isinstance(view, WebResultView):
            text = _web_text(view, result)
        else:  # pragma: no cover - the card union is closed
            text = ""
        content = [text_content(text)] if text else _blocks(result.content)
    fields: dict[str, Any] = {"content": content}
    title = getattr(view, "title", None)
    if title:
        fields["title"] = card_text(title)
    return fields


def _shows_result(view: ToolResultView, result: PresentedResult) -> bool:
    """Whether the card's content is the result's own text: the result's
    content (a generic card without content of its own, or with the
    result's: the fallback), a terminal's captured output, a read's window
    or a web fetch's body. A diff, a search's rows, a web search's sources
    or a generic card's own content show something else."""
    if isinstance(view, GenericResultView):
        return view.content is None or view.content == tuple(result.content)
    if isinstance(view, WebResultView):
        return view.kind == "fetch"
    return isinstance(view, (TerminalResultView, ReadResultView))


def _json_len(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def _room(value: Any, room: int) -> int:
    """``room`` less an upper bound of the length of ``value``'s compact
    JSON, without serializing it: a string's characters at most 6 each (a
    control character as ``\\u001f``), a number at most 24 (``-1.2345678901234567e-308``;
    a lossless int fits 64 bits); negative as soon as the bound passes
    ``room``, where the walk stops."""
    if isinstance(value, str):
        return room - 6 * len(value) - 2
    if isinstance(value, dict):
        room -= 2
        for key, item in value.items():
            room = _room(item, _room(key, room - 2))  # the colon and the comma
            if room < 0:
                break
        return room
    if isinstance(value, list):
        room -= 2
        for item in value:
            room = _room(item, room - 1)  # the comma
            if room < 0:
                break
        return room
    return room - 24  # null, a bool or a number


def _prefix(value: str, room: int) -> str:
    """The longest prefix of ``value`` whose JSON string is at most
    ``room`` (at least 2) characters: its JSON cut there, less an escape
    sequence the cut split, read back."""
    body = json.dumps(value[: room - 2], ensure_ascii=False)[1:-1]
    if len(body) <= room - 2:
        return value[: room - 2]
    body = body[: room - 2]
    while True:  # at most 5 times
        try:
            return str(json.loads(f'"{body}"'))
        except ValueError:
            body = body[:-1]


def _fit(value: Any, room: int) -> tuple[Any, int] | None:
    """``value`` with each string cut to a prefix and each list and object
    cut after the members that fit, so that its compact JSON is at most
    ``room`` characters, and that JSON's length; ``None`` when nothing of
    it fits (a scalar whole, a string's ``""``, a member of a list or
    object that has one)."""
    if isinstance(value, (str, list, dict)) and room < 2:
        return None
    if isinstance(value, str):
        cut = _prefix(value, room)
        return cut, _json_len(cut)
    if isinstance(value, (list, dict)):
        used = 2
        out: Any = [] if isinstance(value, list) else {}
        for key, item in enumerate(value) if isinstance(value, list) else value.items():
            head = (1 if out else 0) + (0 if isinstance(out, list) else _json_len(key) + 1)
            fitted = _fit(item, room - used - head)
            if fitted is None:
                break
            used += head + fitted[1]
            if isinstance(out, list):
                out.append(fitted[0])
            else:
                out[key] = fitted[0]
        return (out, used) if out or not value else None
    size = _json_len(value)
    return (value, size) if size <= room else None


def _bounded(projection: dict[str, Any], size: int) -> dict[str, Any]:
    """``projection`` cut to at most :data:`RAW_OUTPUT_LIMIT` characters of
    JSON (its content first, then its error and meta, by :func:`_fit`),
    with ``"truncated": true`` and ``size``, the whole one's length."""
    out = {"is_error": projection["is_error"], "content": [], "error": None, "meta": None, "truncated": True}
    out["size"] = size
    room = RAW_OUTPUT_LIMIT - _json_len(out)
    for key, empty in (("content", 2), ("error", 4), ("meta", 4)):  # [] / null
        fitted = _fit(projection[key], room + empty)
        if fitted is not None:
            out[key] = fitted[0]
            room -= fitted[1] - empty
    return out


def raw_output(call_id: str, result: PresentedResult, view: ToolResultView) -> dict[str, Any]:
    """The durable projection of ``result``: the ``tool/result`` log event's
    ``is_error``, ``content``, ``error`` and ``meta``, as plain JSON, when
    its compact JSON is at most :data:`RAW_OUTPUT_LIMIT` characters (a
    bound on its length is taken first: the JSON is measured only when
    the bound passes the limit). A longer one is cut, with ``"truncated":
    true`` and ``"size"``, its whole JSON length (the session log holds it
    whole): when ``view``, the result's card, shows the result's own text
    (see :func:`_shows_result`), which is not sent a second time, to
    ``{"is_error": ..., "truncated": true, "size": ...}``; else to the
    projection with its strings cut to prefixes, at most the limit long."""
    event = result_event(call_id, result)
    projection = {key: _plain(event[key]) for key in ("is_error", "content", "error", "meta")}
    if _room(projection, RAW_OUTPUT_LIMIT) >= 0:
        return projection
    size = _json_len(projection)
    if size <= RAW_OUTPUT_LIMIT:
        return projection
    if _shows_result(view, result):
        return {"is_error": projection["is_error"], "truncated": True, "size": size}
    return _bounded(projection, size)
