"""EventBus.observed: the executor's per-call "does anyone listen" check
must agree with listeners() for every scope arrangement; the package
exports one object per decision and names the events it documents."""

from __future__ import annotations

import re
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import dsh_actors
from dsh_actors import Agent, ToolOutput, events, model, text
from dsh_actors.events import EventBus

ROOT = Agent("root")
CHILD = Agent("child", parent=ROOT)
OTHER = Agent("other")
AGENTS = [None, ROOT, CHILD, OTHER]
NAMES = ["tools/pre-execute", "tools/post-execute", "tools/result", "tools/change"]


@given(
    subscriptions=st.lists(st.tuples(st.sampled_from(NAMES), st.sampled_from(AGENTS)), max_size=6),
    asked=st.lists(st.sampled_from(NAMES), min_size=1, max_size=3, unique=True),
    agent=st.sampled_from(AGENTS),
    dispose=st.integers(0, 6),
)
def test_observed_agrees_with_listeners(subscriptions, asked, agent, dispose) -> None:  # type: ignore[no-untyped-def]
    bus = EventBus()
    offs = [bus.on(name, lambda *a: None, scope=scope) for name, scope in subscriptions]
    for off in offs[:dispose]:
        off()
    expected = any(bus.listeners(name, agent) for name in asked)
    assert bus.observed(tuple(asked), agent) is expected


def test_observed_with_no_listener_at_all_is_false() -> None:
    bus = EventBus()
    assert bus.observed(("tools/result",)) is False
    off = bus.on("tools/result", lambda *a: None, scope=CHILD)
    assert bus.observed(("tools/result",), ROOT) is False
    assert bus.observed(("tools/result",), CHILD) is True
    off()
    assert bus.observed(("tools/result",), CHILD) is False


@given(
    subscriptions=st.lists(
        st.tuples(st.sampled_from(["tools/result", "tools/change"]), st.sampled_from(AGENTS), st.booleans()),
        max_size=8,
    ),
    agent=st.sampled_from(AGENTS),
    dispose=st.integers(0, 8),
)
def test_listeners_are_those_of_the_agents_chain_in_subscription_order(subscriptions, agent, dispose) -> None:  # type: ignore[no-untyped-def]
    # (Scoped listeners are filed by their scope: an event looks up its
    # agent's chain; the order is still the subscriptions', prepend kept.)
    bus = EventBus()
    order: list[tuple[str, Agent | None, Any]] = []
    gone: set[int] = set()
    for i, (name, scope, prepend) in enumerate(subscriptions):

        def fn(*a: Any) -> None:
            return None

        off = bus.on(name, fn, scope=scope, prepend=prepend)
        if i < dispose:
            gone.add(id(fn))
            off()
        entry = (name, scope, fn)
        order.insert(0, entry) if prepend else order.append(entry)
    for name in ("tools/result", "tools/change"):
        expected = tuple(
            fn
            for n, scope, fn in order
            if n == name
            and id(fn) not in gone
            and (scope is None or name == "tools/change" or events.in_scope(scope, agent))
        )
        assert bus.listeners(name, agent) == expected


def test_an_event_of_one_agent_costs_the_same_whatever_the_number_of_other_agents_listening() -> None:
    # (A farm: thousands of agents, each with listeners scoped to it. Every
    # event of any agent tested each of them, so a call's events cost grew
    # with the number of agents.)
    def calls_per_event(others: int) -> int:
        bus = EventBus()
        me = Agent("me", parent=ROOT)
        agents = [Agent(f"a{i}") for i in range(others)]
        for agent in agents:
            bus.on("tools/result", lambda e, r: None, scope=agent)
        bus.on("tools/result", lambda e, r: None, scope=ROOT)
        bus.on("tools/result", lambda e, r: None)
        counted = [0]

        def count(frame: Any, event: str, arg: Any) -> None:
            if event == "call":
                counted[0] += 1

        sys.setprofile(count)
        try:
            bus.emit("tools/result", None, None, agent=me)
            observed = bus.observed(("tools/result",), me)
        finally:
            sys.setprofile(None)
        assert observed
        return counted[0]

    assert calls_per_event(1000) == calls_per_event(10)


