"""``ToolExecution.approval_stands``: the pipeline's one rule for an approval
that stands when a call is prepared again (the pipeline asks it before it
routes an ``Ask``; ``policies.otel`` asks it to tell a request from an
approval that stands: tests/policies/test_policy_otel.py)."""

from __future__ import annotations

from dsh_actors import AbortController, Ask, ToolExecution
from dsh_actors.execution import approve, freeze


def test_an_approval_stands_only_for_an_equal_ask_about_the_very_same_definition() -> None:
    execution = ToolExecution(call_id="c0", name="t", arguments={}, signal=AbortController().signal)
    definition, replacement = object(), object()
    assert not execution.approval_stands(Ask(reason="careful"), definition)  # never approved
    approve(execution, Ask(reason="careful"), definition)  # (the pipeline, once the service allowed it)
    assert execution.approval_stands(Ask(reason="careful"), definition)  # an equal question: not asked twice
    assert not execution.approval_stands(Ask(reason="something else"), definition)
    assert not execution.approval_stands(Ask(reason="careful"), replacement)  # the tool was replaced
    freeze(execution)
    assert execution.approval_stands(Ask(reason="careful"), definition)  # (a read: frozen or not)
