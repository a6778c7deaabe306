"""Recovery metrics, each from a scenario whose value is known before it runs."""

from __future__ import annotations

import pytest
from _eval_cases import builtin, counts, metric, observe, result, two_refunds

from handrail.eval._downstream import Shop
from handrail.eval._scoring import score
from handrail.execution import ExecutionStatus

pytestmark = pytest.mark.anyio


async def test_a_lost_answer_is_reconciled_after_the_scenarios_delay() -> None:
    observed = await observe(builtin("lost_answer"))
    found = score(observed).result
    assert counts(found, "unknown_reconciled_rate") == (1, 1)
    assert metric(found, "recovery_seconds_mean").value == pytest.approx(30.0)
    assert metric(found, "recovery_seconds_p95").value == pytest.approx(30.0)
    (record,) = observed.records_after
    assert record.status is ExecutionStatus.SUCCEEDED
    # The refund id is the one the shop committed, found by the key: not a second refund.
    (effect,) = observed.shop.effects
    assert record.business_id == effect.business_id
    assert effect.key == record.idempotency_key


async def test_the_time_to_recover_is_the_wait_before_reconciliation() -> None:
    found = await result(builtin("lost_answer", reconcile_after=45.0))
    assert metric(found, "recovery_seconds_mean").value == pytest.approx(45.0)


def _lose_both(shop: Shop) -> None:
    shop.lose_response("refund", times=2)


async def test_mean_and_p95_cover_every_record_recovered() -> None:
    case = two_refunds(_lose_both)
    found = await result(case)
    # The first became UNKNOWN 0.2 s (one refund's latency) before the second; both are
    # settled by the same pass 30 s after the runs: 30.2 s and 30.0 s.
    assert counts(found, "unknown_reconciled_rate") == (2, 2)
    assert metric(found, "recovery_seconds_mean").value == pytest.approx(30.1)
    assert metric(found, "recovery_seconds_p95").value == pytest.approx(30.2)


def _lose_and_stay_down(shop: Shop) -> None:
    shop.lose_response("refund")
    shop.busy("find", times=100, retry_after=1.0)


async def test_an_unknown_the_downstream_cannot_confirm_stays_unreconciled() -> None:
    observed = await observe(builtin("lost_answer", setup=_lose_and_stay_down))
    found = score(observed).result
    assert counts(found, "unknown_reconciled_rate") == (0, 1)
    assert metric(found, "recovery_seconds_mean").value is None
    assert metric(found, "recovery_seconds_p95").value is None
    assert [r.status for r in observed.records_after] == [ExecutionStatus.UNKNOWN]
    assert not found.passed  # the scenario expects its refund SUCCEEDED


async def test_nothing_unknown_means_nothing_to_reconcile() -> None:
    found = await result(builtin("complete_fields"))
    assert counts(found, "unknown_reconciled_rate") == (0, 0)
    assert metric(found, "recovery_seconds_mean").value is None
