"""Probing which ids exist through a tool the caller may not use at all.

A caller without a tool's permission sends ids that exist in its tenant, exist in
another tenant, are restricted, or exist nowhere. Every answer is the same
PERMISSION_DENIED, word for word, and the SQL log proves that no business validator
(and no policy resolver) read anything. A caller who holds the permission still gets
NOT_FOUND from the business rules and a resource-level PERMISSION_DENIED from the
policy, as before.
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
from examples.payments import PaymentsApp
from examples.payments import build_app as build_payments

from handrail import Envelope, ErrorCode, Gate, Principal, Status, ToolCall
from handrail.authz.policy import Outcome, PolicyEngine, Resolved, Rule, all_of, lacks
from handrail.testing import FixedClock, MemoryAuditSink, sequential_ids

Statements = list[tuple[str, tuple[Any, ...]]]

OWN_ISBN = "9780141439518"  # acme, shelf A-12
HISTORY_ISBN = "9780141439976"  # acme, shelf H-07: staff only, by the policy below
FOREIGN_ISBN = "9780142437247"  # globex
NOWHERE_ISBN = "9780000000002"  # no tenant
PROBED_ISBNS = (OWN_ISBN, HISTORY_ISBN, FOREIGN_ISBN, NOWHERE_ISBN)

# A clerk of acme who may read orders but not the inventory.
CLERK = Principal(user_id="bob", tenant_id="acme", permissions=frozenset({"orders.read"}))
STOCKIST = Principal(user_id="sue", tenant_id="acme", permissions=frozenset({"inventory.read"}))


@pytest.fixture
def bookstore(tmp_path: Path) -> Iterator[BookstoreApp]:
    app = build_bookstore(database=tmp_path / "bookstore.db", clock=FixedClock())
    app.database.reset()
    yield app
    app.database.close()


@pytest.fixture
def payments(tmp_path: Path) -> Iterator[PaymentsApp]:
    app = build_payments(database=tmp_path / "payments.db", clock=FixedClock())
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


def _history_policy(app: BookstoreApp) -> PolicyEngine:
    """A resource rule on top of the bookstore: the history shelves are staff only."""

    def stock(principal: Principal, arguments: Any) -> Resolved | None:
        found = app.database.for_tenant(principal.tenant_id).stock(arguments.isbn)
        return None if found is None else Resolved(key=f"book:{found['isbn']}", value=found)

    history = Rule(
        name="history-staff-only",
        tool="bookstore.check_inventory",
        outcome=Outcome.DENY,
        reason="the history shelves are for staff",
        when=all_of(lambda facts: facts.resource["shelf"].startswith("H-"), lacks("staff")),
    )
    return PolicyEngine([history], resolvers={"bookstore.check_inventory": stock})


def _bookstore_gate(app: BookstoreApp, audit: MemoryAuditSink) -> Gate:
    return Gate(
        app.registry,
        audit=audit,
        clock=app.clock,
        new_id=sequential_ids(),
        policy=_history_policy(app),
    )


def _probe(isbn: str) -> ToolCall:
    # One call id for every probe: whatever differs between answers is then the leak.
    return ToolCall(
        id="probe", name="bookstore.check_inventory", arguments=json.dumps({"isbn": isbn})
    )


def _trail(audit: MemoryAuditSink) -> list[tuple[str, str, str | None, str | None]]:
    events = audit.for_call("probe")
    audit.events.clear()
    return [(e.stage, e.decision, e.code, e.detail) for e in events]


def _indistinguishable(envelopes: Sequence[Envelope]) -> None:
    first = envelopes[0]
    for other in envelopes[1:]:
        assert (other.error_type, other.summary, other.data, other.retryable) == (
            first.error_type,
            first.summary,
            first.data,
            first.retryable,
        )
        assert other.to_model_dict() == first.to_model_dict()
        assert other == first


@pytest.mark.invariant(2)
def test_without_the_permission_existing_and_missing_ids_get_the_same_refusal_and_no_query(
    bookstore: BookstoreApp,
) -> None:
    audit = MemoryAuditSink()
    gate = _bookstore_gate(bookstore, audit)
    statements = _watch(bookstore.database.engine)
    envelopes: list[Envelope] = []
    trails = []
    for isbn in PROBED_ISBNS:
        envelopes.append(gate.handle_sync(_probe(isbn), CLERK))
        trails.append(_trail(audit))
    for isbn in PROBED_ISBNS:
        [batched] = gate.handle_batch_sync([_probe(isbn)], CLERK)
        envelopes.append(batched)
        trails.append(_trail(audit))
    assert envelopes[0].error_type is ErrorCode.PERMISSION_DENIED
    assert envelopes[0].retryable is False
    assert envelopes[0].data is None
    _indistinguishable(envelopes)
    # No business validator and no resolver ran: not one statement reached the database.
    assert statements == []
    assert all(trail == trails[0] for trail in trails)
    assert [(stage, decision) for stage, decision, _, _ in trails[0]] == [
        ("lookup", "pass"),
        ("syntax", "pass"),
        ("schema", "pass"),
        ("permission", "refused"),
    ]


def test_with_the_permission_missing_ids_are_not_found_and_a_restricted_one_is_denied(
    bookstore: BookstoreApp,
) -> None:
    audit = MemoryAuditSink()
    gate = _bookstore_gate(bookstore, audit)
    own = gate.handle_sync(_probe(OWN_ISBN), STOCKIST)
    _trail(audit)
    assert own.status is Status.OK
    assert own.data["shelf"] == "A-12"

    foreign = gate.handle_sync(_probe(FOREIGN_ISBN), STOCKIST)
    foreign_trail = _trail(audit)
    missing = gate.handle_sync(_probe(NOWHERE_ISBN), STOCKIST)
    missing_trail = _trail(audit)
    assert foreign.error_type is ErrorCode.NOT_FOUND
    # Another tenant's book reads exactly like one that exists nowhere.
    _indistinguishable([foreign, missing])
    assert foreign_trail[-2:] == missing_trail[-2:]
    assert [(stage, decision) for stage, decision, _, _ in foreign_trail[-2:]] == [
        ("permission", "pass"),
        ("business", "refused"),
    ]

    restricted = gate.handle_sync(_probe(HISTORY_ISBN), STOCKIST)
    restricted_trail = _trail(audit)
    assert restricted.error_type is ErrorCode.PERMISSION_DENIED
    assert restricted.summary != foreign.summary
    assert [(stage, decision) for stage, decision, _, _ in restricted_trail[-3:]] == [
        ("permission", "pass"),
        ("business", "pass"),
        ("authorization", "refused"),
    ]
    assert restricted_trail[-1][3] == (
        "rule=history-staff-only: the history shelves are for staff; resource=book:" + HISTORY_ISBN
    )


def test_a_tool_not_shown_to_the_caller_reads_exactly_like_a_name_that_exists_nowhere(
    bookstore: BookstoreApp,
) -> None:
    audit = MemoryAuditSink()
    gate = _bookstore_gate(bookstore, audit)
    statements = _watch(bookstore.database.engine)
    shown = bookstore.registry.exposure(CLERK)
    assert "bookstore.check_inventory" not in shown.names
    hidden = gate.handle_sync(_probe(OWN_ISBN), CLERK, exposure=shown)
    hidden_trail = _trail(audit)
    nowhere = ToolCall(id="probe", name="bookstore.check_stock", arguments={"isbn": OWN_ISBN})
    unknown = gate.handle_sync(nowhere, CLERK, exposure=shown)
    unknown_trail = _trail(audit)
    assert hidden.error_type is unknown.error_type is ErrorCode.UNKNOWN_TOOL
    # Only the name the model itself sent differs; not even a schema version is shown.
    assert hidden.to_model_dict() == unknown.to_model_dict()
    assert hidden.schema_version is None
    assert [row[:3] for row in hidden_trail] == [row[:3] for row in unknown_trail]
    assert statements == []


ORDER_IDS = ("ORD-1001", "ORD-1003", "ORD-2001", "ORD-9999")  # own, restricted, foreign, none


def test_without_the_permission_the_policy_resolvers_load_nothing_either(
    payments: PaymentsApp,
) -> None:
    audit = MemoryAuditSink()
    gate = payments.gate(audit=audit, new_id=sequential_ids())
    statements = _watch(payments.database.engine)
    nobody = Principal(user_id="bob", tenant_id="acme", permissions=frozenset({"customers.export"}))
    reader = Principal(user_id="bob", tenant_id="acme", permissions=frozenset({"order.read"}))

    def get(order_id: str, who: Principal) -> Envelope:
        call = ToolCall(id="probe", name="payments.get_order", arguments={"order_id": order_id})
        return gate.handle_sync(call, who)

    refused = [get(order_id, nobody) for order_id in ORDER_IDS]
    assert refused[0].error_type is ErrorCode.PERMISSION_DENIED
    _indistinguishable(refused)
    assert statements == []
    assert {e.stage for e in audit.events if e.decision == "refused"} == {"permission"}

    own, restricted, foreign, missing = (get(order_id, reader) for order_id in ORDER_IDS)
    assert own.status is Status.OK
    assert restricted.error_type is ErrorCode.PERMISSION_DENIED
    assert foreign.error_type is ErrorCode.NOT_FOUND
    _indistinguishable([foreign, missing])
    assert statements != []
