"""Helpers of the evaluation tests: build a scenario, run it, read one metric.

Every model here is the ScriptedModelClient playing a cassette written for the test
(never a real model); the loop, gate, writes, store and the shop downstream are real.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from handrail.eval._downstream import Shop
from handrail.eval._observed import Observation
from handrail.eval._scenario import Decision, Scenario, call, reply
from handrail.eval._scoring import score
from handrail.eval.harness import play
from handrail.eval.report import Metric, ScenarioResult
from handrail.eval.suite import builtin_suite
from handrail.loop.models import ScriptedModelClient


def scenario(**fields: Any) -> Scenario:
    """A scenario for one test: name, title and task default to short placeholders."""
    fields.setdefault("name", "case")
    fields.setdefault("title", "a test case")
    fields.setdefault("task", "Help me with my orders.")
    return Scenario(**fields)


def builtin(name: str, **changes: Any) -> Scenario:
    """A built-in scenario, with some of its fields changed."""
    found = next(s for s in builtin_suite() if s.name == name)
    return replace(found, **changes)


async def observe(case: Scenario) -> Observation:
    """Play the scenario with its cassette and gather what it left behind."""
    return await play(case, ScriptedModelClient(case.cassette))


async def result(case: Scenario) -> ScenarioResult:
    """Play the scenario and score it."""
    return score(await observe(case)).result


def metric(found: ScenarioResult, name: str) -> Metric:
    """The named metric of a result (it must be there)."""
    value = found.metric(name)
    assert value is not None, name
    return value


def counts(found: ScenarioResult, name: str) -> tuple[int | None, int | None]:
    """A rate's numerator and denominator."""
    value = metric(found, name)
    return value.numerator, value.denominator


def two_refunds(setup: Callable[[Shop], None]) -> Scenario:
    """Refunds on ORD-1001 (1.00) and ORD-1004 (2.00) in one turn, both confirmed."""
    return scenario(
        task="Refund 1.00 EUR on ORD-1001 and 2.00 EUR on ORD-1004.",
        setup=setup,
        cassette=(
            reply(
                call(
                    "c1", "shop.refund_order", order_id="ORD-1001", amount_cents=100, reason="aaa"
                ),
                call(
                    "c2", "shop.refund_order", order_id="ORD-1004", amount_cents=200, reason="bbb"
                ),
            ),
            reply(text="The refunds are being checked."),
        ),
        person=(Decision.CONFIRM, Decision.CONFIRM),
    )
