"""The metrics policy: outcome counts and latency percentiles per tool.

::

    metrics = policies.metrics.install(rt)        # -> Metrics
    ...
    metrics.snapshot()                            # plain dict, a fresh copy
    metrics.to_json()                             # the same, as JSON text
    metrics.dispose()                             # uninstall (idempotent)

or, as a plugin: ``undo = rt.use(policies.metrics, metrics=m)`` with a
:class:`Metrics` you created (``rt.use`` returns the core's disposer, which
cannot carry the object, hence ``install``). Config: ``max_samples=4096``
(latency samples kept per tool and phase, newest win; at most 1,000,000),
``nested=True`` (count nested calls, such as PTC sub-calls, too), ``clock``
(seconds, default ``time.perf_counter``; asked once as the policy is made,
so a clock that does not return a number is refused then).

What is counted: every call that publishes ``tools/result``, which is every
call, skipped ones included (pre-aborted calls, non-JSON arguments: they
run no phase but still publish one result). Outcomes are keyed by tool and
code: ``"ok"`` for a success, else ``error.info.code`` (``TOOL_FAILED`` for a
plain exception from a body), or ``"ERROR"`` for a failure without
structured identity (a ``Deny`` without ``info``).

Latencies (milliseconds), kept apart:

``wait``
    from entering ``tools/pre-execute`` to entering ``tools/execute``:
    pre-execute policy, approval, guards and the wait for a pool slot.
``body``
    the duration of this policy's ``tools/execute`` wrapper's ``next()``:
    the wrappers inside it and the body (all attempts, when a retry policy
    is inside it).
``total``
    from entering ``tools/pre-execute`` to ``tools/result``: post-execute
    and finalization included.

A denied call has ``total`` but no ``wait``/``body``; a skipped call has
none (it ran no phase) but is counted. For the phases to be measured from
their very start, this policy *prepends* its listeners: install it after
the other policies (a listener prepended later is outside it).

Threads: the pre-execute listener and the ``tools/result`` observer run on
the thread that prepares and finalizes the call (an executor's thread), the
wrapper on the call actor's thread; they share a lock held for a few dict
operations. No thread is started.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from dsh_actors import InvalidStateError, InvalidTypeError, ToolExecution, ToolRuntime, dumps

from ._common import ToolExecutionResult, Undo, check_bool, check_no_unknown, check_positive_int, check_runtime, code_of

__all__ = ["Metrics", "apply", "install"]

_POLICY = "policies.metrics"
#: The most samples a series may keep (each tool keeps three series).
MOST_SAMPLES: Final = 1_000_000
PHASES: Final = ("wait", "body", "total")
PERCENTILES: Final = (50, 90, 99)


@dataclass(slots=True)
class _Trip:
    """One call between its pre-execute entry and its result."""

    started: float
    dispatched: float | None = None
    body: float = 0.0
    dispatches: int = 0


@dataclass(slots=True)
class _Series:
    """Latency samples of one phase: all-time count/sum/max, a window for percentiles."""

    window: deque[float]
    count: int = 0
    total: float = 0.0
    low: float = float("inf")
    high: float = 0.0

    def add(self, seconds: float) -> None:
        ms = max(0.0, seconds * 1000.0)
        self.window.append(ms)
        self.count += 1
        self.total += ms
        self.low = min(self.low, ms)
        self.high = max(self.high, ms)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"count": self.count}
        if not self.count:
            out.update({"mean": None, "min": None, "max": None})
            out.update({f"p{p}": None for p in PERCENTILES})
            return out
        ordered = sorted(self.window)
        out.update({"mean": self.total / self.count, "min": self.low, "max": self.high})
        for p in PERCENTILES:
            # Nearest rank over the window of recent samples.
            rank = max(1, -(-p * len(ordered) // 100))
            out[f"p{p}"] = ordered[rank - 1]
        return out


@dataclass(slots=True)
class _ToolStats:
    max_samples: int
    calls: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    series: dict[str, _Series] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.series = {phase: _Series(deque(maxlen=self.max_samples)) for phase in PHASES}


class Metrics:
    """Counters and latency windows. Thread-safe; read it any time.

    Create one directly and install it with ``rt.use(policies.metrics,
    metrics=m)``, or let :func:`install` do both. One installation at a time.
    """

    def __init__(
        self,
        *,
        max_samples: int = 4096,
        nested: bool = True,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.max_samples = check_positive_int(_POLICY, "max_samples", max_samples, most=MOST_SAMPLES)
        self.nested = check_bool(_POLICY, "nested", nested)
        if not callable(clock):
            raise InvalidTypeError(f"{_POLICY}: clock must be callable (seconds as a float)")
        now = clock()  # (asked now, not first in a call's hooks, where its error would fail the call)
        if type(now) not in (int, float) or not math.isfinite(now):
            raise InvalidTypeError(
                f"{_POLICY}: clock must return seconds as a float, and it returned {type(now).__qualname__}"
            )
        self._clock = clock
        self._lock = threading.Lock()
        self._tools: dict[str, _ToolStats] = {}
        self._all = _ToolStats(self.max_samples)
        # Keyed by the execution's token (identity): calls between pre-execute and result.
        self._trips: dict[object, _Trip] = {}
        self._undo: Undo | None = None

    # -- reading ------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """A fresh plain dict (JSON-ready)::

            {"calls": n, "outcomes": {"ok": n, "TOOL_TIMEOUT": m, ...},
             "latency_ms": {"wait": S, "body": S, "total": S},
             "tools": {name: {"calls", "outcomes", "latency_ms"}, ...},
             "in_flight": k}

        where each ``S`` is ``{"count", "mean", "min", "max", "p50", "p90",
        "p99"}`` (``None`` values while ``count`` is 0; percentiles over the
        last ``max_samples`` samples)."""
        with self._lock:
            out = self._describe(self._all)
            out["tools"] = {name: self._describe(stats) for name, stats in sorted(self._tools.items())}
            out["in_flight"] = len(self._trips)
        return out

    def to_json(self) -> str:
        """:meth:`snapshot` as compact JSON text (keys sorted)."""
        return dumps(self.snapshot(), sort_keys=True).decode()

    def count(self, tool: str, code: str = "ok") -> int:
        """How many calls of ``tool`` ended with ``code``."""
        with self._lock:
            stats = self._tools.get(tool)
            return 0 if stats is None else stats.outcomes[code]

    def reset(self) -> None:
        """Forget every count and sample (calls in flight are still timed)."""
        with self._lock:
            self._tools = {}
            self._all = _ToolStats(self.max_samples)

    @staticmethod
    def _describe(stats: _ToolStats) -> dict[str, Any]:
        return {
            "calls": stats.calls,
            "outcomes": dict(sorted(stats.outcomes.items())),
            "latency_ms": {phase: stats.series[phase].summary() for phase in PHASES},
        }

    # -- installing -----------------------------------------------------------

    @property
    def installed(self) -> bool:
        undo = self._undo
        return undo is not None and not undo.disposed

    def install(self, rt: ToolRuntime) -> Callable[[], None]:
        """Subscribe to ``rt``'s events; return the disposer (also :meth:`dispose`)."""
        check_runtime(_POLICY, rt)
        if self.installed:
            raise InvalidStateError(f"{_POLICY}: this Metrics object is already installed; dispose it first")
        undo = Undo()
        undo.add(self._forget_trips)
        undo.add(rt.events.on("tools/pre-execute", self._on_pre_execute, prepend=True))
        undo.add(rt.events.on("tools/execute", self._on_execute, prepend=True))
        undo.add(rt.events.on("tools/result", self._on_result))
        undo.add(rt.events.on("tools/deferred", self._on_deferred))
        self._undo = undo
        return undo

    def dispose(self) -> None:
        """Unsubscribe (idempotent). Counts stay readable."""
        undo = self._undo
        if undo is not None:
            undo()

    def _forget_trips(self) -> None:
        with self._lock:
            self._trips.clear()

    # -- listeners ---------------------------------------------------------------

    def _counts(self, execution: ToolExecution) -> bool:
        return self.installed and (self.nested or execution.parent is None)

    def _on_pre_execute(self, execution: ToolExecution, next_: Callable[[], Any]) -> Any:
        if self._counts(execution):
            started = self._clock()
            with self._lock:
                self._trips.setdefault(execution.token, _Trip(started))
        return next_()

    def _on_execute(self, execution: ToolExecution, next_: Callable[[], ToolExecutionResult]) -> ToolExecutionResult:
        if not self._counts(execution):
            return next_()
        entered = self._clock()
        with self._lock:
            trip = self._trips.get(execution.token)
            if trip is not None and trip.dispatched is None:
                trip.dispatched = entered
        try:
            return next_()
        finally:
            elapsed = self._clock() - entered
            with self._lock:
                if trip is not None:
                    trip.body += elapsed
                    trip.dispatches += 1

    def _on_deferred(self, execution: ToolExecution, ask: Any) -> None:
        # The batch suspends: the call is no longer in flight here. Its
        # tools/result comes when it is resumed (perhaps in another process):
        # counted then, without latencies (its trip began before the wait).
        with self._lock:
            self._trips.pop(execution.token, None)

    def _on_result(self, execution: ToolExecution, result: ToolExecutionResult) -> None:
        if not self._counts(execution):
            return
        ended = self._clock()
        code = code_of(result)
        with self._lock:
            trip = self._trips.pop(execution.token, None)
            stats = self._tools.get(execution.name)
            if stats is None:
                stats = self._tools[execution.name] = _ToolStats(self.max_samples)
            for target in (stats, self._all):
                target.calls += 1
                target.outcomes[code] += 1
                if trip is None:
                    continue  # skipped: no phase ran
                if trip.dispatched is not None:
                    target.series["wait"].add(trip.dispatched - trip.started)
                    target.series["body"].add(trip.body)
                target.series["total"].add(ended - trip.started)

    def __repr__(self) -> str:
        state = "installed" if self.installed else "not installed"
        return f"<Metrics {state} calls={self._all.calls}>"


