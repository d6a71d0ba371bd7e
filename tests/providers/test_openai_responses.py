"""providers.openai_responses: a response's function_call items in,
function_call_output items out, valid as the SDK's input item params."""

from __future__ import annotations

from typing import Any, Literal, get_args, get_origin, get_type_hints

import pytest
from openai.types.responses import (
    FunctionToolParam,
    Response,
    ResponseCompletedEvent,
    ResponseInputItemParam,
    ResponseOutputItemDoneEvent,
)
from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming

from dsh_actors import ToolCall, ToolRuntime
from dsh_actors.providers import ProviderFormatError, openai_responses

from .helpers import ERROR_CASES, ERROR_IDS, PNG, aborted_batch, kit, run, validate, validate_all

RESPONSE: dict[str, Any] = {
    "id": "resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b",
    "object": "response",
    "created_at": 1741476542,
    "status": "completed",
    "model": "gpt-4.1-2025-04-14",
    "output": [
        {"id": "rs_67ccd2bf8c7c8190a48e2c2d1f1c3e0e", "type": "reasoning", "summary": []},
        {"id": "fc_67ccd3c3a0a48190b3b0d4a7b0c1ed1b", "type": "function_call", "status": "completed",
         "call_id": "call_12345xyz", "name": "read_file", "arguments": "{\"path\":\"src/app.py\"}"},
        {"id": "fc_67ccd3c3a0a48190b3b0d4a7b0c1ed1c", "type": "function_call", "status": "completed",
         "call_id": "call_67890abc", "name": "screenshot", "arguments": "{}"},
    ],
    "parallel_tool_calls": True,
    "tool_choice": "auto",
    "tools": [
        {"type": "function", "name": "read_file", "description": "Read a file.", "strict": False,
         "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
        {"type": "function", "name": "screenshot", "description": "Take a screenshot.", "strict": False,
         "parameters": {"type": "object", "properties": {}}},
    ],
}  # fmt: skip

EXPECTED = (
    ToolCall("call_12345xyz", "read_file", '{"path":"src/app.py"}'),
    ToolCall("call_67890abc", "screenshot", "{}"),
)


@pytest.fixture
def tools_rt(rt: ToolRuntime) -> ToolRuntime:
    kit(rt)
    return rt


def test_a_response_its_output_and_their_dicts_give_the_function_calls_skipping_reasoning() -> None:
    response = Response.model_validate(RESPONSE)
    for source in (response, response.output, RESPONSE, RESPONSE["output"], response.model_dump()):
        assert openai_responses.calls(source) == EXPECTED
    assert openai_responses.calls(response.output[1]) == EXPECTED[:1]


def test_a_round_trip_answers_every_call_with_sdk_valid_items(tools_rt: ToolRuntime) -> None:
    response = Response.model_validate(RESPONSE)
    items = openai_responses.results(run(tools_rt, openai_responses.calls(response)))
    assert [i["call_id"] for i in items] == ["call_12345xyz", "call_67890abc"]
    assert items[0] == {"type": "function_call_output", "call_id": "call_12345xyz", "output": "contents of src/app.py"}
    validate_all(ResponseInputItemParam, items)
    validate_all(FunctionToolParam, openai_responses.tools(tools_rt))
    request = {
        "model": "gpt-4.1",
        "previous_response_id": response.id,
        "input": list(items),
        "tools": openai_responses.tools(tools_rt),
    }
    validate(ResponseCreateParamsNonStreaming, request)


def test_images_are_input_image_parts_of_the_output(tools_rt: ToolRuntime) -> None:
    (item,) = openai_responses.results(run(tools_rt, [ToolCall("c1", "screenshot", "{}")]))
    assert item["output"] == [
        {"type": "input_text", "text": "the login page"},
        {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}", "detail": "auto"},
    ]
    validate(ResponseInputItemParam, item)


def test_an_image_type_the_provider_refuses_becomes_a_note(tools_rt: ToolRuntime) -> None:
    (item,) = openai_responses.results(run(tools_rt, [ToolCall("c1", "diagram", "{}")]))
    assert "image/svg+xml was left out" in item["output"]
    validate(ResponseInputItemParam, item)


@pytest.mark.parametrize(("call", "code", "start"), ERROR_CASES, ids=ERROR_IDS)
def test_each_error_kind_is_marked_by_its_text(
    tools_rt: ToolRuntime, call: ToolCall, code: str | None, start: str
) -> None:
    (item,) = openai_responses.results(run(tools_rt, [call]))
    assert item["call_id"] == call.id and item["output"].startswith(start), item
    validate(ResponseInputItemParam, item)


def test_additional_contexts_follow_as_user_message_items_in_order(tools_rt: ToolRuntime) -> None:
    batch = run(tools_rt, [ToolCall("c1", "note", '{"text": "first"}'), ToolCall("c2", "note", '{"text": "second"}')])
    items = openai_responses.results(batch)
    assert [i["type"] for i in items] == ["function_call_output", "function_call_output", "message", "message"]
    assert items[2] == {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "first"},
            {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}", "detail": "auto"},
        ],
    }
    assert items[3]["content"][0] == {"type": "input_text", "text": "second"}
    validate_all(ResponseInputItemParam, items)


