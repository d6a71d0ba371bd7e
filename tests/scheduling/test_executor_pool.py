"""The rolling pool and its exclusive barriers (SPEC section 6,
ARCHITECTURE.md "Threads"): the concurrency limit, rolling replenishment,
barriers, lazy classification, where bodies run, and pooled call actors.

Overlap is measured with a :class:`~.helpers.Timeline` (one global sequence
number), concurrency is forced with Barriers, and every wait is bounded.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Any

import pytest

from dsh_actors import (
    AbortController,
    AbortSignal,
    Agent,
    Ask,
    LogStep,
    NativeExecutor,
    Session,
    ToolBatchInput,
    ToolRuntime,
)
from dsh_actors.scheduling.dispatcher import Dispatcher
from dsh_actors.scheduling.idle import IdleShelf

from .helpers import (
    GUARD,
    Timeline,
    call,
    calls,
    code_of,
    counting_body,
    events_of,
    logged_batch,
    make_tool,
    must,
    started_runtime,
)


def all_ok(batch: Any) -> bool:
    return all(not r.result.is_error for r in batch.results)


def errors(batch: Any) -> list[str]:
    return [f"{r.call_id}: {r.result.error.message}" for r in batch.results if r.result.is_error]


def meeting_body(timeline: Timeline, parties: int, who: set[int]) -> Any:
    """Calls whose ``i`` is in ``who`` wait for each other at one Barrier:
    they succeed only if ``parties`` of them run at the same time."""
    meet = threading.Barrier(parties, timeout=GUARD)

    def work(args: Any, ctx: Any) -> str:
        if args["i"] in who:
            meet.wait()
        return "ok"

    return counting_body(timeline, work)


# -- the limit -------------------------------------------------------------------


def test_with_a_cap_of_3_no_more_than_3_of_9_parallel_safe_calls_run_at_once(rt: Any) -> None:
    timeline = Timeline()
    timeline.listen(rt)
    release = threading.Event()
    three_running = threading.Event()

    def on_body_start(count: int, ctx: Any) -> None:
        if count == 3:
            three_running.set()

    timeline.on_body_start = on_body_start

    def work(args: Any, ctx: Any) -> str:
        if args["i"] < 3:
            must(release, "the test to release the first three calls")
        return "ok"

    rt.tools.register(make_tool("t", counting_body(timeline, work)))
    try:
        future = rt.tools.submit(ToolBatchInput(calls=calls(*["t"] * 9), max_parallel_tool_calls=3))
        must(three_running, "three calls to run")
        with timeline.lock:
            # The pool is full. At most `limit` more calls may have been
            # prepared ahead of a free slot, in model order, none running.
            assert timeline.running == 3
            prepared = sorted(timeline.pre, key=lambda call_id: int(call_id[1:]))
            assert prepared == [f"c{i}" for i in range(len(prepared))]
            assert 3 <= len(prepared) <= 6
    finally:
        release.set()
    batch = future.result(GUARD)
    assert all_ok(batch), errors(batch)
    assert timeline.max_running == 3
    assert len(timeline.starts) == 9


@dataclass
class Ahead:
    """Six parallel calls of ``t`` at a cap of 2, logged, with a pre-execute
    and a post-execute listener: c0 and c1 run until their signal fires or
    ``release`` is aborted. :meth:`ready` returns once both run and c3,
    prepared ahead, has passed pre-execute."""

    timeline: Timeline
    release: AbortController
    post: list[str]
    session: Session
    running: threading.Event
    c3_prepared: threading.Event
    unregister: Any = None
    release_c0: AbortController = field(default_factory=AbortController)

    def ready(self) -> None:
        must(self.running, "c0 and c1 to run")
        must(self.c3_prepared, "c3 to be prepared ahead")

    def batch(self, **kwargs: Any) -> ToolBatchInput:
        return logged_batch(calls(*["t"] * 6), self.session, max_parallel_tool_calls=2, **kwargs)


def _prepared_ahead(rt: Any) -> Ahead:
    timeline = Timeline()
    timeline.listen(rt)
    ahead = Ahead(timeline, AbortController(), [], Session(), threading.Event(), threading.Event())

    def note_c3(execution: Any, next_: Any) -> Any:
        if execution.call_id == "c3":
            ahead.c3_prepared.set()
        return next_()

    def post_execute(execution: Any, result: Any, next_: Any) -> Any:
        ahead.post.append(execution.call_id)
        return next_()

    def on_body_start(count: int, ctx: Any) -> None:
        if count == 2:
            ahead.running.set()

    def work(args: Any, ctx: Any) -> str:
        if args["i"] < 2:
            signals = (ctx.signal, ahead.release.signal) + ((ahead.release_c0.signal,) if args["i"] == 0 else ())
            either = AbortSignal.any(*signals)
            assert either.wait(GUARD), "the test to release c0 and c1"
            either.close()
        return f"v{args['i']}"

    timeline.on_body_start = on_body_start
    rt.events.on("tools/pre-execute", note_c3)
    rt.events.on("tools/post-execute", post_execute)
    ahead.unregister = rt.tools.register(make_tool("t", counting_body(timeline, work)))
    return ahead


def test_calls_behind_a_full_pool_are_prepared_ahead_though_a_log_and_hooks_observe_it(rt: Any) -> None:
    """The realistic configuration (a session log, pre-execute listeners)
    runs the same schedule as a bare batch: up to ``limit`` calls are
    prepared ahead of a free slot, in model order, their ``tool/call``
    logged; none runs before a slot frees."""
    ahead = _prepared_ahead(rt)
    timeline = ahead.timeline
    future = rt.tools.submit(ahead.batch())
    try:
        ahead.ready()
        with timeline.lock:
            # Two run, two more are prepared (2 x limit out); c4 waits unprepared.
            assert sorted(timeline.pre) == ["c0", "c1", "c2", "c3"]
            assert set(timeline.starts) == {"c0", "c1"}
        assert [e["call_id"] for e in events_of(ahead.session, "tool/call")] == ["c0", "c1", "c2", "c3"]
    finally:
        ahead.release.abort()
    batch = future.result(GUARD)
    assert all_ok(batch), errors(batch)
    assert [r.result.value for r in batch.results] == [f"v{i}" for i in range(6)]
    assert timeline.max_running == 2
    assert {cid: len(seqs) for cid, seqs in timeline.pre.items()} == {f"c{i}": 1 for i in range(6)}
    assert ahead.post == [f"c{i}" for i in range(6)]
    ids = [f"c{i}" for i in range(6)]
    assert [e["call_id"] for e in events_of(ahead.session, "tool/call")] == ids
    assert [e["call_id"] for e in events_of(ahead.session, "tool/result")] == ids


def test_an_abort_ends_calls_prepared_ahead_before_dispatch_through_post_execute_and_logged_once(rt: Any) -> None:
    """A call prepared ahead and never taken is a call prepared and never
    dispatched: the abort makes it ABORTED_BEFORE_DISPATCH, and post-execute
    sees it (its pre-execute ran), as for any cancel; a call never prepared
    runs no phase."""
    ahead = _prepared_ahead(rt)
    controller = AbortController()
    future = rt.tools.submit(ahead.batch(signal=controller.signal))
    try:
        ahead.ready()
        controller.abort("the test")
    finally:
        ahead.release.abort()
    batch = future.result(GUARD)
    codes = [code_of(r.result) for r in batch.results]
    assert codes == ["ABORTED", "ABORTED"] + ["ABORTED_BEFORE_DISPATCH"] * 4
    timeline = ahead.timeline
    assert set(timeline.starts) == {"c0", "c1"}
    assert sorted(timeline.pre) == ["c0", "c1", "c2", "c3"]
    assert sorted(ahead.post) == ["c0", "c1", "c2", "c3"]  # c4, c5 were never prepared
    assert {cid: len(items) for cid, items in timeline.results.items()} == {f"c{i}": 1 for i in range(6)}
    ids = [f"c{i}" for i in range(6)]
    assert [e["call_id"] for e in events_of(ahead.session, "tool/call")] == ids
    assert [e["call_id"] for e in events_of(ahead.session, "tool/start")] == ["c0", "c1"]
    assert [e["call_id"] for e in events_of(ahead.session, "tool/result")] == ids


def test_a_guard_added_while_calls_wait_prepared_ahead_applies_to_them(rt: Any) -> None:
    """What a call runs with is what holds when its body starts: calls
    prepared ahead under the old rules are prepared again (their
    ``tool/call`` logged once)."""
    ahead = _prepared_ahead(rt)
    future = rt.tools.submit(ahead.batch())
    try:
        ahead.ready()
        rt.tools.guard(lambda execution: "late guard" if execution.arguments["i"] >= 2 else None)
    finally:
        ahead.release.abort()
    batch = future.result(GUARD)
    assert [r.result.value for r in batch.results[:2]] == ["v0", "v1"]
    assert [r.result.error.message for r in batch.results[2:]] == ["late guard"] * 4
    assert set(ahead.timeline.starts) == {"c0", "c1"}
    # c2 and c3 were prepared ahead, then again under the guard.
    prepared = {cid: len(seqs) for cid, seqs in ahead.timeline.pre.items()}
    assert prepared == {"c0": 1, "c1": 1, "c2": 2, "c3": 2, "c4": 1, "c5": 1}
    ids = [f"c{i}" for i in range(6)]
    assert [e["call_id"] for e in events_of(ahead.session, "tool/call")] == ids
    assert [e["call_id"] for e in events_of(ahead.session, "tool/result")] == ids


def _ask_every_call(rt: Any) -> tuple[list[str], threading.Event]:
    """Every call asks for approval, and is allowed: the ids asked, in
    order, and an event set once c3 has been allowed and has passed the
    guards (its approval service runs on a thread of its own: a change
    meant for a call prepared ahead waits for that)."""
    asked: list[str] = []
    c3_allowed = threading.Event()

    def guard(execution: Any) -> None:
        if execution.call_id == "c3":
            c3_allowed.set()

    rt.events.on("tools/pre-execute", lambda execution, next_: Ask(reason="ok?"))
    rt.approvals.set(lambda request: asked.append(request.call_id) or "allowed-once")
    rt.tools.guard(guard)
    return asked, c3_allowed


def test_an_approval_given_to_a_call_prepared_ahead_stands_when_a_change_prepares_it_again(rt: Any) -> None:
    """A registry change on the calls' chain (here a global registration)
    prepares the calls waiting prepared ahead again; the person who allowed
    one of them is not asked again, while listeners and guards run again
    (nor is the request published again: tools/approval-request)."""
    ahead = _prepared_ahead(rt)
    asked, c3_allowed = _ask_every_call(rt)
    requested: list[str] = []
    rt.events.on("tools/approval-request", lambda execution, ask: requested.append(execution.call_id))
    future = rt.tools.submit(ahead.batch())
    try:
        ahead.ready()
        must(c3_allowed, "c3 allowed, prepared ahead")
        rt.tools.register(make_tool("other", lambda args, ctx: "x"))
    finally:
        ahead.release.abort()
    batch = future.result(GUARD)
    assert all_ok(batch), errors(batch)
    prepared = {cid: len(seqs) for cid, seqs in ahead.timeline.pre.items()}
    assert prepared == {"c0": 1, "c1": 1, "c2": 2, "c3": 2, "c4": 1, "c5": 1}
    assert sorted(asked) == [f"c{i}" for i in range(6)]  # once each
    assert sorted(requested) == sorted(asked)


def test_a_tool_replaced_while_its_calls_wait_prepared_ahead_is_asked_about_again(rt: Any) -> None:
    """An approval is about the tool the person was shown: c2 and c3 were
    allowed for the old ``t``; replaced by another ``t`` before their
    bodies start, they are asked about again."""
    ahead = _prepared_ahead(rt)
    asked, c3_allowed = _ask_every_call(rt)
    future = rt.tools.submit(ahead.batch())
    try:
        ahead.ready()
        must(c3_allowed, "c3 allowed, prepared ahead")
        ahead.unregister()
        rt.tools.register(make_tool("t", lambda args, ctx: "new"))
    finally:
        ahead.release.abort()
    batch = future.result(GUARD)
    assert [r.result.value for r in batch.results] == ["v0", "v1", "new", "new", "new", "new"]
    assert sorted(asked) == ["c0", "c1", "c2", "c2", "c3", "c3", "c4", "c5"]


def test_a_change_in_another_agents_scope_leaves_the_calls_prepared_ahead_as_they_are(rt: Any) -> None:
    """What a call runs with is what holds on its agent's chain: another
    agent's registration does not send the calls waiting prepared ahead
    back to be prepared again."""
    ahead = _prepared_ahead(rt)
    future = rt.tools.submit(ahead.batch())
    try:
        ahead.ready()
        rt.tools.scope(Agent("someone-else")).register(make_tool("other", lambda args, ctx: "x"))
        rt.tools.scope(Agent("someone-else")).guard(lambda execution: "not for the calls of agent a")
    finally:
        ahead.release.abort()
    batch = future.result(GUARD)
    assert all_ok(batch), errors(batch)
    prepared = {cid: len(seqs) for cid, seqs in ahead.timeline.pre.items()}
    assert prepared == {f"c{i}": 1 for i in range(6)}


def test_a_guard_on_a_parent_agents_scope_applies_to_a_sub_agents_calls_prepared_ahead(rt: Any) -> None:
    """The chain counts: a guard added to the parent's scope while a
    sub-agent's calls wait prepared ahead sends them back, and it applies."""
    ahead = _prepared_ahead(rt)
    parent = Agent("parent")
    child = Agent("child", parent=parent, session=ahead.session)
    batch_input = ToolBatchInput(
        calls=tuple(calls(*["t"] * 6)), agent=child, log=LogStep(turn=1, step=1), max_parallel_tool_calls=2
    )
    future = rt.tools.submit(batch_input)
    try:
        ahead.ready()
        rt.tools.scope(parent).guard(lambda execution: "parent's guard" if execution.arguments["i"] >= 2 else None)
    finally:
        ahead.release.abort()
    batch = future.result(GUARD)
    assert [r.result.error.message for r in batch.results[2:]] == ["parent's guard"] * 4
    prepared = {cid: len(seqs) for cid, seqs in ahead.timeline.pre.items()}
    assert prepared == {"c0": 1, "c1": 1, "c2": 2, "c3": 2, "c4": 1, "c5": 1}


