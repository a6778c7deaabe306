"""Model clients: OpenAI-compatible and Anthropic over real HTTP, and the scripted client.

The SDK clients talk to a scripted server on 127.0.0.1 (`_scripted_server`): the tests
read the request the official SDK actually sent and feed back scripted responses,
errors and a response that never comes. No other network is used.
"""

from __future__ import annotations

import json
import math
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anthropic
import anyio
import openai
import pytest
from _scripted_server import Answer, ScriptedServer, scripted_server
from hypothesis import given
from hypothesis import strategies as st

from handrail import Principal, Registry, ToolCall
from handrail.adapters.base import Definitions, ToolChoice, ToolChoiceMode
from handrail.adapters.transcript import (
    AssistantTurn,
    ToolResult,
    ToolResultsTurn,
    Turn,
    UserTurn,
)
from handrail.envelope import Envelope, ErrorDetail, Status
from handrail.errors import ConfigurationError, ErrorCode
from handrail.loop.models import (
    AnthropicClient,
    CassetteError,
    ModelClient,
    ModelError,
    ModelReply,
    ModelRequest,
    OpenAICompatibleClient,
    ScriptedModelClient,
    StreamingModelClient,
    TextDelta,
    Usage,
    load_cassette,
    parse_cassette,
    record_cassette,
)
from handrail.loop.models._sdk import retry_after
from handrail.shaping.marking import DataMarker
from handrail.testing import ModelTurn, ScriptExhaustedError

pytestmark = pytest.mark.anyio

CHAT = "/v1/chat/completions"
MESSAGES = "/v1/messages"
MARKER = DataMarker(token=lambda: "0" * 32)
# Ids as providers and other transcripts spell them, kept verbatim end to end.
EARLIER_ID = "call_9xZ.prev|1"
NEW_ID = "call_Qm3-abc"


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with scripted_server() as running:
        yield running


@pytest.fixture
async def chat(server: ScriptedServer) -> AsyncIterator[OpenAICompatibleClient]:
    client = OpenAICompatibleClient(
        base_url=f"{server.base_url}/v1",
        api_key="sk-local",
        model="qwen2.5-7b",
    )
    yield client
    await client.aclose()


@pytest.fixture
async def claude(server: ScriptedServer) -> AsyncIterator[AnthropicClient]:
    client = AnthropicClient(api_key="sk-ant-local", model="claude-x", base_url=server.base_url)
    yield client
    await client.aclose()


def conversation(*, error: bool = False, call_id: str = EARLIER_ID) -> list[Turn]:
    """A user question, one earlier call and its marked result."""
    call = ToolCall(id=call_id, name="shop.stock", arguments='{"book_id": "b1"}')
    if error:
        envelope = Envelope(
            call_id=call_id,
            tool="shop.stock",
            status=Status.ERROR,
            summary="no such book",
            error=ErrorDetail(code=ErrorCode.NOT_FOUND),
        )
    else:
        envelope = Envelope(
            call_id=call_id, tool="shop.stock", status=Status.OK, summary="3", data=3
        )
    return [
        UserTurn(text="Is Dune in stock?"),
        AssistantTurn(text=None, calls=(call,)),
        ToolResultsTurn(results=(ToolResult.of(envelope, MARKER),)),
    ]


def completion(
    *calls: dict[str, Any],
    content: str | None = None,
    finish_reason: str = "tool_calls",
    usage: dict[str, int] | None = None,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = list(calls)
    body: dict[str, Any] = {
        "id": "chatcmpl-local",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "qwen2.5-7b-instruct",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
    }
    if usage is not None:
        body["usage"] = usage
    return body


def function_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def message(*blocks: dict[str, Any], stop_reason: str = "tool_use") -> dict[str, Any]:
    return {
        "id": "msg_local",
        "type": "message",
        "role": "assistant",
        "model": "claude-x-20250101",
        "content": list(blocks),
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": 120,
            "output_tokens": 33,
            "cache_creation_input_tokens": 5,
            "cache_read_input_tokens": 7,
        },
    }


