"""The reconciler: UNKNOWN leaves only through the downstream system's answer by key."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from _records import execution_record
from _write_tools import ALICE, ARGS, Downstream, keyring, ticket_tool
from handrail import (
    ExecutionStatus,
    Gate,
    MemoryAuditSink,
    NoProof,
    Reconciler,
    Registry,
    Store,
    ToolCall,
    ToolContext,
    Writes,
)
from handrail.declare.hooks import Reconciled
from handrail.execution import plan_key
from handrail.testing import FixedClock, sequential_ids

pytestmark = pytest.mark.anyio


async def _no_wait(_seconds: float) -> None:
    await asyncio.sleep(0)


class Setup:
    def __init__(self, store: Store, **options: object) -> None:
        self.store = store
        self.downstream = Downstream()
        self.tool = ticket_tool(self.downstream, **options)  # type: ignore[arg-type]
        self.registry = Registry()
        self.registry.register(self.tool)
        self.clock = FixedClock()
        self.audit = MemoryAuditSink()
        self.writes = Writes(
            self.registry,
            store,
            keyring(),
            clock=self.clock,
            audit=self.audit,
            new_id=sequential_ids("p"),
            sleep=_no_wait,
        )
        self.gate = Gate(self.registry, writes=self.writes, clock=self.clock)

    def reconciler(self, worker: str = "r1") -> Reconciler:
        return Reconciler(
            self.registry,
            self.store,
            clock=self.clock,
            audit=self.audit,
            worker_id=worker,
            sleep=_no_wait,
        )

    async def unknown(self) -> tuple[str, str]:
        """A confirmed plan whose execution lost its response: (plan id, key)."""
        self.downstream.script.append("lose")
        envelope = await self.gate.handle(
            ToolCall(id="c", name="create_ticket", arguments=ARGS), ALICE
        )
        plan_id = str(envelope.data["plan_id"])
        token = await self.writes.issue_token(plan_id, ALICE)
        await self.writes.confirm(plan_id, token.value, ALICE)
        outcome = await self.writes.execute_plan(plan_id, ALICE)
        assert outcome.record is not None
        assert outcome.record.status is ExecutionStatus.UNKNOWN
        return plan_id, plan_key(tenant_id="t1", tool="create_ticket", plan_id=plan_id)

    def status(self, key: str) -> ExecutionStatus:
        record = self.store.get_execution(key)
        assert record is not None
        return record.status


@pytest.mark.invariant(6)
async def test_a_found_effect_settles_with_the_original_business_id(store: Store) -> None:
    setup = Setup(store)
    plan_id, key = await setup.unknown()
    early = await setup.reconciler().run_once()
    assert early.succeeded == ()  # the first check is not due yet
    setup.clock.advance(5)
    report = await setup.reconciler().run_once()
    assert report.succeeded == (key,)
    record = store.get_execution(key)
    assert record is not None
    assert (record.status, record.business_id) == (ExecutionStatus.SUCCEEDED, "TK-0001")
    again = await setup.writes.execute_plan(plan_id, ALICE)
    assert again.replayed
    assert again.envelope.data["ticket_no"] == "TK-0001"
    assert setup.downstream.calls == 1
    assert setup.downstream.effects() == 1


@pytest.mark.invariant(6)
async def test_not_found_inside_the_grace_window_is_not_proof(store: Store) -> None:
    setup = Setup(store, grace=60.0)
    _, key = await setup.unknown()
    setup.downstream.tickets.clear()  # the replica has not seen it yet
    setup.clock.advance(10)
    report = await setup.reconciler().run_once()
    assert report.still_unknown == (key,)
    assert report.retried == report.succeeded == ()
    assert setup.status(key) is ExecutionStatus.UNKNOWN
    assert setup.downstream.calls == 1


async def test_proven_not_executed_is_retried_under_the_same_key(store: Store) -> None:
    setup = Setup(store, grace=30.0)
    _, key = await setup.unknown()
    setup.downstream.tickets.clear()  # proof: the system of record has no such key
    setup.clock.advance(120)
    report = await setup.reconciler().run_once()
    assert report.succeeded == (key,)
    record = store.get_execution(key)
    assert record is not None
    assert record.status is ExecutionStatus.SUCCEEDED
    assert record.attempts == 2
    assert key in setup.downstream.tickets
    assert setup.downstream.effects() == 1


async def test_no_proof_backs_off_and_escalates_to_people(store: Store) -> None:
    setup = Setup(store)
    _, key = await setup.unknown()
    setup.downstream.lookup_fails = True
    reconciler = setup.reconciler()
    waits: list[float] = []
    escalated_at = None
    for check in range(1, 10):
        record = store.get_execution(key)
        assert record is not None
        assert record.next_check_at is not None
        setup.clock.advance((record.next_check_at - setup.clock.now()).total_seconds())
        report = await reconciler.run_once()
        assert report.still_unknown == (key,)
        after = store.get_execution(key)
        assert after is not None
        assert after.checks == check
        assert after.next_check_at is not None
        waits.append((after.next_check_at - setup.clock.now()).total_seconds())
        if report.escalated:
            escalated_at = check
    assert escalated_at == 8  # the default escalate_after
    final = store.get_execution(key)
    assert final is not None
    assert final.escalated
    assert final.status is ExecutionStatus.UNKNOWN
    assert waits[3] > waits[0]
    assert max(waits) <= 3600
    assert any(e.decision == "escalated" for e in setup.audit.events)


async def test_a_failing_or_hanging_check_is_no_proof(store: Store) -> None:
    setup = Setup(store)
    _, key = await setup.unknown()

    def broken(_key: str, _ctx: ToolContext) -> Reconciled:
        raise ConnectionError("downstream down")

    object.__setattr__(setup.tool, "reconcile", broken)
    setup.clock.advance(5)
    report = await setup.reconciler().run_once()
    assert report.still_unknown == (key,)

    async def wrong(_key: str, _ctx: ToolContext) -> object:
        return "yes"

    object.__setattr__(setup.tool, "reconcile", wrong)
    setup.clock.advance(3600)
    assert (await setup.reconciler().run_once()).still_unknown == (key,)
    assert setup.status(key) is ExecutionStatus.UNKNOWN


async def test_a_tool_without_a_hook_stays_unknown_for_people(store: Store) -> None:
    setup = Setup(store, reconcile=False)
    _, key = await setup.unknown()
    setup.clock.advance(5)
    report = await setup.reconciler().run_once()
    assert report.still_unknown == (key,)
    assert any("person must decide" in (e.detail or "") for e in setup.audit.events)


async def test_a_record_whose_principal_cannot_be_read_stays_unknown_and_the_pass_goes_on(
    store: Store,
) -> None:
    setup = Setup(store)
    _, key = await setup.unknown()
    broken = execution_record(
        idempotency_key="broken-principal",
        tool="create_ticket",
        status=ExecutionStatus.UNKNOWN,
        principal="{}",
        lease_owner=None,
        lease_expires_at=None,
        created_at=setup.clock.now(),
        updated_at=setup.clock.now(),
        next_check_at=setup.clock.now(),
    )
    assert store.insert_execution(broken)
    setup.clock.advance(120)
    report = await setup.reconciler().run_once()
    assert "broken-principal" in report.still_unknown
    assert report.succeeded == (key,)
    assert setup.status("broken-principal") is ExecutionStatus.UNKNOWN
    assert any("principal cannot be read" in (e.detail or "") for e in setup.audit.events)


async def test_an_expired_lease_makes_a_running_record_unknown(store: Store) -> None:
    setup = Setup(store, timeout=1.0)
    setup.downstream.script.append("hang")
    setup.downstream.release = asyncio.Event()
    envelope = await setup.gate.handle(
        ToolCall(id="c", name="create_ticket", arguments=ARGS), ALICE
    )
    plan_id = str(envelope.data["plan_id"])
    token = await setup.writes.issue_token(plan_id, ALICE)
    await setup.writes.confirm(plan_id, token.value, ALICE)
    key = plan_key(tenant_id="t1", tool="create_ticket", plan_id=plan_id)
    running = asyncio.create_task(setup.writes.execute_plan(plan_id, ALICE, timeout=3600))
    while store.get_execution(key) is None:  # noqa: ASYNC110 - a row another task writes
        await asyncio.sleep(0.01)
    assert setup.status(key) is ExecutionStatus.RUNNING
    untouched = await setup.reconciler().run_once()
    assert untouched.expired_leases == ()
    setup.clock.advance(3600 + 31)
    report = await setup.reconciler().run_once()
    assert report.expired_leases == (key,)
    # Proof of non-execution (the hung call has not reached the system): retried.
    assert report.succeeded == (key,)
    setup.downstream.release.set()
    late = await running
    # The old lease holder's late outcome is refused; the reconciler's word stands.
    assert late.envelope.error_type is not None
    assert late.envelope.error_type.value == "OUTCOME_UNKNOWN"
    assert late.record is None
    assert any(e.stage == "fenced" for e in setup.audit.events)
    assert setup.status(key) is ExecutionStatus.SUCCEEDED
    assert setup.downstream.effects() == 1


async def test_two_reconcilers_never_check_one_record_twice(store: Store) -> None:
    setup = Setup(store)
    _, key = await setup.unknown()
    setup.clock.advance(5)
    first, second = await asyncio.gather(
        setup.reconciler("r1").run_once(),
        setup.reconciler("r2").run_once(),
    )
    settled = first.succeeded + second.succeeded
    assert settled == (key,)
    assert setup.status(key) is ExecutionStatus.SUCCEEDED


async def test_settled_records_are_purged_to_tombstones_after_retention(store: Store) -> None:
    setup = Setup(store)
    _, key = await setup.unknown()
    setup.clock.advance(5)
    await setup.reconciler().run_once()
    setup.clock.advance(timedelta(hours=23, minutes=59).total_seconds())
    assert (await setup.reconciler().run_once()).purged == 0
    setup.clock.advance(120)
    assert (await setup.reconciler().run_once()).purged == 1
    tombstone = store.get_execution(key)
    assert tombstone is not None
    assert tombstone.purged_at == setup.clock.now()
    assert (tombstone.status, tombstone.business_id) == (ExecutionStatus.SUCCEEDED, "TK-0001")
    assert tombstone.result is None
    assert (await setup.reconciler().run_once()).purged == 0


async def test_worker_mode_runs_passes_until_stopped(store: Store) -> None:
    setup = Setup(store)
    _, key = await setup.unknown()
    setup.clock.advance(5)
    stop = asyncio.Event()
    worker = asyncio.create_task(setup.reconciler().run_forever(interval=0.01, stop=stop))
    while setup.status(key) is not ExecutionStatus.SUCCEEDED:  # noqa: ASYNC110 - a stored row
        await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(worker, timeout=5)


def test_no_proof_has_a_default_reason() -> None:
    assert NoProof().reason


async def test_a_person_settles_an_unknown_write_once_and_it_is_audited(store: Store) -> None:
    from handrail.errors import WriteRefusedError  # noqa: PLC0415
    from handrail.writes.reconcile import resolve_by_person  # noqa: PLC0415

    setup = Setup(store, reconcile=False)
    plan_id, key = await setup.unknown()
    failed = resolve_by_person(
        store,
        key,
        succeeded=False,
        operator="ops-anna",
        note="the service has no such ticket; its log shows the request rejected",
        clock=setup.clock,
        audit=setup.audit,
    )
    assert (failed.status, failed.error_code) == (ExecutionStatus.FAILED_FINAL, "FAILED_FINAL")
    assert store.get_execution(key) == failed
    assert any(e.stage == "resolve" and e.subject.user_id == "ops-anna" for e in setup.audit.events)
    again = await setup.writes.execute_plan(plan_id, ALICE)
    assert again.replayed
    assert again.envelope.error_type is not None
    with pytest.raises(WriteRefusedError):
        resolve_by_person(store, key, succeeded=True, operator="x", note="y", clock=setup.clock)
    with pytest.raises(WriteRefusedError):
        resolve_by_person(store, "hk1_missing", succeeded=True, operator="x", note="y")


async def test_a_record_a_reconciler_holds_cannot_be_resolved_by_hand(store: Store) -> None:
    from handrail.errors import WriteRefusedError  # noqa: PLC0415
    from handrail.writes.reconcile import resolve_by_person  # noqa: PLC0415

    setup = Setup(store)
    _, key = await setup.unknown()
    record = store.get_execution(key)
    assert record is not None
    leased = record.moved(
        ExecutionStatus.UNKNOWN,
        lease_owner="r9",
        lease_expires_at=setup.clock.now() + timedelta(seconds=60),
    )
    assert store.replace_execution(
        leased,
        expect_status=record.status,
        expect_version=record.version,
    )
    with pytest.raises(WriteRefusedError, match="active lease"):
        resolve_by_person(store, key, succeeded=True, operator="x", note="y", clock=setup.clock)
    listed = store.list_executions(status=ExecutionStatus.UNKNOWN, tenant_id="t1")
    assert [r.idempotency_key for r in listed] == [key]
    assert store.list_executions(status=ExecutionStatus.SUCCEEDED) == []
