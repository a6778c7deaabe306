"""search_tools: deferred tools the principal may use, found by words, within a token budget."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, date, datetime
from typing import Any

import pytest

from handrail import (
    ErrorCode,
    Gate,
    Principal,
    Registry,
    RiskLevel,
    Status,
    Tool,
    ToolCall,
    ToolContext,
)
from handrail.declare.exposure import ExposureRequest, ModelCapabilities
from handrail.errors import ConfigurationError
from handrail.shaping.budget import HeuristicTokens, json_text
from handrail.spec import (
    ConfirmationMode,
    ConfirmationPolicy,
    Deprecation,
    IdempotencyMode,
    IdempotencyPolicy,
)
from handrail.testing import FixedClock
from handrail.tools import SEARCH_TOOLS, search_tools_tool
from handrail.tools import catalogue as catalogue_module

pytestmark = pytest.mark.anyio

ALICE = Principal(user_id="alice", tenant_id="t1", permissions=frozenset({"billing"}))


async def _noop(arguments: dict[str, Any], ctx: ToolContext) -> dict[str, object]:
    return {}


def make(
    name: str,
    description: str = "Does one thing.",
    *,
    defer: bool = True,
    properties: dict[str, Any] | None = None,
    **options: Any,
) -> Tool:
    return Tool.from_json_schema(
        name=name,
        description=description,
        input_schema={
            "type": "object",
            "properties": properties or {"id": {"type": "string", "description": "Its id."}},
            "additionalProperties": False,
        },
        fn=_noop,
        risk=options.pop("risk", RiskLevel.L1_INTERNAL_READ),
        defer_loading=defer,
        **options,
    )


def registry_of(*tools: Tool, **options: Any) -> Registry:
    registry = Registry()
    registry.register(search_tools_tool(registry, **options))
    for item in tools:
        registry.register(item)
    return registry


async def search(
    registry: Registry,
    arguments: dict[str, Any],
    *,
    principal: Principal = ALICE,
    request: ExposureRequest | None = None,
    exposed: bool = True,
) -> dict[str, Any]:
    """The envelope data of one search_tools call through a gate, under `request`."""
    gate = Gate(registry, clock=FixedClock())
    exposure = registry.exposure(principal, request) if exposed else None
    call = ToolCall(id="c1", name=SEARCH_TOOLS, arguments=json.dumps(arguments))
    envelope = await gate.handle(call, principal, exposure=exposure)
    assert envelope.status is Status.OK, envelope.to_model_dict()
    data: dict[str, Any] = envelope.data
    return data


def names(data: dict[str, Any]) -> list[str]:
    return [found["name"] for found in data["tools"]]


WRITE: dict[str, Any] = {
    "side_effect": "local_write",
    "idempotency": IdempotencyPolicy(mode=IdempotencyMode.COMMAND_ID),
    "confirmation": ConfirmationPolicy(mode=ConfirmationMode.CONFIRM),
}

BILLING = (
    make("billing.refund_payment", "Refund a card payment to the original card."),
    make("billing.create_invoice", "Create a draft invoice for a customer."),
    make("billing.list_invoices", "List a customer's invoices, newest first."),
)


async def test_a_search_returns_the_matching_deferred_tools_definitions_best_first() -> None:
    registry = registry_of(*BILLING)
    data = await search(registry, {"query": "customer invoices"})
    assert set(data) == {"query", "tools", "matches", "omitted"}
    assert data["query"] == "customer invoices"
    assert names(data)[0] in {"billing.create_invoice", "billing.list_invoices"}
    assert set(names(data)) == {"billing.create_invoice", "billing.list_invoices"}
    assert (data["matches"], data["omitted"]) == (2, 0)
    spec = registry.get("billing.list_invoices").spec
    shown = next(t for t in data["tools"] if t["name"] == spec.name)
    assert shown == {
        "name": spec.name,
        "description": spec.description,
        "parameters": json.loads(json.dumps(spec.input_schema, default=dict)),
    }


async def test_tools_the_model_already_has_are_never_returned() -> None:
    registry = registry_of(
        make("billing.show_invoice", "Show one invoice.", defer=False),
        make("billing.void_invoice", "Void an invoice."),
        make("billing.send_invoice", "Send an invoice."),
    )
    data = await search(
        registry,
        {"query": "invoice"},
        request=ExposureRequest(discovered=frozenset({"billing.send_invoice"})),
    )
    assert names(data) == ["billing.void_invoice"]
    assert data["matches"] == 1


async def test_search_tools_never_returns_itself_even_when_deferred_and_named() -> None:
    registry = Registry()
    registry.register(make("catalogue.find_tools", "Search tools of the catalogue."))
    made = search_tools_tool(registry)
    registry.register(replace(made, spec=replace(made.spec, defer_loading=True)))
    for query in ("search_tools", "search tools catalogue"):
        data = await search(registry, {"query": query}, exposed=False)
        assert SEARCH_TOOLS not in names(data)


async def test_a_request_that_shows_every_deferred_tool_finds_nothing_more() -> None:
    registry = registry_of(*BILLING)
    data = await search(
        registry, {"query": "refund payment"}, request=ExposureRequest(include_deferred=True)
    )
    assert data == {"query": "refund payment", "tools": [], "matches": 0, "omitted": 0}


async def test_without_an_exposure_the_default_request_decides() -> None:
    registry = registry_of(make("billing.status", "Billing status.", defer=False), *BILLING)
    data = await search(registry, {"query": "refund status"}, exposed=False)
    assert names(data) == ["billing.refund_payment"]


async def test_the_runs_scenario_risk_ceiling_and_schema_limits_filter_the_results() -> None:
    registry = registry_of(
        make("refunds.read_refund", "Read a refund.", scenarios=("returns",)),
        make("refunds.list_refunds", "List refunds.", scenarios=("billing",)),
        make("refunds.issue_refund", "Issue a refund.", risk=RiskLevel.L3_HIGH_RISK_WRITE, **WRITE),
        make(
            "refunds.match_refund",
            "Match a refund.",
            properties={"id": {"type": "string", "pattern": "^r"}},
        ),
    )
    request = ExposureRequest(
        scenario="returns",
        risk_ceiling=RiskLevel.L1_INTERNAL_READ,
        preferred=(SEARCH_TOOLS,),
        capabilities=ModelCapabilities(unsupported_keywords=frozenset({"pattern"}), max_tools=1),
    )
    data = await search(registry, {"query": "refund"}, request=request)
    assert names(data) == ["refunds.read_refund"]


async def test_a_skills_narrowing_limits_the_search_to_the_listed_tools() -> None:
    registry = registry_of(*BILLING)
    request = ExposureRequest(narrowed_to=frozenset({SEARCH_TOOLS, "billing.list_invoices"}))
    data = await search(registry, {"query": "invoice refund"}, request=request)
    assert names(data) == ["billing.list_invoices"]


async def test_limit_caps_the_tools_and_the_rest_are_reported_omitted() -> None:
    tools = [make(f"reports.report_{n:02d}", f"Sales report number {n}.") for n in range(12)]
    registry = registry_of(*tools)
    default = await search(registry, {"query": "sales report"})
    assert (len(default["tools"]), default["matches"], default["omitted"]) == (5, 12, 7)
    two = await search(registry, {"query": "sales report", "limit": 2})
    assert names(two) == ["reports.report_00", "reports.report_01"]
    assert two["omitted"] == 10


async def test_definitions_are_kept_within_the_token_budget_whole() -> None:
    estimator = HeuristicTokens()
    tools = [
        make(f"reports.report_{n:02d}", "Sales report. " + "Long detail. " * 20) for n in range(8)
    ]
    registry = registry_of(*tools, budget_tokens=400)
    data = await search(registry, {"query": "sales report", "limit": 8})
    assert 0 < len(data["tools"]) < 8
    assert estimator.count(json_text(data)) <= 400
    assert data["omitted"] == 8 - len(data["tools"])
    every = {t.spec.name: t.spec.description for t in tools}
    assert all(found["description"] == every[found["name"]] for found in data["tools"])


async def test_a_definition_too_large_for_the_budget_is_passed_over_for_a_smaller_one() -> None:
    big = make("ledger.export_everything", "Export the ledger. " + "Every column. " * 200)
    small = make("ledger.export_month", "Export one month of the ledger.")
    registry = registry_of(big, small, budget_tokens=300)
    data = await search(registry, {"query": "export everything ledger"})
    assert names(data) == ["ledger.export_month"]
    assert (data["matches"], data["omitted"]) == (2, 1)


async def test_after_eight_definitions_too_large_the_search_stops_looking() -> None:
    huge = [make(f"bulk.export_{n}", "Bulk export. " + "Wide. " * 300) for n in range(9)]
    tiny = make("bulk.export_z", "Bulk export, small.")
    registry = registry_of(*huge, tiny, budget_tokens=200)
    data = await search(registry, {"query": "bulk export wide"})
    assert data["tools"] == []
    assert data["matches"] == 10


class _Growing:
    """A token estimate that grows faster than the text: parts fit, the whole may not."""

    def count(self, text: str) -> int:
        return len(text) * len(text) // 4_000


async def test_any_estimator_is_held_to_the_budget_by_measuring_the_whole() -> None:
    tools = [make(f"notes.note_{n}", "Keep a note. " * 6) for n in range(6)]
    registry = registry_of(*tools, budget_tokens=200, estimator=_Growing())
    data = await search(registry, {"query": "note", "limit": 6})
    assert 0 < len(data["tools"]) < 6
    assert _Growing().count(json_text(data)) <= 200


async def test_more_than_fifty_matches_are_counted_as_fifty() -> None:
    tools = [make(f"logs.log_{n:03d}", "Read a log.") for n in range(70)]
    registry = registry_of(*tools)
    data = await search(registry, {"query": "log", "limit": 3})
    assert names(data) == ["logs.log_000", "logs.log_001", "logs.log_002"]
    assert (data["matches"], data["omitted"]) == (50, 47)


async def test_matches_are_counted_across_windows_when_the_principal_may_use_few() -> None:
    locked = [make(f"logs.log_{n:03d}", "Read a log.", permissions=("ops",)) for n in range(40)]
    usable = make("logs.log_zzz", "Read a log.")
    registry = registry_of(*locked, usable)
    data = await search(registry, {"query": "log"})
    assert names(data) == ["logs.log_zzz"]
    assert data["matches"] == 1


async def test_a_changed_tool_is_returned_as_it_is_registered_now() -> None:
    registry = registry_of(*BILLING)
    first = await search(registry, {"query": "refund payment"})
    assert first["tools"][0]["description"] == "Refund a card payment to the original card."
    again = await search(registry, {"query": "refund payment"})
    assert again == first
    registry.deregister("billing.refund_payment")
    registry.register(make("billing.refund_payment", "Refund a payment, card or transfer."))
    changed = await search(registry, {"query": "refund payment"})
    assert changed["tools"][0]["description"] == "Refund a payment, card or transfer."


async def test_the_definition_cache_starts_again_when_full(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(catalogue_module, "_MAX_CACHED", 1)
    registry = registry_of(*BILLING)
    data = await search(registry, {"query": "invoice refund"})
    assert len(data["tools"]) == 3


async def test_a_tool_removed_after_the_index_was_built_is_never_returned() -> None:
    registry = registry_of(*BILLING)
    await search(registry, {"query": "refund"})
    gone = registry.get("billing.refund_payment")
    registry.deregister("billing.refund_payment")
    # A listener that failed would leave the index stale; the registry still decides.
    data = await search(registry, {"query": "refund"})
    assert names(data) == []
    registry.register(gone)
    assert names(await search(registry, {"query": "refund"})) == ["billing.refund_payment"]


async def test_a_view_of_the_request_that_is_not_an_exposure_request_is_read_field_by_field() -> (
    None
):
    class View:
        scenario = None
        risk_ceiling = RiskLevel.L3_HIGH_RISK_WRITE
        preferred = ()
        discovered = frozenset({"billing.create_invoice"})
        include_deferred = False
        narrowed_to = None

    registry = registry_of(*BILLING)
    tool = registry.get(SEARCH_TOOLS)
    ctx = ToolContext(
        principal=ALICE,
        call_id="c1",
        tool=SEARCH_TOOLS,
        deadline=1e9,
        clock=FixedClock(),
        exposure=View(),
    )
    bound = tool.bind({"query": "invoice"})
    data: Any = await tool.invoke(bound, ctx)
    assert [found["name"] for found in data["tools"]] == ["billing.list_invoices"]


def test_the_schema_bounds_query_and_limit_and_the_tool_is_a_plain_read() -> None:
    tool = search_tools_tool(Registry(), max_results=3)
    spec = tool.spec
    assert spec.name == SEARCH_TOOLS
    assert spec.read_only
    assert spec.risk is RiskLevel.L0_PUBLIC_READ
    assert not spec.defer_loading
    properties = spec.input_schema["properties"]
    assert (properties["query"]["minLength"], properties["query"]["maxLength"]) == (1, 200)
    assert (properties["limit"]["maximum"], properties["limit"]["default"]) == (3, 3)
    assert spec.input_schema["required"] == ["query"]
    assert spec.results.max_tokens == 2_000
    assert spec.results.redaction is not None
    assert spec.results.redaction.keeps_everything


@pytest.mark.parametrize(
    "options",
    [{"max_results": 0}, {"max_results": 21}, {"budget_tokens": 63}],
)
def test_limits_outside_their_range_are_refused(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        search_tools_tool(Registry(), **options)


async def test_a_limit_above_the_maximum_is_refused_by_the_schema() -> None:
    registry = registry_of(*BILLING, max_results=2)
    gate = Gate(registry, clock=FixedClock())
    call = ToolCall(id="c1", name=SEARCH_TOOLS, arguments='{"query": "invoice", "limit": 3}')
    envelope = await gate.handle(call, ALICE)
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert "$.limit" in envelope.field_errors


async def test_a_thousand_registered_tools_are_searched_and_filtered() -> None:
    tools = []
    for n in range(1_000):
        domain = ("billing", "orders", "support", "hr", "ops")[n % 5]
        permissions = ("hr",) if domain == "hr" else ()
        tools.append(
            make(
                f"{domain}.task_{n:04d}",
                f"Handle {domain} case {n:04d}: look it up and report its state.",
                permissions=permissions,
                properties={f"case_{n:04d}_id": {"type": "string"}},
            ),
        )
    registry = registry_of(*tools)
    assert len(registry) == 1_001
    data = await search(registry, {"query": "support case 0042", "limit": 20})
    assert names(data)[0] == "support.task_0042"
    assert len(data["tools"]) == 20
    assert data["matches"] == 50
    mixed = await search(registry, {"query": "hr support case", "limit": 20})
    assert len(mixed["tools"]) == 20
    assert {name.split(".")[0] for name in names(mixed)} == {"support"}


async def test_a_deprecated_tool_is_found_with_its_notice_until_its_day_then_never() -> None:
    clock = FixedClock(datetime(2026, 3, 1, tzinfo=UTC))
    registry = Registry(clock=clock)
    registry.register(search_tools_tool(registry))
    for item in BILLING:
        registry.register(item)
    registry.register(
        make(
            "billing.refund_card",
            "Refund a card payment, the old way.",
            deprecation=Deprecation(after=date(2026, 3, 2), replacement="billing.refund_payment"),
        ),
    )
    before = await search(registry, {"query": "refund card"})
    assert names(before) == ["billing.refund_card", "billing.refund_payment"]
    notice = before["tools"][0]["description"]
    assert notice == registry.get("billing.refund_card").spec.model_description
    assert "Deprecated: refused from 2026-03-02 (UTC). Use billing.refund_payment" in notice
    clock.advance(24 * 3600)
    after = await search(registry, {"query": "refund card"})
    assert names(after) == ["billing.refund_payment"]
    assert after["matches"] == 1
