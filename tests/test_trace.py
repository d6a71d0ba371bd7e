"""The timeline plugin (``policies.trace``): a batch's schedule as a Chrome
trace-event file. Concurrency is forced with a Barrier, never a sleep."""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from itertools import pairwise
from pathlib import Path
from typing import Any

import orjson
import pytest

import policies.trace as trace
from dsh_actors import (
    AbortController,
    Agent,
    Ask,
    Deny,
    InvalidStateError,
    ToolBatchInput,
    ToolCall,
    ToolOutput,
    ToolRuntime,
    define_tool,
    text,
)

GUARD = 10.0

TEXT = ToolOutput(schema={"type": "string"}, render=lambda args, value: [text(value)])


def tool(name: str, body: Any, *, exclusive: bool = False) -> Any:
    return define_tool(
        name=name,
        description=f"test tool {name}",
        parameters={"i": {"type": "integer"}},
        output=TEXT,
        execute=body,
        is_concurrency_safe=lambda args: not exclusive,
    )


def batch(*names: str, **kwargs: Any) -> ToolBatchInput:
    calls = tuple(
        ToolCall(id=f"c{i}", name=name, arguments=orjson.dumps({"i": i}).decode()) for i, name in enumerate(names)
    )
    return ToolBatchInput(calls=calls, **kwargs)


def spans(doc: dict[str, Any], cat: str | None = None) -> list[dict[str, Any]]:
    return [e for e in doc["traceEvents"] if e["ph"] == "X" and (cat is None or e["cat"] == cat)]


def lane_names(doc: dict[str, Any]) -> dict[int, str]:
    return {e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}


