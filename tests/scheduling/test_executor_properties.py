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

from dsh_actors import AbortController, Agent, Ask, Deny, LogStep, Session, ToolBatchInput, ToolCall

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
    with the batch's after every step, and as every lend ends) hold
    throughout: a call actor that takes its slot back above the budget is
    in the dispatcher's ``owing`` (``serving <= budget + len(owing)``), and
    once the runtime has stopped no call actor owes one."""
    broken: list[str] = []
    with started_runtime(max_call_actors=budget) as rt:
        dispatcher = rt.dispatcher
        unlend = dispatcher.unlend

        def checked_unlend(worker: Any = None) -> None:
            # (On the actor's thread: a failure is recorded, not raised into its body.)
            unlend(worker)
            try:
                dispatcher.assert_invariants()
            except AssertionError as exc:
                broken.append(str(exc))

        dispatcher.unlend = checked_unlend  # type: ignore[method-assign]
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
    assert not broken, broken
    # (Every call actor has left its mailbox: each repaid what it owed.)
    assert not dispatcher.owing and dispatcher.serving == dispatcher.lent_servers == 0, dispatcher
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


# -- the call states: every way a call settles, in one batch ---------------------------

#: kind -> the tool its call names
SETTLE_KINDS: dict[str, str] = {
    "safe": "safe",  # a parallel body
    "excl": "excl",  # an exclusive body
    "async": "async",  # a flight on the loop
    "churn": "churn",  # a body that changes the registry: calls prepared behind it go stale (REDO)
    "bad_args": "safe",  # settled as it begins (INVALID_ARGS), never prepared
    "unknown": "nope",  # no such tool: UNKNOWN_TOOL, settled without dispatch
    "deny": "denied",  # a pre-execute Deny: settled without dispatch
    "ask": "asked",  # the approval service defers it: DEFERRED until a decision
    "ask_excl": "asked_excl",  # a deferred exclusive call: a barrier while it waits
}
POLICY_KINDS = {"deny", "ask", "ask_excl"}


def settle_call(index: int, kind: str) -> Any:
    tool_call = call(index, SETTLE_KINDS[kind])
    if kind == "bad_args":  # JSON that is not lossless: BadArguments
        return ToolCall(id=tool_call.id, name=tool_call.name, arguments=f'{{"i": {index}, "x": 1{"0" * 30}}}')
    return tool_call


def expected_outcome(kind: str, result: Any, decision: str | None, aborted: bool) -> bool:
    """Whether ``result`` is what a call of ``kind`` may end with."""
    code = code_of(result)
    if aborted and code == "ABORTED_BEFORE_DISPATCH":
        return True  # (any call the abort reached before its body)
    if kind in ("safe", "excl", "async", "churn"):
        return (not result.is_error and result.value.startswith("ok ")) or (aborted and code == "ABORTED")
    if kind == "bad_args":
        return code == "INVALID_ARGS"
    if kind == "unknown":
        return code == "UNKNOWN_TOOL"
    if kind == "deny":
        return result.is_error and result.error.message == "no"
    assert kind in ("ask", "ask_excl")
    if decision == "rejected":
        return result.is_error and "rejected" in result.error.message
    return decision == "allowed-once" and not result.is_error and result.value.startswith("ok ")


@settings(max_examples=50, deadline=None)
@given(
    policies=st.booleans(),
    logged=st.booleans(),
    cap=st.integers(1, 4),
    data=st.data(),
)
def test_the_call_states_invariants_hold_for_batches_mixing_every_way_a_call_settles(
    policies: bool, logged: bool, cap: int, data: Any
) -> None:
    """Random batches of calls that dispatch (sync, exclusive, async, one
    that changes the registry so that calls prepared behind it start again),
    calls settled as they begin (bad arguments), settled without dispatch
    (an unknown tool, a pre-execute denial) and deferred by the approval
    service, at a random cap, logged or not, aborted at a random body start
    or resumed with random decisions until every call has its result. The
    schedule's invariants, which check each call's ``CallState`` against
    the facts its ``Call`` carries (outcome, dispatched, ask, final), are
    asserted after every step (conftest: a broken one fails the batch);
    every call ends exactly once, with what its kind allows."""
    kinds = sorted(SETTLE_KINDS if policies else set(SETTLE_KINDS) - POLICY_KINDS)
    names = data.draw(st.lists(st.sampled_from(kinds), min_size=1, max_size=10), label="calls")
    abort_at = data.draw(st.none() | st.integers(1, len(names)), label="abort at body start")
    controller = AbortController()
    lock = threading.Lock()
    started = [0]
    finals: dict[str, list[Any]] = {}

    with started_runtime() as rt:

        def on_start(ctx: Any) -> None:
            with lock:
                started[0] += 1
                if started[0] == abort_at:
                    controller.abort("the test aborts")

        def body(args: Any, ctx: Any) -> str:
            on_start(ctx)
            return f"ok {ctx.call_id}"

        async def abody(args: Any, ctx: Any) -> str:
            on_start(ctx)
            await asyncio.sleep(0)
            return f"ok {ctx.call_id}"

        def churn(args: Any, ctx: Any) -> str:
            on_start(ctx)
            rt.tools.register(make_tool(f"side{ctx.call_id}", body))
            return f"ok {ctx.call_id}"

        rt.tools.register(make_tool("safe", body))
        rt.tools.register(make_tool("excl", body, classifier=None))
        rt.tools.register(make_tool("async", abody))
        rt.tools.register(make_tool("churn", churn))
        rt.tools.register(make_tool("denied", body))
        rt.tools.register(make_tool("asked", body))
        rt.tools.register(make_tool("asked_excl", body, classifier=None))
        if policies:

            def policy(execution: Any, next_: Any) -> Any:
                if execution.name == "denied":
                    return Deny("no")
                if execution.name.startswith("asked"):
                    return Ask(reason="a person must approve")
                return next_()

            rt.events.on("tools/pre-execute", policy)
            rt.approvals.set(lambda request: "deferred")
        rt.events.on("tools/result", lambda execution, result: finals.setdefault(execution.call_id, []).append(result))
        session = Session() if logged else None
        agent = Agent("a", session=session)
        the_calls = tuple(settle_call(i, kind) for i, kind in enumerate(names))
        result = rt.tools.submit(
            ToolBatchInput(
                calls=the_calls,
                agent=agent,
                log=LogStep(turn=1, step=1) if logged else None,
                signal=controller.signal,
                max_parallel_tool_calls=cap,
            )
        ).result(GUARD)
        aborted = controller.signal.aborted
        settled = {item.call_id: item.result for item in result.results}
        decisions_made: dict[str, str] = {}
        rounds = 0
        while result.suspension is not None:
            assert not aborted, "an aborted batch suspended"
            deferred = [entry["id"] for entry in result.suspension["calls"] if entry["state"] == "deferred"]
            assert deferred, result.suspension
            rounds += 1
            assert rounds <= len(names) + 1, "the batch never finished"
            options = ["allowed-once", "rejected", "deferred"] if rounds == 1 else ["allowed-once"]
            decisions = {cid: data.draw(st.sampled_from(options), label=f"decision {cid}") for cid in deferred}
            decisions_made.update({cid: d for cid, d in decisions.items() if d != "deferred"})
            result = rt.tools.resume(result.suspension, decisions, agent=agent)
            settled.update({item.call_id: item.result for item in result.results})

    assert result.pending == ()
    assert [item.call_id for item in result.results] == [c.id for c in the_calls]  # model order
    for tool_call, kind in zip(the_calls, names, strict=True):
        cid = tool_call.id
        outcome = settled[cid]
        assert expected_outcome(kind, outcome, decisions_made.get(cid), aborted), (cid, kind, outcome)
        assert finals.get(cid) == [outcome], f"{cid} ended {len(finals.get(cid, []))} times"
