"""A conversation's tool parts survive conversion through every wire format in turn."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from handrail import Envelope, ErrorCode, ErrorDetail, Status, ToolCall
from handrail.adapters import (
    Adapter,
    AnthropicAdapter,
    AssistantTurn,
    GeminiAdapter,
    OpenAIChatAdapter,
    OpenAIResponsesAdapter,
    ToolResult,
    ToolResultsTurn,
    Turn,
    UserTurn,
)
from handrail.shaping.marking import DataMarker, read_block

MARKER = DataMarker()
ADAPTERS: tuple[Adapter, ...] = (
    OpenAIChatAdapter(strict=False),
    AnthropicAdapter(strict=False),
    GeminiAdapter(),
    OpenAIResponsesAdapter(strict=False),
)

TEXT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")),
    min_size=1,
    max_size=30,
).filter(str.strip)
NAMES = st.sampled_from(["shop.search", "shop.stock", "ping", "crm.customers.find"])
SCALARS = st.none() | st.booleans() | st.integers(-(2**31), 2**31) | st.text(max_size=10)
ARGS = st.dictionaries(
    st.text(alphabet="abcdefghijklmnop_", min_size=1, max_size=8),
    st.recursive(SCALARS, lambda c: st.lists(c, max_size=3), max_leaves=6),
    max_size=4,
)


@st.composite
def conversations(draw: st.DrawFn) -> list[Turn]:
    turns: list[Turn] = []
    next_id = 0
    for _ in range(draw(st.integers(1, 3))):
        turns.append(UserTurn(text=draw(TEXT)))
        calls = []
        for _ in range(draw(st.integers(1, 3))):
            next_id += 1
            calls.append(
                ToolCall(id=f"call_{next_id}", name=draw(NAMES), arguments=draw(ARGS)),
            )
        turns.append(AssistantTurn(text=draw(st.none() | TEXT), calls=tuple(calls)))
        results = []
        for call in calls:
            failed = draw(st.booleans())
            envelope = Envelope(
                call_id=call.id,
                tool=call.name,
                status=Status.ERROR if failed else Status.OK,
                summary=draw(TEXT),
                data=None if failed else draw(ARGS),
                error=ErrorDetail(code=ErrorCode.NOT_FOUND) if failed else None,
            )
            results.append(ToolResult.of(envelope, MARKER))
        turns.append(ToolResultsTurn(results=tuple(results)))
        turns.append(AssistantTurn(text=draw(TEXT)))
    return turns


def _arguments(call: ToolCall) -> Any:
    raw = call.arguments
    return json.loads(raw) if isinstance(raw, str | bytes) else dict(raw or {})


def _body(content: str) -> Any:
    block = read_block(content)
    assert block is not None
    return json.loads(block.body)


def _essence(transcript: Sequence[Turn]) -> list[object]:
    out: list[object] = []
    for turn in transcript:
        if isinstance(turn, UserTurn):
            out.append(("user", turn.text))
        elif isinstance(turn, AssistantTurn):
            calls = [(c.id, c.name, _arguments(c)) for c in turn.calls]
            out.append(("assistant", turn.text, calls))
        else:
            results = [(r.call_id, r.content, _body(r.content), r.is_error) for r in turn.results]
            out.append(("results", results))
    return out


@settings(max_examples=60, deadline=None)
@given(conversations())
def test_a_conversation_converts_through_every_format_without_loss(
    transcript: list[Turn],
) -> None:
    current: list[Turn] = transcript
    for adapter in ADAPTERS:
        current = adapter.from_wire(adapter.to_wire(current))
        assert _essence(current) == _essence(transcript), adapter.provider
