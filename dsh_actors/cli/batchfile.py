"""Batch files: the tool calls of one model response, read from JSON.

Three families of shapes are accepted (:data:`ACCEPTED_SHAPES` says so in
one line, for error messages):

* **ours** (``"dsh"``): ``{"calls": [{"id", "name", "arguments"}, ...]}`` or
  a bare list of those. ``arguments`` is an object, JSON text, or absent
  (``{}``); ``id`` may be left out (``c1``, ``c2``, ... by position).
* **OpenAI** (``"openai"``): the ``tool_calls`` list (``[{"id", "type":
  "function", "function": {"name", "arguments": "<json text>"}}]``), an
  assistant message holding it (``{"role": "assistant", "tool_calls":
  [...]}``), or a chat completion (``{"choices": [{"message": {...}}]}``).
  Responses-API ``function_call`` items (``{"type": "function_call",
  "call_id", "name", "arguments"}``, bare or as a response's ``"output"``)
  are read too (``"openai-responses"``).
* **Anthropic** (``"anthropic"``): ``tool_use`` content blocks (``{"type":
  "tool_use", "id", "name", "input": {...}}``), bare or as an assistant
  message's ``"content"``; other blocks (text, thinking) are skipped.

The provider shapes are read by :mod:`dsh_actors.providers` (``openai``,
``openai_responses``, ``anthropic``: the same ``calls()`` a loop uses); this
module decides which family a document is in. A list of chat messages (a
conversation) is read from its last assistant message. Model-produced
argument *text* is kept as text: the executor parses it
(``docs/reference.md``, section 6), so arguments that are not JSON fail
their call with ``INVALID_ARGS`` instead of failing the whole file.

The file is UTF-8 text (a leading byte order mark is skipped). Every
problem (other bytes, an empty file, no JSON, a bad field) raises
:class:`BatchFileError` with a one-line message that names the file and
the JSON path of the bad field.
"""

from __future__ import annotations

import codecs
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, TypeAlias

from ..errors import LosslessJsonError
from ..json import loads
from ..model import ToolCall
from ..providers import ProviderFormatError, anthropic, openai, openai_responses
from ..providers._common import kind as _kind
from ..providers._common import quoted as _quoted

__all__ = [
    "ACCEPTED_SHAPES",
    "Batch",
    "BatchFileError",
    "BatchShape",
    "parse_batch",
    "read_batch",
    "read_json_file",
    "unreadable",
]

BatchShape: TypeAlias = Literal["dsh", "openai", "openai-responses", "anthropic"]

ACCEPTED_SHAPES: Final = (
    'ours ({"calls": [{"id", "name", "arguments"}]} or a list of such calls), '
    'OpenAI (a "tool_calls" list, an assistant message with "tool_calls", or a chat completion with "choices"), '
    'OpenAI Responses ("function_call" items, or a response whose "output" holds them), '
    'Anthropic ("tool_use" content blocks, or an assistant message whose "content" holds them)'
)
"""The accepted shapes, in one line (for error messages)."""

_OURS_KEYS: Final = frozenset({"id", "name", "arguments"})
_SKIPPED_BLOCKS: Final = frozenset(
    {"text", "thinking", "redacted_thinking", "image", "document", "server_tool_use", "web_search_tool_result"}
)
_SKIPPED_ITEMS: Final = frozenset({"message", "reasoning", "web_search_call", "file_search_call"})


class BatchFileError(ValueError):
    """A batch file that cannot be read: the one-line message says which
    file, where in it, and what is wrong."""


@dataclass(frozen=True, slots=True)
class Batch:
    """The calls read from a batch file, in model order, and the shape they
    were found in."""

    calls: tuple[ToolCall, ...]
    shape: BatchShape


def read_batch(path: str | Path) -> Batch:
    """Read and parse the batch file at ``path`` (``-``: standard input)."""
    value, source = read_json_file(path)
    return parse_batch(value, source)


