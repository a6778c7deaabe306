"""Argument metrics, each from a scenario whose value is known before it runs."""

from __future__ import annotations

import pytest
from _eval_cases import builtin, counts, result, scenario

from handrail.calls import ToolCall
from handrail.eval._scenario import Decision, Expected, call, reply

pytestmark = pytest.mark.anyio


def _raw(call_id: str, name: str, arguments: str) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments, provider="scripted")


async def test_json_pass_rate_counts_calls_whose_arguments_parse() -> None:
    case = scenario(
        cassette=(
            reply(_raw("c1", "shop.get_order", '{"order_id": "ORD-1001"')),  # cut off
            reply(call("c2", "shop.get_order", order_id="ORD-1001")),
            reply(_raw("c3", "shop.no_such_tool", "{not json")),  # never reaches syntax
            reply(text="ORD-1001 was delivered."),
        ),
        expected=(Expected(tool="shop.get_order"),),
    )
    assert counts(await result(case), "json_pass_rate") == (1, 2)


async def test_schema_pass_rate_counts_parsed_calls_that_fit_the_schema() -> None:
    case = scenario(
        cassette=(
            reply(call("c1", "shop.get_order", order_id="1001")),  # pattern ORD-nnnn
            reply(call("c2", "shop.get_order", order_id="ORD-1001")),
            reply(call("c3", "shop.get_order", order_id="ORD-1004", tenant_id="globex")),
            reply(_raw("c4", "shop.get_order", "[1, 2]")),  # not an object: syntax
            reply(text="ORD-1001 was delivered."),
        ),
        expected=(Expected(tool="shop.get_order"),),
    )
    found = await result(case)
    assert counts(found, "json_pass_rate") == (3, 4)
    assert counts(found, "schema_pass_rate") == (1, 3)


async def test_missing_fields_fail_the_schema_in_the_built_in_suite() -> None:
    found = await result(builtin("missing_fields"))
    assert counts(found, "schema_pass_rate") == (0, 1)
    assert counts(found, "json_pass_rate") == (1, 1)


async def test_field_accuracy_counts_expected_values_matched() -> None:
    case = scenario(
        task="Refund 12.90 EUR on ORD-1001.",
        cassette=(
            reply(call("c1", "shop.get_order", order_id="ORD-1001")),
            reply(
                call(
                    "c2",
                    "shop.refund_order",
                    order_id="ORD-1001",
                    amount_cents=1300,
                    reason="broken mug",
                )
            ),
        ),
        expected=(
            Expected(tool="shop.get_order", arguments={"order_id": "ORD-1001"}),
            Expected(
                tool="shop.refund_order", arguments={"order_id": "ORD-1001", "amount_cents": 1290}
            ),
        ),
        person=(Decision.DECLINE,),
    )
    # order_id twice right, the amount wrong (1300 for 1290).
    assert counts(await result(case), "field_accuracy") == (2, 3)


async def test_field_accuracy_counts_a_missing_call_as_all_its_fields_missed() -> None:
    case = scenario(
        cassette=(reply(text="I cannot tell."),),
        expected=(Expected(tool="shop.get_order", arguments={"order_id": "ORD-1004"}),),
    )
    assert counts(await result(case), "field_accuracy") == (0, 1)
