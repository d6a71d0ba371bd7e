"""The registry's actors inside runtimes: raw messages, stopping, and two
runtimes in one process."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

import pytest

from dsh_actors.errors import RegistrationError
from dsh_actors.messages import AddGuard, Register, Restrict, Retract, SetExecutor, Unregister
from dsh_actors.model import Agent, ToolRestriction
from dsh_actors.registry import Contribution, Registration
from dsh_actors.runtime import ToolRuntime

from .helpers import WAIT, RecordingExecutor, activation, batch, execution, labelled, names, tool


def test_write_messages_work_through_a_raw_registry_ask(rt: Any) -> None:
    agent = Agent("main")
    reg = rt.registry.ask(Register(definition=tool("a")), timeout=WAIT)
    assert isinstance(reg, Registration) and reg.scope is None
    restriction = rt.registry.ask(Restrict(restriction=ToolRestriction(deny=["a"]), scope=agent), timeout=WAIT)
    assert isinstance(restriction, Contribution) and restriction.kind == "restriction"
    assert names(rt.tools.definitions(agent)) == []
    guard = rt.registry.ask(AddGuard(guard=lambda e: "no", scope=agent), timeout=WAIT)
    assert rt.tools.check_guards(execution("a", agent)) == "no"
    executor = rt.registry.ask(SetExecutor(executor=RecordingExecutor("raw"), scope=agent), timeout=WAIT)
    assert rt.tools.execute(batch(agent)) == labelled("raw")
    for contribution in (restriction, guard, executor):
        assert rt.registry.ask(Retract(contribution=contribution), timeout=WAIT) is True
        assert rt.registry.ask(Retract(contribution=contribution), timeout=WAIT) is False
    assert rt.registry.ask(Unregister(registration=reg), timeout=WAIT) is True
    assert rt.registry.ask(Unregister(registration=reg), timeout=WAIT) is False
    assert rt.tools.get("a") is None


def test_a_raw_write_reports_errors_to_the_asker_and_to_its_reply_future(rt: Any) -> None:
    with pytest.raises(RegistrationError, match="reserved"):
        rt.registry.ask(Register(definition=tool("run_code")), timeout=WAIT)
    future: Future[Any] = Future()
    rt.registry.tell(Register(definition=tool("run_code"), reply=future))
    with pytest.raises(RegistrationError, match="reserved"):
        future.result(timeout=WAIT)


def test_restrict_of_the_global_layer_through_a_raw_message_is_rejected(rt: Any) -> None:
    with pytest.raises(RegistrationError, match="scoped service"):
        rt.registry.ask(Restrict(restriction=ToolRestriction(deny=["a"]), scope=None), timeout=WAIT)


def test_the_registry_rejects_a_message_it_does_not_understand(rt: Any) -> None:
    with pytest.raises(TypeError, match="the registry does not understand str"):
        rt.registry.ask("hello", timeout=WAIT)
    with pytest.raises(TypeError, match="scope is an Agent or None"):
        rt.registry.ask(Register(definition=tool("a"), scope="main"), timeout=WAIT)  # type: ignore[arg-type]
    # and keeps working
    rt.tools.register(tool("a"))


def test_stop_returns_the_thread_count_to_where_it_was() -> None:
    before = threading.active_count()
    rt = ToolRuntime().start()
    agents = [Agent(f"a{i}") for i in range(4)]
    for agent in agents:
        rt.tools.scope(agent).register(tool("t"))
        rt.tools.scope(agent).set_executor(RecordingExecutor("r"))
    rt.tools.register(tool("g"), when=lambda ctx: True)
    ts = rt.tools.resolve(activation(agents[0]))
    rt.tools.execute(batch(agents[1]))
    assert threading.active_count() > before
    rt.stop()
    assert ts is not None
    assert threading.active_count() == before


def test_two_runtimes_in_one_process_do_not_affect_each_other() -> None:
    one = ToolRuntime().start()
    two = ToolRuntime().start()
    try:
        agent = Agent("main")
        one.tools.register(tool("only-in-one"))
        two.tools.register(tool("only-in-two"))
        one.tools.scope(agent).restrict(ToolRestriction(deny=["only-in-one"]))
        assert names(one.tools.definitions()) == ["only-in-one"]
        assert names(two.tools.definitions()) == ["only-in-two"]
        assert names(two.tools.definitions(agent)) == ["only-in-two"]
        heard: list[str] = []
        two.events.on("tools/change", lambda: heard.append("two"))
        one.tools.register(tool("more"))
        assert heard == []
        one.stop()
        # Stopping one leaves the other fully working.
        undo = two.tools.register(tool("after"))
        assert names(two.tools.definitions()) == ["only-in-two", "after"]
        undo()
        ts = two.tools.resolve(activation(agent))
        assert names(ts.view(agent)) == ["only-in-two"]
        ts.dispose()
        outcome = two.tools.execute(batch(agent)).results[0].result
        assert outcome.is_error and outcome.error.message == 'unknown tool "echo"'
    finally:
        one.stop()
        two.stop()


def test_a_write_racing_with_stop_never_hangs() -> None:
    rt = ToolRuntime().start()
    tools = rt.tools
    errors: list[BaseException] = []
    go = threading.Event()

    def writer() -> None:
        go.wait(WAIT)
        for i in range(50):
            try:
                tools.register(tool(f"t{i}"))
            except RuntimeError as exc:
                errors.append(exc)
                return

    thread = threading.Thread(target=writer)
    thread.start()
    go.set()
    rt.stop()
    thread.join(WAIT)
    assert not thread.is_alive()
    assert all("stopped" in str(e) for e in errors)


def test_a_stopped_runtime_refuses_use_approvals_set_and_events_on_like_tools() -> None:
    import policies

    rt = ToolRuntime().start()
    listener_off = rt.events.on("tools/result", lambda execution, result: None)
    approval_off = rt.approvals.set(lambda request: "allowed-once")
    plugin_off = rt.use(policies.timeout)
    rt.stop()
    with pytest.raises(RuntimeError, match="the ToolRuntime is stopped"):
        _ = rt.tools
    with pytest.raises(RuntimeError, match="the ToolRuntime is stopped"):
        rt.use(policies.timeout)
    with pytest.raises(RuntimeError, match="the ToolRuntime is stopped"):
        rt.approvals.set(lambda request: "allowed-once")
    with pytest.raises(RuntimeError, match="the ToolRuntime is stopped"):
        rt.events.on("tools/result", lambda execution, result: None)
    # What was installed before can still be undone, without error.
    for off in (listener_off, approval_off, plugin_off):
        off()
    assert rt.approvals.service is None and not rt.events.has_listeners("tools/result")


def test_a_stopped_runtime_names_the_fix_a_new_runtime() -> None:
    import policies

    rt = ToolRuntime().start()
    tools = rt.tools
    rt.stop()
    refusals = (
        lambda: rt.tools,
        lambda: rt.use(policies.timeout),
        lambda: rt.approvals.set(lambda request: "allowed-once"),
        lambda: rt.events.on("tools/result", lambda execution, result: None),
        lambda: tools.execute(batch()),  # a service held from before the stop
        rt.start,
    )
    for refused in refusals:
        with pytest.raises(RuntimeError) as caught:
            refused()
        assert "create a new ToolRuntime()" in str(caught.value), str(caught.value)
    assert str(caught.value).startswith("a stopped ToolRuntime cannot be started again: ")


def test_a_service_held_from_before_the_stop_refuses_new_work_naming_the_fix() -> None:
    from dsh_actors import NativeExecutor
    from dsh_actors.errors import RuntimeStoppedError
    from dsh_actors.execution import ToolExecutionInput
    from dsh_actors.signals import AbortController

    rt = ToolRuntime().start()
    tools = rt.tools
    scoped = tools.scope(Agent("a"))
    tools.register(tool("t"))
    rt.stop()
    refusals = {
        "register": lambda: tools.register(tool("u")),
        "guard": lambda: tools.guard(lambda execution: None),
        "restrict": lambda: scoped.restrict(ToolRestriction(deny=["t"])),
        "set_executor": lambda: scoped.set_executor(NativeExecutor()),
        "submit": lambda: tools.submit(batch()),
        "dispatch": lambda: tools.dispatch(
            ToolExecutionInput(call_id="c1", name="t", arguments={}, signal=AbortController().signal)
        ),
        # What the model would be offered for a next step, which a stopped runtime never runs:
        "model_tools": tools.model_tools,
        "scoped model_tools": scoped.model_tools,
        "schemas": tools.schemas,
    }
    for what, refused in refusals.items():
        with pytest.raises(RuntimeStoppedError) as caught:
            refused()
        assert "create a new ToolRuntime()" in str(caught.value), (what, str(caught.value))
    # Inspection still reads the registry as it was when the runtime stopped.
    assert names(tools.definitions()) == ["t"]
    assert tools.get("t") is not None


def test_a_new_runtime_accepts_listeners_and_approval_services_before_it_starts() -> None:
    rt = ToolRuntime()
    off = rt.events.on("tools/result", lambda execution, result: None)
    rt.approvals.set(lambda request: "allowed-once")
    with rt:
        assert rt.events.has_listeners("tools/result")
    off()
