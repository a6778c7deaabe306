"""Streaming model clients (Chat Completions, Responses, Anthropic) over real HTTP.

Each SDK client talks to the scripted server on 127.0.0.1 (`_scripted_server`), which
answers stream requests with `text/event-stream` bodies shaped as each provider sends
them, can stall or cut a stream off, and records when the client hung up. The same
answer is scripted whole and streamed, so `stream` is checked against `complete`.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import pytest
from _scripted_server import Answer, ScriptedServer, scripted_server
from hypothesis import given
from hypothesis import strategies as st

from handrail import Principal, Registry, ToolCall
from handrail.adapters.anthropic import AnthropicAdapter
from handrail.adapters.openai_chat import OpenAIChatAdapter
from handrail.adapters.openai_responses import OpenAIResponsesAdapter
from handrail.adapters.transcript import UserTurn
from handrail.errors import ErrorCode
from handrail.loop.models import (
    AnthropicClient,
    ModelError,
    ModelReply,
    ModelRequest,
    OpenAICompatibleClient,
    OpenAIResponsesClient,
    StreamingModelClient,
    TextDelta,
    Usage,
    _anthropic,
    _openai,
    _openai_responses,
)

pytestmark = pytest.mark.anyio

CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"
MESSAGES = "/v1/messages"
CALL_ID = "call_Qm3-abc|1"
ARGUMENT_PIECES = ('{"book', '_id": ', '"b1"}')
TEXT_PIECES = ("The order ", "shipped ", "on Mon", "day.")
DONE_ITEM = "response.output_item.done"
HANG_UP_BOUND = 10.0
"""The longest a test waits for the server to see the client hang up, in seconds."""

Call = tuple[str, str, Sequence[str]]
"""A call as a test scripts it: id, wire name, argument pieces in stream order."""


# --- Chat Completions shapes -----------------------------------------------------------------


def chat_chunk(
    delta: dict[str, Any] | None = None, *, finish_reason: str | None = None
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-s",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "qwen2.5-7b-instruct",
        "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish_reason}],
    }


def chat_body(text: str | None, calls: Sequence[Call], finish: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": "".join(p)}}
            for i, n, p in calls
        ]
    return {
        "id": "chatcmpl-w",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "qwen2.5-7b-instruct",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 82, "completion_tokens": 17, "total_tokens": 99},
    }


def chat_events(pieces: Sequence[str], calls: Sequence[Call], finish: str | None) -> list[object]:
    events: list[object] = [chat_chunk({"role": "assistant", "content": ""})]
    events += [chat_chunk({"content": piece}) for piece in pieces]
    for index, (call_id, name, arguments) in enumerate(calls):
        opening = {"index": index, "id": call_id, "type": "function"}
        events.append(
            chat_chunk({"tool_calls": [opening | {"function": {"name": name, "arguments": ""}}]})
        )
        events += [
            chat_chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            for piece in arguments
        ]
    if finish is not None:
        events.append(chat_chunk(finish_reason=finish))
        usage = {"prompt_tokens": 82, "completion_tokens": 17, "total_tokens": 99}
        events.append(chat_chunk() | {"choices": [], "usage": usage})
        events.append("[DONE]")
    return events


# --- Responses shapes ------------------------------------------------------------------------


def message_item(text: str) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def call_item(call: Call, index: int, *, status: str = "completed") -> dict[str, Any]:
    call_id, name, pieces = call
    return {
        "id": f"fc_{index}",
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": "".join(pieces),
        "status": status,
    }


def response_body(
    text: str | None, calls: Sequence[Call], finish: str, **extra: object
) -> dict[str, Any]:
    output = [message_item(text)] if text is not None else []
    output += [call_item(call, n) for n, call in enumerate(calls, start=len(output))]
    body: dict[str, Any] = {
        "id": "resp_1",
        "object": "response",
        "created_at": 1_700_000_000,
        "model": "gpt-x-2025",
        "status": "completed" if finish == "completed" else "incomplete",
        "incomplete_details": None if finish == "completed" else {"reason": finish},
        "error": None,
        "output": output,
        "usage": {"input_tokens": 82, "output_tokens": 17, "total_tokens": 99},
    }
    return body | extra


def responses_events(
    pieces: Sequence[str], calls: Sequence[Call], finish: str | None
) -> list[object]:
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": response_body(None, [], "completed")},
    ]
    text = "".join(pieces) if pieces else None
    if pieces:
        added = message_item("") | {"status": "in_progress", "content": []}
        events.append({"type": "response.output_item.added", "output_index": 0, "item": added})
        events += [
            {
                "type": "response.output_text.delta",
                "item_id": "msg_1",
                "output_index": 0,
                "content_index": 0,
                "delta": piece,
            }
            for piece in pieces
        ]
        done = message_item("".join(pieces))
        events.append({"type": "response.output_item.done", "output_index": 0, "item": done})
    for index, call in enumerate(calls, start=1 if pieces else 0):
        item = call_item(call, index)
        opened = item | {"arguments": "", "status": "in_progress"}
        events.append({"type": "response.output_item.added", "output_index": index, "item": opened})
        events += [
            {
                "type": "response.function_call_arguments.delta",
                "item_id": item["id"],
                "output_index": index,
                "delta": piece,
            }
            for piece in call[2]
        ]
        if finish is not None:
            events.append(
                {"type": "response.output_item.done", "output_index": index, "item": item}
            )
    if finish is not None:
        final = response_body(text, calls, finish)
        kind = "response.completed" if finish == "completed" else "response.incomplete"
        events.append({"type": kind, "response": final})
    return [event | {"sequence_number": n} for n, event in enumerate(events)]


# --- Anthropic shapes ------------------------------------------------------------------------

ANTHROPIC_USAGE = {
    "input_tokens": 120,
    "output_tokens": 33,
    "cache_creation_input_tokens": 5,
    "cache_read_input_tokens": 7,
}


def anthropic_body(text: str | None, calls: Sequence[Call], finish: str) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text is not None else []
    blocks += [
        {"type": "tool_use", "id": i, "name": n, "input": json.loads("".join(p))}
        for i, n, p in calls
    ]
    return {
        "id": "msg_local",
        "type": "message",
        "role": "assistant",
        "model": "claude-x-20250101",
        "content": blocks,
        "stop_reason": finish,
        "stop_sequence": None,
        "usage": ANTHROPIC_USAGE,
    }


def anthropic_events(
    pieces: Sequence[str], calls: Sequence[Call], finish: str | None
) -> list[object]:
    started = anthropic_body(None, [], "end_turn") | {"stop_reason": None, "content": []}
    started["usage"] = ANTHROPIC_USAGE | {"output_tokens": 1}
    events: list[object] = [{"type": "message_start", "message": started}, {"type": "ping"}]
    index = 0
    if pieces:
        text_block = {"type": "text", "text": ""}
        events.append({"type": "content_block_start", "index": 0, "content_block": text_block})
        events += [
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}}
            for p in pieces
        ]
        events.append({"type": "content_block_stop", "index": 0})
        index = 1
    for call_id, name, arguments in calls:
        block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
        events.append({"type": "content_block_start", "index": index, "content_block": block})
        events += [
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "input_json_delta", "partial_json": piece},
            }
            for piece in arguments
        ]
        if finish is not None and finish != "max_tokens":
            events.append({"type": "content_block_stop", "index": index})
        index += 1
    if finish is not None:
        delta = {"stop_reason": finish, "stop_sequence": None}
        events.append({"type": "message_delta", "delta": delta, "usage": {"output_tokens": 33}})
        events.append({"type": "message_stop"})
    return events


# --- the three providers ---------------------------------------------------------------------


@dataclass(frozen=True)
class Provider:
    """One client under test, with how its provider shapes a whole and a streamed answer."""

    name: str
    path: str
    make: Callable[[str], StreamingModelClient]
    body: Callable[[str | None, Sequence[Call], str], dict[str, Any]]
    events: Callable[[Sequence[str], Sequence[Call], str | None], list[object]]
    stop: str
    """The finish reason of a complete text answer."""
    calls_stop: str
    """The finish reason of a complete answer that calls tools."""
    cut_stop: str
    """The finish reason of an answer cut off by its token limit."""
    usage: Usage


PROVIDERS = [
    Provider(
        name="chat",
        path=CHAT,
        make=lambda url: OpenAICompatibleClient(
            base_url=f"{url}/v1", api_key="sk-local", model="qwen2.5-7b"
        ),
        body=chat_body,
        events=chat_events,
        stop="stop",
        calls_stop="tool_calls",
        cut_stop="length",
        usage=Usage(input_tokens=82, output_tokens=17),
    ),
    Provider(
        name="responses",
        path=RESPONSES,
        make=lambda url: OpenAIResponsesClient(
            base_url=f"{url}/v1", api_key="sk-local", model="gpt-x"
        ),
        body=response_body,
        events=responses_events,
        stop="completed",
        calls_stop="completed",
        cut_stop="max_output_tokens",
        usage=Usage(input_tokens=82, output_tokens=17),
    ),
    Provider(
        name="anthropic",
        path=MESSAGES,
        make=lambda url: AnthropicClient(api_key="sk-ant-local", model="claude-x", base_url=url),
        body=anthropic_body,
        events=anthropic_events,
        stop="end_turn",
        calls_stop="tool_use",
        cut_stop="max_tokens",
        usage=Usage(input_tokens=132, output_tokens=33),
    ),
]


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with scripted_server() as running:
        yield running


@pytest.fixture(params=PROVIDERS, ids=lambda p: p.name)
def provider(request: pytest.FixtureRequest) -> Provider:
    chosen: Provider = request.param
    return chosen


@pytest.fixture
async def client(server: ScriptedServer, provider: Provider) -> AsyncIterator[StreamingModelClient]:
    made = provider.make(server.base_url)
    yield made
    await made.aclose()  # type: ignore[attr-defined]


def ask(text: str = "Where is my order?") -> ModelRequest:
    return ModelRequest(transcript=[UserTurn(text=text)])


async def collect(
    client: StreamingModelClient, request: ModelRequest, *, timeout: float = 5
) -> tuple[list[str], ModelReply]:
    """The texts of the deltas, and the reply, checking the reply comes last and once."""
    items = [item async for item in client.stream(request, timeout=timeout)]
    *deltas, reply = items
    assert isinstance(reply, ModelReply)
    assert all(isinstance(d, TextDelta) for d in deltas)
    return [d.text for d in deltas if isinstance(d, TextDelta)], reply


def without_raw(reply: ModelReply) -> ModelReply:
    """The reply with its calls' `raw` dropped: stream fragments and whole items differ."""
    return dataclasses.replace(
        reply, calls=tuple(dataclasses.replace(c, raw=None) for c in reply.calls)
    )


