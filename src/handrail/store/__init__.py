"""Persistence: the Store protocol and its SQLite and in-memory implementations."""

from handrail.store.base import Store
from handrail.store.memory import MemoryStore
from handrail.store.sqlite import SqliteStore

__all__ = ["MemoryStore", "SqliteStore", "Store"]
