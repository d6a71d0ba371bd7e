"""What the registry's actors keep alive after their last message, and what
a registry write that timed out leaves behind (nothing)."""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from dsh_actors.model import Agent, ToolRestriction
from dsh_actors.session import Session

from .helpers import WAIT, activation, tool


def _freed_event(obj: object) -> threading.Event:
    freed = threading.Event()
    weakref.finalize(obj, freed.set)
    return freed


def test_the_registry_does_not_keep_the_last_resolved_agent_and_its_session_alive(rt: Any) -> None:
    # pykka's loop kept the last message it took (here ResolveToolSet: the
    # agent, and the reply holding the set) until the registry's next
    # message, however long that took.
    rt.tools.register(tool("a"))
    agent = Agent("main", session=Session())
    freed = _freed_event(agent.session)
    with rt.tools.resolve(activation(agent)):
        pass
    del agent
    gc.collect()
    assert freed.wait(WAIT)


def test_the_registry_does_not_keep_an_agent_whose_scope_was_emptied_alive(rt: Any) -> None:
    # (The last message was the scope actor's idle notice naming the agent.)
    rt.tools.register(tool("a"))
    agent = Agent("main", session=Session())
    freed = _freed_event(agent.session)
    rt.tools.scope(agent).restrict(ToolRestriction(deny=["a"]))()
    del agent
    gc.collect()
    assert freed.wait(WAIT)


@pytest.mark.parametrize("read", ["definitions", "executable"])
def test_an_agent_whose_own_tools_were_disposed_is_freed_though_its_view_was_read(rt: Any, read: str) -> None:
    # The view cached for the agent (an inspection read, or the lookup of a
    # call) held its own registration, whose scope is the agent, until some
    # later read replaced the cache.
    rt.tools.register(tool("a"))
    agent = Agent("main", session=Session())
    freed = _freed_event(agent.session)
    undo = rt.tools.scope(agent).register(tool("own"))
    if read == "definitions":
        assert [d.name for d in rt.tools.definitions(agent)] == ["a", "own"]
    else:
        assert rt.tools.executable("own", agent) is not None
    del agent
    undo()  # no registry read after it
    gc.collect()
    assert freed.wait(WAIT)


@contextmanager
def _registry_held_by_a_listener(rt: Any, monkeypatch: Any) -> Iterator[Callable[[], list[BaseException]]]:
    """A global ``register("first")``, on a thread, whose ``tools/change``
    listener blocks the global scope actor until the block exits; writes
    wait at most 0.2s meanwhile. Yields ``first()``: join that thread, and
    what its register raised."""
    monkeypatch.setattr("dsh_actors.registry.service.ASK_TIMEOUT", 0.2)
    entered, released = threading.Event(), threading.Event()

    def listener() -> None:
        if not entered.is_set():
            entered.set()
            released.wait(WAIT)

    rt.events.on("tools/change", listener)
    outcome: list[BaseException] = []

    def first() -> None:
        try:
            rt.tools.register(tool("first"))
        except BaseException as exc:  # noqa: BLE001 - inspected by the test
            outcome.append(exc)

    thread = threading.Thread(target=first)
    thread.start()
    assert entered.wait(WAIT)

    def joined() -> list[BaseException]:
        thread.join(WAIT)
        return outcome

    try:
        yield joined
    finally:
        released.set()
        thread.join(WAIT)
    rt.tools.register(tool("sync"))  # the global actor handled everything before it


def test_a_write_that_timed_out_before_it_started_is_never_applied(rt: Any, monkeypatch: Any) -> None:
    # Before, the caller got TimeoutError (and no disposer), and the queued
    # registration was applied later anyway: a tool it could not unregister.
    with _registry_held_by_a_listener(rt, monkeypatch):
        with pytest.raises(TimeoutError, match=r"did not start within 0\.2s .*; nothing was changed$"):
            rt.tools.register(tool("late"))
    assert rt.tools.get("late") is None
    rt.tools.register(tool("late"))  # and the name is free


def test_a_write_that_timed_out_while_being_applied_is_undone_once_applied(rt: Any, monkeypatch: Any) -> None:
    seen, gone = threading.Event(), threading.Event()

    def watch() -> None:
        if rt.tools.get("first") is not None:
            seen.set()
        elif seen.is_set():
            gone.set()

    rt.events.on("tools/change", watch)
    with _registry_held_by_a_listener(rt, monkeypatch) as first:
        (error,) = first()  # it timed out while its listener ran
        assert isinstance(error, TimeoutError)
        assert "did not finish within 0.2s" in str(error)
    assert gone.wait(WAIT)  # its caller got TimeoutError, not a disposer: it is undone
    assert rt.tools.get("first") is None


def test_an_undo_that_timed_out_before_it_started_leaves_the_disposer_armed(rt: Any, monkeypatch: Any) -> None:
    undo = rt.tools.register(tool("kept"))
    with _registry_held_by_a_listener(rt, monkeypatch):
        with pytest.raises(TimeoutError, match="nothing was changed"):
            undo()
    assert rt.tools.get("kept") is not None
    undo()
    assert rt.tools.get("kept") is None
