"""The walk behind `find_files`: depth-first, in name order, bounded, never through a link.

Owns visiting a workspace directory tree (each directory opened by name from its
parent's descriptor with O_NOFOLLOW), which names are shown, and the matches and counts
a listing reports. It never reads a file's contents, never follows a symbolic link and
never compiles a model's glob (`_globs` does).
"""

from __future__ import annotations

import itertools
import os
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from handrail.errors import InvalidArgument, NotFound
from handrail.tools.workspace._globs import Glob
from handrail.tools.workspace.paths import Workspace, WorkspaceFile

__all__ = ["EntryType", "FindQuery", "Finder", "WalkLimits", "find", "timestamp"]

_CHECK_EVERY = 256
_INVISIBLE = frozenset({"Cc", "Cf", "Zl", "Zp"})

EntryType = Literal["file", "dir", "symlink", "other"]


def _shown_name(name: str) -> bool:
    """Whether a name found on disk can be shown to and used by the model."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return not any(unicodedata.category(ch) in _INVISIBLE for ch in name)


def timestamp(seconds: float) -> str | None:
    """A modification time as ISO 8601 UTC to the second; None when it cannot be one."""
    try:
        moment = datetime.fromtimestamp(seconds, UTC)
    except (OverflowError, OSError, ValueError):
        return None
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass(frozen=True, kw_only=True, slots=True)
class WalkLimits:
    """How far one walk goes: see `WorkspaceConfig`."""

    max_visited: int
    max_depth: int
    list_hidden: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class FindQuery:
    """A find_files call's checked arguments."""

    glob: Glob
    kind: Literal["file", "dir", "symlink", "any"]
    min_size: int | None
    max_size: int | None
    modified_after: float | None
    limit: int


@dataclass(kw_only=True, slots=True)
class _Found:
    entries: list[dict[str, Any]] = field(default_factory=list)
    total: int = 0
    visited: int = 0
    stopped: str | None = None
    skipped: Counter[str] = field(default_factory=Counter)


