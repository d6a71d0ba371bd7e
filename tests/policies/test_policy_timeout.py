"""policies.timeout: a tools/execute wrapper enforcing timeout_ms with one
timer thread; TOOL_TIMEOUT when its deadline fired first, ABORTED kept when
the caller aborted first, tools without timeout_ms untouched."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from policy_helpers import WAIT, Recorder, call, code_of, policy_threads, run, run_one, tool

import policies
from dsh_actors import (
    AbortController,
    Agent,
    ErrorCode,
    TextBlock,
    ToolBatchInput,
    ToolRuntime,
    ToolTimeoutError,
    UserMessage,
    text,
)
from policies.timeout import TimeoutPolicy

MESSAGE_20 = "tool call timed out after 20ms"


def waits_for_its_signal(seen: Recorder | None = None, then: str = "late") -> Any:
    """A cooperative body: it waits on ``ctx.signal`` (bounded), then returns."""

    def body(args: Any, ctx: Any) -> Any:
        fired = ctx.signal.wait(WAIT)
        if seen is not None:
            seen.add((fired, ctx.signal.reason))
        return then

    return body


def the_policy(rt: Any) -> TimeoutPolicy:
    (wrapper,) = [
        w for w in rt.events.listeners("tools/execute") if isinstance(getattr(w, "__self__", None), TimeoutPolicy)
    ]
    policy: TimeoutPolicy = wrapper.__self__
    return policy


def test_the_deadline_fires_while_a_cooperative_body_waits_on_its_signal(rt: Any) -> None:
    seen = Recorder()
    rt.use(policies.timeout)
    rt.tools.register(tool("slow", waits_for_its_signal(seen), timeout_ms=20))

    result = run_one(rt, call("slow"))

    assert code_of(result) == "TOOL_TIMEOUT"
    assert result.error.message == MESSAGE_20
    assert result.error.info is not None and result.error.info.name == "ToolTimeoutError"
    assert result.content == (TextBlock("Error: " + MESSAGE_20),)
    ((fired, reason),) = seen.items
    assert fired is True
    assert isinstance(reason, ToolTimeoutError)


def test_a_timeout_wins_whatever_the_body_returned_and_keeps_its_deferred_contexts(rt: Any) -> None:
    def body(args: Any, ctx: Any) -> Any:
        ctx.defer_context(UserMessage([text("note")], source="tests"))
        ctx.signal.wait(WAIT)
        return "a perfectly good value, too late"

    rt.use(policies.timeout)
    rt.tools.register(tool("slow", body, timeout_ms=20))

    result = run_one(rt, call("slow"), agent=Agent("main"))

    assert code_of(result) == "TOOL_TIMEOUT"
    assert [c.content for c in result.additional_contexts] == [(text("note"),)]


def test_a_deadline_centuries_off_is_waited_for_and_later_deadlines_still_fire(rt: Any) -> None:
    # A timeout_ms of 1e13 (about 317 years) is a positive finite number:
    # the timer waits for it a day at a time (Python's waits fail past
    # about 3e11 s) and goes on serving the deadlines after it.
    rt.use(policies.timeout)
    rt.tools.register(tool("patient", lambda args, ctx: "done", timeout_ms=1e13))
    rt.tools.register(tool("slow", waits_for_its_signal(), timeout_ms=20))
    assert run_one(rt, call("patient")).value == "done"
    assert code_of(run_one(rt, call("slow"))) == "TOOL_TIMEOUT"
    thread = the_policy(rt).timer.thread
    assert thread is not None and thread.is_alive()


def test_a_fractional_budget_is_shown_as_given(rt: Any) -> None:
    rt.use(policies.timeout)
    rt.tools.register(tool("slow", waits_for_its_signal(), timeout_ms=12.5))

    result = run_one(rt, call("slow"))

    assert result.error is not None and result.error.message == "tool call timed out after 12.5ms"


def test_a_body_that_ignores_its_signal_is_not_abandoned_and_still_times_out(rt: Any) -> None:
    deadline_seen = threading.Event()
    returned = Recorder()

    def body(args: Any, ctx: Any) -> Any:
        # Not cooperative with the pipeline: it only notices the deadline
        # through a callback, and returns when the test lets it.
        ctx.signal.add_callback(lambda signal: deadline_seen.set())
        assert deadline_seen.wait(WAIT)
        returned.add("returned")
        return "done"

    rt.use(policies.timeout)
    rt.tools.register(tool("stubborn", body, timeout_ms=20))

    result = run_one(rt, call("stubborn"))

    assert returned.items == ["returned"]
    assert code_of(result) == "TOOL_TIMEOUT"


def test_an_async_body_is_cancelled_by_the_runtime_at_the_deadline(rt: Any) -> None:
    cancelled = Recorder()

    async def body(args: Any, ctx: Any) -> Any:
        try:
            await asyncio.Event().wait()  # forever, unless cancelled
        except asyncio.CancelledError:
            cancelled.add("cancelled")
            raise
        return "never"

    rt.use(policies.timeout)
    rt.tools.register(tool("async-slow", body, timeout_ms=20))

    result = run_one(rt, call("async-slow"))

    assert code_of(result) == "TOOL_TIMEOUT"
    assert cancelled.items == ["cancelled"]


def test_a_body_that_finishes_in_time_keeps_its_result_and_its_deadline_is_removed(rt: Any) -> None:
    rt.use(policies.timeout)
    rt.tools.register(tool("quick", timeout_ms=60_000))

    for i in range(200):
        result = run_one(rt, call("quick", id=f"c{i}", message="hi"))
        assert not result.is_error and result.value == "hi"

    timer = the_policy(rt).timer
    assert timer.pending == 0
    assert timer.heap_size < 128


def test_a_caller_abort_first_keeps_aborted(rt: Any) -> None:
    controller = AbortController()
    started = threading.Event()
    seen = Recorder()

    def body(args: Any, ctx: Any) -> Any:
        started.set()
        seen.add(ctx.signal.wait(WAIT))
        return "done"

    rt.use(policies.timeout)
    rt.tools.register(tool("slow", body, timeout_ms=60_000))
    future = rt.tools.submit(ToolBatchInput(calls=[call("slow")], signal=controller.signal))
    assert started.wait(WAIT)
    controller.abort()

    result = future.result(WAIT).results[0].result

    assert seen.items == [True]
    assert code_of(result) == "ABORTED"


def test_a_caller_abort_first_keeps_aborted_even_when_the_deadline_fires_before_the_body_returns(
    rt: Any,
) -> None:
    controller = AbortController()
    after_deadline = threading.Event()

    def body(args: Any, ctx: Any) -> Any:
        controller.abort()  # the caller aborts first (well within the budget) ...
        assert ctx.signal.aborted
        # ... and the deadline fires while the body is still running: the
        # policy's timer fires in deadline order, and this one is due after
        # the call's own 200ms deadline.
        the_policy(rt).timer.schedule(0.25, after_deadline.set)
        assert after_deadline.wait(WAIT)
        return "done"

    rt.use(policies.timeout)
    rt.tools.register(tool("slow", body, timeout_ms=200))

    result = run_one(rt, call("slow"), signal=controller.signal)

    assert code_of(result) == "ABORTED"


def a_late_timer(rt: Any) -> threading.Event:
    """Keep the policy's timer thread busy in a callback (as a loaded
    process would keep it from running): no deadline fires until the
    returned event is set."""
    busy, release = threading.Event(), threading.Event()
    the_policy(rt).timer.schedule(0, lambda: busy.set() or release.wait(WAIT))
    assert busy.wait(WAIT)
    return release


def test_a_call_returning_after_its_deadline_is_a_timeout_though_the_timer_was_late(rt: Any) -> None:
    # (It came back ok: only the deadline's firing made a timeout, and a
    # timer thread a busy process ran late fired after the body returned.)
    seen = Recorder()

    def body(args: Any, ctx: Any) -> Any:
        seen.add(ctx.signal.aborted)
        return "too late"

    rt.use(policies.timeout)
    rt.tools.register(tool("slow", body, timeout_ms=1e-6))  # (due a nanosecond after the wrapper is entered)
    release = a_late_timer(rt)
    try:
        result = run_one(rt, call("slow"))
    finally:
        release.set()

    assert seen.items == [False]  # the deadline never fired while the body ran
    assert code_of(result) == "TOOL_TIMEOUT"
    assert result.error.message == "tool call timed out after 1e-06ms"


def test_a_caller_abort_keeps_aborted_when_the_timer_is_late_past_the_deadline(rt: Any) -> None:
    controller = AbortController()

    def body(args: Any, ctx: Any) -> Any:
        controller.abort()  # the deadline has passed, not fired: the caller's abort is the one the call saw
        return "done"

    rt.use(policies.timeout)
    rt.tools.register(tool("slow", body, timeout_ms=1e-6))
    release = a_late_timer(rt)
    try:
        result = run_one(rt, call("slow"), signal=controller.signal)
    finally:
        release.set()

    assert code_of(result) == "ABORTED"


def test_a_caller_abort_first_is_not_turned_into_a_timeout_by_a_wrapper_failure(rt: Any) -> None:
    # The body fails on its own after the caller's abort: the failure is
    # kept as it is (failures settling after cancellation are kept), and
    # it is not a timeout.
    controller = AbortController()
    started = threading.Event()

    def body(args: Any, ctx: Any) -> Any:
        started.set()
        ctx.signal.wait(WAIT)
        ctx.signal.throw_if_aborted()
        return "unreachable"

    rt.use(policies.timeout)
    rt.tools.register(tool("slow", body, timeout_ms=60_000))
    future = rt.tools.submit(ToolBatchInput(calls=[call("slow")], signal=controller.signal))
    assert started.wait(WAIT)
    controller.abort()

    result = future.result(WAIT).results[0].result

    assert code_of(result) == "ABORTED"


def test_a_tool_without_timeout_ms_is_untouched(rt: Any) -> None:
    seen: dict[str, Any] = {}

    def outer(execution: Any, next_: Any) -> Any:
        seen["outer"] = execution.signal
        return next_()

    def inner(execution: Any, next_: Any) -> Any:
        seen["inner"] = execution.signal
        return next_()

    def body(args: Any, ctx: Any) -> Any:
        seen["body"] = ctx.signal
        return "ok"

    controller = AbortController()
    rt.events.on("tools/execute", outer)
    rt.use(policies.timeout)
    rt.events.on("tools/execute", inner)
    rt.tools.register(tool("plain", body))

    result = run_one(rt, call("plain"), signal=controller.signal)

    assert not result.is_error
    assert seen["inner"] is seen["outer"]  # the signal was not replaced
    # The body's fused signal has the caller as its only parent, and
    # nobody but the caller could abort it.
    assert controller.signal.listener_count == 0  # it detached when the body settled
    assert not seen["body"].aborted
    assert policy_threads() == []  # no deadline, no timer thread


def test_with_timeout_ms_later_wrappers_see_a_fused_signal_and_post_execute_sees_the_callers(rt: Any) -> None:
    seen: dict[str, Any] = {}

    def pre(execution: Any, next_: Any) -> Any:
        seen["pre"] = execution.signal
        return next_()

    def outer(execution: Any, next_: Any) -> Any:
        seen["outer"] = execution.signal
        result = next_()
        seen["outer after"] = execution.signal
        return result

    def inner(execution: Any, next_: Any) -> Any:
        seen["inner"] = execution.signal
        return next_()

    def post(execution: Any, result: Any, next_: Any) -> Any:
        seen["post"] = execution.signal
        return next_()

    rt.events.on("tools/pre-execute", pre)
    rt.events.on("tools/execute", outer)
    rt.use(policies.timeout)
    rt.events.on("tools/execute", inner)
    rt.events.on("tools/post-execute", post)
    rt.tools.register(tool("bounded", timeout_ms=60_000))

    assert not run_one(rt, call("bounded")).is_error

    assert seen["inner"] is not seen["outer"]
    assert seen["outer after"] is seen["outer"]  # restored
    assert seen["post"] is seen["pre"]
    assert seen["inner"].listener_count == 0  # closed: detached from its parents


def test_time_waiting_for_a_pool_slot_does_not_count(rt: Any) -> None:
    # Serial batch: the second call waits for the first, which takes at least
    # its own 200ms budget. The second has only 150ms (ample for its own
    # body even on a loaded machine), and still succeeds.
    rt.use(policies.timeout)
    rt.tools.register(tool("slow", waits_for_its_signal(), timeout_ms=200))
    rt.tools.register(tool("quick", timeout_ms=150))

    batch = rt.tools.execute(
        ToolBatchInput(calls=[call("slow", id="a"), call("quick", id="b", message="hi")], max_parallel_tool_calls=1)
    )

    first, second = (r.result for r in batch.results)
    assert code_of(first) == "TOOL_TIMEOUT"
    assert not second.is_error and second.value == "hi"


def test_one_timer_thread_serves_many_concurrent_deadlines(rt: Any) -> None:
    rt.use(policies.timeout)
    rt.tools.register(tool("slow", waits_for_its_signal(), timeout_ms=20))

    batch = run(rt, *[call("slow", id=f"c{i}") for i in range(8)])

    assert [code_of(r.result) for r in batch.results] == ["TOOL_TIMEOUT"] * 8
    assert [t.name for t in policy_threads()] == ["dsh-policy-timeout"]


def test_disposing_stops_the_timer_thread_and_calls_run_without_a_deadline(rt: Any) -> None:
    undo = rt.use(policies.timeout)
    rt.tools.register(tool("slow", waits_for_its_signal(), timeout_ms=20))
    assert code_of(run_one(rt, call("slow"))) == "TOOL_TIMEOUT"
    assert len(policy_threads()) == 1

    undo()

    assert policy_threads() == []
    assert rt.events.listeners("tools/execute") == ()


def test_stopping_the_runtime_stops_the_timer_thread() -> None:
    rt = ToolRuntime().start()
    try:
        rt.use(policies.timeout)
        rt.tools.register(tool("slow", waits_for_its_signal(), timeout_ms=20))
        assert code_of(run_one(rt, call("slow"))) == "TOOL_TIMEOUT"
        (thread,) = policy_threads()
    finally:
        rt.stop()
    thread.join(WAIT)
    assert not thread.is_alive()


def test_stop_does_not_wait_past_its_timeout_for_a_timer_stuck_in_an_abort_callback() -> None:
    rt = ToolRuntime().start()
    entered, release = threading.Event(), threading.Event()

    def body(args: Any, ctx: Any) -> str:
        # The callback runs on the timer's thread when the deadline fires,
        # and blocks it (callbacks must not block: this one does).
        ctx.signal.add_callback(lambda signal: entered.set() or release.wait(WAIT * 2))
        ctx.signal.wait(WAIT)
        return "late"

    try:
        rt.use(policies.timeout)
        rt.tools.register(tool("slow", body, timeout_ms=20))
        assert code_of(run_one(rt, call("slow"))) == "TOOL_TIMEOUT"
        assert entered.wait(WAIT)
        (thread,) = policy_threads()
        stopper = threading.Thread(target=rt.stop, kwargs={"timeout": 0.3}, name="test-stop")
        stopper.start()
        stopper.join(WAIT)
        assert not stopper.is_alive(), "rt.stop(timeout=0.3) waited for the stuck timer thread"
    finally:
        release.set()
    thread.join(WAIT)
    assert not thread.is_alive()


def test_the_wrapper_is_appended_unless_prepended(rt: Any) -> None:
    def other(execution: Any, next_: Any) -> Any:
        return next_()

    rt.events.on("tools/execute", other)
    undo = rt.use(policies.timeout)
    assert rt.events.listeners("tools/execute")[0] is other
    undo()
    rt.use(policies.timeout, prepend=True)
    assert rt.events.listeners("tools/execute")[-1] is other


@pytest.mark.parametrize(
    ("config", "error"),
    [
        ({"prepend": "yes"}, TypeError),
        ({"timeout_ms": 10}, TypeError),
    ],
)
def test_bad_config_is_rejected_when_applied(rt: Any, config: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error, match="policies.timeout"):
        rt.use(policies.timeout, **config)
    assert rt.events.listeners("tools/execute") == ()


def test_apply_needs_a_runtime() -> None:
    with pytest.raises(TypeError, match="ToolRuntime"):
        policies.timeout.apply(object())  # type: ignore[arg-type]


def test_the_error_code_is_the_spec_one() -> None:
    failure = policies.timeout.timeout_failure(20)
    assert failure.code == ErrorCode.TOOL_TIMEOUT == "TOOL_TIMEOUT"
    assert failure.error.message == MESSAGE_20
