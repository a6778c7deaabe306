"""Task tools through the gate: checked, submitted once per intent, answered QUEUED, run later.

Every test runs on each store (memory, SQLite, PostgreSQL).
"""

from __future__ import annotations

import json

import pytest

from _task_world import ALICE, BOB, TaskWorld, task_world
from handrail import ErrorCode, Status, Store
from handrail.spec import TaskMode
from handrail.tasking import TaskState

pytestmark = pytest.mark.anyio

DEDUPE = TaskMode().dedupe_seconds


@pytest.fixture
async def world(store: Store) -> TaskWorld:
    made = task_world(store)
    await made.runner.start()
    return made


async def test_a_read_task_is_answered_queued_with_its_id_and_estimate(world: TaskWorld) -> None:
    envelope = await world.call("summarise", '{"rows": 3}')
    assert envelope.status is Status.OK
    assert envelope.data["state"] == "queued"
    assert envelope.data["estimate_seconds"] == 30.0
    assert envelope.data["check_with"] == "get_task_status"
    world.gauge.release.set()
    await world.runner.drain()
    status = await world.call("get_task_status", f'{{"task_id": "{envelope.data["task_id"]}"}}')
    assert status.data["state"] == "succeeded"
    assert status.data["result"] == {"rows": 3, "data": [0, 1, 2]}
    assert status.data["progress"] == 1.0


async def test_the_same_read_intent_twice_is_one_task(world: TaskWorld) -> None:
    first = await world.call("summarise", '{"rows": 2}')
    second = await world.call("summarise", '{"rows": 2}')
    other_user = await world.call("summarise", '{"rows": 2}', BOB)
    assert first.data["task_id"] == second.data["task_id"]
    assert other_user.data["task_id"] != first.data["task_id"]
    world.gauge.release.set()
    await world.runner.drain()
    assert world.gauge.steps["count"] == 2  # alice's one task and bob's
    assert len(await world.service.list(ALICE)) == 2


async def test_a_task_write_is_planned_confirmed_and_its_repeat_answers_the_same_task(
    world: TaskWorld,
) -> None:
    plan_id = await world.confirmed_write('{"region": "eu"}')
    first = await world.writes.execute_plan(plan_id, ALICE)
    again = await world.writes.execute_plan(plan_id, ALICE)
    assert first.ok
    assert first.envelope.data["state"] == "queued"
    assert again.replayed
    assert again.envelope.data["task_id"] == first.envelope.data["task_id"]
    world.gauge.release.set()
    await world.runner.drain()
    assert world.gauge.effects["upload"] == 1
    status = await world.service.status(str(first.envelope.data["task_id"]), ALICE)
    assert status["state"] == "succeeded"
    assert status["result"] == {"sent": {"archive_id": "arc-eu"}}


async def test_an_unconfirmed_task_write_is_only_a_plan(world: TaskWorld) -> None:
    envelope = await world.call("send_export", '{"region": "eu"}')
    assert envelope.error_type is ErrorCode.NEEDS_CONFIRMATION
    assert await world.service.list(ALICE) == []


async def test_invalid_arguments_are_refused_before_any_task_exists(world: TaskWorld) -> None:
    envelope = await world.call("summarise", '{"rows": "many"}')
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert await world.service.list(ALICE) == []


async def test_a_large_result_goes_to_the_raw_store_by_reference(world: TaskWorld) -> None:
    envelope = await world.call("summarise", '{"rows": 2000}')
    world.gauge.release.set()
    await world.runner.drain()
    status = await world.service.status(str(envelope.data["task_id"]), ALICE)
    assert status["state"] == "succeeded"
    assert "result" not in status
    assert "result_ref" not in status
    task_id = str(envelope.data["task_id"])
    record = await world.records.get(task_id, ALICE)
    assert record.result is None
    assert record.result_ref is not None
    assert world.store.get_raw(record.result_ref) is not None
    whole = json.loads(await world.service.download(task_id, ALICE))
    assert len(whole["data"]) == 2000


async def test_a_listing_and_status_are_described_alike(world: TaskWorld) -> None:
    envelope = await world.call("summarise", '{"rows": 1}')
    world.gauge.release.set()
    await world.runner.drain()
    listed = await world.service.list(ALICE, state=TaskState.SUCCEEDED)
    status = await world.service.status(str(envelope.data["task_id"]), ALICE)
    assert listed == [status]
    assert await world.service.list(ALICE, state=TaskState.QUEUED) == []


