"""Text no encoder or database can hold: lone surrogates (legal in JSON) and NUL.

A provider's call id or tool name with a lone surrogate makes the call defective in
every adapter, streamed or not: the gate refuses it under its id as sent, and it never
runs. Whatever text reaches the audit trail (ids, names, exception text, a principal's
request id) is stored escaped on every store, and a row a store still refuses costs
only itself: the writer keeps writing what comes after it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from _write_tools import ALICE, keyring
from handrail import (
    BatchingAuditSink,
    ConfirmationMode,
    ConfirmationPolicy,
    Envelope,
    ErrorCode,
    ExecutionStatus,
    Gate,
    IdempotencyMode,
    IdempotencyPolicy,
    Impact,
    Principal,
    RawKeeping,
    RawResults,
    Registry,
    ResultPolicy,
    RiskLevel,
    SideEffect,
    Status,
    ToolCall,
    Writes,
    tool,
)
from handrail.adapters import (
    AnthropicAdapter,
    AssistantTurn,
    GeminiAdapter,
    OpenAIChatAdapter,
    OpenAIResponsesAdapter,
    UntranslatableError,
    UserTurn,
)
from handrail.adapters._ids import id_from_wire, id_to_wire
from handrail.adapters.transcript import pair_results
from handrail.events import AuditEvent, AuditSubject
from handrail.record.batching import AuditWriterState
from handrail.shaping.marking import DataMarker
from handrail.shaping.redact import Redactor
from handrail.shaping.shaper import Shaper
from handrail.store import SqlStore, Store
from handrail.store._audit_rows import micros
from handrail.store._tables import audit_trails
from handrail.testing import FixedClock, sequential_ids

WireCheck = Callable[[Envelope, ToolCall], dict[str, Any]]
Untouched = Callable[[ToolCall, str | None], None]
Parse = Callable[[str, str], list[ToolCall]]

WAIT_S = 60.0
SURROGATE_ID = "call_\ud800x"
SURROGATE_NAME = "probe__\udfffecho"
ARGUMENTS = '{"note": "hi"}'


# --- every adapter's way in ----------------------------------------------------------------


def _chat(call_id: str, name: str) -> list[ToolCall]:
    completion = {
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": name, "arguments": ARGUMENTS},
                        },
                    ],
                },
            },
        ],
    }
    return OpenAIChatAdapter(strict=False).parse_calls(completion)


def _chat_json_text(call_id: str, name: str) -> list[ToolCall]:
    completion = {
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": name, "arguments": ARGUMENTS},
                        },
                    ],
                },
            },
        ],
    }
    # As a provider sends it: the surrogate as a JSON escape in plain ASCII text.
    return OpenAIChatAdapter(strict=False).parse_calls(json.dumps(completion))


def _chat_stream(call_id: str, name: str) -> list[ToolCall]:
    assembler = OpenAIChatAdapter(strict=False).stream()
    fragments = [
        {"index": 0, "id": call_id, "type": "function", "function": {"name": name}},
        {"index": 0, "function": {"arguments": ARGUMENTS}},
    ]
    for fragment in fragments:
        assembler.feed({"choices": [{"index": 0, "delta": {"tool_calls": [fragment]}}]})
    assembler.feed({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    return assembler.finish()


def _function_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": "fc_0",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


def _responses(call_id: str, name: str) -> list[ToolCall]:
    response = {"status": "completed", "output": [_function_call(call_id, name, ARGUMENTS)]}
    return OpenAIResponsesAdapter(strict=True).parse_calls(response)


def _responses_stream(call_id: str, name: str) -> list[ToolCall]:
    assembler = OpenAIResponsesAdapter(strict=True).stream()
    added = _function_call(call_id, name, "") | {"status": "in_progress"}
    events: list[dict[str, Any]] = [
        {"type": "response.output_item.added", "output_index": 0, "item": added},
        {
            "type": "response.function_call_arguments.delta",
            "item_id": "fc_0",
            "output_index": 0,
            "delta": ARGUMENTS,
        },
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": _function_call(call_id, name, ARGUMENTS),
        },
        {"type": "response.completed", "response": {"status": "completed", "output": []}},
    ]
    for number, event in enumerate(events, start=1):
        assembler.feed(event | {"sequence_number": number})
    return assembler.finish()


def _anthropic(call_id: str, name: str) -> list[ToolCall]:
    message = {
        "role": "assistant",
        "stop_reason": "tool_use",
        "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": call_id, "name": name, "input": {"note": "hi"}},
        ],
    }
    return AnthropicAdapter(strict=False).parse_calls(message)


def _anthropic_stream(call_id: str, name: str) -> list[ToolCall]:
    assembler = AnthropicAdapter(strict=False).stream()
    block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
    events: list[dict[str, Any]] = [
        {"type": "content_block_start", "index": 0, "content_block": block},
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": ARGUMENTS},
        },
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}},
    ]
    for event in events:
        assembler.feed(event)
    return assembler.finish()


def _gemini_part(call_id: str, name: str) -> dict[str, Any]:
    return {"functionCall": {"id": call_id, "name": name, "args": {"note": "hi"}}}


def _gemini(call_id: str, name: str) -> list[ToolCall]:
    response = {
        "candidates": [
            {
                "content": {"role": "model", "parts": [_gemini_part(call_id, name)]},
                "finishReason": "STOP",
            },
        ],
        "responseId": "r1",
    }
    return GeminiAdapter().parse_calls(response)


def _gemini_stream(call_id: str, name: str) -> list[ToolCall]:
    assembler = GeminiAdapter().stream()
    content = {"role": "model", "parts": [_gemini_part(call_id, name)]}
    assembler.feed({"candidates": [{"content": content}], "responseId": "r1"})
    assembler.feed({"candidates": [{"finishReason": "STOP"}], "responseId": "r1"})
    return assembler.finish()


PARSERS: dict[str, Parse] = {
    "chat": _chat,
    "chat-json-text": _chat_json_text,
    "chat-stream": _chat_stream,
    "responses": _responses,
    "responses-stream": _responses_stream,
    "anthropic": _anthropic,
    "anthropic-stream": _anthropic_stream,
    "gemini": _gemini,
    "gemini-stream": _gemini_stream,
}
EACH_PARSER = pytest.mark.parametrize("parse", list(PARSERS.values()), ids=list(PARSERS))


@EACH_PARSER
def test_every_parse_path_reads_a_well_formed_call(parse: Parse) -> None:
    [call] = parse("call_ok", "probe__echo")
    assert (call.id, call.name, call.defect) == ("call_ok", "probe.echo", None)


@pytest.mark.anyio
@EACH_PARSER
async def test_a_call_id_with_a_lone_surrogate_is_refused_under_that_exact_id(
    parse: Parse,
    gate: Gate,
    principal: Principal,
    probe: str,
    wire: WireCheck,
    untouched: Untouched,
) -> None:
    [call] = parse(SURROGATE_ID, "probe__echo")
    assert (call.id, call.name) == (SURROGATE_ID, probe)
    assert call.defect is not None
    envelope = await gate.handle(call, principal)
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert envelope.call_id == SURROGATE_ID
    wire(envelope, call)
    untouched(call, "syntax")


@pytest.mark.anyio
@EACH_PARSER
async def test_a_tool_name_with_a_lone_surrogate_is_an_unknown_tool_that_never_runs(
    parse: Parse,
    gate: Gate,
    principal: Principal,
    wire: WireCheck,
    untouched: Untouched,
) -> None:
    [call] = parse("call_name", SURROGATE_NAME)
    assert call.name == SURROGATE_NAME
    assert call.defect is not None
    envelope = await gate.handle(call, principal)
    assert envelope.error_type is ErrorCode.UNKNOWN_TOOL
    assert envelope.call_id == "call_name"
    assert envelope.tool.endswith("\\udfffecho")
    wire(envelope, call)
    untouched(call, "lookup")


# --- the audit trail on every store -----------------------------------------------------------


@tool(risk=RiskLevel.L0_PUBLIC_READ, namespace="probe")
def explode() -> None:
    """Fail with text no database can hold."""
    message = "cannot open /data/r\udcc3port\x00.txt"
    raise RuntimeError(message)


@tool(
    risk=RiskLevel.L0_PUBLIC_READ,
    namespace="probe",
    results=ResultPolicy(keep_raw=RawKeeping.ALWAYS),
)
def report() -> dict[str, str]:
    """A result kept for people behind a ref."""
    return {"report": "ok"}


@pytest.fixture
def writer(store: Store) -> Iterator[BatchingAuditSink]:
    sink = BatchingAuditSink(store)
    yield sink
    sink.close(timeout=WAIT_S)


def _all_storable(events: Sequence[AuditEvent]) -> None:
    for event in events:
        for value in (*_vars_of(event), event.detail):
            if isinstance(value, str):
                value.encode("utf-8")
                assert "\x00" not in value


def _vars_of(event: AuditEvent) -> tuple[object, ...]:
    subject = event.subject
    return (
        event.event_id,
        event.kind,
        event.stage,
        event.decision,
        event.code,
        subject.request_id,
        subject.tool_call_id,
        subject.tool,
        subject.args_summary,
        subject.user_id,
        subject.tenant_id,
    )


@pytest.mark.anyio
async def test_unencodable_text_reaches_every_store_escaped_and_later_events_follow(
    store: Store,
    writer: BatchingAuditSink,
    registry: Registry,
    principal: Principal,
    probe: str,
) -> None:
    registry.register(explode)
    gate = Gate(registry, audit=writer)
    odd_request = Principal(
        user_id=principal.user_id,
        tenant_id=principal.tenant_id,
        permissions=principal.permissions,
        request_id="req-\ud800\x00",
    )
    surrogate_id = await gate.handle(
        ToolCall(id=SURROGATE_ID, name=probe, arguments="{}"), principal
    )
    surrogate_name = await gate.handle(
        ToolCall(id="call_name", name="probe.\udfffecho", arguments="{}"),
        principal,
    )
    nul_id = await gate.handle(ToolCall(id="call_\x00nul", name=probe, arguments="{}"), principal)
    failure = await gate.handle(
        ToolCall(id="call_fail", name=explode.name, arguments="{}"), principal
    )
    request = await gate.handle(ToolCall(id="call_req", name=probe, arguments="{}"), odd_request)
    after = await gate.handle(ToolCall(id="call_after", name=probe, arguments="{}"), principal)

    assert surrogate_id.error_type is ErrorCode.INVALID_ARGUMENTS
    assert surrogate_name.error_type is ErrorCode.UNKNOWN_TOOL
    assert failure.error_type is ErrorCode.FAILED_FINAL
    assert [nul_id.status, request.status, after.status] == [Status.OK] * 3
    writer.flush(timeout=WAIT_S)

    events = store.read_audit(limit=1000)
    _all_storable(events)
    by_call = {event.tool_call_id: event for event in events}
    assert by_call["call_\\ud800x"].code == ErrorCode.INVALID_ARGUMENTS
    assert by_call["call_name"].tool == "probe.\\udfffecho"
    assert by_call["call_\\u0000nul"].decision == "ok"
    assert "r\\udcc3port\\u0000.txt" in (by_call["call_fail"].detail or "")
    assert by_call["call_req"].request_id == "req-\\ud800\\u0000"
    assert by_call["call_after"].decision == "ok"
    health = writer.health()
    assert (health.state, health.lost, health.replaced) == (AuditWriterState.RUNNING, 0, 0)
    assert health.written == len(events)


@pytest.mark.anyio
async def test_a_kept_raw_result_of_a_call_id_with_nul_is_stored_on_every_store(
    store: Store,
    registry: Registry,
    principal: Principal,
) -> None:
    registry.register(report)
    clock = FixedClock()
    shaper = Shaper(redactor=Redactor(hash_key=b"k" * 32), raw=RawResults(store, clock))
    gate = Gate(registry, shaper=shaper, clock=clock)
    envelope = await gate.handle(
        ToolCall(id="call_\x00raw", name=report.name, arguments="{}"),
        principal,
    )
    assert envelope.status is Status.OK
    assert envelope.ref is not None
    record = store.get_raw(envelope.ref)
    assert record is not None
    assert record.call_id == "call_\\u0000raw"


def _unescaped_row(event: AuditEvent) -> dict[str, object]:
    """A row of `audit_trails` holding the event's text exactly as it is."""
    at = micros(event.at)
    entry = [event.stage, event.decision, event.code, event.detail, event.duration_ms, at]
    subject = event.subject
    return {
        "event_id": event.event_id,
        "kind": event.kind,
        "earliest_us": at,
        "latest_us": at,
        "decisions": f"|{event.decision}|",
        "events": json.dumps([entry], ensure_ascii=False),
        **{f.name: getattr(subject, f.name) for f in dataclasses.fields(subject)},
    }


