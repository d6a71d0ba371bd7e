"""RayExecutor: aborts, dead workers, policies in the driver, rt.stop()."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from typing import Any

import ray
import ray_tools as rt_tools
from ray_helpers import first_started, gate_wait, live_threads, result_of, wait_until

from dsh_actors import AbortController, Agent, ErrorCode, ToolBatchExecutionError, ToolBatchInput, ToolCall, ToolRuntime
from executors.ray import RayActor

HOG = {"ray": {"num_cpus": 2}}  # the whole cluster: a second one queues in Ray


def batch(*calls: tuple[str, str, dict[str, Any]], cap: int | None = None, **kw: Any) -> ToolBatchInput:
    return ToolBatchInput(
        calls=[ToolCall(cid, name, json.dumps(args)) for cid, name, args in calls], max_parallel_tool_calls=cap, **kw
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (not yet reaped by its raylet) is dead too
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def codes(result: Any) -> list[str]:
    return [r.result.error.info.code if r.result.is_error else "OK" for r in result.results]


def test_abort_started_cooperative_body_and_an_unstarted_one(rt: Any, make_executor: Any, gate: Any) -> None:
    rt.tools.register(rt_tools.tool("coop", rt_tools.cooperative, meta=HOG))
    executor = make_executor()
    rt.tools.set_executor(executor)
    controller = AbortController()
    future = rt.tools.submit(
        batch(("a", "coop", {"x": "a"}), ("b", "coop", {"x": "b"}), cap=2, signal=controller.signal)
    )
    # Each takes the whole cluster: one runs, the other waits in Ray's queue.
    ran = first_started(gate, "a", "b")
    queued = "b" if ran == "a" else "a"
    wait_until(lambda: executor.in_flight() == 2, "the second call to be submitted to Ray")
    controller.abort("enough")
    result = result_of(future)
    by_id = {r.call_id: r.result for r in result.results}
    assert [r.call_id for r in result.results] == ["a", "b"]
    assert by_id[ran].error.info.code == ErrorCode.ABORTED
    assert by_id[queued].error.info.code == ErrorCode.ABORTED_BEFORE_DISPATCH
    # The started body saw its signal (with the reason), cleaned up and
    # deferred a context that came back with the failure.
    assert gate_wait(gate, f"saw-abort:{ran}") == "enough"
    (context,) = by_id[ran].additional_contexts
    assert context.content[0].text == "cleaned up after: enough"
    assert not ray.get(gate.is_set.remote(f"started:{queued}"))


def test_abort_a_started_body_that_ignores_its_signal_interrupts_it(rt: Any, make_executor: Any, gate: Any) -> None:
    rt.tools.register(rt_tools.tool("spin", rt_tools.ignoring, meta=REMOTE_0))
    executor = make_executor(cancel_grace_ms=50)
    rt.tools.set_executor(executor)
    controller = AbortController()
    future = rt.tools.submit(batch(("s", "spin", {"x": "s"}), signal=controller.signal))
    pid = gate_wait(gate, "started:s")
    started = time.monotonic()
    controller.abort()
    result = result_of(future)
    assert codes(result) == [ErrorCode.ABORTED]
    assert time.monotonic() - started < 10
    # ray.cancel interrupted the body: its worker lives on.
    os.kill(pid, 0)


def test_abort_a_body_that_swallows_the_interrupt_force_cancels_it(rt: Any, make_executor: Any, gate: Any) -> None:
    rt.tools.register(rt_tools.tool("mule", rt_tools.stubborn, meta=REMOTE_0))
    executor = make_executor(cancel_grace_ms=0, force_cancel_ms=300)
    rt.tools.set_executor(executor)
    controller = AbortController()
    future = rt.tools.submit(batch(("m", "mule", {"x": "m"}), signal=controller.signal))
    pid = gate_wait(gate, "started:m")
    controller.abort()
    result = result_of(future)
    assert codes(result) == [ErrorCode.ABORTED], [r.result.error.message for r in result.results if r.result.is_error]
    # The force cancel killed its worker process.
    wait_until(lambda: not alive(pid), "the stubborn worker to be killed", timeout=15)


def test_abort_an_async_body_cancels_its_task_on_the_worker(rt: Any, make_executor: Any, gate: Any) -> None:
    # An async body awaiting a timer: ray.cancel's KeyboardInterrupt cannot
    # reach its loop, and no force cancel comes (None) within the grace.
    rt.tools.register(rt_tools.tool("nap", rt_tools.awaits_its_abort, meta=REMOTE_0))
    executor = make_executor(cancel_grace_ms=60_000, force_cancel_ms=None)
    rt.tools.set_executor(executor)
    controller = AbortController()
    future = rt.tools.submit(batch(("n", "nap", {"x": "n"}), signal=controller.signal))
    pid = gate_wait(gate, "started:n")
    controller.abort("no more")
    result = result_of(future)
    (outcome,) = (r.result for r in result.results)
    assert outcome.error.info.code == ErrorCode.ABORTED
    # The task was cancelled on the worker, as an async body's is on the
    # driver: it cleaned up, and its deferred context came back.
    assert gate_wait(gate, "cancelled:n") == "no more"
    assert [c.content[0].text for c in outcome.additional_contexts] == ["cancelled: no more"]
    os.kill(pid, 0)  # its worker lives on


def test_abort_a_call_queued_behind_another_on_an_actor(rt: Any, make_executor: Any, gate: Any) -> None:
    # One instance runs one call at a time: the second waits in the actor.
    rt.tools.register(rt_tools.tool("coop", rt_tools.noop, meta={"ray": {"actor": "p", "method": "cooperate"}}))
    executor = make_executor(actors={"p": RayActor(rt_tools.Patient)})
    rt.tools.set_executor(executor)
    controller = AbortController()
    future = rt.tools.submit(
        batch(("a", "coop", {"x": "a"}), ("b", "coop", {"x": "b"}), cap=2, signal=controller.signal)
    )
    ran = first_started(gate, "a", "b")
    queued = "b" if ran == "a" else "a"
    wait_until(lambda: executor.in_flight() == 2, "the second call to be submitted to the actor")
    controller.abort("stop it")
    result = result_of(future)
    by_id = {r.call_id: r.result for r in result.results}
    assert by_id[ran].error.info.code == ErrorCode.ABORTED
    assert by_id[queued].error.info.code == ErrorCode.ABORTED_BEFORE_DISPATCH
    assert gate_wait(gate, f"saw-abort:{ran}") == "stop it"
    assert not ray.get(gate.is_set.remote(f"started:{queued}"))


def test_a_killed_worker_fails_its_call_and_the_batch_goes_on(rt: Any, make_executor: Any, gate: Any) -> None:
    rt.tools.register(rt_tools.tool("victim", rt_tools.waits_to_be_killed, meta=REMOTE_0))
    rt.tools.register(rt_tools.tool("who", rt_tools.identify, meta=REMOTE_0))
    rt.tools.set_executor(make_executor())
    future = rt.tools.submit(batch(("v", "victim", {"x": "v"}), ("w", "who", {"x": 1}), cap=2))
    pid = gate_wait(gate, "started:v")
    os.kill(pid, signal.SIGKILL)
    result = result_of(future)
    victim, who = (r.result for r in result.results)
    assert victim.is_error and victim.error.info is not None
    assert (victim.error.info.name, victim.error.info.code) == ("RayWorkerDiedError", ErrorCode.TOOL_FAILED)
    assert victim.error.message.startswith("ray worker died: ")
    assert not who.is_error and who.value["x"] == 1


def test_a_killed_actor_fails_its_call(rt: Any, make_executor: Any, gate: Any) -> None:
    rt.tools.register(rt_tools.tool("add", rt_tools.noop, meta={"ray": {"actor": "c"}}, safe=False))
    executor = make_executor(actors={"c": RayActor(rt_tools.Counter, name="doomed-counter")})
    rt.tools.set_executor(executor)
    assert rt.tools.execute(batch(("a", "add", {"x": 1}))).results[0].result.value["total"] == 1
    doomed = ray.get_actor("doomed-counter", namespace="dsh-tests")
    ray.kill(doomed)
    # ray.kill returns before the actor is gone: a task sent after it ends
    # (fails) only once the actor has died, so the next call meets a dead one.
    ray.wait([doomed.__ray_terminate__.remote()], timeout=60)
    for call in ("b", "c"):
        failure = rt.tools.execute(batch((call, "add", {"x": 1}))).results[0].result
        assert failure.is_error and failure.error.info is not None
        assert (failure.error.info.name, failure.error.info.code) == ("RayWorkerDiedError", ErrorCode.TOOL_FAILED)
        # (Each said only "ray worker died: The actor died unexpectedly
        # before finishing this task.", never that it stays dead, nor what to do.)
        assert failure.error.message.startswith("ray worker died: "), failure.error.message
        assert failure.error.message.endswith(
            'the RayActor "doomed-counter" (Counter) is dead and every later call on it fails: give it '
            'options={"max_restarts": -1} for Ray to restart it (its state then starts afresh), or make a new '
            "RayExecutor"
        ), failure.error.message


def test_policies_run_in_the_driver_for_remote_calls(rt: Any, make_executor: Any, gate: Any) -> None:
    import policies.timeout

    rt.tools.register(rt_tools.tool("who", rt_tools.identify, meta=REMOTE_0))
    # The deadline body runs on a warm actor, so that no worker start eats
    # into its budget (the clock starts at dispatch).
    patient = {"ray": {"actor": "patient", "method": "wait_for_abort"}}
    rt.tools.register(rt_tools.tool("slow", rt_tools.noop, meta=patient, timeout_ms=1000))
    rt.tools.register(rt_tools.tool("ping", rt_tools.noop, meta={"ray": {"actor": "patient"}}))
    rt.tools.set_executor(make_executor(actors={"patient": RayActor(rt_tools.Patient)}))
    warm = rt.tools.execute(batch(("p", "ping", {}), ("w", "who", {})))
    assert not any(r.result.is_error for r in warm.results)
    seen: list[tuple[str, str]] = []

    def listener(execution: Any, next_: Any) -> Any:
        seen.append((execution.call_id, threading.current_thread().name))
        return next_()

    rt.events.on("tools/pre-execute", listener)
    rt.tools.guard(lambda execution: "not this one" if execution.arguments.get("x") == "deny" else None)
    rt.use(policies.timeout)
    result = rt.tools.execute(
        batch(("ok", "who", {"x": "fine"}), ("no", "who", {"x": "deny"}), ("late", "slow", {"x": "late"}))
    )
    ok, denied, late = (r.result for r in result.results)
    assert not ok.is_error and ok.value["pid"] != os.getpid()
    assert denied.is_error and denied.error.message == "not this one"
    assert late.is_error and late.error.info is not None
    assert late.error.info.code == ErrorCode.TOOL_TIMEOUT
    # The body on the worker saw the deadline through its signal.
    assert "timed out after 1000ms" in gate_wait(gate, "saw-abort:late")
    assert [cid for cid, _ in seen] == ["ok", "no", "late"]
    assert all(name.startswith("dsh-") for _, name in seen)  # the driver's threads


def test_stop_cancels_what_runs_on_ray(make_executor: Any, gate: Any) -> None:
    before = live_threads()
    rt = ToolRuntime().start()
    try:
        rt.tools.register(rt_tools.tool("spin", rt_tools.ignoring, meta=HOG))
        executor = make_executor(cancel_grace_ms=60_000)  # stop() does not wait for the grace
        rt.tools.set_executor(executor)
        future = rt.tools.submit(batch(("a", "spin", {"x": "a"}), ("b", "spin", {"x": "b"}), cap=2))
        ran = first_started(gate, "a", "b")
        wait_until(lambda: executor.in_flight() == 2, "the second call to be submitted to Ray")
        started = time.monotonic()
    finally:
        rt.stop()
    assert time.monotonic() - started < 20
    assert executor.in_flight() == 0  # both Ray tasks settled before stop() returned
    try:
        result = result_of(future)
    except ToolBatchExecutionError:
        pass  # the batch's actor stopped before it could reply (as native: a race)
    else:
        by_id = {r.call_id: r.result for r in result.results}
        assert by_id[ran].error.info.code == ErrorCode.ABORTED
        assert by_id["b" if ran == "a" else "a"].error.info.code == ErrorCode.ABORTED_BEFORE_DISPATCH
    # The interrupted spinner freed its CPUs: the cluster runs a task again.
    assert ray.get(rt_tools.warm.remote(), timeout=30) > 0
    leaked = [t for t in live_threads() - before if t.is_alive() and not t.name.startswith("pytest_timeout")]
    for thread in leaked:
        thread.join(5)
    assert not [t.name for t in leaked if t.is_alive()]


def test_the_signal_board_forgets_every_call(rt: Any, make_executor: Any, gate: Any) -> None:
    from executors.ray import connection

    rt.tools.register(rt_tools.tool("coop", rt_tools.cooperative, meta=HOG))
    rt.tools.register(rt_tools.tool("who", rt_tools.identify, meta=REMOTE_0))
    executor = make_executor()
    rt.tools.set_executor(executor)
    rt.tools.execute(batch(("w1", "who", {}), ("w2", "who", {})))
    controller = AbortController()
    future = rt.tools.submit(
        batch(("a", "coop", {"x": "a"}), ("b", "coop", {"x": "b"}), cap=2, signal=controller.signal)
    )
    first_started(gate, "a", "b")  # one started, one queued in Ray
    wait_until(lambda: executor.in_flight() == 2, "the second call to be submitted")
    controller.abort()
    assert sorted(codes(result_of(future))) == [ErrorCode.ABORTED, ErrorCode.ABORTED_BEFORE_DISPATCH]
    board = connection.board()
    wait_until(lambda: ray.get(board.size.remote()) == 0, "the board to forget every call", timeout=10)


def test_an_agent_scoped_executor_stops_with_its_runtime(make_executor: Any, gate: Any) -> None:
    with ToolRuntime() as rt:
        rt.tools.register(rt_tools.tool("who", rt_tools.identify, meta=REMOTE_0))
        agent = Agent("farm")
        rt.tools.scope(agent).set_executor(make_executor())
        result = rt.tools.execute(batch(("w", "who", {}), agent=agent))
        assert result.results[0].result.value["pid"] != os.getpid()


REMOTE_0 = {"ray": {"num_cpus": 1}}


def test_abort_on_the_application_loop(rt: Any, make_executor: Any, gate: Any) -> None:
    """The cancellation matrix's Ray row on the application's loop: the batch
    is awaited with execute_async on a loop of the test's own, the remote
    body's wait runs there as a flight, and the abort cancels the started
    call (ABORTED) and the queued one (ABORTED_BEFORE_DISPATCH)."""
    import asyncio

    rt.tools.register(rt_tools.tool("coop", rt_tools.cooperative, meta=HOG))
    executor = make_executor()
    rt.tools.set_executor(executor)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="app-loop")
    thread.start()
    try:
        controller = AbortController()
        future = asyncio.run_coroutine_threadsafe(
            rt.tools.execute_async(
                batch(("a", "coop", {"x": "a"}), ("b", "coop", {"x": "b"}), cap=2, signal=controller.signal)
            ),
            loop,
        )
        ran = first_started(gate, "a", "b")
        queued = "b" if ran == "a" else "a"
        wait_until(lambda: executor.in_flight() == 2, "the second call to be submitted to Ray")
        controller.abort("enough")
        result = future.result(60)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
    by_id = {r.call_id: r.result for r in result.results}
    assert by_id[ran].error.info.code == ErrorCode.ABORTED
    assert by_id[queued].error.info.code == ErrorCode.ABORTED_BEFORE_DISPATCH
    assert gate_wait(gate, f"saw-abort:{ran}") == "enough"
