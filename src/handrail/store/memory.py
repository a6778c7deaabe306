"""MemoryStore: the Store contract in one process's memory, for tests only.

It passes the same contract tests as the SQL stores. It is not durable and not shared
between processes, so it never backs a real deployment.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from handrail.audit import AuditEvent

__all__ = ["MemoryStore"]


class MemoryStore:
    """A thread-safe in-memory Store."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._audit: list[AuditEvent] = []

    def migrate(self) -> None:
        """Nothing to migrate."""

    def append_audit(self, events: Sequence[AuditEvent]) -> None:
        """Append events under a lock, so a batch is never interleaved."""
        with self._lock:
            self._audit.extend(events)

    def read_audit(
        self,
        *,
        limit: int = 50,
        tenant_id: str | None = None,
        tool_call_id: str | None = None,
    ) -> list[AuditEvent]:
        """The newest `limit` matching events, oldest first."""
        with self._lock:
            rows = [
                e
                for e in self._audit
                if (tenant_id is None or e.tenant_id == tenant_id)
                and (tool_call_id is None or e.tool_call_id == tool_call_id)
            ]
        return rows[-limit:] if limit > 0 else []

    def close(self) -> None:
        """Nothing to release."""
