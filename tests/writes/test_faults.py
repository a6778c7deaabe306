"""Faults on the write path, on SQLite and PostgreSQL: each one ends in a known state.

A ticket system in memory that never dedupes counts the effects; the tool is scripted
to fail in one way per test (lost response, overrun, transient or final failure, a
version that moved, a late answer after its lease). The own-database write loses its
connection at COMMIT, injected into the driver's commit itself. Time is a FixedClock,
moved by the tests; every wait on a task is bounded.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any, Literal

import psycopg
import pytest
import sqlalchemy as sa
from pydantic import Field

from handrail import Gate, Principal, Registry, RiskLevel, SideEffect, ToolCall, ToolContext, tool
from handrail.declare.definition import Tool
from handrail.declare.hooks import Found, NotExecuted
from handrail.errors import ErrorCode, ToolFailed, ToolRetryable
from handrail.execution import ExecutionRecord, ExecutionStatus, plan_key
from handrail.plans import PlanState
from handrail.signing import SigningKey
from handrail.spec import ConfirmationMode, ConfirmationPolicy, ReconcilePolicy
from handrail.store import SqlStore
from handrail.testing import FixedClock, MemoryAuditSink
from handrail.writes.confirmation import Keyring
from handrail.writes.reconcile import Reconciler
from handrail.writes.service import Writes

pytestmark = pytest.mark.anyio

ALICE = Principal(user_id="alice", tenant_id="t1", request_id="req-faults")
ASSET = "asset-7"
WAIT_S = 20.0
"""Bound on every wait for a task of the test's own; never reached when things work."""
POLICY = ReconcilePolicy(not_found_grace=600.0, first_check=5.0, lease_grace=10.0)
"""A "not found" is proof only ten minutes after the attempt."""
_CONFIRM = ConfirmationPolicy(mode=ConfirmationMode.CONFIRM)


class Fault(StrEnum):
    """What the ticket tool does on one call."""

    NONE = "none"
    LOSE_RESPONSE = "lose_response"
    """Opens the ticket, then the answer is lost (TimeoutError)."""
    OVERRUN = "overrun"
    """Opens the ticket, then never answers: the deadline cancels it."""
    RETRYABLE = "retryable"
    """Declares a transient failure before doing anything."""
    FAILED = "failed"
    """Declares a final failure before doing anything."""
    BLOCK_BEFORE_EFFECT = "block_before_effect"
    BLOCK_AFTER_EFFECT = "block_after_effect"


@dataclass
class Tickets:
    """A downstream ticket system that opens a new ticket on every call, never deduping."""

    opened: list[dict[str, object]] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    calls: int = 0
    faults: deque[Fault] = field(default_factory=deque)
    versions: dict[str, str] = field(default_factory=lambda: {ASSET: "v1"})
    started: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    def open(self, key: str, asset_id: str) -> dict[str, object]:
        ticket: dict[str, object] = {
            "ticket_no": f"TK-{len(self.opened) + 1:04d}",
            "asset_id": asset_id,
        }
        self.opened.append(ticket)
        self.keys.append(key)
        return ticket

    def find(self, key: str) -> dict[str, object] | None:
        return next((t for t, k in zip(self.opened, self.keys, strict=True) if k == key), None)

    async def hold(self) -> None:
        self.started.set()
        await self.release.wait()


def _ticket_tool(tickets: Tickets) -> Tool:
    def reconcile(key: str, ctx: ToolContext) -> Found | NotExecuted:
        found = tickets.find(key)
        return NotExecuted() if found is None else Found(found)

    def version(arguments: Any, ctx: ToolContext) -> str:
        return tickets.versions[arguments.asset_id]

    @tool(
        name="open_ticket",
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        side_effect=SideEffect.EXTERNAL_WRITE,
        confirmation=_CONFIRM,
        reconcile_policy=POLICY,
        reconcile=reconcile,
        resolve_version=version,
        business_id="ticket_no",
    )
    async def open_ticket(
        ctx: ToolContext,
        asset_id: Annotated[str, Field(pattern=r"^asset-[0-9]{1,6}$")],
    ) -> dict[str, object]:
        """Open a recovery ticket for an asset in the ticket system."""
        tickets.calls += 1
        fault = tickets.faults.popleft() if tickets.faults else Fault.NONE
        if fault is Fault.RETRYABLE:
            raise ToolRetryable("The ticket system is busy; try again shortly.", retry_after=2.0)
        if fault is Fault.FAILED:
            raise ToolFailed("The asset is retired; no ticket can be opened for it.")
        if fault is Fault.BLOCK_BEFORE_EFFECT:
            await tickets.hold()
        assert ctx.idempotency_key is not None
        ticket = tickets.open(ctx.idempotency_key, asset_id)
        if fault is Fault.BLOCK_AFTER_EFFECT:
            await tickets.hold()
        if fault is Fault.LOSE_RESPONSE:
            raise TimeoutError("the response was lost")
        if fault is Fault.OVERRUN:
            await asyncio.Event().wait()
        return ticket

    return open_ticket


