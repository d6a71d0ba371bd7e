"""Lossless JSON (SPEC section 2): materialize, thaw, dumps, loads, FrozenDict."""

from __future__ import annotations

import collections
import copy
import dataclasses
import decimal
import enum
import math
import pickle
import sys
import time
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh_actors.errors import ErrorCode, LosslessJsonError
from dsh_actors.json import (
    MAX_JSON_DEPTH,
    FrozenDict,
    check_lossless,
    dumps,
    is_lossless,
    loads,
    materialize,
    path_for_index,
    path_for_key,
    thaw,
)
from dsh_actors.json._text import _dumps_deep

M = __name__  # how pytest imported this module: names in messages include it

# ---------------------------------------------------------------------------
# Strategies


def _not_negative_zero(x: float) -> float:
    return 0.0 if x == 0.0 else x


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.sampled_from([-(2**63), 2**64 - 1, 2**63 - 1, 2**63, 0, -1]),
    st.floats(allow_nan=False, allow_infinity=False).map(_not_negative_zero),
    st.text(),
)
keys = st.text(max_size=8) | st.sampled_from(["a", "content-type", "3", "", "é", "x y", "$ref"])
lossless = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(keys, children, max_size=4),
    ),
    max_leaves=20,
)
containers = st.one_of(st.lists(lossless, max_size=4), st.dictionaries(keys, lossless, max_size=4))


class MyStr(str):
    pass


class Color(enum.IntEnum):
    RED = 1


class Mode(enum.StrEnum):
    FAST = "fast"


@dataclasses.dataclass
class Point:
    x: int


class Hostile:
    """Every hook a careless error message might call raises."""

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("__eq__")

    def __hash__(self) -> int:
        raise RuntimeError("__hash__")

    def __repr__(self) -> str:
        raise RuntimeError("__repr__")

    def __str__(self) -> str:
        raise RuntimeError("__str__")

    def __bool__(self) -> bool:
        raise RuntimeError("__bool__")

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(name)


class HostileKey(Hostile):
    """Hashable (so it can be a dict key); everything else raises."""

    def __hash__(self) -> int:
        return 7


class HostileMeta(type):
    def __getattribute__(cls, name: str) -> Any:
        raise RuntimeError(name)

    def __eq__(cls, other: object) -> bool:
        raise RuntimeError("__eq__")

    def __hash__(cls) -> int:
        return 0

    def __repr__(cls) -> str:
        raise RuntimeError("__repr__")


class Sneaky(metaclass=HostileMeta):
    pass


def _bad_leaves() -> list[object]:
    return [
        math.nan,
        math.inf,
        -math.inf,
        -0.0,
        2**64,
        -(2**63) - 1,
        2**70,
        10**5000,
        MyStr("x"),
        Color.RED,
        Mode.FAST,
        collections.OrderedDict(a=1),
        collections.defaultdict(list),
        {1, 2},
        frozenset(),
        b"bytes",
        bytearray(b"x"),
        object(),
        Point(1),
        decimal.Decimal("1.5"),
        1 + 2j,
        "lone \ud800 surrogate",
        Hostile(),
        Sneaky(),
        {1: "int key"},
        {True: "bool key"},
        {MyStr("k"): "str subclass key"},
        {HostileKey(): "hostile key"},
        {("a", "b"): "tuple key"},
        {"\udfff": "surrogate key"},
    ]


@st.composite
def with_bad_leaf(draw: st.DrawFn) -> tuple[object, str]:
    """A lossless tree with one bad leaf injected anywhere, and the path the
    error must name (for a bad dict key: the path of its dict)."""
    # Hypothesis looks at what it draws (Sneaky's metaclass would break it),
    # so draw an index.
    bad = _bad_leaves()[draw(st.integers(0, len(_bad_leaves()) - 1))]
    if draw(st.integers(0, 9)) == 0:
        return bad, "value"
    root: Any = thaw(draw(containers))
    node: Any = root
    path = "value"
    while True:
        items: list[Any] = list(node.items()) if type(node) is dict else list(enumerate(node))
        inner = [(k, v) for k, v in items if type(v) in (dict, list)]
        if len(inner) > 0 and draw(st.booleans()):
            step, node = draw(st.sampled_from(inner))
            path = path_for_key(path, step) if type(step) is str else path_for_index(path, step)
            continue
        if type(node) is dict:
            k = draw(keys)
            node[k] = bad
            return root, path_for_key(path, k)
        index = draw(st.integers(0, len(node)))
        node.insert(index, bad)
        return root, path_for_index(path, index)


