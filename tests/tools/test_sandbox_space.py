"""A held bubblewrap sandbox and its writable space, reached from the host.

Real bubblewrap where it can run (skips otherwise, fails under CI=true); the failure
paths use pipes and processes that are not sandboxes at all.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from handrail.tools import _sandbox_space
from handrail.tools import sandbox as sandbox_module
from handrail.tools._sandbox_bwrap import TMP, WORKSPACE, HoldFds, probe_argv
from handrail.tools._sandbox_files import CopyFull
from handrail.tools._sandbox_host import discover, find_space
from handrail.tools._sandbox_space import Hold, Space, SpaceUnavailableError
from handrail.tools.sandbox import KillReason, Protection, Sandbox, SandboxConfig, SandboxLimits

pytestmark = pytest.mark.anyio

BWRAP = shutil.which("bwrap")


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; CI must provide it")
    pytest.skip(reason)


@pytest.fixture
def bwrap() -> str:
    """Real bubblewrap that can hold a sandbox here."""
    if BWRAP is None:
        _unavailable("bubblewrap (bwrap) is not installed")
        return ""
    return BWRAP


@pytest.fixture
def hold() -> Iterator[Hold]:
    made = Hold.make()
    yield made
    made.close()


def _start(argv: list[str], hold: Hold) -> subprocess.Popen[bytes]:
    return subprocess.Popen(  # noqa: S603 - a fixed argument vector
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        pass_fds=hold.child_fds,
        start_new_session=True,
    )


def _held_argv(bwrap: str, hold: Hold) -> list[str]:
    info, block = hold.child_fds
    return probe_argv(bwrap, None, HoldFds(info=info, block=block))


def _fill(fd: int) -> None:
    while True:
        os.write(fd, b"x" * 65536)


async def test_a_held_sandbox_shows_its_tmpfs_space_and_runs_once_released(
    bwrap: str,
    hold: Hold,
) -> None:
    process = _start(_held_argv(bwrap, hold), hold)
    try:
        space = await find_space(hold)
        try:
            assert not space.full()
            name = "fill"
            fd = os.open(name, os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=space.workspace)
            try:
                with pytest.raises(OSError, match="No space left"):
                    _fill(fd)
            finally:
                os.close(fd)
            assert space.full()
            assert process.poll() is None  # still held
            hold.release()
            assert await asyncio.to_thread(process.wait, 30) == 0
            # The descriptors keep the mounts readable after the sandbox ended.
            assert name in os.listdir(space.workspace)  # noqa: PTH208 - a descriptor
        finally:
            space.close()
            space.close()
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        assert process.stderr is not None
        process.stderr.close()


async def test_bubblewrap_that_ends_before_saying_anything_is_gone(hold: Hold) -> None:
    hold.started()
    os.close(os.dup(hold.info_read))  # nothing else holds the write end now
    with pytest.raises(SpaceUnavailableError) as caught:
        await hold.child_pid()
    assert caught.value.gone


async def test_information_that_names_no_process_is_refused(hold: Hold) -> None:
    os.write(hold.info_write, json.dumps({"child-pid": 0}).encode())
    hold.started()
    with pytest.raises(SpaceUnavailableError) as caught:
        await hold.child_pid()
    assert not caught.value.gone


async def test_waiting_for_information_is_bounded(
    hold: Hold,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_sandbox_space, "_FIND_TIMEOUT_S", 0.05)
    with pytest.raises(SpaceUnavailableError):
        await hold.child_pid()  # the write end stays open: nothing ever comes


async def test_a_process_whose_root_is_the_hosts_is_never_taken_for_a_sandbox(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_sandbox_space, "_FIND_TIMEOUT_S", 0.05)
    with pytest.raises(SpaceUnavailableError) as caught:
        await Space.find(os.getpid(), WORKSPACE, TMP)
    assert not caught.value.gone


async def test_a_process_that_ended_has_no_space() -> None:
    done = await asyncio.create_subprocess_exec("true")
    await done.wait()
    with pytest.raises(SpaceUnavailableError) as caught:
        await Space.find(done.pid, WORKSPACE, TMP)
    assert caught.value.gone


async def test_a_sandbox_whose_workspace_is_not_a_tmpfs_is_refused(
    bwrap: str,
    hold: Hold,
    tmp_path: Path,
) -> None:
    info, block = hold.child_fds
    argv = [
        bwrap, "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin",
        "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
        "--bind", str(tmp_path), WORKSPACE, "--dir", TMP,
        "--info-fd", str(info), "--block-fd", str(block), "--", "true",
    ]  # fmt: skip
    process = _start(argv, hold)
    try:
        with pytest.raises(SpaceUnavailableError, match="not tmpfs"):
            await find_space(hold)
    finally:
        process.kill()
        process.wait()
        assert process.stderr is not None
        process.stderr.close()


async def test_a_host_that_cannot_hold_a_sandbox_runs_without_bubblewrap(
    bwrap: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def unreachable(*_args: object) -> Space:
        raise SpaceUnavailableError(13, "Permission denied")

    monkeypatch.setattr(Space, "find", unreachable)
    host = await discover(
        use_bubblewrap=True,
        bwrap_path=Path(bwrap),
        user=None,
        cgroups=False,
        cgroup_parent=None,
    )
    assert host.bwrap is None
    assert host.problem is not None
    assert host.problem.startswith("bubblewrap cannot hold a sandbox here")


def _sandbox(workspace: Path, tmp_path: Path, **options: object) -> Sandbox:
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    return Sandbox(SandboxConfig(workspace=workspace, scratch_dir=scratch, **options))  # type: ignore[arg-type]


async def _isolating(sandbox: Sandbox) -> Sandbox:
    if Protection.NAMESPACES not in await sandbox.protections():
        _unavailable(f"bubblewrap cannot run here: {sandbox.problem}")
    return sandbox


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "big.bin").write_bytes(b"\0" * (3 << 20))
    return root


async def test_a_workspace_larger_than_the_disk_quota_never_runs_and_says_why(
    bwrap: str,
    workspace: Path,
    tmp_path: Path,
) -> None:
    limits = SandboxLimits(timeout_seconds=30, disk_bytes=1 << 20)
    sandbox = await _isolating(_sandbox(workspace, tmp_path, limits=limits))
    marker = tmp_path / "ran"
    result = await sandbox.run(["touch", str(marker)])
    assert result.killed_for is KillReason.DISK
    assert result.exit_code is None
    assert "does not fit" in result.stderr.text
    assert not marker.exists()
    assert list((tmp_path / "scratch").iterdir()) == []


async def test_bubblewrap_failing_to_make_the_sandbox_reports_its_own_message(
    bwrap: str,
    workspace: Path,
    tmp_path: Path,
) -> None:
    tool = tmp_path / "toolchain"
    tool.mkdir()
    sandbox = await _isolating(_sandbox(workspace, tmp_path, read_only_paths=(tool,)))
    tool.rmdir()  # gone between configuration and the run: bubblewrap cannot bind it
    result = await sandbox.run(["true"])
    assert not result.succeeded
    assert result.killed_for is None
    assert "bwrap" in result.stderr.text
    assert list((tmp_path / "scratch").iterdir()) == []


async def test_no_disk_quota_leaves_the_workspace_tmpfs_at_the_kernels_size(
    bwrap: str,
    workspace: Path,
    tmp_path: Path,
) -> None:
    limits = SandboxLimits(timeout_seconds=30, disk_bytes=None)
    sandbox = await _isolating(_sandbox(workspace, tmp_path, limits=limits))
    result = await sandbox.run(["sh", "-c", "df -k /workspace | tail -1"])
    assert result.succeeded, result.stderr.text
    assert Protection.DISK_LIMIT not in result.protections
    assert Protection.DISK_LIMIT not in result.missing
    assert int(result.stdout.text.split()[1]) > 4 << 10  # more than 4 MiB


async def test_without_bubblewrap_a_copy_that_fills_the_disk_never_runs(
    workspace: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def full(*_args: object, **_kwargs: object) -> None:
        raise CopyFull

    monkeypatch.setattr(sandbox_module, "copy_tree", full)
    sandbox = _sandbox(workspace, tmp_path, use_bubblewrap=False)
    marker = tmp_path / "ran"
    result = await sandbox.run(["touch", str(marker)])
    assert result.killed_for is KillReason.DISK
    assert "does not fit in the run's disk space;" in result.stderr.text
    assert not marker.exists()


async def test_a_held_sandbox_whose_space_cannot_be_reached_is_killed_not_released(
    bwrap: str,
    workspace: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sandbox = await _isolating(_sandbox(workspace, tmp_path))

    async def unreachable(*_args: object) -> Space:
        raise SpaceUnavailableError(13, "Permission denied")

    monkeypatch.setattr(Space, "find", unreachable)
    marker = tmp_path / "ran"
    result = await sandbox.run(["touch", "/workspace/ran"])
    assert not result.succeeded
    assert result.exit_code is None or result.exit_code != 0
    assert not marker.exists()
    assert list((tmp_path / "scratch").iterdir()) == []
