"""The rules of lossless JSON and how a violation reads: the limits, the
path convention (see the package docstring) and the problem text of every
:class:`~dsh_actors.errors.LosslessJsonError` the walk raises.

Nothing here calls a method of an unknown object: hostile
``__eq__``/``__hash__``/``__str__``/``__repr__`` must not turn our error into
theirs. Pure and thread-safe.
"""

from __future__ import annotations

import json as _stdlib_json
import re
from collections.abc import Iterable
from typing import Any, Final

import orjson

from ..errors import LosslessJsonError

__all__ = [
    "BIG_FLOAT",
    "MAX_INT",
    "MAX_JSON_DEPTH",
    "MAX_PATH_STEPS",
    "MIN_INT",
    "bad_value",
    "check_keys",
    "error_path",
    "join_path",
    "key_problem",
    "path_for_index",
    "path_for_key",
    "surrogate_index",
    "too_deep",
    "uncopyable",
    "value_problem",
]

MAX_JSON_DEPTH: Final = 256
"""The deepest nesting accepted: 256 containers inside one another."""

MIN_INT: Final = -(2**63)
MAX_INT: Final = 2**64 - 1
# orjson parses an integer literal outside [-2**63, 2**64-1] as a float (lossy);
# any such float has at least this magnitude.
BIG_FLOAT: Final = 9.2e18
_MAX_KEY_IN_PATH: Final = 64
_KEY_PREFIX_IN_PATH: Final = 48
# Strings longer than this are checked for surrogates a slice at a time, so
# the check never allocates more than a few MB.
_SURROGATE_CHUNK: Final = 1 << 20


# --------------------------------------------------------------------------
# Paths and problem descriptions.


def _quote_key(key: str) -> str:
    try:
        return orjson.dumps(key).decode()
    except orjson.JSONEncodeError:  # a lone surrogate: escape it, ASCII only
        return _stdlib_json.dumps(key)


def path_for_key(path: str, key: object) -> str:
    """The path of ``key`` in the dict at ``path``: ``value.name``, or
    ``value["content-type"]`` when the key is not an identifier, or
    ``value[<int key>]`` when it is not a ``str`` (a Python value that is
    not lossless JSON, such as a tool's, may have one); see the docstring of
    :mod:`dsh_actors.json` for the whole convention. Pure, thread-safe."""
    return _stepped(path, _key_step(key))


def path_for_index(path: str, index: int) -> str:
    """The path of item ``index`` of the list at ``path``: ``value[3]``."""
    return _stepped(path, _index_step(index))


def _index_step(index: int) -> str:
    return f"[{index}]"


def _key_step(key: object) -> str:
    if not isinstance(key, str):
        return f"[<{type(key).__name__} key>]"
    if len(key) > _MAX_KEY_IN_PATH:
        return f'[{_quote_key(key[:_KEY_PREFIX_IN_PATH])[:-1]}…"]'
    if key.isidentifier():
        return f".{key}"
    return f"[{_quote_key(key)}]"


MAX_PATH_STEPS: Final = 20
"""The most steps a path shows in full; a longer one shows its first and
last :data:`_PATH_ENDS` steps and how many are left out between them
(``value[0][0][0][0][0][0][0][0] … (240 more) … [0][0][0][0][0][0][0][0]``)."""
_PATH_ENDS: Final = 8
# One step as path_for_key (also "[<int key>]", for a key that is not a str)
# and path_for_index write it, and the gap of a shortened path.
_STEP: Final = re.compile(r'\.[^.\["\s…]+|\[(?:-?\d+|"(?:[^"\\]|\\.)*"|<[^>\]]*>)\]')
_GAP: Final = re.compile(r" … \((\d+) more\) … ")
_GAP_MARK: Final = " more) … "


def _stepped(path: str, step: str) -> str:
    """``path`` and one more ``step``, shortened when it is longer than
    :data:`MAX_PATH_STEPS` (the one rule of every path renderer: each steps
    through :func:`path_for_key` and :func:`path_for_index`)."""
    out = path + step
    # (Every step starts with "." or "[": fewer of them, and no gap, is short enough.)
    if out.count(".") + out.count("[") <= MAX_PATH_STEPS and _GAP_MARK not in out:
        return out
    return _shortened(out)


