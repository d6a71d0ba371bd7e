"""The exception a hook raised stays on the live result
(``outcome.error.exception``, with its traceback), is logged once at ERROR
naming the tool and the call, and its traceback text is in the
``tool/result`` event's ``traceback`` field; it is never part of equality,
the durable projection or the model's content."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from loguru import logger

from dsh_actors import (
    Agent,
    Ask,
    LogStep,
    Session,
    ToolBatchInput,
    ToolCall,
    ToolOutput,
    define_tool,
    text,
)
from dsh_actors.errors import traceback_text
from dsh_actors.model import ToolExecutionFailure, ToolFailure


def raising_body(args: Any, ctx: Any) -> Any:
    return 1 / 0


async def raising_async_body(args: Any, ctx: Any) -> Any:
    await asyncio.sleep(0)
    raise LookupError("no such row")


def tool(name: str = "t", *, execute: Any = None, render: Any = None, meta: Any = None) -> Any:
    return define_tool(
        name=name,
        description="A tool.",
        parameters={},
        output=ToolOutput(
            schema={"type": "string"},
            render=render or (lambda a, v: [text(v)]),
            presentation_meta=meta,
        ),
        execute=execute or (lambda args, ctx: "ok"),
    )


@pytest.fixture
def errors(log_records: Any) -> Any:
    """The ERROR records the libraries log while the test runs."""
    return log_records("ERROR")


def run_one(rt: Any, name: str = "t", session: Session | None = None) -> Any:
    agent = Agent("main", session=session)
    batch = ToolBatchInput(
        calls=[ToolCall("c1", name, "{}")], agent=agent, log=None if session is None else LogStep(1, 1)
    )
    return rt.tools.execute(batch).results[0].result


def logged_traceback(record: Any) -> str:
    """The traceback text a record carries (``errors.log_exception``): at
    the end of its message and in ``extra["traceback"]``, never as loguru's
    exception (which sinks show with the values of every frame's variables)."""
    text = record["extra"]["traceback"]
    assert record["exception"] is None
    assert record["message"].endswith("\n" + text)
    return str(text)


def frames(exc: BaseException) -> list[str]:
    tb = exc.__traceback__
    names = []
    while tb is not None:
        names.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    return names


def test_a_body_that_raises_keeps_its_exception_and_traceback_on_the_result(rt: Any, errors: Any) -> None:
    rt.tools.register(tool(execute=raising_body))
    outcome = run_one(rt)
    exc = outcome.error.exception
    assert type(exc) is ZeroDivisionError
    assert "raising_body" in frames(exc)
    assert outcome.content == (text("Error: division by zero"),)
    [record] = errors.items
    assert record["level"].name == "ERROR"
    assert logged_traceback(record) == traceback_text(exc).rstrip("\n")
    assert record["message"].startswith('tool "t" (call c1) failed: division by zero\nTraceback')


def test_an_async_body_that_raises_keeps_its_exception(rt: Any, errors: Any) -> None:
    rt.tools.register(tool(execute=raising_async_body))
    outcome = run_one(rt)
    assert type(outcome.error.exception) is LookupError
    assert "raising_async_body" in frames(outcome.error.exception)
    assert len(errors.items) == 1


def test_the_exception_is_not_part_of_equality_or_repr() -> None:
    boom = ValueError("x")
    a = ToolFailure("x", None, boom)
    b = ToolFailure("x", None)
    assert a == b and hash(a) == hash(b)
    assert "ValueError" not in repr(a)
    assert ToolExecutionFailure(error=a, content=()) == ToolExecutionFailure(error=b, content=())


def raise_in(where: str) -> Any:
    def hook(*args: Any) -> Any:
        raise RuntimeError(f"{where} broke")

    return hook


@pytest.mark.parametrize("where", ["pre-execute", "wrapper", "post-execute", "approval", "guard"])
def test_a_listener_wrapper_guard_or_approval_service_that_raises_is_kept(rt: Any, errors: Any, where: str) -> None:
    rt.tools.register(tool())
    if where == "pre-execute":
        rt.events.on("tools/pre-execute", raise_in(where))
    elif where == "wrapper":
        rt.events.on("tools/execute", raise_in(where))
    elif where == "post-execute":
        rt.events.on("tools/post-execute", raise_in(where))
    elif where == "approval":
        rt.events.on("tools/pre-execute", lambda execution, next: Ask())
        rt.approvals.set(raise_in(where))
    else:
        rt.tools.guard(raise_in(where))
    outcome = run_one(rt)
    assert outcome.is_error
    exc = outcome.error.exception
    raised = exc
    if where in ("pre-execute", "post-execute", "approval"):
        # A policy's failure is POLICY_FAILED: the runtime's error, caused by
        # what the policy raised (the tool did nothing wrong).
        assert outcome.error.info.code == "POLICY_FAILED"
        assert type(exc).__name__ == "ToolPolicyError"
        raised = exc.__cause__
    assert type(raised) is RuntimeError and str(raised) == f"{where} broke"
    assert "hook" in frames(raised)
    assert [logged_traceback(r) for r in errors.items] == [traceback_text(exc).rstrip("\n")]


@pytest.mark.parametrize("which", ["render", "presentation_meta"])
def test_a_renderer_that_raises_is_the_cause_of_the_output_error(rt: Any, errors: Any, which: str) -> None:
    if which == "render":
        rt.tools.register(tool(render=raise_in(which)))
    else:
        rt.tools.register(tool(meta=raise_in(which)))
    outcome = run_one(rt)
    assert outcome.error.info.code == "POLICY_FAILED"  # the callback broke its contract, naming it
    assert f"output.{which}" in outcome.error.message
    cause = outcome.error.exception.__cause__
    assert type(cause) is RuntimeError and str(cause) == f"{which} broke"
    assert len(errors.items) == 1


def test_outcomes_the_runtime_describes_keep_no_exception_and_log_nothing(rt: Any, errors: Any) -> None:
    rt.tools.register(
        define_tool(
            name="needs",
            description="x",
            parameters={"x": {"type": "integer", "required": True}},
            output=ToolOutput(schema={"type": "string"}, render=lambda a, v: [text(v)]),
            execute=lambda args, ctx: "ok",
        )
    )
    unknown = run_one(rt, "missing")
    assert unknown.error.exception is None
    bad_args = run_one(rt, "needs")
    assert bad_args.error.info.code == "INVALID_ARGS"
    rt.events.on("tools/pre-execute", lambda execution, next: __import__("dsh_actors").Deny("no"))
    denied = run_one(rt, "needs")
    assert denied.error.exception is None
    assert errors.items == []


def test_arguments_the_validation_around_a_body_refuses_log_no_traceback(rt: Any) -> None:
    """The model's bad arguments refused by the library (``@tool``'s
    pydantic validation, sync and async, ``define_tool``'s, text that is
    not JSON) are an outcome: their traceback would show only library
    frames, so the log keeps none (the live result keeps the error, with
    its violations). Every such call still has a ``tool/start``: the
    arguments are validated inside the body invoked."""
    from dsh_actors import ToolArgsError
    from dsh_actors import tool as typed_tool

    @typed_tool
    def sync_n(n: int) -> int:
        """Sync."""
        return n

    @typed_tool
    async def async_n(n: int) -> int:
        """Async."""
        return n

    rt.tools.register(sync_n)
    rt.tools.register(async_n)
    rt.tools.register(
        define_tool(
            name="dsl_n",
            description="Dsl.",
            parameters={"n": {"type": "integer", "required": True}},
            output=ToolOutput(schema={"type": "integer"}),
            execute=lambda args, ctx: args["n"],
        )
    )
    session = Session()
    calls = [
        ToolCall("s", "sync_n", '{"n": "x"}'),
        ToolCall("a", "async_n", '{"n": "x"}'),
        ToolCall("d", "dsl_n", '{"n": "x"}'),
        ToolCall("j", "sync_n", '{"n": '),
    ]
    batch = ToolBatchInput(calls=calls, agent=Agent("main", session=session), log=LogStep(1, 1))
    results = rt.tools.execute(batch).results
    assert [r.result.error.info.code for r in results] == ["INVALID_ARGS"] * 4
    assert [type(r.result.error.exception) for r in results] == [ToolArgsError] * 4
    events = session.events()
    assert [e["call_id"] for e in events if e["type"] == "tool/start"] == ["s", "a", "d", "j"]
    assert [e for e in events if e["type"] == "tool/result" and "traceback" in e] == []


def test_a_body_that_raises_tool_args_error_itself_keeps_its_traceback(rt: Any) -> None:
    from dsh_actors import ToolDefinition, validate_args

    def checking_body(args: Any, ctx: Any) -> Any:
        validate_args({"type": "object", "properties": {"n": {"type": "integer"}}}, args)
        return "ok"

    rt.tools.register(
        ToolDefinition(
            name="t",
            description="Checks its own arguments.",
            parameters={"type": "object", "properties": {"n": {}}},
            output=ToolOutput(schema={"type": "string"}),
            execute=checking_body,
        )
    )
    session = Session()
    agent = Agent("main", session=session)
    batch = ToolBatchInput(calls=[ToolCall("c1", "t", '{"n": "x"}')], agent=agent, log=LogStep(1, 1))
    outcome = rt.tools.execute(batch).results[0].result
    assert outcome.error.info.code == "INVALID_ARGS"
    assert "checking_body" in frames(outcome.error.exception)
    [event] = [e for e in session.events() if e["type"] == "tool/result"]
    assert "checking_body" in event["traceback"]


def test_the_session_log_keeps_the_traceback_text_beside_the_models_fields(rt: Any) -> None:
    rt.tools.register(tool(execute=raising_body))
    session = Session()
    outcome = run_one(rt, session=session)
    [event] = [e for e in session.events() if e["type"] == "tool/result"]
    assert "ZeroDivisionError: division by zero" in event["traceback"]
    assert "raising_body" in event["traceback"]
    assert event["error"] == {
        "message": "division by zero",
        "info": {"name": "ZeroDivisionError", "code": "TOOL_FAILED", "reason": None},
    }
    assert "Traceback" not in repr(outcome.content)


def test_nothing_is_logged_while_the_library_is_disabled(rt: Any) -> None:
    messages: list[Any] = []
    handle = logger.add(messages.append, level="DEBUG")
    try:
        rt.tools.register(tool(execute=raising_body))
        run_one(rt)
    finally:
        logger.remove(handle)
    assert messages == []


def test_a_value_that_does_not_fit_keeps_every_violation_however_the_tool_was_made(rt: Any) -> None:
    # The message lists 20 violations "; and 10 more", and the reference
    # says the error's `violations` keeps them all: a @tool body's value
    # kept its ToolOutputError, a define_tool body's (or a hook's value)
    # had no exception, so the other ten were nowhere.
    from dsh_actors import ErrorCode, ToolOutputError
    from dsh_actors import tool as typed_tool

    wide = {f"k{i}": "x" for i in range(30)}
    schema = {
        "type": "object",
        "additionalProperties": True,
        "properties": {f"k{i}": {"type": "integer"} for i in range(30)},
    }
    rt.tools.register(
        define_tool(
            name="plain", description="d", parameters={}, output=ToolOutput(schema=schema), execute=lambda a, c: wide
        )
    )

    @typed_tool
    def typed() -> dict[str, int]:
        """Returns what does not fit."""
        return wide  # type: ignore[return-value]

    rt.tools.register(typed)
    batch = rt.tools.execute(ToolBatchInput(calls=[ToolCall(id="c1", name="plain"), ToolCall(id="c2", name="typed")]))
    for outcome in batch.results:
        error = outcome.result.error
        assert error is not None and error.info is not None and error.info.code == ErrorCode.INVALID_TOOL_OUTPUT
        assert error.message.endswith("; and 10 more")
        assert isinstance(error.exception, ToolOutputError), outcome.call_id
        assert len(error.exception.violations) == 30
