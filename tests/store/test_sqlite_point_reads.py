"""SQLite answers a read of one API key inline: the same record, the same refusals, no thread.

`point_reads_block` lets the service check an API key on the event loop when the store
says such a read never waits long (memory, SQLite). The store is still read on every
request: a key revoked or expired is refused on the very next one.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path

import pytest

from handrail.api_keys import ApiKeyRecord, parse_key
from handrail.clock import FixedClock
from handrail.mcp.auth import ApiKeyAuthenticator
from handrail.mcp.keys import ApiKeys
from handrail.principal import Principal
from handrail.store.base import point_reads_block, reads_block
from handrail.store.memory import MemoryStore
from handrail.store.sql import SqlStore
from handrail.store.sqlite import SqliteStore

ALICE = Principal(
    user_id="alice",
    tenant_id="t1",
    permissions=frozenset({"order.read"}),
    roles=frozenset({"clerk"}),
    data_scope={"region": "eu"},
)


class _CountingStore(SqliteStore):
    """A SqliteStore that notes the thread of every key read."""

    reader_threads: list[int]

    def get_api_key(self, key_id: str) -> ApiKeyRecord | None:
        self.reader_threads.append(threading.get_ident())
        return super().get_api_key(key_id)


class _WaitingMemory(MemoryStore):
    reads_block = True


@pytest.fixture
def sqlite(tmp_path: Path) -> SqliteStore:
    return SqliteStore.open(tmp_path / "keys.db")


def test_which_stores_read_one_record_without_waiting(sqlite: SqliteStore) -> None:
    try:
        assert reads_block(sqlite)  # its other reads may scan: they keep their thread
        assert not point_reads_block(sqlite)
        assert not point_reads_block(MemoryStore())
        assert point_reads_block(_WaitingMemory())
        assert point_reads_block(object())  # a store that says nothing may wait
    finally:
        sqlite.close()


def test_the_driver_read_gives_the_record_the_general_read_gives(sqlite: SqliteStore) -> None:
    clock = FixedClock()
    keys = ApiKeys(sqlite, clock=clock, audit=None)
    try:
        plain = keys.create(ALICE).record
        expiring = keys.create(ALICE, expires_at=clock.now() + timedelta(hours=1)).record
        assert keys.revoke(plain.key_id, tenant_id="t1")
        for key_id in (plain.key_id, expiring.key_id, "0123456789abcdef"):
            assert sqlite.get_api_key(key_id) == SqlStore.get_api_key(sqlite, key_id)
        found = sqlite.get_api_key(expiring.key_id)
        assert found is not None
        assert found.principal() == ALICE
        assert found.expires_at == expiring.expires_at
        revoked = sqlite.get_api_key(plain.key_id)
        assert revoked is not None
        assert revoked.revoked_at == clock.now()
    finally:
        sqlite.close()


@pytest.mark.anyio
async def test_a_key_is_checked_on_the_loop_and_refused_once_revoked_or_expired(
    tmp_path: Path,
) -> None:
    store = _CountingStore.open(tmp_path / "keys.db")
    store.reader_threads = []
    clock = FixedClock()
    keys = ApiKeys(store, clock=clock, audit=None)
    api = ApiKeyAuthenticator(keys)
    try:
        assert not keys.verify_blocks
        revoked = keys.create(ALICE).key
        expiring = keys.create(ALICE, expires_at=clock.now() + timedelta(seconds=60)).key
        assert await api.authenticate(revoked) == ALICE
        assert await api.authenticate(expiring) == ALICE
        parsed = parse_key(revoked)
        assert parsed is not None
        assert keys.revoke(parsed[0], tenant_id="t1")
        assert await api.authenticate(revoked) is None
        clock.advance(60)
        assert await api.authenticate(expiring) is None
        assert set(store.reader_threads) == {threading.get_ident()}
    finally:
        store.close()
