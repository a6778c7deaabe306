"""A tool's declared `rate_limit`: its per-tool quota rate, enforced by the gate."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from _catalogue_apps import make_tool
from handrail import ErrorCode, Gate, Principal, Registry, Status, ToolCall
from handrail.authz.quota import (
    Limit,
    Quota,
    QuotaPolicy,
    Rate,
    RateLimiter,
    Scope,
    TenantQuota,
    declared_rates,
)
from handrail.errors import ConfigurationError
from handrail.testing import MemoryAuditSink, sequential_ids

HOURLY = Rate(amount=2, seconds=3600)
DAILY = Rate(amount=100, seconds=86400)
ALICE = Principal(user_id="alice", tenant_id="t1")
BOB = Principal(user_id="bob", tenant_id="t1")
MALLORY = Principal(user_id="mallory", tenant_id="t2")


def test_several_declared_rates_are_all_read_and_a_repeat_counts_once() -> None:
    assert Rate.parse_many("2/hour;100/day") == (HOURLY, DAILY)
    assert Rate.parse_many("2/hour, 2 per 3600 seconds") == (HOURLY,)
    with pytest.raises(ConfigurationError):
        Rate.parse_many("2/hour;never")


def test_a_spec_without_a_rate_declares_none() -> None:
    assert declared_rates(make_tool("a.read_ticket").spec) is None
    assert declared_rates(make_tool("a.read_ticket", rate_limit="2/hour").spec) == (HOURLY,)


def test_the_declared_rate_is_the_tools_per_tool_limit_over_the_default() -> None:
    policy = QuotaPolicy(default=Quota(per_tool=(DAILY,)))
    assert policy.limits_for("t1", "a.x", declared=(HOURLY,)) == (
        Limit(scope=Scope.TOOL, rate=HOURLY),
    )
    assert policy.limits_for("t1", "a.x") == (Limit(scope=Scope.TOOL, rate=DAILY),)


def test_an_operator_layer_for_the_tool_or_an_exempt_tenant_overrides_the_declared_rate() -> None:
    policy = QuotaPolicy(
        tools={"a.x": Quota(per_tool=(DAILY,))},
        tenants={"free": TenantQuota(exempt=True)},
    )
    assert policy.limits_for("t1", "a.x", declared=(HOURLY,)) == (
        Limit(scope=Scope.TOOL, rate=DAILY),
    )
    assert policy.limits_for("free", "a.y", declared=(HOURLY,)) == ()


async def _calls(gate: Gate, principal: Principal, count: int, prefix: str) -> list[Status]:
    statuses = []
    for n in range(count):
        call = ToolCall(id=f"{prefix}{n}", name="desk.read_ticket", arguments={"id": "T-1"})
        statuses.append((await gate.handle(call, principal)).status)
    return statuses


@pytest.mark.anyio
async def test_a_gate_without_a_limiter_still_holds_a_tool_to_its_declared_rate() -> None:
    registry = Registry()
    registry.register(make_tool("desk.read_ticket", rate_limit="2/hour"))
    registry.register(make_tool("desk.read_note", description="Read one note of a ticket."))
    audit = MemoryAuditSink()
    gate = Gate(registry, audit=audit, new_id=sequential_ids())

    alice = await _calls(gate, ALICE, 3, "a")
    bob = await _calls(gate, BOB, 1, "b")
    other_tenant = await _calls(gate, MALLORY, 2, "m")
    unlimited = [
        (
            await gate.handle(
                ToolCall(id=f"n{n}", name="desk.read_note", arguments={"id": "T-1"}), ALICE
            )
        ).status
        for n in range(4)
    ]

    assert alice == [Status.OK, Status.OK, Status.ERROR]
    assert bob == [Status.ERROR]  # the rate is the tool's, shared by the tenant's users
    assert other_tenant == [Status.OK, Status.OK]
    assert unlimited == [Status.OK] * 4
    refused = audit.for_call("a2")[-1]
    assert (refused.stage, refused.decision) == ("quota", "refused")


@pytest.mark.anyio
async def test_a_configured_limiter_counts_the_declared_rate_too(
    make_limiter: Callable[[QuotaPolicy], RateLimiter],
) -> None:
    registry = Registry()
    registry.register(make_tool("desk.read_ticket", rate_limit="2/hour"))
    gate = Gate(registry, limiter=make_limiter(QuotaPolicy()))
    call = ToolCall(id="c", name="desk.read_ticket", arguments={"id": "T-1"})
    envelopes = [await gate.handle(call, ALICE) for _ in range(3)]
    assert [e.status for e in envelopes] == [Status.OK, Status.OK, Status.ERROR]
    assert envelopes[-1].error_type is ErrorCode.RATE_LIMITED
    assert envelopes[-1].retryable
    assert 1 <= (envelopes[-1].retry_after or 0) <= 3600


def test_the_declared_rate_holds_across_the_sync_calls_of_one_gate() -> None:
    # Each `handle_sync` runs its own event loop; the counts outlive each of them.
    registry = Registry()
    registry.register(make_tool("desk.read_ticket", rate_limit="2/hour"))
    gate = Gate(registry)
    call = ToolCall(id="c", name="desk.read_ticket", arguments={"id": "T-1"})
    statuses = [gate.handle_sync(call, ALICE).status for _ in range(3)]
    assert statuses == [Status.OK, Status.OK, Status.ERROR]
