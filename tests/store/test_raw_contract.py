"""Every Store keeps raw results by the same contract; migration 0003 adds them to old stores.

A ref is written once and never overwritten; bodies come back byte for byte, however
large or binary; the purge deletes exactly the records whose expiry is at or before
its bound; a listing is one tenant's, newest first, without bodies.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from _migrations import EmptyDatabase, append_old_audit, migrate, revision, table_names
from handrail.errors import StoreError
from handrail.events import AuditEvent
from handrail.raw import RawRecord
from handrail.store import SqliteStore, SqlStore, Store
from handrail.store._tables import raw_results

Race = Callable[[int, Callable[[int], bool]], list[bool]]

T0 = datetime(2026, 1, 1, tzinfo=UTC)
RACERS = 16


def _us(n: int) -> timedelta:
    return timedelta(microseconds=n)


def _raw(ref: str = "raw_a", **changes: Any) -> RawRecord:
    base = RawRecord(
        ref=ref,
        tenant_id="t1",
        user_id="alice",
        tool="shop.search",
        call_id="call_1",
        created_at=T0 + _us(123_456),
        expires_at=T0 + timedelta(days=7) + _us(654_321),
        media_type="application/json",
        size=13,
        complete=True,
        body=b'{"ok": "yes"}',
    )
    return dataclasses.replace(base, **changes)


@pytest.fixture
def raw_store(store: Store) -> Store:
    """The `store` fixture with its raw results emptied (PostgreSQL is shared per session)."""
    if isinstance(store, SqlStore):
        with store.engine.begin() as connection:
            connection.execute(raw_results.delete())
    return store


# --- writing and reading -----------------------------------------------------------------------


ALL_BYTES = bytes(range(256))


@pytest.mark.parametrize(
    "written",
    [
        _raw(),
        _raw(body=ALL_BYTES, size=256, media_type="application/octet-stream"),
        _raw(body=b"", size=0, media_type="text/plain"),
        _raw(body=b"\x00\xff\xfe" * 3, size=900, complete=False, call_id="c" * 256),
        _raw(tool="t" * 128, user_id="ü" * 64, tenant_id="租户", media_type="m" * 128),
    ],
    ids=["json", "every_byte", "empty", "capped", "long_fields"],
)
def test_a_raw_record_reads_back_equal_byte_for_byte(raw_store: Store, written: RawRecord) -> None:
    raw_store.put_raw(written)
    got = raw_store.get_raw(written.ref)
    assert got == written
    assert got is not None
    assert type(got.body) is bytes
    assert got.created_at.utcoffset() == timedelta(0)
    assert got.expires_at.utcoffset() == timedelta(0)


def test_times_in_another_zone_read_back_as_the_same_instant_in_utc(raw_store: Store) -> None:
    plus_eight = timezone(timedelta(hours=8))
    written = _raw(
        created_at=datetime(2026, 3, 1, 8, 0, 0, 7, tzinfo=plus_eight),
        expires_at=datetime(2026, 3, 8, 8, 0, 0, 9, tzinfo=plus_eight),
    )
    raw_store.put_raw(written)
    got = raw_store.get_raw("raw_a")
    assert got is not None
    assert got.created_at == datetime(2026, 3, 1, 0, 0, 0, 7, tzinfo=UTC)
    assert got.expires_at == datetime(2026, 3, 8, 0, 0, 0, 9, tzinfo=UTC)
    assert got.created_at.tzinfo is not None
    assert got.created_at.utcoffset() == timedelta(0)


def test_a_five_megabyte_random_body_reads_back_exactly(raw_store: Store) -> None:
    body = random.Random(6).randbytes(5 * 1024 * 1024 + 7)  # noqa: S311 - reproducible data
    raw_store.put_raw(_raw(body=body, size=len(body), media_type="application/octet-stream"))
    got = raw_store.get_raw("raw_a")
    assert got is not None
    assert got.body == body


def test_an_unknown_ref_is_none(raw_store: Store) -> None:
    raw_store.put_raw(_raw("raw_a"))
    assert raw_store.get_raw("raw_b") is None
    assert raw_store.get_raw("RAW_A") is None
    assert raw_store.get_raw("") is None


def test_a_taken_ref_is_a_store_error_and_the_first_record_stays(raw_store: Store) -> None:
    first = _raw()
    raw_store.put_raw(first)
    with pytest.raises(StoreError):
        raw_store.put_raw(_raw(tenant_id="t2", user_id="mallory", body=b"overwritten"))
    assert raw_store.get_raw("raw_a") == first


def test_threads_racing_to_put_one_ref_let_exactly_one_win(raw_store: Store, race: Race) -> None:
    def put(i: int) -> bool:
        body = f"racer {i}".encode()
        try:
            raw_store.put_raw(_raw(body=body, size=len(body)))
        except StoreError:
            return False
        return True

    wins = race(RACERS, put)
    assert wins.count(True) == 1
    got = raw_store.get_raw("raw_a")
    assert got is not None
    assert got.body == f"racer {wins.index(True)}".encode()


# --- purging -------------------------------------------------------------------------------


def test_purge_deletes_exactly_the_records_expired_at_or_before_its_bound(
    raw_store: Store,
) -> None:
    bound = T0 + timedelta(days=1) + _us(500)
    raw_store.put_raw(_raw("early", expires_at=bound - _us(1)))
    raw_store.put_raw(_raw("at", expires_at=bound))
    raw_store.put_raw(_raw("late", expires_at=bound + _us(1)))
    raw_store.put_raw(_raw("other_tenant", tenant_id="t2", expires_at=bound - timedelta(days=1)))
    assert raw_store.purge_raw(before=bound) == 3
    assert raw_store.get_raw("early") is None
    assert raw_store.get_raw("at") is None
    assert raw_store.get_raw("other_tenant") is None
    assert raw_store.get_raw("late") == _raw("late", expires_at=bound + _us(1))
    assert raw_store.purge_raw(before=bound) == 0


def test_purge_compares_instants_not_wall_clock_readings(raw_store: Store) -> None:
    minus_five = timezone(timedelta(hours=-5))
    raw_store.put_raw(_raw(expires_at=datetime(2026, 1, 2, 12, tzinfo=UTC)))
    # 06:59 at UTC-5 is 11:59 UTC: not yet expired; 07:00 is.
    assert raw_store.purge_raw(before=datetime(2026, 1, 2, 6, 59, tzinfo=minus_five)) == 0
    assert raw_store.purge_raw(before=datetime(2026, 1, 2, 7, 0, tzinfo=minus_five)) == 1


def test_purging_an_empty_store_deletes_nothing(raw_store: Store) -> None:
    assert raw_store.purge_raw(before=T0 + timedelta(days=3650)) == 0


# --- listing -------------------------------------------------------------------------------


def test_a_listing_is_one_tenants_records_newest_first_without_bodies(raw_store: Store) -> None:
    for n, ref in enumerate(["r1", "r2", "r3"]):
        raw_store.put_raw(_raw(ref, created_at=T0 + _us(n), body=b"x" * (n + 1), size=n + 1))
    raw_store.put_raw(_raw("foreign", tenant_id="t2", created_at=T0 + timedelta(days=1)))
    listed = raw_store.list_raw(tenant_id="t1")
    assert [r.ref for r in listed] == ["r3", "r2", "r1"]
    assert all(r.body == b"" for r in listed)
    assert [r.size for r in listed] == [3, 2, 1]
    assert listed[0] == _raw("r3", created_at=T0 + _us(2), body=b"", size=3)
    assert [r.ref for r in raw_store.list_raw(tenant_id="t2")] == ["foreign"]
    assert raw_store.list_raw(tenant_id="t3") == []
    # The listing never changed what is stored.
    stored = raw_store.get_raw("r3")
    assert stored is not None
    assert stored.body == b"xxx"


def test_a_listing_keeps_to_its_limit_and_breaks_time_ties_by_ref(raw_store: Store) -> None:
    for ref in ["b", "d", "a", "c"]:
        raw_store.put_raw(_raw(ref, created_at=T0))
    raw_store.put_raw(_raw("older", created_at=T0 - _us(1)))
    assert [r.ref for r in raw_store.list_raw(tenant_id="t1")] == ["d", "c", "b", "a", "older"]
    assert [r.ref for r in raw_store.list_raw(tenant_id="t1", limit=2)] == ["d", "c"]
    assert raw_store.list_raw(tenant_id="t1", limit=0) == []
    assert raw_store.list_raw(tenant_id="t1", limit=-3) == []


def test_a_listing_shows_expired_records_until_they_are_purged(raw_store: Store) -> None:
    raw_store.put_raw(_raw("old", expires_at=T0 + _us(1)))
    assert [r.ref for r in raw_store.list_raw(tenant_id="t1")] == ["old"]
    raw_store.purge_raw(before=T0 + _us(1))
    assert raw_store.list_raw(tenant_id="t1") == []


def test_tenants_with_similar_names_never_see_each_others_records(raw_store: Store) -> None:
    tenants = ["t1", "T1", "t1 ", "t10", "t%", "t_", "t1'--"]
    for n, tenant in enumerate(tenants):
        raw_store.put_raw(_raw(f"ref_{n}", tenant_id=tenant))
    for n, tenant in enumerate(tenants):
        assert [r.ref for r in raw_store.list_raw(tenant_id=tenant)] == [f"ref_{n}"]


# --- errors and migrations -----------------------------------------------------------------


def test_a_database_without_the_raw_table_gives_store_errors(tmp_path: Path) -> None:
    store = SqliteStore.open(tmp_path / "h.db", migrate=False)
    try:
        with pytest.raises(StoreError):
            store.put_raw(_raw())
        with pytest.raises(StoreError):
            store.get_raw("raw_a")
        with pytest.raises(StoreError):
            store.list_raw(tenant_id="t1")
        with pytest.raises(StoreError):
            store.purge_raw(before=T0)
    finally:
        store.close()


def _event() -> AuditEvent:
    return AuditEvent(event_id="ev-old", at=T0, kind="call", stage="lookup", decision="pass")


def test_opening_a_store_of_revision_0002_adds_raw_results_and_keeps_the_data(
    empty_database: EmptyDatabase,
) -> None:
    engine = empty_database.engine
    migrate(engine, "0002")
    assert "raw_results" not in table_names(engine)
    append_old_audit(engine, [_event()])
    with empty_database.reopened() as store:
        assert [e.event_id for e in store.read_audit()] == ["ev-old"]
        store.put_raw(_raw())
        assert store.get_raw("raw_a") == _raw()
        indexes = {ix["name"] for ix in sa.inspect(store.engine).get_indexes("raw_results")}
        assert indexes == {"ix_raw_results_expires", "ix_raw_results_tenant_created"}


def test_downgrading_0003_drops_only_the_raw_results(tmp_path: Path) -> None:
    store = SqliteStore.open(tmp_path / "h.db")
    try:
        store.append_audit([_event()])
        store.put_raw(_raw())
        migrate(store.engine, "0002", down=True)
        tables = table_names(store.engine)
        assert "raw_results" not in tables
        assert {"audit_events", "executions", "plans"} <= tables
        assert revision(store.engine) == ["0002"]
        store.migrate()
        assert store.get_raw("raw_a") is None
        assert [e.event_id for e in store.read_audit()] == ["ev-old"]
    finally:
        store.close()
