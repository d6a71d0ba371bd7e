"""Where ``overhead.otel_marginal_us`` goes: the realistic configuration
beside variants of it that add one piece of ``policies.otel`` at a time.

* ``realistic``: the realistic configuration (``scheduling.realistic``).
* ``null hooks``: plus the policy's shape with nothing in it (a prepended
  ``tools/pre-execute`` listener that delegates, a guard returning None, a
  ``tools/result`` observer, a ``tools/change`` listener): what the shared
  protocol charges for the hooks themselves.
* ``otel, no-op providers``: plus ``policies.otel`` on OpenTelemetry's no-op
  providers (the policy's own work and the API's, no SDK).
* ``otel, SDK tracer only`` / ``otel, SDK meter only``: one of the two SDK
  providers, the other no-op.
* ``otel``: both SDK providers, as in ``overhead.otel_marginal_us`` (spans
  through a ``BatchSpanProcessor`` to an exporter that drops them, the
  histogram into an in-memory reader).
* ``otel, spans sampled out``: the same with an SDK tracer provider whose
  sampler drops every span (``ALWAYS_OFF``; the histogram is recorded):
  what an application that samples pays for the calls it does not trace.

For each: the marginal µs per call between batches of 10 and 100 (as the
benchmark takes it), the CPU per call of the 100-call batch (every thread
of the process: ``time.process_time``), and, measured apart on one thread
(``rt.tools.dispatch``: no hop), the CPU per call and the part of it the
cyclic garbage collector took (its CPU time). The runtimes are measured rep by rep, so a
slow patch of the machine hits them all; only the ratios within one run
count.

    ./dev python -m benchmarks.otel_cost [--reps N]

``--instructions`` counts instructions instead (``valgrind --tool=callgrind``,
every thread of the process, ``PYTHONHASHSEED=0``; load-independent, unlike
the times): per call, the difference between a run of K and one of 3K
100-call batches (after a warm-up) of each variant, and, on one thread, the
difference between K×1000 and 3K×1000 repetitions of each SDK piece the
policy calls, the policy's way (``--pieces``; the SDK alone, no runtime):

* ``SDK span``: ``start_span`` of ``execute_tool noop`` with the five
  attributes, the caller's context passed once, under a sampled parent,
  then ``end()`` (the ``BatchSpanProcessor`` to an exporter that drops
  the spans, its export worker counted);
* ``SDK span, no attributes``: the same without them;
* ``SDK span, start only``: ``start_span`` with the attributes, never
  ended (no processor work, no export);
* ``SDK histogram point``: ``record`` of one duration with the two
  attributes of a success, the call's span current;
* ``attach the span``: ``attach(set_span_in_context(span, context))`` in a
  fresh copy of the context (what makes the body's spans children).

    ./dev python -m benchmarks.otel_cost --instructions [--batches K] [--only LABEL ...]

Used to write the OpenTelemetry part of ``benchmarks/HOPS.md``; not part
of ``python -m benchmarks``.
"""

from __future__ import annotations

import argparse
import contextvars
import gc
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import Any

from dsh_actors import AbortController, ToolExecutionInput, ToolRuntime

from ._util import callgrind_instructions, median
from .scheduling import CAP, OtelSdk, noop_batch, noop_tool, realistic, realistic_batch, realistic_tool


def _null_hooks(rt: ToolRuntime) -> None:
    def pre_execute(execution: Any, next_: Callable[[], Any]) -> Any:
        return next_()

    def guard(execution: Any) -> None:
        return None

    def on_result(execution: Any, result: Any) -> None:
        return None

    rt.events.on("tools/pre-execute", pre_execute, prepend=True)
    rt.events.on("tools/result", on_result, prepend=True)
    rt.events.on("tools/change", lambda *args: None)
    rt.tools.guard(guard)


