"""The cancellation matrix of one call (SPEC section 5): only a success is
replaced (``ABORTED`` when the body was invoked, ``ABORTED_BEFORE_DISPATCH``
when not); denials, tool errors and policy errors are kept; deferred
contexts are kept; a started body is never abandoned."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any

from dsh_actors import (
    AbortController,
    Accept,
    Agent,
    Deny,
    ErrorCode,
    ToolBatchInput,
    ToolExecutionSuccess,
    text,
)

from .helpers import WAIT, Journal, Trip, assert_failure, call, context, echo_tool, run, run_one


def test_a_body_returning_success_after_the_caller_aborted_gives_aborted(rt: Any) -> None:
    controller = AbortController()

    def body(args: Any, ctx: Any) -> Any:
        controller.abort()
        return args["message"]

    rt.tools.register(echo_tool(execute=body))

    result = run_one(rt, agent=Agent("main"), signal=controller.signal)

    assert_failure(result, "tool call aborted", ErrorCode.ABORTED)


def test_post_execute_still_runs_on_the_success_before_it_is_replaced(rt: Any) -> None:
    controller = AbortController()

    def body(args: Any, ctx: Any) -> Any:
        controller.abort()
        return args["message"]

    trip = Trip(rt)
    rt.events.on("tools/post-execute", lambda execution, result, next_: Accept(content=[text("accepted")]))
    rt.tools.register(echo_tool(execute=body))

    result = run_one(rt, agent=Agent("main"), signal=controller.signal)

    assert [r.is_error for r in trip.post_results] == [False]
    assert_failure(result, "tool call aborted", ErrorCode.ABORTED)


def test_a_wrapper_success_without_the_body_after_the_caller_aborted_gives_aborted_before_dispatch(
    rt: Any,
) -> None:
    controller = AbortController()

    def wrapper(execution: Any, next_: Any) -> Any:
        controller.abort()
        return ToolExecutionSuccess(value="cached", content=[text("cached")])

    trip = Trip(rt)
    rt.events.on("tools/execute", wrapper)
    rt.tools.register(echo_tool(execute=trip.body))

    result = run_one(rt, agent=Agent("main"), signal=controller.signal)

    assert_failure(result, "tool call aborted before dispatch", ErrorCode.ABORTED_BEFORE_DISPATCH)
    assert "body" not in trip.journal


def test_a_denial_after_the_caller_aborted_is_kept(rt: Any) -> None:
    controller = AbortController()

    def pre(execution: Any, next_: Any) -> Any:
        controller.abort()
        return Deny("denied anyway")

    rt.events.on("tools/pre-execute", pre)
    rt.tools.register(echo_tool())

    assert_failure(run_one(rt, agent=Agent("main"), signal=controller.signal), "denied anyway")


def test_a_tool_error_after_the_caller_aborted_is_kept(rt: Any) -> None:
    controller = AbortController()

    def body(args: Any, ctx: Any) -> Any:
        controller.abort()
        raise ValueError("the disk is on fire")

    rt.tools.register(echo_tool(execute=body))

    assert_failure(run_one(rt, signal=controller.signal), "the disk is on fire")


def test_a_policy_error_after_the_caller_aborted_is_kept(rt: Any) -> None:
    controller = AbortController()

    def post(execution: Any, result: Any, next_: Any) -> Any:
        controller.abort()
        raise RuntimeError("post-execute broke")

    rt.events.on("tools/post-execute", post)
    rt.tools.register(echo_tool())

    assert_failure(run_one(rt, signal=controller.signal), "tools/post-execute: post-execute broke", "POLICY_FAILED")


def test_an_invalid_output_after_the_caller_aborted_is_kept(rt: Any) -> None:
    controller = AbortController()

    def body(args: Any, ctx: Any) -> Any:
        controller.abort()
        return 42

    rt.tools.register(echo_tool(execute=body))

    result = run_one(rt, signal=controller.signal)
    assert result.is_error
    assert result.error.info is not None
    assert result.error.info.code == ErrorCode.INVALID_TOOL_OUTPUT


def test_the_aborted_replacement_keeps_the_deferred_contexts(rt: Any) -> None:
    controller = AbortController()
    deferred = context("keep me")

    def body(args: Any, ctx: Any) -> Any:
        ctx.defer_context(deferred)
        controller.abort()
        return args["message"]

    rt.tools.register(echo_tool(execute=body))

    batch = run(rt, signal=controller.signal)
    result = batch.results[0].result

    assert_failure(result, "tool call aborted", ErrorCode.ABORTED)
    assert result.additional_contexts == (deferred,)
    assert batch.additional_contexts == (deferred,)


def test_the_batch_returns_only_after_a_started_sync_body_returns(rt: Any) -> None:
    controller = AbortController()
    started = threading.Event()
    saw_abort = threading.Event()
    release = threading.Event()
    returned = threading.Event()

    def body(args: Any, ctx: Any) -> Any:
        started.set()
        if ctx.signal.wait(WAIT):
            saw_abort.set()
        release.wait(WAIT)
        returned.set()
        return args["message"]

    rt.tools.register(echo_tool(execute=body))
    future = rt.tools.submit(ToolBatchInput(calls=[call()], agent=Agent("main"), signal=controller.signal))
    completed_after_return: list[bool] = []
    future.add_done_callback(lambda f: completed_after_return.append(returned.is_set()))

    assert started.wait(WAIT)
    controller.abort()
    assert saw_abort.wait(WAIT)
    done, _ = concurrent.futures.wait([future], timeout=0.2)
    assert not done, "the batch returned while its started body was still running"
    release.set()

    batch = future.result(timeout=WAIT)
    assert completed_after_return == [True]
    assert_failure(batch.results[0].result, "tool call aborted", ErrorCode.ABORTED)


def test_the_batch_returns_only_after_a_started_async_body_finishes_its_cleanup(rt: Any) -> None:
    controller = AbortController()
    started = threading.Event()
    cleaning = threading.Event()
    returned = threading.Event()
    loop_holder: dict[str, Any] = {}

    async def body(args: Any, ctx: Any) -> Any:
        loop = asyncio.get_running_loop()
        woken = asyncio.Event()
        finish = asyncio.Event()
        loop_holder["loop"] = loop
        loop_holder["finish"] = finish
        ctx.signal.add_callback(lambda signal: loop.call_soon_threadsafe(woken.set))
        started.set()
        try:
            await asyncio.wait_for(woken.wait(), WAIT)
        except asyncio.CancelledError:
            pass  # cancelled on abort: finish the owned work all the same
        finally:
            # Owned work reaching quiescence after the abort; a cancellation
            # may land here too (the body cannot tell when): keep going.
            cleaning.set()
            while not finish.is_set():
                try:
                    await asyncio.wait_for(finish.wait(), WAIT)
                except asyncio.CancelledError:
                    continue
            returned.set()
        return args["message"]

    rt.tools.register(echo_tool(execute=body))
    future = rt.tools.submit(ToolBatchInput(calls=[call()], agent=Agent("main"), signal=controller.signal))
    completed_after_return: list[bool] = []
    future.add_done_callback(lambda f: completed_after_return.append(returned.is_set()))

    assert started.wait(WAIT)
    controller.abort()
    assert cleaning.wait(WAIT)
    done, _ = concurrent.futures.wait([future], timeout=0.2)
    try:
        assert not done, "the batch returned while its started async body was still cleaning up"
    finally:
        loop_holder["loop"].call_soon_threadsafe(loop_holder["finish"].set)

    batch = future.result(timeout=WAIT)
    assert returned.wait(WAIT)
    assert completed_after_return == [True]
    assert_failure(batch.results[0].result, "tool call aborted", ErrorCode.ABORTED)


def test_an_abort_while_a_pre_execute_gate_waits_is_rechecked_after_it_settles(rt: Any) -> None:
    controller = AbortController()
    waiting = threading.Event()
    journal = Journal()

    def gate(execution: Any, next_: Any) -> Any:
        waiting.set()
        execution.signal.wait(WAIT)
        journal.add(("gate saw abort", execution.signal.aborted))
        return next_()

    trip = Trip(rt)
    rt.events.on("tools/pre-execute", gate)
    rt.tools.register(echo_tool(execute=trip.body))

    future = rt.tools.submit(ToolBatchInput(calls=[call()], agent=Agent("main"), signal=controller.signal))
    assert waiting.wait(WAIT)
    controller.abort()
    batch = future.result(timeout=WAIT)

    assert journal.entries == [("gate saw abort", True)]
    assert_failure(batch.results[0].result, "tool call aborted before dispatch", ErrorCode.ABORTED_BEFORE_DISPATCH)
    assert "body" not in trip.journal
