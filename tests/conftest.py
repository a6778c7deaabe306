"""Shared fixtures: principals, a small registry of sample tools, a gate with audit capture."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Literal

import coredis
import pytest
from hypothesis import settings
from pydantic import BaseModel, Field

# Store fixtures (memory, SQLite, PostgreSQL) live in their own module.
from _stores import postgres_url, race, sql_store, store, store_url  # noqa: F401
from handrail import (
    FromPrincipal,
    Gate,
    NotFound,
    Principal,
    Registry,
    RiskLevel,
    ToolContext,
    tool,
)
from handrail.authz.quota import QuotaPolicy, RateLimiter
from handrail.testing import FixedClock, MemoryAuditSink, sequential_ids

# The machine is small and shared: a slow example is not a failure, so no deadlines.
settings.register_profile("handrail", deadline=None)
settings.load_profile("handrail")

BOOKS = {
    "t1": {"b1": {"title": "Dune", "stock": 3}, "b2": {"title": "Emma", "stock": 0}},
    "t2": {"b9": {"title": "Ulysses", "stock": 7}},
}


class Filters(BaseModel):
    in_stock: bool = False
    genres: Annotated[list[Literal["fiction", "history", "science"]], Field(max_length=3)] = []


def _book_exists(args: object, ctx: ToolContext) -> None:
    book_id = getattr(args, "book_id", None)
    if book_id not in BOOKS.get(ctx.principal.tenant_id, {}):
        raise NotFound(f"There is no book {book_id!r}.")


@tool(risk=RiskLevel.L1_INTERNAL_READ, namespace="shop", permissions={"books.read"})
async def search(
    query: Annotated[str, Field(min_length=1, max_length=100, description="Words in the title")],
    tenant: Annotated[str, FromPrincipal("tenant_id")],
    limit: Annotated[int, Field(ge=1, le=20)] = 5,
    filters: Filters | None = None,
) -> list[dict[str, object]]:
    """Search the tenant's catalogue by title words."""
    hits = [
        {"id": book_id, **book}
        for book_id, book in BOOKS[tenant].items()
        if query.lower() in str(book["title"]).lower()
        and (filters is None or not filters.in_stock or int(str(book["stock"])) > 0)
    ]
    return hits[:limit]


@tool(
    risk=RiskLevel.L1_INTERNAL_READ,
    namespace="shop",
    permissions={"books.read"},
    validators=[_book_exists],
)
def stock(ctx: ToolContext, book_id: Annotated[str, Field(max_length=16)]) -> int:
    """How many copies of a book are in stock (a sync tool)."""
    return int(str(BOOKS[ctx.principal.tenant_id][book_id]["stock"]))


REDIS_HOST = "127.0.0.1"
REDIS_PORT = 6379


def _redis_answers() -> bool:
    try:
        with socket.create_connection((REDIS_HOST, REDIS_PORT), timeout=0.5) as sock:
            sock.settimeout(0.5)
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The test Redis; skips when it does not answer, fails instead when CI=true."""
    if not _redis_answers():
        reason = f"no Redis answers PING at {REDIS_HOST}:{REDIS_PORT}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI must start one before the tests")
        pytest.skip(reason)
    return f"redis://{REDIS_HOST}:{REDIS_PORT}"


async def _keys_under(url: str, prefix: str, *, delete: bool) -> list[str]:
    """The keys under `prefix` (deleted too, when asked), read with a client of our own."""
    client = coredis.Redis.from_url(url, decode_responses=True)
    try:
        keys = [key async for key in client.scan_iter(match=f"{prefix}:*")]
        if keys and delete:
            await client.delete(tuple(keys))
    finally:
        client.connection_pool.disconnect()
    return sorted(keys)


@pytest.fixture
def redis_keys(redis_url: str) -> Callable[..., Awaitable[list[str]]]:
    """`await redis_keys(prefix, delete=False)`: the test Redis's keys under a prefix."""

    async def keys(prefix: str, *, delete: bool = False) -> list[str]:
        return await _keys_under(redis_url, prefix, delete=delete)

    return keys


@pytest.fixture
async def key_prefix(redis_url: str) -> AsyncIterator[str]:
    """A Redis key prefix of this test alone; its keys are deleted afterwards."""
    prefix = f"handrail-test-{uuid.uuid4().hex}"
    yield prefix
    await _keys_under(redis_url, prefix, delete=True)


@pytest.fixture(params=["in_process", "redis"])
async def make_limiter(
    request: pytest.FixtureRequest,
) -> AsyncIterator[Callable[[QuotaPolicy], RateLimiter]]:
    """Builds limiters on one storage; Redis limiters of one test share a fresh key prefix."""
    made: list[RateLimiter] = []
    url = request.getfixturevalue("redis_url") if request.param == "redis" else None
    prefix = f"handrail-test-{uuid.uuid4().hex}"

    def make(policy: QuotaPolicy) -> RateLimiter:
        limiter = (
            RateLimiter.in_process(policy=policy)
            if url is None
            else RateLimiter.redis(url, policy=policy, key_prefix=prefix)
        )
        made.append(limiter)
        return limiter

    yield make
    for limiter in made:
        await limiter.aclose()
    if url is not None:
        await _keys_under(url, prefix, delete=True)
        assert await _keys_under(url, prefix, delete=False) == []


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def principal() -> Principal:
    return Principal(
        user_id="alice",
        tenant_id="t1",
        permissions=frozenset({"books.read"}),
        request_id="req-1",
    )


@pytest.fixture
def outsider() -> Principal:
    """A user of another tenant with the same permissions."""
    return Principal(user_id="mallory", tenant_id="t2", permissions=frozenset({"books.read"}))


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock()


@pytest.fixture
def audit() -> MemoryAuditSink:
    return MemoryAuditSink()


@pytest.fixture
def registry(clock: FixedClock, audit: MemoryAuditSink) -> Registry:
    registry = Registry(audit=audit, clock=clock, new_id=sequential_ids("reg"))
    registry.register(search)
    registry.register(stock)
    return registry


@pytest.fixture
def gate(registry: Registry, audit: MemoryAuditSink, clock: FixedClock) -> Gate:
    return Gate(registry, audit=audit, clock=clock, new_id=sequential_ids("ev"))
