"""Unified diffs parsed strictly and applied exactly: the text half of `apply_patch`.

Owns turning patch text (parsed by `unidiff`) into file changes with the paths as
written, and applying hunks to a file's text with no fuzz and no offset. Never touches
the filesystem and never decides whether a path may be written: `edits` does both.
"""

from __future__ import annotations

import difflib
import io
import re
from collections import Counter
from dataclasses import dataclass, replace
from enum import StrEnum

from unidiff.constants import (
    DEV_NULL,
    RE_DIFF_GIT_HEADER,
    RE_DIFF_GIT_HEADER_NO_PREFIX,
    RE_DIFF_GIT_HEADER_URI_LIKE,
    RE_HUNK_HEADER,
    RE_NO_NEWLINE_MARKER,
    RE_SOURCE_FILENAME,
    RE_TARGET_FILENAME,
)
from unidiff.errors import UnidiffParseError
from unidiff.patch import Hunk as _UnidiffHunk
from unidiff.patch import PatchedFile, PatchSet

from handrail.errors import Conflict, InvalidArgument

__all__ = [
    "Action",
    "FilePatch",
    "Hunk",
    "ParsedPatch",
    "PatchLine",
    "TextDiff",
    "apply_file_patch",
    "parse_patch",
    "patchable_text",
    "split_lines",
    "text_diff",
]

_MODES = {"100644": 0o644, "100755": 0o755}
_SPECIAL_MODES = {"120000", "160000"}  # symbolic link, submodule
_INFO = re.compile(
    r"^(index |similarity index |dissimilarity index |old mode |new mode |new file mode "
    r"|deleted file mode |rename from |rename to |copy from |copy to |Binary files "
    r"|GIT binary patch)"
)
_CONTEXT = 3
_DIFF_WINDOW = 2_000
_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


class Action(StrEnum):
    """What a patch does to one file."""

    CREATE = "create"
    MODIFY = "modify"
    DELETE = "delete"
    RENAME = "rename"


@dataclass(frozen=True, kw_only=True, slots=True)
class PatchLine:
    """One line of a hunk: its operation, its text, and its line ending ("" for none)."""

    op: str
    text: str
    eol: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Hunk:
    """One `@@` block, with the line numbers its header claims."""

    source_start: int
    source_length: int
    target_start: int
    target_length: int
    lines: tuple[PatchLine, ...]

    @property
    def added(self) -> int:
        """Lines this hunk adds."""
        return sum(line.op == "+" for line in self.lines)

    @property
    def removed(self) -> int:
        """Lines this hunk removes."""
        return sum(line.op == "-" for line in self.lines)


@dataclass(frozen=True, kw_only=True, slots=True)
class FilePatch:
    """The change to one file: old and new paths as written (None for /dev/null)."""

    old: str | None
    new: str | None
    hunks: tuple[Hunk, ...]
    mode: int | None = None
    """Permission bits from `new file mode`, for a created file."""

    @property
    def action(self) -> Action:
        """Create, delete, rename or modify."""
        if self.old is None:
            return Action.CREATE
        if self.new is None:
            return Action.DELETE
        return Action.RENAME if self.old != self.new else Action.MODIFY

    @property
    def added(self) -> int:
        """Lines added in all hunks."""
        return sum(h.added for h in self.hunks)

    @property
    def removed(self) -> int:
        """Lines removed in all hunks."""
        return sum(h.removed for h in self.hunks)


@dataclass(frozen=True, kw_only=True, slots=True)
class ParsedPatch:
    """Every file change of a patch, and every path any header line names."""

    files: tuple[FilePatch, ...]
    mentioned: frozenset[str]


def parse_patch(text: str, *, max_files: int) -> ParsedPatch:
    """Parse a unified diff strictly; InvalidArgument for anything unclear.

    Refused: NUL characters, binary patches, copies, symbolic links and submodules,
    mode changes, lines outside any hunk that look like hunk lines (a hunk header
    lying about its length), hunks with no lines, more than `max_files` files.
    """
    if "\x00" in text:
        raise InvalidArgument("The patch contains a NUL character; a patch is text.")
    rough = text.count("\n+++ ") + text.count("\ndiff --git ")
    if rough > 2 * max_files + 2:
        raise InvalidArgument(f"The patch changes more than {max_files} files; split it.")
    try:
        patch_set = PatchSet(io.StringIO(text))
    except (UnidiffParseError, ValueError, IndexError) as exc:
        reason = str(exc).split(":", 1)[0][:80]
        raise InvalidArgument(f"The patch is not a valid unified diff ({reason}).") from None
    if not patch_set:
        raise InvalidArgument("The patch contains no file changes.")
    if len(patch_set) > max_files:
        raise InvalidArgument(f"The patch changes more than {max_files} files; split it.")
    body = {line.diff_line_no for pf in patch_set for hunk in pf for line in hunk}
    sources, targets, others = _scan_headers(text, body)
    strip = bool(sources or targets) and (
        all(name.startswith("a/") for name in sources)
        and all(name.startswith("b/") for name in targets)
    )
    mentioned = {_path(name, strip=strip) for name in sources | targets} | others
    files = tuple(_file_patch(pf, strip=strip) for pf in patch_set)
    return ParsedPatch(files=files, mentioned=frozenset(mentioned))