# --- tests -----------------------------------------------------------------------------------


async def test_every_real_client_is_a_streaming_client(client: StreamingModelClient) -> None:
    assert isinstance(client, StreamingModelClient)


async def test_text_deltas_join_to_the_reply_text_with_usage_and_finish_reason(
    server: ScriptedServer, client: StreamingModelClient, provider: Provider
) -> None:
    server.script(provider.path, Answer(events=provider.events(TEXT_PIECES, [], provider.stop)))
    texts, reply = await collect(client, ask())
    assert texts == list(TEXT_PIECES)
    assert reply.text == "The order shipped on Monday."
    assert reply.calls == ()
    assert reply.usage == provider.usage
    assert reply.finish_reason == provider.stop
    [body] = server.bodies(provider.path)
    assert body["stream"] is True


async def test_a_streamed_call_split_across_chunks_equals_the_call_complete_reads(
    server: ScriptedServer, client: StreamingModelClient, provider: Provider
) -> None:
    calls: list[Call] = [(CALL_ID, "shop__stock", ARGUMENT_PIECES)]
    server.script(
        provider.path,
        Answer(body=provider.body("Let me check.", calls, provider.calls_stop)),
        Answer(events=provider.events(("Let me ", "check."), calls, provider.calls_stop)),
    )
    whole = await client.complete(ask(), timeout=5)
    texts, streamed = await collect(client, ask())
    assert texts == ["Let me ", "check."]
    assert without_raw(streamed) == without_raw(whole)
    [call] = streamed.calls
    assert (call.id, call.name, call.defect) == (CALL_ID, "shop.stock", None)
    assert call.arguments in ({"book_id": "b1"}, '{"book_id": "b1"}')
    assert streamed.text == "Let me check."