@pytest.mark.parametrize("scoped", [True, False], ids=["scoped", "unscoped"])
@pytest.mark.parametrize("prepend", [False, True], ids=["appended", "prepended"])
def test_subscribing_and_disposing_costs_the_same_whatever_the_number_of_listeners_already_there(
    scoped: bool, prepend: bool
) -> None:
    # (A farm subscribes thousands of listeners, each scoped to its agent.
    # Every subscription and disposal rebuilt the event's whole listener
    # list, call by call, so setting a farm up cost the square of its size.)
    def calls_per_change(others: int) -> int:
        bus = EventBus()
        for i in range(others):
            bus.on("tools/result", lambda e, r: None, scope=Agent(f"a{i}") if scoped else None, prepend=i % 2 == 0)
        me = Agent("me")
        counted = [0]

        def count(frame: Any, event: str, arg: Any) -> None:
            if event in ("call", "c_call"):  # (a generator's or a comprehension's step counts as a call)
                counted[0] += 1

        def listener(e: Any, r: Any) -> None:
            return None

        sys.setprofile(count)
        try:
            off = bus.on("tools/result", listener, scope=me if scoped else None, prepend=prepend)
            off()
        finally:
            sys.setprofile(None)
        assert listener not in bus.listeners("tools/result", me)
        assert len(bus.listeners("tools/result", None if scoped else me)) == (0 if scoped else others)
        return counted[0]

    assert calls_per_change(1000) == calls_per_change(10)


@pytest.mark.parametrize("scope", [None, ROOT, CHILD], ids=["unscoped", "ancestor", "own"])
def test_a_dispatch_keeps_the_listeners_it_started_with(scope: Agent | None) -> None:
    # (Its listeners subscribe and dispose of others meanwhile, of the same
    # scope and of another on the chain: the next dispatch sees that.)
    bus = EventBus()
    seen: list[str] = []
    later: list[Any] = []

    def first(e: Any, r: Any) -> None:
        seen.append("first")
        if not later:
            later.append(bus.on("tools/result", lambda e, r: seen.append("added"), scope=scope))
            later.append(bus.on("tools/result", lambda e, r: seen.append("added first"), scope=CHILD, prepend=True))
            dispose_last()

    bus.on("tools/result", first, scope=scope)
    bus.on("tools/result", lambda e, r: seen.append("other scope"), scope=OTHER)
    dispose_last = bus.on("tools/result", lambda e, r: seen.append("last"), scope=scope)
    bus.emit("tools/result", None, None, agent=CHILD)
    assert seen == ["first", "last"]
    seen.clear()
    bus.emit("tools/result", None, None, agent=CHILD)
    assert seen == ["added first", "first", "added"]
    for off in later:
        off()
    seen.clear()
    bus.emit("tools/result", None, None, agent=CHILD)
    assert seen == ["first"]


def test_the_decisions_are_one_object_whichever_path_imports_them() -> None:
    for name in ("Allow", "Deny", "Cancel", "Ask", "Accept", "Block", "UNSET"):
        assert getattr(events, name) is getattr(model, name) is getattr(dsh_actors, name), name
    assert events.Deny("no") == dsh_actors.Deny("no")


def test_event_names_are_the_events_the_package_documents() -> None:
    assert events.__doc__ is not None
    documented = re.findall(r"^``(tools/[a-z-]+)``", events.__doc__, re.M)
    assert list(events.EVENT_NAMES) == documented


def _chain_result(listeners: tuple[Any, ...], seen: list[str]) -> Any:
    """One call of a tool ``t`` (its body notes ``"body"`` in ``seen``)
    through the pre-execute ``listeners``, in order: its result."""
    from dsh_actors import ToolBatchInput, ToolCall, ToolRuntime, define_tool

    with ToolRuntime() as rt:
        rt.tools.register(
            define_tool(
                name="t",
                description="t",
                parameters={},
                output=ToolOutput(schema={"type": "string"}, render=lambda a, v: [text(v)]),
                execute=lambda args, ctx: seen.append("body") or "ok",
            )
        )
        for listener in listeners:
            rt.events.on("tools/pre-execute", listener)
        return rt.tools.execute(ToolBatchInput(calls=(ToolCall("c0", "t", "{}"),))).results[0].result


