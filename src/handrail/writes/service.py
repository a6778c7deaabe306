"""Writes: plan → confirm (or approve) → execute once, for the host application.

The gate proposes a plan when a model asks for a write that passed all four checks;
the model only learns that a plan awaits confirmation. The host shows the plan to a
person and asks this service for a token (`issue_token`), which goes to that person's
UI and comes back with their authenticated request (`confirm` or `approve`). Then
`execute_plan` runs it under the plan's idempotency key, as many times as anyone
asks, with one effect. Confirmation never comes from model output or chat text: only
a token this keyring signed for that principal confirms anything.

What raises and what returns, one rule: deciding raises, executing returns.
`get_plan`, `record_for`, `issue_token`, `confirm` and `reject` answer a person's
request: a refusal raises WriteRefusedError with its code, a failing store raises
StoreError, and nothing was executed. `execute_plan` and `execute_command` (and the
gate's `handle`, `handle_write`, `handle_batch`) execute: every refusal, failure,
unknown outcome or unreachable store comes back as a WriteOutcome whose envelope
carries the code, never as an exception. They raise only for a misconfiguration
(ConfigurationError) and for cancellation.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import random
import re
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from secrets import token_hex
from typing import Any, TypeVar

from handrail.authz.policy import check_permissions
from handrail.canonical import canonical_json
from handrail.clock import Clock, SystemClock
from handrail.context import ToolContext
from handrail.credentials import SecretLedger, SecretProvider, Secrets
from handrail.deadline import DeadlineExceededError, within
from handrail.declare.definition import BoundArguments, Tool
from handrail.declare.registry import Registry
from handrail.envelope import Envelope, ErrorDetail, Status, Trust
from handrail.errors import (
    ConfigurationError,
    ErrorCode,
    Refusal,
    StoreError,
    ToolSignal,
    WriteRefusedError,
)
from handrail.events import AuditSubject
from handrail.execution import ExecutionRecord, ExecutionStatus, command_key, intent_hash, plan_key
from handrail.plans import Impact, Plan, PlanRecord, PlanState
from handrail.principal import Principal
from handrail.record.audit import Auditor, AuditSink
from handrail.retry import Sleep
from handrail.shaping.redact import Redactor
from handrail.shaping.shaper import Shaper
from handrail.spec import ConfirmationMode, ConfirmationPolicy, ToolSpec
from handrail.store.base import Store
from handrail.writes.confirmation import ConfirmationToken, Keyring
from handrail.writes.executor import Executor
from handrail.writes.outcome import WriteJob, WriteOutcome

__all__ = ["Writes", "proposal_envelope", "stricter"]

T = TypeVar("T")

_KNOWN_PLANS = 4096
_PLAN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_MODE_RANK = {ConfirmationMode.NONE: 0, ConfirmationMode.CONFIRM: 1, ConfirmationMode.APPROVE: 2}


def stricter(a: ConfirmationMode, b: ConfirmationMode) -> ConfirmationMode:
    """The stricter of two confirmation requirements."""
    return a if _MODE_RANK[a] >= _MODE_RANK[b] else b


def proposal_envelope(call_id: str, spec: ToolSpec, plan: Plan) -> Envelope:
    """What the model reads for a write that became a plan: nothing ran yet.

    NEEDS_CONFIRMATION or NEEDS_APPROVAL, with the plan id, the impact and the expiry,
    so the model can tell the user what will happen. Never a token.
    """
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
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class _Checked:
    record: PlanRecord
    tool: Tool


class Writes:
    """Plans, confirmations, approvals and keyed executions over one Store.

    Every dependency is explicit: the registry that says what each tool is, the
    keyring that signs tokens, the clock, ids and randomness. Several processes may
    share one store; every step that could race is settled in the database.
    """

    def __init__(
        self,
        registry: Registry,
        store: Store,
        keyring: Keyring,
        *,
        clock: Clock | None = None,
        audit: AuditSink | None = None,
        worker_id: str | None = None,
        new_id: Callable[[], str] | None = None,
        max_result_chars: int = 16_000,
        sleep: Sleep = asyncio.sleep,
        rng: random.Random | None = None,
        shaper: Shaper | None = None,
        secrets: SecretProvider | None = None,
        ledger: SecretLedger | None = None,
    ) -> None:
        # Results of writes are shaped like any other; secrets are handed out by handle
        # and their values scrubbed from stored results and the audit trail.
        self._shaper = shaper or Shaper(
            redactor=Redactor(hash_key=os.urandom(32)), max_chars=max_result_chars
        )
        self._ledger = ledger if ledger is not None else SecretLedger()
        self._secrets = secrets

        def secrets_for(principal: Principal, spec: ToolSpec) -> Secrets | None:
            if secrets is None or not spec.secrets:
                return None
            return Secrets(
                secrets,
                tenant_id=principal.tenant_id,
                allowed=spec.secrets,
                tool=spec.name,
                ledger=self._ledger,
            )

        self._registry = registry
        self._store = store
        self._keyring = keyring
        self._clock = clock or SystemClock()
        self._auditor = Auditor(audit, self._clock, new_id=new_id, scrub=self._scrub)
        self._new_id = new_id or (lambda: token_hex(16))
        # Content of recently seen plans (immutable); never their state.
        self._known_plans: OrderedDict[str, Plan] = OrderedDict()
        self.executor = Executor(
            store,
            clock=self._clock,
            auditor=self._auditor,
            worker_id=worker_id or f"worker-{token_hex(6)}",
            sleep=sleep,
            rng=rng,
            secrets=secrets_for,
            scrub=self._ledger.scrub,
        )

    @property
    def ledger(self) -> SecretLedger:
        """The secret values handed to write tools, to scrub from every sink."""
        return self._ledger

    @property
    def shaper(self) -> Shaper:
        """What shapes the results of writes for the model."""
        return self._shaper

    def _scrub(self, text: str) -> str:
        return self._shaper.redact_text(self._ledger.scrub(text))

    async def _shaped(self, outcome: WriteOutcome, principal: Principal) -> WriteOutcome:
        """The outcome with its result shaped for the model like any read's result."""
        envelope = outcome.envelope
        tool = self._registry.lookup(envelope.tool, principal)
        if not envelope.ok or tool is None:
            return outcome
        shaped = await self._shaper.shape(
            call_id=envelope.call_id,
            spec=tool.spec,
            principal=principal,
            result=envelope.data,
            ledger=self._ledger,
        )
        return dataclasses.replace(outcome, envelope=shaped)

    @property
    def store(self) -> Store:
        """The store plans and executions live in."""
        return self._store

    @property
    def clock(self) -> Clock:
        """The clock plans expire by."""
        return self._clock

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

        `approval` is who must approve when the policy (not only the spec) asks for it.
        """
        spec = tool.spec
        expected = (
            await _call(tool.resolve_version, bound.value, ctx) if tool.resolve_version else None
        )
        impact = (
            await _call(tool.impact, bound.value, ctx)
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
        self._audit(
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

    async def record_for(self, plan_id: str, principal: Principal) -> ExecutionRecord | None:
        """The execution record of a plan of the principal's tenant; None until it runs.

        The record carries the idempotency key, status, attempts, business id and the
        stored result. NOT_FOUND (WriteRefusedError) for a plan of another tenant or
        none; StoreError when the store fails.
        """
        plan = (await self.get_plan(plan_id, principal)).plan
        key = plan_key(tenant_id=plan.tenant_id, tool=plan.tool, plan_id=plan.plan_id)
        return await self._io(self._store.get_execution, key)

    async def issue_token(self, plan_id: str, principal: Principal) -> ConfirmationToken:
        """A one-time token for this principal to confirm or approve the plan.

        CONFIRM plans: only the requester. APPROVE plans: holders of the approver
        permission other than the requester. The plan then awaits confirmation.
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
        self._audit(
            record.plan,
            principal,
            "token",
            "issued",
            detail={"nonce": token.claims.nonce, "kid": token.claims.key_id},
        )
        return token

    async def confirm(self, plan_id: str, token: str, principal: Principal) -> PlanRecord:
        """Confirm (CONFIRM plans) or approve (APPROVE plans) with a token; one use each.

        Refusals raise WriteRefusedError with their own code: CONFIRMATION_INVALID
        (forged, altered, another person's), PLAN_CHANGED (issued for another plan or
        hash), PLAN_EXPIRED, CONFIRMATION_REPLAYED, PERMISSION_DENIED, PLAN_CLOSED.
        """
        record = await self.get_plan(plan_id, principal)
        plan = record.plan
        try:
            claims = self._keyring.verify(token, principal)
        except Refusal as refusal:
            self._audit(
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
            raise self._refuse(
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
            raise self._refuse(
                plan,
                principal,
                ErrorCode.CONFIRMATION_REPLAYED,
                "This confirmation was already used.",
            )
        record = checked.record
        if record.state not in {PlanState.PROPOSED, PlanState.AWAITING_CONFIRMATION}:
            raise self._refuse(
                plan, principal, ErrorCode.PLAN_CLOSED, f"The plan is {record.state.value.lower()}."
            )
        if plan.confirmation is ConfirmationMode.APPROVE:
            await self._io(
                self._store.add_approval, plan_id, user_id=principal.user_id, at=self._clock.now()
            )
            fresh = await self.get_plan(plan_id, principal)
            self._audit(
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
            self._audit(plan, principal, "confirm", "confirmed")
        elif fresh.state is not PlanState.CONFIRMED:  # pragma: no cover - raced with a rejection
            raise self._refuse(
                plan, principal, ErrorCode.PLAN_CLOSED, f"The plan is {fresh.state.value.lower()}."
            )
        return fresh

    async def reject(
        self, plan_id: str, principal: Principal, *, state: PlanState = PlanState.REJECTED
    ) -> PlanRecord:
        """Reject (or, from the gate, supersede) a plan that is not yet executed.

        Only the requester, or for APPROVE plans a holder of the approver permission.
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
                self._audit(record.plan, principal, "plan", state.value.lower())
                if record.state is PlanState.CONFIRMED:
                    await self._close_released(record.plan, principal)
                return await self.get_plan(plan_id, principal)
            fresh = await self.get_plan(plan_id, principal)
            if (fresh.state, fresh.version) == (record.state, record.version):
                # Unchanged, yet not moved: the store saw that its execution started.
                raise self._refuse(
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
            result=json.dumps({"message": "The plan was withdrawn; nothing was run."}),
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
        raise self._refuse(
            plan,
            principal,
            ErrorCode.PERMISSION_DENIED,
            "You may not reject or revise this plan.",
        )

    # --- executing ----------------------------------------------------------------------------

    async def execute_plan(
        self,
        plan_id: str,
        principal: Principal,
        *,
        timeout: float | None = None,
        call_id: str | None = None,
    ) -> WriteOutcome:
        """Run a confirmed plan once under its key; later calls return the same outcome.

        Only the requester executes, with their current permissions. A target whose
        version moved since confirmation is VERSION_CONFLICT and nothing is written.
        The deadline is the plan's tool's declared timeout, or the caller's `timeout`
        (seconds) when that is shorter; it covers the version check, waiting for a
        running duplicate and the tool itself. Executing returns: every refusal and
        failure is the outcome's envelope with its code, never an exception.
        """
        started = self._clock.monotonic()
        answer_to = call_id or plan_id
        try:
            plan, record = await self._plan_to_run(plan_id, principal)
        except WriteRefusedError as refused:
            return _refused(refused.code, refused.message, call_id=answer_to, plan=None)
        except StoreError:
            return _refused(ErrorCode.TRANSIENT, _UNREACHABLE, call_id=answer_to, plan=None)
        try:
            return await self._run_plan(
                plan,
                record,
                principal,
                started=started,
                timeout=timeout,
                call_id=answer_to,
            )
        except WriteRefusedError as refused:
            return _refused(refused.code, refused.message, call_id=answer_to, plan=plan)
        except StoreError as exc:
            self._audit(
                plan,
                principal,
                "execute",
                "failed",
                code=ErrorCode.TRANSIENT,
                detail={"note": str(exc)},
            )
            return _refused(ErrorCode.TRANSIENT, _UNREACHABLE, call_id=answer_to, plan=plan)

    async def _plan_to_run(
        self, plan_id: str, principal: Principal
    ) -> tuple[Plan, PlanRecord | None]:
        """The plan's content, and its stored record unless the content came from memory."""
        # Plans never change, so their content may come from memory; their state never
        # does: the claim checks CONFIRMED in the database, in the same statement.
        plan = self._known_plans.get(plan_id)
        if plan is None or plan.tenant_id != principal.tenant_id or self._expired(plan):
            record = await self.get_plan(plan_id, principal)
            return record.plan, record
        return plan, None

    async def _run_plan(
        self,
        plan: Plan,
        record: PlanRecord | None,
        principal: Principal,
        *,
        started: float,
        timeout: float | None,
        call_id: str,
    ) -> WriteOutcome:
        """`execute_plan` once the plan is known; refusals raise WriteRefusedError."""
        if principal.user_id != plan.user_id:
            raise self._refuse(
                plan,
                principal,
                ErrorCode.PERMISSION_DENIED,
                "Only the person who asked can execute this plan.",
            )
        tool = self._registry.lookup(plan.tool, principal)
        if tool is None:
            raise self._refuse(
                plan, principal, ErrorCode.UNKNOWN_TOOL, "The plan's tool is no longer available."
            )
        budget = tool.spec.timeout if timeout is None else min(timeout, tool.spec.timeout)
        deadline = started + budget
        key = plan_key(tenant_id=plan.tenant_id, tool=plan.tool, plan_id=plan.plan_id)
        job = WriteJob(
            tool=tool,
            arguments=plan.argument_values,
            principal=principal,
            key=key,
            plan_hash=plan.plan_hash,
            plan_id=plan.plan_id,
            expected_version=plan.expected_version,
            call_id=call_id,
        )
        if record is None:
            self._check_content(plan, tool, principal)
        else:
            replayed = await self._not_runnable(record, job, tool, principal, deadline)
            if replayed is not None:
                return await self._shaped(replayed, principal)
        if tool.resolve_version is not None:
            moved = await self._version_moved(plan, tool, job, deadline)
            if moved:
                existing = await self._io(self._store.get_execution, key)
                if existing is not None and existing.status is not ExecutionStatus.PREPARED:
                    # It ran already: the target moved on by it (or after it); replay.
                    replayed = await self.executor.replay(job, existing, deadline=deadline)
                    return await self._shaped(replayed, principal)
                await self.reject(plan.plan_id, principal)
                raise self._refuse(
                    plan,
                    principal,
                    ErrorCode.VERSION_CONFLICT,
                    "The target changed after the plan was confirmed; nothing was written. "
                    "Re-read it and propose a new plan.",
                )
        outcome = await self.executor.execute(job, deadline=deadline)
        if record is None and outcome.record is None and outcome.error_is(ErrorCode.PLAN_CLOSED):
            # The optimistic claim found the plan not CONFIRMED: answer precisely.
            fresh = await self.get_plan(plan.plan_id, principal)
            replayed = await self._not_runnable(fresh, job, tool, principal, deadline)
            if replayed is not None:  # pragma: no cover - a record appeared meanwhile
                return await self._shaped(replayed, principal)
        return await self._shaped(outcome, principal)

    async def _version_moved(self, plan: Plan, tool: Tool, job: WriteJob, deadline: float) -> bool:
        """Whether the target's version differs from the plan's, asked within the deadline.

        A check that cannot answer refuses the run (nothing was written): TIMEOUT when
        the deadline passed, the code of a declared signal, TRANSIENT for a declared
        transient exception, FAILED_FINAL for anything else.
        """
        hook = tool.resolve_version
        if hook is None:  # pragma: no cover - the caller checked
            return False
        ctx = ToolContext(
            principal=job.principal,
            call_id=job.call_id,
            tool=tool.spec.name,
            deadline=deadline,
            clock=self._clock,
            idempotency_key=job.key,
            expected_version=plan.expected_version,
        )
        arguments = tool.bind(plan.argument_values).value
        try:
            current = await within(_call(hook, arguments, ctx), deadline - self._clock.monotonic())
        except DeadlineExceededError:
            raise self._refuse(
                plan,
                job.principal,
                ErrorCode.TIMEOUT,
                "The target's version could not be checked in time; nothing was written. "
                "It may be retried.",
            ) from None
        except ToolSignal as signal:
            raise self._refuse(plan, job.principal, signal.code, signal.message) from None
        except Exception as exc:  # noqa: BLE001 - the hook's boundary: anything undeclared
            transient = isinstance(exc, tool.spec.retry.transient)
            raise self._refuse(
                plan,
                job.principal,
                ErrorCode.TRANSIENT if transient else ErrorCode.FAILED_FINAL,
                "The target's version could not be checked; nothing was written.",
            ) from None
        return (None if current is None else str(current)) != plan.expected_version

    async def _not_runnable(
        self,
        record: PlanRecord,
        job: WriteJob,
        tool: Tool,
        principal: Principal,
        deadline: float,
    ) -> WriteOutcome | None:
        """None if the plan may run now; an earlier outcome of it; or a refusal raised."""
        if record.state is not PlanState.CONFIRMED or self._expired(record.plan):
            # Not runnable now; but a stored or running outcome of it still answers.
            existing = await self._io(self._store.get_execution, job.key)
            if existing is not None and existing.status is not ExecutionStatus.PREPARED:
                return await self.executor.replay(job, existing, deadline=deadline)
        # This call may run the tool: the plan must be executable and its target unchanged.
        self._check_executable(record, tool, principal)
        return None

    def _expired(self, plan: Plan) -> bool:
        return self._clock.now() >= plan.expires_at

    def _remember(self, plan: Plan) -> None:
        known = self._known_plans
        known[plan.plan_id] = plan
        if len(known) > _KNOWN_PLANS:
            known.popitem(last=False)

    def _check_executable(self, record: PlanRecord, tool: Tool, principal: Principal) -> None:
        plan = record.plan
        if record.state in {PlanState.PROPOSED, PlanState.AWAITING_CONFIRMATION}:
            code = (
                ErrorCode.NEEDS_APPROVAL
                if plan.confirmation is ConfirmationMode.APPROVE
                else ErrorCode.NEEDS_CONFIRMATION
            )
            raise self._refuse(plan, principal, code, "The plan is not confirmed yet.")
        if record.state is PlanState.EXPIRED or self._clock.now() >= plan.expires_at:
            raise self._refuse(
                plan, principal, ErrorCode.PLAN_EXPIRED, "The plan expired before it was executed."
            )
        if record.state is not PlanState.CONFIRMED:
            raise self._refuse(
                plan, principal, ErrorCode.PLAN_CLOSED, f"The plan is {record.state.value.lower()}."
            )
        self._check_content(plan, tool, principal)

    def _check_content(self, plan: Plan, tool: Tool, principal: Principal) -> None:
        """The checks that need the plan's content only, not its state."""
        if tool.spec.schema_version != plan.schema_version:
            raise self._refuse(
                plan, principal, ErrorCode.PLAN_CHANGED, "The tool changed since the plan was made."
            )
        try:
            check_permissions(principal, tool.spec)
        except Refusal as refusal:
            raise self._refuse(plan, principal, refusal.code, refusal.summary) from None

    async def execute_command(
        self,
        tool: Tool,
        bound: BoundArguments,
        principal: Principal,
        *,
        command_id: str,
        call_id: str,
        deadline: float | None = None,
    ) -> WriteOutcome:
        """Run an unconfirmed write keyed by the host's command id (not the model's).

        `deadline` (on the clock's monotonic scale) is the caller's; the tool's declared
        timeout applies when it ends sooner, and is the deadline when none is given.
        Like `execute_plan`, it returns every refusal and failure as an outcome.
        """
        spec = tool.spec
        limit = self._clock.monotonic() + spec.timeout
        deadline = limit if deadline is None else min(deadline, limit)
        arguments = canonical_json(dict(bound.json)).decode()
        job = WriteJob(
            tool=tool,
            arguments=bound.json,
            principal=principal,
            key=command_key(
                tenant_id=principal.tenant_id,
                tool=spec.name,
                command_id=command_id,
                user_id=principal.user_id,
                scope=spec.idempotency.scope,
            ),
            plan_hash=intent_hash(
                tool=spec.name,
                schema_version=spec.schema_version,
                arguments=arguments,
                tenant_id=principal.tenant_id,
            ),
            call_id=call_id,
        )
        return await self._shaped(await self.executor.execute(job, deadline=deadline), principal)

    # --- helpers ------------------------------------------------------------------------------

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
        if not allowed or tool is None:
            raise self._refuse(
                plan,
                principal,
                ErrorCode.PERMISSION_DENIED,
                "You may not confirm or approve this plan.",
            )
        if self._clock.now() >= plan.expires_at:
            # A confirmed plan is not expired here: its execution may have started, and
            # `_check_executable` refuses to start one after expiry anyway.
            if record.state in {PlanState.PROPOSED, PlanState.AWAITING_CONFIRMATION}:
                await self._io(
                    self._store.move_plan,
                    plan_id,
                    expect_state=record.state,
                    expect_version=record.version,
                    state=PlanState.EXPIRED,
                    at=self._clock.now(),
                )
            raise self._refuse(
                plan, principal, ErrorCode.PLAN_EXPIRED, "The plan expired; ask for a new one."
            )
        return _Checked(record=record, tool=tool)

    def _refuse(
        self, plan: Plan, principal: Principal, code: ErrorCode, message: str
    ) -> WriteRefusedError:
        self._audit(plan, principal, "confirm", "refused", code=code)
        return WriteRefusedError(code, message)

    def _audit(
        self,
        plan: Plan,
        principal: Principal,
        stage: str,
        decision: str,
        *,
        code: str | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> None:
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

    async def _io(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:  # noqa: ANN401
        return await asyncio.to_thread(fn, *args, **kwargs)


_UNREACHABLE = (
    "The plan's records could not be reached; nothing was run by this call. Repeating "
    "it is safe: it takes effect at most once."
)
_RETRYABLE = frozenset({ErrorCode.TRANSIENT, ErrorCode.TIMEOUT})


def _refused(code: ErrorCode, message: str, *, call_id: str, plan: Plan | None) -> WriteOutcome:
    """The outcome of an execution refused before its key was claimed: nothing ran."""
    envelope = Envelope(
        call_id=call_id,
        tool=plan.tool if plan is not None else "",
        status=Status.ERROR,
        summary=message,
        schema_version=plan.schema_version if plan is not None else None,
        error=ErrorDetail(code=code, retryable=code in _RETRYABLE),
        trust=Trust.HANDRAIL,
        source="handrail",
    )
    # No key: nothing was attempted under one (`record_for` finds it, once it runs).
    return WriteOutcome(
        envelope=envelope, record=None, key=None, plan_id=None if plan is None else plan.plan_id
    )


def _plausible_id(plan_id: object) -> bool:
    return isinstance(plan_id, str) and _PLAN_ID.fullmatch(plan_id) is not None


async def _call(hook: Callable[..., Any], *args: Any) -> Any:  # noqa: ANN401
    """Run a sync hook in a worker thread, or await an async one."""
    if asyncio.iscoroutinefunction(hook):
        return await hook(*args)
    outcome = await asyncio.to_thread(hook, *args)
    if asyncio.iscoroutine(outcome):
        return await outcome
    return outcome
