"""Idempotency-Key records in `SqlStore` (the serve part; placeholder)."""

from __future__ import annotations

from handrail.store._sql_part import SqlPart

__all__ = ["SqlIdempotency"]


class SqlIdempotency(SqlPart):
    """Idempotency-Key records: the `SqlStore` methods."""
