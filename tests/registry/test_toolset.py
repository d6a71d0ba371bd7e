"""Conditional activation: ``resolve`` → ``ResolvedToolSet`` (SPEC section 4,
spec/tools.md "Conditional activation")."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from dsh_actors.errors import AbortError, ToolPolicyError
from dsh_actors.messages import ResolveToolSet
from dsh_actors.model import Agent, ToolActivationContext, ToolRestriction
from dsh_actors.registry import definitions, executable, execution_mode, lookup, schemas, visible
from dsh_actors.signals import AbortController
from dsh_actors.toolset import ResolvedToolSet

from .helpers import WAIT, activation, names, raw_tool, round_trip, tool


def resolve_in_thread(rt: Any, context: ToolActivationContext) -> tuple[threading.Thread, list[Any]]:
    """Run ``rt.tools.resolve(context)`` on a helper thread; the list gets
    the set or the exception."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(rt.tools.resolve(context))
        except BaseException as exc:  # noqa: BLE001
            out.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def test_only_conditions_returning_exactly_true_admit_their_tool(rt: Any) -> None:
    agent = Agent("main")
    rt.tools.register(tool("plain"))
    rt.tools.register(tool("yes"), when=lambda ctx: True)
    rt.tools.register(tool("no"), when=lambda ctx: False)
    rt.tools.register(tool("one"), when=lambda ctx: 1)
    rt.tools.register(tool("none"), when=lambda ctx: None)
    ts = rt.tools.resolve(activation(agent))
    try:
        assert names(ts.view(agent)) == ["plain", "yes"]
        assert names(rt.tools.definitions(agent, ts)) == ["plain", "yes"]
        assert names(rt.tools.schemas(agent, ts)) == ["plain", "yes"]
        assert rt.tools.executable("yes", agent, ts) is not None
        assert rt.tools.executable("no", agent, ts) is None
        assert rt.tools.get("no", agent, ts) is None
    finally:
        ts.dispose()


def test_a_condition_returning_a_non_bool_hides_its_tool_with_a_warning_that_names_it(
    rt: Any, library_logs: None
) -> None:
    # A forgotten return (None) or a truthy 1 does not admit the tool, as
    # above, but not without a word: a warning names the tool and the fix.
    from loguru import logger

    lines: list[str] = []
    handler = logger.add(lines.append, level="WARNING", format="{message}")
    agent = Agent("main")
    rt.tools.register(tool("forgot"), when=lambda ctx: None)
    rt.tools.register(tool("truthy"), when=lambda ctx: 1)
    rt.tools.register(tool("yes"), when=lambda ctx: True)
    try:
        ts = rt.tools.resolve(activation(agent))
        ts.dispose()
    finally:
        logger.remove(handler)
    assert sorted(lines) == [
        'the activation condition of tool "forgot" (the global scope) returned NoneType, not True or False: '
        "the tool is not offered this step (return a bool)\n",
        'the activation condition of tool "truthy" (the global scope) returned int, not True or False: '
        "the tool is not offered this step (return a bool)\n",
    ]


def test_each_condition_runs_once_and_sees_the_context(rt: Any) -> None:
    agent = Agent("main")
    seen: list[ToolActivationContext] = []
    rt.tools.register(tool("a"), when=lambda ctx: seen.append(ctx) or True)
    context = activation(agent)
    ts = rt.tools.resolve(context)
    ts.view(agent)
    ts.view(agent)
    rt.tools.executable("a", agent, ts)
    ts.dispose()
    assert seen == [context]


def test_without_a_tool_set_conditional_tools_are_not_executable_but_can_be_inspected(rt: Any) -> None:
    agent = Agent("main")
    cond = tool("c")
    rt.tools.register(cond, when=lambda ctx: True)
    rt.tools.register(tool("plain"))
    assert rt.tools.executable("c", agent) is None
    assert rt.tools.executable("plain", agent) is not None
    assert rt.tools.get("c", agent) is cond
    assert names(rt.tools.definitions(agent)) == ["c", "plain"]