async def test_stream_and_complete_give_equal_replies_for_a_text_answer(
    server: ScriptedServer, client: StreamingModelClient, provider: Provider
) -> None:
    server.script(
        provider.path,
        Answer(body=provider.body("".join(TEXT_PIECES), [], provider.stop)),
        Answer(events=provider.events(TEXT_PIECES, [], provider.stop)),
    )
    whole = await client.complete(ask(), timeout=5)
    _, streamed = await collect(client, ask())
    assert streamed == whole


async def test_two_streamed_calls_keep_their_ids_and_order(
    server: ScriptedServer, client: StreamingModelClient, provider: Provider
) -> None:
    calls: list[Call] = [
        ("call_1.x", "shop__stock", ('{"book_id":', ' "b1"}')),
        ("call_2.y", "shop__stock", ('{"book_id": "b2"}',)),
    ]
    server.script(provider.path, Answer(events=provider.events((), calls, provider.calls_stop)))
    texts, reply = await collect(client, ask())
    assert texts == []
    assert reply.text is None
    assert [(c.id, c.defect) for c in reply.calls] == [("call_1.x", None), ("call_2.y", None)]


@pytest.mark.parametrize(
    ("status", "code"), [(429, ErrorCode.RATE_LIMITED), (500, ErrorCode.TRANSIENT)]
)
async def test_an_http_error_before_the_stream_is_a_model_error(
    server: ScriptedServer,
    client: StreamingModelClient,
    provider: Provider,
    status: int,
    code: ErrorCode,
) -> None:
    body = {"type": "error", "error": {"type": "x", "message": "no"}}
    server.script(provider.path, Answer(status=status, body=body, headers={"retry-after": "7"}))
    with pytest.raises(ModelError) as caught:
        await collect(client, ask())
    assert (caught.value.code, caught.value.status) == (code, status)
    assert caught.value.retry_after == 7.0
    assert len(server.received) == 1


