"""The durable half of a workspace write: change records, the journal, atomic renames.

Owns what a change is on disk (its record and the earlier contents, kept in the
host's journal directory), how it is applied (staged beside each target, fsynced,
renamed into place, undone on failure, every step relative to an opened directory and
never through a symbolic link) and what became of it after a crash. Lives apart from
`edits` so that the tools' checks and drafts read separately from the crash-safety
they rely on. Never decides whether a change is allowed: `edits` does that before it
calls `commit`.

The journal is a directory the host names, outside the workspace so no workspace tool
can read or alter it: `changes/<id>.json` records, `blobs/<sha256>` earlier contents,
`written/<sha256 of path>` the last content this journal wrote to each path (so a file
the agent itself changed is not mistaken for a user's uncommitted work). Every file in
it is written atomically and fsynced, so it survives a crash and a reconciler in another
process can read it.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import stat
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from handrail.declare.hooks import Found, NoProof, NotExecuted, Reconciled
from handrail.errors import (
    ConfigurationError,
    InvalidArgument,
    NotFound,
    StoreError,
    ToolFailed,
    ToolRetryable,
    ToolSignal,
    VersionConflict,
)
from handrail.tools.workspace.paths import Workspace, WorkspaceFile

__all__ = [
    "ABSENT",
    "APPLIED",
    "ChangeRecord",
    "ChangeState",
    "FileChange",
    "FileOp",
    "FileState",
    "Journal",
    "change_id_for",
    "commit",
    "content_sha256",
    "file_changes",
    "read_state",
    "reconcile_change",
    "remove_empty_dir",
]

ABSENT = "absent"
"""The label of a path where no file is."""
_CHANGE_ID = re.compile(r"chg-[0-9a-f]{32}")


# --- change records --------------------------------------------------------------------------


class ChangeState(StrEnum):
    """Where a recorded change is."""

    PREPARED = "prepared"
    """Recorded, files being renamed; a crash here leaves it for reconciliation."""
    COMMITTED = "committed"
    ROLLED_BACK = "rolled_back"
    """A failure during the renames was undone; nothing changed."""
    REVERTED = "reverted"
    """Applied, later undone by another change (`reverted_by`)."""


APPLIED = frozenset({ChangeState.COMMITTED, ChangeState.REVERTED})
"""The states of a change whose files were (at some point) all written."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FileChange:
    """One file of a change: its content hash and mode before and after (None: absent)."""

    path: str
    before_sha256: str | None
    before_mode: int | None
    after_sha256: str | None
    after_mode: int | None


