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

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from typing import Any, ClassVar, Final, Literal, Self, TypeAlias, Union, get_args

from .errors import LosslessJsonError, safe_str
from .json import materialize, thaw
from .model import (
    ContentBlock,
    ToolExecutionFailure,
    ToolExecutionSuccess,
    ToolFailure,
    check_content,
    content_from_json,
    content_to_json,
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

ToolCallKind: TypeAlias = Literal["read", "edit", "delete", "move", "search", "execute", "fetch", "other"]
"""The icon a generic call card shows."""

SearchShape: TypeAlias = Literal["matches", "paths"]
WebKind: TypeAlias = Literal["search", "fetch"]

_CALL_KINDS: Final = frozenset(get_args(ToolCallKind))
_SEARCH_SHAPES: Final = frozenset(get_args(SearchShape))
_WEB_KINDS: Final = frozenset(get_args(WebKind))


# --------------------------------------------------------------------------
# Field checks and codecs
#
# Each record declares its fields once, as (name, codec) pairs; one codec
# checks a Python value (construction), encodes it (to_json) and decodes it
# (from_json), so the three can never disagree about a field.
# --------------------------------------------------------------------------


def _type_name(value: object) -> str:
    return type(value).__qualname__


class _Codec:
    """How one field is checked, written to JSON and read back. ``optional``
    fields accept ``None`` (and are omitted from JSON when ``None``)."""

    __slots__ = ("optional",)

    def __init__(self, optional: bool = False) -> None:
        self.optional = optional

    def check(self, value: Any, path: str) -> Any:
        """Return the normalised value or raise :class:`LosslessJsonError`."""
        raise NotImplementedError

    def encode(self, value: Any) -> Any:
        return value

    def decode(self, value: Any, path: str) -> Any:
        return self.check(value, path)


class _Str(_Codec):
    __slots__ = ()

    def check(self, value: Any, path: str) -> Any:
        if type(value) is not str:
            raise LosslessJsonError(path, f"expected a str, got {_type_name(value)}")
        return value


class _Bool(_Codec):
    __slots__ = ()

    def check(self, value: Any, path: str) -> Any:
        if type(value) is not bool:
            raise LosslessJsonError(path, f"expected a bool, got {_type_name(value)}")
        return value


class _Int(_Codec):
    """An ``int`` (never a ``bool``) of at least ``minimum``, when given."""

    __slots__ = ("minimum",)

    def __init__(self, optional: bool = False, minimum: int | None = None) -> None:
        super().__init__(optional)
        self.minimum = minimum

    def check(self, value: Any, path: str) -> Any:
        if type(value) is not int:
            raise LosslessJsonError(path, f"expected an int, got {_type_name(value)}")
        if self.minimum is not None and value < self.minimum:
            raise LosslessJsonError(path, f"must be at least {self.minimum} (got {value})")
        return value


class _OneOf(_Codec):
    """A str from a closed vocabulary."""

    __slots__ = ("allowed",)

    def __init__(self, allowed: frozenset[str], optional: bool = False) -> None:
        super().__init__(optional)
        self.allowed = allowed

    def check(self, value: Any, path: str) -> Any:
        if type(value) is not str or value not in self.allowed:
            shown = ", ".join(repr(a) for a in sorted(self.allowed))
            raise LosslessJsonError(path, f"must be one of {shown} (got {value!r})")
        return value


class _Json(_Codec):
    """Any lossless JSON value, kept deep-frozen."""

    __slots__ = ()

    def check(self, value: Any, path: str) -> Any:
        return materialize(value, path)

    def encode(self, value: Any) -> Any:
        return thaw(value)


class _Content(_Codec):
    """A tuple of content blocks (JSON: their durable form)."""

    __slots__ = ()

    def check(self, value: Any, path: str) -> Any:
        return check_content(value, path)

    def encode(self, value: Any) -> Any:
        return content_to_json(value)

    def decode(self, value: Any, path: str) -> Any:
        return content_from_json(value, path)


class _Strs(_Codec):
    """A tuple of str."""

    __slots__ = ()

    def check(self, value: Any, path: str) -> Any:
        items = _as_sequence(value, path)
        for i, item in enumerate(items):
            if type(item) is not str:
                raise LosslessJsonError(f"{path}[{i}]", f"expected a str, got {_type_name(item)}")
        return items

    def encode(self, value: Any) -> Any:
        return list(value)


class _Records(_Codec):
    """A tuple of one record class (JSON: a list of objects)."""

    __slots__ = ("cls",)

    def __init__(self, cls: type[_Record]) -> None:
        super().__init__(False)
        self.cls = cls

    def check(self, value: Any, path: str) -> Any:
        items = _as_sequence(value, path)
        for i, item in enumerate(items):
            if type(item) is not self.cls:
                raise LosslessJsonError(
                    f"{path}[{i}]", f"expected a {self.cls.__qualname__}, got {_type_name(item)}"
                )
        return items

    def encode(self, value: Any) -> Any:
        return [item.to_json() for item in value]

    def decode(self, value: Any, path: str) -> Any:
        if not isinstance(value, (list, tuple)):
            raise LosslessJsonError(path, f"expected a list, got {_type_name(value)}")
        return tuple(self.cls._decode(item, f"{path}[{i}]") for i, item in enumerate(value))


def _as_sequence(value: Any, path: str) -> tuple[Any, ...]:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (list, tuple)):
        raise LosslessJsonError(path, f"expected a list or tuple, got {_type_name(value)}")
    return tuple(value)


