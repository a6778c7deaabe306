"""Persistence: the Store protocol and its SQLite, PostgreSQL and in-memory implementations.

The SQL stores load SQLAlchemy, Alembic and psycopg, so they are imported on first use
(PEP 562): `import handrail.store` costs the protocol and the memory store only.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

from handrail.errors import ConfigurationError
from handrail.store.base import Store
from handrail.store.memory import MemoryStore

if TYPE_CHECKING:
    from handrail.store.postgres import PostgresStore
    from handrail.store.sql import SqlStore
    from handrail.store.sqlite import SqliteStore

__all__ = ["MemoryStore", "PostgresStore", "SqlStore", "SqliteStore", "Store", "open_store"]

_LAZY = {
    "PostgresStore": "handrail.store.postgres",
    "SqlStore": "handrail.store.sql",
    "SqliteStore": "handrail.store.sqlite",
}


def __getattr__(name: str) -> object:
    """Import a SQL store the first time it is named."""
    if (module := _LAZY.get(name)) is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def open_store(url: str | Path, *, migrate: bool = True) -> SqlStore:
    """Open a store by URL: `postgresql://...`, `sqlite:///path`, or a plain file path."""
    text = str(url)
    if text.startswith(("postgresql://", "postgresql+psycopg://", "postgres://")):
        from handrail.store.postgres import PostgresStore  # noqa: PLC0415 - loads psycopg

        return PostgresStore.open(text, migrate=migrate)
    if "://" in text and not text.startswith("sqlite:///"):
        raise ConfigurationError(
            f"unsupported store URL scheme in {text.split('://', maxsplit=1)[0]!r}"
        )
    from handrail.store.sqlite import SqliteStore  # noqa: PLC0415 - loads SQLAlchemy

    return SqliteStore.open(text.removeprefix("sqlite:///"), migrate=migrate)
