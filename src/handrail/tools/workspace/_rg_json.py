"""Reading ripgrep's `--json` output: lines, messages and the text of a matching line.

Owns splitting the byte stream into lines with bounded memory (an overlong line keeps
only its head and tail), telling message kinds apart by their first bytes, decoding a
message's `data` (`text` or base64 `bytes`, even from a cut line) and cutting a long
line to a window around its first match. Never runs ripgrep or decides what is shown.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

import orjson

__all__ = [
    "BEGIN_AT",
    "END_AT",
    "MATCH_AT",
    "Kind",
    "Line",
    "LineText",
    "Lines",
    "Long",
    "begin_parts",
    "elapsed_ms",
    "json_string_prefix",
    "kind",
    "kinds",
    "line_size",
    "line_text",
    "long_message",
    "message",
    "path_parts",
    "plain_files",
    "run_matches",
]

_MAX_MESSAGE = 1 << 20
"""A JSON message longer than this (a very long line) is read as its head and tail only."""
_LONG_HEAD = 1 << 15
_LONG_TAIL = 256
_MAX_RANGES = 64
_LINE_NUMBER = re.compile(rb'"line_number":(\d+)')
_BACKSLASH = ord("\\")
_MAX_TRIM = 16
"""Bytes trimmed at most from a cut JSON string: an escaped surrogate pair and a bit."""

_MATCH = b'{"type":"match"'
_CONTEXT = b'{"type":"context"'
_BEGIN = b'{"type":"begin"'
_END = b'{"type":"end"'
_BEGIN_TEXT = b'{"type":"begin","data":{"path":{"text":"'
_BEGIN_TEXT_END = b'"}}}'
_NOT_PLAIN = re.compile(rb'[\x00-\x1f"\\]')
"""Bytes after which a JSON string body is not its own UTF-8 text: escapes, controls."""


# --- lines -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Long:
    """A line over the message limit: only its head and tail are kept."""

    head: bytes
    tail: bytes


Line = bytes | Long


def line_size(line: Line) -> int:
    """The bytes a line holds in memory."""
    return len(line.head) + len(line.tail) if isinstance(line, Long) else len(line)


class Lines:
    """Splits a byte stream into lines; an overlong line keeps only its head and tail."""

    def __init__(
        self,
        *,
        limit: int = _MAX_MESSAGE,
        head: int = _LONG_HEAD,
        tail: int = _LONG_TAIL,
    ) -> None:
        self._limit = limit
        self._keep_head = head
        self._keep_tail = tail
        self._parts: list[bytes] = []
        self._size = 0
        self._head: bytes | None = None
        self._tail = b""

    def feed(self, chunk: bytes) -> list[Line]:
        """The lines that `chunk` completes, in order; empty lines are dropped."""
        pieces = chunk.split(b"\n")
        self._add(pieces[0])
        if len(pieces) == 1:
            return []
        out: list[Line] = []
        self._finish(out)
        limit = self._limit
        for index in range(1, len(pieces) - 1):
            piece = pieces[index]
            if len(piece) <= limit:
                if piece:
                    out.append(piece)
            else:
                out.append(Long(piece[: self._keep_head], piece[-self._keep_tail :]))
        self._add(pieces[-1])
        return out

    def runs(self, chunk: bytes) -> list[Line]:
        """The lines `chunk` completes, as runs: what `feed` gives, without a list of lines.

        A bytes item holds one or more whole lines joined by line breaks (some may be
        empty); a `Long` is one overlong line. A sink that reads a run with byte
        searches spends a call per run instead of one per line. When no line can be
        over the limit (the usual case), the line carried from the last chunk and every
        line this one completes are one run.
        """
        first = chunk.find(b"\n")
        if first < 0:
            self._add(chunk)
            return []
        last = chunk.rfind(b"\n")
        fits = self._size + first <= self._limit and last - first <= self._limit
        if self._head is None and fits:
            self._parts.append(chunk[:last])
            run = b"".join(self._parts)
            self._parts = []
            self._size = 0
            out: list[Line] = [run] if run else []
        else:
            out = _runs(self.feed(chunk[: last + 1]))
        self._add(chunk[last + 1 :])
        return out

    def close(self) -> list[Line]:
        """The last line, when the stream did not end with a line break."""
        out: list[Line] = []
        self._finish(out)
        return out

    def _add(self, piece: bytes) -> None:
        if not piece:
            return
        if self._head is not None:
            self._tail = (self._tail + piece)[-self._keep_tail :]
            return
        self._parts.append(piece)
        self._size += len(piece)
        if self._size > self._limit:
            whole = b"".join(self._parts)
            self._parts = []
            self._head = whole[: self._keep_head]
            self._tail = whole[-self._keep_tail :]

    def _finish(self, out: list[Line]) -> None:
        if self._head is not None:
            out.append(Long(self._head, self._tail))
        elif self._parts:
            out.append(b"".join(self._parts))
        self._parts = []
        self._size = 0
        self._head = None
        self._tail = b""


def _runs(lines: list[Line]) -> list[Line]:
    """Lines joined into runs between the overlong ones."""
    out: list[Line] = []
    group: list[bytes] = []
    for line in lines:
        if isinstance(line, Long):
            if group:
                out.append(b"\n".join(group))
                group = []
            out.append(line)
        else:
            group.append(line)
    if group:
        out.append(b"\n".join(group))
    return out


# --- messages --------------------------------------------------------------------------


class Kind(Enum):
    """The type of a ripgrep JSON message, as far as a search cares."""

    BEGIN = "begin"
    MATCH = "match"
    CONTEXT = "context"
    END = "end"
    OTHER = "other"


_BY_FIRST = {
    prefix[9:10]: (prefix, found)
    for prefix, found in (
        (_MATCH, Kind.MATCH),
        (_CONTEXT, Kind.CONTEXT),
        (_BEGIN, Kind.BEGIN),
        (_END, Kind.END),
    )
}


def kind(line: Line) -> Kind:
    """A message's kind, from its first bytes (ripgrep writes `type` first)."""
    return kinds((line,))[0]


