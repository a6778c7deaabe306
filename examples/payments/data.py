"""The payments app's data: customers, orders and order events of several tenants, one file.

Every query goes through a `Ledger`, which is bound to one tenant and one data scope
(an optional region) when it is made and puts both into the WHERE clause of each
statement. No query loads several tenants' rows and filters them in Python. Money is
an integer number of minor units (cents); there are no floats anywhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import sqlalchemy as sa

from handrail import Principal

__all__ = ["Ledger", "PaymentsDb", "Region", "Segment", "customer_ids"]

Segment = Literal["retail", "business", "vip"]
Region = Literal["eu", "us"]

_metadata = sa.MetaData()

customers = sa.Table(
    "customers",
    _metadata,
    sa.Column("tenant_id", sa.String(64), primary_key=True),
    sa.Column("customer_id", sa.String(16), primary_key=True),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("email", sa.String(200), nullable=False),
    sa.Column("region", sa.String(8), nullable=False),
    sa.Column("segment", sa.String(16), nullable=False),
)

orders = sa.Table(
    "orders",
    _metadata,
    sa.Column("tenant_id", sa.String(64), primary_key=True),
    sa.Column("order_id", sa.String(16), primary_key=True),
    sa.Column("customer_id", sa.String(16), nullable=False),
    sa.Column("owner_id", sa.String(64), nullable=False),
    sa.Column("region", sa.String(8), nullable=False),
    sa.Column("amount_cents", sa.BigInteger, nullable=False),
    sa.Column("refunded_cents", sa.BigInteger, nullable=False),
    sa.Column("currency", sa.String(3), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("restricted", sa.Boolean, nullable=False),
    sa.ForeignKeyConstraint(
        ["tenant_id", "customer_id"],
        ["customers.tenant_id", "customers.customer_id"],
    ),
)

order_events = sa.Table(
    "order_events",
    _metadata,
    sa.Column("tenant_id", sa.String(64), primary_key=True),
    sa.Column("order_id", sa.String(16), primary_key=True),
    sa.Column("seq", sa.Integer, primary_key=True),
    sa.Column("at", sa.String(20), nullable=False),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("note", sa.String(200), nullable=False),
    sa.ForeignKeyConstraint(["tenant_id", "order_id"], ["orders.tenant_id", "orders.order_id"]),
)

notifications = sa.Table(
    "notifications",
    _metadata,
    sa.Column("notification_id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("tenant_id", sa.String(64), nullable=False),
    sa.Column("customer_id", sa.String(16), nullable=False),
    sa.Column("message", sa.String(500), nullable=False),
)

# (tenant, first customer number, how many). Ids never repeat across tenants, so an id
# of one tenant is, for the other, an id that does not exist.
_CUSTOMER_BLOCKS = (("acme", 10_001, 1_200), ("globex", 20_001, 60))
_SEGMENTS: tuple[Segment, ...] = ("retail", "business", "retail", "retail", "vip")

# Each order: tenant, order id, customer, owner, region, amount in cents, status, restricted.
_ORDERS = (
    ("acme", "ORD-1001", "CUS-10001", "alice", "eu", 250_000, "paid", False),
    ("acme", "ORD-1002", "CUS-10002", "alice", "us", 5_000_000, "paid", False),
    ("acme", "ORD-1003", "CUS-10003", "bob", "eu", 12_000, "paid", True),
    ("acme", "ORD-1004", "CUS-10004", "bob", "us", 8_000, "paid", False),
    ("globex", "ORD-2001", "CUS-20001", "gina", "eu", 3_000_000, "paid", False),
    ("globex", "ORD-2002", "CUS-20002", "gina", "us", 45_000, "paid", True),
)


def customer_ids(tenant_id: str) -> list[str]:
    """The ids of a tenant's sample customers, in order."""
    return [
        f"CUS-{first + offset}"
        for tenant, first, count in _CUSTOMER_BLOCKS
        if tenant == tenant_id
        for offset in range(count)
    ]


