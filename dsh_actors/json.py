"""Lossless JSON: the only values that cross an actor boundary
(``docs/reference.md``, section 2).

A value is *lossless JSON* when it is ``None``, a ``bool``, a ``str``, an
``int`` in ``[-2**63, 2**64-1]``, a finite ``float`` other than ``-0.0``, a
``list``/``tuple`` of lossless values, or a ``dict`` (or :class:`FrozenDict`)
whose keys are all ``str`` and whose values are lossless. Types must match
exactly (``type(v) is str``): subclasses (str enums, ``IntEnum``,
``OrderedDict``, ``defaultdict``, numpy scalars) are rejected, and so is
everything else (sets, bytes, dataclasses, ...). Two more rules make "lossless"
mean "survives :func:`dumps` then :func:`loads` unchanged":

* a ``str`` must be encodable as UTF-8, so a lone surrogate (``"\\ud800"``, as
  ``os.fsdecode`` produces for undecodable file names) is rejected;
* cycles are rejected (the same object twice in sibling positions is fine),
  and so is nesting deeper than :data:`MAX_JSON_DEPTH`.

**Depth.** A scalar has depth 0; a container has depth 1 plus the largest depth
of its items, so ``[]`` and ``{"a": 1}`` have depth 1 and ``[[1]]`` depth 2.
Values of depth up to ``MAX_JSON_DEPTH`` (256) are accepted; depth 257 is
rejected with ``nesting deeper than 256``. Nothing here recurses: every walk
uses an explicit stack, so a 100,000-deep list gets that error, never a
``RecursionError``.

**Paths.** Errors are :class:`~dsh_actors.errors.LosslessJsonError` with a
``path`` and a ``problem``. The path starts at the name given (``value`` by
default); a list/tuple item adds ``[3]``; a dict key that is a Python
identifier of at most 64 characters adds ``.key``, any other key adds
``["key"]`` quoted as a JSON string (``value.a[3]["content-type"]``,
``value["3"]``); a longer key is cut to its first 48 characters and shown as
``["abc…"]``. A bad dict key is reported at the path of its dict.

**Frozen values.** :func:`materialize` returns a detached, deep-frozen copy:
dicts become :class:`FrozenDict`, lists become tuples, scalars (and ``str``,
however long) are kept as they are. A tuple never equals a list, so
``materialize({"a": [1]}) == {"a": [1]}`` is False: compare
``thaw(frozen)`` with plain values (or compare with tuples). A frozen value is returned unchanged when
materialized again (a ``FrozenDict`` in O(1), a tuple after one walk that
copies nothing), and a ``FrozenDict`` inside a new value is taken as it is.
A mutable sub-value that occurs in several places is checked and copied at
each one, as orjson writes it at each one.

Every function here is pure and thread-safe: none keeps state between calls
(a ``FrozenDict`` caches its hash and depth on first use; a race there is
harmless). A mutable input must not be mutated by another thread while it
is being read.
"""

from __future__ import annotations

import json as _stdlib_json
from collections.abc import Iterable, Mapping
from math import copysign as _copysign
from typing import Any, Final, NoReturn, TypeAlias, Union, final

import orjson

from .errors import LosslessJsonError

__all__ = [
    "MAX_JSON_DEPTH",
    "FrozenDict",
    "JsonValue",
    "check_lossless",
    "dumps",
    "is_lossless",
    "loads",
    "materialize",
    "path_for_index",
    "path_for_key",
    "thaw",
]

MAX_JSON_DEPTH: Final = 256
"""The deepest nesting accepted: 256 containers inside one another."""

JsonValue: TypeAlias = Union[
    None,
    bool,
    int,
    float,
    str,
    "FrozenDict",
    tuple["JsonValue", ...],
    list["JsonValue"],
    dict[str, "JsonValue"],
]
"""A lossless JSON value, frozen (``FrozenDict``, ``tuple``) or plain."""