def tool_use(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# --- OpenAI-compatible -----------------------------------------------------------------------


async def test_openai_request_carries_model_strict_tools_messages_and_max_tokens(
    server: ScriptedServer,
    chat: OpenAICompatibleClient,
    registry: Registry,
    principal: Principal,
) -> None:
    server.script(CHAT, Answer(body=completion(content="Yes.", finish_reason="stop")))
    request = ModelRequest(
        transcript=conversation(error=True),
        tools=registry.exposed(principal),
        tool_choice=ToolChoice.forced("shop.search"),
        system="You sell books.",
        max_output_tokens=64,
    )
    await chat.complete(request, timeout=5)
    [recorded] = server.received
    assert recorded.path == CHAT
    assert recorded.headers["authorization"] == "Bearer sk-local"
    body = recorded.body
    assert body["model"] == "qwen2.5-7b"
    assert body["max_tokens"] == 64
    assert "max_completion_tokens" not in body
    assert body["tool_choice"] == {"type": "function", "function": {"name": "shop__search"}}
    assert {t["function"]["name"] for t in body["tools"]} == {"shop__search", "shop__stock"}
    for definition in body["tools"]:
        assert definition["function"]["strict"] is True
        assert definition["function"]["parameters"]["additionalProperties"] is False
    system, user, assistant, result = body["messages"]
    assert system == {"role": "system", "content": "You sell books."}
    assert user == {"role": "user", "content": "Is Dune in stock?"}
    assert assistant["tool_calls"][0]["id"] == EARLIER_ID
    assert assistant["tool_calls"][0]["function"]["name"] == "shop__stock"
    assert result["role"] == "tool"
    assert result["tool_call_id"] == EARLIER_ID
    assert '"status":"error"' in result["content"].replace(" ", "")
    assert "source=" in result["content"]


async def test_openai_reply_keeps_ids_verbatim_and_undoes_strict_nulls(
    server: ScriptedServer,
    chat: OpenAICompatibleClient,
    registry: Registry,
    principal: Principal,
) -> None:
    server.script(
        CHAT,
        Answer(
            body=completion(
                function_call(
                    NEW_ID, "shop__search", '{"query":"dune","limit":null,"filters":null}'
                ),
                function_call("call_2", "shop__stock", '{"book_id": "b1"}'),
                content="Looking.",
                usage={"prompt_tokens": 82, "completion_tokens": 17, "total_tokens": 99},
            ),
        ),
    )
    reply = await chat.complete(
        ModelRequest(transcript=conversation(), tools=registry.exposed(principal)),
        timeout=5,
    )
    first, second = reply.calls
    assert (first.id, first.name, first.provider) == (NEW_ID, "shop.search", "openai-chat")
    assert first.arguments == {"query": "dune", "filters": None}
    assert (second.id, second.name, second.arguments) == (
        "call_2",
        "shop.stock",
        '{"book_id": "b1"}',
    )
    assert all(call.defect is None for call in reply.calls)
    assert reply.text == "Looking."
    assert reply.usage == Usage(input_tokens=82, output_tokens=17)
    assert reply.finish_reason == "tool_calls"
    assert reply.model == "qwen2.5-7b-instruct"
    assert isinstance(reply.raw, openai.types.chat.ChatCompletion)


@pytest.mark.parametrize("reason", ["length", "content_filter"])
async def test_openai_calls_cut_off_by_the_finish_reason_come_back_defective(
    server: ScriptedServer,
    chat: OpenAICompatibleClient,
    reason: str,
) -> None:
    server.script(
        CHAT,
        Answer(
            body=completion(
                function_call(NEW_ID, "shop__stock", '{"book_id": "b'), finish_reason=reason
            )
        ),
    )
    reply = await chat.complete(ModelRequest(transcript=conversation()), timeout=5)
    [call] = reply.calls
    assert call.id == NEW_ID
    assert call.defect == f"the arguments were truncated: finish_reason={reason}"
    assert reply.finish_reason == reason


async def test_openai_without_tools_sends_neither_tools_nor_choice_and_missing_usage_is_zero(
    server: ScriptedServer,
    chat: OpenAICompatibleClient,
) -> None:
    server.script(CHAT, Answer(body=completion(content="Hello.", finish_reason="stop")))
    reply = await chat.complete(ModelRequest(transcript=[UserTurn(text="hi")]), timeout=5)
    [body] = server.bodies(CHAT)
    assert not {"tools", "tool_choice", "max_tokens"} & set(body)
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert reply.calls == ()
    assert reply.text == "Hello."
    assert reply.usage == Usage()


async def test_openai_takes_ready_definitions_and_the_max_completion_tokens_field(
    server: ScriptedServer,
    registry: Registry,
    principal: Principal,
) -> None:
    client = OpenAICompatibleClient(
        base_url=f"{server.base_url}/v1",
        api_key="k",
        model="o-mini",
        strict=False,
        max_tokens_field="max_completion_tokens",
    )
    definitions = client.definitions(registry.exposed(principal))
    server.script(CHAT, Answer(body=completion(content="ok", finish_reason="stop")))
    try:
        await client.complete(
            ModelRequest(
                transcript=[UserTurn(text="hi")],
                tools=definitions,
                tool_choice=ToolChoice(mode=ToolChoiceMode.NONE),
                max_output_tokens=10,
            ),
            timeout=5,
        )
    finally:
        await client.aclose()
    [body] = server.bodies(CHAT)
    assert body["tools"] == definitions.payload
    assert body["tool_choice"] == "none"
    assert body["max_completion_tokens"] == 10
    assert "max_tokens" not in body
    assert all(t["function"]["strict"] is False for t in body["tools"])


async def test_definitions_for_another_provider_are_refused_before_sending(
    server: ScriptedServer,
    chat: OpenAICompatibleClient,
    claude: AnthropicClient,
    registry: Registry,
    principal: Principal,
) -> None:
    anthropic_tools = claude.definitions(registry.exposed(principal))
    with pytest.raises(ConfigurationError):
        await chat.complete(
            ModelRequest(transcript=[UserTurn(text="hi")], tools=anthropic_tools),
            timeout=5,
        )
    with pytest.raises(ConfigurationError):
        await claude.complete(
            ModelRequest(
                transcript=[UserTurn(text="hi")],
                tools=chat.definitions(registry.exposed(principal)),
            ),
            timeout=5,
        )
    assert server.received == []


@pytest.mark.parametrize(
    ("status", "code", "retryable"),
    [
        (429, ErrorCode.RATE_LIMITED, True),
        (500, ErrorCode.TRANSIENT, True),
        (503, ErrorCode.TRANSIENT, True),
        (408, ErrorCode.TRANSIENT, True),
        (400, ErrorCode.FAILED_FINAL, False),
        (401, ErrorCode.FAILED_FINAL, False),
        (404, ErrorCode.FAILED_FINAL, False),
        (422, ErrorCode.FAILED_FINAL, False),
    ],
)
async def test_openai_http_errors_map_to_model_errors(
    server: ScriptedServer,
    chat: OpenAICompatibleClient,
    status: int,
    code: ErrorCode,
    retryable: bool,
) -> None:
    server.script(
        CHAT,
        Answer(
            status=status,
            body={"error": {"message": "no", "type": "x"}},
            headers={"retry-after": "7"},
        ),
    )
    with pytest.raises(ModelError) as caught:
        await chat.complete(ModelRequest(transcript=[UserTurn(text="hi")]), timeout=5)
    error = caught.value
    assert (error.code, error.retryable, error.status) == (code, retryable, status)
    assert error.retry_after == (7.0 if retryable else None)
    assert error.provider == "openai-chat"
    assert "sk-local" not in str(error)
    assert len(server.received) == 1  # the SDK's own retries are off


async def test_a_server_that_does_not_answer_in_time_is_a_retryable_timeout(
    server: ScriptedServer,
    chat: OpenAICompatibleClient,
) -> None:
    server.script(CHAT, Answer(body=completion(content="late"), hang=True))
    with pytest.raises(ModelError) as caught:
        await chat.complete(ModelRequest(transcript=[UserTurn(text="hi")]), timeout=0.3)
    assert caught.value.code is ErrorCode.TIMEOUT
    assert caught.value.retryable
    assert caught.value.status is None


async def test_a_cancel_from_outside_is_not_turned_into_a_model_error(
    server: ScriptedServer,
    chat: OpenAICompatibleClient,
) -> None:
    server.script(CHAT, Answer(body=completion(content="late"), hang=True))
    with anyio.move_on_after(0.2) as scope:
        await chat.complete(ModelRequest(transcript=[UserTurn(text="hi")]), timeout=30)
    assert scope.cancelled_caught


async def test_a_server_that_cannot_be_reached_is_a_retryable_transient_error() -> None:
    client = OpenAICompatibleClient(
        base_url=f"http://127.0.0.1:{free_port()}/v1",
        api_key="k",
        model="m",
    )
    try:
        with pytest.raises(ModelError) as caught:
            await client.complete(ModelRequest(transcript=[UserTurn(text="hi")]), timeout=5)
    finally:
        await client.aclose()
    assert caught.value.code is ErrorCode.TRANSIENT
    assert caught.value.retryable


async def test_sdk_retries_happen_only_when_asked_for(server: ScriptedServer) -> None:
    client = OpenAICompatibleClient(
        base_url=f"{server.base_url}/v1",
        api_key="k",
        model="m",
        max_retries=1,
    )
    server.script(
        CHAT,
        Answer(status=500, body={"error": {"message": "busy"}}, headers={"retry-after-ms": "1"}),
        Answer(body=completion(content="second time", finish_reason="stop")),
    )
    try:
        reply = await client.complete(ModelRequest(transcript=[UserTurn(text="hi")]), timeout=5)
    finally:
        await client.aclose()
    assert reply.text == "second time"
    assert len(server.received) == 2


@pytest.mark.parametrize(
    "body",
    [
        completion(content="x") | {"choices": []},
        completion(content=None)
        | {"choices": [{"index": 0, "message": {"content": 5}, "finish_reason": "stop"}]},
        "a JSON string",
    ],
    ids=["no-choices", "content-not-text", "not-an-object"],
)
async def test_an_answer_without_a_readable_choice_is_a_final_error(
    server: ScriptedServer,
    chat: OpenAICompatibleClient,
    body: object,
) -> None:
    server.script(CHAT, Answer(body=body))
    with pytest.raises(ModelError) as caught:
        await chat.complete(ModelRequest(transcript=[UserTurn(text="hi")]), timeout=5)
    assert caught.value.code is ErrorCode.FAILED_FINAL
    assert not caught.value.retryable


async def test_a_client_passed_in_is_used_and_left_open(server: ScriptedServer) -> None:
    sdk = openai.AsyncOpenAI(base_url=f"{server.base_url}/v1", api_key="from-owner", max_retries=0)
    client = OpenAICompatibleClient(
        base_url="http://unused.invalid", api_key="unused", model="m", client=sdk
    )
    server.script(CHAT, Answer(body=completion(content="ok", finish_reason="stop")))
    await client.complete(ModelRequest(transcript=[UserTurn(text="hi")]), timeout=5)
    await client.aclose()
    assert not sdk.is_closed()
    await sdk.close()
    assert server.received[0].headers["authorization"] == "Bearer from-owner"


async def test_a_client_closes_the_sdk_client_it_made(server: ScriptedServer) -> None:
    client = OpenAICompatibleClient(base_url=f"{server.base_url}/v1", api_key="k", model="m")
    await client.aclose()
    assert client._client.is_closed()


@pytest.mark.parametrize("timeout", [0, -1, math.nan, math.inf])
async def test_every_client_refuses_a_timeout_that_is_not_positive_and_finite(
    server: ScriptedServer,
    chat: OpenAICompatibleClient,
    claude: AnthropicClient,
    timeout: float,
) -> None:
    request = ModelRequest(transcript=[UserTurn(text="hi")])
    clients: list[ModelClient] = [chat, claude, ScriptedModelClient([ModelTurn(text="x")])]
    for client in clients:
        with pytest.raises(ConfigurationError):
            await client.complete(request, timeout=timeout)
    assert server.received == []


def test_client_options_are_checked() -> None:
    with pytest.raises(ConfigurationError):
        OpenAICompatibleClient(
            base_url="http://127.0.0.1:1/v1", api_key="k", model="m", max_retries=-1
        )
    with pytest.raises(ConfigurationError):
        AnthropicClient(api_key="k", model="m", max_tokens=0)
    with pytest.raises(ConfigurationError):
        AnthropicClient(api_key="k", model="m", max_retries=-1)
    with pytest.raises(ConfigurationError):
        ModelRequest(transcript=[], max_output_tokens=0)


# --- Anthropic -------------------------------------------------------------------------------


async def test_anthropic_request_carries_model_max_tokens_system_tools_and_results(
    server: ScriptedServer,
    claude: AnthropicClient,
    registry: Registry,
    principal: Principal,
) -> None:
    server.script(
        MESSAGES, Answer(body=message({"type": "text", "text": "Yes."}, stop_reason="end_turn"))
    )
    request = ModelRequest(
        transcript=conversation(call_id="toolu_01A"),
        tools=registry.exposed(principal),
        tool_choice=ToolChoice(mode=ToolChoiceMode.REQUIRED),
        system="You sell books.",
    )
    await claude.complete(request, timeout=5)
    [recorded] = server.received
    assert recorded.path == MESSAGES
    # The SDK sends the key as x-api-key or, in newer versions, as a bearer token.
    sent_keys = {
        recorded.headers.get("x-api-key"),
        recorded.headers.get("authorization", "").removeprefix("Bearer "),
    }
    assert "sk-ant-local" in sent_keys
    assert "anthropic-version" in recorded.headers
    body = recorded.body
    assert (body["model"], body["max_tokens"], body["system"]) == (
        "claude-x",
        1024,
        "You sell books.",
    )
    assert body["tool_choice"] == {"type": "any"}
    assert {t["name"] for t in body["tools"]} == {"shop__search", "shop__stock"}
    assert all("input_schema" in t for t in body["tools"])
    user, assistant, results = body["messages"]
    assert user == {"role": "user", "content": "Is Dune in stock?"}
    assert assistant["content"][0]["id"] == "toolu_01A"
    assert assistant["content"][0]["input"] == {"book_id": "b1"}
    [block] = results["content"]
    assert (block["type"], block["tool_use_id"], block["is_error"]) == (
        "tool_result",
        "toolu_01A",
        False,
    )


async def test_anthropic_reply_keeps_ids_and_counts_cached_input(
    server: ScriptedServer,
    claude: AnthropicClient,
) -> None:
    server.script(
        MESSAGES,
        Answer(
            body=message(
                {"type": "text", "text": "Let me "},
                {"type": "text", "text": "check."},
                tool_use("toolu_01Xy", "shop__stock", {"book_id": "b1"}),
                tool_use("toolu_02Zz", "shop__search", {"query": "dune"}),
            ),
        ),
    )
    reply = await claude.complete(
        ModelRequest(transcript=[UserTurn(text="hi")], max_output_tokens=200),
        timeout=5,
    )
    assert server.bodies(MESSAGES)[0]["max_tokens"] == 200
    assert [(c.id, c.name, c.arguments) for c in reply.calls] == [
        ("toolu_01Xy", "shop.stock", {"book_id": "b1"}),
        ("toolu_02Zz", "shop.search", {"query": "dune"}),
    ]
    assert all(c.defect is None and c.provider == "anthropic" for c in reply.calls)
    assert reply.text == "Let me check."
    assert reply.usage == Usage(input_tokens=132, output_tokens=33)
    assert (reply.finish_reason, reply.model) == ("tool_use", "claude-x-20250101")


async def test_anthropic_call_cut_off_at_max_tokens_comes_back_defective(
    server: ScriptedServer,
    claude: AnthropicClient,
) -> None:
    server.script(
        MESSAGES,
        Answer(body=message(tool_use("toolu_1", "shop__stock", {}), stop_reason="max_tokens")),
    )
    reply = await claude.complete(ModelRequest(transcript=[UserTurn(text="hi")]), timeout=5)
    [call] = reply.calls
    assert call.id == "toolu_1"
    assert call.defect is not None
    assert reply.text is None


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (429, ErrorCode.RATE_LIMITED),
        (529, ErrorCode.TRANSIENT),
        (500, ErrorCode.TRANSIENT),
        (400, ErrorCode.FAILED_FINAL),
    ],
)
async def test_anthropic_http_errors_map_to_model_errors(
    server: ScriptedServer,
    claude: AnthropicClient,
    status: int,
    code: ErrorCode,
) -> None:
    body = {"type": "error", "error": {"type": "x", "message": "no"}}
    server.script(MESSAGES, Answer(status=status, body=body, headers={"retry-after": "oops"}))
    with pytest.raises(ModelError) as caught:
        await claude.complete(ModelRequest(transcript=[UserTurn(text="hi")]), timeout=5)
    assert (caught.value.code, caught.value.status) == (code, status)
    assert caught.value.retryable is (code is not ErrorCode.FAILED_FINAL)
    assert caught.value.retry_after is None
    assert caught.value.provider == "anthropic"