class _UnescapedStore:
    """A Store whose audit insert writes rows as they come, as a third-party store might."""

    def __init__(self, inner: SqlStore) -> None:
        self.inner = inner

    def append_audit(self, events: Sequence[AuditEvent]) -> None:
        with self.inner.engine.begin() as connection:
            connection.execute(audit_trails.insert(), [_unescaped_row(event) for event in events])

    def read_audit(self, *, limit: int = 50) -> list[AuditEvent]:
        return self.inner.read_audit(limit=limit)


def test_a_row_a_store_cannot_encode_costs_only_itself(sql_store: SqlStore) -> None:
    store = _UnescapedStore(sql_store)
    sink = BatchingAuditSink(store)  # type: ignore[arg-type]
    clock = FixedClock()

    def event(stage: str, call_id: str) -> AuditEvent:
        return AuditEvent(
            event_id=f"ev-{stage}",
            at=clock.now(),
            kind="call",
            stage=stage,
            decision="pass",
            subject=AuditSubject(tool_call_id=call_id, tenant_id="t1"),
        )

    with pytest.raises(UnicodeEncodeError):
        store.append_audit([event("probe", "\ud800")])
    sink.emit([event("before", "c1"), event("bad", "call_\ud800"), event("after", "c2")])
    sink.emit([event("later", "c3")])
    sink.flush(timeout=WAIT_S)
    stored = store.read_audit(limit=100)
    assert [e.stage for e in stored] == ["before", "sink", "after", "later"]
    assert stored[1].tool_call_id == "call_\\ud800"
    assert json.loads(stored[1].detail or "")["event_id"] == "ev-bad"
    health = sink.health()
    assert (health.written, health.replaced, health.lost) == (3, 1, 0)
    sink.close(timeout=WAIT_S)


