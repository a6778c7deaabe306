"""The bubblewrap command lines: what a sandboxed command, or a confined program, sees.

Owns the mounts (a read-only /usr and the links or binds of /bin and /lib*, a fresh
/proc and /dev, a minimal /etc, the configured read-only paths, and size-limited tmpfs
mounts at /tmp and at /workspace for the workspace copy), the namespaces (pid, network,
ipc, uts, cgroup), the clean environment, the hold before the command (bubblewrap's
info and block descriptors) and the drop to an unprivileged user inside; and, for a trusted
program such as ripgrep, a confined line that shows it one directory, read-only, and
its own files, nothing else. It never runs anything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

__all__ = [
    "TMP",
    "WORKSPACE",
    "BwrapLayout",
    "HoldFds",
    "UserSwitch",
    "bwrap_argv",
    "confined_argv",
    "etc_files",
    "probe_argv",
]

WORKSPACE = "/workspace"
"""Where the workspace copy is mounted, and the command's working directory."""
TMP = "/tmp"  # noqa: S108 - a fresh tmpfs inside the sandbox, not the host's /tmp
SANDBOX_HOME = "/tmp"  # noqa: S108 - a fresh tmpfs inside the sandbox, not the host's /tmp
SANDBOX_NAME = "sandbox"
_TOP_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_ETC_BINDS = (
    "/etc/alternatives",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
)
"""Host files of /etc the dynamic linker and alternatives need; no names, keys or hosts."""
_ISOLATION = (
    "--unshare-ipc",
    "--unshare-pid",
    "--unshare-net",
    "--unshare-uts",
    "--unshare-cgroup-try",
    "--hostname",
    SANDBOX_NAME,
    "--die-with-parent",
)
_NAMESPACES = (*_ISOLATION, "--new-session")
RESERVED = ("/", "/usr", "/proc", "/dev", "/tmp", "/etc", WORKSPACE)  # noqa: S108
"""Mount points a configured read-only path may not replace or go below (but /etc, /tmp)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class UserSwitch:
    """Become `uid`:`gid`, with no supplementary groups, through the `setpriv` program."""

    setpriv: str
    uid: int
    gid: int


@dataclass(frozen=True, kw_only=True, slots=True)
class HoldFds:
    """Descriptors bubblewrap inherits: where it writes its sandbox's pid, what it awaits."""

    info: int
    block: int


@dataclass(frozen=True, kw_only=True, slots=True)
class BwrapLayout:
    """Everything of one run that the bubblewrap command line depends on."""

    bwrap: str
    etc_dir: Path
    """Holds the synthesized passwd, group and hosts files."""
    read_only: Sequence[PurePosixPath]
    env: Mapping[str, str]
    tmp_bytes: int
    disk_bytes: int | None
    """Size of the tmpfs at /workspace (None: the kernel's default, half the memory)."""
    hold: HoldFds
    """The sandbox waits, its mounts made, until the host has copied the workspace."""
    switch: UserSwitch | None
    """The user to become inside, or None to stay the user bubblewrap runs as."""


def etc_files(uid: int, gid: int) -> dict[str, str]:
    """The /etc files written for the sandbox: its one user and group, and localhost."""
    return {
        "passwd": f"{SANDBOX_NAME}:x:{uid}:{gid}:{SANDBOX_NAME}:{SANDBOX_HOME}:/usr/sbin/nologin\n",
        "group": f"{SANDBOX_NAME}:x:{gid}:\n",
        "hosts": "127.0.0.1 localhost\n::1 localhost\n",
    }


def bwrap_argv(layout: BwrapLayout, argv: Sequence[str]) -> list[str]:
    """The full command line: bubblewrap, its options, then the command."""
    args = [layout.bwrap, *_NAMESPACES, "--clearenv"]
    for name, value in layout.env.items():
        args += ["--setenv", name, value]
    args += _system()
    args += _tmp(layout.tmp_bytes)  # before the read-only paths, which may lie below /tmp
    args += ["--perms", "0755", "--dir", "/etc"]
    for path in _ETC_BINDS:
        args += ["--ro-bind-try", path, path]
    for name in ("passwd", "group", "hosts"):
        args += ["--ro-bind", str(layout.etc_dir / name), f"/etc/{name}"]
    args += _read_only(layout.read_only)
    args += _workspace(layout.disk_bytes, layout.hold)
    args += ["--chdir", WORKSPACE]
    return [*args, *_command(layout.switch, argv)]