@dataclass(frozen=True, kw_only=True, slots=True)
class Ledger:
    """The queries of one tenant and data scope; both fixed at construction.

    `region` of None means the whole tenant; otherwise every customer and order query
    is narrowed to that region as well.
    """

    engine: sa.Engine
    tenant_id: str
    region: str | None = None

    def order(self, order_id: str) -> dict[str, Any] | None:
        """One order in scope, or None (also when it belongs to someone else's scope)."""
        statement = sa.select(
            orders.c.order_id,
            orders.c.customer_id,
            orders.c.owner_id,
            orders.c.region,
            orders.c.amount_cents,
            orders.c.refunded_cents,
            orders.c.currency,
            orders.c.status,
            orders.c.restricted,
        ).where(*self._orders_in_scope(), orders.c.order_id == order_id)
        rows = self._all(statement)
        return rows[0] if rows else None

    def events(self, order_id: str) -> list[dict[str, Any]]:
        """The events of one order in scope, oldest first."""
        joined = order_events.join(
            orders,
            sa.and_(
                orders.c.tenant_id == order_events.c.tenant_id,
                orders.c.order_id == order_events.c.order_id,
            ),
        )
        statement = (
            sa.select(
                order_events.c.seq, order_events.c.at, order_events.c.kind, order_events.c.note
            )
            .select_from(joined)
            .where(
                order_events.c.tenant_id == self.tenant_id,
                *self._orders_in_scope(),
                order_events.c.order_id == order_id,
            )
            .order_by(order_events.c.seq)
        )
        return self._all(statement)

    def count_customers(self, *, segment: str | None, region: str | None) -> int:
        """How many customers in scope match the filter."""
        statement = (
            sa.select(sa.func.count())
            .select_from(customers)
            .where(*self._customers_matching(segment=segment, region=region))
        )
        with self.engine.connect() as connection:
            return int(connection.execute(statement).scalar_one())

    def customers(
        self,
        *,
        segment: str | None,
        region: str | None,
        limit: int,
    ) -> list[dict[str, Any]]:
        """Customers in scope matching the filter, by id, at most `limit`."""
        statement = (
            sa.select(customers.c.customer_id, customers.c.name, customers.c.segment)
            .where(*self._customers_matching(segment=segment, region=region))
            .order_by(customers.c.customer_id)
            .limit(limit)
        )
        return self._all(statement)

    def existing_customers(self, wanted: Iterable[str]) -> set[str]:
        """Which of `wanted` are customers in scope."""
        statement = sa.select(customers.c.customer_id).where(
            *self._customers_matching(segment=None, region=None),
            customers.c.customer_id.in_(sorted(set(wanted))),
        )
        return {row["customer_id"] for row in self._all(statement)}

    def refund(self, order_id: str, amount_cents: int) -> dict[str, Any] | None:
        """Add a refund if the order in scope has that much left; the order after, or None."""
        statement = (
            sa.update(orders)
            .where(
                *self._orders_in_scope(),
                orders.c.order_id == order_id,
                orders.c.refunded_cents + amount_cents <= orders.c.amount_cents,
            )
            .values(refunded_cents=orders.c.refunded_cents + amount_cents)
        )
        with self.engine.begin() as connection:
            changed = connection.execute(statement).rowcount
        return self.order(order_id) if changed else None

    def notify(self, recipients: Iterable[str], message: str) -> int:
        """Queue a message to customers in scope; returns how many were queued."""
        found = sorted(self.existing_customers(recipients))
        rows = [{"tenant_id": self.tenant_id, "customer_id": c, "message": message} for c in found]
        if rows:
            with self.engine.begin() as connection:
                connection.execute(notifications.insert(), rows)
        return len(rows)

    def _orders_in_scope(self) -> list[sa.ColumnElement[bool]]:
        clauses = [orders.c.tenant_id == self.tenant_id]
        if self.region is not None:
            clauses.append(orders.c.region == self.region)
        return clauses

    def _customers_matching(
        self,
        *,
        segment: str | None,
        region: str | None,
    ) -> list[sa.ColumnElement[bool]]:
        clauses = [customers.c.tenant_id == self.tenant_id]
        if self.region is not None:
            clauses.append(customers.c.region == self.region)
        if segment is not None:
            clauses.append(customers.c.segment == segment)
        if region is not None:
            clauses.append(customers.c.region == region)
        return clauses

    def _all(self, statement: sa.Select[Any]) -> list[dict[str, Any]]:
        with self.engine.connect() as connection:
            return [dict(row) for row in connection.execute(statement).mappings()]


