"""A small application served over MCP by the tests: reads, a gated read, a write.

`build()` is also what `handrail mcp serve --app tests.mcp._app:build` loads in the
stdio tests. `search` finds books, `secret_report` needs the `reports.read`
permission, `whoami` fills its tenant from the principal (the model cannot set it),
`slow_count` reports progress and waits until it is released (or cancelled), and
`order_book` is a write that needs the user's confirmation.
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


class Slow:
    """What the slow tool shares with a test: started, released, cancelled, ran."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.finished = 0


def tools(slow: Slow | None = None) -> list[Tool]:
    """The tools of the test application; `slow` observes `lib.slow_count`."""
    watch = slow or Slow()

    @tool(risk=RiskLevel.L0_PUBLIC_READ, namespace="lib")
    def search(query: str) -> list[str]:
        """Find books whose title contains the query."""
        return [title for title in BOOKS if query.lower() in title.lower()]

    @tool(risk=RiskLevel.L1_INTERNAL_READ, namespace="lib", permissions=["reports.read"])
    def secret_report() -> dict[str, int]:
        """The confidential sales report."""
        return {"sold": 42}

    @tool(risk=RiskLevel.L1_INTERNAL_READ, namespace="lib")
    def whoami(tenant: Annotated[str, FromPrincipal("tenant_id")]) -> str:
        """Which library this is."""
        return tenant

    @tool(risk=RiskLevel.L0_PUBLIC_READ, namespace="lib", timeout=120.0)
    async def slow_count(steps: int, ctx: ToolContext) -> int:
        """Count slowly, reporting progress, until released."""
        watch.started.set()
        try:
            for step in range(steps):
                await ctx.report_progress(step + 1, steps, f"step {step + 1}")
            await watch.release.wait()
        except asyncio.CancelledError:
            watch.cancelled.set()
            raise
        watch.finished += 1
        return steps

    @tool(
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        namespace="lib",
        side_effect=SideEffect.EXTERNAL_WRITE,
        idempotency=IdempotencyPolicy(mode=IdempotencyMode.PLAN),
        confirmation=ConfirmationPolicy(mode=ConfirmationMode.CONFIRM),
    )
    def order_book(title: str, ctx: ToolContext) -> dict[str, str]:
        """Order a copy of a book."""
        return {"ordered": title, "key": ctx.idempotency_key or ""}

    return [search, secret_report, whoami, slow_count, order_book]


def build() -> Registry:
    """A registry of the test tools (what `--app tests.mcp._app:build` loads)."""
    registry = Registry()
    for made in tools():
        registry.register(made)
    return registry
