"""A write planned before its tool's deprecation day, confirmed or executed after it.

The registry's clock decides: from the day on, the plan's tool runs for nobody. A plan
confirmed the evening before and executed after midnight is refused cleanly
(UNKNOWN_TOOL, nothing runs, the plan stays as it was) and audited; confirming after
midnight is refused as UNKNOWN_TOOL too (not PERMISSION_DENIED: the person may decide,
the tool is gone); and a plan that ran before midnight is replayed after it, never run
again and never reported as a tool that does not exist.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from _integ_catalogue import ALICE, MALLORY, REFUND, build_registry, write_library
from _write_tools import keyring
from handrail import Gate, MemoryAuditSink, RiskLevel, Tool, ToolCall, Writes
from handrail.clock import FixedClock
from handrail.envelope import Status
from handrail.errors import ErrorCode, WriteRefusedError
from handrail.plans import PlanState
from handrail.spec import Deprecation
from handrail.store import MemoryStore
from handrail.testing import sequential_ids

pytestmark = pytest.mark.anyio

EVENING = datetime(2026, 5, 31, 23, 0, tzinfo=UTC)
DAY = date(2026, 6, 1)
TWO_HOURS = 2 * 3600.0


class _Desk:
    """A registry whose refund tool is refused from DAY on, with writes and a gate."""

    def __init__(self, tmp_path: Path) -> None:
        self.clock = FixedClock(EVENING)
        self.audit = MemoryAuditSink()
        self.refunds: list[str] = []
        self.registry, _ = build_registry(
            write_library(tmp_path / "skills"),
            refunds=self.refunds,
            clock=self.clock,
            refund_deprecation=Deprecation(after=DAY, note="Refunds move to the desk."),
        )
        self.writes = Writes(
            self.registry,
            MemoryStore(),
            keyring(),
            clock=self.clock,
            audit=self.audit,
            new_id=sequential_ids("p"),
        )
        self.gate = Gate(self.registry, writes=self.writes, clock=self.clock, audit=self.audit)

    async def planned(self) -> str:
        call = ToolCall(id="c1", name=REFUND, arguments=json.dumps({"invoice": "INV-7"}))
        envelope = await self.gate.handle(call, ALICE)
        assert envelope.error_type is ErrorCode.NEEDS_CONFIRMATION
        assert isinstance(envelope.data, dict)
        plan_id = envelope.data["plan_id"]
        assert isinstance(plan_id, str)
        return plan_id

    async def confirmed(self) -> str:
        plan_id = await self.planned()
        token = await self.writes.issue_token(plan_id, ALICE)
        await self.writes.confirm(plan_id, token.value, ALICE)
        return plan_id

    def refusals(self) -> list[tuple[str | None, str | None]]:
        return [
            (e.tool, e.code)
            for e in self.audit.events
            if e.kind == "plan" and e.decision == "refused"
        ]


async def test_a_plan_confirmed_before_the_day_is_refused_after_it_and_nothing_runs(
    tmp_path: Path,
) -> None:
    desk = _Desk(tmp_path)
    plan_id = await desk.confirmed()
    desk.clock.advance(TWO_HOURS)  # midnight passes between the confirmation and the run
    for _ in range(2):
        outcome = await desk.writes.execute_plan(plan_id, ALICE)
        assert outcome.envelope.status is Status.ERROR
        assert outcome.envelope.error_type is ErrorCode.UNKNOWN_TOOL
        assert outcome.record is None
    assert desk.refunds == []
    assert desk.refusals() == [(REFUND, "UNKNOWN_TOOL")] * 2
    record = await desk.writes.get_plan(plan_id, ALICE)
    assert record.state is PlanState.CONFIRMED  # not half-run: it simply expires


async def test_confirming_after_the_day_says_the_tool_is_gone(tmp_path: Path) -> None:
    desk = _Desk(tmp_path)
    plan_id = await desk.planned()
    token = await desk.writes.issue_token(plan_id, ALICE)
    desk.clock.advance(TWO_HOURS)
    with pytest.raises(WriteRefusedError) as refused:
        await desk.writes.confirm(plan_id, token.value, ALICE)
    assert refused.value.code is ErrorCode.UNKNOWN_TOOL
    assert desk.refusals() == [(REFUND, "UNKNOWN_TOOL")]
    assert desk.refunds == []


async def test_a_plan_that_ran_before_the_day_is_replayed_after_it_not_run_again(
    tmp_path: Path,
) -> None:
    desk = _Desk(tmp_path)
    plan_id = await desk.confirmed()
    first = await desk.writes.execute_plan(plan_id, ALICE)
    assert first.envelope.status is Status.OK
    desk.clock.advance(TWO_HOURS)
    again = await desk.writes.execute_plan(plan_id, ALICE)
    assert again.envelope.status is Status.OK
    assert again.replayed
    assert again.envelope.data == first.envelope.data
    assert desk.refunds == ["INV-7"]


async def test_a_retired_tool_is_only_ever_handed_out_for_a_replay(tmp_path: Path) -> None:
    desk = _Desk(tmp_path)
    # Before its day the tool is looked up as usual; it is not "retired".
    assert desk.registry.retired_tool(REFUND, ALICE) is None
    desk.clock.advance(TWO_HOURS)
    assert desk.registry.lookup(REFUND, ALICE) is None
    assert desk.registry.retired_tool(REFUND, ALICE) is desk.registry.get(REFUND)
    # Never an undeprecated tool, an unknown name, or a tool barred for the tenant.
    assert desk.registry.retired_tool("billing.invoice_lookup", ALICE) is None
    assert desk.registry.retired_tool("nope", ALICE) is None
    desk.registry.register(
        Tool.from_json_schema(
            name="billing.t2_refunds",
            description="Refund invoices of tenant two.",
            input_schema={"type": "object", "properties": {}},
            fn=lambda arguments, ctx: {},
            risk=RiskLevel.L1_INTERNAL_READ,
            enabled_tenants={"t2"},
            deprecation=Deprecation(after=DAY),
        )
    )
    assert desk.registry.retired_tool("billing.t2_refunds", MALLORY) is not None
    assert desk.registry.retired_tool("billing.t2_refunds", ALICE) is None
