"""A driver process for test_ray_lost_cluster: a ``RayExecutor()`` that
starts its own local cluster (it owns the connection), then

1. ``quiet``: a body ends its worker (``os._exit``); the driver prints
   nothing of it (Ray's "(raylet) A worker died ..." report goes through
   ``print_worker_logs``, watched here so that the test knows it arrived);
2. ``lost``: the cluster's GCS and raylet are killed (SIGKILL, no
   ``ray.shutdown()``) while two calls run: they fail, the process lives
   on (its environment shortens Ray's reconnect timeout, after which Ray
   ends a driver whose GCS is gone), a later Ray call fails at once, a
   local tool works, a new RayExecutor is refused, and ``close()`` shuts
   the lost connection down.

Each part prints one JSON line (``{"part": ...}``). Only the processes of
the cluster this process started are killed (its children, and the
raylet's).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import ray
import ray._private.worker
import ray_tools as rt_tools
from conftest import HERE, OBJECT_STORE
from ray_helpers import children

from dsh_actors import ToolBatchInput, ToolCall, ToolRuntime
from executors.ray import RayExecutor, RayUnavailableError


def _shown(result: Any) -> Any:
    if not result.is_error:
        return {"value": result.value}
    info = result.error.info
    return {"name": info.name, "code": str(info.code), "message": result.error.message}


def _kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _alive_as(pid: int, name: str) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.find("(") + 1 : stat.rfind(")")] == name and stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _report(part: str, outcome: dict[str, Any]) -> None:
    print(json.dumps({"part": part, **outcome}), flush=True)


def main() -> int:
    raylet_reported = threading.Event()
    original = ray._private.worker.print_worker_logs

    def watched(data: Any, *args: Any, **kwargs: Any) -> None:
        original(data, *args, **kwargs)
        if data.get("pid") == "raylet":
            raylet_reported.set()

    ray._private.worker.print_worker_logs = watched
    executor = RayExecutor(
        local_cpus=2,
        object_store_memory=OBJECT_STORE,
        init_options={"namespace": rt_tools.NAMESPACE, "runtime_env": {"env_vars": {"PYTHONPATH": str(HERE)}}},
    )
    assert executor.owns_connection and executor.started_cluster
    gate = rt_tools.Gate.options(name=rt_tools.GATE, namespace=rt_tools.NAMESPACE).remote()
    ray.get(gate.reset.remote())
    with ToolRuntime() as rt:
        rt.tools.register(rt_tools.tool("dies", rt_tools.exits_its_worker, meta={"ray": True}))
        rt.tools.register(rt_tools.tool("held", rt_tools.held, meta={"ray": True}, safe=True))
        rt.tools.register(rt_tools.tool("local", lambda args, ctx: args["x"]))
        rt.tools.set_executor(executor)

        died = rt.tools.execute(ToolBatchInput(calls=[ToolCall("d", "dies", {})])).results[0].result
        _report("quiet", {"died": _shown(died), "reported": raylet_reported.wait(60)})

        outcome: dict[str, Any] = {}
        calls = [ToolCall(f"c{i}", "held", {"x": f"h{i}"}) for i in range(2)]
        future = rt.tools.submit(ToolBatchInput(calls=calls))
        ray.get(gate.wait_any.remote([f"entered:h{i}" for i in range(2)]))  # a call runs
        cluster = {pid: name for pid, name in children(os.getpid()).items() if name in ("gcs_server", "raylet")}
        helpers = {}  # the raylet's children: its workers end with it, its agents do not
        for raylet in (pid for pid, name in cluster.items() if name == "raylet"):
            helpers.update(children(raylet))
        _kill(list(cluster))
        killed = time.monotonic()
        try:
            batch = future.result(60)
            outcome["results"] = [_shown(r.result) for r in batch.results]
        except BaseException as exc:  # noqa: BLE001 - reported, not raised
            outcome["raised"] = f"{type(exc).__name__}: {exc}"
        outcome["settled_after_s"] = time.monotonic() - killed
        later = rt.tools.execute(
            ToolBatchInput(calls=[ToolCall("later", "held", {"x": "later"}), ToolCall("l", "local", {"x": 7})])
        )
        outcome["later"] = [_shown(r.result) for r in later.results]
        try:
            RayExecutor().close()
            outcome["new_executor"] = "made"
        except RayUnavailableError as exc:
            outcome["new_executor"] = exc.message
    executor.close()
    outcome["initialized_after_close"] = ray.is_initialized()
    _kill([pid for pid, name in helpers.items() if _alive_as(pid, name)])  # (the agents a killed raylet leaves)
    _report("lost", outcome)
    return 0


if __name__ == "__main__":
    sys.exit(main())