_STR: Final = _Str()
_OPT_STR: Final = _Str(optional=True)
_BOOL: Final = _Bool()
_CONTENT: Final = _Content(optional=True)
_LINE: Final = _Int(minimum=1)
_COUNT: Final = _Int(minimum=0)


class _Record:
    """Shared behaviour of every presentation record: checks at
    construction, ``to_json`` and the JSON decoder, all driven by the
    class's ``_codecs`` table."""

    __slots__ = ()
    _codecs: ClassVar[tuple[tuple[str, _Codec], ...]] = ()

    def __post_init__(self) -> None:
        cls = type(self).__qualname__
        for name, codec in self._codecs:
            value = getattr(self, name)
            if value is None and codec.optional:
                continue
            object.__setattr__(self, name, codec.check(value, f"{cls}.{name}"))
        self._check_consistency(cls)

    def _check_consistency(self, where: str) -> None:
        """Cross-field rules; ``where`` prefixes the path of a violation."""

    def _json_fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, codec in self._codecs:
            value = getattr(self, name)
            if value is not None:
                out[name] = codec.encode(value)
        return out

    def to_json(self) -> dict[str, Any]:
        """Plain JSON: snake_case keys, ``None`` fields omitted."""
        return self._json_fields()

    @classmethod
    def from_json(cls, data: object, path: str = "value") -> Self:
        """Read the record back from :meth:`to_json`'s form; raises
        :class:`LosslessJsonError` naming the bad field's path."""
        record: Self = cls._decode(data, path)
        return record

    @classmethod
    def _decode(cls, data: object, path: str, skip: frozenset[str] = frozenset()) -> Any:
        if not isinstance(data, Mapping):
            raise LosslessJsonError(path, f"expected an object, got {_type_name(data)}")
        names = {name for name, _ in cls._codecs}
        for key in data:
            if key not in names and key not in skip:
                raise LosslessJsonError(path, f"unknown field {safe_str(key)!r} for {cls.__qualname__}")
        defaults = {
            f.name
            for f in fields(cls)  # type: ignore[arg-type]
            if f.default is not MISSING or f.default_factory is not MISSING
        }
        kwargs: dict[str, Any] = {}
        for name, codec in cls._codecs:
            if name in data:
                value = data[name]
                kwargs[name] = None if value is None and codec.optional else codec.decode(value, f"{path}.{name}")
            elif codec.optional:
                kwargs[name] = None  # None fields are omitted from JSON
            elif name not in defaults:
                raise LosslessJsonError(path, f"missing field {name!r} for {cls.__qualname__}")
        return cls(**kwargs)


# --------------------------------------------------------------------------
# Shared file vocabulary
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FileLocation(_Record):
    """A file a call reads or modifies (for editor follow-along); ``line``
    is 1-based."""

    path: str
    line: int | None = None

    _codecs: ClassVar[tuple[tuple[str, _Codec], ...]] = (("path", _STR), ("line", _Int(True, 1)))



@dataclass(frozen=True, slots=True)
class FileDiff(_Record):
    """One file's change: ``old_text`` is ``None`` for a new file."""

    path: str
    old_text: str | None
    new_text: str

    _codecs: ClassVar[tuple[tuple[str, _Codec], ...]] = (
        ("path", _STR),
        ("old_text", _OPT_STR),
        ("new_text", _STR),
    )



@dataclass(frozen=True, slots=True)
class ReadFileLine(_Record):
    """One 1-based numbered line of a read window."""

    number: int
    text: str

    _codecs: ClassVar[tuple[tuple[str, _Codec], ...]] = (("number", _LINE), ("text", _STR))