_MIN_INT: Final = -(2**63)
_MAX_INT: Final = 2**64 - 1
# orjson parses an integer literal outside [-2**63, 2**64-1] as a float (lossy);
# any such float has at least this magnitude.
_BIG_FLOAT: Final = 9.2e18
_MAX_KEY_IN_PATH: Final = 64
_KEY_PREFIX_IN_PATH: Final = 48
# Strings longer than this are checked for surrogates a slice at a time, so
# the check never allocates more than a few MB.
_SURROGATE_CHUNK: Final = 1 << 20

_dict_setitem = dict.__setitem__
_isascii = str.isascii


def _read_only(*_args: object, **_kwargs: object) -> NoReturn:
    raise TypeError("FrozenDict is read-only")


class _FrozenDictType(type):
    """FrozenDict's metaclass, so that ``FrozenDict(...)`` validates while
    the walk builds its FrozenDicts with dict's own C constructor."""

    def __call__(
        cls,
        data: Mapping[str, object] | Iterable[tuple[str, object]] = (),
        /,
        **kwargs: object,
    ) -> FrozenDict:
        if type(data) is FrozenDict and not kwargs:
            return data
        frozen = _walk(dict(data, **kwargs), "value", True, True, None)
        assert type(frozen) is FrozenDict
        return frozen


@final
class FrozenDict(dict[str, JsonValue], metaclass=_FrozenDictType):
    """A read-only, hashable ``dict`` holding only frozen lossless JSON.

    ``FrozenDict(mapping_or_pairs, **kwargs)`` takes what ``dict()`` takes and
    materializes it (so ``FrozenDict({"a": [1]})["a"] == (1,)``), raising
    :class:`~dsh_actors.errors.LosslessJsonError` for anything that is not
    lossless JSON. Hence every ``FrozenDict`` is deep-frozen, and
    :func:`materialize` returns one unchanged in O(1). (Mutating one through
    ``dict``'s own methods, ``dict.__setitem__(fd, k, v)``, breaks that, just
    as ``object.__setattr__`` breaks a frozen dataclass; don't.)

    It is a ``dict`` subclass, so lookups are C-fast, orjson serializes it
    natively, and it compares equal to the same plain dict
    (``FrozenDict({"a": 1}) == {"a": 1}``; a nested tuple is not equal to a
    list, so compare ``thaw(fd)`` with a plain value). Every mutator raises
    ``TypeError("FrozenDict is read-only")``. The hash is computed once, from
    the items regardless of order, and cached; it cannot fail since every
    value is frozen. ``copy()``, ``copy.copy`` and ``copy.deepcopy`` return
    the same object; pickling round-trips. ``fd | other`` returns a new
    ``FrozenDict`` (``other`` is materialized); ``plain | fd`` is ``dict``'s
    own operator and returns a plain ``dict``; ``fd |= other`` raises.
    It cannot be subclassed.
    """

    __slots__ = ("_hash", "_height")
    _hash: int
    _height: int  # the depth of this value, set by _height_of when needed

    def __init_subclass__(cls, **kwargs: object) -> None:
        raise TypeError("FrozenDict cannot be subclassed")

    __setitem__ = _read_only
    __delitem__ = _read_only
    clear = _read_only
    pop = _read_only
    popitem = _read_only
    setdefault = _read_only
    update = _read_only
    __ior__ = _read_only

    def __hash__(self) -> int:  # type: ignore[override]  # dict sets __hash__ = None
        try:
            return self._hash
        except AttributeError:
            _cache_hashes(self)
            return self._hash

    def __repr__(self) -> str:
        return f"FrozenDict({dict.__repr__(self)})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenDict, (dict(self),))

    def copy(self) -> FrozenDict:
        return self

    def __copy__(self) -> FrozenDict:
        return self

    def __deepcopy__(self, _memo: object) -> FrozenDict:
        return self

    def __or__(self, other: object) -> Any:
        if not isinstance(other, dict):
            return NotImplemented
        merged: dict[Any, object] = dict(self)
        merged.update(other)
        return _walk(merged, "value", True, True, None)

    @classmethod
    def fromkeys(  # type: ignore[override]
        cls, keys: Iterable[str], value: object = None, /
    ) -> Any:
        return _walk({key: value for key in keys}, "value", True, True, None)


