"""An abandoned attempt can never land after a retry: nothing re-runs a write still running.

A sync tool whose deadline passed (or whose caller stopped waiting) keeps running in its
worker thread: asyncio cannot stop a thread, and it may still make the effect. While it
may, its record stays RUNNING under its lease, renewed by a heartbeat, and a reconciler
re-runs nothing however long "not found" lasts; once the thread ends, its own outcome is
written. A worker whose lease has run out never starts the tool at all. The ticket
system never dedupes by key: its list of opened tickets is the list of effects.

Deadlines are real (asyncio's timers), everything else runs on a FixedClock; the pool
of `_threads.StartFirstPool` makes the tool's thread start before its deadline's timer.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal, cast

import pytest
from pydantic import Field

from _threads import StartFirstPool
from handrail import (
    ErrorCode,
    Gate,
    Principal,
    Registry,
    RiskLevel,
    SideEffect,
    ToolCall,
    ToolContext,
    ToolFailed,
    ToolRetryable,
    tool,
)
from handrail.declare.definition import Tool
from handrail.declare.hooks import Found, NotExecuted, Reconciled
from handrail.errors import StoreError
from handrail.execution import ExecutionRecord, ExecutionStatus, plan_key
from handrail.fencing import run_in_thread
from handrail.signing import SigningKey
from handrail.spec import ConfirmationMode, ConfirmationPolicy, ReconcilePolicy, RetryPolicy
from handrail.store import Store
from handrail.testing import FixedClock, MemoryAuditSink
from handrail.writes.confirmation import Keyring
from handrail.writes.reconcile import PassReport, Reconciler
from handrail.writes.service import Writes

pytestmark = pytest.mark.anyio

ALICE = Principal(user_id="alice", tenant_id="t1", request_id="req-abandoned")
WAIT_S = 60.0
"""Bound on every wait of the test's own; never reached when things work."""
TOOL_TIMEOUT_S = 0.05
"""The tool's deadline in real seconds: the one its blocked thread outlives."""
POLICY = ReconcilePolicy(not_found_grace=10.0, first_check=1.0, lease_grace=300.0)
PAST_GRACE_S = POLICY.not_found_grace + POLICY.first_check + 1.0
"""Past the grace and the first check, well inside the lease: a retry's moment, before."""
NOTHING = PassReport()
SHORT_LEASE = ReconcilePolicy(not_found_grace=10.0, first_check=1.0, lease_grace=1.0)
"""A lease of one second past the deadline, renewed every third of a second."""

Mode = Literal["ok", "retryable", "fail", "crash"]


@dataclass
class Tickets:
    """A ticket system that opens a new ticket on every call; calls block until released."""

    pool: StartFirstPool
    opened: list[str] = field(default_factory=list)
    calls: int = 0
    script: deque[Mode] = field(default_factory=deque)
    release: threading.Event = field(default_factory=threading.Event)
    on_enter: Callable[[], None] = lambda: None
    left: threading.Event = field(default_factory=threading.Event)
    """Set whenever a call returns or raises."""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def call(self, key: str, asset_id: str) -> dict[str, str]:
        try:
            return self._call(key, asset_id)
        finally:
            self.left.set()

    def _call(self, key: str, asset_id: str) -> dict[str, str]:
        with self._lock:
            self.calls += 1
            mode = self.script.popleft() if self.script else "ok"
        self.pool.entered()
        self.on_enter()
        if mode == "retryable":
            raise ToolRetryable("The ticket system is busy.", retry_after=1.0)
        if not self.release.wait(WAIT_S):
            raise RuntimeError("the test never released the ticket system")
        if mode == "fail":
            raise ToolFailed("The asset is retired; no ticket was opened.")
        if mode == "crash":
            raise RuntimeError("the driver lost its socket")
        with self._lock:
            self.opened.append(key)
            return {"ticket_no": f"TK-{len(self.opened):04d}", "asset_id": asset_id}

    def reconcile(self, key: str, _ctx: ToolContext) -> Reconciled:
        with self._lock:
            found = [n for n, k in enumerate(self.opened, 1) if k == key]
        return Found({"ticket_no": f"TK-{found[0]:04d}"}) if found else NotExecuted()


