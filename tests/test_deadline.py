from __future__ import annotations

import asyncio

import pytest

from handrail.deadline import DeadlineExceededError, within


async def _value(v: int) -> int:
    return v


async def _suspend_then(v: int) -> int:
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    return v


@pytest.mark.anyio
async def test_work_that_never_suspends_runs_without_a_timer() -> None:
    loop = asyncio.get_running_loop()
    before = len(loop._scheduled)  # type: ignore[attr-defined]
    assert await within(_value(3), 5) == 3
    assert len(loop._scheduled) == before  # type: ignore[attr-defined]


@pytest.mark.anyio
async def test_work_that_suspends_returns_its_value_and_leaves_the_task_uncancelled() -> None:
    assert await within(_suspend_then(4), 5) == 4
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0


@pytest.mark.anyio
async def test_work_past_its_deadline_is_cancelled_and_reported() -> None:
    cleaned = asyncio.Event()

    async def forever() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.set()

    with pytest.raises(DeadlineExceededError):
        await within(forever(), 0.02)
    assert cleaned.is_set()
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0


@pytest.mark.anyio
async def test_no_time_left_means_the_work_never_starts() -> None:
    started = False

    async def work() -> None:
        nonlocal started
        started = True

    with pytest.raises(DeadlineExceededError):
        await within(work(), 0)
    assert not started


@pytest.mark.anyio
async def test_an_exception_raised_by_the_work_passes_through() -> None:
    async def fails() -> None:
        await asyncio.sleep(0)
        raise KeyError("x")

    with pytest.raises(KeyError):
        await within(fails(), 5)


@pytest.mark.anyio
async def test_an_exception_delivered_to_an_awaited_future_reaches_the_work() -> None:
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def recovers() -> str:
        try:
            await future
        except ValueError:
            return "recovered"
        return "no"

    async def drive() -> str:
        return await within(recovers(), 5)

    task = asyncio.create_task(drive())
    await asyncio.sleep(0)
    future.set_exception(ValueError("io failed"))
    assert await asyncio.wait_for(task, timeout=5) == "recovered"


@pytest.mark.anyio
async def test_an_outside_cancellation_propagates_as_cancellation() -> None:
    started = asyncio.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    async def drive() -> None:
        await within(forever(), 60)

    task = asyncio.create_task(drive())
    await asyncio.wait_for(started.wait(), timeout=5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.anyio
async def test_work_that_swallows_the_deadline_cancellation_finishes_and_is_uncancelled() -> None:
    async def stubborn() -> str:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            return "swallowed"
        return "no"

    assert await within(stubborn(), 0.02) == "swallowed"
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0
    await asyncio.sleep(0)


@pytest.mark.anyio
async def test_an_outside_cancellation_at_the_deadline_wins_over_the_timeout() -> None:
    async def cancelled_from_outside_too() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            task = asyncio.current_task()
            assert task is not None
            task.cancel()  # a second, outside request arrives at the same moment
            raise

    async def drive() -> None:
        await within(cancelled_from_outside_too(), 0.02)

    with pytest.raises(asyncio.CancelledError):
        await asyncio.create_task(drive())


@pytest.mark.anyio
async def test_closing_a_suspended_deadline_closes_the_work() -> None:
    closed = False

    async def work() -> None:
        nonlocal closed
        try:
            await asyncio.sleep(0)
        finally:
            closed = True

    awaiting = within(work(), 5).__await__()
    next(awaiting)
    awaiting.close()
    assert closed
