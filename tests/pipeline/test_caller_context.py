"""The caller's ``contextvars.Context`` reaches every hook of a call
(docs/reference.md, section 8, "The caller's context"), and
``ToolBatchInput(deps=...)`` reaches every call.

Each hook records what a context variable holds where it runs; the test
sets the variable on its own thread before submitting the batch, and
asserts afterwards that every hook saw that value: sync and async bodies,
a call run inline (a batch of one) and calls run by call actors (a
parallel batch), ``execute``, ``submit``, ``execute_async`` and
``rt.registry.ask``.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import Any

import pytest

from dsh_actors import (
    Accept,
    Agent,
    Ask,
    ToolActivationContext,
    ToolBatchInput,
    ToolCall,
    ToolExecutionInput,
    ToolOutput,
    define_tool,
    text,
)
from dsh_actors.messages import ExecuteBatch
from dsh_actors.model import ModelSelection
from dsh_actors.signals import AbortSignal

from .helpers import WAIT

REQUEST: contextvars.ContextVar[str] = contextvars.ContextVar("request", default="unset")


class Seen:
    """(hook, call id, what REQUEST held there), from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.items: list[tuple[str, str, str]] = []

    def add(self, hook: str, call_id: str) -> None:
        with self._lock:
            self.items.append((hook, call_id, REQUEST.get()))

    def hooks(self) -> set[str]:
        return {hook for hook, _, _ in self.items}

    def values(self) -> set[str]:
        return {value for _, _, value in self.items}


def tool(name: str, seen: Seen, *, is_async: bool) -> Any:
    def render(args: Any, value: Any) -> list[Any]:
        seen.add("render", value)
        return [text(value)]

    def presentation_meta(args: Any, value: Any) -> Any:
        seen.add("presentation_meta", value)
        return None

    def project_content(execution: Any, result: Any) -> None:
        seen.add("project_content", execution.call_id)

    def finalize_content(execution: Any, result: Any) -> None:
        seen.add("finalize_content", execution.call_id)

    def is_concurrency_safe(args: Any) -> bool:
        seen.add("is_concurrency_safe", "?")  # (a classifier sees only the arguments)
        return True

    if is_async:

        async def body(args: Any, ctx: Any) -> str:
            await asyncio.sleep(0)
            seen.add("async body", ctx.call_id)
            return str(ctx.call_id)
    else:

        def body(args: Any, ctx: Any) -> str:  # type: ignore[misc]
            seen.add("sync body", ctx.call_id)
            return str(ctx.call_id)

    return define_tool(
        name=name,
        description="Record the context.",
        parameters={},
        output=ToolOutput(schema={"type": "string"}, render=render, presentation_meta=presentation_meta),
        execute=body,
        is_concurrency_safe=is_concurrency_safe,
        project_content=project_content,
        finalize_content=finalize_content,
    )


def install_hooks(rt: Any, seen: Seen, *, async_listener: bool = False, async_approval: bool = False) -> None:
    if async_listener:

        async def pre(execution: Any, next: Any) -> Any:
            seen.add("async pre-execute", execution.call_id)
            await next()
            return Ask(reason="check")
    else:

        def pre(execution: Any, next: Any) -> Any:  # type: ignore[misc]
            seen.add("pre-execute", execution.call_id)
            next()
            return Ask(reason="check")

    if async_approval:

        async def approve(request: Any) -> str:
            seen.add("async approval", request.call_id)
            return "allowed-once"
    else:

        def approve(request: Any) -> str:  # type: ignore[misc]
            seen.add("approval", request.call_id)
            return "allowed-once"

    def guard(execution: Any) -> None:
        seen.add("guard", execution.call_id)

    def wrapper(execution: Any, next: Any) -> Any:
        seen.add("wrapper", execution.call_id)
        return next()

    def post(execution: Any, result: Any, next: Any) -> Any:
        seen.add("post-execute", execution.call_id)
        next()
        return Accept()

    def observe(execution: Any, result: Any) -> None:
        seen.add("tools/result", execution.call_id)

    rt.events.on("tools/pre-execute", pre)
    rt.approvals.set(approve)
    rt.tools.guard(guard)
    rt.events.on("tools/post-execute", post)
    rt.events.on("tools/result", observe)
    if not async_listener:  # (a wrapper makes an async body wait on a call actor; tested both ways below)
        rt.events.on("tools/execute", wrapper)


EVERY_HOOK = {
    "is_concurrency_safe",
    "pre-execute",
    "approval",
    "guard",
    "wrapper",
    "render",
    "presentation_meta",
    "project_content",
    "post-execute",
    "finalize_content",
    "tools/result",
}