async def test_anthropic_timeout_and_unreadable_answers(
    server: ScriptedServer,
    claude: AnthropicClient,
) -> None:
    server.script(
        MESSAGES,
        Answer(body=message() | {"content": "not blocks"}),
        Answer(body=["not", "a", "message"]),
        Answer(body=message(), hang=True),
    )
    request = ModelRequest(transcript=[UserTurn(text="hi")])
    with pytest.raises(ModelError) as unreadable:
        await claude.complete(request, timeout=5)
    assert unreadable.value.code is ErrorCode.FAILED_FINAL
    with pytest.raises(ModelError) as not_a_message:
        await claude.complete(request, timeout=5)
    assert not_a_message.value.code is ErrorCode.FAILED_FINAL
    with pytest.raises(ModelError) as late:
        await claude.complete(request, timeout=0.3)
    assert late.value.code is ErrorCode.TIMEOUT
    assert late.value.retryable


async def test_anthropic_unreachable_and_a_client_passed_in(server: ScriptedServer) -> None:
    sdk = anthropic.AsyncAnthropic(
        api_key="k", base_url=f"http://127.0.0.1:{free_port()}", max_retries=0
    )
    client = AnthropicClient(api_key="unused", model="m", client=sdk)
    try:
        with pytest.raises(ModelError) as caught:
            await client.complete(ModelRequest(transcript=[UserTurn(text="hi")]), timeout=5)
        await client.aclose()
        assert not sdk.is_closed()
    finally:
        await sdk.close()
    assert caught.value.code is ErrorCode.TRANSIENT


