"""Only the wire names Handrail sent reach a tool: a second spelling never does."""

from __future__ import annotations

from typing import Any

import pytest

from handrail import ErrorCode, Gate, Principal
from handrail.adapters import (
    Adapter,
    AnthropicAdapter,
    GeminiAdapter,
    OpenAIChatAdapter,
    OpenAIResponsesAdapter,
)


def _chat(name: str) -> dict[str, Any]:
    call = {"id": "c1", "type": "function", "function": {"name": name, "arguments": "{}"}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    return {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": message}]}


def _responses(name: str) -> dict[str, Any]:
    item = {"type": "function_call", "call_id": "c1", "name": name, "arguments": "{}"}
    return {"status": "completed", "output": [item]}


def _anthropic(name: str) -> dict[str, Any]:
    block = {"type": "tool_use", "id": "c1", "name": name, "input": {}}
    return {"type": "message", "role": "assistant", "stop_reason": "tool_use", "content": [block]}


def _gemini(name: str) -> dict[str, Any]:
    part = {"functionCall": {"id": "c1", "name": name, "args": {}}}
    return {"candidates": [{"finishReason": "STOP", "content": {"role": "model", "parts": [part]}}]}


CASES: list[tuple[Adapter, Any]] = [
    (OpenAIChatAdapter(strict=False), _chat),
    (OpenAIResponsesAdapter(strict=False), _responses),
    (AnthropicAdapter(strict=False), _anthropic),
    (GeminiAdapter(), _gemini),
]


@pytest.mark.anyio
@pytest.mark.parametrize(("adapter", "response"), CASES, ids=[a.provider for a, _ in CASES])
async def test_the_dotted_handrail_name_is_not_a_second_wire_spelling(
    adapter: Adapter,
    response: Any,
    gate: Gate,
    principal: Principal,
) -> None:
    [call] = adapter.parse_calls(response("shop.search"))
    assert call.defect is not None
    envelope = await gate.handle(call, principal)
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS

    [sent] = adapter.parse_calls(response("shop__search"))
    assert sent.defect is None
    assert sent.name == "shop.search"
