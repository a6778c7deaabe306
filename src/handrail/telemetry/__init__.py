"""Traces and metrics of calls, runs, tasks and requests, in OpenTelemetry's terms.

`Telemetry` holds one tracer, one meter and the instruments Handrail records to. It is
optional everywhere: a component given None records nothing and pays one `is None`
test per call. `Telemetry.from_environment()` reads the standard `OTEL_*` variables
(an exporter configured there, or an SDK the application installed globally) and
answers None when nothing would receive the data. Spans follow the GenAI semantic
conventions (`execute_tool {name}`, `invoke_agent`, `chat {model}`); arguments and
results are never attributes, only the redacted summary when `record_summaries` is on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from handrail.telemetry import attributes

if TYPE_CHECKING:
    from opentelemetry.metrics import Counter, Histogram, Meter, MeterProvider, UpDownCounter
    from opentelemetry.trace import Tracer, TracerProvider

__all__ = ["Telemetry", "attributes"]

_SCOPE = "handrail"

# Seconds; the stages of a read take microseconds, a write's downstream seconds.
_DURATION_BUCKETS = (
    0.000_025,
    0.000_05,
    0.000_1,
    0.000_25,
    0.000_5,
    0.001,
    0.002_5,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)


class Telemetry:
    """The tracer, meter and instruments of one Handrail process (explicit, not global).

    Instruments (names are stable; attributes in `handrail.telemetry.attributes`):
    - `handrail.tool.duration` (histogram, s): per tool and stage; stage `call` is the
      whole call, so P50/P95/P99 per tool and per stage can be read from it.
    - `handrail.tool.calls` (counter): per tool, envelope status and error code.
    - `handrail.executions.unknown` (up-down counter): UNKNOWN executions open.
    - `handrail.reconciliations` (counter, by outcome) and
      `handrail.reconciliation.duration` (histogram, s): time to recover, from the
      execution's creation (records keep no time of turning UNKNOWN) to its resolution.
    - `handrail.duplicates_prevented` (counter): writes answered from their key's record.
    - `handrail.redactions` (counter): values redacted from results, by kind.
    - `handrail.budget.stops` (counter): runs stopped by a budget, by reason.
    - `gen_ai.client.token.usage` (histogram, tokens) and
      `gen_ai.client.operation.duration` (histogram, s): the agent loop's model turns.

    Providers are resolved once, here: the ones given, else the globally installed
    ones. The API's stand-ins (no SDK installed when this is built) record nothing:
    `tracing` / `metering` say so, and a Gate given a Telemetry that does neither
    drops it, so that it costs what None costs. Build it after installing the SDK.
    `owns_providers`: `shutdown()` stops the providers passed in (`from_environment`'s
    own); otherwise they stay the caller's to stop. Global providers are never stopped.
    """

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        record_summaries: bool = False,
        owns_providers: bool = False,
    ) -> None:
        # Loaded here, not on `import handrail.telemetry`: Handrail.open asks the
        # environment first and most processes configure no telemetry at all.
        from opentelemetry import metrics, trace  # noqa: PLC0415

        version = _version()
        tracers = trace.get_tracer_provider() if tracer_provider is None else tracer_provider
        meters = metrics.get_meter_provider() if meter_provider is None else meter_provider
        self.tracing = not _stand_in(tracers)
        """False when no span would be recorded: the API's no-op or placeholder provider."""
        self.metering = not _stand_in(meters)
        """False when no measurement would be recorded, likewise."""
        self.tracer: Tracer = (
            tracers.get_tracer(_SCOPE, version) if self.tracing else trace.NoOpTracer()
        )
        self.meter: Meter = (
            meters.get_meter(_SCOPE, version) if self.metering else metrics.NoOpMeter(_SCOPE)
        )
        # Off by default: a redacted argument summary is still data about a person.
        self.record_summaries = record_summaries
        self._providers: tuple[object, ...] = (tracers, meters)
        given = (tracer_provider, meter_provider)
        self._owned: tuple[object, ...] = (
            tuple(p for p in given if p is not None) if owns_providers else ()
        )
        meter = self.meter
        self.tool_duration: Histogram = meter.create_histogram(
            "handrail.tool.duration",
            unit="s",
            description="Duration of a tool call and of each of its stages.",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self.tool_calls: Counter = meter.create_counter(
            "handrail.tool.calls",
            unit="{call}",
            description="Tool calls by envelope status and error code.",
        )
        self.unknown_open: UpDownCounter = meter.create_up_down_counter(
            "handrail.executions.unknown",
            unit="{execution}",
            description="Executions whose outcome is UNKNOWN and not yet reconciled.",
        )
        self.reconciliations: Counter = meter.create_counter(
            "handrail.reconciliations",
            unit="{execution}",
            description="UNKNOWN executions reconciled, by outcome.",
        )
        self.time_to_recover: Histogram = meter.create_histogram(
            "handrail.reconciliation.duration",
            unit="s",
            description="Time from an UNKNOWN execution's creation to its resolution.",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self.duplicates_prevented: Counter = meter.create_counter(
            "handrail.duplicates_prevented",
            unit="{call}",
            description="Writes answered from their idempotency key's record, not run again.",
        )
        self.redactions: Counter = meter.create_counter(
            "handrail.redactions",
            unit="{value}",
            description="Values redacted from results before the model saw them, by kind.",
        )
        self.budget_stops: Counter = meter.create_counter(
            "handrail.budget.stops",
            unit="{run}",
            description="Agent runs stopped by a budget, by reason.",
        )
        self.token_usage: Histogram = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Tokens used per model turn, by type (input, output).",
        )
        self.model_duration: Histogram = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="Duration of one model turn.",
        )

    @property
    def active(self) -> bool:
        """Whether anything is recorded at all (spans, measurements or both)."""
        return self.tracing or self.metering

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Telemetry | None:
        """Telemetry as the standard `OTEL_*` variables configure it, or None for none.

        `environ` defaults to `os.environ`. Read: OTEL_SDK_DISABLED; OTEL_TRACES_EXPORTER
        and OTEL_METRICS_EXPORTER (`otlp`, `console`, `none`; `otlp` by default once an
        OTLP endpoint is set); OTEL_EXPORTER_OTLP_ENDPOINT and its `_TRACES_` /
        `_METRICS_` forms; OTEL_EXPORTER_OTLP_PROTOCOL (`http/protobuf` only);
        OTEL_EXPORTER_OTLP_HEADERS (and per signal); OTEL_SERVICE_NAME and
        OTEL_RESOURCE_ATTRIBUTES; OTEL_METRIC_EXPORT_INTERVAL (ms); and
        HANDRAIL_TELEMETRY_SUMMARIES=true for the redacted argument summaries. A signal
        with no exporter configured uses the provider the application installed
        globally, if any. Nothing configured and nothing installed: None. The providers
        built here are the Telemetry's own (`shutdown()` flushes and stops them).
        Raises ConfigurationError for a value it cannot honour, and when export is
        asked for but the SDK is missing (`pip install 'handrail[telemetry]'`).
        """
        from handrail.telemetry._config import configured  # noqa: PLC0415

        return configured(cls, environ)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Export what the providers hold now; False if some of it could not be."""
        flushed = True
        for provider in self._providers:
            flush = getattr(provider, "force_flush", None)
            if flush is not None:
                flushed = bool(flush(timeout_millis)) and flushed
        return flushed

    def shutdown(self) -> None:
        """Stop (after a last export) the providers this Telemetry owns; once."""
        owned, self._owned = self._owned, ()
        for provider in owned:
            stop = getattr(provider, "shutdown", None)
            if stop is not None:
                stop()


def _stand_in(provider: object) -> bool:
    """Whether `provider` is the API's no-op, or its placeholder for an SDK not installed."""
    from opentelemetry.metrics import NoOpMeterProvider  # noqa: PLC0415
    from opentelemetry.metrics._internal import _ProxyMeterProvider  # noqa: PLC0415 - the API names no public type for it
    from opentelemetry.trace import NoOpTracerProvider, ProxyTracerProvider  # noqa: PLC0415

    return isinstance(
        provider,
        NoOpTracerProvider | ProxyTracerProvider | NoOpMeterProvider | _ProxyMeterProvider,
    )


def _version() -> str:
    """Handrail's installed version, the instrumentation scope's version."""
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415 - once

    try:
        return version("handrail")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree not installed
        return "0"
