"""PostgreSQL's async claim and outcome statements: per-loop connections, errors, close."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator

import pytest

from _records import execution_record
from handrail import ExecutionRecord, ExecutionStatus
from handrail.errors import StoreError
from handrail.store import PostgresStore
from handrail.store.sql import execution_params, execution_row

pytestmark = pytest.mark.postgres


@pytest.fixture
def pg(postgres_url: str) -> Iterator[PostgresStore]:
    store = PostgresStore.open(postgres_url)
    with store.engine.begin() as connection:
        connection.exec_driver_sql("TRUNCATE executions, plans")
    yield store
    store.close()


def _record(key: str = "k1") -> ExecutionRecord:
    return execution_record(idempotency_key=key)


def test_claims_and_outcomes_agree_with_the_sync_store(pg: PostgresStore) -> None:
    fast = pg.async_executions
    assert fast is not None
    record = _record()

    async def run() -> tuple[bool, bool, bool, bool]:
        first = await fast.insert(execution_row(record), require_confirmed_plan=False)
        again = await fast.insert(execution_row(record), require_confirmed_plan=False)
        planned = dataclasses.replace(record, idempotency_key="k2", plan_id="nope")
        unplanned = await fast.insert(
            execution_row(planned) | {"k_plan": "nope"},
            require_confirmed_plan=True,
        )
        done = record.moved(ExecutionStatus.SUCCEEDED, result='{"ok":true}')
        params = execution_params(
            done,
            expect_status=ExecutionStatus.RUNNING,
            expect_version=1,
            lease_owner="w",
            lease_valid_at=None,
        )
        replaced = await fast.replace(params, owner=True, valid=False)
        return first, again, unplanned, replaced

    assert asyncio.run(run()) == (True, False, False, True)
    stored = pg.get_execution("k1")
    assert stored is not None
    assert (stored.status, stored.result, stored.version) == (
        ExecutionStatus.SUCCEEDED,
        '{"ok":true}',
        2,
    )
    assert pg.get_execution("k2") is None


def test_connections_of_an_ended_loop_are_closed_and_new_loops_get_their_own(
    pg: PostgresStore,
) -> None:
    fast = pg.async_executions
    assert fast is not None
    for n in range(3):  # each asyncio.run is a new loop
        assert asyncio.run(
            fast.insert(execution_row(_record(f"k{n}")), require_confirmed_plan=False),
        )
    assert len(fast._idle) == 1
    pg.close()
    with pytest.raises(StoreError, match="closed"):
        asyncio.run(fast.insert(execution_row(_record("late")), require_confirmed_plan=False))


def test_a_statement_error_is_a_store_error(pg: PostgresStore) -> None:
    fast = pg.async_executions
    assert fast is not None
    broken = execution_row(_record()) | {"status": "x" * 100}  # longer than the column
    with pytest.raises(StoreError, match="execution write failed"):
        asyncio.run(fast.insert(broken, require_confirmed_plan=False))
    assert pg.get_execution("k1") is None


def test_an_unreachable_server_is_a_store_error() -> None:
    store = PostgresStore.open("postgresql://postgres@127.0.0.1:1/none", migrate=False)
    fast = store.async_executions
    assert fast is not None
    try:
        with pytest.raises(StoreError, match="connection failed"):
            asyncio.run(fast.insert(execution_row(_record()), require_confirmed_plan=False))
    finally:
        store.close()


def test_a_batch_of_mixed_statements_answers_each_member_as_if_alone(postgres_url: str) -> None:
    store = PostgresStore.open(postgres_url, async_pool_size=1)
    with store.engine.begin() as connection:
        connection.exec_driver_sql("TRUNCATE executions, plans")
    fast = store.async_executions
    assert fast is not None
    try:
        assert asyncio.run(
            fast.insert(execution_row(_record("taken")), require_confirmed_plan=False)
        )

        async def burst() -> list[bool]:
            # One connection: while the first statement holds it, the rest queue and
            # then share one transaction: fresh keys, a taken key, unconfirmed plans.
            claims = [
                fast.insert(execution_row(_record(f"k{n}")), require_confirmed_plan=False)
                for n in range(6)
            ]
            claims.insert(
                3, fast.insert(execution_row(_record("taken")), require_confirmed_plan=False)
            )
            planned = dataclasses.replace(_record("p1"), plan_id="nope")
            claims.append(
                fast.insert(
                    execution_row(planned) | {"k_plan": "nope"}, require_confirmed_plan=True
                )
            )
            return await asyncio.gather(*claims)

        answers = asyncio.run(burst())
        assert answers == [True, True, True, False, True, True, True, False]
        assert fast.batch_stats().members >= 2
        assert store.get_execution("p1") is None
        assert all(store.get_execution(f"k{n}") is not None for n in range(6))
    finally:
        store.close()
