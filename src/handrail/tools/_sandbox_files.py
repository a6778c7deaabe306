"""The sandbox's private copy of a workspace: made, compared with the original, removed.

Owns copying a workspace so a command may write to it while the original stays as it
was: regular files, directories and symlinks (as links, never followed) are copied;
sockets, pipes and device nodes are left out. It never writes to the original.
"""

from __future__ import annotations

import contextlib
import filecmp
import fnmatch
import os
import shutil
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["WorkspaceChanges", "copy_workspace", "remove_tree", "workspace_changes"]


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkspaceChanges:
    """What a command changed in its copy of the workspace, as paths relative to it."""

    added: tuple[str, ...]
    modified: tuple[str, ...]
    deleted: tuple[str, ...]
    truncated: bool
    """True when more paths changed than the lists hold."""


def copy_workspace(
    source: Path,
    target: Path,
    *,
    ignore: Sequence[str] = (),
    owner: tuple[int, int] | None = None,
) -> None:
    """Copy `source` to the new directory `target`; `owner` (uid, gid) then owns the copy.

    Names matching a pattern of `ignore` (shell-style, matched against each entry's name)
    are left out, with everything below them.
    """
    shutil.copytree(
        source,
        target,
        symlinks=True,
        ignore=_ignorer(ignore),
        copy_function=_copy_regular,
    )
    if owner is None:
        return
    uid, gid = owner
    os.lchown(target, uid, gid)
    for root, dirs, files in os.walk(target):
        for name in (*dirs, *files):
            os.lchown(os.path.join(root, name), uid, gid)  # noqa: PTH118 - os.walk's str paths


def _ignorer(patterns: Sequence[str]) -> Callable[[str, list[str]], set[str]] | None:
    if not patterns:
        return None

    def ignore(_directory: str, names: list[str]) -> set[str]:
        return {name for name in names if _ignored(name, patterns)}

    return ignore


def _ignored(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def _copy_regular(source: str, target: str) -> object:
    # A FIFO would block the copy and a device node would be read as a device.
    if stat.S_ISREG(os.lstat(source).st_mode):
        return shutil.copy2(source, target)
    return target


def workspace_changes(
    original: Path,
    copy: Path,
    *,
    ignore: Sequence[str] = (),
    limit: int = 200,
) -> WorkspaceChanges:
    """Paths added, modified (content, link target or kind) and deleted in `copy`."""
    before = _listing(original, ignore)
    after = _listing(copy, ignore)
    added = sorted(after.keys() - before.keys())
    deleted = sorted(before.keys() - after.keys())
    modified = sorted(
        path
        for path in before.keys() & after.keys()
        if not _same(original / path, copy / path, before[path], after[path])
    )
    truncated = max(len(added), len(modified), len(deleted)) > limit
    return WorkspaceChanges(
        added=tuple(added[:limit]),
        modified=tuple(modified[:limit]),
        deleted=tuple(deleted[:limit]),
        truncated=truncated,
    )


def _listing(top: Path, ignore: Sequence[str]) -> dict[str, os.stat_result]:
    """Every entry below `top` (not following links), by path relative to it."""
    found: dict[str, os.stat_result] = {}
    for root, dirs, files in os.walk(top):
        dirs[:] = [name for name in dirs if not _ignored(name, ignore)]
        for name in (*dirs, *files):
            if _ignored(name, ignore):
                continue
            path = Path(root, name)
            found[path.relative_to(top).as_posix()] = path.lstat()
    return found


def _same(left: Path, right: Path, left_stat: os.stat_result, right_stat: os.stat_result) -> bool:
    kind = stat.S_IFMT(left_stat.st_mode)
    if kind != stat.S_IFMT(right_stat.st_mode):
        return False
    if stat.S_ISLNK(kind):
        return left.readlink() == right.readlink()
    if stat.S_ISREG(kind):
        if left_stat.st_size != right_stat.st_size:
            return False
        return filecmp.cmp(left, right, shallow=False)
    return True


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
