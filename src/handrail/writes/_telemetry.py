"""Spans and metrics of the write path: plan, confirm, execute once, reconcile.

Owns what `Writes`, the `Executor` and the `Reconciler` record to a `Telemetry`: the
stage spans `handrail.plan|confirm|execute|reconcile` (children of the current span),
the `execute_tool {tool}` span of a plan executed, or a record reconciled, outside a
gate call, and the metrics of keyed executions. Loaded only once a Telemetry is given
(it imports OpenTelemetry). Never records arguments, results or an idempotency key,
only the key's SHA-256; exceptions only by their type (their text may quote data).

Counting rules:
- `handrail.executions.unknown` goes +1 when a record moves into UNKNOWN and -1 when it
  moves out, each move counted once, by the process whose compare-and-set made it;
  summed over every process it is the number of UNKNOWN records.
- `handrail.reconciliation.duration` is observed once per record that was UNKNOWN and
  settles (a check found it, a retry under its key ended, a person resolved it), by the
  process that settled it: its `updated_at` minus its `created_at`, both stamped by the
  injected clock. A record keeps no time of entering UNKNOWN, so this includes the
  attempt that ended UNKNOWN (at most the tool's timeout).
- `handrail.duplicates_prevented`: a write answered from its key's record without the
  tool being called (a replayed outcome, or IN_PROGRESS while the first one runs).
- `handrail.reconciliations`: every completed check of an UNKNOWN record by outcome
  (succeeded, failed, retried, still_unknown, escalated; a record another reconciler
  leased first is not counted), and each resolution by a person.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from opentelemetry.trace import Span

from handrail.errors import ErrorCode
from handrail.execution import ExecutionRecord, ExecutionStatus
from handrail.telemetry import attributes as attr
from handrail.telemetry.spans import failed, traced

if TYPE_CHECKING:
    from opentelemetry.util.types import AttributeValue

    from handrail.clock import Clock
    from handrail.plans import Plan, PlanRecord
    from handrail.principal import Principal
    from handrail.telemetry import Telemetry
    from handrail.writes.outcome import WriteJob, WriteOutcome

__all__ = ["WriteTelemetry"]

_EXECUTE_TOOL = "execute_tool"


def _outcome(span: Span, outcome: WriteOutcome) -> None:
    """What a write's outcome tells its span: status, code, key hash, attempt."""
    span.set_attribute(attr.HANDRAIL_STATUS, outcome.envelope.status.value)
    if outcome.key is not None:
        span.set_attribute(attr.HANDRAIL_IDEMPOTENCY_KEY_HASH, attr.key_hash(outcome.key))
    if outcome.plan_id is not None:
        span.set_attribute(attr.HANDRAIL_PLAN_ID, outcome.plan_id)
    if outcome.record is not None:
        span.set_attribute(attr.HANDRAIL_ATTEMPT, outcome.record.attempts)
        span.set_attribute(attr.HANDRAIL_EXECUTION_STATUS, outcome.record.status.value)
    span.set_attribute(attr.HANDRAIL_REPLAYED, outcome.replayed)
    code = outcome.code
    if code is not None:
        span.set_attribute(attr.HANDRAIL_ERROR_CODE, code.value)
        if code in attr.FAILURES:
            failed(span, code.value)


