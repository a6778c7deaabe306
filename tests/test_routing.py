"""Tool-choice routing: rules, their checks against the exposure, and each provider's field."""

from __future__ import annotations

import json
from typing import Any

import pytest

from handrail import Principal, Registry, RiskLevel, SideEffect, Tool
from handrail.adapters import (
    Adapter,
    AnthropicAdapter,
    GeminiAdapter,
    OpenAIChatAdapter,
    OpenAIResponsesAdapter,
    ToolChoice,
    ToolChoiceMode,
)
from handrail.authz.routing import Intent, Route, Router, RoutingError, RoutingProblem, Rule
from handrail.declare.exposure import ExclusionReason, Exposure, ExposureRequest, ModelCapabilities
from handrail.errors import ConfigurationError
from handrail.spec import ConfirmationPolicy

ALICE = Principal(user_id="alice", tenant_id="t1", permissions=frozenset({"orders.read"}))
NONE = ToolChoice(mode=ToolChoiceMode.NONE)
REQUIRED = ToolChoice(mode=ToolChoiceMode.REQUIRED)
QUOTE = ToolChoice.forced("pricing.quote")
ADAPTERS: dict[str, Adapter] = {
    "openai-chat": OpenAIChatAdapter(strict=False),
    "openai-responses": OpenAIResponsesAdapter(strict=False),
    "anthropic": AnthropicAdapter(strict=False),
    "gemini": GeminiAdapter(),
}
EXPECTED: dict[ToolChoiceMode, dict[str, object]] = {
    ToolChoiceMode.AUTO: {
        "openai-chat": "auto",
        "openai-responses": "auto",
        "anthropic": {"type": "auto"},
        "gemini": {"functionCallingConfig": {"mode": "AUTO"}},
    },
    ToolChoiceMode.NONE: {
        "openai-chat": "none",
        "openai-responses": "none",
        "anthropic": {"type": "none"},
        "gemini": {"functionCallingConfig": {"mode": "NONE"}},
    },
    ToolChoiceMode.REQUIRED: {
        "openai-chat": "required",
        "openai-responses": "required",
        "anthropic": {"type": "any"},
        "gemini": {"functionCallingConfig": {"mode": "ANY"}},
    },
    ToolChoiceMode.TOOL: {
        "openai-chat": {"type": "function", "function": {"name": "pricing__quote"}},
        "openai-responses": {"type": "function", "name": "pricing__quote"},
        "anthropic": {"type": "tool", "name": "pricing__quote"},
        "gemini": {
            "functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["pricing__quote"]},
        },
    },
}


def _tool(name: str, *, risk: RiskLevel = RiskLevel.L0_PUBLIC_READ, **options: Any) -> Tool:
    writes = risk in {RiskLevel.L2_REVERSIBLE_WRITE, RiskLevel.L3_HIGH_RISK_WRITE}
    return Tool.from_json_schema(
        name=name,
        description=f"The {name} tool.",
        input_schema={"type": "object", "properties": {"q": {"type": "string"}}},
        fn=lambda arguments, ctx: None,
        risk=risk,
        side_effect=SideEffect.LOCAL_WRITE if writes else SideEffect.NONE,
        confirmation=ConfirmationPolicy() if writes else None,
        **options,
    )


@pytest.fixture
def shop() -> Registry:
    registry = Registry()
    registry.register(_tool("pricing.quote"))
    registry.register(_tool("catalog.search"))
    registry.register(
        _tool("orders.list", risk=RiskLevel.L1_INTERNAL_READ, permissions={"orders.read"})
    )
    registry.register(
        _tool("orders.cancel", risk=RiskLevel.L2_REVERSIBLE_WRITE, scenarios={"returns"})
    )
    registry.register(_tool("payroll.run", permissions={"hr"}))
    registry.register(_tool("ops.wipe", risk=RiskLevel.L4_FORBIDDEN))
    registry.register(_tool("ops.legacy", enabled=False))
    return registry


ROUTER = Router(
    rules=(
        Rule.on_intent("price_question", QUOTE, name="prices are real-time facts"),
        Rule.on_intent("smalltalk", NONE),
        Rule.on_scenario("returns", REQUIRED),
        Rule.on_intent("price_question", NONE, name="never reached: an earlier rule matches"),
    ),
)


def route(
    registry: Registry,
    intent: Intent,
    *,
    router: Router = ROUTER,
    capabilities: ModelCapabilities | None = None,
    preferred: bool = True,
) -> Route:
    decision = router.decide(intent)
    request = ExposureRequest(
        scenario=intent.scenario,
        preferred=decision.preferred if preferred else (),
        capabilities=capabilities or ModelCapabilities(),
    )
    return decision.bind(registry.exposure(ALICE, request))


