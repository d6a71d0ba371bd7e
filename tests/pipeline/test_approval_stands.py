"""``ToolExecution.approval_stands``: the pipeline's one rule for an approval
that stands when a call is prepared again (the pipeline asks it before it
routes an ``Ask``, and publishes ``tools/approval-request`` only for an
``Ask`` it does not stand for: tests/scheduling/test_executor_pool.py,
tests/policies/test_policy_otel.py)."""

from __future__ import annotations

from dsh_actors import AbortController, Ask, ToolExecution
from dsh_actors.execution import approve, freeze, recheck_approval


def test_an_approval_stands_only_for_an_equal_ask_about_the_very_same_definition() -> None:
    execution = ToolExecution(call_id="c0", name="t", arguments={}, signal=AbortController().signal)
    definition, replacement = object(), object()
    assert not execution.approval_stands(Ask(reason="careful"))  # never approved
    approve(execution, Ask(reason="careful"), definition)  # (the pipeline, once the service allowed it)
    recheck_approval(execution, definition)  # prepared again, to run the same definition
    assert execution.approval_stands(Ask(reason="careful"))  # an equal question: not asked twice
    assert not execution.approval_stands(Ask(reason="something else"))
    recheck_approval(execution, replacement)  # prepared again after the tool was replaced
    assert not execution.approval_stands(Ask(reason="careful"))
    approve(execution, Ask(reason="careful"), replacement)  # asked again, and allowed
    freeze(execution)
    assert execution.approval_stands(Ask(reason="careful"))  # (a read: frozen or not)
