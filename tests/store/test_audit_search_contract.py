"""Every Store searches one tenant's audit trail alike: filters, time range, keyset pages.

The `store` fixture runs each test on the memory, SQLite and PostgreSQL stores.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from handrail.events import AuditEvent, AuditSubject
from handrail.store import Store

_START = datetime(2026, 1, 1, tzinfo=UTC)


def _event(
    n: int,
    *,
    tenant: str = "acme",
    tool: str = "payments.get_order",
    decision: str = "pass",
    code: str | None = None,
    user: str = "alice",
    call: str | None = None,
) -> AuditEvent:
    return AuditEvent(
        event_id=f"ev-{tenant}-{n}",
        at=_START + timedelta(minutes=n),
        kind="call",
        stage="result",
        decision=decision,
        code=code,
        subject=AuditSubject(
            tenant_id=tenant, tool=tool, user_id=user, tool_call_id=call or f"call-{n}"
        ),
    )


def _ids(found: list[tuple[int, AuditEvent]]) -> list[str]:
    return [event.event_id for _, event in found]


def test_a_search_returns_only_the_tenants_events_newest_first(store: Store) -> None:
    store.append_audit([_event(1), _event(2, tenant="globex"), _event(3)])
    found = store.search_audit(tenant_id="acme")
    assert _ids(found) == ["ev-acme-3", "ev-acme-1"]
    assert found[0][0] > found[1][0]
    assert store.search_audit(tenant_id="nobody") == []


def test_every_filter_narrows_the_search(store: Store) -> None:
    store.append_audit(
        [
            _event(1, tool="payments.refund_order", decision="refused", code="PERMISSION_DENIED"),
            _event(2, user="bob"),
            _event(3, call="c-x"),
            _event(4),
        ]
    )
    assert _ids(store.search_audit(tenant_id="acme", tool="payments.refund_order")) == ["ev-acme-1"]
    assert _ids(store.search_audit(tenant_id="acme", decision="refused")) == ["ev-acme-1"]
    assert _ids(store.search_audit(tenant_id="acme", code="PERMISSION_DENIED")) == ["ev-acme-1"]
    assert _ids(store.search_audit(tenant_id="acme", user_id="bob")) == ["ev-acme-2"]
    assert _ids(store.search_audit(tenant_id="acme", tool_call_id="c-x")) == ["ev-acme-3"]
    assert store.search_audit(tenant_id="acme", user_id="bob", code="PERMISSION_DENIED") == []


def test_the_time_range_includes_since_and_excludes_until(store: Store) -> None:
    store.append_audit([_event(n) for n in range(1, 6)])
    found = store.search_audit(
        tenant_id="acme",
        since=_START + timedelta(minutes=2),
        until=_START + timedelta(minutes=4),
    )
    assert _ids(found) == ["ev-acme-3", "ev-acme-2"]


def test_times_in_another_offset_mean_the_same_instant(store: Store) -> None:
    store.append_audit([_event(n) for n in range(1, 4)])
    plus_two = _START.astimezone(timezone(timedelta(hours=2)))
    found = store.search_audit(tenant_id="acme", since=plus_two + timedelta(minutes=3))
    assert _ids(found) == ["ev-acme-3"]


def test_pages_continue_below_the_last_sequence_number_shown(store: Store) -> None:
    store.append_audit([_event(n) for n in range(1, 8)])
    first = store.search_audit(tenant_id="acme", limit=3)
    assert _ids(first) == ["ev-acme-7", "ev-acme-6", "ev-acme-5"]
    # Events appended meanwhile do not shift the next page.
    store.append_audit([_event(8)])
    second = store.search_audit(tenant_id="acme", before_seq=first[-1][0], limit=3)
    assert _ids(second) == ["ev-acme-4", "ev-acme-3", "ev-acme-2"]
    last = store.search_audit(tenant_id="acme", before_seq=second[-1][0], limit=3)
    assert _ids(last) == ["ev-acme-1"]
    assert store.search_audit(tenant_id="acme", before_seq=1) == []
    assert store.search_audit(tenant_id="acme", limit=0) == []
