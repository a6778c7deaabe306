"""Where the DBOS tests keep DBOS's system database, and the submissions they make.

`dbos_url` is a fresh SQLite file, or a fresh PostgreSQL database of its own (created
for the test, dropped after it). Without a PostgreSQL server the PostgreSQL cases skip
with the reason, except under CI=true, where they fail: CI must run them.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from handrail.principal import Principal
from handrail.tasks.runner import TaskSubmission

_ADMIN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres connect_timeout=3"
PRINCIPAL = Principal(user_id="ana", tenant_id="acme")


def _admin() -> psycopg.Connection[Any]:
    return psycopg.connect(_ADMIN, autocommit=True)


@pytest.fixture
def postgres_dbos_url() -> Iterator[str]:
    """A fresh PostgreSQL database for one test's DBOS system database."""
    name = f"handrail_dbos_{uuid.uuid4().hex[:10]}"
    try:
        with _admin() as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    except psycopg.OperationalError as exc:
        reason = f"no PostgreSQL accepts user 'postgres' at 127.0.0.1:5432 ({type(exc).__name__})"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI must start one before the tests")
        pytest.skip(reason)
    try:
        yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    finally:
        with _admin() as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def dbos_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """DBOS's system database: a fresh SQLite file, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'dbos.sqlite'}"
    url: str = request.getfixturevalue("postgres_dbos_url")
    return url


def submission(
    task_id: str,
    steps: Sequence[dict[str, Any]],
    *,
    now: datetime | None = None,
    max_attempts: int = 1,
    backoff_seconds: float = 0.01,
    expires_in: float = 3600.0,
    queue: str = "default",
    tool: str = "script",
) -> TaskSubmission:
    """A task of the scripted body (`_dbos_host.script_body`) running `steps`."""
    at = now or datetime.now(UTC)
    return TaskSubmission(
        task_id=task_id,
        intent_key=f"intent-{task_id}",
        tenant_id=PRINCIPAL.tenant_id,
        tool=tool,
        arguments={"steps": list(steps)},
        principal=PRINCIPAL.snapshot(),
        queue=queue,
        max_attempts=max_attempts,
        backoff_seconds=backoff_seconds,
        max_backoff_seconds=max(backoff_seconds, 1.0),
        submitted_at=at,
        expires_at=at + timedelta(seconds=expires_in),
    )