# --- scripted --------------------------------------------------------------------------------


async def test_the_scripted_client_replays_replies_turns_and_functions_then_stops() -> None:
    recorded = ModelReply(
        calls=(ToolCall(id="c-1", name="shop.stock", arguments='{"book_id": "b1"}'),),
        usage=Usage(input_tokens=10, output_tokens=2),
        finish_reason="tool_calls",
        model="recorded",
    )
    client = ScriptedModelClient(
        [
            recorded,
            ModelTurn(calls=(ToolCall(id="c-2", name="shop.search", arguments=None),)),
            lambda request: ModelTurn(text=f"saw {len(request.transcript)} turns"),
            ModelTurn(text="done"),
        ],
    )
    first = ModelRequest(transcript=[UserTurn(text="hi")])
    assert await client.complete(first, timeout=1) == recorded
    second = await client.complete(first, timeout=1)
    assert [c.id for c in second.calls] == ["c-2"]
    assert (second.finish_reason, second.model, second.usage) == (
        "tool_calls",
        "scripted-model",
        Usage(),
    )
    third = await client.complete(ModelRequest(transcript=conversation()), timeout=1)
    assert third.text == "saw 3 turns"
    final = await client.complete(first, timeout=1)
    assert (final.text, final.finish_reason, final.calls) == ("done", "stop", ())
    assert client.finished
    with pytest.raises(ScriptExhaustedError):
        await client.complete(first, timeout=1)
    assert len(client.requests) == 5
    assert client.requests[2].transcript == tuple(conversation())
    assert client.name == "scripted-model"


