"""Self-served runs: with nothing observing prepare and finalize (no
pre-/post-execute or result listener, no guard, no finalize hook, no session
log), the executor and up to ``cap - 1`` call actors claim calls in model
order and run each one start to finish (``scheduling/executor.py``,
``SelfServe``). These tests pin that the schedule's rules still hold there
and that the path hands over to the executor's own path the moment an
observer appears.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh_actors import AbortController, Deny, ToolBatchExecutionError, ToolBatchInput, text
from dsh_actors.scheduling import executor as executor_module

from .helpers import GUARD, Timeline, call, calls, code_of, make_tool, must, started_runtime
from .test_executor_properties import KINDS, abort_at_body_start, register_kinds, spin


def _batch(names: list[str], cap: int, signal: Any = None, **arguments: Any) -> ToolBatchInput:
    the_calls = [call(i, name, **{k: v[i] for k, v in arguments.items()}) for i, name in enumerate(names)]
    return ToolBatchInput(calls=tuple(the_calls), max_parallel_tool_calls=cap, signal=signal)


@settings(max_examples=40, deadline=None)
@given(
    names=st.lists(st.sampled_from(sorted(KINDS)), min_size=1, max_size=25),
    cap=st.integers(1, 6),
    data=st.data(),
)
def test_self_served_batches_keep_the_cap_the_barriers_the_order_and_the_abort(
    names: list[str], cap: int, data: Any
) -> None:
    n = len(names)
    works = data.draw(st.lists(st.integers(0, 4000), min_size=n, max_size=n), label="work")
    abort_at = data.draw(st.none() | st.integers(1, n), label="abort at body start")
    controller = AbortController()
    timeline = Timeline()
    abort_at_body_start(timeline, controller, abort_at)
    with started_runtime() as rt:  # no listener: the batch is self-served
        register_kinds(rt, timeline, lambda args, ctx: spin(args["work"]))
        batch = rt.tools.submit(_batch(names, cap, controller.signal, work=works)).result(GUARD)

    ids = [f"c{i}" for i in range(n)]
    exclusive = [f"c{i}" for i, name in enumerate(names) if not KINDS[name][0]]
    failing = {f"c{i}" for i, name in enumerate(names) if KINDS[name][1]}
    starts, ends = timeline.starts, timeline.ends
    assert [r.call_id for r in batch.results] == ids
    assert timeline.max_running <= cap
    for x in exclusive:
        if x not in starts:
            continue
        i = ids.index(x)
        for other in starts:
            if other != x:
                assert not timeline.overlaps(x, other), f"exclusive {x} overlapped {other}"
        for earlier in ids[:i]:
            if earlier in starts:
                assert ends[earlier] < starts[x], f"exclusive {x} started before {earlier} ended"
        for later in ids[i + 1 :]:
            if later in starts:
                assert ends[x] < starts[later], f"{later} started before exclusive {x} ended"
    abort = timeline.abort_seq
    for cid, item in zip(ids, batch.results):
        result = item.result
        if cid not in starts:
            assert abort is not None, f"{cid} never ran in a batch that was not aborted"
            assert code_of(result) == "ABORTED_BEFORE_DISPATCH", (cid, result)
        elif cid in failing:
            assert result.is_error and result.error.message == f"fail {cid}", (cid, result)  # type: ignore[union-attr]
        elif abort is not None and ends[cid] > abort:
            assert code_of(result) == "ABORTED", (cid, result)
        elif abort is None:
            assert not result.is_error and result.value == f"ok {cid}", (cid, result)  # type: ignore[union-attr]
    if abort is not None:
        # At most the bodies already claimed when the flag fired start after it.
        late = [cid for cid, seq in starts.items() if seq > abort]
        assert len(late) <= cap, f"calls started after the abort: {late}"
    else:
        assert set(starts) == set(ids)


def test_a_lone_call_runs_on_the_executor_actor_itself() -> None:
    threads: list[str] = []

    def body(args: Any, ctx: Any) -> str:
        threads.append(threading.current_thread().name)
        return "ok"

    with started_runtime() as rt:
        rt.tools.register(make_tool("t", body))
        batch = rt.tools.execute(ToolBatchInput(calls=tuple(calls("t"))))
    assert batch.results[0].result.value == "ok"  # type: ignore[union-attr]
    assert threads == ["dsh-ExecutorActor"]


def test_a_result_listener_added_by_a_body_sees_every_later_result_in_model_order() -> None:
    seen: list[str] = []
    offs: list[Any] = []

    def body(args: Any, ctx: Any) -> str:
        if args["i"] == 2:
            offs.append(rt.events.on("tools/result", lambda execution, result: seen.append(execution.call_id)))
        return "ok"

    with started_runtime() as rt:
        rt.tools.register(make_tool("t", body))
        batch = rt.tools.execute(ToolBatchInput(calls=tuple(calls(*["t"] * 6)), max_parallel_tool_calls=1))
        for off in offs:
            off()
    assert [r.result.is_error for r in batch.results] == [False] * 6
    assert seen == ["c2", "c3", "c4", "c5"]


def test_a_pre_execute_listener_added_by_a_body_applies_to_every_later_call() -> None:
    offs: list[Any] = []

    def body(args: Any, ctx: Any) -> str:
        if args["i"] == 1:
            offs.append(rt.events.on("tools/pre-execute", lambda execution, next_: Deny("no more")))
        return "ok"

    with started_runtime() as rt:
        rt.tools.register(make_tool("t", body))
        batch = rt.tools.execute(ToolBatchInput(calls=tuple(calls(*["t"] * 4)), max_parallel_tool_calls=1))
        for off in offs:
            off()
    outcomes = [r.result for r in batch.results]
    assert [o.is_error for o in outcomes] == [False, False, True, True]
    assert outcomes[2].error.message == "no more"  # type: ignore[union-attr]


def test_a_finalize_hook_runs_once_and_in_model_order_between_self_served_calls() -> None:
    order: list[str] = []
    lock = threading.Lock()

    def body(args: Any, ctx: Any) -> str:
        with lock:
            order.append(f"body {ctx.call_id}")
        return "ok"

    def finalize_content(execution: Any, result: Any) -> Any:
        with lock:
            order.append(f"finalize {execution.call_id}")
        return [text("hooked")]

    with started_runtime() as rt:
        rt.tools.register(make_tool("t", body))
        hooked = make_tool("h", body)
        from dataclasses import replace

        rt.tools.register(replace(hooked, finalize_content=finalize_content))
        batch = rt.tools.execute(ToolBatchInput(calls=tuple(calls("t", "h", "t")), max_parallel_tool_calls=1))
    assert [r.result.content for r in batch.results] == [(text("ok"),), (text("hooked"),), (text("ok"),)]
    assert order == ["body c0", "body c1", "finalize c1", "body c2"]


def test_a_bug_while_serving_fails_the_batch_and_leaves_the_runtime_usable(monkeypatch: pytest.MonkeyPatch) -> None:
    real_dispatch = executor_module.dispatch
    release = threading.Event()

    def body(args: Any, ctx: Any) -> str:
        if args["i"] == 0:
            must(release, "the test to release call 0")
        return "ok"

    def buggy_dispatch(rt: Any, call: Any, **kwargs: Any) -> Any:
        if call.index == 3:  # on a call actor, while call 0 blocks another server
            release.set()
            raise RuntimeError("dispatch bug")
        return real_dispatch(rt, call, **kwargs)

    monkeypatch.setattr(executor_module, "dispatch", buggy_dispatch)
    with started_runtime() as rt:
        rt.tools.register(make_tool("t", body))
        with pytest.raises(ToolBatchExecutionError, match="internal error: RuntimeError: dispatch bug"):
            rt.tools.submit(ToolBatchInput(calls=tuple(calls(*["t"] * 8)), max_parallel_tool_calls=3)).result(GUARD)
        monkeypatch.setattr(executor_module, "dispatch", real_dispatch)
        again = rt.tools.execute(ToolBatchInput(calls=tuple(calls(*["t"] * 8))))
        assert [r.result.is_error for r in again.results] == [False] * 8


def test_a_bug_while_committing_a_self_served_call_fails_the_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    real_finalize = executor_module.finalize

    def buggy_finalize(rt: Any, call: Any) -> Any:
        if call.index == 3:
            raise RuntimeError("finalize bug")
        return real_finalize(rt, call)

    monkeypatch.setattr(executor_module, "finalize", buggy_finalize)
    with started_runtime() as rt:
        rt.tools.register(make_tool("t", lambda args, ctx: "ok"))
        with pytest.raises(ToolBatchExecutionError, match="internal error: RuntimeError: finalize bug") as caught:
            rt.tools.submit(ToolBatchInput(calls=tuple(calls(*["t"] * 8)), max_parallel_tool_calls=3)).result(GUARD)
        assert [r.call_id for r in caught.value.results] == ["c0", "c1", "c2"]


def test_the_fast_call_result_is_a_tool_call_result() -> None:
    from dataclasses import fields

    from dsh_actors.model import ToolCallResult

    assert [f.name for f in fields(ToolCallResult)] == ["call_id", "result"]
    outcome = executor_module.aborted(before_dispatch=True)
    fast = executor_module._call_result("c1", outcome)
    assert type(fast) is ToolCallResult and fast == ToolCallResult("c1", outcome)
    assert hash(fast) == hash(ToolCallResult("c1", outcome))


def test_an_exclusive_call_among_self_served_ones_runs_alone_on_the_executor() -> None:
    timeline = Timeline()
    threads: dict[str, str] = {}

    def body(args: Any, ctx: Any) -> str:
        threads[ctx.call_id] = threading.current_thread().name
        with timeline.body(ctx):
            spin(2000)
        return "ok"

    with started_runtime() as rt:
        rt.tools.register(make_tool("t", body))
        rt.tools.register(make_tool("x", body, classifier=None))
        names = ["t", "t", "t", "x", "t", "t", "x", "x", "t"]
        batch = rt.tools.execute(ToolBatchInput(calls=tuple(calls(*names)), max_parallel_tool_calls=3))
    assert [r.result.is_error for r in batch.results] == [False] * len(names)
    ids = [f"c{i}" for i in range(len(names))]
    for i, name in enumerate(names):
        if name != "x":
            continue
        x = ids[i]
        assert threads[x] == "dsh-ExecutorActor"
        assert all(timeline.ends[e] < timeline.starts[x] for e in ids[:i])
        assert all(timeline.ends[x] < timeline.starts[later] for later in ids[i + 1 :])


@pytest.mark.parametrize("cap", [2, 4, 7])
def test_call_actors_join_one_at_a_time_until_cap_bodies_block_together(cap: int) -> None:
    # Every body waits until `cap` bodies are inside at once: this only
    # finishes if each server that starts a blocking body has woken the next.
    barrier = threading.Barrier(cap)
    timeline = Timeline()

    def body(args: Any, ctx: Any) -> str:
        with timeline.body(ctx):
            barrier.wait(GUARD)
        return "ok"

    with started_runtime() as rt:
        rt.tools.register(make_tool("t", body))
        batch = rt.tools.submit(
            ToolBatchInput(calls=tuple(calls(*["t"] * (2 * cap))), max_parallel_tool_calls=cap)
        ).result(GUARD)
    assert [r.result.is_error for r in batch.results] == [False] * (2 * cap)
    assert timeline.max_running == cap
