"""Attacks on the command sandbox, with real processes: bombs, floods, escapes, network.

Each attack runs under bubblewrap and, where the attack's bound does not depend on it,
also without. Afterwards no process of the attack may be alive on the host: every
attack's processes carry a unique marker in their command line, and /proc is searched
for it. Tests that need bubblewrap skip where it cannot run, except under CI=true.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from handrail.tools.sandbox import (
    KillReason,
    Protection,
    Sandbox,
    SandboxConfig,
    SandboxLimits,
)

pytestmark = pytest.mark.anyio

ROOT = os.geteuid() == 0
NOBODY = 65534
WAIT_S = 10.0
"""Bound on waiting for a process to appear or to be gone; never a timed assertion."""

Attack = Callable[..., Any]


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; CI must provide it")
    pytest.skip(reason)


def _processes_of(uid: int) -> list[int]:
    """Processes (zombies too) whose real uid is `uid`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            status = (entry / "status").read_text() if entry.name.isdigit() else ""
        except OSError:
            continue
        uids = [line.split()[1] for line in status.splitlines() if line.startswith("Uid:")]
        if uids == [str(uid)]:
            found.append(int(entry.name))
    return found


def _alive(marker: str) -> list[int]:
    """Live processes whose command line holds `marker` (zombies have none)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(entry.name))
    return found


async def _until(predicate: Callable[[], bool]) -> bool:
    """Poll `predicate` until it holds or WAIT_S passes; whether it held."""
    loop = asyncio.get_running_loop()
    end = loop.time() + WAIT_S
    while not predicate():
        if loop.time() > end:
            return False
        await asyncio.sleep(0.02)
    return True


@pytest.fixture
def marker() -> str:
    return f"handrail-attack-{uuid.uuid4().hex}"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "data.txt").write_text("original\n")
    return root


@pytest.fixture(params=["bwrap", "plain"])
def mode(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


@pytest.fixture
def sandbox_for(workspace: Path, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    made: list[Path] = []

    async def build(mode: str, **limits: Any) -> Sandbox:
        scratch = tmp_path / "scratch"
        scratch.mkdir(exist_ok=True)
        made.append(scratch)
        limits.setdefault("timeout_seconds", 20)
        sandbox = Sandbox(
            SandboxConfig(
                workspace=workspace,
                use_bubblewrap=mode == "bwrap",
                limits=SandboxLimits(**limits),
                scratch_dir=scratch,
            ),
        )
        if mode == "bwrap":
            if shutil.which("bwrap") is None:
                _unavailable("bubblewrap (bwrap) is not installed")
            if Protection.NAMESPACES not in await sandbox.protections():
                _unavailable(f"bubblewrap cannot run here: {sandbox.problem}")
        return sandbox

    yield build
    for scratch in made:
        assert list(scratch.iterdir()) == []  # every run directory was removed


async def _needs(sandbox: Sandbox, protection: Protection) -> None:
    """Skip (fail on CI) before an attack that only `protection` keeps off the host."""
    if protection not in await sandbox.protections():
        _unavailable(f"this host cannot provide {protection}")


async def _no_survivor(marker: str) -> None:
    assert await _until(lambda: not _alive(marker)), f"left alive: {_alive(marker)}"


def _python(code: str, marker: str) -> list[str]:
    return ["python3", "-c", code, marker]


# --- process bombs -------------------------------------------------------------------------

SPAWNER = """
import os, sys, time
n = 0
try:
    while True:
        if os.fork() == 0:
            time.sleep(600)
            os._exit(0)
        n += 1
except OSError as exc:
    print(n, exc.errno, flush=True)
