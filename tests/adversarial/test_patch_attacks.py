"""Patches and writes that try to leave the workspace, reach into .git, or lie.

The read-only previews (`preview_patch`, `preview_write`) face the same attacks and
must refuse them with the very refusal the write tools give.

Every attack goes through a real Gate to the real tools over real files. Canary files
outside the root, inside `.git` and behind links are compared byte for byte before and
after, and /etc/passwd too: a refused attack changes nothing anywhere.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from _write_tools import keyring
from handrail import (
    Envelope,
    ErrorCode,
    Gate,
    Principal,
    Registry,
    ToolCall,
    ToolSignal,
    Writes,
)
from handrail.context import ToolContext
from handrail.testing import FixedClock, MemoryStore, sequential_ids
from handrail.tools.workspace.edits import EditsConfig, edit_tools
from handrail.tools.workspace.paths import Workspace

pytestmark = pytest.mark.anyio

ALICE = Principal(
    user_id="alice",
    tenant_id="t1",
    permissions=frozenset({"workspace.write", "workspace.delete"}),
)
APP = "def main():\n    return 1\n"
GIT = shutil.which("git")


class Site:
    """A workspace beside an outside directory, with canaries everywhere."""

    def __init__(self, tmp_path: Path, *, openat2: bool | None = None, **options: Any) -> None:
        self.base = tmp_path
        self.outside = tmp_path / "outside"
        self.root = tmp_path / "ws"
        (self.outside / "sub").mkdir(parents=True)
        (self.root / "src").mkdir(parents=True)
        (self.root / ".git" / "hooks").mkdir(parents=True)
        (self.outside / "outside.txt").write_text("outside canary\n")
        (self.outside / "sub" / "x").write_text("deep canary\n")
        (self.outside / "hardtarget.txt").write_text("hard canary\n")
        (self.root / ".git" / "config").write_text("[core]\n\trepositoryformatversion = 0\n")
        (self.root / ".git" / "hooks" / "pre-commit").write_text("#!/bin/sh\nexit 0\n")
        (self.root / "src" / "app.py").write_text(APP)
        (self.root / "linkdir").symlink_to(self.outside)
        (self.root / "linkfile.txt").symlink_to(self.outside / "outside.txt")
        os.link(self.outside / "hardtarget.txt", self.root / "hard.txt")
        self.workspace = Workspace(self.root, use_openat2=openat2)
        self.config = EditsConfig(journal_dir=tmp_path / "journal", git=None, **options)
        self.tools = {t.name: t for t in edit_tools(self.workspace, self.config)}
        registry = Registry()
        for tool in self.tools.values():
            registry.register(tool)
        clock = FixedClock()
        self.writes = Writes(
            registry, MemoryStore(), keyring(), clock=clock, new_id=sequential_ids("p")
        )
        self.gate = Gate(registry, writes=self.writes, clock=clock)

    def snapshot(self) -> dict[str, object]:
        """Every file, directory and link under the test's directory, except the journal."""
        seen: dict[str, object] = {}
        for dirpath, dirnames, filenames in os.walk(self.base, followlinks=False):
            for name in dirnames + filenames:
                path = Path(dirpath) / name
                key = str(path.relative_to(self.base))
                if key.startswith("journal"):
                    continue
                if path.is_symlink():
                    seen[key] = ("link", str(path.readlink()))
                elif path.is_dir():
                    seen[key] = "dir"
                else:
                    seen[key] = path.read_bytes()
        seen["/etc/passwd"] = Path("/etc/passwd").read_bytes()
        return seen

    async def handle(self, tool: str, arguments: dict[str, Any]) -> Envelope:
        call = ToolCall(id="c1", name=f"workspace.{tool}", arguments=json.dumps(arguments))
        return await self.gate.handle(call, ALICE)

    async def refused(self, tool: str, arguments: dict[str, Any], code: ErrorCode) -> Envelope:
        before = self.snapshot()
        envelope = await self.handle(tool, arguments)
        assert envelope.error_type is code, envelope.summary
        assert "plan_id" not in (envelope.data or {})
        # Never a host path in what the model reads.
        assert str(self.base) not in envelope.to_json()
        assert self.snapshot() == before
        return envelope

    def ctx(self) -> ToolContext:
        return ToolContext(
            principal=ALICE, call_id="c1", tool="workspace", deadline=1e12, clock=FixedClock()
        )

    async def call(self, tool: str, **arguments: Any) -> Any:
        chosen = self.tools[f"workspace.{tool}"]
        bound = chosen.bind(arguments)
        await chosen.check(bound, self.ctx())
        return await chosen.invoke(bound, self.ctx())


