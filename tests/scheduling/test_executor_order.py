"""The native executor's output: results and log events in model order,
raw argument parsing, bad input, deferred contexts and turn conclusion
(SPEC sections 6 and 10).

Threads are synchronised with Events only; every wait is bounded.
"""

from __future__ import annotations

import threading
from typing import Any

import orjson
import pytest

from dsh_actors import (
    Agent,
    LogStep,
    Session,
    ToolBatchInput,
    ToolCall,
    ToolDefinition,
    ToolOutput,
    UserMessage,
    text,
)

from .helpers import calls, code_of, events_of, logged_batch, make_tool, must


def finish_order_tools(rt: Any) -> list[int]:
    """Register ``t``: call 0's body can finish only after call 2's has."""
    third_done = threading.Event()
    lock = threading.Lock()
    finished: list[int] = []

    def body(args: Any, ctx: Any) -> str:
        i = args["i"]
        if i == 0:
            must(third_done, "call 2 finished")
        with lock:
            finished.append(i)
        if i == 2:
            third_done.set()
        return f"v{i}"

    rt.tools.register(make_tool("t", body))
    return finished


# -- results and log order ---------------------------------------------------


def test_results_have_one_entry_per_call_in_input_order_with_its_call_id(rt: Any) -> None:
    finished = finish_order_tools(rt)
    batch = rt.tools.execute(ToolBatchInput(calls=calls("t", "t", "t", "t")))
    assert finished.index(2) < finished.index(0), "call 2 was meant to finish before call 0"
    assert [r.call_id for r in batch.results] == ["c0", "c1", "c2", "c3"]
    assert [r.result.value for r in batch.results] == ["v0", "v1", "v2", "v3"]
    assert all(not r.result.is_error for r in batch.results)


def test_call_and_result_events_are_logged_in_model_order_even_when_later_calls_finish_first(
    rt: Any,
) -> None:
    finished = finish_order_tools(rt)
    session = Session()
    rt.tools.execute(logged_batch(calls("t", "t", "t", "t"), session))
    assert finished.index(2) < finished.index(0)

    events = session.events()
    call_events = [e for e in events if e["type"] == "tool/call"]
    result_events = [e for e in events if e["type"] == "tool/result"]
    assert len(events) == 13  # tool/batch, then a tool/call, a tool/start and a tool/result per call
    assert events[0] == {
        "type": "tool/batch",
        "turn": 1,
        "step": 1,
        "max_parallel_tool_calls": None,
        "calls": [{"call_id": f"c{i}", "name": "t", "arguments": f'{{"i":{i}}}'} for i in range(4)],
        "agent": "a",
        "unknown": [],
    }
    assert [e["call_id"] for e in call_events] == ["c0", "c1", "c2", "c3"]
    assert [e["call_id"] for e in result_events] == ["c0", "c1", "c2", "c3"]
    assert call_events[1] == {
        "type": "tool/call",
        "turn": 1,
        "step": 1,
        "call_id": "c1",
        "name": "t",
        "arguments": {"i": 1},
        "agent": "a",
    }
    assert result_events[2] == {
        "type": "tool/result",
        "call_id": "c2",
        "turn": 1,
        "step": 1,
        "is_error": False,
        "content": [{"type": "text", "text": "v2"}],
        "error": None,
        "meta": None,
        "agent": "a",
    }


def test_each_calls_tool_call_event_precedes_its_tool_result_event(rt: Any) -> None:
    finish_order_tools(rt)
    session = Session()
    rt.tools.execute(logged_batch(calls("t", "t", "t", "t"), session))
    events = session.events()
    for call_id in ("c0", "c1", "c2", "c3"):
        kinds = [e["type"] for e in events if e.get("call_id") == call_id]
        assert kinds == ["tool/call", "tool/start", "tool/result"], call_id


def test_the_log_step_turn_and_step_are_written_on_every_call_event(rt: Any) -> None:
    rt.tools.register(make_tool("t", lambda args, ctx: "x"))
    session = Session()
    batch = ToolBatchInput(calls=calls("t", "t"), agent=Agent("a", session=session), log=LogStep(turn=7, step=3))
    rt.tools.execute(batch)
    assert [(e["turn"], e["step"]) for e in events_of(session, "tool/call")] == [(7, 3), (7, 3)]


