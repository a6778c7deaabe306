"""Quotas hold under concurrency: many tasks, many limiter instances, many processes.

Every scenario uses hour-long windows, so nothing expires while it runs and the counts
are exact. The Redis scenarios skip when no Redis answers at 127.0.0.1:6379, except
under CI=true, where that is a failure.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import queue
import time
from collections.abc import Callable
from multiprocessing.synchronize import Barrier

import anyio
import anyio.to_thread
import pytest

from handrail import Principal, RiskLevel, SideEffect, ToolSpec
from handrail.authz.quota import Quota, QuotaPolicy, Rate, RateLimiter

REDIS_HOST = "127.0.0.1"
REDIS_PORT = 6379
HOUR = 3600
BOUND = 10.0
"""Seconds any wait in these tests may take before the test fails."""
START_BOUND = 300.0
"""Seconds a spawned worker may take to start (a fresh interpreter importing Handrail is
slow on a loaded machine); a worker that dies fails the test at once, not at this bound."""

MakeLimiter = Callable[[QuotaPolicy], RateLimiter]

SPEC = ToolSpec(
    name="shop.search",
    description="A tool that reads.",
    input_schema={"type": "object"},
    schema_version="1",
    description_version="1",
    risk=RiskLevel.L1_INTERNAL_READ,
    side_effect=SideEffect.NONE,
)
ALICE = Principal(user_id="alice", tenant_id="t1")
BOB = Principal(user_id="bob", tenant_id="t1")

# Alice may make 50 calls an hour; the tenant and the tool have room to spare, so every
# refusal comes from Alice's own bucket.
FIFTY_FOR_ALICE = QuotaPolicy(
    default=Quota(
        per_principal=(Rate(amount=50, seconds=HOUR),),
        per_tenant=(Rate(amount=60, seconds=HOUR),),
    ),
    tools={"shop.search": Quota(per_tool=(Rate(amount=1000, seconds=HOUR),))},
)


async def _allowed_concurrently(
    calls: list[tuple[RateLimiter, Principal]],
) -> list[Principal]:
    """Runs every acquire at once; returns the principals of those that were allowed."""
    async with asyncio.timeout(BOUND):
        outcomes = await asyncio.gather(*(limiter.acquire(who, SPEC) for limiter, who in calls))
    assert all(wait is None or wait >= 1 for wait in outcomes)
    return [who for (_, who), wait in zip(calls, outcomes, strict=True) if wait is None]


@pytest.mark.anyio
async def test_two_hundred_concurrent_calls_against_a_limit_of_fifty_let_exactly_fifty_through(
    make_limiter: MakeLimiter,
) -> None:
    limiter = make_limiter(FIFTY_FOR_ALICE)
    allowed = await _allowed_concurrently([(limiter, ALICE)] * 200)
    assert len(allowed) == 50
    # The 150 refused calls spent nothing in the tenant's bucket: Bob gets its last ten.
    assert len(await _allowed_concurrently([(limiter, BOB)] * 20)) == 10


@pytest.mark.anyio
async def test_users_racing_for_a_shared_tenant_limit_fill_it_exactly_and_no_more(
    make_limiter: MakeLimiter,
) -> None:
    # Each user's own bucket (30) is taken before the tenant's (50): a call that loses
    # the race for the tenant costs its user a unit, never the tenant.
    limiter = make_limiter(
        QuotaPolicy(
            default=Quota(
                per_principal=(Rate(amount=30, seconds=HOUR),),
                per_tenant=(Rate(amount=50, seconds=HOUR),),
            ),
        ),
    )
    allowed = await _allowed_concurrently([(limiter, ALICE), (limiter, BOB)] * 100)
    assert len(allowed) == 50
    assert allowed.count(ALICE) <= 30
    assert allowed.count(BOB) <= 30


@pytest.mark.anyio
async def test_several_redis_limiters_sharing_a_limit_let_exactly_that_many_through(
    redis_url: str,
    key_prefix: str,
) -> None:
    # Four service instances, each with its own connection pool, one set of buckets.
    instances = [
        RateLimiter.redis(redis_url, policy=FIFTY_FOR_ALICE, key_prefix=key_prefix)
        for _ in range(4)
    ]
    try:
        calls = [(instances[n % 4], ALICE) for n in range(200)]
        assert len(await _allowed_concurrently(calls)) == 50
        assert len(await _allowed_concurrently([(instances[0], BOB)] * 20)) == 10
    finally:
        for limiter in instances:
            await limiter.aclose()


def _acquire_in_a_process(
    url: str,
    prefix: str,
    calls: int,
    start: Barrier,
    results: multiprocessing.Queue[int],
) -> None:
    """One service instance in its own process: its own loop, limiter and connections."""

    async def run() -> int:
        limiter = RateLimiter.redis(url, policy=FIFTY_FOR_ALICE, key_prefix=prefix)
        try:
            # Connect before the barrier, so that the processes' calls really overlap.
            await limiter.acquire(Principal(user_id="warm-up", tenant_id="warm-up"), SPEC)
            start.wait(START_BOUND)
            outcomes = await asyncio.gather(*(limiter.acquire(ALICE, SPEC) for _ in range(calls)))
        finally:
            await limiter.aclose()
        return sum(wait is None for wait in outcomes)

    results.put(asyncio.run(run()))


def _next_result(
    results: multiprocessing.Queue[int], workers: list[multiprocessing.process.BaseProcess]
) -> int:
    """The next worker's count; fails as soon as a worker died without one, or at the bound."""
    deadline = time.monotonic() + START_BOUND
    while time.monotonic() < deadline:
        try:
            return results.get(timeout=0.5)
        except queue.Empty:
            dead = [w.exitcode for w in workers if not w.is_alive() and w.exitcode != 0]
            if dead:
                pytest.fail(f"a worker died without a result; exit codes {dead}")
    pytest.fail(f"a worker gave no result; exit codes {[w.exitcode for w in workers]}")


def _run_processes(url: str, prefix: str, processes: int, calls: int) -> list[int]:
    """Starts the workers together; returns how many calls each was allowed."""
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(processes)
    results: multiprocessing.Queue[int] = context.Queue()
    workers = [
        context.Process(target=_acquire_in_a_process, args=(url, prefix, calls, start, results))
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    try:
        allowed = [_next_result(results, workers) for _ in workers]
        for worker in workers:
            worker.join(BOUND)
    finally:
        for worker in workers:
            if worker.is_alive():
                worker.kill()
                worker.join(BOUND)
        results.close()
    assert [worker.exitcode for worker in workers] == [0] * processes
    return allowed


@pytest.mark.anyio
async def test_processes_sharing_a_limit_through_redis_let_exactly_that_many_through(
    redis_url: str,
    key_prefix: str,
) -> None:
    allowed = await anyio.to_thread.run_sync(_run_processes, redis_url, key_prefix, 2, 100)
    assert len(allowed) == 2
    assert sum(allowed) == 50
