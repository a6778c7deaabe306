from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field

from handrail import (
    ConfirmationMode,
    ConfirmationPolicy,
    Conflict,
    Decision,
    ErrorCode,
    FromPrincipal,
    Gate,
    NeedsClarification,
    NotFound,
    Outcome,
    Principal,
    Registry,
    RiskLevel,
    SideEffect,
    Status,
    Tool,
    ToolCall,
    ToolContext,
    ToolFailed,
    ToolRetryable,
    tool,
)
from handrail.declare.exposure import ExposureRequest
from handrail.errors import ConfigurationError, StoreError
from handrail.testing import FixedClock, MemoryAuditSink, sequential_ids

READER = Principal(user_id="u", tenant_id="t1", permissions=frozenset({"r"}))


class _Counter:
    def __init__(self) -> None:
        self.calls = 0


def _gate(*tools: Tool, **options: Any) -> tuple[Gate, MemoryAuditSink]:
    registry = Registry()
    for item in tools:
        registry.register(item)
    audit = MemoryAuditSink()
    options.setdefault("clock", FixedClock())
    return Gate(registry, audit=audit, new_id=sequential_ids(), **options), audit


def _call(name: str, arguments: object = None, call_id: str = "c1") -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)  # type: ignore[arg-type]


def _counted_tool(counter: _Counter, **options: Any) -> Tool:
    options.setdefault("risk", RiskLevel.L1_INTERNAL_READ)
    options.setdefault("permissions", {"r"})
    options.setdefault("name", "probe")

    @tool(**options)
    async def probe(n: Annotated[int, Field(ge=0, le=10)] = 0) -> dict[str, int]:
        """Return n."""
        counter.calls += 1
        return {"n": n}

    return probe


# --- the path and its order --------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.invariant(2)
async def test_a_passing_call_is_audited_stage_by_stage_in_order(
    gate: Gate,
    principal: Principal,
    audit: MemoryAuditSink,
) -> None:
    envelope = await gate.handle(_call("shop.search", '{"query":"e"}'), principal)
    assert envelope.status is Status.OK
    trail = audit.for_call("c1")
    assert [(e.stage, e.decision) for e in trail] == [
        ("lookup", "pass"),
        ("syntax", "pass"),
        ("schema", "pass"),
        ("permission", "pass"),
        ("business", "pass"),
        ("authorization", "pass"),
        ("execute", "ok"),
    ]
    first = trail[0]
    assert first.request_id == "req-1"
    assert first.tenant_id == "t1"
    assert first.user_id == "alice"
    assert first.schema_version == gate.registry.get("shop.search").spec.schema_version
    assert trail[1].args_hash is not None
    assert trail[1].args_summary == '{"query": "e"}'


@pytest.mark.anyio
@pytest.mark.invariant(2)
@pytest.mark.parametrize(
    ("arguments", "permissions", "code", "stage"),
    [
        ("{", frozenset(), ErrorCode.INVALID_ARGUMENTS, "syntax"),
        ('{"n": 99}', frozenset(), ErrorCode.INVALID_ARGUMENTS, "schema"),
        ('{"n": 3}', frozenset(), ErrorCode.PERMISSION_DENIED, "permission"),
        ('{"n": 3}', frozenset({"r"}), ErrorCode.CONFLICT, "business"),
    ],
)
async def test_each_stage_refuses_with_its_own_code_before_the_later_stages_run(
    arguments: str,
    permissions: frozenset[str],
    code: ErrorCode,
    stage: str,
) -> None:
    counter = _Counter()

    def odd_is_taken(args: Any, ctx: ToolContext) -> None:
        if args.n == 3:
            raise Conflict("3 is taken")

    probe = _counted_tool(counter).with_validators(odd_is_taken)
    gate, audit = _gate(probe)
    who = Principal(user_id="u", tenant_id="t1", permissions=permissions)
    envelope = await gate.handle(_call("probe", arguments), who)
    assert envelope.error_type is code
    assert counter.calls == 0
    last = audit.events[-1]
    assert (last.stage, last.decision, last.code) == (stage, "refused", code)


@pytest.mark.anyio
async def test_an_unknown_name_is_refused_as_unknown_tool(gate: Gate, principal: Principal) -> None:
    envelope = await gate.handle(_call("shop.nope"), principal)
    assert envelope.error_type is ErrorCode.UNKNOWN_TOOL
    assert envelope.schema_version is None