def calls(n: int, name: str) -> list[ToolCall]:
    return [ToolCall(f"c{i}", name, "{}") for i in range(n)]


@pytest.mark.parametrize("is_async", [False, True], ids=["sync body", "async body"])
@pytest.mark.parametrize("n", [1, 4], ids=["inline", "pooled"])
def test_every_hook_of_a_batch_runs_in_the_context_current_at_execute(rt: Any, is_async: bool, n: int) -> None:
    seen = Seen()
    rt.tools.register(tool("probe", seen, is_async=is_async))
    install_hooks(rt, seen)
    agent = Agent("main")
    token = REQUEST.set("req-42")
    try:
        result = rt.tools.execute(ToolBatchInput(calls=calls(n, "probe"), agent=agent))
    finally:
        REQUEST.reset(token)
    assert all(not r.result.is_error for r in result.results), result
    assert seen.hooks() == EVERY_HOOK | {"async body" if is_async else "sync body"}
    assert seen.values() == {"req-42"}, seen.items


@pytest.mark.parametrize("is_async", [False, True], ids=["sync body", "async body"])
def test_async_listeners_and_approval_services_run_in_the_callers_context(rt: Any, is_async: bool) -> None:
    seen = Seen()
    rt.tools.register(tool("probe", seen, is_async=is_async))
    install_hooks(rt, seen, async_listener=True, async_approval=True)
    token = REQUEST.set("req-async-hooks")
    try:
        result = rt.tools.execute(ToolBatchInput(calls=calls(3, "probe"), agent=Agent("main")))
    finally:
        REQUEST.reset(token)
    assert all(not r.result.is_error for r in result.results), result
    assert {"async pre-execute", "async approval"} <= seen.hooks()
    assert seen.values() == {"req-async-hooks"}, seen.items


@pytest.mark.parametrize("is_async", [False, True], ids=["sync body", "async body"])
def test_execute_async_runs_the_hooks_in_the_awaiting_tasks_context(rt: Any, is_async: bool) -> None:
    seen = Seen()
    rt.tools.register(tool("probe", seen, is_async=is_async))
    install_hooks(rt, seen)

    async def main() -> Any:
        REQUEST.set("req-from-a-task")
        return await rt.tools.execute_async(ToolBatchInput(calls=calls(3, "probe"), agent=Agent("main")))

    result = asyncio.run(main())
    assert all(not r.result.is_error for r in result.results), result
    assert seen.values() == {"req-from-a-task"}, seen.items


def test_submit_and_a_registry_ask_capture_the_context_where_they_are_called(rt: Any) -> None:
    seen = Seen()
    rt.tools.register(tool("probe", seen, is_async=False))
    token = REQUEST.set("req-submit")
    try:
        future = rt.tools.submit(ToolBatchInput(calls=calls(2, "probe")))
        REQUEST.set("changed after submit")  # the batch keeps what was current at submit
        future.result(WAIT)
        REQUEST.set("req-ask")
        rt.registry.ask(ExecuteBatch(ToolBatchInput(calls=[ToolCall("k", "probe", "{}")])), timeout=WAIT)
    finally:
        REQUEST.reset(token)
    by_call = {call_id: value for hook, call_id, value in seen.items if hook == "sync body"}
    assert by_call == {"c0": "req-submit", "c1": "req-submit", "k": "req-ask"}


def test_an_explicit_batch_context_wins_over_the_current_one(rt: Any) -> None:
    seen = Seen()
    rt.tools.register(tool("probe", seen, is_async=False))
    elsewhere = contextvars.Context()
    elsewhere.run(REQUEST.set, "req-explicit")
    rt.tools.execute(ToolBatchInput(calls=calls(1, "probe"), context=elsewhere))
    assert seen.values() == {"req-explicit"}


def test_each_call_has_its_own_copy_shared_by_its_hooks(rt: Any) -> None:
    # A value a pre-execute listener sets is seen by the same call's body,
    # never by the other calls of the batch or by the caller.
    seen = Seen()
    rt.tools.register(tool("probe", seen, is_async=False))

    def tag(execution: Any, next: Any) -> Any:
        if execution.call_id == "c1":
            REQUEST.set("tagged by c1's listener")
        return next()

    rt.events.on("tools/pre-execute", tag)
    token = REQUEST.set("req")
    try:
        rt.tools.execute(ToolBatchInput(calls=calls(3, "probe")))
        assert REQUEST.get() == "req"
    finally:
        REQUEST.reset(token)
    by_call = {call_id: value for hook, call_id, value in seen.items if hook == "sync body"}
    assert by_call == {"c0": "req", "c1": "tagged by c1's listener", "c2": "req"}


