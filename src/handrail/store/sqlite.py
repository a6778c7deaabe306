"""SqliteStore: the embedded default, one file in WAL mode.

Sets the pragmas that make SQLite safe for a multi-threaded service on every
connection: WAL (readers never block the writer), a busy timeout, foreign keys, and
synchronous=FULL so a committed record survives power loss. It also begins each
transaction itself, so that a transaction holds its reads as well as its writes.
Queries live in `SqlStore`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa

from handrail.store.sql import SqlStore

__all__ = ["SqliteStore"]


def _set_pragmas(dbapi_connection: Any, _record: object) -> None:  # noqa: ANN401 - DB-API
    # The driver's own transaction handling is off; `_begin` below starts each one, so
    # a transaction holds its reads too (pysqlite would otherwise begin only at a write).
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute("PRAGMA busy_timeout=5000")
        cursor.execute("PRAGMA foreign_keys=ON")
    finally:
        cursor.close()


def _begin(connection: sa.Connection) -> None:
    options = connection.get_execution_options()
    if options.get("handrail_autocommit", False):
        # Single statements and reads: SQLite commits each one on its own.
        return
    immediate = options.get("handrail_immediate", False)
    connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


class SqliteStore(SqlStore):
    """A Store in one SQLite file; `open` creates the folder, the file and the schema."""

    @classmethod
    def open(cls, path: str | Path, *, migrate: bool = True) -> SqliteStore:
        """Open (and by default migrate) the database at `path`."""
        file = Path(path)
        file.parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(f"sqlite+pysqlite:///{file}")
        sa.event.listen(engine, "connect", _set_pragmas)
        sa.event.listen(engine, "begin", _begin)
        store = cls(engine, autocommit=engine.execution_options(handrail_autocommit=True))
        if migrate:
            store.migrate()
        return store

    def journal_mode(self) -> str:
        """The journal mode in force, for checks and diagnostics."""
        with self.engine.connect() as connection:
            return str(connection.exec_driver_sql("PRAGMA journal_mode").scalar())
