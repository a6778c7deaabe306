"""Gate: the façade that takes one proposed call through every stage to an Envelope.

lookup → 1 syntax → 2 schema → tool permission → 3 business rules → 4 authorization
→ risk → execute under the deadline → shape → envelope, with an audit event per stage.
The order is straight-line code in `Gate.handle` and nowhere else; it is not pluggable.
Refusals become an Envelope exactly once, in this package (`_refusals`). A conversation
guard, when given, refuses before lookup (breaker) and after the policy's decision (bypass).
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from handrail.authz.guard import ConversationGuard
from handrail.authz.policy import Policy, check_permissions, describe
from handrail.authz.quota import Limiter
from handrail.calls import ToolCall
from handrail.checks.business import check_business_rules
from handrail.checks.schema import validate_arguments
from handrail.checks.syntax import ArgumentLimits, parse_arguments, refuse_defect
from handrail.clock import Clock, SystemClock
from handrail.credentials import SecretLedger, SecretProvider
from handrail.declare.definition import Tool
from handrail.declare.exposure import Exposure
from handrail.declare.registry import Registry
from handrail.envelope import Envelope
from handrail.errors import ConfigurationError, ErrorCode, Refusal
from handrail.gate._authorization import admit, decide, settle
from handrail.gate._invocation import Invoker
from handrail.gate._refusals import duplicate_id, failed, refused
from handrail.gate._traced import traced
from handrail.gate._write_path import hand_off, revise
from handrail.principal import Principal
from handrail.record.audit import Auditor, AuditSink
from handrail.record.trail import MAX_NAME_IN_AUDIT, CallTrail, count_denial, describe_exception
from handrail.retry import Sleep
from handrail.scheduler import CallPlan, TurnScheduler
from handrail.shaping.budget import Budget, json_text
from handrail.shaping.redact import Redactor
from handrail.shaping.shaper import Shaper
from handrail.spec import ConfirmationPolicy, ToolSpec
from handrail.writes.outcome import WriteOutcome
from handrail.writes.service import Writes

if TYPE_CHECKING:
    from handrail.telemetry import Telemetry
    from handrail.telemetry._calls import CallSpans

__all__ = ["Gate"]

_CACHED_AUDIT_TEXT = 512


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
        ledger: SecretLedger | None = None,
        max_concurrency: int = 8,
        bulkheads: Mapping[str, int] | None = None,
        new_id: Callable[[], str] | None = None,
        writes: Writes | None = None,
        sleep: Sleep = asyncio.sleep,
        rng: random.Random | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        if default_timeout <= 0 or max_result_chars <= 0 or max_concurrency <= 0:
            raise ConfigurationError("timeouts, result limits and concurrency must be positive")
        self._registry = registry
        self._clock = clock or SystemClock()
        self._shaper = shaper or Shaper(
            redactor=Redactor(hash_key=os.urandom(32)),
            max_chars=max_result_chars,
        )
        # Every secret value handed to a tool, to scrub from results, audit and logs;
        # one ledger for the gate and its writes (shared by the workers: `shared_ledger`).
        if writes is not None and ledger is not None and ledger is not writes.ledger:
            raise ConfigurationError("the gate and its writes must share one secret ledger")
        if writes is not None:
            self._ledger = writes.ledger
        else:
            self._ledger = SecretLedger() if ledger is None else ledger
        # Argument summaries and short details repeat (same tool, same arguments, the
        # same refusal): their redaction is remembered, bounded.
        self._redact_short = functools.lru_cache(maxsize=4096)(self._shaper.redact_text)
        self._auditor = Auditor(audit, self._clock, new_id=new_id, scrub=self._scrub)
        # The results of one model turn share this; each call gets an equal part.
        self._turn = turn_budget or Budget(max_chars=4 * max_result_chars)
        # None means the default: the required-permissions check alone.
        self._policy: Policy | None = policy
        self._limiter = limiter
        # Built on first need by `_declared_limiter`: only tools declaring a rate use it.
        self._declared: Limiter | None = None
        # Consulted only for calls that name their conversation; None costs nothing.
        self._guard = guard
        self._limits = limits or ArgumentLimits()
        self._default_timeout = default_timeout
        self._scheduler = TurnScheduler(
            max_concurrency=max_concurrency, bulkheads=bulkheads, clock=self._clock
        )
        # None: writes are refused with RISK_BLOCKED (a read-only gate).
        self._writes = writes
        # None (as a Telemetry on the API's no-ops, dropped) costs one test per call.
        self._telemetry = telemetry if telemetry is not None and telemetry.active else None
        self._invoker = Invoker(
            clock=self._clock,
            shaper=self._shaper,
            ledger=self._ledger,
            secrets=secrets,
            sleep=sleep,
            rng=rng or random.Random(),  # noqa: S311 - jitter, not secrecy
        )

    @property
    def registry(self) -> Registry:
        """The registry this gate looks tools up in."""
        return self._registry

    @property
    def shaper(self) -> Shaper:
        """What makes the envelopes of results (budgets, redaction, pages)."""
        return self._shaper

    @property
    def ledger(self) -> SecretLedger:
        """The secret values this gate handed to tools, to scrub from any other sink."""
        return self._ledger

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
        _spans: CallSpans | None = None,
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
        if self._telemetry is not None and _spans is None:
            again = functools.partial(
                self.handle,
                call,
                principal,
                timeout=timeout,
                conversation=conversation,
                exposure=exposure,
                command_id=command_id,
                _revises=_revises,
                _share=_share,
            )
            return await traced(
                self._telemetry,
                call,
                principal,
                again,
                auditor=self._auditor,
                clock=self._clock,
                scrub=self._scrub,
                outcome=_outcome,
            )
        trail: CallTrail | CallSpans | None = _spans  # spans: stages noted, audit fed
        if trail is None and self._auditor.enabled:
            trail = CallTrail(self._auditor, self._clock, call, principal)
        deadline = self._clock.monotonic() + (self._default_timeout if timeout is None else timeout)
        tool: Tool | None = None
        guard = self._guard if conversation is not None else None
        target: str | None = None
        try:
            if guard is not None and conversation is not None:
                await guard.admit(principal, conversation)
            tool = self._lookup(call, principal, exposure)
            read_only = tool.spec.read_only
            if trail:
                trail.tool(tool)
                trail.record("lookup", "pass")

            try:
                if call.defect is not None:
                    raise refuse_defect(call.defect)
                arguments = parse_arguments(call.arguments, self._limits, write=not read_only)
                if len(self._ledger):
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
            if tool.spec.permissions:  # none required: nothing to check
                check_permissions(principal, tool.spec)
            if trail:
                trail.record("permission", "pass")

            call_deadline = min(deadline, self._clock.monotonic() + tool.spec.timeout)
            ctx = (
                self._invoker.context(tool, principal, call, call_deadline, exposure)
                if tool.needs_context
                else None
            )
            if tool.validators and ctx is not None:
                await self._invoker.within(
                    call_deadline,
                    "business",
                    check_business_rules(tool, bound, ctx),
                )
            if trail:
                trail.record("business", "pass")

            required = tool.spec.confirmation.mode
            approval: ConfirmationPolicy | None = None
            if self._policy is not None:
                decision = await decide(
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
                required, approval = settle(decision, tool.spec, writes=self._writes is not None)
                if trail:
                    trail.record("authorization", "pass", detail=describe(decision))
            elif trail:
                trail.record("authorization", "pass")

            limiter = self._limiter
            if limiter is None:
                limiter = self._declared_limiter(tool.spec)
            if limiter is not None:
                await admit(limiter, principal, tool.spec)
                if trail:
                    trail.record("quota", "pass")

            if read_only:
                envelope = await self._invoker.read(
                    call, tool, principal, bound, ctx, call_deadline, _share, _spans
                )
                if trail:
                    trail.record("execute", "ok", code=envelope.status.value)
            else:
                outcome = await hand_off(
                    call,
                    tool,
                    bound,
                    principal,
                    writes=self._writes,
                    invoker=self._invoker,
                    required=required,
                    approval=approval,
                    deadline=call_deadline,
                    exposure=exposure,
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
            envelope = refused(self._shaper, call, tool, refusal)
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
            envelope = failed(self._shaper, call, tool)
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
                results[index] = duplicate_id(
                    call,
                    principal,
                    shaper=self._shaper,
                    auditor=self._auditor,
                    clock=self._clock,
                )
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

        def handle(call: ToolCall) -> Awaitable[Envelope]:
            return self.handle(call, principal, timeout=timeout, _revises=plan_id)

        return await revise(self._writes, plan_id, arguments, principal, handle)

    # --- the stages that need the gate's own state ---------------------------------------------

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

    def _declared_limiter(self, spec: ToolSpec) -> Limiter | None:
        """Without a configured limiter, one in process for the tools that declare a rate.

        A tool's `rate_limit` is a promise to its downstream system; it holds even when
        the host set no quota. Counts live in this process (one instance); a host with
        several instances passes a shared `limiter` (Redis), which counts it too.
        """
        if spec.rate_limit is None:
            return None
        if self._declared is None:
            from handrail.authz.quota import QuotaPolicy, RateLimiter  # noqa: PLC0415 - rare

            self._declared = RateLimiter.in_process(policy=QuotaPolicy())
        return self._declared

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


def _require_no_running_loop() -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise ConfigurationError("a *_sync method was called inside an event loop; await instead")
