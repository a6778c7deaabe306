"""SqlStore: the Store contract over SQLAlchemy Core, shared by SQLite and PostgreSQL.

Owns queries and the translation of database errors into StoreError at this one
boundary. Connection setup belongs to the backend modules; schema changes belong to
the Alembic migrations.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from datetime import UTC, datetime
from importlib import resources

import sqlalchemy as sa
from alembic import command
from alembic.config import Config

from handrail.audit import AuditEvent, AuditSubject
from handrail.errors import StoreError
from handrail.store._tables import audit_events

__all__ = ["SqlStore"]

_EVENT_FIELDS = tuple(f.name for f in fields(AuditEvent) if f.name != "subject")
_SUBJECT_FIELDS = tuple(f.name for f in fields(AuditSubject))


def _row(event: AuditEvent) -> dict[str, object]:
    # Not dataclasses.asdict: it deep-copies every value, which costs 20x more.
    row = {name: getattr(event, name) for name in _EVENT_FIELDS}
    subject = event.subject
    row.update((name, getattr(subject, name)) for name in _SUBJECT_FIELDS)
    return row


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
        rows = [_row(event) for event in events]
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
        return [
            AuditEvent(
                **{name: row[name] for name in _EVENT_FIELDS if name != "at"},
                at=_aware(row["at"]),
                subject=AuditSubject(**{name: row[name] for name in _SUBJECT_FIELDS}),
            )
            for row in reversed(rows)
        ]

    def close(self) -> None:
        """Dispose of the connection pool."""
        self._engine.dispose()
