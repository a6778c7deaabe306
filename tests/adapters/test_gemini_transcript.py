"""Gemini `contents` to and from neutral turns, with every payload checked by the SDK.

A transcript that goes to the wire and back is unchanged: ids travel in the parts,
results keep their text and error flag. Histories written by Gemini (no ids) read back
with stable ids, each result answering the call of its name.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

import pytest
from google.genai import types
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from handrail import Envelope, ErrorCode, Status, ToolCall
from handrail.adapters.base import UntranslatableError
from handrail.adapters.gemini import ID_PREFIX, GeminiAdapter
from handrail.adapters.transcript import (
    AssistantTurn,
    ToolResult,
    ToolResultsTurn,
    Turn,
    UserTurn,
    pair_results,
)
from handrail.envelope import ErrorDetail
from handrail.shaping.marking import DataMarker, read_block

ADAPTER = GeminiAdapter()
MARKER = DataMarker()


def counting_tokens() -> Callable[[], str]:
    """Boundaries 00..01, 00..02, ...: two markers given one each draw the same blocks."""
    numbers = itertools.count(1)
    return lambda: f"{next(numbers):032x}"


def shown(value: object) -> dict[str, Any]:
    """The envelope a functionResponse value shows the model, from its data block."""
    assert isinstance(value, str)
    block = read_block(value)
    assert block is not None
    envelope: dict[str, Any] = json.loads(block.body)
    return envelope


def valid(model: type[BaseModel], payload: dict[str, Any]) -> None:
    parsed = model.model_validate(payload)
    assert parsed.model_dump(mode="json", by_alias=True, exclude_unset=True) == payload


def envelope(call_id: str, tool: str, *, error: bool = False, data: object = None) -> Envelope:
    if error:
        return Envelope(
            call_id=call_id,
            tool=tool,
            status=Status.ERROR,
            summary="No tool of that name is available.",
            error=ErrorDetail(code=ErrorCode.UNKNOWN_TOOL),
        )
    return Envelope(call_id=call_id, tool=tool, status=Status.OK, summary="Done.", data=data)


SEARCH = ToolCall(id="c1", name="shop.search", arguments={"query": "dune"}, provider="gemini")
STOCK = ToolCall(id="c2", name="shop.stock", arguments='{"book_id": "b1"}')

TRANSCRIPT: list[Turn] = [
    UserTurn(text="Is Dune in stock?"),
    AssistantTurn(text="Let me check.", calls=(SEARCH, STOCK)),
    pair_results(
        [SEARCH, STOCK],
        [
            envelope("c1", "shop.search", data=[{"id": "b1"}]),
            envelope("c2", "shop.stock", error=True),
        ],
        marker=MARKER,
    ),
    AssistantTurn(text="Yes."),
]


def test_a_transcript_becomes_alternating_user_and_model_contents() -> None:
    contents = ADAPTER.to_wire(TRANSCRIPT)
    assert [c["role"] for c in contents] == ["user", "model", "user", "model"]
    for content in contents:
        valid(types.Content, content)
    assert contents[1]["parts"] == [
        {"text": "Let me check."},
        {"functionCall": {"name": "shop__search", "args": {"query": "dune"}, "id": "c1"}},
        {"functionCall": {"name": "shop__stock", "args": {"book_id": "b1"}, "id": "c2"}},
    ]
    found, missing = (p["functionResponse"] for p in contents[2]["parts"])
    assert (found["id"], found["name"], set(found["response"])) == (
        "c1",
        "shop__search",
        {"output"},
    )
    assert (missing["id"], missing["name"], set(missing["response"])) == (
        "c2",
        "shop__stock",
        {"error"},
    )
    assert shown(missing["response"]["error"])["error_type"] == "UNKNOWN_TOOL"
    assert shown(found["response"]["output"])["data"] == [{"id": "b1"}]


def test_a_transcript_survives_the_round_trip() -> None:
    back = ADAPTER.from_wire(ADAPTER.to_wire(TRANSCRIPT))
    assert comparable(back) == comparable(TRANSCRIPT)


def test_sdk_contents_read_like_their_rest_json() -> None:
    contents = ADAPTER.to_wire(TRANSCRIPT)
    sdk = [types.Content.model_validate(c) for c in contents]
    assert comparable(ADAPTER.from_wire(sdk)) == comparable(ADAPTER.from_wire(contents))


# A history as Gemini's guide builds it: no ids anywhere, results matched by name.
HISTORY: list[dict[str, Any]] = [
    {"role": "user", "parts": [{"text": "Turn the lights down and play music."}]},
    {
        "role": "model",
        "parts": [
            {"functionCall": {"name": "dim_lights", "args": {"brightness": 0.2}}},
            {"functionCall": {"name": "start_music", "args": {"energetic": False}}},
            {"functionCall": {"name": "dim_lights", "args": {"brightness": 0.1}}},
        ],
    },
    {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "start_music", "response": {"result": "playing"}}},
            {"functionResponse": {"name": "dim_lights", "response": {"output": {"ok": True}}}},
            {"functionResponse": {"name": "dim_lights", "response": {"error": "too dark"}}},
        ],
    },
    {"role": "model", "parts": [{"text": "Done."}]},
]


def test_a_gemini_history_without_ids_reads_back_with_stable_ids_matched_by_name() -> None:
    turns = ADAPTER.from_wire(HISTORY)
    assert comparable(ADAPTER.from_wire(HISTORY)) == comparable(turns)
    user, model, results, done = turns
    assert user == UserTurn(text="Turn the lights down and play music.")
    assert isinstance(model, AssistantTurn)
    assert model.text is None
    ids = [c.id for c in model.calls]
    assert all(i.startswith(ID_PREFIX) for i in ids)
    assert len(set(ids)) == 3
    assert isinstance(results, ToolResultsTurn)
    music, first_dim, second_dim = results.results
    assert (music.call_id, music.is_error, music.content) == (ids[1], False, '{"result":"playing"}')
    assert (first_dim.call_id, first_dim.is_error, first_dim.content) == (
        ids[0],
        False,
        '{"ok":true}',
    )
    assert (second_dim.call_id, second_dim.is_error, second_dim.content) == (
        ids[2],
        True,
        "too dark",
    )
    assert done == AssistantTurn(text="Done.")


def test_reading_a_history_back_to_the_wire_keeps_what_gemini_needs() -> None:
    signed = {
        "role": "model",
        "parts": [
            {
                "functionCall": {"name": "dim_lights", "args": {"brightness": 0.2}},
                "thoughtSignature": "c2lnbmF0dXJl",
            },
        ],
    }
    [turn] = ADAPTER.from_wire([signed])
    [content] = ADAPTER.to_wire([turn])
    [part] = content["parts"]
    assert part["thoughtSignature"] == "c2lnbmF0dXJl"
    assert part["functionCall"]["name"] == "dim_lights"
    valid(types.Content, content)


def test_thought_parts_are_left_out_of_the_transcript() -> None:
    history = [{"role": "model", "parts": [{"text": "pondering", "thought": True}, {"text": "Hi"}]}]
    assert ADAPTER.from_wire(history) == [AssistantTurn(text="Hi")]


def test_text_split_over_parts_joins_and_runs_of_parts_keep_their_order() -> None:
    call = {"functionCall": {"name": "a", "args": {}, "id": "k"}}
    history = [
        {"role": "model", "parts": [{"text": "He"}, {"text": "llo"}, call]},
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": "a", "id": "k", "response": {"output": "x"}}},
                {"text": "and "},
                {"text": "now?"},
            ],
        },
    ]
    model, results, user = ADAPTER.from_wire(history)
    assert isinstance(model, AssistantTurn)
    assert model.text == "Hello"
    assert results == ToolResultsTurn(results=(ToolResult(call_id="k", tool="a", content="x"),))
    assert user == UserTurn(text="and now?")


@pytest.mark.parametrize(
    "history",
    [
        [{"role": "model", "parts": [{"inlineData": {"mimeType": "image/png", "data": "AA=="}}]}],
        [{"role": "user", "parts": [{"fileData": {"fileUri": "gs://x"}}]}],
        [{"role": "system", "parts": [{"text": "hi"}]}],
        [{"role": "user", "parts": [{"functionResponse": {"name": "a", "response": {}}}]}],
        [{"role": "model", "parts": [{"functionCall": {"name": "a", "args": [1]}}]}],
        ["not json"],
        [42],
    ],
    ids=["image", "file", "role", "orphan-result", "args-list", "text", "number"],
)
def test_contents_with_no_neutral_form_are_refused(history: list[object]) -> None:
    with pytest.raises(UntranslatableError):
        ADAPTER.from_wire(history)


@pytest.mark.parametrize(
    "arguments",
    ["[1, 2]", '"text"', "not json", b"[]", '{"a": 1, "a": 2}'],
    ids=["list", "string", "invalid", "bytes-list", "duplicate-key"],
)
def test_call_arguments_that_are_not_an_object_cannot_go_to_gemini(arguments: str | bytes) -> None:
    call = ToolCall(id="c", name="shop.search", arguments=arguments)
    with pytest.raises(UntranslatableError):
        ADAPTER.to_wire([AssistantTurn(calls=(call,))])


@pytest.mark.parametrize(("arguments", "args"), [(None, {}), ("", {}), (b'{"a": 1}', {"a": 1})])
def test_arguments_the_gate_reads_as_objects_go_as_objects(
    arguments: str | bytes | None,
    args: dict[str, Any],
) -> None:
    call = ToolCall(id="c", name="shop.search", arguments=arguments)
    [content] = ADAPTER.to_wire([AssistantTurn(calls=(call,))])
    assert content["parts"][0]["functionCall"]["args"] == args


def test_empty_turns_cannot_go_to_gemini() -> None:
    with pytest.raises(UntranslatableError):
        ADAPTER.to_wire([AssistantTurn()])
    with pytest.raises(UntranslatableError):
        ADAPTER.to_wire([ToolResultsTurn(results=())])


def test_rendered_results_match_the_results_turn_of_the_transcript() -> None:
    calls = [
        ToolCall(id="fc-1", name="shop.search", arguments={}, provider="openai-chat"),
        ToolCall(id="fc-2", name="shop.stock", arguments={}, provider="openai-chat"),
    ]
    envelopes = [envelope("fc-2", "shop.stock", error=True), envelope("fc-1", "shop.search")]
    rendered = GeminiAdapter(marker=DataMarker(token=counting_tokens())).render_results(
        calls, envelopes
    )
    paired = pair_results(calls, envelopes, marker=DataMarker(token=counting_tokens()))
    [*_, written] = ADAPTER.to_wire([AssistantTurn(calls=tuple(calls)), paired])
    assert rendered == [written]


# --- property: neutral -> wire -> neutral ----------------------------------------------------

word = st.from_regex(r"\A[a-z][a-z0-9]{0,6}\Z")
tool_name = st.lists(
    st.lists(word, min_size=1, max_size=2).map("_".join), min_size=1, max_size=3
).map(
    ".".join,
)
json_leaf = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=10)
json_value = st.recursive(
    json_leaf | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
arguments = st.dictionaries(st.text(max_size=8), json_value, max_size=4)


@st.composite
def transcripts(draw: st.DrawFn) -> list[Turn]:
    """User text, assistant turns with calls, and their results (envelope JSON or text)."""
    turns: list[Turn] = []
    ids = iter(
        draw(st.lists(st.text(min_size=1, max_size=12), min_size=12, max_size=12, unique=True))
    )
    for _ in range(draw(st.integers(1, 3))):
        turns.append(UserTurn(text=draw(st.text(max_size=20))))
        calls = tuple(
            ToolCall(id=next(ids), name=draw(tool_name), arguments=draw(arguments))
            for _ in range(draw(st.integers(0, 3)))
        )
        text = draw(st.none() | st.text(max_size=20)) if calls else draw(st.text(max_size=20))
        turns.append(AssistantTurn(text=text, calls=calls))
        if calls:
            results = []
            for call in calls:
                if draw(st.booleans()):
                    made = envelope(
                        call.id, call.name, error=draw(st.booleans()), data=draw(json_value)
                    )
                    results.append(ToolResult.of(made, MARKER))
                else:
                    raw = draw(st.text(max_size=20))
                    results.append(
                        ToolResult(
                            call_id=call.id,
                            tool=call.name,
                            content=raw,
                            is_error=draw(st.booleans()),
                        ),
                    )
            turns.append(ToolResultsTurn(results=tuple(results)))
    return turns


def comparable(turns: list[Turn]) -> list[object]:
    """Turns with calls reduced to what the wire carries (not provider, raw or defect)."""
    out: list[object] = []
    for turn in turns:
        if isinstance(turn, AssistantTurn):
            out.append((turn.text, [(c.id, c.name, _object(c.arguments)) for c in turn.calls]))
        else:
            out.append(turn)
    return out


def _object(arguments: object) -> object:
    if isinstance(arguments, str | bytes):
        return json.loads(arguments)
    return arguments


@given(transcripts())
def test_neutral_turns_survive_the_wire_unchanged(transcript: list[Turn]) -> None:
    contents = ADAPTER.to_wire(transcript)
    for content in contents:
        types.Content.model_validate(content)
    assert comparable(ADAPTER.from_wire(contents)) == comparable(transcript)


@given(transcripts())
def test_envelope_results_keep_their_status_in_step_with_the_error_flag(
    transcript: list[Turn],
) -> None:
    for content in ADAPTER.to_wire(transcript):
        for part in content["parts"]:
            response = part.get("functionResponse", {}).get("response")
            if response is None:
                continue
            [(key, value)] = response.items()
            if isinstance(value, str) and read_block(value) is not None:
                assert (shown(value)["status"] == "error") == (key == "error")


def test_result_text_that_is_not_compact_json_travels_as_text() -> None:
    results = ToolResultsTurn(
        results=(
            ToolResult(call_id="a", tool="t", content='{"spaced": 1}'),
            ToolResult(call_id="b", tool="t", content="[1,2]", is_error=True),
        ),
    )
    [content] = ADAPTER.to_wire([results])
    spaced, listed = (p["functionResponse"]["response"] for p in content["parts"])
    assert spaced == {"output": '{"spaced": 1}'}
    assert listed == {"error": "[1,2]"}
    calls = [
        AssistantTurn(
            calls=(
                ToolCall(id="a", name="t", arguments={}),
                ToolCall(id="b", name="t", arguments={}),
            )
        )
    ]
    assert ADAPTER.from_wire(ADAPTER.to_wire([*calls, results]))[1] == results


def test_user_text_before_results_in_one_content_becomes_its_own_turn() -> None:
    history = [
        {"role": "model", "parts": [{"functionCall": {"name": "a", "id": "k"}}]},
        {
            "role": "user",
            "parts": [
                {"text": "Here:"},
                {"functionResponse": {"name": "a", "id": "k", "response": {"output": 1}}},
            ],
        },
    ]
    _, user, results = ADAPTER.from_wire(history)
    assert user == UserTurn(text="Here:")
    assert results == ToolResultsTurn(results=(ToolResult(call_id="k", tool="a", content="1"),))


def test_an_unmarked_envelope_from_an_older_transcript_goes_as_its_object_and_reads_back() -> None:
    old = envelope("c1", "shop.search", data=[{"id": "b1"}])
    result = ToolResult(call_id="c1", tool="shop.search", content=old.to_json())
    transcript: list[Turn] = [AssistantTurn(calls=(SEARCH,)), ToolResultsTurn(results=(result,))]
    contents = ADAPTER.to_wire(transcript)
    [part] = contents[1]["parts"]
    assert part["functionResponse"]["response"] == {"output": old.to_model_dict()}
    valid(types.Content, contents[1])
    assert ADAPTER.from_wire(contents)[1] == ToolResultsTurn(results=(result,))


def test_a_marked_result_goes_as_its_block_text_and_reads_back_verbatim() -> None:
    refused = envelope("c1", "shop.search", error=True)
    result = ToolResult.of(refused, MARKER)
    transcript: list[Turn] = [AssistantTurn(calls=(SEARCH,)), ToolResultsTurn(results=(result,))]
    contents = ADAPTER.to_wire(transcript)
    [part] = contents[1]["parts"]
    assert part["functionResponse"]["response"] == {"error": result.content}
    assert shown(result.content)["error_type"] == "UNKNOWN_TOOL"
    assert ADAPTER.from_wire(contents)[1] == ToolResultsTurn(results=(result,))
