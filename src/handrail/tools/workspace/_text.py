"""Text files read by byte offset: encoding detection and bounded line reading.

Owns choosing how to decode a file (a byte order mark, valid UTF-8, or charset-
normalizer's best guess), refusing binary files, finding lines by byte offset in
blocks (from the start or from the end), and reading a window of lines with long
lines cut. Kept apart from the tools so a huge file is handled the same way by every
reader. Never opens a path, decides what may be read, or holds a whole file in memory.
"""

import codecs
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

import charset_normalizer

from handrail.errors import InvalidArgument

__all__ = [
    "SAMPLE_BYTES",
    "Encoding",
    "LineLocator",
    "LineReader",
    "Window",
    "detect_encoding",
    "explicit_encoding",
    "read_window",
]

SAMPLE_BYTES = 32 * 1024
"""How much of a file's start encoding detection looks at."""
_BLOCK = 64 * 1024  # a multiple of every code unit width (1, 2, 4)
_NUL_WINDOW = 8 * 1024
_TEXT_CONTROLS = frozenset("\t\n\v\f\r\b\x1b")
"""Control characters that plain text (including terminal logs) does hold."""
_DROP_CONTROLS = dict.fromkeys(c for c in range(32) if chr(c) not in _TEXT_CONTROLS)
_MAX_CONTROL_SHARE = 0.05
_PREFERRED_ENCODINGS = (
    "cp1252",
    "latin_1",
    "iso8859_15",
    "gb18030",
    "big5",
    "cp932",
    "shift_jis",
    "euc_jp",
    "cp949",
    "euc_kr",
    "cp1251",
    "koi8_r",
    "cp1250",
)
"""Among encodings that decode a sample equally well, the more common one wins."""
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_UNIT_CODECS = {"utf-16-le": 2, "utf-16-be": 2, "utf-32-le": 4, "utf-32-be": 4}

# --- encodings -----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class Encoding:
    """How to decode a file: the codec, where text starts, and its newline code unit."""

    codec: str
    origin: int
    unit: bytes
    guessed: bool = False
    """Chosen by charset-normalizer's statistics, not by a BOM or valid UTF-8."""

    @property
    def width(self) -> int:
        """Bytes per code unit: 1, 2 or 4."""
        return len(self.unit)

    @property
    def shown(self) -> str:
        """The codec's name as reported to the model, marked when a BOM was found."""
        return f"{self.codec} (BOM)" if self.origin else self.codec


def _codec_name(name: str) -> str:
    return codecs.lookup(name).name.replace("_", "-")


def _encoding_for(codec: str, origin: int = 0, *, guessed: bool = False) -> Encoding:
    unit = "\n".encode(codec)
    width = _UNIT_CODECS.get(codec, 1)
    if len(unit) != width:
        raise InvalidArgument(
            f"The encoding {codec!r} is not supported here; name a text encoding such as "
            f"'utf-8', 'utf-16-le', 'latin-1' or 'gb18030'."
        )
    return Encoding(codec=codec, origin=origin, unit=unit, guessed=guessed)


def explicit_encoding(name: str, sample: bytes) -> Encoding:
    """The encoding the caller named; "utf-16", "utf-32" and "utf-8-sig" honour a BOM."""
    try:
        codec = _codec_name(name)
        codecs.getincrementaldecoder(codec)
        "\n".encode(codec)
    except (LookupError, TypeError, ValueError):
        raise InvalidArgument(
            f"Unknown text encoding {name!r}; use 'auto' or e.g. 'utf-8'."
        ) from None
    if codec in {"utf-16", "utf-32", "utf-8-sig"}:
        bom = _bom(sample)
        base = codec.removesuffix("-sig")
        if bom is not None and bom[1].startswith(base):
            return _encoding_for(bom[1], len(bom[0]))
        codec = "utf-8" if base == "utf-8" else f"{base}-le"
    return _encoding_for(codec)


def _bom(sample: bytes) -> tuple[bytes, str] | None:
    return next(((mark, codec) for mark, codec in _BOMS if sample.startswith(mark)), None)


