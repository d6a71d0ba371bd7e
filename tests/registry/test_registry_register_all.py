"""``register_all`` (``RegisterAll``): several registrations and
withdrawals of one layer as ONE change, which no reader sees in part."""

from __future__ import annotations

from typing import Any

import pytest

from dsh_actors.errors import InvalidTypeError, RegistrationError
from dsh_actors.messages import RegisterAll, Unregister
from dsh_actors.model import Agent, ToolRestriction
from dsh_actors.registry import Registration

from .helpers import WAIT, ChangeCounter, Veto, names, tool


def test_a_replaced_tool_is_never_missing_and_the_change_is_announced_once(rt: Any) -> None:
    undo_a = rt.tools.register(tool("a"))
    undo_b = rt.tools.register(tool("b"))
    newer = tool("a", description="the newer a")
    seen: list[tuple[str | None, str | None, list[str]]] = []

    def on_change() -> None:
        # While the change is announced, a call reads the registry as it was
        # before it (committed); inspection reads see it (published).
        callable_now = rt.tools.executable("a")
        published = rt.tools.get("a")
        seen.append(
            (
                None if callable_now is None else callable_now.description,
                None if published is None else published.description,
                sorted(rt.tools.model_tools().known_names),
            )
        )

    rt.events.on("tools/change", on_change)
    disposers = rt.tools.register_all([newer, tool("c")], replacing=[undo_a, undo_b])
    assert seen == [("the a tool", "the newer a", ["a", "b"])]
    assert rt.tools.get("a") is newer
    assert names(rt.tools.definitions()) == ["a", "c"]
    assert undo_a.disposed and undo_b.disposed  # spent: their registrations went with the change
    undo_a()  # does nothing: the newer "a" stays
    assert rt.tools.get("a") is newer
    disposers[1]()  # each disposer withdraws exactly its own
    assert names(rt.tools.definitions()) == ["a"]
    disposers[0]()
    assert rt.tools.definitions() == []


def test_every_refused_definition_is_named_and_nothing_changes(rt: Any) -> None:
    undo_a = rt.tools.register(tool("a"))
    rt.tools.register(tool("taken"))
    counter = ChangeCounter()
    rt.events.on("tools/change", counter)
    with pytest.raises(RegistrationError) as caught:
        rt.tools.register_all(
            [tool("a"), tool("taken"), tool("twice"), tool("twice"), tool("run_code")], replacing=[undo_a]
        )
    err = caught.value
    assert [e.tool for e in err.errors] == ["taken", "twice", "run_code"]
    assert err.message == "; ".join(e.message for e in err.errors)
    assert err.errors[0].message.startswith(
        'cannot register tool "taken": a tool with this name is already registered in the global scope'
    )
    assert err.errors[1].message == (
        'cannot register tool "twice": another of the definitions registered with it has this name'
    )
    assert counter.count == 0
    assert names(rt.tools.definitions()) == ["a", "taken"]
    assert not undo_a.disposed  # the change was refused: its disposer still undoes its registration


def test_a_listener_that_raises_rolls_the_whole_change_back(rt: Any) -> None:
    undo_a = rt.tools.register(tool("a"))

    def veto() -> None:
        raise Veto("not now")

    off = rt.events.on("tools/change", veto)
    with pytest.raises(RegistrationError) as caught:
        rt.tools.register_all([tool("a", description="newer"), tool("b")], replacing=[undo_a])
    assert caught.value.message == (
        "cannot change the tools of the global scope: a tools/change listener raised Veto: not now; "
        "the change was rolled back"
    )
    assert isinstance(caught.value.__cause__, Veto) and caught.value.errors == ()
    off()
    assert names(rt.tools.definitions()) == ["a"] and rt.tools.get("a").description == "the a tool"
    assert not undo_a.disposed
    undo_a()
    assert rt.tools.definitions() == []


def test_replacing_takes_registration_disposers_of_the_same_layer(rt: Any) -> None:
    agent = Agent("main")
    undo_global = rt.tools.register(tool("a"))
    with pytest.raises(RegistrationError) as caught:
        rt.tools.scope(agent).register_all([tool("b")], replacing=[undo_global])
    assert caught.value.message == (
        'cannot replace tool "a" in agent "main": it is registered in the global scope (replace it in its own '
        "scope: rt.tools.scope(agent) for an agent's, rt.tools for the global one)"
    )
    lift = rt.tools.scope(agent).restrict(ToolRestriction(deny=["a"]))
    with pytest.raises(InvalidTypeError, match=r"takes the disposers register\(\) or register_all\(\) returned"):
        rt.tools.scope(agent).register_all([tool("b")], replacing=[lift])
    with pytest.raises(InvalidTypeError, match=r"one definition: register\(definition\)"):
        rt.tools.register_all(tool("b"))
    undo_global()
    # A disposer already called withdraws nothing more: it is skipped.
    rt.tools.register_all([tool("a")], replacing=[undo_global])
    assert names(rt.tools.definitions()) == ["a"]


def test_the_message_registers_and_withdraws_as_the_facade_does(rt: Any) -> None:
    first, second = rt.registry.ask(RegisterAll((tool("a"), tool("b"))), timeout=WAIT)
    assert isinstance(first, Registration) and isinstance(second, Registration)
    [newer] = rt.registry.ask(RegisterAll((tool("b", description="newer"),), replacing=(second,)), timeout=WAIT)
    assert rt.tools.get("b") is newer.definition
    assert rt.registry.ask(Unregister(second), timeout=WAIT) is False  # gone with the change
    assert rt.registry.ask(RegisterAll((), replacing=(first, newer)), timeout=WAIT) == ()
    assert rt.tools.definitions() == []
