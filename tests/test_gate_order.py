"""The coarse permission check: its own audited stage, after schema and before business rules.

A caller who may not use a tool at all is refused before any business validator reads
data and before the policy is asked; resource-level authorization stays after the
business rules. Every entry point of the gate takes the same path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

import pytest
from pydantic import Field

from _write_tools import ARGS, Downstream, keyring, ticket_tool
from handrail import (
    ConfirmationMode,
    Decision,
    ErrorCode,
    Gate,
    NotFound,
    Outcome,
    Principal,
    Registry,
    RiskLevel,
    Status,
    Tool,
    ToolCall,
    ToolContext,
    Writes,
    tool,
)
from handrail.testing import FixedClock, MemoryAuditSink, MemoryStore, sequential_ids

pytestmark = pytest.mark.anyio

RECORDS = {"r1": {"title": "open"}, "r2": {"title": "restricted"}}
READER = Principal(user_id="u", tenant_id="t1", permissions=frozenset({"records.read"}))
STRANGER = Principal(user_id="s", tenant_id="t1", permissions=frozenset())


@dataclass
class Seen:
    """What ran: business validators (by id), policy decisions (by action), tools."""

    validated: list[str] = field(default_factory=list)
    decided: list[str] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)


class DenyRestricted:
    """A policy that denies the restricted record and records every decision."""

    def __init__(self, seen: Seen) -> None:
        self._seen = seen

    async def decide(
        self,
        principal: Principal,
        action: str,
        resource: object,
        context: Mapping[str, object],
    ) -> Decision:
        del principal, context
        self._seen.decided.append(action)
        if getattr(resource, "record_id", None) == "r2":
            return Decision(outcome=Outcome.DENY, reason="restricted", rule="restricted")
        return Decision(outcome=Outcome.ALLOW, reason="fine", rule="fine")


def _records_tool(seen: Seen) -> Tool:
    def exists(args: Any, ctx: ToolContext) -> None:
        seen.validated.append(args.record_id)
        if args.record_id not in RECORDS:
            raise NotFound("There is no such record.")

    @tool(
        risk=RiskLevel.L1_INTERNAL_READ,
        name="records.get",
        permissions={"records.read"},
        validators=[exists],
    )
    async def get(record_id: Annotated[str, Field(pattern=r"^r[0-9]+$")]) -> dict[str, str]:
        """One record."""
        seen.ran.append(record_id)
        return RECORDS[record_id]

    return get


def _gate(seen: Seen, *, policy: bool = True) -> tuple[Gate, MemoryAuditSink]:
    registry = Registry()
    registry.register(_records_tool(seen))
    audit = MemoryAuditSink()
    gate = Gate(
        registry,
        audit=audit,
        clock=FixedClock(),
        new_id=sequential_ids(),
        policy=DenyRestricted(seen) if policy else None,
    )
    return gate, audit


def _get(record_id: str, call_id: str = "c1") -> ToolCall:
    return ToolCall(id=call_id, name="records.get", arguments={"record_id": record_id})


def _stages(audit: MemoryAuditSink, call_id: str = "c1") -> list[tuple[str, str]]:
    return [(event.stage, event.decision) for event in audit.for_call(call_id)]


@pytest.mark.invariant(2)
async def test_the_permission_stage_is_audited_between_schema_and_business_rules() -> None:
    seen = Seen()
    gate, audit = _gate(seen)
    envelope = await gate.handle(_get("r1"), READER)
    assert envelope.status is Status.OK
    assert _stages(audit) == [
        ("lookup", "pass"),
        ("syntax", "pass"),
        ("schema", "pass"),
        ("permission", "pass"),
        ("business", "pass"),
        ("authorization", "pass"),
        ("execute", "ok"),
    ]


@pytest.mark.invariant(2)
@pytest.mark.parametrize("policy", [True, False], ids=["with-policy", "without-policy"])
@pytest.mark.parametrize("record_id", ["r1", "r2", "r9"])
async def test_without_the_tools_permission_no_business_validator_or_policy_runs(
    policy: bool,
    record_id: str,
) -> None:
    seen = Seen()
    gate, audit = _gate(seen, policy=policy)
    envelope = await gate.handle(_get(record_id), STRANGER)
    assert envelope.error_type is ErrorCode.PERMISSION_DENIED
    assert envelope.retryable is False
    assert seen == Seen()
    assert _stages(audit) == [
        ("lookup", "pass"),
        ("syntax", "pass"),
        ("schema", "pass"),
        ("permission", "refused"),
    ]
    last = audit.for_call("c1")[-1]
    assert (last.code, last.detail) == (
        ErrorCode.PERMISSION_DENIED,
        "missing permissions: records.read",
    )


@pytest.mark.parametrize(
    ("arguments", "stage"),
    [('{"record_id": ', "syntax"), ('{"record_id": "x1"}', "schema")],
)
async def test_syntax_and_schema_still_refuse_ahead_of_the_permission_check(
    arguments: str,
    stage: str,
) -> None:
    seen = Seen()
    gate, audit = _gate(seen)
    call = ToolCall(id="c1", name="records.get", arguments=arguments)
    envelope = await gate.handle(call, STRANGER)
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert audit.for_call("c1")[-1].stage == stage
    assert seen == Seen()


async def test_with_the_permission_a_missing_id_is_not_found_in_the_business_stage() -> None:
    seen = Seen()
    gate, audit = _gate(seen)
    envelope = await gate.handle(_get("r9"), READER)
    assert envelope.error_type is ErrorCode.NOT_FOUND
    assert _stages(audit)[-2:] == [("permission", "pass"), ("business", "refused")]
    assert seen == Seen(validated=["r9"])


async def test_a_resource_level_denial_still_comes_after_the_business_rules() -> None:
    seen = Seen()
    gate, audit = _gate(seen)
    envelope = await gate.handle(_get("r2"), READER)
    assert envelope.error_type is ErrorCode.PERMISSION_DENIED
    assert _stages(audit)[-3:] == [
        ("permission", "pass"),
        ("business", "pass"),
        ("authorization", "refused"),
    ]
    assert audit.for_call("c1")[-1].detail == "rule=restricted: restricted"
    assert seen == Seen(validated=["r2"], decided=["records.get"])


async def test_a_batch_refuses_each_call_without_the_permission_before_its_business_rules() -> None:
    seen = Seen()
    gate, audit = _gate(seen)
    envelopes = await gate.handle_batch([_get("r1", "a"), _get("r9", "b")], STRANGER)
    assert [envelope.error_type for envelope in envelopes] == [ErrorCode.PERMISSION_DENIED] * 2
    assert envelopes[0].to_model_dict() == envelopes[1].to_model_dict()
    assert seen == Seen()
    assert [_stages(audit, call_id)[-1] for call_id in ("a", "b")] == [
        ("permission", "refused"),
    ] * 2


def test_the_sync_entry_points_take_the_same_path() -> None:
    seen = Seen()
    gate, audit = _gate(seen)
    one = gate.handle_sync(_get("r9"), STRANGER)
    [two] = gate.handle_batch_sync([_get("r1", "c2")], STRANGER)
    assert one.error_type is two.error_type is ErrorCode.PERMISSION_DENIED
    assert seen == Seen()
    assert _stages(audit)[-1] == _stages(audit, "c2")[-1] == ("permission", "refused")


# --- the write path ---------------------------------------------------------------------------

APPROVER = Principal(user_id="ivan", tenant_id="t1", permissions=frozenset({"tickets.approve"}))
REQUESTER = Principal(
    user_id="alice",
    tenant_id="t1",
    permissions=frozenset({"tickets.create", "tickets.approve"}),
)


def _write_gate(
    validated: list[str],
    *,
    mode: ConfirmationMode = ConfirmationMode.CONFIRM,
) -> tuple[Gate, MemoryAuditSink]:
    def asset_known(args: Any, ctx: ToolContext) -> None:
        validated.append(args.asset_id)

    registry = Registry()
    registry.register(ticket_tool(Downstream(), mode=mode).with_validators(asset_known))
    clock = FixedClock()
    audit = MemoryAuditSink()
    writes = Writes(
        registry,
        MemoryStore(),
        keyring(),
        clock=clock,
        audit=audit,
        worker_id="w1",
        new_id=sequential_ids("p"),
        sleep=lambda _seconds: asyncio.sleep(0),
    )
    return Gate(registry, writes=writes, clock=clock, audit=audit), audit


async def test_handle_write_refuses_without_the_permission_before_the_business_rules() -> None:
    validated: list[str] = []
    gate, audit = _write_gate(validated)
    call = ToolCall(id="w1", name="create_ticket", arguments=ARGS)
    outcome = await gate.handle_write(call, STRANGER, command_id="cmd-1")
    assert outcome.envelope.error_type is ErrorCode.PERMISSION_DENIED
    assert (outcome.record, outcome.key, outcome.plan_id) == (None, None, None)
    [batched] = await gate.handle_batch_writes(
        [ToolCall(id="w2", name="create_ticket", arguments=ARGS)], STRANGER
    )
    assert batched.envelope.error_type is ErrorCode.PERMISSION_DENIED
    assert validated == []
    assert _stages(audit, "w1")[-1] == _stages(audit, "w2")[-1] == ("permission", "refused")


async def test_an_approver_without_the_tools_permission_revises_a_plan_with_no_business_rule() -> (
    None
):
    validated: list[str] = []
    gate, audit = _write_gate(validated, mode=ConfirmationMode.APPROVE)
    proposed = await gate.handle(ToolCall(id="w1", name="create_ticket", arguments=ARGS), REQUESTER)
    assert proposed.error_type is ErrorCode.NEEDS_APPROVAL
    assert validated == ["asset-1"]
    plan_id = str(proposed.data["plan_id"])
    revised = await gate.revise_plan(plan_id, ARGS, APPROVER)
    assert revised.error_type is ErrorCode.PERMISSION_DENIED
    assert validated == ["asset-1"]
    assert _stages(audit, f"revise-{plan_id}")[-1] == ("permission", "refused")
