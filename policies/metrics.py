"""The metrics policy: outcome counts and latency percentiles per tool,
and how busy the runtime is.

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
so a clock that does not return a number is refused then),
``meter_provider`` (an OpenTelemetry ``MeterProvider`` to publish the
gauges below on; default None: none).

What is counted: every call that publishes ``tools/result``, which is every
call, skipped ones included (pre-aborted calls, arguments that are not
lossless JSON: they run no phase but still publish one result). Outcomes are keyed by tool and
code: ``"ok"`` for a success, else ``error.info.code`` (``TOOL_FAILED`` for a
plain exception from a body), or ``"ERROR"`` for a failure without
structured identity (a ``Deny`` without ``info``). The calls of a name
that runs no tool (no tool of the name the model sent that the call's agent
may run: ``execution.tool_found`` is False, or the call failed
``UNKNOWN_TOOL``) are counted under one name, :data:`UNKNOWN_TOOLS`
(``"(unknown)"``, which no tool can be called), not under the name sent,
whatever settled them (``UNKNOWN_TOOL``, or before it arguments that are
not lossless JSON, a denial, a deferral, an abort): names a model makes up would
each keep an entry for good. A tool's latency windows are made at its
first sample.

Latencies (milliseconds), kept apart. A call's time starts when its batch
opens, as this policy sees it: when the first of the batch's calls enters
``tools/pre-execute`` (a batch is told apart by its ``execution.signal``,
which its calls share and no other batch's do). A nested call
(``execution.parent`` set: ``rt.tools.dispatch``, a PTC sub-call) starts
as it enters ``tools/pre-execute`` itself. Give a call you dispatch its
``parent`` (or a signal of its own): one without, whose signal another
call dispatched before it had, is taken for a call of that one's batch.

``wait``
    from its start to entering ``tools/execute``: its turn to be prepared,
    pre-execute policy, approval, guards and the wait for capacity. Its
    two waits are also kept apart (``wait`` minus both is the time in the
    pre-execute listeners):
``approval``
    from the request (``tools/approval-request``: the pre-execute
    listeners returned an ``Ask`` that no approval given earlier answers)
    to the approval service's answer (sync or async), whatever it is (``tools/approval``): one that
    allows the call, a denial, or ``"deferred"`` (sampled as the batch
    suspends; the decision given at resume, perhaps in another process, is
    not timed, so nothing counts twice). One sample per call (a call
    prepared again and asked again: the sum). None when no one was asked
    (no approval service, no agent) or the service failed (it raised, or
    gave no valid answer). The guards come after it, in ``queue``, global
    ones registered before this policy included.
``queue``
    the time before the call's preparation (its turn: the batch's cap, an
    exclusive call before it, the calls before it being prepared, in
    model order, approvals included), and from the call being ready to
    run (the end of the pre-execute listeners, or its approval's answer)
    to entering ``tools/execute``: the guards and the
    wait for capacity, a free call actor of its batch (a call prepared
    ahead of a free slot) or a slot of the runtime's budget
    (``ToolRuntime(max_call_actors=...)``). A batch waiting for a step
    slot has not opened yet: in no phase (the gauges show it).
``body``
    the duration of this policy's ``tools/execute`` wrapper's ``next()``:
    the wrappers inside it and the body (all attempts, when a retry policy
    is inside it).
``total``
    from its start to ``tools/result``: post-execute and finalization
    included. So for a call that ran, ``total`` is ``wait`` + ``body`` +
    the time after its body (post-execute, its turn to commit), and
    ``wait`` is ``queue`` + ``approval`` + the time in the pre-execute
    listeners (a call prepared again: also its time between the two).

A denied call has ``total`` (from its start) and ``approval`` if the
service answered for it (a denial, or an approval a guard then
overrode), but no ``wait``/``queue``/``body``; a
deferred call has ``approval`` only (its result, at resume or at the
abort that ends it, is counted without latencies); a skipped call has none (it ran no phase) but is
counted. For the phases to be measured from their very start, this
policy *prepends* its listeners: install it after the other policies (a
listener prepended later is outside it).

**How busy the runtime is.** ``snapshot()["capacity"]`` is the runtime's
dispatcher's reading (``rt.dispatcher.snapshot()``), None while the policy
is not installed or the runtime is not running: ``call_actors_in_use``
(call-actor slots held, lent ones not counted) against ``call_actors_max``
(the budget), ``call_actors_lent``, ``call_actors_peak``,
``call_actors_wanted`` (call actors batches wait for beyond the budget),
``calls_queued`` (calls in the batches' work mailboxes no call actor has
taken yet), and the executor actors' ``steps_in_use``, ``steps_lent``,
``steps_max`` and ``steps_queued`` (batches waiting for a step slot). With
a ``meter_provider``, each is an OpenTelemetry observable gauge (see
:data:`GAUGES`: ``dsh.call_actors.in_use``, ``dsh.calls.queued``, ...),
and so is ``in_flight`` (``dsh.calls.in_flight``); they are read when the
provider's reader collects (nothing is added to a call's path) and report
nothing while the policy is not installed. OpenTelemetry keeps the first
instrument of a name: the gauges are made once per meter provider, by the
first ``Metrics`` installed with it, and read the ``Metrics`` installed
with it now (a second, while another is installed with that provider, is
refused as it is installed).

**Stopping.** A stop of the runtime ends the installation as the stop
begins (``rt.stop_signal``): ``installed`` is False, the gauges report
nothing, and the object (or another ``Metrics`` with the same provider)
may be installed on another runtime. Its listeners stay on the stopping
runtime, and count the calls its stop drains, until :meth:`Metrics.dispose`
or the next install removes them.

Threads: the pre-execute listener and the ``tools/approval-request``,
``tools/approval``, ``tools/deferred`` and ``tools/result`` observers run on the thread that prepares and finalizes the call (an
executor's thread), the wrapper on the call actor's thread; they share a
lock held for a few dict operations (a call's own hooks, one at a time,
write its trip). The gauges are read on the collecting thread. No thread
is started.
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final

from dsh_actors import (
    AbortSignal,
    InvalidStateError,
    InvalidTypeError,
    InvalidValueError,
    ToolExecution,
    ToolRuntime,
    dumps,
)

from ._common import (
    Batches,
    PerProvider,
    ToolExecutionResult,
    Undo,
    check_bool,
    check_no_unknown,
    check_positive_int,
    check_runtime,
    code_of,
    counted_name,
)

__all__ = ["UNKNOWN_TOOLS", "Metrics", "apply", "install"]

_POLICY = "policies.metrics"
#: The most samples a series may keep (each tool keeps one per phase).
MOST_SAMPLES: Final = 1_000_000
PHASES: Final = ("wait", "approval", "queue", "body", "total")
PERCENTILES: Final = (50, 90, 99)
#: The observable gauges a ``meter_provider`` gets: (instrument name, the
#: reading's key, unit, description). Every key but ``in_flight`` (this
#: policy's) is one of ``rt.dispatcher.snapshot()``.
GAUGES: Final = (
    ("dsh.call_actors.in_use", "call_actors_in_use", "{call_actor}", "Call-actor slots held (lent ones not counted)."),
    ("dsh.call_actors.lent", "call_actors_lent", "{call_actor}", "Call actors waiting with their slot lent."),
    ("dsh.call_actors.max", "call_actors_max", "{call_actor}", "The call-actor budget (max_call_actors)."),
    ("dsh.call_actors.peak", "call_actors_peak", "{call_actor}", "The most call-actor slots held at once."),
    ("dsh.call_actors.wanted", "call_actors_wanted", "{call_actor}", "Call actors waiting for a slot of the budget."),
    ("dsh.calls.queued", "calls_queued", "{call}", "Calls waiting in work mailboxes for a call actor."),
    ("dsh.steps.in_use", "steps_in_use", "{step}", "Executor actors' step slots held (lent ones not counted)."),
    ("dsh.steps.lent", "steps_lent", "{step}", "Executor actors waiting with their step slot lent."),
    ("dsh.steps.max", "steps_max", "{step}", "The step slots."),
    ("dsh.steps.queued", "steps_queued", "{step}", "Batches' steps waiting for a step slot."),
    ("dsh.calls.in_flight", "in_flight", "{call}", "Calls between tools/pre-execute and tools/result."),
)
#: The name the calls of a name that runs no tool are counted under (no
#: tool is named so: a tool's name is letters, digits, ``_`` and ``-``).
UNKNOWN_TOOLS: Final = "(unknown)"
#: The gauges made on each meter provider.
_GAUGES: Final[PerProvider[_Gauges]] = PerProvider()


@dataclass(slots=True)
class _Trip:
    """One call between its pre-execute entry and its result."""

    started: float  # when its batch opened (see _opened; a nested call: its pre-execute entry)
    entered: float  # its (first) pre-execute entry: from started to here, in the queue
    ready: float  # the end of the pre-execute listeners (or the approval's answer): from here, the queue
    asked: float | None = None  # its Ask waits for an answer since (tools/approval-request)
    approval: float | None = None  # seconds until the approval service answered (summed, if asked again)
    dispatched: float | None = None
    body: float = 0.0
    dispatches: int = 0


@dataclass(slots=True)
class _Series:
    """Latency samples of one phase: all-time count/sum/max, a window for percentiles."""

    window: deque[float] | list[float]
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

    def copy(self) -> _Series:
        """A copy to summarize without the lock (its window a list: read only)."""
        return _Series(list(self.window), self.count, self.total, self.low, self.high)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"count": self.count}
        if not self.count:
            out.update(_NO_SAMPLES)
            return out
        ordered = sorted(self.window)
        out.update({"mean": self.total / self.count, "min": self.low, "max": self.high})
        for p in PERCENTILES:
            # Nearest rank over the window of recent samples.
            rank = max(1, -(-p * len(ordered) // 100))
            out[f"p{p}"] = ordered[rank - 1]
        return out


_NO_SAMPLES: Final[dict[str, Any]] = {"mean": None, "min": None, "max": None, **{f"p{p}": None for p in PERCENTILES}}


@dataclass(slots=True)
class _ToolStats:
    max_samples: int
    calls: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    # By phase; empty until the first sample (``target.series or
    # target.windows()``): a tool whose calls ran no phase keeps no window.
    series: dict[str, _Series] = field(default_factory=dict)

    def windows(self) -> dict[str, _Series]:
        """:attr:`series`, made now (at the first sample)."""
        self.series = {phase: _Series(deque(maxlen=self.max_samples)) for phase in PHASES}
        return self.series

    def copy(self) -> _ToolStats:
        """A copy to describe without the lock."""
        series = {phase: each.copy() for phase, each in self.series.items()}
        return _ToolStats(self.max_samples, self.calls, self.outcomes.copy(), series)


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
        meter_provider: Any = None,
    ) -> None:
        self.max_samples = check_positive_int(_POLICY, "max_samples", max_samples, most=MOST_SAMPLES)
        self.nested = check_bool(_POLICY, "nested", nested)
        if not callable(clock):
            raise InvalidTypeError(f"{_POLICY}: clock must be callable (seconds as a float)")
        now = clock()  # (asked now, not first in a call's hooks, where its error would fail the call)
        if type(now) not in (int, float):
            raise InvalidTypeError(
                f"{_POLICY}: clock must return seconds as a float, and it returned {type(now).__qualname__}"
            )
        if not math.isfinite(now):
            raise InvalidValueError(f"{_POLICY}: clock must return a finite number of seconds, and it returned {now}")
        self._clock = clock
        self._lock = threading.Lock()
        self._tools: dict[str, _ToolStats] = {}
        self._all = _ToolStats(self.max_samples)
        # Keyed by the execution's token (identity): calls between pre-execute and result.
        self._trips: dict[object, _Trip] = {}
        self._batches: Batches[float] = Batches()  # when each batch opened
        self._undo: Undo | None = None
        self._rt: ToolRuntime | None = None  # while installed: whose capacity is read
        self._stopping: AbortSignal | None = None  # the installed runtime's stop_signal
        self._meter_provider = None if meter_provider is None else _check_meter_provider(meter_provider)
        self._gauges: _Gauges | None = None  # its provider's (found or made at the first install)

    # -- reading ------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """A fresh plain dict (JSON-ready)::

            {"calls": n, "outcomes": {"ok": n, "TOOL_TIMEOUT": m, ...},
             "latency_ms": {"wait": S, "approval": S, "queue": S, "body": S, "total": S},
             "tools": {name: {"calls", "outcomes", "latency_ms"}, ...},
             "in_flight": k, "capacity": {"call_actors_in_use": n, ...} or None}

        where each ``S`` is ``{"count", "mean", "min", "max", "p50", "p90",
        "p99"}`` (``None`` values while ``count`` is 0; percentiles over the
        last ``max_samples`` samples), and ``capacity`` is the runtime's
        (see the module docstring)."""
        capacity = self._capacity()
        with self._lock:  # (copied: the hooks of every call need this lock)
            everything = self._all.copy()
            tools = [(name, stats.copy()) for name, stats in self._tools.items()]
            in_flight = len(self._trips)
        out = self._describe(everything)
        out["tools"] = {name: self._describe(stats) for name, stats in sorted(tools)}
        out["in_flight"] = in_flight
        out["capacity"] = capacity
        return out

    def to_json(self) -> str:
        """:meth:`snapshot` as compact JSON text (keys sorted)."""
        return dumps(self.snapshot(), sort_keys=True).decode()

    def count(self, tool: str, code: str = "ok") -> int:
        """How many calls of ``tool`` ended with ``code`` (:data:`UNKNOWN_TOOLS`:
        the calls of tools unknown to their agent)."""
        with self._lock:
            stats = self._tools.get(tool)
            return 0 if stats is None else stats.outcomes[code]

    def reset(self) -> None:
        """Forget every count and sample (calls in flight are still timed)."""
        with self._lock:
            self._tools = {}
            self._all = _ToolStats(self.max_samples)

    def _capacity(self) -> dict[str, int] | None:
        """The installed runtime's dispatcher's reading, or None."""
        rt = self._rt
        return rt.dispatcher.snapshot() if rt is not None and rt.running else None

    def _publish(self) -> None:
        """Have the gauges of this object's meter provider read this object
        (made on the provider at the first install of a Metrics with it:
        :class:`_Gauges`); refused while another Metrics installed with it
        publishes there."""
        meter_provider = self._meter_provider
        gauges = self._gauges or _GAUGES.of(meter_provider, partial(_Gauges.made, meter_provider))
        with _GAUGES.lock:  # (the check and the claim at once)
            other = gauges.publisher()
            if other is not None and other is not self and other.installed:
                raise InvalidStateError(
                    f"{_POLICY}: another Metrics publishes its gauges on this meter_provider already "
                    "(OpenTelemetry keeps the first instrument of a name); install that Metrics, dispose it "
                    "first (or stop its runtime), or pass another provider"
                )
            gauges.publisher = weakref.ref(self)
        self._gauges = gauges

    def _reading(self, key: str) -> int | None:
        """One gauge's value now (None: nothing to report, not installed)."""
        if key == "in_flight":
            if not self.installed:
                return None
            with self._lock:
                return len(self._trips)
        capacity = self._capacity()
        return None if capacity is None else capacity[key]

    @staticmethod
    def _describe(stats: _ToolStats) -> dict[str, Any]:
        return {
            "calls": stats.calls,
            "outcomes": dict(sorted(stats.outcomes.items())),
            "latency_ms": {phase: _summary(stats.series.get(phase)) for phase in PHASES},
        }

    # -- installing -----------------------------------------------------------

    @property
    def installed(self) -> bool:
        """Installed, and its runtime's stop has not begun."""
        undo = self._undo
        stopping = self._stopping
        return undo is not None and not undo.disposed and stopping is not None and not stopping.aborted

    def install(self, rt: ToolRuntime) -> Callable[[], None]:
        """Subscribe to ``rt``'s events (and have the meter provider's
        gauges read this object); return the disposer (also
        :meth:`dispose`). An installation a stop ended is disposed first."""
        check_runtime(_POLICY, rt)
        if self.installed:
            raise InvalidStateError(f"{_POLICY}: this Metrics object is already installed; dispose it first")
        self.dispose()  # (installed on a runtime that stopped: its listeners go now)
        undo = Undo()
        # Installed from here (another Metrics is refused this one's gauges meanwhile).
        self._rt = rt
        self._stopping = rt.stop_signal
        self._undo = undo
        try:
            undo.add(self._forget_trips)
            if self._meter_provider is not None:
                self._publish()
            undo.add(rt.events.on("tools/pre-execute", self._on_pre_execute, prepend=True))
            undo.add(rt.events.on("tools/execute", self._on_execute, prepend=True))
            undo.add(rt.events.on("tools/result", self._on_result))
            undo.add(rt.events.on("tools/approval-request", self._on_request))
            undo.add(rt.events.on("tools/approval", self._on_approval))
            undo.add(rt.events.on("tools/deferred", self._on_deferred))
        except BaseException:
            undo()
            raise
        return undo

    def dispose(self) -> None:
        """Unsubscribe (idempotent). Counts stay readable."""
        undo = self._undo
        if undo is not None:
            undo()

    def _forget_trips(self) -> None:
        self._rt = None
        with self._lock:
            self._trips.clear()
            self._batches.clear()

    # -- listeners ---------------------------------------------------------------

    def _counts(self, execution: ToolExecution) -> bool:
        # (Subscribed: a stopping runtime's calls are counted as they drain.)
        undo = self._undo
        return undo is not None and not undo.disposed and (self.nested or execution.parent is None)

    def _on_pre_execute(self, execution: ToolExecution, next_: Callable[[], Any]) -> Any:
        if not self._counts(execution):
            return next_()
        entered = self._clock()
        with self._lock:
            trip = self._trips.get(execution.token)
            if trip is None:  # (else prepared again: it keeps its start)
                trip = self._trips[execution.token] = _Trip(self._opened(execution, entered), entered, entered)
        decision = next_()
        # The listeners decided (prepared again, once more): the call is
        # ready, unless the pipeline asks for an approval (_on_request).
        trip.ready = self._clock()
        trip.asked = None
        return decision

    def _opened(self, execution: ToolExecution, entered: float) -> float:
        """When the batch of ``execution`` (entering ``tools/pre-execute``
        for the first time, at ``entered``) opened, as this policy sees it:
        when its first call entered ``tools/pre-execute`` (``Batches``: a
        call id seen again under a signal, the same call dispatched again,
        opens another). A nested
        call (``parent`` set: a dispatch, a PTC sub-call) starts at its own
        entry. Lock held."""
        return entered if execution.parent is not None else self._batches.of(execution, entered)

    def _on_request(self, execution: ToolExecution, ask: Any) -> None:
        # The pipeline asks the approval service (an Ask no approval given
        # stands for): the call waits for its answer (tools/approval) from here.
        asked = self._clock()
        with self._lock:
            trip = self._trips.get(execution.token)
            if trip is not None:
                trip.asked = asked

    def _on_approval(self, execution: ToolExecution, ask: Any, answer: str) -> None:
        # The approval service answered, whatever it said: the approval ends
        # and the call is ready (the guards, if it is allowed, are in the
        # queue). Sampled where its trip ends here: its tools/result, or its
        # deferral (tools/deferred, right after a "deferred" answer in a batch).
        answered = self._clock()
        with self._lock:
            trip = self._trips.get(execution.token)
            if trip is None or trip.asked is None:
                return
            trip.approval = (trip.approval or 0.0) + (answered - trip.asked)
            trip.ready = answered
            trip.asked = None

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
        # approval, timed to the "deferred" answer, is sampled now (the
        # answer given at resume, perhaps in another process, is not timed:
        # nothing counts twice). Its tools/result comes when it is resumed:
        # counted then, without latencies (its trip began before the wait).
        with self._lock:
            trip = self._trips.pop(execution.token, None)
            if trip is None or trip.approval is None:
                return
            for target in (self._stats(counted_name(execution, UNKNOWN_TOOLS)), self._all):
                (target.series or target.windows())["approval"].add(trip.approval)

    def _on_result(self, execution: ToolExecution, result: ToolExecutionResult) -> None:
        if not self._counts(execution):
            return
        ended = self._clock()
        code = code_of(result)
        name = counted_name(execution, UNKNOWN_TOOLS, code)
        with self._lock:
            trip = self._trips.pop(execution.token, None)
            for target in (self._stats(name), self._all):
                target.calls += 1
                target.outcomes[code] += 1
                if trip is None:
                    continue  # skipped: no phase ran
                series = target.series or target.windows()
                if trip.approval is not None:
                    series["approval"].add(trip.approval)
                if trip.dispatched is not None:
                    series["wait"].add(trip.dispatched - trip.started)
                    series["queue"].add((trip.entered - trip.started) + (trip.dispatched - trip.ready))
                    series["body"].add(trip.body)
                series["total"].add(ended - trip.started)

    def _stats(self, tool: str) -> _ToolStats:
        """The counts of ``tool`` (made at its first call). Lock held."""
        stats = self._tools.get(tool)
        if stats is None:
            stats = self._tools[tool] = _ToolStats(self.max_samples)
        return stats

    def __repr__(self) -> str:
        state = "installed" if self.installed else "not installed"
        return f"<Metrics {state} calls={self._all.calls}>"


