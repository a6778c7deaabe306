"""Telemetry of the write path: stage spans, execute_tool spans outside a gate call, metrics.

Every Telemetry here is on SDK providers with in-memory exporters (`_flow_telemetry`);
the gate has none (its spans are its own), so what is read back is the write path's.
Durations and the time to recover are on a FixedClock: their values are known.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Annotated

import pytest
from opentelemetry.trace import SpanKind, StatusCode
from pydantic import Field

from _flow_telemetry import Capture, attribute_values, captured
from _records import execution_record
from _write_tools import ALICE, ARGS, Downstream, keyring, ticket_tool
from handrail import (
    ConfirmationMode,
    ConfirmationPolicy,
    ExecutionStatus,
    Gate,
    IdempotencyMode,
    IdempotencyPolicy,
    Reconciler,
    Registry,
    RiskLevel,
    SideEffect,
    Store,
    Tool,
    ToolCall,
    ToolContext,
    WriteRefusedError,
    Writes,
    tool,
)
from handrail.errors import ErrorCode
from handrail.execution import plan_key
from handrail.store import MemoryStore
from handrail.testing import FixedClock, sequential_ids
from handrail.writes.reconcile import resolve_by_person

pytestmark = pytest.mark.anyio

TOOL = "create_ticket"
WAIT_S = 20.0
"""Bound on every wait; never reached while the write path keeps its deadlines."""
CALL = f"execute_tool {TOOL}"


async def _no_wait(_seconds: float) -> None:
    await asyncio.sleep(0)


@pytest.fixture
def capture() -> Iterator[Capture]:
    with captured() as made:
        yield made


class World:
    """A ticket tool over a scripted downstream; Writes and Reconciler with telemetry."""

    def __init__(self, store: Store, capture: Capture, **options: object) -> None:
        self.store = store
        self.capture = capture
        self.downstream = Downstream()
        self.registry = Registry()
        self.registry.register(ticket_tool(self.downstream, **options))  # type: ignore[arg-type]
        self.registry.register(
            ticket_tool(
                self.downstream,
                name="quick_ticket",
                mode=ConfirmationMode.NONE,
                idempotency=IdempotencyMode.COMMAND_ID,
            )
        )
        self.clock = FixedClock()
        self.writes = Writes(
            self.registry,
            store,
            keyring(),
            clock=self.clock,
            new_id=sequential_ids("p"),
            sleep=_no_wait,
            telemetry=capture.telemetry,
        )
        self.gate = Gate(self.registry, writes=self.writes, clock=self.clock)

    def reconciler(self) -> Reconciler:
        return Reconciler(
            self.registry,
            self.store,
            clock=self.clock,
            sleep=_no_wait,
            telemetry=self.capture.telemetry,
        )

    async def confirmed(self) -> str:
        """A plan of alice's ticket, proposed through the gate and confirmed: its id."""
        envelope = await self.gate.handle(ToolCall(id="c1", name=TOOL, arguments=ARGS), ALICE)
        plan_id = str(envelope.data["plan_id"])
        token = await self.writes.issue_token(plan_id, ALICE)
        await self.writes.confirm(plan_id, token.value, ALICE)
        return plan_id

    async def unknown(self) -> tuple[str, str]:
        """A confirmed plan whose execution lost its answer: (plan id, key)."""
        self.downstream.script.append("lose")
        plan_id = await self.confirmed()
        outcome = await self.writes.execute_plan(plan_id, ALICE)
        assert outcome.status is ExecutionStatus.UNKNOWN
        return plan_id, plan_key(tenant_id="t1", tool=TOOL, plan_id=plan_id)


@pytest.fixture
def world(capture: Capture) -> World:
    return World(MemoryStore(), capture)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# --- spans ----------------------------------------------------------------------------------------


async def test_a_confirmed_plan_runs_as_an_execute_tool_span_with_its_execution_inside(
    world: World, capture: Capture
) -> None:
    plan_id = await world.confirmed()
    outcome = await world.writes.execute_plan(plan_id, ALICE, call_id="call-7")
    assert outcome.ok
    assert outcome.key is not None
    call = capture.one(CALL)
    assert call.parent is None
    assert call.kind is SpanKind.INTERNAL
    assert call.status.status_code is StatusCode.UNSET
    assert dict(call.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": TOOL,
        "gen_ai.tool.type": "function",
        "gen_ai.tool.call.id": "call-7",
        "handrail.plan.id": plan_id,
        "handrail.tenant": "t1",
        "handrail.risk": "L2_REVERSIBLE_WRITE",
        "handrail.status": "ok",
        "handrail.idempotency_key.hash": _sha(outcome.key),
        "handrail.attempt": 1,
        "handrail.execution.status": "SUCCEEDED",
        "handrail.replayed": False,
    }
    (execute,) = capture.children(call)
    assert execute.name == "handrail.execute"
    assert (execute.attributes or {})["handrail.stage"] == "execute"
    assert (execute.attributes or {})["handrail.idempotency_key.hash"] == _sha(outcome.key)
    plan = capture.one("handrail.plan")
    assert (plan.attributes or {})["handrail.plan.id"] == plan_id
    assert (plan.attributes or {})["handrail.stage"] == "plan"
    confirm = capture.one("handrail.confirm")
    assert (confirm.attributes or {})["handrail.outcome"] == "confirmed"
    assert capture.total("handrail.tool.calls", gen_ai__tool__name=TOOL, handrail__status="ok") == 1
    for stage in ("plan", "confirm", "execute", "call"):
        count, took = capture.observed(
            "handrail.tool.duration", gen_ai__tool__name=TOOL, handrail__stage=stage
        )
        assert (count, took) == (1, 0.0)  # the FixedClock did not move


