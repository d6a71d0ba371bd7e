"""Shared pieces of the pipeline conformance tests (SPEC section 5).

Every test runs batches of one call through ``rt.tools.execute`` and
observes the trip with listeners that write into a :class:`Journal`.
Listeners run on the runtime's threads (pre/post-execute on the executor
thread, wrappers and bodies on a call actor's thread), so the journal is
locked, and anything a listener wants to assert is recorded and asserted
afterwards on the test thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from dsh_actors import (
    AbortSignal,
    Agent,
    TextBlock,
    ToolBatchInput,
    ToolBatchResult,
    ToolCall,
    ToolDefinition,
    ToolOutput,
    UserMessage,
    define_tool,
    text,
)
from dsh_actors.model import ToolExecutionResult

#: The bound of every wait in these tests (seconds). Nothing sleeps.
WAIT = 5.0

MESSAGE = {"message": {"type": "string", "required": True}}
HI = '{"message": "hi"}'


def render_text(args: Any, value: Any) -> list[TextBlock]:
    return [text(value)]


def echo_body(args: Any, ctx: Any) -> Any:
    return args["message"]


def echo_tool(
    name: str = "echo",
    *,
    execute: Callable[[Any, Any], Any] = echo_body,
    schema: Any = None,
    render: Callable[[Any, Any], Any] = render_text,
    presentation_meta: Callable[[Any, Any], Any] | None = None,
    parameters: Any = None,
    **options: Any,
) -> ToolDefinition:
    """The SPEC section 1 ``echo`` tool, with any part replaceable."""
    return define_tool(
        name=name,
        description="Repeat a message.",
        parameters=MESSAGE if parameters is None else parameters,
        output=ToolOutput(
            schema={"type": "string"} if schema is None else schema,
            render=render,
            presentation_meta=presentation_meta,
        ),
        execute=execute,
        is_concurrency_safe=lambda args: True,
        **options,
    )


def call(name: str = "echo", arguments: Any = HI, id: str = "c1") -> ToolCall:
    return ToolCall(id=id, name=name, arguments=arguments)


def run(
    rt: Any,
    *calls: ToolCall,
    agent: Agent | None = None,
    signal: AbortSignal | None = None,
) -> ToolBatchResult:
    """Run one batch (default: one ``echo`` call saying "hi")."""
    return rt.tools.execute(ToolBatchInput(calls=list(calls) or [call()], agent=agent, signal=signal))


def run_one(
    rt: Any,
    the_call: ToolCall | None = None,
    *,
    agent: Agent | None = None,
    signal: AbortSignal | None = None,
) -> ToolExecutionResult:
    """Run a batch of exactly one call and return that call's result."""
    batch = run(rt, the_call or call(), agent=agent, signal=signal)
    assert len(batch.results) == 1
    assert batch.results[0].call_id == (the_call or call()).id
    return batch.results[0].result


def code_of(result: ToolExecutionResult) -> str | None:
    """The failure's structured code (``error.info.code``), if any."""
    assert result.is_error, f"expected a failure, got {result!r}"
    info = result.error.info
    return None if info is None else str(info.code)


def error_content(message: str) -> tuple[TextBlock, ...]:
    return (TextBlock("Error: " + message),)


def assert_failure(result: ToolExecutionResult, message: str, code: str | None = None) -> None:
    """A failure with exactly ``message`` and the SPEC content envelope."""
    assert result.is_error, f"expected a failure, got {result!r}"
    assert result.value is None
    assert result.error.message == message
    assert result.content == error_content(message)
    if code is not None:
        assert code_of(result) == code


def context(label: str) -> UserMessage:
    return UserMessage(content=[text(label)], source="tests")


class Journal:
    """An ordered, thread-safe record of what happened."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: list[Any] = []

    def add(self, entry: Any) -> None:
        with self._lock:
            self._entries.append(entry)

    @property
    def entries(self) -> list[Any]:
        with self._lock:
            return list(self._entries)

    def count(self, entry: Any) -> int:
        return self.entries.count(entry)

    def __contains__(self, entry: Any) -> bool:
        return entry in self.entries

    def __len__(self) -> int:
        return len(self.entries)

    def __repr__(self) -> str:
        return f"Journal({self.entries!r})"


class Trip:
    """Listeners on every phase of the trip, recording into one journal:
    ``"pre"``, ``"execute"``, ``"body"`` (when the tool uses
    :meth:`body`), ``"post"`` and ``("result", call_id)``.

    ``results`` keeps each ``tools/result`` pair ``(execution, result)``.
    """

    def __init__(self, rt: Any) -> None:
        self.journal = Journal()
        self.results: list[tuple[Any, ToolExecutionResult]] = []
        self.post_results: list[ToolExecutionResult] = []
        self._lock = threading.Lock()
        self.disposers = [
            rt.events.on("tools/pre-execute", self._pre),
            rt.events.on("tools/execute", self._execute),
            rt.events.on("tools/post-execute", self._post),
            rt.events.on("tools/result", self._result),
        ]

    def _pre(self, execution: Any, next_: Callable[[], Any]) -> Any:
        self.journal.add("pre")
        return next_()

    def _execute(self, execution: Any, next_: Callable[[], Any]) -> Any:
        self.journal.add("execute")
        return next_()

    def _post(self, execution: Any, result: Any, next_: Callable[[], Any]) -> Any:
        self.journal.add("post")
        with self._lock:
            self.post_results.append(result)
        return next_()

    def _result(self, execution: Any, result: Any) -> None:
        self.journal.add(("result", execution.call_id))
        with self._lock:
            self.results.append((execution, result))

    def body(self, args: Any, ctx: Any) -> Any:
        self.journal.add("body")
        return args["message"]

    @property
    def phases(self) -> list[Any]:
        """What ran, without the final ``tools/result`` notifications."""
        return [e for e in self.journal.entries if not isinstance(e, tuple)]

    def dispose(self) -> None:
        for dispose in self.disposers:
            dispose()


def first(items: Iterable[Any]) -> Any:
    return next(iter(items))
