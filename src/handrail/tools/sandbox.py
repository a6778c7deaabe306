"""The command sandbox: one command, as an argument vector, in a disposable workspace copy.

Owns one run from start to cleanup: its run directory and control groups, the workspace
copy made as the sandbox user, the wall timeout that kills the whole process tree, why
the command ended, and the result with which protections were in force and what the
copy left out. What the run starts (bubblewrap or not, environment, rlimits) and which
protections that holds is `_sandbox_launch`'s. It never runs a shell string and never
writes to the original workspace.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, ParamSpec, TypeVar

from handrail.clock import Clock, SystemClock
from handrail.errors import ConfigurationError
from handrail.tools._sandbox_bwrap import etc_files
from handrail.tools._sandbox_cgroup import RunCgroups
from handrail.tools._sandbox_files import (
    CopyFull,
    LeftOut,
    WorkspaceChanges,
    copy_tree,
    remove_tree,
    workspace_changes,
)
from handrail.tools._sandbox_host import Host, discover, find_space
from handrail.tools._sandbox_identity import as_user
from handrail.tools._sandbox_launch import (
    Launch,
    cgroup_controllers,
    held_protections,
    prepare_launch,
    wanted_protections,
)
from handrail.tools._sandbox_process import Budget, Child, Output, settle
from handrail.tools._sandbox_space import Hold, Space, SpaceUnavailableError
from handrail.tools._sandbox_types import (
    ISOLATION,
    KillReason,
    Protection,
    SandboxConfig,
    SandboxLimits,
    SandboxResult,
    SandboxUnavailableError,
    SandboxUser,
)

__all__ = [
    "ISOLATION",
    "KillReason",
    "LeftOut",
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

_BWRAP_PROCESSES = 2
"""bubblewrap's own processes in the pids group: itself and the pid namespace's init."""


_ENDINGS: Mapping[str, KillReason | None] = MappingProxyType(
    {
        "exited": None,
        "timeout": KillReason.TIMEOUT,
        "output": KillReason.OUTPUT,
        "disk": KillReason.DISK,
    },
)


@dataclass(slots=True)
class _Run:
    """The mutable state of one run, for its cleanup."""

    directory: Path
    work: list[asyncio.Future[Any]] = field(default_factory=list)
    """Worker threads that must end before the directory is removed."""
    child: Child | None = None
    cgroups: RunCgroups | None = None
    hold: Hold | None = None
    space: Space | None = None
    """The sandbox's /workspace and /tmp, held from the host (under bubblewrap)."""
    descriptors: list[int] = field(default_factory=list)
    """The original workspace and, without bubblewrap, the copy: closed at cleanup."""

    def close(self) -> None:
        """Close every descriptor the run holds."""
        if self.hold is not None:
            self.hold.close()
        if self.space is not None:
            self.space.close()
        while self.descriptors:
            os.close(self.descriptors.pop())


