"""The async workloads of ``python -m benchmarks`` (section ``async``):
async tools through ``await rt.tools.execute_async(batch)`` from a running
loop. (The async no-op's cost, ``overhead.async_marginal_us`` and
``overhead.async_n1_us``, is measured in the overhead section, between the
sync batches it is compared with: ``scheduling.run_overhead``.)

* ``pool.async``: 64 ``asyncio.sleep(0.010)`` calls at cap 8, against the
  ideal rolling pool with the loop's measured sleep overshoot, and beside
  asyncio's own pool of the same sleeps (an ``asyncio.Semaphore(8)``, on
  the same loop, its reps between ours): what asyncio itself loses to
  that ideal (eight sleeps due together end later than a lone one).
* ``agents.async``: 1,000 agents on one loop, each awaiting one batch of 10
  async calls sleeping 5 ms, all at once: calls per second and the peak
  thread count.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from dsh_actors import Agent, ToolBatchInput, ToolCall, ToolRuntime, define_tool

from ._util import ThreadPeak, median
from .scheduling import CAP, POOL_CALLS, POOL_CAP, TEXT, Plan, _safe, ideal_makespan_ms

AGENTS = 1000
AGENT_CALLS = 10


async def _sleep(args: Any, ctx: Any) -> str:
    await asyncio.sleep(args["ms"] / 1000)
    return "ok"


def _tool(name: str, body: Any, parameters: dict[str, Any]) -> Any:
    return define_tool(
        name=name, description=name, parameters=parameters, output=TEXT, execute=body, is_concurrency_safe=_safe
    )


def _sleep_batch(n: int, ms: float, cap: int) -> ToolBatchInput:
    calls = tuple(ToolCall(id=f"c{i}", name="sleep", arguments=f'{{"ms": {ms}}}') for i in range(n))
    return ToolBatchInput(calls=calls, max_parallel_tool_calls=cap)


async def _overshoot_ms(samples: int) -> float:
    out = []
    for _ in range(samples):
        start = time.perf_counter()
        await asyncio.sleep(0.010)
        out.append((time.perf_counter() - start) * 1000 - 10.0)
    return max(0.0, median(out))


async def _asyncio_pool_ms(calls: int, cap: int) -> float:
    """The same sleeps in a plain asyncio pool: ``cap`` at a time through a
    semaphore, each started as soon as one ends (no tool layer at all)."""
    slots = asyncio.Semaphore(cap)

    async def one() -> None:
        async with slots:
            await asyncio.sleep(0.010)

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(calls)))
    return (time.perf_counter() - start) * 1000


async def _run(plan: Plan) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with ToolRuntime(max_parallel_tool_calls=CAP) as rt:
        rt.tools.register(_tool("sleep", _sleep, {"ms": {"type": "number", "required": True}}))
        overshoot = await _overshoot_ms(plan.overshoot_samples)
        pool = _sleep_batch(POOL_CALLS, 10.0, POOL_CAP)
        await rt.tools.execute_async(_sleep_batch(16, 1.0, POOL_CAP))
        makespans, plain = [], []
        for _ in range(plan.pool_reps):
            start = time.perf_counter()
            await rt.tools.execute_async(pool)
            makespans.append((time.perf_counter() - start) * 1000)
            plain.append(await _asyncio_pool_ms(POOL_CALLS, POOL_CAP))
        out["pool_makespan_ms"] = median(makespans)
        out["pool_asyncio_ms"] = median(plain)
        out["pool_ideal_ms"] = ideal_makespan_ms([(10.0, False)] * POOL_CALLS, POOL_CAP, overshoot)

        peak = ThreadPeak()

        async def sampled(args: Any, ctx: Any) -> str:
            peak.sample()
            await asyncio.sleep(0.005)
            return "ok"

        rt.tools.register(_tool("agent_sleep", sampled, {}))
        agents = [Agent(f"a{i}") for i in range(AGENTS)]
        calls = tuple(ToolCall(id=f"c{i}", name="agent_sleep", arguments="{}") for i in range(AGENT_CALLS))
        before = threading.active_count()
        start = time.perf_counter()
        await asyncio.gather(*(rt.tools.execute_async(ToolBatchInput(calls=calls, agent=agent)) for agent in agents))
        elapsed = time.perf_counter() - start
        out["agents_calls_per_s"] = AGENTS * AGENT_CALLS / elapsed
        out["agents_peak_threads"] = peak.peak
        out["agents_threads_before"] = before
    return out


def run(plan: Plan) -> dict[str, Any]:
    return asyncio.run(_run(plan))
