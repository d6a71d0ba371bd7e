"""RayExecutor on a local 2-CPU cluster: what runs where, in which order,
under which cap, and what comes back."""

from __future__ import annotations

import os
from typing import Any

import ray
import ray_tools as rt_tools
from ray_helpers import gate_wait, result_of

from dsh_actors import Agent, ErrorCode, TextBlock, ToolBatchInput, ToolCall, ToolRuntime, UserMessage
from executors.ray import RayActor

REMOTE = {"ray": True}


def batch(
    *calls: tuple[str, str, dict[str, Any]], cap: int | None = None, agent: Agent | None = None
) -> ToolBatchInput:
    import json

    return ToolBatchInput(
        calls=[ToolCall(cid, name, json.dumps(args)) for cid, name, args in calls],
        max_parallel_tool_calls=cap,
        agent=agent,
    )


def test_a_remote_body_runs_on_a_worker_with_the_calls_identity(rt: Any, make_executor: Any, gate: Any) -> None:
    rt.tools.register(rt_tools.tool("who", rt_tools.identify, meta=REMOTE))
    rt.tools.register(rt_tools.tool("here", rt_tools.identify))
    executor = make_executor()
    # The test module called ray.init itself: the executor uses that
    # connection and will not shut it down.
    assert not executor.owns_connection and not executor.started_cluster
    rt.tools.set_executor(executor)
    agent = Agent("grader", parent=Agent("farm"))
    result = rt.tools.execute(batch(("c1", "who", {"x": [1, {"k": 2**63}]}), ("c2", "here", {"x": 1}), agent=agent))
    remote, local = (r.result for r in result.results)
    assert not remote.is_error, remote
    assert remote.value["pid"] != os.getpid()
    assert local.value["pid"] == os.getpid()
    assert remote.value["call_id"] == "c1" and remote.value["name"] == "who"
    assert remote.value["root_call_id"] == "c1"
    assert remote.value["agent_id"] == "grader" and remote.value["agent_path"] == "farm/grader"
    # Lossless JSON both ways: the big int and the nesting survive.
    assert remote.value["x"] == (1, {"k": 2**63})
    assert remote.value["arguments"] == {"x": (1, {"k": 2**63})}
    assert remote.content[0].text.startswith("FrozenDict(")


def test_results_come_back_in_model_order_when_later_calls_finish_first(rt: Any, make_executor: Any, gate: Any) -> None:
    rt.tools.register(rt_tools.tool("chain", rt_tools.chained, meta={"ray": {"num_cpus": 0.5}}))
    rt.tools.set_executor(make_executor())
    # a waits for b, c for d: b and d finish first.
    result = rt.tools.execute(
        batch(
            ("a", "chain", {"x": "a", "after": "b"}),
            ("b", "chain", {"x": "b"}),
            ("c", "chain", {"x": "c", "after": "d"}),
            ("d", "chain", {"x": "d"}),
            cap=2,
        )
    )
    assert [r.call_id for r in result.results] == ["a", "b", "c", "d"]
    assert [r.result.value for r in result.results] == ["a", "b", "c", "d"]


