"""RayExecutor's own cluster: started when Ray is not initialized, shared by
the executors of the process, shut down by the last close(); another
driver process joins it with ``RayExecutor(address=...)``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
import ray
import ray_tools as rt_tools
from ray_helpers import children, live_threads, wait_until

from dsh_actors import ToolBatchInput, ToolCall, ToolRuntime
from executors.ray import RayActor, RayExecutor

HERE = os.path.dirname(os.path.abspath(__file__))


def options() -> dict[str, Any]:
    return {"runtime_env": {"env_vars": {"PYTHONPATH": HERE}}, "namespace": "dsh-tests"}


def test_an_executor_starts_a_local_cluster_shares_it_and_the_last_close_shuts_it_down() -> None:
    assert not ray.is_initialized()
    threads_before, children_before = live_threads(), set(children())
    shared = RayActor(rt_tools.Counter, name="farm-counter", namespace="farm")
    first = RayExecutor(
        local_cpus=2, object_store_memory=80 * 1024 * 1024, init_options=options(), actors={"counter": shared}
    )
    try:
        assert first.owns_connection and first.started_cluster and ray.is_initialized()
        second = RayExecutor(actors={"counter": shared})  # the same connection
        assert second.owns_connection and second.started_cluster
        try:
            with ToolRuntime() as one, ToolRuntime() as two:
                for rt, executor in ((one, first), (two, second)):
                    rt.tools.register(
                        rt_tools.tool("add", rt_tools.noop, meta={"ray": {"actor": "counter"}}, safe=False)
                    )
                    rt.tools.register(rt_tools.tool("who", rt_tools.identify, meta={"ray": True}))
                    rt.tools.set_executor(executor)
                a = one.tools.execute(ToolBatchInput(calls=[ToolCall("from-1", "add", '{"x": 1}')]))
                b = two.tools.execute(ToolBatchInput(calls=[ToolCall("also-1", "add", '{"x": 2}')]))
                assert a.results[0].result.value["total"] == 1
                assert b.results[0].result.value["total"] == 3
                who = one.tools.execute(ToolBatchInput(calls=[ToolCall("w", "who", "{}")])).results[0].result
                assert who.value["pid"] != os.getpid()
                # Another driver process joins this cluster by its address and
                # reaches the same named actor.
                address = ray.get_runtime_context().gcs_address
                env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")]))
                proc = subprocess.run(
                    [sys.executable, os.path.join(HERE, "ray_driver.py"), address],
                    capture_output=True,
                    text=True,
                    timeout=90,
                    env=env,
                )
                assert proc.returncode == 0, proc.stderr[-2000:]
                reply = json.loads(proc.stdout.strip().splitlines()[-1])
                assert reply["value"]["total"] == 8
                assert reply["value"]["calls"] == ["from-1", "also-1", "from-2"]
                two.stop()  # (a runtime's stop closes its executor: the first one still uses the connection)
                assert second.closed and ray.is_initialized()
            assert first.closed  # (the last executor: its runtime's stop shut down the cluster it started)
        finally:
            second.close()
    finally:
        first.close()
    assert not ray.is_initialized()
    wait_until(lambda: not (set(children()) - children_before), "Ray's processes to exit", timeout=15)
    leaked = [t for t in live_threads() - threads_before if not t.name.startswith("pytest_timeout")]
    for thread in leaked:
        thread.join(5)
    assert not [t.name for t in leaked if t.is_alive()]


def test_stop_closes_the_runtimes_executor_the_last_one_shuts_the_cluster_down_and_joining_another_is_refused() -> None:
    # rt.stop() left the executor open: the local cluster it started ran on
    # until the application called close().
    assert not ray.is_initialized()
    children_before = set(children())
    executor = RayExecutor(local_cpus=1, object_store_memory=80 * 1024 * 1024, init_options=options())
    other = RayExecutor()  # the same connection, in no runtime
    try:
        assert executor.owns_connection and executor.started_cluster
        # Joining another cluster than the connected one is refused (and
        # holds no share of the connection: the last close below shuts it down).
        with pytest.raises(ValueError, match="already connected to the Ray cluster at"):
            RayExecutor("127.0.0.1:1")
        with ToolRuntime() as rt:
            rt.tools.register(rt_tools.tool("who", rt_tools.identify, meta={"ray": True}))
            rt.tools.set_executor(executor)
            who = rt.tools.execute(ToolBatchInput(calls=[ToolCall("w", "who", "{}")])).results[0].result
            assert who.value["pid"] != os.getpid()
        assert executor.closed and not other.closed
        assert ray.is_initialized()  # the other executor still uses the connection
        other.close()
        assert not ray.is_initialized()  # the last close shut the cluster down
    finally:
        other.close()
        executor.close()
    wait_until(lambda: not (set(children()) - children_before), "Ray's processes to exit", timeout=15)


def test_options_are_checked() -> None:
    with pytest.raises(TypeError, match="not a str"):
        RayExecutor(remote="grade")
    with pytest.raises(ValueError, match="cancel_grace_ms"):
        RayExecutor(cancel_grace_ms=-1)
    with pytest.raises(ValueError, match="num_cpus"):
        RayExecutor(num_cpus=float("nan"))
    with pytest.raises(TypeError, match="RayActor"):
        RayExecutor(actors={"x": object()})  # type: ignore[dict-item]
    assert not ray.is_initialized()  # nothing connected for a rejected executor