def test_calls_prepared_again_that_an_abort_ends_pass_post_execute(rt: Any) -> None:
    """c2 and c3, prepared ahead, go back to be prepared again (their tool
    became exclusive) once c0 ends, and c2 waits for c1; the abort ends
    them: their pre-execute ran, so post-execute sees them."""
    ahead = _prepared_ahead(rt)
    controller = AbortController()
    c2_again = threading.Event()

    def classify(args: Any) -> bool:
        if args["i"] == 2:
            c2_again.set()  # c2 came back and is classified again: it waits for c1
        return False  # exclusive

    future = rt.tools.submit(ahead.batch(signal=controller.signal))
    try:
        ahead.ready()
        ahead.unregister()
        rt.tools.register(make_tool("t", lambda args, ctx: "new", classifier=classify))
        ahead.release_c0.abort()  # c0 ends; its call actor finds c2 stale
        must(c2_again, "c2 to come back")
        controller.abort("the test")
    finally:
        ahead.release.abort()
    batch = future.result(GUARD)
    codes = [code_of(r.result) for r in batch.results]
    assert codes == [None, "ABORTED"] + ["ABORTED_BEFORE_DISPATCH"] * 4
    assert sorted(ahead.timeline.pre) == ["c0", "c1", "c2", "c3"]
    assert sorted(ahead.post) == ["c0", "c1", "c2", "c3"]


