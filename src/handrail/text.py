"""Text every encoder and database can hold, and one visible escape for the rest.

Owns two checks, each with an ASCII fast path: Unicode text (no lone surrogate, so it
can be written as UTF-8) and storable text (Unicode text without NUL, which PostgreSQL
text cannot hold), and the escape that makes untrusted text safe for a terminal
(`shown`). It never alters text that passes its check.
"""

from __future__ import annotations

import re

__all__ = [
    "escape_lone_surrogates",
    "escape_unstorable",
    "escaped_character",
    "is_storable",
    "is_unicode",
    "shown",
]

# A lone surrogate is not a Unicode scalar value: UTF-8 cannot encode it. JSON text may
# still spell one (`"\ud800"`), so it arrives in ids and names a provider decoded.
_SURROGATE = re.compile("[\ud800-\udfff]")
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
# C0 and C1 controls (ESC and CSI start terminal sequences), DEL, line and paragraph
# separators, bidirectional overrides and isolates, and lone surrogates.
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]",
)
_LATIN1 = 0xFF


def is_unicode(text: str) -> bool:
    """Whether `text` holds no lone surrogate, so that it can be written as UTF-8."""
    return text.isascii() or _SURROGATE.search(text) is None


def is_storable(text: str) -> bool:
    """Whether every store can hold `text`: Unicode text without NUL characters."""
    return "\x00" not in text and (text.isascii() or _SURROGATE.search(text) is None)


def _escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def escape_unstorable(text: str) -> str:
    r"""`text` with each NUL and lone surrogate written as a `\uXXXX` escape.

    The escape is for people reading a record, not a reversible encoding: text that
    already held a backslash and `u` reads the same. Storable text comes back as is.
    """
    if is_storable(text):
        return text
    return _UNSTORABLE.sub(_escape, text)


def escape_lone_surrogates(text: str) -> str:
    r"""`text` with each lone surrogate written as a `\uXXXX` escape; NUL is kept.

    For wire formats, which carry NUL as JSON does but no lone surrogate as UTF-8.
    """
    if is_unicode(text):
        return text
    return _SURROGATE.sub(_escape, text)


def escaped_character(found: re.Match[str]) -> str:
    r"""The matched character as a visible escape: `\xNN` up to Latin-1, else `\uNNNN`."""
    code = ord(found.group())
    return f"\\x{code:02x}" if code <= _LATIN1 else f"\\u{code:04x}"


def shown(text: str) -> str:
    """One line of untrusted text, safe for a terminal: every control shown escaped."""
    return _UNSAFE.sub(escaped_character, text)
