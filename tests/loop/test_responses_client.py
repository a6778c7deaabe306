"""The OpenAI Responses client over real HTTP: what it sends and how it reads a response.

The official `openai` SDK talks to the scripted server on 127.0.0.1 (`_scripted_server`);
the tests read the request body it actually sent and feed back scripted responses.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import openai
import pytest
from _scripted_server import Answer, ScriptedServer, scripted_server

from handrail import Principal, Registry, ToolCall
from handrail.adapters.base import ToolChoice
from handrail.adapters.transcript import (
    AssistantTurn,
    ToolResult,
    ToolResultsTurn,
    Turn,
    UserTurn,
)
from handrail.envelope import Envelope, Status
from handrail.errors import ConfigurationError, ErrorCode
from handrail.loop.models import (
    ModelError,
    ModelRequest,
    OpenAICompatibleClient,
    OpenAIResponsesClient,
    Usage,
)
from handrail.shaping.marking import DataMarker

pytestmark = pytest.mark.anyio

RESPONSES = "/v1/responses"
MARKER = DataMarker(token=lambda: "0" * 32)
EARLIER_ID = "call_9xZ.prev|1"
NEW_ID = "call_Qm3-abc"


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with scripted_server() as running:
        yield running


@pytest.fixture
async def client(server: ScriptedServer) -> AsyncIterator[OpenAIResponsesClient]:
    made = OpenAIResponsesClient(
        base_url=f"{server.base_url}/v1", api_key="sk-local", model="gpt-x"
    )
    yield made
    await made.aclose()


def conversation() -> list[Turn]:
    """A user question, one earlier call and its marked result."""
    call = ToolCall(id=EARLIER_ID, name="shop.stock", arguments='{"book_id": "b1"}')
    envelope = Envelope(
        call_id=EARLIER_ID, tool="shop.stock", status=Status.OK, summary="3", data=3
    )
    return [
        UserTurn(text="Is Dune in stock?"),
        AssistantTurn(text=None, calls=(call,)),
        ToolResultsTurn(results=(ToolResult.of(envelope, MARKER),)),
    ]


def response(
    *output: dict[str, Any],
    status: str = "completed",
    reason: str | None = None,
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1_700_000_000,
        "model": "gpt-x-2025-01-01",
        "status": status,
        "incomplete_details": {"reason": reason} if reason else None,
        "error": error,
        "output": list(output),
        "usage": {
            "input_tokens": 82,
            "input_tokens_details": {"cached_tokens": 64},
            "output_tokens": 17,
            "total_tokens": 99,
        },
    }


def text_item(*texts: str) -> dict[str, Any]:
    parts = [{"type": "output_text", "text": t, "annotations": []} for t in texts]
    return {"id": "msg_1", "type": "message", "role": "assistant", "content": parts}


def call_item(call_id: str, name: str, arguments: str, status: str = "completed") -> dict[str, Any]:
    return {
        "id": f"fc_{call_id}",
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


async def test_responses_request_carries_model_instructions_tools_input_items_and_limits(
    server: ScriptedServer,
    client: OpenAIResponsesClient,
    registry: Registry,
    principal: Principal,
) -> None:
    server.script(RESPONSES, Answer(body=response(text_item("Yes."))))
    request = ModelRequest(
        transcript=conversation(),
        tools=registry.exposed(principal),
        tool_choice=ToolChoice.forced("shop.search"),
        system="You sell books.",
        max_output_tokens=64,
    )
    await client.complete(request, timeout=5)
    [recorded] = server.received
    assert recorded.path == RESPONSES
    assert recorded.headers["authorization"] == "Bearer sk-local"
    body = recorded.body
    assert (body["model"], body["instructions"], body["max_output_tokens"]) == (
        "gpt-x",
        "You sell books.",
        64,
    )
    assert body["store"] is False
    assert body["tool_choice"] == {"type": "function", "name": "shop__search"}
    assert {t["name"] for t in body["tools"]} == {"shop__search", "shop__stock"}
    for definition in body["tools"]:
        assert (definition["type"], definition["strict"]) == ("function", True)
        assert definition["parameters"]["additionalProperties"] is False
    user, call, output = body["input"]
    assert user == {"type": "message", "role": "user", "content": "Is Dune in stock?"}
    assert (call["type"], call["call_id"], call["name"]) == (
        "function_call",
        EARLIER_ID,
        "shop__stock",
    )
    assert (output["type"], output["call_id"]) == ("function_call_output", EARLIER_ID)
    assert "source=" in output["output"]


async def test_responses_reply_keeps_call_ids_verbatim_and_undoes_strict_nulls(
    server: ScriptedServer,
    client: OpenAIResponsesClient,
    registry: Registry,
    principal: Principal,
) -> None:
    server.script(
        RESPONSES,
        Answer(
            body=response(
                {"id": "rs_1", "type": "reasoning", "summary": []},
                text_item("Looking", "."),
                call_item(NEW_ID, "shop__search", '{"query":"dune","limit":null,"filters":null}'),
                call_item("call_2", "shop__stock", '{"book_id": "b1"}'),
            ),
        ),
    )
    reply = await client.complete(
        ModelRequest(transcript=conversation(), tools=registry.exposed(principal)), timeout=5
    )
    first, second = reply.calls
    assert (first.id, first.name, first.provider) == (NEW_ID, "shop.search", "openai-responses")
    assert first.arguments == {"query": "dune", "filters": None}
    assert (second.id, second.name, second.arguments) == (
        "call_2",
        "shop.stock",
        '{"book_id": "b1"}',
    )
    assert all(call.defect is None for call in reply.calls)
    assert reply.text == "Looking."
    assert reply.usage == Usage(input_tokens=82, output_tokens=17)
    assert (reply.finish_reason, reply.model) == ("completed", "gpt-x-2025-01-01")
    assert isinstance(reply.raw, openai.types.responses.Response)


async def test_a_response_cut_off_at_its_token_limit_has_a_defective_call_and_says_why(
    server: ScriptedServer,
    client: OpenAIResponsesClient,
) -> None:
    server.script(
        RESPONSES,
        Answer(
            body=response(
                call_item(NEW_ID, "shop__stock", '{"book_id": "b', status="incomplete"),
                status="incomplete",
                reason="max_output_tokens",
            )
        ),
    )
    reply = await client.complete(ModelRequest(transcript=[UserTurn(text="hi")]), timeout=5)
    [call] = reply.calls
    assert call.id == NEW_ID
    assert call.defect is not None
    assert reply.finish_reason == "max_output_tokens"
    assert reply.text is None


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("server_error", ErrorCode.TRANSIENT),
        ("rate_limit_exceeded", ErrorCode.RATE_LIMITED),
        ("invalid_prompt", ErrorCode.FAILED_FINAL),
    ],
)
async def test_a_failed_response_is_a_model_error_by_its_error_code(
    server: ScriptedServer,
    client: OpenAIResponsesClient,
    code: str,
    expected: ErrorCode,
) -> None:
    failed = response(status="failed", error={"code": code, "message": "no"})
    server.script(RESPONSES, Answer(body=failed))
    with pytest.raises(ModelError) as caught:
        await client.complete(ModelRequest(transcript=[UserTurn(text="hi")]), timeout=5)
    assert caught.value.code is expected
    assert caught.value.provider == "openai-responses"


@pytest.mark.parametrize(
    ("status", "code"),
    [(429, ErrorCode.RATE_LIMITED), (503, ErrorCode.TRANSIENT), (400, ErrorCode.FAILED_FINAL)],
)
async def test_responses_http_errors_map_to_model_errors(
    server: ScriptedServer,
    client: OpenAIResponsesClient,
    status: int,
    code: ErrorCode,
) -> None:
    server.script(RESPONSES, Answer(status=status, body={"error": {"message": "no"}}))
    with pytest.raises(ModelError) as caught:
        await client.complete(ModelRequest(transcript=[UserTurn(text="hi")]), timeout=5)
    assert (caught.value.code, caught.value.status) == (code, status)
    assert len(server.received) == 1


async def test_responses_timeout_and_unreadable_answers(
    server: ScriptedServer,
    client: OpenAIResponsesClient,
) -> None:
    server.script(
        RESPONSES,
        Answer(body=response() | {"output": "many"}),
        Answer(
            body=response(text_item("x"))
            | {"output": [{"type": "message", "content": [{"type": "output_text", "text": 3}]}]}
        ),
        Answer(body=response(), hang=True),
    )
    request = ModelRequest(transcript=[UserTurn(text="hi")])
    for _ in range(2):
        with pytest.raises(ModelError) as unreadable:
            await client.complete(request, timeout=5)
        assert unreadable.value.code is ErrorCode.FAILED_FINAL
    with pytest.raises(ModelError) as late:
        await client.complete(request, timeout=0.3)
    assert late.value.code is ErrorCode.TIMEOUT


async def test_a_plain_request_sends_no_tools_or_instructions_and_store_can_be_left_out(
    server: ScriptedServer,
) -> None:
    sdk = openai.AsyncOpenAI(base_url=f"{server.base_url}/v1", api_key="k", max_retries=0)
    client = OpenAIResponsesClient(base_url="", api_key="", model="m", client=sdk, store=None)
    server.script(RESPONSES, Answer(body=response(text_item("Hello."))))
    try:
        reply = await client.complete(ModelRequest(transcript=[UserTurn(text="hi")]), timeout=5)
        await client.aclose()
        assert not sdk.is_closed()
    finally:
        await sdk.close()
    [body] = server.bodies(RESPONSES)
    assert not {"tools", "tool_choice", "instructions", "store", "max_output_tokens"} & set(body)
    assert body["input"] == [{"type": "message", "role": "user", "content": "hi"}]
    assert (reply.text, reply.calls) == ("Hello.", ())
    assert client.name == "openai-responses/m"


async def test_definitions_for_chat_completions_are_refused_before_sending(
    server: ScriptedServer,
    client: OpenAIResponsesClient,
    registry: Registry,
    principal: Principal,
) -> None:
    chat = OpenAICompatibleClient(base_url=f"{server.base_url}/v1", api_key="k", model="m")
    try:
        chat_tools = chat.definitions(registry.exposed(principal))
    finally:
        await chat.aclose()
    with pytest.raises(ConfigurationError):
        await client.complete(
            ModelRequest(transcript=[UserTurn(text="hi")], tools=chat_tools), timeout=5
        )
    ready = client.definitions(registry.exposed(principal))
    assert ready.provider == "openai-responses"
    assert server.received == []


def test_negative_sdk_retries_are_refused() -> None:
    with pytest.raises(ConfigurationError):
        OpenAIResponsesClient(
            base_url="http://127.0.0.1:1/v1", api_key="k", model="m", max_retries=-1
        )
