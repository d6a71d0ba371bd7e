"""The readers' calls are ready for a batch, and tools() refuses what would
offer the model nothing or a silent strict mode: a call id or tool name with
a lone surrogate (which a batch refuses whole) is a ProviderFormatError at
its field; an empty name says so; a tool set resolved for another agent, or
disposed, is refused by every tools(); strict takes a bool only."""

from __future__ import annotations

import json
import warnings
from types import ModuleType
from typing import Any

import pytest

from dsh_actors import (
    AbortController,
    Agent,
    ModelSelection,
    ToolActivationContext,
    ToolBatchInput,
    ToolCall,
    ToolOutput,
    ToolRuntime,
    define_tool,
)
from dsh_actors.errors import InvalidStateError, InvalidTypeError, InvalidValueError
from dsh_actors.providers import ProviderFormatError, anthropic, openai, openai_responses

# json.loads of a "\ud800" escape gives a str with a lone surrogate, as a
# response read with the json module may hold.
LONE = json.loads('"\\ud800"')


def _chat(call_id: str, name: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}],
    }


def _anthropic(call_id: str, name: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "tool_use", "id": call_id, "name": name, "input": {}}]}


def _responses(call_id: str, name: str) -> dict[str, Any]:
    return {"output": [{"type": "function_call", "call_id": call_id, "name": name, "arguments": "{}"}]}


@pytest.mark.parametrize(
    ("module", "build", "id_path", "name_path"),
    [
        (openai, _chat, "response.tool_calls[0].id", "response.tool_calls[0].function.name"),
        (anthropic, _anthropic, "response.content[0].id", "response.content[0].name"),
        (openai_responses, _responses, "response.output[0].call_id", "response.output[0].name"),
    ],
)
def test_a_call_id_or_name_with_a_lone_surrogate_is_a_format_error_at_its_field(
    module: ModuleType, build: Any, id_path: str, name_path: str
) -> None:
    # (It was read without a word, and the batch then refused every call of
    # the response with an InvalidValueError naming neither field nor provider.)
    with pytest.raises(ProviderFormatError) as bad_id:
        module.calls(build(f"call{LONE}", "echo"))
    assert bad_id.value.path == id_path
    assert bad_id.value.problem == "holds a lone surrogate (U+D800 at index 4)"
    with pytest.raises(ProviderFormatError) as bad_name:
        module.calls(build("c1", f"ec{LONE}ho"))
    assert bad_name.value.path == name_path
    assert bad_name.value.problem == "holds a lone surrogate (U+D800 at index 2)"
    # Other text is read as it is.
    (call,) = module.calls(build("c1-é", "écho"))
    assert (call.id, call.name) == ("c1-é", "écho")


@pytest.mark.parametrize("module", [openai, anthropic, openai_responses])
def test_an_empty_name_is_called_an_empty_string(module: ModuleType) -> None:
    build = {openai: _chat, anthropic: _anthropic, openai_responses: _responses}[module]
    with pytest.raises(ProviderFormatError, match="must be a non-empty string, got an empty string$"):
        module.calls(build("c1", ""))
    with pytest.raises(ProviderFormatError, match="must be a non-empty string, got a number$"):
        module.calls(build("c1", 5))  # type: ignore[arg-type]


def _tool(name: str) -> Any:
    return define_tool(
        name=name,
        description=f"the {name} tool",
        parameters={},
        output=ToolOutput(schema={"type": "string"}),
        execute=lambda args, ctx: name,
    )


def _names(module: ModuleType, offered: list[dict[str, Any]]) -> list[str]:
    return [tool["function"]["name"] if module is openai else tool["name"] for tool in offered]


@pytest.mark.parametrize("module", [openai, anthropic, openai_responses])
def test_tools_refuses_a_set_resolved_for_another_agent_or_disposed(rt: ToolRuntime, module: ModuleType) -> None:
    # (It offered the model no tool at all, the unconditional ones included:
    # the model then made no call, so nothing ever said why.)
    rt.tools.register(_tool("plain"))
    rt.tools.register(_tool("cond"), when=lambda ctx: True)
    main, other = Agent("main"), Agent("other")
    context = ToolActivationContext(
        agent=main, model_selection=ModelSelection("test", "m1"), signal=AbortController().signal
    )
    ts = rt.tools.resolve(context)
    try:
        assert _names(module, module.tools(rt, main, ts)) == ["plain", "cond"]
        assert _names(module, module.tools(rt.tools.scope(main), tool_set=ts)) == ["plain", "cond"]
        with pytest.raises(
            InvalidValueError, match="resolved for agent 'main', but the tools are offered to agent 'other'"
        ):
            module.tools(rt, other, ts)
        with pytest.raises(InvalidValueError, match=r"offered to no agent \(the global view\)"):
            module.tools(rt, tool_set=ts)
        with pytest.raises(InvalidValueError, match="another Agent object"):
            module.tools(rt, Agent("main"), ts)
    finally:
        ts.dispose()
    with pytest.raises(InvalidStateError, match="the tool_set was disposed"):
        module.tools(rt, main, ts)
    assert _names(module, module.tools(rt, main)) == ["plain"]