@pytest.mark.parametrize("cut", [False, True], ids=["body-ended", "connection-dropped"])
async def test_a_stream_cut_off_mid_call_is_a_transient_error_never_an_empty_reply(
    server: ScriptedServer,
    client: StreamingModelClient,
    provider: Provider,
    cut: bool,
) -> None:
    events = provider.events(("Let me ",), [(CALL_ID, "shop__stock", ARGUMENT_PIECES[:2])], None)
    server.script(provider.path, Answer(events=events, cut=cut))
    with pytest.raises(ModelError) as caught:
        await collect(client, ask())
    assert caught.value.code is ErrorCode.TRANSIENT
    assert caught.value.retryable


async def test_a_call_cut_off_by_the_token_limit_comes_back_defective(
    server: ScriptedServer, client: StreamingModelClient, provider: Provider
) -> None:
    calls: list[Call] = [(CALL_ID, "shop__stock", ARGUMENT_PIECES[:2])]
    events = provider.events((), calls, provider.cut_stop)
    if provider.name == "responses":  # the item the response did not finish
        events = [e for e in events if not (isinstance(e, dict) and e["type"] == DONE_ITEM)]
        final = events[-1]
        assert isinstance(final, dict)
        final["response"]["output"] = [call_item(calls[0], 0, status="incomplete")]
    server.script(provider.path, Answer(events=events))
    _, reply = await collect(client, ask())
    [call] = reply.calls
    assert call.id == CALL_ID
    assert call.defect is not None
    assert reply.finish_reason == provider.cut_stop


