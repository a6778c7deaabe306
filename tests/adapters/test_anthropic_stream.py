"""AnthropicAdapter.stream: tool_use blocks assembled from Messages streaming events.

Events come as plain dicts, as SDK event models, and from the official SDK client
itself (raw `create(stream=True)` events and the `messages.stream()` helper, whose
derived `input_json` events repeat every fragment) over an in-memory transport.
Defective calls are driven through a real Gate: refused, never run.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from itertools import pairwise
from typing import Any

import anthropic
import httpx2
import pytest
from anthropic.types import RawMessageStreamEvent
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter

from handrail import ErrorCode, Gate, Principal, Status, ToolCall
from handrail.adapters.anthropic import AnthropicAdapter
from handrail.adapters.base import UntranslatableError
from handrail.errors import ConfigurationError
from handrail.testing import MemoryAuditSink

Event = dict[str, Any]
_EVENTS: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)

WEATHER_ARGUMENTS = '{"location": "San Francisco, CA", "unit": "fahrenheit"}'


def start() -> Event:
    return {
        "type": "message_start",
        "message": {
            "id": "msg_014p7gG3wDgGV9EUtLvnow3U",
            "type": "message",
            "role": "assistant",
            "model": "claude-opus-4-6",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 472, "output_tokens": 2},
        },
    }


def tool_start(index: int, call_id: str, name: str = "get_weather") -> Event:
    return {
        "type": "content_block_start",
        "index": index,
        "content_block": {"type": "tool_use", "id": call_id, "name": name, "input": {}},
    }


def text_start(index: int) -> Event:
    return {
        "type": "content_block_start",
        "index": index,
        "content_block": {"type": "text", "text": ""},
    }


def json_delta(index: int, fragment: str) -> Event:
    return {
        "type": "content_block_delta",
        "index": index,
        "delta": {"type": "input_json_delta", "partial_json": fragment},
    }


def text_delta(index: int, text: str) -> Event:
    return {
        "type": "content_block_delta",
        "index": index,
        "delta": {"type": "text_delta", "text": text},
    }


def stop(index: int) -> Event:
    return {"type": "content_block_stop", "index": index}


def end(stop_reason: str = "tool_use") -> list[Event]:
    return [
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": 89},
        },
        {"type": "message_stop"},
    ]


def documented_stream() -> list[Event]:
    """The tool-use stream of Anthropic's streaming documentation (text, then a call)."""
    fragments = [
        "",
        '{"location":',
        ' "San',
        " Francisc",
        "o,",
        ' CA"',
        ", ",
        '"unit": "fah',
        'renheit"}',
    ]
    return [
        start(),
        text_start(0),
        {"type": "ping"},
        text_delta(0, "Okay, let's check the weather for San Francisco, CA:"),
        stop(0),
        tool_start(1, "toolu_01T1x1fJ34qAmk2tNTrN7Up6"),
        *(json_delta(1, f) for f in fragments),
        stop(1),
        *end(),
    ]


def sdk(events: Iterable[Event]) -> list[object]:
    """The events as SDK models; like the SDK's reader, `ping` is left out."""
    return [_EVENTS.validate_python(event) for event in events if event["type"] != "ping"]


def assemble(events: Iterable[object], adapter: AnthropicAdapter | None = None) -> list[ToolCall]:
    assembler = (adapter or AnthropicAdapter(strict=False)).stream()
    for event in events:
        assembler.feed(event)
    return assembler.finish()


FORMS: list[Any] = [pytest.param(list, id="dicts"), pytest.param(sdk, id="sdk-events")]


def sse(events: list[Event]) -> bytes:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


def client_for(events: list[Event]) -> anthropic.Anthropic:
    """The official client, answering every request with `events` and no network."""
    body = sse(events)

    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    transport = httpx2.MockTransport(answer)
    return anthropic.Anthropic(api_key="test", http_client=httpx2.Client(transport=transport))


REQUEST: dict[str, Any] = {
    "model": "claude-opus-4-6",
    "max_tokens": 1024,
    "messages": [{"role": "user", "content": "What is the weather like in San Francisco?"}],
}


