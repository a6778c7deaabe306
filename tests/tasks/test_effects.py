"""A task's external write goes through the execution record: once across retries and
recovery, OUTCOME_UNKNOWN (never run again) when its outcome is unproven."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from _task_world import ALICE, TaskWorld, task_world
from handrail.errors import ErrorCode, StoreError, ToolFailed, ToolRetryable
from handrail.execution import ExecutionStatus
from handrail.store import MemoryStore
from handrail.tasking import TaskScope, TaskState
from handrail.tasks._effects import effect_key

pytestmark = pytest.mark.anyio


async def _run(world: TaskWorld, body: Any) -> str:  # a TaskBody
    world.runner._bodies["summarise"] = body
    await world.runner.start()
    envelope = await world.call("summarise", '{"rows": 1}')
    await world.runner.drain()
    return str(envelope.data["task_id"])


async def test_an_effect_runs_once_even_when_a_later_step_makes_the_task_retry() -> None:
    world = task_world(MemoryStore())
    effects: list[int] = []

    async def upload() -> dict[str, int]:
        effects.append(1)
        return {"n": len(effects)}

    async def body(_arguments: Mapping[str, Any], scope: TaskScope) -> Any:
        sent = await scope.effect("upload", upload)
        if scope.attempt == 1:
            raise ToolRetryable("the mail server is busy")
        return sent

    task_id = await _run(world, body)
    status = await world.service.status(task_id, ALICE)
    assert status["state"] == "succeeded"
    assert status["result"] == {"n": 1}
    assert effects == [1]
    record = world.store.get_execution(effect_key(task_id, "upload"))
    assert record is not None
    assert record.status is ExecutionStatus.SUCCEEDED


@pytest.mark.invariant(6)
async def test_an_effect_whose_response_was_lost_is_unknown_and_never_run_again() -> None:
    world = task_world(MemoryStore())
    calls: list[str] = []

    async def upload() -> None:
        calls.append("upload")
        raise TimeoutError  # the response was lost: the write may have happened

    async def body(_arguments: Mapping[str, Any], scope: TaskScope) -> None:
        await scope.effect("upload", upload)

    task_id = await _run(world, body)
    record = await world.records.get(task_id, ALICE)
    assert record.state is TaskState.FAILED
    assert record.error_code == ErrorCode.OUTCOME_UNKNOWN
    assert calls == ["upload"]


async def test_a_declared_failure_of_an_effect_fails_the_task_with_its_code() -> None:
    world = task_world(MemoryStore())

    async def upload() -> None:
        raise ToolFailed("the archive refused the file")

    async def body(_arguments: Mapping[str, Any], scope: TaskScope) -> None:
        await scope.effect("upload", upload)

    task_id = await _run(world, body)
    record = await world.records.get(task_id, ALICE)
    assert record.state is TaskState.FAILED
    assert record.error_code == ErrorCode.FAILED_FINAL


class _FlakyExecutions(MemoryStore):
    """A store whose first execution insert fails: nothing ran, so the effect may retry."""

    failures = 1

    def insert_execution(self, record: Any, **kwargs: Any) -> Any:
        if self.failures:
            self.failures -= 1
            raise StoreError("the database is restarting")
        return super().insert_execution(record, **kwargs)


async def test_an_effect_that_could_not_start_is_retried_and_runs_once() -> None:
    world = task_world(_FlakyExecutions())
    effects: list[int] = []

    async def upload() -> str:
        effects.append(1)
        return "sent"

    async def body(_arguments: Mapping[str, Any], scope: TaskScope) -> Any:
        return await scope.effect("upload", upload)

    task_id = await _run(world, body)
    record = await world.records.get(task_id, ALICE)
    assert record.state is TaskState.SUCCEEDED
    assert record.attempts == 2
    assert effects == [1]
