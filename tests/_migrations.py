"""Shared steps of the migration tests: Alembic up or down to a revision, the revision a
database is at, its schema checked against the declared tables, and an empty database of
each SQL backend (`empty_database`) to migrate step by step, then open as a store.

Never decides what a migration must keep: each contract test asserts that itself.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from psycopg import sql

from _stores import _admin_connection
from handrail.events import AuditEvent
from handrail.store import PostgresStore, SqliteStore, SqlStore
from handrail.store._tables import metadata


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(resources.files("handrail.store") / "migrations"))
    return config


HEAD = ScriptDirectory.from_config(_config()).get_current_head()
"""The newest revision: where opening a store migrates to."""


def migrate(engine: sa.Engine, to: str, *, down: bool = False) -> None:
    """Upgrade (or, with `down`, downgrade) the database of `engine` to revision `to`."""
    config = _config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        (command.downgrade if down else command.upgrade)(config, to)


def revision(engine: sa.Engine) -> list[str]:
    """The revisions in the database's `alembic_version` table."""
    with engine.connect() as connection:
        rows = connection.exec_driver_sql("SELECT version_num FROM alembic_version").all()
    return [row[0] for row in rows]


_AUDIT_EVENTS = sa.table(
    "audit_events",
    *(
        sa.column(name)
        for name in [
            "event_id",
            "kind",
            "stage",
            "decision",
            "code",
            "duration_ms",
            "detail",
            "request_id",
            "tool_call_id",
            "tool",
            "schema_version",
            "args_hash",
            "args_summary",
            "user_id",
            "tenant_id",
        ]
    ),
    sa.column("at", sa.DateTime(timezone=True)),
)


def append_old_audit(engine: sa.Engine, events: Sequence[AuditEvent]) -> None:
    """Write events as the revisions before 0014 kept them: a row of `audit_events` each."""
    rows = []
    for event in events:
        row = {f.name: getattr(event, f.name) for f in fields(event) if f.name != "subject"}
        row.update((f.name, getattr(event.subject, f.name)) for f in fields(event.subject))
        rows.append(row)
    with engine.begin() as connection:
        connection.execute(_AUDIT_EVENTS.insert(), rows)


def table_names(engine: sa.Engine) -> set[str]:
    return set(sa.inspect(engine).get_table_names())


def assert_at_head(engine: sa.Engine) -> None:
    """The database is at HEAD and holds exactly the declared tables, columns and indexes."""
    with engine.connect() as connection:
        diff = compare_metadata(MigrationContext.configure(connection), metadata)
    assert diff == []
    assert table_names(engine) - {"alembic_version"} == set(metadata.tables)
    assert revision(engine) == [HEAD]


@dataclass(frozen=True, kw_only=True)
class EmptyDatabase:
    """A database with no schema at all: an engine on it, and how a store opens it."""

    backend: str
    engine: sa.Engine
    open: Callable[[], SqlStore]

    @contextmanager
    def reopened(self) -> Iterator[SqlStore]:
        """The store opened on the database (which migrates it), checked at HEAD; closed after."""
        store = self.open()
        try:
            assert_at_head(store.engine)
            yield store
        finally:
            store.close()


@contextmanager
def _empty_sqlite(tmp_path: Path) -> Iterator[EmptyDatabase]:
    file = tmp_path / "old.db"
    engine = sa.create_engine(f"sqlite+pysqlite:///{file}")
    try:
        yield EmptyDatabase(backend="sqlite", engine=engine, open=lambda: SqliteStore.open(file))
    finally:
        engine.dispose()


@contextmanager
def _empty_postgres(postgres_url: str) -> Iterator[EmptyDatabase]:
    name = f"handrail_migrate_{uuid.uuid4().hex[:8]}"
    with _admin_connection() as admin:
        admin.execute(
            sql.SQL("CREATE DATABASE {} ENCODING 'UTF8' TEMPLATE template0").format(
                sql.Identifier(name),
            ),
        )
    url = postgres_url.rsplit("/", 1)[0] + "/" + name
    engine = sa.create_engine("postgresql+psycopg://" + url.split("://", 1)[1])
    try:
        yield EmptyDatabase(backend="postgres", engine=engine, open=lambda: PostgresStore.open(url))
    finally:
        engine.dispose()
        with _admin_connection() as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)),
            )


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EmptyDatabase]:
    """An empty database of each SQL backend (PostgreSQL: one of its own, dropped after)."""
    if request.param == "sqlite":
        with _empty_sqlite(tmp_path) as database:
            yield database
    else:
        with _empty_postgres(request.getfixturevalue("postgres_url")) as database:
            yield database
