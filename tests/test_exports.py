"""The public surface: every name SPEC.md section 1 pins is exported from
``dsh_actors``, and ``__all__`` is exactly that list, plus the card
classes (SPEC names them as "each card class") and the extras results
carry (every error class, the records inside search and web cards)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import dsh_actors
from dsh_actors import presentation

SPEC_NAMES = {
    # runtime and scopes
    "ToolRuntime", "Agent", "Session", "ModelSelection", "ToolActivationContext",
    "ToolRestriction", "ToolsService", "ResolvedToolSet", "ApprovalRequest",
    "ToolExecutor", "ToolModelInput", "ToolPromptSection", "NativeExecutor",
    # definitions
    "define_tool", "ToolDefinition", "ToolOutput", "ToolSchema",
    # calls and results
    "ToolCall", "ToolBatchInput", "LogStep", "ToolBatchResult", "ToolCallResult",
    "ToolExecution", "ToolRunContext", "ToolExecutionInput",
    "ToolExecutionSuccess", "ToolExecutionFailure", "ToolFailure", "ToolErrorInfo",
    "TextBlock", "ImageBlock", "ReasoningBlock", "UserMessage", "text",
    # decisions
    "Allow", "Deny", "Cancel", "Ask", "Accept", "Block",
    # cancellation
    "AbortController", "AbortSignal",
    # errors
    "DshError", "ToolArgsError", "ToolOutputError", "ToolNotFoundError",
    "JsonSchemaError", "ToolBatchExecutionError", "AbortError", "ToolTimeoutError",
    "RegistrationError", "CodeRunFailedError", "ErrorCode",
    # lossless JSON
    "materialize", "thaw", "dumps", "loads", "MAX_JSON_DEPTH",
    # schema
    "assert_supported_json_schema", "validate_json_schema_value",
    "assert_object_json_schema", "value_schema_spec_to_json_schema",
    "parameter_schema_spec_to_json_schema", "validate_args",
    # presentation
    "ToolCallView", "ToolResultView", "ToolCallKind", "FileLocation", "FileDiff",
    "ReadFileLine",
}  # fmt: skip

CARD_NAMES = {cls.__name__ for cls in presentation.CARD_CLASSES}

# Exported beyond SPEC section 1: names results carry (error classes whose
# code or name a failure records, the records inside search and web cards)
# and the record a ``tools/progress`` event carries.
EXTRA_NAMES = {
    "ToolPolicyError", "ToolFailedError", "ExecutorUnavailableError", "LosslessJsonError",
    "UsageError", "InvalidValueError", "InvalidTypeError", "InvalidStateError", "RuntimeStoppedError",
    "SearchFileMatches", "SearchMatchLine", "WebSource", "ToolProgress",
    "printable",  # (what the CLI and the approval prompt show a model's or a tool's text through)
}  # fmt: skip


# Pinned by later issues (the contract's "Extensions" section): names added
# to the surface, each from the issue that pins it.
LATER_NAMES = {
    "tool",  # issue 21: tools from typed functions
    "LONGEST_WAIT_MS",  # the one bound on a wait an option asks for (policies, executors, stop)
}


def test_every_name_spec_section_1_pins_is_importable_from_dsh_actors() -> None:
    missing = sorted(name for name in SPEC_NAMES if not hasattr(dsh_actors, name))
    assert missing == []


def test_every_card_class_is_exported() -> None:
    for name in CARD_NAMES:
        assert getattr(dsh_actors, name) is getattr(presentation, name)


def test_dunder_all_is_exactly_the_spec_names_the_card_classes_and_the_extras() -> None:
    assert set(dsh_actors.__all__) == SPEC_NAMES | CARD_NAMES | EXTRA_NAMES | LATER_NAMES
    assert len(dsh_actors.__all__) == len(set(dsh_actors.__all__)), "a name is listed twice"


def test_the_list_here_matches_spec_md_when_the_shared_folder_is_present() -> None:
    spec = Path(__file__).resolve().parents[2] / "shared" / "SPEC.md"
    if not spec.exists():  # a checkout without ../shared: the list above is the contract
        return
    block = spec.read_text().split("## 1. Public surface", 1)[1].split("```python", 1)[1]
    block = block.split("```", 1)[0]
    names: set[str] = set()
    for line in block.splitlines():
        code = line.split("#", 1)[0]
        names.update(re.findall(r"\b[A-Za-z_][A-Za-z0-9_]*\b", code))
    names -= {"and", "each", "card", "class"}
    assert names == SPEC_NAMES


def test_star_import_gives_exactly_dunder_all() -> None:
    namespace: dict[str, object] = {}
    exec("from dsh_actors import *", namespace)  # noqa: S102
    namespace.pop("__builtins__")
    assert set(namespace) == set(dsh_actors.__all__)


def test_the_extras_are_the_objects_results_carry() -> None:
    from dsh_actors import errors, model

    for name in EXTRA_NAMES:
        source = errors if hasattr(errors, name) else model if hasattr(model, name) else presentation
        assert getattr(dsh_actors, name) is getattr(source, name)
    assert issubclass(dsh_actors.ToolPolicyError, dsh_actors.DshError)
    assert dsh_actors.SearchFileMatches("a.py", (dsh_actors.SearchMatchLine(1, "x"),)).lines[0].line == 1


def test_the_later_names_are_the_typed_tool_decorator() -> None:
    from dsh_actors.typed import tool

    assert dsh_actors.tool is tool


def test_every_dsh_error_class_is_exported() -> None:
    from dsh_actors import errors

    classes = {
        name
        for name in errors.__all__
        if isinstance(getattr(errors, name), type) and issubclass(getattr(errors, name), errors.DshError)
    }
    assert classes <= set(dsh_actors.__all__)


def test_the_messages_module_is_public() -> None:
    messages = importlib.import_module("dsh_actors.messages")
    assert hasattr(messages, "ExecuteBatch")


def test_the_one_wait_bound_is_what_the_options_refuse_past() -> None:
    import pytest

    from executors.ptc import PtcExecutor

    assert dsh_actors.LONGEST_WAIT_MS == 1e9  # (policies.retry: tests/policies/test_policy_retry.py)
    PtcExecutor(timeout_ms=dsh_actors.LONGEST_WAIT_MS)
    with pytest.raises(ValueError, match=r"timeout_ms must be at most 1e\+09 \(about 11.6 days\), got 2e\+09"):
        PtcExecutor(timeout_ms=dsh_actors.LONGEST_WAIT_MS * 2)
