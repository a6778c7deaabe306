"""The command sandbox: one command, as an argument vector, in a disposable workspace copy.

Owns running a command under bubblewrap where the host allows it (no network, a
read-only system, none of the host's files, its own pid namespace, a clean environment,
an unprivileged user), with rlimits, per-run control groups, a wall timeout that kills
the whole process tree and output read within a byte budget; and saying which of these
protections were in force. It never runs a shell string and never writes to the
original workspace.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path, PurePosixPath
from types import MappingProxyType
from typing import Any, ParamSpec, TypeVar

from handrail.clock import Clock, SystemClock
from handrail.errors import ConfigurationError
from handrail.shaping.excerpt import Excerpt, ExcerptLimits
from handrail.tools._sandbox_bwrap import (
    RESERVED,
    SANDBOX_HOME,
    SANDBOX_NAME,
    BwrapLayout,
    UserSwitch,
    bwrap_argv,
    etc_files,
    probe_argv,
)
from handrail.tools._sandbox_cgroup import MEMORY, PIDS, CgroupSite, RunCgroups, find_sites
from handrail.tools._sandbox_files import (
    WorkspaceChanges,
    copy_workspace,
    remove_tree,
    workspace_changes,
)
from handrail.tools._sandbox_process import Budget, Child, Output, Rlimit, child_setup, settle

__all__ = [
    "ISOLATION",
    "KillReason",
    "Protection",
    "Sandbox",
    "SandboxConfig",
    "SandboxLimits",
    "SandboxResult",
    "SandboxUnavailableError",
    "SandboxUser",
    "WorkspaceChanges",
]

_log = logging.getLogger("handrail.tools.sandbox")
_T = TypeVar("_T")
_P = ParamSpec("_P")

_PROBE_TIMEOUT_S = 15.0
_BWRAP_PROCESSES = 2
"""bubblewrap's own processes in the pids group: itself and the pid namespace's init."""
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


_ENDINGS: Mapping[str, KillReason | None] = MappingProxyType(
    {"exited": None, "timeout": KillReason.TIMEOUT, "output": KillReason.OUTPUT},
)


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

    @property
    def isolated(self) -> bool:
        """Whether the command ran under bubblewrap."""
        return Protection.NAMESPACES in self.protections

    @property
    def succeeded(self) -> bool:
        """Exit code 0 and not killed."""
        return self.exit_code == 0 and self.killed_for is None


@dataclass(frozen=True, kw_only=True, slots=True)
class _Host:
    """What this host allows, found once per Sandbox."""

    bwrap: str | None
    problem: str | None
    """Why bubblewrap is not used, for operators (never shown to a model)."""
    switch: UserSwitch | None
    drop: tuple[int, int] | None
    """The (uid, gid) commands run as, when it differs from this process's."""
    unprivileged: bool
    sites: Mapping[str, CgroupSite]


@dataclass(slots=True)
class _Run:
    """The mutable state of one run, for its cleanup."""

    directory: Path
    work: list[asyncio.Future[Any]] = field(default_factory=list)
    """Worker threads that must end before the directory is removed."""
    child: Child | None = None
    cgroups: RunCgroups | None = None


@dataclass(frozen=True, slots=True)
class _Launch:
    argv: list[str]
    cwd: Path
    env: dict[str, str]
    setup: Callable[[], None]
    protections: frozenset[Protection]


