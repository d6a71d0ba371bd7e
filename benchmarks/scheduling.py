"""The scheduling workloads of ``python -m benchmarks`` (issue 7), each
against baselines measured in the same process and the same run.

* **overhead**: batches of 1, 10, 100, 1,000 and 10,000 no-op
  ``define_tool`` calls through the full pipeline (native executor, argument
  and output validation, no listeners, no log) against a direct call, a
  ``ThreadPoolExecutor(cap)`` submit+result and asyncio create_task+gather;
  beside them (batches of 1, 10 and 100) the realistic configuration and a
  ``@tool`` function of three ``int`` parameters (pydantic-core validation).
* **pool**: 64 calls at cap 8 (equal 10 ms, mixed 2–18 ms, 4 exclusive
  among equal ones) against the ideal makespan (a zero-overhead rolling pool,
  each call lengthened by the machine's measured sleep overshoot) and a
  ``ThreadPoolExecutor(8)``.
* **scale**: the 10,000-call batch's marginal cost against the 100-call
  one, and the peak thread count sampled from inside the bodies.
* **abort**: from ``abort()`` to the batch settling, for bodies that poll
  ``ctx.signal.aborted`` every 1 ms and for bodies that wait on the signal.
* **many agents**: 100 agents in nested scopes, each sending a batch of 10
  at the same time, against a ``ThreadPoolExecutor`` running the same calls.

Every figure is a median over repetitions after a warm-up; nothing is
asserted.
"""

from __future__ import annotations

import asyncio
import heapq
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from dsh_actors import (
    AbortController,
    Agent,
    ToolBatchInput,
    ToolCall,
    ToolOutput,
    ToolRuntime,
    define_tool,
    text,
    tool,
)

from ._util import Progress, ThreadPeak, median, sleep_overshoot_ms

OVERHEAD_SIZES = (1, 10, 100, 1000, 10_000)
REALISTIC_SIZES = (1, 10, 100)  # the realistic configuration, measured beside the bare one
CAP = 10  # the runtime's default max_parallel_tool_calls
POOL_CAP = 8
POOL_CALLS = 64
EXCLUSIVE_AT = (8, 24, 40, 56)

TEXT = ToolOutput(schema={"type": "string"}, render=lambda args, value: [text(value)])


def _safe(args: Any) -> bool:
    return True


def noop_body(args: Any, ctx: Any) -> str:
    return "ok"


async def async_noop_body(args: Any, ctx: Any) -> str:
    return "ok"


def noop_tool(name: str = "noop", body: Callable[[Any, Any], Any] = noop_body) -> Any:
    """A no-op tool with one validated integer argument and a validated
    string output: both validations run, nothing else does."""
    return define_tool(
        name=name,
        description="Does nothing.",
        parameters={"i": {"type": "integer"}},
        output=TEXT,
        execute=body,
        is_concurrency_safe=_safe,
    )


@tool(concurrency_safe=True)
def add3(a: int, b: int, c: int) -> int:
    """Add three integers (the decorated tool of the overhead section).

    Args:
        a: The first.
        b: The second.
        c: The third.
    """
    return a + b + c


def decorated_batch(n: int) -> ToolBatchInput:
    """``n`` calls of :data:`add3`."""
    calls = tuple(ToolCall(id=f"c{i}", name="add3", arguments=f'{{"a": {i}, "b": 1, "c": 2}}') for i in range(n))
    return ToolBatchInput(calls=calls)


def noop_batch(n: int, name: str = "noop", **kwargs: Any) -> ToolBatchInput:
    calls = tuple(ToolCall(id=f"c{i}", name=name, arguments=f'{{"i": {i}}}') for i in range(n))
    return ToolBatchInput(calls=calls, **kwargs)


# --------------------------------------------------------------------------
# The realistic configuration: what an agent harness runs
# --------------------------------------------------------------------------


def _allow_all(execution: Any) -> None:
    return None


def _delegate(execution: Any, next_: Callable[[], Any]) -> Any:
    return next_()


