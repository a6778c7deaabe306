"""PostgreSQL seen from outside a store: its backends, a role with a connection limit, locks.

For the tests of connection bounds and lost connections. Backends are counted in
`pg_stat_activity` by the application name a store gives its connections; a role with
`CONNECTION LIMIT n` makes a store that opens more than n connections fail loudly,
whenever it does, not only when a sample happens to see the peak.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql

WAIT_S = 30.0
"""Bound on every wait for the database to reach a state; never reached when it works."""


def _admin(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(url, autocommit=True, connect_timeout=5)


def backends(url: str, application_name: str, *, waiting_on_lock: bool = False) -> int:
    """How many backends the connections named `application_name` hold now."""
    query = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
    if waiting_on_lock:
        query += " AND wait_event_type = 'Lock'"
    with _admin(url) as admin:
        row = admin.execute(query, (application_name,)).fetchone()
    assert row is not None
    return int(row[0])


def terminate(url: str, application_name: str) -> int:
    """End every backend of the connections named `application_name`; how many."""
    with _admin(url) as admin:
        ended = admin.execute(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
            "WHERE application_name = %s",
            (application_name,),
        ).fetchall()
    assert all(row == (True,) for row in ended)
    return len(ended)


def until(condition: Callable[[], bool], what: str) -> None:
    """Poll `condition` (a database state) until it holds, for at most WAIT_S."""
    end = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < end, f"never reached: {what}"
        time.sleep(0.01)


async def until_async(condition: Callable[[], bool], what: str) -> None:
    """`until` inside an event loop, which keeps running while it polls."""
    end = time.monotonic() + WAIT_S
    while not await asyncio.to_thread(condition):
        assert time.monotonic() < end, f"never reached: {what}"
        await asyncio.sleep(0.01)


def app_name() -> str:
    """A fresh application name, so a test counts only its own store's backends."""
    return f"handrail-test-{uuid.uuid4().hex[:10]}"


@contextmanager
def limited_role(url: str, limit: int) -> Iterator[str]:
    """The URL of a new role of this database that may hold at most `limit` connections.

    The role may read and write the store's tables (already migrated), nothing else;
    it is dropped at the end. Superusers ignore connection limits, hence the role.
    """
    role = f"handrail_pool_{uuid.uuid4().hex[:10]}"
    name = sql.Identifier(role)
    with _admin(url) as admin:
        admin.execute(
            sql.SQL("CREATE ROLE {} LOGIN CONNECTION LIMIT {}").format(name, sql.Literal(limit))
        )
        admin.execute(
            sql.SQL(
                "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {}"
            ).format(name)
        )
        admin.execute(sql.SQL("GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {}").format(name))
    rest = url.split("@", 1)[1]
    try:
        yield f"postgresql://{role}@{rest}"
    finally:
        with _admin(url) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE usename = %s",
                (role,),
            )
            admin.execute(sql.SQL("DROP OWNED BY {}").format(name))
            admin.execute(sql.SQL("DROP ROLE {}").format(name))


@contextmanager
def executions_locked(url: str) -> Iterator[None]:
    """Block every insert into `executions` (held by another session) until the end."""
    with _admin(url) as admin, admin.transaction():
        admin.execute("LOCK TABLE executions IN EXCLUSIVE MODE")
        yield
