"""Instructions a no-op call costs, counted by ``valgrind --tool=callgrind``.

The overhead section's no-op ``define_tool`` call in 100-call batches,
every thread of the process counted, ``PYTHONHASHSEED=0``: per call, the
difference between a run of K batches and one of L (after 6 warm-up
batches), so start-up and teardown cancel. Load-independent, unlike the
times: what "The shared protocol's CPU, in instructions" in
``benchmarks/HOPS.md`` reports.

* ``cap10`` / ``cap8``: at that ``max_parallel_tool_calls`` (call actors);
* ``serial``: at 1 (every call inline on the executor actor);
* ``async``: an ``async def`` body, the batches awaited with
  ``execute_async`` on the caller's loop (flights), at cap 10.

    ./dev python -m benchmarks.instructions [CONFIG ...] [--low K] [--high L]

Used to write ``benchmarks/HOPS.md``; not part of ``python -m benchmarks``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from dsh_actors import ToolRuntime
from dsh_actors.pipeline.flights import LoopWatch
from dsh_actors.scheduling import idle

from ._util import callgrind_instructions
from .scheduling import async_noop_body, noop_batch, noop_tool

CAPS = {"cap10": 10, "cap8": 8, "serial": 1, "async": 10}
WARM = 6


def run_one(config: str, batches: int) -> None:
    """What one counted process runs: ``batches`` (plus the warm-up)."""
    # Under valgrind a batch runs some 50 times slower, so idle call actors
    # and executor actors would retire (IDLE_TTL, 0.5 s) between batches and
    # be started again, more often the more loaded the machine: the count
    # would move with the load. Nothing retires while it is counted.
    idle.IDLE_TTL = 3600.0  # type: ignore[misc]
    # Likewise the loop watch's looks (every PERIOD, 0.25 s, while flights
    # are out): about one a batch under valgrind, none in real time.
    LoopWatch.PERIOD = 3600.0
    batch = noop_batch(100)
    with ToolRuntime(max_parallel_tool_calls=CAPS[config]) as rt:
        if config == "async":
            rt.tools.register(noop_tool(body=async_noop_body))

            async def run() -> None:
                for _ in range(WARM):
                    await rt.tools.execute_async(batch)
                settle_garbage()
                for _ in range(batches):
                    await rt.tools.execute_async(batch)

            loop = asyncio.new_event_loop()
            try:
                loop.run_until_complete(run())
            finally:
                loop.close()
        else:
            rt.tools.register(noop_tool())
            for _ in range(WARM):
                rt.tools.execute(batch)
            settle_garbage()
            for _ in range(batches):
                rt.tools.execute(batch)


def settle_garbage() -> None:
    """After the warm-up: collect, then freeze what is alive (imports,
    the runtime, its actors), so the collector's full passes over those
    tens of thousands of objects, which fall in one of the two runs and not
    in the other as allocation thresholds happen to be crossed, are not
    counted as a call's work (a few hundred objects more at start-up moved
    a cap 10 call by 20k instructions)."""
    gc.collect()
    gc.freeze()


def count(config: str, batches: int) -> int:
    """Instructions of a whole process running ``batches`` of ``config``."""
    return callgrind_instructions(__spec__.name, ["--run-one", config, str(batches)])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("configs", nargs="*", metavar="CONFIG", help=f"of {', '.join(CAPS)} (default: all)")
    parser.add_argument("--low", type=int, default=2, help="K: batches of the shorter run")
    parser.add_argument("--high", type=int, default=10, help="L: batches of the longer run")
    parser.add_argument("--run-one", nargs=2, metavar=("CONFIG", "BATCHES"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run_one is not None:
        run_one(args.run_one[0], int(args.run_one[1]))
        return 0
    configs = args.configs or list(CAPS)
    unknown = [c for c in configs if c not in CAPS]
    if unknown:
        parser.error(f"unknown configuration {unknown[0]!r}: choose from {', '.join(CAPS)}")
    print(f"instructions per call (callgrind; {args.low} vs {args.high} batches of 100)")
    with ThreadPoolExecutor(2) as pool:  # two valgrind processes at a time
        runs = {c: (pool.submit(count, c, args.low), pool.submit(count, c, args.high)) for c in configs}
        for config, (low, high) in runs.items():
            per_call = (high.result() - low.result()) / ((args.high - args.low) * 100)
            print(f"{config:8s} {per_call / 1000:8.1f}k", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