def test_the_pool_rolls_a_long_call_does_not_stop_the_others_from_finishing(rt: Any) -> None:
    release = threading.Event()
    long_started = threading.Event()
    long_finished = threading.Event()
    others_done = threading.Event()
    lock = threading.Lock()
    done: list[int] = []

    def body(args: Any, ctx: Any) -> str:
        i = args["i"]
        if i == 0:
            long_started.set()
            must(release, "the test to release the long call")
            long_finished.set()
            return "long"
        with lock:
            done.append(i)
            if len(done) == 8:
                others_done.set()
        return "short"

    rt.tools.register(make_tool("t", body))
    try:
        future = rt.tools.submit(ToolBatchInput(calls=calls(*["t"] * 9), max_parallel_tool_calls=3))
        # Waves of 3 would wait for call 0 before starting calls 3..8: here
        # the long call holds one slot while the 8 short ones roll through
        # the other two (which call's body starts first is the threads' race).
        must(long_started, "the long call to start")
        must(others_done, "the 8 short calls to finish while the long one runs")
        assert not long_finished.is_set()
        assert sorted(done) == list(range(1, 9))
        assert not future.done()
    finally:
        release.set()
    batch = future.result(GUARD)
    assert [r.result.value for r in batch.results] == ["long"] + ["short"] * 8


