"""One tool call of a program: its record, its durable log, and what it
brings back. (Its trip through the pipeline is the sub-batch's: see
:mod:`.run`.)

:func:`log_start` and :func:`log_settle` (and so the
``tools/ptc-dispatch-log`` listeners) run on the sub-batch's executor
actor, as the sub-call starts and commits; :func:`forward` on the run's
thread.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Any, Final

from loguru import logger

from dsh_actors import (
    AbortController,
    ImageBlock,
    ReasoningBlock,
    TextBlock,
    ToolErrorInfo,
    ToolExecution,
    ToolExecutionFailure,
    ToolExecutionSuccess,
    ToolFailure,
    ToolPolicyError,
    ToolRunContext,
    UserMessage,
    logged_meta,
    thaw,
)

from .log import PtcDispatchLog, dispatch_event, dispatch_start_event

if TYPE_CHECKING:  # pragma: no cover
    from dsh_actors import Session, ToolRuntime

__all__ = [
    "Result",
    "SubCall",
    "SubState",
    "failure",
    "forward",
    "log_settle",
    "log_start",
    "logged_content",
    "presentation",
    "safe_str",
]

Result = ToolExecutionSuccess | ToolExecutionFailure


def safe_str(value: object) -> str:
    """``str(value)``, or a placeholder when that raises."""
    try:
        text = str(value)
    except BaseException:  # noqa: BLE001 - a hostile __str__
        return "<unprintable thrown value>"
    return text if type(text) is str else "<unprintable thrown value>"


def failure(message: str, *, name: str | None = None, code: str | None = None) -> ToolExecutionFailure:
    """A failure as the pipeline builds them (``Error: `` + message)."""
    info = None if name is None or code is None else ToolErrorInfo(name=name, code=code)
    return ToolExecutionFailure(error=ToolFailure(message, info), content=(TextBlock("Error: " + message),))


class SubState(str, Enum):
    """PENDING (fed to the sub-batch) → SETTLED (committed, its result
    back), or SKIPPED (never fed: an unknown tool, its failure the result;
    or the runtime was stopping)."""

    PENDING = "pending"
    SETTLED = "settled"
    SKIPPED = "skipped"


#: What :meth:`SubCall.outcome` says, in the order a tally lists them.
OUTCOMES: Final = ("succeeded", "failed", "not started", "no result")


class SubCall:
    """One tool call of the program. Its state is the run's thread's; the
    sub-batch's executor actor only reads its identity (to log it). It
    keeps no arguments: the sub-batch's call holds them until it commits
    (a run's calls, up to 10,000 of up to ``max_message_bytes`` each, are
    not all kept in memory until the run ends), nor a success's result (a
    failure's only: the failed run's listing names it)."""

    __slots__ = ("n", "call_id", "name", "schema", "state", "result", "cancel")

    def __init__(self, n: int, call_id: str, name: str, schema: Any) -> None:
        self.n = n
        self.call_id = call_id
        self.name = name
        self.schema = schema
        self.state = SubState.PENDING
        self.result: Result | None = None  # a failure's (SETTLED with None: it succeeded)
        #: Aborts this sub-call alone (the program cancelled it); None until it is fed.
        self.cancel: AbortController | None = None

    def __repr__(self) -> str:
        return f"<SubCall {self.call_id} {self.name} {self.state.value}>"

    def outcome(self) -> str:
        """How it ended, in a word: ``succeeded``, ``failed`` (an unknown
        tool's call too: skipped with its failure), ``not started`` (the run
        ended before its body started) or ``no result`` (its scheduling
        failed)."""
        result = self.result
        error = None if result is None else result.error
        if error is not None and error.info is not None and str(error.info.code) == "ABORTED_BEFORE_DISPATCH":
            return "not started"
        if self.state is SubState.SETTLED and result is None:
            return "succeeded"
        if self.state is not SubState.PENDING and result is not None:  # settled, or refused unfed (unknown tool)
            return "failed" if result.is_error else "succeeded"
        return "no result" if self.state is SubState.PENDING else "not started"

    def summary(self) -> str:
        """Its line in a failed run's listing: ``- <id> <name>: <outcome>``,
        with a failure's error."""
        outcome = self.outcome()
        match outcome:
            case "failed" if self.result is not None:
                error = self.result.error
                info = None if error is None else error.info
                message = "" if error is None else error.message
                if len(message) > 300:
                    message = message[:300] + "..."
                if info is None:
                    status = f"failed: {message}"
                else:
                    # A plain exception from a body is TOOL_FAILED: its class says more.
                    plain = str(info.code) == "TOOL_FAILED" and info.name != "ToolFailedError"
                    status = f"failed ({info.name if plain else info.code}): {message}"
            case "no result":
                status = "no result (its scheduling failed)"  # execute() waits for the sub-batch's end
            case _:
                status = outcome
        if self.cancel is not None and self.cancel.signal.aborted:
            status += " (the program cancelled it)"
        name = self.name if len(self.name) <= 100 else f"{self.name[:100]}..."  # (an unknown one: any length)
        return f"- {self.call_id} {name}: {status}"


