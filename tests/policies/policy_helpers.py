"""Shared pieces of the policy tests.

Every wait is bounded by :data:`WAIT`; nothing sleeps to synchronise. The
only timed waits are the behaviour under test (a tool body waiting on its
own signal for a deadline to fire).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from dsh_actors import (
    AbortSignal,
    Agent,
    Cancel,
    Deny,
    ToolBatchInput,
    ToolBatchResult,
    ToolCall,
    ToolDefinition,
    ToolExecutionFailure,
    ToolExecutionSuccess,
    ToolOutput,
    define_tool,
    text,
)
from dsh_actors.events import EVENT_NAMES

#: The bound of every wait in these tests (seconds).
WAIT = 5.0

Result = ToolExecutionSuccess | ToolExecutionFailure


def render_text(args: Any, value: Any) -> list[Any]:
    return [text(value)]


def tool(
    name: str = "echo",
    execute: Callable[[Any, Any], Any] | None = None,
    **options: Any,
) -> ToolDefinition:
    """A string-valued tool taking an optional ``message``; by default it
    echoes the message."""
    return define_tool(
        name=name,
        description=f"The {name} tool.",
        parameters={"message": {"type": "string"}},
        output=ToolOutput(schema={"type": "string"}, render=render_text),
        execute=execute or (lambda args, ctx: args.get("message", "")),
        is_concurrency_safe=lambda args: True,
        **options,
    )


def call(name: str = "echo", id: str = "c1", **arguments: Any) -> ToolCall:
    return ToolCall(id=id, name=name, arguments=dict(arguments))


def run(rt: Any, *calls: ToolCall, agent: Agent | None = None, signal: AbortSignal | None = None) -> ToolBatchResult:
    return rt.tools.execute(ToolBatchInput(calls=list(calls) or [call()], agent=agent, signal=signal))


def run_one(
    rt: Any, the_call: ToolCall | None = None, *, agent: Agent | None = None, signal: AbortSignal | None = None
) -> Result:
    batch = run(rt, the_call or call(), agent=agent, signal=signal)
    assert len(batch.results) == 1
    result: Result = batch.results[0].result
    return result


def code_of(result: Result) -> str | None:
    assert result.is_error, f"expected a failure, got {result!r}"
    info = result.error.info
    return None if info is None else str(info.code)


class Recorder:
    """A thread-safe list."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[Any] = []

    def add(self, item: Any) -> None:
        with self._lock:
            self._items.append(item)

    @property
    def items(self) -> list[Any]:
        with self._lock:
            return list(self._items)


#: Arguments that parse but are not lossless JSON (an integer beyond 64 bits).
NOT_LOSSLESS = '{"n": 1' + "0" * 30 + "}"
#: The ways a call is settled before it dispatches (where a call of a name
#: that runs no tool fails UNKNOWN_TOOL), with the code each ends with (None: none).
SETTLED_BEFORE_DISPATCH: dict[str, str | None] = {
    "bad-json": "INVALID_ARGS",
    "pre-execute-deny": None,  # (a Deny without info: no code)
    "guard-deny": None,
    "cancel": "ABORTED_BEFORE_DISPATCH",
}


def settle_before_dispatch(rt: Any, how: str, name: str, settled: str) -> ToolCall:
    """A call of ``name`` (id ``settled``) that ``how`` settles before it
    dispatches: arguments that are not lossless JSON (an integer beyond 64
    bits: settled as the call begins; text that is not JSON at all is the
    tool's validation's to refuse), a pre-execute ``Deny`` or ``Cancel``, a
    guard's denial."""
    if how == "pre-execute-deny":
        rt.events.on("tools/pre-execute", lambda e, next_: Deny("no") if e.call_id == settled else next_())
    elif how == "cancel":
        rt.events.on("tools/pre-execute", lambda e, next_: Cancel() if e.call_id == settled else next_())
    elif how == "guard-deny":
        rt.tools.guard(lambda e: "outside the sandbox" if e.call_id == settled else None)
    return ToolCall(settled, name, NOT_LOSSLESS if how == "bad-json" else "{}")


def listener_lists(rt: Any) -> dict[str, tuple[Any, ...]]:
    return {name: rt.events.listeners(name) for name in EVENT_NAMES}


def policy_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("dsh-policy") and t.is_alive()]