async def test_a_stream_that_stalls_is_a_timeout(
    server: ScriptedServer, client: StreamingModelClient, provider: Provider
) -> None:
    events = provider.events(TEXT_PIECES, [], provider.stop)
    server.script(provider.path, Answer(events=events, pause_after=3))
    with pytest.raises(ModelError) as caught:
        await collect(client, ask(), timeout=0.5)
    assert caught.value.code is ErrorCode.TIMEOUT
    assert caught.value.retryable


async def wait_for_hang_up(server: ScriptedServer) -> bool:
    return await anyio.to_thread.run_sync(server.disconnected.wait, HANG_UP_BOUND)


async def test_closing_the_stream_after_the_first_delta_hangs_up_the_connection(
    server: ScriptedServer, client: StreamingModelClient, provider: Provider
) -> None:
    events = provider.events(TEXT_PIECES, [], provider.stop)
    first = next(n for n, e in enumerate(events) if "The order " in json.dumps(e))
    server.script(provider.path, Answer(events=events, pause_after=first + 1))
    stream = client.stream(ask(), timeout=30)
    assert await anext(stream) == TextDelta(text="The order ")
    await stream.aclose()  # type: ignore[attr-defined]
    assert await wait_for_hang_up(server)


async def test_cancelling_the_reader_hangs_up_the_connection(
    server: ScriptedServer, client: StreamingModelClient, provider: Provider
) -> None:
    events = provider.events(TEXT_PIECES, [], provider.stop)
    first = next(n for n, e in enumerate(events) if "The order " in json.dumps(e))
    server.script(provider.path, Answer(events=events, pause_after=first + 1))
    got_first = anyio.Event()
    seen: list[object] = []

    async def read() -> None:
        async for item in client.stream(ask(), timeout=30):
            seen.append(item)
            got_first.set()

    async with anyio.create_task_group() as group:
        group.start_soon(read)
        with anyio.fail_after(HANG_UP_BOUND):
            await got_first.wait()
        group.cancel_scope.cancel()
    assert seen == [TextDelta(text="The order ")]
    assert await wait_for_hang_up(server)


ERROR_EVENTS: dict[str, tuple[object, ErrorCode]] = {
    "chat": ({"error": {"message": "busy", "type": "server_error"}}, ErrorCode.TRANSIENT),
    "responses": (
        {"type": "error", "code": "rate_limit_exceeded", "message": "slow", "sequence_number": 9},
        ErrorCode.RATE_LIMITED,
    ),
    "anthropic": (
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        ErrorCode.TRANSIENT,
    ),
}


async def test_an_error_event_inside_the_stream_is_a_model_error_by_its_type(
    server: ScriptedServer, client: StreamingModelClient, provider: Provider
) -> None:
    event, code = ERROR_EVENTS[provider.name]
    events = [*provider.events(TEXT_PIECES[:1], [], None), event]
    server.script(provider.path, Answer(events=events))
    with pytest.raises(ModelError) as caught:
        await collect(client, ask())
    assert caught.value.code is code
    assert caught.value.status is None


async def test_a_streamed_response_that_failed_is_a_model_error_by_its_code(
    server: ScriptedServer,
) -> None:
    client = OpenAIResponsesClient(base_url=f"{server.base_url}/v1", api_key="k", model="m")
    *events, _ = responses_events(TEXT_PIECES, [], "completed")
    failed = response_body(None, [], "completed", status="failed")
    failed["error"] = {"code": "server_error", "message": "try again"}
    server.script(
        RESPONSES, Answer(events=[*events, {"type": "response.failed", "response": failed}])
    )
    try:
        with pytest.raises(ModelError) as caught:
            await collect(client, ask())
    finally:
        await client.aclose()
    assert caught.value.code is ErrorCode.TRANSIENT


