"""The OpenTelemetry policy: one ``execute_tool`` span per call, and a
duration histogram, after the OpenTelemetry GenAI semantic conventions.

``rt.use(policies.otel, tracer_provider=None, capture_content=False,
meter_provider=None)`` (the ``otel`` extra: ``opentelemetry-api``; without
a provider argument the global ones are used, so an application that
configured the SDK needs to pass nothing). It registers a guard
(``rt.tools.guard``): the runtime must be started. Several may be applied
at once, each with providers of its own: one whose tracer or meter
provider an applied one uses (None: the global one, as it is then) is
refused, as each call would get a second span there, or its duration
recorded twice.

**Spans.** Each call (nested ones and PTC sub-calls included) gets one span
``execute_tool {gen_ai.tool.name}``, kind ``INTERNAL``, with
``gen_ai.operation.name = "execute_tool"``, ``gen_ai.tool.name``,
``gen_ai.tool.call.id``, ``gen_ai.tool.type = "function"`` (the
application executes the tool) and ``gen_ai.tool.description``. It starts
when the call enters ``tools/pre-execute`` (this policy prepends its
listener: the span covers the other pre-execute listeners, the approval,
the guards, the wait for a slot, the body, post-execute) and ends at
``tools/result``; a call that runs no phase (aborted before it started,
arguments that are not lossless JSON) gets a span at its ``tools/result``. A
sampler or span processor of the tracer provider's that raises as the span
starts does not fail the call: it goes on without a span (a WARNING
logged), still timed in the histogram, its body's spans under the span
its own would have had as parent.

Its parent is the span current where the batch was submitted (the hooks of
a call run in the caller's ``contextvars`` context), so tool spans sit
under the application's agent step; so is a later span of the call (its
``tools/result`` after a deferral was aborted), and each applied policy's
(not another policy's span of the same call). While the call runs, its span is the
current span of the call's context: the body's own spans, a nested batch's
calls, a PTC program's sub-calls and the trace context an MCP
``tools/call`` carries in ``_meta`` (``traceparent``) are its children
(with several policies applied, the body's are the last made current's,
and a nested call's span each policy's own call span's).

A failure sets the span's status to ``ERROR`` (the failure's message) and
``error.type`` to the failure's code (``TOOL_FAILED``, ``TOOL_TIMEOUT``,
``INVALID_ARGS``, ...; ``_OTHER``, the conventions' fallback, for a failure
without one, such as a denial, which has no code of its own). The exception
a body or hook raised (a fault) is recorded as the span's ``exception``
event; the model's bad arguments (a ``ToolArgsError`` the validation
around a body raised) and a cancellation (an ``AbortError``) are
outcomes, not faults, by the library's one rule (``dsh_actors.is_fault``,
which its logging follows too): their span gets the status and
``error.type`` only. No ``gen_ai.agent.name``: an ``Agent`` is a scope key,
not a name the application gave an agent (two ``Agent("main")`` are two
scopes). Span events (attributes in ``dsh.*``):

``dsh.tool.denied``
    a pre-execute ``Deny`` (``dsh.reason``), or a denial (``dsh.reason``:
    its message) that no approval answer gives: a guard's that runs before
    this policy's (a global guard registered before it), the pipeline's for
    an ``Ask`` no one could be asked about (no approval service, no agent)
    or for a nested call's deferral.
``dsh.tool.approval.requested``
    the pipeline asks for an approval (``tools/approval-request``): the
    pre-execute waterfall returned an ``Ask`` (``dsh.reason``) that no
    approval given earlier stands for (``execution.approval_stands``): the
    call waits for an approval from here (the event's time is when it was
    asked).
``dsh.tool.approval.answered``
    the approval service's answer, or the decision given at resume
    (``tools/approval``, as it is given, before it takes effect): ``dsh.answer`` is the answer itself
    (``allowed-once``, ``rejected``, ``cancelled``, ``unavailable`` or
    ``deferred``) and ``dsh.approval.duration`` the seconds from the request
    to the answer (how long the person, or the service, took). Without a
    valid answer (the service raised or answered something else) there is
    none: the span's status and ``error.type`` (``POLICY_FAILED``, or the
    abort's code) say what ended the wait.
``dsh.tool.approval.deferred``
    after that answer's ``dsh.tool.approval.answered``, the batch suspends:
    the span ends there (status unset, no duration recorded). The call's
    trip goes on when the suspension is resumed, perhaps in another process
    and hours later: that part gets a span of its own, from the decision
    given at resume (``tools/approval`` publishes it too:
    ``dsh.tool.approval.answered`` with ``dsh.answer``, no
    ``dsh.approval.duration``, as the wait is not known here) to
    ``tools/result``.
``dsh.tool.aborted``
    the call was cancelled (``ABORTED``, ``ABORTED_BEFORE_DISPATCH``, a
    pre-execute ``Cancel``).
``dsh.tool.timeout``
    ``policies.timeout`` ended it (``TOOL_TIMEOUT``).
``dsh.tool.blocked``
    a failure without an error code after the call was cleared to run: a
    post-execute ``Block``, or the denial of a guard that runs after this
    policy's (a global guard registered after it, or any guard of an
    agent's scope: scoped guards run after the global ones).
``dsh.policy.disposed``
    the policy was disposed while the call was in flight: its span ends
    there (status unset, no duration recorded).
``dsh.runtime.stopped``
    the runtime stopped and the call had not settled when the executors'
    drains were done (its thread ignores the stop's signal: a body run
    inline on its batch's thread, a sync listener or approval service that
    does not return; the stop answers its batch without it; a call the
    drain commits ``ABORTED`` at the deadline ends as aborted). The
    policy's ``rt.on_stop(..., last=True)`` hook, run after the drains,
    ends those spans: status ``ERROR`` (``the runtime stopped before the
    call settled``), ``error.type`` ``_OTHER``, no duration recorded. Its
    ``tools/result``, should the call settle later, adds nothing (nor does
    anything else the call's thread does when it comes back).

The policy sees a call through a prepended ``tools/pre-execute`` listener,
a guard (guards run once a call is allowed, the approval included: this
one marks the call cleared), a ``tools/approval-request`` observer (the
requests), a ``tools/approval`` observer (the answers),
a ``tools/deferred`` observer and a ``tools/result`` observer; nothing else,
so it adds no phase to a call that had none (and an ``rt.on_stop`` hook,
above).

**Content.** Only with ``capture_content=True``: ``gen_ai.tool.call.arguments``
(the arguments as JSON text; text the model sent that is not JSON, or whose
JSON is a string, as it was sent: ``execution.arguments`` is a ``str`` only
then) and ``gen_ai.tool.call.result`` (a success's value as JSON text, a
failure's content text). Arguments and results may hold personal data: off
by default, as the conventions ask.

**Metric.** ``gen_ai.execute_tool.duration`` (histogram, seconds), with
``gen_ai.operation.name``, ``gen_ai.tool.name``, ``gen_ai.tool.type`` and,
for a failure, ``error.type``: the duration per tool and outcome. Its
bucket boundaries are the conventions' advice (``DURATION_BUCKETS``: 0.01 s
doubling to 81.92 s; the SDK's default ones put every call under 5 s in
one bucket), given as ``explicit_bucket_boundaries_advisory``: a View of
the application's that sets an aggregation replaces them. A call of a name
that runs no tool (no tool of the name the model sent that its agent may
run: ``execution.tool_found`` is False, or the call failed ``UNKNOWN_TOOL``)
has ``gen_ai.tool.name = "_OTHER"`` there, whatever settled it
(``UNKNOWN_TOOL``, or before it arguments that are not lossless JSON, a
denial, an abort): names a model makes up would each make an attribute set, which the
SDK keeps for good and caps (its span's ``gen_ai.tool.name`` keeps the
name sent, and the span is named ``execute_tool`` alone: a span name is
a dimension too, for a collector's span metrics). The histogram
is made once per meter provider (a meter asked of OpenTelemetry's global
proxy provider is kept by it for good).

**Threads.** The listeners run where the pipeline runs them (the thread
preparing and finalizing the call, which also publishes the approval's
answer, the call's guard); they touch only the
call's own state, kept in the call's context (each applied policy its
own: two may be applied at once, each with its providers), and the
policy's set of open spans, under a lock held for a dict operation (the
stop hook, on its own thread, ends those still open; an event is added
to a span only while it is open). The
descriptions are cached per agent (weakly) and tool name (the definition
the call's agent sees under the name; not a name it has no definition
for; an entry serves only calls of the definition it was built from, so
an executor replaced without a ``tools/change`` is seen) and the cache is
dropped on ``tools/change``.
"""

