"""OpenAI Chat Completions: ``tool_calls`` in, ``role: "tool"`` messages out.

* :func:`calls` reads a chat completion (``{"choices": [...]}``, exactly
  one choice), one choice (``{"message": ...}``), an assistant message
  (``{"role": "assistant", ...}``, or a dict with ``tool_calls``), or its
  bare ``tool_calls`` list, as SDK objects or dicts. A message without
  tool calls (a final answer, a refusal) gives ``()``; one with a
  ``function_call`` (the deprecated ``functions`` parameter's) and anything
  else (an
  Anthropic message, a Responses API response, ``{}``, an object whose
  ``model_dump()`` raises) is a :class:`~dsh_actors.providers.ProviderFormatError`,
  never ``()``, so a loop handed the wrong shape does not stop as if the
  model had answered; a streamed chunk, or the conversation's list of
  messages, is named as such with what to pass instead. Argument text is
  kept as text: the executor parses
  it, so arguments that are not JSON fail their own call ``INVALID_ARGS``
  instead of the whole response.
* :func:`results` gives the messages that follow the assistant message:
  one ``{"role": "tool", "tool_call_id", "content"}`` per call, in model
  order; then, when some results hold images, one user message with them
  (a tool message takes only text, so its text says where each image
  went); then one user message per additional context, in order. A failure
  is marked the way Chat Completions expects: by its text, which starts
  ``Error: `` (the pipeline's failure content; a policy may have replaced
  it, and an emptied one says ``Error: <message>``).
* :func:`tools` gives the ``tools`` request parameter: ``{"type":
  "function", "function": {"name", "description", "parameters"}}`` for
  each tool the agent's executor offers (under PTC, only ``run_code``).
  With ``strict=True`` each tool whose schema can be made strict is sent
  with ``"strict": true`` and its parameters in the strict form
  (:func:`dsh_actors.schema.strict_json_schema`: every object closed,
  every property required, the optional ones nullable); any other with
  ``"strict": false``. The ``null`` a strict model then sends for an
  optional parameter is read as absent by the pipeline.

Content: one text block becomes a string; several become text parts;
empty text is left out (a context left with nothing is not sent). Images
become ``image_url`` parts with a ``data:`` URL of the bare media type
(without parameters); an image of a type the provider does not accept
(:data:`~dsh_actors.providers.IMAGE_TYPES`) becomes a note saying it was
left out. Reasoning blocks are sent as text.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from ..errors import safe_repr
from ..model import ContentBlock, ImageBlock, ReasoningBlock, TextBlock, ToolCall
from ._common import (
    Reader,
    Results,
    block_kind,
    check_batch_result,
    check_strict,
    cut_off,
    data_url,
    image_left_out,
    image_type,
    kept,
    kind,
    mapping_or_none,
    model_content,
    model_input,
    results_of,
    shown,
    strict_parameters,
)

if TYPE_CHECKING:  # pragma: no cover
    from ..model import Agent, ToolBatchResult
    from ..toolset import ResolvedToolSet

__all__ = ["calls", "results", "tools"]

_PROVIDER: Final = "OpenAI"

_PART_TYPES: Final = frozenset({"text", "refusal"})
"""The content part types of an assistant message."""

_SHAPES: Final = (
    'expected a chat completion (with "choices"), a choice (with "message") '
    'or an assistant message (with "role": "assistant")'
)

CUT_OFF: Final[Mapping[str, tuple[str, str]]] = {
    "length": (
        'the choice stopped at its token limit (finish_reason "length")',
        "ask again with a higher max_completion_tokens",
    ),
    "content_filter": (
        'content filters omitted some of the choice\'s output (finish_reason "content_filter")',
        "change the request, or handle it as the model's refusal",
    ),
}
"""The ``finish_reason`` values of a choice whose output was cut off: how
it stopped and the fix. A tool call in such a choice may hold arguments the
stop cut short, so none is run."""

_STREAMED: Final = (
    "a streamed chunk (chat.completion.chunk), not a completion: assemble the stream first and pass the "
    "completion it makes (with the SDK: client.chat.completions.stream(...), then stream.get_final_completion())"
)


def calls(response: Any) -> tuple[ToolCall, ...]:
    """The tool calls of a chat completion, a choice, an assistant message
    or a ``tool_calls`` list, in model order. Raises
    :class:`~dsh_actors.providers.ProviderFormatError` naming the bad field
    (a completion with several choices, a list of choices, a call without
    an id, a duplicate id, a non-function call, ...) or saying what to
    pass instead (a streamed chunk, the conversation's list of messages),
    and for a choice
    whose output was cut off (:data:`CUT_OFF`: ``finish_reason``
    ``"length"`` or ``"content_filter"``) with a tool call in it (its
    arguments may be cut short: none is run)."""
    return _calls(response, "response")


def _calls(response: Any, where: str) -> tuple[ToolCall, ...]:
    reader = Reader()
    data = mapping_or_none(response, where)
    if data is None:
        if isinstance(response, (list, tuple)):
            _read_tool_calls(reader, response, where)
            return reader.done()
        raise reader.fail(where, f"{_SHAPES}, got {kind(response)}")
    if data.get("object") == "chat.completion.chunk":
        raise reader.fail(where, _STREAMED)
    if "choices" in data:
        choices = reader.items(data["choices"], f"{where}.choices")
        if len(choices) != 1:
            raise reader.fail(
                f"{where}.choices",
                f"holds {len(choices)} choices; tool calls are read from one (pass response.choices[i])",
            )
        data = reader.obj(choices[0], f"{where}.choices[0]")
        where = f"{where}.choices[0]"
    cut = None
    if "delta" in data and "message" not in data and "role" not in data:
        raise reader.fail(where, f"the choice of {_STREAMED}")
    if "message" in data and "role" not in data:
        # (Only a choice says where it stopped.)
        finish_reason = data.get("finish_reason")
        cut = cut_off(CUT_OFF, finish_reason, f"{where}.finish_reason")
        data = reader.obj(data["message"], f"{where}.message")
        where = f"{where}.message"
    _check_message(reader, data, where)
    if data.get("function_call") is not None:
        # (Not a final answer: () would end a loop as if the model had answered.)
        raise reader.fail(
            f"{where}.function_call",
            "a function call of the deprecated functions parameter, which is not read: offer the tools as "
            "tools=openai.tools(rt, agent), and the model calls them in tool_calls",
        )
    tool_calls = data.get("tool_calls")
    if tool_calls is not None:
        _read_tool_calls(reader, reader.items(tool_calls, f"{where}.tool_calls"), f"{where}.tool_calls")
    return reader.done(cut)


def _check_message(reader: Reader, data: Mapping[str, Any], where: str) -> None:
    """``data`` is an assistant message: it has a role or tool calls, no
    ``type`` (an Anthropic message and a Responses item have one), and
    content that is null, text or text and refusal parts."""
    if data.get("type") is not None:
        raise reader.fail(
            f"{where}.type",
            f"a Chat Completions message has no type, got {safe_repr(data['type'])} (an Anthropic message or a "
            "Responses API item? read those with anthropic.calls or openai_responses.calls)",
        )
    if "role" not in data and "tool_calls" not in data:
        hint = " (a Responses API response? read it with openai_responses.calls)" if "output" in data else ""
        raise reader.fail(where, f"{_SHAPES}, got {_keys(data)}{hint}")
    reader.assistant(data.get("role", "assistant"), f"{where}.role")
    content = data.get("content")
    if content is None or type(content) is str:
        return
    for index, part in enumerate(reader.items(content, f"{where}.content")):
        at = f"{where}.content[{index}]"
        part_type = reader.obj(part, at).get("type")
        if type(part_type) is not str or part_type not in _PART_TYPES:
            hint = " (an Anthropic message? read it with anthropic.calls)" if part_type in _ANTHROPIC_BLOCKS else ""
            raise reader.fail(
                f"{at}.type",
                f'an assistant message\'s content part is "text" or "refusal", got {shown(part_type)}{hint}',
            )


#: Content block types of an Anthropic message that a Chat Completions one never has.
_ANTHROPIC_BLOCKS: Final = frozenset({"tool_use", "thinking", "redacted_thinking", "server_tool_use"})


def _keys(data: Mapping[str, Any]) -> str:
    keys = list(data)
    if not keys:
        return "an empty object"
    listed = ", ".join(safe_repr(key)[:40] for key in keys[:6])
    return f"an object with the keys {listed}{', ...' if len(keys) > 6 else ''}"


def _read_tool_calls(reader: Reader, items: Iterable[Any], where: str) -> None:
    for index, item in enumerate(items):
        at = f"{where}[{index}]"
        call = reader.obj(item, at)
        call_type = call.get("type", "function")
        if call_type is None:
            call_type = "function"
        if call_type != "function":
            raise reader.fail(f"{at}.type", f'must be "function", got {safe_repr(call_type)}')
        if "function" not in call:
            misplaced = _misplaced(call)
            if misplaced:
                raise reader.fail(at, misplaced)
        function = reader.obj(call.get("function"), f"{at}.function")
        name = reader.text(function, "name", f"{at}.function")
        reader.add(reader.text(call, "id", at), name, function.get("arguments"), f"{at}.function", "arguments")


def _misplaced(data: Mapping[str, Any]) -> str:
    """What ``data``, found where a tool call belongs, is instead, with
    what to pass; ``""`` when it is none of these."""
    if data.get("object") == "chat.completion.chunk":
        return _STREAMED
    if "delta" in data:
        return f"the choice of {_STREAMED}"
    if "choices" in data:
        return "a chat completion, not a tool call (a list is read as message.tool_calls): pass the completion itself"
    if "message" in data:
        return "a choice, not a tool call (a list is read as message.tool_calls): pass the completion or choices[0].message"
    if "role" in data:
        return (
            "a message, not a tool call (a list is read as message.tool_calls, not as the conversation): "
            "pass the assistant message itself (completion.choices[0].message, or messages[-1])"
        )
    return ""


def results(batch_result: ToolBatchResult) -> Results:
    """The messages that follow the assistant message (see the module
    docstring), as a :class:`~dsh_actors.providers.Results` list whose
    ``concluded`` says whether the batch concluded the turn."""
    batch = check_batch_result(batch_result, "openai.results")
    messages: list[dict[str, Any]] = []
    images: list[dict[str, Any]] = []
    for item in batch.results:
        texts: list[str] = []
        attached = 0
        for block in model_content(item.call_id, item.result):
            t = block_kind(f"call {item.call_id!r}", block)
            if t is ImageBlock:
                assert isinstance(block, ImageBlock)
                mime = image_type(block)
                if mime is None:
                    texts.append(image_left_out(block, _PROVIDER))
                    continue
                if not attached:
                    images.append({"type": "text", "text": f"The images returned by tool call {item.call_id}:"})
                attached += 1
                images.append(_image_part(block, mime))
                texts.append(f"[image {attached} ({mime}) is attached to the next user message]")
            else:
                assert isinstance(block, (TextBlock, ReasoningBlock))
                if kept(block.text):
                    texts.append(block.text)
        messages.append({"role": "tool", "tool_call_id": item.call_id, "content": _text_content(texts)})
    if images:
        messages.append({"role": "user", "content": images})
    for context in batch.additional_contexts:
        content = _user_content(context.content)
        if content:
            messages.append({"role": "user", "content": content})
    return results_of(batch, messages)


def tools(
    rt: Any, agent: Agent | None = None, tool_set: ResolvedToolSet | None = None, *, strict: bool = False
) -> list[dict[str, Any]]:
    """The ``tools`` parameter for ``agent``'s next request: what its
    executor offers (``rt.tools.model_tools(agent, tool_set)``), as
    Chat Completions function tools. ``rt`` is the runtime (or a
    ``ToolsService``). ``strict``: strict function calling for every tool
    whose schema allows it (module docstring)."""
    check_strict(strict, "openai.tools")
    out: list[dict[str, Any]] = []
    for schema in model_input(rt, agent, tool_set).schemas:
        function: dict[str, Any] = {
            "name": schema["name"],
            "description": schema["description"],
            "parameters": schema["parameters"],
        }
        if strict:
            function["parameters"], function["strict"] = strict_parameters(schema["parameters"])
        out.append({"type": "function", "function": function})
    return out


def _text_content(texts: list[str]) -> str | list[dict[str, Any]]:
    if len(texts) <= 1:
        return texts[0] if texts else ""
    return [{"type": "text", "text": value} for value in texts]


def _image_part(block: ImageBlock, mime: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": data_url(block, mime)}}


def _user_content(blocks: Iterable[ContentBlock]) -> str | list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for block in blocks:
        t = block_kind("an additional context", block)
        if t is ImageBlock:
            assert isinstance(block, ImageBlock)
            mime = image_type(block)
            if mime is None:
                parts.append({"type": "text", "text": image_left_out(block, _PROVIDER)})
            else:
                parts.append(_image_part(block, mime))
        else:
            assert isinstance(block, (TextBlock, ReasoningBlock))
            if kept(block.text):
                parts.append({"type": "text", "text": block.text})
    if len(parts) == 1 and parts[0]["type"] == "text":
        return str(parts[0]["text"])
    return parts
