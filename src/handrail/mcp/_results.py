"""Envelope -> CallToolResult: the same envelope a model reads, in MCP's two shapes.

`structuredContent` is the envelope's model dict (with its stable `error_type` code),
`content` one text block holding the envelope as a marked data block, and `isError`
is set for every refusal or failure. A write's NEEDS_CONFIRMATION carries what the
envelope carries, the plan id, impact and expiry; a confirmation token is never in an
envelope, so it is never here either.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import mcp_types as types

from handrail.envelope import Envelope
from handrail.shaping.marking import DataMarker
from handrail.text import escape_lone_surrogates

__all__ = ["call_result"]


def call_result(envelope: Envelope, marker: DataMarker) -> types.CallToolResult:
    r"""The CallToolResult of one envelope, its text marked as untrusted data.

    `structuredContent` is `envelope.to_model_dict()`, whose values are JSON already
    (shaping made them so); on the wire the SDK writes a NaN or infinity that slipped
    into `data` as null, as the marked text does. The marked body is the envelope's
    JSON: only when it escaped a lone surrogate (which a model may send in a name or an
    argument a refusal quotes) does the dict hold a string that cannot go out as UTF-8;
    then each such string is written as its `\uXXXX` text (the rare, slow case).
    """
    text = marker.mark(envelope)
    content = envelope.to_model_dict()
    if _SURROGATE_ESCAPE.search(text):
        content = {key: _unicode(item) for key, item in content.items()}
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=content,
        is_error=envelope.error is not None,
    )


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _unicode(value: object) -> Any:  # noqa: ANN401 - a JSON value of any shape
    """`value` with every lone surrogate in its strings and keys written as an escape."""
    if isinstance(value, str):
        return escape_lone_surrogates(value)
    if isinstance(value, Mapping):
        return {escape_lone_surrogates(str(k)): _unicode(item) for k, item in value.items()}
    if isinstance(value, list | tuple):
        return [_unicode(item) for item in value]
    return value
