"""A small application served over MCP by the tests: reads, a gated read, writes.

`build()` is also what `handrail mcp serve --app tests.mcp._app:build` loads in the
stdio tests. `search` finds books, `secret_report` needs the `reports.read`
permission, `whoami` fills its tenant from the principal (the model cannot set it),
`slow_count` reports progress and waits until it is released (or cancelled),
`order_book` is a write that needs the user's confirmation and `hold_shelf` an
unconfirmed external write keyed by the host's command id, which waits like
`slow_count`. A `Watch` sees what ran.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

from handrail import (
    ConfirmationMode,
    ConfirmationPolicy,
    FromPrincipal,
    IdempotencyMode,
    IdempotencyPolicy,
    Registry,
    RiskLevel,
    SideEffect,
    Tool,
    ToolContext,
    tool,
)

BOOKS = ("Dune", "Emma", "Ulysses")


class Watch:
    """What the tools share with a test: which ran, and the waiting tools' events."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.cancelled = asyncio.Event()


def tools(watch: Watch | None = None) -> list[Tool]:
    """The tools of the test application, observed by `watch`."""
    seen = watch or Watch()

    async def wait(name: str) -> None:
        seen.ran.append(name)
        seen.started.set()
        try:
            await seen.release.wait()
        except asyncio.CancelledError:
            seen.cancelled.set()
            raise

    @tool(risk=RiskLevel.L0_PUBLIC_READ, namespace="lib")
    def search(query: str) -> list[str]:
        """Find books whose title contains the query."""
        seen.ran.append("lib.search")
        return [title for title in BOOKS if query.lower() in title.lower()]

    @tool(risk=RiskLevel.L1_INTERNAL_READ, namespace="lib", permissions=["reports.read"])
    def secret_report() -> dict[str, int]:
        """The confidential sales report."""
        seen.ran.append("lib.secret_report")
        return {"sold": 42}

    @tool(risk=RiskLevel.L1_INTERNAL_READ, namespace="lib")
    def whoami(tenant: Annotated[str, FromPrincipal("tenant_id")]) -> str:
        """Which library this is."""
        seen.ran.append("lib.whoami")
        return tenant

    @tool(risk=RiskLevel.L0_PUBLIC_READ, namespace="lib", timeout=120.0)
    async def slow_count(steps: int, ctx: ToolContext) -> int:
        """Count slowly, reporting progress, until released."""
        for step in range(steps):
            await ctx.report_progress(step + 1, steps, f"step {step + 1}")
        await wait("lib.slow_count")
        return steps

    @tool(
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        namespace="lib",
        side_effect=SideEffect.EXTERNAL_WRITE,
        idempotency=IdempotencyPolicy(mode=IdempotencyMode.PLAN),
        confirmation=ConfirmationPolicy(mode=ConfirmationMode.CONFIRM),
    )
    def order_book(title: str) -> dict[str, str]:
        """Order a copy of a book."""
        seen.ran.append("lib.order_book")
        return {"ordered": title}

    @tool(
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        namespace="lib",
        side_effect=SideEffect.EXTERNAL_WRITE,
        idempotency=IdempotencyPolicy(mode=IdempotencyMode.COMMAND_ID),
        confirmation=ConfirmationPolicy(mode=ConfirmationMode.NONE),
        timeout=120.0,
    )
    async def hold_shelf(shelf: str) -> dict[str, str]:
        """Reserve a shelf at the partner warehouse."""
        await wait("lib.hold_shelf")
        return {"held": shelf}

    return [search, secret_report, whoami, slow_count, order_book, hold_shelf]


def build() -> Registry:
    """A registry of the test tools (what `--app tests.mcp._app:build` loads)."""
    registry = Registry()
    for made in tools():
        registry.register(made)
    return registry
