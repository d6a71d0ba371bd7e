"""The ready queue (prepare-ahead) path: it engages only when preparing is
unobservable (no pre-execute listener, no guard) and the cap is at least 2,
so these properties run batches with no pre-execute listener at all and
observe only bodies and ``tools/result``."""

from __future__ import annotations

import threading
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from dsh_actors import AbortController, Agent, LogStep, Session, ToolBatchInput, ToolCall

from .helpers import GUARD, make_tool, started_runtime


class Recorder:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.max_running = 0
        self.exclusive_running = False
        self.overlap = False
        self.started: list[str] = []
        self.results: dict[str, int] = {}

    def enter(self, call_id: str, exclusive: bool) -> None:
        with self.lock:
            if self.exclusive_running or (exclusive and self.running):
                self.overlap = True
            self.running += 1
            self.max_running = max(self.max_running, self.running)
            if exclusive:
                self.exclusive_running = True
            self.started.append(call_id)

    def leave(self, exclusive: bool) -> None:
        with self.lock:
            self.running -= 1
            if exclusive:
                self.exclusive_running = False

    def result(self, execution: Any, result: Any) -> None:
        with self.lock:
            self.results[execution.call_id] = self.results.get(execution.call_id, 0) + 1


@settings(max_examples=40, deadline=None)
@given(
    kinds=st.lists(st.sampled_from(["safe", "safe", "safe", "excl"]), min_size=1, max_size=30),
    cap=st.integers(min_value=2, max_value=6),
    abort_at=st.one_of(st.none(), st.integers(min_value=0, max_value=30)),
    work=st.lists(st.integers(min_value=0, max_value=3000), min_size=30, max_size=30),
)
def test_prepared_ahead_calls_keep_every_scheduling_invariant(
    kinds: list[str], cap: int, abort_at: int | None, work: list[int]
) -> None:
    recorder = Recorder()
    controller = AbortController()
    counter = iter(range(10_000))
    counter_lock = threading.Lock()

    def body_for(exclusive: bool) -> Any:
        def body(args: Any, ctx: Any) -> str:
            recorder.enter(ctx.call_id, exclusive)
            try:
                with counter_lock:
                    nth = next(counter)
                if abort_at is not None and nth == abort_at:
                    controller.abort("stop")
                total = 0
                for k in range(work[int(ctx.call_id[1:]) % len(work)]):
                    total += k
                return "ok"
            finally:
                recorder.leave(exclusive)

        return body

    with started_runtime() as rt:
        rt.tools.register(make_tool("safe", body_for(False)))
        rt.tools.register(make_tool("excl", body_for(True), classifier=None))
        rt.events.on("tools/result", recorder.result)
        session = Session()
        calls = tuple(ToolCall(f"c{i}", name, '{"i": %d}' % i) for i, name in enumerate(kinds))
        batch = rt.tools.submit(
            ToolBatchInput(
                calls=calls,
                signal=controller.signal,
                max_parallel_tool_calls=cap,
                agent=Agent("a", session=session),
                log=LogStep(turn=1, step=1),
            )
        ).result(GUARD)

    ids = [f"c{i}" for i in range(len(kinds))]
    assert [r.call_id for r in batch.results] == ids
    assert recorder.results == {cid: 1 for cid in ids}, "every call publishes exactly one tools/result"
    assert recorder.max_running <= cap
    assert not recorder.overlap, "an exclusive call overlapped another call"
    started = set(recorder.started)
    for item in batch.results:
        result = item.result
        if item.call_id not in started:
            assert result.is_error and result.error.info.code == "ABORTED_BEFORE_DISPATCH"
        elif controller.signal.aborted and result.is_error:
            assert result.error.info.code in ("ABORTED", "ABORTED_BEFORE_DISPATCH")
    if abort_at is None or abort_at >= len(kinds):
        assert all(not r.result.is_error for r in batch.results)
    events = session.events()
    call_ids = [e["call_id"] for e in events if e["type"] == "tool/call"]
    result_ids = [e["call_id"] for e in events if e["type"] == "tool/result"]
    assert call_ids == ids and result_ids == ids
    for cid in ids:
        first_call = next(i for i, e in enumerate(events) if e["call_id"] == cid and e["type"] == "tool/call")
        first_result = next(i for i, e in enumerate(events) if e["call_id"] == cid and e["type"] == "tool/result")
        assert first_call < first_result
