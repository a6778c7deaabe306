"""A call's trail kept as one flat tuple of notes: the same events as stage by stage.

The trail notes each stage as a handful of values in one list (see `CallNotes`); the
record made of them turns into exactly the events a record of `Stage` tuples makes.
The system clock is read once a stage; an injected clock is read as it always was.
A repeated argument text reuses the hash and summary of its first call.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import UTC, datetime

from handrail import Gate, Principal, Registry, RiskLevel, ToolCall, tool
from handrail.clock import FixedClock, SystemClock
from handrail.events import AuditEvent, CallRecord
from handrail.record.audit import Auditor, MemoryAuditSink, summarize_arguments
from handrail.record.trail import CallTrail
from handrail.testing import sequential_ids

PRINCIPAL = Principal(user_id="u1", tenant_id="t1", request_id="r1")


class Kept:
    """A sink that keeps the records it is handed."""

    def __init__(self) -> None:
        self.records: list[CallRecord] = []

    def emit(self, events: Sequence[AuditEvent]) -> None:
        raise AssertionError("records only")

    def emit_call(self, record: CallRecord) -> None:
        self.records.append(record)


def _echo_gate(sink: object, clock: object) -> Gate:
    async def echo(x: int) -> dict[str, int]:
        """Return x."""
        return {"x": x}

    registry = Registry()
    registry.register(tool(risk=RiskLevel.L0_PUBLIC_READ, name="echo")(echo))
    return Gate(registry, audit=sink, clock=clock, new_id=sequential_ids("e"))  # type: ignore[arg-type]


def test_a_noted_record_makes_the_events_of_a_record_of_its_stages() -> None:
    sink = Kept()
    clock = FixedClock()
    trail = CallTrail(
        Auditor(sink, clock), clock, ToolCall(id="c1", name="echo", arguments="{}"), PRINCIPAL
    )
    clock.advance(0.25)
    trail.record("lookup", "pass")
    clock.advance(0.5)
    trail.record("gate", "error", code="FAILED_FINAL", detail="boom")
    trail.emit()
    (noted,) = sink.records
    assert len(noted) == 2
    assert [stage[4] for stage in noted.stages] == [0.25, 0.5]
    plain = CallRecord("call", noted.subject_fields, list(noted.stages), ids=noted.event_ids())
    assert noted.events() == plain.events()
    assert [(e.stage, e.decision, e.code, e.detail) for e in noted.events()] == [
        ("lookup", "pass", None, None),
        ("gate", "error", "FAILED_FINAL", "boom"),
    ]
    assert noted.subject.request_id == "r1"
    assert noted.subject.tool == "echo"


def test_system_clock_stages_end_in_order_and_take_what_their_readings_say() -> None:
    sink = Kept()
    clock = SystemClock()
    trail = CallTrail(
        Auditor(sink, clock), clock, ToolCall(id="c1", name="echo", arguments="{}"), PRINCIPAL
    )
    before = datetime.now(UTC)
    start = time.monotonic()
    for stage in ("lookup", "syntax", "schema"):
        trail.record(stage, "pass")
    took = time.monotonic() - start
    trail.emit()
    events = sink.records[0].events()
    times = [e.at for e in events]
    assert times == sorted(times)
    assert all(before <= at <= datetime.now(UTC) for at in times)
    assert all(e.duration_ms is not None and e.duration_ms >= 0 for e in events)
    assert sum(e.duration_ms or 0 for e in events) <= took * 1000 + 1


def test_a_noted_call_is_scrubbed_before_the_sink_holds_it() -> None:
    sink = Kept()
    clock = FixedClock()
    auditor = Auditor(sink, clock, scrub=lambda text: text.replace("s3cret", "[x]"))
    call = ToolCall(id="c1", name="echo", arguments='{"p": "s3cret"}')
    trail = CallTrail(auditor, clock, call, PRINCIPAL)
    trail.arguments({"p": "s3cret"})
    trail.record("syntax", "pass")
    trail.record("gate", "error", detail="s3cret!")
    trail.emit()
    (record,) = sink.records
    assert record.subject_fields[5] == '{"p": "[x]"}'
    assert [stage[3] for stage in record.stages] == [None, "[x]!"]


def test_a_repeated_argument_text_has_the_hash_and_summary_of_its_first_call() -> None:
    memory = MemoryAuditSink()
    gate = _echo_gate(memory, FixedClock())
    call = ToolCall(id="c1", name="echo", arguments='{"x": 7}')

    async def twice() -> None:
        await gate.handle(call, PRINCIPAL)
        await gate.handle(call, PRINCIPAL)

    asyncio.run(twice())
    subjects = {(e.args_hash, e.args_summary) for e in memory.events}
    assert len(subjects) == 1
    ((digest, summary),) = subjects
    assert digest is not None
    assert summary == summarize_arguments({"x": 7})


def test_only_arguments_a_summary_shows_whole_are_remembered() -> None:
    auditor = Auditor(Kept(), FixedClock())
    whole = auditor.arguments('{"x": 7}', {"x": 7})
    assert auditor.arguments('{"x": 7}', {"x": 7}) is whole
    for raw, parsed in (
        ('{"password": "hunter2"}', {"password": "hunter2"}),
        ('{"note": "' + "n" * 60 + '"}', {"note": "n" * 60}),
        ('{"f": 1.5}', {"f": 1.5}),
    ):
        first = auditor.arguments(raw, parsed)
        again = auditor.arguments(raw, parsed)
        assert again == first
        assert again is not first
    assert "hunter2" not in auditor.arguments('{"password": "hunter2"}', {"password": "hunter2"})[1]
