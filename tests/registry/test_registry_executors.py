"""Executor contributions and selection, and the four ways to run a batch
(``execute``, ``submit``, ``execute_async``, ``rt.registry.ask``)."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

import pytest

from dsh_actors.errors import ExecutorUnavailableError, RegistrationError
from dsh_actors.messages import ExecuteBatch, Retract
from dsh_actors.model import Agent, ToolBatchInput, ToolBatchResult, ToolCall
from dsh_actors.registry import select_executor
from dsh_actors.runtime import ToolRuntime
from dsh_actors.signals import AbortSignal

from .helpers import WAIT, BlockingExecutor, RecordingExecutor, batch, labelled, tool


def remove_native(rt: Any) -> None:
    """Retract the default executor that start() installed globally."""
    (native,) = rt.state.snapshot(None).executors
    assert rt.registry.ask(Retract(contribution=native), timeout=WAIT) is True


def test_the_runtime_installs_the_native_executor_globally(rt: Any) -> None:
    assert select_executor(rt.state, None) is rt.native_executor
    assert select_executor(rt.state, Agent("any")) is rt.native_executor


def test_the_nearest_executor_on_the_chain_is_selected(rt: Any) -> None:
    root = Agent("root")
    mid = Agent("mid", parent=root)
    leaf = Agent("leaf", parent=mid)
    g, r, m = RecordingExecutor("global"), RecordingExecutor("root"), RecordingExecutor("mid")
    rt.tools.set_executor(g)
    rt.tools.scope(root).set_executor(r)
    rt.tools.scope(mid).set_executor(m)
    assert rt.tools.execute(batch(leaf)) == labelled("mid")
    assert rt.tools.execute(batch(mid)) == labelled("mid")
    assert rt.tools.execute(batch(root)) == labelled("root")
    assert rt.tools.execute(batch(None)) == labelled("global")
    assert rt.tools.execute(batch(Agent("other"))) == labelled("global")
    assert [b.agent for b in m.batches] == [leaf, mid]


def test_the_executor_gets_the_batch_as_given(rt: Any) -> None:
    rec = RecordingExecutor("r")
    agent = Agent("a")
    rt.tools.scope(agent).set_executor(rec)
    the_batch = batch(agent)
    rt.tools.execute(the_batch)
    # (On the main thread it carries a signal of its own, which Ctrl-C
    # aborts: scheduling.interrupt. Elsewhere it is the very batch.)
    assert [replace(b, signal=None) for b in rec.batches] == [the_batch]
    assert isinstance(rec.batches[0].signal, AbortSignal)
    elsewhere: list[Any] = []
    worker = threading.Thread(target=lambda: elsewhere.append(rt.tools.execute(the_batch)))
    worker.start()
    worker.join(WAIT)
    assert elsewhere and rec.batches[1] == the_batch


def test_a_scoped_service_fills_in_its_agent_when_the_batch_has_none(rt: Any) -> None:
    rec = RecordingExecutor("r")
    agent = Agent("a")
    rt.tools.scope(agent).set_executor(rec)
    assert rt.tools.scope(agent).execute(batch(None)) == labelled("r")
    assert rec.batches[0].agent is agent


def test_the_last_contribution_in_a_scope_wins_and_disposing_it_restores_the_previous(rt: Any) -> None:
    first, second = RecordingExecutor("first"), RecordingExecutor("second")
    agent = Agent("a")
    scoped = rt.tools.scope(agent)
    undo_first = scoped.set_executor(first)
    undo_second = scoped.set_executor(second)
    assert rt.tools.execute(batch(agent)) == labelled("second")
    undo_second()
    assert rt.tools.execute(batch(agent)) == labelled("first")
    undo_first()
    assert select_executor(rt.state, agent) is rt.native_executor


def test_disposing_an_earlier_contribution_keeps_the_current_one(rt: Any) -> None:
    first, second = RecordingExecutor("first"), RecordingExecutor("second")
    undo_first = rt.tools.set_executor(first)
    rt.tools.set_executor(second)
    undo_first()
    assert rt.tools.execute(batch()) == labelled("second")


def test_without_any_executor_execute_raises_a_clear_error(rt: Any) -> None:
    remove_native(rt)
    agent = Agent("main")
    with pytest.raises(ExecutorUnavailableError) as err:
        rt.tools.execute(batch(agent))
    assert str(err.value) == 'no tool executor is available for agent "main"'
    with pytest.raises(ExecutorUnavailableError, match="the global scope"):
        rt.tools.execute(batch())


def test_a_disposed_executor_leaves_its_scope_without_one_until_replaced(rt: Any) -> None:
    remove_native(rt)
    undo = rt.tools.set_executor(RecordingExecutor("only"))
    undo()
    with pytest.raises(ExecutorUnavailableError):
        rt.tools.execute(batch())
    rt.tools.set_executor(RecordingExecutor("replacement"))
    assert rt.tools.execute(batch()) == labelled("replacement")


def test_bind_runs_once_per_executor_and_runtime_before_it_is_selectable(rt: Any) -> None:
    rec = RecordingExecutor("r")
    first = rt.tools.set_executor(rec)
    rt.tools.scope(Agent("a")).set_executor(rec)
    first()
    rt.tools.set_executor(rec)
    assert rec.bound == [rt]


class Gated(RecordingExecutor):
    """Its bind reports that it began and waits for ``release``."""

    def __init__(self, label: str) -> None:
        super().__init__(label)
        self.began = threading.Event()
        self.release = threading.Event()

    def bind(self, runtime: Any) -> None:
        self.began.set()
        assert self.release.wait(WAIT)
        super().bind(runtime)


def in_thread(fn: Any) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors


def test_a_bind_that_waits_holds_back_no_other_executor_s_bind(rt: Any) -> None:
    # bind() is user code: it runs under no lock of the registry, so another
    # scope's set_executor (another executor) completes while it waits.
    slow, quick = Gated("slow"), RecordingExecutor("quick")
    first, first_errors = in_thread(lambda: rt.tools.scope(Agent("a")).set_executor(slow))
    try:
        assert slow.began.wait(WAIT)
        second, second_errors = in_thread(lambda: rt.tools.scope(Agent("b")).set_executor(quick))
        second.join(WAIT)
        assert not second.is_alive() and not second_errors
        assert quick.bound == [rt] and slow.bound == []
    finally:
        slow.release.set()
        first.join(WAIT)
    assert not first_errors and slow.bound == [rt]


def test_one_executor_set_in_two_scopes_at_once_is_bound_once_before_either_selects_it(rt: Any) -> None:
    shared = Gated("shared")
    a, b = Agent("a"), Agent("b")
    first, first_errors = in_thread(lambda: rt.tools.scope(a).set_executor(shared))
    assert shared.began.wait(WAIT)
    second, second_errors = in_thread(lambda: rt.tools.scope(b).set_executor(shared))
    shared.release.set()
    for thread in (first, second):
        thread.join(WAIT)
    assert not first_errors and not second_errors
    assert shared.bound == [rt]
    assert select_executor(rt.state, a) is shared and select_executor(rt.state, b) is shared


def test_a_failing_bind_rejects_the_contribution(rt: Any) -> None:
    class Broken(RecordingExecutor):
        def bind(self, runtime: Any) -> None:
            raise ValueError("cannot bind")

    with pytest.raises(RegistrationError, match=r"Broken.bind\(runtime\) failed: ValueError: cannot bind") as err:
        rt.tools.set_executor(Broken("b"))
    assert isinstance(err.value.__cause__, ValueError)
    assert select_executor(rt.state, None) is rt.native_executor


def test_a_bind_raising_an_exception_without_text_is_named_by_its_type(rt: Any) -> None:
    class Interrupted(RecordingExecutor):
        def bind(self, runtime: Any) -> None:
            raise KeyboardInterrupt

    with pytest.raises(RegistrationError) as err:
        rt.tools.scope(Agent("b")).set_executor(Interrupted("i"))
    assert str(err.value).endswith("Interrupted.bind(runtime) failed: KeyboardInterrupt"), str(err.value)
    assert isinstance(err.value.__cause__, KeyboardInterrupt)


def test_an_object_that_is_not_an_executor_is_rejected(rt: Any) -> None:
    with pytest.raises(RegistrationError, match="an executor needs describe"):
        rt.tools.set_executor(object())


def test_an_executor_with_only_a_blocking_execute_runs_on_a_worker_thread(rt: Any) -> None:
    blocking = BlockingExecutor("blocking")
    rt.tools.set_executor(blocking)
    assert rt.tools.execute(batch()) == labelled("blocking")
    assert blocking.threads[0].startswith("dsh-worker")


def test_an_executor_failure_reaches_the_caller(rt: Any) -> None:
    def explode(b: ToolBatchInput) -> ToolBatchResult:
        raise KeyError("executor bug")

    rt.tools.set_executor(BlockingExecutor("x", explode))
    with pytest.raises(KeyError, match="executor bug"):
        rt.tools.execute(batch())


def test_submit_that_does_not_return_a_future_fails_the_batch(rt: Any) -> None:
    class Wrong(RecordingExecutor):
        def submit(self, batch: ToolBatchInput) -> Any:
            return "not a future"

    rt.tools.set_executor(Wrong("w"))
    with pytest.raises(TypeError, match="must return a concurrent.futures.Future"):
        rt.tools.execute(batch())


# -- the four ways to run a batch --------------------------------------------


def test_execute_submit_execute_async_and_a_registry_ask_return_the_same_result(rt: Any) -> None:
    rt.tools.register(tool("echo"))
    the_batch = ToolBatchInput(calls=[ToolCall(id="c1", name="echo", arguments='{"message": "x"}')])
    via_execute = rt.tools.execute(the_batch)
    via_submit = rt.tools.submit(the_batch).result(timeout=WAIT)
    via_async = asyncio.run(rt.tools.execute_async(the_batch))
    via_ask = rt.registry.ask(ExecuteBatch(the_batch), timeout=WAIT)  # as SPEC writes it
    future: Future[ToolBatchResult] = Future()
    rt.registry.tell(ExecuteBatch(batch=the_batch, reply=future))
    via_tell = future.result(timeout=WAIT)
    assert via_execute == via_submit == via_async == via_ask == via_tell
    assert via_execute.results[0].result.value == "echo"


def test_a_registry_ask_reports_a_missing_executor_like_execute(rt: Any) -> None:
    remove_native(rt)
    with pytest.raises(ExecutorUnavailableError):
        rt.registry.ask(ExecuteBatch(batch=batch()), timeout=WAIT)


def test_execute_async_does_not_block_the_event_loop(rt: Any) -> None:
    release = threading.Event()
    started = threading.Event()

    def slow(b: ToolBatchInput) -> ToolBatchResult:
        started.set()
        assert release.wait(WAIT)
        return labelled("slow")

    rt.tools.set_executor(BlockingExecutor("slow", slow))

    async def main() -> tuple[list[str], ToolBatchResult]:
        order: list[str] = []
        task = asyncio.ensure_future(rt.tools.execute_async(batch()))
        # The loop keeps running while the batch is in flight.
        while not started.is_set():
            await asyncio.sleep(0)
        order.append("loop ran while the batch was running")
        release.set()
        result = await asyncio.wait_for(task, WAIT)
        return order, result

    order, result = asyncio.run(main())
    assert order == ["loop ran while the batch was running"]
    assert result == labelled("slow")


def test_submit_never_blocks_the_caller(rt: Any) -> None:
    never: Future[ToolBatchResult] = Future()

    class Hanging(RecordingExecutor):
        def submit(self, batch: ToolBatchInput) -> Future[ToolBatchResult]:
            return never

    rt.tools.set_executor(Hanging("h"))
    pending = rt.tools.submit(batch())
    assert not pending.done()
    never.set_result(labelled("late"))
    assert pending.result(timeout=WAIT) == labelled("late")


def test_a_caller_blocked_in_execute_is_released_when_the_runtime_stops() -> None:
    rt = ToolRuntime().start()
    submitted = threading.Event()

    class Hanging(RecordingExecutor):
        def submit(self, batch: ToolBatchInput) -> Future[ToolBatchResult]:
            submitted.set()
            return Future()  # never completes

    errors: list[BaseException] = []

    def caller() -> None:
        try:
            rt.tools.execute(batch())
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    try:
        rt.tools.set_executor(Hanging("h"))
        thread = threading.Thread(target=caller)
        thread.start()
        assert submitted.wait(WAIT)
    finally:
        rt.stop()
    thread.join(WAIT)
    assert not thread.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], RuntimeError)
    assert "stopped" in str(errors[0])


def test_a_batch_is_settled_by_the_executor_selected_when_it_started(rt: Any) -> None:
    release = threading.Event()
    started = threading.Event()

    def slow(b: ToolBatchInput) -> ToolBatchResult:
        started.set()
        assert release.wait(WAIT)
        return labelled("first")

    undo = rt.tools.set_executor(BlockingExecutor("first", slow))
    pending = rt.tools.submit(batch())
    assert started.wait(WAIT)
    undo()
    rt.tools.set_executor(RecordingExecutor("second"))
    release.set()
    assert pending.result(timeout=WAIT) == labelled("first")
    assert rt.tools.execute(batch()) == labelled("second")


class _Misbehaving:
    """An executor (a plugin) whose ``execute`` answers ``answer(batch)``
    or raises what it returns."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def describe(self, tools: Any) -> Any:
        return [t.name for t in tools]

    def execute(self, batch: ToolBatchInput) -> Any:
        outcome = self.answer(batch)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (lambda batch: None, "the executor _Misbehaving answered NoneType, not a ToolBatchResult"),
        (lambda batch: "garbage", "the executor _Misbehaving answered str, not a ToolBatchResult"),
        (lambda batch: ToolBatchResult(results=()), "answered 0 results for a batch of 1 calls"),
        (lambda batch: SystemExit(4), "the executor _Misbehaving raised SystemExit: 4"),
        (lambda batch: KeyboardInterrupt(), "the executor _Misbehaving raised KeyboardInterrupt"),
    ],
)
def test_an_executors_bad_answer_or_base_exception_reaches_the_caller_as_a_batch_error(
    rt: Any, answer: Any, message: str
) -> None:
    # A custom executor is a plugin: what it answers is checked, and what
    # it raises outside Exception (SystemExit from a dependency, a stray
    # KeyboardInterrupt) is its failure, not the application's exit.
    from dsh_actors.errors import ToolBatchExecutionError

    rt.tools.register(tool("t"))
    rt.tools.set_executor(_Misbehaving(answer))
    with pytest.raises(ToolBatchExecutionError, match=message):
        rt.tools.execute(batch(None, ToolCall("c0", "t", "{}")))