def _scan_headers(text: str, body: set[int | None]) -> tuple[set[str], set[str], set[str]]:
    """Names in header lines, and a check that every other line is harmless.

    unidiff quietly turns lines after a complete hunk into "patch info"; a `+` line
    there would be dropped without a word, so such lines refuse the whole patch.
    """
    sources: set[str] = set()
    targets: set[str] = set()
    others: set[str] = set()
    previous_in_hunk = False
    for number, line in enumerate(io.StringIO(text), 1):
        if number in body:
            previous_in_hunk = True
            continue
        bare = line.rstrip("\r\n")
        git = (
            RE_DIFF_GIT_HEADER.match(line)
            or RE_DIFF_GIT_HEADER_URI_LIKE.match(line)
            or RE_DIFF_GIT_HEADER_NO_PREFIX.match(line)
        )
        source = RE_SOURCE_FILENAME.match(line)
        target = RE_TARGET_FILENAME.match(line)
        info = _INFO.match(line)
        if git:
            sources.add(_name(git.group("source")))
            targets.add(_name(git.group("target")))
        elif source:
            name = _name(source.group("filename"))
            if name != DEV_NULL:
                sources.add(name)
        elif target:
            name = _name(target.group("filename"))
            if name != DEV_NULL:
                targets.add(name)
        elif info:
            _check_info(bare, others)
        elif RE_NO_NEWLINE_MARKER.match(line):
            continue  # a marker ends a hunk; what follows it is judged as after the hunk
        elif RE_HUNK_HEADER.match(line) or not bare:
            pass
        elif bare.startswith(("+", "-", "@", "\\")) or (previous_in_hunk and line[0] == " "):
            raise InvalidArgument(
                f"Line {number} of the patch lies outside every hunk: a hunk header "
                f"(@@ -a,b +c,d @@) does not match the number of its lines."
            )
        previous_in_hunk = False
    return sources, targets, others


def _check_info(line: str, others: set[str]) -> None:
    if line.startswith(("copy from ", "copy to ")):
        raise InvalidArgument("Copies are not supported; create the new file instead.")
    if line.startswith(("Binary files ", "GIT binary patch")):
        raise InvalidArgument("Binary patches are not supported; patches change text files.")
    if line.startswith(("rename from ", "rename to ")):
        others.add(_name(line.split(" ", 2)[2]))
    if line.startswith(("old mode ", "new mode ")):
        raise InvalidArgument("Mode changes are not supported; patches change file content.")
    mode = line.rsplit(" ", 1)[-1]
    if line.startswith(("new file mode ", "deleted file mode ")) and mode not in _MODES:
        raise InvalidArgument("Symbolic links and submodules cannot be patched; files only.")
    if line.startswith("index ") and mode in _SPECIAL_MODES:
        raise InvalidArgument("Symbolic links and submodules cannot be patched; files only.")


def _name(raw: str) -> str:
    r"""A file name from a header line: a CRLF patch leaves a "\r" at its end."""
    return _unquote(raw.removesuffix("\r"))


def _unquote(name: str) -> str:
    r"""A header name without git's C-style quoting (`"a/\\303\\244.txt"`)."""
    if not (len(name) >= 2 and name.startswith('"') and name.endswith('"')):  # noqa: PLR2004
        return name
    raw = bytearray()
    chars = iter(name[1:-1])
    for ch in chars:
        if ch != "\\":
            raw.extend(ch.encode("utf-8", "surrogatepass"))
            continue
        esc = next(chars, "")
        if esc in _ESCAPES:
            raw.append(_ESCAPES[esc])
        elif esc in "0123":
            digits = esc + next(chars, "") + next(chars, "")
            if not re.fullmatch("[0-3][0-7]{2}", digits):
                raise InvalidArgument("A quoted path in the patch has a bad escape.")
            raw.append(int(digits, 8))
        else:
            raise InvalidArgument("A quoted path in the patch has a bad escape.")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidArgument("A quoted path in the patch is not UTF-8.") from None


