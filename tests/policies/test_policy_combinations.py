"""Policies together: timeout inside retry, spill after a timeout, metrics
seeing every outcome, and applying then disposing every policy leaving the
runtime exactly as it was."""

from __future__ import annotations

import ast
import threading
from pathlib import Path
from typing import Any

from policy_helpers import WAIT, Recorder, call, code_of, listener_lists, policy_threads, run, run_one, tool

import dsh_actors
import policies
from dsh_actors import AbortController, Agent, Ask, ToolRuntime
from policies.approval import RuleService, allow

MAIN = Agent("main")
POLICIES_DIR = Path(policies.__file__).parent
MINE = ("__init__", "_answer", "_common", "_terminal", "_timer", "approval", "metrics", "retry", "spill", "timeout")


def times_out_first(attempts: Recorder) -> Any:
    """Waits on its signal on the first attempt (so the deadline fires),
    answers at once afterwards."""

    def body(args: Any, ctx: Any) -> Any:
        attempts.add(1)
        if len(attempts.items) == 1:
            ctx.signal.wait(WAIT)
            return "too late"
        return "on time"

    return body


def test_a_tool_that_times_out_then_succeeds_on_retry(rt: Any) -> None:
    attempts = Recorder()
    rt.use(policies.retry, tools=("flaky",), base_ms=1)
    rt.use(policies.timeout)  # inside retry: every attempt gets its own deadline
    rt.tools.register(tool("flaky", times_out_first(attempts), timeout_ms=20))

    result = run_one(rt, call("flaky"))

    assert not result.is_error and result.value == "on time"
    assert len(attempts.items) == 2


def test_a_timeout_outside_retry_bounds_every_attempt_together(rt: Any) -> None:
    attempts = Recorder()

    def always_late(args: Any, ctx: Any) -> Any:
        attempts.add(1)
        ctx.signal.wait(WAIT)
        return "late"

    rt.use(policies.timeout)
    rt.use(policies.retry, tools=("slow",), codes=("ABORTED",), base_ms=60_000, max_ms=60_000)
    rt.tools.register(tool("slow", always_late, timeout_ms=20))

    result = run_one(rt, call("slow"))

    # The deadline fired during the first attempt; the retry's backoff waits
    # on the (fused) signal, so it ends at once and nothing is retried.
    assert code_of(result) == "TOOL_TIMEOUT"
    assert len(attempts.items) == 1


def test_spill_after_a_timeout_leaves_the_short_timeout_failure_and_spills_a_long_success(
    rt: Any, tmp_path: Path
) -> None:
    long = "L" * 20_000

    def late_and_long(args: Any, ctx: Any) -> Any:
        ctx.signal.wait(WAIT)
        return long

    rt.use(policies.timeout)
    rt.use(policies.spill, directory=tmp_path / "spill", max_inline_bytes=2048)
    rt.tools.register(tool("late", late_and_long, timeout_ms=20))
    rt.tools.register(tool("long", lambda args, ctx: long, timeout_ms=60_000))

    timed_out = run_one(rt, call("late"), agent=MAIN)
    assert code_of(timed_out) == "TOOL_TIMEOUT"
    assert timed_out.content[0].text == "Error: tool call timed out after 20ms"
    assert not (tmp_path / "spill").exists()

    success = run_one(rt, call("long"), agent=MAIN)
    assert not success.is_error and success.value == long
    assert len(success.content[0].text.encode()) <= 2048
    (spilled,) = [p for p in (tmp_path / "spill").rglob("*") if p.is_file()]
    assert spilled.read_text() == long


def test_metrics_see_every_outcome_including_skipped_calls(rt: Any) -> None:
    attempts = Recorder()

    def late(args: Any, ctx: Any) -> Any:
        ctx.signal.wait(WAIT)
        return "late"

    def denier(execution: Any, next_: Any) -> Any:
        return Ask(reason="ask") if execution.name == "guarded" else next_()

    rt.events.on("tools/pre-execute", denier)
    rt.use(policies.approval, service=RuleService([allow("nothing")], default="deny"))
    rt.use(policies.retry, tools=("flaky",), base_ms=1)
    rt.use(policies.timeout)
    metrics = policies.metrics.install(rt)  # last: its listeners are outermost
    rt.tools.register(tool("echo"))
    rt.tools.register(tool("late", late, timeout_ms=20))
    rt.tools.register(tool("flaky", times_out_first(attempts), timeout_ms=20))
    rt.tools.register(tool("guarded"))

    run(
        rt,
        call("echo", id="a"),
        call("late", id="b"),
        call("flaky", id="c"),
        call("guarded", id="d"),
        agent=MAIN,
    )
    aborted = AbortController()
    aborted.abort()
    run(rt, call("echo", id="e"), call("late", id="f"), agent=MAIN, signal=aborted.signal)

    snap = metrics.snapshot()
    assert snap["calls"] == 6
    assert snap["outcomes"] == {"ABORTED_BEFORE_DISPATCH": 2, "ERROR": 1, "TOOL_TIMEOUT": 1, "ok": 2}
    tools = snap["tools"]
    assert tools["echo"]["outcomes"] == {"ABORTED_BEFORE_DISPATCH": 1, "ok": 1}
    assert tools["late"]["outcomes"] == {"ABORTED_BEFORE_DISPATCH": 1, "TOOL_TIMEOUT": 1}
    assert tools["flaky"]["outcomes"] == {"ok": 1}
    assert tools["guarded"]["outcomes"] == {"ERROR": 1}  # rejected by the rules
    assert tools["late"]["latency_ms"]["body"]["count"] == 1  # the skipped one has no phases
    assert tools["late"]["latency_ms"]["body"]["min"] >= 20.0  # it ran until its deadline
    assert snap["in_flight"] == 0


