"""Reconciliation: settle UNKNOWN writes by asking the downstream system about their key.

A tool's `reconcile(key, ctx)` hook answers with one of three outcomes:

- `Found(result)`: the effect exists; the record becomes SUCCEEDED with that result
  and its business id (the original ticket number, not a new one);
- `NotExecuted()`: proof that nothing happened; the write is retried under the same
  key. A "not found" inside the tool's grace window (replicas lag) is not proof;
- `NoProof(reason)`: stays UNKNOWN, checked again later with backoff, escalated to
  people after `escalate_after` checks.

One pass (`Reconciler.run_once`) first declares RUNNING records whose lease expired
(their worker died) UNKNOWN, then checks every due UNKNOWN record. Each record is
leased before it is checked, so several reconcilers can run at once safely. With
telemetry, each record checked is a tool call of its own (`execute_tool {tool}` with a
`handrail.reconcile` child) and the checks and moves are counted (`_telemetry`).
"""

from __future__ import annotations

import asyncio
import functools
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from handrail.clock import Clock, SystemClock
from handrail.context import ToolContext
from handrail.deadline import DeadlineExceededError, within
from handrail.declare.definition import Tool
from handrail.declare.hooks import Found, NoProof, NotExecuted, Reconciled
from handrail.declare.registry import Registry
from handrail.errors import ErrorCode, WriteRefusedError
from handrail.events import AuditSubject
from handrail.execution import ExecutionRecord, ExecutionStatus
from handrail.principal import Principal
from handrail.record.audit import Auditor, AuditSink
from handrail.retry import Sleep
from handrail.spec import ReconcilePolicy
from handrail.store.base import Store
from handrail.writes._attempts import stored_result
from handrail.writes.executor import Executor
from handrail.writes.outcome import WriteJob

if TYPE_CHECKING:
    from handrail.telemetry import Telemetry
    from handrail.writes._telemetry import WriteTelemetry

__all__ = ["PassReport", "Reconciler", "T", "resolve_by_person"]


T = TypeVar("T")


@dataclass(frozen=True, kw_only=True, slots=True)
class PassReport:
    """What one reconciliation pass did, by idempotency key."""

    expired_leases: tuple[str, ...] = ()
    succeeded: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    retried: tuple[str, ...] = ()
    still_unknown: tuple[str, ...] = ()
    escalated: tuple[str, ...] = ()
    purged: int = 0
    skipped: tuple[str, ...] = field(default=())
    """Due records another reconciler leased first."""