from __future__ import annotations

import contextvars
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, Final

from loguru import logger

from dsh_actors import (
    Cancel,
    Deny,
    InvalidStateError,
    InvalidTypeError,
    ToolExecution,
    ToolExecutionFailure,
    ToolExecutionSuccess,
    ToolRuntime,
    dumps,
    is_fault,
    thaw,
)

from ._common import (
    PerProvider,
    Undo,
    applied,
    check_bool,
    check_no_unknown,
    check_runtime,
    counted_name,
)

__all__ = ["apply"]

_POLICY: Final = "policies.otel"

OPERATION: Final = "execute_tool"
TOOL_TYPE: Final = "function"
DURATION_METRIC: Final = "gen_ai.execute_tool.duration"
#: The histogram's bucket boundaries (seconds), as the conventions advise.
DURATION_BUCKETS: Final = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
OTHER_ERROR: Final = "_OTHER"
#: The histogram's ``gen_ai.tool.name`` for a call of a name that runs no tool.
OTHER_TOOL: Final = "_OTHER"

_ABORTED: Final = frozenset({"ABORTED", "ABORTED_BEFORE_DISPATCH"})
_TIMEOUT: Final = "TOOL_TIMEOUT"
#: The approval answers that do not deny the call.
_GOES_ON: Final = frozenset({"allowed-once", "deferred"})
#: The status of a span the runtime's stop ended.
_STOPPED: Final = "the runtime stopped before the call settled"


