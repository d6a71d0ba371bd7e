"""policies.otel against the OpenTelemetry SDK (in-memory span exporter and
metric reader): one ``execute_tool`` span per call after the GenAI
semantic conventions, parented on the span current at submission, PTC
sub-calls under their ``run_code`` span, content only when asked, events
for denials, approvals, aborts and timeouts, and the duration histogram."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import pytest
from opentelemetry.trace import SpanKind, StatusCode
from otel_helpers import Otel
from policy_helpers import SETTLED_BEFORE_DISPATCH, listener_lists, settle_before_dispatch
from scheduling.helpers import assert_no_new_threads, live_threads

import policies
import policies.timeout
from dsh_actors import (
    AbortController,
    AbortSignal,
    Agent,
    Allow,
    Ask,
    Block,
    Deny,
    NativeExecutor,
    ToolArgsError,
    ToolBatchExecutionError,
    ToolBatchInput,
    ToolCall,
    ToolExecutionInput,
    ToolOutput,
    ToolRuntime,
    define_tool,
    text,
)
from executors.ptc import PtcExecutor

WAIT = 10.0


def tool(name: str = "lookup", execute: Any = None, **options: Any) -> Any:
    return define_tool(
        name=name,
        description=f"The {name} tool.",
        parameters={"q": {"type": "string"}},
        output=ToolOutput(schema={"type": "json"}, render=lambda a, v: [text(json.dumps(v))]),
        execute=execute or (lambda args, ctx: {"answer": 42}),
        is_concurrency_safe=lambda args: True,
        **options,
    )


def use(rt: Any, otel: Otel, **config: Any) -> None:
    rt.use(policies.otel, tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider, **config)


def run(rt: Any, *calls: ToolCall, **batch: Any) -> Any:
    return rt.tools.execute(ToolBatchInput(calls=list(calls), **batch))


def point(tool: str, error: str | None = None) -> dict[str, Any]:
    """The attributes of a duration histogram point of ``tool`` (``error``: its error.type)."""
    attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool, "gen_ai.tool.type": "function"}
    if error is not None:
        attributes["error.type"] = error
    return attributes


def test_each_call_is_an_execute_tool_span_under_the_span_current_at_submission(rt: Any, otel: Otel) -> None:
    rt.tools.register(tool())
    use(rt, otel)
    with otel.tracer.start_as_current_span("agent step") as step:
        run(rt, *(ToolCall(f"c{i}", "lookup", '{"q": "x"}') for i in range(3)))
    spans = otel.tool_spans()
    assert sorted(s.attributes["gen_ai.tool.call.id"] for s in spans) == ["c0", "c1", "c2"]
    for span in spans:
        assert span.name == "execute_tool lookup"
        assert span.kind is SpanKind.INTERNAL
        assert span.parent is not None and span.parent.span_id == step.get_span_context().span_id
        assert span.context.trace_id == step.get_span_context().trace_id
        assert dict(span.attributes) == {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "lookup",
            "gen_ai.tool.call.id": span.attributes["gen_ai.tool.call.id"],
            "gen_ai.tool.type": "function",
            "gen_ai.tool.description": "The lookup tool.",
        }
        assert span.status.status_code is StatusCode.UNSET


def test_async_bodies_under_execute_async_nest_under_the_awaiting_tasks_span(rt: Any, otel: Otel) -> None:
    inner: list[Any] = []

    async def body(args: Any, ctx: Any) -> Any:
        with otel.tracer.start_as_current_span("inside the body") as span:
            inner.append(span)
        return {"ok": True}

    rt.tools.register(tool("fetch", body))
    use(rt, otel)

    async def main() -> Any:
        with otel.tracer.start_as_current_span("agent step"):
            return await rt.tools.execute_async(ToolBatchInput(calls=[ToolCall("a", "fetch", "{}")]))

    asyncio.run(main())
    [step] = otel.spans("agent step")
    [call] = otel.tool_spans()
    [body_span] = otel.spans("inside the body")
    assert call.parent.span_id == step.context.span_id
    assert body_span.parent.span_id == call.context.span_id


def test_a_failure_sets_error_type_and_status_and_records_the_exception(rt: Any, otel: Otel) -> None:
    def explode(args: Any, ctx: Any) -> Any:
        raise KeyError("missing")

    rt.tools.register(tool("explode", explode))
    use(rt, otel)
    run(rt, ToolCall("c1", "explode", "{}"))
    [span] = otel.tool_spans()
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes["error.type"] == "TOOL_FAILED"
    [event] = [e for e in span.events if e.name == "exception"]
    assert event.attributes["exception.type"] == "KeyError"


#: Failures by what ended them: (call, error.type, a fault: an exception
#: event and an ERROR log line, or an outcome: neither).
FAILURES = {
    "a body raised": ("raises", "{}", "TOOL_FAILED", True),
    "a hook raised": ("hooked", "{}", "POLICY_FAILED", True),
    "arguments not JSON": ("lookup", "{nope", "INVALID_ARGS", False),
    "arguments the schema refuses": ("lookup", '{"q": 1}', "INVALID_ARGS", False),
    "a body's AbortError": ("aborting", "{}", "ABORTED", False),
    # (The tool's own code raising ToolArgsError is its fault, not the model's.)
    "a body raised ToolArgsError": ("refuses", "{}", "INVALID_ARGS", True),
    "aborted before dispatch": ("lookup", "{}", "ABORTED_BEFORE_DISPATCH", False),
}


@pytest.mark.parametrize("how", FAILURES)
def test_only_a_fault_is_an_exception_event_as_only_a_fault_is_logged(
    rt: Any, otel: Otel, log_records: Any, how: str
) -> None:
    # (The model's bad arguments and a body's AbortError were recorded as
    # exceptions, with the library's frames: outcomes, not faults, which
    # the library's logging does not log either.)
    name, arguments, code, fault = FAILURES[how]
    started = threading.Event()

    def raises(args: Any, ctx: Any) -> Any:
        raise KeyError("missing")

    def refuses(args: Any, ctx: Any) -> Any:
        raise ToolArgsError("the tool's own check")

    def aborting(args: Any, ctx: Any) -> Any:
        started.set()
        ctx.signal.wait(WAIT)
        ctx.signal.throw_if_aborted()
        return {}

    def hook(execution: Any, next_: Any) -> Any:
        if execution.name == "hooked":
            raise LookupError("hook broke")
        return next_()

    for each in (tool(), tool("raises", raises), tool("hooked"), tool("aborting", aborting), tool("refuses", refuses)):
        rt.tools.register(each)
    rt.events.on("tools/pre-execute", hook)
    use(rt, otel)
    errors = log_records("ERROR")
    controller = AbortController()
    if code == "ABORTED_BEFORE_DISPATCH":
        controller.abort()
    future = rt.tools.submit(ToolBatchInput(calls=[ToolCall("c1", name, arguments)], signal=controller.signal))
    if name == "aborting":
        assert started.wait(WAIT)
        controller.abort()
    [outcome] = future.result(WAIT).results
    assert outcome.result.error.info.code == code
    [span] = otel.tool_spans()
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes["error.type"] == code
    assert [e.name for e in span.events if e.name == "exception"] == (["exception"] if fault else [])
    assert bool(errors.items) is fault  # (the one rule: dsh_actors.is_fault)


def test_content_is_recorded_only_when_asked(rt: Any, otel: Otel) -> None:
    rt.tools.register(tool())
    use(rt, otel)
    run(rt, ToolCall("quiet", "lookup", '{"q": "secret"}'))
    [quiet] = otel.tool_spans()
    assert "gen_ai.tool.call.arguments" not in quiet.attributes
    assert "gen_ai.tool.call.result" not in quiet.attributes


def test_capture_content_records_arguments_and_results(rt: Any, otel: Otel) -> None:
    rt.tools.register(tool())
    use(rt, otel, capture_content=True)
    run(rt, ToolCall("loud", "lookup", '{"q": "x"}'))
    [span] = otel.tool_spans()
    assert json.loads(span.attributes["gen_ai.tool.call.arguments"]) == {"q": "x"}
    assert json.loads(span.attributes["gen_ai.tool.call.result"]) == {"answer": 42}


@pytest.mark.parametrize("sent", ["{nope", '"{\\"q\\": \\"x\\"}"'], ids=["not JSON", "a JSON string"])
def test_capture_content_records_arguments_that_did_not_parse_as_the_model_sent_them(
    rt: Any, otel: Otel, sent: str
) -> None:
    # (They were recorded as a JSON string holding the text, '"{nope"': the
    # pipeline keeps text that did not parse as the str sent.)
    rt.tools.register(tool())
    use(rt, otel, capture_content=True)
    run(rt, ToolCall("bad", "lookup", sent))
    [span] = otel.tool_spans()
    assert span.attributes["error.type"] == "INVALID_ARGS"
    assert span.attributes["gen_ai.tool.call.arguments"] == sent


def events(span: Any) -> list[tuple[str, dict[str, Any]]]:
    return [(e.name, dict(e.attributes)) for e in span.events]


def test_a_pre_execute_denial_is_an_event(rt: Any, otel: Otel) -> None:
    rt.tools.register(tool())
    rt.events.on("tools/pre-execute", lambda execution, next: Deny("not today"))
    use(rt, otel)
    run(rt, ToolCall("c1", "lookup", "{}"))
    [span] = otel.tool_spans()
    assert events(span) == [("dsh.tool.denied", {"dsh.reason": "not today"})]
    assert span.attributes["error.type"] == "_OTHER"


def test_a_guard_denial_is_an_event(rt: Any, otel: Otel) -> None:
    rt.tools.register(tool())
    rt.tools.guard(lambda execution: "outside the sandbox")  # (guards run in registration order)
    use(rt, otel)
    run(rt, ToolCall("c1", "lookup", "{}"))
    [span] = otel.tool_spans()
    assert events(span) == [("dsh.tool.denied", {"dsh.reason": "outside the sandbox"})]


def untimed(span: Any) -> list[tuple[str, dict[str, Any]]]:
    """``events(span)``, each approval answer's ``dsh.approval.duration``
    checked (seconds, a float) and left out."""
    out = events(span)
    for name, attributes in out:
        if name == "dsh.tool.approval.answered":
            took = attributes.pop("dsh.approval.duration")
            assert type(took) is float and took >= 0.0
    return out


def _deliberate(took: list[float]) -> None:
    """Take at least a millisecond by the clock (spinning: no sleep, so the
    time is the service's own however loaded the machine), and append how
    long it took to ``took``."""
    start = time.perf_counter()
    while time.perf_counter() - start < 0.001:
        pass
    took.append(time.perf_counter() - start)


def timed_service(answer: str, kind: str, took: list[float]) -> Any:
    """An approval service (sync or ``async def``) that answers ``answer``
    after deliberating at least a millisecond, appending to ``took`` how
    long it took by its own clock (the answer event's duration covers at
    least that)."""
    if kind == "sync":

        def service(request: Any) -> str:
            _deliberate(took)
            return answer

        return service

    async def async_service(request: Any) -> str:
        _deliberate(took)  # (awaited on the batch's loop)
        return answer

    return async_service


SERVICE_KINDS = ("sync", "async")


@pytest.mark.parametrize("kind", SERVICE_KINDS)
@pytest.mark.parametrize("answer", ["allowed-once", "rejected", "cancelled", "unavailable"])
def test_an_approval_is_requested_and_answered_with_the_answer_and_how_long_it_took(
    rt: Any, otel: Otel, answer: str, kind: str
) -> None:
    """The request is an event at the time the call asked; the service's
    answer (``tools/approval``) is one, the answer itself (a denial named as
    the person gave it, not a generic one), with the seconds since the
    request; a denying answer is the call's only denial event."""
    rt.tools.register(tool())
    rt.events.on("tools/pre-execute", lambda execution, next: Ask(reason="writes files"))
    took: list[float] = []
    rt.approvals.set(timed_service(answer, kind, took))
    use(rt, otel)
    [outcome] = run(rt, ToolCall("c1", "lookup", "{}"), agent=Agent("main")).results
    [span] = otel.tool_spans()
    requested, answered = span.events
    assert (requested.name, dict(requested.attributes)) == (
        "dsh.tool.approval.requested",
        {"dsh.reason": "writes files"},
    )
    assert answered.name == "dsh.tool.approval.answered"
    assert set(answered.attributes) == {"dsh.answer", "dsh.approval.duration"}
    assert answered.attributes["dsh.answer"] == answer
    [service_took] = took
    assert service_took <= answered.attributes["dsh.approval.duration"]
    assert requested.timestamp <= answered.timestamp
    if answer == "allowed-once":
        assert span.status.status_code is StatusCode.UNSET and "error.type" not in span.attributes
    else:
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description == outcome.result.error.message
        assert span.attributes["error.type"] == "_OTHER"


@pytest.mark.parametrize("turn", ["allow into ask", "ask into allow"])
def test_the_request_is_the_one_the_pipeline_makes_whichever_listener_decided(rt: Any, otel: Otel, turn: str) -> None:
    """A listener subscribed after the policy (outside its own) turns the
    decision around: the span records the question the pipeline asked
    (``tools/approval-request``), not the one the policy's listener saw."""
    rt.tools.register(tool())
    use(rt, otel)
    asks = turn == "allow into ask"
    if not asks:
        rt.events.on("tools/pre-execute", lambda execution, next_: Ask(reason="inner"))

    def outer(execution: Any, next_: Any) -> Any:
        next_()
        return Ask(reason="outer") if asks else Allow()

    rt.events.on("tools/pre-execute", outer, prepend=True)
    rt.approvals.set(lambda request: "allowed-once")
    [outcome] = run(rt, ToolCall("c1", "lookup", "{}"), agent=Agent("main")).results
    assert not outcome.result.is_error
    [span] = otel.tool_spans()
    expected = [
        ("dsh.tool.approval.requested", {"dsh.reason": "outer"}),
        ("dsh.tool.approval.answered", {"dsh.answer": "allowed-once"}),
    ]
    assert untimed(span) == (expected if asks else [])


def test_an_approval_a_guard_then_overrides_keeps_its_answer_and_the_guard_s_denial(rt: Any, otel: Otel) -> None:
    """The person allowed the call; a guard that runs before this policy's
    denied it: the span says both, not that the person denied it."""
    rt.tools.register(tool())
    rt.events.on("tools/pre-execute", lambda execution, next: Ask(reason="writes files"))
    rt.approvals.set(lambda request: "allowed-once")
    rt.tools.guard(lambda execution: "outside the sandbox")  # (guards run in registration order)
    use(rt, otel)
    run(rt, ToolCall("c1", "lookup", "{}"), agent=Agent("main"))
    [span] = otel.tool_spans()
    assert untimed(span) == [
        ("dsh.tool.approval.requested", {"dsh.reason": "writes files"}),
        ("dsh.tool.approval.answered", {"dsh.answer": "allowed-once"}),
        ("dsh.tool.denied", {"dsh.reason": "outside the sandbox"}),
    ]


@pytest.mark.parametrize("missing", ["service", "agent"])
def test_an_ask_no_one_could_be_asked_about_is_a_denial_not_an_answer(rt: Any, otel: Otel, missing: str) -> None:
    rt.tools.register(tool())
    rt.events.on("tools/pre-execute", lambda execution, next: Ask())
    if missing == "agent":
        rt.approvals.set(lambda request: "allowed-once")
    use(rt, otel)
    [outcome] = run(rt, ToolCall("c1", "lookup", "{}"), agent=None if missing == "agent" else Agent("main")).results
    [span] = otel.tool_spans()
    assert events(span) == [
        ("dsh.tool.approval.requested", {}),
        ("dsh.tool.denied", {"dsh.reason": outcome.result.error.message}),
    ]


def test_a_nested_call_s_deferral_is_answered_then_denied(rt: Any, otel: Otel) -> None:
    """A nested call (``rt.tools.dispatch``) cannot wait for a decision: the
    service's ``"deferred"`` is its answer, and the pipeline's refusal the
    denial."""
    rt.tools.register(tool())
    rt.events.on("tools/pre-execute", lambda execution, next: Ask(reason="writes files"))
    rt.approvals.set(lambda request: "deferred")
    use(rt, otel)
    outcome = rt.tools.dispatch(
        ToolExecutionInput(call_id="n1", name="lookup", arguments={}, agent=Agent("main"), signal=AbortSignal())
    )
    [span] = otel.tool_spans()
    assert untimed(span) == [
        ("dsh.tool.approval.requested", {"dsh.reason": "writes files"}),
        ("dsh.tool.approval.answered", {"dsh.answer": "deferred"}),
        ("dsh.tool.denied", {"dsh.reason": outcome.error.message}),
    ]


def test_an_approval_service_that_fails_gives_no_answer(rt: Any, otel: Otel) -> None:
    def service(request: Any) -> str:
        raise RuntimeError("the prompt crashed")

    rt.tools.register(tool())
    rt.events.on("tools/pre-execute", lambda execution, next: Ask(reason="writes files"))
    rt.approvals.set(service)
    use(rt, otel)
    run(rt, ToolCall("c1", "lookup", "{}"), agent=Agent("main"))
    [span] = otel.tool_spans()
    assert [name for name, _ in events(span)] == ["dsh.tool.approval.requested", "exception"]
    assert span.attributes["error.type"] == "POLICY_FAILED"


@pytest.mark.parametrize("kind", SERVICE_KINDS)
def test_a_deferred_approval_ends_the_span_and_the_resumed_call_gets_its_own(rt: Any, otel: Otel, kind: str) -> None:
    rt.tools.register(tool())
    rt.events.on("tools/pre-execute", lambda execution, next: Ask(reason="writes files"))
    took: list[float] = []
    rt.approvals.set(timed_service("deferred", kind, took))
    use(rt, otel)
    suspended = run(rt, ToolCall("c1", "lookup", "{}"), agent=Agent("main"))
    assert suspended.pending == ("c1",)
    [waiting] = otel.tool_spans()  # ended when the batch suspended, not left open
    answer = waiting.events[1]
    assert took[0] <= answer.attributes["dsh.approval.duration"]  # (the wait until the deferral)
    assert untimed(waiting) == [
        ("dsh.tool.approval.requested", {"dsh.reason": "writes files"}),
        ("dsh.tool.approval.answered", {"dsh.answer": "deferred"}),
        ("dsh.tool.approval.deferred", {"dsh.reason": "writes files"}),
    ]
    assert waiting.status.status_code is StatusCode.UNSET
    assert otel.durations() == []  # the call has not finished: no duration yet
    rt.tools.resume(suspended.suspension, {"c1": "allowed-once"})
    first, resumed = otel.tool_spans()
    assert first is waiting or first.context.span_id == waiting.context.span_id
    assert resumed.attributes["gen_ai.tool.call.id"] == "c1"
    assert "error.type" not in resumed.attributes
    assert [count for _, count in otel.durations()] == [1]
    # From the resume's decision (tools/approval) to tools/result: the body
    # inside it. How long the person took is not known here.
    assert events(resumed) == [("dsh.tool.approval.answered", {"dsh.answer": "allowed-once"})]


@pytest.mark.parametrize(
    ("decision", "message"),
    [("rejected", 'the user rejected tool "lookup"'), ("cancelled", 'approval for tool "lookup" was cancelled')],
)
def test_a_denial_given_at_resume_is_a_denied_span_of_its_own(rt: Any, otel: Otel, decision: str, message: str) -> None:
    """The decision given at resume is the answer (``tools/approval``): the
    resumed call's span shows it, and its status the denial's message."""
    rt.tools.register(tool())
    rt.events.on("tools/pre-execute", lambda execution, next: Ask(reason="writes files"))
    rt.approvals.set(lambda request: "deferred")
    use(rt, otel)
    suspended = run(rt, ToolCall("c1", "lookup", "{}"), agent=Agent("main"))
    rt.tools.resume(suspended.suspension, {"c1": decision})
    waiting, resumed = otel.tool_spans()
    assert events(waiting)[-1][0] == "dsh.tool.approval.deferred"
    assert events(resumed) == [("dsh.tool.approval.answered", {"dsh.answer": decision})]
    assert resumed.attributes["error.type"] == "_OTHER" and resumed.status.description == message


def test_a_resumed_call_s_span_and_duration_cover_its_body(rt: Any, otel: Otel) -> None:
    inside: list[Any] = []

    def body(args: Any, ctx: Any) -> Any:
        with otel.tracer.start_as_current_span("inside the body"):
            inside.append(True)
        return {"answer": 42}

    rt.tools.register(tool(execute=body))
    rt.events.on("tools/pre-execute", lambda execution, next: Ask(reason="writes files"))
    rt.approvals.set(lambda request: "deferred")
    use(rt, otel)
    suspended = run(rt, ToolCall("c1", "lookup", "{}"), agent=Agent("main"))
    rt.tools.resume(suspended.suspension, {"c1": "allowed-once"})
    [child] = otel.spans("inside the body")
    resumed = otel.tool_spans()[-1]
    assert child.parent is not None and child.parent.span_id == resumed.context.span_id
    assert resumed.start_time <= child.start_time and child.end_time <= resumed.end_time


def test_an_abort_of_a_deferred_call_ends_in_a_span_of_its_own(rt: Any, otel: Otel) -> None:
    rt.tools.register(tool())
    rt.tools.register(tool("slow", lambda args, ctx: ctx.signal.wait(WAIT) and {}))
    rt.events.on(
        "tools/pre-execute", lambda execution, next: Ask(reason="writes") if execution.name == "lookup" else next()
    )
    rt.approvals.set(lambda request: "deferred")
    use(rt, otel)
    controller = AbortController()
    # c0 is deferred while c1 runs; the abort ends both.
    deferred = threading.Event()
    rt.events.on("tools/deferred", lambda execution, ask: deferred.set())
    with otel.tracer.start_as_current_span("agent step") as step:
        future = rt.tools.submit(
            ToolBatchInput(
                calls=[ToolCall("c0", "lookup", "{}"), ToolCall("c1", "slow", "{}")],
                agent=Agent("main"),
                signal=controller.signal,
            )
        )
    assert deferred.wait(WAIT)
    controller.abort()
    result = future.result(WAIT)
    assert result.pending == ()
    by_id: dict[str, list[Any]] = {}
    for span in otel.tool_spans():
        by_id.setdefault(span.attributes["gen_ai.tool.call.id"], []).append(span)
    waiting, ended = by_id["c0"]
    assert events(waiting)[-1][0] == "dsh.tool.approval.deferred"
    assert ended.attributes["error.type"] == "ABORTED_BEFORE_DISPATCH"
    # (Its last span was a child of its first, the one the deferral ended:
    # it is parented on the caller's span.)
    assert ended.parent.span_id == step.get_span_context().span_id


def test_an_abort_and_a_timeout_are_events(rt: Any, otel: Otel) -> None:
    started = threading.Event()

    def slow(args: Any, ctx: Any) -> Any:
        started.set()
        ctx.signal.wait(WAIT)
        return {}

    rt.tools.register(tool("slow", slow))
    rt.tools.register(tool("deadline", slow, timeout_ms=50))
    rt.use(policies.timeout)
    use(rt, otel)
    controller = AbortController()
    future = rt.tools.submit(ToolBatchInput(calls=[ToolCall("a", "slow", "{}")], signal=controller.signal))
    assert started.wait(WAIT)
    controller.abort()
    future.result(WAIT)
    run(rt, ToolCall("t", "deadline", "{}"))
    by_id = {s.attributes["gen_ai.tool.call.id"]: s for s in otel.tool_spans()}
    assert events(by_id["a"]) == [("dsh.tool.aborted", {"dsh.code": "ABORTED"})]
    assert events(by_id["t"]) == [("dsh.tool.timeout", {})]
    assert by_id["t"].attributes["error.type"] == "TOOL_TIMEOUT"


def test_a_post_execute_block_is_an_event(rt: Any, otel: Otel) -> None:
    rt.tools.register(tool())
    rt.events.on("tools/post-execute", lambda execution, result, next: Block([text("no")]))
    use(rt, otel)
    run(rt, ToolCall("c1", "lookup", "{}"))
    [span] = otel.tool_spans()
    assert events(span) == [("dsh.tool.blocked", {"dsh.reason": "no"})]


def test_a_call_that_runs_no_phase_still_gets_its_span(rt: Any, otel: Otel) -> None:
    use(rt, otel)
    run(rt, ToolCall("bad", "lookup", {"q": float("nan")}))  # (not lossless: no phase runs)
    [span] = otel.tool_spans()
    assert span.attributes["gen_ai.tool.call.id"] == "bad"
    assert span.status.status_code is StatusCode.ERROR


def test_nested_batches_nest_under_the_calling_tools_span(rt: Any, otel: Otel) -> None:
    rt.tools.register(tool("inner"))

    def outer(args: Any, ctx: Any) -> Any:
        rt.tools.execute(ToolBatchInput(calls=[ToolCall("i1", "inner", "{}")]))
        return {}

    rt.tools.register(tool("outer", outer))
    use(rt, otel)
    run(rt, ToolCall("o1", "outer", "{}"))
    by_id = {s.attributes["gen_ai.tool.call.id"]: s for s in otel.tool_spans()}
    assert by_id["i1"].parent.span_id == by_id["o1"].context.span_id


def test_ptc_sub_calls_nest_under_their_run_code_span(rt: Any, otel: Otel) -> None:
    rt.tools.register(tool())
    rt.tools.set_executor(PtcExecutor(timeout_ms=5000))
    use(rt, otel)
    code = "await asyncio.gather(tools.lookup(q='a'), tools.lookup(q='b'))\nreturn 1"
    result = run(rt, ToolCall("r1", "run_code", {"code": code}))
    assert not result.results[0].result.is_error, result
    by_id = {s.attributes["gen_ai.tool.call.id"]: s for s in otel.tool_spans()}
    assert set(by_id) == {"r1", "r1:ptc:1", "r1:ptc:2"}
    for sub in ("r1:ptc:1", "r1:ptc:2"):
        assert by_id[sub].parent.span_id == by_id["r1"].context.span_id


def test_the_duration_histogram_is_per_tool_and_outcome_with_the_tool_type(rt: Any, otel: Otel) -> None:
    # (Its points lacked gen_ai.tool.type, which the conventions recommend
    # there too: the span had it.)
    def explode(args: Any, ctx: Any) -> Any:
        raise ValueError("x")

    rt.tools.register(tool())
    rt.tools.register(tool("explode", explode))
    use(rt, otel)
    run(rt, ToolCall("a", "lookup", "{}"), ToolCall("b", "lookup", "{}"), ToolCall("c", "explode", "{}"))
    points = sorted(otel.durations(), key=lambda p: sorted(p[0].items()))
    assert points == [
        (
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "explode",
                "gen_ai.tool.type": "function",
                "error.type": "TOOL_FAILED",
            },
            1,
        ),
        ({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup", "gen_ai.tool.type": "function"}, 2),
    ]


ADVISED_BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]


def test_the_duration_histogram_has_the_bucket_boundaries_the_conventions_advise(rt: Any, otel: Otel) -> None:
    # (It advised none: the SDK's default boundaries, 0, 5, 10, 25, ...
    # seconds, put every call under 5 s in one bucket.)
    rt.tools.register(tool())
    use(rt, otel)
    run(rt, ToolCall("a", "lookup", "{}"))
    [only] = otel.duration_points()
    assert list(only.explicit_bounds) == ADVISED_BUCKETS


def test_an_application_s_view_replaces_the_advised_bucket_boundaries(rt: Any) -> None:
    from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View

    own = View(instrument_name="gen_ai.execute_tool.duration", aggregation=ExplicitBucketHistogramAggregation([1, 60]))
    otel = Otel(views=[own])
    try:
        rt.tools.register(tool())
        use(rt, otel)
        run(rt, ToolCall("a", "lookup", "{}"))
        [only] = otel.duration_points()
        assert list(only.explicit_bounds) == [1, 60]
    finally:
        otel.shutdown()


def test_disposing_removes_every_listener(rt: Any, otel: Otel) -> None:
    rt.tools.register(tool())
    undo = rt.use(policies.otel, tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider)
    undo()
    run(rt, ToolCall("c1", "lookup", "{}"))
    assert otel.tool_spans() == []


def test_disposing_ends_the_spans_of_the_calls_in_flight(rt: Any, otel: Otel) -> None:
    running, release = threading.Event(), threading.Event()

    def body(args: Any, ctx: Any) -> Any:
        running.set()
        assert release.wait(WAIT)
        return {"answer": 42}

    rt.tools.register(tool(execute=body))
    undo = rt.use(policies.otel, tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider)
    future = rt.tools.submit(ToolBatchInput(calls=[ToolCall("c1", "lookup", "{}")]))
    assert running.wait(WAIT)
    undo()
    [span] = otel.tool_spans()  # ended by the disposer, not left open for good
    assert [name for name, _ in events(span)] == ["dsh.policy.disposed"]
    release.set()
    assert not future.result(WAIT).results[0].result.is_error
    assert len(otel.tool_spans()) == 1 and otel.durations() == []


@pytest.mark.parametrize("stuck_in", ["body", "approval"])
def test_a_stop_ends_once_the_span_of_a_call_it_could_not_wait_for(
    monkeypatch: pytest.MonkeyPatch, otel: Otel, caplog: pytest.LogCaptureFixture, stuck_in: str
) -> None:
    # The batch's own thread is stuck (a lone body run inline, or a sync
    # approval service, ignoring the stop's signal): the stop answers the
    # batch itself and the call settles only when that thread comes back.
    # Its span was left open for good; the stop ends it (a call still
    # unsettled at the stop's deadline), and the late settle adds nothing.
    monkeypatch.setattr(ToolRuntime, "STOP_GRACE", 0.05)
    before = live_threads()
    rt = ToolRuntime().start()
    stuck, release, settled = threading.Event(), threading.Event(), threading.Event()

    def hold() -> None:
        stuck.set()
        assert release.wait(WAIT), "the test to release the stuck thread"  # ignores its signal

    def body(args: Any, ctx: Any) -> Any:
        if stuck_in == "body":
            hold()
        return {"answer": 42}

    def service(request: Any) -> str:
        hold()
        return "allowed-once"

    try:
        rt.tools.register(tool(execute=body))
        if stuck_in == "approval":
            rt.events.on("tools/pre-execute", lambda execution, next: Ask(reason="writes files"))
            rt.approvals.set(service)
        use(rt, otel)
        rt.events.on("tools/result", lambda execution, result: settled.set())
        future = rt.tools.submit(ToolBatchInput(calls=[ToolCall("c1", "lookup", "{}")], agent=Agent("main")))
        assert stuck.wait(WAIT)
        rt.stop(0)
        assert isinstance(future.exception(0), ToolBatchExecutionError)
        assert not settled.is_set()
        [span] = otel.tool_spans()  # ended by the stop, not left open for good
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description == "the runtime stopped before the call settled"
        assert span.attributes["error.type"] == "_OTHER"
        assert [name for name, _ in events(span)][-1] == "dsh.runtime.stopped"
    finally:
        release.set()
    assert settled.wait(WAIT), "the call to settle once its thread came back"
    assert len(otel.tool_spans()) == 1 and otel.durations() == []  # not ended again, no duration
    assert [r.getMessage() for r in caplog.records if r.name.startswith("opentelemetry")] == []
    assert_no_new_threads(before)


def test_calls_the_drain_commits_aborted_at_the_deadline_keep_their_aborted_spans(
    monkeypatch: pytest.MonkeyPatch, otel: Otel
) -> None:
    # Bodies on call actors that ignore the stop's signal past its deadline:
    # the drain commits them ABORTED there (their batch's thread is free),
    # and their spans say so, with their durations; only what is still in
    # flight after the drains ends as dsh.runtime.stopped.
    monkeypatch.setattr(ToolRuntime, "STOP_GRACE", 0.05)
    before = live_threads()
    rt = ToolRuntime().start()
    release = threading.Event()
    running = threading.Barrier(3)

    def body(args: Any, ctx: Any) -> Any:
        running.wait(WAIT)
        assert release.wait(WAIT), "the stop's last hook to release the body"  # ignores its signal
        return {"answer": 42}

    rt.tools.register(tool(execute=body))
    rt.on_stop(release.set, last=True)  # (after the drains, and after the policy's own: registered before it)
    use(rt, otel)
    future = rt.tools.submit(ToolBatchInput(calls=[ToolCall("c1", "lookup", "{}"), ToolCall("c2", "lookup", "{}")]))
    running.wait(WAIT)
    rt.stop(0)
    assert isinstance(future.exception(0), ToolBatchExecutionError)
    spans = otel.tool_spans()
    assert sorted(span.attributes["gen_ai.tool.call.id"] for span in spans) == ["c1", "c2"]
    for span in spans:
        assert span.attributes["error.type"] == "ABORTED"
        assert [name for name, _ in events(span)] == ["dsh.tool.aborted"]
    assert [count for _, count in otel.durations()] == [2]
    assert_no_new_threads(before)


def test_a_call_that_settles_by_the_stop_s_deadline_ends_its_span_itself(rt: Any, otel: Otel) -> None:
    # Only a call still unsettled at the deadline is ended by the stop: one
    # whose body ends on the stop's signal keeps its own outcome and duration.
    running = threading.Event()

    def body(args: Any, ctx: Any) -> Any:
        running.set()
        ctx.signal.wait(WAIT)
        return {"answer": 42}

    rt.tools.register(tool(execute=body))
    use(rt, otel)
    future = rt.tools.submit(ToolBatchInput(calls=[ToolCall("c1", "lookup", "{}")]))
    assert running.wait(WAIT)
    rt.stop(WAIT)
    [outcome] = future.result(0).results
    [span] = otel.tool_spans()
    assert "dsh.runtime.stopped" not in [name for name, _ in events(span)]
    code = outcome.result.error.info.code if outcome.result.is_error else None
    assert span.attributes.get("error.type") == code
    assert [count for _, count in otel.durations()] == [1]


def test_two_policies_applied_at_once_each_keep_their_own_spans(rt: Any, otel: Otel) -> None:
    other = Otel()
    try:
        rt.tools.register(tool())
        use(rt, otel)
        rt.use(policies.otel, tracer_provider=other.tracer_provider, meter_provider=other.meter_provider)
        run(rt, ToolCall("c1", "lookup", "{}"))
        for each in (otel, other):
            [span] = each.tool_spans()
            assert events(span) == [] and span.attributes["gen_ai.tool.call.id"] == "c1"
            assert [count for _, count in each.durations()] == [1]
    finally:
        other.tracer_provider.shutdown()
        other.meter_provider.shutdown()


def test_a_nested_call_that_runs_no_phase_is_under_each_policy_s_own_span_of_its_enclosing_call(
    rt: Any, otel: Otel
) -> None:
    # (Its span was parented on the span current in the enclosing call's
    # body: the last applied policy's, a span of another provider, for the
    # others.)
    other = Otel()
    try:
        rt.tools.register(tool())
        aborted = AbortController()
        aborted.abort("the caller gave up")

        def outer(args: Any, ctx: Any) -> Any:
            nested = ToolExecutionInput(call_id="n1", name="lookup", arguments={"q": "x"}, signal=aborted.signal)
            assert rt.tools.dispatch(nested).error.info.code == "ABORTED_BEFORE_DISPATCH"
            return {}

        rt.tools.register(tool("outer", outer))
        use(rt, otel)
        rt.use(policies.otel, tracer_provider=other.tracer_provider, meter_provider=other.meter_provider)
        run(rt, ToolCall("o1", "outer", "{}"))
        for each in (otel, other):
            spans = each.by_id()
            [o1], [n1] = spans["o1"], spans["n1"]
            assert n1.parent.span_id == o1.context.span_id
    finally:
        other.shutdown()


@pytest.mark.parametrize(
    ("second", "shared"),
    [
        (("mine", "mine"), "tracer_provider"),
        (("mine", "other"), "tracer_provider"),
        (("other", "mine"), "meter_provider"),
        (("global", "global"), "tracer_provider"),
    ],
)
def test_a_second_application_with_a_provider_the_first_uses_is_refused(
    rt: Any, otel: Otel, second: tuple[str, str], shared: str
) -> None:
    # (It was applied: each call got two spans there, or its duration
    # recorded twice.)
    other = Otel()
    try:
        tracers = {"mine": otel.tracer_provider, "other": other.tracer_provider, "global": None}
        meters = {"mine": otel.meter_provider, "other": other.meter_provider, "global": None}
        first = "global" if second == ("global", "global") else "mine"
        undo = rt.use(policies.otel, tracer_provider=tracers[first], meter_provider=meters[first])
        before = listener_lists(rt)
        again = {"tracer_provider": tracers[second[0]], "meter_provider": meters[second[1]]}
        with pytest.raises(
            RuntimeError,
            match=rf"policies.otel: it is applied to this runtime already with the same {shared} .*"
            rf"dispose that one first, or pass another {shared}",
        ):
            rt.use(policies.otel, **again)
        assert listener_lists(rt) == before  # (nothing left subscribed)
        undo()
        rt.use(policies.otel, **again)()  # (once the first is disposed)
    finally:
        other.shutdown()


def test_each_agent_s_own_tool_of_a_name_keeps_its_own_description(rt: Any, otel: Otel) -> None:
    a, b = Agent("a"), Agent("b")
    for agent in (a, b):
        mine = define_tool(
            name="lookup",
            description=f"Looks up in {agent.id}'s notes.",
            parameters={},
            output=ToolOutput(schema={"type": "json"}, render=lambda args, v: [text(json.dumps(v))]),
            execute=lambda args, ctx: 1,
        )
        rt.tools.scope(agent).register(mine)
    use(rt, otel)
    for agent in (a, b, a):
        run(rt, ToolCall(f"{agent.id}1", "lookup", "{}"), agent=agent)
    assert [span.attributes["gen_ai.tool.description"] for span in otel.tool_spans()] == [
        "Looks up in a's notes.",
        "Looks up in b's notes.",
        "Looks up in a's notes.",
    ]


def test_unknown_options_are_refused(rt: Any) -> None:
    with pytest.raises(TypeError, match="unknown option"):
        rt.use(policies.otel, capture=True)


@pytest.mark.parametrize("option", ["tracer_provider", "meter_provider"])
def test_a_provider_that_is_not_one_is_refused_naming_the_option(rt: Any, option: str) -> None:
    with pytest.raises(TypeError, match=rf"policies.otel: {option} must be an OpenTelemetry provider .*, not int"):
        rt.use(policies.otel, **{option: 5})


def _prepared_ahead(rt: Any, otel: Otel, own: bool = False) -> tuple[threading.Event, threading.Event]:
    """``lookup`` whose calls c0 and c1 hold until ``release``, the policy
    on, and an event set once c0 and c1 run and c3 (prepared ahead of a
    free slot at a limit of 2) has passed pre-execute: a change made then
    finds c2 and c3, and only them, prepared and not started. ``own``:
    ``lookup`` is the executor's own tool (as PTC's ``run_code`` is), not a
    registered one."""
    release = threading.Event()
    running = threading.Barrier(3)  # c0's body, c1's body, the listener that saw c3
    ready = threading.Event()

    def body(args: Any, ctx: Any) -> Any:
        if args["q"] in ("0", "1"):
            running.wait(WAIT)
            assert release.wait(WAIT), "the test to release c0 and c1"
        return {"answer": 42}

    def note(execution: Any, next_: Any) -> Any:
        if execution.call_id == "c3" and not ready.is_set():
            running.wait(WAIT)
            ready.set()
        return next_()

    if own:

        class Own(NativeExecutor):
            def executor_tools(self) -> Any:
                return (tool("lookup", body),)

        rt.tools.set_executor(Own())
    else:
        rt.tools.register(tool("lookup", body))
    use(rt, otel)
    rt.events.on("tools/pre-execute", note)
    return release, ready


def _change_while_ahead(
    future: Any, release: threading.Event, ready: threading.Event, change: Any, allowed: threading.Event | None = None
) -> None:
    """Once c0 and c1 run and c3 waits prepared ahead (``_prepared_ahead``)
    (and, given ``allowed``, c3's approval has been answered: the service
    runs on a thread of its own): ``change()``, then release c0 and c1 and
    wait for the batch."""
    try:
        assert ready.wait(WAIT), "c0 and c1 to run and c3 to be prepared ahead"
        assert allowed is None or allowed.wait(WAIT), "c3 to be allowed"
        change()
    finally:
        release.set()
    future.result(WAIT)


def test_a_call_prepared_again_keeps_its_one_span_under_the_span_current_at_submission(rt: Any, otel: Otel) -> None:
    """A registry change while calls wait prepared ahead of a free slot
    prepares them again: each call still has one span, ended, whose parent
    is the span current at submission (not a second span nested in the
    first), with an event saying it was prepared again."""
    release, c3_prepared = _prepared_ahead(rt, otel)
    calls = [ToolCall(f"c{i}", "lookup", json.dumps({"q": str(i)})) for i in range(6)]
    with otel.tracer.start_as_current_span("agent step") as step:
        future = rt.tools.submit(ToolBatchInput(calls=calls, max_parallel_tool_calls=2))
    _change_while_ahead(future, release, c3_prepared, lambda: rt.tools.register(tool("other")))  # c2, c3 again
    spans = otel.tool_spans()
    assert sorted(s.attributes["gen_ai.tool.call.id"] for s in spans) == [f"c{i}" for i in range(6)]
    for span in spans:
        assert span.parent is not None and span.parent.span_id == step.get_span_context().span_id
    again = {
        s.attributes["gen_ai.tool.call.id"] for s in spans if any(e.name == "dsh.tool.prepared_again" for e in s.events)
    }
    assert again == {"c2", "c3"}


def test_a_call_asked_only_when_prepared_again_records_that_question_and_its_answer(rt: Any, otel: Otel) -> None:
    """c2 and c3 were allowed without a question when first prepared; an
    Ask listener added while they wait prepared ahead asks them when they
    are prepared again: the span shows that question and its answer (a
    rejection as an answer, not as a block)."""
    release, c3_prepared = _prepared_ahead(rt, otel)
    rt.approvals.set(lambda request: "rejected" if request.call_id == "c2" else "allowed-once")
    calls = _four_lookups()
    future = rt.tools.submit(ToolBatchInput(calls=calls, agent=Agent("a"), max_parallel_tool_calls=2))
    _change_while_ahead(
        future, release, c3_prepared, lambda: rt.events.on("tools/pre-execute", lambda e, next_: Ask(reason="new rule"))
    )
    events = {s.attributes["gen_ai.tool.call.id"]: untimed(s) for s in otel.tool_spans()}
    assert events["c2"] == [
        ("dsh.tool.prepared_again", {}),
        ("dsh.tool.approval.requested", {"dsh.reason": "new rule"}),
        ("dsh.tool.approval.answered", {"dsh.answer": "rejected"}),
    ]
    assert events["c3"] == [
        ("dsh.tool.prepared_again", {}),
        ("dsh.tool.approval.requested", {"dsh.reason": "new rule"}),
        ("dsh.tool.approval.answered", {"dsh.answer": "allowed-once"}),
    ]


def _four_lookups() -> list[ToolCall]:
    """c0..c3, each a call of ``lookup`` (the tool of ``_prepared_ahead``)."""
    return [ToolCall(f"c{i}", "lookup", json.dumps({"q": str(i)})) for i in range(4)]


def _event_names(otel: Otel) -> dict[str, list[str]]:
    """Each call's span's event names, in order, by call id."""
    return {s.attributes["gen_ai.tool.call.id"]: [e.name for e in s.events] for s in otel.tool_spans()}


def _ask_every_call_and_allow(rt: Any) -> tuple[list[str], threading.Event]:
    """Every call asks (the same Ask), and the approval service allows it:
    the ids of the calls the service was asked about, in order, and an
    event set once c3 has been allowed and passed the guards."""
    asked: list[str] = []
    c3_allowed = threading.Event()

    def service(request: Any) -> str:
        asked.append(request.call_id)
        return "allowed-once"

    def guard(execution: Any) -> None:
        if execution.call_id == "c3":
            c3_allowed.set()

    rt.approvals.set(service)
    rt.events.on("tools/pre-execute", lambda execution, next_: Ask(reason="careful"))
    rt.tools.guard(guard)
    return asked, c3_allowed


def test_a_call_approved_then_its_tool_replaced_records_the_second_question_the_pipeline_asks(
    rt: Any, otel: Otel
) -> None:
    """Every call is asked (the same Ask) and allowed; while c2 and c3 wait
    prepared ahead, their agent's scope shadows ``lookup`` with another
    definition: the approval was about the old one, so the pipeline asks
    again, and the span records both questions and both answers."""
    release, c3_prepared = _prepared_ahead(rt, otel)
    asked, c3_allowed = _ask_every_call_and_allow(rt)
    agent = Agent("a")
    calls = _four_lookups()
    future = rt.tools.submit(ToolBatchInput(calls=calls, agent=agent, max_parallel_tool_calls=2))
    replacement = tool("lookup", lambda args, ctx: {"answer": 43})
    _change_while_ahead(future, release, c3_prepared, lambda: rt.tools.scope(agent).register(replacement), c3_allowed)
    assert sorted(asked) == ["c0", "c1", "c2", "c2", "c3", "c3"]  # c2 and c3 asked about each tool
    assert [r.result.value for r in future.result(WAIT).results] == [{"answer": 42}] * 2 + [{"answer": 43}] * 2
    events = _event_names(otel)
    for call_id in ("c2", "c3"):
        assert events[call_id] == [
            "dsh.tool.approval.requested",
            "dsh.tool.approval.answered",
            "dsh.tool.prepared_again",
            "dsh.tool.approval.requested",
            "dsh.tool.approval.answered",
        ], call_id


@pytest.mark.parametrize("kind", ["registered", "the executor's own"])
def test_a_call_approved_then_prepared_again_records_one_question_as_the_pipeline_asks_one(
    rt: Any, otel: Otel, kind: str
) -> None:
    """Every call is asked (the same Ask) and allowed; a registry change
    while c2 and c3 wait prepared ahead prepares them again: the pipeline
    does not ask again, and the span records one question and one answer,
    then that it was prepared again (the policy observes the pipeline's
    own request, ``tools/approval-request``, whoever provides the tool)."""
    release, c3_prepared = _prepared_ahead(rt, otel, own=kind != "registered")
    asked, c3_allowed = _ask_every_call_and_allow(rt)
    calls = _four_lookups()
    future = rt.tools.submit(ToolBatchInput(calls=calls, agent=Agent("a"), max_parallel_tool_calls=2))
    # (c2, c3 prepared again)
    _change_while_ahead(future, release, c3_prepared, lambda: rt.tools.register(tool("other")), c3_allowed)
    assert sorted(asked) == ["c0", "c1", "c2", "c3"]  # once each
    events = _event_names(otel)
    for call_id in ("c2", "c3"):
        assert events[call_id] == [
            "dsh.tool.approval.requested",
            "dsh.tool.approval.answered",
            "dsh.tool.prepared_again",
        ], call_id


def test_the_description_cache_lets_an_agent_the_application_dropped_go(rt: Any, otel: Otel) -> None:
    # (It held every agent that had called a tool, and its session, until
    # the next tools/change.)
    import gc
    import weakref

    from dsh_actors import Session

    rt.tools.register(tool())
    use(rt, otel)
    agent = Agent("per-request", session=Session())
    run(rt, ToolCall("c1", "lookup", "{}"), agent=agent)
    gone = weakref.ref(agent)
    del agent
    # (The actor that ran the batch keeps its last message until its next:
    # one more batch moves it on.)
    run(rt, ToolCall("c2", "lookup", "{}"))
    gc.collect()
    assert gone() is None


def the_otel_policy(rt: Any) -> Any:
    (policy,) = {getattr(fn, "__self__", None) for fn in rt.events.listeners("tools/result")}
    return policy


def test_the_calls_of_tools_unknown_to_their_agent_share_one_histogram_point(rt: Any, otel: Otel) -> None:
    # (Each name a model made up made an attribute set of the histogram,
    # which the SDK keeps for good and caps, and a cached description.)
    rt.tools.register(tool())
    use(rt, otel)
    run(rt, ToolCall("a", "lookup", "{}"), *[ToolCall(f"u{i}", f"made_up_{i}", "{}") for i in range(3)])

    points = sorted(otel.durations(), key=lambda p: sorted(p[0].items()))
    assert points == [
        (point("_OTHER", "UNKNOWN_TOOL"), 3),
        (point("lookup"), 1),
    ]
    # The spans of made-up names are named by the operation alone (the
    # model's text, of any length, would be a span-name dimension without
    # bound); their attribute keeps the name sent.
    spans = sorted(otel.tool_spans(), key=lambda span: span.attributes["gen_ai.tool.name"])
    assert [(span.name, span.attributes["gen_ai.tool.name"]) for span in spans] == [
        ("execute_tool lookup", "lookup"),
        ("execute_tool", "made_up_0"),
        ("execute_tool", "made_up_1"),
        ("execute_tool", "made_up_2"),
    ]
    assert sorted(the_otel_policy(rt)._global_tools) == ["lookup"]


@pytest.mark.parametrize("how", SETTLED_BEFORE_DISPATCH)
def test_a_made_up_name_settled_before_it_dispatches_has_the_other_tool_name(rt: Any, otel: Otel, how: str) -> None:
    # (Only a call that failed UNKNOWN_TOOL had "_OTHER": one settled before,
    # by arguments that are not JSON, a denial, a cancel, made an attribute
    # set of its own name, for good, however many names a model made up.)
    rt.tools.register(tool())
    use(rt, otel)
    run(rt, ToolCall("a", "lookup", "{}"), settle_before_dispatch(rt, how, "made_up_0", "u0"))

    code = SETTLED_BEFORE_DISPATCH[how] or "_OTHER"
    assert sorted(otel.durations(), key=lambda p: sorted(p[0].items())) == [
        (point("_OTHER", code), 1),
        (point("lookup"), 1),
    ]
    spans = sorted(otel.tool_spans(), key=lambda span: span.attributes["gen_ai.tool.name"])
    assert [(span.name, span.attributes["gen_ai.tool.name"]) for span in spans] == [
        ("execute_tool lookup", "lookup"),
        ("execute_tool", "made_up_0"),
    ]


@pytest.mark.parametrize("own", [False, True], ids=["registered", "executor's own"])
@pytest.mark.parametrize("how", SETTLED_BEFORE_DISPATCH)
def test_a_real_tool_settled_before_it_dispatches_keeps_its_name(rt: Any, otel: Otel, how: str, own: bool) -> None:
    # A tool the agent may run, whoever provides it (an executor's own, as
    # PTC's run_code, is not in the registry: rt.tools.executable says None).
    if own:

        class Own(NativeExecutor):
            def executor_tools(self) -> Any:
                return (tool(),)

        rt.tools.set_executor(Own())
    else:
        rt.tools.register(tool())
    use(rt, otel)
    run(rt, ToolCall("a", "lookup", "{}"), settle_before_dispatch(rt, how, "lookup", "b"))

    code = SETTLED_BEFORE_DISPATCH[how] or "_OTHER"
    assert sorted(otel.durations(), key=lambda p: sorted(p[0].items())) == [
        (point("lookup", code), 1),
        (point("lookup"), 1),
    ]


def test_the_duration_histogram_is_made_once_per_meter_provider(
    rt: Any, otel: Otel, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (Each application asked the provider for a meter again: OpenTelemetry's
    # global proxy provider, the one without a meter_provider before the SDK
    # is set up, keeps each meter it gave for good.)
    from opentelemetry import metrics
    from opentelemetry.sdk.metrics import MeterProvider

    asked: list[str] = []

    class Counting(MeterProvider):
        def get_meter(self, name: str, *args: Any, **kwargs: Any) -> Any:
            asked.append(name)
            return super().get_meter(name, *args, **kwargs)

    provider = Counting()
    monkeypatch.setattr(metrics, "get_meter_provider", lambda: provider)  # the global one
    try:
        for _ in range(3):
            rt.use(policies.otel, tracer_provider=otel.tracer_provider)()
            rt.use(policies.otel, tracer_provider=otel.tracer_provider, meter_provider=provider)()
        assert asked == ["policies.otel"]
    finally:
        provider.shutdown()


def test_a_runtime_not_started_is_refused_naming_the_fix_with_nothing_left_subscribed(otel: Otel) -> None:
    # (Its listeners were subscribed before the guard, which a runtime not
    # started refuses, and were left there.)
    rt = ToolRuntime()
    with pytest.raises(
        RuntimeError,
        match=r"policies.otel registers a guard, which needs a started runtime: apply it after rt.start\(\)",
    ):
        use(rt, otel)
    assert all(listeners == () for listeners in listener_lists(rt).values())


def test_run_code_s_span_has_its_definition_s_description_as_any_tool_s(rt: Any, otel: Otel) -> None:
    # gen_ai.tool.description comes from execution.definition, for an
    # executor's own tool (PTC's run_code) as for a registered one.
    ptc = PtcExecutor(timeout_ms=5000)
    rt.tools.set_executor(ptc)
    use(rt, otel)
    run(rt, ToolCall("r1", "run_code", {"code": "return 1"}))
    [span] = otel.tool_spans()
    [run_code] = ptc.executor_tools()
    assert span.attributes["gen_ai.tool.description"] == run_code.description
    # Another executor's run_code (its guide names its own time limit): no
    # tools/change, yet the span has the new description, not a cached one.
    other = PtcExecutor(timeout_ms=7000)
    rt.tools.set_executor(other)
    run(rt, ToolCall("r2", "run_code", {"code": "return 1"}))
    [other_run_code] = other.executor_tools()
    assert other_run_code.description != run_code.description
    assert otel.tool_spans()[-1].attributes["gen_ai.tool.description"] == other_run_code.description
