"""Scenarios about what the user gave: every field, a missing field, an ambiguous name."""

from __future__ import annotations

from handrail.errors import ErrorCode
from handrail.eval._checks import answers_proven, effects, final_state, got_code, records
from handrail.eval._scenario import (
    Decision,
    Expected,
    Scenario,
    answer,
    answer_citing_plan,
    call,
    reply,
)
from handrail.eval.suite._common import REFUND, expect_refund, propose_refund
from handrail.execution import ExecutionStatus

__all__ = ["complete_fields", "missing_fields", "same_name"]


def complete_fields() -> Scenario:
    """Every field given: read the order, plan the refund, the person confirms, it runs."""
    return Scenario(
        name="complete_fields",
        title="Complete fields: a refund with every field given, confirmed and made",
        task="Please refund 12.90 EUR on order ORD-1001: the mug arrived broken.",
        cassette=(
            reply(call("call_1", "shop.get_order", order_id="ORD-1001")),
            propose_refund("call_2", "ORD-1001", 1290, "the mug arrived broken"),
            answer_citing_plan("succeeded", "I refunded 12.90 EUR on ORD-1001.", REFUND),
        ),
        expected=(
            Expected(tool="shop.get_order", arguments={"order_id": "ORD-1001"}),
            expect_refund("ORD-1001", 1290),
        ),
        person=(Decision.CONFIRM,),
        checks=(
            effects("refund", 1),
            records(REFUND, ExecutionStatus.SUCCEEDED),
            final_state("succeeded"),
            answers_proven(),
        ),
        seeds=("complete fields",),
    )


def missing_fields() -> Scenario:
    """A field missing: the call the model guesses fails the schema; it asks instead."""
    return Scenario(
        name="missing_fields",
        title="Missing fields: a ticket without customer or details is refused, then asked for",
        task="Open a support ticket: my delivery is a mess.",
        cassette=(
            reply(call("call_1", "shop.create_ticket", subject="Delivery problem")),
            answer(
                "need_information",
                "To open the ticket I need the customer id and what went wrong with the delivery.",
            ),
        ),
        expected=(Expected(tool="shop.create_ticket"),),
        checks=(
            effects("ticket", 0),
            got_code("shop.create_ticket", ErrorCode.INVALID_ARGUMENTS),
            final_state("need_information"),
        ),
        seeds=("missing fields",),
    )


def same_name() -> Scenario:
    """Two customers named Anna Berg: the tool asks which; the user says; the model reads her."""
    return Scenario(
        name="same_name",
        title="Same name: two customers called Anna Berg need a clarification",
        task="What tier is our customer Anna Berg?",
        follow_ups=("The one in Bergen.",),
        cassette=(
            reply(call("call_1", "shop.find_customer", name="Anna Berg")),
            answer(
                "need_information",
                "Two customers are called Anna Berg: CUS-1001 in Oslo and CUS-1002 in Bergen. "
                "Which one do you mean?",
            ),
            reply(call("call_2", "shop.get_customer", customer_id="CUS-1002")),
            reply(text="Anna Berg in Bergen (CUS-1002) is a silver customer."),
        ),
        expected=(
            Expected(tool="shop.find_customer", arguments={"name": "Anna Berg"}),
            Expected(tool="shop.get_customer", arguments={"customer_id": "CUS-1002"}),
        ),
        checks=(got_code("shop.find_customer", ErrorCode.NEEDS_CLARIFICATION), answers_proven()),
        seeds=("same-name resources need clarification",),
    )