def kinds(lines: Sequence[Line]) -> list[Kind]:
    """Each message's kind, as `kind` tells it, in one loop.

    The sinks ask this of every message of a search, so the loop, not a call per line.
    """
    by_first = _BY_FIRST
    other = Kind.OTHER
    found: list[Kind] = []
    for line in lines:
        head = line if isinstance(line, bytes) else line.head
        # The byte after `{"type":"` tells the one prefix worth comparing.
        known = by_first.get(head[9:10])
        found.append(known[1] if known is not None and head.startswith(known[0]) else other)
    return found


BEGIN_AT = b"\n" + _BEGIN
"""A begin message's start within a run that has a line break in front."""
END_AT = b"\n" + _END
"""An end message's start within a run that has a line break in front."""
MATCH_AT = b"\n" + _MATCH
"""A match message's start within a run that has a line break in front."""
_CONTEXT_AT = b"\n" + _CONTEXT


_PLAIN_FILES = re.compile(
    rb'\n\{"type":"begin","data":\{"path":\{"text":"([^"\\\x00-\x1f]*)"\}\}\}'
    rb'((?:\n\{"type":"(?:match|context)"[^\n]*)*)'
    rb'\n\{"type":"end"[^\n]*'
)


def plain_files(run: bytes) -> list[bytes]:
    """`run` cut at its plain files: [gap, path, body, gap, path, body, ..., gap].

    `run` holds lines each with a line break in front. A plain file is a begin
    message whose path is a JSON string with no escape, quote or control byte (its
    bytes are its text, as `begin_parts` reads it), then match and context messages
    only, then an end message. `path` is that string's bytes, `body` the file's match
    and context lines (each with a line break in front), and a gap whatever lies
    before, between or after them (b"" when nothing). One scan in C per run.
    """
    return _PLAIN_FILES.split(run)