def _typed(value: Any) -> Any:
    """A type-aware picture of a plain value (True, 1 and 1.0 differ; key
    order counts; tuples read as lists)."""
    if type(value) in (dict, FrozenDict):
        return ("dict", [(k, _typed(v)) for k, v in value.items()])
    if type(value) in (list, tuple):
        return ("list", [_typed(v) for v in value])
    if type(value) is float:
        return ("float", value.hex())
    return (type(value).__name__, value)


def _is_frozen(value: Any) -> bool:
    if type(value) is FrozenDict:
        return all(type(k) is str and _is_frozen(v) for k, v in value.items())
    if type(value) is tuple:
        return all(_is_frozen(v) for v in value)
    return type(value) in (type(None), bool, int, float, str)


def _nested_lists(depth: int, leaf: object = 1) -> Any:
    value: Any = leaf
    for _ in range(depth):
        value = [value]
    return value


def _nested_tuples(depth: int, leaf: object = 1) -> Any:
    value: Any = leaf
    for _ in range(depth):
        value = (value,)
    return value


def _long_path(step: str, steps: int) -> str:
    """The path ``value`` then ``steps`` times ``step``, as a message shows
    one of more than 20 steps: its first and last 8 steps."""
    return f"value{step * 8} … ({steps - 16} more) … {step * 8}"


def _nested_dicts(depth: int, leaf: object = 1) -> Any:
    value: Any = leaf
    for _ in range(depth):
        value = {"k": value}
    return value


# ---------------------------------------------------------------------------
# Properties


@settings(max_examples=200)
@given(lossless)
def test_every_lossless_value_survives_materialize_thaw_dumps_and_loads(value: object) -> None:
    frozen = materialize(value)
    assert _is_frozen(frozen)
    assert materialize(frozen) is frozen
    hash(frozen)
    assert _typed(thaw(frozen)) == _typed(value)
    assert _typed(loads(dumps(value))) == _typed(frozen)
    assert loads(dumps(value)) == frozen
    assert _typed(loads(dumps(frozen), frozen=False)) == _typed(value)
    assert dumps(frozen) == orjson.dumps(value)
    assert is_lossless(value)


@settings(max_examples=100)
@given(lossless, st.booleans())
def test_the_deep_encoder_writes_the_same_bytes_as_orjson(value: object, sort: bool) -> None:
    option = orjson.OPT_SORT_KEYS if sort else 0
    assert _dumps_deep(value, option) == orjson.dumps(value, option=option)


@settings(max_examples=200)
@given(with_bad_leaf())
def test_a_bad_leaf_anywhere_raises_lossless_json_error_naming_its_path(
    case: tuple[object, str],
) -> None:
    value, path = case
    with pytest.raises(LosslessJsonError) as info:
        materialize(value)
    assert info.value.path == path
    assert str(info.value) == f"{path}: {info.value.problem}"
    assert info.value.code is ErrorCode.INVALID_JSON
    assert not is_lossless(value)
    with pytest.raises(LosslessJsonError):
        dumps(value)
    with pytest.raises(LosslessJsonError):
        thaw(value)


