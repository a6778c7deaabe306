"""Every Store keeps conversations by the same contract; migration 0006 adds them to old stores.

A conversation id is inserted once, with no turns; its holder moves by compare-and-set;
turns are appended one row each at an expected count, so of two appends at one count
exactly one wins and the loser writes nothing; turns read back in order, text for text;
listings are a tenant's (or a user's) newest updated first.
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

from _migrations import EmptyDatabase, migrate, revision, table_names
from handrail.conversations import ConversationRecord, check_turns
from handrail.errors import StoreError
from handrail.runs import RunRecord, RunState
from handrail.store import SqliteStore, SqlStore, Store

Race = Callable[[int, Callable[[int], bool]], list[bool]]

T0 = datetime(2026, 1, 1, tzinfo=UTC)
RACERS = 16


def _us(n: int) -> timedelta:
    return timedelta(microseconds=n)


def _conversation(conversation_id: str = "chat_a", **changes: Any) -> ConversationRecord:
    base = ConversationRecord(
        conversation_id=conversation_id,
        tenant_id="t1",
        user_id="alice",
        turns=0,
        run_id="run_1",
        created_at=T0 + _us(123_456),
        updated_at=T0 + _us(123_456),
    )
    return dataclasses.replace(base, **changes)


def _turn(n: int) -> str:
    return json.dumps({"kind": "user", "text": f"turn {n}"})


# --- the record --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "changes",
    [
        {"conversation_id": ""},
        {"conversation_id": "chat a"},
        {"conversation_id": "chat\n"},
        {"conversation_id": "c" * 65},
        {"run_id": "run 1"},
        {"run_id": ""},
        {"turns": -1},
        {"created_at": datetime(2026, 1, 1)},  # noqa: DTZ001 - naive on purpose
        {"updated_at": datetime(2026, 1, 1)},  # noqa: DTZ001 - naive on purpose
        {"tenant_id": "t" * 257},
        {"user_id": "u" * 257},
    ],
    ids=[
        "empty_id",
        "space_in_id",
        "newline_in_id",
        "long_id",
        "space_in_run",
        "empty_run",
        "negative_turns",
        "naive_created",
        "naive_updated",
        "long_tenant",
        "long_user",
    ],
)
def test_a_record_breaking_an_invariant_is_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="conversation"):
        _conversation(**changes)


def test_a_record_without_a_run_and_with_the_longest_names_is_accepted() -> None:
    record = _conversation("c" * 64, run_id=None, tenant_id="t" * 256, user_id="u" * 256)
    assert record.run_id is None


@pytest.mark.parametrize("text", ['"\x00"', '"\ud800"'], ids=["nul", "lone_surrogate"])
def test_turn_text_no_store_can_keep_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="conversation turn"):
        check_turns([_turn(0), text])


# --- inserting and reading ---------------------------------------------------------------------


def test_an_inserted_conversation_reads_back_equal_in_utc_with_no_turns(store: Store) -> None:
    assert store.insert_conversation(_conversation(turns=7))
    got = store.get_conversation("chat_a")
    assert got == _conversation()
    assert got is not None
    assert got.created_at.utcoffset() == timedelta(0)
    assert store.get_turns("chat_a") == []


def test_times_in_another_zone_read_back_as_the_same_instant(store: Store) -> None:
    plus_eight = timezone(timedelta(hours=8))
    at = datetime(2026, 3, 1, 8, 0, 0, 7, tzinfo=plus_eight)
    store.insert_conversation(_conversation(created_at=at, updated_at=at))
    got = store.get_conversation("chat_a")
    assert got is not None
    assert got.created_at == datetime(2026, 3, 1, 0, 0, 0, 7, tzinfo=UTC)


def test_a_taken_id_is_refused_and_the_first_conversation_stays(store: Store) -> None:
    assert store.insert_conversation(_conversation())
    assert not store.insert_conversation(_conversation(tenant_id="t2", user_id="mallory"))
    assert store.get_conversation("chat_a") == _conversation()
    assert store.list_conversations(tenant_id="t2") == []


def test_an_unknown_id_is_none_and_has_no_turns(store: Store) -> None:
    store.insert_conversation(_conversation())
    for other in ["chat_b", "CHAT_A", "chat_a ", "", "chat_%"]:
        assert store.get_conversation(other) is None
        assert store.get_turns(other) == []


def test_threads_racing_to_create_one_id_let_exactly_one_win(store: Store, race: Race) -> None:
    wins = race(RACERS, lambda i: store.insert_conversation(_conversation(run_id=f"run_{i}")))
    assert wins.count(True) == 1
    got = store.get_conversation("chat_a")
    assert got is not None
    assert got.run_id == f"run_{wins.index(True)}"


# --- holding -----------------------------------------------------------------------------------


def test_the_holder_moves_only_from_the_expected_run(store: Store) -> None:
    store.insert_conversation(_conversation(run_id=None))
    at = T0 + timedelta(seconds=1)
    assert store.claim_conversation("chat_a", run_id="run_1", expect_run_id=None, at=at)
    assert not store.claim_conversation("chat_a", run_id="run_2", expect_run_id=None, at=at)
    assert not store.claim_conversation("chat_a", run_id="run_2", expect_run_id="run_9", at=at)
    got = store.get_conversation("chat_a")
    assert got is not None
    assert (got.run_id, got.updated_at) == ("run_1", at)
    assert store.claim_conversation("chat_a", run_id=None, expect_run_id="run_1", at=at)
    got = store.get_conversation("chat_a")
    assert got is not None
    assert got.run_id is None
    assert not store.claim_conversation("chat_b", run_id="run_1", expect_run_id=None, at=at)
    assert store.get_conversation("chat_b") is None


def test_threads_racing_to_hold_a_conversation_let_exactly_one_win(
    store: Store, race: Race
) -> None:
    store.insert_conversation(_conversation(run_id="run_0"))

    def claim(i: int) -> bool:
        at = T0 + timedelta(seconds=1) + _us(i)
        return store.claim_conversation("chat_a", run_id=f"r{i}", expect_run_id="run_0", at=at)

    wins = race(RACERS, claim)
    assert wins.count(True) == 1
    got = store.get_conversation("chat_a")
    assert got is not None
    assert got.run_id == f"r{wins.index(True)}"


# --- appending ---------------------------------------------------------------------------------


def test_appends_at_the_expected_count_add_numbered_rows(store: Store) -> None:
    store.insert_conversation(_conversation())
    at = T0 + timedelta(seconds=2)
    assert store.append_turns("chat_a", [_turn(0), _turn(1)], expect_turns=0, at=at)
    assert store.append_turns("chat_a", [_turn(2)], expect_turns=2, at=at + _us(1))
    assert store.get_turns("chat_a") == [_turn(0), _turn(1), _turn(2)]
    assert store.get_turns("chat_a", stop=2) == [_turn(0), _turn(1)]
    assert store.get_turns("chat_a", start=1) == [_turn(1), _turn(2)]
    assert store.get_turns("chat_a", start=1, stop=2) == [_turn(1)]
    assert store.get_turns("chat_a", stop=0) == []
    got = store.get_conversation("chat_a")
    assert got is not None
    assert (got.turns, got.updated_at, got.run_id) == (3, at + _us(1), "run_1")


def test_a_stale_append_is_refused_and_writes_nothing(store: Store) -> None:
    store.insert_conversation(_conversation())
    assert store.append_turns("chat_a", [_turn(0)], expect_turns=0, at=T0)
    assert not store.append_turns("chat_a", [_turn(9)], expect_turns=0, at=T0)
    assert not store.append_turns("chat_a", [_turn(9)], expect_turns=2, at=T0)
    assert store.get_turns("chat_a") == [_turn(0)]
    got = store.get_conversation("chat_a")
    assert got is not None
    assert got.turns == 1


def test_an_append_to_an_unknown_conversation_writes_nothing(store: Store) -> None:
    assert not store.append_turns("chat_x", [_turn(0)], expect_turns=0, at=T0)
    assert store.get_turns("chat_x") == []
    assert store.get_conversation("chat_x") is None


def test_an_append_of_text_no_store_can_keep_is_refused_before_any_write(store: Store) -> None:
    store.insert_conversation(_conversation())
    with pytest.raises(ValueError, match="NUL"):
        store.append_turns("chat_a", [_turn(0), '"\x00"'], expect_turns=0, at=T0)
    assert store.get_turns("chat_a") == []


@pytest.mark.parametrize(
    "text",
    [
        json.dumps({"text": "héllo 租户 🧪 مرحبا e\u0301 \u200b"}, ensure_ascii=False),
        json.dumps({"text": "x" * 200_000}),
        "'; DROP TABLE conversation_turns; --",
        "",
    ],
    ids=["unicode", "large", "sql_text", "empty"],
)
def test_turn_text_reads_back_character_for_character(store: Store, text: str) -> None:
    store.insert_conversation(_conversation())
    assert store.append_turns("chat_a", [text], expect_turns=0, at=T0)
    assert store.get_turns("chat_a") == [text]


def test_threads_racing_to_append_at_one_count_let_exactly_one_win(
    store: Store, race: Race
) -> None:
    store.insert_conversation(_conversation())
    store.append_turns("chat_a", [_turn(0)], expect_turns=0, at=T0)

    def append(i: int) -> bool:
        mine = [json.dumps({"racer": i, "n": n}) for n in range(3)]
        return store.append_turns("chat_a", mine, expect_turns=1, at=T0 + _us(i))

    wins = race(RACERS, append)
    assert wins.count(True) == 1
    winner = wins.index(True)
    assert store.get_turns("chat_a") == [
        _turn(0),
        *(json.dumps({"racer": winner, "n": n}) for n in range(3)),
    ]
    got = store.get_conversation("chat_a")
    assert got is not None
    assert got.turns == 4


# --- listing -----------------------------------------------------------------------------------


def test_a_listing_is_a_tenants_newest_updated_first_optionally_one_users(store: Store) -> None:
    store.insert_conversation(_conversation("c1", updated_at=T0 + _us(1)))
    store.insert_conversation(_conversation("c2", user_id="bob", updated_at=T0 + _us(2)))
    store.insert_conversation(_conversation("tie_a", updated_at=T0 + _us(3)))
    store.insert_conversation(_conversation("tie_b", updated_at=T0 + _us(3)))
    store.insert_conversation(_conversation("other", tenant_id="t2", updated_at=T0 + _us(9)))

    def ids(**filters: Any) -> list[str]:
        return [c.conversation_id for c in store.list_conversations(**filters)]

    assert ids(tenant_id="t1") == ["tie_b", "tie_a", "c2", "c1"]
    assert ids(tenant_id="t1", user_id="alice") == ["tie_b", "tie_a", "c1"]
    assert ids(tenant_id="t1", user_id="bob") == ["c2"]
    assert ids(tenant_id="t1", limit=2) == ["tie_b", "tie_a"]
    assert ids(tenant_id="t1", limit=0) == []
    assert ids(tenant_id="t2") == ["other"]
    assert ids(tenant_id="t3") == []
    # An append moves a conversation to the top.
    store.append_turns("c1", [_turn(0)], expect_turns=0, at=T0 + timedelta(seconds=1))
    assert ids(tenant_id="t1")[0] == "c1"


def test_tenants_with_similar_names_never_see_each_others_conversations(store: Store) -> None:
    tenants = ["t1", "T1", "t1 ", "t10", "t%", "t_", "t1'--", ""]
    for n, tenant in enumerate(tenants):
        store.insert_conversation(_conversation(f"chat_{n}", tenant_id=tenant))
    for n, tenant in enumerate(tenants):
        assert [c.conversation_id for c in store.list_conversations(tenant_id=tenant)] == [
            f"chat_{n}"
        ]


# --- errors and migrations ---------------------------------------------------------------------


def test_a_database_without_the_conversation_tables_gives_store_errors(tmp_path: Path) -> None:
    store = SqliteStore.open(tmp_path / "h.db", migrate=False)
    try:
        with pytest.raises(StoreError):
            store.insert_conversation(_conversation())
        with pytest.raises(StoreError):
            store.get_conversation("chat_a")
        with pytest.raises(StoreError):
            store.claim_conversation("chat_a", run_id="r", expect_run_id=None, at=T0)
        with pytest.raises(StoreError):
            store.append_turns("chat_a", [_turn(0)], expect_turns=0, at=T0)
        with pytest.raises(StoreError):
            store.get_turns("chat_a")
        with pytest.raises(StoreError):
            store.list_conversations(tenant_id="t1")
    finally:
        store.close()


def _run() -> RunRecord:
    return RunRecord(
        run_id="run_old",
        tenant_id="t1",
        user_id="alice",
        state=RunState.FINISHED,
        version=1,
        created_at=T0,
        updated_at=T0,
        data="{}",
    )


def test_opening_a_store_of_revision_0005_adds_conversations_and_keeps_the_runs(
    empty_database: EmptyDatabase,
) -> None:
    engine = empty_database.engine
    migrate(engine, "0005")
    assert "conversations" not in table_names(engine)
    SqlStore(engine).insert_run(_run())
    with empty_database.reopened() as store:
        assert store.get_run("run_old") == _run()
        assert store.insert_conversation(_conversation())
        assert store.append_turns("chat_a", [_turn(0)], expect_turns=0, at=T0)
        assert store.get_turns("chat_a") == [_turn(0)]
        indexes = {ix["name"] for ix in sa.inspect(store.engine).get_indexes("conversations")}
        assert indexes == {"ix_conversations_tenant_updated"}


def test_downgrading_0006_drops_only_the_conversations(tmp_path: Path) -> None:
    store = SqliteStore.open(tmp_path / "h.db")
    try:
        store.insert_run(_run())
        store.insert_conversation(_conversation())
        migrate(store.engine, "0005", down=True)
        tables = table_names(store.engine)
        assert not {"conversations", "conversation_turns"} & tables
        assert {"audit_events", "executions", "plans", "raw_results", "runs"} <= tables
        assert revision(store.engine) == ["0005"]
        store.migrate()
        assert store.get_conversation("chat_a") is None
        assert store.get_run("run_old") == _run()
    finally:
        store.close()
