"""A call through the gate inside its `execute_tool` span, which notes its stages.

Owns making the call's CallSpans (the audit trail inside it when the audit is on) and
awaiting the gate's `handle` again with it. Used only by a gate with telemetry; never
decides anything about the call.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from handrail.gate._refusals import proposed_name
from handrail.record.trail import CallTrail

if TYPE_CHECKING:
    from handrail.calls import ToolCall
    from handrail.clock import Clock
    from handrail.envelope import Envelope
    from handrail.principal import Principal
    from handrail.record.audit import Auditor
    from handrail.telemetry import Telemetry
    from handrail.telemetry._calls import CallSpans
    from handrail.writes.outcome import WriteOutcome

__all__ = ["traced"]


async def traced(
    telemetry: Telemetry,
    call: ToolCall,
    principal: Principal,
    again: Callable[..., Coroutine[Any, Any, Envelope]],
    *,
    auditor: Auditor,
    clock: Clock,
    scrub: Callable[[str], str],
    outcome: list[WriteOutcome] | None,
) -> Envelope:
    """`again(_outcome=..., _spans=...)`, the gate's handle, inside the call's span.

    The write outcome the gate appends (to `outcome`, or to a list of this call's own)
    gives the span its plan id, key hash and attempt.
    """
    from handrail.telemetry._calls import CallSpans  # noqa: PLC0415 - only with telemetry

    audit = CallTrail(auditor, clock, call, principal) if auditor.enabled else None
    spans: CallSpans = CallSpans(
        telemetry, call, principal, name=proposed_name(call), audit=audit, scrub=scrub
    )
    written = [] if outcome is None else outcome
    return await spans.run(again(_outcome=written, _spans=spans), written)