def overlaps(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a["ts"] < b["ts"] + b["dur"] and b["ts"] < a["ts"] + a["dur"]


@pytest.fixture
def traced(rt: Any, tmp_path: Path) -> Any:
    """Run a 7-call batch at cap 3 (c3 exclusive; the three calls before it
    and the three after it meet at a Barrier, so each trio really runs at
    once) under the plugin; return the trace file's JSON."""
    trio = threading.Barrier(3, timeout=GUARD)

    def meet(args: Any, ctx: Any) -> str:
        trio.wait()
        return "ok"

    rt.tools.register(tool("meet", meet))
    rt.tools.register(tool("alone", lambda args, ctx: "alone", exclusive=True))
    path = tmp_path / "trace.json"
    off = rt.use(trace, path=str(path))
    result = rt.tools.execute(batch("meet", "meet", "meet", "alone", "meet", "meet", "meet", max_parallel_tool_calls=3))
    off()
    assert all(not r.result.is_error for r in result.results)
    return json.loads(path.read_text(encoding="utf-8"))


def test_a_traced_batch_writes_valid_chrome_trace_json_with_complete_events(traced: Any) -> None:
    assert isinstance(traced["traceEvents"], list)
    for event in spans(traced):
        assert event["ph"] == "X"
        assert isinstance(event["pid"], int) and isinstance(event["tid"], int)
        assert isinstance(event["ts"], (int, float)) and isinstance(event["dur"], (int, float))
        assert event["dur"] >= 0 and event["name"]
        assert {"call_id", "tool", "outcome"} <= set(event["args"])
    names = lane_names(traced)
    for event in spans(traced):
        assert event["tid"] in names  # every lane is named


def test_every_call_has_exactly_one_dispatch_span_and_one_prepare_and_finalize(traced: Any) -> None:
    for cat in ("prepare", "dispatch", "finalize"):
        ids = sorted(e["args"]["call_id"] for e in spans(traced, cat))
        assert ids == [f"c{i}" for i in range(7)], cat
    assert {e["args"]["outcome"] for e in spans(traced)} == {"ok"}


def test_spans_never_overlap_within_a_lane(traced: Any) -> None:
    by_lane: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for event in spans(traced):
        by_lane[(event["pid"], event["tid"])].append(event)
    for lane, events in by_lane.items():
        events.sort(key=lambda e: e["ts"])
        for before, after in pairwise(events):
            assert after["ts"] >= before["ts"] + before["dur"], (
                f"lane {lane}: {before['name']} overlaps {after['name']}"
            )


def test_dispatch_spans_are_on_pool_slot_lanes_and_prepare_finalize_on_the_batch_lane(traced: Any) -> None:
    names = lane_names(traced)
    dispatches = spans(traced, "dispatch")
    pooled = {e["tid"] for e in dispatches if e["args"]["tool"] != "alone"}
    (inline,) = {e["tid"] for e in dispatches if e["args"]["tool"] == "alone"}
    home_lanes = {e["tid"] for e in spans(traced, "prepare") + spans(traced, "finalize")}
    assert all(names[tid].startswith("slot ") for tid in pooled | {inline})
    assert 1 < len(pooled) <= 3  # the trios ran at once, on no more call actors than the cap
    assert all("dsh-CallActor" in names[tid] for tid in pooled)
    # The exclusive call, the only one that could start, ran inline on the
    # thread taking the batch's step: an executor actor, or the call actor
    # that settled the call before it and took the step (BatchInbox.offer).
    assert "dsh-ExecutorActor" in names[inline] or "dsh-CallActor" in names[inline]
    assert len(home_lanes) == 1 and names[home_lanes.pop()].startswith("batch 0 ")


def test_the_exclusive_call_is_dispatched_alone(traced: Any) -> None:
    dispatches = spans(traced, "dispatch")
    (alone,) = [e for e in dispatches if e["args"]["tool"] == "alone"]
    others = [e for e in dispatches if e is not alone]
    assert not any(overlaps(alone, other) for other in others)
    # and the trios before and after it did overlap among themselves
    first = [e for e in others if e["args"]["call_id"] in ("c0", "c1", "c2")]
    assert overlaps(first[0], first[1]) and overlaps(first[1], first[2])


def test_prepare_precedes_dispatch_which_precedes_finalize_for_each_call(traced: Any) -> None:
    by_call: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for event in spans(traced):
        by_call[event["args"]["call_id"]][event["cat"]] = event
    for call_id, phases in by_call.items():
        prep, disp, fin = phases["prepare"], phases["dispatch"], phases["finalize"]
        assert prep["ts"] + prep["dur"] <= disp["ts"], call_id
        assert disp["ts"] + disp["dur"] <= fin["ts"] + fin["dur"], call_id
        assert disp["args"]["wait_us"] >= 0


def test_the_recorder_keeps_the_denied_and_the_skipped_calls_outcomes(rt: Any) -> None:
    rt.tools.register(tool("noop", lambda args, ctx: "ok"))

    def deny_second(execution: Any, next_: Any) -> Any:
        return Deny("no") if execution.call_id == "c1" else next_()

    rt.events.on("tools/pre-execute", deny_second)
    recorder = trace.Recorder()
    off = rt.use(trace, recorder=recorder)
    rt.tools.execute(batch("noop", "noop"))
    controller = AbortController()
    controller.abort()
    rt.tools.execute(batch("noop", signal=controller.signal))
    off()
    calls = {(c.batch, c.call_id): c for c in recorder.calls}
    assert calls[(0, "c0")].outcome == "ok" and calls[(0, "c0")].dispatch is not None
    denied = calls[(0, "c1")]
    assert denied.outcome == "error" and denied.prepare is not None and denied.dispatch is None
    assert denied.finalize is not None and denied.post_execute
    skipped = calls[(1, "c0")]
    assert skipped.outcome == "ABORTED_BEFORE_DISPATCH"
    assert skipped.prepare is None and skipped.dispatch is None and skipped.finalize is not None


def test_undoing_the_plugin_stops_recording(rt: Any) -> None:
    rt.tools.register(tool("noop", lambda args, ctx: "ok"))
    with trace.record(rt) as recorder:
        rt.tools.execute(batch("noop"))
    rt.tools.execute(batch("noop"))
    assert len(recorder.calls) == 1
    assert all(not rt.events.listeners(name) for name in ("tools/pre-execute", "tools/execute", "tools/result"))


def test_a_recorder_is_applied_to_a_runtime_once_at_a_time(rt: Any) -> None:
    # Applied twice, it recorded every call twice (the second time as a
    # batch of its own).
    rt.tools.register(tool("noop", lambda args, ctx: "ok"))
    recorder = trace.Recorder()
    off = rt.use(trace, recorder=recorder)
    with pytest.raises(InvalidStateError, match="applied to this runtime already .* a Recorder of its own"):
        rt.use(trace, recorder=recorder)
    rt.tools.execute(batch("noop"))
    assert len(recorder.calls) == 1
    off()
    off()  # (a second undo frees nothing of a later application)
    again = rt.use(trace, recorder=recorder)  # once disposed, it may be applied again
    off()
    with pytest.raises(InvalidStateError):
        rt.use(trace, recorder=recorder)
    again()
    with ToolRuntime() as other:  # another runtime may share it
        other.tools.register(tool("noop", lambda args, ctx: "ok"))
        both = rt.use(trace, recorder=recorder), other.use(trace, recorder=recorder)
        rt.tools.execute(batch("noop"))
        other.tools.execute(batch("noop"))
        for undo in both:
            undo()
    assert len(recorder.calls) == 3
    # Scoped to agents apart it may be applied once for each; to an agent
    # and its sub-agent (whose calls reach both), not.
    parent, sibling = Agent("a"), Agent("b")
    child = Agent("a1", parent=parent)
    apart = [rt.use(trace, recorder=recorder, scope=parent), rt.use(trace, recorder=recorder, scope=sibling)]
    with pytest.raises(InvalidStateError, match="applied to this runtime already"):
        rt.use(trace, recorder=recorder, scope=child)
    with pytest.raises(InvalidStateError, match="applied to this runtime already"):
        rt.use(trace, recorder=recorder)
    rt.tools.execute(ToolBatchInput(calls=[ToolCall(id="c1", name="noop")], agent=child))
    assert len(recorder.calls) == 4  # (once)
    for undo in apart:
        undo()


def test_consecutive_batches_sharing_a_signal_get_a_lane_each(rt: Any) -> None:
    rt.tools.register(tool("noop", lambda args, ctx: "ok"))
    controller = AbortController()
    recorder = trace.Recorder()
    off = rt.use(trace, recorder=recorder)
    for _ in range(3):
        rt.tools.execute(batch("noop", "noop", signal=controller.signal))
    off()
    assert sorted({c.batch for c in recorder.calls}) == [0, 1, 2]
    names = lane_names(recorder.to_json())
    assert sum(1 for name in names.values() if name.startswith("batch ")) == 3


def test_batches_without_a_signal_and_with_ids_of_their_own_get_a_lane_each(rt: Any) -> None:
    # (Provider-style ids, unique across steps: only the batch's own signal,
    # which every batch has, tells them apart.)
    rt.tools.register(tool("noop", lambda args, ctx: "ok"))
    recorder = trace.Recorder()
    off = rt.use(trace, recorder=recorder)
    for step in range(3):
        calls = tuple(ToolCall(id=f"call_{step}_{i}", name="noop", arguments="{}") for i in range(2))
        rt.tools.execute(ToolBatchInput(calls=calls))
    off()
    assert [(c.call_id, c.batch) for c in recorder.calls] == [(f"call_{s}_{i}", s) for s in range(3) for i in range(2)]
    names = lane_names(recorder.to_json())
    assert sum(1 for name in names.values() if name.startswith("batch ")) == 3


def test_a_deferred_call_s_record_ends_deferred_and_its_resumed_part_is_a_record_of_its_own(rt: Any) -> None:
    rt.tools.register(tool("work", lambda args, ctx: "ok"))
    rt.events.on(
        "tools/pre-execute",
        lambda execution, next_: Ask(reason="a person decides") if execution.call_id == "c0" else next_(),
    )
    rt.approvals.set(lambda request: "deferred")
    recorder = trace.Recorder()
    off = rt.use(trace, recorder=recorder)
    suspended = rt.tools.execute(batch("work", "work", agent=Agent("main")))
    assert suspended.pending == ("c0",)
    assert sorted((r.call_id, r.outcome) for r in recorder.calls) == [("c0", "deferred"), ("c1", "ok")]

    rt.tools.resume(suspended.suspension, {"c0": "allowed-once"})
    off()
    records = recorder.calls
    assert [(r.call_id, r.outcome, r.batch) for r in records] == [
        ("c0", "deferred", 0),
        ("c1", "ok", 0),
        ("c0", "ok", 1),
    ]
    deferred, _, resumed = records
    assert deferred.prepare is not None and deferred.deferred is not None and deferred.dispatch is None
    assert deferred.prepare[1] <= deferred.deferred
    # The resumed part: from its dispatch on (nobody is asked again).
    assert resumed.prepare is None and resumed.dispatch is not None and resumed.finalize is not None
    assert resumed.deferred is None and resumed.dispatch[1] <= resumed.finalize[1]

    doc = recorder.to_json()
    marks = [e for e in doc["traceEvents"] if e["ph"] == "i"]
    assert [(e["name"], e["args"]["outcome"]) for e in marks] == [("deferred work", "deferred")]
    names = lane_names(doc)
    assert names[marks[0]["tid"]].startswith("batch 0 prepare/finalize")
    finalize = [e for e in spans(doc, "finalize") if e["args"]["call_id"] == "c0"]
    assert len(finalize) == 1 and names[finalize[0]["tid"]].startswith("batch 1 prepare/finalize")


@pytest.mark.parametrize(
    ("config", "error", "match"),
    [
        ({"path": 5}, TypeError, r"path must be a file path \(str or os.PathLike\), not int"),
        ({"path": "/no/such/folder/trace.json"}, ValueError, r"its folder '/no/such/folder' does not exist"),
        # (Both used to pass, and the disposer then failed to write: the trace lost.)
        ({"path": "/"}, ValueError, r"path '/' is a folder: give the trace file's path"),
        ({"path": "trace\0.json"}, ValueError, r"holds a NUL character"),
        ({"recorder": 5}, TypeError, r"recorder must be a policies.trace.Recorder, not int"),
        ({"scope": "main"}, TypeError, r"scope must be an Agent or None, not str"),
    ],
)
def test_bad_options_are_refused_when_applied(
    rt: Any, config: dict[str, Any], error: type[Exception], match: str
) -> None:
    # (path=5 was opened as file descriptor 5 when the trace was written:
    # the runtime's own event loop pipe.)
    with pytest.raises(error, match=match):
        rt.use(trace, **config)
    assert rt.events.listeners("tools/execute") == ()


def test_a_recorder_s_epoch_is_an_int_checked_when_it_is_made() -> None:
    # (A string was taken, and every call then failed POLICY_FAILED.)
    with pytest.raises(
        TypeError, match=r"epoch_ns must be a time.perf_counter_ns\(\) value \(an int\) or None, not str"
    ):
        trace.Recorder(epoch_ns="0")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({"pid": True}, r"pid must be an int \(the process track's id\), not bool"),
        ({"pid": "1"}, r"pid must be an int \(the process track's id\), not str"),
        ({"process_name": 3}, r"process_name must be a str, not int"),
    ],
)
def test_a_recorder_s_pid_and_process_name_are_checked_when_it_is_made(config: dict[str, Any], match: str) -> None:
    # (They went into the trace file as given: "pid": true, a file trace viewers refuse.)
    with pytest.raises(TypeError, match=match):
        trace.Recorder(**config)
