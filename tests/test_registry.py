from __future__ import annotations

import pytest

from handrail import BusinessValue, Principal, Registry, RiskLevel, Tool, tool
from handrail.errors import DuplicateToolError, UnknownToolError
from handrail.testing import FixedClock, MemoryAuditSink, sequential_ids


def _read(name: str, **options: object) -> Tool:
    @tool(risk=RiskLevel.L0_PUBLIC_READ, name=name, **options)  # type: ignore[arg-type]
    async def read() -> None:
        """Read nothing."""

    return read


def _registry() -> tuple[Registry, MemoryAuditSink]:
    sink = MemoryAuditSink()
    return Registry(audit=sink, clock=FixedClock(), new_id=sequential_ids()), sink


def test_registering_and_deregistering_are_audited_with_the_actor() -> None:
    registry, sink = _registry()
    spec = registry.register(_read("shop.a"), actor="ops@example")
    registry.deregister("shop.a", actor="ops@example")
    assert [(e.stage, e.decision, e.tool, e.user_id) for e in sink.events] == [
        ("register", "accepted", "shop.a", "ops@example"),
        ("deregister", "removed", "shop.a", "ops@example"),
    ]
    assert sink.events[0].schema_version == spec.schema_version
    assert "shop.a" not in registry


@pytest.mark.parametrize("clash", ["shop.a", "Shop.A", "shop_a", "shop-a"])
def test_a_name_that_equals_or_folds_to_a_registered_one_is_refused_and_audited(
    clash: str,
) -> None:
    registry, sink = _registry()
    registry.register(_read("shop.a"))
    with pytest.raises(DuplicateToolError):
        registry.register(_read(clash))
    assert sink.events[-1].decision == "refused"
    assert len(registry) == 1


def test_only_tools_can_be_registered() -> None:
    registry, _ = _registry()
    with pytest.raises(TypeError):
        registry.register(lambda: None)  # type: ignore[arg-type]


def test_unknown_names_raise_unknown_tool_error() -> None:
    registry, _ = _registry()
    with pytest.raises(UnknownToolError):
        registry.get("x")
    with pytest.raises(UnknownToolError):
        registry.deregister("x")


def test_exposure_filters_by_tenant_permission_scenario_and_risk() -> None:
    registry, _ = _registry()
    registry.register(_read("shop.public"))
    registry.register(_read("shop.staff", permissions={"staff"}))
    registry.register(_read("shop.acme", enabled_tenants={"acme"}))
    registry.register(_read("shop.returns", scenarios={"returns"}))
    registry.register(_forbidden())
    alice = Principal(user_id="alice", tenant_id="acme")
    staff = Principal(user_id="s", tenant_id="other", permissions=frozenset({"staff"}))
    assert [s.name for s in registry.exposed(alice)] == ["shop.acme", "shop.public", "shop.returns"]
    assert [s.name for s in registry.exposed(alice, scenario="support")] == [
        "shop.acme",
        "shop.public",
    ]
    assert [s.name for s in registry.exposed(staff)] == [
        "shop.public",
        "shop.returns",
        "shop.staff",
    ]
    assert registry.lookup("shop.acme", staff) is None
    assert registry.lookup("shop.nuke", alice) is None
    assert registry.lookup("shop.staff", alice) is not None


def _forbidden() -> Tool:
    @tool(risk=RiskLevel.L4_FORBIDDEN, name="shop.nuke")
    async def nuke() -> None:
        """Forbidden."""

    return nuke


def test_namespaces_list_their_tools_and_iteration_is_sorted() -> None:
    registry, _ = _registry()
    for name in ("b.x", "a.y", "a.x", "ab.z"):
        registry.register(_read(name))
    assert [s.name for s in registry.in_namespace("a")] == ["a.x", "a.y"]
    assert list(registry) == ["a.x", "a.y", "ab.z", "b.x"]
    assert [s.name for s in registry.specs()] == list(registry)
    assert registry.get("a.x").spec.namespace == "a"
    assert registry.get("a.x").name == "a.x"