def read_json_file(
    path: str | Path,
    *,
    what: str = "batch file",
    holds: str = "the tool calls",
    root: str = "batch",
    stdin: bool = True,
    error: type[Exception] = BatchFileError,
    label: str | None = None,
) -> tuple[Any, str]:
    """The JSON value of the file at ``path`` (with ``stdin``, ``-`` is
    standard input), and the name a message gives it (``<stdin>``, else
    ``path``). The file is UTF-8 text (a leading byte order mark skipped);
    any problem raises ``error`` with a one-line message naming the file
    (as ``label``, when given), the file's ``what`` (a missing name, a directory), what it ``holds``
    (an empty one) and the JSON path from ``root`` of text that is not
    JSON."""
    name = str(path)
    from_stdin = stdin and name == "-"
    if not name:  # (Path("") is the current directory)
        hint = "; '-' is standard input" if stdin else ""
        raise error(f"the {what} needs a name (got an empty one{hint})")
    if from_stdin and sys.stdin is None:  # (started with it closed: <&-)
        raise error(f"standard input is closed; name the {what}, or pipe the {what.removesuffix(' file')} to '-'")
    source = "<stdin>" if from_stdin else name
    shown = source if label is None else label
    try:
        data = sys.stdin.buffer.read() if from_stdin else Path(path).read_bytes()
    except OSError as err:
        raise error(unreadable(shown, err, what)) from None
    text = _text(data, shown, holds, error)
    try:
        return loads(text, frozen=False, path=root), source
    except LosslessJsonError as err:
        where = "" if err.path == root else f" at {err.path}"
        raise error(f"{shown}: not valid JSON{where}: {err.problem}") from None


def unreadable(shown: str, err: OSError, what: str, fix: str = "") -> str:
    """The one-line message of a file the command could not read (``err``,
    from opening or reading it): ``shown`` names the file, ``what`` says
    what it should be (a directory is not a ``batch file``), and ``fix``
    (``"; name the log ..."``) follows a missing file or a directory."""
    if isinstance(err, FileNotFoundError):
        return f"{shown}: no such file{fix}"
    if isinstance(err, IsADirectoryError):
        return f"{shown}: is a directory, not a {what}{fix}"
    return f"{shown}: cannot read: {err.strerror or err}"