async def test_a_stream_request_carries_the_same_options_as_a_whole_one(
    server: ScriptedServer,
    client: StreamingModelClient,
    provider: Provider,
    registry: Registry,
    principal: Principal,
) -> None:
    server.script(
        provider.path,
        Answer(body=provider.body("ok", [], provider.stop)),
        Answer(events=provider.events(("ok",), [], provider.stop)),
    )
    request = ModelRequest(
        transcript=[UserTurn(text="hi")],
        tools=registry.exposed(principal),
        system="You sell books.",
        max_output_tokens=64,
    )
    await client.complete(request, timeout=5)
    await collect(client, request)
    whole, streamed = server.bodies(provider.path)
    assert streamed.pop("stream") is True
    streamed.pop("stream_options", None)
    assert streamed == whole


async def test_chat_streams_ask_for_usage_unless_told_not_to(server: ScriptedServer) -> None:
    quiet = OpenAICompatibleClient(
        base_url=f"{server.base_url}/v1", api_key="k", model="m", stream_usage=False
    )
    loud = OpenAICompatibleClient(base_url=f"{server.base_url}/v1", api_key="k", model="m")
    events = chat_events(("hi",), [], "stop")
    server.script(CHAT, Answer(events=[*events[:-2], "[DONE]"]), Answer(events=events))
    try:
        _, reply = await collect(quiet, ask())
        await collect(loud, ask())
    finally:
        await quiet.aclose()
        await loud.aclose()
    first, second = server.bodies(CHAT)
    assert "stream_options" not in first
    assert reply.usage == Usage()
    assert second["stream_options"] == {"include_usage": True}


# --- reassembly, property-tested on the readers ---------------------------------------------


def splits(text: str, cuts: list[int]) -> list[str]:
    points = sorted({0, len(text), *(c % (len(text) + 1) for c in cuts)})
    return [text[a:b] for a, b in itertools.pairwise(points)]


@given(st.text(min_size=1), st.lists(st.integers(min_value=0), max_size=8))
def test_any_split_of_a_text_into_deltas_reassembles_exactly(text: str, cuts: list[int]) -> None:
    pieces = splits(text, cuts)
    assert "".join(pieces) == text
    chat = _openai._ChunkReader(OpenAIChatAdapter(strict=True).stream())
    fed = [chat.feed("openai-chat", e) for e in chat_events(pieces, [], "stop")[:-1]]
    assert "".join(t for t in fed if t) == text
    assert chat.reply("openai-chat", "m").text == text
    responses = _openai_responses._EventReader(OpenAIResponsesAdapter(strict=True).stream())
    fed = [responses.feed("openai-responses", e) for e in responses_events(pieces, [], "completed")]
    assert "".join(t for t in fed if t) == text
    assert responses.text == text
    claude = _anthropic._EventReader(AnthropicAdapter(strict=False).stream())
    fed = [claude.feed("anthropic", e) for e in anthropic_events(pieces, [], "end_turn")]
    assert "".join(t for t in fed if t) == text
    assert claude.reply("anthropic", "m").text == text


def test_streamed_anthropic_input_that_is_not_one_clean_object_stays_text() -> None:
    for text in ('{"a": 1, "a": 2}', '{"a": NaN}', "[1]", '{"a": 1'):
        call = ToolCall(id="t", name="x", arguments=text, provider="anthropic")
        assert _anthropic._decoded(call) is call
    sound = ToolCall(id="t", name="x", arguments='{"a": [1]}', provider="anthropic")
    assert _anthropic._decoded(sound).arguments == {"a": [1]}
