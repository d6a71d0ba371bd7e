"""``ctx.report_progress`` publishes ``tools/progress`` (scope-filtered,
in order, never after the call's ``tools/result``; a throwing listener is
contained)."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from typing import Any

import pytest

from dsh_actors import (
    Agent,
    InvalidStateError,
    ToolBatchInput,
    ToolCall,
    ToolOutput,
    ToolProgress,
    UserMessage,
    define_tool,
    text,
)

from .helpers import WAIT


def tool(name: str, execute: Any) -> Any:
    return define_tool(
        name=name,
        description="Report progress.",
        parameters={},
        output=ToolOutput(schema={"type": "string"}, render=lambda a, v: [text(v)]),
        execute=execute,
        is_concurrency_safe=lambda args: True,
    )


def steps_body(args: Any, ctx: Any) -> str:
    for i in range(1, 4):
        ctx.report_progress(i, total=3, message=f"step {i}")
    return "done"


async def async_steps_body(args: Any, ctx: Any) -> str:
    for i in range(1, 4):
        await asyncio.sleep(0)
        ctx.report_progress(i, total=3, message=f"step {i}")
    return "done"


class Journal:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: list[tuple[str, str, Any]] = []

    def add(self, kind: str, call_id: str, what: Any) -> None:
        with self.lock:
            self.items.append((kind, call_id, what))


@pytest.mark.parametrize("body", [steps_body, async_steps_body], ids=["sync", "async"])
def test_progress_events_arrive_in_order_before_the_result(rt: Any, body: Any) -> None:
    journal = Journal()
    rt.tools.register(tool("steps", body))
    rt.events.on("tools/progress", lambda execution, progress: journal.add("progress", execution.call_id, progress))
    rt.events.on("tools/result", lambda execution, result: journal.add("result", execution.call_id, None))
    rt.tools.execute(ToolBatchInput(calls=[ToolCall(f"c{i}", "steps", "{}") for i in range(3)]))
    for call_id in ("c0", "c1", "c2"):
        mine = [(kind, what) for kind, cid, what in journal.items if cid == call_id]
        assert mine == [
            ("progress", ToolProgress(1, 3, "step 1")),
            ("progress", ToolProgress(2, 3, "step 2")),
            ("progress", ToolProgress(3, 3, "step 3")),
            ("result", None),
        ]


def test_the_progress_record_is_frozen() -> None:
    record = ToolProgress(0.5)
    assert record.total is None and record.message is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.progress = 1  # type: ignore[misc]


def test_progress_listeners_are_scope_filtered(rt: Any) -> None:
    main, other = Agent("main"), Agent("other")
    seen: list[str] = []
    rt.tools.register(tool("steps", steps_body))
    rt.events.on("tools/progress", lambda execution, progress: seen.append(execution.agent.id), scope=main)
    rt.tools.execute(ToolBatchInput(calls=[ToolCall("a", "steps", "{}")], agent=main))
    rt.tools.execute(ToolBatchInput(calls=[ToolCall("b", "steps", "{}")], agent=other))
    assert seen == ["main", "main", "main"]


def test_a_throwing_progress_listener_is_contained(rt: Any) -> None:
    seen: list[Any] = []

    def bad(execution: Any, progress: Any) -> None:
        raise RuntimeError("listener bug")

    rt.tools.register(tool("steps", steps_body))
    rt.events.on("tools/progress", bad)
    rt.events.on("tools/progress", lambda execution, progress: seen.append(progress.progress))
    result = rt.tools.execute(ToolBatchInput(calls=[ToolCall("a", "steps", "{}")]))
    assert not result.results[0].result.is_error
    assert seen == [1, 2, 3]


kept_contexts: list[Any] = []


def leaky_body(args: Any, ctx: Any) -> str:
    kept_contexts.append(ctx)
    return "done"


async def async_leaky_body(args: Any, ctx: Any) -> str:
    kept_contexts.append(ctx)
    return "done"


@pytest.mark.parametrize("body", [leaky_body, async_leaky_body], ids=["sync", "async"])
def test_a_context_used_after_the_body_returned_raises_saying_the_call_has_settled(rt: Any, body: Any) -> None:
    # A thread the body started and did not wait for: its report, deferred
    # context or conclude_turn would reach nobody; it is told so, never dropped silently.
    kept_contexts.clear()
    late: list[Any] = []
    rt.tools.register(tool("leaky", body))
    rt.events.on("tools/progress", lambda execution, progress: late.append(progress))
    batch = rt.tools.execute(ToolBatchInput(calls=[ToolCall("a", "leaky", "{}")]))
    ctx = kept_contexts.pop()
    for method, call in (
        ("report_progress", lambda: ctx.report_progress(1, total=1, message="finished")),
        ("defer_context", lambda: ctx.defer_context(UserMessage([text("job finished")]))),
        ("conclude_turn", lambda: ctx.conclude_turn()),
    ):
        with pytest.raises(InvalidStateError) as caught:
            call()
        message = str(caught.value)
        assert message.startswith(f'ctx.{method}() came after the body of tool "leaky" (call "a") returned')
        assert "the call has settled" in message and "before the body returns" in message
        assert "thread.join()" in message
    assert late == [] and batch.additional_contexts == ()
    assert not batch.results[0].result.concludes_turn


def test_a_report_from_a_thread_the_body_waits_for_is_delivered_before_the_result(rt: Any) -> None:
    journal = Journal()

    def body(args: Any, ctx: Any) -> str:
        worker = threading.Thread(target=lambda: ctx.report_progress(7, message="from a helper thread"))
        worker.start()
        worker.join(WAIT)
        return "done"

    rt.tools.register(tool("helper", body))
    rt.events.on("tools/progress", lambda execution, progress: journal.add("progress", "a", progress.message))
    rt.events.on("tools/result", lambda execution, result: journal.add("result", "a", None))
    rt.tools.execute(ToolBatchInput(calls=[ToolCall("a", "helper", "{}")]))
    assert journal.items == [("progress", "a", "from a helper thread"), ("result", "a", None)]


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((True,), TypeError),
        (("1",), TypeError),
        ((float("nan"),), ValueError),
        ((1, float("inf")), ValueError),
        ((1, None, 3), TypeError),
        ((10**400,), ValueError),  # (no JSON number holds it, no float either)
        ((1, 2**64), ValueError),
        ((1, None, "half \ud800"), ValueError),  # a lone surrogate: a listener writing JSON could not
    ],
)
def test_bad_progress_values_are_refused_to_the_body(rt: Any, args: tuple[Any, ...], error: type) -> None:
    def body(call_args: Any, ctx: Any) -> str:
        ctx.report_progress(*args)
        return "done"

    rt.tools.register(tool("bad", body))
    outcome = rt.tools.execute(ToolBatchInput(calls=[ToolCall("a", "bad", "{}")])).results[0].result
    # A DshError that is also the builtin (so `except TypeError` still works).
    assert outcome.is_error and isinstance(outcome.error.exception, error)
    assert outcome.error.info is not None and outcome.error.info.code == "INVALID_USE"


def test_an_int_too_long_for_json_is_named_by_its_size(rt: Any) -> None:
    # (Its digits would swamp the message: the one rule of errors.shown_value.)
    def body(call_args: Any, ctx: Any) -> str:
        ctx.report_progress(10**400)
        return "done"

    rt.tools.register(tool("bad", body))
    outcome = rt.tools.execute(ToolBatchInput(calls=[ToolCall("a", "bad", "{}")])).results[0].result
    assert outcome.is_error
    assert "(got an int of 1329 bits)" in str(outcome.error.exception)