@pytest.fixture(params=["openat2", "component-by-component"])
def site(tmp_path: Path, request: pytest.FixtureRequest) -> Site:
    """Each attack against both ways of resolving paths beneath the root."""
    kernel = request.param == "openat2"
    if kernel and not Workspace(tmp_path).uses_openat2:
        pytest.skip("this kernel has no openat2")
    return Site(tmp_path, openat2=kernel)


def _modify(old: str, new: str | None = None) -> str:
    return f"--- a/{old}\n+++ b/{new or old}\n@@ -1 +1 @@\n-x\n+pwned\n"


def _create(path: str) -> str:
    return f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+pwned\n"


PATCH_ESCAPES = {
    "dotdot_modify": _modify("../outside/outside.txt"),
    "dotdot_create": _create("../outside/new.txt"),
    "absolute_etc_passwd": "--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-root\n+pwned\n",
    "absolute_with_prefix": _modify("/etc/passwd"),
    "climb_inside_prefix": _modify("a/../../x"),
    "climb_create": _create("src/../../outside/x"),
    "through_symlinked_dir_modify": _modify("linkdir/outside.txt"),
    "through_symlinked_dir_create": _create("linkdir/new.txt"),
    "through_symlinked_dir_deep": _create("linkdir/sub/new/deeper.txt"),
    "symlink_file": _modify("linkfile.txt"),
    "symlink_file_delete": "--- a/linkfile.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-outside canary\n",
    "hardlinked_file": _modify("hard.txt"),
    "git_config": _modify(".git/config"),
    "git_hook_upper_case": _create(".GIT/hooks/pre-commit"),
    "git_hook_new": _create(".git/hooks/post-checkout"),
    "nested_git": _create("src/.git/config"),
    "rename_target_outside": (
        "diff --git a/src/app.py b/../outside/moved.py\n"
        "similarity index 100%\n"
        "rename from src/app.py\n"
        "rename to ../outside/moved.py\n"
    ),
    "rename_into_git": (
        "diff --git a/src/app.py b/.git/hooks/post-checkout\n"
        "similarity index 100%\n"
        "rename from src/app.py\n"
        "rename to .git/hooks/post-checkout\n"
    ),
    "rename_line_disagrees_with_header": (
        "diff --git a/src/app.py b/src/moved.py\n"
        "similarity index 100%\n"
        "rename from src/app.py\n"
        "rename to ../../outside/moved.py\n"
    ),
    "git_header_hides_minus_line": (
        "diff --git a/src/app.py b/src/app.py\n"
        "--- a/../outside/outside.txt\n"
        "+++ b/src/app.py\n"
        "@@ -1 +1 @@\n"
        "-def main():\n"
        "+def pwned():\n"
    ),
    "quoted_octal_dotdot": (
        '--- "a/\\056\\056/outside/outside.txt"\n+++ "b/\\056\\056/outside/outside.txt"\n'
        "@@ -1 +1 @@\n-outside canary\n+pwned\n"
    ),
    "nul_in_path": _modify("src/app.py\x00/../../../etc/passwd"),
    "backslash_climb": _modify("..\\outside\\outside.txt"),
    "right_to_left_override": _create("src/\u202etxt.exe"),
    "line_separator": _create("src/a\u2028b"),
    "copy_outside": (
        "diff --git a/src/app.py b/../outside/copy.py\n"
        "similarity index 100%\n"
        "copy from src/app.py\n"
        "copy to ../outside/copy.py\n"
    ),
    "symlink_mode": (
        "diff --git a/src/evil b/src/evil\nnew file mode 120000\n--- /dev/null\n"
        "+++ b/src/evil\n@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n"
    ),
    "binary": "diff --git a/src/app.py b/src/app.py\nGIT binary patch\nliteral 0\n",
    "good_then_evil": (
        "--- a/src/app.py\n+++ b/src/app.py\n@@ -1,2 +1,2 @@\n def main():\n"
        "-    return 1\n+    return 2\n" + _create("../outside/evil.txt")
    ),
    "root_itself": "--- a/.\n+++ b/.\n@@ -1 +1 @@\n-x\n+y\n",
}