def detect_encoding(sample: bytes, *, whole: bool) -> Encoding | str:
    """The encoding of a file from its first bytes, or why it is not text."""
    bom = _bom(sample)
    if bom is not None:
        return _encoding_for(bom[1], len(bom[0]))
    if b"\x00" in sample[:_NUL_WINDOW]:
        return "it has NUL bytes"
    try:
        text = codecs.getincrementaldecoder("utf-8")().decode(sample, final=whole)
        codec = "utf-8"
    except UnicodeDecodeError:
        matches = charset_normalizer.from_bytes(sample)
        best = matches.best()
        if best is None:
            return "no text encoding decodes it"
        tied = {
            match.encoding
            for match in matches
            if match.chaos == best.chaos and match.coherence == best.coherence
        }
        pool = tied | set(best.could_be_from_charset) | {best.encoding}
        codec = next((name for name in _PREFERRED_ENCODINGS if name in pool), best.encoding)
        text = sample.decode(codec, "replace")
    controls = len(text) - len(text.translate(_DROP_CONTROLS))
    if controls > _MAX_CONTROL_SHARE * len(text):
        return "it is full of control characters"
    return _encoding_for(_codec_name(codec), guessed=codec != "utf-8")


# --- lines ---------------------------------------------------------------------------------


class LineLocator:
    """Finds newline code units in a file by byte offset, holding one block at a time.

    Offsets of code units are counted from `origin` (after a byte order mark), so a
    UTF-16 or UTF-32 newline is only found where a code unit starts. `check` is called
    before each block of a long scan and raises when the caller's time is up.
    """

    def __init__(self, fd: int, size: int, encoding: Encoding, check: Callable[[], None]) -> None:
        self._fd = fd
        self._size = size
        self._enc = encoding
        self._check = check

    def _align(self, offset: int) -> int:
        origin, width = self._enc.origin, self._enc.width
        return origin + max(0, offset - origin) // width * width

    def _positions(self, block: bytes, base: int, *, reverse: bool) -> Iterator[int]:
        """Offsets of the newline units in `block` (which starts at offset `base`)."""
        unit, width, origin = self._enc.unit, self._enc.width, self._enc.origin
        index = block.rfind(unit) if reverse else block.find(unit)
        while index >= 0:
            if (base + index - origin) % width == 0:
                yield base + index
            index = block.rfind(unit, 0, index) if reverse else block.find(unit, index + 1)

    def count(self, start: int, end: int) -> int:
        """Newline units in [start, end)."""
        total = 0
        offset = start
        while offset < end:
            block = os.pread(self._fd, min(_BLOCK, end - offset), offset)
            if not block:
                break
            if self._enc.width == 1:
                total += block.count(self._enc.unit)
            else:
                total += sum(1 for _ in self._positions(block, offset, reverse=False))
            offset += len(block)
        return total

    def lines(self) -> int:
        """How many lines the whole file has (the last may lack its newline)."""
        origin = self._enc.origin
        units = self.count(origin, self._size)
        return units + (0 if self._size <= origin or self.ends_with_newline() else 1)

    def line_start(self, line: int) -> int | None:
        """The offset where line `line` (from 1) starts; None past the end."""
        need = line - 1
        offset = self._enc.origin
        while need:
            self._check()
            block = os.pread(self._fd, _BLOCK, offset)
            if not block:
                return None
            if self._enc.width == 1 and block.count(self._enc.unit) < need:
                need -= block.count(self._enc.unit)
            else:
                for position in self._positions(block, offset, reverse=False):
                    need -= 1
                    if not need:
                        start = position + self._enc.width
                        return start if start < self._size else None
            offset += len(block)
        return offset

    def tail_start(self, lines: int) -> tuple[int, bool]:
        """Where the last `lines` lines start, and whether that is the file's beginning."""
        origin, width = self._enc.origin, self._enc.width
        end = self._align(self._size)
        if self.ends_with_newline():
            end -= width  # the last newline ends the last line; it does not start one
        need = lines
        while end > origin:
            self._check()
            start = self._align(max(origin, end - _BLOCK))
            block = os.pread(self._fd, end - start, start)
            for position in self._positions(block, start, reverse=True):
                need -= 1
                if not need:
                    return position + width, False
            end = start
        return origin, True

    def ends_with_newline(self) -> bool:
        """Whether the file's last code unit is a newline."""
        width = self._enc.width
        end = self._align(self._size)
        if end - width < self._enc.origin:
            return False
        return os.pread(self._fd, width, end - width) == self._enc.unit


