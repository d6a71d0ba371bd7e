"""The body's signal is fused only when somebody reads ``ctx.signal``
(``ToolRunContext._fused``): it must be indistinguishable from a signal
fused before the body started and closed after it returned.

Most calls go through ``rt.tools.dispatch`` (the inline trip on the test
thread: the body's parents are the caller's signal and the runtime's stop
signal, so the caller's ``listener_count`` shows whether the body's signal
exists and is subscribed). Nothing sleeps: threads meet on events and
barriers, every wait is bounded by ``WAIT``.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from dsh_actors import (
    AbortController,
    AbortSignal,
    Agent,
    ErrorCode,
    ToolBatchInput,
    ToolExecutionInput,
)
from dsh_actors.signals import fuse_late

from .helpers import WAIT, assert_failure, call, echo_tool


def dispatch(rt: Any, signal: AbortSignal) -> Any:
    return rt.tools.dispatch(ToolExecutionInput(call_id="c1", name="echo", arguments={"message": "hi"}, signal=signal))


def test_a_body_that_never_reads_its_signal_subscribes_nothing(rt: Any) -> None:
    caller = AbortController()
    seen: dict[str, Any] = {}

    def body(args: Any, ctx: Any) -> Any:
        seen["during"] = caller.signal.listener_count
        return args["message"]

    rt.tools.register(echo_tool(execute=body))

    result = dispatch(rt, caller.signal)

    assert result.value == "hi"
    assert seen["during"] == 0
    assert caller.signal.listener_count == 0


def test_a_body_that_reads_its_signal_subscribes_until_it_returns(rt: Any) -> None:
    caller = AbortController()
    seen: dict[str, Any] = {}

    def body(args: Any, ctx: Any) -> Any:
        signal = ctx.signal
        seen["same"] = ctx.signal is signal
        seen["pending"] = not signal.aborted
        seen["during"] = caller.signal.listener_count
        seen["signal"] = signal
        return args["message"]

    rt.tools.register(echo_tool(execute=body))

    result = dispatch(rt, caller.signal)

    assert result.value == "hi"
    assert seen == {"same": True, "pending": True, "during": 1, "signal": seen["signal"]}
    assert seen["signal"] is not caller.signal
    assert caller.signal.listener_count == 0  # closed after the body
    caller.abort()
    assert not seen["signal"].aborted  # closed: it never aborts


def test_a_body_that_reads_its_signal_after_the_caller_aborted_sees_it_aborted(rt: Any) -> None:
    caller = AbortController()
    reason = RuntimeError("stop now")
    seen: dict[str, Any] = {}

    def body(args: Any, ctx: Any) -> Any:
        caller.abort(reason)  # before the body's signal exists
        seen["aborted"] = ctx.signal.aborted
        seen["reason"] = ctx.signal.reason
        seen["wait"] = ctx.signal.wait(0)
        return args["message"]

    rt.tools.register(echo_tool(execute=body))

    result = (
        rt.tools.execute(ToolBatchInput(calls=[call()], agent=Agent("main"), signal=caller.signal)).results[0].result
    )

    assert seen == {"aborted": True, "reason": reason, "wait": True}
    assert_failure(result, "tool call aborted", ErrorCode.ABORTED)


def test_a_late_signal_takes_the_reason_of_the_parent_that_aborted_first(rt: Any) -> None:
    # Parents (caller, wrapper's replacement, stop): the wrapper's aborts
    # first, the caller's second, and only then the body reads its signal.
    # A signal subscribed since the body started would have fired with the
    # wrapper's reason, not with the caller's (the first in argument order).
    caller = AbortController()
    replacement = AbortController()
    seen: dict[str, Any] = {}

    def wrapper(execution: Any, next_: Any) -> Any:
        execution.signal = replacement.signal
        return next_()

    def body(args: Any, ctx: Any) -> Any:
        replacement.abort("wrapper first")
        caller.abort("caller second")
        seen["reason"] = ctx.signal.reason
        return args["message"]

    rt.events.on("tools/execute", wrapper)
    rt.tools.register(echo_tool(execute=body))

    dispatch(rt, caller.signal)

    assert seen["reason"] == "wrapper first"


def test_fuse_late_orders_reasons_by_when_the_parents_aborted() -> None:
    a, b, c = AbortController(), AbortController(), AbortController()
    assert not fuse_late((a.signal, b.signal)).aborted
    b.abort("b")
    a.abort("a")
    assert AbortSignal.any(a.signal, b.signal).reason == "a"  # argument order
    late = fuse_late((a.signal, b.signal, c.signal))
    assert late.reason == "b"  # abort order
    assert c.signal.listener_count == 0  # born aborted: subscribed nowhere
    # Fused again later, it still counts as having aborted with "b".
    assert fuse_late((a.signal, late)).reason == "b"


def test_a_late_signal_fired_by_a_parent_keeps_working_as_a_fused_one() -> None:
    a, b = AbortController(), AbortController()
    late = fuse_late((a.signal, b.signal))
    assert a.signal.listener_count == b.signal.listener_count == 1
    fired: list[object] = []
    late.add_callback(lambda signal: fired.append(signal.reason))
    b.abort("b")
    assert fired == ["b"]
    assert a.signal.listener_count == b.signal.listener_count == 0


def test_threads_given_the_context_share_one_signal_and_see_the_abort(rt: Any) -> None:
    caller = AbortController()
    readers = 4
    barrier = threading.Barrier(readers + 1, timeout=WAIT)
    signals: list[AbortSignal] = []
    woke: list[bool] = []
    lock = threading.Lock()

    def reader(ctx: Any) -> None:
        barrier.wait()  # everyone reads ctx.signal for the first time at once
        signal = ctx.signal
        with lock:
            signals.append(signal)
        barrier.wait()
        woke.append(signal.wait(WAIT))

    def body(args: Any, ctx: Any) -> Any:
        threads = [threading.Thread(target=reader, args=(ctx,)) for _ in range(readers)]
        for thread in threads:
            thread.start()
        barrier.wait()
        barrier.wait()  # every reader has its signal
        caller.abort()
        for thread in threads:
            thread.join(WAIT)
        signals.append(ctx.signal)
        return args["message"]

    rt.tools.register(echo_tool(execute=body))

    result = dispatch(rt, caller.signal)

    assert_failure(result, "tool call aborted", ErrorCode.ABORTED)
    assert len(signals) == readers + 1
    assert all(signal is signals[0] for signal in signals)
    assert woke == [True] * readers


def test_a_context_read_after_the_body_returned_gets_a_closed_signal(rt: Any) -> None:
    caller = AbortController()
    kept: list[Any] = []

    def body(args: Any, ctx: Any) -> Any:
        kept.append(ctx)
        return args["message"]

    rt.tools.register(echo_tool(execute=body))

    assert dispatch(rt, caller.signal).value == "hi"
    caller.abort()  # after the body: its signal had been closed by then
    signal = kept[0].signal
    assert not signal.aborted
    assert repr(signal) == "<AbortSignal pending closed>"
    assert kept[0].signal is signal
    assert caller.signal.listener_count == 0


def test_a_context_read_after_an_aborted_body_returned_is_aborted(rt: Any) -> None:
    caller = AbortController()
    kept: list[Any] = []

    def body(args: Any, ctx: Any) -> Any:
        kept.append(ctx)
        caller.abort("gone")  # never read during the body
        return args["message"]

    rt.tools.register(echo_tool(execute=body))

    assert_failure(dispatch(rt, caller.signal), "tool call aborted", ErrorCode.ABORTED)
    signal = kept[0].signal
    assert signal.aborted
    assert signal.reason == "gone"


def test_an_async_body_that_never_reads_its_signal_is_still_cancelled(rt: Any) -> None:
    caller = AbortController()
    started = threading.Event()

    async def body(args: Any, ctx: Any) -> Any:
        started.set()
        await asyncio.wait_for(asyncio.Event().wait(), WAIT)  # only the abort ends it early
        return args["message"]

    rt.tools.register(echo_tool(execute=body))
    future = rt.tools.submit(ToolBatchInput(calls=[call()], agent=Agent("main"), signal=caller.signal))

    assert started.wait(WAIT)
    caller.abort()

    assert_failure(future.result(timeout=WAIT).results[0].result, "tool call aborted", ErrorCode.ABORTED)


def test_a_sync_body_returning_a_coroutine_is_cancelled_by_its_signal(rt: Any) -> None:
    caller = AbortController()
    started = threading.Event()

    async def work() -> str:
        started.set()
        await asyncio.wait_for(asyncio.Event().wait(), WAIT)
        return "late"

    def body(args: Any, ctx: Any) -> Any:
        return work()  # the signal is fused after the body returned this

    rt.tools.register(echo_tool(execute=body))
    future = rt.tools.submit(ToolBatchInput(calls=[call()], agent=Agent("main"), signal=caller.signal))

    assert started.wait(WAIT)
    caller.abort()

    assert_failure(future.result(timeout=WAIT).results[0].result, "tool call aborted", ErrorCode.ABORTED)
