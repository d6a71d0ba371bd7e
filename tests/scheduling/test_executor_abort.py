"""Aborting a batch (SPEC sections 5 and 6): no new call starts, started
calls drain and are never abandoned, unstarted calls are logged and get
``ABORTED_BEFORE_DISPATCH``, no barrier runs after the abort, and only a
success that settles after the abort becomes ``ABORTED``.

Threads are synchronised with Events; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from dsh_actors import AbortController, Session, ToolBatchExecutionError, ToolBatchInput, UserMessage, text

from .helpers import (
    GUARD,
    Timeline,
    calls,
    code_of,
    counting_body,
    events_of,
    logged_batch,
    make_tool,
    must,
    started_runtime,
)


def codes(batch: Any) -> list[str | None]:
    return [code_of(r.result) for r in batch.results]


def test_aborting_from_inside_a_running_body_starts_nothing_new_and_drains_the_started_calls(
    rt: Any,
) -> None:
    controller = AbortController()
    timeline = Timeline()
    timeline.listen(rt)
    saw_abort: dict[str, bool] = {}

    def on_body_start(count: int, ctx: Any) -> None:
        if count == 3:  # the third body to start aborts the batch
            timeline.abort(controller)

    timeline.on_body_start = on_body_start

    def work(args: Any, ctx: Any) -> str:
        observed = ctx.signal.wait(GUARD)  # every started body sees the abort
        saw_abort[ctx.call_id] = observed and ctx.signal.aborted
        if args["i"] == 0:
            ctx.conclude_turn()
        if args["i"] == 1:
            raise ValueError("tool error after abort")
        if args["i"] == 2:
            ctx.defer_context(UserMessage((text("kept"),)))
        return "finished"

    rt.tools.register(make_tool("t", counting_body(timeline, work)))
    rt.tools.register(make_tool("excl", counting_body(timeline), classifier=None))
    names = ["t", "t", "t", "t", "t", "excl", "t", "t", "excl", "t"]
    session = Session()
    batch = rt.tools.execute(logged_batch(calls(*names), session, signal=controller.signal, max_parallel_tool_calls=3))

    started = {f"c{i}" for i in range(3)}
    assert set(timeline.starts) == started, "a body started after the abort"
    # The parallel calls behind the running ones (c3, c4) may have been
    # prepared ahead of a free slot (as the abort came); nothing behind the
    # barrier c5 was prepared, and none of them ran.
    assert started <= set(timeline.pre) <= started | {"c3", "c4"}, "a call was prepared past the barrier"
    assert saw_abort == {cid: True for cid in started}

    assert [r.call_id for r in batch.results] == [f"c{i}" for i in range(10)]
    results = [r.result for r in batch.results]
    # A success that settles after the abort becomes ABORTED (the body ran) ...
    assert code_of(results[0]) == "ABORTED"
    assert results[0].error.message == "tool call aborted"
    # ... a tool error stays the tool error ...
    assert results[1].is_error and results[1].error.message == "tool error after abort"
    assert code_of(results[1]) != "ABORTED"
    # ... and contexts deferred by an aborted success are kept.
    assert code_of(results[2]) == "ABORTED"
    assert results[2].additional_contexts == (UserMessage((text("kept"),)),)
    assert batch.additional_contexts == (UserMessage((text("kept"),)),)
    # Every unstarted call, the barriers included, is aborted before dispatch.
    assert codes(batch)[3:] == ["ABORTED_BEFORE_DISPATCH"] * 7
    assert all(r.error.message == "tool call aborted before dispatch" for r in results[3:])
    assert batch.concluded is False  # the concluding success was replaced

    assert {cid: len(items) for cid, items in timeline.results.items()} == {f"c{i}": 1 for i in range(10)}
    ids = [f"c{i}" for i in range(10)]
    assert [e["call_id"] for e in events_of(session, "tool/call")] == ids
    logged = events_of(session, "tool/result")
    assert [e["call_id"] for e in logged] == ids
    assert [e["error"]["info"]["code"] for e in logged[3:]] == ["ABORTED_BEFORE_DISPATCH"] * 7


def test_a_batch_whose_signal_is_already_aborted_runs_no_body_and_no_pre_execute_listener(
    rt: Any,
) -> None:
    controller = AbortController()
    controller.abort("before the batch")
    timeline = Timeline()
    timeline.listen(rt)
    rt.tools.register(make_tool("t", counting_body(timeline)))
    rt.tools.register(make_tool("excl", counting_body(timeline), classifier=None))
    session = Session()
    batch = rt.tools.execute(logged_batch(calls("t", "excl", "t", "nope"), session, signal=controller.signal))

    assert timeline.starts == {}
    assert timeline.pre == {}
    assert codes(batch) == ["ABORTED_BEFORE_DISPATCH"] * 4
    assert {cid: len(items) for cid, items in timeline.results.items()} == {f"c{i}": 1 for i in range(4)}
    assert [e["call_id"] for e in events_of(session, "tool/call")] == ["c0", "c1", "c2", "c3"]
    assert [e["call_id"] for e in events_of(session, "tool/result")] == ["c0", "c1", "c2", "c3"]
    assert [e["type"] for e in session.events()].count("tool/call") == 4


def test_a_started_body_that_ignores_its_signal_is_never_abandoned(rt: Any) -> None:
    controller = AbortController()
    started = threading.Event()
    both_started = threading.Barrier(2, action=started.set)
    release = threading.Event()
    finished = threading.Event()

    def body(args: Any, ctx: Any) -> str:
        both_started.wait(GUARD)  # both bodies have been invoked before the abort
        must(release, "the test to release the body")
        finished.set()
        return "late"

    rt.tools.register(make_tool("t", body))
    settled_while_running: list[bool] = []
    try:
        future = rt.tools.submit(ToolBatchInput(calls=calls("t", "t"), signal=controller.signal))
        future.add_done_callback(lambda _: settled_while_running.append(not finished.is_set()))
        must(started, "the bodies to start")
        controller.abort("stop")
        assert not future.done()
    finally:
        release.set()
    batch = future.result(GUARD)
    assert settled_while_running == [False], "the batch settled while a started body was still running"
    assert codes(batch) == ["ABORTED", "ABORTED"]


def test_a_success_committed_before_the_abort_stays_a_success(rt: Any) -> None:
    controller = AbortController()
    first_committed = threading.Event()
    release = threading.Event()

    def on_result(execution: Any, result: Any) -> None:
        if execution.call_id == "c0":
            first_committed.set()

    rt.events.on("tools/result", on_result)

    second_started = threading.Event()

    def body(args: Any, ctx: Any) -> str:
        if args["i"] == 1:
            second_started.set()
            must(release, "the test to release call 1")
        return f"v{args['i']}"

    rt.tools.register(make_tool("t", body))
    try:
        future = rt.tools.submit(ToolBatchInput(calls=calls("t", "t"), signal=controller.signal))
        must(first_committed, "call 0 to be committed")
        must(second_started, "call 1's body to be invoked (so its outcome is ABORTED)")
        controller.abort("after the first result")
    finally:
        release.set()
    batch = future.result(GUARD)
    assert batch.results[0].result.value == "v0"
    assert codes(batch) == [None, "ABORTED"]


def test_an_abort_during_a_serial_batch_skips_the_rest_and_runs_no_later_barrier(rt: Any) -> None:
    controller = AbortController()
    timeline = Timeline()
    timeline.listen(rt)

    def work(args: Any, ctx: Any) -> str:
        if args["i"] == 1:
            with timeline.lock:
                timeline.abort(controller)
        return "ok"

    rt.tools.register(make_tool("t", counting_body(timeline, work)))
    rt.tools.register(make_tool("excl", counting_body(timeline), classifier=None))
    batch = rt.tools.execute(
        ToolBatchInput(calls=calls("t", "t", "excl", "t", "excl"), signal=controller.signal, max_parallel_tool_calls=1)
    )
    assert set(timeline.starts) == {"c0", "c1"}
    assert set(timeline.pre) == {"c0", "c1"}
    assert codes(batch) == [
        None,
        "ABORTED",
        "ABORTED_BEFORE_DISPATCH",
        "ABORTED_BEFORE_DISPATCH",
        "ABORTED_BEFORE_DISPATCH",
    ]
    assert {cid: len(items) for cid, items in timeline.results.items()} == {f"c{i}": 1 for i in range(5)}


def test_an_async_body_waiting_forever_is_cancelled_when_the_batch_aborts(rt: Any) -> None:
    controller = AbortController()
    started = threading.Event()
    cancelled = threading.Event()

    async def body(args: Any, ctx: Any) -> str:
        started.set()
        try:
            await asyncio.Event().wait()  # never set
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "unreachable"

    rt.tools.register(make_tool("forever", body))
    future = rt.tools.submit(ToolBatchInput(calls=calls("forever"), signal=controller.signal))
    must(started, "the async body to start")
    controller.abort("stop waiting")
    batch = future.result(GUARD)
    assert codes(batch) == ["ABORTED"]
    assert cancelled.is_set()


def test_an_aborted_batch_publishes_exactly_one_tools_result_per_call_with_async_and_sync_bodies(
    rt: Any,
) -> None:
    controller = AbortController()
    all_started = threading.Event()
    lock = threading.Lock()
    started: list[str] = []
    published: list[str] = []
    rt.events.on("tools/result", lambda execution, result: published.append(execution.call_id))

    def starting(ctx: Any) -> None:
        with lock:
            started.append(ctx.call_id)
            if len(started) == 4:
                all_started.set()

    async def waiting(args: Any, ctx: Any) -> str:
        starting(ctx)
        await asyncio.Event().wait()
        return "unreachable"

    def sync(args: Any, ctx: Any) -> str:
        starting(ctx)
        ctx.signal.wait(GUARD)
        return "drained"

    rt.tools.register(make_tool("waiting", waiting))
    rt.tools.register(make_tool("sync", sync))
    future = rt.tools.submit(
        ToolBatchInput(
            calls=calls("waiting", "sync", "waiting", "sync", "sync", "sync"),
            signal=controller.signal,
            max_parallel_tool_calls=4,
        )
    )
    must(all_started, "the first four bodies to start")
    controller.abort()
    batch = future.result(GUARD)
    assert sorted(started) == ["c0", "c1", "c2", "c3"]
    assert codes(batch)[:4] == ["ABORTED"] * 4
    assert codes(batch)[4:] == ["ABORTED_BEFORE_DISPATCH"] * 2
    assert sorted(published) == [f"c{i}" for i in range(6)]


def test_stopping_the_runtime_during_a_batch_settles_the_batch_and_leaves_no_thread() -> None:
    started = threading.Event()
    saw_abort: list[bool] = []

    def body(args: Any, ctx: Any) -> str:
        started.set()
        # stop() aborts running batches; a shorter bound keeps a failure cheap.
        saw_abort.append(ctx.signal.wait(3.0))
        return "stopped"

    with started_runtime() as rt:
        rt.tools.register(make_tool("t", body))
        future = rt.tools.submit(ToolBatchInput(calls=calls("t", "t", "t"), max_parallel_tool_calls=1))
        must(started, "the first body to start")
        rt.stop()
        try:
            batch = future.result(GUARD)
        except ToolBatchExecutionError:
            pass  # the runtime went away under the batch: a batch failure is fine
        else:
            assert codes(batch)[0] == "ABORTED"
            assert codes(batch)[1:] == ["ABORTED_BEFORE_DISPATCH"] * 2
    assert saw_abort == [True]


# -- an async body's end and an abort both queued before the batch runs ---------------


def _end_then_abort(monkeypatch: Any, *, deferred: bool) -> Any:
    """A batch ``[d (deferred by the approval service)?, t (async)]`` whose
    ``t`` returns while the runtime's only step slot is held by another
    batch (its sync pre-execute listener waits): the body's end and then
    the abort's wake are queued before the batch can run again."""
    from dsh_actors import Agent, Ask
    from dsh_actors.scheduling.dispatcher import Dispatcher

    monkeypatch.setattr(Dispatcher, "STEPPING_MAX", 1)
    loop = asyncio.new_event_loop()
    loop_thread = threading.Thread(target=loop.run_forever, daemon=True)
    loop_thread.start()
    started, holding, release = threading.Event(), threading.Event(), threading.Event()
    try:
        with started_runtime(loop=loop) as rt:
            opened: list[asyncio.Event] = []

            async def body(args: Any, ctx: Any) -> str:
                opened.append(asyncio.Event())
                started.set()
                await opened[0].wait()
                return "returned"

            rt.tools.register(make_tool("t", body))
            rt.tools.register(make_tool("d", lambda args, ctx: "never"))
            rt.tools.register(make_tool("hold", lambda args, ctx: "held"))

            def listener(execution: Any, next_: Any) -> Any:
                if execution.name == "d":
                    return Ask(reason="a person decides")
                if execution.name == "hold":
                    holding.set()
                    release.wait(GUARD)
                return next_()

            rt.events.on("tools/pre-execute", listener)
            rt.approvals.set(lambda request: "deferred")
            controller = AbortController()
            names = ("d", "t") if deferred else ("t",)
            future = rt.tools.submit(
                ToolBatchInput(calls=tuple(calls(*names)), agent=Agent("a"), signal=controller.signal)
            )
            must(started, "t's body started")
            holder = rt.tools.submit(ToolBatchInput(calls=tuple(calls("hold"))))
            must(holding, "the only step slot is held")
            loop.call_soon_threadsafe(opened[0].set)  # t returns; its end is queued, nothing runs the batch
            for _ in range(3):  # the loop reports the end (the flight's done callback, then the put)
                asyncio.run_coroutine_threadsafe(asyncio.sleep(0), loop).result(GUARD)
            controller.abort("the user stopped")  # its wake is queued behind the end
            release.set()
            batch = future.result(GUARD)
            holder.result(GUARD)
    finally:
        release.set()
        loop.call_soon_threadsafe(loop.stop)
        loop_thread.join(GUARD)
        loop.close()
    return batch


def test_an_async_body_that_returned_before_the_abort_keeps_its_result_though_the_batch_ran_after(
    monkeypatch: Any,
) -> None:
    batch = _end_then_abort(monkeypatch, deferred=False)
    # It was ABORTED: whether the abort came first was read when the batch
    # finished the call, not when the body ended on its loop.
    assert codes(batch) == [None]
    assert batch.results[0].result.content[0].text == "returned"


def test_an_aborted_batch_with_a_deferred_call_never_suspends_though_its_last_end_came_first(
    monkeypatch: Any,
) -> None:
    batch = _end_then_abort(monkeypatch, deferred=True)
    # It suspended: the end was taken without a step, and "done?" was asked
    # before any step had seen the abort's wake queued behind it.
    assert batch.pending == ()
    assert batch.suspension is None
    assert codes(batch) == ["ABORTED_BEFORE_DISPATCH", None]
