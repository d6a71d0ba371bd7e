"""A schedule you can look at: record each call's timeline and write it as
a Chrome trace-event file (opens in https://ui.perfetto.dev or
``chrome://tracing``).

Opt-in, and built only from ``rt.events`` listeners (each prepended, so it
is the outermost one and its clock brackets everything the others do)::

    import policies.trace as trace

    recorder = trace.Recorder()
    off = rt.use(trace, recorder=recorder)     # or rt.use(trace, path="t.json")
    rt.tools.execute(batch)
    off()                                      # with path=..., writes the file
    recorder.write("trace.json")

or ``with trace.record(rt, path="trace.json") as recorder: ...``.

Per call it records four things (µs, from one monotonic clock):

* **prepare**: the ``tools/pre-execute`` waterfall, from its entry to its
  decision (on the thread that prepares the call: the batch's executor);
* **wait**: from that decision to the dispatch start (guards, the hand-off
  to a call actor, a free pool slot), kept as ``wait_us`` on the dispatch;
* **dispatch**: the ``tools/execute`` waterfall (wrappers and body) on the
  call actor's thread, i.e. the pool slot that ran it;
* **finalize**: from the ``tools/post-execute`` entry to ``tools/result``
  (on the executor thread again, in model order); the time the call waited
  for earlier calls to commit is ``commit_wait_us``.

Lanes (``tid``) in the file: one per pool slot (a call actor's thread) with
the dispatch spans, and one per batch for its prepare and finalize spans
(on the thread taking the batch's step: its executor actor, or a call actor
that took the step). Spans never overlap within a lane (a batch takes one
step at a time); nested calls (``execution.parent`` set, e.g. PTC sub-calls or a
composite tool) are drawn on the thread that ran them, nested inside their
parent's dispatch. Flow arrows join each call's prepare, dispatch and
finalize. A call resolved before any phase (aborted before dispatch, bad
arguments) has only a zero-length finalize span.

A call whose approval was deferred (``tools/deferred``: its batch
suspends) ends its record there: outcome ``"deferred"``, its prepare span
and an instant event ``deferred <tool>`` on its batch's lane. The rest of
its trip, when the suspension is resumed (in this runtime or another one,
perhaps hours later), is a record of its own in the resumed batch: from
its dispatch on (the pre-execute waterfall and the approval are not run
again), or only its finalize when the decision denied it.

Which thread runs what: the listeners run where the pipeline runs them (see
``dsh_actors.events``); each takes one short lock to update the recorder.
The recorder only reads public names of ``dsh_actors``.
"""

from __future__ import annotations

import json
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from dsh_actors import Agent, InvalidStateError, InvalidTypeError, InvalidValueError, ToolExecution, ToolRuntime

from ._common import Batches, check_no_unknown, check_runtime

__all__ = ["CallTimeline", "Recorder", "apply", "record"]

_POLICY = "policies.trace"


@dataclass
class CallTimeline:
    """What happened to one call (times in µs since the recorder's epoch;
    ``None`` for a phase the call never reached)."""

    call_id: str
    tool: str
    batch: int | None
    """The batch it belonged to (numbered in order of appearance), or
    ``None`` for a nested call."""
    nested: bool = False
    prepare: tuple[float, float] | None = None
    dispatch: tuple[float, float] | None = None
    finalize: tuple[float, float] | None = None
    prepare_thread: tuple[int, str] | None = None
    """``(native thread id, name)`` of the thread that prepared it."""
    dispatch_thread: tuple[int, str] | None = None
    """``(native thread id, name)`` of the pool slot that dispatched it."""
    finalize_thread: tuple[int, str] | None = None
    post_execute: bool = False
    """Whether ``tools/post-execute`` ran (the start of finalize)."""
    deferred: float | None = None
    """When its approval was deferred (its batch suspended), or ``None``."""
    deferred_thread: tuple[int, str] | None = None
    outcome: str = "unfinished"
    """``"ok"``, a failure's code (``ABORTED``, ``INVALID_ARGS``...),
    ``"deferred"`` (its batch suspended: see the module docstring), or
    ``"error"`` for a failure without a code."""

    @property
    def wait_us(self) -> float | None:
        if self.prepare is None or self.dispatch is None:
            return None
        return self.dispatch[0] - self.prepare[1]

    @property
    def commit_wait_us(self) -> float | None:
        if self.dispatch is None or self.finalize is None:
            return None
        return max(0.0, self.finalize[0] - self.dispatch[1])


