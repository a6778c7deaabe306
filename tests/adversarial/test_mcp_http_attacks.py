"""Attacks on the MCP server over HTTP: each refused with its status, nothing runs, service goes on.

Every request below asks to run a tool that records its calls. Without a usable
credential (none, malformed, a revoked or expired key, a JWT for another audience or
issuer, expired, unsigned, HS256 signed with the public key, signed by a key outside
the JWKS) the answer is 401 with `WWW-Authenticate: Bearer`; a browser Origin that is
not allowed is 403 and a Host that is not this server's is 421 (DNS rebinding), even
with a good token; a session opened by one principal is not found for another. After
each, the tool has never run, and a good client is still served.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import anyio
import httpx2
import pytest
from cryptography.hazmat.primitives import serialization
from mcp.shared.exceptions import MCPError
from starlette.types import ASGIApp

from _mcp_http import WAIT_S, App, Served, Signer, build_app, client, running, text_of
from handrail.clock import FixedClock
from handrail.mcp.auth import (
    ApiKeyAuthenticator,
    FirstOf,
    JwtAuthenticator,
    principal_from_request,
)
from handrail.mcp.http import http_app
from handrail.mcp.keys import ApiKeys
from handrail.mcp.server import GatedServer
from handrail.principal import Principal
from handrail.store import MemoryStore

pytestmark = pytest.mark.anyio

ALICE = Principal(user_id="alice", tenant_id="t1", permissions=frozenset({"notes.admin"}))
BOB = Principal(user_id="bob", tenant_id="t2")
CALL = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {"name": "notes.echo", "arguments": {"text": "pwned"}},
}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "attacker", "version": "1"},
    },
}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


class World:
    """One server for the module: its app, key store, signers and clock."""

    def __init__(self, tmp: Path) -> None:
        self.app: App = build_app()
        self.clock = FixedClock()
        self.store = MemoryStore()
        self.keys = ApiKeys(self.store, audit=None)
        self.signer = Signer()
        self.stranger = Signer()  # same issuer, keys outside the JWKS
        self.jwks = self.signer.write_jwks(tmp / "jwks.json")
        self.served: Served

    def make(self, resource_url: str) -> ASGIApp:
        jwt_auth = JwtAuthenticator.from_file(
            self.jwks, issuer=self.signer.issuer, audience=resource_url
        )
        server = GatedServer(self.app.handrail, principal=principal_from_request)
        return http_app(
            server, FirstOf(ApiKeyAuthenticator(self.keys), jwt_auth), resource_url=resource_url
        )


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    made = World(tmp_path_factory.mktemp("jwks"))
    with running(made.make) as served:
        made.served = served
        yield made
    made.app.handrail.close()


@pytest.fixture(autouse=True)
def _fresh_calls(world: World) -> None:
    world.app.calls.clear()


async def _post(
    world: World, body: object, *, headers: dict[str, str], url: str | None = None
) -> httpx2.Response:
    with anyio.fail_after(WAIT_S):
        async with httpx2.AsyncClient(timeout=WAIT_S) as http:
            return await http.post(
                url or world.served.resource_url,
                content=json.dumps(body),
                headers=ACCEPT | headers,
            )


async def _still_serves(world: World) -> None:
    key = world.keys.create(ALICE).key
    with anyio.fail_after(WAIT_S):
        async with client(world.served.resource_url, key) as c:
            result = await c.call_tool("notes.echo", {"text": "fine"})
    assert "fine" in text_of(result)
    assert world.app.calls == [("echo", "alice")]


def _hs256_with(secret: bytes, claims: dict[str, object]) -> str:
    def b64(data: bytes) -> bytes:
        return base64.urlsafe_b64encode(data).rstrip(b"=")

    signing = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "rsa"}).encode())
    signing += b"." + b64(json.dumps(claims).encode())
    return (signing + b"." + b64(hmac.new(secret, signing, hashlib.sha256).digest())).decode()


def _unsigned(claims: dict[str, object]) -> str:
    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    header = json.dumps({"alg": "none", "typ": "JWT"}).encode()
    return f"{b64(header)}.{b64(json.dumps(claims).encode())}."


def _claims(world: World, **changes: object) -> dict[str, object]:
    now = int(time.time())  # wall time, as the token's issuer would use
    claims: dict[str, object] = {
        "iss": world.signer.issuer,
        "aud": world.served.resource_url,
        "sub": "mallory",
        "tenant": "t1",
        "exp": now + 600,
    }
    claims.update(changes)
    return claims


def _revoked(world: World) -> str:
    created = world.keys.create(ALICE)
    world.keys.revoke(created.record.key_id, tenant_id="t1")
    return created.key


def _expired_key(world: World) -> str:
    # Made on a clock in early 2026, expiring a second later; the server checks on the real one.
    keys = ApiKeys(world.store, clock=world.clock, audit=None)
    return keys.create(ALICE, expires_at=world.clock.now() + timedelta(seconds=1)).key


def _public_pem(world: World) -> bytes:
    return world.signer.rsa_key.public_key().public_bytes(
        encoding=serialization.Encoding.PEM,
        format=serialization.PublicFormat.SubjectPublicKeyInfo,
    )


BAD_CREDENTIALS: dict[str, Callable[[World], dict[str, str]]] = {
    "no token": lambda w: {},
    "basic scheme": lambda w: {"Authorization": "Basic YWxpY2U6c2VjcmV0"},
    "bare bearer": lambda w: {"Authorization": "Bearer"},
    "bearer without a space": lambda w: {"Authorization": "Bearer" + w.keys.create(ALICE).key},
    "two spaces": lambda w: {"Authorization": "Bearer  " + w.keys.create(ALICE).key},
    "garbage": lambda w: {"Authorization": "Bearer hrk_" + "z" * 60},
    "huge token": lambda w: {"Authorization": "Bearer " + "a" * 20_000},
    "revoked key": lambda w: {"Authorization": "Bearer " + _revoked(w)},
    "expired key": lambda w: {"Authorization": "Bearer " + _expired_key(w)},
    "wrong audience": lambda w: {
        "Authorization": "Bearer " + w.signer.token("http://127.0.0.1:1/mcp", sub="mallory")
    },
    "wrong issuer": lambda w: {
        "Authorization": "Bearer "
        + w.signer.token(w.served.resource_url, iss="https://evil.example.test")
    },
    "expired jwt": lambda w: {
        "Authorization": "Bearer " + w.signer.token(w.served.resource_url, lifetime=-120)
    },
    "alg none": lambda w: {"Authorization": "Bearer " + _unsigned(_claims(w))},
    "hs256 with the public key": lambda w: {
        "Authorization": "Bearer " + _hs256_with(_public_pem(w), _claims(w))
    },
    "key from another jwks": lambda w: {
        "Authorization": "Bearer " + w.stranger.token(w.served.resource_url, kid="rsa")
    },
}


@pytest.mark.parametrize("case", sorted(BAD_CREDENTIALS))
async def test_a_request_without_a_usable_credential_is_401_and_runs_nothing(
    world: World, case: str
) -> None:
    answer = await _post(world, CALL, headers=BAD_CREDENTIALS[case](world))
    assert answer.status_code == 401, answer.text
    challenge = answer.headers["www-authenticate"]
    assert challenge.startswith("Bearer ")
    assert 'error="invalid_token"' in challenge
    assert "resource_metadata=" in challenge
    assert world.app.calls == []
    await _still_serves(world)


async def test_the_sdk_client_without_a_token_is_refused_and_nothing_runs(world: World) -> None:
    with anyio.fail_after(WAIT_S), pytest.raises(ExceptionGroup) as refused:
        async with client(world.served.resource_url, None) as c:
            await c.call_tool("notes.echo", {"text": "pwned"})
    assert refused.group_contains(MCPError)
    assert world.app.calls == []
    await _still_serves(world)


async def test_a_revoked_key_stops_working_in_the_middle_of_a_session(world: World) -> None:
    created = world.keys.create(ALICE)
    with anyio.fail_after(WAIT_S):
        async with client(world.served.resource_url, created.key) as c:
            assert (await c.list_tools()).tools
            world.keys.revoke(created.record.key_id, tenant_id="t1")
            with pytest.raises(MCPError):
                await c.call_tool("notes.echo", {"text": "pwned"})
    assert world.app.calls == []
    await _still_serves(world)


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"Origin": "http://evil.example.test"}, 403),
        ({"Origin": "null"}, 403),
        ({"Host": "evil.example.test"}, 421),
        ({"Host": "127.0.0.1:1"}, 421),
        ({"Host": "evil.example.test", "Origin": "http://evil.example.test"}, 421),
    ],
)
async def test_dns_rebinding_is_refused_even_with_a_good_token(
    world: World, headers: dict[str, str], status: int
) -> None:
    key = world.keys.create(ALICE).key
    for credentials in ({"Authorization": f"Bearer {key}"}, {}):
        answer = await _post(world, CALL, headers=headers | credentials)
        assert answer.status_code == status, answer.text
    assert world.app.calls == []
    await _still_serves(world)


async def test_a_session_is_not_found_for_another_principal(world: World) -> None:
    alice, bob = world.keys.create(ALICE).key, world.keys.create(BOB).key
    opened = await _post(world, INITIALIZE, headers={"Authorization": f"Bearer {alice}"})
    assert opened.status_code == 200, opened.text
    session = opened.headers["mcp-session-id"]
    hijack = await _post(
        world, CALL, headers={"Authorization": f"Bearer {bob}", "mcp-session-id": session}
    )
    assert hijack.status_code == 404
    assert world.app.calls == []
    await _still_serves(world)
