"""The cards and the records they are made of: the call cards
(:class:`ToolCallView` and its subclasses), the result cards
(:class:`ToolResultView` and its subclasses), the file, search and web
records inside them, and :data:`ToolCallKind`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Final, Literal, TypeAlias, get_args

from ..errors import LosslessJsonError
from ..model import ContentBlock
from ._codec import (
    BOOL,
    CONTENT,
    COUNT,
    LINE,
    OPT_STR,
    STR,
    Card,
    Codec,
    IntCodec,
    JsonCodec,
    OneOfCodec,
    Record,
    RecordsCodec,
    StrsCodec,
)

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
    "ReadFileLine",
    "ReadResultView",
    "SearchFileMatches",
    "SearchMatchLine",
    "SearchResultView",
    "SearchShape",
    "TerminalCallView",
    "TerminalResultView",
    "ToolCallKind",
    "ToolCallView",
    "ToolResultView",
    "WebKind",
    "WebResultView",
    "WebSource",
]

ToolCallKind: TypeAlias = Literal["read", "edit", "delete", "move", "search", "execute", "fetch", "other"]
"""The icon a generic call card shows."""

SearchShape: TypeAlias = Literal["matches", "paths"]
WebKind: TypeAlias = Literal["search", "fetch"]

_CALL_KINDS: Final = frozenset(get_args(ToolCallKind))
_SEARCH_SHAPES: Final = frozenset(get_args(SearchShape))
_WEB_KINDS: Final = frozenset(get_args(WebKind))


# --------------------------------------------------------------------------
# Shared file vocabulary
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FileLocation(Record):
    """A file a call reads or modifies (for editor follow-along); ``line``
    is 1-based."""

    path: str
    line: int | None = None

    _codecs: ClassVar[tuple[tuple[str, Codec], ...]] = (("path", STR), ("line", IntCodec(True, 1)))


@dataclass(frozen=True, slots=True)
class FileDiff(Record):
    """One file's change: ``old_text`` is ``None`` for a new file."""

    path: str
    old_text: str | None
    new_text: str

    _codecs: ClassVar[tuple[tuple[str, Codec], ...]] = (
        ("path", STR),
        ("old_text", OPT_STR),
        ("new_text", STR),
    )


@dataclass(frozen=True, slots=True)
class ReadFileLine(Record):
    """One 1-based numbered line of a read window."""

    number: int
    text: str

    _codecs: ClassVar[tuple[tuple[str, Codec], ...]] = (("number", LINE), ("text", STR))


@dataclass(frozen=True, slots=True)
class SearchMatchLine(Record):
    """One matching line of a search: its 1-based ``line`` number and text."""

    line: int
    text: str

    _codecs: ClassVar[tuple[tuple[str, Codec], ...]] = (("line", LINE), ("text", STR))


@dataclass(frozen=True, slots=True)
class SearchFileMatches(Record):
    """The matches of a search within one file, in line order."""

    path: str
    lines: tuple[SearchMatchLine, ...]

    _codecs: ClassVar[tuple[tuple[str, Codec], ...]] = (
        ("path", STR),
        ("lines", RecordsCodec(SearchMatchLine)),
    )


@dataclass(frozen=True, slots=True)
class WebSource(Record):
    """One source of a web search: where it is and what it says."""

    title: str
    url: str
    snippet: str | None = None

    _codecs: ClassVar[tuple[tuple[str, Codec], ...]] = (
        ("title", STR),
        ("url", STR),
        ("snippet", OPT_STR),
    )


# --------------------------------------------------------------------------
# Cards
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ToolCallView(Card):
    """The pending state of a call: a card-tagged render intent. The cards
    are :class:`GenericCallView`, :class:`TerminalCallView` and
    :class:`DiffCallView`; ``isinstance(v, ToolCallView)`` holds for each.
    ``ToolCallView.from_json(d)`` reads any of them back."""

    _family: ClassVar[str] = "call view"


@dataclass(frozen=True, slots=True)
class ToolResultView(Card):
    """The completed state of a call; replaces the pending view. The cards
    are :class:`GenericResultView`, :class:`TerminalResultView`,
    :class:`DiffResultView`, :class:`SearchResultView`,
    :class:`ReadResultView` and :class:`WebResultView`.
    ``ToolResultView.from_json(d)`` reads any of them back."""

    _family: ClassVar[str] = "result view"


