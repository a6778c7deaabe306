"""Confining a trusted program with Landlock: what it can read, write, reach and signal.

Real kernel rules and real programs (bash, ripgrep). The tests need a kernel with
Landlock version 6 or later; where it is older they skip, except under CI=true, where
they fail: the machines CI runs on have it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from _needs import missing, needs
from handrail.errors import ConfigurationError, ToolFailed
from handrail.tools import _sandbox_confine, _sandbox_landlock
from handrail.tools._sandbox_confine import Confinement, landlock_usable
from handrail.tools._sandbox_landlock import MIN_ABI, landlock_abi
from handrail.tools.workspace import _rg_process
from handrail.tools.workspace._rg_json import Line
from handrail.tools.workspace.paths import Workspace
from handrail.tools.workspace.search import SearchConfig, TextSearch

pytestmark = pytest.mark.anyio

RG = shutil.which("rg")
BASH = shutil.which("bash", path="/usr/bin:/bin")


@pytest.fixture(autouse=True)
def _landlock() -> None:
    if not landlock_usable():
        missing(f"this kernel has Landlock {landlock_abi()}, below {MIN_ABI}")


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP port on 127.0.0.1 that accepts connections (so only a rule can refuse one)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield server.getsockname()[1]


def _confined_bash(visible: Path, script: str) -> subprocess.CompletedProcess[bytes]:
    bash = needs(BASH, "bash")
    confinement = Confinement.prepare(
        bwrap=None, program=bash, trial_dir=visible, mechanism="landlock"
    )
    assert confinement.mechanism == "landlock"
    launch = confinement.launch(visible, [bash, "-c", script])
    assert launch.start_on is not None
    with Path(os.devnull).open("rb") as null:

        def run() -> subprocess.CompletedProcess[bytes]:
            return subprocess.run(  # noqa: S603 - a fixed argument vector
                launch.argv,
                cwd=visible,
                env={},
                stdin=null,
                capture_output=True,
                check=False,
                timeout=60,
            )

        return launch.start_on.submit(run).result()


def test_the_kernel_reports_a_landlock_version() -> None:
    assert landlock_abi() >= MIN_ABI


def test_a_confined_program_reads_the_directory_and_nothing_else(
    tmp_path: Path, listener: int
) -> None:
    visible = tmp_path / "visible"
    (visible / "sub").mkdir(parents=True)
    (visible / "sub" / "here.txt").write_text("inside\n")
    (tmp_path / "beside.txt").write_text("outside\n")
    (visible / "link.txt").symlink_to(tmp_path / "beside.txt")
    (visible / "dir-link").symlink_to(tmp_path)
    tries = " ".join(
        [
            "/etc/passwd",
            "/proc/self/environ",
            "../beside.txt",
            str(tmp_path / "beside.txt"),
            "link.txt",
            "dir-link/beside.txt",
        ]
    )
    script = (
        'echo "$(<sub/here.txt)"; '
        f'for p in {tries}; do (echo "$(<"$p")") 2>/dev/null && echo "read $p"; done; '
        "(echo x > new.txt) 2>/dev/null && echo wrote; "
        f"(echo x > {tmp_path}/new.txt) 2>/dev/null && echo wrote-outside; "
        "(mkdir made) 2>/dev/null && echo made; "
        f"(exec 3<>/dev/tcp/127.0.0.1/{listener}) 2>/dev/null && echo connected; "
        "(kill -0 $PPID) 2>/dev/null && echo signalled; true"
    )
    done = _confined_bash(visible, script)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.decode().splitlines()
    assert lines == ["inside"]
    assert not (visible / "new.txt").exists()
    assert not (tmp_path / "new.txt").exists()
    assert not (visible / "made").exists()


def test_the_same_script_unconfined_does_all_of_it(tmp_path: Path, listener: int) -> None:
    """The control: each refusal above is the rules', not the script's."""
    bash = needs(BASH, "bash")
    (tmp_path / "beside.txt").write_text("outside\n")
    script = (
        f'echo "$(<{tmp_path}/beside.txt)"; '
        f"(exec 3<>/dev/tcp/127.0.0.1/{listener}) && echo connected; "
        "(kill -0 $PPID) && echo signalled; true"
    )
    done = subprocess.run(  # noqa: S603 - a fixed argument vector
        [bash, "-c", script], env={}, capture_output=True, check=False, timeout=60
    )
    assert done.stdout.decode().splitlines() == ["outside", "connected", "signalled"]


@pytest.mark.skipif(os.geteuid() != 0, reason="only root has capabilities to drop")
def test_root_confined_has_no_capability_left(tmp_path: Path) -> None:
    visible = tmp_path / "visible"
    visible.mkdir()
    private = visible / "private.txt"
    private.write_text("another user's\n")
    os.chown(private, 65534, 65534)
    private.chmod(0o600)
    done = _confined_bash(visible, '(echo "$(<private.txt)") 2>/dev/null && echo read; true')
    assert done.stdout == b""
    assert private.read_text() == "another user's\n"  # the service itself still can


def test_the_service_thread_that_starts_a_program_is_not_restricted_itself(tmp_path: Path) -> None:
    visible = tmp_path / "visible"
    visible.mkdir()
    (tmp_path / "beside.txt").write_text("outside\n")
    _confined_bash(visible, "true")
    assert (tmp_path / "beside.txt").read_text() == "outside\n"


def test_landlock_too_old_is_refused_when_chosen_and_auto_uses_bubblewrap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rg = needs(RG, "ripgrep")
    monkeypatch.setattr(_sandbox_confine, "landlock_abi", lambda: MIN_ABI - 1)
    with pytest.raises(ConfigurationError, match="Landlock"):
        Confinement.prepare(bwrap=None, program=rg, trial_dir=tmp_path, mechanism="landlock")
    with pytest.raises(ConfigurationError, match="bubblewrap"):
        TextSearch(Workspace(tmp_path), SearchConfig(rg=rg, bwrap=None))
    bwrap = needs(shutil.which("bwrap"), "bubblewrap")
    auto = Confinement.prepare(bwrap=bwrap, program=rg, trial_dir=tmp_path, mechanism="auto")
    assert auto.mechanism == "bubblewrap"
    with pytest.raises(ConfigurationError, match="unknown confinement"):
        Confinement.prepare(bwrap=bwrap, program=rg, trial_dir=tmp_path, mechanism="x")  # type: ignore[arg-type]


def test_a_thread_that_cannot_take_the_rules_on_fails_the_trial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rg = needs(RG, "ripgrep")

    def refuse(*_args: object) -> None:
        raise OSError(1, "landlock_restrict_self: Operation not permitted")

    monkeypatch.setattr(_sandbox_landlock, "_take_on", refuse)
    with pytest.raises(ConfigurationError, match="cannot be confined"):
        Confinement.prepare(bwrap=None, program=rg, trial_dir=tmp_path, mechanism="landlock")


async def test_a_search_whose_thread_cannot_take_the_rules_on_fails_and_runs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rg = needs(RG, "ripgrep")
    (tmp_path / "a.txt").write_text("hit\n")
    search = TextSearch(Workspace(tmp_path), SearchConfig(rg=rg, confinement="landlock"))
    # A new root inode needs a new thread; this one cannot be restricted.
    calls: list[object] = []

    def refuse(*args: object) -> None:
        calls.append(args)
        raise OSError(1, "landlock_restrict_self: Operation not permitted")

    monkeypatch.setattr(_sandbox_landlock, "_take_on", refuse)

    def replace_root() -> None:
        tmp_path.rename(tmp_path.with_name(tmp_path.name + "-old"))
        tmp_path.mkdir()
        (tmp_path / "a.txt").write_text("hit\n")

    await asyncio.to_thread(replace_root)
    with pytest.raises(ToolFailed):
        await search.search("hit")
    assert len(calls) == 1


async def test_a_root_replaced_between_searches_is_searched_anew(tmp_path: Path) -> None:
    rg = needs(RG, "ripgrep")
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("first hit\n")
    search = TextSearch(Workspace(root), SearchConfig(rg=rg, confinement="landlock"))
    assert [m.text for m in (await search.search("hit")).matches] == ["first hit"]
    root.rename(tmp_path / "old")
    root.mkdir()
    (root / "b.txt").write_text("second hit\n")
    result = await search.search("hit")
    assert [(m.path, m.text) for m in result.matches] == [("b.txt", "second hit")]


async def test_cancelling_a_landlocked_program_kills_everything_it_started(
    tmp_path: Path,
) -> None:
    bash = needs(BASH, "bash")
    visible = tmp_path / "visible"
    visible.mkdir()
    os.mkfifo(visible / "ready")
    confinement = Confinement.prepare(
        bwrap=None, program=bash, trial_dir=visible, mechanism="landlock"
    )
    # It says its pid on stdout (it may not write the FIFO: no rule lets it), then
    # opens the FIFO to read, which blocks for ever (no writer ever comes).
    script = "echo $$; read -r line < ready"
    said: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def take(lines: list[Line]) -> bool:
        for line in lines:
            if isinstance(line, bytes) and not said.done():
                said.set_result(int(line))
        return False

    launch = confinement.launch(visible, [bash, "-c", script])
    run = asyncio.ensure_future(
        _rg_process.run(
            launch.argv,
            cwd=visible,
            take=take,
            deadline=asyncio.get_running_loop().time() + 600,
            start_on=launch.start_on,
        ),
    )
    pid = await asyncio.wait_for(said, 30)
    assert await asyncio.to_thread(_alive, pid)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    for _ in range(3000):
        if not await asyncio.to_thread(_alive, pid):
            break
        await asyncio.sleep(0.01)
    assert not await asyncio.to_thread(_alive, pid)


def _alive(pid: int) -> bool:
    """Whether `pid` exists and has not ended (a zombie has ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