def _sync_tool(
    tickets: Tickets, policy: ReconcilePolicy, retry: RetryPolicy | None, timeout: float
) -> Tool:
    @tool(
        name="open_ticket",
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        side_effect=SideEffect.EXTERNAL_WRITE,
        confirmation=ConfirmationPolicy(mode=ConfirmationMode.CONFIRM),
        timeout=timeout,
        retry=retry,
        reconcile_policy=policy,
        reconcile=tickets.reconcile,
        business_id="ticket_no",
    )
    def open_ticket(
        ctx: ToolContext, asset_id: Annotated[str, Field(pattern=r"^asset-[0-9]+$")]
    ) -> dict[str, str]:
        """Open a recovery ticket for an asset (a blocking client, so a sync tool)."""
        assert ctx.idempotency_key is not None
        return tickets.call(ctx.idempotency_key, asset_id)

    return open_ticket


def _two_threads_tool(tickets: Tickets, policy: ReconcilePolicy) -> Tool:
    @tool(
        name="open_ticket",
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        side_effect=SideEffect.EXTERNAL_WRITE,
        confirmation=ConfirmationPolicy(mode=ConfirmationMode.CONFIRM),
        timeout=TOOL_TIMEOUT_S,
        reconcile_policy=policy,
        reconcile=tickets.reconcile,
        business_id="ticket_no",
    )
    async def open_ticket(
        ctx: ToolContext, asset_id: Annotated[str, Field(pattern=r"^asset-[0-9]+$")]
    ) -> object:
        """Open two tickets at once, each through a blocking client in a worker thread."""
        key = ctx.idempotency_key
        return await asyncio.gather(
            run_in_thread(tickets.call, key, asset_id), run_in_thread(tickets.call, key, asset_id)
        )

    return open_ticket


@dataclass
class World:
    store: Store
    pool: StartFirstPool
    policy: ReconcilePolicy = POLICY
    retry: RetryPolicy | None = None
    timeout: float = TOOL_TIMEOUT_S
    two_threads: bool = False
    sleep: Callable[[float], Awaitable[None]] | None = None
    clock: FixedClock = field(default_factory=FixedClock)
    audit: MemoryAuditSink = field(default_factory=MemoryAuditSink)
    tickets: Tickets = field(init=False)
    registry: Registry = field(init=False)
    writes: Writes = field(init=False)
    reconciler: Reconciler = field(init=False)

    def __post_init__(self) -> None:
        self.tickets = Tickets(pool=self.pool)
        self.registry = Registry()
        made = (
            _two_threads_tool(self.tickets, self.policy)
            if self.two_threads
            else _sync_tool(self.tickets, self.policy, self.retry, self.timeout)
        )
        self.registry.register(made)
        extra: dict[str, Any] = {} if self.sleep is None else {"sleep": self.sleep}
        self.writes = Writes(
            self.registry,
            self.store,
            Keyring(SigningKey("k1", b"abandoned-attempts-confirmation-key-01")),
            clock=self.clock,
            audit=self.audit,
            worker_id="worker-a",
            **extra,
        )
        self.reconciler = Reconciler(
            self.registry, self.store, clock=self.clock, audit=self.audit, worker_id="r1"
        )

    def writes_on(self, store: object) -> None:
        """This world's writes, on a wrapper of its store."""
        self.writes = Writes(
            self.registry,
            cast("Store", store),
            Keyring(SigningKey("k1", b"abandoned-attempts-confirmation-key-01")),
            clock=self.clock,
            audit=self.audit,
            worker_id="worker-a",
        )

    async def confirmed_plan(self) -> str:
        gate = Gate(self.registry, writes=self.writes, clock=self.clock)
        call = ToolCall(id="call-1", name="open_ticket", arguments={"asset_id": "asset-7"})
        proposed = await gate.handle(call, ALICE)
        assert proposed.error_type is ErrorCode.NEEDS_CONFIRMATION
        plan_id = str(proposed.data["plan_id"])
        token = await self.writes.issue_token(plan_id, ALICE)
        await self.writes.confirm(plan_id, token.value, ALICE)
        return plan_id

    def key(self, plan_id: str) -> str:
        return plan_key(tenant_id="t1", tool="open_ticket", plan_id=plan_id)

    def record(self, plan_id: str) -> ExecutionRecord:
        found = self.store.get_execution(self.key(plan_id))
        assert found is not None
        return found

    def stages(self) -> list[tuple[str, str]]:
        return [(e.stage, e.decision) for e in self.audit.events if e.kind == "write"]


