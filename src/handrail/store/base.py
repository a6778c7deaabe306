"""The Store protocol: what Handrail persists, independent of the database.

Methods block; async callers run them in a worker thread (the audit sink does so
from its own thread). Later stages add plans, confirmations and execution records
here, each with a contract test run against every implementation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from handrail.audit import AuditEvent

__all__ = ["Store"]


class Store(Protocol):
    """Durable state of Handrail: for now, the audit trail."""

    def migrate(self) -> None:
        """Bring the schema to the newest version; safe to call on every start."""
        ...

    def append_audit(self, events: Sequence[AuditEvent]) -> None:
        """Write events atomically, in order. Raises StoreError on failure."""
        ...

    def read_audit(
        self,
        *,
        limit: int = 50,
        tenant_id: str | None = None,
        tool_call_id: str | None = None,
    ) -> list[AuditEvent]:
        """The newest `limit` matching events, oldest first."""
        ...

    def close(self) -> None:
        """Release connections."""
        ...
