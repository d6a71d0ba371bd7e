"""Small builders for the registry tests. Nothing here sleeps."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any

from dsh_actors.definition import ToolDefinition, ToolOutput, define_tool
from dsh_actors.errors import RegistrationError
from dsh_actors.execution import ToolExecution
from dsh_actors.model import (
    Agent,
    ModelSelection,
    ToolActivationContext,
    ToolBatchInput,
    ToolBatchResult,
    ToolCall,
    ToolCallResult,
    ToolExecutionSuccess,
    text,
)
from dsh_actors.signals import AbortController, AbortSignal

#: Seconds: the bound of every wait in these tests. A correct run never reaches it.
WAIT = 10.0

TEXT = ToolOutput(schema={"type": "string"}, render=lambda args, value: [text(value)])


def tool(name: str, *, description: str | None = None, **options: Any) -> ToolDefinition:
    """A ``define_tool`` tool with one optional string parameter."""
    return define_tool(
        name=name,
        description=description if description is not None else f"the {name} tool",
        parameters={"message": {"type": "string"}},
        output=TEXT,
        execute=lambda args, ctx: name,
        **options,
    )


def raw_tool(name: str, **fields: Any) -> ToolDefinition:
    """A raw (MCP-style) definition."""
    values: dict[str, Any] = {
        "name": name,
        "description": f"the raw {name} tool",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        "output": TEXT,
        "execute": lambda args, ctx: name,
    }
    values.update(fields)
    return ToolDefinition(**values)


def names(mapping_or_list: Any) -> list[str]:
    if isinstance(mapping_or_list, list):
        return [d.name if not isinstance(d, dict) else d["name"] for d in mapping_or_list]
    return list(mapping_or_list)


def execution(name: str, agent: Agent | None = None, arguments: Any = None) -> ToolExecution:
    return ToolExecution(call_id="c1", name=name, arguments=arguments or {}, signal=AbortSignal(), agent=agent)


def activation(agent: Agent | None, signal: AbortSignal | None = None) -> ToolActivationContext:
    return ToolActivationContext(
        agent=agent,
        model_selection=ModelSelection(provider="test", model="m1"),
        signal=signal if signal is not None else AbortController().signal,
    )


def batch(agent: Agent | None = None, *calls: ToolCall) -> ToolBatchInput:
    return ToolBatchInput(calls=calls or (ToolCall(id="c1", name="echo", arguments="{}"),), agent=agent)


def labelled(label: str) -> ToolBatchResult:
    """A batch result that says which executor produced it."""
    return ToolBatchResult(
        results=(ToolCallResult(call_id=label, result=ToolExecutionSuccess(value=label, content=(text(label),))),)
    )


class RecordingExecutor:
    """A test double: records batches and binds, answers ``labelled(label)``.

    ``blocking=True`` offers only a blocking ``execute`` (no ``submit``).
    """

    sections: tuple[Any, ...] = ()

    def __init__(self, label: str) -> None:
        self.label = label
        self.lock = threading.Lock()
        self.batches: list[ToolBatchInput] = []
        self.bound: list[Any] = []
        self.threads: list[str] = []

    def bind(self, runtime: Any) -> None:
        self.bound.append(runtime)

    def describe(self, tools: Any) -> Any:
        return [t.name for t in tools]

    def submit(self, batch: ToolBatchInput) -> Future[ToolBatchResult]:
        with self.lock:
            self.batches.append(batch)
            self.threads.append(threading.current_thread().name)
        future: Future[ToolBatchResult] = Future()
        future.set_result(labelled(self.label))
        return future


class BlockingExecutor:
    """Only a blocking ``execute`` (runs on the runtime's workers)."""

    def __init__(self, label: str, body: Callable[[ToolBatchInput], ToolBatchResult] | None = None) -> None:
        self.label = label
        self.body = body
        self.threads: list[str] = []

    def describe(self, tools: Any) -> Any:
        return [t.name for t in tools]

    def execute(self, batch: ToolBatchInput) -> ToolBatchResult:
        self.threads.append(threading.current_thread().name)
        if self.body is not None:
            return self.body(batch)
        return labelled(self.label)


class ChangeCounter:
    """A ``tools/change`` listener that counts (runs on scope actor threads)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0

    def __call__(self) -> None:
        with self.lock:
            self.count += 1


def round_trip(rt: Any) -> None:
    """Wait until the registry actor handled everything sent to it so far."""
    from dsh_actors.messages import Retract
    from dsh_actors.registry import Contribution

    nowhere = Contribution(kind="guard", scope=Agent("nowhere"), value=None, seq=0)
    assert rt.registry.ask(Retract(contribution=nowhere), timeout=WAIT) is False


class Veto(Exception):
    pass


@contextmanager
def change_in_flight(rt: Any, change: Callable[[], object], *, veto: bool = True) -> Iterator[list[BaseException]]:
    """Run ``change`` on a helper thread and hold it inside its first
    ``tools/change`` listener (published, not yet accepted) for the body of
    the block; then the listener raises (``veto``) or returns. Later changes
    pass the listener. Yields the errors ``change`` raised (once the block
    exits)."""
    entered, release = threading.Event(), threading.Event()
    armed = [True]

    def listener() -> None:
        if not armed:
            return
        armed.clear()
        entered.set()
        assert release.wait(WAIT)
        if veto:
            raise Veto("vetoed")

    errors: list[BaseException] = []

    def run() -> None:
        try:
            change()
        except BaseException as exc:  # noqa: BLE001 - checked by the test
            errors.append(exc)

    off = rt.events.on("tools/change", listener)
    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert entered.wait(WAIT)
        yield errors
    finally:
        release.set()
        thread.join(WAIT)
        off()
    assert not thread.is_alive()


def vetoed(errors: list[BaseException]) -> bool:
    return len(errors) == 1 and isinstance(errors[0], RegistrationError) and isinstance(errors[0].__cause__, Veto)
