"""The gate's measurements: durations per tool and stage, calls by status and code,
redactions by kind; and the attributes of writes (plan id, key hash, attempt).

Counts are asserted exactly (each scenario is built so they are known in advance);
durations only by how many were recorded, never by their size.
"""

from __future__ import annotations

import json

import pytest
from _otel_capture import Captured, capture
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NoOpTracerProvider, StatusCode

from _write_tools import ALICE, ARGS, Downstream, keyring, ticket_tool
from handrail import (
    ConfirmationMode,
    ErrorCode,
    Gate,
    IdempotencyMode,
    Principal,
    Registry,
    RiskLevel,
    Status,
    ToolCall,
    Writes,
    tool,
)
from handrail.canonical import sha256_hex
from handrail.store import MemoryStore
from handrail.telemetry import Telemetry
from handrail.testing import FixedClock

pytestmark = pytest.mark.anyio

READER = Principal(user_id="u1", tenant_id="t1", permissions=frozenset({"r"}))
DURATION = "handrail.tool.duration"
CALLS = "handrail.tool.calls"
GATE_STAGES = ("lookup", "syntax", "schema", "permission", "business", "authorization")


@tool(risk=RiskLevel.L1_INTERNAL_READ, permissions={"r"})
async def contacts(n: int) -> list[dict[str, str]]:
    """The first n contacts, with their e-mail addresses and phone numbers."""
    return [{"email": f"person{i}@example.com", "note": "call +1 415 555 0100"} for i in range(n)]


def _gate(telemetry: Telemetry) -> Gate:
    registry = Registry()
    registry.register(contacts)
    return Gate(registry, telemetry=telemetry)


def _stage(tool: str, stage: str) -> dict[str, str]:
    return {"gen_ai.tool.name": tool, "handrail.stage": stage}


async def test_every_stage_and_the_whole_call_get_one_duration_per_call(
    captured: Captured,
) -> None:
    gate = _gate(captured.telemetry)
    for index in range(3):
        await gate.handle(ToolCall(id=f"c{index}", name="contacts", arguments='{"n": 1}'), READER)
    await gate.handle(ToolCall(id="bad", name="contacts", arguments='{"n": "x"}'), READER)
    for stage in ("lookup", "syntax", "schema"):
        assert captured.value(DURATION, _stage("contacts", stage)) == 4
    for stage in ("permission", "business", "authorization", "execute", "shape"):
        assert captured.value(DURATION, _stage("contacts", stage)) == 3
    assert captured.value(DURATION, _stage("contacts", "call")) == 4
    assert all(point.total >= 0 for point in captured.points(DURATION))
    stages = {str(p.attributes["handrail.stage"]) for p in captured.points(DURATION)}
    assert stages == {*GATE_STAGES, "execute", "shape", "call"}


async def test_calls_are_counted_by_status_and_error_code(captured: Captured) -> None:
    gate = _gate(captured.telemetry)
    for arguments in ('{"n": 1}', '{"n": 0}', '{"n": 1}', '{"n": "x"}', "{"):
        await gate.handle(ToolCall(id="c", name="contacts", arguments=arguments), READER)
    await gate.handle(ToolCall(id="c", name="no_such_tool", arguments="{}"), READER)
    assert sorted(
        (json.dumps(dict(p.attributes), sort_keys=True), p.value) for p in captured.points(CALLS)
    ) == sorted(
        [
            (json.dumps({"gen_ai.tool.name": "contacts", "handrail.status": "ok"}), 2),
            (json.dumps({"gen_ai.tool.name": "contacts", "handrail.status": "empty"}), 1),
            (
                json.dumps(
                    {
                        "gen_ai.tool.name": "contacts",
                        "handrail.error.code": "INVALID_ARGUMENTS",
                        "handrail.status": "error",
                    }
                ),
                2,
            ),
            (
                json.dumps(
                    {
                        "gen_ai.tool.name": "_OTHER",
                        "handrail.error.code": "UNKNOWN_TOOL",
                        "handrail.status": "error",
                    }
                ),
                1,
            ),
        ]
    )


async def test_a_proposed_name_no_tool_has_is_never_a_metric_attribute(
    captured: Captured,
) -> None:
    gate = _gate(captured.telemetry)
    for index in range(3):
        await gate.handle(ToolCall(id="c", name=f"invented_{index}", arguments="{}"), READER)
    names = {p.attributes["gen_ai.tool.name"] for p in captured.points(DURATION)}
    assert names == {"_OTHER"}
    assert captured.value(DURATION, _stage("_OTHER", "lookup")) == 3