def test_a_concluded_turn_and_an_aborted_batch(tools_rt: ToolRuntime) -> None:
    concluded = openai_responses.results(run(tools_rt, [ToolCall("c1", "finish", "{}")]))
    assert concluded.concluded and concluded.concluded_by == ("c1",)
    items = openai_responses.results(aborted_batch(tools_rt))
    assert [(i["call_id"], i["output"]) for i in items] == [
        ("a1", "Error: tool call aborted"),
        ("a2", "Error: tool call aborted before dispatch"),
        ("a3", "Error: tool call aborted before dispatch"),
    ]
    validate_all(ResponseInputItemParam, items)


def test_tools_are_responses_function_tools(tools_rt: ToolRuntime) -> None:
    offered = openai_responses.tools(tools_rt)
    assert [{"name": t["name"], "description": t["description"], "parameters": t["parameters"]} for t in offered] == (
        tools_rt.tools.schemas()
    )
    assert {(t["type"], t["strict"]) for t in offered} == {("function", False)}


#: incomplete_details.reason: what the refusal says happened and how to fix it.
CUT_RESPONSES = {
    "max_output_tokens": (
        'the response stopped at max_output_tokens (status "incomplete")',
        "ask again with a higher max_output_tokens",
    ),
    "content_filter": (
        'content filters omitted some of the response\'s output (status "incomplete", reason "content_filter")',
        "change the request, or handle it as the model's refusal",
    ),
}


@pytest.mark.parametrize("reason", CUT_RESPONSES)
def test_a_response_cut_inside_a_function_call_runs_no_call(reason: str) -> None:
    what, fix = CUT_RESPONSES[reason]
    cut: dict[str, Any] = dict(RESPONSE, status="incomplete", incomplete_details={"reason": reason})
    cut["output"] = [*RESPONSE["output"][:2], dict(RESPONSE["output"][2], status="incomplete", arguments='{"x')]
    for source in (Response.model_validate(cut), cut):
        with pytest.raises(ProviderFormatError) as caught:
            openai_responses.calls(source)
        assert str(caught.value) == (
            f"response.incomplete_details.reason: {what} with a tool call in it: its arguments may be cut short, "
            f"so no call is run; {fix}"
        )
    text_only = dict(cut, output=[RESPONSE["output"][0]])
    assert openai_responses.calls(Response.model_validate(text_only)) == ()


def test_a_response_steered_to_a_stop_gives_its_whole_function_calls() -> None:
    # (The SDK: "steered means the response stopped at a safe output
    # boundary": its items are whole.)
    steered = dict(RESPONSE, status="incomplete", incomplete_details={"reason": "steered"})
    assert openai_responses.calls(Response.model_validate(steered)) == EXPECTED


UNFINISHED = {
    "queued": 'the response is not finished yet (status "queued"): wait until it is '
    "(client.responses.retrieve(response.id)) and pass that",
    "in_progress": 'the response is not finished yet (status "in_progress"): wait until it is '
    "(client.responses.retrieve(response.id)) and pass that",
    "failed": 'the response failed (status "failed", error server_error: The model failed): ask again',
    "cancelled": 'the response was cancelled (status "cancelled"): ask again if the turn should go on',
}