def apply_every_policy(rt: Any, tmp_path: Path) -> list[Any]:
    return [
        rt.use(policies.retry, tools=("flaky",), base_ms=1),
        rt.use(policies.timeout),
        rt.use(policies.spill, directory=tmp_path / "spill", max_inline_bytes=4096),
        rt.use(policies.approval, service=RuleService([], default="allow")),
        rt.use(policies.metrics),
    ]


def test_applying_then_disposing_every_policy_leaves_the_runtime_exactly_as_before(rt: Any, tmp_path: Path) -> None:
    def existing(execution: Any, next_: Any) -> Any:
        return next_()

    def previous_service(request: Any) -> str:
        return "rejected"

    rt.events.on("tools/execute", existing)
    rt.approvals.set(previous_service)
    before = listener_lists(rt)
    attempts = Recorder()
    rt.tools.register(tool("flaky", times_out_first(attempts), timeout_ms=20))

    undo = apply_every_policy(rt, tmp_path)
    assert listener_lists(rt) != before
    assert not run_one(rt, call("flaky"), agent=MAIN).is_error  # exercises the timer thread
    assert len(policy_threads()) == 1

    for dispose in undo:
        dispose()

    assert listener_lists(rt) == before
    assert policy_threads() == []
    assert rt.approvals.service is previous_service
    for dispose in undo:
        dispose()  # idempotent
    assert listener_lists(rt) == before


def test_stopping_the_runtime_with_every_policy_applied_leaves_no_thread(tmp_path: Path) -> None:
    before = set(threading.enumerate())
    rt = ToolRuntime().start()
    try:
        apply_every_policy(rt, tmp_path)
        rt.tools.register(tool("slow", lambda args, ctx: ctx.signal.wait(WAIT) and "late", timeout_ms=20))
        assert code_of(run_one(rt, call("slow"), agent=MAIN)) == "TOOL_TIMEOUT"
        assert len(policy_threads()) == 1
    finally:
        rt.stop()
    for thread in set(threading.enumerate()) - before:
        thread.join(WAIT)
    assert policy_threads() == []


def test_import_policies_then_rt_use_works(rt: Any) -> None:
    for module in (policies.timeout, policies.retry, policies.spill, policies.approval, policies.metrics):
        assert callable(module.apply)


#: An optional extra a policy imports only inside the function that needs it
#: (policies.metrics' gauges, given a meter_provider): the policy runs without it.
LAZY = {"metrics": {"opentelemetry"}}


def test_the_policies_import_only_what_dsh_actors_exports() -> None:
    public = set(dsh_actors.__all__)
    for name in MINE:
        tree = ast.parse((POLICIES_DIR / f"{name}.py").read_text())
        in_functions = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            for inner in ast.walk(node)
        }
        for node in ast.walk(tree):
            allowed_top = {"dsh_actors", "loguru", "orjson", "policies"}
            if id(node) in in_functions:
                allowed_top |= LAZY.get(name, set())
            if isinstance(node, ast.Import):
                for alias in node.names:
                    top = alias.name.split(".")[0]
                    assert top != "dsh_actors", f"{name}.py: import {alias.name}"
                    assert top in allowed_top or _stdlib(top), f"{name}.py imports {alias.name}"
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: another policies module
                    continue
                module = node.module or ""
                if module.split(".")[0] == "dsh_actors":
                    assert module == "dsh_actors", f"{name}.py imports from {module}"
                    for alias in node.names:
                        assert alias.name in public, f"{name}.py imports {alias.name}, not exported"
                else:
                    top = module.split(".")[0]
                    assert top in allowed_top or _stdlib(top), f"{name}.py imports from {module}"


def _stdlib(top: str) -> bool:
    import sys

    return top in sys.stdlib_module_names or top == "__future__"
