"""The durable log of sub-calls: the waterfall record and the two events.

The event dicts are built by the core's session builders
(``dsh_actors.ptc_dispatch_event`` and ``ptc_dispatch_start_event``,
importable, not in ``__all__``; ``docs/reference.md``, section 10):

``tool/ptc-dispatch-start``
    ``{"type", "root_call_id", "parent_call_id", "sub_call_id", "name",
    "arguments"}``: pairing ids, name and arguments, when a sub-call
    actually starts (after the run's scheduler let it, before any policy).
    Never the schema or the description.
``tool/ptc-dispatch``
    ``{"type", "root_call_id", "parent_call_id", "sub_call_id", "name",
    "is_error", "content", "error", "meta"}``: the settled sub-call's
    durable copy; ``content`` is what the ``tools/ptc-dispatch-log``
    waterfall returned, ``meta`` the presentation meta the same call made
    by the model would carry (``dsh_actors.logged_meta``: the pipeline
    computes it for root calls only), so a replay draws the tool's cards.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from dsh_actors import (
    Agent,
    ImageBlock,
    ReasoningBlock,
    TextBlock,
    ToolExecution,
    ToolExecutionFailure,
    ToolExecutionSuccess,
    ptc_dispatch_event,
    ptc_dispatch_start_event,
)

__all__ = ["PTC_DISPATCH", "PTC_DISPATCH_START", "PtcDispatchLog", "dispatch_event", "dispatch_start_event"]

PTC_DISPATCH_START: Final = "tool/ptc-dispatch-start"
PTC_DISPATCH: Final = "tool/ptc-dispatch"


@dataclass(frozen=True, slots=True)
class PtcDispatchLog:
    """One settled ``run_code`` sub-call about to be logged, as the
    ``tools/ptc-dispatch-log`` waterfall sees it: ``fn(dispatch, next) ->
    content``. Listeners run on the executor actor that commits the
    sub-call (the run's sub-batch's), after its ``tools/result`` and before
    the program gets its value; they may block only briefly (the program
    waits, and so do the sub-batch's other commits).

    Only the ``tool/ptc-dispatch`` event's copy of the content changes: the
    program gets the complete value, and the model sees neither.
    """

    exec: ToolExecution
    """The outer ``run_code`` execution (session owner, outer call id)."""

    agent: Agent | None
    """The calling agent (the scope routing key), when the outer call has one."""

    sub_call_id: str
    """``<outer call id>:ptc:<n>``."""

    name: str
    """The dispatched tool's name."""

    is_error: bool
    """Whether the sub-call settled as a failure."""

    content: tuple[TextBlock | ImageBlock | ReasoningBlock, ...]
    """The sub-call's complete model-facing content (the default payload)."""


def dispatch_start_event(
    root_call_id: str, parent_call_id: str, sub_call_id: str, name: str, arguments: Any
) -> dict[str, Any]:
    """A ``tool/ptc-dispatch-start`` event (the core's builder)."""
    return ptc_dispatch_start_event(root_call_id, parent_call_id, sub_call_id, name, arguments)


def dispatch_event(
    root_call_id: str,
    parent_call_id: str,
    sub_call_id: str,
    name: str,
    result: ToolExecutionSuccess | ToolExecutionFailure,
    content: Iterable[Any],
    meta: Any,
) -> dict[str, Any]:
    """A ``tool/ptc-dispatch`` event (the core's builder: with the
    ``traceback`` of a failure that kept a fault); ``meta``: the
    presentation meta to log (``dsh_actors.logged_meta``'s, as
    :func:`~.subcalls.log_settle` computes it)."""
    return ptc_dispatch_event(
        root_call_id, parent_call_id, sub_call_id, name, result.is_error, content, result.error, meta
    )
