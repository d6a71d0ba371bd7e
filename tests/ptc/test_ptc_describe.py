"""What the model is offered: only run_code, whose description lists the
callable tools as Python signatures generated from their schemas; names
that are not identifiers are sanitized; the PTC-only rule."""

from __future__ import annotations

from typing import Any

import pytest

from dsh_actors import Agent, Allow, ToolBatchInput, ToolCall, ToolDefinition, ToolOutput, ToolRestriction, text
from executors.ptc import PtcExecutor
from executors.ptc.signatures import bindings, py_name, type_hint

from .helpers import code_of, echo_tool, install, run_code, tool


def raw(name: str, parameters: dict[str, Any], output: Any = None, description: str = "A tool.") -> ToolDefinition:
    return ToolDefinition(
        name=name,
        description=description,
        parameters=parameters,
        output=ToolOutput(schema={} if output is None else output, render=lambda a, v: [text(str(v))]),
        execute=lambda args, ctx: dict(args),
    )


def test_describe_exposes_only_run_code_with_the_tools_as_python_signatures() -> None:
    read_file = raw(
        "read_file",
        {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "the file to read"},
                "limit": {"type": "integer"},
            },
            "required": ["path"],
        },
        output={"type": "string"},
        description="Read a text file.",
    )
    model = PtcExecutor().describe([read_file])
    assert model.known_names == ("run_code",)
    (schema,) = model.schemas
    assert schema["name"] == "run_code"
    assert schema["parameters"] == {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}
    assert (
        "```python\n"
        "async def read_file(path: str, limit: int | None = None) -> str:\n"
        '    """Read a text file.\n'
        "\n"
        "    path: the file to read\n"
        '    """\n'
        "```"
    ) in schema["description"]
    assert "top-level `await` and `return`" in schema["description"]


def test_signatures_map_types_enums_nested_objects_arrays_and_one_of() -> None:
    assert type_hint({}) == "Any"
    assert type_hint({"type": "number"}) == "float"
    assert type_hint({"type": "boolean"}) == "bool"
    assert type_hint({"type": "null"}) == "None"
    assert type_hint({"type": "string", "enum": ["fast", "full"]}) == "Literal['fast', 'full']"
    assert type_hint({"type": "integer", "const": 3}) == "Literal[3]"
    assert type_hint({"type": "object", "properties": {"a": {"type": "string"}}}) == "dict"
    assert type_hint({"type": "array", "items": {"type": "array", "items": {"type": "integer"}}}) == "list[list[int]]"
    assert type_hint({"type": "array"}) == "list"
    assert type_hint({"oneOf": [{"type": "string"}, {"type": "null"}]}) == "str | None"
    assert type_hint({"oneOf": [{"type": "string"}, {}]}) == "Any"
    (binding,) = bindings(
        [
            raw(
                "search",
                {
                    "type": "object",
                    "properties": {
                        "mode": {"type": "string", "enum": ["fast", "full"]},
                        "query": {"type": "string"},
                        "filter": {"oneOf": [{"type": "string"}, {"type": "null"}]},
                    },
                    "required": ["query"],
                },
                output={"type": "array", "items": {"type": "object"}},
            )
        ]
    )
    assert binding.signature.splitlines()[0] == (
        "async def search(query: str, mode: Literal['fast', 'full'] | None = None, "
        "filter: str | None = None) -> list[dict]:"
    )
    assert binding.omit_none == ("mode",)  # filter accepts null: None is sent as null


def test_names_that_are_not_identifiers_are_sanitized() -> None:
    taken: set[str] = set()
    assert py_name("my-tool", taken, prefix="tool") == "my_tool"
    assert py_name("my.tool", taken, prefix="tool") == "my_tool_2"
    assert py_name("2fast", taken, prefix="tool") == "tool_2fast"
    assert py_name("__class__", taken, prefix="tool") == "tool___class__"
    assert py_name("class", taken, prefix="tool") == "class_"
    assert py_name("café", taken, prefix="tool") == "caf_"
    assert py_name("", taken, prefix="tool") == "tool"
    (binding,) = bindings([raw("odd-name", {"type": "object", "properties": {"from": {}, "file-path": {}}})])
    assert binding.py == "odd_name"
    assert binding.params == (("from_", "from"), ("file_path", "file-path"))
    assert binding.signature.splitlines()[0] == "async def odd_name(from_: Any = None, file_path: Any = None) -> Any:"


def test_a_tool_with_a_sanitized_name_and_parameters_is_callable_from_a_program(rt: Any) -> None:
    install(rt, timeout_ms=2000)
    rt.tools.register(raw("odd-name", {"type": "object", "properties": {"from": {}, "file-path": {}}}))
    result = run_code(
        rt,
        "a = await tools.odd_name(from_=1, file_path='p')\n"
        "b = await getattr(tools, 'odd-name')({'from': 2})\n"
        "return [a, b]",
    )
    assert result.value["result"] == ({"from": 1, "file-path": "p"}, {"from": 2})


