"""The large export, wired: an orders database, the task tool, its policy, a runner.

`export_orders` is a write (it publishes a file) that runs as a task. The policy asks a
holder of `exports.approve` to approve an export of more than 1,000 rows; smaller ones
need only the requester's confirmation. Once confirmed, "executing" the plan submits
the task and answers QUEUED with its id; a worker pages through the orders with one
checkpointed step per page, reports progress, publishes the file once (through the
execution record) and keeps the rows in the raw store, behind a reference that only
the tenant can open. `get_task_status` and `cancel_task` are registered beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field

from handrail import (
    ConfirmationMode,
    ConfirmationPolicy,
    FromPrincipal,
    Gate,
    Keyring,
    Principal,
    Registry,
    RiskLevel,
    SideEffect,
    SigningKey,
    Store,
    Writes,
)
from handrail.authz.policy import Facts, Outcome, PolicyEngine, Rule
from handrail.clock import Clock
from handrail.context import ToolContext
from handrail.declare.definition import Tool, tool
from handrail.record.raw_results import RawResults
from handrail.retry import Sleep
from handrail.spec import TaskMode
from handrail.tasks._effects import TaskEffects
from handrail.tasks.memory import InMemoryTaskRunner
from handrail.tasks.records import TaskRecords
from handrail.tasks.service import TaskService
from handrail.tasks.tools import task_tools

__all__ = ["MAX_ROWS_WITHOUT_APPROVAL", "PAGE", "ExportApp", "OrdersDb", "build"]

MAX_ROWS_WITHOUT_APPROVAL = 1_000
PAGE = 500
"""Rows per checkpointed step."""

Region = Literal["eu", "us", "apac"]
TenantId = Annotated[str, FromPrincipal("tenant_id")]


@dataclass
class OrdersDb:
    """A stand-in for the orders database and the file store exports go to."""

    orders_per_region: int = 2_400
    published: list[str] | None = None

    def page(self, tenant_id: str, region: str, offset: int, size: int) -> list[dict[str, Any]]:
        end = min(offset + size, self.orders_per_region)
        return [
            {"order_id": f"{tenant_id}-{region}-{n}", "amount_cents": 100 + n % 900}
            for n in range(offset, end)
        ]

    def publish(self, name: str) -> str:
        """Write the export file (an external write: it must happen once)."""
        if self.published is None:
            self.published = []
        self.published.append(name)
        return f"exports/{name}.csv"


def export_tool(db: OrdersDb) -> Tool:
    """`reports.export_orders`: a confirmed write that runs as a task."""

    @tool(
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        namespace="reports",
        side_effect=SideEffect.EXTERNAL_WRITE,
        permissions={"orders.export"},
        confirmation=ConfirmationPolicy(mode=ConfirmationMode.CONFIRM),
        runs_as=TaskMode(queue="exports", estimate_seconds=120.0, max_result_chars=2_000),
    )
    async def export_orders(
        region: Region,
        limit: Annotated[int, Field(ge=1, le=100_000, description="At most this many rows")],
        tenant_id: TenantId,
        ctx: ToolContext,
    ) -> dict[str, Any]:
        """Export this account's orders of one region to a file (runs as a task)."""
        scope = ctx.task
        if scope is None:  # pragma: no cover - a task tool runs only as a task
            raise RuntimeError
        wanted = min(limit, db.orders_per_region)
        rows: list[dict[str, Any]] = []
        for offset in range(0, wanted, PAGE):

            async def page(at: int = offset) -> list[dict[str, Any]]:
                return db.page(tenant_id, region, at, min(PAGE, wanted - at))

            rows.extend(await scope.step(f"page-{offset}", page))
            await scope.progress(len(rows) / wanted, f"{len(rows)} of {wanted} rows read")

        async def publish() -> str:
            return db.publish(f"{tenant_id}-{region}-{scope.task_id}")

        file = await scope.effect("publish", publish)
        return {"file": file, "row_count": len(rows), "rows": rows}

    return export_orders


def _rows(facts: Facts) -> int:
    return int(facts.arguments.limit)


def policy() -> PolicyEngine:
    """Exports of more than 1,000 rows need an approver; smaller ones the requester."""
    return PolicyEngine(
        (
            Rule(
                name="export-confirm",
                tool="reports.export_orders",
                outcome=Outcome.CONFIRM,
                reason="an export needs the requester's confirmation",
            ),
            Rule(
                name="export-over-1000-rows",
                tool="reports.export_orders",
                outcome=Outcome.APPROVE,
                reason=f"an export of more than {MAX_ROWS_WITHOUT_APPROVAL} rows needs an approver",
                when=lambda facts: _rows(facts) > MAX_ROWS_WITHOUT_APPROVAL,
                approval=ConfirmationPolicy(
                    mode=ConfirmationMode.APPROVE, approver_permission="exports.approve"
                ),
            ),
            Rule(
                name="task-status",
                tool="get_task_status",
                outcome=Outcome.ALLOW,
                reason="a task of the caller's tenant",
            ),
            Rule(
                name="task-cancel",
                tool="cancel_task",
                outcome=Outcome.ALLOW,
                reason="a task of the caller's tenant",
            ),
        ),
    )


@dataclass(kw_only=True)
class ExportApp:
    """Everything a host wires for the export: gate, writes, tasks, raw results."""

    gate: Gate
    writes: Writes
    tasks: TaskService
    runner: InMemoryTaskRunner
    raw: RawResults
    db: OrdersDb

    async def download(self, task_id: str, principal: Principal) -> bytes:
        """The controlled download: the whole result, only for the task's tenant."""
        return await self.tasks.download(task_id, principal)


def build(store: Store, *, clock: Clock, sleep: Sleep, db: OrdersDb | None = None) -> ExportApp:
    """The export app over one store (an in-memory runner: a real host uses DBOS)."""
    orders = db or OrdersDb()
    registry = Registry()
    keyring = Keyring(SigningKey("k1", b"example-export-key-32-bytes-long"))
    writes = Writes(registry, store, keyring, clock=clock)
    raw = RawResults(store, clock)
    records = TaskRecords(
        store, clock=clock, raw=raw, effects=TaskEffects(writes.executor, clock=clock)
    )
    runner = InMemoryTaskRunner(records, clock=clock, sleep=sleep)
    tasks = TaskService(records, runner, clock=clock)
    registry.register(tasks.bind(export_tool(orders)))
    for built_in in task_tools(tasks):
        registry.register(built_in)
    gate = Gate(registry, clock=clock, writes=writes, policy=policy())
    return ExportApp(gate=gate, writes=writes, tasks=tasks, runner=runner, raw=raw, db=orders)
