"""Tool factories, recorders and small builders for the executor tests.

Nothing here sleeps. A :class:`Timeline` orders what happened with one
global, lock-protected sequence number (body starts and ends, pre-execute
entries, ``tools/result`` emissions, the abort), so "A happened before B" is
an exact comparison of integers, never a comparison of clocks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from dsh_actors import (
    Agent,
    LogStep,
    ToolBatchInput,
    ToolCall,
    ToolDefinition,
    ToolOutput,
    ToolRuntime,
    define_tool,
    text,
)
from dsh_actors.actors import actor_thread_ident
from dsh_actors.model import ToolExecutionResult
from dsh_actors.scheduling.executor import CallActor

GUARD = 10.0
"""Seconds: a deadlock guard for every wait. A correct run never reaches it."""

TEXT_OUTPUT = ToolOutput(schema={"type": "string"}, render=lambda args, value: [text(value)])

Body = Callable[[Any, Any], Any]

_SAFE = object()


def always_safe(args: Any) -> bool:
    return True


def make_tool(
    name: str,
    body: Body,
    *,
    classifier: Callable[[Any], Any] | None | object = _SAFE,
    output: ToolOutput = TEXT_OUTPUT,
    parameters: Mapping[str, Any] | None = None,
) -> ToolDefinition:
    """A ``define_tool`` tool returning a string. ``classifier`` defaults to
    "always concurrency-safe"; ``None`` makes every call exclusive."""
    return define_tool(
        name=name,
        description=f"test tool {name}",
        parameters={} if parameters is None else parameters,
        output=output,
        execute=body,
        is_concurrency_safe=always_safe if classifier is _SAFE else classifier,  # type: ignore[arg-type]
    )


def call(index: int, name: str, **arguments: Any) -> ToolCall:
    """``ToolCall(id="c<index>", name, '{"i": <index>, ...}')`` (JSON text)."""
    import orjson

    return ToolCall(id=f"c{index}", name=name, arguments=orjson.dumps({"i": index, **arguments}).decode())


def calls(*names: str) -> list[ToolCall]:
    """One call per name, ids ``c0, c1, ...`` in that order."""
    return [call(i, name) for i, name in enumerate(names)]


def logged_batch(the_calls: Sequence[ToolCall], session: Any, **kwargs: Any) -> ToolBatchInput:
    """A batch of ``Agent("a", session=session)`` logged at turn 1, step 1."""
    return ToolBatchInput(
        calls=tuple(the_calls), agent=Agent("a", session=session), log=LogStep(turn=1, step=1), **kwargs
    )


def code_of(result: ToolExecutionResult) -> str | None:
    """The failure code of ``result`` (``None`` for a success or no info)."""
    if not result.is_error:
        return None
    info = result.error.info  # type: ignore[union-attr]
    return None if info is None else str(info.code)


def events_of(session: Any, kind: str) -> list[dict[str, Any]]:
    return [e for e in session.events() if e["type"] == kind]


def must(event: threading.Event, what: str) -> None:
    """Wait for ``event`` (bounded) and fail the test clearly if it never fires."""
    assert event.wait(GUARD), f"timed out waiting for: {what}"


# --------------------------------------------------------------------------
# Threads and runtimes
# --------------------------------------------------------------------------


def live_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.is_alive()}


def assert_no_new_threads(before: set[threading.Thread]) -> None:
    leaked = [t for t in live_threads() - before if not t.name.startswith("pytest_timeout")]
    for thread in leaked:  # stop() joins; this only absorbs a thread's last instructions
        thread.join(5.0)
    names = [t.name for t in leaked if t.is_alive()]
    assert not names, f"threads left running after stop(): {names}"


@contextmanager
def started_runtime(**kwargs: Any) -> Iterator[ToolRuntime]:
    """A started runtime, stopped on exit, leaving no thread behind."""
    before = live_threads()
    rt = ToolRuntime(**kwargs).start()
    try:
        yield rt
    finally:
        rt.stop()
    assert_no_new_threads(before)


# --------------------------------------------------------------------------
# The timeline recorder
# --------------------------------------------------------------------------


@dataclass(repr=False)
class Timeline:
    """What ran when, in one global order (see the module docstring).

    Bodies call ``with timeline.body(ctx):``; :meth:`listen` records
    pre-execute entries and ``tools/result`` emissions of a runtime.
    """

    lock: threading.Lock = field(default_factory=threading.Lock)
    seq: int = 0
    running: int = 0
    max_running: int = 0
    body_count: int = 0
    starts: dict[str, int] = field(default_factory=dict)
    ends: dict[str, int] = field(default_factory=dict)
    end_aborted: dict[str, bool] = field(default_factory=dict)
    """Whether the body's ``ctx.signal`` was aborted when it ended."""
    body_threads: dict[str, int] = field(default_factory=dict)
    call_actor_threads: dict[str, int] = field(default_factory=dict)
    """As ``body_threads``, for the bodies a call actor ran (the others ran
    inline on an executor actor: the only call that could start)."""
    pre: dict[str, list[int]] = field(default_factory=dict)
    results: dict[str, list[tuple[int, ToolExecutionResult]]] = field(default_factory=dict)
    abort_seq: int | None = None
    _end_events: dict[str, threading.Event] = field(default_factory=dict)
    on_body_start: Callable[[int, Any], None] | None = None
    """Called under the lock with (how many bodies have started, ctx)."""

    def __repr__(self) -> str:
        return (
            f"<Timeline started={sorted(self.starts)} prepared={sorted(self.pre)} "
            f"max_running={self.max_running} abort_seq={self.abort_seq}>"
        )

    def _tick(self) -> int:
        self.seq += 1
        return self.seq

    @contextmanager
    def body(self, ctx: Any) -> Iterator[None]:
        call_id = ctx.call_id
        with self.lock:
            assert call_id not in self.starts, f"the body of {call_id} ran twice"
            self.starts[call_id] = self._tick()
            self.body_threads[call_id] = threading.get_ident()
            if type(actor_thread_ident()) is CallActor:
                self.call_actor_threads[call_id] = threading.get_ident()
            self.running += 1
            self.body_count += 1
            self.max_running = max(self.max_running, self.running)
            if self.on_body_start is not None:
                self.on_body_start(self.body_count, ctx)
        try:
            yield
        finally:
            with self.lock:
                self.running -= 1
                self.ends[call_id] = self._tick()
                self.end_aborted[call_id] = ctx.signal.aborted
                self._end_event(call_id).set()

    def _end_event(self, call_id: str) -> threading.Event:
        # Called with the lock held.
        event = self._end_events.get(call_id)
        if event is None:
            event = self._end_events[call_id] = threading.Event()
        return event

    def ended(self, call_id: str) -> threading.Event:
        """An Event set when the body of ``call_id`` ends."""
        with self.lock:
            return self._end_event(call_id)

    def abort(self, controller: Any) -> None:
        """Abort ``controller`` and stamp the moment (call with the lock held)."""
        controller.abort("test abort")
        self.abort_seq = self._tick()

    def listen(self, rt: ToolRuntime) -> Callable[[], None]:
        """Record every pre-execute entry and ``tools/result`` of ``rt``."""

        def pre_execute(execution: Any, next_: Callable[[], Any]) -> Any:
            with self.lock:
                self.pre.setdefault(execution.call_id, []).append(self._tick())
            return next_()

        def on_result(execution: Any, result: ToolExecutionResult) -> None:
            with self.lock:
                self.results.setdefault(execution.call_id, []).append((self._tick(), result))

        off_pre = rt.events.on("tools/pre-execute", pre_execute)
        off_result = rt.events.on("tools/result", on_result)

        def off() -> None:
            off_pre()
            off_result()

        return off

    # -- queries ------------------------------------------------------------

    def result_seq(self, call_id: str) -> int:
        ((seq, _),) = self.results[call_id]
        return seq

    def overlaps(self, a: str, b: str) -> bool:
        """Whether the bodies of ``a`` and ``b`` ran at the same time."""
        return self.starts[a] < self.ends[b] and self.starts[b] < self.ends[a]


def counting_body(timeline: Timeline, work: Callable[[Any, Any], Any] | None = None) -> Body:
    """A body that records itself on ``timeline`` around ``work`` (default:
    return ``"ok <call id>"``)."""

    def body(args: Any, ctx: Any) -> Any:
        with timeline.body(ctx):
            if work is not None:
                return work(args, ctx)
            return f"ok {ctx.call_id}"

    return body
