"""Trajectory metrics, each from a scenario whose value is known before it runs."""

from __future__ import annotations

import pytest
from _eval_cases import builtin, metric, observe, result, scenario

from handrail.eval._downstream import Shop
from handrail.eval._scenario import Scenario, call, reply
from handrail.eval._scoring import score

pytestmark = pytest.mark.anyio


async def test_the_same_call_made_three_times_is_two_repeats() -> None:
    case = scenario(
        cassette=(
            reply(call("c1", "shop.get_order", order_id="ORD-1001")),
            reply(call("c2", "shop.get_order", order_id="ORD-1001")),
            reply(call("c3", "shop.get_order", order_id="ORD-1004")),
            reply(call("c4", "shop.get_order", order_id="ORD-1001")),
            reply(text="ORD-1001 was delivered."),
        ),
    )
    assert metric(await result(case), "repeated_identical_calls").value == 2


async def test_the_built_in_suite_repeats_no_call() -> None:
    assert metric(await result(builtin("parallel_reads")), "repeated_identical_calls").value == 0


def _sixty_more_orders(shop: Shop) -> None:
    shop.add_orders("acme", 60)


def _listing(*, needed: tuple[str, ...], then_read: bool = False) -> Scenario:
    follow = (reply(call("c2", "shop.get_order", order_id="ORD-5059")),) if then_read else ()
    return scenario(
        task="Is there an order ORD-5059?",
        setup=_sixty_more_orders,
        needed=needed,
        cassette=(
            reply(call("c1", "shop.list_orders")),
            *follow,
            reply(text="I see no such order."),
        ),
    )


async def test_a_cut_list_that_hid_the_order_asked_about_is_a_harmful_truncation() -> None:
    observed = await observe(_listing(needed=("ORD-5059",)))
    (listing,) = observed.calls
    assert listing.envelope.truncated
    assert metric(score(observed).result, "harmful_truncations").value == 1


async def test_a_cut_that_left_the_needed_fact_in_view_is_harmless() -> None:
    found = await result(_listing(needed=("ORD-1001",)))
    assert metric(found, "harmful_truncations").value == 0


async def test_a_fact_the_model_read_elsewhere_was_not_hidden_by_the_cut() -> None:
    found = await result(_listing(needed=("ORD-5059",), then_read=True))
    assert metric(found, "harmful_truncations").value == 0
