"""Reaching another tenant's data, or claiming someone else's identity, through both example apps.

Every tool of the bookstore and of the payments app is called with identifiers that
belong to the other tenant. Each call is refused (or finds nothing), and the SQL log
proves that nothing was read from the other tenant: every statement carries the
caller's tenant as a parameter and none carries the other's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from examples.bookstore import BookstoreApp
from examples.bookstore import build_app as build_bookstore
from examples.payments import PaymentsApp, customer_ids
from examples.payments import build_app as build_payments

from handrail import Envelope, ErrorCode, Gate, Principal, Status, ToolCall
from handrail.authz.guard import ConversationGuard
from handrail.testing import FixedClock, MemoryAuditSink, sequential_ids

Statements = list[tuple[str, tuple[Any, ...]]]
OTHER = {"acme": "globex", "globex": "acme"}

PAYMENTS_STAFF = frozenset(
    {
        "order.read",
        "order.refund",
        "refund.any",
        "orders.restricted",
        "customers.export",
        "customers.notify",
    },
)
BOOKSTORE_STAFF = frozenset({"inventory.read", "orders.read", "orders.admin"})


def _principal(tenant: str, permissions: frozenset[str]) -> Principal:
    return Principal(user_id=f"{tenant}-admin", tenant_id=tenant, permissions=permissions)


@pytest.fixture
def payments(tmp_path: Path) -> Iterator[PaymentsApp]:
    app = build_payments(database=tmp_path / "payments.db", clock=FixedClock())
    app.database.reset()
    yield app
    app.database.close()


@pytest.fixture
def bookstore(tmp_path: Path) -> Iterator[BookstoreApp]:
    app = build_bookstore(database=tmp_path / "bookstore.db", clock=FixedClock())
    app.database.reset()
    yield app
    app.database.close()


def _watch(engine: sa.Engine) -> Statements:
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

    sa.event.listen(engine, "before_cursor_execute", record)
    return seen


def _call(gate: Gate, principal: Principal, name: str, arguments: dict[str, Any]) -> Envelope:
    return gate.handle_sync(
        ToolCall(id="x1", name=name, arguments=json.dumps(arguments)), principal
    )


def _only_own_tenant(statements: Statements, tenant: str, tables: Sequence[str]) -> None:
    for statement, parameters in statements:
        assert any(f"{table}.tenant_id = ?" in statement for table in tables), statement
        assert tenant in parameters, (statement, parameters)
        assert OTHER[tenant] not in parameters, (statement, parameters)


# --- the cross-tenant matrix ------------------------------------------------------------------

PAYMENT_TABLES = ("customers", "orders", "order_events")
FOREIGN_ORDER = {"acme": "ORD-2001", "globex": "ORD-1001"}
FOREIGN_CUSTOMER = {"acme": "CUS-20001", "globex": "CUS-10001"}
OWN_CUSTOMER = {"acme": "CUS-10001", "globex": "CUS-20001"}


def _payments_matrix(tenant: str) -> list[tuple[str, dict[str, Any]]]:
    order, customer = FOREIGN_ORDER[tenant], FOREIGN_CUSTOMER[tenant]
    return [
        ("payments.get_order", {"order_id": order}),
        ("payments.order_timeline", {"order_id": order}),
        ("payments.refund_order", {"order_id": order, "amount_cents": 100}),
        ("payments.refund_order", {"order_id": order, "amount_cents": 5_000_000}),
        ("payments.notify_customers", {"recipients": [customer], "message": "hi"}),
        (
            "payments.notify_customers",
            {"recipients": [OWN_CUSTOMER[tenant], customer], "message": "hi"},
        ),
    ]


def _nowhere(arguments: dict[str, Any]) -> dict[str, Any]:
    """The same arguments with ids that exist in no tenant."""
    if "recipients" in arguments:
        return {**arguments, "recipients": ["CUS-99999"]}
    return {**arguments, "order_id": "ORD-99999"}


PAYMENT_CASES = [
    pytest.param(tenant, name, arguments, id=f"{tenant}-{name}-{index}")
    for tenant in ("acme", "globex")
    for index, (name, arguments) in enumerate(_payments_matrix(tenant))
]


@pytest.mark.invariant(1)
@pytest.mark.parametrize(("tenant", "name", "arguments"), PAYMENT_CASES)
def test_a_payments_tool_given_another_tenants_id_is_not_found_and_reads_nothing_of_it(
    payments: PaymentsApp,
    tenant: str,
    name: str,
    arguments: dict[str, Any],
) -> None:
    gate = payments.gate()
    caller = _principal(tenant, PAYMENTS_STAFF)
    statements = _watch(payments.database.engine)
    envelope = _call(gate, caller, name, arguments)
    assert envelope.error_type is ErrorCode.NOT_FOUND
    assert envelope.retryable is False
    assert statements
    _only_own_tenant(statements, tenant, PAYMENT_TABLES)
    # Another tenant's id reads exactly like an id that exists nowhere.
    assert (
        _call(gate, caller, name, _nowhere(arguments)).to_model_dict() == envelope.to_model_dict()
    )


@pytest.mark.invariant(1)
@pytest.mark.parametrize("tenant", ["acme", "globex"])
def test_a_payments_export_returns_only_the_callers_own_customers(
    payments: PaymentsApp,
    tenant: str,
) -> None:
    statements = _watch(payments.database.engine)
    envelope = _call(
        payments.gate(),
        _principal(tenant, PAYMENTS_STAFF),
        "payments.export_customers",
        {"limit": 200},
    )
    assert envelope.status is Status.OK
    own = set(customer_ids(tenant))
    assert {row["customer_id"] for row in envelope.data} <= own
    assert len(envelope.data) == min(200, len(own))
    _only_own_tenant(statements, tenant, PAYMENT_TABLES)


BOOK_TABLES = ("books", "inventory", "orders")
FOREIGN_BOOK = {
    "acme": ("9780142437247", "Moby-Dick", "ORD-2001"),
    "globex": ("9780141439518", "Pride and Prejudice", "ORD-1001"),
}


def _bookstore_matrix(tenant: str) -> list[tuple[str, dict[str, Any], ErrorCode | None]]:
    isbn, title, order = FOREIGN_BOOK[tenant]
    return [
        ("bookstore.search_books", {"query": title, "limit": 20}, None),
        ("bookstore.check_inventory", {"isbn": isbn}, ErrorCode.NOT_FOUND),
        ("bookstore.order_status", {"order_id": order}, ErrorCode.NOT_FOUND),
    ]


BOOK_CASES = [
    pytest.param(tenant, name, arguments, code, id=f"{tenant}-{name}")
    for tenant in ("acme", "globex")
    for name, arguments, code in _bookstore_matrix(tenant)
]


@pytest.mark.invariant(1)
@pytest.mark.parametrize(("tenant", "name", "arguments", "code"), BOOK_CASES)
def test_a_bookstore_tool_given_another_tenants_id_finds_nothing_and_reads_nothing_of_it(
    bookstore: BookstoreApp,
    tenant: str,
    name: str,
    arguments: dict[str, Any],
    code: ErrorCode | None,
) -> None:
    statements = _watch(bookstore.database.engine)
    envelope = _call(bookstore.gate(), _principal(tenant, BOOKSTORE_STAFF), name, arguments)
    assert envelope.error_type is code
    if code is None:
        assert envelope.status is Status.EMPTY
    assert statements
    _only_own_tenant(statements, tenant, BOOK_TABLES)


@pytest.mark.invariant(9)
@pytest.mark.parametrize("tenant", ["acme", "globex"])
def test_the_forbidden_bookstore_tool_is_unknown_and_issues_no_sql(
    bookstore: BookstoreApp,
    tenant: str,
) -> None:
    statements = _watch(bookstore.database.engine)
    caller = _principal(tenant, BOOKSTORE_STAFF)
    envelope = _call(bookstore.gate(), caller, "bookstore.delete_all_orders", {})
    assert envelope.error_type is ErrorCode.UNKNOWN_TOOL
    assert statements == []


# --- identity claimed by the model ------------------------------------------------------------

IDENTITY_FIELDS = ("tenant_id", "user_id", "owner_id", "owner", "principal", "acting_as")
VALID_PAYMENTS: dict[str, dict[str, Any]] = {
    "payments.get_order": {"order_id": "ORD-1001"},
    "payments.order_timeline": {"order_id": "ORD-1001"},
    "payments.refund_order": {"order_id": "ORD-1001", "amount_cents": 100},
    "payments.export_customers": {"limit": 10},
    "payments.notify_customers": {"recipients": ["CUS-10001"], "message": "hi"},
}


@pytest.mark.invariant(1)
@pytest.mark.parametrize("field", IDENTITY_FIELDS)
@pytest.mark.parametrize("name", sorted(VALID_PAYMENTS))
def test_an_identity_field_from_the_model_is_refused_before_any_query(
    payments: PaymentsApp,
    name: str,
    field: str,
) -> None:
    statements = _watch(payments.database.engine)
    caller = _principal("globex", PAYMENTS_STAFF)
    arguments = {**VALID_PAYMENTS[name], field: "acme" if field == "tenant_id" else "alice"}
    envelope = _call(payments.gate(), caller, name, arguments)
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert set(envelope.field_errors) == {f"$.{field}"}
    assert statements == []


@pytest.mark.invariant(1)
def test_a_model_claiming_ownership_in_free_text_still_meets_the_owner_rule(
    payments: PaymentsApp,
) -> None:
    bob = Principal(user_id="bob", tenant_id="acme", permissions=frozenset({"order.refund"}))
    envelope = _call(
        payments.gate(),
        bob,
        "payments.refund_order",
        {"order_id": "ORD-1001", "amount_cents": 100, "reason": "owner_id=bob; I own it"},
    )
    assert envelope.error_type is ErrorCode.PERMISSION_DENIED


# --- every refusal leaves an audit row --------------------------------------------------------


def test_every_kind_of_refusal_leaves_an_audit_row_naming_why(payments: PaymentsApp) -> None:
    audit = MemoryAuditSink()
    gate = payments.gate(audit=audit, new_id=sequential_ids(), guard=ConversationGuard())
    alice = Principal(
        user_id="alice", tenant_id="acme", permissions=PAYMENTS_STAFF - {"refund.any"}
    )
    bob = Principal(
        user_id="bob",
        tenant_id="acme",
        permissions=frozenset({"order.read", "order.refund"}),
    )
    reader = Principal(user_id="rita", tenant_id="acme", permissions=frozenset({"order.read"}))
    refund = "refund_order"
    auth = "authorization"
    denied = ErrorCode.PERMISSION_DENIED
    script: list[tuple[str, Principal, str, dict[str, Any], ErrorCode, str, str]] = [
        (
            "a",
            alice,
            refund,
            {"order_id": "ORD-1001", "amount_cents": 100},
            ErrorCode.NEEDS_CONFIRMATION,
            auth,
            "rule=refund-up-to-100",
        ),
        (
            "b",
            alice,
            refund,
            {"order_id": "ORD-1002", "amount_cents": 10_001},
            ErrorCode.NEEDS_APPROVAL,
            auth,
            "rule=refund-over-100",
        ),
        (
            "c",
            alice,
            "get_order",
            {"order_id": "ORD-2001"},
            ErrorCode.NOT_FOUND,
            auth,
            "rule=resolve:payments.get_order",
        ),
        (
            "d",
            reader,
            refund,
            {"order_id": "ORD-1001", "amount_cents": 1},
            denied,
            "permission",
            "missing permissions: order.refund",
        ),
        (
            "e",
            bob,
            refund,
            {"order_id": "ORD-1001", "amount_cents": 1},
            denied,
            auth,
            "rule=refund-not-owner",
        ),
        (
            "f",
            bob,
            "get_order",
            {"order_id": "ORD-1003"},
            denied,
            auth,
            "rule=order-read-restricted",
        ),
        ("g", bob, "order_timeline", {"order_id": "ORD-1003"}, denied, "guard", "bypass: order:"),
        (
            "h",
            bob,
            "get_order",
            {"order_id": "ORD-1004"},
            ErrorCode.BUDGET_EXHAUSTED,
            "guard",
            "breaker: 3 denials",
        ),
    ]
    for call_id, who, name, arguments, code, stage, detail in script:
        call = ToolCall(id=call_id, name=f"payments.{name}", arguments=arguments)
        conversation = "conv-bob" if who is bob else "conv-other"
        envelope = gate.handle_sync(call, who, conversation=conversation)
        assert envelope.error_type is code, call_id
        assert envelope.retryable is False
        refused = [e for e in audit.for_call(call_id) if e.decision == "refused"]
        assert len(refused) == 1, call_id
        row = refused[0]
        assert (row.stage, row.code) == (stage, code), call_id
        assert row.detail is not None
        assert row.detail.startswith(detail), (call_id, row.detail)
        assert (row.tenant_id, row.user_id, row.tool) == ("acme", who.user_id, f"payments.{name}")
    tripped = [e for e in audit.events if e.decision == "tripped"]
    assert [(e.tool_call_id, e.stage, e.code) for e in tripped] == [
        ("g", "guard", ErrorCode.BUDGET_EXHAUSTED),
    ]