def run_matches(body: bytes) -> int | None:
    """How many match messages `body` holds, if its every line is a match or a context.

    `body` is a run of lines, each with a line break in front of it; kinds are told as
    `kinds` tells them (a message's kind by its first bytes); None when any line is of
    another kind or empty. Byte searches, not a loop over lines.
    """
    if body.find(b"\n", 1) < 0:  # one line: the common case of a file with one match
        if body.startswith(MATCH_AT):
            return 1
        return 0 if body.startswith(_CONTEXT_AT) else None
    matches = body.count(MATCH_AT)
    if matches + body.count(_CONTEXT_AT) != body.count(b"\n"):
        return None
    return matches


def message(line: Line) -> dict[str, Any]:
    """The `data` of a ripgrep JSON message ({} when it cannot be read)."""
    if isinstance(line, Long):
        return long_message(line)
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        # What orjson refuses and the standard parser reads (a lone surrogate escape, a
        # number out of a double's range) is read as it always was.
        try:
            value = json.loads(line)
        except ValueError:
            return {}
    if not isinstance(value, dict):
        return {}
    data = value.get("data")
    if not isinstance(data, dict):
        return {}
    if value.get("type") == "summary":
        data = {**data, "summary": True}
    return data


def long_message(line: Long) -> dict[str, Any]:
    """What can be read of an overlong match or context message: line number and a prefix."""
    numbers = _LINE_NUMBER.findall(line.tail)
    data: dict[str, Any] = {"line_number": int(numbers[-1]) if numbers else None, "long": True}
    text_key = b'"lines":{"text":"'
    bytes_key = b'"lines":{"bytes":"'
    at = line.head.find(text_key)
    if at >= 0:
        data["lines"] = {"text": json_string_prefix(line.head[at + len(text_key) :])}
        return data
    at = line.head.find(bytes_key)
    if at >= 0:
        body = line.head[at + len(bytes_key) :].split(b'"', 1)[0]
        body = body[: len(body) - len(body) % 4]
        try:
            data["lines"] = {"text": base64.b64decode(body).decode("utf-8", "replace")}
        except (binascii.Error, ValueError):
            data["lines"] = {"text": ""}
    return data


def json_string_prefix(raw: bytes) -> str:
    """The readable start of a JSON string body that may be cut anywhere."""
    body = raw[: _string_end(raw)]
    for trim in range(min(len(body), _MAX_TRIM) + 1):
        try:
            value = str(json.loads(b'"' + body[: len(body) - trim] + b'"'))
        except ValueError:
            continue
        # A cut between the halves of an escaped surrogate pair leaves the first alone.
        return value[:-1] if value and "\ud800" <= value[-1] <= "\udbff" else value
    return ""


def _string_end(raw: bytes) -> int:
    """Where a JSON string body ends: its first quote not escaped (else its length)."""
    at = raw.find(b'"')
    while at >= 0:
        before = at - 1
        while before >= 0 and raw[before] == _BACKSLASH:
            before -= 1
        if (at - 1 - before) % 2 == 0:
            return at
        at = raw.find(b'"', at + 1)
    return len(raw)


