"""Stage 4, authorization: may this Principal run this tool with these arguments?

The built-in check (required permissions) always runs; a pluggable `Policy` then
decides allow, confirm, approve or deny for the resource the arguments name. Neither
trusts anything the model wrote, nor a tool's own label without checking.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from handrail.errors import ErrorCode, Refusal
from handrail.principal import Principal
from handrail.spec import ToolSpec

__all__ = ["AllowAll", "Decision", "Outcome", "Policy", "check_permissions", "refusal_for"]


class Outcome(StrEnum):
    """What a policy decided."""

    ALLOW = "allow"
    CONFIRM = "confirm"
    APPROVE = "approve"
    DENY = "deny"


@dataclass(frozen=True, kw_only=True, slots=True)
class Decision:
    """A policy's answer, with the reason (for people) and the rule that fired (for audit)."""

    outcome: Outcome
    reason: str
    rule: str
    resource_key: str | None = None
    """The real resource the decision was about (for example `order:ORD-1001`), when a
    resolver loaded one; lets a conversation notice the same target behind two tools."""


class Policy(Protocol):
    """Resource-level authorization and argument-dependent risk.

    `resource` is the validated arguments (or a resource a resolver loaded from them);
    `context` carries the call id, tool risk and anything the host adds.
    """

    async def decide(
        self,
        principal: Principal,
        action: str,
        resource: object,
        context: Mapping[str, object],
    ) -> Decision:
        """Decide one call."""
        ...


class AllowAll:
    """A Policy that adds nothing to the permission check; the default."""

    async def decide(
        self,
        principal: Principal,
        action: str,
        resource: object,
        context: Mapping[str, object],
    ) -> Decision:
        """Allow; the required-permissions check has already run."""
        del principal, action, resource, context
        return Decision(outcome=Outcome.ALLOW, reason="no resource policy", rule="allow-all")


def check_permissions(principal: Principal, spec: ToolSpec) -> None:
    """Refuse with PERMISSION_DENIED unless every permission the tool requires is held."""
    missing = spec.permissions - principal.permissions
    if missing:
        raise Refusal(
            ErrorCode.PERMISSION_DENIED,
            f"You are not permitted to use {spec.name}. This is final: do not retry it "
            f"or try to reach the same data through another tool.",
            stage="authorization",
            detail=f"missing permissions: {', '.join(sorted(missing))}",
        )


def refusal_for(decision: Decision, spec: ToolSpec) -> Refusal | None:
    """The refusal a non-allow decision means for this call, or None to proceed."""
    if decision.outcome is Outcome.ALLOW:
        return None
    detail = f"rule={decision.rule}: {decision.reason}"
    if decision.outcome is Outcome.DENY:
        return Refusal(
            ErrorCode.PERMISSION_DENIED,
            f"You are not permitted to do this with {spec.name}. This is final: do not "
            f"retry it or try another tool for the same target.",
            stage="authorization",
            detail=detail,
        )
    code = (
        ErrorCode.NEEDS_CONFIRMATION
        if decision.outcome is Outcome.CONFIRM
        else ErrorCode.NEEDS_APPROVAL
    )
    who = "the user's confirmation" if code is ErrorCode.NEEDS_CONFIRMATION else "approval"
    return Refusal(
        code,
        f"This call needs {who} and was not executed. Tell the user what you intend "
        f"to do; do not claim it was done.",
        stage="authorization",
        detail=detail,
    )
