"""The console's plan pages: pending plans with their impact, and Confirm / Reject / Edit.

A plan's page shows what a person must read before agreeing: the action and its
target with the version it expects, money in minor units shown as currency, counts,
whether it can be undone, who asked, the approvals it has and needs, and when the
offer ends. Confirm issues a token to this person and uses it at once (a CONFIRM plan
then runs; an APPROVE plan records the approval); Reject closes it with a reason; Edit
proposes new arguments as a new plan. Everything goes through `services.operations`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import APIRouter, Request
from starlette.responses import Response

from handrail.errors import AccessRefusedError, ErrorCode
from handrail.execution import plan_key
from handrail.plans import PlanRecord, PlanState
from handrail.server.auth import services_of
from handrail.server.console._access import posted, viewer
from handrail.server.console._render import page, refusal, to_login
from handrail.spec import ConfirmationMode

if TYPE_CHECKING:
    from starlette.datastructures import FormData

    from handrail.server.console.people import ConsoleSession

__all__ = ["router"]

router = APIRouter()

_MAX_REASON = 1000
_MAX_ARGUMENTS = 65_536
_PENDING = "PENDING"
"""The default view: plans still waiting for a person (PROPOSED or AWAITING_CONFIRMATION)."""
_WAITING = frozenset({PlanState.PROPOSED, PlanState.AWAITING_CONFIRMATION})


def _state(text: str | None) -> str:
    if text is not None and (text == "ALL" or text in PlanState.__members__):
        return text
    return _PENDING


def _next_step(record: PlanRecord, user_id: str) -> str:
    """What this person can do with the plan now, in words."""
    plan = record.plan
    if record.state in _WAITING:
        if plan.confirmation is ConfirmationMode.APPROVE:
            have = len(record.approvals)
            if user_id in record.approvals:
                return f"You approved it; {have} of {plan.required_approvals} approvals are in."
            return f"Needs {plan.required_approvals} approvals from different people; {have} in."
        return "Needs the requester's confirmation."
    if record.state is PlanState.CONFIRMED and plan.confirmation is ConfirmationMode.APPROVE:
        return "Approved: the requester may execute it now."
    return f"This plan is {record.state.value}."


@router.get("/plans")
async def plans(request: Request, state: str | None = None) -> Response:
    """The plans this person may decide or asked for (pending ones by default)."""
    session = await viewer(request)
    if session is None:
        return to_login(request)
    wanted = _state(state)
    found = await services_of(request).operations.list_plans(
        session.principal,
        state=PlanState(wanted) if wanted in PlanState.__members__ else None,
        limit=200,
    )
    if wanted == _PENDING:
        found = [r for r in found if r.state in _WAITING]
    return page(
        "plans.html",
        session=session,
        plans=found,
        state=wanted,
        states=[_PENDING, *(s.value for s in PlanState)],
        now=services_of(request).clock.now(),
    )


@router.get("/plans/{plan_id}")
async def plan(request: Request, plan_id: str, done: str | None = None) -> Response:
    """One plan: its impact, its state, and what this person may do with it."""
    session = await viewer(request)
    if session is None:
        return to_login(request)
    services = services_of(request)
    try:
        record = await services.operations.get_plan(session.principal, plan_id)
    except AccessRefusedError as refused:
        return refusal(request, refused.code, refused.message, session=session)
    key = plan_key(tenant_id=record.plan.tenant_id, tool=record.plan.tool, plan_id=plan_id)
    try:
        execution = await services.operations.get_execution(session.principal, key)
    except AccessRefusedError:
        execution = None
    user = session.principal.user_id
    plan = record.plan
    return page(
        "plan.html",
        session=session,
        record=record,
        plan=plan,
        impact=plan.impact,
        execution=execution,
        done=done if done in {"confirmed", "approved", "rejected", "executed"} else None,
        next_step=_next_step(record, user),
        now=services.clock.now(),
        is_requester=plan.user_id == user,
        may_approve=plan.approver_permission in session.principal.permissions,
        open=record.state in _WAITING,
        may_execute=(
            record.state is PlanState.CONFIRMED
            and plan.confirmation is ConfirmationMode.APPROVE
            and plan.user_id == user
        ),
    )


@router.post("/plans/{plan_id}/confirm")
async def confirm(request: Request, plan_id: str) -> Response:
    """Confirm (or approve) as this person: a token issued to them and used at once."""

    async def act(session: ConsoleSession, _form: FormData) -> str:
        operations = services_of(request).operations
        record, _ = await operations.confirm_and_execute(session.principal, plan_id)
        approved = record.plan.confirmation is ConfirmationMode.APPROVE
        return f"/plans/{plan_id}?done={'approved' if approved else 'confirmed'}"

    return await posted(request, act)


@router.post("/plans/{plan_id}/execute")
async def execute(request: Request, plan_id: str) -> Response:
    """Run an approved plan once (its requester)."""

    async def act(session: ConsoleSession, _form: FormData) -> str:
        await services_of(request).operations.execute(session.principal, plan_id)
        return f"/plans/{plan_id}?done=executed"

    return await posted(request, act)


@router.post("/plans/{plan_id}/reject")
async def reject(request: Request, plan_id: str) -> Response:
    """Reject a plan that has not run, with a reason for the audit."""

    async def act(session: ConsoleSession, form: FormData) -> str:
        reason = str(form.get("reason") or "").strip()[:_MAX_REASON] or None
        await services_of(request).operations.reject(session.principal, plan_id, reason)
        return f"/plans/{plan_id}?done=rejected"

    return await posted(request, act)


@router.post("/plans/{plan_id}/revise")
async def revise(request: Request, plan_id: str) -> Response:
    """New arguments (JSON text): a new plan through all four checks; the old one closes."""

    async def act(session: ConsoleSession, form: FormData) -> str | Response:
        arguments = str(form.get("arguments") or "")
        if len(arguments) > _MAX_ARGUMENTS:
            message = "the arguments are too long"
            return refusal(request, ErrorCode.INVALID_ARGUMENTS, message, session=session)
        envelope = await services_of(request).operations.revise(
            session.principal, plan_id, arguments
        )
        data = envelope.data if isinstance(envelope.data, dict) else {}
        new_id = data.get("plan_id")
        if not isinstance(new_id, str):
            code = envelope.error_type or ErrorCode.INVALID_ARGUMENTS
            return refusal(request, code, envelope.summary, session=session)
        return f"/plans/{new_id}"

    return await posted(request, act)
