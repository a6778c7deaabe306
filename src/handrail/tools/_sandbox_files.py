"""The sandbox's private copy of a workspace: made, compared with the original, removed.

Owns copying a workspace so a command may write to it while the original stays as it
was. Every directory and file is opened relative to its parent's descriptor without
following a symbolic link, so a part swapped for a link while the copy runs is never
followed; what is read is checked on the descriptor that was read. Regular files,
directories and symlinks (as links) are copied with their modes kept or narrowed (no
setuid, setgid or sticky bit); files with several hard links, what the copying user may
not read, and sockets, pipes and devices are left out and listed. Run as the sandbox
user (see `_sandbox_identity`), the copy holds nothing that user could not read. It
never writes to the original.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import os
import shutil
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "CopyFull",
    "LeftOut",
    "WorkspaceChanges",
    "copy_tree",
    "remove_tree",
    "workspace_changes",
]

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_MODE_BITS = 0o777
"""What a copy keeps of a mode: the permission bits, never setuid, setgid or sticky."""
_CHUNK = 1 << 20
_GONE = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EINVAL})
"""A name that vanished or changed kind between its listing and its opening."""
_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


class CopyFull(Exception):  # noqa: N818 - an outcome of the copy, handled by the sandbox
    """The copy's filesystem filled up before the workspace was copied whole."""


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkspaceChanges:
    """What a command changed in its copy of the workspace, as paths relative to it."""

    added: tuple[str, ...]
    modified: tuple[str, ...]
    deleted: tuple[str, ...]
    truncated: bool
    """True when more paths changed than the lists hold."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LeftOut:
    """What the workspace copy left out, as paths relative to the workspace."""

    hard_links: tuple[str, ...] = ()
    """Regular files with more than one hard link: another of their names may be a file
    outside the workspace that the command must not read."""
    unreadable: tuple[str, ...] = ()
    """Files and directories (with everything below) the sandbox user may not read in
    the original, so it does not get them in its copy either."""
    special: tuple[str, ...] = ()
    """Sockets, pipes and device nodes."""
    truncated: bool = False
    """True when more paths were left out than the lists hold."""

    @property
    def paths(self) -> frozenset[str]:
        """Every path listed."""
        return frozenset((*self.hard_links, *self.unreadable, *self.special))


@dataclass(slots=True)
class _Tally:
    limit: int
    lists: dict[str, list[str]] = field(
        default_factory=lambda: {"hard_links": [], "unreadable": [], "special": []},
    )
    truncated: bool = False

    def add(self, reason: str, path: str) -> None:
        kept = self.lists[reason]
        if len(kept) < self.limit:
            kept.append(path)
        else:
            self.truncated = True

    def left_out(self) -> LeftOut:
        return LeftOut(
            hard_links=tuple(sorted(self.lists["hard_links"])),
            unreadable=tuple(sorted(self.lists["unreadable"])),
            special=tuple(sorted(self.lists["special"])),
            truncated=self.truncated,
        )


def copy_tree(
    source: int,
    target: int,
    *,
    ignore: Sequence[str] = (),
    allow_hardlinks: bool = False,
    limit: int = 200,
) -> LeftOut:
    """Copy the directory `source` into the empty directory `target` (both descriptors).

    The copy is made with the calling thread's file-system identity: what it may not
    read is left out (and listed), what it creates it owns. Names matching a pattern of
    `ignore` (shell-style, against each entry's name) are left out unlisted, with
    everything below them. `target` gets `source`'s mode at the end. Raises CopyFull
    when `target`'s filesystem fills up.
    """
    copier = _Copier(_Tally(limit), allow_hardlinks=allow_hardlinks)
    try:
        # Opened again by this thread, so that its identity may read it: `source` may
        # have been opened by another.
        top = os.open(".", _DIR, dir_fd=source)
    except PermissionError:
        copier.tally.add("unreadable", ".")
        return copier.tally.left_out()
    try:
        stack = [(top, os.dup(target), "", iter(_names(top)), os.fstat(top))]
    except BaseException:  # pragma: no cover - a descriptor just opened, not leaked
        os.close(top)
        raise
    try:
        while stack:
            src, dst, prefix, entries, info = stack[-1]
            name = next(entries, None)
            if name is None:
                stack.pop()
                _finish(dst, info)
                os.close(src)
                os.close(dst)
                continue
            if _ignored(name, ignore):
                continue
            opened = copier.entry(src, dst, name, f"{prefix}{name}")
            if opened is not None:
                stack.append(opened)
    except OSError as exc:
        if exc.errno in _FULL:
            raise CopyFull from None
        raise
    finally:
        for src, dst, *_ in stack:
            os.close(src)
            os.close(dst)
    return copier.tally.left_out()


_Frame = tuple[int, int, str, Iterator[str], os.stat_result]


class _Copier:
    """Copies one entry at a time, between two directory descriptors."""

    def __init__(self, tally: _Tally, *, allow_hardlinks: bool) -> None:
        self.tally = tally
        self._allow_hardlinks = allow_hardlinks

    def entry(self, src: int, dst: int, name: str, path: str) -> _Frame | None:
        """Copy one entry; a frame to descend into when it is a directory."""
        try:
            info = os.stat(name, dir_fd=src, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except PermissionError:
            self.tally.add("unreadable", path)
            return None
        kind = stat.S_IFMT(info.st_mode)
        if kind == stat.S_IFDIR:
            return self._enter(src, dst, name, path)
        if kind == stat.S_IFLNK:
            _copy_link(src, dst, name)
        elif kind != stat.S_IFREG:
            self.tally.add("special", path)
        elif self._linked(info):
            self.tally.add("hard_links", path)
        else:
            self._file(src, dst, name, path)
        return None

    def _linked(self, info: os.stat_result) -> bool:
        return info.st_nlink > 1 and not self._allow_hardlinks

    def _open(self, src: int, name: str, path: str, flags: int) -> int | None:
        """`name` opened as this thread may; None (listed if unreadable) when it may not."""
        try:
            return os.open(name, flags, dir_fd=src)
        except PermissionError:
            self.tally.add("unreadable", path)
        except OSError as exc:
            # Vanished, or swapped since it was listed: for a link (ELOOP), a file where
            # a directory was (ENOTDIR) or a socket where a file was (ENXIO).
            if exc.errno not in _GONE and exc.errno != errno.ENXIO:
                raise
        return None

    def _enter(self, src: int, dst: int, name: str, path: str) -> _Frame | None:
        sub = self._open(src, name, path, _DIR)
        if sub is None:
            return None
        try:
            names = _names(sub)
            info = os.fstat(sub)
            os.mkdir(name, 0o700, dir_fd=dst)
            made = os.open(name, _DIR, dir_fd=dst)
        except BaseException:
            os.close(sub)
            raise
        return sub, made, f"{path}/", iter(names), info

    def _file(self, src: int, dst: int, name: str, path: str) -> None:
        source = self._open(src, name, path, _FILE)
        if source is None:
            return
        try:
            # What counts is the file that was opened, not what the name showed before.
            info = os.fstat(source)
            if not stat.S_ISREG(info.st_mode):
                self.tally.add("special", path)
            elif self._linked(info):
                self.tally.add("hard_links", path)
            else:
                out = os.open(name, _NEW, 0o600, dir_fd=dst)
                try:
                    _copy_bytes(source, out)
                    _finish(out, info)
                finally:
                    os.close(out)
        finally:
            os.close(source)


def _copy_link(src: int, dst: int, name: str) -> None:
    try:
        link = os.readlink(name, dir_fd=src)
    except OSError as exc:
        if exc.errno in _GONE:  # vanished, or no longer a link
            return
        raise
    os.symlink(link, name, dir_fd=dst)


def _copy_bytes(source: int, out: int) -> None:
    offset = 0
    while sent := os.sendfile(out, source, offset, _CHUNK):
        offset += sent


def _finish(fd: int, info: os.stat_result) -> None:
    """Give the copy the original's permission bits (no more) and times."""
    os.chmod(fd, info.st_mode & _MODE_BITS)
    os.utime(fd, ns=(info.st_atime_ns, info.st_mtime_ns))


def _names(fd: int) -> list[str]:
    with os.scandir(fd) as listing:
        return sorted(entry.name for entry in listing)


def _ignored(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


# --- changes ---------------------------------------------------------------------------------


def workspace_changes(
    original: int,
    copy: int,
    *,
    ignore: Sequence[str] = (),
    left_out: LeftOut | None = None,
    limit: int = 200,
) -> WorkspaceChanges:
    """Paths added, modified (content, link target or kind) and deleted in `copy`.

    Both are directory descriptors, walked without following links. Paths the copy
    left out (and what is below them) are not compared.
    """
    skipped = left_out.paths if left_out is not None else frozenset()
    before = _listing(original, ignore, skipped)
    after = _listing(copy, ignore, skipped)
    added = sorted(after.keys() - before.keys())
    deleted = sorted(before.keys() - after.keys())
    modified = sorted(
        path
        for path in before.keys() & after.keys()
        if not _same(original, copy, path, before[path], after[path])
    )
    truncated = max(len(added), len(modified), len(deleted)) > limit
    return WorkspaceChanges(
        added=tuple(added[:limit]),
        modified=tuple(modified[:limit]),
        deleted=tuple(deleted[:limit]),
        truncated=truncated,
    )


def _listing(
    top: int,
    ignore: Sequence[str],
    skipped: frozenset[str],
) -> dict[str, os.stat_result]:
    """Every entry below `top` (never through a link), by path relative to it."""
    found: dict[str, os.stat_result] = {}
    pending = [(os.dup(top), "")]
    while pending:
        fd, prefix = pending.pop()
        try:
            names = _names(fd)
            for name in names:
                path = f"{prefix}{name}"
                if _ignored(name, ignore) or path in skipped:
                    continue
                try:
                    info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                found[path] = info
                if stat.S_ISDIR(info.st_mode):
                    try:
                        pending.append((os.open(name, _DIR, dir_fd=fd), f"{path}/"))
                    except OSError:
                        continue
        except PermissionError:
            pass
        finally:
            os.close(fd)
    return found


def _same(
    left: int,
    right: int,
    path: str,
    left_stat: os.stat_result,
    right_stat: os.stat_result,
) -> bool:
    kind = stat.S_IFMT(left_stat.st_mode)
    if kind != stat.S_IFMT(right_stat.st_mode):
        return False
    if stat.S_ISLNK(kind):
        return _read_link(left, path) == _read_link(right, path)
    if stat.S_ISREG(kind):
        if left_stat.st_size != right_stat.st_size:
            return False
        return _same_content(left, right, path)
    return True


def _open_below(top: int, path: str, flags: int) -> int:
    """Open `path` below the directory `top`, no part of it through a symbolic link."""
    *parents, last = path.split("/")
    current = os.dup(top)
    try:
        for part in parents:
            nxt = os.open(part, _DIR, dir_fd=current)
            os.close(current)
            current = nxt
        return os.open(last, flags, dir_fd=current)
    finally:
        os.close(current)


def _read_link(top: int, path: str) -> str | None:
    parent, _, name = path.rpartition("/")
    try:
        fd = _open_below(top, parent, _DIR) if parent else os.dup(top)
    except OSError:
        return None
    try:
        return os.readlink(name, dir_fd=fd)
    except OSError:
        return None
    finally:
        os.close(fd)


def _same_content(left: int, right: int, path: str) -> bool:
    try:
        a = _open_below(left, path, _FILE)
    except OSError:
        return False
    try:
        b = _open_below(right, path, _FILE)
    except OSError:
        os.close(a)
        return False
    try:
        offset = 0
        while True:
            chunk = os.pread(a, _CHUNK, offset)
            if chunk != os.pread(b, _CHUNK, offset):
                return False
            if not chunk:
                return True
            offset += len(chunk)
    finally:
        os.close(a)
        os.close(b)


# --- removal ---------------------------------------------------------------------------------


def remove_tree(path: Path) -> None:
    """Remove a directory tree, also where a command took away its own access to parts."""
    if not (path.exists() or path.is_symlink()):
        return
    try:
        shutil.rmtree(path)
    except OSError:
        _grant_access(path)
        shutil.rmtree(path)


def _grant_access(top: Path) -> None:
    """Give the owner full access to every directory below `top`, never through a link."""
    with contextlib.suppress(OSError):
        top.chmod(0o700)
    for root, dirs, _files in os.walk(top):
        for name in dirs:
            path = Path(root, name)
            with contextlib.suppress(OSError):
                if stat.S_ISDIR(path.lstat().st_mode):  # chmod would follow a symlink
                    path.chmod(0o700)
