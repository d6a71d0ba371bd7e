"""Ray figures (``executors.ray``), when Ray is installed:

* ``cpu_bound_speedup``: 8 calls of ~200 ms of pure-Python CPU work in one
  batch at cap 2, the native executor's makespan divided by a
  RayExecutor's on a local 2-CPU cluster (2 workers). Under the GIL the
  native executor runs the bodies one at a time, whatever the cap, so it
  cannot exceed 1.0; target >= 1.6 on a 2-core machine;
* ``subcall_overhead_ms``: what a no-op call's round trip through Ray adds
  to a one-call batch: the median one-call batch under the RayExecutor
  minus the median native one (``subcall_round_trip_ms`` and
  ``native_call_ms`` are the two medians).

The cluster is started (and shut down) here, with no dashboard; its
workers are warmed up before anything is timed. Medians over repetitions.
"""

from __future__ import annotations

import json
import logging
import statistics
import time
from typing import Any

CALLS = 8
CAP = 2
WORK_MS = 200.0

AUTH_NOTICE_LOGGER = "ray._private.authentication.authentication_token_setup"
"""Where Ray says, at every local cluster's start, that token
authentication is on (or off): a notice, written to stderr while the table
is being printed. The benchmark keeps that logger's errors and drops its
warnings; every other Ray message, and Ray's auth behaviour, are unchanged."""


def _burn(args: Any, ctx: Any) -> int:
    """Pure-Python CPU work: ``n`` loop iterations (holds the GIL)."""
    total = 0
    for i in range(args["n"]):
        total += i * i % 7
    return total


def _noop(args: Any, ctx: Any) -> None:
    return None


def run(plan: Any) -> dict[str, Any]:
    try:
        import ray  # noqa: F401

        from executors.ray import RayExecutor
    except Exception as exc:  # noqa: BLE001 - absent: skip with a note
        return {
            "available": False,
            "note": f"Ray is not installed ({type(exc).__name__}); pip install 'dsh-actors[ray]'",
        }
    notices = logging.getLogger(AUTH_NOTICE_LOGGER)
    level = notices.level
    notices.setLevel(logging.ERROR)
    try:
        return _measure(RayExecutor, plan)
    except Exception as exc:  # noqa: BLE001 - a broken cluster is reported, not raised
        return {"available": False, "note": f"executors.ray failed: {type(exc).__name__}: {exc}"[:160]}
    finally:
        notices.setLevel(level)


def _calibrate() -> int:
    """Loop iterations that take about WORK_MS here."""
    n = 100_000
    while True:
        start = time.perf_counter()
        _burn({"n": n}, None)
        took = (time.perf_counter() - start) * 1000
        if took >= 20:
            return max(1, int(n * WORK_MS / took))
        n *= 4


def _measure(RayExecutor: Any, plan: Any) -> dict[str, Any]:
    from dsh_actors import ToolBatchInput, ToolCall, ToolOutput, ToolRuntime, define_tool, text

    quick = bool(getattr(plan, "quick", False))
    reps = 1 if quick else 3
    trips = 10 if quick else 30

    def tool(name: str, body: Any, remote: bool) -> Any:
        return define_tool(
            name=name,
            description=name,
            parameters={"n": {"type": "integer"}},
            output=ToolOutput(schema={"type": "json"}, render=lambda a, v: [text("ok")]),
            execute=body,
            is_concurrency_safe=lambda args: True,
            meta={"ray": {"num_cpus": 1}} if remote else None,
        )

    n = _calibrate()
    cpu_batch = ToolBatchInput(
        calls=[ToolCall(f"c{i}", "burn", json.dumps({"n": n})) for i in range(CALLS)], max_parallel_tool_calls=CAP
    )
    noop_batch = ToolBatchInput(calls=[ToolCall("n", "noop", "{}")])

    def makespan(rt: Any, batch: Any) -> float:
        start = time.perf_counter()
        result = rt.tools.execute(batch)
        took = (time.perf_counter() - start) * 1000
        failed = [r.result.error.message for r in result.results if r.result.is_error]
        if failed:
            raise RuntimeError(f"a benchmark call failed: {failed[0]}")
        return took

    out: dict[str, Any] = {"available": True, "reps": reps, "calls": CALLS, "cap": CAP, "iterations": n}
    with ToolRuntime() as rt:
        rt.tools.register(tool("burn", _burn, remote=False))
        rt.tools.register(tool("noop", _noop, remote=False))
        makespan(rt, noop_batch)
        native = [makespan(rt, cpu_batch) for _ in range(reps)]
        native_noop = [makespan(rt, noop_batch) for _ in range(trips)]

    executor = RayExecutor(local_cpus=CAP)
    try:
        with ToolRuntime() as rt:
            rt.tools.register(tool("burn", _burn, remote=True))
            rt.tools.register(tool("noop", _noop, remote=True))
            rt.tools.set_executor(executor)
            # Warm-up: the two workers start and import the bodies.
            makespan(rt, ToolBatchInput(calls=[ToolCall(f"w{i}", "burn", '{"n": 1}') for i in range(CAP)]))
            makespan(rt, noop_batch)
            remote = [makespan(rt, cpu_batch) for _ in range(reps)]
            remote_noop = [makespan(rt, noop_batch) for _ in range(trips)]
    finally:
        executor.close()

    native_ms = statistics.median(native)
    ray_ms = statistics.median(remote)
    out["native_makespan_ms"] = native_ms
    out["ray_makespan_ms"] = ray_ms
    out["ideal_ray_makespan_ms"] = native_ms / CAP
    out["cpu_bound_speedup"] = native_ms / ray_ms if ray_ms > 0 else 0.0
    out["native_call_ms"] = statistics.median(native_noop)
    out["subcall_round_trip_ms"] = statistics.median(remote_noop)
    out["subcall_overhead_ms"] = out["subcall_round_trip_ms"] - out["native_call_ms"]
    return out
