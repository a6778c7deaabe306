"""Plans: money without floats, impact summaries, the plan hash and the plan state machine."""

from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from handrail import Amount, ConfirmationMode, Impact, Plan, RiskLevel
from handrail.errors import IllegalTransitionError
from handrail.plans import PlanState, check_plan_transition

T0 = datetime(2026, 1, 1, tzinfo=UTC)
IMPACT = Impact(
    action="refund", target="order o-1", reversible=False, amounts=(Amount(1250, "EUR"),)
)


def _plan(**changes: object) -> Plan:
    fields: dict[str, object] = {
        "plan_id": "p1",
        "tool": "orders.refund",
        "schema_version": "sha256:1",
        "arguments": {"order_id": "o-1", "cents": 1250},
        "expected_version": "v7",
        "user_id": "alice",
        "tenant_id": "t1",
        "risk": RiskLevel.L3_HIGH_RISK_WRITE,
        "confirmation": ConfirmationMode.APPROVE,
        "required_approvals": 2,
        "impact": IMPACT,
        "created_at": T0,
        "expires_at": T0 + timedelta(minutes=5),
        "revises": None,
    }
    fields.update(changes)
    return Plan.create(**fields)  # type: ignore[arg-type]


def test_amounts_are_exact_minor_units_with_their_currency() -> None:
    assert Amount.of(Decimal("12.34"), "EUR") == Amount(1234, "EUR", 2)
    assert Amount.of("1500", "JPY") == Amount(1500, "JPY", 0)
    assert Amount.of(3, "KWD") == Amount(3000, "KWD", 3)
    assert str(Amount(1234, "EUR")) == "12.34 EUR"
    assert str(Amount(-5, "USD")) == "-0.05 USD"
    assert Amount(1234, "EUR").to_json() == {
        "minor_units": 1234,
        "currency": "EUR",
        "exponent": 2,
        "text": "12.34 EUR",
    }


@pytest.mark.parametrize(
    ("build", "error"),
    [
        (lambda: Amount.of(12.34, "EUR"), TypeError),  # type: ignore[arg-type]
        (lambda: Amount(12.5, "EUR"), TypeError),  # type: ignore[arg-type]
        (lambda: Amount(minor_units=True, currency="EUR"), TypeError),
        (lambda: Amount.of(Decimal("0.001"), "EUR"), ValueError),
        (lambda: Amount.of("1.5", "JPY"), ValueError),
        (lambda: Amount(1, "eur"), ValueError),
        (lambda: Amount(1, "EURO"), ValueError),
        (lambda: Amount(1, "EUR", 9), ValueError),
    ],
)
def test_floats_rounding_and_bad_currencies_are_refused(
    build: object, error: type[Exception]
) -> None:
    with pytest.raises(error):
        build()  # type: ignore[operator]


def test_impact_round_trips_and_reads_as_one_line() -> None:
    impact = Impact(
        action="notify",
        target="customers of order o-1",
        reversible=False,
        amounts=(Amount(99, "USD"),),
        counts={"recipients": 3},
        notes=("sends e-mail",),
    )
    assert Impact.from_json(impact.to_json()) == impact
    assert (
        impact.describe()
        == "notify customers of order o-1; 0.99 USD; recipients: 3; NOT reversible"
    )
    with pytest.raises(TypeError):
        Impact(action="a", target="b", reversible=True, counts={"rows": 1.5})  # type: ignore[dict-item]


def test_a_plan_hash_is_stable_and_verifiable() -> None:
    first, second = _plan(), _plan()
    assert first.plan_hash == second.plan_hash
    assert len(first.plan_hash) == 64
    assert first.verify_hash()
    assert first.argument_values == {"order_id": "o-1", "cents": 1250}
    # Key order and other time zones do not change the canonical form.
    reordered = _plan(arguments={"cents": 1250, "order_id": "o-1"})
    assert reordered.plan_hash == first.plan_hash
    shanghai = timezone(timedelta(hours=8))
    assert _plan(created_at=T0.astimezone(shanghai)).plan_hash == first.plan_hash