class _CallSpan:
    """One call's span and what the policy saw of its trip (only the call's
    own hooks touch it, one at a time)."""

    __slots__ = ("token", "span", "start", "tool", "asked", "cleared", "denied", "aborted")

    def __init__(self, token: Any, span: Any, start: float, tool: _Tool) -> None:
        self.token = token  # the execution's: a nested call's context holds its parent's
        self.span = span
        self.start = start
        self.tool = tool
        self.asked: float | None = None  # when its Ask was requested, until the answer (perf_counter)
        self.cleared = False  # passed this policy's guard: allowed, approved if asked
        self.denied = False  # its denial is on the span already (a Deny, an approval's denying answer)
        self.aborted = False


class _Layer:
    """The spans the applied policies started for one call, in the call's
    context (shared by every applied policy: several may be applied at
    once). Each policy's span is parented on what was current before the
    first of them (the span current at submission), not on another
    policy's span of the same call; a nested call's, on the same policy's
    span of its enclosing call while that call's spans are current."""

    __slots__ = ("token", "before", "outer", "spans", "top")

    def __init__(self, token: Any, before: Any, outer: _Layer | None) -> None:
        self.token = token
        self.before = before  # the OpenTelemetry context current before any of this call's spans
        self.outer = outer  # the enclosing call's (a nested call's context holds it)
        self.spans: dict[Any, Any] = {}  # by policy
        self.top: Any = None  # the span made current last (the body's current span)

    def parent(self, policy: Any, set_span: Callable[[Any, Any], Any], current_span: Callable[[Any], Any]) -> Any:
        """The context ``policy``'s span of this call starts in."""
        outer = self.outer
        if outer is not None and outer.top is not None and current_span(self.before) is outer.top:
            own = outer.spans.get(policy)
            if own is not None and own is not outer.top:
                return set_span(own, self.before)
        return self.before


