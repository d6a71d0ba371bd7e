"""Bad input from the model, a tool or a plugin gets a clear error result or
exception; it never crashes the runtime, hangs a batch or loses an event."""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
from typing import Any

import pytest

from dsh_actors import (
    AbortController,
    Agent,
    LogStep,
    Session,
    ToolBatchInput,
    ToolCall,
    ToolOutput,
    UserMessage,
    define_tool,
    text,
)

WAIT = 10.0


def echo(execute: Any = None, **kw: Any) -> Any:
    return define_tool(
        name=kw.pop("name", "echo"),
        description="echo",
        parameters={"message": {"type": "json"}},
        output=ToolOutput(schema={"type": "json"}, render=lambda a, v: [text(str(v))]),
        execute=execute or (lambda args, ctx: args.get("message")),
        is_concurrency_safe=lambda args: True,
        **kw,
    )


def code(result: Any) -> Any:
    return None if not result.is_error or result.error.info is None else result.error.info.code


def test_an_integer_literal_beyond_64_bits_in_argument_text_is_invalid_args_not_a_float(rt: Any) -> None:
    rt.tools.register(echo())
    batch = rt.tools.execute(ToolBatchInput(calls=(ToolCall("c1", "echo", '{"message": 18446744073709551616}'),)))
    result = batch.results[0].result
    assert code(result) == "INVALID_ARGS"
    assert "out of range" in result.error.message


def test_an_integer_at_the_edge_of_the_range_is_kept_exactly(rt: Any) -> None:
    rt.tools.register(echo())
    batch = rt.tools.execute(ToolBatchInput(calls=(ToolCall("c1", "echo", '{"message": 18446744073709551615}'),)))
    assert batch.results[0].result.value == 2**64 - 1


def test_a_lone_surrogate_in_argument_text_fails_that_call_and_the_log_stays_writable(rt: Any) -> None:
    rt.tools.register(echo())
    session = Session()
    batch = rt.tools.execute(
        ToolBatchInput(
            calls=(ToolCall("c1", "echo", '{"message": "a\ud800"}'), ToolCall("c2", "echo", "{}")),
            agent=Agent("a", session=session),
            log=LogStep(turn=1, step=1),
        )
    )
    assert code(batch.results[0].result) == "INVALID_ARGS"
    assert not batch.results[1].result.is_error
    events = session.events()
    assert events[0]["type"] == "tool/batch"
    assert events[0]["calls"][0]["arguments"].startswith("<arguments that are not lossless JSON: ")
    assert [(e["type"], e["call_id"]) for e in events[1:]] in (
        [("tool/call", "c1"), ("tool/call", "c2"), ("tool/start", "c2"), ("tool/result", "c1"), ("tool/result", "c2")],
        [("tool/call", "c1"), ("tool/result", "c1"), ("tool/call", "c2"), ("tool/start", "c2"), ("tool/result", "c2")],
    )


def test_arguments_given_as_a_mapping_that_is_not_lossless_are_logged_with_the_reason_in_both_events(rt: Any) -> None:
    rt.tools.register(echo())
    session = Session()
    batch = rt.tools.execute(
        ToolBatchInput(
            calls=(ToolCall("c1", "echo", {"message": float("nan")}),),
            agent=Agent("a", session=session),
            log=LogStep(turn=1, step=1),
        )
    )
    assert code(batch.results[0].result) == "INVALID_ARGS"
    batch_event, call_event = session.events()[:2]
    reason = "<arguments that are not lossless JSON: arguments.message: float nan is not lossless JSON>"
    assert batch_event["calls"][0]["arguments"] == reason
    assert (call_event["type"], call_event["arguments"]) == ("tool/call", reason)


def test_a_tool_call_id_with_a_lone_surrogate_is_rejected_before_anything_runs(rt: Any) -> None:
    rt.tools.register(echo())
    with pytest.raises(ValueError, match="surrogate"):
        rt.tools.execute(ToolBatchInput(calls=(ToolCall("c\ud800", "echo", "{}"),)))