async def test_a_running_read_answers_its_task_even_past_the_dedupe_window(
    world: TaskWorld,
) -> None:
    first = await world.call("summarise", '{"rows": 2}')
    await world.gauge.started.wait()
    world.clock.advance(DEDUPE + 60)
    again = await world.call("summarise", '{"rows": 2}')
    assert again.data["task_id"] == first.data["task_id"]
    assert again.data["state"] == "running"
    world.gauge.release.set()
    await world.runner.drain()
    assert world.gauge.steps["count"] == 1


async def test_a_finished_read_answers_its_task_within_the_dedupe_window(
    world: TaskWorld,
) -> None:
    first = await world.call("summarise", '{"rows": 2}')
    world.gauge.release.set()
    await world.runner.drain()
    world.clock.advance(DEDUPE - 1)
    again = await world.call("summarise", '{"rows": 2}')
    assert again.data["task_id"] == first.data["task_id"]
    assert again.data["state"] == "succeeded"
    assert world.gauge.steps["count"] == 1


async def test_a_cancelled_read_asked_again_within_the_window_is_a_new_try(
    world: TaskWorld,
) -> None:
    first = await world.call("summarise", '{"rows": 2}')
    await world.service.cancel(str(first.data["task_id"]), ALICE)
    world.gauge.release.set()
    await world.runner.drain()
    cancelled = await world.service.status(str(first.data["task_id"]), ALICE)
    assert cancelled["state"] == "cancelled"
    again = await world.call("summarise", '{"rows": 2}')
    assert again.data["task_id"] != first.data["task_id"]
    assert again.data["state"] == "queued"
    await world.runner.drain()
    renewed = await world.service.status(str(again.data["task_id"]), ALICE)
    assert renewed["state"] == "succeeded"


async def test_a_finished_read_asked_after_its_window_is_a_new_task(world: TaskWorld) -> None:
    world.gauge.release.set()
    first = await world.call("summarise", '{"rows": 2}')
    await world.runner.drain()
    world.clock.advance(DEDUPE)
    second = await world.call("summarise", '{"rows": 2}')
    third = await world.call("summarise", '{"rows": 2}')
    assert second.data["task_id"] != first.data["task_id"]
    assert second.data["state"] == "queued"
    assert third.data["task_id"] == second.data["task_id"]
    await world.runner.drain()
    assert world.gauge.steps["count"] == 2
    old = await world.call("get_task_status", json.dumps({"task_id": first.data["task_id"]}))
    new = await world.call("get_task_status", json.dumps({"task_id": second.data["task_id"]}))
    assert (old.data["state"], new.data["state"]) == ("succeeded", "succeeded")
    assert old.data["created_at"] < new.data["created_at"]
    latest = await world.records.latest(
        (await world.records.get(new.data["task_id"], ALICE)).intent_key
    )
    assert latest is not None
    assert (latest.task_id, latest.generation) == (second.data["task_id"], 1)


async def test_without_a_window_a_read_is_one_task_only_while_active(store: Store) -> None:
    world = task_world(store, mode=TaskMode(queue="reports", dedupe_seconds=0))
    await world.runner.start()
    first = await world.call("summarise", '{"rows": 1}')
    running = await world.call("summarise", '{"rows": 1}')
    world.gauge.release.set()
    await world.runner.drain()
    after = await world.call("summarise", '{"rows": 1}')
    assert running.data["task_id"] == first.data["task_id"]
    assert after.data["task_id"] != first.data["task_id"]
    await world.runner.drain()
    assert world.gauge.steps["count"] == 2


async def test_an_expired_read_is_asked_again_as_a_new_task(store: Store) -> None:
    mode = TaskMode(queue="reports", expires_after_seconds=60, dedupe_seconds=0)
    world = task_world(store, mode=mode)
    first = await world.call("summarise", '{"rows": 1}')  # never runs: no runner started
    world.clock.advance(60)
    again = await world.call("summarise", '{"rows": 1}')
    assert again.data["task_id"] != first.data["task_id"]