async def test_the_scripted_client_can_forget_requests() -> None:
    client = ScriptedModelClient([ModelTurn(text="x")], record_requests=False)
    await client.complete(ModelRequest(transcript=[]), timeout=1)
    assert client.requests == ()


def replies() -> list[ModelReply]:
    return [
        ModelReply(
            calls=(
                ToolCall(
                    id="call_Ä.1|x",
                    name="shop.search",
                    arguments='{"query":"dune"}',
                    provider="openai-chat",
                ),
                ToolCall(
                    id="toolu_2",
                    name="shop.stock",
                    arguments={"book_id": "b1"},
                    provider="anthropic",
                ),
                ToolCall(id="c3", name="shop.stock", arguments=b"\xff{", defect="cut off"),
                ToolCall(id="c4", name="shop.stock", arguments=None),
            ),
            text="Looking.",
            usage=Usage(input_tokens=82, output_tokens=17),
            finish_reason="length",
            model="qwen",
        ),
        ModelReply(text="Dune is in stock.", finish_reason="stop", model="qwen"),
    ]


async def test_a_cassette_round_trips_through_json_and_replays_the_same_replies(
    tmp_path: Path,
) -> None:
    text = record_cassette(replies())
    assert isinstance(json.loads(text), list)
    path = tmp_path / "run.cassette.json"
    path.write_text(text, encoding="utf-8")
    assert load_cassette(path) == tuple(replies())
    client = ScriptedModelClient.from_cassette(path)
    request = ModelRequest(transcript=[UserTurn(text="hi")])
    assert [await client.complete(request, timeout=1) for _ in range(2)] == replies()
    with pytest.raises(ScriptExhaustedError):
        await client.complete(request, timeout=1)