Make = Callable[..., World]


@pytest.fixture
async def make(store: Store) -> AsyncIterator[Make]:
    """Worlds on `store`, on a loop whose worker threads start before a deadline's timer."""
    pool = StartFirstPool()
    loop = asyncio.get_running_loop()
    loop.set_default_executor(pool)
    made: list[World] = []

    def build(**options: Any) -> World:
        world = World(store=store, pool=pool, **options)
        made.append(world)
        return world

    try:
        yield build
    finally:
        for world in made:
            world.tickets.release.set()
            assert await world.writes.executor.drain(WAIT_S)
        loop.set_default_executor(ThreadPoolExecutor())
        pool.shutdown(wait=True)


async def _held_past_its_deadline(world: World, plan_id: str) -> ExecutionRecord:
    """Execute the plan: the call outlives its deadline. The record as it is then."""
    first = await world.writes.execute_plan(plan_id, ALICE, timeout=TOOL_TIMEOUT_S)
    assert first.envelope.error_type is ErrorCode.OUTCOME_UNKNOWN
    assert (world.tickets.calls, world.tickets.opened) == (1, [])
    return world.record(plan_id)


@pytest.mark.invariant(4)
@pytest.mark.invariant(6)
async def test_a_sync_write_past_its_deadline_is_not_rerun_while_its_thread_may_still_land(
    make: Make,
) -> None:
    world = make()
    plan_id = await world.confirmed_plan()
    key = world.key(plan_id)
    held = await _held_past_its_deadline(world, plan_id)

    # Past the not-found grace: the ticket system has no ticket, yet nothing is re-run.
    world.clock.advance(PAST_GRACE_S)
    assert await world.reconciler.run_once() == NOTHING
    assert world.tickets.calls == 1
    assert world.record(plan_id).status is ExecutionStatus.RUNNING
    assert (held.status, held.lease_owner) == (ExecutionStatus.RUNNING, "worker-a")
    assert held.lease_expires_at is not None
    assert held.lease_expires_at > world.clock.now()
    # A repeat meanwhile waits for the running write, and does not run it either.
    repeat = await world.writes.execute_plan(plan_id, ALICE, timeout=0)
    assert repeat.envelope.error_type is ErrorCode.IN_PROGRESS

    # The abandoned call lands: its own outcome is written, under its lease.
    world.tickets.release.set()
    assert await world.writes.executor.drain(WAIT_S)
    assert world.tickets.opened == [key]
    record = world.record(plan_id)
    assert (record.status, record.attempts, record.business_id) == (
        ExecutionStatus.SUCCEEDED,
        1,
        "TK-0001",
    )
    assert record.lease_owner is None
    assert ("abandoned", "held") in world.stages()
    assert ("late_outcome", "succeeded") in world.stages()

    assert await world.reconciler.run_once() == NOTHING
    replay = await world.writes.execute_plan(plan_id, ALICE)
    assert replay.replayed
    assert replay.envelope.data == {"ticket_no": "TK-0001", "asset_id": "asset-7"}
    assert world.tickets.calls == 1
    assert world.tickets.opened == [key]