def install(
    rt: ToolRuntime,
    /,
    *,
    max_samples: int = 4096,
    nested: bool = True,
    clock: Callable[[], float] = time.perf_counter,
) -> Metrics:
    """Create a :class:`Metrics`, install it on ``rt`` and return it;
    ``metrics.dispose()`` uninstalls it (``rt.stop()`` needs nothing: no
    thread is started)."""
    metrics = Metrics(max_samples=max_samples, nested=nested, clock=clock)
    metrics.install(rt)
    return metrics


def apply(rt: ToolRuntime, /, *, metrics: Metrics | None = None, **config: Any) -> Callable[[], None]:
    """The plugin entry point: install ``metrics`` (or a new
    :class:`Metrics` built from ``config``) and return its disposer."""
    check_runtime(_POLICY, rt)
    if metrics is not None:
        if not isinstance(metrics, Metrics):
            raise InvalidTypeError(f"{_POLICY}: metrics must be a Metrics, not {type(metrics).__qualname__}")
        if config:
            raise InvalidTypeError(f"{_POLICY}: pass options to Metrics(...) or here, not both ({sorted(config)})")
    else:
        unknown = set(config) - {"max_samples", "nested", "clock"}
        check_no_unknown(_POLICY, unknown, "metrics", "max_samples", "nested", "clock")
        metrics = Metrics(**config)
    return metrics.install(rt)
