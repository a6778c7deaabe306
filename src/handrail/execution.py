"""Execution records: one row per intended effect, keyed by its idempotency key.

    PREPARED ──▶ RUNNING ──▶ SUCCEEDED | FAILED_FINAL | UNKNOWN
     │  ▲           │                                    │
     │  └─released──┘      UNKNOWN ──reconcile──▶ SUCCEEDED | FAILED_FINAL | RUNNING (retry)
     └──▶ FAILED_FINAL (its plan was withdrawn before it ran again)

A record is created by an insert that a UNIQUE key settles, never by check-then-insert,
so concurrent duplicates across processes find each other in the database. Every move
is a compare-and-set on (status, version), and a move out of RUNNING also on the lease
owner and an unexpired lease: a worker whose lease ran out cannot write an outcome.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from handrail.canonical import canonical_json, sha256_hex
from handrail.errors import IllegalTransitionError
from handrail.spec import IdempotencyScope

__all__ = [
    "TOMBSTONE_ARGUMENTS",
    "TOMBSTONE_PRINCIPAL",
    "ExecutionRecord",
    "ExecutionStatus",
    "check_transition",
    "command_key",
    "intent_hash",
    "plan_key",
]


class ExecutionStatus(StrEnum):
    """The state of one keyed execution."""

    PREPARED = "PREPARED"
    """Recorded, not running: nothing was done, or an attempt proved it did nothing."""
    RUNNING = "RUNNING"
    """An attempt holds the lease."""
    SUCCEEDED = "SUCCEEDED"
    FAILED_FINAL = "FAILED_FINAL"
    """Definitely not done, and retrying will not help."""
    UNKNOWN = "UNKNOWN"
    """Maybe done: a timeout, a lost response or a crash while RUNNING."""

    @property
    def settled(self) -> bool:
        """True for the two outcomes no later event can change."""
        return self in {ExecutionStatus.SUCCEEDED, ExecutionStatus.FAILED_FINAL}


_S = ExecutionStatus
_MOVES: Mapping[ExecutionStatus, frozenset[ExecutionStatus]] = MappingProxyType(
    {
        # PREPARED → FAILED_FINAL: its plan was withdrawn before it ran again.
        _S.PREPARED: frozenset({_S.RUNNING, _S.FAILED_FINAL}),
        _S.RUNNING: frozenset({_S.SUCCEEDED, _S.FAILED_FINAL, _S.UNKNOWN, _S.PREPARED}),
        # UNKNOWN → UNKNOWN: an inconclusive check, or a reconciler taking the lease.
        _S.UNKNOWN: frozenset({_S.SUCCEEDED, _S.FAILED_FINAL, _S.RUNNING, _S.UNKNOWN}),
        _S.SUCCEEDED: frozenset(),
        _S.FAILED_FINAL: frozenset(),
    },
)


def check_transition(current: ExecutionStatus, new: ExecutionStatus) -> None:
    """Raise IllegalTransitionError unless `current → new` is a move of the machine."""
    if new not in _MOVES[current]:
        msg = f"an execution cannot move from {current} to {new}"
        raise IllegalTransitionError(msg)


TOMBSTONE_ARGUMENTS = "{}"
"""What a purged record keeps of its arguments: nothing."""
TOMBSTONE_PRINCIPAL = "{}"
"""What a purged record keeps of its principal snapshot: nothing (its user and tenant stay)."""


def _key(document: Mapping[str, Any]) -> str:
    return "hk1_" + sha256_hex(canonical_json(dict(document)))


def plan_key(*, tenant_id: str, tool: str, plan_id: str) -> str:
    """The key of a planned write: tenant + tool + plan id, stable across retries."""
    return _key({"kind": "plan", "tenant": tenant_id, "tool": tool, "plan": plan_id})


def command_key(
    *,
    tenant_id: str,
    tool: str,
    command_id: str,
    user_id: str,
    scope: IdempotencyScope,
) -> str:
    """The key of an unplanned write: the host's command id, scoped to tenant and tool.

    With `scope=PRINCIPAL` the user is part of the key, so two users' equal command
    ids are two intents.
    """
    document = {"kind": "command", "tenant": tenant_id, "tool": tool, "command": command_id}
    if scope is IdempotencyScope.PRINCIPAL:
        document["user"] = user_id
    return _key(document)


def intent_hash(*, tool: str, schema_version: str, arguments: str, tenant_id: str) -> str:
    """The plan hash of an unplanned write: what it would do, for mismatch detection."""
    return sha256_hex(
        canonical_json(
            {
                "v": 1,
                "tool": tool,
                "schema_version": schema_version,
                "arguments": arguments,
                "tenant": tenant_id,
            },
        ),
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class ExecutionRecord:
    """One keyed execution as stored.

    `arguments` and `result` are canonical JSON text; `principal` is a JSON snapshot
    of who asked (user, tenant, roles, permissions, data scope), so a reconciler in
    another process can retry with the same context. `version` grows by one with
    every write of the row.

    A settled record past its retention is purged to a *tombstone* (`purged_at` set):
    its arguments, principal snapshot and result are dropped, while its key, plan id
    and hash, tool, tenant, user, status, error code and business id stay, for good.
    The key stays taken, so a repeat of its plan or command id is still answered
    (already executed) and never runs again, and a plan with a SUCCEEDED tombstone
    still reads EXECUTED.
    """

    idempotency_key: str
    plan_id: str | None
    plan_hash: str
    tool: str
    tenant_id: str
    user_id: str
    principal: str
    arguments: str
    expected_version: str | None
    status: ExecutionStatus
    attempts: int
    business_id: str | None
    result: str | None
    error_code: str | None
    lease_owner: str | None
    lease_expires_at: datetime | None
    next_check_at: datetime | None
    checks: int
    escalated: bool
    created_at: datetime
    updated_at: datetime
    retain_until: datetime | None
    version: int
    purged_at: datetime | None = None

    @property
    def purged(self) -> bool:
        """True for a tombstone: the record outlived its retention and was stripped."""
        return self.purged_at is not None

    def tombstone(self, at: datetime) -> ExecutionRecord:
        """What a purge at `at` keeps of this settled record (the version bumped)."""
        if not self.status.settled:
            msg = f"only a settled record can be purged, not a {self.status} one"
            raise IllegalTransitionError(msg)
        return dataclasses.replace(
            self,
            arguments=TOMBSTONE_ARGUMENTS,
            principal=TOMBSTONE_PRINCIPAL,
            result=None,
            retain_until=None,
            purged_at=at,
            version=self.version + 1,
        )

    @property
    def result_value(self) -> Any:  # noqa: ANN401 - any JSON value
        """The stored result, decoded; None when there is none."""
        return None if self.result is None else json.loads(self.result)

    def moved(self, status: ExecutionStatus, **changes: Any) -> ExecutionRecord:  # noqa: ANN401
        """A copy in `status` with `changes`, the version bumped; checks the move."""
        check_transition(self.status, status)
        return dataclasses.replace(self, status=status, version=self.version + 1, **changes)

    def updated(self, **changes: Any) -> ExecutionRecord:  # noqa: ANN401
        """A copy with `changes` and the version bumped, status unchanged."""
        if self.status.settled:
            msg = f"a {self.status} record is final"
            raise IllegalTransitionError(msg)
        return dataclasses.replace(self, version=self.version + 1, **changes)
