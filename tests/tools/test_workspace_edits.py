"""Workspace writes on real files: write_file, apply_patch, delete_file, revert and rollback.

Patches are applied to files in tmp_path, git checks run a real `git` in a real
repository, and the write path goes through a Gate and Writes with a real token.
"""

from __future__ import annotations

import dataclasses
import difflib
import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from _write_tools import keyring
from handrail import (
    ErrorCode,
    Gate,
    Principal,
    Registry,
    Status,
    ToolCall,
    ToolContext,
    ToolSignal,
    WriteRefusedError,
    Writes,
)
from handrail.declare.hooks import Found, NoProof, NotExecuted
from handrail.errors import ConfigurationError, Conflict, InvalidArgument, Refusal, StoreError
from handrail.execution import plan_key
from handrail.plans import Impact
from handrail.spec import ConfirmationMode, IdempotencyMode, RiskLevel, SideEffect
from handrail.testing import FixedClock, MemoryStore, sequential_ids
from handrail.tools.workspace import _commit, _journal
from handrail.tools.workspace._patches import (
    apply_file_patch,
    parse_patch,
    split_lines,
    text_diff,
)
from handrail.tools.workspace.edits import (
    ChangeState,
    EditsConfig,
    change_id_for,
    edit_tools,
    load_change,
    rollback,
)
from handrail.tools.workspace.paths import Workspace
from handrail.writes.reconcile import Reconciler

pytestmark = pytest.mark.anyio

ALICE = Principal(
    user_id="alice",
    tenant_id="t1",
    permissions=frozenset({"workspace.write", "workspace.delete"}),
)
MALLORY = Principal(user_id="mallory", tenant_id="t2", permissions=frozenset({"workspace.write"}))
GIT = shutil.which("git")
WRITE_TOOLS = ("write_file", "apply_patch", "delete_file", "revert_change")


class Env:
    """A workspace, its journal, and its tools by short name."""

    def __init__(self, tmp_path: Path, **options: Any) -> None:
        self.root = tmp_path / "ws"
        self.root.mkdir(parents=True, exist_ok=True)
        self.journal = tmp_path / "journal"
        self.workspace = Workspace(self.root)
        self.config = EditsConfig(journal_dir=self.journal, clock=FixedClock(), **options)
        self.tools = {t.name.split(".")[-1]: t for t in edit_tools(self.workspace, self.config)}

    def ctx(
        self,
        *,
        key: str | None = None,
        expected: str | None = None,
        principal: Principal = ALICE,
    ) -> ToolContext:
        return ToolContext(
            principal=principal,
            call_id="c1",
            tool="workspace",
            deadline=1e12,
            clock=FixedClock(),
            idempotency_key=key,
            expected_version=expected,
        )

    async def call(self, name: str, ctx: ToolContext | None = None, **arguments: Any) -> Any:
        """Stage 3 then the tool, like the gate and the executor do."""
        tool = self.tools[name]
        ctx = ctx or self.ctx()
        bound = tool.bind(arguments)
        await tool.check(bound, ctx)
        return await tool.invoke(bound, ctx)

    async def refused(self, name: str, code: ErrorCode, **arguments: Any) -> ToolSignal:
        with pytest.raises(ToolSignal) as caught:
            await self.call(name, **arguments)
        assert caught.value.code is code, caught.value.message
        return caught.value

    def write(self, path: str, data: bytes | str) -> Path:
        target = self.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data.encode() if isinstance(data, str) else data)
        return target

    def tree(self) -> dict[str, bytes]:
        """Every file of the workspace, byte for byte."""
        return {
            str(p.relative_to(self.root)): p.read_bytes()
            for p in sorted(self.root.rglob("*"))
            if p.is_file() and not p.is_symlink()
        }

    def changes(self) -> list[str]:
        return sorted(p.stem for p in (self.journal / "changes").glob("*.json"))


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


def _temporaries(root: Path) -> list[Path]:
    return list(root.rglob(".handrail-*"))


# --- write_file ------------------------------------------------------------------------------


async def test_write_file_creates_a_file_and_its_directories(env: Env) -> None:
    result = await env.call("write_file", path="src/pkg/mod.py", content="x = 1\n")
    target = env.root / "src/pkg/mod.py"
    assert target.read_bytes() == b"x = 1\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert result["files"][0] == {
        "path": "src/pkg/mod.py",
        "action": "create",
        "lines_added": 1,
        "lines_removed": 0,
        "bytes": 6,
        "sha256": hashlib.sha256(b"x = 1\n").hexdigest(),
    }
    assert re.fullmatch("chg-[0-9a-f]{32}", result["change_id"])
    record = load_change(env.workspace, env.config, result["change_id"])
    assert record is not None
    assert record.state is ChangeState.COMMITTED
    assert record.directories == ("src", "src/pkg")
    assert record.files[0].before_sha256 is None
    assert not _temporaries(env.root)


async def test_write_file_replaces_atomically_and_keeps_the_mode(env: Env) -> None:
    target = env.write("run.sh", "#!/bin/sh\necho old\n")
    target.chmod(0o750)
    inode = target.stat().st_ino
    result = await env.call("write_file", path="run.sh", content="#!/bin/sh\necho new\n")
    assert target.read_text() == "#!/bin/sh\necho new\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o750
    assert target.stat().st_ino != inode  # a new file renamed over the old one
    assert result["files"][0]["action"] == "replace"
    assert (result["lines_added"], result["lines_removed"]) == (1, 1)
    assert not _temporaries(env.root)


async def test_create_only_refuses_an_existing_file(env: Env) -> None:
    env.write("a.txt", "keep\n")
    await env.refused("write_file", ErrorCode.CONFLICT, path="a.txt", content="x", create_only=True)
    assert (env.root / "a.txt").read_text() == "keep\n"
    result = await env.call("write_file", path="b.txt", content="new", create_only=True)
    assert result["files"][0]["action"] == "create"


async def test_expected_sha256_guards_against_a_file_that_changed(env: Env) -> None:
    env.write("a.txt", "v1\n")
    stale = hashlib.sha256(b"v0\n").hexdigest()
    await env.refused(
        "write_file",
        ErrorCode.VERSION_CONFLICT,
        path="a.txt",
        content="v2\n",
        expected_sha256=stale,
    )
    assert (env.root / "a.txt").read_text() == "v1\n"
    await env.refused(
        "write_file",
        ErrorCode.VERSION_CONFLICT,
        path="missing.txt",
        content="v2\n",
        expected_sha256=stale,
    )
    current = hashlib.sha256(b"v1\n").hexdigest()
    await env.call("write_file", path="a.txt", content="v2\n", expected_sha256=current)
    assert (env.root / "a.txt").read_text() == "v2\n"


async def test_a_dry_run_returns_a_diff_and_writes_nothing(env: Env) -> None:
    env.write("a.txt", "one\ntwo\nthree\n")
    before = env.tree()
    result = await env.call("write_file", path="a.txt", content="one\n2\nthree\nfour", dry_run=True)
    assert env.tree() == before
    assert not (env.journal / "changes").exists() or env.changes() == []
    assert result["dry_run"] is True
    assert (result["lines_added"], result["lines_removed"]) == (2, 1)
    diff = result["diffs"][0]
    assert diff["truncated"] is False
    assert "-two\n+2\n" in diff["diff"]
    assert diff["diff"].endswith("+four\n\\ No newline at end of file\n")
    assert result["git"] == "not a git worktree"


async def test_a_long_dry_run_diff_is_cut_and_says_so(tmp_path: Path) -> None:
    env = Env(tmp_path, diff_excerpt_chars=100)
    result = await env.call(
        "write_file",
        path="big.txt",
        content="".join(f"line {i}\n" for i in range(100)),
        dry_run=True,
    )
    diff = result["diffs"][0]
    assert diff["truncated"] is True
    assert len(diff["diff"]) <= 100
    assert result["lines_added"] == 100


async def test_writing_the_same_content_changes_nothing_and_records_nothing(env: Env) -> None:
    env.write("a.txt", "same\n")
    result = await env.call("write_file", path="a.txt", content="same\n")
    assert result["change_id"] is None
    assert result["files"][0]["action"] == "unchanged"
    assert env.changes() == []


