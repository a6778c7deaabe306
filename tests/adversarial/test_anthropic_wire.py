"""Attacks through the Anthropic Messages wire format.

Duplicate and reused tool_use ids, results for ids no call has, names of tools that
are not there or not exposed, inputs that are not objects, and inputs far too large:
each is parsed faithfully by the adapter and refused by the gate with its own code,
and nothing runs.
"""

from __future__ import annotations

import json
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
    ToolCall,
    tool,
)
from handrail.adapters.anthropic import AnthropicAdapter
from handrail.adapters.base import UntranslatableError
from handrail.adapters.transcript import AssistantTurn, CallIdLedger
from handrail.errors import ConfigurationError

WireCheck = Callable[[Envelope, ToolCall], dict[str, Any]]
Untouched = Callable[[ToolCall, str | None], None]

ADAPTER = AnthropicAdapter(strict=False)


def message(*blocks: dict[str, Any], stop_reason: str = "tool_use") -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-opus-4-6",
        "content": list(blocks),
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


def tool_use(call_id: str, name: str = "probe__echo", arguments: object = None) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments or {}}


@tool(risk=RiskLevel.L4_FORBIDDEN, namespace="probe")
def wipe() -> None:
    """Registered only to prove a forbidden tool cannot be reached."""


@tool(risk=RiskLevel.L0_PUBLIC_READ, namespace="probe", enabled_tenants={"t2"})
def regional() -> None:
    """A tool only tenant t2 has."""


@pytest.mark.anyio
async def test_duplicate_ids_in_one_message_are_both_parsed_and_the_second_is_refused(
    gate: Gate,
    principal: Principal,
    probe: str,
    received: list[dict[str, object]],
) -> None:
    calls = ADAPTER.parse_calls(
        message(
            tool_use("toolu_x", arguments={"note": "a"}),
            tool_use("toolu_x", arguments={"note": "b"}),
        ),
    )
    assert [c.id for c in calls] == ["toolu_x", "toolu_x"]
    first, second = await gate.handle_batch(calls, principal)
    assert first.status is Status.OK
    assert second.error_type is ErrorCode.INVALID_ARGUMENTS
    assert received == [{"note": "a", "count": 0}]
    [reply] = ADAPTER.render_results(calls, [first, second])
    assert [b["tool_use_id"] for b in reply["content"]] == ["toolu_x", "toolu_x"]
    assert [b["is_error"] for b in reply["content"]] == [False, True]


def test_results_for_an_id_no_call_has_are_the_hosts_error() -> None:
    calls = ADAPTER.parse_calls(message(tool_use("toolu_1")))
    forged = Envelope(call_id="toolu_forged", tool="probe.echo", status=Status.OK, summary="ok")
    real = Envelope(call_id="toolu_1", tool="probe.echo", status=Status.OK, summary="ok")
    with pytest.raises(ConfigurationError):
        ADAPTER.render_results(calls, [real, forged])
    with pytest.raises(ConfigurationError):
        ADAPTER.render_results(calls, [forged])


@pytest.mark.anyio
async def test_an_id_reused_in_a_later_turn_is_refused_and_never_runs(
    gate: Gate,
    principal: Principal,
    probe: str,
    received: list[dict[str, object]],
) -> None:
    ledger = CallIdLedger()
    first = ledger.admit(
        ADAPTER.parse_calls(message(tool_use("toolu_1", arguments={"note": "one"})))
    )
    assert [e.status for e in await gate.handle_batch(first, principal)] == [Status.OK]
    again = ledger.admit(
        ADAPTER.parse_calls(message(tool_use("toolu_1", arguments={"note": "two"})))
    )
    [envelope] = await gate.handle_batch(again, principal)
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert envelope.call_id == "toolu_1"
    assert received == [{"note": "one", "count": 0}]


@pytest.mark.anyio
@pytest.mark.parametrize(
    "wire_name",
    [
        "probe__missing",
        "probe__wipe",
        "probe__regional",
        "probe___echo",
        "PROBE__ECHO",
        "probe__echo\u200b",
        "",
    ],
)
async def test_a_tool_that_is_not_registered_or_not_exposed_is_unknown(
    registry: Registry,
    gate: Gate,
    principal: Principal,
    probe: str,
    received: list[dict[str, object]],
    wire_name: str,
) -> None:
    registry.register(wipe)
    registry.register(regional)
    [call] = ADAPTER.parse_calls(message(tool_use("toolu_1", wire_name)))
    envelope = await gate.handle(call, principal)
    assert envelope.error_type is ErrorCode.UNKNOWN_TOOL
    assert received == []


