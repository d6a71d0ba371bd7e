"""The runtime-wide budget of call actors (ToolRuntime(max_call_actors=...)):
concurrent batches share it, each batch keeps its own cap, and a body that
runs a nested batch never deadlocks it."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest

from dsh_actors import ToolBatchInput, ToolRuntime
from dsh_actors.actors import actor_thread_ident
from dsh_actors.runtime import DEFAULT_CALL_ACTORS
from dsh_actors.scheduling.executor import CallActor

from .helpers import GUARD, call, calls, make_tool, must, started_runtime


def batch_b(*names: str) -> list[Any]:
    """The calls of a second batch ``B``: ids ``b:c0``, ``b:c1``, ..."""
    return [c.__class__(f"b:{c.id}", c.name, c.arguments) for c in calls(*names)]


class Occupancy:
    """Bodies running at once: on call actors overall, and per batch."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.on_call_actors = 0
        self.worst_on_call_actors = 0
        self.per_batch: Counter[str] = Counter()
        self.worst_per_batch: Counter[str] = Counter()
        self.started = 0
        self.first_wave = threading.Event()
        self.wave = 0

    def body(self, release: threading.Event) -> Any:
        def run(args: Any, ctx: Any) -> str:
            batch = ctx.call_id.split(":")[0]
            pooled = threading.current_thread().name == "dsh-CallActor"
            with self.lock:
                self.started += 1
                if pooled:
                    self.on_call_actors += 1
                    self.worst_on_call_actors = max(self.worst_on_call_actors, self.on_call_actors)
                self.per_batch[batch] += 1
                self.worst_per_batch[batch] = max(self.worst_per_batch[batch], self.per_batch[batch])
                if self.on_call_actors == self.wave:
                    self.first_wave.set()
            try:
                must(release, "the release")
            finally:
                with self.lock:
                    if pooled:
                        self.on_call_actors -= 1
                    self.per_batch[batch] -= 1
            return "ok"

        return run


def test_concurrent_batches_share_the_budget_and_each_keeps_its_own_cap() -> None:
    occupancy = Occupancy()
    occupancy.wave = 3
    release = threading.Event()
    with started_runtime(max_call_actors=3) as rt:
        rt.tools.register(make_tool("t", occupancy.body(release)))
        futures = []
        for b in range(4):
            the_calls = [c.__class__(f"b{b}:{c.id}", c.name, c.arguments) for c in calls(*["t"] * 5)]
            futures.append(rt.tools.submit(ToolBatchInput(calls=the_calls, max_parallel_tool_calls=2)))
        try:
            must(occupancy.first_wave, "the budget to fill")
        finally:
            release.set()
        results = [f.result(GUARD) for f in futures]
    assert all(not r.result.is_error for batch in results for r in batch.results)
    assert occupancy.started == 20
    assert occupancy.worst_on_call_actors == 3  # the budget, reached and never passed
    assert max(occupancy.worst_per_batch.values()) <= 2  # each batch's cap


def test_a_body_running_a_nested_batch_lends_its_slot_so_the_budget_cannot_deadlock() -> None:
    with started_runtime(max_call_actors=1) as rt:
        rt.tools.register(make_tool("leaf", lambda args, ctx: "leaf"))

        def parent(args: Any, ctx: Any) -> str:
            inner = rt.tools.execute(ToolBatchInput(calls=calls("leaf", "leaf", "leaf")))
            return "+".join(r.result.value for r in inner.results)

        rt.tools.register(make_tool("parent", parent))
        # Two parents at once: both want the single call actor, each nests.
        batch = rt.tools.submit(ToolBatchInput(calls=calls("parent", "parent", "parent"))).result(GUARD)
    assert [r.result.value for r in batch.results] == ["leaf+leaf+leaf"] * 3


@pytest.mark.parametrize("ends_on", ["executor actor", "call actor"])
def test_a_done_callback_running_a_nested_batch_finishes_it(ends_on: str) -> None:
    # A submitted batch's future runs its done-callbacks on the actor that
    # ends the batch. That actor used to give its slot back (and shelve
    # itself idle) first: a callback waiting for a nested batch then lent a
    # slot it did not hold, and the nested batch was sent to that very
    # actor, blocked in the callback: it never ran.
    with started_runtime(max_call_actors=4) as rt:
        rt.tools.register(make_tool("leaf", lambda args, ctx: "leaf"))
        nested: list[Any] = []
        done = threading.Event()

        def callback(future: Any) -> None:
            try:
                inner = rt.tools.execute(ToolBatchInput(calls=calls(*["leaf"] * 3)))
                nested.append([r.result.value for r in inner.results])
            except BaseException as exc:  # noqa: BLE001 - shown by the assertion below
                nested.append(exc)
            done.set()

        # One call runs inline on the executor actor; three at cap 3 run on
        # call actors, and the last one to end ends the batch there.
        names = ["leaf"] if ends_on == "executor actor" else ["leaf"] * 3
        future = rt.tools.submit(ToolBatchInput(calls=calls(*names), max_parallel_tool_calls=len(names)))
        future.add_done_callback(callback)
        must(done, "the nested batch of the done-callback to finish")
        rt.dispatcher.assert_invariants()
    assert nested == [["leaf"] * 3]


