"""The application both `handrail serve` processes of `test_two_servers` serve.

`build()` is the config's registry factory (`_two_servers_app:build`): an object with
the registry and the SecretProvider its tools read, as a host application gives them.
The tools: those of the process-level worker tests (`_workers`: a read alice may
call, one she may not, whose denials trip the guard, one declaring three calls an
hour, one handed the shop's key that echoes it), one whose downstream echoes the key
back unasked, and a confirmed write whose every effect is a line appended to the file
`EFFECTS_ENV` names, so the test counts effects across processes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from _workers import echo_key, refunds, search, stock
from pydantic import Field

from handrail import (
    ConfirmationMode,
    ConfirmationPolicy,
    Found,
    IdempotencyMode,
    IdempotencyPolicy,
    Impact,
    NotExecuted,
    Registry,
    RiskLevel,
    SideEffect,
    ToolContext,
    tool,
)
from handrail.credentials import StaticSecretProvider
from handrail.declare.hooks import Reconciled

__all__ = ["API_KEY", "EFFECTS_ENV", "TwoServersApp", "build"]

API_KEY = "shop-key-0123456789abcdefghij"
"""The shop's key: what the secret provider gives the tools that ask for it (in no
format a pattern would redact, so only the ledger can scrub it)."""
EFFECTS_ENV = "HANDRAIL_TEST_EFFECTS"


@tool(risk=RiskLevel.L1_INTERNAL_READ, namespace="shop", permissions={"books.read"})
async def status() -> dict[str, str]:
    """The warehouse's status page, which (wrongly) shows the key it was called with."""
    return {"status": "up", "debug": f"called with {API_KEY}"}


def _effects() -> Path:
    return Path(os.environ[EFFECTS_ENV])


def _reconcile(key: str, _ctx: ToolContext) -> Reconciled:
    path = _effects()
    lines = path.read_text().splitlines() if path.exists() else []
    return Found({"ticket_no": key}) if key in lines else NotExecuted()


def _impact(args: object, _ctx: ToolContext) -> Impact:
    return Impact(
        action="create recovery ticket",
        target=str(getattr(args, "asset_id", "?")),
        reversible=True,
        counts={"tickets": 1},
    )


@tool(
    risk=RiskLevel.L2_REVERSIBLE_WRITE,
    namespace="shop",
    side_effect=SideEffect.EXTERNAL_WRITE,
    permissions={"tickets.create"},
    idempotency=IdempotencyPolicy(mode=IdempotencyMode.PLAN),
    confirmation=ConfirmationPolicy(mode=ConfirmationMode.CONFIRM),
    reconcile=_reconcile,
    impact=_impact,
    business_id="ticket_no",
)
async def create_ticket(
    ctx: ToolContext,
    asset_id: Annotated[str, Field(pattern=r"^asset-[0-9]+$")],
    reason: Annotated[str, Field(min_length=5, max_length=200)],
) -> dict[str, str]:
    """Open a recovery ticket for an asset (one line in the effects file per call)."""
    assert ctx.idempotency_key is not None
    # One write(2) of a short line to a file opened for appending: atomic across processes.
    with _effects().open("a") as effects:
        effects.write(f"{ctx.idempotency_key}\n")
    return {"ticket_no": ctx.idempotency_key, "asset_id": asset_id, "reason": reason}


@dataclass(frozen=True, kw_only=True, slots=True)
class TwoServersApp:
    """What the registry factory gives: the tools and the secrets they read."""

    registry: Registry
    secrets: StaticSecretProvider
    policy: None = None


def build() -> TwoServersApp:
    """The tools and the shop's key, the same in every server process."""
    registry = Registry()
    for made in (search, refunds, stock, echo_key, status, create_ticket):
        registry.register(made)
    return TwoServersApp(
        registry=registry, secrets=StaticSecretProvider({("*", "shop.api_key"): API_KEY})
    )
