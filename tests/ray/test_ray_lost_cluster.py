"""A Ray connection lost under running calls (``ray.shutdown()`` from
another thread) fails the running and queued calls clearly, and nothing
more: the process lives on, later Ray calls fail at once without starting
a new cluster, and local tools keep working. The scenario runs in its own
driver process (``ray_shutdown_driver.py``): before the fix, Ray's core
worker aborted that whole process ("Cannot find an actor handle")."""

from __future__ import annotations

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def test_ray_shutdown_under_running_calls_fails_them_clearly_and_the_process_lives_on() -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(
        [sys.executable, os.path.join(HERE, "ray_shutdown_driver.py")],
        capture_output=True,
        text=True,
        cwd=HERE,
        env=env,
        timeout=240,  # a cold local cluster on a loaded machine; a correct run takes seconds
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    outcome = json.loads(proc.stdout.strip().splitlines()[-1])
    assert outcome["settled"] is True
    assert len(outcome["results"]) == 4  # two running, two queued by Ray
    for result in outcome["results"]:
        if result["name"] == "RemoteToolError":
            # (The body's own helper, the test's Gate actor, can die of the
            # shutdown first: the body then fails with that, as it raised it.)
            assert result["message"].startswith("ActorDiedError:") and "class_name: Gate" in result["message"]
            continue
        assert result["name"] == "RayUnavailableError" and result["code"] == "EXECUTOR_UNAVAILABLE"
        assert "the Ray connection was lost while the call was on the cluster" in result["message"]
    assert any(result["name"] == "RayUnavailableError" for result in outcome["results"])
    ray_call, local_call = outcome["later"]
    assert ray_call["name"] == "RayUnavailableError"
    assert "make a new RayExecutor to use Ray again" in ray_call["message"]
    assert local_call == {"value": 7}
    assert outcome["initialized_again"] is False  # no new local cluster was started
