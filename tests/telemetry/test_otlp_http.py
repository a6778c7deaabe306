"""End to end over the wire: Handrail in a process of its own, configured by `OTEL_*`
variables only, exports OTLP/HTTP to a receiver on 127.0.0.1, which reads it back.

The child closes its Handrail before it exits, which exports what is left and shuts
the providers down; so once it has exited, everything it sent has been received.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from _otel_capture import READ_STAGES
from _otlp_receiver import OtlpReceiver, attributes

CHILD = """
import asyncio, sys
from handrail import Handrail, Principal, RiskLevel, ToolCall, tool

@tool(risk=RiskLevel.L0_PUBLIC_READ)
async def echo(x: int) -> dict[str, int]:
    '''Return the argument.'''
    return {"x": x}

async def main() -> None:
    async with Handrail.open("memory://", registry=[echo]) as app:
        assert app.telemetry is not None, "no telemetry from the environment"
        who = Principal(user_id="u1", tenant_id="t1")
        ok = await app.handle(ToolCall(id="c1", name="echo", arguments='{"x": 7}'), who)
        refused = await app.handle(ToolCall(id="c2", name="echo", arguments='{"x": "n"}'), who)
        print(ok.status.value, refused.error_type.value)

asyncio.run(main())
"""


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    found = OtlpReceiver()
    yield found
    found.close()


def _child_environment(receiver: OtlpReceiver) -> dict[str, str]:
    """This process's environment without OTEL_* or proxies, plus the OTEL_* under test."""
    dropped = ("OTEL_", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")
    environ = {k: v for k, v in os.environ.items() if not k.upper().startswith(dropped)}
    return {
        **environ,
        "NO_PROXY": "127.0.0.1",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_EXPORTER_OTLP_HEADERS": "x-handrail-test=a%20token",
        "OTEL_SERVICE_NAME": "handrail-e2e",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=test",
        # Metrics leave on shutdown only: exactly one export to read.
        "OTEL_METRIC_EXPORT_INTERVAL": "600000",
    }


def test_spans_and_metrics_reach_an_otlp_http_receiver_configured_by_otel_variables(
    receiver: OtlpReceiver,
) -> None:
    done = subprocess.run(  # noqa: S603 - our own interpreter and a fixed script
        [sys.executable, "-c", CHILD],
        env=_child_environment(receiver),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ok", "INVALID_ARGUMENTS"]
    assert receiver.unexpected == []
    assert {h.get("x-handrail-test") for h in receiver.headers} == {"a token"}
    assert {h.get("content-type") for h in receiver.headers} == {"application/x-protobuf"}

    spans = []
    for request in receiver.traces:
        for resource_spans in request.resource_spans:
            resource = attributes(resource_spans.resource.attributes)
            assert resource["service.name"] == "handrail-e2e"
            assert resource["deployment.environment"] == "test"
            for scope_spans in resource_spans.scope_spans:
                assert scope_spans.scope.name == "handrail"
                spans.extend(scope_spans.spans)
    calls = {
        attributes(s.attributes)["gen_ai.tool.call.id"]: s
        for s in spans
        if s.name.startswith("execute_tool")
    }
    assert sorted(calls, key=str) == ["c1", "c2"]
    ok = calls["c1"]
    assert ok.name == "execute_tool echo"
    assert attributes(ok.attributes)["gen_ai.operation.name"] == "execute_tool"
    assert attributes(ok.attributes)["handrail.status"] == "ok"
    children = sorted(
        (s for s in spans if s.parent_span_id == ok.span_id), key=lambda s: s.start_time_unix_nano
    )
    assert [s.name for s in children] == READ_STAGES
    assert all(s.trace_id == ok.trace_id for s in children)
    refused = attributes(calls["c2"].attributes)
    assert refused["handrail.error.code"] == "INVALID_ARGUMENTS"

    points: dict[str, list[tuple[dict[str, object], float]]] = {}
    for request in receiver.metrics:
        for resource_metrics in request.resource_metrics:
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    kind = metric.WhichOneof("data")
                    for point in getattr(metric, kind).data_points:
                        value = point.count if kind == "histogram" else point.as_int
                        points.setdefault(metric.name, []).append(
                            (attributes(point.attributes), value)
                        )
    assert sorted(points["handrail.tool.calls"], key=str) == sorted(
        [
            ({"gen_ai.tool.name": "echo", "handrail.status": "ok"}, 1),
            (
                {
                    "gen_ai.tool.name": "echo",
                    "handrail.status": "error",
                    "handrail.error.code": "INVALID_ARGUMENTS",
                },
                1,
            ),
        ],
        key=str,
    )
    durations = {str(a["handrail.stage"]): n for a, n in points["handrail.tool.duration"]}
    assert durations["call"] == 2
    assert durations["schema"] == 2
    assert durations["execute"] == 1
