"""W3C trace context in and out, and TraceRequests: a SERVER span per HTTP request.

The codec is the API's own propagator (W3C only); what is checked here is what
Handrail adds: None for a carrier naming no valid parent, no ambient values in an
extracted context, header lists read the ASGI way, and the middleware's span: its
remote parent, its name from the route template, its status, and nothing for probes
or scopes that are not HTTP.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import SpanKind, StatusCode
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from _edge_traces import OTHER, REMOTE, Recording, recording
from handrail.telemetry import Telemetry, attributes
from handrail.telemetry.propagation import (
    TraceRequests,
    context_of,
    current,
    extract,
    from_headers,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def rec() -> Iterator[Recording]:
    made = recording()
    yield made
    made.close()


def _ids(context: otel_context.Context | None) -> tuple[int, int, bool]:
    assert context is not None
    span = trace.get_current_span(context).get_span_context()
    return span.trace_id, span.span_id, span.is_remote


# --- the codec ---------------------------------------------------------------------------------


def test_a_traceparent_names_its_callers_span_as_a_remote_parent() -> None:
    assert _ids(context_of(REMOTE.traceparent)) == (REMOTE.trace_id, REMOTE.span_id, True)


@pytest.mark.parametrize(
    "traceparent",
    [
        "",
        "not a traceparent",
        f"00-{0:032x}-{REMOTE.span_id:016x}-01",  # no trace
        f"00-{REMOTE.trace_id:032x}-{0:016x}-01",  # no span
        f"ff-{REMOTE.trace_id:032x}-{REMOTE.span_id:016x}-01",  # the forbidden version
        REMOTE.traceparent + "-extra",  # version 00 has four fields
        REMOTE.traceparent + " " * 600,  # longer than the format allows
    ],
)
def test_a_traceparent_the_format_refuses_names_no_parent(traceparent: str) -> None:
    assert context_of(traceparent) is None


def test_a_carrier_without_a_string_traceparent_names_no_parent() -> None:
    assert extract({}) is None
    assert extract({"traceparent": 7}) is None
    assert extract({"tracestate": "k=v"}) is None
    assert extract({"traceparent": [REMOTE.traceparent]}) is None


def test_the_tracestate_travels_with_its_traceparent() -> None:
    found = extract({"traceparent": REMOTE.traceparent, "tracestate": "vendor=abc,other=1"})

    assert found is not None
    state = trace.get_current_span(found).get_span_context().trace_state
    assert state.to_header() == "vendor=abc,other=1"


def test_an_extracted_context_holds_the_parent_and_nothing_of_the_ambient_one() -> None:
    key = otel_context.create_key("ambient")
    token = otel_context.attach(otel_context.set_value(key, "leak"))
    try:
        found = context_of(REMOTE.traceparent)
    finally:
        otel_context.detach(token)

    assert found is not None
    assert otel_context.get_value(key, found) is None


def test_current_writes_the_current_span_and_nothing_without_one(rec: Recording) -> None:
    assert current() == {}
    with rec.telemetry.tracer.start_as_current_span("here") as span:
        carrier = current()
    ids = span.get_span_context()

    assert _ids(extract(carrier)) == (ids.trace_id, ids.span_id, True)


def test_headers_are_read_as_asgi_gives_them_with_tracestate_fields_joined() -> None:
    headers = [
        (b"host", b"example.test"),
        (b"tracestate", b"a=1"),
        (b"traceparent", REMOTE.traceparent.encode()),
        (b"tracestate", b"b=2"),
    ]

    found = from_headers(headers)

    assert _ids(found) == (REMOTE.trace_id, REMOTE.span_id, True)
    assert found is not None
    assert trace.get_current_span(found).get_span_context().trace_state.to_header() == "a=1,b=2"
    assert from_headers([(b"host", b"example.test")]) is None
    assert from_headers([(b"traceparent", b"nonsense")]) is None


# --- the middleware ----------------------------------------------------------------------------


def _app(rec: Recording, seen: list[int], **options: Any) -> TraceRequests:
    async def item(request: Request) -> Response:
        seen.append(trace.get_current_span().get_span_context().span_id)
        status = int(request.query_params.get("status", "200"))
        return JSONResponse({"item": request.path_params["item_id"]}, status_code=status)

    async def boom(_request: Request) -> Response:
        raise LookupError("a secret in the message")

    routes = [Route("/items/{item_id}", item, methods=["GET", "POST"]), Route("/boom", boom)]
    return TraceRequests(Starlette(routes=routes), telemetry=rec.telemetry, **options)


def _client(app: Any, **headers: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1", headers=headers
    )


async def test_a_request_is_a_server_span_under_its_callers_span_named_by_its_route(
    rec: Recording,
) -> None:
    seen: list[int] = []
    async with _client(_app(rec, seen), traceparent=REMOTE.traceparent) as client:
        answer = await client.get("/items/42")

    assert answer.status_code == 200
    span = rec.named("GET /items/{item_id}")
    assert span.kind is SpanKind.SERVER
    assert span.context.trace_id == REMOTE.trace_id
    assert span.parent is not None
    assert (span.parent.span_id, span.parent.is_remote) == (REMOTE.span_id, True)
    assert seen == [span.context.span_id]  # current while the app answers
    assert dict(span.attributes or {}) == {
        attributes.HTTP_REQUEST_METHOD: "GET",
        attributes.URL_SCHEME: "http",
        attributes.NETWORK_PROTOCOL_VERSION: "1.1",
        attributes.HTTP_ROUTE: "/items/{item_id}",
        attributes.HTTP_RESPONSE_STATUS_CODE: 200,
    }
    assert span.status.status_code is StatusCode.UNSET


async def test_a_request_without_a_valid_traceparent_starts_a_trace_of_its_own(
    rec: Recording,
) -> None:
    async with _client(_app(rec, []), traceparent="00-nonsense") as client:
        await client.post("/items/1")

    assert rec.named("POST /items/{item_id}").parent is None


async def test_two_requests_with_two_callers_are_two_traces(rec: Recording) -> None:
    app = _app(rec, [])
    async with _client(app) as client:
        await client.get("/items/1", headers={"traceparent": REMOTE.traceparent})
        await client.get("/items/2", headers={"traceparent": OTHER.traceparent})

    assert sorted(s.context.trace_id for s in rec.spans()) == sorted(
        [REMOTE.trace_id, OTHER.trace_id]
    )


async def test_a_server_error_is_an_error_and_a_refusal_is_not(rec: Recording) -> None:
    async with _client(_app(rec, [])) as client:
        await client.get("/items/1", params={"status": "503"})
        await client.get("/items/2", params={"status": "404"})

    failed, refused = rec.spans()
    assert failed.status.status_code is StatusCode.ERROR
    assert (failed.attributes or {})[attributes.ERROR_TYPE] == "503"
    assert refused.status.status_code is StatusCode.UNSET
    assert attributes.ERROR_TYPE not in (refused.attributes or {})


async def test_an_exception_is_an_error_named_by_its_type_alone(rec: Recording) -> None:
    async with _client(_app(rec, [])) as client:
        with pytest.raises(LookupError):
            await client.get("/boom")

    span = rec.named("GET /boom")
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "LookupError"
    assert (span.attributes or {})[attributes.ERROR_TYPE] == "LookupError"
    assert span.events == ()  # no exception event: its message may carry data
    assert "secret" not in repr(span.to_json())


async def test_an_unmatched_route_is_named_by_its_method_and_an_odd_method_as_other(
    rec: Recording,
) -> None:
    async with _client(_app(rec, [])) as client:
        await client.get("/nowhere")
        await client.request("BREW", "/nowhere")

    nowhere, brew = rec.spans()
    assert nowhere.name == "GET"
    assert attributes.HTTP_ROUTE not in (nowhere.attributes or {})
    assert brew.name == "HTTP"
    assert (brew.attributes or {})[attributes.HTTP_REQUEST_METHOD] == "_OTHER"


async def test_a_sampled_out_request_records_nothing_but_carries_its_trace_on() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ALWAYS_OFF)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    carried: list[dict[str, str]] = []

    async def inner(_scope: Scope, _receive: Receive, send: Send) -> None:
        carried.append(current())
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    app = TraceRequests(inner, telemetry=Telemetry(tracer_provider=provider))
    async with _client(app, traceparent=REMOTE.traceparent) as client:
        assert (await client.get("/anything")).status_code == 200
    provider.shutdown()

    assert exporter.get_finished_spans() == ()
    assert _ids(extract(carried[0]))[0] == REMOTE.trace_id
    assert carried[0]["traceparent"].endswith("-00")  # not sampled, as decided here


async def test_probes_and_scopes_that_are_not_http_make_no_span(rec: Recording) -> None:
    reached: list[str] = []

    async def inner(scope: Scope, _receive: Receive, _send: Send) -> None:
        reached.append(scope["type"])

    app = TraceRequests(inner, telemetry=rec.telemetry, untraced=("/healthz",))

    async def receive() -> dict[str, Any]:
        return {"type": "lifespan.startup"}

    async def send(_message: Any) -> None:
        return None

    await app({"type": "lifespan"}, receive, send)
    await app({"type": "websocket", "path": "/ws", "headers": []}, receive, send)
    await app({"type": "http", "path": "/healthz", "method": "GET", "headers": []}, receive, send)

    assert reached == ["lifespan", "websocket", "http"]
    assert rec.spans() == ()
