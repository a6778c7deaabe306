"""The gate's spans: one `execute_tool {name}` per call, a child per stage, the right status.

Recorded with the SDK into memory (no global provider). What is asserted is structure
and attributes: names, parents, attributes, statuses and order; never a duration.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated

import pytest
from _otel_capture import READ_STAGES, Captured, capture
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import StatusCode
from pydantic import Field

from handrail import (
    ErrorCode,
    Gate,
    Principal,
    Registry,
    RetryPolicy,
    RiskLevel,
    Status,
    ToolCall,
    ToolFailed,
    tool,
)
from handrail.telemetry import Telemetry
from handrail.testing import MemoryAuditSink, sequential_ids

READER = Principal(user_id="u1", tenant_id="t1", permissions=frozenset({"r"}), request_id="q1")
PLANTED = "needle-4711"


class Seen:
    """What the tools saw of the current span while they ran."""

    def __init__(self) -> None:
        self.spans: list[trace.Span] = []
        self.started = asyncio.Event()


def _registry(seen: Seen, telemetry: Telemetry | None = None) -> Registry:
    registry = Registry()

    @tool(risk=RiskLevel.L1_INTERNAL_READ, permissions={"r"})
    async def lookup_user(name: Annotated[str, Field(max_length=40)]) -> dict[str, str]:
        """Find a user by name."""
        seen.spans.append(trace.get_current_span())
        if telemetry is not None:
            # A span the tool makes itself: it must nest under the execute stage.
            with telemetry.tracer.start_as_current_span("inside the tool"):
                pass
        return {"name": name, "email": "someone@example.com"}

    @tool(risk=RiskLevel.L1_INTERNAL_READ, permissions={"r"})
    async def broken(n: int) -> int:
        """Always fails with an undeclared error."""
        raise RuntimeError(f"driver bug {n}")

    @tool(risk=RiskLevel.L1_INTERNAL_READ, permissions={"r"})
    async def refusing(n: int) -> int:
        """Always fails with a declared, final failure."""
        raise ToolFailed(f"no {n}")

    @tool(risk=RiskLevel.L1_INTERNAL_READ, permissions={"r"}, timeout=0.05)
    async def stuck(n: int) -> int:
        """Never answers."""
        seen.started.set()
        await asyncio.Event().wait()
        return n

    @tool(risk=RiskLevel.L1_INTERNAL_READ, permissions={"other"})
    async def guarded(n: int) -> int:
        """Needs a permission the reader lacks."""
        return n

    @tool(
        risk=RiskLevel.L1_INTERNAL_READ,
        permissions={"r"},
        retry=RetryPolicy(max_attempts=2, transient=(ConnectionError,)),
    )
    async def retried(n: int) -> int:
        """A read with a retry policy (its own code path in the invoker)."""
        seen.spans.append(trace.get_current_span())
        return n

    for made in (lookup_user, broken, refusing, stuck, guarded, retried):
        registry.register(made)
    return registry


def _gate(captured: Captured, seen: Seen, **options: object) -> Gate:
    return Gate(_registry(seen, captured.telemetry), telemetry=captured.telemetry, **options)  # type: ignore[arg-type]


def _call(name: str, arguments: str, call_id: str = "call-1") -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


def _all_attribute_text(spans: list[ReadableSpan]) -> str:
    return json.dumps([dict(s.attributes or {}) for s in spans], default=str)


@pytest.mark.anyio
async def test_a_read_is_one_execute_tool_span_with_a_child_per_stage_in_order(
    captured: Captured,
) -> None:
    gate = _gate(captured, Seen())
    envelope = await gate.handle(_call("lookup_user", f'{{"name": "{PLANTED}"}}'), READER)
    assert envelope.status is Status.OK
    call = captured.one("execute_tool lookup_user")
    assert call.kind is trace.SpanKind.INTERNAL
    assert call.parent is None
    assert dict(call.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "lookup_user",
        "gen_ai.tool.call.id": "call-1",
        "gen_ai.tool.type": "function",
        "handrail.tenant": "t1",
        "handrail.risk": "L1_INTERNAL_READ",
        "handrail.status": "ok",
    }
    assert call.status.status_code is StatusCode.UNSET
    stages = captured.children(call)
    assert [s.name for s in stages if s.name.startswith("handrail.")] == READ_STAGES
    for stage in stages:
        if stage.name.startswith("handrail."):
            assert stage.attributes == {"handrail.stage": stage.name.removeprefix("handrail.")}
            assert stage.context.trace_id == call.context.trace_id
            assert call.start_time is not None
            assert call.end_time is not None
            assert stage.start_time is not None
            assert stage.end_time is not None
            assert call.start_time <= stage.start_time <= stage.end_time <= call.end_time


@pytest.mark.anyio
async def test_neither_arguments_nor_results_become_attributes(captured: Captured) -> None:
    gate = _gate(captured, Seen())
    await gate.handle(_call("lookup_user", f'{{"name": "{PLANTED}"}}'), READER)
    text = _all_attribute_text(captured.spans())
    assert PLANTED not in text
    assert "someone@example.com" not in text
    assert "handrail.arguments.summary" not in text


@pytest.mark.anyio
async def test_the_redacted_argument_summary_is_an_attribute_only_when_opted_in() -> None:
    opted = capture(record_summaries=True)
    try:
        gate = Gate(_registry(Seen()), telemetry=opted.telemetry)
        arguments = '{"name": "mail me at someone@example.com"}'
        await gate.handle(_call("lookup_user", arguments), READER)
        summary = opted.one("execute_tool lookup_user").attributes["handrail.arguments.summary"]  # type: ignore[index]
        assert isinstance(summary, str)
        assert "name" in summary
        assert "someone@example.com" not in summary
    finally:
        opted.shutdown()


@pytest.mark.anyio
async def test_the_tool_runs_with_the_execute_stage_as_its_current_span(
    captured: Captured,
) -> None:
    seen = Seen()
    gate = _gate(captured, seen)
    await gate.handle(_call("lookup_user", '{"name": "ann"}'), READER)
    execute = captured.one("handrail.execute")
    assert seen.spans[0].get_span_context().span_id == execute.context.span_id
    inner = captured.one("inside the tool")
    assert inner.parent is not None
    assert inner.parent.span_id == execute.context.span_id


@pytest.mark.anyio
async def test_a_read_with_retries_runs_under_its_execute_span_too(captured: Captured) -> None:
    seen = Seen()
    gate = _gate(captured, seen)
    await gate.handle(_call("retried", '{"n": 1}'), READER)
    execute = captured.one("handrail.execute")
    assert seen.spans[0].get_span_context().span_id == execute.context.span_id


@pytest.mark.anyio
async def test_the_call_span_is_current_for_the_whole_call_and_then_ended(
    captured: Captured,
) -> None:
    gate = _gate(captured, Seen())
    before = trace.get_current_span()
    await gate.handle(_call("lookup_user", '{"name": "ann"}'), READER)
    assert trace.get_current_span() is before
    assert all(span.end_time is not None for span in captured.spans())


@pytest.mark.anyio
async def test_a_refusal_is_the_policy_working_status_unset_code_set(captured: Captured) -> None:
    gate = _gate(captured, Seen())
    envelope = await gate.handle(_call("lookup_user", '{"name": 7}'), READER)
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    call = captured.one("execute_tool lookup_user")
    assert call.status.status_code is StatusCode.UNSET
    assert call.attributes is not None
    assert call.attributes["handrail.status"] == "error"
    assert call.attributes["handrail.error.code"] == "INVALID_ARGUMENTS"
    assert "error.type" not in call.attributes
    stages = captured.children(call)
    assert [s.name for s in stages] == ["handrail.lookup", "handrail.syntax", "handrail.schema"]
    assert stages[-1].attributes is not None
    assert stages[-1].attributes["handrail.error.code"] == "INVALID_ARGUMENTS"
    assert stages[-1].status.status_code is StatusCode.UNSET


@pytest.mark.anyio
async def test_a_permission_denied_ends_at_the_permission_stage(captured: Captured) -> None:
    gate = _gate(captured, Seen())
    envelope = await gate.handle(_call("guarded", '{"n": 1}'), READER)
    assert envelope.error_type is ErrorCode.PERMISSION_DENIED
    call = captured.one("execute_tool guarded")
    assert [s.name for s in captured.children(call)][-1] == "handrail.permission"
    assert call.status.status_code is StatusCode.UNSET


@pytest.mark.anyio
async def test_an_unknown_tool_s_span_is_named_after_no_tool(captured: Captured) -> None:
    gate = _gate(captured, Seen())
    envelope = await gate.handle(_call("drop_tables", "{}"), READER)
    assert envelope.error_type is ErrorCode.UNKNOWN_TOOL
    call = captured.one("execute_tool")
    assert call.attributes is not None
    assert call.attributes["gen_ai.tool.name"] == "drop_tables"
    assert call.attributes["handrail.error.code"] == "UNKNOWN_TOOL"
    assert "handrail.risk" not in call.attributes
    assert [s.name for s in captured.children(call)] == ["handrail.lookup"]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("broken", ErrorCode.FAILED_FINAL),
        ("refusing", ErrorCode.FAILED_FINAL),
        ("stuck", ErrorCode.TIMEOUT),
    ],
)
async def test_a_failure_marks_the_call_and_its_execute_stage_as_errors(
    captured: Captured, name: str, code: ErrorCode
) -> None:
    gate = _gate(captured, Seen())
    envelope = await gate.handle(_call(name, '{"n": 1}'), READER)
    assert envelope.error_type is code
    call = captured.one(f"execute_tool {name}")
    assert call.status.status_code is StatusCode.ERROR
    assert call.attributes is not None
    assert call.attributes["error.type"] == code.value
    assert call.attributes["handrail.error.code"] == code.value
    execute = captured.one("handrail.execute")
    assert execute.status.status_code is StatusCode.ERROR
    assert captured.named("handrail.shape") == []
    # What the tool raised stays in the audit for operators: never in telemetry.
    assert "driver bug" not in _all_attribute_text(captured.spans())
    assert all(not span.events for span in captured.spans())


@pytest.mark.anyio
async def test_a_cancelled_call_ends_its_spans_as_errors_and_stays_cancelled(
    captured: Captured,
) -> None:
    seen = Seen()
    gate = _gate(captured, seen)
    task = asyncio.create_task(gate.handle(_call("stuck", '{"n": 1}'), READER, timeout=30))
    await asyncio.wait_for(seen.started.wait(), timeout=30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    call = captured.one("execute_tool stuck")
    assert call.status.status_code is StatusCode.ERROR
    assert call.attributes is not None
    assert call.attributes["error.type"] == "CANCELLED"
    assert captured.one("handrail.execute").status.status_code is StatusCode.ERROR
    assert (
        captured.value(
            "handrail.tool.calls",
            {
                "gen_ai.tool.name": "stuck",
                "handrail.status": "error",
                "handrail.error.code": "CANCELLED",
            },
        )
        == 1
    )


@pytest.mark.anyio
async def test_each_call_of_a_batch_has_its_own_span_under_the_caller_s(
    captured: Captured,
) -> None:
    gate = _gate(captured, Seen())
    calls = [
        _call("lookup_user", '{"name": "ann"}', "a"),
        _call("lookup_user", '{"name": "bob"}', "b"),
        _call("lookup_user", '{"name": "cy"}', "a"),  # a repeated id: refused, not run
    ]
    with captured.telemetry.tracer.start_as_current_span("model turn") as turn:
        envelopes = await gate.handle_batch(calls, READER)
    assert [e.status for e in envelopes] == [Status.OK, Status.OK, Status.ERROR]
    spans = captured.named("execute_tool lookup_user")
    assert sorted(str((s.attributes or {})["gen_ai.tool.call.id"]) for s in spans) == ["a", "b"]
    for span in spans:
        assert span.parent is not None
        assert span.parent.span_id == turn.get_span_context().span_id
        assert len([s for s in captured.children(span) if s.name == "handrail.execute"]) == 1


@pytest.mark.anyio
async def test_the_audit_trail_is_the_same_with_telemetry_on(captured: Captured) -> None:
    async def stages(telemetry: Telemetry | None) -> list[tuple[str, str, str | None]]:
        audit = MemoryAuditSink()
        gate = Gate(
            _registry(Seen()), audit=audit, new_id=sequential_ids("ev"), telemetry=telemetry
        )
        for arguments in ('{"name": "ann"}', '{"name": 3}'):
            await gate.handle(_call("lookup_user", arguments), READER)
        return [(e.stage, e.decision, e.code) for e in audit.events]

    plain = await stages(None)
    traced = await stages(captured.telemetry)
    assert traced == plain
    assert ("execute", "ok", "ok") in traced


@pytest.mark.anyio
async def test_an_unsampled_call_makes_no_span_but_is_measured() -> None:
    unsampled = capture(sampler=ALWAYS_OFF)
    try:
        gate = Gate(_registry(Seen()), telemetry=unsampled.telemetry)
        await gate.handle(_call("lookup_user", '{"name": "ann"}'), READER)
        assert unsampled.spans() == []
        counted = {"gen_ai.tool.name": "lookup_user", "handrail.status": "ok"}
        assert unsampled.value("handrail.tool.calls", counted) == 1
    finally:
        unsampled.shutdown()


def test_a_telemetry_that_records_nothing_is_dropped_by_the_gate() -> None:
    # No SDK provider installed globally in this process: the API's stand-ins.
    idle = Telemetry()
    assert not idle.tracing
    assert not idle.metering
    assert Gate(Registry(), telemetry=idle)._telemetry is None
    assert Gate(Registry(), telemetry=None)._telemetry is None


def test_a_telemetry_with_an_sdk_is_kept_by_the_gate(captured: Captured) -> None:
    assert Gate(Registry(), telemetry=captured.telemetry)._telemetry is captured.telemetry
