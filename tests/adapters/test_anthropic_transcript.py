"""AnthropicAdapter transcripts: neutral turns to Messages API messages and back.

Round trips are properties over generated conversations; every message produced is
checked against the SDK's `MessageParam` and its block TypedDicts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import replace
from itertools import pairwise
from typing import Any

import pytest
from anthropic.types import (
    Message,
    MessageParam,
    TextBlockParam,
    ToolResultBlockParam,
    ToolUseBlockParam,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from handrail import Envelope, Status, ToolCall
from handrail.adapters.anthropic import AnthropicAdapter
from handrail.adapters.base import UntranslatableError
from handrail.adapters.transcript import (
    AssistantTurn,
    ToolResult,
    ToolResultsTurn,
    Turn,
    UserTurn,
)
from handrail.shaping.marking import DataMarker

MARKER = DataMarker()
_ADAPTERS: dict[str, TypeAdapter[Any]] = {
    "message": TypeAdapter(MessageParam),
    "text": TypeAdapter(TextBlockParam),
    "tool_use": TypeAdapter(ToolUseBlockParam),
    "tool_result": TypeAdapter(ToolResultBlockParam),
}
_KEYS: dict[str, Any] = {
    "text": TextBlockParam,
    "tool_use": ToolUseBlockParam,
    "tool_result": ToolResultBlockParam,
}


def _consume(value: object) -> None:
    if isinstance(value, Mapping):
        for item in value.values():
            _consume(item)
    elif isinstance(value, list | tuple | Iterator):
        for item in value:
            _consume(item)


def conforms(messages: list[dict[str, Any]]) -> None:
    """Each message is a valid `MessageParam`; each block its exact TypedDict."""
    for message in messages:
        _consume(_ADAPTERS["message"].validate_python(message, strict=True))
        blocks = message["content"] if isinstance(message["content"], list) else []
        for block in blocks:
            _ADAPTERS[block["type"]].validate_python(block, strict=True)
            typed = _KEYS[block["type"]]
            assert set(block) <= typed.__optional_keys__ | typed.__required_keys__
    roles = [message["role"] for message in messages]
    assert all(a != b for a, b in pairwise(roles)), "roles alternate"


def call(call_id: str, name: str = "shop.search", **arguments: object) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


def result(call_id: str, tool: str = "shop.search", *, error: bool = False) -> ToolResult:
    return ToolResult(call_id=call_id, tool=tool, content='{"status":"ok"}', is_error=error)


def comparable(turns: list[Turn]) -> list[Turn]:
    """Turns without what the wire does not carry: a call's raw block and provider."""
    out: list[Turn] = []
    for turn in turns:
        if isinstance(turn, AssistantTurn):
            calls = tuple(
                replace(c, raw=None, provider="x", arguments=dict(c.arguments or {}))  # type: ignore[arg-type]
                for c in turn.calls
            )
            out.append(replace(turn, calls=calls))
        else:
            out.append(turn)
    return out


ADAPTER = AnthropicAdapter(strict=False)

CONVERSATION: list[Turn] = [
    UserTurn(text="What's the weather like in San Francisco?"),
    AssistantTurn(
        text="I'll check the current weather in San Francisco for you.",
        calls=(call("toolu_01A09q90qw90lq917835lq9", "get_weather", location="San Francisco, CA"),),
    ),
    ToolResultsTurn(results=(result("toolu_01A09q90qw90lq917835lq9", "get_weather"),)),
    UserTurn(text="And in Celsius, please."),
    AssistantTurn(text="It is 15 degrees."),
]


def test_a_conversation_becomes_alternating_messages_with_user_text_after_the_results() -> None:
    messages = ADAPTER.to_wire(CONVERSATION)
    conforms(messages)
    assert messages == [
        {"role": "user", "content": "What's the weather like in San Francisco?"},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "text",
                    "text": "I'll check the current weather in San Francisco for you.",
                },
                {
                    "type": "tool_use",
                    "id": "toolu_01A09q90qw90lq917835lq9",
                    "name": "get_weather",
                    "input": {"location": "San Francisco, CA"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01A09q90qw90lq917835lq9",
                    "content": '{"status":"ok"}',
                    "is_error": False,
                },
                {"type": "text", "text": "And in Celsius, please."},
            ],
        },
        {"role": "assistant", "content": "It is 15 degrees."},
    ]


def test_the_merged_user_message_splits_back_into_results_and_user_text() -> None:
    assert comparable(ADAPTER.from_wire(ADAPTER.to_wire(CONVERSATION))) == comparable(CONVERSATION)


