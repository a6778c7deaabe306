"""A task runs in the trace of the call that submitted it, on whichever worker runs it.

The submission carries its submitter's `traceparent` (in the DBOS workflow's input,
through the system database); the worker's run is a CONSUMER span parented by it,
never by whatever context the worker happens to have, and the body's own spans nest
under that run. The in-memory runner is started only after the submission here (so it
runs the task from its journal, as a recovering worker would, in another context); DBOS
runs it on its own thread and event loop. Without telemetry nothing is carried.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from _dbos_host import FileHost, script_body, wait_for_async
from _dbos_setup import submission
from opentelemetry.trace import SpanKind, StatusCode

from _edge_traces import REMOTE, Recording, chain
from handrail import Gate, Principal, Registry, RiskLevel, ToolCall, ToolContext, tool
from handrail.errors import NotFound
from handrail.spec import TaskMode
from handrail.store import MemoryStore
from handrail.tasks.dbos import DbosTaskRunner, TaskQueue
from handrail.tasks.memory import InMemoryTaskRunner
from handrail.tasks.records import TaskRecords
from handrail.tasks.runner import TaskSubmission
from handrail.tasks.service import TaskService
from handrail.telemetry import Telemetry, attributes
from handrail.testing import FixedClock

pytestmark = pytest.mark.anyio

ALICE = Principal(user_id="alice", tenant_id="t1", permissions=frozenset({"reports.run"}))
BODY = "body work"


def _world(telemetry: Telemetry | None, tracer_of: Recording) -> tuple[Gate, InMemoryTaskRunner]:
    """A gate whose `reports.summary` task opens BODY while it runs (or fails on rows=0)."""
    clock = FixedClock()
    store = MemoryStore()
    records = TaskRecords(store, clock=clock)
    runner = InMemoryTaskRunner(records, clock=clock, telemetry=telemetry)
    service = TaskService(records, runner, clock=clock)
    tracer = tracer_of.telemetry.tracer

    @tool(
        risk=RiskLevel.L1_INTERNAL_READ,
        namespace="reports",
        permissions={"reports.run"},
        runs_as=TaskMode(queue="reports"),
    )
    async def summary(rows: int, ctx: ToolContext) -> dict[str, Any]:
        """Summarise the orders, as a task."""
        del ctx
        with tracer.start_as_current_span(BODY):
            if rows == 0:
                raise NotFound("There are no orders.")
            return {"rows": rows}

    registry = Registry()
    registry.register(service.bind(summary))
    return Gate(registry, clock=clock, telemetry=telemetry), runner


async def _submit_then_run(
    gate: Gate, runner: InMemoryTaskRunner, rec: Recording, rows: int
) -> None:
    """Submit under the span "host turn"; run the worker later under "elsewhere"."""
    tracer = rec.telemetry.tracer
    with tracer.start_as_current_span("host turn"):
        queued = await gate.handle(
            ToolCall(id="c1", name="reports.summary", arguments={"rows": rows}), ALICE
        )
    assert queued.status.value == "ok", queued
    with tracer.start_as_current_span("elsewhere"):
        await runner.start()
    await runner.drain()
    await runner.stop()


async def test_a_task_runs_under_a_span_in_the_trace_of_the_call_that_submitted_it(
    rec: Recording,
) -> None:
    gate, runner = _world(rec.telemetry, rec)
    await _submit_then_run(gate, runner, rec, rows=3)

    spans = rec.spans()
    run = rec.named("handrail.task reports.summary")
    names = [s.name for s in chain(run, spans)]
    assert "host turn" in names
    assert "elsewhere" not in names
    assert run.kind is SpanKind.CONSUMER
    assert run.context.trace_id == rec.named("host turn").context.trace_id
    values = dict(run.attributes or {})
    assert values[attributes.GEN_AI_TOOL_NAME] == "reports.summary"
    assert values[attributes.HANDRAIL_TENANT] == "t1"
    assert str(values[attributes.HANDRAIL_TASK_ID]).startswith("task_")
    assert values[attributes.HANDRAIL_OUTCOME] == "succeeded"
    assert values[attributes.HANDRAIL_ATTEMPT] == 1
    assert run.status.status_code is StatusCode.UNSET
    body = rec.named(BODY)
    assert body.parent is not None
    assert body.parent.span_id == run.context.span_id


async def test_a_failed_task_is_an_error_with_its_code(rec: Recording) -> None:
    gate, runner = _world(rec.telemetry, rec)
    await _submit_then_run(gate, runner, rec, rows=0)

    run = rec.named("handrail.task reports.summary")
    values = dict(run.attributes or {})
    assert values[attributes.HANDRAIL_OUTCOME] == "failed"
    assert values[attributes.HANDRAIL_ERROR_CODE] == "NOT_FOUND"
    assert run.status.status_code is StatusCode.ERROR
    assert "There are no orders" not in json.dumps(run.to_json())


async def test_without_telemetry_a_submission_carries_no_trace_context(rec: Recording) -> None:
    gate, runner = _world(None, rec)
    await _submit_then_run(gate, runner, rec, rows=3)

    (kept,) = runner.journal.submissions.values()
    assert (kept.traceparent, kept.tracestate) == (None, None)
    assert sorted(s.name for s in rec.spans()) == sorted(["host turn", BODY, "elsewhere"])


def test_the_trace_context_travels_in_the_json_only_when_set() -> None:
    plain = submission("t-json", [])
    traced = TaskSubmission.from_json(
        json.dumps(json.loads(plain.to_json()) | {"traceparent": REMOTE.traceparent})
    )

    assert "traceparent" not in json.loads(plain.to_json())
    assert TaskSubmission.from_json(plain.to_json()) == plain
    assert traced.traceparent == REMOTE.traceparent
    assert TaskSubmission.from_json(traced.to_json()) == traced


# --- DBOS: through the system database, on DBOS's own thread ----------------------------------


@pytest.fixture
async def dbos_runner(
    tmp_path: Path, rec: Recording
) -> AsyncIterator[tuple[DbosTaskRunner, FileHost]]:
    host = FileHost(tmp_path / "facts.sqlite", worker="w1")
    made = DbosTaskRunner(
        host,
        system_database_url=f"sqlite:///{tmp_path / 'dbos.sqlite'}",
        worker_id="w1",
        queues=(TaskQueue(name="default"),),
        telemetry=rec.telemetry,
    )
    made.register("script", script_body(host))
    await made.start()
    try:
        yield made, host
    finally:
        await made.stop()


async def test_a_dbos_worker_runs_the_task_under_its_submitters_span(
    dbos_runner: tuple[DbosTaskRunner, FileHost], rec: Recording
) -> None:
    runner, host = dbos_runner
    task = submission("t-traced", [{"name": "a"}])
    host.add(task)
    with rec.telemetry.tracer.start_as_current_span("host turn") as turn:
        assert await runner.submit(task) is True

    def ran() -> bool:
        return any(s.name == "handrail.task script" for s in rec.spans())

    await wait_for_async(ran, "the task's span ended")
    run = rec.named("handrail.task script")
    assert run.parent is not None
    assert run.parent.span_id == turn.get_span_context().span_id
    assert run.context.trace_id == turn.get_span_context().trace_id
    assert (run.attributes or {})[attributes.HANDRAIL_OUTCOME] == "succeeded"
    assert host.state("t-traced") == "succeeded"