@dataclass(frozen=True, slots=True)
class SearchMatchLine(_Record):
    """One matching line of a search: its 1-based ``line`` number and text."""

    line: int
    text: str

    _codecs: ClassVar[tuple[tuple[str, _Codec], ...]] = (("line", _LINE), ("text", _STR))



@dataclass(frozen=True, slots=True)
class SearchFileMatches(_Record):
    """The matches of a search within one file, in line order."""

    path: str
    lines: tuple[SearchMatchLine, ...]

    _codecs: ClassVar[tuple[tuple[str, _Codec], ...]] = (
        ("path", _STR),
        ("lines", _Records(SearchMatchLine)),
    )



@dataclass(frozen=True, slots=True)
class WebSource(_Record):
    """One source of a web search: where it is and what it says."""

    title: str
    url: str
    snippet: str | None = None

    _codecs: ClassVar[tuple[tuple[str, _Codec], ...]] = (
        ("title", _STR),
        ("url", _STR),
        ("snippet", _OPT_STR),
    )



# --------------------------------------------------------------------------
# Cards
# --------------------------------------------------------------------------


class _Card(_Record):
    """A card: a record with a ``card`` tag, read back through its family's
    :meth:`from_json` (``ToolCallView`` or ``ToolResultView``)."""

    __slots__ = ()
    card: ClassVar[str]
    _family: ClassVar[str]
    _cards: ClassVar[Mapping[str, type[_Card]]]

    def to_json(self) -> dict[str, Any]:
        """Plain JSON with the ``card`` tag first; ``None`` fields omitted."""
        out: dict[str, Any] = {"card": self.card}
        out.update(self._json_fields())
        return out

    @classmethod
    def from_json(cls, data: object, path: str = "view") -> Self:
        """Read a card from its JSON form, dispatching on ``card``. On a
        family base (``ToolCallView.from_json``) any card of the family is
        accepted; on a card class, only that card."""
        if not isinstance(data, Mapping):
            raise LosslessJsonError(path, f"expected an object, got {_type_name(data)}")
        if "card" not in data:
            raise LosslessJsonError(path, f"missing field 'card' for {cls._family}")
        tag = data["card"]
        accepted = {t: c for t, c in cls._cards.items() if issubclass(c, cls)}
        target = accepted.get(tag) if type(tag) is str else None
        if target is None:
            shown = ", ".join(repr(t) for t in accepted)
            raise LosslessJsonError(
                f"{path}.card", f"unknown {cls._family} card {safe_str(tag)!r} (expected {shown})"
            )
        view: Self = target._decode(data, path, skip=frozenset({"card"}))
        return view


@dataclass(frozen=True, slots=True)
class ToolCallView(_Card):
    """The pending state of a call: a card-tagged render intent. The cards
    are :class:`GenericCallView`, :class:`TerminalCallView` and
    :class:`DiffCallView`; ``isinstance(v, ToolCallView)`` holds for each.
    ``ToolCallView.from_json(d)`` reads any of them back."""

    _family: ClassVar[str] = "call view"


@dataclass(frozen=True, slots=True)
class ToolResultView(_Card):
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

    _codecs: ClassVar[tuple[tuple[str, _Codec], ...]] = (
        ("title", _STR),
        ("kind", _OneOf(_CALL_KINDS, optional=True)),
        ("raw_input", _Json(optional=True)),
        ("content", _CONTENT),
        ("locations", _Records(FileLocation)),
    )


@dataclass(frozen=True, slots=True)
class TerminalCallView(ToolCallView):
    """A shell command about to run: ``title`` (usually the command), an
    optional human ``description`` and working directory ``cwd``."""

    card: ClassVar[Literal["terminal"]] = "terminal"
    title: str
    description: str | None = None
    cwd: str | None = None

    _codecs: ClassVar[tuple[tuple[str, _Codec], ...]] = (
        ("title", _STR),
        ("description", _OPT_STR),
        ("cwd", _OPT_STR),
    )


@dataclass(frozen=True, slots=True)
class DiffCallView(ToolCallView):
    """A file create/modify about to happen, shown as inline ``diffs``."""

    card: ClassVar[Literal["diff"]] = "diff"
    title: str
    diffs: tuple[FileDiff, ...]
    locations: tuple[FileLocation, ...] = ()

    _codecs: ClassVar[tuple[tuple[str, _Codec], ...]] = (
        ("title", _STR),
        ("diffs", _Records(FileDiff)),
        ("locations", _Records(FileLocation)),
    )


@dataclass(frozen=True, slots=True)
class GenericResultView(ToolResultView):
    """The default result card: an optional ``title`` (``None`` keeps the
    pending title) and ``content`` blocks (``None``: the raw result content)."""

    card: ClassVar[Literal["generic"]] = "generic"
    title: str | None = None
    content: tuple[ContentBlock, ...] | None = None

    _codecs: ClassVar[tuple[tuple[str, _Codec], ...]] = (("title", _OPT_STR), ("content", _CONTENT))


