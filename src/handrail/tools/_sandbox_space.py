"""A bubblewrap sandbox's writable space, reached from the host: its /workspace and /tmp.

Owns starting the sandbox held before its command (bubblewrap's `--info-fd` names the
sandbox's process, `--block-fd` holds it until released), finding the size-limited
tmpfs mounts at /workspace and /tmp through that process's root once the root is the
sandbox's own (never the host's, whatever the host has at /workspace), and telling
when either is full. The descriptors it holds keep both mounts readable after the
sandbox ends. It never copies files and never decides to kill.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import json
import os
import stat
from dataclasses import dataclass

__all__ = ["Hold", "Space", "SpaceUnavailableError"]

_TMPFS_MAGIC = 0x01021994
_STATFS_BYTES = 256
"""More than any architecture's struct statfs."""
_FIND_TIMEOUT_S = 15.0
_FIND_POLL_S = 0.002
_INFO_LIMIT = 1 << 16
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


class SpaceUnavailableError(OSError):
    """The sandbox ended, or its mounts could not be reached, before its command ran."""

    gone = False
    """The sandbox's process has ended (bubblewrap failed to make it, say)."""


class _GoneError(SpaceUnavailableError):
    gone = True


@dataclass(slots=True)
class Hold:
    """The host's ends of bubblewrap's info and block descriptors for one start."""

    info_read: int
    info_write: int
    block_read: int
    block_write: int

    @classmethod
    def make(cls) -> Hold:
        """Two pipes; the write end of `info` and the read end of `block` go to bubblewrap."""
        info_read, info_write = os.pipe2(os.O_CLOEXEC)
        block_read, block_write = os.pipe2(os.O_CLOEXEC)
        return cls(info_read, info_write, block_read, block_write)

    @property
    def child_fds(self) -> tuple[int, int]:
        """(info, block): the descriptors bubblewrap inherits."""
        return self.info_write, self.block_read

    def started(self) -> None:
        """After the fork: close bubblewrap's ends here."""
        for name in ("info_write", "block_read"):
            fd = getattr(self, name)
            if fd >= 0:
                os.close(fd)
                setattr(self, name, -1)

    def release(self) -> None:
        """Let the held sandbox go on to its command."""
        with contextlib.suppress(OSError):
            os.write(self.block_write, b"g")
        self.close()

    def close(self) -> None:
        """Close what is left.

        A sandbox still held reads end of file then and goes on to its command: kill it
        first unless it is to run.
        """
        for name in ("info_read", "info_write", "block_read", "block_write"):
            fd = getattr(self, name)
            if fd >= 0:
                os.close(fd)
                setattr(self, name, -1)

    async def child_pid(self) -> int:
        """The sandbox's process, from bubblewrap's info (after `started`)."""
        loop = asyncio.get_running_loop()
        os.set_blocking(self.info_read, False)
        data = bytearray()
        ended: asyncio.Future[None] = loop.create_future()

        def readable() -> None:
            try:
                chunk = os.read(self.info_read, 4096)
            except BlockingIOError:  # pragma: no cover - a wakeup without data
                return
            data.extend(chunk)
            if (not chunk or len(data) > _INFO_LIMIT) and not ended.done():
                ended.set_result(None)

        loop.add_reader(self.info_read, readable)
        try:
            await asyncio.wait_for(ended, _FIND_TIMEOUT_S)
        except TimeoutError:
            raise SpaceUnavailableError(0, "bubblewrap gave no information in time") from None
        finally:
            loop.remove_reader(self.info_read)
        try:
            pid = json.loads(bytes(data))["child-pid"]
        except (ValueError, KeyError, TypeError):
            raise _GoneError(0, "bubblewrap ended before its sandbox was made") from None
        if not isinstance(pid, int) or pid < 1:
            raise SpaceUnavailableError(0, "bubblewrap named no sandbox process")
        return pid


class Space:
    """The sandbox's /workspace and /tmp, as directory descriptors held by the host."""

    __slots__ = ("tmp", "workspace")

    def __init__(self, workspace: int, tmp: int) -> None:
        self.workspace = workspace
        self.tmp = tmp

    @classmethod
    async def find(cls, pid: int, workspace: str, tmp: str) -> Space:
        """Wait (bounded) until process `pid` has the sandbox's root, then open its mounts.

        The root is the sandbox's once it is no longer the host's and holds `workspace`;
        bubblewrap moves into it only after every mount is made. Both must be tmpfs.
        """
        loop = asyncio.get_running_loop()
        end = loop.time() + _FIND_TIMEOUT_S
        host = os.stat("/")  # noqa: PTH116 - one cheap system call, not file I/O to defer
        while True:
            found = _open_space(pid, host, workspace, tmp)
            if found is not None:
                return cls(*found)
            if loop.time() > end:
                raise SpaceUnavailableError(0, "the sandbox's mounts were not found in time")
            await asyncio.sleep(_FIND_POLL_S)

    def full(self) -> bool:
        """Whether /workspace or /tmp has no free block left."""
        return any(_full(fd) for fd in (self.workspace, self.tmp) if fd >= 0)

    def close(self) -> None:
        """Close both descriptors (the mounts go once the sandbox has ended too)."""
        for name in ("workspace", "tmp"):
            fd = getattr(self, name)
            if fd >= 0:
                os.close(fd)
                setattr(self, name, -1)


def _open_space(
    pid: int,
    host: os.stat_result,
    workspace: str,
    tmp: str,
) -> tuple[int, int] | None:
    """Both mounts, if process `pid`'s root is the sandbox's by now; else None."""
    try:
        root = os.open(f"/proc/{pid}/root", _DIR | os.O_PATH)
    except FileNotFoundError:
        raise _GoneError(0, "the sandbox ended before its command ran") from None
    except OSError as exc:  # pragma: no cover - a host that hides other processes' roots
        raise SpaceUnavailableError(exc.errno, "the sandbox's root cannot be reached") from None
    try:
        info = os.fstat(root)
        if (info.st_dev, info.st_ino) == (host.st_dev, host.st_ino):
            return None  # not moved into its own root yet
        try:
            first = os.open(workspace.lstrip("/"), _DIR | os.O_NOFOLLOW, dir_fd=root)
        except FileNotFoundError:
            return None  # bubblewrap's intermediate root: the sandbox's is not made yet
        try:
            second = os.open(tmp.lstrip("/"), _DIR | os.O_NOFOLLOW, dir_fd=root)
        except BaseException:  # pragma: no cover - bubblewrap made both before the root
            os.close(first)
            raise
    finally:
        os.close(root)
    if not all(_is_tmpfs(fd) for fd in (first, second)):
        os.close(first)
        os.close(second)
        raise SpaceUnavailableError(0, "the sandbox's writable mounts are not tmpfs")
    return first, second


def _is_tmpfs(fd: int) -> bool:
    info = os.fstat(fd)
    return stat.S_ISDIR(info.st_mode) and _fs_type(fd) == _TMPFS_MAGIC


def _fs_type(fd: int) -> int:
    """The filesystem's magic number (`f_type` of fstatfs, the first field on Linux)."""
    buffer = ctypes.create_string_buffer(_STATFS_BYTES)
    if _libc().fstatfs(fd, buffer) != 0:  # pragma: no cover - fd is an open directory
        return 0
    return ctypes.c_long.from_buffer(buffer).value


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _full(fd: int) -> bool:
    info = os.fstatvfs(fd)
    return info.f_blocks > 0 and info.f_bavail == 0
