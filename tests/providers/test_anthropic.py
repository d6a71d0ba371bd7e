"""providers.anthropic (Messages): a message with several tool_use blocks in,
one user message of tool_result blocks out, valid as the SDK's params."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest
from anthropic import Anthropic
from anthropic.types import Message, MessageParam, ToolParam
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming

from dsh_actors import Accept, Block, ImageBlock, ToolCall, ToolRuntime, text
from dsh_actors.providers import ProviderFormatError, anthropic

from .helpers import ERROR_CASES, ERROR_IDS, PNG, aborted_batch, kit, run, validate

MESSAGE: dict[str, Any] = {
    "id": "msg_01Aq9w938a90dw8q",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5-20250929",
    "content": [
        {"type": "thinking", "thinking": "I should read both files and look at the page.", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"},
        {"type": "text", "text": "I'll read both files and take a screenshot."},
        {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "read_file", "input": {"path": "src/app.py"}},
        {"type": "tool_use", "id": "toolu_01B09q90qw90lq917835lq9", "name": "read_file", "input": {"path": "README.md"}},
        {"type": "tool_use", "id": "toolu_01C09q90qw90lq917835lq9", "name": "screenshot", "input": {}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {"input_tokens": 512, "output_tokens": 96},
}  # fmt: skip

IDS = ["toolu_01A09q90qw90lq917835lq9", "toolu_01B09q90qw90lq917835lq9", "toolu_01C09q90qw90lq917835lq9"]
IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}


@pytest.fixture
def tools_rt(rt: ToolRuntime) -> ToolRuntime:
    kit(rt)
    return rt


def test_a_message_its_content_and_their_dicts_give_the_tool_use_blocks_skipping_the_rest() -> None:
    message = Message.model_validate(MESSAGE)
    expected = (
        ToolCall(IDS[0], "read_file", {"path": "src/app.py"}),
        ToolCall(IDS[1], "read_file", {"path": "README.md"}),
        ToolCall(IDS[2], "screenshot", {}),
    )
    for source in (message, message.content, MESSAGE, MESSAGE["content"], message.model_dump()):
        assert anthropic.calls(source) == expected
    assert anthropic.calls(message.content[3]) == expected[1:2]


def test_a_round_trip_is_one_user_message_of_tool_results_in_model_order(tools_rt: ToolRuntime) -> None:
    message = Message.model_validate(MESSAGE)
    replies = anthropic.results(run(tools_rt, anthropic.calls(message)))
    (reply,) = replies
    assert reply["role"] == "user"
    assert [b["tool_use_id"] for b in reply["content"]] == IDS
    assert reply["content"][0] == {
        "type": "tool_result",
        "tool_use_id": IDS[0],
        "content": "contents of src/app.py",
        "is_error": False,
    }
    assert reply["content"][2]["content"] == [{"type": "text", "text": "the login page"}, IMAGE]
    validate(MessageParam, reply)
    for tool in anthropic.tools(tools_rt):
        validate(ToolParam, tool)
    request = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": "Look at the app."},
                     {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]},
                     reply],
        "tools": anthropic.tools(tools_rt),
    }  # fmt: skip
    validate(MessageCreateParamsNonStreaming, request, exact=False)


def test_an_image_type_the_api_refuses_becomes_a_note_and_reasoning_becomes_text(tools_rt: ToolRuntime) -> None:
    (reply,) = anthropic.results(run(tools_rt, [ToolCall("c1", "diagram", "{}"), ToolCall("c2", "think", "{}")]))
    assert "image/svg+xml was left out" in reply["content"][0]["content"]
    assert reply["content"][1]["content"] == [{"type": "text", "text": "hmm"}, {"type": "text", "text": "decided"}]
    validate(MessageParam, reply)


@pytest.mark.parametrize(("call", "code", "start"), ERROR_CASES, ids=ERROR_IDS)
def test_each_error_kind_is_marked_is_error(
    tools_rt: ToolRuntime, call: ToolCall, code: str | None, start: str
) -> None:
    (reply,) = anthropic.results(run(tools_rt, [call]))
    (block,) = reply["content"]
    assert block["tool_use_id"] == call.id and block["is_error"] is True
    assert block["content"].startswith(start), block
    validate(MessageParam, reply)


def test_additional_contexts_follow_the_tool_results_in_order(tools_rt: ToolRuntime) -> None:
    batch = run(tools_rt, [ToolCall("c1", "note", '{"text": "first"}'), ToolCall("c2", "note", '{"text": "second"}')])
    (reply,) = anthropic.results(batch)
    assert [b["type"] for b in reply["content"]] == ["tool_result", "tool_result", "text", "image", "text", "image"]
    assert reply["content"][2:] == [{"type": "text", "text": "first"}, IMAGE, {"type": "text", "text": "second"}, IMAGE]
    validate(MessageParam, reply)


def test_a_concluded_turn_and_an_aborted_batch(tools_rt: ToolRuntime) -> None:
    concluded = anthropic.results(run(tools_rt, [ToolCall("c1", "finish", "{}")]))
    assert concluded.concluded and concluded.concluded_by == ("c1",)
    (reply,) = anthropic.results(aborted_batch(tools_rt))
    assert [(b["tool_use_id"], b["content"], b["is_error"]) for b in reply["content"]] == [
        ("a1", "Error: tool call aborted", True),
        ("a2", "Error: tool call aborted before dispatch", True),
        ("a3", "Error: tool call aborted before dispatch", True),
    ]
    validate(MessageParam, reply)


def test_tools_name_the_parameters_input_schema(tools_rt: ToolRuntime) -> None:
    assert anthropic.tools(tools_rt) == [
        {"name": s["name"], "description": s["description"], "input_schema": s["parameters"]}
        for s in tools_rt.tools.schemas()
    ]


def test_a_text_only_answer_has_no_calls() -> None:
    final = dict(MESSAGE, content=[{"type": "text", "text": "Done."}], stop_reason="end_turn")
    assert anthropic.calls(Message.model_validate(final)) == ()
    assert anthropic.calls({"role": "assistant", "content": "Done."}) == ()


def test_a_paused_turn_has_no_calls_and_goes_on_with_the_message_as_it_is() -> None:
    # pause_turn: the API paused a long turn of server tools; its blocks are
    # whole (not cut off: no refusal), a server tool call may wait for its
    # result, and it holds no tool_use for the client to run.
    search = {"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search", "input": {"query": "pykka"}}
    found = {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01", "content": [
        {"type": "web_search_result", "url": "https://pykka.org", "title": "Pykka", "encrypted_content": "Eo8B",
         "page_age": None},
    ]}  # fmt: skip
    paused = Message.model_validate(
        dict(
            MESSAGE,
            content=[
                {"type": "text", "text": "Let me search."},
                search,
                found,
                {**search, "id": "srvtoolu_02"},  # (paused before its result)
            ],
            stop_reason="pause_turn",
        )
    )
    assert paused.stop_reason == "pause_turn"
    assert anthropic.calls(paused) == ()
    # The next request carries the paused message as it is, with no user
    # message after it (the module docstring's loop).
    request = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "messages": [
            {"role": "user", "content": "What is pykka?"},
            {"role": "assistant", "content": [block.model_dump() for block in paused.content]},
        ],
    }
    validate(MessageCreateParamsNonStreaming, request, exact=False)


def test_a_message_cut_off_at_max_tokens_inside_a_tool_call_runs_no_call() -> None:
    # The SDK's stream accumulator completes the cut-off partial JSON: the
    # input reads as a whole object, shorter than the model meant it.
    cut = dict(
        MESSAGE,
        content=[{"type": "tool_use", "id": "toolu_1", "name": "keep_only", "input": {"keep": ["a.txt", "b.txt"]}}],
        stop_reason="max_tokens",
    )
    with pytest.raises(ProviderFormatError) as caught:
        anthropic.calls(Message.model_validate(cut))
    assert str(caught.value) == (
        "response.stop_reason: the message stopped at max_tokens with a tool call in it: its arguments may be "
        "cut short, so no call is run; ask again with a higher max_tokens"
    )
    text_only = dict(MESSAGE, content=[{"type": "text", "text": "Long answ"}], stop_reason="max_tokens")
    assert anthropic.calls(Message.model_validate(text_only)) == ()


def _stream(stop_reason: str) -> tuple[list[Any], Message]:
    """A streamed message that stops with ``stop_reason`` inside a
    ``tool_use`` input, through the SDK's client (over a mock transport): the
    raw events and the message its stream helper assembles."""
    events = [
        {"type": "message_start", "message": {**MESSAGE, "content": [], "stop_reason": None}},
        {"type": "content_block_start", "index": 0,
         "content_block": {"type": "tool_use", "id": "toolu_1", "name": "write_file", "input": {}}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "input_json_delta", "partial_json": '{"path": "todo.md", "content": "- tests\\n- do'}},
        {"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": None},
         "usage": {"output_tokens": 5}},
        {"type": "message_stop"},
    ]  # fmt: skip
    body = "".join(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n" for event in events)
    transport = httpx2.MockTransport(
        lambda request: httpx2.Response(200, headers={"content-type": "text/event-stream"}, text=body)
    )
    request: Any = {"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": [{"role": "user", "content": "Go."}]}
    with Anthropic(api_key="test", http_client=httpx2.Client(transport=transport), max_retries=0) as client:
        raw = list(client.messages.create(**request, stream=True))
        with client.messages.stream(**request) as stream:
            return raw, stream.get_final_message()


@pytest.mark.parametrize(
    ("stop_reason", "stopped", "fix"),
    [
        ("max_tokens", "the message stopped at max_tokens", "ask again with a higher max_tokens"),
        ("model_context_window_exceeded",
         'the message filled the model\'s context window (stop_reason "model_context_window_exceeded")',
         "shorten the conversation (such as its longest tool results) and ask again"),
        ("refusal", 'the message was stopped by a refusal (stop_reason "refusal")',
         "the model declined to go on (the message's stop_details say why): change the request, or ask another model"),
    ],
)  # fmt: skip
def test_a_streamed_tool_call_cut_off_by_any_early_stop_runs_no_call(stop_reason: str, stopped: str, fix: str) -> None:
    # (The stream helper completes the cut partial JSON: the input reads
    # {"path": "todo.md"}, and only max_tokens used to be refused.)
    _, message = _stream(stop_reason)
    assert message.stop_reason == stop_reason
    assert [block.model_dump()["input"] for block in message.content] == [{"path": "todo.md"}]
    with pytest.raises(ProviderFormatError) as caught:
        anthropic.calls(message)
    assert str(caught.value) == (
        f"response.stop_reason: {stopped} with a tool call in it: its arguments may be cut short, "
        f"so no call is run; {fix}"
    )


def test_a_stream_event_or_the_conversation_is_refused_naming_what_to_pass() -> None:
    raw, message = _stream("tool_use")
    assert [call.name for call in anthropic.calls(message)] == ["write_file"]
    for event in (raw[0], raw[1], [raw[0]]):
        with pytest.raises(ProviderFormatError) as caught:
            anthropic.calls(event)
        assert "is a stream event, not a message: assemble the stream first" in str(caught.value)
        assert "stream.get_final_message()" in str(caught.value)
    conversation = [{"role": "user", "content": "Go."}, {"role": "assistant", "content": message.content}]
    for given in (conversation, [message]):
        with pytest.raises(ProviderFormatError) as caught:
            anthropic.calls(given)
        assert str(caught.value) == (
            "response[0]: a message, not a content block (a list is read as one message's content, not as the "
            "conversation): pass the assistant message itself (messages[-1], or the SDK's Message)"
        )


def test_a_failure_holding_an_image_sends_text_only(tools_rt: ToolRuntime) -> None:
    # The API refuses an is_error tool_result with anything but text ("all
    # content must be type 'text' if 'is_error' is true").
    def post(execution: Any, result: Any, next_: Any) -> Any:
        if execution.name == "screenshot":
            return Block([text("Withheld:"), ImageBlock(PNG, "image/png")])
        if execution.name == "think":
            return Block([ImageBlock(PNG, "image/png")])
        return next_()

    tools_rt.events.on("tools/post-execute", post)
    (reply,) = anthropic.results(run(tools_rt, [ToolCall("c1", "screenshot", "{}"), ToolCall("c2", "think", "{}")]))
    note = {"type": "text", "text": "[an image of type image/png was left out: an error result takes text only]"}
    assert reply["content"] == [
        {"type": "tool_result", "tool_use_id": "c1", "content": [{"type": "text", "text": "Withheld:"}, note],
         "is_error": True},
        {"type": "tool_result", "tool_use_id": "c2", "content": note["text"], "is_error": True},
    ]  # fmt: skip
    validate(MessageParam, reply)


def test_whitespace_only_text_is_left_out_and_no_error_is_empty(tools_rt: ToolRuntime) -> None:
    # The API refuses whitespace-only text ("text content blocks must contain
    # non-whitespace text") and an empty error. A success left with nothing
    # has no content, as an empty one had.
    def post(execution: Any, result: Any, next_: Any) -> Any:
        if execution.name == "diagram":
            return Block([text("  ")])
        blocks = {"screenshot": [text(" \n ")], "think": [text("kept"), text("\t")]}
        return Accept(content=blocks[execution.name]) if execution.name in blocks else next_()

    tools_rt.events.on("tools/post-execute", post)
    calls = [ToolCall("c1", "screenshot", "{}"), ToolCall("c2", "think", "{}"), ToolCall("c3", "diagram", "{}"),
             ToolCall("c4", "note", '{"text": " "}')]  # fmt: skip
    (reply,) = anthropic.results(run(tools_rt, calls))
    assert reply["content"] == [
        {"type": "tool_result", "tool_use_id": "c1", "is_error": False},
        {"type": "tool_result", "tool_use_id": "c2", "content": "kept", "is_error": False},
        {"type": "tool_result", "tool_use_id": "c3", "content": "Error", "is_error": True},
        {"type": "tool_result", "tool_use_id": "c4", "content": "noted", "is_error": False},
        IMAGE,
    ]
    validate(MessageParam, reply)


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ({"id": "msg_1"}, 'response: expected a message (with "role" and "content")'),
        ({"role": "user", "content": []}, "response.role: a 'user' message holds no tool calls"),
        ([{"type": "tool_use", "id": "a", "name": "x", "input": "text"}], "response[0].input: must be an object, got a string"),
        ([{"type": "tool_use", "name": "x", "input": {}}], "response[0]: missing 'id'"),
        ([{"text": "no type"}], "response[0].type: a content block needs a string type, got null"),
        ([{"type": "tool_use", "id": "a", "name": "x"}, {"type": "tool_use", "id": "a", "name": "y"}],
         'response[1]: duplicate call id "a" (also the id of response[0])'),
    ],
)  # fmt: skip
def test_a_message_it_cannot_read_is_one_error_naming_the_field(response: Any, expected: str) -> None:
    with pytest.raises(ProviderFormatError) as caught:
        anthropic.calls(response)
    assert str(caught.value).startswith(expected), str(caught.value)
