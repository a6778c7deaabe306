"""The glob matcher behind `find_files` and the workspace's ignore patterns.

Owns parsing a model's glob into literal, wildcard and class tokens and matching it
against relative paths, part by part, in bounded time. Kept apart from the tools so
its guarantees (no regex, no braces, no exponential backtracking) can be read in one
place. Never touches the filesystem.
"""

import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from handrail.errors import InvalidArgument

__all__ = ["MAX_GLOB_CHARS", "Glob"]

MAX_GLOB_CHARS = 512
_MAX_GLOB_WILDCARDS = 24
_MAX_GLOB_GLOBSTARS = 4
_MAX_NAME_BYTES = 255
_INVISIBLE = frozenset({"Cc", "Cf", "Zl", "Zp"})


@dataclass(frozen=True, slots=True)
class _Class:
    ranges: tuple[tuple[str, str], ...]
    negated: bool

    def accepts(self, char: str) -> bool:
        inside = any(low <= char <= high for low, high in self.ranges)
        return inside != self.negated


_STAR = "*"
_ANY = "?"
_Token = str | _Class
"""One character to match: a literal (1 char), `_ANY`, `_STAR`, or a class."""
_Segment = tuple[_Token, ...] | None
"""One path part's pattern; None stands for `**` (any number of parts)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Glob:
    """A glob over relative paths, matched without regular expressions.

    `*` matches within one path part, `?` one character, `[abc]`, `[a-z]` and `[!a]`
    one character of a class, and a part that is exactly `**` any number of parts. A
    glob with no "/" matches the name at any depth; one starting with "./" is anchored
    at the root. Braces are not expanded. Length and wildcard count are bounded, and
    matching takes at most (path length x glob length) steps per part, so no glob can
    take exponential time.
    """

    segments: tuple[_Segment, ...]
    casefold: bool = False

    @classmethod
    def compile(cls, text: str, *, casefold: bool = False) -> "Glob":
        """Parse `text`; InvalidArgument with a reason the model can act on."""
        if not text or len(text) > MAX_GLOB_CHARS:
            raise InvalidArgument(f"A glob must be 1-{MAX_GLOB_CHARS} characters.")
        if text.startswith(("/", "~")):
            raise InvalidArgument("A glob is relative to the workspace root; drop the '/' or '~'.")
        if "\\" in text:
            raise InvalidArgument("'\\' is not allowed in a glob; match a literal '*' as '[*]'.")
        if any(unicodedata.category(ch) in _INVISIBLE for ch in text):
            raise InvalidArgument("A glob must not contain control or invisible characters.")
        if "{" in text or "}" in text:
            raise InvalidArgument(
                "Braces {a,b} are not expanded; call once per alternative, or match a "
                "literal brace as '[{]'."
            )
        wildcards = sum(text.count(ch) for ch in "*?[")
        if wildcards > _MAX_GLOB_WILDCARDS:
            raise InvalidArgument(f"A glob may hold at most {_MAX_GLOB_WILDCARDS} wildcards.")
        anchored = text.startswith("./") or "/" in text.rstrip("/")
        parts = [part for part in text.split("/") if part not in {"", "."}]
        if not parts:
            raise InvalidArgument("The glob names nothing; use '**/*' for everything.")
        if ".." in parts:
            raise InvalidArgument("A glob must not contain '..'; stay inside the workspace.")
        if sum(part == "**" for part in parts) > _MAX_GLOB_GLOBSTARS:
            raise InvalidArgument(f"A glob may hold at most {_MAX_GLOB_GLOBSTARS} '**' parts.")
        segments: list[_Segment] = [] if anchored else [None]
        for part in parts:
            if len(part.encode("utf-8", "surrogatepass")) > _MAX_NAME_BYTES:
                raise InvalidArgument("A glob part is longer than a file name can be.")
            segment = (
                None if part == "**" else _parse_segment(part.casefold() if casefold else part)
            )
            if not (segment is None and segments and segments[-1] is None):
                segments.append(segment)  # consecutive `**` parts mean the same as one
        return cls(segments=tuple(segments), casefold=casefold)

    @property
    def prefix(self) -> tuple[str, ...]:
        """The leading literal parts (before the last): the directory a walk starts from."""
        literal: list[str] = []
        for segment in self.segments[:-1]:
            if segment is None or not all(
                isinstance(t, str) and t not in {_STAR, _ANY} for t in segment
            ):
                break
            literal.append("".join(str(t) for t in segment))
        return tuple(literal)

    def matches(self, parts: tuple[str, ...]) -> bool:
        """Whether the relative path made of `parts` matches the whole glob."""
        names = tuple(p.casefold() for p in parts) if self.casefold else parts
        return _wildcard(self.segments, names, _chars_match)

    def may_match_below(self, parts: tuple[str, ...]) -> bool:
        """Whether some path inside the directory `parts` could match (for pruning)."""
        names = tuple(p.casefold() for p in parts) if self.casefold else parts
        for index, name in enumerate(names):
            if index >= len(self.segments):
                return False
            segment = self.segments[index]
            if segment is None:
                return True
            if not _chars_match(segment, name):
                return False
        return len(names) < len(self.segments)


def _parse_segment(part: str) -> tuple[_Token, ...]:
    tokens: list[_Token] = []
    index = 0
    while index < len(part):
        char = part[index]
        if char == "[":
            token, index = _parse_class(part, index)
            tokens.append(token)
            continue
        if char == _STAR and tokens and tokens[-1] == _STAR:
            index += 1  # "**" inside a part is one "*"
            continue
        tokens.append(char)
        index += 1
    return tuple(tokens)


def _parse_class(part: str, start: int) -> tuple[_Class, int]:
    index = start + 1
    negated = index < len(part) and part[index] in "!^"
    index += negated
    body_start = index
    ranges: list[tuple[str, str]] = []
    while index < len(part) and (part[index] != "]" or index == body_start):
        low = part[index]
        if index + 2 < len(part) and part[index + 1] == "-" and part[index + 2] != "]":
            ranges.append((low, part[index + 2]))
            index += 3
        else:
            ranges.append((low, low))
            index += 1
    if index >= len(part):
        raise InvalidArgument("A '[' in the glob has no closing ']'; match a literal '[' as '[[]'.")
    return _Class(tuple(ranges), negated), index + 1


def _wildcard(
    pattern: Sequence[object],
    items: Sequence[Any],
    one: Callable[[Any, Any], bool],
    star: object = None,
) -> bool:
    """Wildcard matching with one backtrack point: O(len(pattern) x len(items)) steps.

    `star` (None for path segments, `_STAR` for characters) matches any run of items;
    every other pattern element matches exactly one item by `one`.
    """
    p = i = 0
    star_p, star_i = -1, 0
    while i < len(items):
        if p < len(pattern) and pattern[p] == star:
            star_p, star_i = p, i
            p += 1
        elif p < len(pattern) and one(pattern[p], items[i]):
            p += 1
            i += 1
        elif star_p >= 0:
            p = star_p + 1
            star_i += 1
            i = star_i
        else:
            return False
    while p < len(pattern) and pattern[p] == star:
        p += 1
    return p == len(pattern)


def _one_char(token: _Token, char: str) -> bool:
    if isinstance(token, _Class):
        return token.accepts(char)
    return token in {_ANY, char}


def _chars_match(segment: tuple[_Token, ...], name: str) -> bool:
    return _wildcard(segment, tuple(name), _one_char, star=_STAR)
