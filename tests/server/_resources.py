"""Helpers of the resource tests (plans, executions, audit, raw, runs) of the service.

Principals of the payments example, a plan proposed through the gate as a model's call
would be, an UNKNOWN execution record, a raw record and a stored agent run; and the
`any_services` fixture: the payments app served over SQLite and over PostgreSQL.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from _service import build_services

from _records import execution_record
from handrail import ExecutionStatus, Principal, ToolCall
from handrail.execution import plan_key
from handrail.loop.models import ModelReply, ScriptedModelClient, Usage
from handrail.record.batching import BatchingAuditSink
from handrail.record.raw_results import RawResults
from handrail.server.operations import (
    AUDIT_READ_PERMISSION,
    EXECUTIONS_OPERATE_PERMISSION,
    PLANS_DECIDE_PERMISSION,
    RAW_READ_PERMISSION,
)
from handrail.server.services import Services
from handrail.store import open_store

# Machine credentials that confirm over the API hold PLANS_DECIDE_PERMISSION on purpose.
STAFF = frozenset(
    {"order.read", "order.refund", "customers.export", "customers.notify", PLANS_DECIDE_PERMISSION}
)
APPROVER = STAFF | {"refund.approve"}
OPERATOR = frozenset({AUDIT_READ_PERMISSION, EXECUTIONS_OPERATE_PERMISSION, RAW_READ_PERMISSION})

ALICE = Principal(user_id="alice", tenant_id="acme", permissions=STAFF)
BOB = Principal(user_id="bob", tenant_id="acme", permissions=APPROVER)
CAROL = Principal(user_id="carol", tenant_id="acme", permissions=APPROVER)
OLIVER = Principal(user_id="oliver", tenant_id="acme", permissions=OPERATOR)
GINA = Principal(user_id="gina", tenant_id="globex", permissions=STAFF | APPROVER | OPERATOR)

NOTIFY = "payments.notify_customers"
NOTICE = {"recipients": ["CUS-10001"], "message": "Your refund is on its way."}
"""One customer notified: the requester's confirmation is enough."""
REFUND = "payments.refund_order"
LARGE_REFUND = {"order_id": "ORD-1002", "amount_cents": 1_000_001}
"""10,000.01 of alice's order: two distinct approvers (every refund needs approval)."""


@pytest.fixture
def any_services(store_url: str, tmp_path: Path) -> Iterator[Services]:
    """The payments services over a fresh SQLite file, then a fresh PostgreSQL database."""
    store = open_store(store_url)
    built = build_services(store, tmp_path)
    try:
        yield built
    finally:
        built.handrail.close()
        store.close()


def flush(services: Services) -> None:
    """Every audit event emitted so far written to the store."""
    sink = services.handrail.audit
    assert isinstance(sink, BatchingAuditSink)
    sink.flush()


async def propose(
    services: Services,
    principal: Principal = ALICE,
    *,
    tool: str = NOTIFY,
    arguments: dict[str, object] | None = None,
    call_id: str = "call_1",
) -> str:
    """A write proposed through the gate as a model's call: the new plan's id."""
    call = ToolCall(id=call_id, name=tool, arguments=json.dumps(arguments or NOTICE))
    envelope = await services.handrail.handle(call, principal)
    assert envelope.data is not None, envelope.summary
    plan_id = envelope.data["plan_id"]
    assert isinstance(plan_id, str)
    return plan_id


def unknown_record(services: Services, plan_id: str, principal: Principal = ALICE) -> str:
    """An UNKNOWN execution record of the plan, as a lost response leaves one; its key."""
    now = services.clock.now()
    record = services.handrail.store.get_plan(plan_id)
    assert record is not None
    key = plan_key(tenant_id=principal.tenant_id, tool=record.plan.tool, plan_id=plan_id)
    inserted = services.handrail.store.insert_execution(
        execution_record(
            idempotency_key=key,
            plan_id=plan_id,
            plan_hash=record.plan.plan_hash,
            tool=record.plan.tool,
            tenant_id=principal.tenant_id,
            user_id=principal.user_id,
            principal=principal.snapshot(),
            arguments=record.plan.arguments,
            status=ExecutionStatus.UNKNOWN,
            error_code="OUTCOME_UNKNOWN",
            lease_owner=None,
            lease_expires_at=None,
            next_check_at=now,
            created_at=now,
            updated_at=now,
        )
    )
    assert inserted
    return key


def keep_raw(services: Services, principal: Principal = ALICE, body: bytes = b'{"x": 1}') -> str:
    """A raw record of the principal: its ref."""
    raw = RawResults(services.handrail.store, services.clock)
    return raw.keep(
        principal=principal,
        tool="payments.get_order",
        call_id="call_raw",
        body=body,
        media_type="application/json",
    )


def _reply(*calls: ToolCall, text: str | None = None) -> ModelReply:
    return ModelReply(
        calls=calls,
        text=text,
        usage=Usage(input_tokens=10, output_tokens=5),
        finish_reason="tool_calls" if calls else "stop",
        model="scripted-model",
    )


async def stored_run(services: Services, principal: Principal = ALICE) -> str:
    """A finished agent run of the principal that read one order: its id."""
    read = ToolCall(
        id="call_read", name="payments.get_order", arguments=json.dumps({"order_id": "ORD-1001"})
    )
    model = ScriptedModelClient([_reply(read), _reply(text="ORD-1001 is paid.")])
    outcome = await services.handrail.agent(model).run("Is ORD-1001 paid?", principal)
    return outcome.run_id
