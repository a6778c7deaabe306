"""Every Store keeps execution records by the same contract; SQL stores share transactions.

A key is inserted once, every write is a compare-and-set on (status, version) and,
when asked, on the lease; the reconciler's query and the retention purge select
exactly their rows. On the SQL stores an effect in the same database commits or
rolls back together with its execution record.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from handrail.errors import StoreError
from handrail.execution import ExecutionRecord, ExecutionStatus
from handrail.store import SqlStore, Store

Race = Callable[[int, Callable[[int], bool]], list[bool]]

S = ExecutionStatus
T0 = datetime(2026, 1, 1, tzinfo=UTC)
NOW = T0 + timedelta(hours=1)
RACERS = 16
_TIMES = ("lease_expires_at", "next_check_at", "created_at", "updated_at", "retain_until")


def _us(n: int) -> timedelta:
    return timedelta(microseconds=n)


def _record(key: str = "hk1_a", **changes: Any) -> ExecutionRecord:
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
        status=S.PREPARED,
        attempts=0,
        business_id=None,
        result=None,
        error_code=None,
        lease_owner=None,
        lease_expires_at=None,
        next_check_at=None,
        checks=0,
        escalated=False,
        created_at=T0 + _us(1),
        updated_at=T0 + _us(1),
        retain_until=None,
        version=1,
    )
    return dataclasses.replace(base, **changes)


def _running(key: str = "hk1_a", **changes: Any) -> ExecutionRecord:
    return _record(
        key,
        status=S.RUNNING,
        attempts=1,
        lease_owner="w1",
        lease_expires_at=T0 + timedelta(seconds=30) + _us(500),
        updated_at=T0 + _us(2),
        version=2,
        **changes,
    )


def _succeeded(running: ExecutionRecord) -> ExecutionRecord:
    return running.moved(
        S.SUCCEEDED,
        business_id="refund-991",
        result='{"refund_id":"refund-991","state":"done"}',
        lease_owner=None,
        lease_expires_at=None,
        updated_at=T0 + timedelta(seconds=3) + _us(3),
        retain_until=T0 + timedelta(days=30) + _us(4),
    )


FULL = _record(
    "hk1_full",
    plan_id=None,
    expected_version=None,
    status=S.UNKNOWN,
    attempts=3,
    business_id="refund-991",
    result='{"partial":true,"text":"Grüße"}',
    error_code="TIMEOUT",
    lease_owner="reconciler-7",
    lease_expires_at=T0 + _us(999_999),
    next_check_at=T0 + timedelta(minutes=5) + _us(123_456),
    checks=4,
    escalated=True,
    created_at=T0 + _us(10),
    updated_at=T0 + timedelta(seconds=1) + _us(654_321),
    retain_until=T0 + timedelta(days=7) + _us(1),
    version=9,
)


# --- insert and read -------------------------------------------------------------------------


@pytest.mark.parametrize("written", [_record(), FULL], ids=["nulls", "full"])
def test_an_execution_reads_back_equal_with_utc_microsecond_times(
    store: Store,
    written: ExecutionRecord,
) -> None:
    assert store.insert_execution(written) is True
    got = store.get_execution(written.idempotency_key)
    assert got == written
    assert got is not None
    assert got.escalated is written.escalated
    for name in _TIMES:
        value = getattr(got, name)
        assert value == getattr(written, name)
        assert value is None or value.utcoffset() == timedelta(0)


def test_an_unknown_key_is_none(store: Store) -> None:
    assert store.get_execution("hk1_missing") is None


def test_a_second_insert_of_a_key_is_refused_and_the_first_row_stays(store: Store) -> None:
    first = _record()
    assert store.insert_execution(first) is True
    assert store.insert_execution(dataclasses.replace(FULL, idempotency_key="hk1_a")) is False
    assert store.get_execution("hk1_a") == first


def test_threads_racing_to_insert_one_key_let_exactly_one_win(store: Store, race: Race) -> None:
    candidates = [_record(business_id=f"b{i}", attempts=i) for i in range(RACERS)]
    results = race(RACERS, lambda i: store.insert_execution(candidates[i]))
    assert results.count(True) == 1
    assert store.get_execution("hk1_a") == candidates[results.index(True)]


# --- compare-and-set -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expectation",
    [
        pytest.param({"expect_status": S.PREPARED, "expect_version": 2}, id="wrong-status"),
        pytest.param({"expect_status": S.RUNNING, "expect_version": 1}, id="older-version"),
        pytest.param({"expect_status": S.RUNNING, "expect_version": 3}, id="newer-version"),
        pytest.param(
            {"expect_status": S.RUNNING, "expect_version": 2, "lease_owner": "w2"},
            id="other-lease-owner",
        ),
        pytest.param(
            {
                "expect_status": S.RUNNING,
                "expect_version": 2,
                "lease_owner": "w1",
                "lease_valid_at": T0 + timedelta(seconds=30) + _us(500),
            },
            id="lease-expires-exactly-then",
        ),
        pytest.param(
            {
                "expect_status": S.RUNNING,
                "expect_version": 2,
                "lease_valid_at": T0 + timedelta(seconds=31),
            },
            id="lease-expired-before",
        ),
    ],
)
def test_replacing_against_a_stale_expectation_is_refused_and_changes_nothing(
    store: Store,
    expectation: dict[str, Any],
) -> None:
    running = _running()
    store.insert_execution(running)
    assert store.replace_execution(_succeeded(running), **expectation) is False
    assert store.get_execution("hk1_a") == running


@pytest.mark.parametrize(
    "lease_check",
    [
        pytest.param({"lease_owner": "w1"}, id="owner"),
        pytest.param({"lease_valid_at": T0}, id="valid-at"),
    ],
)
def test_a_record_without_a_lease_fails_every_lease_check(
    store: Store,
    lease_check: dict[str, Any],
) -> None:
    unleased = _record(status=S.UNKNOWN, version=4)
    store.insert_execution(unleased)
    replaced = store.replace_execution(
        unleased.updated(checks=1),
        expect_status=S.UNKNOWN,
        expect_version=4,
        **lease_check,
    )
    assert replaced is False
    assert store.get_execution("hk1_a") == unleased


def test_replacing_with_the_lease_held_writes_the_new_record_exactly(store: Store) -> None:
    running = _running()
    store.insert_execution(running)
    done = _succeeded(running)
    replaced = store.replace_execution(
        done,
        expect_status=S.RUNNING,
        expect_version=2,
        lease_owner="w1",
        lease_valid_at=T0 + timedelta(seconds=30) + _us(499),
    )
    assert replaced is True
    assert store.get_execution("hk1_a") == done
    replayed = store.replace_execution(
        _succeeded(running), expect_status=S.RUNNING, expect_version=2
    )
    assert replayed is False
    assert store.get_execution("hk1_a") == done


def test_replacing_without_lease_checks_needs_only_status_and_version(store: Store) -> None:
    stored = _record(status=S.UNKNOWN, next_check_at=T0, version=4)
    store.insert_execution(stored)
    checked = stored.updated(checks=1, next_check_at=T0 + timedelta(minutes=1), escalated=True)
    assert store.replace_execution(checked, expect_status=S.UNKNOWN, expect_version=4) is True
    assert store.get_execution("hk1_a") == checked


def test_replacing_an_unknown_key_is_refused_and_creates_nothing(store: Store) -> None:
    running = _running()
    assert store.replace_execution(running, expect_status=S.RUNNING, expect_version=1) is False
    assert store.get_execution("hk1_a") is None


def test_threads_racing_to_replace_one_version_let_exactly_one_win(
    store: Store,
    race: Race,
) -> None:
    running = _running()
    store.insert_execution(running)
    outcomes = [running.moved(S.SUCCEEDED, result=f'{{"n":{i}}}') for i in range(RACERS)]
    results = race(
        RACERS,
        lambda i: store.replace_execution(
            outcomes[i],
            expect_status=S.RUNNING,
            expect_version=2,
            lease_owner="w1",
            lease_valid_at=T0,
        ),
    )
    assert results.count(True) == 1
    assert store.get_execution("hk1_a") == outcomes[results.index(True)]


# --- the reconciler's query and the purge ----------------------------------------------------


def _due_candidates() -> tuple[list[ExecutionRecord], list[ExecutionRecord]]:
    """Records due at NOW in reconciler order, and records that are not due."""
    due = [
        _record("k-4", status=S.RUNNING, lease_expires_at=NOW, updated_at=T0 + _us(1)),
        _record("k-3", status=S.UNKNOWN, next_check_at=NOW, updated_at=T0 + _us(2)),
        _record(
            "k-2",
            status=S.RUNNING,
            lease_owner="w1",
            lease_expires_at=NOW - _us(1),
            updated_at=T0 + _us(3),
        ),
        _record(
            "k-1",
            status=S.UNKNOWN,
            lease_owner="r1",
            lease_expires_at=NOW - _us(1),
            next_check_at=T0,
            updated_at=T0 + _us(4),
        ),
    ]
    old = T0 - timedelta(days=1)
    not_due = [
        _record("n-running-leased", status=S.RUNNING, lease_expires_at=NOW + _us(1)),
        _record("n-running-unleased", status=S.RUNNING),
        _record("n-unknown-later", status=S.UNKNOWN, next_check_at=NOW + _us(1)),
        _record("n-unknown-unscheduled", status=S.UNKNOWN),
        _record(
            "n-unknown-leased",
            status=S.UNKNOWN,
            next_check_at=old,
            lease_expires_at=NOW + _us(1),
        ),
        *(
            _record(f"n-{status}", status=status, lease_expires_at=old, next_check_at=old)
            for status in (S.PREPARED, S.SUCCEEDED, S.FAILED_FINAL)
        ),
    ]
    return due, not_due


def test_due_executions_are_expired_running_and_due_unleased_unknown_oldest_first(
    store: Store,
) -> None:
    due, not_due = _due_candidates()
    for record in [*not_due, *reversed(due)]:
        assert store.insert_execution(record)
    assert store.due_executions(now=NOW, limit=100) == due


def test_due_executions_respect_the_limit(store: Store) -> None:
    due, not_due = _due_candidates()
    for record in [*due, *not_due]:
        store.insert_execution(record)
    assert store.due_executions(now=NOW, limit=2) == due[:2]
    assert store.due_executions(now=NOW, limit=0) == []


def test_purge_strips_only_settled_records_whose_retention_ended(store: Store) -> None:
    purged = [
        _record("gone-succeeded", status=S.SUCCEEDED, retain_until=NOW - _us(1)),
        _record("gone-failed", status=S.FAILED_FINAL, retain_until=NOW),
    ]
    kept = [
        _record("kept-retained", status=S.SUCCEEDED, retain_until=NOW + _us(1)),
        _record("kept-forever", status=S.FAILED_FINAL, retain_until=None),
        *(
            _record(f"kept-{status}", status=status, retain_until=NOW - timedelta(days=1))
            for status in (S.PREPARED, S.RUNNING, S.UNKNOWN)
        ),
    ]
    for record in [*purged, *kept]:
        store.insert_execution(record)
    assert store.purge_executions(now=NOW) == 2
    # Tombstones, not deletions (tests/store/test_execution_purge_contract.py).
    assert [store.get_execution(r.idempotency_key) for r in purged] == [
        r.tombstone(NOW) for r in purged
    ]
    assert [store.get_execution(r.idempotency_key) for r in kept] == kept
    assert store.purge_executions(now=NOW) == 0


# --- SQL stores: one transaction for an effect and its record --------------------------------


class _EffectFailedError(Exception):
    """The effect's own failure, raised inside the transaction."""