def test_conditions_of_tools_the_agent_does_not_see_are_not_evaluated(rt: Any) -> None:
    calls: list[str] = []
    agent, other = Agent("main"), Agent("other")
    rt.tools.register(tool("g"))
    rt.tools.scope(other).register(tool("theirs"), when=lambda ctx: calls.append("theirs") or True)
    rt.tools.register(tool("hidden"), when=lambda ctx: calls.append("hidden") or True)
    rt.tools.scope(agent).restrict(ToolRestriction(deny=["hidden"]))
    ts = rt.tools.resolve(activation(agent))
    ts.dispose()
    assert calls == []


def test_a_sync_condition_runs_on_the_tool_set_actor_thread(rt: Any) -> None:
    threads: list[str] = []
    rt.tools.register(tool("a"), when=lambda ctx: threads.append(threading.current_thread().name) or True)
    rt.tools.resolve(activation(Agent("main"))).dispose()
    assert threads == ["dsh-ToolSetActor"]


def test_an_async_condition_runs_on_the_runtime_loop(rt: Any) -> None:
    agent = Agent("main")
    threads: list[threading.Thread] = []

    async def when(ctx: ToolActivationContext) -> bool:
        threads.append(threading.current_thread())
        await asyncio.sleep(0)
        return True

    rt.tools.register(tool("async"), when=when)
    ts = rt.tools.resolve(activation(agent))
    try:
        assert names(ts.view(agent)) == ["async"]
        assert threads == [rt.loop.thread]
    finally:
        ts.dispose()


def test_async_conditions_run_concurrently_without_blocking_the_actor(rt: Any) -> None:
    agent = Agent("main")
    state: dict[str, asyncio.Event] = {}

    def event() -> asyncio.Event:
        return state.setdefault("ev", asyncio.Event())

    async def waits(ctx: Any) -> bool:
        await asyncio.wait_for(event().wait(), WAIT)  # needs `sets` to have started
        return True

    async def sets(ctx: Any) -> bool:
        event().set()
        return False

    rt.tools.register(tool("waits"), when=waits)
    rt.tools.register(tool("sets"), when=sets)
    ts = rt.tools.resolve(activation(agent))
    try:
        assert names(ts.view(agent)) == ["waits"]
    finally:
        ts.dispose()


def test_a_sync_condition_returning_an_awaitable_is_awaited(rt: Any) -> None:
    async def answer() -> bool:
        return True

    agent = Agent("main")
    rt.tools.register(tool("a"), when=lambda ctx: answer())
    ts = rt.tools.resolve(activation(agent))
    assert names(ts.view(agent)) == ["a"]
    ts.dispose()


# -- failures publish nothing ---------------------------------------------------


def test_an_already_cancelled_resolution_raises_without_running_conditions(rt: Any) -> None:
    calls: list[str] = []
    rt.tools.register(tool("a"), when=lambda ctx: calls.append("a") or True)
    controller = AbortController()
    controller.abort("step abandoned")
    with pytest.raises(AbortError) as err:
        rt.tools.resolve(activation(Agent("main"), controller.signal))
    assert err.value.reason == "step abandoned"
    assert calls == []
    assert rt.state.live_toolsets() == ()


def test_a_resolution_cancelled_while_a_sync_condition_runs_raises(rt: Any) -> None:
    controller = AbortController()

    def when(ctx: Any) -> bool:
        controller.abort()
        return True

    rt.tools.register(tool("a"), when=when)
    rt.tools.register(tool("b"), when=lambda ctx: pytest.fail("runs after the abort"))
    with pytest.raises(AbortError):
        rt.tools.resolve(activation(Agent("main"), controller.signal))
    assert rt.state.live_toolsets() == ()


def test_a_resolution_cancelled_while_an_async_condition_waits_raises_and_cancels_it(rt: Any) -> None:
    controller = AbortController()
    started = threading.Event()
    cancelled = threading.Event()

    async def when(ctx: Any) -> bool:
        started.set()
        try:
            await asyncio.Event().wait()  # only cancellation ends this
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return True

    rt.tools.register(tool("a"), when=when)
    thread, out = resolve_in_thread(rt, activation(Agent("main"), controller.signal))
    assert started.wait(WAIT)
    controller.abort()
    thread.join(WAIT)
    assert len(out) == 1 and isinstance(out[0], AbortError)
    assert cancelled.wait(WAIT)
    assert rt.state.live_toolsets() == ()