@dataclass(frozen=True, slots=True)
class GenericCallView(ToolCallView):
    """The default call card: a ``title``, an optional icon ``kind``, the
    call's ``raw_input`` (lossless JSON, kept deep-frozen; ``None``: none
    shown), optional
    ``content`` blocks, and the files the call touches (``locations``)."""

    card: ClassVar[Literal["generic"]] = "generic"
    title: str
    kind: ToolCallKind | None = None
    raw_input: Any = None
    content: tuple[ContentBlock, ...] | None = None
    locations: tuple[FileLocation, ...] = ()

    _codecs: ClassVar[tuple[tuple[str, Codec], ...]] = (
        ("title", STR),
        ("kind", OneOfCodec(_CALL_KINDS, optional=True)),
        ("raw_input", JsonCodec(optional=True)),
        ("content", CONTENT),
        ("locations", RecordsCodec(FileLocation)),
    )


@dataclass(frozen=True, slots=True)
class TerminalCallView(ToolCallView):
    """A shell command about to run: ``title`` (usually the command), an
    optional human ``description`` and working directory ``cwd``."""

    card: ClassVar[Literal["terminal"]] = "terminal"
    title: str
    description: str | None = None
    cwd: str | None = None

    _codecs: ClassVar[tuple[tuple[str, Codec], ...]] = (
        ("title", STR),
        ("description", OPT_STR),
        ("cwd", OPT_STR),
    )


@dataclass(frozen=True, slots=True)
class DiffCallView(ToolCallView):
    """A file create/modify about to happen, shown as inline ``diffs``."""

    card: ClassVar[Literal["diff"]] = "diff"
    title: str
    diffs: tuple[FileDiff, ...]
    locations: tuple[FileLocation, ...] = ()

    _codecs: ClassVar[tuple[tuple[str, Codec], ...]] = (
        ("title", STR),
        ("diffs", RecordsCodec(FileDiff)),
        ("locations", RecordsCodec(FileLocation)),
    )


@dataclass(frozen=True, slots=True)
class GenericResultView(ToolResultView):
    """The default result card: an optional ``title`` (``None`` keeps the
    pending title) and ``content`` blocks (``None``: the raw result content)."""

    card: ClassVar[Literal["generic"]] = "generic"
    title: str | None = None
    content: tuple[ContentBlock, ...] | None = None

    _codecs: ClassVar[tuple[tuple[str, Codec], ...]] = (("title", OPT_STR), ("content", CONTENT))


@dataclass(frozen=True, slots=True)
class TerminalResultView(ToolResultView):
    """A finished run: captured ``output``, ``exit_code`` and the ``signal``
    that ended it (``"SIGKILL"``), when known."""

    card: ClassVar[Literal["terminal"]] = "terminal"
    title: str | None = None
    output: str | None = None
    exit_code: int | None = None
    signal: str | None = None

    _codecs: ClassVar[tuple[tuple[str, Codec], ...]] = (
        ("title", OPT_STR),
        ("output", OPT_STR),
        ("exit_code", IntCodec(optional=True)),
        ("signal", OPT_STR),
    )


@dataclass(frozen=True, slots=True)
class DiffResultView(ToolResultView):
    """A completed file mutation: the change to show (the applied hunks, or a
    whole-file diff when there is no before-image)."""

    card: ClassVar[Literal["diff"]] = "diff"
    title: str | None = None
    diffs: tuple[FileDiff, ...] = ()

    _codecs: ClassVar[tuple[tuple[str, Codec], ...]] = (("title", OPT_STR), ("diffs", RecordsCodec(FileDiff)))