def _noting(name: str, seen: list[str], *, is_async: bool) -> Any:
    """A listener that notes ``name`` in ``seen`` and runs the rest of the chain."""
    if is_async:

        async def alistener(execution: Any, next_: Any) -> Any:
            seen.append(name)
            return await next_()

        return alistener

    def listener(execution: Any, next_: Any) -> Any:
        seen.append(name)
        return next_()

    listener.__qualname__ = name
    return listener


def test_a_sync_pre_execute_listener_between_two_async_ones_fails_its_call_with_an_error_naming_the_fix() -> None:
    """async -> sync -> async: the sync listener runs on the batch's loop,
    whose own thread cannot wait for the async one after it: its next()
    raises at once, naming it and the fix, and the last listener and the
    body never run."""
    seen: list[str] = []
    chain = (
        _noting("first", seen, is_async=True),
        _noting("middle", seen, is_async=False),
        _noting("last", seen, is_async=True),
    )
    result = _chain_result(chain, seen)
    assert result.is_error and result.error.info is not None and result.error.info.code == "POLICY_FAILED"
    assert "middle" in result.error.message and "make it async def" in result.error.message
    assert seen == ["first", "middle"]


def test_a_sync_listener_between_two_async_ones_works_when_the_chain_returns_before_the_last() -> None:
    """async -> sync -> sync (returns Allow without next) -> async: the last
    one is never reached, so nothing has to wait for it on the loop."""
    from dsh_actors import Allow

    seen: list[str] = []

    def allow(execution: Any, next_: Any) -> Any:
        seen.append("allow")
        return Allow()

    chain = (
        _noting("first", seen, is_async=True),
        _noting("middle", seen, is_async=False),
        allow,
        _noting("never", seen, is_async=True),
    )
    result = _chain_result(chain, seen)
    assert result.value == "ok", result
    assert seen == ["first", "middle", "allow", "body"]


@pytest.mark.parametrize("name", ["tools/execute", "tools/post-execute", "tools/result", "tools/progress"])
def test_an_async_def_listener_of_an_event_that_never_awaits_is_refused_when_it_subscribes(name: str) -> None:
    # Only tools/pre-execute listeners are awaited; any other runtime event
    # would call an async def listener and drop its coroutine, so it never
    # ran. It is refused at once, naming the fix. A plugin's own event
    # (any other name) is left to the plugin.
    from dsh_actors import InvalidTypeError, ToolRuntime

    async def listener(*args: Any) -> Any:
        return None

    with ToolRuntime() as rt:
        with pytest.raises(InvalidTypeError, match=f"listener is async def, but '{name}' listeners"):
            rt.events.on(name, listener)
        rt.events.on("my-plugin/event", listener)()
        rt.events.on("tools/pre-execute", listener)()


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("tool/pre-execute", "tools/pre-execute"),
        ("tools/pre_execute", "tools/pre-execute"),
        ("pre-execute", "tools/pre-execute"),
        ("Tools/Result", "tools/result"),
        ("tools/results", "tools/result"),
        ("tools/nothing-like-it", None),
    ],
)
def test_a_misspelled_event_is_refused_naming_the_event_meant(name: str, meant: str | None) -> None:
    # A deny listener subscribed under a misspelled name would never run:
    # the policy silently off. A name in the runtime's namespace that is not
    # one of its events, or one of them without the namespace, is refused;
    # a plugin's own events keep names of their own.
    from dsh_actors import Deny, InvalidValueError, ToolRuntime

    with ToolRuntime() as rt:
        with pytest.raises(InvalidValueError) as refused:
            rt.events.on(name, lambda execution, next_: Deny("no"))
        message = str(refused.value)
        assert message.startswith(f"no event is named {name!r}: ")
        assert (f"did you mean {meant!r}?" in message) is (meant is not None)
        assert "'tools/pre-execute', 'tools/execute'" in message
        for own in ("my-plugin/event", "x/progress", "audit/result"):
            rt.events.on(own, lambda *args: None)()


def test_an_async_def_guard_is_refused_when_it_is_added() -> None:
    from dsh_actors import RegistrationError, ToolRuntime

    async def check(execution: Any) -> None:
        return None

    with ToolRuntime() as rt, pytest.raises(RegistrationError, match=r"guard .*check is async def"):
        rt.tools.guard(check)


