"""Store fixtures for every test: each backend behind `store`, the SQL ones behind `sql_store`.

PostgreSQL tests run in a database of their own, created for the session and dropped
at its end. Without a server they are skipped, except under CI=true, where a missing
server fails the run: CI must run them.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from handrail.store import MemoryStore, PostgresStore, SqliteStore, SqlStore, Store

POSTGRES_HOST = "127.0.0.1"
POSTGRES_PORT = 5432
POSTGRES_USER = "postgres"
POSTGRES_ADMIN_DB = "postgres"

# Every table the migrations create, emptied between tests (the schema stays).
STORE_TABLES = (
    "audit_trails",
    "plans",
    "plan_nonces",
    "plan_approvals",
    "executions",
    "raw_results",
    "runs",
    "run_entries",
    "conversations",
    "conversation_turns",
    "mcp_pins",
    "api_keys",
    "tasks",
    "console_people",
    "console_sessions",
    "idempotency_keys",
    "guard_conversations",
    "guard_targets",
    "secret_handles",
)

RACE_TIMEOUT_S = 60.0


def _admin_connection() -> psycopg.Connection[Any]:
    return psycopg.connect(
        host=POSTGRES_HOST,
        port=POSTGRES_PORT,
        user=POSTGRES_USER,
        dbname=POSTGRES_ADMIN_DB,
        autocommit=True,
        connect_timeout=3,
    )


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this session; skips without a server, fails on CI."""
    with fresh_postgres_database() as url:
        yield url


@contextmanager
def fresh_postgres_database() -> Iterator[str]:
    """The URL of a new, empty PostgreSQL database, dropped at the end; skips or fails as above."""
    name = f"handrail_test_{uuid.uuid4().hex[:8]}"
    try:
        with _admin_connection() as admin:
            admin.execute(
                sql.SQL("CREATE DATABASE {} ENCODING 'UTF8' TEMPLATE template0").format(
                    sql.Identifier(name),
                ),
            )
    except psycopg.OperationalError as exc:
        reason = (
            f"no PostgreSQL accepts user {POSTGRES_USER!r} at {POSTGRES_HOST}:{POSTGRES_PORT}"
            f" ({type(exc).__name__})"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI must start one before the tests")
        pytest.skip(reason)
    try:
        yield f"postgresql://{POSTGRES_USER}@{POSTGRES_HOST}:{POSTGRES_PORT}/{name}"
    finally:
        with _admin_connection() as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)),
            )


def empty_postgres_store(url: str) -> PostgresStore:
    """The store at `url`, migrated, with every table emptied."""
    store = PostgresStore.open(url)
    tables = sql.SQL(", ").join(sql.Identifier(table) for table in STORE_TABLES)
    statement = sql.SQL("TRUNCATE {} RESTART IDENTITY").format(tables).as_string()
    with store.engine.begin() as connection:
        connection.exec_driver_sql(statement)
    return store


@contextmanager
def _opened(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    made: Store
    if kind == "memory":
        made = MemoryStore()
    elif kind == "sqlite":
        made = SqliteStore.open(tmp_path / "h.db")
    else:
        made = empty_postgres_store(request.getfixturevalue("postgres_url"))
    try:
        yield made
    finally:
        made.close()


_POSTGRES = pytest.param("postgres", marks=pytest.mark.postgres)


@pytest.fixture(params=["memory", "sqlite", _POSTGRES])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A fresh, migrated, empty store of each backend."""
    with _opened(request.param, request, tmp_path) as made:
        yield made


@pytest.fixture(params=["sqlite", _POSTGRES])
def sql_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlStore]:
    """A fresh, migrated, empty SQL store of each SQL backend."""
    with _opened(request.param, request, tmp_path) as made:
        assert isinstance(made, SqlStore)
        yield made


@pytest.fixture(params=["sqlite", _POSTGRES])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of a fresh, migrated, empty store (a SQLite file, or PostgreSQL), closed."""
    with _opened(request.param, request, tmp_path):
        pass
    if request.param == "sqlite":
        return str(tmp_path / "h.db")
    url: str = request.getfixturevalue("postgres_url")
    return url


Race = Callable[[int, Callable[[int], bool]], list[bool]]


def _race(n: int, action: Callable[[int], bool]) -> list[bool]:
    barrier = threading.Barrier(n, timeout=RACE_TIMEOUT_S)
    results: list[bool | None] = [None] * n
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait()
            results[i] = action(i)
        except BaseException as exc:  # noqa: BLE001 - reported to the test below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=RACE_TIMEOUT_S)
    assert not any(thread.is_alive() for thread in threads), "a racer did not finish in time"
    assert errors == []
    finished = [result for result in results if result is not None]
    assert len(finished) == n
    return finished


@pytest.fixture
def race() -> Race:
    """`race(n, action)`: run action(0..n-1) in n threads released together; the results."""
    return _race