@pytest.mark.parametrize(
    "how", ["registry ask", "native executor", "submit", "native submit", "asyncio.run of execute_async"]
)
def test_a_body_waiting_on_a_nested_batch_through_another_entry_point_lends_its_slot(how: str) -> None:
    # rt.registry.ask(ExecuteBatch(...)), NativeExecutor.execute(...),
    # a submitted batch's future.result() and a loop the body runs
    # (asyncio.run(rt.tools.execute_async(...))) waited without lending the
    # body's slot: at a budget of one, two parents each waiting on a nested
    # batch never finished.
    import asyncio

    from dsh_actors import NativeExecutor
    from dsh_actors.messages import ExecuteBatch

    with started_runtime(max_call_actors=1) as rt:
        rt.tools.register(make_tool("leaf", lambda args, ctx: "leaf"))
        native = NativeExecutor()
        native.bind(rt)

        def parent(args: Any, ctx: Any) -> str:
            inner_batch = ToolBatchInput(calls=calls("leaf", "leaf"))
            if how == "registry ask":
                inner = rt.registry.ask(ExecuteBatch(inner_batch))
            elif how == "native executor":
                inner = native.execute(inner_batch)
            elif how == "submit":
                inner = rt.tools.submit(inner_batch).result()
            elif how == "native submit":
                inner = native.submit(inner_batch).result()
            else:
                inner = asyncio.run(rt.tools.execute_async(inner_batch))
            return "+".join(r.result.value for r in inner.results)

        rt.tools.register(make_tool("parent", parent))
        batch = rt.tools.submit(ToolBatchInput(calls=calls("parent", "parent"))).result(GUARD)
    assert [r.result.value for r in batch.results] == ["leaf+leaf"] * 2


@pytest.mark.parametrize("how", ["registry ask", "native executor", "submit", "native submit"])
def test_waiting_on_a_batch_from_the_runtimes_own_loop_is_refused_at_once(how: str) -> None:
    # (As rt.tools.execute is.) Before, rt.registry.ask(ExecuteBatch(...))
    # from an async body on the runtime's loop blocked that loop, which the
    # nested batch's async body needed: it never finished.
    from dsh_actors import NativeExecutor
    from dsh_actors.messages import ExecuteBatch

    with started_runtime() as rt:

        async def async_leaf(args: Any, ctx: Any) -> str:
            return "leaf"

        rt.tools.register(make_tool("async_leaf", async_leaf))
        native = NativeExecutor()
        native.bind(rt)

        async def outer(args: Any, ctx: Any) -> str:
            inner_batch = ToolBatchInput(calls=calls("async_leaf"))
            if how == "registry ask":
                rt.registry.ask(ExecuteBatch(inner_batch))
            elif how == "native executor":
                native.execute(inner_batch)
            elif how == "submit":
                rt.tools.submit(inner_batch).result()
            else:
                native.submit(inner_batch).result()
            return "ran"

        rt.tools.register(make_tool("outer", outer))
        result = rt.tools.execute(ToolBatchInput(calls=calls("outer"))).results[0].result
    assert result.is_error and result.error.info.code == "INVALID_USE"
    what = {
        "registry ask": "rt.registry.ask(ExecuteBatch(...))",
        "native executor": "NativeExecutor.execute()",
    }.get(how, "submit(batch).result()")
    assert result.error.message == (
        f"{what} would block the runtime's own event loop (its async tools run there, so it could never "
        "finish): use await rt.tools.execute_async(batch) from an async body"
    )


@pytest.mark.parametrize("ends_on", ["executor actor", "call actor"])
def test_a_done_callback_raising_a_base_exception_does_not_keep_the_actors_slot(ends_on: str) -> None:
    # concurrent.futures lets a callback's BaseException escape set_result;
    # the actor settles the reply while it holds its slot, and used to lose
    # that slot (16 such batches, and no batch could start).
    with started_runtime(max_call_actors=2) as rt:
        rt.tools.register(make_tool("leaf", lambda args, ctx: "leaf"))

        def callback(future: Any) -> None:
            raise SystemExit("a callback exits")

        names = ["leaf"] if ends_on == "executor actor" else ["leaf"] * 3
        for _ in range(20):  # more than the step slots (16) and the budget (2)
            future = rt.tools.submit(ToolBatchInput(calls=calls(*names), max_parallel_tool_calls=len(names)))
            future.add_done_callback(callback)
            assert [r.result.value for r in future.result(GUARD).results] == names
        assert rt.tools.execute(ToolBatchInput(calls=calls("leaf"))).results[0].result.value == "leaf"


