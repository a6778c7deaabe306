"""A Telemetry over the SDK's in-memory exporters, read back by the write-path and loop tests.

`captured()` yields a `Capture`: the `Telemetry` to hand to `Writes`, `Reconciler` or
`AgentLoop`, the finished spans, and the metric points by name and attributes. The
providers are explicit (never the global ones) and shut down when the block ends.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from handrail.telemetry import Telemetry


@dataclass(frozen=True)
class Capture:
    """What a test reads back of the spans and metrics recorded to `telemetry`."""

    telemetry: Telemetry
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader

    def spans(self) -> list[ReadableSpan]:
        """Every finished span, in the order they ended."""
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        """The finished spans called `name`."""
        return [span for span in self.spans() if span.name == name]

    def one(self, name: str) -> ReadableSpan:
        """The one finished span called `name`."""
        (span,) = self.named(name)
        return span

    def children(self, parent: ReadableSpan) -> list[ReadableSpan]:
        """The finished spans whose parent is `parent`."""
        own = parent.context.span_id if parent.context is not None else None
        return [s for s in self.spans() if s.parent is not None and s.parent.span_id == own]

    def parent(self, child: ReadableSpan) -> ReadableSpan | None:
        """The finished span that is `child`'s parent, if any."""
        if child.parent is None:
            return None
        wanted = child.parent.span_id
        found = [s for s in self.spans() if s.context is not None and s.context.span_id == wanted]
        return found[0] if found else None

    def points(self, metric: str, **attributes: object) -> list[Any]:
        """The data points of `metric` whose attributes include `attributes` (dots as `__`)."""
        wanted = {key.replace("__", "."): value for key, value in attributes.items()}
        data = self.reader.get_metrics_data()
        found: list[Any] = []
        for resource in data.resource_metrics if data is not None else ():
            for scope in resource.scope_metrics:
                for each in scope.metrics:
                    if each.name != metric:
                        continue
                    found.extend(
                        point
                        for point in each.data.data_points
                        if _includes(point.attributes or {}, wanted)
                    )
        return found

    def total(self, metric: str, **attributes: object) -> float:
        """A counter's value summed over its points matching `attributes`."""
        return float(sum(point.value for point in self.points(metric, **attributes)))

    def observed(self, metric: str, **attributes: object) -> tuple[int, float]:
        """A histogram's (count, sum) over its points matching `attributes`."""
        points = self.points(metric, **attributes)
        return sum(p.count for p in points), sum(p.sum for p in points)


def _includes(have: Mapping[str, object], wanted: Mapping[str, object]) -> bool:
    return all(have.get(key) == value for key, value in wanted.items())


@contextmanager
def captured(*, record_summaries: bool = False) -> Iterator[Capture]:
    """A Telemetry on fresh SDK providers with in-memory exporters, shut down afterwards."""
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    telemetry = Telemetry(
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        record_summaries=record_summaries,
    )
    try:
        yield Capture(telemetry=telemetry, exporter=exporter, reader=reader)
    finally:
        tracer_provider.shutdown()
        meter_provider.shutdown()


def attribute_values(spans: list[ReadableSpan]) -> list[str]:
    """Every attribute value of `spans` as text, to check what they never carry."""
    return [str(value) for span in spans for value in (span.attributes or {}).values()]
