"""The payments app through a Gate: argument-dependent risk at its boundaries, ownership, scope."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import sqlalchemy as sa

from examples.payments import PaymentsApp, build_app, customer_ids
from handrail import Envelope, ErrorCode, Gate, Principal, Status, ToolCall
from handrail.authz.guard import ConversationGuard
from handrail.authz.policy import Outcome
from handrail.testing import FixedClock, MemoryAuditSink, sequential_ids

STAFF = frozenset(
    {"order.read", "order.refund", "customers.export", "customers.notify"},
)
ALICE = Principal(user_id="alice", tenant_id="acme", permissions=STAFF)
BOB = Principal(user_id="bob", tenant_id="acme", permissions=STAFF)
CAROL = Principal(user_id="carol", tenant_id="acme", permissions=STAFF | {"refund.any"})
READER = Principal(user_id="rita", tenant_id="acme", permissions=frozenset({"order.read"}))
EU_ALICE = Principal(
    user_id="alice",
    tenant_id="acme",
    permissions=STAFF,
    data_scope={"region": "eu"},
)
Statements = list[tuple[str, tuple[Any, ...]]]


@pytest.fixture
def app(tmp_path: Path) -> Iterator[PaymentsApp]:
    built = build_app(database=tmp_path / "payments.db", clock=FixedClock())
    built.database.reset()
    yield built
    built.database.close()


@pytest.fixture
def audit() -> MemoryAuditSink:
    return MemoryAuditSink()


@pytest.fixture
def gate(app: PaymentsApp, audit: MemoryAuditSink) -> Gate:
    return app.gate(audit=audit, new_id=sequential_ids("ev"), guard=ConversationGuard())


@pytest.fixture
def statements(app: PaymentsApp) -> Iterator[Statements]:
    """Every SQL statement the app issues from now on, with its parameters."""
    seen: Statements = []

    def record(
        _connection: object,
        _cursor: object,
        statement: str,
        parameters: Sequence[Any],
        _context: object,
        _many: bool,
    ) -> None:
        seen.append((statement, tuple(parameters)))

    sa.event.listen(app.database.engine, "before_cursor_execute", record)
    yield seen
    sa.event.remove(app.database.engine, "before_cursor_execute", record)


def call(
    gate: Gate,
    principal: Principal,
    name: str,
    *,
    conversation: str | None = None,
    **arguments: object,
) -> Envelope:
    tool_call = ToolCall(id="c1", name=f"payments.{name}", arguments=json.dumps(arguments))
    return gate.handle_sync(tool_call, principal, conversation=conversation)


def authorization_detail(audit: MemoryAuditSink) -> str:
    event = [e for e in audit.events if e.stage == "authorization"][-1]
    assert event.detail is not None
    return event.detail


# --- refunds ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("amount_cents", "expected"),
    [
        (1, (ErrorCode.NEEDS_CONFIRMATION, "refund-up-to-100", None)),
        (10_000, (ErrorCode.NEEDS_CONFIRMATION, "refund-up-to-100", None)),
        (10_001, (ErrorCode.NEEDS_APPROVAL, "refund-over-100", 1)),
        (1_000_000, (ErrorCode.NEEDS_APPROVAL, "refund-over-100", 1)),
        (1_000_001, (ErrorCode.NEEDS_APPROVAL, "refund-over-10000", 2)),
    ],
)
def test_a_refund_by_the_owner_needs_more_agreement_as_the_amount_grows(
    gate: Gate,
    audit: MemoryAuditSink,
    amount_cents: int,
    expected: tuple[ErrorCode, str, int | None],
) -> None:
    code, rule, approvers = expected
    envelope = call(gate, ALICE, "refund_order", order_id="ORD-1002", amount_cents=amount_cents)
    assert envelope.error_type is code
    assert envelope.retryable is False
    detail = authorization_detail(audit)
    assert detail.startswith(f"rule={rule}: ")
    assert "resource=order:ORD-1002" in detail
    if approvers is None:
        assert "approvers=" not in detail
    else:
        assert detail.endswith(f"; approvers={approvers} with refund.approve")


@pytest.mark.anyio
async def test_the_refund_decision_carries_who_must_approve(app: PaymentsApp) -> None:
    arguments = SimpleNamespace(order_id="ORD-1002", amount_cents=1_000_001)
    decision = await app.policy.decide(ALICE, "payments.refund_order", arguments, {})
    assert decision.outcome is Outcome.APPROVE
    assert decision.approval is not None
    assert decision.approval.approver_permission == "refund.approve"
    assert decision.approval.distinct_approvers == 2


@pytest.mark.invariant(1)
@pytest.mark.parametrize("amount_cents", [5, 20_000, 2_000_000])
def test_a_refund_by_someone_who_does_not_own_the_order_is_denied_whatever_the_amount(
    gate: Gate,
    audit: MemoryAuditSink,
    amount_cents: int,
) -> None:
    envelope = call(
        gate,
        BOB,
        "refund_order",
        order_id="ORD-1002",
        amount_cents=amount_cents,
        reason="I am alice, the owner of this order",
    )
    assert envelope.error_type is ErrorCode.PERMISSION_DENIED
    assert envelope.retryable is False
    # DENY beats the APPROVE rules that hold for the same call.
    assert authorization_detail(audit).startswith("rule=refund-not-owner: ")


def test_refund_any_lets_a_non_owner_refund_under_the_same_amount_rules(gate: Gate) -> None:
    small = call(gate, CAROL, "refund_order", order_id="ORD-1001", amount_cents=5_000)
    big = call(gate, CAROL, "refund_order", order_id="ORD-1001", amount_cents=50_000)
    assert small.error_type is ErrorCode.NEEDS_CONFIRMATION
    assert big.error_type is ErrorCode.NEEDS_APPROVAL


def test_a_restricted_order_cannot_be_refunded_even_by_its_owner(
    gate: Gate,
    audit: MemoryAuditSink,
) -> None:
    envelope = call(gate, BOB, "refund_order", order_id="ORD-1003", amount_cents=100)
    assert envelope.error_type is ErrorCode.PERMISSION_DENIED
    assert authorization_detail(audit).startswith("rule=refund-restricted-order: ")


@pytest.mark.invariant(2)
def test_read_permission_never_satisfies_a_refund_and_nothing_is_queried(
    gate: Gate,
    audit: MemoryAuditSink,
    statements: Statements,
) -> None:
    envelope = call(gate, READER, "refund_order", order_id="ORD-1001", amount_cents=100)
    assert envelope.error_type is ErrorCode.PERMISSION_DENIED
    assert statements == []
    last = audit.events[-1]
    assert (last.stage, last.code) == ("permission", ErrorCode.PERMISSION_DENIED)
    assert last.detail == "missing permissions: order.refund"


# --- exports and notifications ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "code", "rule"),
    [
        ({"limit": 1_000}, None, "export-within-limit"),
        ({"limit": 1_001}, ErrorCode.NEEDS_APPROVAL, "export-over-1000-rows"),
        ({"limit": 100_000}, ErrorCode.NEEDS_APPROVAL, "export-over-1000-rows"),
        ({"limit": 100_000, "filters": {"segment": "vip"}}, None, "export-within-limit"),
    ],
)
def test_an_export_of_more_than_a_thousand_rows_needs_approval(
    gate: Gate,
    audit: MemoryAuditSink,
    arguments: dict[str, Any],
    code: ErrorCode | None,
    rule: str,
) -> None:
    envelope = call(gate, ALICE, "export_customers", **arguments)
    assert envelope.error_type is code
    assert authorization_detail(audit).startswith(f"rule={rule}: ")


def test_the_export_size_counts_only_rows_in_the_callers_scope(gate: Gate) -> None:
    envelope = call(gate, EU_ALICE, "export_customers", limit=1_001)
    assert envelope.error_type is None
    # 600 rows are in scope; the model sees as many as fit its budget, and the count.
    [cut] = envelope.omitted
    assert (cut.path, cut.unit, cut.kept, cut.total) == ("$", "items", len(envelope.data), 600)
    small = call(gate, EU_ALICE, "export_customers", limit=3)
    assert [row["customer_id"] for row in small.data] == ["CUS-10001", "CUS-10003", "CUS-10005"]


@pytest.mark.parametrize(
    ("recipients", "code", "rule"),
    [
        (customer_ids("acme")[:100], ErrorCode.NEEDS_CONFIRMATION, "notify-confirm"),
        (customer_ids("acme")[:101], ErrorCode.PERMISSION_DENIED, "notify-over-100-recipients"),
        (customer_ids("acme")[:100] * 2, ErrorCode.NEEDS_CONFIRMATION, "notify-confirm"),
        (customer_ids("acme")[:1000], ErrorCode.PERMISSION_DENIED, "notify-over-100-recipients"),
    ],
    ids=["100", "101", "100-distinct-of-200", "1000"],
)
def test_a_message_to_more_than_a_hundred_customers_is_denied(
    gate: Gate,
    audit: MemoryAuditSink,
    recipients: list[str],
    code: ErrorCode,
    rule: str,
) -> None:
    envelope = call(gate, ALICE, "notify_customers", recipients=recipients, message="Hello")
    assert envelope.error_type is code
    assert authorization_detail(audit).startswith(f"rule={rule}: ")


# --- reads, scope and the guard ---------------------------------------------------------------


def test_an_order_outside_the_callers_region_is_not_found(gate: Gate) -> None:
    assert call(gate, EU_ALICE, "get_order", order_id="ORD-1001").status is Status.OK
    hidden = call(gate, EU_ALICE, "get_order", order_id="ORD-1002")
    missing = call(gate, EU_ALICE, "get_order", order_id="ORD-9999")
    assert hidden.error_type is ErrorCode.NOT_FOUND
    assert hidden.to_model_dict() == missing.to_model_dict()


def test_a_restricted_order_denied_to_get_order_stays_out_of_reach_of_order_timeline(
    gate: Gate,
    audit: MemoryAuditSink,
) -> None:
    denied = call(gate, BOB, "get_order", conversation="conv", order_id="ORD-1003")
    bypass = call(gate, BOB, "order_timeline", conversation="conv", order_id="ORD-1003")
    assert denied.error_type is ErrorCode.PERMISSION_DENIED
    assert bypass.error_type is ErrorCode.PERMISSION_DENIED
    last = audit.events[-1]
    assert (last.stage, last.decision, last.code) == ("guard", "refused", "PERMISSION_DENIED")
    assert last.detail is not None
    assert last.detail.startswith("bypass: order:ORD-1003 was denied to payments.get_order")
    # The rule set alone has the gap the guard closes.
    assert call(gate, BOB, "order_timeline", order_id="ORD-1003").status is Status.OK


def test_the_owner_reads_an_order_and_its_timeline(gate: Gate) -> None:
    order = call(gate, ALICE, "get_order", order_id="ORD-1001")
    timeline = call(gate, ALICE, "order_timeline", order_id="ORD-1001")
    assert order.data["amount_cents"] == 250_000
    assert isinstance(order.data["amount_cents"], int)
    assert [event["kind"] for event in timeline.data] == ["placed", "paid"]


# --- the ledger itself ------------------------------------------------------------------------


def test_a_refund_is_added_only_within_what_is_left_and_only_in_scope(app: PaymentsApp) -> None:
    ledger = app.database.for_principal(ALICE)
    after = ledger.refund("ORD-1004", 8_000)
    assert after is not None
    assert after["refunded_cents"] == 8_000
    assert ledger.refund("ORD-1004", 1) is None
    assert ledger.refund("ORD-2001", 1) is None
    assert app.database.for_principal(EU_ALICE).refund("ORD-1002", 1) is None
    globex = Principal(user_id="gina", tenant_id="globex")
    order = app.database.for_principal(globex).order("ORD-2001")
    assert order is not None
    assert order["refunded_cents"] == 0


def test_a_message_is_queued_only_for_customers_in_scope(app: PaymentsApp) -> None:
    ledger = app.database.for_principal(ALICE)
    assert ledger.notify(["CUS-10001", "CUS-20001", "CUS-10001"], "hi") == 1
    assert ledger.notify(["CUS-20001"], "hi") == 0


def test_every_write_tool_declares_its_confirmation_and_reads_need_read_permissions(
    app: PaymentsApp,
) -> None:
    specs = {spec.name: spec for spec in app.registry.specs()}
    assert sorted(specs) == [
        "payments.export_customers",
        "payments.get_order",
        "payments.notify_customers",
        "payments.order_timeline",
        "payments.refund_order",
    ]
    assert specs["payments.refund_order"].permissions == {"order.refund"}
    assert specs["payments.get_order"].permissions == {"order.read"}
    assert [s.name for s in app.registry.exposed(READER)] == [
        "payments.get_order",
        "payments.order_timeline",
    ]
