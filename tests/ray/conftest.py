"""Fixtures for the Ray tests: one local Ray cluster (2 CPUs) shared by the
test modules that use it, started by the first test that asks for it (the
application's own ``ray.init``, which every RayExecutor then shares and
never shuts down) and shut down once the next test's module does not use
it, leaving no thread and no process behind. Those modules run first
(``pytest_collection_modifyitems``), so that one cluster serves them all.

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


class SharedCluster:
    """The local cluster and the Gate actor the bodies and the test meet at."""

    def __init__(self) -> None:
        self.gate: Any = None
        self.modules: set[Path] = set()  # the test modules that use it
        self.threads_before: set[Any] = set()
        self.children_before: set[int] = set()

    def start(self) -> Any:
        if self.gate is not None:
            return self.gate
        assert not ray.is_initialized(), "a previous test left Ray initialized"
        self.threads_before = live_threads()
        self.children_before = set(children())
        ray.init(**init_options())
        try:
            from ray_tools import GATE, NAMESPACE, Gate, warm_one

            gate = Gate.options(name=GATE, namespace=NAMESPACE).remote()
            # Start the gate and two task workers now, not in the first test.
            ray.get([gate.reset.remote(), warm_one.remote(), warm_one.remote()])
        except BaseException:
            ray.shutdown()
            raise
        self.gate = gate
        return gate

    def shutdown(self) -> None:
        """Shut down (if started): at the end, no thread, no process."""
        if self.gate is None:
            return
        self.gate = None
        ray.shutdown()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (set(children()) - self.children_before):
            time.sleep(0.05)  # ray.shutdown() has signalled them; reap
        left = set(children()) - self.children_before
        assert not left, f"Ray processes left running: {sorted(left)}"
        leaked = [t for t in live_threads() - self.threads_before if not t.name.startswith("pytest_timeout")]
        for thread in leaked:
            thread.join(5.0)
        names = [t.name for t in leaked if t.is_alive()]
        assert not names, f"threads left running after ray.shutdown(): {names}"


CLUSTER = SharedCluster()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the tests here together, where the first of them was selected,
    the modules that use the cluster first (a stable sort: each module's
    tests stay together, in their order), so a selection that names other
    tests between them does not split a cluster module and start the
    cluster again; every other test keeps its order."""
    places = [index for index, item in enumerate(items) if HERE in item.path.resolve().parents]
    if not places:
        return
    ours = [items[index] for index in places]
    CLUSTER.modules = {item.path for item in ours if "cluster" in item.fixturenames}
    ours.sort(key=lambda item: item.path not in CLUSTER.modules)
    chosen = set(places)
    others = [item for index, item in enumerate(items) if index not in chosen]
    items[:] = others[: places[0]] + ours + others[places[0] :]


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After the test's fixtures (its executors) are torn down, even if
    that failed: the cluster, if the next test's module does not use it."""
    try:
        return (yield)
    finally:
        if nextitem is None or nextitem.path not in CLUSTER.modules:
            CLUSTER.shutdown()


@pytest.fixture(scope="session")
def _cluster_shut_down_at_the_end() -> Iterator[None]:
    """(For a run that stops early: its last test's teardown had a next one.)"""
    yield
    CLUSTER.shutdown()


@pytest.fixture(scope="module")  # (set up before a test's runtime: Ray's threads are not the test's)
def cluster(_cluster_shut_down_at_the_end: None) -> Any:
    """The shared cluster's Gate actor (the cluster started if it is not)."""
    return CLUSTER.start()


@pytest.fixture
def gate(cluster: Any) -> Any:
    ray.get(cluster.reset.remote())
    return cluster


@pytest.fixture
def make_executor(cluster: Any) -> Iterator[Callable[..., RayExecutor]]:
    """``make_executor(**options)``: a RayExecutor on the shared cluster;
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