def _summary(series: _Series | None) -> dict[str, Any]:
    return {"count": 0, **_NO_SAMPLES} if series is None else series.summary()


class _Gauges:
    """The observable gauges (:data:`GAUGES`) made on one meter provider,
    once (OpenTelemetry keeps the first instrument of a name): each reads
    the Metrics that publishes on the provider now (held weakly), and
    reports nothing while it is not installed."""

    __slots__ = ("publisher",)

    def __init__(self) -> None:
        self.publisher: Callable[[], Metrics | None] = _nobody

    @classmethod
    def made(cls, meter_provider: Any) -> _Gauges:
        """The gauges, made on ``meter_provider``, read by nobody yet."""
        gauges = cls()
        gauges.make(meter_provider)
        return gauges

    def make(self, meter_provider: Any) -> None:
        from opentelemetry.metrics import Observation  # (_check_meter_provider found it)

        def gauge(key: str) -> Callable[[Any], list[Any]]:
            def observe(options: Any) -> list[Any]:
                metrics = self.publisher()
                value = None if metrics is None else metrics._reading(key)
                return [] if value is None else [Observation(value)]

            return observe

        meter = meter_provider.get_meter(__name__)
        for name, key, unit, description in GAUGES:
            meter.create_observable_gauge(name, callbacks=[gauge(key)], unit=unit, description=description)


