"""PolicyEngine on its own: precedence, defaults, resolvers, the rule index, conditions."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from handrail import (
    ConfirmationMode,
    ConfirmationPolicy,
    ErrorCode,
    Principal,
    RiskLevel,
    SideEffect,
    ToolSpec,
)
from handrail.authz.policy import (
    PRECEDENCE,
    AllowAll,
    Decision,
    Facts,
    Outcome,
    PolicyEngine,
    Resolved,
    Rule,
    all_of,
    any_of,
    describe,
    holds,
    is_owner,
    lacks,
    negate,
    refusal_for,
)
from handrail.errors import ConfigurationError

ALICE = Principal(user_id="alice", tenant_id="t1", permissions=frozenset({"a", "b"}))
READ = {"side_effect": SideEffect.NONE}
WRITE = {"side_effect": SideEffect.LOCAL_WRITE}


def _approval(count: int = 1) -> ConfirmationPolicy:
    return ConfirmationPolicy(
        mode=ConfirmationMode.APPROVE,
        approver_permission="x.approve",
        distinct_approvers=count,
    )


def _rule(name: str, outcome: Outcome, *, tool: str = "t.act", **options: Any) -> Rule:
    if outcome is Outcome.APPROVE:
        options.setdefault("approval", _approval())
    return Rule(name=name, tool=tool, outcome=outcome, reason=f"because {name}", **options)


async def _decide(
    engine: PolicyEngine,
    arguments: object = None,
    *,
    action: str = "t.act",
    context: Mapping[str, object] = READ,
    principal: Principal = ALICE,
) -> Decision:
    return await engine.decide(principal, action, arguments, context)


# --- precedence -------------------------------------------------------------------------------


def test_precedence_is_deny_then_approve_then_confirm_then_allow() -> None:
    assert PRECEDENCE == (Outcome.DENY, Outcome.APPROVE, Outcome.CONFIRM, Outcome.ALLOW)


@pytest.mark.anyio
@pytest.mark.parametrize(
    "outcomes",
    [
        combo
        for size in range(1, 5)
        for combo in itertools.permutations(
            [Outcome.ALLOW, Outcome.CONFIRM, Outcome.APPROVE, Outcome.DENY], size
        )
    ],
)
async def test_when_several_rules_hold_the_strictest_outcome_decides(
    outcomes: tuple[Outcome, ...],
) -> None:
    engine = PolicyEngine([_rule(f"r{i}-{o}", o) for i, o in enumerate(outcomes)])
    decision = await _decide(engine)
    strictest = next(o for o in PRECEDENCE if o in outcomes)
    assert decision.outcome is strictest
    assert decision.rule.endswith(f"-{strictest}")


@pytest.mark.anyio
async def test_among_approve_rules_the_one_asking_more_distinct_approvers_decides() -> None:
    engine = PolicyEngine(
        [
            _rule("one", Outcome.APPROVE, approval=_approval(1)),
            _rule("three", Outcome.APPROVE, approval=_approval(3)),
            _rule("two", Outcome.APPROVE, approval=_approval(2)),
        ],
    )
    decision = await _decide(engine)
    assert decision.rule == "three"
    assert decision.approval == _approval(3)


@pytest.mark.anyio
async def test_within_one_outcome_the_first_declared_rule_decides() -> None:
    engine = PolicyEngine([_rule("first", Outcome.CONFIRM), _rule("second", Outcome.CONFIRM)])
    assert (await _decide(engine)).rule == "first"
    assert [r.name for r in engine.rules] == ["first", "second"]


@pytest.mark.anyio
async def test_a_rule_whose_condition_does_not_hold_is_passed_over() -> None:
    engine = PolicyEngine(
        [
            _rule("big", Outcome.DENY, when=lambda f: f.arguments["n"] > 10),
            _rule("small", Outcome.CONFIRM),
        ],
    )
    assert (await _decide(engine, {"n": 10})).rule == "small"
    assert (await _decide(engine, {"n": 11})).rule == "big"


# --- defaults ---------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_with_no_rule_holding_a_read_is_allowed() -> None:
    engine = PolicyEngine([_rule("never", Outcome.DENY, when=lambda f: False)])
    decision = await _decide(engine, context=READ)
    assert (decision.outcome, decision.rule) == (Outcome.ALLOW, "default:read")


@pytest.mark.anyio
@pytest.mark.parametrize(
    "context",
    [WRITE, {"side_effect": SideEffect.EXTERNAL_WRITE}, {}, {"side_effect": "unknown"}],
)
async def test_with_no_rule_holding_a_write_or_an_unstated_side_effect_is_denied(
    context: Mapping[str, object],
) -> None:
    decision = await _decide(PolicyEngine(), context=context)
    assert (decision.outcome, decision.rule) == (Outcome.DENY, "default:write")


@pytest.mark.anyio
async def test_allow_all_allows_everything_with_its_own_rule_name() -> None:
    decision = await AllowAll().decide(ALICE, "x", None, WRITE)
    assert (decision.outcome, decision.rule) == (Outcome.ALLOW, "allow-all")


# --- resolvers --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Order:
    order_id: str
    owner_id: str


ORDERS = {("t1", "o1"): Order("o1", "alice"), ("t1", "o2"): Order("o2", "bob")}


def _load_order(principal: Principal, arguments: Any) -> Resolved | None:
    found = ORDERS.get((principal.tenant_id, arguments["order_id"]))
    return None if found is None else Resolved(key=f"order:{found.order_id}", value=found)


async def _load_order_async(principal: Principal, arguments: Any) -> Resolved | None:
    return _load_order(principal, arguments)


@pytest.mark.anyio
@pytest.mark.parametrize("resolver", [_load_order, _load_order_async])
async def test_a_resource_missing_from_the_callers_tenant_is_not_found_and_no_rule_runs(
    resolver: Any,
) -> None:
    tried: list[str] = []

    def spy(facts: Facts) -> bool:
        tried.append(facts.action)
        return True

    engine = PolicyEngine([_rule("any", Outcome.ALLOW, when=spy)], resolvers={"t.act": resolver})
    other_tenant = Principal(user_id="alice", tenant_id="t2")
    for principal, order_id in ((ALICE, "o9"), (other_tenant, "o1")):
        decision = await _decide(engine, {"order_id": order_id}, principal=principal)
        assert decision.outcome is Outcome.NOT_FOUND
        assert decision.rule == "resolve:t.act"
        assert decision.resource_key is None
    assert tried == []


@pytest.mark.anyio
@pytest.mark.parametrize("resolver", [_load_order, _load_order_async])
async def test_ownership_is_read_from_the_loaded_resource_not_from_the_arguments(
    resolver: Any,
) -> None:
    engine = PolicyEngine(
        [_rule("not-owner", Outcome.DENY, when=negate(is_owner()))],
        resolvers={"t.act": resolver},
    )
    claimed = {"order_id": "o2", "owner_id": "alice", "user_id": "alice"}
    refused = await _decide(engine, claimed)
    assert (refused.outcome, refused.rule, refused.resource_key) == (
        Outcome.DENY,
        "not-owner",
        "order:o2",
    )
    own = await _decide(engine, {"order_id": "o1", "owner_id": "bob"})
    assert (own.outcome, own.rule, own.resource_key) == (Outcome.ALLOW, "default:read", "order:o1")


@pytest.mark.anyio
async def test_a_sync_resolver_that_returns_an_awaitable_is_awaited() -> None:
    def lazy(principal: Principal, arguments: Any) -> Any:
        return _load_order_async(principal, arguments)

    engine = PolicyEngine(resolvers={"t.act": lazy})
    decision = await _decide(engine, {"order_id": "o1"})
    assert decision.resource_key == "order:o1"


# --- the index --------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_rules_of_other_tools_are_never_tried() -> None:
    tried: list[str] = []

    def spy(name: str) -> Any:
        def condition(facts: Facts) -> bool:
            tried.append(name)
            return name == "mine"

        return condition

    rules = [
        _rule(f"other-{i}", Outcome.DENY, tool=f"other.t{i}", when=spy(f"o{i}")) for i in range(50)
    ]
    engine = PolicyEngine([*rules, _rule("mine", Outcome.CONFIRM, when=spy("mine"))])
    decision = await _decide(engine)
    assert decision.rule == "mine"
    assert tried == ["mine"]
    assert engine.rules_for("t.act") == (engine.rules[-1],)


@pytest.mark.anyio
async def test_a_pattern_rule_applies_to_every_tool_it_matches_and_only_those() -> None:
    engine = PolicyEngine(
        [
            _rule("pay-writes", Outcome.CONFIRM, tool="pay.*"),
            _rule("refund", Outcome.DENY, tool="pay.refund", when=lambda f: f.arguments["n"] > 5),
        ],
    )
    assert (await _decide(engine, {"n": 9}, action="pay.refund")).rule == "refund"
    assert (await _decide(engine, {"n": 1}, action="pay.refund")).rule == "pay-writes"
    assert (await _decide(engine, {"n": 9}, action="pay.export")).rule == "pay-writes"
    assert (await _decide(engine, {"n": 9}, action="shop.pay")).rule == "default:read"
    assert [r.name for r in engine.rules_for("pay.refund")] == ["refund", "pay-writes"]
    assert engine.rules_for("pay.export") is engine.rules_for("pay.export")


def test_a_rule_knows_whether_its_tool_is_a_pattern() -> None:
    assert _rule("p", Outcome.ALLOW, tool="a.[bc]").applies_to("a.b")
    assert not _rule("p", Outcome.ALLOW, tool="a.b?").applies_to("a.b")
    assert _rule("e", Outcome.ALLOW, tool="a.b").applies_to("a.b")
    assert not _rule("e", Outcome.ALLOW, tool="a.b").is_pattern


# --- declaring rules --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {"outcome": Outcome.NOT_FOUND},
        {"outcome": Outcome.APPROVE},
        {"outcome": Outcome.APPROVE, "approval": ConfirmationPolicy(mode=ConfirmationMode.CONFIRM)},
        {"outcome": Outcome.CONFIRM, "approval": _approval()},
        {"outcome": Outcome.ALLOW, "name": ""},
        {"outcome": Outcome.ALLOW, "tool": ""},
        {"outcome": Outcome.ALLOW, "reason": ""},
        {"outcome": Outcome.DENY, "name": "default:read"},
        {"outcome": Outcome.ALLOW, "name": "resolve:t"},
    ],
)
def test_an_ill_formed_rule_is_refused_when_declared(options: dict[str, Any]) -> None:
    fields: dict[str, Any] = {"name": "r", "tool": "t", "reason": "why", **options}
    with pytest.raises(ConfigurationError):
        Rule(**fields)


def test_two_rules_with_one_name_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="'same'"):
        PolicyEngine([_rule("same", Outcome.ALLOW), _rule("same", Outcome.DENY, tool="u")])


# --- conditions -------------------------------------------------------------------------------


def _facts(resource: object = None, principal: Principal = ALICE) -> Facts:
    return Facts(principal=principal, action="t", arguments={}, resource=resource, context={})


def test_permission_conditions_read_the_principal() -> None:
    assert holds("a", "b")(_facts())
    assert not holds("a", "c")(_facts())
    assert lacks("c")(_facts())
    assert lacks("a", "c")(_facts())
    assert not lacks("a", "b")(_facts())


@pytest.mark.parametrize(
    ("resource", "owned"),
    [
        ({"owner_id": "alice"}, True),
        ({"owner_id": "bob"}, False),
        ({}, False),
        (Order("o", "alice"), True),
        (Order("o", "bob"), False),
        (None, False),
    ],
)
def test_ownership_holds_only_when_the_loaded_resource_names_the_caller(
    resource: object,
    owned: bool,
) -> None:
    assert is_owner()(_facts(resource)) is owned


def test_conditions_combine() -> None:
    yes, no = (lambda f: True), (lambda f: False)
    assert all_of(yes, yes)(_facts())
    assert not all_of(yes, no)(_facts())
    assert any_of(no, yes)(_facts())
    assert not any_of(no, no)(_facts())
    assert negate(no)(_facts())


# --- refusals and audit text ------------------------------------------------------------------

SPEC = ToolSpec(
    name="t.act",
    description="d",
    input_schema={"type": "object"},
    schema_version="1",
    description_version="1",
    risk=RiskLevel.L1_INTERNAL_READ,
    side_effect=SideEffect.NONE,
)


@pytest.mark.parametrize(
    ("outcome", "code"),
    [
        (Outcome.DENY, ErrorCode.PERMISSION_DENIED),
        (Outcome.NOT_FOUND, ErrorCode.NOT_FOUND),
        (Outcome.CONFIRM, ErrorCode.NEEDS_CONFIRMATION),
        (Outcome.APPROVE, ErrorCode.NEEDS_APPROVAL),
    ],
)
def test_every_outcome_but_allow_is_a_terminal_refusal_with_its_own_code(
    outcome: Outcome,
    code: ErrorCode,
) -> None:
    refusal = refusal_for(Decision(outcome=outcome, reason="why", rule="r"), SPEC)
    assert refusal is not None
    assert (refusal.code, refusal.stage, refusal.retryable) == (code, "authorization", False)
    assert refusal.detail == "rule=r: why"
    assert refusal_for(Decision(outcome=Outcome.ALLOW, reason="ok", rule="r"), SPEC) is None


def test_the_audit_text_of_a_decision_names_rule_target_and_approvers() -> None:
    decision = Decision(
        outcome=Outcome.APPROVE,
        reason="big",
        rule="r",
        resource_key="order:o1",
        approval=_approval(2),
    )
    assert describe(decision) == "rule=r: big; resource=order:o1; approvers=2 with x.approve"


@pytest.mark.anyio
async def test_a_stricter_pattern_rule_is_tried_before_a_tools_own_rules() -> None:
    engine = PolicyEngine(
        [
            _rule("own", Outcome.CONFIRM, tool="pay.refund"),
            _rule("freeze", Outcome.DENY, tool="pay.*", when=lambda f: f.arguments["frozen"]),
        ],
    )
    assert [r.name for r in engine.rules_for("pay.refund")] == ["freeze", "own"]
    assert (await _decide(engine, {"frozen": True}, action="pay.refund")).rule == "freeze"
    assert (await _decide(engine, {"frozen": False}, action="pay.refund")).rule == "own"


def test_remembered_rule_lookups_stay_bounded_whatever_names_are_asked_for() -> None:
    engine = PolicyEngine([_rule("any", Outcome.ALLOW, tool="*")])
    for index in range(5_000):
        assert [r.name for r in engine.rules_for(f"t{index}")] == ["any"]
    assert len(engine._by_tool) <= 4_096
