"""The launch of one sandbox run: what it starts and which protections it holds.

Owns the command line (bubblewrap's, or the command itself without it), the clean
environment, the rlimits and the child's setup, and which protections a run holds on
this host and which it should. It never starts a process (`_sandbox_process` does)
and never touches the workspace copy.
"""

from __future__ import annotations

import resource
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from handrail.tools._sandbox_bwrap import (
    SANDBOX_HOME,
    SANDBOX_NAME,
    BwrapLayout,
    HoldFds,
    bwrap_argv,
)
from handrail.tools._sandbox_cgroup import MEMORY, PIDS, RunCgroups
from handrail.tools._sandbox_host import Host
from handrail.tools._sandbox_process import Rlimit, child_setup
from handrail.tools._sandbox_space import Hold
from handrail.tools._sandbox_types import (
    ISOLATION,
    Protection,
    SandboxConfig,
    SandboxLimits,
)

__all__ = [
    "Launch",
    "cgroup_controllers",
    "environment",
    "held_protections",
    "prepare_launch",
    "rlimits",
    "wanted_protections",
]


@dataclass(frozen=True, slots=True)
class Launch:
    """What one run starts: its command line, directory, environment and setup."""

    argv: list[str]
    cwd: Path
    env: dict[str, str]
    setup: Callable[[], None]
    protections: frozenset[Protection]


def prepare_launch(
    config: SandboxConfig,
    host: Host,
    command: tuple[str, ...],
    *,
    directory: Path,
    cgroups: RunCgroups | None,
    hold: Hold | None,
) -> Launch:
    """How a run starts `command`: under bubblewrap when the host has it, else directly."""
    limits = config.limits
    controllers = cgroups.controllers if cgroups else frozenset()
    # RLIMIT_NPROC counts every process of the user on the host (concurrent runs and
    # zombies not yet reaped too), so it is only the bound when no pids group is.
    nproc = host.drop is not None and PIDS not in controllers
    bounds = rlimits(limits, nproc=nproc)
    procs = cgroups.procs_files if cgroups else ()
    protections = held_protections(limits, host, controllers)
    if host.bwrap is not None and hold is not None:
        info, block = hold.child_fds
        layout = BwrapLayout(
            bwrap=host.bwrap,
            etc_dir=directory / "etc",
            read_only=[PurePosixPath(p.as_posix()) for p in config.read_only_paths],
            env=environment(config, SANDBOX_HOME, SANDBOX_HOME),
            tmp_bytes=limits.tmp_bytes,
            disk_bytes=limits.disk_bytes,
            hold=HoldFds(info=info, block=block),
            switch=host.switch,
        )
        return Launch(
            argv=bwrap_argv(layout, command),
            cwd=directory,
            env={},
            setup=child_setup(procs, bounds, None),
            protections=protections,
        )
    env = environment(config, str(directory / "home"), str(directory / "tmp"))
    return Launch(
        argv=list(command),
        cwd=directory / "workspace",
        env=env,
        setup=child_setup(procs, bounds, host.drop),
        protections=protections,
    )


def held_protections(
    limits: SandboxLimits, host: Host, cgroups: frozenset[str]
) -> frozenset[Protection]:
    """The protections a run on `host` has, with these control group controllers."""
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
    if limits.disk_bytes is not None and host.bwrap is not None:
        held.add(Protection.DISK_LIMIT)
    return frozenset(held)


def cgroup_controllers(limits: SandboxLimits, host: Host) -> frozenset[str]:
    """The controllers a run's groups get: those its limits need and the host has."""
    wanted = {PIDS: limits.max_processes, MEMORY: limits.memory_bytes}
    return frozenset(c for c, value in wanted.items() if value is not None and c in host.sites)


def wanted_protections(limits: SandboxLimits) -> frozenset[Protection]:
    """What a run should have: its absence is reported as missing."""
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
        Protection.DISK_LIMIT: limits.disk_bytes,
    }
    wanted |= {protection for protection, value in optional.items() if value is not None}
    return frozenset(wanted)


def environment(config: SandboxConfig, home: str, tmp: str) -> dict[str, str]:
    """The whole environment of the command: nothing of the host's but what is configured."""
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


def rlimits(limits: SandboxLimits, *, nproc: bool) -> tuple[Rlimit, ...]:
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
