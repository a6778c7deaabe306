"""One principal cannot take every Streamable HTTP session of the server.

The SDK bounds sessions for the whole server (10 000) and keeps idle ones for half an
hour, so one valid key opening sessions in a loop locked every other tenant out. Now
each principal holds at most SESSIONS_PER_PRINCIPAL open sessions: the next is a 503,
another principal still opens one, and ending one of its sessions frees a place.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import anyio
import httpx2
import pytest
from starlette.types import ASGIApp

from _mcp_http import WAIT_S, App, Served, build_app, running
from handrail.mcp._guards import SESSIONS_PER_PRINCIPAL
from handrail.mcp.auth import ApiKeyAuthenticator, principal_from_request
from handrail.mcp.http import http_app
from handrail.mcp.keys import ApiKeys
from handrail.mcp.server import GatedServer
from handrail.principal import Principal
from handrail.store import MemoryStore

pytestmark = pytest.mark.anyio

ALICE = Principal(user_id="alice", tenant_id="t1")
BOB = Principal(user_id="bob", tenant_id="t2")
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "greedy", "version": "1"},
    },
}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture
def world() -> Iterator[tuple[App, ApiKeys, Served]]:
    app = build_app()
    keys = ApiKeys(MemoryStore(), audit=None)

    def make(resource_url: str) -> ASGIApp:
        server = GatedServer(app.handrail, principal=principal_from_request)
        return http_app(server, ApiKeyAuthenticator(keys), resource_url=resource_url)

    with running(make) as served:
        yield app, keys, served
    app.handrail.close()


async def _open(http: httpx2.AsyncClient, url: str, key: str) -> httpx2.Response:
    headers = ACCEPT | {"Authorization": f"Bearer {key}"}
    async with http.stream("POST", url, content=json.dumps(INITIALIZE), headers=headers) as answer:
        await answer.aread()
        return answer


async def test_a_principal_holds_a_bounded_number_of_sessions_and_others_still_get_one(
    world: tuple[App, ApiKeys, Served],
) -> None:
    _, keys, served = world
    alice, bob = keys.create(ALICE).key, keys.create(BOB).key
    with anyio.fail_after(WAIT_S * 2):
        async with httpx2.AsyncClient(timeout=WAIT_S) as http:
            opened = [
                await _open(http, served.resource_url, alice) for _ in range(SESSIONS_PER_PRINCIPAL)
            ]
            refused = await _open(http, served.resource_url, alice)
            other = await _open(http, served.resource_url, bob)
            session = opened[0].headers["mcp-session-id"]
            ended = await http.delete(
                served.resource_url,
                headers={"Authorization": f"Bearer {alice}", "Mcp-Session-Id": session},
            )
            again = await _open(http, served.resource_url, alice)

    assert [answer.status_code for answer in opened] == [200] * SESSIONS_PER_PRINCIPAL
    assert refused.status_code == 503
    assert other.status_code == 200
    assert ended.status_code == 200
    assert again.status_code == 200
