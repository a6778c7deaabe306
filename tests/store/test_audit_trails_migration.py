"""Revision 0014 moves the audit trail to one row per call and keeps every event.

Events written by a store of revision 0013 (a row of `audit_events` each) read back the
same after the upgrade, in the same order, searchable as before; new calls are
numbered after them on both backends; a downgrade writes every event back, calls
written as one row included.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from _migrations import EmptyDatabase, append_old_audit, migrate, table_names
from handrail.events import AuditEvent, AuditSubject, CallRecord

_T0 = datetime(2026, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)


def _old(n: int) -> AuditEvent:
    return AuditEvent(
        event_id=f"old-{n}",
        at=_T0 + timedelta(seconds=n),
        kind="call",
        stage="lookup" if n % 2 else "execute",
        decision="pass" if n % 3 else "refused",
        code=None if n % 3 else "PERMISSION_DENIED",
        duration_ms=None if n == 1 else n / 7,
        detail="kein Zugriff ü" if n == 2 else None,
        subject=AuditSubject(
            tenant_id="acme" if n % 2 else "globex",
            tool_call_id=f"call-{n}",
            tool="payments.get_order",
            user_id="alice",
            args_summary='{"order": 1}',
        ),
    )


def _new() -> CallRecord:
    subject = (None, "call-new", "payments.get_order", "1", None, None, "bob", "acme")
    ns = 1_800_000_000_000_000_000
    return CallRecord(
        "call",
        subject,
        [(f"s{k}", "pass", None, None, 0.5, ns + k * 1000) for k in range(3)],
        id_prefix="f" * 24,
        id_first=1,
    )


def test_upgrading_keeps_every_event_in_order_and_numbers_new_calls_after_them(
    empty_database: EmptyDatabase,
) -> None:
    engine = empty_database.engine
    migrate(engine, "0013")
    old = [_old(n) for n in range(1, 7)]
    append_old_audit(engine, old)
    with empty_database.reopened() as store:
        assert "audit_events" not in table_names(store.engine)
        assert store.read_audit(limit=100) == old
        acme = store.search_audit(tenant_id="acme")
        assert [e.event_id for _, e in acme] == ["old-5", "old-3", "old-1"]
        refused = store.search_audit(tenant_id="globex", decision="refused")
        assert [e.event_id for _, e in refused] == ["old-6"]
        store.append_audit_items([_new()])
        after = store.search_audit(tenant_id="acme")
        assert [e.event_id for _, e in after][:3] == [f"{'f' * 24}{k:08x}" for k in (3, 2, 1)]
        assert after[3][0] < after[2][0]
        assert store.read_audit(limit=100) == [*old, *_new().events()]


def test_downgrading_writes_every_event_back_as_a_row(empty_database: EmptyDatabase) -> None:
    engine = empty_database.engine
    migrate(engine, "0013")
    old = [_old(n) for n in range(1, 4)]
    append_old_audit(engine, old)
    with empty_database.reopened() as store:
        store.append_audit_items([_new()])
        expected = store.read_audit(limit=100)
    migrate(engine, "0013", down=True)
    assert "audit_trails" not in table_names(engine)
    with engine.connect() as connection:
        rows = connection.execute(
            sa.text("SELECT event_id, stage, tenant_id FROM audit_events ORDER BY seq")
        ).all()
    assert [tuple(row) for row in rows] == [(e.event_id, e.stage, e.tenant_id) for e in expected]
    with empty_database.reopened() as store:
        assert store.read_audit(limit=100) == expected
