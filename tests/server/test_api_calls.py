"""POST /v1/calls/{format}: a model turn in each provider's wire format, through the gate.

Each format's answer is checked against the official SDK's types (what the host sends
back to its model), results are matched by call id, the Principal is the bearer's
alone, and a body that is not the format's assistant output is refused with its code.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from _service import asgi_client, key_for
from anthropic.types import Message, MessageParam, ToolResultBlockParam
from google.genai import types as genai
from openai.types.chat import ChatCompletion, ChatCompletionToolMessageParam
from openai.types.responses import Response, ResponseInputParam
from pydantic import TypeAdapter

from handrail.server import create_app
from handrail.server.api.calls import MAX_CALLS
from handrail.server.services import Services
from handrail.shaping.marking import read_block

pytestmark = pytest.mark.anyio

READER = frozenset({"order.read"})
STAFF = frozenset({"order.read", "order.refund"})
GET = ("payments__get_order", {"order_id": "ORD-1001"})
TIMELINE = ("payments__order_timeline", {"order_id": "ORD-1001"})
REFUND = ("payments__refund_order", {"order_id": "ORD-1001", "amount_cents": 500})


def chat(*calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call_{n}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            for n, (name, args) in enumerate(calls)
        ],
    }


def responses(*calls: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function_call",
            "id": f"fc_{n}",
            "call_id": f"call_{n}",
            "name": name,
            "arguments": json.dumps(args),
            "status": "completed",
        }
        for n, (name, args) in enumerate(calls)
    ]


def anthropic(*calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": f"toolu_{n}", "name": name, "input": args}
            for n, (name, args) in enumerate(calls)
        ],
    }


def gemini(*calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "role": "model",
        "parts": [{"functionCall": {"name": name, "args": args}} for name, args in calls],
    }


BODIES = {
    "openai-chat": chat,
    "openai-responses": responses,
    "anthropic": anthropic,
    "gemini": gemini,
}


def shown(result_text: str) -> dict[str, Any]:
    """The envelope the model reads inside a result's data block."""
    block = read_block(result_text)
    assert block is not None
    found: dict[str, Any] = json.loads(block.body)
    return found


def conforms(wire: str, results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The results are valid as the SDK's input types; the envelopes they carry."""
    if wire == "openai-chat":
        for message in results:
            TypeAdapter(ChatCompletionToolMessageParam).validate_python(message, strict=True)
        return [shown(m["content"]) for m in results]
    if wire == "openai-responses":
        TypeAdapter(ResponseInputParam).validate_python(results)
        return [shown(item["output"]) for item in results]
    if wire == "anthropic":
        [message] = results
        TypeAdapter(MessageParam).validate_python(message)
        for block in message["content"]:
            TypeAdapter(ToolResultBlockParam).validate_python(block, strict=True)
        return [shown(block["content"]) for block in message["content"]]
    [content] = results
    parsed = genai.Content.model_validate(content)
    assert parsed.role == "user"
    return [
        shown(next(iter(part["functionResponse"]["response"].values())))
        for part in content["parts"]
    ]


@pytest.mark.parametrize("wire", list(BODIES))
async def test_a_turn_of_two_reads_runs_and_answers_in_the_same_format(
    services: Services, wire: str
) -> None:
    token = key_for(services, permissions=READER)
    async with asgi_client(create_app(services), token) as client:
        answer = await client.post(f"/v1/calls/{wire}", json=BODIES[wire](GET, TIMELINE))
    assert answer.status_code == 200
    body = answer.json()
    assert body["format"] == wire
    envelopes = conforms(wire, body["results"])
    assert [e["status"] for e in envelopes] == ["ok", "ok"]
    assert envelopes[0]["data"]["order_id"] == "ORD-1001"
    assert [e["tool"] for e in body["envelopes"]] == [
        "payments.get_order",
        "payments.order_timeline",
    ]
    assert [e["status"] for e in body["envelopes"]] == ["ok", "ok"]


async def test_whole_sdk_responses_are_read_as_well_as_their_assistant_parts(
    services: Services,
) -> None:
    completion = ChatCompletion.model_validate(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": chat(GET)}],
        }
    )
    response = Response.model_validate(
        {
            "id": "resp_1",
            "object": "response",
            "created_at": 1,
            "model": "m",
            "status": "completed",
            "output": responses(GET),
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
        }
    )
    message = Message.model_validate(
        {
            **anthropic(GET),
            "id": "msg_1",
            "type": "message",
            "model": "m",
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }
    )
    generated = genai.GenerateContentResponse.model_validate(
        {"responseId": "r-1", "candidates": [{"finishReason": "STOP", "content": gemini(GET)}]}
    )
    posts = {
        "openai-chat": completion.model_dump(mode="json"),
        "openai-responses": response.model_dump(mode="json"),
        "anthropic": message.model_dump(mode="json"),
        "gemini": generated.model_dump(mode="json", by_alias=True, exclude_none=True),
    }
    token = key_for(services, permissions=READER)
    async with asgi_client(create_app(services), token) as client:
        for wire, body in posts.items():
            answer = await client.post(f"/v1/calls/{wire}", json=body)
            assert answer.status_code == 200, wire
            assert [e["status"] for e in answer.json()["envelopes"]] == ["ok"], wire