@pytest.mark.invariant(4)
async def test_a_caller_that_stops_waiting_leaves_the_write_held_until_its_thread_ends(
    make: Make,
) -> None:
    world = make()
    inside = asyncio.Event()
    loop = asyncio.get_running_loop()
    world.tickets.on_enter = lambda: loop.call_soon_threadsafe(inside.set)
    plan_id = await world.confirmed_plan()
    running = asyncio.create_task(world.writes.execute_plan(plan_id, ALICE, timeout=3600))
    await asyncio.wait_for(inside.wait(), WAIT_S)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(running, WAIT_S)
    assert world.record(plan_id).status is ExecutionStatus.RUNNING

    world.clock.advance(PAST_GRACE_S)
    assert await world.reconciler.run_once() == NOTHING
    world.tickets.release.set()
    assert await world.writes.executor.drain(WAIT_S)
    assert world.record(plan_id).status is ExecutionStatus.SUCCEEDED
    assert world.tickets.opened == [world.key(plan_id)]
    assert world.tickets.calls == 1


class _Renewals:
    """A Store that lets a test wait for a lease renewal written after a given moment."""

    def __init__(self, inner: Store) -> None:
        self._inner = inner
        self._changed = threading.Condition()
        self._leases: list[datetime] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def replace_execution(self, record: ExecutionRecord, **expected: Any) -> bool:
        written = self._inner.replace_execution(record, **expected)
        if written and record.status is ExecutionStatus.RUNNING and record.lease_expires_at:
            with self._changed:
                self._leases.append(record.lease_expires_at)
                self._changed.notify_all()
        return written

    def renewed_past(self, moment: datetime) -> bool:
        with self._changed:
            return self._changed.wait_for(
                lambda: any(lease > moment for lease in self._leases), WAIT_S
            )


async def test_a_heartbeat_keeps_renewing_the_lease_while_the_thread_runs(
    make: Make, store: Store
) -> None:
    # Without renewals, the lease would be long gone below.
    renewals = _Renewals(store)
    world = make(policy=SHORT_LEASE)
    world.writes_on(renewals)
    plan_id = await world.confirmed_plan()
    held = await _held_past_its_deadline(world, plan_id)
    assert held.lease_expires_at is not None

    world.clock.advance(3600)
    assert held.lease_expires_at < world.clock.now()
    assert await asyncio.to_thread(renewals.renewed_past, world.clock.now())
    assert await world.reconciler.run_once() == NOTHING
    assert world.record(plan_id).lease_owner == "worker-a"

    world.tickets.release.set()
    assert await world.writes.executor.drain(WAIT_S)
    assert world.record(plan_id).status is ExecutionStatus.SUCCEEDED
    assert world.tickets.calls == 1
    assert len(world.tickets.opened) == 1


class _SuspendableClock(FixedClock):
    """A FixedClock whose wall time can jump alone, as for a machine that was suspended.

    Monotonic time does not count a suspension, so the worker's own deadline is not
    past, while every other process sees its lease expired.
    """

    def suspend(self, seconds: float) -> None:
        self._now += timedelta(seconds=seconds)