# ---------------------------------------------------------------------------
# What each problem says


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"a": [1, 2, 3, math.nan]}, "value.a[3]: float nan is not lossless JSON"),
        ([math.inf], "value[0]: float inf is not lossless JSON"),
        ([-math.inf], "value[0]: float -inf is not lossless JSON"),
        ({"x": -0.0}, "value.x: -0.0 is not lossless JSON"),
        ([2**70], "value[0]: int 2**70 is out of range [-2**63, 2**64-1]"),
        ([2**64], "value[0]: int 2**64 is out of range [-2**63, 2**64-1]"),
        ([-(2**63) - 1], "value[0]: int -9223372036854775809 is out of range [-2**63, 2**64-1]"),
        ([10**5000 + 1], "value[0]: int of 16610 bits is out of range [-2**63, 2**64-1]"),
        (
            {"s": MyStr("x")},
            f"value.s: str subclass {M}.MyStr is not lossless JSON (exact types only)",
        ),
        (
            [Color.RED],
            f"value[0]: int subclass {M}.Color is not lossless JSON (exact types only)",
        ),
        (
            collections.OrderedDict(),
            "value: dict subclass collections.OrderedDict is not lossless JSON (exact types only)",
        ),
        ({"weird key": {1, 2}}, 'value["weird key"]: set is not lossless JSON'),
        ({"a": {3: "x"}}, "value.a: dict key 3 (int) is not a string"),
        (
            {MyStr("k"): 1},
            f"value: dict key 'k' ({M}.MyStr) is a str subclass, not an exact str (exact types only)",
        ),
        ({HostileKey(): 1}, f"value: dict key of type {M}.HostileKey is not a string"),
        ([Hostile()], f"value[0]: {M}.Hostile is not lossless JSON"),
        ([Sneaky()], f"value[0]: {M}.Sneaky is not lossless JSON"),
        (
            ["ok", "a\udc80b"],
            "value[1]: str with a lone surrogate (U+DC80 at index 1) is not lossless JSON "
            "(it cannot be encoded as UTF-8)",
        ),
        (
            {"\ud800": 1},
            'value: dict key "\\ud800" has a lone surrogate (U+D800 at index 0) and is not '
            "lossless JSON (it cannot be encoded as UTF-8)",
        ),
    ],
)
def test_materialize_names_where_and_what(value: object, message: str) -> None:
    with pytest.raises(LosslessJsonError) as info:
        materialize(value)
    assert str(info.value) == message


def test_materialize_rejects_negative_zero_with_its_path() -> None:
    with pytest.raises(LosslessJsonError) as info:
        materialize({"a": [{"b": 0.0}, {"b": -0.0}]}, path="arguments")
    assert info.value.path == "arguments.a[1].b"
    assert info.value.problem == "-0.0 is not lossless JSON"


def test_paths_quote_keys_that_are_not_identifiers_and_cut_long_ones() -> None:
    assert path_for_key("value", "name") == "value.name"
    assert path_for_key("value", "café") == "value.café"
    assert path_for_key("value", "content-type") == 'value["content-type"]'
    assert path_for_key("value", "3") == 'value["3"]'
    assert path_for_key("value", "") == 'value[""]'
    assert path_for_key("value", 'say "hi"') == 'value["say \\"hi\\""]'
    assert path_for_key("value", "\ud800") == 'value["\\ud800"]'
    assert path_for_key("value", "k" * 65) == f'value["{"k" * 48}…"]'
    assert path_for_key("value", "k" * 64) == f"value.{'k' * 64}"
    assert path_for_index("value.a", 3) == "value.a[3]"
    # A Python value's key that is not a str (a tool's, before it is JSON).
    assert path_for_key("value", 3) == "value[<int key>]"
    assert path_for_key("value", (1, 2)) == "value[<tuple key>]"


def test_a_path_of_more_than_20_steps_shows_its_first_and_last_8_and_counts_the_rest() -> None:
    # Before, a value nested 300 deep was named by 256 "[0]"s in a message.
    def stepped(root: str, steps: list[Any]) -> str:
        path = root
        for step in steps:
            path = path_for_key(path, step) if type(step) is str else path_for_index(path, step)
        return path

    assert stepped("value", [0] * 20) == "value" + "[0]" * 20  # 20 steps: as they are
    assert (
        stepped("value", list(range(21)))
        == "value[0][1][2][3][4][5][6][7] … (5 more) … [13][14][15][16][17][18][19][20]"
    )
    odd = ["a", 'x [0] … (3 more) … "y".z', "k" * 70, -1, "é", "b.c"]
    steps = odd * 5
    shown = stepped("value", steps)
    rendered = [".a", '["x [0] … (3 more) … \\"y\\".z"]', '["' + "k" * 48 + '…"]', "[-1]", ".é", '["b.c"]'] * 5
    assert shown == "value" + "".join(rendered[:8]) + " … (14 more) … " + "".join(rendered[-8:])
    # One rule, step by step or at once: a bad value's path is the same.
    value: Any = -0.0
    for step in reversed(steps):
        value = [value] if type(step) is int else {step: value}
    with pytest.raises(LosslessJsonError) as info:
        materialize(value)
    assert info.value.path == stepped("value", [0 if type(step) is int else step for step in steps])


