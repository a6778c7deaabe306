"""POST a model's tool calls in its provider's wire format; get the results to send back.

`POST /v1/calls/{format}` takes the assistant output a host got from its model
(`openai-chat`: an assistant message, a choice or a whole completion;
`openai-responses`: the output items or a whole response; `anthropic`: an assistant
message or its content blocks; `gemini`: a candidate's content, a candidate or a
whole response). The adapter of that format reads the calls, the gate takes each
through every check under the bearer's Principal (never anything in the body), and
the answer holds the results rendered in the same format, ready to append to the
conversation, beside Handrail's envelope of each call. `GET /v1/tools/{format}` gives
the definitions of the tools the bearer may call, in that format. The optional
`Handrail-Conversation` header names the host's conversation (its denial count), not
anyone's identity.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict
from starlette.responses import JSONResponse, Response

from handrail.adapters import (
    AnthropicAdapter,
    GeminiAdapter,
    OpenAIChatAdapter,
    OpenAIResponsesAdapter,
    UntranslatableError,
)
from handrail.errors import ConfigurationError, ErrorCode
from handrail.server.auth import ApiPrincipal, services_of
from handrail.server.idempotency import HEADER as IDEMPOTENCY_HEADER
from handrail.server.idempotency import parse_key
from handrail.server.problems import ServiceCode, problem

if TYPE_CHECKING:
    from handrail.adapters import Adapter
    from handrail.calls import ToolCall
    from handrail.envelope import Envelope

__all__ = ["CONVERSATION_HEADER", "MAX_CALLS", "CallsAnswer", "WireFormat", "router"]

CONVERSATION_HEADER = "handrail-conversation"
MAX_CALLS = 64
"""The most tool calls one posted turn may carry; more is refused whole."""
_CONVERSATION = re.compile(r"[A-Za-z0-9._:@/+=-]{1,256}")

router = APIRouter(tags=["calls"])


class WireFormat(StrEnum):
    """The provider wire formats the service reads and answers in."""

    OPENAI_CHAT = "openai-chat"
    OPENAI_RESPONSES = "openai-responses"
    ANTHROPIC = "anthropic"
    GEMINI = "gemini"


_ADAPTERS: Mapping[WireFormat, Callable[[], Adapter]] = {
    WireFormat.OPENAI_CHAT: lambda: OpenAIChatAdapter(strict=False),
    WireFormat.OPENAI_RESPONSES: lambda: OpenAIResponsesAdapter(strict=False),
    WireFormat.ANTHROPIC: lambda: AnthropicAdapter(strict=False),
    WireFormat.GEMINI: GeminiAdapter,
}


class CallsAnswer(BaseModel):
    """What `POST /v1/calls/{format}` answers."""

    model_config = ConfigDict(frozen=True)

    format: WireFormat
    results: list[dict[str, Any]]
    """The messages (OpenAI Chat), items (Responses) or contents (Anthropic, Gemini)
    that carry the results back to the model, in the posted format, by call id."""
    envelopes: list[dict[str, Any]]
    """Handrail's envelope of each call, in call order, with its `call_id` and `tool`."""


class ToolsAnswer(BaseModel):
    """What `GET /v1/tools/{format}` answers."""

    model_config = ConfigDict(frozen=True)

    format: WireFormat
    tools: list[dict[str, Any]]
    """The tool definitions to put in the provider request, as that provider takes them."""


_BODY_DOC: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "The model's assistant output in the provider's wire format.",
        "content": {
            "application/json": {
                "schema": {"oneOf": [{"type": "object"}, {"type": "array"}]},
                "example": {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "tool_use",
                            "id": "toolu_1",
                            "name": "payments__get_order",
                            "input": {"order_id": "ORD-1001"},
                        }
                    ],
                },
            }
        },
    }
}


