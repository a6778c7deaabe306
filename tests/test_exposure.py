"""Minimal exposure: scenario, permission, tenant, risk ceiling and model capability."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from handrail import (
    IdempotencyMode,
    IdempotencyPolicy,
    Principal,
    Registry,
    RiskLevel,
    SideEffect,
    Tool,
    ToolSpec,
)
from handrail.declare.exposure import (
    ExclusionReason,
    Exposure,
    ExposureRequest,
    ModelCapabilities,
    barred,
    definition_chars,
    schema_keywords,
    select_tools,
)
from handrail.errors import ConfigurationError

EMPTY: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
R = ExclusionReason


def spec(
    name: str,
    *,
    risk: RiskLevel = RiskLevel.L0_PUBLIC_READ,
    permissions: Iterable[str] = (),
    scenarios: Iterable[str] = (),
    enabled: bool = True,
    tenants: Iterable[str] | None = None,
    schema: dict[str, Any] | None = None,
    description: str = "Does one thing.",
) -> ToolSpec:
    writes = risk in {RiskLevel.L2_REVERSIBLE_WRITE, RiskLevel.L3_HIGH_RISK_WRITE}
    return ToolSpec(
        name=name,
        description=description,
        input_schema=schema or EMPTY,
        schema_version="1",
        description_version="1",
        risk=risk,
        side_effect=SideEffect.LOCAL_WRITE if writes else SideEffect.NONE,
        permissions=frozenset(permissions),
        scenarios=frozenset(scenarios),
        enabled=enabled,
        enabled_tenants=None if tenants is None else frozenset(tenants),
        idempotency=IdempotencyPolicy(
            mode=IdempotencyMode.COMMAND_ID if writes else IdempotencyMode.NONE,
        ),
    )


ALICE = Principal(user_id="alice", tenant_id="t1", permissions=frozenset({"orders.read"}))


def select(specs: Iterable[ToolSpec], principal: Principal = ALICE, **request: Any) -> Exposure:
    return select_tools(list(specs), principal, ExposureRequest(**request))


def reasons(exposure: Exposure) -> dict[str, ExclusionReason]:
    return {e.tool: e.reason for e in exposure.excluded}


def caps(**options: Any) -> ModelCapabilities:
    return ModelCapabilities(**options)


# --- filters ---------------------------------------------------------------------------------


def test_a_scenario_shows_its_own_and_general_tools_but_not_other_scenarios_tools() -> None:
    specs = [
        spec("shop.search"),
        spec("shop.refund_status", scenarios={"returns"}),
        spec("shop.track", scenarios={"shipping", "returns"}),
        spec("shop.reroute", scenarios={"shipping"}),
    ]
    exposure = select(specs, scenario="returns")
    assert exposure.names == ("shop.refund_status", "shop.search", "shop.track")
    assert reasons(exposure) == {"shop.reroute": R.OTHER_SCENARIO}


def test_an_unscoped_request_sees_scenario_tools_as_well() -> None:
    specs = [spec("shop.search"), spec("shop.reroute", scenarios={"shipping"})]
    assert select(specs).names == ("shop.reroute", "shop.search")


def test_a_missing_permission_excludes_the_tool_and_a_granted_one_shows_it() -> None:
    specs = [
        spec("orders.list", permissions={"orders.read"}),
        spec("staff.list", permissions={"hr"}),
    ]
    exposure = select(specs)
    assert exposure.names == ("orders.list",)
    assert reasons(exposure) == {"staff.list": R.MISSING_PERMISSION}
    assert "hr" in exposure.excluded[0].detail


def test_tools_enabled_for_other_tenants_only_are_excluded_as_other_tenant() -> None:
    specs = [spec("eu.vat", tenants={"t2"}), spec("t1.only", tenants={"t1"})]
    exposure = select(specs)
    assert exposure.names == ("t1.only",)
    assert reasons(exposure) == {"eu.vat": R.OTHER_TENANT}


def test_a_read_only_risk_ceiling_leaves_out_every_write() -> None:
    specs = [
        spec("a.public", risk=RiskLevel.L0_PUBLIC_READ),
        spec("a.internal", risk=RiskLevel.L1_INTERNAL_READ),
        spec("a.rename", risk=RiskLevel.L2_REVERSIBLE_WRITE),
        spec("a.pay", risk=RiskLevel.L3_HIGH_RISK_WRITE),
    ]
    exposure = select(specs, risk_ceiling=RiskLevel.L1_INTERNAL_READ)
    assert exposure.names == ("a.internal", "a.public")
    assert reasons(exposure) == {"a.pay": R.ABOVE_RISK_CEILING, "a.rename": R.ABOVE_RISK_CEILING}


def test_a_risk_ceiling_of_l4_is_refused_because_l4_is_never_exposed() -> None:
    with pytest.raises(ConfigurationError):
        ExposureRequest(risk_ceiling=RiskLevel.L4_FORBIDDEN)


@pytest.mark.invariant(9)
def test_forbidden_and_disabled_tools_are_excluded_even_when_preferred_and_permitted() -> None:
    specs = [
        spec("x.nuke", risk=RiskLevel.L4_FORBIDDEN, permissions={"orders.read"}),
        spec("x.old", enabled=False),
        spec("x.ok"),
    ]
    exposure = select(specs, preferred=("x.nuke", "x.old"), scenario="anything")
    assert exposure.names == ("x.ok",)
    assert reasons(exposure) == {"x.nuke": R.FORBIDDEN, "x.old": R.DISABLED}


def test_the_first_filter_that_rejects_a_tool_names_the_reason() -> None:
    specs = [
        spec("a.forbidden", risk=RiskLevel.L4_FORBIDDEN, permissions={"nope"}, tenants={"t9"}),
        spec("b.disabled", enabled=False, tenants={"t9"}),
        spec("c.tenant", tenants={"t9"}, scenarios={"other"}),
        spec("d.scenario", scenarios={"other"}, risk=RiskLevel.L3_HIGH_RISK_WRITE),
        spec("e.risk", risk=RiskLevel.L3_HIGH_RISK_WRITE, permissions={"nope"}),
        spec("f.permission", permissions={"nope"}, schema={**EMPTY, "not": {}}),
    ]
    exposure = select(
        specs,
        scenario="mine",
        risk_ceiling=RiskLevel.L2_REVERSIBLE_WRITE,
        capabilities=caps(unsupported_keywords=frozenset({"not"})),
    )
    assert [(e.tool, e.reason) for e in exposure.excluded] == [
        ("a.forbidden", R.FORBIDDEN),
        ("b.disabled", R.DISABLED),
        ("c.tenant", R.OTHER_TENANT),
        ("d.scenario", R.OTHER_SCENARIO),
        ("e.risk", R.ABOVE_RISK_CEILING),
        ("f.permission", R.MISSING_PERMISSION),
    ]


def test_a_schema_keyword_the_model_does_not_support_excludes_the_tool() -> None:
    nested = {
        "type": "object",
        "properties": {"when": {"anyOf": [{"type": "string", "format": "date"}, {"type": "null"}]}},
    }
    specs = [spec("a.when", schema=nested), spec("b.plain")]
    exposure = select(specs, capabilities=caps(unsupported_keywords=frozenset({"format"})))
    assert exposure.names == ("b.plain",)
    assert reasons(exposure) == {"a.when": R.UNSUPPORTED_SCHEMA}


def test_property_names_are_not_mistaken_for_schema_keywords() -> None:
    schema = {
        "type": "object",
        "properties": {"format": {"type": "string"}, "items": {"type": "array", "items": {}}},
        "$defs": {"not": {"type": "integer", "enum": [{"pattern": 1}]}},
    }
    assert schema_keywords(schema) == {"type", "properties", "$defs", "items", "enum"}
    exposure = select(
        [spec("a.form", schema=schema)],
        capabilities=caps(unsupported_keywords=frozenset({"format", "not", "pattern"})),
    )
    assert exposure.names == ("a.form",)


# --- capacity ---------------------------------------------------------------------------------


RANKED = [
    spec("z.preferred", risk=RiskLevel.L3_HIGH_RISK_WRITE),
    spec("y.returns_write", risk=RiskLevel.L2_REVERSIBLE_WRITE, scenarios={"returns"}),
    spec("a.general_write", risk=RiskLevel.L2_REVERSIBLE_WRITE),
    spec("m.general_read", risk=RiskLevel.L1_INTERNAL_READ),
    spec("b.public", risk=RiskLevel.L0_PUBLIC_READ),
    spec("c.public", risk=RiskLevel.L0_PUBLIC_READ),
]
ORDER = [
    "z.preferred",
    "y.returns_write",
    "b.public",
    "c.public",
    "m.general_read",
    "a.general_write",
]


@pytest.mark.parametrize("max_tools", range(len(ORDER) + 1))
def test_max_tools_keeps_preferred_then_scenario_tools_then_lower_risk_then_name(
    max_tools: int,
) -> None:
    exposure = select(
        reversed(RANKED),
        scenario="returns",
        preferred=("z.preferred", "not.registered"),
        capabilities=caps(max_tools=max_tools),
    )
    assert exposure.names == tuple(sorted(ORDER[:max_tools]))
    assert reasons(exposure) == dict.fromkeys(ORDER[max_tools:], R.MAX_TOOLS)


def test_the_definition_budget_is_never_exceeded_and_a_smaller_later_tool_may_still_fit() -> None:
    mid, big, small = (
        spec("a.mid", description="x" * 100),
        spec("b.big", description="x" * 400),
        spec("c.small"),
    )
    budget = definition_chars(mid) + definition_chars(small)
    exposure = select([small, big, mid], capabilities=caps(definition_budget=budget))
    assert exposure.names == ("a.mid", "c.small")
    assert reasons(exposure) == {"b.big": R.OVER_BUDGET}
    assert exposure.chars == budget
    tighter = select([small, big, mid], capabilities=caps(definition_budget=budget - 1))
    assert tighter.names == ("a.mid",)
    assert reasons(tighter) == {"b.big": R.OVER_BUDGET, "c.small": R.OVER_BUDGET}


def test_definition_chars_measure_the_compact_neutral_definition() -> None:
    one = spec("a.one", description="Zählt Bücher.")
    text = json.dumps(
        {"description": one.description, "name": one.name, "parameters": EMPTY},
        ensure_ascii=False,
        separators=(",", ":"),
        sort_keys=True,
    )
    assert definition_chars(one) == len(text)


def test_a_zero_tool_model_is_shown_nothing_and_every_eligible_tool_is_reported() -> None:
    exposure = select(RANKED, capabilities=caps(max_tools=0))
    assert exposure.names == ()
    assert sorted(exposure.eligible) == sorted(ORDER)


def test_negative_capability_limits_are_refused() -> None:
    with pytest.raises(ConfigurationError):
        ModelCapabilities(max_tools=-1)
    with pytest.raises(ConfigurationError):
        ModelCapabilities(definition_budget=-1)


# --- the report and its guarantees ----------------------------------------------------------


@pytest.mark.invariant(9)
@pytest.mark.parametrize(
    "bad",
    [
        spec("x.nuke", risk=RiskLevel.L4_FORBIDDEN),
        spec("x.old", enabled=False),
        spec("x.theirs", tenants={"t2"}),
    ],
)
def test_an_exposure_refuses_to_hold_a_forbidden_disabled_or_other_tenants_tool(
    bad: ToolSpec,
) -> None:
    assert barred(bad, "t1") is not None
    with pytest.raises(ConfigurationError):
        Exposure(tenant_id="t1", request=ExposureRequest(), included=(bad,))


def test_two_specs_of_one_name_are_refused() -> None:
    with pytest.raises(ConfigurationError):
        select([spec("a.b"), spec("a.b", description="Another.")])


def test_an_exposure_answers_membership_and_reasons_by_name() -> None:
    exposure = select([spec("a.ok"), spec("a.old", enabled=False)])
    assert "a.ok" in exposure
    assert "a.old" not in exposure
    assert len(exposure) == 1
    assert [s.name for s in exposure] == ["a.ok"]
    assert exposure.reason("a.old") is R.DISABLED
    assert exposure.reason("a.ok") is None
    assert exposure.reason("never.registered") is None


def _tool(template: ToolSpec) -> Tool:
    return Tool.from_json_schema(
        name=template.name,
        description=template.description,
        input_schema=dict(template.input_schema),
        fn=lambda arguments, ctx: None,
        risk=template.risk,
        permissions=template.permissions,
        scenarios=template.scenarios,
        enabled=template.enabled,
        enabled_tenants=template.enabled_tenants,
    )


def test_the_registry_exposure_applies_the_same_rules_and_exposed_is_its_unlimited_form() -> None:
    registry = Registry()
    for template in [
        spec("a.read"),
        spec("b.nuke", risk=RiskLevel.L4_FORBIDDEN),
        spec("c.theirs", tenants={"t2"}),
        spec("d.staff", permissions={"staff"}),
        spec("e.returns", scenarios={"returns"}),
    ]:
        registry.register(_tool(template))
    request = ExposureRequest(scenario="support", capabilities=caps(max_tools=1))
    exposure = registry.exposure(ALICE, request)
    assert exposure.names == ("a.read",)
    assert exposure.request is request
    assert reasons(exposure) == {
        "b.nuke": R.FORBIDDEN,
        "c.theirs": R.OTHER_TENANT,
        "d.staff": R.MISSING_PERMISSION,
        "e.returns": R.OTHER_SCENARIO,
    }
    assert registry.exposure(ALICE).names == ("a.read", "e.returns")
    assert (
        registry.exposed(ALICE, scenario="support")
        == registry.exposure(ALICE, ExposureRequest(scenario="support")).included
    )
    assert registry.lookup("c.theirs", ALICE) is None
    assert registry.lookup("b.nuke", ALICE) is None


# --- properties -----------------------------------------------------------------------------

PERMISSIONS = ("p1", "p2", "p3")
TENANTS = ("t1", "t2")
SCENARIOS = ("s1", "s2")
SUBSETS = st.frozensets(st.sampled_from(PERMISSIONS))


@st.composite
def specs_(draw: st.DrawFn) -> list[ToolSpec]:
    names = draw(st.lists(st.from_regex(r"[a-e]\.[a-e]{1,3}", fullmatch=True), unique=True))
    return [
        spec(
            name,
            risk=draw(st.sampled_from(list(RiskLevel))),
            permissions=draw(SUBSETS),
            scenarios=draw(st.frozensets(st.sampled_from(SCENARIOS))),
            enabled=draw(st.booleans()),
            tenants=draw(st.none() | st.frozensets(st.sampled_from(TENANTS))),
            description="d" * draw(st.integers(1, 60)),
        )
        for name in names
    ]


PRINCIPALS = st.builds(
    Principal,
    user_id=st.just("u"),
    tenant_id=st.sampled_from(TENANTS),
    permissions=SUBSETS,
)
REQUESTS = st.builds(
    ExposureRequest,
    scenario=st.none() | st.sampled_from(SCENARIOS),
    risk_ceiling=st.sampled_from(list(RiskLevel)[:4]),
    preferred=st.lists(st.from_regex(r"[a-e]\.[a-e]{1,3}", fullmatch=True), max_size=3).map(
        tuple,
    ),
    capabilities=st.builds(
        ModelCapabilities,
        max_tools=st.none() | st.integers(0, 6),
        definition_budget=st.none() | st.integers(0, 600),
    ),
)


@settings(max_examples=300)
@given(specs=specs_(), principal=PRINCIPALS, request=REQUESTS, seed=st.randoms())
def test_exposure_never_shows_a_barred_tool_respects_the_limits_and_ignores_input_order(
    specs: list[ToolSpec],
    principal: Principal,
    request: ExposureRequest,
    seed: Any,
) -> None:
    exposure = select_tools(specs, principal, request)
    for shown in exposure.included:
        assert barred(shown, principal.tenant_id) is None
        assert not shown.forbidden
        assert shown.enabled
        assert principal.has_permissions(shown.permissions)
        assert shown.risk <= request.risk_ceiling
    capabilities = request.capabilities
    assert capabilities.max_tools is None or len(exposure) <= capabilities.max_tools
    assert (
        capabilities.definition_budget is None or exposure.chars <= capabilities.definition_budget
    )
    assert sorted([*exposure.names, *(e.tool for e in exposure.excluded)]) == sorted(
        s.name for s in specs
    )
    shuffled = list(specs)
    seed.shuffle(shuffled)
    assert select_tools(shuffled, principal, request) == exposure


@settings(max_examples=300)
@given(
    specs=specs_(),
    principal=PRINCIPALS,
    request=REQUESTS,
    extra=st.sampled_from(PERMISSIONS),
)
def test_adding_a_permission_never_removes_an_eligible_tool(
    specs: list[ToolSpec],
    principal: Principal,
    request: ExposureRequest,
    extra: str,
) -> None:
    richer = Principal(
        user_id=principal.user_id,
        tenant_id=principal.tenant_id,
        permissions=principal.permissions | {extra},
    )
    before = select_tools(specs, principal, request)
    after = select_tools(specs, richer, request)
    assert set(before.eligible) <= set(after.eligible)
    unlimited = ExposureRequest(
        scenario=request.scenario,
        risk_ceiling=request.risk_ceiling,
        preferred=request.preferred,
    )
    shown = set(select_tools(specs, principal, unlimited).names)
    assert shown <= set(select_tools(specs, richer, unlimited).names)


@settings(max_examples=300)
@given(specs=specs_(), principal=PRINCIPALS, request=REQUESTS, lower=st.integers(0, 6))
def test_lowering_max_tools_only_removes_tools(
    specs: list[ToolSpec],
    principal: Principal,
    request: ExposureRequest,
    lower: int,
) -> None:
    capabilities = request.capabilities
    limit = capabilities.max_tools
    lowered = min(lower, limit) if limit is not None else lower
    smaller = ExposureRequest(
        scenario=request.scenario,
        risk_ceiling=request.risk_ceiling,
        preferred=request.preferred,
        capabilities=ModelCapabilities(
            max_tools=lowered,
            definition_budget=capabilities.definition_budget,
        ),
    )
    full = select_tools(specs, principal, request)
    cut = select_tools(specs, principal, smaller)
    assert set(cut.names) <= set(full.names)
    assert len(cut) == min(lowered, len(full))
    assert set(cut.eligible) == set(full.eligible)


# --- deferred loading and skill narrowing ----------------------------------------------------


def deferred(name: str, **options: Any) -> ToolSpec:
    return replace(spec(name, **options), defer_loading=True)


def test_a_deferred_tool_is_left_out_as_deferred_until_discovered() -> None:
    specs = [spec("core.search"), deferred("extra.refund"), deferred("extra.export")]
    exposure = select(specs)
    assert exposure.names == ("core.search",)
    assert reasons(exposure) == {"extra.export": R.DEFERRED, "extra.refund": R.DEFERRED}
    assert "search_tools" in exposure.excluded[0].detail
    found = select(specs, discovered={"extra.refund"})
    assert found.names == ("core.search", "extra.refund")
    assert reasons(found) == {"extra.export": R.DEFERRED}


def test_include_deferred_shows_every_deferred_tool_that_passes_the_other_filters() -> None:
    specs = [deferred("extra.refund"), deferred("extra.staff", permissions={"hr"})]
    exposure = select(specs, include_deferred=True)
    assert exposure.names == ("extra.refund",)
    assert reasons(exposure) == {"extra.staff": R.MISSING_PERMISSION}


def test_discovering_a_tool_never_shows_one_another_filter_removes() -> None:
    specs = [
        deferred("x.nuke", risk=RiskLevel.L4_FORBIDDEN),
        deferred("x.other_tenant", tenants={"t2"}),
        deferred("x.staff", permissions={"hr"}),
        deferred("x.write", risk=RiskLevel.L3_HIGH_RISK_WRITE),
        deferred("x.returns", scenarios={"returns"}),
    ]
    names = frozenset(s.name for s in specs)
    ceiling = RiskLevel.L1_INTERNAL_READ
    for request in (
        ExposureRequest(discovered=names, risk_ceiling=ceiling, scenario="billing"),
        ExposureRequest(include_deferred=True, risk_ceiling=ceiling, scenario="x"),
    ):
        exposure = select_tools(specs, ALICE, request)
        assert exposure.names == ()
        assert reasons(exposure) == {
            "x.nuke": R.FORBIDDEN,
            "x.other_tenant": R.OTHER_TENANT,
            "x.staff": R.MISSING_PERMISSION,
            "x.write": R.ABOVE_RISK_CEILING,
            "x.returns": R.OTHER_SCENARIO,
        }


def test_discovering_a_tool_that_is_not_deferred_changes_nothing() -> None:
    specs = [spec("core.search"), deferred("extra.refund")]
    found = select(specs, discovered={"core.search", "unknown.tool"})
    plain = select(specs)
    assert (found.included, found.excluded) == (plain.included, plain.excluded)


def test_a_narrowed_request_shows_only_the_listed_tools_as_outside_skill_otherwise() -> None:
    specs = [spec("core.search"), spec("shop.refund"), spec("shop.export")]
    exposure = select(specs, narrowed_to={"core.search", "shop.refund"})
    assert exposure.names == ("core.search", "shop.refund")
    assert reasons(exposure) == {"shop.export": R.OUTSIDE_SKILL}
    assert select(specs, narrowed_to=set()).names == ()


def test_narrowing_never_widens_what_the_principal_may_see() -> None:
    specs = [
        spec("x.nuke", risk=RiskLevel.L4_FORBIDDEN),
        spec("x.staff", permissions={"hr"}),
        spec("x.ok"),
    ]
    exposure = select(specs, narrowed_to={"x.nuke", "x.staff", "x.ok", "x.unregistered"})
    assert exposure.names == ("x.ok",)
    assert reasons(exposure) == {"x.nuke": R.FORBIDDEN, "x.staff": R.MISSING_PERMISSION}


def test_a_deferred_tool_outside_the_skills_is_reported_outside_skill_first() -> None:
    specs = [deferred("shop.refund"), deferred("shop.export")]
    exposure = select(specs, narrowed_to={"shop.refund"}, discovered={"shop.export"})
    assert exposure.names == ()
    assert reasons(exposure) == {"shop.export": R.OUTSIDE_SKILL, "shop.refund": R.DEFERRED}
    inside = select(specs, narrowed_to={"shop.refund"}, include_deferred=True)
    assert inside.names == ("shop.refund",)


def test_a_discovered_tool_still_takes_its_place_in_the_capacity_cut() -> None:
    specs = [spec("a.core"), spec("b.core"), deferred("c.found")]
    exposure = select(specs, discovered={"c.found"}, capabilities=caps(max_tools=2))
    assert exposure.names == ("a.core", "b.core")
    assert reasons(exposure) == {"c.found": R.MAX_TOOLS}
    preferred = select(
        specs, discovered={"c.found"}, preferred=("c.found",), capabilities=caps(max_tools=2)
    )
    assert preferred.names == ("a.core", "c.found")


def test_a_request_holds_its_discovered_and_narrowed_names_as_frozen_sets() -> None:
    request = ExposureRequest(discovered=["a", "a", "b"], narrowed_to=["c"])  # type: ignore[arg-type]
    assert request.discovered == frozenset({"a", "b"})
    assert request.narrowed_to == frozenset({"c"})
    assert ExposureRequest().narrowed_to is None


def test_the_registry_exposure_applies_deferral_and_narrowing_too() -> None:
    registry = Registry()
    for name, defer in (("core.search", False), ("extra.refund", True)):
        registry.register(
            Tool.from_json_schema(
                name=name,
                description="Does one thing.",
                input_schema=EMPTY,
                fn=lambda arguments, ctx: None,
                risk=RiskLevel.L0_PUBLIC_READ,
                defer_loading=defer,
            ),
        )
    assert registry.exposure(ALICE).names == ("core.search",)
    wider = registry.exposure(ALICE, ExposureRequest(include_deferred=True))
    assert wider.names == ("core.search", "extra.refund")
    narrowed = registry.exposure(ALICE, ExposureRequest(narrowed_to=frozenset({"extra.refund"})))
    assert narrowed.names == ()
    assert narrowed.reason("core.search") is R.OUTSIDE_SKILL