def log_start(session: Session, ctx: ToolRunContext, sub: SubCall, arguments: Any) -> None:
    """Append ``sub``'s ``tool/ptc-dispatch-start`` with the ``arguments``
    it starts with (raises what the session raises)."""
    session.append(dispatch_start_event(ctx.root_call_id, ctx.call_id, sub.call_id, sub.name, thaw(arguments)))


def log_settle(
    rt: ToolRuntime, session: Session, ctx: ToolRunContext, sub: SubCall, execution: ToolExecution, result: Result
) -> None:
    """Append ``sub``'s ``tool/ptc-dispatch`` (``execution``: its call),
    its content through the ``tools/ptc-dispatch-log`` waterfall first, with
    its :func:`presentation` meta (raises what the session raises)."""
    content = logged_content(rt, ctx, sub, result)
    meta = presentation(sub, execution, result)
    session.append(dispatch_event(ctx.root_call_id, ctx.call_id, sub.call_id, sub.name, result, content, meta))


def presentation(sub: SubCall, execution: ToolExecution, result: Result) -> Any:
    """The presentation meta of ``sub``'s durable copy, as JSON: what its
    tool's ``presentation_meta`` gives the same call made by the model
    (``dsh_actors.logged_meta``), so a replay draws its cards. One that
    raises or returns something that is not JSON is logged and the copy
    has none (the call has settled, and the program gets its value)."""
    try:
        meta = logged_meta(execution, result)
    except ToolPolicyError as exc:
        logger.opt(exception=exc).error(
            "{}; the log's copy of {} has no presentation meta (replay draws generic cards): "
            "fix the tool's presentation_meta",
            exc.message,
            sub.call_id,
        )
        return None
    return None if meta is None else thaw(meta)


def logged_content(rt: ToolRuntime, ctx: ToolRunContext, sub: SubCall, result: Result) -> tuple[Any, ...]:
    """The ``tools/ptc-dispatch-log`` waterfall over the durable copy's
    content; a raising listener or a bad replacement keeps the original."""
    original = tuple(result.content)
    record = PtcDispatchLog(
        exec=ctx.execution,
        agent=ctx.agent,
        sub_call_id=sub.call_id,
        name=sub.name,
        is_error=result.is_error,
        content=original,
    )
    try:
        replaced = rt.events.waterfall("tools/ptc-dispatch-log", lambda: original, record, agent=ctx.agent)
    except BaseException as exc:  # noqa: BLE001 - contained (docs/reference.md, section 8)
        logger.opt(exception=exc).error(
            "a tools/ptc-dispatch-log listener raised for {}: {}; logging the original content",
            sub.call_id,
            safe_str(exc),
        )
        return original
    if isinstance(replaced, (list, tuple)) and all(
        type(b) in (TextBlock, ImageBlock, ReasoningBlock) for b in replaced
    ):
        return tuple(replaced)
    logger.error(
        "a tools/ptc-dispatch-log listener returned {} for {}, not content blocks; logging the original content",
        type(replaced).__qualname__,
        sub.call_id,
    )
    return original


def forward(ctx: ToolRunContext, sub: SubCall, result: Result) -> None:
    """Images and contexts of a sub-result ride the outer result; a
    nested conclude_turn only from a success."""
    images = tuple(b for b in result.content if type(b) is ImageBlock)
    if images:
        ctx.defer_context(UserMessage(images, source="run_code", meta={"sub_call_id": sub.call_id, "tool": sub.name}))
    for context in result.additional_contexts:
        ctx.defer_context(context)
    if type(result) is ToolExecutionSuccess and result.concludes_turn:
        ctx.conclude_turn()