async def test_no_span_carries_the_arguments_the_result_or_the_idempotency_key(
    world: World, capture: Capture
) -> None:
    plan_id = await world.confirmed()
    outcome = await world.writes.execute_plan(plan_id, ALICE)
    assert outcome.business_id == "TK-0001"
    values = attribute_values(capture.spans())
    assert values
    for secret in ("asset-1", "CONNECT_TIMEOUT", "TK-0001", str(outcome.key)):
        assert not [value for value in values if secret in value], secret


async def test_a_repeated_execution_is_one_effect_and_one_duplicate_prevented(
    world: World, capture: Capture
) -> None:
    plan_id = await world.confirmed()
    first = await world.writes.execute_plan(plan_id, ALICE)
    again = await world.writes.execute_plan(plan_id, ALICE)
    assert (first.replayed, again.replayed) == (False, True)
    assert world.downstream.effects() == 1
    assert capture.total("handrail.duplicates_prevented", gen_ai__tool__name=TOOL) == 1
    executions = capture.named("handrail.execute")
    assert [(s.attributes or {})["handrail.replayed"] for s in executions] == [False, True]
    assert len(capture.named(CALL)) == 2


async def test_a_downstream_that_fails_for_sure_is_an_error_span_and_a_failed_call(
    world: World, capture: Capture
) -> None:
    world.downstream.script.append("fail")
    plan_id = await world.confirmed()
    outcome = await world.writes.execute_plan(plan_id, ALICE)
    assert outcome.error_is(ErrorCode.FAILED_FINAL)
    for span in (capture.one(CALL), capture.one("handrail.execute")):
        assert span.status.status_code is StatusCode.ERROR
        assert (span.attributes or {})["error.type"] == "FAILED_FINAL"
        assert (span.attributes or {})["handrail.error.code"] == "FAILED_FINAL"
    assert capture.total("handrail.tool.calls", handrail__error__code="FAILED_FINAL") == 1


async def test_a_refused_confirmation_sets_its_code_and_is_no_error(world: World) -> None:
    envelope = await world.gate.handle(ToolCall(id="c1", name=TOOL, arguments=ARGS), ALICE)
    plan_id = str(envelope.data["plan_id"])
    with pytest.raises(WriteRefusedError) as refused:
        await world.writes.confirm(plan_id, "forged-token", ALICE)
    confirm = world.capture.one("handrail.confirm")
    assert confirm.status.status_code is StatusCode.UNSET
    assert (confirm.attributes or {})["handrail.error.code"] == refused.value.code.value
    assert (confirm.attributes or {})["gen_ai.tool.name"] == TOOL  # the plan was remembered


async def test_a_plan_that_does_not_exist_is_an_execute_tool_span_without_a_tool(
    world: World, capture: Capture
) -> None:
    outcome = await world.writes.execute_plan("p-404", ALICE)
    assert outcome.error_is(ErrorCode.NOT_FOUND)
    call = capture.one("execute_tool")
    assert call.status.status_code is StatusCode.UNSET
    assert (call.attributes or {})["handrail.error.code"] == "NOT_FOUND"
    assert "gen_ai.tool.name" not in (call.attributes or {})
    assert capture.named("handrail.execute") == []


async def test_a_rejected_plan_is_a_confirm_span_with_its_outcome(world: World) -> None:
    envelope = await world.gate.handle(ToolCall(id="c1", name=TOOL, arguments=ARGS), ALICE)
    await world.writes.reject(str(envelope.data["plan_id"]), ALICE, reason="not now")
    confirm = world.capture.one("handrail.confirm")
    assert (confirm.attributes or {})["handrail.outcome"] == "rejected"