async def _refused_at_stage_one(
    gate: Gate,
    principal: Principal,
    call: ToolCall,
    wire: WireCheck,
    untouched: Untouched,
) -> dict[str, Any]:
    envelope = await gate.handle(call, principal)
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert envelope.retryable
    untouched(call, "syntax")
    return wire(envelope, call)


@pytest.mark.anyio
@pytest.mark.parametrize("value", [[1, 2], "note", '{"note": "smuggled"}', 7, True, None])
async def test_an_input_that_is_not_an_object_is_refused_at_stage_one(
    gate: Gate,
    principal: Principal,
    probe: str,
    wire: WireCheck,
    untouched: Untouched,
    value: object,
) -> None:
    block = {"type": "tool_use", "id": "toolu_1", "name": "probe__echo", "input": value}
    [call] = ADAPTER.parse_calls(message(block))
    assert call.defect is not None
    await _refused_at_stage_one(gate, principal, call, wire, untouched)


def _deep(depth: int) -> dict[str, Any]:
    node: dict[str, Any] = {}
    for _ in range(depth):
        node = {"d": node}
    return node


HUGE_INPUTS = {
    "megabytes-of-text": {"note": "x" * (3 << 20)},
    "deep-nesting": {"note": _deep(5_000)},
    "many-keys": {f"k{i}": i for i in range(50_000)},
    "long-array": {"note": list(range(200_000))},
}


@pytest.mark.anyio
@pytest.mark.parametrize("name", list(HUGE_INPUTS))
async def test_a_huge_input_is_refused_at_stage_one_and_never_runs(
    gate: Gate,
    principal: Principal,
    probe: str,
    wire: WireCheck,
    untouched: Untouched,
    name: str,
) -> None:
    [call] = ADAPTER.parse_calls(message(tool_use("toolu_1", arguments=HUGE_INPUTS[name])))
    assert call.defect is None  # the adapter keeps the input; limits are the gate's
    await _refused_at_stage_one(gate, principal, call, wire, untouched)


@pytest.mark.anyio
async def test_a_huge_streamed_input_is_refused_without_being_buffered(
    gate: Gate,
    principal: Principal,
    probe: str,
    wire: WireCheck,
    untouched: Untouched,
) -> None:
    assembler = AnthropicAdapter(strict=False, max_streamed_input=1 << 20).stream()
    start = {"type": "tool_use", "id": "toolu_1", "name": "probe__echo", "input": {}}
    assembler.feed({"type": "content_block_start", "index": 0, "content_block": start})
    chunk = {"type": "input_json_delta", "partial_json": "x" * (64 << 10)}
    for _ in range(64):
        assembler.feed({"type": "content_block_delta", "index": 0, "delta": chunk})
    assembler.feed({"type": "content_block_stop", "index": 0})
    [call] = assembler.finish()
    assert call.defect is not None
    assert call.arguments == {}
    await _refused_at_stage_one(gate, principal, call, wire, untouched)


def test_a_response_nested_past_what_json_can_read_is_untranslatable() -> None:
    text = json.dumps(message(tool_use("toolu_1"))).replace("{}", "[" * 200_000 + "]" * 200_000)
    with pytest.raises(UntranslatableError):
        ADAPTER.parse_calls(text)


@pytest.mark.anyio
@pytest.mark.parametrize(
    "call_id", ["toolu_\u0000x", "../../etc/passwd", "id with spaces", "x" * 100_000]
)
async def test_odd_ids_come_back_verbatim_on_the_envelope_and_in_the_result(
    gate: Gate,
    principal: Principal,
    probe: str,
    wire: WireCheck,
    call_id: str,
) -> None:
    [call] = ADAPTER.parse_calls(message(tool_use(call_id)))
    assert call.id == call_id
    envelope = await gate.handle(call, principal)
    wire(envelope, call)
    [reply] = ADAPTER.render_results([call], [envelope])
    # Ids Anthropic would refuse are escaped; transcripts read them back verbatim.
    turns = ADAPTER.from_wire([ADAPTER.to_wire([AssistantTurn(calls=(call,))])[0], reply])
    assert [r.call_id for r in turns[1].results] == [call_id]  # type: ignore[union-attr]
