"""executors.ray without a cluster: placement rules, the JSON of deferred
contexts, the mapping of Ray's exceptions to failures with codes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import ray_tools as rt_tools
from ray import exceptions as rex

from dsh_actors import AbortError, ErrorCode, ImageBlock, InvalidTypeError, ReasoningBlock, UserMessage, text
from executors.ray import (
    RayActor,
    RayExecutionError,
    RayObjectLostError,
    RayTask,
    RayWorkerDiedError,
    RemoteToolError,
)
from executors.ray.executor import _translate
from executors.ray.options import ActorMethod, placement
from executors.ray.worker import RemoteContext, contexts_from_json, contexts_to_json


def tool(name: str = "t", meta: Any = None) -> Any:
    return rt_tools.tool(name, rt_tools.noop, meta=meta)


def test_metadata_places_a_tool_and_remote_overrides_it() -> None:
    counter = RayActor(rt_tools.Counter)
    actors = {"counter": counter}
    assert placement(tool(), None, actors) is None
    assert placement(tool(meta={"ray": False}), None, actors) is None
    assert placement(tool(meta={"ray": True}), None, actors) == RayTask()
    assert placement(tool(meta={"ray": {"num_cpus": 2, "resources": {"gpu_box": 1}}}), None, actors) == RayTask(
        num_cpus=2, resources={"gpu_box": 1}
    )
    assert placement(tool("add", {"ray": {"actor": "counter"}}), None, actors) == ActorMethod(counter)
    assert placement(tool("add", {"ray": {"actor": "counter", "method": "inc"}}), None, actors) == ActorMethod(
        counter, "inc"
    )
    # remote= decides when given: names, a mapping, a predicate.
    assert placement(tool("a", {"ray": True}), {"b"}, actors) is None
    assert placement(tool("b"), {"b"}, actors) == RayTask()
    assert placement(tool("b"), {"b": RayTask(num_cpus=4)}, actors) == RayTask(num_cpus=4)
    assert placement(tool("b"), {"b": counter.method("add")}, actors) == ActorMethod(counter, "add")
    assert placement(tool("b"), lambda d: d.name == "b", actors) == RayTask()
    assert placement(tool("b"), lambda d: counter, actors) == ActorMethod(counter)
    with pytest.raises(ValueError, match="unknown meta"):
        placement(tool(meta={"ray": {"cpus": 1}}), None, actors)
    with pytest.raises(ValueError, match="must be a bool, a mapping"):
        placement(tool(meta={"ray": "yes"}), None, actors)


def test_task_options_take_the_executors_defaults() -> None:
    assert RayTask().ray_options(1, 0) == {"num_cpus": 1, "max_retries": 0}
    assert RayTask(num_cpus=0.5, max_retries=2, options={"name": "x"}).ray_options(1, 0) == {
        "name": "x",
        "num_cpus": 0.5,
        "max_retries": 2,
    }


def test_deferred_contexts_cross_as_lossless_json() -> None:
    contexts = [
        UserMessage([text("a"), ImageBlock("aGk=", "image/png")], source="s", meta={"k": [1, 2**64 - 1]}),
        UserMessage([ReasoningBlock("think", signature="sig")]),
    ]
    data = contexts_to_json(contexts)
    assert isinstance(data, bytes)
    assert contexts_from_json(data) == contexts
    assert contexts_to_json([]) is None and contexts_from_json(None) == []


def test_a_str_context_crosses_as_text_and_a_wrong_one_is_refused_on_the_worker() -> None:
    ctx = RemoteContext(("k", "c1", None, "t", None, None), {}, None)  # type: ignore[arg-type]
    ctx.defer_context("plain text")
    ctx.defer_context(UserMessage([text("a message")]))
    with pytest.raises(InvalidTypeError, match=r'not dict: ctx.defer_context\("..."\)'):
        ctx.defer_context({"role": "user", "content": "x"})  # type: ignore[arg-type]
    data, concludes = ctx._take()
    # The str stays a str: the driver's ctx.defer_context makes its message.
    assert contexts_from_json(data) == ["plain text", UserMessage([text("a message")])]
    assert not concludes


def code(error: Any) -> tuple[str, str]:
    return type(error).__name__, str(error.code)


def test_ray_failures_become_failures_with_codes() -> None:
    died = _translate(rex.WorkerCrashedError())
    assert isinstance(died, RayWorkerDiedError) and code(died) == ("RayWorkerDiedError", ErrorCode.TOOL_FAILED)
    assert str(died).startswith("ray worker died: ")
    assert isinstance(_translate(rex.ActorDiedError()), RayWorkerDiedError)
    assert isinstance(_translate(rex.OutOfMemoryError("killed: memory")), RayWorkerDiedError)
    assert isinstance(_translate(rex.NodeDiedError("node gone")), RayWorkerDiedError)
    for lost in (
        rex.ObjectLostError("ab" * 14, None, "call site"),
        rex.OwnerDiedError("ab" * 14, None, "call site"),
    ):
        error = _translate(lost)
        assert isinstance(error, RayObjectLostError) and code(error) == ("RayObjectLostError", ErrorCode.TOOL_FAILED)
        assert str(error).startswith("ray object lost: ")
    wrapped = _translate(rex.RayTaskError("f", "tb", ModuleNotFoundError("No module named 'graders'")))
    assert isinstance(wrapped, RayExecutionError)
    assert "ModuleNotFoundError: No module named 'graders'" in str(wrapped)
    assert "importable on the workers" in str(wrapped)
    cancelled = _translate(rex.TaskCancelledError())
    assert isinstance(cancelled, RayExecutionError) and "cancelled outside this runtime" in str(cancelled)


def test_a_remote_tool_error_names_the_original_class() -> None:
    error = RemoteToolError("KeyError", "'x'", "Traceback ...")
    assert str(error) == "KeyError: 'x'" and error.code == ErrorCode.TOOL_FAILED
    assert str(RemoteToolError("StopIteration", "")) == "StopIteration"
    import pickle

    again = pickle.loads(pickle.dumps(error))
    assert (again.class_name, again.detail, again.remote_traceback) == ("KeyError", "'x'", "Traceback ...")
    assert AbortError(before_dispatch=True).code == ErrorCode.ABORTED_BEFORE_DISPATCH


def test_the_benchmark_names_the_logger_of_rays_token_auth_notice() -> None:
    """``benchmarks/ray.py`` keeps Ray's token-auth notice (logged at each
    local cluster's start, it landed in the middle of the benchmark table)
    out of the table by raising that one logger's level: the logger must
    still be the one Ray warns through."""
    from ray._private.authentication import authentication_token_setup as setup

    from benchmarks.ray import AUTH_NOTICE_LOGGER

    assert setup.logger.name == AUTH_NOTICE_LOGGER


def test_a_selection_runs_the_tests_here_together_where_the_first_was_selected(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (They kept their places: a cluster module split around the tests
    # selected between its tests started the cluster a second time.)
    here = Path(__file__).resolve().parent
    conftest = next(
        plugin
        for plugin in request.config.pluginmanager.get_plugins()
        if getattr(plugin, "__file__", None) == str(here / "conftest.py")
    )
    monkeypatch.setattr(conftest.CLUSTER, "modules", set())  # (the run's own, restored)

    class Item:
        def __init__(self, path: Path, *fixturenames: str) -> None:
            self.path, self.fixturenames = path, list(fixturenames)

    first, units, other, probe, probe_too, last = (
        Item(here.parent / "test_a.py"),
        Item(here / "test_ray_units.py"),
        Item(here.parent / "test_ownership.py"),
        Item(here / "test_ray_probe.py", "cluster"),
        Item(here / "test_ray_probe.py", "cluster"),
        Item(here.parent / "test_z.py"),
    )
    items = [first, probe, other, units, probe_too, last]
    conftest.pytest_collection_modifyitems(items)
    assert items == [first, probe, probe_too, units, other, last]
    assert conftest.CLUSTER.modules == {probe.path}
