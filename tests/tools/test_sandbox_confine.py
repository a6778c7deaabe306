"""Confining a trusted program: its files, the trial run, what it sees, and its end.

Real bubblewrap and real programs (ripgrep, bash). Tests that need bubblewrap skip
where it is missing, except under CI=true, where they fail: CI must have it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path, PurePosixPath

import pytest

from _fifo import read_line
from _needs import needs
from handrail.errors import ConfigurationError
from handrail.tools import _sandbox_confine
from handrail.tools._sandbox_confine import Confinement, _check_public, _listed
from handrail.tools.workspace import _rg_process

pytestmark = pytest.mark.anyio

BWRAP = shutil.which("bwrap")
RG = shutil.which("rg")
BASH = shutil.which("bash", path="/usr/bin:/bin")

LISTING = b"""\tlinux-vdso.so.1 (0x00007ffd1a1f0000)
\tlibpcre2-8.so.0 => /lib/x86_64-linux-gnu/libpcre2-8.so.0 (0x00007f2a3c000000)
\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f2a3be00000)
\t/lib64/ld-linux-x86-64.so.2 (0x00007f2a3c1a0000)
"""


@pytest.fixture
def bwrap() -> str:
    """The bubblewrap binary, where this host has one."""
    return needs(BWRAP, "bubblewrap")


@pytest.fixture
def rg() -> str:
    """The ripgrep binary, where this host has one."""
    return needs(RG, "ripgrep")


def test_the_loader_listing_names_the_loader_and_libraries_it_would_load() -> None:
    assert _listed(LISTING) == {
        PurePosixPath("/lib/x86_64-linux-gnu/libpcre2-8.so.0"),
        PurePosixPath("/lib/x86_64-linux-gnu/libc.so.6"),
        PurePosixPath("/lib64/ld-linux-x86-64.so.2"),
    }


def test_a_static_program_needs_no_library() -> None:
    assert _listed(b"ripgrep 14.1.0 (rev 1)\n\n+SIMD-128\n") == set()


def test_a_library_the_loader_cannot_find_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match=r"libgone\.so\.1"):
        _listed(LISTING + b"\tlibgone.so.1 => not found\n")


def test_a_file_not_every_user_may_read_is_never_shown_to_a_confined_program(
    tmp_path: Path,
) -> None:
    private = tmp_path / "private.so"
    private.write_bytes(b"\x7fELF")
    private.chmod(0o640)
    with pytest.raises(ConfigurationError, match="every user may read"):
        _check_public(PurePosixPath(private))
    with pytest.raises(ConfigurationError, match="cannot be read"):
        _check_public(PurePosixPath(tmp_path / "missing.so"))
    with pytest.raises(ConfigurationError, match="every user may read"):
        _check_public(PurePosixPath(tmp_path))


def test_ripgreps_files_are_its_binary_loader_libraries_and_the_loader_cache(
    bwrap: str,
    rg: str,
    tmp_path: Path,
) -> None:
    confinement = Confinement.prepare(bwrap=bwrap, program=rg, trial_dir=tmp_path)
    assert PurePosixPath(rg) in confinement.runtime
    assert all(Path(path).is_file() for path in confinement.runtime)
    launch = confinement.launch(tmp_path, [rg, "--files"])
    argv = launch.argv
    assert launch.start_on is None
    assert confinement.mechanism == "bubblewrap"
    assert argv[0] == bwrap
    assert argv[argv.index("--") :] == ["--", rg, "--files"]
    assert confinement.drop_capabilities is (os.geteuid() == 0)


def test_a_program_that_cannot_start_is_a_configuration_error(
    bwrap: str,
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigurationError, match="cannot be started"):
        Confinement.prepare(bwrap=bwrap, program=str(tmp_path / "gone"), trial_dir=tmp_path)
    failing = tmp_path / "failing"
    failing.write_text("#!/bin/sh\nexit 3\n")
    failing.chmod(0o755)
    with pytest.raises(ConfigurationError, match="cannot run confined"):
        # Its interpreter is not among the files shown to it: the trial run says so.
        Confinement.prepare(bwrap=bwrap, program=str(failing), trial_dir=tmp_path)


def test_a_bubblewrap_that_cannot_confine_is_found_when_the_search_is_made(
    rg: str,
    tmp_path: Path,
) -> None:
    refusing = tmp_path / "bwrap"
    refusing.write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n"
    )
    refusing.chmod(0o755)
    with pytest.raises(ConfigurationError, match="No permissions"):
        Confinement.prepare(bwrap=str(refusing), program=rg, trial_dir=tmp_path)
    with pytest.raises(ConfigurationError, match="executable absolute path"):
        Confinement.prepare(bwrap="bwrap", program=rg, trial_dir=tmp_path)


def test_a_trial_that_hangs_is_a_configuration_error(
    rg: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sleep = shutil.which("sleep")
    hanging = tmp_path / "bwrap"
    hanging.write_text(f"#!/bin/sh\nexec {sleep} 60\n")
    hanging.chmod(0o755)
    monkeypatch.setattr(_sandbox_confine, "_TRIAL_TIMEOUT_S", 0.5)
    with pytest.raises(ConfigurationError, match="in time"):
        Confinement.prepare(bwrap=str(hanging), program=rg, trial_dir=tmp_path)


def test_a_confined_program_sees_the_directory_read_only_and_nothing_of_the_host(
    bwrap: str,
    tmp_path: Path,
) -> None:
    bash = needs(BASH, "bash")
    visible = tmp_path / "visible"
    visible.mkdir()
    (visible / "here.txt").write_text("inside\n")
    (tmp_path / "beside.txt").write_text("outside\n")
    confinement = Confinement.prepare(bwrap=bwrap, program=bash, trial_dir=visible)
    script = (
        'cd /workspace && echo "$(<here.txt)"; '
        "for p in /etc/passwd /etc/hostname /proc/self /tmp /home /root ../beside.txt "
        f'{tmp_path}/beside.txt; do [ -e "$p" ] && echo "seen $p"; done; '
        "echo x > /workspace/new.txt 2>/dev/null && echo wrote; "
        "echo x > /new.txt 2>/dev/null && echo wrote-root; true"
    )
    argv = confinement.launch(visible, [bash, "-c", script]).argv
    done = subprocess.run(  # noqa: S603 - a fixed argument vector
        argv,
        env={},
        capture_output=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.decode().splitlines()
    assert lines[0] == "inside"
    assert lines[1:] == []
    assert not (visible / "new.txt").exists()


def _processes() -> dict[int, tuple[int, str, str]]:
    """Every process: pid -> (parent pid, state, name)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            head, tail = (entry / "stat").read_text().rsplit(")", 1)
        except OSError:
            continue
        fields = tail.split()
        found[int(entry.name)] = (int(fields[1]), fields[0], head.split("(", 1)[1])
    return found


