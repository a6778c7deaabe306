"""The bookstore's data: books, inventory and orders of several tenants in one SQLite file.

Every query goes through a `TenantCatalog`, which is bound to one tenant when it is
made and puts that tenant into the WHERE clause of each statement. No query loads
several tenants' rows and filters them in Python.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import sqlalchemy as sa

__all__ = ["BookstoreDb", "Genre", "TenantCatalog"]

Genre = Literal["fiction", "history", "science"]

_metadata = sa.MetaData()

books = sa.Table(
    "books",
    _metadata,
    sa.Column("tenant_id", sa.String(64), primary_key=True),
    sa.Column("isbn", sa.String(13), primary_key=True),
    sa.Column("title", sa.String(200), nullable=False),
    sa.Column("author", sa.String(200), nullable=False),
    sa.Column("genre", sa.String(32), nullable=False),
    sa.Column("price_cents", sa.Integer, nullable=False),
)

inventory = sa.Table(
    "inventory",
    _metadata,
    sa.Column("tenant_id", sa.String(64), primary_key=True),
    sa.Column("isbn", sa.String(13), primary_key=True),
    sa.Column("on_hand", sa.Integer, nullable=False),
    sa.Column("shelf", sa.String(16), nullable=False),
    sa.ForeignKeyConstraint(["tenant_id", "isbn"], ["books.tenant_id", "books.isbn"]),
)

orders = sa.Table(
    "orders",
    _metadata,
    sa.Column("tenant_id", sa.String(64), primary_key=True),
    sa.Column("order_id", sa.String(16), primary_key=True),
    sa.Column("isbn", sa.String(13), nullable=False),
    sa.Column("quantity", sa.Integer, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("placed_on", sa.String(10), nullable=False),
    sa.ForeignKeyConstraint(["tenant_id", "isbn"], ["books.tenant_id", "books.isbn"]),
)

# (tenant, isbn, title, author, genre, price in cents, copies on hand, shelf)
_BOOKS = (
    ("acme", "9780141439518", "Pride and Prejudice", "Jane Austen", "fiction", 899, 4, "A-12"),
    ("acme", "9780141439587", "Emma", "Jane Austen", "fiction", 999, 2, "A-12"),
    ("acme", "9780486282114", "Frankenstein", "Mary Shelley", "fiction", 599, 1, "A-19"),
    ("acme", "9780140439120", "The Time Machine", "H. G. Wells", "fiction", 750, 0, "A-31"),
    ("acme", "9780140437645", "Origin of Species", "Charles Darwin", "science", 1299, 3, "S-02"),
    ("acme", "9780141439976", "The History of Rome", "Theodor Mommsen", "history", 1850, 1, "H-07"),
    ("globex", "9780142437247", "Moby-Dick", "Herman Melville", "fiction", 1100, 5, "F-01"),
    ("globex", "9780141439846", "Dracula", "Bram Stoker", "fiction", 850, 2, "F-04"),
    (
        "globex",
        "9780140432688",
        "Voyage of the Beagle",
        "Charles Darwin",
        "science",
        1399,
        1,
        "S-11",
    ),
    ("globex", "9780140449334", "The Histories", "Herodotus", "history", 1499, 0, "H-02"),
)

# (tenant, order id, isbn, quantity, status, placed on)
_ORDERS = (
    ("acme", "ORD-1001", "9780141439587", 1, "shipped", "2026-01-05"),
    ("acme", "ORD-1002", "9780140437645", 2, "processing", "2026-01-09"),
    ("globex", "ORD-2001", "9780142437247", 1, "delivered", "2025-12-28"),
    ("globex", "ORD-2002", "9780141439846", 3, "cancelled", "2026-01-02"),
)


def _like_pattern(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


@dataclass(frozen=True, kw_only=True, slots=True)
class TenantCatalog:
    """The queries of one tenant; the tenant is fixed at construction, never an argument."""

    engine: sa.Engine
    tenant_id: str

    def search(
        self,
        query: str,
        *,
        limit: int,
        genre: Genre | None = None,
        in_stock: bool = False,
    ) -> list[dict[str, Any]]:
        """Books whose title or author contains `query` (case-insensitive), by title."""
        pattern = _like_pattern(query)
        joined = books.join(
            inventory,
            sa.and_(inventory.c.tenant_id == books.c.tenant_id, inventory.c.isbn == books.c.isbn),
        )
        statement = (
            sa.select(
                books.c.isbn,
                books.c.title,
                books.c.author,
                books.c.genre,
                books.c.price_cents,
                inventory.c.on_hand,
            )
            .select_from(joined)
            .where(
                books.c.tenant_id == self.tenant_id,
                sa.or_(
                    books.c.title.ilike(pattern, escape="\\"),
                    books.c.author.ilike(pattern, escape="\\"),
                ),
            )
        )
        if genre is not None:
            statement = statement.where(books.c.genre == genre)
        if in_stock:
            statement = statement.where(inventory.c.on_hand > 0)
        return self._all(statement.order_by(books.c.title).limit(limit))

    def has_book(self, isbn: str) -> bool:
        """Whether this tenant's catalogue lists the ISBN."""
        statement = sa.select(books.c.isbn).where(
            books.c.tenant_id == self.tenant_id,
            books.c.isbn == isbn,
        )
        return bool(self._all(statement))

    def stock(self, isbn: str) -> dict[str, Any] | None:
        """Copies on hand and shelf of one of this tenant's books, or None."""
        statement = (
            sa.select(books.c.isbn, books.c.title, inventory.c.on_hand, inventory.c.shelf)
            .select_from(
                books.join(
                    inventory,
                    sa.and_(
                        inventory.c.tenant_id == books.c.tenant_id,
                        inventory.c.isbn == books.c.isbn,
                    ),
                ),
            )
            .where(books.c.tenant_id == self.tenant_id, books.c.isbn == isbn)
        )
        rows = self._all(statement)
        return rows[0] if rows else None

    def order(self, order_id: str) -> dict[str, Any] | None:
        """One of this tenant's orders with its book title, or None (also for others')."""
        statement = (
            sa.select(
                orders.c.order_id,
                orders.c.status,
                orders.c.placed_on,
                orders.c.quantity,
                orders.c.isbn,
                books.c.title,
            )
            .select_from(
                orders.join(
                    books,
                    sa.and_(books.c.tenant_id == orders.c.tenant_id, books.c.isbn == orders.c.isbn),
                ),
            )
            .where(orders.c.tenant_id == self.tenant_id, orders.c.order_id == order_id)
        )
        rows = self._all(statement)
        return rows[0] if rows else None

    def count_orders(self) -> int:
        """How many orders this tenant has."""
        statement = (
            sa.select(sa.func.count())
            .select_from(orders)
            .where(
                orders.c.tenant_id == self.tenant_id,
            )
        )
        with self.engine.connect() as connection:
            return int(connection.execute(statement).scalar_one())

    def delete_all_orders(self) -> int:
        """Delete every order of this tenant; returns how many went."""
        statement = sa.delete(orders).where(orders.c.tenant_id == self.tenant_id)
        with self.engine.begin() as connection:
            return connection.execute(statement).rowcount

    def _all(self, statement: sa.Select[Any]) -> list[dict[str, Any]]:
        with self.engine.connect() as connection:
            return [dict(row) for row in connection.execute(statement).mappings()]


