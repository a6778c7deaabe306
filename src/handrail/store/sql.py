"""SqlStore: the Store contract over SQLAlchemy Core, shared by SQLite and PostgreSQL.

Owns queries and the translation of database errors into StoreError at this one
boundary. Connection setup belongs to the backend modules; schema changes belong to
the Alembic migrations.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import fields
from datetime import UTC, datetime
from importlib import resources
from typing import Any, TypeVar

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.dialects import postgresql, sqlite

from handrail.audit import AuditEvent, AuditSubject
from handrail.errors import StoreError
from handrail.execution import ExecutionRecord, ExecutionStatus
from handrail.plans import Impact, Plan, PlanRecord, PlanState
from handrail.spec import ConfirmationMode, RiskLevel
from handrail.store._tables import audit_events, executions, plan_approvals, plan_nonces, plans

__all__ = ["SqlStore"]

T = TypeVar("T")

_NOT_STARTED = (ExecutionStatus.PREPARED.value, ExecutionStatus.FAILED_FINAL.value)

_EVENT_FIELDS = tuple(f.name for f in fields(AuditEvent) if f.name != "subject")
_SUBJECT_FIELDS = tuple(f.name for f in fields(AuditSubject))


def _row(event: AuditEvent) -> dict[str, object]:
    # Not dataclasses.asdict: it deep-copies every value, which costs 20x more.
    row = {name: getattr(event, name) for name in _EVENT_FIELDS}
    subject = event.subject
    row.update((name, getattr(subject, name)) for name in _SUBJECT_FIELDS)
    return row


def _aware(value: datetime) -> datetime:
    # SQLite returns naive datetimes; every stored time is UTC.
    return value.astimezone(UTC) if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _maybe_aware(value: datetime | None) -> datetime | None:
    return None if value is None else _aware(value)


def _utc(value: datetime | None) -> datetime | None:
    # SQLite stores times as text without the offset, so every bound time is UTC.
    return None if value is None else value.astimezone(UTC)


_EXECUTION_FIELDS = tuple(f.name for f in fields(ExecutionRecord))
_EXECUTION_TIMES = frozenset(
    {"lease_expires_at", "next_check_at", "created_at", "updated_at", "retain_until"},
)
_EXECUTION_MUTABLE = tuple(
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


def _execution_row(record: ExecutionRecord) -> dict[str, Any]:
    row: dict[str, Any] = {name: getattr(record, name) for name in _EXECUTION_FIELDS}
    for name in _EXECUTION_TIMES:
        row[name] = _utc(row[name])
    row["status"] = record.status.value
    return row


def _execution(row: sa.RowMapping) -> ExecutionRecord:
    values = {name: row[name] for name in _EXECUTION_FIELDS}
    for name in _EXECUTION_TIMES:
        values[name] = _maybe_aware(values[name])
    values["status"] = ExecutionStatus(values["status"])
    values["escalated"] = bool(values["escalated"])
    return ExecutionRecord(**values)


def _plan_row(record: PlanRecord) -> dict[str, Any]:
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
        "impact": json.dumps(plan.impact.to_json(), sort_keys=True, ensure_ascii=False),
        "created_at": _utc(plan.created_at),
        "expires_at": _utc(plan.expires_at),
        "revises": plan.revises,
        "approver_permission": plan.approver_permission,
        "plan_hash": plan.plan_hash,
        "state": record.state.value,
        "version": record.version,
        "updated_at": _utc(record.updated_at),
    }


def _plan(row: sa.RowMapping, approvals: frozenset[str]) -> PlanRecord:
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
        created_at=_aware(row["created_at"]),
        expires_at=_aware(row["expires_at"]),
        revises=row["revises"],
        approver_permission=row["approver_permission"],
        plan_hash=row["plan_hash"],
    )
    return PlanRecord(
        plan=plan,
        state=PlanState(row["state"]),
        version=row["version"],
        approvals=approvals,
        updated_at=_aware(row["updated_at"]),
    )


class SqlStore:
    """A Store on any SQLAlchemy engine whose dialect the migrations support."""

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine

    @property
    def engine(self) -> sa.Engine:
        """The underlying engine, for backends and migrations."""
        return self._engine

    def migrate(self) -> None:
        """Run Alembic migrations up to head on this store's database."""
        config = Config()
        location = resources.files("handrail.store") / "migrations"
        config.set_main_option("script_location", str(location))
        try:
            with self._engine.begin() as connection:
                config.attributes["connection"] = connection
                command.upgrade(config, "head")
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(f"migration failed: {type(exc).__name__}") from exc

    def append_audit(self, events: Sequence[AuditEvent]) -> None:
        """Insert events in one transaction."""
        if not events:
            return
        rows = [_row(event) for event in events]
        try:
            with self._engine.begin() as connection:
                connection.execute(audit_events.insert(), rows)
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(f"audit write failed: {type(exc).__name__}") from exc

    def read_audit(
        self,
        *,
        limit: int = 50,
        tenant_id: str | None = None,
        tool_call_id: str | None = None,
    ) -> list[AuditEvent]:
        """The newest `limit` matching events, oldest first."""
        query = sa.select(audit_events).order_by(audit_events.c.seq.desc()).limit(max(0, limit))
        if tenant_id is not None:
            query = query.where(audit_events.c.tenant_id == tenant_id)
        if tool_call_id is not None:
            query = query.where(audit_events.c.tool_call_id == tool_call_id)
        try:
            with self._engine.connect() as connection:
                rows = connection.execute(query).mappings().all()
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(f"audit read failed: {type(exc).__name__}") from exc
        return [
            AuditEvent(
                **{name: row[name] for name in _EVENT_FIELDS if name != "at"},
                at=_aware(row["at"]),
                subject=AuditSubject(**{name: row[name] for name in _SUBJECT_FIELDS}),
            )
            for row in reversed(rows)
        ]

    # --- plans and confirmations -----------------------------------------------------------

    def _insert_ignoring_conflict(self, table: sa.Table) -> Any:  # noqa: ANN401 - dialect insert
        dialect = self._engine.dialect.name
        # SQLAlchemy keeps an INSERT's row count only when asked; it says who won.
        if dialect == "postgresql":
            statement = postgresql.insert(table).on_conflict_do_nothing()
            return statement.execution_options(preserve_rowcount=True)
        if dialect == "sqlite":
            lite = sqlite.insert(table).on_conflict_do_nothing()
            return lite.execution_options(preserve_rowcount=True)
        raise StoreError(f"no insert-on-conflict for dialect {dialect!r}")  # pragma: no cover

    def _write(
        self, what: str, work: Callable[[sa.Connection], T], connection: sa.Connection | None
    ) -> T:
        try:
            if connection is not None:
                return work(connection)
            with self._engine.begin() as fresh:
                return work(fresh)
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(f"{what} failed: {type(exc).__name__}") from exc

    def _read(
        self, what: str, work: Callable[[sa.Connection], T], connection: sa.Connection | None
    ) -> T:
        try:
            if connection is not None:
                return work(connection)
            with self._engine.connect() as fresh:
                return work(fresh)
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(f"{what} failed: {type(exc).__name__}") from exc

    def insert_plan(self, record: PlanRecord) -> bool:
        """Store a new plan unless its id is taken."""
        statement = self._insert_ignoring_conflict(plans).values(**_plan_row(record))
        return self._write(
            "plan insert",
            lambda c: c.execute(statement).rowcount == 1,
            None,
        )

    def get_plan(self, plan_id: str) -> PlanRecord | None:
        """The plan with its approvals."""

        def read(connection: sa.Connection) -> PlanRecord | None:
            row = (
                connection.execute(
                    sa.select(plans).where(plans.c.plan_id == plan_id),
                )
                .mappings()
                .first()
            )
            if row is None:
                return None
            approvers = connection.execute(
                sa.select(plan_approvals.c.user_id).where(plan_approvals.c.plan_id == plan_id),
            ).scalars()
            return _plan(row, frozenset(approvers))

        return self._read("plan read", read, None)

    def move_plan(
        self,
        plan_id: str,
        *,
        expect_state: PlanState,
        expect_version: int,
        state: PlanState,
        at: datetime,
        connection: sa.Connection | None = None,
    ) -> bool:
        """Compare-and-set the plan's state."""
        conditions = [
            plans.c.plan_id == plan_id,
            plans.c.state == expect_state.value,
            plans.c.version == expect_version,
        ]
        if expect_state is PlanState.CONFIRMED and state is not PlanState.EXECUTED:
            # A confirmed plan whose execution has started can no longer be withdrawn.
            started = sa.select(executions.c.idempotency_key).where(
                executions.c.plan_id == plan_id,
                executions.c.status.not_in(_NOT_STARTED),
            )
            conditions.append(~sa.exists(started))
        statement = (
            plans.update()
            .where(*conditions)
            .values(state=state.value, version=expect_version + 1, updated_at=_utc(at))
        )
        return self._write("plan update", lambda c: c.execute(statement).rowcount == 1, connection)

    def lock_plan(self, plan_id: str, connection: sa.Connection) -> PlanState | None:
        """The plan's state, its row locked until `connection`'s transaction ends.

        PostgreSQL takes a row lock (FOR UPDATE); SQLite's BEGIN IMMEDIATE already holds
        the database's write lock.
        """
        query = sa.select(plans.c.state).where(plans.c.plan_id == plan_id).with_for_update()
        found = self._read("plan lock", lambda c: c.execute(query).scalar(), connection)
        return None if found is None else PlanState(found)

    def use_nonce(self, nonce: str, *, plan_id: str, user_id: str, at: datetime) -> bool:
        """Mark a nonce used; the primary key makes a second use lose."""
        statement = self._insert_ignoring_conflict(plan_nonces).values(
            nonce=nonce,
            plan_id=plan_id,
            user_id=user_id,
            used_at=_utc(at),
        )
        return self._write("nonce insert", lambda c: c.execute(statement).rowcount == 1, None)

    def add_approval(self, plan_id: str, *, user_id: str, at: datetime) -> bool:
        """Record an approval once per person."""
        statement = self._insert_ignoring_conflict(plan_approvals).values(
            plan_id=plan_id,
            user_id=user_id,
            approved_at=_utc(at),
        )
        return self._write("approval insert", lambda c: c.execute(statement).rowcount == 1, None)

    # --- executions ----------------------------------------------------------------------------

    def insert_execution(
        self,
        record: ExecutionRecord,
        *,
        connection: sa.Connection | None = None,
    ) -> bool:
        """Insert unless the key exists: INSERT ... ON CONFLICT DO NOTHING."""
        statement = self._insert_ignoring_conflict(executions).values(**_execution_row(record))
        return self._write(
            "execution insert",
            lambda c: c.execute(statement).rowcount == 1,
            connection,
        )

    def get_execution(
        self,
        key: str,
        *,
        connection: sa.Connection | None = None,
    ) -> ExecutionRecord | None:
        """The record of a key."""
        query = sa.select(executions).where(executions.c.idempotency_key == key)

        def read(c: sa.Connection) -> ExecutionRecord | None:
            row = c.execute(query).mappings().first()
            return None if row is None else _execution(row)

        return self._read("execution read", read, connection)

    def replace_execution(
        self,
        record: ExecutionRecord,
        *,
        expect_status: ExecutionStatus,
        expect_version: int,
        lease_owner: str | None = None,
        lease_valid_at: datetime | None = None,
        connection: sa.Connection | None = None,
    ) -> bool:
        """Compare-and-set the whole record (one UPDATE ... WHERE)."""
        row = _execution_row(record)
        conditions = [
            executions.c.idempotency_key == record.idempotency_key,
            executions.c.status == expect_status.value,
            executions.c.version == expect_version,
        ]
        if lease_owner is not None:
            conditions.append(executions.c.lease_owner == lease_owner)
        if lease_valid_at is not None:
            conditions.append(executions.c.lease_expires_at > _utc(lease_valid_at))
        statement = (
            executions.update()
            .where(*conditions)
            .values(**{name: row[name] for name in _EXECUTION_MUTABLE})
        )
        settle_plan = None
        if record.status is ExecutionStatus.SUCCEEDED and record.plan_id is not None:
            settle_plan = (
                plans.update()
                .where(
                    plans.c.plan_id == record.plan_id, plans.c.state == PlanState.CONFIRMED.value
                )
                .values(
                    state=PlanState.EXECUTED.value,
                    version=plans.c.version + 1,
                    updated_at=_utc(record.updated_at),
                )
            )

        def write(c: sa.Connection) -> bool:
            if c.execute(statement).rowcount != 1:
                return False
            if settle_plan is not None:
                c.execute(settle_plan)
            return True

        return self._write("execution update", write, connection)

    def due_executions(self, *, now: datetime, limit: int) -> list[ExecutionRecord]:
        """RUNNING records with expired leases and due UNKNOWN ones, oldest first."""
        at = _utc(now)
        c = executions.c
        lease_free = sa.or_(c.lease_expires_at.is_(None), c.lease_expires_at <= at)
        query = (
            sa.select(executions)
            .where(
                sa.or_(
                    sa.and_(
                        c.status == ExecutionStatus.RUNNING.value,
                        c.lease_expires_at <= at,
                    ),
                    sa.and_(
                        c.status == ExecutionStatus.UNKNOWN.value,
                        c.next_check_at <= at,
                        lease_free,
                    ),
                ),
            )
            .order_by(c.updated_at, c.idempotency_key)
            .limit(max(0, limit))
        )
        return self._read(
            "due executions read",
            lambda conn: [_execution(r) for r in conn.execute(query).mappings()],
            None,
        )

    def purge_executions(self, *, now: datetime) -> int:
        """Drop settled records past retention."""
        c = executions.c
        statement = executions.delete().where(
            c.status.in_([ExecutionStatus.SUCCEEDED.value, ExecutionStatus.FAILED_FINAL.value]),
            c.retain_until <= _utc(now),
        )
        return self._write(
            "execution purge", lambda conn: int(conn.execute(statement).rowcount), None
        )

    @contextmanager
    def transaction(self) -> Iterator[sa.Connection]:
        """One transaction for an effect in this database and its execution record.

        Everything done on the connection commits together or not at all. On SQLite the
        transaction takes the write lock at its start (BEGIN IMMEDIATE), so a read in it
        cannot be invalidated by another writer before it commits.
        """
        try:
            with (
                self._engine.connect() as connection,
                connection.execution_options(handrail_immediate=True).begin(),
            ):
                yield connection
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(f"transaction failed: {type(exc).__name__}") from exc

    def close(self) -> None:
        """Dispose of the connection pool."""
        self._engine.dispose()
