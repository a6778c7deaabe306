"""Gate: the façade that takes one proposed call through every stage to an Envelope.

lookup → 1 syntax → 2 schema → tool permission → 3 business rules → 4 authorization
→ risk → execute under the deadline → shape → envelope, with an audit event per stage.
The order is straight-line code here and nowhere else; it is not pluggable. Refusals
become an Envelope exactly once, in this module. A conversation guard, when given, refuses
before lookup (breaker) and after the policy's decision (bypass).
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, TypeVar

from handrail.authz.guard import ConversationGuard
from handrail.authz.policy import (
    Decision,
    Outcome,
    Policy,
    check_permissions,
    describe,
    refusal_for,
)
from handrail.authz.quota import Limiter
from handrail.calls import ToolCall
from handrail.checks.business import check_business_rules
from handrail.checks.schema import validate_arguments
from handrail.checks.syntax import ArgumentLimits, parse_arguments, refuse_defect
from handrail.clock import Clock, SystemClock
from handrail.context import ToolContext
from handrail.credentials import SecretLedger, SecretProvider, Secrets
from handrail.deadline import DeadlineExceededError, within
from handrail.declare.definition import BoundArguments, Tool
from handrail.declare.exposure import Exposure
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
from handrail.plans import PlanState
from handrail.principal import Principal
from handrail.record.audit import Auditor, AuditSink
from handrail.record.trail import MAX_NAME_IN_AUDIT, CallTrail, count_denial, describe_exception
from handrail.retry import Sleep, retrying
from handrail.scheduler import CallPlan, TurnScheduler
from handrail.shaping.budget import Budget, json_text
from handrail.shaping.redact import Redactor
from handrail.shaping.shaper import Shaper
from handrail.spec import ConfirmationMode, ConfirmationPolicy, IdempotencyMode
from handrail.text import escape_lone_surrogates
from handrail.writes.outcome import WriteOutcome
from handrail.writes.service import Writes, proposal_envelope, stricter

__all__ = ["Gate"]

T = TypeVar("T")

_CACHED_AUDIT_TEXT = 512
_GENERIC_FAILURE = "The tool failed with an internal error. It was recorded for the operators."
_ASKS = {Outcome.CONFIRM: ConfirmationMode.CONFIRM, Outcome.APPROVE: ConfirmationMode.APPROVE}


class Gate:
    """Turns proposed tool calls into envelopes, one straight path per call.

    With `writes` configured, a write that passes all four checks becomes a stored
    plan awaiting confirmation (NEEDS_CONFIRMATION / NEEDS_APPROVAL with the plan id
    and impact), or, for an unconfirmed COMMAND_ID tool, runs once under the host's
    command id. Without it, writes are refused with RISK_BLOCKED.
    """

    def __init__(
        self,
        registry: Registry,
        *,
        audit: AuditSink | None = None,
        clock: Clock | None = None,
        policy: Policy | None = None,
        limiter: Limiter | None = None,
        guard: ConversationGuard | None = None,
        limits: ArgumentLimits | None = None,
        default_timeout: float = 30.0,
        max_result_chars: int = 16_000,
        turn_budget: Budget | None = None,
        shaper: Shaper | None = None,
        secrets: SecretProvider | None = None,
        max_concurrency: int = 8,
        bulkheads: Mapping[str, int] | None = None,
        new_id: Callable[[], str] | None = None,
        writes: Writes | None = None,
        sleep: Sleep = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        if default_timeout <= 0 or max_result_chars <= 0 or max_concurrency <= 0:
            raise ConfigurationError("timeouts, result limits and concurrency must be positive")
        self._registry = registry
        self._clock = clock or SystemClock()
        self._shaper = shaper or Shaper(
            redactor=Redactor(hash_key=os.urandom(32)),
            max_chars=max_result_chars,
        )
        # Every secret value handed to a tool, to scrub from results, audit and logs.
        self._ledger = writes.ledger if writes is not None else SecretLedger()
        self._secrets = secrets
        # Argument summaries and short details repeat (same tool, same arguments, the
        # same refusal): their redaction is remembered, bounded.
        self._redact_short = functools.lru_cache(maxsize=4096)(self._shaper.redact_text)
        self._auditor = Auditor(audit, self._clock, new_id=new_id, scrub=self._scrub)
        # The results of one model turn share this; each call gets an equal part.
        self._turn = turn_budget or Budget(max_chars=4 * max_result_chars)
        # None means the default: the required-permissions check alone.
        self._policy: Policy | None = policy
        self._limiter = limiter
        # Consulted only for calls that name their conversation; None costs nothing.
        self._guard = guard
        self._limits = limits or ArgumentLimits()
        self._default_timeout = default_timeout
        self._scheduler = TurnScheduler(
            max_concurrency=max_concurrency, bulkheads=bulkheads, clock=self._clock
        )
        # None: writes are refused with RISK_BLOCKED (a read-only gate).
        self._writes = writes
        # Retry backoff of reads: injected so tests neither wait nor guess.
        self._sleep = sleep
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not secrecy

    @property
    def registry(self) -> Registry:
        """The registry this gate looks tools up in."""
        return self._registry

    async def handle(
        self,
        call: ToolCall,
        principal: Principal,
        *,
        timeout: float | None = None,
        conversation: str | None = None,
        exposure: Exposure | None = None,
        command_id: str | None = None,
        _revises: str | None = None,
        _share: Budget | None = None,
        _outcome: list[WriteOutcome] | None = None,
    ) -> Envelope:
        """Take one call through every stage; always returns an Envelope for `call.id`.

        `timeout` is the whole request's budget in seconds; the tool gets the smaller
        of its own timeout and what is left of that budget. `conversation` is the host's
        id of the conversation the call belongs to (never the model's); with a guard
        configured, it is what denials are remembered by. `exposure` is what this
        request showed the model (`Registry.exposure`): a tool outside it is UNKNOWN_TOOL
        even if the principal could otherwise use it. `command_id` is the host's id of
        the user's intent, the idempotency key source of unconfirmed writes.
        """
        deadline = self._clock.monotonic() + (self._default_timeout if timeout is None else timeout)
        trail = (
            CallTrail(self._auditor, self._clock, call, principal)
            if self._auditor.enabled
            else None
        )
        tool: Tool | None = None
        guard = self._guard if conversation is not None else None
        target: str | None = None
        try:
            if guard is not None and conversation is not None:
                await guard.admit(principal, conversation)
            tool = self._lookup(call, principal, exposure)
            if trail:
                trail.tool(tool)
                trail.record("lookup", "pass")

            try:
                if call.defect is not None:
                    raise refuse_defect(call.defect)
                arguments = parse_arguments(call.arguments, self._limits)
                self._refuse_secrets(arguments)
            except Refusal:
                if trail:
                    trail.raw_arguments(call.arguments)
                raise
            if trail:
                trail.arguments(arguments)
                trail.record("syntax", "pass")

            bound = validate_arguments(tool, arguments)
            if trail:
                trail.record("schema", "pass")

            # The coarse check: before stage 3 reads any data, so that a caller who may
            # not use the tool at all cannot tell an existing id from a missing one.
            check_permissions(principal, tool.spec)
            if trail:
                trail.record("permission", "pass")

            call_deadline = min(deadline, self._clock.monotonic() + tool.spec.timeout)
            ctx = (
                self._context(tool, principal, call, call_deadline) if tool.needs_context else None
            )
            if tool.validators and ctx is not None:
                await self._within(
                    call_deadline,
                    "business",
                    check_business_rules(tool, bound, ctx),
                )
            if trail:
                trail.record("business", "pass")

            required = tool.spec.confirmation.mode
            approval: ConfirmationPolicy | None = None
            if self._policy is not None:
                decision = await self._decide(
                    self._policy,
                    tool,
                    bound,
                    principal,
                    call,
                    conversation=conversation,
                )
                target = decision.resource_key
                if guard is not None and conversation is not None:
                    await guard.screen(principal, conversation, tool.spec, decision)
                refusal = refusal_for(decision, tool.spec)
                if (
                    decision.outcome in _ASKS
                    and self._writes is not None
                    and not tool.spec.read_only
                ):
                    # A write the policy wants confirmed becomes a plan below.
                    required = stricter(required, _ASKS[decision.outcome])
                    approval = decision.approval or approval
                elif refusal is not None:
                    raise refusal
                if trail:
                    trail.record("authorization", "pass", detail=describe(decision))
            elif trail:
                trail.record("authorization", "pass")

            if self._limiter is not None:
                try:
                    retry_after = await self._limiter.acquire(principal, tool.spec)
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
                        f"{tool.spec.name} is being called too often; wait before retrying.",
                        stage="quota",
                        retryable=True,
                        retry_after=retry_after,
                    )
                if trail:
                    trail.record("quota", "pass")

            if tool.spec.read_only:
                result = await self._execute(tool, bound, ctx, call_deadline)
                envelope = await self._shape(call, tool, principal, result, _share)
                if trail:
                    trail.record("execute", "ok", code=envelope.status.value)
            else:
                outcome = await self._write(
                    call,
                    tool,
                    bound,
                    principal,
                    required=required,
                    approval=approval,
                    deadline=call_deadline,
                    command_id=command_id,
                    revises=_revises,
                )
                envelope = outcome.envelope
                if _outcome is not None:
                    _outcome.append(outcome)
                if trail:
                    code = envelope.error_type or envelope.status.value
                    trail.record("write", "planned" if envelope.data else "done", code=code)
        except Refusal as refusal:
            envelope = self._refused(call, tool, refusal)
            if trail:
                trail.record(refusal.stage, "refused", code=refusal.code, detail=refusal.detail)
            if (
                guard is not None
                and conversation is not None
                and refusal.code is ErrorCode.PERMISSION_DENIED
            ):
                name = tool.spec.name if tool else str(call.name)[:MAX_NAME_IN_AUDIT]
                await count_denial(
                    guard,
                    principal=principal,
                    conversation=conversation,
                    tool=name,
                    target=target,
                    trail=trail,
                )
        except asyncio.CancelledError:
            if trail:
                trail.record("execute", "cancelled", code=ErrorCode.CANCELLED)
                trail.emit()
            raise
        except Exception as exc:  # noqa: BLE001 - the gate's boundary: nothing escapes to the model
            envelope = self._failed(call, tool, ErrorCode.FAILED_FINAL, retryable=False)
            if trail:
                trail.record(
                    "gate", "error", code=ErrorCode.FAILED_FINAL, detail=describe_exception(exc)
                )
        except BaseException as exc:
            # SystemExit, KeyboardInterrupt and the like are not the gate's to swallow,
            # but the stages this call already passed must still reach the audit log.
            if trail:
                trail.record("gate", "aborted", detail=describe_exception(exc))
                trail.emit()
            raise
        if trail:
            trail.emit()
        return envelope

    async def handle_write(
        self,
        call: ToolCall,
        principal: Principal,
        *,
        command_id: str | None = None,
        timeout: float | None = None,
        conversation: str | None = None,
        exposure: Exposure | None = None,
    ) -> WriteOutcome:
        """`handle`, answered with the typed outcome a host needs for a write.

        The same stages and the same envelope (`outcome.envelope`), plus the execution
        record, its idempotency key, whether it was replayed and the business id. A
        write proposed as a plan has its plan id and no key yet; a call refused before
        it ran, or a read, has neither record nor key. Never raises for an outcome.
        """
        written: list[WriteOutcome] = []
        envelope = await self.handle(
            call,
            principal,
            timeout=timeout,
            conversation=conversation,
            exposure=exposure,
            command_id=command_id,
            _outcome=written,
        )
        if written and written[0].envelope is envelope:
            return written[0]
        return WriteOutcome(envelope=envelope, record=None, key=None)

    async def handle_batch(
        self,
        calls: Sequence[ToolCall],
        principal: Principal,
        *,
        timeout: float | None = None,
        conversation: str | None = None,
        exposure: Exposure | None = None,
        command_ids: Mapping[str, str] | None = None,
        _outcomes: list[WriteOutcome] | None = None,
    ) -> list[Envelope]:
        """Handle the calls of one model turn; envelopes come back in call order.

        Scheduled by `TurnScheduler`: independent read-only calls run concurrently (at
        most `max_concurrency` at once, and per tool its bulkhead); each write waits for
        every earlier call and holds back every later one, in the model's order. All
        share one deadline. A repeated call id is refused, since results are matched by
        id. The turn's result budget is split equally among its calls. `command_ids`
        gives the host's command id of each write, by call id.
        """
        deadline = self._clock.monotonic() + (self._default_timeout if timeout is None else timeout)
        results: dict[int, Envelope] = {}
        seen: set[str] = set()
        plans: list[CallPlan] = []
        indexes: list[int] = []
        for index, call in enumerate(calls):
            if call.id in seen:
                results[index] = self._duplicate_id(call, principal)
                continue
            seen.add(call.id)
            found = self._registry.lookup(call.name, principal)
            plans.append(
                CallPlan(
                    call=call,
                    read_only=found is not None and found.spec.read_only,
                    tool=found.spec.name if found is not None else None,
                ),
            )
            indexes.append(index)
        share = self._share_of(len(plans))
        commands = command_ids or {}

        async def execute(call: ToolCall, until: float) -> Envelope:
            return await self.handle(
                call,
                principal,
                timeout=until - self._clock.monotonic(),
                conversation=conversation,
                exposure=exposure,
                command_id=commands.get(call.id),
                _share=share,
                _outcome=_outcomes,
            )

        envelopes = await self._scheduler.run(plans, execute, deadline=deadline)
        results.update(zip(indexes, envelopes, strict=True))
        return [results[index] for index in range(len(calls))]

    async def handle_batch_writes(
        self,
        calls: Sequence[ToolCall],
        principal: Principal,
        *,
        timeout: float | None = None,
        conversation: str | None = None,
        exposure: Exposure | None = None,
        command_ids: Mapping[str, str] | None = None,
    ) -> list[WriteOutcome]:
        """`handle_batch`, answered with one typed outcome per call, in call order.

        Each is what `handle_write` would say for that call; the envelopes are those
        `handle_batch` returns.
        """
        written: list[WriteOutcome] = []
        envelopes = await self.handle_batch(
            calls,
            principal,
            timeout=timeout,
            conversation=conversation,
            exposure=exposure,
            command_ids=command_ids,
            _outcomes=written,
        )
        by_envelope = {id(outcome.envelope): outcome for outcome in written}
        return [
            by_envelope.get(id(envelope)) or WriteOutcome(envelope=envelope, record=None, key=None)
            for envelope in envelopes
        ]

    def _share_of(self, calls: int) -> Budget:
        """Each call's equal part of the turn's result budget."""
        turn, parts = self._turn, max(1, calls)
        tokens = None if turn.max_tokens is None else max(1, turn.max_tokens // parts)
        return Budget(max_chars=max(1, turn.max_chars // parts), max_tokens=tokens)

    def handle_sync(
        self,
        call: ToolCall,
        principal: Principal,
        *,
        timeout: float | None = None,
        conversation: str | None = None,
        exposure: Exposure | None = None,
    ) -> Envelope:
        """`handle` for applications without an event loop."""
        _require_no_running_loop()
        return asyncio.run(
            self.handle(
                call,
                principal,
                timeout=timeout,
                conversation=conversation,
                exposure=exposure,
            ),
        )

    def handle_batch_sync(
        self,
        calls: Sequence[ToolCall],
        principal: Principal,
        *,
        timeout: float | None = None,
        conversation: str | None = None,
        exposure: Exposure | None = None,
    ) -> list[Envelope]:
        """`handle_batch` for applications without an event loop."""
        _require_no_running_loop()
        return asyncio.run(
            self.handle_batch(
                calls,
                principal,
                timeout=timeout,
                conversation=conversation,
                exposure=exposure,
            ),
        )

    # --- the path of one call ----------------------------------------------------------------

    async def _write(
        self,
        call: ToolCall,
        tool: Tool,
        bound: BoundArguments,
        principal: Principal,
        *,
        required: ConfirmationMode,
        approval: ConfirmationPolicy | None,
        deadline: float,
        command_id: str | None,
        revises: str | None,
    ) -> WriteOutcome:
        """A write that passed every check: propose a plan, or run it under a command id."""
        writes = self._writes
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
        ctx = self._context(tool, principal, call, deadline)
        try:
            plan = await self._within(
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
            envelope=proposal_envelope(call.id, spec, plan),
            record=None,
            key=None,
            plan_id=plan.plan_id,
        )

    async def revise_plan(
        self,
        plan_id: str,
        arguments: str,
        principal: Principal,
        *,
        timeout: float | None = None,
    ) -> Envelope:
        """An approver's edit: new arguments make a new plan, checked by all four stages.

        The new plan needs its own confirmation; the old one is rejected once the new
        one exists. Refused with WriteRefusedError when the plan cannot be revised.
        """
        writes = self._writes
        if writes is None:
            raise ConfigurationError("revising plans needs a gate configured with writes")
        record = await writes.get_plan(plan_id, principal)
        writes.check_may_decide(record, principal)
        if record.state not in {PlanState.PROPOSED, PlanState.AWAITING_CONFIRMATION}:
            raise WriteRefusedError(
                ErrorCode.PLAN_CLOSED, f"The plan is {record.state.value.lower()}."
            )
        call = ToolCall(id=f"revise-{plan_id}", name=record.plan.tool, arguments=arguments)
        envelope = await self.handle(call, principal, timeout=timeout, _revises=plan_id)
        if envelope.error_type in {ErrorCode.NEEDS_CONFIRMATION, ErrorCode.NEEDS_APPROVAL}:
            await writes.reject(plan_id, principal)
        return envelope

    def _lookup(self, call: ToolCall, principal: Principal, exposure: Exposure | None) -> Tool:
        """The tool the call names, if this principal may reach it and was shown it.

        A tool outside `exposure` is refused exactly like a name that exists nowhere:
        its envelope names no schema version either.
        """
        tool = self._registry.lookup(call.name, principal)
        if tool is None or (exposure is not None and call.name not in exposure.names):
            raise Refusal(
                ErrorCode.UNKNOWN_TOOL,
                "No tool of that name is available. Use only the tools you were given.",
                stage="lookup",
            )
        return tool

    async def _decide(
        self,
        policy: Policy,
        tool: Tool,
        bound: BoundArguments,
        principal: Principal,
        call: ToolCall,
        *,
        conversation: str | None,
    ) -> Decision:
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

    async def _within(self, deadline: float, stage: str, work: Coroutine[Any, Any, T]) -> T:
        """Await `work` until the deadline (on the gate's clock); a TIMEOUT refusal after."""
        remaining = deadline - self._clock.monotonic()
        try:
            return await within(work, remaining)
        except DeadlineExceededError:
            raise Refusal(
                ErrorCode.TIMEOUT,
                "The call ran out of time before it finished. You may retry it once.",
                stage=stage,
                retryable=True,
                detail=f"deadline of {remaining:.3f}s passed in stage {stage}",
            ) from None

    async def _execute(
        self,
        tool: Tool,
        bound: BoundArguments,
        ctx: ToolContext | None,
        deadline: float,
    ) -> object:
        policy = tool.spec.retry
        transient_types = policy.transient

        def retryable(exc: BaseException) -> bool:
            # Only TRANSIENT and RATE_LIMITED failures; a TIMEOUT refusal never is.
            if isinstance(exc, ToolSignal):
                return exc.retryable
            return not isinstance(exc, Refusal) and isinstance(exc, transient_types)

        try:
            if policy.max_attempts == 1:
                # The common case pays for no retry machinery.
                return await self._within(deadline, "execute", tool.invoke(bound, ctx))
            return await retrying(
                lambda _attempt: self._within(deadline, "execute", tool.invoke(bound, ctx)),
                policy=policy,
                retryable=retryable,
                deadline=deadline,
                clock=self._clock,
                sleep=self._sleep,
                rng=self._rng,
            )
        except Refusal:
            raise
        except ToolSignal as signal:
            raise Refusal(
                signal.code,
                signal.message,
                stage="execute",
                retryable=signal.retryable,
                retry_after=getattr(signal, "retry_after", None),
                candidates=getattr(signal, "candidates", ()),
            ) from None
        except Exception as exc:  # noqa: BLE001 - the tool boundary: anything undeclared maps here
            transient = isinstance(exc, tool.spec.retry.transient)
            raise Refusal(
                ErrorCode.TRANSIENT if transient else ErrorCode.FAILED_FINAL,
                (
                    "The tool failed with a temporary error. You may retry the same call."
                    if transient
                    else _GENERIC_FAILURE
                ),
                stage="execute",
                retryable=transient,
                detail=describe_exception(exc),
            ) from None

    @property
    def shaper(self) -> Shaper:
        """What makes the envelopes of results (budgets, redaction, pages)."""
        return self._shaper

    @property
    def ledger(self) -> SecretLedger:
        """The secret values this gate handed to tools, to scrub from any other sink."""
        return self._ledger

    def _refuse_secrets(self, arguments: object) -> None:
        """Refuse arguments holding a secret value a tool was handed (by handle only)."""
        if len(self._ledger) and self._ledger.contains(json_text(arguments)):
            raise Refusal(
                ErrorCode.INVALID_ARGUMENTS,
                "The arguments contain a credential. Tools get credentials from the host "
                "by name; never pass one as an argument.",
                stage="syntax",
            )

    def _scrub(self, text: str) -> str:
        """Audit text without known secret values or the redactor's findings."""
        if len(self._ledger):
            text = self._ledger.scrub(text)
        if len(text) > _CACHED_AUDIT_TEXT:
            return self._shaper.redact_text(text)
        return self._redact_short(text)

    def _context(
        self, tool: Tool, principal: Principal, call: ToolCall, deadline: float
    ) -> ToolContext:
        spec = tool.spec
        secrets = (
            Secrets(
                self._secrets,
                tenant_id=principal.tenant_id,
                allowed=spec.secrets,
                tool=spec.name,
                ledger=self._ledger,
            )
            if self._secrets is not None and spec.secrets
            else None
        )
        return ToolContext(
            principal=principal,
            call_id=call.id,
            tool=spec.name,
            deadline=deadline,
            clock=self._clock,
            secrets=secrets,
        )

    async def _shape(
        self,
        call: ToolCall,
        tool: Tool,
        principal: Principal,
        result: object,
        share: Budget | None,
    ) -> Envelope:
        try:
            return await self._shaper.shape(
                call_id=call.id,
                spec=tool.spec,
                principal=principal,
                result=result,
                share=share,
                ledger=self._ledger,
            )
        except ValueError as exc:
            raise Refusal(
                ErrorCode.FAILED_FINAL,
                _GENERIC_FAILURE,
                stage="result",
                detail=f"result is not JSON-serialisable: {describe_exception(exc)}",
            ) from None

    def _refused(self, call: ToolCall, tool: Tool | None, refusal: Refusal) -> Envelope:
        # Candidates are a business rule's data (possibly personal): redacted, and the
        # refusal is then no longer Handrail's words alone.
        candidates = refusal.candidates
        if candidates:
            candidates = tuple(self._shaper.redact_value(list(candidates)))
        return Envelope(
            call_id=call.id,
            tool=tool.spec.name if tool else _proposed_name(call),
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
            trust=Trust.INTERNAL if candidates else Trust.HANDRAIL,
            source=None if candidates else "handrail",
        )

    def _failed(
        self,
        call: ToolCall,
        tool: Tool | None,
        code: ErrorCode,
        *,
        retryable: bool,
    ) -> Envelope:
        return self._refused(
            call,
            tool,
            Refusal(code, _GENERIC_FAILURE, stage="gate", retryable=retryable),
        )

    def _duplicate_id(self, call: ToolCall, principal: Principal) -> Envelope:
        refusal = Refusal(
            ErrorCode.INVALID_ARGUMENTS,
            "Another call in this turn has the same id; this one was not run.",
            stage="lookup",
            detail="duplicate call id in one batch",
        )
        if self._auditor.enabled:
            trail = CallTrail(self._auditor, self._clock, call, principal)
            trail.record(refusal.stage, "refused", code=refusal.code, detail=refusal.detail)
            trail.emit()
        return self._refused(call, None, refusal)


def _proposed_name(call: ToolCall) -> str:
    """The name a refused call proposed, bounded, and writable as UTF-8 (for any log)."""
    return escape_lone_surrogates(str(call.name)[:MAX_NAME_IN_AUDIT])[:MAX_NAME_IN_AUDIT]


def _require_no_running_loop() -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise ConfigurationError("a *_sync method was called inside an event loop; await instead")