async def test_sizes_are_limited_for_new_and_existing_content(tmp_path: Path) -> None:
    env = Env(tmp_path, max_file_bytes=10)
    await env.refused("write_file", ErrorCode.INVALID_ARGUMENTS, path="a.txt", content="x" * 11)
    env.write("big.txt", "y" * 11)
    await env.refused("write_file", ErrorCode.INVALID_ARGUMENTS, path="big.txt", content="z")
    assert (env.root / "big.txt").read_text() == "y" * 11


async def test_only_regular_files_are_written(env: Env) -> None:
    (env.root / "dir").mkdir()
    os.mkfifo(env.root / "pipe")
    await env.refused("write_file", ErrorCode.INVALID_ARGUMENTS, path="dir", content="x")
    await env.refused("write_file", ErrorCode.INVALID_ARGUMENTS, path="pipe", content="x")
    env.write("file", "f")
    await env.refused("write_file", ErrorCode.INVALID_ARGUMENTS, path="file/child", content="x")
    assert stat.S_ISFIFO((env.root / "pipe").stat().st_mode)


async def test_content_that_is_not_unicode_is_refused_by_the_schema(env: Env) -> None:
    with pytest.raises(Refusal) as caught:
        await env.call("write_file", path="a.txt", content="\ud800")
    assert caught.value.code is ErrorCode.INVALID_ARGUMENTS
    assert caught.value.stage == "schema"
    assert not (env.root / "a.txt").exists()


# --- apply_patch -----------------------------------------------------------------------------

MODIFY = "".join(
    line + "\n"
    for line in (
        "diff --git a/src/app.py b/src/app.py",
        "index 1111111..2222222 100644",
        "--- a/src/app.py",
        "+++ b/src/app.py",
        "@@ -1,4 +1,4 @@",
        " import os",
        '-print("old")',
        '+print("new")',
        " ",
        " def main():",
        "@@ -8,3 +8,4 @@ def main():",
        "     pass",
        "",  # an editor stripped this context line's space: still an empty context line
        " main()",
        "+# end",
    )
)

APP = (
    'import os\nprint("old")\n\ndef main():\n    a = 1\n    b = 2\n    c = 3\n    pass\n\nmain()\n'
)


async def test_a_patch_modifies_a_file_with_two_hunks(env: Env) -> None:
    env.write("src/app.py", APP)
    result = await env.call("apply_patch", patch=MODIFY)
    assert (env.root / "src/app.py").read_text() == APP.replace('"old"', '"new"') + "# end\n"
    assert result["files"] == [
        {
            "path": "src/app.py",
            "action": "modify",
            "hunks": 2,
            "lines_added": 2,
            "lines_removed": 1,
            "sha256": hashlib.sha256((env.root / "src/app.py").read_bytes()).hexdigest(),
        }
    ]


async def test_a_patch_creates_deletes_and_renames_in_one_change(env: Env) -> None:
    env.write("old_name.txt", "a\nb\nc\n")
    env.write("gone.txt", "bye\n")
    env.write("keep.txt", "1\n2\n")
    (env.root / "old_name.txt").chmod(0o600)
    patch = (
        "diff --git a/new/dir/made.txt b/new/dir/made.txt\n"
        "new file mode 100755\n"
        "--- /dev/null\n"
        "+++ b/new/dir/made.txt\n"
        "@@ -0,0 +1,2 @@\n"
        "+hello\n"
        "+world\n"
        "diff --git a/gone.txt b/gone.txt\n"
        "deleted file mode 100644\n"
        "--- a/gone.txt\n"
        "+++ /dev/null\n"
        "@@ -1 +0,0 @@\n"
        "-bye\n"
        "diff --git a/old_name.txt b/renamed.txt\n"
        "similarity index 80%\n"
        "rename from old_name.txt\n"
        "rename to renamed.txt\n"
        "--- a/old_name.txt\n"
        "+++ b/renamed.txt\n"
        "@@ -1,3 +1,3 @@\n"
        " a\n"
        "-b\n"
        "+B\n"
        " c\n"
        "--- a/keep.txt\n"
        "+++ b/keep.txt\n"
        "@@ -2 +2,2 @@\n"
        " 2\n"
        "+3\n"
    )
    dry = await env.call("apply_patch", patch=patch, dry_run=True)
    assert [(f["path"], f["action"]) for f in dry["files"]] == [
        ("new/dir/made.txt", "create"),
        ("gone.txt", "delete"),
        ("renamed.txt", "rename"),
        ("keep.txt", "modify"),
    ]
    assert dry["files"][2]["old_path"] == "old_name.txt"
    assert (dry["files_changed"], dry["lines_added"], dry["lines_removed"]) == (4, 4, 2)
    assert not (env.root / "new").exists()
    result = await env.call("apply_patch", patch=patch)
    assert result["files_changed"] == 4
    made = env.root / "new/dir/made.txt"
    assert made.read_text() == "hello\nworld\n"
    assert stat.S_IMODE(made.stat().st_mode) == 0o755
    assert not (env.root / "gone.txt").exists()
    assert not (env.root / "old_name.txt").exists()
    renamed = env.root / "renamed.txt"
    assert renamed.read_text() == "a\nB\nc\n"
    assert stat.S_IMODE(renamed.stat().st_mode) == 0o600
    assert (env.root / "keep.txt").read_text() == "1\n2\n3\n"


async def test_a_pure_rename_without_hunks_moves_the_file(env: Env) -> None:
    env.write("a.txt", "same\n")
    patch = (
        "diff --git a/a.txt b/sub/b.txt\n"
        "similarity index 100%\n"
        "rename from a.txt\n"
        "rename to sub/b.txt\n"
    )
    await env.call("apply_patch", patch=patch)
    assert env.tree() == {"sub/b.txt": b"same\n"}


async def test_free_text_around_a_patch_is_ignored(env: Env) -> None:
    env.write("a.txt", "x\n")
    patch = "Here is the fix:\n--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-x\n+y\nThanks!\n"
    await env.call("apply_patch", patch=patch)
    assert (env.root / "a.txt").read_text() == "y\n"


async def test_patches_without_prefixes_apply_as_written(env: Env) -> None:
    env.write("a/notes.txt", "x\n")
    patch = "--- a/notes.txt\n+++ a/notes.txt\n@@ -1 +1 @@\n-x\n+y\n"
    await env.call("apply_patch", patch=patch)
    assert (env.root / "a/notes.txt").read_text() == "y\n"


async def test_crlf_files_keep_their_line_endings(env: Env) -> None:
    env.write("win.txt", b"one\r\ntwo\r\nthree\r\n")
    crlf_patch = (
        "--- a/win.txt\r\n+++ b/win.txt\r\n@@ -1,3 +1,3 @@\r\n one\r\n-two\r\n+2\r\n three\r\n"
    )
    await env.call("apply_patch", patch=crlf_patch)
    assert (env.root / "win.txt").read_bytes() == b"one\r\n2\r\nthree\r\n"
    lf_patch = "--- a/win.txt\n+++ b/win.txt\n@@ -2,2 +2,3 @@\n 2\n three\n+four\n"
    await env.call("apply_patch", patch=lf_patch)
    assert (env.root / "win.txt").read_bytes() == b"one\r\n2\r\nthree\r\nfour\r\n"


async def test_a_missing_final_newline_is_matched_and_written_exactly(env: Env) -> None:
    env.write("a.txt", b"one\ntwo")
    add_after = (
        "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,3 @@\n one\n-two\n"
        "\\ No newline at end of file\n+two\n+three\n\\ No newline at end of file\n"
    )
    await env.call("apply_patch", patch=add_after)
    assert (env.root / "a.txt").read_bytes() == b"one\ntwo\nthree"
    unstated = "--- a/a.txt\n+++ b/a.txt\n@@ -3 +3 @@\n-three\n+3\n"
    await env.refused("apply_patch", ErrorCode.CONFLICT, patch=unstated)
    append_blind = "--- a/a.txt\n+++ b/a.txt\n@@ -3,0 +4 @@\n+four\n"
    await env.refused("apply_patch", ErrorCode.CONFLICT, patch=append_blind)
    add_newline = (
        "--- a/a.txt\n+++ b/a.txt\n@@ -3 +3 @@\n-three\n\\ No newline at end of file\n+three\n"
    )
    await env.call("apply_patch", patch=add_newline)
    assert (env.root / "a.txt").read_bytes() == b"one\ntwo\nthree\n"


