"""Durable executions per second of the write path, against a bare two-commit loop.

Timed: `Writes.execute_plan(plan_id, principal)` of a trivial EXTERNAL_WRITE tool,
`record_write(n) -> {"ok": True, "n": n}`, each call on a plan of its own that was
proposed through the gate, given a token and confirmed before the clock started. Audit
is off. One execution checks the plan (its immutable content is known to the process
that proposed it), claims the key with INSERT ... SELECT ... ON CONFLICT DO NOTHING
that also requires the plan to be CONFIRMED (a commit), calls the tool, and
compare-and-sets the record to SUCCEEDED (a commit); the plan then reads as EXECUTED.

Baseline, same run, same kind of database, same durability: a bare loop on the raw
driver (sqlite3, or psycopg in autocommit mode) that per execution does INSERT ... ON
CONFLICT DO NOTHING (a commit), calls the same trivial function, and UPDATE ... SET
status='SUCCEEDED', result=... WHERE key=... (a commit).

Backends: SQLite files (WAL, synchronous=FULL) and PostgreSQL (synchronous_commit=on,
in a scratch database created for the run and dropped after, unless --pg-url names
one). Clients: OS processes started with multiprocessing 'spawn', each executing its
share of a round one execution after the other. Everything before the first barrier
of a round (plans, tokens, confirmations, keys, connections) is not timed.

Method: per backend and client count, a warm-up, then R rounds of N executions per
path. A round alternates the paths slice by slice (S slices each, the order flipping
every slice and every round), so that a busy neighbour or a slow disk moment lands on
both; each slice starts at a barrier of all clients and ends when the last one
finishes, and a path's throughput in the round is N over the sum of its slices' wall
times. Reported: the median ops/s of each path over the rounds and the median of the
same-round ratios handrail / bare, against the target (>= 0.80, issue 15). Every round checks
that each worker's tool ran once per execution and that every execution SUCCEEDED;
at the end the database is asked how many executions SUCCEEDED and how many plans are
EXECUTED. Nothing here asserts a time.

    .venv/bin/python bench/write_throughput.py                   # sqlite + postgres, 1 and 8
    .venv/bin/python bench/write_throughput.py --backends sqlite --clients 1 --json out.json
    .venv/bin/python bench/write_throughput.py --smoke            # tiny sizes, seconds
    .venv/bin/python bench/write_throughput.py --profile          # cProfile of one client
    .venv/bin/python bench/write_throughput.py --concurrent 64    # the service's case

The service's case (--concurrent C): one process, C asyncio tasks each executing its
share of the plans through one store (group commit: claims that queue while a commit
is in flight share the next transaction; PostgreSQL's async pool bounded to 8),
against the bare loop in 8 threads of the same process, each on its own connection.
Rounds alternate the two paths (order flipping); reported: median ops/s and the median
of same-round ratios, against the target (>= 1.2).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import importlib.metadata
import io
import json
import multiprocessing
import os
import platform
import pstats
import queue
import secrets
import sqlite3
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

import psycopg
import sqlalchemy as sa
from _write_counters import count_store_sql
from psycopg import sql

from handrail import (
    ErrorCode,
    ExecutionStatus,
    Gate,
    Keyring,
    Principal,
    Registry,
    RiskLevel,
    SideEffect,
    SigningKey,
    Status,
    ToolCall,
    ToolContext,
    Writes,
    open_store,
    tool,
)
from handrail.plans import PlanState
from handrail.spec import (
    ConfirmationMode,
    ConfirmationPolicy,
    IdempotencyMode,
    IdempotencyPolicy,
)

HANDRAIL = "handrail"
BARE = "bare"
PATHS = (HANDRAIL, BARE)
TARGET_RATIO = 0.80
TOOL = "record_write"
PG_HOST = "127.0.0.1"
PG_PORT = 5432
PG_USER = "postgres"
PG_ADMIN_DB = "postgres"
PG_OPTIONS = "-c synchronous_commit=on"
KEYRING_SECRET = b"write-throughput-bench-secret-32b"
BARRIER_TIMEOUT_S = 600.0
POLL_S = 0.5

CALLS: dict[str, list[str]] = {HANDRAIL: [], BARE: []}
"""Per path, the keys its tool saw in this process since the last task."""


# --- the tool under test ------------------------------------------------------------------------


@tool(
    risk=RiskLevel.L2_REVERSIBLE_WRITE,
    side_effect=SideEffect.EXTERNAL_WRITE,
    idempotency=IdempotencyPolicy(mode=IdempotencyMode.PLAN),
    confirmation=ConfirmationPolicy(mode=ConfirmationMode.CONFIRM, ttl_seconds=3600),
)
async def record_write(ctx: ToolContext, n: int) -> dict[str, object]:
    """Record one write downstream (here: in this process's call list)."""
    CALLS[HANDRAIL].append(ctx.idempotency_key or "")
    return {"ok": True, "n": n}


def bare_write(key: str, n: int) -> dict[str, object]:
    """The baseline's tool: the same work without a context."""
    CALLS[BARE].append(key)
    return {"ok": True, "n": n}


def _registry() -> Registry:
    registry = Registry()
    registry.register(record_write)
    return registry


# --- where one configuration's data lives -------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Target:
    """One backend and client count: its handrail store, bare database and tenant."""

    backend: str
    clients: int
    store_url: str
    """A SQLite file path or a postgresql:// URL, for open_store."""
    bare_url: str
    """A SQLite file path or a postgresql:// URL, for the raw driver."""
    tenant: str
    """Unique per run and configuration: what the final database check counts by."""
    key_prefix: str
    """Unique per run and configuration: the bare path's keys start with it."""

    @property
    def key(self) -> str:
        """The row's key in the results: `sqlite_1`, `postgres_8`, ..."""
        return f"{self.backend}_{self.clients}"


@dataclass(frozen=True, kw_only=True)
class Task:
    """One worker's part of one round: `count` executions of each path, in slices.

    Slice s runs the paths in `order` when s is even and reversed when it is odd.
    """

    label: str
    count: int
    slices: int
    order: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Span:
    """When one worker ran one slice of one path (perf_counter_ns, shared across processes)."""

    path: str
    slice: int
    started_ns: int
    finished_ns: int


@dataclass(frozen=True, kw_only=True)
class Done:
    """What one worker reports for one task; per-path dicts are keyed by path."""

    worker: int
    count: int = 0
    spans: tuple[Span, ...] = ()
    succeeded: dict[str, int] = field(default_factory=dict)
    tool_calls: dict[str, int] = field(default_factory=dict)
    distinct_calls: dict[str, int] = field(default_factory=dict)
    error: str | None = None


@dataclass(kw_only=True)
class Row:
    """One configuration's samples and checks."""

    target: Target
    n: int
    warmup: int
    slices: int
    ops: dict[str, list[float]] = field(default_factory=lambda: {p: [] for p in PATHS})
    tool_calls: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PATHS, 0))
    verified: dict[str, int] = field(default_factory=dict)

    def ratios(self) -> list[float]:
        """Same-round ratios handrail / bare."""
        return [h / b for h, b in zip(self.ops[HANDRAIL], self.ops[BARE], strict=True)]

    def median(self, path: str) -> float:
        """Median ops/s of a path over the rounds."""
        return statistics.median(self.ops[path])

    def ratio(self) -> float:
        """Median of the same-round ratios."""
        return statistics.median(self.ratios())


