"""Sub-calls are scheduled like a batch (SPEC section 7): safe ones overlap
up to max_parallel_sub_calls; an exclusive one waits for every running one
and nothing starts until it has finished, post-execute included; calls
start in the order the program made them.

Bodies record into a lock-protected timeline with one global sequence
number, so "A ended before B started" is an integer comparison; overlap is
forced with barriers, never with sleeps."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from dsh_actors import AbortController

from .helpers import GUARD, JSON_OUTPUT, batch, install, must, run_code, tool


@dataclass
class Timeline:
    lock: threading.Lock = field(default_factory=threading.Lock)
    seq: int = 0
    running: int = 0
    max_running: int = 0
    starts: dict[str, int] = field(default_factory=dict)
    ends: dict[str, int] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)

    def tick(self) -> int:
        self.seq += 1
        return self.seq

    def start(self, key: str) -> None:
        with self.lock:
            self.starts[key] = self.tick()
            self.order.append(key)
            self.running += 1
            self.max_running = max(self.max_running, self.running)

    def end(self, key: str) -> None:
        with self.lock:
            self.ends[key] = self.tick()
            self.running -= 1

    def overlaps(self, a: str, b: str) -> bool:
        return self.starts[a] < self.ends[b] and self.starts[b] < self.ends[a]


def test_a_gather_of_many_safe_calls_never_exceeds_max_parallel_sub_calls(rt: Any) -> None:
    install(rt, timeout_ms=5000, max_parallel_sub_calls=3)
    timeline = Timeline()
    full_house = threading.Barrier(3, timeout=GUARD)  # each round needs 3 running at once

    def work(args: Any, ctx: Any) -> int:
        key = f"w{args['i']}"
        timeline.start(key)
        full_house.wait()
        timeline.end(key)
        return args["i"]

    rt.tools.register(tool("work", work, parameters={"i": {"type": "integer"}}))
    result = run_code(rt, "return list(await asyncio.gather(*(tools.work(i=i) for i in range(12))))")
    assert result.value["result"] == tuple(range(12))
    assert timeline.max_running == 3
    # Started in the order made: each round of three is the next three calls
    # (within a round, bodies on different call actors begin in any order).
    rounds = [sorted(timeline.order[k : k + 3], key=lambda key: int(key[1:])) for k in range(0, 12, 3)]
    assert rounds == [[f"w{i}" for i in range(k, k + 3)] for k in range(0, 12, 3)]


def test_an_exclusive_sub_call_never_overlaps_another_and_waits_through_its_post_execute(rt: Any) -> None:
    install(rt, timeout_ms=5000, max_parallel_sub_calls=4)
    timeline = Timeline()
    pair = threading.Barrier(2, timeout=GUARD)

    def safe_body(args: Any, ctx: Any) -> str:
        key = f"s{args['i']}"
        timeline.start(key)
        if args.get("meet"):
            pair.wait()  # the two safe calls around each barrier do overlap
        timeline.end(key)
        return key

    def exclusive_body(args: Any, ctx: Any) -> str:
        key = f"x{args['i']}"
        timeline.start(key)
        timeline.end(key)
        return key

    post_ends: dict[str, int] = {}

    def post(execution: Any, result: Any, next: Any) -> Any:
        if execution.name == "exclusive":
            decision = next()
            with timeline.lock:
                post_ends[execution.call_id] = timeline.tick()
            return decision
        return next()

    rt.events.on("tools/post-execute", post)
    rt.tools.register(tool("safe", safe_body, parameters={"i": {"type": "integer"}, "meet": {"type": "boolean"}}))
    rt.tools.register(tool("exclusive", exclusive_body, parameters={"i": {"type": "integer"}}, concurrent=False))
    result = run_code(
        rt,
        "calls = [tools.safe(i=0, meet=True), tools.safe(i=1, meet=True), tools.exclusive(i=2),\n"
        "         tools.safe(i=3, meet=True), tools.safe(i=4, meet=True), tools.exclusive(i=5), tools.safe(i=6)]\n"
        "return list(await asyncio.gather(*calls))",
    )
    assert result.value["result"] == ("s0", "s1", "x2", "s3", "s4", "x5", "s6")
    assert timeline.overlaps("s0", "s1") and timeline.overlaps("s3", "s4")
    for x in ("x2", "x5"):
        for other in timeline.starts:
            if other != x:
                assert not timeline.overlaps(x, other), f"{x} overlapped {other}"
    # nothing after an exclusive call starts before its post-execute finished
    assert post_ends["c1:ptc:3"] < timeline.starts["s3"]
    assert post_ends["c1:ptc:6"] < timeline.starts["s6"]
    # In model order; the two safe calls of a pair are started in order, on
    # two call actors, and their bodies may begin in either order.
    order = timeline.order
    assert [set(order[0:2]), order[2], set(order[3:5]), order[5], order[6]] == [
        {"s0", "s1"},
        "x2",
        {"s3", "s4"},
        "x5",
        "s6",
    ]


def test_a_limit_of_one_runs_sub_calls_serially(rt: Any) -> None:
    install(rt, timeout_ms=5000, max_parallel_sub_calls=1)
    timeline = Timeline()

    def work(args: Any, ctx: Any) -> int:
        timeline.start(str(args["i"]))
        timeline.end(str(args["i"]))
        return args["i"]

    rt.tools.register(tool("work", work, parameters={"i": {"type": "integer"}}))
    result = run_code(rt, "return list(await asyncio.gather(*(tools.work(i=i) for i in range(5))))")
    assert result.value["result"] == (0, 1, 2, 3, 4)
    assert timeline.max_running == 1


def test_two_run_code_calls_of_one_batch_run_one_after_the_other(rt: Any) -> None:
    from dsh_actors import ToolBatchInput, ToolCall

    install(rt, timeout_ms=5000)
    timeline = Timeline()

    def work(args: Any, ctx: Any) -> str:
        timeline.start(ctx.call_id)
        timeline.end(ctx.call_id)
        return ctx.call_id

    rt.tools.register(tool("work", work))
    code = {"code": "a = await tools.work()\nb = await tools.work()\nreturn [a, b]"}
    batch = rt.tools.execute(
        ToolBatchInput(
            calls=(
                ToolCall(id="r1", name="run_code", arguments=code),
                ToolCall(id="r2", name="run_code", arguments=code),
            )
        )
    )
    assert [r.result.value["result"] for r in batch.results] == [("r1:ptc:1", "r1:ptc:2"), ("r2:ptc:1", "r2:ptc:2")]
    assert timeline.ends["r1:ptc:2"] < timeline.starts["r2:ptc:1"]


def test_a_sub_call_whose_tool_becomes_exclusive_while_it_waits_runs_alone(rt: Any) -> None:
    # Sub-calls are a sub-batch of the runtime's scheduler: what a call runs
    # with is what holds when its body starts (as for a batch's calls). w3
    # waits for a slot while g1 and g2 run; its tool is then replaced by an
    # exclusive one, so it is classified again and waits for g2 as well.
    from dsh_actors import define_tool

    install(rt, timeout_ms=5000, max_parallel_sub_calls=2)
    timeline = Timeline()
    started = {1: threading.Event(), 2: threading.Event()}
    release = {1: threading.Event(), 2: threading.Event()}
    looked_again = threading.Event()  # the replacement was classified, or its body ran
    beside: list[int] = []

    def gate(args: Any, ctx: Any) -> str:
        i = args["i"]
        timeline.start(f"g{i}")
        started[i].set()
        assert release[i].wait(GUARD)
        timeline.end(f"g{i}")
        return f"g{i}"

    def first(args: Any, ctx: Any) -> str:
        return "first"

    def replacement(args: Any, ctx: Any) -> str:
        timeline.start("w3")
        with timeline.lock:
            beside.append(timeline.running - 1)
        looked_again.set()
        timeline.end("w3")
        return "replacement"

    def exclusive_now(args: Any) -> bool:
        looked_again.set()
        return False

    rt.tools.register(tool("gate", gate, parameters={"i": {"type": "integer"}}))
    dispose_first = rt.tools.register(tool("work", first))
    future = rt.tools.submit(
        batch("return list(await asyncio.gather(tools.gate(i=1), tools.gate(i=2), tools.work()))", log=False)
    )
    must(started[1], "g1 started")
    must(started[2], "g2 started")
    dispose_first()  # (w3 is not looked at meanwhile: nothing reaches its batch)
    rt.tools.register(
        define_tool(
            name="work",
            description="now exclusive",
            parameters={},
            output=JSON_OUTPUT,
            execute=replacement,
            is_concurrency_safe=exclusive_now,
        )
    )
    release[1].set()
    must(looked_again, "w3 classified again")
    release[2].set()
    result = future.result(GUARD).results[0].result
    assert result.value["result"] == ("g1", "g2", "replacement")
    assert beside == [0], "the exclusive replacement ran beside another call"
    assert timeline.ends["g2"] < timeline.starts["w3"]


def test_a_sub_call_commits_as_soon_as_it_settles_even_behind_a_running_one(rt: Any) -> None:
    # The program waits for the second call's result before it makes the
    # third, which lets the first finish: results do not wait for model
    # order (that would deadlock this program until its timeout).
    install(rt, timeout_ms=5000)
    opened = threading.Event()

    def wait_open(args: Any, ctx: Any) -> str:
        assert opened.wait(GUARD)
        return "waited"

    def ping(args: Any, ctx: Any) -> str:
        return "pong"

    def open_door(args: Any, ctx: Any) -> str:
        opened.set()
        return "opened"

    rt.tools.register(tool("wait_open", wait_open))
    rt.tools.register(tool("ping", ping))
    rt.tools.register(tool("open_door", open_door))
    result = run_code(
        rt,
        "waiter = asyncio.ensure_future(tools.wait_open())\n"
        "first = await tools.ping()\n"
        "second = await tools.open_door()\n"
        "return [first, second, await waiter]",
    )
    assert result.value["result"] == ("pong", "opened", "waited")


def test_a_sub_call_the_run_ended_before_it_started_still_gets_its_tools_result(rt: Any) -> None:
    # As for a batch's calls: every call the program made publishes exactly
    # one tools/result; one that never started is ABORTED_BEFORE_DISPATCH
    # (and, having not started, is not logged: see test_ptc_log).
    install(rt, timeout_ms=5000, max_parallel_sub_calls=1)
    began = threading.Event()

    def slow(args: Any, ctx: Any) -> str:
        began.set()
        ctx.signal.wait(GUARD)
        return "late"

    rt.tools.register(tool("slow", slow))
    rt.tools.register(tool("echo", lambda args, ctx: "echo"))
    results: dict[str, str | None] = {}

    def on_result(execution: Any, result: Any) -> None:
        info = result.error.info if result.is_error else None
        results[execution.call_id] = None if info is None else str(info.code)

    rt.events.on("tools/result", on_result)
    made = threading.Event()  # the progress report comes after both calls, on the same pipe
    rt.events.on("tools/progress", lambda execution, progress: made.set())
    controller = AbortController()
    code = (
        "calls = [asyncio.ensure_future(tools.slow()), asyncio.ensure_future(tools.echo())]\n"
        "await asyncio.sleep(0)\n"
        "report_progress(1)\n"
        "await asyncio.gather(*calls)"
    )
    future = rt.tools.submit(batch(code, signal=controller.signal, log=False))
    must(made, "the program made both calls")
    must(began, "the first call started")
    controller.abort("stop")
    future.result(GUARD)
    assert results == {"c1:ptc:1": "ABORTED", "c1:ptc:2": "ABORTED_BEFORE_DISPATCH", "c1": "CODE_RUN_FAILED"}


def _result_codes(rt: Any) -> dict[str, str | None]:
    """Each call's code as its tools/result has it (None: a success or no code)."""
    results: dict[str, str | None] = {}

    def on_result(execution: Any, result: Any) -> None:
        info = result.error.info if result.is_error else None
        results[execution.call_id] = None if info is None else str(info.code)

    rt.events.on("tools/result", on_result)
    return results


