"""What this host allows a sandbox, found once: bubblewrap, a user switch, control groups.

Owns the discovery (is bubblewrap installed and allowed to make its namespaces, can it
hold a sandbox with its writable space until released, can root drop to the sandbox
user, which control groups may be made) and, for runs, starting bubblewrap held and
finding its writable space. It never runs a command of a model's choosing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from handrail.tools._sandbox_bwrap import TMP, WORKSPACE, HoldFds, UserSwitch, probe_argv
from handrail.tools._sandbox_cgroup import CgroupSite, find_sites
from handrail.tools._sandbox_space import Hold, Space, SpaceUnavailableError

__all__ = ["Host", "discover", "find_space", "read_text"]

_PROBE_TIMEOUT_S = 15.0


@dataclass(frozen=True, kw_only=True, slots=True)
class Host:
    """What this host allows, found once per Sandbox."""

    bwrap: str | None
    problem: str | None
    """Why bubblewrap is not used, for operators (never shown to a model)."""
    switch: UserSwitch | None
    drop: tuple[int, int] | None
    """The (uid, gid) commands run as, when it differs from this process's."""
    unprivileged: bool
    sites: Mapping[str, CgroupSite]


async def discover(
    *,
    use_bubblewrap: bool,
    bwrap_path: Path | None,
    user: tuple[int, int] | None,
    cgroups: bool,
    cgroup_parent: Path | None,
) -> Host:
    """Probe this host once: see the module docstring."""
    root = os.geteuid() == 0
    drop = user if root else None
    sites: Mapping[str, CgroupSite] = {}
    if cgroups:
        sites = find_sites(
            read_text("/proc/self/mounts"),
            read_text("/proc/self/cgroup"),
            parent_v2=cgroup_parent,
        )
    bwrap, switch, problem = await _find_bwrap(use_bubblewrap, bwrap_path, drop)
    return Host(
        bwrap=bwrap,
        problem=problem,
        switch=switch,
        drop=drop,
        unprivileged=drop is not None or not root,
        sites=MappingProxyType(dict(sites)),
    )


async def _find_bwrap(
    use: bool,
    path: Path | None,
    drop: tuple[int, int] | None,
) -> tuple[str | None, UserSwitch | None, str | None]:
    if not use:
        return None, None, "bubblewrap is turned off in the configuration"
    found = str(path) if path else shutil.which("bwrap")
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
    if problem is None:
        problem = await _probe_hold(found, switch)
    if problem is not None:
        return None, None, problem
    return found, switch, None


async def _probe(argv: list[str]) -> str | None:
    """Run a bubblewrap probe; None when it works, else what went wrong (for operators)."""
    process = await _start(argv)
    if isinstance(process, str):
        return process
    return await _outcome(process)


async def _probe_hold(bwrap: str, switch: UserSwitch | None) -> str | None:
    """Whether a sandbox can be held, its writable space reached, and released, as runs do."""
    hold = Hold.make()
    info, block = hold.child_fds
    argv = probe_argv(bwrap, switch, HoldFds(info=info, block=block))
    process = await _start(argv, (info, block))
    if isinstance(process, str):  # pragma: no cover - the plain probe started it just now
        hold.close()
        return process
    problem: str | None = None
    try:
        space = await find_space(hold)
    except SpaceUnavailableError as exc:
        problem = f"bubblewrap cannot hold a sandbox here: {exc.strerror or exc}"
        _kill(process)
    else:
        space.close()
        hold.release()
    finally:
        hold.close()
    outcome = await _outcome(process)
    return problem or outcome


async def _start(
    argv: list[str],
    pass_fds: Sequence[int] = (),
) -> asyncio.subprocess.Process | str:
    try:
        return await asyncio.create_subprocess_exec(
            *argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={},
            start_new_session=True,
            pass_fds=pass_fds,
        )
    except OSError as exc:
        return f"bubblewrap cannot be started: {exc.strerror}"


async def _outcome(process: asyncio.subprocess.Process) -> str | None:
    try:
        _, err = await asyncio.wait_for(process.communicate(), _PROBE_TIMEOUT_S)
    except TimeoutError:
        return "bubblewrap did not finish a trial run in time"
    finally:
        _kill(process)
        await process.wait()
    if process.returncode == 0:
        return None
    detail = err.decode(errors="replace").strip().splitlines()
    return f"bubblewrap cannot isolate commands here: {detail[0][:200] if detail else 'failed'}"


def _kill(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)


async def find_space(hold: Hold) -> Space:
    """The writable space of the sandbox bubblewrap holds (call after the fork)."""
    hold.started()
    pid = await hold.child_pid()
    return await Space.find(pid, WORKSPACE, TMP)


def read_text(path: str) -> str:
    """A small text file of the kernel's, or "" when it cannot be read."""
    try:
        return Path(path).read_text()
    except OSError:
        return ""