class Sandbox:
    """Runs commands from a fixed configuration; see the module docstring.

    Safe to share between concurrent runs; each run has its own copy, groups and limits.
    """

    def __init__(self, config: SandboxConfig, *, clock: Clock | None = None) -> None:
        if not config.workspace.is_dir():
            raise ConfigurationError("SandboxConfig.workspace must be an existing directory")
        self._config = config
        self._clock = clock or SystemClock()
        self._host_facts: _Host | None = None
        self._lock = asyncio.Lock()
        self._disposals: set[asyncio.Future[None]] = set()

    @property
    def config(self) -> SandboxConfig:
        """The configuration this sandbox runs with."""
        return self._config

    @property
    def problem(self) -> str | None:
        """Why bubblewrap is not used, once known; for operators, never for a model."""
        return None if self._host_facts is None else self._host_facts.problem

    async def protections(self) -> frozenset[Protection]:
        """The protections a run would have on this host (probes bubblewrap once)."""
        host = await self._host()
        return self._protections(host, self._cgroup_controllers(host))

    async def missing(self) -> frozenset[Protection]:
        """What a run would lack: see `SandboxResult.missing`."""
        return self._wanted() - await self.protections()

    async def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        collect_changes: bool = False,
    ) -> SandboxResult:
        """Run `argv` (never a shell string) in a fresh copy of the workspace.

        The copy is discarded afterwards; with `collect_changes` the result lists what
        the command changed in it. Cancelling the awaiting task kills the process tree.
        """
        command = _checked_argv(argv)
        limit = self._config.limits.timeout_seconds if timeout is None else timeout
        if not limit > 0:
            raise ConfigurationError("a sandbox timeout must be positive")
        host = await self._host()
        if host.bwrap is None and self._config.require_isolation:
            raise SandboxUnavailableError(
                f"isolation is required but unavailable: {host.problem}",
            )
        scratch = self._config.scratch_dir
        run = _Run(Path(tempfile.mkdtemp(prefix="handrail-sandbox-", dir=scratch)))
        try:
            return await self._run(run, host, command, limit, collect_changes=collect_changes)
        finally:
            _stop(run)
            disposal = asyncio.ensure_future(self._dispose(run))
            self._disposals.add(disposal)
            disposal.add_done_callback(self._disposals.discard)
            await asyncio.shield(disposal)

    # --- one run ---------------------------------------------------------------------------

    async def _run(
        self,
        run: _Run,
        host: _Host,
        command: tuple[str, ...],
        limit: float,
        *,
        collect_changes: bool,
    ) -> SandboxResult:
        config = self._config
        await _in_worker(run, self._prepare, run.directory, host)
        limits = config.limits
        overhead = _BWRAP_PROCESSES if host.bwrap else 0
        run.cgroups = RunCgroups.create(
            host.sites,
            run.directory.name,
            max_pids=None if limits.max_processes is None else limits.max_processes + overhead,
            memory_bytes=limits.memory_bytes,
        )
        launch = self._launch(run, host, command)
        budget = Budget(limits.max_output_bytes)
        stdout, stderr = Output(config.output), Output(config.output)
        started = self._clock.monotonic()
        try:
            run.child = child = Child.start(
                launch.argv,
                cwd=launch.cwd,
                env=launch.env,
                setup=launch.setup,
                outputs=(stdout, stderr),
                budget=budget,
            )
        except OSError as exc:
            if host.bwrap is not None:  # bubblewrap itself, not the command, failed to start
                raise
            message = f"sandbox: cannot execute {command[0]!r}: {exc.strerror}\n".encode()
            stderr.bytes += len(message)
            stderr.feed(message)
            return self._result(
                command,
                launch,
                exit_code=127 if isinstance(exc, FileNotFoundError) else 126,
                signal_number=None,
                killed_for=None,
                duration=self._clock.monotonic() - started,
                outputs=(stdout, stderr),
                changes=None,
            )
        ending = await child.supervise(budget, limit)
        _stop(run)
        returncode = await child.reap()
        await child.drain()
        duration = self._clock.monotonic() - started
        signal_number = -returncode if returncode is not None and returncode < 0 else None
        exit_code = returncode if signal_number is None else None
        killed_for = _ENDINGS[ending] or _kernel_kill(
            run.cgroups,
            host,
            exit_code,
            signal_number,
        )
        changes = None
        if collect_changes:
            changes = await _in_worker(
                run,
                workspace_changes,
                config.workspace,
                run.directory / "workspace",
                ignore=config.copy_ignore,
            )
        return self._result(
            command,
            launch,
            exit_code=exit_code,
            signal_number=signal_number,
            killed_for=killed_for,
            duration=duration,
            outputs=(stdout, stderr),
            changes=changes,
        )

    def _result(
        self,
        command: tuple[str, ...],
        launch: _Launch,
        *,
        exit_code: int | None,
        signal_number: int | None,
        killed_for: KillReason | None,
        duration: float,
        outputs: tuple[Output, Output],
        changes: WorkspaceChanges | None,
    ) -> SandboxResult:
        stdout, stderr = outputs
        return SandboxResult(
            argv=command,
            exit_code=exit_code,
            signal=signal_number,
            timed_out=killed_for is KillReason.TIMEOUT,
            killed_for=killed_for,
            duration=max(0.0, duration),
            stdout=stdout.excerpt(),
            stderr=stderr.excerpt(),
            stdout_bytes=stdout.bytes,
            stderr_bytes=stderr.bytes,
            protections=launch.protections,
            missing=self._wanted() - launch.protections,
            changes=changes,
        )

    def _prepare(self, directory: Path, host: _Host) -> None:
        """Copy the workspace and write the run's files (in a worker thread)."""
        config = self._config
        copy_workspace(
            config.workspace,
            directory / "workspace",
            ignore=config.copy_ignore,
            owner=host.drop,
        )
        if host.bwrap is not None:
            uid, gid = host.drop or (os.getuid(), os.getgid())
            etc = directory / "etc"
            etc.mkdir()
            for name, text in etc_files(uid, gid).items():
                (etc / name).write_text(text)
            return
        for name in ("home", "tmp"):
            (directory / name).mkdir(mode=0o700)
            if host.drop is not None:
                os.chown(directory / name, *host.drop)
        # The unprivileged user must pass through the run directory to its workspace.
        directory.chmod(0o711)

    def _launch(self, run: _Run, host: _Host, command: tuple[str, ...]) -> _Launch:
        config = self._config
        limits = config.limits
        cgroups = run.cgroups.controllers if run.cgroups else frozenset()
        # RLIMIT_NPROC counts every process of the user on the host (concurrent runs and
        # zombies not yet reaped too), so it is only the bound when no pids group is.
        nproc = host.drop is not None and PIDS not in cgroups
        rlimits = _rlimits(limits, nproc=nproc)
        procs = run.cgroups.procs_files if run.cgroups else ()
        protections = self._protections(host, cgroups)
        if host.bwrap is not None:
            layout = BwrapLayout(
                bwrap=host.bwrap,
                workspace_copy=run.directory / "workspace",
                etc_dir=run.directory / "etc",
                read_only=[PurePosixPath(p.as_posix()) for p in config.read_only_paths],
                env=_environment(config, SANDBOX_HOME, SANDBOX_HOME),
                tmp_bytes=limits.tmp_bytes,
                switch=host.switch,
            )
            return _Launch(
                argv=bwrap_argv(layout, command),
                cwd=run.directory,
                env={},
                setup=child_setup(procs, rlimits, None),
                protections=protections,
            )
        env = _environment(config, str(run.directory / "home"), str(run.directory / "tmp"))
        return _Launch(
            argv=list(command),
            cwd=run.directory / "workspace",
            env=env,
            setup=child_setup(procs, rlimits, host.drop),
            protections=protections,
        )

    def _protections(self, host: _Host, cgroups: frozenset[str]) -> frozenset[Protection]:
        limits = self._config.limits
        held = {Protection.WORKSPACE_COPY, Protection.CLEAN_ENVIRONMENT, Protection.WALL_TIMEOUT}
        if host.bwrap is not None:
            held |= ISOLATION
        if host.unprivileged:
            held.add(Protection.UNPRIVILEGED_USER)
        optional = {
            Protection.CPU_LIMIT: limits.cpu_seconds,
            Protection.ADDRESS_SPACE_LIMIT: limits.address_space_bytes,
            Protection.FILE_SIZE_LIMIT: limits.file_size_bytes,
            Protection.OPEN_FILES_LIMIT: limits.open_files,
            Protection.OUTPUT_LIMIT: limits.max_output_bytes,
        }
        held |= {protection for protection, value in optional.items() if value is not None}
        if limits.memory_bytes is not None and MEMORY in cgroups:
            held.add(Protection.MEMORY_LIMIT)
        if limits.max_processes is not None and (PIDS in cgroups or host.drop is not None):
            held.add(Protection.PROCESS_LIMIT)
        return frozenset(held)

    def _cgroup_controllers(self, host: _Host) -> frozenset[str]:
        limits = self._config.limits
        wanted = {PIDS: limits.max_processes, MEMORY: limits.memory_bytes}
        return frozenset(c for c, value in wanted.items() if value is not None and c in host.sites)

    def _wanted(self) -> frozenset[Protection]:
        limits = self._config.limits
        # Isolation and an unprivileged user are what a sandbox is for: turned off by the
        # configuration or not, their absence is reported. A limit set to None is not.
        wanted = {
            Protection.WORKSPACE_COPY,
            Protection.CLEAN_ENVIRONMENT,
            Protection.WALL_TIMEOUT,
            Protection.UNPRIVILEGED_USER,
            *ISOLATION,
        }
        optional = {
            Protection.CPU_LIMIT: limits.cpu_seconds,
            Protection.ADDRESS_SPACE_LIMIT: limits.address_space_bytes,
            Protection.MEMORY_LIMIT: limits.memory_bytes,
            Protection.PROCESS_LIMIT: limits.max_processes,
            Protection.FILE_SIZE_LIMIT: limits.file_size_bytes,
            Protection.OPEN_FILES_LIMIT: limits.open_files,
            Protection.OUTPUT_LIMIT: limits.max_output_bytes,
        }
        wanted |= {protection for protection, value in optional.items() if value is not None}
        return frozenset(wanted)

    async def _dispose(self, run: _Run) -> None:
        """Wait for the tree to end, then remove the groups and the run directory."""
        child = run.child
        if child is not None:
            if child.process.returncode is None:
                await child.reap()
            child.close()
        await settle(run.work)
        if run.cgroups is not None and not await asyncio.to_thread(run.cgroups.remove):
            _log.warning("sandbox control groups %s could not be removed", run.directory.name)
        try:
            await asyncio.to_thread(remove_tree, run.directory)
        except OSError:
            _log.warning("sandbox run directory %s could not be removed", run.directory)

    # --- what the host allows --------------------------------------------------------------

    async def _host(self) -> _Host:
        async with self._lock:
            if self._host_facts is None:
                self._host_facts = await self._discover()
            return self._host_facts

    async def _discover(self) -> _Host:
        config = self._config
        root = os.geteuid() == 0
        drop = None
        if root and config.user is not None:
            drop = (config.user.uid, config.user.gid)
        sites: Mapping[str, CgroupSite] = {}
        if config.cgroups:
            sites = find_sites(
                _read_text("/proc/self/mounts"),
                _read_text("/proc/self/cgroup"),
                parent_v2=config.cgroup_parent,
            )
        bwrap, switch, problem = await self._find_bwrap(drop)
        return _Host(
            bwrap=bwrap,
            problem=problem,
            switch=switch,
            drop=drop,
            unprivileged=drop is not None or not root,
            sites=MappingProxyType(dict(sites)),
        )

    async def _find_bwrap(
        self,
        drop: tuple[int, int] | None,
    ) -> tuple[str | None, UserSwitch | None, str | None]:
        config = self._config
        if not config.use_bubblewrap:
            return None, None, "bubblewrap is turned off in the configuration"
        found = str(config.bwrap_path) if config.bwrap_path else shutil.which("bwrap")
        if found is None:
            return None, None, "bubblewrap (bwrap) is not installed"
        switch = None
        if drop is not None:
            # setpriv runs inside the sandbox, so it must be one of the bound /usr files.
            setpriv = shutil.which("setpriv", path="/usr/bin:/usr/sbin")
            if setpriv is None:
                return None, None, "setpriv is not installed, so root cannot drop privileges"
            switch = UserSwitch(setpriv=setpriv, uid=drop[0], gid=drop[1])
        problem = await _probe(probe_argv(found, switch))
        if problem is not None:
            return None, None, problem
        return found, switch, None