class Reconciler:
    """Finds UNKNOWN writes (and crashed RUNNING ones) and settles them by key.

    `telemetry` (None: nothing recorded) receives its spans and metrics.
    """

    def __init__(
        self,
        registry: Registry,
        store: Store,
        *,
        clock: Clock | None = None,
        audit: AuditSink | None = None,
        worker_id: str = "reconciler",
        lease_seconds: float = 60.0,
        check_timeout: float = 10.0,
        batch: int = 100,
        sleep: Sleep = asyncio.sleep,
        rng: random.Random | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        self._registry = registry
        self._store = store
        self._clock = clock or SystemClock()
        self._traced: WriteTelemetry | None = None
        if telemetry is not None:
            from handrail.writes._telemetry import WriteTelemetry  # noqa: PLC0415 - only with one

            self._traced = WriteTelemetry(telemetry, self._clock)
        self._auditor = Auditor(audit, self._clock)
        self._worker = worker_id
        self._lease = lease_seconds
        self._check_timeout = check_timeout
        self._batch = batch
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not secrecy
        self._executor = Executor(
            store,
            clock=self._clock,
            auditor=self._auditor,
            worker_id=worker_id,
            sleep=sleep,
            rng=self._rng,
            telemetry=telemetry,
        )

    async def run_once(
        self,
        *,
        tool: str | None = None,
        tenant_id: str | None = None,
        key: str | None = None,
    ) -> PassReport:
        """One pass over every due record; safe to run in several processes at once.

        `tool`, `tenant_id` and `key` scope the pass to the due records that match all
        of those given (one tenant's writes, one tool's after its downstream is back,
        one key a person asks about). A scoped pass purges nothing; a full one also
        purges the settled records past retention.
        """
        scope = {
            name: value
            for name, value in (("tool", tool), ("tenant_id", tenant_id), ("key", key))
            if value is not None
        }
        report: dict[str, list[str]] = {
            k: []
            for k in (
                "expired_leases",
                "succeeded",
                "failed",
                "retried",
                "still_unknown",
                "escalated",
                "skipped",
            )
        }
        due = await self._io(
            self._store.due_executions, now=self._clock.now(), limit=self._batch, **scope
        )
        for record in due:
            if self._traced is None:
                outcome = await self._settle(record, report)
            else:
                settle = functools.partial(self._settle, record, report)
                outcome = await self._traced.reconcile(record, _call_id(record), settle)
            if outcome == "escalated":
                # Newly escalated records are still unknown: they are listed in both.
                report["still_unknown"].append(record.idempotency_key)
            report[outcome].append(record.idempotency_key)
        purged = 0 if scope else await self._io(self._store.purge_executions, now=self._clock.now())
        return PassReport(**{k: tuple(v) for k, v in report.items()}, purged=purged)

    async def _settle(self, record: ExecutionRecord, report: dict[str, list[str]]) -> str:
        """One due record: a RUNNING one whose lease expired becomes UNKNOWN, then checked."""
        current = record
        if current.status is ExecutionStatus.RUNNING:
            unknown = current.moved(
                ExecutionStatus.UNKNOWN,
                error_code=ErrorCode.OUTCOME_UNKNOWN.value,
                lease_owner=None,
                lease_expires_at=None,
                next_check_at=self._clock.now(),
                updated_at=self._clock.now(),
            )
            if not await self._io(
                self._store.replace_execution,
                unknown,
                expect_status=current.status,
                expect_version=current.version,
            ):
                return "skipped"
            self._moved(current, unknown)
            self._audit(unknown, "lease", "expired", code=ErrorCode.OUTCOME_UNKNOWN)
            report["expired_leases"].append(current.idempotency_key)
            current = unknown
        return await self._check(current)

    async def drain(self, timeout: float) -> bool:
        """Wait until every retry that outlived its deadline has ended and been recorded.

        A retry whose sync tool is still running past its deadline keeps its record's
        lease while this process lives (see `Executor.drain`); False if some still run
        after `timeout` seconds.
        """
        return await self._executor.drain(timeout)

    async def run_forever(
        self, *, interval: float = 5.0, stop: asyncio.Event | None = None
    ) -> None:
        """Worker mode: a pass every `interval` seconds until `stop` is set."""
        stop = stop or asyncio.Event()
        while not stop.is_set():
            await self.run_once()
            try:
                await asyncio.wait_for(stop.wait(), timeout=interval)
            except TimeoutError:
                continue

    def _tool(self, name: str) -> Tool | None:
        return self._registry.get(name) if name in self._registry else None

    def _policy(self, record: ExecutionRecord) -> ReconcilePolicy:
        tool = self._tool(record.tool)
        return tool.spec.reconcile if tool is not None else ReconcilePolicy()

    async def _check(self, record: ExecutionRecord) -> str:
        """Lease one UNKNOWN record, ask its tool, and write what was learned."""
        now = self._clock.now()
        leased = record.moved(
            ExecutionStatus.UNKNOWN,
            lease_owner=self._worker,
            lease_expires_at=now + timedelta(seconds=self._lease),
            updated_at=now,
        )
        if not await self._io(
            self._store.replace_execution,
            leased,
            expect_status=record.status,
            expect_version=record.version,
        ):
            return "skipped"
        tool = self._tool(leased.tool)
        try:
            principal = Principal.from_snapshot(leased.principal)
        except (ValueError, KeyError, TypeError):
            # One unreadable record must not stop the pass for every other record.
            return await self._inconclusive(
                leased, "its principal cannot be read back; a person must decide"
            )
        if tool is None or tool.reconcile is None:
            answer: Reconciled = NoProof("the tool has no reconcile hook; a person must decide")
        else:
            ctx = ToolContext(
                principal=principal,
                call_id=_call_id(leased),
                tool=leased.tool,
                deadline=self._clock.monotonic() + self._check_timeout,
                clock=self._clock,
                idempotency_key=leased.idempotency_key,
                expected_version=leased.expected_version,
                attempt=leased.attempts,
            )
            answer = await self._ask(tool.reconcile, leased.idempotency_key, ctx)
        policy = self._policy(leased)
        if isinstance(answer, NotExecuted) and now - leased.created_at < timedelta(
            seconds=policy.not_found_grace
        ):
            answer = NoProof("not found inside the grace window; replicas may lag")
        if isinstance(answer, Found):
            return await self._found(leased, answer, tool)
        if isinstance(answer, NotExecuted) and tool is not None:
            return await self._retry(leased, tool, principal)
        return await self._inconclusive(
            leased, answer.reason if isinstance(answer, NoProof) else "no tool"
        )

    async def _ask(self, hook: Callable[..., Any], key: str, ctx: ToolContext) -> Reconciled:
        try:
            if asyncio.iscoroutinefunction(hook):
                answer = await within(hook(key, ctx), ctx.remaining())
            else:
                answer = await within(asyncio.to_thread(hook, key, ctx), ctx.remaining())
        except DeadlineExceededError:
            return NoProof("the reconcile check timed out")
        except Exception as exc:  # noqa: BLE001 - a failing check is no proof
            return NoProof(f"the reconcile check failed: {type(exc).__name__}")
        if not isinstance(answer, Found | NotExecuted | NoProof):
            return NoProof(f"the reconcile hook returned {type(answer).__name__}")
        return answer

    async def _found(self, record: ExecutionRecord, answer: Found, tool: Tool | None) -> str:
        stored, _ = stored_result(answer.result)
        retention = tool.spec.idempotency.retention_seconds if tool is not None else 86_400.0
        succeeded = record.moved(
            ExecutionStatus.SUCCEEDED,
            result=stored,
            business_id=tool.business_id_of(answer.result) if tool is not None else None,
            error_code=None,
            lease_owner=None,
            lease_expires_at=None,
            next_check_at=None,
            checks=record.checks + 1,
            updated_at=self._clock.now(),
            retain_until=self._clock.now() + timedelta(seconds=retention),
        )
        if not await self._write(record, succeeded):
            return "skipped"
        self._moved(record, succeeded)
        self._audit(
            succeeded, "reconcile", "succeeded", detail={"business_id": succeeded.business_id}
        )
        return "succeeded"

    async def _retry(self, record: ExecutionRecord, tool: Tool, principal: Principal) -> str:
        deadline = self._clock.monotonic() + tool.spec.timeout
        running = record.moved(
            ExecutionStatus.RUNNING,
            attempts=record.attempts + 1,
            checks=record.checks + 1,
            next_check_at=None,
            lease_owner=self._worker,
            lease_expires_at=self._clock.now()
            + timedelta(seconds=tool.spec.timeout + tool.spec.reconcile.lease_grace),
            updated_at=self._clock.now(),
        )
        if not await self._write(record, running):
            return "skipped"
        self._moved(record, running)
        self._audit(running, "reconcile", "retrying", detail={"attempt": running.attempts})
        job = WriteJob(
            tool=tool,
            arguments=json.loads(record.arguments),
            principal=principal,
            key=record.idempotency_key,
            plan_hash=record.plan_hash,
            plan_id=record.plan_id,
            expected_version=record.expected_version,
            call_id=_call_id(record),
        )
        outcome = await self._executor.retry_record(job, running, deadline=deadline)
        status = outcome.record.status if outcome.record is not None else ExecutionStatus.UNKNOWN
        if status is ExecutionStatus.SUCCEEDED:
            return "succeeded"
        if status is ExecutionStatus.FAILED_FINAL:
            return "failed"
        return "retried"

    async def _inconclusive(self, record: ExecutionRecord, reason: str) -> str:
        policy = self._policy(record)
        checks = record.checks + 1
        ceiling = min(policy.max_interval, policy.first_check * 2**checks)
        wait = self._rng.uniform(ceiling / 2, ceiling)
        later = record.moved(
            ExecutionStatus.UNKNOWN,
            checks=checks,
            escalated=record.escalated or checks >= policy.escalate_after,
            next_check_at=self._clock.now() + timedelta(seconds=wait),
            lease_owner=None,
            lease_expires_at=None,
            updated_at=self._clock.now(),
        )
        if not await self._write(record, later):
            return "skipped"
        outcome = "escalated" if later.escalated and not record.escalated else "still_unknown"
        self._audit(
            later,
            "reconcile",
            outcome,
            code=ErrorCode.OUTCOME_UNKNOWN,
            detail={"reason": reason, "checks": checks, "next_check_in_s": round(wait, 3)},
        )
        return outcome

    def _moved(self, before: ExecutionRecord, after: ExecutionRecord) -> None:
        if self._traced is not None:
            self._traced.moved(before, after)

    async def _write(self, current: ExecutionRecord, new: ExecutionRecord) -> bool:
        return await self._io(
            self._store.replace_execution,
            new,
            expect_status=current.status,
            expect_version=current.version,
            lease_owner=self._worker,
            lease_valid_at=self._clock.now(),
        )

    def _audit(
        self,
        record: ExecutionRecord,
        stage: str,
        decision: str,
        *,
        code: str | None = None,
        detail: dict[str, Any] | None = None,
    ) -> None:
        if not self._auditor.enabled:
            return
        self._auditor.note(
            kind="write",
            stage=stage,
            decision=decision,
            code=code,
            subject=AuditSubject(
                tool=record.tool,
                args_hash=record.plan_hash,
                user_id=record.user_id,
                tenant_id=record.tenant_id,
            ),
            facts={
                "key": record.idempotency_key,
                "plan_id": record.plan_id,
                "worker": self._worker,
                **(detail or {}),
            },
        )

    async def _io(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:  # noqa: ANN401
        return await asyncio.to_thread(fn, *args, **kwargs)


def _call_id(record: ExecutionRecord) -> str:
    """The call id a reconciliation of `record` runs its hooks (and its retry) under."""
    return f"reconcile-{record.idempotency_key[-12:]}"


def resolve_by_person(
    store: Store,
    key: str,
    *,
    succeeded: bool,
    operator: str,
    note: str,
    business_id: str | None = None,
    clock: Clock | None = None,
    audit: AuditSink | None = None,
    retention_seconds: float = 86_400.0,
    telemetry: Telemetry | None = None,
) -> ExecutionRecord:
    """Settle an UNKNOWN record by a person who checked the downstream system.

    The way out of UNKNOWN for a tool without a reconcile hook, or after escalation:
    an operator looked the key up downstream and says what happened. The decision,
    the operator and their note are stored and audited. Only an UNKNOWN record that
    no reconciler holds a lease on can be settled; anything else is a CONFLICT.
    `telemetry` counts the resolution (a reconciliation by a person) and its move.
    """
    clock = clock or SystemClock()
    if not operator.strip() or not note.strip():
        raise WriteRefusedError(ErrorCode.INVALID_ARGUMENTS, "an operator and a note are required")
    record = store.get_execution(key)
    now = clock.now()
    leased = (
        record is not None and record.lease_expires_at is not None and record.lease_expires_at > now
    )
    if record is None or record.status is not ExecutionStatus.UNKNOWN or leased:
        state = "missing" if record is None else record.status.value
        raise WriteRefusedError(
            ErrorCode.CONFLICT,
            f"only an UNKNOWN record without an active lease can be resolved (it is {state})",
        )
    decision = {"resolved_by": operator, "note": note}
    if succeeded:
        settled = record.moved(
            ExecutionStatus.SUCCEEDED,
            result=json.dumps({**decision, "business_id": business_id}, sort_keys=True),
            business_id=business_id,
            error_code=None,
            next_check_at=None,
            updated_at=now,
            retain_until=now + timedelta(seconds=retention_seconds),
        )
    else:
        settled = record.moved(
            ExecutionStatus.FAILED_FINAL,
            result=json.dumps({**decision, "message": note}, sort_keys=True),
            error_code=ErrorCode.FAILED_FINAL.value,
            next_check_at=None,
            updated_at=now,
            retain_until=now + timedelta(seconds=retention_seconds),
        )
    if not store.replace_execution(
        settled,
        expect_status=record.status,
        expect_version=record.version,
    ):
        raise WriteRefusedError(ErrorCode.CONFLICT, "the record changed meanwhile; look again")
    if telemetry is not None:
        from handrail.writes._telemetry import WriteTelemetry  # noqa: PLC0415 - only with one

        WriteTelemetry(telemetry, clock).resolved(record, settled)
    Auditor(audit, clock).note(
        kind="write",
        stage="resolve",
        decision=settled.status.value.lower(),
        code=settled.error_code,
        subject=AuditSubject(
            tool=record.tool,
            args_hash=record.plan_hash,
            user_id=operator,
            tenant_id=record.tenant_id,
        ),
        facts={"key": key, "note": note, "business_id": business_id},
    )
    return settled
