"""Attacks on a service of several servers: starting them all at once on a fresh database.

`handrail serve` migrates its store on start (`migrate = true` by default). Servers of
one service started together on a new PostgreSQL database used to race through the
migrations, and all but one died ("migration failed: IntegrityError"); the migration
now holds an advisory lock, so each either upgrades or finds the schema at head.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from _stores import Race, fresh_postgres_database
from handrail.store import PostgresStore

pytestmark = pytest.mark.postgres

SERVERS = 4


def test_servers_migrating_one_fresh_database_at_once_all_start(race: Race) -> None:
    with fresh_postgres_database() as url:
        opened: list[PostgresStore] = []

        def start(_: int) -> bool:
            store = PostgresStore.open(url, pool_size=1)  # migrates, as `handrail serve` does
            opened.append(store)
            return True

        try:
            assert race(SERVERS, start) == [True] * SERVERS
            with opened[0].engine.connect() as connection:
                versions = connection.execute(sa.text("SELECT * FROM alembic_version")).all()
                tables = connection.execute(
                    sa.text("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
                ).scalar_one()
        finally:
            for store in opened:
                store.close()
    assert len(versions) == 1
    assert tables > 1
