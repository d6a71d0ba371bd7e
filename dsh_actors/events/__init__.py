"""Events and decisions: the ``tools/*`` events, the bus that dispatches
them, and the decisions their listeners return.

``from dsh_actors.events import Allow, Deny, EventBus`` is the family's home;
the decisions are also importable from ``dsh_actors`` itself (and from
``dsh_actors.model``, where they are defined: each name is one object,
whichever path imports it).

Event names and listener signatures (``docs/reference.md``, section 8):

==========================  ========  ==========================================
``tools/pre-execute``       waterfall ``fn(execution, next) -> PreToolDecision``
``tools/execute``           waterfall ``fn(execution, next) -> ToolExecutionResult``
``tools/post-execute``      waterfall ``fn(execution, result, next) -> PostToolDecision``
``tools/result``            emit      ``fn(execution, result) -> None``
``tools/change``            emit      ``fn() -> None``
``tools/ptc-dispatch-log``  waterfall ``fn(dispatch, next) -> content``
``tools/progress``          emit      ``fn(execution, progress) -> None``
``tools/deferred``          emit      ``fn(execution, ask) -> None``
``tools/approval``          emit      ``fn(execution, ask, answer) -> None``
``tools/approval-request``  emit      ``fn(execution, ask) -> None``
==========================  ========  ==========================================

Decisions: a ``tools/pre-execute`` listener returns :class:`Allow`,
:class:`Deny`, :class:`Cancel` or :class:`Ask` (a :data:`PreToolDecision`);
a ``tools/post-execute`` listener returns :class:`Accept` or :class:`Block`
(a :data:`PostToolDecision`). :data:`UNSET` is ``Accept(value=...)``'s
default, "no replacement value".

Which thread runs a listener (none of them may assume another):

* ``tools/pre-execute`` and ``tools/post-execute`` listeners, guards, the
  approval service, ``project_content``/``finalize_content`` and
  ``tools/result`` observers run on the thread that prepares and finalizes
  the call (an ``async def`` pre-execute listener or approval service runs
  on the batch's event loop, that thread waiting for it): the batch's
  executor actor thread for batch calls (so a listener that blocks holds up
  that batch's model-order progress, and only that batch's), or the
  caller's thread for ``rt.tools.dispatch``. Approval
  services may block (a person answers) but must observe the signal.
* ``tools/execute`` wrappers, ``render`` and ``presentation_meta`` run on
  the thread that dispatches the call (several at once, one per running
  call): a call actor, or the executor actor itself for the one call that
  could start, which it runs inline (see ``scheduling/batch.py``); a sync
  tool body runs there too. An ``async def`` body runs as a task on the
  batch's event loop; no thread waits for it (unless a ``tools/execute``
  wrapper does), and the executor validates and renders its value.
* ``tools/change`` listeners run on the scope actor thread that made the
  change; they may read the registry but not change it.
* ``tools/ptc-dispatch-log`` listeners run on the PTC executor's sub-call
  thread, and so does a PTC sub-call's ``presentation_meta``, for its
  ``tool/ptc-dispatch`` event (the pipeline runs it for root calls only).
* ``tools/progress`` listeners run on the thread that reports the progress
  (``ctx.report_progress`` in a sync body: the body's thread; in an async
  body: its loop's thread, so they must not block), before the report
  returns; ``progress`` is a frozen :class:`~dsh_actors.model.ToolProgress`.
* ``tools/deferred`` observers run on the thread that prepares the call,
  when the approval service has answered ``"deferred"`` for it in a batch
  that has not halted (which then suspends; a halted batch ends the call
  ``ABORTED_BEFORE_DISPATCH`` without announcing it); ``ask`` is the
  ``Ask`` the pre-execute waterfall returned. The call's ``tools/result``
  comes later: when the suspension is resumed (perhaps in another
  process) or an abort ends the call.
* ``tools/approval`` observers run on the thread that prepares the call,
  right after the approval service gave a valid answer for it, or a
  resume gave a decision for it (``rt.tools.resume``: not ``"deferred"``,
  which leaves the call waiting), and before that answer takes effect (an ``async def`` service's once it is
  awaited), for a call of a batch, a nested call (``rt.tools.dispatch``)
  or a PTC sub-call alike: ``ask`` is the ``Ask`` the pre-execute
  waterfall returned, ``answer`` the answer, one of ``"allowed-once"``,
  ``"rejected"``, ``"cancelled"``, ``"unavailable"`` or ``"deferred"``
  (the ``str`` itself). Not published when no one was asked (no service
  is installed, the call has no agent, or an approval given earlier for
  the call stands), for a service that raised or answered anything else
  (the call fails ``POLICY_FAILED``), nor when a recovery applies again a
  decision the log holds (it was published when it was given).
* ``tools/approval-request`` observers run on the thread that prepares the
  call, when the pipeline asks for an approval: the pre-execute
  waterfall's decision is an ``Ask`` (``ask``) that no approval given
  earlier for the call stands for, whichever listener (or the tool's
  ``requires_approval``) made it; published before the approval service
  is asked, for a call of a batch, a nested call or a PTC sub-call alike,
  and also when no one can be asked (no service is installed, or the call
  has no agent: the call is then denied, and ``rt.approvals.service``
  tells the first case). Once per request: its answer, if a valid one
  comes, is the ``tools/approval`` that follows (a service that raised or
  answered anything else gives none; the call's ``tools/result`` ends the
  wait). Not published for a decision given at resume (the request was
  published in the batch that deferred the call), nor when a recovery
  applies again a decision the log holds.

Every listener, guard, approval service, renderer and body of a call runs
in that call's copy of the caller's ``contextvars.Context`` (the one
current when the batch was submitted), whatever thread runs it.
"""

from __future__ import annotations

from ..model import (
    UNSET,
    Accept,
    Allow,
    ApprovalRequest,
    Ask,
    Block,
    Cancel,
    Deny,
    PostToolDecision,
    PreToolDecision,
)
from ._bus import (
    EVENT_NAMES,
    UNFILTERED_EVENTS,
    Disposer,
    EventBus,
    EventName,
    Listener,
    disposer,
    drop_coroutine,
    in_scope,
)

__all__ = [
    # the events and the bus
    "EVENT_NAMES",
    "UNFILTERED_EVENTS",
    "Disposer",
    "EventBus",
    "EventName",
    "Listener",
    "disposer",
    "drop_coroutine",
    "in_scope",
    # the decisions listeners return
    "UNSET",
    "Accept",
    "Allow",
    "ApprovalRequest",
    "Ask",
    "Block",
    "Cancel",
    "Deny",
    "PostToolDecision",
    "PreToolDecision",
]
