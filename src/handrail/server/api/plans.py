"""The HTTP API's plans: read, issue a token, confirm, reject, revise, execute.

Approving an APPROVE plan is a token plus a confirm by each approver (the payments
refund needs two distinct ones); the requester then executes. Taking and using a
token over the API needs `handrail.plans.decide` besides the right to decide: a
machine credential confirms for a person only when given that on purpose. A plan the caller may
not see (another tenant's, or one they neither asked for nor may decide) is 404, the
same body as a missing one. Every refusal keeps its code (`problems.problem`).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from handrail.errors import ErrorCode, WriteRefusedError
from handrail.plans import PlanState
from handrail.principal import Principal
from handrail.server._visibility import PLANS_DECIDE_PERMISSION
from handrail.server.api._deps import Limit, Ops
from handrail.server.api._views import envelope_view, outcome_view, plan_view, token_view
from handrail.server.auth import ApiPrincipal

__all__ = ["router"]

router = APIRouter(prefix="/plans", tags=["plans"])


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ConfirmBody(_Body):
    """A token issued to the caller for this plan."""

    token: str = Field(min_length=1, max_length=4096)


class RejectBody(_Body):
    """Why the plan is rejected (kept in the audit)."""

    reason: str | None = Field(default=None, max_length=1000)


class ReviseBody(_Body):
    """New arguments, as JSON text: a new plan through all four checks."""

    arguments: str = Field(min_length=1, max_length=65_536)


@router.get("", summary="The caller's plans (asked for, or theirs to decide), newest first")
async def list_plans(
    principal: ApiPrincipal, ops: Ops, state: PlanState | None = None, limit: Limit = 50
) -> dict[str, Any]:
    records = await ops.list_plans(principal, state=state, limit=limit)
    return {"plans": [plan_view(r) for r in records]}


@router.get("/{plan_id}", summary="One plan with its impact, state, approvals and expiry")
async def get_plan(principal: ApiPrincipal, ops: Ops, plan_id: str) -> dict[str, Any]:
    return plan_view(await ops.get_plan(principal, plan_id))


@router.post(
    "/{plan_id}/token",
    summary="A one-time confirmation token issued to the caller (needs handrail.plans.decide)",
)
async def issue_token(principal: ApiPrincipal, ops: Ops, plan_id: str) -> dict[str, Any]:
    _may_decide(principal)
    return token_view(await ops.issue_token(principal, plan_id))


@router.post(
    "/{plan_id}/confirm",
    summary="Confirm (or approve) with the caller's token (needs handrail.plans.decide)",
)
async def confirm(
    principal: ApiPrincipal, ops: Ops, plan_id: str, body: ConfirmBody
) -> dict[str, Any]:
    _may_decide(principal)
    return plan_view(await ops.confirm(principal, plan_id, body.token))


def _may_decide(principal: Principal) -> None:
    """A machine credential confirms only when given PLANS_DECIDE_PERMISSION on purpose."""
    if PLANS_DECIDE_PERMISSION not in principal.permissions:
        raise WriteRefusedError(
            ErrorCode.PERMISSION_DENIED,
            f"confirming over the API needs the {PLANS_DECIDE_PERMISSION} permission; "
            "people confirm in the console",
        )


@router.post("/{plan_id}/reject", summary="Reject a plan that has not run")
async def reject(
    principal: ApiPrincipal, ops: Ops, plan_id: str, body: RejectBody
) -> dict[str, Any]:
    return plan_view(await ops.reject(principal, plan_id, body.reason))


@router.post("/{plan_id}/revise", summary="New arguments: a new plan; the old one closes")
async def revise(
    principal: ApiPrincipal, ops: Ops, plan_id: str, body: ReviseBody
) -> dict[str, Any]:
    return envelope_view(await ops.revise(principal, plan_id, body.arguments))


@router.post("/{plan_id}/execute", summary="Run a confirmed plan once (its requester)")
async def execute(principal: ApiPrincipal, ops: Ops, plan_id: str) -> dict[str, Any]:
    return outcome_view(await ops.execute(principal, plan_id))