def test_a_limit_of_1_runs_the_batch_serially(rt: Any) -> None:
    timeline = Timeline()
    rt.tools.register(make_tool("t", counting_body(timeline)))
    batch = rt.tools.execute(ToolBatchInput(calls=calls(*["t"] * 6), max_parallel_tool_calls=1))
    assert all_ok(batch), errors(batch)
    assert timeline.max_running == 1
    for i in range(5):
        assert timeline.ends[f"c{i}"] < timeline.starts[f"c{i + 1}"]


def test_the_default_limit_is_the_runtimes_and_a_per_batch_limit_overrides_it() -> None:
    with started_runtime(max_parallel_tool_calls=2) as rt:
        default_tl, wide_tl, narrow_tl = Timeline(), Timeline(), Timeline()
        rt.tools.register(make_tool("default", meeting_body(default_tl, 2, {0, 1})))
        rt.tools.register(make_tool("wide", meeting_body(wide_tl, 4, {0, 1, 2, 3})))
        rt.tools.register(make_tool("narrow", counting_body(narrow_tl)))

        batch = rt.tools.execute(ToolBatchInput(calls=calls(*["default"] * 6)))
        assert all_ok(batch), errors(batch)
        assert default_tl.max_running == 2

        batch = rt.tools.execute(ToolBatchInput(calls=calls(*["wide"] * 8), max_parallel_tool_calls=4))
        assert all_ok(batch), errors(batch)  # the 4-party barrier met: the override won
        assert wide_tl.max_running == 4

        batch = rt.tools.execute(ToolBatchInput(calls=calls(*["narrow"] * 4), max_parallel_tool_calls=1))
        assert all_ok(batch), errors(batch)
        assert narrow_tl.max_running == 1


def test_the_default_limit_of_a_runtime_is_10(rt: Any) -> None:
    timeline = Timeline()
    rt.tools.register(make_tool("t", meeting_body(timeline, 10, set(range(10)))))
    batch = rt.tools.execute(ToolBatchInput(calls=calls(*["t"] * 14)))
    assert all_ok(batch), errors(batch)
    assert timeline.max_running == 10


BAD_LIMITS = [0, -1, 1.5, True, False, "2"]


@pytest.mark.parametrize("limit", BAD_LIMITS, ids=repr)
def test_a_batch_limit_that_is_not_a_positive_integer_is_rejected_before_anything_runs(rt: Any, limit: Any) -> None:
    ran: list[str] = []
    rt.tools.register(make_tool("t", lambda args, ctx: ran.append("body") or "x"))
    rt.events.on("tools/pre-execute", lambda execution, next_: ran.append("pre") or next_())
    with pytest.raises(ValueError, match="max_parallel_tool_calls"):
        rt.tools.execute(ToolBatchInput(calls=calls("t", "t"), max_parallel_tool_calls=limit))
    assert ran == []


@pytest.mark.parametrize("limit", BAD_LIMITS, ids=repr)
def test_a_runtime_or_native_executor_limit_that_is_not_a_positive_integer_is_rejected(
    limit: Any,
) -> None:
    with pytest.raises(ValueError, match="max_parallel_tool_calls"):
        ToolRuntime(max_parallel_tool_calls=limit)
    with pytest.raises(ValueError, match="max_parallel_tool_calls"):
        NativeExecutor(max_parallel_tool_calls=limit)


