"""Anthropic Messages: ``tool_use`` blocks in, ``tool_result`` blocks out.

* :func:`calls` reads a message (``{"role": "assistant", "content":
  [...]}``, as the SDK's ``Message`` or a dict), its content blocks, or one
  ``tool_use`` block. The other blocks (:data:`SKIPPED`: text, thinking,
  server tool use and its results) carry nothing for the client to run and
  are skipped. A block of any other type, and anything that is not a
  message (a chat completion or message, a Responses API response, an
  object whose ``model_dump()`` raises), is a
  :class:`~dsh_actors.providers.ProviderFormatError`, never ``()``, so a
  loop handed the wrong shape does not stop as if the model had answered;
  a stream event, or the conversation's list of messages, is named as such
  with what to pass instead. A message cut off or stopped early
  (:data:`CUT_OFF`) with a ``tool_use`` block in it is refused: none runs.
  A message with ``stop_reason`` ``"pause_turn"`` (the API paused a long
  turn of server tools, such as web search) is read as usual: its blocks
  are whole, and it holds no ``tool_use`` block, so it gives ``()``; but
  the turn is not over: append the message as it is and send the request
  again (no user message in between), and the model goes on from it.
* :func:`results` gives the one user message that follows the assistant
  message: its content is a ``{"type": "tool_result", "tool_use_id",
  "content", "is_error"}`` block per call, in model order, then the blocks
  of each additional context, in order (the API wants the tool results
  first in that turn and text after them). A failure has ``is_error:
  true`` and text content only (the API refuses an image in one: each
  becomes a note saying it was left out). A batch with neither results nor
  contexts gives ``[]``.
* :func:`tools` gives the ``tools`` parameter: ``{"name", "description",
  "input_schema"}`` per tool the agent's executor offers (under PTC, only
  ``run_code``).

In a loop::

    message = client.messages.create(model=..., max_tokens=..., messages=messages, tools=anthropic.tools(rt, agent))
    messages.append({"role": "assistant", "content": message.content})
    calls = anthropic.calls(message)          # () when it has no tool_use block
    if calls:
        messages.extend(anthropic.results(rt.tools.execute(ToolBatchInput(calls=calls, agent=agent))))
    elif message.stop_reason != "pause_turn":  # (paused: the turn goes on, ask again as it is)
        break                                   # the model's answer: the turn is over

Content: a result that is one text block is a string; otherwise a list of
``text`` and ``image`` blocks (a ``tool_result`` takes images directly, as
base64 sources); empty and whitespace-only text blocks are dropped (the
API refuses them), and a success with no content left has no ``content``
key, a failure the text ``Error: <message>``. An image of a type
the API does not accept (:data:`~dsh_actors.providers.IMAGE_TYPES`)
becomes a note saying it was left out. Reasoning blocks are sent as text (a
tool result cannot carry thinking blocks).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from ..model import ContentBlock, ImageBlock, ReasoningBlock, TextBlock, ToolCall, ToolExecutionFailure
from ._common import (
    CHAT_KEYS,
    Reader,
    Results,
    block_kind,
    check_batch_result,
    cut_off,
    image_left_out,
    image_type,
    is_error,
    kept,
    kind,
    mapping_or_none,
    model_content,
    model_input,
    results_of,
    sequence_or_none,
    shown,
)

if TYPE_CHECKING:  # pragma: no cover
    from ..model import Agent, ToolBatchResult
    from ..toolset import ResolvedToolSet

__all__ = ["calls", "results", "tools"]

_PROVIDER: Final = "Anthropic"

SKIPPED: Final = frozenset(
    {
        "text",
        "thinking",
        "redacted_thinking",
        "compaction",
        "fallback",
        "container_upload",
        # Server tools: the server ran them (the message holds their results).
        "server_tool_use",
        "web_search_tool_result",
        "web_fetch_tool_result",
        "code_execution_tool_result",
        "bash_code_execution_tool_result",
        "text_editor_code_execution_tool_result",
        "tool_search_tool_result",
        "advisor_tool_result",
        "mcp_tool_use",
        "mcp_tool_result",
        "mcp_tool_listing",
    }
)
"""Content blocks (of ``Message`` and the beta ``BetaMessage``) that carry
nothing for the client to run. Every other type but ``tool_use`` is an
error: a new kind of block, or a shape from another API, is reported rather
than skipped."""

CUT_OFF: Final[Mapping[str, tuple[str, str]]] = {
    "max_tokens": ("the message stopped at max_tokens", "ask again with a higher max_tokens"),
    "model_context_window_exceeded": (
        'the message filled the model\'s context window (stop_reason "model_context_window_exceeded")',
        "shorten the conversation (such as its longest tool results) and ask again",
    ),
    "refusal": (
        'the message was stopped by a refusal (stop_reason "refusal")',
        "the model declined to go on (the message's stop_details say why): change the request, or ask another model",
    ),
}
"""The stop reasons of a message whose output was cut off or stopped early:
how it stopped and the fix. A ``tool_use`` block in such a message may hold
input the stop cut short, so none is run. (``pause_turn`` is a server
tool's loop pausing: its blocks are whole, and it holds no client call:
read as usual, ``()``, though the turn goes on; see the module docstring.)"""

_STREAM_EVENTS: Final = frozenset(
    {
        "message_start",
        "message_delta",
        "message_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
    }
)
_STREAMED: Final = (
    "is a stream event, not a message: assemble the stream first and pass the message it makes "
    "(with the SDK: client.messages.stream(...), then stream.get_final_message())"
)


def calls(response: Any) -> tuple[ToolCall, ...]:
    """The ``tool_use`` blocks of an assistant message (or of its content
    list), as tool calls in model order. Raises
    :class:`~dsh_actors.providers.ProviderFormatError` naming the bad field
    or saying what to pass instead (a stream event, the conversation's list
    of messages), and for a message cut off or stopped early
    (:data:`CUT_OFF`: ``stop_reason`` ``max_tokens``,
    ``model_context_window_exceeded`` or ``refusal``) with a tool call in it
    (its arguments may be cut short: none is run)."""
    return _calls(response, "response")


def _calls(response: Any, where: str) -> tuple[ToolCall, ...]:
    reader = Reader()
    data = mapping_or_none(response, where)
    if data is not None:
        message_type = data.get("type")
        if message_type == "tool_use":
            _read_block(reader, data, where)
            return reader.done()
        if _is_stream_event(message_type):
            raise reader.fail(f"{where}.type", f"{shown(message_type)} {_STREAMED}")
        if message_type is not None and message_type != "message":
            raise reader.fail(
                f"{where}.type",
                f'expected a message (type "message") or its content blocks, got {shown(message_type)} '
                '(of the blocks, only a "tool_use" is read alone)',
            )
        for key in CHAT_KEYS:
            if key in data:
                raise reader.fail(
                    f"{where}.{key}", "a Chat Completions message (read it with openai.calls), not an Anthropic one"
                )
        if "content" not in data or "role" not in data:
            raise reader.fail(
                where, f'expected a message (with "role" and "content") or its content blocks{_hint(data)}'
            )
        reader.assistant(data["role"], f"{where}.role")
        content = data["content"]
        if isinstance(content, str):
            return ()  # a text-only message
        blocks = reader.items(content, f"{where}.content")
        # (Only a whole message says where it stopped.)
        stop_reason = data.get("stop_reason")
        cut = cut_off(CUT_OFF, stop_reason, f"{where}.stop_reason")
        where = f"{where}.content"
    else:
        found = sequence_or_none(response, where)
        if found is None:
            raise reader.fail(where, f"expected a message or its content blocks, got {kind(response)}")
        blocks, cut = found, None
    for index, block in enumerate(blocks):
        _read_block(reader, reader.obj(block, f"{where}[{index}]"), f"{where}[{index}]")
    # (The SDK's stream accumulator completes a tool_use input the stop cut
    # off as partial JSON: it would run with arguments never finished.)
    return reader.done(cut)


def _read_block(reader: Reader, block: Any, at: str) -> None:
    block_type = block.get("type")
    # (A Responses API message item has a type "message" too, but no stop_reason.)
    if (block_type == "message" and "stop_reason" in block) or (block_type is None and "role" in block):
        raise reader.fail(
            at,
            "a message, not a content block (a list is read as one message's content, not as the "
            "conversation): pass the assistant message itself (messages[-1], or the SDK's Message)",
        )
    if _is_stream_event(block_type):
        raise reader.fail(f"{at}.type", f"{shown(block_type)} {_STREAMED}")
    if type(block_type) is not str:
        raise reader.fail(f"{at}.type", f"a content block needs a string type, got {kind(block_type)}")
    if block_type in SKIPPED:
        return  # text, thinking, server tool use and results: nothing to run
    if block_type != "tool_use":
        raise reader.fail(
            f"{at}.type",
            f'unknown content block type {shown(block_type)}: "tool_use" blocks are run and the known '
            "blocks without a call skipped (a Responses API item? read it with openai_responses.calls)",
        )
    arguments = block.get("input")
    if arguments is None:
        arguments = {}
    elif mapping_or_none(arguments, f"{at}.input") is None:
        raise reader.fail(f"{at}.input", f"must be an object, got {kind(arguments)}")
    reader.add(reader.text(block, "id", at), reader.text(block, "name", at), arguments, at, "input")


def _is_stream_event(block_type: Any) -> bool:
    return type(block_type) is str and block_type in _STREAM_EVENTS


def _hint(data: Any) -> str:
    if "choices" in data:
        return " (a chat completion? read it with openai.calls)"
    if "output" in data:
        return " (a Responses API response? read it with openai_responses.calls)"
    return ""


def results(batch_result: ToolBatchResult) -> Results:
    """The user message that follows the assistant message (see the module
    docstring), in a :class:`~dsh_actors.providers.Results` list whose
    ``concluded`` says whether the batch concluded the turn."""
    batch = check_batch_result(batch_result, "anthropic.results")
    content: list[dict[str, Any]] = []
    for item in batch.results:
        failed = is_error(item.result)
        blocks = _blocks(model_content(item.call_id, item.result), f"call {item.call_id!r}", error=failed)
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": item.call_id}
        if len(blocks) == 1 and blocks[0]["type"] == "text":
            block["content"] = blocks[0]["text"]
        elif blocks:
            block["content"] = blocks
        elif isinstance(item.result, ToolExecutionFailure):
            # (Only blank text was left; the API refuses an empty error.)
            message = item.result.error.message.strip()
            block["content"] = f"Error: {message}" if message else "Error"
        block["is_error"] = failed
        content.append(block)
    for context in batch.additional_contexts:
        content.extend(_blocks(context.content, "an additional context"))
    return results_of(batch, [{"role": "user", "content": content}] if content else [])


def tools(rt: Any, agent: Agent | None = None, tool_set: ResolvedToolSet | None = None) -> list[dict[str, Any]]:
    """The ``tools`` parameter for ``agent``'s next request: what its
    executor offers (``rt.tools.model_tools(agent, tool_set)``), as
    Anthropic client tools. ``rt`` is the runtime (or a ``ToolsService``)."""
    return [
        {"name": schema["name"], "description": schema["description"], "input_schema": schema["parameters"]}
        for schema in model_input(rt, agent, tool_set).schemas
    ]


def _blocks(blocks: Iterable[ContentBlock], what: str, *, error: bool = False) -> list[dict[str, Any]]:
    """``blocks`` as the API's; ``error``: for an error result, which takes
    text only (each image becomes a note)."""
    out: list[dict[str, Any]] = []
    for block in blocks:
        t = block_kind(what, block)
        if t is ImageBlock:
            assert isinstance(block, ImageBlock)
            mime = image_type(block)
            if error or mime is None:
                why = "an error result takes text only" if error else ""
                out.append({"type": "text", "text": image_left_out(block, _PROVIDER, why)})
            else:
                out.append({"type": "image", "source": {"type": "base64", "media_type": mime, "data": block.data}})
        else:
            assert isinstance(block, (TextBlock, ReasoningBlock))
            if kept(block.text, whitespace=False):
                out.append({"type": "text", "text": block.text})
    return out
