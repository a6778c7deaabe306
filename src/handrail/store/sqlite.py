"""SqliteStore: the embedded default, one file in WAL mode.

Sets the pragmas that make SQLite safe for a multi-threaded service on every
connection: WAL (readers never block the writer), a busy timeout, foreign keys, and
synchronous=FULL so a committed record survives power loss. It also begins each
transaction itself, so that a transaction holds its reads as well as its writes.
Queries live in `SqlStore`.

A read of one record by its key never waits long here (`point_reads_block` is False):
in WAL mode a reader takes no lock a writer holds (it reads the last committed
snapshot; the busy timeout applies only while a crashed file is recovered, and the
pool keeps the file open meanwhile), the pool never makes a checkout wait (SQLite has
no connection limit, so its overflow is unbounded), and the lookup is a few pages of
an index on a local file. So the service checks an API key inline (~80 µs) rather
than paying for a worker thread's hop (~400 µs under load) on every request.
"""

from __future__ import annotations

import functools
import itertools
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite as sqlite_dialect

from handrail.api_keys import ApiKeyRecord
from handrail.errors import StoreError
from handrail.store._audit_rows import TRAIL_COLUMNS, TrailRow
from handrail.store._sql_api_keys import api_key_record
from handrail.store._sqlite_async import SqliteExecutions
from handrail.store._tables import api_keys
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


def _writer_connection(file: Path) -> sqlite3.Connection:
    """The group committer's own connection: the store's pragmas, autocommit."""
    connection = sqlite3.connect(file, isolation_level=None, check_same_thread=False)
    _set_pragmas(connection, None)
    return connection


def _begin(connection: sa.Connection) -> None:
    options = connection.get_execution_options()
    if options.get("handrail_autocommit", False):
        # Single statements and reads: SQLite commits each one on its own.
        return
    immediate = options.get("handrail_immediate", False)
    connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


# One INSERT of many rows, not executemany: the driver lets go of the GIL for every
# statement it steps, and taking it back from a busy event loop can cost a switch
# interval (5 ms) each time. Bound by SQLite's limit on variables (999 before 3.32).
_MAX_VARIABLES = 32766 if sqlite3.sqlite_version_info >= (3, 32, 0) else 999
_ROWS_PER_INSERT = min(512, _MAX_VARIABLES // len(TRAIL_COLUMNS))
_ROW = f"({', '.join('?' for _ in TRAIL_COLUMNS)})"


@functools.lru_cache(maxsize=_ROWS_PER_INSERT)
def _insert_statement(rows: int) -> str:
    return (
        f"INSERT INTO audit_trails ({', '.join(TRAIL_COLUMNS)}) "  # noqa: S608 - fixed column names
        f"VALUES {', '.join(_ROW for _ in range(rows))}"
    )


def _key_reader() -> tuple[str, dict[str, Callable[[Any], Any]]]:
    """The SELECT of one API key by id, and SQLAlchemy's conversions of its columns' values."""
    dialect = sqlite_dialect.dialect()
    convert: dict[str, Callable[[Any], Any]] = {}
    for column in api_keys.columns:
        processor = column.type.dialect_impl(dialect).result_processor(dialect, None)
        if processor is not None:
            convert[column.name] = processor
    names = ", ".join(column.name for column in api_keys.columns)
    return f"SELECT {names} FROM api_keys WHERE key_id = ?", convert  # noqa: S608 - fixed names


_SELECT_KEY, _KEY_CONVERSIONS = _key_reader()


class SqliteStore(SqlStore):
    """A Store in one SQLite file; `open` creates the folder, the file and the schema.

    The write path's claims and outcomes go to one writer thread that commits
    concurrent ones together (`async_executions`, see `handrail.store._sqlite_async`).
    """

    _async: SqliteExecutions | None = None
    point_reads_block: ClassVar[bool] = False
    """A read by key waits for no writer, pool or network (see the module)."""

    @property
    def async_executions(self) -> SqliteExecutions | None:
        """Claims and outcome writes, group-committed by one writer thread."""
        return self._async

    def close(self) -> None:
        """Stop the writer thread, then dispose of the pool."""
        if self._async is not None:
            self._async.close()
        super().close()

    @classmethod
    def open(cls, path: str | Path, *, migrate: bool = True) -> SqliteStore:
        """Open (and by default migrate) the database at `path`."""
        file = Path(path)
        file.parent.mkdir(parents=True, exist_ok=True)
        # No overflow limit: a checkout never waits for another thread's connection.
        # hide_parameters: a failed statement's text never lists its values (arguments,
        # summaries), since the exception reaches logs.
        engine = sa.create_engine(
            f"sqlite+pysqlite:///{file}", max_overflow=-1, hide_parameters=True
        )
        sa.event.listen(engine, "connect", _set_pragmas)
        sa.event.listen(engine, "begin", _begin)
        store = cls(engine, autocommit=engine.execution_options(handrail_autocommit=True))
        store._async = SqliteExecutions(functools.partial(_writer_connection, file))
        if migrate:
            store.migrate()
        return store

    def _insert_trail(self, rows: list[TrailRow]) -> None:
        """Insert the rows in one transaction, straight to the driver, many to an INSERT.

        Every value is already what the driver binds (text, numbers, None): this runs on
        the audit writer's thread, next to a busy event loop.
        """
        try:
            with self.engine.begin() as connection:
                for first in range(0, len(rows), _ROWS_PER_INSERT):
                    chunk = rows[first : first + _ROWS_PER_INSERT]
                    values = tuple(itertools.chain.from_iterable(chunk))
                    connection.exec_driver_sql(_insert_statement(len(chunk)), values)
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(f"audit write failed: {type(exc).__name__}") from exc

    def get_api_key(self, key_id: str) -> ApiKeyRecord | None:
        """The key of an id: `SqlStore`'s read, its statement sent straight to the driver.

        The service checks a key on every request, inline (`point_reads_block`); this
        costs a fifth of the general path, with the same row converted the same way.
        """
        try:
            connection = self.engine.raw_connection()
            try:
                cursor = connection.cursor()
                try:
                    cursor.execute(_SELECT_KEY, (key_id,))
                    row = cursor.fetchone()
                    names = [column[0] for column in cursor.description]
                finally:
                    cursor.close()
            finally:
                connection.close()
        except (sqlite3.Error, sa.exc.SQLAlchemyError) as exc:
            raise StoreError(f"API key read failed: {type(exc).__name__}") from exc
        if row is None:
            return None
        values = dict(zip(names, row, strict=True))
        for name, convert in _KEY_CONVERSIONS.items():
            values[name] = convert(values[name])
        return api_key_record(values)

    def journal_mode(self) -> str:
        """The journal mode in force, for checks and diagnostics."""
        with self.engine.connect() as connection:
            return str(connection.exec_driver_sql("PRAGMA journal_mode").scalar())
