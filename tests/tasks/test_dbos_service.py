"""Task tools through the gate with DbosTaskRunner and Handrail's own TaskRecords.

The world of `_task_world` (the gate, writes, TaskRecords, TaskService, the built-in task
tools) with the in-memory runner replaced by DBOS, on SQLite (store and DBOS's system
database both SQLite files) and on PostgreSQL (both PostgreSQL). The bodies run on
DBOS's own event loop, so the gauge's gate is opened before they start.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from _dbos_host import WAIT_S

from _task_world import ALICE, MALLORY, Gauge, export_tool, summary_tool
from _write_tools import keyring
from handrail import ErrorCode, Gate, Principal, Registry, Status, ToolCall, Writes
from handrail.envelope import Envelope
from handrail.record.raw_results import RawResults
from handrail.store import PostgresStore, SqlStore
from handrail.tasking import TaskState
from handrail.tasks._effects import TaskEffects
from handrail.tasks.dbos import DbosTaskRunner, TaskQueue
from handrail.tasks.records import TaskRecords
from handrail.tasks.service import TaskService
from handrail.tasks.tools import task_tools
from handrail.testing import FixedClock, sequential_ids

pytestmark = pytest.mark.anyio


class _World:
    def __init__(self, store: SqlStore, dbos_url: str) -> None:
        self.store = store
        self.clock = FixedClock()
        self.gauge = Gauge()
        self.gauge.release.set()
        registry = Registry()
        self.writes = Writes(
            registry, store, keyring(), clock=self.clock, worker_id="w1", new_id=sequential_ids("p")
        )
        self.records = TaskRecords(
            store,
            clock=self.clock,
            raw=RawResults(store, self.clock),
            effects=TaskEffects(self.writes.executor, clock=self.clock),
        )
        self.runner = DbosTaskRunner(
            self.records,
            system_database_url=dbos_url,
            worker_id="w1",
            queues=(TaskQueue(name="reports"), TaskQueue(name="exports")),
            clock=self.clock,
        )
        self.service = TaskService(self.records, self.runner, clock=self.clock)
        registry.register(self.service.bind(summary_tool(self.gauge)))
        registry.register(self.service.bind(export_tool(self.gauge)))
        for built_in in task_tools(self.service):
            registry.register(built_in)
        self.gate = Gate(registry, clock=self.clock, writes=self.writes)

    async def call(self, name: str, arguments: object, principal: Principal = ALICE) -> Envelope:
        call = ToolCall(id="c1", name=name, arguments=json.dumps(arguments))
        return await self.gate.handle(call, principal)

    async def finished(self, task_id: str) -> TaskState:
        end = asyncio.get_running_loop().time() + WAIT_S
        while True:
            record = await asyncio.to_thread(self.store.get_task, task_id)
            if record is not None and record.terminal:
                return record.state
            assert asyncio.get_running_loop().time() < end, f"{task_id} never finished"
            await asyncio.sleep(0.02)


@pytest.fixture
async def world(
    sql_store: SqlStore, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[_World]:
    if isinstance(sql_store, PostgresStore):
        dbos_url: str = request.getfixturevalue("postgres_dbos_url")
    else:
        dbos_url = f"sqlite:///{tmp_path / 'dbos.sqlite'}"
    made = _World(sql_store, dbos_url)
    await made.runner.start()
    try:
        yield made
    finally:
        await made.runner.stop()


async def test_a_read_task_runs_on_dbos_and_its_status_is_read_through_the_gate(
    world: _World,
) -> None:
    first = await world.call("summarise", {"rows": 3})
    again = await world.call("summarise", {"rows": 3})
    assert first.status is Status.OK
    assert first.data["state"] == "queued"
    task_id = str(first.data["task_id"])
    assert again.data["task_id"] == task_id
    assert await world.finished(task_id) is TaskState.SUCCEEDED
    status = await world.call("get_task_status", {"task_id": task_id})
    assert status.data["state"] == "succeeded"
    assert status.data["result"] == {"rows": 3, "data": [0, 1, 2]}
    assert status.data["attempts"] == 1
    assert world.gauge.steps == {"count": 1, "load": 1, "finish": 1}
    other = await world.call("get_task_status", {"task_id": task_id}, MALLORY)
    assert other.error_type is ErrorCode.NOT_FOUND


async def test_a_confirmed_write_task_makes_its_effect_once_through_the_execution_record(
    world: _World,
) -> None:
    envelope = await world.call("send_export", {"region": "eu"})
    plan_id = str(envelope.data["plan_id"])
    token = await world.writes.issue_token(plan_id, ALICE)
    await world.writes.confirm(plan_id, token.value, ALICE)
    first = await world.writes.execute_plan(plan_id, ALICE)
    again = await world.writes.execute_plan(plan_id, ALICE)
    task_id = str(first.envelope.data["task_id"])
    assert again.envelope.data["task_id"] == task_id
    assert await world.finished(task_id) is TaskState.SUCCEEDED
    assert world.gauge.effects["upload"] == 1
    status = await world.service.status(task_id, ALICE)
    assert status["result"] == {"sent": {"archive_id": "arc-eu"}}