async def test_a_context_mismatch_in_any_file_refuses_the_whole_patch(env: Env) -> None:
    env.write("a.txt", "a1\na2\n")
    env.write("b.txt", "b1\nb2\n")
    before = env.tree()
    patch = (
        "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+new\n"
        "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n a1\n-a2\n+A2\n"
        "--- a/b.txt\n+++ b/b.txt\n@@ -1,2 +1,2 @@\n b1\n-b-two\n+B2\n"
    )
    signal = await env.refused("apply_patch", ErrorCode.CONFLICT, patch=patch)
    assert "b.txt" in signal.message
    assert "line 2" in signal.message
    assert env.tree() == before
    assert env.changes() == []


async def test_a_hunk_applies_only_where_its_header_says(env: Env) -> None:
    env.write("a.txt", "x\ntarget\ny\ntarget\n")
    shifted = "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-target\n+hit\n"
    await env.refused("apply_patch", ErrorCode.CONFLICT, patch=shifted)
    past_end = "--- a/a.txt\n+++ b/a.txt\n@@ -9 +9 @@\n-target\n+hit\n"
    await env.refused("apply_patch", ErrorCode.CONFLICT, patch=past_end)
    exact = "--- a/a.txt\n+++ b/a.txt\n@@ -4 +4 @@\n-target\n+hit\n"
    await env.call("apply_patch", patch=exact)
    assert (env.root / "a.txt").read_text() == "x\ntarget\ny\nhit\n"


async def test_a_patch_that_disagrees_with_the_files_existence_is_a_conflict(env: Env) -> None:
    env.write("there.txt", "x\n")
    create_existing = "--- /dev/null\n+++ b/there.txt\n@@ -0,0 +1 @@\n+y\n"
    await env.refused("apply_patch", ErrorCode.CONFLICT, patch=create_existing)
    modify_missing = "--- a/nothere.txt\n+++ b/nothere.txt\n@@ -1 +1 @@\n-x\n+y\n"
    await env.refused("apply_patch", ErrorCode.CONFLICT, patch=modify_missing)
    rename_onto = "diff --git a/there.txt b/other.txt\nrename from there.txt\nrename to other.txt\n"
    env.write("other.txt", "occupied\n")
    await env.refused("apply_patch", ErrorCode.CONFLICT, patch=rename_onto)
    partial_delete = "--- a/there.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"
    env.write("there.txt", "x\nmore\n")
    await env.refused("apply_patch", ErrorCode.CONFLICT, patch=partial_delete)
    assert (env.root / "there.txt").read_text() == "x\nmore\n"


async def test_patches_apply_to_utf8_text_only(env: Env) -> None:
    env.write("latin.txt", b"caf\xe9\n")
    env.write("bin.dat", b"a\x00b\n")
    for name in ("latin.txt", "bin.dat"):
        patch = f"--- a/{name}\n+++ b/{name}\n@@ -1 +1 @@\n-x\n+y\n"
        await env.refused("apply_patch", ErrorCode.INVALID_ARGUMENTS, patch=patch)


async def test_a_patch_naming_one_file_twice_is_refused(env: Env) -> None:
    env.write("a.txt", "1\n2\n")
    hunk = "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-1\n+one\n"
    await env.refused("apply_patch", ErrorCode.INVALID_ARGUMENTS, patch=hunk + hunk)


@pytest.mark.parametrize(
    ("patch", "fragment"),
    [
        ("just some words\n", "no file changes"),
        ("--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-a\n", "not a valid unified diff"),
        ("diff --git a/x b/x\nindex 1..2 100644\n", "changes nothing"),
        ("--- a/x\n+++ b/x\n@@ -0,0 +0,0 @@\n", "no lines"),
        ("diff --git a/x b/y\ncopy from x\ncopy to y\n", "Copies"),
        ("diff --git a/x b/x\nold mode 100644\nnew mode 100755\n", "Mode changes"),
        ("diff --git a/x b/x\nnew file mode 120000\n--- /dev/null\n+++ b/x\n", "Symbolic"),
        ("diff --git a/x b/x\nindex 1..2 160000\n--- a/x\n+++ b/x\n", "Symbolic"),
        ("diff --git a/x b/x\nBinary files a/x and b/x differ\n", "Binary"),
        ("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n@@ -1 +1 @@\n-b\n+c\n", "out of order"),
        ("--- a/x\n+++ b/x\n@@ -1 +5 @@\n-a\n+b\n", "inconsistent"),
        ('--- "a/\\q"\n+++ "b/\\q"\n@@ -1 +1 @@\n-a\n+b\n', "bad escape"),
        ('--- "a/\\9xx"\n+++ "b/x"\n@@ -1 +1 @@\n-a\n+b\n', "bad escape"),
        ('--- "a/\\08x"\n+++ "b/x"\n@@ -1 +1 @@\n-a\n+b\n', "bad escape"),
        ("--- \n+++ \n@@ -1 +1 @@\n-a\n+b\n", "has no name"),
        ('--- "a/\\377"\n+++ "b/\\377"\n@@ -1 +1 @@\n-a\n+b\n', "not UTF-8"),
        (
            (
                "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n\\ No newline at end of file\n"
                "\\ No newline at end of file\n"
            ),
            "misplaced",
        ),
        ("--- /dev/null\n+++ /dev/null\n@@ -0,0 +1 @@\n+a\n", "/dev/null to /dev/null"),
    ],
)
async def test_malformed_patches_are_refused_with_a_reason(
    env: Env, patch: str, fragment: str
) -> None:
    env.write("x", "a\n")
    signal = await env.refused("apply_patch", ErrorCode.INVALID_ARGUMENTS, patch=patch)
    assert fragment in signal.message
    assert (env.root / "x").read_text() == "a\n"


async def test_a_quoted_git_path_is_unescaped(env: Env) -> None:
    env.write("tab\there ä.txt", "x\n")
    patch = (
        '--- "a/tab\\there \\303\\244.txt"\n+++ "b/tab\\there \\303\\244.txt"\n'
        "@@ -1 +1 @@\n-x\n+y\n"
    )
    # A tab is a control character: refused as a path even though it parses.
    await env.refused("apply_patch", ErrorCode.INVALID_ARGUMENTS, patch=patch)
    env.write("sp ace ä.txt", "x\n")
    patch = '--- "a/sp ace \\303\\244.txt"\n+++ "b/sp ace \\303\\244.txt"\n@@ -1 +1 @@\n-x\n+y\n'
    await env.call("apply_patch", patch=patch)
    assert (env.root / "sp ace ä.txt").read_text() == "y\n"


async def test_patch_limits_are_enforced(tmp_path: Path) -> None:
    env = Env(tmp_path, max_patch_bytes=200, max_patch_files=2)
    files = "".join(f"--- /dev/null\n+++ b/f{i}\n@@ -0,0 +1 @@\n+x\n" for i in range(3))
    signal = await env.refused("apply_patch", ErrorCode.INVALID_ARGUMENTS, patch=files)
    assert "more than 2 files" in signal.message
    big = "--- /dev/null\n+++ b/f\n@@ -0,0 +1 @@\n+" + "x" * 300 + "\n"
    signal = await env.refused("apply_patch", ErrorCode.INVALID_ARGUMENTS, patch=big)
    assert "larger than 200 bytes" in signal.message
    env2 = Env(tmp_path / "two", max_file_bytes=3)
    grow = "--- /dev/null\n+++ b/f\n@@ -0,0 +1 @@\n+toolong\n"
    await env2.refused("apply_patch", ErrorCode.INVALID_ARGUMENTS, patch=grow)