def _tree(top: int) -> dict[int, str]:
    """`top` and its descendants that have not ended: pid -> name."""
    processes = _processes()
    tree = {top}
    grew = True
    while grew:
        grew = False
        for pid, (parent, _, _) in processes.items():
            if parent in tree and pid not in tree:
                tree.add(pid)
                grew = True
    return {pid: processes[pid][2] for pid in tree if pid in processes and processes[pid][1] != "Z"}


def _alive(pids: set[int]) -> set[int]:
    processes = _processes()
    return {pid for pid in pids if pid in processes and processes[pid][1] != "Z"}


def _our_child(name: str) -> int | None:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and comm == name:
            return int(entry.name)
    return None


async def _until(predicate: Callable[[], bool]) -> bool:
    """Poll `predicate` for at most 30 s."""
    for _ in range(3000):
        if predicate():
            return True
        await asyncio.sleep(0.01)
    return predicate()


async def test_cancelling_a_confined_program_kills_everything_it_started(
    bwrap: str,
    tmp_path: Path,
) -> None:
    bash = needs(BASH, "bash")
    visible = tmp_path / "visible"
    visible.mkdir()
    os.mkfifo(visible / "ready")
    confinement = Confinement.prepare(bwrap=bwrap, program=bash, trial_dir=visible)
    # It tells it runs through the FIFO, then waits on it for ever (no writer is left).
    script = "echo up > /workspace/ready; read -r line < /workspace/ready"
    argv = confinement.launch(visible, [bash, "-c", script]).argv
    run = asyncio.ensure_future(
        _rg_process.run(
            argv,
            cwd=visible,
            take=lambda _line: False,
            deadline=asyncio.get_running_loop().time() + 600,
        ),
    )
    assert await read_line(visible / "ready") == b"up\n"
    outer = _our_child("bwrap")
    assert outer is not None
    tree = _tree(outer)
    assert "bash" in tree.values()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert await _until(lambda: _alive(set(tree)) == set())