async def test_anthropic_content_blocks_alone_and_a_gemini_candidate_are_read(
    services: Services,
) -> None:
    token = key_for(services, permissions=READER)
    async with asgi_client(create_app(services), token) as client:
        blocks = await client.post("/v1/calls/anthropic", json=anthropic(GET)["content"])
        candidate = await client.post("/v1/calls/gemini", json={"content": gemini(GET)})
    assert [e["status"] for e in blocks.json()["envelopes"]] == ["ok"]
    assert [e["status"] for e in candidate.json()["envelopes"]] == ["ok"]


async def test_gemini_calls_without_ids_get_the_same_ids_under_the_same_idempotency_key(
    services: Services,
) -> None:
    token = key_for(services, permissions=READER)
    async with asgi_client(create_app(services), token) as client:
        first = await client.post(
            "/v1/calls/gemini", json=gemini(GET, GET), headers={"Idempotency-Key": '"t-1"'}
        )
        other = await client.post(
            "/v1/calls/gemini", json=gemini(GET, GET), headers={"Idempotency-Key": '"t-2"'}
        )
    ids = [e["call_id"] for e in first.json()["envelopes"]]
    assert len(set(ids)) == 2
    assert all(i.startswith("gemini_") for i in ids)
    assert set(ids).isdisjoint(e["call_id"] for e in other.json()["envelopes"])


async def test_a_write_answers_a_plan_to_confirm_and_runs_nothing(services: Services) -> None:
    token = key_for(services, permissions=STAFF)
    async with asgi_client(create_app(services), token) as client:
        answer = await client.post("/v1/calls/anthropic", json=anthropic(REFUND))
    [envelope] = answer.json()["envelopes"]
    assert envelope["error_type"] in {"NEEDS_CONFIRMATION", "NEEDS_APPROVAL"}
    assert services.handrail.store.list_executions(tenant_id="acme") == []


async def test_the_principal_is_the_bearers_whatever_the_body_says(services: Services) -> None:
    token = key_for(services, tenant="globex", user="gina", permissions=READER)
    body = anthropic(("payments__get_order", {"order_id": "ORD-1001", "tenant_id": "acme"}))
    async with asgi_client(create_app(services), token) as client:
        answer = await client.post("/v1/calls/anthropic", json=body)
        plain = await client.post("/v1/calls/anthropic", json=anthropic(GET))
    [smuggled] = answer.json()["envelopes"]
    assert smuggled["error_type"] == "INVALID_ARGUMENTS"
    [envelope] = plain.json()["envelopes"]
    assert envelope["error_type"] == "NOT_FOUND"


async def test_a_tool_the_bearer_may_not_use_is_refused_inside_the_answer(
    services: Services,
) -> None:
    token = key_for(services, permissions=frozenset())
    async with asgi_client(create_app(services), token) as client:
        answer = await client.post("/v1/calls/openai-chat", json=chat(GET))
    assert answer.status_code == 200
    [envelope] = answer.json()["envelopes"]
    assert envelope["error_type"] in {"UNKNOWN_TOOL", "PERMISSION_DENIED"}