def test_an_async_condition_whose_resolution_aborted_before_it_started_is_closed_not_left_unawaited(
    rt: Any,
) -> None:
    """The async condition's coroutine is made, then the resolution aborts
    (a sync condition after it aborts it) before the loop starts it: the
    flight closes that very coroutine, so no 'never awaited' warning."""
    import gc
    import warnings

    controller = AbortController()
    loop_blocked, release_loop = threading.Event(), threading.Event()

    def block_the_loop() -> None:
        loop_blocked.set()
        release_loop.wait(WAIT)

    async def when_async(ctx: Any) -> bool:
        return True

    def when_sync(ctx: Any) -> bool:
        controller.abort()
        return True

    rt.tools.register(tool("a"), when=when_async)
    rt.tools.register(tool("b"), when=when_sync)
    rt.kernel.loop.loop.call_soon_threadsafe(block_the_loop)  # the flight starts only after the abort
    assert loop_blocked.wait(WAIT)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with pytest.raises(AbortError):
                rt.tools.resolve(activation(Agent("main"), controller.signal))
        finally:
            release_loop.set()
        started = threading.Event()  # (FIFO: after the flight's start, scheduled during resolve)
        rt.kernel.loop.loop.call_soon_threadsafe(started.set)
        assert started.wait(WAIT)
        gc.collect()
    assert [str(w.message) for w in caught if "never awaited" in str(w.message)] == []
    assert rt.state.live_toolsets() == ()


def test_a_raising_sync_condition_fails_the_resolution_with_its_cause(rt: Any) -> None:
    def when(ctx: Any) -> bool:
        raise LookupError("no model info")

    rt.tools.register(tool("fragile"), when=when)
    with pytest.raises(ToolPolicyError) as err:
        rt.tools.resolve(activation(Agent("main")))
    assert str(err.value) == (
        'the activation condition of tool "fragile" (the global scope): raised LookupError: no model info'
    )
    assert isinstance(err.value.__cause__, LookupError)
    assert rt.state.live_toolsets() == ()


def test_a_raising_async_condition_fails_the_resolution_and_cancels_the_others(rt: Any) -> None:
    cancelled = threading.Event()

    async def waits(ctx: Any) -> bool:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return True

    async def fails(ctx: Any) -> bool:
        raise ValueError("async failure")

    rt.tools.register(tool("waits"), when=waits)
    rt.tools.register(tool("fails"), when=fails)
    with pytest.raises(ToolPolicyError, match="async failure") as err:
        rt.tools.resolve(activation(Agent("main")))
    assert isinstance(err.value.__cause__, ValueError)
    assert cancelled.wait(WAIT)


def toolset_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "dsh-ToolSetActor"]


def test_a_failed_resolution_stops_its_actor(rt: Any) -> None:
    rt.tools.register(tool("x"), when=lambda ctx: 1 / 0)
    with pytest.raises(ToolPolicyError):
        rt.tools.resolve(activation(Agent("main")))
    for thread in toolset_threads():
        thread.join(WAIT)
    assert toolset_threads() == []


def test_a_resolved_set_holds_no_thread_once_published(rt: Any) -> None:
    sets = [rt.tools.resolve(activation(Agent(f"a{i}"))) for i in range(20)]
    for thread in toolset_threads():
        thread.join(WAIT)
    assert toolset_threads() == []  # 20 published sets, no idle thread each
    assert all(not ts.disposed for ts in sets)
    for ts in sets:
        ts.dispose()


# -- removal and withdrawal --------------------------------------------------------