@pytest.mark.invariant(4)
async def test_a_worker_whose_lease_ran_out_during_a_backoff_never_starts_the_tool(
    make: Make,
) -> None:
    world: World
    clock = _SuspendableClock()

    async def backoff(_seconds: float) -> None:
        # While this worker waits to retry, its machine is suspended and its lease runs
        # out; a reconciler takes the record over, proves nothing was done, and runs it
        # under the same key.
        running = world.record(plan_id)
        assert running.lease_expires_at is not None
        past = (running.lease_expires_at - clock.now()).total_seconds()
        clock.suspend(past + POLICY.not_found_grace)
        report = await world.reconciler.run_once()
        assert report.expired_leases == report.succeeded == (world.key(plan_id),)

    # The reconciler's own run must not outlive its deadline here: a long tool timeout.
    world = make(retry=RetryPolicy(max_attempts=2), sleep=backoff, timeout=WAIT_S, clock=clock)
    world.tickets.release.set()
    world.tickets.script.append("retryable")
    plan_id = await world.confirmed_plan()
    outcome = await world.writes.execute_plan(plan_id, ALICE)

    assert world.tickets.opened == [world.key(plan_id)]
    assert world.tickets.calls == 2  # the first attempt, then the reconciler's
    assert outcome.envelope.error_type is ErrorCode.OUTCOME_UNKNOWN
    assert outcome.record is None
    assert ("fenced", "not_started") in world.stages()
    record = world.record(plan_id)
    assert (record.status, record.attempts) == (ExecutionStatus.SUCCEEDED, 2)


@pytest.mark.parametrize(
    ("mode", "status", "code"),
    [
        ("fail", ExecutionStatus.FAILED_FINAL, "FAILED_FINAL"),
        ("crash", ExecutionStatus.UNKNOWN, "OUTCOME_UNKNOWN"),
    ],
)
async def test_an_abandoned_call_that_ends_in_an_error_is_settled_by_its_own_outcome(
    make: Make, mode: Mode, status: ExecutionStatus, code: str
) -> None:
    world = make()
    world.tickets.script.append(mode)
    plan_id = await world.confirmed_plan()
    await _held_past_its_deadline(world, plan_id)
    world.tickets.release.set()
    assert await world.writes.executor.drain(WAIT_S)
    record = world.record(plan_id)
    assert (record.status, record.error_code, record.lease_owner) == (status, code, None)
    assert world.tickets.opened == []
    if status is ExecutionStatus.UNKNOWN:
        # "Not found" becomes proof only a grace after the call ended, not before.
        assert record.next_check_at is not None
        wait = (record.next_check_at - world.clock.now()).total_seconds()
        assert wait >= POLICY.not_found_grace


async def test_a_call_whose_two_threads_ran_at_once_ends_unknown_not_with_either_result(
    make: Make,
) -> None:
    world = make(two_threads=True)
    plan_id = await world.confirmed_plan()
    first = await world.writes.execute_plan(plan_id, ALICE, timeout=TOOL_TIMEOUT_S)
    assert first.envelope.error_type is ErrorCode.OUTCOME_UNKNOWN
    assert world.record(plan_id).status is ExecutionStatus.RUNNING
    world.tickets.release.set()
    assert await world.writes.executor.drain(WAIT_S)
    record = world.record(plan_id)
    assert (record.status, record.lease_owner) == (ExecutionStatus.UNKNOWN, None)
    # This tool opens two tickets per call by design; neither answer is the call's.
    assert len(world.tickets.opened) == 2
    assert ("late_outcome", "unknown") in world.stages()


class _NoSettling:
    """A Store that refuses, with a StoreError, every write that settles a record."""

    def __init__(self, inner: Store) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def replace_execution(self, record: ExecutionRecord, **expected: Any) -> bool:
        if record.status.settled:
            raise StoreError("execution update failed: OperationalError")
        return self._inner.replace_execution(record, **expected)


async def test_a_late_outcome_the_store_refuses_leaves_the_record_to_the_reconciler(
    make: Make, store: Store
) -> None:
    world = make()
    world.writes_on(_NoSettling(store))
    plan_id = await world.confirmed_plan()
    key = world.key(plan_id)
    held = await _held_past_its_deadline(world, plan_id)
    world.tickets.release.set()
    assert await world.writes.executor.drain(WAIT_S)
    assert world.record(plan_id).status is ExecutionStatus.RUNNING
    assert ("fenced", "refused") in world.stages()

    # Once the lease has run out, the reconciler finds the ticket the late call opened.
    assert held.lease_expires_at is not None
    world.clock.advance((held.lease_expires_at - world.clock.now()).total_seconds() + 1)
    report = await world.reconciler.run_once()
    assert report.expired_leases == report.succeeded == (key,)
    assert world.record(plan_id).status is ExecutionStatus.SUCCEEDED
    assert (world.tickets.calls, world.tickets.opened) == (1, [key])


