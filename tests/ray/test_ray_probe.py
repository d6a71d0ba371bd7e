"""RayExecutor: placements and options it must refuse clearly, a dead
actor's cause, an abort of a call queued on a busy actor, and interrupts
it did not send."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import ray_tools as rt_tools
from ray_helpers import first_started, result_of, wait_until

from dsh_actors import AbortController, ErrorCode, ToolBatchInput, ToolCall
from executors.ray import RayActor, RayExecutor, RayTask


def batch(*calls: tuple[str, str, dict[str, Any]], cap: int | None = None, **kw: Any) -> ToolBatchInput:
    return ToolBatchInput(
        calls=[ToolCall(cid, name, json.dumps(args)) for cid, name, args in calls], max_parallel_tool_calls=cap, **kw
    )


def failure(result: Any, index: int = 0) -> tuple[str, str, str]:
    item = result.results[index].result
    assert item.is_error and item.error.info is not None, item
    return item.error.info.name, item.error.info.code, item.error.message


def test_task_and_actor_options_are_checked_when_made() -> None:
    # (RayTask and RayActor took any value; Ray refused it only when the
    # first call was submitted.)
    for bad in ({"num_cpus": "two"}, {"num_gpus": -1}, {"memory": 1.5}, {"max_retries": "x"}, {"resources": 5}):
        with pytest.raises(ValueError if "resources" not in bad else TypeError, match="RayTask"):
            RayTask(**bad)
    with pytest.raises(ValueError, match="RayTask resources\\['gpu'\\] must be a finite number"):
        RayTask(resources={"gpu": "one"})
    with pytest.raises(ValueError, match="RayActor num_cpus must be a finite number >= 0, got -1"):
        RayActor(rt_tools.Counter, num_cpus=-1)
    with pytest.raises(ValueError, match="RayActor namespace"):
        RayActor(rt_tools.Counter, namespace=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="RayActor options must be a mapping, got int"):
        RayActor(rt_tools.Counter, options=5)  # type: ignore[arg-type]
    # (A raw "'int' object is not iterable" before.)
    with pytest.raises(TypeError, match="actors= maps names"):
        RayExecutor(actors=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="init_options= must be a mapping"):
        RayExecutor(init_options=5)  # type: ignore[arg-type]


def test_bad_task_options_fail_the_call_not_the_batch(rt: Any, make_executor: Any, gate: Any) -> None:
    # (Each failed the whole batch: "tool batch failed: internal error:
    # TypeError: The type of keyword 'num_cpus' must be ...".)
    rt.tools.register(rt_tools.tool("typed", rt_tools.noop, meta={"ray": {"num_cpus": "two"}}))
    rt.tools.register(rt_tools.tool("negative", rt_tools.noop, meta={"ray": {"num_cpus": -1}}))
    rt.tools.register(rt_tools.tool("method", rt_tools.noop, meta={"ray": {"actor": "c", "method": 5}}))
    rt.tools.register(rt_tools.tool("extra", rt_tools.noop, meta={"ray": {"actor": "c", "num_cpus": 2}}))
    rt.tools.register(rt_tools.tool("refused", rt_tools.noop))
    rt.tools.register(rt_tools.tool("fine", rt_tools.noop, meta={"ray": {"num_cpus": 0.5}}))
    executor = make_executor(
        actors={"c": RayActor(rt_tools.Counter)},
        remote=lambda d: RayTask(options={"bogus": 1}) if d.name == "refused" else (d.meta or {}).get("ray"),
    )
    rt.tools.set_executor(executor)
    result = rt.tools.execute(
        batch(("t", "typed", {}), ("n", "negative", {}), ("m", "method", {}), ("e", "extra", {}), ("r", "refused", {}))
    )
    got = [failure(result, i) for i in range(5)]
    assert all(name == "RayExecutionError" and code == ErrorCode.TOOL_FAILED for name, code, _ in got), got
    typed, negative, method, extra, refused = (message for _, _, message in got)
    assert (
        typed == 'ray placement: tool "typed": meta["ray"]: RayTask num_cpus must be a finite number >= 0, got \'two\''
    )
    assert "got -1" in negative
    assert method == 'ray placement: tool "method": meta["ray"]["method"] must be a non-empty str, got 5'
    assert 'takes "actor" and "method" only, not [\'num_cpus\']' in extra
    assert refused.startswith(
        'ray placement: tool "refused": Ray refused the task options: Invalid option keyword bogus'
    ), refused
    assert rt.tools.execute(batch(("f", "fine", {}))).results[0].result.value is None


def test_actor_options_ray_refuses_fail_as_a_placement_not_an_unavailable_cluster(
    rt: Any, make_executor: Any, gate: Any
) -> None:
    # (It failed EXECUTOR_UNAVAILABLE, "the call could not be submitted".)
    odd = RayActor(rt_tools.Counter, options={"lifetime": "forever"})
    rt.tools.register(rt_tools.tool("add", rt_tools.noop, meta={"ray": {"actor": "odd"}}))
    rt.tools.set_executor(make_executor(actors={"odd": odd}))
    name, code, message = failure(rt.tools.execute(batch(("a", "add", {"x": 1}))))
    assert (name, code) == ("RayExecutionError", ErrorCode.TOOL_FAILED)
    # (Named by a repr: "ray placement: <RayActor Counter>: Ray refused ...".)
    assert message.startswith("ray placement: the RayActor of Counter: Ray refused the actor options: actor `lifetime`")


def test_an_actor_whose_constructor_raises_fails_its_calls_naming_the_cause(
    rt: Any, make_executor: Any, gate: Any
) -> None:
    # (It failed RayWorkerDiedError "ray worker died: The actor died because
    # of an error raised in its creation task, \x1b[36mray::ToolHost...":
    # terminal colors, and not the constructor's error.)
    rt.tools.register(rt_tools.tool("ping", rt_tools.noop, meta={"ray": {"actor": "p"}}))
    rt.tools.set_executor(make_executor(actors={"p": RayActor(rt_tools.Patient, "an argument it does not take")}))
    for call in ("a", "b"):
        name, code, message = failure(rt.tools.execute(batch((call, "ping", {}))))
        assert (name, code) == ("RayExecutionError", ErrorCode.TOOL_FAILED)
        assert "\x1b" not in message
        assert message.startswith("ray actor failed: the RayActor's constructor raised TypeError: Patient() takes no")
        assert message.endswith(
            "the actor is dead and every call on it fails: fix the class or its arguments, then make a new RayExecutor"
        )


def test_an_aborted_call_queued_on_a_busy_actor_settles_at_once(rt: Any, make_executor: Any, gate: Any) -> None:
    # (It settled ABORTED_BEFORE_DISPATCH only once the actor's running call
    # had ended, however long that took.)
    patient = {"ray": {"actor": "p", "method": "wait_for_abort"}}
    rt.tools.register(rt_tools.tool("busy", rt_tools.noop, meta=patient))
    rt.tools.register(rt_tools.tool("ping", rt_tools.noop, meta={"ray": {"actor": "p"}}))
    executor = make_executor(actors={"p": RayActor(rt_tools.Patient)})
    rt.tools.set_executor(executor)
    running = AbortController()
    busy = rt.tools.submit(batch(("b", "busy", {"x": "b"}), signal=running.signal))
    try:
        first_started(gate, "b")
        queued = AbortController()
        waiting = rt.tools.submit(batch(("q", "ping", {}), signal=queued.signal))
        wait_until(lambda: executor.in_flight() == 2, "the queued call to be submitted to the actor")
        started = time.monotonic()
        queued.abort("not now")
        name, code, _ = failure(result_of(waiting, timeout=20))
        assert code == ErrorCode.ABORTED_BEFORE_DISPATCH
        assert time.monotonic() - started < 15
        assert not busy.done()  # the running call goes on
    finally:
        running.abort("done")
    assert failure(result_of(busy))[1] == ErrorCode.ABORTED


def test_an_interrupt_this_runtime_did_not_send_is_not_an_abort(rt: Any, make_executor: Any, gate: Any) -> None:
    # (A body raising KeyboardInterrupt, or a ray.cancel from outside, gave
    # ABORTED although nobody aborted the call.)
    def interrupted(args: Any, ctx: Any) -> Any:
        raise KeyboardInterrupt

    rt.tools.register(rt_tools.tool("ki", interrupted, meta={"ray": {"num_cpus": 0.5}}))
    rt.tools.set_executor(make_executor())
    name, code, message = failure(rt.tools.execute(batch(("k", "ki", {}))))
    assert (name, code) == ("RayExecutionError", ErrorCode.TOOL_FAILED)
    assert message.startswith("ray cancelled: the body was interrupted (KeyboardInterrupt) but this runtime did not")


def test_what_a_remote_context_lacks_says_why(rt: Any, make_executor: Any, gate: Any) -> None:
    # (A bare "'RemoteContext' object has no attribute 'report_progress'".)
    def reports(args: Any, ctx: Any) -> Any:
        ctx.report_progress(1, 2)

    def lenient(args: Any, ctx: Any) -> Any:
        return [getattr(ctx, "deps", "none"), hasattr(ctx, "report_progress"), ctx.agent_id]

    rt.tools.register(rt_tools.tool("reports", reports, meta={"ray": {"num_cpus": 0.5}}))
    rt.tools.register(rt_tools.tool("lenient", lenient, meta={"ray": {"num_cpus": 0.5}}))
    rt.tools.set_executor(make_executor())
    result = rt.tools.execute(batch(("r", "reports", {}), ("l", "lenient", {})))
    name, code, message = failure(result)
    assert (name, code) == ("RemoteToolError", ErrorCode.TOOL_FAILED)
    assert message.startswith("AttributeError: ctx.report_progress is not available to a body that runs on Ray")
    assert result.results[1].result.value == ("none", False, None)


def test_a_call_cancelled_by_close_fails_unavailable_not_aborted(rt: Any, make_executor: Any, gate: Any) -> None:
    # (It settled ABORTED, "tool call aborted", though nobody aborted it.)
    rt.tools.register(rt_tools.tool("coop", rt_tools.cooperative, meta={"ray": {"num_cpus": 1}}))
    executor = make_executor()
    rt.tools.set_executor(executor)
    future = rt.tools.submit(batch(("c", "coop", {"x": "c"})))
    first_started(gate, "c")
    wait_until(lambda: executor.in_flight() == 1, "the call to be in flight")
    executor.close()
    name, code, message = failure(result_of(future))
    assert (name, code) == ("RayUnavailableError", ErrorCode.EXECUTOR_UNAVAILABLE)
    assert message.startswith("ray unavailable: the RayExecutor was closed while the call was on the cluster")


def test_a_remote_predicate_that_raises_fails_the_call_saying_so(rt: Any, make_executor: Any, gate: Any) -> None:
    # (The message was the KeyError's text alone: "ray placement: 'missing'".)
    rt.tools.register(rt_tools.tool("odd", rt_tools.noop))
    rt.tools.set_executor(make_executor(remote=lambda d: {}["missing"]))
    name, code, message = failure(rt.tools.execute(batch(("o", "odd", {}))))
    assert (name, code) == ("RayExecutionError", ErrorCode.TOOL_FAILED)
    assert message == "ray placement: tool \"odd\": remote= raised KeyError: 'missing'"