def test_batches_of_an_executor_with_only_execute_nest_past_any_thread_count() -> None:
    # Such an executor's batch runs on a thread of the runtime's own. They
    # were a pool of 32: a body waiting on a nested batch held its thread,
    # and the 33rd nested level waited for a thread for ever. A batch now
    # gets a thread at once; idle ones are reused, then retire.
    from dsh_actors import NativeExecutor, ToolRuntime, define_tool

    from .helpers import TEXT

    class OnlyExecute:
        """Delegates to a NativeExecutor, offering only execute(batch)."""

        def __init__(self) -> None:
            self.native = NativeExecutor()

        def bind(self, runtime: Any) -> None:
            self.native.bind(runtime)

        def describe(self, tools: Any) -> Any:
            return self.native.describe(tools)

        def execute(self, batch: ToolBatchInput) -> ToolBatchResult:
            return self.native.execute(batch)

    depth = 40
    before = set(threading.enumerate())
    rt = ToolRuntime(max_call_actors=2).start()
    try:
        rt.tools.set_executor(OnlyExecute())

        def nest(args: Any, ctx: Any) -> str:
            level = int(ctx.call_id[1:])
            if level == depth:
                return "bottom"
            inner = rt.tools.execute(ToolBatchInput(calls=(ToolCall(f"d{level + 1}", "nest", "{}"),)))
            return inner.results[0].result.value  # type: ignore[no-any-return]

        rt.tools.register(define_tool(name="nest", description="Nests.", parameters={}, output=TEXT, execute=nest))
        future = rt.tools.submit(ToolBatchInput(calls=(ToolCall("d0", "nest", "{}"),)))
        assert future.result(10).results[0].result.value == "bottom"
        workers = rt.workers()
        assert len(workers.threads()) > 32  # (one a level: each waits for the level below)
        # A second run reuses the idle threads: no new ones.
        threads = set(workers.threads())
        assert (
            rt.tools.submit(ToolBatchInput(calls=(ToolCall("d39", "nest", "{}"),))).result(10).results[0].result.value
            == "bottom"
        )
        assert set(workers.threads()) <= threads
    finally:
        rt.stop()
    assert [t.name for t in set(threading.enumerate()) - before if t.is_alive()] == []  # stop() joined them
