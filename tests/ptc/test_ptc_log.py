"""The durable log of sub-calls (SPEC sections 7 and 10): a start event
when a sub-call actually starts (ids, name, arguments; no schema, no
description), a settle event whose content first passes the
tools/ptc-dispatch-log waterfall; a raising listener is contained."""

from __future__ import annotations

import select
import threading
from typing import Any

import pytest

from dsh_actors import (
    Agent,
    ImageBlock,
    LogStep,
    Session,
    ToolBatchInput,
    ToolCall,
    ToolOutput,
    ToolRuntime,
    text,
    thaw,
)
from executors.ptc import PtcDispatchLog
from executors.ptc.run import Run

from .helpers import GUARD, JSON_OUTPUT, batch, echo_tool, events_of, install, run_code, tool, with_session

KINDS = ("tool/call", "tool/result", "tool/ptc-dispatch-start", "tool/ptc-dispatch")


def test_the_log_holds_start_and_settle_events_in_order_with_the_core_shapes(rt: Any, ptc: Any) -> None:
    def fail(args: Any, ctx: Any) -> Any:
        raise ValueError("broken")

    rt.tools.register(echo_tool())
    rt.tools.register(tool("fail", fail))
    agent = with_session()
    run_code(
        rt,
        "await tools.echo(message='a')\ntry:\n    await tools.fail()\nexcept ToolError:\n    pass\nreturn 1",
        agent=agent,
    )
    events = events_of(agent.session, *KINDS)
    assert [e["type"] for e in events] == [
        "tool/call",
        "tool/ptc-dispatch-start",
        "tool/ptc-dispatch",
        "tool/ptc-dispatch-start",
        "tool/ptc-dispatch",
        "tool/result",
    ]
    assert events[1] == {
        "type": "tool/ptc-dispatch-start",
        "root_call_id": "c1",
        "parent_call_id": "c1",
        "sub_call_id": "c1:ptc:1",
        "name": "echo",
        "arguments": {"message": "a"},
    }
    assert events[2] == {
        "type": "tool/ptc-dispatch",
        "root_call_id": "c1",
        "parent_call_id": "c1",
        "sub_call_id": "c1:ptc:1",
        "name": "echo",
        "is_error": False,
        "content": [{"type": "text", "text": '{"message":"a"}'}],
        "error": None,
        "meta": None,
    }
    assert events[4]["is_error"] is True
    # The body raised a plain exception: the log names its class.
    assert events[4]["error"] == {
        "message": "broken",
        "info": {"name": "ValueError", "code": "TOOL_FAILED", "reason": None},
    }
    assert events[4]["content"] == [{"type": "text", "text": "Error: broken"}]
    # ... and, as every logged failure of a fault, its traceback (the log's
    # copy of the core's builder had left it out).
    assert "traceback" not in events[2]
    assert events[4]["traceback"].startswith("Traceback (most recent call last):")
    assert 'raise ValueError("broken")' in events[4]["traceback"]
    replayed = agent.session.results_by_call(ptc=True)
    assert sorted(replayed) == ["c1:ptc:1", "c1:ptc:2"]


def test_the_events_match_the_core_session_builders(rt: Any, ptc: Any) -> None:
    from dsh_actors.session import ptc_dispatch_event, ptc_dispatch_start_event  # the shapes to keep

    rt.tools.register(echo_tool())
    agent = with_session()
    result = run_code(rt, "return await tools.echo(message='b')", agent=agent)
    start, settle = events_of(agent.session, "tool/ptc-dispatch-start", "tool/ptc-dispatch")
    assert start == ptc_dispatch_start_event("c1", "c1", "c1:ptc:1", "echo", {"message": "b"})
    assert result.value["result"] == {"message": "b"}
    assert settle == ptc_dispatch_event("c1", "c1", "c1:ptc:1", "echo", False, [text('{"message":"b"}')], None, None)


def test_the_dispatch_log_waterfall_replaces_only_the_logged_content(rt: Any, ptc: Any) -> None:
    rt.tools.register(echo_tool())
    seen: list[PtcDispatchLog] = []

    def shorten(dispatch: PtcDispatchLog, next: Any) -> Any:
        seen.append(dispatch)
        original = next()
        return [text(f"logged {len(original)} block(s)")]

    rt.events.on("tools/ptc-dispatch-log", shorten)
    agent = with_session()
    result = run_code(rt, "return await tools.echo(message='the full value')", agent=agent)
    assert result.value["result"] == {"message": "the full value"}  # the program got everything
    (settle,) = events_of(agent.session, "tool/ptc-dispatch")
    assert settle["content"] == [{"type": "text", "text": "logged 1 block(s)"}]
    (dispatch,) = seen
    assert dispatch.sub_call_id == "c1:ptc:1" and dispatch.name == "echo" and dispatch.is_error is False
    assert dispatch.agent is agent
    assert dispatch.exec.call_id == "c1" and dispatch.exec.name == "run_code"
    assert dispatch.content == (text('{"message":"the full value"}'),)