def test_the_cap_and_exclusive_barriers_hold_across_remote_calls(rt: Any, make_executor: Any, gate: Any) -> None:
    # num_cpus=0: Ray itself would run all five at once; the driver's cap
    # (2) and the exclusive call X are what keep them apart.
    rt.tools.register(
        rt_tools.tool("hold", rt_tools.held, meta={"ray": {"num_cpus": 0}}, safe=lambda args: args["x"] != "X")
    )
    rt.tools.set_executor(make_executor())
    names = ["p0", "p1", "X", "p3", "p4"]
    future = rt.tools.submit(batch(*((n, "hold", {"x": n}) for n in names), cap=2))
    gate_wait(gate, "entered:p0")
    gate_wait(gate, "entered:p1")
    assert not ray.get(gate.is_set.remote("entered:X"))
    for name in ("p0", "p1"):
        ray.get(gate.set.remote(f"release:{name}"))
    gate_wait(gate, "entered:X")
    ray.get(gate.set.remote("release:X"))
    gate_wait(gate, "entered:p3")
    gate_wait(gate, "entered:p4")
    for name in ("p3", "p4"):
        ray.get(gate.set.remote(f"release:{name}"))
    result = result_of(future)
    assert [r.result.value for r in result.results] == names
    journal = ray.get(gate.log.remote())
    entered = {name: active for kind, name, active in journal if kind == "enter"}
    # p1 ran beside p0; nothing ran beside X; at most two ran at once.
    assert {entered["p0"], entered["p1"]} in ({(), ("p0",)}, {(), ("p1",)})
    assert entered["X"] == ()
    assert all(len(active) <= 1 for active in entered.values())
    x_in = journal.index(("enter", "X", ()))
    x_out = next(i for i, (kind, name, _) in enumerate(journal) if kind == "leave" and name == "X")
    assert all(kind != "enter" for kind, _, _ in journal[x_in + 1 : x_out])


def test_a_body_that_raises_fails_with_its_class_and_message(rt: Any, make_executor: Any, gate: Any) -> None:
    rt.tools.register(rt_tools.tool("boom", rt_tools.raises, meta=REMOTE))
    rt.tools.register(rt_tools.tool("who", rt_tools.identify, meta=REMOTE))
    rt.tools.set_executor(make_executor())
    result = rt.tools.execute(batch(("b", "boom", {"x": 3}), ("v", "who", {"x": "not-json-ok", "n": "NaN"})))
    boom, invalid = (r.result for r in result.results)
    assert boom.is_error
    assert boom.error.message == "ValueError: bad input 3"
    assert boom.error.info is not None
    assert (boom.error.info.name, boom.error.info.code) == ("RemoteToolError", ErrorCode.TOOL_FAILED)
    assert boom.content[0].text == "Error: ValueError: bad input 3"
    # The context it deferred before raising comes back with the failure.
    assert [c.content[0].text for c in boom.additional_contexts] == ["before the error"]
    # define_tool's argument check ran on the worker and kept its class.
    assert invalid.is_error and invalid.error.info is not None
    assert (invalid.error.info.name, invalid.error.info.code) == ("ToolArgsError", ErrorCode.INVALID_ARGS)


def test_a_dsh_error_holding_what_does_not_pickle_keeps_its_class_message_and_code(
    rt: Any, make_executor: Any, gate: Any
) -> None:
    # (It came back as RemoteToolError, TOOL_FAILED, "RefusedByTheService:
    # the service refused: ...": a ToolFailedError's exact message lost.)
    rt.tools.register(rt_tools.tool("refused", rt_tools.raises_what_does_not_pickle, meta=REMOTE))
    rt.tools.set_executor(make_executor())
    failure = rt.tools.execute(batch(("r", "refused", {}))).results[0].result
    assert failure.is_error and failure.error.info is not None
    assert (failure.error.info.name, failure.error.info.code) == ("RefusedByTheService", ErrorCode.INVALID_ARGS)
    assert failure.error.message == "the service refused: x is taken"


