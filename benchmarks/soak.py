"""Soak: process memory over a long run of realistic logged calls.

A :class:`~dsh_actors.Session` on a file keeps no event in memory (only the
ids that pair calls with results), so a process that logs calls for hours
must stay flat. This runs ``--calls`` realistic calls (batches of 100, a
tool with arguments and a ~300-byte text result, every call logged to a
file-backed session) and samples the process's resident memory (RSS) every
100,000 calls after a warm-up. ``soak.rss_growth_mb`` is the growth per
100,000 calls (the least-squares slope of the samples); the baseline,
``soak.unlogged_rss_growth_mb``, is the same calls in the same process
without a log. The target: flat within about ±10 MB over 1,000,000 calls,
i.e. at most 1 MB per 100,000.

    ./dev bench --only soak                 # 1,000,000 calls each (a few minutes)
    ./dev python -m benchmarks.soak [--calls N] [--json PATH]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dsh_actors import (
    Agent,
    LogStep,
    Session,
    ToolBatchInput,
    ToolCall,
    ToolOutput,
    ToolRuntime,
    define_tool,
    text,
)

PER_SAMPLE = 100_000
"""Calls between two memory samples (the unit of ``soak.rss_growth_mb``)."""
BATCH = 100
WARM_UP = 20_000
"""Calls run before the first sample (allocator pools, caches, threads)."""

GROWTH_LIMIT_MB = 1.0
"""The target for ``soak.rss_growth_mb``: ±10 MB over 1,000,000 calls."""

_RESULT = "line {n}: " + "a realistic search hit with some context around the match, " * 4


def rss_mb() -> float:
    """The process's resident memory now, in MB (Linux: /proc/self/statm;
    elsewhere the peak, which can only grow)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            pages = int(statm.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 1e6
    except (OSError, ValueError, IndexError):  # pragma: no cover - not Linux
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 1e3 if sys.platform != "darwin" else peak / 1e6


def _slope(xs: list[float], ys: list[float]) -> float:
    n = len(xs)
    if n < 2:
        return float("nan")
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else float("nan")


def _tool() -> Any:
    def search(args: dict[str, Any], ctx: Any) -> str:
        return _RESULT.format(n=len(args["query"]))

    return define_tool(
        name="search",
        description="Search the workspace",
        parameters={"query": {"type": "string"}, "limit": {"type": "integer"}},
        output=ToolOutput(schema={"type": "string"}, render=lambda args, value: [text(value)]),
        execute=search,
    )


def soak(calls: int, *, logged: bool, folder: str) -> dict[str, Any]:
    """Run ``calls`` calls (plus the warm-up) and sample RSS every
    ``PER_SAMPLE`` calls; a JSON-ready dict."""
    session = Session(Path(folder) / f"soak-{'logged' if logged else 'unlogged'}.jsonl") if logged else None
    agent = Agent("soak", session=session)
    samples: list[tuple[float, float]] = []
    started = time.perf_counter()
    with ToolRuntime() as rt:
        rt.tools.register(_tool())
        done = 0
        step = 0
        total = WARM_UP + calls
        while done < total:
            if done == WARM_UP or (done > WARM_UP and (done - WARM_UP) % PER_SAMPLE == 0):
                gc.collect()
                samples.append(((done - WARM_UP) / PER_SAMPLE, rss_mb()))
            step += 1
            batch = ToolBatchInput(
                calls=tuple(
                    ToolCall(
                        id=f"call_{done + i:09d}",
                        name="search",
                        arguments={"query": f"where is the retry policy configured {done + i}", "limit": 10},
                    )
                    for i in range(BATCH)
                ),
                agent=agent,
                log=LogStep(turn=step, step=1) if logged else None,
            )
            rt.tools.execute(batch)
            done += BATCH
        gc.collect()
        samples.append(((done - WARM_UP) / PER_SAMPLE, rss_mb()))
    seconds = time.perf_counter() - started
    if session is not None:
        size_mb = os.path.getsize(session.path or "") / 1e6
        events = len(session)
        session.close()
    else:
        size_mb, events = 0.0, 0
    xs = [x for x, _ in samples]
    ys = [y for _, y in samples]
    return {
        "calls": calls,
        "events": events,
        "log_mb": size_mb,
        "seconds": seconds,
        "calls_per_s": (WARM_UP + calls) / seconds,
        "rss_start_mb": ys[0],
        "rss_end_mb": ys[-1],
        "rss_growth_total_mb": ys[-1] - ys[0],
        "rss_growth_mb": _slope(xs, ys),
        "samples": samples,
    }


def run(calls: int = 1_000_000) -> dict[str, Any]:
    """The logged soak and its unlogged baseline, in this process."""
    with tempfile.TemporaryDirectory(prefix="dsh-soak-") as folder:
        baseline = soak(calls, logged=False, folder=folder)
        logged = soak(calls, logged=True, folder=folder)
    return {"logged": logged, "unlogged": baseline}


def figures(report: dict[str, Any]) -> dict[str, float]:
    """Flat dotted keys: ``soak.rss_growth_mb`` (per 100,000 calls) and the rest."""
    logged, baseline = report["logged"], report["unlogged"]
    return {
        "soak.calls": float(logged["calls"]),
        "soak.rss_growth_mb": logged["rss_growth_mb"],
        "soak.rss_growth_total_mb": logged["rss_growth_total_mb"],
        "soak.rss_start_mb": logged["rss_start_mb"],
        "soak.rss_end_mb": logged["rss_end_mb"],
        "soak.log_mb": logged["log_mb"],
        "soak.calls_per_s": logged["calls_per_s"],
        "soak.unlogged_rss_growth_mb": baseline["rss_growth_mb"],
        "soak.unlogged_rss_growth_total_mb": baseline["rss_growth_total_mb"],
    }


def describe(f: dict[str, float]) -> str:
    met = abs(f["soak.rss_growth_mb"]) <= GROWTH_LIMIT_MB
    return (
        f"soak: {f['soak.calls']:,.0f} logged calls ({f['soak.log_mb']:.0f} MB of log, "
        f"{f['soak.calls_per_s']:,.0f} calls/s): RSS {f['soak.rss_start_mb']:.1f} → {f['soak.rss_end_mb']:.1f} MB, "
        f"{f['soak.rss_growth_mb']:+.2f} MB per 100k calls "
        f"(unlogged baseline {f['soak.unlogged_rss_growth_mb']:+.2f}) "
        f"{'✓' if met else '✗'} target ≤ ±{GROWTH_LIMIT_MB:.0f} MB per 100k (±10 MB over 1,000,000 calls)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1_000_000, help="calls per run after the warm-up")
    parser.add_argument("--json", metavar="PATH", help="write the figures as JSON to PATH")
    args = parser.parse_args(argv)
    report = run(args.calls)
    f = figures(report)
    print(describe(f))
    if args.json:
        Path(args.json).write_text(json.dumps({**f, "details": report}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
