"""Hypothesis strategies for the response readers: responses built with the
provider SDKs' own types (each with the calls a reader must find), the same
responses in the other forms a reader takes (a choice, a content list, a
dict), objects whose ``model_dump()`` raises, mutated dumps and any JSON.

Every strategy of valid responses draws ``(response, expected_calls)``;
:func:`is_foreign` says which of them another provider's reader must
refuse.
"""

from __future__ import annotations

from typing import Any, Final

from anthropic.types import Message, TextBlock, ThinkingBlock, ToolUseBlock, Usage
from hypothesis import strategies as st
from openai.types.chat import ChatCompletion, ChatCompletionMessage, ChatCompletionMessageFunctionToolCall
from openai.types.chat.chat_completion import Choice
from openai.types.chat.chat_completion_message_function_tool_call import Function
from openai.types.responses import (
    Response,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)

from dsh_actors import ToolCall

KEYS: Final = st.sampled_from(["choices", "message", "role", "tool_calls", "id", "type", "function", "name",
                               "arguments", "output", "call_id", "content", "input", "assistant", "function_call",
                               "tool_use", "text", "reasoning", "refusal", "object"])  # fmt: skip
SCALARS: Final = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8) | KEYS
JSON: Final = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS | st.text(max_size=4), inner, max_size=5),
    max_leaves=12,
)
"""Any JSON value, its keys and strings often the readers' own words."""

# Few draws per value (variety is in the shapes, not the strings), so that
# about 1,500 responses per reader take a few seconds.
_IDS = st.sampled_from(["call_1", "call_2", "toolu_01A", "fc_x", "a", "A", "id with spaces", "é", "0"])
_NAMES = st.sampled_from(["read_file", "screenshot", "x", "run_code", "ns.tool", "名前"])
_TEXT = st.sampled_from(["", "Done.", "I'll read both files.", "line\nbreak"])
_ARGUMENT_TEXT = st.sampled_from(["", "{}", '{"path": "src/app.py"}', '{"message": "hi"', "[1, 2]", "not json"])
"""Argument text as the model wrote it: the executor parses it, the reader keeps it."""
_INPUT = st.sampled_from([{}, {"path": "src/app.py"}, {"n": 3, "flags": [True, None]}, {"nested": {"a": [1.5, "b"]}}])


def _calls(arguments: st.SearchStrategy[Any], max_size: int = 4) -> st.SearchStrategy[list[ToolCall]]:
    """Calls with distinct ids."""
    call = st.builds(lambda i, name, a: ToolCall(i, name, a), _IDS, _NAMES, arguments)
    return st.lists(call, max_size=max_size, unique_by=lambda c: c.id)


# -- Chat Completions --------------------------------------------------------------


def _chat_message(calls: list[ToolCall], content: str | None) -> ChatCompletionMessage:
    tool_calls = [
        ChatCompletionMessageFunctionToolCall(
            id=c.id, type="function", function=Function(name=c.name, arguments=str(c.arguments))
        )
        for c in calls
    ]
    return ChatCompletionMessage(role="assistant", content=content, tool_calls=tool_calls or None)


def _chat_completion(message: ChatCompletionMessage) -> ChatCompletion:
    choice = Choice(index=0, finish_reason="tool_calls" if message.tool_calls else "stop", message=message)
    return ChatCompletion(id="chatcmpl-1", object="chat.completion", created=0, model="gpt-4.1", choices=[choice])


@st.composite
def chat(draw: st.DrawFn) -> tuple[Any, tuple[ToolCall, ...]]:
    """A Chat Completions response in one of the forms ``openai.calls``
    reads, and its calls."""
    calls = draw(_calls(_ARGUMENT_TEXT))
    message = _chat_message(calls, draw(st.none() | _TEXT))
    completion = _chat_completion(message)
    forms: list[Any] = [completion, completion.choices[0], message, completion.model_dump(), message.model_dump(),
                        message.model_dump(exclude_none=True)]  # fmt: skip
    if message.tool_calls:
        forms.append(message.tool_calls)
    return draw(st.sampled_from(forms)), tuple(calls)


# -- Responses API -------------------------------------------------------------------


@st.composite
def responses(draw: st.DrawFn) -> tuple[Any, tuple[ToolCall, ...]]:
    """A Responses API response (function calls among reasoning and message
    items) in one of the forms ``openai_responses.calls`` reads, and its calls."""
    calls = draw(_calls(_ARGUMENT_TEXT))
    items: list[Any] = [
        ResponseFunctionToolCall(
            type="function_call",
            id=f"fc_{n}",
            call_id=c.id,
            name=c.name,
            arguments=str(c.arguments),
            status="completed",
        )
        for n, c in enumerate(calls)
    ]
    for n, kind in enumerate(draw(st.lists(st.sampled_from(["reasoning", "message"]), max_size=2))):
        if kind == "reasoning":
            other: Any = ResponseReasoningItem(id=f"rs_{n}", type="reasoning", summary=[])
        else:
            text = ResponseOutputText(type="output_text", text=draw(_TEXT), annotations=[])
            other = ResponseOutputMessage(id=f"msg_{n}", type="message", role="assistant", status="completed",
                                          content=[text])  # fmt: skip
        items.insert(draw(st.integers(0, len(items))), other)
    response = Response(id="resp_1", object="response", created_at=0, model="gpt-4.1", output=items,
                        parallel_tool_calls=True, tool_choice="auto", tools=[])  # fmt: skip
    forms: list[Any] = [response, response.output, response.model_dump(), [i.model_dump() for i in response.output]]
    if len(calls) == 1:
        forms.append(next(i for i in items if isinstance(i, ResponseFunctionToolCall)))
    return draw(st.sampled_from(forms)), tuple(calls)


