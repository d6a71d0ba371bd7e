"""rt.tools.model_tools(agent, tool_set): what the model is offered under the
agent's executor, and the providers' tools() built on it (PTC: run_code)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from anthropic.types import ToolParam
from openai.types.chat import ChatCompletionToolUnionParam
from openai.types.responses import FunctionToolParam

from dsh_actors import (
    AbortController,
    Agent,
    ModelSelection,
    NativeExecutor,
    ToolActivationContext,
    ToolDefinition,
    ToolModelInput,
    ToolOutput,
    ToolRestriction,
    ToolRuntime,
    define_tool,
    dumps,
    text,
)
from dsh_actors import tool as typed_tool
from dsh_actors.providers import anthropic, openai, openai_responses
from executors.ptc import PtcExecutor

from .helpers import validate


def tool(name: str) -> Any:
    return define_tool(
        name=name,
        description=f"The {name} tool.",
        parameters={"path": {"type": "string", "required": True}},
        output=ToolOutput(schema={"type": "string"}, render=lambda a, v: [text(v)]),
        execute=lambda args, ctx: name,
    )


@pytest.fixture
def ptc_rt(rt: ToolRuntime) -> Iterator[tuple[ToolRuntime, Agent, PtcExecutor]]:
    """``rt`` with read_file and grep registered globally and a PTC executor
    set for the agent ``coder`` only; no worker is left afterwards."""
    rt.tools.register(tool("read_file"))
    rt.tools.register(tool("grep"))
    coder = Agent("coder")
    executor = PtcExecutor(timeout_ms=2000)
    rt.tools.scope(coder).set_executor(executor)
    yield rt, coder, executor
    rt.stop()
    assert executor.worker_pids() == []


def test_under_the_native_executor_the_model_is_offered_the_callable_tools(rt: ToolRuntime) -> None:
    rt.tools.register(tool("read_file"))
    offered = rt.tools.model_tools()
    assert isinstance(offered, ToolModelInput)
    assert list(offered.schemas) == rt.tools.schemas()
    assert offered.known_names == ("read_file",)


def test_a_ptc_agent_is_offered_exactly_run_code_in_every_format(
    ptc_rt: tuple[ToolRuntime, Agent, PtcExecutor],
) -> None:
    rt, coder, _ = ptc_rt
    offered = rt.tools.model_tools(coder)
    assert offered.known_names == ("run_code",)
    (run_code,) = offered.schemas
    assert run_code["name"] == "run_code"
    assert "async def read_file(path: str) -> str:" in run_code["description"]
    assert "async def grep(path: str) -> str:" in run_code["description"]
    assert [s.title for s in offered.sections][-1] == "Tools callable from run_code"

    chat = openai.tools(rt, coder)
    assert chat == [{"type": "function", "function": run_code}]
    assert openai_responses.tools(rt, coder) == [{"type": "function", **run_code, "strict": False}]
    assert anthropic.tools(rt, coder) == [
        {"name": "run_code", "description": run_code["description"], "input_schema": run_code["parameters"]}
    ]
    validate(ChatCompletionToolUnionParam, chat[0])
    validate(FunctionToolParam, openai_responses.tools(rt, coder)[0])
    validate(ToolParam, anthropic.tools(rt, coder)[0])
    # another agent still runs under the global native executor
    assert [t["function"]["name"] for t in openai.tools(rt, Agent("reviewer"))] == ["read_file", "grep"]


def test_a_scoped_service_describes_its_own_agent_by_default(ptc_rt: tuple[ToolRuntime, Agent, PtcExecutor]) -> None:
    rt, coder, _ = ptc_rt
    assert rt.tools.scope(coder).model_tools() == rt.tools.model_tools(coder)
    assert openai.tools(rt.tools.scope(coder)) == openai.tools(rt, coder)
    assert rt.tools.scope(coder).model_tools(Agent("other")).known_names == ("read_file", "grep")


def test_restrictions_narrow_what_is_offered_and_what_run_code_lists(
    ptc_rt: tuple[ToolRuntime, Agent, PtcExecutor],
) -> None:
    rt, coder, _ = ptc_rt
    reviewer = Agent("reviewer")
    rt.tools.scope(reviewer).restrict(ToolRestriction(deny=("grep",)))
    assert rt.tools.model_tools(reviewer).known_names == ("read_file",)
    rt.tools.scope(coder).restrict(ToolRestriction(allow=("read_file",)))
    (run_code,) = rt.tools.model_tools(coder).schemas
    assert "async def read_file(" in run_code["description"] and "grep" not in run_code["description"]


def test_conditional_tools_are_offered_only_in_a_step_that_admitted_them(rt: ToolRuntime) -> None:
    rt.tools.register(tool("read_file"))
    rt.tools.register(tool("deploy"), when=lambda context: context.model_selection.model == "big")
    agent = Agent("main")
    assert rt.tools.model_tools(agent).known_names == ("read_file",)
    for model, names in (("big", ["read_file", "deploy"]), ("small", ["read_file"])):
        context = ToolActivationContext(agent, ModelSelection("openai", model), AbortController().signal)
        step = rt.tools.resolve(context)
        try:
            assert [t["function"]["name"] for t in openai.tools(rt, agent, step)] == names
        finally:
            step.dispose()


def test_the_schemas_are_fresh_copies(rt: ToolRuntime) -> None:
    rt.tools.register(tool("read_file"))
    first = openai.tools(rt)
    first[0]["function"]["parameters"]["properties"]["path"]["type"] = "number"
    rt.tools.model_tools().schemas[0]["parameters"]["required"].append("x")
    assert openai.tools(rt)[0]["function"]["parameters"] == rt.tools.schemas()[0]["parameters"]


class _Broken(NativeExecutor):
    def __init__(self, described: Any) -> None:
        super().__init__()
        self.described = described

    def describe(self, tools: Any) -> Any:
        return self.described


@pytest.mark.parametrize(
    ("described", "message"),
    [
        ([], "_Broken.describe() must return a ToolModelInput, not list"),
        (ToolModelInput(schemas=("x",), known_names=()), "schemas[0] must be a {name, description, parameters} dict"),
        (ToolModelInput(schemas=({"name": "t", "description": 1, "parameters": {}},), known_names=()),
         "schemas[0] (t): description must be a str"),
        (ToolModelInput(schemas=({"name": "t", "description": "", "parameters": {"x": float("nan")}},), known_names=()),
         "schemas[0] (t): parameters are not lossless JSON"),
    ],
)  # fmt: skip
def test_an_executor_describing_nonsense_is_a_clear_type_error(rt: ToolRuntime, described: Any, message: str) -> None:
    agent = Agent("odd")
    rt.tools.scope(agent).set_executor(_Broken(described))
    with pytest.raises(TypeError, match="^_Broken.describe\\(\\)") as caught:
        rt.tools.model_tools(agent)
    assert message in str(caught.value)
    with pytest.raises(TypeError, match="takes a ToolRuntime"):
        openai.tools(object())


def test_validate_catches_a_key_the_sdk_type_does_not_declare() -> None:
    with pytest.raises(AssertionError, match="keys the SDK type does not declare"):
        validate(ToolParam, {"name": "t", "input_schema": {"type": "object"}, "parameters": {}})


def _offered(idempotent: bool) -> list[Any]:
    """Everything the model is offered for three tools (define_tool, @tool,
    a raw definition) declared ``idempotent``, natively and under PTC."""

    def typed_echo(message: str) -> str:
        """Echo a message."""
        return message

    raw = ToolDefinition(
        name="raw",
        description="A raw tool.",
        parameters={"type": "object", "properties": {"n": {"type": "integer"}}},
        output=ToolOutput(schema={"type": "integer"}),
        execute=lambda args, ctx: 1,
        idempotent=idempotent,
    )
    with ToolRuntime() as rt:
        rt.tools.register(define_tool(**{**_READ_FILE, "idempotent": idempotent}))
        rt.tools.register(typed_tool(idempotent=idempotent)(typed_echo))
        rt.tools.register(raw)
        assert [d.idempotent for d in rt.tools.definitions()] == [idempotent] * 3
        coder = Agent("coder")
        rt.tools.scope(coder).set_executor(PtcExecutor(timeout_ms=2000))
        offered: list[Any] = []
        for agent in (None, coder):
            offered += [
                rt.tools.schemas(),
                list(rt.tools.model_tools(agent).schemas),
                openai.tools(rt, agent),
                openai.tools(rt, agent, strict=True),
                openai_responses.tools(rt, agent),
                openai_responses.tools(rt, agent, strict=True),
                anthropic.tools(rt, agent),
            ]
        return offered


_READ_FILE: dict[str, Any] = {
    "name": "read_file",
    "description": "Read a file.",
    "parameters": {"path": {"type": "string", "required": True}},
    "output": ToolOutput(schema={"type": "string"}),
    "execute": lambda args, ctx: "",
}


def test_idempotent_is_never_shown_to_the_model() -> None:
    offered = _offered(idempotent=True)
    assert offered == _offered(idempotent=False)
    assert "idempotent" not in dumps(offered).decode()