class WriteTelemetry:
    """The write path's spans and metrics over one Telemetry; durations on `clock`."""

    def __init__(self, telemetry: Telemetry, clock: Clock) -> None:
        self._telemetry = telemetry
        self._tracer = telemetry.tracer
        self._clock = clock

    # --- stage spans ----------------------------------------------------------------------------

    async def plan(
        self, tool: str, principal: Principal, propose: Callable[[], Awaitable[Plan]]
    ) -> Plan:
        """`propose()` under a `handrail.plan` span; the plan's id and risk once built."""
        started = self._clock.monotonic()
        attributes = _stage_attributes("plan", tool, principal)
        try:
            with traced(self._tracer, "handrail.plan", attributes) as span:
                plan = await propose()
                span.set_attribute(attr.HANDRAIL_PLAN_ID, plan.plan_id)
                span.set_attribute(attr.HANDRAIL_RISK, plan.risk.name)
                return plan
        finally:
            self._stage_took("plan", tool, started)

    async def confirm(
        self,
        plan_id: str,
        principal: Principal,
        known: Plan | None,
        decide: Callable[[], Awaitable[PlanRecord]],
    ) -> PlanRecord:
        """`decide()` (a confirmation, approval or rejection) under a `handrail.confirm` span.

        `handrail.outcome` is the plan's state after it; a refusal sets its code.
        """
        started = self._clock.monotonic()
        tool = None if known is None else known.tool
        attributes = {
            **_stage_attributes("confirm", tool, principal),
            attr.HANDRAIL_PLAN_ID: plan_id,
        }
        try:
            with traced(self._tracer, "handrail.confirm", attributes) as span:
                record = await decide()
                tool = record.plan.tool
                span.set_attribute(attr.GEN_AI_TOOL_NAME, tool)
                span.set_attribute(attr.HANDRAIL_RISK, record.plan.risk.name)
                span.set_attribute(attr.HANDRAIL_OUTCOME, record.state.value.lower())
                return record
        finally:
            self._stage_took("confirm", tool, started)

    async def execute(
        self, job: WriteJob, run: Callable[[], Awaitable[WriteOutcome]]
    ) -> WriteOutcome:
        """`run()`, one keyed execution of `job`, under a `handrail.execute` span.

        Counts a duplicate prevented when the outcome came from the key's record.
        """
        started = self._clock.monotonic()
        tool = job.tool.spec.name
        attributes = {
            **_stage_attributes("execute", tool, job.principal),
            attr.HANDRAIL_IDEMPOTENCY_KEY_HASH: attr.key_hash(job.key),
            attr.GEN_AI_TOOL_CALL_ID: job.call_id,
        }
        if job.plan_id is not None:
            attributes[attr.HANDRAIL_PLAN_ID] = job.plan_id
        try:
            with traced(self._tracer, "handrail.execute", attributes) as span:
                outcome = await run()
                _outcome(span, outcome)
        finally:
            self._stage_took("execute", tool, started)
        if outcome.replayed or outcome.error_is(ErrorCode.IN_PROGRESS):
            self._telemetry.duplicates_prevented.add(1, {attr.GEN_AI_TOOL_NAME: tool})
        return outcome

    # --- outside a gate call --------------------------------------------------------------------

    async def call(
        self,
        plan_id: str,
        call_id: str,
        principal: Principal,
        known: Callable[[], Plan | None],
        run: Callable[[], Awaitable[WriteOutcome]],
    ) -> WriteOutcome:
        """`run()`, a confirmed plan's execution, as a tool call of its own.

        An `execute_tool {tool}` span (named once the plan is known), the tool's `call`
        duration and its count by status and error code, as the gate records a call.
        """
        started = self._clock.monotonic()
        plan = known()
        tool = None if plan is None else plan.tool
        attributes = _call_attributes(tool, call_id, principal)
        attributes[attr.HANDRAIL_PLAN_ID] = plan_id
        try:
            with traced(self._tracer, _call_name(tool), attributes) as span:
                outcome = await run()
                plan = plan or known()
                named = tool
                tool = outcome.envelope.tool or (None if plan is None else plan.tool)
                if tool and tool != named:
                    span.update_name(_call_name(tool))
                    span.set_attribute(attr.GEN_AI_TOOL_NAME, tool)
                if plan is not None:
                    span.set_attribute(attr.HANDRAIL_RISK, plan.risk.name)
                _outcome(span, outcome)
        finally:
            self._stage_took("call", tool, started)
        counted = {attr.HANDRAIL_STATUS: outcome.envelope.status.value}
        if tool:
            counted[attr.GEN_AI_TOOL_NAME] = tool
        if outcome.code is not None:
            counted[attr.HANDRAIL_ERROR_CODE] = outcome.code.value
        self._telemetry.tool_calls.add(1, counted)
        return outcome

    async def reconcile(
        self, record: ExecutionRecord, call_id: str, check: Callable[[], Awaitable[str]]
    ) -> str:
        """`check()` of one due record under `execute_tool {tool}` > `handrail.reconcile`.

        Counts the check by its outcome, unless another reconciler had leased the record.
        """
        started = self._clock.monotonic()
        tool = record.tool
        attributes = {
            **_call_attributes(tool, call_id, None),
            attr.HANDRAIL_TENANT: record.tenant_id,
            attr.HANDRAIL_IDEMPOTENCY_KEY_HASH: attr.key_hash(record.idempotency_key),
            attr.HANDRAIL_ATTEMPT: record.attempts,
        }
        if record.plan_id is not None:
            attributes[attr.HANDRAIL_PLAN_ID] = record.plan_id
        try:
            with (
                traced(self._tracer, _call_name(tool), attributes) as call,
                traced(
                    self._tracer, "handrail.reconcile", {attr.HANDRAIL_STAGE: "reconcile"}
                ) as span,
            ):
                outcome = await check()
                for each in (call, span):
                    each.set_attribute(attr.HANDRAIL_OUTCOME, outcome)
        finally:
            self._stage_took("reconcile", tool, started)
        if outcome != "skipped":
            self._reconciled(tool, outcome, by="reconciler")
        return outcome

    # --- record moves ---------------------------------------------------------------------------

    def moved(self, before: ExecutionRecord, after: ExecutionRecord) -> None:
        """Count a compare-and-set this process made: into or out of UNKNOWN, a recovery."""
        was, now = before.status, after.status
        if was is now:
            return
        labels = {attr.GEN_AI_TOOL_NAME: after.tool}
        if now is ExecutionStatus.UNKNOWN:
            self._telemetry.unknown_open.add(1, labels)
        elif was is ExecutionStatus.UNKNOWN:
            self._telemetry.unknown_open.add(-1, labels)
        # `checks` grows only in moves out of UNKNOWN: a settled record with checks was
        # retried by a reconciler.
        if now.settled and (was is ExecutionStatus.UNKNOWN or after.checks > 0):
            recovered = (after.updated_at - after.created_at).total_seconds()
            self._telemetry.time_to_recover.record(
                max(0.0, recovered), {**labels, attr.HANDRAIL_OUTCOME: _settled(now)}
            )

    def resolved(self, before: ExecutionRecord, after: ExecutionRecord) -> None:
        """A person settled an UNKNOWN record: the move and a reconciliation."""
        self.moved(before, after)
        self._reconciled(after.tool, _settled(after.status), by="person")

    # --- helpers --------------------------------------------------------------------------------

    def _reconciled(self, tool: str, outcome: str, *, by: str) -> None:
        self._telemetry.reconciliations.add(
            1,
            {
                attr.GEN_AI_TOOL_NAME: tool,
                attr.HANDRAIL_OUTCOME: outcome,
                attr.HANDRAIL_RESOLVED_BY: by,
            },
        )

    def _stage_took(self, stage: str, tool: str | None, started: float) -> None:
        labels = {attr.HANDRAIL_STAGE: stage}
        if tool:
            labels[attr.GEN_AI_TOOL_NAME] = tool
        took = max(0.0, self._clock.monotonic() - started)
        self._telemetry.tool_duration.record(took, labels)


def _call_name(tool: str | None) -> str:
    """`execute_tool {tool}`, or only the operation while the tool is not known."""
    return f"{_EXECUTE_TOOL} {tool}" if tool else _EXECUTE_TOOL


def _settled(status: ExecutionStatus) -> str:
    return "succeeded" if status is ExecutionStatus.SUCCEEDED else "failed"


def _stage_attributes(
    stage: str, tool: str | None, principal: Principal
) -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {
        attr.HANDRAIL_STAGE: stage,
        attr.HANDRAIL_TENANT: principal.tenant_id,
    }
    if tool:
        attributes[attr.GEN_AI_TOOL_NAME] = tool
    return attributes


def _call_attributes(
    tool: str | None, call_id: str, principal: Principal | None
) -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {
        attr.GEN_AI_OPERATION_NAME: _EXECUTE_TOOL,
        attr.GEN_AI_TOOL_TYPE: "function",
        attr.GEN_AI_TOOL_CALL_ID: call_id,
    }
    if tool:
        attributes[attr.GEN_AI_TOOL_NAME] = tool
    if principal is not None:
        attributes[attr.HANDRAIL_TENANT] = principal.tenant_id
    return attributes