def test_a_hand_written_cassette_may_leave_out_defaults() -> None:
    [reply] = parse_cassette('[{"calls": [{"id": "a", "name": "shop.stock"}]}]')
    assert reply == ModelReply(
        calls=(ToolCall(id="a", name="shop.stock", arguments=None),),
        model="scripted-model",
    )


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)
calls_strategy = st.builds(
    ToolCall,
    id=st.text(),
    name=st.text(min_size=1),
    arguments=st.none()
    | st.text()
    | st.binary()
    | st.dictionaries(st.text(), json_values, max_size=3),
    provider=st.text(),
    defect=st.none() | st.text(),
)
replies_strategy = st.lists(
    st.builds(
        ModelReply,
        calls=st.lists(calls_strategy, max_size=3).map(tuple),
        text=st.none() | st.text(),
        usage=st.builds(
            Usage, input_tokens=st.integers(0, 10**9), output_tokens=st.integers(0, 10**9)
        ),
        finish_reason=st.none() | st.text(),
        model=st.text(),
    ),
    max_size=4,
)


@given(replies_strategy)
def test_any_replies_round_trip_through_a_cassette(recorded: list[ModelReply]) -> None:
    assert parse_cassette(record_cassette(recorded)) == tuple(recorded)


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        '{"calls": []}',
        "[NaN]",
        "[1]",
        '[{"calls": {}}]',
        '[{"surprise": 1}]',
        '[{"usage": {"input_tokens": -1}}]',
        '[{"usage": {"input_tokens": true}}]',
        '[{"usage": {"input_tokens": 1.5}}]',
        '[{"usage": []}]',
        '[{"text": 3}]',
        '[{"model": null}]',
        '[{"calls": [{"name": "x"}]}]',
        '[{"calls": [{"id": 1, "name": "x"}]}]',
        '[{"calls": [{"id": "a", "name": "x", "arguments": [1]}]}]',
        '[{"calls": [{"id": "a", "name": "x", "arguments": 1}]}]',
        '[{"calls": [{"id": "a", "name": "x", "arguments_base64": "***"}]}]',
        '[{"calls": [{"id": "a", "name": "x", "arguments_base64": "AA==", "arguments": "{}"}]}]',
        '[{"calls": [{"id": "a", "name": "x", "raw": {}}]}]',
        '[{"calls": ["a"]}]',
        "[" * 100_000,
    ],
)
def test_a_malformed_cassette_is_refused(text: str) -> None:
    with pytest.raises(CassetteError):
        parse_cassette(text)