def _text(data: bytes, source: str, holds: str, error: type[Exception]) -> str:
    """The file's JSON text: UTF-8 (RFC 8259), a leading byte order mark
    skipped (as editors on Windows write one), not empty."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise error(f"{source}: UTF-16 text, not UTF-8; save it as UTF-8")
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise error(
            f"{source}: not UTF-8 text (byte 0x{data[err.start]:02x} on line {line}); save it as UTF-8"
        ) from None
    if not text.strip():
        raise error(f"{source}: empty; it should hold {holds}, as JSON")
    return text


def parse_batch(data: Any, source: str = "batch") -> Batch:
    """The calls of a parsed JSON document in any accepted shape."""
    parser = _Parser(source)
    calls, shape = parser.document(data)
    if not calls:
        raise BatchFileError(f"{source}: no tool calls found (in the {_SHAPE_NAMES[shape]} shape)")
    seen: dict[str, str] = {}
    for call, where in zip(calls, parser.places, strict=True):
        if call.id in seen:
            raise BatchFileError(
                f"{source}: duplicate call id {_quoted(call.id)} ({seen[call.id]} and {where}): "
                "each result is paired with its call by id; give each call an id of its own"
            )
        seen[call.id] = where
    return Batch(tuple(calls), shape)


_SHAPE_NAMES: Final[dict[BatchShape, str]] = {
    "dsh": "dsh-actors",
    "openai": "OpenAI tool_calls",
    "openai-responses": "OpenAI Responses",
    "anthropic": "Anthropic tool_use",
}


class _Parser:
    """One document's parse; ``places`` holds each call's JSON path."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.places: list[str] = []

    def fail(self, where: str, problem: str) -> BatchFileError:
        return BatchFileError(f"{self.source}: {where}: {problem}")

    def unknown(self, what: str) -> BatchFileError:
        return BatchFileError(f"{self.source}: unknown batch shape ({what}); accepted: {ACCEPTED_SHAPES}")

    # -- documents ----------------------------------------------------------

    def document(self, data: Any) -> tuple[list[ToolCall], BatchShape]:
        if isinstance(data, Mapping):
            return self.mapping(data, "batch")
        if isinstance(data, list):
            return self.sequence(data, "batch")
        raise self.unknown(f"the document is {_kind(data)}")

    def mapping(self, data: Mapping[str, Any], where: str) -> tuple[list[ToolCall], BatchShape]:
        if "calls" in data:
            return self.ours(self.list_at(data, "calls", where), f"{where}.calls"), "dsh"
        if "choices" in data:
            return self.provider(openai._calls, data, where), "openai"
        if "tool_calls" in data:
            if data["tool_calls"] is None:
                raise self.fail(where, '"tool_calls" is null: no tool calls')
            return self.provider(openai._calls, data, where), "openai"
        if isinstance(data.get("content"), list) and (data.get("role") == "assistant" or data.get("type") == "message"):
            return self.provider(anthropic._calls, data, where), "anthropic"
        if isinstance(data.get("output"), list):
            return self.provider(openai_responses._calls, data, where), "openai-responses"
        if data.get("role") == "assistant":
            raise self.fail(where, 'an assistant message without "tool_calls" or a "content" list: no tool calls')
        keys = ", ".join(repr(k) for k in list(data)[:6]) or "no keys"
        raise self.unknown(f"an object with {keys}")

    def sequence(self, items: list[Any], where: str) -> tuple[list[ToolCall], BatchShape]:
        if not items:
            raise BatchFileError(f"{self.source}: no tool calls found (the list is empty)")
        first = items[0]
        if not isinstance(first, Mapping):
            raise self.unknown(f"a list whose first item is {_kind(first)}")
        kind = first.get("type")
        if "role" in first:
            return self.conversation(items, where)
        if "function" in first:
            return self.provider(openai._calls, items, where), "openai"
        if kind == "function_call" or kind in _SKIPPED_ITEMS:
            return self.provider(openai_responses._calls, items, where), "openai-responses"
        if kind == "tool_use" or kind in _SKIPPED_BLOCKS:
            return self.provider(anthropic._calls, items, where), "anthropic"
        if "name" in first and kind is None:
            return self.ours(items, where), "dsh"
        keys = ", ".join(repr(k) for k in list(first)[:6]) or "no keys"
        raise self.unknown(f"a list of objects with {keys}")

    def conversation(self, messages: list[Any], where: str) -> tuple[list[ToolCall], BatchShape]:
        for index in range(len(messages) - 1, -1, -1):
            message = messages[index]
            if isinstance(message, Mapping) and message.get("role") == "assistant":
                return self.mapping(message, f"{where}[{index}]")
        raise self.fail(where, "a list of messages without an assistant message: no tool calls")

    # -- one family each ------------------------------------------------------

    def ours(self, items: list[Any], where: str) -> list[ToolCall]:
        calls = []
        for index in range(len(items)):
            at = f"{where}[{index}]"
            call = self.object_at(items, index, where)
            extra = sorted(set(call) - _OURS_KEYS)
            if extra:
                raise self.fail(at, f'unknown key {extra[0]!r} (a call has "id", "name" and "arguments")')
            call_id = self.text(call, "id", at) if "id" in call else f"c{index + 1}"
            calls.append(self.call(call_id, self.text(call, "name", at), call.get("arguments", ""), at, "arguments"))
        return calls

    def provider(self, read: Callable[[Any, str], tuple[ToolCall, ...]], data: Any, where: str) -> list[ToolCall]:
        """The calls one of :mod:`dsh_actors.providers` reads from ``data``."""
        try:
            calls = read(data, where)
        except ProviderFormatError as err:
            raise BatchFileError(f"{self.source}: {err}") from None
        self.places.extend(where for _ in calls)
        return list(calls)

    # -- fields ----------------------------------------------------------------

    def call(self, call_id: str, name: str, arguments: Any, at: str, key: str) -> ToolCall:
        if arguments is None:
            arguments = ""
        if not isinstance(arguments, (str, Mapping)):
            raise self.fail(f"{at}.{key}", f"must be an object or JSON text, got {_kind(arguments)}")
        self.places.append(at)
        return ToolCall(id=call_id, name=name, arguments=arguments)

    def text(self, data: Mapping[str, Any], key: str, at: str) -> str:
        value = data.get(key)
        if key not in data:
            raise self.fail(at, f"missing {key!r}")
        if not isinstance(value, str) or not value:
            raise self.fail(f"{at}.{key}", f"must be a non-empty string, got {_kind(value)}")
        return value

    def list_at(self, data: Mapping[str, Any], key: str, where: str) -> list[Any]:
        value = data[key]
        if not isinstance(value, list):
            raise self.fail(f"{where}.{key}", f"must be a list, got {_kind(value)}")
        return value

    def object_at(self, items: Sequence[Any], index: int, where: str) -> Mapping[str, Any]:
        item = items[index]
        if not isinstance(item, Mapping):
            raise self.fail(f"{where}[{index}]", f"must be an object, got {_kind(item)}")
        return item
