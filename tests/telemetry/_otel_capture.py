"""Telemetry captured in memory: the SDK's span exporter and metric reader, never global.

`capture()` makes a Telemetry over an SDK TracerProvider (SimpleSpanProcessor into an
InMemorySpanExporter) and MeterProvider (InMemoryMetricReader), with helpers to read
back spans by name and metric points by attributes. No global provider is ever set.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    NumberDataPoint,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, Sampler

from handrail.telemetry import Telemetry

READ_STAGES = [
    "handrail.lookup",
    "handrail.syntax",
    "handrail.schema",
    "handrail.permission",
    "handrail.business",
    "handrail.authorization",
    "handrail.execute",
    "handrail.shape",
]
"""The stage spans of a read that passes every check, in order."""


@dataclass(frozen=True)
class Point:
    """One metric data point: its attributes, and its sum (counter) or count (histogram)."""

    attributes: Mapping[str, object]
    value: float
    total: float
    """A histogram's sum of recorded values; a counter's value again."""


@dataclass
class Captured:
    telemetry: Telemetry
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    tracers: TracerProvider
    meters: MeterProvider

    def shutdown(self) -> None:
        self.tracers.shutdown()
        self.meters.shutdown()

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [span for span in self.spans() if span.name == name]

    def one(self, name: str) -> ReadableSpan:
        found = self.named(name)
        assert len(found) == 1, [span.name for span in self.spans()]
        return found[0]

    def children(self, parent: ReadableSpan) -> list[ReadableSpan]:
        """Direct children of `parent`, in the order they started."""
        span_id = parent.context.span_id
        kids = [s for s in self.spans() if s.parent is not None and s.parent.span_id == span_id]
        return sorted(kids, key=lambda s: (s.start_time or 0, s.end_time or 0))

    def points(self, metric: str) -> list[Point]:
        data = self.reader.get_metrics_data()
        found: list[Point] = []
        if data is None:
            return found
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for item in scope.metrics:
                    if item.name != metric:
                        continue
                    for point in item.data.data_points:
                        if isinstance(point, HistogramDataPoint):
                            found.append(
                                Point(dict(point.attributes or {}), point.count, point.sum)
                            )
                        elif isinstance(point, NumberDataPoint):
                            value = float(point.value)
                            found.append(Point(dict(point.attributes or {}), value, value))
        return found

    def value(self, metric: str, attributes: Mapping[str, object]) -> float:
        """The count (histogram) or sum (counter) of the point with exactly `attributes`."""
        matching = [p.value for p in self.points(metric) if p.attributes == attributes]
        assert len(matching) <= 1
        return matching[0] if matching else 0.0


def capture(*, sampler: Sampler = ALWAYS_ON, record_summaries: bool = False) -> Captured:
    exporter = InMemorySpanExporter()
    tracers = TracerProvider(sampler=sampler, shutdown_on_exit=False)
    tracers.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    telemetry = Telemetry(
        tracer_provider=tracers, meter_provider=meters, record_summaries=record_summaries
    )
    return Captured(telemetry, exporter, reader, tracers, meters)