# --- the worker process -------------------------------------------------------------------------


def _principal(index: int, tenant: str) -> Principal:
    return Principal(user_id=f"bench-{index}", tenant_id=tenant, request_id=f"bench-{index}")


def _keyring() -> Keyring:
    return Keyring(SigningKey("bench", KEYRING_SECRET))


class HandrailClient:
    """A worker's gate and write service over its own connection pool; audit off."""

    def __init__(self, target: Target, index: int) -> None:
        self.store = open_store(target.store_url, migrate=False)
        registry = _registry()
        self.writes = Writes(registry, self.store, _keyring(), audit=None)
        self.gate = Gate(registry, writes=self.writes, audit=None)
        self.principal = _principal(index, target.tenant)

    async def prepare(self, label: str, count: int) -> list[str]:
        """Propose (through the gate), issue a token for and confirm `count` plans."""
        plan_ids: list[str] = []
        for n in range(count):
            call = ToolCall(id=f"{label}-{n}", name=TOOL, arguments=json.dumps({"n": n}))
            envelope = await self.gate.handle(call, self.principal)
            assert envelope.status is Status.ERROR, envelope
            assert envelope.error is not None, envelope
            assert envelope.error.code is ErrorCode.NEEDS_CONFIRMATION, envelope
            assert isinstance(envelope.data, dict), envelope
            plan_id = str(envelope.data["plan_id"])
            token = await self.writes.issue_token(plan_id, self.principal)
            record = await self.writes.confirm(plan_id, token.value, self.principal)
            assert record.state is PlanState.CONFIRMED, record
            plan_ids.append(plan_id)
        return plan_ids

    async def execute(self, plan_ids: list[str]) -> int:
        """The timed part: execute each confirmed plan once; how many SUCCEEDED afresh."""
        execute_plan = self.writes.execute_plan
        principal = self.principal
        succeeded = 0
        for plan_id in plan_ids:
            outcome = await execute_plan(plan_id, principal)
            record = outcome.record
            if (
                record is not None
                and record.status is ExecutionStatus.SUCCEEDED
                and not outcome.replayed
            ):
                succeeded += 1
        return succeeded

    def close(self) -> None:
        """Dispose of the pool."""
        self.store.close()


_SQLITE_INSERT = (
    "INSERT INTO handrail_bench_bare (key, status, updated_at) VALUES (?, 'RUNNING', ?) "
    "ON CONFLICT DO NOTHING"
)
_SQLITE_UPDATE = (
    "UPDATE handrail_bench_bare SET status = 'SUCCEEDED', result = ?, updated_at = ? "
    "WHERE key = ? AND status = 'RUNNING'"
)
_PG_INSERT = _SQLITE_INSERT.replace("?", "%s")
_PG_UPDATE = _SQLITE_UPDATE.replace("?", "%s")


def _now() -> datetime:
    return datetime.now(UTC)


class BareClient:
    """A worker's raw-driver connection in autocommit mode: each statement one commit."""

    def __init__(self, target: Target) -> None:
        self.postgres = target.backend == "postgres"
        if self.postgres:
            self.pg = psycopg.connect(target.bare_url, autocommit=True, options=PG_OPTIONS)
        else:
            self.lite = _sqlite_connect(target.bare_url)

    def execute(self, keys: list[str]) -> int:
        """The timed part: per key, insert-on-conflict, call, update; how many SUCCEEDED."""
        if self.postgres:
            return self._run(self.pg.execute, _PG_INSERT, _PG_UPDATE, keys, now=_now)
        return self._run(
            self.lite.execute, _SQLITE_INSERT, _SQLITE_UPDATE, keys, now=lambda: _now().isoformat()
        )

    @staticmethod
    def _run(
        execute: Callable[..., Any],
        insert: str,
        update: str,
        keys: list[str],
        *,
        now: Callable[[], object],
    ) -> int:
        succeeded = 0
        for n, key in enumerate(keys):
            if execute(insert, (key, now())).rowcount != 1:
                continue
            result = json.dumps(bare_write(key, n), separators=(",", ":"))
            succeeded += execute(update, (result, now(), key)).rowcount
        return succeeded

    def close(self) -> None:
        """Close the connection."""
        if self.postgres:
            self.pg.close()
        else:
            self.lite.close()


