"""PostgreSQL connections are bounded: a store waits for one instead of opening more.

Each test opens its store as a role whose CONNECTION LIMIT is the bound the store was
given, so one connection too many fails at once, whenever it happens. Statements are
held back by a lock another session takes on `executions`; every wait is on a state
of the database or the pool, polled with a bound.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from _pg_admin import (
    WAIT_S,
    app_name,
    backends,
    executions_locked,
    limited_role,
    terminate,
    until,
    until_async,
)
from _records import execution_record
from _stores import STORE_TABLES
from handrail.errors import ConfigurationError, StoreError
from handrail.store import PostgresStore
from handrail.store._pg_async import AsyncExecutions
from handrail.store.sql import execution_row

pytestmark = pytest.mark.postgres


@pytest.fixture
def migrated(postgres_url: str) -> str:
    """The session database, migrated and emptied; its URL."""
    store = PostgresStore.open(postgres_url)
    try:
        with store.engine.begin() as connection:
            connection.exec_driver_sql(f"TRUNCATE {', '.join(STORE_TABLES)} RESTART IDENTITY")
    finally:
        store.close()
    return postgres_url


@contextmanager
def _store(
    url: str,
    *,
    pool_size: int,
    async_pool_size: int,
    pool_timeout: float = WAIT_S,
) -> Iterator[tuple[PostgresStore, str]]:
    """A store as a role limited to exactly its bound; the store and its app name."""
    name = app_name()
    with limited_role(url, pool_size + async_pool_size) as role_url:
        store = PostgresStore.open(
            role_url,
            migrate=False,
            pool_size=pool_size,
            max_overflow=0,
            async_pool_size=async_pool_size,
            pool_timeout=pool_timeout,
            application_name=name,
        )
        try:
            yield store, name
        finally:
            store.close()


def _fast(store: PostgresStore) -> AsyncExecutions:
    fast = store.async_executions
    assert fast is not None
    return fast


def _row(key: str) -> dict[str, object]:
    return execution_row(execution_record(idempotency_key=key))


async def _claim(fast: AsyncExecutions, key: str, *, wait: float = WAIT_S) -> bool:
    return await fast.insert(_row(key), require_confirmed_plan=False, wait=wait)


# --- the async pool ------------------------------------------------------------------------------


def test_a_burst_of_claims_waits_for_the_bounded_connections_and_opens_no_more(
    migrated: str,
) -> None:
    with _store(migrated, pool_size=1, async_pool_size=2) as (store, name):
        fast = _fast(store)

        async def burst() -> list[bool]:
            return await asyncio.gather(*(_claim(fast, f"k{n}") for n in range(24)))

        assert asyncio.run(burst()) == [True] * 24
        stats = fast.stats()
        assert (stats.open, stats.idle, stats.waiting) == (2, 2, 0)
        assert backends(migrated, name) <= 2
        assert len(store.list_executions(limit=100)) == 24


def test_a_claim_waits_while_every_connection_is_busy_then_takes_a_freed_one(
    migrated: str,
) -> None:
    with _store(migrated, pool_size=1, async_pool_size=2) as (store, name):
        fast = _fast(store)

        async def scenario() -> list[bool]:
            with executions_locked(migrated):
                held = [asyncio.create_task(_claim(fast, f"held-{n}")) for n in range(2)]
                await until_async(
                    lambda: backends(migrated, name, waiting_on_lock=True) == 2,
                    "both connections blocked in their claims",
                )
                third = asyncio.create_task(_claim(fast, "third"))
                await until_async(lambda: fast.stats().waiting == 1, "the third claim waits")
                assert fast.stats().open == 2
                assert backends(migrated, name) == 2
            return await asyncio.wait_for(asyncio.gather(*held, third), WAIT_S)

        assert asyncio.run(scenario()) == [True, True, True]
        assert store.get_execution("third") is not None


def test_a_claim_that_finds_no_connection_within_its_wait_is_a_store_error(
    migrated: str,
) -> None:
    with _store(migrated, pool_size=1, async_pool_size=1) as (store, name):
        fast = _fast(store)

        async def scenario() -> None:
            with executions_locked(migrated):
                held = asyncio.create_task(_claim(fast, "held"))
                await until_async(
                    lambda: backends(migrated, name, waiting_on_lock=True) == 1,
                    "the one connection blocked in its claim",
                )
                with pytest.raises(StoreError, match="no database connection"):
                    await _claim(fast, "late", wait=0.05)
                assert fast.stats().waiting == 0
            assert await asyncio.wait_for(held, WAIT_S)

        asyncio.run(scenario())
        assert store.get_execution("late") is None


def test_a_cancelled_waiter_leaves_the_queue_and_the_bound_intact(migrated: str) -> None:
    with _store(migrated, pool_size=1, async_pool_size=1) as (store, name):
        fast = _fast(store)

        async def scenario() -> bool:
            with executions_locked(migrated):
                held = asyncio.create_task(_claim(fast, "held"))
                await until_async(
                    lambda: backends(migrated, name, waiting_on_lock=True) == 1,
                    "the one connection blocked in its claim",
                )
                waiting = asyncio.create_task(_claim(fast, "gone"))
                await until_async(lambda: fast.stats().waiting == 1, "a claim waits")
                waiting.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await waiting
                assert fast.stats().waiting == 0
            assert await asyncio.wait_for(held, WAIT_S)
            return await _claim(fast, "after")

        assert asyncio.run(scenario())
        assert fast.stats().open == 1
        assert store.get_execution("gone") is None


def test_a_waiter_on_another_loop_gets_the_slot_of_a_released_connection(
    migrated: str,
) -> None:
    with _store(migrated, pool_size=1, async_pool_size=1) as (store, name):
        fast = _fast(store)
        results: dict[str, bool] = {}

        def other_loop() -> None:
            results["held"] = asyncio.run(_claim(fast, "held"))

        with executions_locked(migrated):
            thread = threading.Thread(target=other_loop)
            thread.start()
            until(
                lambda: backends(migrated, name, waiting_on_lock=True) == 1,
                "the other loop's connection blocked in its claim",
            )

            # The main thread sees this waiter queued before it releases the lock; polling
            # for it here as well would race the hand-over that follows the release.
            async def waiter() -> bool:
                return await asyncio.wait_for(_claim(fast, "mine"), WAIT_S)

            outcome: list[bool] = []
            waiting = threading.Thread(target=lambda: outcome.append(asyncio.run(waiter())))
            waiting.start()
            until(lambda: fast.stats().waiting == 1, "the waiter is queued")
        thread.join(WAIT_S)
        waiting.join(WAIT_S)
        assert not thread.is_alive()
        assert not waiting.is_alive()
        assert results == {"held": True}
        assert outcome == [True]
        assert fast.stats().open <= 1


def test_an_idle_connection_of_another_loop_is_closed_to_make_room(migrated: str) -> None:
    with _store(migrated, pool_size=1, async_pool_size=1) as (store, name):
        fast = _fast(store)
        parked = asyncio.new_event_loop()
        try:
            assert parked.run_until_complete(_claim(fast, "first"))
            assert fast.stats().idle == 1
            assert asyncio.run(_claim(fast, "second"))  # another loop, the bound is full
            assert fast.stats().open == 1
        finally:
            parked.close()
        assert backends(migrated, name) <= 1


def test_closing_the_store_fails_its_waiters(migrated: str) -> None:
    with _store(migrated, pool_size=1, async_pool_size=1) as (store, name):
        fast = _fast(store)

        async def scenario() -> None:
            with executions_locked(migrated):
                held = asyncio.create_task(_claim(fast, "held"))
                await until_async(
                    lambda: backends(migrated, name, waiting_on_lock=True) == 1,
                    "the one connection blocked in its claim",
                )
                waiting = asyncio.create_task(_claim(fast, "late"))
                await until_async(lambda: fast.stats().waiting == 1, "a claim waits")
                fast.close()
                with pytest.raises(StoreError, match="closed"):
                    await asyncio.wait_for(waiting, WAIT_S)
            assert await asyncio.wait_for(held, WAIT_S)

        asyncio.run(scenario())
        stats = fast.stats()
        assert (stats.open, stats.idle, stats.waiting) == (0, 0, 0)


def test_a_broken_connection_is_closed_and_its_slot_goes_to_a_waiter(migrated: str) -> None:
    with _store(migrated, pool_size=1, async_pool_size=1) as (store, name):
        fast = _fast(store)

        async def scenario() -> tuple[str, bool]:
            with executions_locked(migrated):
                held = asyncio.create_task(_claim(fast, "held"))
                await until_async(
                    lambda: backends(migrated, name, waiting_on_lock=True) == 1,
                    "the one connection blocked in its claim",
                )
                waiting = asyncio.create_task(_claim(fast, "next"))
                await until_async(lambda: fast.stats().waiting == 1, "a claim waits")
                await asyncio.to_thread(_terminate_all, migrated, name, 1)
                with pytest.raises(StoreError) as lost:
                    await asyncio.wait_for(held, WAIT_S)
            return str(lost.value), await asyncio.wait_for(waiting, WAIT_S)

        message, claimed = asyncio.run(scenario())
        assert "execution write failed" in message
        assert claimed
        assert fast.stats().open == 1


# --- the sync pool and the options -----------------------------------------------------------


def test_the_sync_pool_waits_for_its_bound_then_fails_with_a_store_error(migrated: str) -> None:
    with _store(migrated, pool_size=1, async_pool_size=1, pool_timeout=0.05) as (store, name):
        with store.transaction():  # holds the pool's one connection
            assert backends(migrated, name) == 1
            with pytest.raises(StoreError, match="TimeoutError"):
                store.get_execution("k")
            assert backends(migrated, name) == 1
        assert store.get_execution("k") is None


@pytest.mark.parametrize(
    "options",
    [
        {"pool_size": 0},
        {"async_pool_size": 0},
        {"max_overflow": -1},
        {"pool_timeout": 0.0},
    ],
)
def test_a_pool_bound_that_is_not_one_is_refused(
    postgres_url: str, options: dict[str, float]
) -> None:
    with pytest.raises(ConfigurationError):
        PostgresStore.open(postgres_url, migrate=False, **options)  # type: ignore[arg-type]


def test_a_lost_connection_closes_the_idle_ones_too_and_the_next_claim_opens_afresh(
    migrated: str,
) -> None:
    with _store(migrated, pool_size=1, async_pool_size=2) as (store, name):
        fast = _fast(store)
        loop = asyncio.new_event_loop()
        try:

            async def two() -> list[bool]:
                return await asyncio.gather(_claim(fast, "a"), _claim(fast, "b"))

            assert loop.run_until_complete(two()) == [True, True]
            assert fast.stats().idle == 2
            _terminate_all(migrated, name, 2)  # a restart: every backend is gone
            with pytest.raises(StoreError, match="execution write failed"):
                loop.run_until_complete(_claim(fast, "c"))
            assert (fast.stats().open, fast.stats().idle) == (0, 0)
            assert loop.run_until_complete(_claim(fast, "c"))
        finally:
            loop.close()
        assert store.get_execution("c") is not None


def _terminate_all(url: str, name: str, expected: int) -> None:
    assert terminate(url, name) == expected


def test_a_read_on_a_connection_whose_backend_ended_runs_again_on_a_new_one(
    migrated: str,
) -> None:
    with _store(migrated, pool_size=1, async_pool_size=1) as (store, name):
        assert store.get_execution("k") is None  # the pool now holds one connection
        _terminate_all(migrated, name, 1)

        assert store.get_execution("k") is None
        assert backends(migrated, name) == 1


def test_a_waiter_cancelled_just_after_its_grant_hands_the_connection_back(
    migrated: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _store(migrated, pool_size=1, async_pool_size=1) as (store, name):
        fast = _fast(store)
        tasks: list[asyncio.Task[bool]] = []
        grant = fast._grant

        def grant_then_cancel(waiter: Any, granted: Any) -> None:
            grant(waiter, granted)
            tasks[0].cancel()  # before the waiter's task runs again

        monkeypatch.setattr(fast, "_grant", grant_then_cancel)

        async def scenario() -> bool:
            with executions_locked(migrated):
                held = asyncio.create_task(_claim(fast, "held"))
                await until_async(
                    lambda: backends(migrated, name, waiting_on_lock=True) == 1,
                    "the one connection blocked in its claim",
                )
                tasks.append(asyncio.create_task(_claim(fast, "granted-then-gone")))
                await until_async(lambda: fast.stats().waiting == 1, "a claim waits")
            assert await asyncio.wait_for(held, WAIT_S)
            with pytest.raises(asyncio.CancelledError):
                await tasks[0]
            assert (fast.stats().open, fast.stats().idle, fast.stats().waiting) == (1, 1, 0)
            return await _claim(fast, "after")

        assert asyncio.run(scenario())
        assert store.get_execution("granted-then-gone") is None


def test_a_claim_cancelled_while_connecting_gives_its_slot_back() -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()  # accepts at the TCP level, never answers the startup message
    port = silent.getsockname()[1]
    fast = AsyncExecutions(
        f"postgresql://nobody@127.0.0.1:{port}/none",
        options="",
        max_connections=1,
        timeout=WAIT_S,
        application_name=app_name(),
    )

    async def scenario() -> None:
        connecting = asyncio.create_task(_claim(fast, "k"))
        await until_async(lambda: fast.stats().open == 1, "the claim took the one slot")
        connecting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await connecting
        assert fast.stats().open == 0

    try:
        asyncio.run(scenario())
    finally:
        fast.close()
        silent.close()