def test_arguments_nested_300_deep_are_refused_with_a_short_path(rt: Any) -> None:
    from dsh_actors import ToolBatchInput, ToolCall, tool

    @tool
    def take(data: Any) -> str:
        """Take anything."""
        return "ok"

    rt.tools.register(take)
    deep = '{"data": ' + "[" * 300 + "]" * 300 + "}"
    batch = rt.tools.execute(ToolBatchInput(calls=[ToolCall(id="c1", name="take", arguments=deep)]))
    result = batch.results[0].result
    assert result.is_error and result.error.info.code == "INVALID_ARGS"
    assert result.error.message == (
        "invalid arguments: arguments are not lossless JSON: arguments.data" + "[0]" * 7 + " … (240 more) … "
        + "[0]" * 8 + ": nesting deeper than 256"
    )  # fmt: skip


# ---------------------------------------------------------------------------
# Depth and cycles


@pytest.mark.parametrize("nest", [_nested_lists, _nested_dicts])
def test_max_json_depth_levels_are_accepted_and_one_more_is_rejected(nest: Any) -> None:
    assert MAX_JSON_DEPTH == 256
    deepest = nest(MAX_JSON_DEPTH)
    frozen = materialize(deepest)
    assert loads(dumps(frozen)) == frozen  # past orjson's own limit of 254
    assert thaw(frozen) == deepest
    with pytest.raises(LosslessJsonError) as info:
        materialize(nest(MAX_JSON_DEPTH + 1))
    assert info.value.problem == "nesting deeper than 256"
    step = "[0]" if nest is _nested_lists else ".k"
    assert info.value.path == _long_path(step, MAX_JSON_DEPTH)
    with pytest.raises(LosslessJsonError):
        dumps(nest(MAX_JSON_DEPTH + 1))


def test_a_scalar_has_depth_zero_and_an_empty_container_depth_one() -> None:
    deepest = _nested_lists(MAX_JSON_DEPTH - 1, [])
    assert materialize(deepest) == _nested_tuples(MAX_JSON_DEPTH - 1, ())
    with pytest.raises(LosslessJsonError):
        materialize(_nested_lists(MAX_JSON_DEPTH, []))


def test_a_100000_deep_list_raises_lossless_json_error_not_recursion_error() -> None:
    deep = _nested_lists(100_000)
    for fn in (materialize, thaw, dumps, is_lossless):
        if fn is is_lossless:
            assert is_lossless(deep) is False
            continue
        with pytest.raises(LosslessJsonError, match="nesting deeper than 256"):
            fn(deep)


def test_a_frozen_dict_counts_its_own_depth_where_it_is_embedded() -> None:
    inner = materialize(_nested_dicts(200))
    assert materialize(_nested_lists(56, inner)) == _nested_tuples(56, inner)
    with pytest.raises(LosslessJsonError) as info:
        materialize(_nested_lists(57, inner))
    assert info.value.path == _long_path("[0]", 57)
    assert FrozenDict(a=_nested_lists(55, inner))["a"] is not None
    with pytest.raises(LosslessJsonError):
        FrozenDict(a=_nested_lists(56, inner))


def test_a_list_inside_itself_is_a_cycle() -> None:
    loop: list[object] = [1]
    loop.append(loop)
    with pytest.raises(LosslessJsonError) as info:
        materialize(loop)
    assert str(info.value) == "value[1]: cycle: value[1] refers back to value"


