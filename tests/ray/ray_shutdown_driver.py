"""A driver process for test_ray_lost_cluster: runs a batch of four held
calls on a local 2-CPU cluster (two running, two queued), calls
``ray.shutdown()`` from another thread while they run, and prints each
call's outcome as JSON. Before the executor noticed a lost cluster, Ray's
internal check ("Cannot find an actor handle") killed this whole process."""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

import ray
import ray_tools as rt_tools
from conftest import init_options

from dsh_actors import ToolBatchInput, ToolCall, ToolRuntime
from executors.ray import RayExecutor


def _shown(result: Any) -> Any:
    if not result.is_error:
        return {"value": result.value}
    info = result.error.info
    return {"name": info.name, "code": str(info.code), "message": result.error.message}


def main() -> int:
    ray.init(**init_options())
    gate = rt_tools.Gate.options(name=rt_tools.GATE, namespace=rt_tools.NAMESPACE).remote()
    ray.get(gate.reset.remote())
    executor = RayExecutor()
    outcome: dict[str, Any] = {}
    with ToolRuntime() as rt:
        rt.tools.register(rt_tools.tool("held", rt_tools.held, meta={"ray": True}, safe=True))
        rt.tools.set_executor(executor)
        calls = [ToolCall(f"c{i}", "held", {"x": f"h{i}"}) for i in range(4)]
        done = threading.Event()

        def run() -> None:
            try:
                batch = rt.tools.execute(ToolBatchInput(calls=calls))
                outcome["results"] = [_shown(r.result) for r in batch.results]
            except BaseException as exc:  # noqa: BLE001 - reported, not raised
                outcome["raised"] = f"{type(exc).__name__}: {exc}"
            finally:
                done.set()

        runner = threading.Thread(target=run)
        runner.start()
        ray.get(gate.wait_any.remote([f"entered:h{i}" for i in range(4)]))  # a call runs
        shutdown = threading.Thread(target=ray.shutdown)
        shutdown.start()
        shutdown.join(60)
        outcome["settled"] = done.wait(60)
        runner.join(60)
        # A later Ray call fails at once too, and local tools keep working.
        rt.tools.register(rt_tools.tool("local", lambda args, ctx: args["x"]))
        later = rt.tools.execute(
            ToolBatchInput(calls=[ToolCall("later", "held", {"x": "later"}), ToolCall("l", "local", {"x": 7})])
        )
        outcome["later"] = [_shown(r.result) for r in later.results]
        outcome["initialized_again"] = ray.is_initialized()
    executor.close()
    print(json.dumps(outcome), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
