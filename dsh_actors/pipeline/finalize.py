"""The third stage, :func:`finalize` (the executor actor, in model order):
``project_content``, the ``tools/post-execute`` waterfall, the
cancellation replacement, ``finalize_content`` (exactly once), the final
freeze and ``tools/result``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..errors import (
    LosslessJsonError,
    ToolPolicyError,
    is_fault,
    log_exception,
    safe_str,
)
from ..execution import freeze
from ..model import (
    UNSET,
    Accept,
    Block,
    TextBlock,
    ToolExecutionFailure,
    ToolExecutionResult,
    ToolExecutionSuccess,
    check_content,
)
from .call import Call, abort_seen, in_context, lookup
from .dispatch import render_value
from .results import (
    FORGOT_NEXT,
    aborted,
    content_from_hook,
    failure,
    failure_from_exception,
    freeze_result,
    policy_failure,
)

if TYPE_CHECKING:  # pragma: no cover
    from ..kernel import Kernel

BLOCKED_DEFAULT = "tool result blocked by post-execute policy"


@in_context
def finalize(rt: Kernel, call: Call) -> ToolExecutionResult:
    """Post-execute, cancellation, ``finalize_content``, freeze and
    ``tools/result`` (the executor's thread). Never raises."""
    execution = call.execution
    result = call.outcome
    assert result is not None, "finalize() before the call was settled"
    assert call.final is None, "finalize() twice"
    if call.registration is None:
        # Settled without any phase (pre-aborted, non-JSON, skipped): its
        # finalize_content still runs exactly once.
        call.registration = lookup(rt, call)
    definition = None if call.registration is None else call.registration.definition
    if call.run_post and (
        (definition is not None and definition.project_content is not None)
        or rt.events.listeners("tools/post-execute", execution.agent)
    ):
        # (Without either, post-execute is Accept() with nothing to apply.)
        result = _post_execute(rt, call, result, definition)
    # Caller cancellation (or the runtime stopping under the call) replaces
    # only a successful outcome that settled after the abort.
    settled_aborted = call.settled_aborted
    if settled_aborted is None:  # settled without dispatch: as it stands now
        settled_aborted = abort_seen(call, rt.stop_signal)
    if type(result) is ToolExecutionSuccess and settled_aborted:
        result = aborted(before_dispatch=not call.body_invoked, additional_contexts=result.additional_contexts)
    if result is not call.sealed:
        result = _freeze_or_fail(result)
    finalize_content = None if definition is None else definition.finalize_content
    if finalize_content is not None:
        result, _ = content_from_hook("finalize_content", finalize_content, execution, result)
        result = _freeze_or_fail(result)
    if type(result) is ToolExecutionFailure or type(call.outcome) is ToolExecutionFailure:
        log_exceptions(execution, call.outcome, result)
    freeze(execution)
    call.final = result
    rt.events.emit("tools/result", execution, result, agent=execution.agent)
    return result


def log_exceptions(execution: Any, *results: Any) -> None:
    """Log, once each, at ERROR with its traceback, the exception a hook
    raised for this call (``error.exception`` of ``results``), naming the
    tool and the call. Only a fault (``errors.is_fault``): a cancellation
    and the model's bad arguments are outcomes, not logged."""
    seen: BaseException | None = None
    for result in results:
        error = result.error if type(result) is ToolExecutionFailure else None
        if error is None:
            continue
        exc = error.exception
        if exc is None or exc is seen or not is_fault(exc):
            continue
        seen = exc
        log_exception(exc, 'tool "{}" (call {}) failed: {}', execution.name, execution.call_id, error.message)


def _freeze_or_fail(result: ToolExecutionResult) -> ToolExecutionResult:
    try:
        return freeze_result(result)
    except LosslessJsonError as exc:
        fallback = failure_from_exception(ToolPolicyError("result", f"not lossless JSON: {exc.message}"))
        return freeze_result(fallback)
    except BaseException as exc:  # noqa: BLE001 - hostile objects in a result
        fallback = failure_from_exception(ToolPolicyError("result", safe_str(exc)))
        return freeze_result(fallback)


def _post_execute(rt: Kernel, call: Call, result: ToolExecutionResult, definition: Any) -> ToolExecutionResult:
    execution = call.execution
    project = None if definition is None else definition.project_content
    if project is not None:
        result, broke = content_from_hook("project_content", project, execution, result)
        if broke:
            return result
    entering = result
    try:
        decision = rt.events.waterfall("tools/post-execute", _accept, execution, entering, agent=execution.agent)
    except BaseException as exc:  # noqa: BLE001
        return policy_failure("tools/post-execute", exc, entering.additional_contexts)
    return _apply_post_decision(rt, call, entering, decision)


def _accept() -> Accept:
    return Accept()


def _apply_post_decision(rt: Kernel, call: Call, result: ToolExecutionResult, decision: Any) -> ToolExecutionResult:
    kind = type(decision)
    if kind is Block:
        try:
            feedback = check_content(decision.feedback, "feedback")
        except LosslessJsonError as exc:
            return failure_from_exception(ToolPolicyError("tools/post-execute", exc.message))
        message = "".join(b.text for b in feedback if type(b) is TextBlock) or BLOCKED_DEFAULT
        body = call.body_contexts
        kept = tuple(c for c in result.additional_contexts if not any(c is b for b in body))
        return ToolExecutionFailure(
            error=failure(message).error,
            content=feedback,
            meta=result.meta,
            additional_contexts=kept + tuple(decision.additional_contexts),
        )
    if kind is not Accept:
        return failure_from_exception(
            ToolPolicyError(
                "tools/post-execute",
                f"a listener returned {kind.__qualname__}; expected Accept or Block{FORGOT_NEXT if decision is None else ''}",
            ),
            result.additional_contexts,
        )
    contexts = result.additional_contexts + tuple(decision.additional_contexts)
    has_value = decision.value is not UNSET
    if decision.content is not None and has_value:
        return failure_from_exception(
            ToolPolicyError("tools/post-execute", "Accept cannot replace both content and value"),
            result.additional_contexts,
        )
    if has_value:
        if type(result) is not ToolExecutionSuccess:
            return failure_from_exception(
                ToolPolicyError("tools/post-execute", "Accept(value=...) is not allowed on a failure"),
                result.additional_contexts,
            )
        return render_value(rt, call, decision.value, contexts, result.concludes_turn)
    if decision.content is not None:
        try:
            content = check_content(decision.content)
        except LosslessJsonError as exc:
            return failure_from_exception(ToolPolicyError("tools/post-execute", exc.message), contexts)
        return replace(result, content=content, additional_contexts=contexts)
    if decision.additional_contexts:
        return replace(result, additional_contexts=contexts)
    return result
