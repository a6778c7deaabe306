"""A purge must not reopen a key: exactly-once does not depend on retention settings.

A plan valid for 48 hours whose result is kept for one hour: once the retention purge
has run, the plan must still read EXECUTED and a repeat (in this process or another,
before or after the plan's expiry) must be refused as already executed, never run
again. The same for a host's command id. The downstream never dedupes: its count of
calls is the number of effects.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Annotated, Any

import pytest
from pydantic import Field

from handrail import (
    ErrorCode,
    Gate,
    Principal,
    Registry,
    RiskLevel,
    SideEffect,
    Status,
    ToolCall,
    ToolContext,
    ToolFailed,
    tool,
)
from handrail.declare.definition import Tool
from handrail.declare.hooks import Found, NotExecuted, Reconciled
from handrail.envelope import Trust
from handrail.execution import ExecutionStatus, command_key, plan_key
from handrail.plans import PlanState
from handrail.signing import SigningKey
from handrail.spec import (
    ConfirmationMode,
    ConfirmationPolicy,
    IdempotencyMode,
    IdempotencyPolicy,
)
from handrail.store import Store
from handrail.testing import FixedClock, MemoryAuditSink, sequential_ids
from handrail.writes.confirmation import Keyring
from handrail.writes.reconcile import Reconciler
from handrail.writes.service import Writes

pytestmark = pytest.mark.anyio

ALICE = Principal(user_id="alice", tenant_id="t1", permissions=frozenset({"tickets.open"}))
HOUR = 3600.0
PLAN_VALID_S = 48 * HOUR
RETENTION_S = 1 * HOUR
REPEATS = 8
RETIRED = "asset-0"
WAIT_S = 60.0


@dataclass
class Tickets:
    """A ticket system that opens a new ticket on every call: it never dedupes."""

    opened: list[tuple[str, str]] = field(default_factory=list)

    def open(self, key: str, asset_id: str) -> dict[str, str]:
        if asset_id == RETIRED:
            raise ToolFailed("The asset is retired; no ticket can be opened for it.")
        self.opened.append((key, asset_id))
        return {"ticket_no": f"TK-{len(self.opened):04d}", "asset_id": asset_id}

    def reconcile(self, key: str, _ctx: ToolContext) -> Reconciled:
        found = [n for n, (k, _) in enumerate(self.opened, 1) if k == key]
        return Found({"ticket_no": f"TK-{found[0]:04d}"}) if found else NotExecuted()


def _tools(tickets: Tickets) -> list[Tool]:
    @tool(
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        namespace="tickets",
        side_effect=SideEffect.EXTERNAL_WRITE,
        permissions={"tickets.open"},
        confirmation=ConfirmationPolicy(mode=ConfirmationMode.CONFIRM, ttl_seconds=PLAN_VALID_S),
        idempotency=IdempotencyPolicy(mode=IdempotencyMode.PLAN, retention_seconds=RETENTION_S),
        reconcile=tickets.reconcile,
        business_id="ticket_no",
    )
    async def open_planned(
        ctx: ToolContext, asset_id: Annotated[str, Field(pattern=r"^asset-[0-9]+$")]
    ) -> dict[str, str]:
        """Open a recovery ticket once the user confirmed it."""
        assert ctx.idempotency_key is not None
        return tickets.open(ctx.idempotency_key, asset_id)

    @tool(
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        namespace="tickets",
        side_effect=SideEffect.EXTERNAL_WRITE,
        permissions={"tickets.open"},
        confirmation=ConfirmationPolicy(),
        idempotency=IdempotencyPolicy(
            mode=IdempotencyMode.COMMAND_ID, retention_seconds=RETENTION_S
        ),
        reconcile=tickets.reconcile,
        business_id="ticket_no",
    )
    async def open_now(
        ctx: ToolContext, asset_id: Annotated[str, Field(pattern=r"^asset-[0-9]+$")]
    ) -> dict[str, str]:
        """Open a recovery ticket under the host's command id."""
        assert ctx.idempotency_key is not None
        return tickets.open(ctx.idempotency_key, asset_id)

    return [open_planned, open_now]


@dataclass
class World:
    store: Store
    clock: FixedClock = field(default_factory=FixedClock)
    audit: MemoryAuditSink = field(default_factory=MemoryAuditSink)
    tickets: Tickets = field(default_factory=Tickets)
    registry: Registry = field(init=False)
    gate: Gate = field(init=False)
    writes: Writes = field(init=False)

    def __post_init__(self) -> None:
        self.registry = Registry()
        for made in _tools(self.tickets):
            self.registry.register(made)
        self.writes = self.process()
        self.gate = Gate(self.registry, writes=self.writes, clock=self.clock, audit=self.audit)

    def process(self) -> Writes:
        """A Writes as another process would build it: nothing remembered in memory."""
        return Writes(
            self.registry,
            self.store,
            Keyring(SigningKey("k1", b"purge-tests-confirmation-key-0123456789")),
            clock=self.clock,
            audit=self.audit,
            new_id=sequential_ids("plan"),
        )

    async def executed_plan(self) -> str:
        call = ToolCall(id="c-plan", name="tickets.open_planned", arguments={"asset_id": "asset-1"})
        proposed = await self.gate.handle(call, ALICE)
        assert proposed.error_type is ErrorCode.NEEDS_CONFIRMATION
        plan_id = str(proposed.data["plan_id"])
        token = await self.writes.issue_token(plan_id, ALICE)
        await self.writes.confirm(plan_id, token.value, ALICE)
        first = await self.writes.execute_plan(plan_id, ALICE)
        assert first.envelope.ok
        assert first.envelope.data == {"ticket_no": "TK-0001", "asset_id": "asset-1"}
        return plan_id

    async def purge_after_retention(self) -> None:
        self.clock.advance(RETENTION_S + 1)
        report = await Reconciler(self.registry, self.store, clock=self.clock).run_once()
        assert report.purged == 1

    async def command(self, command_id: str, asset_id: str) -> Any:
        arguments = {"asset_id": asset_id}
        call = ToolCall(id=f"c-{command_id}", name="tickets.open_now", arguments=arguments)
        return await self.gate.handle(call, ALICE, command_id=command_id)


