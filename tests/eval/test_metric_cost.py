"""Cost metrics, each from a scenario whose value is known before it runs.

Latency is simulated: the shop spends its per-operation time on the scenario's clock,
which moves only then, so every duration below is exact.
"""

from __future__ import annotations

import pytest
from _eval_cases import builtin, counts, metric, result, scenario

from handrail.eval._downstream import Shop
from handrail.eval._scenario import call, reply
from handrail.loop.budgets import RunBudget
from handrail.loop.models import Usage

pytestmark = pytest.mark.anyio

LATENCY = {"orders": 0.010, "customers": 0.020, "messages": 0.030, "shipments": 0.040}


def _many_orders(shop: Shop) -> None:
    shop.add_orders("acme", 17)


async def test_latency_percentiles_are_nearest_rank_over_every_call_that_ran() -> None:
    orders = [reply(call(f"o{n}", "shop.get_order", order_id=f"ORD-{5000 + n}")) for n in range(17)]
    case = scenario(
        setup=_many_orders,
        latency=LATENCY,
        budget=RunBudget(max_steps=25, deadline_seconds=60.0, max_tool_calls=30),
        cassette=(
            *orders,
            reply(call("c1", "shop.get_customer", customer_id="CUS-1001")),
            reply(call("c2", "shop.order_messages", order_id="ORD-1001")),
            reply(call("c3", "shop.get_shipment", shipment_id="SHP-501")),
            reply(text="That is everything."),
        ),
    )
    found = await result(case)
    # 20 calls: 17 of 10 ms, then 20, 30 and 40 ms. p95 is the 19th, p99 the 20th.
    assert metric(found, "tool_latency_p95_ms").value == pytest.approx(30.0)
    assert metric(found, "tool_latency_p99_ms").value == pytest.approx(40.0)
    assert found.latencies_ms["shop.get_order"] == pytest.approx((10.0,) * 17)
    assert found.latencies_ms["shop.get_shipment"] == pytest.approx((40.0,))


async def test_deadline_use_is_the_runs_active_time_over_their_deadlines() -> None:
    case = scenario(
        latency={"shipments": 0.5},
        budget=RunBudget(max_steps=5, deadline_seconds=10.0),
        cassette=(
            reply(call("c1", "shop.get_shipment", shipment_id="SHP-501")),
            reply(text="Delivered on 2026-01-03."),
        ),
    )
    assert counts(await result(case), "deadline_used_rate") == (500, 10_000)


def _busy_twice(shop: Shop) -> None:
    shop.busy("shipments", times=2, retry_after=0.25)


async def test_retries_and_their_time_are_counted_in_the_downstream() -> None:
    case = scenario(
        setup=_busy_twice,
        latency={"shipments": 0.05},
        cassette=(
            reply(call("c1", "shop.get_shipment", shipment_id="SHP-504")),
            reply(text="In transit."),
        ),
    )
    found = await result(case)
    # Three attempts of 50 ms, two waits of 250 ms: from the first end to the last, 600 ms.
    assert metric(found, "retries").value == 2
    assert metric(found, "retry_seconds").value == pytest.approx(0.6)
    assert metric(found, "tool_latency_p95_ms").value == pytest.approx(650.0)
    assert counts(found, "success_rate") == (1, 1)


async def test_the_built_in_carrier_retry_costs_one_retry_of_300_ms() -> None:
    found = await result(builtin("parallel_reads"))
    assert metric(found, "retries").value == 1
    assert metric(found, "retry_seconds").value == pytest.approx(0.3)


async def test_tokens_are_every_replys_input_and_output() -> None:
    case = scenario(
        cassette=(
            reply(
                call("c1", "shop.get_order", order_id="ORD-1001"),
                usage=Usage(input_tokens=100, output_tokens=10),
            ),
            reply(text="Delivered.", usage=Usage(input_tokens=200, output_tokens=20)),
        ),
    )
    assert metric(await result(case), "tokens").value == 330