async def test_write_stages_inside_a_call_are_children_of_the_current_span(
    world: World, capture: Capture
) -> None:
    with capture.telemetry.tracer.start_as_current_span("caller") as caller:
        await world.gate.handle(ToolCall(id="c1", name=TOOL, arguments=ARGS), ALICE)
        quick = ToolCall(id="c2", name="quick_ticket", arguments=ARGS)
        envelope = await world.gate.handle(quick, ALICE, command_id="cmd-1")
    assert envelope.ok
    own = caller.get_span_context().span_id
    for name in ("handrail.plan", "handrail.execute"):
        span = capture.one(name)
        assert span.parent is not None
        assert span.parent.span_id == own
    # Inside a call the write is a stage of it: no execute_tool span of its own.
    assert [s.name for s in capture.spans() if s.name.startswith("execute_tool")] == []


# --- UNKNOWN and reconciliation -------------------------------------------------------------------


async def test_a_lost_answer_opens_one_unknown_that_its_reconciliation_closes(
    store: Store, capture: Capture
) -> None:
    world = World(store, capture)
    _, key = await world.unknown()
    execute = capture.one("handrail.execute")
    assert execute.status.status_code is StatusCode.ERROR
    assert (execute.attributes or {})["error.type"] == "OUTCOME_UNKNOWN"
    assert capture.total("handrail.executions.unknown", gen_ai__tool__name=TOOL) == 1
    world.clock.advance(120)
    report = await world.reconciler().run_once()
    assert report.succeeded == (key,)
    assert capture.total("handrail.executions.unknown") == 0
    assert capture.observed("handrail.reconciliation.duration", gen_ai__tool__name=TOOL) == (
        1,
        120.0,
    )
    assert (
        capture.total(
            "handrail.reconciliations",
            handrail__outcome="succeeded",
            handrail__resolved_by="reconciler",
        )
        == 1
    )
    reconcile = capture.one("handrail.reconcile")
    call = capture.parent(reconcile)
    assert call is not None
    assert call.name == CALL
    assert (call.attributes or {})["handrail.idempotency_key.hash"] == _sha(key)
    assert str((call.attributes or {})["gen_ai.tool.call.id"]).startswith("reconcile-")
    assert (call.attributes or {})["handrail.outcome"] == "succeeded"
    assert (reconcile.attributes or {})["handrail.stage"] == "reconcile"


async def test_a_write_proven_not_executed_is_retried_under_its_key_and_recovers_once(
    world: World, capture: Capture
) -> None:
    world.downstream.script.append("crash")  # raises before committing: nothing happened
    plan_id = await world.confirmed()
    assert (await world.writes.execute_plan(plan_id, ALICE)).status is ExecutionStatus.UNKNOWN
    world.clock.advance(120)  # past the tool's 60 s grace: "not found" is proof
    report = await world.reconciler().run_once()
    assert len(report.succeeded) == 1
    assert world.downstream.effects() == 1
    assert capture.total("handrail.executions.unknown") == 0
    assert capture.observed("handrail.reconciliation.duration") == (1, 120.0)
    assert capture.total("handrail.reconciliations", handrail__outcome="succeeded") == 1
    reconcile = capture.one("handrail.reconcile")
    retry = capture.named("handrail.execute")[-1]
    assert capture.parent(retry) is reconcile
    assert (retry.attributes or {})["handrail.attempt"] == 2


async def test_a_check_without_proof_leaves_the_write_open_and_counts_still_unknown(
    capture: Capture,
) -> None:
    world = World(MemoryStore(), capture)
    world.downstream.lookup_fails = True
    await world.unknown()
    world.clock.advance(120)
    report = await world.reconciler().run_once()
    assert len(report.still_unknown) == 1
    assert capture.total("handrail.executions.unknown") == 1
    assert capture.total("handrail.reconciliations", handrail__outcome="still_unknown") == 1
    assert capture.observed("handrail.reconciliation.duration") == (0, 0)


async def test_a_crashed_worker_s_write_is_opened_by_the_reconciler_that_finds_it(
    capture: Capture,
) -> None:
    world = World(MemoryStore(), capture)
    world.downstream.lookup_fails = True
    started = world.clock.now() - timedelta(minutes=5)
    crashed = execution_record(
        idempotency_key="hk1_crashed",
        tool=TOOL,
        principal=ALICE.snapshot(),
        created_at=started,
        updated_at=started,
        lease_expires_at=started + timedelta(seconds=30),
    )
    assert world.store.insert_execution(crashed)
    report = await world.reconciler().run_once()
    assert report.expired_leases == ("hk1_crashed",)
    assert capture.total("handrail.executions.unknown", gen_ai__tool__name=TOOL) == 1
    assert capture.total("handrail.reconciliations", handrail__outcome="still_unknown") == 1


