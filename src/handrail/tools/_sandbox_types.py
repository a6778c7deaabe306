"""The command sandbox's vocabulary: its configuration, limits, protections and results.

Owns the values a host configures (`SandboxConfig`, `SandboxLimits`, `SandboxUser`),
the protections a run can have (`Protection`, `ISOLATION`), why a command was killed
(`KillReason`) and what a run reports (`SandboxResult`). It never runs anything;
`sandbox` does, and re-exports these names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType

from handrail.errors import ConfigurationError
from handrail.shaping.excerpt import Excerpt, ExcerptLimits
from handrail.tools._sandbox_bwrap import RESERVED
from handrail.tools._sandbox_files import LeftOut, WorkspaceChanges

__all__ = [
    "ISOLATION",
    "KillReason",
    "Protection",
    "SandboxConfig",
    "SandboxLimits",
    "SandboxResult",
    "SandboxUnavailableError",
    "SandboxUser",
]

_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")


class Protection(StrEnum):
    """One protection a run had; a run's `protections` lists those in force."""

    NAMESPACES = "namespaces"
    """Own pid, ipc, uts and cgroup namespaces: the command sees only its own processes."""
    NO_NETWORK = "no-network"
    """An empty network namespace: no host, local or outside address is reachable."""
    READ_ONLY_SYSTEM = "read-only-system"
    HIDDEN_HOST_FILES = "hidden-host-files"
    """Only /usr, a minimal /etc, the configured read-only paths and the workspace copy
    are visible: not the host's home directories, /tmp, /var or credentials."""
    NO_NEW_PRIVILEGES = "no-new-privileges"
    """setuid programs and file capabilities grant nothing."""
    WORKSPACE_COPY = "workspace-copy"
    CLEAN_ENVIRONMENT = "clean-environment"
    UNPRIVILEGED_USER = "unprivileged-user"
    WALL_TIMEOUT = "wall-timeout"
    """The whole process tree is killed at the timeout."""
    CPU_LIMIT = "cpu-limit"
    ADDRESS_SPACE_LIMIT = "address-space-limit"
    MEMORY_LIMIT = "memory-limit"
    """A memory control group bounds the whole tree."""
    PROCESS_LIMIT = "process-limit"
    """A pids control group, or the process limit of a user of its own, bounds the tree."""
    FILE_SIZE_LIMIT = "file-size-limit"
    OPEN_FILES_LIMIT = "open-files-limit"
    OUTPUT_LIMIT = "output-limit"
    """More output than the hard cap kills the command."""
    DISK_LIMIT = "disk-limit"
    """/workspace (the copy included) and /tmp are size-limited tmpfs mounts: writing
    past `disk_bytes` or `tmp_bytes` fails, and the command is killed."""


ISOLATION = frozenset(
    {
        Protection.NAMESPACES,
        Protection.NO_NETWORK,
        Protection.READ_ONLY_SYSTEM,
        Protection.HIDDEN_HOST_FILES,
        Protection.NO_NEW_PRIVILEGES,
    },
)
"""What bubblewrap adds; all of it is lost where bubblewrap is missing or cannot run."""


class KillReason(StrEnum):
    """Why a command did not end by itself."""

    TIMEOUT = "timeout"
    OUTPUT = "output"
    MEMORY = "memory"
    """The memory control group's limit made the kernel kill a process of the tree."""
    CPU = "cpu"
    """The CPU time limit (SIGXCPU)."""
    DISK = "disk"
    """The run's writable space (/workspace or /tmp) filled up: the command was killed,
    or had ended by itself with the space full. Also when the workspace copy itself did
    not fit, and the command never ran."""


