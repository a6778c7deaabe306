"""Attacks through the agent loop: every protection the gate offers holds inside a run.

The payments app with a conversation guard, driven by a scripted model through
`AgentLoop`: a target denied through one tool stays denied through another, and a
registered tool the run did not show its model is an unknown tool, exactly as the gate
alone answers when it is told the conversation and the exposure.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from examples.payments import PaymentsApp
from examples.payments import build_app as build_payments

from handrail import ErrorCode, Gate, Principal, ToolCall
from handrail.authz.guard import ConversationGuard
from handrail.loop.agent import AgentLoop, RunStatus, read_run
from handrail.loop.answers import EvidenceChecker
from handrail.loop.budgets import RunBudget
from handrail.loop.models import ModelReply, ScriptedModelClient
from handrail.store import MemoryStore
from handrail.testing import FixedClock, MemoryAuditSink, sequential_ids

pytestmark = pytest.mark.anyio

BOB = Principal(
    user_id="bob", tenant_id="acme", permissions=frozenset({"order.read", "order.refund"})
)
DONE = ModelReply(
    text=json.dumps({"state": "need_information", "message": "I cannot see that order."}),
    model="scripted-model",
)


@pytest.fixture
def payments(tmp_path: Path) -> Iterator[PaymentsApp]:
    app = build_payments(database=tmp_path / "payments.db", clock=FixedClock())
    app.database.reset()
    yield app
    app.database.close()


def _call(call_id: str, name: str, **arguments: object) -> ToolCall:
    return ToolCall(id=call_id, name=f"payments.{name}", arguments=json.dumps(arguments))


def _turn(*calls: ToolCall) -> ModelReply:
    return ModelReply(calls=calls, finish_reason="tool_calls", model="scripted-model")


async def _run(gate: Gate, *turns: ModelReply) -> list[tuple[str, str | None]]:
    """Drive one run of `turns` through `gate`; every call's (id, code), in order."""
    store = MemoryStore()
    loop = AgentLoop(
        gate=gate,
        model=ScriptedModelClient([*turns, DONE]),
        store=store,
        budget=RunBudget(max_steps=10, deadline_seconds=60.0),
        clock=FixedClock(),
        checker=EvidenceChecker(store),
        new_run_id=sequential_ids("run"),
    )
    outcome = await loop.run("What happened to ORD-1003?", BOB)
    assert outcome.status is RunStatus.FINISHED
    record = store.get_run(outcome.run_id)
    assert record is not None
    return [(c.call_id, c.code) for step in read_run(record).steps for c in step.calls]


async def test_a_target_denied_through_one_tool_is_refused_through_another_inside_a_run(
    payments: PaymentsApp,
) -> None:
    audit = MemoryAuditSink()
    gate = payments.gate(audit=audit, new_id=sequential_ids(), guard=ConversationGuard())
    codes = await _run(
        gate,
        _turn(_call("c1", "get_order", order_id="ORD-1003")),
        _turn(_call("c2", "order_timeline", order_id="ORD-1003")),
    )
    assert codes == [("c1", "PERMISSION_DENIED"), ("c2", "PERMISSION_DENIED")]
    refused = [e for e in audit.for_call("c2") if e.decision == "refused"]
    assert [(e.stage, e.code) for e in refused] == [("guard", ErrorCode.PERMISSION_DENIED)]
    # The gate alone, told the conversation, answers the same.
    alone = payments.gate(guard=ConversationGuard())
    first = await alone.handle(_call("a1", "get_order", order_id="ORD-1003"), BOB, conversation="x")
    then = await alone.handle(
        _call("a2", "order_timeline", order_id="ORD-1003"), BOB, conversation="x"
    )
    assert (first.error_type, then.error_type) == (
        ErrorCode.PERMISSION_DENIED,
        ErrorCode.PERMISSION_DENIED,
    )


async def test_repeated_denials_inside_a_run_trip_the_breaker(payments: PaymentsApp) -> None:
    gate = payments.gate(guard=ConversationGuard())
    codes = await _run(
        gate,
        _turn(_call("c1", "get_order", order_id="ORD-1003")),
        _turn(_call("c2", "order_timeline", order_id="ORD-1003")),
        _turn(_call("c3", "refund_order", order_id="ORD-1003", amount_cents=1)),
        _turn(_call("c4", "get_order", order_id="ORD-1004")),
    )
    assert codes[-1] == ("c4", "BUDGET_EXHAUSTED")


async def test_a_registered_tool_the_run_did_not_show_is_an_unknown_tool(
    payments: PaymentsApp,
) -> None:
    gate = payments.gate()
    export = _call("c1", "export_customers", limit=10)
    codes = await _run(gate, _turn(export))
    assert codes == [("c1", "UNKNOWN_TOOL")]
    # Bob may not see the export tool: the gate alone, told the exposure, agrees.
    exposure = gate.registry.exposure(BOB)
    assert "payments.export_customers" not in exposure
    alone = await gate.handle(export, BOB, exposure=exposure)
    assert alone.error_type is ErrorCode.UNKNOWN_TOOL