def _sqlite_connect(path: str) -> sqlite3.Connection:
    """Autocommit (each statement its own transaction), WAL, synchronous=FULL, as the store."""
    connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=FULL")
    connection.execute("PRAGMA busy_timeout=5000")
    return connection


class Worker:
    """One client process: runs tasks as they come, both paths, on one event loop."""

    def __init__(self, index: int, target: Target) -> None:
        self.index = index
        self.target = target
        self.loop = asyncio.new_event_loop()
        self.handrail = HandrailClient(target, index)
        self.bare = BareClient(target)

    def run(self, task: Task, barrier: Barrier) -> Done:
        """Set up untimed; then per slice and path, wait for every worker and time it."""
        for calls in CALLS.values():
            calls.clear()
        plan_ids = self.loop.run_until_complete(self.handrail.prepare(task.label, task.count))
        keys = [f"{self.target.key_prefix}-{task.label}-{n}" for n in range(task.count)]
        work: dict[str, Callable[[int, int], int]] = {
            HANDRAIL: lambda a, b: self.loop.run_until_complete(
                self.handrail.execute(plan_ids[a:b])
            ),
            BARE: lambda a, b: self.bare.execute(keys[a:b]),
        }
        succeeded = dict.fromkeys(PATHS, 0)
        spans: list[Span] = []
        first = 0
        for index, size in enumerate(_shares(task.count, task.slices)):
            order = task.order if index % 2 == 0 else task.order[::-1]
            for path in order:
                barrier.wait(BARRIER_TIMEOUT_S)
                started = time.perf_counter_ns()
                succeeded[path] += work[path](first, first + size)
                finished = time.perf_counter_ns()
                spans.append(Span(path=path, slice=index, started_ns=started, finished_ns=finished))
            first += size
        return Done(
            worker=self.index,
            count=task.count,
            spans=tuple(spans),
            succeeded=succeeded,
            tool_calls={path: len(CALLS[path]) for path in PATHS},
            distinct_calls={path: len(set(CALLS[path])) for path in PATHS},
        )

    def close(self) -> None:
        """Close connections and the loop."""
        self.handrail.close()
        self.bare.close()
        self.loop.close()


def worker_main(
    index: int,
    target: Target,
    tasks: multiprocessing.Queue[Task | None],
    done: multiprocessing.Queue[Done],
    barrier: Barrier,
) -> None:
    """A client process: one Worker, tasks until None; errors are reported, not raised."""
    worker: Worker | None = None
    try:
        worker = Worker(index, target)
        while (task := tasks.get()) is not None:
            done.put(worker.run(task, barrier))
    except BaseException:  # noqa: BLE001 - reported to the parent, which raises
        barrier.abort()
        done.put(Done(worker=index, error=traceback.format_exc()))
    finally:
        if worker is not None:
            worker.close()


# --- the parent: configurations, rounds, checks ------------------------------------------------


@contextlib.contextmanager
def _spawnable() -> Iterator[None]:
    """Let spawned workers import this script by name when it was imported, not run."""
    here = str(Path(__file__).resolve().parent)
    added = __name__ != "__main__" and here not in sys.path
    if added:
        sys.path.insert(0, here)
    try:
        yield
    finally:
        if added:
            sys.path.remove(here)