class PaymentsDb:
    """The payments SQLite file. Opening it touches nothing; `reset` (re)creates it."""

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine

    @classmethod
    def open(cls, path: str | Path) -> PaymentsDb:
        """An engine on the file at `path`; no connection is made until a query runs."""
        return cls(sa.create_engine(f"sqlite+pysqlite:///{Path(path).resolve()}"))

    @property
    def engine(self) -> sa.Engine:
        """The engine, for tests that watch the SQL it issues."""
        return self._engine

    def reset(self) -> None:
        """Drop and recreate the tables and load the two sample tenants."""
        database = self._engine.url.database
        if database:
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        _metadata.drop_all(self._engine)
        _metadata.create_all(self._engine)
        with self._engine.begin() as connection:
            connection.execute(customers.insert(), list(_customer_rows()))
            connection.execute(orders.insert(), [_order_row(row) for row in _ORDERS])
            connection.execute(order_events.insert(), list(_event_rows()))

    def for_principal(self, principal: Principal) -> Ledger:
        """The queries of the principal's tenant, narrowed by its `region` data scope."""
        return self.scoped(tenant_id=principal.tenant_id, data_scope=principal.data_scope)

    def scoped(self, *, tenant_id: str, data_scope: Mapping[str, object]) -> Ledger:
        """The queries of one tenant and data scope; pass the Principal's, never a model's."""
        region = data_scope.get("region")
        return Ledger(
            engine=self._engine,
            tenant_id=tenant_id,
            region=None if region is None else str(region),
        )

    def close(self) -> None:
        """Dispose of the connection pool."""
        self._engine.dispose()


def _customer_rows() -> Iterable[Mapping[str, Any]]:
    for tenant, first, count in _CUSTOMER_BLOCKS:
        for offset in range(count):
            number = first + offset
            yield {
                "tenant_id": tenant,
                "customer_id": f"CUS-{number}",
                "name": f"Customer {number}",
                "email": f"customer{number}@{tenant}.example",
                "region": "eu" if number % 2 else "us",
                "segment": _SEGMENTS[offset % len(_SEGMENTS)],
            }


def _order_row(row: tuple[Any, ...]) -> Mapping[str, Any]:
    tenant, order_id, customer, owner, region, amount, status, restricted = row
    return {
        "tenant_id": tenant,
        "order_id": order_id,
        "customer_id": customer,
        "owner_id": owner,
        "region": region,
        "amount_cents": amount,
        "refunded_cents": 0,
        "currency": "EUR",
        "status": status,
        "restricted": restricted,
    }


def _event_rows() -> Iterable[Mapping[str, Any]]:
    for tenant, order_id, *_ in _ORDERS:
        yield {
            "tenant_id": tenant,
            "order_id": order_id,
            "seq": 1,
            "at": "2026-01-05T10:00:00Z",
            "kind": "placed",
            "note": "order placed",
        }
        yield {
            "tenant_id": tenant,
            "order_id": order_id,
            "seq": 2,
            "at": "2026-01-05T10:01:00Z",
            "kind": "paid",
            "note": "card payment captured",
        }
