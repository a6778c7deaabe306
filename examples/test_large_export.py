"""The seed's large export as a task, end to end on a SQLite store.

A small export is confirmed by its requester; one of more than 1,000 rows waits for an
approver. Either way, executing the plan answers QUEUED with a task id (twice: the same
task), a worker pages through the orders with checkpoints and progress, publishes the
file once, and the rows land in the raw store: `get_task_status` gives a reference that
only the tenant can open. Another tenant's status request is NOT_FOUND.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from examples.large_export.app import ExportApp, OrdersDb, build
from handrail import ErrorCode, Principal, Status, ToolCall
from handrail.errors import AccessRefusedError
from handrail.store import SqliteStore
from handrail.testing import FixedClock

pytestmark = pytest.mark.anyio

ANNA = Principal(user_id="anna", tenant_id="acme", permissions=frozenset({"orders.export"}))
OMAR = Principal(user_id="omar", tenant_id="acme", permissions=frozenset({"exports.approve"}))
EVE = Principal(user_id="eve", tenant_id="other", permissions=frozenset({"orders.export"}))


async def _no_wait(_seconds: float) -> None:
    await asyncio.sleep(0)


@pytest.fixture
async def app(tmp_path: Path) -> ExportApp:
    store = SqliteStore.open(tmp_path / "h.db")
    made = build(store, clock=FixedClock(), sleep=_no_wait, db=OrdersDb())
    await made.runner.start()
    return made


async def _call(app: ExportApp, name: str, arguments: dict[str, object], who: Principal) -> object:
    return await app.gate.handle(ToolCall(id="c1", name=name, arguments=json.dumps(arguments)), who)


async def _status(app: ExportApp, task_id: str, who: Principal = ANNA) -> dict[str, object]:
    envelope = await app.gate.handle(
        ToolCall(id="c2", name="get_task_status", arguments=json.dumps({"task_id": task_id})), who
    )
    assert envelope.status is Status.OK, envelope
    return dict(envelope.data)


async def test_a_small_export_is_confirmed_queued_run_and_downloaded_by_reference(
    app: ExportApp,
) -> None:
    proposal = await app.gate.handle(
        ToolCall(id="c1", name="reports.export_orders", arguments='{"region":"eu","limit":800}'),
        ANNA,
    )
    assert proposal.error_type is ErrorCode.NEEDS_CONFIRMATION
    plan_id = str(proposal.data["plan_id"])
    token = await app.writes.issue_token(plan_id, ANNA)
    await app.writes.confirm(plan_id, token.value, ANNA)
    queued = await app.writes.execute_plan(plan_id, ANNA)
    again = await app.writes.execute_plan(plan_id, ANNA)
    assert queued.envelope.data["state"] == "queued"
    assert again.envelope.data["task_id"] == queued.envelope.data["task_id"]
    await app.runner.drain()

    task_id = str(queued.envelope.data["task_id"])
    status = await _status(app, task_id)
    assert status["state"] == "succeeded"
    assert status["progress"] == 1.0
    assert app.db.published == [f"acme-eu-{task_id}"]
    assert "result_ref" not in status
    rows = json.loads(await app.download(task_id, ANNA))
    assert rows["row_count"] == 800
    assert rows["rows"][0]["order_id"] == "acme-eu-0"
    with pytest.raises(AccessRefusedError) as refused:
        await app.download(task_id, EVE)
    assert refused.value.code is ErrorCode.NOT_FOUND
    theirs = await app.gate.handle(
        ToolCall(id="c3", name="get_task_status", arguments=json.dumps({"task_id": task_id})), EVE
    )
    assert theirs.error_type is ErrorCode.NOT_FOUND


async def test_an_export_of_more_than_1000_rows_waits_for_an_approver(app: ExportApp) -> None:
    proposal = await app.gate.handle(
        ToolCall(id="c1", name="reports.export_orders", arguments='{"region":"us","limit":2000}'),
        ANNA,
    )
    assert proposal.error_type is ErrorCode.NEEDS_APPROVAL
    plan_id = str(proposal.data["plan_id"])
    with pytest.raises(AccessRefusedError):
        await app.writes.issue_token(plan_id, ANNA)  # the requester cannot approve herself
    token = await app.writes.issue_token(plan_id, OMAR)
    await app.writes.confirm(plan_id, token.value, OMAR)
    queued = await app.writes.execute_plan(plan_id, ANNA)
    assert queued.envelope.data["estimate_seconds"] == 120.0
    await app.runner.drain()
    task_id = str(queued.envelope.data["task_id"])
    status = await _status(app, task_id)
    assert status["state"] == "succeeded"
    rows = json.loads(await app.download(task_id, ANNA))
    assert rows["row_count"] == 2000
    assert app.db.published is not None
    assert len(app.db.published) == 1
