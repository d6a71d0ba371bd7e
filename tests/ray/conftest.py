"""Fixtures for the Ray tests: one local Ray cluster (2 CPUs) per test
module, started by the test (the application's own ``ray.init``, which
every RayExecutor then shares and never shuts down) and shut down at the
module's end, leaving no thread and no process behind.

Bodies shipped to Ray live in ``ray_tools.py``; the workers import it
because this folder is on their PYTHONPATH (``runtime_env``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from ray_helpers import children, live_threads

from executors.ray import RayExecutor

HERE = Path(__file__).resolve().parent
OBJECT_STORE = 80 * 1024 * 1024


def init_options() -> dict[str, Any]:
    return {
        "num_cpus": 2,
        "include_dashboard": False,
        "object_store_memory": OBJECT_STORE,
        "log_to_driver": False,
        "namespace": "dsh-tests",
        "runtime_env": {"env_vars": {"PYTHONPATH": str(HERE)}},
    }


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """A local Ray cluster for this module, and the Gate actor the bodies
    and the test meet at. At the end: shut down, no thread, no process."""
    assert not ray.is_initialized(), "a previous module left Ray initialized"
    threads_before = live_threads()
    children_before = set(children())
    ray.init(**init_options())
    try:
        from ray_tools import GATE, NAMESPACE, Gate, warm_one

        gate = Gate.options(name=GATE, namespace=NAMESPACE).remote()
        # Start the gate and two task workers now, not in the first test.
        ray.get([gate.reset.remote(), warm_one.remote(), warm_one.remote()])
        yield gate
    finally:
        ray.shutdown()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (set(children()) - children_before):
        time.sleep(0.05)  # ray.shutdown() has signalled them; reap
    left = set(children()) - children_before
    assert not left, f"Ray processes left running: {sorted(left)}"
    leaked = [t for t in live_threads() - threads_before if not t.name.startswith("pytest_timeout")]
    for thread in leaked:
        thread.join(5.0)
    names = [t.name for t in leaked if t.is_alive()]
    assert not names, f"threads left running after ray.shutdown(): {names}"


@pytest.fixture
def gate(cluster: Any) -> Any:
    ray.get(cluster.reset.remote())
    return cluster


@pytest.fixture
def make_executor(cluster: Any) -> Iterator[Callable[..., RayExecutor]]:
    """``make_executor(**options)``: a RayExecutor on the module's cluster;
    each is closed after the test, with nothing left in flight."""
    made: list[RayExecutor] = []

    def make(**options: Any) -> RayExecutor:
        executor = RayExecutor(**options)
        made.append(executor)
        return executor

    yield make
    for executor in made:
        executor.close()
        assert executor.in_flight() == 0