@router.get("/tools/{wire}", response_model=ToolsAnswer)
async def list_tools(wire: WireFormat, request: Request, principal: ApiPrincipal) -> Response:
    """The definitions of the tools this bearer may call, in the provider's format."""
    adapter = _ADAPTERS[wire]()
    specs = services_of(request).handrail.registry.exposed(principal)
    payload = adapter.tool_definitions(specs).payload
    return JSONResponse({"format": wire.value, "tools": payload})


@router.post(
    "/calls/{wire}",
    response_model=CallsAnswer,
    openapi_extra=_BODY_DOC,
    responses={
        415: {"description": "UNSUPPORTED_MEDIA_TYPE: the body is not JSON"},
        422: {"description": "INVALID_ARGUMENTS: the body is not that format's assistant output"},
    },
)
async def post_calls(wire: WireFormat, request: Request, principal: ApiPrincipal) -> Response:
    """Run the tool calls of one model turn and answer their results in the same format.

    Every call goes through the gate as the bearer's Principal: a refusal is a result
    (an envelope with its code), not an HTTP error. Writes answer NEEDS_CONFIRMATION
    with a plan a person confirms (`/v1/plans`).
    """
    if not _json_media(request.headers.get("content-type", "")):
        return problem(ServiceCode.UNSUPPORTED_MEDIA_TYPE, "the body must be application/json")
    conversation = request.headers.get(CONVERSATION_HEADER)
    if conversation is not None and not _CONVERSATION.fullmatch(conversation):
        return problem(
            ErrorCode.INVALID_ARGUMENTS,
            "Handrail-Conversation is 1 to 256 letters, digits or ._:@/+=-",
        )
    try:
        document = json.loads(await request.body())
    except (ValueError, RecursionError):
        return problem(ErrorCode.INVALID_ARGUMENTS, "the body is not JSON")
    services = services_of(request)
    adapter = _ADAPTERS[wire]()
    turn = _turn_key(request, services.new_id)
    try:
        calls = _parse(wire, adapter, document, turn)
    except (UntranslatableError, ConfigurationError):
        return problem(
            ErrorCode.INVALID_ARGUMENTS, f"the body is not {wire.value} assistant output"
        )
    if len(calls) > MAX_CALLS:
        return problem(ErrorCode.INVALID_ARGUMENTS, f"a turn carries at most {MAX_CALLS} calls")
    envelopes = await services.handrail.gate.handle_batch(
        calls,
        principal,
        timeout=services.config.server.request_timeout_seconds,
        conversation=conversation,
    )
    return JSONResponse(
        {
            "format": wire.value,
            "results": adapter.render_results(calls, envelopes),
            "envelopes": [_envelope(e) for e in envelopes],
        }
    )


def _json_media(content_type: str) -> bool:
    media = content_type.partition(";")[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


def _turn_key(request: Request, new_id: Callable[[], str]) -> str:
    """What keys Gemini's id-less calls: the Idempotency-Key (a retry, same ids), else new."""
    header = request.headers.get(IDEMPOTENCY_HEADER)
    key = None if header is None else parse_key(header)
    return key if key is not None else new_id()


def _parse(wire: WireFormat, adapter: Adapter, document: object, turn: str) -> list[ToolCall]:
    """The calls of `document`, after wrapping the shorter forms each format allows."""
    if not isinstance(document, dict | list) or (
        isinstance(document, list) and wire in {WireFormat.OPENAI_CHAT, WireFormat.GEMINI}
    ):
        raise UntranslatableError(f"a {wire.value} body is an object")
    match wire:
        case WireFormat.ANTHROPIC if isinstance(document, list):
            document = {"role": "assistant", "content": document}
        case WireFormat.GEMINI:
            if isinstance(document, dict) and "candidates" not in document:
                candidate = document if "content" in document else {"content": document}
                document = {"candidates": [candidate]}
            return GeminiAdapter().parse_calls(document, turn=turn)
        case _:
            pass
    return adapter.parse_calls(document)


def _envelope(envelope: Envelope) -> dict[str, Any]:
    return {"call_id": envelope.call_id, "tool": envelope.tool, **envelope.to_model_dict()}
