"""What the realistic configuration costs per call beyond the bare one, in
instructions (``valgrind --tool=callgrind``, every thread of the process,
``PYTHONHASHSEED=0``): per call, the difference between a run of K and
one of 3K 100-call batches after a warm-up, so start-up and warm-up cancel.

Variants (each in a runtime of its own, its no-op tool declaring
``timeout_ms``, which only ``policies.timeout`` reads; see
``benchmarks/scheduling.py`` for the realistic configuration):

* ``bare``: no policy, no log;
* ``realistic``: a file ``Session``, one guard returning None, one
  delegating ``tools/pre-execute`` listener, ``policies.timeout`` with the
  tool declaring ``timeout_ms``;
* ``realistic, memory``: the same with an in-memory ``Session``;
* ``timeout only`` / ``hooks only`` / ``log only``: one part of it, on the
  bare runtime (the file log for ``log only``);
* ``null wrapper``: a ``tools/execute`` wrapper that only delegates (what
  any wrapper costs, ``policies.timeout``'s own work aside);
* ``log only, memory``: ``log only`` with an in-memory ``Session``;
* ``agent only``: the batch for an agent, with its model step, and no
  session (what the log's agent costs without the log).

Each at ``--limit 1`` (serial batches: every call inline on the executor,
no hop; the default) or ``--limit 10`` (the benchmark's cap, call actors).

    ./dev python -m benchmarks.realistic_cost [--batches K] [--limit N] [--only LABEL ...]

``--context-switches`` measures instead (no valgrind) the context switches
per call (``getrusage``, every thread of the process) and the CPU per call
of the 100-call batch at the given limit, the variants interleaved batch by
batch. ``--profile LABEL`` prints a ``cProfile`` of the executor's and call
actors' threads for one variant (times inflated by the profiler; read the
call counts and the ranking; ``--dump PATH`` writes the stats instead).

Used to write the realistic part of ``benchmarks/HOPS.md``; not part of
``python -m benchmarks``.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from dsh_actors import Agent, Session, ToolRuntime

from ._util import callgrind_instructions, median
from .scheduling import (
    _allow_all,
    _delegate,
    bench_session,
    noop_batch,
    noop_tool,
    realistic,
    realistic_batch,
    realistic_tool,
)


def _timeout(rt: ToolRuntime) -> None:
    import policies.timeout as timeout

    rt.use(timeout)


def _hooks(rt: ToolRuntime) -> None:
    rt.tools.guard(_allow_all)
    rt.events.on("tools/pre-execute", _delegate)


def _null_wrapper(execution: Any, next_: Callable[[], Any]) -> Any:
    return next_()


def _memory(rt: ToolRuntime) -> Agent:
    _hooks(rt)
    _timeout(rt)
    return Agent("harness", session=Session())


def _variants() -> dict[str, Callable[[ToolRuntime], Agent | None]]:
    return {
        "bare": lambda rt: None,
        "realistic": realistic,
        "realistic, memory": _memory,
        "timeout only": lambda rt: _timeout(rt) or None,
        "null wrapper": lambda rt: rt.events.on("tools/execute", _null_wrapper) and None,
        "hooks only": lambda rt: _hooks(rt) or None,
        "log only": lambda rt: Agent("harness", session=bench_session()),
        "agent only": lambda rt: Agent("harness"),
        "log only, memory": lambda rt: Agent("harness", session=Session()),
    }


class _Runner:
    """One variant's runtime and its 100-call batch."""

    def __init__(self, label: str, limit: int) -> None:
        self.rt = ToolRuntime(max_parallel_tool_calls=limit).start()
        tool = noop_tool()
        self.rt.tools.register(realistic_tool(tool))
        agent = _variants()[label](self.rt)
        batch = noop_batch(100)
        self.batch = batch if agent is None else realistic_batch(batch, agent)

    def run(self) -> None:
        result = self.rt.tools.execute(self.batch)
        assert len(result.results) == 100

    def stop(self) -> None:
        self.rt.stop()