def test_a_batch_submitted_from_a_body_inherits_the_calls_context_and_deps(rt: Any) -> None:
    seen = Seen()
    rt.tools.register(tool("inner", seen, is_async=False))
    inner_deps: list[Any] = []
    rt.events.on("tools/result", lambda execution, result: inner_deps.append((execution.name, execution.deps)))

    def outer(args: Any, ctx: Any) -> str:
        REQUEST.set(REQUEST.get() + "/outer")
        nested = rt.tools.execute(ToolBatchInput(calls=calls(2, "inner")))
        own = rt.tools.execute(ToolBatchInput(calls=[ToolCall("own", "inner", "{}")], deps="own deps"))
        assert not nested.results[0].result.is_error and not own.results[0].result.is_error
        return "ok"

    rt.tools.register(
        define_tool(
            name="outer",
            description="Run a nested batch.",
            parameters={},
            output=ToolOutput(schema={"type": "string"}, render=lambda a, v: [text(v)]),
            execute=outer,
        )
    )
    token = REQUEST.set("req")
    try:
        result = rt.tools.execute(ToolBatchInput(calls=[ToolCall("o", "outer", "{}")], deps={"db": "pool"}))
    finally:
        REQUEST.reset(token)
    assert not result.results[0].result.is_error, result
    bodies = {call_id: value for hook, call_id, value in seen.items if hook == "sync body"}
    assert bodies == {"c0": "req/outer", "c1": "req/outer", "own": "req/outer"}
    assert sorted(inner_deps, key=repr) == sorted(
        [("inner", {"db": "pool"}), ("inner", {"db": "pool"}), ("inner", "own deps"), ("outer", {"db": "pool"})],
        key=repr,
    )


def test_deps_reach_the_body_and_the_listeners_as_given(rt: Any) -> None:
    class Pool:  # any object: not frozen, not copied
        pass

    pool = Pool()
    got: list[Any] = []

    def body(args: Any, ctx: Any) -> str:
        got.append(("body", ctx.deps))
        return "ok"

    rt.tools.register(
        define_tool(
            name="uses_db",
            description="Use the pool.",
            parameters={},
            output=ToolOutput(schema={"type": "string"}, render=lambda a, v: [text(v)]),
            execute=body,
        )
    )
    rt.events.on("tools/pre-execute", lambda execution, next: (got.append(("pre", execution.deps)), next())[1])
    rt.events.on("tools/result", lambda execution, result: got.append(("result", execution.deps)))
    rt.tools.execute(ToolBatchInput(calls=[ToolCall("c", "uses_db", "{}")], deps=pool))
    assert got == [("pre", pool), ("body", pool), ("result", pool)]
    assert all(dep is pool for _, dep in got)
    rt.tools.execute(ToolBatchInput(calls=[ToolCall("d", "uses_db", "{}")]))
    assert got[-2:] == [("body", None), ("result", None)]


def test_dispatch_runs_in_the_current_context_with_the_enclosing_deps(rt: Any) -> None:
    seen = Seen()
    rt.tools.register(tool("probe", seen, is_async=False))
    deps: list[Any] = []
    rt.events.on("tools/result", lambda execution, result: deps.append(execution.deps))
    token = REQUEST.set("req-dispatch")
    try:
        rt.tools.dispatch(ToolExecutionInput(call_id="d1", name="probe", arguments={}, signal=AbortSignal()))
        rt.tools.dispatch(
            ToolExecutionInput(call_id="d2", name="probe", arguments={}, signal=AbortSignal(), deps="given")
        )
    finally:
        REQUEST.reset(token)
    assert seen.values() == {"req-dispatch"}
    assert deps == [None, "given"]


@pytest.mark.parametrize("use_async", [False, True], ids=["resolve", "resolve_async"])
def test_conditions_run_in_the_resolvers_context(rt: Any, use_async: bool) -> None:
    seen: list[str] = []

    def sync_when(context: Any) -> bool:
        seen.append(REQUEST.get())
        return True

    async def async_when(context: Any) -> bool:
        seen.append(REQUEST.get())
        return True

    probe = Seen()
    rt.tools.register(tool("a", probe, is_async=False), when=sync_when)
    rt.tools.register(tool("b", probe, is_async=False), when=async_when)
    context = ToolActivationContext(agent=None, model_selection=ModelSelection("p", "m"), signal=AbortSignal())
    if use_async:

        async def main() -> Any:
            REQUEST.set("req-resolve")
            return await rt.tools.resolve_async(context)

        tool_set = asyncio.run(main())
    else:
        token = REQUEST.set("req-resolve")
        try:
            tool_set = rt.tools.resolve(context)
        finally:
            REQUEST.reset(token)
    tool_set.dispose()
    assert seen == ["req-resolve", "req-resolve"]
