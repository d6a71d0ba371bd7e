"""The hot path builds a body's success and its execution through slot
descriptors instead of ``__init__`` (``results._success``,
``execution._set_*``): the objects must be exactly what the constructors
build."""

from __future__ import annotations

from dataclasses import fields

import pytest

from dsh_actors import AbortController, TextBlock, ToolExecution, UserMessage
from dsh_actors.model import ToolExecutionSuccess
from dsh_actors.pipeline.results import _success, freeze_result


@pytest.mark.parametrize("concludes", [False, True])
def test_a_fast_success_equals_the_constructed_one(concludes: bool) -> None:
    content = (TextBlock("ok"),)
    contexts = (UserMessage((TextBlock("later"),)),)
    fast = _success({"k": 1}, content, {"m": 2}, contexts, concludes)
    built = ToolExecutionSuccess(
        value={"k": 1}, content=content, meta={"m": 2}, additional_contexts=contexts, concludes_turn=concludes
    )
    assert type(fast) is ToolExecutionSuccess
    assert fast == built
    assert repr(fast) == repr(built)
    for field in fields(ToolExecutionSuccess):
        assert getattr(fast, field.name) == getattr(built, field.name)
    with pytest.raises(AttributeError):
        fast.value = 3  # type: ignore[misc]


def test_a_fast_success_of_frozen_parts_needs_no_refreeze() -> None:
    fast = _success("ok", (TextBlock("ok"),), None, (), False)
    assert freeze_result(fast) is fast


def test_an_execution_sets_every_slot_and_stays_read_only() -> None:
    signal = AbortController().signal
    execution = ToolExecution(call_id="c1", name="echo", arguments={"a": 1}, signal=signal)
    assert (execution.call_id, execution.root_call_id, execution.name) == ("c1", "c1", "echo")
    assert execution.arguments == {"a": 1}
    assert execution.agent is execution.tool_set is execution.parent is execution.schema is None
    assert execution.signal is signal
    assert not execution.frozen
    with pytest.raises(AttributeError, match="read-only"):
        execution.name = "other"  # type: ignore[misc]
    with pytest.raises(AttributeError, match="only by a tools/execute wrapper"):
        execution.signal = AbortController().signal
    execution._open_signal()
    replacement = AbortController().signal
    execution.signal = replacement
    assert execution.signal is replacement
    execution._restore_signal(signal)
    assert execution.signal is signal
    execution._freeze()
    assert execution.frozen
    with pytest.raises(AttributeError, match="frozen"):
        execution.signal = replacement
