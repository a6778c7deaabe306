"""Envelope -> CallToolResult: the same envelope a model reads, in MCP's two shapes.

`structuredContent` is the envelope's model dict (with its stable `error_type` code),
`content` one text block holding the envelope as a marked data block, and `isError`
is set for every refusal or failure. A write's NEEDS_CONFIRMATION carries what the
envelope carries, the plan id, impact and expiry; a confirmation token is never in an
envelope, so it is never here either.
"""

from __future__ import annotations

import json
import re
from typing import Any

import mcp_types as types

from handrail.envelope import Envelope
from handrail.shaping.marking import DataMarker, envelope_json
from handrail.text import escape_lone_surrogates

__all__ = ["call_result"]


def call_result(envelope: Envelope, marker: DataMarker) -> types.CallToolResult:
    """The CallToolResult of one envelope, its text marked as untrusted data."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=marker.mark(envelope))],
        structured_content=structured(envelope),
        is_error=envelope.error is not None,
    )


def structured(envelope: Envelope) -> dict[str, Any]:
    r"""`envelope.to_model_dict()` as plain JSON (a NaN or infinity reads as null).

    A lone surrogate (which a model may send in a name or an argument that a refusal
    quotes) cannot go out as UTF-8: it is written as its `\uXXXX` text instead.
    """
    text = envelope_json(envelope)
    value: dict[str, Any] = json.loads(text)
    if _SURROGATE_ESCAPE.search(text):
        return {key: _unicode(item) for key, item in value.items()}
    return value


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _unicode(value: object) -> Any:  # noqa: ANN401 - a JSON value of any shape
    """`value` with every lone surrogate in its strings and keys written as an escape."""
    if isinstance(value, str):
        return escape_lone_surrogates(value)
    if isinstance(value, dict):
        return {escape_lone_surrogates(str(k)): _unicode(item) for k, item in value.items()}
    if isinstance(value, list):
        return [_unicode(item) for item in value]
    return value