_CHANGES: list[dict[str, object]] = [
    {"plan_id": "p2"},
    {"tool": "orders.refund2"},
    {"schema_version": "sha256:2"},
    {"arguments": {"order_id": "o-1", "cents": 1251}},
    {"expected_version": "v8"},
    {"expected_version": None},
    {"user_id": "bob"},
    {"tenant_id": "t2"},
    {"risk": RiskLevel.L2_REVERSIBLE_WRITE},
    {"confirmation": ConfirmationMode.CONFIRM},
    {"required_approvals": 1},
    {"impact": dataclasses.replace(IMPACT, reversible=True)},
    {"created_at": T0 + timedelta(microseconds=1)},
    {"expires_at": T0 + timedelta(minutes=6)},
    {"revises": "p0"},
]


@pytest.mark.parametrize("change", _CHANGES, ids=lambda c: next(iter(c)))
def test_every_field_is_bound_by_the_hash(change: dict[str, object]) -> None:
    assert _plan(**change).plan_hash != _plan().plan_hash


def test_a_tampered_plan_fails_verification() -> None:
    plan = _plan()
    forged = dataclasses.replace(plan, arguments='{"cents":999999,"order_id":"o-1"}')
    assert not forged.verify_hash()


@given(st.dictionaries(st.text(max_size=8), st.integers(-(2**53) + 1, 2**53 - 1), max_size=5))
def test_arguments_are_stored_canonically_and_read_back(arguments: dict[str, int]) -> None:
    plan = _plan(arguments=arguments)
    assert plan.argument_values == arguments
    assert _plan(arguments=dict(reversed(arguments.items()))).plan_hash == plan.plan_hash


def test_plans_refuse_naive_times_and_no_confirmation() -> None:
    with pytest.raises(ValueError, match="timezone"):
        _plan(created_at=datetime(2026, 1, 1))  # noqa: DTZ001 - the point of the test
    with pytest.raises(ValueError, match="NONE"):
        _plan(confirmation=ConfirmationMode.NONE)
    with pytest.raises(ValueError, match=r"(?i)nan"):
        _plan(arguments={"x": float("nan")})


@pytest.mark.parametrize("number", [1e16, -(2.0**53), 9007199254740993.0, math.nextafter(1e21, 0)])
def test_a_plan_refuses_a_float_that_would_read_back_as_an_integer_out_of_range(
    number: float,
) -> None:
    # Stage 1 refuses these in a write's arguments; a host proposing directly gets this.
    with pytest.raises(ValueError, match="read back"):
        _plan(arguments={"limit": {"at": [number]}})
    assert _plan(arguments={"limit": 2.0**53 - 1}).argument_values == {"limit": 2**53 - 1}
    assert _plan(arguments={"limit": 1e21}).argument_values == {"limit": 1e21}


_LEGAL = {
    (PlanState.PROPOSED, PlanState.AWAITING_CONFIRMATION),
    (PlanState.PROPOSED, PlanState.REJECTED),
    (PlanState.PROPOSED, PlanState.EXPIRED),
    (PlanState.AWAITING_CONFIRMATION, PlanState.CONFIRMED),
    (PlanState.AWAITING_CONFIRMATION, PlanState.REJECTED),
    (PlanState.AWAITING_CONFIRMATION, PlanState.EXPIRED),
    (PlanState.CONFIRMED, PlanState.EXECUTED),
    (PlanState.CONFIRMED, PlanState.REJECTED),
    (PlanState.CONFIRMED, PlanState.EXPIRED),
}


@pytest.mark.parametrize("current", list(PlanState))
@pytest.mark.parametrize("new", list(PlanState))
def test_the_plan_state_machine_allows_exactly_its_moves(
    current: PlanState, new: PlanState
) -> None:
    if (current, new) in _LEGAL:
        check_plan_transition(current, new)
    else:
        with pytest.raises(IllegalTransitionError):
            check_plan_transition(current, new)