def _cache_hashes(root: FrozenDict) -> None:
    """Hash every FrozenDict in ``root`` that has no cached hash yet, inner
    ones first, so that hashing never recurses through Python frames."""
    todo: list[FrozenDict] = []  # pre-order: every FrozenDict after its parent
    stack: list[Any] = [root]
    while stack:
        node = stack.pop()
        if type(node) is FrozenDict:
            try:
                node._hash
                continue
            except AttributeError:
                todo.append(node)
            items: Any = node.values()
        else:
            items = node
        for v in items:
            if type(v) is FrozenDict or type(v) is tuple:
                stack.append(v)
    for frozen in reversed(todo):
        frozen._hash = hash(frozenset(dict.items(frozen)))


# FrozenDict(d) without the metaclass: dict's C constructor, no validation.
_new_frozen: Any = type.__call__.__get__(FrozenDict)


# --------------------------------------------------------------------------
# Paths and problem descriptions. Nothing here calls a method of an unknown
# object: hostile __eq__/__hash__/__str__/__repr__ must not turn our error
# into theirs.


def _quote_key(key: str) -> str:
    try:
        return orjson.dumps(key).decode()
    except orjson.JSONEncodeError:  # a lone surrogate: escape it, ASCII only
        return _stdlib_json.dumps(key)


def path_for_key(path: str, key: str) -> str:
    """The path of ``key`` in the dict at ``path``: ``value.name``, or
    ``value["content-type"]`` when the key is not an identifier (see the
    module docstring for the whole convention). Pure, thread-safe."""
    if len(key) > _MAX_KEY_IN_PATH:
        return f"{path}[{_quote_key(key[:_KEY_PREFIX_IN_PATH])[:-1]}…\"]"
    if key.isidentifier():
        return f"{path}.{key}"
    return f"{path}[{_quote_key(key)}]"


def path_for_index(path: str, index: int) -> str:
    """The path of item ``index`` of the list at ``path``: ``value[3]``."""
    return f"{path}[{index}]"


def _join_path(root: str, keys: Iterable[object]) -> str:
    path = root
    for key in keys:
        if type(key) is str:
            path = path_for_key(path, key)
        elif type(key) is int:
            path = path_for_index(path, key)
    return path


def _type_name(cls: type) -> str:
    """``cls``'s qualified name, read from the type itself so that a
    metaclass cannot interfere; ``module.`` is added unless builtin."""
    try:
        name = type.__dict__["__qualname__"].__get__(cls)
        module = type.__dict__["__module__"].__get__(cls)
    except Exception:  # noqa: BLE001 - any failure: fall back to a placeholder
        return "<unnamed type>"
    if type(name) is not str:
        return "<unnamed type>"
    if type(module) is str and module != "builtins":
        return f"{module}.{name}"
    return name


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


def _key_problem(key: object) -> str:
    cls = type(key)
    shown = _key_repr(key)
    name = _type_name(cls)
    what = f"dict key {shown} ({name})" if shown else f"dict key of type {name}"
    if _first_base(cls, (str,)) is not None:
        return f"{what} is a str subclass, not an exact str (exact types only)"
    return f"{what} is not a string"


def _surrogate_index(text: str) -> int:
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


def _value_problem(value: object) -> str:
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
        index = _surrogate_index(value)
        return (
            f"str with a lone surrogate (U+{ord(value[index]):04X} at index {index}) "
            "is not lossless JSON (it cannot be encoded as UTF-8)"
        )
    base = _first_base(cls, _JSON_BASES)
    if base is not None:
        return (
            f"{base.__name__} subclass {_type_name(cls)} is not lossless JSON (exact types only)"
        )
    return f"{_type_name(cls)} is not lossless JSON"


def _scalar_ok(value: object, check_surrogates: bool) -> bool | None:
    """True for a lossless scalar (or a FrozenDict), False for a value that
    is not lossless, None for a dict, list or tuple still to be walked. For
    roots only: the walk inlines the same tests."""
    if type(value) is str:
        return value.isascii() or not check_surrogates or _surrogate_index(value) < 0
    if type(value) is int:
        return _MIN_INT <= value <= _MAX_INT
    if type(value) is float:
        return not (value - value or (not value and _copysign(1.0, value) < 0.0))
    if type(value) is bool or value is None or type(value) is FrozenDict:
        return True
    if type(value) is dict or type(value) is list or type(value) is tuple:
        return None
    return False


