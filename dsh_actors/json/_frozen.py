"""The frozen form of lossless JSON: :class:`FrozenDict`, the walk that
checks a value and builds its frozen copy, and the functions over it
(:func:`materialize`, :func:`check_lossless`, :func:`is_lossless`,
:func:`thaw`). The rules the walk enforces, and the text of its errors, are
in ``_rules.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from math import copysign as _copysign
from typing import Any, NoReturn, TypeAlias, Union, final

from ..errors import InvalidTypeError, LosslessJsonError
from ._rules import (
    BIG_FLOAT,
    MAX_INT,
    MAX_JSON_DEPTH,
    MIN_INT,
    bad_value,
    check_keys,
    error_path,
    key_problem,
    surrogate_index,
    too_deep,
    uncopyable,
    value_problem,
)

__all__ = [
    "FrozenDict",
    "JsonValue",
    "check",
    "check_lossless",
    "is_lossless",
    "materialize",
    "scalar_ok",
    "thaw",
    "walk",
]

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

_dict_setitem = dict.__setitem__
_isascii = str.isascii


def _read_only(*_args: object, **_kwargs: object) -> NoReturn:
    raise InvalidTypeError("FrozenDict is read-only")


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
        frozen = walk(dict(data, **kwargs), "value", True, True, None)
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
    ``TypeError("FrozenDict is read-only")``, and so does calling
    ``fd.__init__(...)`` (it would refill the dict in place). The hash is
    computed once, from the items regardless of order, and cached; it cannot fail since every
    value is frozen. ``copy()``, ``copy.copy`` and ``copy.deepcopy`` return
    the same object; pickling round-trips at any depth (it pickles thawed, as plain
    dicts and lists). ``fd | other`` returns a new
    ``FrozenDict`` (``other`` is materialized); ``plain | fd`` is ``dict``'s
    own operator and returns a plain ``dict``; ``fd |= other`` raises.
    It cannot be subclassed.
    """

    __slots__ = ("_hash", "_height")
    _hash: int
    _height: int  # the depth of this value, set by _height_of when needed

    def __init_subclass__(cls, **kwargs: object) -> None:
        raise InvalidTypeError("FrozenDict cannot be subclassed")

    def __init__(self, *_args: object, **_kwargs: object) -> None:
        # (Never called to make one: _new_frozen fills it without.)
        raise InvalidTypeError(
            "FrozenDict is read-only: __init__ cannot fill one again; make a new one instead: FrozenDict(...), or "
            "fd | {...} for a merged copy"
        )

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
        # Pickled thawed (plain dicts and lists), frozen again by
        # ``materialize``: pickle recurses through several frames per nested
        # FrozenDict, so a value within MAX_JSON_DEPTH would exceed Python's
        # recursion limit; plain containers take fewer.
        return (materialize, (thaw(self),))

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
        return walk(merged, "value", True, True, None)

    @classmethod
    def fromkeys(  # type: ignore[override]
        cls, keys: Iterable[str], value: object = None, /
    ) -> Any:
        return walk({key: value for key in keys}, "value", True, True, None)


def _cache_hashes(root: FrozenDict) -> None:
    """Hash every FrozenDict in ``root`` that has no cached hash yet, inner
    ones first, so that hashing never recurses through Python frames."""
    todo: list[FrozenDict] = []  # pre-order: every FrozenDict after its parent
    stack: list[Any] = [root]
    while stack:
        node = stack.pop()
        if type(node) is FrozenDict:
            try:
                node._hash  # noqa: B018 - probes the cached hash (a slot: AttributeError when unset)
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


# FrozenDict(d) without the metaclass, no validation: an empty one from
# dict's C constructor, filled by dict's own update (FrozenDict.__init__
# refuses: a call again would refill a FrozenDict). The walk inlines the two
# calls (`out = _new_frozen(FrozenDict); _dict_update(out, d)`), as it
# inlines its tests.
_new_frozen: Any = dict.__new__
_dict_update = dict.update


def scalar_ok(value: object, check_surrogates: bool) -> bool | None:
    """True for a lossless scalar (or a FrozenDict), False for a value that
    is not lossless, None for a dict, list or tuple still to be walked. For
    roots only: the walk inlines the same tests."""
    if type(value) is str:
        return value.isascii() or not check_surrogates or surrogate_index(value) < 0
    if type(value) is int:
        return MIN_INT <= value <= MAX_INT
    if type(value) is float:
        return not (value - value or (not value and _copysign(1.0, value) < 0.0))
    if type(value) is bool or value is None or type(value) is FrozenDict:
        return True
    if type(value) is dict or type(value) is list or type(value) is tuple:
        return None
    return False