@pytest.fixture
def scratch(sql_store: SqlStore) -> Iterator[sa.Table]:
    """A table standing for the effect a tool writes in the store's own database."""
    table = sa.Table(
        "scratch_effects",
        sa.MetaData(),
        sa.Column("effect_id", sa.String(32), primary_key=True),
        sa.Column("note", sa.Text(), nullable=False),
    )
    table.create(sql_store.engine, checkfirst=True)
    yield table
    table.drop(sql_store.engine, checkfirst=True)


def _effects(sql_store: SqlStore, scratch: sa.Table) -> list[str]:
    with sql_store.engine.connect() as connection:
        return list(connection.execute(sa.select(scratch.c.effect_id)).scalars())


def _effect_and_record(sql_store: SqlStore, scratch: sa.Table, connection: sa.Connection) -> None:
    running = _running()
    connection.execute(scratch.insert().values(effect_id="e1", note="refund 12.34 EUR"))
    assert sql_store.insert_execution(running, connection=connection) is True
    assert sql_store.get_execution("hk1_a", connection=connection) == running
    replaced = sql_store.replace_execution(
        _succeeded(running),
        expect_status=S.RUNNING,
        expect_version=2,
        lease_owner="w1",
        lease_valid_at=T0,
        connection=connection,
    )
    assert replaced is True


