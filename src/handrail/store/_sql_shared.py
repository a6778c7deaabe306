"""State shared by the workers of one service in `SqlStore` (the workers part; placeholder)."""

from __future__ import annotations

from handrail.store._sql_part import SqlPart

__all__ = ["SqlShared"]


class SqlShared(SqlPart):
    """State shared by the workers of one service: the `SqlStore` methods."""
