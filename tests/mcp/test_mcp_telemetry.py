"""Trace context through MCP: into the GatedServer and out of the proxy to its upstream.

In: a client in another process names its span in the request's `params._meta` (the
MCP convention, read by the SDK's own middleware) or, over Streamable HTTP, in a
`traceparent` header (read by `TraceRequests`, which makes the request's SERVER span);
`_meta` wins when both are sent. Out: the proxy's call upstream carries the span that
is current while the imported tool runs in its `_meta` (the SDK's client injects it).
The server runs in a uvicorn thread of its own, so nothing reaches it but the wire;
the clients here have no current span, so no context can leak in process either.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from starlette.types import ASGIApp

from _edge_traces import (
    INSIDE,
    OTHER,
    REMOTE,
    Recording,
    chain,
    root_parent,
)
from _mcp_http import client, running
from handrail import Handrail, Principal, ToolCall
from handrail.mcp.auth import ApiKeyAuthenticator, principal_from_request
from handrail.mcp.http import http_app
from handrail.mcp.keys import ApiKeys
from handrail.mcp.pins import PinBook
from handrail.mcp.policy import parse_policy
from handrail.mcp.proxy import McpProxy
from handrail.mcp.server import GatedServer, fixed_principal
from handrail.mcp.upstream import StdioUpstream, Upstream
from handrail.store import MemoryStore
from handrail.telemetry import Telemetry
from handrail.telemetry.propagation import TraceRequests
from mcp import Client

pytestmark = pytest.mark.anyio

ALICE = Principal(user_id="alice", tenant_id="t1")
WAIT = 60.0
UPSTREAM = Path(__file__).with_name("_traced_upstream.py")


@pytest.fixture
def keys() -> ApiKeys:
    return ApiKeys(MemoryStore(), audit=None)


def _meta(traceparent: str) -> types.RequestParamsMeta:
    return types.RequestParamsMeta(traceparent=traceparent)  # type: ignore[typeddict-unknown-key]


def _served(app: Handrail, keys: ApiKeys, telemetry: Telemetry | None) -> Any:
    def make(resource_url: str) -> ASGIApp:
        server = GatedServer(app, principal=principal_from_request)
        return http_app(
            server, ApiKeyAuthenticator(keys), resource_url=resource_url, telemetry=telemetry
        )

    return running(make)


async def _echo(
    url: str, token: str, meta: types.RequestParamsMeta | None = None, **headers: str
) -> None:
    async with client(url, token, **headers) as connected:
        with anyio.fail_after(WAIT):
            result = await connected.call_tool("edge.echo", {"text": "hi"}, meta=meta)
    assert result.is_error is False


async def test_a_traceparent_header_parents_the_request_span_and_the_call_under_it(
    traced: Handrail, keys: ApiKeys, rec: Recording
) -> None:
    token = keys.create(ALICE).key
    with _served(traced, keys, rec.telemetry) as served:
        await _echo(served.resource_url, token, traceparent=REMOTE.traceparent)

    spans = rec.spans()
    inside = rec.named(INSIDE)
    above = [s.name for s in chain(inside, spans)]
    assert above[-1] == "POST /mcp"
    assert root_parent(inside, spans) == REMOTE.span_id
    assert inside.context.trace_id == REMOTE.trace_id
    requests = [s for s in spans if s.name == "POST /mcp"]
    assert requests  # initialize, initialized, tools/call: each its own request span
    assert all(s.parent is not None and s.parent.span_id == REMOTE.span_id for s in requests)


async def test_a_traceparent_in_the_requests_meta_wins_over_the_header(
    traced: Handrail, keys: ApiKeys, rec: Recording
) -> None:
    token = keys.create(ALICE).key
    with _served(traced, keys, rec.telemetry) as served:
        await _echo(
            served.resource_url,
            token,
            meta=_meta(OTHER.traceparent),
            traceparent=REMOTE.traceparent,
        )

    inside = rec.named(INSIDE)
    assert inside.context.trace_id == OTHER.trace_id
    assert root_parent(inside, rec.spans()) == OTHER.span_id


async def test_the_meta_alone_parents_the_call_without_any_request_span(
    traced: Handrail, keys: ApiKeys, rec: Recording
) -> None:
    token = keys.create(ALICE).key
    with _served(traced, keys, None) as served:
        await _echo(served.resource_url, token, meta=_meta(OTHER.traceparent))

    inside = rec.named(INSIDE)
    assert root_parent(inside, rec.spans()) == OTHER.span_id
    assert not [s for s in rec.spans() if s.name.startswith("POST")]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_meta_parents_the_call_in_process_in_both_protocol_eras(
    traced: Handrail, rec: Recording, mode: str
) -> None:
    server = GatedServer(traced, principal=fixed_principal(ALICE))
    async with Client(server.lowlevel, mode=mode, cache=None) as connected:
        with anyio.fail_after(WAIT):
            await connected.call_tool("edge.echo", {"text": "hi"}, meta=_meta(OTHER.traceparent))
    server.close()

    inside = rec.named(INSIDE)
    assert inside.context.trace_id == OTHER.trace_id
    assert root_parent(inside, rec.spans()) == OTHER.span_id


def test_without_telemetry_the_http_app_has_no_tracing_middleware(
    traced: Handrail, keys: ApiKeys, rec: Recording
) -> None:
    def built(telemetry: Telemetry | None) -> list[object]:
        server = GatedServer(traced, principal=principal_from_request)
        made = http_app(
            server,
            ApiKeyAuthenticator(keys),
            resource_url="http://127.0.0.1:9/mcp",
            telemetry=telemetry,
        )
        server.close()
        return [m.cls for m in made.user_middleware]

    assert TraceRequests in built(rec.telemetry)
    assert TraceRequests not in built(None)


# --- out: the proxy to its upstream ----------------------------------------------------------


async def test_the_proxy_sends_the_span_current_while_its_tool_runs_upstream_in_the_meta(
    traced: Handrail, rec: Recording
) -> None:
    proxy = McpProxy(
        Upstream(StdioUpstream(command=sys.executable, args=(str(UPSTREAM),))),
        parse_policy({"unlisted": "hide", "tools": {"trace": {"risk": "L1"}}}),
        PinBook(MemoryStore()),
        traced.registry,
        namespace="up",
        approve_new=True,
    )
    try:
        await proxy.sync()
        with rec.telemetry.tracer.start_as_current_span("host turn"):
            envelope = await traced.gate.handle(
                ToolCall(id="c1", name="up.trace", arguments={}), ALICE
            )
    finally:
        await proxy.aclose()

    assert envelope.status.value == "ok", envelope
    assert isinstance(envelope.data, dict)
    sent = envelope.data["traceparent"]
    _, trace_id, span_id, _ = sent.split("-")
    turn = rec.named("host turn")
    assert int(trace_id, 16) == turn.context.trace_id
    # The span it names is the turn, or one the gate made under it (its call, its stage).
    named = [s for s in rec.spans() if s.context.span_id == int(span_id, 16)]
    assert len(named) == 1
    assert "host turn" in [s.name for s in chain(named[0], rec.spans())]
