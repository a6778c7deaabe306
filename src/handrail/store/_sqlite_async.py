"""The write path's claims and outcomes on SQLite, group-committed by one writer thread.

Every execution claims its key and later writes its outcome, each a commit, and on
SQLite each commit is an fsync of the write-ahead log. One thread per store owns a
connection for these two statements. It takes whatever claims arrived while its
previous commit was in flight and commits them in one transaction (one fsync); then
the same for outcomes, separately. A lone writer waits for nobody: a batch of one
runs as a single autocommitted statement, as the store's own method would.

The contract stays the one of `SqlStore.insert_execution` and `replace_execution`:
the same SQL (compiled by SQLAlchemy for SQLite, with its type conversions), one
answer per statement, and a caller learns its answer only after the transaction that
holds its row has committed. A statement that fails in a batch rolls the batch back
(nothing of it committed), and each member then runs alone, getting exactly the answer
it would have had alone. A failed COMMIT fails every member with a StoreError: the
caller cannot know whether its row is on disk, as with a lone statement. Nothing
here repeats a statement that may have committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy.dialects import sqlite as sqlite_dialect

from handrail.errors import StoreError
from handrail.store._statements import (
    claim_statement,
    insert_execution_statement,
    replace_statements,
)

__all__ = ["BatchStats", "SqliteExecutions"]

_DIALECT = sqlite_dialect.dialect(paramstyle="named")

CLAIM = "claim"
OUTCOME = "outcome"


@dataclass(frozen=True, slots=True)
class _Compiled:
    """A statement's SQL, its bound constants and the conversions of its parameters."""

    sql: str
    constants: Mapping[str, Any]
    convert: Mapping[str, Callable[[Any], Any]]

    def params(self, values: Mapping[str, Any]) -> dict[str, Any]:
        params = {**self.constants, **values}
        for name, convert in self.convert.items():
            value = params.get(name)
            if value is not None:
                params[name] = convert(value)
        return params


def _compiled(statement: Any) -> _Compiled:  # noqa: ANN401 - a SQLAlchemy statement
    compiled = statement.compile(dialect=_DIALECT)
    constants = {name: value for name, value in compiled.params.items() if value is not None}
    convert: dict[str, Callable[[Any], Any]] = {}
    for name, bind in compiled.binds.items():
        processor = bind.type.dialect_impl(_DIALECT).bind_processor(_DIALECT)
        if processor is not None:
            convert[name] = processor
    return _Compiled(str(compiled), constants, convert)


_CLAIM = _compiled(claim_statement("sqlite"))
_INSERT = _compiled(insert_execution_statement("sqlite"))
_REPLACE = {variant: _compiled(statement) for variant, statement in replace_statements().items()}


@dataclass(frozen=True, kw_only=True, slots=True)
class BatchStats:
    """Totals since the store opened: transactions committed by kind, and their members."""

    batches: int
    members: int
    largest: int


