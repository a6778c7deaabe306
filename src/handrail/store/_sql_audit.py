"""The audit search of `SqlStore`: one tenant's events by filter, newest first, by keyset.

Owns the search query only; appending and the plain tail read stay in `SqlStore`. A
page continues below the last sequence number the caller saw (`before_seq`), so pages
stay stable while events are appended and no offset is ever scanned twice.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa

from handrail.events import AuditEvent
from handrail.store._rows import stored_event, utc
from handrail.store._sql_part import SqlPart
from handrail.store._tables import audit_events

__all__ = ["SqlAuditSearch"]

_A = audit_events.c


class SqlAuditSearch(SqlPart):
    """The audit search: the `SqlStore` method."""

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
        query = (
            sa.select(audit_events)
            .where(_A.tenant_id == tenant_id)
            .order_by(_A.seq.desc())
            .limit(max(0, limit))
        )
        for column, value in (
            (_A.tool, tool),
            (_A.decision, decision),
            (_A.code, code),
            (_A.user_id, user_id),
            (_A.tool_call_id, tool_call_id),
        ):
            if value is not None:
                query = query.where(column == value)
        if since is not None:
            query = query.where(_A.at >= utc(since))
        if until is not None:
            query = query.where(_A.at < utc(until))
        if before_seq is not None:
            query = query.where(_A.seq < before_seq)

        def read(connection: sa.Connection) -> list[tuple[int, AuditEvent]]:
            rows = connection.execute(query).mappings()
            return [(int(row["seq"]), stored_event(row)) for row in rows]

        return self._read("audit search", read, None)