@dataclass
class _Lanes:
    slots: dict[int, int] = field(default_factory=dict)  # native thread id -> slot number
    names: dict[int, str] = field(default_factory=dict)  # tid -> lane name
    order: dict[int, int] = field(default_factory=dict)  # tid -> sort index


_BATCH_TID = 100_000
_THREAD_TID = 200_000


class Recorder:
    """Collects :class:`CallTimeline` records; thread-safe.

    ``pid`` and ``process_name`` label the process track in the trace file
    (give several recorders different pids to show them side by side).
    """

    def __init__(self, *, pid: int = 1, process_name: str = "dsh-actors", epoch_ns: int | None = None) -> None:
        # (The trace file's "pid" is a number, its process name a string: a
        # bool or a str there made a file trace viewers refuse.)
        if type(pid) is not int:
            raise InvalidTypeError(
                f"{_POLICY}: pid must be an int (the process track's id), not {type(pid).__qualname__}"
            )
        if type(process_name) is not str:
            raise InvalidTypeError(f"{_POLICY}: process_name must be a str, not {type(process_name).__qualname__}")
        self.pid = pid
        self.process_name = process_name
        if epoch_ns is not None and type(epoch_ns) is not int:
            raise InvalidTypeError(
                f"{_POLICY}: epoch_ns must be a time.perf_counter_ns() value (an int) or None, not {type(epoch_ns).__qualname__}"
            )
        self.epoch_ns = time.perf_counter_ns() if epoch_ns is None else epoch_ns
        self._lock = threading.Lock()
        self._open: dict[object, CallTimeline] = {}  # execution token -> record
        self._done: list[CallTimeline] = []
        self._batches: Batches[int] = Batches()  # each batch's number
        self._next_batch = 0
        self._batch_threads: dict[int, tuple[int, str]] = {}
        # The scopes it is applied to now on each runtime (apply, until its
        # undo): scopes that overlap would record a call twice.
        self._applied: weakref.WeakKeyDictionary[ToolRuntime, list[Agent | None]] = weakref.WeakKeyDictionary()

    def now(self) -> float:
        """µs since the epoch."""
        return (time.perf_counter_ns() - self.epoch_ns) / 1000.0

    # -- what the listeners record ---------------------------------------------

    def _record(self, execution: ToolExecution, home: bool = True) -> CallTimeline:
        # Called with the lock held. `home`: on the thread that prepares and
        # finalizes the call (for a batch call, its executor's).
        token = execution.token
        rec = self._open.get(token)
        if rec is None:
            rec = CallTimeline(
                call_id=execution.call_id, tool=execution.name, batch=None, nested=execution.parent is not None
            )
            self._open[token] = rec
        if rec.batch is None and not rec.nested and home:
            # (Batches: the one rule. A resumed deferred call is first seen
            # at its dispatch, off its batch's thread: numbered at its finalize.)
            rec.batch = self._batches.of(execution, self._next_batch)
            if rec.batch == self._next_batch:
                self._next_batch += 1
        return rec

    def _prepared(self, execution: ToolExecution, start: float, end: float) -> None:
        thread = _thread()
        with self._lock:
            rec = self._record(execution)
            rec.prepare = (start, end)
            rec.prepare_thread = thread
            if rec.batch is not None:
                self._batch_threads.setdefault(rec.batch, thread)

    def _dispatched(self, execution: ToolExecution, start: float, end: float) -> None:
        thread = _thread()
        with self._lock:
            rec = self._record(execution, home=False)
            rec.dispatch = (start, end)
            rec.dispatch_thread = thread

    def _post_entered(self, execution: ToolExecution, start: float) -> None:
        with self._lock:
            rec = self._record(execution)
            rec.finalize = (start, start)
            rec.post_execute = True

    def _deferred(self, execution: ToolExecution, at: float) -> None:
        thread = _thread()
        with self._lock:
            rec = self._record(execution)
            rec.deferred = at
            rec.deferred_thread = thread
            rec.outcome = "deferred"
            if rec.batch is not None:
                self._batch_threads.setdefault(rec.batch, thread)
            del self._open[execution.token]
            self._done.append(rec)

    def _published(self, execution: ToolExecution, result: Any, at: float) -> None:
        thread = _thread()
        with self._lock:
            rec = self._record(execution)
            start = at if rec.finalize is None else rec.finalize[0]
            rec.finalize = (start, at)
            rec.finalize_thread = thread
            rec.outcome = _outcome(result)
            if rec.batch is not None:
                self._batch_threads.setdefault(rec.batch, thread)
            del self._open[execution.token]
            self._done.append(rec)

    # -- reading -----------------------------------------------------------------

    @property
    def calls(self) -> list[CallTimeline]:
        """Finished calls in the order they published ``tools/result``, then
        any call still open (``outcome == "unfinished"``)."""
        with self._lock:
            return [*self._done, *self._open.values()]

    def clear(self) -> None:
        with self._lock:
            self._open.clear()
            self._done.clear()
            self._batches.clear()
            self._next_batch = 0
            self._batch_threads.clear()

    def trace_events(self) -> list[dict[str, Any]]:
        """The Chrome trace events (``ph: "X"`` spans, flow arrows and lane
        names) of everything recorded so far."""
        with self._lock:
            calls = [*self._done, *self._open.values()]
            batch_threads = dict(self._batch_threads)
        lanes = _Lanes()
        events: list[dict[str, Any]] = []
        pid = self.pid
        for flow_id, rec in enumerate(calls, start=1):
            args: dict[str, Any] = {"call_id": rec.call_id, "tool": rec.tool, "outcome": rec.outcome}
            if rec.batch is not None:
                args["batch"] = rec.batch
            steps: list[tuple[int, float]] = []
            if rec.prepare is not None:
                tid = _home_lane(lanes, rec, rec.prepare_thread, batch_threads)
                events.append(_span(f"prepare {rec.tool}", "prepare", pid, tid, rec.prepare, args))
                steps.append((tid, rec.prepare[0]))
            if rec.dispatch is not None and rec.dispatch_thread is not None:
                tid = _slot_lane(lanes, rec.dispatch_thread)
                extra = dict(args)
                if rec.wait_us is not None:
                    extra["wait_us"] = round(rec.wait_us, 3)
                events.append(_span(f"dispatch {rec.tool}", "dispatch", pid, tid, rec.dispatch, extra))
                steps.append((tid, rec.dispatch[0]))
            if rec.finalize is not None:
                tid = _home_lane(lanes, rec, rec.finalize_thread, batch_threads)
                extra = dict(args)
                extra["post_execute"] = rec.post_execute
                if rec.commit_wait_us is not None:
                    extra["commit_wait_us"] = round(rec.commit_wait_us, 3)
                events.append(_span(f"finalize {rec.tool}", "finalize", pid, tid, rec.finalize, extra))
                steps.append((tid, rec.finalize[0]))
            if rec.deferred is not None:
                tid = _home_lane(lanes, rec, rec.deferred_thread, batch_threads)
                events.append(
                    {
                        "name": f"deferred {rec.tool}",
                        "cat": "deferred",
                        "ph": "i",
                        "s": "t",
                        "pid": pid,
                        "tid": tid,
                        "ts": round(rec.deferred, 3),
                        "args": args,
                    }
                )
                steps.append((tid, rec.deferred))
            if len(steps) > 1:
                for i, (tid, ts) in enumerate(steps):
                    ph = "s" if i == 0 else ("f" if i == len(steps) - 1 else "t")
                    flow: dict[str, Any] = {
                        "name": rec.call_id,
                        "cat": "call",
                        "ph": ph,
                        "id": flow_id,
                        "pid": pid,
                        "tid": tid,
                        "ts": ts,
                    }
                    if ph != "s":
                        flow["bp"] = "e"
                    events.append(flow)
        meta: list[dict[str, Any]] = [
            {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": self.process_name}}
        ]
        for tid, name in lanes.names.items():
            meta.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})
            meta.append(
                {
                    "name": "thread_sort_index",
                    "ph": "M",
                    "pid": pid,
                    "tid": tid,
                    "args": {"sort_index": lanes.order[tid]},
                }
            )
        return meta + events

    def to_json(self) -> dict[str, Any]:
        return {"traceEvents": self.trace_events(), "displayTimeUnit": "ms"}

    def write(self, path: str | os.PathLike[str]) -> None:
        """Write the trace file (``{"traceEvents": [...]}``) to ``path``."""
        write_trace(path, self.trace_events())


