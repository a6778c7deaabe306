"""The journal of workspace writes: change records, earlier contents, what was last written.

Owns what a change is on disk (its record and the earlier contents, kept in the host's
journal directory), the journal's lock, and what became of a change after a crash.
How a change is applied to the workspace lives in `_commit`. Never decides whether a
change is allowed (`edits` does) and never writes inside the workspace.

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
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from handrail.declare.hooks import Found, NoProof, NotExecuted, Reconciled
from handrail.errors import ConfigurationError, StoreError, ToolRetryable

__all__ = [
    "ABSENT",
    "APPLIED",
    "ChangeRecord",
    "ChangeState",
    "FileChange",
    "Journal",
    "change_id_for",
    "content_sha256",
    "read_all",
    "reconcile_change",
    "stage",
    "unlink_quietly",
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


# --- low-level file operations (relative to a directory fd, never following links) ------


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def read_all(fd: int, limit: int) -> bytes:
    """Up to `limit + 1` bytes: one more than allowed tells a file that grew."""
    chunks: list[bytes] = []
    size = 0
    while chunk := os.read(fd, min(1 << 20, limit + 1 - size)):
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def stage(dir_fd: int, data: bytes, mode: int, token: Callable[[int], str]) -> str:
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
            unlink_quietly(dir_fd, name)
            raise
        os.close(fd)
        return name
    raise FileExistsError(errno.EEXIST, "no free temporary name")


def unlink_quietly(dir_fd: int, name: str) -> None:
    with suppress(OSError):
        os.unlink(name, dir_fd=dir_fd)


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
            staged = stage(dir_fd, data, 0o600, self._token)
            try:
                os.rename(staged, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except BaseException:
                unlink_quietly(dir_fd, staged)
                raise
            os.fsync(dir_fd)

    def _read(self, sub: str, name: str) -> bytes | None:
        with self._dir(sub) as dir_fd:
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
            except FileNotFoundError:
                return None
        try:
            return read_all(fd, 1 << 40)
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
            unlink_quietly(dir_fd, name)


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
