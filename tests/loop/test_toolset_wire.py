"""A found tool reaches the provider's wire: the next request's `tools` declare it.

The loop runs with each real SDK client (OpenAI Chat Completions, Responses,
Anthropic Messages) against a scripted server on 127.0.0.1 (`_scripted_server`): the
model searches, then calls the found tool, then answers. The first request does not
declare the deferred tool; the second and third do, in the provider's own shape.
Gemini has no client here: its definitions are checked in `test_toolset`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _agent_worker import ALICE, World, world
from _scripted_server import Answer, ScriptedServer, scripted_server

from _toolset_tools import Catalogue, register_catalogue
from handrail.loop.agent import RunStatus
from handrail.loop.budgets import RunBudget
from handrail.loop.models import (
    AnthropicClient,
    ModelClient,
    OpenAICompatibleClient,
    OpenAIResponsesClient,
)
from handrail.store import MemoryStore

pytestmark = pytest.mark.anyio

SEARCH = ("c1", "search_tools", {"query": "billing"})
LOOKUP = ("c2", "billing_lookup", {"account": "a-1"})
DONE = "INV-7 is open."


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with scripted_server() as running:
        yield running


@pytest.fixture
def made(tmp_path: Path) -> World:
    built = world(MemoryStore(), tmp_path / "effects.txt")
    register_catalogue(built.gate.registry, Catalogue(found={"billing": ["billing_lookup"]}))
    return built


def _chat(call: tuple[str, str, dict[str, Any]] | None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": DONE if call is None else None}
    if call is not None:
        function = {"name": call[1], "arguments": json.dumps(call[2])}
        message["tool_calls"] = [{"id": call[0], "type": "function", "function": function}]
    return {
        "id": "chatcmpl-local",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "stop" if call is None else "tool_calls",
            }
        ],
    }


def _responses(call: tuple[str, str, dict[str, Any]] | None) -> dict[str, Any]:
    if call is None:
        text = {"type": "output_text", "text": DONE, "annotations": []}
        item: dict[str, Any] = {
            "id": "m1",
            "type": "message",
            "role": "assistant",
            "content": [text],
        }
    else:
        item = {
            "id": f"fc_{call[0]}",
            "type": "function_call",
            "call_id": call[0],
            "name": call[1],
            "arguments": json.dumps(call[2]),
            "status": "completed",
        }
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1_700_000_000,
        "model": "m",
        "status": "completed",
        "incomplete_details": None,
        "error": None,
        "output": [item],
        "usage": {
            "input_tokens": 1,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 1,
            "total_tokens": 2,
        },
    }


def _messages(call: tuple[str, str, dict[str, Any]] | None) -> dict[str, Any]:
    block: dict[str, Any] = (
        {"type": "text", "text": DONE}
        if call is None
        else {"type": "tool_use", "id": call[0], "name": call[1], "input": call[2]}
    )
    return {
        "id": "msg_local",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [block],
        "stop_reason": "end_turn" if call is None else "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


def _client(kind: str, server: ScriptedServer) -> tuple[ModelClient, str, Any]:
    url = server.base_url
    if kind == "chat":
        chat = OpenAICompatibleClient(base_url=f"{url}/v1", api_key="k", model="m")
        return chat, "/v1/chat/completions", _chat
    if kind == "responses":
        made = OpenAIResponsesClient(base_url=f"{url}/v1", api_key="k", model="m")
        return made, "/v1/responses", _responses
    claude = AnthropicClient(api_key="k", model="m", base_url=url)
    return claude, "/v1/messages", _messages


def _declared(body: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] if "function" in t else t["name"] for t in body.get("tools", [])}


@pytest.mark.parametrize("kind", ["chat", "responses", "anthropic"])
async def test_the_request_after_a_search_declares_the_found_tool(
    made: World, server: ScriptedServer, kind: str
) -> None:
    client, path, body = _client(kind, server)
    server.script(path, *(Answer(body=body(step)) for step in (SEARCH, LOOKUP, None)))
    loop = made.loop(client, RunBudget(max_steps=5, deadline_seconds=60.0))
    try:
        outcome = await loop.run("Which invoices are open?", ALICE, run_id="r1")
    finally:
        await client.aclose()  # type: ignore[attr-defined]
    assert outcome.status is RunStatus.FINISHED
    first, second, third = (_declared(b) for b in server.bodies(path))
    assert "search_tools" in first
    assert "billing_lookup" not in first
    assert second == third == first | {"billing_lookup"}
