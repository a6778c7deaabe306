"""The SQL tools' database sessions, and values across the boundary in both directions.

Owns `Database`: read-only sessions and write transactions, each under a time limit,
with the dialect's own guards (PostgreSQL settings; SQLite pragmas, an authorizer and a
progress handler), and the one translation of database errors into signals for the
model. Also owns binding values for the driver and turning the values it returns into
JSON (`Cells`). It never builds SQL from anything the model wrote.
"""

from __future__ import annotations

import base64
import math
import sqlite3
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime
from datetime import time as time_of_day
from decimal import Decimal
from uuid import UUID

import sqlalchemy as sa

from handrail.context import ToolContext
from handrail.errors import ConfigurationError, ErrorCode, ToolFailed, ToolRetryable, ToolSignal
from handrail.tools._sql_config import SqlConfig

__all__ = ["MAX_SAFE_INTEGER", "Cells", "Database"]

MAX_SAFE_INTEGER = 2**53 - 1
_MAX_DEPTH = 16
_SQLITE_STEPS = 1_000  # VM instructions between checks of the time limit
_READ_ACTIONS = frozenset(
    {sqlite3.SQLITE_READ, sqlite3.SQLITE_SELECT, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE},
)
_TIMEOUT_STATES = frozenset({"57014", "SQLITE_INTERRUPT"})
_READ_ONLY_STATES = frozenset({"25006", "SQLITE_READONLY", "SQLITE_AUTH"})

_TIMED_OUT = (
    "The database statement ran past its time limit and was stopped; nothing was changed. "
    "Retry later, or choose a narrower query."
)
_READ_ONLY = (
    "The statement tried to change data or settings on a read-only connection; the "
    "database refused it and nothing was changed."
)
_REFUSED = "The database refused the statement; nothing was changed."
_UNAVAILABLE = "The database is busy or unreachable right now; nothing was changed. Retry shortly."


class _TimedOut(ToolRetryable):
    """The database stopped a statement at its time limit."""

    code = ErrorCode.TIMEOUT


class Cells:
    """Database values as JSON a model can read; long text and bytes are clipped."""

    def __init__(self, max_chars: int) -> None:
        self._max = max_chars
        self.clipped = 0

    def convert(self, value: object, depth: int = 0) -> object:  # noqa: PLR0911 - a case per kind
        """One value as JSON: exact numbers as text where JSON would round them."""
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, str):
            return self._text(value)
        if isinstance(value, int):
            return value if abs(value) <= MAX_SAFE_INTEGER else str(value)
        if isinstance(value, float):
            return value if math.isfinite(value) else str(value)
        if isinstance(value, Decimal):
            return str(value)
        if isinstance(value, date | time_of_day):
            return value.isoformat()
        if isinstance(value, bytes | bytearray | memoryview):
            return self._bytes(bytes(value))
        if isinstance(value, Mapping) and depth < _MAX_DEPTH:
            return {self._text(str(k)): self.convert(v, depth + 1) for k, v in value.items()}
        if isinstance(value, list | tuple) and depth < _MAX_DEPTH:
            return [self.convert(item, depth + 1) for item in value]
        return self._text(str(value))

    def _text(self, text: str) -> str:
        if len(text) <= self._max:
            return text
        self.clipped += 1
        return text[: self._max] + "…"

    def _bytes(self, data: bytes) -> dict[str, object]:
        keep = self._max * 3 // 4
        if len(data) > keep:
            self.clipped += 1
        return {"base64": base64.b64encode(data[:keep]).decode("ascii"), "bytes": len(data)}


@dataclass(slots=True)
class _Guard:
    """What a SQLite session watches: its time limit, and (reading) the actions allowed."""

    stop_at: float
    monotonic: Callable[[], float]
    interrupted: bool = False
    denied: bool = False

    def progress(self) -> int:
        """SQLite's progress handler: non-zero stops the statement."""
        if self.monotonic() >= self.stop_at:
            self.interrupted = True
            return 1
        return 0

    def authorize(self, action: int, *_: object) -> int:
        """SQLite's authorizer: reads, selects, functions and recursion only."""
        if action in _READ_ACTIONS:
            return sqlite3.SQLITE_OK
        self.denied = True
        return sqlite3.SQLITE_DENY


def _state(error: object) -> str | None:
    state = getattr(error, "sqlstate", None) or getattr(error, "sqlite_errorname", None)
    return state if isinstance(state, str) else None