def test_a_nested_batch_gets_a_slot_when_ended_lends_left_idle_call_actors_above_the_budget() -> None:
    # Budget 1. Batch X = [w0, w1, w2, excl] at cap 3: w0..w2 wait inside
    # rt.waiting() (lending), so X grows to three call actors. w0 and w1
    # end: serving is now above the budget, and their two call actors idle
    # at excl's barrier, or give back a slot taken back above the budget
    # (Dispatcher.repays_locked). Then w2 runs a nested batch Y. Y's
    # request sent one idle call actor away, which did not bring serving
    # under the budget, and the other kept the slot: Y never ran (a review).
    with started_runtime(max_call_actors=1) as rt:
        all_waiting = threading.Barrier(4, timeout=GUARD)
        first_two, third = threading.Event(), threading.Event()
        idle = threading.Semaphore(0)
        original, release = rt.dispatcher.waits_for, rt.dispatcher.release

        def waits_for(mailbox: Any) -> bool:  # asked under the lock as a call actor is about to idle
            answer = original(mailbox)
            if not answer:
                idle.release()
            return answer

        def gives_back(*args: Any) -> Any:  # a call actor leaves X (its slot above the budget)
            idle.release()
            return release(*args)

        rt.dispatcher.waits_for = waits_for  # type: ignore[method-assign]
        rt.dispatcher.release = gives_back  # type: ignore[method-assign]

        def w(args: Any, ctx: Any) -> str:
            with rt.waiting():
                all_waiting.wait()
                must(third if ctx.call_id == "c2" else first_two, "the test to let the body go on")
            if ctx.call_id != "c2":
                return "w"
            inner = rt.tools.execute(ToolBatchInput(calls=calls("leaf", "leaf", "leaf"), max_parallel_tool_calls=3))
            return "+".join(r.result.value for r in inner.results)

        rt.tools.register(make_tool("w", w))
        rt.tools.register(make_tool("leaf", lambda args, ctx: "leaf"))
        rt.tools.register(make_tool("excl", lambda args, ctx: "excl", classifier=None))
        future = rt.tools.submit(ToolBatchInput(calls=calls("w", "w", "w", "excl"), max_parallel_tool_calls=3))
        all_waiting.wait()
        first_two.set()
        for _ in range(2):  # w0's and w1's call actors wait idle (excl waits for w2) or leave
            assert idle.acquire(timeout=GUARD), "a call actor to idle or leave"
        third.set()
        result = future.result(GUARD)
    assert [r.result.value for r in result.results] == ["w", "w", "leaf+leaf+leaf", "excl"]


def test_the_budget_is_a_positive_int_with_a_documented_default() -> None:
    assert ToolRuntime().max_call_actors == DEFAULT_CALL_ACTORS == 64
    for bad in (0, -1, 1.5, True, "8"):
        with pytest.raises(ValueError, match="max_call_actors"):
            ToolRuntime(max_call_actors=bad)  # type: ignore[arg-type]


def test_call_actors_go_back_to_the_pool_and_idle_ones_are_kept_within_the_budget() -> None:
    release = threading.Event()
    occupancy = Occupancy()
    occupancy.wave = 4
    with started_runtime(max_call_actors=4) as rt:
        rt.tools.register(make_tool("t", occupancy.body(release)))
        futures = [rt.tools.submit(ToolBatchInput(calls=calls("t", "t", "t", "t"))) for _ in range(3)]
        try:
            must(occupancy.first_wave, "the budget to fill")
        finally:
            release.set()
        for future in futures:
            future.result(GUARD)
        pooled = [t for t in rt.group.threads() if t.name == "dsh-CallActor" and t.is_alive()]
        assert len(pooled) <= 4


def test_nested_batches_finish_however_the_budget_and_the_caps_meet() -> None:
    """Budget 1 or 2, outer caps 1 to 3, several parents each nesting a batch:
    an idle call actor never keeps the slot a nested batch needs."""
    for budget in (1, 2):
        for cap in (1, 2, 3):
            with started_runtime(max_call_actors=budget) as rt:
                rt.tools.register(make_tool("leaf", lambda args, ctx: "leaf"))

                def parent(args: Any, ctx: Any, rt: Any = rt) -> str:
                    inner = rt.tools.execute(ToolBatchInput(calls=calls("leaf", "leaf")))
                    return "+".join(r.result.value for r in inner.results)

                rt.tools.register(make_tool("parent", parent))
                batch = rt.tools.submit(
                    ToolBatchInput(calls=calls(*["parent"] * 5), max_parallel_tool_calls=cap)
                ).result(GUARD)
            assert [r.result.value for r in batch.results] == ["leaf+leaf"] * 5, (budget, cap)