@pytest.mark.parametrize("name", sorted(PATCH_ESCAPES))
async def test_a_patch_that_escapes_is_refused_and_changes_nothing(site: Site, name: str) -> None:
    patch = PATCH_ESCAPES[name]
    real = await site.refused("apply_patch", {"patch": patch}, ErrorCode.INVALID_ARGUMENTS)
    await site.refused(
        "apply_patch", {"patch": patch, "dry_run": True}, ErrorCode.INVALID_ARGUMENTS
    )
    preview = await site.refused("preview_patch", {"patch": patch}, ErrorCode.INVALID_ARGUMENTS)
    assert preview.summary == real.summary


LYING_HUNKS = {
    "more_lines_than_declared": (
        "--- a/src/app.py\n+++ b/src/app.py\n@@ -1 +1 @@\n-def main():\n+def main2():\n"
        "+import os; os.system('id')\n"
    ),
    "context_after_declared_end": (
        "--- a/src/app.py\n+++ b/src/app.py\n@@ -1 +1 @@\n-def main():\n+def main2():\n"
        "     return 1\n"
    ),
    "fewer_lines_than_declared": (
        "--- a/src/app.py\n+++ b/src/app.py\n@@ -1,5 +1,5 @@\n-def main():\n+def main2():\n"
    ),
    "swallows_the_next_file_header": (
        "--- a/src/app.py\n+++ b/src/app.py\n@@ -1,3 +1,3 @@\n-def main():\n+def main2():\n"
        "--- a/src/other.py\n+++ b/src/other.py\n@@ -1 +1 @@\n-a\n+b\n"
    ),
    "wrong_target_start": (
        "--- a/src/app.py\n+++ b/src/app.py\n@@ -1 +7 @@\n-def main():\n+def main2():\n"
    ),
    "hunk_header_without_numbers": "--- a/src/app.py\n+++ b/src/app.py\n@@ @@\n-x\n+y\n",
    "marker_outside_hunk": "--- a/src/app.py\n+++ b/src/app.py\n\\ No newline at end of file\n",
}


@pytest.mark.parametrize("name", sorted(LYING_HUNKS))
async def test_a_hunk_header_that_lies_about_its_lines_is_refused(site: Site, name: str) -> None:
    await site.refused("apply_patch", {"patch": LYING_HUNKS[name]}, ErrorCode.INVALID_ARGUMENTS)


async def test_a_hunk_pointing_past_the_end_is_a_conflict(site: Site) -> None:
    patch = "--- a/src/app.py\n+++ b/src/app.py\n@@ -40 +40 @@\n-x\n+y\n"
    await site.refused("apply_patch", {"patch": patch}, ErrorCode.CONFLICT)


async def test_an_enormous_patch_is_refused(site: Site) -> None:
    huge = "--- a/src/app.py\n+++ b/src/app.py\n@@ -1 +1 @@\n-x\n+" + "y" * 1_100_000 + "\n"
    with pytest.raises(ToolSignal) as caught:
        await site.call("apply_patch", patch=huge)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENTS
    # Through the gate it is already too large to be read as arguments.
    await site.refused("apply_patch", {"patch": huge}, ErrorCode.INVALID_ARGUMENTS)


