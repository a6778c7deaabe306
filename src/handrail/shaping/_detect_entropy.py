"""The detector of random-looking tokens (high entropy): API keys of no known format.

Runs of twenty or more token characters are found in the token view; a run, or a part
of it (a path segment, the value of key=value), counts if it looks random rather than
like a word, a name, a path or a number. Never decides what happens to a finding.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterator

from handrail.shaping._candidates import RANK_ENTROPY, Candidate
from handrail.shaping._views import CLASSES, TOKEN_PUNCTUATION, Views
from handrail.shaping.findings import Kind

__all__ = ["high_entropy"]


_MIN_TOKEN = 20
_TOKEN_RUN = b"x" * _MIN_TOKEN
_HEX_TOKEN = re.compile(r"(?:0x)?[0-9a-fA-F-]+")
_HEX_ENTROPY = 3.0
_MAX_ENTROPY_THRESHOLD = 4.3
_ENTROPY_MARGIN = 0.9
"""A token must come within this many bits of log2(length), the most its length allows."""
_CLASS_RUN = re.compile(rb"A+|a+|0+")
_WORD = re.compile(r"[A-Z]?[a-z]{3,}|[A-Z]{4,}")
_WORDINESS_WEIGHT = 0.6
_MIN_SWITCHING = 0.14
_PATH_OR_PAIR = re.compile(r"[/=]")


def high_entropy(
    text: str, views: Views, found: list[Candidate], *, hex_tokens: bool
) -> list[tuple[int, int]]:
    """Record random-looking tokens; return every run of 20 or more token characters."""
    tokens, classes = views.tokens, views.classes
    runs: list[tuple[int, int]] = []
    at = tokens.find(_TOKEN_RUN)
    while at != -1:
        end = tokens.find(b" ", at + _MIN_TOKEN)
        if end == -1:
            end = len(tokens)
        runs.append((at, end))
        shape = classes[at:end]
        if hex_tokens or (b"A" in shape and b"a" in shape and b"0" in shape):
            found.extend(
                (RANK_ENTROPY, start, stop, Kind.HIGH_ENTROPY)
                for start, stop in _pieces(text, at, end, hex_tokens=hex_tokens)
            )
        at = tokens.find(_TOKEN_RUN, end)
    return runs


def _pieces(text: str, start: int, end: int, *, hex_tokens: bool) -> Iterator[tuple[int, int]]:
    """The random-looking token without its padding, or else its random-looking parts.

    Parts are the values of key=value pairs and the segments of a path.
    """
    while end > start and text[end - 1] == "=":
        end -= 1
    token = text[start:end]
    if "=" not in token and _random(token, hex_tokens=hex_tokens):
        yield start, end
        return
    at = start
    for part in _PATH_OR_PAIR.split(token):
        if len(part) < len(token) and _random(part, hex_tokens=hex_tokens):
            yield at, at + len(part)
        at += len(part) + 1


def _random(token: str, *, hex_tokens: bool) -> bool:
    """Whether a token looks random rather than like a word, name, path or number.

    Base64 alphabets: mixed case and digits, entropy near that of random text of its
    length, and frequent switches between character classes that words (camelCase,
    snake_case, paths) do not have. Tuned on random tokens of 20 to 64 characters
    (about 97% of those with mixed case and digits found) against the source of the
    packages in this environment.
    """
    if len(token) < _MIN_TOKEN:
        return False
    if _HEX_TOKEN.fullmatch(token):
        digits = token.removeprefix("0x").replace("-", "")
        return hex_tokens and not digits.isdigit() and _entropy(digits.lower()) > _HEX_ENTROPY
    shape = token.encode("latin-1", "replace").translate(CLASSES)
    if not (b"A" in shape and b"a" in shape and b"0" in shape):
        return False
    if _entropy(token) <= min(_MAX_ENTROPY_THRESHOLD, math.log2(len(token)) - _ENTROPY_MARGIN):
        return False
    core = shape.translate(None, TOKEN_PUNCTUATION)  # separators of names and paths
    switching = (len(_CLASS_RUN.findall(core)) - 1) / (len(core) - 1)
    wordy = sum(map(len, _WORD.findall(token))) / len(token)
    return switching - _WORDINESS_WEIGHT * wordy > _MIN_SWITCHING


def _entropy(token: str) -> float:
    n = len(token)
    return math.log2(n) - sum(c * math.log2(c) for c in Counter(token).values()) / n
