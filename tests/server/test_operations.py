"""The service's operations over the payments app, on SQLite and PostgreSQL stores.

Each operation is scoped to the principal: another tenant's record is NOT_FOUND like
a missing one, a permission is named when one is needed, and nothing changes on a
refusal. Refusals are asserted by their code.
"""

from __future__ import annotations

import pytest
from _resources import (
    ALICE,
    BOB,
    CAROL,
    GINA,
    LARGE_REFUND,
    OLIVER,
    REFUND,
    flush,
    keep_raw,
    propose,
    stored_run,
    unknown_record,
)

from handrail import ExecutionStatus, Principal
from handrail.errors import AccessRefusedError, ErrorCode
from handrail.plans import PlanState
from handrail.runs import RunState
from handrail.server.operations import AuditSearch
from handrail.server.services import Services

pytestmark = pytest.mark.anyio


async def test_a_requester_confirms_and_the_plan_runs_once(any_services: Services) -> None:
    ops = any_services.operations
    plan_id = await propose(any_services)
    assert [p.plan.plan_id for p in await ops.list_plans(ALICE)] == [plan_id]
    record, outcome = await ops.confirm_and_execute(ALICE, plan_id)
    assert outcome is not None
    assert outcome.status is ExecutionStatus.SUCCEEDED
    assert record.state is PlanState.EXECUTED
    again = await ops.execute(ALICE, plan_id)
    assert again.replayed
    assert again.key == outcome.key


async def test_a_large_refund_needs_two_distinct_approvers(any_services: Services) -> None:
    ops = any_services.operations
    plan_id = await propose(any_services, tool=REFUND, arguments=LARGE_REFUND)
    assert plan_id in [p.plan.plan_id for p in await ops.list_plans(BOB)]
    with pytest.raises(AccessRefusedError) as own:
        await ops.issue_token(ALICE, plan_id)
    assert own.value.code is ErrorCode.PERMISSION_DENIED
    token = await ops.issue_token(BOB, plan_id)
    first = await ops.confirm(BOB, plan_id, token.value)
    assert first.state is PlanState.AWAITING_CONFIRMATION
    with pytest.raises(AccessRefusedError) as early:
        await ops.execute(ALICE, plan_id)
    assert early.value.code is ErrorCode.NEEDS_APPROVAL
    second, outcome = await ops.confirm_and_execute(CAROL, plan_id)
    assert outcome is None
    assert second.state is PlanState.CONFIRMED
    assert second.approvals == frozenset({"bob", "carol"})
    done = await ops.execute(ALICE, plan_id)
    assert done.status is ExecutionStatus.SUCCEEDED


async def test_a_token_is_used_once(any_services: Services) -> None:
    ops = any_services.operations
    plan_id = await propose(any_services)
    token = await ops.issue_token(ALICE, plan_id)
    await ops.confirm(ALICE, plan_id, token.value)
    with pytest.raises(AccessRefusedError) as replayed:
        await ops.confirm(ALICE, plan_id, token.value)
    assert replayed.value.code in {ErrorCode.CONFIRMATION_REPLAYED, ErrorCode.PLAN_CLOSED}


async def test_reject_and_revise_close_the_plan(any_services: Services) -> None:
    ops = any_services.operations
    rejected = await ops.reject(ALICE, await propose(any_services), "wrong order")
    assert rejected.state is PlanState.REJECTED
    old = await propose(any_services, call_id="call_2")
    arguments = '{"recipients": ["CUS-10001"], "message": "Refund sent."}'
    envelope = await ops.revise(ALICE, old, arguments)
    assert envelope.error_type is ErrorCode.NEEDS_CONFIRMATION
    assert envelope.data is not None
    new = await ops.get_plan(ALICE, envelope.data["plan_id"])
    assert new.plan.revises == old
    assert (await ops.get_plan(ALICE, old)).state is PlanState.REJECTED


@pytest.mark.parametrize(
    "principal",
    [GINA, Principal(user_id="dave", tenant_id="acme", permissions=frozenset())],
    ids=["another-tenant", "another-user"],
)
async def test_a_plan_the_principal_may_not_see_is_not_found(
    any_services: Services, principal: Principal
) -> None:
    ops = any_services.operations
    plan_id = await propose(any_services)
    attempts = [
        ops.get_plan(principal, plan_id),
        ops.issue_token(principal, plan_id),
        ops.confirm(principal, plan_id, "t"),
        ops.reject(principal, plan_id, "no"),
        ops.revise(principal, plan_id, "{}"),
        ops.execute(principal, plan_id),
        ops.confirm_and_execute(principal, plan_id),
    ]
    for attempt in attempts:
        with pytest.raises(AccessRefusedError) as refused:
            await attempt
        assert refused.value.code is ErrorCode.NOT_FOUND
    assert await ops.list_plans(principal) == []
    assert (await ops.get_plan(ALICE, plan_id)).state is PlanState.PROPOSED


async def test_an_unknown_write_is_resolved_by_an_operator(any_services: Services) -> None:
    ops = any_services.operations
    key = unknown_record(any_services, await propose(any_services))
    with pytest.raises(AccessRefusedError) as denied:
        await ops.list_executions(ALICE)
    assert denied.value.code is ErrorCode.PERMISSION_DENIED
    assert (await ops.get_execution(ALICE, key)).status is ExecutionStatus.UNKNOWN
    listed = await ops.list_executions(OLIVER, status=ExecutionStatus.UNKNOWN)
    assert [r.idempotency_key for r in listed] == [key]
    with pytest.raises(AccessRefusedError) as not_operator:
        await ops.resolve(ALICE, key, succeeded=True, note="seen downstream")
    assert not_operator.value.code is ErrorCode.PERMISSION_DENIED
    settled = await ops.resolve(OLIVER, key, succeeded=True, note="refund R-9", business_id="R-9")
    assert settled.status is ExecutionStatus.SUCCEEDED
    assert settled.business_id == "R-9"
    with pytest.raises(AccessRefusedError) as settled_already:
        await ops.reconcile(OLIVER, key)
    assert settled_already.value.code is ErrorCode.CONFLICT


