"""A `TaskHost` over a SQLite file outside the engine, and a scripted task body.

The DBOS tests count what really happened here, not in DBOS: the record's state, every
report the runner made, every entry into a step's function (`runs`), every effect
(`effects`), and how many bodies were inside a step at once (`gauge`). The file is
shared by the test and its worker processes (WAL, long busy timeout), so a fact a worker
wrote is what the test waits for: no sleep races a margin.

The host keeps the task-record rules the DBOS runner relies on (terminal states never
move; `begin` refuses a finished, cancelled or expired task; `checkpoint` raises
`TaskExpired` past `expires_at`; `take_over` claims a running task whose heartbeat is a
lease old, under the file's write lock, so one of two claimants gets it); Handrail's own
`TaskRecords` is tested elsewhere.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from handrail.clock import Clock, SystemClock
from handrail.errors import ToolFailed, ToolRetryable
from handrail.tasks.runner import (
    TaskCancelled,
    TaskExpired,
    TaskFailure,
    TaskScope,
    TaskSubmission,
)

T = TypeVar("T")

WAIT_S = 120.0
"""Bound on every wait for a fact; never reached when the code works."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (task_id TEXT PRIMARY KEY, state TEXT NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 0, worker TEXT, expires_at TEXT NOT NULL,
    heartbeat REAL);
CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY AUTOINCREMENT, task_id TEXT,
    kind TEXT, attempt INTEGER, worker TEXT, detail TEXT);
CREATE TABLE IF NOT EXISTS runs (seq INTEGER PRIMARY KEY AUTOINCREMENT, task_id TEXT,
    name TEXT, worker TEXT, pid INTEGER);
CREATE TABLE IF NOT EXISTS effects (task_id TEXT, name TEXT, worker TEXT);
CREATE TABLE IF NOT EXISTS gauge (id INTEGER PRIMARY KEY CHECK (id = 1), inside INTEGER,
    peak INTEGER);