class BookstoreDb:
    """The bookstore's SQLite file. Opening it touches nothing; `reset` (re)creates it."""

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine

    @classmethod
    def open(cls, path: str | Path) -> BookstoreDb:
        """An engine on the file at `path`; no connection is made until a query runs."""
        return cls(sa.create_engine(f"sqlite+pysqlite:///{Path(path).resolve()}"))

    @property
    def engine(self) -> sa.Engine:
        """The engine, for tests that watch the SQL it issues."""
        return self._engine

    @property
    def path(self) -> Path | None:
        """The database file."""
        database = self._engine.url.database
        return Path(database) if database else None

    def reset(self) -> None:
        """Drop and recreate the tables and load the two sample tenants."""
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        _metadata.drop_all(self._engine)
        _metadata.create_all(self._engine)
        with self._engine.begin() as connection:
            connection.execute(books.insert(), [_book_row(row) for row in _BOOKS])
            connection.execute(inventory.insert(), [_stock_row(row) for row in _BOOKS])
            connection.execute(orders.insert(), [_order_row(row) for row in _ORDERS])

    def for_tenant(self, tenant_id: str) -> TenantCatalog:
        """The queries of one tenant; pass the Principal's tenant, never a model's."""
        return TenantCatalog(engine=self._engine, tenant_id=tenant_id)

    def close(self) -> None:
        """Dispose of the connection pool."""
        self._engine.dispose()


def _book_row(row: tuple[Any, ...]) -> Mapping[str, Any]:
    tenant, isbn, title, author, genre, price, _, _ = row
    return {
        "tenant_id": tenant,
        "isbn": isbn,
        "title": title,
        "author": author,
        "genre": genre,
        "price_cents": price,
    }


def _stock_row(row: tuple[Any, ...]) -> Mapping[str, Any]:
    tenant, isbn, _, _, _, _, on_hand, shelf = row
    return {"tenant_id": tenant, "isbn": isbn, "on_hand": on_hand, "shelf": shelf}


def _order_row(row: tuple[Any, ...]) -> Mapping[str, Any]:
    tenant, order_id, isbn, quantity, status, placed_on = row
    return {
        "tenant_id": tenant,
        "order_id": order_id,
        "isbn": isbn,
        "quantity": quantity,
        "status": status,
        "placed_on": placed_on,
    }