# --------------------------------------------------------------------------
# The walk.


def _walk(
    root: Any,
    root_path: str,
    build: bool,
    check_surrogates: bool,
    big_floats: list[bool] | None,
) -> Any:
    """Check (and, if ``build``, freeze) the container ``root``.

    ``root`` is an exact dict, list or tuple. Returns the frozen value, or
    None when not building. ``check_surrogates`` is False for text orjson
    decoded (it is valid UTF-8 already); ``big_floats``, when given, gets a
    True appended for each float that may be a lossy parse of a big integer.
    """
    # Invariant: `stack` holds the frames of the ancestors of `src`, root
    # first, as (src, iterator, out, key-in-parent), and `depth` is
    # len(stack) + 1, the depth of `src`. When building, `out` is the new
    # FrozenDict for a dict (filled with src's items up front, frozen items
    # written over them), or for a list/tuple None until an item's frozen form
    # differs from the item, then a list copy of `src` with frozen items.
    # Cycles are not tracked: a cycle nests forever, so it ends at the depth
    # limit, where _too_deep tells it apart from plain deep nesting.
    stack: list[tuple[Any, Any, Any, Any]] = []
    depth = 1
    src: Any = root
    key: Any = None
    is_dict = type(root) is dict
    if is_dict:
        it: Any = iter(root.items())
        if build:
            try:
                out: Any = _new_frozen(root)
            except Exception:  # noqa: BLE001 - see _uncopyable
                raise _uncopyable(root_path, stack, key, root) from None
        else:
            out = None
    else:
        it = enumerate(root)
        out = None
    while True:
        for k, v in it:
            if type(k) is not str and is_dict:
                raise LosslessJsonError(_error_path(root_path, stack, key, None), _key_problem(k))
            t = type(v)
            if t is str:
                if check_surrogates and not v.isascii() and _surrogate_index(v) >= 0:
                    raise _bad(root_path, stack, key, k, v)
            elif t is int:
                if not _MIN_INT <= v <= _MAX_INT:
                    raise _bad(root_path, stack, key, k, v)
            elif t is float:
                if v - v or (not v and _copysign(1.0, v) < 0.0):
                    raise _bad(root_path, stack, key, k, v)
                if big_floats is not None and (v >= _BIG_FLOAT or v <= -_BIG_FLOAT):
                    big_floats.append(True)
            elif t is bool or v is None:
                pass
            elif t is FrozenDict:
                try:
                    h = v._height
                except AttributeError:
                    h = _height_of(v)
                if depth + h > MAX_JSON_DEPTH:
                    raise _too_deep(root_path, stack, src, key, k)
            elif t is dict or t is list or t is tuple:
                if depth == MAX_JSON_DEPTH:
                    raise _too_deep(root_path, stack, src, key, k)
                # Fast path: a container of plain scalars is checked and frozen
                # right here, without a frame. It accepts a subset of what the
                # main loop accepts (no containers, no non-ASCII str, no 0.0,
                # no big float when parsing); on anything else it gives up and
                # the container is walked in a frame of its own, which then
                # finds the exact problem if there is one.
                for ck, cv in v.items() if t is dict else enumerate(v):
                    if type(ck) is not str and t is dict:
                        break
                    tc = type(cv)
                    if tc is str:
                        if check_surrogates and not cv.isascii():
                            break
                    elif tc is int:
                        if not _MIN_INT <= cv <= _MAX_INT:
                            break
                    elif tc is float:
                        if cv - cv or not cv:
                            break
                        if big_floats is not None and (cv >= _BIG_FLOAT or cv <= -_BIG_FLOAT):
                            break
                    elif tc is not bool and cv is not None:
                        break
                else:
                    if t is not dict or not check_surrogates or all(map(_isascii, v)):
                        if build and t is not tuple:
                            leaf = _new_frozen(v) if t is dict else tuple(v)
                            if is_dict:
                                _dict_setitem(out, k, leaf)
                            else:
                                if out is None:
                                    out = list(src)
                                out[k] = leaf
                        continue
                stack.append((src, it, out, key))
                depth += 1
                src, key = v, k
                if t is dict:
                    is_dict = True
                    it = iter(v.items())
                    if build:
                        try:
                            out = _new_frozen(v)
                        except Exception:  # noqa: BLE001 - see _uncopyable
                            raise _uncopyable(root_path, stack, key, v) from None
                else:
                    is_dict = False
                    it = enumerate(v)
                    out = None
                break
            else:
                raise _bad(root_path, stack, key, k, v)
        else:
            # Every item of `src` is checked: finish its frozen form, return
            # to the parent and store that form there if it is a new object.
            if is_dict and check_surrogates and not all(map(_isascii, src)):
                _check_keys(root_path, stack, key, src)
            if not build:
                result: Any = None
            elif is_dict:
                result = out
            elif out is not None:
                result = tuple(out)
            elif type(src) is tuple:
                result = src
            else:
                result = tuple(src)
            if not stack:
                return result
            child, child_key = src, key
            src, it, out, key = stack.pop()
            depth -= 1
            is_dict = type(src) is dict
            if build and result is not child:
                if is_dict:
                    _dict_setitem(out, child_key, result)
                else:
                    if out is None:
                        out = list(src)
                    out[child_key] = result


