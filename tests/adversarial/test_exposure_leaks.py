"""Nothing of a forbidden, disabled or other tenant's tool reaches any model, in any format.

Each such tool carries a unique marker in its description, parameter names, nested
descriptions and `$defs`; whatever the principal, scenario, risk ceiling, preferred
tools, model capabilities and routed choice, no definitions payload and no tool-choice
value of any adapter contains a marker or the tool's name.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from handrail import Principal, Registry, RiskLevel, SideEffect, Tool
from handrail.adapters import (
    Adapter,
    AnthropicAdapter,
    DefinitionFormat,
    GeminiAdapter,
    OpenAIChatAdapter,
    OpenAIResponsesAdapter,
    ToolChoice,
    ToolChoiceMode,
    exposed_definitions,
    tool_definitions,
)
from handrail.authz.routing import Intent, Router, RoutingError, RoutingProblem, Rule
from handrail.declare.exposure import ExclusionReason, ExposureRequest, ModelCapabilities
from handrail.spec import ConfirmationPolicy

FORBIDDEN_MARKER = "Qx7forbiddenMarker"
DISABLED_MARKER = "Qx7disabledMarker"
TENANT_MARKER = "Qx7secretTenantMarker"
HIDDEN = {
    "ops.purge": FORBIDDEN_MARKER,
    "ops.retired": DISABLED_MARKER,
    "vault.open": TENANT_MARKER,
}
PERMISSIONS = ("orders.read", "orders.write", "admin")
SCENARIOS = ("support", "returns", "billing")
TENANTS = ("t1", "t2")
ADAPTERS: tuple[Adapter, ...] = (
    OpenAIChatAdapter(strict=False),
    OpenAIChatAdapter(strict=True),
    OpenAIResponsesAdapter(strict=False),
    OpenAIResponsesAdapter(strict=True),
    AnthropicAdapter(strict=False),
    AnthropicAdapter(strict=True),
    AnthropicAdapter(strict=False, parallel_calls=False),
    GeminiAdapter(),
    GeminiAdapter(parameters_json_schema=True),
)


def _marked_schema(marker: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            f"target_{marker}": {"type": "string", "description": f"what {marker} removes"},
            "mode": {"$ref": f"#/$defs/{marker}Mode"},
        },
        "required": [f"target_{marker}", "mode"],
        "additionalProperties": False,
        "$defs": {f"{marker}Mode": {"type": "string", "enum": [f"all_{marker}", "some"]}},
    }


def _tool(
    name: str,
    *,
    risk: RiskLevel = RiskLevel.L0_PUBLIC_READ,
    marker: str | None = None,
    **options: Any,
) -> Tool:
    writes = risk in {RiskLevel.L2_REVERSIBLE_WRITE, RiskLevel.L3_HIGH_RISK_WRITE}
    schema = (
        _marked_schema(marker)
        if marker
        else {
            "type": "object",
            "properties": {"q": {"type": "string", "format": "date"}},
            "required": ["q"],
            "additionalProperties": False,
        }
    )
    return Tool.from_json_schema(
        name=name,
        description=f"The {name} tool. {marker or ''}".strip(),
        input_schema=schema,
        fn=lambda arguments, ctx: None,
        risk=risk,
        side_effect=SideEffect.EXTERNAL_WRITE if writes else SideEffect.NONE,
        confirmation=ConfirmationPolicy() if writes else None,
        **options,
    )


def _registry() -> Registry:
    registry = Registry()
    for tool in (
        _tool("pricing.quote"),
        _tool("catalog.search", scenarios={"support", "billing"}),
        _tool("orders.list", risk=RiskLevel.L1_INTERNAL_READ, permissions={"orders.read"}),
        _tool(
            "orders.cancel",
            risk=RiskLevel.L2_REVERSIBLE_WRITE,
            permissions={"orders.write"},
            scenarios={"returns"},
        ),
        _tool("billing.refund", risk=RiskLevel.L3_HIGH_RISK_WRITE, permissions={"admin"}),
        # Each hidden tool passes every other filter: only its own bar keeps it out.
        _tool("ops.purge", risk=RiskLevel.L4_FORBIDDEN, marker=FORBIDDEN_MARKER),
        _tool("ops.retired", marker=DISABLED_MARKER, enabled=False),
        _tool("vault.open", marker=TENANT_MARKER, enabled_tenants={"t-secret"}),
    ):
        registry.register(tool)
    return registry


REGISTRY = _registry()


def assert_nothing_hidden(value: object) -> None:
    text = json.dumps(value, default=str)
    for name, marker in HIDDEN.items():
        assert marker.lower() not in text.lower()
        assert name not in text
        assert name.replace(".", "__") not in text


PRINCIPALS = st.builds(
    Principal,
    user_id=st.just("u"),
    tenant_id=st.sampled_from(TENANTS),
    permissions=st.frozensets(st.sampled_from(PERMISSIONS)),
)
CAPABILITIES = st.builds(
    ModelCapabilities,
    max_tools=st.none() | st.integers(0, 8),
    definition_budget=st.none() | st.integers(0, 3000),
    unsupported_keywords=st.frozensets(st.sampled_from(["format", "$ref", "enum", "anyOf"])),
    supports_parallel_calls=st.booleans(),
)
REQUESTS = st.builds(
    ExposureRequest,
    scenario=st.none() | st.sampled_from(SCENARIOS),
    risk_ceiling=st.sampled_from(list(RiskLevel)[:4]),
    preferred=st.lists(st.sampled_from(sorted(REGISTRY)), max_size=4).map(tuple),
    capabilities=CAPABILITIES,
)
CHOICES = st.sampled_from(
    [
        ToolChoice(),
        ToolChoice(mode=ToolChoiceMode.NONE),
        ToolChoice(mode=ToolChoiceMode.REQUIRED),
    ],
)


@pytest.mark.invariant(9)
@settings(max_examples=150, deadline=None)
@given(principal=PRINCIPALS, request=REQUESTS, choice=CHOICES)
def test_no_payload_or_tool_choice_of_any_format_carries_a_hidden_tool(
    principal: Principal,
    request: ExposureRequest,
    choice: ToolChoice,
) -> None:
    exposure = REGISTRY.exposure(principal, request)
    assert exposure.reason("ops.purge") is ExclusionReason.FORBIDDEN
    assert exposure.reason("ops.retired") is ExclusionReason.DISABLED
    assert exposure.reason("vault.open") is ExclusionReason.OTHER_TENANT
    for fmt in DefinitionFormat:
        assert_nothing_hidden(tool_definitions(exposure.included, fmt))
        assert_nothing_hidden(
            exposed_definitions(REGISTRY, principal, fmt, scenario=request.scenario),
        )
    router, intent = Router(default=choice), Intent(scenario=request.scenario)
    if choice.mode is ToolChoiceMode.REQUIRED and not exposure.included:
        with pytest.raises(RoutingError):
            router.route(intent, exposure)
        return
    route = router.route(intent, exposure)
    for adapter in ADAPTERS:
        assert_nothing_hidden(adapter.tool_definitions(route.tools).payload)
        assert_nothing_hidden(adapter.tool_choice(route.choice))


@pytest.mark.invariant(9)
@settings(max_examples=60, deadline=None)
@given(principal=PRINCIPALS, request=REQUESTS, hidden=st.sampled_from(sorted(HIDDEN)))
def test_no_rule_can_force_a_hidden_tool_onto_a_model(
    principal: Principal,
    request: ExposureRequest,
    hidden: str,
) -> None:
    router = Router(rules=(Rule.on_intent("x", ToolChoice.forced(hidden)),))
    decision = router.decide(Intent(name="x"))
    preferring = ExposureRequest(
        scenario=request.scenario,
        risk_ceiling=request.risk_ceiling,
        preferred=decision.preferred,
        capabilities=request.capabilities,
    )
    with pytest.raises(RoutingError) as raised:
        decision.bind(REGISTRY.exposure(principal, preferring))
    assert raised.value.problem in {RoutingProblem.NOT_EXPOSED, RoutingProblem.UNSUPPORTED_CHOICE}
    assert REGISTRY.lookup(hidden, principal) is None


@pytest.mark.invariant(9)
@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.provider)
def test_the_owning_tenant_sees_its_tool_so_the_sweep_would_catch_a_leak(adapter: Adapter) -> None:
    owner = Principal(user_id="o", tenant_id="t-secret", permissions=frozenset(PERMISSIONS))
    exposure = REGISTRY.exposure(owner, ExposureRequest(preferred=("ops.purge", "ops.retired")))
    text = json.dumps(adapter.tool_definitions(exposure.included).payload)
    assert TENANT_MARKER in text
    assert FORBIDDEN_MARKER not in text
    assert DISABLED_MARKER not in text
