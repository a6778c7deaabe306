"""Byte views of a text for the detectors: one byte per character, so offsets agree.

Owns the views (raw, lower case, character classes, token mask) and two helpers that
find needles and the lines holding them. Never decides what a finding is.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

__all__ = ["CLASSES", "TOKEN_PUNCTUATION", "Views", "finds", "lines_holding"]


def _table(mapping: Iterable[tuple[bytes, int]], default: int | None = None) -> bytes:
    table = bytearray(range(256)) if default is None else bytearray([default] * 256)
    for chars, to in mapping:
        for ch in chars:
            table[ch] = to
    return bytes(table)


_UPPER = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_LOWER = b"abcdefghijklmnopqrstuvwxyz"
_DIGITS = b"0123456789"
TOKEN_PUNCTUATION = b"+/=_-"
CLASSES = _table([(_DIGITS, ord("0")), (_UPPER, ord("A")), (_LOWER, ord("a"))])
"""ASCII digits become 0, capitals A, small letters a; the rest stays."""
_TOKEN_MASK = _table([(_UPPER + _LOWER + _DIGITS + TOKEN_PUNCTUATION, ord("x"))], ord(" "))
"""Characters of base64 (either alphabet) and hex become x; the rest a space."""


_FOLDS_TO_ASCII = "\u0130\u0131\u017f\u212a"
"""The characters a case-insensitive pattern matches as an ASCII letter (capital I with
dot and dotless i: i; long s: s; the Kelvin sign: k); the views show that letter."""
_FOLDS = str.maketrans(dict(zip(_FOLDS_TO_ASCII, "iisk", strict=True)))


@dataclass(frozen=True, slots=True)
class Views:
    """One byte per character of a text, so that byte offsets are text offsets."""

    raw: bytes
    low: bytes
    classes: bytes
    tokens: bytes

    @classmethod
    def of(cls, text: str) -> Views:
        if not text.isascii() and any(ch in text for ch in _FOLDS_TO_ASCII):
            text = text.translate(_FOLDS)
        raw = text.encode("latin-1", "replace")  # beyond latin-1: one "?" each
        return cls(
            raw=raw,
            low=raw.lower(),
            classes=raw.translate(CLASSES),
            tokens=raw.translate(_TOKEN_MASK),
        )


def finds(view: bytes, needle: bytes) -> Iterator[int]:
    at = view.find(needle)
    while at != -1:
        yield at
        at = view.find(needle, at + len(needle))


def lines_holding(text: str, anchors: Iterable[int]) -> list[tuple[int, int]]:
    """The distinct lines of `text` holding the anchors, in order, as (start, end)."""
    spans: list[tuple[int, int]] = []
    last_end = -1
    for at in sorted(anchors):
        if at < last_end:
            continue
        start = text.rfind("\n", 0, at) + 1
        end = text.find("\n", at)
        last_end = len(text) if end == -1 else end
        spans.append((start, last_end))
    return spans