class LineReader:
    """Lines from a byte offset, each cut to `max_bytes`; memory stays within two blocks."""

    def __init__(
        self, raw: BinaryIO, encoding: Encoding, start: int, check: Callable[[], None]
    ) -> None:
        raw.seek(start)
        self._raw = raw
        self._check = check
        self._enc = encoding
        self._buffer = b""
        self._at = 0  # where unread bytes start in the buffer
        self._base = start  # the file offset of the buffer's first byte

    def _newline(self) -> int:
        unit, width, origin = self._enc.unit, self._enc.width, self._enc.origin
        index = self._buffer.find(unit, self._at)
        while index >= 0 and (self._base + index - origin) % width:
            index = self._buffer.find(unit, index + 1)
        return index

    def _take(self, kept: bytearray, end: int, max_bytes: int) -> bool:
        """Move buffer bytes up to `end` into `kept` (up to `max_bytes`); True when cut."""
        room = max(0, max_bytes - len(kept))
        piece = end - self._at
        kept += self._buffer[self._at : self._at + min(piece, room)]
        self._at = end
        return piece > room

    def next(self, max_bytes: int) -> tuple[bytes, bool, bool] | None:
        """(content, cut, ended by a newline), or None at the end of the file."""
        kept = bytearray()
        cut = seen = False
        width = self._enc.width
        while True:
            index = self._newline()
            if index >= 0:
                cut = self._take(kept, index, max_bytes) or cut
                self._at += width
                return bytes(kept), cut, True
            whole = self._at + (len(self._buffer) - self._at) // width * width
            if whole > self._at:
                seen = True
                cut = self._take(kept, whole, max_bytes) or cut
            self._check()  # a single line may be gigabytes long
            block = self._raw.read(_BLOCK)
            if not block:
                if self._at < len(self._buffer):
                    seen = True
                    cut = self._take(kept, len(self._buffer), max_bytes) or cut
                return (bytes(kept), cut, False) if seen else None
            self._base += self._at
            self._buffer = self._buffer[self._at :] + block
            self._at = 0


@dataclass(kw_only=True, slots=True)
class Window:
    """The lines `read_window` kept, with their cut flags and what was left unread."""

    lines: list[str] = field(default_factory=list)
    cut: list[bool] = field(default_factory=list)
    dropped: int = 0
    """Lines read but left out at the front (a tail over the character budget)."""
    more: bool = False
    full: bool = False
    last_newline: bool | None = None


def read_window(
    reader: LineReader,
    encoding: Encoding,
    *,
    max_line_chars: int,
    max_chars: int,
    count: int,
    keep_end: bool,
) -> Window:
    """Up to `count` lines, each cut to `max_line_chars`, within `max_chars` of JSON text.

    Reading forward, the budget ends the window; for a tail (`keep_end`) it drops
    lines from the front instead, so the last lines are always the ones kept.
    """
    window = Window()
    decoder = codecs.getincrementaldecoder(encoding.codec)("replace")
    costs: list[int] = []
    while len(window.lines) < count:
        got = reader.next(max_line_chars * 4)
        if got is None:
            break
        data, cut, newline = got
        text = decoder.decode(data, final=not cut)
        decoder.reset()
        if newline and not cut and text.endswith("\r"):
            text = text[:-1]
        if len(text) > max_line_chars:
            text, cut = text[:max_line_chars], True
        cost = len(json.dumps(text, ensure_ascii=False)) + 1
        if not keep_end and costs and sum(costs) + cost > max_chars:
            window.more = window.full = True
            return window
        window.last_newline = newline
        window.lines.append(text)
        window.cut.append(cut)
        costs.append(cost)
    else:
        window.more = reader.next(1) is not None
    spent = sum(costs)
    while keep_end and len(costs) > 1 and spent > max_chars:
        spent -= costs.pop(0)
        window.lines.pop(0)
        window.cut.pop(0)
        window.dropped += 1
    return window
