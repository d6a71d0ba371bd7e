"""The four ways to run a batch give the same result (SPEC section 1):
``rt.tools.execute``, ``rt.tools.submit(...).result()``, ``await
rt.tools.execute_async(...)`` (which never blocks the event loop) and
``rt.registry.ask(ExecuteBatch(batch=...))``.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from typing import Any

from dsh_actors import Session, ToolBatchInput, ToolCall, UserMessage, text
from dsh_actors.messages import ExecuteBatch

from .helpers import GUARD, logged_batch, make_tool


def register_mixed(rt: Any) -> None:
    def echo(args: Any, ctx: Any) -> str:
        if args.get("fail"):
            raise ValueError(f"failed {ctx.call_id}")
        if args.get("note"):
            ctx.defer_context(UserMessage((text(f"note {ctx.call_id}"),)))
        if args.get("conclude"):
            ctx.conclude_turn()
        return f"echo {args['i']}"

    rt.tools.register(make_tool("echo", echo))
    rt.tools.register(make_tool("serial", echo, classifier=None))


MIXED_CALLS = (
    ToolCall(id="c0", name="echo", arguments='{"i": 0}'),
    ToolCall(id="c1", name="serial", arguments='{"i": 1, "note": true}'),
    ToolCall(id="c2", name="echo", arguments='{"i": 2, "fail": true}'),
    ToolCall(id="c3", name="missing", arguments="{}"),
    ToolCall(id="c4", name="echo", arguments="not json"),
    ToolCall(id="c5", name="echo", arguments={"i": 5, "conclude": True}),
)


def test_execute_submit_execute_async_and_a_registry_ask_give_equal_results(rt: Any) -> None:
    register_mixed(rt)
    sessions = [Session() for _ in range(4)]
    batches = [logged_batch(MIXED_CALLS, s) for s in sessions]

    by_execute = rt.tools.execute(batches[0])
    future = rt.tools.submit(batches[1])
    assert isinstance(future, Future)
    by_submit = future.result(GUARD)

    async def main() -> Any:
        return await asyncio.wait_for(rt.tools.execute_async(batches[2]), GUARD)

    by_async = asyncio.run(main())
    by_ask = rt.registry.ask(ExecuteBatch(batch=batches[3]), timeout=GUARD)

    assert by_execute == by_submit == by_async == by_ask
    assert [r.call_id for r in by_execute.results] == ["c0", "c1", "c2", "c3", "c4", "c5"]
    assert [r.result.is_error for r in by_execute.results] == [False, False, True, True, True, False]
    assert by_execute.concluded is True
    assert by_execute.additional_contexts == (UserMessage((text("note c1"),)),)
    first = sessions[0].events()
    assert all(s.events() == first for s in sessions[1:])
    assert [e["type"] for e in first].count("tool/batch") == 1
    assert [e["type"] for e in first].count("tool/call") == 6
    assert [e["type"] for e in first].count("tool/result") == 6


def test_a_registry_message_with_a_reply_future_gives_the_same_result(rt: Any) -> None:
    register_mixed(rt)
    expected = rt.tools.execute(ToolBatchInput(calls=MIXED_CALLS))
    reply: Future[Any] = Future()
    rt.registry.tell(ExecuteBatch(batch=ToolBatchInput(calls=MIXED_CALLS), reply=reply))
    assert reply.result(GUARD) == expected


def test_execute_async_never_blocks_the_event_loop(rt: Any) -> None:
    """The body waits for a flag that only another task on the caller's loop
    sets: if awaiting the batch blocked the loop, the body would time out."""
    flag = threading.Event()

    async def main() -> Any:
        loop = asyncio.get_running_loop()
        body_started = asyncio.Event()

        def body(args: Any, ctx: Any) -> str:
            loop.call_soon_threadsafe(body_started.set)
            return "saw the flag" if flag.wait(GUARD) else "the loop was blocked"

        rt.tools.register(make_tool("t", body))

        async def setter() -> None:
            await asyncio.wait_for(body_started.wait(), GUARD)
            flag.set()

        helper = asyncio.create_task(setter())
        batch = await asyncio.wait_for(
            rt.tools.execute_async(ToolBatchInput(calls=[ToolCall(id="c0", name="t")])), GUARD
        )
        await helper
        return batch

    batch = asyncio.run(main())
    assert batch.results[0].result.value == "saw the flag"


def test_batches_submitted_together_all_settle_with_their_own_results(rt: Any) -> None:
    rt.tools.register(make_tool("t", lambda args, ctx: f"{ctx.call_id}"))
    futures = [
        rt.tools.submit(ToolBatchInput(calls=[ToolCall(id=f"b{b}c{i}", name="t") for i in range(5)])) for b in range(6)
    ]
    for b, future in enumerate(futures):
        batch = future.result(GUARD)
        assert [r.result.value for r in batch.results] == [f"b{b}c{i}" for i in range(5)]