def test_a_missing_or_undecodable_cassette_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CassetteError):
        load_cassette(tmp_path / "absent.json")
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe[")
    with pytest.raises(CassetteError):
        load_cassette(binary)


def test_recording_arguments_that_are_not_json_is_refused() -> None:
    bad = ModelReply(calls=(ToolCall(id="a", name="x", arguments={"v": {1, 2}}),), model="m")
    with pytest.raises(CassetteError):
        record_cassette([bad])
    nan = ModelReply(calls=(ToolCall(id="a", name="x", arguments={"v": math.nan}),), model="m")
    with pytest.raises(CassetteError):
        record_cassette([nan])


def test_usage_adds_up_and_is_never_negative() -> None:
    assert Usage(input_tokens=1, output_tokens=2) + Usage(input_tokens=3, output_tokens=4) == Usage(
        input_tokens=4,
        output_tokens=6,
    )
    with pytest.raises(ValueError, match="negative"):
        Usage(input_tokens=-1)


def test_a_request_freezes_its_transcript_and_tools(
    registry: Registry, principal: Principal
) -> None:
    transcript: list[Turn] = [UserTurn(text="hi")]
    tools = list(registry.exposed(principal))
    request = ModelRequest(transcript=transcript, tools=tools)
    transcript.append(UserTurn(text="later"))
    tools.clear()
    assert len(request.transcript) == 1
    assert isinstance(request.tools, tuple)
    assert len(request.tools) == 2
    ready = Definitions(provider="openai-chat", payload=[])
    assert ModelRequest(transcript=[], tools=ready).tools is ready


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"retry-after-ms": "1500", "retry-after": "7"}, 1.5),
        ({"retry-after-ms": "nan", "retry-after": "2"}, 2.0),
        ({"retry-after": "-1"}, None),
        ({"retry-after": "inf"}, None),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, None),
        ({}, None),
    ],
)
def test_retry_after_is_read_in_seconds_and_nonsense_is_ignored(
    headers: dict[str, str],
    seconds: float | None,
) -> None:
    assert retry_after(headers) == seconds


