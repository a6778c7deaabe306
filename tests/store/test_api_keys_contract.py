"""Every Store keeps API keys by the same contract; migration 0008 adds them to old stores.

A key id is inserted once and never overwritten; it reads back field for field (times
in UTC, the authority intact); listings are one tenant's (or one user's) newest first;
revocation is a compare-and-set bound to the tenant: another tenant's revoke, a second
revoke and an unknown id change nothing, and of racing inserts or revocations exactly
one wins.
"""

from __future__ import annotations

import dataclasses
import hashlib
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from _migrations import EmptyDatabase, migrate, revision, table_names
from _stores import Race
from handrail.api_keys import ApiKeyRecord
from handrail.errors import StoreError
from handrail.store import SqliteStore, Store

T0 = datetime(2026, 1, 1, tzinfo=UTC)
RACERS = 16


def _key(n: int = 1, **changes: Any) -> ApiKeyRecord:
    base = ApiKeyRecord(
        key_id=f"{n:016x}",
        tenant_id="t1",
        user_id="alice",
        permissions=frozenset({"orders:read", "orders:write"}),
        roles=frozenset({"clerk"}),
        data_scope={"region": "eu", "shops": [1, 2]},
        label="ci bot",
        secret_hash=hashlib.sha256(str(n).encode()).hexdigest(),
        created_at=T0 + timedelta(seconds=n, microseconds=123_456),
        expires_at=T0 + timedelta(days=30),
    )
    return dataclasses.replace(base, **changes)


def test_a_key_reads_back_as_it_was_stored(store: Store) -> None:
    assert store.insert_api_key(_key())
    assert store.get_api_key(_key().key_id) == _key()
    assert store.get_api_key(_key(2).key_id) is None


def test_times_in_another_zone_read_back_in_utc(store: Store) -> None:
    east = timezone(timedelta(hours=5))
    record = _key(created_at=T0.astimezone(east), expires_at=None)
    assert store.insert_api_key(record)
    found = store.get_api_key(record.key_id)
    assert found is not None
    assert found.created_at == T0
    assert found.created_at.utcoffset() == timedelta(0)
    assert found.expires_at is None


def test_an_id_is_inserted_once_and_never_overwritten(store: Store) -> None:
    assert store.insert_api_key(_key())
    other = _key(tenant_id="t2", secret_hash="0" * 64)
    assert not store.insert_api_key(other)
    assert store.get_api_key(_key().key_id) == _key()


def test_listings_are_one_tenants_or_one_users_newest_first(store: Store) -> None:
    for n, (tenant, user) in enumerate(
        [("t1", "alice"), ("t1", "bob"), ("t2", "alice"), ("t1", "alice")], start=1
    ):
        assert store.insert_api_key(_key(n, tenant_id=tenant, user_id=user))
    assert [k.key_id for k in store.list_api_keys(tenant_id="t1")] == [
        _key(4).key_id,
        _key(2).key_id,
        _key(1).key_id,
    ]
    assert [k.key_id for k in store.list_api_keys(tenant_id="t1", user_id="alice")] == [
        _key(4).key_id,
        _key(1).key_id,
    ]
    assert [k.key_id for k in store.list_api_keys(tenant_id="t1", limit=1)] == [_key(4).key_id]
    assert store.list_api_keys(tenant_id="t3") == []


def test_revocation_is_bound_to_the_tenant_and_happens_once(store: Store) -> None:
    assert store.insert_api_key(_key())
    key_id = _key().key_id
    assert not store.revoke_api_key(key_id, tenant_id="t2", at=T0)
    assert store.get_api_key(key_id) == _key()
    assert not store.revoke_api_key(_key(9).key_id, tenant_id="t1", at=T0)
    assert store.revoke_api_key(key_id, tenant_id="t1", at=T0 + timedelta(days=1))
    assert not store.revoke_api_key(key_id, tenant_id="t1", at=T0 + timedelta(days=2))
    found = store.get_api_key(key_id)
    assert found is not None
    assert found.revoked_at == T0 + timedelta(days=1)


def test_of_racing_revocations_exactly_one_wins(store: Store, race: Race) -> None:
    assert store.insert_api_key(_key())
    at = [T0 + timedelta(seconds=i) for i in range(RACERS)]
    wins = race(RACERS, lambda i: store.revoke_api_key(_key().key_id, tenant_id="t1", at=at[i]))
    assert wins.count(True) == 1
    found = store.get_api_key(_key().key_id)
    assert found is not None
    assert found.revoked_at == at[wins.index(True)]


def test_of_racing_inserts_of_one_id_exactly_one_wins(store: Store, race: Race) -> None:
    wins = race(RACERS, lambda i: store.insert_api_key(_key(user_id=f"user{i}")))
    assert wins.count(True) == 1
    found = store.get_api_key(_key().key_id)
    assert found is not None
    assert found.user_id == f"user{wins.index(True)}"


def test_the_record_refuses_what_no_store_keeps() -> None:
    with pytest.raises(ValueError, match="key id"):
        _key(key_id="XYZ")
    with pytest.raises(ValueError, match="hash"):
        _key(secret_hash="nothex")  # noqa: S106 - not a secret
    with pytest.raises(ValueError, match="timezone"):
        _key(created_at=datetime(2026, 1, 1))  # noqa: DTZ001 - the naive time refused
    with pytest.raises(ValueError, match="at most"):
        _key(label="x" * 257)
    with pytest.raises(ValueError, match="NUL"):
        _key(user_id="a\x00b")


# --- errors and migrations ---------------------------------------------------------------------


def test_a_database_without_the_key_table_gives_store_errors(tmp_path: Path) -> None:
    store = SqliteStore.open(tmp_path / "h.db", migrate=False)
    try:
        with pytest.raises(StoreError):
            store.insert_api_key(_key())
        with pytest.raises(StoreError):
            store.get_api_key(_key().key_id)
        with pytest.raises(StoreError):
            store.list_api_keys(tenant_id="t1")
        with pytest.raises(StoreError):
            store.revoke_api_key(_key().key_id, tenant_id="t1", at=T0)
    finally:
        store.close()


def test_opening_a_store_of_revision_0007_adds_the_key_table(
    empty_database: EmptyDatabase,
) -> None:
    engine = empty_database.engine
    migrate(engine, "0007")
    assert "api_keys" not in table_names(engine)
    with empty_database.reopened() as store:
        assert store.insert_api_key(_key())
        assert store.get_api_key(_key().key_id) == _key()


def test_downgrading_0008_drops_only_the_keys(tmp_path: Path) -> None:
    store = SqliteStore.open(tmp_path / "h.db")
    try:
        store.insert_api_key(_key())
        migrate(store.engine, "0007", down=True)
        tables = table_names(store.engine)
        assert "api_keys" not in tables
        assert {"audit_events", "runs", "conversations", "run_entries"} <= tables
        assert revision(store.engine) == ["0007"]
        store.migrate()
        assert store.get_api_key(_key().key_id) is None
    finally:
        store.close()