def test_a_body_raising_with_a_lone_surrogate_fails_that_call_only(rt: Any) -> None:
    def body(args: Any, ctx: Any) -> Any:
        raise ValueError("bad \ud800")

    rt.tools.register(echo(body))
    session = Session()
    batch = rt.tools.execute(
        ToolBatchInput(calls=(ToolCall("c1", "echo", "{}"),), agent=Agent("a", session=session), log=LogStep(1, 1))
    )
    result = batch.results[0].result
    assert result.is_error
    assert session.events()[-1]["type"] == "tool/result"


def test_a_render_returning_a_lone_surrogate_fails_naming_the_render(rt: Any) -> None:
    tool = define_tool(
        name="r",
        description="r",
        parameters={},
        output=ToolOutput(schema={"type": "string"}, render=lambda a, v: [text("x\ud800")]),
        execute=lambda args, ctx: "v",
    )
    rt.tools.register(tool)
    batch = rt.tools.execute(ToolBatchInput(calls=(ToolCall("c1", "r", "{}"),)))
    result = batch.results[0].result
    assert code(result) == "POLICY_FAILED"  # the render broke its contract, not the tool's value
    assert result.error.message.startswith('output.render of tool "r": returned content[0].text: ')


class Hostile(BaseException):
    """Not an Exception: the kind of thing that escapes `except Exception`."""


def test_an_abort_callback_raising_a_base_exception_does_not_stop_other_calls_from_seeing_the_abort(
    rt: Any,
) -> None:
    barrier = threading.Barrier(3)  # both bodies and this test
    seen: list[bool] = []

    def body(args: Any, ctx: Any) -> Any:
        if args["message"] == "bad":

            def explode(_: Any) -> None:
                raise Hostile("boom")

            ctx.signal.add_callback(explode)
        barrier.wait(WAIT)
        seen.append(ctx.signal.wait(WAIT))
        return "done"

    rt.tools.register(echo(body))
    controller = AbortController()
    future = rt.tools.submit(
        ToolBatchInput(
            calls=(ToolCall("c1", "echo", '{"message": "bad"}'), ToolCall("c2", "echo", '{"message": "ok"}')),
            signal=controller.signal,
        )
    )
    barrier.wait(WAIT)  # both bodies are running (and c1 has subscribed its hostile callback)
    controller.abort("stop")  # the hostile callback must neither escape here nor stop the fan-out
    batch = future.result(WAIT)
    assert seen == [True, True]
    assert [code(r.result) for r in batch.results] == ["ABORTED", "ABORTED"]


def test_an_async_body_raising_system_exit_fails_that_call_and_the_loop_keeps_serving(rt: Any) -> None:
    async def bye(args: Any, ctx: Any) -> Any:
        raise SystemExit(3)

    async def fine(args: Any, ctx: Any) -> Any:
        await asyncio.sleep(0)
        return "alive"

    rt.tools.register(echo(bye, name="bye"))
    rt.tools.register(echo(fine, name="fine"))
    first = rt.tools.execute(ToolBatchInput(calls=(ToolCall("c1", "bye", "{}"),)))
    assert first.results[0].result.is_error
    second = rt.tools.execute(ToolBatchInput(calls=(ToolCall("c2", "fine", "{}"),)))
    assert second.results[0].result.value == "alive"