# --- launching and supervising -------------------------------------------------------------


def _checked_argv(argv: Sequence[str]) -> tuple[str, ...]:
    if isinstance(argv, str | bytes) or not argv:
        raise ConfigurationError("a sandbox command is a non-empty sequence of arguments")
    if not all(isinstance(arg, str) and "\0" not in arg for arg in argv):
        raise ConfigurationError("sandbox arguments are strings without NUL characters")
    if not argv[0]:
        raise ConfigurationError("a sandbox command needs a program name")
    return tuple(argv)


def _environment(config: SandboxConfig, home: str, tmp: str) -> dict[str, str]:
    env = {
        "PATH": config.path,
        "HOME": home,
        "TMPDIR": tmp,
        "LANG": "C.UTF-8",
        "USER": SANDBOX_NAME,
        "LOGNAME": SANDBOX_NAME,
    }
    env.update(config.env)
    return env


def _rlimits(limits: SandboxLimits, *, nproc: bool) -> tuple[Rlimit, ...]:
    """The rlimits to set, each lowered to this process's own hard limit."""
    wanted: list[tuple[int, int | None, int | None]] = [
        (resource.RLIMIT_CORE, 0, 0),
        (resource.RLIMIT_CPU, limits.cpu_seconds, _plus_one(limits.cpu_seconds)),
        (resource.RLIMIT_AS, limits.address_space_bytes, limits.address_space_bytes),
        (resource.RLIMIT_FSIZE, limits.file_size_bytes, limits.file_size_bytes),
        (resource.RLIMIT_NOFILE, limits.open_files, limits.open_files),
    ]
    if nproc:
        wanted.append((resource.RLIMIT_NPROC, limits.max_processes, limits.max_processes))
    chosen: list[Rlimit] = []
    for kind, soft, hard in wanted:
        if soft is None or hard is None:
            continue
        _, current = resource.getrlimit(kind)
        ceiling = hard if current == resource.RLIM_INFINITY else min(hard, current)
        chosen.append((kind, (min(soft, ceiling), ceiling)))
    return tuple(chosen)


