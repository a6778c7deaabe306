"""Attacks through the Gemini wire format, driven through a real gate.

Gemini sends calls without ids, so Handrail makes them: identical calls must not share
one, and a reused id must not make an earlier result ambiguous. Whatever a response
names or carries, only registered, exposed tools run, with object arguments, from
responses that finished normally.
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
from handrail.adapters.base import IssueAction, UnsupportedSchemaError
from handrail.adapters.gemini import GeminiAdapter
from handrail.adapters.transcript import CallIdLedger
from handrail.errors import ConfigurationError
from handrail.testing import MemoryAuditSink

WireCheck = Callable[[Envelope, ToolCall], dict[str, Any]]
Untouched = Callable[[ToolCall, str | None], None]

ADAPTER = GeminiAdapter()


def response(
    *calls: dict[str, Any], response_id: str = "resp-1", finish: str = "STOP"
) -> dict[str, Any]:
    parts = [{"functionCall": c} for c in calls]
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": finish}],
        "responseId": response_id,
    }


def echo(note: str = "hi", **extra: Any) -> dict[str, Any]:
    return {"name": "probe__echo", "args": {"note": note}, **extra}


@pytest.mark.anyio
async def test_identical_parallel_calls_get_distinct_stable_ids_and_each_its_own_result(
    gate: Gate,
    principal: Principal,
    probe: str,
    received: list[dict[str, object]],
) -> None:
    payload = response(echo(), echo(), echo())
    calls = ADAPTER.parse_calls(payload)
    assert [c.id for c in calls] == [c.id for c in ADAPTER.parse_calls(payload)]
    assert len({c.id for c in calls}) == 3
    envelopes = await gate.handle_batch(calls, principal)
    assert [e.status for e in envelopes] == [Status.OK] * 3
    assert len(received) == 3
    [content] = ADAPTER.render_results(calls, envelopes)
    assert [p["functionResponse"]["name"] for p in content["parts"]] == ["probe__echo"] * 3


@pytest.mark.anyio
async def test_identical_calls_in_different_turns_do_not_collide(
    gate: Gate,
    principal: Principal,
    probe: str,
) -> None:
    ledger = CallIdLedger()
    first = ledger.admit(ADAPTER.parse_calls(response(echo(), response_id="turn-1")))
    second = ledger.admit(ADAPTER.parse_calls(response(echo(), response_id="turn-2")))
    assert first[0].id != second[0].id
    envelopes = await gate.handle_batch([*first, *second], principal)
    assert [e.status for e in envelopes] == [Status.OK, Status.OK]


@pytest.mark.anyio
async def test_an_id_gemini_reuses_in_a_later_turn_is_refused_and_never_runs(
    gate: Gate,
    principal: Principal,
    probe: str,
    received: list[dict[str, object]],
    audit: MemoryAuditSink,
    untouched: Untouched,
) -> None:
    ledger = CallIdLedger()
    [first] = ledger.admit(ADAPTER.parse_calls(response(echo(id="fc-1"), response_id="a")))
    assert (await gate.handle(first, principal)).status is Status.OK
    received.clear()
    audit.events.clear()
    [again] = ledger.admit(ADAPTER.parse_calls(response(echo("other", id="fc-1"), response_id="b")))
    assert again.id == "fc-1"
    envelope = await gate.handle(again, principal)
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    untouched(again, "syntax")


@pytest.mark.anyio
async def test_a_reused_turn_key_cannot_smuggle_a_second_run_of_the_same_call(
    gate: Gate,
    principal: Principal,
    probe: str,
    received: list[dict[str, object]],
    audit: MemoryAuditSink,
    untouched: Untouched,
) -> None:
    ledger = CallIdLedger()
    [first] = ledger.admit(ADAPTER.parse_calls(response(echo()), turn=7))
    await gate.handle(first, principal)
    received.clear()
    audit.events.clear()
    [repeat] = ledger.admit(ADAPTER.parse_calls(response(echo(), response_id="other"), turn=7))
    assert repeat.id == first.id
    assert (await gate.handle(repeat, principal)).error_type is ErrorCode.INVALID_ARGUMENTS
    untouched(repeat, "syntax")


@pytest.mark.anyio
async def test_results_for_ids_no_call_has_are_refused_before_reaching_gemini(
    gate: Gate,
    principal: Principal,
    probe: str,
) -> None:
    calls = ADAPTER.parse_calls(response(echo()))
    [real] = await gate.handle_batch(calls, principal)
    forged = Envelope(call_id="gemini_forged", tool="probe.echo", status=Status.OK, summary="ok")
    with pytest.raises(ConfigurationError):
        ADAPTER.render_results(calls, [real, forged])


@tool(risk=RiskLevel.L4_FORBIDDEN, namespace="shop")
def wipe() -> None:
    """Remove everything; registered to prove it is unreachable."""


@tool(risk=RiskLevel.L0_PUBLIC_READ, namespace="shop", enabled_tenants={"t2"})
def regional() -> str:
    """A tool only tenant t2 has."""
    return "t2 only"


@pytest.mark.anyio
@pytest.mark.parametrize(
    "name",
    [
        "admin__delete",
        "shop__wipe",
        "shop__regional",
        "SHOP__SEARCH",
        "shop__search\u200b",
        "x" * 5000,
        "",
    ],
    ids=["unregistered", "forbidden", "other-tenant", "case", "zero-width", "huge", "empty"],
)
async def test_names_that_are_not_registered_and_exposed_are_unknown_tools(
    gate: Gate,
    registry: Registry,
    principal: Principal,
    wire: WireCheck,
    untouched: Untouched,
    probe: str,
    name: str,
) -> None:
    registry.register(wipe)
    registry.register(regional)
    [call] = ADAPTER.parse_calls(response({"name": name, "args": {}}))
    envelope = await gate.handle(call, principal)
    assert envelope.error_type is ErrorCode.UNKNOWN_TOOL
    wire(envelope, call)
    untouched(call, "lookup")


@pytest.mark.anyio
@pytest.mark.parametrize(
    "args", [[1, 2], "text", 42, True], ids=["list", "string", "number", "bool"]
)
async def test_args_that_are_not_an_object_are_refused_at_syntax(
    gate: Gate,
    principal: Principal,
    probe: str,
    untouched: Untouched,
    args: object,
) -> None:
    [call] = ADAPTER.parse_calls(response({"name": "probe__echo", "args": args}))
    envelope = await gate.handle(call, principal)
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    untouched(call, "syntax")


@pytest.mark.anyio
@pytest.mark.parametrize(
    "finish",
    ["MAX_TOKENS", "SAFETY", "MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL", "NEW_REASON"],
)
async def test_calls_of_a_response_that_did_not_stop_normally_never_run(
    gate: Gate,
    principal: Principal,
    probe: str,
    untouched: Untouched,
    finish: str,
) -> None:
    [call] = ADAPTER.parse_calls(response(echo(), finish=finish))
    envelope = await gate.handle(call, principal)
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert envelope.retryable
    untouched(call, "syntax")


@pytest.mark.anyio
async def test_a_stream_cut_off_between_calls_runs_none_of_them(
    gate: Gate,
    principal: Principal,
    probe: str,
    received: list[dict[str, object]],
) -> None:
    assembler = ADAPTER.stream()
    for call in (echo("a"), echo("b")):
        assembler.feed(
            {
                "candidates": [{"content": {"role": "model", "parts": [{"functionCall": call}]}}],
                "responseId": "s",
            },
        )
    envelopes = await gate.handle_batch(assembler.finish(), principal)
    assert [e.error_type for e in envelopes] == [ErrorCode.INVALID_ARGUMENTS] * 2
    assert received == []


@pytest.mark.anyio
async def test_a_call_streamed_in_argument_fragments_never_runs(
    gate: Gate,
    principal: Principal,
    probe: str,
    untouched: Untouched,
) -> None:
    fragment = {"name": "probe__echo", "partialArgs": [{"jsonPath": "$.note", "stringValue": "x"}]}
    [call] = ADAPTER.parse_calls(response(fragment))
    assert (await gate.handle(call, principal)).error_type is ErrorCode.INVALID_ARGUMENTS
    untouched(call, "syntax")


def test_a_recursive_schema_is_refused_instead_of_being_sent_loose() -> None:
    recursive = Tool.from_json_schema(
        name="fs.tree",
        description="Build a tree.",
        input_schema={
            "type": "object",
            "properties": {"root": {"$ref": "#"}},
        },
        fn=lambda arguments, ctx: None,
        risk=RiskLevel.L0_PUBLIC_READ,
    )
    with pytest.raises(UnsupportedSchemaError) as caught:
        ADAPTER.tool_definitions([recursive.spec])
    assert [(i.keyword, i.action) for i in caught.value.issues] == [("$ref", IssueAction.REFUSED)]


def test_a_forbidden_tool_is_never_declared_even_when_asked_to() -> None:
    with pytest.raises(ConfigurationError):
        ADAPTER.tool_definitions([wipe.spec])
