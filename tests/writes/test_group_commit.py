"""Group commit keeps the write order: a claim is committed before its effect starts,
an outcome before its answer returns, however many executions share a batch.

Committed means visible to an independent connection of another engine; each store's
commit is durable (SQLite: WAL with synchronous=FULL; PostgreSQL: its own commit).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from _write_tools import ALICE, ARGS, Downstream, keyring, ticket_tool
from handrail import ExecutionStatus, Gate, Registry, ToolCall, Writes
from handrail.store import open_store
from handrail.store.sql import SqlStore

pytestmark = pytest.mark.anyio

CONCURRENT = 24


@dataclass
class _Observed(Downstream):
    """A downstream that, before each effect, reads the claim through another engine."""

    reader: SqlStore | None = None
    seen: dict[str, ExecutionStatus | None] = field(default_factory=dict)

    def commit(self, key: str, asset: str) -> dict[str, object]:
        assert self.reader is not None
        record = self.reader.get_execution(key)
        self.seen[key] = None if record is None else record.status
        return super().commit(key, asset)


async def test_claims_and_outcomes_are_committed_in_order_under_concurrency(
    sql_store: SqlStore,
) -> None:
    url = sql_store.engine.url
    if url.get_backend_name() == "sqlite":
        reader = open_store(str(url.database))
    else:
        reader = open_store(url.set(drivername="postgresql").render_as_string(hide_password=False))
    assert isinstance(reader, SqlStore)
    downstream = _Observed(reader=reader)
    registry = Registry()
    registry.register(ticket_tool(downstream))
    writes = Writes(registry, sql_store, keyring())
    gate = Gate(registry, writes=writes)
    try:
        plan_ids = []
        for n in range(CONCURRENT):
            call = ToolCall(id=f"c{n}", name="create_ticket", arguments=ARGS)
            envelope = await gate.handle(call, ALICE)
            plan_id = str(envelope.data["plan_id"])
            token = await writes.issue_token(plan_id, ALICE)
            await writes.confirm(plan_id, token.value, ALICE)
            plan_ids.append(plan_id)

        async def execute(plan_id: str) -> tuple[str, ExecutionStatus | None]:
            outcome = await writes.execute_plan(plan_id, ALICE)
            assert outcome.record is not None
            key = outcome.record.idempotency_key
            # The answer is back: its outcome must already be committed.
            after = reader.get_execution(key)
            return key, None if after is None else after.status

        answers = await asyncio.gather(*(execute(plan_id) for plan_id in plan_ids))
    finally:
        reader.close()

    assert len({key for key, _ in answers}) == CONCURRENT
    # Each effect started only once its claim was committed, as RUNNING.
    assert downstream.seen == {key: ExecutionStatus.RUNNING for key, _ in answers}
    assert [status for _, status in answers] == [ExecutionStatus.SUCCEEDED] * CONCURRENT
    assert downstream.effects() == CONCURRENT
    # The executions went through the store's group-committing path.
    assert sql_store.async_executions is not None
