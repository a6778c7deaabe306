"""Landlock: a trusted program confined by the kernel to one directory, read-only.

Owns the three Landlock system calls (through the C library's `syscall`, so no
compiled helper), the probe of the kernel's Landlock version, the ruleset (read
beneath one directory; execute and read the program's own files; nothing else on the
file system; no TCP bind or connect; no signal to a process outside the domain and no
abstract UNIX socket outside it), and the restricted threads that start confined
programs: a thread takes the domain on (with no capabilities and no way to gain
privileges), and every process it starts inherits both. It never starts a process.

Why a thread and not the child: applying the rules between fork and exec needs a
`preexec_fn`, so a full fork of the service (3-4 ms at 90 MB) instead of a vfork.

Rules are bound to the files that are open when the ruleset is made, not to names: a
thread serves one set of inodes, and a workspace root or program replaced since gets
a new thread. Unlike a mount namespace this hides nothing: a path outside is still
there, but opening it fails (EACCES), and a directory swapped for a symbolic link to
the outside leads to a file no rule covers.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath

__all__ = ["MIN_ABI", "RestrictedThreads", "landlock_abi"]

MIN_ABI = 6
"""The oldest Landlock version used: 6 (Linux 6.12) scopes signals and abstract sockets.

Version 3 is the first whose file system rights cover truncation, 4 adds TCP, 6 keeps a
confined program from signalling the service or reaching its abstract UNIX sockets; an
older kernel leaves the choice to bubblewrap.
"""

# The system call numbers of Landlock are the same on every architecture.
_CREATE_RULESET = 444
_ADD_RULE = 445
_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1

_EXECUTE = 1 << 0
_READ_FILE = 1 << 2
_READ_DIR = 1 << 3
_FS_ALL = (1 << 16) - 1
"""Every file system right of version 5 (IOCTL_DEV the last): all are handled, so denied."""
_NET_ALL = (1 << 0) | (1 << 1)
"""BIND_TCP, CONNECT_TCP."""
_SCOPE_ALL = (1 << 0) | (1 << 1)
"""ABSTRACT_UNIX_SOCKET, SIGNAL."""

_PR_SET_NO_NEW_PRIVS = 38
_PR_CAPBSET_DROP = 24
_PR_SET_SECUREBITS = 28
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_SECBIT_NOROOT = 1 << 0
_SECBIT_NOROOT_LOCKED = 1 << 1
_SECBIT_NO_SETUID_FIXUP = 1 << 2
_SECBIT_NO_SETUID_FIXUP_LOCKED = 1 << 3
_SECURE_NOROOT = (
    _SECBIT_NOROOT
    | _SECBIT_NOROOT_LOCKED
    | _SECBIT_NO_SETUID_FIXUP
    | _SECBIT_NO_SETUID_FIXUP_LOCKED
)
_LAST_CAP_BOUND = 64
"""Capability numbers tried when emptying the bounding set (the kernel knows fewer)."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """The C library this interpreter runs on (its own symbols), loaded once."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:  # pragma: no cover - an interpreter linked without a C library
        return None
    libc.syscall.restype = ctypes.c_long
    libc.prctl.restype = ctypes.c_int
    return libc


def _error(what: str) -> OSError:
    code = ctypes.get_errno()
    return OSError(code, f"{what}: {os.strerror(code)}")


def landlock_abi() -> int:
    """The kernel's Landlock version; 0 when it has none or it is turned off."""
    libc = _libc()
    if libc is None:  # pragma: no cover - see _libc
        return 0
    version = libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION)
    return max(0, int(version))