def path_parts(data: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The parts of a message's path (names as the OS gives them), or None."""
    path = data.get("path")
    if not isinstance(path, dict):
        return None
    if isinstance(path.get("text"), str):
        name = path["text"]
    elif isinstance(path.get("bytes"), str):
        try:
            name = os.fsdecode(base64.b64decode(path["bytes"]))
        except (binascii.Error, ValueError):
            return None
    else:
        return None
    return _parts(name)


def begin_parts(line: Line) -> tuple[str, ...] | None:
    """The parts of a begin message's path: `path_parts(message(line))`, mostly faster.

    ripgrep writes a begin message of a path that is UTF-8 as one fixed shape; when the
    string holds no escape, quote or control byte, its bytes are its text and the JSON
    parse is skipped. Anything else is parsed.
    """
    if (
        isinstance(line, bytes)
        and line.startswith(_BEGIN_TEXT)
        and line.endswith(_BEGIN_TEXT_END)
        and len(line) >= len(_BEGIN_TEXT) + len(_BEGIN_TEXT_END)
    ):
        body = line[len(_BEGIN_TEXT) : -len(_BEGIN_TEXT_END)]
        if _NOT_PLAIN.search(body) is None:
            try:
                return _parts(body.decode("utf-8"))
            except UnicodeDecodeError:
                pass  # json reads lone surrogates; let it decide
    return path_parts(message(line))


def _parts(name: str) -> tuple[str, ...] | None:
    parts = name.removeprefix("./").split("/")
    if "" in parts or "." in parts:
        parts = [part for part in parts if part not in {"", "."}]
    return tuple(parts) or None


def elapsed_ms(summary: Mapping[str, Any] | None) -> float | None:
    """The time ripgrep reports in its summary message, in milliseconds (None if unknown)."""
    if summary is None:
        return None
    elapsed = summary.get("elapsed_total")
    if not isinstance(elapsed, dict):
        return None
    secs, nanos = elapsed.get("secs"), elapsed.get("nanos")
    if not isinstance(secs, int) or not isinstance(nanos, int):
        return None
    return round(secs * 1000 + nanos / 1e6, 3)


# --- the text of a line ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LineText:
    """A match or context line as shown: a window of its text and the match ranges in it."""

    line: int | None
    text: str
    start: int
    cut: bool
    ranges: tuple[tuple[int, int], ...]


def line_text(data: Mapping[str, Any], max_chars: int) -> LineText:
    """A match or context line: its number, a window of its text and the match ranges."""
    number = data.get("line_number")
    line = number if isinstance(number, int) else None
    lines = data.get("lines")
    raw: bytes | None = None
    text = ""
    if isinstance(lines, dict):
        if isinstance(lines.get("text"), str):
            text = lines["text"]
        elif isinstance(lines.get("bytes"), str):
            try:
                raw = base64.b64decode(lines["bytes"])
            except (binascii.Error, ValueError):
                raw = b""
            text = raw.decode("utf-8", "replace")
    long = bool(data.get("long"))
    if text.endswith("\n"):
        text = text[:-1]
        text = text.removesuffix("\r")
    ranges = () if long else _ranges(data.get("submatches"), text, raw)
    cut = long
    start = 0
    if len(text) > max_chars:
        cut = True
        first = ranges[0] if ranges else (0, 0)
        if first[1] > max_chars:
            start = max(0, min(first[0] - max_chars // 4, len(text) - max_chars))
        text = text[start : start + max_chars]
        ranges = tuple(
            (max(a, start) - start, min(b, start + max_chars) - start)
            for a, b in ranges
            if b > start and a < start + max_chars
        )
    return LineText(line, text, start, cut, ranges[:_MAX_RANGES])


def _ranges(submatches: object, text: str, raw: bytes | None) -> tuple[tuple[int, int], ...]:
    """Submatch byte offsets as character offsets within `text` (clipped to it)."""
    if not isinstance(submatches, list):
        return ()
    pairs: list[tuple[int, int]] = []
    for item in submatches:
        if not isinstance(item, dict):
            continue
        start, end = item.get("start"), item.get("end")
        if isinstance(start, int) and isinstance(end, int) and 0 <= start <= end:
            pairs.append((start, end))
        if len(pairs) >= _MAX_RANGES * 4:
            break
    if not pairs:
        return ()
    if raw is None:
        if text.isascii():
            return tuple((min(a, len(text)), min(b, len(text))) for a, b in pairs)
        raw = text.encode("utf-8", "surrogatepass")
    # Byte offset to character offset, decoding each stretch once (linear in the line).
    chars: dict[int, int] = {}
    done_bytes = done_chars = 0
    for offset in sorted({offset for pair in pairs for offset in pair}):
        done_chars += len(raw[done_bytes:offset].decode("utf-8", "replace"))
        done_bytes = offset
        chars[offset] = min(done_chars, len(text))
    return tuple((chars[a], chars[b]) for a, b in pairs)