def test_a_dict_inside_itself_through_a_nested_path_is_a_cycle() -> None:
    outer: dict[str, Any] = {"a": {"b": [0]}}
    outer["a"]["b"].append(outer["a"])
    with pytest.raises(LosslessJsonError) as info:
        materialize({"root": outer})
    assert str(info.value) == ("value.root.a.b[1]: cycle: value.root.a.b[1] refers back to value.root.a")
    assert not is_lossless(outer)


def test_the_same_object_in_sibling_positions_is_not_a_cycle() -> None:
    shared = [1, {"x": "y"}]
    value = {"a": shared, "b": shared, "c": [shared, shared]}
    frozen = materialize(value)
    assert thaw(frozen) == value
    thawed = thaw(frozen)
    thawed["a"].append(2)
    assert thawed["b"] == [1, {"x": "y"}]  # thaw shares nothing mutable


# ---------------------------------------------------------------------------
# Exact types and identity


def test_true_stays_a_bool_and_one_stays_an_int() -> None:
    value = {"t": True, "one": 1, "f": 1.0, "list": [False, 0]}
    outs: list[Any] = [materialize(value), thaw(value), loads(dumps(value)), loads(dumps(value), frozen=False)]
    for out in outs:
        assert type(out["t"]) is bool
        assert type(out["one"]) is int
        assert type(out["f"]) is float
        assert [type(v) for v in out["list"]] == [bool, int]
    assert materialize(True) is True


def test_materialize_keeps_strings_as_they_are_even_10_mb_ones() -> None:
    for text in ("x" * 10_000_000, "é" * 10_000_000, "😀" * 2_500_000):
        start = time.perf_counter()
        frozen: Any = materialize({"content": text, "list": [text]})
        elapsed = time.perf_counter() - start
        assert frozen["content"] is text
        assert frozen["list"][0] is text
        assert elapsed < 0.5
    big = "x" * 10_000_000
    start = time.perf_counter()
    assert loads(dumps({"content": big}))["content"] == big
    assert time.perf_counter() - start < 1.0


def test_a_lone_surrogate_far_into_a_long_string_is_found() -> None:
    text = "é" * 3_000_000 + "\udbff" + "x"
    with pytest.raises(LosslessJsonError) as info:
        materialize([text])
    assert "U+DBFF at index 3000000" in info.value.problem


def test_materialize_returns_a_detached_copy() -> None:
    value: dict[str, Any] = {"a": [1, {"b": [2]}]}
    frozen = materialize(value)
    value["a"][1]["b"].append(3)
    value["c"] = 4
    assert thaw(frozen) == {"a": [1, {"b": [2]}]}
    assert frozen == FrozenDict({"a": (1, FrozenDict({"b": (2,)}))})


def test_materialize_reuses_frozen_parts_and_unchanged_tuples() -> None:
    inner = materialize({"x": [1, 2]})
    frozen: Any = materialize({"inner": inner, "tuple": (1, "a", inner)})
    assert frozen["inner"] is inner
    assert frozen["tuple"][2] is inner
    flat = (1, "a", None)
    assert materialize(flat) is flat
    mixed = (1, [2])
    assert materialize(mixed) == (1, (2,))


def test_a_key_whose_eq_starts_raising_after_the_dict_was_built_is_still_our_error() -> None:
    class Flaky:
        honest = True

        def __hash__(self) -> int:
            return 7

        def __eq__(self, other: object) -> bool:
            if Flaky.honest:
                return self is other
            raise RuntimeError("__eq__")

    colliding = {Flaky(): 1, Flaky(): 2}
    Flaky.honest = False
    for value in (colliding, {"a": [colliding]}, {"a": {"b": colliding, "c": [[1]]}}):
        with pytest.raises(LosslessJsonError, match="is not a string"):
            materialize(value)


def test_is_lossless_accepts_and_rejects_without_raising() -> None:
    assert is_lossless({"a": [1, "x", None]})
    assert is_lossless(FrozenDict(a=1))
    assert is_lossless("x") and is_lossless(None) and is_lossless(2**64 - 1)
    assert not is_lossless([math.nan])
    assert not is_lossless(Hostile())
    assert not is_lossless({Hostile.__name__: Sneaky()})


