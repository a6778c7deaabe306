"""A downstream ticket system and write tools over it, shared by the write-path tests.

The downstream keeps its effects by idempotency key and counts every call, so a test
can tell "the tool ran twice" from "the effect happened twice". What the next call
does (succeed, lose its response after committing, fail before committing, fail for
good, hang) is scripted per test.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Annotated, Literal

from pydantic import Field

from handrail import (
    ConfirmationMode,
    ConfirmationPolicy,
    Found,
    IdempotencyMode,
    IdempotencyPolicy,
    IdempotencyScope,
    Impact,
    Keyring,
    NoProof,
    NotExecuted,
    Principal,
    ReconcilePolicy,
    RetryPolicy,
    RiskLevel,
    SideEffect,
    SigningKey,
    Tool,
    ToolContext,
    ToolFailed,
    ToolRetryable,
    tool,
)
from handrail.declare.hooks import Reconciled

Mode = Literal["ok", "lose", "transient", "fail", "hang", "crash"]

ALICE = Principal(user_id="alice", tenant_id="t1", permissions=frozenset({"tickets.create"}))
BOB = Principal(user_id="bob", tenant_id="t1", permissions=frozenset({"tickets.create"}))
CAROL = Principal(
    user_id="carol",
    tenant_id="t1",
    permissions=frozenset({"tickets.create", "tickets.approve"}),
)
DAVE = Principal(
    user_id="dave",
    tenant_id="t1",
    permissions=frozenset({"tickets.create", "tickets.approve"}),
)
MALLORY = Principal(user_id="mallory", tenant_id="t2", permissions=frozenset({"tickets.create"}))

SECRET = b"k" * 32


def keyring(*, nonce_prefix: str = "n") -> Keyring:
    """A keyring with a fixed secret and sequential nonces (22+ characters each)."""
    counter = 0

    def nonce() -> str:
        nonlocal counter
        counter += 1
        return f"{nonce_prefix}{counter:021d}"

    return Keyring(SigningKey("k1", SECRET), nonces=nonce)


@dataclass
class Downstream:
    """A ticket system with its own idempotency by key; thread-safe."""

    tickets: dict[str, dict[str, object]] = field(default_factory=dict)
    calls: int = 0
    script: deque[Mode] = field(default_factory=deque)
    version: str = "v1"
    lookup_fails: bool = False
    release: asyncio.Event | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def next_mode(self) -> Mode:
        with self._lock:
            self.calls += 1
            return self.script.popleft() if self.script else "ok"

    def commit(self, key: str, asset: str) -> dict[str, object]:
        with self._lock:
            found = self.tickets.get(key)
            if found is None:
                found = {"ticket_no": f"TK-{len(self.tickets) + 1:04d}", "asset": asset}
                self.tickets[key] = found
            return dict(found)

    def effects(self) -> int:
        with self._lock:
            return len(self.tickets)

    def reconcile(self, key: str, _ctx: ToolContext) -> Reconciled:
        if self.lookup_fails:
            return NoProof("the ticket system did not answer")
        with self._lock:
            found = self.tickets.get(key)
        return Found(dict(found)) if found is not None else NotExecuted()


def ticket_tool(
    downstream: Downstream,
    *,
    name: str = "create_ticket",
    mode: ConfirmationMode = ConfirmationMode.CONFIRM,
    idempotency: IdempotencyMode = IdempotencyMode.PLAN,
    scope: IdempotencyScope = IdempotencyScope.TENANT,
    retry: RetryPolicy | None = None,
    reconcile: bool = True,
    versioned: bool = False,
    timeout: float = 5.0,
    grace: float = 60.0,
    distinct_approvers: int = 1,
) -> Tool:
    """An EXTERNAL_WRITE ticket tool whose behaviour the downstream's script decides."""

    async def create(
        ctx: ToolContext,
        asset_id: Annotated[str, Field(pattern=r"^asset-[0-9]+$")],
        reason: Annotated[str, Field(min_length=5, max_length=200)],
    ) -> dict[str, object]:
        """Open a recovery ticket for an asset."""
        behaviour = downstream.next_mode()
        assert ctx.idempotency_key is not None
        if behaviour == "transient":
            raise ToolRetryable("the ticket system is busy", retry_after=1.0)
        if behaviour == "fail":
            raise ToolFailed("the ticket system refused the asset")
        if behaviour == "crash":
            raise RuntimeError("driver bug at /srv/internal/path.py")
        if behaviour == "hang":
            assert downstream.release is not None
            await downstream.release.wait()
        ticket = downstream.commit(ctx.idempotency_key, asset_id)
        if behaviour == "lose":
            raise TimeoutError("response lost after commit")
        return {**ticket, "reason": reason}

    def version_of(_args: object, _ctx: ToolContext) -> str:
        return downstream.version

    def impact_of(args: object, _ctx: ToolContext) -> Impact:
        return Impact(
            action="create recovery ticket",
            target=str(getattr(args, "asset_id", "?")),
            reversible=True,
            counts={"tickets": 1},
        )

    approve = mode is ConfirmationMode.APPROVE
    return tool(
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        name=name,
        side_effect=SideEffect.EXTERNAL_WRITE,
        permissions={"tickets.create"},
        timeout=timeout,
        retry=retry,
        idempotency=IdempotencyPolicy(mode=idempotency, scope=scope),
        confirmation=ConfirmationPolicy(
            mode=mode,
            approver_permission="tickets.approve" if approve else None,
            distinct_approvers=distinct_approvers,
        ),
        reconcile_policy=ReconcilePolicy(not_found_grace=grace, first_check=5.0),
        reconcile=downstream.reconcile if reconcile else None,
        resolve_version=version_of if versioned else None,
        impact=impact_of,
        business_id="ticket_no",
    )(create)


ARGS = '{"asset_id": "asset-1", "reason": "CONNECT_TIMEOUT since 09:30"}'