@dataclass(frozen=True, slots=True)
class SearchResultView(ToolResultView):
    """A completed discovery search. ``shape="matches"`` (grep) carries
    ``matches`` grouped by file; ``shape="paths"`` (glob) a flat ``paths``
    list. ``truncated`` and ``total`` say whether the inline result was
    capped, so a UI never shows a partial result as complete. The view has
    no result text: a UI without a search card shows the raw content."""

    card: ClassVar[Literal["search"]] = "search"
    shape: SearchShape
    truncated: bool
    total: int
    title: str | None = None
    matches: tuple[SearchFileMatches, ...] = ()
    paths: tuple[str, ...] = ()

    _codecs: ClassVar[tuple[tuple[str, Codec], ...]] = (
        ("shape", OneOfCodec(_SEARCH_SHAPES)),
        ("truncated", BOOL),
        ("total", COUNT),
        ("title", OPT_STR),
        ("matches", RecordsCodec(SearchFileMatches)),
        ("paths", StrsCodec()),
    )

    def _check_consistency(self, where: str) -> None:
        if self.shape == "matches" and self.paths:
            raise LosslessJsonError(f"{where}.paths", 'must be empty when shape is "matches"')
        if self.shape == "paths" and self.matches:
            raise LosslessJsonError(f"{where}.matches", 'must be empty when shape is "paths"')


@dataclass(frozen=True, slots=True)
class ReadResultView(ToolResultView):
    """A completed file read: a line-numbered window of ``path``.
    ``offset`` is the 1-based first line the window requested (kept even
    when ``lines`` is empty), ``total_lines`` the file's length, ``lang`` a
    language hint, and ``content`` the envelope-stripped text a UI without
    read support shows instead."""

    card: ClassVar[Literal["read"]] = "read"
    path: str
    offset: int
    lines: tuple[ReadFileLine, ...]
    total_lines: int
    title: str | None = None
    lang: str | None = None
    content: str | None = None

    _codecs: ClassVar[tuple[tuple[str, Codec], ...]] = (
        ("path", STR),
        ("offset", LINE),
        ("lines", RecordsCodec(ReadFileLine)),
        ("total_lines", COUNT),
        ("title", OPT_STR),
        ("lang", OPT_STR),
        ("content", OPT_STR),
    )


@dataclass(frozen=True, slots=True)
class WebResultView(ToolResultView):
    """A completed web retrieval. ``kind="search"`` carries ``sources``, an
    optional ``answer`` and ``truncated``; ``kind="fetch"`` carries ``url``,
    ``status_code`` and ``truncated``. The body is not duplicated here: a UI
    without a web card shows the raw content."""

    card: ClassVar[Literal["web"]] = "web"
    kind: WebKind
    title: str | None = None
    sources: tuple[WebSource, ...] = ()
    answer: str | None = None
    truncated: bool = False
    url: str | None = None
    status_code: int | None = None

    _codecs: ClassVar[tuple[tuple[str, Codec], ...]] = (
        ("kind", OneOfCodec(_WEB_KINDS)),
        ("title", OPT_STR),
        ("sources", RecordsCodec(WebSource)),
        ("answer", OPT_STR),
        ("truncated", BOOL),
        ("url", OPT_STR),
        ("status_code", IntCodec(optional=True)),
    )

    def _check_consistency(self, where: str) -> None:
        if self.kind == "search":
            for name in ("url", "status_code"):
                if getattr(self, name) is not None:
                    raise LosslessJsonError(f"{where}.{name}", 'is only for kind "fetch"')
        else:
            if self.sources:
                raise LosslessJsonError(f"{where}.sources", 'is only for kind "search"')
            if self.answer is not None:
                raise LosslessJsonError(f"{where}.answer", 'is only for kind "search"')


CALL_CARD_CLASSES: Final[tuple[type[ToolCallView], ...]] = (GenericCallView, TerminalCallView, DiffCallView)
RESULT_CARD_CLASSES: Final[tuple[type[ToolResultView], ...]] = (
    GenericResultView,
    TerminalResultView,
    DiffResultView,
    SearchResultView,
    ReadResultView,
    WebResultView,
)
CARD_CLASSES: Final[tuple[type[Card], ...]] = (*CALL_CARD_CLASSES, *RESULT_CARD_CLASSES)
"""Every card class, call cards first."""

ToolCallView._cards = {cls.card: cls for cls in CALL_CARD_CLASSES}
ToolResultView._cards = {cls.card: cls for cls in RESULT_CARD_CLASSES}
