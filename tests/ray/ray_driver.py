"""A second driver process for test_ray_local_cluster: joins the cluster at
``argv[1]`` with ``RayExecutor(address=...)``, calls the shared counter
once through its own runtime, and prints the value as JSON."""

from __future__ import annotations

import json
import sys

import ray_tools as rt_tools

from dsh_actors import ToolBatchInput, ToolCall, ToolRuntime
from executors.ray import RayActor, RayExecutor


def main(address: str) -> int:
    executor = RayExecutor(
        address, actors={"counter": RayActor(rt_tools.Counter, name="farm-counter", namespace="farm")}
    )
    try:
        assert executor.owns_connection and not executor.started_cluster
        with ToolRuntime() as rt:
            rt.tools.register(rt_tools.tool("add", rt_tools.noop, meta={"ray": {"actor": "counter"}}, safe=False))
            rt.tools.set_executor(executor)
            result = rt.tools.execute(ToolBatchInput(calls=[ToolCall("from-2", "add", '{"x": 5}')]))
    finally:
        executor.close()
    outcome = result.results[0].result
    print(json.dumps({"error": outcome.error.message} if outcome.is_error else {"value": outcome.value}, default=list))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