def _shares(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


class Pool:
    """`clients` spawned worker processes for one configuration, with a shared barrier."""

    def __init__(self, target: Target) -> None:
        context = multiprocessing.get_context("spawn")
        self.target = target
        self.barrier = context.Barrier(target.clients)
        self.done: multiprocessing.Queue[Done] = context.Queue()
        self.tasks: list[multiprocessing.Queue[Task | None]] = [
            context.Queue() for _ in range(target.clients)
        ]
        self.processes: list[BaseProcess] = [
            context.Process(
                target=worker_main,
                args=(i, target, self.tasks[i], self.done, self.barrier),
                name=f"bench-{target.key}-{i}",
                daemon=True,
            )
            for i in range(target.clients)
        ]
        with _spawnable():
            for process in self.processes:
                process.start()

    def round(
        self, label: str, total: int, *, slices: int, order: tuple[str, ...]
    ) -> tuple[dict[str, float], dict[str, int]]:
        """`total` executions of each path over the workers; ops/s and tool calls per path.

        A path's throughput is `total` over the sum of its slices' wall times, each from
        the barrier (the earliest start) to the last worker's finish.
        """
        shares = _shares(total, len(self.tasks))
        for index, (tasks, count) in enumerate(zip(self.tasks, shares, strict=True)):
            tasks.put(Task(label=f"{label}-w{index}", count=count, slices=slices, order=order))
        results = self._collect(len(self.tasks))
        for result in results:
            for path in PATHS:
                # Each execution SUCCEEDED afresh, and the tool ran exactly once for each.
                assert result.succeeded[path] == result.count, (path, result)
                assert result.tool_calls[path] == result.count, (path, result)
                assert result.distinct_calls[path] == result.count, (path, result)
        ops: dict[str, float] = {}
        for path in PATHS:
            wall_ns = 0
            for index in range(slices):
                spans = [s for r in results for s in r.spans if (s.path, s.slice) == (path, index)]
                assert len(spans) == len(results), (path, index, spans)
                wall_ns += max(s.finished_ns for s in spans) - min(s.started_ns for s in spans)
            ops[path] = total / (wall_ns / 1e9)
        calls = {path: sum(r.tool_calls[path] for r in results) for path in PATHS}
        return ops, calls

    def _collect(self, expected: int) -> list[Done]:
        results: list[Done] = []
        while len(results) < expected:
            try:
                result = self.done.get(timeout=POLL_S)
            except queue.Empty:
                dead = [p.name for p in self.processes if p.exitcode is not None]
                if dead:
                    msg = f"worker(s) {', '.join(dead)} exited without reporting"
                    raise RuntimeError(msg) from None
                continue
            if result.error is not None:
                msg = f"worker {result.worker} of {self.target.key} failed:\n{result.error}"
                raise RuntimeError(msg)
            results.append(result)
        return results

    def close(self) -> None:
        """Tell every worker to stop; end any that do not."""
        for tasks in self.tasks:
            tasks.put(None)
        for process in self.processes:
            process.join(timeout=30)
            if process.is_alive():  # pragma: no cover - a stuck worker
                process.terminate()
                process.join()


def measure(target: Target, *, rounds: int, n: int, warmup: int, slices: int) -> Row:
    """Warm up, then `rounds` rounds of both paths, interleaved slice by slice, one pool."""
    row = Row(target=target, n=n, warmup=warmup, slices=slices)
    pool = Pool(target)
    try:
        _, calls = pool.round("warm", warmup, slices=1, order=PATHS)
        for path in PATHS:
            row.tool_calls[path] += calls[path]
        for index in range(rounds):
            order = PATHS if index % 2 == 0 else PATHS[::-1]
            ops, calls = pool.round(f"r{index}", n, slices=slices, order=order)
            for path in PATHS:
                row.ops[path].append(ops[path])
                row.tool_calls[path] += calls[path]
    finally:
        pool.close()
    row.verified = verify(target)
    return row


def verify(target: Target) -> dict[str, int]:
    """Ask the databases what was committed for this configuration."""
    store = open_store(target.store_url, migrate=False)
    tenant = {"tenant": target.tenant}
    try:
        with store.engine.connect() as connection:
            succeeded = connection.execute(
                sa.text(
                    "SELECT count(*) FROM executions "
                    "WHERE tenant_id = :tenant AND status = 'SUCCEEDED'",
                ),
                tenant,
            ).scalar_one()
            executed = connection.execute(
                # A plan reads as EXECUTED when a SUCCEEDED record of it exists.
                sa.text(
                    "SELECT count(*) FROM plans p WHERE p.tenant_id = :tenant AND EXISTS "
                    "(SELECT 1 FROM executions e WHERE e.plan_id = p.plan_id "
                    "AND e.status = 'SUCCEEDED')",
                ),
                tenant,
            ).scalar_one()
    finally:
        store.close()
    query = "SELECT count(*) FROM handrail_bench_bare WHERE key LIKE ? AND status = 'SUCCEEDED'"
    like = (target.key_prefix + "-%",)
    if target.backend == "postgres":
        with psycopg.connect(target.bare_url) as connection:
            row = connection.execute(query.replace("?", "%s"), like).fetchone()
    else:
        with contextlib.closing(sqlite3.connect(target.bare_url)) as connection:
            row = connection.execute(query, like).fetchone()
    assert row is not None
    return {
        "handrail_executions_succeeded": int(succeeded),
        "handrail_plans_executed": int(executed),
        "bare_rows_succeeded": int(row[0]),
    }


# --- backends ----------------------------------------------------------------------------------


_SQLITE_TABLE = (
    "CREATE TABLE IF NOT EXISTS handrail_bench_bare (key VARCHAR(80) PRIMARY KEY, "
    "status VARCHAR(16) NOT NULL, result TEXT, updated_at TEXT NOT NULL)"
)
_PG_TABLE = (
    "CREATE TABLE IF NOT EXISTS handrail_bench_bare (key VARCHAR(80) PRIMARY KEY, "
    "status VARCHAR(16) NOT NULL, result TEXT, updated_at TIMESTAMPTZ NOT NULL)"
)


@contextlib.contextmanager
def sqlite_targets(run: str, clients: list[int], directory: Path | None) -> Iterator[list[Target]]:
    """A handrail store file and a bare file per client count, in a temporary folder."""
    with tempfile.TemporaryDirectory(prefix="handrail-bench-", dir=directory) as tmp:
        targets: list[Target] = []
        for count in clients:
            store_path = Path(tmp) / f"handrail-{count}c.db"
            bare_path = Path(tmp) / f"bare-{count}c.db"
            store = open_store(store_path)
            assert store.engine.dialect.name == "sqlite"
            store.close()
            with contextlib.closing(_sqlite_connect(str(bare_path))) as connection:
                connection.execute(_SQLITE_TABLE)
            targets.append(
                Target(
                    backend="sqlite",
                    clients=count,
                    store_url=str(store_path),
                    bare_url=str(bare_path),
                    tenant=f"bench-{run}-{count}c",
                    key_prefix=f"{run}-{count}c",
                ),
            )
        yield targets


def _admin() -> psycopg.Connection[Any]:
    return psycopg.connect(
        host=PG_HOST,
        port=PG_PORT,
        user=PG_USER,
        dbname=PG_ADMIN_DB,
        autocommit=True,
        connect_timeout=3,
    )


@contextlib.contextmanager
def postgres_targets(run: str, clients: list[int], url: str | None) -> Iterator[list[Target]]:
    """Targets in `url`, or in a scratch database created now and dropped at the end.

    In a given database the handrail tables keep the run's plans and executions (under
    tenants of their own); the bare table is dropped at the end if this run created it.
    """
    scratch = None
    if url is None:
        scratch = f"handrail_bench_{run}"
        with _admin() as admin:
            admin.execute(
                sql.SQL("CREATE DATABASE {} ENCODING 'UTF8' TEMPLATE template0").format(
                    sql.Identifier(scratch),
                ),
            )
        url = f"postgresql://{PG_USER}@{PG_HOST}:{PG_PORT}/{scratch}"
    created = False
    try:
        open_store(url).close()  # migrated once, before any worker opens it
        with psycopg.connect(url, autocommit=True) as connection:
            exists = connection.execute("SELECT to_regclass('handrail_bench_bare')").fetchone()
            created = exists is None or exists[0] is None
            connection.execute(_PG_TABLE)
        yield [
            Target(
                backend="postgres",
                clients=count,
                store_url=url,
                bare_url=url,
                tenant=f"bench-{run}-{count}c",
                key_prefix=f"{run}-{count}c",
            )
            for count in clients
        ]
    finally:
        if scratch is None and created:
            with psycopg.connect(url, autocommit=True) as connection:
                connection.execute("DROP TABLE IF EXISTS handrail_bench_bare")
        if scratch is not None:
            with _admin() as admin:
                admin.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                        sql.Identifier(scratch),
                    ),
                )


