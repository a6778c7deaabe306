"""Deciding on writes: plans proposed, confirmed, approved or rejected, and who may.

Owns a plan's life before it runs: the proposal (and the envelope the model reads for
it), tokens, confirmations and approvals, rejection, and whether a confirmed plan may
run now. Deciding raises (WriteRefusedError, StoreError); it never runs a tool's effect.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from handrail.authz.policy import check_permissions
from handrail.canonical import canonical_json
from handrail.clock import Clock
from handrail.context import ToolContext
from handrail.declare.definition import BoundArguments, Tool
from handrail.declare.registry import Registry
from handrail.envelope import HANDRAIL_SOURCE, Envelope, ErrorDetail, Status, Trust
from handrail.errors import (
    ConfigurationError,
    ErrorCode,
    Refusal,
    StoreError,
    WriteRefusedError,
)
from handrail.events import AuditSubject
from handrail.execution import ExecutionStatus, plan_key
from handrail.plans import Impact, Plan, PlanRecord, PlanState
from handrail.principal import Principal
from handrail.record.audit import Auditor
from handrail.spec import ConfirmationMode, ConfirmationPolicy
from handrail.store.base import Store
from handrail.writes._answers import WITHDRAWN
from handrail.writes._hop import Hop
from handrail.writes.confirmation import ConfirmationToken, Keyring

__all__ = ["Decisions", "call_hook", "proposal_envelope", "stricter"]

_KNOWN_PLANS = 4096
_PLAN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_MODE_RANK = {ConfirmationMode.NONE: 0, ConfirmationMode.CONFIRM: 1, ConfirmationMode.APPROVE: 2}


def stricter(a: ConfirmationMode, b: ConfirmationMode) -> ConfirmationMode:
    """The stricter of two confirmation requirements."""
    return a if _MODE_RANK[a] >= _MODE_RANK[b] else b


def proposal_envelope(call_id: str, tool: Tool, plan: Plan) -> Envelope:
    """What the model reads for a write that became a plan: nothing ran yet.

    NEEDS_CONFIRMATION or NEEDS_APPROVAL, with the plan id, the impact and the expiry,
    so the model can tell the user what will happen. Never a token. The impact is not
    Handrail's wording: the tool's `impact` hook wrote it (untrusted data of the tool),
    or, without one, it quotes the model's arguments (untrusted, from Handrail).
    """
    spec = tool.spec
    approve = plan.confirmation is ConfirmationMode.APPROVE
    who = (
        f"approval by {plan.required_approvals} approver(s)"
        if approve
        else "the user's confirmation"
    )
    return Envelope(
        call_id=call_id,
        tool=spec.name,
        status=Status.ERROR,
        summary=(
            f"Nothing was executed yet. A plan was prepared: {plan.impact.describe()}. It "
            f"needs {who} in the application before it can run. Tell the user what it "
            f"will do; do not claim it was done."
        ),
        data={
            "plan_id": plan.plan_id,
            "impact": plan.impact.to_json(),
            "expires_at": plan.expires_at.isoformat(),
        },
        schema_version=spec.schema_version,
        error=ErrorDetail(
            code=ErrorCode.NEEDS_APPROVAL if approve else ErrorCode.NEEDS_CONFIRMATION,
        ),
        trust=Trust.UNTRUSTED,
        source=None if tool.impact is not None else HANDRAIL_SOURCE,
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class _Checked:
    record: PlanRecord
    tool: Tool


class Decisions:
    """Plans and the decisions of people on them, over one Store (see `Writes`).

    Every step that could race is settled in the database. Remembers the content of
    recently seen plans (immutable), never their state.
    """

    def __init__(
        self,
        *,
        registry: Registry,
        store: Store,
        keyring: Keyring,
        clock: Clock,
        auditor: Auditor,
        new_id: Callable[[], str],
        io: Hop,
    ) -> None:
        self._registry = registry
        self._store = store
        self._keyring = keyring
        self._clock = clock
        self._auditor = auditor
        self._new_id = new_id
        self._io = io
        # Content of recently seen plans (immutable); never their state.
        self._known_plans: OrderedDict[str, Plan] = OrderedDict()

    # --- proposing (called by the gate after all four checks) --------------------------------

    async def propose(
        self,
        tool: Tool,
        bound: BoundArguments,
        principal: Principal,
        *,
        mode: ConfirmationMode,
        ctx: ToolContext,
        revises: str | None = None,
        approval: ConfirmationPolicy | None = None,
    ) -> Plan:
        """Build and store an immutable plan for a validated, authorized write.

        The contract is `Writes.propose`'s.
        """
        spec = tool.spec
        expected = (
            await call_hook(tool.resolve_version, bound.value, ctx)
            if tool.resolve_version
            else None
        )
        impact = (
            await call_hook(tool.impact, bound.value, ctx)
            if tool.impact
            else Impact(
                action=f"call {spec.name}",
                target=canonical_json(dict(bound.json)).decode()[:200],
                reversible=spec.risk < spec.risk.L3_HIGH_RISK_WRITE,
            )
        )
        if not isinstance(impact, Impact):
            msg = f"the impact hook of {spec.name} returned {type(impact).__name__}, not Impact"
            raise TypeError(msg)
        approve = mode is ConfirmationMode.APPROVE
        approvers = approval if approval is not None else spec.confirmation
        if approve and not approvers.approver_permission:
            msg = f"{spec.name}: an APPROVE plan needs an approver permission"
            raise ConfigurationError(msg)
        now = self._clock.now()
        plan = Plan.create(
            plan_id=self._new_id(),
            tool=spec.name,
            schema_version=spec.schema_version,
            arguments=bound.json,
            expected_version=None if expected is None else str(expected),
            user_id=principal.user_id,
            tenant_id=principal.tenant_id,
            risk=spec.risk,
            confirmation=mode,
            required_approvals=approvers.distinct_approvers if approve else 1,
            impact=impact,
            created_at=now,
            expires_at=now + timedelta(seconds=spec.confirmation.ttl_seconds),
            revises=revises,
            approver_permission=approvers.approver_permission if approve else None,
        )
        record = PlanRecord(plan=plan, state=PlanState.PROPOSED, version=1, updated_at=now)
        if not await self._io(self._store.insert_plan, record):
            raise StoreError(f"plan id {plan.plan_id!r} collided; the id source is not unique")
        self._remember(plan)
        self.note(
            plan, principal, "plan", "proposed", detail={"mode": mode.value, "revises": revises}
        )
        return plan

    # --- confirming ---------------------------------------------------------------------------

    async def get_plan(self, plan_id: str, principal: Principal) -> PlanRecord:
        """A plan of the principal's tenant; NOT_FOUND for any other (no existence leak)."""
        record = await self._io(self._store.get_plan, plan_id) if _plausible_id(plan_id) else None
        if record is None or record.plan.tenant_id != principal.tenant_id:
            raise WriteRefusedError(ErrorCode.NOT_FOUND, "There is no such plan.")
        self._remember(record.plan)
        return record

    async def issue_token(self, plan_id: str, principal: Principal) -> ConfirmationToken:
        """A one-time token for this principal to confirm or approve the plan.

        The contract is `Writes.issue_token`'s.
        """
        checked = await self._decider(plan_id, principal)
        record = checked.record
        if record.state is PlanState.PROPOSED:
            await self._io(
                self._store.move_plan,
                plan_id,
                expect_state=PlanState.PROPOSED,
                expect_version=record.version,
                state=PlanState.AWAITING_CONFIRMATION,
                at=self._clock.now(),
            )
        elif record.state is not PlanState.AWAITING_CONFIRMATION:
            raise WriteRefusedError(
                ErrorCode.PLAN_CLOSED, f"The plan is {record.state.value.lower()}."
            )
        token = self._keyring.issue(record.plan, principal)
        self.note(
            record.plan,
            principal,
            "token",
            "issued",
            detail={"nonce": token.claims.nonce, "kid": token.claims.key_id},
        )
        return token

    async def confirm(self, plan_id: str, token: str, principal: Principal) -> PlanRecord:
        """Confirm (CONFIRM plans) or approve (APPROVE plans) with a token; one use each.

        The contract is `Writes.confirm`'s.
        """
        record = await self.get_plan(plan_id, principal)
        plan = record.plan
        try:
            claims = self._keyring.verify(token, principal)
        except Refusal as refusal:
            self.note(
                plan,
                principal,
                "confirm",
                "refused",
                code=refusal.code,
                detail={"note": refusal.detail},
            )
            raise WriteRefusedError(refusal.code, refusal.summary) from None
        if (
            claims.plan_id != plan.plan_id
            or claims.plan_hash != plan.plan_hash
            or not plan.verify_hash()
        ):
            raise self.refuse(
                plan,
                principal,
                ErrorCode.PLAN_CHANGED,
                "The token was issued for a different plan; confirm the current plan.",
            )
        checked = await self._decider(plan_id, principal, record=record)
        if not await self._io(
            self._store.use_nonce,
            claims.nonce,
            plan_id=plan_id,
            user_id=principal.user_id,
            at=self._clock.now(),
        ):
            raise self.refuse(
                plan,
                principal,
                ErrorCode.CONFIRMATION_REPLAYED,
                "This confirmation was already used.",
            )
        record = checked.record
        if record.state not in {PlanState.PROPOSED, PlanState.AWAITING_CONFIRMATION}:
            raise self.refuse(
                plan, principal, ErrorCode.PLAN_CLOSED, f"The plan is {record.state.value.lower()}."
            )
        if plan.confirmation is ConfirmationMode.APPROVE:
            await self._io(
                self._store.add_approval, plan_id, user_id=principal.user_id, at=self._clock.now()
            )
            fresh = await self.get_plan(plan_id, principal)
            self.note(
                plan,
                principal,
                "approve",
                "approved",
                detail={"approvals": len(fresh.approvals), "required": plan.required_approvals},
            )
            if len(fresh.approvals) < plan.required_approvals:
                return fresh
            record = fresh
        moved = await self._io(
            self._store.move_plan,
            plan_id,
            expect_state=record.state,
            expect_version=record.version,
            state=PlanState.CONFIRMED,
            at=self._clock.now(),
        )
        fresh = await self.get_plan(plan_id, principal)
        if moved:
            self.note(plan, principal, "confirm", "confirmed")
        elif fresh.state is not PlanState.CONFIRMED:  # pragma: no cover - raced with a rejection
            raise self.refuse(
                plan, principal, ErrorCode.PLAN_CLOSED, f"The plan is {fresh.state.value.lower()}."
            )
        return fresh

    async def reject(
        self,
        plan_id: str,
        principal: Principal,
        *,
        state: PlanState = PlanState.REJECTED,
        reason: str | None = None,
    ) -> PlanRecord:
        """Reject (or, from the gate, supersede) a plan that is not yet executed.

        The contract is `Writes.reject`'s.
        """
        record = await self.get_plan(plan_id, principal)
        self.check_may_decide(record, principal)
        while record.state in {
            PlanState.PROPOSED,
            PlanState.AWAITING_CONFIRMATION,
            PlanState.CONFIRMED,
        }:
            if await self._io(
                self._store.move_plan,
                plan_id,
                expect_state=record.state,
                expect_version=record.version,
                state=state,
                at=self._clock.now(),
            ):
                detail = None if reason is None else {"reason": reason}
                self.note(record.plan, principal, "plan", state.value.lower(), detail=detail)
                if record.state is PlanState.CONFIRMED:
                    await self._close_released(record.plan, principal)
                return await self.get_plan(plan_id, principal)
            fresh = await self.get_plan(plan_id, principal)
            if (fresh.state, fresh.version) == (record.state, record.version):
                # Unchanged, yet not moved: the store saw that its execution started.
                raise self.refuse(
                    record.plan,
                    principal,
                    ErrorCode.PLAN_CLOSED,
                    "The plan's execution has started; it can no longer be withdrawn.",
                )
            record = fresh
        raise WriteRefusedError(ErrorCode.PLAN_CLOSED, f"The plan is {record.state.value.lower()}.")

    async def _close_released(self, plan: Plan, principal: Principal) -> None:
        """Settle a released (PREPARED) record of a withdrawn plan, so retention ends it."""
        key = plan_key(tenant_id=plan.tenant_id, tool=plan.tool, plan_id=plan.plan_id)
        record = await self._io(self._store.get_execution, key)
        if record is None or record.status is not ExecutionStatus.PREPARED:
            return
        tool = self._registry.lookup(plan.tool, principal)
        retention = tool.spec.idempotency.retention_seconds if tool else 86_400.0
        now = self._clock.now()
        closed = record.moved(
            ExecutionStatus.FAILED_FINAL,
            error_code=ErrorCode.PLAN_CLOSED.value,
            result=json.dumps({"message": WITHDRAWN}),
            updated_at=now,
            retain_until=now + timedelta(seconds=retention),
        )
        await self._io(
            self._store.replace_execution,
            closed,
            expect_status=ExecutionStatus.PREPARED,
            expect_version=record.version,
        )

    def check_may_decide(self, record: PlanRecord, principal: Principal) -> None:
        """PERMISSION_DENIED unless `principal` asked for the plan or may approve it."""
        plan = record.plan
        if principal.user_id == plan.user_id:
            return
        permission = plan.approver_permission
        if plan.confirmation is ConfirmationMode.APPROVE and permission in principal.permissions:
            return
        raise self.refuse(
            plan,
            principal,
            ErrorCode.PERMISSION_DENIED,
            "You may not reject or revise this plan.",
        )

    # --- whether a confirmed plan may run now ----------------------------------------------------

    def check_executable(self, record: PlanRecord, tool: Tool, principal: Principal) -> None:
        """Refuses unless the plan is CONFIRMED, unexpired, and its content still holds."""
        plan = record.plan
        if record.state in {PlanState.PROPOSED, PlanState.AWAITING_CONFIRMATION}:
            code = (
                ErrorCode.NEEDS_APPROVAL
                if plan.confirmation is ConfirmationMode.APPROVE
                else ErrorCode.NEEDS_CONFIRMATION
            )
            raise self.refuse(plan, principal, code, "The plan is not confirmed yet.")
        if record.state is PlanState.EXPIRED or self._clock.now() >= plan.expires_at:
            raise self.refuse(
                plan, principal, ErrorCode.PLAN_EXPIRED, "The plan expired before it was executed."
            )
        if record.state is not PlanState.CONFIRMED:
            raise self.refuse(
                plan, principal, ErrorCode.PLAN_CLOSED, f"The plan is {record.state.value.lower()}."
            )
        self.check_content(plan, tool, principal)

    def check_content(self, plan: Plan, tool: Tool, principal: Principal) -> None:
        """The checks that need the plan's content only, not its state."""
        if tool.spec.schema_version != plan.schema_version:
            raise self.refuse(
                plan, principal, ErrorCode.PLAN_CHANGED, "The tool changed since the plan was made."
            )
        try:
            check_permissions(principal, tool.spec)
        except Refusal as refusal:
            raise self.refuse(plan, principal, refusal.code, refusal.summary) from None

    # --- helpers ------------------------------------------------------------------------------

    def expired(self, plan: Plan) -> bool:
        """Whether the plan's confirmation window has passed."""
        return self._clock.now() >= plan.expires_at

    def _remember(self, plan: Plan) -> None:
        known = self._known_plans
        known[plan.plan_id] = plan
        if len(known) > _KNOWN_PLANS:
            known.popitem(last=False)

    def known(self, plan_id: str) -> Plan | None:
        """The content of a recently seen plan, if remembered (never its state)."""
        return self._known_plans.get(plan_id)

    async def _decider(
        self, plan_id: str, principal: Principal, *, record: PlanRecord | None = None
    ) -> _Checked:
        """The plan and its tool, if `principal` may decide on it now; refuses otherwise."""
        record = record or await self.get_plan(plan_id, principal)
        plan = record.plan
        tool = self._registry.lookup(plan.tool, principal)
        if plan.confirmation is ConfirmationMode.CONFIRM:
            allowed = principal.user_id == plan.user_id
        else:
            permission = plan.approver_permission
            allowed = (
                permission is not None
                and permission in principal.permissions
                and principal.user_id != plan.user_id
            )
        if not allowed:
            raise self.refuse(
                plan,
                principal,
                ErrorCode.PERMISSION_DENIED,
                "You may not confirm or approve this plan.",
            )
        if tool is None:
            # Removed, disabled or past its deprecation day since it was planned: the
            # person who may decide is told so, not that they may not decide.
            raise self.refuse(
                plan, principal, ErrorCode.UNKNOWN_TOOL, "The plan's tool is no longer available."
            )
        if self._clock.now() >= plan.expires_at:
            # A confirmed plan is not expired here: its execution may have started, and
            # `check_executable` refuses to start one after expiry anyway.
            if record.state in {PlanState.PROPOSED, PlanState.AWAITING_CONFIRMATION}:
                await self._io(
                    self._store.move_plan,
                    plan_id,
                    expect_state=record.state,
                    expect_version=record.version,
                    state=PlanState.EXPIRED,
                    at=self._clock.now(),
                )
            raise self.refuse(
                plan, principal, ErrorCode.PLAN_EXPIRED, "The plan expired; ask for a new one."
            )
        return _Checked(record=record, tool=tool)

    def refuse(
        self, plan: Plan, principal: Principal, code: ErrorCode, message: str
    ) -> WriteRefusedError:
        """Audit a refusal of `plan` and return the error to raise."""
        self.note(plan, principal, "confirm", "refused", code=code)
        return WriteRefusedError(code, message)

    def note(
        self,
        plan: Plan,
        principal: Principal,
        stage: str,
        decision: str,
        *,
        code: str | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> None:
        """One audit event of `plan`: its stage, the decision, a code and facts."""
        if not self._auditor.enabled:
            return
        self._auditor.note(
            kind="plan",
            stage=stage,
            decision=decision,
            code=code,
            subject=AuditSubject(
                request_id=principal.request_id,
                tool=plan.tool,
                schema_version=plan.schema_version,
                args_hash=plan.plan_hash,
                user_id=principal.user_id,
                tenant_id=principal.tenant_id,
            ),
            facts={"plan_id": plan.plan_id, "plan_hash": plan.plan_hash, **(detail or {})},
        )


def _plausible_id(plan_id: object) -> bool:
    return isinstance(plan_id, str) and _PLAN_ID.fullmatch(plan_id) is not None


async def call_hook(hook: Callable[..., Any], *args: Any) -> Any:  # noqa: ANN401
    """Run a sync hook in a worker thread, or await an async one."""
    if asyncio.iscoroutinefunction(hook):
        return await hook(*args)
    outcome = await asyncio.to_thread(hook, *args)
    if asyncio.iscoroutine(outcome):
        return await outcome
    return outcome