@dataclass(frozen=True, kw_only=True, slots=True)
class ChangeRecord:
    """An applied (or attempted) change, as kept in the journal."""

    change_id: str
    kind: str
    state: ChangeState
    created_at: datetime
    idempotency_key: str | None
    user_id: str | None
    tenant_id: str | None
    files: tuple[FileChange, ...]
    directories: tuple[str, ...] = ()
    """Directories the change created, outermost first."""
    result: Mapping[str, Any] = field(default_factory=dict)
    reverts: str | None = None
    reverted_by: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The record as plain JSON."""
        plain = {f.name: getattr(self, f.name) for f in fields(self)}
        return {
            **plain,
            "state": self.state.value,
            "created_at": self.created_at.isoformat(),
            "files": [asdict(f) for f in self.files],
            "directories": list(self.directories),
            "result": dict(self.result),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ChangeRecord:
        """Inverse of `to_json`."""
        return cls(
            change_id=data["change_id"],
            kind=data["kind"],
            state=ChangeState(data["state"]),
            created_at=datetime.fromisoformat(data["created_at"]),
            idempotency_key=data["idempotency_key"],
            user_id=data["user_id"],
            tenant_id=data["tenant_id"],
            files=tuple(FileChange(**f) for f in data["files"]),
            directories=tuple(data["directories"]),
            result=data["result"],
            reverts=data["reverts"],
            reverted_by=data["reverted_by"],
        )


# --- low-level file operations (all relative to a directory fd, never following links) ----

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_all(fd: int, limit: int) -> bytes:
    """Up to `limit + 1` bytes: one more than allowed tells a file that grew."""
    chunks: list[bytes] = []
    size = 0
    while chunk := os.read(fd, min(1 << 20, limit + 1 - size)):
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _stage(dir_fd: int, data: bytes, mode: int, token: Callable[[int], str]) -> str:
    """Write `data` to a new hidden file in the directory, fsynced; its name."""
    for _ in range(8):
        name = f".handrail-{token(8)}.tmp"
        try:
            fd = os.open(
                name,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600,
                dir_fd=dir_fd,
            )
        except FileExistsError:
            continue
        try:
            _write_all(fd, data)
            os.fchmod(fd, mode)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            _unlink_quietly(dir_fd, name)
            raise
        os.close(fd)
        return name
    raise FileExistsError(errno.EEXIST, "no free temporary name")


def _unlink_quietly(dir_fd: int, name: str) -> None:
    with suppress(OSError):
        os.unlink(name, dir_fd=dir_fd)


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
    _unlink_quietly(dir_fd, staged)


def content_sha256(data: bytes) -> str:
    """The sha256 of `data` in hex: how the journal names and labels contents."""
    return hashlib.sha256(data).hexdigest()


def change_id_for(key: str) -> str:
    """The change id of the write made under an idempotency key (stable across retries)."""
    return f"chg-{content_sha256(key.encode('utf-8', 'surrogatepass'))[:32]}"


# --- the journal ---------------------------------------------------------------------------


class Journal:
    """Change records, earlier contents and the last-written index, in the host's directory."""

    def __init__(self, directory: Path, root: Path, token: Callable[[int], str]) -> None:
        path = Path(directory).resolve()
        if path.is_relative_to(root):
            raise ConfigurationError("the edit journal must lie outside the workspace root")
        try:
            for sub in ("changes", "blobs", "written"):
                (path / sub).mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigurationError(f"the edit journal {path} cannot be created: {exc}") from exc
        self._path = path
        self._token = token

    @contextmanager
    def _dir(self, sub: str) -> Iterator[int]:
        fd = os.open(self._path / sub, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            yield fd
        finally:
            os.close(fd)

    @contextmanager
    def lock(self, timeout: float) -> Iterator[None]:
        """One change at a time across threads and processes sharing this journal."""
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        with self._dir(".") as dir_fd:
            fd = os.open("lock", flags, 0o600, dir_fd=dir_fd)
        try:
            give_up = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= give_up:
                        raise ToolRetryable(
                            "Another change to the workspace is being applied; retry shortly.",
                            retry_after=1.0,
                        ) from None
                    time.sleep(0.01)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _write(self, sub: str, name: str, data: bytes) -> None:
        with self._dir(sub) as dir_fd:
            staged = _stage(dir_fd, data, 0o600, self._token)
            try:
                os.rename(staged, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except BaseException:
                _unlink_quietly(dir_fd, staged)
                raise
            os.fsync(dir_fd)

    def _read(self, sub: str, name: str) -> bytes | None:
        with self._dir(sub) as dir_fd:
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
            except FileNotFoundError:
                return None
        try:
            return _read_all(fd, 1 << 40)
        finally:
            os.close(fd)

    def save(self, record: ChangeRecord) -> None:
        """Write (or replace) a record durably."""
        text = json.dumps(record.to_json(), sort_keys=True, ensure_ascii=False)
        self._write("changes", f"{record.change_id}.json", text.encode("utf-8", "surrogatepass"))

    def load(self, change_id: str) -> ChangeRecord | None:
        """The record of `change_id`, or None."""
        if not _CHANGE_ID.fullmatch(change_id):
            return None
        raw = self._read("changes", f"{change_id}.json")
        if raw is None:
            return None
        try:
            return ChangeRecord.from_json(json.loads(raw))
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreError(f"the edit journal record {change_id} is damaged") from exc

    def put_blob(self, data: bytes) -> None:
        """Keep `data` under its sha256 (once)."""
        name = content_sha256(data)
        if self._read("blobs", name) is None:
            self._write("blobs", name, data)

    def blob(self, sha: str) -> bytes:
        """The content kept under `sha`; StoreError if missing or damaged."""
        data = self._read("blobs", sha) if re.fullmatch("[0-9a-f]{64}", sha) else None
        if data is None or content_sha256(data) != sha:
            raise StoreError(f"the edit journal lost or damaged the content {sha[:12]}")
        return data

    def written(self, path: str) -> str | None:
        """The label (sha256 or "absent") this journal last left at `path`."""
        raw = self._read("written", content_sha256(path.encode("utf-8", "surrogatepass")))
        return None if raw is None else raw.decode("ascii")

    def set_written(self, path: str, label: str | None) -> None:
        """Remember (or, with None, forget) what this journal left at `path`."""
        name = content_sha256(path.encode("utf-8", "surrogatepass"))
        if label is not None:
            self._write("written", name, label.encode("ascii"))
            return
        with self._dir("written") as dir_fd:
            _unlink_quietly(dir_fd, name)


# --- file states and applying a change ---------------------------------------------------


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
        data = b"" if too_large else _read_all(fd, limit)
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
                    staged[index] = _stage(dirs.fd(op.file.parent), op.after, op.mode, token)
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
            _unlink_quietly(dirs.fd(ops[index].file.parent), name)
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


def reconcile_change(journal: Journal, change_id: str, label: Callable[[str], str]) -> Reconciled:
    """What became of a change, from its record and the `label` of each of its paths now.

    No record, or one rolled back, is proof of no effect: nothing is renamed before the
    record is durable. A PREPARED record is judged by the files: all after, all before,
    or partly applied (no proof either way; a person rolls it back by its id).
    """
    record = journal.load(change_id)
    if record is None or record.state is ChangeState.ROLLED_BACK:
        return NotExecuted()
    if record.state is not ChangeState.PREPARED:
        return Found(dict(record.result))
    labels = [(label(f.path), f) for f in record.files]
    if all(now == (f.after_sha256 or ABSENT) for now, f in labels):
        return Found(dict(record.result))
    if all(now == (f.before_sha256 or ABSENT) for now, f in labels):
        return NotExecuted()
    return NoProof(f"change {record.change_id} was partly applied; roll it back by its id")


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
        staged = _stage(fd, op.before.data, mode, token)
        try:
            os.rename(staged, op.file.name, src_dir_fd=fd, dst_dir_fd=fd)
        except BaseException:
            _unlink_quietly(fd, staged)
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
