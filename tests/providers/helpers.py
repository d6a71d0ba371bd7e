"""What the provider tests share: a tool kit with one tool per outcome, the
error cases, and validation of our output against the SDKs' param types.

Validation: the SDKs' request params are TypedDicts, which pydantic
validates (``TypeAdapter``). Their ``Iterable[...]`` fields validate lazily,
so :func:`validate` consumes every iterator, and it compares the validated
value with the input, because a TypedDict silently drops keys it does not
declare: a key the provider does not know fails the test too.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any, Final

from pydantic import TypeAdapter

import policies
from dsh_actors import (
    AbortController,
    Agent,
    Ask,
    Block,
    Deny,
    ImageBlock,
    ReasoningBlock,
    ToolBatchInput,
    ToolBatchResult,
    ToolCall,
    ToolOutput,
    ToolRuntime,
    UserMessage,
    define_tool,
    text,
)

GUARD: Final = 10.0
"""Seconds: a deadlock guard for every wait. A correct run never reaches it."""

PNG: Final = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
"""A 1x1 PNG, base64."""

_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


def _consumed(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _consumed(item) for key, item in value.items()}
    if isinstance(value, (str, bytes, int, float, bool, type(None))):
        return value
    if isinstance(value, Iterable):
        return [_consumed(item) for item in value]
    return value


def validate(param_type: Any, value: Any, *, exact: bool = True) -> None:
    """``value`` is a valid ``param_type`` (an SDK request param type) and,
    when ``exact``, carries no key the type does not declare (a whole
    request holds the SDK's own dump of the assistant turn, which has
    response-only keys: validate those with ``exact=False``)."""
    adapter = _ADAPTERS.get(param_type)
    if adapter is None:
        adapter = _ADAPTERS[param_type] = TypeAdapter(param_type)
    validated = _consumed(adapter.validate_python(value))
    if exact:
        assert validated == _consumed(value), f"keys the SDK type does not declare: {value} -> {validated}"


def validate_all(param_type: Any, values: Iterable[Any]) -> None:
    for value in values:
        validate(param_type, value)


# -- the tool kit ---------------------------------------------------------------


def _text_output(**more: Any) -> ToolOutput:
    return ToolOutput(schema={"type": "string"}, render=lambda args, value: [text(value)], **more)


def _safe(args: Any) -> bool:
    return True


def kit(rt: ToolRuntime) -> None:
    """Register the tools and policies the provider tests call:

    ``read_file(path)`` text, parallel; ``screenshot()`` a caption and a PNG;
    ``diagram()`` an SVG (no provider takes it); ``think()`` a reasoning
    block; ``note(text)`` defers a context (text and a PNG); ``finish()``
    concludes the turn; ``fail()`` raises; ``slow()`` (timeout 30 ms) waits
    for its signal; ``wrong_output()`` breaks its output schema;
    ``forbidden()`` is denied by a pre-execute listener; ``needs_ok()`` asks
    and the approval service rejects; ``redacted()`` is blocked after it ran.
    """

    def tool(name: str, execute: Callable[[Any, Any], Any], *, output: ToolOutput | None = None,
             parameters: dict[str, Any] | None = None, **more: Any) -> None:  # fmt: skip
        rt.tools.register(define_tool(
            name=name, description=f"The {name} tool.", parameters=parameters or {},
            output=output or _text_output(), execute=execute, is_concurrency_safe=_safe, **more,
        ))  # fmt: skip

    tool("read_file", lambda args, ctx: f"contents of {args['path']}",
         parameters={"path": {"type": "string", "required": True}})  # fmt: skip
    tool("screenshot", lambda args, ctx: "the login page",
         output=ToolOutput(schema={"type": "string"}, render=lambda a, v: [text(v), ImageBlock(PNG, "image/png")]))  # fmt: skip
    tool("diagram", lambda args, ctx: "<svg/>",
         output=ToolOutput(schema={"type": "string"}, render=lambda a, v: [ImageBlock("PHN2Zy8+", "image/svg+xml")]))  # fmt: skip
    tool("think", lambda args, ctx: "hmm",
         output=ToolOutput(schema={"type": "string"}, render=lambda a, v: [ReasoningBlock(v), text("decided")]))  # fmt: skip

    def note(args: Any, ctx: Any) -> str:
        ctx.defer_context(UserMessage([text(args["text"]), ImageBlock(PNG, "image/png")], source="note"))
        return "noted"

    tool("note", note, parameters={"text": {"type": "string", "required": True}})

    def finish(args: Any, ctx: Any) -> str:
        ctx.conclude_turn()
        return "all done"

    tool("finish", finish)

    def fail(args: Any, ctx: Any) -> str:
        raise RuntimeError("disk full")

    tool("fail", fail)

    def slow(args: Any, ctx: Any) -> str:
        ctx.signal.wait(GUARD)
        return "late"

    tool("slow", slow, timeout_ms=30)
    tool("wrong_output", lambda args, ctx: 42)
    tool("forbidden", lambda args, ctx: "ran")
    tool("needs_ok", lambda args, ctx: "ran")
    tool("redacted", lambda args, ctx: "the secret")

    def pre(execution: Any, next_: Callable[[], Any]) -> Any:
        if execution.name == "forbidden":
            return Deny("forbidden is not allowed in this repository")
        if execution.name == "needs_ok":
            return Ask("needs_ok changes things")
        return next_()

    def post(execution: Any, result: Any, next_: Callable[[], Any]) -> Any:
        if execution.name == "redacted":
            return Block([text("The result held a secret and was withheld.")])
        return next_()

    rt.events.on("tools/pre-execute", pre)
    rt.events.on("tools/post-execute", post)
    rt.approvals.set(lambda request: "rejected")
    rt.use(policies.timeout)


#: (call, error code, start of the model-facing text): one per error kind.
ERROR_CASES: Final = (
    (ToolCall("e1", "nope", "{}"), "UNKNOWN_TOOL", 'Error: unknown tool "nope"'),
    (ToolCall("e2", "read_file", "{not json"), "INVALID_ARGS", "Error: invalid arguments"),
    (ToolCall("e3", "read_file", '{"path": 3}'), "INVALID_ARGS", "Error: invalid arguments"),
    (ToolCall("e4", "fail", "{}"), None, "Error: disk full"),
    (ToolCall("e5", "slow", "{}"), "TOOL_TIMEOUT", "Error: tool call timed out after 30ms"),
    (ToolCall("e6", "wrong_output", "{}"), "INVALID_TOOL_OUTPUT", 'Error: tool "wrong_output" returned invalid output'),
    (ToolCall("e7", "forbidden", "{}"), None, "Error: forbidden is not allowed in this repository"),
    (ToolCall("e8", "needs_ok", "{}"), None, 'Error: the user rejected tool "needs_ok"'),
    (ToolCall("e9", "redacted", "{}"), None, "The result held a secret and was withheld."),
)
ERROR_IDS: Final = ("unknown tool", "not json", "schema", "tool raised", "timeout", "bad output",
                    "denied", "approval rejected", "blocked")  # fmt: skip


def run(rt: ToolRuntime, calls: Iterable[ToolCall], agent: Agent | None = None) -> ToolBatchResult:
    return rt.tools.execute(ToolBatchInput(calls=tuple(calls), agent=agent or Agent("main")))


def aborted_batch(rt: ToolRuntime) -> ToolBatchResult:
    """A batch of three calls aborted while its first (exclusive) call runs:
    that one settles ``ABORTED``, the two after it ``ABORTED_BEFORE_DISPATCH``."""
    started = threading.Event()

    def blocker(args: Any, ctx: Any) -> str:
        started.set()
        ctx.signal.wait(GUARD)
        return "finished"

    rt.tools.register(define_tool(name="blocker", description="Blocks.", parameters={},
                                  output=_text_output(), execute=blocker))  # fmt: skip
    controller = AbortController()
    future = rt.tools.submit(ToolBatchInput(
        calls=(ToolCall("a1", "blocker", "{}"), ToolCall("a2", "read_file", '{"path": "x"}'),
               ToolCall("a3", "read_file", '{"path": "y"}')),
        signal=controller.signal, agent=Agent("main"),
    ))  # fmt: skip
    assert started.wait(GUARD)
    controller.abort("the user pressed stop")
    return future.result(GUARD)
