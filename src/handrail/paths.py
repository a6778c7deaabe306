"""Places in a JSON document, named the way Handrail names them everywhere.

Owns `json_path` (the JSONPath of a field error, `$.items[2].name`, which the model reads)
and `escape_pointer` (one RFC 6901 token of a JSON Pointer, as schemas use them). Pure
functions; never reads a schema.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

__all__ = ["escape_pointer", "json_path"]


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def json_path(parts: Iterable[str | int]) -> str:
    """A JSONPath for a location: `$.items[2].name`; odd keys as `$["a b"]`, clipped."""
    out = "$"
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _IDENTIFIER.fullmatch(part):
            out += f".{part}"
        else:
            out += f"[{json.dumps(part[:64], ensure_ascii=False)}]"
    return out


def escape_pointer(token: str) -> str:
    """One JSON Pointer reference token (RFC 6901): `~` as `~0`, `/` as `~1`."""
    return token.replace("~", "~0").replace("/", "~1")
