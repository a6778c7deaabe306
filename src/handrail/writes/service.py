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

This module is the façade and wires the path; deciding lives in `_decisions`,
running a decided write in `_running`, keyed execution in `executor`.
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
from collections.abc import Awaitable, Callable
from secrets import token_hex
from typing import TYPE_CHECKING, Any, TypeVar

from handrail.clock import Clock, SystemClock
from handrail.context import ToolContext
from handrail.credentials import SecretLedger, SecretProvider, Secrets
from handrail.declare.definition import BoundArguments, Tool
from handrail.declare.registry import Registry
from handrail.execution import ExecutionRecord
from handrail.plans import Plan, PlanRecord, PlanState
from handrail.principal import Principal
from handrail.record.audit import Auditor, AuditSink
from handrail.retry import Sleep
from handrail.shaping.redact import Redactor
from handrail.shaping.shaper import Shaper
from handrail.spec import ConfirmationMode, ConfirmationPolicy, ToolSpec
from handrail.store.base import Store
from handrail.writes._decisions import Decisions, proposal_envelope, stricter
from handrail.writes._running import Runner
from handrail.writes.confirmation import ConfirmationToken, Keyring
from handrail.writes.executor import Executor
from handrail.writes.outcome import WriteOutcome

if TYPE_CHECKING:
    from handrail.telemetry import Telemetry
    from handrail.writes._telemetry import WriteTelemetry

# `proposal_envelope` and `stricter` are what the gate reads of deciding (handrail.gate).
__all__ = ["Writes", "proposal_envelope", "stricter"]