async def test_a_patch_with_ten_thousand_files_is_refused_before_it_is_parsed(
    site: Site,
) -> None:
    patch = "".join(_create(f"src/f{i}.txt") for i in range(10_000))
    envelope = await site.refused("apply_patch", {"patch": patch}, ErrorCode.INVALID_ARGUMENTS)
    assert "more than 100 files" in envelope.summary
    assert not list((site.root / "src").glob("f*.txt"))


WRITE_ESCAPES = [
    "../outside/outside.txt",
    "/etc/passwd",
    "src/../../outside/x",
    "linkdir/outside.txt",
    "linkdir/new.txt",
    "linkdir/sub/new/deeper.txt",
    "linkfile.txt",
    "hard.txt",
    ".git/config",
    ".GIT/hooks/pre-commit",
    ".git",
    "src/.Git/x",
    "src/app.py\x00.txt",
    "src/\u202etxt.exe",
    "..\\outside\\outside.txt",
    ".",
    "~/.bashrc",
]


@pytest.mark.parametrize("path", WRITE_ESCAPES)
async def test_write_file_refuses_every_escape(site: Site, path: str) -> None:
    real = await site.refused(
        "write_file", {"path": path, "content": "pwned\n"}, ErrorCode.INVALID_ARGUMENTS
    )
    await site.refused(
        "write_file",
        {"path": path, "content": "pwned\n", "dry_run": True},
        ErrorCode.INVALID_ARGUMENTS,
    )
    preview = await site.refused(
        "preview_write", {"path": path, "content": "pwned\n"}, ErrorCode.INVALID_ARGUMENTS
    )
    assert preview.summary == real.summary


@pytest.mark.parametrize(
    "path",
    [
        "../outside/outside.txt",
        "linkdir",
        "linkfile.txt",
        "linkdir/outside.txt",
        "hard.txt",
        ".git/config",
        ".git",
        "src",
        "/etc/passwd",
    ],
)
async def test_delete_file_refuses_every_escape_links_and_directories(
    site: Site, path: str
) -> None:
    await site.refused("delete_file", {"path": path}, ErrorCode.INVALID_ARGUMENTS)


async def test_revert_change_takes_only_change_ids(site: Site) -> None:
    await site.refused(
        "revert_change", {"change_id": "../../outside/outside.txt"}, ErrorCode.INVALID_ARGUMENTS
    )
    await site.refused("revert_change", {"change_id": "chg-" + "a" * 32}, ErrorCode.NOT_FOUND)


async def test_a_directory_swapped_for_a_symlink_after_the_dry_run_is_refused(
    site: Site,
) -> None:
    patch = "--- a/src/app.py\n+++ b/src/app.py\n@@ -1 +1 @@\n-def main():\n+def changed():\n"
    dry = await site.call("apply_patch", patch=patch, dry_run=True)
    assert dry["files"][0]["action"] == "modify"
    moved = site.outside / "src_real"
    (site.root / "src").rename(moved)
    (site.root / "src").symlink_to(moved)
    before = site.snapshot()
    with pytest.raises(ToolSignal) as caught:
        await site.call("apply_patch", patch=patch)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENTS
    assert site.snapshot() == before
    assert (moved / "app.py").read_text() == APP


async def test_a_preview_refuses_a_directory_swapped_for_a_symlink(site: Site) -> None:
    patch = "--- a/src/app.py\n+++ b/src/app.py\n@@ -1 +1 @@\n-def main():\n+def changed():\n"
    shown = await site.handle("preview_patch", {"patch": patch})
    assert shown.error_type is None, shown.summary
    assert shown.data["files"][0]["action"] == "modify"
    moved = site.outside / "src_real"
    (site.root / "src").rename(moved)
    (site.root / "src").symlink_to(moved)
    await site.refused("preview_patch", {"patch": patch}, ErrorCode.INVALID_ARGUMENTS)
    await site.refused(
        "preview_write",
        {"path": "src/app.py", "content": "pwned\n"},
        ErrorCode.INVALID_ARGUMENTS,
    )
    await site.refused(
        "preview_write",
        {"path": "src/new/deeper.py", "content": "pwned\n"},
        ErrorCode.INVALID_ARGUMENTS,
    )
    assert (moved / "app.py").read_text() == APP
    assert not (moved / "new").exists()


