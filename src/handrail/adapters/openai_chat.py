"""OpenAI Chat Completions wire format: tool definitions out.

`{"type": "function", "function": {"name", "description", "parameters"}}` per tool,
with namespaced names mapped by `_names`. Strict-mode transforms, calls in and results
out join this module later. It never decides which tools are exposed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from handrail.adapters._common import plain_json, sendable
from handrail.spec import ToolSpec

__all__ = ["PROVIDER", "tool_definitions"]

PROVIDER = "openai-chat"


def tool_definitions(specs: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """The `tools` list of a chat completion request, for specs already exposed."""
    return [
        {
            "type": "function",
            "function": {
                "name": wire,
                "description": spec.description,
                "parameters": plain_json(spec.input_schema),
            },
        }
        for spec, wire in sendable(specs)
    ]
