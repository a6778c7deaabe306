"""What a keyed write answers: its caller's envelope and outcome, and its audit events.

Owns the envelopes of stored, purged, refused and unknown outcomes (each labelled by who
wrote its words), and the audit trail of each step of a keyed write. Builds values and
notes audit events only; never reads or writes a record, never calls a tool.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from handrail.deadline import DeadlineExceededError
from handrail.envelope import HANDRAIL_SOURCE, Envelope, ErrorDetail, Status, Trust
from handrail.errors import ErrorCode
from handrail.events import AuditSubject
from handrail.execution import ExecutionRecord, ExecutionStatus
from handrail.record.audit import Auditor
from handrail.writes.outcome import WriteJob, WriteOutcome

__all__ = [
    "GENERIC_FAILURE",
    "WITHDRAWN",
    "Trail",
    "error",
    "failure_name",
    "from_record",
    "outcome",
    "reason",
    "unknown",
]

GENERIC_FAILURE = "The tool failed with an internal error. It was recorded for the operators."
WITHDRAWN = "The plan was withdrawn; nothing was run."
_FIXED_FAILURES = frozenset({GENERIC_FAILURE, WITHDRAWN})
"""Handrail's own words among the messages a failed record may keep."""
_UNKNOWN_TEXT = (
    "The write's outcome is not known yet (it may or may not have happened). It is being "
    "reconciled with the downstream system under the same key. Do not repeat it and do "
    "not tell the user it failed or succeeded."
)


def outcome(
    job: WriteJob,
    *,
    envelope: Envelope,
    record: ExecutionRecord | None,
    replayed: bool = False,
) -> WriteOutcome:
    """The one answer of a write path for `job`."""
    return WriteOutcome(
        envelope=envelope,
        record=record,
        key=job.key,
        plan_id=job.plan_id,
        replayed=replayed,
    )


def error(
    job: WriteJob,
    code: ErrorCode,
    summary: str,
    *,
    by_tool: bool,
    retryable: bool = False,
    retry_after: float | None = None,
) -> Envelope:
    """An error envelope of `job`'s tool, labelled by who wrote `summary`.

    `by_tool` for a tool's own words (a signal's message): untrusted data of the tool.
    Otherwise the summary is Handrail's fixed wording, and trusted as such.
    """
    return Envelope(
        call_id=job.call_id,
        tool=job.tool.spec.name,
        status=Status.ERROR,
        summary=summary,
        schema_version=job.tool.spec.schema_version,
        error=ErrorDetail(code=code, retryable=retryable, retry_after=retry_after),
        trust=Trust.UNTRUSTED if by_tool else Trust.HANDRAIL,
        source=None if by_tool else HANDRAIL_SOURCE,
    )


def unknown(job: WriteJob) -> Envelope:
    """OUTCOME_UNKNOWN: the write may or may not have happened; it is being reconciled."""
    return error(job, ErrorCode.OUTCOME_UNKNOWN, _UNKNOWN_TEXT, by_tool=False)


def from_record(job: WriteJob, record: ExecutionRecord) -> Envelope:
    """What a stored (or purged) execution record of `job`'s key answers."""
    if record.purged:
        return _from_tombstone(job, record)
    if record.status is ExecutionStatus.SUCCEEDED:
        # The stored result as it is; whoever hands it to a model shapes it first.
        return Envelope(
            call_id=job.call_id,
            tool=job.tool.spec.name,
            status=Status.OK,
            summary=f"{job.tool.spec.name} succeeded.",
            data=record.result_value,
            schema_version=job.tool.spec.schema_version,
        )
    if record.status is ExecutionStatus.FAILED_FINAL:
        code = ErrorCode(record.error_code or ErrorCode.FAILED_FINAL.value)
        stored = record.result_value
        message = stored.get("message") if isinstance(stored, dict) else None
        summary = str(message or GENERIC_FAILURE)
        # The record keeps the message, not who wrote it: a tool's signal, an
        # operator's note or Handrail's own words. Only the last are trusted.
        return error(job, code, summary, by_tool=summary not in _FIXED_FAILURES)
    return unknown(job)


def _from_tombstone(job: WriteJob, record: ExecutionRecord) -> Envelope:
    """A repeat of a write whose record was purged: it ran; it never runs again."""
    if record.status is ExecutionStatus.SUCCEEDED:
        envelope = error(
            job,
            ErrorCode.ALREADY_EXECUTED,
            "This write already ran and succeeded; its result is no longer kept. It was "
            "not run again. Do not repeat it.",
            by_tool=False,
        )
        if not record.business_id:
            return envelope
        # The business id came from downstream: data of the tool (untrusted), never summary.
        return dataclasses.replace(
            envelope,
            data={"business_id": record.business_id},
            trust=Trust.UNTRUSTED,
            source=None,
        )
    return error(
        job,
        ErrorCode(record.error_code or ErrorCode.FAILED_FINAL.value),
        "This write already ran and failed for good; its details are no longer kept. "
        "It was not run again.",
        by_tool=False,
    )


def failure_name(exc: BaseException) -> str:
    """How the audit trail names an exception: its type, never its text."""
    return type(exc).__name__


def reason(exc: BaseException) -> str:
    """Why an attempt ended without an outcome, for the audit trail."""
    return "deadline passed" if isinstance(exc, DeadlineExceededError) else failure_name(exc)


class Trail:
    """The audit events of keyed writes run by one worker."""

    def __init__(self, auditor: Auditor, *, worker_id: str) -> None:
        self._auditor = auditor
        self._worker = worker_id

    def note(
        self,
        job: WriteJob,
        stage: str,
        decision: str,
        *,
        code: str | None = None,
        detail: Mapping[str, object] | None = None,
    ) -> None:
        """One audit event of `job`: its stage, the decision, a code and facts."""
        if not self._auditor.enabled:
            return
        principal = job.principal
        self._auditor.note(
            kind="write",
            stage=stage,
            decision=decision,
            code=code,
            subject=AuditSubject(
                request_id=principal.request_id,
                tool_call_id=job.call_id[:256],
                tool=job.tool.spec.name,
                schema_version=job.tool.spec.schema_version,
                args_hash=job.plan_hash,
                user_id=principal.user_id,
                tenant_id=principal.tenant_id,
            ),
            facts={
                "key": job.key,
                "plan_id": job.plan_id,
                "worker": self._worker,
                **(detail or {}),
            },
        )
