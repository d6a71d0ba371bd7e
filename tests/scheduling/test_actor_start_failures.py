"""When an actor cannot be started (no thread can be: the process is at its
limit) while the runtime runs, the work it was for is answered with that
cause, never left waiting for nobody, and the runtime goes on once threads
can be started again. (A stopping runtime's refusals are in
test_executor_stop.py.)"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from dsh_actors import Session, ToolBatchExecutionError, ToolBatchInput
from dsh_actors.actors import ActorGroup
from dsh_actors.errors import ErrorCode

from .helpers import GUARD, calls, code_of, events_of, logged_batch, make_tool, must, started_runtime


@contextmanager
def no_thread_for(kind: type, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """While the block runs, an actor of ``kind`` cannot be started: its
    constructor fails as ``Thread.start`` does when no thread can be made."""
    enlist = ActorGroup.enlist

    def failing(self: ActorGroup, actor: Any) -> None:
        if isinstance(actor, kind):
            raise RuntimeError("can't start new thread")
        enlist(self, actor)

    monkeypatch.setattr(ActorGroup, "enlist", failing)
    try:
        yield
    finally:
        monkeypatch.setattr(ActorGroup, "enlist", enlist)


def test_calls_no_call_actor_can_be_started_for_fail_executor_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    from dsh_actors.scheduling.executor import CallActor

    with started_runtime() as rt:
        ran: list[int] = []
        rt.tools.register(make_tool("t", lambda args, ctx: ran.append(args["i"]) or "ok"))
        session = Session()
        with no_thread_for(CallActor, monkeypatch):
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


def test_a_batch_no_executor_actor_can_be_started_for_fails_with_that_cause(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dsh_actors.scheduling.executor import ExecutorActor

    with started_runtime() as rt:
        rt.tools.register(make_tool("t", lambda args, ctx: "ok"))
        with no_thread_for(ExecutorActor, monkeypatch):
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


def test_a_queued_step_that_cannot_start_fails_its_own_batch_not_the_thread_that_freed_the_slot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The only step slot is held by batch A's listener; batch B waits for it.
    # The listener then waits for something else (rt.waiting(): its slot is
    # lent), and B's executor actor cannot be started. B fails with that
    # cause; A's listener, whose lend made the send, is not the one told.
    from dsh_actors.scheduling.dispatcher import Dispatcher
    from dsh_actors.scheduling.executor import ExecutorActor

    monkeypatch.setattr(Dispatcher, "STEPPING_MAX", 1)
    with started_runtime() as rt:
        holding, go = threading.Event(), threading.Event()
        lent: list[BaseException | None] = []
        rt.tools.register(make_tool("hold", lambda args, ctx: "held"))
        rt.tools.register(make_tool("t", lambda args, ctx: "ok"))

        def listener(execution: Any, next_: Any) -> Any:
            if execution.name == "hold":
                holding.set()
                go.wait(GUARD)
                try:
                    with rt.waiting():  # lends the step slot: B is sent now
                        pass
                    lent.append(None)
                except BaseException as exc:  # noqa: BLE001 - inspected below
                    lent.append(exc)
            return next_()

        rt.events.on("tools/pre-execute", listener)
        holder = rt.tools.submit(ToolBatchInput(calls=calls("hold")))
        must(holding, "the only step slot is held")
        queued = rt.tools.submit(ToolBatchInput(calls=calls("t")))
        with no_thread_for(ExecutorActor, monkeypatch):
            go.set()
            assert [code_of(r.result) for r in holder.result(GUARD).results] == [None]
            error = queued.exception(GUARD)
        assert lent == [None]
        assert isinstance(error, ToolBatchExecutionError) and "no executor actor could be started" in str(error)
        rt.dispatcher.assert_invariants()
        assert rt.tools.execute(ToolBatchInput(calls=calls("t"))).results[0].result.value == "ok"
