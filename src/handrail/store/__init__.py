"""Persistence: the Store protocol and its SQLite, PostgreSQL and in-memory implementations."""

from __future__ import annotations

from pathlib import Path

from handrail.errors import ConfigurationError
from handrail.store.base import Store
from handrail.store.memory import MemoryStore
from handrail.store.postgres import PostgresStore
from handrail.store.sql import SqlStore
from handrail.store.sqlite import SqliteStore

__all__ = ["MemoryStore", "PostgresStore", "SqlStore", "SqliteStore", "Store", "open_store"]


def open_store(url: str | Path, *, migrate: bool = True) -> SqlStore:
    """Open a store by URL: `postgresql://...`, `sqlite:///path`, or a plain file path."""
    text = str(url)
    if text.startswith(("postgresql://", "postgresql+psycopg://", "postgres://")):
        return PostgresStore.open(text, migrate=migrate)
    if text.startswith("sqlite:///"):
        return SqliteStore.open(text.removeprefix("sqlite:///"), migrate=migrate)
    if "://" in text:
        raise ConfigurationError(
            f"unsupported store URL scheme in {text.split('://', maxsplit=1)[0]!r}"
        )
    return SqliteStore.open(text, migrate=migrate)