async def test_a_turn_without_calls_answers_nothing_to_run(services: Services) -> None:
    token = key_for(services, permissions=READER)
    async with asgi_client(create_app(services), token) as client:
        answer = await client.post(
            "/v1/calls/openai-chat", json={"role": "assistant", "content": "hi"}
        )
    assert answer.json() == {"format": "openai-chat", "results": [], "envelopes": []}


@pytest.mark.parametrize(
    ("wire", "content", "headers", "status", "code"),
    [
        ("anthropic", b"{}", {}, 422, "INVALID_ARGUMENTS"),
        ("anthropic", b"not json", {}, 422, "INVALID_ARGUMENTS"),
        ("anthropic", b"[" * 100_000, {}, 422, "INVALID_ARGUMENTS"),
        ("gemini", b"[1, 2]", {}, 422, "INVALID_ARGUMENTS"),
        ("openai-chat", b"42", {}, 422, "INVALID_ARGUMENTS"),
        ("openai-responses", b'"text"', {}, 422, "INVALID_ARGUMENTS"),
        ("anthropic", b"{}", {"content-type": "text/plain"}, 415, "UNSUPPORTED_MEDIA_TYPE"),
        (
            "anthropic",
            b"{}",
            {"content-type": "application/x-www-form-urlencoded"},
            415,
            "UNSUPPORTED_MEDIA_TYPE",
        ),
        ("cohere", b"{}", {}, 422, "INVALID_ARGUMENTS"),
        ("anthropic", b"{}", {"handrail-conversation": "a b"}, 422, "INVALID_ARGUMENTS"),
        ("anthropic", b"{}", {"handrail-conversation": "x" * 257}, 422, "INVALID_ARGUMENTS"),
    ],
)
async def test_a_body_that_is_not_the_formats_output_is_refused_with_its_code(
    services: Services,
    wire: str,
    content: bytes,
    headers: dict[str, str],
    status: int,
    code: str,
) -> None:
    token = key_for(services, permissions=READER)
    sent = {"content-type": "application/json", **headers}
    async with asgi_client(create_app(services), token) as client:
        answer = await client.post(f"/v1/calls/{wire}", content=content, headers=sent)
    assert answer.status_code == status
    assert answer.json()["error"]["code"] == code


async def test_a_turn_of_too_many_calls_is_refused_whole(services: Services) -> None:
    token = key_for(services, permissions=READER)
    body = anthropic(*[GET] * (MAX_CALLS + 1))
    async with asgi_client(create_app(services), token) as client:
        answer = await client.post("/v1/calls/anthropic", json=body)
    assert answer.status_code == 422
    assert answer.json()["error"]["code"] == "INVALID_ARGUMENTS"
    services.handrail.audit.flush()  # type: ignore[union-attr]
    assert not any(e.tool_call_id for e in services.handrail.store.read_audit(tenant_id="acme"))


async def test_a_conversation_header_names_the_conversation_of_the_calls(
    services: Services,
) -> None:
    token = key_for(services, permissions=READER)
    async with asgi_client(create_app(services), token) as client:
        answer = await client.post(
            "/v1/calls/anthropic", json=anthropic(GET), headers={"Handrail-Conversation": "c-42"}
        )
    assert answer.status_code == 200


@pytest.mark.parametrize("wire", list(BODIES))
async def test_the_tool_definitions_are_those_the_bearer_may_use(
    services: Services, wire: str
) -> None:
    token = key_for(services, permissions=READER)
    async with asgi_client(create_app(services), token) as client:
        answer = await client.get(f"/v1/tools/{wire}")
    text = json.dumps(answer.json()["tools"])
    assert "payments__get_order" in text
    assert "payments__refund_order" not in text


async def test_calls_without_a_bearer_are_refused_and_nothing_runs(services: Services) -> None:
    async with asgi_client(create_app(services)) as client:
        answer = await client.post("/v1/calls/anthropic", json=anthropic(GET))
    assert answer.status_code == 401
    assert answer.json()["error"]["code"] == "UNAUTHENTICATED"
    assert answer.headers["www-authenticate"].startswith("Bearer")