class Sandbox:
    """Runs commands from a fixed configuration; see the module docstring.

    Safe to share between concurrent runs; each run has its own copy, groups and limits.
    """

    def __init__(self, config: SandboxConfig, *, clock: Clock | None = None) -> None:
        if not config.workspace.is_dir():
            raise ConfigurationError("SandboxConfig.workspace must be an existing directory")
        self._config = config
        self._clock = clock or SystemClock()
        self._host_facts: Host | None = None
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
        limits = self._config.limits
        return held_protections(limits, host, cgroup_controllers(limits, host))

    async def missing(self) -> frozenset[Protection]:
        """What a run would lack: see `SandboxResult.missing`."""
        return wanted_protections(self._config.limits) - await self.protections()

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
        host: Host,
        command: tuple[str, ...],
        limit: float,
        *,
        collect_changes: bool,
    ) -> SandboxResult:
        config = self._config
        source, copy = await _in_worker(run, self._prepare, run, host)
        limits = config.limits
        overhead = _BWRAP_PROCESSES if host.bwrap else 0
        run.cgroups = RunCgroups.create(
            host.sites,
            run.directory.name,
            max_pids=None if limits.max_processes is None else limits.max_processes + overhead,
            memory_bytes=limits.memory_bytes,
        )
        if host.bwrap is not None:
            run.hold = Hold.make()
        launch = prepare_launch(
            config,
            host,
            command,
            directory=run.directory,
            cgroups=run.cgroups,
            hold=run.hold,
        )
        budget = Budget(limits.max_output_bytes)
        stdout, stderr = Output(config.output), Output(config.output)
        left_out = LeftOut()
        if copy is not None:  # without bubblewrap: the copy is made before the command
            left_out_or_full = await self._copy(run, host, source, copy)
            if left_out_or_full is None:
                return self._unfit(command, launch, (stdout, stderr), quota=None)
            left_out = left_out_or_full
        started = self._clock.monotonic()
        try:
            run.child = child = Child.start(
                launch.argv,
                cwd=launch.cwd,
                env=launch.env,
                setup=launch.setup,
                outputs=(stdout, stderr),
                budget=budget,
                pass_fds=run.hold.child_fds if run.hold else (),
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
                left_out=left_out,
            )
        if run.hold is not None:
            copied = await self._fill(run, host, source)
            if copied is None:
                _stop(run)
                await child.reap()
                await child.drain()
                return self._unfit(command, launch, (stdout, stderr), quota=limits.disk_bytes)
            left_out, copy = copied
            started = self._clock.monotonic()
        space = run.space
        ending = await child.supervise(budget, limit, full=None if space is None else space.full)
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
            full=space is not None and space.full(),
        )
        changes = None
        if collect_changes and copy is not None:
            changes = await _in_worker(
                run,
                workspace_changes,
                source,
                copy,
                ignore=config.copy_ignore,
                left_out=left_out,
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
            left_out=left_out,
        )

    async def _fill(
        self,
        run: _Run,
        host: Host,
        source: int,
    ) -> tuple[LeftOut, int | None] | None:
        """Find the held sandbox's space, copy the workspace in and release it.

        None when the copy did not fit (the sandbox is then killed, never released).
        Where bubblewrap ended before its command (a failed mount, say), nothing is
        copied and the run reports bubblewrap's own exit and message.
        """
        hold = run.hold
        assert hold is not None  # noqa: S101 - only called under bubblewrap
        try:
            run.space = await find_space(hold)
        except SpaceUnavailableError as exc:
            if not exc.gone:  # still held: it must not go on without its copy
                _stop(run)
            hold.close()
            return LeftOut(), None
        target = run.space.workspace
        if host.drop is not None:
            os.fchown(target, *host.drop)
        left_out = await self._copy(run, host, source, target)
        if left_out is None:
            return None
        hold.release()
        return left_out, target

    async def _copy(self, run: _Run, host: Host, source: int, target: int) -> LeftOut | None:
        """Copy the workspace as the sandbox user; None when it does not fit."""
        config = self._config
        work = as_user(
            host.drop,
            copy_tree,
            source,
            target,
            ignore=config.copy_ignore,
            allow_hardlinks=config.allow_hardlinks,
        )
        run.work.append(work)
        try:
            return await asyncio.shield(work)
        except CopyFull:
            return None

    def _unfit(
        self,
        command: tuple[str, ...],
        launch: Launch,
        outputs: tuple[Output, Output],
        *,
        quota: int | None,
    ) -> SandboxResult:
        """The result of a run whose workspace copy did not fit its disk space."""
        size = "" if quota is None else f" of {quota} bytes"
        message = (
            f"sandbox: the workspace copy does not fit in the run's disk space{size}; "
            f"the command did not run\n"
        ).encode()
        _, stderr = outputs
        stderr.bytes += len(message)
        stderr.feed(message)
        return self._result(
            command,
            launch,
            exit_code=None,
            signal_number=None,
            killed_for=KillReason.DISK,
            duration=0.0,
            outputs=outputs,
        )

    def _result(
        self,
        command: tuple[str, ...],
        launch: Launch,
        *,
        exit_code: int | None,
        signal_number: int | None,
        killed_for: KillReason | None,
        duration: float,
        outputs: tuple[Output, Output],
        changes: WorkspaceChanges | None = None,
        left_out: LeftOut | None = None,
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
            missing=wanted_protections(self._config.limits) - launch.protections,
            changes=changes,
            left_out=left_out or LeftOut(),
        )

    def _prepare(self, run: _Run, host: Host) -> tuple[int, int | None]:
        """Open the workspace and write the run's files (in a worker thread).

        Returns the workspace's descriptor and, without bubblewrap, that of the empty
        directory the copy goes to (under bubblewrap it is the sandbox's tmpfs, later).
        """
        config = self._config
        directory = run.directory
        source = os.open(config.workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        run.descriptors.append(source)
        if host.bwrap is not None:
            uid, gid = host.drop or (os.getuid(), os.getgid())
            etc = directory / "etc"
            etc.mkdir()
            for name, text in etc_files(uid, gid).items():
                (etc / name).write_text(text)
            return source, None
        for name in ("home", "tmp", "workspace"):
            (directory / name).mkdir(mode=0o700)
            if host.drop is not None:
                os.chown(directory / name, *host.drop)
        copy = os.open(directory / "workspace", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        run.descriptors.append(copy)
        # The unprivileged user must pass through the run directory to its workspace.
        directory.chmod(0o711)
        return source, copy

    async def _dispose(self, run: _Run) -> None:
        """Wait for the tree to end, then remove the groups and the run directory."""
        child = run.child
        if child is not None:
            if child.process.returncode is None:
                await child.reap()
            child.close()
        await settle(run.work)
        run.close()
        if run.cgroups is not None and not await asyncio.to_thread(run.cgroups.remove):
            _log.warning("sandbox control groups %s could not be removed", run.directory.name)
        try:
            await asyncio.to_thread(remove_tree, run.directory)
        except OSError:
            _log.warning("sandbox run directory %s could not be removed", run.directory)

    # --- what the host allows --------------------------------------------------------------

    async def _host(self) -> Host:
        async with self._lock:
            if self._host_facts is None:
                self._host_facts = await self._discover()
            return self._host_facts

    async def _discover(self) -> Host:
        config = self._config
        user = None if config.user is None else (config.user.uid, config.user.gid)
        return await discover(
            use_bubblewrap=config.use_bubblewrap,
            bwrap_path=config.bwrap_path,
            user=user,
            cgroups=config.cgroups,
            cgroup_parent=config.cgroup_parent,
        )


# --- checking, stopping, judging ------------------------------------------------------------


def _checked_argv(argv: Sequence[str]) -> tuple[str, ...]:
    if isinstance(argv, str | bytes) or not argv:
        raise ConfigurationError("a sandbox command is a non-empty sequence of arguments")
    if not all(isinstance(arg, str) and "\0" not in arg for arg in argv):
        raise ConfigurationError("sandbox arguments are strings without NUL characters")
    if not argv[0]:
        raise ConfigurationError("a sandbox command needs a program name")
    return tuple(argv)


def _stop(run: _Run) -> None:
    """SIGKILL the process group and everything in the run's groups, without waiting."""
    if run.child is not None:
        run.child.kill_group()
    if run.cgroups is not None:
        run.cgroups.signal_all()


def _kernel_kill(
    cgroups: RunCgroups | None,
    host: Host,
    exit_code: int | None,
    signal_number: int | None,
    *,
    full: bool = False,
) -> KillReason | None:
    if cgroups is not None and cgroups.oom_killed():
        return KillReason.MEMORY
    if full:
        return KillReason.DISK
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