def test_a_running_call_the_program_cancels_is_aborted_alone_and_frees_its_place(rt: Any) -> None:
    # One place (max_parallel_sub_calls=1): the program gives up on `slow`
    # and calls `echo`, which can start only once `slow` has left its place.
    install(rt, timeout_ms=5000, max_parallel_sub_calls=1)
    began = threading.Event()
    aborted: list[bool] = []

    def slow(args: Any, ctx: Any) -> str:
        began.set()
        aborted.append(ctx.signal.wait(GUARD))
        return "late"

    rt.tools.register(tool("slow", slow))
    rt.tools.register(tool("echo", lambda args, ctx: "echo"))
    results = _result_codes(rt)
    # The progress report comes after the call on the same pipe, and before
    # the cancel: the run reads the cancel once `slow` has begun.
    rt.events.on("tools/progress", lambda execution, progress: must(began, "slow began"))
    code = (
        "task = asyncio.ensure_future(tools.slow())\n"
        "await asyncio.sleep(0)\n"
        "report_progress(1)\n"
        "task.cancel()\n"
        "try:\n"
        "    await task\n"
        "except asyncio.CancelledError:\n"
        "    pass\n"
        "return await tools.echo()"
    )
    result = run_code(rt, code)
    assert result.value["result"] == "echo", result
    assert aborted == [True]
    assert results == {"c1:ptc:1": "ABORTED", "c1:ptc:2": None, "c1": None}


