"""The hand-off of a write that passed every check to the write path, and plan revisions.

Owns the risk stage's refusals of writes this gate cannot take, proposing the plan (to
confirm or approve) or running an unconfirmed write under the host's command id, and an
approver's revision of a plan. Never executes a confirmed plan (`Writes` does) and never
authorizes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from handrail.calls import ToolCall
from handrail.declare.definition import BoundArguments, Tool
from handrail.declare.exposure import Exposure
from handrail.envelope import Envelope
from handrail.errors import ConfigurationError, ErrorCode, Refusal, StoreError, WriteRefusedError
from handrail.gate._invocation import Invoker
from handrail.plans import PlanState
from handrail.principal import Principal
from handrail.record.trail import describe_exception
from handrail.spec import ConfirmationMode, ConfirmationPolicy, IdempotencyMode
from handrail.writes.outcome import WriteOutcome
from handrail.writes.service import Writes, proposal_envelope

__all__ = ["hand_off", "revise"]


async def hand_off(
    call: ToolCall,
    tool: Tool,
    bound: BoundArguments,
    principal: Principal,
    *,
    writes: Writes | None,
    invoker: Invoker,
    required: ConfirmationMode,
    approval: ConfirmationPolicy | None,
    deadline: float,
    command_id: str | None,
    revises: str | None,
    exposure: Exposure | None = None,
) -> WriteOutcome:
    """A write that passed every check: propose a plan, or run it under a command id.

    The plan's hooks see the request's `exposure` in their context, as a read would.
    """
    spec = tool.spec
    if writes is None:
        raise Refusal(
            ErrorCode.RISK_BLOCKED,
            f"{spec.name} changes data and needs a confirmed plan; it was not "
            f"executed. Tell the user what you intend to do.",
            stage="risk",
            detail="writes need the plan/confirm path, which this gate does not run",
        )
    approvers = approval or spec.confirmation
    if required is ConfirmationMode.APPROVE and approvers.approver_permission is None:
        raise Refusal(
            ErrorCode.RISK_BLOCKED,
            f"{spec.name} needs an approval nobody is able to give; it was not executed.",
            stage="risk",
            detail="the policy asks for approval but the tool names no approver permission",
        )
    if required is ConfirmationMode.NONE:
        if command_id is None or spec.idempotency.mode is not IdempotencyMode.COMMAND_ID:
            raise Refusal(
                ErrorCode.RISK_BLOCKED,
                f"{spec.name} changes data and this request carries no command id from the "
                f"application; it was not executed.",
                stage="risk",
                detail="an unconfirmed write needs the host's command_id",
            )
        return await writes.execute_command(
            tool,
            bound,
            principal,
            command_id=command_id,
            call_id=call.id,
            deadline=deadline,
        )
    ctx = invoker.context(tool, principal, call, deadline, exposure)
    try:
        plan = await invoker.within(
            deadline,
            "plan",
            writes.propose(
                tool,
                bound,
                principal,
                mode=required,
                ctx=ctx,
                revises=revises,
                approval=approvers,
            ),
        )
    except StoreError as exc:
        raise Refusal(
            ErrorCode.TRANSIENT,
            "The plan could not be recorded right now; nothing was proposed. Retry the call.",
            stage="plan",
            retryable=True,
            detail=describe_exception(exc),
        ) from None
    return WriteOutcome(
        envelope=proposal_envelope(call.id, tool, plan),
        record=None,
        key=None,
        plan_id=plan.plan_id,
    )


async def revise(
    writes: Writes | None,
    plan_id: str,
    arguments: str,
    principal: Principal,
    handle: Callable[[ToolCall], Awaitable[Envelope]],
) -> Envelope:
    """An approver's edit, taken by `handle` through every stage as a call of its own.

    The old plan is rejected once the new one exists. Refused with WriteRefusedError
    when the plan cannot be revised.
    """
    if writes is None:
        raise ConfigurationError("revising plans needs a gate configured with writes")
    record = await writes.get_plan(plan_id, principal)
    writes.check_may_decide(record, principal)
    if record.state not in {PlanState.PROPOSED, PlanState.AWAITING_CONFIRMATION}:
        raise WriteRefusedError(ErrorCode.PLAN_CLOSED, f"The plan is {record.state.value.lower()}.")
    call = ToolCall(id=f"revise-{plan_id}", name=record.plan.tool, arguments=arguments)
    envelope = await handle(call)
    if envelope.error_type in {ErrorCode.NEEDS_CONFIRMATION, ErrorCode.NEEDS_APPROVAL}:
        await writes.reject(plan_id, principal)
    return envelope