async def test_a_response_the_sdk_refuses_to_validate_is_a_final_error(
    server: ScriptedServer,
) -> None:
    strict_openai = openai.AsyncOpenAI(
        base_url=f"{server.base_url}/v1",
        api_key="k",
        max_retries=0,
        _strict_response_validation=True,
    )
    strict_anthropic = anthropic.AsyncAnthropic(
        api_key="k",
        base_url=server.base_url,
        max_retries=0,
        _strict_response_validation=True,
    )
    clients: list[ModelClient] = [
        OpenAICompatibleClient(base_url="", api_key="", model="m", client=strict_openai),
        AnthropicClient(api_key="", model="m", client=strict_anthropic),
    ]
    server.script(CHAT, Answer(body={"choices": "many"}))
    server.script(MESSAGES, Answer(body={"content": 3}))
    try:
        for client in clients:
            with pytest.raises(ModelError) as caught:
                await client.complete(ModelRequest(transcript=[UserTurn(text="hi")]), timeout=5)
            assert caught.value.code is ErrorCode.FAILED_FINAL
            assert caught.value.status is None
    finally:
        await strict_openai.close()
        await strict_anthropic.close()


async def test_replies_read_from_plain_mappings_too(chat: OpenAICompatibleClient) -> None:
    body = completion(
        function_call("c1", "shop__stock", "{}"),
        usage={"prompt_tokens": True, "completion_tokens": -3},
    )
    reply = chat._reply(body, Definitions(provider="openai-chat", payload=[]))
    assert [c.id for c in reply.calls] == ["c1"]
    assert reply.usage == Usage()
    assert reply.raw is body


async def test_the_scripted_client_streams_its_text_in_deltas_then_the_reply() -> None:
    reply = ModelReply(text="The order shipped on Monday.", model="scripted-model")
    client = ScriptedModelClient([reply], delta_chars=5)
    assert isinstance(client, StreamingModelClient)
    request = ModelRequest(transcript=[UserTurn(text="where is it?")])
    items = [item async for item in client.stream(request, timeout=5)]
    assert items[-1] == reply
    deltas = items[:-1]
    assert all(isinstance(d, TextDelta) and 0 < len(d.text) <= 5 for d in deltas)
    assert "".join(d.text for d in deltas if isinstance(d, TextDelta)) == reply.text
    assert len(deltas) == 6


async def test_clients_send_a_growing_conversation_as_to_wire_renders_it_whole(
    server: ScriptedServer, chat: OpenAICompatibleClient, claude: AnthropicClient
) -> None:
    # Each client renders only the turns a request adds; what it sends never differs.
    whole = [*conversation(), AssistantTurn(text="In stock."), UserTurn(text="And Emma?")]
    replayed = [*conversation(error=True), AssistantTurn(text="Not found.")]
    requests = [whole[:1], whole[:3], whole[:3], whole, replayed, whole[:2]]
    clients: list[tuple[OpenAICompatibleClient | AnthropicClient, str, dict[str, Any]]] = [
        (chat, CHAT, completion(content="ok", finish_reason="stop")),
        (claude, MESSAGES, message({"type": "text", "text": "ok"}, stop_reason="end_turn")),
    ]
    for client, path, answer in clients:
        for transcript in requests:
            server.script(path, Answer(body=answer))
            await client.complete(ModelRequest(transcript=transcript), timeout=5)
        sent = [recorded.body["messages"] for recorded in server.received if recorded.path == path]
        expected = [json.loads(json.dumps(client.adapter.to_wire(t))) for t in requests]
        assert sent == expected