def _run_one(label: str, count: int, limit: int) -> None:
    runner = _Runner(label, limit)
    for _ in range(6):
        runner.run()
    for _ in range(count):
        runner.run()
    runner.stop()


def _instructions(label: str, count: int, limit: int) -> int:
    return callgrind_instructions(
        "benchmarks.realistic_cost", ["--run-one", label, "--batches", str(count), "--limit", str(limit)]
    )


def _count_instructions(labels: Sequence[str], batches: int, limit: int) -> None:
    print(f"instructions per call (callgrind; {batches} vs {3 * batches} batches of 100, limit {limit})")
    for label in labels:
        low, high = _instructions(label, batches, limit), _instructions(label, 3 * batches, limit)
        print(f"{label:20s} {(high - low) / (2 * batches * 100):10.0f}", flush=True)


def _switches() -> int:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_nvcsw + usage.ru_nivcsw


def _context_switches(labels: Sequence[str], reps: int, limit: int) -> None:
    runners = {label: _Runner(label, limit) for label in labels}
    try:
        for runner in runners.values():
            for _ in range(5):
                runner.run()
        switches: dict[str, list[float]] = {label: [] for label in labels}
        cpu: dict[str, list[float]] = {label: [] for label in labels}
        for _ in range(reps):
            for label, runner in runners.items():
                before, start = _switches(), time.process_time()
                runner.run()
                cpu[label].append((time.process_time() - start) * 1e6 / 100)
                switches[label].append((_switches() - before) / 100)
        print(f"per call, 100-call batches at limit {limit}, median of {reps} (interleaved)")
        for label in labels:
            print(f"{label:20s} {median(switches[label]):6.2f} switches {median(cpu[label]):8.1f} µs CPU")
    finally:
        for runner in runners.values():
            runner.stop()


def _profile(label: str, batches: int, limit: int, dump: str | None = None) -> None:
    import cProfile
    import pstats
    import threading

    profiles: list[cProfile.Profile] = []
    main = threading.current_thread()

    def start(*_: Any) -> None:
        if threading.current_thread() is main:
            return
        profile = cProfile.Profile()
        profiles.append(profile)
        sys.setprofile(None)
        profile.enable()

    # Every thread the runtime starts profiles itself from its first call.
    threading.setprofile(start)
    runner = _Runner(label, limit)
    for _ in range(batches):
        runner.run()
    threading.setprofile(None)
    runner.stop()
    stats = None
    for profile in profiles:
        profile.disable()
        if profile.getstats():
            stats = pstats.Stats(profile) if stats is None else stats.add(profile)  # type: ignore[arg-type]
    if stats is not None:
        if dump is not None:
            stats.dump_stats(dump)
        else:
            stats.sort_stats("tottime").print_stats(45)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.realistic_cost")
    parser.add_argument("--batches", type=int, default=2, help="K: K vs 3K batches of 100 calls")
    parser.add_argument("--limit", type=int, default=1, help="max_parallel_tool_calls (1: serial batches)")
    parser.add_argument("--only", nargs="*", default=None, help="these variants")
    parser.add_argument("--context-switches", action="store_true", help="context switches and CPU, no valgrind")
    parser.add_argument("--reps", type=int, default=30, help="with --context-switches: batches per variant")
    parser.add_argument("--profile", default=None, help="cProfile one variant")
    parser.add_argument("--dump", default=None, help="with --profile: write the stats to this file")
    parser.add_argument("--run-one", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run_one is not None:
        _run_one(args.run_one, args.batches, args.limit)
        return 0
    if args.profile is not None:
        _profile(args.profile, args.batches, args.limit, args.dump)
        return 0
    labels = args.only or list(_variants())
    unknown = [label for label in labels if label not in _variants()]
    if unknown:
        parser.error(f"unknown variant(s) {unknown}; choose from {list(_variants())}")
    if args.context_switches:
        _context_switches(labels, args.reps, args.limit)
    else:
        _count_instructions(labels, args.batches, args.limit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