def write_trace(path: str | os.PathLike[str], events: list[dict[str, Any]]) -> None:
    """Write ``events`` (from one or several recorders) as a trace file."""
    with open(path, "w", encoding="utf-8") as fh:
        json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, fh)
        fh.write("\n")


def _thread() -> tuple[int, str]:
    thread = threading.current_thread()
    return threading.get_native_id(), thread.name


def _outcome(result: Any) -> str:
    if not getattr(result, "is_error", False):
        return "ok"
    info = getattr(getattr(result, "error", None), "info", None)
    code = getattr(info, "code", None)
    return str(code) if code is not None else "error"


def _span(name: str, cat: str, pid: int, tid: int, when: tuple[float, float], args: dict[str, Any]) -> dict[str, Any]:
    start, end = when
    return {
        "name": name,
        "cat": cat,
        "ph": "X",
        "pid": pid,
        "tid": tid,
        "ts": round(start, 3),
        "dur": round(max(0.0, end - start), 3),
        "args": args,
    }


def _slot_lane(lanes: _Lanes, thread: tuple[int, str]) -> int:
    ident, name = thread
    slot = lanes.slots.get(ident)
    if slot is None:
        slot = lanes.slots[ident] = len(lanes.slots)
        tid = slot + 1
        lanes.names[tid] = f"slot {slot} ({name} {ident})"
        lanes.order[tid] = 1000 + slot
    return slot + 1


