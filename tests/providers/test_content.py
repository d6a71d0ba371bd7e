"""The content rules the three adapters share: an image's media type is
compared and sent without its parameters, and empty text is never sent (a
context left with nothing is not sent at all)."""

from __future__ import annotations

from typing import Any

import pytest
from anthropic.types import MessageParam
from openai.types.chat import ChatCompletionMessageParam
from openai.types.responses import ResponseInputItemParam

from dsh_actors import ImageBlock, ToolCall, ToolOutput, ToolRuntime, UserMessage, define_tool, text
from dsh_actors.providers import anthropic, openai, openai_responses

from .helpers import PNG, run, validate, validate_all

URL = f"data:image/png;base64,{PNG}"


def _register(rt: ToolRuntime, name: str, content: list[Any], *contexts: list[Any]) -> None:
    """A tool whose result is ``content`` and that defers each of ``contexts``."""

    def execute(args: Any, ctx: Any) -> str:
        for blocks in contexts:
            ctx.defer_context(UserMessage(blocks, source=name))
        return name

    rt.tools.register(define_tool(
        name=name, description=f"The {name} tool.", parameters={},
        output=ToolOutput(schema={"type": "string"}, render=lambda args, value: content), execute=execute,
    ))  # fmt: skip


@pytest.mark.parametrize("mime", ["image/png; name=shot.png", "Image/PNG ; charset=binary", "image/png"])
def test_an_image_whose_media_type_has_parameters_is_sent_with_the_bare_type(rt: ToolRuntime, mime: str) -> None:
    # (It was left out with a note by all three: the whole string was
    # compared with image/png.)
    image = ImageBlock(PNG, mime)
    _register(rt, "photo", [image], [image])
    batch = run(rt, [ToolCall("c1", "photo", "{}")])

    chat = openai.results(batch)
    assert chat == [
        {"role": "tool", "tool_call_id": "c1", "content": "[image 1 (image/png) is attached to the next user message]"},
        {"role": "user", "content": [{"type": "text", "text": "The images returned by tool call c1:"},
                                     {"type": "image_url", "image_url": {"url": URL}}]},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": URL}}]},
    ]  # fmt: skip
    validate_all(ChatCompletionMessageParam, chat)

    part = {"type": "input_image", "image_url": URL, "detail": "auto"}
    responses = openai_responses.results(batch)
    assert responses == [
        {"type": "function_call_output", "call_id": "c1", "output": [part]},
        {"type": "message", "role": "user", "content": [part]},
    ]
    validate_all(ResponseInputItemParam, responses)

    block = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
    (message,) = anthropic.results(batch)
    assert message["content"] == [
        {"type": "tool_result", "tool_use_id": "c1", "content": [block], "is_error": False},
        block,
    ]
    validate(MessageParam, message)


def test_empty_text_is_never_sent_and_a_context_left_empty_is_not_sent(rt: ToolRuntime) -> None:
    # (Chat dropped a context of empty text; Responses sent it as an empty
    # input_text message, and both sent empty parts beside other content.)
    image = ImageBlock(PNG, "image/png")
    _register(rt, "sparse", [text(""), text("found")], [text("")], [text(""), image])
    batch = run(rt, [ToolCall("c1", "sparse", "{}")])

    chat = openai.results(batch)
    assert chat == [
        {"role": "tool", "tool_call_id": "c1", "content": "found"},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": URL}}]},
    ]
    validate_all(ChatCompletionMessageParam, chat)

    responses = openai_responses.results(batch)
    assert responses == [
        {"type": "function_call_output", "call_id": "c1", "output": "found"},
        {"type": "message", "role": "user", "content": [{"type": "input_image", "image_url": URL, "detail": "auto"}]},
    ]
    validate_all(ResponseInputItemParam, responses)

    (message,) = anthropic.results(batch)
    assert message["content"] == [
        {"type": "tool_result", "tool_use_id": "c1", "content": "found", "is_error": False},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
    ]
    validate(MessageParam, message)
