"""A long-running runtime (an evaluation or training farm: many agents and
batches for hours) keeps nothing per agent, executor or batch once the
application has dropped it: what it held is freed, and what it counts
does not grow with the number of rounds."""

from __future__ import annotations

import gc
import threading
import weakref
from typing import Any

import pytest

from dsh_actors import Agent, NativeExecutor, RuntimeStoppedError, ToolBatchInput, ToolCall, ToolDefinition

from .helpers import make_tool, started_runtime


def _echo(args: Any, ctx: Any) -> str:
    return "ok"


def _batch(agent: Agent | None = None, name: str = "echo") -> ToolBatchInput:
    return ToolBatchInput(calls=[ToolCall(id="c0", name=name, arguments={})], agent=agent)


def _alive(refs: list[weakref.ref[Any]]) -> int:
    """How many of ``refs`` are alive. Counted once the runtime has stopped
    (its threads joined: an actor that has just answered a batch may still
    hold it for a moment), while the test still holds the runtime."""
    gc.collect()
    return sum(1 for ref in refs if ref() is not None)


def test_an_agents_own_executor_is_freed_once_unset_and_dropped() -> None:
    # (rt.tools.scope(agent).set_executor(...) per agent, as the reference
    # shows: the runtime kept every executor ever set, and a stop hook for
    # each, until it stopped.)
    refs: list[weakref.ref[Any]] = []
    with started_runtime() as rt:
        rt.tools.register(make_tool("echo", _echo))
        for i in range(20):
            agent = Agent(f"agent-{i}")
            executor = NativeExecutor(max_parallel_tool_calls=2)
            refs.append(weakref.ref(executor))
            off = rt.tools.scope(agent).set_executor(executor)
            result = rt.tools.execute(_batch(agent))
            assert not result.results[0].result.is_error
            off()
            del agent, executor, off, result
    assert rt.halted
    assert _alive(refs) == 0


def test_an_executor_bound_and_dropped_is_freed_while_the_runtime_runs() -> None:
    # (Its shutdown, registered with rt.on_stop, held it until the stop.)
    with started_runtime() as rt:
        refs: list[weakref.ref[Any]] = []
        for _ in range(10):
            executor = NativeExecutor()
            executor.bind(rt)  # (what set_executor has the scope actor do)
            refs.append(weakref.ref(executor))
            del executor
        assert _alive(refs) == 0


def test_an_executor_still_set_is_shut_down_by_the_stop() -> None:
    # Its stop hook holds it weakly: the executor a scope still has is
    # alive, so the stop shuts it down (it refuses batches afterwards).
    with started_runtime() as rt:
        rt.tools.register(make_tool("echo", _echo))
        agent = Agent("kept")
        executor = NativeExecutor()
        rt.tools.scope(agent).set_executor(executor)
        for i in range(3):  # others come and go meanwhile
            other = NativeExecutor()
            rt.tools.scope(Agent(f"gone-{i}")).set_executor(other)()
            del other
        gc.collect()
        assert not rt.tools.execute(_batch(agent)).results[0].result.is_error
    with pytest.raises(RuntimeStoppedError) as refused:  # (else it was not shut down by rt.stop())
        executor.submit(_batch(agent))
    assert "create a new ToolRuntime()" in str(refused.value)  # (the fix: it never starts again)


class _Unreferenceable:
    """An executor that takes no weak reference: recorded as before (kept)."""

    __slots__ = ("binds", "inner")

    def __init__(self) -> None:
        self.binds = 0
        self.inner = NativeExecutor()

    def bind(self, runtime: Any) -> None:
        self.binds += 1
        self.inner.bind(runtime)

    def describe(self, tools: Any) -> Any:
        return self.inner.describe(tools)

    def execute(self, batch: ToolBatchInput) -> Any:
        return self.inner.execute(batch)


def test_an_executor_without_weak_references_is_still_bound_once() -> None:
    with started_runtime() as rt:
        rt.tools.register(make_tool("echo", _echo))
        executor = _Unreferenceable()
        first, second = Agent("first"), Agent("second")
        rt.tools.scope(first).set_executor(executor)
        rt.tools.scope(second).set_executor(executor)
        for agent in (first, second):
            assert not rt.tools.execute(_batch(agent)).results[0].result.is_error
        assert executor.binds == 1


class _Body:
    def __call__(self, args: Any, ctx: Any) -> str:
        return "now"


class _FreshTools(NativeExecutor):
    """An executor whose own tool is built afresh for each batch (its
    description carries the time, say)."""

    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[weakref.ref[_Body]] = []
        self.lock = threading.Lock()

    def executor_tools(self) -> tuple[ToolDefinition, ...]:
        body = _Body()
        with self.lock:
            self.bodies.append(weakref.ref(body))
        return (make_tool("now", body),)


def test_executor_tools_built_afresh_for_each_batch_are_not_kept() -> None:
    # (The executor's cache of checked definitions kept every one, and
    # through it its body, for the runtime's life: one more a batch.)
    executor = _FreshTools()
    with started_runtime() as rt:
        rt.tools.set_executor(executor)
        for _ in range(30):
            result = rt.tools.execute(_batch(name="now"))
            assert result.results[0].result.value == "now"
        del result
    assert rt.halted
    assert len(executor.bodies) == 30
    assert _alive(executor.bodies) <= 1  # (the latest batch's, which the next one checks against)


def test_an_executor_bound_to_a_second_runtime_names_its_class_and_the_fix() -> None:
    # (PtcExecutor and RayExecutor are NativeExecutors: the message named
    # the base class, and no fix.)
    from dsh_actors.errors import InvalidStateError

    class Mine(NativeExecutor):
        pass

    executor = Mine()
    with started_runtime() as first, started_runtime() as second:
        executor.bind(first)
        with pytest.raises(InvalidStateError) as raised:
            executor.bind(second)
    assert str(raised.value) == "this Mine is already installed in another runtime: make one Mine per runtime"
