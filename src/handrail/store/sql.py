"""SqlStore: the Store contract over SQLAlchemy Core, shared by SQLite and PostgreSQL.

Owns queries and the translation of database errors into StoreError at this one
boundary. Connection setup belongs to the backend modules; schema changes belong to
the Alembic migrations.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from importlib import resources

import sqlalchemy as sa
from alembic import command
from alembic.config import Config

from handrail.audit import AuditEvent
from handrail.errors import StoreError
from handrail.store._tables import audit_events

__all__ = ["SqlStore"]


def _aware(value: datetime) -> datetime:
    # SQLite returns naive datetimes; every stored time is UTC.
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


class SqlStore:
    """A Store on any SQLAlchemy engine whose dialect the migrations support."""

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine

    @property
    def engine(self) -> sa.Engine:
        """The underlying engine, for backends and migrations."""
        return self._engine

    def migrate(self) -> None:
        """Run Alembic migrations up to head on this store's database."""
        config = Config()
        location = resources.files("handrail.store") / "migrations"
        config.set_main_option("script_location", str(location))
        try:
            with self._engine.begin() as connection:
                config.attributes["connection"] = connection
                command.upgrade(config, "head")
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(f"migration failed: {type(exc).__name__}") from exc

    def append_audit(self, events: Sequence[AuditEvent]) -> None:
        """Insert events in one transaction."""
        if not events:
            return
        rows = [asdict(event) for event in events]
        try:
            with self._engine.begin() as connection:
                connection.execute(audit_events.insert(), rows)
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(f"audit write failed: {type(exc).__name__}") from exc

    def read_audit(
        self,
        *,
        limit: int = 50,
        tenant_id: str | None = None,
        tool_call_id: str | None = None,
    ) -> list[AuditEvent]:
        """The newest `limit` matching events, oldest first."""
        query = sa.select(audit_events).order_by(audit_events.c.seq.desc()).limit(max(0, limit))
        if tenant_id is not None:
            query = query.where(audit_events.c.tenant_id == tenant_id)
        if tool_call_id is not None:
            query = query.where(audit_events.c.tool_call_id == tool_call_id)
        try:
            with self._engine.connect() as connection:
                rows = connection.execute(query).mappings().all()
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(f"audit read failed: {type(exc).__name__}") from exc
        events = []
        for row in reversed(rows):
            values = {k: v for k, v in row.items() if k != "seq"}
            values["at"] = _aware(values["at"])
            events.append(AuditEvent(**values))
        return events

    def close(self) -> None:
        """Dispose of the connection pool."""
        self._engine.dispose()