"""

FORK_BOMB = """
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
"""


@pytest.mark.skipif(not ROOT, reason="the user's process limit binds only a user of its own")
async def test_without_control_groups_the_users_process_limit_stops_a_spawner(
    workspace: Path,
    tmp_path: Path,
    marker: str,
) -> None:
    sandbox = Sandbox(
        SandboxConfig(
            workspace=workspace,
            cgroups=False,
            limits=SandboxLimits(timeout_seconds=20, max_processes=24),
            scratch_dir=tmp_path,
        ),
    )
    if Protection.NAMESPACES not in await sandbox.protections():
        _unavailable(f"bubblewrap cannot run here: {sandbox.problem}")
    # RLIMIT_NPROC counts every process of the user, zombies not yet reaped by init too.
    if not await _until(lambda: not _processes_of(NOBODY)):
        pytest.skip(f"other processes of uid {NOBODY} share its process limit")
    result = await sandbox.run(_python(SPAWNER, marker))
    assert int(result.stdout.text.split()[0]) < 24
    await _no_survivor(marker)


async def test_a_process_spawner_is_stopped_at_the_process_limit(
    sandbox_for: Attack,
    mode: str,
    marker: str,
) -> None:
    sandbox = await sandbox_for(mode, max_processes=24)
    await _needs(sandbox, Protection.PROCESS_LIMIT)
    result = await sandbox.run(_python(SPAWNER, marker))
    assert Protection.PROCESS_LIMIT in result.protections
    count, errno = result.stdout.text.split()
    assert int(count) < 24
    assert errno == "11"  # EAGAIN: fork refused
    await _no_survivor(marker)


async def test_a_fork_bomb_ends_at_the_timeout_and_leaves_the_host_usable(
    sandbox_for: Attack,
    mode: str,
    marker: str,
) -> None:
    sandbox = await sandbox_for(mode, max_processes=32, timeout_seconds=2)
    await _needs(sandbox, Protection.PROCESS_LIMIT)
    result = await sandbox.run(_python(FORK_BOMB, marker))
    assert result.killed_for is KillReason.TIMEOUT
    await _no_survivor(marker)
    after = await sandbox.run(["echo", "fine"])
    assert after.stdout.text == "fine\n"


# --- memory ----------------------------------------------------------------------------------

MEMORY_BOMB = """
chunks = []
while True:
    chunks.append(b"x" * (16 << 20))
"""


async def test_a_memory_bomb_is_killed_by_the_memory_group(
    sandbox_for: Attack,
    mode: str,
    marker: str,
) -> None:
    sandbox = await sandbox_for(mode, memory_bytes=128 << 20, address_space_bytes=None)
    await _needs(sandbox, Protection.MEMORY_LIMIT)
    result = await sandbox.run(_python(MEMORY_BOMB, marker))
    assert result.killed_for is KillReason.MEMORY
    assert not result.succeeded
    await _no_survivor(marker)


async def test_a_memory_bomb_fails_to_allocate_past_the_address_space_limit(
    sandbox_for: Attack,
    mode: str,
    marker: str,
) -> None:
    sandbox = await sandbox_for(mode, memory_bytes=None, address_space_bytes=256 << 20)
    result = await sandbox.run(_python(MEMORY_BOMB, marker))
    assert result.exit_code == 1
    assert "MemoryError" in result.stderr.text
    assert result.killed_for is None


# --- output ---------------------------------------------------------------------------------

FLOOD = """
import sys
line = "y" * 999 + "\\n"
while True:
    sys.stdout.write(line)
    sys.stderr.write(line)