@dataclass
class Harness:
    store: SqlStore
    clock: FixedClock
    audit: MemoryAuditSink
    registry: Registry
    writes: Writes
    reconciler: Reconciler
    tickets: Tickets

    async def confirmed_plan(self, tool_name: str = "open_ticket") -> str:
        gate = Gate(self.registry, writes=self.writes, clock=self.clock)
        call = ToolCall(id="call-1", name=tool_name, arguments={"asset_id": ASSET})
        envelope = await gate.handle(call, ALICE)
        assert envelope.error_type is ErrorCode.NEEDS_CONFIRMATION
        plan_id = str(envelope.data["plan_id"])
        token = await self.writes.issue_token(plan_id, ALICE)
        assert (await self.writes.confirm(plan_id, token.value, ALICE)).state is (
            PlanState.CONFIRMED
        )
        return plan_id

    def key(self, plan_id: str, tool_name: str = "open_ticket") -> str:
        return plan_key(tenant_id=ALICE.tenant_id, tool=tool_name, plan_id=plan_id)

    def record(self, plan_id: str, tool_name: str = "open_ticket") -> ExecutionRecord:
        found = self.store.get_execution(self.key(plan_id, tool_name))
        assert found is not None
        return found

    async def plan_state(self, plan_id: str) -> PlanState:
        return (await self.writes.get_plan(plan_id, ALICE)).state


@pytest.fixture
def h(sql_store: SqlStore) -> Harness:
    clock = FixedClock()
    audit = MemoryAuditSink()
    tickets = Tickets()
    registry = Registry()
    registry.register(_ticket_tool(tickets))
    keyring = Keyring(SigningKey("k1", b"fault-tests-confirmation-key-0123456789"))
    return Harness(
        store=sql_store,
        clock=clock,
        audit=audit,
        registry=registry,
        writes=Writes(registry, sql_store, keyring, clock=clock, audit=audit, worker_id="worker-a"),
        reconciler=Reconciler(registry, sql_store, clock=clock, audit=audit),
        tickets=tickets,
    )


# --- an external write whose answer never arrives ------------------------------------------------


@pytest.mark.invariant(6)
@pytest.mark.parametrize("fault", [Fault.LOSE_RESPONSE, Fault.OVERRUN])
async def test_a_write_that_committed_downstream_then_timed_out_is_unknown_until_reconciled(
    h: Harness, fault: Fault
) -> None:
    plan_id = await h.confirmed_plan()
    h.tickets.faults.append(fault)

    first = await h.writes.execute_plan(
        plan_id, ALICE, timeout=0.05 if fault is Fault.OVERRUN else 30.0
    )
    assert first.envelope.error_type is ErrorCode.OUTCOME_UNKNOWN
    assert first.record is not None
    assert first.record.status is ExecutionStatus.UNKNOWN
    (ticket,) = h.tickets.opened

    # Asked again before anyone checked: still UNKNOWN, the tool is not called.
    again = await h.writes.execute_plan(plan_id, ALICE)
    assert again.envelope.error_type is ErrorCode.OUTCOME_UNKNOWN
    assert again.replayed
    assert h.tickets.calls == 1
    not_due = await h.reconciler.run_once()
    assert not_due.succeeded == ()
    assert h.record(plan_id).status is ExecutionStatus.UNKNOWN

    h.clock.advance(POLICY.first_check)
    report = await h.reconciler.run_once()
    assert report.succeeded == (h.key(plan_id),)
    record = h.record(plan_id)
    assert record.status is ExecutionStatus.SUCCEEDED
    assert record.business_id == ticket["ticket_no"] == "TK-0001"
    assert record.result_value == ticket
    assert record.attempts == 1

    replay = await h.writes.execute_plan(plan_id, ALICE)
    assert replay.replayed
    assert replay.envelope.ok
    assert replay.envelope.data == ticket
    assert h.tickets.calls == 1
    assert len(h.tickets.opened) == 1
    assert await h.plan_state(plan_id) is PlanState.EXECUTED