def test_frozen_lists_are_tuples_so_compare_thawed_values_as_the_docs_say() -> None:
    frozen = materialize({"a": [1]})
    assert frozen != {"a": [1]} and frozen == {"a": (1,)}
    assert thaw(frozen) == {"a": [1]}


def test_check_lossless_raises_what_materialize_raises_and_builds_nothing() -> None:
    for bad in ([1, math.nan], {"a": {"b": -0.0}}, {1: 2}):
        with pytest.raises(LosslessJsonError) as built:
            materialize(bad, "args")
        with pytest.raises(LosslessJsonError) as checked:
            check_lossless(bad, "args")
        assert checked.value.message == built.value.message
    assert check_lossless({"a": [1]}) is None and check_lossless(FrozenDict(a=1)) is None


# ---------------------------------------------------------------------------
# FrozenDict


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.__setitem__("a", 2),
        lambda d: d.__delitem__("a"),
        lambda d: d.clear(),
        lambda d: d.pop("a"),
        lambda d: d.pop("zz", None),
        lambda d: d.popitem(),
        lambda d: d.setdefault("b", 1),
        lambda d: d.update(b=1),
        lambda d: d.__ior__({"b": 1}),
    ],
)
def test_every_frozen_dict_mutator_raises(mutate: Any) -> None:
    frozen = FrozenDict(a=1)
    with pytest.raises(TypeError, match="FrozenDict is read-only"):
        mutate(frozen)
    assert frozen == {"a": 1}


def test_calling_a_frozen_dict_init_again_raises_and_changes_nothing() -> None:
    # dict's __init__ refilled the FrozenDict in place (unchecked, its
    # cached hash then stale), an empty one included.
    frozen: Any = FrozenDict(a=1)
    before = hash(frozen)
    empty: Any = FrozenDict()
    for target in (frozen, empty):
        with pytest.raises(TypeError, match=r"FrozenDict is read-only: __init__ cannot fill one again; make a new one"):
            target.__init__({"a": 2, "b": [3]}, c=math.nan)
        with pytest.raises(TypeError, match="FrozenDict is read-only"):
            target.__init__()
    assert frozen == {"a": 1} and hash(frozen) == before
    assert empty == {}
    # Building, copying and pickling never call it.
    assert FrozenDict({"x": {"y": [1]}}, z={}) == {"x": {"y": (1,)}, "z": {}}
    assert copy.deepcopy(frozen) is frozen
    assert pickle.loads(pickle.dumps(FrozenDict(x=[frozen]))) == {"x": ({"a": 1},)}


def test_frozen_dict_item_assignment_and_in_place_or_raise() -> None:
    frozen = FrozenDict(a=1)
    with pytest.raises(TypeError):
        frozen["b"] = 2
    with pytest.raises(TypeError):
        del frozen["a"]
    with pytest.raises(TypeError):
        frozen |= {"b": 2}


def test_frozen_dict_is_hashable_and_equal_to_the_same_plain_dict() -> None:
    a = FrozenDict({"a": 1, "b": [1, {"c": None}]})
    b = FrozenDict({"b": (1, FrozenDict(c=None)), "a": 1})
    assert a == b and hash(a) == hash(b)
    assert FrozenDict({"a": 1}) == {"a": 1}
    assert {"a": 1} == FrozenDict({"a": 1})
    assert len({a, b}) == 1
    assert FrozenDict(a=1) != FrozenDict(a=2)


def test_hashing_a_deep_frozen_dict_does_not_recurse() -> None:
    deep = materialize(_nested_dicts(MAX_JSON_DEPTH))

    def at_low_recursion_limit() -> int:
        limit = sys.getrecursionlimit()
        frame: Any = sys._getframe()
        depth = 0
        while frame is not None:
            depth, frame = depth + 1, frame.f_back
        sys.setrecursionlimit(depth + 60)
        try:
            return hash(deep)
        finally:
            sys.setrecursionlimit(limit)

    assert at_low_recursion_limit() == hash(materialize(_nested_dicts(MAX_JSON_DEPTH)))


