"""The bookstore application object: its database, its registry and a Gate factory.

`build_app()` is what `handrail --app examples.bookstore:build_app` loads. Building the
app registers the tools and opens nothing: the database file is touched only when a
tool runs or `database.reset()` is called.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from examples.bookstore.data import BookstoreDb
from examples.bookstore.tools import build_tools
from handrail import AuditSink, Clock, Gate, Principal, Registry, SystemClock

__all__ = ["TENANTS", "BookstoreApp", "build_app"]

TENANTS = ("acme", "globex")
"""The tenants whose sample data `BookstoreDb.reset` loads."""

DEFAULT_DATABASE = Path(".handrail") / "bookstore.db"


@dataclass(frozen=True, kw_only=True, slots=True)
class BookstoreApp:
    """Everything a host needs to serve the bookstore's tools to a model."""

    registry: Registry
    database: BookstoreDb
    clock: Clock

    def gate(
        self,
        *,
        audit: AuditSink | None = None,
        new_id: Callable[[], str] | None = None,
    ) -> Gate:
        """A Gate over this app's registry, writing its audit trail to `audit`.

        For the SQLite store pass `BatchingAuditSink(SqliteStore.open(path))` and
        close it when done.
        """
        return Gate(self.registry, audit=audit, clock=self.clock, new_id=new_id)

    def exposed_names(self, principal: Principal) -> list[str]:
        """The names of the tools this principal's model would be shown."""
        return [spec.name for spec in self.registry.exposed(principal)]


def build_app(
    *,
    database: str | Path = DEFAULT_DATABASE,
    audit: AuditSink | None = None,
    clock: Clock | None = None,
    new_id: Callable[[], str] | None = None,
) -> BookstoreApp:
    """Register the bookstore's tools over the database at `database`.

    `audit` receives the registrations; pass the same sink to `BookstoreApp.gate`.
    """
    clock = clock or SystemClock()
    db = BookstoreDb.open(database)
    registry = Registry(audit=audit, clock=clock, new_id=new_id)
    for built in build_tools(db):
        registry.register(built, actor="bookstore")
    return BookstoreApp(registry=registry, database=db, clock=clock)
