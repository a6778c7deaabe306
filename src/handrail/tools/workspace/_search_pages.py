"""Pages of search matches: their order, skipping, counting and size.

Owns the matches a page shows (`TextMatch` with its `ContextLine`s), building one page
from matches fed in path order (skip, take, attach context, stop near the character
budget), and the two sinks for ripgrep's messages: one that holds an unordered search
to sort it and one that pages an ordered search as it streams. Never runs ripgrep or
reads a file; whether a file may be shown is asked of the `Admit` callback.
"""

from __future__ import annotations

import codecs
import heapq
import itertools
import sys
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from handrail.shaping.budget import json_size
from handrail.tools.workspace._rg_json import (
    BEGIN_AT,
    END_AT,
    MATCH_AT,
    Kind,
    Line,
    LineText,
    Long,
    begin_parts,
    kind,
    kinds,
    line_size,
    line_text,
    message,
    plain_files,
    run_matches,
)

__all__ = [
    "Admit",
    "Collect",
    "ContextLine",
    "Page",
    "Stream",
    "TextMatch",
    "sort_key",
]

_BEGIN = BEGIN_AT[1:]
_BEGIN_TEXT = _BEGIN + b',"data":{"path":{"text":"'
_BEGIN_TEXT_END = b'"}}}'
_UTF8_PATHS = codecs.lookup(sys.getfilesystemencoding()).name == "utf-8"
"""Whether a path's UTF-8 bytes are its sort key's bytes (`sort_key` encodes so)."""
_MAX_BUFFERED = 32 << 20
"""Bytes of matches held to sort one unordered (parallel) search; beyond, search in order."""
# Characters of JSON around a match and a line (keys, numbers, brackets), for the budget.
_MATCH_COST = 110
_LINE_COST = 40
_RANGE_COST = 12