# -- exclusive barriers --------------------------------------------------------------


def assert_barrier(timeline: Timeline, n: int, exclusive: set[int]) -> None:
    """Every exclusive call ran alone, after every earlier call settled,
    and nothing after it started before it settled."""
    ids = [f"c{i}" for i in range(n)]
    for x in exclusive:
        xid = ids[x]
        for other in ids:
            if other != xid and other in timeline.starts:
                assert not timeline.overlaps(xid, other), f"{xid} overlapped {other}"
        for earlier in ids[:x]:
            assert timeline.result_seq(earlier) < timeline.starts[xid], f"{xid} started before {earlier} settled"
        for later in ids[x + 1 :]:
            first_pre = min(timeline.pre[later])
            assert timeline.result_seq(xid) < first_pre, f"{later} started before {xid} settled"


def test_an_exclusive_call_never_overlaps_another_call(rt: Any) -> None:
    timeline = Timeline()
    timeline.listen(rt)
    pairs = [threading.Barrier(2, timeout=GUARD) for _ in range(3)]

    def safe_work(args: Any, ctx: Any) -> str:
        pairs[args["i"] // 3].wait()  # calls 0-1, 3-4, 6-7 overlap each other
        return "safe"

    rt.tools.register(make_tool("safe", counting_body(timeline, safe_work)))
    rt.tools.register(make_tool("excl", counting_body(timeline), classifier=None))
    names = ["safe", "safe", "excl", "safe", "safe", "excl", "safe", "safe"]
    batch = rt.tools.execute(ToolBatchInput(calls=calls(*names)))
    assert all_ok(batch), errors(batch)
    assert timeline.overlaps("c0", "c1") and timeline.overlaps("c3", "c4")
    assert_barrier(timeline, len(names), {2, 5})


def raising_classifier(args: Any) -> bool:
    raise RuntimeError("cannot classify")


@pytest.mark.parametrize(
    "classifier",
    [None, lambda args: False, lambda args: 1, lambda args: "yes", raising_classifier],
    ids=["no classifier", "False", "truthy int", "truthy str", "raises"],
)
def test_a_call_is_exclusive_unless_its_classifier_returns_exactly_true(rt: Any, classifier: Any) -> None:
    timeline = Timeline()
    timeline.listen(rt)
    rt.tools.register(make_tool("safe", counting_body(timeline)))
    rt.tools.register(make_tool("maybe", counting_body(timeline), classifier=classifier))
    batch = rt.tools.execute(ToolBatchInput(calls=calls("safe", "safe", "maybe", "safe", "safe")))
    assert all_ok(batch), errors(batch)
    assert_barrier(timeline, 5, {2})


def test_an_exclusive_call_starts_only_after_every_earlier_call_has_settled(rt: Any) -> None:
    timeline = Timeline()
    timeline.listen(rt)
    release = threading.Event()
    first_started = threading.Event()
    second_done = threading.Event()
    exclusive_started = threading.Event()

    def safe_work(args: Any, ctx: Any) -> str:
        if args["i"] == 0:
            first_started.set()
            must(release, "the test to release call 0")
        else:
            second_done.set()
        return "safe"

    def excl_work(args: Any, ctx: Any) -> str:
        exclusive_started.set()
        return "excl"

    rt.tools.register(make_tool("safe", counting_body(timeline, safe_work)))
    rt.tools.register(make_tool("excl", counting_body(timeline, excl_work), classifier=None))
    try:
        future = rt.tools.submit(ToolBatchInput(calls=calls("safe", "safe", "excl")))
        must(first_started, "call 0 to start")
        must(second_done, "call 1 to finish")
        assert not exclusive_started.is_set(), "the exclusive call started while call 0 was running"
        assert "c2" not in timeline.pre
    finally:
        release.set()
    batch = future.result(GUARD)
    assert all_ok(batch), errors(batch)
    assert_barrier(timeline, 3, {2})


def test_nothing_after_an_exclusive_call_starts_until_it_settles(rt: Any) -> None:
    timeline = Timeline()
    timeline.listen(rt)
    release = threading.Event()
    exclusive_started = threading.Event()

    def excl_work(args: Any, ctx: Any) -> str:
        exclusive_started.set()
        must(release, "the test to release the exclusive call")
        return "excl"

    rt.tools.register(make_tool("safe", counting_body(timeline)))
    rt.tools.register(make_tool("excl", counting_body(timeline, excl_work), classifier=None))
    try:
        future = rt.tools.submit(ToolBatchInput(calls=calls("excl", "safe", "safe")))
        must(exclusive_started, "the exclusive call to start")
        assert "c1" not in timeline.pre and "c2" not in timeline.pre
        assert "c1" not in timeline.starts and "c2" not in timeline.starts
    finally:
        release.set()
    batch = future.result(GUARD)
    assert all_ok(batch), errors(batch)
    assert_barrier(timeline, 3, {0})


def test_two_exclusive_calls_in_a_row_run_one_after_the_other(rt: Any) -> None:
    timeline = Timeline()
    timeline.listen(rt)
    rt.tools.register(make_tool("excl", counting_body(timeline), classifier=None))
    batch = rt.tools.execute(ToolBatchInput(calls=calls("excl", "excl", "excl")))
    assert all_ok(batch), errors(batch)
    assert_barrier(timeline, 3, {0, 1, 2})


# -- lazy classification -----------------------------------------------------------------


def test_a_barrier_that_registers_a_tool_lets_later_calls_of_it_run_in_parallel(rt: Any) -> None:
    """``late`` is unknown when the batch starts (so exclusive); the barrier
    registers it as concurrency-safe and its two calls must then overlap
    (they meet at a two-party barrier)."""
    meet = threading.Barrier(2, timeout=GUARD)

    def late_body(args: Any, ctx: Any) -> str:
        meet.wait()
        return "late"

    late = make_tool("late", late_body)

    def registrar(args: Any, ctx: Any) -> str:
        rt.tools.register(late)
        return "registered"

    rt.tools.register(make_tool("registrar", registrar, classifier=None))
    batch = rt.tools.execute(ToolBatchInput(calls=calls("registrar", "late", "late")))
    assert all_ok(batch), errors(batch)
    assert [r.result.value for r in batch.results] == ["registered", "late", "late"]


def test_a_barrier_that_flips_a_classifier_makes_later_calls_parallel(rt: Any) -> None:
    timeline = Timeline()
    state = {"safe": False}
    classified_at: list[int] = []

    def classifier(args: Any) -> bool:
        with timeline.lock:
            classified_at.append(timeline._tick())
        return state["safe"]

    def flip(args: Any, ctx: Any) -> str:
        state["safe"] = True
        return "flipped"

    meet = threading.Barrier(2, timeout=GUARD)

    def flex_work(args: Any, ctx: Any) -> str:
        meet.wait()
        return "flex"

    rt.tools.register(make_tool("flip", counting_body(timeline, flip), classifier=None))
    rt.tools.register(make_tool("flex", counting_body(timeline, flex_work), classifier=classifier))
    batch = rt.tools.execute(ToolBatchInput(calls=calls("flip", "flex", "flex")))
    assert all_ok(batch), errors(batch)
    assert classified_at, "the classifier was never asked"
    assert min(classified_at) > timeline.ends["c0"], "a later call was classified before the barrier ran"


def test_a_barrier_that_flips_a_classifier_makes_later_calls_exclusive(rt: Any) -> None:
    timeline = Timeline()
    timeline.listen(rt)
    state = {"safe": True}

    def flip(args: Any, ctx: Any) -> str:
        state["safe"] = False
        return "flipped"

    rt.tools.register(make_tool("flip", counting_body(timeline, flip), classifier=None))
    rt.tools.register(make_tool("flex", counting_body(timeline), classifier=lambda args: state["safe"]))
    batch = rt.tools.execute(ToolBatchInput(calls=calls("flip", "flex", "flex", "flex")))
    assert all_ok(batch), errors(batch)
    assert_barrier(timeline, 4, {0, 1, 2, 3})


# -- where bodies run ------------------------------------------------------------------


def test_sync_bodies_run_on_call_actor_threads_not_the_callers(rt: Any) -> None:
    timeline = Timeline()
    rt.tools.register(make_tool("t", meeting_body(timeline, 2, {0, 1})))
    batch = rt.tools.execute(ToolBatchInput(calls=calls(*["t"] * 6), max_parallel_tool_calls=2))
    assert all_ok(batch), errors(batch)
    threads = set(timeline.body_threads.values())
    assert threading.get_ident() not in threads
    assert threading.main_thread().ident not in threads
    # Call actors are pooled: a batch at cap 2 needs at most 2 of them (the
    # last call may run inline on the executor actor, when nothing else is out).
    served = set(timeline.call_actor_threads.values())
    assert 1 <= len(served) <= 2 and len(threads) > 1


def test_async_bodies_run_on_the_runtimes_one_loop_thread(rt: Any) -> None:
    lock = threading.Lock()
    async_threads: set[int] = set()
    sync_threads: set[int] = set()
    loops: set[int] = set()

    async def async_body(args: Any, ctx: Any) -> str:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0)  # a real await on the loop (not synchronisation)
        with lock:
            async_threads.add(threading.get_ident())
            loops.add(id(loop))
        return "async"

    def sync_body(args: Any, ctx: Any) -> str:
        with lock:
            sync_threads.add(threading.get_ident())
        return "sync"

    rt.tools.register(make_tool("a", async_body))
    rt.tools.register(make_tool("s", sync_body))
    batch = rt.tools.execute(ToolBatchInput(calls=calls("a", "s", "a", "s", "a", "a")))
    assert all_ok(batch), errors(batch)
    assert [r.result.value for r in batch.results] == ["async", "sync", "async", "sync", "async", "async"]
    assert len(async_threads) == 1 and len(loops) == 1
    (loop_thread,) = async_threads
    assert loop_thread != threading.get_ident()
    assert loop_thread not in sync_threads

    # A second batch uses the same loop thread.
    batch = rt.tools.execute(ToolBatchInput(calls=calls("a")))
    assert all_ok(batch), errors(batch)
    assert async_threads == {loop_thread}