def _uncopyable(root_path: str, stack: list[Any], key: object, src: dict[Any, Any]) -> Exception:
    """Copying a dict runs a key's ``__eq__`` when two hashes collide; that
    can only raise for a key that is not a str, which is the problem."""
    for k in src:
        if type(k) is not str:
            return LosslessJsonError(_error_path(root_path, stack, key, None), _key_problem(k))
    return LosslessJsonError(  # pragma: no cover - str keys compare safely
        _error_path(root_path, stack, key, None), "dict cannot be copied"
    )


def _check_keys(root_path: str, stack: list[Any], key: object, src: dict[str, Any]) -> None:
    for k in src:
        index = _surrogate_index(k)
        if index >= 0:
            raise LosslessJsonError(
                _error_path(root_path, stack, key, None),
                f"dict key {_quote_key(k[:40])} has a lone surrogate (U+{ord(k[index]):04X} at "
                f"index {index}) and is not lossless JSON (it cannot be encoded as UTF-8)",
            )


def _height_of(frozen: FrozenDict) -> int:
    """The depth of ``frozen`` (1 when it holds only scalars), computed once
    and cached on it."""
    try:
        return frozen._height
    except AttributeError:
        pass
    deepest = 1
    stack: list[tuple[Any, int]] = [(frozen, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > deepest:
            deepest = depth
        for v in node.values() if type(node) is FrozenDict else node:
            if type(v) is tuple:
                stack.append((v, depth + 1))
            elif type(v) is FrozenDict:
                try:
                    below = v._height
                except AttributeError:
                    stack.append((v, depth + 1))
                    continue
                if depth + below > deepest:
                    deepest = depth + below
    frozen._height = deepest
    return deepest


def _error_path(root_path: str, stack: list[Any], key: object, child: object) -> str:
    keys = [frame[3] for frame in stack[1:]]
    if stack:
        keys.append(key)
    if child is not None:
        keys.append(child)
    return _join_path(root_path, keys)


def _bad(root_path: str, stack: list[Any], key: object, k: object, v: object) -> LosslessJsonError:
    return LosslessJsonError(_error_path(root_path, stack, key, k), _value_problem(v))


def _too_deep(
    root_path: str, stack: list[Any], src: object, key: object, k: object
) -> LosslessJsonError:
    """Nesting deeper than MAX_JSON_DEPTH, or a cycle: tell which by looking
    for a container that occurs twice on the path to item ``k`` of ``src``."""
    frames = [*stack, (src, None, None, key)]
    seen: dict[int, int] = {}
    for index, frame in enumerate(frames):
        earlier = seen.setdefault(id(frame[0]), index)
        if earlier != index:  # the first container on the path that repeats
            keys = [f[3] for f in frames[1:]]
            here = _join_path(root_path, keys[:index])
            there = _join_path(root_path, keys[:earlier])
            return LosslessJsonError(here, f"cycle: {here} refers back to {there}")
    return LosslessJsonError(
        _error_path(root_path, stack, key, k), f"nesting deeper than {MAX_JSON_DEPTH}"
    )


def _check(value: object, path: str, build: bool, check_surrogates: bool) -> Any:
    ok = _scalar_ok(value, check_surrogates)
    if ok is None:
        return _walk(value, path, build, check_surrogates, None)
    if not ok:
        raise LosslessJsonError(path, _value_problem(value))
    return value


# --------------------------------------------------------------------------
# Public functions.


def materialize(value: object, path: str = "value") -> JsonValue:
    """A detached, deep-frozen copy of ``value``, or LosslessJsonError.

    Dicts become :class:`FrozenDict`, lists and tuples become tuples; scalars
    (``str`` included, whatever its length) are returned as they are, and so
    is anything already frozen. So ``materialize({"a": [1]}) == {"a": [1]}``
    is False (a tuple is not a list); ``thaw`` gives the plain value back. ``path`` names ``value`` in error messages
    (``arguments.files[2]: float nan is not lossless JSON``). Pure and
    thread-safe. Cost: about 2 µs for a flat dict of ten scalars, 0.1 µs for
    a FrozenDict (``./dev python -m benchmarks.bench_json``).
    """
    t = type(value)
    if t is FrozenDict:
        return value  # type: ignore[return-value]
    if t is dict or t is list or t is tuple:
        return _walk(value, path, True, True, None)  # type: ignore[no-any-return]
    return _check(value, path, True, True)  # type: ignore[no-any-return]


def check_lossless(value: object, path: str = "value") -> None:
    """Raise :class:`~dsh_actors.errors.LosslessJsonError` (its ``path``
    from ``path``) when :func:`materialize` would; builds nothing. A
    :class:`FrozenDict` passes in O(1). Pure and thread-safe."""
    _check(value, path, False, True)


def is_lossless(value: object) -> bool:
    """Whether :func:`materialize` would accept ``value`` (it builds
    nothing). Pure and thread-safe."""
    try:
        _check(value, "value", False, True)
    except LosslessJsonError:
        return False
    return True


def thaw(value: object) -> Any:
    """A plain copy of a lossless value: fresh ``dict``s and ``list``s all the
    way down, sharing nothing mutable with ``value`` (a sub-value that occurs
    twice in ``value`` gets two copies). Raises LosslessJsonError when
    ``value`` is not lossless JSON. Pure and thread-safe."""
    frozen: Any = materialize(value)
    t = type(frozen)
    if t is FrozenDict:
        root: Any = {}
    elif t is tuple:
        root = []
    else:
        return frozen
    # Top-down: each container is created empty and attached to its parent,
    # then filled when its (source, target) pair comes off the stack.
    stack: list[tuple[Any, Any]] = [(frozen, root)]
    child: Any
    while stack:
        src, dst = stack.pop()
        if type(src) is FrozenDict:
            for k, v in src.items():
                tv = type(v)
                if tv is FrozenDict:
                    dst[k] = child = {}
                    stack.append((v, child))
                elif tv is tuple:
                    dst[k] = child = []
                    stack.append((v, child))
                else:
                    dst[k] = v
        else:
            append = dst.append
            for v in src:
                tv = type(v)
                if tv is FrozenDict:
                    append(child := {})
                    stack.append((v, child))
                elif tv is tuple:
                    append(child := [])
                    stack.append((v, child))
                else:
                    append(v)
    return root


def dumps(value: object, *, sort_keys: bool = False) -> bytes:
    """``value`` as compact UTF-8 JSON (orjson), keys in insertion order
    unless ``sort_keys``. Accepts frozen and plain values alike; raises
    LosslessJsonError for anything that is not lossless JSON (checked first:
    orjson would write ``-0.0``, ``NaN`` as ``null``, or a str enum).
    Pure and thread-safe."""
    _check(value, "value", False, True)
    option = orjson.OPT_SORT_KEYS if sort_keys else 0
    try:
        return orjson.dumps(value, option=option)
    except orjson.JSONEncodeError as err:
        if "recursion" not in str(err).lower():
            raise LosslessJsonError("value", f"cannot be serialized: {err}") from err
    # orjson stops at 254 levels; MAX_JSON_DEPTH is 256.
    return _dumps_deep(value, option)


def _dumps_deep(value: object, option: int) -> bytes:
    """Same bytes as ``orjson.dumps`` would give, for values too deep for it:
    containers are written here, scalars and keys by orjson."""
    parts: list[bytes] = []
    write = parts.append
    sort_keys = bool(option & orjson.OPT_SORT_KEYS)
    stack: list[tuple[Any, bool, bytes]] = []
    it: Any = iter((value,))
    in_dict, closer, first = False, b"", True
    while True:
        for item in it:
            if not first:
                write(b",")
            first = False
            if in_dict:
                k, v = item
                write(orjson.dumps(k))
                write(b":")
            else:
                v = item
            t = type(v)
            if t is dict or t is FrozenDict:
                write(b"{")
                stack.append((it, in_dict, closer))
                items = sorted(v.items(), key=_first) if sort_keys else v.items()
                it, in_dict, closer, first = iter(items), True, b"}", True
                break
            if t is list or t is tuple:
                write(b"[")
                stack.append((it, in_dict, closer))
                it, in_dict, closer, first = iter(v), False, b"]", True
                break
            write(orjson.dumps(v))
        else:
            write(closer)
            if not stack:
                return b"".join(parts)
            it, in_dict, closer = stack.pop()
            first = False


def _first(item: tuple[str, object]) -> str:
    return item[0]


def loads(
    data: bytes | bytearray | memoryview | str, *, frozen: bool = True, path: str = "value"
) -> Any:
    """Parse JSON text (orjson) into a lossless value: materialized (frozen)
    by default, plain ``dict``/``list`` with ``frozen=False``.

    Raises LosslessJsonError for malformed text (the problem quotes orjson's
    message, which gives line, column and character offset) and for text
    orjson accepts but that is not lossless: ``-0.0``, an integer literal
    outside ``[-2**63, 2**64-1]`` (orjson would silently make it a float),
    nesting deeper than :data:`MAX_JSON_DEPTH`. ``path`` names the value in
    errors. Pure and thread-safe.
    """
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError as err:
        message = str(err)
        if "depth limit" in message or "recursion" in message.lower():
            problem = f"nesting deeper than {MAX_JSON_DEPTH} (JSON text: {message})"
        else:
            problem = f"invalid JSON text: {message}"
        raise LosslessJsonError(path, problem) from err
    if type(parsed) is not dict and type(parsed) is not list:
        if not _scalar_ok(parsed, False):  # -0.0: orjson never makes nan or inf
            raise LosslessJsonError(path, _value_problem(parsed))
        if type(parsed) is float and (parsed >= _BIG_FLOAT or parsed <= -_BIG_FLOAT):
            _reject_big_int_literals(data, path)
        return parsed
    big_floats: list[bool] = []
    result = _walk(parsed, path, frozen, False, big_floats)
    if big_floats:
        _reject_big_int_literals(data, path)
    return result if frozen else parsed


def _reject_big_int_literals(data: bytes | bytearray | memoryview | str, path: str) -> None:
    """Parse ``data`` again, with the standard library (exact ints), to tell
    an out-of-range integer literal from a genuinely big float. Only called
    when orjson produced a float of magnitude >= 9.2e18, after the depth
    check, so the recursive stdlib parser stays far from its limit."""
    text = bytes(data) if isinstance(data, (bytearray, memoryview)) else data
    try:
        exact = _stdlib_json.loads(text)
    except (ValueError, RecursionError) as err:  # pragma: no cover - orjson parsed it
        raise LosslessJsonError(path, f"invalid JSON text: {err}") from err
    _check(exact, path, False, False)
