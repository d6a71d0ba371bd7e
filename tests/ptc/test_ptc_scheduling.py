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

from .helpers import GUARD, install, run_code, tool


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
    assert timeline.order == [f"w{i}" for i in range(12)]  # started in the order made


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
    assert timeline.order == ["s0", "s1", "x2", "s3", "s4", "x5", "s6"]


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