def realistic(rt: ToolRuntime, *, start_marker: bool = True) -> Agent:
    """Policies every real harness has, installed on ``rt``: one global
    guard returning None, one delegating ``tools/pre-execute`` listener and
    ``policies.timeout`` (the tools declare ``timeout_ms``). Returns an
    agent with a file-backed ``Session`` (a fresh file in a temporary
    folder removed at exit); batches that ``log`` to it are the realistic
    configuration. ``start_marker=False``: the session drops the
    ``tool/start`` markers (the same configuration without the durable
    "started" marker, to measure what it costs; never a real setup)."""
    import policies.timeout as timeout

    rt.tools.guard(_allow_all)
    rt.events.on("tools/pre-execute", _delegate)
    rt.use(timeout)
    return Agent("harness", session=bench_session(start_marker=start_marker))


_SESSIONS: list[Any] = []


def bench_session(*, start_marker: bool = True) -> Any:
    """A file-backed session in a temporary folder; closed and removed at
    exit. ``start_marker=False``: one that drops ``tool/start`` events."""
    import atexit
    import shutil
    import tempfile
    from pathlib import Path

    from dsh_actors import Session

    class Unmarked(Session):
        def append_lossless(self, event: dict[str, Any]) -> None:
            if event["type"] != "tool/start":
                super().append_lossless(event)

    if not _SESSIONS:
        folder = tempfile.mkdtemp(prefix="dsh-bench-")

        def clean() -> None:
            for session in _SESSIONS[1:]:
                session.close()
            shutil.rmtree(folder, ignore_errors=True)

        atexit.register(clean)
        _SESSIONS.append(Path(folder))
    path = _SESSIONS[0] / f"session-{len(_SESSIONS)}.jsonl"
    session = (Session if start_marker else Unmarked)(path)
    _SESSIONS.append(session)
    return session


class OtelSdk:
    """``policies.otel`` on the realistic configuration, with the SDK's
    providers: spans through a ``BatchSpanProcessor`` to an exporter that
    drops them, the histogram into an in-memory reader (never collected).
    None of it when the SDK is not installed."""

    def __init__(self) -> None:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

        class Drop(SpanExporter):
            def export(self, spans: Any) -> SpanExportResult:
                return SpanExportResult.SUCCESS

        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(BatchSpanProcessor(Drop()))
        self.meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])

    def install(self, rt: ToolRuntime) -> Agent:
        import policies.otel as otel

        agent = realistic(rt)
        rt.use(otel, tracer_provider=self.tracer_provider, meter_provider=self.meter_provider)
        return agent

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


def otel_sdk() -> OtelSdk | None:
    try:
        return OtelSdk()
    except ImportError:
        return None


def realistic_tool(tool: Any) -> Any:
    """``tool`` declaring a (generous) ``timeout_ms``, for ``policies.timeout``."""
    from dataclasses import replace

    return replace(tool, timeout_ms=60_000)


def realistic_batch(batch: ToolBatchInput, agent: Agent) -> ToolBatchInput:
    """``batch`` for ``agent``, logged (turn 1, step 1)."""
    from dataclasses import replace

    from dsh_actors import LogStep

    return replace(batch, agent=agent, log=LogStep(turn=1, step=1))


@dataclass
class Plan:
    """How much work each section does (``--quick`` or full)."""

    quick: bool

    def overhead_reps(self, n: int) -> int:
        table = {1: (150, 2000), 10: (80, 800), 100: (25, 200), 1000: (5, 30), 10_000: (3, 8)}
        return table[n][0 if self.quick else 1]

    @property
    def pool_reps(self) -> int:
        return 3 if self.quick else 15

    @property
    def abort_reps(self) -> int:
        return 7 if self.quick else 40

    @property
    def agent_rounds(self) -> int:
        return 3 if self.quick else 15

    @property
    def overshoot_samples(self) -> int:
        return 15 if self.quick else 40

    def steps(self) -> int:
        return len(OVERHEAD_SIZES) + 3 + 1 + 1 + 2 + 1 + 1 + 1 + 3


# --------------------------------------------------------------------------
# overhead and scale
# --------------------------------------------------------------------------