async def test_a_person_resolving_an_unknown_write_counts_a_reconciliation_by_a_person(
    capture: Capture,
) -> None:
    world = World(MemoryStore(), capture, reconcile=False)
    _, key = await world.unknown()
    world.clock.advance(30)
    resolve_by_person(
        world.store,
        key,
        succeeded=False,
        operator="ops-anna",
        note="the ticket system has no such ticket",
        clock=world.clock,
        telemetry=capture.telemetry,
    )
    assert capture.total("handrail.executions.unknown") == 0
    assert (
        capture.total(
            "handrail.reconciliations", handrail__outcome="failed", handrail__resolved_by="person"
        )
        == 1
    )
    assert capture.observed("handrail.reconciliation.duration", handrail__outcome="failed") == (
        1,
        30.0,
    )


@pytest.fixture
def gate_open() -> Iterator[threading.Event]:
    """An event the blocking tool waits on; set when the test ends at the latest."""
    event = threading.Event()
    yield event
    event.set()


def _late_failure(gate_open: threading.Event) -> Tool:
    """A sync write that outlives its 50 ms deadline in its thread, then raises."""

    @tool(
        name="late_ticket",
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        side_effect=SideEffect.EXTERNAL_WRITE,
        timeout=0.05,
        confirmation=ConfirmationPolicy(mode=ConfirmationMode.CONFIRM),
        idempotency=IdempotencyPolicy(mode=IdempotencyMode.PLAN),
    )
    def late_ticket(asset_id: Annotated[str, Field(pattern=r"^asset-[0-9]+$")]) -> dict[str, str]:
        """Open a ticket in a system that answers late, with an error."""
        gate_open.wait(WAIT_S)
        raise RuntimeError(asset_id)

    return late_ticket


async def test_an_attempt_that_ends_unknown_after_its_caller_left_is_counted_when_it_ends(
    capture: Capture, gate_open: threading.Event
) -> None:
    world = World(MemoryStore(), capture)
    world.registry.register(_late_failure(gate_open))
    late = world.registry.get("late_ticket")
    ctx = ToolContext(
        principal=ALICE,
        call_id="c1",
        tool="late_ticket",
        deadline=world.clock.monotonic() + WAIT_S,
        clock=world.clock,
    )
    bound = late.bind({"asset_id": "asset-1"})
    plan = await world.writes.propose(late, bound, ALICE, mode=ConfirmationMode.CONFIRM, ctx=ctx)
    token = await world.writes.issue_token(plan.plan_id, ALICE)
    await world.writes.confirm(plan.plan_id, token.value, ALICE)
    try:
        outcome = await asyncio.wait_for(world.writes.execute_plan(plan.plan_id, ALICE), WAIT_S)
    finally:
        gate_open.set()
    assert outcome.status is ExecutionStatus.RUNNING  # held: its thread is still inside
    assert await world.writes.executor.drain(timeout=WAIT_S)
    record = world.store.get_execution(str(outcome.key))
    assert record is not None
    assert record.status is ExecutionStatus.UNKNOWN  # the late end, written by the held path
    assert capture.total("handrail.executions.unknown", gen_ai__tool__name="late_ticket") == 1


# --- no telemetry ---------------------------------------------------------------------------------

_WITHOUT = """
import asyncio, json, sys
sys.path.insert(0, sys.argv[1])
from _write_tools import ALICE, ARGS, Downstream, keyring, ticket_tool
from handrail import Gate, Reconciler, Registry, ToolCall, Writes
from handrail.store import MemoryStore
from handrail.testing import FixedClock

async def main():
    downstream, registry, store, clock = Downstream(), Registry(), MemoryStore(), FixedClock()
    registry.register(ticket_tool(downstream))
    writes = Writes(registry, store, keyring(), clock=clock)
    gate = Gate(registry, writes=writes, clock=clock)
    envelope = await gate.handle(ToolCall(id="c", name="create_ticket", arguments=ARGS), ALICE)
    plan_id = envelope.data["plan_id"]
    token = await writes.issue_token(plan_id, ALICE)
    await writes.confirm(plan_id, token.value, ALICE)
    downstream.script.append("lose")
    first = await writes.execute_plan(plan_id, ALICE)
    clock.advance(120)
    report = await Reconciler(registry, store, clock=clock).run_once()
    return [first.status.value, len(report.succeeded)]

done = asyncio.run(main())
print(json.dumps([done, sorted(m for m in sys.modules if m.startswith("opentelemetry"))]))
"""


def test_without_telemetry_the_write_path_loads_no_opentelemetry() -> None:
    tests = Path(__file__).resolve().parent.parent
    done = subprocess.run(  # noqa: S603 - our own interpreter and a fixed script
        [sys.executable, "-c", _WITHOUT, str(tests)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    ran, loaded = json.loads(done.stdout.splitlines()[-1])
    assert ran == ["UNKNOWN", 1]
    assert loaded == []
