"""Attacks through the OpenAI wire formats: ids, names and arguments a model controls.

Whatever a completion or response says, the parsed calls keep the model's ids verbatim
and reach a tool only through the gate: duplicate or reused ids, unknown or unexposed
names, names no Handrail tool could have on the wire, and broken or huge arguments are
refused with their own code, and the probe tool never runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from handrail import Envelope, ErrorCode, Gate, Principal, Registry, RiskLevel, Status, ToolCall
from handrail import tool as make_tool
from handrail.adapters.openai_chat import OpenAIChatAdapter
from handrail.adapters.openai_responses import OpenAIResponsesAdapter
from handrail.adapters.transcript import CallIdLedger
from handrail.errors import ConfigurationError
from handrail.testing import MemoryAuditSink

WireCheck = Callable[[Envelope, ToolCall], dict[str, Any]]
Untouched = Callable[[ToolCall, str | None], None]
Wire = tuple[str, str, str]
"""(call id, wire name, arguments text) of one call as a model sends it."""

CHAT = OpenAIChatAdapter(strict=True)
RESPONSES = OpenAIResponsesAdapter(strict=True)


def chat_completion(*calls: Wire, finish_reason: str = "tool_calls") -> dict[str, Any]:
    return {
        "id": "chatcmpl-x",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o",
        "choices": [
            {
                "index": 0,
                "finish_reason": finish_reason,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                        for i, n, a in calls
                    ],
                },
            },
        ],
    }


def response(*calls: Wire, status: str = "completed") -> dict[str, Any]:
    return {
        "id": "resp_x",
        "object": "response",
        "status": status,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "output": [
            {"type": "function_call", "id": f"fc_{k}", "call_id": i, "name": n, "arguments": a}
            for k, (i, n, a) in enumerate(calls)
        ],
    }


Parse = Callable[..., list[ToolCall]]


def parse_chat(*calls: Wire, cut: bool = False) -> list[ToolCall]:
    return CHAT.parse_calls(chat_completion(*calls, finish_reason="length" if cut else "stop"))


def parse_responses(*calls: Wire, cut: bool = False) -> list[ToolCall]:
    return RESPONSES.parse_calls(response(*calls, status="incomplete" if cut else "completed"))


PARSERS = pytest.mark.parametrize("parse", [parse_chat, parse_responses], ids=["chat", "responses"])


@PARSERS
def test_duplicate_ids_in_one_turn_are_both_kept_and_the_second_is_refused(
    parse: Parse,
    gate: Gate,
    principal: Principal,
    probe: str,
    received: list[dict[str, object]],
) -> None:
    calls = parse(("dup", "probe__echo", '{"note": "1"}'), ("dup", "probe__echo", '{"note": "2"}'))
    assert [call.id for call in calls] == ["dup", "dup"]
    first, second = gate.handle_batch_sync(calls, principal)
    assert first.status is Status.OK
    assert second.error_type is ErrorCode.INVALID_ARGUMENTS
    assert received == [{"note": "1", "count": 0}]


@PARSERS
def test_results_for_an_id_no_call_had_cannot_be_rendered(parse: Parse) -> None:
    calls = parse(("call_1", "probe__echo", "{}"))
    stray = Envelope(call_id="call_2", tool="probe.echo", status=Status.OK, summary="x")
    adapter = CHAT if parse is parse_chat else RESPONSES
    with pytest.raises(ConfigurationError):
        adapter.render_results(calls, [stray])


@PARSERS
def test_an_id_reused_in_a_later_turn_is_refused_and_never_runs(
    parse: Parse,
    gate: Gate,
    principal: Principal,
    probe: str,
    received: list[dict[str, object]],
    audit: MemoryAuditSink,
) -> None:
    ledger = CallIdLedger()
    [first] = ledger.admit(parse(("call_1", "probe__echo", '{"note": "a"}')))
    assert gate.handle_sync(first, principal).status is Status.OK
    [again] = ledger.admit(parse(("call_1", "probe__echo", '{"note": "b"}')))
    envelope = gate.handle_sync(again, principal)
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert received == [{"note": "a", "count": 0}]
    last = audit.for_call("call_1")[-1]
    assert (last.stage, last.decision) == ("syntax", "refused")


@pytest.fixture
def hidden(registry: Registry) -> str:
    """A tool registered for tenant t2 only: not exposed to the t1 principal."""

    @make_tool(risk=RiskLevel.L0_PUBLIC_READ, namespace="probe", enabled_tenants={"t2"})
    def secret() -> str:
        """Only for t2."""
        return "secret"

    registry.register(secret)
    return "probe__secret"


@PARSERS
@pytest.mark.parametrize("wire_name", ["probe__nothing", "hidden"])
def test_a_name_that_is_not_registered_or_not_exposed_is_unknown(
    parse: Parse,
    wire_name: str,
    hidden: str,
    gate: Gate,
    principal: Principal,
    wire: WireCheck,
) -> None:
    name = hidden if wire_name == "hidden" else wire_name
    [call] = parse(("call_x", name, "{}"))
    envelope = gate.handle_sync(call, principal)
    assert envelope.error_type is ErrorCode.UNKNOWN_TOOL
    wire(envelope, call)


NOT_WIRE_NAMES = {
    "dotted handrail name": "probe.echo",
    "triple underscore": "probe___echo",
    "trailing separator": "probe__echo__",
    "empty": "",
    "space": "probe__echo ",
    "megabyte": "probe__echo" + "a" * (1 << 20),
}


@PARSERS
@pytest.mark.parametrize("name", NOT_WIRE_NAMES.values(), ids=NOT_WIRE_NAMES.keys())
def test_a_name_no_tool_could_have_on_the_wire_never_reaches_a_tool(
    parse: Parse,
    name: str,
    gate: Gate,
    principal: Principal,
    probe: str,
    received: list[dict[str, object]],
    wire: WireCheck,
) -> None:
    [call] = parse(("call_n", name, '{"note": "x"}'))
    assert call.defect is not None
    envelope = gate.handle_sync(call, principal)
    assert envelope.error_type in {ErrorCode.UNKNOWN_TOOL, ErrorCode.INVALID_ARGUMENTS}
    assert received == []
    wire(envelope, call)


BROKEN = {
    "not json": "note=x",
    "truncated": '{"note": "x',
    "array": '["note"]',
    "duplicate keys": '{"note": "a", "note": "b"}',
    "nan": '{"count": NaN}',
    "huge": '{"note": "' + "x" * (2 << 20) + '"}',
    "deep": "[" * 100_000 + "]" * 100_000,
}


@PARSERS
@pytest.mark.parametrize("arguments", BROKEN.values(), ids=BROKEN.keys())
def test_broken_or_huge_arguments_are_kept_verbatim_and_refused_at_syntax(
    parse: Parse,
    arguments: str,
    gate: Gate,
    principal: Principal,
    probe: str,
    untouched: Untouched,
    wire: WireCheck,
) -> None:
    [call] = parse(("call_b", "probe__echo", arguments))
    assert call.arguments == arguments
    envelope = gate.handle_sync(call, principal)
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    untouched(call, "syntax")
    wire(envelope, call)


@PARSERS
def test_huge_arguments_with_strict_definitions_are_not_restored_but_refused(
    parse: Parse,
    registry: Registry,
    gate: Gate,
    principal: Principal,
    probe: str,
    untouched: Untouched,
) -> None:
    adapter = CHAT if parse is parse_chat else RESPONSES
    definitions = adapter.tool_definitions([registry.get(probe).spec])
    huge = '{"note": "' + "x" * (2 << 20) + '", "count": null}'
    document = chat_completion if parse is parse_chat else response
    [call] = adapter.parse_calls(document(("call_h", "probe__echo", huge)), definitions=definitions)
    assert call.arguments == huge
    assert gate.handle_sync(call, principal).error_type is ErrorCode.INVALID_ARGUMENTS
    untouched(call, "syntax")


@PARSERS
def test_arguments_of_a_cut_off_turn_are_refused_even_when_they_parse(
    parse: Parse,
    gate: Gate,
    principal: Principal,
    probe: str,
    untouched: Untouched,
) -> None:
    [call] = parse(("call_c", "probe__echo", '{"note": "x"}'), cut=True)
    assert gate.handle_sync(call, principal).error_type is ErrorCode.INVALID_ARGUMENTS
    untouched(call, "syntax")


@PARSERS
@pytest.mark.parametrize("call_id", ["", "x" * 100_000, "call\x00id", "../../etc/passwd"])
def test_odd_call_ids_come_back_verbatim_in_the_envelope(
    parse: Parse,
    call_id: str,
    gate: Gate,
    principal: Principal,
    probe: str,
    wire: WireCheck,
) -> None:
    [call] = parse((call_id, "probe__echo", "{}"))
    assert call.id == call_id
    envelope = gate.handle_sync(call, principal)
    assert envelope.call_id == call_id
    wire(envelope, call)
