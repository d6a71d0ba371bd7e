"""Guards (order, monotonic denial, fail closed) and the execution-mode
classification (SPEC section 4)."""

from __future__ import annotations

from typing import Any

import pytest

from dsh_actors.model import Agent
from dsh_actors.registry import check_guards, execution_mode

from .helpers import execution, tool


class Recorder:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def guard(self, label: str, reason: Any = None) -> Any:
        def fn(execution: Any) -> Any:
            self.calls.append(label)
            return reason

        fn.__qualname__ = label
        return fn


def test_guards_run_global_first_then_the_chain_farthest_first_each_in_registration_order(rt: Any) -> None:
    rec = Recorder()
    root = Agent("root")
    mid = Agent("mid", parent=root)
    leaf = Agent("leaf", parent=mid)
    rt.tools.scope(leaf).guard(rec.guard("leaf-1"))
    rt.tools.scope(mid).guard(rec.guard("mid-1"))
    rt.tools.guard(rec.guard("global-1"))
    rt.tools.scope(root).guard(rec.guard("root-1"))
    rt.tools.scope(mid).guard(rec.guard("mid-2"))
    rt.tools.guard(rec.guard("global-2"))
    assert rt.tools.check_guards(execution("x", leaf)) is None
    assert rec.calls == ["global-1", "global-2", "root-1", "mid-1", "mid-2", "leaf-1"]


def test_only_the_guards_on_the_callers_chain_run(rt: Any) -> None:
    rec = Recorder()
    a, b = Agent("a"), Agent("b")
    rt.tools.scope(a).guard(rec.guard("a"))
    rt.tools.scope(b).guard(rec.guard("b"))
    rt.tools.guard(rec.guard("g"))
    rt.tools.check_guards(execution("x", a))
    rt.tools.check_guards(execution("x", None))
    assert rec.calls == ["g", "a", "g"]


def test_the_first_reason_denies_and_later_guards_do_not_run(rt: Any) -> None:
    rec = Recorder()
    agent = Agent("a")
    rt.tools.guard(rec.guard("g"))
    rt.tools.scope(agent).guard(rec.guard("first", "no: first"))
    rt.tools.scope(agent).guard(rec.guard("second", "no: second"))
    assert rt.tools.check_guards(execution("x", agent)) == "no: first"
    assert rec.calls == ["g", "first"]


def test_a_scoped_guard_cannot_undo_a_global_denial(rt: Any) -> None:
    agent = Agent("a")
    rt.tools.guard(lambda e: "global says no")
    rt.tools.scope(agent).guard(lambda e: None)
    assert rt.tools.check_guards(execution("x", agent)) == "global says no"


def test_a_guard_sees_the_execution(rt: Any) -> None:
    seen: list[Any] = []
    rt.tools.guard(lambda e: seen.append((e.name, e.agent)) or None)
    agent = Agent("a")
    rt.tools.check_guards(execution("x", agent))
    assert seen == [("x", agent)]


def test_a_guard_that_raises_denies(rt: Any) -> None:
    def explode(execution: Any) -> str | None:
        raise ValueError("boom")

    later = Recorder()
    rt.tools.guard(explode)
    rt.tools.guard(later.guard("later"))
    # (Named as written, with the exception's type: the model reads it.)
    assert rt.tools.check_guards(execution("x")) == "guard explode failed: ValueError: boom"
    assert later.calls == []


@pytest.mark.parametrize("answer", [True, False, 0, 1, ["no"], b"no"])
def test_a_guard_returning_neither_a_string_nor_none_denies(rt: Any, answer: Any) -> None:
    rt.tools.guard(Recorder().guard("odd", answer))
    reason = rt.tools.check_guards(execution("x"))
    assert reason == f"guard odd failed: it returned {type(answer).__qualname__} (expected str or None)"


def test_a_guard_returning_an_empty_reason_still_denies(rt: Any) -> None:
    rt.tools.guard(Recorder().guard("terse", ""))
    assert rt.tools.check_guards(execution("x")) == "guard terse denied the call"


def test_a_guards_disposer_removes_exactly_that_guard(rt: Any) -> None:
    rec = Recorder()
    first = rt.tools.guard(rec.guard("first", "denied by first"))
    rt.tools.guard(rec.guard("second", "denied by second"))
    first()
    first()
    assert rt.tools.check_guards(execution("x")) == "denied by second"


