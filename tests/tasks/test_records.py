"""TaskRecords: the moves runners report, tenant-scoped reads and cancellation, clean messages."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from _task_world import ALICE, BOB, TaskWorld, task_world
from handrail.errors import AccessRefusedError, ErrorCode
from handrail.principal import Principal
from handrail.store import MemoryStore
from handrail.tasking import TaskState
from handrail.tasks.records import TASK_MANAGE_PERMISSION, clean_message
from handrail.tasks.runner import TaskCancelled, TaskExpired, TaskFailure

pytestmark = pytest.mark.anyio


async def _queued(world: TaskWorld) -> str:
    envelope = await world.call("summarise", '{"rows": 1}')
    return str(envelope.data["task_id"])


def test_a_message_is_one_printable_line_of_at_most_200_characters() -> None:
    assert clean_message(None) is None
    assert clean_message("  \n\t ") is None
    assert clean_message("a\nb\x1b[31mc\u202ed\u200be") == "a b [31mc d e"
    assert clean_message("x" * 500) == "x" * 200


async def test_begin_then_checkpoint_then_progress_are_recorded_as_heartbeats() -> None:
    world = task_world(MemoryStore())
    task_id = await _queued(world)
    assert await world.records.begin(task_id, attempt=1, worker="w9")
    world.clock.advance(5)
    await world.records.progress(task_id, 7.0, "almost", worker="w9")
    record = await world.records.get(task_id, ALICE)
    assert (record.state, record.lease_holder, record.progress) == (TaskState.RUNNING, "w9", 1.0)
    assert record.heartbeat_at == world.clock.now()
    await world.records.progress(task_id, float("nan"), None, worker="w9")
    assert (await world.records.get(task_id, ALICE)).progress == 0.0


async def test_reports_after_the_end_change_nothing() -> None:
    world = task_world(MemoryStore())
    task_id = await _queued(world)
    await world.records.succeeded(task_id, {"rows": 1})
    ended = await world.records.get(task_id, ALICE)
    await world.records.failed(task_id, TaskFailure(code=ErrorCode.TRANSIENT, retryable=True))
    await world.records.cancelled(task_id)
    await world.records.expired(task_id)
    await world.records.succeeded(task_id, {"rows": 2})
    failure = TaskFailure(code=ErrorCode.TRANSIENT, retryable=True)
    await world.records.retrying(task_id, attempt=2, failure=failure, retry_at=world.clock.now())
    assert await world.records.get(task_id, ALICE) == ended
    assert not await world.records.begin(task_id, attempt=2, worker="w1")
    with pytest.raises(TaskCancelled):
        await world.records.checkpoint(task_id, worker="w1")


async def test_a_checkpoint_of_an_expired_or_missing_task_stops_it() -> None:
    world = task_world(MemoryStore())
    task_id = await _queued(world)
    assert await world.records.begin(task_id, attempt=1, worker="w1")
    world.clock.advance(timedelta(days=2).total_seconds())
    with pytest.raises(TaskExpired):
        await world.records.checkpoint(task_id, worker="w1")
    with pytest.raises(TaskCancelled):
        await world.records.checkpoint("task_" + "f" * 32, worker="w1")
    assert not await world.records.begin("task_" + "f" * 32, attempt=1, worker="w1")


async def test_only_the_owner_or_a_manager_cancels_and_twice_is_one_cancellation() -> None:
    world = task_world(MemoryStore())
    task_id = await _queued(world)
    with pytest.raises(AccessRefusedError) as refused:
        await world.service.cancel(task_id, BOB)
    assert refused.value.code is ErrorCode.PERMISSION_DENIED
    manager = Principal(
        user_id="mia", tenant_id="t1", permissions=frozenset({TASK_MANAGE_PERMISSION})
    )
    assert (await world.service.cancel(task_id, manager))["state"] == "cancelled"
    assert (await world.service.cancel(task_id, ALICE))["state"] == "cancelled"


async def test_an_effect_without_an_executor_is_refused() -> None:
    world = task_world(MemoryStore())
    world.records._effects = None
    task_id = await _queued(world)
    submission = world.journal.submissions[task_id]

    async def write() -> None:  # pragma: no cover - must not run
        raise AssertionError

    with pytest.raises(AccessRefusedError) as refused:
        await world.records.effect(submission, "upload", write)
    assert refused.value.code is ErrorCode.RISK_BLOCKED


async def test_without_a_raw_store_a_large_result_is_kept_whole() -> None:
    world = task_world(MemoryStore(), raw=False)
    await world.runner.start()
    envelope = await world.call("summarise", '{"rows": 2000}')
    world.gauge.release.set()
    await world.runner.drain()
    task_id = str(envelope.data["task_id"])
    status = await world.service.status(task_id, ALICE)
    assert len(status["result"]["data"]) == 2000
    assert json.loads(await world.service.download(task_id, ALICE)) == status["result"]


async def test_a_task_without_a_result_has_nothing_to_download() -> None:
    world = task_world(MemoryStore())
    task_id = await _queued(world)
    with pytest.raises(AccessRefusedError) as refused:
        await world.service.download(task_id, ALICE)
    assert refused.value.code is ErrorCode.NOT_FOUND


async def test_a_task_nobody_ran_before_its_expiry_reads_as_expired() -> None:
    world = task_world(MemoryStore())
    task_id = await _queued(world)
    world.clock.advance(timedelta(days=1).total_seconds())
    status = await world.service.status(task_id, ALICE)
    assert status["state"] == "expired"
    assert status["finished_at"] == world.clock.now().isoformat()
    await world.runner.start()
    await world.runner.drain()
    assert world.gauge.steps == {}


async def test_a_heartbeat_renews_only_the_holders_lease_of_a_running_task() -> None:
    world = task_world(MemoryStore())
    task_id = await _queued(world)
    assert not await world.records.heartbeat(task_id, worker="w1")  # QUEUED: no lease
    assert not await world.records.heartbeat("t-missing", worker="w1")
    assert await world.records.begin(task_id, attempt=1, worker="w1")
    world.clock.advance(5)
    assert await world.records.heartbeat(task_id, worker="w1")
    assert not await world.records.heartbeat(task_id, worker="w2")
    record = await world.records.get(task_id, ALICE)
    assert (record.lease_holder, record.heartbeat_at) == ("w1", world.clock.now())


async def test_a_task_is_taken_over_only_once_its_holders_lease_ran_out() -> None:
    world = task_world(MemoryStore())
    task_id = await _queued(world)
    records = world.records
    assert await records.take_over(task_id, worker="w2", lease_seconds=10) is None  # QUEUED
    assert await records.begin(task_id, attempt=1, worker="w1")
    world.clock.advance(9)
    assert await records.take_over(task_id, worker="w2", lease_seconds=10) is None  # held
    world.clock.advance(1)
    assert await records.take_over(task_id, worker="w1", lease_seconds=10) is None  # its own
    assert await records.take_over(task_id, worker="w2", lease_seconds=10) == "w1"
    assert await records.take_over(task_id, worker="w3", lease_seconds=10) is None  # w2's now
    record = await records.get(task_id, ALICE)
    assert (record.lease_holder, record.heartbeat_at) == ("w2", world.clock.now())
    assert not await records.heartbeat(task_id, worker="w1")  # the old holder lost it
