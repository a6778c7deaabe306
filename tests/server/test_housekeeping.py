import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from handrail.clock import FixedClock
from handrail.idempotency_keys import IdempotencyRecord, IdempotencyState
from handrail.people import SessionRecord
from handrail.server.housekeeping import Housekeeping
from handrail.store import MemoryStore

START = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _session(n: int, *, expires_at: datetime) -> SessionRecord:
    return SessionRecord(
        session_hash=f"{n:064x}",
        login="alice",
        tenant_id="acme",
        user_id="alice",
        created_at=START - timedelta(days=3),
        last_seen_at=START - timedelta(days=3),
        expires_at=expires_at,
    )


def _key(name: str, *, expires_at: datetime) -> IdempotencyRecord:
    return IdempotencyRecord(
        tenant_id="acme",
        user_id="alice",
        key=name,
        fingerprint="f" * 64,
        claim=f"claim-{name}",
        state=IdempotencyState.RUNNING,
        created_at=START - timedelta(hours=2),
        expires_at=expires_at,
    )


def _filled() -> MemoryStore:
    store = MemoryStore()
    assert store.insert_session(_session(1, expires_at=START - timedelta(days=2)))
    assert store.insert_session(_session(2, expires_at=START + timedelta(hours=1)))
    assert store.claim_idempotency_key(_key("old", expires_at=START - timedelta(hours=1))) is None
    assert store.claim_idempotency_key(_key("live", expires_at=START + timedelta(hours=1))) is None
    return store


def test_a_round_deletes_only_what_ended():
    store = _filled()
    purged = Housekeeping(store, clock=FixedClock(START)).purge_once()
    assert purged == (1, 1)
    assert store.get_session(f"{1:064x}") is None
    assert store.get_session(f"{2:064x}") is not None
    assert Housekeeping(store, clock=FixedClock(START)).purge_once() == (0, 0)


def test_a_session_ended_within_the_last_day_is_kept():
    store = MemoryStore()
    assert store.insert_session(_session(3, expires_at=START - timedelta(hours=2)))
    assert Housekeeping(store, clock=FixedClock(START)).purge_once() == (0, 0)


@pytest.mark.anyio
async def test_the_background_rounds_run_until_stopped():
    store = _filled()
    rounds = asyncio.Queue[float]()

    async def sleep(seconds: float) -> None:
        await rounds.put(seconds)
        await asyncio.Event().wait()  # the next round never comes: stop cancels it

    keeper = Housekeeping(store, clock=FixedClock(START), every_seconds=60, sleep=sleep)
    await keeper.start()
    await keeper.start()  # a second start does nothing
    assert await asyncio.wait_for(rounds.get(), timeout=60) == 60
    await keeper.stop()
    assert store.get_session(f"{1:064x}") is None
    assert rounds.empty()


def test_the_interval_must_be_positive():
    with pytest.raises(ValueError, match="positive"):
        Housekeeping(MemoryStore(), clock=FixedClock(START), every_seconds=0)