# -- Anthropic Messages --------------------------------------------------------------


@st.composite
def anthropic(draw: st.DrawFn) -> tuple[Any, tuple[ToolCall, ...]]:
    """An Anthropic message (tool_use blocks among text and thinking) in one
    of the forms ``anthropic.calls`` reads, and its calls."""
    calls = draw(_calls(_INPUT))
    blocks: list[Any] = [ToolUseBlock(type="tool_use", id=c.id, name=c.name, input=dict(c.arguments)) for c in calls]  # type: ignore[call-overload]
    for kind in draw(st.lists(st.sampled_from(["text", "thinking"]), max_size=2)):
        if kind == "text":
            other: Any = TextBlock(type="text", text=draw(_TEXT))
        else:
            other = ThinkingBlock(type="thinking", thinking=draw(_TEXT), signature="sig")
        blocks.insert(draw(st.integers(0, len(blocks))), other)
    message = Message(id="msg_1", type="message", role="assistant", model="claude-sonnet-4-5", content=blocks,
                      stop_reason="tool_use" if calls else "end_turn", stop_sequence=None,
                      usage=Usage(input_tokens=1, output_tokens=1))  # fmt: skip
    forms: list[Any] = [message, message.content, message.model_dump(), [b.model_dump() for b in message.content]]
    if len(calls) == 1:
        forms.append(next(b for b in blocks if isinstance(b, ToolUseBlock)))
    return draw(st.sampled_from(forms)), tuple(calls)


VALID: Final = {"openai": chat(), "openai_responses": responses(), "anthropic": anthropic()}
"""Each reader's valid responses, by module name."""


def is_foreign(response: Any) -> bool:
    """Whether a response from :data:`VALID` is in a form that only its own
    provider's reader reads: every form but an empty list (every reader's
    "no calls") and a dict without a provider's marks (``{"role":
    "assistant", "content": "Done."}`` is a Chat text answer and an
    Anthropic text-only message alike)."""
    if isinstance(response, list):
        return bool(response)
    if isinstance(response, dict):
        return any(key in response for key in ("refusal", "tool_calls", "type", "object", "choices"))
    return True


# -- objects a reader cannot read --------------------------------------------------------


class _BrokenDump:
    """An SDK-like object whose ``model_dump()`` raises."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def model_dump(self) -> Any:
        raise self.error


def broken(reader: str) -> st.SearchStrategy[Any]:
    """A valid response with one level replaced by an object whose
    ``model_dump()`` raises (the whole response, or one call in it)."""
    error = st.sampled_from([ValueError("boom"), TypeError("no\nnewlines please"), RuntimeError(""), KeyError("k")])

    def plant(pair: tuple[Any, tuple[ToolCall, ...]], bad: Exception, where: int) -> Any:
        response, _ = pair
        dumped = response.model_dump() if hasattr(response, "model_dump") else response
        if not isinstance(dumped, dict):
            return _BrokenDump(bad)
        inner = dumped.get("output") or dumped.get("content") or dumped.get("tool_calls")
        if isinstance(inner, list) and inner and where:
            inner[where % len(inner)] = _BrokenDump(bad)
            return dumped
        return _BrokenDump(bad)

    return st.builds(plant, VALID[reader], error, st.integers(0, 3))


def mutated(reader: str) -> st.SearchStrategy[Any]:
    """A valid response's dump with one key removed or its value replaced
    by any JSON, at any depth: a reader gives calls or a format error."""

    def mutate(pair: tuple[Any, tuple[ToolCall, ...]], path: list[int], value: Any, drop: bool) -> Any:
        response, _ = pair
        node: Any = response.model_dump() if hasattr(response, "model_dump") else response
        if isinstance(node, list):
            node = [item.model_dump() if hasattr(item, "model_dump") else item for item in node]
        root = node
        for step in path:
            children = list(node.items()) if isinstance(node, dict) else list(enumerate(node))
            if not children:
                break
            key, child = children[step % len(children)]
            if not isinstance(child, (dict, list)) or step % 3 == 0:
                if drop and isinstance(node, dict):
                    del node[key]
                else:
                    node[key] = value
                return root
            node = child
        return root

    return st.builds(
        mutate, VALID[reader], st.lists(st.integers(0, 50), min_size=1, max_size=5), SCALARS, st.booleans()
    )
