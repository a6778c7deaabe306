"""Audit events of skills: offered, loaded (how much), reference read, script run.

Owns their wording in the trail: kind `skill`, the stage says what happened, the
subject names the meta-tool and who called it, the detail holds the facts as JSON
(skill, path, characters, tokens, truncated, exit code). It never decides anything.
"""

from __future__ import annotations

from collections.abc import Iterable

from handrail.clock import Clock, SystemClock
from handrail.context import ToolContext
from handrail.events import AuditSubject
from handrail.record.audit import Auditor, AuditSink

__all__ = ["SkillAudit"]

_KIND = "skill"


class SkillAudit:
    """Records what the skill tools and the host did with skills; a None sink records nothing."""

    def __init__(self, sink: AuditSink | None, *, clock: Clock | None = None) -> None:
        self._auditor = Auditor(sink, clock or SystemClock())

    def offered(self, names: Iterable[str], *, by: str, tool: str | None = None) -> None:
        """Skills offered: listed in `load_skill`'s description, or picked by a selector."""
        self._auditor.note(
            kind=_KIND,
            stage="offered",
            decision=by,
            subject=AuditSubject(tool=tool),
            facts={"skills": sorted(names)},
        )

    def served(self, ctx: ToolContext, stage: str, facts: dict[str, object]) -> None:
        """A skill tool gave the model something (`stage`: loaded, reference, script)."""
        self._note(ctx, stage, "served", None, facts)

    def refused(self, ctx: ToolContext, stage: str, code: str, facts: dict[str, object]) -> None:
        """A skill tool refused a request (unknown skill, path or script; not text; ...)."""
        self._note(ctx, stage, "refused", code, facts)

    def _note(
        self,
        ctx: ToolContext,
        stage: str,
        decision: str,
        code: str | None,
        facts: dict[str, object],
    ) -> None:
        subject = AuditSubject(
            request_id=ctx.principal.request_id,
            tool_call_id=ctx.call_id,
            tool=ctx.tool,
            user_id=ctx.principal.user_id,
            tenant_id=ctx.principal.tenant_id,
        )
        self._auditor.note(
            kind=_KIND,
            stage=stage,
            decision=decision,
            subject=subject,
            code=code,
            facts=facts,
        )
