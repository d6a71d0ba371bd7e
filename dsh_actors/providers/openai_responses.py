"""OpenAI Responses API: ``function_call`` items in, ``function_call_output``
items out.

* :func:`calls` reads a response (``{"output": [...]}``), its ``output``
  list, or one ``function_call`` item, as SDK objects or dicts. The output
  items that carry nothing to run (:data:`SKIPPED`: messages, reasoning,
  server-side tool calls such as web or file search, outputs) are skipped;
  an item the client would have to run that is not a function call
  (:data:`CLIENT_CALLS`: ``custom_tool_call``, ``computer_call``,
  ``shell_call``, ..., and a ``tool_search_call`` the client executes) is
  an error, since no ``function_call_output`` can answer it, and so is an
  item of any other type, or anything that is not a response (a chat
  completion, an Anthropic message, an object whose ``model_dump()``
  raises): a :class:`~dsh_actors.providers.ProviderFormatError`, never
  ``()``; a stream event, or a list of responses, is named as such with
  what to pass instead, and a response that holds no finished answer
  (:data:`UNFINISHED`: ``status`` ``queued``, ``in_progress``, ``failed``
  or ``cancelled``) is refused naming its status, and so is a
  ``function_call`` item whose own ``status`` says it did not finish
  (:data:`UNFINISHED_CALL`: ``in_progress`` or ``incomplete``), wherever
  it is read. A ``function_call`` that
  a ``function_call_output`` of the same list answers (a conversation kept
  by hand) is not read again; such a list's input items are skipped too
  (messages without a ``type``, item references), but a Chat Completions
  or Anthropic message in it is an error, not a message whose calls go
  unread. Argument text is kept as text (the executor parses it).
* :func:`results` gives the input items for the next request: one
  ``{"type": "function_call_output", "call_id", "output"}`` per call, in
  model order, then one user message item (``{"type": "message", "role":
  "user", "content": [...]}``) per additional context. A failure is marked
  by its text, which starts ``Error: `` (the API has no error flag).
  Send them as the next ``input`` with ``previous_response_id``, or, in a
  conversation you keep yourself, after the response's ``output`` items
  (reasoning items included, as the API asks).
* :func:`tools` gives the ``tools`` parameter: ``{"type": "function",
  "name", "description", "parameters", "strict": false}`` per tool the
  agent's executor offers (under PTC, only ``run_code``). With
  ``strict=True`` each tool whose schema can be made strict is sent with
  ``"strict": true`` and its parameters in the strict form
  (:func:`dsh_actors.schema.strict_json_schema`: every object closed,
  every property required, the optional ones nullable); any other stays
  ``"strict": false``. The ``null`` a strict model then sends for an
  optional parameter is read as absent by the pipeline.

Content: an output that is one text block is a string; otherwise a list of
``input_text`` and ``input_image`` parts (a ``function_call_output`` takes
images directly; the image is a ``data:`` URL of the bare media type with
``detail: "auto"``, which a message's image part requires). Empty text is
left out (an output left with nothing is ``""``; a context, not sent), as
in Chat Completions. An image of a type the
provider does not accept (:data:`~dsh_actors.providers.IMAGE_TYPES`)
becomes a note saying it was left out. Reasoning blocks are sent as text.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from ..errors import safe_repr, safe_str
from ..model import ContentBlock, ImageBlock, ReasoningBlock, TextBlock, ToolCall
from ._common import (
    CHAT_KEYS,
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
    sequence_or_none,
    shown,
    strict_parameters,
)

if TYPE_CHECKING:  # pragma: no cover
    from ..model import Agent, ToolBatchResult
    from ..toolset import ResolvedToolSet

__all__ = ["calls", "results", "tools"]

_PROVIDER: Final = "OpenAI"

CLIENT_CALLS: Final = frozenset(
    {"custom_tool_call", "computer_call", "local_shell_call", "shell_call", "apply_patch_call", "mcp_approval_request"}
)
"""Output items the client must answer that a ``function_call_output``
cannot: reading one is an error rather than a call silently left unanswered.
(A ``tool_search_call`` is one when its ``execution`` is ``"client"``.)"""

SKIPPED: Final = frozenset(
    {
        "message",
        "reasoning",
        "compaction",
        "additional_tools",
        # Run by the server (the response holds their results).
        "file_search_call",
        "web_search_call",
        "code_interpreter_call",
        "image_generation_call",
        "mcp_call",
        "mcp_list_tools",
        "program",
        "program_output",
        # Outputs and answers: already answered (a conversation kept by hand holds them).
        "function_call_output",
        "computer_call_output",
        "custom_tool_call_output",
        "local_shell_call_output",
        "shell_call_output",
        "apply_patch_call_output",
        "tool_search_output",
        "mcp_approval_response",
        # Input items only (a conversation kept by hand holds them).
        "item_reference",
        "configuration_update",
        "compaction_trigger",
    }
)
"""Output items that carry nothing for the client to run. Every other type
but ``function_call`` and :data:`CLIENT_CALLS` is an error: a new kind of
item, or a shape from another API, is reported rather than skipped."""


CUT_OFF: Final[Mapping[str, tuple[str, str]]] = {
    "max_output_tokens": (
        'the response stopped at max_output_tokens (status "incomplete")',
        "ask again with a higher max_output_tokens",
    ),
    "content_filter": (
        'content filters omitted some of the response\'s output (status "incomplete", reason "content_filter")',
        "change the request, or handle it as the model's refusal",
    ),
}
"""The ``incomplete_details.reason`` values of an ``"incomplete"``
response whose output was cut off: how it stopped and the fix. A
``function_call`` item in such a response may hold arguments the stop cut
short, so none is run. (``steered`` stops at a safe output boundary, the
SDK says: its items are whole, and read as usual.)"""

_STILL_RUNNING: Final = (
    "is not finished yet",
    "wait until it is (client.responses.retrieve(response.id)) and pass that",
)

UNFINISHED: Final[Mapping[str, tuple[str, str]]] = {
    "queued": _STILL_RUNNING,
    "in_progress": _STILL_RUNNING,
    "failed": ("failed", "ask again"),
    "cancelled": ("was cancelled", "ask again if the turn should go on"),
}
"""The ``status`` values of a response that holds no finished answer (a
background response still running, or one that ended without its output):
what happened and the fix. Reading one is an error whatever its output
holds: ``()`` would end a loop as if the model had answered, and a
``function_call`` in it may be unfinished."""


def calls(response: Any) -> tuple[ToolCall, ...]:
    """The ``function_call`` items of a response (or of its ``output``
    list), as tool calls in model order. Raises
    :class:`~dsh_actors.providers.ProviderFormatError` naming the bad field,
    and for a response whose output was cut off (``status``
    ``"incomplete"`` for a reason in :data:`CUT_OFF`: ``max_output_tokens``
    or ``content_filter``) with a function call in it (its arguments may be
    cut short: none is run), and for one that holds no finished answer
    (:data:`UNFINISHED`), whatever its output, and for a function call
    item that did not finish (:data:`UNFINISHED_CALL`). A function call
    answered by a ``function_call_output`` of the same list is left out."""
    return _calls(response, "response")


def _calls(response: Any, where: str) -> tuple[ToolCall, ...]:
    reader = Reader()
    data = mapping_or_none(response, where)
    if data is not None:
        if data.get("type") == "function_call":
            _read_item(reader, data, where)
            return _unfinished_calls(reader, reader.done(), {data["call_id"]: data})
        if _is_stream_event(data.get("type")):
            raise reader.fail(f"{where}.type", f"{shown(data['type'])} {_STREAMED}")
        if "output" not in data:
            raise reader.fail(where, f'expected a response (with "output") or its output items{_hint(data)}')
        status = data.get("status")
        if type(status) is str and status in UNFINISHED:
            happened, fix = UNFINISHED[status]
            raise reader.fail(
                f"{where}.status", f'the response {happened} (status "{status}"{_error(data, where)}): {fix}'
            )
        items: Any = reader.items(data["output"], f"{where}.output")
        # (Only a whole response says where it stopped.)
        details = mapping_or_none(data.get("incomplete_details"), f"{where}.incomplete_details") or {}
        reason = details.get("reason") if data.get("status") == "incomplete" else None
        cut = cut_off(CUT_OFF, reason, f"{where}.incomplete_details.reason")
        where = f"{where}.output"
    elif isinstance(response, (list, tuple)):
        items, cut = response, None
    else:
        raise reader.fail(where, f"expected a response or its output items, got {kind(response)}")
    answered: set[str] = set()
    read: dict[str, Mapping[str, Any]] = {}  # call id -> its function_call item
    for index, item in enumerate(items):
        found = reader.obj(item, f"{where}[{index}]")
        _read_item(reader, found, f"{where}[{index}]")
        if found.get("type") == "function_call":
            read[found["call_id"]] = found
        elif found.get("type") == "function_call_output" and type(found.get("call_id")) is str:
            answered.add(found["call_id"])
    if answered:
        # (A conversation kept by hand, or an output whose calls the server
        # answered: a call its own list answers is not run again.)
        reader.calls = [call for call in reader.calls if call.id not in answered]
    return _unfinished_calls(reader, reader.done(cut), read)


UNFINISHED_CALL: Final[Mapping[str, str]] = {
    "in_progress": "pass the finished response (a stream's final response, or the item of its "
    "response.output_item.done event)",
    "incomplete": "ask again (with a higher max_output_tokens if the response stopped at it)",
}
"""The ``status`` values of a ``function_call`` item whose arguments did
not finish (still being streamed, or cut off), with the fix. Such an item
is refused even where nothing else says the response stopped (an output
list or the item read alone, or a response ``incomplete`` for a reason not
in :data:`CUT_OFF`)."""


def _unfinished_calls(
    reader: Reader, found: tuple[ToolCall, ...], items: Mapping[str, Mapping[str, Any]]
) -> tuple[ToolCall, ...]:
    """``found`` (``reader.done()``), unless the item of one of them
    (``items``, by call id) says it did not finish (:data:`UNFINISHED_CALL`)."""
    for call in found:
        status = items[call.id].get("status")
        fix = UNFINISHED_CALL.get(status) if type(status) is str else None
        if fix is not None:
            raise reader.fail(
                f"{reader.places[call.id]}.status",
                f'the function call is "{status}": its arguments may be unfinished, so no call is run; {fix}',
            )
    return found


def _error(data: Mapping[str, Any], where: str) -> str:
    """A failed response's ``error``, as ``, error <code>: <message>`` (one line)."""
    error = mapping_or_none(data.get("error"), f"{where}.error") or {}
    said = [safe_str(value).splitlines()[0][:200] for value in (error.get("code"), error.get("message")) if value]
    return f", error {': '.join(said)}" if said else ""