def _lines(text: str) -> list[str]:
    return [part for part in re.split(r"(?<=\n)", text) if part]


def _diff(before: str, after: str) -> str:
    """A unified diff as `diff -u` writes it, with "\\ No newline" markers."""
    lines = difflib.unified_diff(_lines(before), _lines(after), "a/f.txt", "b/f.txt")
    return "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines
    )


_TEXT = st.text(alphabet=st.sampled_from(["a", "b", " ", "+", "-", "\\", "\r", "\n", "é"]))


@given(before=_TEXT, after=_TEXT)
def test_applying_the_diff_of_two_texts_gives_the_second(before: str, after: str) -> None:
    patch = _diff(before, after)
    if not patch:
        return
    parsed = parse_patch(patch, max_files=5)
    assert len(parsed.files) == 1
    assert apply_file_patch("f.txt", before, parsed.files[0]) == after


@given(before=_TEXT, after=_TEXT)
def test_the_dry_run_diff_is_a_patch_that_gives_the_new_text(before: str, after: str) -> None:
    diff = text_diff("f.txt", before, after, limit=1_000_000)
    assert not diff.truncated
    if before == after:
        assert diff.excerpt == ""
        return
    parsed = parse_patch(diff.excerpt, max_files=1)
    assert apply_file_patch("f.txt", before, parsed.files[0]) == after
    assert diff.added == parsed.files[0].added
    assert diff.removed == parsed.files[0].removed


def test_a_large_changed_middle_is_counted_without_a_quadratic_diff() -> None:
    before = "".join(f"line {i}\n" for i in range(5000))
    after = "".join(f"line {i}{'!' if i % 7 == 0 else ''}\n" for i in range(5000))
    diff = text_diff("f.txt", before, after, limit=500)
    assert (diff.added, diff.removed) == (715, 715)
    assert diff.truncated
    assert len(diff.excerpt) <= 500


_PATCH_PIECES = st.sampled_from(
    [
        *'-+ @\\\n\r\tab,0123456789/"',
        *("--- ", "+++ ", "--- a/x\n", "+++ b/x\n", "--- /dev/null\n", "diff --git a/x b/y\n"),
        *("@@ -1 +1 @@\n", "@@ -0,0 +1 @@\n", "@@ -1,2 +1,2 @@\n", "rename from x\n"),
        *("\\ No newline at end of file\n", "new file mode 100644\n"),
        *("deleted file mode 100644\n", " a\n", "-b\n", "+c\n"),
    ]
)


@given(st.lists(_PATCH_PIECES, max_size=40).map("".join))
def test_any_patch_text_is_refused_clearly_or_applies_or_conflicts(text: str) -> None:
    messages = []
    try:
        parsed = parse_patch(text, max_files=5)
    except InvalidArgument as refused:
        messages.append(refused.message)
    else:
        for file in parsed.files:
            for original in ("a\nb\n", None, "a\r\nb"):
                try:
                    apply_file_patch("x", original, file)
                except (Conflict, InvalidArgument) as refused:
                    messages.append(refused.message)
    assert all(messages)


@given(_TEXT)
def test_split_lines_keeps_every_character(text: str) -> None:
    assert "".join(t + e for t, e in split_lines(text)) == text


# --- delete_file -----------------------------------------------------------------------------


async def test_delete_file_removes_a_file_and_refuses_anything_else(env: Env) -> None:
    env.write("a.txt", "1\n2\n")
    (env.root / "dir").mkdir()
    result = await env.call("delete_file", path="a.txt")
    assert not (env.root / "a.txt").exists()
    assert result["files"][0] == {
        "path": "a.txt",
        "action": "delete",
        "lines_removed": 2,
        "sha256": None,
    }
    await env.refused("delete_file", ErrorCode.NOT_FOUND, path="a.txt")
    await env.refused("delete_file", ErrorCode.INVALID_ARGUMENTS, path="dir")
    assert (env.root / "dir").is_dir()


def test_the_tools_declare_risk_confirmation_and_hooks(env: Env) -> None:
    for name in ("write_file", "apply_patch", "revert_change"):
        spec = env.tools[name].spec
        assert spec.risk is RiskLevel.L2_REVERSIBLE_WRITE
        assert spec.confirmation.mode is ConfirmationMode.CONFIRM
        assert spec.permissions == frozenset({"workspace.write"})
    delete = env.tools["delete_file"]
    assert delete.spec.risk is RiskLevel.L3_HIGH_RISK_WRITE
    assert delete.spec.hints.destructive is True
    assert delete.spec.permissions == frozenset({"workspace.delete"})
    for name in WRITE_TOOLS:
        tool = env.tools[name]
        assert tool.spec.side_effect is SideEffect.EXTERNAL_WRITE
        assert tool.spec.idempotency.mode is IdempotencyMode.PLAN
        assert tool.spec.results.trust.value == "untrusted"
        assert tool.reconcile is not None
        assert tool.resolve_version is not None
        assert tool.impact is not None
        assert tool.name.startswith("workspace.")


def test_deletion_can_require_an_approver(tmp_path: Path) -> None:
    env = Env(tmp_path, delete_approver_permission="workspace.approve", delete_permission=None)
    spec = env.tools["delete_file"].spec
    assert spec.confirmation.mode is ConfirmationMode.APPROVE
    assert spec.confirmation.approver_permission == "workspace.approve"
    assert spec.permissions == frozenset()


# --- rollback and revert ---------------------------------------------------------------------


async def test_rollback_restores_exact_bytes_modes_and_removes_what_was_created(env: Env) -> None:
    original = b"caf\xe9 \x00\xff raw bytes\r\n"
    env.write("data.bin", original).chmod(0o640)
    env.write("doomed.txt", "keep me\n")
    first = await env.call("write_file", path="data.bin", content="text now\n")
    second = await env.call("write_file", path="deep/er/new.txt", content="new\n")
    third = await env.call("delete_file", path="doomed.txt")
    for change in (third, second, first):
        rollback(env.workspace, env.config, change["change_id"])
    restored = env.root / "data.bin"
    assert restored.read_bytes() == original
    assert stat.S_IMODE(restored.stat().st_mode) == 0o640
    assert (env.root / "doomed.txt").read_text() == "keep me\n"
    assert not (env.root / "deep").exists()
    record = load_change(env.workspace, env.config, first["change_id"])
    assert record is not None
    assert record.state is ChangeState.REVERTED
    revert = load_change(env.workspace, env.config, str(record.reverted_by))
    assert revert is not None
    assert revert.kind == "revert"
    assert revert.reverts == first["change_id"]


async def test_rollback_refuses_a_file_changed_since_unless_forced(env: Env) -> None:
    env.write("a.txt", "v1\n")
    change = await env.call("write_file", path="a.txt", content="v2\n")
    env.write("a.txt", "edited by the user\n")
    with pytest.raises(WriteRefusedError) as refused:
        rollback(env.workspace, env.config, change["change_id"])
    assert refused.value.code is ErrorCode.VERSION_CONFLICT
    assert (env.root / "a.txt").read_text() == "edited by the user\n"
    rollback(env.workspace, env.config, change["change_id"], force=True)
    assert (env.root / "a.txt").read_text() == "v1\n"
    with pytest.raises(WriteRefusedError) as again:
        rollback(env.workspace, env.config, change["change_id"])
    assert again.value.code is ErrorCode.CONFLICT
    with pytest.raises(WriteRefusedError) as unknown:
        rollback(env.workspace, env.config, "chg-" + "0" * 32)
    assert unknown.value.code is ErrorCode.NOT_FOUND
    assert load_change(env.workspace, env.config, "../../etc/passwd") is None


async def test_a_revert_can_itself_be_reverted(env: Env) -> None:
    env.write("a.txt", "v1\n")
    change = await env.call("write_file", path="a.txt", content="v2\n")
    undo = await env.call("revert_change", change_id=change["change_id"])
    assert (env.root / "a.txt").read_text() == "v1\n"
    await env.call("revert_change", change_id=undo["change_id"])
    assert (env.root / "a.txt").read_text() == "v2\n"
    await env.refused("revert_change", ErrorCode.CONFLICT, change_id=change["change_id"])