def test_frozen_dict_materializes_what_it_is_given() -> None:
    frozen: Any = FrozenDict({"a": [1, {"b": [2]}]}, c=3)
    assert frozen == {"a": (1, {"b": (2,)}), "c": 3}
    assert type(frozen["a"][1]) is FrozenDict
    assert FrozenDict(frozen) is frozen
    assert FrozenDict() == {}
    assert FrozenDict([("x", [1])]) == {"x": (1,)}
    with pytest.raises(LosslessJsonError):
        FrozenDict(a=math.nan)
    assert FrozenDict.fromkeys(["a", "b"], 0) == {"a": 0, "b": 0}


def test_frozen_dict_repr_copy_and_pickle() -> None:
    frozen = FrozenDict({"a": 1, "b": [2]})
    assert repr(frozen) == "FrozenDict({'a': 1, 'b': (2,)})"
    assert frozen.copy() is frozen
    assert copy.copy(frozen) is frozen
    assert copy.deepcopy(frozen) is frozen
    nested = FrozenDict(x=[frozen, {"y": frozen}])
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        back: Any = pickle.loads(pickle.dumps(nested, protocol=protocol))
        assert back == nested
        assert type(back["x"][1]) is FrozenDict
        assert type(back) is FrozenDict
        assert hash(back) == hash(nested)


def test_a_frozen_dict_as_deep_as_allowed_pickles() -> None:
    # Pickling recursed through several frames per nested FrozenDict: a
    # lossless value of 250 levels raised RecursionError.
    plain: Any = {"leaf": [1.5, None]}
    for _ in range(MAX_JSON_DEPTH - 2):
        plain = {"a": plain}
    frozen = materialize(plain)
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        back: Any = pickle.loads(pickle.dumps(frozen, protocol=protocol))
        assert back == frozen
        assert type(back) is FrozenDict
        assert thaw(back) == plain


def test_frozen_dict_or_returns_a_frozen_dict_and_plain_or_a_plain_dict() -> None:
    frozen = FrozenDict(a=1)
    merged = frozen | {"b": [2]}
    assert type(merged) is FrozenDict and merged == {"a": 1, "b": (2,)}
    plain = {"b": 2} | frozen
    assert type(plain) is dict and plain == {"b": 2, "a": 1}
    with pytest.raises(LosslessJsonError):
        frozen | {"b": math.nan}


def test_frozen_dict_cannot_be_subclassed() -> None:
    with pytest.raises(TypeError, match="cannot be subclassed"):

        class Sub(FrozenDict):  # type: ignore[misc]
            pass


def test_orjson_serializes_a_frozen_dict_natively_in_insertion_order() -> None:
    frozen = materialize({"b": 1, "a": [{"d": 1, "c": 2}]})
    assert orjson.dumps(frozen) == b'{"b":1,"a":[{"d":1,"c":2}]}'


# ---------------------------------------------------------------------------
# dumps and loads


def test_dumps_keeps_key_order_or_sorts_on_request() -> None:
    value = {"b": 1, "a": {"d": 1, "c": 2}}
    assert dumps(value) == b'{"b":1,"a":{"d":1,"c":2}}'
    assert dumps(value, sort_keys=True) == b'{"a":{"c":2,"d":1},"b":1}'
    deep = _nested_lists(MAX_JSON_DEPTH - 1, {"b": 1, "a": 2})
    assert dumps(deep, sort_keys=True).endswith(b'{"a":2,"b":1}' + b"]" * 255)


@pytest.mark.parametrize("value", [math.nan, [math.inf], -0.0, {"a": Mode.FAST}, [Color.RED], [2**64], {1: 2}])
def test_dumps_rejects_what_orjson_would_write_lossily(value: object) -> None:
    with pytest.raises(LosslessJsonError):
        dumps(value)


