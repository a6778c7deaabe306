"""Workspace writes: `write_file`, `apply_patch`, `delete_file` and `revert_change`.

Owns the tools' declarations (schemas, risk, confirmation, idempotency, hooks), the
read-only `preview_write` and `preview_patch`, and the host's `rollback` and
`load_change`. What each change does is drafted, checked and run by `_editor`, applied
by `_commit` and recorded by `_journal`; git is asked by `_git`. Never overwrites a
user's uncommitted work unless the host allows it.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from handrail.context import ToolContext
from handrail.declare.definition import Tool, tool
from handrail.declare.hooks import Reconciled
from handrail.envelope import Trust
from handrail.errors import ToolSignal, WriteRefusedError
from handrail.shaping.policy import ResultPolicy
from handrail.spec import (
    ConfirmationMode,
    ConfirmationPolicy,
    IdempotencyMode,
    IdempotencyPolicy,
    RiskLevel,
    SideEffect,
    ToolHints,
)
from handrail.tools.workspace._editor import Draft, Editor, EditsConfig
from handrail.tools.workspace._journal import (
    ChangeRecord,
    ChangeState,
    FileChange,
    Journal,
    change_id_for,
)
from handrail.tools.workspace.paths import MAX_PATH_CHARS, Workspace

__all__ = [
    "ChangeRecord",
    "ChangeState",
    "EditsConfig",
    "FileChange",
    "change_id_for",
    "edit_tools",
    "load_change",
    "rollback",
]

_MAX_CONTENT_CHARS = 16_000_000
_MAX_PATCH_CHARS = 16_000_000

PathText = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_PATH_CHARS,
        description="A file path relative to the workspace root, with '/' between parts.",
    ),
]
Content = Annotated[
    str,
    Field(max_length=_MAX_CONTENT_CHARS, description="The complete new content (UTF-8 text)."),
]
Sha256 = Annotated[
    str,
    Field(
        pattern=r"^[0-9a-f]{64}$",
        description="The sha256 (hex) of the content you read; the write is refused if the "
        "file changed since.",
    ),
]
PatchText = Annotated[
    str,
    Field(
        min_length=1,
        max_length=_MAX_PATCH_CHARS,
        description="A unified diff (as from `git diff` or `diff -u`) with paths relative to "
        "the workspace root; a/ and b/ prefixes are fine. Hunks must match the files exactly.",
    ),
]
ChangeId = Annotated[
    str,
    Field(pattern=r"^chg-[0-9a-f]{32}$", description="The change_id an earlier write returned."),
]


# --- the tools -------------------------------------------------------------------------------


def edit_tools(
    workspace: Workspace, config: EditsConfig, *, namespace: str = "workspace"
) -> list[Tool]:
    """`write_file`, `apply_patch`, `delete_file` and `revert_change` over one workspace.

    Writes are L2 and need the requester's confirmation of a plan that binds the
    current sha256 of every target; `delete_file` is L3. Every applied change returns a
    `change_id`; `revert_change` (or the host's `rollback`) undoes it. With
    `config.previews`, also `preview_write` and `preview_patch`: L1 reads that return a
    dry run's summary at once, since a write tool's `dry_run` still becomes a plan (the
    gate decides by the tool's spec, not by its arguments).
    """
    editor = Editor(workspace, config)
    keyed = IdempotencyPolicy(mode=IdempotencyMode.PLAN)
    untrusted = ResultPolicy(trust=Trust.UNTRUSTED)
    write_perms = {config.write_permission} if config.write_permission else set()

    def write(*, idempotent: bool) -> dict[str, Any]:
        """The declarations every reversible write shares."""
        return {
            "risk": RiskLevel.L2_REVERSIBLE_WRITE,
            "namespace": namespace,
            "side_effect": SideEffect.EXTERNAL_WRITE,
            "permissions": write_perms,
            "confirmation": ConfirmationPolicy(mode=ConfirmationMode.CONFIRM),
            "idempotency": keyed,
            "hints": ToolHints(read_only=False, destructive=False, idempotent=idempotent),
            "results": untrusted,
            "reconcile": reconcile,
            "business_id": "change_id",
        }

    def reconcile(key: str, _ctx: ToolContext) -> Reconciled:
        return editor.reconcile(key)

    def draft_write(args: Any) -> Draft:  # noqa: ANN401 - the tool's argument model
        return editor.plan_write(
            args.path,
            args.content,
            create_only=args.create_only,
            expected_sha256=args.expected_sha256,
        )

    def check_write(args: Any, ctx: ToolContext) -> None:  # noqa: ANN401
        editor.check(lambda: draft_write(args), ctx, dry_run=args.dry_run)

    @tool(
        **write(idempotent=True),
        validators=[check_write],
        resolve_version=lambda a, _c: editor.version([a.path]),
        impact=lambda a, _c: editor.impact(lambda: draft_write(a), "write file"),
    )
    def write_file(
        ctx: ToolContext,
        *,
        path: PathText,
        content: Content,
        create_only: bool = False,
        expected_sha256: Sha256 | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Create or replace a whole file with new text, atomically.

        create_only refuses to replace an existing file; expected_sha256 refuses if the
        file is no longer the version you based the new content on. dry_run shows the
        diff without writing. Returns a change_id that revert_change can undo.
        """
        return editor.run(
            ctx,
            lambda: editor.plan_write(
                path, content, create_only=create_only, expected_sha256=expected_sha256
            ),
            lambda: [path],
            dry_run=dry_run,
        )

    def check_patch(args: Any, ctx: ToolContext) -> None:  # noqa: ANN401
        editor.check(lambda: editor.plan_patch(args.patch), ctx, dry_run=args.dry_run)

    @tool(
        **write(idempotent=False),
        validators=[check_patch],
        resolve_version=lambda a, _c: editor.version(editor.patch_paths(a.patch)),
        impact=lambda a, _c: editor.impact(lambda: editor.plan_patch(a.patch), "apply patch to"),
    )
    def apply_patch(ctx: ToolContext, patch: PatchText, dry_run: bool = False) -> dict[str, Any]:
        """Apply a unified diff to files in the workspace: all files or none.

        Every hunk must match the file exactly at the line its header names (no fuzz);
        files may be created, deleted and renamed. dry_run reports per-file changes
        without writing. Returns a change_id that revert_change can undo.
        """
        return editor.run(
            ctx,
            lambda: editor.plan_patch(patch),
            lambda: editor.patch_paths(patch),
            dry_run=dry_run,
        )

    def check_delete(args: Any, ctx: ToolContext) -> None:  # noqa: ANN401
        editor.check(lambda: editor.plan_delete(args.path), ctx, dry_run=False)

    approver = config.delete_approver_permission
    deletion = {
        **write(idempotent=False),
        "risk": RiskLevel.L3_HIGH_RISK_WRITE,
        "permissions": {config.delete_permission} if config.delete_permission else set(),
        "confirmation": ConfirmationPolicy(
            mode=ConfirmationMode.APPROVE if approver else ConfirmationMode.CONFIRM,
            approver_permission=approver,
        ),
        "hints": ToolHints(read_only=False, destructive=True, idempotent=False),
    }

    @tool(
        **deletion,
        validators=[check_delete],
        resolve_version=lambda a, _c: editor.version([a.path]),
        impact=lambda a, _c: editor.impact(lambda: editor.plan_delete(a.path), "delete"),
    )
    def delete_file(ctx: ToolContext, path: PathText) -> dict[str, Any]:
        """Delete one file (never a directory). Returns a change_id that revert_change can undo."""
        return editor.run(ctx, lambda: editor.plan_delete(path), lambda: [path], dry_run=False)

    def revert_paths(change_id: str, ctx: ToolContext) -> list[str]:
        try:
            return [f.path for f in editor.record(change_id, ctx.principal).files]
        except ToolSignal:
            return []

    def check_revert(args: Any, ctx: ToolContext) -> None:  # noqa: ANN401
        editor.check(lambda: editor.plan_revert(args.change_id, ctx.principal), ctx, dry_run=False)

    @tool(
        **write(idempotent=False),
        validators=[check_revert],
        resolve_version=lambda a, c: editor.version(revert_paths(a.change_id, c)),
        impact=lambda a, c: editor.impact(
            lambda: editor.plan_revert(a.change_id, c.principal), "revert change"
        ),
    )
    def revert_change(ctx: ToolContext, change_id: ChangeId) -> dict[str, Any]:
        """Undo an earlier change by its change_id, if its files were not changed since."""
        return editor.run(
            ctx,
            lambda: editor.plan_revert(change_id, ctx.principal),
            lambda: revert_paths(change_id, ctx),
            dry_run=False,
            reverts=change_id,
        )

    writes = [write_file, apply_patch, delete_file, revert_change]
    if not config.previews:
        return writes

    reads: dict[str, Any] = {
        "risk": RiskLevel.L1_INTERNAL_READ,
        "namespace": namespace,
        "permissions": write_perms,
        "hints": ToolHints(read_only=True, destructive=False, idempotent=True),
        "results": untrusted,
    }

    def check_write_preview(args: Any, ctx: ToolContext) -> None:  # noqa: ANN401
        editor.check(lambda: draft_write(args), ctx, dry_run=True)

    @tool(**reads, validators=[check_write_preview])
    def preview_write(
        ctx: ToolContext,
        *,
        path: PathText,
        content: Content,
        create_only: bool = False,
        expected_sha256: Sha256 | None = None,
    ) -> dict[str, Any]:
        """Show what write_file with these arguments would do, without writing anything.

        Needs no confirmation. Returns the diff, the lines added and removed, and which
        files hold uncommitted changes by the user; refuses what write_file refuses.
        """
        return editor.preview(
            ctx,
            lambda: editor.plan_write(
                path, content, create_only=create_only, expected_sha256=expected_sha256
            ),
        )

    def check_patch_preview(args: Any, ctx: ToolContext) -> None:  # noqa: ANN401
        editor.check(lambda: editor.plan_patch(args.patch), ctx, dry_run=True)

    @tool(**reads, validators=[check_patch_preview])
    def preview_patch(ctx: ToolContext, patch: PatchText) -> dict[str, Any]:
        """Show what apply_patch would do with this patch, without writing anything.

        Needs no confirmation. Returns per-file actions, the lines added and removed,
        and which files hold uncommitted changes by the user; refuses what apply_patch
        refuses (a patch that does not apply, paths outside the workspace or in .git).
        """
        return editor.preview(ctx, lambda: editor.plan_patch(patch))

    return [*writes, preview_write, preview_patch]


# --- host-side functions -------------------------------------------------------------------------


def rollback(
    workspace: Workspace, config: EditsConfig, change_id: str, *, force: bool = False
) -> dict[str, Any]:
    """Undo a recorded change for the host (an operator), by its change id.

    Files changed since, or holding uncommitted changes of the user, are refused
    (VERSION_CONFLICT, CONFLICT) unless `force`. The undo is a change of its own,
    recorded and itself revertible. Refusals are WriteRefusedError with the code.
    """
    editor = Editor(workspace, config)
    try:
        return editor.run(
            None,
            lambda: editor.plan_revert(change_id, None, force=force),
            lambda: [f.path for f in editor.record(change_id, None).files],
            dry_run=False,
            check_git=not force,
            reverts=change_id,
        )
    except ToolSignal as signal:
        raise WriteRefusedError(signal.code, signal.message) from None


def load_change(workspace: Workspace, config: EditsConfig, change_id: str) -> ChangeRecord | None:
    """The journal's record of a change, for people and tools of the host."""
    return Journal(config.journal_dir, workspace.root, config.token).load(change_id)
