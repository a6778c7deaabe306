"""PostgresStore: the store for several instances, through psycopg 3.

Configured by a URL (`postgresql://user@host:port/db`). Uniqueness and compare-and-set
come from the database as on SQLite; concurrent inserts of one key block on the unique
index until the first commits, then lose. Queries live in `SqlStore`. Every pool
it opens is bounded (see `PostgresStore.open`): a burst of calls waits for a
connection instead of opening more.
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
    def open(
        cls,
        url: str,
        *,
        migrate: bool = True,
        pool_size: int = 10,
        max_overflow: int = 0,
        async_pool_size: int | None = None,
        pool_timeout: float = 30.0,
        application_name: str = "handrail",
    ) -> PostgresStore:
        """Connect to `url` with psycopg 3; the schema is migrated unless told not to.

        Connections are bounded: at most `pool_size + max_overflow` for the blocking
        statements (SQLAlchemy's pool; the overflow is closed after use), and at most
        `async_pool_size` (default: `pool_size`) for the write path's claims and
        outcomes on the event loop, across all loops. A statement that finds its pool
        exhausted waits up to `pool_timeout` seconds (a claim: no longer than its
        call's deadline), then fails with a StoreError; it never opens one more.
        `application_name` names the connections in `pg_stat_activity`.
        """
        if not url.startswith(_SCHEMES):
            raise ConfigurationError("a PostgreSQL store URL starts with postgresql://")
        async_size = pool_size if async_pool_size is None else async_pool_size
        if pool_size < 1 or async_size < 1 or max_overflow < 0 or not pool_timeout > 0:
            raise ConfigurationError(
                "pool sizes must be at least 1, the overflow at least 0, the timeout positive"
            )
        driver_url = "postgresql+psycopg://" + url.split("://", 1)[1]
        engine = sa.create_engine(
            driver_url,
            pool_size=pool_size,
            max_overflow=max_overflow,
            pool_timeout=pool_timeout,
            # No ping per checkout (a round trip each time): connections are recycled
            # instead, and a dropped one surfaces as a StoreError (TRANSIENT to callers).
            pool_recycle=1800,
            # A failed statement's text never lists its values (arguments, summaries):
            # the exception reaches logs.
            hide_parameters=True,
            # Committed means on disk, as with SQLite's synchronous=FULL.
            connect_args={"options": _OPTIONS, "application_name": application_name},
        )
        store = cls(engine)
        store._async = AsyncExecutions(
            "postgresql://" + url.split("://", 1)[1],
            options=_OPTIONS,
            max_connections=async_size,
            timeout=pool_timeout,
            application_name=application_name,
        )
        if migrate:
            store.migrate()
        return store
