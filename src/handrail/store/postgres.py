"""PostgresStore: the store for several instances, through psycopg 3.

Configured by a URL (`postgresql://user@host:port/db`). Uniqueness and compare-and-set
come from the database as on SQLite; concurrent inserts of one key block on the unique
index until the first commits, then lose. Queries live in `SqlStore`.
"""

from __future__ import annotations

import sqlalchemy as sa

from handrail.errors import ConfigurationError
from handrail.store._pg_async import AsyncExecutions
from handrail.store.sql import SqlStore

__all__ = ["PostgresStore"]

_SCHEMES = ("postgresql://", "postgresql+psycopg://", "postgres://")
_OPTIONS = "-c synchronous_commit=on -c timezone=UTC"


class PostgresStore(SqlStore):
    """A Store in a PostgreSQL database; `open` connects and (by default) migrates.

    The write path's claim and outcome statements also run on async connections
    (`async_executions`), so an execution costs no worker-thread hop.
    """

    _async: AsyncExecutions | None = None

    @property
    def async_executions(self) -> AsyncExecutions | None:
        """Claims and outcome writes without a worker thread."""
        return self._async

    def close(self) -> None:
        """Close the async connections, then the pool."""
        if self._async is not None:
            self._async.close()
        super().close()

    @classmethod
    def open(cls, url: str, *, migrate: bool = True, pool_size: int = 10) -> PostgresStore:
        """Connect to `url` with psycopg 3; the schema is migrated unless told not to."""
        if not url.startswith(_SCHEMES):
            raise ConfigurationError("a PostgreSQL store URL starts with postgresql://")
        driver_url = "postgresql+psycopg://" + url.split("://", 1)[1]
        engine = sa.create_engine(
            driver_url,
            pool_size=pool_size,
            # No ping per checkout (a round trip each time): connections are recycled
            # instead, and a dropped one surfaces as a StoreError (TRANSIENT to callers).
            pool_recycle=1800,
            # Committed means on disk, as with SQLite's synchronous=FULL.
            connect_args={"options": _OPTIONS},
        )
        store = cls(engine)
        store._async = AsyncExecutions(
            "postgresql://" + url.split("://", 1)[1],
            options=_OPTIONS,
            per_loop=pool_size,
        )
        if migrate:
            store.migrate()
        return store
