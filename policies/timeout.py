"""The timeout policy: a ``tools/execute`` wrapper enforcing ``timeout_ms``.

``rt.use(policies.timeout)`` (config: ``prepend=False``).
``policies.timeout.applied(rt)`` tells whether it is applied to ``rt``
(until its disposer runs): a caller that applies it only when it is not
applied yet (the command line's ``run``) keeps one deadline per call.
Where it is not applied, nothing enforces ``timeout_ms``: the core logs
that at DEBUG, once per tool, as such a tool's body starts with the
caller's own signal (``docs/reference.md``, section 12).

For a call whose executable definition declares ``timeout_ms``, the wrapper
swaps in a deadline signal that follows the caller's
(``AbortController(execution.signal)``, which the deadline aborts) for its
delegated lifetime, and restores the caller's in a ``finally``. The body then gets a
fresh signal fused from the caller's and this one (the pipeline does that),
so:

* a cooperative sync body sees the deadline on ``ctx.signal``
  (``wait``/``aborted``/``throw_if_aborted``; the abort reason is a
  :class:`~dsh_actors.ToolTimeoutError`); callbacks it added with
  ``ctx.signal.add_callback`` run on the timer thread when the deadline
  fires, so they must not block (they would delay other deadlines);
* an ``async def`` body is cancelled by the runtime when the signal fires;
* a body that ignores its signal is never abandoned: the call settles when
  it returns, and is still a timeout.

Outcome: if the deadline passed *first*, the result is a ``TOOL_TIMEOUT``
failure, ``tool call timed out after <N>ms``, whatever the body then
returned (deferred contexts are kept). If the caller aborted first the
result is left alone and the pipeline's cancellation rule applies
(``ABORTED``): "first" is decided by the deadline signal's reason, since
it takes the reason of the first abort (the caller's or the deadline's).
The deadline has passed when it fired, or when the wrapped call returns
at or after it (read on the deadline's own clock) and the caller has not
aborted: a timer thread that is late (a busy process) does not decide
the outcome; the body just did not see its signal abort. A failure
is returned, never raised, so post-execute still sees it.

Calls of tools without ``timeout_ms`` (and an executor's own tools, such as
PTC's ``run_code``, which bounds itself) are untouched: the signal is not
replaced and the wrapper just returns ``next()``.

**What the budget covers.** The clock starts when this wrapper is entered,
i.e. at dispatch, on the call actor's thread: time spent waiting for a pool
slot (``max_parallel_tool_calls``), in pre-execute policy or in an approval
prompt does not count. It covers the wrappers inside this one and the body,
and for an ``async def`` body the time its steps wait for a busy event loop
(a loop running many bodies counts against each of them).
Put it inside a retry policy (apply retry first) to give each attempt its
own budget, outside it to bound all attempts together.

**Threads.** The wrapper runs on the call actor thread that dispatches the
call. All deadlines of one applied policy are served by ONE timer thread
(``dsh-policy-timeout``) holding a heap; it starts with the first deadline
and is stopped by the disposer and by ``rt.stop()``. Deadlines cancelled
because calls finished in time are removed (lazily, with compaction), so
they never accumulate. Disposing drops the deadlines still pending: a call
still inside the wrapper then runs on without a deadline (and is not a
timeout), exactly like a call entering it afterwards.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from dsh_actors import (
    AbortController,
    ErrorCode,
    TextBlock,
    ToolErrorInfo,
    ToolExecution,
    ToolExecutionFailure,
    ToolFailure,
    ToolRuntime,
    ToolTimeoutError,
)

from ._common import (
    ToolExecutionResult,
    Undo,
    check_bool,
    check_no_unknown,
    check_runtime,
    listens,
)
from ._timer import DeadlineTimer

__all__ = ["TimeoutPolicy", "applied", "apply", "timeout_failure"]

_POLICY = "policies.timeout"


def timeout_failure(timeout_ms: float, result: ToolExecutionResult | None = None) -> ToolExecutionFailure:
    """The ``TOOL_TIMEOUT`` failure, built the way the pipeline builds
    failures, keeping ``result``'s deferred contexts."""
    error = ToolTimeoutError(timeout_ms)
    message = error.message
    return ToolExecutionFailure(
        error=ToolFailure(message, ToolErrorInfo(name=type(error).__name__, code=str(ErrorCode.TOOL_TIMEOUT))),
        content=(TextBlock("Error: " + message),),
        additional_contexts=() if result is None else result.additional_contexts,
    )


class TimeoutPolicy:
    """The wrapper and its timer, for one runtime. Built by :func:`apply`."""

    def __init__(self, rt: ToolRuntime) -> None:
        self._rt = rt
        # The deadlines' clock: the timer's, and the wrapper's to tell
        # whether a deadline it did not see fire has passed.
        self._clock = time.monotonic
        self.timer = DeadlineTimer(name="dsh-policy-timeout", clock=self._clock)

    def wrapper(self, execution: ToolExecution, next_: Callable[[], ToolExecutionResult]) -> ToolExecutionResult:
        """The ``tools/execute`` wrapper (a call actor's thread)."""
        definition = execution.definition  # (what the call runs: the pipeline's lookup)
        timeout_ms = None if definition is None else definition.timeout_ms
        if timeout_ms is None:
            return next_()
        caller = execution.signal
        # One signal: the caller's aborts reach it, and so does the deadline.
        controller = AbortController(caller)
        signal = controller.signal
        fired: list[ToolTimeoutError] = []

        def fire() -> None:
            # The reason is made only if the deadline fires (most calls end
            # first), and kept before the abort: whoever reads the signal's
            # reason can tell it from a caller's.
            error = ToolTimeoutError(timeout_ms)
            fired.append(error)
            controller.abort(error)

        deadline = self.timer.schedule(timeout_ms / 1000.0, fire)
        if deadline is None:  # disposed while this call was on its way in
            signal.close()
            return next_()
        execution.signal = signal
        try:
            result = next_()
        finally:
            execution.signal = caller
            # Passed: it is due and the timer, late, has not fired it yet,
            # or it fired (its abort may still be on its way); not if the
            # disposer dropped it.
            passed = self._clock() >= deadline.when if deadline.cancel() else deadline.fired
            signal.close()  # (the deadline's abort can no longer reach it)
        # The signal keeps the reason of whichever abort came first: a
        # caller's abort keeps ABORTED, unless the deadline's came before it.
        if passed and (not signal.aborted or (fired and signal.reason is fired[0])):
            return timeout_failure(timeout_ms, result)
        return result


def apply(rt: ToolRuntime, /, *, prepend: bool = False, **unknown: Any) -> Callable[[], None]:
    """Install the timeout wrapper on ``rt``; return its disposer.

    ``prepend=True`` makes it the outermost ``tools/execute`` wrapper
    instead of the innermost one installed so far.
    """
    check_runtime(_POLICY, rt)
    check_no_unknown(_POLICY, unknown, "prepend")
    check_bool(_POLICY, "prepend", prepend)
    policy = TimeoutPolicy(rt)
    undo = Undo()
    undo.add(policy.timer.stop)
    undo.add(rt.events.on("tools/execute", policy.wrapper, prepend=prepend))
    undo.add(rt.on_stop(lambda: policy.timer.stop(rt.teardown_remaining())))
    return undo


def applied(rt: ToolRuntime, /) -> bool:
    """Whether this policy is applied to ``rt``: one of its wrappers is
    among ``rt``'s ``tools/execute`` listeners (applied and not disposed)."""
    return listens(rt, "tools/execute", TimeoutPolicy)