def _path(name: str, *, strip: bool) -> str:
    return name[2:] if strip and name[:2] in {"a/", "b/"} else name


def _file_patch(pf: PatchedFile, *, strip: bool) -> FilePatch:
    source_file = _name(pf.source_file)
    target_file = _name(pf.target_file)
    old = None if source_file == DEV_NULL else _path(source_file, strip=strip)
    new = None if target_file == DEV_NULL else _path(target_file, strip=strip)
    if old is None and new is None:
        raise InvalidArgument("A file in the patch goes from /dev/null to /dev/null.")
    if not old and not new:
        raise InvalidArgument("A file in the patch has no name.")
    hunks = tuple(_hunk(hunk, number, new or old or "?") for number, hunk in enumerate(pf, 1))
    mode = _MODES.get(pf.target_mode or "") if old is None else None
    if not hunks and old == new:
        raise InvalidArgument(f"The patch changes nothing in {new}.")
    return FilePatch(old=old, new=new, hunks=hunks, mode=mode)


def _hunk(hunk: _UnidiffHunk, number: int, name: str) -> Hunk:
    lines: list[PatchLine] = []
    for line in hunk:
        kind = line.line_type
        if kind == "\\":
            if not lines or lines[-1].eol == "":
                raise InvalidArgument(f"Hunk {number} of {name} has a misplaced '\\' line.")
            # The marker removes only the final "\n": a "\r" before it is content.
            last = lines[-1]
            lines[-1] = replace(last, text=last.text + last.eol[:-1], eol="")
        elif kind in {" ", "-", "+"}:
            text, eol = _split_eol(line.value)
            lines.append(PatchLine(op=kind, text=text, eol=eol or "\n"))
    if not lines or hunk.source_length + hunk.target_length == 0:
        raise InvalidArgument(f"Hunk {number} of {name} has no lines.")
    return Hunk(
        source_start=hunk.source_start,
        source_length=hunk.source_length,
        target_start=hunk.target_start,
        target_length=hunk.target_length,
        lines=tuple(lines),
    )


def _split_eol(value: str) -> tuple[str, str]:
    if value.endswith("\r\n"):
        return value[:-2], "\r\n"
    if value.endswith("\n"):
        return value[:-1], "\n"
    return value, ""


def split_lines(text: str) -> list[tuple[str, str]]:
    r"""Lines of `text` split on "\\n" only, each as (text, ending); the last may lack one."""
    parts = text.split("\n")
    last = parts.pop()
    lines = [(p[:-1], "\r\n") if p.endswith("\r") else (p, "\n") for p in parts]
    if last:
        lines.append((last, ""))
    return lines


def _uniform_eol(lines: list[tuple[str, str]]) -> str | None:
    endings = {eol for _, eol in lines if eol}
    return endings.pop() if len(endings) == 1 else None


def patchable_text(name: str, data: bytes | None) -> str:
    """A file's bytes as text a patch can apply to (None: an absent file, empty).

    Binary files (with a NUL byte) and files that are not UTF-8 are refused with
    InvalidArgument: patches change UTF-8 text, and write_file replaces anything else.
    """
    data = data or b""
    if b"\0" in data:
        raise InvalidArgument(f"{name} is binary; patches apply to text files.")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidArgument(f"{name} is not UTF-8 text; use write_file to replace it.") from None


