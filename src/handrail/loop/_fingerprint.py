"""What makes two tool calls identical for the budget's breaker: their arguments' hash.

`arguments_fingerprint` hashes a call's arguments in canonical form, so equal JSON
values hash equally however they were spelled. The budget counts calls by it, and the
run log recounts them from stored calls. It never decides whether a call may run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from handrail.canonical import canonical_json, sha256_hex

__all__ = ["arguments_fingerprint"]

_MAX_FINGERPRINT_TEXT = 1 << 20  # longer argument text is hashed as it is, never parsed


def arguments_fingerprint(arguments: str | bytes | Mapping[str, object] | None) -> str:
    """A stable hash of a call's arguments: equal JSON values hash equally.

    JSON text and decoded objects are hashed in canonical form (RFC 8785), so key order
    and whitespace do not matter, and no arguments equal `{}`. Anything that is not
    canonical JSON (malformed or oversized text, NaN) is hashed as it was sent.
    """
    if arguments is None or (isinstance(arguments, str | bytes) and not arguments):
        arguments = {}
    value: object
    if isinstance(arguments, str | bytes):
        raw = (
            arguments.encode("utf-8", "surrogatepass") if isinstance(arguments, str) else arguments
        )
        if len(raw) > _MAX_FINGERPRINT_TEXT:
            return "raw:" + sha256_hex(raw)
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):
            return "raw:" + sha256_hex(raw)
    else:
        value = arguments
    try:
        return "json:" + sha256_hex(canonical_json(_plain(value)))
    except (ValueError, TypeError, RecursionError):
        return "raw:" + sha256_hex(repr(arguments).encode("utf-8", "surrogatepass"))


def _plain(value: object) -> object:
    """Mappings as dicts, so a MappingProxyType canonicalises like the dict it wraps."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value