def _asyncio_gather_us(loop: asyncio.AbstractEventLoop, n: int) -> float:
    async def one() -> str:
        return "ok"

    async def run() -> float:
        start = time.perf_counter()
        await asyncio.gather(*[asyncio.create_task(one()) for _ in range(n)])
        return time.perf_counter() - start

    return loop.run_until_complete(run()) * 1e6


def _threadpool_us(pool: ThreadPoolExecutor, n: int) -> float:
    args: dict[str, Any] = {"i": 1}
    start = time.perf_counter()
    futures = [pool.submit(noop_body, args, None) for _ in range(n)]
    for f in futures:
        f.result()
    return (time.perf_counter() - start) * 1e6


def _direct_us(n: int) -> float:
    args: dict[str, Any] = {"i": 1}
    body = noop_body
    start = time.perf_counter()
    for _ in range(n):
        body(args, None)
    return (time.perf_counter() - start) * 1e6


def _dsh_us(rt: ToolRuntime, batch: ToolBatchInput) -> float:
    start = time.perf_counter()
    result = rt.tools.execute(batch)
    elapsed = (time.perf_counter() - start) * 1e6
    assert len(result.results) == len(batch.calls)
    return elapsed


def _dsh_async_us(loop: asyncio.AbstractEventLoop, rt: ToolRuntime, batch: ToolBatchInput) -> float:
    """One ``await rt.tools.execute_async(batch)`` from a coroutine running
    on ``loop`` (the caller's loop: the bodies run on it), timed inside it."""

    async def run() -> float:
        start = time.perf_counter()
        result = await rt.tools.execute_async(batch)
        elapsed = (time.perf_counter() - start) * 1e6
        assert len(result.results) == len(batch.calls)
        return elapsed

    return loop.run_until_complete(run())