@pytest.mark.anyio
async def test_permission_denied_is_terminal(gate: Gate) -> None:
    nobody = Principal(user_id="x", tenant_id="t1")
    envelope = await gate.handle(_call("shop.search", '{"query":"e"}'), nobody)
    assert envelope.error_type is ErrorCode.PERMISSION_DENIED
    assert envelope.retryable is False


@pytest.mark.anyio
async def test_schema_errors_name_each_field_and_are_retryable(
    gate: Gate,
    principal: Principal,
) -> None:
    envelope = await gate.handle(
        _call("shop.search", {"limit": 50, "extra": 1, "filters": {"genres": ["poetry"]}}),
        principal,
    )
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert envelope.retryable is True
    assert set(envelope.field_errors) == {
        "$.query",
        "$.limit",
        "$.extra",
        "$.filters.genres[0]",
    }


@pytest.mark.anyio
async def test_a_clarification_carries_its_candidates() -> None:
    def ambiguous(args: Any, ctx: ToolContext) -> None:
        raise NeedsClarification("which one?", candidates=["a", "b"])

    gate, _ = _gate(_counted_tool(_Counter()).with_validators(ambiguous))
    envelope = await gate.handle(_call("probe"), READER)
    assert envelope.error_type is ErrorCode.NEEDS_CLARIFICATION
    assert envelope.candidates == ("a", "b")
    assert envelope.to_model_dict()["candidates"] == ["a", "b"]


@pytest.mark.anyio
async def test_async_business_validators_run_in_order_and_stop_at_the_first_refusal() -> None:
    seen: list[str] = []

    async def first(args: Any, ctx: ToolContext) -> None:
        seen.append("first")
        raise NotFound("none")

    async def second(args: Any, ctx: ToolContext) -> None:
        seen.append("second")

    gate, _ = _gate(_counted_tool(_Counter()).with_validators(first, second))
    envelope = await gate.handle(_call("probe"), READER)
    assert envelope.error_type is ErrorCode.NOT_FOUND
    assert seen == ["first"]


# --- identity and exposure --------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.invariant(1)
async def test_trusted_parameters_come_from_the_principal_and_cannot_be_supplied() -> None:
    @tool(risk=RiskLevel.L1_INTERNAL_READ, name="whoami")
    async def whoami(
        tenant: Annotated[str, FromPrincipal("tenant_id")],
        user: Annotated[str, FromPrincipal("user_id")],
        region: Annotated[str, FromPrincipal("data_scope.region")],
    ) -> dict[str, str]:
        """Echo the trusted identity."""
        return {"tenant": tenant, "user": user, "region": region}

    gate, _ = _gate(whoami)
    who = Principal(user_id="bob", tenant_id="t9", data_scope={"region": "eu"})
    ok = await gate.handle(_call("whoami", {}), who)
    assert ok.data == {"tenant": "t9", "user": "bob", "region": "eu"}
    forged = await gate.handle(_call("whoami", {"tenant": "t1"}), who)
    assert forged.error_type is ErrorCode.INVALID_ARGUMENTS
    assert "tenant" not in whoami.spec.input_schema["properties"]


@pytest.mark.anyio
@pytest.mark.invariant(9)
async def test_forbidden_and_disabled_tools_are_unknown_and_never_exposed() -> None:
    counter = _Counter()
    forbidden = _counted_tool(counter, name="nuke", risk=RiskLevel.L4_FORBIDDEN)
    disabled = _counted_tool(counter, name="off", enabled=False)
    elsewhere = _counted_tool(counter, name="t2only", enabled_tenants={"t2"})
    visible = _counted_tool(counter, name="probe")
    gate, _ = _gate(forbidden, disabled, elsewhere, visible)
    for name in ("nuke", "off", "t2only"):
        envelope = await gate.handle(_call(name), READER)
        assert envelope.error_type is ErrorCode.UNKNOWN_TOOL
    assert counter.calls == 0
    assert [s.name for s in gate.registry.exposed(READER)] == ["probe"]


