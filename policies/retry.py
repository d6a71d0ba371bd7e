"""The retry policy: a ``tools/execute`` wrapper that retries idempotent
tools on transient failures, with capped exponential backoff.

``rt.use(policies.retry, tools=("fetch",), codes=("UPSTREAM_BUSY",),
attempts=3, base_ms=100, max_ms=2000)``

Config (all keyword, validated when applied):

``tools``
    Names of the tools to retry (a collection of strings; default none).
``predicate``
    ``predicate(execution) -> bool``: whether this call is idempotent (it
    sees the name and the frozen arguments, so "GET only" is expressible).
    Only an exact ``True`` counts; an exception counts as ``False`` and is
    logged. Runs on the call actor's thread; must be fast.
``codes``
    Failure codes (``error.info.code``) worth another attempt, *added to*
    the default ``{"TOOL_TIMEOUT"}``. ``INVALID_ARGS`` is refused
    (:data:`NEVER_RETRIED`): the same frozen arguments fail the same way,
    and only the model can correct them.
``attempts``
    Total attempts, first included (a positive int, default 3).
``base_ms``, ``max_ms``
    The wait before attempt ``k + 1`` is ``min(max_ms, base_ms * 2**(k-1))``
    (positive numbers, at most 1e9 ms, ``max_ms >= base_ms``; defaults 100
    and 2000).
``prepend``
    Install as the outermost wrapper instead of the innermost (default False).

A call is retried when its tool is named in ``tools``, or ``predicate``
says so, or its definition declares ``idempotent=True`` (``define_tool``,
``@tool``, an MCP ``idempotentHint``) or has ``"idempotent": True`` in its
``meta``; and its outcome is a failure whose code is in the set; and the
caller has not aborted. The backoff waits on ``execution.signal`` (never ``time.sleep``),
so an abort ends it at once, and the last failure is returned. Nothing is
retried after the caller aborted, whatever the code.

Each attempt calls ``next()`` again: the inner wrappers and the body run
again with the same frozen arguments and a fresh body signal. The returned
result is the last attempt's (its deferred contexts only). To give every
attempt its own deadline, apply this policy before ``policies.timeout``
(or with ``prepend=True``) so the timeout wrapper is inside it.

Threads: the wrapper and its backoff run on the call actor thread that
dispatches the call; it starts no thread of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final

from loguru import logger

from dsh_actors import (
    LONGEST_WAIT_MS,
    ErrorCode,
    InvalidValueError,
    ToolExecution,
    ToolExecutionFailure,
    ToolRuntime,
)

from ._common import (
    ToolExecutionResult,
    Undo,
    check_bool,
    check_callable,
    check_names,
    check_no_unknown,
    check_positive_int,
    check_positive_number,
    check_runtime,
)

__all__ = ["DEFAULT_CODES", "NEVER_RETRIED", "RetryPolicy", "apply"]

_POLICY = "policies.retry"

#: Codes retried whatever the configuration adds.
DEFAULT_CODES: Final = frozenset({str(ErrorCode.TOOL_TIMEOUT)})
#: Codes ``codes`` may not name: an attempt with the same arguments fails the same way.
NEVER_RETRIED: Final = frozenset({str(ErrorCode.INVALID_ARGS)})

Predicate = Callable[[ToolExecution], object]


class RetryPolicy:
    """A configured retry wrapper for one runtime. Built by :func:`apply`."""

    def __init__(
        self,
        rt: ToolRuntime,
        *,
        tools: frozenset[str],
        predicate: Predicate | None,
        codes: frozenset[str],
        attempts: int,
        base_ms: float,
        max_ms: float,
    ) -> None:
        self._rt = rt
        self.tools = tools
        self.predicate = predicate
        self.codes = codes
        self.attempts = attempts
        self.base_ms = base_ms
        self.max_ms = max_ms

    def delays(self) -> Iterator[float]:
        """The backoff before each retry, in seconds (``attempts - 1`` of
        them), one at a time (however many attempts are allowed)."""
        delay = self.base_ms
        for _ in range(self.attempts - 1):
            yield min(delay, self.max_ms) / 1000.0
            delay = min(delay * 2.0, self.max_ms)

    def is_idempotent(self, execution: ToolExecution) -> bool:
        if execution.name in self.tools:
            return True
        if self.predicate is not None:
            try:
                if self.predicate(execution) is True:
                    return True
            except Exception as exc:  # noqa: BLE001 - a failing predicate means "not idempotent"
                logger.opt(exception=exc).warning(
                    "{}: the idempotency predicate raised for tool {!r}; not retrying", _POLICY, execution.name
                )
        definition = execution.definition  # (what the call runs: the pipeline's lookup)
        if definition is None:
            return False
        if definition.idempotent is True:
            return True
        meta = definition.meta
        return meta is not None and meta.get("idempotent") is True

    def retry_code(self, result: ToolExecutionResult) -> str | None:
        """The code that makes ``result`` worth another attempt, or ``None``."""
        if type(result) is not ToolExecutionFailure or result.error.info is None:
            return None
        code = str(result.error.info.code)
        return code if code in self.codes else None

    def wrapper(self, execution: ToolExecution, next_: Callable[[], ToolExecutionResult]) -> ToolExecutionResult:
        """The ``tools/execute`` wrapper (a call actor's thread)."""
        if self.attempts == 1 or not self.is_idempotent(execution):
            return next_()
        signal = execution.signal  # the caller's, as this wrapper sees it
        result = next_()
        for attempt, delay in enumerate(self.delays(), start=2):
            code = self.retry_code(result)
            if code is None or signal.aborted:
                return result
            if signal.wait(delay):  # aborted during the backoff: stop at once
                return result
            logger.debug(
                "{}: attempt {} of tool {!r} (call {}) after {}",
                _POLICY,
                attempt,
                execution.name,
                execution.call_id,
                code,
            )
            result = next_()
        return result


def apply(
    rt: ToolRuntime,
    /,
    *,
    tools: Iterable[str] = (),
    predicate: Predicate | None = None,
    codes: Iterable[str] = (),
    attempts: int = 3,
    base_ms: float = 100.0,
    max_ms: float = 2000.0,
    prepend: bool = False,
    **unknown: Any,
) -> Callable[[], None]:
    """Install the retry wrapper on ``rt``; return its disposer."""
    check_runtime(_POLICY, rt)
    check_no_unknown(_POLICY, unknown, "tools", "predicate", "codes", "attempts", "base_ms", "max_ms", "prepend")
    names = check_names(_POLICY, "tools", tools)
    check_callable(_POLICY, "predicate", predicate)
    extra = check_names(_POLICY, "codes", codes)
    refused = extra & NEVER_RETRIED
    if refused:
        raise InvalidValueError(
            f"{_POLICY}: codes: {', '.join(sorted(refused))} is never retried (the same arguments fail "
            "the same way; the model must correct them): remove it from codes"
        )
    attempts = check_positive_int(_POLICY, "attempts", attempts)
    base = check_positive_number(_POLICY, "base_ms", base_ms, most=LONGEST_WAIT_MS)
    cap = check_positive_number(_POLICY, "max_ms", max_ms, most=LONGEST_WAIT_MS)
    if cap < base:
        raise InvalidValueError(f"{_POLICY}: max_ms ({max_ms!r}) must be at least base_ms ({base_ms!r})")
    check_bool(_POLICY, "prepend", prepend)
    policy = RetryPolicy(
        rt,
        tools=names,
        predicate=predicate,
        codes=DEFAULT_CODES | extra,
        attempts=attempts,
        base_ms=base,
        max_ms=cap,
    )
    undo = Undo()
    undo.add(rt.events.on("tools/execute", policy.wrapper, prepend=prepend))
    return undo
