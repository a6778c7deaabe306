"""Every Store keeps plans, confirmation nonces and approvals by the same contract.

Plans read back exactly as written (the hash still verifies), state moves are
compare-and-set on (state, version), and a nonce or an approval counts once, also
when threads race for it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from handrail.execution import ExecutionRecord, ExecutionStatus
from handrail.plans import Amount, Impact, Plan, PlanRecord, PlanState
from handrail.spec import ConfirmationMode, RiskLevel
from handrail.store import Store

Race = Callable[[int, Callable[[int], bool]], list[bool]]

T0 = datetime(2026, 1, 1, tzinfo=UTC)
RACERS = 16


def _us(n: int) -> timedelta:
    return timedelta(microseconds=n)


def _plan(plan_id: str = "p1", *, tool: str = "shop.refund") -> Plan:
    return Plan.create(
        plan_id=plan_id,
        tool=tool,
        schema_version="v3",
        arguments={"order_id": "o-17", "amount": "12.34", "lines": [1, 2], "note": "Grüße"},
        expected_version="etag-7",
        user_id="u1",
        tenant_id="t1",
        risk=RiskLevel.L3_HIGH_RISK_WRITE,
        confirmation=ConfirmationMode.APPROVE,
        required_approvals=2,
        impact=Impact(
            action="refund",
            target="order o-17",
            reversible=False,
            amounts=(Amount.of(Decimal("12.34"), "EUR"), Amount.of(500, "JPY")),
            counts={"orders": 1, "emails": 2},
            notes=("Kundin Müller", "über 10 €"),
        ),
        created_at=T0 + _us(123_456),
        expires_at=T0 + timedelta(minutes=15) + _us(654_321),
    )


def _bare_plan(plan_id: str = "p2") -> Plan:
    return Plan.create(
        plan_id=plan_id,
        tool="shop.cancel",
        schema_version="v1",
        arguments={},
        expected_version=None,
        user_id="u2",
        tenant_id="t2",
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        confirmation=ConfirmationMode.CONFIRM,
        required_approvals=0,
        impact=Impact(action="cancel", target="order o-1", reversible=True),
        created_at=T0,
        expires_at=T0 + timedelta(seconds=1),
        revises="p1",
    )


def _record(plan: Plan | None = None, *, version: int = 5) -> PlanRecord:
    return PlanRecord(
        plan=plan or _plan(),
        state=PlanState.PROPOSED,
        version=version,
        updated_at=T0 + _us(7),
    )


def _utc_times(record: PlanRecord) -> list[datetime]:
    return [record.plan.created_at, record.plan.expires_at, record.updated_at]


@pytest.mark.parametrize("plan", [_plan(), _bare_plan()], ids=["full", "bare"])
def test_a_plan_reads_back_equal_with_utc_microsecond_times_and_a_valid_hash(
    store: Store,
    plan: Plan,
) -> None:
    written = _record(plan)
    assert store.insert_plan(written) is True
    got = store.get_plan(plan.plan_id)
    assert got is not None
    assert got == written
    assert got.plan.verify_hash()
    assert all(t.utcoffset() == timedelta(0) for t in _utc_times(got))
    assert got.plan.created_at.microsecond == plan.created_at.microsecond
    # The hash covers microseconds, so a store that dropped them would fail above.
    shifted = dataclasses.replace(got.plan, created_at=got.plan.created_at + _us(1))
    assert not shifted.verify_hash()


def test_an_unknown_plan_is_none(store: Store) -> None:
    assert store.get_plan("missing") is None


def test_inserting_a_taken_plan_id_is_refused_and_changes_nothing(store: Store) -> None:
    first = _record(_plan("p1"))
    assert store.insert_plan(first) is True
    other = dataclasses.replace(
        _record(_plan("p1", tool="shop.other"), version=9),
        state=PlanState.CONFIRMED,
    )
    assert store.insert_plan(other) is False
    assert store.get_plan("p1") == first


def test_moving_a_plan_bumps_its_version_by_one_and_sets_state_and_time(store: Store) -> None:
    written = _record(version=5)
    store.insert_plan(written)
    at = T0 + timedelta(minutes=1) + _us(42)
    moved = store.move_plan(
        "p1",
        expect_state=PlanState.PROPOSED,
        expect_version=5,
        state=PlanState.AWAITING_CONFIRMATION,
        at=at,
    )
    assert moved is True
    assert store.get_plan("p1") == dataclasses.replace(
        written,
        state=PlanState.AWAITING_CONFIRMATION,
        version=6,
        updated_at=at,
    )
    again = store.move_plan(
        "p1",
        expect_state=PlanState.AWAITING_CONFIRMATION,
        expect_version=6,
        state=PlanState.CONFIRMED,
        at=at + _us(1),
    )
    assert again is True
    got = store.get_plan("p1")
    assert got is not None
    assert (got.state, got.version, got.updated_at) == (PlanState.CONFIRMED, 7, at + _us(1))
    assert got.plan.verify_hash()


@pytest.mark.parametrize(
    ("expect_state", "expect_version"),
    [
        pytest.param(PlanState.AWAITING_CONFIRMATION, 5, id="wrong-state"),
        pytest.param(PlanState.PROPOSED, 4, id="older-version"),
        pytest.param(PlanState.PROPOSED, 6, id="newer-version"),
    ],
)
def test_moving_a_plan_from_a_stale_expectation_is_refused_and_changes_nothing(
    store: Store,
    expect_state: PlanState,
    expect_version: int,
) -> None:
    written = _record(version=5)
    store.insert_plan(written)
    moved = store.move_plan(
        "p1",
        expect_state=expect_state,
        expect_version=expect_version,
        state=PlanState.REJECTED,
        at=T0 + timedelta(minutes=1),
    )
    assert moved is False
    assert store.get_plan("p1") == written


def test_moving_an_unknown_plan_is_refused_and_creates_nothing(store: Store) -> None:
    moved = store.move_plan(
        "missing",
        expect_state=PlanState.PROPOSED,
        expect_version=0,
        state=PlanState.REJECTED,
        at=T0,
    )
    assert moved is False
    assert store.get_plan("missing") is None


def test_a_nonce_is_used_once_whoever_replays_it(store: Store) -> None:
    store.insert_plan(_record())
    assert store.use_nonce("n1", plan_id="p1", user_id="u1", at=T0) is True
    assert store.use_nonce("n1", plan_id="p1", user_id="u1", at=T0 + _us(1)) is False
    assert store.use_nonce("n1", plan_id="p2", user_id="u2", at=T0 + _us(2)) is False
    assert store.use_nonce("n2", plan_id="p1", user_id="u1", at=T0 + _us(3)) is True


def test_each_person_approves_a_plan_once_and_approvals_show_on_the_plan(store: Store) -> None:
    written = _record(_plan("p1"))
    store.insert_plan(written)
    store.insert_plan(_record(_bare_plan("p2")))
    assert store.add_approval("p1", user_id="alice", at=T0) is True
    assert store.add_approval("p1", user_id="alice", at=T0 + _us(1)) is False
    assert store.add_approval("p1", user_id="bob", at=T0 + _us(2)) is True
    assert store.add_approval("p2", user_id="alice", at=T0 + _us(3)) is True
    got = store.get_plan("p1")
    assert got == dataclasses.replace(written, approvals=frozenset({"alice", "bob"}))
    # Only APPROVE plans collect approvals; a CONFIRM plan's are not read back.
    other = store.get_plan("p2")
    assert other is not None
    assert other.approvals == frozenset()


def test_approvals_survive_a_state_move(store: Store) -> None:
    store.insert_plan(_record(version=0))
    store.add_approval("p1", user_id="alice", at=T0)
    store.move_plan(
        "p1",
        expect_state=PlanState.PROPOSED,
        expect_version=0,
        state=PlanState.AWAITING_CONFIRMATION,
        at=T0 + _us(1),
    )
    got = store.get_plan("p1")
    assert got is not None
    assert (got.state, got.approvals) == (PlanState.AWAITING_CONFIRMATION, frozenset({"alice"}))


def test_threads_racing_for_one_nonce_let_exactly_one_win(store: Store, race: Race) -> None:
    results = race(
        RACERS,
        lambda i: store.use_nonce("n1", plan_id="p1", user_id=f"u{i}", at=T0 + _us(i)),
    )
    assert results.count(True) == 1
    assert store.use_nonce("n1", plan_id="p1", user_id="late", at=T0) is False


def test_threads_racing_to_move_one_plan_version_let_exactly_one_win(
    store: Store,
    race: Race,
) -> None:
    targets = [PlanState.AWAITING_CONFIRMATION, PlanState.REJECTED]
    store.insert_plan(_record(version=5))
    results = race(
        RACERS,
        lambda i: store.move_plan(
            "p1",
            expect_state=PlanState.PROPOSED,
            expect_version=5,
            state=targets[i % 2],
            at=T0 + _us(i),
        ),
    )
    assert results.count(True) == 1
    winner = results.index(True)
    got = store.get_plan("p1")
    assert got is not None
    assert (got.state, got.version, got.updated_at) == (targets[winner % 2], 6, T0 + _us(winner))


# --- listing -----------------------------------------------------------------------------------


def _listed(plan_id: str, *, tenant: str = "t1", at: int = 0) -> PlanRecord:
    plan = dataclasses.replace(_bare_plan(plan_id), tenant_id=tenant, created_at=T0 + _us(at))
    plan = dataclasses.replace(plan, plan_hash="0" * 64)  # the hash is not the store's business
    return PlanRecord(plan=plan, state=PlanState.PROPOSED, version=1, updated_at=T0)


def _succeeded_execution(plan_id: str) -> ExecutionRecord:
    return ExecutionRecord(
        idempotency_key=f"hk_{plan_id}",
        plan_id=plan_id,
        plan_hash="0" * 64,
        tool="shop.cancel",
        tenant_id="t1",
        user_id="u2",
        principal="{}",
        arguments="{}",
        expected_version=None,
        status=ExecutionStatus.SUCCEEDED,
        attempts=1,
        business_id="B-1",
        result="{}",
        error_code=None,
        lease_owner=None,
        lease_expires_at=None,
        next_check_at=None,
        checks=0,
        escalated=False,
        created_at=T0,
        updated_at=T0,
        retain_until=T0 + timedelta(days=1),
        version=3,
    )


def test_a_plan_listing_is_newest_created_first_with_ties_by_greater_id(store: Store) -> None:
    for plan_id, at in [("a1", 1), ("a3", 3), ("tie_a", 2), ("tie_b", 2)]:
        assert store.insert_plan(_listed(plan_id, at=at))
    assert [r.plan.plan_id for r in store.list_plans()] == ["a3", "tie_b", "tie_a", "a1"]
    assert [r.plan.plan_id for r in store.list_plans(limit=2)] == ["a3", "tie_b"]
    assert store.list_plans(limit=0) == []
    assert store.list_plans(limit=-1) == []


def test_a_plan_listing_reads_each_plan_as_get_plan_does(store: Store) -> None:
    store.insert_plan(_record(_plan("p1")))
    store.insert_plan(_record(_bare_plan("p2")))
    store.add_approval("p1", user_id="alice", at=T0)
    store.add_approval("p2", user_id="alice", at=T0)  # a CONFIRM plan's are not read back
    listed = store.list_plans()
    assert listed == [store.get_plan("p1"), store.get_plan("p2")]
    assert listed[0].approvals == frozenset({"alice"})
    assert listed[1].approvals == frozenset()


def test_a_plan_listing_filters_by_tenant_with_similar_names_kept_apart(store: Store) -> None:
    tenants = ["t1", "T1", "t1 ", "t10", "t%", "t_", "t1'--", ""]
    for n, tenant in enumerate(tenants):
        store.insert_plan(_listed(f"p{n}", tenant=tenant))
    for n, tenant in enumerate(tenants):
        assert [r.plan.plan_id for r in store.list_plans(tenant_id=tenant)] == [f"p{n}"]


def test_a_plan_listing_filters_by_the_derived_state(store: Store) -> None:
    for n, plan_id in enumerate(["proposed", "confirmed", "executed", "rejected"]):
        store.insert_plan(_listed(plan_id, at=n))
    for plan_id, state in [
        ("confirmed", PlanState.CONFIRMED),
        ("executed", PlanState.CONFIRMED),
        ("rejected", PlanState.REJECTED),
    ]:
        assert store.move_plan(
            plan_id, expect_state=PlanState.PROPOSED, expect_version=1, state=state, at=T0
        )
    # A CONFIRMED plan with a SUCCEEDED record reads (and filters) as EXECUTED.
    assert store.insert_execution(_succeeded_execution("executed"))

    def ids(state: PlanState) -> list[str]:
        return [r.plan.plan_id for r in store.list_plans(state=state)]

    assert ids(PlanState.EXECUTED) == ["executed"]
    assert ids(PlanState.CONFIRMED) == ["confirmed"]
    assert ids(PlanState.PROPOSED) == ["proposed"]
    assert ids(PlanState.REJECTED) == ["rejected"]
    assert ids(PlanState.EXPIRED) == []
    assert [r.state for r in store.list_plans()] == [
        PlanState.REJECTED,
        PlanState.EXECUTED,
        PlanState.CONFIRMED,
        PlanState.PROPOSED,
    ]
    assert store.list_plans(tenant_id="t2", state=PlanState.EXECUTED) == []