# -- pooled call actors ------------------------------------------------------------------


def test_a_2000_call_batch_does_not_start_a_thread_per_call(rt: Any) -> None:
    lock = threading.Lock()
    peak = [0]

    def body(args: Any, ctx: Any) -> str:
        alive = threading.active_count()
        with lock:
            if alive > peak[0]:
                peak[0] = alive
        return "x"

    rt.tools.register(make_tool("t", body))
    baseline = threading.active_count()
    batch = rt.tools.execute(ToolBatchInput(calls=[call(i, "t") for i in range(2000)], max_parallel_tool_calls=8))
    assert len(batch.results) == 2000
    assert all_ok(batch), errors(batch)[:3]
    assert peak[0] - baseline <= 8 + 10, f"{peak[0] - baseline} threads beyond the baseline"


def test_consecutive_batches_reuse_the_same_call_actor_threads(rt: Any) -> None:
    def run(rounds: int) -> set[int]:
        timeline = Timeline()
        name = f"t{rounds}"
        rt.tools.register(make_tool(name, meeting_body(timeline, 4, {0, 1, 2, 3})))
        batch = rt.tools.execute(ToolBatchInput(calls=calls(*[name] * 20), max_parallel_tool_calls=4))
        assert all_ok(batch), errors(batch)
        return set(timeline.call_actor_threads.values())  # (not the executor's inline runs)

    first = run(1)
    assert len(first) == 4  # the barrier forced 4 at once; at cap 4 no more are needed
    second = run(2)
    assert second <= first
    third = run(3)
    assert third <= first


