"""rt.stop() drains: after it returns, every call of a running batch has
exactly one result (ABORTED, ABORTED_BEFORE_DISPATCH or its real one) and,
when logged, its tool/result; a body still running at stop's timeout is
named in the batch's error, never silently dropped."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from dsh_actors import Session, ToolBatchExecutionError, ToolBatchInput, ToolRuntime

from .helpers import (
    GUARD,
    assert_no_new_threads,
    calls,
    code_of,
    events_of,
    live_threads,
    logged_batch,
    make_tool,
    must,
)


def test_stop_drains_a_logged_batch_and_every_call_gets_one_result_and_its_tool_result() -> None:
    before = live_threads()
    rt = ToolRuntime().start()
    started = threading.Semaphore(0)
    running = threading.Event()
    count = 0
    lock = threading.Lock()

    def cooperative(args: Any, ctx: Any) -> str:
        nonlocal count
        with lock:
            count += 1
            if count == 10:
                running.set()
        ctx.signal.wait(GUARD)  # ends when the runtime stops
        started.release()
        return "done"

    rt.tools.register(make_tool("t", cooperative))
    session = Session()
    future = rt.tools.submit(logged_batch(calls(*["t"] * 300), session))
    must(running, "ten bodies to run")
    rt.stop()
    batch = future.result(GUARD)  # a result, not an error
    assert_no_new_threads(before)
    codes = [code_of(r.result) for r in batch.results]
    assert len(codes) == 300
    assert codes[:10] == ["ABORTED"] * 10
    assert set(codes[10:]) == {"ABORTED_BEFORE_DISPATCH"}
    ids = [f"c{i}" for i in range(300)]
    assert [e["call_id"] for e in events_of(session, "tool/call")] == ids
    assert [e["call_id"] for e in events_of(session, "tool/result")] == ids
    assert session.pending_calls() == []


def test_a_body_still_running_at_stops_timeout_is_named_in_the_batch_error_and_logged_aborted() -> None:
    before = live_threads()
    rt = ToolRuntime().start()
    running, release = threading.Event(), threading.Event()

    def stubborn(args: Any, ctx: Any) -> str:
        running.set()
        release.wait(GUARD)  # ignores its signal
        return "late"

    rt.tools.register(make_tool("stubborn", stubborn))
    rt.tools.register(make_tool("quick", lambda args, ctx: "quick"))
    session = Session()
    future = rt.tools.submit(logged_batch(calls("quick", "stubborn", "quick", "quick"), session))
    must(running, "the stubborn body to run")
    try:
        rt.stop(timeout=0.3)
        with pytest.raises(ToolBatchExecutionError, match='c1 \\(tool "stubborn"\\)') as info:
            future.result(GUARD)
    finally:
        release.set()
    err = info.value
    codes = [code_of(r.result) for r in err.results]
    assert codes[0] in (None, "ABORTED") and codes[1] == "ABORTED"
    # c0, c2 and c3 ran beside c1 or never started: a success whose body
    # settled before the stop stays one (reference section 7), even though
    # c2 and c3 commit after c1; anything else is aborted.
    assert set(codes[2:]) <= {None, "ABORTED", "ABORTED_BEFORE_DISPATCH"}
    assert [e["call_id"] for e in events_of(session, "tool/result")] == ["c0", "c1", "c2", "c3"]
    assert session.pending_calls() == []
    assert_no_new_threads(before)  # the stubborn call actor ends once its body returns


def test_a_second_concurrent_stop_returns_only_once_the_runtime_is_stopped() -> None:
    before = live_threads()
    rt = ToolRuntime().start()
    running, release = threading.Event(), threading.Event()

    def draining(args: Any, ctx: Any) -> str:
        running.set()
        ctx.signal.wait(GUARD)  # the runtime is stopping
        release.wait(GUARD)  # and the drain waits for this body
        return "done"

    rt.tools.register(make_tool("t", draining))
    future = rt.tools.submit(ToolBatchInput(calls=calls("t")))
    must(running, "the body to run")
    first = threading.Thread(target=rt.stop, name="first-stop")
    first.start()
    assert rt.stop_signal.wait(GUARD), "the first stop never began"
    seen: list[tuple[bool, bool]] = []
    calling = threading.Event()

    def second_stop() -> None:
        calling.set()
        rt.stop()
        seen.append((rt.halted, future.done()))

    second = threading.Thread(target=second_stop, name="second-stop")
    second.start()
    must(calling, "the second stop to be called")
    release.set()
    second.join(GUARD)
    first.join(GUARD)
    assert seen == [(True, True)]  # it returned after the batch drained and the runtime stopped
    assert code_of(future.result(GUARD).results[0].result) == "ABORTED"
    assert_no_new_threads(before)


@pytest.mark.parametrize("where", ["body", "observer"])
def test_stop_from_inside_a_tool_body_or_observer_starts_the_stop_and_returns_at_once(where: str) -> None:
    before = live_threads()
    rt = ToolRuntime().start()
    seen: list[tuple[bool, bool]] = []

    def stop_here() -> None:
        rt.stop(timeout=5.0)  # it cannot wait for its own thread: it must not wait out the timeout
        seen.append((rt.stop_signal.aborted, rt.halted))

    def body(args: Any, ctx: Any) -> str:
        if where == "body":
            stop_here()
        return "done"

    if where == "observer":
        rt.events.on("tools/result", lambda execution, result: stop_here())
    rt.tools.register(make_tool("t", body))
    batch = rt.tools.submit(ToolBatchInput(calls=calls("t"))).result(GUARD)
    assert seen == [(True, False)]  # the stop began, and was not waited for on this thread
    assert len(batch.results) == 1
    rt.stop()  # from this thread: returns once the stop it started is done
    assert rt.halted
    assert_no_new_threads(before)
