"""A call's events kept as one row of `audit_trails`: read back, searched and paged exactly.

The SQL stores keep each call's record as one row (`handrail.store._audit_rows`) and
search by narrowing rows in SQL, then comparing events. Every search here is run on the
same trail in a `MemoryStore`, which keeps one event per entry, and must page alike.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from handrail.errors import StoreError
from handrail.events import (
    AuditEvent,
    AuditItem,
    AuditSubject,
    CallRecord,
    events_of,
    storable_events,
)
from handrail.store import MemoryStore, SqlStore
from handrail.store._audit_rows import SEQ_SHIFT
from handrail.store._tables import audit_trails

_NS = 1_767_225_600_000_000_000  # 2026-01-01 UTC, in ns
_DECISIONS = ("pass", "PASS", "refused", "100%", "a|b", "a_b", "ok")
_CODES = (None, "PERMISSION_DENIED", "permission_denied", "X%", "|")
_TENANTS = ("acme", "globex")


def _record(n: int, stages: int, *, first: int | None = None) -> CallRecord:
    """Call `n`: `stages` stages a second apart, decisions and codes taken in turn."""
    subject = (
        f"r{n}",
        f"call-{n % 5}",
        f"tool.{n % 3}",
        "1",
        "ab" * 32,
        '{"x": 1}',
        f"user-{n % 2}",
        _TENANTS[n % 2],
    )
    return CallRecord(
        "call",
        subject,
        [
            (
                f"stage-{k}",
                _DECISIONS[(n + k) % len(_DECISIONS)],
                _CODES[(n * 3 + k) % len(_CODES)],
                f"detail {n}/{k} ü" if k % 2 else None,
                0.001 * k,
                _NS + (n * 10 + k) * 1_000_000_000,
            )
            for k in range(stages)
        ],
        id_prefix=f"{n:024x}",
        id_first=1 if first is None else first,
    )


def _noted(n: int, stages: int) -> CallRecord:
    """Call `n` as a trail on the system clock notes it (`CallNotes`), some text unstorable."""
    record = _record(n, stages)
    wall, start = _NS + n * 10_000_000_000, 5_000_000_000 + n
    notes: list[object] = [*record.subject_fields, wall, start]
    for k, (stage, decision, code, detail, _, _) in enumerate(record.stages):
        text = "nul \x00 in a detail" if n % 7 == 3 and k == 1 else detail
        notes += (stage, decision, code, text, start + k * 10**9 + (k + 1) * 1_234_567, None)
    return CallRecord.noted("call", tuple(notes), id_prefix=f"{n:024x}", id_first=1)


def _lone(n: int) -> AuditEvent:
    return AuditEvent(
        event_id=f"lone-{n}",
        at=datetime.fromtimestamp(_NS / 1e9, UTC) + timedelta(seconds=n * 10 + 3),
        kind="registry",
        stage="register",
        decision=_DECISIONS[n % len(_DECISIONS)],
        code=_CODES[n % len(_CODES)],
        subject=AuditSubject(tenant_id=_TENANTS[n % 2], tool=f"tool.{n % 3}", user_id="admin"),
    )


def _trail() -> list[AuditItem]:
    items: list[AuditItem] = []
    for n in range(40):
        items.append(_noted(n, 1 + n % 9) if n % 3 else _record(n, 1 + n % 9))
        if n % 4 == 0:
            items.append(_lone(n))
    return items


def _rows(store: SqlStore) -> int:
    with store.engine.connect() as connection:
        count = connection.execute(sa.select(sa.func.count()).select_from(audit_trails)).scalar()
    return int(count or 0)


def _written(store: SqlStore) -> MemoryStore:
    """`store` holding the trail as rows; a MemoryStore holding its events one by one."""
    items = _trail()
    store.append_audit_items(items[:30])
    store.append_audit_items(items[30:])
    memory = MemoryStore()
    memory.append_audit(events_of(items))
    return memory


def _pages(store: SqlStore | MemoryStore, size: int, **filters: object) -> list[list[AuditEvent]]:
    pages: list[list[AuditEvent]] = []
    before: int | None = None
    while True:
        found = store.search_audit(limit=size, before_seq=before, **filters)  # type: ignore[arg-type]
        if not found:
            return pages
        seqs = [seq for seq, _ in found]
        assert seqs == sorted(seqs, reverse=True)
        assert before is None or seqs[0] < before
        pages.append([event for _, event in found])
        before = seqs[-1]


def test_a_call_is_one_row_and_reads_back_as_its_events(sql_store: SqlStore) -> None:
    record = _record(7, 7)
    sql_store.append_audit_items([record, _lone(1)])
    with sql_store.engine.connect() as connection:
        assert (
            connection.execute(sa.select(sa.func.count()).select_from(audit_trails)).scalar() == 2
        )
    assert sql_store.read_audit(limit=100) == [*record.events(), _lone(1)]
    ids = [e.event_id for e in sql_store.read_audit(limit=100)]
    assert ids[:2] == [f"{7:024x}00000001", f"{7:024x}00000002"]
    assert len(set(ids)) == 8


def test_a_time_in_another_zone_is_kept_as_the_same_instant(sql_store: SqlStore) -> None:
    lone = _lone(2)
    east = lone.at.astimezone(timezone(timedelta(hours=5)))
    sql_store.append_audit([replace(lone, at=east)])
    [kept] = sql_store.read_audit()
    assert kept.at == east
    assert kept.at.tzinfo is UTC
    assert sql_store.search_audit(tenant_id=_TENANTS[0], until=east) == []
    assert len(sql_store.search_audit(tenant_id=_TENANTS[0], since=east)) == 1


def test_a_call_noted_on_the_system_clock_reads_back_as_its_events(sql_store: SqlStore) -> None:
    records = [_noted(1, 7), _noted(2, 1), _noted(3, 4)]
    sql_store.append_audit_items(records)
    expected = storable_events(events_of(records))
    assert sql_store.read_audit(limit=100) == expected
    # The third holds a NUL: it is kept escaped, one row per event, as every store keeps it.
    assert sql_store.read_audit(limit=3)[0].detail == "nul \\u0000 in a detail"
    assert _rows(sql_store) == 6


def test_the_newest_events_may_end_inside_a_row(sql_store: SqlStore) -> None:
    first, second = _record(1, 5), _record(2, 5)
    sql_store.append_audit_items([first, second])
    assert sql_store.read_audit(limit=3) == second.events()[-3:]
    assert sql_store.read_audit(limit=7) == [*first.events()[-2:], *second.events()]
    assert sql_store.read_audit(limit=0) == []


@pytest.mark.parametrize("size", [1, 2, 3, 7, 50])
def test_pages_step_event_by_event_through_rows(sql_store: SqlStore, size: int) -> None:
    memory = _written(sql_store)
    for tenant in _TENANTS:
        assert _pages(sql_store, size, tenant_id=tenant) == _pages(memory, size, tenant_id=tenant)


@pytest.mark.parametrize("seconds", [11, 31, 73, 74, 132])
def test_a_time_range_may_cut_a_row(sql_store: SqlStore, seconds: int) -> None:
    memory = _written(sql_store)
    at = datetime.fromtimestamp(_NS / 1e9, UTC) + timedelta(seconds=seconds)
    for tenant in _TENANTS:
        for bound in ({"since": at}, {"until": at}):
            assert _pages(sql_store, 4, tenant_id=tenant, **bound) == _pages(
                memory, 4, tenant_id=tenant, **bound
            )


_FILTERS = st.fixed_dictionaries(
    {"tenant_id": st.sampled_from(_TENANTS)},
    optional={
        "tool": st.sampled_from(["tool.0", "tool.1", "tool.9"]),
        "decision": st.sampled_from([*_DECISIONS, "Pass", "%", "a"]),
        "code": st.sampled_from([c for c in _CODES if c] + ["x%", "PERMISSION"]),
        "user_id": st.sampled_from(["user-0", "user-1", "admin"]),
        "tool_call_id": st.sampled_from(["call-1", "call-4", "call-9"]),
        "since": st.integers(0, 420).map(
            lambda s: datetime.fromtimestamp(_NS / 1e9, UTC) + timedelta(seconds=s)
        ),
        "until": st.integers(0, 420).map(
            lambda s: datetime.fromtimestamp(_NS / 1e9, UTC) + timedelta(seconds=s)
        ),
    },
)


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(filters=_FILTERS, size=st.sampled_from([1, 3, 10, 100]))
def test_every_search_pages_as_the_memory_store_does(
    sql_store: SqlStore, filters: dict[str, object], size: int
) -> None:
    # The trail is written once per store; every example only reads it.
    if not sql_store.read_audit(limit=1):
        _written(sql_store)
    memory = MemoryStore()
    memory.append_audit(events_of(_trail()))
    assert _pages(sql_store, size, **filters) == _pages(memory, size, **filters)


def test_a_record_longer_than_a_row_takes_several(sql_store: SqlStore) -> None:
    stages = (1 << SEQ_SHIFT) + 10
    record = _record(3, stages)
    sql_store.append_audit_items([record])
    with sql_store.engine.connect() as connection:
        first_ids = list(connection.execute(sa.select(audit_trails.c.event_id)).scalars())
    assert sorted(first_ids) == [f"{3:024x}00000001", f"{3:024x}{(1 << SEQ_SHIFT) + 1:08x}"]
    assert sql_store.read_audit(limit=1000) == record.events()
    found = sql_store.search_audit(tenant_id=_TENANTS[1], limit=1000)
    assert [event for _, event in reversed(found)] == record.events()


def test_ids_whose_counter_would_outgrow_its_digits_are_written_one_row_each(
    sql_store: SqlStore,
) -> None:
    record = _record(5, 3, first=16**8 - 2)
    sql_store.append_audit_items([record])
    events = sql_store.read_audit(limit=10)
    assert events == record.events()
    assert events[-1].event_id == f"{5:024x}100000000"
    with sql_store.engine.connect() as connection:
        assert (
            connection.execute(sa.select(sa.func.count()).select_from(audit_trails)).scalar() == 3
        )


def test_a_record_written_twice_is_a_store_error_and_writes_nothing(sql_store: SqlStore) -> None:
    record = _record(1, 4)
    sql_store.append_audit_items([record])
    with pytest.raises(StoreError):
        sql_store.append_audit_items([_record(2, 2), record])
    assert sql_store.read_audit(limit=100) == record.events()


def test_a_row_the_store_did_not_write_is_a_store_error_on_read(sql_store: SqlStore) -> None:
    with sql_store.engine.begin() as connection:
        connection.execute(
            audit_trails.insert(),
            {
                "event_id": "forged",
                "kind": "call",
                "earliest_us": 0,
                "latest_us": 0,
                "decisions": "|pass|",
                "events": '[["only-three", "fields", null]]',
                "tenant_id": "acme",
            },
        )
    with pytest.raises(StoreError, match="unreadable row"):
        sql_store.read_audit()
    with pytest.raises(StoreError, match="unreadable row"):
        sql_store.search_audit(tenant_id="acme")


def test_a_time_that_is_not_a_time_is_a_store_error(sql_store: SqlStore) -> None:
    at = "2026-01-01T00:00:00"
    bad = CallRecord("call", (None,) * 8, [("s", "pass", None, None, 0.1, at)], ids=["x"])  # type: ignore[list-item]
    with pytest.raises(StoreError):
        sql_store.append_audit_items([bad])
    assert sql_store.read_audit() == []
