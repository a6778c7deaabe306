"""Log excerpts: a bounded view of a text of any size, built in one pass over its chunks.

Owns what the model sees of a long text: its first lines, its last lines and, from the
part in between, the lines that say what failed (`_failure_lines` knows them), all
within a hard character bound and with markers that say what was left out. It never
keeps more of the input than the lines it may show.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace

from handrail.errors import ConfigurationError
from handrail.shaping._failure_lines import ASCII_TRIGGERS, TRIGGERS, classify

__all__ = ["Excerpt", "ExcerptBuilder", "ExcerptLimits", "excerpt_text"]

_HIGH_SURROGATE_MIN, _HIGH_SURROGATE_MAX = "\ud800", "\udbff"
_WINDOW = 1 << 20
"""A larger chunk is taken in windows of this many chars, so a region never spans more."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ExcerptLimits:
    """How much of a text an excerpt may show."""

    max_chars: int = 8_000
    """Hard bound on `len(Excerpt.text)`, markers included."""
    head_lines: int = 20
    tail_lines: int = 60
    max_failure_lines: int = 40
    """Cap on failure lines kept (and on failing test names)."""
    max_line_chars: int = 500
    """A longer line is cut, with a marker saying how many chars were left out."""

    def __post_init__(self) -> None:
        counts = {
            "max_chars": self.max_chars,
            "head_lines": self.head_lines,
            "tail_lines": self.tail_lines,
            "max_failure_lines": self.max_failure_lines,
        }
        for name, value in counts.items():
            if value < 0:
                raise ConfigurationError(f"ExcerptLimits.{name} must not be negative")
        if self.max_line_chars < 1:
            raise ConfigurationError("ExcerptLimits.max_line_chars is at least 1")


@dataclass(frozen=True, kw_only=True, slots=True)
class Excerpt:
    """A bounded view of a text, with the counts that tell how much was left out.

    `text` is the head, a marker "[... N lines (M chars) omitted ...]", the failure lines
    of the omitted part ("L1234: FAILED tests/x.py::test_y"), and the tail. The counts
    are exact: `kept_lines + omitted_lines == total_lines`.
    """

    text: str
    total_chars: int
    total_lines: int
    kept_lines: int
    omitted_lines: int
    failures: tuple[str, ...]
    """Failure lines found anywhere, first ones first, deduplicated and capped: "L12: ..."."""
    failed_tests: tuple[str, ...]
    """Names of failing tests (pytest node ids, unittest, go, cargo, jest), capped."""
    exit_code: int | None
    """The last exit code the text states, if any."""
    truncated: bool
    """True iff anything at all was left out or cut."""


def excerpt_text(
    text: str,
    limits: ExcerptLimits | None = None,
    *,
    failures: bool = True,
) -> Excerpt:
    """The excerpt of a text already in memory."""
    builder = ExcerptBuilder(limits, failures=failures)
    builder.feed(text)
    return builder.finish()


@dataclass(frozen=True, slots=True)
class _Line:
    """One line: its number, its first chars, its full length and how it ended."""

    number: int
    text: str
    """At most max_line_chars chars of the content (the line without its terminator)."""
    length: int
    """Length of the content."""
    end: str
    """"\\n", "\\r\\n", or "" for a last line without a terminator."""

    @property
    def raw_len(self) -> int:
        return self.length + len(self.end)


@dataclass(frozen=True, slots=True)
class _Region:
    """Complete lines of a chunk not yet split: `chunk[start:stop]`, each ending a line."""

    chunk: str
    start: int
    stop: int
    first: int
    """Number of the first line."""
    count: int