async def test_redactions_are_counted_by_kind_as_the_envelope_reports_them(
    captured: Captured,
) -> None:
    gate = _gate(captured.telemetry)
    envelope = await gate.handle(ToolCall(id="c", name="contacts", arguments='{"n": 3}'), READER)
    assert envelope.redacted  # the scenario must redact something
    for kind, count in envelope.redacted.items():
        attributes = {"gen_ai.tool.name": "contacts", "handrail.redaction.kind": kind}
        assert captured.value("handrail.redactions", attributes) == count
    assert (
        captured.value(
            "handrail.redactions",
            {"gen_ai.tool.name": "contacts", "handrail.redaction.kind": "email"},
        )
        == 3
    )
    assert len(captured.points("handrail.redactions")) == len(envelope.redacted)


async def test_measurements_without_spans_when_only_the_meter_records() -> None:
    metered = capture()
    try:
        telemetry = Telemetry(tracer_provider=NoOpTracerProvider(), meter_provider=metered.meters)
        assert (telemetry.tracing, telemetry.metering) == (False, True)
        await _gate(telemetry).handle(
            ToolCall(id="c", name="contacts", arguments='{"n": 1}'), READER
        )
        assert metered.value(CALLS, {"gen_ai.tool.name": "contacts", "handrail.status": "ok"}) == 1
        assert metered.value(DURATION, _stage("contacts", "execute")) == 1
    finally:
        metered.shutdown()


async def test_spans_without_measurements_when_only_the_tracer_records() -> None:
    exporter = InMemorySpanExporter()
    tracers = TracerProvider(shutdown_on_exit=False)
    tracers.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        telemetry = Telemetry(tracer_provider=tracers, meter_provider=NoOpMeterProvider())
        assert (telemetry.tracing, telemetry.metering) == (True, False)
        await _gate(telemetry).handle(
            ToolCall(id="c", name="contacts", arguments='{"n": 1}'), READER
        )
        names = [span.name for span in exporter.get_finished_spans()]
        assert names[-1] == "execute_tool contacts"
        assert "handrail.shape" in names
    finally:
        tracers.shutdown()


# --- writes ---------------------------------------------------------------------------------


def _write_gate(telemetry: Telemetry, **options: object) -> Gate:
    downstream = Downstream()
    registry = Registry()
    registry.register(ticket_tool(downstream, **options))  # type: ignore[arg-type]
    clock = FixedClock()
    writes = Writes(registry, MemoryStore(), keyring(), clock=clock)
    return Gate(registry, writes=writes, clock=clock, telemetry=telemetry)


async def test_a_proposed_plan_s_span_carries_its_plan_id(captured: Captured) -> None:
    gate = _write_gate(captured.telemetry)
    outcome = await gate.handle_write(ToolCall(id="w", name="create_ticket", arguments=ARGS), ALICE)
    assert outcome.envelope.error_type is ErrorCode.NEEDS_CONFIRMATION
    assert outcome.plan_id is not None
    call = captured.one("execute_tool create_ticket")
    assert call.attributes is not None
    assert call.attributes["handrail.plan.id"] == outcome.plan_id
    assert call.attributes["handrail.risk"] == "L2_REVERSIBLE_WRITE"
    assert call.attributes["handrail.error.code"] == "NEEDS_CONFIRMATION"
    assert call.status.status_code is StatusCode.UNSET
    names = [span.name for span in captured.children(call)]
    assert names[: len(GATE_STAGES)] == [f"handrail.{stage}" for stage in GATE_STAGES]
    assert "handrail.write" not in names
    assert "handrail.shape" not in names


async def test_a_command_s_span_carries_the_key_s_hash_and_attempt_never_the_key(
    captured: Captured,
) -> None:
    gate = _write_gate(
        captured.telemetry, mode=ConfirmationMode.NONE, idempotency=IdempotencyMode.COMMAND_ID
    )
    call = ToolCall(id="w", name="create_ticket", arguments=ARGS)
    outcome = await gate.handle_write(call, ALICE, command_id="order-17")
    assert outcome.envelope.status is Status.OK
    assert outcome.key is not None
    assert outcome.record is not None
    span = captured.one("execute_tool create_ticket")
    assert span.attributes is not None
    assert span.attributes["handrail.idempotency_key.hash"] == sha256_hex(outcome.key.encode())
    assert span.attributes["handrail.attempt"] == outcome.record.attempts
    assert "handrail.plan.id" not in span.attributes
    text = json.dumps([dict(s.attributes or {}) for s in captured.spans()])
    assert outcome.key not in text
    assert "order-17" not in text
    written = {"gen_ai.tool.name": "create_ticket", "handrail.status": "ok"}
    assert captured.value(CALLS, written) == 1
