"""Envelope -> CallToolResult: the same envelope a model reads, in MCP's two shapes.

`structuredContent` is the envelope's model dict (with its stable `error_type` code),
`content` one text block holding the envelope as a marked data block, and `isError`
is set for every refusal or failure. A write's NEEDS_CONFIRMATION carries what the
envelope carries, the plan id, impact and expiry; a confirmation token is never in an
envelope, so it is never here either.
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types

from handrail.envelope import Envelope
from handrail.shaping.marking import DataMarker, envelope_json

__all__ = ["call_result"]


def call_result(envelope: Envelope, marker: DataMarker) -> types.CallToolResult:
    """The CallToolResult of one envelope, its text marked as untrusted data."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=marker.mark(envelope))],
        structured_content=structured(envelope),
        is_error=envelope.error is not None,
    )


def structured(envelope: Envelope) -> dict[str, Any]:
    """`envelope.to_model_dict()` as plain JSON (a NaN or infinity reads as null)."""
    value: dict[str, Any] = json.loads(envelope_json(envelope))
    return value
