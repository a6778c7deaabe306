"""Idempotency-Key records in `MemoryStore` (the serve part; placeholder)."""

from __future__ import annotations

import threading

__all__ = ["MemoryIdempotency"]


class MemoryIdempotency:
    """Idempotency-Key records: `MemoryStore` methods."""

    _lock: threading.Lock

    def _init_idempotency(self) -> None:
        """Called by `MemoryStore.__init__`: this part's empty state."""