# --- execution ----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_write_tool_is_blocked_and_not_executed_by_the_read_path() -> None:
    counter = _Counter()
    write = _counted_tool(
        counter,
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        side_effect=SideEffect.EXTERNAL_WRITE,
        confirmation=ConfirmationPolicy(mode=ConfirmationMode.CONFIRM),
    )
    gate, audit = _gate(write)
    envelope = await gate.handle(_call("probe"), READER)
    assert envelope.error_type is ErrorCode.RISK_BLOCKED
    assert counter.calls == 0
    assert audit.events[-1].stage == "risk"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("raised", "code", "retryable"),
    [
        (ToolFailed("card declined"), ErrorCode.FAILED_FINAL, False),
        (ToolRetryable("busy", retry_after=2.5), ErrorCode.TRANSIENT, True),
        (NotFound("gone"), ErrorCode.NOT_FOUND, False),
        (ConnectionError("reset by 10.0.0.7"), ErrorCode.TRANSIENT, True),
        (ValueError("/srv/app.py: secret=hunter2"), ErrorCode.FAILED_FINAL, False),
    ],
)
async def test_tool_exceptions_map_to_codes_and_undeclared_text_stays_in_the_audit_redacted(
    raised: Exception,
    code: ErrorCode,
    retryable: bool,
) -> None:
    @tool(risk=RiskLevel.L0_PUBLIC_READ, name="boom")
    async def boom() -> None:
        """Fail."""
        raise raised

    gate, audit = _gate(boom)
    envelope = await gate.handle(_call("boom"), READER)
    assert envelope.error_type is code
    assert envelope.retryable is retryable
    if isinstance(raised, ToolRetryable):
        assert envelope.retry_after == 2.5
    if isinstance(raised, ValueError | ConnectionError):
        assert str(raised) not in envelope.to_json()
        detail = audit.events[-1].detail or ""
        # The operators' copy keeps the text, with credentials and internal IPs redacted.
        assert f"{type(raised).__name__}: " in detail
        assert (
            "[REDACTED:credential]" if isinstance(raised, ValueError) else "[REDACTED:ip_address]"
        ) in detail
        assert "hunter2" not in detail
        assert "10.0.0.7" not in detail


@pytest.mark.anyio
async def test_a_slow_read_times_out_retryably_and_its_task_is_cancelled() -> None:
    stopped = asyncio.Event()

    @tool(risk=RiskLevel.L0_PUBLIC_READ, name="slow", timeout=0.05)
    async def slow() -> None:
        """Never finishes on its own."""
        try:
            await asyncio.Event().wait()
        finally:
            stopped.set()

    gate, audit = _gate(slow, clock=None)
    envelope = await gate.handle(_call("slow"), READER)
    assert envelope.error_type is ErrorCode.TIMEOUT
    assert envelope.retryable is True
    assert stopped.is_set()
    assert (audit.events[-1].stage, audit.events[-1].code) == ("execute", ErrorCode.TIMEOUT)


@pytest.mark.anyio
async def test_the_request_budget_caps_the_tool_deadline() -> None:
    seen: list[float] = []

    @tool(risk=RiskLevel.L0_PUBLIC_READ, name="peek", timeout=60)
    async def peek(ctx: ToolContext) -> None:
        """Report the time left."""
        seen.append(ctx.remaining())

    gate, _ = _gate(peek)
    await gate.handle(_call("peek"), READER, timeout=2.0)
    assert seen == [2.0]


@pytest.mark.anyio
async def test_a_slow_business_validator_times_out_in_the_business_stage() -> None:
    async def hang(args: Any, ctx: ToolContext) -> None:
        await asyncio.Event().wait()

    probe = _counted_tool(_Counter(), timeout=0.05).with_validators(hang)
    gate, audit = _gate(probe, clock=None)
    envelope = await gate.handle(_call("probe"), READER)
    assert envelope.error_type is ErrorCode.TIMEOUT
    assert audit.events[-1].stage == "business"


@pytest.mark.anyio
async def test_a_timeout_error_raised_by_the_tool_itself_is_not_a_deadline() -> None:
    @tool(risk=RiskLevel.L0_PUBLIC_READ, name="sock")
    async def sock() -> None:
        """Fail like a socket."""
        raise TimeoutError

    gate, _ = _gate(sock)
    envelope = await gate.handle(_call("sock"), READER)
    assert envelope.error_type is ErrorCode.FAILED_FINAL


