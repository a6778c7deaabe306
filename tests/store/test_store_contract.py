"""Every Store implementation passes the same contract: the audit trail, migrations, opening.

The `store` fixture (tests/store/conftest.py) runs each contract test on the memory,
SQLite and PostgreSQL stores; tests of one backend's own behaviour say so in their name.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from _migrations import assert_at_head
from handrail.errors import ConfigurationError, StoreError
from handrail.events import STORED_WIDTHS, AuditEvent, AuditSubject
from handrail.store import PostgresStore, SqliteStore, Store, open_store
from handrail.store._tables import audit_trails


def _event(n: int, *, tenant: str = "t1", call: str | None = None) -> AuditEvent:
    return AuditEvent(
        event_id=f"ev-{n}",
        at=datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=n),
        kind="call",
        stage="lookup",
        decision="pass",
        subject=AuditSubject(
            tenant_id=tenant,
            tool_call_id=call,
            tool="shop.search",
            request_id="r",
            schema_version="v1",
            args_hash="h",
            args_summary="{}",
            user_id="u",
        ),
        duration_ms=0.5,
        code="OK",
        detail="d",
    )


def test_text_no_database_holds_is_kept_escaped_and_long_text_clipped(store: Store) -> None:
    bad = "x\ud800\x00"
    subject = AuditSubject(
        tenant_id="t\ud83d",
        tool_call_id="call_\udfff",
        tool="shop.\x00search",
        request_id=bad + "r" * 200,
        args_summary='{"q": "\udc80"}',
        user_id=bad,
    )
    event = replace(_event(1), subject=subject, detail="boom \ud800\x00", code="C" * 100)
    store.append_audit([event, _event(2)])
    [kept, after] = store.read_audit()
    assert (kept.tenant_id, kept.tool_call_id, kept.tool) == (
        "t\\ud83d",
        "call_\\udfff",
        "shop.\\u0000search",
    )
    assert kept.request_id == ("x\\ud800\\u0000" + "r" * 200)[:127] + "…"
    assert (kept.user_id, kept.args_summary) == ("x\\ud800\\u0000", '{"q": "\\udc80"}')
    assert (kept.detail, kept.code) == ("boom \\ud800\\u0000", "C" * 63 + "…")
    assert store.read_audit(tenant_id="t\\ud83d") == [kept]
    assert after.event_id == "ev-2"


def test_the_audit_widths_every_store_clips_to_are_the_columns_of_the_table() -> None:
    columns = audit_trails.c
    # An event's own fields but its id live in the row's JSON array of events.
    assert set(STORED_WIDTHS) - set(columns.keys()) == {"stage", "decision", "code", "detail"}
    for name, width in STORED_WIDTHS.items():
        if name in columns:
            assert getattr(columns[name].type, "length", None) == width, name


def test_appended_events_read_back_oldest_first_with_aware_timestamps(store: Store) -> None:
    store.append_audit([_event(1), _event(2), _event(3)])
    events = store.read_audit(limit=10)
    assert [e.event_id for e in events] == ["ev-1", "ev-2", "ev-3"]
    assert events[0] == _event(1)
    assert all(e.at.tzinfo is not None for e in events)


def test_read_audit_returns_the_newest_events_up_to_the_limit(store: Store) -> None:
    store.append_audit([_event(n) for n in range(10)])
    assert [e.event_id for e in store.read_audit(limit=3)] == ["ev-7", "ev-8", "ev-9"]
    assert store.read_audit(limit=0) == []


def test_read_audit_filters_by_tenant_and_by_call(store: Store) -> None:
    store.append_audit(
        [_event(1, tenant="t1", call="a"), _event(2, tenant="t2", call="b"), _event(3, call="a")],
    )
    assert [e.event_id for e in store.read_audit(tenant_id="t2")] == ["ev-2"]
    assert [e.event_id for e in store.read_audit(tool_call_id="a")] == ["ev-1", "ev-3"]


def test_appending_nothing_is_a_no_op(store: Store) -> None:
    store.append_audit([])
    assert store.read_audit() == []


def test_concurrent_batches_are_all_written(store: Store) -> None:
    def write(base: int) -> None:
        store.append_audit([_event(base + i) for i in range(50)])

    threads = [threading.Thread(target=write, args=(k * 1000,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(store.read_audit(limit=1000)) == 200


def test_migrate_is_idempotent(store: Store) -> None:
    store.migrate()
    store.migrate()
    store.append_audit([_event(1)])
    assert len(store.read_audit()) == 1


def test_sqlite_store_runs_in_wal_mode_and_survives_reopening(tmp_path: Path) -> None:
    first = SqliteStore.open(tmp_path / "nested" / "h.db")
    assert first.journal_mode() == "wal"
    first.append_audit([_event(1)])
    first.close()
    again = SqliteStore.open(tmp_path / "nested" / "h.db")
    assert [e.event_id for e in again.read_audit()] == ["ev-1"]
    again.close()


def test_sqlite_migrations_create_exactly_the_declared_tables(tmp_path: Path) -> None:
    store = SqliteStore.open(tmp_path / "h.db")
    try:
        assert_at_head(store.engine)
    finally:
        store.close()


def test_a_duplicate_event_id_is_a_store_error_and_writes_nothing(tmp_path: Path) -> None:
    store = SqliteStore.open(tmp_path / "h.db")
    store.append_audit([_event(1)])
    with pytest.raises(StoreError):
        store.append_audit([_event(2), _event(1)])
    assert [e.event_id for e in store.read_audit()] == ["ev-1"]
    store.close()


def test_an_unusable_database_is_a_store_error(tmp_path: Path) -> None:
    store = SqliteStore.open(tmp_path / "h.db", migrate=False)
    with pytest.raises(StoreError):
        store.append_audit([_event(1)])
    with pytest.raises(StoreError):
        store.read_audit()
    store.close()


def test_a_failed_migration_is_a_store_error(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite+pysqlite:///{tmp_path / 'h.db'}")
    with engine.begin() as connection:
        connection.exec_driver_sql("CREATE TABLE audit_events (x INTEGER)")
    from handrail.store.sql import SqlStore  # noqa: PLC0415

    with pytest.raises(StoreError):
        SqlStore(engine).migrate()
    engine.dispose()


@pytest.mark.postgres
def test_postgres_migrations_create_exactly_the_declared_tables(postgres_url: str) -> None:
    store = PostgresStore.open(postgres_url)
    try:
        assert_at_head(store.engine)
    finally:
        store.close()


@pytest.mark.postgres
def test_postgres_migrate_is_idempotent_and_keeps_the_data(postgres_url: str) -> None:
    store = PostgresStore.open(postgres_url)
    try:
        store.append_audit([_event(901, tenant="idempotent-migrate")])
        store.migrate()
        store.migrate()
        assert_at_head(store.engine)
        again = PostgresStore.open(postgres_url)
        again.close()
        assert [e.event_id for e in store.read_audit(tenant_id="idempotent-migrate")] == [
            "ev-901",
        ]
    finally:
        store.close()


@pytest.mark.parametrize("form", ["sqlite_url", "str_path", "path"])
def test_open_store_opens_sqlite_from_a_sqlite_url_or_a_plain_path(
    form: str,
    tmp_path: Path,
) -> None:
    file = tmp_path / "nested" / "h.db"
    forms: dict[str, str | Path] = {
        "sqlite_url": f"sqlite:///{file}",
        "str_path": str(file),
        "path": file,
    }
    url = forms[form]
    store = open_store(url)
    try:
        assert isinstance(store, SqliteStore)
        store.append_audit([_event(1)])
        assert [e.event_id for e in store.read_audit()] == ["ev-1"]
    finally:
        store.close()
    assert file.is_file()


@pytest.mark.postgres
@pytest.mark.parametrize("scheme", ["postgresql", "postgresql+psycopg", "postgres"])
def test_open_store_opens_postgres_from_a_postgres_url(scheme: str, postgres_url: str) -> None:
    url = scheme + "://" + postgres_url.split("://", 1)[1]
    store = open_store(url)
    try:
        assert isinstance(store, PostgresStore)
        assert store.engine.dialect.name == "postgresql"
        assert isinstance(store.read_audit(limit=1), list)
    finally:
        store.close()


def test_open_store_without_migrating_leaves_the_database_empty(tmp_path: Path) -> None:
    store = open_store(tmp_path / "h.db", migrate=False)
    try:
        assert sa.inspect(store.engine).get_table_names() == []
    finally:
        store.close()


@pytest.mark.parametrize("url", ["mysql://u@localhost/db", "redis://localhost:6379/0"])
def test_open_store_refuses_an_unsupported_scheme(url: str) -> None:
    with pytest.raises(ConfigurationError):
        open_store(url)


def test_postgres_store_refuses_a_url_that_is_not_postgres(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError):
        PostgresStore.open(f"sqlite:///{tmp_path / 'h.db'}")
