"""The write path through the gate: plan, token, confirm, execute once, replay, refuse.

Every test runs on each store (memory, SQLite, PostgreSQL).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

import pytest

from _write_tools import ALICE, ARGS, BOB, CAROL, DAVE, MALLORY, Downstream, keyring, ticket_tool
from handrail import (
    ConfirmationMode,
    Envelope,
    ErrorCode,
    ExecutionStatus,
    Gate,
    IdempotencyMode,
    MemoryAuditSink,
    PlanState,
    Principal,
    Registry,
    RetryPolicy,
    Status,
    Store,
    ToolCall,
    WriteRefusedError,
    Writes,
)
from handrail.execution import plan_key
from handrail.testing import FixedClock, sequential_ids

pytestmark = pytest.mark.anyio


async def _no_wait(_seconds: float) -> None:
    await asyncio.sleep(0)


@dataclass
class World:
    downstream: Downstream
    gate: Gate
    writes: Writes
    clock: FixedClock
    audit: MemoryAuditSink
    store: Store

    async def propose(self, principal: Principal = ALICE, arguments: str = ARGS) -> str:
        envelope = await self.gate.handle(
            ToolCall(id="c1", name="create_ticket", arguments=arguments),
            principal,
        )
        assert envelope.error_type in {ErrorCode.NEEDS_CONFIRMATION, ErrorCode.NEEDS_APPROVAL}
        return str(envelope.data["plan_id"])

    async def confirmed(self, principal: Principal = ALICE) -> str:
        plan_id = await self.propose(principal)
        token = await self.writes.issue_token(plan_id, principal)
        await self.writes.confirm(plan_id, token.value, principal)
        return plan_id


def _world(store: Store, **tool_options: object) -> World:
    downstream = Downstream()
    registry = Registry()
    registry.register(ticket_tool(downstream, **tool_options))  # type: ignore[arg-type]
    clock = FixedClock()
    audit = MemoryAuditSink()
    writes = Writes(
        registry,
        store,
        keyring(),
        clock=clock,
        audit=audit,
        worker_id="w1",
        new_id=sequential_ids("p"),
        sleep=_no_wait,
    )
    gate = Gate(registry, writes=writes, clock=clock, audit=audit, sleep=_no_wait)
    return World(downstream, gate, writes, clock, audit, store)


@pytest.fixture
def world(store: Store) -> World:
    return _world(store)


async def test_a_write_becomes_a_plan_and_nothing_runs_until_confirmed(world: World) -> None:
    envelope = await world.gate.handle(
        ToolCall(id="c1", name="create_ticket", arguments=ARGS), ALICE
    )
    assert envelope.status is Status.ERROR
    assert envelope.error_type is ErrorCode.NEEDS_CONFIRMATION
    assert not envelope.retryable
    plan_id = envelope.data["plan_id"]
    assert envelope.data["impact"]["target"] == "asset-1"
    assert "Nothing was executed" in envelope.summary
    assert world.downstream.calls == 0
    record = await world.writes.get_plan(plan_id, ALICE)
    assert record.state is PlanState.PROPOSED
    assert record.plan.argument_values == json.loads(ARGS)
    assert record.plan.verify_hash()
    refused = await world.writes.execute_plan(plan_id, ALICE)
    assert refused.code is ErrorCode.NEEDS_CONFIRMATION
    assert world.downstream.calls == 0


async def test_confirmed_plan_executes_once_and_repeats_return_the_stored_result(
    world: World,
) -> None:
    plan_id = await world.confirmed()
    first = await world.writes.execute_plan(plan_id, ALICE)
    assert first.envelope.status is Status.OK
    assert first.envelope.data["ticket_no"] == "TK-0001"
    assert first.record is not None
    assert first.record.status is ExecutionStatus.SUCCEEDED
    assert first.record.business_id == "TK-0001"
    assert first.record.attempts == 1
    assert not first.replayed
    again = [await world.writes.execute_plan(plan_id, ALICE) for _ in range(3)]
    assert all(o.replayed and o.envelope.data == first.envelope.data for o in again)
    assert world.downstream.calls == 1
    plan = await world.writes.get_plan(plan_id, ALICE)
    assert plan.state is PlanState.EXECUTED
    key = plan_key(tenant_id="t1", tool="create_ticket", plan_id=plan_id)
    assert world.store.get_execution(key) == first.record


async def test_concurrent_executions_in_one_process_make_one_effect(world: World) -> None:
    plan_id = await world.confirmed()
    outcomes = await asyncio.gather(*(world.writes.execute_plan(plan_id, ALICE) for _ in range(20)))
    assert world.downstream.effects() == 1
    assert world.downstream.calls == 1
    assert {o.envelope.data["ticket_no"] for o in outcomes} == {"TK-0001"}
    assert sum(not o.replayed for o in outcomes) == 1


@pytest.mark.invariant(6)
async def test_a_lost_response_is_unknown_never_failed(world: World) -> None:
    world.downstream.script.append("lose")
    plan_id = await world.confirmed()
    outcome = await world.writes.execute_plan(plan_id, ALICE)
    assert outcome.envelope.error_type is ErrorCode.OUTCOME_UNKNOWN
    assert not outcome.envelope.retryable
    assert outcome.record is not None
    assert outcome.record.status is ExecutionStatus.UNKNOWN
    assert outcome.record.next_check_at is not None
    # Asking again does not run the tool again: the outcome is still unknown.
    again = await world.writes.execute_plan(plan_id, ALICE)
    assert again.envelope.error_type is ErrorCode.OUTCOME_UNKNOWN
    assert world.downstream.calls == 1


@pytest.mark.invariant(6)
async def test_an_undeclared_exception_of_an_external_write_is_unknown(world: World) -> None:
    world.downstream.script.append("crash")
    plan_id = await world.confirmed()
    outcome = await world.writes.execute_plan(plan_id, ALICE)
    assert outcome.envelope.error_type is ErrorCode.OUTCOME_UNKNOWN
    assert "/srv/internal" not in outcome.envelope.to_json()


async def test_a_deadline_passing_while_running_is_unknown(store: Store) -> None:
    # The caller's deadline is short; the tool's own stays long, so proposing and confirming
    # the plan on a loaded machine cannot run out of time before the write starts.
    world = _world(store)
    world.downstream.script.append("hang")
    world.downstream.release = asyncio.Event()
    plan_id = await world.confirmed()
    outcome = await world.writes.execute_plan(plan_id, ALICE, timeout=0.05)
    assert outcome.envelope.error_type is ErrorCode.OUTCOME_UNKNOWN
    assert outcome.record is not None
    assert outcome.record.status is ExecutionStatus.UNKNOWN


async def test_a_declared_failure_is_final_and_stored(world: World) -> None:
    world.downstream.script.append("fail")
    plan_id = await world.confirmed()
    outcome = await world.writes.execute_plan(plan_id, ALICE)
    assert outcome.envelope.error_type is ErrorCode.FAILED_FINAL
    assert outcome.envelope.summary == "the ticket system refused the asset"
    again = await world.writes.execute_plan(plan_id, ALICE)
    assert again.replayed
    assert again.envelope.error_type is ErrorCode.FAILED_FINAL
    assert again.envelope.summary == outcome.envelope.summary
    assert world.downstream.calls == 1


async def test_a_transient_failure_releases_the_key_for_a_later_attempt(world: World) -> None:
    world.downstream.script.append("transient")
    plan_id = await world.confirmed()
    first = await world.writes.execute_plan(plan_id, ALICE)
    assert first.envelope.error_type is ErrorCode.TRANSIENT
    assert first.envelope.retryable
    assert first.envelope.retry_after == 1.0
    assert first.record is not None
    assert first.record.status is ExecutionStatus.PREPARED
    second = await world.writes.execute_plan(plan_id, ALICE)
    assert second.envelope.status is Status.OK
    assert second.record is not None
    assert second.record.attempts == 2
    assert world.downstream.effects() == 1


async def test_declared_idempotent_writes_are_retried_under_the_same_key(store: Store) -> None:
    world = _world(store, retry=RetryPolicy(max_attempts=3, initial_backoff=0.01))
    world.downstream.script.extend(["transient", "transient"])
    plan_id = await world.confirmed()
    outcome = await world.writes.execute_plan(plan_id, ALICE)
    assert outcome.envelope.status is Status.OK
    assert world.downstream.calls == 3
    assert world.downstream.effects() == 1


async def test_a_version_change_after_confirmation_writes_nothing(store: Store) -> None:
    world = _world(store, versioned=True)
    plan_id = await world.confirmed()
    world.downstream.version = "v2"
    refused = await world.writes.execute_plan(plan_id, ALICE)
    assert refused.code is ErrorCode.VERSION_CONFLICT
    assert world.downstream.calls == 0
    key = plan_key(tenant_id="t1", tool="create_ticket", plan_id=plan_id)
    assert store.get_execution(key) is None
    assert (await world.writes.get_plan(plan_id, ALICE)).state is PlanState.REJECTED


async def test_an_executed_plan_replays_after_its_target_moved_on(store: Store) -> None:
    world = _world(store, versioned=True)
    plan_id = await world.confirmed()
    first = await world.writes.execute_plan(plan_id, ALICE)
    world.downstream.version = "v2"  # the write (or a later one) moved the target on
    again = await world.writes.execute_plan(plan_id, ALICE)
    assert again.replayed
    assert again.envelope.data == first.envelope.data
    assert world.downstream.calls == 1
    assert (await world.writes.get_plan(plan_id, ALICE)).state is PlanState.EXECUTED


async def test_the_plan_binds_the_version_seen_at_proposal(store: Store) -> None:
    world = _world(store, versioned=True)
    world.downstream.version = "v9"
    plan_id = await world.confirmed()
    plan = await world.writes.get_plan(plan_id, ALICE)
    assert plan.plan.expected_version == "v9"
    assert (await world.writes.execute_plan(plan_id, ALICE)).envelope.status is Status.OK


async def test_only_the_requester_executes_with_current_permissions(world: World) -> None:
    plan_id = await world.confirmed()
    other = await world.writes.execute_plan(plan_id, BOB)
    assert other.code is ErrorCode.PERMISSION_DENIED
    revoked = Principal(user_id="alice", tenant_id="t1")
    lost = await world.writes.execute_plan(plan_id, revoked)
    assert lost.code is ErrorCode.PERMISSION_DENIED
    foreign = await world.writes.execute_plan(plan_id, MALLORY)
    assert foreign.code is ErrorCode.NOT_FOUND
    assert world.downstream.calls == 0


@pytest.mark.invariant(3)
async def test_confirmation_codes_tampered_replayed_expired_changed(world: World) -> None:
    plan_id = await world.propose()
    token = await world.writes.issue_token(plan_id, ALICE)
    tampered = token.value[:-2] + ("AA" if not token.value.endswith("AA") else "BB")
    with pytest.raises(WriteRefusedError) as invalid:
        await world.writes.confirm(plan_id, tampered, ALICE)
    assert invalid.value.code is ErrorCode.CONFIRMATION_INVALID
    other_plan = await world.propose(arguments='{"asset_id": "asset-2", "reason": "another one"}')
    with pytest.raises(WriteRefusedError) as changed:
        await world.writes.confirm(other_plan, token.value, ALICE)
    assert changed.value.code is ErrorCode.PLAN_CHANGED
    confirmed = await world.writes.confirm(plan_id, token.value, ALICE)
    assert confirmed.state is PlanState.CONFIRMED
    with pytest.raises(WriteRefusedError) as replayed:
        await world.writes.confirm(plan_id, token.value, ALICE)
    assert replayed.value.code is ErrorCode.CONFIRMATION_REPLAYED
    late = await world.propose()
    late_token = await world.writes.issue_token(late, ALICE)
    world.clock.advance(301)
    with pytest.raises(WriteRefusedError) as expired:
        await world.writes.confirm(late, late_token.value, ALICE)
    assert expired.value.code is ErrorCode.PLAN_EXPIRED
    assert (await world.writes.get_plan(late, ALICE)).state is PlanState.EXPIRED
    expired_run = await world.writes.execute_plan(plan_id, ALICE)
    assert expired_run.code is ErrorCode.PLAN_EXPIRED
    assert world.downstream.calls == 0


async def test_an_executed_plan_replays_after_expiry(world: World) -> None:
    plan_id = await world.confirmed()
    first = await world.writes.execute_plan(plan_id, ALICE)
    world.clock.advance(3600)
    again = await world.writes.execute_plan(plan_id, ALICE)
    assert again.replayed
    assert again.envelope.data == first.envelope.data


async def test_someone_else_cannot_confirm_and_a_rejected_plan_is_closed(world: World) -> None:
    plan_id = await world.propose()
    with pytest.raises(WriteRefusedError) as denied:
        await world.writes.issue_token(plan_id, BOB)
    assert denied.value.code is ErrorCode.PERMISSION_DENIED
    token = await world.writes.issue_token(plan_id, ALICE)
    with pytest.raises(WriteRefusedError) as stolen:
        await world.writes.confirm(plan_id, token.value, BOB)
    assert stolen.value.code is ErrorCode.CONFIRMATION_INVALID
    rejected = await world.writes.reject(plan_id, ALICE)
    assert rejected.state is PlanState.REJECTED
    with pytest.raises(WriteRefusedError) as closed:
        await world.writes.confirm(plan_id, token.value, ALICE)
    assert closed.value.code is ErrorCode.PLAN_CLOSED
    with pytest.raises(WriteRefusedError) as again:
        await world.writes.reject(plan_id, ALICE)
    assert again.value.code is ErrorCode.PLAN_CLOSED
    with pytest.raises(WriteRefusedError) as token_after:
        await world.writes.issue_token(plan_id, ALICE)
    assert token_after.value.code is ErrorCode.PLAN_CLOSED


async def test_two_distinct_approvers_confirm_an_approve_plan(store: Store) -> None:
    world = _world(store, mode=ConfirmationMode.APPROVE, distinct_approvers=2)
    envelope = await world.gate.handle(
        ToolCall(id="c", name="create_ticket", arguments=ARGS), ALICE
    )
    assert envelope.error_type is ErrorCode.NEEDS_APPROVAL
    plan_id = envelope.data["plan_id"]
    for outsider in (ALICE, BOB):
        with pytest.raises(WriteRefusedError) as denied:
            await world.writes.issue_token(plan_id, outsider)
        assert denied.value.code is ErrorCode.PERMISSION_DENIED
    first = await world.writes.confirm(
        plan_id,
        (await world.writes.issue_token(plan_id, CAROL)).value,
        CAROL,
    )
    assert (first.state, first.approvals) == (PlanState.AWAITING_CONFIRMATION, {"carol"})
    repeat = await world.writes.confirm(
        plan_id,
        (await world.writes.issue_token(plan_id, CAROL)).value,
        CAROL,
    )
    assert repeat.state is PlanState.AWAITING_CONFIRMATION
    early = await world.writes.execute_plan(plan_id, ALICE)
    assert early.code is ErrorCode.NEEDS_APPROVAL
    second = await world.writes.confirm(
        plan_id,
        (await world.writes.issue_token(plan_id, DAVE)).value,
        DAVE,
    )
    assert second.state is PlanState.CONFIRMED
    assert second.approvals == {"carol", "dave"}
    assert (await world.writes.execute_plan(plan_id, ALICE)).envelope.status is Status.OK


async def test_an_edit_makes_a_new_plan_that_needs_its_own_confirmation(world: World) -> None:
    plan_id = await world.propose()
    old_token = await world.writes.issue_token(plan_id, ALICE)
    edited = await world.gate.revise_plan(
        plan_id,
        '{"asset_id": "asset-1", "reason": "CONNECT_TIMEOUT, edited by the user"}',
        ALICE,
    )
    assert edited.error_type is ErrorCode.NEEDS_CONFIRMATION
    new_id = edited.data["plan_id"]
    new = await world.writes.get_plan(new_id, ALICE)
    assert new.plan.revises == plan_id
    assert (await world.writes.get_plan(plan_id, ALICE)).state is PlanState.REJECTED
    with pytest.raises(WriteRefusedError) as changed:
        await world.writes.confirm(new_id, old_token.value, ALICE)
    assert changed.value.code is ErrorCode.PLAN_CHANGED
    # An edit goes through all four stages again: invalid arguments make no plan.
    bad = await world.gate.revise_plan(new_id, '{"asset_id": "x", "reason": "r"}', ALICE)
    assert bad.error_type is ErrorCode.INVALID_ARGUMENTS
    assert (await world.writes.get_plan(new_id, ALICE)).state is PlanState.PROPOSED


async def test_unconfirmed_writes_need_the_hosts_command_id(store: Store) -> None:
    world = _world(store, mode=ConfirmationMode.NONE, idempotency=IdempotencyMode.COMMAND_ID)
    call = ToolCall(id="c1", name="create_ticket", arguments=ARGS)
    blocked = await world.gate.handle(call, ALICE)
    assert blocked.error_type is ErrorCode.RISK_BLOCKED
    first = await world.gate.handle(call, ALICE, command_id="cmd-1")
    second = await world.gate.handle(call, ALICE, command_id="cmd-1")
    assert first.status is second.status is Status.OK
    assert first.data == second.data
    assert world.downstream.calls == 1
    third = await world.gate.handle(call, ALICE, command_id="cmd-2")
    assert third.data["ticket_no"] == "TK-0002"


@pytest.mark.invariant(5)
async def test_a_command_id_reused_with_other_arguments_is_refused_and_audited(
    store: Store,
) -> None:
    world = _world(store, mode=ConfirmationMode.NONE, idempotency=IdempotencyMode.COMMAND_ID)
    await world.gate.handle(
        ToolCall(id="a", name="create_ticket", arguments=ARGS), ALICE, command_id="k"
    )
    other = '{"asset_id": "asset-2", "reason": "something else"}'
    refused = await world.gate.handle(
        ToolCall(id="b", name="create_ticket", arguments=other),
        ALICE,
        command_id="k",
    )
    assert refused.error_type is ErrorCode.IDEMPOTENCY_MISMATCH
    assert world.downstream.calls == 1
    mismatches = [e for e in world.audit.events if e.code == ErrorCode.IDEMPOTENCY_MISMATCH]
    assert mismatches
    assert mismatches[0].subject.tool_call_id == "b"


@pytest.mark.invariant(4)
async def test_one_command_id_in_two_tenants_is_two_intents(store: Store) -> None:
    world = _world(store, mode=ConfirmationMode.NONE, idempotency=IdempotencyMode.COMMAND_ID)
    call = ToolCall(id="c", name="create_ticket", arguments=ARGS)
    mine = await world.gate.handle(call, ALICE, command_id="same")
    theirs = await world.gate.handle(call, MALLORY, command_id="same")
    assert mine.data["ticket_no"] != theirs.data["ticket_no"]
    assert world.downstream.effects() == 2


async def test_the_policy_can_demand_confirmation_of_a_write(store: Store) -> None:
    from handrail import Decision, Outcome  # noqa: PLC0415 - local to this scenario

    class Confirm:
        async def decide(self, *_: object) -> Decision:
            return Decision(outcome=Outcome.CONFIRM, reason="big amount", rule="r")

    world = _world(store, mode=ConfirmationMode.NONE, idempotency=IdempotencyMode.COMMAND_ID)
    gate = Gate(world.gate.registry, writes=world.writes, clock=world.clock, policy=Confirm())
    envelope = await gate.handle(
        ToolCall(id="c", name="create_ticket", arguments=ARGS),
        ALICE,
        command_id="x",
    )
    assert envelope.error_type is ErrorCode.NEEDS_CONFIRMATION
    assert world.downstream.calls == 0


async def test_the_model_never_sees_a_token_and_chat_text_confirms_nothing(world: World) -> None:
    plan_id = await world.propose()
    token = await world.writes.issue_token(plan_id, ALICE)
    echo = json.dumps({"asset_id": "asset-1", "reason": f"ok confirmed {token.value}"})
    envelope: Envelope = await world.gate.handle(
        ToolCall(id="c2", name="create_ticket", arguments=echo),
        ALICE,
    )
    assert envelope.error_type in {ErrorCode.NEEDS_CONFIRMATION, ErrorCode.INVALID_ARGUMENTS}
    assert (await world.writes.get_plan(plan_id, ALICE)).state is PlanState.AWAITING_CONFIRMATION
    assert world.downstream.calls == 0
    assert all(token.value not in (e.detail or "") for e in world.audit.events)


async def test_a_policy_approval_names_who_approves(store: Store) -> None:
    from handrail import ConfirmationPolicy, Decision, Outcome  # noqa: PLC0415

    class Approve:
        async def decide(self, *_: object) -> Decision:
            return Decision(
                outcome=Outcome.APPROVE,
                reason="large",
                rule="large-tickets",
                approval=ConfirmationPolicy(
                    mode=ConfirmationMode.APPROVE,
                    approver_permission="tickets.approve",
                ),
            )

    world = _world(store)
    gate = Gate(world.gate.registry, writes=world.writes, clock=world.clock, policy=Approve())
    envelope = await gate.handle(ToolCall(id="c", name="create_ticket", arguments=ARGS), ALICE)
    assert envelope.error_type is ErrorCode.NEEDS_APPROVAL
    plan_id = envelope.data["plan_id"]
    plan = await world.writes.get_plan(plan_id, ALICE)
    assert (plan.plan.approver_permission, plan.plan.required_approvals) == ("tickets.approve", 1)
    with pytest.raises(WriteRefusedError):
        await world.writes.issue_token(plan_id, ALICE)
    token = await world.writes.issue_token(plan_id, CAROL)
    assert (await world.writes.confirm(plan_id, token.value, CAROL)).state is PlanState.CONFIRMED


@pytest.mark.invariant(6)
async def test_a_cancelled_write_is_left_unknown_for_the_reconciler(world: World) -> None:
    world.downstream.script.append("hang")
    world.downstream.release = asyncio.Event()
    plan_id = await world.confirmed()
    task = asyncio.create_task(world.writes.execute_plan(plan_id, ALICE))
    key = plan_key(tenant_id="t1", tool="create_ticket", plan_id=plan_id)
    while world.downstream.calls == 0:  # noqa: ASYNC110 - the tool's own counter
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    record = world.store.get_execution(key)
    assert record is not None
    assert record.status is ExecutionStatus.UNKNOWN
    assert record.next_check_at is not None


async def test_only_the_requester_or_an_approver_rejects_or_revises(world: World) -> None:
    plan_id = await world.propose()
    for outsider in (BOB, CAROL):
        with pytest.raises(WriteRefusedError) as denied:
            await world.writes.reject(plan_id, outsider)
        assert denied.value.code is ErrorCode.PERMISSION_DENIED
        with pytest.raises(WriteRefusedError) as revised:
            await world.gate.revise_plan(plan_id, ARGS, outsider)
        assert revised.value.code is ErrorCode.PERMISSION_DENIED
    assert (await world.writes.get_plan(plan_id, ALICE)).state is PlanState.PROPOSED


async def test_an_approver_may_reject_an_approve_plan(store: Store) -> None:
    world = _world(store, mode=ConfirmationMode.APPROVE)
    plan_id = await world.propose()
    assert (await world.writes.reject(plan_id, CAROL)).state is PlanState.REJECTED


async def test_rejecting_a_plan_closes_its_released_record(world: World) -> None:
    world.downstream.script.append("transient")
    plan_id = await world.confirmed()
    released = await world.writes.execute_plan(plan_id, ALICE)
    assert released.record is not None
    assert released.record.status is ExecutionStatus.PREPARED
    assert (await world.writes.reject(plan_id, ALICE)).state is PlanState.REJECTED
    key = plan_key(tenant_id="t1", tool="create_ticket", plan_id=plan_id)
    closed = world.store.get_execution(key)
    assert closed is not None
    assert (closed.status, closed.error_code) == (ExecutionStatus.FAILED_FINAL, "PLAN_CLOSED")
    assert closed.retain_until is not None
    # Asking again answers with that stored outcome; nothing runs.
    again = await world.writes.execute_plan(plan_id, ALICE)
    assert again.replayed
    assert again.envelope.error_type is ErrorCode.PLAN_CLOSED
    assert world.downstream.calls == 1
