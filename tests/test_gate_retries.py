"""Reads that fail transiently are retried inside the call's deadline; nothing else is."""

from __future__ import annotations

import asyncio

import pytest

from handrail import (
    ErrorCode,
    Gate,
    Principal,
    RateLimited,
    Registry,
    RetryPolicy,
    RiskLevel,
    Status,
    ToolCall,
    ToolFailed,
    tool,
)
from handrail.testing import FixedClock

pytestmark = pytest.mark.anyio
ALICE = Principal(user_id="alice", tenant_id="t1")


def _gate(
    failures: list[BaseException], *, attempts: int = 3
) -> tuple[Gate, list[int], list[float]]:
    calls: list[int] = []
    waits: list[float] = []
    clock = FixedClock()

    @tool(risk=RiskLevel.L1_INTERNAL_READ, retry=RetryPolicy(max_attempts=attempts), timeout=30)
    async def lookup() -> str:
        """Look something up."""
        calls.append(1)
        if failures:
            raise failures.pop(0)
        return "found"

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        clock.advance(seconds)
        await asyncio.sleep(0)

    registry = Registry()
    registry.register(lookup)
    return Gate(registry, clock=clock, sleep=sleep), calls, waits


CALL = ToolCall(id="c", name="lookup", arguments="{}")


async def test_transient_and_rate_limited_reads_are_retried() -> None:
    gate, calls, waits = _gate([ConnectionError("reset"), RateLimited("slow down", retry_after=2)])
    envelope = await gate.handle(CALL, ALICE)
    assert (envelope.status, envelope.data) == (Status.OK, "found")
    assert len(calls) == 3
    assert len(waits) == 2
    assert waits[1] >= 2


async def test_attempts_are_bounded_and_the_last_failure_is_reported() -> None:
    gate, calls, _ = _gate([ConnectionError(), ConnectionError(), ConnectionError()], attempts=2)
    envelope = await gate.handle(CALL, ALICE)
    assert envelope.error_type is ErrorCode.TRANSIENT
    assert envelope.retryable
    assert len(calls) == 2


async def test_terminal_failures_are_not_retried() -> None:
    gate, calls, waits = _gate([ToolFailed("no such thing"), ToolFailed("again")])
    envelope = await gate.handle(CALL, ALICE)
    assert envelope.error_type is ErrorCode.FAILED_FINAL
    assert (len(calls), waits) == (1, [])


async def test_no_retry_waits_past_the_deadline() -> None:
    gate, calls, _ = _gate([RateLimited("later", retry_after=60), ConnectionError()])
    envelope = await gate.handle(CALL, ALICE, timeout=10)
    assert envelope.error_type is ErrorCode.RATE_LIMITED
    assert envelope.retry_after == 60
    assert len(calls) == 1