def _shortened(path: str) -> str:
    """``path`` (its root, then steps, maybe one gap) with the steps past the
    first and before the last :data:`_PATH_ENDS` counted in the gap; as it
    is when it has no more than :data:`MAX_PATH_STEPS` steps, or is not a
    path these functions wrote."""
    ends = [i for i in (path.find("."), path.find("[")) if i >= 0]
    if not ends:
        return path
    start = position = min(ends)
    steps: list[str] = []
    hidden = 0
    while position < len(path):
        found = _STEP.match(path, position)
        if found is None:
            found = _GAP.match(path, position)
            if found is None or hidden or len(steps) != _PATH_ENDS:
                return path  # (not written here: shown as it is)
            hidden = int(found.group(1))
        else:
            steps.append(found.group())
        position = found.end()
    if len(steps) + hidden <= MAX_PATH_STEPS:
        return path
    hidden += len(steps) - 2 * _PATH_ENDS
    return f"{path[:start]}{''.join(steps[:_PATH_ENDS])} … ({hidden} more) … {''.join(steps[-_PATH_ENDS:])}"


def join_path(root: str, keys: Iterable[object]) -> str:
    """The path of ``keys`` (each a ``str`` key or an ``int`` index; anything
    else is left out) from ``root``: what :func:`path_for_key` and
    :func:`path_for_index` make step by step, shortened once at the end."""
    steps = [
        _key_step(key) if isinstance(key, str) else _index_step(key)
        for key in keys
        if type(key) is str or type(key) is int
    ]
    return _stepped(root, "".join(steps))


def _type_name(cls: type) -> str:
    """``cls``'s qualified name, read from the type itself so that a
    metaclass cannot interfere; ``module.`` is added unless builtin or one
    of this package's (whose public names the package exports: ``ToolOutput``,
    not the module it is defined in)."""
    try:
        name = type.__dict__["__qualname__"].__get__(cls)
        module = type.__dict__["__module__"].__get__(cls)
    except Exception:  # noqa: BLE001 - any failure: fall back to a placeholder
        return "<unnamed type>"
    if type(name) is not str:
        return "<unnamed type>"
    if type(module) is str and module != "builtins" and not _is_own(module):
        return f"{module}.{name}"
    return name


_PACKAGE: Final = __name__.split(".", 1)[0]


def _is_own(module: str) -> bool:
    return module == _PACKAGE or module.startswith(_PACKAGE + ".")


def _own_problem(cls: type) -> str | None:
    """What one of this package's own types says its object is, for a
    value that holds one (its ``_NOT_JSON`` class attribute: ``UNSET is not
    a value ...``), read from the class's namespace, no hook run; None for
    any other type."""
    try:
        module = type.__dict__["__module__"].__get__(cls)
        namespace = type.__dict__["__dict__"].__get__(cls)
    except Exception:  # noqa: BLE001
        return None
    if type(module) is not str or not _is_own(module):
        return None
    words = namespace.get("_NOT_JSON")
    return words if type(words) is str else None


def _format_int(value: int) -> str:
    magnitude = -value if value < 0 else value
    bits = magnitude.bit_length()
    if bits > 1 and magnitude & (magnitude - 1) == 0:
        return f"{'-' if value < 0 else ''}2**{bits - 1}"
    if bits <= 256:
        return int.__repr__(value)
    return f"of {bits} bits"


_JSON_BASES: Final = (str, int, float, dict, list, tuple)
# Key types whose repr is computed by C code reading the value's own data.
_REPR_BASES: Final[tuple[Any, ...]] = (str, int, float, bool, type(None), bytes, complex)


def _mro(cls: type) -> tuple[type, ...]:
    """``cls.__mro__`` read from the type itself (no metaclass hook)."""
    try:
        mro = type.__dict__["__mro__"].__get__(cls)
    except Exception:  # noqa: BLE001
        return ()
    return mro if type(mro) is tuple else ()


def _first_base(cls: type, bases: tuple[Any, ...]) -> Any:
    """The first class of ``cls``'s MRO that is one of ``bases`` (compared by
    identity: a metaclass ``__eq__`` is never called)."""
    for klass in _mro(cls):
        for base in bases:
            if klass is base:
                return base
    return None


def _key_repr(key: Any) -> str | None:
    """A short repr of a dict key of a builtin type (or a subclass of one,
    through the builtin's own ``__repr__``), or None for any other type: no
    method of the key itself is ever called."""
    base = _first_base(type(key), _REPR_BASES)
    if base is None:
        return None
    try:
        # int.__add__(key, 0) is an exact int even for a hostile subclass.
        text = _format_int(int.__add__(key, 0)) if base is int else base.__repr__(key)
    except Exception:  # noqa: BLE001
        return None
    if type(text) is not str:
        return None
    return text if len(text) <= 60 else text[:57] + "..."


