"""People and console sessions in `SqlStore` (the console part; placeholder)."""

from __future__ import annotations

from handrail.store._sql_part import SqlPart

__all__ = ["SqlPeople"]


class SqlPeople(SqlPart):
    """People and console sessions: the `SqlStore` methods."""