def _plus_one(value: int | None) -> int | None:
    return None if value is None else value + 1


def _stop(run: _Run) -> None:
    """SIGKILL the process group and everything in the run's groups, without waiting."""
    if run.child is not None:
        run.child.kill_group()
    if run.cgroups is not None:
        run.cgroups.signal_all()


def _kernel_kill(
    cgroups: RunCgroups | None,
    host: _Host,
    exit_code: int | None,
    signal_number: int | None,
) -> KillReason | None:
    if cgroups is not None and cgroups.oom_killed():
        return KillReason.MEMORY
    if signal_number is None and host.bwrap is not None and exit_code is not None:
        signal_number = exit_code - 128 if exit_code > 128 else None  # noqa: PLR2004
    return KillReason.CPU if signal_number == signal.SIGXCPU else None


async def _in_worker(
    run: _Run,
    function: Callable[_P, _T],
    *args: _P.args,
    **kwargs: _P.kwargs,
) -> _T:
    """Run blocking file work in a thread that cleanup waits for, even when cancelled."""
    work = asyncio.ensure_future(asyncio.to_thread(function, *args, **kwargs))
    run.work.append(work)
    return await asyncio.shield(work)


async def _probe(argv: list[str]) -> str | None:
    """Run the bubblewrap probe; None when it works, else what went wrong (for operators)."""
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={},
            start_new_session=True,
        )
    except OSError as exc:
        return f"bubblewrap cannot be started: {exc.strerror}"
    try:
        _, err = await asyncio.wait_for(process.communicate(), _PROBE_TIMEOUT_S)
    except TimeoutError:
        return "bubblewrap did not finish a trial run in time"
    finally:
        if process.returncode is None:
            with contextlib.suppress(OSError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
    if process.returncode == 0:
        return None
    detail = err.decode(errors="replace").strip().splitlines()
    return f"bubblewrap cannot isolate commands here: {detail[0][:200] if detail else 'failed'}"


def _read_text(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""
