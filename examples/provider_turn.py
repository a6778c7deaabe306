"""One model turn in each provider's wire format, through the bookstore's Gate.

The model's responses are written out here as each provider documents them (no model
runs): each holds two parallel calls. Every adapter exports the exposed tools, parses
the calls, the Gate runs them, and the adapter renders the results back, matched by id.

    .venv/bin/python -m examples.provider_turn
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from examples.bookstore.app import build_app
from handrail import Principal
from handrail.adapters import (
    Adapter,
    AnthropicAdapter,
    GeminiAdapter,
    OpenAIChatAdapter,
    OpenAIResponsesAdapter,
    ToolChoice,
)

ALICE = Principal(
    user_id="alice",
    tenant_id="acme",
    permissions=frozenset({"inventory.read", "orders.read"}),
)
SEARCH = ("bookstore__search_books", {"query": "austen", "limit": 2})
STATUS = ("bookstore__order_status", {"order_id": "ORD-1001"})

RESPONSES: dict[str, dict[str, Any]] = {
    "openai-chat": {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "any",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": f"call_{n}",
                            "type": "function",
                            "function": {"name": name, "arguments": json.dumps(args)},
                        }
                        for n, (name, args) in enumerate((SEARCH, STATUS))
                    ],
                },
            },
        ],
    },
    "openai-responses": {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "model": "any",
        "status": "completed",
        "output": [
            {
                "type": "function_call",
                "id": f"fc_{n}",
                "call_id": f"call_{n}",
                "name": name,
                "arguments": json.dumps(args),
                "status": "completed",
            }
            for n, (name, args) in enumerate((SEARCH, STATUS))
        ],
    },
    "anthropic": {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "any",
        "stop_reason": "tool_use",
        "content": [
            {"type": "tool_use", "id": f"toolu_{n}", "name": name, "input": args}
            for n, (name, args) in enumerate((SEARCH, STATUS))
        ],
        "usage": {"input_tokens": 1, "output_tokens": 1},
    },
    "gemini": {
        "responseId": "r-1",
        "candidates": [
            {
                "finishReason": "STOP",
                "content": {
                    "role": "model",
                    "parts": [
                        {"functionCall": {"name": name, "args": args}}
                        for name, args in (SEARCH, STATUS)
                    ],
                },
            },
        ],
    },
}

ADAPTERS: dict[str, Adapter] = {
    "openai-chat": OpenAIChatAdapter(strict=True),
    "openai-responses": OpenAIResponsesAdapter(strict=True),
    "anthropic": AnthropicAdapter(strict=False),
    "gemini": GeminiAdapter(),
}


async def run_turn(provider: str, database: Path) -> list[dict[str, Any]]:
    """Export, parse, run and render one turn of `provider`; returns what goes back."""
    app = build_app(database=database)
    app.database.reset()
    gate = app.gate()
    adapter = ADAPTERS[provider]
    definitions = adapter.tool_definitions(app.registry.exposed(ALICE))
    adapter.tool_choice(ToolChoice())
    calls = adapter.parse_calls(RESPONSES[provider], definitions=definitions)
    envelopes = await gate.handle_batch(calls, ALICE)
    return adapter.render_results(calls, envelopes)


def main() -> None:
    """Print what each provider's model would be sent back."""
    with tempfile.TemporaryDirectory() as folder:
        for provider in RESPONSES:
            rendered = asyncio.run(run_turn(provider, Path(folder) / f"{provider}.db"))
            print(f"--- {provider}")
            print(json.dumps(rendered, indent=1, ensure_ascii=False)[:1200])


if __name__ == "__main__":
    main()
