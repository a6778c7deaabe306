"""The write path on PostgreSQL with bounded connections, and with backends that vanish.

A burst of executions waits for a connection within its deadline instead of opening
more (the store runs as a role whose CONNECTION LIMIT is exactly its bound); a backend
ended by `pg_terminate_backend` becomes an envelope with a code: TRANSIENT while
nothing ran, OUTCOME_UNKNOWN once the tool was called. Never an escaped StoreError.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from _pg_admin import (
    WAIT_S,
    app_name,
    backends,
    executions_locked,
    limited_role,
    terminate,
    until_async,
)
from _stores import STORE_TABLES
from _write_tools import ALICE, ARGS, Downstream, keyring, ticket_tool
from handrail import (
    ConfirmationMode,
    ErrorCode,
    ExecutionStatus,
    Gate,
    IdempotencyMode,
    Reconciler,
    Registry,
    ToolCall,
    Writes,
)
from handrail.store import PostgresStore
from handrail.testing import FixedClock, sequential_ids

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


async def _no_wait(_seconds: float) -> None:
    await asyncio.sleep(0)


@pytest.fixture
def migrated(postgres_url: str) -> str:
    """The session database, migrated and emptied; its URL."""
    store = PostgresStore.open(postgres_url)
    try:
        with store.engine.begin() as connection:
            connection.exec_driver_sql(f"TRUNCATE {', '.join(STORE_TABLES)} RESTART IDENTITY")
    finally:
        store.close()
    return postgres_url


@dataclass
class Site:
    store: PostgresStore
    name: str
    downstream: Downstream
    registry: Registry
    clock: FixedClock
    writes: Writes
    gate: Gate

    def fresh_writes(self) -> Writes:
        """Another instance over the same store: it knows no plan from memory."""
        return Writes(self.registry, self.store, keyring(), clock=self.clock, sleep=_no_wait)

    async def confirmed(self, n: int) -> str:
        arguments = ARGS.replace("asset-1", f"asset-{n}")
        call = ToolCall(id=f"c{n}", name="create_ticket", arguments=arguments)
        envelope = await self.gate.handle(call, ALICE)
        assert envelope.error_type is ErrorCode.NEEDS_CONFIRMATION
        plan_id = str(envelope.data["plan_id"])
        token = await self.writes.issue_token(plan_id, ALICE)
        await self.writes.confirm(plan_id, token.value, ALICE)
        return plan_id


@contextmanager
def _site(
    url: str,
    *,
    mode: ConfirmationMode = ConfirmationMode.CONFIRM,
    timeout: float = 5.0,
    pool_size: int = 2,
    async_pool_size: int = 2,
) -> Iterator[Site]:
    name = app_name()
    store = PostgresStore.open(
        url,
        migrate=False,
        pool_size=pool_size,
        max_overflow=0,
        async_pool_size=async_pool_size,
        application_name=name,
    )
    downstream = Downstream(release=asyncio.Event())
    registry = Registry()
    command = mode is ConfirmationMode.NONE
    registry.register(
        ticket_tool(
            downstream,
            mode=mode,
            idempotency=IdempotencyMode.COMMAND_ID if command else IdempotencyMode.PLAN,
            timeout=timeout,
        )
    )
    clock = FixedClock()
    writes = Writes(
        registry,
        store,
        keyring(),
        clock=clock,
        new_id=sequential_ids("p"),
        sleep=_no_wait,
    )
    gate = Gate(registry, writes=writes, clock=clock, sleep=_no_wait)
    try:
        yield Site(store, name, downstream, registry, clock, writes, gate)
    finally:
        store.close()


def _command(n: int) -> ToolCall:
    return ToolCall(
        id=f"c{n}", name="create_ticket", arguments=ARGS.replace("asset-1", f"asset-{n}")
    )


# --- bounded connections -------------------------------------------------------------------------


async def test_a_burst_of_executions_waits_for_a_connection_instead_of_opening_more(
    migrated: str,
) -> None:
    with (
        limited_role(migrated, 1 + 2) as role_url,
        _site(role_url, mode=ConfirmationMode.NONE, pool_size=1, async_pool_size=2) as site,
    ):
        tool = site.registry.get("create_ticket")

        async def one(n: int) -> ErrorCode | None:
            arguments = {"asset_id": f"asset-{n}", "reason": "CONNECT_TIMEOUT since 09:30"}
            outcome = await site.writes.execute_command(
                tool, tool.bind(arguments), ALICE, command_id=f"cmd-{n}", call_id=f"c{n}"
            )
            return outcome.code

        codes = await asyncio.wait_for(asyncio.gather(*(one(n) for n in range(20))), WAIT_S)

        assert codes == [None] * 20
        assert site.downstream.effects() == 20
        assert backends(migrated, site.name) <= 1 + 2


async def test_an_execution_without_a_connection_by_its_deadline_is_transient_and_runs_nothing(
    migrated: str,
) -> None:
    with _site(migrated, mode=ConfirmationMode.NONE, timeout=0.2, async_pool_size=2) as site:
        with executions_locked(migrated):
            held = [
                asyncio.create_task(site.gate.handle(_command(n), ALICE, command_id=f"k{n}"))
                for n in range(2)
            ]
            await until_async(
                lambda: backends(migrated, site.name, waiting_on_lock=True) == 2,
                "both async connections blocked in their claims",
            )
            late = await asyncio.wait_for(
                site.gate.handle_write(_command(9), ALICE, command_id="k9"), WAIT_S
            )
            assert late.code is ErrorCode.TRANSIENT
            assert late.envelope.retryable
            assert late.record is None
            assert backends(migrated, site.name) == 2
        first = await asyncio.wait_for(asyncio.gather(*held), WAIT_S)
        assert [envelope.status.value for envelope in first] == ["ok", "ok"]
        assert site.downstream.calls == 2

        again = await site.gate.handle_write(_command(9), ALICE, command_id="k9")
        assert again.ok
        assert site.downstream.effects() == 3


# --- backends that vanish ------------------------------------------------------------------------


async def test_a_backend_dropped_before_the_claim_is_a_transient_outcome_and_a_retry_runs_once(
    migrated: str,
) -> None:
    with _site(migrated) as site:
        warm = await site.writes.execute_plan(await site.confirmed(1), ALICE)
        assert warm.ok
        plan_id = await site.confirmed(2)
        assert terminate(migrated, site.name) >= 1

        dropped = await site.writes.execute_plan(plan_id, ALICE)

        assert dropped.code is ErrorCode.TRANSIENT
        assert dropped.envelope.retryable
        assert dropped.record is None
        assert site.downstream.calls == 1
        retried = await site.writes.execute_plan(plan_id, ALICE)
        assert retried.ok
        assert not retried.replayed
        assert site.downstream.effects() == 2


async def test_backends_dropped_under_every_pool_cost_at_most_one_transient_outcome_each(
    migrated: str,
) -> None:
    with _site(migrated) as site:
        plan_id = await site.confirmed(1)
        other = site.fresh_writes()  # it must read the plan: both pools are in use
        assert (await other.get_plan(plan_id, ALICE)).plan.plan_id == plan_id
        assert terminate(migrated, site.name) >= 1

        codes: list[ErrorCode | None] = []
        for _ in range(3):
            outcome = await other.execute_plan(plan_id, ALICE)
            codes.append(outcome.code)
            if outcome.ok:
                break

        assert codes[-1] is None
        assert set(codes[:-1]) <= {ErrorCode.TRANSIENT}
        assert site.downstream.calls == 1
        assert site.downstream.effects() == 1


async def test_a_backend_dropped_under_a_command_through_the_gate_is_a_transient_envelope(
    migrated: str,
) -> None:
    with _site(migrated, mode=ConfirmationMode.NONE) as site:
        assert (await site.gate.handle(_command(1), ALICE, command_id="k1")).ok
        assert terminate(migrated, site.name) >= 1

        envelope = await site.gate.handle(_command(2), ALICE, command_id="k2")

        assert envelope.error_type is ErrorCode.TRANSIENT
        assert envelope.retryable
        assert site.downstream.calls == 1


async def test_a_backend_dropped_while_the_tool_runs_is_unknown_until_reconciled(
    migrated: str,
) -> None:
    with _site(migrated) as site:
        plan_id = await site.confirmed(1)
        site.downstream.script.append("hang")
        running = asyncio.create_task(site.writes.execute_plan(plan_id, ALICE))
        await until_async(lambda: site.downstream.calls == 1, "the tool is running")
        await asyncio.to_thread(terminate, migrated, site.name)
        assert site.downstream.release is not None
        site.downstream.release.set()

        outcome = await asyncio.wait_for(running, WAIT_S)

        assert outcome.code is ErrorCode.OUTCOME_UNKNOWN
        assert outcome.key is not None
        (ticket,) = site.downstream.tickets.values()
        stuck = site.store.get_execution(outcome.key)
        assert stuck is not None
        assert stuck.status is ExecutionStatus.RUNNING
        assert stuck.lease_expires_at is not None
        site.clock.advance((stuck.lease_expires_at - site.clock.now()).total_seconds() + 1)
        report = await Reconciler(site.registry, site.store, clock=site.clock).run_once()
        assert report.succeeded == (outcome.key,)
        settled = await site.writes.record_for(plan_id, ALICE)
        assert settled is not None
        assert (settled.status, settled.business_id) == (
            ExecutionStatus.SUCCEEDED,
            ticket["ticket_no"],
        )
        assert site.downstream.calls == 1