async def test_revert_change_is_scoped_to_the_tenant(env: Env) -> None:
    change = await env.call("write_file", path="a.txt", content="mine\n")
    with pytest.raises(ToolSignal) as caught:
        await env.call("revert_change", env.ctx(principal=MALLORY), change_id=change["change_id"])
    assert caught.value.code is ErrorCode.NOT_FOUND
    assert (env.root / "a.txt").read_text() == "mine\n"
    tool = env.tools["revert_change"]
    assert tool.resolve_version is not None
    theirs = tool.bind({"change_id": change["change_id"]}).value
    unknown = tool.bind({"change_id": "chg-" + "1" * 32}).value
    # Another tenant's change looks exactly like one that does not exist.
    assert tool.resolve_version(theirs, env.ctx(principal=MALLORY)) == tool.resolve_version(
        unknown, env.ctx()
    )


async def test_a_failure_while_renaming_restores_the_files_already_renamed(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    env.write("a.txt", "a\n")
    env.write("b.txt", "b\n")
    before = env.tree()
    real_rename = os.rename

    def failing(src: Any, dst: Any, **kwargs: Any) -> None:
        if dst == "b.txt":
            raise OSError(28, "No space left on device")
        real_rename(src, dst, **kwargs)

    monkeypatch.setattr(os, "rename", failing)
    patch = (
        "--- /dev/null\n+++ b/new/c.txt\n@@ -0,0 +1 @@\n+c\n"
        "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-a\n+A\n"
        "--- a/b.txt\n+++ b/b.txt\n@@ -1 +1 @@\n-b\n+B\n"
    )
    with pytest.raises(ToolSignal) as caught:
        await env.call("apply_patch", env.ctx(key="k-fail"), patch=patch)
    assert caught.value.code is ErrorCode.FAILED_FINAL
    assert "ENOSPC" in caught.value.message
    assert env.tree() == before
    assert not (env.root / "new").exists()
    assert not _temporaries(env.root)
    record = load_change(env.workspace, env.config, change_id_for("k-fail"))
    assert record is not None
    assert record.state is ChangeState.ROLLED_BACK
    assert env.tools["apply_patch"].reconcile is not None
    assert isinstance(env.tools["apply_patch"].reconcile("k-fail", env.ctx()), NotExecuted)
    monkeypatch.undo()
    with pytest.raises(WriteRefusedError) as never_applied:
        rollback(env.workspace, env.config, change_id_for("k-fail"))
    assert never_applied.value.code is ErrorCode.CONFLICT


async def test_a_failure_while_staging_changes_nothing(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    env.write("a.txt", "a\n")
    real_fsync = os.fsync
    workspace = str(env.root)

    def failing(fd: int) -> None:
        if str(Path(f"/proc/self/fd/{fd}").readlink()).startswith(workspace + "/n/"):
            raise OSError(5, "I/O error")  # the staged file; the journal's writes pass
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(ToolSignal) as caught:
        await env.call("write_file", env.ctx(key="k-stage"), path="n/a.txt", content="x\n")
    monkeypatch.undo()
    assert caught.value.code is ErrorCode.FAILED_FINAL
    assert env.tree() == {"a.txt": b"a\n"}
    assert not (env.root / "n").exists()


async def test_an_undo_that_fails_leaves_the_outcome_unknown_for_people(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    env.write("a.txt", "a\n")
    env.write("b.txt", "b\n")
    real_rename = os.rename
    state = {"failed": False}

    def failing(src: Any, dst: Any, **kwargs: Any) -> None:
        if dst == "b.txt" or (dst == "a.txt" and state["failed"]):
            state["failed"] = True
            raise OSError(5, "I/O error")
        real_rename(src, dst, **kwargs)

    monkeypatch.setattr(os, "rename", failing)
    patch = (
        "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-a\n+A\n"
        "--- a/b.txt\n+++ b/b.txt\n@@ -1 +1 @@\n-b\n+B\n"
    )
    with pytest.raises(OSError, match="I/O error"):
        await env.call("apply_patch", env.ctx(key="k-half"), patch=patch)
    monkeypatch.undo()
    assert (env.root / "a.txt").read_text() == "A\n"  # half applied
    reconcile = env.tools["apply_patch"].reconcile
    assert reconcile is not None
    assert isinstance(reconcile("k-half", env.ctx()), NoProof)
    rollback(env.workspace, env.config, change_id_for("k-half"))
    assert env.tree() == {"a.txt": b"a\n", "b.txt": b"b\n"}


async def test_without_hard_links_a_new_file_is_renamed_into_place(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_links(*_args: Any, **_kwargs: Any) -> None:
        raise OSError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    await env.call("write_file", path="a.txt", content="x\n")
    assert (env.root / "a.txt").read_text() == "x\n"
    assert not _temporaries(env.root)


def test_a_new_file_never_replaces_one_that_appeared_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "taken").write_text("someone else's\n")
    (tmp_path / "staged").write_text("ours\n")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(FileExistsError):
            _commit._link_new(fd, "staged", "taken")

        def unsupported(*_args: Any, **_kwargs: Any) -> None:
            raise OSError(95, "Operation not supported")

        monkeypatch.setattr(os, "link", unsupported)
        with pytest.raises(FileExistsError):
            _commit._link_new(fd, "staged", "taken")

        def broken(*_args: Any, **_kwargs: Any) -> None:
            raise OSError(5, "I/O error")

        monkeypatch.setattr(os, "link", broken)
        with pytest.raises(OSError, match="I/O error"):
            _commit._link_new(fd, "staged", "other")
    finally:
        os.close(fd)
    assert (tmp_path / "taken").read_text() == "someone else's\n"


async def test_a_patch_without_a_final_newline_or_with_trailing_blank_lines_applies(
    env: Env,
) -> None:
    env.write("a.txt", "1\n")
    await env.call("apply_patch", patch="--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-1\n+2")
    assert (env.root / "a.txt").read_text() == "2\n"
    await env.call("apply_patch", patch="--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-2\n+3\n\n\n")
    assert (env.root / "a.txt").read_text() == "3\n"


async def test_a_file_swapped_while_a_change_is_prepared_is_not_written(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    env.write("a.txt", "v1\n")
    real_put = _journal.Journal.put_blob

    def swap_then_put(journal: Any, data: bytes) -> None:
        (env.root / "a.txt").unlink()
        env.write("a.txt", "v1\n")  # same bytes, another file
        real_put(journal, data)

    monkeypatch.setattr(_journal.Journal, "put_blob", swap_then_put)
    await env.refused("write_file", ErrorCode.VERSION_CONFLICT, path="a.txt", content="v2\n")
    assert (env.root / "a.txt").read_text() == "v1\n"


async def test_a_journal_that_cannot_be_written_stops_the_change_before_any_file(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    env.write("a.txt", "v1\n")
    real_rename = os.rename

    def journal_fails(src: Any, dst: Any, **kwargs: Any) -> None:
        if str(dst).endswith(".json"):
            raise OSError(28, "No space left on device")
        real_rename(src, dst, **kwargs)

    monkeypatch.setattr(os, "rename", journal_fails)
    with pytest.raises(OSError, match="No space"):
        await env.call("write_file", env.ctx(key="k-j"), path="a.txt", content="v2\n")
    monkeypatch.undo()
    assert env.tree() == {"a.txt": b"v1\n"}
    assert not list(env.journal.rglob(".handrail-*"))
    reconcile = env.tools["write_file"].reconcile
    assert reconcile is not None
    assert isinstance(reconcile("k-j", env.ctx()), NotExecuted)


async def test_a_second_change_waits_for_the_lock_and_then_gives_up(tmp_path: Path) -> None:
    env = Env(tmp_path, lock_timeout=0.05)
    await env.call("write_file", path="a.txt", content="v1\n")
    fd = os.open(env.journal / "lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        signal = await env.refused("write_file", ErrorCode.TRANSIENT, path="a.txt", content="v2\n")
        assert signal.retryable
    finally:
        os.close(fd)
    assert (env.root / "a.txt").read_text() == "v1\n"


def test_staging_gives_up_when_no_temporary_name_is_free(tmp_path: Path) -> None:
    (tmp_path / ".handrail-same.tmp").write_text("occupied")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(FileExistsError):
            _journal.stage(fd, b"data", 0o644, lambda _n: "same")
    finally:
        os.close(fd)
    assert (tmp_path / ".handrail-same.tmp").read_text() == "occupied"


async def test_rollback_leaves_a_created_directory_that_is_no_longer_empty(env: Env) -> None:
    change = await env.call("write_file", path="d/e/f.txt", content="x\n")
    env.write("d/user.txt", "theirs\n")
    rollback(env.workspace, env.config, change["change_id"])
    assert not (env.root / "d/e").exists()
    assert env.tree() == {"d/user.txt": b"theirs\n"}


# --- idempotency and reconciliation ----------------------------------------------------------


async def test_the_same_key_applies_once_and_replays_its_result(env: Env) -> None:
    env.write("a.txt", "1\n")
    patch = "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1,2 @@\n 1\n+2\n"
    first = await env.call("apply_patch", env.ctx(key="k1"), patch=patch)
    tool = env.tools["apply_patch"]
    again = await tool.invoke(tool.bind({"patch": patch}), env.ctx(key="k1"))
    assert again == first
    assert (env.root / "a.txt").read_text() == "1\n2\n"
    assert first["change_id"] == change_id_for("k1")


async def test_reconcile_reads_the_journal_and_the_files(env: Env) -> None:
    reconcile = env.tools["write_file"].reconcile
    assert reconcile is not None
    assert isinstance(reconcile("never-ran", env.ctx()), NotExecuted)
    env.write("a.txt", "old\n")
    result = await env.call("write_file", env.ctx(key="k2"), path="a.txt", content="new\n")
    found = reconcile("k2", env.ctx())
    assert isinstance(found, Found)
    assert found.result == result
    # A crash after the record but before (or during) the renames: judged by the files.
    record = load_change(env.workspace, env.config, change_id_for("k2"))
    assert record is not None
    _journal.Journal(env.journal, env.root, env.config.token).save(
        dataclasses.replace(record, state=ChangeState.PREPARED)
    )
    assert isinstance(reconcile("k2", env.ctx()), Found)
    env.write("a.txt", "old\n")
    assert isinstance(reconcile("k2", env.ctx()), NotExecuted)
    env.write("a.txt", "something else\n")
    assert isinstance(reconcile("k2", env.ctx()), NoProof)


async def test_a_plan_binds_the_version_and_a_changed_file_is_refused(env: Env) -> None:
    env.write("a.txt", "v1\n")
    tool = env.tools["write_file"]
    assert tool.resolve_version is not None
    args = tool.bind({"path": "a.txt", "content": "v2\n"}).value
    seen = tool.resolve_version(args, env.ctx())
    assert seen == tool.resolve_version(args, env.ctx())
    env.write("a.txt", "v1 edited\n")
    assert tool.resolve_version(args, env.ctx()) != seen
    with pytest.raises(ToolSignal) as caught:
        await env.call(
            "write_file", env.ctx(key="k3", expected=str(seen)), path="a.txt", content="v2\n"
        )
    assert caught.value.code is ErrorCode.VERSION_CONFLICT
    assert (env.root / "a.txt").read_text() == "v1 edited\n"


async def test_impact_counts_files_and_lines(env: Env) -> None:
    env.write("a.txt", "1\n")
    tool = env.tools["apply_patch"]
    patch = "".join(f"--- /dev/null\n+++ b/f{i}\n@@ -0,0 +1 @@\n+x\n" for i in range(7))
    assert tool.impact is not None
    impact = tool.impact(tool.bind({"patch": patch}).value, env.ctx())
    assert isinstance(impact, Impact)
    assert impact.counts == {"files_changed": 7, "lines_added": 7, "lines_removed": 0}
    assert impact.target == "f0, f1, f2, f3, f4 and 2 more"
    assert impact.reversible is True
    assert tool.resolve_version is not None
    version = tool.resolve_version(tool.bind({"patch": "garbage"}).value, env.ctx())
    assert isinstance(version, str)
    assert version.startswith("sha256:")


# --- configuration ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {"max_file_bytes": 0},
        {"diff_excerpt_chars": -1},
        {"git_timeout": 0},
        {"file_mode": 0o4755},
    ],
)
def test_bad_limits_are_configuration_errors(tmp_path: Path, options: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        EditsConfig(journal_dir=tmp_path, **options)


def test_the_journal_must_live_outside_the_workspace(tmp_path: Path) -> None:
    workspace = Workspace(tmp_path)
    with pytest.raises(ConfigurationError):
        edit_tools(workspace, EditsConfig(journal_dir=tmp_path / "journal"))
    with pytest.raises(ConfigurationError):
        edit_tools(workspace, EditsConfig(journal_dir=tmp_path))


def test_a_journal_that_cannot_be_created_is_a_configuration_error(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigurationError):
        edit_tools(Workspace(tmp_path / "ws"), EditsConfig(journal_dir=tmp_path / "file" / "j"))


def test_a_damaged_journal_is_a_store_error(env: Env) -> None:
    (env.journal / "changes" / ("chg-" + "2" * 32 + ".json")).write_text("{not json")
    with pytest.raises(StoreError):
        load_change(env.workspace, env.config, "chg-" + "2" * 32)
    journal = _journal.Journal(env.journal, env.root, env.config.token)
    with pytest.raises(StoreError):
        journal.blob("0" * 64)


# --- git worktrees ---------------------------------------------------------------------------


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


@pytest.fixture
def repo(tmp_path: Path) -> Env:
    env = Env(tmp_path)
    _git(env.root, "init", "-q")
    env.write("tracked.txt", "committed\n")
    env.write("other.txt", "committed\n")
    _git(env.root, "add", ".")
    _git(env.root, "commit", "-q", "-m", "init")
    return env


async def test_uncommitted_user_changes_refuse_a_write_and_are_reported(repo: Env) -> None:
    repo.write("tracked.txt", "the user's work in progress\n")
    signal = await repo.refused("write_file", ErrorCode.CONFLICT, path="tracked.txt", content="x\n")
    assert "tracked.txt" in signal.message
    assert (repo.root / "tracked.txt").read_text() == "the user's work in progress\n"
    dry = await repo.call("write_file", path="tracked.txt", content="x\n", dry_run=True)
    assert dry["uncommitted"] == ["tracked.txt"]
    assert dry["git"] == "checked"
    clean = await repo.call("write_file", path="other.txt", content="agent\n")
    assert clean["uncommitted_overwritten"] == []
    assert clean["git"] == "checked"


async def test_an_untracked_user_file_counts_as_uncommitted(repo: Env) -> None:
    repo.write("notes.md", "mine\n")
    patch = "--- a/notes.md\n+++ b/notes.md\n@@ -1 +1 @@\n-mine\n+agent\n"
    await repo.refused("apply_patch", ErrorCode.CONFLICT, patch=patch)
    await repo.refused("delete_file", ErrorCode.CONFLICT, path="notes.md")
    assert (repo.root / "notes.md").read_text() == "mine\n"


async def test_the_agents_own_uncommitted_changes_do_not_block_it(repo: Env) -> None:
    await repo.call("write_file", path="tracked.txt", content="agent v1\n")
    await repo.call("write_file", path="tracked.txt", content="agent v2\n")
    await repo.call("delete_file", path="tracked.txt")
    await repo.call("write_file", path="tracked.txt", content="agent v3\n")
    repo.write("tracked.txt", "the user edits after the agent\n")
    await repo.refused("write_file", ErrorCode.CONFLICT, path="tracked.txt", content="agent v4\n")


async def test_overwriting_uncommitted_work_can_be_allowed_and_is_reported(tmp_path: Path) -> None:
    env = Env(tmp_path, overwrite_uncommitted=True)
    _git(env.root, "init", "-q")
    env.write("tracked.txt", "committed\n")
    _git(env.root, "add", ".")
    _git(env.root, "commit", "-q", "-m", "init")
    env.write("tracked.txt", "user\n")
    result = await env.call("write_file", path="tracked.txt", content="agent\n")
    assert result["uncommitted_overwritten"] == ["tracked.txt"]
    rollback(env.workspace, env.config, result["change_id"])
    assert (env.root / "tracked.txt").read_text() == "user\n"


async def test_a_workspace_inside_a_repository_maps_paths_from_the_top(tmp_path: Path) -> None:
    top = tmp_path / "top"
    (top / "ws").mkdir(parents=True)
    _git(top, "init", "-q")
    (top / "ws" / "a.txt").write_text("committed\n")
    _git(top, "add", ".")
    _git(top, "commit", "-q", "-m", "init")
    env = Env(top)
    env.workspace = Workspace(top / "ws")
    env.root = top / "ws"
    env.journal = tmp_path / "journal"
    env.config = EditsConfig(journal_dir=env.journal)
    env.tools = {t.name.split(".")[-1]: t for t in edit_tools(env.workspace, env.config)}
    env.write("a.txt", "user\n")
    await env.refused("write_file", ErrorCode.CONFLICT, path="a.txt", content="agent\n")


async def test_the_git_check_can_be_off_or_missing(tmp_path: Path) -> None:
    off = Env(tmp_path / "off", git=None)
    result = await off.call("write_file", path="a.txt", content="x\n")
    assert result["git"] == "not checked: the host turned the git check off"
    missing = Env(tmp_path / "missing", git="no-such-git-binary-here")
    result = await missing.call("write_file", path="a.txt", content="x\n")
    assert result["git"] == "not checked: git is not installed"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand the repository to another user")
async def test_a_repository_git_refuses_to_read_fails_closed(repo: Env) -> None:
    for path in [repo.root, *repo.root.rglob("*")]:
        os.lchown(path, 4242, 4242)
    await repo.refused("write_file", ErrorCode.FAILED_FINAL, path="tracked.txt", content="x\n")
    assert (repo.root / "tracked.txt").read_text() == "committed\n"


async def test_a_git_status_failure_fails_closed(
    repo: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_run = subprocess.run

    def status_fails(argv: list[str], **kwargs: Any) -> Any:
        done = real_run(argv, **kwargs)
        if "status" in argv:
            return subprocess.CompletedProcess(argv, 1, b"", b"boom")
        return done

    monkeypatch.setattr(subprocess, "run", status_fails)
    await repo.refused("write_file", ErrorCode.FAILED_FINAL, path="other.txt", content="x\n")

    def times_out(argv: list[str], **kwargs: Any) -> Any:
        raise subprocess.TimeoutExpired(argv, 1.0)

    monkeypatch.setattr(subprocess, "run", times_out)
    await repo.refused("write_file", ErrorCode.TRANSIENT, path="other.txt", content="x\n")
    assert (repo.root / "other.txt").read_text() == "committed\n"


# --- through the gate ------------------------------------------------------------------------


class PlanCountingStore(MemoryStore):
    """A MemoryStore that remembers the id of every plan the gate stores."""

    def __init__(self) -> None:
        super().__init__()
        self.plans: list[str] = []

    def insert_plan(self, record: Any) -> bool:
        self.plans.append(record.plan.plan_id)
        return super().insert_plan(record)


class World:
    def __init__(self, env: Env) -> None:
        self.env = env
        self.registry = Registry()
        for tool in env.tools.values():
            self.registry.register(tool)
        self.clock = FixedClock()
        self.store = PlanCountingStore()
        self.writes = Writes(
            self.registry, self.store, keyring(), clock=self.clock, new_id=sequential_ids("p")
        )
        self.gate = Gate(self.registry, writes=self.writes, clock=self.clock)

    async def propose(
        self, name: str, arguments: dict[str, Any], principal: Principal = ALICE
    ) -> Any:
        return await self.gate.handle(
            ToolCall(id="c1", name=f"workspace.{name}", arguments=json.dumps(arguments)),
            principal,
        )

    async def confirm(self, plan_id: str) -> None:
        token = await self.writes.issue_token(plan_id, ALICE)
        await self.writes.confirm(plan_id, token.value, ALICE)


async def test_a_write_runs_only_after_its_plan_is_confirmed(env: Env) -> None:
    world = World(env)
    env.write("a.txt", "v1\n")
    envelope = await world.propose("write_file", {"path": "a.txt", "content": "v2\nmore\n"})
    assert envelope.error_type is ErrorCode.NEEDS_CONFIRMATION
    assert envelope.data["impact"]["counts"] == {
        "files_changed": 1,
        "lines_added": 2,
        "lines_removed": 1,
    }
    assert (env.root / "a.txt").read_text() == "v1\n"
    plan_id = str(envelope.data["plan_id"])
    await world.confirm(plan_id)
    outcome = await world.writes.execute_plan(plan_id, ALICE)
    assert outcome.envelope.status is Status.OK
    assert (env.root / "a.txt").read_text() == "v2\nmore\n"
    assert outcome.record is not None
    change_id = outcome.record.business_id
    assert change_id is not None
    assert re.fullmatch("chg-[0-9a-f]{32}", change_id)
    again = await world.writes.execute_plan(plan_id, ALICE)
    assert again.replayed
    assert env.changes() == [change_id]


async def test_a_write_whose_outcome_is_unknown_is_settled_from_the_journal(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = World(env)
    env.write("a.txt", "v1\n")
    envelope = await world.propose("write_file", {"path": "a.txt", "content": "v2\n"})
    plan_id = str(envelope.data["plan_id"])
    await world.confirm(plan_id)
    real_save = _journal.Journal.save

    def crash_before_commit_is_recorded(journal: Any, record: Any) -> None:
        if record.state is ChangeState.COMMITTED:
            raise OSError(5, "I/O error")
        real_save(journal, record)

    monkeypatch.setattr(_journal.Journal, "save", crash_before_commit_is_recorded)
    outcome = await world.writes.execute_plan(plan_id, ALICE)
    monkeypatch.undo()
    assert outcome.envelope.error_type is ErrorCode.OUTCOME_UNKNOWN
    assert (env.root / "a.txt").read_text() == "v2\n"  # the renames happened
    world.clock.advance(3600)
    report = await Reconciler(world.registry, world.store, clock=world.clock).run_once()
    key = plan_key(tenant_id="t1", tool="workspace.write_file", plan_id=plan_id)
    assert report.succeeded == (key,)
    record = world.store.get_execution(key)
    assert record is not None
    assert record.business_id == change_id_for(key)


async def test_a_file_changed_after_confirmation_is_not_overwritten(env: Env) -> None:
    world = World(env)
    env.write("a.txt", "v1\n")
    patch = "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-v1\n+v2\n"
    envelope = await world.propose("apply_patch", {"patch": patch})
    plan_id = str(envelope.data["plan_id"])
    await world.confirm(plan_id)
    env.write("a.txt", "v1\n\n")  # the user edits; the hunk still matches line 1
    refused = await world.writes.execute_plan(plan_id, ALICE)
    assert refused.code is ErrorCode.VERSION_CONFLICT
    assert (env.root / "a.txt").read_text() == "v1\n\n"


async def test_a_patch_that_does_not_apply_never_becomes_a_plan(env: Env) -> None:
    world = World(env)
    env.write("a.txt", "v1\n")
    patch = "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-v0\n+v2\n"
    envelope = await world.propose("apply_patch", {"patch": patch})
    assert envelope.error_type is ErrorCode.CONFLICT
    assert "plan_id" not in (envelope.data or {})
    assert (env.root / "a.txt").read_text() == "v1\n"


async def test_a_dry_run_through_the_gate_still_needs_a_plan(env: Env) -> None:
    world = World(env)
    envelope = await world.propose("write_file", {"path": "a.txt", "content": "x", "dry_run": True})
    assert envelope.error_type is ErrorCode.NEEDS_CONFIRMATION
    assert not (env.root / "a.txt").exists()


# --- previews: dry runs as reads, with no plan -----------------------------------------------


def _journal_files(env: Env) -> dict[str, bytes]:
    return {
        str(p.relative_to(env.journal)): p.read_bytes()
        for p in sorted(env.journal.rglob("*"))
        if p.is_file()
    }


async def test_preview_write_answers_through_the_gate_with_no_plan_and_no_write(env: Env) -> None:
    world = World(env)
    env.write("a.txt", "one\ntwo\nthree\n")
    tree, journal = env.tree(), _journal_files(env)
    arguments = {"path": "a.txt", "content": "one\n2\nthree\nfour"}
    envelope = await world.propose("preview_write", arguments)
    assert envelope.status is Status.OK, envelope.summary
    assert world.store.plans == []
    assert world.store.list_executions() == []
    assert env.tree() == tree
    assert _journal_files(env) == journal
    assert envelope.data == await env.call("write_file", **arguments, dry_run=True)
    assert (envelope.data["lines_added"], envelope.data["lines_removed"]) == (2, 1)
    assert "-two\n+2\n" in envelope.data["diffs"][0]["diff"]
    assert envelope.data["uncommitted"] == []
    assert envelope.trust.value == "untrusted"
    # The same request as a dry run of the write tool still becomes a plan.
    dry = await world.propose("write_file", {**arguments, "dry_run": True})
    assert dry.error_type is ErrorCode.NEEDS_CONFIRMATION
    assert len(world.store.plans) == 1
    assert env.tree() == tree


async def test_preview_patch_answers_through_the_gate_with_no_plan_and_no_write(env: Env) -> None:
    world = World(env)
    env.write("gone.txt", "bye\n")
    env.write("keep.txt", "1\n2\n")
    patch = (
        "--- /dev/null\n+++ b/new/dir/made.txt\n@@ -0,0 +1,2 @@\n+hello\n+world\n"
        "--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n"
        "--- a/keep.txt\n+++ b/keep.txt\n@@ -2 +2,2 @@\n 2\n+3\n"
    )
    tree, journal = env.tree(), _journal_files(env)
    envelope = await world.propose("preview_patch", {"patch": patch})
    assert envelope.status is Status.OK, envelope.summary
    assert world.store.plans == []
    assert env.tree() == tree
    assert not (env.root / "new").exists()
    assert _journal_files(env) == journal
    assert envelope.data == await env.call("apply_patch", patch=patch, dry_run=True)
    assert [(f["path"], f["action"]) for f in envelope.data["files"]] == [
        ("new/dir/made.txt", "create"),
        ("gone.txt", "delete"),
        ("keep.txt", "modify"),
    ]
    assert (envelope.data["files_changed"], envelope.data["lines_added"]) == (3, 3)


async def test_previews_report_uncommitted_user_changes_and_leave_the_repository_alone(
    repo: Env,
) -> None:
    world = World(repo)
    repo.write("tracked.txt", "the user's work in progress\n")
    tree = repo.tree()  # .git included: git status must not even refresh the index
    assert any(path.startswith(".git/") for path in tree)
    write = await world.propose("preview_write", {"path": "tracked.txt", "content": "x\n"})
    assert write.status is Status.OK, write.summary
    assert write.data["uncommitted"] == ["tracked.txt"]
    assert write.data["git"] == "checked"
    patch = "--- a/tracked.txt\n+++ b/tracked.txt\n@@ -1 +1 @@\n-the user's work in progress\n+x\n"
    patched = await world.propose("preview_patch", {"patch": patch})
    assert patched.data["uncommitted"] == ["tracked.txt"]
    assert repo.tree() == tree
    assert world.store.plans == []
    # The real tools refuse what the previews only report.
    real = await world.propose("write_file", {"path": "tracked.txt", "content": "x\n"})
    assert real.error_type is ErrorCode.CONFLICT
    assert repo.tree() == tree


_PATCH_FOR_A = "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-{old}\n+new\n"


@pytest.mark.parametrize(
    ("tool", "arguments", "code"),
    [
        ("write_file", {"path": "../outside.txt", "content": "x"}, ErrorCode.INVALID_ARGUMENTS),
        ("write_file", {"path": ".git/config", "content": "x"}, ErrorCode.INVALID_ARGUMENTS),
        ("write_file", {"path": "dir", "content": "x"}, ErrorCode.INVALID_ARGUMENTS),
        ("write_file", {"path": "a.txt", "content": "x", "create_only": True}, ErrorCode.CONFLICT),
        (
            "write_file",
            {"path": "a.txt", "content": "x", "expected_sha256": "0" * 64},
            ErrorCode.VERSION_CONFLICT,
        ),
        ("write_file", {"path": "a.txt", "content": 7}, ErrorCode.INVALID_ARGUMENTS),
        ("apply_patch", {"patch": _PATCH_FOR_A.format(old="v0")}, ErrorCode.CONFLICT),
        ("apply_patch", {"patch": "just words\n"}, ErrorCode.INVALID_ARGUMENTS),
        (
            "apply_patch",
            {"patch": _PATCH_FOR_A.format(old="v1").replace("a.txt", "../a.txt")},
            ErrorCode.INVALID_ARGUMENTS,
        ),
        (
            "apply_patch",
            {"patch": "--- /dev/null\n+++ b/.git/hooks/x\n@@ -0,0 +1 @@\n+y\n"},
            ErrorCode.INVALID_ARGUMENTS,
        ),
    ],
)
async def test_a_preview_refuses_exactly_what_its_write_tool_refuses(
    env: Env, tool: str, arguments: dict[str, Any], code: ErrorCode
) -> None:
    world = World(env)
    env.write("a.txt", "v1\n")
    (env.root / "dir").mkdir()
    tree = env.tree()
    preview = "preview_write" if tool == "write_file" else "preview_patch"
    shown = await world.propose(preview, arguments)
    assert shown.error_type is code, shown.summary
    for real_arguments in (arguments, {**arguments, "dry_run": True}):
        real = await world.propose(tool, real_arguments)
        assert (real.error, real.summary) == (shown.error, shown.summary)
    assert world.store.plans == []
    assert env.tree() == tree


def test_previews_are_reads_that_need_the_write_permission(env: Env) -> None:
    for name in ("preview_write", "preview_patch"):
        tool = env.tools[name]
        spec = tool.spec
        assert spec.name == f"workspace.{name}"
        assert spec.risk is RiskLevel.L1_INTERNAL_READ
        assert spec.side_effect is SideEffect.NONE
        assert spec.read_only
        assert spec.hints.read_only is True
        assert spec.confirmation.mode is ConfirmationMode.NONE
        assert spec.results.trust.value == "untrusted"
        assert spec.permissions == frozenset({"workspace.write"})
        assert tool.reconcile is None
        assert tool.impact is None
    assert set(env.tools["preview_write"].spec.input_schema["properties"]) == {
        "path",
        "content",
        "create_only",
        "expected_sha256",
    }
    assert set(env.tools["preview_patch"].spec.input_schema["properties"]) == {"patch"}


async def test_a_preview_needs_the_permission_its_write_needs(env: Env) -> None:
    world = World(env)
    reader = Principal(user_id="rita", tenant_id="t1", permissions=frozenset())
    envelope = await world.propose("preview_write", {"path": "a.txt", "content": "x"}, reader)
    assert envelope.error_type is ErrorCode.PERMISSION_DENIED


def test_previews_can_be_turned_off(tmp_path: Path) -> None:
    env = Env(tmp_path, previews=False)
    assert sorted(env.tools) == sorted(WRITE_TOOLS)


async def test_a_preview_does_not_wait_for_a_change_being_applied(tmp_path: Path) -> None:
    env = Env(tmp_path, lock_timeout=0.05)
    env.write("a.txt", "v1\n")
    fd = os.open(env.journal / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        shown = await env.call("preview_write", path="a.txt", content="v2\n")
        await env.refused("write_file", ErrorCode.TRANSIENT, path="a.txt", content="v2\n")
    finally:
        os.close(fd)
    assert shown["files"][0]["action"] == "replace"
    assert (env.root / "a.txt").read_text() == "v1\n"