@pytest.mark.parametrize("status", UNFINISHED)
def test_a_response_without_a_finished_answer_is_refused_whatever_it_holds(status: str) -> None:
    # (A background response polled too soon, or one that ended without its
    # output: () would end the loop as if the model had answered.)
    error = {"code": "server_error", "message": "The model failed"} if status == "failed" else None
    for output in ([], RESPONSE["output"][:2], RESPONSE["output"]):
        response = dict(RESPONSE, status=status, error=error, output=output)
        for source in (Response.model_validate(response), response):
            with pytest.raises(ProviderFormatError) as caught:
                openai_responses.calls(source)
            assert caught.value.path == "response.status"
            assert caught.value.problem == UNFINISHED[status]


def test_a_conversation_kept_by_hand_gives_only_the_calls_it_has_not_answered(tools_rt: ToolRuntime) -> None:
    first = Response.model_validate(dict(RESPONSE, output=RESPONSE["output"][1:2]))
    conversation: list[Any] = [{"type": "message", "role": "user", "content": "Look at app.py"}]
    conversation += [item.model_dump(exclude_none=True) for item in first.output]
    conversation += openai_responses.results(run(tools_rt, openai_responses.calls(first)))
    second = Response.model_validate(dict(RESPONSE, output=RESPONSE["output"][2:]))
    conversation += [item.model_dump(exclude_none=True) for item in second.output]
    validate(ResponseCreateParamsNonStreaming, {"model": "gpt-4.1", "input": conversation}, exact=False)
    # (call_12345xyz was answered in the first turn: it is not run again.)
    assert openai_responses.calls(conversation) == openai_responses.calls(second) == EXPECTED[1:]


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ({"id": "resp_1"}, 'response: expected a response (with "output")'),
        ({"output": [{"type": "custom_tool_call", "call_id": "c", "name": "x", "input": "y"}]},
         "response.output[0].type: a 'custom_tool_call' item asks the client to run something"),
        ({"output": [{"type": "function_call", "id": "fc_1", "name": "x", "arguments": "{}"}]},
         "response.output[0]: missing 'call_id'"),
        ({"output": [{"summary": []}]}, "response.output[0].type: an output item needs a string type, got null"),
        ("text", "response: expected a response or its output items, got a string"),
    ],
)  # fmt: skip
def test_a_response_it_cannot_read_is_one_error_naming_the_field(response: Any, expected: str) -> None:
    with pytest.raises(ProviderFormatError) as caught:
        openai_responses.calls(response)
    assert str(caught.value).startswith(expected), str(caught.value)


def test_a_stream_event_or_a_list_of_responses_is_refused_naming_what_to_pass() -> None:
    response = Response.model_validate(RESPONSE)
    completed = ResponseCompletedEvent(type="response.completed", response=response, sequence_number=9)
    done = ResponseOutputItemDoneEvent(
        type="response.output_item.done", item=response.output[1], output_index=1, sequence_number=5
    )
    for given, where in ((completed, "response.type"), (done, "response.type"), ([done], "response[0].type")):
        with pytest.raises(ProviderFormatError) as caught:
            openai_responses.calls(given)
        assert caught.value.path == where
        assert caught.value.problem.endswith(
            "is a stream event, not a response: assemble the stream first and pass the response it makes "
            "(with the SDK: client.responses.stream(...), then stream.get_final_response())"
        )
    assert openai_responses.calls(completed.response) == EXPECTED
    with pytest.raises(ProviderFormatError) as caught:
        openai_responses.calls([response])
    assert str(caught.value) == (
        "response[0]: a response, not an output item (a list is read as response.output): pass the response itself"
    )


