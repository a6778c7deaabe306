"""Attempts that outlive their caller: a sync tool's thread still inside the call.

Owns the attempts held past their caller: their lease is kept by a LeaseKeeper until
the thread ends, then the call's own outcome is written under that lease. Never starts
a tool call and never answers the caller beyond OUTCOME_UNKNOWN.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

from handrail.clock import Clock
from handrail.errors import ErrorCode, StoreError
from handrail.execution import ExecutionRecord
from handrail.fencing import Fence, ThreadOutcome
from handrail.store.base import Store
from handrail.writes import _answers as answers
from handrail.writes._attempts import Attempts
from handrail.writes.leases import LeaseKeeper
from handrail.writes.outcome import WriteJob, WriteOutcome

if TYPE_CHECKING:
    from handrail.writes._telemetry import WriteTelemetry

__all__ = ["HeldAttempts"]

_log = logging.getLogger("handrail.writes.executor")  # the name operators filter by
_MIN_LEASE_S = 1.0
"""The shortest span a heartbeat renews a lease by, whatever the tool's lease grace."""


class _NoOutcomeError(Exception):
    """The late call's outcome is not known (several of its threads ran at once)."""


class HeldAttempts:
    """The attempts one executor holds past their caller, and their lease keepers."""

    def __init__(
        self,
        *,
        store: Store,
        clock: Clock,
        worker_id: str,
        attempts: Attempts,
        trail: answers.Trail,
        traced: WriteTelemetry | None = None,
    ) -> None:
        self._store = store
        self._traced = traced
        self._clock = clock
        self._worker = worker_id
        self._attempts = attempts
        self._trail = trail
        self._held: set[LeaseKeeper] = set()
        self._changed = threading.Condition()

    def hold(
        self, job: WriteJob, record: ExecutionRecord, fence: Fence, reason: str
    ) -> WriteOutcome:
        """Keep the lease of an attempt whose thread is still inside the tool.

        The record stays RUNNING under this worker's lease, renewed by a heartbeat until
        the thread ends; then the call's own outcome is written. The caller learns now
        that the outcome is unknown.
        """
        policy = job.tool.spec.reconcile
        keeper = LeaseKeeper(
            store=self._store,
            clock=self._clock,
            record=record,
            fence=fence,
            span=max(policy.lease_grace, _MIN_LEASE_S),
            finish=lambda current, outcome: self._finish_late(job, current, outcome),
            lost=lambda current: self._note_late(
                job,
                "lease",
                "lost",
                code=ErrorCode.OUTCOME_UNKNOWN,
                detail={"version": current.version},
            ),
            ended=self._released,
        )
        with self._changed:
            self._held.add(keeper)
        keeper.start()
        self._trail.note(
            job, "abandoned", "held", code=ErrorCode.OUTCOME_UNKNOWN, detail={"note": reason}
        )
        return answers.outcome(job, envelope=answers.unknown(job), record=record)

    async def drain(self, timeout: float) -> bool:
        """Wait until every held attempt has ended and its outcome is written (see Executor)."""

        def wait() -> bool:
            with self._changed:
                return self._changed.wait_for(lambda: not self._held, timeout)

        return await asyncio.to_thread(wait)

    def _released(self, keeper: LeaseKeeper) -> None:
        with self._changed:
            self._held.discard(keeper)
            self._changed.notify_all()

    def _finish_late(
        self, job: WriteJob, current: ExecutionRecord, outcome: ThreadOutcome | None
    ) -> None:
        """In the lease keeper's thread: write what the late call ended with, under its lease."""
        ended = outcome or ThreadOutcome(error=_NoOutcomeError())
        new, _, note = self._attempts.conclude(
            job, current, result=ended.result, error=ended.error, late=True
        )
        try:
            written = self._store.replace_execution(
                new,
                expect_status=current.status,
                expect_version=current.version,
                lease_owner=self._worker,
                lease_valid_at=self._clock.now(),
            )
        except StoreError as exc:
            written, note = False, f"{note or ''} outcome not recorded: {exc}".strip()
        if written and self._traced is not None:
            self._traced.moved(current, new)
        self._note_late(
            job,
            "late_outcome" if written else "fenced",
            new.status.value.lower() if written else "refused",
            code=new.error_code if written else ErrorCode.OUTCOME_UNKNOWN,
            detail={
                "attempt": new.attempts,
                "business_id": new.business_id,
                "wanted": new.status.value,
                "note": note,
            },
        )

    def _note_late(
        self,
        job: WriteJob,
        stage: str,
        decision: str,
        *,
        code: str | None = None,
        detail: Mapping[str, object] | None = None,
    ) -> None:
        """Audit from a lease keeper's thread, which may outlive the audit sink it was given."""
        try:
            self._trail.note(job, stage, decision, code=code, detail=detail)
        except StoreError:
            _log.exception("audit event %s/%s of key %s was lost", stage, decision, job.key)