async def test_reconcile_asks_the_tool_now(any_services: Services) -> None:
    ops = any_services.operations
    key = unknown_record(any_services, await propose(any_services))
    after = await ops.reconcile(OLIVER, key)
    # Notifying has no reconcile hook: no proof either way, checked once more, still UNKNOWN.
    assert after.status is ExecutionStatus.UNKNOWN
    assert after.checks == 1


async def test_executions_of_another_tenant_are_not_found(any_services: Services) -> None:
    ops = any_services.operations
    key = unknown_record(any_services, await propose(any_services))
    for attempt in (
        ops.get_execution(GINA, key),
        ops.reconcile(GINA, key),
        ops.resolve(GINA, key, succeeded=False, note="n"),
        ops.get_execution(GINA, "../../etc/passwd"),
    ):
        with pytest.raises(AccessRefusedError) as refused:
            await attempt
        assert refused.value.code is ErrorCode.NOT_FOUND
    assert await ops.list_executions(GINA) == []


async def test_the_audit_search_pages_newest_first(any_services: Services) -> None:
    ops = any_services.operations
    for n in range(3):
        await propose(any_services, call_id=f"call_{n}")
    flush(any_services)
    with pytest.raises(AccessRefusedError) as denied:
        await ops.search_audit(ALICE, AuditSearch())
    assert denied.value.code is ErrorCode.PERMISSION_DENIED
    everything = await ops.search_audit(OLIVER, AuditSearch(limit=200))
    assert everything.next_cursor is None
    seen = []
    page = await ops.search_audit(OLIVER, AuditSearch(limit=4))
    while True:
        seen.extend(e.event_id for e in page.events)
        if page.next_cursor is None:
            break
        page = await ops.search_audit(OLIVER, AuditSearch(limit=4, cursor=page.next_cursor))
    assert seen == [e.event_id for e in everything.events]
    assert all(e.tenant_id == "acme" for e in everything.events)
    assert (await ops.search_audit(GINA, AuditSearch())).events == []
    with pytest.raises(AccessRefusedError) as bad:
        await ops.search_audit(OLIVER, AuditSearch(cursor="not-a-cursor"))
    assert bad.value.code is ErrorCode.INVALID_ARGUMENTS


async def test_a_calls_timeline_is_its_stages_in_order(any_services: Services) -> None:
    ops = any_services.operations
    await propose(any_services, call_id="call_t")
    flush(any_services)
    stages = [e.stage for e in await ops.call_timeline(ALICE, "call_t")]
    assert stages[0] == "lookup"
    assert "authorization" in stages
    for principal in (GINA, BOB):
        with pytest.raises(AccessRefusedError) as refused:
            await ops.call_timeline(principal, "call_t")
        assert refused.value.code is ErrorCode.NOT_FOUND
    assert await ops.call_timeline(OLIVER, "call_t")


async def test_raw_records_are_read_within_the_tenant_and_audited(any_services: Services) -> None:
    ops = any_services.operations
    ref = keep_raw(any_services)
    assert (await ops.raw(ALICE, ref)).body == b'{"x": 1}'
    assert (await ops.raw(OLIVER, ref)).ref == ref
    with pytest.raises(AccessRefusedError) as denied:
        await ops.raw(BOB, ref)
    assert denied.value.code is ErrorCode.PERMISSION_DENIED
    for wrong in (ref, "../" + ref, "raw_missing"):
        with pytest.raises(AccessRefusedError) as refused:
            await ops.raw(GINA if wrong == ref else ALICE, wrong)
        assert refused.value.code is ErrorCode.NOT_FOUND
    flush(any_services)
    reads = await ops.search_audit(OLIVER, AuditSearch(tool="payments.get_order"))
    assert any(e.kind == "raw" for e in reads.events)


async def test_runs_are_listed_shown_and_replayed(any_services: Services) -> None:
    ops = any_services.operations
    run_id = await stored_run(any_services)
    assert [r.run_id for r in await ops.list_runs(ALICE)] == [run_id]
    assert [r.run_id for r in await ops.list_runs(OLIVER, state=RunState.FINISHED)] == [run_id]
    assert await ops.list_runs(BOB) == []
    assert (await ops.get_run(OLIVER, run_id)).user_id == "alice"
    report = await ops.replay(ALICE, run_id)
    assert report.matched, report.differences
    # An auditor may read alice's run, but its reads would run again as alice.
    with pytest.raises(AccessRefusedError) as not_theirs:
        await ops.replay(OLIVER, run_id)
    assert not_theirs.value.code is ErrorCode.PERMISSION_DENIED
    for principal, wanted in ((GINA, run_id), (BOB, run_id), (ALICE, "no/such")):
        with pytest.raises(AccessRefusedError) as refused:
            await ops.get_run(principal, wanted)
        assert refused.value.code is ErrorCode.NOT_FOUND
        with pytest.raises(AccessRefusedError) as refused_replay:
            await ops.replay(principal, wanted)
        assert refused_replay.value.code is ErrorCode.NOT_FOUND
