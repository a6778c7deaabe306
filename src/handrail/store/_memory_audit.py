"""The audit search of `MemoryStore`: the same contract as `SqlAudit`'s, in one process.

An event's sequence number is its position in the append order, counted from 1. The
SQL stores number an event by its row and its place in the row, so the numbers differ
between stores; what they order, and how pages continue, does not.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from handrail.events import AuditEvent

__all__ = ["MemoryAuditSearch"]


class MemoryAuditSearch:
    """The audit search: the `MemoryStore` method (a mixin over its lock and events)."""

    _lock: threading.Lock
    _audit: list[AuditEvent]

    def search_audit(
        self,
        *,
        tenant_id: str,
        tool: str | None = None,
        decision: str | None = None,
        code: str | None = None,
        user_id: str | None = None,
        tool_call_id: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        before_seq: int | None = None,
        limit: int = 50,
    ) -> list[tuple[int, AuditEvent]]:
        """The tenant's matching events with their sequence numbers, newest first."""
        wanted = {
            "tool": tool,
            "decision": decision,
            "code": code,
            "user_id": user_id,
            "tool_call_id": tool_call_id,
        }
        start = None if since is None else since.astimezone(UTC)
        end = None if until is None else until.astimezone(UTC)
        with self._lock:
            last = len(self._audit) if before_seq is None else min(before_seq - 1, len(self._audit))
            found: list[tuple[int, AuditEvent]] = []
            for seq in range(last, 0, -1):
                if len(found) >= limit:
                    break
                event = self._audit[seq - 1]
                if (
                    event.tenant_id == tenant_id
                    and all(v is None or getattr(event, k) == v for k, v in wanted.items())
                    and (start is None or event.at >= start)
                    and (end is None or event.at < end)
                ):
                    found.append((seq, event))
        return found
