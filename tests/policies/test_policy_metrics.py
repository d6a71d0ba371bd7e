"""policies.metrics: outcomes by tool and code, latency percentiles with
dispatch wait (and, within it, the approval and the queue for capacity),
body time and total time kept apart, and how busy the runtime is (its
capacity, as a dict and as OpenTelemetry gauges)."""

from __future__ import annotations

import math
import threading
from typing import Any

import orjson
import pytest
from otel_helpers import Otel
from policy_helpers import SETTLED_BEFORE_DISPATCH, WAIT, call, run, run_one, settle_before_dispatch, tool

import policies
from dsh_actors import (
    AbortController,
    AbortSignal,
    Agent,
    Ask,
    Deny,
    NativeExecutor,
    ToolArgsError,
    ToolBatchInput,
    ToolExecutionInput,
    ToolRuntime,
)
from policies.metrics import GAUGES, UNKNOWN_TOOLS, Metrics

MAIN = Agent("main")


class FakeClock:
    """Seconds that move only when a test says so."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = 0.0

    def __call__(self) -> float:
        with self._lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds


def test_outcomes_are_counted_by_tool_and_code(rt: Any) -> None:
    def invalid(args: Any, ctx: Any) -> Any:
        raise ToolArgsError(["nope"])

    def plain(args: Any, ctx: Any) -> Any:
        raise ValueError("no code")

    metrics = policies.metrics.install(rt)
    rt.tools.register(tool("echo"))
    rt.tools.register(tool("invalid", invalid))
    rt.tools.register(tool("plain", plain))

    run(rt, call("echo", id="a"), call("echo", id="b"), call("invalid", id="c"), call("plain", id="d"))
    run_one(rt, call("missing"))

    snap = metrics.snapshot()
    assert snap["calls"] == 5
    # A plain exception from a body is TOOL_FAILED (its info names the class).
    assert snap["outcomes"] == {"TOOL_FAILED": 1, "INVALID_ARGS": 1, "UNKNOWN_TOOL": 1, "ok": 2}
    assert snap["tools"]["echo"]["outcomes"] == {"ok": 2}
    assert snap["tools"]["invalid"]["outcomes"] == {"INVALID_ARGS": 1}
    assert snap["tools"]["plain"]["outcomes"] == {"TOOL_FAILED": 1}
    assert snap["tools"][UNKNOWN_TOOLS]["outcomes"] == {"UNKNOWN_TOOL": 1} and "missing" not in snap["tools"]
    assert metrics.count("echo") == 2 and metrics.count("echo", "ERROR") == 0
    assert snap["in_flight"] == 0


def test_skipped_calls_of_a_pre_aborted_batch_are_counted_without_latencies(rt: Any) -> None:
    controller = AbortController()
    controller.abort()
    metrics = policies.metrics.install(rt)
    rt.tools.register(tool("echo"))

    run(rt, *[call("echo", id=f"c{i}") for i in range(3)], signal=controller.signal)

    snap = metrics.snapshot()
    assert snap["tools"]["echo"]["outcomes"] == {"ABORTED_BEFORE_DISPATCH": 3}
    latency = snap["tools"]["echo"]["latency_ms"]
    assert [latency[p]["count"] for p in ("wait", "body", "total")] == [0, 0, 0]
    assert latency["total"]["p50"] is None


def test_dispatch_wait_body_time_and_total_time_are_kept_apart(rt: Any) -> None:
    clock = FakeClock()

    def slow_policy(execution: Any, next_: Any) -> Any:
        clock.advance(2.0)  # pre-execute policy: part of the wait
        return next_()

    def body(args: Any, ctx: Any) -> Any:
        clock.advance(5.0)
        return "done"

    def slow_post(execution: Any, result: Any, next_: Any) -> Any:
        clock.advance(1.0)  # after dispatch: only in the total
        return next_()

    rt.events.on("tools/pre-execute", slow_policy)
    rt.events.on("tools/post-execute", slow_post)
    metrics = policies.metrics.install(rt, clock=clock)
    rt.tools.register(tool("work", body))

    run_one(rt, call("work"))

    latency = metrics.snapshot()["tools"]["work"]["latency_ms"]
    assert latency["wait"]["p50"] == 2000.0
    assert latency["body"]["p50"] == 5000.0
    assert latency["total"]["p50"] == 8000.0


def test_a_denied_call_has_a_total_but_no_wait_or_body(rt: Any) -> None:
    clock = FakeClock()

    def deny(execution: Any, next_: Any) -> Any:
        clock.advance(0.5)
        return Deny("not today")

    rt.events.on("tools/pre-execute", deny)
    metrics = policies.metrics.install(rt, clock=clock)
    rt.tools.register(tool("echo"))

    run_one(rt, call("echo"))

    tools = metrics.snapshot()["tools"]
    assert tools["echo"]["outcomes"] == {"ERROR": 1}
    latency = tools["echo"]["latency_ms"]
    assert latency["wait"]["count"] == 0 and latency["body"]["count"] == 0
    assert latency["total"]["max"] == 500.0


def test_percentiles_are_nearest_rank_over_the_samples(rt: Any) -> None:
    clock = FakeClock()
    durations = iter(range(100, 0, -1))

    def body(args: Any, ctx: Any) -> Any:
        clock.advance(next(durations) / 1000.0)
        return "ok"

    metrics = policies.metrics.install(rt, clock=clock)
    rt.tools.register(tool("work", body))
    for i in range(100):
        run_one(rt, call("work", id=f"c{i}"))

    body_ms = metrics.snapshot()["tools"]["work"]["latency_ms"]["body"]
    assert body_ms["count"] == 100
    assert [round(body_ms[k], 6) for k in ("p50", "p90", "p99", "min", "max", "mean")] == [50, 90, 99, 1, 100, 50.5]


def test_percentiles_use_the_newest_samples_only(rt: Any) -> None:
    clock = FakeClock()
    durations = iter([1.0, 1.0, 1.0, 0.001, 0.001])

    def body(args: Any, ctx: Any) -> Any:
        clock.advance(next(durations))
        return "ok"

    metrics = policies.metrics.install(rt, clock=clock, max_samples=2)
    rt.tools.register(tool("work", body))
    for i in range(5):
        run_one(rt, call("work", id=f"c{i}"))

    body_ms = metrics.snapshot()["tools"]["work"]["latency_ms"]["body"]
    assert body_ms["count"] == 5 and body_ms["max"] == 1000.0  # all-time
    assert body_ms["p99"] == pytest.approx(1.0)  # the window holds the last two


def test_a_snapshot_is_a_fresh_plain_dict_and_to_json_exports_it(rt: Any) -> None:
    metrics = policies.metrics.install(rt)
    rt.tools.register(tool("echo"))
    run_one(rt, call("echo"))

    snap = metrics.snapshot()
    snap["tools"]["echo"]["outcomes"]["ok"] = 99
    assert metrics.snapshot()["tools"]["echo"]["outcomes"]["ok"] == 1
    assert orjson.loads(metrics.to_json()) == metrics.snapshot()


def test_nested_false_ignores_nested_calls(rt: Any) -> None:
    def composite(args: Any, ctx: Any) -> Any:
        rt.tools.dispatch(
            ToolExecutionInput(
                call_id=f"{ctx.call_id}:inner",
                root_call_id=ctx.root_call_id,
                name="echo",
                arguments={"message": "inner"},
                signal=ctx.signal,
                agent=ctx.agent,
                parent=ctx.token,
            )
        )
        return "done"

    everything = policies.metrics.install(rt)
    roots = Metrics(nested=False)
    rt.use(policies.metrics, metrics=roots)
    rt.tools.register(tool("echo"))
    rt.tools.register(tool("composite", composite))

    run_one(rt, call("composite"), agent=Agent("main"))

    assert everything.snapshot()["calls"] == 2
    assert roots.snapshot()["calls"] == 1 and "echo" not in roots.snapshot()["tools"]


def test_the_calls_of_tools_unknown_to_their_agent_share_one_entry(rt: Any) -> None:
    # (Each name a model made up kept an entry of its own, with its
    # windows, for good: the entries grew without bound.)
    metrics = policies.metrics.install(rt)
    rt.tools.register(tool("echo"))

    run(rt, call("echo", id="a"), *[call(f"made_up_{i}", id=f"u{i}") for i in range(5)], agent=MAIN)

    snap = metrics.snapshot()
    assert sorted(snap["tools"]) == [UNKNOWN_TOOLS, "echo"]
    unknown = snap["tools"][UNKNOWN_TOOLS]
    assert unknown["calls"] == 5 and unknown["outcomes"] == {"UNKNOWN_TOOL": 5}
    assert unknown["latency_ms"]["total"]["count"] == 5
    assert metrics.count(UNKNOWN_TOOLS, "UNKNOWN_TOOL") == 5 and metrics.count("made_up_0", "UNKNOWN_TOOL") == 0
    assert snap["outcomes"] == {"UNKNOWN_TOOL": 5, "ok": 1}


@pytest.mark.parametrize("how", SETTLED_BEFORE_DISPATCH)
def test_a_made_up_name_settled_before_it_dispatches_is_counted_as_unknown(rt: Any, how: str) -> None:
    # (Only a call that failed UNKNOWN_TOOL went to the bucket: one settled
    # before, by arguments that are not JSON, a denial, a cancel, kept an
    # entry of its own name for good, however many names a model made up.)
    metrics = policies.metrics.install(rt)
    rt.tools.register(tool("echo"))
    made_up = settle_before_dispatch(rt, how, "made_up_0", "u0")

    run(rt, call("echo", id="a"), made_up, agent=MAIN)

    snap = metrics.snapshot()
    assert sorted(snap["tools"]) == [UNKNOWN_TOOLS, "echo"]
    assert snap["tools"][UNKNOWN_TOOLS]["outcomes"] == {SETTLED_BEFORE_DISPATCH[how] or "ERROR": 1}


@pytest.mark.parametrize("own", [False, True], ids=["registered", "executor's own"])
@pytest.mark.parametrize("how", SETTLED_BEFORE_DISPATCH)
def test_a_real_tool_settled_before_it_dispatches_keeps_its_name(rt: Any, how: str, own: bool) -> None:
    # A tool the agent may run, whoever provides it (an executor's own, as
    # PTC's run_code, is not in the registry: rt.tools.executable says None).
    metrics = policies.metrics.install(rt)
    if own:

        class Own(NativeExecutor):
            def executor_tools(self) -> Any:
                return (tool("echo"),)

        rt.tools.set_executor(Own())
    else:
        rt.tools.register(tool("echo"))
    run(rt, call("echo", id="a"), settle_before_dispatch(rt, how, "echo", "b"), agent=MAIN)

    snap = metrics.snapshot()
    assert sorted(snap["tools"]) == ["echo"]
    assert snap["tools"]["echo"]["outcomes"] == {"ok": 1, SETTLED_BEFORE_DISPATCH[how] or "ERROR": 1}


def test_the_execution_says_whether_the_pipeline_found_its_tool(rt: Any) -> None:
    # What the policies key on (execution.tool_found): the pipeline's own
    # lookup, an executor's own tool included, seen by every hook of a call;
    # a call settled as it begins (arguments not lossless JSON) is looked up
    # before its tools/result.
    class Own(NativeExecutor):
        def executor_tools(self) -> Any:
            return (tool("own"),)

    rt.tools.set_executor(Own())
    rt.tools.register(tool("echo"))
    seen: list[tuple[str, str, bool | None]] = []

    def pre_execute(execution: Any, next_: Any) -> Any:
        seen.append(("pre-execute", execution.name, execution.tool_found))
        return next_()

    rt.events.on("tools/pre-execute", pre_execute)
    rt.events.on(
        "tools/result", lambda execution, result: seen.append(("result", execution.name, execution.tool_found))
    )

    run(rt, call("echo", id="a"), call("own", id="b"), call("made_up", id="c"), agent=MAIN)
    run(rt, settle_before_dispatch(rt, "bad-json", "made_up", "d"), agent=MAIN)

    assert sorted(seen) == [
        ("pre-execute", "echo", True),
        ("pre-execute", "made_up", False),
        ("pre-execute", "own", True),
        ("result", "echo", True),
        ("result", "made_up", False),
        ("result", "made_up", False),
        ("result", "own", True),
    ]


def test_a_made_up_name_deferred_leaves_its_approval_in_the_unknown_entry(rt: Any) -> None:
    # (Its approval, sampled as the batch suspends, made an entry of the name.)
    metrics = policies.metrics.install(rt)
    rt.events.on("tools/pre-execute", lambda execution, next_: Ask(reason="check"))
    rt.approvals.set(lambda request: "deferred")

    suspended = rt.tools.execute(ToolBatchInput(calls=(call("made_up_0", id="u0"),), agent=MAIN))

    assert suspended.pending == ("u0",)
    snap = metrics.snapshot()
    assert sorted(snap["tools"]) == [UNKNOWN_TOOLS]
    assert snap["tools"][UNKNOWN_TOOLS]["latency_ms"]["approval"]["count"] == 1


def test_a_tools_latency_windows_are_made_at_its_first_sample(rt: Any) -> None:
    # (Each tool made its five windows at its first call, sampled or not.)
    metrics = policies.metrics.install(rt)
    rt.tools.register(tool("echo"))
    controller = AbortController()
    controller.abort()

    run_one(rt, call("echo"), signal=controller.signal)  # aborted before it started: no phase ran

    assert metrics._tools["echo"].series == {}
    latency = metrics.snapshot()["tools"]["echo"]["latency_ms"]
    assert latency["total"] == {
        "count": 0,
        "mean": None,
        "min": None,
        "max": None,
        "p50": None,
        "p90": None,
        "p99": None,
    }
    run_one(rt, call("echo"))
    assert sorted(metrics._tools["echo"].series) == ["approval", "body", "queue", "total", "wait"]


def test_disposing_stops_counting_and_keeps_the_counts(rt: Any) -> None:
    metrics = policies.metrics.install(rt)
    rt.tools.register(tool("echo"))
    run_one(rt, call("echo"))
    metrics.dispose()
    metrics.dispose()  # idempotent
    run_one(rt, call("echo"))

    assert metrics.snapshot()["calls"] == 1
    assert not metrics.installed
    assert all(rt.events.listeners(n) == () for n in ("tools/pre-execute", "tools/execute", "tools/result"))


def test_metrics_installed_before_the_runtime_starts_count_once_it_runs() -> None:
    # (It added a guard, which a runtime not started refuses: it adds none now.)
    rt = ToolRuntime()
    metrics = policies.metrics.install(rt)
    with rt:
        rt.tools.register(tool("echo"))
        run_one(rt, call("echo"))
    assert metrics.snapshot()["outcomes"] == {"ok": 1}


def test_a_metrics_object_is_installed_once_at_a_time(rt: Any) -> None:
    metrics = policies.metrics.install(rt)
    with pytest.raises(RuntimeError, match="already installed"):
        rt.use(policies.metrics, metrics=metrics)
    metrics.dispose()
    undo = rt.use(policies.metrics, metrics=metrics)
    assert metrics.installed
    undo()
    assert not metrics.installed


def test_reset_forgets_the_counts(rt: Any) -> None:
    metrics = policies.metrics.install(rt)
    rt.tools.register(tool("echo"))
    run_one(rt, call("echo"))
    metrics.reset()
    assert metrics.snapshot()["calls"] == 0 and metrics.snapshot()["tools"] == {}


@pytest.mark.parametrize(
    ("config", "error", "match"),
    [
        ({"max_samples": 0}, ValueError, "max_samples"),
        ({"max_samples": 2**63}, ValueError, "max_samples must be at most 1,000,000"),
        # (Asked as the policy is made: it used to fail every call it timed.)
        ({"clock": lambda: None}, TypeError, "clock must return seconds as a float, and it returned NoneType"),
        ({"clock": lambda: math.nan}, ValueError, "clock must return a finite number of seconds, and it returned nan"),
        ({"nested": "yes"}, TypeError, "nested"),
        ({"clock": 3}, TypeError, "clock"),
        ({"window": 3}, TypeError, "unknown option"),
        ({"metrics": Metrics(), "max_samples": 3}, TypeError, "not both"),
        ({"metrics": "m"}, TypeError, "must be a Metrics"),
        ({"meter_provider": "otel"}, TypeError, "meter_provider must be an OpenTelemetry MeterProvider"),
    ],
)
def test_bad_config_is_rejected_when_applied(
    rt: Any, config: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        rt.use(policies.metrics, **config)
    assert rt.events.listeners("tools/result") == ()


def test_a_deferred_call_is_not_left_in_flight_and_is_counted_when_it_is_resumed(rt: Any) -> None:
    clock = FakeClock()

    def later(request: Any) -> str:
        clock.advance(2.0)  # a person who takes a while to say "later"
        return "deferred"

    metrics = policies.metrics.install(rt, clock=clock)
    rt.tools.register(tool("echo"))
    rt.events.on(
        "tools/pre-execute", lambda execution, next_: Ask(reason="check") if execution.call_id == "a" else next_()
    )
    rt.approvals.set(later)
    suspended = rt.tools.execute(ToolBatchInput(calls=(call("echo", id="a"), call("echo", id="b")), agent=Agent("m")))
    assert suspended.pending == ("a",)
    snap = metrics.snapshot()
    assert snap["in_flight"] == 0 and snap["calls"] == 1
    # Its approval is timed to the "deferred" answer and sampled as it
    # defers (it left no sample: a farm saw no time spent waiting for a person).
    assert (snap["latency_ms"]["approval"]["count"], snap["latency_ms"]["approval"]["max"]) == (1, 2000.0)
    rt.tools.resume(suspended.suspension, {"a": "allowed-once"})
    snap = metrics.snapshot()
    assert snap["in_flight"] == 0 and snap["outcomes"] == {"ok": 2}
    # The answer came at resume (it could have come in another process): not
    # timed, nothing counts twice; the resumed call has no other latency.
    latency = snap["latency_ms"]
    assert (latency["approval"]["count"], latency["total"]["count"]) == (1, 1)


def test_a_nested_call_deferred_is_refused_and_its_approval_sampled_once(rt: Any) -> None:
    clock = FakeClock()

    def later(request: Any) -> str:
        clock.advance(2.0)
        return "deferred"

    metrics = policies.metrics.install(rt, clock=clock)
    rt.tools.register(tool("echo"))
    rt.events.on("tools/pre-execute", lambda execution, next_: Ask(reason="check"))
    rt.approvals.set(later)
    nested = ToolExecutionInput(call_id="n", name="echo", arguments={}, signal=AbortSignal(), agent=MAIN)

    assert rt.tools.dispatch(nested).is_error  # (only a batch can wait for a decision)

    snap = metrics.snapshot()
    latency = snap["tools"]["echo"]["latency_ms"]
    assert (latency["approval"]["count"], latency["approval"]["max"], latency["total"]["count"]) == (1, 2000.0, 1)
    assert snap["in_flight"] == 0


def test_the_approval_and_the_queue_are_kept_apart_within_the_wait(rt: Any) -> None:
    clock = FakeClock()

    def asks(execution: Any, next_: Any) -> Any:
        clock.advance(2.0)  # pre-execute policy: in the wait, in neither of its parts
        return Ask(reason="check") if execution.name == "asked" else next_()

    def person(request: Any) -> str:
        clock.advance(7.0)  # a person answering
        return "allowed-once"

    def earlier_guard(execution: Any) -> None:
        clock.advance(0.25)  # a guard registered before the policy: in the queue too
        return None

    def later_guard(execution: Any) -> None:
        clock.advance(0.5)  # a guard after the approval's: in the queue
        return None

    def body(args: Any, ctx: Any) -> Any:
        clock.advance(5.0)
        return "done"

    rt.events.on("tools/pre-execute", asks)
    rt.approvals.set(person)
    rt.tools.guard(earlier_guard)
    metrics = policies.metrics.install(rt, clock=clock)
    rt.tools.guard(later_guard)
    rt.tools.register(tool("asked", body))
    rt.tools.register(tool("plain", body))

    run_one(rt, call("asked"), agent=MAIN)
    run_one(rt, call("plain"), agent=MAIN)

    tools = metrics.snapshot()["tools"]
    # The approval ends at the service's answer: every guard, whenever it
    # was registered, is in the queue, as for a call that was not asked.
    asked = {phase: s["max"] for phase, s in tools["asked"]["latency_ms"].items()}
    assert asked == {"wait": 9750.0, "approval": 7000.0, "queue": 750.0, "body": 5000.0, "total": 14750.0}
    assert tools["asked"]["latency_ms"]["approval"]["count"] == 1
    plain = tools["plain"]["latency_ms"]
    assert plain["approval"]["count"] == 0
    assert (plain["wait"]["max"], plain["queue"]["max"]) == (2750.0, 750.0)


@pytest.mark.parametrize("answer", ["rejected", "cancelled", "unavailable"])
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_a_denied_approval_is_timed_to_its_answer(rt: Any, answer: str, is_async: bool) -> None:
    # (No hook ran at a denial: it left no approval sample.)
    clock = FakeClock()

    def person(request: Any) -> str:
        clock.advance(3.0)  # a person who takes a while to say no
        return answer

    async def aperson(request: Any) -> str:
        return person(request)

    rt.events.on("tools/pre-execute", lambda execution, next_: Ask(reason="check"))
    rt.approvals.set(aperson if is_async else person)
    metrics = policies.metrics.install(rt, clock=clock)
    rt.tools.register(tool("echo"))

    run_one(rt, call("echo"), agent=MAIN)

    latency = metrics.snapshot()["tools"]["echo"]["latency_ms"]
    assert [latency[p]["count"] for p in ("wait", "approval", "queue", "body", "total")] == [0, 1, 0, 0, 1]
    assert (latency["approval"]["max"], latency["total"]["max"]) == (3000.0, 3000.0)


def test_an_ask_a_listener_outside_the_policy_makes_is_timed_as_any(rt: Any) -> None:
    # The approval starts at the pipeline's request (tools/approval-request),
    # whichever listener asked: one subscribed after the policy, outside it,
    # that turns Allow into Ask is timed too.
    clock = FakeClock()

    def person(request: Any) -> str:
        clock.advance(3.0)
        return "allowed-once"

    rt.approvals.set(person)
    metrics = policies.metrics.install(rt, clock=clock)

    def outer(execution: Any, next_: Any) -> Any:
        next_()
        return Ask(reason="check")

    rt.events.on("tools/pre-execute", outer, prepend=True)
    rt.tools.register(tool("echo"))

    run_one(rt, call("echo"), agent=MAIN)

    latency = metrics.snapshot()["tools"]["echo"]["latency_ms"]
    assert (latency["approval"]["count"], latency["approval"]["max"]) == (1, 3000.0)


@pytest.mark.parametrize("service", [None, "raises", "nonsense"])
def test_an_approval_no_service_answered_leaves_no_approval_sample(rt: Any, service: str | None) -> None:
    def person(request: Any) -> str:
        if service == "raises":
            raise RuntimeError("no person here")
        return "maybe"

    rt.events.on("tools/pre-execute", lambda execution, next_: Ask(reason="check"))
    if service is not None:
        rt.approvals.set(person)
    metrics = policies.metrics.install(rt)
    rt.tools.register(tool("echo"))

    run_one(rt, call("echo"), agent=MAIN)

    snap = metrics.snapshot()
    latency = snap["tools"]["echo"]["latency_ms"]
    assert (latency["approval"]["count"], latency["total"]["count"], snap["in_flight"]) == (0, 1, 0)


def test_the_phases_of_calls_waiting_for_the_cap_add_up_to_their_time_from_the_batch_opening(rt: Any) -> None:
    # (A call waiting for its batch's cap before it was prepared was in no
    # phase: its wait, queue and total began only as it was prepared.)
    clock = FakeClock()
    running = {"c0": threading.Event(), "c1": threading.Event()}
    release = threading.Event()
    prepared_ahead = threading.Event()
    entered: dict[str, float] = {}
    results: dict[str, float] = {}

    def held(args: Any, ctx: Any) -> Any:
        event = running.get(ctx.call_id)
        if event is not None:
            event.set()
            release.wait(WAIT)
        return "done"

    def asks_first(execution: Any, next_: Any) -> Any:
        entered[execution.call_id] = clock()
        return Ask(reason="check") if execution.call_id == "c0" else next_()

    def person(request: Any) -> str:
        clock.advance(1.0)  # the calls after it wait for their turn meanwhile
        return "allowed-once"

    def guard(execution: Any) -> None:
        if execution.call_id == "c3":
            prepared_ahead.set()
        return None

    rt.events.on("tools/pre-execute", asks_first)
    rt.approvals.set(person)
    metrics = policies.metrics.install(rt, clock=clock)
    rt.tools.guard(guard)
    rt.events.on("tools/result", lambda execution, result: results.__setitem__(execution.call_id, clock()))
    for i in range(5):
        rt.tools.register(tool(f"t{i}", held))
    batch = ToolBatchInput(
        calls=tuple(call(f"t{i}", id=f"c{i}") for i in range(5)), agent=MAIN, max_parallel_tool_calls=2
    )
    runner = threading.Thread(target=rt.tools.execute, args=(batch,))
    runner.start()
    try:
        # Two calls run (the cap), two are prepared ahead of a free slot, and
        # the fifth waits for a slot before it is prepared.
        assert running["c0"].wait(WAIT) and running["c1"].wait(WAIT) and prepared_ahead.wait(WAIT)
        clock.advance(3.0)
    finally:
        release.set()
        runner.join(WAIT)
    assert not runner.is_alive()
    assert entered == {"c0": 0.0, "c1": 1.0, "c2": 1.0, "c3": 1.0, "c4": 4.0}

    tools = metrics.snapshot()["tools"]
    phases = {i: {phase: s["max"] for phase, s in tools[f"t{i}"]["latency_ms"].items()} for i in range(5)}
    for i, got in phases.items():
        # From the batch's opening (0) to its result, and nothing in between
        # left out: no time in the listeners, nor after the bodies.
        assert got["total"] == results[f"c{i}"] * 1000.0
        assert got["wait"] + got["body"] == got["total"]
        assert got["queue"] + (got["approval"] or 0.0) == got["wait"]
    assert phases[0] == {"wait": 1000.0, "approval": 1000.0, "queue": 0.0, "body": 3000.0, "total": 4000.0}
    assert phases[1] == {"wait": 1000.0, "approval": None, "queue": 1000.0, "body": 3000.0, "total": 4000.0}
    assert phases[4] == {"wait": 4000.0, "approval": None, "queue": 4000.0, "body": 0.0, "total": 4000.0}


def test_a_nested_call_and_a_call_dispatched_again_start_as_they_enter(rt: Any) -> None:
    # (Calls of a batch start as it opens, told apart by their signal: these share one and are no batch.)
    clock = FakeClock()

    def work(args: Any, ctx: Any) -> Any:
        clock.advance(1.0)
        return "done"

    def composite(args: Any, ctx: Any) -> Any:
        for i in range(2):
            nested = ToolExecutionInput(
                call_id=f"{ctx.call_id}:{i}", name="nested", arguments={}, signal=ctx.signal, parent=ctx.token
            )
            rt.tools.dispatch(nested)
        return "done"

    metrics = policies.metrics.install(rt, clock=clock)
    rt.tools.register(tool("again", work))
    rt.tools.register(tool("nested", work))
    rt.tools.register(tool("composite", composite))
    again = ToolExecutionInput(call_id="d1", name="again", arguments={}, signal=AbortSignal())
    for _ in range(2):
        rt.tools.dispatch(again)
    run_one(rt, call("composite"))

    tools = metrics.snapshot()["tools"]
    for name in ("again", "nested"):
        assert tools[name]["latency_ms"]["total"]["count"] == 2
        assert tools[name]["latency_ms"]["total"]["max"] == 1000.0


def gauges(otel: Otel) -> dict[str, int]:
    """The dsh.* gauges the reader collects now, by name."""
    data = otel.reader.get_metrics_data()
    out: dict[str, int] = {}
    for resource in () if data is None else data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name.startswith("dsh."):
                    (point,) = metric.data.data_points
                    out[metric.name] = point.value
    return out


def test_a_call_waiting_for_a_call_actor_is_in_its_queue_and_the_gauges_show_it(otel: Otel) -> None:
    clock = FakeClock()
    first_runs = threading.Event()
    second_queued = threading.Event()
    looked = threading.Event()
    finish_first = threading.Event()

    def first(args: Any, ctx: Any) -> Any:
        first_runs.set()
        finish_first.wait(WAIT)
        clock.advance(5.0)  # meanwhile the second call waits for the only call actor
        return "first"

    def hold_third(execution: Any, next_: Any) -> Any:
        if execution.name == "third":
            # Calls are prepared in model order: the second is in the work
            # mailbox already, and the only call actor runs the first.
            first_runs.wait(WAIT)
            second_queued.set()
            looked.wait(WAIT)
        return next_()

    before = set(threading.enumerate())
    with ToolRuntime(max_parallel_tool_calls=3, max_call_actors=1) as rt:
        rt.events.on("tools/pre-execute", hold_third)
        metrics = policies.metrics.install(rt, clock=clock, meter_provider=otel.meter_provider)
        for name in ("first", "second", "third"):
            rt.tools.register(tool(name, first if name == "first" else None))
        batch = threading.Thread(
            target=run, args=(rt, call("first", id="a"), call("second", id="b"), call("third", id="c"))
        )
        batch.start()
        try:
            assert second_queued.wait(WAIT)
            seen = gauges(otel)
            capacity = metrics.snapshot()["capacity"]
        finally:
            looked.set()
            finish_first.set()
            batch.join(WAIT)
        assert not batch.is_alive()
        snap = metrics.snapshot()
        steps_max = rt.dispatcher.steps_max
    for thread in set(threading.enumerate()) - before:
        thread.join(WAIT)
    assert [t.name for t in set(threading.enumerate()) - before if t.is_alive()] == []

    assert capacity == {
        "call_actors_in_use": 1,  # the first call's, of a budget of one
        "call_actors_lent": 0,
        "call_actors_max": 1,
        "call_actors_peak": 1,
        "call_actors_wanted": 1,  # the batch asked for one more: none is free
        "calls_queued": 1,  # the second call
        "steps_in_use": 1,  # the batch's executor, preparing the third call
        "steps_lent": 0,
        "steps_max": steps_max,
        "steps_queued": 0,
    }
    # One table: a gauge for each key of the reading, and the calls in flight.
    assert seen == {name: {**capacity, "in_flight": 3}[key] for name, key, _, _ in GAUGES}
    assert snap["outcomes"] == {"ok": 3}
    second = snap["tools"]["second"]["latency_ms"]
    assert (second["wait"]["max"], second["queue"]["max"], second["approval"]["count"]) == (5000.0, 5000.0, 0)


def test_the_gauges_report_nothing_while_the_metrics_are_not_installed(rt: Any, otel: Otel) -> None:
    metrics = Metrics(meter_provider=otel.meter_provider)
    assert gauges(otel) == {} and metrics.snapshot()["capacity"] is None
    undo = rt.use(policies.metrics, metrics=metrics)
    assert gauges(otel)["dsh.call_actors.max"] == rt.max_call_actors
    assert metrics.snapshot()["capacity"]["call_actors_max"] == rt.max_call_actors
    undo()
    assert gauges(otel) == {} and metrics.snapshot()["capacity"] is None


def test_one_metrics_per_meter_provider(rt: Any, otel: Otel) -> None:
    policies.metrics.install(rt, meter_provider=otel.meter_provider)
    before = rt.events.listeners("tools/result")
    second = Metrics(meter_provider=otel.meter_provider)
    # (OpenTelemetry keeps the first instrument of a name: the second's gauges would read the first.)
    with pytest.raises(RuntimeError, match="another Metrics publishes its gauges on this meter_provider"):
        rt.use(policies.metrics, metrics=second)
    assert not second.installed and rt.events.listeners("tools/result") == before
    other = Otel()
    try:
        rt.use(policies.metrics, metrics=Metrics(meter_provider=other.meter_provider))  # another provider: fine
        assert gauges(other)["dsh.call_actors.max"] == rt.max_call_actors
    finally:
        other.shutdown()


def test_a_stop_ends_the_installation_and_the_provider_serves_the_next_runtime(otel: Otel) -> None:
    # (A Metrics stayed installed on the stopped runtime: its gauges
    # reported it, and neither it nor another Metrics with its provider
    # could be installed on the next runtime.)
    metrics = Metrics(meter_provider=otel.meter_provider)
    with ToolRuntime() as first:
        first.use(policies.metrics, metrics=metrics)
        first.tools.register(tool("echo"))
        run_one(first, call("echo"))
        assert metrics.installed and gauges(otel)["dsh.calls.in_flight"] == 0
    assert not metrics.installed
    assert gauges(otel) == {}

    with ToolRuntime() as second:
        other = policies.metrics.install(second, meter_provider=otel.meter_provider)
        assert gauges(otel)["dsh.call_actors.max"] == second.max_call_actors
        with pytest.raises(RuntimeError, match="another Metrics publishes its gauges on this meter_provider"):
            second.use(policies.metrics, metrics=metrics)
        other.dispose()
        second.use(policies.metrics, metrics=metrics)
        assert metrics.installed and gauges(otel)["dsh.call_actors.max"] == second.max_call_actors
        assert first.events.listeners("tools/result") == ()  # its listeners on the stopped runtime are gone
        second.tools.register(tool("echo"))
        run_one(second, call("echo"))
    assert metrics.snapshot()["outcomes"] == {"ok": 2}


def test_the_calls_a_stop_drains_are_counted() -> None:
    started = threading.Event()

    def waits(args: Any, ctx: Any) -> Any:
        started.set()
        ctx.signal.wait(WAIT)  # until the stop aborts it
        return "late"

    rt = ToolRuntime().start()
    try:
        metrics = policies.metrics.install(rt)
        rt.tools.register(tool("waits", waits))
        future = rt.tools.submit(ToolBatchInput(calls=[call("waits")]))
        assert started.wait(WAIT)
    finally:
        rt.stop()
    assert future.result(WAIT).results[0].result.is_error
    assert not metrics.installed
    assert metrics.snapshot()["tools"]["waits"]["outcomes"] == {"ABORTED": 1}


def test_a_provider_whose_gauges_could_not_be_made_is_not_taken(rt: Any) -> None:
    # (It stayed marked as taken: every later install on it was refused,
    # naming "another Metrics" that did not exist.)
    from opentelemetry.sdk.metrics import MeterProvider

    class NotReady(MeterProvider):
        failing = True

        def get_meter(self, *args: Any, **kwargs: Any) -> Any:
            if self.failing:
                raise RuntimeError("exporter not ready")
            return super().get_meter(*args, **kwargs)

    provider = NotReady()
    try:
        metrics = Metrics(meter_provider=provider)
        with pytest.raises(RuntimeError, match="exporter not ready"):
            rt.use(policies.metrics, metrics=metrics)
        assert not metrics.installed
        provider.failing = False
        undo = rt.use(policies.metrics, metrics=metrics)
        assert metrics.installed
        undo()
    finally:
        provider.shutdown()
