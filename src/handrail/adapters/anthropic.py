"""Anthropic Messages wire format: tool definitions out.

`{"name", "description", "input_schema"}` per tool, with namespaced names mapped by
`_names`. Tool-use blocks in and tool results out join this module later. It never
decides which tools are exposed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from handrail.adapters._common import plain_json, sendable
from handrail.spec import ToolSpec

__all__ = ["PROVIDER", "tool_definitions"]

PROVIDER = "anthropic"


def tool_definitions(specs: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """The `tools` list of a Messages request, for specs already exposed."""
    return [
        {
            "name": wire,
            "description": spec.description,
            "input_schema": plain_json(spec.input_schema),
        }
        for spec, wire in sendable(specs)
    ]
