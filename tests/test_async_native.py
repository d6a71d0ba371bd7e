"""Async tools on the application's event loop: ``await execute_async``
runs a batch's async bodies on the loop that awaits it, ``ToolRuntime(loop=)``
binds every batch to one, ``resolve_async`` runs async conditions there, and
cancellation keeps its guarantees on that loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from dsh_actors import (
    AbortController,
    Agent,
    ErrorCode,
    ModelSelection,
    ToolActivationContext,
    ToolBatchInput,
    ToolCall,
    ToolOutput,
    ToolRuntime,
    define_tool,
    text,
)
from dsh_actors.pipeline.stages import _await_on_loop
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
            running = asyncio.ensure_future(
                rt.tools.execute_async(batch("slow", "ignoring", signal=controller.signal))
            )
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
            _await_on_loop(rt, coro, controller.signal, app_loop, "body")
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
