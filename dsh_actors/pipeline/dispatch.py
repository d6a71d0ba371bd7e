"""The second stage, :func:`dispatch` (a call actor, or the executor for a
call it runs inline; the only stage that overlaps): the ``tools/execute``
waterfall around the body (``pipeline/body.py``), and the revalidation of
a success a wrapper supplied.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import (
    InvalidStateError,
    ToolPolicyError,
)
from ..execution import open_signal, restore_signal
from ..model import (
    UNSET,
    ToolExecutionResult,
    ToolExecutionSuccess,
    UserMessage,
)
from .body import EXECUTE_EVENTS, run_body
from .call import Call, abort_seen, in_context, not_found
from .results import (
    FORGOT_NEXT,
    failure_from_exception,
    is_result,
    render_success,
)

if TYPE_CHECKING:  # pragma: no cover
    from ..kernel import Kernel


@in_context
def dispatch(rt: Kernel, call: Call) -> None:
    """Run the ``tools/execute`` waterfall around the body (on a call actor,
    or on the executor for a call run inline). Leaves the call settled with
    its outcome (``dispatched``); never raises."""
    execution = call.execution
    if not rt.events.observed(EXECUTE_EVENTS, execution.agent):
        # No wrapper: nothing can replace the signal, or hand back a result
        # the body did not produce.
        try:
            result: Any = run_body(rt, call)
            skip_post = False
        except BaseException as exc:  # noqa: BLE001 - run_body contains the body; be sure
            result = failure_from_exception(exc)
            skip_post = True
        call.settle(result, run_post=not skip_post, dispatched=True)
        return
    caller = call.caller
    open_signal(execution)
    ended = False

    def body() -> Any:
        # (Taking no arguments: the last wrapper's next() is this itself.)
        if ended:
            raise InvalidStateError(
                f'a tools/execute wrapper called next() for call {execution.call_id} (tool "{execution.name}") '
                "after the waterfall had returned: the call's result is settled, and its body does not run "
                "again (call next() before returning)"
            )
        return run_body(rt, call)

    try:
        events = rt.events
        result = events.waterfall("tools/execute", body, execution, agent=execution.agent)
        skip_post = False
        broken = _broken_result(result)
        if broken is not None:
            result = failure_from_exception(ToolPolicyError("tools/execute", broken))
            skip_post = True
        elif type(result) is ToolExecutionSuccess:
            # A success the body produced settled when the body did, however
            # long a wrapper held it after that (a retry's first one too). One
            # it did not produce is revalidated and re-rendered, and settles
            # here, as the waterfall ends (an abort before now replaces it).
            produced = _settled_with(result, call.body_successes)
            if produced is None:
                result = _revalidate(rt, call, result)
                call.settled_aborted = abort_seen(call, rt.stop_signal)
            else:
                call.settled_aborted = produced
    except BaseException as exc:  # noqa: BLE001 - a throwing wrapper skips post-execute
        result = failure_from_exception(exc)
        skip_post = True
    finally:
        ended = True
        restore_signal(execution, caller)
    call.settle(result, run_post=not skip_post, dispatched=True)


def _broken_result(result: Any) -> str | None:
    """What is wrong with what the ``tools/execute`` waterfall returned,
    naming the fix; None: it is a result. (A success the body produced
    always has a value: only a wrapper builds one without.)"""
    if not is_result(result):
        return (
            f"a wrapper returned {type(result).__qualname__}; expected a ToolExecutionResult"
            f"{FORGOT_NEXT if result is None else ''}"
        )
    if type(result) is ToolExecutionSuccess and result.value is UNSET:
        return (
            "a wrapper returned a ToolExecutionSuccess without a value (value=UNSET): "
            "give it the tool's value (None is one), or return next()'s result"
        )
    return None


def _settled_with(result: Any, successes: list[tuple[ToolExecutionResult, bool]]) -> bool | None:
    """Whether the abort had fired when the body produced ``result``; None:
    the body did not produce it."""
    for produced, aborted in successes:
        if produced is result:
            return aborted
    return None


def _revalidate(rt: Kernel, call: Call, result: ToolExecutionSuccess) -> ToolExecutionResult:
    return render_value(rt, call, result.value, result.additional_contexts, result.concludes_turn)


def render_value(
    rt: Kernel, call: Call, value: Any, contexts: tuple[UserMessage, ...], concludes_turn: bool
) -> ToolExecutionResult:
    """``value`` validated and rendered by the tool the call runs (the
    registration it was prepared with, as its body: a success a wrapper or
    a post-execute policy supplied), or UNKNOWN_TOOL when it found none."""
    registration = call.registration
    if registration is None:
        return failure_from_exception(not_found(rt, call), contexts)
    return render_success(
        call.execution,
        registration.definition,
        registration.output_validator,
        value,
        additional_contexts=contexts,
        concludes_turn=concludes_turn,
    )