def test_an_at_tool_runs_on_a_worker_with_its_validation(rt: Any, make_executor: Any, gate: Any) -> None:
    rt.tools.register(rt_tools.grade)  # module-level: the worker imports it
    rt.tools.register(rt_tools.make_scaler(3))  # local: decorated again on the worker
    rt.tools.set_executor(make_executor())
    result = rt.tools.execute(
        batch(
            ("ok", "grade", {"submission": {"answer": "42", "points": 4}}),
            ("bad", "grade", {"submission": {"answer": "42", "points": -1}}),
            ("boom", "grade", {"submission": {"answer": "boom", "points": 1}}),
            ("local", "scale", {"n": 5}),
        )
    )
    ok, bad, boom, local = (r.result for r in result.results)
    assert not ok.is_error, ok
    assert ok.value["pid"] != os.getpid()
    assert ok.value == {"pid": ok.value["pid"], "call_id": "ok", "score": 8}  # the model dumped on the worker
    assert bad.is_error and bad.error.info is not None
    assert (bad.error.info.name, bad.error.info.code) == ("ToolArgsError", ErrorCode.INVALID_ARGS)
    assert (
        bad.error.message == 'invalid arguments: "value.submission.points": Input should be greater than or equal to 0'
    )
    assert boom.is_error and boom.error.info is not None
    assert (boom.error.info.name, boom.error.info.code) == ("RemoteToolError", ErrorCode.TOOL_FAILED)
    assert boom.error.message == "ValueError: cannot grade 'boom'"
    assert not local.is_error, local
    assert local.value["pid"] != os.getpid() and local.value["scaled"] == 15


def test_values_deferred_contexts_and_conclude_turn_travel_back(rt: Any, make_executor: Any, gate: Any) -> None:
    rt.tools.register(rt_tools.tool("done", rt_tools.concludes, meta=REMOTE))
    rt.tools.register(rt_tools.tool("bad", rt_tools.returns_a_set, meta=REMOTE))
    rt.tools.register(rt_tools.tool("aio", rt_tools.async_body, meta=REMOTE))
    rt.tools.register(rt_tools.tool("ctx", rt_tools.bad_context, meta=REMOTE))
    rt.tools.set_executor(make_executor())
    result = rt.tools.execute(batch(("d", "done", {}), ("s", "bad", {}), ("a", "aio", {}), ("c", "ctx", {})))
    done, bad, aio, bad_context = (r.result for r in result.results)
    assert bad_context.is_error and bad_context.error.info is not None
    assert bad_context.error.info.code == ErrorCode.INVALID_TOOL_OUTPUT
    assert "a deferred context cannot cross to the driver: value[0].meta.s" in bad_context.error.message
    assert done.value == {"done": True} and done.concludes_turn and result.concluded
    (context,) = done.additional_contexts
    assert context.content[0].text == "see the attached"
    assert (context.source, context.meta) == ("grader", {"score": 7})
    assert bad.is_error and bad.error.info is not None
    assert bad.error.info.code == ErrorCode.INVALID_TOOL_OUTPUT
    assert bad.error.message.startswith('tool "bad" returned invalid output: value.s')
    assert aio.value["async"] is True and aio.value["pid"] != os.getpid()


def test_a_str_deferred_on_a_worker_becomes_the_drivers_user_message(rt: Any, make_executor: Any, gate: Any) -> None:
    rt.tools.register(rt_tools.tool("note", rt_tools.defers_text, meta=REMOTE))
    rt.tools.set_executor(make_executor())
    (outcome,) = rt.tools.execute(batch(("n", "note", {}))).results
    assert outcome.result.value == "deferred", outcome.result
    plain, message = outcome.result.additional_contexts
    assert isinstance(plain, UserMessage) and plain.content == (TextBlock("remember the plain text"),)
    assert plain.source is None and plain.meta is None  # what ctx.defer_context("...") makes on the driver
    assert message.content == (TextBlock("and a message"),) and message.source == "ray-test"


def test_a_stateful_tool_keeps_its_state_on_a_ray_actor(rt: Any, make_executor: Any, gate: Any) -> None:
    counter = RayActor(rt_tools.Counter, 100)
    rt.tools.register(rt_tools.tool("add", rt_tools.noop, meta={"ray": {"actor": "counter"}}, safe=False))
    rt.tools.register(rt_tools.tool("total", rt_tools.noop, meta={"ray": {"actor": "counter", "method": "total_now"}}))
    rt.tools.set_executor(make_executor(actors={"counter": counter}))
    result = rt.tools.execute(batch(("a1", "add", {"x": 1}), ("a2", "add", {"x": 2}), ("t", "total", {})))
    first, second, total = (r.result.value for r in result.results)
    assert (first["total"], second["total"], total) == (101, 103, 103)
    assert first["pid"] == second["pid"] != os.getpid()
    assert second["calls"] == ("a1", "a2")
    again = rt.tools.execute(batch(("a3", "add", {"x": 10})))
    assert again.results[0].result.value["total"] == 113


