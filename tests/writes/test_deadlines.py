"""A write's deadline: the tool's own declared timeout, on every path that runs it.

Each tool here blocks on an event that is only set when the test ends, and declares a
small timeout; a path that forgot the tool's timeout would keep waiting until the
test's own bound (`WAIT_S`) and fail. No test measures time: each asserts the code.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Iterator
from typing import Annotated, TypeVar

import pytest
from pydantic import Field

from _write_tools import ALICE, ARGS, Downstream, keyring, ticket_tool
from handrail import (
    ConfirmationMode,
    ConfirmationPolicy,
    ErrorCode,
    ExecutionStatus,
    Gate,
    IdempotencyMode,
    IdempotencyPolicy,
    Registry,
    RiskLevel,
    SideEffect,
    Store,
    Tool,
    ToolCall,
    ToolContext,
    Writes,
    tool,
)
from handrail.execution import plan_key
from handrail.testing import FixedClock, sequential_ids
from handrail.writes.reconcile import Reconciler

pytestmark = pytest.mark.anyio

T = TypeVar("T")

DECLARED_S = 0.05
"""The declared timeout of every tool here; small, so a test that passes is quick."""
WAIT_S = 20.0
"""Bound on every wait of a test; never reached when the tool's timeout is applied.

Below the 30 s that `execute_plan` used to apply whatever the tool declared."""
FAR_S = 3600.0
"""A caller's budget far beyond the tool's declared timeout."""


async def _no_wait(_seconds: float) -> None:
    await asyncio.sleep(0)


async def _bounded(work: Awaitable[T]) -> T:
    return await asyncio.wait_for(work, WAIT_S)


class World:
    def __init__(self, store: Store, *tools: Tool) -> None:
        self.store = store
        self.clock = FixedClock()
        self.registry = Registry()
        for each in tools:
            self.registry.register(each)
        self.writes = Writes(
            self.registry,
            store,
            keyring(),
            clock=self.clock,
            worker_id="w1",
            new_id=sequential_ids("p"),
            sleep=_no_wait,
        )
        self.gate = Gate(self.registry, writes=self.writes, clock=self.clock, sleep=_no_wait)

    async def confirmed(self, name: str, arguments: str = ARGS) -> str:
        # Proposed directly, not through the gate: the gate bounds a proposal by the
        # tool's (tiny) timeout too, which a loaded machine may overrun.
        tool = self.registry.get(name)
        ctx = ToolContext(
            principal=ALICE,
            call_id="c1",
            tool=name,
            deadline=self.clock.monotonic() + WAIT_S,
            clock=self.clock,
        )
        bound = tool.bind(json.loads(arguments))
        plan = await self.writes.propose(tool, bound, ALICE, mode=ConfirmationMode.CONFIRM, ctx=ctx)
        plan_id = plan.plan_id
        token = await self.writes.issue_token(plan_id, ALICE)
        await self.writes.confirm(plan_id, token.value, ALICE)
        return plan_id


@pytest.fixture
def hanging() -> Iterator[Downstream]:
    """A downstream whose next call hangs until the test ends."""
    downstream = Downstream(release=asyncio.Event())
    downstream.script.append("hang")
    yield downstream
    assert downstream.release is not None
    downstream.release.set()


@pytest.fixture
def gate_open() -> Iterator[threading.Event]:
    """An event blocking threads of sync tools and hooks; set when the test ends."""
    event = threading.Event()
    yield event
    event.set()


def _blocking_sync_tool(gate_open: threading.Event, *, versioned: bool = False) -> Tool:
    """A sync write (run in a worker thread) that blocks; or whose version check blocks."""

    def version_of(_args: object, _ctx: ToolContext) -> str:
        if not gate_open.wait(WAIT_S):  # pragma: no cover - only when the deadline is ignored
            return "timed-out"
        return "v1"

    @tool(
        name="block_sync",
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        side_effect=SideEffect.EXTERNAL_WRITE,
        timeout=DECLARED_S,
        confirmation=ConfirmationPolicy(mode=ConfirmationMode.CONFIRM),
        idempotency=IdempotencyPolicy(mode=IdempotencyMode.PLAN),
        resolve_version=version_of if versioned else None,
    )
    def block_sync(
        ctx: ToolContext, asset_id: Annotated[str, Field(pattern=r"^asset-[0-9]+$")]
    ) -> dict[str, str]:
        """Open a ticket in a system that does not answer."""
        if versioned:
            return {"asset_id": asset_id}
        gate_open.wait(WAIT_S)
        return {"asset_id": asset_id}

    return block_sync


# --- the plan path -------------------------------------------------------------------------------


@pytest.mark.invariant(6)
async def test_a_plan_runs_under_its_tools_declared_timeout_when_no_timeout_is_given(
    store: Store, hanging: Downstream
) -> None:
    world = World(store, ticket_tool(hanging, timeout=DECLARED_S))
    plan_id = await world.confirmed("create_ticket")

    outcome = await _bounded(world.writes.execute_plan(plan_id, ALICE))

    assert outcome.envelope.error_type is ErrorCode.OUTCOME_UNKNOWN
    assert outcome.record is not None
    assert outcome.record.status is ExecutionStatus.UNKNOWN
    assert hanging.calls == 1


async def test_a_callers_longer_budget_does_not_extend_the_tools_declared_timeout(
    store: Store, hanging: Downstream
) -> None:
    world = World(store, ticket_tool(hanging, timeout=DECLARED_S))
    plan_id = await world.confirmed("create_ticket")

    outcome = await _bounded(world.writes.execute_plan(plan_id, ALICE, timeout=FAR_S))

    assert outcome.envelope.error_type is ErrorCode.OUTCOME_UNKNOWN


async def test_a_sync_tool_blocked_in_its_thread_is_unknown_after_its_declared_timeout(
    store: Store, gate_open: threading.Event
) -> None:
    world = World(store, _blocking_sync_tool(gate_open))
    plan_id = await world.confirmed("block_sync", '{"asset_id": "asset-1"}')

    try:
        outcome = await _bounded(world.writes.execute_plan(plan_id, ALICE))
    finally:
        gate_open.set()  # the abandoned thread may end now

    assert outcome.envelope.error_type is ErrorCode.OUTCOME_UNKNOWN
    assert outcome.record is not None
    # The thread is still inside the tool: its lease is held (RUNNING) until it ends.
    assert outcome.record.status is ExecutionStatus.RUNNING
    assert await world.writes.executor.drain(timeout=20.0)


async def test_a_version_check_that_hangs_is_a_timeout_and_nothing_is_written(
    store: Store, gate_open: threading.Event
) -> None:
    world = World(store, _blocking_sync_tool(gate_open, versioned=True))
    # The proposal reads the version too: let that one through, then block.
    gate_open.set()
    plan_id = await world.confirmed("block_sync", '{"asset_id": "asset-1"}')
    gate_open.clear()

    try:
        outcome = await _bounded(world.writes.execute_plan(plan_id, ALICE))
    finally:
        gate_open.set()  # the abandoned check may end now

    assert outcome.envelope.error_type is ErrorCode.TIMEOUT
    assert outcome.envelope.retryable
    assert outcome.record is None
    key = plan_key(tenant_id=ALICE.tenant_id, tool="block_sync", plan_id=plan_id)
    assert store.get_execution(key) is None


# --- the command path, one call and a batch ------------------------------------------------------


def _command_tool(downstream: Downstream) -> Tool:
    return ticket_tool(
        downstream,
        timeout=DECLARED_S,
        mode=ConfirmationMode.NONE,
        idempotency=IdempotencyMode.COMMAND_ID,
    )


async def test_a_command_runs_under_its_tools_declared_timeout_whatever_deadline_is_passed(
    store: Store, hanging: Downstream
) -> None:
    world = World(store, _command_tool(hanging))
    ticket = world.registry.get("create_ticket")
    bound = ticket.bind({"asset_id": "asset-1", "reason": "CONNECT_TIMEOUT since 09:30"})

    outcome = await _bounded(
        world.writes.execute_command(
            ticket,
            bound,
            ALICE,
            command_id="cmd-1",
            call_id="c1",
            deadline=world.clock.monotonic() + FAR_S,
        )
    )

    assert outcome.envelope.error_type is ErrorCode.OUTCOME_UNKNOWN
    assert outcome.record is not None
    assert outcome.record.status is ExecutionStatus.UNKNOWN


async def test_a_command_through_the_gate_runs_under_its_tools_declared_timeout(
    store: Store, hanging: Downstream
) -> None:
    world = World(store, _command_tool(hanging))
    call = ToolCall(id="c1", name="create_ticket", arguments=ARGS)

    envelope = await _bounded(world.gate.handle(call, ALICE, command_id="cmd-1", timeout=FAR_S))

    assert envelope.error_type is ErrorCode.OUTCOME_UNKNOWN


async def test_a_command_in_a_batch_runs_under_its_tools_declared_timeout(
    store: Store, hanging: Downstream
) -> None:
    world = World(store, _command_tool(hanging))
    calls = [ToolCall(id="c1", name="create_ticket", arguments=ARGS)]

    (envelope,) = await _bounded(
        world.gate.handle_batch(calls, ALICE, command_ids={"c1": "cmd-1"}, timeout=FAR_S)
    )

    assert envelope.error_type is ErrorCode.OUTCOME_UNKNOWN


# --- the reconciler's retry ----------------------------------------------------------------------


async def test_a_reconcilers_retry_runs_under_the_tools_declared_timeout(store: Store) -> None:
    downstream = Downstream(release=asyncio.Event())
    world = World(store, ticket_tool(downstream, timeout=DECLARED_S, grace=30.0))
    plan_id = await world.confirmed("create_ticket")
    downstream.script.append("lose")
    lost = await _bounded(world.writes.execute_plan(plan_id, ALICE))
    assert lost.envelope.error_type is ErrorCode.OUTCOME_UNKNOWN
    downstream.tickets.clear()  # proof: the system of record has no such key
    downstream.script.append("hang")
    world.clock.advance(120)
    reconciler = Reconciler(world.registry, store, clock=world.clock, sleep=_no_wait)
    key = plan_key(tenant_id=ALICE.tenant_id, tool="create_ticket", plan_id=plan_id)
    try:
        report = await _bounded(reconciler.run_once())
    finally:
        assert downstream.release is not None
        downstream.release.set()

    assert report.retried == (key,)
    record = store.get_execution(key)
    assert record is not None
    assert record.status is ExecutionStatus.UNKNOWN
    assert downstream.calls == 2
