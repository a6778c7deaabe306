"""The edges of binding and submitting: what is refused, what a finished intent answers,
what a failed task says, and the runner's own cancellation before an attempt."""

from __future__ import annotations

from typing import Any

import pytest

from _task_world import ALICE, BOB, Gauge, summary_tool, task_world
from handrail import ErrorCode, Registry, ToolCall
from handrail.context import ToolContext
from handrail.declare.definition import Tool
from handrail.errors import ConfigurationError, RegistrationError, StoreError
from handrail.gate import Gate
from handrail.spec import RiskLevel, TaskMode
from handrail.store import MemoryStore
from handrail.tasking import TaskRecord, TaskState
from handrail.tasks.records import TaskRecords
from handrail.testing import FixedClock

pytestmark = pytest.mark.anyio


async def test_only_task_tools_bind_and_only_bound_tools_submit() -> None:
    world = task_world(MemoryStore())
    status_tool = world.registry.lookup("get_task_status", ALICE)
    assert status_tool is not None
    with pytest.raises(ConfigurationError):
        world.service.bind(status_tool)
    with pytest.raises(ConfigurationError):
        await world.service.submit("not_bound", {}, ALICE)
    assert world.service.records is world.records
    assert world.service.runner is world.runner
    assert world.records.store is world.store


async def test_an_unbound_task_tool_fails_closed_instead_of_running_inline() -> None:
    gauge = Gauge()
    registry = Registry()
    registry.register(summary_tool(gauge))
    envelope = await Gate(registry, clock=FixedClock()).handle(
        ToolCall(id="c1", name="summarise", arguments='{"rows": 1}'), ALICE
    )
    assert envelope.error_type is ErrorCode.FAILED_FINAL
    assert gauge.steps == {}


async def test_a_finished_intent_answers_its_task_without_submitting_again() -> None:
    world = task_world(MemoryStore())
    await world.runner.start()
    first = await world.call("summarise", '{"rows": 1}')
    world.gauge.release.set()
    await world.runner.drain()
    again = await world.call("summarise", '{"rows": 1}')
    assert again.data["task_id"] == first.data["task_id"]
    assert again.data["state"] == "succeeded"
    assert world.gauge.steps["count"] == 1


async def test_a_failed_task_says_its_code_and_another_user_may_not_cancel_it() -> None:
    world = task_world(MemoryStore())
    await world.runner.start()

    async def body(_arguments: Any, _scope: Any) -> None:
        raise KeyError

    world.runner._bodies["summarise"] = body
    envelope = await world.call("summarise", '{"rows": 1}')
    await world.runner.drain()
    task_id = str(envelope.data["task_id"])
    status = await world.call("get_task_status", f'{{"task_id": "{task_id}"}}')
    assert status.data["state"] == "failed"
    assert status.data["error_code"] == "FAILED_FINAL"
    assert status.data["error_message"] is None
    refused = await world.call("cancel_task", f'{{"task_id": "{task_id}"}}', BOB)
    assert refused.error_type is ErrorCode.PERMISSION_DENIED


async def test_a_task_the_runner_was_told_to_cancel_before_it_started_never_runs() -> None:
    world = task_world(MemoryStore())
    envelope = await world.call("summarise", '{"rows": 1}')
    task_id = str(envelope.data["task_id"])
    assert await world.runner.cancel(task_id)
    await world.runner.start()
    await world.runner.start()  # a second start spawns nothing twice
    await world.runner.drain()
    assert world.gauge.steps == {}
    assert (await world.records.get(task_id, ALICE)).state is TaskState.CANCELLED


async def test_a_retry_of_a_task_whose_cancel_was_requested_meanwhile_is_cancelled() -> None:
    world = task_world(MemoryStore())
    envelope = await world.call("summarise", '{"rows": 1}')
    task_id = str(envelope.data["task_id"])
    assert await world.records.begin(task_id, attempt=1, worker="w1")
    await world.service.cancel(task_id, ALICE)
    assert not await world.records.begin(task_id, attempt=2, worker="w1")
    assert (await world.records.get(task_id, ALICE)).state is TaskState.CANCELLED


class _Moving(MemoryStore):
    """A store whose task rows always moved since they were read."""

    def replace_task(self, record: TaskRecord, *, expect_version: int) -> bool:
        del record, expect_version
        return False


async def test_a_record_that_never_stops_moving_is_a_store_error() -> None:
    store = _Moving()
    world = task_world(store)
    envelope = await world.call("summarise", '{"rows": 1}')
    records = TaskRecords(store, clock=world.clock)
    with pytest.raises(StoreError):
        await records.begin(str(envelope.data["task_id"]), attempt=1, worker="w1")


async def test_a_schema_first_tool_runs_as_a_task_too() -> None:
    world = task_world(MemoryStore())

    async def scan(arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        assert ctx.task is not None
        found = await ctx.task.step("scan", lambda: _count(arguments["path"]))
        return {"files": found}

    raw = Tool.from_json_schema(
        name="scan_share",
        description="Count the files of a share, as a task.",
        input_schema={
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
        fn=scan,
        risk=RiskLevel.L1_INTERNAL_READ,
        runs_as=TaskMode(queue="scans"),
    )
    assert raw.spec.task == TaskMode(queue="scans")
    world.registry.register(world.service.bind(raw))
    await world.runner.start()
    envelope = await world.call("scan_share", '{"path": "/team"}')
    await world.runner.drain()
    status = await world.service.status(str(envelope.data["task_id"]), ALICE)
    assert status["result"] == {"files": 5}


async def _count(path: str) -> int:
    return len(path)


@pytest.mark.parametrize(
    "options",
    [
        {"queue": "no spaces"},
        {"max_attempts": 0},
        {"max_result_chars": 0},
        {"backoff_seconds": 5.0, "max_backoff_seconds": 1.0},
        {"expires_after_seconds": 0},
        {"estimate_seconds": -1.0},
        {"dedupe_seconds": -1.0},
        {"dedupe_seconds": float("inf")},
        {"dedupe_seconds": float("nan")},
    ],
)
def test_a_task_mode_refuses_what_no_runner_can_honour(options: dict[str, Any]) -> None:
    with pytest.raises(RegistrationError):
        TaskMode(**options)