def test_a_named_actor_is_shared_by_two_runtimes_on_one_cluster(rt: Any, make_executor: Any, gate: Any) -> None:
    from dsh_actors import ToolRuntime

    shared = {"ray": {"actor": "counter"}}
    rt.tools.register(rt_tools.tool("add", rt_tools.noop, meta=shared, safe=False))
    rt.tools.set_executor(make_executor(actors={"counter": RayActor(rt_tools.Counter, name="shared-counter")}))
    with ToolRuntime() as other:
        other.tools.register(rt_tools.tool("add", rt_tools.noop, meta=shared, safe=False))
        other.tools.set_executor(make_executor(actors={"counter": RayActor(rt_tools.Counter, name="shared-counter")}))
        one = rt.tools.execute(batch(("a", "add", {"x": 5})))
        two = other.tools.execute(batch(("b", "add", {"x": 7})))
    assert one.results[0].result.value["total"] == 5
    assert two.results[0].result.value["total"] == 12
    assert two.results[0].result.value["calls"] == ("a", "b")


def test_a_scoped_ray_executor_runs_next_to_native_tools(rt: Any, make_executor: Any, gate: Any) -> None:
    rt.tools.register(rt_tools.tool("grade", rt_tools.identify))
    rt.tools.register(rt_tools.tool("look", rt_tools.identify))
    farm = Agent("farm")
    rt.tools.scope(farm).set_executor(make_executor(remote={"grade"}))
    scoped = rt.tools.execute(batch(("g", "grade", {}), ("l", "look", {}), agent=farm))
    unscoped = rt.tools.execute(batch(("g", "grade", {}), ("l", "look", {})))
    grade, look = (r.result.value for r in scoped.results)
    assert grade["pid"] != os.getpid() and grade["agent_id"] == "farm"
    assert look["pid"] == os.getpid()
    assert all(r.result.value["pid"] == os.getpid() for r in unscoped.results)


def test_a_remote_predicate_overrides_the_tools_metadata(rt: Any, make_executor: Any, gate: Any) -> None:
    rt.tools.register(rt_tools.tool("marked", rt_tools.identify, meta=REMOTE))
    rt.tools.register(rt_tools.tool("plain", rt_tools.identify))
    rt.tools.set_executor(make_executor(remote=lambda definition: definition.name == "plain"))
    result = rt.tools.execute(batch(("m", "marked", {}), ("p", "plain", {})))
    marked, plain = (r.result.value for r in result.results)
    assert marked["pid"] == os.getpid()
    assert plain["pid"] != os.getpid()


def test_a_malformed_placement_fails_the_call_clearly(rt: Any, make_executor: Any, gate: Any) -> None:
    rt.tools.register(rt_tools.tool("typo", rt_tools.identify, meta={"ray": {"num_cpu": 2}}))
    rt.tools.register(rt_tools.tool("nobody", rt_tools.identify, meta={"ray": {"actor": "missing"}}))
    rt.tools.set_executor(make_executor())
    typo, nobody = (r.result for r in rt.tools.execute(batch(("t", "typo", {}), ("n", "nobody", {}))).results)
    assert typo.is_error and "unknown meta[\"ray\"] option(s) ['num_cpu']" in typo.error.message
    assert nobody.is_error and "'missing', which is not one of the executor's actors" in nobody.error.message
    assert typo.error.info is not None and typo.error.info.name == "RayExecutionError"


