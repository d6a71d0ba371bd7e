"""PTC figures (``executors.ptc``), when that executor exists and works:

* ``subcall_us``: one sub-call round trip (program → parent → the whole
  pipeline → program), the slope of a run's time from 10 to 60 sequential
  ``await tools.noop(i=1)``;
* ``warm_start_us``: from submitting a ``run_code`` batch to the first
  sub-call's body starting, with a warm (already started) worker;
* ``warm_run_us``: a whole trivial run (``return 1``) with a warm worker.

Baselines in the same run: a native one-call batch, and the same call
dispatched inline (``rt.tools.dispatch``: what a sub-call does in the
parent, without the worker round trip). Between timed runs the benchmark
waits for the executor's next spare worker to be up, so every run is warm.
"""

from __future__ import annotations

import json
import time
from typing import Any

from ._util import median

SPARE_WARMUP_S = 0.35  # a worker process is ready well within this here


def run(plan: Any) -> dict[str, Any]:
    try:
        from executors.ptc import PtcExecutor
    except Exception as exc:  # noqa: BLE001 - absent or broken: skip with a note
        return {"available": False, "note": f"executors.ptc not importable ({type(exc).__name__})"}
    try:
        return _measure(PtcExecutor, plan)
    except Exception as exc:  # noqa: BLE001 - a broken executor is reported, not raised
        return {"available": False, "note": f"executors.ptc failed: {type(exc).__name__}: {exc}"[:120]}


def _measure(PtcExecutor: Any, plan: Any) -> dict[str, Any]:
    from dsh_actors import AbortController, Agent, ToolBatchInput, ToolCall, ToolExecutionInput, ToolRuntime

    from .scheduling import noop_batch, noop_tool

    reps = 3 if plan.quick else 7
    marks: list[float] = []

    def marking(args: Any, ctx: Any) -> str:
        marks.append(time.perf_counter())
        return "ok"

    out: dict[str, Any] = {"available": True, "reps": reps}
    with ToolRuntime() as rt:
        rt.tools.register(noop_tool())
        rt.tools.register(noop_tool("mark", marking))
        agent = Agent("ptc")
        service = rt.tools.scope(agent)
        service.set_executor(PtcExecutor(spare_workers=1))

        def run_code(code: str) -> tuple[float, float, Any]:
            """(start, µs taken, result) of one warm run of ``code``."""
            batch = ToolBatchInput(calls=(ToolCall(id="run", name="run_code", arguments=json.dumps({"code": code})),))
            time.sleep(SPARE_WARMUP_S)  # the spare worker taken by the last run is replaced
            start = time.perf_counter()
            result = service.execute(batch)
            return start, (time.perf_counter() - start) * 1e6, result.results[0].result

        _, _, result = run_code("return 1")  # warm-up
        if result.is_error:
            return {"available": False, "note": f"run_code failed: {result.error.message}"[:120]}

        def loop(n: int) -> str:
            return f"for _ in range({n}):\n    await tools.noop(i=1)\nreturn 1"

        trivial, few, many, first = [], [], [], []
        for _ in range(reps):
            trivial.append(run_code("return 1")[1])
            few.append(run_code(loop(10))[1])
            many.append(run_code(loop(60))[1])
            marks.clear()
            start, _, _ = run_code("await tools.mark(i=1)\nreturn 1")
            if marks:
                first.append((marks[0] - start) * 1e6)
        out["warm_run_us"] = median(trivial)
        out["subcall_us"] = (median(many) - median(few)) / 50
        out["warm_start_us"] = median(first)

        # Baselines: the native executor's one-call batch and an inline dispatch.
        native = noop_batch(1)
        for _ in range(50):
            rt.tools.execute(native)
        samples = []
        for _ in range(300):
            t = time.perf_counter()
            rt.tools.execute(native)
            samples.append((time.perf_counter() - t) * 1e6)
        out["native_n1_us"] = median(samples)
        signal = AbortController().signal
        inline = ToolExecutionInput(call_id="x", name="noop", arguments={"i": 1}, signal=signal)
        samples = []
        for _ in range(2000):
            t = time.perf_counter()
            rt.tools.dispatch(inline)
            samples.append((time.perf_counter() - t) * 1e6)
        out["inline_dispatch_us"] = median(samples)
    out["subcall_us_baseline"] = f"inline dispatch {out['inline_dispatch_us']:.1f} µs"
    out["warm_start_us_baseline"] = f"native 1-call batch {out['native_n1_us']:.0f} µs"
    out["warm_run_us_baseline"] = f"native 1-call batch {out['native_n1_us']:.0f} µs"
    return out
