"""NativeExecutor.tool_body: an executor may run a tool's body elsewhere
while scheduling, policies, validation and the log stay where they are."""

from __future__ import annotations

from typing import Any

from dsh_actors import ErrorCode, NativeExecutor, ToolBatchInput, ToolCall
from dsh_actors.errors import AbortError

from .helpers import make_tool


class Elsewhere(NativeExecutor):
    def __init__(self, *, abort_before: bool = False) -> None:
        super().__init__()
        self.asked: list[str] = []
        self.abort_before = abort_before

    def tool_body(self, definition: Any) -> Any:
        self.asked.append(definition.name)
        if definition.name != "remote":
            return None
        abort_before = self.abort_before

        async def body(args: Any, ctx: Any) -> Any:
            if abort_before:
                raise AbortError(before_dispatch=True)
            return "ran elsewhere"

        return body


def test_a_replacement_body_runs_and_its_value_is_validated_and_rendered(runtime: Any) -> None:
    runtime.tools.register(make_tool("remote", lambda args, ctx: "ran here"))
    runtime.tools.register(make_tool("local", lambda args, ctx: "ran here"))
    executor = Elsewhere()
    runtime.tools.set_executor(executor)
    batch = runtime.tools.execute(ToolBatchInput(calls=[ToolCall("a", "remote", "{}"), ToolCall("b", "local", "{}")]))
    assert [r.result.value for r in batch.results] == ["ran elsewhere", "ran here"]
    assert batch.results[0].result.content[0].text == "ran elsewhere"
    assert sorted(executor.asked) == ["local", "remote"]


def test_a_replacement_that_never_started_the_work_settles_aborted_before_dispatch(runtime: Any) -> None:
    runtime.tools.register(make_tool("remote", lambda args, ctx: "ran here"))
    runtime.tools.set_executor(Elsewhere(abort_before=True))
    batch = runtime.tools.execute(ToolBatchInput(calls=[ToolCall("a", "remote", "{}")]))
    result = batch.results[0].result
    assert result.is_error and result.error.info is not None
    assert result.error.info.code == ErrorCode.ABORTED_BEFORE_DISPATCH
