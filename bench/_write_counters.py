"""What one execution of the write path costs in SQL, commits and hops, counted at the store.

Owns the profiling counters of bench/write_throughput.py. Under group commit the write
path's claims and outcomes no longer go through the store's sync methods: on SQLite they
are queued to the store's writer thread, on PostgreSQL they run on the store's async
connections. So the counters sit where those statements are sent: on the writer thread's
own sqlite3 connection (a proxy around it, which also times its work on that thread, which
cProfile does not see), and on each async psycopg connection the store opens. A hop is one
submission to the writer thread (SQLite) or one checkout of an async connection
(PostgreSQL); hops to worker threads (`asyncio.to_thread`) are counted by the caller.
Never changes what a statement does or when it commits.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["SqlCounts", "count_store_sql"]

_TRANSACTION = ("BEGIN", "COMMIT", "ROLLBACK", "END")


class SqlCounts:
    """Running totals, in the order an execution's statements were sent."""

    def __init__(self) -> None:
        self.statements = 0
        """Statements other than BEGIN, COMMIT and ROLLBACK."""
        self.begins = 0
        self.commits = 0
        """Explicit COMMITs plus statements autocommitted (sent outside a transaction)."""
        self.rollbacks = 0
        self.hops = 0
        """Submissions to the writer thread (SQLite) or async connection checkouts (PG)."""
        self.busy_ns = 0
        """Time inside the driver's execute on the writer thread (SQLite) or awaited (PG)."""
        self._open = False

    def reset(self) -> None:
        """Start counting afresh (a transaction in flight stays open)."""
        self.statements = self.begins = self.commits = self.rollbacks = self.hops = 0
        self.busy_ns = 0

    def sent(self, sql: str | bytes, elapsed_ns: int) -> None:
        """One statement went to the database and came back after `elapsed_ns`."""
        text = sql.decode() if isinstance(sql, bytes) else sql
        verb = text.lstrip().split(None, 1)[0].upper() if text.strip() else ""
        self.busy_ns += elapsed_ns
        if verb == "BEGIN":
            self.begins += 1
            self._open = True
        elif verb in ("COMMIT", "END"):
            self.commits += 1
            self._open = False
        elif verb == "ROLLBACK":
            self.rollbacks += 1
            self._open = False
        else:
            self.statements += 1
            if not self._open:
                self.commits += 1

    def per_execution(self, executions: int) -> str:
        """The counts divided by `executions`, as one line."""
        n = max(1, executions)
        return (
            f"statements {self.statements / n:.2f}, BEGIN {self.begins / n:.2f}, "
            f"commits {self.commits / n:.2f} (COMMIT or autocommitted), "
            f"ROLLBACK {self.rollbacks / n:.2f}, hops {self.hops / n:.2f}, "
            f"in the driver {self.busy_ns / n / 1e3:,.0f} µs"
        )


class _TimedSqlite:
    """The writer thread's sqlite3 connection, each `execute` counted and timed."""

    def __init__(self, connection: Any, counts: SqlCounts) -> None:
        self._connection = connection
        self._counts = counts

    def execute(self, sql: str, params: Any = ()) -> Any:
        started = time.perf_counter_ns()
        try:
            return self._connection.execute(sql, params)
        finally:
            self._counts.sent(sql, time.perf_counter_ns() - started)

    def rollback(self) -> None:
        self._counts.sent("ROLLBACK", 0)
        self._connection.rollback()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._connection, name)


def _count_sqlite(fast: Any, counts: SqlCounts) -> None:
    connect: Callable[[], Any] = fast._connect  # noqa: SLF001
    submit = fast._submit  # noqa: SLF001

    def counted_connect() -> Any:
        return _TimedSqlite(connect(), counts)

    async def counted_submit(*args: Any, **kwargs: Any) -> Any:
        counts.hops += 1
        return await submit(*args, **kwargs)

    fast._connect = counted_connect  # noqa: SLF001
    fast._submit = counted_submit  # noqa: SLF001


def _count_postgres(fast: Any, counts: SqlCounts) -> None:
    connect = fast._connect  # noqa: SLF001
    acquire = fast._acquire  # noqa: SLF001

    async def counted_connect() -> Any:
        connection = await connect()
        execute = connection.execute

        async def timed(query: Any, params: Any = None, **kwargs: Any) -> Any:
            started = time.perf_counter_ns()
            try:
                return await execute(query, params, **kwargs)
            finally:
                counts.sent(query, time.perf_counter_ns() - started)

        connection.execute = timed
        return connection

    async def counted_acquire(*args: Any, **kwargs: Any) -> Any:
        counts.hops += 1
        return await acquire(*args, **kwargs)

    fast._connect = counted_connect  # noqa: SLF001
    fast._acquire = counted_acquire  # noqa: SLF001


def count_store_sql(store: Any) -> SqlCounts:
    """Count (and time) the write path's statements on `store` from its next connection on.

    Call before the store's first claim: connections opened earlier are not counted.
    """
    counts = SqlCounts()
    fast = store.async_executions
    if fast is None:
        return counts
    if hasattr(fast, "_submit"):
        _count_sqlite(fast, counts)
    else:
        _count_postgres(fast, counts)
    return counts