def wire_names(adapter: Adapter, route_: Route) -> list[str]:
    text = json.dumps(adapter.tool_definitions(route_.tools).payload)
    return sorted(n for n in ("pricing__quote", "catalog__search", "orders__list") if n in text)


# --- rules ----------------------------------------------------------------------------------


def test_the_first_matching_rule_decides_and_the_default_applies_otherwise() -> None:
    price = ROUTER.decide(Intent(name="price_question", scenario="returns"))
    assert (price.choice, price.rule) == (QUOTE, "prices are real-time facts")
    assert ROUTER.decide(Intent(name="smalltalk")).rule == "intent:smalltalk"
    assert ROUTER.decide(Intent(scenario="returns")).choice == REQUIRED
    fallback = ROUTER.decide(Intent(name="other"))
    assert (fallback.choice, fallback.rule) == (ToolChoice(), None)


def test_rules_are_plain_python_predicates_over_the_hosts_intent() -> None:
    urgent = Rule(
        name="stock questions outside the shop scenario need a lookup",
        matches=lambda intent: intent.name == "stock" and intent.scenario != "shop",
        choice=REQUIRED,
    )
    router = Router(rules=(urgent,), default=NONE)
    assert router.decide(Intent(name="stock")).choice == REQUIRED
    assert router.decide(Intent(name="stock", scenario="shop")).choice == NONE


def test_rule_names_are_unique_and_not_empty() -> None:
    with pytest.raises(ConfigurationError):
        Router(rules=(Rule.on_intent("a", NONE, name="x"), Rule.on_intent("b", NONE, name="x")))
    with pytest.raises(ConfigurationError):
        Rule(name="", matches=lambda intent: True, choice=NONE)


def test_a_forced_tool_is_preferred_so_that_it_survives_the_cut_to_max_tools(
    shop: Registry,
) -> None:
    tight = ModelCapabilities(max_tools=1)
    kept = route(shop, Intent(name="price_question"), capabilities=tight)
    assert kept.exposure.names == ("pricing.quote",)
    with pytest.raises(RoutingError) as raised:
        route(shop, Intent(name="price_question"), capabilities=tight, preferred=False)
    assert raised.value.problem is RoutingProblem.NOT_EXPOSED
    assert raised.value.excluded is ExclusionReason.MAX_TOOLS


# --- mapping in every format ----------------------------------------------------------------


@pytest.mark.parametrize("provider", list(ADAPTERS))
def test_a_forced_tool_maps_to_each_providers_named_choice_matching_its_definition(
    shop: Registry,
    provider: str,
) -> None:
    adapter = ADAPTERS[provider]
    routed = route(shop, Intent(name="price_question"))
    assert routed.choice == QUOTE
    assert routed.sends_choice
    assert adapter.tool_choice(routed.choice) == EXPECTED[ToolChoiceMode.TOOL][provider]
    assert "pricing__quote" in wire_names(adapter, routed)


@pytest.mark.parametrize("provider", list(ADAPTERS))
@pytest.mark.parametrize(
    ("intent", "mode"),
    [
        (Intent(name="smalltalk"), ToolChoiceMode.NONE),
        (Intent(scenario="returns"), ToolChoiceMode.REQUIRED),
        (Intent(name="anything else"), ToolChoiceMode.AUTO),
    ],
)
def test_forbidding_requiring_and_leaving_the_choice_map_in_each_format(
    shop: Registry,
    provider: str,
    intent: Intent,
    mode: ToolChoiceMode,
) -> None:
    adapter = ADAPTERS[provider]
    routed = route(shop, intent)
    assert routed.choice.mode is mode
    assert adapter.tool_choice(routed.choice) == EXPECTED[mode][provider]
    assert wire_names(adapter, routed) == ["catalog__search", "orders__list", "pricing__quote"]


def test_forbidding_tools_still_sends_the_exposed_tools_with_the_none_choice(
    shop: Registry,
) -> None:
    routed = route(shop, Intent(name="smalltalk"))
    assert routed.tools == shop.exposure(ALICE).included
    assert routed.sends_choice


def test_with_no_tool_exposed_the_request_carries_neither_tools_nor_a_choice(
    shop: Registry,
) -> None:
    nothing = ModelCapabilities(max_tools=0)
    routed = route(shop, Intent(name="smalltalk"), capabilities=nothing)
    assert routed.tools == ()
    assert not routed.sends_choice
    assert not route(shop, Intent(name="other"), capabilities=nothing).sends_choice