# --- complete streams ----------------------------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
def test_the_documented_stream_assembles_one_complete_call(form: Callable[..., Any]) -> None:
    [call] = assemble(form(documented_stream()))
    assert (call.id, call.name, call.provider, call.defect) == (
        "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
        "get_weather",
        "anthropic",
        None,
    )
    assert isinstance(call.arguments, str)
    assert json.loads(call.arguments) == json.loads(WEATHER_ARGUMENTS)


def test_the_sdk_clients_raw_events_assemble_the_same_call() -> None:
    client = client_for(documented_stream())
    [call] = assemble(client.messages.create(**REQUEST, stream=True))
    assert call.defect is None
    assert json.loads(str(call.arguments)) == json.loads(WEATHER_ARGUMENTS)


def test_the_sdk_stream_helpers_repeated_fragments_are_not_added_twice() -> None:
    client = client_for(documented_stream())
    with client.messages.stream(**REQUEST) as events:
        forwarded = list(events)
    assert "input_json" in {event.type for event in forwarded}
    [call] = assemble(forwarded)
    assert call.defect is None
    assert json.loads(str(call.arguments)) == json.loads(WEATHER_ARGUMENTS)


def _split_stream(fragments: list[str]) -> list[Event]:
    return [
        start(),
        tool_start(0, "toolu_1"),
        *(json_delta(0, f) for f in fragments),
        stop(0),
        *end(),
    ]


@pytest.mark.parametrize("form", FORMS)
def test_splitting_the_input_at_every_character_gives_the_same_call(
    form: Callable[..., Any],
) -> None:
    for cut in range(len(WEATHER_ARGUMENTS) + 1):
        fragments = [WEATHER_ARGUMENTS[:cut], WEATHER_ARGUMENTS[cut:]]
        [call] = assemble(form(_split_stream(fragments)))
        assert call.arguments == WEATHER_ARGUMENTS
        assert call.defect is None


@given(st.lists(st.integers(0, len(WEATHER_ARGUMENTS)), max_size=8))
def test_any_split_of_the_input_gives_the_same_call(cuts: list[int]) -> None:
    bounds = [0, *sorted(cuts), len(WEATHER_ARGUMENTS)]
    fragments = [WEATHER_ARGUMENTS[a:b] for a, b in pairwise(bounds)]
    [call] = assemble(_split_stream(fragments))
    assert call.arguments == WEATHER_ARGUMENTS
    assert call.defect is None


@st.composite
def interleavings(draw: st.DrawFn) -> tuple[list[Event], dict[str, str]]:
    """Text and tool_use blocks whose deltas interleave, each block's in its own order."""
    kinds = draw(st.lists(st.sampled_from(["text", "tool"]), min_size=1, max_size=5))
    expected: dict[str, str] = {}
    queues: list[list[Event]] = []
    events: list[Event] = [start()]
    for index, kind in enumerate(kinds):
        if kind == "text":
            events.append(text_start(index))
            queues.append([text_delta(index, "a"), text_delta(index, "b")])
            continue
        arguments = json.dumps({"n": index, "q": draw(st.text(max_size=6))})
        events.append(tool_start(index, f"toolu_{index}", f"shop__t{index}"))
        cuts = sorted(draw(st.lists(st.integers(0, len(arguments)), max_size=3)))
        bounds = [0, *cuts, len(arguments)]
        queues.append([json_delta(index, arguments[a:b]) for a, b in pairwise(bounds)])
        expected[f"toolu_{index}"] = arguments
    while any(queues):
        queue = draw(st.sampled_from([q for q in queues if q]))
        events.append(queue.pop(0))
    events.extend(stop(index) for index in range(len(kinds)))
    return [*events, *end()], expected


@given(interleavings())
def test_interleaved_blocks_are_assembled_by_index(
    case: tuple[list[Event], dict[str, str]],
) -> None:
    events, expected = case
    for form in (list, sdk):
        calls = assemble(form(events))
        assert [c.id for c in calls] == list(expected)
        assert {c.id: c.arguments for c in calls} == expected
        assert all(c.defect is None for c in calls)
        assert all(c.name == f"shop.t{c.id.removeprefix('toolu_')}" for c in calls)


