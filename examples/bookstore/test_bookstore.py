"""The bookstore's tools through a Gate: tenant isolation down to the SQL it issues."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from examples.bookstore import BookstoreApp, build_app
from handrail import Envelope, ErrorCode, Gate, Principal, Status, ToolCall
from handrail.testing import FixedClock, MemoryAuditSink, sequential_ids

ACME = Principal(
    user_id="alice",
    tenant_id="acme",
    permissions=frozenset({"inventory.read", "orders.read"}),
)
GLOBEX = Principal(
    user_id="gina",
    tenant_id="globex",
    permissions=frozenset({"inventory.read", "orders.read"}),
)
ACME_CLERK = Principal(user_id="bob", tenant_id="acme", permissions=frozenset({"inventory.read"}))
GLOBEX_ISBN = "9780142437247"
ACME_ISBN = "9780141439518"
TABLES = ("books", "inventory", "orders")


@pytest.fixture
def app(tmp_path: Path) -> Iterator[BookstoreApp]:
    built = build_app(database=tmp_path / "shop.db", clock=FixedClock())
    built.database.reset()
    yield built
    built.database.close()


@pytest.fixture
def audit() -> MemoryAuditSink:
    return MemoryAuditSink()


@pytest.fixture
def gate(app: BookstoreApp, audit: MemoryAuditSink) -> Gate:
    return app.gate(audit=audit, new_id=sequential_ids("ev"))


@pytest.fixture
def statements(app: BookstoreApp) -> Iterator[list[tuple[str, tuple[Any, ...]]]]:
    """Every SQL statement the bookstore issues from now on, with its parameters."""
    seen: list[tuple[str, tuple[Any, ...]]] = []

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


def call(gate: Gate, principal: Principal, name: str, **arguments: object) -> Envelope:
    tool_call = ToolCall(id="c1", name=f"bookstore.{name}", arguments=json.dumps(arguments))
    return gate.handle_sync(tool_call, principal)


def test_search_finds_only_books_of_the_callers_tenant(gate: Gate) -> None:
    acme = call(gate, ACME, "search_books", query="darwin")
    globex = call(gate, GLOBEX, "search_books", query="darwin")
    assert [b["title"] for b in acme.data] == ["Origin of Species"]
    assert [b["title"] for b in globex.data] == ["Voyage of the Beagle"]


def test_search_filters_narrow_by_genre_and_stock(gate: Gate) -> None:
    fiction = call(gate, ACME, "search_books", query="e", limit=20, filters={"genre": "fiction"})
    in_stock = call(
        gate,
        ACME,
        "search_books",
        query="e",
        limit=20,
        filters={"genre": "fiction", "in_stock": True},
    )
    assert {b["genre"] for b in fiction.data} == {"fiction"}
    assert "The Time Machine" in [b["title"] for b in fiction.data]
    assert "The Time Machine" not in [b["title"] for b in in_stock.data]
    assert all(b["on_hand"] > 0 for b in in_stock.data)


def test_search_treats_like_wildcards_as_plain_text(gate: Gate) -> None:
    envelope = call(gate, ACME, "search_books", query="%")
    assert envelope.status is Status.EMPTY


def test_search_limit_is_bounded_by_the_schema(gate: Gate) -> None:
    envelope = call(gate, ACME, "search_books", query="a", limit=500)
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert set(envelope.field_errors) == {"$.limit"}


def test_check_inventory_of_an_own_book_returns_its_stock(gate: Gate) -> None:
    envelope = call(gate, ACME, "check_inventory", isbn=ACME_ISBN)
    assert envelope.status is Status.OK
    assert envelope.data == {
        "isbn": ACME_ISBN,
        "title": "Pride and Prejudice",
        "on_hand": 4,
        "shelf": "A-12",
    }


@pytest.mark.invariant(1)
def test_check_inventory_of_another_tenants_isbn_is_not_found(
    gate: Gate,
    audit: MemoryAuditSink,
) -> None:
    envelope = call(gate, ACME, "check_inventory", isbn=GLOBEX_ISBN)
    assert envelope.error_type is ErrorCode.NOT_FOUND
    assert audit.for_call("c1")[-1].stage == "business"


def test_check_inventory_with_a_malformed_isbn_names_the_field(gate: Gate) -> None:
    envelope = call(gate, ACME, "check_inventory", isbn="978-0-14-143951-8")
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert set(envelope.field_errors) == {"$.isbn"}


def test_order_status_of_an_own_order_returns_it(gate: Gate) -> None:
    envelope = call(gate, ACME, "order_status", order_id="ORD-1001")
    assert envelope.status is Status.OK
    assert envelope.data["status"] == "shipped"


@pytest.mark.invariant(1)
def test_order_status_of_another_tenants_order_looks_exactly_like_a_missing_one(
    gate: Gate,
) -> None:
    foreign = call(gate, ACME, "order_status", order_id="ORD-2001")
    missing = call(gate, ACME, "order_status", order_id="ORD-9999")
    assert foreign.error_type is ErrorCode.NOT_FOUND
    assert foreign.to_model_dict() == missing.to_model_dict()


@pytest.mark.invariant(1)
def test_a_tenant_id_argument_from_the_model_is_refused_as_invalid(gate: Gate) -> None:
    envelope = call(gate, ACME, "order_status", order_id="ORD-2001", tenant_id="globex")
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert set(envelope.field_errors) == {"$.tenant_id"}


def test_order_status_without_orders_read_is_denied_before_any_order_query(
    gate: Gate,
    statements: list[tuple[str, tuple[Any, ...]]],
) -> None:
    envelope = call(gate, ACME_CLERK, "order_status", order_id="ORD-1001")
    assert envelope.error_type is ErrorCode.PERMISSION_DENIED
    assert statements == []


@pytest.mark.invariant(9)
def test_the_forbidden_tool_is_unknown_to_everyone_and_deletes_nothing(
    app: BookstoreApp,
    gate: Gate,
) -> None:
    everything = Principal(
        user_id="root",
        tenant_id="acme",
        permissions=frozenset({"inventory.read", "orders.read", "orders.admin"}),
    )
    envelope = call(gate, everything, "delete_all_orders")
    assert envelope.error_type is ErrorCode.UNKNOWN_TOOL
    assert "bookstore.delete_all_orders" in app.registry
    assert "bookstore.delete_all_orders" not in app.exposed_names(everything)
    assert app.database.for_tenant("acme").count_orders() == 2


CALLS: list[tuple[str, dict[str, object]]] = [
    ("search_books", {"query": "the", "limit": 20}),
    ("search_books", {"query": "a", "filters": {"genre": "science", "in_stock": True}}),
    ("check_inventory", {"isbn": ACME_ISBN}),
    ("check_inventory", {"isbn": GLOBEX_ISBN}),
    ("order_status", {"order_id": "ORD-1001"}),
    ("order_status", {"order_id": "ORD-2001"}),
]


@pytest.mark.invariant(1)
@pytest.mark.parametrize("principal", [ACME, GLOBEX], ids=["acme", "globex"])
@pytest.mark.parametrize(("tool", "arguments"), CALLS)
def test_every_query_is_filtered_by_the_callers_tenant_in_sql(
    gate: Gate,
    statements: list[tuple[str, tuple[Any, ...]]],
    principal: Principal,
    tool: str,
    arguments: dict[str, object],
) -> None:
    envelope = call(gate, principal, tool, **arguments)
    assert envelope.error_type in {None, ErrorCode.NOT_FOUND}
    other = "globex" if principal.tenant_id == "acme" else "acme"
    assert statements
    for statement, parameters in statements:
        assert any(f"{table}.tenant_id = ?" in statement for table in TABLES), statement
        assert principal.tenant_id in parameters
        assert other not in parameters
