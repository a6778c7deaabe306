"""Execution metrics, each from a scenario whose value is known before it runs."""

from __future__ import annotations

import pytest
from _eval_cases import builtin, counts, metric, observe, result, scenario, two_refunds

from handrail.eval._downstream import Shop
from handrail.eval._scenario import Expected, call, reply
from handrail.eval._scoring import score

pytestmark = pytest.mark.anyio


async def test_success_rate_counts_calls_that_ran_not_calls_refused_before() -> None:
    case = scenario(
        cassette=(
            reply(call("c1", "shop.get_order", order_id="ORD-1001")),  # ran: ok
            reply(call("c2", "shop.get_order", order_id="ORD-2001")),  # refused: NOT_FOUND
            reply(call("c3", "shop.get_shipment", shipment_id="SHP-999")),  # ran: not found
            reply(text="Done looking."),
        ),
    )
    assert counts(await result(case), "success_rate") == (1, 2)


async def test_a_confirmed_write_that_the_downstream_refused_is_not_a_success() -> None:
    found = await result(builtin("downstream_fails"))
    assert counts(found, "success_rate") == (0, 1)
    assert counts(await result(builtin("complete_fields")), "success_rate") == (2, 2)


def _lose_one_refund(shop: Shop) -> None:
    shop.lose_response("refund", times=1)


async def test_unknown_rate_counts_records_unknown_when_the_runs_ended() -> None:
    case = two_refunds(_lose_one_refund)
    observed = await observe(case)
    found = score(observed).result
    assert counts(found, "unknown_rate") == (1, 2)
    # Both refunds are in the shop; the lost one was reconciled, not run again.
    assert observed.shop.count("refund") == 2
    assert counts(found, "unknown_reconciled_rate") == (1, 1)


async def test_two_effects_of_one_intent_in_the_downstream_are_one_duplicate() -> None:
    ticket = {"customer_id": "CUS-1003", "subject": "Broken mug", "body": "It arrived broken."}
    case = scenario(
        task="Open a ticket for CUS-1003: the mug arrived broken.",
        cassette=(
            reply(call("c1", "shop.create_ticket", **ticket)),
            # The model opens it again under a new call id: a new command, a new key.
            reply(call("c2", "shop.create_ticket", **ticket)),
            reply(text="Ticket TK-0002 is open."),
        ),
        expected=(Expected(tool="shop.create_ticket"),),
    )
    observed = await observe(case)
    assert observed.shop.count("ticket") == 2
    assert metric(score(observed).result, "duplicate_side_effects").value == 1


async def test_a_confirmation_sent_twice_leaves_no_duplicate_in_the_downstream() -> None:
    observed = await observe(builtin("duplicate_submit"))
    (again,) = [c for c in observed.calls if c.host]
    assert again.envelope.status.value == "ok"
    assert observed.shop.count("refund") == 1
    assert metric(score(observed).result, "duplicate_side_effects").value == 0