class ExcerptBuilder:
    """Builds an Excerpt from chunks of text of any size, split anywhere.

    Memory stays bounded by the limits: the head, a ring of tail lines, the failure lines
    and the first chars of the current line; everything else is only counted. The result
    does not depend on how the text was split into chunks.
    """

    __slots__ = (
        "_chars",
        "_done",
        "_exit",
        "_extras",
        "_failures",
        "_found",
        "_head",
        "_keep",
        "_lazy",
        "_limits",
        "_lines",
        "_overflow",
        "_overflow_at",
        "_part",
        "_part_cr",
        "_part_kept",
        "_part_len",
        "_seen",
        "_tests",
    )

    def __init__(self, limits: ExcerptLimits | None = None, *, failures: bool = True) -> None:
        self._limits = limits or ExcerptLimits()
        self._failures = failures
        width = self._limits.max_line_chars
        # Failure patterns look at twice the shown width of a line; nothing else is kept.
        self._keep = 2 * width if failures else width
        self._chars = 0
        self._lines = 0
        self._head: list[_Line] = []
        self._lazy: _Region | None = None
        self._extras: deque[_Line] = deque(maxlen=self._limits.tail_lines)
        self._part: list[str] = []
        self._part_kept = 0
        self._part_len = 0
        self._part_cr = False
        self._found: list[_Line] = []
        self._seen: set[str] = set()
        self._tests: dict[str, None] = {}
        self._overflow = 0
        self._overflow_at: deque[int] = deque(maxlen=self._limits.tail_lines)
        self._exit: int | None = None
        self._done: Excerpt | None = None

    def feed(self, chunk: str) -> None:
        """Take the next chunk; chunks may split lines (and CRLF pairs) anywhere."""
        if self._done is not None:
            raise ConfigurationError("an ExcerptBuilder takes no chunk after finish()")
        if len(chunk) <= _WINDOW:
            self._feed(chunk)
            return
        for start in range(0, len(chunk), _WINDOW):
            self._feed(chunk[start : start + _WINDOW])

    def finish(self) -> Excerpt:
        """The excerpt of everything fed; later calls return the same one."""
        if self._done is None:
            if self._part_len:
                text = "".join(self._part)
                self._complete(text, self._part_len, "")
            self._done = self._compose()
        return self._done

    def recompose(self, max_chars: int) -> Excerpt:
        """The excerpt of everything fed, composed again within `max_chars`.

        For a caller whose room shrank after reading (the JSON around the text, or
        redaction lengthening it); what was kept while reading is not read again.
        """
        self.finish()
        limits = self._limits
        self._limits = replace(limits, max_chars=max(0, max_chars))
        try:
            return self._compose()
        finally:
            self._limits = limits

    # --- reading ---------------------------------------------------------------------------

    def _feed(self, chunk: str) -> None:
        if not chunk:
            return
        self._chars += len(chunk)
        first = chunk.find("\n")
        if first < 0:
            self._extend(chunk, 0, len(chunk))
            return
        self._extend(chunk, 0, first)
        self._end_part()
        last = chunk.rfind("\n")
        if last > first:
            self._region(chunk, first + 1, last + 1)
        self._extend(chunk, last + 1, len(chunk))

    def _extend(self, chunk: str, start: int, stop: int) -> None:
        """Add `chunk[start:stop]` to the current line, keeping only its first chars."""
        if stop <= start:
            return
        self._part_len += stop - start
        room = self._keep - self._part_kept
        if room > 0:
            piece = chunk[start : min(stop, start + room)]
            self._part.append(piece)
            self._part_kept += len(piece)
        self._part_cr = chunk[stop - 1] == "\r"

    def _end_part(self) -> None:
        crlf = self._part_len > 0 and self._part_cr
        length = self._part_len - crlf
        text = "".join(self._part)[:length]
        self._part.clear()
        self._part_kept = self._part_len = 0
        self._part_cr = False
        self._complete(text, length, "\r\n" if crlf else "\n")

    def _complete(self, text: str, length: int, end: str) -> None:
        """Take one finished line whose content starts with `text` (at most _keep chars)."""
        number = self._lines + 1
        if self._failures:
            self._inspect(number, text, length, end)
        line = _Line(number, text[: self._limits.max_line_chars], length, end)
        if number <= self._limits.head_lines:
            self._head.append(line)
        else:
            self._extras.append(line)
            if len(self._extras) == self._extras.maxlen:
                self._lazy = None
        self._lines = number

    def _region(self, chunk: str, start: int, stop: int) -> None:
        """Take the complete lines of `chunk[start:stop]`, which ends with a newline."""
        while self._lines < self._limits.head_lines and start < stop:
            end = chunk.find("\n", start, stop)
            self._complete(*_line_at(chunk, start, end, self._keep))
            start = end + 1
        if start >= stop:
            return
        count = chunk.count("\n", start, stop)
        first = self._lines + 1
        if self._failures:
            self._scan(chunk, start, stop, first)
        tail = self._limits.tail_lines
        if count >= tail:
            # These lines alone fill the tail: keep a reference, split them only at the end.
            self._extras.clear()
            self._lazy = _Region(chunk, start, stop, first, count) if tail else None
        else:
            width = self._limits.max_line_chars
            while start < stop:
                end = chunk.find("\n", start, stop)
                text, length, ending = _line_at(chunk, start, end, width)
                self._extras.append(_Line(self._lines + 1, text, length, ending))
                self._lines += 1
                start = end + 1
            if len(self._extras) == tail:
                self._lazy = None
        self._lines = first + count - 1

    def _scan(self, chunk: str, start: int, stop: int, first: int) -> None:
        """Inspect the lines of a region that hold any trigger of a failure pattern."""
        starts: set[int] = set()
        # An ASCII chunk is searched lower-cased, for fewer (and longer, so faster) needles.
        text, triggers = (chunk.lower(), ASCII_TRIGGERS) if chunk.isascii() else (chunk, TRIGGERS)
        for trigger in triggers:
            at = text.find(trigger, start, stop)
            while at >= 0:
                line_start = text.rfind("\n", start, at) + 1 or start
                starts.add(line_start)
                at = text.find(trigger, text.find("\n", at, stop) + 1, stop)
        number, previous = first, start
        for line_start in sorted(starts):
            number += chunk.count("\n", previous, line_start)
            previous = line_start
            end = chunk.find("\n", line_start, stop)
            self._inspect(number, *_line_at(chunk, line_start, end, self._keep))

    def _inspect(self, number: int, text: str, length: int, end: str) -> None:
        hit = classify(text)
        if hit is None:
            return
        failed, test, code = hit
        if code is not None:
            self._exit = code
        cap = self._limits.max_failure_lines
        if test is not None and len(self._tests) < cap:
            self._tests[test] = None
        if not failed:
            return
        width = self._limits.max_line_chars
        key = text[:width].strip()
        if key in self._seen:
            return
        if len(self._found) < cap:
            self._seen.add(key)
            self._found.append(_Line(number, text[:width], length, end))
        elif number > self._limits.head_lines:
            self._overflow += 1
            self._overflow_at.append(number)

    # --- composing -------------------------------------------------------------------------

    def _tail(self) -> list[_Line]:
        lines = list(self._extras)
        lazy = self._lazy
        missing = self._limits.tail_lines - len(lines)
        if lazy is None or missing <= 0:
            return lines
        width = self._limits.max_line_chars
        taken: list[_Line] = []
        stop = lazy.stop - 1
        for offset in range(1, min(missing, lazy.count) + 1):
            start = lazy.chunk.rfind("\n", lazy.start, stop) + 1 or lazy.start
            text, length, end = _line_at(lazy.chunk, start, stop, width)
            taken.append(_Line(lazy.first + lazy.count - offset, text, length, end))
            stop = start - 1
        taken.reverse()
        return taken + lines

    def _compose(self) -> Excerpt:
        limits = self._limits
        width = limits.max_line_chars
        head = self._head
        tail = self._tail()
        tail_first = tail[0].number if tail else self._lines + 1
        fails = [f for f in self._found if len(head) < f.number < tail_first]
        more = self._overflow - sum(n >= tail_first for n in self._overflow_at)
        head_txt = [_show(line, width) for line in head]
        fail_txt = [f"L{f.number}: {_body(f, width)}\n" for f in fails]
        tail_txt = [_show(line, width) for line in tail]

        def build(h: int, f: int, t: int) -> tuple[str, int]:
            shown = [*head[:h], *fails[:f], *tail[len(tail) - t :]]
            omitted = self._lines - len(shown)
            if not omitted:  # every line is shown: show them as they were
                return "".join(_show(line, width) for line in shown), 0
            omitted_chars = self._chars - sum(line.raw_len for line in shown)
            parts = [*head_txt[:h], _gap(omitted, omitted_chars), *fail_txt[:f]]
            if more + len(fails) - f:
                parts.append(_more(more + len(fails) - f))
            parts += tail_txt[len(tail) - t :]
            return "".join(parts), omitted

        h, f, t = len(head), len(fails), len(tail)
        text, omitted = build(h, f, t)
        if len(text) > limits.max_chars:
            reserve = len(_gap(self._lines, self._chars))
            if fails or more:
                reserve += len(_more(more + len(fails)))
            h, f, t = _fit(limits.max_chars - reserve, head_txt, fail_txt, tail_txt)
            text, omitted = build(h, f, t)
        cut = any(line.length > width for line in [*head[:h], *fails[:f], *tail[len(tail) - t :]])
        if len(text) > limits.max_chars:
            text, cut = _cut(text, limits.max_chars), True
        return Excerpt(
            text=text,
            total_chars=self._chars,
            total_lines=self._lines,
            kept_lines=self._lines - omitted,
            omitted_lines=omitted,
            failures=tuple(f"L{f.number}: {_body(f, width)}" for f in self._found),
            failed_tests=tuple(self._tests),
            exit_code=self._exit,
            truncated=bool(omitted) or cut,
        )