@pytest.mark.parametrize(
    ("name", "kwargs", "message"),
    [
        (5, {}, "an event name is a str, such as 'tools/result', not int"),
        ("tools/result", {"scope": "main"}, "on(scope=...) is an Agent or None, not str"),
        ("tools/result", {"prepend": "yes"}, "on(prepend=...) is True or False, not 'yes'"),
    ],
)
def test_on_refuses_a_name_scope_or_prepend_of_the_wrong_type(name: Any, kwargs: dict[str, Any], message: str) -> None:
    # Before, each was taken: a listener under the int 5 that no event
    # reaches, a scope no agent equals, "yes" read as True.
    bus = EventBus()
    with pytest.raises(TypeError) as raised:
        bus.on(name, lambda *args: None, **kwargs)
    assert str(raised.value) == message
    assert bus.listeners("tools/result") == ()


def _one_echo_call(name: str, listener: Any) -> Any:
    """One call of a tool ``t`` with ``listener`` subscribed to ``name``: its result."""
    from dsh_actors import ToolBatchInput, ToolCall, ToolRuntime, define_tool

    with ToolRuntime() as rt:
        rt.tools.register(
            define_tool(
                name="t",
                description="t",
                parameters={},
                output=ToolOutput(schema={"type": "string"}, render=lambda a, v: [text(v)]),
                execute=lambda args, ctx: "ok",
            )
        )
        rt.events.on(name, listener)
        return rt.tools.execute(ToolBatchInput(calls=(ToolCall("c0", "t", "{}"),))).results[0].result


@pytest.mark.parametrize("name", ["tools/execute", "tools/post-execute"])
def test_a_sync_listener_that_returns_a_coroutine_fails_its_call_naming_the_fix_and_closes_it(name: str) -> None:
    # An async def behind a sync decorator: on() cannot see it, and nothing
    # awaits these events' listeners. Before, the call failed with "a
    # wrapper returned coroutine" and Python warned on stderr that the
    # coroutine was never awaited (the library is silent).
    import functools
    import warnings

    ran: list[str] = []

    async def audit(*args: Any) -> Any:
        ran.append("audit")
        return args[-1]()

    @functools.wraps(audit)
    def decorated(*args: Any) -> Any:
        return audit(*args)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (an unawaited coroutine's warning, if it were collected unclosed)
        result = _one_echo_call(name, decorated)
        import gc

        gc.collect()
    assert result.is_error and result.error.info is not None and result.error.info.code == "POLICY_FAILED"
    assert result.error.message == (
        f"{name}: a listener returned a coroutine ({audit.__qualname__}), which nothing awaits (its body did not run): "
        f"'{name}' listeners run on the runtime's threads, so make it a plain def"
    )
    assert ran == []


def test_an_async_pre_execute_listener_that_returns_next_without_awaiting_it_fails_naming_the_fix() -> None:
    # `return next()` in an async def: the listener's value was the rest of
    # the chain's coroutine, never run. Before, the call failed with "a
    # listener returned coroutine; expected Allow, ..." and a RuntimeWarning
    # naming the runtime's _arun_chain.
    import gc
    import warnings

    async def forgetful(execution: Any, next_: Any) -> Any:
        return next_()

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = _one_echo_call("tools/pre-execute", forgetful)
        gc.collect()
    assert result.is_error and result.error.info is not None and result.error.info.code == "POLICY_FAILED"
    assert result.error.message == (
        "tools/pre-execute: the async listener "
        "test_an_async_pre_execute_listener_that_returns_next_without_awaiting_it_fails_naming_the_fix.<locals>"
        ".forgetful returned next() without awaiting it, so the rest of the chain never ran: return await next()"
    )


def test_a_plugin_waterfall_without_an_awaiter_returns_an_async_listeners_coroutine() -> None:
    # A plugin's own event is left to the plugin: the coroutine is its result.
    import asyncio

    bus = EventBus()

    async def listener(value: int, next_: Any) -> int:
        return value + 1

    bus.on("my-plugin/event", listener)
    coroutine = bus.waterfall("my-plugin/event", lambda: 0, 41)
    assert asyncio.run(coroutine) == 42