def run_overhead(plan: Plan, progress: Progress) -> dict[str, Any]:
    """Per-batch medians (µs) for every size, dsh-actors and baselines
    interleaved rep by rep (so a slow patch of the machine hits them all).
    The async no-op (``async def`` bodies, ``execute_async`` from a running
    loop) is measured here too, between the sync batches it is compared
    with, at the sizes of the realistic configuration."""
    out: dict[str, Any] = {"sizes": {}}
    loop = asyncio.new_event_loop()
    sdk = otel_sdk()
    try:
        with (
            ToolRuntime(max_parallel_tool_calls=CAP) as rt,
            ToolRuntime(max_parallel_tool_calls=CAP) as real,
            ToolRuntime(max_parallel_tool_calls=CAP) as typed,
            ToolRuntime(max_parallel_tool_calls=CAP) as traced,
            ToolRuntime(max_parallel_tool_calls=CAP) as unmarked,
            ToolRuntime(max_parallel_tool_calls=CAP) as aio,
            ThreadPoolExecutor(CAP) as pool,
        ):
            rt.tools.register(noop_tool())
            aio.tools.register(noop_tool(body=async_noop_body))
            real.tools.register(realistic_tool(noop_tool()))
            unmarked.tools.register(realistic_tool(noop_tool()))
            typed.tools.register(add3)
            harness = realistic(real)
            unmarked_harness = realistic(unmarked, start_marker=False)
            traced.tools.register(realistic_tool(noop_tool()))
            traced_harness = None if sdk is None else sdk.install(traced)
            # Warm every path (threads started, pools filled, caches built).
            for _ in range(3):
                rt.tools.execute(noop_batch(CAP * 2))
                real.tools.execute(realistic_batch(noop_batch(CAP * 2), harness))
                unmarked.tools.execute(realistic_batch(noop_batch(CAP * 2), unmarked_harness))
                typed.tools.execute(decorated_batch(CAP * 2))
                _dsh_async_us(loop, aio, noop_batch(CAP * 2))
                if traced_harness is not None:
                    traced.tools.execute(realistic_batch(noop_batch(CAP * 2), traced_harness))
                _threadpool_us(pool, CAP * 2)
                _asyncio_gather_us(loop, CAP * 2)
            for n in OVERHEAD_SIZES:
                progress.note(f"overhead: batches of {n}")
                batch = noop_batch(n)
                reps = plan.overhead_reps(n)
                warm = max(1, min(reps // 5, 20))
                for _ in range(warm):
                    _dsh_us(rt, batch)
                    _threadpool_us(pool, n)
                samples: dict[str, list[float]] = {"dsh": [], "threadpool": [], "asyncio": [], "direct": []}
                real_batch = realistic_batch(batch, harness) if n in REALISTIC_SIZES else None
                typed_batch = decorated_batch(n) if n in REALISTIC_SIZES else None
                unmarked_batch = realistic_batch(batch, unmarked_harness) if n in REALISTIC_SIZES else None
                if real_batch is not None and typed_batch is not None and unmarked_batch is not None:
                    samples["realistic"] = []
                    samples["unmarked"] = []
                    samples["decorated"] = []
                    samples["async"] = []
                    for _ in range(warm):
                        _dsh_us(real, real_batch)
                        _dsh_us(unmarked, unmarked_batch)
                        _dsh_us(typed, typed_batch)
                        _dsh_async_us(loop, aio, batch)
                traced_batch = (
                    realistic_batch(batch, traced_harness)
                    if n in REALISTIC_SIZES and traced_harness is not None
                    else None
                )
                if traced_batch is not None:
                    samples["otel"] = []
                    for _ in range(warm):
                        _dsh_us(traced, traced_batch)
                for _ in range(reps):
                    samples["dsh"].append(_dsh_us(rt, batch))
                    if real_batch is not None and typed_batch is not None and unmarked_batch is not None:
                        samples["realistic"].append(_dsh_us(real, real_batch))
                        samples["unmarked"].append(_dsh_us(unmarked, unmarked_batch))
                        samples["decorated"].append(_dsh_us(typed, typed_batch))
                        samples["async"].append(_dsh_async_us(loop, aio, batch))
                    if traced_batch is not None:
                        samples["otel"].append(_dsh_us(traced, traced_batch))
                    samples["threadpool"].append(_threadpool_us(pool, n))
                    samples["asyncio"].append(_asyncio_gather_us(loop, n))
                    samples["direct"].append(_direct_us(n))
                out["sizes"][n] = {k: median(v) for k, v in samples.items()}
                out["sizes"][n]["reps"] = reps
                progress.advance(f"overhead: batches of {n}")
    finally:
        loop.close()
        if sdk is not None:
            sdk.shutdown()
    progress.note("scale: peak threads in a 10,000-call batch")
    # A runtime of its own, with no baseline pool alive: every thread counted
    # is the process's main thread or one the runtime started.
    before = threading.active_count()
    peak = ThreadPeak()
    with ToolRuntime(max_parallel_tool_calls=CAP) as rt:
        rt.tools.register(noop_tool("sampling", lambda args, ctx: peak.sample() or "ok"))
        rt.tools.execute(noop_batch(10_000, name="sampling"))
    out["threads_before"] = before
    out["max_threads"] = peak.peak
    progress.advance("scale: peak threads")
    sizes = out["sizes"]

    def slope(key: str, a: int, b: int) -> float:
        return (sizes[b][key] - sizes[a][key]) / (b - a)

    for key in ("dsh", "threadpool", "asyncio", "direct"):
        out[f"{key}_marginal_us"] = slope(key, 10, 100)
        out[f"{key}_n1_us"] = sizes[1][key]
        out[f"{key}_n10000_marginal_us"] = slope(key, 1000, 10_000)
    out["realistic_marginal_us"] = slope("realistic", 10, 100)
    out["realistic_n1_us"] = sizes[1]["realistic"]
    out["unmarked_marginal_us"] = slope("unmarked", 10, 100)
    out["unmarked_n1_us"] = sizes[1]["unmarked"]
    out["decorated_marginal_us"] = slope("decorated", 10, 100)
    out["decorated_n1_us"] = sizes[1]["decorated"]
    out["async_marginal_us"] = slope("async", 10, 100)
    out["async_n1_us"] = sizes[1]["async"]
    if "otel" in sizes[10]:
        out["otel_marginal_us"] = slope("otel", 10, 100)
    progress.note("scale: 200 concurrent batches")
    out.update(concurrent_threads())
    progress.advance("scale: 200 concurrent batches")
    return out


CONCURRENT_BATCHES = 200
#: Seconds after the burst at which ``scale.threads_after_burst`` is counted.
AFTER_BURST_S = 1.0

RUNTIME_THREADS = 4
"""The runtime's own threads (docs/ARCHITECTURE.md, "Threads"): the
registry, the loop thread, the loop watch and the global scope actor."""


def concurrent_threads_bound(batches: int, budget: int) -> int:
    """The most threads a runtime adds for ``batches`` concurrent batches of
    sync bodies (docs/ARCHITECTURE.md, "What N concurrent batches cost"):
    its own (:data:`RUNTIME_THREADS`), at most one executor actor per batch,
    and the call-actor budget. ``tests/test_reference.py`` checks that the
    documents' figure is this one."""
    return RUNTIME_THREADS + batches + budget


def concurrent_threads() -> dict[str, Any]:
    """200 batches of 10 calls at cap 10 submitted at once (each body sleeps
    2 ms, so they really overlap); the peak of the threads the runtime adds
    (the process's count, sampled inside the bodies, less the threads before
    it) against :func:`concurrent_threads_bound`."""
    before = threading.active_count()
    peak = ThreadPeak()

    def body(args: Any, ctx: Any) -> str:
        peak.sample()
        time.sleep(0.002)
        return "ok"

    with ToolRuntime(max_parallel_tool_calls=CAP) as rt:
        rt.tools.register(noop_tool("concurrent", body))
        batch = noop_batch(10, name="concurrent")
        futures = [rt.tools.submit(batch) for _ in range(CONCURRENT_BATCHES)]
        for future in futures:
            future.result(timeout=120)
        budget = rt.max_call_actors
        # One second after the burst (the runtime still running, idle): the
        # threads still alive, against the idle bound (the threads before it
        # plus the runtime's own: registry, loop thread, loop watch, global
        # scope actor).
        time.sleep(AFTER_BURST_S)
        after = threading.active_count()
    return {
        "threads_after_burst": after,
        "idle_threads_bound": before + 4,
        "concurrent_batches": CONCURRENT_BATCHES,
        "concurrent_peak_threads": peak.peak - before,
        "concurrent_threads_before": before,
        "concurrent_threads_bound": concurrent_threads_bound(CONCURRENT_BATCHES, budget),
        "concurrent_budget": budget,
    }


# --------------------------------------------------------------------------
# pool
# --------------------------------------------------------------------------


def pool_workloads() -> dict[str, list[tuple[float, bool]]]:
    """Each workload: (ms, exclusive) per call, in model order."""
    rng = random.Random(7)
    equal = [(10.0, False)] * POOL_CALLS
    mixed = [(float(rng.randint(2, 18)), False) for _ in range(POOL_CALLS)]
    barrier = [(10.0, i in EXCLUSIVE_AT) for i in range(POOL_CALLS)]
    return {"equal": equal, "mixed": mixed, "barrier": barrier}


def ideal_makespan_ms(calls: Sequence[tuple[float, bool]], cap: int, overshoot_ms: float) -> float:
    """A zero-overhead rolling pool in model order: each call starts on the
    first slot to free up; an exclusive call waits for everything before it
    and nothing starts until it ends. Each call lasts ``ms + overshoot``."""
    now = 0.0
    running: list[float] = []  # end times
    for ms, exclusive in calls:
        duration = ms + overshoot_ms
        if exclusive:
            now = max([now, *running])
            running = []
            now += duration
            continue
        if len(running) >= cap:
            now = max(now, heapq.heappop(running))
        heapq.heappush(running, now + duration)
    return max([now, *running])


def _sleep_body(args: Any, ctx: Any) -> str:
    time.sleep(args["ms"] / 1000)
    return "ok"


def _pool_tool() -> Any:
    return define_tool(
        name="sleep",
        description="Sleeps.",
        parameters={"ms": {"type": "number", "required": True}, "exclusive": {"type": "boolean"}},
        output=TEXT,
        execute=_sleep_body,
        is_concurrency_safe=lambda args: not args.get("exclusive", False),
    )


def _pool_batch(calls: Sequence[tuple[float, bool]]) -> ToolBatchInput:
    import orjson

    return ToolBatchInput(
        calls=tuple(
            ToolCall(id=f"c{i}", name="sleep", arguments=orjson.dumps({"ms": ms, "exclusive": ex}).decode())
            for i, (ms, ex) in enumerate(calls)
        ),
        max_parallel_tool_calls=POOL_CAP,
    )


def _threadpool_pool_ms(pool: ThreadPoolExecutor, calls: Sequence[tuple[float, bool]]) -> float:
    """The same calls on a ThreadPoolExecutor(8); an exclusive call waits for
    everything submitted before it and runs alone (what a caller would do)."""
    start = time.perf_counter()
    pending: list[Future[Any]] = []
    for ms, exclusive in calls:
        if exclusive:
            wait(pending)
            pool.submit(time.sleep, ms / 1000).result()
            pending = []
        else:
            pending.append(pool.submit(time.sleep, ms / 1000))
    wait(pending)
    return (time.perf_counter() - start) * 1000


def run_pool(plan: Plan, progress: Progress, trace_recorders: list[Any] | None = None) -> dict[str, Any]:
    progress.note("pool: sleep overshoot")
    overshoot = sleep_overshoot_ms(plan.overshoot_samples)
    out: dict[str, Any] = {"sleep_overshoot_ms": overshoot, "cap": POOL_CAP, "calls": POOL_CALLS}
    workloads = pool_workloads()
    with (
        ToolRuntime(max_parallel_tool_calls=CAP) as rt,
        ToolRuntime(max_parallel_tool_calls=CAP) as real,
        ThreadPoolExecutor(POOL_CAP) as pool,
    ):
        rt.tools.register(_pool_tool())
        real.tools.register(realistic_tool(_pool_tool()))
        harness = realistic(real)
        rt.tools.execute(_pool_batch([(1.0, False)] * 16))  # warm: call actors exist
        real.tools.execute(realistic_batch(_pool_batch([(1.0, False)] * 16), harness))
        _threadpool_pool_ms(pool, [(1.0, False)] * 16)
        for name, calls in workloads.items():
            progress.note(f"pool: {name}")
            batch = _pool_batch(calls)
            real_batch = realistic_batch(batch, harness)
            dsh, tpe, realistic_ms = [], [], []
            for _ in range(plan.pool_reps):
                start = time.perf_counter()
                rt.tools.execute(batch)
                dsh.append((time.perf_counter() - start) * 1000)
                start = time.perf_counter()
                real.tools.execute(real_batch)
                realistic_ms.append((time.perf_counter() - start) * 1000)
                tpe.append(_threadpool_pool_ms(pool, calls))
            ideal = ideal_makespan_ms(calls, POOL_CAP, overshoot)
            out[f"realistic_{name}"] = {"makespan_ms": median(realistic_ms), "ideal_ms": ideal, "reps": plan.pool_reps}
            out[name] = {
                "makespan_ms": median(dsh),
                "best_ms": min(dsh),
                "threadpool_ms": median(tpe),
                "ideal_ms": ideal_makespan_ms(calls, POOL_CAP, overshoot),
                "nominal_ms": ideal_makespan_ms(calls, POOL_CAP, 0.0),
                "lower_bound_ms": max(sum(ms for ms, _ in calls) / POOL_CAP, max(ms for ms, _ in calls)),
                "reps": plan.pool_reps,
            }
            progress.advance(f"pool: {name}")
        if trace_recorders is not None:
            import policies.trace as trace

            for pid, (name, calls) in enumerate(workloads.items(), start=1):
                progress.note(f"pool: tracing {name}")
                recorder = trace.Recorder(pid=pid, process_name=f"pool.{name} (64 calls, cap 8)")
                off = rt.use(trace, recorder=recorder)
                try:
                    rt.tools.execute(_pool_batch(calls))
                finally:
                    off()
                trace_recorders.append(recorder)
    return out


# --------------------------------------------------------------------------
# abort
# --------------------------------------------------------------------------


def run_abort(plan: Plan, progress: Progress) -> dict[str, Any]:
    """16 cooperative calls at cap 8: abort once the first 8 are running;
    time from ``abort()`` to the batch's result (8 drain, 8 are skipped)."""
    out: dict[str, Any] = {"calls": 16, "cap": POOL_CAP}
    started = threading.Semaphore(0)

    def polling(args: Any, ctx: Any) -> str:
        started.release()
        signal = ctx.signal
        while not signal.aborted:
            time.sleep(0.001)
        return "stopped"

    def waiting(args: Any, ctx: Any) -> str:
        started.release()
        ctx.signal.wait(30)
        return "stopped"

    with ToolRuntime(max_parallel_tool_calls=CAP) as rt:
        rt.tools.register(noop_tool("poll", polling))
        rt.tools.register(noop_tool("wait", waiting))
        for kind in ("poll", "wait"):
            progress.note(f"abort: {kind}")
            samples = []
            for rep in range(plan.abort_reps + 2):
                controller = AbortController()
                batch = noop_batch(16, name=kind, signal=controller.signal, max_parallel_tool_calls=POOL_CAP)
                future = rt.tools.submit(batch)
                for _ in range(POOL_CAP):
                    started.acquire(timeout=30)
                time.sleep(0.002)  # let them settle into their poll/wait
                start = time.perf_counter()
                controller.abort()
                future.result(timeout=30)
                if rep >= 2:  # two warm-ups
                    samples.append((time.perf_counter() - start) * 1000)
            out[kind] = {"settle_ms": median(samples), "max_ms": max(samples), "reps": len(samples)}
            progress.advance(f"abort: {kind}")
    return out


# --------------------------------------------------------------------------
# many agents
# --------------------------------------------------------------------------


def run_agents(plan: Plan, progress: Progress) -> dict[str, Any]:
    """10 parent agents with 9 children each (100 agents, nested scopes,
    each scope with its own tool shadowing the global one); every agent
    submits a batch of 10 no-op calls at once; a round ends when all 100
    have settled."""
    progress.note("many agents")
    agents_n, per_batch = 100, 10
    out: dict[str, Any] = {"agents": agents_n, "calls_per_batch": per_batch}
    with ToolRuntime(max_parallel_tool_calls=CAP) as rt, ThreadPoolExecutor(CAP) as pool:
        rt.tools.register(noop_tool())
        agents: list[Agent] = []
        for p in range(10):
            parent = Agent(f"p{p}")
            rt.tools.scope(parent).register(noop_tool())
            agents.append(parent)
            for c in range(9):
                agents.append(Agent(f"p{p}.c{c}", parent=parent))
        services = [rt.tools.scope(a) for a in agents]
        batch = noop_batch(per_batch)
        peak = ThreadPeak()

        def dsh_round() -> float:
            start = time.perf_counter()
            futures = [s.submit(batch) for s in services]
            for f in futures:
                f.result(timeout=60)
            peak.sample()
            return time.perf_counter() - start

        def tpe_round() -> float:
            return _threadpool_us(pool, agents_n * per_batch) / 1e6

        dsh_round()
        tpe_round()
        dsh, tpe = [], []
        for _ in range(plan.agent_rounds):
            dsh.append(dsh_round())
            tpe.append(tpe_round())
        total = agents_n * per_batch
        out["dsh_calls_per_s"] = total / median(dsh)
        out["threadpool_calls_per_s"] = total / median(tpe)
        out["dsh_round_ms"] = median(dsh) * 1000
        out["threadpool_round_ms"] = median(tpe) * 1000
        out["threads_after_round"] = peak.peak
        out["rounds"] = plan.agent_rounds
    progress.advance("many agents")
    return out
