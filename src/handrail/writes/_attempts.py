"""The states one keyed attempt moves its execution record through, and its tool's context.

Owns the RUNNING record a claim inserts, the re-claim of a PREPARED one, and what an
ended call makes of it: SUCCEEDED, PREPARED (declared retryable), FAILED_FINAL or
UNKNOWN. Builds records only; never writes one to a store and never calls a tool.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from handrail.canonical import canonical_json
from handrail.clock import Clock
from handrail.context import ToolContext
from handrail.declare.definition import Tool
from handrail.envelope import Envelope, jsonable
from handrail.errors import ErrorCode, ToolRetryable, ToolSignal
from handrail.execution import ExecutionRecord, ExecutionStatus
from handrail.principal import Principal
from handrail.spec import ToolSpec
from handrail.writes import _answers as answers
from handrail.writes.outcome import WriteJob

if TYPE_CHECKING:
    import sqlalchemy as sa

    from handrail.credentials import Secrets

__all__ = ["Attempts", "stored_result"]


def stored_result(result: object) -> tuple[str | None, str | None]:
    """Compact JSON text of a result, or None and why when it cannot be stored."""
    try:
        _, encoded = jsonable(result)
        return encoded.decode(), None
    except ValueError as exc:
        # The effect happened; an unstorable result must not turn it into a failure.
        return None, f"result not stored: {exc}"[:200]


class Attempts:
    """Builds the records of one worker's attempts and the context its tools run with.

    `secrets` gives a tool its context's secret access; `scrub` cleans stored results
    of the secret values handed out, so records never hold them.
    """

    def __init__(
        self,
        *,
        clock: Clock,
        worker_id: str,
        secrets: Callable[[Principal, ToolSpec], Secrets | None] | None = None,
        scrub: Callable[[str], str] | None = None,
    ) -> None:
        self._clock = clock
        self._worker = worker_id
        self._secrets = secrets
        self._scrub = scrub

    def lease_until(self, deadline: float, tool: Tool) -> datetime:
        """When an attempt's lease ends: its deadline plus the tool's lease grace."""
        span = max(0.0, deadline - self._clock.monotonic()) + tool.spec.reconcile.lease_grace
        return self._clock.now() + timedelta(seconds=span)

    def retain_until(self, tool: Tool) -> datetime:
        """How long a settled record of `tool` is kept before it is purged."""
        return self._clock.now() + timedelta(seconds=tool.spec.idempotency.retention_seconds)

    def new_record(self, job: WriteJob, deadline: float) -> ExecutionRecord:
        """The RUNNING record the first attempt of `job` claims its key with."""
        now = self._clock.now()
        return ExecutionRecord(
            idempotency_key=job.key,
            plan_id=job.plan_id,
            plan_hash=job.plan_hash,
            tool=job.tool.spec.name,
            tenant_id=job.principal.tenant_id,
            user_id=job.principal.user_id,
            principal=job.principal.snapshot(),
            arguments=canonical_json(dict(job.arguments)).decode(),
            expected_version=job.expected_version,
            status=ExecutionStatus.RUNNING,
            attempts=1,
            business_id=None,
            result=None,
            error_code=None,
            lease_owner=self._worker,
            lease_expires_at=self.lease_until(deadline, job.tool),
            next_check_at=None,
            checks=0,
            escalated=False,
            created_at=now,
            updated_at=now,
            retain_until=None,
            version=1,
        )

    def claim(self, record: ExecutionRecord, deadline: float, tool: Tool) -> ExecutionRecord:
        """A PREPARED (or reconciled) record taken by this worker for one more attempt."""
        return record.moved(
            ExecutionStatus.RUNNING,
            attempts=record.attempts + 1,
            lease_owner=self._worker,
            lease_expires_at=self.lease_until(deadline, tool),
            updated_at=self._clock.now(),
        )

    def context(
        self,
        job: WriteJob,
        record: ExecutionRecord,
        deadline: float,
        attempt: int,
        transaction: sa.Connection | None = None,
    ) -> ToolContext:
        """The context the tool's `attempt`-th call (of this claim) runs with."""
        return ToolContext(
            principal=job.principal,
            call_id=job.call_id,
            tool=job.tool.spec.name,
            deadline=deadline,
            clock=self._clock,
            idempotency_key=job.key,
            expected_version=job.expected_version,
            transaction=transaction,
            attempt=record.attempts + attempt - 1,
            secrets=None if self._secrets is None else self._secrets(job.principal, job.tool.spec),
        )

    def stored(self, result: object) -> tuple[str | None, str | None]:
        """The result as a record stores it (secret values scrubbed), or None and why."""
        stored, note = stored_result(result)
        if stored is not None and self._scrub is not None:
            stored = self._scrub(stored)
        return stored, note

    def conclude(
        self,
        job: WriteJob,
        record: ExecutionRecord,
        *,
        result: object = None,
        error: Exception | None = None,
        late: bool = False,
    ) -> tuple[ExecutionRecord, Envelope, str | None]:
        """What an attempt that ended with `result` or `error` makes of its RUNNING record.

        The new record, the envelope for the caller and a note for the audit trail.
        `late` marks a call that ended after its caller had stopped waiting.
        """
        tool = job.tool
        now = self._clock.now()
        if error is None:
            stored, note = self.stored(result)
            succeeded = record.moved(
                ExecutionStatus.SUCCEEDED,
                result=stored,
                business_id=tool.business_id_of(result),
                error_code=None,
                lease_owner=None,
                lease_expires_at=None,
                updated_at=now,
                retain_until=self.retain_until(tool),
            )
            return succeeded, answers.from_record(job, succeeded), note
        if isinstance(error, ToolRetryable):
            # Declared transient and not done: the record goes back to PREPARED so the
            # same key can run again later.
            released = record.moved(
                ExecutionStatus.PREPARED,
                lease_owner=None,
                lease_expires_at=None,
                error_code=error.code.value,
                updated_at=now,
            )
            envelope = answers.error(
                job,
                error.code,
                error.message,
                by_tool=True,
                retryable=True,
                retry_after=error.retry_after,
            )
            return released, envelope, None
        if isinstance(error, ToolSignal):
            failed = record.moved(
                ExecutionStatus.FAILED_FINAL,
                error_code=error.code.value,
                lease_owner=None,
                lease_expires_at=None,
                updated_at=now,
                retain_until=self.retain_until(tool),
                result=json.dumps({"message": error.message}),
            )
            return failed, answers.error(job, error.code, error.message, by_tool=True), None
        unknown = self.unknown(job, record, late=late)
        return unknown, answers.from_record(job, unknown), answers.reason(error)

    def unknown(
        self, job: WriteJob, record: ExecutionRecord, *, late: bool = False
    ) -> ExecutionRecord:
        """The record as UNKNOWN, due for its first reconciliation check."""
        policy = job.tool.spec.reconcile
        # After a late end, "not found" is proof only a grace after the call ended.
        wait = max(policy.first_check, policy.not_found_grace) if late else policy.first_check
        return record.moved(
            ExecutionStatus.UNKNOWN,
            error_code=ErrorCode.OUTCOME_UNKNOWN.value,
            lease_owner=None,
            lease_expires_at=None,
            next_check_at=self._clock.now() + timedelta(seconds=wait),
            updated_at=self._clock.now(),
        )
