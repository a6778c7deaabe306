"""Telemetry.from_environment: the standard OTEL_* variables, and what it owns.

Variables are passed as a mapping (never set on this process). Nothing here installs
a provider globally; the one test that needs a global SDK runs in a child process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest
from _otel_capture import capture
from _otlp_receiver import OtlpReceiver
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider

from handrail.errors import ConfigurationError
from handrail.telemetry import Telemetry
from handrail.telemetry._config import read_settings

ENDPOINT = "http://127.0.0.1:4318"


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    found = OtlpReceiver()
    yield found
    found.close()


def test_no_variable_and_no_sdk_installed_means_no_telemetry() -> None:
    assert Telemetry.from_environment({}) is None
    assert Telemetry.from_environment({"OTEL_SERVICE_NAME": "svc"}) is None


def test_sdk_disabled_turns_everything_off() -> None:
    environ = {"OTEL_SDK_DISABLED": "TRUE", "OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}
    assert Telemetry.from_environment(environ) is None


def test_both_exporters_none_means_no_telemetry() -> None:
    environ = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT,
        "OTEL_TRACES_EXPORTER": "none",
        "OTEL_METRICS_EXPORTER": "none",
    }
    assert Telemetry.from_environment(environ) is None


def test_an_endpoint_alone_exports_both_signals_over_otlp_to_their_paths() -> None:
    settings = read_settings({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT + "/"})
    assert settings.traces.exporters == ("otlp",)
    assert settings.metrics.exporters == ("otlp",)
    assert settings.traces.endpoint == ENDPOINT + "/v1/traces"
    assert settings.metrics.endpoint == ENDPOINT + "/v1/metrics"
    assert settings.interval_ms == 60_000
    assert settings.summaries is False


def test_a_signal_s_own_endpoint_is_used_as_given_and_turns_on_that_signal_only() -> None:
    settings = read_settings({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:9/t"})
    assert settings.traces.exporters == ("otlp",)
    assert settings.traces.endpoint == "http://collector:9/t"
    assert settings.metrics.exporters is None


def test_an_exporter_named_without_an_endpoint_goes_to_the_default_one() -> None:
    settings = read_settings({"OTEL_METRICS_EXPORTER": "otlp"})
    assert settings.metrics.endpoint == "http://localhost:4318/v1/metrics"
    assert settings.traces.exporters is None


def test_headers_are_url_decoded_and_a_signal_s_own_replace_the_common_ones() -> None:
    settings = read_settings(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT,
            "OTEL_EXPORTER_OTLP_HEADERS": "Api-Key=a%20b,tenant=t1",
            "OTEL_EXPORTER_OTLP_METRICS_HEADERS": "api-key=m",
        }
    )
    assert dict(settings.traces.headers) == {"api-key": "a b", "tenant": "t1"}
    assert dict(settings.metrics.headers) == {"api-key": "m"}


def test_resource_attributes_and_the_service_name_are_read_from_the_mapping() -> None:
    environ = {
        "OTEL_TRACES_EXPORTER": "console",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod, team=a%20b,broken",
        "OTEL_SERVICE_NAME": "handrail-test",
    }
    assert dict(read_settings(environ).resource) == {
        "deployment.environment": "prod",
        "team": "a b",
        "service.name": "handrail-test",
    }
    telemetry = Telemetry.from_environment(environ)
    assert telemetry is not None
    try:
        tracers = telemetry._providers[0]
        assert isinstance(tracers, TracerProvider)
        assert tracers.resource.attributes["service.name"] == "handrail-test"
        assert tracers.resource.attributes["team"] == "a b"
    finally:
        telemetry.shutdown()


def test_a_console_exporter_for_traces_alone_records_spans_and_no_metrics() -> None:
    telemetry = Telemetry.from_environment({"OTEL_TRACES_EXPORTER": "console"})
    assert telemetry is not None
    try:
        assert (telemetry.tracing, telemetry.metering) == (True, False)
    finally:
        telemetry.shutdown()


def test_an_endpoint_builds_sdk_providers_the_telemetry_owns(receiver: OtlpReceiver) -> None:
    environ = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_METRIC_EXPORT_INTERVAL": "600000",
        "HANDRAIL_TELEMETRY_SUMMARIES": "true",
    }
    telemetry = Telemetry.from_environment(environ)
    assert telemetry is not None
    tracers, meters = telemetry._providers
    assert isinstance(tracers, TracerProvider)
    assert isinstance(meters, MeterProvider)
    assert telemetry.record_summaries is True
    with telemetry.tracer.start_as_current_span("one"):
        telemetry.tool_calls.add(1, {"gen_ai.tool.name": "t", "handrail.status": "ok"})
    assert telemetry.force_flush() is True  # exported now, not at the next batch
    assert _span_names(receiver) == ["one"]
    with telemetry.tracer.start_as_current_span("two"):
        pass
    telemetry.shutdown()
    # Shut down: what was held was exported, and nothing more is.
    assert _span_names(receiver) == ["one", "two"]
    assert receiver.metrics  # the counter left with the flush or on shutdown
    exported = len(receiver.traces)
    with telemetry.tracer.start_as_current_span("after"):
        pass
    telemetry.shutdown()  # a second time does nothing
    assert len(receiver.traces) == exported


def _span_names(receiver: OtlpReceiver) -> list[str]:
    return [
        span.name
        for request in receiver.traces
        for resource in request.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    ]


@pytest.mark.parametrize(
    "environ",
    [
        {"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"},
        {"OTEL_METRICS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
    ],
)
def test_a_protocol_other_than_http_protobuf_is_refused_by_name(environ: dict[str, str]) -> None:
    with pytest.raises(ConfigurationError, match="only http/protobuf is supported"):
        Telemetry.from_environment(environ)


def test_grpc_for_a_signal_not_exported_over_otlp_is_no_error() -> None:
    environ = {"OTEL_TRACES_EXPORTER": "console", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
    assert read_settings(environ).traces.exporters == ("console",)


@pytest.mark.parametrize("name", ["zipkin", "otlp,prometheus", "jaeger"])
def test_an_exporter_handrail_does_not_ship_is_refused(name: str) -> None:
    with pytest.raises(ConfigurationError, match="OTEL_TRACES_EXPORTER"):
        Telemetry.from_environment({"OTEL_TRACES_EXPORTER": name})


@pytest.mark.parametrize("interval", ["0", "-5", "soon"])
def test_a_metric_interval_that_is_no_positive_integer_is_refused(interval: str) -> None:
    environ = {"OTEL_METRICS_EXPORTER": "console", "OTEL_METRIC_EXPORT_INTERVAL": interval}
    with pytest.raises(ConfigurationError, match="OTEL_METRIC_EXPORT_INTERVAL"):
        Telemetry.from_environment(environ)


def test_the_metric_interval_is_read_in_milliseconds() -> None:
    environ = {"OTEL_METRICS_EXPORTER": "console", "OTEL_METRIC_EXPORT_INTERVAL": "1500"}
    assert read_settings(environ).interval_ms == 1500


def test_export_asked_for_without_the_sdk_names_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # None in sys.modules makes the import fail as if the SDK were not installed.
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.resources", None)
    with pytest.raises(ConfigurationError, match=r"pip install 'handrail\[telemetry\]'"):
        Telemetry.from_environment({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT})


def test_without_export_the_sdk_is_not_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.resources", None)
    assert Telemetry.from_environment({"OTEL_TRACES_EXPORTER": "none"}) is None


def test_summaries_are_off_unless_the_variable_is_true() -> None:
    assert read_settings({"HANDRAIL_TELEMETRY_SUMMARIES": "true"}).summaries is True
    assert read_settings({"HANDRAIL_TELEMETRY_SUMMARIES": "1"}).summaries is False
    assert read_settings({}).summaries is False


def test_shutdown_stops_only_the_providers_the_telemetry_owns() -> None:
    mine, theirs = capture(), capture()
    try:
        owned = Telemetry(
            tracer_provider=mine.tracers, meter_provider=mine.meters, owns_providers=True
        )
        borrowed = Telemetry(tracer_provider=theirs.tracers, meter_provider=theirs.meters)
        owned.shutdown()
        borrowed.shutdown()
        for telemetry in (owned, borrowed):
            with telemetry.tracer.start_as_current_span("after shutdown"):
                pass
        assert mine.spans() == []
        assert [s.name for s in theirs.spans()] == ["after shutdown"]
    finally:
        theirs.shutdown()


GLOBAL_SDK = """
import asyncio, json
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from handrail import Gate, Principal, Registry, RiskLevel, ToolCall, tool
from handrail.telemetry import Telemetry

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)

@tool(risk=RiskLevel.L0_PUBLIC_READ)
async def echo(x: int) -> int:
    '''Return x.'''
    return x

telemetry = Telemetry.from_environment({})
registry = Registry()
registry.register(echo)
gate = Gate(registry, telemetry=telemetry)
asyncio.run(gate.handle(ToolCall(id="c", name="echo", arguments='{"x": 1}'),
                        Principal(user_id="u", tenant_id="t")))
telemetry.shutdown()  # not its own: the application's provider keeps working
with trace.get_tracer("app").start_as_current_span("later"):
    pass
print(json.dumps({
    "tracing": telemetry.tracing,
    "metering": telemetry.metering,
    "spans": sorted({s.name for s in exporter.get_finished_spans()}),
}))
"""


def test_with_nothing_configured_an_sdk_the_application_installed_is_used() -> None:
    done = subprocess.run(  # noqa: S603 - our own interpreter and a fixed script
        [sys.executable, "-c", GLOBAL_SDK], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["tracing"] is True
    assert found["metering"] is False
    assert {"execute_tool echo", "handrail.execute", "later"} <= set(found["spans"])