def postgres_available() -> str | None:
    """None when the default server accepts us; otherwise why not."""
    try:
        with _admin():
            return None
    except psycopg.OperationalError as exc:
        return f"no PostgreSQL accepts user {PG_USER!r} at {PG_HOST}:{PG_PORT} ({exc!s:.120})"


# --- reporting ---------------------------------------------------------------------------------


BASELINE_API = {
    "sqlite": (
        "sqlite3 (raw driver), isolation_level=None (autocommit), WAL, synchronous=FULL: "
        "INSERT INTO handrail_bench_bare ... ON CONFLICT DO NOTHING; tool; UPDATE ... SET "
        "status='SUCCEEDED', result=? WHERE key=?"
    ),
    "postgres": (
        "psycopg 3 (raw driver), autocommit, synchronous_commit=on: "
        "INSERT INTO handrail_bench_bare ... ON CONFLICT DO NOTHING; tool; UPDATE ... SET "
        "status='SUCCEEDED', result=%s WHERE key=%s"
    ),
}
HANDRAIL_API = (
    "await Writes.execute_plan(plan_id, principal) on a confirmed plan (Gate.handle -> "
    "issue_token -> confirm, untimed); SqliteStore / PostgresStore via open_store; audit=None"
)


def _table(rows: list[Row]) -> str:
    header = (
        "backend",
        "clients",
        "handrail ops/s",
        "bare ops/s",
        "handrail/bare",
        "target",
        "met",
    )
    body = [
        (
            row.target.backend,
            str(row.target.clients),
            f"{row.median(HANDRAIL):,.0f}",
            f"{row.median(BARE):,.0f}",
            f"{row.ratio():.2f}",
            f">= {TARGET_RATIO:.2f}",
            "yes" if row.ratio() >= TARGET_RATIO else "NO",
        )
        for row in rows
    ]
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]

    def line(cells: tuple[str, ...]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))
        return "  ".join([first, *rest])

    rule = "-" * len(line(header))
    return "\n".join([rule, line(header), rule, *(line(r) for r in body), rule])


def findings(rows: list[Row]) -> list[str]:
    """The ratios the issue asks about, in words."""
    out = []
    for row in rows:
        ratio = row.ratio()
        verdict = "met" if ratio >= TARGET_RATIO else "NOT met"
        spread = ", ".join(f"{r:.2f}" for r in row.ratios())
        out.append(
            f"{row.target.backend}, {row.target.clients} client(s): handrail/bare "
            f"{ratio:.2f} (target >= {TARGET_RATIO:.2f}: {verdict}; rounds: {spread})",
        )
    return out


def _result(row: Row) -> dict[str, object]:
    return {
        "backend": row.target.backend,
        "clients": row.target.clients,
        "executions_per_round": row.n,
        "warmup_executions": row.warmup,
        "slices_per_round": row.slices,
        "handrail_ops_s": round(row.median(HANDRAIL), 1),
        "bare_ops_s": round(row.median(BARE), 1),
        "ratio": round(row.ratio(), 3),
        "target": TARGET_RATIO,
        "met": row.ratio() >= TARGET_RATIO,
        "rounds": {
            HANDRAIL: [round(v, 1) for v in row.ops[HANDRAIL]],
            BARE: [round(v, 1) for v in row.ops[BARE]],
            "ratio": [round(v, 3) for v in row.ratios()],
        },
        "tool_calls": dict(row.tool_calls),
        "verified": dict(row.verified),
        "baseline_api": BASELINE_API[row.target.backend],
    }


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def _filesystem(path: Path) -> str:
    """The type of the filesystem `path` is on (from /proc/mounts), or '?'."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return "?"
    best, kind = "", "?"
    resolved = str(path.resolve())
    for line in mounts:
        parts = line.split()
        if len(parts) > 2 and resolved.startswith(parts[1]) and len(parts[1]) > len(best):
            best, kind = parts[1], parts[2]
    return kind


def _postgres_settings(url: str | None) -> dict[str, str]:
    """The server's version and durability settings, or {} when it cannot be reached."""
    names = ("server_version", "fsync", "synchronous_commit", "wal_sync_method")
    try:
        connection = _admin() if url is None else psycopg.connect(url, connect_timeout=3)
    except psycopg.OperationalError:
        return {}
    settings: dict[str, str] = {}
    with connection:
        for name in names:
            row = connection.execute(sql.SQL("SHOW {}").format(sql.Identifier(name))).fetchone()
            settings[name] = "?" if row is None else str(row[0])
    return settings