def _line_at(chunk: str, start: int, end: int, keep: int) -> tuple[str, int, str]:
    """Kept text, content length and terminator of the line `chunk[start:end]` + newline."""
    crlf = end > start and chunk[end - 1] == "\r"
    length = end - start - crlf
    return chunk[start : start + min(length, keep)], length, "\r\n" if crlf else "\n"


def _fit(budget: int, head: list[str], fails: list[str], tail: list[str]) -> tuple[int, int, int]:
    """How many lines of head, failures and tail fit in `budget` chars, shared in proportion.

    Head and failures keep their first lines, the tail its last ones; what the shares
    leave over goes to the tail, then the failures, then the head.
    """
    ordered = [head, fails, tail[::-1]]
    sizes = [sum(map(len, lines)) for lines in ordered]
    total = sum(sizes)
    if budget <= 0 or total == 0:
        return 0, 0, 0
    counts = [
        _prefix(lines, budget * size // total) for lines, size in zip(ordered, sizes, strict=True)
    ]
    left = budget - sum(sum(map(len, lines[:n])) for lines, n in zip(ordered, counts, strict=True))
    for index in (2, 1, 0):
        lines, taken = ordered[index], counts[index]
        extra = _prefix(lines[taken:], left)
        left -= sum(map(len, lines[taken : taken + extra]))
        counts[index] += extra
    return counts[0], counts[1], counts[2]


def _prefix(parts: list[str], budget: int) -> int:
    """How many of the first `parts` fit in `budget` chars."""
    used = 0
    for count, part in enumerate(parts):
        used += len(part)
        if used > budget:
            return count
    return len(parts)


def _show(line: _Line, width: int) -> str:
    return _body(line, width) + line.end


def _body(line: _Line, width: int) -> str:
    if line.length <= width:
        return line.text
    kept = line.text[:width]
    if _HIGH_SURROGATE_MIN <= kept[-1] <= _HIGH_SURROGATE_MAX:
        kept = kept[:-1]  # never half of a surrogate pair
    return f"{kept}[... {line.length - len(kept)} chars cut ...]"


def _gap(lines: int, chars: int) -> str:
    return f"[... {lines} lines ({chars} chars) omitted ...]\n"


def _more(count: int) -> str:
    return f"[... {count} more failure lines not shown ...]\n"


def _cut(text: str, limit: int) -> str:
    """`text` cut to at most `limit` chars, never inside a surrogate pair or a CRLF."""
    if len(text) <= limit:
        return text
    if limit <= 0:
        return ""
    last = text[limit - 1]
    if _HIGH_SURROGATE_MIN <= last <= _HIGH_SURROGATE_MAX or (last == "\r" and text[limit] == "\n"):
        limit -= 1
    return text[:limit]
