"""The store's SQL statements, built once: selects, compare-and-set updates, claims.

Shared by the sync store (`handrail.store.sql`) and the async execution writes on
PostgreSQL (`handrail.store._pg_async`), so both send the same statements. Never opens
a connection.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from handrail.errors import StoreError
from handrail.execution import (
    TOMBSTONE_ARGUMENTS,
    TOMBSTONE_PRINCIPAL,
    ExecutionStatus,
)
from handrail.plans import PlanState
from handrail.store._rows import EXECUTION_MUTABLE as _EXECUTION_MUTABLE
from handrail.store._rows import RAW_LISTED as _RAW_LISTED
from handrail.store._tables import (
    api_keys,
    conversations,
    executions,
    mcp_pins,
    plan_approvals,
    plan_nonces,
    plans,
    raw_results,
    runs,
    tasks,
)

__all__ = [
    "LIST_RAW",
    "LOCK_PLAN",
    "MOVE_PLAN",
    "PURGE_EXECUTIONS",
    "PURGE_RAW",
    "RECLAIM_EXECUTION",
    "REPLACE_EXECUTION",
    "SELECT_APPROVERS",
    "SELECT_EXECUTION",
    "SELECT_PLAN",
    "SELECT_RAW",
    "SELECT_RUN",
    "STARTED",
    "UPDATE_RUN",
    "Statements",
    "approvers_statement",
    "claim_statement",
    "insert_execution_statement",
    "list_plans_statement",
    "replace_statements",
]


_NOT_STARTED = (ExecutionStatus.PREPARED.value, ExecutionStatus.FAILED_FINAL.value)


_P = plans.c
_E = executions.c


# A plan reads as EXECUTED once a SUCCEEDED record of it exists: the outcome is written
# in one statement, and the plan's state can never disagree with its record.
_SUCCEEDED = sa.exists().where(
    executions.c.plan_id == _P.plan_id,
    executions.c.status == ExecutionStatus.SUCCEEDED.value,
)


SELECT_PLAN = sa.select(plans, _SUCCEEDED.label("succeeded")).where(
    _P.plan_id == sa.bindparam("k_plan"),
)


SELECT_APPROVERS = sa.select(plan_approvals.c.user_id).where(
    plan_approvals.c.plan_id == sa.bindparam("k_plan"),
)


def list_plans_statement(
    *, tenant_id: str | None, state: PlanState | None, limit: int
) -> sa.Select[Any]:
    """Plans newest first, filtered by tenant and by the state `get_plan` derives."""
    query = (
        sa.select(plans, _SUCCEEDED.label("succeeded"))
        .order_by(_P.created_at.desc(), _P.plan_id.desc())
        .limit(max(0, limit))
    )
    if tenant_id is not None:
        query = query.where(_P.tenant_id == tenant_id)
    confirmed = _P.state == PlanState.CONFIRMED.value
    if state is PlanState.EXECUTED:
        query = query.where(sa.or_(_P.state == state.value, sa.and_(confirmed, _SUCCEEDED)))
    elif state is PlanState.CONFIRMED:
        query = query.where(confirmed, ~_SUCCEEDED)
    elif state is not None:
        query = query.where(_P.state == state.value)
    return query


def approvers_statement(plan_ids: list[str]) -> sa.Select[Any]:
    """The (plan id, user id) approvals of these plans."""
    c = plan_approvals.c
    return sa.select(c.plan_id, c.user_id).where(c.plan_id.in_(plan_ids))


LOCK_PLAN = sa.select(_P.state).where(_P.plan_id == sa.bindparam("k_plan")).with_for_update()


STARTED = sa.select(_E.idempotency_key).where(
    _E.plan_id == sa.bindparam("k_plan"),
    _E.status.not_in(_NOT_STARTED),
)


MOVE_PLAN = (
    plans.update()
    .where(
        _P.plan_id == sa.bindparam("k_plan"),
        _P.state == sa.bindparam("k_state"),
        _P.version == sa.bindparam("k_version"),
    )
    .values(
        state=sa.bindparam("v_state"),
        version=sa.bindparam("v_version"),
        updated_at=sa.bindparam("v_at", type_=_P.updated_at.type),
    )
)


SELECT_EXECUTION = sa.select(executions).where(_E.idempotency_key == sa.bindparam("k_key"))


# A purge keeps the row, so the key stays taken: what ExecutionRecord.tombstone() keeps.
PURGE_EXECUTIONS = (
    executions.update()
    .where(
        _E.status.in_([ExecutionStatus.SUCCEEDED.value, ExecutionStatus.FAILED_FINAL.value]),
        _E.retain_until <= sa.bindparam("k_now", type_=_E.retain_until.type),
    )
    .values(
        arguments=TOMBSTONE_ARGUMENTS,
        principal=TOMBSTONE_PRINCIPAL,
        result=None,
        retain_until=None,
        purged_at=sa.bindparam("v_purged_at", type_=_E.purged_at.type),
        version=_E.version + 1,
    )
)


_R = raw_results.c


SELECT_RAW = sa.select(raw_results).where(_R.ref == sa.bindparam("k_ref"))


LIST_RAW = (
    sa.select(*(_R[name] for name in _RAW_LISTED))
    .where(_R.tenant_id == sa.bindparam("k_tenant"))
    .order_by(_R.created_at.desc(), _R.ref.desc())
    .limit(sa.bindparam("k_limit"))
)


PURGE_RAW = raw_results.delete().where(
    _R.expires_at <= sa.bindparam("k_before", type_=_R.expires_at.type),
)


_U = runs.c


SELECT_RUN = sa.select(runs).where(_U.run_id == sa.bindparam("k_run"))


UPDATE_RUN = (
    runs.update()
    .where(_U.run_id == sa.bindparam("k_run"), _U.version == sa.bindparam("k_version"))
    .values(
        state=sa.bindparam("v_state"),
        version=sa.bindparam("v_version"),
        updated_at=sa.bindparam("v_at", type_=_U.updated_at.type),
        data=sa.bindparam("v_data", type_=_U.data.type),
        lease_owner=sa.bindparam("v_lease_owner", type_=_U.lease_owner.type),
        lease_until=sa.bindparam("v_lease_until", type_=_U.lease_until.type),
    )
)


def _replace_statement(*, owner: bool, valid: bool, plan: bool = False) -> sa.Update:
    conditions = [
        _E.idempotency_key == sa.bindparam("k_key"),
        _E.status == sa.bindparam("k_status"),
        _E.version == sa.bindparam("k_version"),
    ]
    if owner:
        conditions.append(_E.lease_owner == sa.bindparam("k_owner"))
    if valid:
        conditions.append(
            _E.lease_expires_at > sa.bindparam("k_valid", type_=_E.lease_expires_at.type),
        )
    if plan:
        # Only while the record's plan is CONFIRMED, read FOR SHARE like the claim.
        confirmed = (
            sa.select(_P.plan_id)
            .where(_P.plan_id == _E.plan_id, _P.state == PlanState.CONFIRMED.value)
            .with_for_update(read=True)
        )
        conditions.append(sa.exists(confirmed))
    values = {name: sa.bindparam(f"v_{name}", type_=_E[name].type) for name in _EXECUTION_MUTABLE}
    return executions.update().where(*conditions).values(values)


RECLAIM_EXECUTION = _replace_statement(owner=False, valid=False, plan=True)


REPLACE_EXECUTION = {
    (owner, valid): _replace_statement(owner=owner, valid=valid)
    for owner in (False, True)
    for valid in (False, True)
}


def replace_statements() -> dict[tuple[bool, bool], sa.Update]:
    """The compare-and-set UPDATEs of a record, by (checks lease owner, checks expiry)."""
    return dict(REPLACE_EXECUTION)


def _dialect_insert(dialect: str) -> Callable[[sa.Table], Any]:
    if dialect == "postgresql":
        return postgresql.insert
    if dialect == "sqlite":
        return sqlite.insert
    raise StoreError(f"no insert-on-conflict for dialect {dialect!r}")  # pragma: no cover


def _ignoring_conflict(dialect: str, table: sa.Table) -> Any:  # noqa: ANN401 - dialect insert
    # SQLAlchemy keeps an INSERT's row count only when asked; it says who won.
    statement = _dialect_insert(dialect)(table).on_conflict_do_nothing()
    return statement.execution_options(preserve_rowcount=True)


def insert_execution_statement(dialect: str) -> Any:  # noqa: ANN401 - dialect insert
    """INSERT INTO executions ... ON CONFLICT DO NOTHING."""
    return _ignoring_conflict(dialect, executions)


def claim_statement(dialect: str) -> Any:  # noqa: ANN401 - dialect insert
    """The claim of a planned write: the insert, only while its plan is CONFIRMED.

    INSERT ... SELECT (the row's values) FROM plans WHERE plan_id = :k_plan AND state =
    'CONFIRMED' FOR SHARE ... ON CONFLICT DO NOTHING: a withdrawal in flight (which
    locks the plan FOR UPDATE) finishes first, then this statement sees its outcome.
    SQLite ignores FOR SHARE; it has one writer at a time.
    """
    columns = [c.name for c in executions.columns]
    source = (
        sa.select(*(sa.bindparam(name, type_=_E[name].type) for name in columns))
        .select_from(plans)
        .where(_P.plan_id == sa.bindparam("k_plan"), _P.state == PlanState.CONFIRMED.value)
        .with_for_update(read=True)
    )
    return (
        _dialect_insert(dialect)(executions)
        .from_select(columns, source)
        .on_conflict_do_nothing()
        .execution_options(preserve_rowcount=True)
    )


class Statements:
    """The dialect-specific statements (insert-on-conflict), built once per store."""

    def __init__(self, dialect: str) -> None:
        self.insert_plan = _ignoring_conflict(dialect, plans)
        self.insert_nonce = _ignoring_conflict(dialect, plan_nonces)
        self.insert_approval = _ignoring_conflict(dialect, plan_approvals)
        self.insert_execution = insert_execution_statement(dialect)
        self.claim_execution = claim_statement(dialect)
        self.insert_run = _ignoring_conflict(dialect, runs)
        self.insert_conversation = _ignoring_conflict(dialect, conversations)
        self.insert_pin = _ignoring_conflict(dialect, mcp_pins)
        self.insert_api_key = _ignoring_conflict(dialect, api_keys)
        self.insert_task = _ignoring_conflict(dialect, tasks)