async def test_a_held_lease_that_another_writer_takes_is_given_up_for_good(
    make: Make, store: Store
) -> None:
    world = make(policy=SHORT_LEASE)
    plan_id = await world.confirmed_plan()
    await _held_past_its_deadline(world, plan_id)

    # Someone else writes the record meanwhile (racing the heartbeat: retried until won).
    for _ in range(100):
        current = world.record(plan_id)
        taken = current.updated(lease_owner="someone-else")
        if store.replace_execution(
            taken, expect_status=current.status, expect_version=current.version
        ):
            break
    else:  # pragma: no cover - a heartbeat cannot win a hundred times in a row
        pytest.fail("the record could not be taken over")
    assert await world.writes.executor.drain(WAIT_S)  # the keeper gave up: nothing held
    assert ("lease", "lost") in world.stages()

    world.tickets.release.set()
    assert await asyncio.to_thread(world.tickets.left.wait, WAIT_S)
    assert world.tickets.opened == [world.key(plan_id)]
    assert world.record(plan_id) == taken
    assert not [e for e in world.audit.events if e.stage == "late_outcome"]


async def test_a_reconcilers_own_retry_past_its_deadline_is_held_too(make: Make) -> None:
    world = make()
    world.tickets.script.append("crash")
    world.tickets.release.set()
    plan_id = await world.confirmed_plan()
    key = world.key(plan_id)
    crashed = await world.writes.execute_plan(plan_id, ALICE)
    assert crashed.envelope.error_type is ErrorCode.OUTCOME_UNKNOWN
    assert world.record(plan_id).status is ExecutionStatus.UNKNOWN

    # Proven not executed: the reconciler retries, and its call outlives its deadline.
    world.tickets.release.clear()
    world.clock.advance(PAST_GRACE_S)
    assert (await world.reconciler.run_once()).retried == (key,)
    held = world.record(plan_id)
    assert (held.status, held.lease_owner, held.attempts) == (ExecutionStatus.RUNNING, "r1", 2)
    other = Reconciler(world.registry, world.store, clock=world.clock, worker_id="r2")
    world.clock.advance(PAST_GRACE_S)
    assert await other.run_once() == NOTHING

    world.tickets.release.set()
    assert await world.reconciler.drain(WAIT_S)
    record = world.record(plan_id)
    assert (record.status, record.attempts) == (ExecutionStatus.SUCCEEDED, 2)
    assert (world.tickets.calls, world.tickets.opened) == (2, [key])


class _ClosingSink:
    """An audit sink that refuses events once closed, as BatchingAuditSink does."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self.closed = False

    def emit(self, events: Any) -> None:
        if self.closed:
            raise StoreError("the audit sink is closed")
        self.events.extend(events)


async def test_a_late_outcome_is_written_even_after_the_audit_sink_was_closed(
    make: Make, store: Store
) -> None:
    world = make()
    sink = _ClosingSink()
    world.writes = Writes(
        world.registry,
        store,
        Keyring(SigningKey("k1", b"abandoned-attempts-confirmation-key-01")),
        clock=world.clock,
        audit=sink,
        worker_id="worker-a",
    )
    plan_id = await world.confirmed_plan()
    await _held_past_its_deadline(world, plan_id)
    sink.closed = True
    world.tickets.release.set()
    assert await world.writes.executor.drain(WAIT_S)
    assert world.record(plan_id).status is ExecutionStatus.SUCCEEDED
    assert [(e.stage, e.decision) for e in sink.events][-1] == ("abandoned", "held")
