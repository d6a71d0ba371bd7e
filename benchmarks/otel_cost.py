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

Used to write the OpenTelemetry part of ``benchmarks/HOPS.md``; not part
of ``python -m benchmarks``.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import Any

from dsh_actors import AbortController, ToolExecutionInput, ToolRuntime

from ._util import median
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="where overhead.otel_marginal_us goes")
    parser.add_argument("--reps", type=int, default=40)
    args = parser.parse_args(argv)
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
