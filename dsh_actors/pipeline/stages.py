"""One call's trip through the pipeline (docs/reference.md, section 5), as three stages.

* :func:`prepare` (the batch's executor actor, in model order): the
  pre-aborted check, the ``tools/pre-execute`` waterfall, approval routing
  for ``Ask``, guards, and the recheck of cancellation.
* :func:`dispatch` (a call actor, or the executor itself for a call it runs
  inline; the only stage that overlaps): the ``tools/execute`` waterfall
  around the body, output validation, ``render`` and
  ``presentation_meta``.
* :func:`finalize` (the executor actor, in model order):
  ``project_content``, the ``tools/post-execute`` waterfall, the
  cancellation replacement, ``finalize_content`` (exactly once), the final
  freeze and ``tools/result``.

A :class:`Call` carries one call between the stages. It is owned by exactly
one thread at a time: the executor puts it in the batch's work mailbox, a
call actor takes it from there, dispatches it and hands it back in a
``Settled`` message. ``rt.tools.dispatch`` runs all three stages inline on
the caller's thread (:func:`run_inline`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..execution import ToolExecutionInput
from ..model import ToolExecutionResult
from .body import (
    await_on_loop,
    body_of,
    finish_on_loop,
    start_on_loop,
    target_loop,
    waits_on_loop,
    wants_loop,
)
from .call import LOOK_UP, MAX_UNPREPARED, BadArguments, Call, begin, begin_call, lookup, stale, stamp
from .dispatch import dispatch
from .finalize import BLOCKED_DEFAULT, finalize
from .prepare import DECISIONS, prepare
from .results import failure

if TYPE_CHECKING:  # pragma: no cover
    from ..kernel import Kernel

__all__ = [
    "BLOCKED_DEFAULT",
    "BadArguments",
    "Call",
    "DECISIONS",
    "LOOK_UP",
    "MAX_UNPREPARED",
    "await_on_loop",
    "begin",
    "begin_call",
    "body_of",
    "dispatch",
    "finalize",
    "finish_on_loop",
    "lookup",
    "prepare",
    "refuse_deferral",
    "run_inline",
    "stale",
    "stamp",
    "start_on_loop",
    "target_loop",
    "waits_on_loop",
    "wants_loop",
]


def refuse_deferral(call: Call) -> None:
    """A deferred call that cannot wait for a decision (a nested call, a
    PTC program's sub-call): only a model's batch suspends, so the call
    fails, and post-execute sees it."""
    call.settle(
        failure(
            f'tool "{call.execution.name}" requires approval, but the approval service deferred it and a '
            "nested call cannot wait for a decision (only a batch suspends): call the tool as a tool call of "
            "its own, not from code or another tool, for a person to decide"
        ),
        run_post=True,
        dispatched=False,
    )


def run_inline(rt: Kernel, inp: ToolExecutionInput) -> ToolExecutionResult:
    """One call's whole trip (prepare, dispatch, finalize) on the calling
    thread: nested dispatch (PTC sub-calls, composite tools). The caller
    does the scheduling. A deferred approval fails the call: only a batch
    can suspend."""
    call = begin(0, inp)
    stamp(rt, call)
    prepare(rt, call)
    while call.outcome is None and call.ask is None and stale(rt, call):
        # What it was prepared under changed before its body could start
        # (the approval service took a while, say): prepared once more,
        # under what holds now, as a batch's call is.
        call.unprepare()
        if call.unprepared >= MAX_UNPREPARED:
            call.give_up_preparing()
            break
        stamp(rt, call)
        prepare(rt, call)
    if call.outcome is None:
        if call.ask is not None:
            refuse_deferral(call)
        else:
            dispatch(rt, call)
    return finalize(rt, call)
