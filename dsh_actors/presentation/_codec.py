"""The record machinery behind every card: field codecs and the
:class:`Record` and :class:`Card` bases.

Each record declares its fields once, as (name, codec) pairs; one codec
checks a Python value (construction), encodes it (``to_json``) and decodes
it (``from_json``), so the three can never disagree about a field. The
records and cards themselves are in ``_cards.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, fields
from typing import Any, ClassVar, Final, Self

from ..errors import LosslessJsonError, safe_str
from ..json import materialize, thaw
from ..model import check_content, content_from_json, content_to_json

__all__ = [
    "BOOL",
    "CONTENT",
    "COUNT",
    "LINE",
    "OPT_STR",
    "STR",
    "BoolCodec",
    "Card",
    "Codec",
    "ContentCodec",
    "IntCodec",
    "JsonCodec",
    "OneOfCodec",
    "Record",
    "RecordsCodec",
    "StrCodec",
    "StrsCodec",
    "type_name",
]


def type_name(value: object) -> str:
    return type(value).__qualname__


class Codec:
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


class StrCodec(Codec):
    __slots__ = ()

    def check(self, value: Any, path: str) -> Any:
        if type(value) is not str:
            raise LosslessJsonError(path, f"expected a str, got {type_name(value)}")
        return _lossless(value, path)


class BoolCodec(Codec):
    __slots__ = ()

    def check(self, value: Any, path: str) -> Any:
        if type(value) is not bool:
            raise LosslessJsonError(path, f"expected a bool, got {type_name(value)}")
        return value


class IntCodec(Codec):
    """An ``int`` (never a ``bool``) of at least ``minimum``, when given."""

    __slots__ = ("minimum",)

    def __init__(self, optional: bool = False, minimum: int | None = None) -> None:
        super().__init__(optional)
        self.minimum = minimum

    def check(self, value: Any, path: str) -> Any:
        if type(value) is not int:
            raise LosslessJsonError(path, f"expected an int, got {type_name(value)}")
        if self.minimum is not None and value < self.minimum:
            raise LosslessJsonError(path, f"must be at least {self.minimum} (got {value})")
        return _lossless(value, path)


class OneOfCodec(Codec):
    """A str from a closed vocabulary."""

    __slots__ = ("allowed",)

    def __init__(self, allowed: frozenset[str], optional: bool = False) -> None:
        super().__init__(optional)
        self.allowed = allowed

    def check(self, value: Any, path: str) -> Any:
        if type(value) is not str or value not in self.allowed:
            shown = ", ".join(repr(a) for a in sorted(self.allowed))
            got = _shown(value) if type(value) is str else type_name(value)
            raise LosslessJsonError(path, f"must be one of {shown} (got {got})")
        return value


class JsonCodec(Codec):
    """Any lossless JSON value, kept deep-frozen."""

    __slots__ = ()

    def check(self, value: Any, path: str) -> Any:
        return materialize(value, path)

    def encode(self, value: Any) -> Any:
        return thaw(value)


class ContentCodec(Codec):
    """A tuple of content blocks (JSON: their durable form)."""

    __slots__ = ()

    def check(self, value: Any, path: str) -> Any:
        return check_content(value, path)

    def encode(self, value: Any) -> Any:
        return content_to_json(value)

    def decode(self, value: Any, path: str) -> Any:
        return content_from_json(value, path)


class StrsCodec(Codec):
    """A tuple of str."""

    __slots__ = ()

    def check(self, value: Any, path: str) -> Any:
        items = _as_sequence(value, path)
        for i, item in enumerate(items):
            if type(item) is not str:
                raise LosslessJsonError(f"{path}[{i}]", f"expected a str, got {type_name(item)}")
            _lossless(item, f"{path}[{i}]")
        return items

    def encode(self, value: Any) -> Any:
        return list(value)


class RecordsCodec(Codec):
    """A tuple of one record class (JSON: a list of objects)."""

    __slots__ = ("cls",)

    def __init__(self, cls: type[Record]) -> None:
        super().__init__(False)
        self.cls = cls

    def check(self, value: Any, path: str) -> Any:
        items = _as_sequence(value, path)
        for i, item in enumerate(items):
            if type(item) is not self.cls:
                raise LosslessJsonError(f"{path}[{i}]", f"expected a {self.cls.__qualname__}, got {type_name(item)}")
        return items

    def encode(self, value: Any) -> Any:
        return [item.to_json() for item in value]

    def decode(self, value: Any, path: str) -> Any:
        if not isinstance(value, (list, tuple)):
            raise LosslessJsonError(path, f"expected a list, got {type_name(value)}")
        return tuple(self.cls._decode(item, f"{path}[{i}]") for i, item in enumerate(value))


def _lossless(value: Any, path: str) -> Any:
    """``value`` (an exact str or int) if it is lossless JSON, so a card that
    exists can always be written (no lone surrogate, no int past 64 bits)."""
    materialize(value, path)
    return value


def _shown(text: str, limit: int = 60) -> str:
    """``text`` quoted for a message, cut to about ``limit`` characters."""
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def _as_sequence(value: Any, path: str) -> tuple[Any, ...]:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (list, tuple)):
        raise LosslessJsonError(path, f"expected a list or tuple, got {type_name(value)}")
    return tuple(value)


STR: Final = StrCodec()
OPT_STR: Final = StrCodec(optional=True)
BOOL: Final = BoolCodec()
CONTENT: Final = ContentCodec(optional=True)
LINE: Final = IntCodec(minimum=1)
COUNT: Final = IntCodec(minimum=0)


class Record:
    """Shared behaviour of every presentation record: checks at
    construction, ``to_json`` and the JSON decoder, all driven by the
    class's ``_codecs`` table."""

    __slots__ = ()
    _codecs: ClassVar[tuple[tuple[str, Codec], ...]] = ()

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
            raise LosslessJsonError(path, f"expected an object, got {type_name(data)}")
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


class Card(Record):
    """A card: a record with a ``card`` tag, read back through its family's
    :meth:`from_json` (``ToolCallView`` or ``ToolResultView``)."""

    __slots__ = ()
    card: ClassVar[str]
    _family: ClassVar[str]
    _cards: ClassVar[Mapping[str, type[Card]]]

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
            raise LosslessJsonError(path, f"expected an object, got {type_name(data)}")
        if "card" not in data:
            raise LosslessJsonError(path, f"missing field 'card' for {cls._family}")
        tag = data["card"]
        accepted = {t: c for t, c in cls._cards.items() if issubclass(c, cls)}
        target = accepted.get(tag) if type(tag) is str else None
        if target is None:
            shown = ", ".join(repr(t) for t in accepted)
            raise LosslessJsonError(f"{path}.card", f"unknown {cls._family} card {safe_str(tag)!r} (expected {shown})")
        view: Self = target._decode(data, path, skip=frozenset({"card"}))
        return view
