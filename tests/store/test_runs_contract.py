"""Every Store keeps run records by the same contract; migration 0004 adds them to old stores.

A run id is inserted once; every update is a compare-and-set on the version, which
advances by exactly one, and a loser changes nothing; listings are newest updated
first, filtered by tenant and state; data comes back character for character.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st

from _migrations import EmptyDatabase, migrate, revision, table_names
from handrail.errors import StoreError
from handrail.raw import RawRecord
from handrail.runs import RunRecord, RunState, check_successor
from handrail.store import SqliteStore, SqlStore, Store

Race = Callable[[int, Callable[[int], bool]], list[bool]]

T0 = datetime(2026, 1, 1, tzinfo=UTC)
RACERS = 16


def _us(n: int) -> timedelta:
    return timedelta(microseconds=n)


def _run(run_id: str = "run_a", **changes: Any) -> RunRecord:
    base = RunRecord(
        run_id=run_id,
        tenant_id="t1",
        user_id="alice",
        state=RunState.RUNNING,
        version=1,
        created_at=T0 + _us(123_456),
        updated_at=T0 + _us(123_456),
        data='{"transcript": [], "budget": {"calls": 0}}',
    )
    return dataclasses.replace(base, **changes)


# --- the record --------------------------------------------------------------------------------


@given(st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True))
def test_every_id_of_the_allowed_alphabet_and_length_is_accepted(run_id: str) -> None:
    assert _run(run_id).run_id == run_id


@given(
    st.text(min_size=1, max_size=80).filter(
        lambda s: len(s) > 64 or any(not (c.isascii() and (c.isalnum() or c in "_-")) for c in s),
    ),
)
def test_an_id_outside_the_alphabet_or_too_long_is_refused(run_id: str) -> None:
    with pytest.raises(ValueError, match="run id"):
        _run(run_id)


@pytest.mark.parametrize(
    "changes",
    [
        {"run_id": ""},
        {"run_id": "run a"},
        {"run_id": "run_a\n"},
        {"run_id": "r" * 65},
        {"version": 0},
        {"version": -1},
        {"created_at": datetime(2026, 1, 1)},  # noqa: DTZ001 - naive on purpose
        {"updated_at": datetime(2026, 1, 1)},  # noqa: DTZ001 - naive on purpose
        {"data": '{"a": "\x00"}'},
        {"data": '{"a": "\ud800"}'},
        {"tenant_id": "t" * 257},
        {"user_id": "u" * 257},
    ],
    ids=[
        "empty_id",
        "space_in_id",
        "newline_in_id",
        "long_id",
        "version_0",
        "negative_version",
        "naive_created",
        "naive_updated",
        "nul_in_data",
        "lone_surrogate_in_data",
        "long_tenant",
        "long_user",
    ],
)
def test_a_record_breaking_an_invariant_is_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="run"):
        _run(**changes)


def test_the_longest_tenant_and_user_ids_are_accepted() -> None:
    assert len(_run(tenant_id="t" * 256, user_id="u" * 256).tenant_id) == 256


def test_advancing_a_record_adds_one_to_its_version_and_keeps_its_identity() -> None:
    first = _run()
    at = T0 + timedelta(minutes=1)
    moved = first.advanced(at=at, state=RunState.SUSPENDED, data="{}")
    assert moved == dataclasses.replace(
        first,
        state=RunState.SUSPENDED,
        data="{}",
        version=2,
        updated_at=at,
    )
    kept = moved.advanced(at=at + _us(1))
    assert (kept.state, kept.data, kept.version) == (RunState.SUSPENDED, "{}", 3)
    check_successor(kept, expect_version=2)
    with pytest.raises(ValueError, match="expect_version"):
        check_successor(kept, expect_version=3)


def test_only_finished_and_failed_runs_have_ended() -> None:
    assert {s for s in RunState if s.ended} == {RunState.FINISHED, RunState.FAILED}


# --- inserting and reading ---------------------------------------------------------------------


def test_an_inserted_run_reads_back_equal_in_utc(store: Store) -> None:
    assert store.insert_run(_run())
    got = store.get_run("run_a")
    assert got == _run()
    assert got is not None
    assert got.created_at.utcoffset() == timedelta(0)
    assert type(got.state) is RunState


def test_times_in_another_zone_read_back_as_the_same_instant_in_utc(store: Store) -> None:
    plus_eight = timezone(timedelta(hours=8))
    store.insert_run(
        _run(
            created_at=datetime(2026, 3, 1, 8, 0, 0, 7, tzinfo=plus_eight),
            updated_at=datetime(2026, 3, 1, 9, 0, 0, 9, tzinfo=plus_eight),
        ),
    )
    got = store.get_run("run_a")
    assert got is not None
    assert got.created_at == datetime(2026, 3, 1, 0, 0, 0, 7, tzinfo=UTC)
    assert got.updated_at == datetime(2026, 3, 1, 1, 0, 0, 9, tzinfo=UTC)
    assert got.updated_at.utcoffset() == timedelta(0)


def test_a_taken_id_is_refused_and_the_first_run_stays(store: Store) -> None:
    assert store.insert_run(_run())
    intruder = _run(tenant_id="t2", user_id="mallory", data='"overwritten"', version=7)
    assert not store.insert_run(intruder)
    assert store.get_run("run_a") == _run()
    assert store.list_runs(tenant_id="t2") == []


def test_an_unknown_id_is_none(store: Store) -> None:
    store.insert_run(_run("run_a"))
    assert store.get_run("run_b") is None
    assert store.get_run("RUN_A") is None
    assert store.get_run("run_a ") is None
    assert store.get_run("") is None
    assert store.get_run("run_%") is None


MEGABYTE_JSON = json.dumps(
    {"transcript": [{"role": "tool", "content": f"row {n} " + "x" * 90} for n in range(10_000)]},
)


@pytest.mark.parametrize(
    "data",
    [
        MEGABYTE_JSON,
        json.dumps({"text": "héllo wörld 租户 🧪 مرحبا e\u0301 \u200b"}, ensure_ascii=False),
        json.dumps({"nul": "\x00", "surrogate": "\ud83e\uddea"}),
        "",
        " \n\t\r ",
        "'; DROP TABLE runs; --",
    ],
    ids=["megabyte", "unicode", "escaped_controls", "empty", "whitespace", "sql_text"],
)
def test_data_reads_back_character_for_character(store: Store, data: str) -> None:
    store.insert_run(_run(data=data))
    got = store.get_run("run_a")
    assert got is not None
    assert got.data == data
    assert [r.data for r in store.list_runs()] == [data]
    moved = _run(data=data + "!", version=2, updated_at=T0 + timedelta(seconds=1))
    assert store.update_run(moved, expect_version=1)
    assert store.get_run("run_a") == moved


def test_the_megabyte_of_json_is_a_megabyte() -> None:
    assert len(MEGABYTE_JSON) > 1_000_000
    assert json.loads(MEGABYTE_JSON)["transcript"][-1]["content"].startswith("row 9999 ")


def test_unicode_tenants_and_users_read_back_equal(store: Store) -> None:
    written = _run(tenant_id="租户-ü", user_id="ü" * 256)
    store.insert_run(written)
    assert store.get_run("run_a") == written
    assert store.list_runs(tenant_id="租户-ü") == [written]


def test_threads_racing_to_insert_one_id_let_exactly_one_win(store: Store, race: Race) -> None:
    wins = race(RACERS, lambda i: store.insert_run(_run(data=f'"racer {i}"')))
    assert wins.count(True) == 1
    got = store.get_run("run_a")
    assert got is not None
    assert got.data == f'"racer {wins.index(True)}"'


# --- compare-and-set updates -------------------------------------------------------------------


def test_an_update_at_the_expected_version_writes_the_next_version(store: Store) -> None:
    store.insert_run(_run())
    at = T0 + timedelta(seconds=5) + _us(77)
    second = _run().advanced(at=at, state=RunState.SUSPENDED, data='{"pending": "p1"}')
    assert store.update_run(second, expect_version=1)
    assert store.get_run("run_a") == second
    third = second.advanced(at=at + _us(1), state=RunState.FINISHED, data='{"answer": 42}')
    assert store.update_run(third, expect_version=2)
    assert store.get_run("run_a") == third


def test_a_stale_update_is_refused_and_changes_nothing(store: Store) -> None:
    store.insert_run(_run())
    second = _run().advanced(at=T0 + timedelta(seconds=1), data='"second"')
    assert store.update_run(second, expect_version=1)
    # Another writer read version 1 too and tries to write its own version 2.
    stale = _run().advanced(at=T0 + timedelta(seconds=2), state=RunState.FAILED, data='"lost"')
    assert not store.update_run(stale, expect_version=1)
    assert store.get_run("run_a") == second
    # A writer that skipped ahead does not match either.
    ahead = dataclasses.replace(second, version=4, data='"ahead"')
    assert not store.update_run(ahead, expect_version=3)
    assert store.get_run("run_a") == second


@pytest.mark.parametrize("version", [1, 3, 10])
def test_an_update_not_advancing_the_version_by_exactly_one_is_an_error(
    store: Store,
    version: int,
) -> None:
    store.insert_run(_run())
    bad = _run(version=version, data='"bad"', updated_at=T0 + timedelta(seconds=1))
    with pytest.raises(ValueError, match="expect_version"):
        store.update_run(bad, expect_version=1)
    assert store.get_run("run_a") == _run()


def test_updating_an_unknown_run_writes_nothing(store: Store) -> None:
    assert not store.update_run(_run(version=2), expect_version=1)
    assert store.get_run("run_a") is None
    assert store.list_runs() == []


def test_an_update_keeps_the_tenant_user_and_creation_time_of_the_insert(store: Store) -> None:
    store.insert_run(_run())
    moved = _run(
        tenant_id="t2",
        user_id="mallory",
        created_at=T0 + timedelta(days=9),
        version=2,
        updated_at=T0 + timedelta(seconds=3),
        state=RunState.FINISHED,
        data='"done"',
    )
    assert store.update_run(moved, expect_version=1)
    assert store.get_run("run_a") == _run(
        version=2,
        updated_at=T0 + timedelta(seconds=3),
        state=RunState.FINISHED,
        data='"done"',
    )
    assert store.list_runs(tenant_id="t2") == []


def test_threads_racing_to_update_one_version_let_exactly_one_win(
    store: Store,
    race: Race,
) -> None:
    store.insert_run(_run())

    def update(i: int) -> bool:
        mine = _run().advanced(at=T0 + timedelta(seconds=1) + _us(i), data=f'"racer {i}"')
        return store.update_run(mine, expect_version=1)

    wins = race(RACERS, update)
    assert wins.count(True) == 1
    winner = wins.index(True)
    got = store.get_run("run_a")
    assert got is not None
    assert (got.version, got.data) == (2, f'"racer {winner}"')
    assert got.updated_at == T0 + timedelta(seconds=1) + _us(winner)


def test_threads_chaining_updates_never_lose_one(store: Store, race: Race) -> None:
    """Each racer retries on a lost race from a fresh read: all updates land, in sequence."""
    store.insert_run(_run(data="[]"))

    def append(i: int) -> bool:
        for _ in range(10 * RACERS):
            found = store.get_run("run_a")
            assert found is not None
            items = [*json.loads(found.data), i]
            mine = found.advanced(at=found.updated_at + _us(1), data=json.dumps(items))
            if store.update_run(mine, expect_version=found.version):
                return True
        return False

    assert race(4, append) == [True] * 4
    got = store.get_run("run_a")
    assert got is not None
    assert got.version == 5
    assert sorted(json.loads(got.data)) == [0, 1, 2, 3]


# --- listing -----------------------------------------------------------------------------------


def test_a_listing_is_newest_updated_first_with_ties_by_greater_id(store: Store) -> None:
    for n, run_id in enumerate(["r1", "r2", "r3"]):
        store.insert_run(_run(run_id, updated_at=T0 + _us(10 * n)))
    for run_id in ["tie_b", "tie_a"]:
        store.insert_run(_run(run_id, updated_at=T0 + _us(15)))
    assert [r.run_id for r in store.list_runs()] == ["r3", "tie_b", "tie_a", "r2", "r1"]
    # An update moves a run to the top.
    moved = _run("r1", updated_at=T0 + _us(10)).advanced(at=T0 + timedelta(seconds=1))
    assert store.update_run(moved, expect_version=1)
    assert [r.run_id for r in store.list_runs()] == ["r1", "r3", "tie_b", "tie_a", "r2"]
    assert store.list_runs()[0] == moved


def test_a_listing_keeps_to_its_limit(store: Store) -> None:
    for n in range(5):
        store.insert_run(_run(f"r{n}", updated_at=T0 + _us(n)))
    assert [r.run_id for r in store.list_runs(limit=2)] == ["r4", "r3"]
    assert len(store.list_runs()) == 5
    assert store.list_runs(limit=0) == []
    assert store.list_runs(limit=-3) == []


def test_a_listing_filters_by_tenant_and_state(store: Store) -> None:
    store.insert_run(_run("a_run", tenant_id="t1", state=RunState.RUNNING))
    store.insert_run(_run("a_sus", tenant_id="t1", state=RunState.SUSPENDED))
    store.insert_run(_run("b_sus", tenant_id="t2", state=RunState.SUSPENDED))
    store.insert_run(_run("b_fin", tenant_id="t2", state=RunState.FINISHED))

    def ids(**filters: Any) -> list[str]:
        return [r.run_id for r in store.list_runs(**filters)]

    assert ids(tenant_id="t1") == ["a_sus", "a_run"]
    assert ids(state=RunState.SUSPENDED) == ["b_sus", "a_sus"]
    assert ids(tenant_id="t2", state=RunState.SUSPENDED) == ["b_sus"]
    assert ids(tenant_id="t1", state=RunState.FINISHED) == []
    assert ids(state=RunState.FAILED) == []
    assert ids(tenant_id="t3") == []
    assert ids() == ["b_sus", "b_fin", "a_sus", "a_run"]


def test_a_listing_filters_by_user_within_a_tenant(store: Store) -> None:
    store.insert_run(_run("r_alice", tenant_id="t1", user_id="alice", updated_at=T0))
    store.insert_run(_run("r_bob", tenant_id="t1", user_id="bob", updated_at=T0 + _us(1)))
    store.insert_run(_run("r_alice2", tenant_id="t2", user_id="alice", updated_at=T0 + _us(2)))
    store.insert_run(_run("r_alice_", tenant_id="t1", user_id="alice ", updated_at=T0 + _us(3)))

    def ids(**filters: Any) -> list[str]:
        return [r.run_id for r in store.list_runs(**filters)]

    assert ids(tenant_id="t1", user_id="alice") == ["r_alice"]
    assert ids(user_id="alice") == ["r_alice2", "r_alice"]
    assert ids(tenant_id="t1", user_id="bob", state=RunState.FINISHED) == []
    assert ids(user_id="al%") == []


def test_tenants_with_similar_names_never_see_each_others_runs(store: Store) -> None:
    tenants = ["t1", "T1", "t1 ", "t10", "t%", "t_", "t1'--", ""]
    for n, tenant in enumerate(tenants):
        store.insert_run(_run(f"run_{n}", tenant_id=tenant))
    for n, tenant in enumerate(tenants):
        assert [r.run_id for r in store.list_runs(tenant_id=tenant)] == [f"run_{n}"]


# --- errors and migrations ---------------------------------------------------------------------


def test_a_database_without_the_runs_table_gives_store_errors(tmp_path: Path) -> None:
    store = SqliteStore.open(tmp_path / "h.db", migrate=False)
    try:
        with pytest.raises(StoreError):
            store.insert_run(_run())
        with pytest.raises(StoreError):
            store.update_run(_run(version=2), expect_version=1)
        with pytest.raises(StoreError):
            store.get_run("run_a")
        with pytest.raises(StoreError):
            store.list_runs()
    finally:
        store.close()


def _raw() -> RawRecord:
    return RawRecord(
        ref="raw_old",
        tenant_id="t1",
        user_id="alice",
        tool="shop.search",
        call_id="call_1",
        created_at=T0,
        expires_at=T0 + timedelta(days=7),
        media_type="application/json",
        size=2,
        complete=True,
        body=b"{}",
    )


def test_opening_a_store_of_revision_0003_adds_runs_and_keeps_the_data(
    empty_database: EmptyDatabase,
) -> None:
    engine = empty_database.engine
    migrate(engine, "0003")
    assert "runs" not in table_names(engine)
    SqlStore(engine).put_raw(_raw())
    with empty_database.reopened() as store:
        assert store.get_raw("raw_old") == _raw()
        assert store.insert_run(_run())
        assert store.get_run("run_a") == _run()
        indexes = {ix["name"] for ix in sa.inspect(store.engine).get_indexes("runs")}
        # 0013 adds the lease index (the workers' shared state).
        assert indexes == {"ix_runs_tenant_updated", "ix_runs_state_lease"}


def test_downgrading_0004_drops_only_the_runs(tmp_path: Path) -> None:
    store = SqliteStore.open(tmp_path / "h.db")
    try:
        store.put_raw(_raw())
        store.insert_run(_run())
        migrate(store.engine, "0003", down=True)
        tables = table_names(store.engine)
        assert "runs" not in tables
        assert {"audit_events", "executions", "plans", "raw_results"} <= tables
        assert revision(store.engine) == ["0003"]
        store.migrate()
        assert store.get_run("run_a") is None
        assert store.get_raw("raw_old") == _raw()
    finally:
        store.close()