T = TypeVar("T")


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
        telemetry: Telemetry | None = None,
    ) -> None:
        # None records no spans or metrics (and loads no OpenTelemetry).
        self._telemetry = telemetry
        self._traced: WriteTelemetry | None = None
        # Results of writes are shaped like any other; secrets are handed out by handle
        # and their values scrubbed from stored results and the audit trail.
        self._shaper = shaper or Shaper(
            redactor=Redactor(hash_key=os.urandom(32)), max_chars=max_result_chars
        )
        self._ledger = ledger if ledger is not None else SecretLedger()

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

        self._store = store
        self._clock = clock or SystemClock()
        if telemetry is not None:
            from handrail.writes._telemetry import WriteTelemetry  # noqa: PLC0415 - only with one

            self._traced = WriteTelemetry(telemetry, self._clock)
        auditor = Auditor(audit, self._clock, new_id=new_id, scrub=self._scrub)
        self.executor = Executor(
            store,
            clock=self._clock,
            auditor=auditor,
            worker_id=worker_id or f"worker-{token_hex(6)}",
            sleep=sleep,
            rng=rng,
            secrets=secrets_for,
            scrub=self._ledger.scrub,
            telemetry=telemetry,
        )
        self._decisions = Decisions(
            registry=registry,
            store=store,
            keyring=keyring,
            clock=self._clock,
            auditor=auditor,
            new_id=new_id or (lambda: token_hex(16)),
            io=self._hop,
        )
        self._runner = Runner(
            registry=registry,
            store=store,
            clock=self._clock,
            decisions=self._decisions,
            executor=self.executor,
            shaper=self._shaper,
            ledger=self._ledger,
            io=self._hop,
        )

    @property
    def ledger(self) -> SecretLedger:
        """The secret values handed to write tools, to scrub from every sink."""
        return self._ledger

    @property
    def shaper(self) -> Shaper:
        """What shapes the results of writes for the model."""
        return self._shaper

    @property
    def store(self) -> Store:
        """The store plans and executions live in."""
        return self._store

    @property
    def clock(self) -> Clock:
        """The clock plans expire by."""
        return self._clock

    # --- plan (called by the gate after all four checks) -------------------------------------

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

        def propose() -> Awaitable[Plan]:
            return self._decisions.propose(
                tool, bound, principal, mode=mode, ctx=ctx, revises=revises, approval=approval
            )

        if self._traced is None:
            return await propose()
        return await self._traced.plan(tool.spec.name, principal, propose)

    async def get_plan(self, plan_id: str, principal: Principal) -> PlanRecord:
        """A plan of the principal's tenant; NOT_FOUND for any other (no existence leak)."""
        return await self._decisions.get_plan(plan_id, principal)

    # --- confirm (or approve, or reject) -----------------------------------------------------

    async def issue_token(self, plan_id: str, principal: Principal) -> ConfirmationToken:
        """A one-time token for this principal to confirm or approve the plan.

        CONFIRM plans: only the requester. APPROVE plans: holders of the approver
        permission other than the requester. The plan then awaits confirmation.
        """
        return await self._decisions.issue_token(plan_id, principal)

    async def confirm(self, plan_id: str, token: str, principal: Principal) -> PlanRecord:
        """Confirm (CONFIRM plans) or approve (APPROVE plans) with a token; one use each.

        Refusals raise WriteRefusedError with their own code: CONFIRMATION_INVALID
        (forged, altered, another person's), PLAN_CHANGED (issued for another plan or
        hash), PLAN_EXPIRED, CONFIRMATION_REPLAYED, PERMISSION_DENIED, PLAN_CLOSED.
        """
        if self._traced is None:
            return await self._decisions.confirm(plan_id, token, principal)
        known = self._decisions.known(plan_id)
        return await self._traced.confirm(
            plan_id, principal, known, lambda: self._decisions.confirm(plan_id, token, principal)
        )

    async def reject(
        self,
        plan_id: str,
        principal: Principal,
        *,
        state: PlanState = PlanState.REJECTED,
        reason: str | None = None,
    ) -> PlanRecord:
        """Reject (or, from the gate, supersede) a plan that is not yet executed.

        Only the requester, or for APPROVE plans a holder of the approver permission.
        `reason`, a person's words, goes into the audit event of the rejection.
        """

        def reject() -> Awaitable[PlanRecord]:
            return self._decisions.reject(plan_id, principal, state=state, reason=reason)

        if self._traced is None:
            return await reject()
        return await self._traced.confirm(
            plan_id, principal, self._decisions.known(plan_id), reject
        )

    def check_may_decide(self, record: PlanRecord, principal: Principal) -> None:
        """PERMISSION_DENIED unless `principal` asked for the plan or may approve it."""
        self._decisions.check_may_decide(record, principal)

    # --- execute once --------------------------------------------------------------------------

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
        failure is the outcome's envelope with its code, never an exception. With telemetry,
        it is a tool call of its own (`execute_tool {tool}`): it never runs inside a gate's.
        """

        def run() -> Awaitable[WriteOutcome]:
            return self._runner.execute_plan(plan_id, principal, timeout=timeout, call_id=call_id)

        if self._traced is None:
            return await run()
        known = functools.partial(self._decisions.known, plan_id)
        return await self._traced.call(plan_id, call_id or plan_id, principal, known, run)

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
        return await self._runner.execute_command(
            tool, bound, principal, command_id=command_id, call_id=call_id, deadline=deadline
        )

    async def record_for(self, plan_id: str, principal: Principal) -> ExecutionRecord | None:
        """The execution record of a plan of the principal's tenant; None until it runs.

        The record carries the idempotency key, status, attempts, business id and the
        stored result. NOT_FOUND (WriteRefusedError) for a plan of another tenant or
        none; StoreError when the store fails.
        """
        return await self._runner.record_for(plan_id, principal)

    # --- helpers ------------------------------------------------------------------------------

    def _scrub(self, text: str) -> str:
        return self._shaper.redact_text(self._ledger.scrub(text))

    async def _io(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:  # noqa: ANN401
        return await asyncio.to_thread(fn, *args, **kwargs)

    def _hop(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Awaitable[T]:  # noqa: ANN401
        # What deciding and running are given: `_io` looked up per call, so a replaced one
        # (the write benchmark's profile) applies to every store call of this instance.
        return self._io(fn, *args, **kwargs)