@pytest.mark.parametrize("module", [openai, openai_responses])
@pytest.mark.parametrize("strict", ["false", 1, None])
def test_strict_takes_a_bool_only(rt: ToolRuntime, module: ModuleType, strict: Any) -> None:
    # (A truthy "false" asked for strict function calling.)
    rt.tools.register(_tool("plain"))
    with pytest.raises(InvalidTypeError, match=r"tools\(strict=...\) takes True or False"):
        module.tools(rt, strict=strict)
    assert len(module.tools(rt, strict=True)) == len(module.tools(rt, strict=False)) == 1


def test_a_batch_runs_the_calls_a_reader_gives(rt: ToolRuntime) -> None:
    # What calls() gives, a batch takes: text beyond ASCII in ids and names.
    rt.tools.register(_tool("plain"))
    calls = openai.calls(_chat("c-é", "plain")) + openai.calls(_chat("c-ü", "plaín"))
    batch = rt.tools.execute(ToolBatchInput(calls=calls))
    assert [item.result.is_error for item in batch.results] == [False, True]
    assert batch.results[1].result.error.info is not None
    assert batch.results[1].result.error.info.code == "UNKNOWN_TOOL"


def test_an_anthropic_message_given_to_openai_calls_is_named_so() -> None:
    message = {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "x", "input": {}}]}
    with pytest.raises(ProviderFormatError) as refused:
        openai.calls(message)
    assert str(refused.value).endswith(
        'content part is "text" or "refusal", got \'tool_use\' (an Anthropic message? read it with anthropic.calls)'
    )


def _constructed(module: ModuleType) -> tuple[Any, Any]:
    """A response built with the SDK's model_construct (no validation) whose
    call arguments are an object where the SDK declares a string (as a
    server other than the provider's may send: read as they are), and one
    whose role is missing (model_dump gives null)."""
    if module is anthropic:
        from anthropic.types import Message, ToolUseBlock

        block = ToolUseBlock.model_construct(type="tool_use", id="t1", name="echo", input={"a": 1})
        return Message.model_construct(role="assistant", content=[block]), Message.model_construct(content=[block])
    if module is openai:
        from openai.types.chat import ChatCompletionMessage
        from openai.types.chat.chat_completion_message_function_tool_call import (
            ChatCompletionMessageFunctionToolCall,
            Function,
        )

        function = Function.model_construct(name="echo", arguments={"a": 1})
        call = ChatCompletionMessageFunctionToolCall.model_construct(id="t1", type="function", function=function)
        return (
            ChatCompletionMessage.model_construct(role="assistant", tool_calls=[call]),
            ChatCompletionMessage.model_construct(tool_calls=[call]),
        )
    from openai.types.responses import Response, ResponseFunctionToolCall

    item = ResponseFunctionToolCall.model_construct(type="function_call", call_id="t1", name="echo", arguments={"a": 1})
    return Response.model_construct(output=[item]), None


@pytest.mark.parametrize("module", [openai, anthropic, openai_responses])
def test_an_sdk_object_built_with_model_construct_is_read_without_a_warning(module: ModuleType) -> None:
    # (pydantic printed a serializer warning for each field holding another
    # type than the SDK declares: a library prints nothing; and a missing
    # role was "a None message".)
    whole, roleless = _constructed(module)
    with warnings.catch_warnings(record=True) as caught_warnings:
        warnings.simplefilter("always")
        assert module.calls(whole) == (ToolCall("t1", "echo", {"a": 1}),)
    assert [str(warning.message) for warning in caught_warnings] == []
    if roleless is not None:
        with pytest.raises(ProviderFormatError) as caught:
            module.calls(roleless)
        assert str(caught.value) == 'response.role: must be "assistant", got null'