#: The current call's _Layer, in the call's context.
_LAYER: Final[contextvars.ContextVar[_Layer | None]] = contextvars.ContextVar("policies.otel.layer", default=None)


class _Tool:
    """What every span and point of one tool share, built once per tool
    (and again after a ``tools/change``)."""

    __slots__ = ("span_name", "attributes", "ok", "definition")

    def __init__(self, name: str, description: str, known: bool = True, definition: Any = None) -> None:
        self.definition = definition  # (what it was built from: a cached one is used for this one only)
        # (A name that runs no tool is the model's own text, of any length:
        # its spans are named by the operation alone, a dimension a
        # collector's span metrics can keep; the attribute keeps the name.)
        self.span_name = f"{OPERATION} {name}" if known else OPERATION
        # The span's attributes but the call id (each span gets a copy).
        self.attributes: dict[str, Any] = {
            "gen_ai.operation.name": OPERATION,
            "gen_ai.tool.name": name,
            "gen_ai.tool.type": TOOL_TYPE,
        }
        if description:
            self.attributes["gen_ai.tool.description"] = description
        # The histogram's for a success (the SDK only reads them).
        self.ok: dict[str, Any] = {
            "gen_ai.operation.name": OPERATION,
            "gen_ai.tool.name": name,
            "gen_ai.tool.type": TOOL_TYPE,
        }