def test_a_registration_removed_while_its_condition_runs_is_not_admitted(rt: Any) -> None:
    agent = Agent("main")
    started, proceed = threading.Event(), threading.Event()

    def when(ctx: Any) -> bool:
        started.set()
        assert proceed.wait(WAIT)
        return True

    undo = rt.tools.register(tool("slow"), when=when)
    rt.tools.register(tool("plain"))
    thread, out = resolve_in_thread(rt, activation(agent))
    assert started.wait(WAIT)
    undo()
    rt.tools.register(tool("slow"))  # a new registration of the name was never admitted
    proceed.set()
    thread.join(WAIT)
    (ts,) = out
    assert isinstance(ts, ResolvedToolSet)
    try:
        assert names(ts.view(agent)) == ["plain"]
        assert rt.tools.executable("slow", agent, ts) is None
    finally:
        ts.dispose()


def test_an_unconditional_tool_removed_while_conditions_run_is_not_admitted(rt: Any) -> None:
    agent = Agent("main")
    started, proceed = threading.Event(), threading.Event()

    def when(ctx: Any) -> bool:
        started.set()
        assert proceed.wait(WAIT)
        return True

    rt.tools.register(tool("cond"), when=when)
    undo = rt.tools.register(tool("plain"))
    thread, out = resolve_in_thread(rt, activation(agent))
    assert started.wait(WAIT)
    undo()
    rt.tools.register(tool("plain"))
    proceed.set()
    thread.join(WAIT)
    (ts,) = out
    try:
        assert names(ts.view(agent)) == ["cond"]
    finally:
        ts.dispose()


def test_a_restriction_added_and_lifted_while_conditions_run_withdraws_for_good(rt: Any) -> None:
    agent = Agent("main")
    started, proceed = threading.Event(), threading.Event()

    def when(ctx: Any) -> bool:
        started.set()
        assert proceed.wait(WAIT)
        return True

    rt.tools.register(tool("cond"), when=when)
    rt.tools.register(tool("plain"))
    thread, out = resolve_in_thread(rt, activation(agent))
    assert started.wait(WAIT)
    rt.tools.scope(agent).restrict(ToolRestriction(deny=["plain"]))()
    proceed.set()
    thread.join(WAIT)
    (ts,) = out
    try:
        assert names(ts.view(agent)) == ["cond"]
    finally:
        ts.dispose()


def test_a_same_name_replacement_withdraws_the_admission_for_good(rt: Any) -> None:
    agent = Agent("main")
    rt.tools.register(tool("a"))
    rt.tools.register(tool("b"))
    ts = rt.tools.resolve(activation(agent))
    try:
        assert rt.tools.executable("a", agent, ts) is not None
        undo = rt.tools.scope(agent).register(tool("a"))  # shadows the admitted one
        assert rt.tools.executable("a", agent, ts) is None
        assert names(ts.view(agent)) == ["b"]
        undo()  # the admitted registration is visible again, but stays withdrawn
        assert rt.tools.executable("a", agent, ts) is None
        assert rt.tools.executable("a", agent) is not None
    finally:
        ts.dispose()


def test_a_new_restriction_withdraws_the_admission_for_good(rt: Any) -> None:
    agent = Agent("main")
    rt.tools.register(tool("a"))
    rt.tools.register(tool("b"))
    ts = rt.tools.resolve(activation(agent))
    try:
        lift = rt.tools.scope(agent).restrict(ToolRestriction(deny=["a"]))
        assert rt.tools.executable("a", agent, ts) is None
        lift()
        assert rt.tools.executable("a", agent, ts) is None
        assert names(ts.view(agent)) == ["b"]
    finally:
        ts.dispose()


def test_an_ancestors_restriction_withdraws_a_descendants_admission(rt: Any) -> None:
    root = Agent("root")
    child = Agent("child", parent=root)
    rt.tools.register(tool("a"))
    ts = rt.tools.resolve(activation(child))
    try:
        rt.tools.scope(root).restrict(ToolRestriction(deny=["a"]))()
        assert names(ts.view(child)) == []
    finally:
        ts.dispose()