# --- declared failures ---------------------------------------------------------------------------


async def test_a_transient_failure_before_the_effect_releases_the_record_and_a_later_run_succeeds(
    h: Harness,
) -> None:
    plan_id = await h.confirmed_plan()
    h.tickets.faults.append(Fault.RETRYABLE)

    first = await h.writes.execute_plan(plan_id, ALICE)
    assert first.envelope.error_type is ErrorCode.TRANSIENT
    assert first.envelope.retryable
    assert first.envelope.retry_after == 2.0
    released = h.record(plan_id)
    assert released.status is ExecutionStatus.PREPARED
    assert released.lease_owner is None
    assert h.tickets.opened == []

    h.clock.advance(2.0)
    second = await h.writes.execute_plan(plan_id, ALICE)
    assert second.envelope.ok
    assert not second.replayed
    (ticket,) = h.tickets.opened
    assert second.envelope.data == ticket
    record = h.record(plan_id)
    assert record.status is ExecutionStatus.SUCCEEDED
    assert record.attempts == 2
    assert h.tickets.keys == [h.key(plan_id)]

    third = await h.writes.execute_plan(plan_id, ALICE)
    assert third.replayed
    assert third.envelope.data == ticket
    assert h.tickets.calls == 2
    assert len(h.tickets.opened) == 1


async def test_a_released_write_whose_target_changed_meanwhile_is_a_version_conflict(
    h: Harness,
) -> None:
    plan_id = await h.confirmed_plan()
    h.tickets.faults.append(Fault.RETRYABLE)
    first = await h.writes.execute_plan(plan_id, ALICE)
    assert first.envelope.error_type is ErrorCode.TRANSIENT
    h.tickets.versions[ASSET] = "v2"

    refused = await h.writes.execute_plan(plan_id, ALICE)
    assert refused.code is ErrorCode.VERSION_CONFLICT
    assert h.tickets.calls == 1
    assert h.tickets.opened == []


async def test_an_explicit_downstream_failure_is_final_and_replayed_without_calling_the_tool(
    h: Harness,
) -> None:
    plan_id = await h.confirmed_plan()
    h.tickets.faults.append(Fault.FAILED)

    first = await h.writes.execute_plan(plan_id, ALICE)
    assert first.envelope.error_type is ErrorCode.FAILED_FINAL
    assert not first.envelope.retryable
    assert first.envelope.summary == "The asset is retired; no ticket can be opened for it."
    record = h.record(plan_id)
    assert record.status is ExecutionStatus.FAILED_FINAL
    assert record.error_code == ErrorCode.FAILED_FINAL

    again = await h.writes.execute_plan(plan_id, ALICE)
    assert again.replayed
    assert again.envelope.error_type is ErrorCode.FAILED_FINAL
    assert again.envelope.summary == first.envelope.summary
    assert h.tickets.calls == 1
    assert h.tickets.opened == []
    assert h.record(plan_id) == record


async def test_a_version_changed_after_confirmation_is_a_conflict_and_nothing_runs(
    h: Harness,
) -> None:
    plan_id = await h.confirmed_plan()
    h.tickets.versions[ASSET] = "v2"

    refused = await h.writes.execute_plan(plan_id, ALICE)
    assert refused.code is ErrorCode.VERSION_CONFLICT
    assert h.store.get_execution(h.key(plan_id)) is None
    assert await h.plan_state(plan_id) is PlanState.REJECTED

    # The rejected plan stays closed, even with the old version back.
    h.tickets.versions[ASSET] = "v1"
    closed = await h.writes.execute_plan(plan_id, ALICE)
    assert closed.code is ErrorCode.PLAN_CLOSED
    assert h.tickets.calls == 0
    assert h.tickets.opened == []


# --- a late answer after the lease ran out -------------------------------------------------------