def test_a_closed_executor_fails_calls_as_unavailable(rt: Any, make_executor: Any, gate: Any) -> None:
    rt.tools.register(rt_tools.tool("who", rt_tools.identify, meta=REMOTE))
    executor = make_executor()
    rt.tools.set_executor(executor)
    executor.close()
    result = rt.tools.execute(batch(("w", "who", {})))
    failure = result.results[0].result
    assert failure.is_error and failure.error.info is not None
    assert (failure.error.info.name, failure.error.info.code) == ("RayUnavailableError", ErrorCode.EXECUTOR_UNAVAILABLE)
    assert failure.error.message == (
        "ray unavailable: the RayExecutor is closed: make a new RayExecutor (and set it) to run these tools on Ray again"
    )


def test_stop_closes_the_executor_and_leaves_the_applications_connection(make_executor: Any, gate: Any) -> None:
    # rt.stop() cancelled the executor's calls but left it open: the Ray
    # connection (and a local cluster it started) stayed held until the
    # application called close(), though the executor could run nothing
    # again (one runtime per executor).
    executor = make_executor()
    with ToolRuntime() as rt:
        rt.tools.register(rt_tools.tool("who", rt_tools.identify, meta=REMOTE))
        rt.tools.set_executor(executor)
        assert not rt.tools.execute(batch(("w", "who", {}))).results[0].result.is_error
        assert not executor.closed
    assert executor.closed and executor.in_flight() == 0
    # The module's own ray.init: closing the executor left it alone.
    assert ray.is_initialized()
    assert ray.get(rt_tools.warm.remote(), timeout=30) > 0


def test_a_body_whose_module_the_workers_cannot_import_fails_with_a_hint(
    rt: Any, make_executor: Any, gate: Any, tmp_path: Any, monkeypatch: Any
) -> None:
    import importlib

    (tmp_path / "driver_only_tools.py").write_text("def body(args, ctx):\n    return 'here only'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("driver_only_tools")
    try:
        rt.tools.register(rt_tools.tool("nowhere", module.body, meta=REMOTE))
        rt.tools.set_executor(make_executor())
        failure = rt.tools.execute(batch(("n", "nowhere", {}))).results[0].result
    finally:
        import sys

        sys.modules.pop("driver_only_tools", None)
    assert failure.is_error and failure.error.info is not None
    assert failure.error.info.code == ErrorCode.TOOL_FAILED
    assert "driver_only_tools" in failure.error.message
    assert "importable on the workers" in failure.error.message


class _HoldsALock:
    def __init__(self, lock: Any) -> None:
        self.lock = lock

    def who(self, args: Any, ctx: Any) -> str:
        return "host"


def test_a_body_or_actor_that_cannot_pickle_fails_naming_what_did_not(rt: Any, make_executor: Any, gate: Any) -> None:
    # (It failed EXECUTOR_UNAVAILABLE, as if the cluster had refused it, its
    # message cut at "Could not serialize the function ...:".)
    import threading

    lock = threading.Lock()

    def locked(args: Any, ctx: Any) -> str:
        with lock:
            return "locked"

    rt.tools.register(rt_tools.tool("locked", locked, meta=REMOTE))
    rt.tools.register(rt_tools.tool("hosted", rt_tools.identify, meta={"ray": {"actor": "host", "method": "who"}}))
    rt.tools.set_executor(make_executor(actors={"host": RayActor(_HoldsALock, threading.Lock())}))
    for item in rt.tools.execute(batch(("l", "locked", {}), ("h", "hosted", {}))).results:
        failure = item.result
        assert failure.is_error and failure.error.info is not None
        assert (failure.error.info.name, failure.error.info.code) == ("RayExecutionError", ErrorCode.TOOL_FAILED)
        assert failure.error.message.startswith(
            "ray cannot send the call: cannot pickle '_thread.lock' object (a remote tool's body, what it "
            "closes over, and a RayActor's constructor arguments must pickle"
        ), failure.error.message