def test_sdk_messages_and_params_read_like_dicts() -> None:
    messages = ADAPTER.to_wire(CONVERSATION)
    answer = Message.model_validate(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-opus-4-6",
            "content": [{"type": "text", "text": "It is 15 degrees."}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 1, "output_tokens": 1},
        },
    )
    assistant = Message.model_validate(
        {**answer.model_dump(), "content": messages[1]["content"], "stop_reason": "tool_use"},
    )
    from_sdk = ADAPTER.from_wire([messages[0], assistant, messages[2], answer])
    assert comparable(from_sdk) == comparable(CONVERSATION)


def test_string_arguments_holding_an_object_are_sent_as_the_input_object() -> None:
    turn = AssistantTurn(calls=(ToolCall(id="c1", name="shop.search", arguments='{"q": 1}'),))
    [message] = ADAPTER.to_wire([turn])
    assert message["content"][0]["input"] == {"q": 1}
    none = AssistantTurn(calls=(ToolCall(id="c1", name="shop.search", arguments=None),))
    assert ADAPTER.to_wire([none])[0]["content"][0]["input"] == {}


@pytest.mark.parametrize(
    "arguments", ["[1, 2]", '"text"', "{", '{"a": 1, "a": 2}', '{"n": NaN}', b"\xff"]
)
def test_arguments_that_are_not_a_json_object_are_untranslatable(arguments: str | bytes) -> None:
    turn = AssistantTurn(calls=(ToolCall(id="c1", name="shop.search", arguments=arguments),))
    with pytest.raises(UntranslatableError):
        ADAPTER.to_wire([turn])


@pytest.mark.parametrize(
    "turns",
    [
        pytest.param([AssistantTurn(text="a"), AssistantTurn(text="b")], id="two-assistant-turns"),
        pytest.param([AssistantTurn(calls=(call("c1"),)), UserTurn(text="hi")], id="unanswered"),
        pytest.param([UserTurn(text="hi"), ToolResultsTurn(results=(result("c1"),))], id="no-call"),
        pytest.param(
            [AssistantTurn(calls=(call("c1"),)), ToolResultsTurn(results=(result("c2"),))],
            id="other-id",
        ),
        pytest.param(
            [
                AssistantTurn(calls=(call("c1"), call("c2"))),
                ToolResultsTurn(results=(result("c1"),)),
            ],
            id="half-answered",
        ),
        pytest.param([AssistantTurn(calls=(call("c1"), call("c1")))], id="id-twice-in-a-turn"),
        pytest.param(
            [
                AssistantTurn(calls=(call("c1"),)),
                ToolResultsTurn(results=(result("c1"),)),
                AssistantTurn(calls=(call("c1"),)),
            ],
            id="id-reused-in-a-later-turn",
        ),
        pytest.param([UserTurn(text="  ")], id="blank-user-text"),
        pytest.param([UserTurn(text="hi"), AssistantTurn(text=" ")], id="empty-assistant-turn"),
    ],
)
def test_what_anthropic_would_refuse_is_untranslatable(turns: list[Turn]) -> None:
    with pytest.raises(UntranslatableError):
        ADAPTER.to_wire(turns)


def test_blank_assistant_text_beside_calls_is_no_block() -> None:
    [message] = ADAPTER.to_wire([AssistantTurn(text="", calls=(call("c1"),))])
    assert [block["type"] for block in message["content"]] == ["tool_use"]


def test_ids_anthropic_would_refuse_are_escaped_and_come_back_verbatim() -> None:
    odd = ["call:1|x", "fc.7", "hr64_looks_escaped", "ünï", "a b"]
    turns: list[Turn] = [
        AssistantTurn(calls=tuple(call(i) for i in odd)),
        ToolResultsTurn(results=tuple(result(i) for i in odd)),
    ]
    messages = ADAPTER.to_wire(turns)
    conforms(messages)
    wire_ids = [block["id"] for block in messages[0]["content"]]
    assert all(i.startswith("hr64_") for i in wire_ids)
    assert [b["tool_use_id"] for b in messages[1]["content"]] == wire_ids
    assert comparable(ADAPTER.from_wire(messages)) == comparable(turns)


@pytest.mark.parametrize("wire_id", ["hr64_!!", "hr64__w", "hr64_YQ"])
def test_a_wire_id_that_only_looks_escaped_is_read_verbatim(wire_id: str) -> None:
    messages = [
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": wire_id, "name": "a", "input": {}}],
        },
    ]
    [turn] = ADAPTER.from_wire(messages)
    assert isinstance(turn, AssistantTurn)
    assert turn.calls[0].id == wire_id


def test_results_take_the_tool_name_of_their_call_and_keep_is_error() -> None:
    messages = [
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "shop__stock", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": [
                        {"type": "text", "text": "15"},
                        {"type": "text", "text": " degrees"},
                    ],
                    "is_error": True,
                },
            ],
        },
    ]
    [_, results] = ADAPTER.from_wire(messages)
    assert results == ToolResultsTurn(
        results=(ToolResult(call_id="t1", tool="shop.stock", content="15 degrees", is_error=True),),
    )


