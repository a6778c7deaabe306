"""SqlStore: the Store contract over SQLAlchemy Core, shared by SQLite and PostgreSQL.

Owns queries and the translation of database errors into StoreError at this one
boundary. Connection setup belongs to the backend modules; schema changes belong to
the Alembic migrations.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from importlib import resources
from typing import Any, Protocol, TypeVar

import sqlalchemy as sa
from alembic import command
from alembic.config import Config

from handrail.errors import StoreError
from handrail.execution import (
    ExecutionRecord,
    ExecutionStatus,
)
from handrail.plans import PlanRecord, PlanState
from handrail.raw import RawRecord
from handrail.spec import ConfirmationMode
from handrail.store._rows import execution_of as _execution
from handrail.store._rows import execution_params, execution_row
from handrail.store._rows import execution_values as _execution_row
from handrail.store._rows import plan_of as _plan
from handrail.store._rows import plan_row as _plan_row
from handrail.store._rows import raw_of as _raw
from handrail.store._rows import raw_row as _raw_row
from handrail.store._rows import utc as _utc
from handrail.store._sql_api_keys import SqlApiKeys
from handrail.store._sql_audit import SqlAudit
from handrail.store._sql_conversations import SqlConversations
from handrail.store._sql_idempotency import SqlIdempotency
from handrail.store._sql_people import SqlPeople
from handrail.store._sql_pins import SqlPins
from handrail.store._sql_runs import SqlRuns
from handrail.store._sql_shared import SqlShared
from handrail.store._sql_tasks import SqlTasks
from handrail.store._statements import (
    LIST_RAW,
    LOCK_PLAN,
    MOVE_PLAN,
    PURGE_EXECUTIONS,
    PURGE_RAW,
    RECLAIM_EXECUTION,
    REPLACE_EXECUTION,
    SELECT_APPROVERS,
    SELECT_EXECUTION,
    SELECT_PLAN,
    SELECT_RAW,
    STARTED,
    Statements,
    approvers_statement,
    list_plans_statement,
)
from handrail.store._tables import (
    executions,
    raw_results,
)

__all__ = ["AsyncExecutions", "SqlStore", "execution_params", "execution_row"]


_MIGRATION_LOCK = 0x68616E64_7261696C
"""The advisory lock key migrations hold on PostgreSQL ("handrail" in ASCII)."""

T = TypeVar("T")


class AsyncExecutions(Protocol):
    """The write path's claim and outcome statements on the event loop, where a backend has them.

    The same statements and answers as `SqlStore.insert_execution(require_confirmed_plan=)`
    and `replace_execution`, taking the rows `execution_row` and `execution_params` make;
    an answer comes only after its row committed.
    """

    async def insert(
        self, row: Mapping[str, Any], *, require_confirmed_plan: bool, wait: float = math.inf
    ) -> bool:
        """Claim a key (INSERT ... ON CONFLICT DO NOTHING); True if this insert won."""
        ...

    async def replace(self, params: Mapping[str, Any], *, owner: bool, valid: bool) -> bool:
        """Compare-and-set a record; True if it was written."""
        ...


def _immediate(connection: sa.Connection) -> sa.Connection:
    # Honoured by SqliteStore's BEGIN handler; other backends ignore the option.
    return connection.execution_options(handrail_immediate=True)


class SqlStore(
    SqlAudit,
    SqlConversations,
    SqlRuns,
    SqlApiKeys,
    SqlPins,
    SqlTasks,
    SqlPeople,
    SqlIdempotency,
    SqlShared,
):
    """A Store on any SQLAlchemy engine whose dialect the migrations support.

    Conversations are kept by `SqlConversations` (`handrail.store._sql_conversations`),
    API keys by `SqlApiKeys` (`handrail.store._sql_api_keys`), MCP tool pins by
    `SqlPins` (`handrail.store._sql_pins`), tasks by `SqlTasks` (`handrail.store._sql_tasks`).
    """

    def __init__(self, engine: sa.Engine, *, autocommit: sa.Engine | None = None) -> None:
        """`autocommit` runs single statements and reads without BEGIN and COMMIT.

        By default it is the engine in the driver's AUTOCOMMIT isolation level; a
        backend that manages transactions itself passes its own view.
        """
        self._engine = engine
        self._autocommit = autocommit or engine.execution_options(isolation_level="AUTOCOMMIT")
        self._sql = Statements(engine.dialect.name)

    @property
    def engine(self) -> sa.Engine:
        """The underlying engine, for backends and migrations."""
        return self._engine

    @property
    def async_executions(self) -> AsyncExecutions | None:
        """Claims and outcome writes on the event loop, where the backend has them."""
        return None

    def migrate(self) -> None:
        """Run Alembic migrations up to head on this store's database.

        On PostgreSQL the migration holds a transaction-level advisory lock, so several
        servers starting at once on one database migrate one after another: the first
        upgrades, the others then find the schema at head (instead of failing on the
        first one's tables or version row).
        """
        config = Config()
        location = resources.files("handrail.store") / "migrations"
        config.set_main_option("script_location", str(location))
        try:
            with self._engine.begin() as connection:
                if connection.dialect.name == "postgresql":
                    connection.execute(
                        sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK}
                    )
                config.attributes["connection"] = connection
                command.upgrade(config, "head")
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(f"migration failed: {type(exc).__name__}") from exc

    # --- plans and confirmations -----------------------------------------------------------

    def _write(
        self,
        what: str,
        work: Callable[[sa.Connection], T],
        connection: sa.Connection | None,
        *,
        single: bool = False,
    ) -> T:
        """Run `work` in `connection`, or in a transaction of its own.

        `single` marks work of one statement: it runs in autocommit mode, which commits
        exactly as durably and saves the round trips of BEGIN and COMMIT.
        """
        try:
            if connection is not None:
                return work(connection)
            if single:
                with self._autocommit.connect() as fresh:
                    return work(fresh)
            with self._engine.begin() as fresh:
                return work(fresh)
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(f"{what} failed: {type(exc).__name__}") from exc

    def _read(
        self,
        what: str,
        work: Callable[[sa.Connection], T],
        connection: sa.Connection | None,
    ) -> T:
        """Run a read in `connection`, or on a pooled one of its own.

        A pooled connection found dead (a restart or failover ended its backend) makes
        SQLAlchemy invalidate the pool; a read is safe to repeat, so it runs once more
        on a new connection. Writes are never repeated: one may have committed.
        """
        try:
            if connection is not None:
                return work(connection)
            try:
                with self._autocommit.connect() as fresh:
                    return work(fresh)
            except sa.exc.DBAPIError as exc:
                if not exc.connection_invalidated:
                    raise
            with self._autocommit.connect() as fresh:
                return work(fresh)
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(f"{what} failed: {type(exc).__name__}") from exc

    def insert_plan(self, record: PlanRecord) -> bool:
        """Store a new plan unless its id is taken."""
        row = _plan_row(record)
        return self._write(
            "plan insert",
            lambda c: c.execute(self._sql.insert_plan, row).rowcount == 1,
            None,
            single=True,
        )

    def get_plan(self, plan_id: str) -> PlanRecord | None:
        """The plan, with its approvals when it is an APPROVE plan."""

        def read(connection: sa.Connection) -> PlanRecord | None:
            row = connection.execute(SELECT_PLAN, {"k_plan": plan_id}).mappings().first()
            if row is None:
                return None
            approvers: frozenset[str] = frozenset()
            if row["confirmation"] == ConfirmationMode.APPROVE.value:
                approvers = frozenset(
                    connection.execute(SELECT_APPROVERS, {"k_plan": plan_id}).scalars(),
                )
            return _plan(row, approvers)

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
        """Compare-and-set the plan's state.

        Withdrawing a CONFIRMED plan locks its row first and only then looks for a
        started execution, in a statement of its own: a claim (which reads the plan
        FOR SHARE) either committed before and is seen, or waits and then finds the
        plan withdrawn.
        """
        params = {
            "k_plan": plan_id,
            "k_state": expect_state.value,
            "k_version": expect_version,
            "v_state": state.value,
            "v_version": expect_version + 1,
            "v_at": _utc(at),
        }
        guarded = expect_state is PlanState.CONFIRMED and state is not PlanState.EXECUTED

        def move(c: sa.Connection) -> bool:
            if guarded:
                if c.execute(LOCK_PLAN, params).first() is None:
                    return False
                if c.execute(STARTED, params).first() is not None:
                    return False
            return c.execute(MOVE_PLAN, params).rowcount == 1

        if guarded and connection is None:
            try:
                with self._engine.connect() as fresh, _immediate(fresh).begin():
                    return move(fresh)
            except sa.exc.SQLAlchemyError as exc:
                raise StoreError(f"plan update failed: {type(exc).__name__}") from exc
        return self._write("plan update", move, connection, single=not guarded)

    def lock_plan(self, plan_id: str, connection: sa.Connection) -> PlanState | None:
        """The plan's state, its row locked until `connection`'s transaction ends.

        PostgreSQL takes a row lock (FOR UPDATE); SQLite's BEGIN IMMEDIATE already holds
        the database's write lock.
        """
        found = self._read(
            "plan lock",
            lambda c: c.execute(LOCK_PLAN, {"k_plan": plan_id}).scalar(),
            connection,
        )
        return None if found is None else PlanState(found)

    def use_nonce(self, nonce: str, *, plan_id: str, user_id: str, at: datetime) -> bool:
        """Mark a nonce used; the primary key makes a second use lose."""
        row = {"nonce": nonce, "plan_id": plan_id, "user_id": user_id, "used_at": _utc(at)}
        return self._write(
            "nonce insert",
            lambda c: c.execute(self._sql.insert_nonce, row).rowcount == 1,
            None,
            single=True,
        )

    def add_approval(self, plan_id: str, *, user_id: str, at: datetime) -> bool:
        """Record an approval once per person."""
        row = {"plan_id": plan_id, "user_id": user_id, "approved_at": _utc(at)}
        return self._write(
            "approval insert",
            lambda c: c.execute(self._sql.insert_approval, row).rowcount == 1,
            None,
            single=True,
        )

    def list_plans(
        self,
        *,
        tenant_id: str | None = None,
        state: PlanState | None = None,
        limit: int = 50,
    ) -> list[PlanRecord]:
        """Matching plans, newest first, with the approvals of APPROVE plans."""
        query = list_plans_statement(tenant_id=tenant_id, state=state, limit=limit)

        def read(c: sa.Connection) -> list[PlanRecord]:
            rows = c.execute(query).mappings().all()
            approve = [r["plan_id"] for r in rows if r["confirmation"] == ConfirmationMode.APPROVE]
            approvers: dict[str, set[str]] = {}
            for plan_id, user_id in c.execute(approvers_statement(approve)) if approve else ():
                approvers.setdefault(plan_id, set()).add(user_id)
            return [_plan(r, frozenset(approvers.get(r["plan_id"], ()))) for r in rows]

        return self._read("plans read", read, None)

    # --- executions ----------------------------------------------------------------------------

    def insert_execution(
        self,
        record: ExecutionRecord,
        *,
        require_confirmed_plan: bool = False,
        connection: sa.Connection | None = None,
    ) -> bool:
        """Insert unless the key exists: INSERT ... ON CONFLICT DO NOTHING.

        With `require_confirmed_plan`, the row is inserted only while the record's plan
        is CONFIRMED, read in the same statement (FOR SHARE on PostgreSQL).
        """
        row = _execution_row(record)
        if require_confirmed_plan:
            statement = self._sql.claim_execution
            row = {**row, "k_plan": record.plan_id}
        else:
            statement = self._sql.insert_execution
        return self._write(
            "execution insert",
            lambda c: c.execute(statement, row).rowcount == 1,
            connection,
            single=True,
        )

    def get_execution(
        self,
        key: str,
        *,
        connection: sa.Connection | None = None,
    ) -> ExecutionRecord | None:
        """The record of a key."""

        def read(c: sa.Connection) -> ExecutionRecord | None:
            row = c.execute(SELECT_EXECUTION, {"k_key": key}).mappings().first()
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
        require_confirmed_plan: bool = False,
        connection: sa.Connection | None = None,
    ) -> bool:
        """Compare-and-set the whole record (one UPDATE ... WHERE)."""
        params = execution_params(
            record,
            expect_status=expect_status,
            expect_version=expect_version,
            lease_owner=lease_owner,
            lease_valid_at=lease_valid_at,
        )
        statement = (
            RECLAIM_EXECUTION
            if require_confirmed_plan
            else REPLACE_EXECUTION[(lease_owner is not None, lease_valid_at is not None)]
        )
        return self._write(
            "execution update",
            lambda c: c.execute(statement, params).rowcount == 1,
            connection,
            single=True,
        )

    def due_executions(
        self,
        *,
        now: datetime,
        limit: int,
        tool: str | None = None,
        tenant_id: str | None = None,
        key: str | None = None,
    ) -> list[ExecutionRecord]:
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
        if tool is not None:
            query = query.where(c.tool == tool)
        if tenant_id is not None:
            query = query.where(c.tenant_id == tenant_id)
        if key is not None:
            query = query.where(c.idempotency_key == key)
        return self._read(
            "due executions read",
            lambda conn: [_execution(r) for r in conn.execute(query).mappings()],
            None,
        )

    def list_executions(
        self,
        *,
        status: ExecutionStatus | None = None,
        tenant_id: str | None = None,
        limit: int = 50,
    ) -> list[ExecutionRecord]:
        """Matching records, most recently updated first."""
        c = executions.c
        query = (
            sa.select(executions)
            .order_by(c.updated_at.desc(), c.idempotency_key.desc())
            .limit(max(0, limit))
        )
        if status is not None:
            query = query.where(c.status == status.value)
        if tenant_id is not None:
            query = query.where(c.tenant_id == tenant_id)
        return self._read(
            "executions read",
            lambda conn: [_execution(r) for r in conn.execute(query).mappings()],
            None,
        )

    def purge_executions(self, *, now: datetime) -> int:
        """Strip settled records past retention to tombstones, in one UPDATE."""
        params = {"k_now": _utc(now), "v_purged_at": _utc(now)}
        return self._write(
            "execution purge",
            lambda conn: int(conn.execute(PURGE_EXECUTIONS, params).rowcount),
            None,
            single=True,
        )

    # --- raw results -------------------------------------------------------------------------

    def put_raw(self, record: RawRecord) -> None:
        """Insert a raw record; a taken ref violates the primary key: StoreError."""
        row = _raw_row(record)
        self._write(
            "raw insert",
            lambda c: c.execute(raw_results.insert(), row),
            None,
            single=True,
        )

    def get_raw(self, ref: str) -> RawRecord | None:
        """The record of a ref, with its body."""

        def read(c: sa.Connection) -> RawRecord | None:
            row = c.execute(SELECT_RAW, {"k_ref": ref}).mappings().first()
            return None if row is None else _raw(row)

        return self._read("raw read", read, None)

    def purge_raw(self, *, before: datetime) -> int:
        """Delete the records with `expires_at <= before`; how many."""
        return self._write(
            "raw purge",
            lambda c: int(c.execute(PURGE_RAW, {"k_before": _utc(before)}).rowcount),
            None,
            single=True,
        )

    def list_raw(self, *, tenant_id: str, limit: int = 50) -> list[RawRecord]:
        """A tenant's records, newest first, bodies left out (never read from disk)."""
        params = {"k_tenant": tenant_id, "k_limit": max(0, limit)}
        return self._read(
            "raw list",
            lambda c: [_raw(r) for r in c.execute(LIST_RAW, params).mappings()],
            None,
        )

    @contextmanager
    def transaction(self) -> Iterator[sa.Connection]:
        """One transaction for an effect in this database and its execution record.

        Everything done on the connection commits together or not at all. On SQLite the
        transaction takes the write lock at its start (BEGIN IMMEDIATE), so a read in it
        cannot be invalidated by another writer before it commits.
        """
        try:
            with self._engine.connect() as connection, _immediate(connection).begin():
                yield connection
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(f"transaction failed: {type(exc).__name__}") from exc

    def close(self) -> None:
        """Dispose of the connection pool."""
        self._engine.dispose()
