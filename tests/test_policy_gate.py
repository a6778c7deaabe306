"""PolicyEngine behind a Gate: codes the model sees, audit rows, permissions, ownership."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import pytest
from pydantic import Field

from handrail import (
    ConfirmationMode,
    ConfirmationPolicy,
    ErrorCode,
    Gate,
    Principal,
    Registry,
    RiskLevel,
    SideEffect,
    Status,
    Tool,
    ToolCall,
    ToolContext,
    tool,
)
from handrail.authz.policy import (
    Decision,
    Facts,
    Outcome,
    PolicyEngine,
    Resolved,
    Rule,
    is_owner,
    lacks,
)
from handrail.testing import FixedClock, MemoryAuditSink, sequential_ids

ORDERS: dict[tuple[str, str], dict[str, object]] = {
    ("t1", "o1"): {"order_id": "o1", "owner_id": "alice", "total": 500},
    ("t1", "o2"): {"order_id": "o2", "owner_id": "bob", "total": 900},
    ("t2", "o7"): {"order_id": "o7", "owner_id": "mallory", "total": 100},
}
ALICE = Principal(
    user_id="alice",
    tenant_id="t1",
    permissions=frozenset({"order.read", "order.refund", "report.read"}),
)
READER = Principal(user_id="rita", tenant_id="t1", permissions=frozenset({"order.read"}))


class Ran:
    def __init__(self) -> None:
        self.tools: list[str] = []
        self.loads: list[tuple[str, str]] = []


def _tools(ran: Ran) -> list[Tool]:
    @tool(risk=RiskLevel.L1_INTERNAL_READ, namespace="orders", permissions={"order.read"})
    def get(order_id: Annotated[str, Field(max_length=8)], ctx: ToolContext) -> dict[str, object]:
        """Read an order."""
        ran.tools.append("get")
        return ORDERS[ctx.principal.tenant_id, order_id]

    @tool(
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        namespace="orders",
        side_effect=SideEffect.LOCAL_WRITE,
        permissions={"order.refund"},
        confirmation=ConfirmationPolicy(mode=ConfirmationMode.CONFIRM),
    )
    def refund(order_id: Annotated[str, Field(max_length=8)], cents: int) -> None:
        """Refund an order."""
        ran.tools.append("refund")

    @tool(risk=RiskLevel.L1_INTERNAL_READ, namespace="reports", permissions={"report.read"})
    def export(rows: Annotated[int, Field(ge=1)]) -> int:
        """Export a report."""
        ran.tools.append("export")
        return rows

    def annotate(arguments: dict[str, Any], ctx: ToolContext) -> str:
        ran.tools.append("annotate")
        return "noted"

    annotate_tool = Tool.from_json_schema(
        name="orders.annotate",
        description="Annotate an order.",
        input_schema={
            "type": "object",
            "properties": {"order_id": {"type": "string"}, "owner": {"type": "string"}},
            "required": ["order_id"],
        },
        fn=annotate,
        risk=RiskLevel.L1_INTERNAL_READ,
        permissions={"order.read"},
    )
    return [get, refund, export, annotate_tool]


def _engine(ran: Ran, *rules: Rule) -> PolicyEngine:
    def load(principal: Principal, arguments: Any) -> Resolved | None:
        order_id = arguments["order_id"] if isinstance(arguments, dict) else arguments.order_id
        ran.loads.append((principal.tenant_id, order_id))
        found = ORDERS.get((principal.tenant_id, order_id))
        return None if found is None else Resolved(key=f"order:{order_id}", value=found)

    orders = dict.fromkeys(("orders.get", "orders.refund", "orders.annotate"), load)
    return PolicyEngine(rules, resolvers=orders)


REFUND_RULES = (
    Rule(
        name="refund-own",
        tool="orders.refund",
        outcome=Outcome.CONFIRM,
        reason="the owner confirms",
    ),
    Rule(
        name="refund-not-owner",
        tool="orders.refund",
        outcome=Outcome.DENY,
        reason="not the owner",
        when=lambda facts: not is_owner()(facts),
    ),
)


def _gate(ran: Ran, *rules: Rule) -> tuple[Gate, MemoryAuditSink]:
    registry = Registry()
    for item in _tools(ran):
        registry.register(item)
    audit = MemoryAuditSink()
    gate = Gate(
        registry,
        audit=audit,
        clock=FixedClock(),
        new_id=sequential_ids(),
        policy=_engine(ran, *rules),
    )
    return gate, audit


async def _call(gate: Gate, principal: Principal, name: str, **arguments: object) -> Any:
    return await gate.handle(ToolCall(id="c1", name=name, arguments=arguments), principal)


@pytest.mark.anyio
async def test_an_allowed_call_is_audited_with_the_rule_that_allowed_it() -> None:
    ran = Ran()
    gate, audit = _gate(ran)
    envelope = await _call(gate, ALICE, "orders.get", order_id="o1")
    assert envelope.status is Status.OK
    authorization = next(e for e in audit.events if e.stage == "authorization")
    assert authorization.decision == "pass"
    assert authorization.detail is not None
    assert authorization.detail.startswith("rule=default:read: ")
    assert authorization.detail.endswith("; resource=order:o1")


@pytest.mark.anyio
@pytest.mark.invariant(2)
async def test_a_confirm_decision_on_a_write_is_what_the_model_sees_not_risk_blocked() -> None:
    ran = Ran()
    gate, audit = _gate(ran, *REFUND_RULES)
    envelope = await _call(gate, ALICE, "orders.refund", order_id="o1", cents=5)
    assert envelope.error_type is ErrorCode.NEEDS_CONFIRMATION
    assert envelope.retryable is False
    assert ran.tools == []
    last = audit.events[-1]
    assert (last.stage, last.decision, last.code) == (
        "authorization",
        "refused",
        ErrorCode.NEEDS_CONFIRMATION,
    )
    assert last.detail == "rule=refund-own: the owner confirms; resource=order:o1"


@pytest.mark.anyio
async def test_an_allowed_write_still_stops_at_the_risk_stage_after_an_audited_allow() -> None:
    ran = Ran()
    allow = Rule(name="refund-ok", tool="orders.refund", outcome=Outcome.ALLOW, reason="fine")
    gate, audit = _gate(ran, allow)
    envelope = await _call(gate, ALICE, "orders.refund", order_id="o1", cents=5)
    assert envelope.error_type is ErrorCode.RISK_BLOCKED
    assert [(e.stage, e.decision) for e in audit.events[-2:]] == [
        ("authorization", "pass"),
        ("risk", "refused"),
    ]
    assert audit.events[-2].detail == "rule=refund-ok: fine; resource=order:o1"


@pytest.mark.anyio
async def test_a_write_without_any_rule_is_denied_by_default() -> None:
    ran = Ran()
    gate, audit = _gate(ran)
    envelope = await _call(gate, ALICE, "orders.refund", order_id="o1", cents=5)
    assert envelope.error_type is ErrorCode.PERMISSION_DENIED
    assert audit.events[-1].detail is not None
    assert audit.events[-1].detail.startswith("rule=default:write: ")


@pytest.mark.anyio
@pytest.mark.invariant(2)
async def test_read_permission_never_satisfies_a_write_and_nothing_is_loaded() -> None:
    ran = Ran()
    everything = Rule(name="allow-all", tool="orders.*", outcome=Outcome.ALLOW, reason="open")
    gate, audit = _gate(ran, everything)
    envelope = await _call(gate, READER, "orders.refund", order_id="o1", cents=5)
    assert envelope.error_type is ErrorCode.PERMISSION_DENIED
    assert envelope.retryable is False
    assert ran.loads == []
    assert ran.tools == []
    assert audit.events[-1].detail == "missing permissions: order.refund"
    read = await _call(gate, READER, "orders.get", order_id="o1")
    assert read.status is Status.OK


@pytest.mark.anyio
async def test_a_rule_can_require_more_permissions_than_the_tool_declares() -> None:
    ran = Ran()
    exporter = Rule(
        name="big-export-needs-report-export",
        tool="reports.export",
        outcome=Outcome.DENY,
        reason="more than 10 rows needs report.export",
        when=lambda facts: facts.arguments.rows > 10 and lacks("report.export")(facts),
    )
    gate, _ = _gate(ran, exporter)
    small = await _call(gate, ALICE, "reports.export", rows=10)
    big = await _call(gate, ALICE, "reports.export", rows=11)
    holder = Principal(
        user_id="eve",
        tenant_id="t1",
        permissions=frozenset({"report.read", "report.export"}),
    )
    allowed = await _call(gate, holder, "reports.export", rows=11)
    assert small.status is Status.OK
    assert big.error_type is ErrorCode.PERMISSION_DENIED
    assert allowed.status is Status.OK
    assert ran.tools == ["export", "export"]


@pytest.mark.anyio
@pytest.mark.invariant(1)
async def test_an_order_of_another_tenant_reads_exactly_like_a_missing_one() -> None:
    ran = Ran()
    gate, audit = _gate(ran)
    foreign = await _call(gate, ALICE, "orders.get", order_id="o7")
    missing = await _call(gate, ALICE, "orders.get", order_id="o9")
    assert foreign.error_type is ErrorCode.NOT_FOUND
    assert foreign.to_model_dict() == missing.to_model_dict()
    assert ran.loads == [("t1", "o7"), ("t1", "o9")]
    assert ran.tools == []
    refusals = [e for e in audit.events if e.decision == "refused"]
    assert [(e.stage, e.code) for e in refusals] == [("authorization", ErrorCode.NOT_FOUND)] * 2
    assert refusals[0].detail is not None
    assert refusals[0].detail.startswith("rule=resolve:orders.get: ")


@pytest.mark.anyio
@pytest.mark.invariant(1)
async def test_a_model_claiming_to_own_an_order_changes_nothing() -> None:
    ran = Ran()
    not_owner = Rule(
        name="annotate-own-only",
        tool="orders.annotate",
        outcome=Outcome.DENY,
        reason="only the owner annotates",
        when=lambda facts: not is_owner()(facts),
    )
    gate, _ = _gate(ran, not_owner)
    claimed = await _call(gate, ALICE, "orders.annotate", order_id="o2", owner="alice")
    own = await _call(gate, ALICE, "orders.annotate", order_id="o1", owner="bob")
    assert claimed.error_type is ErrorCode.PERMISSION_DENIED
    assert own.status is Status.OK
    assert ran.tools == ["annotate"]


@pytest.mark.anyio
async def test_a_condition_that_fails_refuses_the_call_and_audits_the_error() -> None:
    ran = Ran()

    def broken(facts: Facts) -> bool:
        raise KeyError("no such field")

    gate, audit = _gate(
        ran, Rule(name="b", tool="orders.get", outcome=Outcome.DENY, reason="r", when=broken)
    )
    envelope = await _call(gate, ALICE, "orders.get", order_id="o1")
    assert envelope.error_type is ErrorCode.FAILED_FINAL
    assert ran.tools == []
    assert (audit.events[-1].stage, audit.events[-1].decision) == ("gate", "error")


@pytest.mark.anyio
async def test_the_policy_is_told_the_call_risk_side_effect_and_conversation() -> None:
    seen: list[Mapping[str, object]] = []

    class Spy:
        async def decide(
            self,
            principal: Principal,
            action: str,
            resource: object,
            context: Mapping[str, object],
        ) -> Decision:
            seen.append(context)
            return Decision(outcome=Outcome.ALLOW, reason="spy", rule="spy")

    registry = Registry()
    for item in _tools(Ran()):
        registry.register(item)
    gate = Gate(registry, policy=Spy())
    await gate.handle(
        ToolCall(id="c9", name="orders.get", arguments={"order_id": "o1"}),
        ALICE,
        conversation="conv-1",
    )
    assert seen == [
        {
            "call_id": "c9",
            "risk": RiskLevel.L1_INTERNAL_READ,
            "side_effect": SideEffect.NONE,
            "conversation": "conv-1",
        },
    ]