def test_text_blocks_of_one_assistant_message_are_joined_as_they_are() -> None:
    messages = [
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "It is "}, {"type": "text", "text": "15."}],
        }
    ]
    assert ADAPTER.from_wire(messages) == [AssistantTurn(text="It is 15.")]


@pytest.mark.parametrize(
    "messages",
    [
        pytest.param([{"role": "system", "content": "Be brief."}], id="system"),
        pytest.param([{"role": "user", "content": [{"type": "image", "source": {}}]}], id="image"),
        pytest.param(
            [
                {
                    "role": "assistant",
                    "content": [{"type": "thinking", "thinking": "hm", "signature": "s"}],
                }
            ],
            id="thinking",
        ),
        pytest.param(
            [
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "t9", "content": "x"}],
                }
            ],
            id="result-without-call",
        ),
        pytest.param(
            [
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t1", "name": "a", "input": {}}],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "hi"},
                        {"type": "tool_result", "tool_use_id": "t1"},
                    ],
                },
            ],
            id="result-after-text",
        ),
        pytest.param(
            [
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t1", "name": "a", "input": {}}],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "image"}]}
                    ],
                },
            ],
            id="image-in-a-result",
        ),
        pytest.param([{"role": "user", "content": []}], id="empty-content"),
        pytest.param([{"role": "user", "content": 7}], id="content-not-blocks"),
    ],
)
def test_what_a_transcript_cannot_hold_is_untranslatable(messages: list[dict[str, Any]]) -> None:
    with pytest.raises(UntranslatableError):
        ADAPTER.from_wire(messages)


# --- properties ----------------------------------------------------------------------------

_word = st.from_regex(r"\A[a-z][a-z0-9]{0,5}\Z")
_segment = st.lists(_word, min_size=1, max_size=2).map("_".join)
_names = st.lists(_segment, min_size=1, max_size=3).map(".".join)
_texts = st.text(min_size=1, max_size=30).filter(str.strip)
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10)
)
_json = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
_objects = st.dictionaries(st.text(max_size=8), _json, max_size=4)


@st.composite
def transcripts(draw: st.DrawFn) -> list[Turn]:
    """Conversations Anthropic can take: user text, rounds of calls and their results."""
    ids = iter(
        draw(st.lists(st.text(min_size=1, max_size=12), min_size=12, max_size=12, unique=True))
    )
    turns: list[Turn] = [UserTurn(text=draw(_texts))]
    for _ in range(draw(st.integers(0, 3))):
        calls = tuple(
            ToolCall(id=next(ids), name=draw(_names), arguments=draw(_objects))
            for _ in range(draw(st.integers(1, 3)))
        )
        turns.append(AssistantTurn(text=draw(st.none() | _texts), calls=calls))
        results = [
            ToolResult.of(
                Envelope(
                    call_id=c.id, tool=c.name, status=Status.OK, summary="ok", data=draw(_json)
                ),
                MARKER,
            )
            for c in calls
        ]
        turns.append(ToolResultsTurn(results=tuple(draw(st.permutations(results)))))
        turns.extend(UserTurn(text=draw(_texts)) for _ in range(draw(st.integers(0, 2))))
    ending = draw(st.sampled_from(["none", "text", "calls"]))
    if ending == "text":
        turns.append(AssistantTurn(text=draw(_texts)))
    elif ending == "calls":
        turns.append(
            AssistantTurn(calls=(ToolCall(id=next(ids), name=draw(_names), arguments={}),))
        )
    return turns


@settings(max_examples=150)
@given(transcripts())
def test_neutral_to_wire_to_neutral_is_lossless(turns: list[Turn]) -> None:
    messages = ADAPTER.to_wire(turns)
    conforms(messages)
    assert comparable(ADAPTER.from_wire(messages)) == comparable(turns)


@settings(max_examples=100)
@given(transcripts())
def test_wire_to_neutral_to_wire_is_lossless_for_what_to_wire_produces(turns: list[Turn]) -> None:
    messages = ADAPTER.to_wire(turns)
    again = ADAPTER.to_wire(ADAPTER.from_wire(json.loads(json.dumps(messages))))
    assert again == messages


@given(st.text(max_size=40))
def test_any_id_survives_the_wire(call_id: str) -> None:
    turns: list[Turn] = [
        AssistantTurn(calls=(ToolCall(id=call_id, name="a.b", arguments={}),)),
        ToolResultsTurn(results=(ToolResult(call_id=call_id, tool="a.b", content=""),)),
    ]
    messages = ADAPTER.to_wire(turns)
    conforms(messages)
    assert comparable(ADAPTER.from_wire(messages)) == comparable(turns)
