"""Self-served runs (``scheduling/executor.py``, ``SelfServe``) behave as
the executor's own path does wherever a user can tell: results published in
model order to a listener added mid-batch, and calls that do not hold back
the calls after them (a resolved call, a hooked one, one prepared after a
pre-execute listener appeared, a spare call actor that could not be woken).

Nothing sleeps. A body that waits for another call of the batch waits on an
Event with a bound (``MEET``): a correct schedule never reaches it (the other
call runs at once); a schedule that never runs the other call meanwhile
makes the wait time out, and the test fails in ``MEET`` seconds instead of
hanging.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

from dsh_actors import ToolBatchInput, ToolCall

from .helpers import GUARD, call, code_of, make_tool, started_runtime

MEET = 3.0
"""Seconds a body waits for another call of its batch (never reached when
the two overlap, as the executor's path lets them)."""


def _lossless_bad(index: int, name: str) -> ToolCall:
    """A call whose argument text is JSON but not lossless (an integer past
    64 bits): resolved INVALID_ARGS when built, without any phase."""
    return ToolCall(id=f"c{index}", name=name, arguments=f'{{"i": {index}, "n": 123456789012345678901234567}}')


# -- tools/result order for a listener added by a body -------------------------------


def test_a_result_listener_added_by_a_body_at_cap_2_sees_results_in_model_order() -> None:
    # c1's body adds a tools/result listener while c0 runs. On the executor's
    # path results are published as calls commit, in model order, so the
    # listener sees a model-order suffix of the batch. c0 waits until c2 has
    # been classified: on the executor's path that happens as the batch
    # starts; in a self-served run it happens when c1's server claims c2,
    # i.e. after that server has already finalized c1 (and published it to
    # the new listener) while c0 is still running.
    c2_classified = threading.Event()
    seen: list[str] = []
    lock = threading.Lock()
    offs: list[Any] = []

    def classifier(args: Any) -> bool:
        if args["i"] == 2:
            c2_classified.set()
        return True

    def on_result(execution: Any, result: Any) -> None:
        with lock:
            seen.append(execution.call_id)

    def body(args: Any, ctx: Any) -> str:
        if args["i"] == 0:
            c2_classified.wait(MEET)
        elif args["i"] == 1:
            offs.append(rt.events.on("tools/result", on_result))
        return "ok"

    with started_runtime() as rt:
        rt.tools.register(make_tool("t", body, classifier=classifier))
        batch = rt.tools.submit(
            ToolBatchInput(calls=tuple(call(i, "t") for i in range(4)), max_parallel_tool_calls=2)
        ).result(GUARD)
        for off in offs:
            off()
    assert [r.result.is_error for r in batch.results] == [False] * 4
    ids = [f"c{i}" for i in range(4)]
    assert seen == ids[ids.index(seen[0]) :], f"tools/result out of model order: {seen}"


# -- a call that needs the executor is no barrier on the executor's path ----------------


def _meeting_batch(middle: ToolCall, register: Any) -> list[Any]:
    """c0 waits (bounded) until c2's body has started; ``middle`` is c1. At
    cap 3 the executor's path runs c0, c1 and c2 at once."""
    c2_started = threading.Event()

    def body(args: Any, ctx: Any) -> str:
        if args["i"] == 0:
            return "met" if c2_started.wait(MEET) else "c2 never started while c0 ran"
        if args["i"] == 2:
            c2_started.set()
        return "ok"

    with started_runtime() as rt:
        register(rt, body)
        batch = rt.tools.submit(
            ToolBatchInput(calls=(call(0, "t"), middle, call(2, "t")), max_parallel_tool_calls=3)
        ).result(GUARD)
    return [r.result for r in batch.results]


def test_a_call_resolved_when_built_does_not_hold_back_the_calls_after_it() -> None:
    # c1's arguments are not lossless JSON: it is RESOLVED (INVALID_ARGS) and
    # mode "parallel" on the executor's path, which goes on to start c2 while
    # c0 runs. A self-served run closes at c1 (not PENDING, so not servable)
    # and nothing after it starts until c0 has finished.
    def register(rt: Any, body: Any) -> None:
        rt.tools.register(make_tool("t", body))

    results = _meeting_batch(_lossless_bad(1, "t"), register)
    assert code_of(results[1]) == "INVALID_ARGS"
    assert results[0].value == "met"  # type: ignore[union-attr]


def test_a_finalize_hooked_parallel_call_does_not_hold_back_the_calls_after_it() -> None:
    # c1's tool has a finalize_content hook: on the executor's path it is a
    # parallel call like any other (only its finalize waits for model order),
    # so c2 starts while c0 runs. A self-served run closes at c1 and the
    # executor cannot take c1 over while it is itself blocked in c0's body.
    def register(rt: Any, body: Any) -> None:
        rt.tools.register(make_tool("t", body))
        rt.tools.register(replace(make_tool("h", body), finalize_content=lambda execution, result: None))

    results = _meeting_batch(call(1, "h"), register)
    assert [r.is_error for r in results] == [False] * 3
    assert results[0].value == "met"  # type: ignore[union-attr]


# -- a spare server that could not be woken ---------------------------------------------


def test_a_spare_that_could_not_be_woken_is_not_counted_as_a_server() -> None:
    # The first wake of the run fails (RuntimeError, as when a thread cannot
    # be started) while the runtime is NOT stopping. _wake_spare gives back
    # `spare` and `active` but keeps `servers`, so the run believes it has one
    # server more than it has and never reaches `cap` bodies at once: bodies
    # that meet `cap` at a time break their barrier. (The executor's path
    # answers the same failure by resolving the rest ABORTED_BEFORE_DISPATCH.)
    cap = 3
    meet = threading.Barrier(cap, timeout=MEET)

    def body(args: Any, ctx: Any) -> str:
        if args["i"] > 0:
            meet.wait()
        return "ok"

    with started_runtime() as rt:
        native = rt.native_executor
        real = native._acquire_worker
        failures = [RuntimeError("can't start new thread")]

        def acquire_worker(runtime: Any) -> Any:
            if failures:
                raise failures.pop()
            return real(runtime)

        native._acquire_worker = acquire_worker  # type: ignore[method-assign]
        rt.tools.register(make_tool("t", body))
        batch = rt.tools.submit(
            ToolBatchInput(calls=tuple(call(i, "t") for i in range(1 + 2 * cap)), max_parallel_tool_calls=cap)
        ).result(GUARD)
        assert not failures, "the patched wake never ran"
    outcomes = [
        (r.call_id, (code_of(r.result) or r.result.error.message) if r.result.is_error else "ok")  # type: ignore[union-attr]
        for r in batch.results
    ]
    assert all(o in ("ok", "ABORTED_BEFORE_DISPATCH") for _, o in outcomes), outcomes


def test_a_pre_execute_listener_added_by_a_body_does_not_hold_back_the_calls_after_it() -> None:
    # The general form of the resolved / finalize-hooked tests: whatever makes a claim close
    # the run (here a pass-through tools/pre-execute listener that c1's body
    # adds while c0 runs) stalls every later call until c0's body returns,
    # because the executor that would take the rest over is itself a server
    # blocked in c0. On the executor's path c2 starts while c0 runs.
    offs: list[Any] = []

    def register(rt: Any, body: Any) -> None:
        def adding(args: Any, ctx: Any) -> str:
            offs.append(rt.events.on("tools/pre-execute", pre_execute))
            return "ok"

        rt.tools.register(make_tool("t", body))
        rt.tools.register(make_tool("adds", adding))

    def pre_execute(execution: Any, next_: Any) -> Any:
        return next_()

    try:
        results = _meeting_batch(call(1, "adds"), register)
    finally:
        for off in offs:
            off()
    assert [r.is_error for r in results] == [False] * 3
    assert results[0].value == "met"  # type: ignore[union-attr]
