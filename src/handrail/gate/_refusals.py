"""Refusals and failures as the envelope the model reads: made exactly once, here.

Owns the refused envelope (a business rule's candidates redacted, and the whole labelled
by who wrote its words), the generic failure that hides what broke, the refusal of a
repeated call id and the bounded name a refused call proposed. Never decides whether to
refuse.
"""

from __future__ import annotations

from handrail.calls import ToolCall
from handrail.clock import Clock
from handrail.declare.definition import Tool
from handrail.envelope import HANDRAIL_SOURCE, Envelope, ErrorDetail, Status, Trust
from handrail.errors import ErrorCode, Refusal
from handrail.gate._invocation import GENERIC_FAILURE
from handrail.principal import Principal
from handrail.record.audit import Auditor
from handrail.record.trail import MAX_NAME_IN_AUDIT, CallTrail
from handrail.shaping.shaper import Shaper
from handrail.text import escape_lone_surrogates

__all__ = ["duplicate_id", "failed", "proposed_name", "refused"]


def refused(shaper: Shaper, call: ToolCall, tool: Tool | None, refusal: Refusal) -> Envelope:
    """The envelope of a refusal, labelled by who wrote its words.

    A signal a tool raised (its message, its candidates) is untrusted data of the tool.
    Handrail's wording is trusted only when it quotes nothing: field errors name the
    model's own fields and may quote its values, so they are untrusted, from Handrail.
    """
    # Candidates are a business rule's data (possibly personal): redacted.
    candidates = refusal.candidates
    if candidates:
        candidates = tuple(shaper.redact_value(list(candidates)))
    if refusal.from_tool or candidates:
        trust, source = Trust.UNTRUSTED, None
    elif refusal.field_errors:
        trust, source = Trust.UNTRUSTED, HANDRAIL_SOURCE
    else:
        trust, source = Trust.HANDRAIL, HANDRAIL_SOURCE
    return Envelope(
        call_id=call.id,
        tool=tool.spec.name if tool else proposed_name(call),
        status=Status.ERROR,
        summary=refusal.summary,
        schema_version=tool.spec.schema_version if tool else None,
        error=ErrorDetail(
            code=refusal.code,
            retryable=refusal.retryable,
            retry_after=refusal.retry_after,
            field_errors=refusal.field_errors,
            candidates=candidates,
        ),
        trust=trust,
        source=source,
    )


def failed(shaper: Shaper, call: ToolCall, tool: Tool | None) -> Envelope:
    """The envelope of an unexpected failure: FAILED_FINAL, saying nothing of the cause."""
    refusal = Refusal(ErrorCode.FAILED_FINAL, GENERIC_FAILURE, stage="gate", retryable=False)
    return refused(shaper, call, tool, refusal)


def duplicate_id(
    call: ToolCall,
    principal: Principal,
    *,
    shaper: Shaper,
    auditor: Auditor,
    clock: Clock,
) -> Envelope:
    """A call whose id another call of the same turn already has: refused and audited."""
    refusal = Refusal(
        ErrorCode.INVALID_ARGUMENTS,
        "Another call in this turn has the same id; this one was not run.",
        stage="lookup",
        detail="duplicate call id in one batch",
    )
    if auditor.enabled:
        trail = CallTrail(auditor, clock, call, principal)
        trail.record(refusal.stage, "refused", code=refusal.code, detail=refusal.detail)
        trail.emit()
    return refused(shaper, call, None, refusal)


def proposed_name(call: ToolCall) -> str:
    """The name a refused call proposed, bounded, and writable as UTF-8 (for any log)."""
    return escape_lone_surrogates(str(call.name)[:MAX_NAME_IN_AUDIT])[:MAX_NAME_IN_AUDIT]
