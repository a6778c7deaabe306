"""Every Store keeps task records by the same contract; migration 0010 adds them to old stores.

A task id is inserted once and never overwritten (the same intent is one task); it reads
back field for field (times in UTC); every change is a compare-and-set on the version, of
racing changes exactly one wins; listings are one tenant's (or one state's) newest first.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from _migrations import EmptyDatabase, migrate, revision, table_names
from _stores import Race
from handrail.errors import StoreError
from handrail.store import SqliteStore, Store
from handrail.tasking import TaskRecord, TaskState

T0 = datetime(2026, 1, 1, tzinfo=UTC)
RACERS = 16


def _task(n: int = 1, **changes: Any) -> TaskRecord:
    base = TaskRecord(
        task_id=f"task_{n:032x}",
        tenant_id="t1",
        user_id="alice",
        tool="reports.export_orders",
        intent_key=f"hk1_{n:064x}",
        principal='{"tenant_id": "t1", "user_id": "alice"}',
        arguments='{"region":"eu"}',
        queue="reports",
        state=TaskState.QUEUED,
        created_at=T0 + timedelta(seconds=n, microseconds=250_000),
        expires_at=T0 + timedelta(days=1),
        max_attempts=3,
        estimate_seconds=120.0,
    )
    return dataclasses.replace(base, **changes)


def _finished(record: TaskRecord) -> TaskRecord:
    return dataclasses.replace(
        record,
        state=TaskState.SUCCEEDED,
        attempts=2,
        progress=1.0,
        progress_message="done: 1200 rows",
        lease_holder="worker-a",
        heartbeat_at=T0 + timedelta(minutes=3),
        started_at=T0 + timedelta(minutes=1),
        finished_at=T0 + timedelta(minutes=4),
        retry_at=T0 + timedelta(minutes=2),
        cancel_requested=True,
        error_code=None,
        result='{"rows":1200}',
        result_ref="raw_abc",
        version=record.version + 1,
    )


def test_a_task_reads_back_as_it_was_stored(store: Store) -> None:
    assert store.insert_task(_task())
    assert store.get_task(_task().task_id) == _task()
    assert store.get_task(_task(2).task_id) is None


def test_every_field_of_a_changed_task_reads_back(store: Store) -> None:
    assert store.insert_task(_task())
    changed = _finished(_task())
    assert store.replace_task(changed, expect_version=1)
    assert store.get_task(changed.task_id) == changed


def test_times_in_another_zone_read_back_in_utc(store: Store) -> None:
    east = timezone(timedelta(hours=5))
    assert store.insert_task(_task(created_at=T0.astimezone(east)))
    found = store.get_task(_task().task_id)
    assert found is not None
    assert found.created_at == T0
    assert found.created_at.utcoffset() == timedelta(0)


def test_an_id_is_inserted_once_and_never_overwritten(store: Store) -> None:
    assert store.insert_task(_task())
    assert not store.insert_task(_task(tenant_id="t2", user_id="mallory"))
    assert store.get_task(_task().task_id) == _task()


def test_a_change_is_a_compare_and_set_on_the_version(store: Store) -> None:
    assert store.insert_task(_task())
    assert not store.replace_task(_finished(_task(version=2)), expect_version=2)
    assert not store.replace_task(_finished(_task(2)), expect_version=1)
    assert store.get_task(_task().task_id) == _task()
    with pytest.raises(ValueError, match="expect_version"):
        store.replace_task(_task(version=3), expect_version=1)
    with pytest.raises(ValueError, match="version 1"):
        store.insert_task(_task(version=2))


def test_of_racing_changes_exactly_one_wins(store: Store, race: Race) -> None:
    assert store.insert_task(_task())
    changes = [
        dataclasses.replace(_task(), version=2, lease_holder=f"worker-{i}") for i in range(RACERS)
    ]
    wins = race(RACERS, lambda i: store.replace_task(changes[i], expect_version=1))
    assert wins.count(True) == 1
    found = store.get_task(_task().task_id)
    assert found is not None
    assert found.lease_holder == f"worker-{wins.index(True)}"


def test_of_racing_inserts_of_one_id_exactly_one_wins(store: Store, race: Race) -> None:
    wins = race(RACERS, lambda i: store.insert_task(_task(user_id=f"user{i}")))
    assert wins.count(True) == 1
    found = store.get_task(_task().task_id)
    assert found is not None
    assert found.user_id == f"user{wins.index(True)}"


def test_the_latest_task_of_an_intent_is_its_highest_generation(store: Store) -> None:
    key = _task().intent_key
    assert store.latest_task(key) is None
    for n, generation in ((1, 0), (3, 2), (2, 1)):
        assert store.insert_task(_task(n, intent_key=key, generation=generation))
    assert store.insert_task(_task(4, generation=7))  # another intent's
    assert store.latest_task(key) == _task(3, intent_key=key, generation=2)
    assert store.latest_task("hk1_unknown") is None


def test_of_racing_inserts_of_an_intents_next_generation_exactly_one_wins(
    store: Store, race: Race
) -> None:
    key = _task().intent_key
    assert store.insert_task(_task(intent_key=key))
    wins = race(RACERS, lambda i: store.insert_task(_task(2, intent_key=key, generation=1)))
    assert wins.count(True) == 1
    latest = store.latest_task(key)
    assert latest is not None
    assert (latest.task_id, latest.generation) == (_task(2).task_id, 1)


def test_listings_are_one_tenants_or_one_states_newest_first(store: Store) -> None:
    for n, tenant in enumerate(["t1", "t2", "t1", "t1"], start=1):
        assert store.insert_task(_task(n, tenant_id=tenant))
    assert store.replace_task(_finished(_task(3)), expect_version=1)
    assert [t.task_id for t in store.list_tasks(tenant_id="t1")] == [
        _task(4).task_id,
        _task(3).task_id,
        _task(1).task_id,
    ]
    done = store.list_tasks(tenant_id="t1", state=TaskState.SUCCEEDED)
    assert [t.task_id for t in done] == [_task(3).task_id]
    assert [t.task_id for t in store.list_tasks(tenant_id="t1", limit=1)] == [_task(4).task_id]
    assert store.list_tasks(tenant_id="t3") == []


def test_the_record_refuses_what_no_store_keeps() -> None:
    with pytest.raises(ValueError, match="task id"):
        _task(task_id="task_XYZ")
    with pytest.raises(ValueError, match="timezone"):
        _task(created_at=datetime(2026, 1, 1))  # noqa: DTZ001 - the naive time refused
    with pytest.raises(ValueError, match="printable"):
        _task(progress_message="x" * 201)
    with pytest.raises(ValueError, match="printable"):
        _task(progress_message="line\nbreak")
    with pytest.raises(ValueError, match="NUL"):
        _task(user_id="a\x00b")
    with pytest.raises(ValueError, match="queue"):
        _task(queue="")
    with pytest.raises(ValueError, match="fraction"):
        _task(progress=1.5)
    with pytest.raises(ValueError, match="version"):
        _task(attempts=-1)
    with pytest.raises(ValueError, match="generation"):
        _task(generation=-1)


# --- errors and migrations ---------------------------------------------------------------------


def test_a_database_without_the_task_table_gives_store_errors(tmp_path: Path) -> None:
    store = SqliteStore.open(tmp_path / "h.db", migrate=False)
    try:
        with pytest.raises(StoreError):
            store.insert_task(_task())
        with pytest.raises(StoreError):
            store.replace_task(_finished(_task()), expect_version=1)
        with pytest.raises(StoreError):
            store.get_task(_task().task_id)
        with pytest.raises(StoreError):
            store.list_tasks(tenant_id="t1")
        with pytest.raises(StoreError):
            store.latest_task(_task().intent_key)
    finally:
        store.close()


def test_opening_a_store_of_revision_0009_adds_the_task_table(
    empty_database: EmptyDatabase,
) -> None:
    engine = empty_database.engine
    migrate(engine, "0009")
    assert "tasks" not in table_names(engine)
    with empty_database.reopened() as store:
        assert store.insert_task(_task())
        assert store.get_task(_task().task_id) == _task()


def test_downgrading_0010_drops_only_the_tasks(tmp_path: Path) -> None:
    store = SqliteStore.open(tmp_path / "h.db")
    try:
        store.insert_task(_task())
        migrate(store.engine, "0009", down=True)
        tables = table_names(store.engine)
        assert "tasks" not in tables
        assert {"audit_events", "api_keys", "mcp_pins"} <= tables
        assert revision(store.engine) == ["0009"]
        store.migrate()
        assert store.get_task(_task().task_id) is None
    finally:
        store.close()
