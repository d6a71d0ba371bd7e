"""Scheduling invariants over random batches (Hypothesis).

Random batches of concurrency-safe and exclusive calls, some failing, run
at a random cap, with random durations (busy work of random size in one
property, a random order of Event releases in the other) and an optional
random abort point. After each batch :func:`check_invariants` checks:

* never more than ``cap`` bodies run at once;
* an exclusive body never overlaps any other body; an exclusive call starts
  only after every earlier call settled, and nothing after it starts until
  it settles;
* results, ``tool/call`` and ``tool/result`` events are in model order, and
  each call's ``tool/call`` precedes its ``tool/result``;
* every call has exactly one result and exactly one ``tools/result`` event;
* after the abort no call starts (allowing the one whose start was already
  under way when the flag fired, which then never reaches its body); every
  call whose body never ran is ``ABORTED_BEFORE_DISPATCH``; a success that
  ends after the abort is ``ABORTED``; a tool error stays a tool error;
* no thread is left after ``stop()`` (one runtime per example).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from dsh_actors import AbortController, Session, ToolBatchInput

from .helpers import GUARD, Timeline, call, calls, code_of, events_of, logged_batch, make_tool, must, started_runtime

# name -> (concurrency-safe?, fails?)
KINDS: dict[str, tuple[bool, bool]] = {
    "safe": (True, False),
    "safe_fail": (True, True),
    "excl": (False, False),
    "excl_fail": (False, True),
    "odd": (False, False),  # its classifier answers 1: truthy, not True
    # async def bodies, run as flights on the runtime's loop (no thread
    # waits for them); they yield to the loop once, so they interleave
    "async": (True, False),
    "async_excl": (False, False),
}
ASYNC = {"async", "async_excl"}
#: The kinds whose bodies may block on a threading.Event (not async ones:
#: blocking the loop would hold every other async body back).
BLOCKING_KINDS = sorted(set(KINDS) - ASYNC)


def classifier_for(name: str) -> Any:
    if name == "odd":
        return lambda args: 1
    return (lambda args: True) if KINDS[name][0] else None


def spin(n: int) -> int:
    total = 0
    for k in range(n):
        total += k
    return total


def register_kinds(rt: Any, timeline: Timeline, wait: Callable[[Any, Any], None]) -> None:
    for name, (_, fails) in KINDS.items():
        if name in ASYNC:

            async def abody(args: Any, ctx: Any) -> str:
                with timeline.body(ctx):
                    await asyncio.sleep(0)
                    wait(args, ctx)
                    return f"ok {ctx.call_id}"

            rt.tools.register(make_tool(name, abody, classifier=classifier_for(name)))
            continue

        def body(args: Any, ctx: Any, fails: bool = fails) -> str:
            with timeline.body(ctx):
                wait(args, ctx)
                if fails:
                    raise ValueError(f"fail {ctx.call_id}")
                return f"ok {ctx.call_id}"

        rt.tools.register(make_tool(name, body, classifier=classifier_for(name)))


def check_invariants(timeline: Timeline, names: list[str], cap: int, batch: Any, session: Session) -> None:
    ids = [f"c{i}" for i in range(len(names))]
    exclusive = {f"c{i}" for i, name in enumerate(names) if not KINDS[name][0]}
    failing = {f"c{i}" for i, name in enumerate(names) if KINDS[name][1]}
    starts, ends, pre = timeline.starts, timeline.ends, timeline.pre

    # One result per call, in model order; one tools/result per call.
    assert [r.call_id for r in batch.results] == ids
    assert {cid: len(items) for cid, items in timeline.results.items()} == {cid: 1 for cid in ids}
    assert all(len(seqs) == 1 for seqs in pre.values()), "a call was prepared twice"

    # The cap.
    assert timeline.max_running <= cap

    # Barriers.
    for x in exclusive:
        if x in starts:
            for other in starts:
                if other != x:
                    assert not timeline.overlaps(x, other), f"exclusive {x} overlapped {other}"
        if x not in pre:
            continue
        i = ids.index(x)
        for earlier in ids[:i]:
            assert timeline.result_seq(earlier) < pre[x][0], f"exclusive {x} started before {earlier} settled"
        for later in ids[i + 1 :]:
            if later in pre:
                assert timeline.result_seq(x) < pre[later][0], f"{later} started before exclusive {x} settled"

    # The log, in model order.
    assert [e["call_id"] for e in events_of(session, "tool/call")] == ids
    assert [e["call_id"] for e in events_of(session, "tool/result")] == ids
    events = session.events()
    outcomes = {r.call_id: r.result for r in batch.results}
    for cid, name in zip(ids, names, strict=True):
        logged = [e["type"] for e in events if e.get("call_id") == cid]
        if cid in starts:
            assert logged == ["tool/call", "tool/start", "tool/result"]
        elif name in ASYNC and logged == ["tool/call", "tool/start", "tool/result"]:
            # An async body aborted before its first step: its tool/start was
            # written as its flight was launched (the log says it may have
            # run), and it ends ABORTED_BEFORE_DISPATCH.
            assert code_of(outcomes[cid]) == "ABORTED_BEFORE_DISPATCH", (cid, outcomes[cid])
        else:
            assert logged == ["tool/call", "tool/result"]

    # Outcomes.
    abort = timeline.abort_seq
    results = {r.call_id: r.result for r in batch.results}
    for cid in ids:
        result = results[cid]
        if cid not in starts:
            assert abort is not None, f"{cid} never ran in a batch that was not aborted"
            assert code_of(result) == "ABORTED_BEFORE_DISPATCH", (cid, result)
        elif cid in failing:
            assert result.is_error and result.error.message == f"fail {cid}", (cid, result)
        elif abort is not None and ends[cid] > abort:
            assert code_of(result) == "ABORTED", (cid, result)
        elif abort is None or timeline.result_seq(cid) < abort:
            assert not result.is_error and result.value == f"ok {cid}", (cid, result)
        else:  # it ended before the abort and was finalized around it: either is right
            assert code_of(result) == "ABORTED" or result.value == f"ok {cid}", (cid, result)
    if abort is not None:
        late = [cid for cid, seqs in pre.items() if seqs[0] > abort]
        assert len(late) <= 1, f"calls started after the abort: {late}"
        assert not any(cid in starts for cid in late), f"a call started after the abort ran its body: {late}"
        for cid, ended in ends.items():
            if ended > abort:
                assert timeline.end_aborted[cid], f"{cid}'s body did not see the abort"
    else:
        assert set(starts) == set(ids)
    assert batch.concluded is False


def abort_at_body_start(timeline: Timeline, controller: AbortController, at: int | None) -> None:
    """Abort ``controller`` as the ``at``-th body starts (never when None)."""

    def on_body_start(count: int, ctx: Any) -> None:
        if count == at:
            timeline.abort(controller)

    timeline.on_body_start = on_body_start


@st.composite
def batch_plans(draw: Any, max_calls: int, kinds: list[str] | None = None) -> tuple[list[str], int, int | None]:
    names = draw(st.lists(st.sampled_from(kinds or sorted(KINDS)), min_size=1, max_size=max_calls))
    cap = draw(st.integers(1, 6))
    abort_at = draw(st.none() | st.integers(1, len(names)))
    return names, cap, abort_at


@settings(max_examples=40, deadline=None)
@given(plan=batch_plans(max_calls=25), data=st.data())
def test_scheduling_invariants_hold_for_random_batches_with_busy_work(plan: Any, data: Any) -> None:
    names, cap, abort_at = plan
    works = data.draw(st.lists(st.integers(0, 4000), min_size=len(names), max_size=len(names)), label="work")
    controller = AbortController()
    timeline = Timeline()
    abort_at_body_start(timeline, controller, abort_at)
    with started_runtime() as rt:
        timeline.listen(rt)
        register_kinds(rt, timeline, lambda args, ctx: spin(args["work"]))
        session = Session()
        the_calls = [call(i, name, work=works[i]) for i, name in enumerate(names)]
        batch = rt.tools.submit(
            logged_batch(the_calls, session, signal=controller.signal, max_parallel_tool_calls=cap)
        ).result(GUARD)
    check_invariants(timeline, names, cap, batch, session)


@settings(max_examples=30, deadline=None)
@given(plan=batch_plans(max_calls=12, kinds=BLOCKING_KINDS), data=st.data())
def test_scheduling_invariants_hold_when_calls_are_released_in_a_random_order(plan: Any, data: Any) -> None:
    """Every body waits for its own Event; the test releases them in a random
    order (waiting for a released body to finish when it is running, so the
    finishing order follows the permutation), aborting after a random
    number of releases."""
    names, cap, _ = plan
    n = len(names)
    order = data.draw(st.permutations(range(n)), label="release order")
    abort_after = data.draw(st.none() | st.integers(0, n - 1), label="abort after releases")
    gates = [threading.Event() for _ in range(n)]
    controller = AbortController()
    timeline = Timeline()
    # Before any release, the pool fills: the leading run of safe calls up to
    # the cap (or the first call alone, when it is exclusive).
    initial = 0
    for name in names:
        if initial == cap or (not KINDS[name][0] and initial > 0):
            break
        initial += 1
        if not KINDS[name][0]:
            break
    saturated = threading.Event()

    def on_body_start(count: int, ctx: Any) -> None:
        if count == initial:
            saturated.set()

    timeline.on_body_start = on_body_start

    with started_runtime() as rt:
        timeline.listen(rt)
        register_kinds(rt, timeline, lambda args, ctx: must(gates[args["i"]], f"gate {args['i']}"))
        session = Session()
        future = rt.tools.submit(
            logged_batch(
                [call(i, name) for i, name in enumerate(names)],
                session,
                signal=controller.signal,
                max_parallel_tool_calls=cap,
            )
        )
        try:
            must(saturated, f"{initial} bodies to start")
            with timeline.lock:
                assert timeline.running == initial
            for released, index in enumerate(order):
                if released == abort_after:
                    with timeline.lock:
                        timeline.abort(controller)
                gates[index].set()
                cid = f"c{index}"
                with timeline.lock:
                    running = cid in timeline.starts
                if running:  # let it finish before releasing the next one
                    must(timeline.ended(cid), f"released {cid} to finish")
        finally:
            for gate in gates:
                gate.set()
        batch = future.result(GUARD)
    check_invariants(timeline, names, cap, batch, session)


# -- the dispatcher: concurrent batches sharing a small budget -------------------------

SHARED_KINDS = ["safe", "excl", "nest", "async", "async_nest", "deep"]


@settings(max_examples=30, deadline=None)
@given(
    budget=st.integers(1, 3),
    plans=st.lists(
        st.tuples(st.lists(st.sampled_from(SHARED_KINDS), min_size=1, max_size=5), st.integers(1, 4)),
        min_size=1,
        max_size=4,
    ),
    wrapped=st.booleans(),
)
def test_the_dispatchers_invariants_hold_for_concurrent_batches_sharing_a_small_budget(
    budget: int, plans: list[tuple[list[str], int]], wrapped: bool
) -> None:
    """Random concurrent batches at a budget of 1 to 3 call actors, with
    bodies that nest a blocking batch or await a nested ``execute_async``
    (``deep``: of two such bodies; waited for on a call actor under a sync
    ``tools/execute`` wrapper when ``wrapped``): every batch finishes with every result, never hangs, and
    the dispatcher's invariants (``Dispatcher.assert_invariants``, asserted
    with the batch's after every step) hold throughout."""
    with started_runtime(max_call_actors=budget) as rt:
        if wrapped:
            rt.events.on("tools/execute", lambda execution, next_: next_())
        leaf = ToolBatchInput(calls=tuple(call(i, "safe") for i in range(2)))

        def safe(args: Any, ctx: Any) -> str:
            return "ok"

        def nest(args: Any, ctx: Any) -> str:
            return "+".join(r.result.value for r in rt.tools.execute(leaf).results)

        async def abody(args: Any, ctx: Any) -> str:
            await asyncio.sleep(0)
            return "ok"

        async def anest(args: Any, ctx: Any) -> str:
            inner = await rt.tools.execute_async(leaf)
            return "+".join(r.result.value for r in inner.results)

        nested = ToolBatchInput(calls=tuple(call(i, "async_nest") for i in range(2)))

        async def deep(args: Any, ctx: Any) -> str:
            inner = await rt.tools.execute_async(nested)
            return "|".join(r.result.value for r in inner.results)

        rt.tools.register(make_tool("deep", deep))
        rt.tools.register(make_tool("safe", safe))
        rt.tools.register(make_tool("excl", safe, classifier=None))
        rt.tools.register(make_tool("nest", nest))
        rt.tools.register(make_tool("async", abody))
        rt.tools.register(make_tool("async_nest", anest))
        futures = []
        for b, (names, cap) in enumerate(plans):
            the_calls = [c.__class__(f"b{b}:{c.id}", c.name, c.arguments) for c in calls(*names)]
            futures.append(rt.tools.submit(ToolBatchInput(calls=tuple(the_calls), max_parallel_tool_calls=cap)))
        results = [future.result(GUARD) for future in futures]
        rt.dispatcher.assert_invariants()
    expected = {
        "safe": "ok",
        "excl": "ok",
        "nest": "ok+ok",
        "async": "ok",
        "async_nest": "ok+ok",
        "deep": "ok+ok|ok+ok",
    }
    for (names, _), result in zip(plans, results, strict=True):
        assert [r.result.value for r in result.results] == [expected[name] for name in names], result