@pytest.mark.invariant(6)
@pytest.mark.parametrize("fault", [Fault.BLOCK_AFTER_EFFECT, Fault.BLOCK_BEFORE_EFFECT])
async def test_the_late_outcome_of_an_expired_lease_is_fenced_off(h: Harness, fault: Fault) -> None:
    plan_id = await h.confirmed_plan()
    key = h.key(plan_id)
    h.tickets.faults.append(fault)

    first = asyncio.create_task(h.writes.execute_plan(plan_id, ALICE))
    try:
        await asyncio.wait_for(h.tickets.started.wait(), WAIT_S)
        running = h.record(plan_id)
        assert running.status is ExecutionStatus.RUNNING
        assert running.lease_owner == "worker-a"
        assert running.lease_expires_at is not None
        h.clock.advance((running.lease_expires_at - h.clock.now()).total_seconds() + 1)

        report = await h.reconciler.run_once()
        assert report.expired_leases == (key,)
        taken = h.record(plan_id)
        if fault is Fault.BLOCK_AFTER_EFFECT:  # the ticket exists: found
            assert report.succeeded == (key,)
            assert taken.status is ExecutionStatus.SUCCEEDED
            assert taken.business_id == "TK-0001"
        else:  # no ticket yet, inside the grace window: no proof either way
            assert report.still_unknown == (key,)
            assert taken.status is ExecutionStatus.UNKNOWN
    finally:
        h.tickets.release.set()
        outcome = await asyncio.wait_for(first, WAIT_S)

    # The original worker finished, but its SUCCEEDED was refused: the record is the
    # reconciler's, and the first caller learns only that the outcome is unknown.
    assert outcome.envelope.error_type is ErrorCode.OUTCOME_UNKNOWN
    assert outcome.record is None
    assert h.record(plan_id) == taken
    fenced = [e for e in h.audit.events if e.stage == "fenced"]
    assert len(fenced) == 1
    assert fenced[0].decision == "refused"
    assert fenced[0].detail is not None
    assert json.loads(fenced[0].detail)["wanted"] == "SUCCEEDED"
    (ticket,) = h.tickets.opened

    if fault is Fault.BLOCK_BEFORE_EFFECT:
        assert taken.next_check_at is not None
        h.clock.advance((taken.next_check_at - h.clock.now()).total_seconds() + 1)
        later = await h.reconciler.run_once()
        assert later.succeeded == (key,)
    record = h.record(plan_id)
    assert record.status is ExecutionStatus.SUCCEEDED
    assert record.business_id == ticket["ticket_no"]
    replay = await h.writes.execute_plan(plan_id, ALICE)
    assert replay.replayed
    assert replay.envelope.data == ticket
    assert h.tickets.calls == 1
    assert len(h.tickets.opened) == 1


# --- an own-database write whose connection is lost at COMMIT ------------------------------------


CommitFaultAt = Literal["before_commit", "after_commit"]


class CommitFault:
    """Loses the database connection of one armed transaction at its COMMIT.

    Wraps the dialect's `do_commit`, the one call that sends COMMIT to the driver.
    `before_commit`: the connection dies first (PostgreSQL: its backend is terminated;
    SQLite: its handle is closed), so the COMMIT fails. `after_commit`: the COMMIT goes
    through and the connection dies before the answer is read, as when a response is
    lost. Either way the caller sees the driver's own error for a lost connection.
    """

    def __init__(self, store: SqlStore, at: CommitFaultAt) -> None:
        self._store = store
        self._at = at
        self._commit: Callable[[Any], None] = store.engine.dialect.do_commit
        self._armed: Any = None
        self.shots = 1
        self.fired = False

    def arm(self, connection: sa.Connection) -> None:
        """Fault the COMMIT of this transaction, once per CommitFault."""
        if self.shots:
            self.shots -= 1
            self._armed = connection.connection

    def do_commit(self, dbapi_connection: Any) -> None:
        if dbapi_connection is not self._armed:
            self._commit(dbapi_connection)
            return
        self._armed = None
        self.fired = True
        driver = dbapi_connection.driver_connection
        if self._at == "before_commit":
            self._lose(driver)
            self._commit(dbapi_connection)
            raise AssertionError("a COMMIT on a lost connection succeeded")
        self._commit(dbapi_connection)
        self._lose(driver)
        # The first round trip on the lost connection raises the driver's real error.
        if isinstance(driver, sqlite3.Connection):
            driver.execute("SELECT 1")
        else:
            driver.execute("SELECT 1").fetchall()
        raise AssertionError("a query on a lost connection succeeded")

    def _lose(self, driver: Any) -> None:
        if isinstance(driver, sqlite3.Connection):
            driver.close()
            return
        url = self._store.engine.url.set(drivername="postgresql")
        with psycopg.connect(url.render_as_string(hide_password=False), autocommit=True) as admin:
            ended = admin.execute(
                "SELECT pg_terminate_backend(%s, 5000)", (driver.info.backend_pid,)
            ).fetchone()
        assert ended == (True,)


