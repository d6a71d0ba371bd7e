"""What one call's trip costs, hop by hop and stage by stage.

Two measurements, both on the no-op tool of the overhead workload:

* **the trip**: a one-call batch through ``rt.tools.execute`` with a
  timestamp (``perf_counter_ns``) at every hand-off, taken by thin wrappers
  installed around the executor's hot-path functions for this measurement
  only (each adds well under a microsecond). Medians over many batches of
  the time between consecutive points: the thread hops and the work in
  between, twice: self-served (caller → executor actor → caller, the whole
  trip on the executor) and on the executor's path, which a
  ``tools/result`` listener forces (caller → executor actor → call actor →
  executor actor → caller).
* **the stages in isolation**: each piece of the pipeline called in a loop
  on one thread (no hand-off), µs per call: argument parsing and
  materialization, ``ToolExecution`` creation, classification, prepare, the
  body signal fusion, the body with its argument validation, output
  validation and render, the final freeze, ``tools/result``, the
  ``ToolCallResult`` record.

Also the floor of a hand-off: a ping-pong between two bare actors of ours.

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

#: The executor's path (prepare and finalize on the executor, the body on a
#: call actor): what a batch takes when something observes it. The trip
#: measures it with a no-op ``tools/result`` listener installed.
EXECUTOR_POINTS = (
    ("caller: execute() called", "t_call"),
    ("executor thread: RunBatch handled", "t_start"),
    ("executor: calls begun (parse, materialize, ToolExecution)", "t_begun"),
    ("executor: prepare done (classify, pre-execute, guards)", "t_prepared"),
    ("executor: Dispatch put in the call actor's inbox", "t_sent"),
    ("call actor thread: Dispatch handled", "t_received"),
    ("call actor: dispatch done (signal, body, validate, render)", "t_dispatched"),
    ("executor thread: CallSettled handled", "t_settled"),
    ("executor: finalize done (freeze, tools/result)", "t_finalized"),
    ("executor: reply future set", "t_replied"),
    ("caller: execute() returned", "t_returned"),
)

#: A self-served lone call (nothing observes it): its whole trip on the
#: executor actor, two hops in all.
SERVED_POINTS = (
    ("caller: execute() called", "t_call"),
    ("executor thread: RunBatch handled", "t_start"),
    ("executor: call claimed (parse, materialize, ToolExecution, classify)", "t_claimed"),
    ("executor: dispatch done (body, validate, render)", "t_dispatched"),
    ("executor: finalize done (freeze, tools/result)", "t_finalized"),
    ("executor: reply future set", "t_replied"),
    ("caller: execute() returned", "t_returned"),
)


def _instrument(stamps: dict[str, int]) -> Callable[[], None]:
    """Wrap the executor's hot-path functions to stamp ``stamps``; returns
    the undo."""
    from dsh_actors.scheduling import executor as ex

    now = time.perf_counter_ns
    saved: list[tuple[Any, str, Any]] = []

    def patch(owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        original = getattr(owner, name)
        saved.append((owner, name, original))
        setattr(owner, name, make(original))

    def stamp_before(key: str, only: str | None = None) -> Callable[[Any], Any]:
        def make(original: Any) -> Any:
            def wrapped(*args: Any, **kwargs: Any) -> Any:
                if only is None or type(args[-1]).__name__ == only:
                    stamps.setdefault(key, now())
                return original(*args, **kwargs)

            return wrapped

        return make

    def stamp_after(key: str, only: str | None = None, first: bool = False) -> Callable[[Any], Any]:
        def make(original: Any) -> Any:
            def wrapped(*args: Any, **kwargs: Any) -> Any:
                result = original(*args, **kwargs)
                if only is None or type(args[-1]).__name__ == only:
                    if not (first and key in stamps):
                        stamps[key] = now()
                return result

            return wrapped

        return make

    patch(ex.ExecutorActor, "_start", stamp_before("t_start"))
    patch(ex.ExecutorActor, "_advance", stamp_before("t_begun"))
    patch(ex, "prepare", stamp_after("t_prepared"))
    patch(ex, "_tell", stamp_after("t_sent", only="Dispatch"))
    patch(ex.CallActor, "receive", stamp_before("t_received"))
    patch(ex.SelfServe, "claim", stamp_after("t_claimed", first=True))  # (then one that finds none)
    patch(ex, "dispatch", stamp_after("t_dispatched"))
    patch(ex.ExecutorActor, "receive", stamp_before("t_settled", only="CallSettled"))
    patch(ex, "finalize", stamp_after("t_finalized"))
    # The reply is set right after cleanup.
    patch(ex.ExecutorActor, "_cleanup", stamp_after("t_replied"))

    def undo() -> None:
        for owner, name, original in reversed(saved):
            setattr(owner, name, original)

    return undo


def measure_trip(batches: int = 3000, *, observed: bool = False) -> list[tuple[str, float, float]]:
    """(segment, median µs, p90 µs) for each step of a one-call batch: the
    self-served trip, or (``observed``) the executor's path, forced by a
    no-op ``tools/result`` listener."""
    points = EXECUTOR_POINTS if observed else SERVED_POINTS
    stamps: dict[str, int] = {}
    deltas: dict[str, list[float]] = {label: [] for label, _ in points[1:]}
    totals: list[float] = []
    undo = _instrument(stamps)
    try:
        with ToolRuntime() as rt:
            rt.tools.register(noop_tool())
            if observed:
                rt.events.on("tools/result", lambda execution, result: None)
            batch = noop_batch(1)
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
                for (_, prev), (label, key) in zip(points, points[1:]):
                    deltas[label].append((stamps[key] - stamps[prev]) / 1000)
                totals.append((stamps["t_returned"] - stamps["t_call"]) / 1000)
    finally:
        undo()
    rows = []
    for label, values in deltas.items():
        values.sort()
        rows.append((label, float(statistics.median(values)), values[int(len(values) * 0.9)]))
    totals.sort()
    rows.append(("total (one-call batch, instrumented)", float(statistics.median(totals)), totals[int(len(totals) * 0.9)]))
    return rows


# --------------------------------------------------------------------------
# Hand-off floor
# --------------------------------------------------------------------------


def measure_pingpong(rounds: int = 20_000) -> dict[str, float]:
    """Round trip between two of our actors (two hand-offs), and a
    ``queue.SimpleQueue`` ping-pong between two bare threads, in µs."""
    import queue

    from dsh_actors.actors import ActorBase, ActorGroup
    from dsh_actors.scheduling.executor import _tell

    class Echo(ActorBase):
        def receive(self, message: Any) -> None:
            message.set_result(None)

    class Relay(ActorBase):
        def __init__(self, echo: Any) -> None:
            super().__init__()
            self.echo = echo

        def receive(self, message: Any) -> None:
            _tell(self.echo, message)

    group = ActorGroup()
    try:
        echo = Echo.spawn(group)
        samples = []
        for i in range(rounds + 500):
            done: Future[None] = Future()
            start = time.perf_counter_ns()
            _tell(echo, done)
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
    from dsh_actors.pipeline.results import freeze_result, render_success
    from dsh_actors.registry import check_guards, executable, execution_mode
    from dsh_actors.pipeline.intake import check_batch, parse_arguments

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
        rows.append(("executable() lookup (cached view)", _per_call_us(lambda: executable(rt.state, "noop", None, None))))
        rows.append(
            ("classify: execution_mode (lookup + classifier)", _per_call_us(lambda: execution_mode(rt.state, "noop", args, None, None)))
        )
        rows.append(("check_guards (none installed)", _per_call_us(lambda: check_guards(rt.state, call.execution))))

        def prepared() -> None:
            c = stages.begin_call(0, "c0", "noop", {"i": 1}, signal, None, None)
            stages.prepare(rt, c)

        begin_us = rows[2][1]
        rows.append(("prepare (no listeners, no guards)", _per_call_us(prepared) - begin_us))
        rows.append(
            ("fused body signal: AbortSignal.any(caller, stop) + close", _per_call_us(lambda: AbortSignal.any(signal, stop).close()))
        )
        rows.append(("  one parent: AbortSignal.any(caller) + close", _per_call_us(lambda: AbortSignal.any(signal).close())))
        rows.append(("body + argument validation (define_tool wrapper)", _per_call_us(lambda: reg.definition.execute(args, None))))
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
        rows.append(("tools/result emit, no listeners", _per_call_us(lambda: rt.events.emit("tools/result", call.execution, result))))
        rows.append(("ToolCallResult record", _per_call_us(lambda: ToolCallResult("c0", result))))
        rows.append(("one call inline (begin+prepare+dispatch+finalize)", _per_call_us(finalized)))
        rows.append(
            (
                "rt.tools.dispatch(input): one call inline via the facade",
                _per_call_us(lambda: rt.tools.dispatch(inp), n=10_000),
            )
        )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one call's trip, hop by hop")
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--batches", type=int, default=3000)
    args = parser.parse_args(argv)
    out: dict[str, Any] = {}
    for key, observed, title in (
        ("trip", False, "self-served (nothing observes it)"),
        ("trip_observed", True, "the executor's path (a tools/result listener)"),
    ):
        print(f"one-call batch, {title}, step by step (µs: median, p90)")
        trip = measure_trip(args.batches, observed=observed)
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
