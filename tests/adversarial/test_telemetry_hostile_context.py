"""Attacks on trace context from outside: HTTP headers and MCP's `params._meta`.

Malformed, oversized (1 MB, 10,000 tracestate members), non-ASCII and duplicated
`traceparent`/`tracestate` never break a request and are never reflected into a span's
name or attributes; an MCP client's tool name (any length, a tool that does not exist)
names no span, even when the application installed an SDK provider globally.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.types import Receive, Scope, Send

from handrail.telemetry import Telemetry
from handrail.telemetry.propagation import TraceRequests, extract, from_headers

pytestmark = pytest.mark.anyio

TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
TRACE_ID = 0x0AF7651916CD43DD8448EB211C80319C
TESTS = Path(__file__).resolve().parent.parent

HOSTILE: list[list[tuple[bytes, bytes]]] = [
    [(b"traceparent", b"00-" + b"a" * 1_000_000)],
    [(b"traceparent", TP.encode() + b"-" + b" " * 1_000_000)],
    [(b"traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0é".encode())],
    [(b"traceparent", b"\xff\xfe\x00\x1b[2J")],
    [(b"traceparent", b"ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")],
    [(b"traceparent", b"00-00000000000000000000000000000000-b7ad6b7169203331-01")],
    [(b"traceparent", b"garbage"), (b"traceparent", TP.encode())],
    [(b"tracestate", b"k=v")],
]
"""Carriers naming no valid parent: a new trace."""

KEPT: list[list[tuple[bytes, bytes]]] = [
    [
        (b"traceparent", TP.encode()),
        (b"tracestate", b",".join(b"k%d=v" % i for i in range(10_000))),
    ],
    [(b"traceparent", TP.encode())] + [(b"tracestate", b"k%d=v" % i) for i in range(10_000)],
    [(b"traceparent", TP.encode()), (b"tracestate", b"k=" + b"v" * 1_000_000)],
    [(b"traceparent", TP.encode()), (b"tracestate", "k=vé\x1b".encode())],
    [
        (b"traceparent", TP.encode()),
        (b"traceparent", b"00-" + b"1" * 32 + b"-" + b"2" * 16 + b"-01"),
    ],
]
"""Carriers with a valid first traceparent: its trace, a bounded (or no) tracestate."""


@pytest.mark.parametrize("headers", HOSTILE)
def test_a_malformed_traceparent_names_no_parent(headers: list[tuple[bytes, bytes]]) -> None:
    assert from_headers(headers) is None


@pytest.mark.parametrize("headers", KEPT)
def test_an_oversized_tracestate_is_dropped_and_the_parent_kept(
    headers: list[tuple[bytes, bytes]],
) -> None:
    parent = from_headers(headers)
    assert parent is not None
    context = trace.get_current_span(parent).get_span_context()
    assert context.trace_id == TRACE_ID
    assert len(context.trace_state) <= 32
    assert all(len(k) + len(v) < 600 for k, v in context.trace_state.items())


@pytest.mark.parametrize(
    "carrier",
    [
        {"traceparent": 5},
        {"traceparent": [TP]},
        {"traceparent": {"x": TP}},
        {"traceparent": None},
        {"traceparent": "x" * 1_000_000},
        {"traceparent": TP, "tracestate": ["k=v"] * 10_000},
    ],
)
def test_a_meta_carrier_of_any_shape_never_raises(carrier: dict[str, object]) -> None:
    found = extract(carrier)
    assert found is None or carrier["traceparent"] == TP


async def _ok(scope: Scope, receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.mark.parametrize("headers", [*HOSTILE, *KEPT])
async def test_a_request_with_hostile_trace_headers_is_answered_and_not_reflected(
    headers: list[tuple[bytes, bytes]],
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = TraceRequests(_ok, telemetry=Telemetry(tracer_provider=provider))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        response = await client.get("/v1/x", headers=[(k, v) for k, v in headers])
    provider.shutdown()
    assert response.status_code == 200
    (span,) = exporter.get_finished_spans()
    assert span.name == "GET"
    shown = json.dumps({"name": span.name, "attributes": dict(span.attributes or {})})
    assert len(shown) < 500
    for _, value in headers:
        assert value.decode("latin-1")[:40] not in shown


_GLOBAL_PROVIDER = r"""
import asyncio, json, sys
sys.path[:0] = [sys.argv[1]]
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)  # the application's, installed globally
import mcp_types as types
from mcp import Client
from _edge_traces import traced_app
from handrail import Principal
from handrail.mcp.server import GatedServer, fixed_principal
from handrail.telemetry import Telemetry

NAME = "no_such_tool_sk-live-SECRET" + "x" * 100_000
async def main():
    app = traced_app(Telemetry(tracer_provider=provider))
    server = GatedServer(app, principal=fixed_principal(Principal(user_id="a", tenant_id="t")))
    meta = types.RequestParamsMeta(traceparent=sys.argv[2], baggage="user=alice%40example.com")
    async with Client(server.lowlevel, mode="auto", cache=None) as client:
        unknown = await client.call_tool(NAME, {"text": "hi"}, meta=meta)
        known = await client.call_tool("edge.echo", {"text": "sk-live-SECRET"}, meta=meta)
    server.close()
    app.close()
    print(json.dumps({
        "unknown_is_error": unknown.is_error,
        "known_is_error": known.is_error,
        "spans": [
            {"name": s.name, "attributes": dict(s.attributes or {}),
             "trace_id": s.context.trace_id}
            for s in exporter.get_finished_spans()
        ],
    }))
asyncio.run(main())
"""


def test_an_mcp_clients_tool_name_names_no_span_under_a_global_provider() -> None:
    done = subprocess.run(  # noqa: S603 - our interpreter, our script
        [sys.executable, "-c", _GLOBAL_PROVIDER, str(TESTS), TP],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout)
    assert seen["unknown_is_error"] is True
    assert seen["known_is_error"] is False
    spans = seen["spans"]
    assert spans
    assert all(span["trace_id"] == TRACE_ID for span in spans)  # the _meta's parent
    for span in spans:
        assert len(span["name"]) < 100, span["name"][:100]
        text = json.dumps(span)
        assert len(text) < 2_000
        assert "SECRET" not in span["name"]
        assert "alice" not in text
    assert {s["attributes"].get("gen_ai.tool.name") for s in spans if s["name"] == "execute_tool"}
