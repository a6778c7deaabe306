"""Every Store keeps the workers' shared state by one contract; migration 0013 adds it.

A conversation's denials are counted one per call, also when many threads (and, in
tests/server/test_workers_processes.py, processes) add at once, with its denied targets;
secret handles are noted by name once; a RUNNING run's lease is renewed only by its
owner and taken over only once it ran out, by exactly one taker, which moves the version.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa

from _migrations import EmptyDatabase, migrate, table_names
from _records import RUN_T0
from _records import leased_run as _run
from handrail.runs import RunState
from handrail.sharing import MAX_GUARD_TARGETS, GuardRecord
from handrail.store import SqlStore, Store

Race = Callable[[int, Callable[[int], bool]], list[bool]]

T0 = RUN_T0
LEASE = timedelta(seconds=30)
RACERS = 16


# --- the conversation guard -------------------------------------------------------------------


def test_a_conversation_never_denied_reads_as_an_empty_record(store: Store) -> None:
    assert store.guard_state("t1", "chat") == GuardRecord()


def test_denials_count_one_each_and_keep_each_target_with_its_tools(store: Store) -> None:
    first = store.add_guard_denial("t1", "chat", tool="a.pay", target="order:1", at=T0)
    assert first.denials == 1
    assert dict(first.targets) == {"order:1": frozenset({"a.pay"})}
    store.add_guard_denial("t1", "chat", tool="b.pay", target="order:1", at=T0)
    third = store.add_guard_denial("t1", "chat", tool="a.read", target=None, at=T0)
    assert third.denials == 3
    assert dict(third.targets) == {"order:1": frozenset({"a.pay", "b.pay"})}
    assert store.guard_state("t1", "chat") == third


def test_conversations_of_two_tenants_never_share_a_count(store: Store) -> None:
    store.add_guard_denial("t1", "chat", tool="a.pay", target="order:1", at=T0)
    assert store.guard_state("t2", "chat") == GuardRecord()
    assert store.guard_state("t1", "other") == GuardRecord()


def test_a_conversation_keeps_at_most_the_target_limit_but_counts_every_denial(
    store: Store,
) -> None:
    for n in range(MAX_GUARD_TARGETS + 2):
        state = store.add_guard_denial("t1", "chat", tool="a.pay", target=f"o:{n}", at=T0)
    assert state.denials == MAX_GUARD_TARGETS + 2
    assert len(state.targets) == MAX_GUARD_TARGETS
    again = store.add_guard_denial("t1", "chat", tool="b.pay", target="o:0", at=T0)
    assert again.targets["o:0"] == frozenset({"a.pay", "b.pay"})


def test_concurrent_denials_each_count_once_and_exactly_one_sees_each_count(
    store: Store, race: Race
) -> None:
    seen: list[int] = []

    def deny(n: int) -> bool:
        state = store.add_guard_denial("t1", "chat", tool=f"tool{n}", target="order:1", at=T0)
        seen.append(state.denials)
        return True

    race(RACERS, deny)
    assert sorted(seen) == list(range(1, RACERS + 1))
    final = store.guard_state("t1", "chat")
    assert final.denials == RACERS
    assert final.targets["order:1"] == frozenset(f"tool{n}" for n in range(RACERS))


def test_purging_forgets_only_conversations_denied_before_the_cut(store: Store) -> None:
    store.add_guard_denial("t1", "old", tool="a.pay", target="order:1", at=T0)
    store.add_guard_denial("t1", "new", tool="a.pay", target="order:2", at=T0 + LEASE)
    assert store.purge_guard_states(before=T0 + timedelta(seconds=1)) == 1
    assert store.guard_state("t1", "old") == GuardRecord()
    assert store.guard_state("t1", "new").denials == 1
    # A purged conversation starts again with no targets either.
    fresh = store.add_guard_denial("t1", "old", tool="a.read", target=None, at=T0 + LEASE)
    assert fresh == GuardRecord(denials=1)


# --- secret handles ---------------------------------------------------------------------------


def test_a_handle_is_noted_once_per_tenant_and_listed_oldest_first(store: Store) -> None:
    assert store.note_secret_handle("t2", "db/password", at=T0 + LEASE)
    assert store.note_secret_handle("t1", "stripe.key", at=T0)
    assert not store.note_secret_handle("t1", "stripe.key", at=T0 + LEASE)
    listed = [(h.tenant_id, h.handle, h.first_at) for h in store.list_secret_handles()]
    assert listed == [("t1", "stripe.key", T0), ("t2", "db/password", T0 + LEASE)]


def test_concurrent_notes_of_one_handle_have_one_first(store: Store, race: Race) -> None:
    won = race(RACERS, lambda n: store.note_secret_handle("t1", "k", at=T0))
    assert won.count(True) == 1


# --- run leases -------------------------------------------------------------------------------


def test_a_leased_run_reads_back_with_its_lease_and_updates_move_it(store: Store) -> None:
    assert store.insert_run(_run())
    assert store.get_run("run_a") == _run()
    moved = _run().advanced(at=T0 + LEASE, state=RunState.SUSPENDED).leased(None, None)
    assert store.update_run(moved, expect_version=1)
    found = store.get_run("run_a")
    assert found is not None
    assert (found.lease_owner, found.lease_until, found.version) == (None, None, 2)


def test_only_the_owner_renews_a_running_runs_lease(store: Store) -> None:
    store.insert_run(_run())
    later = T0 + 2 * LEASE
    assert not store.renew_run_lease("run_a", owner="w2", until=later)
    assert not store.renew_run_lease("run_missing", owner="worker-a", until=later)
    assert store.renew_run_lease("run_a", owner="worker-a", until=later)
    found = store.get_run("run_a")
    assert found is not None
    assert (found.lease_until, found.version) == (later, 1)


def test_a_run_that_is_not_running_has_no_lease_to_renew(store: Store) -> None:
    store.insert_run(_run(state=RunState.SUSPENDED))
    assert not store.renew_run_lease("run_a", owner="worker-a", until=T0 + LEASE)


def test_a_lease_is_taken_over_only_once_it_ran_out(store: Store) -> None:
    store.insert_run(_run())
    early = T0 + LEASE - timedelta(microseconds=1)
    assert not store.take_over_run(
        "run_a", expect_version=1, owner="w2", until=early + LEASE, at=early
    )
    at = T0 + LEASE
    assert store.take_over_run("run_a", expect_version=1, owner="w2", until=at + LEASE, at=at)
    found = store.get_run("run_a")
    assert found is not None
    assert (found.lease_owner, found.lease_until, found.version) == ("w2", at + LEASE, 2)
    assert found.updated_at == at
    assert found.data == "{}"
    # The old owner is fenced: it renews nothing, and its write at its version fails.
    assert not store.renew_run_lease("run_a", owner="worker-a", until=at + LEASE)
    assert not store.update_run(_run().advanced(at=at), expect_version=1)


def test_runs_without_a_lease_or_not_running_are_never_taken_over(store: Store) -> None:
    store.insert_run(_run("run_free", lease_owner=None, lease_until=None))
    store.insert_run(_run("run_done", state=RunState.FINISHED))
    late = T0 + 10 * LEASE
    for run_id in ("run_free", "run_done", "run_missing"):
        assert not store.take_over_run(
            run_id, expect_version=1, owner="w2", until=late + LEASE, at=late
        )
    assert store.expired_runs(now=late, limit=10) == []


def test_expired_runs_are_listed_longest_expired_first(store: Store) -> None:
    store.insert_run(_run("run_b", lease_until=T0 + 2 * LEASE))
    store.insert_run(_run("run_a"))
    store.insert_run(_run("run_c", lease_until=T0 + 5 * LEASE))
    assert store.expired_runs(now=T0 + 2 * LEASE, limit=10) == ["run_a", "run_b"]
    assert store.expired_runs(now=T0 + 2 * LEASE, limit=1) == ["run_a"]
    assert store.expired_runs(now=T0, limit=10) == []


def test_of_concurrent_takers_exactly_one_wins(store: Store, race: Race) -> None:
    store.insert_run(_run())
    at = T0 + LEASE
    won = race(
        RACERS,
        lambda n: store.take_over_run(
            "run_a", expect_version=1, owner=f"w{n}", until=at + LEASE, at=at
        ),
    )
    assert won.count(True) == 1
    found = store.get_run("run_a")
    assert found is not None
    assert found.lease_owner == f"w{won.index(True)}"


# --- migration --------------------------------------------------------------------------------


def test_opening_a_store_of_revision_0012_adds_the_shared_state_and_keeps_the_runs(
    empty_database: EmptyDatabase,
) -> None:
    engine = empty_database.engine
    migrate(engine, "0012")
    assert "guard_conversations" not in table_names(engine)
    old = _run("run_old", lease_owner=None, lease_until=None)
    SqlStore(engine).insert_run(old)
    with empty_database.reopened() as store:
        assert store.get_run("run_old") == old
        assert store.add_guard_denial("t1", "c", tool="a", target="x", at=T0).denials == 1
        indexes = {ix["name"] for ix in sa.inspect(store.engine).get_indexes("runs")}
        assert "ix_runs_state_lease" in indexes


def test_downgrading_0013_drops_only_the_shared_state(empty_database: EmptyDatabase) -> None:
    with empty_database.reopened() as store:
        store.insert_run(_run("run_old", lease_owner=None, lease_until=None))
        migrate(store.engine, "0012", down=True)
        tables = table_names(store.engine)
        assert not {"guard_conversations", "guard_targets", "secret_handles"} & tables
        columns = {c["name"] for c in sa.inspect(store.engine).get_columns("runs")}
        assert not {"lease_owner", "lease_until"} & columns
        store.migrate()
        assert store.get_run("run_old") == _run("run_old", lease_owner=None, lease_until=None)


@pytest.mark.parametrize("owner", ["", "w" * 257, "w\x00"])
def test_a_lease_owner_is_one_to_256_characters_without_nul(owner: str) -> None:
    with pytest.raises(ValueError, match="lease owner"):
        _run(lease_owner=owner)


def test_a_lease_has_an_owner_and_an_end_or_neither() -> None:
    with pytest.raises(ValueError, match="both"):
        _run(lease_until=None)
    with pytest.raises(ValueError, match="timezone-aware"):
        _run(lease_until=datetime(2026, 1, 1))  # noqa: DTZ001 - the naive time refused
