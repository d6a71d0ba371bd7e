"""A program's sub-calls run in the ``run_code`` call's context (its
contextvars and deps), and a program can report progress
(``report_progress``: the ``run_code`` call's ``tools/progress``)."""

from __future__ import annotations

import contextvars
import threading
from typing import Any

from dsh_actors import ToolBatchInput, ToolCall, ToolProgress

from .helpers import run_code, tool

REQUEST: contextvars.ContextVar[str] = contextvars.ContextVar("request", default="unset")


def test_sub_calls_inherit_the_run_code_calls_context_and_deps(rt: Any, ptc: Any) -> None:
    seen: list[tuple[str, str, Any]] = []
    lock = threading.Lock()

    def body(args: Any, ctx: Any) -> Any:
        with lock:
            seen.append(("body", REQUEST.get(), ctx.deps))
        return 1

    def observe(execution: Any, result: Any) -> None:
        with lock:
            seen.append((execution.name, REQUEST.get(), execution.deps))

    rt.tools.register(tool("probe", body))
    rt.events.on("tools/result", observe)
    token = REQUEST.set("req-ptc")
    try:
        code = "await asyncio.gather(tools.probe(), tools.probe())\nreturn 1"
        batch = ToolBatchInput(calls=(ToolCall("c1", "run_code", {"code": code}),), deps="deps-1")
        result = rt.tools.execute(batch).results[0].result
    finally:
        REQUEST.reset(token)
    assert not result.is_error, result
    assert sorted(seen) == sorted(
        [("body", "req-ptc", "deps-1")] * 2 + [("probe", "req-ptc", "deps-1")] * 2 + [("run_code", "req-ptc", "deps-1")]
    )


def test_a_program_reports_progress_as_its_run_code_call(rt: Any, ptc: Any) -> None:
    journal: list[tuple[str, Any]] = []
    rt.events.on("tools/progress", lambda execution, progress: journal.append((execution.call_id, progress)))
    rt.events.on("tools/result", lambda execution, result: journal.append((execution.call_id, "result")))
    code = "for i in range(3):\n    report_progress(i + 1, total=3, message=f'item {i + 1}')\nreturn 'ok'"
    result = run_code(rt, code)
    assert not result.is_error, result
    assert journal == [
        ("c1", ToolProgress(1, 3, "item 1")),
        ("c1", ToolProgress(2, 3, "item 2")),
        ("c1", ToolProgress(3, 3, "item 3")),
        ("c1", "result"),
    ]


def test_a_bad_progress_value_is_an_error_in_the_program(rt: Any, ptc: Any) -> None:
    result = run_code(rt, "report_progress('half')\nreturn 1")
    assert result.is_error
    assert "report_progress(progress=...) must be a finite number" in result.error.message


def test_a_progress_int_past_64_bits_is_an_error_in_the_program_not_a_protocol_error(rt: Any, ptc: Any) -> None:
    code = "try:\n    report_progress(1, total={})\nexcept ValueError as err:\n    return str(err)"
    assert run_code(rt, code.format("2**70")).value["result"] == (
        "report_progress(total=...): the int 2**70 is outside [-2**63, 2**64-1]"
    )
    assert run_code(rt, code.format("10**400")).value["result"] == (
        "report_progress(total=...): an int of 1329 bits is outside [-2**63, 2**64-1]"
    )