def test_a_body_that_exits_fails_with_a_message_naming_system_exit_and_sys_exit(rt: Any) -> None:
    # "Error: 3" told neither the model nor the developer what happened.
    def parse(args: Any, ctx: Any) -> Any:
        parser = argparse.ArgumentParser(prog="parse")
        parser.add_argument("--port", type=int, required=True)
        return parser.parse_args(["--port", "x"]).port  # (argparse prints its usage on stderr, then exits)

    async def bye(args: Any, ctx: Any) -> Any:
        sys.exit(3)

    rt.tools.register(echo(lambda args, ctx: sys.exit(3), name="exits"))
    rt.tools.register(echo(bye, name="bye"))
    rt.tools.register(echo(lambda args, ctx: sys.exit(), name="quits"))
    rt.tools.register(echo(parse, name="parse"))
    rt.tools.register(echo(lambda args, ctx: (_ for _ in ()).throw(KeyboardInterrupt), name="interrupted"))
    calls = tuple(ToolCall(f"c{i}", name, "{}") for i, name in enumerate(("exits", "bye", "quits", "parse")))
    batch = rt.tools.execute(ToolBatchInput(calls=calls + (ToolCall("c9", "interrupted", "{}"),)))
    exited = "(sys.exit() was called: argparse calls it on arguments it cannot parse; raise an exception instead)"
    assert [r.result.error.message for r in batch.results] == [
        f"SystemExit: 3 {exited}",
        f"SystemExit: 3 {exited}",
        f"SystemExit {exited}",
        f"SystemExit: 2 {exited}",
        "KeyboardInterrupt",
    ]
    for r in batch.results:
        assert code(r.result) == "TOOL_FAILED" and r.result.error.info.name == type(r.result.error.exception).__name__
    assert isinstance(batch.results[0].result.error.exception, SystemExit)


def test_presenters_and_classifiers_of_define_tool_never_raise_even_base_exceptions() -> None:
    def raising(*_: Any) -> Any:
        raise Hostile("no")

    tool = define_tool(
        name="p",
        description="p",
        parameters={"message": {"type": "string"}},
        output=ToolOutput(schema={"type": "json"}, render=lambda a, v: [text("x")]),
        execute=lambda args, ctx: None,
        is_concurrency_safe=raising,
        present_call=raising,
        present_result=raising,
    )
    assert tool.is_concurrency_safe is not None and tool.is_concurrency_safe({}) is False
    assert tool.present_call is not None and tool.present_call({}) is None
    assert tool.present_result is not None and tool.present_result({}, None) is None  # type: ignore[arg-type]


def test_a_presenter_given_a_hostile_mapping_answers_none() -> None:
    class Key(str):
        def __hash__(self) -> int:
            return hash("message")

        def __eq__(self, other: object) -> bool:
            raise Hostile("eq")

    tool = define_tool(
        name="p",
        description="p",
        parameters={"message": {"type": "string"}},
        output=ToolOutput(schema={"type": "json"}, render=lambda a, v: [text("x")]),
        execute=lambda args, ctx: None,
        present_call=lambda args: None,
    )
    assert tool.present_call is not None and tool.present_call({Key("x"): 1}) is None


def test_a_batch_with_a_field_of_the_wrong_type_is_rejected_with_a_clear_type_error(rt: Any) -> None:
    with pytest.raises(TypeError, match="ToolBatchInput.agent must be an Agent"):
        rt.tools.execute(ToolBatchInput(calls=(), agent="main"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ToolBatchInput.signal"):
        rt.tools.execute(ToolBatchInput(calls=(), signal=object()))  # type: ignore[arg-type]


def test_a_user_message_made_from_a_bare_string_is_rejected() -> None:
    with pytest.raises(TypeError, match="sequence of content blocks"):
        UserMessage("hello")  # type: ignore[arg-type]


def test_stop_is_bounded_even_when_a_body_ignores_its_signal() -> None:
    from dsh_actors import ToolRuntime

    release = threading.Event()
    started = threading.Event()

    def stubborn(args: Any, ctx: Any) -> Any:
        started.set()
        release.wait(WAIT)  # ignores ctx.signal on purpose
        return "late"

    rt = ToolRuntime().start()
    try:
        rt.tools.register(echo(stubborn))
        future = rt.tools.submit(ToolBatchInput(calls=(ToolCall("c1", "echo", "{}"),)))
        assert started.wait(WAIT)
        stopper = threading.Thread(target=rt.stop)
        stopper.start()
        # stop() aborts the runtime's signal first: the batch is told, and
        # stop() waits (bounded) for the stubborn body; release it now.
        assert rt.stop_signal.wait(WAIT)
        release.set()
        stopper.join(WAIT)
        assert not stopper.is_alive()
        assert future.done()
    finally:
        release.set()
        rt.stop()