def key_problem(key: object) -> str:
    cls = type(key)
    shown = _key_repr(key)
    name = _type_name(cls)
    what = f"dict key {shown} ({name})" if shown else f"dict key of type {name}"
    if _first_base(cls, (str,)) is not None:
        return f"{what} is a str subclass, not an exact str (exact types only)"
    return f"{what} is not a string"


def surrogate_index(text: str) -> int:
    """The index of the first lone surrogate in ``text``, or -1."""
    if len(text) <= _SURROGATE_CHUNK:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as err:
            return err.start
        return -1
    for start in range(0, len(text), _SURROGATE_CHUNK):
        chunk = text[start : start + _SURROGATE_CHUNK]
        if not chunk.isascii():
            try:
                chunk.encode("utf-8")
            except UnicodeEncodeError as err:
                return start + err.start
    return -1


def value_problem(value: object) -> str:
    """Why ``value`` (already known not to be lossless) is rejected."""
    cls = type(value)
    if cls is float:
        assert isinstance(value, float)
        if value != value:
            return "float nan is not lossless JSON"
        if value in (float("inf"), float("-inf")):
            return f"float {float.__repr__(value)} is not lossless JSON"
        return "-0.0 is not lossless JSON"
    if cls is int:
        assert isinstance(value, int)
        return f"int {_format_int(value)} is out of range [-2**63, 2**64-1]"
    if cls is str:
        assert isinstance(value, str)
        index = surrogate_index(value)
        return (
            f"str with a lone surrogate (U+{ord(value[index]):04X} at index {index}) "
            "is not lossless JSON (it cannot be encoded as UTF-8)"
        )
    own = _own_problem(cls)
    if own is not None:
        return own
    base = _first_base(cls, _JSON_BASES)
    if base is not None:
        return f"{base.__name__} subclass {_type_name(cls)} is not lossless JSON (exact types only)"
    return f"{_type_name(cls)} is not lossless JSON"


# --------------------------------------------------------------------------
# Errors raised from inside the walk. A frame of the walk's ``stack`` is
# (src, iterator, out, key-in-parent), root first (see ``_frozen.walk``).


def uncopyable(root_path: str, stack: list[Any], key: object, src: dict[Any, Any]) -> Exception:
    """Copying a dict runs a key's ``__eq__`` when two hashes collide; that
    can only raise for a key that is not a str, which is the problem."""
    for k in src:
        if type(k) is not str:
            return LosslessJsonError(error_path(root_path, stack, key, None), key_problem(k))
    return LosslessJsonError(  # pragma: no cover - str keys compare safely
        error_path(root_path, stack, key, None), "dict cannot be copied"
    )


def check_keys(root_path: str, stack: list[Any], key: object, src: dict[str, Any]) -> None:
    for k in src:
        index = surrogate_index(k)
        if index >= 0:
            raise LosslessJsonError(
                error_path(root_path, stack, key, None),
                f"dict key {_quote_key(k[:40])} has a lone surrogate (U+{ord(k[index]):04X} at "
                f"index {index}) and is not lossless JSON (it cannot be encoded as UTF-8)",
            )


def error_path(root_path: str, stack: list[Any], key: object, child: object) -> str:
    keys = [frame[3] for frame in stack[1:]]
    if stack:
        keys.append(key)
    if child is not None:
        keys.append(child)
    return join_path(root_path, keys)


def bad_value(root_path: str, stack: list[Any], key: object, k: object, v: object) -> LosslessJsonError:
    return LosslessJsonError(error_path(root_path, stack, key, k), value_problem(v))


def too_deep(root_path: str, stack: list[Any], src: object, key: object, k: object) -> LosslessJsonError:
    """Nesting deeper than MAX_JSON_DEPTH, or a cycle: tell which by looking
    for a container that occurs twice on the path to item ``k`` of ``src``."""
    frames = [*stack, (src, None, None, key)]
    seen: dict[int, int] = {}
    for index, frame in enumerate(frames):
        earlier = seen.setdefault(id(frame[0]), index)
        if earlier != index:  # the first container on the path that repeats
            keys = [f[3] for f in frames[1:]]
            here = join_path(root_path, keys[:index])
            there = join_path(root_path, keys[:earlier])
            return LosslessJsonError(here, f"cycle: {here} refers back to {there}")
    return LosslessJsonError(error_path(root_path, stack, key, k), f"nesting deeper than {MAX_JSON_DEPTH}")
