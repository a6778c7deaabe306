"""Stage 4 and the quota as the gate runs them: the policy's question and what its answer means.

Owns the context the policy is told (call id, risk, side effect, conversation), what a
decision leaves of a call (its refusal, or the confirmation a write needs) and the
quota's refusals. Never decides itself: the Policy and the Limiter do.
"""

from __future__ import annotations

from handrail.authz.policy import Decision, Outcome, Policy, refusal_for
from handrail.authz.quota import Limiter
from handrail.calls import ToolCall
from handrail.declare.definition import BoundArguments, Tool
from handrail.errors import ErrorCode, Refusal, StoreError
from handrail.principal import Principal
from handrail.record.trail import describe_exception
from handrail.spec import ConfirmationMode, ConfirmationPolicy, ToolSpec
from handrail.writes.service import stricter

__all__ = ["admit", "decide", "settle"]

_ASKS = {Outcome.CONFIRM: ConfirmationMode.CONFIRM, Outcome.APPROVE: ConfirmationMode.APPROVE}


async def decide(
    policy: Policy,
    tool: Tool,
    bound: BoundArguments,
    principal: Principal,
    call: ToolCall,
    *,
    conversation: str | None,
) -> Decision:
    """Ask the policy about this call: the validated arguments are the resource."""
    return await policy.decide(
        principal,
        tool.spec.name,
        bound.value,
        {
            "call_id": call.id,
            "risk": tool.spec.risk,
            "side_effect": tool.spec.side_effect,
            "conversation": conversation,
        },
    )


def settle(
    decision: Decision,
    spec: ToolSpec,
    *,
    writes: bool,
) -> tuple[ConfirmationMode, ConfirmationPolicy | None]:
    """What the policy's decision leaves of a call: its refusal, or the confirmation it needs.

    A write the policy wants confirmed or approved becomes a plan (with `writes`
    configured); any other non-allow decision is the call's refusal.
    """
    asked = _ASKS.get(decision.outcome)
    if asked is not None and writes and not spec.read_only:
        return stricter(spec.confirmation.mode, asked), decision.approval
    refusal = refusal_for(decision, spec)
    if refusal is not None:
        raise refusal
    return spec.confirmation.mode, None


async def admit(limiter: Limiter, principal: Principal, spec: ToolSpec) -> None:
    """The quota stage: RATE_LIMITED over the limit, TRANSIENT when it cannot tell."""
    try:
        retry_after = await limiter.acquire(principal, spec)
    except StoreError as exc:
        # Fail closed, but say a retry may pass: the limiter's store is down.
        raise Refusal(
            ErrorCode.TRANSIENT,
            "The call could not be admitted right now; retry it shortly.",
            stage="quota",
            retryable=True,
            detail=describe_exception(exc),
        ) from None
    if retry_after is not None:
        raise Refusal(
            ErrorCode.RATE_LIMITED,
            f"{spec.name} is being called too often; wait before retrying.",
            stage="quota",
            retryable=True,
            retry_after=retry_after,
        )
