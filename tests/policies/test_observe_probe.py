"""policies.otel edge cases found by probing: span parentage with several
policies applied at once and after a deferral, and a span processor that
raises. Against the OpenTelemetry SDK (in-memory exporter and reader)."""

from __future__ import annotations

import json
from typing import Any

from opentelemetry.sdk.trace import SpanProcessor
from otel_helpers import Otel

import policies
from dsh_actors import ToolBatchInput, ToolCall, ToolOutput, define_tool, text

WAIT = 10.0


def tool(name: str = "lookup", execute: Any = None) -> Any:
    return define_tool(
        name=name,
        description=f"The {name} tool.",
        parameters={"q": {"type": "string"}},
        output=ToolOutput(schema={"type": "json"}, render=lambda a, v: [text(json.dumps(v))]),
        execute=execute or (lambda args, ctx: {"answer": 42}),
        is_concurrency_safe=lambda args: True,
    )


def use(rt: Any, otel: Otel) -> None:
    rt.use(policies.otel, tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider)


def test_two_policies_applied_at_once_each_parent_their_spans_on_the_callers_span(rt: Any, otel: Otel) -> None:
    # (The first applied's span was a child of the second's, a span of
    # another provider, and a nested call's under the other's too.)
    other = Otel()
    try:
        rt.tools.register(tool("inner"))

        def outer(args: Any, ctx: Any) -> Any:
            rt.tools.execute(ToolBatchInput(calls=[ToolCall("i1", "inner", "{}")]))
            return {}

        rt.tools.register(tool("outer", outer))
        use(rt, otel)
        use(rt, other)
        with otel.tracer.start_as_current_span("agent step") as step:
            rt.tools.execute(ToolBatchInput(calls=[ToolCall("o1", "outer", "{}")]))
        for each in (otel, other):
            spans = each.by_id()
            [o1], [i1] = spans["o1"], spans["i1"]
            assert o1.parent.span_id == step.get_span_context().span_id
            assert i1.parent.span_id == o1.context.span_id
    finally:
        other.shutdown()


def test_a_span_processor_that_raises_loses_no_duration(rt: Any, otel: Otel) -> None:
    class Raising(SpanProcessor):
        def on_end(self, span: Any) -> None:
            raise RuntimeError("exporter down")

    otel.tracer_provider.add_span_processor(Raising())
    rt.tools.register(tool())
    use(rt, otel)
    result = rt.tools.execute(ToolBatchInput(calls=[ToolCall("c1", "lookup", "{}")]))
    assert not result.results[0].result.is_error
    assert len(otel.by_id()["c1"]) == 1
    assert [count for _, count in otel.durations()] == [1]


def test_a_span_processor_that_raises_as_a_span_starts_does_not_fail_the_call(
    rt: Any, otel: Otel, log_records: Any
) -> None:
    # (The call failed POLICY_FAILED, "tools/pre-execute: exporter down"
    # shown to the model, for the tracer provider's failure.)
    class Raising(SpanProcessor):
        def on_start(self, span: Any, parent_context: Any = None) -> None:
            if span.name.startswith("execute_tool"):
                raise RuntimeError("exporter down")

    otel.tracer_provider.add_span_processor(Raising())
    inner: list[Any] = []

    def body(args: Any, ctx: Any) -> Any:
        with otel.tracer.start_as_current_span("inside the body") as span:
            inner.append(span)
        return {"answer": 42}

    rt.tools.register(tool(execute=body))
    use(rt, otel)
    warnings = log_records("WARNING")
    with otel.tracer.start_as_current_span("agent step") as step:
        result = rt.tools.execute(ToolBatchInput(calls=[ToolCall("c1", "lookup", "{}")]))
    assert not result.results[0].result.is_error, result
    assert otel.by_id() == {}  # (no span, and still timed)
    assert [count for _, count in otel.durations()] == [1]
    [body_span] = otel.spans("inside the body")  # (under the span the call's would have had as parent)
    assert body_span.parent.span_id == step.get_span_context().span_id
    [warning] = [r for r in warnings.items if r["name"] == "policies.otel"]
    assert "starting the span of call c1 raised" in warning["message"]
    assert warning["exception"].value.args == ("exporter down",)