def test_an_idle_call_actor_leaves_for_a_batch_waiting_for_the_budget_at_once(monkeypatch: Any) -> None:
    # Batch A's only call actor is idle (A's exclusive x1 runs inline and
    # holds A's barrier) when batch B needs one: it leaves for B because B
    # waits, not after a timed poll (a timer, were there one, would never
    # fire here).
    import dsh_actors.scheduling.pool as pool_module

    monkeypatch.setattr(pool_module, "SHED_AFTER", 1e6, raising=False)
    x1_running = threading.Event()
    release_x1 = threading.Event()

    def exclusive(args: Any, ctx: Any) -> str:
        x1_running.set()
        must(release_x1, "the test to release x1")
        return "x"

    with started_runtime(max_call_actors=1) as rt:
        rt.tools.register(make_tool("safe", lambda args, ctx: "s"))
        rt.tools.register(make_tool("exclusive", exclusive, classifier=None))
        a_calls = calls("safe", "exclusive", "safe")
        a = rt.tools.submit(ToolBatchInput(calls=tuple(a_calls), max_parallel_tool_calls=2))
        try:
            must(x1_running, "A's exclusive call to run")
            b = rt.tools.submit(ToolBatchInput(calls=batch_b("safe", "safe"), max_parallel_tool_calls=2))
            assert [r.result.value for r in b.result(GUARD).results] == ["s", "s"]
        finally:
            release_x1.set()
        assert [r.result.value for r in a.result(GUARD).results] == ["s", "x", "s"]


def test_async_bodies_under_a_sync_wrapper_nesting_execute_async_finish_at_a_budget_of_one() -> None:
    """A sync ``tools/execute`` wrapper makes every async body wait on a call
    actor; each body awaits a nested ``execute_async`` two levels deep. At a
    budget of 1 the waits must lend their slots (or fail at once), never hang."""
    for budget in (1, 2):
        with started_runtime(max_call_actors=budget) as rt:
            rt.events.on("tools/execute", lambda execution, next_: next_())

            async def nest(args: Any, ctx: Any, rt: Any = rt) -> str:
                depth = args["depth"]
                if depth >= 3:
                    return "leaf"
                batch = ToolBatchInput(calls=[call(0, "nest", depth=depth + 1), call(1, "nest", depth=depth + 1)])
                inner = await rt.tools.execute_async(batch)
                return f"{depth}>" + "|".join(str(r.result.value) for r in inner.results)

            rt.tools.register(make_tool("nest", nest))
            batch = ToolBatchInput(calls=[call(i, "nest", depth=1) for i in range(3)])
            result = rt.tools.submit(batch).result(GUARD)
        assert [r.result.value for r in result.results] == ["1>2>leaf|leaf|2>leaf|leaf"] * 3, budget


@pytest.mark.parametrize("shape", ["five calls", "one call", "serial", "exclusive"])
def test_async_bodies_under_a_wrapper_wait_on_call_actors_within_the_budget(shape: str) -> None:
    # A tools/execute wrapper makes a call actor wait for each async body.
    # That wait used to lend its slot at once, so the dispatcher started
    # another call actor for the next queued call, and so on without bound
    # (1,000 agents of 3 async calls under policies.metrics peaked at
    # thousands of threads; a farm audit). It lends only when the body
    # needs the budget now (a nested batch: the tests below), so the calls
    # of 8 batches wait on the 4 call actors of the budget. The only call
    # that can start (a one-call batch, a serial batch's call, an exclusive
    # call) ran inline on the thread stepping its batch, which lends its
    # step slot for whatever it runs there: one thread per batch, with no
    # bound (1,000 one-call agents under policies.timeout: about 1,000
    # threads). It goes to a call actor too, and nothing lends.
    import asyncio

    budget = 4
    n = {"five calls": 5, "serial": 2}.get(shape, 1)
    with started_runtime(max_call_actors=budget) as rt:
        rt.events.on("tools/execute", lambda execution, next_: next_())
        dispatcher = rt.dispatcher
        lends: list[bool] = []  # every lend, of a step slot (True) or a call-actor slot
        for name in ("lend", "lend_decided"):  # (the up-front lend, the on-demand one)
            original = getattr(dispatcher, name)

            def lend(stepper: bool, original: Any = original) -> Any:
                lends.append(stepper)
                return original(stepper)

            setattr(dispatcher, name, lend)
        running = 0
        worst = {"bodies": 0, "call actors": 0}

        async def main() -> list[Any]:
            first_wave, release = asyncio.Event(), asyncio.Event()

            async def body(args: Any, ctx: Any) -> str:
                nonlocal running
                running += 1  # (on this loop's thread only)
                held = dispatcher.snapshot()
                worst["bodies"] = max(worst["bodies"], running)
                worst["call actors"] = max(worst["call actors"], held["call_actors_in_use"] + held["call_actors_lent"])
                if running == budget:
                    first_wave.set()
                try:
                    await release.wait()
                finally:
                    running -= 1
                return "ok"

            if shape == "exclusive":
                rt.tools.register(make_tool("wait", body, classifier=None))
            else:
                rt.tools.register(make_tool("wait", body))
            batches = [
                ToolBatchInput(
                    calls=[call(i, "wait", b=b) for i in range(n)],
                    max_parallel_tool_calls=1 if shape == "serial" else n,
                )
                for b in range(8)
            ]
            awaited = asyncio.gather(*(rt.tools.execute_async(batch) for batch in batches))
            try:
                await asyncio.wait_for(first_wave.wait(), GUARD)
            finally:
                release.set()
            return await asyncio.wait_for(awaited, GUARD)

        results = asyncio.run(main())
        dispatcher.assert_invariants()
        assert dispatcher.snapshot()["call_actors_peak"] <= budget
    assert [r.result.value for batch in results for r in batch.results] == ["ok"] * (8 * n)
    assert worst == {"bodies": budget, "call actors": budget}
    # No body needed the budget: no call actor lent its slot, and no thread
    # stepping a batch lent its step slot for an inline async body.
    assert not lends


