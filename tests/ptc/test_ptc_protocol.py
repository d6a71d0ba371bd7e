"""The wire protocol's pieces: line framing with a size limit, the
worker-side lossless JSON check, exit descriptions."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from dsh_actors.json import path_for_index, path_for_key
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
        (2**64, "value: the int 18446744073709551616 is outside [-2**63, 2**64-1]"),
        ({"bad key": "\ud800"}, "value['bad key']: a str with a lone surrogate is not JSON"),
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
