"""``tools/change`` on every effect, rollback when a listener raises, and
disposers that are idempotent, exact, and harmless after ``stop()``."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from dsh_actors.errors import RegistrationError
from dsh_actors.events import Disposer
from dsh_actors.model import Agent, ToolRestriction
from dsh_actors.runtime import ToolRuntime

from .helpers import WAIT, ChangeCounter, names, round_trip, tool


def test_tools_change_is_emitted_on_register_unregister_restrict_and_lift(rt: Any) -> None:
    counter = ChangeCounter()
    rt.events.on("tools/change", counter)
    undo = rt.tools.register(tool("a"))
    assert counter.count == 1
    lift = rt.tools.scope(Agent("x")).restrict(ToolRestriction(deny=["a"]))
    assert counter.count == 2
    lift()
    assert counter.count == 3
    undo()
    assert counter.count == 4
    scoped_undo = rt.tools.scope(Agent("y")).register(tool("b"))
    scoped_undo()
    assert counter.count == 6


def test_tools_change_reaches_scoped_listeners_of_any_scope(rt: Any) -> None:
    counter = ChangeCounter()
    rt.events.on("tools/change", counter, scope=Agent("elsewhere"))
    rt.tools.scope(Agent("somewhere")).register(tool("a"))
    rt.tools.register(tool("b"))
    assert counter.count == 2


def test_disposers_that_change_nothing_emit_nothing(rt: Any) -> None:
    counter = ChangeCounter()
    undo = rt.tools.register(tool("a"))
    rt.events.on("tools/change", counter)
    undo()
    undo()
    assert counter.count == 1


def test_guards_and_executors_do_not_emit_tools_change(rt: Any) -> None:
    from .helpers import RecordingExecutor

    counter = ChangeCounter()
    rt.events.on("tools/change", counter)
    rt.tools.guard(lambda e: None)()
    rt.tools.set_executor(RecordingExecutor("x"))()
    assert counter.count == 0


def test_a_rejected_write_emits_nothing(rt: Any) -> None:
    counter = ChangeCounter()
    rt.events.on("tools/change", counter)
    with pytest.raises(RegistrationError):
        rt.tools.register(tool("run_code"))
    with pytest.raises(RegistrationError):
        rt.tools.scope(Agent("a")).restrict(ToolRestriction(deny=["nope"]))
    assert counter.count == 0


def test_a_listener_sees_the_change_already_published(rt: Any) -> None:
    seen: list[list[str]] = []
    rt.events.on("tools/change", lambda: seen.append(names(rt.tools.definitions())))
    rt.tools.register(tool("a"))
    assert seen == [["a"]]


def test_listeners_run_on_a_scope_actor_thread_not_the_callers(rt: Any) -> None:
    threads: list[threading.Thread] = []
    rt.events.on("tools/change", lambda: threads.append(threading.current_thread()))
    rt.tools.register(tool("a"))
    assert threads and threads[0] is not threading.current_thread()
    assert threads[0].name == "dsh-ScopeActor"


# -- rollback --------------------------------------------------------------


class Boom(Exception):
    pass


def raising_listener(when: Any = None) -> Any:
    def listener() -> None:
        if when is None or when():
            raise Boom("listener failed")

    return listener


def test_a_raising_listener_rolls_a_registration_back_and_the_caller_gets_the_error(rt: Any) -> None:
    rt.events.on("tools/change", raising_listener())
    with pytest.raises(RegistrationError) as err:
        rt.tools.register(tool("a"))
    assert str(err.value) == (
        'cannot register tool "a": a tools/change listener raised Boom: listener failed; '
        "the registration was rolled back"
    )
    assert isinstance(err.value.__cause__, Boom)
    assert rt.tools.get("a") is None


def test_a_rolled_back_name_can_be_registered_once_the_listener_is_gone(rt: Any) -> None:
    off = rt.events.on("tools/change", raising_listener())
    with pytest.raises(RegistrationError):
        rt.tools.register(tool("a"))
    off()
    rt.tools.register(tool("a"))
    assert names(rt.tools.definitions()) == ["a"]


def test_a_raising_listener_rolls_a_restriction_back(rt: Any) -> None:
    rt.tools.register(tool("a"))
    agent = Agent("main")
    rt.events.on("tools/change", raising_listener())
    with pytest.raises(RegistrationError, match="the restriction was rolled back") as err:
        rt.tools.scope(agent).restrict(ToolRestriction(deny=["a"]))
    assert isinstance(err.value.__cause__, Boom)
    assert names(rt.tools.definitions(agent)) == ["a"]


def test_a_raising_listener_rolls_an_unregistration_back_and_the_disposer_stays_armed(rt: Any) -> None:
    undo = rt.tools.register(tool("a"))
    fail = [True]
    off = rt.events.on("tools/change", raising_listener(lambda: fail[0]))
    with pytest.raises(RegistrationError, match='cannot unregister tool "a" from the global scope') as err:
        undo()
    assert isinstance(err.value.__cause__, Boom)
    assert names(rt.tools.definitions()) == ["a"]
    assert not undo.disposed
    fail[0] = False
    undo()
    assert rt.tools.get("a") is None
    assert undo.disposed
    off()


def test_a_raising_listener_rolls_a_lift_back(rt: Any) -> None:
    rt.tools.register(tool("a"))
    agent = Agent("main")
    lift = rt.tools.scope(agent).restrict(ToolRestriction(deny=["a"]))
    off = rt.events.on("tools/change", raising_listener())
    with pytest.raises(RegistrationError, match="the restriction stays in place"):
        lift()
    assert names(rt.tools.definitions(agent)) == []
    off()
    lift()
    assert names(rt.tools.definitions(agent)) == ["a"]


def test_listeners_that_saw_a_rolled_back_change_are_told_again(rt: Any) -> None:
    views: list[list[str]] = []
    rt.events.on("tools/change", lambda: views.append(names(rt.tools.definitions())))
    rt.events.on("tools/change", raising_listener())
    later: list[str] = []
    rt.events.on("tools/change", lambda: later.append("called"))
    with pytest.raises(RegistrationError):
        rt.tools.register(tool("a"))
    assert views == [["a"], []]  # saw it, then saw it undone
    assert later == []  # never reached


# -- writes from a listener ----------------------------------------------------


def test_a_write_from_a_tools_change_listener_fails_clearly_instead_of_deadlocking(rt: Any) -> None:
    errors: list[BaseException] = []

    def listener() -> None:
        try:
            rt.tools.register(tool("nested"))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    rt.events.on("tools/change", listener)
    rt.tools.register(tool("a"))
    assert len(errors) == 1
    assert isinstance(errors[0], RegistrationError)
    assert str(errors[0]) == (
        "the registry cannot be changed from a tools/change listener (it runs on the scope actor that would "
        "apply the change): make the change after the write being announced returns, from the code that made "
        "that write or from a thread this listener does not wait for (a disposer called here is queued instead)"
    )
    assert names(rt.tools.definitions()) == ["a"]


def test_a_disposer_called_from_a_listener_is_queued_and_applied_after_the_change(rt: Any) -> None:
    undo_b = rt.tools.register(tool("b"))
    done = threading.Event()
    seen: list[list[str]] = []

    def listener() -> None:
        seen.append(names(rt.tools.definitions()))
        if len(seen) == 1:
            undo_b()  # queued: returns at once
        else:
            done.set()

    rt.events.on("tools/change", listener)
    rt.tools.register(tool("a"))
    assert done.wait(WAIT)
    assert seen == [["b", "a"], ["a"]]
    assert undo_b.disposed


# -- disposers -----------------------------------------------------------------


def test_every_effect_returns_a_disposer(rt: Any) -> None:
    from .helpers import RecordingExecutor

    rt.tools.register(tool("a"))
    effects = [
        rt.tools.register(tool("b")),
        rt.tools.scope(Agent("x")).restrict(ToolRestriction(deny=["a"])),
        rt.tools.guard(lambda e: None),
        rt.tools.set_executor(RecordingExecutor("r")),
    ]
    assert all(isinstance(d, Disposer) for d in effects)


def test_a_disposer_unregisters_exactly_its_own_registration(rt: Any) -> None:
    agent = Agent("a")
    undo_global = rt.tools.register(tool("x"))
    scoped = tool("x")
    rt.tools.scope(agent).register(scoped)
    undo_global()
    assert rt.tools.get("x") is None
    assert rt.tools.get("x", agent) is scoped


def test_a_stale_disposer_does_not_remove_a_later_registration_of_the_same_name(rt: Any) -> None:
    undo = rt.tools.register(tool("x"))
    undo()
    later = tool("x")
    rt.tools.register(later)
    undo()
    assert rt.tools.get("x") is later


def test_disposers_are_idempotent(rt: Any) -> None:
    counter = ChangeCounter()
    rt.events.on("tools/change", counter)
    undo = rt.tools.register(tool("a"))
    for _ in range(3):
        undo()
    assert counter.count == 2


def test_disposers_called_after_stop_do_nothing() -> None:
    rt = ToolRuntime().start()
    try:
        rt.tools.register(tool("a"))
        undo = rt.tools.register(tool("b"))
        lift = rt.tools.scope(Agent("x")).restrict(ToolRestriction(deny=["a"]))
        unguard = rt.tools.guard(lambda e: None)
    finally:
        rt.stop()
    undo()
    lift()
    unguard()
    assert undo.disposed and lift.disposed and unguard.disposed


def test_writes_after_stop_raise(rt: Any) -> None:
    tools = rt.tools
    rt.stop()
    with pytest.raises(RuntimeError, match="stopped"):
        tools.register(tool("a"))


def test_scope_actors_are_retired_when_their_layer_is_empty(rt: Any) -> None:
    before = len(rt.group)
    agents = [Agent(f"a{i}") for i in range(5)]
    undos = [rt.tools.scope(a).register(tool("t")) for a in agents]
    assert all(agent in rt.state.scopes for agent in agents)
    assert len(rt.group) == before + 5
    for undo in undos:
        undo()
    round_trip(rt)
    assert not any(agent in rt.state.scopes for agent in agents)
    # A retired scope can be written again (by a fresh actor).
    rt.tools.scope(agents[0]).register(tool("again"))
    assert names(rt.tools.definitions(agents[0])) == ["again"]
    assert len(rt.group) <= before + 6


def test_a_scope_with_only_a_failed_write_is_retired_too(rt: Any) -> None:
    agent = Agent("a")
    with pytest.raises(RegistrationError):
        rt.tools.scope(agent).register(tool("run_code"))
    round_trip(rt)
    assert agent not in rt.state.scopes


def test_agents_whose_scopes_were_written_and_emptied_are_freed_with_their_sessions(rt: Any) -> None:
    """The registry remembers when each scope last changed (so a call is
    prepared again only for a change on its own chain) without keeping a
    dropped agent alive."""
    import gc
    import weakref

    from dsh_actors.session import Session

    agents: list[weakref.ref[Agent]] = []
    sessions: list[weakref.ref[Session]] = []
    for i in range(50):
        agent = Agent(f"a{i}", session=Session())
        undo_tool = rt.tools.scope(agent).register(tool("t"))
        rt.tools.scope(agent).guard(lambda execution: None)()
        undo_tool()
        agents.append(weakref.ref(agent))
        sessions.append(weakref.ref(agent.session))  # type: ignore[arg-type]
        del agent
    round_trip(rt)
    gc.collect()
    assert sum(ref() is not None for ref in agents) == 0
    assert sum(ref() is not None for ref in sessions) == 0