class Finder:
    """A depth-first walk in name order, each directory opened relative to its parent.

    Subdirectories are opened by name from their parent's descriptor with O_NOFOLLOW,
    so a directory swapped for a symbolic link mid-walk is skipped, never followed.
    """

    def __init__(
        self,
        workspace: Workspace,
        limits: WalkLimits,
        query: FindQuery,
        out_of_time: Callable[[], bool],
    ) -> None:
        self._workspace = workspace
        self._limits = limits
        self._query = query
        self._out_of_time = out_of_time
        self._seen = 0
        self.found = _Found()

    def walk(self, fd: int, parts: tuple[str, ...]) -> None:
        """Walk the directory `fd` (which this closes) whose path is `parts`."""
        stack: list[tuple[int, tuple[str, ...], Iterator[os.DirEntry[str]]]] = []
        try:
            self._enter(stack, fd, parts)
            while stack and self.found.stopped != "time":
                dir_fd, dir_parts, entries = stack[-1]
                entry = next(entries, None)
                if entry is None:
                    stack.pop()
                    os.close(dir_fd)
                    continue
                sub = self._visit(dir_fd, dir_parts, entry, depth=len(stack))
                if sub is not None:
                    self._enter(stack, sub, (*dir_parts, entry.name))
        finally:
            for dir_fd, _, _ in stack:
                os.close(dir_fd)

    def _enter(
        self,
        stack: list[tuple[int, tuple[str, ...], Iterator[os.DirEntry[str]]]],
        fd: int,
        parts: tuple[str, ...],
    ) -> None:
        try:
            entries = self._list(fd)
        except OSError:
            os.close(fd)
            self.found.skipped["unreadable_dirs"] += 1
            return
        stack.append((fd, parts, iter(entries)))

    def _list(self, fd: int) -> list[os.DirEntry[str]]:
        room = self._limits.max_visited - self.found.visited
        with os.scandir(fd) as listing:
            entries = list(itertools.islice(listing, room + 1))
        if len(entries) > room:
            self.found.stopped = "visited"
            entries = entries[:room]
        self.found.visited += len(entries)
        entries.sort(key=lambda entry: entry.name)
        return entries

    def _visit(
        self, dir_fd: int, parts: tuple[str, ...], entry: os.DirEntry[str], *, depth: int
    ) -> int | None:
        """Report `entry` if it matches; a descriptor of it if the walk goes into it."""
        self._seen += 1
        if self._seen % _CHECK_EVERY == 0 and self._out_of_time():
            self.found.stopped = "time"
            return None
        name = entry.name
        reason = self._unlisted(name)
        if reason is not None:
            self.found.skipped[reason] += 1
            return None
        path = (*parts, name)
        kind = _kind(entry)
        self._report(path, kind, entry)
        if kind != "dir" or self.found.stopped or not self._query.glob.may_match_below(path):
            return None
        if depth >= self._limits.max_depth:
            self.found.skipped["too_deep"] += 1
            return None
        try:
            return os.open(
                name,
                os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                dir_fd=dir_fd,
            )
        except OSError:
            # Gone, unreadable, or swapped for a symbolic link since it was listed.
            self.found.skipped["unreadable_dirs"] += 1
            return None

    def _unlisted(self, name: str) -> str | None:
        """Why a name is not listed (nor entered), or None."""
        if not _shown_name(name):
            return "unsafe_names"
        if self._workspace.ignores(name):
            return "ignored"
        if not self._limits.list_hidden and name.startswith("."):
            return "hidden"
        return None

    def _report(self, path: tuple[str, ...], kind: EntryType, entry: os.DirEntry[str]) -> None:
        query = self._query
        if query.kind not in {"any", kind} or not query.glob.matches(path):
            return
        sized = query.min_size is not None or query.max_size is not None
        if sized and kind != "file":
            return
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            self.found.skipped["vanished"] += 1
            return
        if query.min_size is not None and info.st_size < query.min_size:
            return
        if query.max_size is not None and info.st_size > query.max_size:
            return
        if query.modified_after is not None and info.st_mtime <= query.modified_after:
            return
        self.found.total += 1
        if len(self.found.entries) < query.limit:
            item: dict[str, Any] = {"path": "/".join(path), "type": kind}
            if kind == "file":
                item["size"] = info.st_size
            item["modified"] = timestamp(info.st_mtime)
            self.found.entries.append(item)


def _kind(entry: os.DirEntry[str]) -> EntryType:
    if entry.is_symlink():
        return "symlink"
    if entry.is_dir(follow_symlinks=False):
        return "dir"
    if entry.is_file(follow_symlinks=False):
        return "file"
    return "other"


def find(
    workspace: Workspace,
    limits: WalkLimits,
    query: FindQuery,
    out_of_time: Callable[[], bool],
) -> dict[str, Any]:
    """List what matches `query`, in path order, with counts and notes for the model."""
    start = WorkspaceFile(query.glob.prefix)
    if workspace.ignored(start):
        raise InvalidArgument(f"{start.text} is ignored in this workspace.")
    try:
        fd = workspace.open_dir(start)
    except NotFound:
        fd = None
    finder = Finder(workspace, limits, query, out_of_time)
    if fd is not None:
        finder.walk(fd, start.parts)
    found = finder.found
    complete = found.stopped is None
    result: dict[str, Any] = {
        "entries": found.entries,
        "returned": len(found.entries),
        "total": found.total,
        "truncated": found.total > len(found.entries) or not complete,
        "complete": complete,
        "visited": found.visited,
    }
    if found.skipped:
        result["skipped"] = dict(sorted(found.skipped.items()))
    notes = []
    if found.total > len(found.entries):
        notes.append(
            f"Showing the first {len(found.entries)} of {found.total} matches in path order; "
            f"narrow the glob or filters to see the rest."
        )
    if found.stopped == "visited":
        notes.append(
            f"The walk stopped after {limits.max_visited} entries, so more may match; "
            f"narrow the glob (for example 'src/**/*.py')."
        )
    elif found.stopped == "time":
        notes.append("The walk stopped at its time limit, so more may match; narrow the glob.")
    if notes:
        result["note"] = " ".join(notes)
    return result
