"""Rendering turn by turn gives exactly what `to_wire` gives, for every adapter.

A `TranscriptRenderer` fed a growing conversation renders only its new turns; at every
prefix its messages equal `to_wire` of that prefix, and it refuses exactly the prefixes
`to_wire` refuses, with the same error. A transcript that is no extension of the last
one (a replay, equal turns that are other objects, another conversation) is rendered
whole. The transcripts are drawn mostly valid, with the mistakes the adapters' checks
exist for mixed in.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from handrail import Envelope, ErrorCode, ErrorDetail, Status, ToolCall
from handrail.adapters._names import name_to_wire
from handrail.adapters.anthropic import AnthropicAdapter
from handrail.adapters.gemini import PROVIDER as GEMINI
from handrail.adapters.gemini import GeminiAdapter
from handrail.adapters.openai_chat import OpenAIChatAdapter
from handrail.adapters.openai_responses import OpenAIResponsesAdapter
from handrail.adapters.transcript import (
    AssistantTurn,
    ToolResult,
    ToolResultsTurn,
    Turn,
    UserTurn,
)
from handrail.errors import ConfigurationError
from handrail.shaping.marking import DataMarker

Adapter = OpenAIChatAdapter | OpenAIResponsesAdapter | AnthropicAdapter | GeminiAdapter

ADAPTERS: list[Adapter] = [
    OpenAIChatAdapter(strict=True),
    OpenAIResponsesAdapter(strict=False),
    AnthropicAdapter(strict=False),
    GeminiAdapter(),
]
IDS = [adapter.provider for adapter in ADAPTERS]
MARKER = DataMarker()

# --- strategies ----------------------------------------------------------------------------

WORD = st.from_regex(r"\A[a-z][a-z0-9]{0,5}\Z")
NAMES = st.lists(st.lists(WORD, min_size=1, max_size=2).map("_".join), min_size=1, max_size=2).map(
    ".".join
)
TEXTS = st.text(max_size=12)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=4), inner, max_size=2)
    ),
    max_leaves=5,
)
OBJECTS = st.dictionaries(st.text(max_size=6), JSON, max_size=3)
ARGUMENTS = (
    OBJECTS
    | OBJECTS.map(json.dumps)
    | st.sampled_from([None, "", "[1]", "{not json", b'{"a": 1}', b"\xff", '{"a":1,"a":2}'])
)


def _rarely(draw: st.DrawFn) -> bool:
    """True about one time in 25: where a drawn transcript makes a mistake."""
    return draw(st.integers(0, 24)) == 0


@st.composite
def calls(draw: st.DrawFn, ids: list[str]) -> tuple[ToolCall, ...]:
    made = []
    for _ in range(draw(st.integers(1, 3))):
        reused = ids and _rarely(draw)
        call_id = draw(st.sampled_from(ids)) if reused else f"call_{len(ids)}"
        ids.append(call_id)
        name = draw(NAMES | st.just("bad__name")) if _rarely(draw) else draw(NAMES)
        call = ToolCall(id=call_id, name=name, arguments=draw(ARGUMENTS))
        if draw(st.booleans()):  # as Gemini sent it: its raw part says how it was written
            part: dict[str, Any] = {"functionCall": {"name": name_to_wire(name), "id": call_id}}
            if draw(st.booleans()):
                part["thoughtSignature"] = draw(st.text(max_size=4))
            call = replace(call, provider=GEMINI, raw=part)
        made.append(call)
    return tuple(made)


@st.composite
def result_of(draw: st.DrawFn, call: ToolCall) -> ToolResult:
    error = draw(st.booleans())
    envelope = Envelope(
        call_id=call.id,
        tool=call.name,
        status=Status.ERROR if error else Status.OK,
        summary=draw(TEXTS),
        data=None if error else draw(JSON),
        error=ErrorDetail(code=ErrorCode.NOT_FOUND, retryable=False) if error else None,
    )
    result = ToolResult.of(envelope, MARKER)
    if _rarely(draw):
        result = replace(result, is_error=not result.is_error)
    if _rarely(draw):
        result = replace(result, tool=draw(NAMES))
    if _rarely(draw):
        result = replace(result, content=draw(TEXTS))
    return result


@st.composite
def transcripts(draw: st.DrawFn) -> list[Turn]:
    """A loop's conversation: task, rounds of calls and results, user text, an answer."""
    ids: list[str] = []
    turns: list[Turn] = [UserTurn(text=draw(st.just(" ") if _rarely(draw) else WORD))]
    for _ in range(draw(st.integers(0, 6))):
        made = draw(calls(ids))
        text = draw(st.none() | TEXTS)
        if _rarely(draw):
            turns.append(AssistantTurn(text=draw(st.none() | TEXTS)))
        turns.append(AssistantTurn(text=text, calls=made))
        results = [draw(result_of(call)) for call in made]
        if _rarely(draw):
            results = results[1:] if draw(st.booleans()) else results[:0]
        turns.append(ToolResultsTurn(results=tuple(draw(st.permutations(results)))))
        if _rarely(draw):
            turns.append(ToolResultsTurn(results=tuple(results)))
        turns.extend(UserTurn(text=draw(WORD)) for _ in range(draw(st.integers(0, 2))))
    turns.append(AssistantTurn(text=draw(TEXTS)))
    return turns


