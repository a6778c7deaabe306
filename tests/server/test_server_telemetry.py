"""The service's traces: a SERVER span per request, under the caller's `traceparent`.

A host that traces its own work sends `traceparent` with POST /v1/calls; the request's
span is a child of the host's span (in another process), and everything the gate does
for the calls of that turn (its spans, the tool's own) nests under the request's span.
Without telemetry the middleware is not even in the stack.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _service import asgi_client, key_for
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from _edge_traces import INSIDE, REMOTE, Recording, chain, services_for
from handrail.app import Handrail
from handrail.server import create_app
from handrail.telemetry import attributes
from handrail.telemetry.propagation import TraceRequests

pytestmark = pytest.mark.anyio


def _turn(*texts: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": f"toolu_{n}", "name": "edge__echo", "input": {"text": t}}
            for n, t in enumerate(texts)
        ],
    }


def _between(span: ReadableSpan, top: ReadableSpan, spans: tuple[ReadableSpan, ...]) -> list[str]:
    """The names of the spans from `span` (excluded) up to `top` (excluded); fails off the chain."""
    names = [s.name for s in chain(span, spans)]
    assert top.name in names, names
    return names[1 : names.index(top.name)]


async def test_a_turn_posted_with_a_traceparent_runs_under_the_request_span_of_that_trace(
    traced: Handrail, rec: Recording
) -> None:
    services = services_for(traced, rec.telemetry)
    token = key_for(services)
    async with asgi_client(create_app(services), token) as client:
        answer = await client.post(
            "/v1/calls/anthropic",
            json=_turn("one", "two"),
            headers={"traceparent": REMOTE.traceparent},
        )

    assert answer.status_code == 200
    assert [e["status"] for e in answer.json()["envelopes"]] == ["ok", "ok"]
    spans = rec.spans()
    request = rec.named("POST /v1/calls/{wire}")
    assert request.kind is SpanKind.SERVER
    assert request.parent is not None
    assert (request.context.trace_id, request.parent.span_id) == (REMOTE.trace_id, REMOTE.span_id)
    assert (request.attributes or {})[attributes.HTTP_RESPONSE_STATUS_CODE] == 200
    inside = [s for s in spans if s.name == INSIDE]
    assert len(inside) == 2
    for span in inside:
        # Whatever the gate records in between is its own (execute_tool, its stages).
        between = _between(span, request, spans)
        assert all(n.startswith(("execute_tool", "handrail.")) for n in between), between


async def test_a_refused_request_is_in_its_span_without_being_an_error(
    traced: Handrail, rec: Recording
) -> None:
    services = services_for(traced, rec.telemetry)
    async with asgi_client(create_app(services)) as client:
        answer = await client.post(
            "/v1/calls/anthropic", json=_turn("x"), headers={"traceparent": REMOTE.traceparent}
        )

    assert answer.status_code == 401
    request = rec.named("POST /v1/calls/{wire}")
    assert (request.attributes or {})[attributes.HTTP_RESPONSE_STATUS_CODE] == 401
    assert request.status.status_code is StatusCode.UNSET
    assert [s.name for s in rec.spans()] == ["POST /v1/calls/{wire}"]  # nothing ran


async def test_health_probes_make_no_spans(traced: Handrail, rec: Recording) -> None:
    async with asgi_client(create_app(services_for(traced, rec.telemetry))) as client:
        assert (await client.get("/healthz")).status_code == 200
        assert (await client.get("/readyz")).status_code == 200

    assert rec.spans() == ()


async def test_without_telemetry_no_tracing_middleware_is_in_the_stack(
    traced: Handrail, rec: Recording
) -> None:
    with_telemetry = create_app(services_for(traced, rec.telemetry))
    plain = create_app(services_for(traced, None))

    traced_classes: list[object] = [m.cls for m in with_telemetry.user_middleware]
    plain_classes: list[object] = [m.cls for m in plain.user_middleware]
    assert TraceRequests in traced_classes
    assert TraceRequests not in plain_classes
    assert len(plain.user_middleware) == len(with_telemetry.user_middleware) - 1


_GLOBAL_PROVIDER = """
import asyncio, json
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)  # what an application that traces itself does

from _edge_traces import REMOTE, services_for, traced_app
from _service import asgi_client, key_for
from handrail.server import create_app
from handrail.telemetry import Telemetry

telemetry = Telemetry()  # on the global provider, as the environment gives it then
services = services_for(traced_app(telemetry), telemetry)
token = key_for(services)

async def main():
    async with asgi_client(create_app(services), token) as client:
        answer = await client.get(
            "/v1/executions/hk-secret-key-7",
            params={"user": "bob@example.com"},
            headers={"traceparent": REMOTE.traceparent},
        )
    return answer.status_code

status = asyncio.run(main())
spans = [
    {"name": s.name, "kind": s.kind.name, "attributes": dict(s.attributes or {})}
    for s in exporter.get_finished_spans()
]
print(json.dumps({"status": status, "spans": spans}))
"""


def test_with_a_global_provider_each_request_has_one_span_naming_no_path_or_query() -> None:
    # FastAPI traces by itself whenever a global provider is set, recording the path
    # and the query: here an idempotency key and a user's address. Not in this service.
    here = Path(__file__).parent
    done = subprocess.run(  # noqa: S603 - our own interpreter and a fixed script
        [sys.executable, "-c", _GLOBAL_PROVIDER],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        cwd=here.parents[1],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(here.parent), str(here)])},
    )
    found = json.loads(done.stdout.splitlines()[-1])

    servers = [s for s in found["spans"] if s["kind"] == "SERVER"]
    assert [s["name"] for s in servers] == ["GET /v1/executions/{key}"]
    assert found["status"] in {403, 404}
    assert "hk-secret-key-7" not in done.stdout
    assert "bob@example.com" not in done.stdout