def test_a_raising_dispatch_log_listener_is_contained_and_the_original_content_logged(rt: Any, ptc: Any) -> None:
    rt.tools.register(echo_tool())

    def explode(dispatch: Any, next: Any) -> Any:
        raise RuntimeError("listener bug")

    rt.events.on("tools/ptc-dispatch-log", explode)
    agent = with_session()
    result = run_code(rt, "return await tools.echo(message='x')", agent=agent)
    assert result.value["result"] == {"message": "x"}
    (settle,) = events_of(agent.session, "tool/ptc-dispatch")
    assert settle["content"] == [{"type": "text", "text": '{"message":"x"}'}]


def test_a_listener_that_returns_something_else_than_content_keeps_the_original(rt: Any, ptc: Any) -> None:
    rt.tools.register(echo_tool())
    rt.events.on("tools/ptc-dispatch-log", lambda dispatch, next: "not blocks")
    agent = with_session()
    run_code(rt, "return await tools.echo(message='x')", agent=agent)
    (settle,) = events_of(agent.session, "tool/ptc-dispatch")
    assert settle["content"] == [{"type": "text", "text": '{"message":"x"}'}]


def test_a_scoped_dispatch_log_listener_sees_only_its_agents_dispatches(rt: Any, ptc: Any) -> None:
    rt.tools.register(echo_tool())
    mine = with_session()
    other = with_session()
    seen: list[str] = []
    rt.events.on("tools/ptc-dispatch-log", lambda d, next: seen.append(d.agent.id) or next(), scope=mine)
    run_code(rt, "return await tools.echo(message='m')", agent=mine)
    run_code(rt, "return await tools.echo(message='o')", agent=other)
    assert seen == ["main"] and len(events_of(other.session, "tool/ptc-dispatch")) == 1


def test_images_are_logged_in_the_settle_event(rt: Any, ptc: Any) -> None:
    from dsh_actors import ToolOutput

    image = ImageBlock(data="aGk=", mime_type="image/png")
    rt.tools.register(
        tool("shot", lambda a, c: "s", output=ToolOutput(schema={"type": "string"}, render=lambda a, v: [image]))
    )
    agent = with_session()
    run_code(rt, "return await tools.shot()", agent=agent)
    (settle,) = events_of(agent.session, "tool/ptc-dispatch")
    assert settle["content"] == [{"type": "image", "data": "aGk=", "mime_type": "image/png"}]


def test_sub_calls_that_never_started_are_not_logged_and_are_listed_as_not_started(rt: Any) -> None:
    # The run times out while the first call holds the only slot: the second
    # call (made microseconds after the first, long before the deadline)
    # never starts.
    install(rt, timeout_ms=1000, max_parallel_sub_calls=1)
    saw_abort: list[bool] = []

    def slow(args: Any, ctx: Any) -> str:
        saw_abort.append(ctx.signal.wait(GUARD))
        return "late"

    rt.tools.register(tool("slow", slow))
    rt.tools.register(echo_tool())
    agent = with_session()
    result = run_code(rt, "await asyncio.gather(tools.slow(), tools.echo(message='queued'))", agent=agent)
    message = result.error.message
    assert message.startswith("code run failed (timeout): ")
    assert saw_abort == [True]
    assert "- c1:ptc:1 slow: failed (ABORTED): tool call aborted" in message
    assert "- c1:ptc:2 echo: not started" in message
    assert [e["sub_call_id"] for e in events_of(agent.session, "tool/ptc-dispatch-start")] == ["c1:ptc:1"]
    assert [e["sub_call_id"] for e in events_of(agent.session, "tool/ptc-dispatch")] == ["c1:ptc:1"]


def test_nothing_is_logged_for_an_agent_without_a_session(rt: Any, ptc: Any) -> None:
    rt.tools.register(echo_tool())
    called: list[Any] = []
    rt.events.on("tools/ptc-dispatch-log", lambda d, next: called.append(d) or next())
    assert run_code(rt, "return await tools.echo(message='x')", agent=Agent("a")).value["result"] == {"message": "x"}
    assert called == []


def test_a_session_that_cannot_be_written_ends_the_run(rt: Any, ptc: Any, tmp_path: Any) -> None:
    rt.tools.register(echo_tool())
    session = Session(tmp_path / "log.jsonl")
    agent = Agent("a", session=session)
    ran: list[str] = []
    rt.tools.register(tool("work", lambda a, c: ran.append("work") or 1))
    session.close()  # every append now raises
    result = rt.tools.execute(batch("return await tools.work()", agent=agent, log=False)).results[0].result
    assert result.error.message.startswith("code run failed (internal): the session log could not be written")
    assert ran == []


