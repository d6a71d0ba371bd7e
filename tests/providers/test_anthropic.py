"""providers.anthropic (Messages): a message with several tool_use blocks in,
one user message of tool_result blocks out, valid as the SDK's params."""

from __future__ import annotations

from typing import Any

import pytest
from anthropic.types import Message, MessageParam, ToolParam
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming

from dsh_actors import ToolCall, ToolRuntime
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


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ({"id": "msg_1"}, 'response: expected a message (with "role" and "content")'),
        ({"role": "user", "content": []}, "response.role: a 'user' message holds no tool calls"),
        ([{"type": "tool_use", "id": "a", "name": "x", "input": "text"}], "response[0].input: must be an object, got a string"),
        ([{"type": "tool_use", "name": "x", "input": {}}], "response[0]: missing 'id'"),
        ([{"text": "no type"}], "response[0].type: a content block needs a string type, got null"),
        ([{"type": "tool_use", "id": "a", "name": "x"}, {"type": "tool_use", "id": "a", "name": "y"}],
         "response[1]: duplicate call id 'a' (also at response[0])"),
    ],
)  # fmt: skip
def test_a_message_it_cannot_read_is_one_error_naming_the_field(response: Any, expected: str) -> None:
    with pytest.raises(ProviderFormatError) as caught:
        anthropic.calls(response)
    assert str(caught.value).startswith(expected), str(caught.value)
