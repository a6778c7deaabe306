"""A counting application for the MCP protocol attacks, in-process or behind stdio.

Every tool run is recorded: in-process into a list the test holds, in a subprocess
(`handrail mcp serve --app tests._mcp_counting:build`) as one line per run
appended to the file named by HANDRAIL_TEST_RUNS. An attack proves that nothing ran
by reading the record.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
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
    tool,
)

RUNS_ENV = "HANDRAIL_TEST_RUNS"
"""The environment variable naming the file a subprocess records its runs in."""

Record = Callable[[str], None]


def tools(record: Record) -> list[Tool]:
    """`lab.count` (a read), `lab.secret` (needs `lab.secret`), `lab.whoami` (tenant from
    the principal) and `lab.order` (a write needing confirmation); each records its runs."""

    @tool(risk=RiskLevel.L1_INTERNAL_READ, namespace="lab")
    def count(note: str = "") -> dict[str, str]:
        """Count one call."""
        record("lab.count")
        return {"counted": note}

    @tool(risk=RiskLevel.L1_INTERNAL_READ, namespace="lab", permissions=["lab.secret"])
    def secret() -> dict[str, int]:
        """A figure only holders of lab.secret may see."""
        record("lab.secret")
        return {"figure": 42}

    @tool(risk=RiskLevel.L1_INTERNAL_READ, namespace="lab")
    def whoami(
        tenant: Annotated[str, FromPrincipal("tenant_id")],
        user: Annotated[str, FromPrincipal("user_id")],
    ) -> dict[str, str]:
        """Who the server says is calling."""
        record("lab.whoami")
        return {"tenant": tenant, "user": user}

    @tool(
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        namespace="lab",
        side_effect=SideEffect.EXTERNAL_WRITE,
        idempotency=IdempotencyPolicy(mode=IdempotencyMode.PLAN),
        confirmation=ConfirmationPolicy(mode=ConfirmationMode.CONFIRM),
    )
    def order(title: str) -> dict[str, str]:
        """Order a copy of a book (a person confirms it first)."""
        record("lab.order")
        return {"ordered": title}

    return [count, secret, whoami, order]


def _append_to_file(name: str) -> None:
    path = Path(os.environ[RUNS_ENV])
    with path.open("a", encoding="utf-8") as out:
        out.write(name + "\n")


def build() -> Registry:
    """The registry `handrail mcp serve --app` loads; runs go to $HANDRAIL_TEST_RUNS."""
    registry = Registry()
    for made in tools(_append_to_file):
        registry.register(made)
    return registry
