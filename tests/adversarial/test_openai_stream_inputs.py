"""What an OpenAI stream assembler is fed by mistake: an error, never an empty result.

A stream whose events the assembler cannot read must not come back as "no calls": the
application would answer the user as if the model had proposed nothing. Text, numbers,
another format's events, a whole response, an unknown event object and a chunk whose
parts have the wrong shape are each an UntranslatableError at `feed`; any JSON value is
read or refused that way, never with another exception.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from handrail.adapters.base import StreamAssembler, UntranslatableError
from handrail.adapters.openai_chat import OpenAIChatAdapter
from handrail.adapters.openai_responses import OpenAIResponsesAdapter

CHAT = OpenAIChatAdapter(strict=False)
RESPONSES = OpenAIResponsesAdapter(strict=False)

CHUNK: dict[str, Any] = {
    "id": "chatcmpl-1",
    "object": "chat.completion.chunk",
    "created": 1,
    "model": "gpt-4o-mini",
    "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}],
}
COMPLETION: dict[str, Any] = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-4o-mini",
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "a", "arguments": "{}"},
                    },
                ],
            },
        },
    ],
}
RESPONSE: dict[str, Any] = {
    "id": "resp_1",
    "object": "response",
    "created_at": 1,
    "status": "completed",
    "model": "gpt-4.1",
    "output": [
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "a",
            "arguments": "{}",
        },
    ],
    "parallel_tool_calls": True,
    "tool_choice": "auto",
    "tools": [],
}
RESPONSES_EVENT: dict[str, Any] = {
    "type": "response.output_item.added",
    "sequence_number": 1,
    "output_index": 0,
    "item": {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "a"},
}
ANTHROPIC_EVENT: dict[str, Any] = {
    "type": "content_block_start",
    "index": 0,
    "content_block": {"type": "tool_use", "id": "toolu_1", "name": "a", "input": {}},
}


@dataclass(frozen=True)
class FutureEvent:
    """An event object of a type no OpenAI format has."""

    type: str = "tool_calls.custom.input.delta"
    index: int = 0


def with_delta(delta: object) -> dict[str, Any]:
    return CHUNK | {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}


NOT_CHAT_CHUNKS = {
    "sse-line": 'data: {"choices": []}',
    "bytes": b"{}",
    "number": 7,
    "none": None,
    "list": [CHUNK],
    "empty-dict": {},
    "fragment": {"index": 0, "id": "call_1"},
    "error-chunk": {"error": {"message": "overloaded", "type": "server_error"}},
    "whole-completion": COMPLETION,
    "whole-completion-sdk": ChatCompletion.model_validate(COMPLETION),
    "completion-choice-without-object": {"choices": COMPLETION["choices"]},
    "choices-not-a-list": CHUNK | {"choices": {"0": CHUNK["choices"][0]}},
    "choice-not-an-object": CHUNK | {"choices": ["stop"]},
    "delta-not-an-object": with_delta("hi"),
    "tool-calls-not-a-list": with_delta({"tool_calls": {"index": 0, "id": "call_1"}}),
    "responses-event": RESPONSES_EVENT,
    "anthropic-event": ANTHROPIC_EVENT,
    "unknown-event-object": FutureEvent(),
    "chunk-event-without-chunk": {"type": "chunk", "snapshot": {}},
    "derived-event-without-its-chunk": {
        "type": "tool_calls.function.arguments.done",
        "name": "a",
        "index": 0,
        "arguments": "{}",
        "parsed_arguments": {},
    },
}

NOT_RESPONSES_EVENTS = {
    "sse-line": "event: response.created",
    "bytes": b"{}",
    "number": 7,
    "none": None,
    "list": [RESPONSES_EVENT],
    "empty-dict": {},
    "sequence-number-only": {"sequence_number": 1},
    "type-not-text": {"type": 7},
    "chat-chunk": CHUNK,
    "chat-helper-chunk-event": {"type": "chunk", "chunk": CHUNK, "snapshot": {}},
    "chat-helper-derived-event": {"type": "content.delta", "delta": "hi", "snapshot": "hi"},
    "whole-response": RESPONSE,
    "whole-response-sdk": Response.model_validate(RESPONSE),
    "anthropic-event": ANTHROPIC_EVENT,
    "unknown-event-object": FutureEvent(),
}


@pytest.mark.parametrize("event", NOT_CHAT_CHUNKS.values(), ids=NOT_CHAT_CHUNKS.keys())
def test_what_is_no_chat_chunk_or_helper_event_is_untranslatable(event: object) -> None:
    with pytest.raises(UntranslatableError):
        CHAT.stream().feed(event)


@pytest.mark.parametrize("event", NOT_RESPONSES_EVENTS.values(), ids=NOT_RESPONSES_EVENTS.keys())
def test_what_is_no_responses_stream_event_is_untranslatable(event: object) -> None:
    with pytest.raises(UntranslatableError):
        RESPONSES.stream().feed(event)


def test_an_unreadable_event_after_a_call_opened_is_still_an_error() -> None:
    assembler = CHAT.stream()
    opening = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "a"}}
    assembler.feed(with_delta({"tool_calls": [opening]}))
    with pytest.raises(UntranslatableError):
        assembler.feed(RESPONSES_EVENT)


def test_error_events_and_unknown_response_events_are_read_not_refused() -> None:
    assembler = RESPONSES.stream()
    assembler.feed({"type": "error", "sequence_number": 1, "code": "server_error", "message": "x"})
    assembler.feed({"type": "response.some_future_event", "sequence_number": 2})
    assert assembler.finish() == []


def test_statuses_that_are_not_text_make_the_streamed_call_defective_not_a_crash() -> None:
    assembler = RESPONSES.stream()
    item = RESPONSE["output"][0] | {"status": {"state": "completed"}}
    assembler.feed({"type": "response.output_item.done", "output_index": 0, "item": item})
    assembler.feed({"type": "response.completed", "response": {"status": ["completed"]}})
    [call] = assembler.finish()
    assert call.id == "call_1"
    assert call.defect is not None


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
CHAT_KEYS = [
    *["object", "choices", "index", "delta", "tool_calls", "finish_reason", "message"],
    *["id", "function", "name", "arguments", "type", "chunk"],
]
CHAT_TYPES = ["chat.completion.chunk", "chunk", "tool_calls.function.arguments.done"]
CHAT_SHAPED = st.recursive(
    JSON | st.sampled_from(CHAT_TYPES),
    lambda inner: st.dictionaries(st.sampled_from(CHAT_KEYS), inner, max_size=4),
    max_leaves=12,
)
RESPONSES_KEYS = [
    *["type", "sequence_number", "item", "delta", "arguments", "item_id", "output_index"],
    *["response", "status", "incomplete_details", "reason", "output", "id", "call_id", "name"],
]
RESPONSES_TYPES = [
    *["response.output_item.added", "response.output_item.done", "response.completed"],
    *["response.function_call_arguments.delta", "response.function_call_arguments.done"],
    *["response.incomplete", "response.failed", "error", "function_call", "completed"],
]
RESPONSES_SHAPED = st.recursive(
    JSON | st.sampled_from(RESPONSES_TYPES),
    lambda inner: st.dictionaries(st.sampled_from(RESPONSES_KEYS), inner, max_size=4),
    max_leaves=12,
)


def _read_or_refused(assembler: StreamAssembler, events: list[object]) -> None:
    try:
        for event in events:
            assembler.feed(event)
    except UntranslatableError:
        return
    for call in assembler.finish():
        assert isinstance(call.id, str)


@given(st.lists(CHAT_SHAPED, max_size=4))
def test_any_json_fed_to_the_chat_assembler_is_read_or_untranslatable(events: list[object]) -> None:
    _read_or_refused(CHAT.stream(), events)


@given(st.lists(RESPONSES_SHAPED, max_size=4))
def test_any_json_fed_to_the_responses_assembler_is_read_or_untranslatable(
    events: list[object],
) -> None:
    _read_or_refused(RESPONSES.stream(), events)