def test_the_canonical_value_is_never_logged(rt: Any) -> None:
    secret_output = ToolOutput(
        schema={
            "type": "object",
            "additional_properties": False,
            "properties": {
                "shown": {"type": "string", "required": True},
                "secret": {"type": "string", "required": True},
            },
        },
        render=lambda args, value: [text(value["shown"])],
    )
    rt.tools.register(
        make_tool(
            "secretive",
            lambda args, ctx: {"shown": "visible", "secret": f"S3CR3T-{ctx.call_id}"},
            output=secret_output,
        )
    )
    session = Session()
    batch = rt.tools.execute(logged_batch(calls("secretive", "secretive"), session))

    assert batch.results[0].result.value["secret"] == "S3CR3T-c0"  # the caller still gets it
    events = session.events()
    assert len(events) == 7
    assert b"S3CR3T" not in orjson.dumps(events)
    assert all("value" not in e for e in events)
    assert events_of(session, "tool/result")[0]["content"] == [{"type": "text", "text": "visible"}]


def test_a_batch_without_log_writes_no_root_events_to_the_agents_session(rt: Any) -> None:
    rt.tools.register(make_tool("t", lambda args, ctx: "x"))
    session = Session()
    batch = rt.tools.execute(ToolBatchInput(calls=calls("t", "t"), agent=Agent("a", session=session)))
    assert [r.result.value for r in batch.results] == ["x", "x"]
    assert session.events() == []


def test_failed_results_are_logged_with_their_error(rt: Any) -> None:
    def body(args: Any, ctx: Any) -> str:
        raise ValueError("it broke")

    rt.tools.register(make_tool("broken", body))
    session = Session()
    batch = rt.tools.execute(logged_batch(calls("broken"), session))
    assert batch.results[0].result.is_error
    (event,) = events_of(session, "tool/result")
    assert event["is_error"] is True
    assert event["content"] == [{"type": "text", "text": "Error: it broke"}]
    assert event["error"]["message"] == "it broke"


# -- raw argument parsing ----------------------------------------------------


def recording_tool(rt: Any, name: str = "rec") -> list[Any]:
    seen: list[Any] = []

    def body(args: Any, ctx: Any) -> str:
        seen.append(args)
        return "seen"

    rt.tools.register(make_tool(name, body))
    return seen


def test_empty_argument_text_means_an_empty_object(rt: Any) -> None:
    seen = recording_tool(rt)
    session = Session()
    batch = rt.tools.execute(logged_batch([ToolCall(id="c0", name="rec", arguments="")], session))
    assert not batch.results[0].result.is_error
    assert seen == [{}]
    assert events_of(session, "tool/call")[0]["arguments"] == {}


def test_argument_text_is_parsed_as_json(rt: Any) -> None:
    seen = recording_tool(rt)
    rt.tools.execute(ToolBatchInput(calls=[ToolCall(id="c0", name="rec", arguments='{"a": [1, 2.5, "x"], "b": null}')]))
    assert seen == [{"a": (1, 2.5, "x"), "b": None}]


def test_arguments_given_as_a_dict_are_used_as_they_are(rt: Any) -> None:
    seen = recording_tool(rt)
    session = Session()
    batch = rt.tools.execute(logged_batch([ToolCall(id="c0", name="rec", arguments={"q": "hello", "n": 3})], session))
    assert not batch.results[0].result.is_error
    assert seen == [{"q": "hello", "n": 3}]
    assert events_of(session, "tool/call")[0]["arguments"] == {"q": "hello", "n": 3}


def test_invalid_json_text_fails_a_define_tool_tool_with_invalid_args_without_running_it(
    rt: Any,
) -> None:
    seen = recording_tool(rt)
    session = Session()
    batch = rt.tools.execute(logged_batch([ToolCall(id="c0", name="rec", arguments="{not json")], session))
    result = batch.results[0].result
    assert result.is_error
    assert code_of(result) == "INVALID_ARGS"
    assert seen == []
    # The raw text is what the model sent: it is what the log keeps.
    assert events_of(session, "tool/call")[0]["arguments"] == "{not json"
    assert events_of(session, "tool/result")[0]["is_error"] is True


def test_invalid_json_text_reaches_a_raw_definition_as_the_raw_string(rt: Any) -> None:
    seen: list[Any] = []

    def body(args: Any, ctx: Any) -> str:
        seen.append(args)
        return "raw"

    rt.tools.register(
        ToolDefinition(
            name="raw",
            description="a raw definition: the runtime does not validate its arguments",
            parameters={"type": "object"},
            output=ToolOutput(schema={"type": "string"}, render=lambda args, value: [text(value)]),
            execute=body,
        )
    )
    batch = rt.tools.execute(ToolBatchInput(calls=[ToolCall(id="c0", name="raw", arguments="{not json")]))
    assert seen == ["{not json"]
    assert batch.results[0].result.value == "raw"