def test_changes_elsewhere_do_not_withdraw_anything(rt: Any) -> None:
    agent, other = Agent("main"), Agent("other")
    rt.tools.register(tool("a"))
    ts = rt.tools.resolve(activation(agent))
    try:
        rt.tools.scope(other).register(tool("a"))
        rt.tools.scope(other).restrict(ToolRestriction(deny=["a"]))
        rt.tools.register(tool("later"))
        assert names(ts.view(agent)) == ["a"]
    finally:
        ts.dispose()


def test_a_tool_registered_after_resolution_is_not_in_the_set(rt: Any) -> None:
    agent = Agent("main")
    ts = rt.tools.resolve(activation(agent))
    try:
        rt.tools.register(tool("later"))
        assert rt.tools.executable("later", agent, ts) is None
        assert rt.tools.executable("later", agent) is not None
    finally:
        ts.dispose()


def test_a_rolled_back_change_does_not_withdraw_anything(rt: Any) -> None:
    from dsh_actors.errors import RegistrationError

    agent = Agent("main")
    rt.tools.register(tool("a"))
    ts = rt.tools.resolve(activation(agent))

    def veto() -> None:
        raise RuntimeError("no")

    off = rt.events.on("tools/change", veto)
    try:
        with pytest.raises(RegistrationError):
            rt.tools.scope(agent).restrict(ToolRestriction(deny=["a"]))
        assert names(ts.view(agent)) == ["a"]
    finally:
        off()
        ts.dispose()


# -- view, dispose, and the read functions -----------------------------------------


def test_view_of_another_scope_is_empty(rt: Any) -> None:
    agent = Agent("main")
    child = Agent("child", parent=agent)
    rt.tools.register(tool("a"))
    ts = rt.tools.resolve(activation(agent))
    try:
        assert names(ts.view(agent)) == ["a"]
        assert dict(ts.view(child)) == {}
        assert dict(ts.view(None)) == {}
        assert dict(ts.view(Agent("main"))) == {}  # another agent with the same id
        assert rt.tools.executable("a", child, ts) is None
    finally:
        ts.dispose()


def test_a_set_resolved_for_the_global_view_serves_only_the_global_view(rt: Any) -> None:
    rt.tools.register(tool("a"), when=lambda ctx: True)
    ts = rt.tools.resolve(activation(None))
    try:
        assert names(ts.view(None)) == ["a"]
        assert rt.tools.executable("a", None, ts) is not None
        assert dict(ts.view(Agent("x"))) == {}
    finally:
        ts.dispose()


def test_view_returns_the_original_definitions(rt: Any) -> None:
    agent = Agent("main")
    defn = raw_tool("a")
    rt.tools.register(defn, when=lambda ctx: True)
    ts = rt.tools.resolve(activation(agent))
    try:
        assert ts.view(agent)["a"] is defn
        with pytest.raises(TypeError):
            ts.view(agent)["b"] = defn  # type: ignore[index]
    finally:
        ts.dispose()


def test_dispose_is_idempotent_and_a_disposed_set_admits_nothing(rt: Any) -> None:
    agent = Agent("main")
    rt.tools.register(tool("a"))
    ts = rt.tools.resolve(activation(agent))
    ts.dispose()
    ts.dispose()
    assert ts.disposed
    assert dict(ts.view(agent)) == {}
    assert rt.tools.executable("a", agent, ts) is None
    assert rt.tools.definitions(agent, ts) == []
    assert rt.state.live_toolsets() == ()


def test_a_batch_given_another_agents_set_or_a_disposed_one_is_refused_before_anything_runs(rt: Any) -> None:
    from dsh_actors import InvalidStateError, InvalidValueError, ToolBatchInput, ToolCall

    parent = Agent("main")
    child = Agent("worker", parent=parent)
    rt.tools.register(tool("a"))
    calls = (ToolCall("c1", "a", "{}"),)
    with rt.tools.resolve(activation(parent)) as ts:
        # (Every call would fail as an unknown tool: the set admits nothing to another agent.)
        cases = [
            (child, "resolved for agent 'main', but the batch runs as agent 'worker': resolve the set"),
            (None, "but the batch runs as no agent"),
            (Agent("main"), "agent 'main' \\(another Agent object: agents compare by identity\\)"),
        ]
        for agent, match in cases:
            with pytest.raises(InvalidValueError, match=match):
                rt.tools.execute(ToolBatchInput(calls=calls, agent=agent, tool_set=ts))
        assert not rt.tools.execute(ToolBatchInput(calls=calls, agent=parent, tool_set=ts)).results[0].result.is_error
    with pytest.raises(InvalidStateError, match="tool_set was disposed: resolve a new set for this step"):
        rt.tools.execute(ToolBatchInput(calls=calls, agent=parent, tool_set=ts))