def test_a_model_direct_call_to_a_native_tool_fails_unknown_tool_before_any_policy(rt: Any) -> None:
    install(rt, timeout_ms=2000)
    rt.tools.register(echo_tool())
    seen: list[str] = []
    rt.events.on("tools/pre-execute", lambda execution, next: seen.append(execution.name) or next())
    batch = rt.tools.execute(ToolBatchInput(calls=(ToolCall(id="c1", name="echo", arguments='{"message": "hi"}'),)))
    result = batch.results[0].result
    assert code_of(result) == "UNKNOWN_TOOL"
    assert result.error.message.startswith(
        'unknown tool "echo". Tools are called from Python here: run a program with run_code'
    )
    assert "await tools.echo(...)" in result.error.message
    assert seen == []  # no policy saw it


def test_an_executor_set_for_one_scope_applies_only_to_that_agents_batches(rt: Any) -> None:
    rt.tools.register(echo_tool())
    coder = Agent("coder")
    rt.tools.scope(coder).set_executor(PtcExecutor(timeout_ms=2000))
    direct = ToolCall(id="d", name="echo", arguments='{"message": "hi"}')
    plain = rt.tools.execute(ToolBatchInput(calls=(direct,), agent=Agent("other"))).results[0].result
    assert plain.value == {"message": "hi"}
    routed = rt.tools.execute(ToolBatchInput(calls=(direct,), agent=coder)).results[0].result
    assert code_of(routed) == "UNKNOWN_TOOL"
    assert run_code(rt, "return await tools.echo(message='x')", agent=coder).value["result"] == {"message": "x"}
    # run_code itself does not exist for the other agent
    missing = run_code(rt, "return 1", agent=Agent("other"))
    assert code_of(missing) == "UNKNOWN_TOOL"


def test_a_program_sees_exactly_the_tools_of_its_scope(rt: Any) -> None:
    install(rt, timeout_ms=2000)
    rt.tools.register(echo_tool())
    rt.tools.register(tool("secret", lambda args, ctx: "s"))
    child = Agent("child")
    rt.tools.scope(child).register(tool("mine", lambda args, ctx: "m"))
    rt.tools.scope(child).restrict(ToolRestriction(deny=["secret"]))
    listing = run_code(rt, "return sorted(dir(tools))", agent=child).value["result"]
    assert listing == ("echo", "mine")
    assert run_code(rt, "return sorted(dir(tools))").value["result"] == ("echo", "secret")


def test_print_and_help_of_tools_list_the_tools_with_their_descriptions(rt: Any) -> None:
    install(rt, timeout_ms=2000)
    rt.tools.register(echo_tool())
    rt.tools.register(tool("read-file", lambda args, ctx: "s", description="Read a file.\n\nMore details."))
    listing = "tools:\n  tools.echo: test tool echo\n  tools.read_file: Read a file."
    assert run_code(rt, "return repr(tools)").value["result"] == listing
    shown = run_code(rt, "help(tools)").value["output"]
    assert shown.splitlines()[:4] == [
        "Help on module tools:",
        "",
        "NAME",
        "    tools - The tools this program can call.",
    ], shown
    lines = [line.strip() for line in shown.splitlines()]
    for header, summary in (
        ("echo(message: str | None = None) -> Any", "test tool echo"),
        ("read_file(**arguments: Any) -> Any", "Read a file."),
    ):
        assert header in lines, shown
        assert lines[lines.index(header) + 1] == summary, shown
    assert "await tools.NAME(...)" in shown
    assert "__getattr__" not in shown and "Tools" not in shown and "__main__" not in shown, shown


def test_help_of_tools_shows_every_tool_whole_however_many_and_long(rt: Any) -> None:
    # pydoc cuts an object's repr to 100 characters ("..." in the middle):
    # help(tools) documents the tools as a module's functions instead.
    install(rt, timeout_ms=2000)
    parameters = {
        "type": "object",
        "properties": {"pattern": {"type": "string"}, "limit": {"type": "integer"}},
        "required": ["pattern"],
    }
    summaries = [f"Search the files of repository number {n} for the lines that match a pattern." for n in range(6)]
    for n, summary in enumerate(summaries):
        output = {"type": "array", "items": {"type": "string"}}
        rt.tools.register(raw(f"search-{n}", parameters, output=output, description=f"{summary}\n\nMore details."))
    shown = run_code(rt, "help(tools)").value["output"]
    lines = [line.strip() for line in shown.splitlines()]
    for n, summary in enumerate(summaries):
        header = f"search_{n}(pattern: str, limit: int | None = None) -> list[str]"
        assert header in lines, shown
        assert lines[lines.index(header) + 1] == summary, shown
        assert f"await tools.search_{n}(...)" in shown
    assert "..." not in shown.replace("(...)", ""), shown
    assert run_code(rt, "return repr(tools)").value["result"] == "\n".join(
        ["tools:", *(f"  tools.search_{n}: {summary}" for n, summary in enumerate(summaries))]
    )