def _read_item(reader: Reader, item: Any, at: str) -> None:
    item_type = item.get("type")
    if item_type is None and "output" in item:
        raise reader.fail(
            at, "a response, not an output item (a list is read as response.output): pass the response itself"
        )
    if _is_stream_event(item_type):
        raise reader.fail(f"{at}.type", f"{shown(item_type)} {_STREAMED}")
    if item_type == "message" or (item_type is None and "role" in item):
        _read_message(reader, item, at)
        return
    if type(item_type) is not str:
        raise reader.fail(f"{at}.type", f"an output item needs a string type, got {kind(item_type)}")
    if item_type in CLIENT_CALLS or (item_type == "tool_search_call" and item.get("execution") == "client"):
        raise reader.fail(
            f"{at}.type",
            f"a {safe_repr(item_type)} item asks the client to run something that is not a function tool; "
            'only "function_call" items are read',
        )
    if item_type in SKIPPED or item_type == "tool_search_call":
        return  # messages, reasoning, server-side tool calls, outputs: nothing to run
    if item_type != "function_call":
        raise reader.fail(
            f"{at}.type",
            f'unknown output item type {shown(item_type)}: "function_call" items are run and the known '
            "items without a call skipped (an Anthropic content block? read it with anthropic.calls)",
        )
    reader.add(reader.text(item, "call_id", at), reader.text(item, "name", at), item.get("arguments"), at, "arguments")


