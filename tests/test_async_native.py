"""Async tools on the application's event loop: ``await execute_async``
runs a batch's async bodies on the loop that awaits it, ``ToolRuntime(loop=)``
binds every batch to one, ``resolve_async`` runs async conditions there, and
cancellation keeps its guarantees on that loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any, cast

import pytest

from dsh_actors import (
    AbortController,
    AbortSignal,
    Agent,
    Ask,
    ErrorCode,
    InvalidStateError,
    LogStep,
    ModelSelection,
    Session,
    ToolActivationContext,
    ToolBatchInput,
    ToolCall,
    ToolOutput,
    ToolRuntime,
    define_tool,
    text,
)
from dsh_actors.pipeline.stages import await_on_loop
from dsh_actors.signals import AbortController as Controller

GUARD = 10.0
TEXT = ToolOutput(schema={"type": "string"}, render=lambda args, value: [text(value)])


def tool(name: str, body: Any, *, safe: bool = True) -> Any:
    return define_tool(
        name=name,
        description=name,
        parameters={},
        output=TEXT,
        execute=body,
        is_concurrency_safe=(lambda args: True) if safe else None,
    )


def batch(*names: str, **kwargs: Any) -> ToolBatchInput:
    return ToolBatchInput(calls=[ToolCall(f"c{i}", n, "{}") for i, n in enumerate(names)], **kwargs)


def code(result: Any) -> str | None:
    return None if not result.is_error else result.error.info.code


@pytest.fixture
def app_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An application's event loop running on a thread of its own."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    thread = threading.Thread(target=lambda: (loop.call_soon(ready.set), loop.run_forever()), name="app-loop")
    thread.start()
    assert ready.wait(GUARD)
    try:
        yield loop
    finally:
        if loop.is_running():
            loop.call_soon_threadsafe(loop.stop)
        thread.join(GUARD)
        pending = asyncio.all_tasks(loop)  # a body a test's stopped loop left behind
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.close()


def test_async_bodies_run_on_the_loop_that_awaits_execute_async_and_use_what_is_bound_to_it() -> None:
    async def main() -> Any:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[str] = asyncio.Queue()
        lock = asyncio.Lock()
        ready = loop.create_future()
        seen: list[bool] = []

        async def waits(args: Any, ctx: Any) -> str:
            seen.append(asyncio.get_running_loop() is loop)
            return await ready  # a future made on the application's loop

        async def queues(args: Any, ctx: Any) -> str:
            async with lock:  # a lock shared with the application
                await queue.put("from a tool")
            return "queued"

        with ToolRuntime() as rt:
            rt.tools.register(tool("waits", waits))
            rt.tools.register(tool("queues", queues))
            running = asyncio.ensure_future(rt.tools.execute_async(batch("waits", "queues")))
            assert await asyncio.wait_for(queue.get(), GUARD) == "from a tool"
            async with lock:
                ready.set_result("resolved by the app")
            result = await asyncio.wait_for(running, GUARD)
        return [r.result.value for r in result.results], seen

    values, seen = asyncio.run(main())
    assert values == ["resolved by the app", "queued"]
    assert seen == [True]


def test_a_runtime_bound_to_a_loop_runs_every_batchs_async_bodies_there(app_loop: Any) -> None:
    where: list[Any] = []

    async def body(args: Any, ctx: Any) -> str:
        where.append(asyncio.get_running_loop())
        await asyncio.sleep(0)
        return "ok"

    with ToolRuntime(loop=app_loop) as rt:
        rt.tools.register(tool("a", body))
        result = rt.tools.execute(batch("a", "a"))  # a sync caller on another thread
    assert [r.result.value for r in result.results] == ["ok", "ok"]
    assert where == [app_loop, app_loop]


def test_execute_refuses_to_block_the_loop_the_runtime_is_bound_to(app_loop: Any) -> None:
    with ToolRuntime(loop=app_loop) as rt:
        rt.tools.register(tool("a", lambda args, ctx: "ok"))

        async def blocking() -> Any:
            rt.tools.execute(batch("a"))

        with pytest.raises(RuntimeError, match="execute_async"):
            asyncio.run_coroutine_threadsafe(blocking(), app_loop).result(GUARD)


def test_resolve_refuses_to_block_the_loop_its_async_conditions_need(app_loop: Any) -> None:
    # The loop the runtime is bound to, and the runtime's own loop (an
    # async body): resolve() there could never finish, so it is refused at
    # once, naming resolve_async, as execute() is.
    async def when(context: Any) -> bool:
        return True

    def context(agent: Agent) -> ToolActivationContext:
        return ToolActivationContext(agent, ModelSelection("p", "m"), AbortController().signal)

    agent = Agent("main")
    with ToolRuntime(loop=app_loop) as rt:
        rt.tools.scope(agent).register(tool("maybe", lambda args, ctx: "ok"), when=when)

        async def on_the_bound_loop() -> Any:
            return rt.tools.resolve(context(agent))

        with pytest.raises(InvalidStateError, match=r"bound to .*resolve_async"):
            asyncio.run_coroutine_threadsafe(on_the_bound_loop(), app_loop).result(GUARD)
    with ToolRuntime() as rt:
        rt.tools.scope(agent).register(tool("maybe", lambda args, ctx: "ok"), when=when)

        async def resolves(args: Any, ctx: Any) -> str:
            try:
                rt.tools.resolve(context(agent))
            except InvalidStateError as exc:
                return str(exc)
            return "resolved"

        rt.tools.register(tool("resolves", resolves))
        result = rt.tools.execute(batch("resolves"))
    assert "the runtime's own event loop" in result.results[0].result.value
    assert "resolve_async" in result.results[0].result.value


def test_async_conditions_run_on_the_loop_that_awaits_resolve_async() -> None:
    async def main() -> Any:
        loop = asyncio.get_running_loop()
        decided = loop.create_future()

        async def when(context: Any) -> bool:
            assert asyncio.get_running_loop() is loop
            return bool(await decided)

        with ToolRuntime() as rt:
            agent = Agent("main")
            rt.tools.scope(agent).register(tool("maybe", lambda args, ctx: "ok"), when=when)
            context = ToolActivationContext(agent, ModelSelection("p", "m"), AbortController().signal)
            resolving = asyncio.ensure_future(rt.tools.resolve_async(context))
            await asyncio.sleep(0)
            decided.set_result(True)
            tool_set = await asyncio.wait_for(resolving, GUARD)
            names = sorted(tool_set.view(agent))
            tool_set.dispose()
        return names

    assert asyncio.run(main()) == ["maybe"]


def test_cancelling_the_task_awaiting_resolve_async_cancels_its_conditions_and_waits_for_them() -> None:
    # asyncio.timeout cancels the awaiting task: the resolution is
    # cancelled (its async condition sees its task cancelled and cleans
    # up), and the CancelledError (here the TimeoutError) goes on only once
    # the resolution has ended. The caller's own signal is left alone.
    async def main() -> Any:
        started = asyncio.Event()
        cleaned: list[str] = []

        async def when(context: Any) -> bool:
            started.set()
            try:
                await asyncio.get_running_loop().create_future()  # never decides
            finally:
                cleaned.append("cleaned")
            return True

        with ToolRuntime() as rt:
            agent = Agent("main")
            rt.tools.scope(agent).register(tool("maybe", lambda args, ctx: "ok"), when=when)
            caller = AbortController()
            context = ToolActivationContext(agent, ModelSelection("p", "m"), caller.signal)
            resolving = asyncio.ensure_future(rt.tools.resolve_async(context))
            await asyncio.wait_for(started.wait(), GUARD)
            resolving.cancel()
            try:
                await asyncio.wait_for(resolving, GUARD)
            except asyncio.CancelledError:
                outcome = "cancelled"
            cleaned_by_then = list(cleaned)  # (before the runtime's stop could cancel it)
            return outcome, cleaned_by_then, caller.signal.aborted

    assert asyncio.run(main()) == ("cancelled", ["cleaned"], False)


def test_stop_on_the_awaiting_loop_before_an_async_listener_is_reached_does_not_wait_for_that_loop() -> None:
    # rt.stop() runs on the loop that awaits the batch (it blocks that
    # loop) while a sync pre-execute listener holds the call; the listener
    # goes on once the stop fired, and the async listener after it would
    # have to run on the blocked loop. It never starts: the call is
    # ABORTED_BEFORE_DISPATCH, and the stop does not wait out its timeout.
    async def main() -> Any:
        rt = ToolRuntime().start()

        async def body(args: Any, ctx: Any) -> str:
            return "ok"

        entered = threading.Event()

        def sync_listener(execution: Any, next_: Any) -> Any:
            entered.set()
            execution.signal.wait(GUARD)  # until the stop fires
            return next_()

        async def async_listener(execution: Any, next_: Any) -> Any:
            return await next_()

        rt.tools.register(tool("a", body))
        rt.events.on("tools/pre-execute", sync_listener)
        rt.events.on("tools/pre-execute", async_listener)
        task = asyncio.ensure_future(rt.tools.execute_async(batch("a")))
        assert await asyncio.to_thread(entered.wait, GUARD)
        rt.stop(timeout=GUARD)
        result = await asyncio.wait_for(task, GUARD)
        return rt.abandoned, code(result.results[0].result)

    assert asyncio.run(main()) == ((), "ABORTED_BEFORE_DISPATCH")


@pytest.mark.parametrize("launched", ["before the halt", "after the halt"])
@pytest.mark.parametrize("which", ["first", "second"])
def test_stop_on_the_awaiting_loop_just_before_an_async_listener_is_launched_does_not_wait_for_that_loop(
    which: str, launched: str
) -> None:
    # As above, but the listener's flight passed its abort check before
    # the stop fired and is launched only after the stop found nothing of
    # ours on the loop (the launch is held there): the stop then blocks the
    # loop the flight was launched onto. The flight is launched just before
    # the stop halts that loop (the halt finds its start pending; the halt
    # is held until the launch returned) or just after (the launch finds
    # the loop halted). Either way the flight never starts: the call is
    # ABORTED_BEFORE_DISPATCH (the stop fired the call's signal before it
    # halted the loop), and the stop does not wait out its timeout for the
    # loop. The same when the stop on the loop's thread is a second one,
    # waiting for a first begun on another thread.
    async def main() -> Any:
        rt = ToolRuntime().start()
        watch = rt.loop_watch
        launch, carries, halt = watch.launch, watch.carries, watch.halt
        at_launch, checked, halted, done = (threading.Event() for _ in range(4))
        early = launched == "before the halt"

        def held_launch(flight: Any) -> None:
            at_launch.set()
            assert (checked if early else halted).wait(GUARD)
            launch(flight)
            done.set()

        def checking(loop: Any) -> bool:
            found = carries(loop)
            checked.set()
            return found

        def held_halt(loop: Any) -> None:
            if early:
                assert done.wait(GUARD)  # the flight's start is pending on the loop
            halt(loop)
            halted.set()

        watch.launch = held_launch  # type: ignore[method-assign]
        watch.carries = checking  # type: ignore[method-assign]
        watch.halt = held_halt  # type: ignore[method-assign]

        async def body(args: Any, ctx: Any) -> str:
            return "ok"

        async def async_listener(execution: Any, next_: Any) -> Any:
            return await next_()

        rt.tools.register(tool("a", body))
        rt.events.on("tools/pre-execute", async_listener)
        task = asyncio.ensure_future(rt.tools.execute_async(batch("a")))
        assert await asyncio.to_thread(at_launch.wait, GUARD)
        first: threading.Thread | None = None
        if which == "second":
            first = threading.Thread(target=rt.stop, kwargs={"timeout": GUARD})
            first.start()
            assert await asyncio.to_thread(rt.stop_signal.wait, GUARD)  # the first stop has begun
        rt.stop(timeout=GUARD)
        result = await asyncio.wait_for(task, GUARD)
        if first is not None:
            first.join(GUARD)
        outcome = result.results[0].result
        return rt.abandoned, code(outcome), outcome.error.message if code(outcome) == "POLICY_FAILED" else None

    assert asyncio.run(main()) == ((), "ABORTED_BEFORE_DISPATCH", None)


def test_an_abort_cancels_a_started_body_on_the_app_loop_and_waits_for_its_cleanup() -> None:
    async def main() -> Any:
        started = asyncio.Event()
        cleaned: list[str] = []
        running_bodies: list[str] = []

        def arrive(call_id: str) -> None:
            running_bodies.append(call_id)
            if len(running_bodies) == 2:
                started.set()

        async def slow(args: Any, ctx: Any) -> str:
            arrive(ctx.call_id)
            try:
                await asyncio.sleep(GUARD)
            except asyncio.CancelledError:
                await asyncio.sleep(0)  # cleanup that itself awaits
                cleaned.append(ctx.call_id)
                raise
            return "never"

        async def ignoring(args: Any, ctx: Any) -> str:
            arrive(ctx.call_id)
            try:
                await asyncio.sleep(GUARD)
            except asyncio.CancelledError:
                cleaned.append(ctx.call_id)
            return "finished anyway"  # swallowed the cancellation: still replaced

        controller = AbortController()
        with ToolRuntime() as rt:
            rt.tools.register(tool("slow", slow))
            rt.tools.register(tool("ignoring", ignoring))
            running = asyncio.ensure_future(rt.tools.execute_async(batch("slow", "ignoring", signal=controller.signal)))
            await asyncio.wait_for(started.wait(), GUARD)  # both bodies run
            controller.abort()
            result = await asyncio.wait_for(running, GUARD)
        return [code(r.result) for r in result.results], sorted(cleaned)

    codes, cleaned = asyncio.run(main())
    assert codes == ["ABORTED", "ABORTED"]
    assert cleaned == ["c0", "c1"]  # both bodies finished before the batch settled


def test_a_task_cancelled_before_its_first_step_is_aborted_before_dispatch_and_its_coroutine_closed(
    app_loop: Any,
) -> None:
    with ToolRuntime() as rt:
        steps: list[str] = []

        async def body() -> str:
            steps.append("ran")
            return "never"

        coro = body()
        controller = Controller()
        controller.abort()  # fires as the wait begins: the task is cancelled before it runs
        with pytest.raises(Exception) as info:
            await_on_loop(rt, coro, controller.signal, app_loop, "body")
        assert getattr(info.value, "code", None) == ErrorCode.ABORTED_BEFORE_DISPATCH
        assert steps == []
        assert coro.cr_frame is None  # closed: no "coroutine was never awaited"


def test_a_closed_or_stopped_loop_fails_the_call_clearly_and_the_batch_does_not_hang() -> None:
    async def body(args: Any, ctx: Any) -> str:
        return "never"

    closed = asyncio.new_event_loop()
    closed.close()
    idle = asyncio.new_event_loop()  # never run
    try:
        for loop, state in ((closed, "closed"), (idle, "not running")):
            with ToolRuntime(loop=loop) as rt:
                rt.tools.register(tool("a", body))
                result = rt.tools.execute(batch("a", "a"))
            for item in result.results:
                assert item.result.is_error
                assert f'the event loop that runs async tool "a" is {state}' in item.result.error.message
    finally:
        idle.close()


def test_a_loop_that_stops_while_a_body_runs_fails_that_call(app_loop: Any) -> None:
    stop_now = threading.Event()

    async def body(args: Any, ctx: Any) -> str:
        stop_now.set()
        await asyncio.sleep(GUARD)
        return "never"

    with ToolRuntime(loop=app_loop) as rt:
        rt.tools.register(tool("a", body))
        future = rt.tools.submit(batch("a"))
        assert stop_now.wait(GUARD)
        app_loop.call_soon_threadsafe(app_loop.stop)
        result = future.result(GUARD)
    assert result.results[0].result.is_error
    assert "stopped before the call ended" in result.results[0].result.error.message


# -- async policies, the loop watch, the cancellation matrix, threads ----------------


def test_async_listeners_and_approval_services_run_on_the_awaiting_loop_with_its_resources() -> None:
    """An ``async def`` pre-execute listener (awaiting the rest of the chain)
    and an ``async def`` approval service use an ``asyncio.Lock``, a
    ``Queue`` and a ``Future`` made on the application's loop before the
    batch; the body then sees what they left."""

    async def main() -> Any:
        loop = asyncio.get_running_loop()
        lock = asyncio.Lock()
        seen: asyncio.Queue[str] = asyncio.Queue()
        verdict: asyncio.Future[str] = loop.create_future()
        trail: list[tuple[str, bool]] = []

        async def gate(execution: Any, next_: Any) -> Any:
            trail.append(("gate", asyncio.get_running_loop() is loop))
            async with lock:
                await seen.put(execution.call_id)
            return await next_()  # the rest of the chain: the ask below

        def ask(execution: Any, next_: Any) -> Any:
            return Ask(reason="needs a look")

        async def approve(request: Any) -> str:
            trail.append(("approval", asyncio.get_running_loop() is loop))
            return await verdict

        async def body(args: Any, ctx: Any) -> str:
            return await seen.get()

        with ToolRuntime() as rt:
            rt.tools.register(tool("a", body))
            rt.events.on("tools/pre-execute", gate)
            rt.events.on("tools/pre-execute", ask)
            rt.approvals.set(approve)
            agent = Agent("main")
            running = asyncio.ensure_future(rt.tools.execute_async(batch("a", agent=agent)))
            await asyncio.sleep(0)
            loop.call_later(0, verdict.set_result, "allowed-once")
            result = await asyncio.wait_for(running, GUARD)
        return result.results[0].result, trail

    result, trail = asyncio.run(main())
    assert not result.is_error, result
    assert result.value == "c0"
    assert trail == [("gate", True), ("approval", True)]


def test_an_async_approval_service_that_is_cancelled_with_the_batch_denies_the_call() -> None:
    async def main() -> Any:
        asked = asyncio.Event()
        cancelled: list[bool] = []

        async def approve(request: Any) -> str:
            asked.set()
            try:
                await asyncio.sleep(GUARD)
            except asyncio.CancelledError:
                cancelled.append(True)
                raise
            return "allowed-once"

        async def body(args: Any, ctx: Any) -> str:
            return "never"

        controller = AbortController()
        with ToolRuntime() as rt:
            rt.tools.register(tool("a", body))
            rt.events.on("tools/pre-execute", lambda execution, next_: Ask(reason="?"))
            rt.approvals.set(approve)
            running = asyncio.ensure_future(
                rt.tools.execute_async(batch("a", agent=Agent("main"), signal=controller.signal))
            )
            await asyncio.wait_for(asked.wait(), GUARD)
            controller.abort()
            result = await asyncio.wait_for(running, GUARD)
        return result.results[0].result, cancelled

    result, cancelled = asyncio.run(main())
    assert result.is_error
    assert cancelled == [True]  # the service's task was cancelled, and finished, before the call settled


def test_a_body_that_blocks_its_loop_is_named_in_a_warning(app_loop: Any, library_logs: None, monkeypatch: Any) -> None:
    from loguru import logger

    from dsh_actors.pipeline.flights import LoopWatch

    monkeypatch.setattr(LoopWatch, "PERIOD", 0.01)
    monkeypatch.setattr(LoopWatch, "BLOCK_WARNING", 0.05)
    warned = threading.Event()
    lines: list[str] = []

    def sink(message: Any) -> None:
        if "blocked its event loop" in str(message):
            lines.append(str(message))
            warned.set()

    async def blocking(args: Any, ctx: Any) -> str:
        warned.wait(GUARD)  # the application's bug: a blocking call on the loop
        return "done"

    handler = logger.add(sink, level="WARNING")
    try:
        with ToolRuntime(loop=app_loop) as rt:
            rt.tools.register(tool("stuck_tool", blocking))
            result = rt.tools.submit(batch("stuck_tool")).result(GUARD)
    finally:
        logger.remove(handler)
    assert warned.is_set()
    assert result.results[0].result.value == "done"
    assert 'async tool "stuck_tool" (call c0) has blocked its event loop' in lines[0]
    assert len(lines) == 1  # one warning per block, not one per look


def test_a_body_its_blocked_loop_cannot_start_is_named_in_a_warning_then_runs(
    app_loop: Any, library_logs: None, monkeypatch: Any
) -> None:
    # Something else blocks the batch's loop (the application's blocking
    # call on it): the body waits for its first step, and the watch says so.
    from loguru import logger

    from dsh_actors.pipeline.flights import LoopWatch

    monkeypatch.setattr(LoopWatch, "PERIOD", 0.01)
    monkeypatch.setattr(LoopWatch, "BLOCK_WARNING", 0.05)
    warned = threading.Event()
    lines: list[str] = []

    def sink(message: Any) -> None:
        if "for its event loop to start it" in str(message):
            lines.append(str(message))
            warned.set()

    async def waiting(args: Any, ctx: Any) -> str:
        return "ran"

    handler = logger.add(sink, level="WARNING")
    try:
        with ToolRuntime(loop=app_loop) as rt:
            rt.tools.register(tool("late_tool", waiting))
            app_loop.call_soon_threadsafe(warned.wait, GUARD)  # the application blocks its loop
            future = rt.tools.submit(batch("late_tool"))
            assert warned.wait(GUARD)
            result = future.result(GUARD)
    finally:
        logger.remove(handler)
    assert result.results[0].result.value == "ran"
    assert 'async tool "late_tool" (call c0) has waited' in lines[0]


def test_await_flight_cancels_the_flight_once_and_waits_for_its_cleanup(app_loop: Any) -> None:
    # The awaiting task is cancelled and the flight's signal fires: the
    # coroutine sees one cancellation, finishes its cleanup, and only then
    # does the awaiter's cancellation go on.
    from dsh_actors.pipeline.flights import LoopWatch, await_flight

    cleaned = threading.Event()
    cancels: list[int] = []
    inside = asyncio.Event()

    async def request() -> str:
        inside.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancels.append(1)
            for _ in range(20):  # cleanup that awaits (as the SDK's shielded cancel write)
                try:
                    await asyncio.sleep(0)
                except asyncio.CancelledError:
                    cancels.append(2)
            cleaned.set()
            raise
        return "never"

    watch = LoopWatch("test-watch")
    controller = AbortController()

    async def awaiter() -> bool:
        task = asyncio.ensure_future(await_flight(watch, request(), controller.signal, app_loop, "req", "r1"))
        await asyncio.wait_for(inside.wait(), GUARD)
        controller.abort()
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return cleaned.is_set()
        return False

    try:
        assert asyncio.run_coroutine_threadsafe(awaiter(), app_loop).result(GUARD) is True
    finally:
        watch.stop()
    assert cancels == [1]


def test_await_settled_wakes_on_the_value_and_lets_a_cancellation_win_without_abandoning_the_work(
    app_loop: Any,
) -> None:
    # await_settled: a value set from another thread wakes the task; a
    # cancellation asks once (on_cancel) and still waits for the work to
    # end; a cancellation that lands after the work ended, before the task
    # resumed, wins over the value without asking; work ended already
    # returns its value (an iteration later); work whose future is cancelled raises CancelledError.
    import concurrent.futures

    from dsh_actors.pipeline.flights import await_settled

    asks: list[str] = []

    async def scenario() -> list[str]:
        out: list[str] = []
        # 1. set from another thread while the task waits
        done: concurrent.futures.Future[str] = concurrent.futures.Future()
        task = asyncio.ensure_future(await_settled(done, lambda: asks.append("1")))
        await asyncio.sleep(0)  # the task waits now
        threading.Thread(target=done.set_result, args=("value",)).start()
        out.append(await asyncio.wait_for(task, GUARD))
        # 2. cancelled twice while the work runs: asked once, waits for the end
        done = concurrent.futures.Future()
        task = asyncio.ensure_future(await_settled(done, lambda: asks.append("2")))
        await asyncio.sleep(0)
        task.cancel()
        await asyncio.sleep(0)
        task.cancel()
        await asyncio.sleep(0)
        out.append(f"waiting {not task.done()}")
        threading.Thread(target=done.set_result, args=("late",)).start()
        try:
            await asyncio.wait_for(asyncio.shield(task), GUARD)
        except asyncio.CancelledError:
            out.append("cancelled after the end")
        # 3. the work ends, then the cancellation lands before the task resumes
        done = concurrent.futures.Future()
        task = asyncio.ensure_future(await_settled(done, lambda: asks.append("3")))
        await asyncio.sleep(0)
        done.set_result("ended")  # (on this thread: the wake is queued behind us)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            out.append("cancellation wins")
        # 4. ended already; 5. its future cancelled
        done = concurrent.futures.Future()
        done.set_result("ready")
        out.append(await await_settled(done, lambda: asks.append("4")))
        done = concurrent.futures.Future()
        task = asyncio.ensure_future(await_settled(done, lambda: asks.append("5")))
        await asyncio.sleep(0)
        done.cancel()
        try:
            await asyncio.wait_for(task, GUARD)
        except asyncio.CancelledError:
            out.append("its future cancelled")
        return out

    assert asyncio.run_coroutine_threadsafe(scenario(), app_loop).result(GUARD) == [
        "value",
        "waiting True",
        "cancelled after the end",
        "cancellation wins",
        "ready",
        "its future cancelled",
    ]
    assert asks == ["2"]


def test_the_outbox_holds_a_wave_s_ends_for_one_message_and_puts_them_once_none_is_left_in_flight(
    app_loop: Any,
) -> None:
    # Ends on the loop's thread are held for the loop's next iteration
    # (one message for the wave), unless the end leaves none of the
    # batch's flights in flight: then all that is held goes at once, in
    # that very callback. An end from another thread is put at once.
    from dsh_actors.pipeline.flights import Outbox

    messages: list[tuple[Any, ...]] = []
    outbox = Outbox(app_loop, messages.append)

    def on_loop() -> list[list[tuple[Any, ...]]]:
        seen = []
        outbox.launched = 1
        outbox.add("lone")  # the only flight: at once
        seen.append(list(messages))
        outbox.launched += 3
        outbox.add("a")
        outbox.add("b")
        seen.append(list(messages))  # held: one of the three is in flight
        outbox.add("c")  # the last: all three at once
        seen.append(list(messages))
        outbox.launched += 2
        outbox.add("d")
        return seen

    async def run() -> list[list[tuple[Any, ...]]]:
        seen = on_loop()
        await asyncio.sleep(0)  # the next iteration: "d" goes with the held flush
        await asyncio.sleep(0)
        seen.append(list(messages))
        return seen

    seen = asyncio.run_coroutine_threadsafe(run(), app_loop).result(GUARD)
    assert seen == [
        [("lone",)],
        [("lone",)],
        [("lone",), ("a", "b", "c")],
        [("lone",), ("a", "b", "c"), ("d",)],
    ]
    outbox.launched += 2

    async def hold() -> list[tuple[Any, ...]]:
        outbox.add("held")  # held: one more is in flight
        held = list(messages)
        # The other one ends on another thread (the watch's, the loop gone)
        # before this iteration ends: it takes the held end with it.
        other = threading.Thread(target=outbox.add, args=("from another thread",))
        other.start()
        other.join(GUARD)
        return held

    assert asyncio.run_coroutine_threadsafe(hold(), app_loop).result(GUARD) == messages[:3]
    asyncio.run_coroutine_threadsafe(asyncio.sleep(0), app_loop).result(GUARD)  # the flush finds nothing
    assert messages[3:] == [("held", "from another thread")]


def test_a_batch_settles_when_a_body_stops_its_loop_while_another_is_in_flight(app_loop: Any) -> None:
    # "quick" stops the bound loop and returns in the same iteration while
    # "slow" is in flight: its end is held for an iteration the stopped
    # loop never runs. The watch then ends "slow" from its own thread (the
    # loop is gone), and that end takes the held one with it: the batch
    # settles with both, "quick"'s value kept.
    slow_started = asyncio.Event()

    async def slow(args: Any, ctx: Any) -> str:
        slow_started.set()
        await asyncio.get_running_loop().create_future()  # until the loop goes
        return "never"

    async def quick(args: Any, ctx: Any) -> str:
        await slow_started.wait()
        asyncio.get_running_loop().stop()  # the loop ends after this iteration
        return "quick"

    with ToolRuntime(loop=app_loop) as rt:
        rt.tools.register(tool("slow", slow))
        rt.tools.register(tool("quick", quick))
        result = rt.tools.submit(batch("slow", "quick")).result(GUARD)
    assert code(result.results[0].result) == "TOOL_FAILED"
    assert "stopped before the call ended" in result.results[0].result.error.message
    assert result.results[1].result.value == "quick"


def test_a_flight_ends_as_its_task_does_when_the_coroutine_cancels_its_own_task(app_loop: Any) -> None:
    # The flight ends in its task's last step when that step decides how the
    # task ends; a coroutine that cancels its own task and returns leaves a
    # cancelled task (not its value), and the flight says so, as the task's
    # done callback always did. The common ends beside it: a value, an error.
    from dsh_actors.pipeline.flights import LoopWatch, await_flight

    async def returns() -> str:
        return "value"

    async def raises() -> str:
        raise ValueError("bad")

    async def cancels_itself() -> str:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        return "not this"

    watch = LoopWatch("test-watch")
    signal = AbortController().signal

    async def awaiter() -> list[str]:
        out: list[str] = []
        for coro in (returns(), raises(), cancels_itself()):
            try:
                out.append(await await_flight(watch, coro, signal, app_loop, "f", "f1"))
            except asyncio.CancelledError:
                out.append("cancelled")
            except ValueError as exc:
                out.append(f"error {exc}")
        return out

    try:
        assert asyncio.run_coroutine_threadsafe(awaiter(), app_loop).result(GUARD) == [
            "value",
            "error bad",
            "cancelled",
        ]
        assert watch.in_flight() == 0
    finally:
        watch.stop()


def test_a_cancelled_flight_body_sees_its_signal_aborted_whatever_the_order_of_subscriptions(app_loop: Any) -> None:
    # A batch's flight is cancelled when the body's one parent signal fires,
    # and ctx.signal is fused only if the body reads it (here after the
    # flight subscribed, and after another callback of the parent that
    # blocks the aborting thread until the body has looked): the flight's
    # subscription aborts ctx.signal before it sends the cancel, so the
    # body's await raises with ctx.signal already aborted.
    from dsh_actors.execution import flight_signal, fused_context
    from dsh_actors.pipeline.flights import Flight, LoopWatch

    parent = AbortController()
    ctx = fused_context(cast(Any, None), (parent.signal,))
    signal, ahead = flight_signal(ctx)
    assert signal is parent.signal  # one parent: the flight subscribes to it
    inside = threading.Event()
    looked = threading.Event()
    seen: list[Any] = []

    def blocker(_: Any) -> None:
        looked.wait(GUARD)  # the aborting thread waits here for the body's look

    async def body() -> str:
        parent.signal.add_callback(blocker)  # after the flight's subscription
        body_signal = ctx.signal  # fused now, subscribed after both
        inside.set()
        try:
            await asyncio.sleep(GUARD)
        except asyncio.CancelledError:
            seen.append((body_signal.aborted, body_signal.reason))
            looked.set()
            raise
        return "never"

    ended: list[Any] = []
    done = threading.Event()

    def on_end(value: Any, error: BaseException | None) -> None:
        ended.append(type(error).__name__)
        done.set()

    watch = LoopWatch("test-watch")
    try:
        watch.launch(Flight(body(), signal, app_loop, "body", "b1", on_end, ahead))
        assert inside.wait(GUARD)
        reason = ValueError("stop")
        parent.abort(reason)
        assert done.wait(GUARD)
    finally:
        looked.set()
        watch.stop()
    assert seen == [(True, reason)]
    assert ended == ["AbortError"]


def test_flights_launched_together_on_one_signal_share_one_subscription(app_loop: Any) -> None:
    # launch_all subscribes once per signal (a Wave): the flights on `shared`
    # hold one subscription until the last of them ends, and one that ended
    # leaves its wave; the abort cancels the ones still running, not the one
    # that ended, nor the flight on the other signal.
    from dsh_actors.pipeline.flights import Flight, LoopWatch

    shared, other = AbortController(), AbortController()
    gate = asyncio.Event()
    waiting = threading.Semaphore(0)
    ends: dict[str, Any] = {}
    all_ended = threading.Event()

    async def quick() -> str:
        return "quick"

    async def waits() -> str:
        waiting.release()
        await asyncio.sleep(GUARD)
        return "never"

    async def gated() -> str:
        waiting.release()
        await gate.wait()
        return "gated"

    def on_end(name: str) -> Any:
        def record(value: Any, error: BaseException | None) -> None:
            ends[name] = type(error).__name__ if error is not None else value
            if len(ends) == 4:
                all_ended.set()

        return record

    watch = LoopWatch("test-watch")
    try:
        flights = [
            Flight(quick(), shared.signal, app_loop, "quick", "q", on_end("quick")),
            Flight(waits(), shared.signal, app_loop, "a", "a", on_end("a")),
            Flight(gated(), other.signal, app_loop, "gated", "g", on_end("gated")),
            Flight(waits(), shared.signal, app_loop, "b", "b", on_end("b")),
        ]
        watch.launch_all(app_loop, flights)
        for _ in range(3):
            assert waiting.acquire(timeout=GUARD)
        assert shared.signal.listener_count == 1 and other.signal.listener_count == 1
        wave = flights[1].wave
        assert wave is not None and wave is flights[3].wave and wave is not flights[2].wave
        assert list(wave.flights) == [flights[1], flights[3]]  # the one that ended left it
        shared.abort()
        app_loop.call_soon_threadsafe(gate.set)
        assert all_ended.wait(GUARD)
    finally:
        watch.stop()
    assert ends == {"quick": "quick", "a": "AbortError", "b": "AbortError", "gated": "gated"}
    assert shared.signal.listener_count == 0 and other.signal.listener_count == 0


@pytest.mark.parametrize("wrapped", [False, True], ids=["flight", "under-a-wrapper"])
@pytest.mark.parametrize("logged", [False, True], ids=["no-log", "session-log"])
@pytest.mark.parametrize("how", ["signal", "stop"])
def test_the_cancellation_matrix_on_the_application_loop(wrapped: bool, logged: bool, how: str) -> None:
    """Every async call of an aborted batch (the batch's signal, or
    ``rt.stop()``) settles once, after its task ended; a started one is
    ABORTED, an unstarted one ABORTED_BEFORE_DISPATCH; with a log every
    call has its tool/result. Run through the flight path and through a
    ``tools/execute`` wrapper (a thread waits for the flight)."""

    async def main() -> Any:
        started = asyncio.Event()
        ended: list[str] = []

        async def body(args: Any, ctx: Any) -> str:
            started.set()
            try:
                await asyncio.sleep(GUARD)
            finally:
                ended.append(ctx.call_id)
            return "never"

        controller = AbortController()
        rt = ToolRuntime(max_parallel_tool_calls=1).start()
        try:
            rt.tools.register(tool("a", body))
            if wrapped:
                rt.events.on("tools/execute", lambda execution, next_: next_())
            kwargs: dict[str, Any] = {"signal": controller.signal}
            session = Session()
            if logged:
                kwargs.update(agent=Agent("main", session=session), log=LogStep(turn=1, step=1))
            running = asyncio.ensure_future(rt.tools.execute_async(batch("a", "a", **kwargs)))
            await asyncio.wait_for(started.wait(), GUARD)
            if how == "signal":
                controller.abort()
                result = await asyncio.wait_for(running, GUARD)
            else:
                await asyncio.to_thread(rt.stop)
                result = await asyncio.wait_for(running, GUARD)
        finally:
            await asyncio.to_thread(rt.stop)
        return result, ended, session

    result, ended, session = asyncio.run(main())
    assert [code(r.result) for r in result.results] == ["ABORTED", "ABORTED_BEFORE_DISPATCH"]
    assert ended == ["c0"]  # the started body finished before the batch settled
    if logged:
        assert sorted(session.results_by_call()) == ["c0", "c1"]
        assert session.pending_calls() == []


def test_concurrent_async_agents_do_not_grow_the_threads() -> None:
    """200 agents each await a batch whose async bodies are all in flight at
    once: no thread waits for a body and no batch holds an executor thread
    while it waits, so the threads stay far below one per agent."""
    agents = 200

    async def main() -> Any:
        release = asyncio.Event()
        arrived = asyncio.Event()
        count = 0

        async def body(args: Any, ctx: Any) -> str:
            nonlocal count
            count += 1
            if count == agents * 2:
                arrived.set()
            await release.wait()
            return "ok"

        with ToolRuntime() as rt:
            rt.tools.register(tool("a", body))
            before = threading.active_count()
            running = [
                asyncio.ensure_future(rt.tools.execute_async(batch("a", "a", agent=Agent(f"agent-{i}"))))
                for i in range(agents)
            ]
            await asyncio.wait_for(arrived.wait(), GUARD)
            in_flight = threading.active_count() - before
            release.set()
            results = await asyncio.wait_for(asyncio.gather(*running), GUARD)
        return in_flight, results

    in_flight, results = asyncio.run(main())
    assert all(not r.result.is_error for b in results for r in b.results)
    # Executor actors only while a batch takes a step (idle ones are kept up
    # to 32), the loop watch: nowhere near one thread per agent.
    assert in_flight <= 40, in_flight


def test_a_flight_cancelled_before_the_loop_ran_its_start_never_runs() -> None:
    """A launch that joins a start the loop has not run yet returns before
    that start is even scheduled (its launcher still on its way to
    call_soon_threadsafe): a cancel() made then must still win. Forced with
    a real loop whose call_soon_threadsafe holds the first launcher."""
    from dsh_actors.pipeline.flights import Flight, LoopWatch

    hold, held = threading.Event(), threading.Event()

    class HeldLoop(asyncio.SelectorEventLoop):
        def call_soon_threadsafe(self, callback: Any, *args: Any, **kwargs: Any) -> Any:
            if getattr(callback, "__name__", "") == "_start_pending" and not hold.is_set():
                held.set()
                hold.wait(10)  # the first launcher, after it released the watch's lock
            return super().call_soon_threadsafe(callback, *args, **kwargs)

    loop = HeldLoop()
    thread = threading.Thread(target=loop.run_forever)
    thread.start()
    watch = LoopWatch()
    ends: dict[str, Any] = {}
    both = threading.Event()
    ran: list[str] = []

    def on_end(name: str) -> Any:
        def end(value: Any, error: BaseException | None) -> None:  # (on the loop's thread: never blocks)
            ends[name] = type(error).__name__ if error is not None else value
            if len(ends) == 2:
                both.set()

        return end

    async def body(name: str) -> str:
        ran.append(name)
        return name

    try:
        first = Flight(body("first"), AbortSignal(), loop, "first", "c0", on_end("first"))
        second = Flight(body("second"), AbortSignal(), loop, "second", "c1", on_end("second"))
        launcher = threading.Thread(target=watch.launch, args=(first,))
        launcher.start()
        assert held.wait(10)
        watch.launch(second)  # joins the first one's start, not scheduled yet
        second.cancel()
        hold.set()
        launcher.join(10)
        assert both.wait(10)
        assert ends == {"first": "first", "second": "CancelledError"}
        assert ran == ["first"]
    finally:
        hold.set()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        watch.stop()


def test_the_watch_keeps_nothing_of_a_loop_that_closed_with_a_start_pending() -> None:
    from dsh_actors.pipeline.flights import Flight, LoopWatch

    watch = LoopWatch()
    try:
        loop = asyncio.new_event_loop()
        in_blocker, go = threading.Event(), threading.Event()

        def blocker() -> None:
            in_blocker.set()
            go.wait(10)
            loop.stop()

        loop.call_soon(blocker)
        thread = threading.Thread(target=loop.run_forever)
        thread.start()
        assert in_blocker.wait(10)
        ended = threading.Event()
        errors: list[str] = []

        async def body() -> int:
            return 1

        watch.launch(
            Flight(body(), AbortSignal(), loop, "x", "c0", lambda v, e: (errors.append(type(e).__name__), ended.set()))
        )
        go.set()  # the loop stops with the flight's start still queued
        thread.join(10)
        loop.close()
        assert ended.wait(10)  # the watch ends it
        assert errors == ["LoopGoneError"]
        assert watch.in_flight() == 0
        assert not watch.carries(loop)
        watch.assert_invariants()  # (no start is kept pending for a loop without flights)
    finally:
        watch.stop()


@pytest.mark.parametrize("with_signal", [False, True], ids=["no batch signal", "batch signal"])
def test_cancelling_the_task_awaiting_execute_async_aborts_the_batch_and_waits_for_it(with_signal: bool) -> None:
    """Cancelling the awaiting task (asyncio.timeout does) aborts the batch
    as its signal would: the async body is cancelled, the sync body sees
    its signal fire, each call gets its tools/result, and the
    CancelledError goes on only once the batch has settled. A signal the
    caller gave is left alone."""

    async def main() -> None:
        with ToolRuntime() as rt:
            async_entered, sync_entered = asyncio.Event(), threading.Event()
            ends: list[str] = []
            loop = asyncio.get_running_loop()

            async def slow(args: Any, ctx: Any) -> str:
                async_entered.set()
                try:
                    await asyncio.Event().wait()
                except asyncio.CancelledError:
                    ends.append("async cancelled")
                    raise
                return "never"

            def waiting(args: Any, ctx: Any) -> str:
                loop.call_soon_threadsafe(sync_entered.set)
                ends.append(f"sync saw its signal: {ctx.signal.wait(10.0)}")
                return "late"

            for name, body in (("slow", slow), ("waiting", waiting)):
                rt.tools.register(
                    define_tool(
                        name=name,
                        description=name,
                        parameters={},
                        output=ToolOutput(schema={"type": "string"}, render=lambda a, v: [text(v)]),
                        execute=body,
                        is_concurrency_safe=True,
                    )
                )
            codes: list[str | None] = []
            rt.events.on(
                "tools/result",
                lambda execution, result: codes.append(result.error.info.code if result.is_error else None),
            )
            controller = AbortController()
            batch = ToolBatchInput(
                calls=(ToolCall("c0", "slow", "{}"), ToolCall("c1", "waiting", "{}")),
                signal=controller.signal if with_signal else None,
            )
            task = asyncio.create_task(rt.tools.execute_async(batch))
            await async_entered.wait()
            await asyncio.to_thread(sync_entered.wait, 10.0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert sorted(ends) == ["async cancelled", "sync saw its signal: True"]
            assert sorted(codes, key=str) == ["ABORTED", "ABORTED"]  # (both settled before the error went on)
            assert rt.kernel.loop_watch.in_flight() == 0
            assert not controller.signal.aborted

    asyncio.run(main())


def test_the_cancellation_that_ends_execute_async_is_the_callers_own_so_a_cancel_scope_catches_it() -> None:
    """The CancelledError that goes on once the batch has settled is the one
    the awaiting task was cancelled with (its message): anyio's cancel scope
    knows its own by that message, and a new bare one escaped
    ``move_on_after``, failing the whole program."""
    anyio = pytest.importorskip("anyio")

    def waits(args: Any, ctx: Any) -> str:
        entered.set()
        ctx.signal.wait(GUARD)  # the batch is aborted by the cancellation
        return "late"

    entered = threading.Event()
    with ToolRuntime() as rt:
        rt.tools.register(tool("waits", waits))

        async def cancelled_with_a_message() -> None:
            task = asyncio.create_task(rt.tools.execute_async(batch("waits")))
            assert await asyncio.to_thread(entered.wait, GUARD)
            task.cancel("the caller's reason")
            with pytest.raises(asyncio.CancelledError) as raised:
                await task
            assert raised.value.args == ("the caller's reason",)

        asyncio.run(cancelled_with_a_message())
        entered.clear()

        async def in_a_cancel_scope() -> bool:
            async def cancel_once_entered(scope: Any) -> None:
                assert await asyncio.to_thread(entered.wait, GUARD)
                scope.cancel()

            with anyio.CancelScope() as scope:
                canceller = asyncio.create_task(cancel_once_entered(scope))
                await rt.tools.execute_async(batch("waits"))
            await canceller
            return bool(scope.cancelled_caught)

        assert anyio.run(in_a_cancel_scope)


def test_a_flight_is_named_for_what_runs_not_always_as_an_async_tool() -> None:
    # How a stop's rt.abandoned, the loop watch's warnings and LoopGoneError
    # name a flight: a tool body by default; a listener or an activation
    # condition as what it is (they are never a tool's body).
    from dsh_actors.pipeline.flights import WHEN, Flight, describe

    async def nothing() -> None:
        return None

    signal = AbortController().signal
    loop = asyncio.new_event_loop()
    try:
        made = []
        for what, call_id in (
            (None, "c0"),
            ('the async pre-execute listener or approval service of tool "t"', "c0"),
            ('the async activation condition of tool "t"', WHEN),
        ):
            coro = nothing()
            made.append(describe(Flight(coro, signal, loop, "t", call_id, lambda value, error: None, what=what)))
            coro.close()
    finally:
        loop.close()
    assert made == [
        'async tool "t" (call c0)',
        'the async pre-execute listener or approval service of tool "t" (call c0)',
        'the async activation condition of tool "t"',
    ]


def test_a_body_whose_task_the_application_cancels_fails_with_a_message_naming_it(
    app_loop: asyncio.AbstractEventLoop,
) -> None:
    """A runtime bound to the application's loop: the application cancels
    that loop's tasks (as ``asyncio.run`` does as it ends) while an async
    body runs there. The call fails with a message that names the tool and
    says what happened, not the bare ``CancelledError``."""
    entered = threading.Event()

    async def slow(args: Any, ctx: Any) -> str:
        app_loop.call_soon(entered.set)
        await asyncio.Event().wait()
        return "never"

    def cancel_all() -> None:
        for task in asyncio.all_tasks(app_loop):
            task.cancel()

    with ToolRuntime(loop=app_loop) as rt:
        rt.tools.register(tool("slow", slow))
        submitted = rt.tools.submit(batch("slow"))
        assert entered.wait(GUARD)
        app_loop.call_soon_threadsafe(cancel_all)
        result = submitted.result(GUARD).results[0].result
    assert result.is_error and result.error.info.name == "CancelledError"
    assert result.error.message == (
        'async tool "slow" ended with CancelledError, not cancelled by the runtime: it raised CancelledError '
        "itself (or awaited something that was cancelled), or something else cancelled its task (its event "
        "loop shutting down, or the application cancelling its tasks)"
    )
    kept = result.error.exception
    assert isinstance(kept, asyncio.CancelledError) and isinstance(kept.__cause__, asyncio.CancelledError)


def test_a_body_that_raises_cancelled_error_itself_fails_saying_so_and_keeps_the_exception(rt: Any) -> None:
    """Nobody cancelled its task: the message must not blame only the
    loop or the application, and what the body raised is kept, with its
    traceback, as the ``__cause__`` of the failure's exception."""

    async def fetch(args: Any, ctx: Any) -> str:
        raise asyncio.CancelledError("upstream client gave up")

    rt.tools.register(tool("fetch", fetch))
    result = rt.tools.execute(batch("fetch")).results[0].result
    assert code(result) == "TOOL_FAILED" and result.error.info.name == "CancelledError"
    message = result.error.message
    assert message.startswith('async tool "fetch" ended with CancelledError, not cancelled by the runtime: ')
    assert "it raised CancelledError itself" in message and "something else cancelled its task" in message
    assert message.endswith("; the CancelledError says: upstream client gave up")
    kept = result.error.exception
    assert isinstance(kept, asyncio.CancelledError) and str(kept) == message
    raised = kept.__cause__
    assert isinstance(raised, asyncio.CancelledError) and str(raised) == "upstream client gave up"
    frames = []
    tb = raised.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    assert "fetch" in frames