def _take_on(readable: Path, runtime: Sequence[PurePosixPath], drop_capabilities: bool) -> None:
    """Restrict the calling thread, for good: read beneath `readable`, run `runtime`.

    Drops every capability (`drop_capabilities`, for root), forbids gaining privileges
    and takes the ruleset on; processes the thread starts afterwards inherit all of it.
    Raises OSError if any step fails (the thread may then be partly restricted, so its
    executor is broken and never used).
    """
    libc = _libc()
    if libc is None:  # pragma: no cover - see _libc
        raise OSError(errno.ENOSYS, "no C library to reach Landlock through")
    attr = _RulesetAttr(_FS_ALL, _NET_ALL, _SCOPE_ALL)
    fd = int(libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.sizeof(attr), 0))
    if fd < 0:
        raise _error("landlock_create_ruleset")
    try:
        _add_rule(libc, fd, readable, _READ_FILE | _READ_DIR)
        for path in runtime:
            _add_rule(libc, fd, Path(path), _EXECUTE | _READ_FILE)
        if drop_capabilities:
            _drop_capabilities(libc)
        _prctl(libc, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, what="ambient capabilities")
        _prctl(libc, _PR_SET_NO_NEW_PRIVS, 1, what="no_new_privs")
        if libc.syscall(_RESTRICT_SELF, fd, 0) != 0:
            raise _error("landlock_restrict_self")
    finally:
        os.close(fd)


def _add_rule(libc: ctypes.CDLL, fd: int, path: Path, allowed: int) -> None:
    parent = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        rule = _PathBeneath(allowed, parent)
        if libc.syscall(_ADD_RULE, fd, _RULE_PATH_BENEATH, ctypes.byref(rule), 0) != 0:
            raise _error(f"landlock_add_rule({path})")
    finally:
        os.close(parent)


def _prctl(libc: ctypes.CDLL, option: int, value: int, *, what: str) -> None:
    ulong = ctypes.c_ulong
    if libc.prctl(option, ulong(value), ulong(0), ulong(0), ulong(0)) != 0:
        raise _error(what)


def _drop_capabilities(libc: ctypes.CDLL) -> None:
    """Empty the bounding set and lock root out of gaining capabilities at exec.

    A program started then runs as root without any (as bubblewrap's --cap-drop ALL).
    All of this is per thread: the service keeps its own.
    """
    for cap in range(_LAST_CAP_BOUND):
        try:
            _prctl(libc, _PR_CAPBSET_DROP, cap, what="capability bounding set")
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            break  # past the last capability the kernel knows
    _prctl(libc, _PR_SET_SECUREBITS, _SECURE_NOROOT, what="securebits")


def _identity(paths: Sequence[Path]) -> tuple[tuple[int, int], ...]:
    """The (device, inode) of each path: what a thread's rules are bound to."""
    found = []
    for path in paths:
        info = path.stat()
        found.append((info.st_dev, info.st_ino))
    return tuple(found)


class RestrictedThreads:
    """The thread that took on the domain of one directory and program, for its inodes.

    `executor` gives the single-thread executor whose thread is restricted to read
    beneath `readable` (as it is now) and run `runtime`; a process started there (with
    `subprocess.Popen`, which then uses vfork) is confined. When the directory or a
    runtime file was replaced since, a new thread is made and the old one let go.
    """

    def __init__(self, runtime: Sequence[PurePosixPath], *, drop_capabilities: bool) -> None:
        self._runtime = tuple(runtime)
        self._drop = drop_capabilities
        self._lock = threading.Lock()
        self._current: tuple[tuple[tuple[int, int], ...], ThreadPoolExecutor] | None = None

    def executor(self, readable: Path) -> ThreadPoolExecutor:
        """The executor of `readable`'s restricted thread (made now if needed).

        Raises OSError when the directory or a runtime file cannot be found. A thread
        that could not take the domain on fails every task given it (BrokenThreadPool).
        """
        key = _identity([readable, *map(Path, self._runtime)])
        with self._lock:
            current = self._current
            if current is not None and current[0] == key:
                return current[1]
            made = ThreadPoolExecutor(
                max_workers=1,
                thread_name_prefix="handrail-landlocked",
                initializer=_take_on,
                initargs=(readable, self._runtime, self._drop),
            )
            self._current = (key, made)
        if current is not None:
            current[1].shutdown(wait=False)
        return made

    def close(self) -> None:
        """Let the thread go (it ends once its queue is empty)."""
        with self._lock:
            current, self._current = self._current, None
        if current is not None:
            current[1].shutdown(wait=False)