@pytest.fixture
def repairs(sql_store: SqlStore) -> Iterator[sa.Table]:
    """A table of the application's own, in the store's database."""
    table = sa.Table(
        f"repairs_{uuid.uuid4().hex[:8]}",
        sa.MetaData(),
        sa.Column("repair_id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("key", sa.String(100), nullable=False),
        sa.Column("asset_id", sa.String(40), nullable=False),
    )
    table.create(sql_store.engine)
    try:
        yield table
    finally:
        table.drop(sql_store.engine)


def _repair_tool(table: sa.Table, fault: CommitFault) -> Tool:
    @tool(
        name="record_repair",
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        side_effect=SideEffect.LOCAL_WRITE,
        confirmation=_CONFIRM,
        business_id="repair_id",
    )
    async def record_repair(
        ctx: ToolContext,
        asset_id: Annotated[str, Field(pattern=r"^asset-[0-9]{1,6}$")],
    ) -> dict[str, object]:
        """Record a repair of an asset in the service's own database."""
        connection = ctx.transaction
        assert connection is not None
        inserted = connection.execute(
            table.insert().values(key=ctx.idempotency_key, asset_id=asset_id)
        )
        fault.arm(connection)
        primary_key = inserted.inserted_primary_key
        assert primary_key is not None
        return {"repair_id": int(primary_key[0]), "asset_id": asset_id}

    return record_repair


def _rows(store: SqlStore, table: sa.Table) -> list[tuple[int, str]]:
    with store.engine.connect() as connection:
        return [(r.repair_id, r.key) for r in connection.execute(sa.select(table))]


@pytest.mark.invariant(4)
@pytest.mark.parametrize(("at", "committed"), [("before_commit", False), ("after_commit", True)])
async def test_losing_the_connection_at_commit_keeps_an_own_database_effect_and_its_record_together(
    h: Harness,
    repairs: sa.Table,
    monkeypatch: pytest.MonkeyPatch,
    at: CommitFaultAt,
    committed: bool,
) -> None:
    fault = CommitFault(h.store, at)
    monkeypatch.setattr(h.store.engine.dialect, "do_commit", fault.do_commit)
    h.registry.register(_repair_tool(repairs, fault))
    plan_id = await h.confirmed_plan("record_repair")
    key = h.key(plan_id, "record_repair")

    first = await h.writes.execute_plan(plan_id, ALICE)
    assert fault.fired
    assert first.envelope.error_type is not ErrorCode.FAILED_FINAL
    assert first.envelope.ok or first.envelope.retryable

    # Both or neither: the effect row and the SUCCEEDED record commit together.
    record = h.store.get_execution(key)
    rows = _rows(h.store, repairs)
    assert (record is not None) == bool(rows)
    assert (record is not None) is committed
    if record is not None:
        assert record.status is ExecutionStatus.SUCCEEDED
        assert rows == [(int(str(record.business_id)), key)]
    assert await h.plan_state(plan_id) is (PlanState.EXECUTED if committed else PlanState.CONFIRMED)

    retry = await h.writes.execute_plan(plan_id, ALICE)
    assert retry.envelope.ok
    assert retry.replayed is committed
    done = h.record(plan_id, "record_repair")
    assert done.status is ExecutionStatus.SUCCEEDED
    assert done.attempts == 1
    (row,) = _rows(h.store, repairs)
    assert row == (int(str(done.business_id)), key)
    assert retry.envelope.data == {"repair_id": row[0], "asset_id": ASSET}
    assert await h.plan_state(plan_id) is PlanState.EXECUTED


async def test_an_own_database_write_whose_commit_answer_was_lost_returns_what_committed(
    h: Harness, repairs: sa.Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    fault = CommitFault(h.store, "after_commit")
    monkeypatch.setattr(h.store.engine.dialect, "do_commit", fault.do_commit)
    h.registry.register(_repair_tool(repairs, fault))
    plan_id = await h.confirmed_plan("record_repair")

    first = await h.writes.execute_plan(plan_id, ALICE)
    assert fault.fired
    (row,) = _rows(h.store, repairs)
    assert first.envelope.ok
    assert first.envelope.data == {"repair_id": row[0], "asset_id": ASSET}
