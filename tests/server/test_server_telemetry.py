"""The service's traces: a SERVER span per request, under the caller's `traceparent`.

A host that traces its own work sends `traceparent` with POST /v1/calls; the request's
span is a child of the host's span (in another process), and everything the gate does
for the calls of that turn (its spans, the tool's own) nests under the request's span.
Without telemetry the middleware is not even in the stack.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from _service import asgi_client, key_for
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from _edge_traces import INSIDE, REMOTE, Recording, chain, recording, traced_app
from handrail.app import Handrail
from handrail.clock import SystemClock
from handrail.mcp.auth import ApiKeyAuthenticator
from handrail.mcp.keys import ApiKeys
from handrail.server import create_app
from handrail.server.config import HandrailConfig, ServerConfig
from handrail.server.operations import Operations
from handrail.server.services import Services
from handrail.telemetry import Telemetry, attributes
from handrail.telemetry.propagation import TraceRequests

pytestmark = pytest.mark.anyio

_ids = itertools.count(1)


@pytest.fixture
def rec() -> Iterator[Recording]:
    made = recording()
    yield made
    made.close()


@pytest.fixture
def app(rec: Recording) -> Iterator[Handrail]:
    made = traced_app(rec.telemetry)
    yield made
    made.close()


def _services(app: Handrail, telemetry: Telemetry | None) -> Services:
    clock = SystemClock()
    return Services(
        config=ServerConfig(handrail=HandrailConfig(registry="examples.payments")),
        handrail=app,
        bearer=ApiKeyAuthenticator(ApiKeys(app.store, clock=clock)),
        operations=Operations(app, clock=clock),
        people=None,
        clock=clock,
        worker_id="test-worker",
        new_id=lambda: f"id{next(_ids)}",
        telemetry=telemetry,
    )


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
    app: Handrail, rec: Recording
) -> None:
    services = _services(app, rec.telemetry)
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
    app: Handrail, rec: Recording
) -> None:
    services = _services(app, rec.telemetry)
    async with asgi_client(create_app(services)) as client:
        answer = await client.post(
            "/v1/calls/anthropic", json=_turn("x"), headers={"traceparent": REMOTE.traceparent}
        )

    assert answer.status_code == 401
    request = rec.named("POST /v1/calls/{wire}")
    assert (request.attributes or {})[attributes.HTTP_RESPONSE_STATUS_CODE] == 401
    assert request.status.status_code is StatusCode.UNSET
    assert [s.name for s in rec.spans()] == ["POST /v1/calls/{wire}"]  # nothing ran


async def test_health_probes_make_no_spans(app: Handrail, rec: Recording) -> None:
    async with asgi_client(create_app(_services(app, rec.telemetry))) as client:
        assert (await client.get("/healthz")).status_code == 200
        assert (await client.get("/readyz")).status_code == 200

    assert rec.spans() == ()


async def test_without_telemetry_no_tracing_middleware_is_in_the_stack(
    app: Handrail, rec: Recording
) -> None:
    traced = create_app(_services(app, rec.telemetry))
    plain = create_app(_services(app, None))

    assert TraceRequests in [m.cls for m in traced.user_middleware]
    assert TraceRequests not in [m.cls for m in plain.user_middleware]
    assert len(plain.user_middleware) == len(traced.user_middleware) - 1
