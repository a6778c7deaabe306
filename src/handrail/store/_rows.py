"""Rows and records: how each value object of the stores maps to a table row and back.

Shared by SqlStore and the async PostgreSQL path. Times are bound and read as UTC
(SQLite keeps them as text without an offset). Never runs a query.
"""

from __future__ import annotations

import json
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from handrail.events import AuditSubject
from handrail.execution import ExecutionRecord, ExecutionStatus
from handrail.plans import Impact, Plan, PlanRecord, PlanState
from handrail.raw import RawRecord
from handrail.runs import RunRecord, RunState
from handrail.spec import ConfirmationMode, RiskLevel

__all__ = [
    "EXECUTION_MUTABLE",
    "RAW_LISTED",
    "SUBJECT_FIELDS",
    "aware",
    "execution_of",
    "execution_params",
    "execution_row",
    "execution_values",
    "maybe_aware",
    "plan_of",
    "plan_row",
    "raw_of",
    "raw_row",
    "run_of",
    "run_row",
    "utc",
]


SUBJECT_FIELDS = tuple(f.name for f in fields(AuditSubject))


def aware(value: datetime) -> datetime:
    # SQLite returns naive datetimes; every stored time is UTC.
    return value.astimezone(UTC) if value.tzinfo is not None else value.replace(tzinfo=UTC)


def maybe_aware(value: datetime | None) -> datetime | None:
    return None if value is None else aware(value)


def utc(value: datetime | None) -> datetime | None:
    # SQLite stores times as text without the offset, so every bound time is UTC.
    return None if value is None else value.astimezone(UTC)


_EXECUTION_FIELDS = tuple(f.name for f in fields(ExecutionRecord))
_EXECUTION_TIMES = frozenset(
    {"lease_expires_at", "next_check_at", "created_at", "updated_at", "retain_until", "purged_at"},
)
EXECUTION_MUTABLE = tuple(
    name
    for name in _EXECUTION_FIELDS
    if name
    not in {
        "idempotency_key",
        "plan_id",
        "plan_hash",
        "tool",
        "tenant_id",
        "user_id",
        "created_at",
    }
)


def execution_row(record: ExecutionRecord) -> dict[str, Any]:
    """The record as the parameters of an INSERT into executions (times in UTC)."""
    return execution_values(record)


def execution_params(
    record: ExecutionRecord,
    *,
    expect_status: ExecutionStatus,
    expect_version: int,
    lease_owner: str | None,
    lease_valid_at: datetime | None,
) -> dict[str, Any]:
    """The parameters of the compare-and-set UPDATE that writes `record`."""
    row = execution_values(record)
    params: dict[str, Any] = {f"v_{name}": row[name] for name in EXECUTION_MUTABLE}
    params.update(
        k_key=record.idempotency_key,
        k_status=expect_status.value,
        k_version=expect_version,
        k_owner=lease_owner,
        k_valid=utc(lease_valid_at),
    )
    return params


def execution_values(record: ExecutionRecord) -> dict[str, Any]:
    row: dict[str, Any] = {name: getattr(record, name) for name in _EXECUTION_FIELDS}
    for name in _EXECUTION_TIMES:
        row[name] = utc(row[name])
    row["status"] = record.status.value
    return row


def execution_of(row: sa.RowMapping) -> ExecutionRecord:
    values = {name: row[name] for name in _EXECUTION_FIELDS}
    for name in _EXECUTION_TIMES:
        values[name] = maybe_aware(values[name])
    values["status"] = ExecutionStatus(values["status"])
    values["escalated"] = bool(values["escalated"])
    return ExecutionRecord(**values)


def plan_row(record: PlanRecord) -> dict[str, Any]:
    plan = record.plan
    return {
        "plan_id": plan.plan_id,
        "tool": plan.tool,
        "schema_version": plan.schema_version,
        "arguments": plan.arguments,
        "expected_version": plan.expected_version,
        "user_id": plan.user_id,
        "tenant_id": plan.tenant_id,
        "risk": int(plan.risk),
        "confirmation": plan.confirmation.value,
        "required_approvals": plan.required_approvals,
        "impact": json.dumps(plan.impact.to_json(), sort_keys=True),  # ASCII: any store holds it
        "created_at": utc(plan.created_at),
        "expires_at": utc(plan.expires_at),
        "revises": plan.revises,
        "approver_permission": plan.approver_permission,
        "plan_hash": plan.plan_hash,
        "state": record.state.value,
        "version": record.version,
        "updated_at": utc(record.updated_at),
    }


def plan_of(row: sa.RowMapping, approvals: frozenset[str]) -> PlanRecord:
    plan = Plan(
        plan_id=row["plan_id"],
        tool=row["tool"],
        schema_version=row["schema_version"],
        arguments=row["arguments"],
        expected_version=row["expected_version"],
        user_id=row["user_id"],
        tenant_id=row["tenant_id"],
        risk=RiskLevel(row["risk"]),
        confirmation=ConfirmationMode(row["confirmation"]),
        required_approvals=row["required_approvals"],
        impact=Impact.from_json(json.loads(row["impact"])),
        created_at=aware(row["created_at"]),
        expires_at=aware(row["expires_at"]),
        revises=row["revises"],
        approver_permission=row["approver_permission"],
        plan_hash=row["plan_hash"],
    )
    state = PlanState(row["state"])
    if row["succeeded"] and state is PlanState.CONFIRMED:
        state = PlanState.EXECUTED
    return PlanRecord(
        plan=plan,
        state=state,
        version=row["version"],
        approvals=approvals,
        updated_at=aware(row["updated_at"]),
    )


_RAW_FIELDS = tuple(f.name for f in fields(RawRecord))
RAW_LISTED = tuple(name for name in _RAW_FIELDS if name != "body")


def raw_row(record: RawRecord) -> dict[str, Any]:
    row: dict[str, Any] = {name: getattr(record, name) for name in _RAW_FIELDS}
    row["created_at"] = utc(record.created_at)
    row["expires_at"] = utc(record.expires_at)
    return row


def raw_of(row: sa.RowMapping) -> RawRecord:
    return RawRecord(
        ref=row["ref"],
        tenant_id=row["tenant_id"],
        user_id=row["user_id"],
        tool=row["tool"],
        call_id=row["call_id"],
        created_at=aware(row["created_at"]),
        expires_at=aware(row["expires_at"]),
        media_type=row["media_type"],
        size=int(row["size"]),
        complete=bool(row["complete"]),
        # A listing leaves the body out; drivers may hand back a memoryview.
        body=bytes(row["body"]) if "body" in row else b"",
    )


def run_row(record: RunRecord) -> dict[str, Any]:
    row = {
        "run_id": record.run_id,
        "tenant_id": record.tenant_id,
        "user_id": record.user_id,
        "state": record.state.value,
        "version": record.version,
        "created_at": utc(record.created_at),
        "updated_at": utc(record.updated_at),
        "data": record.data,
    }
    if record.lease_owner is not None:
        # Only a leased run names the lease columns (0013): an unleased insert is the
        # same statement on a database of any revision since the runs table.
        row |= {"lease_owner": record.lease_owner, "lease_until": utc(record.lease_until)}
    return row


def run_of(row: sa.RowMapping) -> RunRecord:
    return RunRecord(
        run_id=row["run_id"],
        tenant_id=row["tenant_id"],
        user_id=row["user_id"],
        state=RunState(row["state"]),
        version=row["version"],
        created_at=aware(row["created_at"]),
        updated_at=aware(row["updated_at"]),
        data=row["data"],
        lease_owner=row["lease_owner"],
        lease_until=maybe_aware(row["lease_until"]),
    )