@pytest.mark.parametrize("fragments", [[], [""], ["", ""], ["  "]])
def test_an_empty_input_stream_means_an_empty_object(fragments: list[str]) -> None:
    [call] = assemble(_split_stream(fragments))
    assert call.arguments == {}
    assert call.defect is None


def test_unknown_and_derived_events_are_skipped() -> None:
    events = _split_stream(['{"a": 1}'])
    events[2:2] = [
        {"type": "content_block_start", "index": -1, "content_block": {"type": "tool_use"}},
        {"type": "content_block_delta", "index": "0", "delta": {"type": "input_json_delta"}},
        {"type": "ping"},
        {"type": "a_future_event", "index": 0},
        {"type": "input_json", "partial_json": "{"},
    ]
    [call] = assemble(events)
    assert call.arguments == '{"a": 1}'
    assert call.defect is None


def test_a_server_tools_input_is_not_a_call() -> None:
    server = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}
    events = [start(), {"type": "content_block_start", "index": 0, "content_block": server}]
    events += [json_delta(0, '{"query": "x"}'), stop(0), *end()]
    assert assemble(events) == []
    assert assemble(sdk(events)) == []


@pytest.mark.parametrize("event", ["event: ping", b"{}", 7, {"index": 0}])
def test_something_that_is_not_a_stream_event_is_a_type_error(event: object) -> None:
    with pytest.raises(TypeError):
        AnthropicAdapter(strict=False).stream().feed(event)


@pytest.mark.parametrize(
    "event",
    [
        {"type": "response.output_item.added", "output_index": 0, "item": {}},
        {"type": "response.function_call_arguments.delta", "delta": "{"},
        {"type": "tool_calls.function.arguments.delta", "index": 0},
        {"type": "Message_Start"},
        {"type": ""},
    ],
)
def test_another_formats_stream_event_is_untranslatable_never_an_empty_result(
    event: object,
) -> None:
    stream = AnthropicAdapter(strict=False).stream()
    with pytest.raises(UntranslatableError):
        stream.feed(event)


# --- cut-off streams -----------------------------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
def test_a_block_that_never_closed_is_defective(form: Callable[..., Any]) -> None:
    events = [start(), tool_start(0, "toolu_1"), json_delta(0, '{"location": "San')]
    [call] = assemble(form(events))
    assert call.defect is not None
    assert call.arguments == '{"location": "San'


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("stop_reason", ["max_tokens", "model_context_window_exceeded"])
def test_a_truncating_stop_reason_makes_the_last_block_defective_even_if_closed(
    form: Callable[..., Any],
    stop_reason: str,
) -> None:
    events = [
        start(),
        tool_start(0, "toolu_1"),
        json_delta(0, '{"a": 1}'),
        stop(0),
        tool_start(1, "toolu_2"),
        json_delta(1, '{"a": 2}'),
        stop(1),
        *end(stop_reason),
    ]
    calls = assemble(form(events))
    assert [c.defect is None for c in calls] == [True, False]


def test_a_call_before_the_text_that_max_tokens_cut_is_complete() -> None:
    events = [start(), tool_start(0, "toolu_1"), json_delta(0, "{}"), stop(0), text_start(1)]
    events += [text_delta(1, "and then"), stop(1), *end("max_tokens")]
    [call] = assemble(events)
    assert call.defect is None


def test_a_refusal_withdraws_every_call_of_the_stream() -> None:
    events = [start(), tool_start(0, "toolu_1"), json_delta(0, "{}"), stop(0), *end("refusal")]
    [call] = assemble(events)
    assert call.defect is not None


def test_an_error_event_leaves_the_open_block_defective() -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    events = [
        start(),
        tool_start(0, "toolu_1"),
        json_delta(0, "{}"),
        stop(0),
        tool_start(1, "toolu_2"),
        json_delta(1, '{"a"'),
        error,
    ]
    calls = assemble(events)
    assert [c.defect is None for c in calls] == [True, False]


