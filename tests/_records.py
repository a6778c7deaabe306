"""Complete records with neutral values (an execution, a leased run), for tests that need a row."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from handrail import ExecutionRecord, ExecutionStatus
from handrail.runs import RunRecord, RunState

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


def leased_run(run_id: str = "run_a", **changes: object) -> RunRecord:
    """A RUNNING run of alice in t1 at T0, leased to worker-a for 30 seconds."""
    base = RunRecord(
        run_id=run_id,
        tenant_id="t1",
        user_id="alice",
        state=RunState.RUNNING,
        version=1,
        created_at=RUN_T0,
        updated_at=RUN_T0,
        data="{}",
        lease_owner="worker-a",
        lease_until=RUN_T0 + timedelta(seconds=30),
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


RUN_T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
"""When `leased_run` starts: the workers' tests' T0."""
