"""Shared fixtures: principals, a small registry of sample tools, a gate with audit capture."""

from __future__ import annotations

import os
import socket
from typing import Annotated, Literal

import pytest
from hypothesis import settings
from pydantic import BaseModel, Field

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