@pytest.mark.parametrize(
    "events",
    [
        pytest.param(
            [start(), tool_start(0, "t1"), json_delta(0, '{"a": }'), stop(0), *end()], id="bad-json"
        ),
        pytest.param(
            [start(), tool_start(0, "t1"), stop(0), json_delta(0, "{}"), *end()], id="after-stop"
        ),
        pytest.param(
            [
                start(),
                tool_start(0, "t1"),
                tool_start(0, "t2"),
                json_delta(0, "{}"),
                stop(0),
                *end(),
            ],
            id="started-twice",
        ),
        pytest.param(
            [
                start(),
                tool_start(0, "t1"),
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": 5},
                },
                stop(0),
            ],
            id="fragment-not-text",
        ),
        pytest.param(
            [
                start(),
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "tool_use", "name": "a", "input": {}},
                },
                stop(0),
            ],
            id="no-id",
        ),
    ],
)
def test_a_malformed_block_is_a_defective_call(events: list[Event]) -> None:
    [call] = assemble(events)
    assert call.defect is not None


@pytest.mark.anyio
async def test_a_deeply_nested_streamed_input_is_left_to_the_gates_depth_limit(
    gate: Gate,
    principal: Principal,
) -> None:
    nested = '{"query": ' + "[" * 100_000 + "]" * 100_000 + "}"
    events = [start(), tool_start(0, "toolu_1", "shop__search"), json_delta(0, nested), stop(0)]
    events.append({"type": "message_delta", "delta": {"stop_reason": None}, "usage": {}})
    [call] = assemble([*events, *end()])
    assert call.defect is None
    envelope = await gate.handle(call, principal)
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS


def test_a_stream_bound_below_one_character_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError):
        AnthropicAdapter(strict=False, max_streamed_input=0)


def test_a_streamed_input_over_the_bound_is_defective_and_not_kept() -> None:
    adapter = AnthropicAdapter(strict=False, max_streamed_input=10)
    [call] = assemble(_split_stream(['{"a": "', "x" * 20, '"}']), adapter)
    assert call.defect is not None
    assert call.arguments == {}


# --- through the gate ----------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_truncated_call_is_refused_by_the_gate_and_never_runs_while_the_complete_one_does(
    gate: Gate,
    principal: Principal,
    audit: MemoryAuditSink,
) -> None:
    events = [
        start(),
        tool_start(0, "toolu_ok", "shop__stock"),
        json_delta(0, '{"book_id": "b1"}'),
        stop(0),
        tool_start(1, "toolu_cut", "shop__search"),
        json_delta(1, '{"query": "Du'),
        *end("max_tokens"),
    ]
    calls = assemble(client_for(events).messages.create(**REQUEST, stream=True))
    assert [c.name for c in calls] == ["shop.stock", "shop.search"]
    complete, cut = await gate.handle_batch(calls, principal)
    assert complete.status is Status.OK
    assert complete.data == 3
    assert cut.error_type is ErrorCode.INVALID_ARGUMENTS
    assert cut.retryable
    assert cut.call_id == "toolu_cut"
    trail = audit.for_call("toolu_cut")
    assert trail[-1].decision == "refused"
    assert trail[-1].stage == "syntax"
    assert all(event.stage != "execute" for event in trail)


@pytest.mark.anyio
@pytest.mark.parametrize(
    "fragments", [['{"query": "Dune"'], ['{"query": ', '"Dune"}', "}"], ["[1]"]]
)
async def test_every_defective_or_non_object_stream_is_invalid_arguments_at_the_gate(
    gate: Gate,
    principal: Principal,
    audit: MemoryAuditSink,
    fragments: list[str],
) -> None:
    events = [
        start(),
        tool_start(0, "toolu_1", "shop__search"),
        *(json_delta(0, f) for f in fragments),
        stop(0),
        *end(),
    ]
    [call] = assemble(sdk(events))
    envelope = await gate.handle(call, principal)
    assert envelope.error_type is ErrorCode.INVALID_ARGUMENTS
    assert all(event.stage != "execute" for event in audit.for_call("toolu_1"))
