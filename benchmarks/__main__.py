"""Scheduling benchmarks of dsh-actors: ``python -m benchmarks`` (also
``./dev bench`` and ``dsh-actors bench``).

Runs every workload against baselines measured in the same process and the
same run (see ``benchmarks/scheduling.py``), shows a progress bar on stderr,
prints a table on stdout and, with ``--json PATH``, writes the figures as
JSON (flat dotted keys, floats). Targets are reported with ✓/✗, never
asserted. ``--trace PATH`` also writes a Chrome trace of the pool workloads
(open it in https://ui.perfetto.dev; see benchmarks/README.md).

    python -m benchmarks [--quick] [--json PATH] [--trace PATH] [--only SECTION ...]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from . import scheduling
from ._util import Progress, Row, Target, fmt_ms, fmt_us, machine, ratio, render_table

SECTIONS = ("overhead", "pool", "abort", "agents", "async", "ptc", "ray")
OPT_IN = ("soak",)
"""Sections that run only when named in ``--only`` (they take minutes)."""


def run(quick: bool, trace_path: str | None, only: Sequence[str]) -> dict[str, Any]:
    plan = scheduling.Plan(quick=quick)
    wanted = set(only or SECTIONS)
    progress = Progress(plan.steps())
    report: dict[str, Any] = {"quick": quick, "machine_start": machine()}
    started = time.perf_counter()
    try:
        if "overhead" in wanted:
            report["overhead"] = scheduling.run_overhead(plan, progress)
        if "pool" in wanted:
            recorders: list[Any] | None = [] if trace_path else None
            report["pool"] = scheduling.run_pool(plan, progress, recorders)
            if trace_path and recorders is not None:
                from policies.trace import write_trace

                events: list[dict[str, Any]] = []
                for rec in recorders:
                    events.extend(rec.trace_events())
                write_trace(trace_path, events)
                report["trace_path"] = trace_path
        if "abort" in wanted:
            report["abort"] = scheduling.run_abort(plan, progress)
        if "agents" in wanted:
            report["agents"] = scheduling.run_agents(plan, progress)
        if "async" in wanted:
            from . import asyncio_bench

            progress.note("async")
            report["async"] = asyncio_bench.run(plan)
            progress.advance("async")
        if "ptc" in wanted:
            from . import ptc

            progress.note("ptc")
            report["ptc"] = ptc.run(plan)
            progress.advance("ptc")
        if "ray" in wanted:
            from . import ray as ray_section

            progress.note("ray")
            report["ray"] = ray_section.run(plan)
            progress.advance("ray")
        if "soak" in wanted:
            from . import soak

            progress.note("soak")
            report["soak"] = soak.run()
    finally:
        progress.close()
    report["seconds"] = time.perf_counter() - started
    report["machine_end"] = machine()
    return report


# --------------------------------------------------------------------------
# Flat figures and targets
# --------------------------------------------------------------------------


def figures(report: dict[str, Any]) -> dict[str, float]:
    """The flat dotted keys of issue 7 (floats), plus a few more."""
    out: dict[str, float] = {}
    m0, m1 = report["machine_start"], report["machine_end"]
    out["machine.cpu_count"] = m0["cpu_count"]
    out["machine.cpu_usable"] = m0["cpu_usable"]
    out["machine.load_1m"] = m0["load_1m"]
    out["machine.load_5m"] = m0["load_5m"]
    out["machine.load_15m"] = m0["load_15m"]
    out["machine.load_1m_end"] = m1["load_1m"]
    oh = report.get("overhead")
    if oh:
        out["overhead.dsh_marginal_us"] = oh["dsh_marginal_us"]
        out["overhead.threadpool_marginal_us"] = oh["threadpool_marginal_us"]
        out["overhead.asyncio_marginal_us"] = oh["asyncio_marginal_us"]
        out["overhead.direct_marginal_us"] = oh["direct_marginal_us"]
        out["overhead.dsh_n1_us"] = oh["dsh_n1_us"]
        out["overhead.threadpool_n1_us"] = oh["threadpool_n1_us"]
        out["overhead.asyncio_n1_us"] = oh["asyncio_n1_us"]
        out["overhead.direct_n1_us"] = oh["direct_n1_us"]
        for n, row in oh["sizes"].items():
            for key in ("dsh", "threadpool", "asyncio", "direct"):
                out[f"overhead.n{n}.{key}_per_call_us"] = row[key] / n
        out["scale.n10000_marginal_us"] = oh["dsh_n10000_marginal_us"]
        out["scale.n100_marginal_us"] = oh["dsh_marginal_us"]
        out["scale.threadpool_n10000_marginal_us"] = oh["threadpool_n10000_marginal_us"]
        out["scale.max_threads"] = float(oh["max_threads"])
        out["scale.threads_before"] = float(oh["threads_before"])
        out["scale.cap"] = float(scheduling.CAP)
        out["overhead.realistic_marginal_us"] = oh["realistic_marginal_us"]
        out["overhead.realistic_n1_us"] = oh["realistic_n1_us"]
        out["overhead.realistic_unmarked_marginal_us"] = oh["unmarked_marginal_us"]
        out["overhead.realistic_unmarked_n1_us"] = oh["unmarked_n1_us"]
        if "otel_marginal_us" in oh:
            out["overhead.otel_marginal_us"] = oh["otel_marginal_us"]
        for n in scheduling.REALISTIC_SIZES:
            out[f"overhead.n{n}.realistic_per_call_us"] = oh["sizes"][n]["realistic"] / n
            out[f"overhead.n{n}.decorated_per_call_us"] = oh["sizes"][n]["decorated"] / n
        out["overhead.decorated_marginal_us"] = oh["decorated_marginal_us"]
        out["overhead.decorated_n1_us"] = oh["decorated_n1_us"]
        out["overhead.async_marginal_us"] = oh["async_marginal_us"]
        out["overhead.async_n1_us"] = oh["async_n1_us"]
        out["scale.concurrent_peak_threads"] = float(oh["concurrent_peak_threads"])
        out["scale.concurrent_threads_bound"] = float(oh["concurrent_threads_bound"])
        out["scale.concurrent_threads_before"] = float(oh["concurrent_threads_before"])
        out["scale.concurrent_batches"] = float(oh["concurrent_batches"])
        out["scale.threads_after_burst"] = float(oh["threads_after_burst"])
        out["scale.idle_threads_bound"] = float(oh["idle_threads_bound"])
        out["scale.call_actor_budget"] = float(oh["concurrent_budget"])
    pool = report.get("pool")
    if pool:
        out["pool.sleep_overshoot_ms"] = pool["sleep_overshoot_ms"]
        for name in ("equal", "mixed", "barrier"):
            row = pool[name]
            for key in ("makespan_ms", "ideal_ms", "threadpool_ms", "nominal_ms", "lower_bound_ms", "best_ms"):
                out[f"pool.{name}.{key}"] = float(row[key])
            real = pool[f"realistic_{name}"]
            out[f"pool.realistic_{name}.makespan_ms"] = float(real["makespan_ms"])
            out[f"pool.realistic_{name}.ideal_ms"] = float(real["ideal_ms"])
    ab = report.get("abort")
    if ab:
        out["abort.settle_ms"] = ab["poll"]["settle_ms"]
        out["abort.settle_max_ms"] = ab["poll"]["max_ms"]
        out["abort.wait_settle_ms"] = ab["wait"]["settle_ms"]
    ag = report.get("agents")
    if ag:
        out["agents.dsh_calls_per_s"] = ag["dsh_calls_per_s"]
        out["agents.threadpool_calls_per_s"] = ag["threadpool_calls_per_s"]
        out["agents.dsh_round_ms"] = ag["dsh_round_ms"]
        out["agents.threadpool_round_ms"] = ag["threadpool_round_ms"]
    asy = report.get("async")
    if asy:
        out["pool.async.makespan_ms"] = asy["pool_makespan_ms"]
        out["pool.async.ideal_ms"] = asy["pool_ideal_ms"]
        out["pool.async.asyncio_ms"] = asy["pool_asyncio_ms"]
        out["agents.async_calls_per_s"] = asy["agents_calls_per_s"]
        out["agents.async_peak_threads"] = float(asy["agents_peak_threads"])
        out["agents.async_threads_before"] = float(asy["agents_threads_before"])
    ptc = report.get("ptc")
    if ptc and ptc.get("available"):
        for key, value in ptc.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out[f"ptc.{key}"] = float(value)
    rs = report.get("ray")
    if rs and rs.get("available"):
        for key, value in rs.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out[f"ray.{key}"] = float(value)
    if report.get("soak"):
        from . import soak

        out.update(soak.figures(report["soak"]))
    return {k: float(v) for k, v in out.items()}


def targets(f: dict[str, float]) -> dict[str, Target]:
    t: dict[str, Target] = {}
    if "overhead.dsh_marginal_us" in f:
        t["realistic"] = Target(
            "≤ 2× bare marginal",
            ratio(f["overhead.realistic_marginal_us"], f["overhead.dsh_marginal_us"]),
            2.0,
        )
        if "overhead.otel_marginal_us" in f:
            t["otel"] = Target(
                "≤ 1.3× realistic marginal",
                ratio(f["overhead.otel_marginal_us"], f["overhead.realistic_marginal_us"]),
                1.3,
            )
        t["decorated"] = Target(
            "≤ 1.3× bare marginal",
            ratio(f["overhead.decorated_marginal_us"], f["overhead.dsh_marginal_us"]),
            1.3,
        )
        t["marginal"] = Target(
            "≤ 3× threadpool",
            ratio(f["overhead.dsh_marginal_us"], f["overhead.threadpool_marginal_us"]),
            3.0,
        )
        t["concurrent"] = Target(
            f"≤ documented bound {f['scale.concurrent_threads_bound']:.0f}",
            f["scale.concurrent_peak_threads"],
            f["scale.concurrent_threads_bound"],
        )
        t["after_burst"] = Target(
            f"≤ idle bound {f['scale.idle_threads_bound']:.0f} 1 s after the burst",
            f["scale.threads_after_burst"],
            f["scale.idle_threads_bound"],
        )
        t["n1"] = Target("≤ 2.0× threadpool", ratio(f["overhead.dsh_n1_us"], f["overhead.threadpool_n1_us"]), 2.0)
        t["scale"] = Target(
            "≤ 1.2× n100 marginal", ratio(f["scale.n10000_marginal_us"], f["scale.n100_marginal_us"]), 1.2
        )
        t["threads"] = Target(f"≤ cap + 10 = {f['scale.cap'] + 10:.0f}", f["scale.max_threads"], f["scale.cap"] + 10)
    for name in ("equal", "mixed", "barrier"):
        key = f"pool.{name}.makespan_ms"
        if key in f:
            t[f"pool.{name}"] = Target("≤ 1.03× ideal", ratio(f[key], f[f"pool.{name}.ideal_ms"]), 1.03)
            real = f"pool.realistic_{name}.makespan_ms"
            t[f"pool.realistic_{name}"] = Target(
                "≤ 1.03× ideal", ratio(f[real], f[f"pool.realistic_{name}.ideal_ms"]), 1.03
            )
    if "overhead.async_marginal_us" in f and "overhead.dsh_marginal_us" in f:
        t["async.marginal"] = Target(
            "≤ 1.2× sync marginal", ratio(f["overhead.async_marginal_us"], f["overhead.dsh_marginal_us"]), 1.2
        )
        t["async.n1"] = Target("≤ 2× sync one-call", ratio(f["overhead.async_n1_us"], f["overhead.dsh_n1_us"]), 2.0)
    if "pool.async.makespan_ms" in f:
        t["pool.async"] = Target("≤ 1.03× ideal", ratio(f["pool.async.makespan_ms"], f["pool.async.ideal_ms"]), 1.03)
        bound = f["agents.async_threads_before"] + 4 + 64
        t["agents.async_threads"] = Target(
            f"≤ {bound:.0f} (not growing with agents)", f["agents.async_peak_threads"], bound
        )
    if "abort.settle_ms" in f:
        t["abort"] = Target("≤ 2 ms", f["abort.settle_ms"], 2.0)
        t["abort.wait"] = Target("≤ 2 ms", f["abort.wait_settle_ms"], 2.0)
    if "soak.rss_growth_mb" in f:
        from .soak import GROWTH_LIMIT_MB

        t["soak"] = Target(f"≤ ±{GROWTH_LIMIT_MB:.0f} MB per 100k calls", abs(f["soak.rss_growth_mb"]), GROWTH_LIMIT_MB)
    if "ray.cpu_bound_speedup" in f:
        t["ray.cpu_bound"] = Target(
            "speedup ≥ 1.6 (Ray ÷ native makespan ≤ 0.625)",
            ratio(f["ray.ray_makespan_ms"], f["ray.native_makespan_ms"]),
            1 / 1.6,
        )
    return t


def table(report: dict[str, Any], f: dict[str, float]) -> str:
    t = targets(f)
    rows: list[Row] = []
    oh = report.get("overhead")
    if oh:
        for n, row in oh["sizes"].items():
            per = {k: row[k] / n for k in ("dsh", "threadpool", "asyncio", "direct")}
            rows.append(
                Row(
                    "overhead",
                    f"{n:,} no-op calls, per call",
                    fmt_us(per["dsh"]),
                    f"tpe {fmt_us(per['threadpool'])} · asyncio {fmt_us(per['asyncio'])} · direct {fmt_us(per['direct'])}",
                    f"{ratio(per['dsh'], per['threadpool']):.1f}× tpe",
                )
            )
        rows.append(
            Row(
                "overhead",
                "marginal call, realistic (log, guard, listener, timeout)",
                fmt_us(f["overhead.realistic_marginal_us"]),
                f"bare {fmt_us(f['overhead.dsh_marginal_us'])} · tpe {fmt_us(f['overhead.threadpool_marginal_us'])}",
                f"{t['realistic'].value:.2f}× bare",
                t["realistic"],
            )
        )
        rows.append(
            Row(
                "overhead",
                "marginal call, realistic without the tool/start marker",
                fmt_us(f["overhead.realistic_unmarked_marginal_us"]),
                f"realistic {fmt_us(f['overhead.realistic_marginal_us'])}",
                f"marker {ratio(f['overhead.realistic_marginal_us'], f['overhead.realistic_unmarked_marginal_us']):.2f}×",
            )
        )
        if "overhead.otel_marginal_us" in f:
            rows.append(
                Row(
                    "overhead",
                    "marginal call, realistic + policies.otel (SDK, spans dropped)",
                    fmt_us(f["overhead.otel_marginal_us"]),
                    f"realistic {fmt_us(f['overhead.realistic_marginal_us'])}",
                    f"{t['otel'].value:.2f}× realistic",
                    t["otel"],
                )
            )
        rows.append(
            Row(
                "overhead",
                "marginal call, @tool of three ints (pydantic-core)",
                fmt_us(f["overhead.decorated_marginal_us"]),
                f"bare define_tool {fmt_us(f['overhead.dsh_marginal_us'])}",
                f"{t['decorated'].value:.2f}× bare",
                t["decorated"],
            )
        )
        rows.append(
            Row(
                "overhead",
                "one-call batch, realistic",
                fmt_us(f["overhead.realistic_n1_us"]),
                f"bare {fmt_us(f['overhead.dsh_n1_us'])} · tpe {fmt_us(f['overhead.threadpool_n1_us'])}",
                f"{ratio(f['overhead.realistic_n1_us'], f['overhead.threadpool_n1_us']):.2f}× tpe",
            )
        )
        rows.append(
            Row(
                "overhead",
                "marginal call, bare (slope 10→100)",
                fmt_us(f["overhead.dsh_marginal_us"]),
                f"tpe {fmt_us(f['overhead.threadpool_marginal_us'])} · asyncio {fmt_us(f['overhead.asyncio_marginal_us'])}",
                f"{ratio(f['overhead.dsh_marginal_us'], f['overhead.threadpool_marginal_us']):.1f}× tpe",
                t["marginal"],
            )
        )
        rows.append(
            Row(
                "overhead",
                "one-call batch (fixed cost)",
                fmt_us(f["overhead.dsh_n1_us"]),
                f"tpe {fmt_us(f['overhead.threadpool_n1_us'])} · asyncio {fmt_us(f['overhead.asyncio_n1_us'])}",
                f"{t['n1'].value:.2f}× tpe",
                t["n1"],
            )
        )
        rows.append(
            Row(
                "scale",
                "marginal call, 10,000-call batch (slope 1k→10k)",
                fmt_us(f["scale.n10000_marginal_us"]),
                f"n100 {fmt_us(f['scale.n100_marginal_us'])} · tpe {fmt_us(f['scale.threadpool_n10000_marginal_us'])}",
                f"{t['scale'].value:.2f}× n100",
                t["scale"],
            )
        )
        rows.append(
            Row(
                "scale",
                "peak threads in the 10,000-call batch",
                f"{f['scale.max_threads']:.0f}",
                f"{f['scale.threads_before']:.0f} before it, cap {f['scale.cap']:.0f}",
                "",
                t["threads"],
            )
        )
        rows.append(
            Row(
                "scale",
                f"threads added, {f['scale.concurrent_batches']:.0f} concurrent 10-call batches at cap 10",
                f"{f['scale.concurrent_peak_threads']:.0f}",
                f"{f['scale.concurrent_threads_before']:.0f} before · call-actor budget "
                f"{f['scale.call_actor_budget']:.0f}",
                "",
                t["concurrent"],
            )
        )
    pool = report.get("pool")
    if pool:
        for name, label in (("equal", "64 × 10 ms"), ("mixed", "64 × 2–18 ms"), ("barrier", "64 × 10 ms, 4 exclusive")):
            rows.append(
                Row(
                    "pool",
                    f"{label}, cap 8",
                    fmt_ms(f[f"pool.{name}.makespan_ms"]),
                    f"ideal {fmt_ms(f[f'pool.{name}.ideal_ms'])} · tpe {fmt_ms(f[f'pool.{name}.threadpool_ms'])}",
                    f"{t[f'pool.{name}'].value:.3f}× ideal",
                    t[f"pool.{name}"],
                )
            )
        for name, label in (("equal", "64 × 10 ms"), ("mixed", "64 × 2–18 ms"), ("barrier", "64 × 10 ms, 4 exclusive")):
            rows.append(
                Row(
                    "pool",
                    f"{label}, cap 8, realistic",
                    fmt_ms(f[f"pool.realistic_{name}.makespan_ms"]),
                    f"ideal {fmt_ms(f[f'pool.realistic_{name}.ideal_ms'])}",
                    f"{t[f'pool.realistic_{name}'].value:.3f}× ideal",
                    t[f"pool.realistic_{name}"],
                )
            )
    ab = report.get("abort")
    if ab:
        rows.append(
            Row(
                "abort",
                "16 calls polling every 1 ms, cap 8: abort → settled",
                fmt_ms(f["abort.settle_ms"]),
                f"worst {fmt_ms(f['abort.settle_max_ms'])}",
                "",
                t["abort"],
            )
        )
        rows.append(
            Row(
                "abort",
                "16 calls waiting on the signal, cap 8",
                fmt_ms(f["abort.wait_settle_ms"]),
                "",
                "",
                t["abort.wait"],
            )
        )
    ag = report.get("agents")
    if ag:
        rows.append(
            Row(
                "agents",
                "100 agents × batch of 10, concurrently",
                f"{f['agents.dsh_calls_per_s']:,.0f} calls/s",
                f"tpe {f['agents.threadpool_calls_per_s']:,.0f} calls/s",
                f"{ratio(f['agents.dsh_calls_per_s'], f['agents.threadpool_calls_per_s']):.2f}× tpe",
            )
        )
    if "async.marginal" in t:
        rows.append(
            Row(
                "async",
                "marginal async call (execute_async from a running loop)",
                fmt_us(f["overhead.async_marginal_us"]),
                f"sync {fmt_us(f['overhead.dsh_marginal_us'])} · asyncio {fmt_us(f['overhead.asyncio_marginal_us'])}",
                f"{t['async.marginal'].value:.2f}× sync",
                t["async.marginal"],
            )
        )
        rows.append(
            Row(
                "async",
                "one-call async batch",
                fmt_us(f["overhead.async_n1_us"]),
                f"sync {fmt_us(f['overhead.dsh_n1_us'])}",
                f"{t['async.n1'].value:.2f}× sync",
                t["async.n1"],
            )
        )
    asy = report.get("async")
    if asy:
        rows.append(
            Row(
                "async",
                "64 × asyncio.sleep(10 ms), cap 8",
                fmt_ms(f["pool.async.makespan_ms"]),
                f"ideal {fmt_ms(f['pool.async.ideal_ms'])} · asyncio {fmt_ms(f['pool.async.asyncio_ms'])}",
                f"{t['pool.async'].value:.3f}× ideal",
                t["pool.async"],
            )
        )
        rows.append(
            Row(
                "async",
                "1,000 agents × 10 async calls (5 ms) on one loop",
                f"{f['agents.async_calls_per_s']:,.0f} calls/s",
                f"peak {f['agents.async_peak_threads']:.0f} threads",
                "",
                t["agents.async_threads"],
            )
        )
    ptc = report.get("ptc")
    if ptc is not None:
        if ptc.get("available"):
            for key, label in (
                ("subcall_us", "one sub-call round trip"),
                ("warm_start_us", "warm run's start (submit → first sub-call)"),
                ("warm_run_us", "warm trivial run (return 1)"),
            ):
                if key in ptc:
                    rows.append(Row("ptc", label, fmt_us(ptc[key]), ptc.get(f"{key}_baseline", ""), ""))
        else:
            rows.append(Row("ptc", "sub-call round trip, warm start", "skipped", "", "", note=ptc.get("note", "")))
    if "soak.rss_growth_mb" in f:
        rows.append(
            Row(
                "soak",
                f"RSS per 100k logged calls ({f['soak.calls']:,.0f} calls, file-backed session)",
                f"{f['soak.rss_growth_mb']:+.2f} MB",
                f"unlogged {f['soak.unlogged_rss_growth_mb']:+.2f} MB",
                f"{f['soak.rss_start_mb']:.0f} → {f['soak.rss_end_mb']:.0f} MB",
                t["soak"],
            )
        )
    rs = report.get("ray")
    if rs is not None:
        if rs.get("available"):
            rows.append(
                Row(
                    "ray",
                    f"{rs['calls']} × ~200 ms pure-Python CPU, cap {rs['cap']}, 2 local workers",
                    fmt_ms(f["ray.ray_makespan_ms"]),
                    f"native {fmt_ms(f['ray.native_makespan_ms'])}",
                    f"{f['ray.cpu_bound_speedup']:.2f}× faster",
                    t["ray.cpu_bound"],
                )
            )
            rows.append(
                Row(
                    "ray",
                    "no-op call's round trip through Ray (added to a one-call batch)",
                    fmt_ms(f["ray.subcall_overhead_ms"]),
                    f"one-call batch {fmt_ms(f['ray.subcall_round_trip_ms'])} · native {fmt_ms(f['ray.native_call_ms'])}",
                    "",
                )
            )
        else:
            rows.append(Row("ray", "CPU-bound speedup, round trip", "skipped", "", "", note=rs.get("note", "")))
    m = report["machine_start"]
    header = [
        f"dsh-actors scheduling benchmarks ({'quick' if report['quick'] else 'full'} run, {report['seconds']:.1f}s) — "
        f"{m['cpu_count']:.0f} CPUs ({m['cpu_usable']:.0f} usable), load {m['load_1m']:.2f}/{m['load_5m']:.2f}/"
        f"{m['load_15m']:.2f}, Python {m['python']}, pykka {m['pykka']}",
        "medians over repetitions after warm-up; baselines measured in the same run; tpe = ThreadPoolExecutor",
    ]
    if pool:
        header.append(
            f"pool ideal = zero-overhead rolling pool in model order, each call + {pool['sleep_overshoot_ms']:.3f} ms "
            "measured sleep(0.010) overshoot"
        )
    return render_table(rows, header)


def main(argv: Sequence[str] | None = None) -> int:
    prog = os.environ.get("DSH_ACTORS_BENCH_PROG") or "python -m benchmarks"  # set by dsh-actors bench
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Run the scheduling benchmarks against baselines measured in the same run and print one "
        "table (see benchmarks/README.md). Targets are reported with a check mark or a cross, never asserted.",
    )
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (finishes within 60 s on 2 cores)")
    parser.add_argument("--json", metavar="PATH", help="write the figures as JSON to PATH")
    parser.add_argument("--trace", metavar="PATH", help="write a Chrome trace of the pool workloads to PATH")
    parser.add_argument(
        "--only",
        nargs="+",
        choices=SECTIONS + OPT_IN,
        metavar="SECTION",
        help=f"run only these sections: {', '.join(SECTIONS)} (the scale rows are part of overhead); "
        f"and {', '.join(OPT_IN)}, only when named",
    )
    args = parser.parse_args(argv)
    report = run(args.quick, args.trace, args.only or ())
    f = figures(report)
    print(table(report, f))
    if args.trace:
        print(f"\ntrace of the pool workloads written to {args.trace} (open it in https://ui.perfetto.dev)")
    if args.json:
        t = targets(f)
        payload: dict[str, Any] = dict(f)
        payload["targets"] = {
            name: {"text": tg.text, "value": float(tg.value), "limit": float(tg.limit), "met": tg.met}
            for name, tg in t.items()
        }
        payload["details"] = _jsonable(report)
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(payload, fh, indent=2, ensure_ascii=False)
            fh.write("\n")
    return 0


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


if __name__ == "__main__":
    sys.exit(main())
