"""Every Store appends a run's entries and never rewrites them; migration 0007 adds them.

A write's entries are stored with its compare-and-set in one transaction: a loser adds
none. Reads return every entry of the versions up to the run's, oldest first; runs
stored before 0007 (one whole document, no entries) read as they were.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from _migrations import EmptyDatabase, migrate, revision, table_names
from handrail.runs import RunRecord, RunState
from handrail.store import SqliteStore, SqlStore, Store

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _run(**changes: object) -> RunRecord:
    base = RunRecord(
        run_id="run_a",
        tenant_id="t1",
        user_id="alice",
        state=RunState.RUNNING,
        version=1,
        created_at=T0,
        updated_at=T0,
        data='{"header": 1}',
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_entries_are_appended_in_order_and_read_back_whole(store: Store) -> None:
    assert store.insert_run(_run(entries=('"e1"', '"e2"')))
    first = store.get_run("run_a")
    assert first is not None
    assert first.entries == ('"e1"', '"e2"')
    second = first.advanced(at=T0 + timedelta(seconds=1), data='{"header": 2}', entries=('"e3"',))
    assert second.entries == ('"e3"',)
    assert store.update_run(second, expect_version=1)
    # A claim moves the version and appends nothing.
    third = second.advanced(at=T0 + timedelta(seconds=2), state=RunState.SUSPENDED)
    assert store.update_run(third, expect_version=2)
    got = store.get_run("run_a")
    assert got is not None
    assert (got.version, got.data, got.entries) == (3, '{"header": 2}', ('"e1"', '"e2"', '"e3"'))
    listed = store.list_runs(tenant_id="t1")
    assert [r.entries for r in listed] == [('"e1"', '"e2"', '"e3"')]


def test_a_loser_of_the_compare_and_set_appends_nothing(store: Store) -> None:
    assert store.insert_run(_run(entries=('"start"',)))
    at = T0 + timedelta(seconds=1)
    winner = _run().advanced(at=at, entries=('"winner"',))
    loser = _run().advanced(at=at, data='"lost"', entries=('"loser"',))
    assert store.update_run(winner, expect_version=1)
    assert not store.update_run(loser, expect_version=1)
    got = store.get_run("run_a")
    assert got is not None
    assert got.entries == ('"start"', '"winner"')


def test_an_entry_a_store_cannot_keep_is_refused_before_anything_is_written(store: Store) -> None:
    assert store.insert_run(_run())
    with pytest.raises(ValueError, match="NUL"):
        store.update_run(_run().advanced(at=T0, entries=("a\x00b",)), expect_version=1)
    with pytest.raises(ValueError, match="NUL"):
        store.insert_run(_run(run_id="run_b", entries=("a\x00b",)))
    got = store.get_run("run_a")
    assert got is not None
    assert (got.version, got.entries) == (1, ())
    assert store.get_run("run_b") is None


def test_opening_a_store_of_revision_0006_adds_entries_and_keeps_whole_runs(
    empty_database: EmptyDatabase,
) -> None:
    engine = empty_database.engine
    migrate(engine, "0006")
    assert "run_entries" not in table_names(engine)
    old = _run(data='{"version": 2, "transcript": ["kept as it was"]}')
    SqlStore(engine).insert_run(old)
    with empty_database.reopened() as store:
        assert store.get_run("run_a") == old
        moved = old.advanced(at=T0 + timedelta(seconds=1), data='{"version": 3}', entries=('"e"',))
        assert store.update_run(moved, expect_version=1)
        got = store.get_run("run_a")
        assert got is not None
        assert got.entries == ('"e"',)


def test_downgrading_0007_drops_only_the_entries(tmp_path: Path) -> None:
    store = SqliteStore.open(tmp_path / "h.db")
    try:
        store.insert_run(_run())
        migrate(store.engine, "0006", down=True)
        assert "run_entries" not in table_names(store.engine)
        assert revision(store.engine) == ["0006"]
        store.migrate()
        assert store.get_run("run_a") == _run()
    finally:
        store.close()
