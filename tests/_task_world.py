"""A gate with task tools over one store: records, an in-memory runner, the service, writes.

Shared by the tests of handrail.tasks and the adversarial task tests. `Gauge` lets a task
body wait on the test (events, no sleeps) and counts what ran.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from _write_tools import keyring
from handrail import Gate, Principal, Registry, Store, ToolCall, Writes
from handrail.context import ToolContext
from handrail.declare.definition import Tool, tool
from handrail.envelope import Envelope
from handrail.errors import ToolRetryable
from handrail.record.raw_results import RawResults
from handrail.spec import ConfirmationMode, ConfirmationPolicy, RiskLevel, SideEffect, TaskMode
from handrail.tasks._effects import TaskEffects
from handrail.tasks.memory import InMemoryTaskRunner, MemoryJournal
from handrail.tasks.records import TaskRecords
from handrail.tasks.service import TaskService
from handrail.tasks.tools import task_tools
from handrail.testing import FixedClock, sequential_ids

ALICE = Principal(user_id="alice", tenant_id="t1", permissions=frozenset({"reports.run"}))
BOB = Principal(user_id="bob", tenant_id="t1", permissions=frozenset({"reports.run"}))
MALLORY = Principal(user_id="mallory", tenant_id="t2", permissions=frozenset({"reports.run"}))


async def no_wait(_seconds: float) -> None:
    await asyncio.sleep(0)


@dataclass
class Gauge:
    """What task bodies did, and gates they wait on."""

    steps: Counter[str] = field(default_factory=Counter)
    effects: Counter[str] = field(default_factory=Counter)
    started: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    transient_failures: int = 0
    message: str | None = None


def summary_tool(gauge: Gauge, *, mode: TaskMode | None = None) -> Tool:
    """A read task: two checkpointed steps, progress, a result of `rows` numbers."""

    @tool(
        risk=RiskLevel.L1_INTERNAL_READ,
        permissions={"reports.run"},
        runs_as=mode or TaskMode(queue="reports", estimate_seconds=30.0),
    )
    async def summarise(rows: int, ctx: ToolContext) -> dict[str, Any]:
        """Summarise the orders of the tenant, as a task."""
        scope = ctx.task
        assert scope is not None

        async def count() -> int:
            gauge.steps["count"] += 1
            return rows

        async def load() -> list[int]:
            gauge.steps["load"] += 1
            gauge.started.set()
            await gauge.release.wait()
            if gauge.transient_failures > 0:
                gauge.transient_failures -= 1
                raise ToolRetryable("the warehouse is busy")
            return list(range(rows))

        async def finish() -> int:
            gauge.steps["finish"] += 1
            return len(data)

        total = await scope.step("count", count)
        await scope.progress(0.5, gauge.message)
        data = await scope.step("load", load)
        await scope.step("finish", finish)
        return {"rows": total, "data": data}

    return summarise


def export_tool(gauge: Gauge) -> Tool:
    """A confirmed write task whose one external effect goes through the execution record."""

    @tool(
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        side_effect=SideEffect.EXTERNAL_WRITE,
        permissions={"reports.run"},
        confirmation=ConfirmationPolicy(mode=ConfirmationMode.CONFIRM),
        runs_as=TaskMode(queue="exports", estimate_seconds=60.0),
    )
    async def send_export(region: str, ctx: ToolContext) -> dict[str, Any]:
        """Send the region's export to the archive, as a task."""
        scope = ctx.task
        assert scope is not None

        async def upload() -> dict[str, str]:
            gauge.effects["upload"] += 1
            return {"archive_id": f"arc-{region}"}

        sent = await scope.effect("upload", upload)
        gauge.started.set()
        await gauge.release.wait()
        return {"sent": sent}

    return send_export


@dataclass
class TaskWorld:
    store: Store
    clock: FixedClock
    gauge: Gauge
    records: TaskRecords
    runner: InMemoryTaskRunner
    service: TaskService
    registry: Registry
    writes: Writes
    gate: Gate
    journal: MemoryJournal

    async def call(self, name: str, arguments: str, principal: Principal = ALICE) -> Envelope:
        return await self.gate.handle(ToolCall(id="c1", name=name, arguments=arguments), principal)

    async def confirmed_write(self, arguments: str, principal: Principal = ALICE) -> str:
        envelope = await self.call("send_export", arguments, principal)
        plan_id = str(envelope.data["plan_id"])
        token = await self.writes.issue_token(plan_id, principal)
        await self.writes.confirm(plan_id, token.value, principal)
        return plan_id

    def second_runner(self) -> InMemoryTaskRunner:
        """Another worker on the same journal (what a durable engine would recover from)."""
        runner = InMemoryTaskRunner(
            self.records, clock=self.clock, sleep=no_wait, worker="w2", journal=self.journal
        )
        runner.register("summarise", self.runner._bodies["summarise"])
        return runner


def task_world(store: Store, *, mode: TaskMode | None = None, raw: bool = True) -> TaskWorld:
    clock = FixedClock()
    gauge = Gauge()
    registry = Registry()
    writes = Writes(
        registry, store, keyring(), clock=clock, worker_id="w1", new_id=sequential_ids("p")
    )
    records = TaskRecords(
        store,
        clock=clock,
        raw=RawResults(store, clock) if raw else None,
        effects=TaskEffects(writes.executor, clock=clock),
    )
    journal = MemoryJournal()
    runner = InMemoryTaskRunner(records, clock=clock, sleep=no_wait, worker="w1", journal=journal)
    service = TaskService(records, runner, clock=clock)
    registry.register(service.bind(summary_tool(gauge, mode=mode)))
    registry.register(service.bind(export_tool(gauge)))
    for built_in in task_tools(service):
        registry.register(built_in)
    gate = Gate(registry, clock=clock, writes=writes)
    return TaskWorld(
        store=store,
        clock=clock,
        gauge=gauge,
        records=records,
        runner=runner,
        service=service,
        registry=registry,
        writes=writes,
        gate=gate,
        journal=journal,
    )