def test_loads_returns_frozen_values_or_plain_ones() -> None:
    text = b'{"a": [1, 2.5, "x", null, true], "b": {"c": []}}'
    frozen = loads(text)
    assert type(frozen) is FrozenDict and frozen["a"] == (1, 2.5, "x", None, True)
    plain = loads(text.decode(), frozen=False)
    assert type(plain) is dict and type(plain["a"]) is list and type(plain["b"]) is dict
    assert loads(b"3") == 3 and loads("null") is None
    assert loads(bytearray(b"[1]")) == (1,) and loads(memoryview(b'"s"')) == "s"
    assert loads(b"18446744073709551615") == 2**64 - 1
    assert loads(b"[1e19, -1e300]") == (1e19, -1e300)


@pytest.mark.parametrize(
    ("text", "path", "problem"),
    [
        (b"[1,", "value", "invalid JSON text: unexpected end of data: line 1 column 4 (char 3)"),
        (b"", "value", "invalid JSON text: "),
        (b"NaN", "value", "invalid JSON text: "),
        (b"[1e400]", "value", "invalid JSON text: number is infinity"),
        (b'"\\ud800"', "value", "invalid JSON text: "),
        (b"-0.0", "value", "-0.0 is not lossless JSON"),
        (b'{"a": [1, -0e5]}', "value.a[1]", "-0.0 is not lossless JSON"),
        (b'{"a": 18446744073709551616}', "value.a", "int 2**64 is out of range"),
        (b"[1, -9223372036854775809]", "value[1]", "int -9223372036854775809 is out of range"),
        (b"123456789012345678901234567890", "value", "int 123456789012345678901234567890 is out"),
    ],
)
def test_loads_rejects_malformed_and_lossy_text_saying_where(text: bytes, path: str, problem: str) -> None:
    for frozen in (True, False):
        with pytest.raises(LosslessJsonError) as info:
            loads(text, frozen=frozen)
        assert info.value.path == path
        assert info.value.problem.startswith(problem)


def test_loads_rejects_text_nested_deeper_than_the_limit() -> None:
    assert loads(b"[" * 256 + b"]" * 256) == _nested_tuples(256, ())[0]
    with pytest.raises(LosslessJsonError) as info:
        loads(b"[" * 257 + b"]" * 257)
    assert info.value.path == _long_path("[0]", 256)
    assert info.value.problem == "nesting deeper than 256"
    with pytest.raises(LosslessJsonError) as info:  # past orjson's own limit
        loads(b"[" * 100_000 + b"]" * 100_000)
    assert info.value.path == "value"
    assert info.value.problem.startswith("nesting deeper than 256 (JSON text: ")


def test_loads_uses_the_path_it_is_given() -> None:
    with pytest.raises(LosslessJsonError) as info:
        loads(b'{"x": -0.0}', path="arguments")
    assert str(info.value) == "arguments.x: -0.0 is not lossless JSON"


def test_our_own_objects_are_told_in_words_the_user_knows_not_by_module_path() -> None:
    # (A value holding UNSET was told "dsh_actors.model._Unset is not lossless JSON".)
    from dsh_actors import UNSET, ToolCall, ToolOutput, ToolRuntime, define_tool, text
    from dsh_actors.model import ToolBatchInput

    with pytest.raises(LosslessJsonError) as info:
        materialize({"a": UNSET})
    assert info.value.problem == (
        "UNSET is not a value (it means none was given): return or pass the value itself; None is one"
    )
    with pytest.raises(LosslessJsonError) as info:
        materialize([ToolCall("c1", "t", "{}")])
    assert str(info.value) == "value[0]: ToolCall is not lossless JSON"

    unset = define_tool(
        name="unset",
        description="returns UNSET",
        parameters={},
        output=ToolOutput(schema={"type": "json"}, render=lambda args, value: [text("x")]),
        execute=lambda args, ctx: UNSET,
    )
    with ToolRuntime() as rt:
        rt.tools.register(unset)
        result = rt.tools.execute(ToolBatchInput(calls=[ToolCall("c1", "unset", "{}")])).results[0].result
    assert result.is_error and "dsh_actors" not in result.error.message and "_Unset" not in result.error.message
    assert "UNSET is not a value" in result.error.message