def test_a_transaction_commits_the_effect_and_the_record_together(
    sql_store: SqlStore,
    scratch: sa.Table,
) -> None:
    with sql_store.transaction() as connection:
        _effect_and_record(sql_store, scratch, connection)
        # Other connections do not see either write before the commit.
        assert sql_store.get_execution("hk1_a") is None
    assert sql_store.get_execution("hk1_a") == _succeeded(_running())
    assert _effects(sql_store, scratch) == ["e1"]


def test_an_exception_in_a_transaction_rolls_back_the_effect_and_the_record(
    sql_store: SqlStore,
    scratch: sa.Table,
) -> None:
    def fail_after_writing() -> None:
        with sql_store.transaction() as connection:
            _effect_and_record(sql_store, scratch, connection)
            raise _EffectFailedError

    with pytest.raises(_EffectFailedError):
        fail_after_writing()
    assert sql_store.get_execution("hk1_a") is None
    assert _effects(sql_store, scratch) == []


def test_a_database_error_in_a_transaction_is_a_store_error_and_rolls_back(
    sql_store: SqlStore,
    scratch: sa.Table,
) -> None:
    def write_a_duplicate_effect() -> None:
        with sql_store.transaction() as connection:
            _effect_and_record(sql_store, scratch, connection)
            connection.execute(scratch.insert().values(effect_id="e1", note="twice"))

    with pytest.raises(StoreError):
        write_a_duplicate_effect()
    assert sql_store.get_execution("hk1_a") is None
    assert _effects(sql_store, scratch) == []


