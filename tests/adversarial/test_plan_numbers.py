"""Large whole-number floats cannot slip an unsafe integer into a write (issue 14, question 2).

Stage 1 refuses 9007199254740992 written as an integer. Written as `1e16` or
`9007199254740992.0` the same number is a float, and a plan's canonical JSON (RFC 8785)
stores any float in [2**53, 1e21) as an integer literal: read back, it is that refused
integer, and the confirmed plan could not even be written to an execution record. So a
write's arguments holding one, at any depth, are refused at stage 1 with the field's
path and nothing is planned; a read, whose arguments are never stored to run again,
still gets the float. Just inside the bounds, a write plans, confirms and runs with
exactly the number sent.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from handrail import (
    ConfirmationMode,
    ConfirmationPolicy,
    Envelope,
    ErrorCode,
    Gate,
    IdempotencyMode,
    IdempotencyPolicy,
    Principal,
    Registry,
    RiskLevel,
    SideEffect,
    Status,
    ToolCall,
    ToolContext,
    tool,
)
from handrail.signing import SigningKey
from handrail.store import MemoryStore
from handrail.testing import FixedClock, MemoryAuditSink, sequential_ids
from handrail.writes.confirmation import Keyring
from handrail.writes.service import Writes

pytestmark = pytest.mark.anyio

ALICE = Principal(user_id="alice", tenant_id="t1", permissions=frozenset({"limits.set"}))


async def _no_wait(_seconds: float) -> None:
    await asyncio.sleep(0)


@dataclass
class Host:
    gate: Gate
    writes: Writes
    store: MemoryStore
    audit: MemoryAuditSink
    ran: list[tuple[str, float, dict[str, Any]]] = field(default_factory=list)

    async def call(self, name: str, arguments: object, call_id: str = "c1") -> Envelope:
        return await self.gate.handle(
            ToolCall(id=call_id, name=name, arguments=arguments),  # type: ignore[arg-type]
            ALICE,
        )


@pytest.fixture
def host() -> Host:
    ran: list[tuple[str, float, dict[str, Any]]] = []

    @tool(
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        side_effect=SideEffect.EXTERNAL_WRITE,
        permissions={"limits.set"},
        idempotency=IdempotencyPolicy(mode=IdempotencyMode.PLAN),
        confirmation=ConfirmationPolicy(mode=ConfirmationMode.CONFIRM),
    )
    async def set_limit(
        ctx: ToolContext,
        limit: float,
        extra: dict[str, Any] | None = None,
    ) -> dict[str, object]:
        """Set the account's limit."""
        ran.append(("set_limit", limit, extra or {}))
        return {"set": True}

    @tool(
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        side_effect=SideEffect.LOCAL_WRITE,
        permissions={"limits.set"},
        idempotency=IdempotencyPolicy(mode=IdempotencyMode.COMMAND_ID),
        confirmation=ConfirmationPolicy(mode=ConfirmationMode.NONE),
    )
    async def note_limit(
        ctx: ToolContext,
        limit: float,
        extra: dict[str, Any] | None = None,
    ) -> dict[str, object]:
        """Note a limit without confirmation (the host sends a command id)."""
        ran.append(("note_limit", limit, extra or {}))
        return {"noted": True}

    @tool(risk=RiskLevel.L0_PUBLIC_READ)
    async def quote_limit(limit: float, extra: dict[str, Any] | None = None) -> dict[str, object]:
        """Quote what a limit would cost."""
        ran.append(("quote_limit", limit, extra or {}))
        return {"quoted": True}

    registry = Registry()
    for item in (set_limit, note_limit, quote_limit):
        registry.register(item)
    clock = FixedClock()
    audit = MemoryAuditSink()
    store = MemoryStore()
    writes = Writes(
        registry,
        store,
        Keyring(SigningKey("k1", b"k" * 32)),
        clock=clock,
        audit=audit,
        worker_id="w1",
        new_id=sequential_ids("plan"),
        sleep=_no_wait,
    )
    gate = Gate(registry, writes=writes, clock=clock, audit=audit, sleep=_no_wait)
    return Host(gate, writes, store, audit, ran)


REFUSED = [
    ('{"limit": 1e16}', {"$.limit"}),
    ('{"limit": 9007199254740993.0}', {"$.limit"}),
    ('{"limit": -9007199254740992.0}', {"$.limit"}),
    ('{"limit": 999999999999999868928.0}', {"$.limit"}),
    ('{"limit": 1.5, "extra": {"caps": [1, 2.5, 1E17]}}', {"$.extra.caps[2]"}),
    ({"limit": 1.5, "extra": {"a": {"b": 2.0**60}}}, {"$.extra.a.b"}),
]


@pytest.mark.parametrize(("arguments", "paths"), REFUSED)
async def test_a_planned_write_with_a_float_a_plan_cannot_keep_is_refused_at_stage_1(
    host: Host,
    arguments: object,
    paths: set[str],
) -> None:
    envelope = await host.call("set_limit", arguments)
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert envelope.retryable
    assert set(envelope.field_errors) == paths
    stages = [(e.stage, e.decision) for e in host.audit.for_call("c1")]
    assert stages[-1] == ("syntax", "refused")
    assert not {"schema", "plan", "write"} & {stage for stage, _ in stages}
    assert host.store.get_plan("plan-1") is None
    assert host.ran == []


@pytest.mark.parametrize(("arguments", "paths"), REFUSED)
async def test_an_unconfirmed_write_refuses_the_same_floats(
    host: Host,
    arguments: object,
    paths: set[str],
) -> None:
    envelope = await host.gate.handle(
        ToolCall(id="c1", name="note_limit", arguments=arguments),  # type: ignore[arg-type]
        ALICE,
        command_id="cmd-1",
    )
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert set(envelope.field_errors) == paths
    assert host.ran == []


@pytest.mark.parametrize(("arguments", "_paths"), REFUSED)
async def test_a_read_gets_the_float_as_decoded(
    host: Host,
    arguments: object,
    _paths: set[str],
) -> None:
    envelope = await host.call("quote_limit", arguments)
    assert envelope.status is Status.OK
    assert len(host.ran) == 1
    name, limit, _extra = host.ran[0]
    assert name == "quote_limit"
    assert type(limit) is float


async def test_a_read_gets_1e16_exactly_even_nested(host: Host) -> None:
    envelope = await host.call("quote_limit", '{"limit": 1e16, "extra": {"caps": [1e17]}}')
    assert envelope.status is Status.OK
    assert host.ran == [("quote_limit", 1e16, {"caps": [1e17]})]
    assert type(host.ran[0][2]["caps"][0]) is float


@pytest.mark.parametrize(
    "limit",
    [float(2**53 - 1), -float(2**53 - 1), 1e21, -1e21, 1.5e300, 0.1, 4503599627370495.5],
)
async def test_a_write_just_inside_the_bounds_plans_confirms_and_runs_with_the_number_sent(
    host: Host,
    limit: float,
) -> None:
    envelope = await host.call("set_limit", {"limit": limit, "extra": {"caps": [limit]}})
    assert envelope.error_type is ErrorCode.NEEDS_CONFIRMATION
    plan_id = str(envelope.data["plan_id"])
    record = await host.writes.get_plan(plan_id, ALICE)
    assert record.plan.verify_hash()
    token = await host.writes.issue_token(plan_id, ALICE)
    await host.writes.confirm(plan_id, token.value, ALICE)
    outcome = await host.writes.execute_plan(plan_id, ALICE)
    assert outcome.envelope.status is Status.OK
    assert host.ran == [("set_limit", limit, {"caps": [limit]})]