def _signal(exc: sa.exc.DBAPIError, guard: _Guard) -> ToolSignal:
    """The one translation of database errors into what the model is told."""
    state = _state(exc.orig)
    if guard.interrupted or state in _TIMEOUT_STATES:
        return _TimedOut(_TIMED_OUT)
    if guard.denied or state in _READ_ONLY_STATES:
        return ToolFailed(_READ_ONLY)
    if isinstance(exc, sa.exc.OperationalError):
        return ToolRetryable(_UNAVAILABLE)
    return ToolFailed(_REFUSED)


class Database:
    """One engine, and the two ways the tools use it: read-only sessions and write transactions.

    Every session has a time limit: PostgreSQL's `statement_timeout` (and, for writes,
    `idle_in_transaction_session_timeout`), or a SQLite progress handler. Reading
    sessions are read-only in the database itself: `SET TRANSACTION READ ONLY`, or
    SQLite's `query_only` plus an authorizer that allows nothing but reads.
    """

    def __init__(self, config: SqlConfig) -> None:
        self._engine = config.engine
        self._timeout = config.statement_timeout
        self._monotonic = config.monotonic
        self.postgres = config.engine.dialect.name == "postgresql"

    def _budget(self, ctx: ToolContext) -> float:
        budget = min(self._timeout, ctx.remaining())
        if budget <= 0:
            raise _TimedOut(_TIMED_OUT)
        return budget

    def bind_value(self, value: object) -> object:
        """A value as the driver binds it; sqlite3 has no dates, decimals or UUIDs."""
        if self.postgres:
            return value
        if isinstance(value, datetime):
            return value.isoformat(sep=" ")
        if isinstance(value, date | time_of_day):
            return value.isoformat()
        if isinstance(value, Decimal | UUID):
            return str(value)
        if isinstance(value, list):
            return [self.bind_value(item) for item in value]
        return value

    @contextmanager
    def _connection(self) -> Iterator[sa.Connection]:
        try:
            connection = self._engine.connect()
        except sa.exc.TimeoutError as exc:
            raise ToolRetryable(_UNAVAILABLE) from exc
        except sa.exc.DBAPIError as exc:
            raise ToolRetryable(_UNAVAILABLE) from exc
        with connection:
            yield connection

    @contextmanager
    def reading(self, ctx: ToolContext) -> Iterator[sa.Connection]:
        """A read-only transaction, always rolled back."""
        budget = self._budget(ctx)
        guard = _Guard(stop_at=self._monotonic() + budget, monotonic=self._monotonic)
        with self._connection() as conn:
            try:
                with self._limited(conn, guard, budget, read_only=True):
                    yield conn
            except sa.exc.DBAPIError as exc:
                raise _signal(exc, guard) from exc
            finally:
                conn.rollback()

    @contextmanager
    def writing(self, ctx: ToolContext) -> Iterator[sa.Connection]:
        """One write transaction: committed when the block ends, rolled back if it raises.

        A failure of the COMMIT itself is not translated: whether it landed is unknown.
        """
        budget = self._budget(ctx)
        guard = _Guard(stop_at=self._monotonic() + budget, monotonic=self._monotonic)
        with self._connection() as conn:
            transaction = conn.begin()
            try:
                with self._limited(conn, guard, budget, read_only=False):
                    yield conn
            except sa.exc.DBAPIError as exc:
                transaction.rollback()
                raise _signal(exc, guard) from exc
            except BaseException:
                transaction.rollback()
                raise
            transaction.commit()

    @contextmanager
    def _limited(
        self, conn: sa.Connection, guard: _Guard, budget: float, *, read_only: bool
    ) -> Iterator[None]:
        milliseconds = str(max(1, math.ceil(budget * 1000)))
        if self.postgres:
            if read_only:
                conn.exec_driver_sql("SET TRANSACTION READ ONLY")
            setting = sa.text("SELECT set_config(:name, :value, true)")
            conn.execute(setting, {"name": "statement_timeout", "value": milliseconds})
            if not read_only:
                conn.execute(
                    setting,
                    {"name": "idle_in_transaction_session_timeout", "value": milliseconds},
                )
            yield
            return
        raw = conn.connection.driver_connection
        if not isinstance(raw, sqlite3.Connection):  # pragma: no cover - SqlConfig checks
            raise ConfigurationError("the SQLite engine does not use the sqlite3 module")
        if read_only:
            raw.execute("PRAGMA query_only = ON")
            raw.set_authorizer(guard.authorize)
        raw.set_progress_handler(guard.progress, _SQLITE_STEPS)
        try:
            yield
        finally:
            try:
                raw.set_progress_handler(None, 0)
                if read_only:
                    raw.set_authorizer(None)
                    raw.execute("PRAGMA query_only = OFF")
            except sqlite3.Error:  # pragma: no cover - a broken connection is not reused
                conn.invalidate()
