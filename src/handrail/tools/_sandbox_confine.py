"""A trusted program run where it can read one directory and nothing else: `Confinement`.

Owns finding the files a program needs to start (the binary, its dynamic loader and
shared libraries, as the loader itself lists them), checking that every user may read
them anyway, choosing how to confine (Landlock where the kernel is new enough, else
bubblewrap), each launch's command line and the thread that must start it (`launch`),
and the trial run that proves this host can confine the program. The bubblewrap line
comes from `_sandbox_bwrap.confined_argv`, the Landlock rules and restricted threads
from `_sandbox_landlock`. It never mounts anything writable and runs nothing but the
loader's listing and the trial.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Literal, get_args

from handrail.errors import ConfigurationError
from handrail.tools._sandbox_bwrap import confined_argv
from handrail.tools._sandbox_landlock import MIN_ABI, RestrictedThreads, landlock_abi

__all__ = ["Confinement", "Launch", "Mechanism", "chosen", "landlock_usable"]

_TRIAL_TIMEOUT_S = 15.0
_LOADER_CACHE = Path("/etc/ld.so.cache")
_LOADED = re.compile(rb"^\s+(?:\S+ => )?(/\S+) \(0x[0-9a-f]+\)\s*$")
_MISSING = re.compile(rb"^\s+(\S+) => not found\s*$")

Mechanism = Literal["auto", "landlock", "bubblewrap"]
"""How to confine: `auto` is Landlock when the kernel has it (version >= 6), else bubblewrap."""


def landlock_usable() -> bool:
    """Whether this kernel's Landlock is new enough to confine a program (`auto` uses it)."""
    return landlock_abi() >= MIN_ABI


def chosen(mechanism: Mechanism) -> Literal["landlock", "bubblewrap"]:
    """What confines under `mechanism` on this host.

    `landlock` stays `landlock` even where the kernel's is too old: `prepare` refuses it.
    """
    if mechanism not in get_args(Mechanism):
        raise ConfigurationError(f"unknown confinement {mechanism!r}")
    if mechanism == "auto":
        return "landlock" if landlock_usable() else "bubblewrap"
    return mechanism


@dataclass(frozen=True, slots=True)
class Launch:
    """One confined launch: the command line, and the executor whose thread must start it.

    `start_on` is None when the command line confines by itself (bubblewrap); else
    it is a thread restricted by Landlock, whose domain the process inherits.
    """

    argv: list[str]
    start_on: Executor | None


@dataclass(frozen=True, kw_only=True, slots=True)
class Confinement:
    """How to run one trusted program so that it can read one directory and its own files.

    `runtime` are the files the program needs to start, each readable by every user of
    the host (so letting the program read them reveals nothing). `bwrap` is bubblewrap's
    path when it confines, None when Landlock does. Made by `prepare`.

    Both leave a path that leaves the directory, by `..` or by any symbolic link, leading
    nowhere the program can read, and leave root without capabilities. Bubblewrap does it
    with namespaces (the outside does not exist there; about 3-5 ms a launch); Landlock
    with kernel rules (the outside exists but cannot be opened, written, executed, bound
    or connected to over TCP, signalled, or reached by an abstract socket; UDP is not
    covered, where bubblewrap's empty network namespace is) that a thread of this
    process took on and the program inherits when that thread starts it (a vfork: well
    under a millisecond). `close` lets that thread go.
    """

    bwrap: str | None
    program: str
    runtime: tuple[PurePosixPath, ...]
    drop_capabilities: bool
    _threads: RestrictedThreads | None = field(default=None, compare=False, repr=False)

    @classmethod
    def prepare(
        cls,
        *,
        bwrap: str | None,
        program: str,
        trial_dir: Path,
        mechanism: Mechanism = "bubblewrap",
    ) -> Confinement:
        """Choose how, find `program`'s files and run it once confined (`--version`).

        Raises ConfigurationError when a file it needs is missing or not readable by
        every user, when the chosen way is not available (Landlock older than version
        6, no bubblewrap), or when it cannot run the program here (the reason is in the
        message).
        """
        use_landlock = chosen(mechanism) == "landlock"
        if use_landlock and not landlock_usable():
            raise ConfigurationError(
                f"this kernel has no Landlock of version {MIN_ABI} or later "
                f"(it has {landlock_abi() or 'none'}); confine with bubblewrap instead",
            )
        if not use_landlock:
            if bwrap is None:
                raise ConfigurationError(f"bubblewrap was not found to confine {program}")
            if not Path(bwrap).is_absolute() or not os.access(bwrap, os.X_OK):
                raise ConfigurationError(
                    f"bubblewrap {bwrap!r} is not an executable absolute path",
                )
        runtime = _runtime(program)
        drop = os.geteuid() == 0
        confinement = cls(
            bwrap=None if use_landlock else bwrap,
            program=program,
            runtime=runtime,
            drop_capabilities=drop,
            _threads=RestrictedThreads(runtime, drop_capabilities=drop) if use_landlock else None,
        )
        try:
            launch = confinement.launch(trial_dir, [program, "--version"])
            if launch.start_on is None:
                trial = _run(launch.argv)
            else:
                # stdin opened here: the restricted thread may not open /dev/null.
                with Path(os.devnull).open("rb") as devnull:
                    trial = launch.start_on.submit(_run, launch.argv, None, devnull).result()
        except (OSError, RuntimeError) as exc:
            confinement.close()
            raise ConfigurationError(f"{program} cannot be confined here: {exc}") from None
        if trial.returncode != 0:
            confinement.close()
            detail = trial.stderr.decode("utf-8", "replace").strip().splitlines()
            reason = detail[0][:200] if detail else f"exit status {trial.returncode}"
            raise ConfigurationError(
                f"{program} cannot run confined by {confinement.mechanism} on this host: {reason}",
            )
        return confinement

    @property
    def mechanism(self) -> Literal["landlock", "bubblewrap"]:
        """What confines the program."""
        return "landlock" if self.bwrap is None else "bubblewrap"

    def close(self) -> None:
        """Let the restricted thread go (Landlock); nothing to do for bubblewrap."""
        if self._threads is not None:
            self._threads.close()

    def launch(self, visible: Path, command: Sequence[str]) -> Launch:
        """How to start `command` (the program and its arguments) confined to `visible`.

        With bubblewrap, its command line (the directory appears read-only at
        /workspace); with Landlock, the command itself and the restricted thread that
        must start it. Raises OSError when the directory or a file of the program cannot
        be found.
        """
        if self._threads is not None:
            return Launch(list(command), self._threads.executor(visible))
        if self.bwrap is None:  # pragma: no cover - prepare sets one or the other
            raise OSError("nothing to confine the program with")
        argv = confined_argv(
            self.bwrap,
            visible=visible,
            runtime=self.runtime,
            drop_capabilities=self.drop_capabilities,
            argv=command,
        )
        return Launch(argv, None)


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


def _run(
    argv: list[str],
    env: dict[str, str] | None = None,
    stdin: IO[bytes] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(  # noqa: S603 - trusted configuration, an argument vector
            argv,
            env=env or {},
            stdin=subprocess.DEVNULL if stdin is None else stdin,
            capture_output=True,
            timeout=_TRIAL_TIMEOUT_S,
            start_new_session=True,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ConfigurationError(f"{argv[0]} did not finish a trial run in time") from None
    except OSError as exc:
        raise ConfigurationError(f"{argv[0]} cannot be started: {exc.strerror}") from None