@pytest.mark.parametrize(
    "how",
    [
        "execute_async",
        "submit",
        "native submit",
        "registry ask",
        "execute on a thread",
        "execute in the loop's executor",
        "waiting for a sibling",
    ],
)
def test_an_async_body_under_a_wrapper_lends_its_call_actor_when_it_needs_the_budget(how: str) -> None:
    # The call actor waiting for an async body under a tools/execute wrapper
    # keeps its slot until the body needs the budget: it starts a batch,
    # by any entry point, on any thread its context reaches (asyncio.to_thread
    # copies it, and so does run_in_executor on the runtime's loop), or waits inside rt.waiting() (here for its sibling call,
    # which needs the only call actor). Then the slot is lent, once: at a
    # budget of one, two such parents, each nesting two async calls, finish.
    import asyncio
    from concurrent.futures import Future

    from dsh_actors import NativeExecutor
    from dsh_actors.messages import ExecuteBatch

    with started_runtime(max_call_actors=1) as rt:
        rt.events.on("tools/execute", lambda execution, next_: next_())
        native = NativeExecutor()
        native.bind(rt)
        arrived = {"c0": threading.Event(), "c1": threading.Event()}

        async def leaf(args: Any, ctx: Any) -> str:
            return "leaf"

        async def parent(args: Any, ctx: Any) -> str:
            inner_batch = ToolBatchInput(calls=calls("leaf", "leaf"))
            if how == "execute_async":
                inner = await rt.tools.execute_async(inner_batch)
            elif how == "submit":
                inner = await asyncio.wrap_future(rt.tools.submit(inner_batch))
            elif how == "native submit":
                inner = await asyncio.wrap_future(native.submit(inner_batch))
            elif how == "registry ask":
                answer: Future[Any] = Future()
                rt.registry.ask(ExecuteBatch(inner_batch, reply=answer), block=False)
                inner = await asyncio.wrap_future(answer)
            elif how == "execute on a thread":
                inner = await asyncio.to_thread(rt.tools.execute, inner_batch)
            elif how == "execute in the loop's executor":
                # (the runtime's loop's default executor carries the body's contextvars, as to_thread does)
                inner = await asyncio.get_running_loop().run_in_executor(None, rt.tools.execute, inner_batch)
            else:
                arrived[ctx.call_id].set()
                other = arrived["c1" if ctx.call_id == "c0" else "c0"]
                with rt.waiting():
                    await asyncio.to_thread(must, other, "the sibling call to run")
                return "met"
            return "+".join(r.result.value for r in inner.results)

        rt.tools.register(make_tool("leaf", leaf))
        rt.tools.register(make_tool("parent", parent))
        batch = rt.tools.submit(ToolBatchInput(calls=calls("parent", "parent"))).result(GUARD)
        rt.dispatcher.assert_invariants()
        snapshot = rt.dispatcher.snapshot()
    expected = "met" if how == "waiting for a sibling" else "leaf+leaf"
    assert [r.result.value for r in batch.results] == [expected] * 2
    assert snapshot["call_actors_lent"] == 0  # every lend ended with its wait


def _queued_listener(call_id: str, event: threading.Event) -> Any:
    """A ``tools/pre-execute`` listener that sets ``event`` when ``call_id``
    is prepared: the call before it is in its batch's work mailbox then."""

    def seen(execution: Any, next_: Any) -> Any:
        if execution.call_id == call_id:
            event.set()
        return next_()

    return seen


