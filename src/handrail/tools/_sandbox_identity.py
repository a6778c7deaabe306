"""Acting on files as the sandbox user, from this process: a thread with the user's identity.

Owns starting a thread of its own whose file-system user and group are the sandbox
user's and which has no supplementary group, so that the kernel checks every open,
read and create of that thread as it would for the user (and what it creates, the user
owns). Linux keeps these ids per thread; the raw system calls used here change only
the calling thread, which ends with its work. It never changes the process's ids.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import os
import threading
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from handrail.errors import ConfigurationError

__all__ = ["as_user"]

_T = TypeVar("_T")
_V = TypeVar("_V")
_P = ParamSpec("_P")

_SETGROUPS = {
    "x86_64": 116,
    "aarch64": 159,
    "arm64": 159,
    "riscv64": 159,
    "loongarch64": 159,
    "ppc64le": 81,
    "ppc64": 81,
    "s390x": 206,
}
"""The setgroups system call by machine: glibc's wrapper would change every thread."""


def as_user(
    user: tuple[int, int] | None,
    function: Callable[_P, _T],
    *args: _P.args,
    **kwargs: _P.kwargs,
) -> asyncio.Future[_T]:
    """Run `function` in a new thread acting on files as `user` (uid, gid); its result.

    None runs it with this process's own identity. The thread ends with the call, and
    its identity with it. A thread that cannot take the identity fails the future.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[_T] = loop.create_future()

    def body() -> None:
        try:
            if user is not None:
                _become(*user)
            result = function(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
            _settle(loop, future.set_exception, future, exc)
        else:
            _settle(loop, future.set_result, future, result)

    threading.Thread(target=body, name="handrail-sandbox-as-user", daemon=True).start()
    return future


def _settle(
    loop: asyncio.AbstractEventLoop,
    setter: Callable[[_V], None],
    future: asyncio.Future[Any],
    value: _V,
) -> None:
    def settle() -> None:
        if not future.done():
            setter(value)

    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
        loop.call_soon_threadsafe(settle)


def _become(uid: int, gid: int) -> None:
    """Give the calling thread (only) the file-system identity of `uid`:`gid`."""
    machine = os.uname().machine
    number = _SETGROUPS.get(machine)
    if number is None:
        raise ConfigurationError(f"cannot act as the sandbox user on a {machine} machine")
    libc = _libc()
    if libc.syscall(number, 0, None) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"dropping supplementary groups: {os.strerror(code)}")
    # setfsuid and setfsgid report the previous id, never an error: a second call shows
    # whether the first took.
    libc.setfsgid(gid)
    libc.setfsuid(uid)
    if libc.setfsgid(gid) != gid or libc.setfsuid(uid) != uid or _groups():
        # Without CAP_SETUID and CAP_SETGID the ids stay; setgroups failed before that.
        raise OSError(
            0, "the thread could not take the sandbox user's identity"
        )  # pragma: no cover


def _groups() -> list[str]:
    """The calling thread's supplementary groups, as the kernel reports them."""
    with open(f"/proc/self/task/{threading.get_native_id()}/status") as status:  # noqa: PTH123
        for line in status:
            if line.startswith("Groups:"):
                return line.split()[1:]
    return []  # pragma: no cover - every Linux status file has the line


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)
