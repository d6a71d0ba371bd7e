"""policies.retry: idempotent tools are retried on configured codes, with
capped exponential backoff that ends the moment the signal fires."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from policy_helpers import WAIT, Recorder, call, code_of, run_one, tool

import policies
from dsh_actors import AbortController, DshError, ToolBatchInput, ToolTimeoutError
from policies.retry import RetryPolicy


class Busy(DshError):
    code = "UPSTREAM_BUSY"  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__("upstream busy")


class Broken(DshError):
    code = "BROKEN"  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__("broken for good")


def flaky(failures: list[BaseException], attempts: Recorder) -> Any:
    """A body that raises each of ``failures`` in turn, then succeeds."""

    def body(args: Any, ctx: Any) -> Any:
        attempts.add(ctx.signal)
        n = len(attempts.items)
        if n <= len(failures):
            raise failures[n - 1]
        return f"ok after {n}"

    return body


def test_an_idempotent_tool_is_retried_on_a_configured_code_until_it_succeeds(rt: Any) -> None:
    attempts = Recorder()
    rt.use(policies.retry, tools=("fetch",), codes=("UPSTREAM_BUSY",), base_ms=1)
    rt.tools.register(tool("fetch", flaky([Busy(), Busy()], attempts)))

    result = run_one(rt, call("fetch"))

    assert not result.is_error and result.value == "ok after 3"
    assert len(attempts.items) == 3
    signals = attempts.items
    assert len({id(s) for s in signals}) == 3  # each attempt gets a fresh body signal


def test_tool_timeout_is_retried_by_default(rt: Any) -> None:
    attempts = Recorder()
    rt.use(policies.retry, tools=("fetch",), base_ms=1)
    rt.tools.register(tool("fetch", flaky([ToolTimeoutError(5)], attempts)))

    assert not run_one(rt, call("fetch")).is_error
    assert len(attempts.items) == 2


def test_a_tool_that_is_not_idempotent_is_never_retried(rt: Any) -> None:
    attempts = Recorder()
    rt.use(policies.retry, tools=("fetch",), codes=("UPSTREAM_BUSY",), base_ms=1)
    rt.tools.register(tool("post", flaky([Busy()], attempts)))

    assert code_of(run_one(rt, call("post"))) == "UPSTREAM_BUSY"
    assert len(attempts.items) == 1


def test_definition_meta_idempotent_true_marks_a_tool_idempotent(rt: Any) -> None:
    attempts = Recorder()
    rt.use(policies.retry, codes=("UPSTREAM_BUSY",), base_ms=1)
    rt.tools.register(tool("get", flaky([Busy()], attempts), meta={"idempotent": True}))
    rt.tools.register(tool("truthy", flaky([Busy()], Recorder()), meta={"idempotent": "yes"}))

    assert not run_one(rt, call("get")).is_error
    assert len(attempts.items) == 2
    assert code_of(run_one(rt, call("truthy"))) == "UPSTREAM_BUSY"  # only exactly True counts


def test_a_predicate_on_the_execution_marks_calls_idempotent(rt: Any) -> None:
    attempts = Recorder()
    rt.use(
        policies.retry,
        predicate=lambda execution: execution.arguments.get("message") == "GET",
        codes=("UPSTREAM_BUSY",),
        base_ms=1,
    )
    rt.tools.register(tool("http", flaky([Busy(), Busy()], attempts)))

    assert code_of(run_one(rt, call("http", message="POST"))) == "UPSTREAM_BUSY"
    assert len(attempts.items) == 1
    assert not run_one(rt, call("http", message="GET")).is_error  # one more failure, then success
    assert len(attempts.items) == 3


def test_a_raising_predicate_means_not_idempotent(rt: Any) -> None:
    attempts = Recorder()

    def predicate(execution: Any) -> bool:
        raise RuntimeError("cannot tell")

    rt.use(policies.retry, predicate=predicate, codes=("UPSTREAM_BUSY",), base_ms=1)
    rt.tools.register(tool("http", flaky([Busy()], attempts)))

    assert code_of(run_one(rt, call("http"))) == "UPSTREAM_BUSY"
    assert len(attempts.items) == 1


def test_a_code_outside_the_set_is_not_retried(rt: Any) -> None:
    attempts = Recorder()
    rt.use(policies.retry, tools=("fetch",), codes=("UPSTREAM_BUSY",), base_ms=1)
    rt.tools.register(tool("fetch", flaky([Broken()], attempts)))

    assert code_of(run_one(rt, call("fetch"))) == "BROKEN"
    assert len(attempts.items) == 1


def test_a_failure_without_a_code_is_not_retried(rt: Any) -> None:
    attempts = Recorder()
    rt.use(policies.retry, tools=("fetch",), base_ms=1)
    rt.tools.register(tool("fetch", flaky([ValueError("plain")], attempts)))

    assert run_one(rt, call("fetch")).is_error
    assert len(attempts.items) == 1


def test_attempts_caps_the_tries_and_the_last_failure_is_returned(rt: Any) -> None:
    attempts = Recorder()
    rt.use(policies.retry, tools=("fetch",), codes=("UPSTREAM_BUSY",), attempts=4, base_ms=1)
    rt.tools.register(tool("fetch", flaky([Busy()] * 10, attempts)))

    result = run_one(rt, call("fetch"))

    assert code_of(result) == "UPSTREAM_BUSY"
    assert len(attempts.items) == 4


def test_the_backoff_is_capped_exponential() -> None:
    policy = RetryPolicy(
        None,  # type: ignore[arg-type]
        tools=frozenset(),
        predicate=None,
        codes=frozenset(),
        attempts=6,
        base_ms=100,
        max_ms=450,
    )
    assert list(policy.delays()) == [0.1, 0.2, 0.4, 0.45, 0.45]


def test_the_backoff_ends_at_once_when_the_caller_aborts(rt: Any) -> None:
    controller = AbortController()
    first_done = threading.Event()
    attempts = Recorder()

    def body(args: Any, ctx: Any) -> Any:
        attempts.add(1)
        first_done.set()
        raise Busy()

    # A one-minute backoff: the test would time out if the abort did not end it.
    rt.use(policies.retry, tools=("fetch",), codes=("UPSTREAM_BUSY",), base_ms=60_000, max_ms=60_000)
    rt.tools.register(tool("fetch", body))
    future = rt.tools.submit(ToolBatchInput(calls=[call("fetch")], signal=controller.signal))
    assert first_done.wait(WAIT)
    controller.abort()

    result = future.result(WAIT).results[0].result

    assert code_of(result) == "UPSTREAM_BUSY"  # a failure settling after cancellation is kept
    assert attempts.items == [1]


def test_nothing_is_retried_after_the_caller_aborted(rt: Any) -> None:
    controller = AbortController()
    attempts = Recorder()

    def body(args: Any, ctx: Any) -> Any:
        attempts.add(1)
        controller.abort()
        raise Busy()

    rt.use(policies.retry, tools=("fetch",), codes=("UPSTREAM_BUSY",), base_ms=1)
    rt.tools.register(tool("fetch", body))

    result = run_one(rt, call("fetch"), signal=controller.signal)

    assert code_of(result) == "UPSTREAM_BUSY"
    assert attempts.items == [1]


def test_disposing_removes_the_wrapper(rt: Any) -> None:
    attempts = Recorder()
    undo = rt.use(policies.retry, tools=("fetch",), codes=("UPSTREAM_BUSY",), base_ms=1)
    undo()
    rt.tools.register(tool("fetch", flaky([Busy()], attempts)))

    assert code_of(run_one(rt, call("fetch"))) == "UPSTREAM_BUSY"
    assert len(attempts.items) == 1
    assert rt.events.listeners("tools/execute") == ()


@pytest.mark.parametrize(
    ("config", "error", "match"),
    [
        ({"tools": "fetch"}, TypeError, "tools must be a collection"),
        ({"tools": [1]}, TypeError, "non-empty strings"),
        ({"predicate": 3}, TypeError, "predicate must be callable"),
        ({"codes": "TOOL_TIMEOUT"}, TypeError, "codes must be a collection"),
        ({"codes": ("INVALID_ARGS",)}, ValueError, "INVALID_ARGS is never retried .*remove it from codes"),
        ({"attempts": 0}, ValueError, "attempts must be a positive integer"),
        ({"attempts": True}, ValueError, "attempts must be a positive integer"),
        ({"base_ms": -1}, ValueError, "base_ms must be a positive finite number"),
        ({"max_ms": float("inf")}, ValueError, "max_ms must be a positive finite number"),
        ({"base_ms": 500, "max_ms": 100}, ValueError, "at least base_ms"),
        ({"base_ms": 1e13, "max_ms": 1e13}, ValueError, r"base_ms must be at most 1e\+09, got 1e\+13"),
        ({"max_ms": 2e9}, ValueError, r"max_ms must be at most 1e\+09"),
        ({"prepend": 1}, TypeError, "prepend must be True or False"),
        ({"retries": 3}, TypeError, "unknown option"),
    ],
)
def test_bad_config_is_rejected_when_applied(
    rt: Any, config: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        rt.use(policies.retry, **config)
    assert rt.events.listeners("tools/execute") == ()


def test_the_backoffs_are_computed_one_at_a_time_however_many_attempts_are_allowed(rt: Any) -> None:
    # attempts=10**8 used to build the list of all its backoffs before the
    # first retry (seconds, and gigabytes, the call could not be aborted).
    policy = RetryPolicy(rt, tools=frozenset(), predicate=None, codes=frozenset(), attempts=10**8, base_ms=1, max_ms=5)
    delays = policy.delays()
    assert [next(delays) for _ in range(4)] == [0.001, 0.002, 0.004, 0.005]
