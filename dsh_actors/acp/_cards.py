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
* web: a search's answer and sources as Markdown links, or a fetch's URL and
  status followed by the result's own text.

A card's title, when it has one, replaces the pending title. The raw
output is the result's durable projection: ``is_error``, ``content``,
``error`` and ``meta`` exactly as the ``tool/result`` log event holds them.
Relative paths (locations, diffs) are resolved against the session's
working folder, since ACP clients expect absolute paths.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Final

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

__all__ = ["block_content", "call_fields", "raw_output", "result_fields"]

_UNPRINTABLE: Final = "<arguments that are not JSON>"


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


def _text(value: str) -> dict[str, Any]:
    return {"type": "content", "content": {"type": "text", "text": value}}


def block_content(block: ContentBlock) -> dict[str, Any]:
    """One content block as ACP tool-call content: text and images as they
    are, reasoning as text."""
    if isinstance(block, ImageBlock):
        return {"type": "content", "content": {"type": "image", "data": block.data, "mimeType": block.mime_type}}
    return _text(block.text)  # a TextBlock or a ReasoningBlock


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
        fields = {"title": view.title, "kind": "execute", "rawInput": _plain(arguments)}
        if notes:
            fields["content"] = [_text("\n".join(notes))]
        return fields
    if isinstance(view, DiffCallView):
        locations = view.locations or tuple(FileLocation(diff.path) for diff in view.diffs)
        return {
            "title": view.title,
            "kind": "edit",
            "rawInput": _plain(arguments),
            "content": [_diff(diff, cwd) for diff in view.diffs],
            "locations": [_location(location, cwd) for location in locations],
        }
    if isinstance(view, GenericCallView):
        fields = {"title": view.title, "kind": view.kind or "other"}
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
    while fence in body:
        fence += "`"
    return f"{fence}{lang or ''}\n{body}\n{fence}"


def _terminal_text(view: TerminalResultView) -> str:
    parts: list[str] = []
    output = (view.output or "").rstrip("\n")
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


def _web_text(view: WebResultView, result: PresentedResult) -> str:
    if view.kind == "search":
        parts = [view.answer] if view.answer else []
        for source in view.sources:
            line = f"- [{source.title}]({source.url})"
            parts.append(f"{line}: {source.snippet}" if source.snippet else line)
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
        content = [_text(text)] if text else _blocks(result.content)
    fields: dict[str, Any] = {"content": content}
    title = getattr(view, "title", None)
    if title:
        fields["title"] = title
    return fields


def raw_output(call_id: str, result: PresentedResult) -> dict[str, Any]:
    """The durable projection of ``result``: the ``tool/result`` log event's
    ``is_error``, ``content``, ``error`` and ``meta``, as plain JSON."""
    event = result_event(call_id, result)
    return {key: _plain(event[key]) for key in ("is_error", "content", "error", "meta")}