# --- what a page shows -----------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class ContextLine:
    """A line shown around a match. `line` is None only for a line too long to read whole."""

    line: int | None
    text: str
    cut: bool = False
    """The line was longer than `text`."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TextMatch:
    """One matching line.

    `text` is the line (without its line break) or, for a long line, a window of it
    that starts `text_start` characters in and shows the first match; `cut` says the
    line was longer. `ranges` are [start, end) character offsets of the matches within
    `text`. `before` and `after` are context lines; a line between two close matches is
    shown once, after the first.
    """

    path: str
    line: int | None
    text: str
    text_start: int = 0
    cut: bool = False
    ranges: tuple[tuple[int, int], ...] = ()
    before: tuple[ContextLine, ...] = ()
    after: tuple[ContextLine, ...] = ()


_FS_ENCODING = sys.getfilesystemencoding()
_FS_ERRORS = sys.getfilesystemencodeerrors()


def sort_key(parts: Sequence[str]) -> bytes:
    """The order of ripgrep's `--sort path`: name by name, as bytes.

    The names joined by NUL, which no file name holds and which sorts below every other
    byte, compare as the tuple of names would, in one encode (`os.fsencode`'s, without
    its checks: a search sorts a key per file).
    """
    return "\x00".join(parts).encode(_FS_ENCODING, _FS_ERRORS)


def _plain_names(names: list[bytes]) -> bool:
    """Whether each name, split at "/", gives its path's parts and its sort key as is.

    True when the names are UTF-8 (the file system's encoding too) and none has an
    empty or "." part, which `begin_parts` would drop.
    """
    if not _UTF8_PATHS:  # pragma: no cover - Python on Linux encodes file names as UTF-8
        return False
    joined = b"/" + b"/".join(names) + b"/"
    try:
        joined.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return b"//" not in joined and b"/./" not in joined


def _display(parts: Sequence[str]) -> str:
    """A path for people and models: bytes that are not UTF-8 shown as U+FFFD."""
    return "/".join(parts).encode("utf-8", "surrogateescape").decode("utf-8", "replace")


# --- one page --------------------------------------------------------------------------


class Page:
    """Builds one page from matches fed in path order: skips, takes, attaches context."""

    def __init__(
        self,
        *,
        skip: int,
        limit: int,
        context: int,
        max_chars: int,
        budget: int,
    ) -> None:
        self.skip = skip
        self.limit = limit
        self.context = context
        self.max_chars = max_chars
        self.budget = budget
        self.used = 0
        self.seen = 0
        self.more = False
        self.items: list[_Hit] = []
        self._path = ""
        self._path_cost = _MATCH_COST  # what a match costs before its text: its path too
        self._last: _Hit | None = None
        self._pending: deque[Line] = deque(maxlen=context)

    def begin(self, path: str) -> None:
        """Start a file's matches."""
        self._path = path
        self._path_cost = _MATCH_COST + json_size(path)
        self._last = None
        self._pending.clear()

    def match(self, line: Line) -> bool:
        """Take a match; True once the page is full and one more match was seen."""
        self.seen += 1
        if self.seen <= self.skip:
            self._last = None
            self._pending.clear()
            return False
        if len(self.items) >= self.limit or (self.items and self.used >= self.budget):
            self.more = True
            return True
        found = line_text(message(line), self.max_chars)
        hit = _Hit(path=self._path, text=found)
        self.used += self._path_cost + _cost(found)
        if self._pending and found.line is not None:
            lowest = found.line - self.context
            for raw in self._pending:
                before = line_text(message(raw), self.max_chars)
                if before.line is not None and lowest <= before.line < found.line:
                    hit.before.append(before)
                    self.used += _cost(before)
        self._pending.clear()
        self.items.append(hit)
        self._last = hit
        return False

    def context_line(self, line: Line) -> None:
        """Take a context line: after the last match, or held for the next one."""
        last = self._last
        if last is not None and len(last.after) < self.context:
            after = line_text(message(line), self.max_chars)
            if (
                after.line is not None
                and last.text.line is not None
                and last.text.line < after.line <= last.text.line + self.context
            ):
                last.after.append(after)
                self.used += _cost(after)
                return
        self._pending.append(line)

    def matches(self) -> tuple[TextMatch, ...]:
        """The page's matches, frozen."""
        return tuple(hit.freeze() for hit in self.items)


def _cost(found: LineText) -> int:
    """About how many characters a line adds to the result's JSON."""
    return _LINE_COST + json_size(found.text) + _RANGE_COST * len(found.ranges)


@dataclass(slots=True)
class _Hit:
    path: str
    text: LineText
    before: list[LineText] = field(default_factory=list)
    after: list[LineText] = field(default_factory=list)

    def freeze(self) -> TextMatch:
        found = self.text
        return TextMatch(
            path=self.path,
            line=found.line,
            text=found.text,
            text_start=found.start,
            cut=found.cut,
            ranges=found.ranges,
            before=tuple(_context(item) for item in self.before),
            after=tuple(_context(item) for item in self.after),
        )


def _context(found: LineText) -> ContextLine:
    return ContextLine(line=found.line, text=found.text, cut=found.cut)


# --- sinks of ripgrep's messages -------------------------------------------------------


class _Block:
    """The file whose messages are being read: its path and match and context lines."""

    __slots__ = ("items", "matches", "parts")

    def __init__(self, parts: tuple[str, ...]) -> None:
        self.parts = parts
        self.items: list[Line] = []
        """Its match and context lines, one per item or several per run (see `_Held`)."""
        self.matches = 0


Admit = Callable[[tuple[str, ...]], bool]
"""Whether a file ripgrep reported (its path parts) may be shown."""


class Collect:
    """Sink of an unordered search: holds every file's matches, up to the count limit.

    Files are checked (`admit`) when replayed in path order, up to the end of the page:
    a file the page never reaches is counted in the totals unchecked. A finished file
    is held as plain values in parallel lists (its sort key, path, match count, lines),
    not an object per file: a search holds a thousand files that live until its page
    is built, which the garbage collector would otherwise walk again and again.
    """

    def __init__(self, admit: Admit, *, count_limit: int) -> None:
        self._admit = admit
        self._count_limit = count_limit
        self._keys: list[bytes] = []
        self._paths: list[tuple[str, ...] | bytes] = []
        """A file's path parts, or (held in bulk) its path's bytes, "/" between parts."""
        self._counts: list[int] = []
        self._held: list[_Held] = []
        self.current: _Block | None = None
        self.matches = 0
        self.refused = 0
        self.refused_matches = 0
        self.summary: dict[str, Any] | None = None
        self._bytes = 0

    def take_all(self, lines: Sequence[Line]) -> bool:
        """Hold messages in order; True (the rest not taken) once too many are held to sort.

        One loop over a read's lines with the counters in locals: this runs for every
        message that `take_runs` does not read as a run.
        """
        current = self.current
        matches = self.matches
        held = self._bytes
        limit = self._count_limit
        stop = False
        for line, found in zip(lines, kinds(lines), strict=True):
            if found is Kind.MATCH or found is Kind.CONTEXT:
                if current is None:
                    continue
                current.items.append(line)
                held += len(line) if line.__class__ is bytes else line_size(line)
                if found is Kind.MATCH:
                    current.matches += 1
                    matches += 1
                if matches > limit or held > _MAX_BUFFERED:
                    stop = True
                    break
            elif found is Kind.BEGIN:
                parts = begin_parts(line)
                current = None if parts is None else _Block(parts)
            elif found is Kind.END:
                self.current = current
                self._end_file()
                current = None
            else:
                data = message(line)
                if data.get("summary"):
                    self.summary = data
        self.current = current
        self.matches = matches
        self._bytes = held
        return stop

    def take_runs(self, runs: Sequence[Line]) -> bool:
        """`take_all` of the lines of `runs` (see `Lines.runs`), a run at a time.

        A run's plain files (`plain_files`) are held together with a few byte searches
        per file, and everything else a file at a time, any line that is not a match
        or a context going through `take_all`: what is held, counted and refused is
        what it would be line by line. Only a stop may come later within a file,
        counting more of its matches.
        """
        for run in runs:
            if isinstance(run, Long):
                if self.take_all((run,)):
                    return True
            elif self._take_run(b"\n" + run):
                return True
        return False

    def _take_run(self, run: bytes) -> bool:
        cut = plain_files(run)
        if len(cut) == 1 or any(cut[3:-1:3]):  # no plain file, or something between two
            return self._take_files(run)
        if self._take_files(cut[0]):
            return True
        self.current = None
        return self._take_plain(cut[1::3], cut[2::3]) or self._take_files(cut[-1])

    def _take_plain(self, paths: list[bytes], bodies: list[bytes]) -> bool:
        """Plain files, one after the other; held in bulk unless something is odd."""
        counts = [body.count(MATCH_AT) for body in bodies]
        names = [path.removeprefix(b"./") for path in paths]
        matches = self.matches + sum(counts)
        held = self._bytes + sum(map(len, bodies))
        if (
            matches > self._count_limit
            or held > _MAX_BUFFERED
            or 0 in counts
            or not _plain_names(names)
        ):
            return self._take_each(paths, bodies)
        self._keys += [name.replace(b"/", b"\x00") for name in names]
        self._paths += names
        self._counts += counts
        self._held += bodies
        self.matches = matches
        self._bytes = held
        return False

    def _take_each(self, paths: list[bytes], bodies: list[bytes]) -> bool:
        for path, body in zip(paths, bodies, strict=True):
            parts = begin_parts(_BEGIN_TEXT + path + _BEGIN_TEXT_END)
            self.current = None if parts is None else _Block(parts)
            if body and self._take_body(body):
                return True
            self._end_file()
        return False

    def _take_files(self, run: bytes) -> bool:
        """Lines of any kind, line break first: cut at begin messages, a file at a time."""
        if not run:
            return False
        pieces = run.split(BEGIN_AT)
        if self._take_rest(pieces[0]):
            return True
        for index in range(1, len(pieces)):
            piece = pieces[index]
            end = piece.find(b"\n")
            parts = begin_parts(_BEGIN + (piece if end < 0 else piece[:end]))
            self.current = None if parts is None else _Block(parts)
            if end >= 0 and self._take_rest(piece[end:]):
                return True
        return False

    def _take_rest(self, rest: bytes) -> bool:
        """The lines after a begin message (or before the first), line break first."""
        if not rest:
            return False
        end = rest.find(END_AT)
        body = rest if end < 0 else rest[:end]
        if body and self._take_body(body):
            return True
        if end < 0:
            return False
        self._end_file()
        after = rest.find(b"\n", end + 1)
        return after >= 0 and self.take_all(_split(rest[after:]))

    def _take_body(self, body: bytes) -> bool:
        """A file's lines up to its end message: held as one piece when all match or context."""
        matches = run_matches(body)
        if matches is None:
            return self.take_all(_split(body))
        current = self.current
        if current is None:
            return False
        current.items.append(body)
        current.matches += matches
        self.matches += matches
        self._bytes += len(body)
        return self.matches > self._count_limit or self._bytes > _MAX_BUFFERED

    def _end_file(self) -> None:
        current = self.current
        if current is not None and current.matches:
            self._keep(current)
        self.current = None

    def _keep(self, block: _Block) -> None:
        items = block.items
        self._keys.append(sort_key(block.parts))
        self._paths.append(block.parts)
        self._counts.append(block.matches)
        self._held.append(items[0] if len(items) == 1 else tuple(items))

    def replay(self, page: Page) -> None:
        """Feed the files held (the unfinished one too), in path order, to `page`."""
        self._end_file()
        # A heap, not a sort: a page mostly ends after a few of a thousand files.
        order = list(zip(self._keys, itertools.count()))
        heapq.heapify(order)
        while order:
            index = heapq.heappop(order)[1]
            path = self._paths[index]
            parts = path if isinstance(path, tuple) else tuple(path.decode().split("/"))
            if not self._admit(parts):
                self.refused += 1
                self.refused_matches += self._counts[index]
                continue
            page.begin(_display(parts))
            held = self._held[index]
            for item in held if isinstance(held, tuple) else (held,):
                for line in _lines(item):
                    found = kind(line)
                    if found is Kind.MATCH:
                        if page.match(line):
                            return
                    elif found is Kind.CONTEXT:
                        page.context_line(line)

    @property
    def files(self) -> int:
        """Files with matches, less those refused so far."""
        return len(self._keys) - self.refused

    @property
    def admitted_matches(self) -> int:
        """Matching lines, less those of files refused so far."""
        return self.matches - self.refused_matches


_Held = Line | tuple[Line, ...]
"""A held file's lines: one item, or several. A bytes item may be a run of lines, each
with a line break in front (as `take_runs` holds them), or one line (as `take_all`)."""


def _split(run: bytes) -> list[Line]:
    """The non-empty lines of a run."""
    return [line for line in run.split(b"\n") if line]


def _lines(item: Line) -> Sequence[Line]:
    return _split(item) if isinstance(item, bytes) else (item,)


class Stream:
    """Sink of an ordered (`--sort path`) search: feeds a page as ripgrep writes."""

    def __init__(self, admit: Admit, page: Page) -> None:
        self._admit = admit
        self._page = page
        self._open = False
        self.files = 0
        self.refused = 0
        self.summary: dict[str, Any] | None = None

    def take_all(self, lines: Sequence[Line]) -> bool:
        """Feed messages in order to the page; True (the rest not fed) once it is full."""
        take = self._take
        return any(take(line, found) for line, found in zip(lines, kinds(lines), strict=True))

    def _take(self, line: Line, found: Kind) -> bool:
        if found is Kind.MATCH:
            return self._open and self._page.match(line)
        if found is Kind.CONTEXT:
            if self._open:
                self._page.context_line(line)
        elif found is Kind.BEGIN:
            parts = begin_parts(line)
            self._open = parts is not None and self._admit(parts)
            if parts is not None and self._open:
                self.files += 1
                self._page.begin(_display(parts))
            else:
                self.refused += 1
        elif found is Kind.END:
            self._open = False
        else:
            data = message(line)
            if data.get("summary"):
                self.summary = data
        return False