class OtelPolicy:
    """The listeners of one applied policy."""

    def __init__(self, rt: ToolRuntime, tracer_provider: Any, meter_provider: Any, capture_content: bool) -> None:
        from opentelemetry import context as otel_context
        from opentelemetry import metrics, trace
        from opentelemetry.trace import SpanKind, Status, StatusCode

        self._rt = rt
        self._trace = trace
        self._attach = otel_context.attach
        self._current = otel_context.get_current
        self._set_span = trace.set_span_in_context
        self._get_span = trace.get_current_span
        self._kind = SpanKind.INTERNAL
        self._no_span = trace.NonRecordingSpan
        self._error = Status
        self._error_code = StatusCode.ERROR
        self._tracer = trace.get_tracer(__name__, tracer_provider=tracer_provider)
        self._duration = _duration_histogram(metrics.get_meter_provider() if meter_provider is None else meter_provider)
        # The providers as given (None: the global one), each with its option
        # and how to read the global one.
        self._providers: tuple[tuple[str, Any, Callable[[], Any]], ...] = (
            ("tracer_provider", tracer_provider, trace.get_tracer_provider),
            ("meter_provider", meter_provider, metrics.get_meter_provider),
        )
        self._capture = capture_content
        # What every span of one tool shares, by agent (weakly) and name,
        # and by name for calls without an agent; dropped on tools/change,
        # which also moves the generation.
        self._tools: weakref.WeakKeyDictionary[Any, dict[str, _Tool]] = weakref.WeakKeyDictionary()
        self._global_tools: dict[str, _Tool] = {}
        self._generation = 0
        self._lock = threading.Lock()
        # The current call's span state, in the call's context (this policy's
        # own: another one applied beside it keeps its own spans).
        self._state: contextvars.ContextVar[_CallSpan | None] = contextvars.ContextVar(
            f"policies.otel.call#{id(self)}", default=None
        )
        # The spans started and not ended, by the execution's token: whoever
        # takes one out ends it (its tools/result or deferral, the disposer
        # or the runtime's stop, which end those of the calls still in
        # flight). Changed under _ends.
        self._open: dict[Any, _CallSpan] = {}
        self._ends = threading.Lock()
        self._closed = False  # disposed: a span started from now on ends at once

    def shared_provider(self, other: OtelPolicy) -> str | None:
        """The option whose provider ``other`` uses too (None: the global
        one, as it is now), or None: ``other``'s spans or durations would go
        where this policy's go."""
        for (option, mine, current), (_, theirs, _) in zip(self._providers, other._providers, strict=True):
            if (current() if mine is None else mine) is (current() if theirs is None else theirs):
                return option
        return None

    # -- the span ---------------------------------------------------------------

    def _start(self, execution: ToolExecution, context: Any = None) -> _CallSpan:
        tool = self._tool(execution)
        attributes = tool.attributes.copy()
        attributes["gen_ai.tool.call.id"] = execution.call_id
        if self._capture:
            arguments = execution.arguments  # (a str: the text the model sent did not parse)
            attributes["gen_ai.tool.call.arguments"] = arguments if type(arguments) is str else _json_text(arguments)
        try:
            span = self._tracer.start_span(tool.span_name, context, kind=self._kind, attributes=attributes)
        except Exception as exc:  # noqa: BLE001 - the application's sampler or span processor: not the call's failure
            logger.opt(exception=exc).warning(
                "{}: starting the span of call {} raised (a sampler or span processor of the tracer provider's); "
                "the call goes on without one",
                _POLICY,
                execution.call_id,
            )
            # (Its body's spans stay under the span it would have had as parent.)
            span = self._no_span(self._get_span(context).get_span_context())
        state = _CallSpan(execution.token, span, time.perf_counter(), tool)
        with self._ends:
            self._open[execution.token] = state
        if self._closed:
            # Disposed while this call's hook ran: close() may have looked
            # before the span was in; whoever takes it out ends it.
            self._end_disposed(execution.token)
        return state

    def _begin(self, execution: ToolExecution) -> _CallSpan:
        """The call's span started now, current for the rest of its hooks."""
        # The OpenTelemetry context current at submission (the call's hooks
        # run in a copy of the caller's), read once for the parent, the
        # sampler and the child context (the SDK reads it three times when
        # it is not given); what it was before another applied policy made
        # its span of this call current (see _Layer).
        layer = self._layer(execution)
        state = self._start(execution, layer.parent(self, self._set_span, self._get_span))
        self._state.set(state)
        layer.spans[self] = layer.top = state.span
        # (This context is the call's own copy: nothing to restore afterwards.)
        self._attach(self._set_span(state.span, self._current()))
        return state

    def _layer(self, execution: ToolExecution) -> _Layer:
        """The spans the applied policies started for this call, made at
        the first of them (a nested call's context holds its enclosing
        call's, which it keeps as ``outer``)."""
        layer = _LAYER.get()
        if layer is None or layer.token is not execution.token:
            layer = _Layer(execution.token, self._current(), layer)
            _LAYER.set(layer)
        return layer

    def _tool(self, execution: ToolExecution) -> _Tool:
        """What the spans of the tool this call runs share: the definition
        the call's agent (and step admission) sees under its name, so two
        agents' tools of one name keep their own descriptions. Cached per
        agent (held weakly: an agent the application drops is freed, its
        session with it) and name, for calls without a step admission: what
        a name means to an agent changes with a ``tools/change``, which
        drops the cache (a lookup that a change overtook is not kept), and
        with its executor (PTC's ``run_code``), so an entry serves only a
        call that runs the definition it was built from. A name without a
        definition is not kept (a name a model made up, a runtime stopping),
        and one the pipeline found no tool of (``execution.tool_found``) is
        not looked up again."""
        name = execution.name
        agent = execution.agent
        cacheable = execution.tool_set is None
        if cacheable:
            names = self._tools.get(agent) if agent is not None else self._global_tools
            cached = None if names is None else names.get(name)
            if cached is not None and cached.definition is execution.definition:
                return cached
        if execution.tool_found is False:
            return _Tool(name, "", known=False)  # (the pipeline found no tool of the name: nothing to look up)
        generation = self._generation
        definition = execution.definition  # (what the call runs: the pipeline's lookup)
        if definition is None:
            return _Tool(name, "")
        tool = _Tool(name, str(definition.description), definition=definition)
        if cacheable:
            with self._lock:
                if generation == self._generation:  # (no tools/change since the lookup)
                    if agent is None:
                        self._global_tools[name] = tool
                    else:
                        self._tools.setdefault(agent, {})[name] = tool
        return tool

    def _forget_tools(self) -> None:
        with self._lock:
            self._generation += 1
            self._tools = weakref.WeakKeyDictionary()
            self._global_tools = {}

    def _mine(self, execution: ToolExecution) -> _CallSpan | None:
        state = self._state.get()
        return state if state is not None and state.token is execution.token else None

    def _take(self, state: _CallSpan) -> bool:
        """Take ``state``'s span out of the open ones, to end it: False if
        the disposer or the runtime's stop took it first (and ended it)."""
        return self._pop(state.token) is not None

    def _pop(self, token: Any) -> _CallSpan | None:
        with self._ends:
            return self._open.pop(token, None)

    def _event(self, state: _CallSpan, name: str, attributes: dict[str, Any]) -> None:
        """Add an event to ``state``'s span, unless it was ended meanwhile
        (the runtime's stop ended it: the call's thread comes back late)."""
        with self._ends:  # (ended only once out of _open: not in between)
            if self._open.get(state.token) is state:
                state.span.add_event(name, attributes)

    def close(self) -> None:
        """End the spans of the calls still in flight (the policy is being
        disposed: their tools/result will not reach it)."""
        self._closed = True
        for state in self._take_all():
            _end_as_disposed(state)

    def _take_all(self) -> list[_CallSpan]:
        """Take every open span out, to end it (their late tools/result
        ends nothing)."""
        with self._ends:
            left = list(self._open.values())
            self._open.clear()
        return left

    def _end_disposed(self, token: Any) -> None:
        state = self._pop(token)
        if state is not None:
            _end_as_disposed(state)

    def runtime_stopping(self) -> None:
        """The ``rt.on_stop(..., last=True)`` hook, run once the executors'
        drains are done (every batch answered, every call they could commit
        committed, an abort at the deadline included): end the spans of the
        calls still in flight (their thread ignores the stop's signal: the
        stop answered their batch without them, and their tools/result, if
        it ever comes, comes late)."""
        for state in self._take_all():
            span = state.span
            span.add_event("dsh.runtime.stopped", {})
            span.set_attribute("error.type", OTHER_ERROR)
            span.set_status(self._error(self._error_code, _STOPPED))
            span.end()

    # -- the listeners -------------------------------------------------------------

    def pre_execute(self, execution: ToolExecution, next_: Callable[[], Any]) -> Any:
        state = self._mine(execution)
        if state is not None:
            # Prepared again (what it was prepared under changed before its
            # body started): the same call, so the same span, current already.
            # What it decided then no longer holds, but an approval given
            # stands for the same question (the pipeline does not ask again).
            self._event(state, "dsh.tool.prepared_again", {})
            state.asked = None
            state.cleared = state.denied = state.aborted = False
        else:
            state = self._begin(execution)
        decision = next_()
        kind = type(decision)
        if kind is Deny:
            state.denied = True
            self._event(state, "dsh.tool.denied", _reason(decision.reason))
        elif kind is Cancel:
            state.aborted = True
            self._event(state, "dsh.tool.aborted", {})
        return decision

    def on_request(self, execution: ToolExecution, ask: Any) -> None:
        # Routed to the approval service (its answer: on_approval): an Ask
        # that no approval given earlier stands for, whichever listener made it.
        state = self._mine(execution)
        if state is not None:
            state.asked = time.perf_counter()
            self._event(state, "dsh.tool.approval.requested", _reason(ask.reason))

    def on_approval(self, execution: ToolExecution, ask: Any, answer: str) -> None:
        # The approval service answered (before the answer takes effect):
        # the answer, and how long it took since the request. Or a decision
        # given at resume (its pre-execute waterfall ran in the batch that
        # deferred it): the resumed call's span starts here.
        state = self._mine(execution)
        if state is None:
            state = self._begin(execution)
        attributes: dict[str, Any] = {"dsh.answer": answer}
        asked = state.asked
        if asked is not None:
            state.asked = None
            attributes["dsh.approval.duration"] = time.perf_counter() - asked
        if answer not in _GOES_ON:
            state.denied = True  # (the call's denial: this answer says why)
        self._event(state, "dsh.tool.approval.answered", attributes)

    def guard(self, execution: ToolExecution) -> None:
        # Guards run only once the call is allowed (an approval answered
        # first): from here, a failure without a code is a block.
        state = self._mine(execution)
        if state is not None:
            state.cleared = True
        return None

    def on_deferred(self, execution: ToolExecution, ask: Any) -> None:
        state = self._mine(execution)
        if state is None:
            return
        self._state.set(None)  # (the call's context: a tools/result after an abort gets a span of its own)
        if not self._take(state):
            return
        span = state.span
        span.add_event("dsh.tool.approval.deferred", _reason(getattr(ask, "reason", None)))
        span.end()

    def on_result(self, execution: ToolExecution, result: Any) -> None:
        state = self._mine(execution)
        if state is None:  # no phase ran (aborted before it started, bad arguments), or it ran until deferred
            # (Deferred, then aborted: parented as its first span was, not on
            # that one; a nested call, on this policy's span of its enclosing call.)
            state = self._start(execution, self._layer(execution).parent(self, self._set_span, self._get_span))
        if not self._take(state):
            return  # ended by the disposer meanwhile
        span = state.span
        if type(result) is ToolExecutionFailure:
            error = result.error
            info = error.info
            code = OTHER_ERROR if info is None else str(info.code)
            exc = error.exception
            if code in _ABORTED:
                if not state.aborted:
                    span.add_event("dsh.tool.aborted", {"dsh.code": code})
            elif code == _TIMEOUT:
                span.add_event("dsh.tool.timeout", {})
            elif info is None and not state.denied:
                # Decided where this policy's listeners did not see it: before
                # its guard, an earlier guard, the pipeline (an Ask no one
                # could be asked: no service, no agent; a nested call's
                # deferral); after it, a
                # post-execute Block (or a later guard).
                span.add_event(
                    "dsh.tool.blocked" if state.cleared else "dsh.tool.denied", {"dsh.reason": error.message}
                )
            if exc is not None and is_fault(exc):
                span.record_exception(exc)
            attributes = {
                "gen_ai.operation.name": OPERATION,
                "gen_ai.tool.name": counted_name(execution, OTHER_TOOL, code),
                "gen_ai.tool.type": TOOL_TYPE,
                "error.type": code,
            }
            span.set_attribute("error.type", code)
            span.set_status(self._error(self._error_code, error.message))
            if self._capture:
                span.set_attribute("gen_ai.tool.call.result", _content_text(result))
        else:
            attributes = state.tool.ok
            if self._capture and type(result) is ToolExecutionSuccess:
                span.set_attribute("gen_ai.tool.call.result", _json_text(result.value))
        try:
            span.end()
        finally:  # (a span processor that raises loses no duration)
            self._duration.record(time.perf_counter() - state.start, attributes)


