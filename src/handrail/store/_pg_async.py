"""The write path's two statements on PostgreSQL without a worker thread, on a bounded pool.

Every execution claims its key and later writes its outcome. Through the sync store
each of those is a hop to a worker thread and back, which costs more than the
statement on a busy machine. Here they run on psycopg's async connections, in
autocommit mode, with the SQL the SQLAlchemy statements of `SqlStore` compile to: the
same statements, the same parameters, one round trip each.

Async connections belong to the event loop that opened them, so idle connections are
kept per loop; but one bound covers them all: a store never holds more than
`max_connections` open at once, whatever the number of loops or concurrent calls. A
call that finds none free waits, first come first served, for at most its own wait
(a deadline) and the pool's timeout, then fails with a StoreError; it never opens
one more. Connections of a loop that has ended, or idle on another loop while this
one waits, are closed (synchronously, through libpq) to make room. This module never
retries a statement: whether one that failed took effect is for the caller to judge.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
from sqlalchemy.dialects.postgresql import psycopg as psycopg_dialect

from handrail.errors import StoreError
from handrail.store._statements import (
    claim_statement,
    insert_execution_statement,
    replace_statements,
)

__all__ = ["AsyncExecutions", "BatchStats", "PoolStats"]

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

_Connection = psycopg.AsyncConnection[Any]
_PIPELINE = psycopg.Pipeline.is_supported()

CLAIM = "claim"
OUTCOME = "outcome"

BeforeCommit = Callable[[str, int], None]
"""Called right before a statement or batch commits: (kind, members). For tests."""


@dataclass(frozen=True, kw_only=True, slots=True)
class BatchStats:
    """Since the store opened: transactions of several members, their members, the largest."""

    batches: int
    members: int
    largest: int


@dataclass(frozen=True, slots=True)
class _Job:
    """A statement to run: its kind (claims and outcomes batch apart), SQL and parameters."""

    kind: str
    statement: _Compiled
    params: Mapping[str, Any]

    @property
    def key(self) -> str:
        return str(self.params.get("idempotency_key") or self.params.get("k_key") or "")


@dataclass(frozen=True, kw_only=True, slots=True)
class PoolStats:
    """A snapshot of the async pool: connections open (idle or lent), idle, and waiters."""

    open: int
    idle: int
    waiting: int
    max_connections: int


class _Slot:
    """Permission to open one connection: the bound counted it already."""


_SLOT = _Slot()


class _Batched:
    """The waiter's statement was taken into another call's batch; its answer follows."""


_BATCHED = _Batched()


class _Waiter:
    """A call waiting for a connection, on its own loop; granted under the pool's lock."""

    __slots__ = ("answer", "done", "future", "grant", "job", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop, job: _Job | None = None) -> None:
        self.loop = loop
        self.job = job
        self.future: asyncio.Future[None] = loop.create_future()
        self.grant: _Connection | _Slot | _Batched | None = None
        self.done: asyncio.Future[None] | None = None
        self.answer: bool | StoreError | None = None

    def result(self) -> bool:
        """The answer of a batched statement."""
        if isinstance(self.answer, StoreError):
            raise self.answer
        return bool(self.answer)


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class AsyncExecutions:
    """Claims and outcome writes of execution records over a bounded async pool."""

    def __init__(
        self,
        conninfo: str,
        *,
        options: str,
        max_connections: int,
        timeout: float,
        application_name: str,
    ) -> None:
        self._conninfo = conninfo
        self._options = options
        self._max = max_connections
        self._timeout = timeout
        self._application_name = application_name
        self._lock = threading.Lock()
        self._idle: dict[asyncio.AbstractEventLoop, list[_Connection]] = {}
        self._waiters: deque[_Waiter] = deque()
        self._open = 0
        self._closed = False
        self._batches = 0
        self._members = 0
        self._largest = 0
        self.before_commit: BeforeCommit | None = None

    @property
    def max_connections(self) -> int:
        """The most connections this pool holds open at once."""
        return self._max

    def stats(self) -> PoolStats:
        """How many connections are open, idle and waited for, now."""
        with self._lock:
            return PoolStats(
                open=self._open,
                idle=sum(len(idle) for idle in self._idle.values()),
                waiting=len(self._waiters),
                max_connections=self._max,
            )

    async def insert(
        self,
        row: Mapping[str, Any],
        *,
        require_confirmed_plan: bool,
        wait: float = math.inf,
    ) -> bool:
        """INSERT ... ON CONFLICT DO NOTHING (optionally only while the plan is CONFIRMED).

        `wait` bounds the wait for a free connection (the pool's timeout bounds it too).
        """
        statement = _CLAIM if require_confirmed_plan else _INSERT
        return await self._execute(_Job(CLAIM, statement, {**statement.constants, **row}), wait)

    async def replace(self, params: Mapping[str, Any], *, owner: bool, valid: bool) -> bool:
        """The compare-and-set UPDATE of `SqlStore.replace_execution`."""
        statement = _REPLACE[(owner, valid)]
        job = _Job(OUTCOME, statement, {**statement.constants, **params})
        return await self._execute(job, math.inf)

    def batch_stats(self) -> BatchStats:
        """Transactions of several members committed so far, their members, the largest."""
        return BatchStats(batches=self._batches, members=self._members, largest=self._largest)

    async def _execute(self, job: _Job, wait: float) -> bool:
        """Run `job` on a connection, with the calls of its kind that wait for one.

        Group commit: a call that holds a connection takes along every call of the same
        kind on its loop still waiting for one (they queued while the connections were
        busy, i.e. while earlier commits were in flight) and runs them all in one
        transaction; each is answered only after COMMIT returned. A call that finds a
        connection free waits for nobody: alone, it is one autocommitted statement.
        """
        got = await self._acquire(min(wait, self._timeout), job)
        if isinstance(got, _Waiter):
            return got.result()
        connection = got
        followers = self._followers(job.kind)
        if followers:
            healthy = False
            try:
                healthy, mine = await self._together(connection, job, followers)
            finally:
                for waiter in followers:
                    if waiter.answer is None:
                        _tell(waiter, StoreError("execution write failed: interrupted"))
                self._release(connection, healthy=healthy and not connection.broken)
            if isinstance(mine, StoreError):
                raise mine
            return mine
        healthy = False
        try:
            if self.before_commit is not None:
                self.before_commit(job.kind, 1)
            cursor = await connection.execute(job.statement.sql, job.params)
        except psycopg.Error as exc:
            healthy = not isinstance(exc, psycopg.OperationalError)
            if not healthy:
                # A lost connection usually means the others are lost too (a restart,
                # a failover): close the idle ones instead of failing on each in turn.
                self._discard_idle()
            raise StoreError(f"execution write failed: {type(exc).__name__}") from exc
        else:
            healthy = True
            return cursor.rowcount == 1
        finally:
            self._release(connection, healthy=healthy and not connection.broken)

    # --- the bound -------------------------------------------------------------------------------

    def _followers(self, kind: str) -> list[_Waiter]:
        """Take this loop's waiters of `kind` out of the queue, into the caller's batch."""
        loop = asyncio.get_running_loop()
        with self._lock:
            taken = [
                w
                for w in self._waiters
                if w.loop is loop and w.job is not None and w.job.kind == kind
            ]
            for waiter in taken:
                self._waiters.remove(waiter)
                waiter.grant = _BATCHED
                waiter.done = loop.create_future()
        return taken

    async def _together(
        self, connection: _Connection, own: _Job, followers: list[_Waiter]
    ) -> tuple[bool, bool | StoreError]:
        """One transaction for a batch; if a statement fails, each member runs alone.

        BEGIN and the statements go in one pipeline, ordered by statement and then by
        key (two processes' batches then take row locks in the same order); COMMIT is
        sent only after each statement succeeded. Answers the followers; returns whether
        the connection is still usable, and the caller's own answer.
        """
        members: list[tuple[_Job, _Waiter | None]] = [(own, None)]
        members += [(w.job, w) for w in followers if w.job is not None]
        members.sort(key=lambda m: (m[0].statement.sql, m[0].key))
        try:
            counts = await self._statements(connection, [job for job, _ in members])
        except psycopg.Error as exc:
            if connection.broken:
                # COMMIT was never sent: nothing of the batch is on disk.
                self._discard_idle()
                return False, _tell_all(members, _failed(exc))
            await connection.execute(b"ROLLBACK")
            # Nothing of the batch committed: each member runs alone, for its own answer.
            mine: bool | StoreError = False
            for job, waiter in members:
                result = await self._single(connection, job)
                if waiter is None:
                    mine = result
                else:
                    _tell(waiter, result)
            return not connection.broken, mine
        results = [count == 1 for count in counts]
        try:
            if self.before_commit is not None:
                self.before_commit(own.kind, len(members))
            await connection.execute(b"COMMIT")
        except psycopg.Error as exc:
            # Whether it committed is unknown, as when a lone statement's COMMIT fails.
            if connection.broken:
                self._discard_idle()
            elif connection.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                await connection.execute(b"ROLLBACK")
            return not connection.broken, _tell_all(members, _failed(exc))
        self._batches += 1
        self._members += len(members)
        self._largest = max(self._largest, len(members))
        mine = False
        for (_, waiter), result in zip(members, results, strict=True):
            if waiter is None:
                mine = result
            else:
                _tell(waiter, result)
        return True, mine

    @staticmethod
    async def _statements(connection: _Connection, jobs: list[_Job]) -> list[int]:
        """BEGIN and each job's statement, pipelined where libpq can; their row counts.

        Jobs of one statement (adjacent once sorted) go as one `executemany`, which
        keeps each statement's result: a row count per job, in order, as `execute`
        of each would give, for about half the client's CPU per statement.
        """
        if not _PIPELINE:  # pragma: no cover - libpq older than 14
            await connection.execute(b"BEGIN")
            return [(await connection.execute(j.statement.sql, j.params)).rowcount for j in jobs]
        cursors = []
        async with connection.pipeline():
            await connection.execute(b"BEGIN")
            for sql, group in itertools.groupby(jobs, key=lambda j: j.statement.sql):
                cursor = connection.cursor()
                await cursor.executemany(sql, [j.params for j in group], returning=True)
                cursors.append(cursor)
        counts: list[int] = []
        for cursor in cursors:
            counts.append(cursor.rowcount)
            while cursor.nextset():
                counts.append(cursor.rowcount)
        if len(counts) != len(jobs):  # pragma: no cover - one result per statement sent
            raise psycopg.InterfaceError("a batch's results do not match its statements")
        return counts

    @staticmethod
    async def _single(connection: _Connection, job: _Job) -> bool | StoreError:
        try:
            cursor = await connection.execute(job.statement.sql, job.params)
        except psycopg.Error as exc:
            return _failed(exc)
        return cursor.rowcount == 1

    async def _acquire(self, wait: float, job: _Job | None = None) -> _Connection | _Waiter:
        loop = asyncio.get_running_loop()
        waiter: _Waiter | None = None
        with self._lock:
            if self._closed:
                raise StoreError("the store is closed")
            self._close_ended_loops()
            idle = self._idle.get(loop)
            grant: _Connection | _Slot | None = None
            if idle:
                grant = idle.pop()
            elif self._open < self._max or self._close_idle_elsewhere(loop):
                self._open += 1
                grant = _SLOT
            else:
                waiter = _Waiter(loop, job)
                self._waiters.append(waiter)
        if waiter is not None:
            granted = await self._wait(waiter, wait)
            if isinstance(granted, _Batched):
                return waiter
            grant = granted
            if self._closed:
                self._give_back(grant, loop)
                raise StoreError("the store is closed")
        if grant is None or isinstance(grant, _Slot):
            return await self._connect()
        return grant

    async def _wait(self, waiter: _Waiter, wait: float) -> _Connection | _Slot | _Batched:
        try:
            async with asyncio.timeout(max(0.0, wait) if math.isfinite(wait) else None):
                await waiter.future
        except TimeoutError:
            with self._lock:
                if waiter.grant is None:
                    self._waiters.remove(waiter)
                    msg = f"no database connection was free within {wait:.3f}s"
                    raise StoreError(msg) from None
                done = waiter.done
            if done is not None and waiter.answer is None:
                # Taken into a batch in flight: its statement may commit; wait for it.
                await done
        except asyncio.CancelledError:
            with self._lock:
                granted = waiter.grant
                if granted is None:
                    self._waiters.remove(waiter)
            if granted is not None and not isinstance(granted, _Batched):
                self._give_back(granted, waiter.loop)
            raise
        granted = waiter.grant
        if granted is None:  # pragma: no cover - the future is set only after a grant
            raise StoreError("woken without a connection")
        return granted

    async def _connect(self) -> _Connection:
        """Open a connection for a slot the bound already counted."""
        try:
            return await psycopg.AsyncConnection.connect(
                self._conninfo,
                autocommit=True,
                options=self._options,
                application_name=self._application_name,
            )
        except psycopg.Error as exc:
            with self._lock:
                self._slot_freed()
            raise StoreError(f"connection failed: {type(exc).__name__}") from exc
        except BaseException:
            with self._lock:
                self._slot_freed()
            raise

    def _release(self, connection: _Connection, *, healthy: bool) -> None:
        self._give_back(connection, asyncio.get_running_loop(), healthy=healthy)

    def _give_back(
        self,
        grant: _Connection | _Slot,
        loop: asyncio.AbstractEventLoop,
        *,
        healthy: bool = True,
    ) -> None:
        """Hand a connection (or an unused slot) to the next waiter, or keep it idle.

        A waiter on the connection's own loop takes the connection itself; one on
        another loop cannot use it, so it is closed and its slot handed over.
        """
        with self._lock:
            if isinstance(grant, _Slot):
                self._slot_freed()
                return
            if not healthy or self._closed:
                _finish(grant)
                self._slot_freed()
                return
            same = next((w for w in self._waiters if w.loop is loop), None)
            if same is not None:
                self._waiters.remove(same)
                self._grant(same, grant)
            elif self._waiters:
                _finish(grant)
                self._grant(self._waiters.popleft(), _SLOT)
            else:
                self._idle.setdefault(loop, []).append(grant)

    # --- under the lock ------------------------------------------------------------------------

    def _slot_freed(self) -> None:
        """One connection fewer is open: its slot goes to the first waiter, if any."""
        if self._waiters and not self._closed:
            self._grant(self._waiters.popleft(), _SLOT)
            return
        self._open -= 1

    def _grant(self, waiter: _Waiter, grant: _Connection | _Slot) -> None:
        waiter.grant = grant
        try:
            waiter.loop.call_soon_threadsafe(_wake, waiter.future)
        except RuntimeError:  # pragma: no cover - its loop closed while it waited
            waiter.grant = None
            if not isinstance(grant, _Slot):
                _finish(grant)
            self._slot_freed()

    def _close_ended_loops(self) -> None:
        for waiter in [w for w in self._waiters if w.loop.is_closed()]:
            self._waiters.remove(waiter)  # pragma: no cover - a loop left without its task
        for loop in [loop for loop in self._idle if loop.is_closed()]:
            for connection in self._idle.pop(loop):
                _finish(connection)
                self._open -= 1

    def _discard_idle(self) -> None:
        with self._lock:
            for connections in self._idle.values():
                while connections:
                    _finish(connections.pop())
                    self._slot_freed()

    def _close_idle_elsewhere(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Close one idle connection of another loop, keeping its slot for `loop`."""
        for other, idle in self._idle.items():
            if other is not loop and idle:
                _finish(idle.pop())
                self._open -= 1
                return True
        return False

    def close(self) -> None:
        """Close every idle connection and fail every waiter; lent ones close on return."""
        with self._lock:
            self._closed = True
            for connections in self._idle.values():
                for connection in connections:
                    _finish(connection)
                    self._open -= 1
            self._idle.clear()
            while self._waiters:
                self._open += 1
                self._grant(self._waiters.popleft(), _SLOT)


def _failed(exc: BaseException) -> StoreError:
    return StoreError(f"execution write failed: {type(exc).__name__}")


def _tell(waiter: _Waiter, result: bool | StoreError) -> None:
    """Answer a batched waiter (on its loop, the one of the batch) and wake it."""
    waiter.answer = result
    _wake(waiter.future)
    if waiter.done is not None:
        _wake(waiter.done)


def _tell_all(members: list[tuple[_Job, _Waiter | None]], error: StoreError) -> StoreError:
    for _, waiter in members:
        if waiter is not None:
            _tell(waiter, error)
    return error


def _finish(connection: _Connection) -> None:
    # libpq's finish is synchronous: it works whether or not the connection's loop runs.
    connection.pgconn.finish()
