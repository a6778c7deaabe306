"""Applying a workspace change: file states, staged contents, atomic renames, undo.

Owns reading a target as it is now and applying a change's operations: staged beside
each target, fsynced, renamed into place, undone on failure, every step relative to an
opened directory and never through a symbolic link. The record of each change is kept
by `_journal`. Never decides whether a change is allowed: `edits` does that first.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from handrail.errors import InvalidArgument, NotFound, ToolFailed, ToolSignal, VersionConflict
from handrail.tools.workspace._journal import (
    ABSENT,
    ChangeRecord,
    ChangeState,
    FileChange,
    Journal,
    content_sha256,
    read_all,
    stage,
    unlink_quietly,
)
from handrail.tools.workspace.paths import Workspace, WorkspaceFile

__all__ = [
    "FileOp",
    "FileState",
    "commit",
    "file_changes",
    "read_state",
    "remove_empty_dir",
]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True, kw_only=True, slots=True)
class FileState:
    """A target as it is now: its bytes (None: absent), mode and inode."""

    file: WorkspaceFile
    data: bytes | None = None
    mode: int | None = None
    identity: tuple[int, ...] | None = None
    """Device, inode, size, mtime and ctime: an inode number alone is soon reused."""
    sha: str | None = None

    @property
    def label(self) -> str:
        """Its sha256, or "absent"."""
        return self.sha or ABSENT


@dataclass(frozen=True, kw_only=True, slots=True)
class FileOp:
    """Replace `before` with `after` (None: remove the file)."""

    before: FileState
    after: bytes | None
    mode: int

    @property
    def file(self) -> WorkspaceFile:
        """The target."""
        return self.before.file


def read_state(workspace: Workspace, file: WorkspaceFile, limit: int) -> FileState:
    """A target now, read without following links; refuses what is not a plain file.

    Files larger than `limit` bytes are refused too (INVALID_ARGUMENTS).
    """
    try:
        fd = workspace.open(file, os.O_RDONLY | os.O_NONBLOCK)
    except NotFound:
        return FileState(file=file)
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise InvalidArgument(f"{file.text} is a directory; only files are edited here.")
        if not stat.S_ISREG(info.st_mode):
            raise InvalidArgument(f"{file.text} is not a regular file.")
        too_large = info.st_size > limit
        data = b"" if too_large else read_all(fd, limit)
    finally:
        os.close(fd)
    if too_large or len(data) > limit:
        raise InvalidArgument(f"{file.text} is larger than {limit} bytes; it is not edited here.")
    return FileState(
        file=file,
        data=data,
        mode=stat.S_IMODE(info.st_mode) & 0o777,
        identity=_identity(info),
        sha=content_sha256(data),
    )


class _Dirs:
    """Parent directories of the targets, opened (or created) once, as fds."""

    def __init__(self, workspace: Workspace) -> None:
        self._ws = workspace
        self._fds: dict[tuple[str, ...], int] = {}
        self.created: list[str] = []

    def fd(self, parent: WorkspaceFile, *, create: bool = False) -> int:
        found = self._fds.get(parent.parts)
        if found is None:
            found = self._make(parent) if create else self._ws.open_dir(parent)
            self._fds[parent.parts] = found
        return found

    def _make(self, parent: WorkspaceFile) -> int:
        try:
            return self._ws.open_dir(parent)
        except NotFound:
            pass
        current = self._ws.open_dir(WorkspaceFile(()))
        try:
            for depth, part in enumerate(parent.parts, 1):
                try:
                    nxt = os.open(part, _DIR_FLAGS, dir_fd=current)
                except FileNotFoundError:
                    os.mkdir(part, 0o755, dir_fd=current)
                    self.created.append(WorkspaceFile(parent.parts[:depth]).text)
                    nxt = os.open(part, _DIR_FLAGS, dir_fd=current)
                except OSError:
                    where = WorkspaceFile(parent.parts[:depth]).text
                    raise InvalidArgument(
                        f"{where} is a symbolic link or not a directory; nothing is written "
                        f"through it."
                    ) from None
                os.close(current)
                current = nxt
        except BaseException:
            os.close(current)
            raise
        return current

    def sync(self) -> None:
        for fd in self._fds.values():
            os.fsync(fd)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def commit(
    journal: Journal,
    workspace: Workspace,
    record: ChangeRecord,
    ops: Sequence[FileOp],
    *,
    file_mode: int,
    token: Callable[[int], str],
) -> None:
    """Apply `ops` as `record`: record, stage, rename; on a failure there, undo it all.

    The record is durable (PREPARED) before the first rename and COMMITTED after the
    last, so a crash in between is left for reconciliation. An OSError while staging
    or renaming puts back every file already renamed and raises ToolFailed; each name
    must still be the file read (VersionConflict otherwise). A revert marks the change
    it reverts REVERTED and removes the directories that change created, if now empty.
    """
    dirs = _Dirs(workspace)
    staged: dict[int, str] = {}
    committed = False
    try:
        for op in ops:
            dirs.fd(op.file.parent, create=op.after is not None)
            if op.before.data is not None:
                journal.put_blob(op.before.data)
        for op in ops:  # as late as possible: each name is still the file read
            _same_file(dirs.fd(op.file.parent), op.before)
        record = replace(record, directories=tuple(dirs.created))
        journal.save(record)  # durable before the first rename
        done: list[FileOp] = []
        try:
            for index, op in enumerate(ops):
                if op.after is not None:
                    staged[index] = stage(dirs.fd(op.file.parent), op.after, op.mode, token)
            for index, op in enumerate(ops):
                _swap(dirs.fd(op.file.parent), op, staged.get(index))
                staged.pop(index, None)
                done.append(op)
        except OSError as exc:
            _undo(dirs, done, file_mode=file_mode, token=token)
            journal.save(replace(record, state=ChangeState.ROLLED_BACK))
            reason = errno.errorcode.get(exc.errno or 0, "I/O error")
            raise ToolFailed(
                f"The change could not be applied ({reason}); every file already changed "
                f"was restored, so nothing changed."
            ) from exc
        committed = True
        dirs.sync()
        journal.save(replace(record, state=ChangeState.COMMITTED))
        for op in ops:
            label = ABSENT if op.after is None else content_sha256(op.after)
            journal.set_written(op.file.text, None if record.kind == "revert" else label)
        original = None if record.reverts is None else journal.load(record.reverts)
        if original is not None:
            journal.save(
                replace(original, state=ChangeState.REVERTED, reverted_by=record.change_id)
            )
            for path in reversed(original.directories):
                remove_empty_dir(workspace, path)  # only if the revert left it empty
    finally:
        for index, name in staged.items():
            unlink_quietly(dirs.fd(ops[index].file.parent), name)
        if not committed:
            for path in reversed(dirs.created):
                remove_empty_dir(workspace, path)
        dirs.close()


def file_changes(ops: Sequence[FileOp]) -> tuple[FileChange, ...]:
    """What a change's record keeps of its operations: hashes and modes, not contents."""
    return tuple(
        FileChange(
            path=op.file.text,
            before_sha256=op.before.sha,
            before_mode=op.before.mode,
            after_sha256=None if op.after is None else content_sha256(op.after),
            after_mode=None if op.after is None else op.mode,
        )
        for op in ops
    )