def test_a_long_batch_does_not_hold_the_whole_budget_while_another_batch_waits() -> None:
    """Batch A (many calls, a cap above the budget) keeps the two call actors
    of the budget busy; batch B arrives while A's first two calls run. When
    those end, one call actor goes to B (capacity is shared between batches)
    instead of taking A's next call: A's later calls wait for B's first one,
    which never starts if A keeps the whole budget."""
    running = threading.Semaphore(0)
    release = threading.Event()
    b_started = threading.Event()
    b_queued = threading.Event()

    def a_body(args: Any, ctx: Any) -> str:
        if args["i"] < 2:
            running.release()
            must(release, "the test to release A's first calls")
        else:
            must(b_started, "B's first call to start (it waits for a call actor A holds)")
        return "a"

    def b_body(args: Any, ctx: Any) -> str:
        b_started.set()
        return "b"

    with started_runtime(max_call_actors=2) as rt:
        rt.tools.register(make_tool("a", a_body))
        rt.tools.register(make_tool("b", b_body))
        rt.events.on("tools/pre-execute", _queued_listener("b:c1", b_queued))  # B's c0 then asks for a call actor
        a = rt.tools.submit(ToolBatchInput(calls=calls(*["a"] * 12), max_parallel_tool_calls=4))
        try:
            for _ in range(2):
                assert running.acquire(timeout=GUARD)
            b = rt.tools.submit(ToolBatchInput(calls=batch_b("b", "b")))
            must(b_queued, "B's first call to wait for a call actor")
        finally:
            release.set()
        assert [r.result.value for r in b.result(GUARD).results] == ["b", "b"]
        assert [r.result.value for r in a.result(GUARD).results] == ["a"] * 12


def test_a_batch_that_gives_its_call_actor_to_a_waiting_batch_gets_one_back_for_its_queued_calls() -> None:
    """Budget 2: A's c0 blocks until A's c2 runs; A's c1 ends while batch B
    waits for a call actor, so c1's call actor leaves A for B. A's c2 must
    still start once B is done (the budget is free again): A asks for a call
    actor again when it gives one away with calls still to start. Without
    that, c2 waits behind c0 and c0 waits for c2."""
    c0_running = threading.Event()
    c2_running = threading.Event()
    release_c1 = threading.Event()
    b_queued = threading.Event()

    def a_body(args: Any, ctx: Any) -> str:
        i = args["i"]
        if i == 0:
            c0_running.set()
            must(c2_running, "A's c2 to start beside c0 (the budget is free once B is done)")
        elif i == 1:
            must(release_c1, "the test to release A's c1")
        else:
            c2_running.set()
        return "a"

    with started_runtime(max_call_actors=2) as rt:
        rt.tools.register(make_tool("a", a_body))
        rt.tools.register(make_tool("b", lambda args, ctx: "b"))
        rt.events.on("tools/pre-execute", _queued_listener("b:c1", b_queued))
        a = rt.tools.submit(ToolBatchInput(calls=calls("a", "a", "a"), max_parallel_tool_calls=2))
        try:
            must(c0_running, "A's c0 to run")
            b = rt.tools.submit(ToolBatchInput(calls=batch_b("b", "b")))
            must(b_queued, "B's first call to wait for a call actor")
        finally:
            release_c1.set()
        assert [r.result.value for r in b.result(GUARD).results] == ["b", "b"]
        assert [r.result.value for r in a.result(GUARD).results] == ["a"] * 3


def test_at_a_budget_of_one_two_batches_take_turns() -> None:
    """Budget 1: a long batch A holds the one call actor when batch B
    arrives. After A's running call, the call actor serves B before A's next
    call (A's later calls wait for B's first one, which never starts if A
    keeps the call actor for its whole batch)."""
    a_running = threading.Event()
    release = threading.Event()
    b_started = threading.Event()
    b_queued = threading.Event()

    def a_body(args: Any, ctx: Any) -> str:
        if args["i"] == 0:
            a_running.set()
            must(release, "the test to release A's first call")
        else:
            must(b_started, "B's first call to start (it waits for the call actor A holds)")
        return "a"

    def b_body(args: Any, ctx: Any) -> str:
        b_started.set()
        return "b"

    with started_runtime(max_call_actors=1) as rt:
        rt.tools.register(make_tool("a", a_body))
        rt.tools.register(make_tool("b", b_body))
        rt.events.on("tools/pre-execute", _queued_listener("b:c1", b_queued))
        a = rt.tools.submit(ToolBatchInput(calls=calls(*["a"] * 6), max_parallel_tool_calls=3))
        try:
            must(a_running, "A's first call to run")
            b = rt.tools.submit(ToolBatchInput(calls=batch_b("b", "b")))
            must(b_queued, "B's first call to wait for the call actor")
        finally:
            release.set()
        assert [r.result.value for r in b.result(GUARD).results] == ["b", "b"]
        assert [r.result.value for r in a.result(GUARD).results] == ["a"] * 6