def _variants(sdk: OtelSdk) -> dict[str, Callable[[ToolRuntime], None]]:
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    import policies.otel as otel

    def policy(tracer_provider: Any, meter_provider: Any) -> Callable[[ToolRuntime], None]:
        return lambda rt: rt.use(otel, tracer_provider=tracer_provider, meter_provider=meter_provider)

    no_tracer, no_meter = trace.NoOpTracerProvider(), metrics.NoOpMeterProvider()
    # What an application that samples (here: drops every span) pays.
    sampled_out = TracerProvider(sampler=ALWAYS_OFF)
    return {
        "realistic": lambda rt: None,
        "null hooks": _null_hooks,
        "otel, no-op providers": policy(no_tracer, no_meter),
        "otel, SDK meter only": policy(no_tracer, sdk.meter_provider),
        "otel, SDK tracer only": policy(sdk.tracer_provider, no_meter),
        "otel": policy(sdk.tracer_provider, sdk.meter_provider),
        "otel, spans sampled out": policy(sampled_out, sdk.meter_provider),
    }


def _inline(rt: ToolRuntime, agent: Any, calls: int = 4000) -> tuple[float, float]:
    """(CPU µs per call, GC µs per call) of ``rt.tools.dispatch`` on this thread."""
    inp = ToolExecutionInput(
        call_id="c0", name="noop", arguments={"i": 1}, signal=AbortController().signal, agent=agent
    )
    for _ in range(calls // 4):
        rt.tools.dispatch(inp)
    spent = [0.0, 0.0]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            spent[1] = time.thread_time()
        else:
            spent[0] += time.thread_time() - spent[1]

    gc.callbacks.append(on_gc)
    try:
        start = time.process_time()
        for _ in range(calls):
            rt.tools.dispatch(inp)
        cpu = time.process_time() - start
    finally:
        gc.callbacks.remove(on_gc)
    return cpu / calls * 1e6, spent[0] / calls * 1e6


def _pieces(sdk: OtelSdk) -> dict[str, Callable[[], Any]]:
    """The SDK's work per call, the policy's way, without the runtime."""
    from opentelemetry import context, trace
    from opentelemetry.trace import SpanKind

    tracer = trace.get_tracer(__name__, tracer_provider=sdk.tracer_provider)
    histogram = sdk.meter_provider.get_meter(__name__).create_histogram("gen_ai.execute_tool.duration", unit="s")
    shared = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "noop",
        "gen_ai.tool.type": "function",
        "gen_ai.tool.description": "Does nothing.",
    }
    ok = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "noop"}
    context.attach(trace.set_span_in_context(tracer.start_span("the agent's step")))
    kind = SpanKind.INTERNAL

    def span(with_attributes: bool = True, end: bool = True) -> Callable[[], Any]:
        def piece() -> None:
            current = context.get_current()
            attributes = None
            if with_attributes:
                attributes = shared.copy()
                attributes["gen_ai.tool.call.id"] = "c1"
            started = tracer.start_span("execute_tool noop", current, kind=kind, attributes=attributes)
            if end:
                started.end()

        return piece

    def attach() -> None:
        current = context.get_current()
        contextvars.copy_context().run(context.attach, trace.set_span_in_context(trace.INVALID_SPAN, current))

    return {
        "SDK span": span(),
        "SDK span, no attributes": span(with_attributes=False),
        "SDK span, start only": span(end=False),
        "SDK histogram point": lambda: histogram.record(0.001, ok),
        "attach the span": attach,
    }


def _run_one(label: str, count: int) -> None:
    """What one counted process runs: ``count`` 100-call batches of one
    variant (or ``count`` × 1000 repetitions of one SDK piece)."""
    sdk = OtelSdk()
    pieces = _pieces(sdk)
    if label in pieces:
        piece = pieces[label]
        for _ in range(count * 1000):
            piece()
        sdk.shutdown()
        return
    with ToolRuntime(max_parallel_tool_calls=CAP) as rt:
        rt.tools.register(realistic_tool(noop_tool()))
        agent = realistic(rt)
        _variants(sdk)[label](rt)
        batch = realistic_batch(noop_batch(100), agent)
        for _ in range(6):
            rt.tools.execute(batch)
        for _ in range(count):
            rt.tools.execute(batch)
    sdk.shutdown()


