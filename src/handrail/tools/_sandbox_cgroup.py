"""Per-run control groups for the sandbox: a pids and a memory bound for a whole tree.

Owns finding where this process may create control groups (cgroup v1 controllers or a
cgroup v2 tree with the controller enabled), creating one group per run with its
limits, killing every process left in it and removing it. It never moves a process
itself: the child joins its groups before it executes the command (see `procs_files`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CgroupSite", "RunCgroups", "find_sites"]

PIDS = "pids"
MEMORY = "memory"
_CONTROLLERS = (PIDS, MEMORY)
_KILL_ROUNDS = 200
_ROUND_PAUSE_S = 0.005


@dataclass(frozen=True, kw_only=True, slots=True)
class CgroupSite:
    """Where the groups of one controller are made: a directory this process may write."""

    controller: str
    version: int
    parent: Path


def find_sites(
    mounts: str,
    own: str,
    *,
    parent_v2: Path | None = None,
) -> dict[str, CgroupSite]:
    """The writable site of each controller, from /proc/self/mounts and /proc/self/cgroup.

    A v1 controller's groups go under this process's own group in that hierarchy. In a
    v2 tree the per-run group needs a parent whose `cgroup.subtree_control` enables the
    controller: `parent_v2` when given (a delegated subtree), else this process's own
    group, which only the root group of a tree can be while it holds processes.
    """
    v1_mounts: dict[str, Path] = {}
    v2_mount: Path | None = None
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 4:  # noqa: PLR2004 - device, mount point, type, options
            continue
        point, kind, options = Path(_unescape(fields[1])), fields[2], fields[3].split(",")
        if kind == "cgroup":
            for controller in _CONTROLLERS:
                if controller in options:
                    v1_mounts.setdefault(controller, point)
        elif kind == "cgroup2" and v2_mount is None:
            v2_mount = point
    v1_paths: dict[str, str] = {}
    v2_path: str | None = None
    for line in own.splitlines():
        number, _, rest = line.partition(":")
        names, _, path = rest.partition(":")
        if number == "0" and not names:
            v2_path = path
        for name in names.split(","):
            v1_paths.setdefault(name, path)
    sites: dict[str, CgroupSite] = {}
    for controller in _CONTROLLERS:
        mount = v1_mounts.get(controller)
        own_path = v1_paths.get(controller)
        if mount is not None and own_path is not None:
            v1_parent = mount / own_path.lstrip("/")
            if _writable(v1_parent):
                sites[controller] = CgroupSite(controller=controller, version=1, parent=v1_parent)
    v2_parent = parent_v2
    if v2_parent is None and v2_mount is not None and v2_path is not None:
        v2_parent = v2_mount / v2_path.lstrip("/")
    if v2_parent is not None and _writable(v2_parent):
        enabled = _read(v2_parent / "cgroup.subtree_control").split()
        for controller in _CONTROLLERS:
            if controller in enabled and controller not in sites:
                sites[controller] = CgroupSite(controller=controller, version=2, parent=v2_parent)
    return sites


def _unescape(field: str) -> str:
    """A mount point as /proc/self/mounts escapes it (space, tab, newline, backslash)."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def _writable(directory: Path) -> bool:
    return (directory / "cgroup.procs").is_file() and os.access(directory, os.W_OK)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _write(path: Path, value: str) -> bool:
    try:
        path.write_text(value)
    except OSError:
        return False
    return True


class RunCgroups:
    """The groups of one run: made with their limits, emptied and removed afterwards."""

    __slots__ = ("_groups",)

    def __init__(self, groups: Mapping[str, tuple[CgroupSite, Path]]) -> None:
        self._groups = dict(groups)

    @classmethod
    def create(
        cls,
        sites: Mapping[str, CgroupSite],
        name: str,
        *,
        max_pids: int | None,
        memory_bytes: int | None,
    ) -> RunCgroups:
        """Make a group named `name` for each bound asked for; skip one that fails."""
        wanted = {PIDS: max_pids, MEMORY: memory_bytes}
        groups: dict[str, tuple[CgroupSite, Path]] = {}
        for controller, limit in wanted.items():
            site = sites.get(controller)
            if site is None or limit is None:
                continue
            directory = site.parent / name
            try:
                directory.mkdir()
            except OSError:
                continue
            if _limit(site, directory, limit):
                groups[controller] = (site, directory)
            else:
                _remove_dir(directory)
        return cls(groups)

    @property
    def controllers(self) -> frozenset[str]:
        """The controllers whose groups exist, with their limits written."""
        return frozenset(self._groups)

    @property
    def procs_files(self) -> tuple[str, ...]:
        """The `cgroup.procs` files a child writes "0" into to join every group."""
        return tuple(str(directory / "cgroup.procs") for _, directory in self._groups.values())

    def members(self) -> set[int]:
        """Process ids still in any of the groups."""
        found: set[int] = set()
        for _, directory in self._groups.values():
            found.update(_pids(directory))
        return found

    def signal_all(self) -> bool:
        """Send SIGKILL to every process now in the groups; False if they were empty."""
        members = self.members()
        for _, directory in self._groups.values():
            if (directory / "cgroup.kill").exists():  # v2: the kernel kills the whole group
                _write(directory / "cgroup.kill", "1")
        for pid in members:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        return bool(members)

    def kill(self) -> None:
        """SIGKILL every process in the groups, until they are empty or a bound passes.

        Blocks for up to about a second: call it from a worker thread.
        """
        for _ in range(_KILL_ROUNDS):
            if not self.signal_all():
                return
            time.sleep(_ROUND_PAUSE_S)

    def oom_killed(self) -> bool:
        """Whether the memory group's limit made the kernel kill a process."""
        group = self._groups.get(MEMORY)
        if group is None:
            return False
        site, directory = group
        name = "memory.oom_control" if site.version == 1 else "memory.events"
        return any(_oom_count(line) for line in _read(directory / name).splitlines())

    def remove(self) -> bool:
        """Remove every group (killing what is left first); True if all are gone."""
        self.kill()
        removed = True
        for _, directory in self._groups.values():
            removed = _remove_dir(directory) and removed
        return removed


def _limit(site: CgroupSite, directory: Path, limit: int) -> bool:
    if site.controller == PIDS:
        return _write(directory / "pids.max", str(limit))
    if site.version == 1:
        if not _write(directory / "memory.limit_in_bytes", str(limit)):
            return False
        # Without swap accounting the file is absent and there is no swap to bound.
        _write(directory / "memory.memsw.limit_in_bytes", str(limit))
        return True
    _write(directory / "memory.swap.max", "0")
    return _write(directory / "memory.max", str(limit))


def _oom_count(line: str) -> bool:
    key, _, value = line.partition(" ")
    return key == "oom_kill" and value.strip() not in {"", "0"}


def _pids(directory: Path) -> Iterable[int]:
    return [int(pid) for pid in _read(directory / "cgroup.procs").split() if pid.isdigit()]


def _remove_dir(directory: Path) -> bool:
    # A group with a dying process in it is busy for a moment after the kill.
    for _ in range(_KILL_ROUNDS):
        try:
            directory.rmdir()
        except FileNotFoundError:
            return True
        except OSError:
            time.sleep(_ROUND_PAUSE_S)
        else:
            return True
    return False
