"""The audit trail of `SqlStore`: appending rows, the tail read and the tenant's search.

A row holds the events of one call (`_audit_rows`). Reads go newest row first, by
keyset, a batch of rows at a time: filters on the subject (tenant, tool, user, call)
and the rows' narrowing columns are SQL, then each event is compared exactly. A page
continues below the last event number the caller saw (`before_seq`), so pages stay
stable while events are appended and no offset is ever scanned twice.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import sqlalchemy as sa

from handrail.errors import StoreError
from handrail.events import AuditEvent, AuditItem
from handrail.store._audit_rows import (
    SEQ_SHIFT,
    TRAIL_COLUMNS,
    TrailRow,
    micros,
    row_events,
    trail_rows,
)
from handrail.store._sql_part import SqlPart
from handrail.store._tables import audit_trails

__all__ = ["SqlAudit"]

_A = audit_trails.c
_Accept = Callable[[int, AuditEvent], bool]


class SqlAudit(SqlPart):
    """The audit trail: the `SqlStore` methods."""

    def append_audit(self, events: Sequence[AuditEvent]) -> None:
        """Insert events in one transaction, as `storable_events` makes them (a row each)."""
        self.append_audit_items(events)

    def append_audit_items(self, items: Sequence[AuditItem]) -> None:
        """`append_audit` of the items' events, each call's record as one row.

        For `BatchingAuditSink`, whose writer takes records as the auditor emitted them.
        """
        if not items:
            return
        try:
            rows = trail_rows(items)
        except (TypeError, ValueError) as exc:
            raise StoreError(f"audit write failed: {type(exc).__name__}") from exc
        self._insert_trail(rows)

    def _insert_trail(self, rows: list[TrailRow]) -> None:
        """Insert the rows in one transaction (a store may send them its own way)."""
        try:
            with self._engine.begin() as connection:
                connection.execute(
                    audit_trails.insert(),
                    [dict(zip(TRAIL_COLUMNS, row, strict=True)) for row in rows],
                )
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(f"audit write failed: {type(exc).__name__}") from exc

    def read_audit(
        self,
        *,
        limit: int = 50,
        tenant_id: str | None = None,
        tool_call_id: str | None = None,
    ) -> list[AuditEvent]:
        """The newest `limit` matching events, oldest first."""
        where = []
        if tenant_id is not None:
            where.append(_A.tenant_id == tenant_id)
        if tool_call_id is not None:
            where.append(_A.tool_call_id == tool_call_id)
        found = self._newest("audit read", where, None, limit)
        return [event for _, event in reversed(found)]

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
        where = [_A.tenant_id == tenant_id]
        for column, value in (
            (_A.tool, tool),
            (_A.user_id, user_id),
            (_A.tool_call_id, tool_call_id),
        ):
            if value is not None:
                where.append(column == value)
        checks: list[_Accept] = []
        if decision is not None:
            where.append(_A.decisions.contains(f"|{decision}|", autoescape=True))
            checks.append(lambda _, event: event.decision == decision)
        if code is not None:
            where.append(_A.codes.contains(f"|{code}|", autoescape=True))
            checks.append(lambda _, event: event.code == code)
        if since is not None:
            start = micros(since.astimezone(UTC))
            where.append(_A.latest_us >= start)
            checks.append(lambda _, event: micros(event.at) >= start)
        if until is not None:
            end = micros(until.astimezone(UTC))
            where.append(_A.earliest_us < end)
            checks.append(lambda _, event: micros(event.at) < end)
        if before_seq is not None:
            # The row of event `before_seq - 1` and every row before it.
            where.append(_A.seq <= (before_seq - 1) >> SEQ_SHIFT)
            checks.append(lambda seq, _: seq < before_seq)

        def accept(seq: int, event: AuditEvent) -> bool:
            return all(check(seq, event) for check in checks)

        return self._newest("audit search", where, accept if checks else None, limit)

    def _newest(
        self,
        what: str,
        where: list[sa.ColumnElement[bool]],
        accept: _Accept | None,
        limit: int,
    ) -> list[tuple[int, AuditEvent]]:
        """Up to `limit` events of the rows matching `where` that `accept`, newest first."""
        if limit <= 0:
            return []
        batch = max(8, limit // 4)

        def read(connection: sa.Connection) -> list[tuple[int, AuditEvent]]:
            found: list[tuple[int, AuditEvent]] = []
            below: int | None = None
            while True:
                query = sa.select(audit_trails).where(*where)
                if below is not None:
                    query = query.where(_A.seq < below)
                rows = (
                    connection.execute(query.order_by(_A.seq.desc()).limit(batch)).mappings().all()
                )
                for row in rows:
                    for seq, event in reversed(row_events(row)):
                        if accept is None or accept(seq, event):
                            found.append((seq, event))
                            if len(found) == limit:
                                return found
                if len(rows) < batch:
                    return found
                below = int(rows[-1]["seq"])

        return self._read(what, read, None)
