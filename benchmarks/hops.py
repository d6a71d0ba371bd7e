"""What one call's trip costs, hop by hop and stage by stage.

Two measurements, both on the no-op tool of the overhead workload:

* **the trip**: a batch through ``rt.tools.execute`` with a timestamp
  (``perf_counter_ns``) at every hand-off, taken by thin wrappers installed
  around the scheduler's hot-path functions for this measurement only (each
  adds well under a microsecond). Medians over many batches of the time
  between consecutive points: the thread hops and the work in between,
  twice: a lone call, which the executor runs inline (caller → executor
  actor → caller), and a two-call batch whose first call goes through the
  work mailbox (executor → call actor → ``Settled`` → executor).
* **the stages in isolation**: each piece of the pipeline called in a loop
  on one thread (no hand-off), µs per call: argument parsing and
  materialization, ``ToolExecution`` creation, classification, prepare, the
  body signal fusion, the body with its argument validation, output
  validation and render, the final freeze, ``tools/result``, the
  ``ToolCallResult`` record.

Also the floor of a hand-off: a round trip through one of our actors, and a\nping-pong between two bare threads.

    ./dev python -m benchmarks.hops [--json PATH]

Used to write ``benchmarks/HOPS.md``; not part of ``python -m benchmarks``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from itertools import pairwise
from typing import Any

from dsh_actors import AbortController, AbortSignal, ToolExecutionInput, ToolRuntime

from .scheduling import noop_batch, noop_tool


def _per_call_us(fn: Callable[[], object], n: int = 20_000, repeat: int = 7) -> float:
    for _ in range(n // 10):
        fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter_ns()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter_ns() - start) / n / 1000)
    return float(statistics.median(samples))


# --------------------------------------------------------------------------
# The trip
# --------------------------------------------------------------------------

#: A lone call: the only call that can start, so the executor runs it
#: inline (caller -> executor actor -> caller, two hops).
INLINE_POINTS = (
    ("caller: execute() called", "t_call"),
    ("executor thread: RunBatch handled", "t_start"),
    ("executor: dispatch begun (parse, materialize, classify, prepare)", "t_dispatching"),
    ("executor: dispatch done (body, validate, render)", "t_dispatched"),
    ("executor: committed (finalize, freeze, tools/result)", "t_committed"),
    ("executor: reply settled", "t_replied"),
    ("caller: execute() returned", "t_returned"),
)

#: Two calls: the first goes through the batch's work mailbox to a call
#: actor (the second, the last call, waits for nothing and runs inline
#: once the first is out, so only the first call's stamps are kept).
MAILBOX_POINTS = (
    ("caller: execute() called", "t_call"),
    ("executor thread: RunBatch handled", "t_start"),
    ("executor: call 0 put in the work mailbox (parse, materialize, classify, prepare)", "t_put"),
    ("call actor: call 0 taken from the mailbox (the hop)", "t_taken"),
    ("call actor: dispatch done (body, validate, render)", "t_dispatched"),
    ("executor: call 0 committed (Settled hop, finalize, tools/result)", "t_committed"),
    ("executor: reply settled (call 1 inline, then the batch result)", "t_replied"),
    ("caller: execute() returned", "t_returned"),
)


def _instrument(stamps: dict[str, int]) -> Callable[[], None]:
    """Wrap the scheduler's hot-path functions to stamp ``stamps`` (the
    first time each point is reached in a batch); returns the undo."""
    from dsh_actors.scheduling import batch as batch_module
    from dsh_actors.scheduling import executor as ex
    from dsh_actors.scheduling import pool

    now = time.perf_counter_ns
    saved: list[tuple[Any, str, Any]] = []

    def patch(owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        original = getattr(owner, name)
        saved.append((owner, name, original))
        setattr(owner, name, make(original))

    def stamp(key: str, *, after: bool = False) -> Callable[[Any], Any]:
        def make(original: Any) -> Any:
            def wrapped(*args: Any, **kwargs: Any) -> Any:
                if not after and key not in stamps:
                    stamps[key] = now()
                out = original(*args, **kwargs)
                if after and key not in stamps and out is not None and out is not pool.LEAVE:
                    stamps[key] = now()
                return out

            return wrapped

        return make

    patch(ex.ExecutorActor, "handle", stamp("t_start"))
    patch(batch_module, "dispatch", stamp("t_dispatching"))
    patch(ex, "dispatch", stamp("t_dispatching_pooled"))
    patch(pool.WorkMailbox, "put", stamp("t_put"))
    patch(pool.WorkMailbox, "take", stamp("t_taken", after=True))
    patch(pool.WorkMailbox, "report", stamp("t_dispatched"))
    patch(batch_module.BatchRun, "_record", stamp("t_committed", after=False))
    patch(ex, "settle", stamp("t_replied"))

    # The end of an inline dispatch is where the commit begins.
    def commit_stamp(original: Any) -> Any:
        def wrapped(self: Any, call: Any) -> Any:
            stamps.setdefault("t_dispatched", now())
            return original(self, call)

        return wrapped

    patch(batch_module.BatchRun, "_commit", commit_stamp)

    def undo() -> None:
        for owner, name, original in reversed(saved):
            setattr(owner, name, original)

    return undo


def measure_trip(batches: int = 3000, *, pooled: bool = False) -> list[tuple[str, float, float]]:
    """(segment, median µs, p90 µs) for each step of a batch: one call run
    inline, or (``pooled``) two calls, the first through the mailbox."""
    points = MAILBOX_POINTS if pooled else INLINE_POINTS
    stamps: dict[str, int] = {}
    deltas: dict[str, list[float]] = {label: [] for label, _ in points[1:]}
    totals: list[float] = []
    undo = _instrument(stamps)
    try:
        with ToolRuntime() as rt:
            rt.tools.register(noop_tool())
            batch = noop_batch(2 if pooled else 1)
            for i in range(batches + 200):
                stamps.clear()
                stamps["t_call"] = time.perf_counter_ns()
                rt.tools.execute(batch)
                stamps["t_returned"] = time.perf_counter_ns()
                if i < 200:
                    continue
                missing = [key for _, key in points if key not in stamps]
                if missing:
                    raise RuntimeError(f"the trip took another path: no {missing} stamp")
                for (_, prev), (label, key) in pairwise(points):
                    deltas[label].append((stamps[key] - stamps[prev]) / 1000)
                totals.append((stamps["t_returned"] - stamps["t_call"]) / 1000)
    finally:
        undo()
    rows = []
    for label, values in deltas.items():
        values.sort()
        rows.append((label, float(statistics.median(values)), values[int(len(values) * 0.9)]))
    totals.sort()
    rows.append(("total (instrumented)", float(statistics.median(totals)), totals[int(len(totals) * 0.9)]))
    return rows


# --------------------------------------------------------------------------
# Hand-off floor
# --------------------------------------------------------------------------


def measure_pingpong(rounds: int = 20_000) -> dict[str, float]:
    """Round trip through one of our actors (a pykka tell and a future
    reply), and a ``queue.SimpleQueue`` ping-pong between two bare threads
    (what a work mailbox hop costs at least), in µs."""
    import queue

    from dsh_actors.actors import ActorBase, ActorGroup

    class Echo(ActorBase):
        def receive(self, message: Any) -> None:
            message.set_result(None)

    group = ActorGroup()
    try:
        echo = Echo.spawn(group)
        samples = []
        for i in range(rounds + 500):
            done: Future[None] = Future()
            start = time.perf_counter_ns()
            echo.tell(done)
            done.result()
            if i >= 500:
                samples.append((time.perf_counter_ns() - start) / 1000)
        actor_rt = float(statistics.median(samples))
    finally:
        group.stop_all()

    a: queue.SimpleQueue[Any] = queue.SimpleQueue()
    b: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def bounce() -> None:
        while True:
            item = a.get()
            if item is None:
                return
            b.put(item)

    thread = threading.Thread(target=bounce)
    thread.start()
    samples = []
    for i in range(rounds + 500):
        start = time.perf_counter_ns()
        a.put(1)
        b.get()
        if i >= 500:
            samples.append((time.perf_counter_ns() - start) / 1000)
    a.put(None)
    thread.join()
    return {
        "actor tell + future reply (caller -> actor -> caller)": actor_rt,
        "SimpleQueue ping-pong between two threads": float(statistics.median(samples)),
    }


# --------------------------------------------------------------------------
# Stages in isolation
# --------------------------------------------------------------------------


def measure_stages() -> list[tuple[str, float]]:
    from dsh_actors.model import ToolCallResult
    from dsh_actors.pipeline import stages
    from dsh_actors.pipeline.intake import check_batch, parse_arguments
    from dsh_actors.pipeline.results import freeze_result, render_success
    from dsh_actors.registry import check_guards, executable, execution_mode

    rows: list[tuple[str, float]] = []
    with ToolRuntime() as rt:
        rt.tools.register(noop_tool())
        signal = AbortController().signal
        stop = rt.stop_signal
        reg = executable(rt.state, "noop", None, None)
        assert reg is not None
        one = noop_batch(1)
        rows.append(("check_batch (1 call)", _per_call_us(lambda: check_batch(one))))
        rows.append(("parse_arguments('{\"i\": 1}')", _per_call_us(lambda: parse_arguments('{"i": 1}'))))
        rows.append(
            (
                "begin_call: materialize + ToolExecution + Call",
                _per_call_us(lambda: stages.begin_call(0, "c0", "noop", {"i": 1}, signal, None, None)),
            )
        )
        inp = ToolExecutionInput(call_id="c0", name="noop", arguments={"i": 1}, signal=signal)
        rows.append(
            (
                "  (for scale: a ToolExecutionInput record)",
                _per_call_us(lambda: ToolExecutionInput(call_id="c0", name="noop", arguments={"i": 1}, signal=signal)),
            )
        )
        call = stages.begin(0, inp)
        args = call.execution.arguments
        rows.append(
            ("executable() lookup (cached view)", _per_call_us(lambda: executable(rt.state, "noop", None, None)))
        )
        rows.append(
            (
                "classify: execution_mode (lookup + classifier)",
                _per_call_us(lambda: execution_mode(rt.state, "noop", args, None, None)),
            )
        )
        rows.append(("check_guards (none installed)", _per_call_us(lambda: check_guards(rt.state, call.execution))))

        def prepared() -> None:
            c = stages.begin_call(0, "c0", "noop", {"i": 1}, signal, None, None)
            stages.prepare(rt, c)

        begin_us = rows[2][1]
        rows.append(("prepare (no listeners, no guards)", _per_call_us(prepared) - begin_us))
        rows.append(
            (
                "fused body signal: AbortSignal.any(caller, stop) + close",
                _per_call_us(lambda: AbortSignal.any(signal, stop).close()),
            )
        )
        rows.append(
            ("  one parent: AbortSignal.any(caller) + close", _per_call_us(lambda: AbortSignal.any(signal).close()))
        )
        rows.append(
            (
                "body + argument validation (define_tool wrapper)",
                _per_call_us(lambda: reg.definition.execute(args, None)),
            )
        )
        rows.append(
            (
                "render_success: output validation, render, result",
                _per_call_us(lambda: render_success(call.execution, reg.definition, reg.output_validator, "ok")),
            )
        )
        result = render_success(call.execution, reg.definition, reg.output_validator, "ok")

        def dispatched() -> None:
            c = stages.begin_call(0, "c0", "noop", {"i": 1}, signal, None, None)
            stages.prepare(rt, c)
            stages.dispatch(rt, c)

        rows.append(("dispatch (whole stage, no wrappers)", _per_call_us(dispatched) - _per_call_us(prepared)))
        rows.append(("freeze_result (already frozen)", _per_call_us(lambda: freeze_result(result))))

        def finalized() -> None:
            c = stages.begin_call(0, "c0", "noop", {"i": 1}, signal, None, None)
            stages.prepare(rt, c)
            stages.dispatch(rt, c)
            stages.finalize(rt, c)

        rows.append(("finalize (whole stage, no listeners)", _per_call_us(finalized) - _per_call_us(dispatched)))
        rows.append(
            (
                "tools/result emit, no listeners",
                _per_call_us(lambda: rt.events.emit("tools/result", call.execution, result)),
            )
        )
        rows.append(("ToolCallResult record", _per_call_us(lambda: ToolCallResult("c0", result))))
        rows.append(("one call inline (begin+prepare+dispatch+finalize)", _per_call_us(finalized)))
        rows.append(
            (
                "rt.tools.dispatch(input): one call inline via the facade",
                _per_call_us(lambda: rt.tools.dispatch(inp), n=10_000),
            )
        )
    return rows


def measure_marker(rounds: int = 60, n: int = 100) -> dict[str, float]:
    """What the durable ``tool/start`` marker costs: one append in
    isolation, and whole realistic batches of ``n`` calls in three runtimes
    of the same configuration whose sessions differ: a file with the marker
    (the realistic configuration), a file whose session drops the marker,
    and an in-memory session (with the marker), interleaved batch by batch
    (each goes first in turn); per call, medians of wall time and of the
    process's CPU time. Serial batches (every call inline on the executor:
    no hop) and parallel ones (cap 10, the overhead workload's)."""
    import tempfile
    from dataclasses import replace
    from pathlib import Path

    from dsh_actors import Agent, Session
    from dsh_actors.session import start_event

    from .scheduling import realistic, realistic_batch, realistic_tool

    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as folder:
        with Session(Path(folder) / "alone.jsonl") as session:
            out["append tool/start, file session (µs)"] = _per_call_us(
                lambda: session.append_lossless(start_event("c0")), n=20_000
            )
        with Session() as memory:
            out["append tool/start, in-memory session (µs)"] = _per_call_us(
                lambda: memory.append_lossless(start_event("c0")), n=20_000
            )
    kinds = ("file", "file, no marker", "memory")
    for label, limit in (("serial", 1), ("cap 10", 10)):
        with ToolRuntime() as a, ToolRuntime() as b, ToolRuntime() as c:
            runs = []
            for rt, kind in zip((a, b, c), kinds, strict=True):
                rt.tools.register(realistic_tool(noop_tool()))
                agent = realistic(rt, start_marker=kind != "file, no marker")
                if kind == "memory":
                    agent = Agent("harness", session=Session())
                batch = realistic_batch(replace(noop_batch(n), max_parallel_tool_calls=limit), agent)
                runs.append((rt, batch, kind))
            wall: dict[str, list[float]] = {kind: [] for kind in kinds}
            cpu: dict[str, list[float]] = {kind: [] for kind in kinds}
            for i in range(rounds + 5):
                turn = i % len(runs)
                for rt, batch, kind in runs[turn:] + runs[:turn]:
                    started, cpu_started = time.perf_counter_ns(), time.process_time_ns()
                    rt.tools.execute(batch)
                    if i >= 5:  # warm-up
                        wall[kind].append((time.perf_counter_ns() - started) / n / 1000)
                        cpu[kind].append((time.process_time_ns() - cpu_started) / n / 1000)
        for title, samples in (("wall", wall), ("CPU", cpu)):
            medians = {kind: float(statistics.median(values)) for kind, values in samples.items()}
            for kind in kinds:
                out[f"{label}: {title} per call, {kind} (µs)"] = medians[kind]
            out[f"{label}: {title}, file ÷ file without the marker"] = medians["file"] / medians["file, no marker"]
            out[f"{label}: {title}, file ÷ memory"] = medians["file"] / medians["memory"]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one call's trip, hop by hop")
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--batches", type=int, default=3000)
    parser.add_argument("--only-marker", action="store_true", help="only what the tool/start marker costs")
    parser.add_argument("--marker-rounds", type=int, default=60, help="100-call batches per configuration")
    args = parser.parse_args(argv)
    out: dict[str, Any] = {}
    print("the durable tool/start marker (realistic configuration, file-backed session)")
    marker = measure_marker(args.marker_rounds)
    for label, value in marker.items():
        print(f"  {value:8.2f}  {label}")
    out["marker"] = marker
    if args.only_marker:
        return 0
    for key, pooled, title in (
        ("trip", False, "one call, run inline by the executor"),
        ("trip_mailbox", True, "two calls, the first through the work mailbox"),
    ):
        print(f"{title}, step by step (µs: median, p90)")
        trip = measure_trip(args.batches, pooled=pooled)
        for label, med, p90 in trip:
            print(f"  {med:8.1f} {p90:8.1f}  {label}")
        out[key] = trip
    print("hand-off floor (µs, median)")
    floor = measure_pingpong()
    for label, value in floor.items():
        print(f"  {value:8.1f}  {label}")
    out["floor"] = floor
    print("stages in isolation (µs per call, one thread)")
    stages = measure_stages()
    for label, value in stages:
        print(f"  {value:8.2f}  {label}")
    out["stages"] = stages
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(out, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