def apply_file_patch(name: str, original: str | None, patch: FilePatch) -> str:
    """The text after applying `patch` to `original` (None: the file does not exist).

    Each hunk applies exactly at the line its header names; every context and removed
    line must match (line endings may differ between CRLF and LF, but a missing final
    newline must be stated). An LF-only patch adds CRLF lines to a file that uses CRLF
    throughout. Conflict when the file does not match; InvalidArgument when the
    hunk headers contradict themselves.
    """
    source = split_lines(original or "")
    # A patch written with LF endings for a file that uses CRLF throughout (as a model
    # writes one) adds CRLF lines; a patch that carries CRLF itself is taken as written.
    carries_crlf = any(line.eol == "\r\n" for hunk in patch.hunks for line in hunk.lines)
    to_crlf = not carries_crlf and _uniform_eol(source) == "\r\n"
    out: list[tuple[str, str]] = []
    pos = 0
    for number, hunk in enumerate(patch.hunks, 1):
        start = hunk.source_start if hunk.source_length == 0 else hunk.source_start - 1
        if start < pos:
            raise InvalidArgument(
                f"Hunk {number} of {name} overlaps an earlier hunk or is out of order."
            )
        if start + hunk.source_length > len(source):
            raise Conflict(
                f"Hunk {number} of {name} reaches past the end of the file "
                f"({len(source)} lines); re-read the file and make the patch again."
            )
        out.extend(source[pos:start])
        expected = len(out) + (1 if hunk.target_length else 0)
        if hunk.target_start != expected:
            raise InvalidArgument(
                f"Hunk {number} of {name} says +{hunk.target_start} but its lines put it "
                f"at +{expected}; the hunk header is inconsistent."
            )
        at = start
        for line in hunk.lines:
            if line.op == "+":
                out.append((line.text, "\r\n" if to_crlf and line.eol else line.eol))
                continue
            text, eol = source[at]
            if text != line.text or (eol == "") != (line.eol == ""):
                raise Conflict(
                    f"Hunk {number} of {name} does not match the file at line {at + 1}; "
                    f"re-read the file and make the patch again."
                )
            if line.op == " ":
                out.append((text, eol))
            at += 1
        pos = at
    out.extend(source[pos:])
    if any(not eol for _, eol in out[:-1]):
        raise Conflict(
            f"The patch would leave a line without a newline in the middle of {name} (does "
            f"its last line lack a newline?); re-read the file and make the patch again."
        )
    return "".join(text + eol for text, eol in out)


@dataclass(frozen=True, kw_only=True, slots=True)
class TextDiff:
    """Lines added and removed between two texts, and a bounded unified diff of them."""

    added: int
    removed: int
    excerpt: str
    truncated: bool


def text_diff(name: str, before: str, after: str, *, limit: int) -> TextDiff:
    """Count the changed lines of two texts; keep the first `limit` characters of a diff.

    Line-by-line matching is quadratic at worst, so only the changed middle of the texts
    (after their common first and last lines) is compared, and at most
    `_DIFF_WINDOW` lines of it. A larger middle is counted as a multiset of lines (a
    moved line counts as unchanged) and its excerpt is marked truncated.
    """
    a = _keep_ends(before)
    b = _keep_ends(after)
    start = 0
    while start < min(len(a), len(b)) and a[start] == b[start]:
        start += 1
    end_a, end_b = len(a), len(b)
    while end_a > start and end_b > start and a[end_a - 1] == b[end_b - 1]:
        end_a -= 1
        end_b -= 1
    exact = max(end_a, end_b) - start <= _DIFF_WINDOW
    low = max(0, start - _CONTEXT)
    window_a = a[low : min(end_a, start + _DIFF_WINDOW) + _CONTEXT]
    window_b = b[low : min(end_b, start + _DIFF_WINDOW) + _CONTEXT]
    matcher = difflib.SequenceMatcher(None, window_a, window_b)
    if exact:
        added = removed = 0
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            removed += (i2 - i1) * (tag != "equal")
            added += (j2 - j1) * (tag != "equal")
    else:
        old, new = Counter(a[start:end_a]), Counter(b[start:end_b])
        added, removed = (new - old).total(), (old - new).total()
    lines = [f"--- a/{name}\n", f"+++ b/{name}\n"]
    for group in matcher.get_grouped_opcodes(_CONTEXT):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        lines.append(f"@@ -{_span(low + i1, i2 - i1)} +{_span(low + j1, j2 - j1)} @@\n")
        for kind, a1, a2, b1, b2 in group:
            if kind == "equal":
                lines.extend(" " + line for line in window_a[a1:a2])
                continue
            lines.extend("-" + line for line in window_a[a1:a2])
            lines.extend("+" + line for line in window_b[b1:b2])
    excerpt, cut = _bounded(lines if len(lines) > 2 else [], limit)  # noqa: PLR2004
    return TextDiff(added=added, removed=removed, excerpt=excerpt, truncated=cut or not exact)


def _keep_ends(text: str) -> list[str]:
    """Lines split on newlines only, each with its ending (patches know no other)."""
    return [text + eol for text, eol in split_lines(text)]


def _span(start: int, length: int) -> str:
    """A unified diff range: 1-based start, and for an empty range the line before it."""
    if length == 1:
        return str(start + 1)
    return f"{start + 1 if length else start},{length}"


def _bounded(lines: list[str], limit: int) -> tuple[str, bool]:
    parts: list[str] = []
    size = 0
    for line in lines:
        shown = line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
        if size + len(shown) > limit:
            return "".join(parts), True
        parts.append(shown)
        size += len(shown)
    return "".join(parts), False