@dataclass(frozen=True, slots=True)
class TerminalResultView(ToolResultView):
    """A finished run: captured ``output``, ``exit_code`` and the ``signal``
    that ended it (``"SIGKILL"``), when known."""

    card: ClassVar[Literal["terminal"]] = "terminal"
    title: str | None = None
    output: str | None = None
    exit_code: int | None = None
    signal: str | None = None

    _codecs: ClassVar[tuple[tuple[str, _Codec], ...]] = (
        ("title", _OPT_STR),
        ("output", _OPT_STR),
        ("exit_code", _Int(optional=True)),
        ("signal", _OPT_STR),
    )


@dataclass(frozen=True, slots=True)
class DiffResultView(ToolResultView):
    """A completed file mutation: the change to show (the applied hunks, or a
    whole-file diff when there is no before-image)."""

    card: ClassVar[Literal["diff"]] = "diff"
    title: str | None = None
    diffs: tuple[FileDiff, ...] = ()

    _codecs: ClassVar[tuple[tuple[str, _Codec], ...]] = (("title", _OPT_STR), ("diffs", _Records(FileDiff)))


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

    _codecs: ClassVar[tuple[tuple[str, _Codec], ...]] = (
        ("shape", _OneOf(_SEARCH_SHAPES)),
        ("truncated", _BOOL),
        ("total", _COUNT),
        ("title", _OPT_STR),
        ("matches", _Records(SearchFileMatches)),
        ("paths", _Strs()),
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

    _codecs: ClassVar[tuple[tuple[str, _Codec], ...]] = (
        ("path", _STR),
        ("offset", _LINE),
        ("lines", _Records(ReadFileLine)),
        ("total_lines", _COUNT),
        ("title", _OPT_STR),
        ("lang", _OPT_STR),
        ("content", _OPT_STR),
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

    _codecs: ClassVar[tuple[tuple[str, _Codec], ...]] = (
        ("kind", _OneOf(_WEB_KINDS)),
        ("title", _OPT_STR),
        ("sources", _Records(WebSource)),
        ("answer", _OPT_STR),
        ("truncated", _BOOL),
        ("url", _OPT_STR),
        ("status_code", _Int(optional=True)),
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
CARD_CLASSES: Final[tuple[type[_Card], ...]] = (*CALL_CARD_CLASSES, *RESULT_CARD_CLASSES)
"""Every card class, call cards first."""

ToolCallView._cards = {cls.card: cls for cls in CALL_CARD_CLASSES}
ToolResultView._cards = {cls.card: cls for cls in RESULT_CARD_CLASSES}


# --------------------------------------------------------------------------
# What presenters see, and the fallbacks
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ToolResultProjection:
    """The durable projection of a result: what ``present_result`` may use.

    It holds only the fields a ``tool/result`` log event keeps (``content``,
    ``is_error``, ``error``, ``meta``; never the canonical value), so a
    replay can call presenters from the log alone. Live calls pass the real
    :class:`~dsh_actors.model.ToolExecutionSuccess` /
    :class:`~dsh_actors.model.ToolExecutionFailure`, which has the same
    attributes; a presenter that reads only these four behaves the same
    live and on replay.
    """

    content: tuple[ContentBlock, ...]
    is_error: bool
    error: ToolFailure | None = None
    meta: Any = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "content", tuple(self.content))

    @classmethod
    def of(cls, result: PresentedResult) -> ToolResultProjection:
        """The durable projection of a live result (or of a projection)."""
        return cls(content=result.content, is_error=result.is_error, error=result.error, meta=result.meta)


PresentedResult: TypeAlias = Union[ToolExecutionSuccess, ToolExecutionFailure, ToolResultProjection]
"""What ``present_result``'s second argument is: a live result or its
durable projection."""


def generic_call_view(name: str, args: Any) -> GenericCallView:
    """The fallback pending card: title = tool name, the raw arguments as
    input (left out when they are not lossless JSON). Used when a tool is
    unknown or its ``present_call`` returned ``None``."""
    try:
        raw_input = materialize(args, "args")
    except LosslessJsonError:
        raw_input = None
    return GenericCallView(title=name, raw_input=raw_input)


def generic_result_view(result: PresentedResult) -> GenericResultView:
    """The fallback completed card: no title (keep the pending one) and the
    result's raw content. Used when a tool is unknown or its
    ``present_result`` returned ``None``."""
    return GenericResultView(content=tuple(result.content))

