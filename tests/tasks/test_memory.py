"""InMemoryTaskRunner: steps run once, recovery resumes after the last finished step,
cancel and expiry stop at a step boundary, transient errors retry with backoff, final ones
fail once, a queue's concurrency limit holds. Synchronised with events, never with time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pytest

from _task_world import ALICE, TaskWorld, task_world
from handrail.errors import ConfigurationError, ErrorCode, ToolFailed, ToolRetryable
from handrail.spec import TaskMode
from handrail.store import MemoryStore
from handrail.tasking import TaskScope, TaskState
from handrail.tasks.memory import InMemoryTaskRunner

pytestmark = pytest.mark.anyio


def _world(mode: TaskMode | None = None) -> TaskWorld:
    return task_world(MemoryStore(), mode=mode)


async def _submit(world: TaskWorld, rows: int = 2) -> str:
    envelope = await world.call("summarise", f'{{"rows": {rows}}}')
    return str(envelope.data["task_id"])


async def _state(world: TaskWorld, task_id: str) -> TaskState:
    return (await world.records.get(task_id, ALICE)).state


async def test_a_stopped_worker_is_recovered_after_its_last_finished_step() -> None:
    world = _world()
    await world.runner.start()
    task_id = await _submit(world)
    await world.gauge.started.wait()  # inside "load": "count" is checkpointed
    await world.runner.stop()
    assert await _state(world, task_id) is TaskState.RUNNING
    second = world.second_runner()
    world.gauge.release.set()
    await second.start()
    await second.drain()
    record = await world.records.get(task_id, ALICE)
    assert record.state is TaskState.SUCCEEDED
    assert world.gauge.steps == {"count": 1, "load": 2, "finish": 1}
    assert record.attempts == 2


async def test_cancel_while_running_stops_at_the_next_step_and_runs_no_later_step() -> None:
    world = _world()
    await world.runner.start()
    task_id = await _submit(world)
    await world.gauge.started.wait()
    status = await world.service.cancel(task_id, ALICE)
    assert status["state"] == "running"
    world.gauge.release.set()
    await world.runner.drain()
    record = await world.records.get(task_id, ALICE)
    assert record.state is TaskState.CANCELLED
    assert record.result is None
    assert world.gauge.steps == {"count": 1, "load": 1}


async def test_a_cancel_through_the_runner_alone_is_noticed_at_the_next_step() -> None:
    world = _world()
    await world.runner.start()
    world.gauge.release.set()
    world.gauge.message = "half"

    async def body(_arguments: Mapping[str, Any], scope: TaskScope) -> None:
        await scope.step("one", _nothing)
        await world.runner.cancel(scope.task_id)
        await scope.step("two", _never)

    task_id = await _submit_body(world, body)
    await world.runner.drain()
    assert await _state(world, task_id) is TaskState.CANCELLED


async def _nothing() -> None:
    return None


async def _never() -> None:  # pragma: no cover - a step that must not run
    raise AssertionError


async def _submit_body(world: TaskWorld, body: Any) -> str:
    world.runner._bodies["summarise"] = body
    return await _submit(world)


async def test_cancel_of_a_queued_task_means_it_never_runs() -> None:
    world = _world()
    task_id = await _submit(world)
    status = await world.service.cancel(task_id, ALICE)
    assert status["state"] == "cancelled"
    await world.runner.start()
    await world.runner.drain()
    assert world.gauge.steps == {}
    assert await _state(world, task_id) is TaskState.CANCELLED


async def test_an_expired_task_stops_at_its_next_step() -> None:
    world = _world(TaskMode(queue="reports", expires_after_seconds=60))
    await world.runner.start()
    task_id = await _submit(world)
    await world.gauge.started.wait()
    world.clock.advance(61)
    world.gauge.release.set()
    await world.runner.drain()
    record = await world.records.get(task_id, ALICE)
    assert record.state is TaskState.EXPIRED
    assert record.result is None


async def test_a_task_expired_before_it_starts_never_runs() -> None:
    world = _world(TaskMode(queue="reports", expires_after_seconds=60))
    task_id = await _submit(world)
    world.clock.advance(61)
    await world.runner.start()
    await world.runner.drain()
    assert world.gauge.steps == {}
    assert await _state(world, task_id) is TaskState.EXPIRED


async def test_a_transient_error_is_retried_with_backoff_and_then_succeeds() -> None:
    world = _world(TaskMode(queue="reports", backoff_seconds=2, max_backoff_seconds=3))
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    world.runner._sleep = sleep
    world.gauge.transient_failures = 2
    world.gauge.release.set()
    await world.runner.start()
    task_id = await _submit(world)
    await world.runner.drain()
    record = await world.records.get(task_id, ALICE)
    assert record.state is TaskState.SUCCEEDED
    assert record.attempts == 3
    assert waits == [2.0, 3.0]
    assert world.gauge.steps == {"count": 1, "load": 3, "finish": 1}


async def test_transient_errors_past_the_last_attempt_fail_once() -> None:
    world = _world(TaskMode(queue="reports", max_attempts=2))
    world.gauge.transient_failures = 5
    world.gauge.release.set()
    await world.runner.start()
    task_id = await _submit(world)
    await world.runner.drain()
    record = await world.records.get(task_id, ALICE)
    assert record.state is TaskState.FAILED
    assert record.error_code == ErrorCode.TRANSIENT
    assert world.gauge.steps["load"] == 2


@pytest.mark.parametrize(
    ("raised", "message"),
    [
        (ToolFailed("the region has no orders"), "the region has no orders"),
        (RuntimeError("/etc/secret path"), None),  # undeclared: its text is never kept
    ],
)
async def test_a_final_error_fails_at_once_with_its_code(
    raised: Exception, message: str | None
) -> None:
    world = _world()

    async def body(_arguments: Mapping[str, Any], _scope: TaskScope) -> None:
        raise raised

    await world.runner.start()
    task_id = await _submit_body(world, body)
    await world.runner.drain()
    record = await world.records.get(task_id, ALICE)
    assert record.state is TaskState.FAILED
    assert record.attempts == 1
    assert record.error_code == ErrorCode.FAILED_FINAL
    assert record.error_message == message


async def test_a_queues_concurrency_limit_holds() -> None:
    world = _world()
    runner = InMemoryTaskRunner(world.records, clock=world.clock, concurrency={"reports": 1})
    running = 0
    most = 0
    gates = [asyncio.Event() for _ in range(3)]
    entered = asyncio.Queue[int]()

    async def body(arguments: Mapping[str, Any], _scope: TaskScope) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await entered.put(int(arguments["rows"]))
        await gates[int(arguments["rows"])].wait()
        running -= 1

    runner.register("summarise", body)
    world.runner = runner
    world.service._runner = runner
    await runner.start()
    ids = [await _submit(world, rows) for rows in range(3)]
    for _ in ids:
        index = await entered.get()
        assert running == 1
        gates[index].set()
    await runner.drain()
    assert most == 1


async def test_submitting_an_id_twice_is_one_task_and_bodies_register_once() -> None:
    world = _world()
    task_id = await _submit(world)
    submission = world.journal.submissions[task_id]
    assert not await world.runner.submit(submission)
    with pytest.raises(ConfigurationError):
        world.runner.register("summarise", world.runner._bodies["summarise"])
    other = InMemoryTaskRunner(world.records, clock=world.clock)
    with pytest.raises(ConfigurationError):
        await other.submit(submission)
    assert not await world.runner.cancel("task_" + "0" * 32)


async def test_a_step_name_used_twice_in_one_task_fails_it() -> None:
    world = _world()

    async def body(_arguments: Mapping[str, Any], scope: TaskScope) -> None:
        await scope.step("same", _nothing)
        await scope.step("same", _nothing)

    await world.runner.start()
    task_id = await _submit_body(world, body)
    await world.runner.drain()
    assert await _state(world, task_id) is TaskState.FAILED


async def test_a_retry_waits_at_least_what_the_tool_asked() -> None:
    world = _world(TaskMode(queue="reports", backoff_seconds=1, max_backoff_seconds=2))
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    async def body(_arguments: Mapping[str, Any], scope: TaskScope) -> str:
        if scope.attempt == 1:
            raise ToolRetryable("later", retry_after=30)
        return "ok"

    world.runner._sleep = sleep
    await world.runner.start()
    task_id = await _submit_body(world, body)
    await world.runner.drain()
    record = await world.records.get(task_id, ALICE)
    assert waits == [30.0]
    assert record.state is TaskState.SUCCEEDED
    assert record.started_at is not None
    assert record.finished_at == world.clock.now()
    assert record.expires_at - record.created_at == timedelta(days=1)