# --- and back out: results a request body can carry ------------------------------------------

ADAPTERS: dict[str, tuple[Parse, Any]] = {
    "chat": (_chat, OpenAIChatAdapter(strict=False)),
    "responses": (_responses, OpenAIResponsesAdapter(strict=True)),
    "anthropic": (_anthropic, AnthropicAdapter(strict=False)),
    "gemini": (_gemini, GeminiAdapter()),
}
EACH_ADAPTER = pytest.mark.parametrize("pair", list(ADAPTERS.values()), ids=list(ADAPTERS))


def _body(payload: object) -> bytes:
    """The request body as httpx (under the openai, anthropic and google SDKs) makes it."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


@pytest.mark.anyio
@EACH_ADAPTER
async def test_results_of_a_surrogate_id_can_be_sent_and_read_back_under_that_id(
    pair: tuple[Parse, Any],
    gate: Gate,
    principal: Principal,
    probe: str,
) -> None:
    parse, adapter = pair
    calls = parse(SURROGATE_ID, "probe__echo")
    envelopes = await gate.handle_batch(calls, principal)
    _body(adapter.render_results(calls, envelopes))
    turn = pair_results(calls, envelopes, marker=DataMarker())
    transcript = [UserTurn(text="Echo hi."), AssistantTurn(text=None, calls=tuple(calls)), turn]
    wire = adapter.to_wire(transcript)
    _body(wire)
    back = adapter.from_wire(wire)
    assert [call.id for call in back[1].calls] == [SURROGATE_ID]
    assert [result.call_id for result in back[2].results] == [SURROGATE_ID]
    assert back[1].calls[0].name == probe


@pytest.mark.anyio
@EACH_ADAPTER
async def test_results_of_a_surrogate_name_can_be_sent_and_a_transcript_never_crashes(
    pair: tuple[Parse, Any],
    gate: Gate,
    principal: Principal,
) -> None:
    parse, adapter = pair
    calls = parse("call_name", SURROGATE_NAME)
    envelopes = await gate.handle_batch(calls, principal)
    _body(adapter.render_results(calls, envelopes))
    turn = pair_results(calls, envelopes, marker=DataMarker())
    transcript = [AssistantTurn(text=None, calls=tuple(calls)), turn]
    if adapter.provider.startswith("openai"):
        # These formats refuse a transcript whose names would not read back the same.
        with pytest.raises(UntranslatableError):
            adapter.to_wire(transcript)
    else:
        _body(adapter.to_wire(transcript))


def test_a_call_id_escape_reads_back_exactly_and_leaves_other_ids_alone() -> None:
    for call_id in (SURROGATE_ID, "hr64_not-an-escape", "hr64_", "\udc80" * 3, "call_1"):
        assert id_from_wire(id_to_wire(call_id)) == call_id
        id_to_wire(call_id).encode("utf-8")
    assert id_to_wire("call_1") == "call_1"
    assert id_from_wire("hr64_!!") == "hr64_!!"
    assert id_from_wire(id_to_wire("call_1", carried=lambda _: False)) == "hr64_Y2FsbF8x"


# --- what a downstream hands back ------------------------------------------------------------


@pytest.mark.anyio
async def test_a_business_id_a_store_cannot_encode_is_kept_escaped_and_the_write_still_succeeds(
    store: Store,
) -> None:
    """The effect happened: an id no store can hold must not turn its outcome into a crash."""
    effects: list[str] = []
    weird = "TK-\ud800-\x00-1"

    def impact_of(_args: object, _ctx: object) -> Impact:
        return Impact(action="open ticket", target="asset-\x00", reversible=True)

    @tool(
        risk=RiskLevel.L2_REVERSIBLE_WRITE,
        side_effect=SideEffect.EXTERNAL_WRITE,
        permissions={"tickets.create"},
        idempotency=IdempotencyPolicy(mode=IdempotencyMode.PLAN),
        confirmation=ConfirmationPolicy(mode=ConfirmationMode.CONFIRM),
        impact=impact_of,
        business_id="ticket_no",
    )
    async def open_ticket(asset_id: str) -> dict[str, str]:
        """Open a ticket."""
        effects.append(asset_id)
        return {"ticket_no": weird}

    registry = Registry()
    registry.register(open_ticket)
    writes = Writes(registry, store, keyring(), clock=FixedClock(), new_id=sequential_ids("p"))
    gate = Gate(registry, writes=writes)
    call = ToolCall(id="c1", name="open_ticket", arguments='{"asset_id": "a-1"}')

    proposed = await gate.handle_write(call, ALICE)
    assert proposed.code is ErrorCode.NEEDS_CONFIRMATION
    assert proposed.plan_id is not None
    token = await writes.issue_token(proposed.plan_id, ALICE)
    await writes.confirm(proposed.plan_id, token.value, ALICE)
    first = await writes.execute_plan(proposed.plan_id, ALICE)
    again = await writes.execute_plan(proposed.plan_id, ALICE)

    assert (first.status, again.status) == (ExecutionStatus.SUCCEEDED, ExecutionStatus.SUCCEEDED)
    assert again.replayed
    assert first.business_id == again.business_id == "TK-\\ud800-\\u0000-1"
    stored = await writes.record_for(proposed.plan_id, ALICE)
    assert stored is not None
    assert stored.business_id == first.business_id
    assert effects == ["a-1"]