def outcome(render: Any, turns: list[Turn]) -> object:
    """The messages, or the refusal's type and text."""
    try:
        return render(turns)
    except (ConfigurationError, ValueError) as exc:
        return (type(exc), str(exc))


# --- properties ----------------------------------------------------------------------------


@pytest.mark.parametrize("adapter", ADAPTERS, ids=IDS)
@settings(max_examples=120, deadline=None)
@given(turns=transcripts())
def test_rendering_turn_by_turn_equals_to_wire_at_every_prefix(
    adapter: Adapter, turns: list[Turn]
) -> None:
    renderer = adapter.renderer()
    for end in range(len(turns) + 1):
        expected = outcome(adapter.to_wire, turns[:end])
        assert outcome(renderer.render, turns[:end]) == expected
    # Byte for byte, as a client would send it.
    final = outcome(adapter.to_wire, turns)
    if isinstance(final, list):
        assert json.dumps(renderer.render(turns)) == json.dumps(final)


@pytest.mark.parametrize("adapter", ADAPTERS, ids=IDS)
@settings(max_examples=80, deadline=None)
@given(data=st.data(), turns=transcripts(), other=transcripts())
def test_any_sequence_of_requests_renders_as_to_wire(
    adapter: Adapter, data: st.DataObject, turns: list[Turn], other: list[Turn]
) -> None:
    """Extensions, replays, shorter prefixes, other conversations and copies, interleaved."""
    renderer = adapter.renderer(conversations=2)
    copies = turns[:1] + [_copy(turn) for turn in turns[1:]]
    sources = [turns, other, copies, turns[:1] + other]
    for _ in range(12):
        source = data.draw(st.sampled_from(sources))
        end = data.draw(st.integers(0, len(source)))
        assert outcome(renderer.render, source[:end]) == outcome(adapter.to_wire, source[:end])


def _copy(turn: Turn) -> Turn:
    """An equal turn that is another object; calls lose what Gemini sent (raw is no part
    of equality), so rendering the copy as the original would be wrong for Gemini."""
    if isinstance(turn, AssistantTurn):
        return replace(turn, calls=tuple(replace(c, raw=None) for c in turn.calls))
    return replace(turn)


# --- examples ------------------------------------------------------------------------------


def _conversation(steps: int) -> list[Turn]:
    turns: list[Turn] = [UserTurn(text="task")]
    for step in range(steps):
        call = ToolCall(id=f"c{step}", name="echo", arguments=json.dumps({"x": step}))
        envelope = Envelope(call_id=call.id, tool="echo", status=Status.OK, summary="ok")
        turns.append(AssistantTurn(calls=(call,)))
        turns.append(ToolResultsTurn(results=(ToolResult.of(envelope, MARKER),)))
    return turns


@pytest.mark.parametrize("adapter", ADAPTERS, ids=IDS)
def test_a_refused_extension_is_dropped_and_the_next_request_renders_whole(
    adapter: Adapter,
) -> None:
    renderer = adapter.renderer()
    turns = _conversation(2)
    renderer.render(turns)
    bad = [*turns, AssistantTurn(), AssistantTurn()]
    assert outcome(renderer.render, bad) == outcome(adapter.to_wire, bad)
    assert isinstance(outcome(renderer.render, bad), tuple)
    longer = _conversation(3)
    assert renderer.render(turns) == adapter.to_wire(turns)
    assert renderer.render(longer) == adapter.to_wire(longer)


@pytest.mark.parametrize("adapter", ADAPTERS, ids=IDS)
def test_conversations_interleaved_each_render_as_to_wire(adapter: Adapter) -> None:
    renderer = adapter.renderer(conversations=2)
    first, second, third = _conversation(4), _conversation(4), _conversation(4)
    for end in range(1, 10):
        for turns in (first, second, third):
            assert renderer.render(turns[:end]) == adapter.to_wire(turns[:end])


@pytest.mark.parametrize("adapter", ADAPTERS, ids=IDS)
def test_the_messages_returned_are_a_new_list_each_time(adapter: Adapter) -> None:
    renderer = adapter.renderer()
    turns = _conversation(1)
    once = renderer.render(turns)
    once.append({"role": "user", "content": "added by the caller"})
    assert renderer.render(turns) == adapter.to_wire(turns)


def test_a_renderer_keeps_at_least_one_conversation() -> None:
    with pytest.raises(ConfigurationError):
        OpenAIChatAdapter(strict=True).renderer(conversations=0)