class SandboxUnavailableError(ConfigurationError):
    """Isolation is required by the configuration but this host cannot provide it."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SandboxLimits:
    """Bounds of one run. None turns a bound off (and it is then not listed as in force)."""

    timeout_seconds: float = 60.0
    """Wall time, after which the whole process tree is killed."""
    cpu_seconds: int | None = 60
    """RLIMIT_CPU of each process: SIGXCPU at the limit, SIGKILL a second later."""
    memory_bytes: int | None = 1 << 30
    """Memory of the whole tree, by a memory control group where one can be made."""
    address_space_bytes: int | None = 4 << 30
    """RLIMIT_AS of each process; None for runtimes that reserve huge address ranges."""
    max_processes: int | None = 128
    """Processes and threads of the tree: a pids control group, or RLIMIT_NPROC of the
    unprivileged user (which counts all of that user's processes on the host)."""
    file_size_bytes: int | None = 256 << 20
    open_files: int | None = 1024
    tmp_bytes: int = 256 << 20
    """Size of the sandbox's own /tmp (a tmpfs, under bubblewrap)."""
    disk_bytes: int | None = 1 << 30
    """Size of /workspace under bubblewrap (a tmpfs): the copy of the workspace and all
    the command writes there. With `tmp_bytes`, the run's whole writable space. None
    leaves the kernel's default (half the memory). Memory in either counts toward the
    memory group of whoever wrote it."""
    max_output_bytes: int | None = 16 << 20
    """Hard cap on stdout and stderr together; more kills the command."""

    def __post_init__(self) -> None:
        if not self.timeout_seconds > 0:
            raise ConfigurationError("SandboxLimits.timeout_seconds must be positive")
        optional = {
            "cpu_seconds": self.cpu_seconds,
            "memory_bytes": self.memory_bytes,
            "address_space_bytes": self.address_space_bytes,
            "max_processes": self.max_processes,
            "file_size_bytes": self.file_size_bytes,
            "open_files": self.open_files,
            "max_output_bytes": self.max_output_bytes,
            "disk_bytes": self.disk_bytes,
        }
        for name, value in {**optional, "tmp_bytes": self.tmp_bytes}.items():
            if value is not None and value < 1:
                raise ConfigurationError(f"SandboxLimits.{name} must be positive")


@dataclass(frozen=True, kw_only=True, slots=True)
class SandboxUser:
    """The unprivileged user a root process runs commands as (default: nobody)."""

    uid: int = 65534
    gid: int = 65534

    def __post_init__(self) -> None:
        if self.uid < 1 or self.gid < 1:
            raise ConfigurationError("the sandbox user and group must not be root")


@dataclass(frozen=True, kw_only=True, slots=True)
class SandboxConfig:
    """Where commands run and how they are bounded."""

    workspace: Path
    """The directory whose copy the command gets; the original is never written."""
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    output: ExcerptLimits = field(default_factory=lambda: ExcerptLimits(max_chars=4_000))
    """How much of each of stdout and stderr the result shows (both fit a default
    result budget of 16,000 characters with the other fields)."""
    user: SandboxUser | None = field(default_factory=SandboxUser)
    """Run as this user when the host process is root; None keeps root (then reported
    missing as `unprivileged-user`; RLIMIT_NPROC does not bind root)."""
    use_bubblewrap: bool = True
    bwrap_path: Path | None = None
    """None looks `bwrap` up on PATH."""
    require_isolation: bool = False
    """Refuse to run (SandboxUnavailableError) rather than run without bubblewrap."""
    read_only_paths: tuple[Path, ...] = ()
    """Host paths the command may read, at the same place (a toolchain, a virtualenv)."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Fixed variables added to the clean environment (PATH, HOME, LANG, ...)."""
    path: str = _DEFAULT_PATH
    copy_ignore: tuple[str, ...] = ()
    """Names (shell patterns) not copied into the workspace copy, such as ".venv"."""
    allow_hardlinks: bool = False
    """Copy files with several hard links too (still only what the sandbox user may
    read). By default they are left out and listed: another of their names may be a
    file outside the workspace."""
    scratch_dir: Path | None = None
    """Where run directories are made; None is the system's temporary directory."""
    cgroups: bool = True
    cgroup_parent: Path | None = None
    """A delegated cgroup v2 directory with pids/memory enabled in its subtree_control."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "env", MappingProxyType(dict(self.env)))
        object.__setattr__(self, "read_only_paths", tuple(self.read_only_paths))
        object.__setattr__(self, "copy_ignore", tuple(self.copy_ignore))
        if not self.workspace.is_absolute():
            raise ConfigurationError("SandboxConfig.workspace must be an absolute path")
        for name, value in self.env.items():
            if not name or set(name) - _NAME_CHARS or name[0].isdigit():
                raise ConfigurationError(f"environment variable name {name!r} is not valid")
            if "\0" in value:
                raise ConfigurationError(f"environment variable {name} holds a NUL")
        for path in self.read_only_paths:
            _check_read_only(path)
        if "\0" in self.path:
            raise ConfigurationError("SandboxConfig.path holds a NUL")


def _check_read_only(path: Path) -> None:
    text = path.as_posix()
    if not path.is_absolute() or "\0" in text or ".." in path.parts:
        raise ConfigurationError(f"read-only path {text!r} must be absolute and normal")
    for reserved in RESERVED:
        if text == reserved or (
            reserved not in {"/", "/etc", "/tmp"} and text.startswith(f"{reserved}/")  # noqa: S108
        ):
            raise ConfigurationError(f"read-only path {text!r} would replace {reserved}")


@dataclass(frozen=True, kw_only=True, slots=True)
class SandboxResult:
    """How a command ended, what it printed (bounded), and which protections held."""

    argv: tuple[str, ...]
    exit_code: int | None
    """None when the command was killed by a signal (then `signal` says which). Under
    bubblewrap a signal shows as 128 + its number, as a shell reports it."""
    signal: int | None
    timed_out: bool
    killed_for: KillReason | None
    duration: float
    """Seconds from start to the end of the command."""
    stdout: Excerpt
    stderr: Excerpt
    stdout_bytes: int
    stderr_bytes: int
    protections: frozenset[Protection]
    missing: frozenset[Protection]
    """Protections not in force: isolation or the unprivileged user (whether the host
    lacks them or the configuration turned them off), or a configured limit the host
    could not apply. A limit configured as None is not listed."""
    changes: WorkspaceChanges | None = None
    """What the command changed in its workspace copy, when asked for."""
    left_out: LeftOut = field(default_factory=LeftOut)
    """What the workspace copy left out: the command could not read it in its copy."""

    @property
    def isolated(self) -> bool:
        """Whether the command ran under bubblewrap."""
        return Protection.NAMESPACES in self.protections

    @property
    def succeeded(self) -> bool:
        """Exit code 0 and not killed."""
        return self.exit_code == 0 and self.killed_for is None
