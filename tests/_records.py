"""A complete ExecutionRecord with neutral values, for tests that need one row."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from handrail import ExecutionRecord, ExecutionStatus

T0 = datetime(2026, 1, 1, tzinfo=UTC)

_BASE = ExecutionRecord(
    idempotency_key="k1",
    plan_id=None,
    plan_hash="h",
    tool="t",
    tenant_id="t1",
    user_id="u",
    principal="{}",
    arguments="{}",
    expected_version=None,
    status=ExecutionStatus.RUNNING,
    attempts=1,
    business_id=None,
    result=None,
    error_code=None,
    lease_owner="w",
    lease_expires_at=T0,
    next_check_at=None,
    checks=0,
    escalated=False,
    created_at=T0,
    updated_at=T0,
    retain_until=None,
    version=1,
)


def execution_record(**changes: object) -> ExecutionRecord:
    """The neutral record with `changes` applied."""
    return dataclasses.replace(_BASE, **changes)  # type: ignore[arg-type]
