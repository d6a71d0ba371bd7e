"""A resolution racing a ``tools/change`` that a listener vetoes: the
resolved set reads the registry as committed, so it neither misses a tool
that stays visible nor holds the vetoed one, and a rolled-back change
withdraws nothing from a live set."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from dsh_actors.model import Agent, ToolRestriction

from .helpers import activation, change_in_flight, names, tool, vetoed

AGENT = Agent("main")


def unregister_a(rt: Any) -> Callable[[], object]:
    return rt.tools.register(tool("a"))  # type: ignore[no-any-return]


def restrict_a(rt: Any) -> Callable[[], object]:
    rt.tools.register(tool("a"))
    return lambda: rt.tools.scope(AGENT).restrict(ToolRestriction(deny=["a"]))


def shadow_a(rt: Any) -> Callable[[], object]:
    rt.tools.register(tool("a"))
    return lambda: rt.tools.scope(AGENT).register(tool("a", description="the shadowing a"))


@pytest.mark.parametrize("setup", [unregister_a, restrict_a, shadow_a], ids=["unregister", "restrict", "shadow"])
def test_a_set_resolved_while_a_vetoed_change_is_announced_keeps_the_tool_that_stays_visible(
    rt: Any, setup: Callable[[Any], Callable[[], object]]
) -> None:
    change = setup(rt)
    rt.tools.register(tool("b"))
    kept = rt.tools.get("a", AGENT)
    with change_in_flight(rt, change) as errors:
        ts = rt.tools.resolve(activation(AGENT))
    try:
        assert vetoed(errors)
        assert rt.tools.get("a", AGENT) is kept  # rolled back
        assert names(ts.view(AGENT)) == ["a", "b"]
        assert rt.tools.executable("a", AGENT, ts) is kept
    finally:
        ts.dispose()


def test_a_set_resolved_while_a_vetoed_registration_is_announced_never_holds_it(rt: Any) -> None:
    asked: list[str] = []

    def when(ctx: Any) -> bool:
        asked.append("c")
        return True

    rt.tools.register(tool("b"))
    with change_in_flight(rt, lambda: rt.tools.scope(AGENT).register(tool("c"), when=when)) as errors:
        ts = rt.tools.resolve(activation(AGENT))
    try:
        assert vetoed(errors)
        assert names(ts.view(AGENT)) == ["b"]
        assert rt.tools.executable("c", AGENT, ts) is None
        assert asked == []  # an unaccepted registration is no candidate: its condition never ran
    finally:
        ts.dispose()


def test_a_change_committed_while_another_is_vetoed_withdraws_only_what_it_hid(rt: Any) -> None:
    rt.tools.register(tool("a"))
    ts = rt.tools.resolve(activation(AGENT))
    try:
        # The agent's restriction is announced (and later vetoed) while a
        # global registration commits and tells the live sets what is gone.
        with change_in_flight(rt, lambda: rt.tools.scope(AGENT).restrict(ToolRestriction(deny=["a"]))) as errors:
            rt.tools.register(tool("later"))
        assert vetoed(errors)
        assert names(rt.tools.definitions(AGENT)) == ["a", "later"]
        assert names(ts.view(AGENT)) == ["a"]
    finally:
        ts.dispose()


def test_a_set_resolved_while_an_accepted_change_is_announced_honours_it_once_committed(rt: Any) -> None:
    rt.tools.register(tool("a"))
    rt.tools.register(tool("b"))
    with change_in_flight(
        rt, lambda: rt.tools.scope(AGENT).restrict(ToolRestriction(deny=["a"])), veto=False
    ) as errors:
        ts = rt.tools.resolve(activation(AGENT))
    try:
        assert errors == []
        assert names(ts.view(AGENT)) == ["b"]  # withdrawn when the restriction was committed
    finally:
        ts.dispose()