class _Item:
    """One statement waiting for its batch; its answer goes back to its caller's loop."""

    __slots__ = ("deadline", "future", "kind", "loop", "params", "sql")

    def __init__(
        self,
        kind: str,
        sql: str,
        params: dict[str, Any],
        deadline: float,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.kind = kind
        self.sql = sql
        self.params = params
        self.deadline = deadline
        self.loop = loop
        self.future: asyncio.Future[bool] = loop.create_future()

    def answer(self, result: bool | BaseException) -> None:
        with contextlib.suppress(RuntimeError):  # its loop closed while it waited
            self.loop.call_soon_threadsafe(_settle, self.future, result)


def _settle(future: asyncio.Future[bool], result: bool | BaseException) -> None:
    if future.done():
        return
    if isinstance(result, BaseException):
        future.set_exception(result)
    else:
        future.set_result(result)


_STOP = object()

BeforeCommit = Callable[[str, int], None]
"""Called on the writer thread right before a batch commits: (kind, members). For tests."""


class SqliteExecutions:
    """Claims and outcome writes of one SQLite file, group-committed by one thread."""

    def __init__(self, connect: Callable[[], sqlite3.Connection]) -> None:
        """`connect` opens a connection with the store's pragmas, in autocommit mode."""
        self._connect = connect
        self._queue: queue.SimpleQueue[_Item | object] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._batches = 0
        self._members = 0
        self._largest = 0
        self.before_commit: BeforeCommit | None = None

    def batch_stats(self) -> BatchStats:
        """How many multi-member transactions committed, with how many members in all."""
        return BatchStats(batches=self._batches, members=self._members, largest=self._largest)

    async def insert(
        self,
        row: Mapping[str, Any],
        *,
        require_confirmed_plan: bool,
        wait: float = math.inf,
    ) -> bool:
        """INSERT ... ON CONFLICT DO NOTHING (optionally only while the plan is CONFIRMED).

        `wait` is accepted for the interface; as with the store's own method, a claim
        is not bounded by it here (there is no pool to wait for).
        """
        statement = _CLAIM if require_confirmed_plan else _INSERT
        return await self._submit(CLAIM, statement, row, wait)

    async def replace(self, params: Mapping[str, Any], *, owner: bool, valid: bool) -> bool:
        """The compare-and-set UPDATE of `SqlStore.replace_execution`."""
        return await self._submit(OUTCOME, _REPLACE[(owner, valid)], params, math.inf)

    async def _submit(
        self, kind: str, statement: _Compiled, values: Mapping[str, Any], wait: float
    ) -> bool:
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + wait if math.isfinite(wait) else math.inf
        item = _Item(kind, statement.sql, statement.params(values), deadline, loop)
        self._start()
        self._queue.put(item)
        return await item.future

    def _start(self) -> None:
        if self._thread is not None:
            return
        with self._lock:
            if self._closed:
                raise StoreError("the store is closed")
            if self._thread is None:
                thread = threading.Thread(
                    target=self._serve, name="handrail-sqlite-writer", daemon=True
                )
                thread.start()
                self._thread = thread

    def close(self) -> None:
        """Commit what is queued, then stop the writer thread."""
        with self._lock:
            self._closed = True
            thread = self._thread
        if thread is not None:
            self._queue.put(_STOP)
            thread.join()

    # --- the writer thread -------------------------------------------------------------------

    def _serve(self) -> None:
        connection: sqlite3.Connection | None = None
        stopping = False
        while not stopping:
            batch: list[_Item] = []
            first = self._queue.get()
            while True:
                if first is _STOP:
                    stopping = True
                elif isinstance(first, _Item):
                    batch.append(first)
                try:
                    first = self._queue.get_nowait()
                except queue.Empty:
                    break
            if not batch:
                continue
            try:
                if connection is None:
                    connection = self._connect()
            except sqlite3.Error as exc:
                _fail(batch, StoreError(f"execution write failed: {type(exc).__name__}"))
                continue
            for kind in (CLAIM, OUTCOME):
                members = [item for item in batch if item.kind == kind]
                if not members:
                    continue
                try:
                    self._commit(connection, kind, members)
                except Exception as exc:  # noqa: BLE001 - every waiter must be answered
                    _rollback(connection)
                    _fail(members, StoreError(f"execution write failed: {type(exc).__name__}"))
        if connection is not None:
            connection.close()

    def _commit(self, connection: sqlite3.Connection, kind: str, items: list[_Item]) -> None:
        # A caller that stopped waiting before its batch began: its statement never runs.
        members = [item for item in items if not item.future.cancelled()]
        if len(members) == 1:
            self._alone(connection, members[0], kind)
            return
        if not members:
            return
        results: list[bool] = []
        try:
            connection.execute("BEGIN IMMEDIATE")
            try:
                results.extend(
                    connection.execute(item.sql, item.params).rowcount == 1 for item in members
                )
            except sqlite3.Error:
                # Nothing of the batch committed: each member runs alone instead.
                connection.rollback()
                for item in members:
                    self._alone(connection, item, kind)
                return
            if self.before_commit is not None:
                self.before_commit(kind, len(members))
            connection.execute("COMMIT")
        except sqlite3.Error as exc:
            _rollback(connection)
            _fail(members, StoreError(f"execution write failed: {type(exc).__name__}"))
            return
        self._batches += 1
        self._members += len(members)
        self._largest = max(self._largest, len(members))
        for item, result in zip(members, results, strict=True):
            item.answer(result)

    def _alone(self, connection: sqlite3.Connection, item: _Item, kind: str) -> None:
        """One statement, autocommitted: its answer is the one of `SqlStore`'s method."""
        try:
            if self.before_commit is not None:
                self.before_commit(kind, 1)
            result: bool | BaseException = connection.execute(item.sql, item.params).rowcount == 1
        except sqlite3.Error as exc:
            _rollback(connection)
            result = StoreError(f"execution write failed: {type(exc).__name__}")
        item.answer(result)


def _fail(items: list[_Item], error: StoreError) -> None:
    for item in items:
        item.answer(error)


def _rollback(connection: sqlite3.Connection) -> None:
    if connection.in_transaction:
        with contextlib.suppress(sqlite3.Error):  # the connection is gone
            connection.rollback()
