"""Scenarios about effects: a duplicate submit, a lost answer, a sure failure, a moved target."""

from __future__ import annotations

from handrail.errors import ErrorCode
from handrail.eval._checks import answers_proven, effects, final_state, got_code, records
from handrail.eval._downstream import Shop
from handrail.eval._scenario import (
    Decision,
    Expected,
    Host,
    Scenario,
    answer,
    answer_citing_plan,
    call,
    reply,
)
from handrail.eval.suite._common import REFUND, expect_refund, propose_refund
from handrail.execution import ExecutionStatus

__all__ = ["downstream_fails", "duplicate_submit", "lost_answer", "version_changed"]


async def _submit_again(world: Host, plan_id: str) -> None:
    """The person's confirmation arrives a second time (a double click, a retried request)."""
    await world.execute_again(plan_id)


def duplicate_submit() -> Scenario:
    """A confirmed refund submitted twice: one refund in the shop, the second answered."""
    return Scenario(
        name="duplicate_submit",
        title="Duplicate submit: a confirmation sent twice makes one refund",
        task="Refund 9.00 EUR on ORD-1002: one of the two lamps was missing.",
        cassette=(
            propose_refund("call_1", "ORD-1002", 900, "one lamp was missing"),
            answer_citing_plan("succeeded", "I refunded 9.00 EUR on ORD-1002.", REFUND),
        ),
        expected=(expect_refund("ORD-1002", 900),),
        person=(Decision.CONFIRM,),
        after_resume=_submit_again,
        checks=(
            effects("refund", 1),
            records(REFUND, ExecutionStatus.SUCCEEDED),
            answers_proven(),
        ),
        seeds=("duplicate submit",),
    )


def _lose_refund_answer(shop: Shop) -> None:
    shop.lose_response("refund")


def lost_answer() -> Scenario:
    """The refund commits but its answer is lost: UNKNOWN, then reconciled by its key."""
    return Scenario(
        name="lost_answer",
        title="Answer lost: a committed refund is UNKNOWN until reconciled by its key",
        task="Refund 50.00 EUR on ORD-1004; the customer sent it back.",
        setup=_lose_refund_answer,
        cassette=(
            propose_refund("call_1", "ORD-1004", 5000, "returned by the customer"),
            answer(
                "processing",
                "The refund was sent, but its outcome is not known yet. It will be checked "
                "with the shop before anything is repeated.",
            ),
        ),
        expected=(expect_refund("ORD-1004", 5000),),
        person=(Decision.CONFIRM,),
        checks=(
            effects("refund", 1),
            records(REFUND, ExecutionStatus.SUCCEEDED),
            answers_proven(),
        ),
        seeds=("write committed, answer lost",),
    )


def _refuse_refunds(shop: Shop) -> None:
    shop.refuse("refund", "the customer's card was closed")


def downstream_fails() -> Scenario:
    """The shop refuses the refund for good: FAILED_FINAL, reported as failed, not retried."""
    return Scenario(
        name="downstream_fails",
        title="Downstream fails for sure: a refused refund is a final failure",
        task="Refund 20.00 EUR on ORD-1001 as a goodwill gesture.",
        setup=_refuse_refunds,
        cassette=(
            propose_refund("call_1", "ORD-1001", 2000, "goodwill"),
            answer("failed", "The shop refused the refund: the customer's card was closed."),
        ),
        expected=(expect_refund("ORD-1001", 2000),),
        person=(Decision.CONFIRM,),
        checks=(
            effects("refund", 0),
            records(REFUND, ExecutionStatus.FAILED_FINAL),
            final_state("failed"),
        ),
        seeds=("downstream fails for sure",),
    )


async def _refund_elsewhere(world: Host, plan_id: str) -> None:
    """Between the confirmation and the execution, a colleague refunds 5.00 EUR in the shop."""
    del plan_id
    world.shop.change_order(world.scenario.principal.tenant_id, "ORD-1004", refunded_cents=500)


def version_changed() -> Scenario:
    """The order changes after the person confirmed: VERSION_CONFLICT, nothing refunded."""
    return Scenario(
        name="version_changed",
        title="Version changed: an order refunded elsewhere after the confirmation",
        task="Refund 30.00 EUR on ORD-1004: the package was late.",
        cassette=(
            propose_refund("call_1", "ORD-1004", 3000, "late delivery"),
            reply(call("call_2", "shop.get_order", order_id="ORD-1004")),
            answer(
                "need_information",
                "ORD-1004 changed after you confirmed: 5.00 EUR was refunded meanwhile, so I "
                "refunded nothing. Shall I propose the refund again?",
            ),
        ),
        expected=(
            expect_refund("ORD-1004", 3000),
            Expected(tool="shop.get_order", arguments={"order_id": "ORD-1004"}),
        ),
        person=(Decision.CONFIRM,),
        after_confirm=_refund_elsewhere,
        checks=(effects("refund", 0), got_code(REFUND, ErrorCode.VERSION_CONFLICT)),
        seeds=("resource version changed after confirmation",),
    )
