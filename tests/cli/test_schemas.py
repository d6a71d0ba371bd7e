"""``dsh-actors schemas``: the model-facing schemas in a provider's format."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from dsh_actors import ToolRuntime

from .conftest import Cli, assert_one_line_error
from .test_run import _fake_ptc_module

NAMES = ["read_file", "search_text", "write_file", "run_shell"]


@pytest.fixture
def ours(root: Path) -> list[dict[str, Any]]:
    """The schemas the registry itself gives for the example tools."""
    import examples.tools

    with ToolRuntime() as rt:
        examples.tools.register(rt)
        return [dict(schema) for schema in rt.tools.schemas()]


def test_openai_format_wraps_each_schema_as_a_function_tool(cli: Cli, ours: list[dict[str, Any]]) -> None:
    outcome = cli("schemas", "--tools", "examples.tools", "--format", "openai")
    assert outcome.code == 0 and outcome.err == ""
    tools = json.loads(outcome.out)
    assert [t["type"] for t in tools] == ["function"] * 4
    assert [t["function"] for t in tools] == ours
    assert [t["function"]["name"] for t in tools] == NAMES


def test_anthropic_format_names_the_parameters_input_schema(cli: Cli, ours: list[dict[str, Any]]) -> None:
    tools = json.loads(cli("schemas", "--tools", "examples.tools", "--format", "anthropic").out)
    assert tools == [
        {"name": s["name"], "description": s["description"], "input_schema": s["parameters"]} for s in ours
    ]


def test_openai_responses_format_is_flat_function_tools_without_strict_mode(
    cli: Cli, ours: list[dict[str, Any]]
) -> None:
    tools = json.loads(cli("schemas", "--tools", "examples.tools", "--format", "openai-responses").out)
    assert tools == [{"type": "function", **s, "strict": False} for s in ours]


def test_raw_format_is_ours_and_openai_is_the_default(cli: Cli, ours: list[dict[str, Any]]) -> None:
    assert json.loads(cli("schemas", "--tools", "examples.tools", "--format", "raw").out) == ours
    default = json.loads(cli("schemas", "--tools", "examples.tools").out)
    assert default == json.loads(cli("schemas", "--tools", "examples.tools", "--format", "openai").out)


def test_the_schemas_never_carry_host_only_fields(cli: Cli, root: Path) -> None:
    read_file = json.loads(cli("schemas", "--tools", "examples.tools", "--format", "raw").out)[0]
    assert set(read_file) == {"name", "description", "parameters"}
    assert read_file["parameters"]["required"] == ["path"]
    assert set(read_file["parameters"]["properties"]) == {"path", "offset", "limit"}


def test_under_the_ptc_executor_the_model_sees_only_run_code(
    cli: Cli, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "executors.ptc", _fake_ptc_module())
    tools = json.loads(cli("schemas", "--tools", "examples.tools", "--executor", "ptc").out)
    assert [t["function"]["name"] for t in tools] == ["run_code"]


def test_schemas_of_a_module_that_cannot_load_exit_1_with_one_line(cli: Cli, root: Path) -> None:
    assert_one_line_error(cli("schemas", "--tools", "no_module_like_this"), "schemas", "no module named")
    assert cli("schemas", "--tools", "examples.tools", "--format", "yaml").code == 2