def test_two_nested_batches_awaited_at_once_on_a_bodys_loop_keep_its_slot_lent_until_both_end() -> None:
    # A sync body awaiting two execute_async at once (asyncio.gather on a loop
    # its call actor runs): each await is a wait of its own. The first to end
    # used to take the slot back while the second still needed a call actor:
    # at a budget of one, the second never got one.
    import asyncio

    with started_runtime(max_call_actors=1) as rt:
        rt.tools.register(make_tool("quick", lambda args, ctx: "quick"))
        gates: dict[str, asyncio.Event] = {}

        async def gate(args: Any, ctx: Any) -> str:
            await gates["first ended"].wait()  # (its batch's calls after it need a call actor)
            return "gate"

        rt.tools.register(make_tool("gate", gate, classifier=None))

        def parent(args: Any, ctx: Any) -> str:
            async def both() -> list[str]:
                gates["first ended"] = asyncio.Event()

                async def first() -> Any:
                    result = await rt.tools.execute_async(ToolBatchInput(calls=calls("quick")))
                    gates["first ended"].set()
                    return result

                second = ToolBatchInput(calls=calls("gate", "quick", "quick"), max_parallel_tool_calls=2)
                one, two = await asyncio.gather(first(), rt.tools.execute_async(second))
                return [r.result.value for r in (*one.results, *two.results)]

            return "+".join(asyncio.run(both()))

        rt.tools.register(make_tool("parent", parent))
        batch = rt.tools.submit(ToolBatchInput(calls=calls("parent", "quick"))).result(GUARD)
        rt.dispatcher.assert_invariants()
    assert [r.result.value for r in batch.results] == ["quick+gate+quick+quick", "quick"]


def test_an_async_body_under_a_wrapper_on_an_actors_loop_lends_its_waiter_inside_rt_waiting() -> None:
    # The nested batch's async bodies run on the loop a sync body's call actor
    # runs (asyncio.run(execute_async(...))); each is waited for, under the
    # wrapper, by another call actor holding its slot. `with rt.waiting():` in
    # one of them lent the loop's actor's slot, not its waiter's: at a budget
    # of one its sibling never got a call actor.
    import asyncio

    with started_runtime(max_call_actors=1) as rt:
        rt.events.on("tools/execute", lambda execution, next_: next_())
        arrived = {"c0": threading.Event(), "c1": threading.Event()}

        async def sibling(args: Any, ctx: Any) -> str:
            arrived[ctx.call_id].set()
            other = arrived["c1" if ctx.call_id == "c0" else "c0"]
            with rt.waiting():
                met = await asyncio.to_thread(other.wait, GUARD)
            return "met" if met else "alone"

        rt.tools.register(make_tool("sibling", sibling))
        rt.tools.register(make_tool("quick", lambda args, ctx: "quick"))

        def parent(args: Any, ctx: Any) -> str:
            inner = asyncio.run(rt.tools.execute_async(ToolBatchInput(calls=calls("sibling", "sibling"))))
            return "+".join(r.result.value for r in inner.results)

        rt.tools.register(make_tool("parent", parent))
        batch = rt.tools.submit(ToolBatchInput(calls=calls("parent", "quick"))).result(GUARD)
        rt.dispatcher.assert_invariants()
    assert [r.result.value for r in batch.results] == ["met+met", "quick"]


