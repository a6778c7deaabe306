"""OpenAI stream helpers into `adapter.stream()`: the events a developer actually holds.

The official SDK's `client.chat.completions.stream()` and `client.responses.stream()`
run against a scripted event-stream server on 127.0.0.1 (`_sse_server`); every event
they yield is fed to the assembler, as an application would. Chat's helper wraps each
raw chunk in a `ChunkEvent` and derives delta and done events from it; the assembler
reads the chunk and counts nothing twice. Responses' helper yields the raw event types.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

import openai
import pytest
from _sse_server import SSEServer, chat_sse, responses_sse, sse_server
from openai.lib.streaming.chat import ChunkEvent, FunctionToolCallArgumentsDeltaEvent

from handrail import Gate, Principal, Registry, Status, ToolCall
from handrail.adapters.base import Definitions, StreamAssembler, UntranslatableError
from handrail.adapters.openai_chat import OpenAIChatAdapter
from handrail.adapters.openai_responses import OpenAIResponsesAdapter

pytestmark = pytest.mark.anyio

CHAT = OpenAIChatAdapter(strict=True)
RESPONSES = OpenAIResponsesAdapter(strict=True)
MESSAGES: list[Any] = [{"role": "user", "content": "Find Dune and check b1."}]

CALLS = [
    ("call_a", "shop__search", '{"query": "dune", "limit": null, "filters": null}'),
    ("call_b", "shop__stock", '{"book_id": "b1"}'),
    ("call_c", "shop__search", '{"query": "emma", "limit": 2, "filters": null}'),
]
"""Three parallel calls as a strict-mode model sends them; the first two nulls are undone."""


@pytest.fixture
def server() -> Iterable[SSEServer]:
    with sse_server() as running:
        yield running


@pytest.fixture
async def client(server: SSEServer) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        api_key="test",
        base_url=server.base_url,
        max_retries=0,
        timeout=10.0,
    ) as made:
        yield made


@pytest.fixture
def chat_definitions(registry: Registry) -> Definitions:
    return CHAT.tool_definitions(
        [registry.get("shop.search").spec, registry.get("shop.stock").spec]
    )


@pytest.fixture
def responses_definitions(registry: Registry) -> Definitions:
    specs = [registry.get("shop.search").spec, registry.get("shop.stock").spec]
    return RESPONSES.tool_definitions(specs)


def assembled(assembler: StreamAssembler, events: Iterable[object]) -> list[ToolCall]:
    for event in events:
        assembler.feed(event)
    return assembler.finish()


# --- Chat Completions: client.chat.completions.stream() --------------------------------------


def chunk(*fragments: dict[str, Any], content: str | None = None, finish: str | None = None) -> Any:
    delta: dict[str, Any] = {"role": "assistant", "content": content}
    if fragments:
        delta["tool_calls"] = list(fragments)
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1694268190,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }


def opening(index: int, call_id: str, name: str) -> dict[str, Any]:
    return {
        "index": index,
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": ""},
    }


def piece(index: int, text: str) -> dict[str, Any]:
    return {"index": index, "function": {"arguments": text}}


def parallel_chunks(*, finish: str = "tool_calls") -> list[Any]:
    """Text, then three calls one after another, as the API streams parallel calls."""
    chunks = [chunk(content="Let me "), chunk(content="look.")]
    for index, (call_id, name, text) in enumerate(CALLS):
        half = len(text) // 2
        chunks.append(chunk(opening(index, call_id, name)))
        chunks += [chunk(piece(index, text[:half])), chunk(piece(index, text[half:]))]
    chunks.append(chunk(finish=finish))
    return chunks


async def chat_helper_events(
    client: openai.AsyncOpenAI,
    server: SSEServer,
    chunks: Sequence[Any],
    definitions: Definitions | None,
) -> list[object]:
    server.script(chat_sse(chunks))
    tools: Any = definitions.payload if definitions is not None else openai.omit
    async with client.chat.completions.stream(
        model="gpt-4o-mini",
        messages=MESSAGES,
        tools=tools,
    ) as stream:
        return [event async for event in stream]


async def test_the_chat_stream_helpers_events_assemble_every_parallel_call_once(
    client: openai.AsyncOpenAI,
    server: SSEServer,
    chat_definitions: Definitions,
) -> None:
    events = await chat_helper_events(client, server, parallel_chunks(), chat_definitions)
    calls = assembled(CHAT.stream(definitions=chat_definitions), events)
    assert [(c.id, c.name, c.arguments, c.defect) for c in calls] == [
        ("call_a", "shop.search", {"query": "dune", "filters": None}, None),
        ("call_b", "shop.stock", '{"book_id": "b1"}', None),
        ("call_c", "shop.search", CALLS[2][2], None),
    ]


async def test_the_chat_stream_helper_gives_the_same_calls_as_the_raw_chunks(
    client: openai.AsyncOpenAI,
    server: SSEServer,
    chat_definitions: Definitions,
) -> None:
    events = await chat_helper_events(client, server, parallel_chunks(), chat_definitions)
    server.script(chat_sse(parallel_chunks()))
    tools: Any = chat_definitions.payload
    raw = await client.chat.completions.create(
        model="gpt-4o-mini",
        messages=MESSAGES,
        tools=tools,
        stream=True,
    )
    chunks = [item async for item in raw]
    from_helper = assembled(CHAT.stream(definitions=chat_definitions), events)
    from_chunks = assembled(CHAT.stream(definitions=chat_definitions), chunks)
    assert [(c.id, c.name, c.arguments) for c in from_helper] == [
        (c.id, c.name, c.arguments) for c in from_chunks
    ]
    assert len(from_helper) == len(CALLS)


async def test_a_chat_stream_cut_at_the_length_limit_gives_defective_calls_through_the_helper(
    client: openai.AsyncOpenAI,
    server: SSEServer,
) -> None:
    # Without tools the helper does not raise on `length` itself; the assembler must say it.
    events = await chat_helper_events(client, server, parallel_chunks(finish="length"), None)
    calls = assembled(CHAT.stream(), events)
    assert len(calls) == len(CALLS)
    assert all(call.defect is not None for call in calls)


async def test_only_the_chat_helpers_derived_events_are_an_error_not_an_empty_result(
    client: openai.AsyncOpenAI,
    server: SSEServer,
    chat_definitions: Definitions,
) -> None:
    events = await chat_helper_events(client, server, parallel_chunks(), chat_definitions)
    derived = [event for event in events if not isinstance(event, ChunkEvent)]
    first_call = next(
        position
        for position, event in enumerate(derived)
        if isinstance(event, FunctionToolCallArgumentsDeltaEvent)
    )
    assembler = CHAT.stream(definitions=chat_definitions)
    for event in derived[:first_call]:  # the text's events: nothing is lost without a chunk
        assembler.feed(event)
    with pytest.raises(UntranslatableError):
        assembler.feed(derived[first_call])


async def test_a_call_from_the_chat_stream_helper_runs_through_the_gate(
    client: openai.AsyncOpenAI,
    server: SSEServer,
    chat_definitions: Definitions,
    gate: Gate,
    principal: Principal,
) -> None:
    chunks = [chunk(opening(0, "call_s", "shop__stock")), chunk(piece(0, '{"book_id": "b1"}'))]
    chunks.append(chunk(finish="tool_calls"))
    events = await chat_helper_events(client, server, chunks, chat_definitions)
    [call] = assembled(CHAT.stream(definitions=chat_definitions), events)
    envelope = await gate.handle(call, principal)
    assert (envelope.call_id, envelope.status) == ("call_s", Status.OK)


def test_the_sync_chat_stream_helpers_events_assemble_the_call(server: SSEServer) -> None:
    chunks = [chunk(opening(0, "call_s", "shop__stock")), chunk(piece(0, '{"book_id": "b1"}'))]
    server.script(chat_sse([*chunks, chunk(finish="tool_calls")]))
    with (
        openai.OpenAI(api_key="test", base_url=server.base_url, max_retries=0) as sync,
        sync.chat.completions.stream(model="gpt-4o-mini", messages=MESSAGES) as stream,
    ):
        events = list(stream)
    [call] = assembled(CHAT.stream(), events)
    assert (call.id, call.name, call.arguments, call.defect) == (
        "call_s",
        "shop.stock",
        '{"book_id": "b1"}',
        None,
    )


# --- Responses: client.responses.stream() ----------------------------------------------------


def response(*output: dict[str, Any], status: str) -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1741476542,
        "status": status,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": None,
        "max_output_tokens": None,
        "model": "gpt-4.1",
        "output": list(output),
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "temperature": 1.0,
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "metadata": {},
    }


def item(index: int, arguments: str, status: str) -> dict[str, Any]:
    call_id, name, _ = CALLS[index]
    return {
        "type": "function_call",
        "id": f"fc_{index}",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def responses_events(*, complete: bool = True) -> list[dict[str, Any]]:
    """Three function_call items, their argument deltas interleaved, as the API numbers them."""
    numbers = itertools.count(1)

    def event(kind: str, **fields: Any) -> dict[str, Any]:
        return {"type": kind, "sequence_number": next(numbers), **fields}

    events = [event("response.created", response=response(status="in_progress"))]
    events += [
        event("response.output_item.added", output_index=i, item=item(i, "", "in_progress"))
        for i in range(len(CALLS))
    ]
    halves = [(text[: len(text) // 2], text[len(text) // 2 :]) for _, _, text in CALLS]
    for part in range(2):
        events += [
            event(
                "response.function_call_arguments.delta",
                item_id=f"fc_{i}",
                output_index=i,
                delta=halves[i][part],
            )
            for i in range(len(CALLS))
        ]
    if not complete:
        return [*events, event("response.incomplete", response=response(status="incomplete"))]
    for i, (_, name, text) in enumerate(CALLS):
        events.append(
            event(
                "response.function_call_arguments.done",
                item_id=f"fc_{i}",
                output_index=i,
                name=name,
                arguments=text,
            ),
        )
        events.append(
            event("response.output_item.done", output_index=i, item=item(i, text, "completed"))
        )
    done = [item(i, text, "completed") for i, (_, _, text) in enumerate(CALLS)]
    return [*events, event("response.completed", response=response(*done, status="completed"))]


async def responses_helper_events(
    client: openai.AsyncOpenAI,
    server: SSEServer,
    events: Sequence[dict[str, Any]],
) -> list[object]:
    server.script(responses_sse(events))
    async with client.responses.stream(model="gpt-4.1", input="Find Dune and check b1.") as stream:
        return [event async for event in stream]


async def test_the_responses_stream_helpers_events_assemble_every_parallel_call_once(
    client: openai.AsyncOpenAI,
    server: SSEServer,
    responses_definitions: Definitions,
) -> None:
    events = await responses_helper_events(client, server, responses_events())
    calls = assembled(RESPONSES.stream(definitions=responses_definitions), events)
    assert [(c.id, c.name, c.arguments, c.defect) for c in calls] == [
        ("call_a", "shop.search", {"query": "dune", "filters": None}, None),
        ("call_b", "shop.stock", '{"book_id": "b1"}', None),
        ("call_c", "shop.search", CALLS[2][2], None),
    ]


async def test_a_responses_stream_cut_off_gives_defective_calls_through_the_helper(
    client: openai.AsyncOpenAI,
    server: SSEServer,
) -> None:
    events = await responses_helper_events(client, server, responses_events(complete=False))
    calls = assembled(RESPONSES.stream(), events)
    assert [call.id for call in calls] == [call_id for call_id, _, _ in CALLS]
    assert all(call.defect is not None for call in calls)


async def test_the_chat_helpers_events_fed_to_the_responses_assembler_are_an_error(
    client: openai.AsyncOpenAI,
    server: SSEServer,
) -> None:
    events = await chat_helper_events(client, server, parallel_chunks(), None)
    assembler = RESPONSES.stream()
    with pytest.raises(UntranslatableError):
        assembler.feed(events[0])


async def test_the_responses_helpers_events_fed_to_the_chat_assembler_are_an_error(
    client: openai.AsyncOpenAI,
    server: SSEServer,
) -> None:
    events = await responses_helper_events(client, server, responses_events())
    assembler = CHAT.stream()
    with pytest.raises(UntranslatableError):
        assembler.feed(events[0])
