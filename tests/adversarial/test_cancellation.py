"""Cancelling a turn: reads really stop (no orphan process), writes are left UNKNOWN.

The read tools here start a real process that would sleep for a minute, in its own
session, and kill its process group when cancelled; the write goes through the real
Gate and Writes stack on every store. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from _write_tools import ALICE, ARGS, Downstream, keyring, ticket_tool
from handrail import (
    ConfirmationMode,
    Envelope,
    ErrorCode,
    ExecutionStatus,
    Gate,
    IdempotencyMode,
    IdempotencyScope,
    Registry,
    RiskLevel,
    Store,
    ToolCall,
    Writes,
    tool,
)
from handrail.execution import command_key
from handrail.scheduler import CallPlan, TurnScheduler
from handrail.testing import FixedClock, sequential_ids

pytestmark = pytest.mark.anyio

_SLEEPER = "import time; time.sleep(60)"
_POLLS = 2_000
_POLL = 0.005


async def _until(condition: Callable[[], bool]) -> None:
    """Wait, bounded (about ten seconds), until `condition` holds."""
    for _ in range(_POLLS):
        if condition():
            return
        await asyncio.sleep(_POLL)
    pytest.fail("the condition never held")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


class Sleepers:
    """Starts a one-minute child process per call; kills its group when cancelled."""

    def __init__(self) -> None:
        self.pids: list[int] = []
        self.killed: list[int] = []

    async def sleep(self) -> str:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _SLEEPER,
            start_new_session=True,
        )
        self.pids.append(process.pid)
        try:
            await process.wait()
        except asyncio.CancelledError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
            self.killed.append(process.pid)
            raise
        return "woke up"  # pragma: no cover - cancelled long before a minute

    def assert_no_orphan(self) -> None:
        assert self.pids
        assert sorted(self.killed) == sorted(self.pids)
        for pid in self.pids:
            assert not _alive(pid)
            assert not _group_alive(pid)
            assert not Path(f"/proc/{pid}").exists()


def _plan(call_id: str, name: str, *, read_only: bool = True) -> CallPlan:
    return CallPlan(
        call=ToolCall(id=call_id, name=name, arguments="{}" if read_only else ARGS),
        read_only=read_only,
        tool=name,
    )


async def test_a_cancel_during_a_read_through_the_gate_kills_its_subprocess() -> None:
    sleepers = Sleepers()
    registry = Registry()

    @tool(risk=RiskLevel.L1_INTERNAL_READ, name="sleeper", timeout=120.0)
    async def sleeper() -> str:
        """Sleep in a child process."""
        return await sleepers.sleep()

    @tool(risk=RiskLevel.L1_INTERNAL_READ, name="quick")
    async def quick() -> str:
        """Answer at once."""
        return "here"

    registry.register(sleeper)
    registry.register(quick)
    clock = FixedClock()
    gate = Gate(registry, clock=clock)
    scheduler = TurnScheduler(clock=clock)
    deadline = clock.monotonic() + 100.0
    reported: list[tuple[str, bool]] = []

    async def execute(call: ToolCall, until: float) -> Envelope:
        return await gate.handle(call, ALICE, timeout=until - clock.monotonic())

    plans = [_plan("s1", "sleeper"), _plan("q", "quick"), _plan("s2", "sleeper")]
    turn = asyncio.create_task(
        scheduler.run(
            plans,
            execute,
            deadline=deadline,
            on_cancel=lambda plan, started: reported.append((plan.call.id, started)),
        )
    )
    await _until(lambda: len(sleepers.pids) == 2)
    assert all(_alive(pid) for pid in sleepers.pids)
    turn.cancel()
    with pytest.raises(asyncio.CancelledError):
        await turn
    sleepers.assert_no_orphan()
    assert reported == [("s1", True), ("s2", True)]


async def test_a_read_past_the_deadline_is_cancelled_and_its_subprocess_killed() -> None:
    sleepers = Sleepers()
    clock = FixedClock()

    async def execute(call: ToolCall, _deadline: float) -> Envelope:
        # A read that ignores its deadline: the scheduler's backstop must stop it.
        await sleepers.sleep()
        raise AssertionError(call.id)  # pragma: no cover

    scheduler = TurnScheduler(clock=clock, overrun_grace=0.05)
    [result] = await scheduler.run(
        [_plan("s", "sleeper")], execute, deadline=clock.monotonic() + 0.05
    )
    assert result.error_type is ErrorCode.TIMEOUT
    assert result.retryable
    sleepers.assert_no_orphan()


async def test_calls_queued_behind_a_cancelled_read_never_start() -> None:
    sleepers = Sleepers()
    started: list[str] = []

    async def execute(call: ToolCall, _deadline: float) -> Envelope:
        started.append(call.id)
        await sleepers.sleep()
        raise AssertionError(call.id)  # pragma: no cover

    clock = FixedClock()
    scheduler = TurnScheduler(clock=clock, max_concurrency=1)
    reported: list[tuple[str, bool]] = []
    plans = [_plan(f"s{i}", "sleeper") for i in range(3)]
    turn = asyncio.create_task(
        scheduler.run(
            plans,
            execute,
            deadline=clock.monotonic() + 100.0,
            on_cancel=lambda plan, was_started: reported.append((plan.call.id, was_started)),
        )
    )
    await _until(lambda: len(sleepers.pids) == 1)
    turn.cancel()
    with pytest.raises(asyncio.CancelledError):
        await turn
    for _ in range(10):
        await asyncio.sleep(0)
    assert started == ["s0"]
    assert reported == [("s0", True), ("s1", False), ("s2", False)]
    sleepers.assert_no_orphan()


async def test_a_read_that_ignores_its_cancellation_is_given_up_after_the_grace() -> None:
    entered = asyncio.Event()
    release = asyncio.Event()
    finished: list[str] = []

    async def execute(call: ToolCall, _deadline: float) -> Envelope:
        entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await release.wait()  # misbehaves: keeps going after the cancel
        finished.append(call.id)
        raise AssertionError(call.id)

    clock = FixedClock()
    scheduler = TurnScheduler(clock=clock, cancel_grace=0.01)
    turn = asyncio.create_task(
        scheduler.run([_plan("stubborn", "sleeper")], execute, deadline=clock.monotonic() + 100)
    )
    await asyncio.wait_for(entered.wait(), timeout=10)
    turn.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(turn, timeout=10)
    assert finished == []
    release.set()
    await _until(lambda: finished == ["stubborn"])


@pytest.mark.invariant(6)
async def test_a_cancel_during_a_write_leaves_its_record_unknown_for_the_reconciler(
    store: Store,
) -> None:
    downstream = Downstream()
    downstream.script.append("hang")
    downstream.release = asyncio.Event()
    registry = Registry()
    registry.register(
        ticket_tool(
            downstream,
            mode=ConfirmationMode.NONE,
            idempotency=IdempotencyMode.COMMAND_ID,
        )
    )
    reads: list[str] = []

    @tool(risk=RiskLevel.L1_INTERNAL_READ, name="peek")
    async def peek() -> str:
        """A quick read."""
        reads.append("peek")
        return "seen"

    registry.register(peek)
    clock = FixedClock()
    writes = Writes(
        registry,
        store,
        keyring(),
        clock=clock,
        worker_id="w1",
        new_id=sequential_ids("p"),
    )
    gate = Gate(registry, writes=writes, clock=clock)
    scheduler = TurnScheduler(clock=clock)

    async def execute(call: ToolCall, until: float) -> Envelope:
        return await gate.handle(
            call,
            ALICE,
            timeout=until - clock.monotonic(),
            command_id=f"cmd-{call.id}",
        )

    reported: list[tuple[str, bool]] = []
    plans = [
        _plan("before", "peek"),
        _plan("w", "create_ticket", read_only=False),
        _plan("after", "peek"),
    ]
    turn = asyncio.create_task(
        scheduler.run(
            plans,
            execute,
            deadline=clock.monotonic() + 100.0,
            on_cancel=lambda plan, started: reported.append((plan.call.id, started)),
        )
    )
    await _until(lambda: downstream.calls == 1)
    turn.cancel()
    with pytest.raises(asyncio.CancelledError):
        await turn
    key = command_key(
        tenant_id="t1",
        tool="create_ticket",
        command_id="cmd-w",
        user_id="alice",
        scope=IdempotencyScope.TENANT,
    )
    record = store.get_execution(key)
    assert record is not None
    assert record.status is ExecutionStatus.UNKNOWN
    assert record.next_check_at is not None
    assert reported == [("w", True), ("after", False)]
    assert reads == ["peek"]
    assert downstream.effects() == 0
