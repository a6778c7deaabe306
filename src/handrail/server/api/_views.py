"""The JSON the API answers with: one function per record, shared by the resource routers.

Owns what a client sees of each record, and what it never sees: no principal snapshot
(permissions), no token claims beyond the plan and expiry, a raw body only as text or
base64 inside JSON (never served with a stored media type). It never decides access.
"""

from __future__ import annotations

import base64
import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from handrail.envelope import Envelope
    from handrail.events import AuditEvent
    from handrail.execution import ExecutionRecord
    from handrail.loop.agent import ReplayReport, StepLog
    from handrail.plans import PlanRecord
    from handrail.raw import RawRecord
    from handrail.runs import RunRecord
    from handrail.writes.confirmation import ConfirmationToken
    from handrail.writes.outcome import WriteOutcome

__all__ = [
    "envelope_view",
    "event_view",
    "execution_view",
    "outcome_view",
    "plan_view",
    "raw_view",
    "replay_view",
    "run_view",
    "token_view",
]

Json = dict[str, Any]


def _at(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def plan_view(record: PlanRecord) -> Json:
    """A plan as a person reads it before deciding: impact, target version, expiry."""
    plan = record.plan
    return {
        "plan_id": plan.plan_id,
        "tool": plan.tool,
        "schema_version": plan.schema_version,
        "state": record.state.value,
        "version": record.version,
        "requester": plan.user_id,
        "risk": plan.risk.name,
        "confirmation": plan.confirmation.name,
        "required_approvals": plan.required_approvals,
        "approver_permission": plan.approver_permission,
        "approvals": sorted(record.approvals),
        "impact": plan.impact.to_json(),
        "impact_text": plan.impact.describe(),
        "arguments": plan.argument_values,
        "expected_version": plan.expected_version,
        "created_at": _at(plan.created_at),
        "expires_at": _at(plan.expires_at),
        "updated_at": _at(record.updated_at),
        "revises": plan.revises,
        "plan_hash": plan.plan_hash,
    }


def token_view(token: ConfirmationToken) -> Json:
    """A one-time token for the caller, with the plan it is for and when it expires."""
    return {
        "token": token.value,
        "plan_id": token.claims.plan_id,
        "expires_at": _at(token.claims.expires_at),
    }


def envelope_view(envelope: Envelope) -> Json:
    """An envelope as the model would read it."""
    return envelope.to_model_dict()


def execution_view(record: ExecutionRecord) -> Json:
    """An execution record for operators: key, status, attempts, outcome, checks."""
    return {
        "key": record.idempotency_key,
        "plan_id": record.plan_id,
        "tool": record.tool,
        "user_id": record.user_id,
        "status": record.status.value,
        "attempts": record.attempts,
        "business_id": record.business_id,
        "error_code": record.error_code,
        "result": record.result_value,
        "arguments": None if record.purged else json.loads(record.arguments),
        "expected_version": record.expected_version,
        "checks": record.checks,
        "escalated": record.escalated,
        "next_check_at": _at(record.next_check_at),
        "lease_expires_at": _at(record.lease_expires_at),
        "created_at": _at(record.created_at),
        "updated_at": _at(record.updated_at),
        "purged": record.purged,
        "version": record.version,
    }


def outcome_view(outcome: WriteOutcome) -> Json:
    """What one request to execute came to, with the envelope the model would read."""
    return {
        "plan_id": outcome.plan_id,
        "key": outcome.key,
        "status": None if outcome.status is None else outcome.status.value,
        "business_id": outcome.business_id,
        "replayed": outcome.replayed,
        "envelope": envelope_view(outcome.envelope),
    }


def event_view(event: AuditEvent) -> Json:
    """One audit event."""
    return {
        "event_id": event.event_id,
        "at": _at(event.at),
        "kind": event.kind,
        "stage": event.stage,
        "decision": event.decision,
        "code": event.code,
        "duration_ms": event.duration_ms,
        "detail": event.detail,
        "request_id": event.request_id,
        "call_id": event.tool_call_id,
        "tool": event.tool,
        "schema_version": event.schema_version,
        "args_hash": event.args_hash,
        "args_summary": event.args_summary,
        "user_id": event.user_id,
    }


def raw_view(record: RawRecord) -> Json:
    """A raw record: its body as text when it is UTF-8, else as base64."""
    try:
        text: str | None = record.body.decode("utf-8")
        encoded = None
    except UnicodeDecodeError:
        text, encoded = None, base64.b64encode(record.body).decode("ascii")
    return {
        "ref": record.ref,
        "tool": record.tool,
        "call_id": record.call_id,
        "user_id": record.user_id,
        "created_at": _at(record.created_at),
        "expires_at": _at(record.expires_at),
        "media_type": record.media_type,
        "size": record.size,
        "complete": record.complete,
        "body": text,
        "body_base64": encoded,
    }


def run_view(record: RunRecord, *, document: bool = False) -> Json:
    """A run; with `document`, its whole run document (transcript, steps, end)."""
    view: Json = {
        "run_id": record.run_id,
        "user_id": record.user_id,
        "state": record.state.value,
        "version": record.version,
        "created_at": _at(record.created_at),
        "updated_at": _at(record.updated_at),
    }
    if document:
        from handrail.errors import ConfigurationError  # noqa: PLC0415 - the loop loads late
        from handrail.loop.agent import read_run  # noqa: PLC0415

        try:
            data = json.loads(read_run(record).to_json())
        except ConfigurationError:
            data = None
        if isinstance(data, dict):
            data.pop("principal", None)
        view["document"] = data
    return view


def _steps(steps: tuple[StepLog, ...]) -> list[Json]:
    return [
        {
            "kind": step.kind,
            "plan_id": step.plan_id,
            "calls": [
                {"call_id": c.call_id, "tool": c.tool, "status": c.status, "code": c.code}
                for c in step.calls
            ],
        }
        for step in steps
    ]


def replay_view(report: ReplayReport) -> Json:
    """A replay against its recorded run: both step logs, both ends, what differs."""
    return {
        "run_id": report.run_id,
        "matched": report.matched,
        "recorded_end": report.recorded_end,
        "replayed_end": report.replayed_end,
        "differences": list(report.differences),
        "recorded": _steps(report.recorded),
        "replayed": _steps(report.replayed),
    }
