"""Every Store keeps Idempotency-Key records by one contract; migration 0012 adds them.

A key is claimed once per caller: a live holder answers a second claim, an expired one
is replaced; finishing and releasing are compare-and-sets on the claim; keys of two
tenants or two users never meet; of racing claims exactly one wins; purges drop only
expired records.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from _migrations import EmptyDatabase, assert_at_head, migrate, revision, table_names
from _stores import Race
from handrail.errors import StoreError
from handrail.idempotency_keys import IdempotencyRecord, IdempotencyState, request_fingerprint
from handrail.store import SqliteStore, Store

T0 = datetime(2026, 1, 1, tzinfo=UTC)
RACERS = 16
FINGERPRINT = request_fingerprint("POST", "/v1/calls/anthropic", "", b"{}")


def _claim(n: int = 1, **changes: Any) -> IdempotencyRecord:
    base = IdempotencyRecord(
        tenant_id="t1",
        user_id="alice",
        key="key-1",
        fingerprint=FINGERPRINT,
        claim=f"claim-{n}",
        state=IdempotencyState.RUNNING,
        created_at=T0,
        expires_at=T0 + timedelta(seconds=30),
    )
    return dataclasses.replace(base, **changes)


def _done(claim: IdempotencyRecord, body: bytes = b'{"ok":true}') -> IdempotencyRecord:
    return dataclasses.replace(
        claim,
        state=IdempotencyState.DONE,
        status=200,
        content_type="application/json",
        body=body,
        expires_at=T0 + timedelta(days=1),
    )


def test_a_free_key_is_claimed_and_a_second_claim_sees_the_holder(store: Store) -> None:
    first = _claim(1)
    assert store.claim_idempotency_key(first) is None
    assert store.claim_idempotency_key(_claim(2)) == first


def test_a_finished_key_reads_back_its_answer_byte_for_byte(store: Store) -> None:
    claim = _claim()
    assert store.claim_idempotency_key(claim) is None
    body = bytes(range(256))
    assert store.finish_idempotency_key(_done(claim, body))
    held = store.claim_idempotency_key(_claim(2, created_at=T0 + timedelta(hours=1)))
    assert held == _done(claim, body)


def test_times_in_another_zone_read_back_in_utc(store: Store) -> None:
    zone = timezone(timedelta(hours=5))
    claim = _claim(
        created_at=T0.astimezone(zone), expires_at=(T0 + timedelta(seconds=30)).astimezone(zone)
    )
    assert store.claim_idempotency_key(claim) is None
    held = store.claim_idempotency_key(_claim(2))
    assert held is not None
    assert held.created_at == T0
    assert held.created_at.utcoffset() == timedelta(0)


def test_an_expired_claim_is_taken_over_and_its_holder_can_no_longer_finish(store: Store) -> None:
    stale = _claim(1)
    assert store.claim_idempotency_key(stale) is None
    later = T0 + timedelta(seconds=30)
    fresh = _claim(2, created_at=later, expires_at=later + timedelta(seconds=30))
    assert store.claim_idempotency_key(fresh) is None
    assert not store.finish_idempotency_key(_done(stale))
    assert not store.release_idempotency_key(
        tenant_id="t1", user_id="alice", key="key-1", claim=stale.claim
    )
    assert store.finish_idempotency_key(_done(fresh))


def test_a_finished_key_is_finished_once(store: Store) -> None:
    claim = _claim()
    assert store.claim_idempotency_key(claim) is None
    assert store.finish_idempotency_key(_done(claim))
    assert not store.finish_idempotency_key(_done(claim, b"other"))
    assert not store.release_idempotency_key(
        tenant_id="t1", user_id="alice", key="key-1", claim=claim.claim
    )


def test_a_released_key_is_free_again(store: Store) -> None:
    claim = _claim()
    assert store.claim_idempotency_key(claim) is None
    assert store.release_idempotency_key(
        tenant_id="t1", user_id="alice", key="key-1", claim=claim.claim
    )
    assert store.claim_idempotency_key(_claim(2)) is None


def test_keys_of_other_tenants_and_users_never_meet(store: Store) -> None:
    assert store.claim_idempotency_key(_claim(1)) is None
    assert store.claim_idempotency_key(_claim(2, tenant_id="t2")) is None
    assert store.claim_idempotency_key(_claim(3, user_id="bob")) is None
    assert not store.release_idempotency_key(
        tenant_id="t2", user_id="alice", key="key-1", claim="claim-1"
    )


def test_of_racing_claims_of_one_key_exactly_one_wins(store: Store, race: Race) -> None:
    results = race(RACERS, lambda i: store.claim_idempotency_key(_claim(i)) or "won")
    winners = [i for i, held in enumerate(results) if held == "won"]
    assert len(winners) == 1
    holders = {held.claim for held in results if isinstance(held, IdempotencyRecord)}
    assert holders == {f"claim-{winners[0]}"}


def test_a_purge_drops_only_expired_records_oldest_first(store: Store) -> None:
    for n in range(4):
        record = _claim(n, key=f"k{n}", expires_at=T0 + timedelta(seconds=10 * (n + 1)))
        assert store.claim_idempotency_key(record) is None
    assert store.purge_idempotency_keys(before=T0 + timedelta(seconds=30), limit=2) == 2
    assert store.purge_idempotency_keys(before=T0 + timedelta(seconds=30)) == 1
    assert store.purge_idempotency_keys(before=T0 + timedelta(seconds=30)) == 0
    assert store.claim_idempotency_key(_claim(9, key="k3")) is not None
    assert store.claim_idempotency_key(_claim(9, key="k0")) is None


def test_claims_and_answers_must_be_in_their_state(store: Store) -> None:
    with pytest.raises(ValueError, match="RUNNING"):
        store.claim_idempotency_key(_done(_claim()))
    with pytest.raises(ValueError, match="DONE"):
        store.finish_idempotency_key(_claim())


def test_the_record_refuses_what_no_store_keeps() -> None:
    with pytest.raises(ValueError, match="key"):
        _claim(key="k" * 256)
    with pytest.raises(ValueError, match="tenant"):
        _claim(tenant_id="")
    with pytest.raises(ValueError, match="NUL"):
        _claim(user_id="a\x00b")
    with pytest.raises(ValueError, match="fingerprint"):
        _claim(fingerprint="nothex")
    with pytest.raises(ValueError, match="timezone"):
        _claim(created_at=datetime(2026, 1, 1))  # noqa: DTZ001 - the naive time refused
    with pytest.raises(ValueError, match="DONE"):
        _claim(status=200)
    with pytest.raises(ValueError, match="content type"):
        dataclasses.replace(_done(_claim()), content_type="x" * 257)


def test_a_fingerprint_tells_method_path_query_and_body_apart() -> None:
    base = request_fingerprint("POST", "/a", "q=1", b"{}")
    assert base == request_fingerprint("post", "/a", "q=1", b"{}")
    assert (
        len(
            {
                base,
                request_fingerprint("PUT", "/a", "q=1", b"{}"),
                request_fingerprint("POST", "/b", "q=1", b"{}"),
                request_fingerprint("POST", "/a", "q=2", b"{}"),
                request_fingerprint("POST", "/a", "q=1", b"{ }"),
                request_fingerprint("POST", "/aq", "=1", b"{}"),
            }
        )
        == 6
    )


# --- errors and migrations ---------------------------------------------------------------------


def test_a_database_without_the_table_gives_store_errors(tmp_path: Path) -> None:
    store = SqliteStore.open(tmp_path / "h.db", migrate=False)
    try:
        with pytest.raises(StoreError):
            store.claim_idempotency_key(_claim())
        with pytest.raises(StoreError):
            store.finish_idempotency_key(_done(_claim()))
        with pytest.raises(StoreError):
            store.release_idempotency_key(tenant_id="t1", user_id="a", key="k", claim="c")
        with pytest.raises(StoreError):
            store.purge_idempotency_keys(before=T0)
    finally:
        store.close()


def test_opening_a_store_of_revision_0011_adds_the_table(empty_database: EmptyDatabase) -> None:
    engine = empty_database.engine
    migrate(engine, "0011")
    assert "idempotency_keys" not in table_names(engine)
    with empty_database.reopened() as store:
        assert store.claim_idempotency_key(_claim()) is None
        assert_at_head(store.engine)


def test_downgrading_0012_drops_only_the_idempotency_keys(tmp_path: Path) -> None:
    store = SqliteStore.open(tmp_path / "h.db")
    try:
        assert store.claim_idempotency_key(_claim()) is None
        migrate(store.engine, "0011", down=True)
        tables = table_names(store.engine)
        assert "idempotency_keys" not in tables
        assert {"audit_events", "api_keys", "tasks"} <= tables
        assert revision(store.engine) == ["0011"]
        store.migrate()
        assert store.claim_idempotency_key(_claim()) is None
    finally:
        store.close()
