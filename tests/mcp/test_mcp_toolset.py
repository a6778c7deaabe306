"""GatedServer's per-session toolset, driven by the official SDK client in-process.

Two handshake-era sessions of one server: what one session's `search_tools` found is
listed and callable there alone, and `notifications/tools/list_changed` reaches that
session only; another tenant (or another caller on the same session) never sees it;
a loaded skill narrows its session's list; over Streamable HTTP each session (its
Mcp-Session-Id) keeps its own. A 2026-era request has no session. Every wait is
bounded by WAIT, which only a real bug trips.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import anyio
import httpx2
import pytest
from mcp.client.streamable_http import streamable_http_client
from starlette.types import ASGIApp

from _mcp_http import running
from _toolset_tools import Catalogue, Heard, error_code, library, register_catalogue
from handrail import Handrail, MemoryAuditSink, Principal, Registry
from handrail.app import MEMORY
from handrail.mcp import GatedServer
from handrail.mcp.auth import ApiKeyAuthenticator, principal_from_request
from handrail.mcp.http import http_app
from handrail.mcp.keys import ApiKeys
from handrail.store import MemoryStore
from mcp import Client

pytestmark = pytest.mark.anyio

WAIT = 30.0
ALICE = Principal(user_id="alice", tenant_id="t1")
BOB = Principal(user_id="bob", tenant_id="t1")
MALLORY = Principal(user_id="mallory", tenant_id="t2")
CORE = {"search_tools", "load_skill", "shown_tool"}


@pytest.fixture
def sink() -> MemoryAuditSink:
    return MemoryAuditSink()


@pytest.fixture
def app(sink: MemoryAuditSink) -> Iterator[Handrail]:
    registry = Registry()
    catalogue = Catalogue(
        found={"billing": ["billing_lookup"], "everything": ["t2_export", "audit_log", "wipe_all"]},
        claims={"billing": ["shown_tool"], "audit": ["shown_tool"]},
    )
    register_catalogue(registry, catalogue)
    with Handrail.open(MEMORY, registry=registry, audit=sink) as opened:
        yield opened


async def _names(client: Client) -> set[str]:
    return {t.name for t in (await client.list_tools()).tools}


async def test_a_search_shows_its_tool_to_its_own_session_only(
    app: Handrail, sink: MemoryAuditSink
) -> None:
    server = GatedServer(app, principal=lambda: ALICE)
    one, two = Heard(), Heard()
    async with (
        Client(server.lowlevel, mode="legacy", message_handler=one) as first,
        Client(server.lowlevel, mode="legacy", message_handler=two) as second,
    ):
        assert await _names(first) == await _names(second) == CORE
        # Called directly before any search: not a tool this session knows.
        assert (
            error_code(await first.call_tool("billing_lookup", {"account": "a-1"}))
            == "UNKNOWN_TOOL"
        )
        found = await first.call_tool("search_tools", {"query": "billing"})
        assert error_code(found) is None
        with anyio.fail_after(WAIT):
            await one.arrived.wait()
        assert await _names(first) == CORE | {"billing_lookup"}
        assert error_code(await first.call_tool("billing_lookup", {"account": "a-1"})) is None
        # The other session: nothing listed, nothing callable, nothing heard.
        assert await _names(second) == CORE
        assert (
            error_code(await second.call_tool("billing_lookup", {"account": "a"})) == "UNKNOWN_TOOL"
        )
        # A search that finds nothing new changes nothing and tells nobody.
        await first.call_tool("search_tools", {"query": "billing"})
        await first.call_tool("search_tools", {"query": "everything"})
        assert await _names(first) == CORE | {"billing_lookup"}
    assert (one.count, two.count) == (1, 0)
    (event,) = [e for e in sink.events if e.kind == "toolset"]
    assert (event.stage, event.tool, event.user_id, event.tenant_id) == (
        "discovered",
        "search_tools",
        "alice",
        "t1",
    )
    assert event.detail == '{"names": ["billing_lookup"], "over": "mcp"}'
    server.close()


async def test_another_caller_on_the_same_session_sees_none_of_it(app: Handrail) -> None:
    caller = [ALICE]
    server = GatedServer(app, principal=lambda: caller[0])
    async with Client(server.lowlevel, mode="legacy") as client:
        await client.call_tool("search_tools", {"query": "billing"})
        assert "billing_lookup" in await _names(client)
        for other in (BOB, MALLORY):
            caller[0] = other
            assert await _names(client) == CORE
            result = await client.call_tool("billing_lookup", {"account": "a-1"})
            assert error_code(result) == "UNKNOWN_TOOL"
        caller[0] = ALICE
        assert "billing_lookup" in await _names(client)
    server.close()


async def test_a_loaded_skill_narrows_its_sessions_list(
    app: Handrail, sink: MemoryAuditSink
) -> None:
    heard = Heard()
    server = GatedServer(app, principal=lambda: ALICE, skills=library())
    async with (
        Client(server.lowlevel, mode="legacy", message_handler=heard) as client,
        Client(server.lowlevel, mode="legacy") as other,
    ):
        result = await client.call_tool("load_skill", {"name": "billing"})
        assert error_code(result) is None
        with anyio.fail_after(WAIT):
            await heard.arrived.wait()
        # The library's tools, not the envelope's claim (shown_tool).
        assert await _names(client) == {"billing_lookup", "search_tools", "load_skill"}
        assert error_code(await client.call_tool("shown_tool", {})) == "UNKNOWN_TOOL"
        assert await _names(other) == CORE
        # A skill whose tools the principal may not use leaves only the catalogue tools.
        await client.call_tool("load_skill", {"name": "audit"})
        assert await _names(client) == {"billing_lookup", "search_tools", "load_skill"}
    skills = [e.detail for e in sink.events if e.kind == "toolset" and e.stage == "skill"]
    assert skills == [
        '{"names": ["billing"], "over": "mcp"}',
        '{"names": ["audit"], "over": "mcp"}',
    ]
    server.close()


async def test_a_2026_request_has_no_session_and_keeps_no_discovery(app: Handrail) -> None:
    server = GatedServer(app, principal=lambda: ALICE)
    async with Client(server.lowlevel, mode="auto") as client:
        result = await client.call_tool("search_tools", {"query": "billing"})
        assert error_code(result) is None
        assert await _names(client) == CORE
        assert (
            error_code(await client.call_tool("billing_lookup", {"account": "a"})) == "UNKNOWN_TOOL"
        )
    server.close()


@asynccontextmanager
async def _http_session(url: str, key: str) -> AsyncIterator[Client]:
    """One handshake-era session over Streamable HTTP (its own Mcp-Session-Id)."""
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(WAIT)) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode="legacy", read_timeout_seconds=WAIT) as connected:
            yield connected


async def test_two_http_sessions_of_one_principal_keep_their_own_discoveries(
    app: Handrail,
) -> None:
    keys = ApiKeys(MemoryStore(), audit=None)
    key = keys.create(ALICE).key

    def make(resource_url: str) -> ASGIApp:
        server = GatedServer(app, principal=principal_from_request)
        return http_app(server, ApiKeyAuthenticator(keys), resource_url=resource_url)

    with running(make) as served, anyio.fail_after(WAIT):
        async with (
            _http_session(served.resource_url, key) as first,
            _http_session(served.resource_url, key) as second,
        ):
            await first.call_tool("search_tools", {"query": "billing"})
            assert await _names(first) == CORE | {"billing_lookup"}
            assert error_code(await first.call_tool("billing_lookup", {"account": "a"})) is None
            assert await _names(second) == CORE
            result = await second.call_tool("billing_lookup", {"account": "a"})
            assert error_code(result) == "UNKNOWN_TOOL"
