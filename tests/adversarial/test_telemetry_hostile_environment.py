"""Attacks on the telemetry configuration: garbage in the standard `OTEL_*` variables.

A bad URL, an unknown exporter, a protocol not shipped, an interval that is not a
positive number: a ConfigurationError naming the variable, before any provider is
built, and one `error:` line from `handrail eval run`.
"""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from handrail.cli import app
from handrail.errors import ConfigurationError
from handrail.telemetry import Telemetry

BAD = [
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "not a url"}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "ftp://collector:4318"}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://"}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://host:port"}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://[::1"}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "//x"}, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
    ({"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "x" * 100_000}, "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"),
    ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER"),
    ({"OTEL_METRICS_EXPORTER": "prometheus,otlp"}, "OTEL_METRICS_EXPORTER"),
    ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "PROTOCOL"),
    ({"OTEL_METRIC_EXPORT_INTERVAL": "-5"}, "OTEL_METRIC_EXPORT_INTERVAL"),
    ({"OTEL_METRIC_EXPORT_INTERVAL": "0"}, "OTEL_METRIC_EXPORT_INTERVAL"),
    ({"OTEL_METRIC_EXPORT_INTERVAL": "1e3"}, "OTEL_METRIC_EXPORT_INTERVAL"),
    ({"OTEL_METRIC_EXPORT_INTERVAL": "ten"}, "OTEL_METRIC_EXPORT_INTERVAL"),
]


@pytest.mark.parametrize(("environ", "variable"), BAD)
def test_a_garbage_variable_is_a_configuration_error_naming_it(
    environ: dict[str, str], variable: str
) -> None:
    with pytest.raises(ConfigurationError) as raised:
        Telemetry.from_environment(environ)
    assert variable in str(raised.value)
    assert len(str(raised.value)) < 300  # the value is not echoed unbounded


def test_a_bad_url_of_a_signal_that_is_not_exported_is_not_read() -> None:
    environ = {"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"}
    assert Telemetry.from_environment({**environ, "OTEL_EXPORTER_OTLP_ENDPOINT": "bad"}) is None


@pytest.mark.parametrize(
    "headers", ["no-equals-sign", "=v", "k=%zz", "a=b,,,=,c", "k=\x00\x1b", "k=" + "v" * 100_000]
)
def test_garbage_headers_never_raise_from_deep_in_the_sdk(headers: str) -> None:
    environ = {
        "OTEL_TRACES_EXPORTER": "console",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_EXPORTER_OTLP_HEADERS": headers,
    }
    telemetry = Telemetry.from_environment(environ)
    assert telemetry is not None
    telemetry.shutdown()


@pytest.mark.parametrize(("environ", "variable"), BAD[:1] + BAD[7:8] + BAD[10:11])
def test_eval_run_reports_a_garbage_variable_as_one_line(
    environ: dict[str, str], variable: str
) -> None:
    result: Any = CliRunner().invoke(app, ["eval", "run", "--only", "complete_fields"], env=environ)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: ")
    assert variable in lines[0]