#: The duration histogram made on each meter provider.
_HISTOGRAMS: Final[PerProvider[Any]] = PerProvider()


def _end_as_disposed(state: _CallSpan) -> None:
    """End a call's span that the policy's disposal took out (its
    tools/result will not reach the policy)."""
    state.span.add_event("dsh.policy.disposed", {})
    state.span.end()


def _duration_histogram(meter_provider: Any) -> Any:
    """The ``gen_ai.execute_tool.duration`` histogram of ``meter_provider``,
    made at its first use."""
    return _HISTOGRAMS.of(
        meter_provider,
        lambda: meter_provider.get_meter(__name__).create_histogram(
            DURATION_METRIC,
            unit="s",
            description="Duration of tool executions (dsh-actors calls).",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        ),
    )


def _reason(reason: Any) -> dict[str, Any]:
    return {"dsh.reason": reason} if type(reason) is str else {}


def _json_text(value: Any) -> str:
    try:
        return str(dumps(thaw(value)).decode("utf-8"))
    except Exception:  # noqa: BLE001 - (not expected: arguments and values are materialized JSON)
        return repr(value)


def _content_text(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


def apply(
    rt: ToolRuntime,
    /,
    *,
    tracer_provider: Any = None,
    capture_content: bool = False,
    meter_provider: Any = None,
    **unknown: Any,
) -> Callable[[], None]:
    """Install the OpenTelemetry policy on ``rt``; return its disposer.

    ``tracer_provider`` / ``meter_provider``: where spans and the duration
    histogram go (None: OpenTelemetry's global providers).
    ``capture_content``: record arguments and results on the spans.
    ``rt`` must be started (the policy registers a guard).
    """
    check_runtime(_POLICY, rt)
    check_no_unknown(_POLICY, unknown, "tracer_provider", "capture_content", "meter_provider")
    check_bool(_POLICY, "capture_content", capture_content)
    for name, provider, method in (
        ("tracer_provider", tracer_provider, "get_tracer"),
        ("meter_provider", meter_provider, "get_meter"),
    ):
        if provider is not None and not callable(getattr(provider, method, None)):
            raise InvalidTypeError(
                f"{_POLICY}: {name} must be an OpenTelemetry provider (with {method}()) or None, "
                f"not {type(provider).__qualname__}"
            )
    try:
        tools = rt.tools  # (where its guard goes: checked before anything is subscribed)
    except InvalidStateError as exc:
        raise InvalidStateError(
            f"{_POLICY} registers a guard, which needs a started runtime: apply it after rt.start() "
            "(or inside `with ToolRuntime() as rt:`)"
        ) from exc
    try:
        policy = OtelPolicy(rt, tracer_provider, meter_provider, capture_content)
    except ImportError as exc:
        raise InvalidStateError(
            f"{_POLICY} needs OpenTelemetry: install the otel extra (pip install 'dsh-actors[otel]')"
        ) from exc
    for other in applied(rt, "tools/result", OtelPolicy):
        shared = policy.shared_provider(other)
        if shared is not None:
            twice = "a second span" if shared == "tracer_provider" else "its duration recorded twice"
            raise InvalidStateError(
                f"{_POLICY}: it is applied to this runtime already with the same {shared} (None is OpenTelemetry's "
                f"global one), where each call would get {twice}; dispose that one first, or pass another {shared}"
            )
    undo = Undo()
    undo.add(policy.close)  # (steps undo last first: its listeners are gone by then)
    events = rt.events
    try:
        undo.add(rt.on_stop(policy.runtime_stopping, last=True))
        undo.add(events.on("tools/pre-execute", policy.pre_execute, prepend=True))
        undo.add(events.on("tools/result", policy.on_result, prepend=True))
        undo.add(events.on("tools/deferred", policy.on_deferred, prepend=True))
        undo.add(events.on("tools/approval-request", policy.on_request, prepend=True))
        undo.add(events.on("tools/approval", policy.on_approval, prepend=True))
        undo.add(events.on("tools/change", policy._forget_tools))
        undo.add(tools.guard(policy.guard))
    except BaseException:  # (the runtime began to stop meanwhile: nothing is left subscribed)
        undo()
        raise
    return undo
