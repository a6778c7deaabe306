"""People and console sessions in `MemoryStore` (the console part; placeholder)."""

from __future__ import annotations

import threading

__all__ = ["MemoryPeople"]


class MemoryPeople:
    """People and console sessions: `MemoryStore` methods."""

    _lock: threading.Lock

    def _init_people(self) -> None:
        """Called by `MemoryStore.__init__`: this part's empty state."""