def test_a_nested_dispatch_given_a_set_that_admits_nothing_is_refused_before_anything_runs(rt: Any) -> None:
    # (It failed as an unknown tool, as a batch given such a set had.)
    from dsh_actors import InvalidStateError, InvalidValueError, ToolExecutionInput
    from dsh_actors.runtime import ToolRuntime
    from dsh_actors.signals import AbortSignal

    parent = Agent("main")
    child = Agent("worker", parent=parent)
    ran: list[str] = []
    rt.tools.register(raw_tool("a", execute=lambda args, ctx: ran.append("a") or "a"))

    def nested(agent: Agent, tool_set: ResolvedToolSet) -> Any:
        return rt.tools.dispatch(
            ToolExecutionInput(
                call_id="n1", name="a", arguments={}, signal=AbortSignal(), agent=agent, tool_set=tool_set
            )
        )

    with rt.tools.resolve(activation(parent)) as ts:
        with pytest.raises(
            InvalidValueError,
            match="^ToolExecutionInput.tool_set was resolved for agent 'main', but the call runs as agent 'worker': ",
        ):
            nested(child, ts)
        assert ran == []
        assert not nested(parent, ts).is_error
        # (A scoped service fills in its agent, then checks the set.)
        scoped = ToolExecutionInput(call_id="n2", name="a", arguments={}, signal=AbortSignal(), tool_set=ts)
        assert rt.tools.scope(parent).dispatch(scoped).value == "a"
    with pytest.raises(InvalidStateError, match="^ToolExecutionInput.tool_set was disposed: resolve a new set"):
        nested(parent, ts)
    with ToolRuntime() as other:
        other.tools.register(tool("a"))
        with other.tools.resolve(activation(parent)) as elsewhere:
            with pytest.raises(InvalidValueError) as err:
                nested(parent, elsewhere)
    assert str(err.value) == (
        "ToolExecutionInput.tool_set was resolved by another ToolRuntime, whose registrations this one does "
        "not run: resolve the set with the runtime that uses it (its rt.tools.resolve(...))"
    )
    assert ran == ["a", "a"]


def test_dispose_after_stop_does_nothing() -> None:
    from dsh_actors.runtime import ToolRuntime

    rt = ToolRuntime().start()
    try:
        ts = rt.tools.resolve(activation(Agent("main")))
    finally:
        rt.stop()
    ts.dispose()
    assert ts.disposed


def test_a_set_is_a_context_manager(rt: Any) -> None:
    with rt.tools.resolve(activation(Agent("main"))) as ts:
        assert not ts.disposed
    assert ts.disposed


def test_the_read_functions_obey_the_set(rt: Any) -> None:
    agent = Agent("main")
    rt.tools.register(raw_tool("on", is_concurrency_safe=lambda a: True), when=lambda ctx: True)
    rt.tools.register(raw_tool("off", is_concurrency_safe=lambda a: True), when=lambda ctx: False)
    ts = rt.tools.resolve(activation(agent))
    try:
        state = rt.state
        assert list(visible(state, agent, ts)) == ["on"]
        assert lookup(state, "off", agent, ts) is None
        assert lookup(state, "off", agent) is not None
        assert executable(state, "on", agent, ts) is not None
        assert [d.name for d in definitions(state, agent, ts)] == ["on"]
        assert [s["name"] for s in schemas(state, agent, ts)] == ["on"]
        assert execution_mode(state, "on", {}, agent, ts) == "parallel"
        assert execution_mode(state, "off", {}, agent, ts) == "exclusive"
    finally:
        ts.dispose()