INSERT OR IGNORE INTO gauge VALUES (1, 0, 0);
"""
_TERMINAL = ("succeeded", "failed", "cancelled", "expired")


class FileHost:
    """A TaskHost whose every fact is a row of one SQLite file."""

    def __init__(self, path: Path, *, clock: Clock | None = None, worker: str = "test") -> None:
        self.path = path
        self.clock = clock or SystemClock()
        self.worker = worker
        db = sqlite3.connect(self.path, timeout=WAIT_S)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(_SCHEMA)
        finally:
            db.close()

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=WAIT_S, isolation_level=None)
        try:
            db.execute("BEGIN IMMEDIATE")
            yield db
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        finally:
            db.close()

    def query(self, sql: str, *args: object) -> list[tuple[Any, ...]]:
        """Rows of a read (for the tests' waits and assertions)."""
        with self._db() as db:
            return db.execute(sql, args).fetchall()

    # --- what Handrail does before submit ----------------------------------------------

    def add(self, submission: TaskSubmission) -> None:
        """The QUEUED record Handrail stores before it calls `submit`."""
        with self._db() as db:
            db.execute(
                "INSERT OR IGNORE INTO records (task_id, state, expires_at) VALUES (?, ?, ?)",
                (submission.task_id, "queued", submission.expires_at.isoformat()),
            )

    def request_cancel(self, task_id: str) -> None:
        """What Handrail's own cancel does to a running task: mark it for its worker."""
        with self._db() as db:
            db.execute("UPDATE records SET state = 'cancelling' WHERE task_id = ?", (task_id,))

    def state(self, task_id: str) -> str | None:
        rows = self.query("SELECT state FROM records WHERE task_id = ?", task_id)
        return None if not rows else str(rows[0][0])

    def events(self, task_id: str, kind: str | None = None) -> list[tuple[Any, ...]]:
        """(kind, attempt, worker, detail) of the runner's reports, in order."""
        rows = self.query(
            "SELECT kind, attempt, worker, detail FROM events WHERE task_id = ? ORDER BY seq",
            task_id,
        )
        return [row for row in rows if kind is None or row[0] == kind]

    def runs(self, task_id: str) -> list[tuple[str, str]]:
        """(step name, worker) of every entry into a step's function, in order."""
        rows = self.query("SELECT name, worker FROM runs WHERE task_id = ? ORDER BY seq", task_id)
        return [(str(name), str(worker)) for name, worker in rows]

    def effects(self, task_id: str) -> list[str]:
        rows = self.query("SELECT name FROM effects WHERE task_id = ? ORDER BY rowid", task_id)
        return [str(row[0]) for row in rows]

    # --- TaskHost ------------------------------------------------------------------------

    def _event(
        self, db: sqlite3.Connection, task_id: str, kind: str, attempt: int | None, detail: str
    ) -> None:
        db.execute(
            "INSERT INTO events (task_id, kind, attempt, worker, detail) VALUES (?, ?, ?, ?, ?)",
            (task_id, kind, attempt, self.worker, detail),
        )

    def _expired(self, db: sqlite3.Connection, task_id: str) -> bool:
        row = db.execute("SELECT expires_at FROM records WHERE task_id = ?", (task_id,)).fetchone()
        return row is not None and self.clock.now() >= datetime.fromisoformat(row[0])

    def _finish(self, task_id: str, state: str, detail: str = "") -> None:
        with self._db() as db:
            self._event(db, task_id, state, None, detail)
            db.execute(
                "UPDATE records SET state = ? WHERE task_id = ? AND state NOT IN (?, ?, ?, ?)",
                (state, task_id, *_TERMINAL),
            )

    async def begin(self, task_id: str, *, attempt: int, worker: str) -> bool:
        with self._db() as db:
            self._event(db, task_id, "begin", attempt, worker)
            row = db.execute("SELECT state FROM records WHERE task_id = ?", (task_id,)).fetchone()
            if row is None or row[0] in _TERMINAL:
                return False
            if self._expired(db, task_id):
                db.execute("UPDATE records SET state = 'expired' WHERE task_id = ?", (task_id,))
                return False
            db.execute(
                "UPDATE records SET state = 'running', attempt = ?, worker = ?, heartbeat = ?"
                " WHERE task_id = ?",
                (attempt, worker, self.clock.now().timestamp(), task_id),
            )
            return True

    async def checkpoint(self, task_id: str, *, worker: str) -> None:
        with self._db() as db:
            self._event(db, task_id, "checkpoint", None, worker)
            expired = self._expired(db, task_id)
            row = db.execute("SELECT state FROM records WHERE task_id = ?", (task_id,)).fetchone()
        if expired:
            raise TaskExpired
        if row is not None and row[0] == "cancelling":
            raise TaskCancelled

    async def progress(
        self, task_id: str, fraction: float, message: str | None, *, worker: str
    ) -> None:
        with self._db() as db:
            self._event(db, task_id, "progress", None, json.dumps([fraction, message]))

    async def heartbeat(self, task_id: str, *, worker: str) -> bool:
        with self._db() as db:
            self._event(db, task_id, "heartbeat", None, worker)
            renewed = db.execute(
                "UPDATE records SET heartbeat = ? WHERE task_id = ? AND state = 'running'"
                " AND worker = ?",
                (self.clock.now().timestamp(), task_id, worker),
            )
            return renewed.rowcount == 1

    async def take_over(self, task_id: str, *, worker: str, lease_seconds: float) -> str | None:
        now = self.clock.now().timestamp()
        with self._db() as db:  # BEGIN IMMEDIATE: the read and the write are one step
            self._event(db, task_id, "lease-check", None, worker)
            row = db.execute(
                "SELECT worker FROM records WHERE task_id = ? AND state = 'running'"
                " AND worker IS NOT NULL AND worker != ? AND heartbeat <= ?",
                (task_id, worker, now - lease_seconds),
            ).fetchone()
            if row is None:
                return None
            db.execute(
                "UPDATE records SET worker = ?, heartbeat = ? WHERE task_id = ?",
                (worker, now, task_id),
            )
            self._event(db, task_id, "takeover", None, str(row[0]))
            return str(row[0])

    async def retrying(
        self, task_id: str, *, attempt: int, failure: TaskFailure, retry_at: datetime
    ) -> None:
        delay = (retry_at - self.clock.now()).total_seconds()
        with self._db() as db:
            self._event(db, task_id, "retrying", attempt, json.dumps([failure.code, delay]))
            db.execute("UPDATE records SET state = 'queued' WHERE task_id = ?", (task_id,))

    async def succeeded(self, task_id: str, result: Any) -> None:
        self._finish(task_id, "succeeded", json.dumps(result))

    async def failed(self, task_id: str, failure: TaskFailure) -> None:
        self._finish(task_id, "failed", str(failure.code))

    async def cancelled(self, task_id: str) -> None:
        self._finish(task_id, "cancelled")

    async def expired(self, task_id: str) -> None:
        self._finish(task_id, "expired")

    async def effect(
        self, submission: TaskSubmission, name: str, fn: Callable[[], Awaitable[T]]
    ) -> T:
        return await fn()


# --- the scripted body ---------------------------------------------------------------------


def release(folder: Path, task_id: str, step: str) -> None:
    """Let a step waiting in `task_id` go on."""
    (folder / f"release-{task_id}-{step}").touch()


def script_body(host: FileHost) -> Callable[[Mapping[str, Any], TaskScope], Awaitable[Any]]:
    """A task body that runs `arguments["steps"]` in order, each noted in the host's file.

    A step is {"name", "effect": bool, "wait": bool (until `release`), "gauge": bool
    (counts bodies inside at once), "transient": [attempts that raise ToolRetryable],
    "final": bool (raises ToolFailed)}; the result lists every step's value.
    """
    folder = host.path.parent

    async def body(arguments: Mapping[str, Any], scope: TaskScope) -> Any:
        values: list[Any] = []
        for spec in arguments["steps"]:
            run = _step_function(host, folder, scope, spec)
            if spec.get("effect"):
                values.append(await scope.effect(spec["name"], run))
            else:
                values.append(await scope.step(spec["name"], run))
        return values

    return body


def _step_function(
    host: FileHost, folder: Path, scope: TaskScope, spec: Mapping[str, Any]
) -> Callable[[], Awaitable[Any]]:
    name: str = spec["name"]

    async def run() -> Any:
        with host._db() as db:
            db.execute(
                "INSERT INTO runs (task_id, name, worker, pid) VALUES (?, ?, ?, ?)",
                (scope.task_id, name, host.worker, os.getpid()),
            )
            if spec.get("effect"):
                db.execute(
                    "INSERT INTO effects VALUES (?, ?, ?)", (scope.task_id, name, host.worker)
                )
            if spec.get("gauge"):
                db.execute("UPDATE gauge SET inside = inside + 1")
                db.execute("UPDATE gauge SET peak = max(peak, inside)")
        try:
            if spec.get("wait"):
                await _until_file(folder / f"release-{scope.task_id}-{name}")
        finally:
            if spec.get("gauge"):
                with host._db() as db:
                    db.execute("UPDATE gauge SET inside = inside - 1")
        if scope.attempt in spec.get("transient", ()):
            raise ToolRetryable(f"{name} is busy", retry_after=None)
        if spec.get("final"):
            raise ToolFailed(f"{name} cannot be done")
        return {"step": name, "attempt": scope.attempt}

    return run


async def _until_file(path: Path) -> None:
    end = time.monotonic() + WAIT_S
    while not await asyncio.to_thread(path.exists):
        if time.monotonic() > end:
            raise TimeoutError(f"never released: {path.name}")
        await asyncio.sleep(0.01)


def wait_for(condition: Callable[[], bool], what: str) -> None:
    """Poll a fact until it holds, for at most WAIT_S."""
    end = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < end, f"never reached: {what}"
        time.sleep(0.02)


async def wait_for_async(condition: Callable[[], bool], what: str) -> None:
    """`wait_for` inside an event loop, which keeps running meanwhile."""
    end = time.monotonic() + WAIT_S
    while not await asyncio.to_thread(condition):
        assert time.monotonic() < end, f"never reached: {what}"
        await asyncio.sleep(0.02)
