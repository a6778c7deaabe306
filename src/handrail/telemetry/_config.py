"""Telemetry as the standard `OTEL_*` environment variables ask for it.

Owns reading those variables into `ExportSettings` and building the SDK providers they
name (OTLP over HTTP/protobuf, or the console), each signal on its own. Never installs
a provider globally: what it builds belongs to the Telemetry it returns. What the SDK
and its exporters read from the process environment themselves (sampler, batch sizes,
timeouts, compression, TLS files) is left to them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from handrail.errors import ConfigurationError

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.trace import TracerProvider

    from handrail.telemetry import Telemetry

__all__ = ["ExportSettings", "SignalExport", "configured", "read_settings"]

_OTLP = "otlp"
_CONSOLE = "console"
_NONE = "none"
_EXPORTERS = frozenset({_OTLP, _CONSOLE})
_PROTOCOL = "http/protobuf"
_DEFAULT_ENDPOINT = "http://localhost:4318"
_DEFAULT_INTERVAL_MS = 60_000
_INSTALL = "pip install 'handrail[telemetry]'"


@dataclass(frozen=True, kw_only=True, slots=True)
class SignalExport:
    """Where one signal (traces or metrics) goes: its exporters, endpoint and headers.

    `exporters` is None when the environment says nothing about the signal (the
    application's global provider is used, if any), empty when it says `none`.
    """

    exporters: tuple[str, ...] | None
    endpoint: str
    headers: Mapping[str, str]


@dataclass(frozen=True, kw_only=True, slots=True)
class ExportSettings:
    """What the environment configures; `disabled` is OTEL_SDK_DISABLED=true."""

    disabled: bool
    traces: SignalExport
    metrics: SignalExport
    resource: Mapping[str, str]
    interval_ms: int
    summaries: bool


def read_settings(environ: Mapping[str, str]) -> ExportSettings:
    """The settings `environ` holds; ConfigurationError for a value Handrail cannot honour."""
    return ExportSettings(
        disabled=_flag(environ, "OTEL_SDK_DISABLED"),
        traces=_signal(environ, "TRACES", "traces"),
        metrics=_signal(environ, "METRICS", "metrics"),
        resource=_resource(environ),
        interval_ms=_interval(environ),
        summaries=_flag(environ, "HANDRAIL_TELEMETRY_SUMMARIES"),
    )


def configured(cls: type[Telemetry], environ: Mapping[str, str] | None = None) -> Telemetry | None:
    """`Telemetry.from_environment`: built from `environ`, or None when nothing records."""
    settings = read_settings(os.environ if environ is None else environ)
    if settings.disabled:
        return None
    traces, metrics = settings.traces.exporters, settings.metrics.exporters
    if traces is None and metrics is None and not _api_loaded():
        # Nothing configured, and without the API loaded no SDK can have been
        # installed globally either: nothing records (and nothing is imported).
        return None
    from opentelemetry.metrics import NoOpMeterProvider  # noqa: PLC0415
    from opentelemetry.trace import NoOpTracerProvider  # noqa: PLC0415

    # Per signal: exported as configured, off (`none`), or None: the global provider.
    tracers: TracerProvider | None = None if traces is None else NoOpTracerProvider()
    meters: MeterProvider | None = None if metrics is None else NoOpMeterProvider()
    if traces or metrics:
        resource = _sdk_resource(settings, otlp=_OTLP in (*(traces or ()), *(metrics or ())))
        if traces:
            tracers = _tracer_provider(traces, settings.traces, resource)
        if metrics:
            meters = _meter_provider(metrics, settings.metrics, resource, settings.interval_ms)
    telemetry = cls(
        tracer_provider=tracers,
        meter_provider=meters,
        record_summaries=settings.summaries,
        owns_providers=True,
    )
    if telemetry.active:
        return telemetry
    telemetry.shutdown()
    return None


# --- reading ------------------------------------------------------------------------------------


def _flag(environ: Mapping[str, str], name: str) -> bool:
    """An OpenTelemetry boolean: true only for `true`, in any case."""
    return environ.get(name, "").strip().lower() == "true"


def _signal(environ: Mapping[str, str], upper: str, path: str) -> SignalExport:
    own_endpoint = environ.get(f"OTEL_EXPORTER_OTLP_{upper}_ENDPOINT", "").strip()
    base = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    variable = f"OTEL_{upper}_EXPORTER"
    raw = environ.get(variable, "").strip().lower()
    exporters: tuple[str, ...] | None
    if not raw:
        exporters = (_OTLP,) if own_endpoint or base else None
    else:
        names = tuple(dict.fromkeys(n.strip() for n in raw.split(",") if n.strip()))
        unknown = sorted(set(names) - _EXPORTERS - {_NONE})
        if unknown:
            raise ConfigurationError(
                f"{variable}={raw}: Handrail exports with {', '.join(sorted(_EXPORTERS))} "
                f"or none, not {', '.join(unknown)}"
            )
        exporters = () if _NONE in names else names
    if exporters and _OTLP in exporters:
        protocol = (
            environ.get(f"OTEL_EXPORTER_OTLP_{upper}_PROTOCOL", "").strip()
            or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "").strip()
            or _PROTOCOL
        )
        if protocol.lower() != _PROTOCOL:
            raise ConfigurationError(
                f"OTLP protocol {protocol!r}: only {_PROTOCOL} is supported (Handrail ships "
                f"the OTLP/HTTP exporter); set OTEL_EXPORTER_OTLP_PROTOCOL={_PROTOCOL}"
            )
    if exporters and _OTLP in exporters:
        for name, url in (
            (f"OTEL_EXPORTER_OTLP_{upper}_ENDPOINT", own_endpoint),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", base),
        ):
            _check_url(name, url)
    endpoint = own_endpoint or f"{(base or _DEFAULT_ENDPOINT).rstrip('/')}/v1/{path}"
    headers = (
        environ.get(f"OTEL_EXPORTER_OTLP_{upper}_HEADERS", "").strip()
        or environ.get("OTEL_EXPORTER_OTLP_HEADERS", "").strip()
    )
    return SignalExport(exporters=exporters, endpoint=endpoint, headers=_headers(headers))


def _check_url(variable: str, url: str) -> None:
    """ConfigurationError naming `variable` unless `url` is empty or an http(s) URL with a host.

    The exporter takes any string and fails only later, on its thread, with each export.
    """
    if not url:
        return
    try:
        parts = urlsplit(url)
        valid = parts.scheme in {"http", "https"} and bool(parts.hostname) and parts.port != -1
    except ValueError:  # a port that is not a number, a bad IPv6 literal
        valid = False
    if not valid:
        raise ConfigurationError(f"{variable}: not an http:// or https:// URL with a host")


def _headers(raw: str) -> Mapping[str, str]:
    """`key=value,...` as the OTLP exporters read it (values URL-decoded)."""
    if not raw:
        return {}
    from opentelemetry.util.re import parse_env_headers  # noqa: PLC0415 - only when set

    return dict(parse_env_headers(raw, liberal=True))


def _resource(environ: Mapping[str, str]) -> Mapping[str, str]:
    """OTEL_RESOURCE_ATTRIBUTES (`key=value,...`, values URL-decoded), then the service name.

    Read from `environ` rather than left to the SDK's detector, which reads only
    `os.environ`; the rules are the specification's and the detector's.
    """
    attributes: dict[str, str] = {}
    for item in environ.get("OTEL_RESOURCE_ATTRIBUTES", "").split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            attributes[key.strip()] = unquote(value.strip())
    service = environ.get("OTEL_SERVICE_NAME", "").strip()
    if service:
        attributes["service.name"] = service
    return attributes


def _interval(environ: Mapping[str, str]) -> int:
    raw = environ.get("OTEL_METRIC_EXPORT_INTERVAL", "").strip()
    if not raw:
        return _DEFAULT_INTERVAL_MS
    try:
        interval = int(raw)
    except ValueError:
        interval = 0
    if interval <= 0:
        raise ConfigurationError(
            f"OTEL_METRIC_EXPORT_INTERVAL={raw}: a positive number of milliseconds"
        )
    return interval


# --- building -----------------------------------------------------------------------------------


def _api_loaded() -> bool:
    return "opentelemetry.trace" in sys.modules or "opentelemetry.metrics" in sys.modules


def _sdk_resource(settings: ExportSettings, *, otlp: bool) -> Resource:
    """The SDK's Resource of these settings; ConfigurationError when the SDK is missing."""
    try:
        from opentelemetry.sdk.resources import Resource  # noqa: PLC0415

        if otlp:
            import opentelemetry.exporter.otlp.proto.http  # noqa: F401, PLC0415
    except ImportError as exc:
        raise ConfigurationError(
            f"the OTEL_* variables ask for telemetry to be exported, but the OpenTelemetry "
            f"SDK or its OTLP/HTTP exporter is not installed: {_INSTALL}"
        ) from exc
    return Resource.create(dict(settings.resource))


def _tracer_provider(
    exporters: tuple[str, ...], signal: SignalExport, resource: Resource
) -> TracerProvider:
    """An SDK provider exporting to `exporters` (batched)."""
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import (  # noqa: PLC0415
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SpanExporter,
    )

    provider = TracerProvider(resource=resource)
    for name in exporters:
        exporter: SpanExporter
        if name == _OTLP:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
                OTLPSpanExporter,
            )

            exporter = OTLPSpanExporter(endpoint=signal.endpoint, headers=dict(signal.headers))
        else:
            exporter = ConsoleSpanExporter()
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def _meter_provider(
    exporters: tuple[str, ...], signal: SignalExport, resource: Resource, interval_ms: int
) -> MeterProvider:
    """An SDK provider reading every `interval_ms` into `exporters`."""
    from opentelemetry.sdk.metrics import MeterProvider  # noqa: PLC0415
    from opentelemetry.sdk.metrics.export import (  # noqa: PLC0415
        ConsoleMetricExporter,
        MetricExporter,
        PeriodicExportingMetricReader,
    )

    readers = []
    for name in exporters:
        exporter: MetricExporter
        if name == _OTLP:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import (  # noqa: PLC0415
                OTLPMetricExporter,
            )

            exporter = OTLPMetricExporter(endpoint=signal.endpoint, headers=dict(signal.headers))
        else:
            exporter = ConsoleMetricExporter()
        readers.append(PeriodicExportingMetricReader(exporter, export_interval_millis=interval_ms))
    return MeterProvider(resource=resource, metric_readers=readers)
