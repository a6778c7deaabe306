"""Retries of transient failures: exponential backoff with full jitter, never past a deadline.

Built on tenacity's retry loop; what Handrail adds is the policy: the caller decides
which failures are retryable (only TRANSIENT and RATE_LIMITED ones of reads and
declared-idempotent writes are), a failure's own `retry_after` is a floor for the
wait, and a retry whose wait would end past the call's deadline is not attempted.
Time, sleep and randomness are injected, so tests neither wait nor guess.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import tenacity

from handrail.clock import Clock
from handrail.spec import RetryPolicy

__all__ = ["Sleep", "retrying"]

T = TypeVar("T")

Sleep = Callable[[float], Awaitable[None]]


def _retry_after(exc: BaseException | None) -> float:
    hint = getattr(exc, "retry_after", None)
    return float(hint) if isinstance(hint, int | float) and hint > 0 else 0.0


async def retrying(
    attempt: Callable[[int], Awaitable[T]],
    *,
    policy: RetryPolicy,
    retryable: Callable[[BaseException], bool],
    deadline: float,
    clock: Clock,
    sleep: Sleep = asyncio.sleep,
    rng: random.Random | None = None,
) -> T:
    """Await `attempt(n)` for n = 1, 2, ... until it returns, or re-raise its last error.

    An error is retried only when `retryable(error)` is true, fewer than
    `policy.max_attempts` attempts were made, and the wait (backoff with full jitter,
    at least the error's `retry_after`) ends before `deadline` on `clock`'s monotonic
    scale.
    """
    if policy.max_attempts == 1:
        return await attempt(1)
    jitter = rng or random.Random()  # noqa: S311 - jitter, not secrecy

    def wait(state: tenacity.RetryCallState) -> float:
        ceiling = min(policy.max_backoff, policy.initial_backoff * 2 ** (state.attempt_number - 1))
        error = state.outcome.exception() if state.outcome is not None else None
        return max(jitter.uniform(0, ceiling), _retry_after(error))

    def stop(state: tenacity.RetryCallState) -> bool:
        if state.attempt_number >= policy.max_attempts:
            return True
        upcoming = state.upcoming_sleep or 0.0
        return clock.monotonic() + upcoming >= deadline

    loop = tenacity.AsyncRetrying(
        stop=stop,
        wait=wait,
        retry=tenacity.retry_if_exception(retryable),
        sleep=sleep,
        reraise=True,
    )
    async for trial in loop:
        with trial:
            return await attempt(trial.retry_state.attempt_number)
    raise AssertionError("unreachable: tenacity re-raises or returns")  # pragma: no cover
