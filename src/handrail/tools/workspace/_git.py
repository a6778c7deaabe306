"""The check for a user's uncommitted work in a git worktree, before a workspace write.

Owns running git safely (a fixed argument vector, a clean environment without user or
system config, no fsmonitor, no bare repository found by accident, a bounded timeout)
and telling which targets hold changes the journal did not write. Never decides
whether a write may go ahead: `edits` does that with the report.

git opens the targets by name, so a directory swapped for a symbolic link while it runs
could make it look at a file outside the workspace. Nothing of such a file reaches the
model: git is given only the write's own checked paths (after `--`, as literal
pathspecs) and what is read from its output is which of those paths differ from the
index, never content or other names; git writes nothing (no optional locks).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from handrail.errors import ToolFailed, ToolRetryable
from handrail.tools.workspace._commit import FileState

__all__ = ["GitCheck", "GitReport"]


@dataclass(frozen=True, kw_only=True, slots=True)
class GitReport:
    """How the check went (`note`, shown to the model) and the targets the user changed."""

    note: str
    user_changes: tuple[str, ...] = ()


class GitCheck:
    """`git status` over one workspace root, with the host's binary and timeout.

    `binary=None` turns the check off; a missing git or a directory outside any
    worktree is noted, not refused. Git failing or timing out refuses the write.
    """

    def __init__(self, root: Path, *, binary: str | None, timeout: float) -> None:
        self._root = root
        self._binary = binary
        self._timeout = timeout

    def user_changes(
        self,
        states: Sequence[FileState],
        *,
        written: Callable[[str], str | None],
        remaining: float | None,
    ) -> GitReport:
        """Which of `states` git reports as changed, unless `written` says we left them so.

        `remaining` is the caller's time left (None: no deadline); git gets no more.
        """
        timeout = self._timeout if remaining is None else max(0.1, min(self._timeout, remaining))
        if not states:
            return GitReport(note="no files to check")
        note, dirty = self._status([s.file.text for s in states], timeout)
        users = tuple(
            s.file.text for s in states if s.file.text in dirty and written(s.file.text) != s.label
        )
        return GitReport(note=note, user_changes=users)

    def _status(self, paths: Sequence[str], timeout: float) -> tuple[str, set[str]]:
        if self._binary is None:
            return "not checked: the host turned the git check off", set()
        exe = shutil.which(self._binary)
        if exe is None:
            return "not checked: git is not installed", set()
        # core.fsmonitor would run a configured program; a bare repository planted in the
        # workspace must not be picked up as the repository.
        base = [exe, "-c", "core.fsmonitor=false", "-c", "safe.bareRepository=explicit"]
        base += ["-C", str(self._root)]
        probe = _run([*base, "rev-parse", "--is-inside-work-tree", "--show-prefix"], timeout)
        lines = probe.stdout.decode("utf-8", "surrogateescape").split("\n")
        no_repository = b"not a git repository" in probe.stderr
        bare = b"bare repository" in probe.stderr or lines[0] == "false"
        if no_repository or bare:
            return "not a git worktree", set()
        if probe.returncode != 0 or lines[0] != "true":
            raise ToolFailed(
                "Uncommitted changes could not be checked: git refused to inspect the "
                "workspace. Nothing was written; ask the operator."
            )
        prefix = lines[1] if len(lines) > 1 else ""
        status = _run(
            [
                *base,
                "status",
                "--porcelain=v1",
                "-z",
                "--untracked-files=all",
                "--ignore-submodules=all",
                "--no-renames",
                "--",
                *paths,
            ],
            timeout,
        )
        if status.returncode != 0:
            raise ToolFailed(
                "Uncommitted changes could not be checked: git status failed. Nothing was "
                "written; ask the operator."
            )
        dirty = set()
        for entry in status.stdout.split(b"\0"):
            name = os.fsdecode(entry[3:])  # each entry is "XY <path>"
            if name.startswith(prefix) and len(name) > len(prefix):
                dirty.add(name[len(prefix) :])
        return "checked", dirty


def _run(argv: list[str], timeout: float) -> subprocess.CompletedProcess[bytes]:
    env = {
        "PATH": os.defpath,
        "LC_ALL": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_LITERAL_PATHSPECS": "1",
        "GIT_OPTIONAL_LOCKS": "0",
    }
    try:
        return subprocess.run(  # noqa: S603 - a fixed argument vector; paths come after `--`
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ToolRetryable(
            "Checking for uncommitted changes timed out; nothing was written.",
            retry_after=5.0,
        ) from None
