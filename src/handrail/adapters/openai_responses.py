"""OpenAI Responses wire format: tool definitions out.

`{"type": "function", "name", "description", "parameters", "strict": false}` per tool.
The Responses API treats an absent `strict` as true, which our schemas (optional
fields, defaults) do not satisfy yet, so it is sent explicitly until the strict-mode
transform exists. It never decides which tools are exposed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from handrail.adapters._common import plain_json, sendable
from handrail.spec import ToolSpec

__all__ = ["PROVIDER", "tool_definitions"]

PROVIDER = "openai-responses"


def tool_definitions(specs: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """The `tools` list of a Responses request, for specs already exposed."""
    return [
        {
            "type": "function",
            "name": wire,
            "description": spec.description,
            "parameters": plain_json(spec.input_schema),
            "strict": False,
        }
        for spec, wire in sendable(specs)
    ]
