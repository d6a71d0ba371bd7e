"""rt.stop() drains: after it returns, every call of a running batch has
exactly one result (ABORTED, ABORTED_BEFORE_DISPATCH or its real one) and,
when logged, its tool/result; a body still running at stop's timeout is
named in the batch's error, never silently dropped."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from dsh_actors import InvalidValueError, Session, ToolBatchExecutionError, ToolBatchInput, ToolRuntime

from .helpers import (
    GUARD,
    assert_no_new_threads,
    calls,
    code_of,
    events_of,
    live_threads,
    logged_batch,
    make_tool,
    must,
)


def test_stop_drains_a_logged_batch_and_every_call_gets_one_result_and_its_tool_result() -> None:
    before = live_threads()
    rt = ToolRuntime().start()
    started = threading.Semaphore(0)
    running = threading.Event()
    count = 0
    lock = threading.Lock()

    def cooperative(args: Any, ctx: Any) -> str:
        nonlocal count
        with lock:
            count += 1
            if count == 10:
                running.set()
        ctx.signal.wait(GUARD)  # ends when the runtime stops
        started.release()
        return "done"

    rt.tools.register(make_tool("t", cooperative))
    session = Session()
    future = rt.tools.submit(logged_batch(calls(*["t"] * 300), session))
    must(running, "ten bodies to run")
    rt.stop()
    batch = future.result(GUARD)  # a result, not an error
    assert_no_new_threads(before)
    codes = [code_of(r.result) for r in batch.results]
    assert len(codes) == 300
    assert codes[:10] == ["ABORTED"] * 10
    assert set(codes[10:]) == {"ABORTED_BEFORE_DISPATCH"}
    ids = [f"c{i}" for i in range(300)]
    assert [e["call_id"] for e in events_of(session, "tool/call")] == ids
    assert [e["call_id"] for e in events_of(session, "tool/result")] == ids
    assert session.pending_calls() == []


def test_a_body_still_running_at_stops_timeout_is_named_in_the_batch_error_and_logged_aborted() -> None:
    before = live_threads()
    rt = ToolRuntime().start()
    running, release = threading.Event(), threading.Event()

    def stubborn(args: Any, ctx: Any) -> str:
        running.set()
        release.wait(GUARD)  # ignores its signal
        return "late"

    rt.tools.register(make_tool("stubborn", stubborn))
    rt.tools.register(make_tool("quick", lambda args, ctx: "quick"))
    session = Session()
    future = rt.tools.submit(logged_batch(calls("quick", "stubborn", "quick", "quick"), session))
    must(running, "the stubborn body to run")
    try:
        rt.stop(timeout=0.3)
        with pytest.raises(ToolBatchExecutionError, match='c1 \\(tool "stubborn"\\)') as info:
            future.result(GUARD)
    finally:
        release.set()
    err = info.value
    codes = [code_of(r.result) for r in err.results]
    assert codes[0] in (None, "ABORTED") and codes[1] == "ABORTED"
    # c0, c2 and c3 ran beside c1 or never started: a success whose body
    # settled before the stop stays one (reference section 7), even though
    # c2 and c3 commit after c1; anything else is aborted.
    assert set(codes[2:]) <= {None, "ABORTED", "ABORTED_BEFORE_DISPATCH"}
    assert [e["call_id"] for e in events_of(session, "tool/result")] == ["c0", "c1", "c2", "c3"]
    assert session.pending_calls() == []
    assert_no_new_threads(before)  # the stubborn call actor ends once its body returns


def test_a_second_concurrent_stop_returns_only_once_the_runtime_is_stopped() -> None:
    before = live_threads()
    rt = ToolRuntime().start()
    running, release = threading.Event(), threading.Event()

    def draining(args: Any, ctx: Any) -> str:
        running.set()
        ctx.signal.wait(GUARD)  # the runtime is stopping
        release.wait(GUARD)  # and the drain waits for this body
        return "done"

    rt.tools.register(make_tool("t", draining))
    future = rt.tools.submit(ToolBatchInput(calls=calls("t")))
    must(running, "the body to run")
    first = threading.Thread(target=rt.stop, name="first-stop")
    first.start()
    assert rt.stop_signal.wait(GUARD), "the first stop never began"
    seen: list[tuple[bool, bool]] = []
    calling = threading.Event()

    def second_stop() -> None:
        calling.set()
        rt.stop()
        seen.append((rt.halted, future.done()))

    second = threading.Thread(target=second_stop, name="second-stop")
    second.start()
    must(calling, "the second stop to be called")
    release.set()
    second.join(GUARD)
    first.join(GUARD)
    assert seen == [(True, True)]  # it returned after the batch drained and the runtime stopped
    assert code_of(future.result(GUARD).results[0].result) == "ABORTED"
    assert_no_new_threads(before)


@pytest.mark.parametrize("bad", ["5", -1, float("nan"), True, None])
def test_a_stop_timeout_that_is_not_seconds_is_refused_and_the_runtime_still_stops(bad: Any) -> None:
    # Before, stop("5") raised a TypeError from its arithmetic after marking
    # the runtime stopped: nothing was stopped, and the next stop() waited
    # for that first one for ever.
    before = live_threads()
    rt = ToolRuntime().start()
    with pytest.raises(InvalidValueError) as raised:
        rt.stop(bad)
    assert str(raised.value) == f"stop(timeout=...) must be a number of seconds, 0 or more, got {bad!r}"
    assert rt.running
    rt.stop()
    assert rt.halted
    assert_no_new_threads(before)


@pytest.mark.parametrize("timeout", [float("inf"), 1e300])
def test_a_stop_timeout_past_what_a_wait_takes_is_a_long_one(timeout: float) -> None:
    # (threading's waits raise OverflowError past TIMEOUT_MAX.)
    before = live_threads()
    rt = ToolRuntime().start()
    running = threading.Event()

    def cooperative(args: Any, ctx: Any) -> str:
        running.set()
        ctx.signal.wait(GUARD)
        return "done"

    rt.tools.register(make_tool("t", cooperative))
    future = rt.tools.submit(ToolBatchInput(calls=calls("t")))
    must(running, "the body to run")
    rt.stop(timeout)
    assert rt.halted
    assert code_of(future.result(GUARD).results[0].result) == "ABORTED"  # (it ended after the stop began)
    assert_no_new_threads(before)


@pytest.mark.parametrize("where", ["body", "observer"])
def test_stop_from_inside_a_tool_body_or_observer_starts_the_stop_and_returns_at_once(where: str) -> None:
    before = live_threads()
    rt = ToolRuntime().start()
    seen: list[tuple[bool, bool]] = []

    def stop_here() -> None:
        rt.stop(timeout=5.0)  # it cannot wait for its own thread: it must not wait out the timeout
        seen.append((rt.stop_signal.aborted, rt.halted))

    def body(args: Any, ctx: Any) -> str:
        if where == "body":
            stop_here()
        return "done"

    if where == "observer":
        rt.events.on("tools/result", lambda execution, result: stop_here())
    rt.tools.register(make_tool("t", body))
    batch = rt.tools.submit(ToolBatchInput(calls=calls("t"))).result(GUARD)
    assert seen == [(True, False)]  # the stop began, and was not waited for on this thread
    assert len(batch.results) == 1
    rt.stop()  # from this thread: returns once the stop it started is done
    assert rt.halted
    assert_no_new_threads(before)


def test_a_stop_begun_in_a_tool_body_that_can_start_no_thread_is_finished_by_the_next_stop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # rt.stop() in a body cannot wait for its own thread: it finishes the
    # stop on a thread of its own, which cannot be started here (the
    # process is at its thread limit). The stop is begun (nothing new is
    # accepted); the next stop(), from the caller's thread, finishes it
    # rather than waiting for a thread that never ran.
    before = live_threads()
    rt = ToolRuntime().start()
    start = threading.Thread.start

    def no_stop_thread(self: threading.Thread) -> None:
        if self.name == "dsh-stop":
            raise RuntimeError("can't start new thread")
        start(self)

    def body(args: Any, ctx: Any) -> str:
        rt.stop(timeout=5.0)
        return "done"

    rt.tools.register(make_tool("t", body))
    monkeypatch.setattr(threading.Thread, "start", no_stop_thread)
    batch = rt.tools.submit(ToolBatchInput(calls=calls("t"))).result(GUARD)
    monkeypatch.undo()
    assert len(batch.results) == 1
    assert rt.stop_signal.aborted and not rt.halted
    _stop_in_thread(rt, 5.0)
    assert rt.halted
    assert_no_new_threads(before)


def _stop_in_thread(rt: ToolRuntime, timeout: float) -> threading.Thread:
    """``rt.stop(timeout)`` on a thread of its own; joined with the guard
    (a stop that waits out a constant longer than the guard fails here)."""
    stopper = threading.Thread(target=rt.stop, kwargs={"timeout": timeout}, name="test-stop")
    stopper.start()
    stopper.join(GUARD)
    assert not stopper.is_alive(), f"rt.stop(timeout={timeout}) did not return within {GUARD} s"
    return stopper


def test_stop_abandons_an_async_body_that_survives_its_cancellation_and_names_it(library_logs: None) -> None:
    from loguru import logger

    before = live_threads()
    rt = ToolRuntime().start()
    running, release = threading.Event(), threading.Event()
    cancelled: list[int] = []
    warnings: list[str] = []
    sink = logger.add(lambda m: warnings.append(str(m)), level="WARNING", format="{message}")

    async def resists(args: Any, ctx: Any) -> str:
        wake = asyncio.Event()
        running.set()
        while not release.is_set():
            try:
                await wake.wait()  # never set: only a cancellation ends this await
            except asyncio.CancelledError:
                cancelled.append(1)  # ... and the body goes on regardless
        return "late"

    try:
        rt.tools.register(make_tool("resists", resists))
        future = rt.tools.submit(ToolBatchInput(calls=calls("resists")))
        must(running, "the async body to run")
        _stop_in_thread(rt, 0.3)
        with pytest.raises(ToolBatchExecutionError, match='c0 \\(tool "resists"\\)'):
            future.result(0)  # answered by the time stop() returned
        assert cancelled, "the body's task was never cancelled"
        assert rt.halted
        assert any("resists" in name for name in rt.abandoned), rt.abandoned
        assert any("abandoned" in w and "resists" in w for w in warnings), warnings
    finally:
        logger.remove(sink)
        release.set()
    assert_no_new_threads(before)  # the loop thread ended without the body


def _execute_in_thread(rt: ToolRuntime, batch: ToolBatchInput) -> tuple[threading.Thread, list[Any], threading.Event]:
    """``rt.tools.execute(batch)`` on a thread of its own: the thread, where
    its result or exception goes, and the event set once it has one."""
    outcome: list[Any] = []
    answered = threading.Event()

    def execute() -> None:
        try:
            outcome.append(rt.tools.execute(batch))
        except BaseException as exc:  # noqa: BLE001 - inspected by the test
            outcome.append(exc)
        answered.set()

    caller = threading.Thread(target=execute, name="test-caller")
    caller.start()
    return caller, outcome, answered


@pytest.mark.parametrize("how", ["submit", "execute"])
def test_stop_fails_the_reply_of_a_lone_body_that_ignores_its_signal_without_waiting_for_it(how: str) -> None:
    before = live_threads()
    rt = ToolRuntime().start()
    running, release = threading.Event(), threading.Event()

    def stubborn(args: Any, ctx: Any) -> str:
        running.set()
        release.wait(GUARD)  # ignores its signal; runs inline on the batch's executor
        return "late"

    answered = threading.Event()
    try:
        rt.tools.register(make_tool("stubborn", stubborn))
        if how == "submit":
            future = rt.tools.submit(ToolBatchInput(calls=calls("stubborn")))
            future.add_done_callback(lambda _: answered.set())
        else:
            caller, outcome, answered = _execute_in_thread(rt, ToolBatchInput(calls=calls("stubborn")))
        must(running, "the lone body to run")
        _stop_in_thread(rt, 0.3)
        # The caller has its answer (a future: by the time stop() returned),
        # while the body still runs.
        if how == "submit":
            assert answered.is_set(), "the batch's caller was not answered by stop()"
        else:
            must(answered, "the caller blocked in execute() to be answered")
        error = future.exception(0) if how == "submit" else outcome[0]
        assert isinstance(error, ToolBatchExecutionError), error
        assert 'c0 (tool "stubborn")' in str(error)
        assert any(name.startswith("dsh-ExecutorActor") for name in rt.abandoned), rt.abandoned
    finally:
        release.set()
    if how == "execute":
        caller.join(GUARD)
    assert_no_new_threads(before)  # the executor's thread ends once the body returns


def test_stop_leaves_only_the_thread_stuck_in_a_body_not_a_call_actor_idle_beside_it() -> None:
    # [s0, s1, x2] at cap 2: s0 and s1 run on two call actors at once; the
    # exclusive x2 then runs inline on the one that took the batch's step,
    # and ignores its signal. The other call actor waits idle on the batch's
    # work mailbox: the stop used to leave it behind too, named in
    # rt.abandoned, running no body, until x2 returned.
    before = live_threads()
    rt = ToolRuntime().start()
    both = threading.Barrier(2, timeout=GUARD)
    running, release = threading.Event(), threading.Event()
    stuck: list[threading.Thread] = []

    def s(args: Any, ctx: Any) -> str:
        both.wait()  # s0 and s1 at once: two call actors serve the batch
        return "s"

    def x(args: Any, ctx: Any) -> str:
        stuck.append(threading.current_thread())
        running.set()
        release.wait(GUARD)  # ignores its signal
        return "x"

    try:
        rt.tools.register(make_tool("s", s))
        rt.tools.register(make_tool("x", x, classifier=None))
        future = rt.tools.submit(ToolBatchInput(calls=calls("s", "s", "x"), max_parallel_tool_calls=2))
        must(running, "x2 to run inline")
        _stop_in_thread(rt, 0.1)
        assert isinstance(future.exception(0), ToolBatchExecutionError)
        assert rt.abandoned == (stuck[0].name,), rt.abandoned
        left = [t.name for t in live_threads() - before if t is not stuck[0]]
        assert not left, f"threads left behind that run no body: {left}"
    finally:
        release.set()
    assert_no_new_threads(before)


def test_stop_leaves_a_loop_thread_blocked_by_an_async_body_behind_and_names_it() -> None:
    before = live_threads()
    rt = ToolRuntime().start()
    running, release = threading.Event(), threading.Event()

    async def blocks_its_loop(args: Any, ctx: Any) -> str:
        running.set()
        release.wait(GUARD)  # a blocking call in an async body: the loop's thread is stuck here
        return "late"

    try:
        rt.tools.register(make_tool("blocks", blocks_its_loop))
        future = rt.tools.submit(ToolBatchInput(calls=calls("blocks")))
        must(running, "the async body to run")
        _stop_in_thread(rt, 0.3)
        with pytest.raises(ToolBatchExecutionError, match='c0 \\(tool "blocks"\\)'):
            future.result(0)
        assert "dsh-asyncio" in rt.abandoned, rt.abandoned
    finally:
        release.set()
    assert_no_new_threads(before)  # the loop's thread ends once the body lets it go


def test_stop_names_the_work_a_cancelled_async_body_left_in_its_loops_default_executor(monkeypatch: Any) -> None:
    # The body's task is cancelled and ends at once; what it handed to
    # asyncio.to_thread goes on, on a thread of the runtime's loop's default
    # executor: the stop joins that thread until its timeout, then leaves it,
    # named (it ran on, unnamed, and held up the interpreter's exit).
    monkeypatch.setattr(ToolRuntime, "STOP_GRACE", 0.1)
    before = live_threads()
    rt = ToolRuntime().start()
    working, release = threading.Event(), threading.Event()

    def work() -> str:
        working.set()
        release.wait(GUARD)  # ignores the cancellation of the task that awaits it
        return "late"

    async def offloads(args: Any, ctx: Any) -> str:
        return await asyncio.to_thread(work)

    try:
        rt.tools.register(make_tool("offloads", offloads))
        future = rt.tools.submit(ToolBatchInput(calls=calls("offloads")))
        must(working, "the offloaded work to run")
        _stop_in_thread(rt, 0.1)
        assert [r.result.error.info.code for r in future.result(0).results] == ["ABORTED"]
        assert [name for name in rt.abandoned if name.startswith("dsh-asyncio-executor")] == [
            "dsh-asyncio-executor_0"
        ], rt.abandoned
    finally:
        release.set()
    assert_no_new_threads(before)


# --------------------------------------------------------------------------
# rt.stop() reaches the hooks of a call, not only its body: a pre-execute
# listener (sync or async), the approval service and a tools/execute
# wrapper that wait on the call's signal, as the reference asks them to,
# are woken by the stop, and the batch answers with its results at once.
# --------------------------------------------------------------------------


def _hooked(rt: ToolRuntime, kind: str, entered: threading.Event, woke: list[bool]) -> None:
    from dsh_actors import Ask

    if kind == "sync listener":

        def listener(execution: Any, next_: Any) -> Any:
            entered.set()
            woke.append(execution.signal.wait(GUARD))
            return next_()

        rt.events.on("tools/pre-execute", listener)
    elif kind == "async listener":

        async def alistener(execution: Any, next_: Any) -> Any:
            entered.set()
            try:
                await asyncio.sleep(GUARD)
            except asyncio.CancelledError:
                woke.append(True)
                raise
            woke.append(False)
            return await next_()

        rt.events.on("tools/pre-execute", alistener)
    elif kind == "approval service":
        rt.events.on("tools/pre-execute", lambda execution, next_: Ask("may I?"))

        def service(request: Any) -> str:
            entered.set()
            woke.append(request.signal.wait(GUARD))
            return "allowed-once"

        rt.approvals.set(service)
    else:

        def wrapper(execution: Any, next_: Any) -> Any:
            # Every call's: the two calls may both be out on call actors
            # before the stop (a wrapper that waited only once let the
            # other's body run).
            entered.set()
            woke.append(execution.signal.wait(GUARD))
            return next_()

        rt.events.on("tools/execute", wrapper)


@pytest.mark.parametrize("kind", ["sync listener", "async listener", "approval service", "tools/execute wrapper"])
@pytest.mark.parametrize("with_signal", [False, True], ids=["no batch signal", "batch signal"])
def test_stop_wakes_a_hook_waiting_on_the_calls_signal(kind: str, with_signal: bool) -> None:
    from dsh_actors import AbortController, Agent

    before = live_threads()
    rt = ToolRuntime().start()
    entered = threading.Event()
    woke: list[bool] = []
    ran: list[str] = []
    rt.tools.register(make_tool("t", lambda args, ctx: ran.append("body") or "ok"))
    _hooked(rt, kind, entered, woke)
    controller = AbortController()
    future = rt.tools.submit(
        ToolBatchInput(calls=calls("t", "t"), agent=Agent("a"), signal=controller.signal if with_signal else None)
    )
    must(entered, "the hook to wait on the call's signal")
    rt.stop(timeout=GUARD)
    batch = future.result(GUARD)  # its results, not the stop's error
    assert woke in ([True], [True, True])  # (the wrapper: once for each call out before the stop)
    assert woke == [True] or kind == "tools/execute wrapper"
    assert [code_of(r.result) for r in batch.results] == ["ABORTED_BEFORE_DISPATCH"] * 2
    assert ran == []
    assert rt.abandoned == ()
    assert not controller.signal.aborted
    assert_no_new_threads(before)


def test_a_batch_that_cannot_be_set_up_fails_with_its_error_instead_of_leaving_its_caller_waiting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dsh_actors.scheduling import batch as batch_module

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("a bug in BatchRun")

    with ToolRuntime() as rt:
        rt.tools.register(make_tool("t", lambda args, ctx: "ok"))
        rt.tools.execute(ToolBatchInput(calls=calls("t")))  # an executor actor is up
        monkeypatch.setattr(batch_module.BatchRun, "__init__", broken)
        with pytest.raises(ToolBatchExecutionError, match="could not be set up") as raised:
            rt.tools.submit(ToolBatchInput(calls=calls("t"))).result(GUARD)
        assert isinstance(raised.value.__cause__, RuntimeError)
        monkeypatch.undo()
        # The step slot went on: the next batch runs.
        assert [code_of(r.result) for r in rt.tools.execute(ToolBatchInput(calls=calls("t"))).results] == [None]


@pytest.mark.parametrize("entry", ["execute", "submit", "execute_async"])
def test_a_batch_whose_start_loses_the_race_with_the_stop_fails_with_runtime_stopped(
    entry: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The stop wins the race with a batch's start: the executor actor the
    # batch was sent to took RETIRE after the sender saw it alive, and the
    # RunBatch lands in a mailbox nobody reads. It is refused: the caller
    # gets RuntimeStoppedError, not a wait that never ends (execute_async
    # and submit have no other way out).
    from dsh_actors import RuntimeStoppedError
    from dsh_actors.actors import RETIRE, Address
    from dsh_actors.scheduling.messages import RunBatch

    tell = Address.tell

    def late_tell(self: Address, message: Any) -> None:
        if type(message) is RunBatch:
            retired = threading.Event()
            original = self.actor.refuse_queued

            def refuse_queued() -> None:
                original()
                retired.set()

            self.actor.refuse_queued = refuse_queued  # type: ignore[method-assign]
            self.mailbox.put(RETIRE)  # the stop's, just after the sender's check
            must(retired, "the executor actor to retire")
        tell(self, message)

    before = live_threads()
    with ToolRuntime() as rt:
        rt.tools.register(make_tool("t", lambda args, ctx: "ok"))
        monkeypatch.setattr(Address, "tell", late_tell)
        with pytest.raises(RuntimeStoppedError, match="stopped before the batch started"):
            if entry == "execute":
                rt.tools.execute(ToolBatchInput(calls=calls("t")))
            elif entry == "submit":
                rt.tools.submit(ToolBatchInput(calls=calls("t"))).result(GUARD)
            else:
                asyncio.run(asyncio.wait_for(rt.tools.execute_async(ToolBatchInput(calls=calls("t"))), GUARD))
        monkeypatch.setattr(Address, "tell", tell)
        assert rt.tools.execute(ToolBatchInput(calls=calls("t"))).results[0].result.value == "ok"  # its slot came back
    assert_no_new_threads(before)


@pytest.mark.parametrize("entry", ["submit", "execute"])
def test_a_batch_queued_for_a_step_slot_behind_a_stuck_one_is_answered_by_stop(
    entry: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The only step slot is held by a batch whose listener ignores its
    # signal; a second batch waits for that slot. stop() answers the stuck
    # batch, and the queued one too: nothing will ever run it.
    from dsh_actors import RuntimeStoppedError
    from dsh_actors.scheduling.dispatcher import Dispatcher

    monkeypatch.setattr(Dispatcher, "STEPPING_MAX", 1)
    before = live_threads()
    rt = ToolRuntime().start()
    holding, release = threading.Event(), threading.Event()
    answered = threading.Event()
    try:
        rt.tools.register(make_tool("hold", lambda args, ctx: "held"))
        rt.tools.register(make_tool("t", lambda args, ctx: "ok"))

        def listener(execution: Any, next_: Any) -> Any:
            if execution.name == "hold":
                holding.set()
                release.wait(GUARD)  # ignores its signal, holding the step slot
            return next_()

        rt.events.on("tools/pre-execute", listener)
        holder = rt.tools.submit(ToolBatchInput(calls=calls("hold")))
        must(holding, "the only step slot is held")
        if entry == "submit":
            queued = rt.tools.submit(ToolBatchInput(calls=calls("t")))
            queued.add_done_callback(lambda _: answered.set())
        else:
            caller, outcome, answered = _execute_in_thread(rt, ToolBatchInput(calls=calls("t")))
        _stop_in_thread(rt, 0.2)
        assert isinstance(holder.exception(0), ToolBatchExecutionError)
        must(answered, "the queued batch's caller to be answered by stop()")
        error = queued.exception(0) if entry == "submit" else outcome[0]
        assert isinstance(error, RuntimeStoppedError), error
        assert "before the batch started" in str(error)
    finally:
        release.set()
    if entry == "execute":
        caller.join(GUARD)
    assert_no_new_threads(before)


def test_a_batch_queued_for_a_step_slot_behind_one_that_drains_runs_in_the_stop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The only step slot is held by batch X, whose listener honours its
    # signal; R waits for the slot. X's executor actor is still in X's
    # done-callback when the stop closes the dispatcher: R is still queued
    # then, and runs once that actor takes it, its calls answered
    # ABORTED_BEFORE_DISPATCH like any batch the stop drains.
    from dsh_actors.scheduling.dispatcher import Dispatcher

    monkeypatch.setattr(Dispatcher, "STEPPING_MAX", 1)
    closed = threading.Event()
    close = Dispatcher.close

    def closing(self: Dispatcher) -> None:
        close(self)
        closed.set()

    monkeypatch.setattr(Dispatcher, "close", closing)
    before = live_threads()
    rt = ToolRuntime().start()
    holding = threading.Event()
    rt.tools.register(make_tool("hold", lambda args, ctx: "held"))
    rt.tools.register(make_tool("t", lambda args, ctx: "ok"))

    def listener(execution: Any, next_: Any) -> Any:
        if execution.name == "hold":
            holding.set()
            execution.signal.wait(GUARD)  # until the stop
        return next_()

    rt.events.on("tools/pre-execute", listener)
    holder = rt.tools.submit(ToolBatchInput(calls=calls("hold")))
    holder.add_done_callback(lambda _: closed.wait(GUARD))  # (on X's executor actor, holding the slot)
    must(holding, "the only step slot is held")
    queued = rt.tools.submit(ToolBatchInput(calls=calls("t", "t")))
    _stop_in_thread(rt, 5.0)
    assert closed.is_set()
    assert [code_of(r.result) for r in holder.result(0).results] == ["ABORTED_BEFORE_DISPATCH"]
    assert [code_of(r.result) for r in queued.result(GUARD).results] == ["ABORTED_BEFORE_DISPATCH"] * 2
    assert rt.abandoned == ()
    assert_no_new_threads(before)