"""


async def test_endless_output_is_cut_at_the_cap_and_the_command_killed(
    sandbox_for: Attack,
    mode: str,
    marker: str,
) -> None:
    cap = 2 << 20
    sandbox = await sandbox_for(mode, max_output_bytes=cap)
    result = await sandbox.run(_python(FLOOD, marker))
    assert result.killed_for is KillReason.OUTPUT
    assert result.stdout_bytes + result.stderr_bytes > cap
    assert result.stdout.total_chars + result.stderr.total_chars <= cap  # kept no more
    assert len(result.stdout.text) <= 8_000
    assert len(result.stderr.text) <= 8_000
    await _no_survivor(marker)


async def test_endless_output_without_a_cap_is_drained_until_the_timeout(
    sandbox_for: Attack,
    mode: str,
    marker: str,
) -> None:
    sandbox = await sandbox_for(mode, max_output_bytes=None, timeout_seconds=1)
    result = await sandbox.run(_python(FLOOD, marker))
    assert result.timed_out
    assert result.stdout_bytes > 64 << 10  # drained past a pipe's buffer: never blocked
    assert result.stdout.total_chars == result.stdout_bytes  # all read, little kept
    assert len(result.stdout.text) <= 8_000
    await _no_survivor(marker)


# --- time and orphans -----------------------------------------------------------------------

SLEEPER = """
import os, subprocess, sys, time
nap = [sys.executable, "-c", "import time; time.sleep(600)", sys.argv[1]]
subprocess.Popen(nap)
subprocess.Popen(nap, start_new_session=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(600)
    os._exit(0)
print("started", flush=True)
time.sleep(600)
"""


async def test_a_sleep_past_the_timeout_is_killed_with_every_descendant(
    sandbox_for: Attack,
    mode: str,
    marker: str,
) -> None:
    sandbox = await sandbox_for(mode, timeout_seconds=1.5)
    result = await sandbox.run(_python(SLEEPER, marker))
    assert result.timed_out
    assert result.killed_for is KillReason.TIMEOUT
    assert result.stdout.text == "started\n"
    await _no_survivor(marker)


async def test_descendants_left_behind_by_a_finished_command_are_killed(
    sandbox_for: Attack,
    mode: str,
    marker: str,
) -> None:
    sandbox = await sandbox_for(mode)
    code = "import subprocess, sys\nnap = [sys.executable, '-c', 'import time; time.sleep(600)']"
    code += "\nsubprocess.Popen([*nap, sys.argv[1]], start_new_session=True)\nprint('bye')"
    result = await sandbox.run(_python(code, marker))
    assert result.exit_code == 0
    assert result.killed_for is None
    await _no_survivor(marker)


async def test_cancelling_the_awaiting_task_kills_the_process_tree(
    sandbox_for: Attack,
    mode: str,
    marker: str,
    tmp_path: Path,
) -> None:
    sandbox = await sandbox_for(mode, timeout_seconds=60)
    task = asyncio.ensure_future(sandbox.run(_python(SLEEPER, marker)))
    assert await _until(lambda: len(_alive(marker)) >= 4), "the attack never started"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await _no_survivor(marker)
    assert list((tmp_path / "scratch").iterdir()) == []


# --- escapes --------------------------------------------------------------------------------

NETWORK = """
import socket, sys
port = int(sys.argv[2])
for host, p in (("127.0.0.1", port), ("127.0.0.1", 5432), ("1.1.1.1", 80), ("8.8.8.8", 53)):
    try:
        socket.create_connection((host, p), timeout=3).close()
        print(host, p, "connected")
    except OSError as exc:
        print(host, p, "refused", exc.errno)
"""


@pytest.fixture
def listener() -> Iterator[int]:
    """A real TCP server on the host's loopback, which the sandbox must not reach."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen()
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


async def test_no_address_is_reachable_from_inside_bubblewrap(
    sandbox_for: Attack,
    marker: str,
    listener: int,
) -> None:
    sandbox = await sandbox_for("bwrap")
    result = await sandbox.run(["python3", "-c", NETWORK, marker, str(listener)])
    lines = result.stdout.text.splitlines()
    assert len(lines) == 4
    assert all("refused" in line for line in lines), lines
    assert Protection.NO_NETWORK in result.protections


async def test_without_bubblewrap_the_network_is_reachable_and_says_so(
    sandbox_for: Attack,
    marker: str,
    listener: int,
) -> None:
    sandbox = await sandbox_for("plain")
    result = await sandbox.run(["python3", "-c", NETWORK, marker, str(listener)])
    assert result.stdout.text.splitlines()[0] == f"127.0.0.1 {listener} connected"
    assert Protection.NO_NETWORK in result.missing


HOST_TARGETS = ("/usr/bin/handrail-evil", "/etc/handrail-evil", "/handrail-evil")


def _existing(paths: tuple[str, ...]) -> set[str]:
    return {path for path in paths if Path(path).exists()}


WRITER = """
import sys
original = sys.argv[2]
for path in ("/usr/bin/handrail-evil", "/etc/handrail-evil", "/handrail-evil",
             "/bin/handrail-evil", original + "/data.txt", original + "/evil"):
    try:
        with open(path, "w") as handle:
            handle.write("pwned")
        print(path, "written")
    except OSError as exc:
        print(path, "refused", exc.errno)
"""


async def test_nothing_outside_the_workspace_copy_can_be_written(
    sandbox_for: Attack,
    mode: str,
    marker: str,
    workspace: Path,
) -> None:
    sandbox = await sandbox_for(mode)
    result = await sandbox.run(["python3", "-c", WRITER, marker, str(workspace)])
    lines = result.stdout.text.splitlines()
    assert len(lines) == 6
    assert all("refused" in line for line in lines), lines
    assert (workspace / "data.txt").read_text() == "original\n"
    assert not (workspace / "evil").exists()
    assert not {"/usr/bin/handrail-evil", "/etc/handrail-evil"} & _existing(HOST_TARGETS)


async def test_a_symlink_in_the_workspace_does_not_reach_host_secrets_under_bubblewrap(
    sandbox_for: Attack,
    workspace: Path,
    tmp_path: Path,
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret\n")
    (workspace / "escape").symlink_to(secret)
    sandbox = await sandbox_for("bwrap")
    result = await sandbox.run(["cat", "escape"])
    assert result.exit_code != 0
    assert "host secret" not in result.stdout.text


async def test_the_sandbox_cannot_signal_host_processes(
    sandbox_for: Attack,
    mode: str,
    marker: str,
) -> None:
    if mode == "plain" and not ROOT:
        pytest.skip("without bubblewrap only a user switch separates the command from the host")
    victim = await asyncio.create_subprocess_exec(
        "python3",
        "-c",
        "import time; time.sleep(600)",
        marker,
    )
    try:
        sandbox = await sandbox_for(mode)
        code = "import os, sys\ntry:\n    os.kill(int(sys.argv[2]), 9)\n    print('killed')\n"
        code += "except OSError as exc:\n    print('refused', exc.errno)"
        result = await sandbox.run(["python3", "-c", code, marker, str(victim.pid)])
        assert result.stdout.text.startswith("refused")
        assert victim.returncode is None
    finally:
        victim.kill()
        await victim.wait()


# --- what the workspace copy hands over ---------------------------------------------------

ROOT_SECRET = "root-only-7c2e"  # noqa: S105 - planted content, not a credential


@pytest.mark.skipif(not ROOT, reason="a file only root may read needs root to make")
async def test_a_hard_link_to_a_file_only_root_may_read_is_never_handed_to_the_command(
    sandbox_for: Attack,
    mode: str,
    workspace: Path,
    tmp_path: Path,
) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    shadow = private / "shadow"
    shadow.write_text(f"{ROOT_SECRET} linked\n")
    shadow.chmod(0o600)
    os.link(shadow, workspace / "linked.txt")
    own = workspace / "own-private.txt"
    own.write_text(f"{ROOT_SECRET} own\n")
    own.chmod(0o600)
    sandbox = await sandbox_for(mode)
    result = await sandbox.run(["sh", "-c", "cat linked.txt own-private.txt; ls -A"])
    assert ROOT_SECRET not in result.stdout.text
    assert result.stdout.text.splitlines() == ["data.txt"]
    assert result.left_out.hard_links == ("linked.txt",)
    assert result.left_out.unreadable == ("own-private.txt",)
    assert not result.left_out.truncated


@pytest.mark.skipif(not ROOT, reason="modes only root's files can show are tested as root")
async def test_the_copy_keeps_or_narrows_modes_and_never_widens_who_may_read(
    sandbox_for: Attack,
    mode: str,
    workspace: Path,
) -> None:
    modes = {"public.txt": 0o644, "script.sh": 0o755, "group.txt": 0o640, "setuid": 0o4755}
    for name, bits in modes.items():
        (workspace / name).write_text(f"{ROOT_SECRET} {name}\n")
        (workspace / name).chmod(bits)
    (workspace / "closed").mkdir(mode=0o700)
    (workspace / "closed" / "inner.txt").write_text(f"{ROOT_SECRET} inner\n")
    (workspace / "open").mkdir()
    (workspace / "open").chmod(0o705)  # others may list it; the group may not
    sandbox = await sandbox_for(mode)
    script = "stat -c '%a %u %n' . public.txt script.sh setuid open; cat group.txt closed/*"
    result = await sandbox.run(["sh", "-c", script])
    user = NOBODY
    top = workspace.stat().st_mode & 0o777  # noqa: ASYNC240 - one stat of a test's directory
    assert result.stdout.text.splitlines() == [
        f"{top:o} {user} .",
        f"644 {user} public.txt",
        f"755 {user} script.sh",
        f"755 {user} setuid",
        f"705 {user} open",
    ]
    assert result.left_out.unreadable == ("closed", "group.txt")
    assert result.left_out.hard_links == ()


@pytest.mark.parametrize("swap", ["dir", "file.txt"])
async def test_swapping_workspace_parts_for_links_during_the_copy_never_copies_the_outside(
    sandbox_for: Attack,
    mode: str,
    workspace: Path,
    tmp_path: Path,
    swap: str,
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in ("a.txt", "b.txt", "secret.txt"):
        (outside / name).write_text(f"{ROOT_SECRET} outside\n")
    if mode == "plain":  # there the command could read a public host file itself
        for path in outside.iterdir():
            path.chmod(0o600)
    (workspace / "dir").mkdir()
    for name in ("a.txt", "b.txt"):
        (workspace / "dir" / name).write_text("inside\n")
    (workspace / "file.txt").write_text("inside\n")
    link = workspace / f"{swap}.link"
    link.symlink_to(outside if swap == "dir" else outside / "secret.txt")
    sandbox = await sandbox_for(mode)
    stop = threading.Event()
    fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY)

    def swapping() -> None:
        parked = f"{swap}.parked"
        while not stop.is_set():
            os.rename(swap, parked, src_dir_fd=fd, dst_dir_fd=fd)
            os.rename(link.name, swap, src_dir_fd=fd, dst_dir_fd=fd)
            os.rename(swap, link.name, src_dir_fd=fd, dst_dir_fd=fd)
            os.rename(parked, swap, src_dir_fd=fd, dst_dir_fd=fd)

    swapper = threading.Thread(target=swapping, daemon=True)
    swapper.start()
    shown: list[str] = []
    try:
        for _ in range(COPY_RACE_RUNS):
            result = await sandbox.run(["sh", "-c", "cat data.txt dir/* file.txt 2>/dev/null"])
            shown.append(result.stdout.text)
    finally:
        stop.set()
        swapper.join(timeout=WAIT_S)
        os.close(fd)
    assert all(text.startswith("original\n") for text in shown)
    assert [text for text in shown if ROOT_SECRET in text] == []


COPY_RACE_RUNS = 40


# --- disk ---------------------------------------------------------------------------------

DISK_FILLER = """
import sys
chunk = b"x" * (1 << 16)
with open(sys.argv[2], "wb") as out:
    while True:
        out.write(chunk)
        out.flush()
"""


@pytest.mark.parametrize("where", ["/workspace/big", "/tmp/big", "big"])  # noqa: S108
async def test_writing_past_the_disk_quota_is_killed_for_disk(
    sandbox_for: Attack,
    marker: str,
    where: str,
) -> None:
    sandbox = await sandbox_for(
        "bwrap",
        disk_bytes=8 << 20,
        tmp_bytes=8 << 20,
        file_size_bytes=None,
        timeout_seconds=60,
    )
    await _needs(sandbox, Protection.DISK_LIMIT)
    result = await sandbox.run([*_python(DISK_FILLER, marker), where])
    assert result.killed_for is KillReason.DISK
    assert not result.succeeded
    assert not result.timed_out
    await _no_survivor(marker)


async def test_many_small_files_past_the_disk_quota_are_killed_for_disk(
    sandbox_for: Attack,
    marker: str,
) -> None:
    sandbox = await sandbox_for("bwrap", disk_bytes=4 << 20, timeout_seconds=60)
    await _needs(sandbox, Protection.DISK_LIMIT)
    code = (
        "import itertools\nfor n in itertools.count():\n    open(f'f{n}', 'w').write('y' * 4000)\n"
    )
    result = await sandbox.run(_python(code, marker))
    assert result.killed_for is KillReason.DISK
    await _no_survivor(marker)


async def test_without_bubblewrap_there_is_no_disk_quota_and_it_says_so(
    sandbox_for: Attack,
) -> None:
    sandbox = await sandbox_for("plain", disk_bytes=8 << 20)
    result = await sandbox.run(["true"])
    assert Protection.DISK_LIMIT in result.missing
    assert Protection.DISK_LIMIT not in result.protections