def test_a_call_the_program_cancels_before_it_started_never_starts(rt: Any) -> None:
    install(rt, timeout_ms=5000, max_parallel_sub_calls=1)
    release = threading.Event()
    ran: list[str] = []

    def hold(args: Any, ctx: Any) -> str:
        must(release, "the program cancelled the queued call")
        return "held"

    rt.tools.register(tool("hold", hold))
    rt.tools.register(tool("queued", lambda args, ctx: ran.append("queued") or "ran"))
    results = _result_codes(rt)
    # The cancel is on the pipe before the progress report: `hold` ends after the run read it.
    rt.events.on("tools/progress", lambda execution, progress: release.set())
    code = (
        "held = asyncio.ensure_future(tools.hold())\n"
        "queued = asyncio.ensure_future(tools.queued())\n"
        "await asyncio.sleep(0)\n"
        "queued.cancel()\n"
        "try:\n"
        "    await queued\n"
        "except asyncio.CancelledError:\n"
        "    pass\n"
        "report_progress(1)\n"
        "return await held"
    )
    result = run_code(rt, code)
    assert result.value["result"] == "held", result
    assert ran == []
    assert results == {"c1:ptc:1": None, "c1:ptc:2": "ABORTED_BEFORE_DISPATCH", "c1": None}


def test_a_sub_batch_that_fails_internally_ends_the_run_at_once(rt: Any, monkeypatch: Any) -> None:
    # A bug in the scheduler fails the sub-batch (it never hangs): the run
    # ends "internal" instead of leaving the program waiting for its timeout.
    from dsh_actors.scheduling.batch import BatchRun

    def broken(self: Any, fed: Any) -> None:
        raise RuntimeError("a bug in the scheduler")

    monkeypatch.setattr(BatchRun, "_fed", broken)
    install(rt, timeout_ms=60_000)
    rt.tools.register(tool("work", lambda args, ctx: 1))
    result = run_code(rt, "return await tools.work()")
    message = result.error.message
    assert message.startswith(
        "code run failed (internal): the program's tool calls could not be scheduled: tool batch failed: "
        "internal error: RuntimeError: a bug in the scheduler"
    ), message
    assert "- c1:ptc:1 work: no result (its scheduling failed)" in message
