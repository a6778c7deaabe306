"""Handrail's MCP server over Streamable HTTP, served by a real uvicorn on 127.0.0.1.

The SDK's own client connects with an API key from the store or a JWT signed by a key
of the configured JWKS, lists and calls tools through the gate; each principal sees
only its own tenant's tools and data, two tenants at once on one server; the
protected-resource metadata names this server; the tool gets the principal the token
stands for, never one from its arguments.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp.client.client import Client
from mcp.server.lowlevel.server import Server
from starlette.applications import Starlette
from starlette.testclient import TestClient
from starlette.types import ASGIApp

from _mcp_http import WAIT_S, App, Served, Signer, build_app, client, running, text_of
from handrail.errors import ConfigurationError
from handrail.mcp.auth import (
    ApiKeyAuthenticator,
    FirstOf,
    JwtAuthenticator,
    principal_from_request,
)
from handrail.mcp.http import http_app, serve_http
from handrail.mcp.keys import ApiKeys
from handrail.mcp.server import GatedServer
from handrail.principal import Principal
from handrail.store import MemoryStore

ALICE = Principal(user_id="alice", tenant_id="t1", permissions=frozenset({"notes.admin"}))
BOB = Principal(user_id="bob", tenant_id="t2")


@pytest.fixture
def app() -> Iterator[App]:
    made = build_app()
    yield made
    made.handrail.close()


@pytest.fixture
def keys() -> ApiKeys:
    return ApiKeys(MemoryStore(), audit=None)


@pytest.fixture
def signer() -> Signer:
    return Signer()


@pytest.fixture
def served(app: App, keys: ApiKeys, signer: Signer, tmp_path: Path) -> Iterator[Served]:
    jwks = signer.write_jwks(tmp_path / "jwks.json")

    def make(resource_url: str) -> ASGIApp:
        jwt_auth = JwtAuthenticator.from_file(jwks, issuer=signer.issuer, audience=resource_url)
        server = GatedServer(app.handrail, principal=principal_from_request)
        return http_app(
            server, FirstOf(ApiKeyAuthenticator(keys), jwt_auth), resource_url=resource_url
        )

    with running(make) as running_server:
        yield running_server


@pytest.mark.anyio
async def test_an_api_key_client_lists_and_calls_tools(
    served: Served, app: App, keys: ApiKeys
) -> None:
    key = keys.create(ALICE).key
    with anyio.fail_after(WAIT_S):
        async with client(served.resource_url, key) as c:
            listed = await c.list_tools()
            assert sorted(t.name for t in listed.tools) == [
                "notes.admin_stats",
                "notes.echo",
                "notes.mine",
            ]
            result = await c.call_tool("notes.mine", {})
    assert not result.is_error
    assert "t1 plans the merger" in text_of(result)
    assert app.calls == [("mine", "t1")]


@pytest.mark.anyio
async def test_a_jwt_client_lists_and_calls_tools(served: Served, app: App, signer: Signer) -> None:
    for alg in ("RS256", "ES256", "EdDSA"):
        token = signer.token(served.resource_url, alg=alg, sub=f"user-{alg}")
        with anyio.fail_after(WAIT_S):
            async with client(served.resource_url, token) as c:
                result = await c.call_tool("notes.echo", {"text": "hello"})
        assert not result.is_error, text_of(result)
        assert "hello" in text_of(result)
    assert app.calls == [("echo", "user-RS256"), ("echo", "user-ES256"), ("echo", "user-EdDSA")]


@pytest.mark.anyio
async def test_two_tenants_at_once_see_only_their_own_tools_and_data(
    served: Served, app: App, keys: ApiKeys, signer: Signer
) -> None:
    alice_key = keys.create(ALICE).key
    bob_token = signer.token(served.resource_url, sub="bob", tenant="t2", scope="")
    with anyio.fail_after(WAIT_S):
        async with (
            client(served.resource_url, alice_key) as alice,
            client(served.resource_url, bob_token) as bob,
        ):
            alice_tools = sorted(t.name for t in (await alice.list_tools()).tools)
            bob_tools = sorted(t.name for t in (await bob.list_tools()).tools)
            async with anyio.create_task_group() as group:
                results: dict[str, str] = {}

                async def call(name: str, connected: Client) -> None:
                    result = await connected.call_tool("notes.mine", {})
                    results[name] = text_of(result)

                for _ in range(5):
                    group.start_soon(call, "alice", alice)
                    group.start_soon(call, "bob", bob)
            refused = await bob.call_tool("notes.admin_stats", {})
            tenant_argument = await bob.call_tool("notes.mine", {"tenant": "t1"})
    assert "notes.admin_stats" in alice_tools
    assert "notes.admin_stats" not in bob_tools
    assert "t1 plans the merger" in results["alice"]
    assert "t2 sells the farm" in results["bob"]
    assert "t1" not in results["bob"]
    assert refused.is_error
    assert tenant_argument.is_error
    assert "t1 plans" not in text_of(tenant_argument)
    assert sorted(set(app.calls)) == [("mine", "t1"), ("mine", "t2")]


@pytest.mark.anyio
async def test_the_protected_resource_metadata_names_this_server(served: Served) -> None:
    with anyio.fail_after(WAIT_S):
        async with httpx2.AsyncClient(timeout=WAIT_S) as http:
            answer = await http.get(f"{served.base}/.well-known/oauth-protected-resource/mcp")
    assert answer.status_code == 200
    assert json.loads(answer.text)["resource"] == served.resource_url


def test_serve_http_serves_on_its_socket_until_stopped_then_shuts_down(
    app: App, keys: ApiKeys
) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    port = sock.getsockname()[1]
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    shut: list[str] = []

    async def on_shutdown() -> None:
        shut.append("closed")

    server = GatedServer(app.handrail, principal=principal_from_request)
    serving = serve_http(
        server, ApiKeyAuthenticator(keys), sock=sock, on_shutdown=on_shutdown, stop=stop
    )
    thread = threading.Thread(target=loop.run_until_complete, args=(serving,), daemon=True)
    thread.start()
    try:

        async def use() -> str:
            with anyio.fail_after(WAIT_S):
                async with client(f"http://127.0.0.1:{port}/mcp", keys.create(ALICE).key) as c:
                    return text_of(await c.call_tool("notes.echo", {"text": "served"}))

        assert "served" in anyio.run(use)
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(WAIT_S)
        loop.close()
        sock.close()
        server.close()
    assert not thread.is_alive()
    assert shut == ["closed"]


def _plain_app(resource_url: str, **options: Any) -> Starlette:
    server: Server[Any] = Server("bare")
    return http_app(server, FirstOf(_Nobody()), resource_url=resource_url, **options)


class _Nobody:
    async def authenticate(self, token: str) -> Principal | None:
        return None


@pytest.mark.parametrize(
    ("url", "options"),
    [
        ("ftp://127.0.0.1/mcp", {}),
        ("http:///mcp", {}),
        ("http://127.0.0.1:8765/mcp", {"authorization_server": "not a url"}),
    ],
)
def test_an_app_needs_http_urls(url: str, options: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        _plain_app(url, **options)


@pytest.mark.parametrize(
    ("url", "host", "status"),
    [
        ("http://127.0.0.1:8765/mcp", "127.0.0.1:8765", 401),
        ("http://127.0.0.1:8765/mcp", "localhost:8765", 401),
        ("http://127.0.0.1:8765/mcp", "[::1]:8765", 401),
        ("http://127.0.0.1:8765/mcp", "localhost:9999", 421),
        ("http://localhost:8765/mcp", "127.0.0.1:8765", 401),
        ("https://mcp.example.test/mcp", "mcp.example.test:443", 401),
        ("https://mcp.example.test/mcp", "mcp.example.test", 401),
        ("https://mcp.example.test/mcp", "127.0.0.1:443", 421),
        ("http://10.0.0.5:8000/mcp", "10.0.0.5:8000", 401),
        ("http://10.0.0.5:8000/mcp", "localhost:8000", 421),
    ],
)
def test_the_allowed_hosts_follow_the_resource_url(url: str, host: str, status: int) -> None:
    with TestClient(_plain_app(url), base_url=url.rsplit("/", 1)[0]) as http:
        answer = http.post("/mcp", json={}, headers={"Host": host})
    assert answer.status_code == status
