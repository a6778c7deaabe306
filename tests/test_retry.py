"""Retries: only what the caller calls retryable, bounded in attempts and by the deadline."""

from __future__ import annotations

import random

import pytest

from handrail import RetryPolicy, ToolRetryable
from handrail.clock import FixedClock
from handrail.retry import retrying

pytestmark = pytest.mark.anyio


class _Flaky:
    def __init__(self, failures: list[BaseException]) -> None:
        self.failures = failures
        self.attempts: list[int] = []

    async def __call__(self, n: int) -> str:
        self.attempts.append(n)
        if self.failures:
            raise self.failures.pop(0)
        return f"ok after {n}"


class _Sleeper:
    def __init__(self, clock: FixedClock) -> None:
        self.clock = clock
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.clock.advance(seconds)


def _setup() -> tuple[FixedClock, _Sleeper]:
    clock = FixedClock()
    return clock, _Sleeper(clock)


async def test_transient_failures_are_retried_with_growing_jittered_waits() -> None:
    clock, sleep = _setup()
    flaky = _Flaky([ConnectionError(), ConnectionError(), ConnectionError()])
    policy = RetryPolicy(max_attempts=4, initial_backoff=0.1, max_backoff=0.25)
    result = await retrying(
        flaky,
        policy=policy,
        retryable=lambda exc: isinstance(exc, ConnectionError),
        deadline=clock.monotonic() + 60,
        clock=clock,
        sleep=sleep,
        rng=random.Random(7),  # noqa: S311 - jitter in a test
    )
    assert result == "ok after 4"
    assert flaky.attempts == [1, 2, 3, 4]
    ceilings = [0.1, 0.2, 0.25]
    assert all(0 <= w <= c for w, c in zip(sleep.waits, ceilings, strict=True))


async def test_attempts_are_bounded_and_the_last_error_is_raised() -> None:
    clock, sleep = _setup()
    flaky = _Flaky([ConnectionError("1"), ConnectionError("2"), ConnectionError("3")])
    with pytest.raises(ConnectionError, match="2"):
        await retrying(
            flaky,
            policy=RetryPolicy(max_attempts=2),
            retryable=lambda _exc: True,
            deadline=clock.monotonic() + 60,
            clock=clock,
            sleep=sleep,
        )
    assert flaky.attempts == [1, 2]


async def test_non_retryable_failures_are_raised_at_once() -> None:
    clock, sleep = _setup()
    flaky = _Flaky([ValueError("bug")])
    with pytest.raises(ValueError, match="bug"):
        await retrying(
            flaky,
            policy=RetryPolicy(max_attempts=5),
            retryable=lambda exc: isinstance(exc, ConnectionError),
            deadline=clock.monotonic() + 60,
            clock=clock,
            sleep=sleep,
        )
    assert flaky.attempts == [1]
    assert sleep.waits == []


async def test_retry_after_is_a_floor_and_no_wait_runs_past_the_deadline() -> None:
    clock, sleep = _setup()
    flaky = _Flaky([ToolRetryable("busy", retry_after=2.0), ToolRetryable("busy", retry_after=2.0)])
    with pytest.raises(ToolRetryable):
        await retrying(
            flaky,
            policy=RetryPolicy(max_attempts=5, initial_backoff=0.01, max_backoff=0.02),
            retryable=lambda exc: isinstance(exc, ToolRetryable),
            deadline=clock.monotonic() + 3.0,
            clock=clock,
            sleep=sleep,
        )
    # One wait of at least 2 s fits in 3 s; a second would end past the deadline.
    assert flaky.attempts == [1, 2]
    assert len(sleep.waits) == 1
    assert sleep.waits[0] >= 2.0


async def test_a_single_attempt_policy_calls_once_without_the_retry_loop() -> None:
    clock, sleep = _setup()
    flaky = _Flaky([ConnectionError()])
    with pytest.raises(ConnectionError):
        await retrying(
            flaky,
            policy=RetryPolicy(),
            retryable=lambda _exc: True,
            deadline=clock.monotonic() + 60,
            clock=clock,
            sleep=sleep,
        )
    assert flaky.attempts == [1]