def test_check_guards_the_read_function_equals_the_facade(rt: Any) -> None:
    agent = Agent("a")
    rt.tools.scope(agent).guard(lambda e: f"no {e.name}")
    assert check_guards(rt.state, execution("y", agent)) == rt.tools.check_guards(execution("y", agent)) == "no y"
    assert check_guards(rt.state, execution("y")) is None


# -- execution mode --------------------------------------------------------


class Truthy:
    def __bool__(self) -> bool:
        return True


def _raise(args: Any) -> bool:
    raise RuntimeError("classifier failed")


@pytest.mark.parametrize(
    ("classifier", "mode"),
    [
        (lambda args: True, "parallel"),
        (lambda args: False, "exclusive"),
        (None, "exclusive"),
        (_raise, "exclusive"),
        (lambda args: 1, "exclusive"),
        (lambda args: "yes", "exclusive"),
        (lambda args: Truthy(), "exclusive"),
        (lambda args: None, "exclusive"),
    ],
    ids=["true", "false", "missing", "raises", "one", "string", "truthy-object", "none"],
)
def test_only_an_exact_true_from_the_classifier_makes_a_call_parallel(rt: Any, classifier: Any, mode: str) -> None:
    from .helpers import raw_tool

    rt.tools.register(raw_tool("t", is_concurrency_safe=classifier))
    assert execution_mode(rt.state, "t", {}, None) == mode


def test_a_raw_classifier_that_raises_is_warned_about_once_per_tool_and_exception_class(
    rt: Any, library_logs: None
) -> None:
    # Before, a raw (subset-mode) definition's classifier failed silently:
    # its calls ran exclusive and nobody was told why.
    from loguru import logger

    from .helpers import raw_tool

    def classify(args: Any) -> bool:
        raise (KeyError if "q" in args else RuntimeError)("path")

    rt.tools.register(raw_tool("raw_classifier_that_raises", is_concurrency_safe=classify))
    records: list[Any] = []
    sink = logger.add(lambda message: records.append(message.record), level="DEBUG")
    try:
        for args in ({}, {}, {"q": "x"}):
            assert execution_mode(rt.state, "raw_classifier_that_raises", args, None) == "exclusive"
    finally:
        logger.remove(sink)
    assert [r["level"].name for r in records] == ["WARNING", "DEBUG", "WARNING"]
    assert records[0]["message"] == (
        'tool "raw_classifier_that_raises": is_concurrency_safe (@tool\'s concurrency_safe) raised RuntimeError: '
        'path, so its call runs exclusive; it gets the arguments as frozen JSON, not typed values (args["path"], '
        "not args.path): fix it to answer True or False for any valid arguments"
    )
    assert records[2]["message"].startswith(
        'tool "raw_classifier_that_raises": is_concurrency_safe (@tool\'s concurrency_safe) raised KeyError: '
    )


def test_an_unknown_tool_is_exclusive(rt: Any) -> None:
    assert execution_mode(rt.state, "nope", {}, None) == "exclusive"


def test_invalid_arguments_of_a_define_tool_tool_are_exclusive(rt: Any) -> None:
    rt.tools.register(tool("t", is_concurrency_safe=lambda args: True))
    assert execution_mode(rt.state, "t", {"message": "ok"}, None) == "parallel"
    assert execution_mode(rt.state, "t", {"message": 3}, None) == "exclusive"


def test_the_classifier_gets_the_arguments(rt: Any) -> None:
    from .helpers import raw_tool

    rt.tools.register(raw_tool("t", is_concurrency_safe=lambda args: args.get("safe") is True))
    assert execution_mode(rt.state, "t", {"safe": True}, None) == "parallel"
    assert execution_mode(rt.state, "t", {"safe": False}, None) == "exclusive"


def test_the_mode_follows_the_definition_the_scope_executes(rt: Any) -> None:
    from .helpers import raw_tool

    agent = Agent("a")
    rt.tools.register(raw_tool("t", is_concurrency_safe=lambda args: True))
    rt.tools.scope(agent).register(raw_tool("t", is_concurrency_safe=lambda args: False))
    assert execution_mode(rt.state, "t", {}, None) == "parallel"
    assert execution_mode(rt.state, "t", {}, agent) == "exclusive"


def test_a_conditional_tool_without_a_tool_set_is_exclusive(rt: Any) -> None:
    from .helpers import raw_tool

    rt.tools.register(raw_tool("t", is_concurrency_safe=lambda args: True), when=lambda ctx: True)
    assert execution_mode(rt.state, "t", {}, None) == "exclusive"