def probe_argv(
    bwrap: str,
    switch: UserSwitch | None,
    hold: HoldFds | None = None,
) -> list[str]:
    """A run of `true` with the same namespaces and user switch: does the host allow them?

    With `hold`, the writable space too (small): the sandbox waits to be released.
    """
    args = [bwrap, *_NAMESPACES, "--clearenv", *_system()]
    if hold is not None:
        args += [*_tmp(1 << 20), *_workspace(1 << 20, hold)]
    return [*args, *_command(switch, ["true"])]


def _tmp(size: int) -> list[str]:
    return ["--perms", "1777", "--size", str(size), "--tmpfs", TMP]


def _workspace(size: int | None, hold: HoldFds) -> list[str]:
    """/workspace as a (size-limited) tmpfs the host fills; the sandbox held until then."""
    args = ["--perms", "0700"]
    if size is not None:
        args += ["--size", str(size)]
    args += ["--tmpfs", WORKSPACE]
    return [*args, "--info-fd", str(hold.info), "--block-fd", str(hold.block)]


def confined_argv(
    bwrap: str,
    *,
    visible: Path,
    runtime: Sequence[PurePosixPath],
    drop_capabilities: bool,
    argv: Sequence[str],
) -> list[str]:
    """A trusted program that sees `visible` (read-only, at /workspace) and `runtime` only.

    No /proc, /dev, /tmp, /usr or /etc: the mount namespace holds the directory and the
    program's own files (`runtime`, each bound read-only at its place), all read-only,
    so a path that leaves `visible`, by `..` or by any symbolic link, leads nowhere. The
    namespaces are a sandboxed command's; the program stays in the caller's process
    group, so killing the group kills it too. `drop_capabilities` (for root) leaves it
    none.
    """
    args = [bwrap, *_ISOLATION, "--clearenv"]
    if drop_capabilities:
        args += ["--cap-drop", "ALL"]
    args += _read_only(runtime, made=frozenset({PurePosixPath("/")}))
    args += ["--ro-bind", str(visible), WORKSPACE, "--remount-ro", "/", "--chdir", WORKSPACE]
    return [*args, "--", *argv]


def _system() -> list[str]:
    return ["--ro-bind", "/usr", "/usr", *top_level(Path("/")), "--proc", "/proc", "--dev", "/dev"]


def top_level(root: Path) -> list[str]:
    """/bin, /lib and the like as the host has them below `root`: links, or read-only binds."""
    args: list[str] = []
    for name in _TOP_LINKS:
        path = root / name
        target = f"/{name}"
        if path.is_symlink():  # merged /usr: /bin -> usr/bin
            args += ["--symlink", str(path.readlink()), target]
        elif path.is_dir():
            args += ["--ro-bind", target, target]
    return args


def _read_only(
    paths: Sequence[PurePosixPath],
    *,
    made: frozenset[PurePosixPath] = frozenset({PurePosixPath("/"), PurePosixPath("/etc")}),
) -> list[str]:
    # bubblewrap makes missing parents of a mount point with mode 0700, which an
    # unprivileged user cannot pass through; they are made here, readable, first.
    args: list[str] = []
    done = set(made)
    for path in sorted(paths):
        for parent in reversed(path.parents):
            if parent not in done:
                done.add(parent)
                args += ["--perms", "0755", "--dir", str(parent)]
        args += ["--ro-bind", str(path), str(path)]
        done.add(path)
    return args


def _command(switch: UserSwitch | None, argv: Sequence[str]) -> list[str]:
    if switch is None:
        return ["--", *argv]
    # Root inside keeps only the two capabilities it needs to become the user; setpriv
    # gives them up with the switch, and bubblewrap has set no_new_privs already.
    return [
        "--cap-add",
        "CAP_SETUID",
        "--cap-add",
        "CAP_SETGID",
        "--",
        switch.setpriv,
        f"--reuid={switch.uid}",
        f"--regid={switch.gid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--",
        *argv,
    ]
