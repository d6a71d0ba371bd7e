"""When an actor's thread cannot be started (the process is at its thread
limit) while the runtime runs, the work it was for is never left waiting
for nobody, never answered before its calls settle, and the runtime goes on
once threads can be started again; its stop waits for no actor that never
ran. (A stopping runtime's refusals are in test_executor_stop.py.)"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from dsh_actors import AbortController, Session, ToolBatchExecutionError, ToolBatchInput, ToolRuntime
from dsh_actors.errors import ErrorCode

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


@contextmanager
def no_thread_for(kind: type, failed: threading.Event | None = None) -> Iterator[None]:
    """While the block runs, the thread of a new actor of ``kind`` cannot be
    started: ``Thread.start`` raises as it does at the process's thread
    limit, once pykka has made and registered the actor (``failed`` is set
    each time)."""

    def failing(self: Any) -> None:
        if failed is not None:
            failed.set()
        raise RuntimeError("can't start new thread")

    setattr(kind, "_start_actor_loop", failing)  # noqa: B010 - pykka's thread start, for this class only
    try:
        yield
    finally:
        delattr(kind, "_start_actor_loop")


@contextmanager
def runtime(**kwargs: Any) -> Iterator[ToolRuntime]:
    """A started runtime whose stop (with a long timeout) must not wait for
    anything: an actor whose thread never started is no member of it."""
    before = live_threads()
    rt = ToolRuntime(**kwargs).start()
    try:
        yield rt
    finally:
        stopper = threading.Thread(target=rt.stop, kwargs={"timeout": 60.0}, name="test-stop")
        stopper.start()
        stopper.join(GUARD)
        assert not stopper.is_alive(), "rt.stop() waited for something that never runs"
        assert rt.abandoned == ()
    assert_no_new_threads(before)


def test_calls_no_call_actor_can_be_started_for_fail_executor_unavailable() -> None:
    from dsh_actors.scheduling.executor import CallActor

    with runtime() as rt:
        ran: list[int] = []
        rt.tools.register(make_tool("t", lambda args, ctx: ran.append(args["i"]) or "ok"))
        session = Session()
        with no_thread_for(CallActor):
            batch = rt.tools.submit(logged_batch(calls("t", "t", "t", "t"), session)).result(GUARD)
        codes = [code_of(r.result) for r in batch.results]
        # The first call may run inline on the batch's own executor actor;
        # every other one needed a call actor and fails, its body never run.
        failed = [r.result for r in batch.results if code_of(r.result) is not None]
        assert failed and set(codes) <= {None, "EXECUTOR_UNAVAILABLE"}, codes
        assert len(ran) == len(batch.results) - len(failed)
        for result in failed:
            assert result.error.info.code == ErrorCode.EXECUTOR_UNAVAILABLE
            assert "no call actor could be started to run it (RuntimeError: can't start new thread)" in str(
                result.error.message
            )
        # Each call has its one tool/result; the failed ones never started.
        ids = [f"c{i}" for i in range(4)]
        assert [e["call_id"] for e in events_of(session, "tool/result")] == ids
        assert len(events_of(session, "tool/start")) == len(ran)
        rt.dispatcher.assert_invariants()
        # Threads can be started again: the runtime runs parallel calls as before.
        again = rt.tools.execute(ToolBatchInput(calls=calls("t", "t", "t", "t")))
        assert [code_of(r.result) for r in again.results] == [None] * 4
        rt.dispatcher.assert_invariants()


def test_a_batch_no_executor_actor_can_be_started_for_fails_with_that_cause() -> None:
    from dsh_actors.scheduling.executor import ExecutorActor

    with runtime() as rt:
        rt.tools.register(make_tool("t", lambda args, ctx: "ok"))
        with no_thread_for(ExecutorActor):
            future = rt.tools.submit(ToolBatchInput(calls=calls("t")))  # never raises: the future fails
            error = future.exception(GUARD)
            assert isinstance(error, ToolBatchExecutionError), error
            assert "no executor actor could be started to run the batch (RuntimeError: can't start new thread)" in str(
                error
            )
            assert isinstance(error.__cause__, RuntimeError)
            with pytest.raises(ToolBatchExecutionError, match="no executor actor could be started"):
                rt.tools.execute(ToolBatchInput(calls=calls("t")))
        rt.dispatcher.assert_invariants()
        # Its step slot came back: the next batch runs.
        assert rt.tools.execute(ToolBatchInput(calls=calls("t"))).results[0].result.value == "ok"


def test_a_queued_step_that_cannot_start_fails_its_own_batch_and_the_slot_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The only step slot is held by batch X's listener; A and B wait for it.
    # The listener then lends it (rt.waiting()) and waits for B to run, and
    # A's executor actor cannot be started (one failure). A fails with that
    # cause; the listener, whose lend made the send, is not the one told
    # (not even by A's done-callback raising SystemExit); and the slot A
    # gave back goes on to B at once.
    from dsh_actors.scheduling.dispatcher import Dispatcher
    from dsh_actors.scheduling.executor import ExecutorActor

    monkeypatch.setattr(Dispatcher, "STEPPING_MAX", 1)
    with runtime() as rt:
        holding, go, b_ran = threading.Event(), threading.Event(), threading.Event()
        lent: list[BaseException | bool] = []
        rt.tools.register(make_tool("hold", lambda args, ctx: "held"))
        rt.tools.register(make_tool("t", lambda args, ctx: "ok"))
        rt.tools.register(make_tool("b", lambda args, ctx: b_ran.set() or "b"))
        failures = 0
        start_loop = ExecutorActor._start_actor_loop

        def once(self: Any) -> None:
            nonlocal failures
            if failures == 0:
                failures += 1
                raise RuntimeError("can't start new thread")
            start_loop(self)

        def listener(execution: Any, next_: Any) -> Any:
            if execution.name == "hold":
                holding.set()
                go.wait(GUARD)
                try:
                    with rt.waiting():  # lends the only step slot: A, then B, are sent now
                        lent.append(b_ran.wait(GUARD))
                except BaseException as exc:  # noqa: BLE001 - inspected below
                    lent.append(exc)
            return next_()

        rt.events.on("tools/pre-execute", listener)
        holder = rt.tools.submit(ToolBatchInput(calls=calls("hold")))
        must(holding, "the only step slot is held")
        a = rt.tools.submit(ToolBatchInput(calls=calls("t")))
        # (concurrent.futures lets a callback's SystemExit escape: it stops
        # neither the lend that answers A nor the send of B behind it.)
        a.add_done_callback(lambda _: (_ for _ in ()).throw(SystemExit("a done-callback exits")))
        b = rt.tools.submit(ToolBatchInput(calls=calls("b")))
        monkeypatch.setattr(ExecutorActor, "_start_actor_loop", once)
        go.set()
        assert [code_of(r.result) for r in holder.result(GUARD).results] == [None]
        assert lent == [True], lent
        error = a.exception(GUARD)
        assert isinstance(error, ToolBatchExecutionError) and "no executor actor could be started" in str(error)
        assert b.result(GUARD).results[0].result.value == "b"
        rt.dispatcher.assert_invariants()


def steps_retire(monkeypatch: pytest.MonkeyPatch) -> threading.Semaphore:
    """Executor actors are kept idle by nobody (each retires once its work
    ends), and the semaphore returned is released each time one has ended
    its work: a batch that has paused then has no thread at all."""
    from dsh_actors.scheduling import dispatcher

    monkeypatch.setattr(dispatcher, "IDLE_STEPPERS_KEPT", 0)
    ended = threading.Semaphore(0)
    step_ended = dispatcher.Dispatcher.step_ended

    def ending(self: Any, address: Any) -> Any:
        work = step_ended(self, address)
        ended.release()
        return work

    monkeypatch.setattr(dispatcher.Dispatcher, "step_ended", ending)
    return ended


def paused_batch_a(rt: ToolRuntime, ended: threading.Semaphore, wait: Any) -> tuple[Any, AbortController]:
    """Batch A: two ``slow`` calls whose bodies run on call actors and end
    when ``wait(ctx)`` returns, submitted with an abort controller; returned
    (its future and the controller) once both bodies run and A's executor
    actor has ended its step (``steps_retire``: A then has no thread). Also
    registers ``t``, a tool that answers "ok"."""
    running = threading.Semaphore(0)

    def slow(args: Any, ctx: Any) -> str:
        running.release()
        wait(ctx)
        return "late"

    rt.tools.register(make_tool("slow", slow))
    rt.tools.register(make_tool("t", lambda args, ctx: "ok"))
    controller = AbortController()
    a = rt.tools.submit(ToolBatchInput(calls=calls("slow", "slow"), signal=controller.signal))
    for _ in range(2):
        assert running.acquire(timeout=GUARD), "A's two bodies to run"
    assert ended.acquire(timeout=GUARD), "A's executor actor to end its step (and retire)"
    return a, controller


@pytest.mark.parametrize("then", ["threads come back", "an executor actor ends its work"])
def test_a_begun_batchs_step_waits_for_an_executor_actor_and_the_batch_finishes(
    then: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Batch A's two calls run on call actors; its executor actor has retired,
    # and the only one left is busy with batch H (its listener waits). A is
    # aborted: its step must run again, and no executor actor can be
    # started. A is not answered while its calls are out: its step waits,
    # and runs once an executor actor can be started again (the retry), or
    # once H's ends its work; then A commits and logs every call, as any
    # aborted batch. B, submitted meanwhile, waits too (it fails no sooner
    # than A's step runs).
    from dsh_actors.scheduling.dispatcher import Dispatcher
    from dsh_actors.scheduling.executor import ExecutorActor

    ended = steps_retire(monkeypatch)
    ticks = threading.Semaphore(0)
    retry = Dispatcher._retry_steps

    def ticking(self: Dispatcher) -> None:
        retry(self)
        ticks.release()

    monkeypatch.setattr(Dispatcher, "_retry_steps", ticking)
    with runtime() as rt:
        running = threading.Semaphore(0)
        holding, release_h, release_a, failed = (threading.Event() for _ in range(4))

        def stubborn(args: Any, ctx: Any) -> str:
            running.release()
            release_a.wait(GUARD)  # ends when the test says, abort or not
            return "late"

        rt.tools.register(make_tool("slow", stubborn))
        rt.tools.register(make_tool("hold", lambda args, ctx: "held"))
        rt.tools.register(make_tool("t", lambda args, ctx: "ok"))

        def listener(execution: Any, next_: Any) -> Any:
            if execution.name == "hold":
                holding.set()
                release_h.wait(GUARD)
            return next_()

        rt.events.on("tools/pre-execute", listener)
        session = Session()
        controller = AbortController()
        a = rt.tools.submit(logged_batch(calls("slow", "slow"), session, signal=controller.signal))
        for _ in range(2):
            assert running.acquire(timeout=GUARD), "A's two bodies to run"
        assert ended.acquire(timeout=GUARD), "A's executor actor to end its step (and retire)"
        holder = rt.tools.submit(ToolBatchInput(calls=calls("hold")))
        must(holding, "H holds the only executor actor")
        with no_thread_for(ExecutorActor, failed):
            controller.abort("the user stopped")  # A's Wake: its step must run
            must(failed, "A's step to find no executor actor")
            b = rt.tools.submit(ToolBatchInput(calls=calls("t")))
            release_a.set()  # its bodies end: the batch still holds its calls out
            for _ in range(2):  # two retries since B came, both finding no thread
                assert ticks.acquire(timeout=GUARD), "the retry timer to run"
            assert not a.done(), "a batch was answered while its calls were out"
            assert not b.done(), "a batch queued behind a starved step was answered by the retry"
            if then == "an executor actor ends its work":
                release_h.set()
                result = a.result(GUARD)
                assert b.result(GUARD).results[0].result.value == "ok"  # (taken next by that actor)
                # The spell is over (nothing begun waits); threads still cannot
                # be started: a batch submitted now fails at once, as ever.
                with pytest.raises(ToolBatchExecutionError, match="no executor actor could be started"):
                    rt.tools.execute(ToolBatchInput(calls=calls("t")))
        if then == "threads come back":
            result = a.result(GUARD)  # (the retry starts an executor actor)
            release_h.set()
        # Both bodies settled after the abort: ABORTED, committed and logged.
        assert [code_of(r.result) for r in result.results] == ["ABORTED", "ABORTED"]
        assert [e["call_id"] for e in events_of(session, "tool/result")] == ["c0", "c1"]
        assert [code_of(r.result) for r in holder.result(GUARD).results] == [None]
        assert b.result(GUARD).results[0].result.value == "ok"
        rt.dispatcher.assert_invariants()


def test_a_batch_submitted_while_the_retry_tries_a_thread_waits_behind_the_begun_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Batch A is begun (its two calls out on call actors) and its step finds
    # no executor actor: the spell of starvation begins, and the retry timer
    # tries again. B is submitted while the retry is still trying to start a
    # thread: B waits behind A's step as it would before or after that
    # moment; it is not failed at once on the grounds that nothing begun is
    # queued (A's step is the one being tried).
    from dsh_actors.scheduling.dispatcher import Dispatcher
    from dsh_actors.scheduling.executor import ExecutorActor

    ended = steps_retire(monkeypatch)
    in_retry = threading.local()
    trying, go = threading.Event(), threading.Event()
    retry = Dispatcher._retry_steps

    def marked(self: Dispatcher) -> None:
        in_retry.on = True
        try:
            retry(self)
        finally:
            in_retry.on = False

    monkeypatch.setattr(Dispatcher, "_retry_steps", marked)

    def failing(self: Any) -> None:
        if getattr(in_retry, "on", False) and not go.is_set():
            trying.set()  # the retry is mid-send: hold it there
            assert go.wait(GUARD)
        raise RuntimeError("can't start new thread")

    with runtime() as rt:
        release_a = threading.Event()
        a, controller = paused_batch_a(rt, ended, lambda ctx: release_a.wait(GUARD))  # (ends when the test says)
        setattr(ExecutorActor, "_start_actor_loop", failing)  # noqa: B010 - see no_thread_for
        try:
            controller.abort("the user stopped")  # A's Wake: its step must run, and finds no thread
            must(trying, "the retry to try a thread for A's step")
            b = rt.tools.submit(ToolBatchInput(calls=calls("t")))
            assert not b.done(), "a batch submitted while the retry tried a thread was answered at once"
            rt.dispatcher.assert_invariants()
            go.set()  # that try fails too: A's step goes back to the head, B stays behind it
            release_a.set()
            assert not a.done() and not b.done()
        finally:
            delattr(ExecutorActor, "_start_actor_loop")
        # Threads come back: the next retry runs A's step, then B.
        assert [code_of(r.result) for r in a.result(GUARD).results] == ["ABORTED", "ABORTED"]
        assert b.result(GUARD).results[0].result.value == "ok"
        rt.dispatcher.assert_invariants()


@pytest.mark.parametrize("stop", ["waits for the loop", "abandons the loop"])
def test_a_batch_the_retry_puts_back_during_the_stop_is_still_answered(
    stop: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A begun batch A waits for an executor actor (none can be started), B
    # is queued behind it. The retry timer starts one for A, then tries one
    # for B, which fails; just then rt.stop() gets past its refusal of the
    # queued steps, and only then does the retry come to put B back at the
    # head of the queue. B must still be answered (the retry refuses it:
    # no thread will run a step any more), not left waiting for ever; also
    # when the loop's thread, where the retry runs, is held past the stop's
    # deadline (the stop abandons it, and the retry comes back only after).
    from pykka import ThreadingActor

    from dsh_actors.errors import RuntimeStoppedError
    from dsh_actors.scheduling.dispatcher import Dispatcher
    from dsh_actors.scheduling.executor import ExecutorActor

    ended = steps_retire(monkeypatch)
    starts: list[str] = []  # what each new executor actor's thread start does, in turn

    def scripted(self: Any) -> None:
        if starts and starts.pop(0) == "fail":
            raise RuntimeError("can't start new thread")
        ThreadingActor._start_actor_loop(self)

    b_queued, in_window, refused, a_failed, stopped = (threading.Event() for _ in range(5))
    abandon = stop == "abandons the loop"
    if abandon:
        monkeypatch.setattr(ToolRuntime, "STOP_GRACE", 0.3)
    undelivered, retry, refuse_queued = Dispatcher._undelivered, Dispatcher._retry_steps, Dispatcher.refuse_queued
    b_tries = []

    def holding(self: Dispatcher, message: Any, exc: BaseException, retrying: bool) -> Any:
        if type(message).__name__ == "RunBatch" and retrying:
            b_tries.append(message)
            if len(b_tries) == 2:  # the retry's second try for B: the stop refuses the queue first
                in_window.set()
                assert (stopped if abandon else refused).wait(GUARD)
        out = undelivered(self, message, exc, retrying)
        if type(message).__name__ != "RunBatch":
            a_failed.set()
        return out

    first_retry = []

    def gated(self: Dispatcher) -> None:
        if not first_retry:
            first_retry.append(True)
            assert b_queued.wait(GUARD)
        retry(self)

    def refusing(self: Dispatcher) -> None:
        refuse_queued(self)
        refused.set()

    monkeypatch.setattr(Dispatcher, "_undelivered", holding)
    monkeypatch.setattr(Dispatcher, "_retry_steps", gated)
    monkeypatch.setattr(Dispatcher, "refuse_queued", refusing)
    steps_end = threading.Event()  # (cleared: the executor actor the retry starts for A keeps its slot)
    steps_end.set()
    step_ended = Dispatcher.step_ended

    def held(self: Dispatcher, address: Any) -> Any:
        assert steps_end.wait(GUARD)
        return step_ended(self, address)

    monkeypatch.setattr(Dispatcher, "step_ended", held)
    before = live_threads()
    rt = ToolRuntime().start()
    try:
        a, controller = paused_batch_a(rt, ended, lambda ctx: ctx.signal.wait(GUARD))  # (ends at the abort)
        starts[:] = ["fail", "ok", "fail", "fail"]  # A's step; the retry: A's, then B's twice
        monkeypatch.setattr(ExecutorActor, "_start_actor_loop", scripted)
        steps_end.clear()  # (or A's new executor actor, done with A, would take B)
        controller.abort("the user stopped")  # A's step must run, and finds no thread
        must(a_failed, "A's step to find no executor actor")
        b = rt.tools.submit(ToolBatchInput(calls=calls("t")))
        assert not b.done()  # (it waits behind A's step)
        b_queued.set()
        must(in_window, "the retry to try a thread for B a second time")
    finally:
        steps_end.set()
        rt.stop(timeout=0.2 if abandon else GUARD)
        stopped.set()
    assert rt.abandoned == (("dsh-asyncio",) if abandon else ())
    assert [code_of(r.result) for r in a.result(GUARD).results] == ["ABORTED", "ABORTED"]
    with pytest.raises(RuntimeStoppedError, match="the runtime stopped before the batch started"):
        b.result(GUARD)
    assert not rt.dispatcher.runnable
    assert_no_new_threads(before)


def test_a_batch_whose_step_no_thread_runs_in_the_stop_is_answered_and_its_call_actors_leave(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Batch A's bodies honour their signal; its executor actor has retired.
    # The stop wakes A, and no executor actor can be started for its step,
    # through the whole stop. Past its teardown the stop takes A's step out
    # of the queue and answers A, naming why; it runs none of A's code (so
    # nothing of A can hold it past its bound), and A's work mailbox closes,
    # so its two call actors leave rather than being left behind. A's calls
    # out stay without a result in the log, as after a crash (its
    # pending_calls, for recovery).
    from dsh_actors.scheduling.executor import ExecutorActor

    ended = steps_retire(monkeypatch)
    before = live_threads()
    rt = ToolRuntime().start()
    running = threading.Semaphore(0)
    failed = threading.Event()

    def polite(args: Any, ctx: Any) -> str:
        running.release()
        ctx.signal.wait(GUARD)
        return "late"

    rt.tools.register(make_tool("slow", polite))
    rt.tools.register(make_tool("x", lambda args, ctx: "x", classifier=None))
    session = Session()
    # (The exclusive third call keeps the two call actors on A's mailbox.)
    a = rt.tools.submit(logged_batch(calls("slow", "slow", "x"), session))
    for _ in range(2):
        assert running.acquire(timeout=GUARD), "A's two bodies to run"
    assert ended.acquire(timeout=GUARD), "A's executor actor to end its step (and retire)"
    stopped_again: list[str] = []

    def stop_again(_: Any) -> None:  # (answered on the thread of the stop's drain hook: a second stop returns)
        rt.stop()
        stopped_again.append(threading.current_thread().name)

    a.add_done_callback(stop_again)
    with no_thread_for(ExecutorActor, failed):
        stopper = threading.Thread(target=rt.stop, kwargs={"timeout": 0.2}, name="test-stop")
        stopper.start()
        stopper.join(GUARD)
        assert not stopper.is_alive()
    assert failed.is_set(), "A's step found an executor actor after all"
    assert rt.abandoned == (), "A's call actors were left waiting on its mailbox"
    error = a.exception(0)
    assert isinstance(error, ToolBatchExecutionError), error
    assert "waited for an executor actor to take its step" in str(error)
    assert sorted(session.pending_calls()) == ["c0", "c1"]
    assert [name.split(" ")[0] for name in stopped_again] == ["dsh-stop-hook"]
    assert_no_new_threads(before)
