"""Batch files: every accepted shape gives the same calls, and every bad
one a one-line error naming where it is wrong."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dsh_actors import ToolCall
from dsh_actors.cli.batchfile import ACCEPTED_SHAPES, BatchFileError, parse_batch, read_batch

from .conftest import EXAMPLES

OURS = [
    {"id": "a", "name": "read_file", "arguments": {"path": "x.txt"}},
    {"id": "b", "name": "run_shell", "arguments": {"command": "echo hi"}},
]
EXPECTED = (
    ToolCall("a", "read_file", {"path": "x.txt"}),
    ToolCall("b", "run_shell", {"command": "echo hi"}),
)


def _openai_calls() -> list[dict[str, Any]]:
    return [
        {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
        for c in OURS
    ]


def _anthropic_blocks() -> list[dict[str, Any]]:
    return [
        {"type": "text", "text": "Let me look."},
        *({"type": "tool_use", "id": c["id"], "name": c["name"], "input": c["arguments"]} for c in OURS),
    ]


def _parsed(calls: tuple[ToolCall, ...]) -> list[tuple[str, str, Any]]:
    """Calls with their argument text parsed, to compare across shapes."""
    return [
        (c.id, c.name, json.loads(c.arguments) if isinstance(c.arguments, str) else dict(c.arguments)) for c in calls
    ]


@pytest.mark.parametrize("document", [{"calls": OURS}, OURS], ids=["object", "bare list"])
def test_our_calls_as_an_object_or_a_bare_list_parse_to_the_same_tool_calls(document: Any) -> None:
    batch = parse_batch(document)
    assert batch.shape == "dsh"
    assert batch.calls == EXPECTED


@pytest.mark.parametrize(
    "document",
    [
        _openai_calls(),
        {"role": "assistant", "content": None, "tool_calls": _openai_calls()},
        {
            "id": "chatcmpl-1",
            "choices": [{"index": 0, "message": {"role": "assistant", "tool_calls": _openai_calls()}}],
        },
    ],
    ids=["tool_calls", "assistant message", "chat completion"],
)
def test_the_openai_shapes_parse_to_the_same_tool_calls(document: Any) -> None:
    batch = parse_batch(document)
    assert batch.shape == "openai"
    assert _parsed(batch.calls) == _parsed(EXPECTED)


def test_openai_argument_text_is_kept_as_text_for_the_executor_to_parse() -> None:
    call = {"id": "a", "type": "function", "function": {"name": "read_file", "arguments": "{not json"}}
    assert parse_batch([call]).calls == (ToolCall("a", "read_file", "{not json"),)


@pytest.mark.parametrize(
    "document",
    [_anthropic_blocks(), {"role": "assistant", "content": _anthropic_blocks()},
     {"id": "msg_1", "type": "message", "role": "assistant", "content": _anthropic_blocks()}],
    ids=["content blocks", "assistant message", "messages api response"],
)  # fmt: skip
def test_the_anthropic_shapes_parse_to_the_same_tool_calls_skipping_text_blocks(document: Any) -> None:
    batch = parse_batch(document)
    assert batch.shape == "anthropic"
    assert batch.calls == EXPECTED


def test_openai_responses_function_call_items_are_read_skipping_other_items() -> None:
    items = [{"type": "reasoning", "id": "r1", "summary": []}] + [
        {"type": "function_call", "call_id": c["id"], "name": c["name"], "arguments": json.dumps(c["arguments"])}
        for c in OURS
    ]
    for document in (items, {"id": "resp_1", "output": items}):
        batch = parse_batch(document)
        assert batch.shape == "openai-responses"
        assert _parsed(batch.calls) == _parsed(EXPECTED)


def test_a_conversation_is_read_from_its_last_assistant_message() -> None:
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "tool_calls": [_openai_calls()[1]]},
        {"role": "tool", "tool_call_id": "b", "content": "hi"},
        {"role": "assistant", "tool_calls": [_openai_calls()[0]]},
    ]
    assert _parsed(parse_batch(messages).calls) == _parsed(EXPECTED[:1])


def test_our_calls_without_ids_are_numbered_by_position_and_arguments_default_to_empty() -> None:
    batch = parse_batch([{"name": "a"}, {"name": "b", "arguments": '{"x": 1}'}])
    assert batch.calls == (ToolCall("c1", "a", ""), ToolCall("c2", "b", '{"x": 1}'))


def test_the_three_example_batch_files_hold_the_same_calls() -> None:
    files = {name: read_batch(EXAMPLES / name) for name in ("batch.json", "batch_openai.json", "batch_anthropic.json")}
    assert [b.shape for b in files.values()] == ["dsh", "openai", "anthropic"]
    shapes = [[(name, args) for _, name, args in _parsed(b.calls)] for b in files.values()]
    assert shapes[0] == shapes[1] == shapes[2]
    assert [name for name, _ in shapes[0]] == ["write_file", "read_file", "search_text", "run_shell"]


def test_an_unknown_shape_says_which_shapes_are_accepted() -> None:
    with pytest.raises(BatchFileError) as caught:
        parse_batch({"foo": 1}, "b.json")
    message = str(caught.value)
    assert message.startswith("b.json: unknown batch shape (an object with 'foo'); accepted: ")
    assert ACCEPTED_SHAPES in message and "\n" not in message
    for shape in ("ours", "OpenAI", "Anthropic", "tool_calls", "tool_use", "Responses", "function_call"):
        assert shape in message


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (42, "unknown batch shape (the document is a number)"),
        ([1, 2], "unknown batch shape (a list whose first item is a number)"),
        ([], "no tool calls found (the list is empty)"),
        ({"calls": []}, "no tool calls found (in the dsh-actors shape)"),
        ({"calls": {}}, "batch.calls: must be a list, got an object"),
        ({"calls": [{"id": "a"}]}, "batch.calls[0]: missing 'name'"),
        ({"calls": [{"name": ""}]}, "batch.calls[0].name: must be a non-empty string, got an empty string"),
        ({"calls": [{"id": 7, "name": "x"}]}, "batch.calls[0].id: must be a non-empty string, got a number"),
        ({"calls": [{"name": "x", "args": {}}]}, "batch.calls[0]: unknown key 'args'"),
        ({"calls": [{"name": "x", "arguments": [1]}]}, "batch.calls[0].arguments: must be an object or JSON text, got a list"),
        ({"calls": [{"id": "a", "name": "x"}, {"id": "a", "name": "y"}]},
         'duplicate call id "a" (batch.calls[0] and batch.calls[1]): each result is paired with its call by id; '
         "give each call an id of its own"),
        ({"calls": [{"id": "a\x1b[2J", "name": "x"}, {"id": "a\x1b[2J", "name": "y"}]},
         'duplicate call id "a\\x1b[2J" (batch.calls[0] and batch.calls[1])'),
        ([{"id": "a", "type": "custom", "function": {"name": "x"}}], "batch[0].type: must be \"function\", got 'custom'"),
        ([{"id": "a", "function": "x"}], "batch[0].function: must be an object, got a string"),
        ([{"type": "function", "function": {"name": "x", "arguments": "{}"}}], "batch[0]: missing 'id'"),
        ({"choices": []}, "batch.choices: holds 0 choices"),
        ({"choices": [{"message": {"role": "assistant", "content": "hi"}}]}, "no tool calls found (in the OpenAI tool_calls shape)"),
        ({"role": "assistant", "tool_calls": None}, '"tool_calls" is null: no tool calls'),
        ({"role": "assistant", "content": "just text"}, "an assistant message without"),
        ({"role": "assistant", "content": [{"type": "text", "text": "hi"}]}, "no tool calls found (in the Anthropic tool_use shape)"),
        ([{"type": "tool_use", "id": "a", "name": "x", "input": "text"}], "batch[0].input: must be an object, got a string"),
        ([{"role": "user", "content": "hi"}], "a list of messages without an assistant message"),
    ],
)  # fmt: skip
def test_a_bad_batch_document_is_one_line_naming_the_bad_field(document: Any, expected: str) -> None:
    with pytest.raises(BatchFileError) as caught:
        parse_batch(document, "b.json")
    message = str(caught.value)
    assert message.startswith("b.json: ") and expected in message, message
    assert "\n" not in message


def test_a_missing_file_a_folder_and_text_that_is_not_json_are_batch_file_errors(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text('{"calls": [')
    cases = {
        tmp_path / "missing.json": "missing.json: no such file",
        tmp_path: "is a directory, not a batch file",
        tmp_path / "bad.json": "bad.json: not valid JSON: invalid JSON text: unexpected end of data",
    }
    for path, expected in cases.items():
        with pytest.raises(BatchFileError, match=expected):
            read_batch(path)