def test_a_stop_asked_for_before_the_programs_next_message_wins(
    rt: Any, ptc: Any, tmp_path: Any, monkeypatch: Any
) -> None:
    # The failed start-event write asks the run to stop; the sub-call then
    # settles aborted before dispatch and its result reaches the program,
    # which raises. Forced order: the program's done is in the pipe before
    # the run's thread reads on after feeding the call (the same read loop).
    stopped = threading.Event()
    request_stop, on_call = Run.request_stop, Run._on_call

    def stop(run: Any, kind: str, headline: str) -> None:
        request_stop(run, kind, headline)
        stopped.set()

    def call(run: Any, message: Any) -> None:
        on_call(run, message)
        assert stopped.wait(10)
        assert select.select([run._worker.stdout_fd], [], [], 10)[0]  # the program's done is written

    monkeypatch.setattr(Run, "request_stop", stop)
    monkeypatch.setattr(Run, "_on_call", call)
    rt.tools.register(tool("work", lambda a, c: 1))
    session = Session(tmp_path / "log.jsonl")
    session.close()  # every append now raises
    result = (
        rt.tools.execute(batch("return await tools.work()", agent=Agent("a", session=session), log=False))
        .results[0]
        .result
    )
    assert result.error.message.startswith("code run failed (internal): the session log could not be written")


def shown_tool(presentation_meta: Any) -> Any:
    """``shown(message)``: its arguments as its value, with ``presentation_meta``."""
    output = ToolOutput(schema=JSON_OUTPUT.schema, render=JSON_OUTPUT.render, presentation_meta=presentation_meta)
    return tool("shown", lambda args, ctx: dict(args), parameters={"message": {"type": "string"}}, output=output)


def test_a_sub_calls_event_carries_the_presentation_meta_a_root_call_of_its_tool_gets(rt: Any, ptc: Any) -> None:
    def presented(args: Any, value: Any) -> Any:
        return {"chars": len(value["message"]), "path": [args["message"]]}

    rt.tools.register(shown_tool(presented))
    live: list[Any] = []
    rt.events.on("tools/result", lambda ex, res: live.append(res) if ex.parent is not None else None)
    agent = with_session()
    result = run_code(rt, "return await tools.shown(message='four')", agent=agent)
    assert result.value["result"] == {"message": "four"}
    (settle,) = events_of(agent.session, "tool/ptc-dispatch")
    # The same call made by the model (native executor) logs this meta in its
    # tool/result; the sub-call's copy carries it too: replay draws its cards.
    direct = with_session()
    with ToolRuntime() as native:
        native.tools.register(shown_tool(presented))
        call = ToolCall(id="d1", name="shown", arguments={"message": "four"})
        native.tools.execute(ToolBatchInput(calls=(call,), agent=direct, log=LogStep(turn=1, step=1)))
    (logged,) = events_of(direct.session, "tool/result")
    assert settle["meta"] == logged["meta"] == {"chars": 4, "path": ["four"]}
    assert [r.meta for r in live] == [None]  # the live result as before: SPEC section 5
    (replayed,) = agent.session.results_by_call(ptc=True).values()
    assert thaw(replayed.meta) == {"chars": 4, "path": ["four"]}


def test_a_failed_sub_call_logs_no_presentation_meta(rt: Any, ptc: Any) -> None:
    def fail(args: Any, ctx: Any) -> Any:
        raise ValueError("no")

    presented: list[Any] = []
    output = ToolOutput(
        schema=JSON_OUTPUT.schema, presentation_meta=lambda args, value: presented.append(value) or {"x": 1}
    )
    rt.tools.register(tool("fail", fail, output=output))
    agent = with_session()
    run_code(rt, "try:\n    await tools.fail()\nexcept ToolError:\n    return 1", agent=agent)
    (settle,) = events_of(agent.session, "tool/ptc-dispatch")
    assert settle["is_error"] is True and settle["meta"] is None and presented == []


@pytest.mark.parametrize(
    ("meta", "detail"),
    [
        (lambda args, value: 1 / 0, "raised ZeroDivisionError: division by zero"),
        (lambda args, value: {"x": float("nan")}, "returned meta.x: float nan is not lossless JSON"),
    ],
)
def test_a_broken_presentation_meta_leaves_the_sub_calls_copy_without_meta_and_is_logged(
    rt: Any, ptc: Any, log_records: Any, meta: Any, detail: str
) -> None:
    records = log_records("ERROR")
    rt.tools.register(shown_tool(meta))
    agent = with_session()
    result = run_code(rt, "return await tools.shown(message='m')", agent=agent)
    assert result.value["result"] == {"message": "m"}  # the sub-call had settled: the program got its value
    (settle,) = events_of(agent.session, "tool/ptc-dispatch")
    assert settle["is_error"] is False and settle["meta"] is None
    (record,) = [r for r in records.items if "presentation_meta" in r["message"]]
    assert record["message"] == (
        f'output.presentation_meta of tool "shown": {detail}; the log\'s copy of c1:ptc:1 has no presentation '
        "meta (replay draws generic cards): fix the tool's presentation_meta"
    )
