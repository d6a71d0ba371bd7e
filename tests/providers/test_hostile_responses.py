"""Model output is untrusted: whatever JSON a response holds, calls() gives
tool calls or one ProviderFormatError, never another exception."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from dsh_actors import ToolCall
from dsh_actors.providers import ProviderFormatError, anthropic, openai, openai_responses

KEYS = st.sampled_from(["choices", "message", "role", "tool_calls", "id", "type", "function", "name",
                        "arguments", "output", "call_id", "content", "input", "assistant", "function_call", "tool_use"])  # fmt: skip
SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8) | KEYS
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS | st.text(max_size=4), inner, max_size=5),
    max_leaves=25,
)


def _read(module: Any, response: Any) -> None:
    try:
        found = module.calls(response)
    except ProviderFormatError as err:
        assert "\n" not in str(err) and err.path.startswith("response")
        return
    assert isinstance(found, tuple) and all(type(c) is ToolCall for c in found)
    assert len({c.id for c in found}) == len(found)


@given(JSON)
def test_chat_calls_of_any_json_are_calls_or_a_format_error(response: Any) -> None:
    _read(openai, response)


@given(JSON)
def test_responses_calls_of_any_json_are_calls_or_a_format_error(response: Any) -> None:
    _read(openai_responses, response)


@given(JSON)
def test_anthropic_calls_of_any_json_are_calls_or_a_format_error(response: Any) -> None:
    _read(anthropic, response)