def _instructions(label: str, count: int) -> int:
    return callgrind_instructions("benchmarks.otel_cost", ["--run-one", label, "--batches", str(count)])


def _count_instructions(labels: Sequence[str], batches: int) -> None:
    print(f"instructions per call (callgrind; {batches} vs {3 * batches} batches of 100, or ×1000 repetitions)")
    for label in labels:
        low, high = _instructions(label, batches), _instructions(label, 3 * batches)
        per = 1000 if label in _PIECES else 100  # repetitions per count, calls per batch
        print(f"{label:28s} {(high - low) / (2 * batches * per):10.0f}", flush=True)


_PIECES = (
    "SDK span",
    "SDK span, no attributes",
    "SDK span, start only",
    "SDK histogram point",
    "attach the span",
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="where overhead.otel_marginal_us goes")
    parser.add_argument("--reps", type=int, default=40)
    parser.add_argument("--instructions", action="store_true", help="count instructions under valgrind instead")
    parser.add_argument("--pieces", action="store_true", help="with --instructions: the SDK pieces too")
    parser.add_argument("--batches", type=int, default=3, help="with --instructions: K (K vs 3K batches)")
    parser.add_argument("--only", nargs="*", default=None, help="with --instructions: these variants or pieces")
    parser.add_argument("--run-one", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run_one is not None:
        _run_one(args.run_one, args.batches)
        return 0
    if args.instructions:
        labels = args.only or [
            "realistic",
            "null hooks",
            "otel, no-op providers",
            "otel, SDK meter only",
            "otel, SDK tracer only",
            "otel",
            "otel, spans sampled out",
            *(_PIECES if args.pieces else ()),
        ]
        _count_instructions(labels, args.batches)
        return 0
    try:
        sdk = OtelSdk()
    except ImportError:
        print("the OpenTelemetry SDK is not installed (the otel and test extras)", file=sys.stderr)
        return 1
    variants = _variants(sdk)
    with ExitStack() as stack:
        runtimes: dict[str, tuple[ToolRuntime, Any]] = {}
        for label, install in variants.items():
            rt = stack.enter_context(ToolRuntime(max_parallel_tool_calls=CAP))
            rt.tools.register(realistic_tool(noop_tool()))
            agent = realistic(rt)
            install(rt)
            runtimes[label] = (rt, agent)
        batches = {
            label: {n: realistic_batch(noop_batch(n), agent) for n in (10, 100)}
            for label, (_, agent) in runtimes.items()
        }
        for _ in range(5):
            for label, (rt, _) in runtimes.items():
                rt.tools.execute(batches[label][100])
        wall: dict[str, dict[int, list[float]]] = {label: {10: [], 100: []} for label in runtimes}
        cpu: dict[str, list[float]] = {label: [] for label in runtimes}
        for _ in range(args.reps):
            for label, (rt, _) in runtimes.items():
                for n in (10, 100):
                    cpu_start, start = time.process_time(), time.perf_counter()
                    rt.tools.execute(batches[label][n])
                    wall[label][n].append((time.perf_counter() - start) * 1e6)
                    if n == 100:
                        cpu[label].append((time.process_time() - cpu_start) * 1e6 / n)
        inline = {label: _inline(rt, agent) for label, (rt, agent) in runtimes.items()}
    sdk.shutdown()
    base_marginal = base_cpu = base_inline = 0.0
    print("variant                   marginal µs (× realistic)   CPU/call µs (×)   one thread: CPU µs (×), GC µs")
    for label in runtimes:
        marginal = (median(wall[label][100]) - median(wall[label][10])) / 90
        per_call = median(cpu[label])
        one, collected = inline[label]
        if label == "realistic":
            base_marginal, base_cpu, base_inline = marginal, per_call, one
        print(
            f"{label:24s} {marginal:8.1f} ({marginal / base_marginal:4.2f}×)"
            f"        {per_call:8.1f} ({per_call / base_cpu:4.2f}×)"
            f"    {one:7.1f} ({one / base_inline:4.2f}×), {collected:4.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
