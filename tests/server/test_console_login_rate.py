"""The console's per-client login rate: counted where every worker counts (Redis), fail closed."""

from __future__ import annotations

import uuid

import pytest
from _console import PASSWORD, cheap_passwords
from limits.aio.storage import MemoryStorage, Storage
from limits.errors import StorageError

from handrail.authz.quota import QuotaPolicy, RateLimiter
from handrail.clock import FixedClock
from handrail.errors import ErrorCode
from handrail.people import PersonRecord
from handrail.server.config import ConsoleConfig
from handrail.server.console.directory import PeopleDirectory
from handrail.server.console.people import ConsolePeople
from handrail.server.problems import ServiceCode
from handrail.store import MemoryStore

pytestmark = pytest.mark.anyio

CONFIG = ConsoleConfig(login_rate="3/minute", max_failed_logins=100)


def _people(store: MemoryStore, storage: Storage | None) -> ConsolePeople:
    return ConsolePeople(
        store,
        clock=FixedClock(),
        config=CONFIG,
        secure_cookies=False,
        passwords=cheap_passwords(),
        rate_storage=storage,
    )


def _store_with_alice() -> MemoryStore:
    store = MemoryStore()
    added = PeopleDirectory(store, passwords=cheap_passwords()).add(
        "alice", tenant_id="acme", user_id="alice", password=PASSWORD
    )
    assert isinstance(added, PersonRecord)
    return store


async def test_two_workers_sharing_redis_count_one_clients_logins_together(redis_url: str) -> None:
    store = _store_with_alice()
    prefix = f"handrail-test-{uuid.uuid4().hex}"
    # What the service gives each worker: the storage of its shared Redis limiter.
    limiters = [
        RateLimiter.redis(redis_url, policy=QuotaPolicy(), key_prefix=prefix) for _ in range(2)
    ]
    first, second = (_people(store, limiter.storage) for limiter in limiters)
    try:
        answers = [
            await worker.login("alice", "wrong password", client="203.0.113.9")
            for worker in (first, second, first, second)
        ]
        assert [a.code for a in answers[:3]] == [ServiceCode.UNAUTHENTICATED] * 3
        assert answers[3].code is ErrorCode.RATE_LIMITED
        # Even the right password waits out the window: no session is opened.
        right = await second.login("alice", PASSWORD, client="203.0.113.9")
        assert right.code is ErrorCode.RATE_LIMITED
        assert right.token is None
        # Another client is counted on its own.
        other = await first.login("alice", PASSWORD, client="198.51.100.7")
        assert other.token is not None
    finally:
        await limiters[0].storage.reset()
        for limiter in limiters:
            await limiter.aclose()


async def test_each_worker_counts_alone_without_shared_storage() -> None:
    store = _store_with_alice()
    first, second = _people(store, None), _people(store, None)
    for _ in range(3):
        assert (await first.login("alice", "nope", client="c")).code is ServiceCode.UNAUTHENTICATED
    assert (await first.login("alice", "nope", client="c")).code is ErrorCode.RATE_LIMITED
    assert (await second.login("alice", PASSWORD, client="c")).token is not None


class _BrokenStorage(MemoryStorage):
    async def incr(self, *args: object, **kwargs: object) -> int:
        raise StorageError(ConnectionError("redis is gone"))

    async def acquire_entry(self, *args: object, **kwargs: object) -> bool:
        raise StorageError(ConnectionError("redis is gone"))


async def test_a_failing_rate_storage_refuses_the_login_rather_than_skip_the_count() -> None:
    people = _people(_store_with_alice(), _BrokenStorage())
    answer = await people.login("alice", PASSWORD, client="c")
    assert answer.code == ServiceCode.UNAVAILABLE
    assert answer.token is None