_INPUT_ROLES: Final = frozenset({"user", "assistant", "system", "developer"})
"""The roles of an input message without a ``type`` (the SDK's
``EasyInputMessageParam``), as a conversation kept by hand holds."""


def _read_message(reader: Reader, item: Mapping[str, Any], at: str) -> None:
    """A message item (``type`` ``"message"``, or an input message without
    one) holds nothing to run; one of another API, whose calls would be
    left unread, is an error: a Chat Completions message, or an Anthropic
    message (its ``stop_reason``, or a ``tool_use`` block in its content)."""
    for key in CHAT_KEYS:
        if key in item:
            raise reader.fail(
                f"{at}.{key}", "a Chat Completions message (read it with openai.calls), not a Responses API item"
            )
    anthropic = "stop_reason" in item
    content = sequence_or_none(item.get("content"), f"{at}.content") or ()
    for index, part in enumerate(content):
        found = mapping_or_none(part, f"{at}.content[{index}]")
        anthropic = anthropic or (found is not None and found.get("type") == "tool_use")
    if anthropic:
        raise reader.fail(at, "an Anthropic message (read it with anthropic.calls), not a Responses API item")
    role = item.get("role")
    if item.get("type") is None and (type(role) is not str or role not in _INPUT_ROLES):
        raise reader.fail(
            f"{at}.role",
            f'an input message\'s role is "user", "assistant", "system" or "developer", got {shown(role)}',
        )


