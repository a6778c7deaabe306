"""Shared parts of the MCP-over-HTTP tests: a real uvicorn on 127.0.0.1, keys, JWTs, clients.

`running(make_app)` binds a free port on 127.0.0.1 first (so the resource URL and the
allowed Host are known before the app is built), serves the app on that socket with
uvicorn in a thread, and stops it on exit. There is no readiness wait to get wrong:
the socket already listens, so a client's connection waits in its backlog until the
server accepts. `Signer` makes real JWTs with keys drawn by `cryptography`, and writes
their JWKS. `App` is a Handrail application whose tools record every call, so a test
can prove nothing ran.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import httpx2
import jwt
import mcp_types as types
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from starlette.types import ASGIApp

from handrail import FromPrincipal, Handrail, Registry, RiskLevel, tool
from handrail.app import MEMORY
from handrail.mcp.http import uvicorn_server

HOST = "127.0.0.1"
WAIT_S = 60.0
"""Every wait's bound: generous, so it trips only on a real bug, even on a loaded machine."""

NOTES = {"t1": ["t1 plans the merger"], "t2": ["t2 sells the farm"]}


@dataclass
class Served:
    """A running server: its base URL and resource URL (the audience of its tokens)."""

    base: str
    resource_url: str
    port: int


@contextmanager
def running(make_app: Callable[[str], ASGIApp]) -> Iterator[Served]:
    """Serve `make_app(resource_url)` with uvicorn on a free port of 127.0.0.1 until exit."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((HOST, 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    base = f"http://{HOST}:{port}"
    served = Served(base=base, resource_url=f"{base}/mcp", port=port)
    server = uvicorn_server(make_app(served.resource_url), host=HOST, port=port, graceful_seconds=5)
    failure: list[BaseException] = []

    def serve() -> None:
        try:
            asyncio.run(server.serve(sockets=[sock]))
        except BaseException as exc:  # noqa: BLE001 - reported to the test below
            failure.append(exc)

    thread = threading.Thread(target=serve, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    try:
        yield served
    finally:
        server.should_exit = True
        thread.join(WAIT_S)
        sock.close()
    assert not thread.is_alive(), "uvicorn did not stop"
    assert not failure, failure


# --- the application ---------------------------------------------------------------------------


@dataclass
class App:
    """A Handrail application whose tools record each call they run."""

    handrail: Handrail
    calls: list[tuple[str, str]] = field(default_factory=list)


def build_app() -> App:
    """Tools: `notes.mine` (the tenant's notes), `notes.echo` (recorded), `notes.admin_stats`."""
    calls: list[tuple[str, str]] = []

    @tool(risk=RiskLevel.L1_INTERNAL_READ, namespace="notes")
    def mine(tenant: Annotated[str, FromPrincipal("tenant_id")]) -> list[str]:
        """The caller's tenant's notes."""
        calls.append(("mine", tenant))
        return NOTES.get(tenant, [])

    @tool(risk=RiskLevel.L0_PUBLIC_READ, namespace="notes")
    def echo(text: str, user: Annotated[str, FromPrincipal("user_id")]) -> str:
        """Say the text back."""
        calls.append(("echo", user))
        return text

    @tool(risk=RiskLevel.L1_INTERNAL_READ, namespace="notes", permissions=["notes.admin"])
    def admin_stats(tenant: Annotated[str, FromPrincipal("tenant_id")]) -> dict[str, int]:
        """How many notes the tenant has (admins only)."""
        calls.append(("admin_stats", tenant))
        return {"notes": len(NOTES.get(tenant, []))}

    registry = Registry()
    for made in (mine, echo, admin_stats):
        registry.register(made)
    return App(handrail=Handrail.open(MEMORY, registry=registry, audit=False), calls=calls)


# --- clients -----------------------------------------------------------------------------------


@asynccontextmanager
async def client(url: str, token: str | None, **headers: str) -> AsyncIterator[Client]:
    """The SDK's client over Streamable HTTP, sending `token` as a bearer token."""
    sent = dict(headers)
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    timeout = httpx2.Timeout(WAIT_S)
    async with httpx2.AsyncClient(headers=sent, timeout=timeout) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, cache=None, read_timeout_seconds=WAIT_S) as connected:
            yield connected


async def tool_names(url: str, token: str) -> list[str]:
    """The names a client with `token` is offered."""
    async with client(url, token) as c:
        listed = await c.list_tools()
    return sorted(t.name for t in listed.tools)


def text_of(result: types.CallToolResult) -> str:
    """The text blocks of a result, joined."""
    return "".join(b.text for b in result.content if isinstance(b, types.TextContent))


# --- JWTs --------------------------------------------------------------------------------------


@dataclass
class Signer:
    """Signing keys drawn here (RSA, P-256, Ed25519) and the JWKS of their public halves."""

    issuer: str = "https://idp.example.test"
    rsa_key: rsa.RSAPrivateKey = field(
        default_factory=lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048)
    )
    ec_key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )
    ed_key: ed25519.Ed25519PrivateKey = field(default_factory=ed25519.Ed25519PrivateKey.generate)

    def jwks(self) -> dict[str, Any]:
        """The public keys as a JWKS, each with its `kid`."""
        keys = [
            RSAAlgorithm.to_jwk(self.rsa_key.public_key(), as_dict=True) | {"kid": "rsa"},
            ECAlgorithm.to_jwk(self.ec_key.public_key(), as_dict=True) | {"kid": "ec"},
            OKPAlgorithm.to_jwk(self.ed_key.public_key(), as_dict=True) | {"kid": "ed"},
        ]
        return {"keys": keys}

    def write_jwks(self, path: Path) -> Path:
        """Write the JWKS to `path`."""
        path.write_text(json.dumps(self.jwks()), encoding="utf-8")
        return path

    def token(
        self,
        audience: str,
        *,
        alg: str = "RS256",
        kid: str | None = None,
        lifetime: float = 600.0,
        now: float | None = None,
        **claims: Any,
    ) -> str:
        """A JWT for `audience` signed with the key of `alg`; claims override the defaults."""
        at = time.time() if now is None else now
        payload: dict[str, Any] = {
            "iss": self.issuer,
            "aud": audience,
            "sub": "alice",
            "tenant": "t1",
            "scope": "notes.admin",
            "iat": int(at),
            "nbf": int(at),
            "exp": int(at + lifetime),
        }
        payload.update(claims)
        payload = {k: v for k, v in payload.items() if v is not None}
        key: Any = {"RS256": self.rsa_key, "ES256": self.ec_key, "EdDSA": self.ed_key}[alg]
        default_kid = {"RS256": "rsa", "ES256": "ec", "EdDSA": "ed"}[alg]
        return jwt.encode(payload, key, algorithm=alg, headers={"kid": kid or default_kid})
