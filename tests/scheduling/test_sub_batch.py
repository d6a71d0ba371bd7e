"""Sub-batches (``NativeExecutor.open_sub_batch``, what a PTC program's
calls run in): the batch state machine fed one call at a time, over random
plans (Hypothesis). The schedule's invariants run after every step (see
conftest.py). After each plan:

* never more than ``cap`` bodies run at once; an exclusive body overlaps no
  other body, starts only after every earlier call committed, and nothing
  after it starts until it has committed;
* calls start in the order they were fed; every call fed commits exactly
  once (its result to the sink, one ``tools/result``), and the batch ends
  only once it is sealed;
* a call commits as soon as it settled, whatever the calls before it do;
* after the abort no call starts (allowing one whose start was under way),
  and a call whose body never ran is ``ABORTED_BEFORE_DISPATCH``, without a
  start in the sink.
"""

from __future__ import annotations

import threading
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from dsh_actors import AbortController, Agent, NativeExecutor, ToolBatchInput

from .helpers import GUARD, Timeline, code_of, make_tool, must, started_runtime


class Sink:
    """A FeedSink recording, on the timeline's clock, what the batch says."""

    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline
        self.started_at: dict[str, int] = {}
        self.committed_at: dict[str, int] = {}
        self.results: dict[str, Any] = {}
        self.committed_event: dict[str, threading.Event] = {}

    def event(self, call_id: str) -> threading.Event:
        return self.committed_event.setdefault(call_id, threading.Event())

    def started(self, execution: Any) -> None:
        with self.timeline.lock:
            assert execution.call_id not in self.started_at, f"{execution.call_id} started twice"
            self.started_at[execution.call_id] = self.timeline._tick()

    def committed(self, execution: Any, result: Any) -> None:
        with self.timeline.lock:
            call_id = execution.call_id
            assert call_id not in self.committed_at, f"{call_id} committed twice"
            self.committed_at[call_id] = self.timeline._tick()
            self.results[call_id] = result
            event = self.event(call_id)
        event.set()


def open_sub_batch(rt: Any, sink: Sink, cap: int, signal: Any) -> Any:
    executor = NativeExecutor()
    rt.tools.set_executor(executor)
    return executor.open_sub_batch(ToolBatchInput(calls=(), signal=signal, agent=Agent("a")), sink, cap)


def spin(n: int) -> int:
    total = 0
    for k in range(n):
        total += k
    return total


@st.composite
def plans(draw: Any) -> Any:
    n = draw(st.integers(1, 10))
    exclusive = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    sequential = draw(st.lists(st.booleans(), min_size=n, max_size=n))  # wait for every commit before feeding
    work = draw(st.lists(st.integers(0, 3000), min_size=n, max_size=n))
    cap = draw(st.integers(1, 4))
    abort_at = draw(st.none() | st.integers(0, n))
    return exclusive, sequential, work, cap, abort_at


@settings(max_examples=30, deadline=None)
@given(plan=plans())
def test_a_sub_batch_keeps_the_schedule_of_a_batch_while_it_is_fed(plan: Any) -> None:
    exclusive, sequential, work, cap, abort_at = plan
    n = len(exclusive)
    timeline = Timeline()
    sink = Sink(timeline)
    controller = AbortController()
    with started_runtime() as rt:
        timeline.listen(rt)

        def body(args: Any, ctx: Any) -> str:
            with timeline.body(ctx):
                spin(args["work"])
                return f"ok {ctx.call_id}"

        rt.tools.register(make_tool("safe", body))
        rt.tools.register(make_tool("excl", body, classifier=None))
        sub = open_sub_batch(rt, sink, cap, controller.signal)
        for i in range(n):
            if i == abort_at:
                with timeline.lock:
                    timeline.abort(controller)
            if sequential[i]:
                for k in range(i):
                    must(sink.event(f"s{k}"), f"s{k} to commit")
            sub.feed(f"s{i}", "excl" if exclusive[i] else "safe", {"work": work[i]})
        sub.seal()
        sub.reply.result(GUARD)

    ids = [f"s{i}" for i in range(n)]
    # Every call fed commits exactly once, with one tools/result.
    assert sorted(sink.committed_at) == sorted(ids)
    for cid in ids:
        assert len(timeline.results.get(cid, [])) == 1, cid
    starts, ends = timeline.starts, timeline.ends
    assert timeline.max_running <= cap
    # Started in the order fed.
    started = [cid for cid in ids if cid in sink.started_at]
    assert [sink.started_at[c] for c in started] == sorted(sink.started_at[c] for c in started)
    assert started == ids[: len(started)], "a call started before an earlier one"
    for i, cid in enumerate(ids):
        result = sink.results[cid]
        if cid not in starts:
            if timeline.abort_seq is not None and result.is_error:
                assert code_of(result) == "ABORTED_BEFORE_DISPATCH", (cid, result)
            continue
        if not exclusive[i]:
            continue
        for other in starts:
            if other != cid:
                assert not (starts[cid] < ends[other] and starts[other] < ends[cid]), f"{cid} overlapped {other}"
        for before in ids[:i]:
            assert sink.committed_at[before] < starts[cid], f"{cid} started before {before} committed"
        for after in ids[i + 1 :]:
            if after in starts:
                assert sink.committed_at[cid] < starts[after], f"{after} started before {cid} committed"
    # After the abort nothing starts (but one whose start was under way).
    if timeline.abort_seq is not None:
        late = [c for c in ids if c in sink.started_at and sink.started_at[c] > timeline.abort_seq]
        assert len(late) <= 1, late
        for cid in late:
            assert cid not in starts


def test_a_call_of_a_sub_batch_commits_while_an_earlier_one_still_runs() -> None:
    timeline = Timeline()
    sink = Sink(timeline)
    release = threading.Event()
    with started_runtime() as rt:

        def slow(args: Any, ctx: Any) -> str:
            must(release, "the test to release s0")
            return "slow"

        rt.tools.register(make_tool("slow", slow))
        rt.tools.register(make_tool("quick", lambda args, ctx: "quick"))
        sub = open_sub_batch(rt, sink, 4, AbortController().signal)
        sub.feed("s0", "slow", {})
        sub.feed("s1", "quick", {})
        try:
            must(sink.event("s1"), "s1 to commit while s0 runs")
            assert "s0" not in sink.committed_at
        finally:
            release.set()
        sub.seal()
        result = sub.reply.result(GUARD)
    assert sorted(sink.committed_at, key=sink.committed_at.__getitem__) == ["s1", "s0"]  # in commit order
    assert result.results == ()  # (each went to the sink as it committed: the reply keeps none)


def test_a_sub_batch_ends_only_once_it_is_sealed() -> None:
    timeline = Timeline()
    sink = Sink(timeline)
    with started_runtime() as rt:
        rt.tools.register(make_tool("quick", lambda args, ctx: "quick"))
        sub = open_sub_batch(rt, sink, 2, AbortController().signal)
        sub.feed("s0", "quick", {})
        must(sink.event("s0"), "s0 to commit")
        assert not sub.reply.done()
        sub.feed("s1", "quick", {})
        must(sink.event("s1"), "s1 to commit")
        assert not sub.reply.done()
        sub.seal()
        assert sub.reply.result(GUARD).results == ()  # (the sink had them)
        assert sorted(sink.committed_at, key=sink.committed_at.__getitem__) == ["s0", "s1"]