# -- bad input -----------------------------------------------------------------


def never_runs(rt: Any) -> list[str]:
    ran: list[str] = []
    rt.tools.register(make_tool("t", lambda args, ctx: ran.append("body") or "x"))
    rt.events.on("tools/pre-execute", lambda execution, next_: ran.append("pre") or next_())
    return ran


@pytest.mark.parametrize(
    "bad",
    [
        "c1",
        {"id": "c1", "name": "t", "arguments": ""},
        ("c1", "t", ""),
        None,
    ],
    ids=["str", "dict", "tuple", "None"],
)
def test_a_calls_entry_that_is_not_a_tool_call_is_rejected_with_type_error_before_anything_runs(
    rt: Any, bad: Any
) -> None:
    ran = never_runs(rt)
    with pytest.raises(TypeError):
        rt.tools.execute(ToolBatchInput(calls=[ToolCall(id="c0", name="t"), bad]))
    assert ran == []


@pytest.mark.parametrize("bad_id", [1, None, b"c0"], ids=["int", "None", "bytes"])
def test_a_tool_call_whose_id_is_not_a_str_is_rejected_with_type_error_before_anything_runs(
    rt: Any, bad_id: Any
) -> None:
    ran = never_runs(rt)
    with pytest.raises(TypeError):
        rt.tools.execute(ToolBatchInput(calls=[ToolCall(id="c0", name="t"), ToolCall(id=bad_id, name="t")]))
    assert ran == []


def test_a_tool_call_whose_name_is_not_a_str_is_rejected_with_type_error(rt: Any) -> None:
    ran = never_runs(rt)
    with pytest.raises(TypeError):
        rt.tools.execute(ToolBatchInput(calls=[ToolCall(id="c0", name=7)]))  # type: ignore[arg-type]
    assert ran == []


def test_an_empty_batch_gives_an_empty_result(rt: Any) -> None:
    session = Session()
    batch = rt.tools.execute(logged_batch([], session))
    assert batch.results == ()
    assert batch.additional_contexts == ()
    assert batch.concluded is False
    assert session.events() == []


# -- contexts and conclusion -----------------------------------------------------


def note(label: str) -> UserMessage:
    return UserMessage((text(label),), source="test")


def test_deferred_contexts_follow_the_results_in_call_order_whatever_order_calls_finish(
    rt: Any,
) -> None:
    third_done = threading.Event()

    def body(args: Any, ctx: Any) -> str:
        i = args["i"]
        if i == 0:
            must(third_done, "call 2 finished")
        ctx.defer_context(note(f"{i}a"))
        ctx.defer_context(note(f"{i}b"))
        if i == 2:
            third_done.set()
        return f"v{i}"

    rt.tools.register(make_tool("t", body))
    batch = rt.tools.execute(ToolBatchInput(calls=calls("t", "t", "t")))
    expected = tuple(note(f"{i}{s}") for i in range(3) for s in "ab")
    assert batch.additional_contexts == expected
    assert [r.result.additional_contexts for r in batch.results] == [(note(f"{i}a"), note(f"{i}b")) for i in range(3)]


def test_a_success_that_concludes_the_turn_makes_the_batch_concluded(rt: Any) -> None:
    def body(args: Any, ctx: Any) -> str:
        if args["i"] == 1:
            ctx.conclude_turn()
        return "done"

    rt.tools.register(make_tool("t", body))
    batch = rt.tools.execute(ToolBatchInput(calls=calls("t", "t", "t")))
    assert batch.concluded is True
    assert [r.result.concludes_turn for r in batch.results] == [False, True, False]


def test_a_failure_that_asked_to_conclude_the_turn_does_not_conclude_the_batch(rt: Any) -> None:
    def body(args: Any, ctx: Any) -> str:
        ctx.conclude_turn()
        raise RuntimeError("failed after concluding")

    rt.tools.register(make_tool("t", body))
    rt.tools.register(make_tool("plain", lambda args, ctx: "fine"))
    batch = rt.tools.execute(ToolBatchInput(calls=calls("t", "plain")))
    assert batch.results[0].result.is_error
    assert batch.concluded is False


def test_a_batch_where_nothing_concludes_is_not_concluded(rt: Any) -> None:
    rt.tools.register(make_tool("t", lambda args, ctx: "x"))
    batch = rt.tools.execute(ToolBatchInput(calls=calls("t", "t")))
    assert batch.concluded is False
    assert batch.additional_contexts == ()
