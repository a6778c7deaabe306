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
import sqlite3
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite as sqlite_dialect

from handrail.api_keys import ApiKeyRecord
from handrail.errors import StoreError
from handrail.events import (
    AuditEvent,
    AuditItem,
    CallRecord,
    events_of,
    record_fits,
    storable_events,
    wall_time,
)
from handrail.store._rows import EVENT_FIELDS, SUBJECT_FIELDS
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


_AUDIT_COLUMNS = (*EVENT_FIELDS, *SUBJECT_FIELDS)
# One INSERT of many rows, not executemany: the driver lets go of the GIL for every
# statement it steps, and taking it back from a busy event loop can cost a switch
# interval (5 ms) each time. Bound by SQLite's limit on variables (999 before 3.32).
_MAX_VARIABLES = 32766 if sqlite3.sqlite_version_info >= (3, 32, 0) else 999
_ROWS_PER_INSERT = min(512, _MAX_VARIABLES // len(_AUDIT_COLUMNS))
_ROW = f"({', '.join('?' for _ in _AUDIT_COLUMNS)})"
# SQLAlchemy's SQLite DATETIME keeps "YYYY-MM-DD HH:MM:SS.ffffff", the wall-clock fields
# without the offset; `isoformat` writes exactly that, and the offset after it is cut.
_STORED_TIME = len("2026-01-01 00:00:00.000000")


@functools.lru_cache(maxsize=_ROWS_PER_INSERT)
def _insert_audit(rows: int) -> str:
    return (
        f"INSERT INTO audit_events ({', '.join(_AUDIT_COLUMNS)}) "  # noqa: S608 - fixed column names
        f"VALUES {', '.join(_ROW for _ in range(rows))}"
    )


def _audit_values(events: Sequence[AuditEvent]) -> list[object] | None:
    """The values of `events`' rows, one after another; None if one needs SQLAlchemy's types.

    A plain datetime is formatted here as SQLAlchemy's DATETIME would; an event with
    anything else in `at` (never one the auditor made) takes the general path instead.
    """
    values: list[object] = []
    add = values.extend
    for event in events:
        at = event.at
        if type(at) is not datetime:
            return None
        s = event.subject
        # Written out, not looped: this runs for every event the writer stores. The
        # order is `_AUDIT_COLUMNS`: EVENT_FIELDS, then SUBJECT_FIELDS.
        add(
            (
                event.event_id,
                at.isoformat(" ", "microseconds")[:_STORED_TIME],
                event.kind,
                event.stage,
                event.decision,
                event.code,
                event.duration_ms,
                event.detail,
                s.request_id,
                s.tool_call_id,
                s.tool,
                s.schema_version,
                s.args_hash,
                s.args_summary,
                s.user_id,
                s.tenant_id,
            ),
        )
    return values


def _stamper() -> Callable[[datetime | int], str]:
    """Formats stage times as `_audit_values` does; the seconds' text is reused.

    The events of a batch mostly end within the same second: only the microseconds
    differ, so the date and time of day are formatted once per second.
    """
    last = -1
    head = ""

    def stamp(at: datetime | int) -> str:
        nonlocal last, head
        if type(at) is int:
            seconds, micros = divmod(at // 1000, 1_000_000)
            if seconds != last:
                head = wall_time(seconds * 1_000_000_000).isoformat(" ")[: _STORED_TIME - 7]
                last = seconds
            return f"{head}.{micros:06d}"
        if type(at) is datetime:
            return at.isoformat(" ", "microseconds")[:_STORED_TIME]
        raise _NeedsTypes

    return stamp


class _NeedsTypes(Exception):  # noqa: N818 - a signal inside this module, never raised out
    """An item whose values only SQLAlchemy's column types can store."""


def _item_values(items: Sequence[AuditItem]) -> list[object] | None:
    """The rows of `items`, as `_audit_values` makes them for their events; None likewise.

    A call's record whose text is storable as it is (`record_fits`) becomes rows
    directly, without events; any other item takes `storable_events` first.
    """
    values: list[object] = []
    add = values.extend
    stamp = _stamper()
    try:
        for item in items:
            if not isinstance(item, CallRecord) or not record_fits(item):
                events = [item] if isinstance(item, AuditEvent) else item.events()
                more = _audit_values(storable_events(events))
                if more is None:
                    return None
                add(more)
                continue
            subject = item.subject_fields
            kind = item.kind
            for event_id, (stage, decision, code, detail, seconds, at) in zip(
                item.event_ids(), item.stages, strict=True
            ):
                add(
                    (
                        event_id,
                        stamp(at),
                        kind,
                        stage,
                        decision,
                        code,
                        round(seconds * 1000, 3),
                        detail,
                        *subject,
                    ),
                )
    except _NeedsTypes:
        return None
    return values


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
        engine = sa.create_engine(f"sqlite+pysqlite:///{file}", max_overflow=-1)
        sa.event.listen(engine, "connect", _set_pragmas)
        sa.event.listen(engine, "begin", _begin)
        store = cls(engine, autocommit=engine.execution_options(handrail_autocommit=True))
        store._async = SqliteExecutions(functools.partial(_writer_connection, file))
        if migrate:
            store.migrate()
        return store

    def append_audit(self, events: Sequence[AuditEvent]) -> None:
        """Insert events in one transaction, as `storable_events` makes them.

        The rows go straight to the driver (no per-row type processing), many to one
        INSERT: this runs on the audit writer's thread, next to a busy event loop.
        """
        if not events:
            return
        stored = storable_events(events)
        values = _audit_values(stored)
        if values is None:
            super().append_audit(stored)
            return
        self._insert_values(values)

    def _insert_values(self, values: list[object]) -> None:
        """Insert rows (their values one after another) in one transaction."""
        width = len(_AUDIT_COLUMNS) * _ROWS_PER_INSERT
        try:
            with self.engine.begin() as connection:
                for first in range(0, len(values), width):
                    chunk = tuple(values[first : first + width])
                    statement = _insert_audit(len(chunk) // len(_AUDIT_COLUMNS))
                    connection.exec_driver_sql(statement, chunk)
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(f"audit write failed: {type(exc).__name__}") from exc

    def append_audit_items(self, items: Sequence[AuditItem]) -> None:
        """`append_audit` of the items' events, with calls' records written as rows directly.

        For `BatchingAuditSink`, whose writer takes records as the auditor emitted them:
        the rows are the ones `append_audit` would write for their events.
        """
        if not items:
            return
        values = _item_values(items)
        if values is None:
            super().append_audit(storable_events(events_of(items)))
            return
        self._insert_values(values)

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
