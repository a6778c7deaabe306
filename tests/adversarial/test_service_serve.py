"""Attacks on the service's HTTP face, against a real uvicorn on 127.0.0.1.

Oversized bodies (declared or streamed), bodies and headers trickled slowly, oversized
and malformed headers (CR/LF injection), and missing, forged, expired and revoked
credentials: each is refused with its code, runs no tool, and the service stays up.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "server"))  # the service's test helpers
from _running import READ_TURN, STARTUP_S, exchange, raw_connection, read_until_closed, running
from _service import build_services, key_for

from handrail.clock import FixedClock
from handrail.mcp.keys import ApiKeys
from handrail.principal import Principal
from handrail.server.services import Services
from handrail.store import open_store

pytestmark = pytest.mark.anyio

READER = frozenset({"order.read"})
PATH = "/v1/calls/anthropic"
TURN = json.dumps(READ_TURN).encode()
MAX_BODY = 4096


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Services]:
    store = open_store(tmp_path / "handrail.db")
    built = build_services(store, tmp_path)
    try:
        yield built
    finally:
        built.handrail.close()
        store.close()


@pytest.fixture
async def url(services: Services) -> AsyncIterator[str]:
    async with running(services, max_body_bytes=MAX_BODY, request_timeout_seconds=1.0) as base:
        yield base


def executed(services: Services) -> int:
    """How many tool calls ran (their `execute` audit events)."""
    sink = services.handrail.audit
    assert sink is not None
    sink.flush()  # type: ignore[attr-defined]
    events = services.handrail.store.read_audit(limit=1000, tenant_id="acme")
    return sum(1 for e in events if e.stage == "execute")


async def still_up(base: str, services: Services) -> None:
    """The service answers, and a proper call still runs."""
    token = key_for(services, user="checker", permissions=READER)
    async with httpx.AsyncClient(base_url=base) as client:
        assert (await client.get("/healthz")).status_code == 200
        answer = await client.post(
            PATH,
            content=TURN,
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
    assert answer.json()["envelopes"][0]["status"] == "ok"


async def test_a_declared_oversized_body_is_413_before_it_is_sent(
    url: str, services: Services
) -> None:
    token = key_for(services, permissions=READER)
    answer = await exchange(
        url,
        f"POST {PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {100 * 1024 * 1024}\r\n\r\n".encode(),
    )
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert b'"PAYLOAD_TOO_LARGE"' in answer
    assert executed(services) == 0
    await still_up(url, services)


async def test_a_streamed_oversized_body_is_413(url: str, services: Services) -> None:
    token = key_for(services, permissions=READER)

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(64):
            yield b" " * 1024

    async with httpx.AsyncClient(base_url=url) as client:
        try:
            answer = await client.post(
                PATH,
                content=chunks(),
                headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            )
        except httpx.TransportError:
            answer = None  # the server may close before the client finished sending
    if answer is not None:
        assert answer.status_code == 413
        assert answer.json()["error"]["code"] == "PAYLOAD_TOO_LARGE"
    assert executed(services) == 0
    await still_up(url, services)


async def test_a_body_that_stops_arriving_is_408_and_the_connection_closes(
    url: str, services: Services
) -> None:
    token = key_for(services, permissions=READER)
    answer = await exchange(
        url,
        f"POST {PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(TURN)}\r\n\r\n".encode()
        + TURN[:10],
    )
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert b'"TIMEOUT"' in answer
    assert executed(services) == 0
    await still_up(url, services)


async def test_a_request_head_that_never_ends_is_cut_off(url: str, services: Services) -> None:
    reader, writer = await raw_connection(url)
    writer.write(f"POST {PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode())
    await writer.drain()
    assert await read_until_closed(reader) == b""
    writer.close()
    await still_up(url, services)


async def test_a_head_trickled_byte_by_byte_is_cut_off_too(url: str, services: Services) -> None:
    reader, writer = await raw_connection(url)
    head = f"POST {PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: {'a' * 10_000}".encode()

    async def trickle() -> None:
        for byte in head:
            writer.write(bytes([byte]))
            try:
                await writer.drain()
            except ConnectionError:
                return
            await asyncio.sleep(0.05)

    sender = asyncio.create_task(trickle())
    try:
        assert await read_until_closed(reader) == b""
    finally:
        sender.cancel()
        writer.close()
    assert not sender.done() or sender.cancelled() or sender.exception() is None
    await still_up(url, services)


async def test_an_oversized_head_is_refused(url: str, services: Services) -> None:
    answer = await exchange(
        url,
        f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        f"X-Big: {'a' * 40_000}\r\n\r\n".encode(),
    )
    assert answer.startswith(b"HTTP/1.1 431 ")
    assert b'"PAYLOAD_TOO_LARGE"' in answer
    await still_up(url, services)


@pytest.mark.parametrize(
    ("header", "status"),
    [
        (b"X-A: a\rb", b"400"),
        (b"X-A: a\x00b", b"400"),
        (b"Handrail-Conversation: c\r", b"400"),
        (b"Bad Name: x", b"400"),
        # An obs-fold continues the line before it: here the bearer, which then proves nothing.
        (b" X-Folded: continued", b"401"),
    ],
)
async def test_malformed_header_lines_are_refused_and_run_nothing(
    url: str, services: Services, header: bytes, status: bytes
) -> None:
    token = key_for(services, permissions=READER)
    answer = await exchange(
        url,
        f"POST {PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n".encode()
        + header
        + f"\r\nContent-Type: application/json\r\nContent-Length: {len(TURN)}\r\n\r\n".encode()
        + TURN,
    )
    assert answer.startswith(b"HTTP/1.1 " + status + b" ")
    assert executed(services) == 0
    await still_up(url, services)


async def test_an_injected_header_in_a_value_is_never_echoed(url: str, services: Services) -> None:
    token = key_for(services, permissions=READER)
    answer = await exchange(
        url,
        f"POST {PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
        "Handrail-Conversation: c 1\r\nSet-Cookie: stolen=1\r\n"
        "Idempotency-Key: k\r\nLocation: https://evil.example\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(TURN)}\r\n\r\n".encode()
        + TURN,
    )
    head = answer.partition(b"\r\n\r\n")[0].lower()
    assert answer.startswith(b"HTTP/1.1 422 ")
    assert b"set-cookie" not in head
    assert b"location" not in head
    assert b"evil" not in answer
    assert executed(services) == 0


def _expired_key(services: Services) -> str:
    past = FixedClock(datetime(2020, 1, 1, tzinfo=UTC))
    principal = Principal(user_id="alice", tenant_id="acme", permissions=READER)
    keys = ApiKeys(services.handrail.store, clock=past)
    return keys.create(principal, expires_at=past.now() + timedelta(days=1)).key


def _revoked_key(services: Services) -> str:
    principal = Principal(user_id="alice", tenant_id="acme", permissions=READER)
    keys = ApiKeys(services.handrail.store)
    created = keys.create(principal)
    assert keys.revoke(created.record.key_id, tenant_id="acme")
    return created.key


@pytest.mark.parametrize(
    "credential",
    ["missing", "empty", "basic", "forged", "tampered", "jwt", "expired", "revoked", "cookie"],
)
async def test_calls_without_a_valid_credential_are_401_and_run_nothing(
    url: str, services: Services, credential: str
) -> None:
    good = key_for(services, permissions=READER)
    headers = {
        "missing": {},
        "empty": {"Authorization": "Bearer"},
        "basic": {"Authorization": "Basic YWxpY2U6cGFzcw=="},
        "forged": {"Authorization": "Bearer hrk_0123456789abcdef_" + "A" * 43},
        "tampered": {"Authorization": f"Bearer {good[:-1]}{'B' if good[-1] != 'B' else 'C'}"},
        "jwt": {"Authorization": "Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJhbGljZSJ9."},
        "expired": {"Authorization": f"Bearer {_expired_key(services)}"},
        "revoked": {"Authorization": f"Bearer {_revoked_key(services)}"},
        "cookie": {"Cookie": f"session={good}; token={good}"},
    }[credential]
    async with httpx.AsyncClient(base_url=url) as client:
        answer = await client.post(
            f"{PATH}?access_token={good}",
            content=TURN,
            headers={**headers, "Content-Type": "application/json", "Idempotency-Key": "k"},
        )
    assert answer.status_code == 401
    assert answer.json()["error"]["code"] == "UNAUTHENTICATED"
    assert answer.headers["www-authenticate"].startswith("Bearer")
    assert executed(services) == 0
    await still_up(url, services)


async def test_a_flood_of_refused_requests_leaves_the_service_up(
    url: str, services: Services
) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=STARTUP_S) as client:
        answers = await asyncio.gather(
            *(
                client.post(PATH, content=b"{" * 100, headers={"Authorization": "Bearer x"})
                for _ in range(200)
            )
        )
    assert {a.status_code for a in answers} == {401}
    await still_up(url, services)
