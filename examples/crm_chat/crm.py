"""The CRM the chat program's tools talk to: a SQLite file standing in for a real service.

Every query is scoped to one tenant, given by the caller (the tools pass the
Principal's): a customer of another tenant is exactly as absent as one that does not
exist. `change_email` is the downstream's idempotent write: a change is keyed by the
idempotency key it was sent, so the same key twice changes nothing the second time
and returns the first change; `find_change` is how Handrail asks "did it happen?".
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_DATABASE", "SAMPLE_CUSTOMERS", "SAMPLE_ORDERS", "Crm", "StaleVersionError"]

DEFAULT_DATABASE = Path(".handrail") / "crm_chat.db"

SAMPLE_CUSTOMERS = (
    # tenant, customer id, name, e-mail address
    ("acme", "c-1", "Ada Lovelace", "ada@old.example"),
    ("acme", "c-2", "Grace Hopper", "grace@acme.example"),
    ("globex", "c-7", "Alan Turing", "alan@globex.example"),
)
SAMPLE_ORDERS = (
    # tenant, order id, customer id, total in minor units, currency, status
    ("acme", "o-100", "c-1", 12_500, "EUR", "shipped"),
    ("acme", "o-101", "c-1", 4_990, "EUR", "open"),
    ("acme", "o-102", "c-2", 990, "EUR", "open"),
    ("globex", "o-900", "c-7", 70_000, "GBP", "open"),
)

_SCHEMA = (
    (
        "CREATE TABLE IF NOT EXISTS customers (tenant TEXT NOT NULL, customer_id TEXT NOT NULL, "
        "name TEXT NOT NULL, email TEXT NOT NULL, version INTEGER NOT NULL, "
        "PRIMARY KEY (tenant, customer_id))"
    ),
    (
        "CREATE TABLE IF NOT EXISTS orders (tenant TEXT NOT NULL, order_id TEXT NOT NULL, "
        "customer_id TEXT NOT NULL, total_minor INTEGER NOT NULL, currency TEXT NOT NULL, "
        "status TEXT NOT NULL, PRIMARY KEY (tenant, order_id))"
    ),
    (
        "CREATE TABLE IF NOT EXISTS changes (idempotency_key TEXT PRIMARY KEY, "
        "change_id TEXT NOT NULL UNIQUE, tenant TEXT NOT NULL, customer_id TEXT NOT NULL, "
        "email TEXT NOT NULL)"
    ),
)


class StaleVersionError(Exception):
    """The customer changed since the version the writer expected: nothing was written."""


class Crm:
    """The CRM's database; each operation opens its own connection (tools run in threads)."""

    def __init__(self, path: str | Path = DEFAULT_DATABASE) -> None:
        self.path = Path(path)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        with closing(sqlite3.connect(self.path, timeout=30)) as connection:
            connection.row_factory = sqlite3.Row
            with connection:  # one transaction: committed, or rolled back on error
                yield connection

    def ensure(self) -> None:
        """Create the tables and load the sample data, once; later calls change nothing."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            for statement in _SCHEMA:
                db.execute(statement)
            if db.execute("SELECT 1 FROM customers LIMIT 1").fetchone() is None:
                db.executemany("INSERT INTO customers VALUES (?, ?, ?, ?, 1)", SAMPLE_CUSTOMERS)
                db.executemany("INSERT INTO orders VALUES (?, ?, ?, ?, ?, ?)", SAMPLE_ORDERS)

    # --- reads, always within one tenant -----------------------------------------------------

    def find(self, tenant: str, name: str) -> list[dict[str, str]]:
        """The tenant's customers whose name contains `name` (any case): ids and names."""
        with self._connect() as db:
            rows = db.execute(
                "SELECT customer_id, name FROM customers WHERE tenant = ? "
                "AND instr(lower(name), lower(?)) > 0 ORDER BY customer_id",
                (tenant, name),
            ).fetchall()
        return [dict(row) for row in rows]

    def customer(self, tenant: str, customer_id: str) -> dict[str, Any] | None:
        """One customer of the tenant, or None (for a missing id and another tenant's alike)."""
        with self._connect() as db:
            row = db.execute(
                "SELECT customer_id, name, email, version FROM customers "
                "WHERE tenant = ? AND customer_id = ?",
                (tenant, customer_id),
            ).fetchone()
        return None if row is None else dict(row)

    def orders(self, tenant: str, customer_id: str) -> list[dict[str, Any]]:
        """The tenant's orders of one customer, oldest first."""
        with self._connect() as db:
            rows = db.execute(
                "SELECT order_id, total_minor, currency, status FROM orders "
                "WHERE tenant = ? AND customer_id = ? ORDER BY order_id",
                (tenant, customer_id),
            ).fetchall()
        return [dict(row) for row in rows]

    # --- the write, idempotent by key -------------------------------------------------------

    def change_email(
        self, key: str, tenant: str, customer_id: str, email: str, *, expected_version: str | None
    ) -> dict[str, str]:
        """Change a customer's address once per key; a repeat returns the first change.

        With `expected_version`, the change is made only if the customer is still at that
        version, checked in the statement that writes (StaleVersionError otherwise).
        """
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")  # one writer at a time: the key check and the change
            done = db.execute(
                "SELECT change_id, customer_id, email FROM changes WHERE idempotency_key = ?",
                (key,),
            ).fetchone()
            if done is not None:
                return dict(done)
            updated = db.execute(
                "UPDATE customers SET email = ?, version = version + 1 WHERE tenant = ? "
                "AND customer_id = ? AND (? IS NULL OR CAST(version AS TEXT) = ?)",
                (email, tenant, customer_id, expected_version, expected_version),
            )
            if updated.rowcount != 1:
                raise StaleVersionError(customer_id)
            (count,) = db.execute("SELECT count(*) FROM changes").fetchone()
            change = {"change_id": f"chg-{count + 1}", "customer_id": customer_id, "email": email}
            db.execute(
                "INSERT INTO changes VALUES (?, ?, ?, ?, ?)",
                (key, change["change_id"], tenant, customer_id, email),
            )
        return change

    def find_change(self, key: str) -> dict[str, str] | None:
        """The change made under an idempotency key, or None if the CRM never made one."""
        with self._connect() as db:
            row = db.execute(
                "SELECT change_id, customer_id, email FROM changes WHERE idempotency_key = ?",
                (key,),
            ).fetchone()
        return None if row is None else dict(row)

    def changes(self) -> list[dict[str, str]]:
        """Every change the CRM made, in order: what an operator (or a test) audits."""
        with self._connect() as db:
            rows = db.execute(
                "SELECT idempotency_key, change_id, tenant, customer_id, email FROM changes "
                "ORDER BY rowid"
            ).fetchall()
        return [dict(row) for row in rows]
