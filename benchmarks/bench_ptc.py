"""PTC: the cost of one sub-call round trip and of a run's start.

* **sub-call round trip**: a program doing N sequential ``await
  tools.noop()``; per call = (run with N calls - run with none) / N. One
  round trip is: the worker writes a ``call`` line, the run's thread reads
  it, a sub-call thread dispatches it through the whole pipeline, the
  result goes back as a ``result`` line. For scale: the same noop as a
  model-direct call in a native batch (one batch per call), and N calls
  under ``asyncio.gather`` (overlapping up to the sub-call limit).
* **run start, warm worker**: a batch with ``run_code("return 1")`` when a
  spare worker is ready (the program is sent at once); against a native
  batch of one noop call (the batch overhead both share), and against a
  cold start (a fresh interpreter per run: what the warm pool saves).

Each case is repeated; the table shows the median and the best.

    ./dev python -m benchmarks.bench_ptc [--repeat N] [--calls N] [--json PATH]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks._util import add_baseline_ratios, bench_main, case_table, summary_us, timed
from dsh_actors import ToolBatchInput, ToolCall, ToolOutput, ToolRuntime, define_tool, text
from executors.ptc import PtcExecutor

NOOP = define_tool(
    name="noop",
    description="Do nothing.",
    parameters={},
    output=ToolOutput(schema={"type": "null"}, render=lambda args, value: [text("ok")]),
    execute=lambda args, ctx: None,
    is_concurrency_safe=lambda args: True,
)


def _run(rt: ToolRuntime, code: str) -> None:
    batch = ToolBatchInput(calls=(ToolCall(id="r", name="run_code", arguments={"code": code}),))
    result = rt.tools.execute(batch).results[0].result
    if result.is_error:
        raise RuntimeError(f"the benchmark program failed: {result.error.message}")


def _timed(fn: Callable[[], object]) -> float:
    """µs one call of ``fn`` took."""
    return timed(fn) * 1e6


def _summary(samples: list[float]) -> dict[str, Any]:
    return summary_us(samples) | {"samples": len(samples)}


def _settle(executor: PtcExecutor, seconds: float = 0.4) -> None:
    """Give the replacement spare time to reach ``ready`` (not a test:
    sleeping is the point here, a warm worker is one that had time)."""
    time.sleep(seconds)


def run(repeat: int = 9, calls: int = 200) -> dict[str, Any]:
    results: dict[str, dict[str, Any]] = {}
    sequential = f"for _ in range({calls}):\n    await tools.noop()\n"
    gathered = f"await asyncio.gather(*(tools.noop() for _ in range({calls})))\n"
    with ToolRuntime() as rt:
        rt.tools.register(NOOP)
        native_batch = ToolBatchInput(calls=(ToolCall(id="n", name="noop"),))
        for _ in range(200):
            rt.tools.execute(native_batch)
        native = [_timed(lambda: rt.tools.execute(native_batch)) for _ in range(repeat * 50)]
        results["baseline: native batch of one noop call"] = _summary(native)

        executor = PtcExecutor(timeout_ms=60000)
        rt.tools.set_executor(executor)
        _settle(executor)
        _run(rt, "return 1")  # warm-up
        empty: list[float] = []
        full: list[float] = []
        parallel: list[float] = []
        warm: list[float] = []
        for _ in range(repeat):
            _settle(executor)
            warm.append(_timed(lambda: _run(rt, "return 1")))
            _settle(executor)
            empty.append(_timed(lambda: _run(rt, "pass")))
            _settle(executor)
            full.append(_timed(lambda: _run(rt, sequential)))
            _settle(executor)
            parallel.append(_timed(lambda: _run(rt, gathered)))
        per_call = [(f - e) / calls for f, e in zip(full, empty, strict=True)]
        per_parallel = [(p - e) / calls for p, e in zip(parallel, empty, strict=True)]
        results["sub-call round trip (sequential await)"] = _summary(per_call) | {
            "baseline": "baseline: native batch of one noop call"
        }
        results[f"sub-call under gather ({calls} calls, limit 10)"] = _summary(per_parallel)
        results["run start, warm worker: run_code('return 1')"] = _summary(warm) | {
            "baseline": "baseline: native batch of one noop call"
        }
        executor.close()

    with ToolRuntime() as rt:
        rt.tools.register(NOOP)
        cold_executor = PtcExecutor(timeout_ms=60000)
        rt.tools.set_executor(cold_executor)
        cold: list[float] = []
        for _ in range(repeat):
            # Right after a run the replacement spare is still starting:
            # the next run waits for an interpreter, as without a pool.
            _settle(cold_executor)
            _run(rt, "return 1")
            cold.append(_timed(lambda: _run(rt, "return 1")))
        results["run start, cold worker (interpreter start-up)"] = _summary(cold) | {
            "baseline": "run start, warm worker: run_code('return 1')"
        }

    add_baseline_ratios(results)
    return {
        "benchmark": "ptc",
        "python": platform.python_version(),
        "repeat": repeat,
        "calls_per_program": calls,
        "results": results,
    }


def _table(report: dict[str, Any]) -> str:
    return case_table(
        report["results"],
        unit="µs",
        digits=1,
        header_lines=[f"PTC executor, {report['calls_per_program']} calls per program, Python {report['python']}"],
    )


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--calls", type=int, default=200, help="tool calls per program (default 200)")


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table; with ``--json PATH``, also write the report there."""
    return bench_main(
        argv,
        doc=__doc__,
        run=run,
        table=_table,
        repeat=9,
        repeat_help="repetitions per case",
        add_arguments=_add_arguments,
    )


if __name__ == "__main__":
    sys.exit(main())
