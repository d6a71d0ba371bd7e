"""Model output is untrusted, and a loop may hand a reader the wrong shape.
For every reader: a response built with its provider SDK's own types gives
exactly its calls; another provider's response, an object whose
``model_dump()`` raises, ``{}`` and the like raise ProviderFormatError
(never ``()``, which a loop reads as "the model has answered"); and any JSON
or mutated dump gives tool calls or one ProviderFormatError, never another
exception. About 1,500 generated inputs per reader."""

from __future__ import annotations

import copy
from types import ModuleType
from typing import Any, get_args

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh_actors import ToolCall
from dsh_actors.providers import ProviderFormatError, anthropic, openai, openai_responses

from .strategies import JSON, VALID, broken, is_foreign, mutated

READERS = {"openai": openai, "openai_responses": openai_responses, "anthropic": anthropic}
EXAMPLES = 750
"""Per property; every input goes through all three readers, so each reader
reads about 1,500 generated inputs (valid and foreign SDK responses, broken
SDK objects, any JSON, mutated dumps) in a few seconds."""


def _refused(module: ModuleType, response: Any) -> ProviderFormatError:
    try:
        found = module.calls(response)
    except ProviderFormatError as err:
        assert "\n" not in str(err) and err.path.startswith("response"), str(err)
        return err
    raise AssertionError(f"{module.__name__}.calls() read {found!r} from a response it cannot read: {response!r}")


def _calls_or_format_error(module: ModuleType, response: Any) -> None:
    try:
        found = module.calls(response)
    except ProviderFormatError as err:
        assert "\n" not in str(err) and err.path.startswith("response"), str(err)
        return
    assert isinstance(found, tuple) and all(type(c) is ToolCall for c in found)
    assert len({c.id for c in found}) == len(found)


_SDK_RESPONSES = st.one_of(*(strategy.map(lambda pair, name=name: (name, *pair)) for name, strategy in VALID.items()))
_BROKEN = st.one_of(*(broken(name) for name in READERS))


@settings(max_examples=EXAMPLES)
@given(st.one_of(_SDK_RESPONSES, _BROKEN))
def test_an_sdk_response_gives_its_calls_to_its_reader_and_a_format_error_to_the_others(case: Any) -> None:
    if not isinstance(case, tuple):  # an object whose model_dump() raises, somewhere
        for module in READERS.values():
            _refused(module, case)
        return
    provider, response, expected = case
    assert READERS[provider].calls(response) == expected
    for name, module in READERS.items():
        if name == provider:
            continue
        if is_foreign(response):
            _refused(module, response)
        else:  # [] and a text answer's dict read the same in every format
            _calls_or_format_error(module, response)


@settings(max_examples=EXAMPLES)
@given(st.one_of(JSON, *(mutated(name) for name in READERS)))
def test_any_json_or_mutated_response_gives_calls_or_a_format_error(response: Any) -> None:
    for module in READERS.values():
        _calls_or_format_error(module, response)


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize(
    "response",
    [{}, {"foo": 1}, {"content": None}, {"output": None}, {"choices": None}, None, "", 0, ()],
    ids=["empty", "foo", "content null", "output null", "choices null", "null", "text", "number", "empty tuple"],
)
def test_shapes_of_no_provider_are_a_format_error(reader: str, response: Any) -> None:
    if response == ():
        assert READERS[reader].calls(response) == ()  # an empty list of calls is every reader's "no calls"
        return
    _refused(READERS[reader], response)


def test_the_chat_reader_names_what_it_was_given_instead() -> None:
    from anthropic.types import Message

    message = Message.model_validate({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a"}}],
        "stop_reason": "tool_use", "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1},
    })  # fmt: skip
    assert str(_refused(openai, message)).startswith(
        "response.type: a Chat Completions message has no type, got 'message' (an Anthropic message"
    )
    assert str(_refused(openai, {"object": "response", "output": []})).endswith(
        "(a Responses API response? read it with openai_responses.calls)"
    )


def test_two_calls_of_one_id_are_refused_naming_the_id_both_places_and_the_fix() -> None:
    # (It said "duplicate call id 'a' (also at ...)": a Python repr, and
    # nothing of what to do.)
    from anthropic.types import Message
    from openai.types.chat import ChatCompletion
    from openai.types.responses import Response

    from .test_anthropic import MESSAGE
    from .test_openai import COMPLETION
    from .test_openai_responses import RESPONSE

    completion = copy.deepcopy(COMPLETION)
    chat_calls = completion["choices"][0]["message"]["tool_calls"]
    chat_calls[1]["id"] = chat_calls[0]["id"] = "call_\x1b[2J1"
    message = copy.deepcopy(MESSAGE)
    message["content"][3]["id"] = message["content"][2]["id"]
    response = copy.deepcopy(RESPONSE)
    response["output"][2]["call_id"] = response["output"][1]["call_id"]
    fix = (
        "the model gave two tool calls one id, and each result is paired with its call by id, so none is run; "
        "ask the model again (send the same request) for calls with distinct ids"
    )
    at = "response.choices[0].message.tool_calls"
    for module, sdk_object, expected in (
        (openai, ChatCompletion.model_validate(completion),
         f'{at}[1].function: duplicate call id "call_\\x1b[2J1" (also the id of {at}[0].function): {fix}'),
        (anthropic, Message.model_validate(message),
         f'response.content[3]: duplicate call id "{MESSAGE["content"][2]["id"]}" (also the id of response.content[2]): '
         f"{fix}"),
        (openai_responses, Response.model_validate(response),
         f'response.output[2]: duplicate call id "call_12345xyz" (also the id of response.output[1]): {fix}'),
    ):  # fmt: skip
        assert str(_refused(module, sdk_object)) == expected


def test_an_sdk_object_whose_model_dump_raises_is_named_with_its_error() -> None:
    class Broken:
        def model_dump(self) -> Any:
            raise ValueError("validator state lost")

    for module in READERS.values():
        assert str(_refused(module, Broken())) == (
            "response: test_an_sdk_object_whose_model_dump_raises_is_named_with_its_error.<locals>.Broken"
            ".model_dump() raised ValueError (validator state lost): pass the object the SDK returned, or a dict"
        )


def _types(union: Any) -> set[str]:
    """The ``type`` literals of a discriminated union of SDK models."""
    found: set[str] = set()
    for member in get_args(get_args(union)[0]) if get_args(union) else ():
        found.update(get_args(member.model_fields["type"].annotation))
    return found


def test_every_responses_output_item_type_of_the_sdk_is_read_skipped_or_refused() -> None:
    from openai.types.responses import ResponseOutputItem

    known = {"function_call", "tool_search_call"} | openai_responses.SKIPPED | openai_responses.CLIENT_CALLS
    types = _types(ResponseOutputItem)
    assert "function_call" in types and "reasoning" in types
    assert types <= known, f"output item types the reader does not know: {sorted(types - known)}"


def test_every_anthropic_content_block_type_of_the_sdk_is_read_or_skipped() -> None:
    from anthropic.types import ContentBlock
    from anthropic.types.beta import BetaContentBlock

    known = {"tool_use"} | anthropic.SKIPPED
    types = _types(ContentBlock) | _types(BetaContentBlock)
    assert "tool_use" in types and "text" in types
    assert types <= known, f"content block types the reader does not know: {sorted(types - known)}"
