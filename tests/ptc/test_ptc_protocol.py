"""The wire protocol's pieces: line framing with a size limit, the
worker-side lossless JSON check, exit descriptions."""

from __future__ import annotations

import gc
import inspect
import re
import sys
import warnings
from typing import Any

import pytest

from dsh_actors.errors import LosslessJsonError
from dsh_actors.json import check_lossless, path_for_index, path_for_key
from executors.ptc.protocol import FrameTooLong, LineFramer, json_problem
from executors.ptc.workers import exit_description

from .helpers import code_of, install, run_code


def test_the_framer_splits_lines_across_chunks() -> None:
    framer = LineFramer(10)
    assert framer.feed(b'{"a"') == []
    assert framer.feed(b':1}\n{"b":2}\n{"c') == [b'{"a":1}', b'{"b":2}']
    assert framer.pending == 3
    assert framer.feed(b'":3}\n') == [b'{"c":3}']


def test_the_framer_refuses_a_line_past_its_limit_even_before_it_ends() -> None:
    with pytest.raises(FrameTooLong):
        LineFramer(8).feed(b"0123456789")
    with pytest.raises(FrameTooLong):
        LineFramer(8).feed(b"0123456789\n")


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"a": [1, 2.5, None, True, "x"]}, None),
        ([[], [], {}], None),
        ({1: "x"}, "value: a dict key must be a str, not int 1"),
        ({"a": {1, 2}}, "value.a: a set is not JSON"),
        ([float("inf")], "value[0]: the float inf is not JSON"),
        (-0.0, "value: -0.0 is not lossless JSON"),
        (2**64, "value: the int 2**64 is outside [-2**63, 2**64-1]"),
        # Past 4,300 digits str() raises: an int is shown as the core shows it.
        ([10**5000], "value[0]: an int of 16610 bits is outside [-2**63, 2**64-1]"),
        ({10**5000: 1}, "value: a dict key must be a str, not int of 16610 bits"),
        ({(1, 10**5000): 1}, "value: a dict key must be a str, not tuple"),
        ({b"k": 1}, "value: a dict key must be a str, not bytes b'k'"),
        ({"bad key": "\ud800"}, 'value["bad key"]: a str with a lone surrogate is not JSON'),
        ({"a": {"ok": 1, "\ud800": 1}}, 'value.a: the dict key "\\ud800" has a lone surrogate and is not JSON'),
    ],
)
def test_the_worker_checks_values_with_the_cores_rules(value: Any, problem: str | None) -> None:
    found = json_problem(value)
    if problem is None:
        assert found is None
    else:
        assert found is not None and found.startswith(problem)


def test_the_json_check_finds_cycles_but_accepts_shared_siblings() -> None:
    shared: list[Any] = []
    assert json_problem([shared, shared]) is None
    loop: list[Any] = []
    loop.append(loop)
    assert json_problem(loop) == "value[0]: a value that contains itself is not JSON"
    deep: Any = 0
    for _ in range(300):
        deep = [deep]
    assert "nesting deeper than 250 levels" in (json_problem(deep) or "")


def test_a_long_path_is_shortened_as_the_cores_are() -> None:
    # The worker cannot import the core: the two must write the same path.
    deep: Any = float("nan")
    steps: list[str | int] = []
    for level in range(30):
        deep = {"items": deep} if level % 2 else [0, deep]
        steps.append("items" if level % 2 else 1)
    core = "result"
    for step in reversed(steps):  # root first
        core = path_for_key(core, step) if type(step) is str else path_for_index(core, step)
    assert " … (14 more) … " in core
    assert json_problem(deep, "result") == f"{core}: the float nan is not JSON"
    assert json_problem([[{"a": [float("inf")]}]]) == "value[0][0].a[0]: the float inf is not JSON"


@pytest.mark.parametrize(
    "key",
    ["name", "content-type", "it's", 'x"y', "a\nb", "tab\there", "é-ü", "k" * 64, "k" * 65, "é" * 300],
    ids=lambda key: repr(key[:20]) + (f"-{len(key)}" if len(key) > 20 else ""),
)
def test_a_dict_key_is_a_path_step_as_the_cores_is(key: str) -> None:
    # The worker cannot import the core: the two must write a key's step alike.
    with pytest.raises(LosslessJsonError) as caught:
        check_lossless({"a": {key: float("nan")}})
    core = caught.value.path
    assert core == path_for_key(path_for_key("value", "a"), key)
    assert json_problem({"a": {key: float("nan")}}) == f"{core}: the float nan is not JSON"


@pytest.mark.parametrize(
    "key",
    ["\ud800", "é\udfff", "x" * 50 + "\ud800", "\ud800" + "y" * 60],
    ids=["lone", "after-non-ascii", "past-the-cut", "long"],
)
def test_a_dict_key_with_a_lone_surrogate_is_refused_as_the_core_refuses_it(key: str) -> None:
    # The worker cannot import the core: the two must name the dict and the key alike.
    with pytest.raises(LosslessJsonError) as caught:
        check_lossless({"a": {"ok": 1, key: 1}})
    shown = re.fullmatch(r'dict key (".*") has a lone surrogate \(.*', caught.value.problem)
    assert shown is not None, caught.value.problem
    expected = f"{caught.value.path}: the dict key {shown[1]} has a lone surrogate and is not JSON"
    assert json_problem({"a": {"ok": 1, key: 1}}) == expected


@pytest.mark.parametrize(
    "value",
    [2**64, -(2**63) - 1, -(2**64), 3**100, 2**256 + 1, 3**200, 2**300, 10**5000, -(10**5000)],
    ids=lambda value: f"{'-' if value < 0 else ''}{value.bit_length()}-bits",
)
def test_an_int_is_shown_as_the_cores_lossless_json_errors_show_it(value: int) -> None:
    # The worker cannot import the core: the two must show an int alike.
    with pytest.raises(LosslessJsonError) as caught:
        check_lossless(value)
    core = caught.value.problem
    assert core.startswith("int ") and core.endswith(" is out of range [-2**63, 2**64-1]"), core
    shown = core[len("int ") : -len(" is out of range [-2**63, 2**64-1]")]
    article = "an int" if shown.startswith("of ") else "the int"
    assert json_problem(value) == f"value: {article} {shown} is outside [-2**63, 2**64-1]"


async def _lookup() -> None:
    """A coroutine function of the program's own."""


def test_a_coroutine_is_named_as_a_call_that_was_not_awaited_and_closed() -> None:
    never_started = _lookup()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Python's "never awaited" would be an error here
        assert json_problem({"a": [never_started]}) == "value.a[0]: the call to _lookup() was not awaited: await it"
        assert inspect.getcoroutinestate(never_started) == inspect.CORO_CLOSED
        del never_started
        gc.collect()


def test_exit_descriptions_name_the_signal() -> None:
    assert exit_description(3) == "exit code 3"
    assert exit_description(-9) == "killed by signal 9 (SIGKILL)"


def test_a_worker_of_another_protocol_version_is_refused(rt: Any) -> None:
    install(
        rt,
        timeout_ms=2000,
        worker_command=[sys.executable, "-c", 'print(\'{"t":"ready","v":99}\', flush=True); input()'],
    )
    result = run_code(rt, "return 1")
    assert code_of(result) == "CODE_RUN_FAILED"
    assert result.error.message.startswith(
        "code run failed (protocol): the worker broke the protocol: the worker speaks version 99"
    )