@pytest.fixture
def world(store: Store) -> World:
    return World(store=store)


@pytest.mark.invariant(4)
@pytest.mark.parametrize("where", ["same process", "another process"])
async def test_a_plan_whose_record_was_purged_stays_executed_and_is_refused_as_already_executed(
    world: World, where: str
) -> None:
    plan_id = await world.executed_plan()
    await world.purge_after_retention()

    writes = world.writes if where == "same process" else world.process()
    assert (await writes.get_plan(plan_id, ALICE)).state is PlanState.EXECUTED
    again = await writes.execute_plan(plan_id, ALICE)
    key = plan_key(tenant_id="t1", tool="tickets.open_planned", plan_id=plan_id)
    assert world.tickets.opened == [(key, "asset-1")]
    assert again.envelope.error_type is ErrorCode.ALREADY_EXECUTED
    assert again.replayed
    assert again.envelope.data == {"business_id": "TK-0001"}
    assert again.record is not None
    assert again.record.status is ExecutionStatus.SUCCEEDED
    assert again.record.purged_at is not None


@pytest.mark.invariant(4)
async def test_a_purged_plan_repeated_after_its_expiry_is_already_executed_not_expired(
    world: World,
) -> None:
    plan_id = await world.executed_plan()
    await world.purge_after_retention()
    world.clock.advance(PLAN_VALID_S)

    for writes in (world.writes, world.process()):
        again = await writes.execute_plan(plan_id, ALICE)
        assert again.envelope.error_type is ErrorCode.ALREADY_EXECUTED
        assert (await writes.get_plan(plan_id, ALICE)).state is PlanState.EXECUTED
    assert len(world.tickets.opened) == 1


@pytest.mark.invariant(4)
async def test_repeats_racing_the_purge_make_no_second_effect(world: World) -> None:
    plan_id = await world.executed_plan()
    world.clock.advance(RETENTION_S + 1)

    purge = asyncio.to_thread(world.store.purge_executions, now=world.clock.now())
    repeats = [world.process().execute_plan(plan_id, ALICE) for _ in range(REPEATS)]
    purged, *outcomes = await asyncio.wait_for(asyncio.gather(purge, *repeats), WAIT_S)

    assert purged == 1
    assert len(world.tickets.opened) == 1
    for outcome in outcomes:
        assert outcome.replayed
        # Before the purge the stored result answers; after it, the refusal.
        if outcome.envelope.ok:
            assert outcome.envelope.data == {"ticket_no": "TK-0001", "asset_id": "asset-1"}
        else:
            assert outcome.envelope.error_type is ErrorCode.ALREADY_EXECUTED


@pytest.mark.invariant(5)
async def test_a_command_id_whose_record_was_purged_never_runs_again(world: World) -> None:
    first = await world.command("cmd-1", "asset-1")
    assert first.status is Status.OK
    await world.purge_after_retention()

    again = await world.command("cmd-1", "asset-1")
    assert len(world.tickets.opened) == 1
    assert again.error_type is ErrorCode.ALREADY_EXECUTED
    assert again.data == {"business_id": "TK-0001"}
    # The business id came from downstream: the tool's data, untrusted.
    assert (again.trust, again.source) == (Trust.UNTRUSTED, None)
    # Other arguments under the same command id are still another intent.
    other = await world.command("cmd-1", "asset-2")
    assert other.error_type is ErrorCode.IDEMPOTENCY_MISMATCH
    assert len(world.tickets.opened) == 1

    key = command_key(
        tenant_id="t1",
        tool="tickets.open_now",
        command_id="cmd-1",
        user_id="alice",
        scope=world.registry.get("tickets.open_now").spec.idempotency.scope,
    )
    tombstone = world.store.get_execution(key)
    assert tombstone is not None
    assert (tombstone.status, tombstone.business_id) == (ExecutionStatus.SUCCEEDED, "TK-0001")
    assert tombstone.result is None
    assert tombstone.arguments == "{}"


async def test_a_later_pass_keeps_the_tombstone_for_good(world: World) -> None:
    await world.command("cmd-1", "asset-1")
    await world.purge_after_retention()
    world.clock.advance(365 * 24 * HOUR)
    report = await Reconciler(world.registry, world.store, clock=world.clock).run_once()
    assert report.purged == 0
    again = await world.command("cmd-1", "asset-1")
    assert again.error_type is ErrorCode.ALREADY_EXECUTED
    assert len(world.tickets.opened) == 1


async def test_a_write_that_failed_for_good_is_still_refused_with_its_code_after_the_purge(
    world: World,
) -> None:
    first = await world.command("cmd-1", RETIRED)
    assert first.error_type is ErrorCode.FAILED_FINAL
    assert (first.trust, first.source) == (Trust.UNTRUSTED, None)
    await world.purge_after_retention()
    again = await world.command("cmd-1", RETIRED)
    assert again.error_type is ErrorCode.FAILED_FINAL
    # The tool's message is gone: what is left is Handrail's own wording.
    assert (again.trust, again.source) == (Trust.HANDRAIL, "handrail")
    assert world.tickets.opened == []