def _undo(
    dirs: _Dirs, done: Sequence[FileOp], *, file_mode: int, token: Callable[[int], str]
) -> None:
    """Put back the recorded originals of the files already renamed, newest first."""
    for op in reversed(done):
        fd = dirs.fd(op.file.parent)
        if op.before.data is None:
            os.unlink(op.file.name, dir_fd=fd)
            continue
        mode = file_mode if op.before.mode is None else op.before.mode
        staged = stage(fd, op.before.data, mode, token)
        try:
            os.rename(staged, op.file.name, src_dir_fd=fd, dst_dir_fd=fd)
        except BaseException:
            unlink_quietly(fd, staged)
            raise


def _same_file(dir_fd: int, state: FileState) -> None:
    """The name in the opened directory is still the file read (or still absent)."""
    try:
        info = os.stat(state.file.name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        found = None
    else:
        found = _identity(info)
    if found != state.identity:
        raise VersionConflict(f"{state.file.text} changed while the change was prepared; retry.")


def _identity(info: os.stat_result) -> tuple[int, ...]:
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def _swap(dir_fd: int, op: FileOp, staged: str | None) -> None:
    name = op.file.name
    if staged is None:
        os.unlink(name, dir_fd=dir_fd)
    elif op.before.data is None:
        _link_new(dir_fd, staged, name)
    else:
        os.rename(staged, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def remove_empty_dir(workspace: Workspace, path: str) -> None:
    """Remove a directory a change created, if it is empty; quietly leave it otherwise."""
    file = workspace.relative(path)
    try:
        fd = workspace.open_dir(file.parent)
    except ToolSignal:  # pragma: no cover - the parent was just written into
        return
    try:
        os.rmdir(file.name, dir_fd=fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _link_new(dir_fd: int, staged: str, name: str) -> None:
    """Give the staged file its name, failing if the name exists (never replacing)."""
    try:
        os.link(staged, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
    except OSError as exc:
        if exc.errno not in {errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS}:
            raise
        # No hard links here (some FUSE filesystems): check, then rename.
        try:
            os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            os.rename(staged, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            return
        raise FileExistsError(errno.EEXIST, "the name appeared meanwhile") from None
    unlink_quietly(dir_fd, staged)