@pytest.mark.parametrize(
    ("status", "fix"),
    [
        ("incomplete", "ask again (with a higher max_output_tokens if the response stopped at it)"),
        ("in_progress", "pass the finished response (a stream's final response, or the item of its "
                        "response.output_item.done event)"),
    ],
)  # fmt: skip
def test_a_function_call_item_that_did_not_finish_runs_no_call(status: str, fix: str) -> None:
    # (Its arguments, cut short, were run wherever the response did not say
    # it was cut: its output list, the item alone, or a reason not in CUT_OFF.)
    unfinished = dict(RESPONSE["output"][2], status=status, arguments='{"x')
    output = [*RESPONSE["output"][:2], unfinished]
    problem = f'the function call is "{status}": its arguments may be unfinished, so no call is run; {fix}'
    other_reason = dict(RESPONSE, status="incomplete", incomplete_details={"reason": "max_messages"}, output=output)
    for source, where in (
        (Response.model_validate(other_reason), "response.output[2]"),
        (other_reason, "response.output[2]"),
        (output, "response[2]"),
        (Response.model_validate(other_reason).output[2], "response"),
        (unfinished, "response"),
    ):
        with pytest.raises(ProviderFormatError) as caught:
            openai_responses.calls(source)
        assert (caught.value.path, caught.value.problem) == (f"{where}.status", problem)
    # One that a function_call_output of the list answers is not run: nothing to refuse.
    answered = [*output, {"type": "function_call_output", "call_id": unfinished["call_id"], "output": "x"}]
    assert openai_responses.calls(answered) == EXPECTED[:1]


def test_every_input_item_type_of_the_sdk_is_read_skipped_or_refused() -> None:
    # (A conversation kept by hand holds input items: an item_reference was
    # "unknown output item type".)
    from openai.types.responses import ResponseInputItemParam

    found: set[str] = set()
    for member in get_args(ResponseInputItemParam):
        found.update(arg for arg in _literals(get_type_hints(member)["type"]) if isinstance(arg, str))
    known = {"function_call", "tool_search_call"} | openai_responses.SKIPPED | openai_responses.CLIENT_CALLS
    assert {"function_call", "item_reference"} <= found
    assert found <= known, f"input item types the reader does not know: {sorted(found - known)}"


def _literals(annotation: Any) -> list[Any]:
    if get_origin(annotation) is Literal:
        return list(get_args(annotation))
    return [value for arg in get_args(annotation) for value in _literals(arg)]


#: Input items of a conversation kept by hand, which hold nothing to run.
INPUTS: list[Any] = [
    {"role": "developer", "content": "Be brief."},
    {"role": "user", "content": [{"type": "input_text", "text": "Look at app.py"}]},
    {"type": "item_reference", "id": "rs_67ccd2bf8c7c8190a48e2c2d1f1c3e0e"},
]


def test_a_conversation_kept_by_hand_skips_its_input_messages_and_references() -> None:
    # (A message without a type, the SDK's EasyInputMessageParam, was
    # refused as an output item without a type.)
    conversation = [*INPUTS, RESPONSE["output"][1]]
    validate(ResponseCreateParamsNonStreaming, {"model": "gpt-4.1", "input": conversation}, exact=False)
    assert openai_responses.calls(conversation) == EXPECTED[:1]


def test_a_message_of_another_api_in_a_list_is_refused_naming_its_reader() -> None:
    # (A list holding an Anthropic message, the SDK's or its dump, gave ():
    # its tool_use blocks unread, the loop ended as if the model had answered.)
    from anthropic.types import Message

    claude = Message.model_validate({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a"}}],
        "stop_reason": "tool_use", "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1},
    })  # fmt: skip
    anthropic_message = "an Anthropic message (read it with anthropic.calls), not a Responses API item"
    for given, where, problem in (
        ([claude], "response[0]", anthropic_message),
        ([claude.model_dump()], "response[0]", anthropic_message),
        ([{"type": "message", "role": "assistant", "content": claude.content}], "response[0]", anthropic_message),
        ([*INPUTS, {"role": "assistant", "content": claude.content}], "response[3]", anthropic_message),
        ([{"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function"}]}],
         "response[0].tool_calls", "a Chat Completions message (read it with openai.calls), not a Responses API item"),
        ([{"role": "tool", "tool_call_id": "c", "content": "x"}], "response[0].role",
         'an input message\'s role is "user", "assistant", "system" or "developer", got \'tool\''),
    ):  # fmt: skip
        with pytest.raises(ProviderFormatError) as caught:
            openai_responses.calls(given)
        assert (caught.value.path, caught.value.problem) == (where, problem)