async def test_a_directory_swapped_for_a_symlink_after_confirmation_is_refused(
    site: Site,
) -> None:
    patch = "--- a/src/app.py\n+++ b/src/app.py\n@@ -1 +1 @@\n-def main():\n+def changed():\n"
    envelope = await site.handle("apply_patch", {"patch": patch})
    assert envelope.error_type is ErrorCode.NEEDS_CONFIRMATION
    plan_id = str(envelope.data["plan_id"])
    token = await site.writes.issue_token(plan_id, ALICE)
    await site.writes.confirm(plan_id, token.value, ALICE)
    moved = site.outside / "src_real"
    (site.root / "src").rename(moved)
    (site.root / "src").symlink_to(moved)
    refused = await site.writes.execute_plan(plan_id, ALICE)
    assert refused.code is ErrorCode.VERSION_CONFLICT
    assert (moved / "app.py").read_text() == APP


async def test_a_directory_swapped_for_a_symlink_while_committing_is_refused(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    (site.root / "pkg").mkdir()
    real_open_dir = site.workspace.open_dir

    def open_dir_then_swap(file: Any) -> int:
        try:
            return real_open_dir(file)
        finally:
            # The race: right after the missing directory was found missing.
            if file.text == "pkg/new" and not (site.root / "pkg").is_symlink():
                (site.root / "pkg").rename(site.outside / "pkg_real")
                (site.root / "pkg").symlink_to(site.outside / "pkg_real")

    monkeypatch.setattr(site.workspace, "open_dir", open_dir_then_swap)
    with pytest.raises(ToolSignal) as caught:
        await site.call("write_file", path="pkg/new/module.py", content="pwned\n")
    assert caught.value.code is ErrorCode.INVALID_ARGUMENTS
    assert "pkg" in caught.value.message
    assert list((site.outside / "pkg_real").iterdir()) == []


def _git(cwd: Path, *args: str) -> None:
    if GIT is None:
        if os.environ.get("CI") == "true":
            pytest.fail("git is not installed; CI must provide it")
        pytest.skip("git is not installed")
    subprocess.run(  # noqa: S603 - a fixed git command in a test repository
        [GIT, "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        env={"PATH": os.defpath, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"},
    )


async def test_a_bare_repository_planted_in_the_workspace_runs_nothing(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    _git(tmp_path, "init", "-q", "--bare", str(root))
    canary = tmp_path / "fsmonitor-ran"
    with (root / "config").open("a") as config:
        config.write(f"[core]\n\tfsmonitor = touch {canary}\n")
    tools = {
        t.name: t
        for t in edit_tools(Workspace(root), EditsConfig(journal_dir=tmp_path / "journal"))
    }
    write = tools["workspace.write_file"]
    ctx = ToolContext(principal=ALICE, call_id="c1", tool="w", deadline=1e12, clock=FixedClock())
    result: Any = await write.invoke(write.bind({"path": "notes.txt", "content": "x\n"}), ctx)
    assert result["git"] == "not a git worktree"
    assert not canary.exists()


async def test_a_configured_fsmonitor_never_runs_during_the_uncommitted_check(
    tmp_path: Path,
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    _git(root, "init", "-q")
    (root / "a.txt").write_text("committed\n")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "init")
    canary = tmp_path / "fsmonitor-ran"
    _git(root, "config", "core.fsmonitor", f"touch {canary}")
    tools = {
        t.name: t
        for t in edit_tools(Workspace(root), EditsConfig(journal_dir=tmp_path / "journal"))
    }
    write = tools["workspace.write_file"]
    ctx = ToolContext(principal=ALICE, call_id="c1", tool="w", deadline=1e12, clock=FixedClock())
    result: Any = await write.invoke(write.bind({"path": "a.txt", "content": "agent\n"}), ctx)
    assert result["git"] == "checked"
    assert not canary.exists()
    assert (root / "a.txt").read_text() == "agent\n"