def test_a_set_from_another_runtime_admits_nothing() -> None:
    from dsh_actors.runtime import ToolRuntime

    agent = Agent("main")
    with ToolRuntime() as one, ToolRuntime() as two:
        one.tools.register(tool("a"))
        two.tools.register(tool("a"))
        ts = one.tools.resolve(activation(agent))
        assert two.tools.executable("a", agent, ts) is None
        assert one.tools.executable("a", agent, ts) is not None
        ts.dispose()


def test_a_registry_ask_resolves_the_same_way(rt: Any) -> None:
    agent = Agent("main")
    rt.tools.register(tool("a"), when=lambda ctx: True)
    ts = rt.registry.ask(ResolveToolSet(context=activation(agent)), timeout=WAIT)
    try:
        assert isinstance(ts, ResolvedToolSet)
        assert names(ts.view(agent)) == ["a"]
    finally:
        ts.dispose()


def test_resolve_rejects_something_that_is_not_a_context(rt: Any) -> None:
    with pytest.raises(TypeError, match="ToolActivationContext"):
        rt.tools.resolve(Agent("main"))


def test_a_set_dropped_without_dispose_is_forgotten_when_collected(rt: Any) -> None:
    import gc

    ts = rt.tools.resolve(activation(Agent("main")))
    del ts
    round_trip(rt)  # the registry's loop let go of its last reply
    gc.collect()
    assert rt.state.live_toolsets() == ()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"agent": "main"}, "ToolActivationContext.agent is an Agent or None, not str"),
        ({"model_selection": "gpt"}, "ToolActivationContext.model_selection is a ModelSelection, not str"),
        ({"signal": None}, "ToolActivationContext.signal is an AbortSignal, not NoneType"),
    ],
)
def test_a_context_whose_fields_are_not_what_conditions_see_is_refused_before_any_runs(
    rt: Any, fields: dict[str, Any], message: str
) -> None:
    # Before, resolve() failed deep inside with AttributeError ('str' object
    # has no attribute 'chain'), or handed the conditions what it was given.
    from dataclasses import replace

    context = replace(activation(Agent("main")), **fields)
    with pytest.raises(TypeError) as raised:
        rt.tools.resolve(context)
    assert str(raised.value) == f"resolve(): {message}"
    with pytest.raises(TypeError) as raised:
        asyncio.run(rt.tools.resolve_async(context))
    assert str(raised.value) == f"resolve_async(): {message}"


def test_a_change_of_one_agents_scope_costs_the_same_whatever_the_number_of_other_agents_live_sets() -> None:
    # (A farm: thousands of agents, each with its step's set. Every committed
    # change of any agent's scope looked at every live set of every agent to
    # find those it could affect, so one agent's register or restrict cost
    # grew with the number of agents.)
    from dsh_actors import ToolRuntime
    from dsh_actors.registry.scope import ScopeActor

    noting = ScopeActor._note_toolsets.__code__

    def calls_per_change(others: int) -> int:
        counted = [0]
        inside: set[int] = set()

        def count(frame: Any, event: str, arg: Any) -> None:
            if frame.f_code is noting:
                if event == "call":
                    inside.add(threading.get_ident())
                elif event == "return":
                    inside.discard(threading.get_ident())
            if event == "call" and threading.get_ident() in inside:
                counted[0] += 1

        with ToolRuntime() as rt:
            rt.tools.register(tool("a"))
            rt.tools.register(tool("b"))
            agents = [Agent(f"a{i}") for i in range(others)]
            sets = [rt.tools.resolve(activation(agent)) for agent in agents]
            me = Agent("me")
            threading.setprofile(count)  # (the scope actor of "me" starts with its first write)
            try:
                rt.tools.scope(me).restrict(ToolRestriction(deny=["b"]))()
            finally:
                threading.setprofile(None)
            assert all(s.view(agent) for s, agent in zip(sets, agents, strict=True))
            for s in sets:
                s.dispose()
        assert counted[0] > 0
        return counted[0]

    assert calls_per_change(300) == calls_per_change(3)