def test_a_re_claim_can_require_the_plan_to_be_confirmed(store: Store) -> None:
    from handrail import ConfirmationMode, Impact, Plan, PlanRecord, PlanState, RiskLevel  # noqa: PLC0415

    plan = Plan.create(
        plan_id="p9",
        tool="t",
        schema_version="1",
        arguments={},
        expected_version=None,
        user_id="u",
        tenant_id="t1",
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        confirmation=ConfirmationMode.CONFIRM,
        required_approvals=1,
        impact=Impact(action="a", target="b", reversible=True),
        created_at=T0,
        expires_at=T0 + timedelta(hours=1),
    )
    store.insert_plan(PlanRecord(plan=plan, state=PlanState.CONFIRMED, version=1, updated_at=T0))
    released = _record(plan_id="p9", status=ExecutionStatus.PREPARED, lease_owner=None)
    assert store.insert_execution(released)
    assert store.move_plan(
        "p9",
        expect_state=PlanState.CONFIRMED,
        expect_version=1,
        state=PlanState.REJECTED,
        at=T0,
    )
    running = released.moved(ExecutionStatus.RUNNING, lease_owner="w2")
    refused = store.replace_execution(
        running,
        expect_status=ExecutionStatus.PREPARED,
        expect_version=released.version,
        require_confirmed_plan=True,
    )
    assert refused is False
    assert store.get_execution(released.idempotency_key) == released