@pytest.mark.anyio
async def test_cancelling_the_request_propagates_and_is_audited() -> None:
    started = asyncio.Event()

    @tool(risk=RiskLevel.L0_PUBLIC_READ, name="wait")
    async def wait() -> None:
        """Wait forever."""
        started.set()
        await asyncio.Event().wait()

    gate, audit = _gate(wait)
    task = asyncio.create_task(gate.handle(_call("wait"), READER))
    await asyncio.wait_for(started.wait(), timeout=5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (audit.events[-1].decision, audit.events[-1].code) == ("cancelled", "CANCELLED")


# --- result shaping -------------------------------------------------------------------------------


class _Book(BaseModel):
    title: str
    price: Decimal


@dataclass
class _Stamp:
    at: datetime


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("result", "status", "data"),
    [
        (None, Status.EMPTY, None),
        ([], Status.EMPTY, []),
        ({}, Status.EMPTY, {}),
        ([1, 2], Status.OK, [1, 2]),
        (_Book(title="Dune", price=Decimal("9.99")), Status.OK, {"title": "Dune", "price": "9.99"}),
        (
            _Stamp(at=datetime(2026, 1, 1, tzinfo=UTC)),
            Status.OK,
            {"at": "2026-01-01T00:00:00Z"},
        ),
    ],
)
async def test_results_become_json_data_and_empty_is_not_an_error(
    result: object,
    status: Status,
    data: object,
) -> None:
    @tool(risk=RiskLevel.L0_PUBLIC_READ, name="give")
    async def give() -> object:
        """Return the fixture value."""
        return result

    gate, _ = _gate(give)
    envelope = await gate.handle(_call("give"), READER)
    assert envelope.status is status
    assert envelope.data == data
    assert envelope.error_type is None


@pytest.mark.anyio
async def test_an_oversized_result_is_cut_to_the_budget_and_marked_truncated() -> None:
    @tool(risk=RiskLevel.L0_PUBLIC_READ, name="big")
    async def big() -> str:
        """Return a lot."""
        return "x" * 1000

    gate, _ = _gate(big, max_result_chars=100)
    envelope = await gate.handle(_call("big"), READER)
    assert envelope.status is Status.TRUNCATED
    assert envelope.truncated is True
    assert envelope.data == "x" * 98  # 100 characters of JSON, quotes included
    assert [(o.path, o.unit, o.kept, o.total) for o in envelope.omitted] == [
        ("$", "chars", 98, 1000)
    ]


@pytest.mark.anyio
async def test_a_policy_decision_other_than_allow_stops_the_call() -> None:
    class Fixed:
        def __init__(self, outcome: Outcome) -> None:
            self.outcome = outcome

        async def decide(
            self,
            principal: Principal,
            action: str,
            resource: object,
            context: object,
        ) -> Decision:
            return Decision(outcome=self.outcome, reason="test", rule="fixed")

    expected = {
        Outcome.DENY: ErrorCode.PERMISSION_DENIED,
        Outcome.CONFIRM: ErrorCode.NEEDS_CONFIRMATION,
        Outcome.APPROVE: ErrorCode.NEEDS_APPROVAL,
    }
    for outcome, code in expected.items():
        counter = _Counter()
        gate, audit = _gate(_counted_tool(counter), policy=Fixed(outcome))
        envelope = await gate.handle(_call("probe"), READER)
        assert envelope.error_type is code
        assert counter.calls == 0
        assert audit.events[-1].detail == "rule=fixed: test"


# --- batches and sync helpers --------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.invariant(7)
async def test_reads_in_one_turn_run_concurrently_and_results_match_by_call_id() -> None:
    a_started, b_started = asyncio.Event(), asyncio.Event()

    @tool(risk=RiskLevel.L0_PUBLIC_READ, name="a")
    async def a() -> str:
        """Wait for b."""
        a_started.set()
        await asyncio.wait_for(b_started.wait(), timeout=5)
        return "a"

    @tool(risk=RiskLevel.L0_PUBLIC_READ, name="b")
    async def b() -> str:
        """Wait for a."""
        b_started.set()
        await asyncio.wait_for(a_started.wait(), timeout=5)
        return "b"

    gate, _ = _gate(a, b)
    envelopes = await gate.handle_batch(
        [_call("b", call_id="id-b"), _call("a", call_id="id-a")], READER
    )
    assert [(e.call_id, e.data) for e in envelopes] == [("id-b", "b"), ("id-a", "a")]


@pytest.mark.anyio
@pytest.mark.invariant(7)
async def test_non_read_calls_in_a_batch_run_one_at_a_time_in_order() -> None:
    order: list[str] = []
    running = 0

    def make(name: str) -> Tool:
        @tool(
            risk=RiskLevel.L2_REVERSIBLE_WRITE,
            side_effect=SideEffect.LOCAL_WRITE,
            confirmation=ConfirmationPolicy(mode=ConfirmationMode.CONFIRM),
            name=name,
        )
        async def write() -> None:
            """A write."""
            nonlocal running
            running += 1
            order.append(name)
            running -= 1

        return write

    gate, audit = _gate(make("w1"), make("w2"))
    envelopes = await gate.handle_batch(
        [_call("w1", call_id="1"), _call("w2", call_id="2")], READER
    )
    assert [e.error_type for e in envelopes] == [ErrorCode.RISK_BLOCKED] * 2
    assert [e.tool_call_id for e in audit.events if e.stage == "risk"] == ["1", "2"]


