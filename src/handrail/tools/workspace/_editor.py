"""The editor behind the workspace write tools: drafts a change, checks it, runs it once.

Owns the tools' configuration, checking every target (beneath the root, never through
a symbolic link, never into `.git`), drafting each change with its diff summary, its
plan's version and impact, and running it once under the journal's lock. It declares
no tool (`edits` does) and never overwrites a user's uncommitted work unless allowed.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from handrail.clock import Clock, SystemClock
from handrail.context import ToolContext
from handrail.declare.hooks import Reconciled
from handrail.errors import (
    ConfigurationError,
    Conflict,
    InvalidArgument,
    NotFound,
    ToolSignal,
    VersionConflict,
)
from handrail.plans import Impact
from handrail.principal import Principal
from handrail.tools.workspace._commit import FileOp, FileState, commit, file_changes, read_state
from handrail.tools.workspace._git import GitCheck, GitReport
from handrail.tools.workspace._journal import (
    APPLIED,
    ChangeRecord,
    ChangeState,
    Journal,
    change_id_for,
    content_sha256,
    reconcile_change,
)
from handrail.tools.workspace._patches import (
    Action,
    apply_file_patch,
    parse_patch,
    patchable_text,
    split_lines,
    text_diff,
)
from handrail.tools.workspace.paths import Workspace, WorkspaceFile

__all__ = ["Draft", "Editor", "EditsConfig"]

_NAMED_IN_IMPACT = 5


# --- configuration ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class EditsConfig:
    """Limits and choices of the workspace write tools; `journal_dir` has no default.

    `journal_dir` must lie outside the workspace. `overwrite_uncommitted=False` refuses
    (CONFLICT) a write to a file with uncommitted changes by the user in a git worktree;
    dry runs list such files either way. `git=None` skips that check. A deletion needs
    the requester's confirmation, or approval by holders of `delete_approver_permission`
    when set. `previews` adds the read-only `preview_write` and `preview_patch`, which
    show a dry run without a plan to confirm (they need `write_permission` too).
    """

    journal_dir: Path
    max_file_bytes: int = 2_000_000
    max_patch_bytes: int = 1_000_000
    max_patch_files: int = 100
    diff_excerpt_chars: int = 4_000
    overwrite_uncommitted: bool = False
    git: str | None = "git"
    git_timeout: float = 10.0
    lock_timeout: float = 10.0
    file_mode: int = 0o644
    write_permission: str | None = "workspace.write"
    delete_permission: str | None = "workspace.delete"
    delete_approver_permission: str | None = None
    previews: bool = True
    clock: Clock = field(default_factory=SystemClock)
    token: Callable[[int], str] = secrets.token_hex

    def __post_init__(self) -> None:
        limits = (self.max_file_bytes, self.max_patch_bytes, self.max_patch_files)
        if min(limits) < 1 or self.diff_excerpt_chars < 0:
            raise ConfigurationError("edit limits must be positive")
        if self.git_timeout <= 0 or self.lock_timeout <= 0:
            raise ConfigurationError("edit timeouts must be positive")
        if self.file_mode & ~0o777:
            raise ConfigurationError("file_mode holds permission bits only (at most 0o777)")


# --- drafts ----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class Draft:
    kind: str
    ops: tuple[FileOp, ...]
    files: tuple[dict[str, Any], ...]
    diffs: tuple[dict[str, Any], ...] = ()

    @property
    def targets(self) -> tuple[FileState, ...]:
        return tuple(op.before for op in self.ops)

    def totals(self) -> dict[str, int]:
        return {
            "files_changed": len(self.files),
            "lines_added": sum(int(f.get("lines_added", 0)) for f in self.files),
            "lines_removed": sum(int(f.get("lines_removed", 0)) for f in self.files),
        }


# --- the editor: drafts, checks, runs, reconciliation ----------------------------------------


class Editor:
    """Everything the tools do, over one workspace and one journal."""

    def __init__(self, workspace: Workspace, config: EditsConfig) -> None:
        self._ws = workspace
        self._config = config
        self._journal = Journal(config.journal_dir, workspace.root, config.token)
        self._git = GitCheck(workspace.root, binary=config.git, timeout=config.git_timeout)

    # reading

    def path(self, text: str) -> WorkspaceFile:
        file = self._ws.relative(text)
        self._ws.check_writable(file)
        return file

    def read(self, file: WorkspaceFile) -> FileState:
        """The target now, read without following links; refuses what is not a plain file."""
        return read_state(self._ws, file, self._config.max_file_bytes)

    def label(self, text: str) -> str:
        """The sha256 of a path's content, "absent", or why it cannot be read."""
        try:
            return self.read(self.path(text)).label
        except ToolSignal as signal:
            return f"refused:{signal.code}"

    def version(self, paths: Iterable[str]) -> str:
        """One version for the current state of all `paths`, bound into a plan."""
        digest = hashlib.sha256()
        for text in sorted(set(paths)):
            digest.update(json.dumps([text, self.label(text)]).encode())
        return f"sha256:{digest.hexdigest()}"

    # drafting

    def plan_write(
        self, path: str, content: str, *, create_only: bool, expected_sha256: str | None
    ) -> Draft:
        file = self.path(path)
        data = content.encode("utf-8")  # the schema already refused lone surrogates
        self._check_size(file, data)
        before = self.read(file)
        if create_only and before.data is not None:
            raise Conflict(f"{file.text} exists already and create_only is set; nothing written.")
        if expected_sha256 is not None and before.sha != expected_sha256:
            raise VersionConflict(
                f"{file.text} is not the version you read (its sha256 is {before.label}); "
                f"re-read it. Nothing was written."
            )
        old_text = (before.data or b"").decode("utf-8", "replace")
        diff = text_diff(file.text, old_text, content, limit=self._config.diff_excerpt_chars)
        if before.data == data:
            action = "unchanged"
        else:
            action = "create" if before.data is None else "replace"
        summary = {
            "path": file.text,
            "action": action,
            "lines_added": diff.added,
            "lines_removed": diff.removed,
            "bytes": len(data),
            "sha256": content_sha256(data),
        }
        mode = self._config.file_mode if before.mode is None else before.mode
        ops = () if action == "unchanged" else (FileOp(before=before, after=data, mode=mode),)
        return Draft(
            kind="write_file",
            ops=ops,
            files=(summary,),
            diffs=({"path": file.text, "diff": diff.excerpt, "truncated": diff.truncated},),
        )

    def patch_paths(self, patch: str) -> list[str]:
        """Every path the patch names (for versions); [] when it cannot be parsed."""
        try:
            parsed = parse_patch(patch, max_files=self._config.max_patch_files)
        except ToolSignal:
            return []
        return sorted(parsed.mentioned | {p for f in parsed.files for p in (f.old, f.new) if p})

    def plan_patch(self, patch: str) -> Draft:
        if len(patch.encode("utf-8", "surrogatepass")) > self._config.max_patch_bytes:
            raise InvalidArgument(
                f"The patch is larger than {self._config.max_patch_bytes} bytes; split it."
            )
        parsed = parse_patch(patch, max_files=self._config.max_patch_files)
        for name in sorted(parsed.mentioned):
            self.path(name)
        ops: list[FileOp] = []
        files: list[dict[str, Any]] = []
        seen: set[str] = set()
        for fp in parsed.files:
            old = None if fp.old is None else self.path(fp.old)
            new = None if fp.new is None else self.path(fp.new)
            for name in {f.text for f in (old, new) if f is not None}:
                if name in seen:
                    raise InvalidArgument(f"The patch changes {name} more than once; merge them.")
                seen.add(name)
            source = None if old is None else self.read(old)
            target = None if new is None or new == old else self.read(new)
            shown = (new or old or WorkspaceFile(())).text
            if target is not None and target.data is not None:
                raise Conflict(f"{shown} exists already; the patch would create it.")
            if source is not None and source.data is None:
                raise Conflict(f"{source.file.text} does not exist; the patch expects it.")
            original = None if source is None else patchable_text(source.file.text, source.data)
            text = apply_file_patch(shown, original, fp)
            data = text.encode("utf-8")
            self._check_size(new or old or WorkspaceFile(()), data)
            if fp.action is Action.DELETE and text:
                raise Conflict(f"The patch deletes {shown} but does not remove all of its lines.")
            if source is not None and (fp.action is not Action.MODIFY):
                ops.append(FileOp(before=source, after=None, mode=0))
            mode = fp.mode if source is None else source.mode
            mode = self._config.file_mode if mode is None else mode
            if target is not None:
                ops.append(FileOp(before=target, after=data, mode=mode))
            elif source is not None and fp.action is Action.MODIFY:
                ops.append(FileOp(before=source, after=data, mode=mode))
            summary: dict[str, Any] = {
                "path": shown,
                "action": fp.action.value,
                "hunks": len(fp.hunks),
                "lines_added": fp.added,
                "lines_removed": fp.removed,
                "sha256": None if fp.action is Action.DELETE else content_sha256(data),
            }
            if fp.action is Action.RENAME and old is not None:
                summary["old_path"] = old.text
            files.append(summary)
        return Draft(kind="apply_patch", ops=tuple(ops), files=tuple(files))

    def plan_delete(self, path: str) -> Draft:
        file = self.path(path)
        state = self.read(file)
        if state.data is None:
            raise NotFound(f"{file.text} does not exist in the workspace.")
        lines = len(split_lines(state.data.decode("utf-8", "replace")))
        summary = {"path": file.text, "action": "delete", "lines_removed": lines, "sha256": None}
        return Draft(
            kind="delete_file",
            ops=(FileOp(before=state, after=None, mode=0),),
            files=(summary,),
        )

    def record(self, change_id: str, principal: Principal | None) -> ChangeRecord:
        """A recorded change this principal's tenant may see; NotFound otherwise."""
        record = self._journal.load(change_id)
        if record is None or (
            principal is not None
            and record.tenant_id is not None
            and record.tenant_id != principal.tenant_id
        ):
            raise NotFound(f"There is no change {change_id}.")
        return record

    def plan_revert(
        self, change_id: str, principal: Principal | None, *, force: bool = False
    ) -> Draft:
        record = self.record(change_id, principal)
        if record.state is ChangeState.REVERTED:
            raise Conflict(f"Change {change_id} was already reverted by {record.reverted_by}.")
        if record.state is ChangeState.ROLLED_BACK:
            raise Conflict(f"Change {change_id} was never applied; there is nothing to revert.")
        ops: list[FileOp] = []
        files: list[dict[str, Any]] = []
        for entry in record.files:
            file = self.path(entry.path)
            state = self.read(file)
            if state.sha == entry.before_sha256:
                continue  # already as before (a change that stopped half-way)
            if state.sha != entry.after_sha256 and not force:
                raise VersionConflict(
                    f"{file.text} changed after change {change_id}; it was not reverted. "
                    f"Nothing was written."
                )
            before = (
                None if entry.before_sha256 is None else self._journal.blob(entry.before_sha256)
            )
            mode = self._config.file_mode if entry.before_mode is None else entry.before_mode
            ops.append(FileOp(before=state, after=before, mode=mode))
            files.append(
                {
                    "path": file.text,
                    "action": "delete" if before is None else "restore",
                    "sha256": entry.before_sha256,
                }
            )
        return Draft(kind="revert", ops=tuple(ops), files=tuple(files))

    # git

    def git(self, draft: Draft, ctx: ToolContext | None) -> GitReport:
        """Which targets hold uncommitted changes made by the user (not by this journal)."""
        remaining = None if ctx is None else ctx.remaining()
        return self._git.user_changes(
            draft.targets, written=self._journal.written, remaining=remaining
        )

    # running

    def check(self, build: Callable[[], Draft], ctx: ToolContext, *, dry_run: bool) -> None:
        """Stage 3: refuse before any plan what could not be applied now."""
        draft = build()
        if not dry_run and not self._config.overwrite_uncommitted:
            self._refuse_user_changes(self.git(draft, ctx))

    def impact(self, build: Callable[[], Draft], action: str) -> Impact:
        draft = build()
        totals = draft.totals()
        paths = [str(f["path"]) for f in draft.files]
        more = len(paths) - _NAMED_IN_IMPACT
        target = ", ".join(paths[:_NAMED_IN_IMPACT]) + (f" and {more} more" if more > 0 else "")
        return Impact(
            action=action,
            target=target or "(no files)",
            reversible=True,
            counts=totals,
            notes=tuple(f"{f['action']} {f['path']}" for f in draft.files[:20]),
        )

    def preview(self, ctx: ToolContext | None, build: Callable[[], Draft]) -> dict[str, Any]:
        """What a change would do, from the files as they are now; writes nothing."""
        draft = build()
        git = self.git(draft, ctx)
        return {
            "dry_run": True,
            "files": list(draft.files),
            "diffs": list(draft.diffs),
            **draft.totals(),
            "uncommitted": list(git.user_changes),
            "git": git.note,
        }

    def run(
        self,
        ctx: ToolContext | None,
        build: Callable[[], Draft],
        targets: Callable[[], Iterable[str]],
        *,
        dry_run: bool,
        check_git: bool = True,
        reverts: str | None = None,
    ) -> dict[str, Any]:
        """Apply a change once (or preview it), under the journal's lock."""
        if dry_run:
            return self.preview(ctx, build)
        key = None if ctx is None else ctx.idempotency_key
        change_id = change_id_for(key) if key else f"chg-{self._config.token(16)}"
        with self._journal.lock(self._config.lock_timeout):
            earlier = self._journal.load(change_id) if key else None
            if earlier is not None and earlier.state in APPLIED:
                return dict(earlier.result)  # the same key ran before: one effect
            draft = build()
            expected = None if ctx is None else ctx.expected_version
            if expected is not None and self.version(targets()) != expected:
                raise VersionConflict(
                    "The files changed after the plan was confirmed; nothing was written. "
                    "Re-read them and propose the change again."
                )
            git = self.git(draft, ctx) if check_git else GitReport(note="not checked")
            if not self._config.overwrite_uncommitted:
                self._refuse_user_changes(git)
            principal = None if ctx is None else ctx.principal
            result = {
                "change_id": change_id if draft.ops else None,
                "files": list(draft.files),
                **draft.totals(),
                "uncommitted_overwritten": list(git.user_changes),
                "git": git.note,
            }
            if not draft.ops:
                return result
            record = ChangeRecord(
                change_id=change_id,
                kind=draft.kind,
                state=ChangeState.PREPARED,
                created_at=self._config.clock.now(),
                idempotency_key=key,
                user_id=None if principal is None else principal.user_id,
                tenant_id=None if principal is None else principal.tenant_id,
                files=file_changes(draft.ops),
                result=result,
                reverts=reverts,
            )
            commit(
                self._journal,
                self._ws,
                record,
                draft.ops,
                file_mode=self._config.file_mode,
                token=self._config.token,
            )
            return result

    @staticmethod
    def _refuse_user_changes(git: GitReport) -> None:
        if git.user_changes:
            shown = ", ".join(git.user_changes[:5])
            raise Conflict(
                f"The user has uncommitted changes in {shown}; git could not restore them, so "
                f"nothing was written. Ask the user to commit or stash them first."
            )

    def _check_size(self, file: WorkspaceFile, data: bytes) -> None:
        if len(data) > self._config.max_file_bytes:
            raise InvalidArgument(
                f"The new content of {file.text} is larger than "
                f"{self._config.max_file_bytes} bytes."
            )

    def reconcile(self, key: str) -> Reconciled:
        """What became of the write made under `key`, from the journal and the files."""
        return reconcile_change(self._journal, change_id_for(key), self.label)
