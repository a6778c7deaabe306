"""Writes into the store's own database: the effect and its record commit together.

Runs on SQLite and PostgreSQL (`sql_store`). No UNKNOWN here: a transaction that did
not commit left nothing behind, so a failure is a clean failure.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Annotated

import pytest
import sqlalchemy as sa
from pydantic import Field

from _write_tools import ALICE, keyring
from handrail import (
    ConfirmationMode,
    ConfirmationPolicy,
    ErrorCode,
    ExecutionStatus,
    Gate,
    IdempotencyMode,
    IdempotencyPolicy,
    NotExecuted,
    PlanState,
    Registry,
    RiskLevel,
    SideEffect,
    Status,
    ToolCall,
    ToolContext,
    ToolFailed,
    ToolRetryable,
    Writes,
    tool,
)
from handrail.envelope import Trust
from handrail.errors import ConfigurationError
from handrail.store import MemoryStore, SqlStore
from handrail.testing import FixedClock
from handrail.writes.outcome import WriteJob

pytestmark = pytest.mark.anyio

_meta = sa.MetaData()
stock = sa.Table(
    "test_stock",
    _meta,
    sa.Column("sku", sa.String(16), primary_key=True),
    sa.Column("count", sa.Integer(), nullable=False),
)


class Behaviour:
    def __init__(self) -> None:
        self.mode = "ok"
        self.calls = 0
        self.slow: float = 0.0


def _reserve(behaviour: Behaviour) -> object:
    @tool(
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        side_effect=SideEffect.LOCAL_WRITE,
        idempotency=IdempotencyPolicy(mode=IdempotencyMode.COMMAND_ID),
        confirmation=ConfirmationPolicy(mode=ConfirmationMode.NONE),
        business_id="sku",
    )
    def reserve(ctx: ToolContext, sku: Annotated[str, Field(max_length=16)]) -> dict[str, object]:
        """Take one item of a SKU out of stock."""
        behaviour.calls += 1
        connection = ctx.transaction
        assert connection is not None
        connection.execute(stock.update().where(stock.c.sku == sku).values(count=stock.c.count - 1))
        if behaviour.slow:
            import time  # noqa: PLC0415

            time.sleep(behaviour.slow)
        if behaviour.mode == "fail":
            raise ToolFailed("that SKU is blocked")
        if behaviour.mode == "transient":
            raise ToolRetryable("lock timeout")
        if behaviour.mode == "crash":
            raise RuntimeError("bug")
        left = connection.execute(sa.select(stock.c.count).where(stock.c.sku == sku)).scalar_one()
        return {"sku": sku, "left": left}

    return reserve


@pytest.fixture
def local(sql_store: SqlStore) -> Iterator[tuple[Gate, SqlStore, Behaviour, FixedClock]]:
    _meta.drop_all(sql_store.engine)
    _meta.create_all(sql_store.engine)
    with sql_store.engine.begin() as connection:
        connection.execute(stock.insert(), [{"sku": "a", "count": 10}])
    behaviour = Behaviour()
    registry = Registry()
    registry.register(_reserve(behaviour))  # type: ignore[arg-type]
    clock = FixedClock()
    writes = Writes(registry, sql_store, keyring(), clock=clock)
    yield Gate(registry, writes=writes, clock=clock), sql_store, behaviour, clock
    _meta.drop_all(sql_store.engine)


def _count(store: SqlStore) -> int:
    with store.engine.connect() as connection:
        return int(connection.execute(sa.select(stock.c.count)).scalar_one())


CALL = ToolCall(id="c", name="reserve", arguments='{"sku": "a"}')


async def test_the_effect_and_the_record_commit_together_once(
    local: tuple[Gate, SqlStore, Behaviour, FixedClock],
) -> None:
    gate, store, behaviour, _ = local
    first = await gate.handle(CALL, ALICE, command_id="order-1")
    assert first.status is Status.OK
    assert first.data == {"sku": "a", "left": 9}
    again = await gate.handle(CALL, ALICE, command_id="order-1")
    assert again.data == first.data
    assert (behaviour.calls, _count(store)) == (1, 9)


@pytest.mark.invariant(4)
async def test_concurrent_duplicates_take_one_item(
    local: tuple[Gate, SqlStore, Behaviour, FixedClock],
) -> None:
    gate, store, behaviour, _ = local
    behaviour.slow = 0.05
    outcomes = await asyncio.gather(*(gate.handle(CALL, ALICE, command_id="o") for _ in range(8)))
    assert _count(store) == 9
    assert behaviour.calls == 1
    assert {o.status for o in outcomes} == {Status.OK}


async def test_a_declared_failure_rolls_back_the_effect_and_is_recorded(
    local: tuple[Gate, SqlStore, Behaviour, FixedClock],
) -> None:
    gate, store, behaviour, _ = local
    behaviour.mode = "fail"
    failed = await gate.handle(CALL, ALICE, command_id="o")
    assert failed.error_type is ErrorCode.FAILED_FINAL
    assert failed.summary == "that SKU is blocked"
    assert _count(store) == 10
    behaviour.mode = "ok"
    again = await gate.handle(CALL, ALICE, command_id="o")
    assert again.error_type is ErrorCode.FAILED_FINAL
    assert (behaviour.calls, _count(store)) == (1, 10)


async def test_an_undeclared_error_rolls_back_and_fails_without_leaking(
    local: tuple[Gate, SqlStore, Behaviour, FixedClock],
) -> None:
    gate, store, behaviour, _ = local
    behaviour.mode = "crash"
    failed = await gate.handle(CALL, ALICE, command_id="o")
    assert failed.error_type is ErrorCode.FAILED_FINAL
    assert "bug" not in failed.to_json()
    assert _count(store) == 10


async def test_a_transient_failure_rolls_back_and_leaves_the_key_free(
    local: tuple[Gate, SqlStore, Behaviour, FixedClock],
) -> None:
    gate, store, behaviour, _ = local
    behaviour.mode = "transient"
    first = await gate.handle(CALL, ALICE, command_id="o")
    assert first.error_type is ErrorCode.TRANSIENT
    assert first.retryable
    assert _count(store) == 10
    behaviour.mode = "ok"
    second = await gate.handle(CALL, ALICE, command_id="o")
    assert second.status is Status.OK
    assert _count(store) == 9


async def test_a_transaction_past_its_deadline_rolls_back(
    local: tuple[Gate, SqlStore, Behaviour, FixedClock],
) -> None:
    gate, store, behaviour, _ = local
    behaviour.slow = 0.3
    timed_out = await gate.handle(CALL, ALICE, command_id="o", timeout=0.1)
    assert timed_out.error_type in {ErrorCode.TIMEOUT, ErrorCode.TRANSIENT}
    assert _count(store) == 10
    behaviour.slow = 0.0
    assert (await gate.handle(CALL, ALICE, command_id="o")).status is Status.OK
    assert _count(store) == 9


async def test_a_store_error_at_commit_leaves_neither_effect_nor_record(
    local: tuple[Gate, SqlStore, Behaviour, FixedClock],
) -> None:
    gate, store, behaviour, _ = local

    def refuse_commit(_connection: sa.Connection) -> None:
        msg = "connection lost at commit"
        raise sa.exc.OperationalError("COMMIT", {}, Exception(msg))

    sa.event.listen(store.engine, "commit", refuse_commit)
    try:
        broken = await gate.handle(CALL, ALICE, command_id="o")
    finally:
        sa.event.remove(store.engine, "commit", refuse_commit)
    assert broken.error_type is ErrorCode.TRANSIENT
    assert _count(store) == 10
    from handrail.execution import command_key  # noqa: PLC0415
    from handrail.spec import IdempotencyScope  # noqa: PLC0415

    key = command_key(
        tenant_id="t1",
        tool="reserve",
        command_id="o",
        user_id="alice",
        scope=IdempotencyScope.TENANT,
    )
    assert store.get_execution(key) is None
    assert (await gate.handle(CALL, ALICE, command_id="o")).status is Status.OK
    record = store.get_execution(key)
    assert record is not None
    assert (record.status, record.business_id, _count(store)) == (ExecutionStatus.SUCCEEDED, "a", 9)
    assert behaviour.calls == 2


async def test_a_local_write_needs_a_sql_store() -> None:
    behaviour = Behaviour()
    registry = Registry()
    registry.register(_reserve(behaviour))  # type: ignore[arg-type]
    writes = Writes(registry, MemoryStore(), keyring())
    gate = Gate(registry, writes=writes)
    envelope = await gate.handle(CALL, ALICE, command_id="o")
    assert envelope.error_type is ErrorCode.FAILED_FINAL
    assert behaviour.calls == 0
    with pytest.raises(ConfigurationError):
        await writes.executor.execute(
            WriteJob(
                tool=registry.get("reserve"),
                arguments={"sku": "a"},
                principal=ALICE,
                key="k",
                plan_hash="h",
                call_id="c",
            ),
            deadline=1e12,
        )


def _withdrawing_tool(behaviour: Behaviour, side_effect: SideEffect, store: SqlStore) -> object:
    """A write whose version hook withdraws its own plan: a rejection racing execution."""

    def withdraw(_args: object, ctx: ToolContext) -> str:
        plan_id = ctx.call_id  # execute_plan's default call id is the plan id
        found = store.get_plan(plan_id)
        if found is not None and found.version == 3:
            store.move_plan(
                plan_id,
                expect_state=found.state,
                expect_version=found.version,
                state=PlanState.REJECTED,
                at=found.updated_at,
            )
        return "v1"

    @tool(
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        side_effect=side_effect,
        confirmation=ConfirmationPolicy(mode=ConfirmationMode.CONFIRM),
        resolve_version=withdraw,
        reconcile=lambda _key, _ctx: NotExecuted(),
    )
    def reserve(ctx: ToolContext, sku: Annotated[str, Field(max_length=16)]) -> str:
        """Take one item of a SKU out of stock."""
        behaviour.calls += 1
        if ctx.transaction is not None:
            ctx.transaction.execute(
                stock.update().where(stock.c.sku == sku).values(count=stock.c.count - 1),
            )
        return sku

    return reserve


@pytest.mark.parametrize("side_effect", [SideEffect.LOCAL_WRITE, SideEffect.EXTERNAL_WRITE])
async def test_a_plan_withdrawn_while_its_execution_starts_never_runs(
    local: tuple[Gate, SqlStore, Behaviour, FixedClock],
    side_effect: SideEffect,
) -> None:
    _, store, behaviour, clock = local
    registry = Registry()
    registry.register(_withdrawing_tool(behaviour, side_effect, store))  # type: ignore[arg-type]
    writes = Writes(registry, store, keyring(), clock=clock)
    gate = Gate(registry, writes=writes, clock=clock)
    proposed = await gate.handle(CALL, ALICE)
    plan_id = proposed.data["plan_id"]
    token = await writes.issue_token(plan_id, ALICE)
    await writes.confirm(plan_id, token.value, ALICE)
    refused = await writes.execute_plan(plan_id, ALICE)
    assert refused.code is ErrorCode.PLAN_CLOSED
    assert behaviour.calls == 0
    assert _count(store) == 10
    assert (await writes.get_plan(plan_id, ALICE)).state is PlanState.REJECTED


@pytest.mark.parametrize(
    ("mode", "trust", "source"),
    [
        ("fail", Trust.UNTRUSTED, None),
        ("transient", Trust.UNTRUSTED, None),
        ("crash", Trust.HANDRAIL, "handrail"),
    ],
)
async def test_a_rolled_back_write_is_labelled_by_who_wrote_its_message_also_on_replay(
    local: tuple[Gate, SqlStore, Behaviour, FixedClock],
    mode: str,
    trust: Trust,
    source: str | None,
) -> None:
    gate, _, behaviour, _ = local
    behaviour.mode = mode
    first = await gate.handle(CALL, ALICE, command_id="o")
    again = await gate.handle(CALL, ALICE, command_id="o")
    assert first.error_type is not None
    assert again.error_type is first.error_type
    assert (first.trust, first.source) == (again.trust, again.source) == (trust, source)