def test_a_model_without_parallel_calls_gets_one_call_per_turn_on_anthropic(
    shop: Registry,
) -> None:
    routed = route(
        shop,
        Intent(name="price_question"),
        capabilities=ModelCapabilities(supports_parallel_calls=False),
    )
    assert routed.parallel_calls is False
    adapter = AnthropicAdapter(strict=False, parallel_calls=routed.parallel_calls)
    assert adapter.tool_choice(routed.choice) == {
        "type": "tool",
        "name": "pricing__quote",
        "disable_parallel_tool_use": True,
    }
    assert route(shop, Intent()).parallel_calls is True


# --- refusals -------------------------------------------------------------------------------


SCHEMALESS = ModelCapabilities(unsupported_keywords=frozenset({"properties"}))


@pytest.mark.parametrize(
    ("tool", "scenario", "capabilities", "excluded"),
    [
        ("payroll.run", None, None, ExclusionReason.MISSING_PERMISSION),
        ("orders.cancel", "support", None, ExclusionReason.OTHER_SCENARIO),
        ("ops.wipe", None, None, ExclusionReason.FORBIDDEN),
        ("ops.legacy", None, None, ExclusionReason.DISABLED),
        ("orders.list", None, SCHEMALESS, ExclusionReason.UNSUPPORTED_SCHEMA),
        ("nowhere.at_all", None, None, None),
    ],
)
def test_forcing_a_tool_that_is_not_exposed_fails_with_the_reason_it_is_out(
    shop: Registry,
    tool: str,
    scenario: str | None,
    capabilities: ModelCapabilities | None,
    excluded: ExclusionReason | None,
) -> None:
    router = Router(rules=(Rule.on_intent("go", ToolChoice.forced(tool)),))
    with pytest.raises(RoutingError) as raised:
        route(shop, Intent(name="go", scenario=scenario), router=router, capabilities=capabilities)
    assert raised.value.problem is RoutingProblem.NOT_EXPOSED
    assert raised.value.tool == tool
    assert raised.value.excluded is excluded
    assert isinstance(raised.value, ConfigurationError)


def test_requiring_a_tool_when_nothing_is_exposed_fails(shop: Registry) -> None:
    with pytest.raises(RoutingError) as raised:
        route(shop, Intent(scenario="returns"), capabilities=ModelCapabilities(max_tools=0))
    assert raised.value.problem is RoutingProblem.NOTHING_EXPOSED


@pytest.mark.parametrize("intent", [Intent(name="price_question"), Intent(scenario="returns")])
def test_a_model_that_cannot_be_forced_refuses_required_and_named_choices(
    shop: Registry,
    intent: Intent,
) -> None:
    with pytest.raises(RoutingError) as raised:
        route(shop, intent, capabilities=ModelCapabilities(supports_forced_choice=False))
    assert raised.value.problem is RoutingProblem.UNSUPPORTED_CHOICE
    unforced = route(
        shop,
        Intent(name="smalltalk"),
        capabilities=ModelCapabilities(supports_forced_choice=False),
    )
    assert unforced.choice == NONE


@pytest.mark.parametrize(
    ("tool", "problem", "excluded"),
    [
        ("nowhere.at_all", RoutingProblem.UNREGISTERED, None),
        ("ops.wipe", RoutingProblem.NOT_EXPOSED, ExclusionReason.FORBIDDEN),
        ("ops.legacy", RoutingProblem.NOT_EXPOSED, ExclusionReason.DISABLED),
    ],
)
def test_checking_a_router_at_start_up_refuses_tools_no_request_could_be_forced_to(
    shop: Registry,
    tool: str,
    problem: RoutingProblem,
    excluded: ExclusionReason | None,
) -> None:
    router = Router(rules=(Rule.on_intent("go", ToolChoice.forced(tool)),))
    with pytest.raises(RoutingError) as raised:
        router.check(shop)
    assert (raised.value.problem, raised.value.excluded) == (problem, excluded)
    ROUTER.check(shop)
    assert ROUTER.forced_tools == {"pricing.quote"}


def test_a_route_allows_only_the_calls_its_choice_permits(shop: Registry) -> None:
    forced = route(shop, Intent(name="price_question"))
    assert forced.allows("pricing.quote")
    assert not forced.allows("catalog.search")
    silent = route(shop, Intent(name="smalltalk"))
    assert not silent.allows("pricing.quote")
    free = route(shop, Intent())
    assert free.allows("catalog.search")
    assert not free.allows("payroll.run")
    assert not free.allows("ops.wipe")


def test_routing_is_deterministic_for_the_same_intent_and_exposure(shop: Registry) -> None:
    exposure: Exposure = shop.exposure(ALICE, ExposureRequest(preferred=("pricing.quote",)))
    first = ROUTER.route(Intent(name="price_question"), exposure)
    assert all(ROUTER.route(Intent(name="price_question"), exposure) == first for _ in range(5))