def test_business_value_declarations_are_audited_with_their_reasons_at_registration() -> None:
    registry, sink = _registry()
    crm = Tool.from_json_schema(
        name="crm.update",
        description="Update a customer.",
        input_schema={"type": "object", "properties": {"user_id": {"type": "string"}}},
        fn=lambda arguments, _ctx: arguments,
        risk=RiskLevel.L1_INTERNAL_READ,
        business_values={"user_id": BusinessValue(reason="the customer being updated")},
    )
    registry.register(crm, actor="ops@example")
    declared = [event for event in sink.events if event.stage == "business_value"]
    assert [(e.decision, e.tool, e.user_id) for e in declared] == [
        ("declared", "crm.update", "ops@example"),
    ]
    assert declared[0].detail is not None
    assert "#/properties/user_id" in declared[0].detail
    assert "the customer being updated" in declared[0].detail
    registry.register(_read("shop.a"))
    assert [e.stage for e in sink.events[len(declared) + 1 :]] == ["register"]


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"enabled": False},
        {"enabled_tenants": ["t1"]},
        {"enabled_tenants": []},
        {"enabled": False, "enabled_tenants": ["t1"]},
    ],
)
def test_lookup_answers_exactly_as_barred_says_for_every_tenant(options: dict[str, object]) -> None:
    from handrail.declare.exposure import barred  # noqa: PLC0415

    registry, _ = _registry()
    registry.register(_read("t.read", **options))

    @tool(risk=RiskLevel.L4_FORBIDDEN, name="t.forbidden", **options)  # type: ignore[arg-type]
    async def forbidden() -> None:
        """Never runs."""

    registry.register(forbidden)
    for name in ("t.read", "t.forbidden"):
        spec = registry.get(name).spec
        for tenant in ("t1", "t2"):
            principal = Principal(user_id="u", tenant_id=tenant)
            expected = None if barred(spec, tenant) is not None else registry.get(name)
            assert registry.lookup(name, principal) is expected, (name, tenant, options)


def test_a_tool_registered_again_under_its_name_is_looked_up_as_the_new_one() -> None:
    registry, _ = _registry()
    anyone = Principal(user_id="u", tenant_id="t2")
    first = _read("t.read")
    registry.register(first)
    assert registry.lookup("t.read", anyone) is first
    registry.deregister("t.read")
    assert registry.lookup("t.read", anyone) is None
    limited = _read("t.read", enabled_tenants=["t1"])
    registry.register(limited)
    assert registry.lookup("t.read", anyone) is None
    assert registry.lookup("t.read", Principal(user_id="u", tenant_id="t1")) is limited
    registry.deregister("t.read")
    again = _read("t.read")
    registry.register(again)
    assert registry.lookup("t.read", anyone) is again


def test_listeners_hear_each_register_and_deregister_after_the_change_is_visible() -> None:
    registry, sink = _registry()
    heard: list[tuple[str, bool, int]] = []
    registry.subscribe(lambda name: heard.append((name, name in registry, len(sink.events))))
    registry.register(_read("shop.a"))
    registry.deregister("shop.a")
    # Each listener call sees the table already changed and the change already audited.
    assert heard == [("shop.a", True, 1), ("shop.a", False, 2)]


def test_a_refused_registration_is_not_announced() -> None:
    registry, _ = _registry()
    registry.register(_read("shop.a"))
    heard: list[str] = []
    registry.subscribe(heard.append)
    with pytest.raises(DuplicateToolError):
        registry.register(_read("shop_a"))
    with pytest.raises(UnknownToolError):
        registry.deregister("shop.b")
    assert heard == []


def test_unsubscribing_stops_the_calls_and_twice_does_nothing() -> None:
    registry, _ = _registry()
    heard: list[str] = []
    unsubscribe = registry.subscribe(heard.append)
    registry.register(_read("shop.a"))
    unsubscribe()
    unsubscribe()
    registry.register(_read("shop.b"))
    assert heard == ["shop.a"]


def test_a_failing_listener_is_logged_and_neither_undoes_the_change_nor_stops_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry, _ = _registry()
    heard: list[str] = []

    def broken(name: str) -> None:
        raise RuntimeError(name)

    registry.subscribe(broken)
    registry.subscribe(heard.append)
    with caplog.at_level("ERROR", logger="handrail.declare.registry"):
        registry.register(_read("shop.a"))
    assert "shop.a" in registry
    assert heard == ["shop.a"]
    assert "a registry listener failed" in caplog.text


def test_the_same_listener_subscribed_twice_is_called_twice_and_unsubscribed_once_each() -> None:
    registry, _ = _registry()
    heard: list[str] = []
    first = registry.subscribe(heard.append)
    registry.subscribe(heard.append)
    registry.register(_read("shop.a"))
    first()
    registry.register(_read("shop.b"))
    assert heard == ["shop.a", "shop.a", "shop.b"]
