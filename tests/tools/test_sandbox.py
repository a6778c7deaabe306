"""The command sandbox with real processes: bubblewrap where present, and without it.

Every run here is a real program (sh, coreutils, python3) in a real workspace copy.
Tests that need bubblewrap skip with a reason where it cannot run, except under
CI=true, where they fail: CI must have it.
"""

from __future__ import annotations

import asyncio
import os
import resource
import shutil
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from handrail.errors import ConfigurationError
from handrail.shaping.excerpt import ExcerptLimits
from handrail.tools import _sandbox_bwrap, _sandbox_cgroup, _sandbox_host
from handrail.tools import sandbox as sandbox_module
from handrail.tools._sandbox_cgroup import CgroupSite, RunCgroups, find_sites
from handrail.tools._sandbox_files import copy_tree, remove_tree, workspace_changes
from handrail.tools._sandbox_host import Host, read_text
from handrail.tools._sandbox_identity import as_user
from handrail.tools._sandbox_launch import rlimits
from handrail.tools._sandbox_process import Budget, Output, Pipe, _resolve, ended
from handrail.tools.sandbox import (
    ISOLATION,
    KillReason,
    LeftOut,
    Protection,
    Sandbox,
    SandboxConfig,
    SandboxLimits,
    SandboxResult,
    SandboxUnavailableError,
    SandboxUser,
    _kernel_kill,
)

pytestmark = pytest.mark.anyio

ROOT = os.geteuid() == 0
SANDBOX_UID = 65534 if ROOT else os.getuid()
SANDBOX_GID = 65534 if ROOT else os.getgid()
MODES = ["bwrap", "plain"]

Make = Callable[..., Sandbox]
Run = Callable[..., Awaitable[SandboxResult]]


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; CI must provide it")
    pytest.skip(reason)


async def _isolating(sandbox: Sandbox) -> Sandbox:
    if shutil.which("bwrap") is None:
        _unavailable("bubblewrap (bwrap) is not installed")
    if ROOT and shutil.which("setpriv", path="/usr/bin:/usr/sbin") is None:
        _unavailable("setpriv is not installed, so root cannot drop privileges")
    if Protection.NAMESPACES not in await sandbox.protections():
        _unavailable(f"bubblewrap cannot run here: {sandbox.problem}")
    return sandbox


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "a.txt").write_text("alpha\n")
    (root / "c.txt").write_text("gamma\n")
    (root / "sub").mkdir()
    (root / "sub" / "b.txt").write_text("beta\n")
    return root


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


@pytest.fixture
def make(workspace: Path, tmp_path: Path) -> Make:
    def build(*, bwrap: bool = True, **options: Any) -> Sandbox:
        limits = options.pop("limits", SandboxLimits(timeout_seconds=30))
        scratch = tmp_path / "scratch"
        scratch.mkdir(exist_ok=True)
        config = SandboxConfig(
            workspace=options.pop("workspace", workspace),
            use_bubblewrap=bwrap,
            limits=limits,
            scratch_dir=scratch,
            **options,
        )
        return Sandbox(config)

    return build


@pytest.fixture
def run(make: Make, mode: str, tmp_path: Path) -> Run:
    """Run a command in the parametrized mode; checks the run left nothing behind."""

    async def go(argv: list[str], **options: Any) -> SandboxResult:
        run_options = {k: options.pop(k) for k in ("timeout", "collect_changes") if k in options}
        sandbox = make(bwrap=mode == "bwrap", **options)
        if mode == "bwrap":
            await _isolating(sandbox)
        result = await sandbox.run(argv, **run_options)
        assert list((tmp_path / "scratch").iterdir()) == []
        return result

    return go


# --- basic runs ------------------------------------------------------------------------------


async def test_a_command_runs_in_a_copy_of_the_workspace_and_reports_its_exit_code(
    run: Run,
    workspace: Path,
    mode: str,
) -> None:
    result = await run(["sh", "-c", "cat a.txt sub/b.txt; pwd; echo oops >&2; exit 3"])
    assert result.exit_code == 3
    assert result.signal is None
    assert not result.succeeded
    assert result.killed_for is None
    assert not result.timed_out
    lines = result.stdout.text.splitlines()
    assert lines[:2] == ["alpha", "beta"]
    cwd = Path(lines[2])
    assert cwd.name == "workspace"
    assert cwd != workspace
    if mode == "bwrap":
        assert lines[2] == "/workspace"
        assert result.isolated
    assert result.stderr.text == "oops\n"
    assert result.stdout_bytes == len(result.stdout.text.encode())
    assert result.stderr_bytes == 5
    assert result.duration >= 0
    assert result.argv == ("sh", "-c", "cat a.txt sub/b.txt; pwd; echo oops >&2; exit 3")


@pytest.mark.parametrize("code", [0, 1, 2, 127, 255])
async def test_the_exit_code_is_the_commands_own(run: Run, code: int) -> None:
    result = await run(["sh", "-c", f"exit {code}"])
    assert result.exit_code == code
    assert result.succeeded is (code == 0)


async def test_arguments_reach_the_program_verbatim_and_no_shell_reads_them(run: Run) -> None:
    hostile = ["$(id)", "`id`", "; echo pwned", "&& true", "*", "$HOME", "a\nb", "--help"]
    result = await run(["printf", "%s|", *hostile])
    assert result.stdout.text == "".join(f"{arg}|" for arg in hostile)