# --------------------------------------------------------------------------
# The walk.


def walk(
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
    # limit, where too_deep tells it apart from plain deep nesting.
    stack: list[tuple[Any, Any, Any, Any]] = []
    depth = 1
    src: Any = root
    key: Any = None
    is_dict = type(root) is dict
    if is_dict:
        it: Any = iter(root.items())
        if build:
            out: Any = _new_frozen(FrozenDict)
            try:
                _dict_update(out, root)
            except Exception:  # noqa: BLE001 - see uncopyable
                raise uncopyable(root_path, stack, key, root) from None
        else:
            out = None
    else:
        it = enumerate(root)
        out = None
    while True:
        for k, v in it:
            if type(k) is not str and is_dict:
                raise LosslessJsonError(error_path(root_path, stack, key, None), key_problem(k))
            t = type(v)
            if t is str:
                if check_surrogates and not v.isascii() and surrogate_index(v) >= 0:
                    raise bad_value(root_path, stack, key, k, v)
            elif t is int:
                if not MIN_INT <= v <= MAX_INT:
                    raise bad_value(root_path, stack, key, k, v)
            elif t is float:
                if v - v or (not v and _copysign(1.0, v) < 0.0):
                    raise bad_value(root_path, stack, key, k, v)
                if big_floats is not None and (v >= BIG_FLOAT or v <= -BIG_FLOAT):
                    big_floats.append(True)
            elif t is bool or v is None:
                pass
            elif t is FrozenDict:
                try:
                    h = v._height
                except AttributeError:
                    h = _height_of(v)
                if depth + h > MAX_JSON_DEPTH:
                    raise too_deep(root_path, stack, src, key, k)
            elif t is dict or t is list or t is tuple:
                if depth == MAX_JSON_DEPTH:
                    raise too_deep(root_path, stack, src, key, k)
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
                        if not MIN_INT <= cv <= MAX_INT:
                            break
                    elif tc is float:
                        if cv - cv or not cv:
                            break
                        if big_floats is not None and (cv >= BIG_FLOAT or cv <= -BIG_FLOAT):
                            break
                    elif tc is not bool and cv is not None:
                        break
                else:
                    if t is not dict or not check_surrogates or all(map(_isascii, v)):
                        if build and t is not tuple:
                            if t is dict:
                                leaf = _new_frozen(FrozenDict)
                                _dict_update(leaf, v)
                            else:
                                leaf = tuple(v)
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
                        out = _new_frozen(FrozenDict)
                        try:
                            _dict_update(out, v)
                        except Exception:  # noqa: BLE001 - see uncopyable
                            raise uncopyable(root_path, stack, key, v) from None
                else:
                    is_dict = False
                    it = enumerate(v)
                    out = None
                break
            else:
                raise bad_value(root_path, stack, key, k, v)
        else:
            # Every item of `src` is checked: finish its frozen form, return
            # to the parent and store that form there if it is a new object.
            if is_dict and check_surrogates and not all(map(_isascii, src)):
                check_keys(root_path, stack, key, src)
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


def check(value: object, path: str, build: bool, check_surrogates: bool) -> Any:
    ok = scalar_ok(value, check_surrogates)
    if ok is None:
        return walk(value, path, build, check_surrogates, None)
    if not ok:
        raise LosslessJsonError(path, value_problem(value))
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
    if t is FrozenDict or (t is str and value.isascii()):  # type: ignore[attr-defined]
        return value  # type: ignore[return-value]  # (frozen, or ASCII text: a tool's usual value, no frame)
    if t is dict or t is list or t is tuple:
        return walk(value, path, True, True, None)  # type: ignore[no-any-return]
    return check(value, path, True, True)  # type: ignore[no-any-return]


def check_lossless(value: object, path: str = "value") -> None:
    """Raise :class:`~dsh_actors.errors.LosslessJsonError` (its ``path``
    from ``path``) when :func:`materialize` would; builds nothing. A
    :class:`FrozenDict` passes in O(1). Pure and thread-safe."""
    check(value, path, False, True)


def is_lossless(value: object) -> bool:
    """Whether :func:`materialize` would accept ``value`` (it builds
    nothing). Pure and thread-safe."""
    try:
        check(value, "value", False, True)
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