_STREAMED: Final = (
    "is a stream event, not a response: assemble the stream first and pass the response it makes "
    "(with the SDK: client.responses.stream(...), then stream.get_final_response())"
)


def _is_stream_event(item_type: Any) -> bool:
    return type(item_type) is str and item_type.startswith("response.")


def _hint(data: Any) -> str:
    if "choices" in data or "tool_calls" in data:
        return " (a chat completion or message? read it with openai.calls)"
    if "content" in data:
        return ' (an Anthropic message? read it with anthropic.calls; of the output items, only a "function_call" is read alone)'
    return ""


def results(batch_result: ToolBatchResult) -> Results:
    """The input items that follow the response's output (see the module
    docstring), as a :class:`~dsh_actors.providers.Results` list whose
    ``concluded`` says whether the batch concluded the turn."""
    batch = check_batch_result(batch_result, "openai_responses.results")
    items: list[dict[str, Any]] = []
    for item in batch.results:
        parts = _parts(model_content(item.call_id, item.result), f"call {item.call_id!r}")
        output: str | list[dict[str, Any]]
        if not parts:
            output = ""
        elif len(parts) == 1 and parts[0]["type"] == "input_text":
            output = str(parts[0]["text"])
        else:
            output = parts
        items.append({"type": "function_call_output", "call_id": item.call_id, "output": output})
    for context in batch.additional_contexts:
        content = _parts(context.content, "an additional context")
        if content:
            items.append({"type": "message", "role": "user", "content": content})
    return results_of(batch, items)


def tools(
    rt: Any, agent: Agent | None = None, tool_set: ResolvedToolSet | None = None, *, strict: bool = False
) -> list[dict[str, Any]]:
    """The ``tools`` parameter for ``agent``'s next request: what its
    executor offers (``rt.tools.model_tools(agent, tool_set)``), as
    Responses function tools. ``rt`` is the runtime (or a ``ToolsService``).
    ``strict``: strict function calling for every tool whose schema allows
    it (module docstring)."""
    check_strict(strict, "openai_responses.tools")
    out: list[dict[str, Any]] = []
    for schema in model_input(rt, agent, tool_set).schemas:
        parameters, is_strict = strict_parameters(schema["parameters"]) if strict else (schema["parameters"], False)
        out.append(
            {
                "type": "function",
                "name": schema["name"],
                "description": schema["description"],
                "parameters": parameters,
                "strict": is_strict,
            }
        )
    return out


def _parts(blocks: Iterable[ContentBlock], what: str) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for block in blocks:
        t = block_kind(what, block)
        if t is ImageBlock:
            assert isinstance(block, ImageBlock)
            mime = image_type(block)
            if mime is None:
                parts.append({"type": "input_text", "text": image_left_out(block, _PROVIDER)})
            else:
                parts.append({"type": "input_image", "image_url": data_url(block, mime), "detail": "auto"})
        else:
            assert isinstance(block, (TextBlock, ReasoningBlock))
            if kept(block.text):
                parts.append({"type": "input_text", "text": block.text})
    return parts
