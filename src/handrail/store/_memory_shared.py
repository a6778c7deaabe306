"""State shared by the workers of one service in `MemoryStore` (the workers part; placeholder)."""

from __future__ import annotations

import threading

__all__ = ["MemoryShared"]


class MemoryShared:
    """State shared by the workers of one service: `MemoryStore` methods."""

    _lock: threading.Lock

    def _init_shared(self) -> None:
        """Called by `MemoryStore.__init__`: this part's empty state."""
