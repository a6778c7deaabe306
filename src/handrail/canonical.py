"""Canonical JSON (RFC 8785, JCS) and the content hashes built on it.

One canonical form for everything that is hashed: argument hashes in the audit log,
schema and description versions, and (later) plan hashes. JCS sorts keys, removes
insignificant whitespace, writes UTF-8 and normalises numbers as ECMAScript does.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

import rfc8785

__all__ = ["canonical_json", "content_version", "sha256_hex"]

# JCS's integer domain: what an IEEE 754 double holds exactly.
_INT_MAX = 2**53 - 1
# The standard library's string encoder (without ensure_ascii) escapes exactly what JCS
# escapes: the quote, the backslash, the short forms and \u00xx (lower case) for the
# other control characters, nothing else.
_quoted: Callable[[str], str] = json.encoder.encode_basestring
# Below U+E000, sorting by code point (Python) and by UTF-16 code unit (JCS) agree.
_FIRST_DISAGREEING = "\ue000"


def _plain(value: object) -> str | None:  # noqa: PLR0911 - one return per JSON type
    """The JCS text of `value` if it is plain JSON, else None.

    Plain: None, bool, str, int within JCS's domain, and dict (with keys that sort
    alike by code point and by UTF-16), list and tuple of plain values, all of exactly
    these types. Floats, subclasses and anything else take the general path.
    """
    kind = type(value)
    if kind is str:
        return _quoted(value)  # type: ignore[arg-type]  # a str
    if kind is int:
        return repr(value) if -_INT_MAX <= value <= _INT_MAX else None  # type: ignore[operator]
    if kind is dict:
        parts: list[str] = []
        for key in sorted(value):  # type: ignore[call-overload]  # a dict
            if type(key) is not str or not (key.isascii() or max(key) < _FIRST_DISAGREEING):
                return None
            text = _plain(value[key])  # type: ignore[index]  # a dict
            if text is None:
                return None
            parts.append(f"{_quoted(key)}:{text}")
        return "{" + ",".join(parts) + "}"
    if kind is list or kind is tuple:
        items: list[str] = []
        for item in value:  # type: ignore[attr-defined]  # a sequence
            text = _plain(item)
            if text is None:
                return None
            items.append(text)
        return "[" + ",".join(items) + "]"
    if value is None:
        return "null"
    if kind is bool:
        return "true" if value else "false"
    return None


def canonical_json(value: object) -> bytes:
    """The RFC 8785 serialisation of a JSON value.

    Raises `rfc8785.CanonicalizationError` (a ValueError) for values JSON cannot
    represent exactly, such as NaN, infinities or integers beyond 2**53.
    """
    try:
        text = _plain(value)
        if text is not None:
            return text.encode("utf-8")
    except (TypeError, UnicodeEncodeError, RecursionError):
        pass  # keys that do not sort, a lone surrogate, too deep: the general path says
    return rfc8785.dumps(value)  # type: ignore[arg-type]  # checked at run time by rfc8785


def sha256_hex(data: bytes) -> str:
    """Lower-case hex SHA-256."""
    return hashlib.sha256(data).hexdigest()


def content_version(value: object) -> str:
    """A short, stable version label derived from content: `sha256:` + 16 hex digits."""
    return "sha256:" + sha256_hex(canonical_json(value))[:16]