def _home_lane(
    lanes: _Lanes,
    rec: CallTimeline,
    thread: tuple[int, str] | None,
    batch_threads: dict[int, tuple[int, str]],
) -> int:
    """A root call's prepare/finalize lane is its batch's; a nested call's
    is the thread it ran on (a pool slot when it is one)."""
    if rec.batch is None or rec.nested:
        if thread is None:
            thread = (0, "unknown")
        if thread[0] in lanes.slots:
            return _slot_lane(lanes, thread)
        tid = _THREAD_TID + thread[0] % 100_000
        lanes.names.setdefault(tid, f"thread {thread[1]} {thread[0]}")
        lanes.order.setdefault(tid, 5000)
        return tid
    tid = _BATCH_TID + rec.batch
    if tid not in lanes.names:
        home = batch_threads.get(rec.batch, thread or (0, "unknown"))
        lanes.names[tid] = f"batch {rec.batch} prepare/finalize ({home[1]} {home[0]})"
        lanes.order[tid] = rec.batch
    return tid


# --------------------------------------------------------------------------
# The plugin
# --------------------------------------------------------------------------


def apply(
    rt: ToolRuntime,
    /,
    *,
    recorder: Recorder | None = None,
    path: str | os.PathLike[str] | None = None,
    scope: Agent | None = None,
    **unknown: Any,
) -> Callable[[], None]:
    """Install the five listeners on ``rt`` (``scope``: only that agent's
    calls and its descendants'); return the undo. With ``path``, the undo
    also writes the trace file there (its folder must exist: it is checked
    now, not when the trace is written)."""
    check_runtime(_POLICY, rt)
    check_no_unknown(_POLICY, unknown, "recorder", "path", "scope")
    if recorder is not None and not isinstance(recorder, Recorder):
        raise InvalidTypeError(
            f"{_POLICY}: recorder must be a policies.trace.Recorder, not {type(recorder).__qualname__}"
        )
    if path is not None:
        if not isinstance(path, (str, os.PathLike)):
            raise InvalidTypeError(
                f"{_POLICY}: path must be a file path (str or os.PathLike), not {type(path).__qualname__}"
            )
        text = os.fspath(path)
        if "\0" in str(text):
            raise InvalidValueError(f"{_POLICY}: path {text!r} holds a NUL character, which no file path may")
        if os.path.isdir(text):
            raise InvalidValueError(
                f"{_POLICY}: path {text!r} is a folder: give the trace file's path, such as its folder plus 'trace.json'"
            )
        folder = os.path.dirname(os.path.abspath(text))
        if not os.path.isdir(folder):
            raise InvalidValueError(f"{_POLICY}: path {text!r}: its folder {folder!r} does not exist")
    if scope is not None and not isinstance(scope, Agent):
        raise InvalidTypeError(f"{_POLICY}: scope must be an Agent or None, not {type(scope).__qualname__}")
    rec = Recorder() if recorder is None else recorder
    with rec._lock:
        scopes = rec._applied.setdefault(rt, [])
        if any(_overlap(scope, other) for other in scopes):
            raise InvalidStateError(
                f"{_POLICY}: this Recorder is applied to this runtime already for these calls (each would be "
                "recorded twice): dispose that application first, give this one a Recorder of its own, or "
                "scope each to agents apart"
            )
        scopes.append(scope)
    now = rec.now

    def pre_execute(execution: ToolExecution, next_: Callable[[], Any]) -> Any:
        start = now()
        try:
            return next_()
        finally:
            rec._prepared(execution, start, now())

    def execute(execution: ToolExecution, next_: Callable[[], Any]) -> Any:
        start = now()
        try:
            return next_()
        finally:
            rec._dispatched(execution, start, now())

    def post_execute(execution: ToolExecution, result: Any, next_: Callable[[], Any]) -> Any:
        rec._post_entered(execution, now())
        return next_()

    def on_result(execution: ToolExecution, result: Any) -> None:
        rec._published(execution, result, now())

    def on_deferred(execution: ToolExecution, ask: Any) -> None:
        rec._deferred(execution, now())

    events = rt.events
    offs: list[Callable[[], None]] = []

    def off_all() -> None:
        for off in offs:
            off()
        with rec._lock:
            scopes = rec._applied.get(rt)
            if scopes is not None:
                scopes.remove(scope)

    try:
        offs.append(events.on("tools/pre-execute", pre_execute, scope=scope, prepend=True))
        offs.append(events.on("tools/execute", execute, scope=scope, prepend=True))
        offs.append(events.on("tools/post-execute", post_execute, scope=scope, prepend=True))
        offs.append(events.on("tools/result", on_result, scope=scope, prepend=True))
        offs.append(events.on("tools/deferred", on_deferred, scope=scope, prepend=True))
    except BaseException:
        off_all()
        raise
    undone: list[bool] = []

    def undo() -> None:
        with rec._lock:  # (once: a second call would free a later application's place)
            if undone:
                return
            undone.append(True)
        off_all()
        if path is not None:
            rec.write(path)

    return undo


def _overlap(one: Agent | None, other: Agent | None) -> bool:
    """Whether some call reaches the listeners of both scopes: either is
    global, or one is the other or its ancestor (listeners reach the
    scope's descendants)."""
    return one is None or other is None or one in other.chain() or other in one.chain()


@contextmanager
def record(
    rt: ToolRuntime, *, path: str | os.PathLike[str] | None = None, scope: Agent | None = None
) -> Iterator[Recorder]:
    """Record while the block runs; with ``path``, write the file at the end."""
    recorder = Recorder()
    off = rt.use(_this_module(), recorder=recorder, path=path, scope=scope)
    try:
        yield recorder
    finally:
        off()


def _this_module() -> Any:
    import sys

    return sys.modules[__name__]
