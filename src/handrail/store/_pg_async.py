"""The write path's two statements on PostgreSQL without a worker thread.

Every execution claims its key and later writes its outcome. Through the sync store
each of those is a hop to a worker thread and back, which costs more than the
statement on a busy machine. Here they run on psycopg's async connections, in
autocommit mode, with the SQL the SQLAlchemy statements of `SqlStore` compile to: the
same statements, the same parameters, one round trip each.

Async connections belong to the event loop that opened them, so connections are kept
per loop. Those of a loop that has ended are closed (synchronously, through libpq) the
next time any loop asks, and all of them when the store closes.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
from sqlalchemy.dialects.postgresql import psycopg as psycopg_dialect

from handrail.errors import StoreError
from handrail.store.sql import claim_statement, insert_execution_statement, replace_statements

__all__ = ["AsyncExecutions"]

_DIALECT = psycopg_dialect.dialect()  # type: ignore[no-untyped-call]


@dataclass(frozen=True, slots=True)
class _Compiled:
    """A statement's SQL text and the values of the constants bound into it."""

    sql: bytes
    constants: Mapping[str, Any]


def _compiled(statement: Any) -> _Compiled:  # noqa: ANN401 - a SQLAlchemy statement
    compiled = statement.compile(dialect=_DIALECT)
    constants = {name: value for name, value in compiled.params.items() if value is not None}
    return _Compiled(str(compiled).encode(), constants)


_CLAIM = _compiled(claim_statement("postgresql"))
_INSERT = _compiled(insert_execution_statement("postgresql"))
_REPLACE = {variant: _compiled(statement) for variant, statement in replace_statements().items()}


class AsyncExecutions:
    """Claims and outcome writes of execution records over per-loop async connections."""

    def __init__(self, conninfo: str, *, options: str, per_loop: int) -> None:
        self._conninfo = conninfo
        self._options = options
        self._per_loop = per_loop
        self._lock = threading.Lock()
        self._idle: dict[asyncio.AbstractEventLoop, list[psycopg.AsyncConnection[Any]]] = {}
        self._closed = False

    async def insert(self, row: Mapping[str, Any], *, require_confirmed_plan: bool) -> bool:
        """INSERT ... ON CONFLICT DO NOTHING (optionally only while the plan is CONFIRMED)."""
        return await self._execute(_CLAIM if require_confirmed_plan else _INSERT, row)

    async def replace(self, params: Mapping[str, Any], *, owner: bool, valid: bool) -> bool:
        """The compare-and-set UPDATE of `SqlStore.replace_execution`."""
        return await self._execute(_REPLACE[(owner, valid)], params)

    async def _execute(self, statement: _Compiled, params: Mapping[str, Any]) -> bool:
        connection = await self._acquire()
        healthy = False
        try:
            cursor = await connection.execute(statement.sql, {**statement.constants, **params})
        except psycopg.Error as exc:
            healthy = not isinstance(exc, psycopg.OperationalError)
            raise StoreError(f"execution write failed: {type(exc).__name__}") from exc
        else:
            healthy = True
            return cursor.rowcount == 1
        finally:
            self._release(connection, healthy=healthy)

    async def _acquire(self) -> psycopg.AsyncConnection[Any]:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._closed:
                raise StoreError("the store is closed")
            self._close_ended_loops()
            idle = self._idle.setdefault(loop, [])
            if idle:
                return idle.pop()
        try:
            return await psycopg.AsyncConnection.connect(
                self._conninfo,
                autocommit=True,
                options=self._options,
            )
        except psycopg.Error as exc:
            raise StoreError(f"connection failed: {type(exc).__name__}") from exc

    def _release(self, connection: psycopg.AsyncConnection[Any], *, healthy: bool) -> None:
        loop = asyncio.get_running_loop()
        with self._lock:
            idle = self._idle.setdefault(loop, [])
            if healthy and not self._closed and len(idle) < self._per_loop:
                idle.append(connection)
                return
        _finish(connection)

    def _close_ended_loops(self) -> None:
        for loop in [loop for loop in self._idle if loop.is_closed()]:
            for connection in self._idle.pop(loop):
                _finish(connection)

    def close(self) -> None:
        """Close every idle connection of every loop."""
        with self._lock:
            self._closed = True
            for connections in self._idle.values():
                for connection in connections:
                    _finish(connection)
            self._idle.clear()


def _finish(connection: psycopg.AsyncConnection[Any]) -> None:
    # libpq's finish is synchronous: it works whether or not the connection's loop runs.
    connection.pgconn.finish()
