"""Crossing tenants, and reaching tools that are disabled or forbidden.

The tenant comes from the Principal, so another tenant's ids are NOT_FOUND; a tool not
enabled for a tenant, disabled, or forbidden (L4) does not exist for the caller: it is
UNKNOWN_TOOL and is never in the exposed toolset.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from handrail import (
    Envelope,
    ErrorCode,
    Gate,
    Principal,
    Registry,
    RiskLevel,
    Status,
    Tool,
    ToolCall,
    tool,
)

WireCheck = Callable[[Envelope, ToolCall], dict[str, Any]]
ADMIN = Principal(
    user_id="root",
    tenant_id="t1",
    permissions=frozenset({"books.read", "admin", "danger"}),
    roles=frozenset({"admin"}),
)


@pytest.mark.anyio
@pytest.mark.invariant(1)
@pytest.mark.parametrize("book_id", ["b1", "b2"])
async def test_another_tenants_book_is_not_found_and_nothing_of_it_is_shown(
    gate: Gate,
    outsider: Principal,
    wire: WireCheck,
    book_id: str,
) -> None:
    call = ToolCall(id="c", name="shop.stock", arguments={"book_id": book_id})
    envelope = await gate.handle(call, outsider)
    assert envelope.error_type is ErrorCode.NOT_FOUND
    shown = wire(envelope, call)
    assert shown["data"] is None
    for leak in ("Dune", "Emma", "stock"):
        assert leak not in shown["summary"]


@pytest.mark.anyio
@pytest.mark.invariant(1)
async def test_each_tenant_reads_only_its_own_books(
    gate: Gate,
    principal: Principal,
    outsider: Principal,
) -> None:
    own = await gate.handle(
        ToolCall(id="c1", name="shop.stock", arguments={"book_id": "b9"}), outsider
    )
    assert own.status is Status.OK
    assert own.data == 7
    theirs = await gate.handle(
        ToolCall(id="c2", name="shop.stock", arguments={"book_id": "b9"}),
        principal,
    )
    assert theirs.error_type is ErrorCode.NOT_FOUND


@pytest.mark.anyio
@pytest.mark.invariant(1)
async def test_a_search_by_another_tenant_finds_nothing_and_cannot_name_a_tenant(
    gate: Gate,
    outsider: Principal,
) -> None:
    search = await gate.handle(
        ToolCall(id="c1", name="shop.search", arguments={"query": "dune"}),
        outsider,
    )
    assert search.status is Status.EMPTY
    forged = await gate.handle(
        ToolCall(id="c2", name="shop.search", arguments={"query": "dune", "tenant": "t1"}),
        outsider,
    )
    assert forged.error_type is ErrorCode.INVALID_ARGUMENTS


def _counted(runs: list[str], **options: Any) -> Tool:
    options.setdefault("risk", RiskLevel.L1_INTERNAL_READ)
    options.setdefault("name", "report")
    options.setdefault("namespace", "ops")

    @tool(**options)
    async def report() -> str:
        """Produce the report."""
        runs.append("ran")
        return "report"

    return report


@pytest.mark.anyio
@pytest.mark.invariant(9)
async def test_a_tool_enabled_for_one_tenant_does_not_exist_for_another(
    principal: Principal,
    outsider: Principal,
) -> None:
    runs: list[str] = []
    registry = Registry()
    registry.register(_counted(runs, enabled_tenants={"t1"}))
    gate = Gate(registry)

    refused = await gate.handle(ToolCall(id="c", name="ops.report", arguments=None), outsider)
    assert refused.error_type is ErrorCode.UNKNOWN_TOOL
    assert runs == []
    assert registry.exposed(outsider) == ()
    assert registry.exposed(outsider, scenario="anything") == ()

    allowed = await gate.handle(ToolCall(id="c", name="ops.report", arguments=None), principal)
    assert allowed.status is Status.OK
    assert [spec.name for spec in registry.exposed(principal)] == ["ops.report"]


@pytest.mark.anyio
@pytest.mark.invariant(9)
async def test_a_disabled_tool_does_not_exist_for_anyone() -> None:
    runs: list[str] = []
    registry = Registry()
    registry.register(_counted(runs, enabled=False))
    gate = Gate(registry)
    envelope = await gate.handle(ToolCall(id="c", name="ops.report", arguments=None), ADMIN)
    assert envelope.error_type is ErrorCode.UNKNOWN_TOOL
    assert runs == []
    assert registry.exposed(ADMIN) == ()


@pytest.mark.anyio
@pytest.mark.invariant(9)
@pytest.mark.parametrize("tenant", ["t1", "t2", "t3"])
async def test_a_forbidden_tool_is_unknown_for_everyone_and_never_exposed(tenant: str) -> None:
    runs: list[str] = []
    registry = Registry()
    registry.register(
        _counted(
            runs,
            name="wipe",
            risk=RiskLevel.L4_FORBIDDEN,
            permissions={"danger"},
            scenarios={"cleanup"},
        ),
    )
    registry.register(_counted(runs))
    gate = Gate(registry)
    someone = Principal(
        user_id="root",
        tenant_id=tenant,
        permissions=ADMIN.permissions,
        roles=ADMIN.roles,
    )

    envelope = await gate.handle(ToolCall(id="c", name="ops.wipe", arguments=None), someone)
    batch = await gate.handle_batch(
        [ToolCall(id="b1", name="ops.wipe", arguments=None)],
        someone,
        timeout=5.0,
    )

    assert envelope.error_type is ErrorCode.UNKNOWN_TOOL
    assert [e.error_type for e in batch] == [ErrorCode.UNKNOWN_TOOL]
    assert runs == []
    for scenario in (None, "cleanup", "other"):
        exposed = [spec.name for spec in registry.exposed(someone, scenario=scenario)]
        assert "ops.wipe" not in exposed
    assert "ops.wipe" in registry  # registered for the record, never reachable