@pytest.mark.anyio
async def test_a_repeated_call_id_in_a_batch_is_refused_not_run_twice() -> None:
    counter = _Counter()
    gate, audit = _gate(_counted_tool(counter))
    envelopes = await gate.handle_batch([_call("probe"), _call("probe")], READER)
    assert envelopes[0].status is Status.OK
    assert envelopes[1].error_type is ErrorCode.INVALID_ARGUMENTS
    assert counter.calls == 1
    refused = [e for e in audit.for_call("c1") if e.decision == "refused"]
    assert [(e.stage, e.code) for e in refused] == [("lookup", ErrorCode.INVALID_ARGUMENTS)]


def test_sync_helpers_run_without_an_event_loop(gate: Gate, principal: Principal) -> None:
    one = gate.handle_sync(_call("shop.stock", {"book_id": "b1"}), principal)
    assert one.data == 3
    many = gate.handle_batch_sync(
        [_call("shop.stock", {"book_id": "b2"}, "x"), _call("shop.search", {"query": "d"}, "y")],
        principal,
    )
    assert [e.call_id for e in many] == ["x", "y"]
    assert many[0].data == 0


@pytest.mark.anyio
async def test_sync_helpers_refuse_to_run_inside_an_event_loop(
    gate: Gate,
    principal: Principal,
) -> None:
    with pytest.raises(ConfigurationError):
        gate.handle_sync(_call("shop.search", {"query": "d"}), principal)
    with pytest.raises(ConfigurationError):
        gate.handle_batch_sync([], principal)


def test_a_gate_refuses_nonsense_limits(registry: Registry) -> None:
    with pytest.raises(ConfigurationError):
        Gate(registry, default_timeout=0)


@pytest.mark.anyio
async def test_a_limited_call_is_refused_retryably_after_authorization_and_never_runs() -> None:
    class Full:
        def __init__(self) -> None:
            self.asked: list[str] = []

        async def acquire(self, principal: Principal, spec: object) -> float | None:
            self.asked.append(principal.user_id)
            return 1.5

    counter = _Counter()
    limiter = Full()
    gate, audit = _gate(_counted_tool(counter), limiter=limiter)
    envelope = await gate.handle(_call("probe"), READER)
    assert envelope.error_type is ErrorCode.RATE_LIMITED
    assert (envelope.retryable, envelope.retry_after) == (True, 1.5)
    assert counter.calls == 0
    assert audit.events[-1].stage == "quota"
    denied = await gate.handle(_call("probe"), Principal(user_id="x", tenant_id="t1"))
    assert denied.error_type is ErrorCode.PERMISSION_DENIED
    assert limiter.asked == ["u"]


@pytest.mark.anyio
async def test_a_tool_outside_the_requests_exposure_is_unknown_even_if_permitted() -> None:
    counter = _Counter()
    shown = _counted_tool(counter, name="shown", scenarios={"support"})
    hidden = _counted_tool(counter, name="hidden", scenarios={"billing"})
    gate, _ = _gate(shown, hidden)
    exposure = gate.registry.exposure(READER, ExposureRequest(scenario="support"))
    assert exposure.names == ("shown",)
    refused = await gate.handle(_call("hidden"), READER, exposure=exposure)
    assert refused.error_type is ErrorCode.UNKNOWN_TOOL
    assert counter.calls == 0
    [batch] = await gate.handle_batch([_call("hidden")], READER, exposure=exposure)
    assert batch.error_type is ErrorCode.UNKNOWN_TOOL
    assert (await gate.handle(_call("shown"), READER, exposure=exposure)).status is Status.OK


@pytest.mark.anyio
async def test_a_limiter_whose_store_fails_refuses_the_call_as_transient() -> None:
    class Broken:
        async def acquire(self, principal: Principal, spec: object) -> float | None:
            raise StoreError("redis down")

    counter = _Counter()
    gate, audit = _gate(_counted_tool(counter), limiter=Broken())
    envelope = await gate.handle(_call("probe"), READER)
    assert (envelope.error_type, envelope.retryable) == (ErrorCode.TRANSIENT, True)
    assert counter.calls == 0
    assert audit.events[-1].stage == "quota"
