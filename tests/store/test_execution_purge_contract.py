"""Every Store purges settled records to tombstones; migration 0005 adds them to old stores.

A purge keeps the row of a key: its status, plan hash and business id stay, its
arguments, principal snapshot and result go. The key can never be claimed again, a
plan with a SUCCEEDED tombstone reads EXECUTED and cannot be withdrawn, and a
tombstone is never purged again (nor deleted).
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from _migrations import EmptyDatabase, migrate, revision
from handrail.errors import IllegalTransitionError
from handrail.execution import ExecutionRecord, ExecutionStatus
from handrail.plans import Impact, Plan, PlanRecord, PlanState
from handrail.spec import ConfirmationMode, RiskLevel
from handrail.store import SqliteStore, Store
from handrail.store._tables import metadata

S = ExecutionStatus
T0 = datetime(2026, 1, 1, tzinfo=UTC)
NOW = T0 + timedelta(days=2)


def _plan_record(plan_id: str = "p1") -> PlanRecord:
    plan = Plan.create(
        plan_id=plan_id,
        tool="shop.refund",
        schema_version="v1",
        arguments={"order_id": "o-17"},
        expected_version=None,
        user_id="u1",
        tenant_id="t1",
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        confirmation=ConfirmationMode.CONFIRM,
        required_approvals=1,
        impact=Impact(action="refund", target="order o-17", reversible=True),
        created_at=T0,
        expires_at=T0 + timedelta(days=30),
    )
    return PlanRecord(plan=plan, state=PlanState.CONFIRMED, version=3, updated_at=T0)


def _settled(key: str = "hk1_a", **changes: Any) -> ExecutionRecord:
    base = ExecutionRecord(
        idempotency_key=key,
        plan_id="p1",
        plan_hash="a" * 64,
        tool="shop.refund",
        tenant_id="t1",
        user_id="u1",
        principal='{"roles":["clerk"],"tenant_id":"t1","user_id":"u1"}',
        arguments='{"amount":"12.34","order_id":"o-17"}',
        expected_version="etag-7",
        status=S.SUCCEEDED,
        attempts=2,
        business_id="refund-991",
        result='{"refund_id":"refund-991","iban":"DE89 3704 0044 0532 0130 00"}',
        error_code=None,
        lease_owner=None,
        lease_expires_at=None,
        next_check_at=None,
        checks=1,
        escalated=False,
        created_at=T0,
        updated_at=T0 + timedelta(seconds=3),
        retain_until=T0 + timedelta(hours=1),
        version=4,
    )
    return dataclasses.replace(base, **changes)


def test_a_purged_record_keeps_its_key_status_hash_and_business_id_and_nothing_else(
    store: Store,
) -> None:
    record = _settled()
    store.insert_execution(record)
    assert store.purge_executions(now=NOW) == 1
    tombstone = store.get_execution("hk1_a")
    assert tombstone == dataclasses.replace(
        record,
        arguments="{}",
        principal="{}",
        result=None,
        retain_until=None,
        purged_at=NOW,
        version=5,
    )
    assert tombstone.purged
    assert not record.purged


def test_a_failed_record_keeps_its_error_code_as_a_tombstone(store: Store) -> None:
    failed = _settled(status=S.FAILED_FINAL, business_id=None, error_code="PLAN_CLOSED")
    store.insert_execution(failed)
    assert store.purge_executions(now=NOW) == 1
    tombstone = store.get_execution("hk1_a")
    assert tombstone is not None
    assert (tombstone.status, tombstone.error_code) == (S.FAILED_FINAL, "PLAN_CLOSED")


def test_a_tombstone_is_never_purged_again_and_never_disappears(store: Store) -> None:
    store.insert_execution(_settled())
    store.purge_executions(now=NOW)
    first = store.get_execution("hk1_a")
    assert store.purge_executions(now=NOW + timedelta(days=3650)) == 0
    assert store.get_execution("hk1_a") == first
    assert store.list_executions(status=S.SUCCEEDED) == [first]


def test_the_key_of_a_tombstone_can_never_be_claimed_again(store: Store) -> None:
    assert store.insert_plan(_plan_record())
    store.insert_execution(_settled())
    store.purge_executions(now=NOW)
    tombstone = store.get_execution("hk1_a")
    fresh = _settled(status=S.RUNNING, lease_owner="w2", retain_until=None, version=1)
    assert store.insert_execution(fresh) is False
    assert store.insert_execution(fresh, require_confirmed_plan=True) is False
    assert store.get_execution("hk1_a") == tombstone


def test_a_plan_with_a_succeeded_tombstone_stays_executed_and_cannot_be_withdrawn(
    store: Store,
) -> None:
    assert store.insert_plan(_plan_record())
    store.insert_execution(_settled())
    store.purge_executions(now=NOW)
    plan = store.get_plan("p1")
    assert plan is not None
    assert plan.state is PlanState.EXECUTED
    moved = store.move_plan(
        "p1", expect_state=PlanState.CONFIRMED, expect_version=3, state=PlanState.REJECTED, at=NOW
    )
    assert moved is False
    assert store.get_plan("p1") == plan


@pytest.mark.parametrize("status", [S.PREPARED, S.RUNNING, S.UNKNOWN])
def test_only_a_settled_record_becomes_a_tombstone(status: ExecutionStatus) -> None:
    with pytest.raises(IllegalTransitionError):
        _settled(status=status).tombstone(NOW)


# --- migration 0005 ------------------------------------------------------------------------------


def _columns(engine: sa.Engine) -> set[str]:
    return {column["name"] for column in sa.inspect(engine).get_columns("executions")}


def _insert_0004_row(engine: sa.Engine) -> None:
    """A settled row as revision 0004 stored it: no purged_at column yet."""
    row = {
        name: value for name, value in dataclasses.asdict(_settled()).items() if name != "purged_at"
    }
    row["status"] = S.SUCCEEDED.value
    table = sa.Table("executions", sa.MetaData(), autoload_with=engine)
    with engine.begin() as connection:
        connection.execute(table.insert(), row)


def test_opening_a_store_of_revision_0004_adds_tombstones_and_keeps_the_records(
    empty_database: EmptyDatabase,
) -> None:
    engine = empty_database.engine
    migrate(engine, "0004")
    assert "purged_at" not in _columns(engine)
    _insert_0004_row(engine)
    with empty_database.reopened() as store:
        # The old row reads back as it was, not purged; then it purges to a tombstone.
        assert store.get_execution("hk1_a") == _settled()
        assert store.purge_executions(now=NOW) == 1
        tombstone = store.get_execution("hk1_a")
        assert tombstone is not None
        assert tombstone.purged_at == NOW


def test_downgrading_0005_drops_only_the_purge_time(tmp_path: Path) -> None:
    store = SqliteStore.open(tmp_path / "h.db")
    try:
        store.insert_execution(_settled(key="hk1_kept", retain_until=None))
        migrate(store.engine, "0004", down=True)
        assert revision(store.engine) == ["0004"]
        assert _columns(store.engine) == {c.name for c in metadata.tables["executions"].columns} - {
            "purged_at"
        }
        indexes = {ix["name"] for ix in sa.inspect(store.engine).get_indexes("executions")}
        assert indexes == {ix.name for ix in metadata.tables["executions"].indexes}
        store.migrate()
        assert store.get_execution("hk1_kept") == _settled(key="hk1_kept", retain_until=None)
    finally:
        store.close()