def test_repr_and_help_of_one_tool_show_its_signature_and_description(rt: Any) -> None:
    # The signature the prompt lists (hints and defaults as text) and the
    # description's first line, not the worker's Tool class.
    install(rt, timeout_ms=2000)
    rt.tools.register(
        raw(
            "read-file",
            {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "mode": {"type": "string", "enum": ["text", "bytes"], "default": "text"},
                },
                "required": ["path"],
            },
            output={"type": "string"},
            description="Read a file.\n\nMore details.",
        )
    )
    rt.tools.register(raw("ping", {"type": "object"}, description=""))
    code = (
        "import inspect\n"
        "help(tools.read_file)\n"
        "return [repr(tools.read_file), repr(tools.ping), str(inspect.signature(tools.read_file))]"
    )
    value = run_code(rt, code).value
    signature = "(path: str, mode: Literal['text', 'bytes'] = 'text') -> str"
    assert value["result"] == (
        f"tools.read_file{signature}: Read a file.",
        "tools.ping(**arguments: Any) -> Any",
        signature,
    )
    shown = value["output"]
    assert shown.splitlines()[2:4] == [f"read_file{signature}", "    Read a file."], shown
    assert "await tools.read_file(...)" in shown
    assert "class Tool" not in shown and "__init__" not in shown and "__main__" not in shown, shown


def test_the_prompt_sections_hold_the_guide_and_the_signatures() -> None:
    executor = PtcExecutor(timeout_ms=1500, max_parallel_sub_calls=4)
    (guide,) = executor.sections
    assert "at most 4 at once" in guide.content and "1.5 s" in guide.content
    sections = executor.prompt_sections([raw("a", {"type": "object"})])
    assert sections[0] is guide
    assert sections[1].content == '```python\nasync def a(**arguments: Any) -> Any:\n    """A tool."""\n```'


@pytest.mark.parametrize(
    "options",
    [
        {"timeout_ms": 0},
        {"timeout_ms": float("inf")},
        {"max_parallel_sub_calls": 0},
        {"memory_limit_mb": True},
        {"max_output_bytes": -1},
        {"spare_workers": 0},
        {"worker_command": []},
        {"timeout_ms": 1e13},
    ],
)
def test_invalid_options_are_rejected(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        PtcExecutor(**options)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"worker_command": "python3"}, r"worker_command is the worker's argv, a sequence of str .*, not one str"),
        ({"worker_env": "x"}, r"worker_env must be a mapping of str to str, not str"),
    ],
)
def test_options_of_the_wrong_kind_are_refused_naming_the_option(options: dict[str, Any], match: str) -> None:
    with pytest.raises(TypeError, match=match):
        PtcExecutor(**options)


def test_policies_see_run_code_itself_as_a_normal_call(rt: Any) -> None:
    install(rt, timeout_ms=2000)
    seen: list[tuple[str, Any]] = []

    def record(execution: Any, next: Any) -> Any:
        seen.append((execution.name, execution.parent))
        return Allow()

    rt.events.on("tools/pre-execute", record)
    assert run_code(rt, "return 5").value["result"] == 5
    assert seen == [("run_code", None)]


def test_describe_also_returns_the_signature_sections_for_the_described_tools() -> None:
    from dsh_actors import ToolOutput, define_tool, text
    from executors.ptc import PtcExecutor

    tool = define_tool(
        name="lookup",
        description="Look a word up.",
        parameters={"word": {"type": "string", "required": True}},
        output=ToolOutput(schema={"type": "string"}, render=lambda a, v: [text(v)]),
        execute=lambda args, ctx: args["word"],
    )
    executor = PtcExecutor()
    try:
        model_input = executor.describe([tool])
        listing = model_input.sections[-1].content
        assert "lookup" in listing and "word: str" in listing
        assert model_input.known_names == ("run_code",)
    finally:
        executor.close()


def test_tools_is_read_only_in_a_program(rt: Any) -> None:
    # (Before, an attribute a program set was listed as a tool, and
    # repr(tools) then failed on it.)
    install(rt, timeout_ms=2000)
    rt.tools.register(raw("ping", {"type": "object"}))
    code = (
        "out = []\n"
        "try:\n"
        "    tools.x = 1\n"
        "except AttributeError as e:\n"
        "    out.append(str(e))\n"
        "try:\n"
        "    del tools.ping\n"
        "except AttributeError as e:\n"
        "    out.append(str(e))\n"
        "return [*out, repr(tools)]"
    )
    assert run_code(rt, code).value["result"] == (
        "tools is read-only: it holds the tools bound to this program (cannot set 'x')",
        "tools is read-only: it holds the tools bound to this program (cannot delete 'ping')",
        "tools:\n  tools.ping: A tool.",
    )