def test_a_call_actor_back_above_the_budget_after_an_inline_body_gives_its_slot_back_before_its_next_call() -> None:
    """Budget 1. Batch A's call actor ends a0 with nothing queued and takes
    A's step itself, which runs the exclusive a1 inline, lending its slot:
    batch B gets it, and b0 runs on a call actor of its own. a1 ends: A's
    call actor takes its slot back (two held at a budget of one). It used
    to go on to take a2 and run it beside b0, holding that slot for as long
    as A had calls (and one more per batch so chained, K+1 at once): now it
    gives the slot back before its next call, and a2 waits for b0."""
    held: set[str] = set()  # bodies on call actors holding their slot (not lent)
    worst: list[str] = []
    lock = threading.Lock()
    a0_running, a0_go, a1_running, a1_go, b0_running = (threading.Event() for _ in range(5))
    decided = threading.Event()  # A's call actor took a2, or gave its slot back
    inline: list[threading.Thread] = []

    def body(args: Any, ctx: Any) -> str:
        actor = actor_thread_ident()
        holds = type(actor) is CallActor and actor.lends == 0
        with lock:
            if holds:
                held.add(ctx.call_id)
                if len(held) > len(worst):
                    worst[:] = sorted(held)
        try:
            if ctx.call_id == "c0":
                a0_running.set()
                must(a0_go, "the test to let a0 end")
            elif ctx.call_id == "c1":
                inline.append(threading.current_thread())
                a1_running.set()
                must(a1_go, "the test to let a1 end")
            elif ctx.call_id == "c2":
                decided.set()
            elif ctx.call_id == "b:c0":
                b0_running.set()
                must(decided, "A's call actor to take a2 or give its slot back")
        finally:
            with lock:
                held.discard(ctx.call_id)
        return "ok"

    with started_runtime(max_call_actors=1) as rt:
        release = rt.dispatcher.release

        def watched_release(*args: Any) -> Any:
            if inline and threading.current_thread() is inline[0]:
                decided.set()  # (A's call actor leaves A before its next call)
            return release(*args)

        step_ended = rt.dispatcher.step_ended
        a_step_ended = threading.Event()

        def watched_step_ended(*args: Any) -> Any:
            try:
                return step_ended(*args)
            finally:
                a_step_ended.set()

        rt.dispatcher.release = watched_release  # type: ignore[method-assign]
        rt.dispatcher.step_ended = watched_step_ended  # type: ignore[method-assign]
        rt.tools.register(make_tool("s", body))
        rt.tools.register(make_tool("x", body, classifier=None))
        a = rt.tools.submit(ToolBatchInput(calls=calls("s", "x", "s", "s"), max_parallel_tool_calls=2))
        try:
            must(a0_running, "a0 to run")
            # (The executor actor that ran A's first step has left it: a0 ending
            # before that would leave A's next step, and a1, to that actor.)
            must(a_step_ended, "the executor actor to end A's first step")
            b = rt.tools.submit(ToolBatchInput(calls=batch_b("s", "s"), max_parallel_tool_calls=2))
            a0_go.set()
            must(a1_running, "a1 to run inline on A's call actor")
            assert inline[0].name == "dsh-CallActor", f"a1 ran on {inline[0].name}, not on A's call actor"
            must(b0_running, "b0 to run on the slot a1 lent")
            a1_go.set()
        finally:
            a0_go.set()
            a1_go.set()
        assert [r.result.value for r in a.result(GUARD).results] == ["ok"] * 4
        assert [r.result.value for r in b.result(GUARD).results] == ["ok"] * 2
        assert len(worst) == 1, f"bodies ran at once on call actors holding a slot of a budget of one: {worst}"
        rt.dispatcher.assert_invariants()
        assert not rt.dispatcher.owing


@pytest.mark.parametrize("lends", [True, False], ids=["inside rt.waiting()", "outside"])
def test_a_body_waiting_for_a_later_call_of_its_own_batch_at_a_budget_of_one(lends: bool) -> None:
    """Budget 1: c0 waits for c1, a later call of its own batch. Inside
    ``rt.waiting()`` it lends the one call actor, so c1 runs on another
    and both succeed. Outside, it holds it and c1 waits behind it (a wait
    on user code the runtime cannot see, as for another batch's call): the
    stop ends it, c0 ``ABORTED`` (its body sees its signal), c1 and c2 never
    started (reference section 7)."""
    c0_waits, c1_queued, go = threading.Event(), threading.Event(), threading.Event()

    def waiter(args: Any, ctx: Any) -> str:
        ctx.signal.add_callback(lambda _: go.set())  # (the stop ends the wait)
        c0_waits.set()
        if lends:
            with rt.waiting():
                must(go, "c1 to run")
        else:
            must(go, "the stop")
        return "waited"

    def setter(args: Any, ctx: Any) -> str:
        go.set()
        return "set"

    with started_runtime(max_call_actors=1) as rt:
        rt.tools.register(make_tool("waiter", waiter))
        rt.tools.register(make_tool("setter", setter))
        rt.tools.register(make_tool("quick", lambda args, ctx: "quick"))
        rt.events.on("tools/pre-execute", _queued_listener("c2", c1_queued))
        batch = rt.tools.submit(ToolBatchInput(calls=calls("waiter", "setter", "quick")))
        if lends:
            assert [r.result.value for r in batch.result(GUARD).results] == ["waited", "set", "quick"]
            return
        must(c0_waits, "c0 to wait")
        must(c1_queued, "c1 to wait for the call actor c0 holds")
        assert not batch.done()
        rt.stop()
        results = batch.result(GUARD).results
    codes = [r.result.error.info.code if r.result.is_error else None for r in results]  # type: ignore[union-attr]
    assert codes == ["ABORTED", "ABORTED_BEFORE_DISPATCH", "ABORTED_BEFORE_DISPATCH"]
