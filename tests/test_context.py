"""ToolContext: the facts a running tool may know, and its access to declared secrets."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime

import pytest

from handrail import (
    ConfirmationMode,
    ConfirmationPolicy,
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
from handrail.context import reporting_progress
from handrail.credentials import (
    SecretAccessError,
    SecretAccessReason,
    SecretLedger,
    Secrets,
    StaticSecretProvider,
)
from handrail.declare.exposure import ExposureRequest
from handrail.testing import FixedClock

API_KEY = "sk-live-7Hq2x9Lm4Pz"


@tool(risk=RiskLevel.L1_INTERNAL_READ, secrets={"crm.api_key"})
def lookup(customer: str, ctx: ToolContext) -> str:
    """Look a customer up in the CRM."""
    return f"{customer} via {len(ctx.secret('crm.api_key'))}-char key"


def _context(secrets: Secrets | None = None, *, tenant_id: str = "t1") -> ToolContext:
    clock = FixedClock(datetime(2026, 5, 1, tzinfo=UTC))
    return ToolContext(
        principal=Principal(user_id="u1", tenant_id=tenant_id),
        call_id="call-1",
        tool=lookup.spec.name,
        deadline=clock.monotonic() + 5,
        clock=clock,
        secrets=secrets,
    )


def _secrets(ledger: SecretLedger, *, tenant_id: str = "t1") -> Secrets:
    return Secrets(
        StaticSecretProvider({("t1", "crm.api_key"): API_KEY, ("t1", "db"): "db-password-1"}),
        tenant_id=tenant_id,
        allowed=lookup.spec.secrets,
        tool=lookup.spec.name,
        ledger=ledger,
    )


def test_a_tool_reads_a_declared_secret_through_its_context() -> None:
    ledger = SecretLedger()
    ctx = _context(_secrets(ledger))
    assert ctx.secret("crm.api_key") == API_KEY
    assert ledger.scrub(f"Bearer {API_KEY}") == "Bearer [SECRET:crm.api_key]"


def test_a_context_without_a_provider_refuses_every_secret() -> None:
    ctx = _context()
    with pytest.raises(SecretAccessError) as raised:
        ctx.secret("crm.api_key")
    assert raised.value.reason is SecretAccessReason.NOT_CONFIGURED
    assert raised.value.tool == lookup.spec.name


def test_a_secret_the_tool_did_not_declare_is_refused_even_if_the_provider_has_it() -> None:
    ledger = SecretLedger()
    ctx = _context(_secrets(ledger))
    with pytest.raises(SecretAccessError) as raised:
        ctx.secret("db")
    assert raised.value.reason is SecretAccessReason.UNDECLARED
    assert len(ledger) == 0


def test_the_context_reads_secrets_for_the_principals_tenant_only() -> None:
    ctx = _context(_secrets(SecretLedger(), tenant_id="t2"), tenant_id="t2")
    with pytest.raises(SecretAccessError) as raised:
        ctx.secret("crm.api_key")
    assert raised.value.reason is SecretAccessReason.MISSING


def test_the_context_repr_names_handles_but_never_a_value() -> None:
    ctx = _context(_secrets(SecretLedger()))
    ctx.secret("crm.api_key")
    shown = repr(ctx)
    assert API_KEY not in shown
    assert "allowed=['crm.api_key']" in shown


def test_the_secrets_of_a_context_cannot_be_swapped() -> None:
    ctx = _context()
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.secrets = _secrets(SecretLedger())  # type: ignore[misc]


def test_the_secrets_parameter_stays_out_of_the_model_facing_schema() -> None:
    assert set(lookup.spec.input_schema["properties"]) == {"customer"}
    assert lookup.spec.secrets == frozenset({"crm.api_key"})


@pytest.mark.anyio
async def test_progress_goes_nowhere_unless_a_host_listens() -> None:
    ctx = _context()
    await ctx.report_progress(1, 2, "half")  # nobody asked: nothing happens, nothing raises
    heard: list[tuple[float, float | None, str | None]] = []

    async def reporter(progress: float, total: float | None, message: str | None) -> None:
        heard.append((progress, total, message))

    with reporting_progress(reporter):
        await ctx.report_progress(1, 2, "half")
        await ctx.report_progress(2)
    await ctx.report_progress(3)
    assert heard == [(1, 2, "half"), (2, None, None)]


@pytest.mark.anyio
async def test_progress_follows_the_call_into_the_tasks_it_runs_in() -> None:
    ctx = _context()
    heard: list[float] = []

    async def reporter(progress: float, total: float | None, message: str | None) -> None:
        heard.append(progress)

    with reporting_progress(reporter):
        await asyncio.create_task(ctx.report_progress(1))
    await asyncio.create_task(ctx.report_progress(2))
    assert heard == [1]


def test_the_gate_hands_a_tool_the_exposure_request_it_was_given_and_none_without() -> None:
    seen: list[object] = []

    @tool(risk=RiskLevel.L1_INTERNAL_READ)
    def peek(ctx: ToolContext) -> str:
        """Report what decided the toolset."""
        seen.append(ctx.exposure)
        return "ok"

    registry = Registry()
    registry.register(peek)
    gate = Gate(registry, clock=FixedClock())
    principal = Principal(user_id="u1", tenant_id="t1")
    request = ExposureRequest(scenario="support", discovered=frozenset({"x.found"}))
    call = ToolCall(id="c1", name=peek.spec.name, arguments="{}")
    shown = asyncio.run(
        gate.handle(call, principal, exposure=registry.exposure(principal, request))
    )
    plain = asyncio.run(gate.handle(call, principal))
    assert (shown.status, plain.status) == (Status.OK, Status.OK)
    assert seen == [request, None]


def test_a_writes_business_rules_see_the_exposure_request_too() -> None:
    seen: list[object] = []

    @tool(
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        side_effect=SideEffect.LOCAL_WRITE,
        idempotency=IdempotencyPolicy(mode=IdempotencyMode.COMMAND_ID),
        confirmation=ConfirmationPolicy(mode=ConfirmationMode.CONFIRM),
    )
    def rename(name: str) -> str:
        """Rename the thing."""
        return name

    def check(arguments: object, ctx: ToolContext) -> None:
        seen.append(ctx.exposure)

    registry = Registry()
    registry.register(rename.with_validators(check))
    gate = Gate(registry, clock=FixedClock())
    principal = Principal(user_id="u1", tenant_id="t1")
    request = ExposureRequest(narrowed_to=frozenset({rename.spec.name}))
    call = ToolCall(id="c1", name=rename.spec.name, arguments='{"name": "b"}')
    envelope = asyncio.run(
        gate.handle(call, principal, exposure=registry.exposure(principal, request))
    )
    assert envelope.error_type is ErrorCode.RISK_BLOCKED  # no write path: refused after stage 3
    assert seen == [request]
