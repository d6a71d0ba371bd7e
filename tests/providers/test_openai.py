"""providers.openai (Chat Completions): a completion with parallel tool calls
in, tool messages out, every result valid as the SDK's request params."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionMessageParam,
    ChatCompletionToolUnionParam,
)
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming

from dsh_actors import Agent, ToolCall, ToolRuntime
from dsh_actors.providers import ProviderFormatError, Results, openai

from .helpers import ERROR_CASES, ERROR_IDS, PNG, aborted_batch, kit, run, validate, validate_all

COMPLETION: dict[str, Any] = {
    "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
    "object": "chat.completion",
    "created": 1741570283,
    "model": "gpt-4.1-2025-04-14",
    "choices": [{
        "index": 0,
        "message": {
            "role": "assistant",
            "content": None,
            "refusal": None,
            "annotations": [],
            "tool_calls": [
                {"id": "call_HgMTzlLXGk0xYbsYGVtvQWKB", "type": "function",
                 "function": {"name": "read_file", "arguments": "{\"path\": \"src/app.py\"}"}},
                {"id": "call_9VnUjgHzkkXc5Rkk0FDXhvBd", "type": "function",
                 "function": {"name": "read_file", "arguments": "{\"path\": \"README.md\"}"}},
                {"id": "call_LaGRs7rW8Dm3OH1bJNgvS2mu", "type": "function",
                 "function": {"name": "screenshot", "arguments": "{}"}},
            ],
        },
        "logprobs": None,
        "finish_reason": "tool_calls",
    }],
    "usage": {"prompt_tokens": 82, "completion_tokens": 61, "total_tokens": 143},
    "service_tier": "default",
    "system_fingerprint": "fp_a1102cf978",
}  # fmt: skip

IDS = ["call_HgMTzlLXGk0xYbsYGVtvQWKB", "call_9VnUjgHzkkXc5Rkk0FDXhvBd", "call_LaGRs7rW8Dm3OH1bJNgvS2mu"]


@pytest.fixture
def tools_rt(rt: ToolRuntime) -> ToolRuntime:
    kit(rt)
    return rt


def test_a_completion_a_choice_a_message_and_its_dict_give_the_same_parallel_calls() -> None:
    completion = ChatCompletion.model_validate(COMPLETION)
    message = completion.choices[0].message
    expected = (
        ToolCall(IDS[0], "read_file", '{"path": "src/app.py"}'),
        ToolCall(IDS[1], "read_file", '{"path": "README.md"}'),
        ToolCall(IDS[2], "screenshot", "{}"),
    )
    for response in (completion, completion.choices[0], message, message.tool_calls, COMPLETION, message.model_dump()):
        assert openai.calls(response) == expected


def test_a_round_trip_answers_every_call_in_model_order_with_sdk_valid_messages(tools_rt: ToolRuntime) -> None:
    completion = ChatCompletion.model_validate(COMPLETION)
    batch = run(tools_rt, openai.calls(completion))
    messages = openai.results(batch)
    assert isinstance(messages, Results) and not messages.concluded
    tool_messages = [m for m in messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == IDS
    assert tool_messages[0]["content"] == "contents of src/app.py"
    validate_all(ChatCompletionMessageParam, messages)
    validate_all(ChatCompletionToolUnionParam, openai.tools(tools_rt))
    request = {
        "model": "gpt-4.1",
        "messages": [{"role": "user", "content": "Look at the app."},
                     completion.choices[0].message.model_dump(exclude_none=True), *messages],
        "tools": openai.tools(tools_rt),
    }  # fmt: skip
    validate(CompletionCreateParamsNonStreaming, request, exact=False)


def test_images_go_to_a_user_message_after_the_tool_messages_which_say_so(tools_rt: ToolRuntime) -> None:
    batch = run(tools_rt, [ToolCall("c1", "screenshot", "{}"), ToolCall("c2", "read_file", '{"path": "a"}')])
    messages = openai.results(batch)
    assert messages[0] == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": [
            {"type": "text", "text": "the login page"},
            {"type": "text", "text": "[image 1 (image/png) is attached to the next user message]"},
        ],
    }
    assert messages[1] == {"role": "tool", "tool_call_id": "c2", "content": "contents of a"}
    assert messages[2] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "The images returned by tool call c1:"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        ],
    }
    validate_all(ChatCompletionMessageParam, messages)


def test_an_image_type_the_provider_refuses_and_reasoning_become_text(tools_rt: ToolRuntime) -> None:
    messages = openai.results(run(tools_rt, [ToolCall("c1", "diagram", "{}"), ToolCall("c2", "think", "{}")]))
    assert len(messages) == 2  # no image was attached
    assert "image/svg+xml was left out" in messages[0]["content"]
    assert messages[1]["content"] == [{"type": "text", "text": "hmm"}, {"type": "text", "text": "decided"}]
    validate_all(ChatCompletionMessageParam, messages)


@pytest.mark.parametrize(("call", "code", "start"), ERROR_CASES, ids=ERROR_IDS)
def test_each_error_kind_is_marked_by_its_text(
    tools_rt: ToolRuntime, call: ToolCall, code: str | None, start: str
) -> None:
    batch = run(tools_rt, [call])
    outcome = batch.results[0].result
    assert outcome.is_error and (code is None or outcome.code == code)
    (message,) = openai.results(batch)
    assert message["tool_call_id"] == call.id and message["content"].startswith(start), message
    validate(ChatCompletionMessageParam, message)


def test_additional_contexts_follow_as_user_messages_in_order(tools_rt: ToolRuntime) -> None:
    batch = run(tools_rt, [ToolCall("c1", "note", '{"text": "first"}'), ToolCall("c2", "note", '{"text": "second"}')])
    messages = openai.results(batch)
    assert [m["role"] for m in messages] == ["tool", "tool", "user", "user"]
    image = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}
    assert messages[2]["content"] == [{"type": "text", "text": "first"}, image]
    assert messages[3]["content"] == [{"type": "text", "text": "second"}, image]
    validate_all(ChatCompletionMessageParam, messages)


def test_a_concluded_turn_is_reported_on_the_results(tools_rt: ToolRuntime) -> None:
    batch = run(tools_rt, [ToolCall("c1", "read_file", '{"path": "a"}'), ToolCall("c2", "finish", "{}")])
    messages = openai.results(batch)
    assert batch.concluded and messages.concluded and messages.concluded_by == ("c2",)
    assert [m["tool_call_id"] for m in messages] == ["c1", "c2"]  # still every result


def test_an_aborted_batch_still_answers_every_call(tools_rt: ToolRuntime) -> None:
    messages = openai.results(aborted_batch(tools_rt))
    assert [(m["tool_call_id"], m["content"]) for m in messages] == [
        ("a1", "Error: tool call aborted"),
        ("a2", "Error: tool call aborted before dispatch"),
        ("a3", "Error: tool call aborted before dispatch"),
    ]
    validate_all(ChatCompletionMessageParam, messages)


def test_tools_are_function_tools_with_the_registry_schemas(tools_rt: ToolRuntime) -> None:
    offered = openai.tools(tools_rt, Agent("main"))
    assert [t["function"] for t in offered] == tools_rt.tools.schemas()
    assert {t["type"] for t in offered} == {"function"}


def test_a_final_answer_has_no_calls_and_argument_text_stays_text() -> None:
    final = json.loads(json.dumps(COMPLETION))
    final["choices"][0]["message"].update(content="All done.", tool_calls=None)
    final["choices"][0]["finish_reason"] = "stop"
    assert openai.calls(ChatCompletion.model_validate(final)) == ()
    broken = {
        "role": "assistant",
        "tool_calls": [{"id": "x", "type": "function", "function": {"name": "t", "arguments": "{oops"}}],
    }
    assert openai.calls(broken) == (ToolCall("x", "t", "{oops"),)


#: finish_reason: what the refusal says happened and how to fix it.
CUT_CHOICES = {
    "length": (
        'the choice stopped at its token limit (finish_reason "length") with a tool call in it',
        "ask again with a higher max_completion_tokens",
    ),
    # (The SDK: "content_filter if content was omitted due to a flag from our
    # content filters": the arguments may end where the filter cut them.)
    "content_filter": (
        'content filters omitted some of the choice\'s output (finish_reason "content_filter") with a tool call in it',
        "change the request, or handle it as the model's refusal",
    ),
}


@pytest.mark.parametrize("reason", CUT_CHOICES)
def test_a_choice_cut_inside_a_tool_call_runs_no_call(reason: str) -> None:
    # Every call of the choice is refused, the complete ones too: the model
    # is asked again for the whole step.
    what, fix = CUT_CHOICES[reason]
    cut = json.loads(json.dumps(COMPLETION))
    cut["choices"][0]["finish_reason"] = reason
    cut["choices"][0]["message"]["tool_calls"][1]["function"]["arguments"] = '{"path": "READ'
    for source, where in (
        (ChatCompletion.model_validate(cut), "response.choices[0]"),
        (cut, "response.choices[0]"),
        (cut["choices"][0], "response"),
    ):
        with pytest.raises(ProviderFormatError) as caught:
            openai.calls(source)
        assert str(caught.value) == (
            f"{where}.finish_reason: {what}: its arguments may be cut short, so no call is run; {fix}"
        )
    text_only = json.loads(json.dumps(cut))
    text_only["choices"][0]["message"].update(content="Long answ", tool_calls=None)
    assert openai.calls(ChatCompletion.model_validate(text_only)) == ()


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ({"choices": []}, "response.choices: holds 0 choices"),
        ({"role": "user", "content": "hi"}, "response.role: a 'user' message holds no tool calls"),
        ({"tool_calls": [{"id": "a", "type": "custom", "custom": {"name": "x", "input": "y"}}]},
         "response.tool_calls[0].type: must be \"function\", got 'custom'"),
        ({"tool_calls": [{"type": "function", "function": {"name": "x"}}]}, "response.tool_calls[0]: missing 'id'"),
        ({"tool_calls": [{"id": "a", "function": {"name": "x", "arguments": 3}}]},
         "response.tool_calls[0].function.arguments: must be an object or JSON text, got a number"),
        ({"tool_calls": [{"id": "a", "function": {"name": "x"}}, {"id": "a", "function": {"name": "y"}}]},
         'response.tool_calls[1].function: duplicate call id "a" (also the id of response.tool_calls[0].function)'),
        (42, "response: expected a chat completion (with \"choices\"), a choice (with \"message\") or an assistant message (with \"role\": \"assistant\"), got a number"),
    ],
)  # fmt: skip
def test_a_response_it_cannot_read_is_one_error_naming_the_field(response: Any, expected: str) -> None:
    with pytest.raises(ProviderFormatError) as caught:
        openai.calls(response)
    assert str(caught.value).startswith(expected), str(caught.value)


def test_the_choices_list_is_refused_naming_the_completion_or_its_message() -> None:
    completion = ChatCompletion.model_validate(COMPLETION)
    for choices in (completion.choices, COMPLETION["choices"]):
        with pytest.raises(ProviderFormatError) as caught:
            openai.calls(choices)
        assert caught.value.path == "response[0]"
        assert "a choice, not a tool call" in caught.value.problem
        assert "the completion or choices[0].message" in caught.value.problem


def _chunk(delta: dict[str, Any], finish_reason: str | None = None) -> ChatCompletionChunk:
    return ChatCompletionChunk.model_validate({
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1741570283, "model": "gpt-4.1",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    })  # fmt: skip


def test_a_streamed_chunk_or_the_conversation_is_refused_naming_what_to_pass() -> None:
    # (They read "must be an object, got null" and "... got an object with
    # the keys 'delta', ...": nothing said what to pass instead.)
    chunks = [
        _chunk({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                                     "function": {"name": "read_file", "arguments": ""}}]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"path": "a.md"}'}}]}),
        _chunk({}, "tool_calls"),
    ]  # fmt: skip
    streamed = (
        "a streamed chunk (chat.completion.chunk), not a completion: assemble the stream first and pass the "
        "completion it makes (with the SDK: client.chat.completions.stream(...), then stream.get_final_completion())"
    )
    for given, expected in (
        (chunks[0], f"response: {streamed}"),
        (chunks, f"response[0]: {streamed}"),
        (chunks[0].choices[0], f"response: the choice of {streamed}"),
        ({"choices": [chunks[0].choices[0].model_dump()]}, f"response.choices[0]: the choice of {streamed}"),
    ):
        with pytest.raises(ProviderFormatError) as caught:
            openai.calls(given)
        assert str(caught.value) == expected
    # What it names works: the SDK's stream state assembles the completion.
    state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
    for chunk in chunks:
        state.handle_chunk(chunk)
    completion = state.get_final_completion()
    assert openai.calls(completion) == (ToolCall("call_1", "read_file", '{"path": "a.md"}'),)
    conversation = [{"role": "user", "content": "Read a.md."}, completion.choices[0].message.model_dump()]
    for given in (conversation, conversation[1:]):
        with pytest.raises(ProviderFormatError) as caught:
            openai.calls(given)
        assert str(caught.value) == (
            "response[0]: a message, not a tool call (a list is read as message.tool_calls, not as the "
            "conversation): pass the assistant message itself (completion.choices[0].message, or messages[-1])"
        )
    with pytest.raises(ProviderFormatError) as caught:
        openai.calls([completion])
    assert str(caught.value).startswith("response[0]: a chat completion, not a tool call")


def test_the_format_error_is_shown_by_its_public_path() -> None:
    # (a traceback names the class by __module__: the private _common would show)
    assert f"{ProviderFormatError.__module__}.{ProviderFormatError.__qualname__}" == (
        "dsh_actors.providers.ProviderFormatError"
    )


def test_results_takes_the_batch_result() -> None:
    with pytest.raises(TypeError, match="takes the ToolBatchResult"):
        openai.results([ToolCall("a", "b")])  # type: ignore[arg-type]


@pytest.mark.parametrize("module", ["openai", "openai_responses", "anthropic"])
def test_results_of_a_suspended_batch_are_refused_naming_the_fix(rt: ToolRuntime, module: str) -> None:
    # (They gave the settled calls' messages only, which the provider then
    # refuses for the missing results.)
    import importlib

    from dsh_actors import Ask, InvalidStateError, ToolOutput, define_tool

    adapter = importlib.import_module(f"dsh_actors.providers.{module}")
    for name in ("ok", "risky"):
        rt.tools.register(
            define_tool(
                name=name,
                description=name,
                parameters={},
                output=ToolOutput(schema={"type": "string"}),
                execute=lambda args, ctx: "done",
            )
        )
    rt.events.on("tools/pre-execute", lambda execution, next_: Ask("sure?") if execution.name == "risky" else next_())
    rt.approvals.set(lambda request: "deferred")
    batch = run(rt, [ToolCall("c1", "ok", "{}"), ToolCall("c2", "risky", "{}")])
    assert batch.pending == ("c2",)
    with pytest.raises(InvalidStateError) as refused:
        adapter.results(batch)
    assert str(refused.value) == (
        f"{module}.results() takes a complete batch: this one suspended with call(s) 'c2' still open (waiting "
        "for an approval, or behind one); resume it (rt.tools.resume(batch.suspension, decisions, agent=agent), "
        "with the agent the batch ran for) and pass the batch that returns"
    )


def test_a_function_call_of_the_deprecated_functions_parameter_is_refused_naming_the_fix() -> None:
    # (It gave (): a loop ended the turn as if the model had answered.)
    legacy = json.loads(json.dumps(COMPLETION))
    legacy["choices"][0]["message"].update(tool_calls=None, function_call={"name": "read_file", "arguments": "{}"})
    legacy["choices"][0]["finish_reason"] = "function_call"
    for source, where in ((ChatCompletion.model_validate(legacy), "response.choices[0].message"),
                          (legacy["choices"][0]["message"], "response")):  # fmt: skip
        with pytest.raises(ProviderFormatError) as caught:
            openai.calls(source)
        assert str(caught.value) == (
            f"{where}.function_call: a function call of the deprecated functions parameter, which is not read: "
            "offer the tools as tools=openai.tools(rt, agent), and the model calls them in tool_calls"
        )
