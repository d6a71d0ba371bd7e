"""The OpenTelemetry SDK in memory, for the otel policy's tests: a tracer
provider whose spans an ``InMemorySpanExporter`` keeps, and a meter
provider an ``InMemoryMetricReader`` reads (the ``otel`` fixture)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


class Otel:
    def __init__(self, views: Sequence[Any] = ()) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader], views=views)
        self.tracer = self.tracer_provider.get_tracer("tests")

    def spans(self, name: str | None = None) -> list[Any]:
        spans = list(self.exporter.get_finished_spans())
        return [s for s in spans if name is None or s.name == name]

    def tool_spans(self) -> list[Any]:
        return [s for s in self.spans() if (s.attributes or {}).get("gen_ai.operation.name") == "execute_tool"]

    def by_id(self) -> dict[str, list[Any]]:
        """The tool spans by call id, in the order they ended."""
        out: dict[str, list[Any]] = {}
        for span in self.tool_spans():
            out.setdefault(span.attributes["gen_ai.tool.call.id"], []).append(span)
        return out

    def duration_points(self) -> list[Any]:
        """The ``gen_ai.execute_tool.duration`` histogram's data points."""
        data = self.reader.get_metrics_data()
        out: list[Any] = []
        for resource in () if data is None else data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == "gen_ai.execute_tool.duration":
                        assert metric.unit == "s"
                        out.extend(metric.data.data_points)
        return out

    def durations(self) -> list[tuple[dict[str, Any], int]]:
        return [(dict(point.attributes), point.count) for point in self.duration_points()]

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


@pytest.fixture
def otel() -> Iterator[Otel]:
    o = Otel()
    yield o
    o.shutdown()
