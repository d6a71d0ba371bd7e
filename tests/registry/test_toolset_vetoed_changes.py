"""A resolution racing a ``tools/change`` that a listener vetoes: the
resolved set reads the registry as committed, so it neither misses a tool
that stays visible nor holds the vetoed one, and a rolled-back change
withdraws nothing from a live set."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from dsh_actors.errors import RegistrationError
from dsh_actors.model import Agent, ToolRestriction

from .helpers import WAIT, activation, names, tool


class Veto(Exception):
    pass


@contextmanager
def change_in_flight(rt: Any, change: Callable[[], object], *, veto: bool = True) -> Iterator[list[BaseException]]:
    """Run ``change`` on a helper thread and hold it inside its first
    ``tools/change`` listener (published, not yet accepted) for the body of
    the block; then the listener raises (``veto``) or returns. Later changes
    pass the listener. Yields the errors ``change`` raised (once the block
    exits)."""
    entered, release = threading.Event(), threading.Event()
    armed = [True]

    def listener() -> None:
        if not armed:
            return
        armed.clear()
        entered.set()
        assert release.wait(WAIT)
        if veto:
            raise Veto("vetoed")

    errors: list[BaseException] = []

    def run() -> None:
        try:
            change()
        except BaseException as exc:  # noqa: BLE001 - checked by the test
            errors.append(exc)

    off = rt.events.on("tools/change", listener)
    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert entered.wait(WAIT)
        yield errors
    finally:
        release.set()
        thread.join(WAIT)
        off()
    assert not thread.is_alive()


def vetoed(errors: list[BaseException]) -> bool:
    return len(errors) == 1 and isinstance(errors[0], RegistrationError) and isinstance(errors[0].__cause__, Veto)


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