def environment(args: argparse.Namespace) -> dict[str, object]:
    """What the numbers were measured on (the load average is read at the end of the run)."""
    directory = args.dir or Path(tempfile.gettempdir())
    env: dict[str, object] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average_at_end": [round(v, 2) for v in os.getloadavg()],
        "rounds": args.rounds,
        "executions_per_round": args.n,
        "warmup_executions": args.warmup,
        "slices_per_round": args.slices,
        "backends": args.backends,
        "clients": args.clients,
        "sqlite": sqlite3.sqlite_version,
        "sqlite_dir": str(directory),
        "sqlite_filesystem": _filesystem(directory),
        "versions": {
            name: _version(name) for name in ("handrail", "sqlalchemy", "psycopg", "alembic")
        },
    }
    if "postgres" in args.backends:
        env["postgres"] = _postgres_settings(args.pg_url)
    return env


# --- profiling ---------------------------------------------------------------------------------


async def _inline(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return fn(*args, **kwargs)


async def _timed(label: str, work: Awaitable[int], count: int, out: io.StringIO) -> float:
    """Await `work` (which returns how many SUCCEEDED), print and return µs/op."""
    started = time.perf_counter()
    succeeded = await work
    elapsed = time.perf_counter() - started
    assert succeeded == count, (label, succeeded, count)
    out.write(f"{label}: {count / elapsed:,.0f} ops/s ({elapsed / count * 1e6:,.0f} µs/op)\n")
    return elapsed / count * 1e6


async def _hop_cost(count: int) -> float:
    """µs per `await asyncio.to_thread(no-op)`, the hop every store call takes."""

    def noop() -> None:
        return None

    for _ in range(100):
        await asyncio.to_thread(noop)
    started = time.perf_counter()
    for _ in range(count):
        await asyncio.to_thread(noop)
    return (time.perf_counter() - started) / count * 1e6


STORE_CALLS = ("get_plan", "get_execution", "insert_execution", "replace_execution")


def _time_store_calls(store: Any) -> dict[str, list[float]]:
    """Wrap this store instance's methods of the write path; seconds per call, by name."""
    spent: dict[str, list[float]] = {name: [] for name in STORE_CALLS}

    def wrap(name: str) -> None:
        method = getattr(store, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                spent[name].append(time.perf_counter() - started)

        setattr(store, name, timed)

    for name in STORE_CALLS:
        wrap(name)
    return spent


def _count_sql(engine: sa.Engine) -> dict[str, int]:
    """Count checkouts, BEGINs, statements, COMMITs and ROLLBACKs on `engine` from now on."""
    seen = dict.fromkeys(("checkout", "begin", "statement", "commit", "rollback"), 0)

    def bump(name: str) -> Callable[..., None]:
        def listener(*_: object, **__: object) -> None:
            seen[name] += 1

        return listener

    sa.event.listen(engine.pool, "checkout", bump("checkout"))
    sa.event.listen(engine, "begin", bump("begin"))
    sa.event.listen(engine, "before_cursor_execute", bump("statement"))
    sa.event.listen(engine, "commit", bump("commit"))
    sa.event.listen(engine, "rollback", bump("rollback"))
    return seen


async def profile_target(target: Target, n: int, limit: int, out: io.StringIO) -> None:
    """One client in this process: where one execution's time goes, then cProfile.

    First the bare loop and the write path as shipped. The write path's claims and
    outcomes do not go through the store's sync methods (SQLite: the writer thread;
    PostgreSQL: async connections), so they are counted where they are sent
    (`_write_counters`): statements, commits and hops per execution, and the time inside
    the driver, on the writer thread too, which cProfile does not see. Any remaining
    sync store calls are timed in their worker threads and their SQL counted on the
    engine. CPU is the process's (every thread). Then the same with the worker-thread
    hops replaced by direct calls (`Writes._io` and `Executor._io` of these instances
    only), and cProfile of that (it sees only the event loop's thread).
    """
    client = HandrailClient(target, 0)
    counts = count_store_sql(client.store)
    bare = BareClient(target)
    writes = client.writes
    hops = {"n": 0}
    real_io = writes._io  # noqa: SLF001 - counting the hops of this instance

    async def counting(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        hops["n"] += 1
        return await real_io(fn, *args, **kwargs)

    try:
        warm = await client.prepare("pwarm", 100)
        await client.execute(warm)
        out.write(f"\n=== {target.backend}, 1 client in-process, {n} executions per step ===\n")
        keys = [f"{target.key_prefix}-p-{i}" for i in range(n)]
        cpu = time.process_time()
        bare_started = time.perf_counter()
        assert bare.execute(keys) == n
        bare_us = (time.perf_counter() - bare_started) / n * 1e6
        bare_cpu = (time.process_time() - cpu) / n * 1e6
        out.write(
            f"bare loop: {1e6 / bare_us:,.0f} ops/s ({bare_us:,.0f} µs/op, "
            f"CPU {bare_cpu:,.0f} µs/op)\n"
        )

        writes._io = counting  # type: ignore[method-assign] # noqa: SLF001
        writes.executor._io = counting  # type: ignore[method-assign] # noqa: SLF001
        plans = await client.prepare("pthreads", n)
        spent = _time_store_calls(client.store)
        sent = _count_sql(client.store.engine)
        hops["n"] = 0
        counts.reset()
        cpu = time.process_time()
        total_us = await _timed("handrail as shipped", client.execute(plans), n, out)
        out.write(f"  CPU (every thread): {(time.process_time() - cpu) / n * 1e6:,.0f} µs/op\n")
        out.write(f"  claims and outcomes, per execution: {counts.per_execution(n)}\n")
        in_store = counts.busy_ns / n / 1e3
        for name in STORE_CALLS:
            calls = spent[name]
            per_op = sum(calls) / n * 1e6
            in_store += per_op
            mean = statistics.fmean(calls) * 1e6 if calls else 0.0
            out.write(
                f"  sync store.{name}: {len(calls) / n:.1f} call(s)/op x {mean:,.0f} µs "
                f"= {per_op:,.0f} µs/op\n",
            )
        per_op_sql = ", ".join(f"{name} {count / n:.1f}" for name, count in sent.items())
        out.write(f"  sync engine SQL per execution: {per_op_sql}\n")
        hop = await _hop_cost(2000)
        per_execution = hops["n"] / n
        out.write(
            f"  in the driver together: {in_store:,.0f} µs/op; outside it (hops and "
            f"wake-ups, handrail's own Python, the tool): {total_us - in_store:,.0f} µs/op; "
            f"worker-thread hops {per_execution:.1f} x {hop:.0f} µs (a to_thread no-op)\n",
        )

        writes._io = _inline  # type: ignore[method-assign] # noqa: SLF001
        writes.executor._io = _inline  # type: ignore[method-assign] # noqa: SLF001
        plans = await client.prepare("pinline", n)
        await _timed("handrail, worker-thread hops inline", client.execute(plans), n, out)

        plans = await client.prepare("pprofile", n)
        profiler = cProfile.Profile()
        profiler.enable()
        await client.execute(plans)
        profiler.disable()
        stats = pstats.Stats(profiler, stream=out)
        out.write(f"\n--- cProfile (event loop thread): top {limit} by self time ---\n")
        stats.sort_stats("tottime").print_stats(limit)
        out.write(f"\n--- handrail/ functions by cumulative time (top {limit}) ---\n")
        stats.sort_stats("cumulative").print_stats(r"handrail[/\\]", limit)
    finally:
        bare.close()
        client.close()


def profile(args: argparse.Namespace, run: str) -> str:
    """cProfile of one client on each chosen backend."""
    out = io.StringIO()
    for backend in args.backends:
        if backend == "sqlite":
            manager = sqlite_targets(run, [1], args.dir)
        else:
            manager = postgres_targets(run, [1], args.pg_url)
        with manager as targets:
            asyncio.run(profile_target(targets[0], args.n, 35, out))
    return out.getvalue()


# --- the service's case: many tasks in one process ----------------------------------------------

CONCURRENT_TARGET = 1.2
BARE_CONNECTIONS = 8


def _service_store(target: Target) -> Any:
    if target.backend == "postgres":
        from handrail.store.postgres import PostgresStore  # noqa: PLC0415

        return PostgresStore.open(
            target.store_url, migrate=False, pool_size=2, async_pool_size=BARE_CONNECTIONS
        )
    return open_store(target.store_url, migrate=False)


async def _handrail_concurrent(client: HandrailClient, plans: list[str], tasks: int) -> float:
    shares = [plans[i::tasks] for i in range(tasks)]
    started = time.perf_counter()
    done = await asyncio.gather(*(client.execute(share) for share in shares))
    elapsed = time.perf_counter() - started
    assert sum(done) == len(plans), (sum(done), len(plans))
    return len(plans) / elapsed


def _bare_concurrent(target: Target, keys: list[str]) -> float:
    import threading  # noqa: PLC0415

    clients = [BareClient(target) for _ in range(BARE_CONNECTIONS)]
    shares = [keys[i::BARE_CONNECTIONS] for i in range(BARE_CONNECTIONS)]
    done = [0] * BARE_CONNECTIONS

    def run(i: int) -> None:
        done[i] = clients[i].execute(shares[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(BARE_CONNECTIONS)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    for client in clients:
        client.close()
    assert sum(done) == len(keys), (sum(done), len(keys))
    return len(keys) / elapsed


def concurrent(args: argparse.Namespace, run_id: str) -> None:
    """Handrail with C tasks on one store vs the bare loop on 8 connections, one process."""
    for backend in args.backends:
        manager = (
            sqlite_targets(run_id, [1], args.dir)
            if backend == "sqlite"
            else postgres_targets(run_id, [1], args.pg_url)
        )
        with manager as targets:
            target = targets[0]
            client = HandrailClient(target, 0)
            client.store.close()
            client.store = _service_store(target)
            client.writes = Writes(_registry(), client.store, _keyring(), audit=None)
            client.gate = Gate(_registry(), writes=client.writes, audit=None)
            ops: dict[str, list[float]] = {HANDRAIL: [], BARE: []}
            loop = asyncio.new_event_loop()
            try:
                for r in range(args.rounds + 1):
                    plans = loop.run_until_complete(client.prepare(f"c{r}", args.n))
                    keys = [f"{target.key_prefix}-c{r}-{n}" for n in range(args.n)]
                    order = PATHS if r % 2 == 0 else PATHS[::-1]
                    got = {}
                    for path in order:
                        if path == HANDRAIL:
                            got[path] = loop.run_until_complete(
                                _handrail_concurrent(client, plans, args.concurrent)
                            )
                        else:
                            got[path] = _bare_concurrent(target, keys)
                    if r == 0:
                        continue  # warm-up
                    for path in PATHS:
                        ops[path].append(got[path])
            finally:
                loop.close()
                fast = client.store.async_executions
                stats = fast.batch_stats()
                client.close()
            ratios = [h / b for h, b in zip(ops[HANDRAIL], ops[BARE], strict=True)]
            ratio = statistics.median(ratios)
            met = "met" if ratio >= CONCURRENT_TARGET else "NOT met"
            print(
                f"{backend}, {args.concurrent} tasks in one process vs bare loop on "
                f"{BARE_CONNECTIONS} connections: handrail {statistics.median(ops[HANDRAIL]):,.0f} "
                f"ops/s, bare {statistics.median(ops[BARE]):,.0f} ops/s, handrail/bare "
                f"{ratio:.2f} (target >= {CONCURRENT_TARGET}: {met}; rounds: "
                f"{', '.join(f'{v:.2f}' for v in ratios)}); group commits: {stats}"
            )


# --- main --------------------------------------------------------------------------------------


def run(args: argparse.Namespace, run_id: str) -> tuple[list[Row], list[str]]:
    """Every chosen backend and client count, each on its own pool of workers."""
    rows: list[Row] = []
    notes: list[str] = []
    for backend in args.backends:
        if backend == "postgres" and args.pg_url is None:
            missing = postgres_available()
            if missing is not None:
                notes.append(f"postgres skipped: {missing} (or pass --pg-url)")
                continue
        manager = (
            sqlite_targets(run_id, args.clients, args.dir)
            if backend == "sqlite"
            else postgres_targets(run_id, args.clients, args.pg_url)
        )
        with manager as targets:
            for target in targets:
                warmup = max(args.warmup, target.clients)
                rows.append(
                    measure(target, rounds=args.rounds, n=args.n, warmup=warmup, slices=args.slices)
                )
    return rows, notes


def _csv(kind: Callable[[str], Any], allowed: set[str] | None = None) -> Callable[[str], list[Any]]:
    def parse(text: str) -> list[Any]:
        items = [item.strip() for item in text.split(",") if item.strip()]
        if allowed is not None and not set(items) <= allowed:
            msg = f"choose from {', '.join(sorted(allowed))}"
            raise argparse.ArgumentTypeError(msg)
        return [kind(item) for item in items]

    return parse


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options; --smoke shrinks rounds, n and warm-up unless they are given."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, help="rounds per configuration (default 5)")
    parser.add_argument(
        "--n", type=int, help="executions per round, split over the clients (default 800)"
    )
    parser.add_argument("--warmup", type=int, help="warm-up executions per path (default 100)")
    parser.add_argument(
        "--slices",
        type=int,
        help="alternating slices per round and path (default 8; smoke 2)",
    )
    parser.add_argument(
        "--backends",
        type=_csv(str, {"sqlite", "postgres"}),
        default=["sqlite", "postgres"],
        help="comma-separated: sqlite,postgres (default both)",
    )
    parser.add_argument(
        "--clients",
        type=_csv(int),
        default=[1, 8],
        help="comma-separated client process counts (default 1,8)",
    )
    parser.add_argument(
        "--pg-url",
        help="an existing PostgreSQL database (postgresql://...); default: a scratch "
        f"database on {PG_USER}@{PG_HOST}:{PG_PORT}, dropped after the run",
    )
    parser.add_argument("--dir", type=Path, help="folder for the SQLite files (default: temp)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write results as JSON")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: 1 round of 16")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="instead of timing, profile one client in-process (n executions per step)",
    )
    parser.add_argument(
        "--concurrent",
        type=int,
        metavar="C",
        help="instead: the service's case, C tasks in one process vs 8 bare connections",
    )
    args = parser.parse_args(argv)
    args.rounds = args.rounds or (1 if args.smoke else 5)
    args.n = args.n or (16 if args.smoke else 800)
    args.warmup = args.warmup if args.warmup is not None else (4 if args.smoke else 100)
    args.slices = args.slices or (2 if args.smoke else 8)
    if min(args.rounds, args.n, args.slices) < 1 or args.warmup < 0:
        parser.error("--rounds, --n and --slices must be positive, --warmup not negative")
    if not args.clients or min(args.clients) < 1:
        parser.error("--clients must be positive counts")
    if args.n < args.slices * max(args.clients):
        parser.error("--n must be at least --slices times the largest client count")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the table (and write JSON when asked)."""
    args = parse_args(argv)
    run_id = secrets.token_hex(4)
    if args.profile:
        print(profile(args, run_id))
        return 0
    if args.concurrent:
        concurrent(args, run_id)
        return 0
    load_at_start = [round(v, 2) for v in os.getloadavg()]
    rows, notes = run(args, run_id)
    env = {"load_average_at_start": load_at_start, **environment(args)}
    print(
        f"Handrail write path: durable executions per second of a trivial EXTERNAL_WRITE "
        f"tool on confirmed plans, audit off; {args.rounds} rounds x {args.n} executions "
        f"per configuration (+{args.warmup} warm-up), the paths alternating in "
        f"{args.slices} slices per round; Python "
        f"{env['python']}, {env['cpus']} CPUs (load average at start/end {load_at_start[0]}/"
        f"{env['load_average_at_end'][0]}); SQLite files on {env['sqlite_filesystem']}. "
        f"Ratios are medians of same-round ratios.",
    )
    print()
    print(_table(rows))
    print()
    for line in [*findings(rows), *notes]:
        print(line)
    print()
    print(f"handrail: {HANDRAIL_API}")
    for backend in dict.fromkeys(row.target.backend for row in rows):
        print(f"bare ({backend}): {BASELINE_API[backend]}")
    if args.json:
        payload = {
            "environment": env,
            "results": {row.target.key: _result(row) for row in rows},
            "findings": findings(rows),
            "notes": notes,
        }
        args.json.write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