def _nobody() -> None:
    return None


def _check_meter_provider(meter_provider: Any) -> Any:
    """``meter_provider``, if it is one and OpenTelemetry is installed."""
    if not callable(getattr(meter_provider, "get_meter", None)):
        raise InvalidTypeError(
            f"{_POLICY}: meter_provider must be an OpenTelemetry MeterProvider (with get_meter()) or None, "
            f"not {type(meter_provider).__qualname__}"
        )
    try:
        import opentelemetry.metrics  # noqa: F401 - only whether it is there
    except ImportError as exc:
        raise InvalidStateError(
            f"{_POLICY}: meter_provider needs OpenTelemetry: install the otel extra (pip install 'dsh-actors[otel]')"
        ) from exc
    return meter_provider


def install(
    rt: ToolRuntime,
    /,
    *,
    max_samples: int = 4096,
    nested: bool = True,
    clock: Callable[[], float] = time.perf_counter,
    meter_provider: Any = None,
) -> Metrics:
    """Create a :class:`Metrics`, install it on ``rt`` and return it;
    ``metrics.dispose()`` uninstalls it, and a stop of ``rt`` ends the
    installation as it begins (see the module docstring; no thread is
    started)."""
    metrics = Metrics(max_samples=max_samples, nested=nested, clock=clock, meter_provider=meter_provider)
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
        unknown = set(config) - {"max_samples", "nested", "clock", "meter_provider"}
        check_no_unknown(_POLICY, unknown, "metrics", "max_samples", "nested", "clock", "meter_provider")
        metrics = Metrics(**config)
    return metrics.install(rt)