def test_surplus_pooled_actors_are_retired_from_the_runtime_group_after_a_burst(
    rt: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt.tools.register(make_tool("t", lambda args, ctx: "ok"))
    dispatcher = rt.dispatcher
    shelf = dispatcher._steppers
    kept = shelf.kept
    shelf.kept = 1
    # An executor actor replies first and ends its step after (see
    # ExecutorActor._go_on): the last step's end, under the dispatcher's
    # lock, tells the test that every actor is shelved or retired.
    quiet = threading.Event()
    shelve = IdleShelf.shelve

    def shelve_then_tell(self: IdleShelf, address: Any) -> bool:
        kept_it = shelve(self, address)
        if self is shelf and dispatcher.stepping == 0:
            quiet.set()
        return kept_it

    monkeypatch.setattr(IdleShelf, "shelve", shelve_then_tell)
    try:
        sizes = []
        for _ in range(4):
            futures = [
                rt.tools.submit(ToolBatchInput(calls=calls("t", "t"))) for _ in range(6)
            ]  # six batches at once: six executor actors, five of them surplus
            for future in futures:
                future.result(GUARD)
            with dispatcher.lock:
                ended = dispatcher.stepping == 0
                quiet.clear()
            assert ended or quiet.wait(GUARD)
            # Every executor actor is back in its pool or retired; a retired one's thread ends.
            executors = [t for t in rt.group.threads() if t.name == "dsh-ExecutorActor"]
            assert len(shelf) == 1
            for thread in executors:
                thread.join(0.05)
            sizes.append(sum(1 for t in executors if t.is_alive()))
        assert sizes == [1, 1, 1, 1], f"surplus executor actors stayed in the group: {sizes}"
    finally:
        shelf.kept = kept


# -- executor actors: a step slot each, lent while they block ------------------------


def test_batches_beyond_the_step_slots_queue_and_all_finish(monkeypatch: Any) -> None:
    """With 2 step slots, 12 concurrent batches whose calls run on call
    actors all finish, and the executor actors never pass the slots plus
    those lent (none here)."""
    monkeypatch.setattr(Dispatcher, "STEPPING_MAX", 2)
    gate = threading.Event()
    arrived = threading.Semaphore(0)

    def body(args: Any, ctx: Any) -> str:
        arrived.release()
        assert gate.wait(GUARD)
        return "ok"

    with started_runtime() as rt:
        rt.tools.register(make_tool("t", body))
        dispatcher = rt.dispatcher
        futures = [rt.tools.submit(ToolBatchInput(calls=calls("t", "t"))) for _ in range(12)]
        for _ in range(24):
            assert arrived.acquire(timeout=GUARD)
        with dispatcher.lock:
            assert dispatcher.stepping <= 2
        dispatcher.assert_invariants()
        gate.set()
        assert all(all_ok(f.result(GUARD)) for f in futures)
        with dispatcher.lock:
            assert dispatcher.stepping == 0 and not dispatcher.runnable


def test_nested_batches_from_inline_bodies_do_not_deadlock_one_step_slot(monkeypatch: Any) -> None:
    """One step slot: a lone call runs inline on its executor actor and
    awaits a nested batch, three levels deep. Each inline body and each
    nested wait lends the slot, so the nested batches step."""
    monkeypatch.setattr(Dispatcher, "STEPPING_MAX", 1)

    with started_runtime() as rt:

        def nest(args: Any, ctx: Any) -> str:
            depth = args["depth"]
            if depth >= 3:
                return "leaf"
            inner = rt.tools.execute(ToolBatchInput(calls=[call(0, "nest", depth=depth + 1)]))
            return f"{depth}>" + str(inner.results[0].result.value)

        rt.tools.register(make_tool("nest", nest))
        futures = [rt.tools.submit(ToolBatchInput(calls=[call(0, "nest", depth=0)])) for _ in range(4)]
        values = [f.result(GUARD).results[0].result.value for f in futures]
    assert values == ["0>1>2>leaf"] * 4


def test_idle_pooled_actors_retire_soon_after_a_burst_so_the_threads_go_back_to_the_runtimes_own() -> None:
    from dsh_actors.scheduling.idle import IDLE_TTL

    with started_runtime() as rt:
        rt.tools.register(make_tool("t", lambda args, ctx: "ok"))
        idle_threads = {t for t in rt.group.threads() if t.is_alive()}
        futures = [rt.tools.submit(ToolBatchInput(calls=calls("t", "t", "t"))) for _ in range(12)]
        for future in futures:
            future.result(GUARD)
        pooled = [t for t in rt.group.threads() if t.is_alive() and t not in idle_threads]
        assert pooled, "the burst used no pooled actor"
        for thread in pooled:  # each retires IDLE_TTL after it went idle (a join, not a sleep)
            thread.join(IDLE_TTL + GUARD)
        assert [t.name for t in pooled if t.is_alive()] == []


def test_a_call_put_by_a_step_runs_on_an_idle_call_actor_while_the_step_waits_for_a_later_call(
    monkeypatch: Any,
) -> None:
    """A call a step puts starts on a call actor idle on the mailbox while
    the step goes on: c2 is put while c1's call actor waits idle and c0's
    is busy until c2 has run, then c3's pre-execute listener waits (inside
    ``rt.waiting()``) for c2's body. c2 must run on the idle call actor
    meanwhile (held to the step's end, the batch would wait for itself)."""
    idle = threading.Event()
    c2_ran = threading.Event()
    waits_for = Dispatcher.waits_for

    def counting_waits_for(self: Dispatcher, mailbox: Any) -> bool:
        idle.set()  # (asked under the mailbox's lock just before a server waits idle)
        return waits_for(self, mailbox)

    monkeypatch.setattr(Dispatcher, "waits_for", counting_waits_for)
    with started_runtime() as rt:

        def body(args: Any, ctx: Any) -> str:
            if ctx.call_id == "c0":
                must(c2_ran, "c2's body to run")  # c0's call actor stays busy until then
            elif ctx.call_id == "c2":
                c2_ran.set()
            return "ok"

        def listener(execution: Any, next_: Any) -> Any:
            if execution.call_id == "c2":
                must(idle, "c1's call actor to wait idle")  # the step is busy: c1's actor cannot take it
            elif execution.call_id == "c3":
                with rt.waiting():
                    must(c2_ran, "c2's body to run while the step waits for c3's listener")
            return next_()

        rt.tools.register(make_tool("t", body))
        rt.events.on("tools/pre-execute", listener)
        batch = rt.tools.submit(ToolBatchInput(calls=tuple(calls("t", "t", "t", "t")), max_parallel_tool_calls=4))
        result = batch.result(GUARD)
        assert all_ok(result), errors(result)


def test_a_slow_sync_listener_does_not_hold_back_a_call_put_before_it(monkeypatch: Any) -> None:
    """The same with a sync pre-execute listener that waits outside
    ``rt.waiting()``: c2 is put while c1's call actor waits idle and c0's
    is busy, then c3's sync listener waits for c2's body. c2 runs on the
    idle call actor meanwhile (a step that held its wake-up to its end
    would make c3's listener wait for it in vain)."""
    idle = threading.Event()
    c2_ran = threading.Event()
    waits_for = Dispatcher.waits_for

    def counting_waits_for(self: Dispatcher, mailbox: Any) -> bool:
        idle.set()  # (asked under the mailbox's lock just before a server waits idle)
        return waits_for(self, mailbox)

    monkeypatch.setattr(Dispatcher, "waits_for", counting_waits_for)
    with started_runtime() as rt:

        def body(args: Any, ctx: Any) -> str:
            if ctx.call_id == "c0":
                must(c2_ran, "c2's body to run")  # c0's call actor stays busy until then
            elif ctx.call_id == "c2":
                c2_ran.set()
            return "ok"

        def listener(execution: Any, next_: Any) -> Any:
            if execution.call_id == "c2":
                must(idle, "c1's call actor to wait idle")  # the step is busy: c1's actor cannot take it
            elif execution.call_id == "c3":
                must(c2_ran, "c2's body to run while c3's sync listener waits")
            return next_()

        rt.tools.register(make_tool("t", body))
        rt.events.on("tools/pre-execute", listener)
        batch = rt.tools.submit(ToolBatchInput(calls=tuple(calls("t", "t", "t", "t")), max_parallel_tool_calls=4))
        result = batch.result(GUARD)
        assert all_ok(result), errors(result)
