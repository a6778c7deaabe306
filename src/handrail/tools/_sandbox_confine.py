"""A trusted program run where only one directory exists, read-only: `Confinement`.

Owns finding the files a program needs to start (the binary, its dynamic loader and
shared libraries, as the loader itself lists them), checking that every user may read
them anyway, and the trial run that proves this host can confine the program. The
command line itself comes from `_sandbox_bwrap.confined_argv`. It never mounts anything
writable and runs nothing but the loader's listing and the trial.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from handrail.errors import ConfigurationError
from handrail.tools._sandbox_bwrap import confined_argv

__all__ = ["Confinement"]

_TRIAL_TIMEOUT_S = 15.0
_LOADER_CACHE = Path("/etc/ld.so.cache")
_LOADED = re.compile(rb"^\s+(?:\S+ => )?(/\S+) \(0x[0-9a-f]+\)\s*$")
_MISSING = re.compile(rb"^\s+(\S+) => not found\s*$")


@dataclass(frozen=True, kw_only=True, slots=True)
class Confinement:
    """How to run one trusted program so that it sees one directory and its own files.

    `runtime` are the files the program needs to start, each readable by every user of
    the host (so showing them to the program reveals nothing). Made by `prepare`.
    """

    bwrap: str
    program: str
    runtime: tuple[PurePosixPath, ...]
    drop_capabilities: bool

    @classmethod
    def prepare(cls, *, bwrap: str, program: str, trial_dir: Path) -> Confinement:
        """Find `program`'s files and run it once confined (`--version`, in `trial_dir`).

        Raises ConfigurationError when a file it needs is missing or not readable by
        every user, or when bubblewrap cannot run it here (the reason is in the message).
        """
        if not Path(bwrap).is_absolute() or not os.access(bwrap, os.X_OK):
            raise ConfigurationError(f"bubblewrap {bwrap!r} is not an executable absolute path")
        confinement = cls(
            bwrap=bwrap,
            program=program,
            runtime=_runtime(program),
            drop_capabilities=os.geteuid() == 0,
        )
        trial = _run(confinement.argv(trial_dir, [program, "--version"]))
        if trial.returncode != 0:
            detail = trial.stderr.decode("utf-8", "replace").strip().splitlines()
            reason = detail[0][:200] if detail else f"exit status {trial.returncode}"
            raise ConfigurationError(
                f"{program} cannot run confined by bubblewrap on this host: {reason}",
            )
        return confinement

    def argv(self, visible: Path, command: Sequence[str]) -> list[str]:
        """The command line running `command` (the program and its arguments) confined."""
        return confined_argv(
            self.bwrap,
            visible=visible,
            runtime=self.runtime,
            drop_capabilities=self.drop_capabilities,
            argv=command,
        )


def _runtime(program: str) -> tuple[PurePosixPath, ...]:
    """The program, its loader and libraries (as the loader lists them), and its cache."""
    # The dynamic loader lists what it would load and exits; a static program ignores
    # the variable and prints its version (a failure then shows in the trial run).
    listing = _run([program, "--version"], env={"LD_TRACE_LOADED_OBJECTS": "1"})
    libraries = _listed(listing.stdout)
    files = {PurePosixPath(program), *libraries}
    if libraries and _LOADER_CACHE.exists():
        files.add(PurePosixPath(_LOADER_CACHE))
    for path in files:
        _check_public(path)
    return tuple(sorted(files))


def _listed(listing: bytes) -> set[PurePosixPath]:
    """The files named in the dynamic loader's listing; a library it cannot find refused."""
    files: set[PurePosixPath] = set()
    for line in listing.splitlines():
        missing = _MISSING.match(line)
        if missing:
            name = os.fsdecode(missing.group(1))
            raise ConfigurationError(f"a library the program needs, {name}, is not installed")
        loaded = _LOADED.match(line)
        if loaded:
            files.add(PurePosixPath(os.fsdecode(loaded.group(1))))
    return files


def _check_public(path: PurePosixPath) -> None:
    """A file shown to a confined program must be one every user may read anyway."""
    try:
        info = Path(path).stat()
    except OSError as exc:
        raise ConfigurationError(f"{path} cannot be read: {exc.strerror}") from None
    if not stat.S_ISREG(info.st_mode) or not info.st_mode & stat.S_IROTH:
        raise ConfigurationError(
            f"{path} is not a regular file every user may read; it is not shown to a "
            f"confined program",
        )


def _run(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(  # noqa: S603 - trusted configuration, an argument vector
            argv,
            env=env or {},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=_TRIAL_TIMEOUT_S,
            start_new_session=True,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ConfigurationError(f"{argv[0]} did not finish a trial run in time") from None
    except OSError as exc:
        raise ConfigurationError(f"{argv[0]} cannot be started: {exc.strerror}") from None