async def test_the_environment_is_clean_and_no_host_variable_leaks(
    run: Run,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HANDRAIL_CANARY", "canary-4f1d")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "canary-secret")
    result = await run(["env"], env={"EXTRA": "fixed"})
    assert result.exit_code == 0
    assert "canary" not in result.stdout.text
    names = {line.split("=", 1)[0] for line in result.stdout.text.splitlines()}
    assert names - {"PWD"} == {"PATH", "HOME", "TMPDIR", "LANG", "USER", "LOGNAME", "EXTRA"}
    assert "LANG=C.UTF-8" in result.stdout.text.splitlines()


async def test_the_command_runs_as_the_unprivileged_user_with_no_capabilities(run: Run) -> None:
    result = await run(
        ["sh", "-c", "id -u; id -g; id -G; grep -E '^Cap(Eff|Prm)' /proc/self/status"]
    )
    lines = result.stdout.text.splitlines()
    assert lines[:2] == [str(SANDBOX_UID), str(SANDBOX_GID)]
    if ROOT:  # root's supplementary groups are all dropped
        assert lines[2] == str(SANDBOX_GID)
    assert all(line.split()[1] == "0000000000000000" for line in lines[3:5])
    assert Protection.UNPRIVILEGED_USER in result.protections


async def test_the_copy_is_writable_the_original_stays_and_changes_are_reported(
    run: Run,
    workspace: Path,
) -> None:
    script = "echo changed > a.txt && echo new > new.txt && rm c.txt && mkdir d && ln -s a.txt d/l"
    result = await run(["sh", "-c", script], collect_changes=True)
    assert result.exit_code == 0, result.stderr.text
    assert (workspace / "a.txt").read_text() == "alpha\n"
    assert (workspace / "c.txt").read_text() == "gamma\n"
    assert not (workspace / "new.txt").exists()
    assert result.changes is not None
    assert result.changes.added == ("d", "d/l", "new.txt")
    assert result.changes.modified == ("a.txt",)
    assert result.changes.deleted == ("c.txt",)
    assert not result.changes.truncated


async def test_without_being_asked_no_changes_are_collected(run: Run) -> None:
    result = await run(["sh", "-c", "echo x > a.txt"])
    assert result.changes is None


async def test_stdout_and_stderr_are_kept_as_excerpts_with_exact_totals(run: Run) -> None:
    script = "seq 1 20000; seq 1 5 >&2"
    limits = ExcerptLimits(max_chars=2_000, head_lines=5, tail_lines=5)
    result = await run(["sh", "-c", script], output=limits)
    expected = "".join(f"{n}\n" for n in range(1, 20001))
    assert result.stdout_bytes == len(expected)
    assert result.stdout.total_lines == 20000
    assert result.stdout.truncated
    assert result.stdout.text.startswith("1\n2\n3\n4\n5\n[... 19990 lines")
    assert result.stdout.text.endswith("19999\n20000\n")
    assert len(result.stdout.text) <= 2_000
    assert result.stderr.text == "1\n2\n3\n4\n5\n"
    assert not result.stderr.truncated


async def test_output_that_is_not_utf8_is_read_with_replacement_characters(run: Run) -> None:
    result = await run(["printf", "ok \\377\\376 end\\n"])
    assert result.stdout.text == "ok \ufffd\ufffd end\n"
    assert result.stdout_bytes == 10


async def test_failing_test_names_and_failure_lines_are_found_in_the_output(run: Run) -> None:
    script = "echo '..F'; echo 'FAILED tests/test_x.py::test_y - assert 1 == 2'; exit 1"
    result = await run(["sh", "-c", script])
    assert result.stdout.failed_tests == ("tests/test_x.py::test_y",)
    assert result.stdout.failures == ("L2: FAILED tests/test_x.py::test_y - assert 1 == 2",)


async def test_a_program_that_does_not_exist_fails_like_a_shell_says(run: Run, mode: str) -> None:
    result = await run(["/nonexistent/program", "x"])
    assert result.exit_code not in {None, 0}
    if mode == "plain":
        assert result.exit_code == 127
        assert "cannot execute '/nonexistent/program'" in result.stderr.text
        assert result.stderr_bytes == len(result.stderr.text)


async def test_concurrent_runs_each_get_their_own_copy(make: Make, mode: str) -> None:
    sandbox = make(bwrap=mode == "bwrap")
    if mode == "bwrap":
        await _isolating(sandbox)
    script = 'echo "$0" > mine.txt; sleep 0.2; cat mine.txt'
    results = await asyncio.gather(
        *(sandbox.run(["sh", "-c", script, f"run{i}"]) for i in range(4))
    )
    assert [r.stdout.text for r in results] == [f"run{i}\n" for i in range(4)]


async def test_the_copy_leaves_out_ignored_names_and_special_files(
    run: Run,
    workspace: Path,
) -> None:
    (workspace / ".venv").mkdir()
    (workspace / ".venv" / "big").write_text("x")
    os.mkfifo(workspace / "pipe")  # copying it would block on open
    (workspace / "link").symlink_to("/etc/hostname")
    result = await run(["sh", "-c", "ls -A; readlink link"], copy_ignore=(".venv",))
    assert result.stdout.text.split() == ["a.txt", "c.txt", "link", "sub", "/etc/hostname"]


async def test_a_cpu_bound_command_is_stopped_by_the_cpu_limit(run: Run) -> None:
    limits = SandboxLimits(timeout_seconds=60, cpu_seconds=1)
    result = await run(["python3", "-c", "while True: pass"], limits=limits)
    assert result.killed_for is KillReason.CPU
    assert not result.timed_out


async def test_a_timeout_given_to_run_overrides_the_configured_one(run: Run) -> None:
    result = await run(["sleep", "30"], timeout=0.5)
    assert result.timed_out
    assert result.killed_for is KillReason.TIMEOUT
    assert result.exit_code is None
    assert result.signal == signal.SIGKILL


async def test_large_files_are_refused_by_the_file_size_limit(run: Run) -> None:
    limits = SandboxLimits(timeout_seconds=30, file_size_bytes=4096)
    code = "open('big', 'wb').write(b'x' * 100_000)"
    result = await run(["python3", "-c", code], limits=limits)
    assert result.exit_code == 1
    assert "File too large" in result.stderr.text


async def test_open_files_are_bounded(run: Run) -> None:
    limits = SandboxLimits(timeout_seconds=30, open_files=32)
    code = "import os\nfds = []\ntry:\n    while True: fds.append(os.open('a.txt', 0))\n"
    code += "except OSError as e: print(len(fds), e.errno)"
    result = await run(["python3", "-c", code], limits=limits)
    count, errno = result.stdout.text.split()
    assert int(count) < 32
    assert errno == "24"  # EMFILE


# --- isolation ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["bwrap"], indirect=True)
async def test_host_files_are_out_of_sight_under_bubblewrap(run: Run, tmp_path: Path) -> None:
    canary = tmp_path / "canary.txt"
    canary.write_text("host secret")
    script = (
        f"test -e {canary} && echo canary-visible; ls -A /tmp; ls -A / | tr '\\n' ' '; echo;"
        " cat /etc/passwd; test -e /etc/shadow && echo shadow-visible; hostname"
    )
    result = await run(["sh", "-c", script])
    lines = result.stdout.text.splitlines()
    assert "canary-visible" not in lines
    assert "shadow-visible" not in lines
    assert set(lines[0].split()) <= {
        "bin",
        "dev",
        "etc",
        "lib",
        "lib64",
        "proc",
        "tmp",
        "usr",
        "workspace",
        "sbin",
        "lib32",
        "libx32",
    }
    assert not {"root", "home", "var", "work", "run", "opt"} & set(lines[0].split())
    assert lines[1:3] == [
        f"sandbox:x:{SANDBOX_UID}:{SANDBOX_GID}:sandbox:/tmp:/usr/sbin/nologin",
        "sandbox",
    ]
    assert result.protections >= ISOLATION
    assert result.missing == frozenset()


@pytest.mark.parametrize("mode", ["bwrap"], indirect=True)
async def test_the_command_sees_only_its_own_processes(run: Run) -> None:
    result = await run(["sh", "-c", "ls /proc | grep -E '^[0-9]+$' | wc -l"])
    assert int(result.stdout.text) <= 5  # bubblewrap's init, sh, ls, grep, wc


@pytest.mark.parametrize("mode", ["bwrap"], indirect=True)
async def test_configured_read_only_paths_are_visible_and_read_only(
    run: Run,
    tmp_path: Path,
) -> None:
    tool = tmp_path / "toolchain"
    tool.mkdir()
    (tool / "version").write_text("1.2\n")
    script = f"cat {tool}/version; touch {tool}/x && echo wrote; touch /usr/x && echo wrote-usr"
    result = await run(["sh", "-c", script], read_only_paths=(tool,))
    assert result.stdout.text == "1.2\n"
    assert "Read-only file system" in result.stderr.text
    assert not (tool / "x").exists()


@pytest.mark.parametrize("mode", ["bwrap"], indirect=True)
async def test_the_sandbox_tmp_is_writable_and_private(run: Run) -> None:
    result = await run(["sh", "-c", "echo x > /tmp/f && cat /tmp/f && echo $HOME"])
    assert result.stdout.text == "x\n/tmp\n"


@pytest.mark.parametrize("mode", ["bwrap"], indirect=True)
async def test_the_sandbox_tmp_is_bounded_in_size(run: Run) -> None:
    limits = SandboxLimits(timeout_seconds=30, tmp_bytes=1 << 20)
    code = "try:\n    open('/tmp/big', 'wb').write(b'x' * (2 << 20))\nexcept OSError as e:"
    code += "\n    print(e.errno)"
    result = await run(["python3", "-c", code], limits=limits)
    assert result.stdout.text == "28\n"  # ENOSPC


async def test_without_bubblewrap_the_lost_protections_are_listed(make: Make) -> None:
    sandbox = make(bwrap=False)
    protections = await sandbox.protections()
    assert not ISOLATION & protections
    lost = ISOLATION | {Protection.DISK_LIMIT}  # the quota is bubblewrap's tmpfs
    assert await sandbox.missing() == lost
    assert sandbox.problem == "bubblewrap is turned off in the configuration"
    result = await sandbox.run(["true"])
    assert result.missing == lost
    assert not result.isolated
    assert result.succeeded


async def test_a_bubblewrap_that_cannot_run_is_reported_and_the_run_goes_on_unisolated(
    make: Make,
) -> None:
    sandbox = make(bwrap_path=Path("/usr/bin/false"))
    result = await sandbox.run(["true"])
    assert result.succeeded
    assert result.missing >= ISOLATION
    assert sandbox.problem == "bubblewrap cannot isolate commands here: failed"


async def test_a_missing_bubblewrap_program_is_reported(make: Make, tmp_path: Path) -> None:
    sandbox = make(bwrap_path=tmp_path / "no-bwrap")
    assert not ISOLATION & await sandbox.protections()
    assert sandbox.problem is not None
    assert sandbox.problem.startswith("bubblewrap cannot be started")


async def test_a_bubblewrap_that_says_why_it_fails_is_quoted_for_operators(
    make: Make,
    tmp_path: Path,
) -> None:
    fake = tmp_path / "fake-bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    sandbox = make(bwrap_path=fake)
    await sandbox.protections()
    assert sandbox.problem == (
        "bubblewrap cannot isolate commands here: bwrap: No permissions to create new namespace"
    )


async def test_with_isolation_required_a_host_without_it_refuses_to_run(
    make: Make,
    tmp_path: Path,
) -> None:
    sandbox = make(bwrap_path=tmp_path / "no-bwrap", require_isolation=True)
    with pytest.raises(SandboxUnavailableError):
        await sandbox.run(["true"])
    assert list((tmp_path / "scratch").iterdir()) == []


async def test_isolation_required_and_available_runs(make: Make) -> None:
    sandbox = await _isolating(make(require_isolation=True))
    assert (await sandbox.run(["true"])).isolated


async def test_bubblewrap_is_looked_up_on_path_when_no_path_is_configured(
    make: Make,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    sandbox = make()
    assert Protection.NAMESPACES not in await sandbox.protections()
    assert sandbox.problem == "bubblewrap (bwrap) is not installed"


@pytest.mark.skipif(not ROOT, reason="only root switches users")
async def test_root_without_setpriv_does_not_use_bubblewrap(
    make: Make,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = shutil.which

    def which(name: str, mode: int = os.F_OK | os.X_OK, path: str | None = None) -> str | None:
        return None if name == "setpriv" else real(name, mode, path)

    monkeypatch.setattr(shutil, "which", which)
    sandbox = make()
    assert Protection.NAMESPACES not in await sandbox.protections()
    assert sandbox.problem == "setpriv is not installed, so root cannot drop privileges"


@pytest.mark.skipif(not ROOT, reason="only root can choose to stay root")
async def test_root_may_be_kept_explicitly_and_then_the_lost_protection_is_listed(
    make: Make,
    mode: str,
) -> None:
    sandbox = make(bwrap=mode == "bwrap", user=None, cgroups=False)
    if mode == "bwrap":
        await _isolating(sandbox)
    result = await sandbox.run(["id", "-u"])
    assert result.stdout.text == "0\n"
    assert Protection.UNPRIVILEGED_USER in result.missing
    assert Protection.PROCESS_LIMIT in result.missing  # RLIMIT_NPROC does not bind root


async def test_turned_off_limits_are_neither_in_force_nor_missing(make: Make) -> None:
    limits = SandboxLimits(
        cpu_seconds=None,
        memory_bytes=None,
        address_space_bytes=None,
        max_processes=None,
        file_size_bytes=None,
        open_files=None,
        max_output_bytes=None,
        disk_bytes=None,
    )
    sandbox = make(bwrap=False, limits=limits)
    result = await sandbox.run(["sh", "-c", "ulimit -t; ulimit -v; ulimit -f"])
    assert result.stdout.text.split() == ["unlimited"] * 3
    always = {Protection.WORKSPACE_COPY, Protection.CLEAN_ENVIRONMENT, Protection.WALL_TIMEOUT}
    assert result.protections - {Protection.UNPRIVILEGED_USER} == always
    assert result.missing == ISOLATION


@pytest.mark.skipif(not ROOT, reason="RLIMIT_NPROC binds only a user of its own, as root drops")
async def test_without_control_groups_the_users_process_limit_bounds_the_tree(
    make: Make,
) -> None:
    sandbox = await _isolating(
        make(cgroups=False, limits=SandboxLimits(timeout_seconds=30, max_processes=64)),
    )
    result = await sandbox.run(["grep", "Max processes", "/proc/self/limits"])
    assert result.stdout.text.split()[2:4] == ["64", "64"]
    assert Protection.PROCESS_LIMIT in result.protections
    assert Protection.MEMORY_LIMIT in result.missing


async def test_with_a_pids_group_the_users_process_limit_is_left_alone(make: Make) -> None:
    sandbox = make(bwrap=False)
    host = await sandbox._host()
    if _sandbox_cgroup.PIDS not in host.sites:
        _unavailable("no writable pids control group on this host")
    result = await sandbox.run(
        ["sh", "-c", "grep 'Max processes' /proc/self/limits; cat /proc/self/cgroup"]
    )
    first, *groups = result.stdout.text.splitlines()
    soft = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    assert first.split()[2] == ("unlimited" if soft == resource.RLIM_INFINITY else str(soft))
    assert any(":pids:" in line and "handrail-sandbox-" in line for line in groups)
    assert Protection.PROCESS_LIMIT in result.protections


# --- configuration -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [[], "ls -la", b"ls", [""], ["ls", "a\0b"], ["ls", 3]],
)
async def test_a_command_is_a_non_empty_vector_of_strings(make: Make, argv: Any) -> None:
    with pytest.raises(ConfigurationError):
        await make(bwrap=False).run(argv)


@pytest.mark.parametrize("timeout", [0, -1.0, float("nan")])
async def test_a_timeout_must_be_positive(make: Make, timeout: float) -> None:
    with pytest.raises(ConfigurationError):
        await make(bwrap=False).run(["true"], timeout=timeout)


@pytest.mark.parametrize(
    "options",
    [
        {"timeout_seconds": 0},
        {"cpu_seconds": 0},
        {"memory_bytes": -1},
        {"max_processes": 0},
        {"tmp_bytes": 0},
        {"max_output_bytes": 0},
    ],
)
def test_limits_must_be_positive(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        SandboxLimits(**options)


@pytest.mark.parametrize(("uid", "gid"), [(0, 100), (100, 0)])
def test_the_sandbox_user_is_never_root(uid: int, gid: int) -> None:
    with pytest.raises(ConfigurationError):
        SandboxUser(uid=uid, gid=gid)


@pytest.mark.parametrize(
    "options",
    [
        {"workspace": Path("relative")},
        {"env": {"": "x"}},
        {"env": {"1X": "x"}},
        {"env": {"A-B": "x"}},
        {"env": {"A": "x\0y"}},
        {"read_only_paths": (Path("relative"),)},
        {"read_only_paths": (Path("/"),)},
        {"read_only_paths": (Path("/usr"),)},
        {"read_only_paths": (Path("/usr/lib/x"),)},
        {"read_only_paths": (Path("/workspace/x"),)},
        {"read_only_paths": (Path("/proc/1"),)},
        {"read_only_paths": (Path("/tmp"),)},  # noqa: S108 - a path inside the sandbox
        {"read_only_paths": (Path("/opt/../etc"),)},
        {"path": "/bin\0"},
    ],
)
def test_a_bad_configuration_is_refused(options: dict[str, Any]) -> None:
    options.setdefault("workspace", Path("/srv"))
    with pytest.raises(ConfigurationError):
        SandboxConfig(**options)


def test_read_only_paths_under_etc_and_tmp_are_allowed() -> None:
    inside_tmp = Path("/tmp/tools")  # noqa: S108 - a path inside the sandbox
    config = SandboxConfig(
        workspace=Path("/srv"),
        read_only_paths=[Path("/etc/ssl/certs"), inside_tmp],  # type: ignore[arg-type]
        env={"A": "1"},
    )
    assert config.read_only_paths == (Path("/etc/ssl/certs"), inside_tmp)
    assert dict(config.env) == {"A": "1"}


def test_the_workspace_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError):
        Sandbox(SandboxConfig(workspace=tmp_path / "missing"))


def test_the_sandbox_exposes_its_configuration(make: Make, workspace: Path) -> None:
    sandbox = make(bwrap=False)
    assert sandbox.config.workspace == workspace
    assert sandbox.problem is None  # nothing probed yet


# --- pieces ------------------------------------------------------------------------------


def test_the_bubblewrap_command_line_binds_only_what_it_needs(tmp_path: Path) -> None:
    layout = _sandbox_bwrap.BwrapLayout(
        bwrap="/usr/bin/bwrap",
        etc_dir=tmp_path / "etc",
        read_only=[PurePosixPath("/opt/py/venv"), PurePosixPath("/opt/py/base")],
        env={"PATH": "/usr/bin"},
        tmp_bytes=1024,
        disk_bytes=4096,
        hold=_sandbox_bwrap.HoldFds(info=5, block=6),
        switch=_sandbox_bwrap.UserSwitch(setpriv="/usr/bin/setpriv", uid=7, gid=8),
    )
    argv = _sandbox_bwrap.bwrap_argv(layout, ["--not-a-flag", "x"])
    assert argv[0] == "/usr/bin/bwrap"
    for flag in ("--unshare-net", "--unshare-pid", "--die-with-parent", "--new-session"):
        assert flag in argv
    assert argv.index("--clearenv") < argv.index("--setenv")
    assert "--bind" not in argv  # nothing of the host is writable
    mounts = [argv[i - 2 : i + 2] for i, a in enumerate(argv) if a == "--tmpfs"]
    assert mounts == [
        ["--size", "1024", "--tmpfs", "/tmp"],  # noqa: S108 - inside the sandbox
        ["--size", "4096", "--tmpfs", "/workspace"],
    ]
    assert argv[argv.index("--info-fd") + 1] == "5"
    assert argv[argv.index("--block-fd") + 1] == "6"
    assert argv.index("--tmpfs") < argv.index("--ro-bind", argv.index("--dir"))
    made = [argv[i + 1] for i, a in enumerate(argv) if a == "--dir"]
    assert made == ["/etc", "/opt", "/opt/py"]  # parents once, before their binds
    tail = argv[argv.index("--cap-add") :]
    assert tail == [
        "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--",
        "/usr/bin/setpriv", "--reuid=7", "--regid=8", "--clear-groups", "--inh-caps=-all",
        "--", "--not-a-flag", "x",
    ]  # fmt: skip
    assert "/home" not in argv
    assert "/root" not in argv


def test_without_a_user_switch_the_command_follows_the_separator() -> None:
    argv = _sandbox_bwrap.probe_argv("/usr/bin/bwrap", None)
    assert argv[-2:] == ["--", "true"]
    assert "--cap-add" not in argv
    assert "--info-fd" not in argv


def test_a_workspace_without_a_quota_is_a_tmpfs_of_the_kernels_default_size() -> None:
    hold = _sandbox_bwrap.HoldFds(info=5, block=6)
    assert _sandbox_bwrap._workspace(None, hold) == [
        "--perms", "0700", "--tmpfs", "/workspace", "--info-fd", "5", "--block-fd", "6",
    ]  # fmt: skip


def test_rlimits_never_rise_above_the_hosts_hard_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    real = resource.getrlimit

    def getrlimit(kind: int) -> tuple[int, int]:
        return (10, 20) if kind == resource.RLIMIT_NOFILE else real(kind)

    monkeypatch.setattr(resource, "getrlimit", getrlimit)
    chosen = dict(rlimits(SandboxLimits(open_files=1024, cpu_seconds=5), nproc=False))
    assert chosen[resource.RLIMIT_NOFILE] == (20, 20)
    assert chosen[resource.RLIMIT_CPU] == (5, 6)
    assert chosen[resource.RLIMIT_CORE] == (0, 0)
    assert resource.RLIMIT_NPROC not in chosen


def test_the_output_budget_counts_everything_and_keeps_what_fits() -> None:
    budget = Budget(10)
    assert budget.take(6) == 6
    assert not budget.exceeded.is_set()
    assert budget.take(6) == 4
    assert budget.exceeded.is_set()
    assert budget.take(5) == 0
    assert budget.total == 17
    assert Budget(None).take(10**9) == 10**9


@given(
    sizes=st.lists(st.integers(min_value=0, max_value=1000), max_size=20), cap=st.integers(1, 5000)
)
def test_the_output_budget_keeps_exactly_the_first_cap_bytes(sizes: list[int], cap: int) -> None:
    budget = Budget(cap)
    kept = sum(budget.take(size) for size in sizes)
    assert kept == min(cap, sum(sizes))
    assert budget.exceeded.is_set() is (sum(sizes) > cap)


def test_a_kill_by_the_kernel_is_named_from_the_signal() -> None:
    host = Host(
        bwrap="/usr/bin/bwrap", problem=None, switch=None, drop=None, unprivileged=True, sites={}
    )
    plain = Host(bwrap=None, problem="off", switch=None, drop=None, unprivileged=True, sites={})
    xcpu = int(signal.SIGXCPU)
    assert _kernel_kill(None, host, 128 + xcpu, None) is KillReason.CPU
    assert _kernel_kill(None, plain, 128 + xcpu, None) is None
    assert _kernel_kill(None, plain, None, xcpu) is KillReason.CPU
    assert _kernel_kill(None, host, 1, None) is None
    assert _kernel_kill(None, host, None, int(signal.SIGKILL)) is None
    assert _kernel_kill(None, host, 1, None, full=True) is KillReason.DISK


# --- control groups ----------------------------------------------------------------------


def _fake_group(directory: Path, *files: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("cgroup.procs", *files):
        (directory / name).write_text("")
    return directory


def test_control_group_sites_are_found_from_mounts_and_own_groups(tmp_path: Path) -> None:
    pids = _fake_group(tmp_path / "pids" / "me")
    memory = _fake_group(tmp_path / "mem")
    unified = _fake_group(tmp_path / "unified" / "svc", "cgroup.subtree_control")
    (unified / "cgroup.subtree_control").write_text("cpu pids memory\n")
    mounts = "\n".join(
        [
            f"cgroup {tmp_path}/pids cgroup rw,nosuid,pids 0 0",
            f"cgroup {tmp_path}/mem cgroup rw,memory 0 0",
            f"cgroup2 {tmp_path}/unified cgroup2 rw 0 0",
            "proc /proc proc rw 0 0",
            "short line",
        ],
    )
    own = "8:pids:/me\n4:memory:/\n0::/svc\n"
    sites = find_sites(mounts, own)
    assert sites["pids"] == CgroupSite(controller="pids", version=1, parent=pids)
    assert sites["memory"] == CgroupSite(controller="memory", version=1, parent=memory)
    only_v2 = find_sites(f"cgroup2 {tmp_path}/unified cgroup2 rw 0 0", own)
    assert only_v2 == {
        "pids": CgroupSite(controller="pids", version=2, parent=unified),
        "memory": CgroupSite(controller="memory", version=2, parent=unified),
    }


def test_a_delegated_v2_parent_is_used_and_controllers_it_lacks_are_not(tmp_path: Path) -> None:
    delegated = _fake_group(tmp_path / "delegated", "cgroup.subtree_control")
    (delegated / "cgroup.subtree_control").write_text("pids\n")
    sites = find_sites("", "", parent_v2=delegated)
    assert sites == {"pids": CgroupSite(controller="pids", version=2, parent=delegated)}


def test_groups_that_cannot_be_written_are_not_sites(tmp_path: Path) -> None:
    mounts = f"cgroup {tmp_path}/nowhere cgroup rw,pids 0 0\ncgroup2 {tmp_path}/none cgroup2 rw 0 0"
    assert find_sites(mounts, "3:pids:/\n0::/\n") == {}
    assert find_sites(mounts, "") == {}


def test_mount_points_with_spaces_are_unescaped(tmp_path: Path) -> None:
    group = _fake_group(tmp_path / "a b")
    sites = find_sites(f"cgroup {tmp_path}/a\\040b cgroup rw,pids 0 0", "1:pids:/")
    assert sites["pids"].parent == group


def test_run_groups_write_their_limits_in_each_version(tmp_path: Path) -> None:
    v1_pids = CgroupSite(controller="pids", version=1, parent=tmp_path / "v1p")
    v1_mem = CgroupSite(controller="memory", version=1, parent=tmp_path / "v1m")
    v2 = tmp_path / "v2"
    for directory in (v1_pids.parent, v1_mem.parent, v2):
        directory.mkdir()
    groups = RunCgroups.create(
        {"pids": v1_pids, "memory": v1_mem}, "run1", max_pids=7, memory_bytes=4096
    )
    assert groups.controllers == {"pids", "memory"}
    assert (tmp_path / "v1p" / "run1" / "pids.max").read_text() == "7"
    assert (tmp_path / "v1m" / "run1" / "memory.limit_in_bytes").read_text() == "4096"
    assert set(groups.procs_files) == {
        str(tmp_path / "v1p" / "run1" / "cgroup.procs"),
        str(tmp_path / "v1m" / "run1" / "cgroup.procs"),
    }
    assert groups.members() == set()
    (tmp_path / "v1m" / "run1" / "memory.oom_control").write_text(
        "oom_kill_disable 0\noom_kill 2\n"
    )
    assert groups.oom_killed()
    sites = {c: CgroupSite(controller=c, version=2, parent=v2) for c in ("pids", "memory")}
    unified = RunCgroups.create(sites, "run2", max_pids=None, memory_bytes=100)
    assert unified.controllers == {"memory"}
    assert (v2 / "run2" / "memory.max").read_text() == "100"
    assert (v2 / "run2" / "memory.swap.max").read_text() == "0"
    assert not unified.oom_killed()
    (v2 / "run2" / "memory.events").write_text("low 0\noom 1\noom_kill 0\n")
    assert not unified.oom_killed()
    assert not RunCgroups.create(sites, "run3", max_pids=1, memory_bytes=None).oom_killed()


def test_a_group_whose_limit_cannot_be_written_is_given_up(tmp_path: Path) -> None:
    site = CgroupSite(controller="pids", version=1, parent=tmp_path / "p")
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "run" / "pids.max").mkdir(parents=True)  # writing it fails
    groups = RunCgroups.create({"pids": site}, "run", max_pids=5, memory_bytes=None)
    assert groups.controllers == frozenset()
    assert not (tmp_path / "p" / "run").exists() or (tmp_path / "p" / "run" / "pids.max").is_dir()
    mem = CgroupSite(controller="memory", version=1, parent=tmp_path / "m")
    (tmp_path / "m" / "run" / "memory.limit_in_bytes").mkdir(parents=True)
    assert RunCgroups.create({"memory": mem}, "run", max_pids=None, memory_bytes=5).controllers == (
        frozenset()
    )


def test_a_group_that_cannot_be_made_is_skipped(tmp_path: Path) -> None:
    site = CgroupSite(controller="pids", version=1, parent=tmp_path / "missing")
    assert RunCgroups.create({"pids": site}, "run", max_pids=5, memory_bytes=None).controllers == (
        frozenset()
    )


def test_a_group_that_will_not_go_away_is_reported(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_sandbox_cgroup, "_KILL_ROUNDS", 2)
    site = CgroupSite(controller="pids", version=2, parent=tmp_path)
    groups = RunCgroups.create({"pids": site}, "stuck", max_pids=5, memory_bytes=None)
    (tmp_path / "stuck" / "cgroup.kill").write_text("")
    assert not groups.remove()  # a plain directory with files in it is never empty
    assert (tmp_path / "stuck" / "cgroup.kill").read_text() == "1"


async def test_real_groups_hold_the_run_and_are_removed_after_it(make: Make) -> None:
    sandbox = make(bwrap=False)
    host = await sandbox._host()
    if not host.sites:
        _unavailable("no writable control group on this host")
    before = {site.parent: set(site.parent.iterdir()) for site in host.sites.values()}
    result = await sandbox.run(["cat", "/proc/self/cgroup"])
    assert "handrail-sandbox-" in result.stdout.text
    after = {site.parent: set(site.parent.iterdir()) for site in host.sites.values()}
    assert after == before


# --- files -------------------------------------------------------------------------------


def _fd(path: Path) -> int:
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY)


async def test_a_copy_made_as_the_sandbox_user_is_owned_by_it(
    tmp_path: Path,
    workspace: Path,
) -> None:
    if not ROOT:
        pytest.skip("only root can act as another user")
    target = tmp_path / "copy"
    target.mkdir()
    os.chown(target, 65534, 65534)
    source, made = _fd(workspace), _fd(target)
    try:
        left_out = await as_user((65534, 65534), copy_tree, source, made)
    finally:
        os.close(source)
        os.close(made)
    assert left_out == LeftOut()
    owners = {p.lstat().st_uid for p in [target, *target.rglob("*")]}
    assert owners == {65534}
    assert os.geteuid() == 0  # the process itself never changed
    assert (target / "sub" / "b.txt").read_text() == "beta\n"


def test_changes_see_content_kind_and_link_target(tmp_path: Path) -> None:
    left, right = tmp_path / "l", tmp_path / "r"
    for side in (left, right):
        side.mkdir()
        (side / "ignored").mkdir()
    (left / "same").write_text("1")
    (right / "same").write_text("1")
    (left / "size").write_text("1")
    (right / "size").write_text("12")
    (left / "content").write_text("ab")
    (right / "content").write_text("ba")
    (left / "kind").write_text("x")
    (right / "kind").mkdir()
    (left / "link").symlink_to("a")
    (right / "link").symlink_to("b")
    (left / "samelink").symlink_to("a")
    (right / "samelink").symlink_to("a")
    (right / "ignored" / "new").write_text("n")
    (right / "ignored.log").write_text("n")
    fds = _fd(left), _fd(right)
    try:
        changes = workspace_changes(*fds, ignore=("ignored", "*.log"))
        many = workspace_changes(*fds, limit=1)
    finally:
        for fd in fds:
            os.close(fd)
    assert changes.modified == ("content", "kind", "link", "size")
    assert changes.added == changes.deleted == ()
    assert many.truncated
    assert len(many.modified) == 1


def test_a_tree_the_command_locked_itself_out_of_is_still_removed(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    top = tmp_path / "run"
    (top / "a" / "b").mkdir(parents=True)
    (top / "a" / "b" / "f").write_text("x")
    (top / "outside-link").symlink_to(tmp_path)
    (top / "a").chmod(0o500)
    real = shutil.rmtree
    calls: list[Path] = []

    def flaky(path: Path, *args: Any, **kwargs: Any) -> None:
        calls.append(path)
        if len(calls) == 1:  # as an unprivileged owner would see it: permission denied
            raise PermissionError(13, "Permission denied")
        real(path, *args, **kwargs)

    mode = tmp_path.stat().st_mode
    monkeypatch.setattr(shutil, "rmtree", flaky)
    remove_tree(top)
    assert not top.exists()
    assert tmp_path.stat().st_mode == mode  # never changed through the link
    remove_tree(top)  # a second removal of a missing tree does nothing
    assert len(calls) == 2


# --- failures and cleanup ------------------------------------------------------------------


async def test_a_workspace_that_vanished_fails_the_run_and_leaves_nothing_behind(
    make: Make,
    workspace: Path,
    tmp_path: Path,
) -> None:
    sandbox = make(bwrap=False)
    shutil.rmtree(workspace)
    with pytest.raises(FileNotFoundError):
        await sandbox.run(["true"])
    assert list((tmp_path / "scratch").iterdir()) == []


async def test_a_bubblewrap_that_breaks_after_its_probe_fails_the_run_loudly(
    make: Make,
    tmp_path: Path,
) -> None:
    real = shutil.which("bwrap")
    if real is None:
        _unavailable("bubblewrap (bwrap) is not installed")
        return
    fake = tmp_path / "copied-bwrap"
    shutil.copy(real, fake)
    sandbox = make(bwrap_path=fake)
    assert Protection.NAMESPACES in await sandbox.protections()  # the probe passed
    fake.chmod(0o644)
    with pytest.raises(PermissionError):
        await sandbox.run(["true"])
    assert list((tmp_path / "scratch").iterdir()) == []


async def test_a_probe_that_hangs_is_killed_and_reported(
    make: Make,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_sandbox_host, "_PROBE_TIMEOUT_S", 0.2)
    fake = tmp_path / "slow-bwrap"
    fake.write_text("#!/bin/sh\nexec sleep 600\n")
    fake.chmod(0o755)
    sandbox = make(bwrap_path=fake)
    assert Protection.NAMESPACES not in await sandbox.protections()
    assert sandbox.problem == "bubblewrap did not finish a trial run in time"


async def test_cleanup_that_fails_is_logged_for_operators(
    make: Make,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def stuck(self: RunCgroups) -> bool:
        return False

    def unremovable(path: Path) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(RunCgroups, "remove", stuck)
    monkeypatch.setattr(sandbox_module, "remove_tree", unremovable)
    with caplog.at_level("WARNING", logger="handrail.tools.sandbox"):
        result = await make(bwrap=False, cgroups=False).run(["true"])  # leaks no real group
    assert result.succeeded
    messages = [record.getMessage() for record in caplog.records]
    assert any("control groups" in message for message in messages)
    assert any("run directory" in message for message in messages)


async def test_without_pidfd_a_running_process_is_polled_until_it_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import subprocess  # noqa: PLC0415 - only these tests start bare processes

    def no_pidfd(pid: int, flags: int = 0) -> int:
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    process = await asyncio.to_thread(subprocess.Popen, ["sleep", "0.2"])
    await asyncio.wait_for(ended(process), 10)
    assert process.returncode == 0


async def test_a_pipe_reader_ignores_spurious_wakeups_and_ends_on_errors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    read_end, write_end = os.pipe()
    output = Output(ExcerptLimits())
    pipe = Pipe(asyncio.get_running_loop(), read_end, output, Budget(None))
    try:
        pipe._read()  # nothing written yet: a wakeup without data
        assert not pipe.done.done()
        os.write(write_end, b"data\n")
        pipe._read()
        assert output.bytes == 5

        def broken(fd: int, size: int) -> bytes:
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(os, "read", broken)
        pipe._read()
        assert pipe.done.done()
        pipe.close()  # closing twice is harmless
    finally:
        pipe.close()
        os.close(write_end)
    assert output.excerpt().text == "data\n"


def test_resolving_a_future_twice_keeps_the_first_result() -> None:
    loop = asyncio.new_event_loop()
    try:
        future: asyncio.Future[None] = loop.create_future()
        _resolve(future)
        _resolve(future)
        assert future.done()
    finally:
        loop.close()


def test_an_unreadable_proc_file_reads_as_empty(tmp_path: Path) -> None:
    assert read_text(str(tmp_path / "missing")) == ""


def test_top_level_directories_are_linked_or_bound_as_the_host_has_them(tmp_path: Path) -> None:
    (tmp_path / "bin").symlink_to("usr/bin")
    (tmp_path / "lib").mkdir()
    assert _sandbox_bwrap.top_level(tmp_path) == [
        "--symlink", "usr/bin", "/bin", "--ro-bind", "/lib", "/lib",
    ]  # fmt: skip


def test_a_limit_that_cannot_be_written_gives_the_group_up(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert not _sandbox_cgroup._write(tmp_path, "1")  # a directory is not a file
    real = _sandbox_cgroup._write

    def refuse_limits(path: Path, value: str) -> bool:
        return False if path.name in {"pids.max", "memory.limit_in_bytes"} else real(path, value)

    monkeypatch.setattr(_sandbox_cgroup, "_write", refuse_limits)
    (tmp_path / "p").mkdir()
    (tmp_path / "m").mkdir()
    sites = {
        "pids": CgroupSite(controller="pids", version=1, parent=tmp_path / "p"),
        "memory": CgroupSite(controller="memory", version=1, parent=tmp_path / "m"),
    }
    groups = RunCgroups.create(sites, "run", max_pids=5, memory_bytes=5)
    assert groups.controllers == frozenset()
    assert list((tmp_path / "p").iterdir()) == list((tmp_path / "m").iterdir()) == []


def test_members_that_never_leave_end_the_kill_after_a_bound(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_sandbox_cgroup, "_KILL_ROUNDS", 3)
    (tmp_path / "p").mkdir()
    site = CgroupSite(controller="pids", version=1, parent=tmp_path / "p")
    groups = RunCgroups.create({"pids": site}, "run", max_pids=5, memory_bytes=None)
    (tmp_path / "p" / "run" / "cgroup.procs").write_text("999999999\n")  # beyond pid_max
    groups.kill()
    assert groups.members() == {999999999}
    assert _sandbox_cgroup._remove_dir(tmp_path / "never-made")
