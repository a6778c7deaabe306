"""What the service does for a principal, shared by the HTTP API and the console.

Every operation takes the authenticated Principal and stays inside its tenant: a plan,
execution, audit event, raw record or run of another tenant is NOT_FOUND, exactly like
a missing one (WriteRefusedError/ToolError with `ErrorCode.NOT_FOUND`). Operations
that look past the principal's own records need a permission (below). Blocking store
calls run in worker threads. Nothing here knows HTTP.

Deciding goes through `Writes` (tokens, confirmations, rejections), revising through
the gate, settling UNKNOWN records through the reconciler or `resolve_by_person`, raw
records through `RawResults`: each rule lives there once, and this module only scopes
requests to what the principal may see.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from handrail.errors import AccessRefusedError, ErrorCode, WriteRefusedError
from handrail.events import AuditEvent
from handrail.execution import ExecutionRecord, ExecutionStatus
from handrail.plans import PlanRecord, PlanState
from handrail.principal import Principal
from handrail.raw import RawRecord
from handrail.record.audit import Auditor
from handrail.record.raw_results import RAW_READ_PERMISSION, RawResults
from handrail.runs import RunRecord, RunState
from handrail.server._cursors import decode_cursor, encode_cursor
from handrail.server._visibility import (
    AUDIT_READ_PERMISSION,
    EXECUTIONS_OPERATE_PERMISSION,
    PLANS_DECIDE_PERMISSION,
    check_key,
    may_see_plan,
    may_see_run,
    plausible_id,
)
from handrail.spec import ConfirmationMode
from handrail.store.base import reads_block
from handrail.writes.reconcile import Reconciler, resolve_by_person

if TYPE_CHECKING:
    from handrail.app import Handrail
    from handrail.clock import Clock
    from handrail.envelope import Envelope
    from handrail.loop.agent import ReplayReport
    from handrail.writes.confirmation import ConfirmationToken
    from handrail.writes.outcome import WriteOutcome

__all__ = [
    "AUDIT_READ_PERMISSION",
    "EXECUTIONS_OPERATE_PERMISSION",
    "MAX_LIMIT",
    "PLANS_DECIDE_PERMISSION",
    "RAW_READ_PERMISSION",
    "AuditPage",
    "AuditSearch",
    "Operations",
]

T = TypeVar("T")

MAX_LIMIT = 200
"""The most records one listing returns."""
_TIMELINE_LIMIT = 1000
_PLAN_SCAN = 1000
"""How many of the tenant's plans a listing reads to find the principal's."""
_NO_PLAN = "There is no such plan."
_NO_EXECUTION = "There is no such execution record."
_NO_RUN = "There is no such run."
_NO_CALL = "There is no such tool call."


@dataclass(frozen=True, kw_only=True, slots=True)
class AuditSearch:
    """An audit search inside the principal's tenant; every field narrows it."""

    tool: str | None = None
    decision: str | None = None
    code: str | None = None
    user_id: str | None = None
    call_id: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    cursor: str | None = None
    limit: int = 50

    def __post_init__(self) -> None:
        # Every stored time is UTC: a bound without an offset (from either face) is too.
        for name in ("since", "until"):
            at: datetime | None = getattr(self, name)
            if at is not None and at.tzinfo is None:
                object.__setattr__(self, name, at.replace(tzinfo=UTC))


@dataclass(frozen=True, kw_only=True, slots=True)
class AuditPage:
    """One page of matching events, newest first; `next_cursor` fetches the older ones."""

    events: Sequence[AuditEvent]
    next_cursor: str | None


def _bounded(limit: int) -> int:
    return max(1, min(MAX_LIMIT, limit))


def _refuse(code: ErrorCode, message: str) -> AccessRefusedError:
    return AccessRefusedError(code, message)


def _require(principal: Principal, permission: str) -> None:
    if permission not in principal.permissions:
        raise _refuse(ErrorCode.PERMISSION_DENIED, f"This needs the permission {permission!r}.")


class Operations:
    """The service's operations over one application, for authenticated principals."""

    def __init__(self, app: Handrail, *, clock: Clock, worker_id: str = "service") -> None:
        self._app = app
        self._clock = clock
        self._auditor = Auditor(app.audit, clock)
        self._raw = RawResults(app.store, clock, auditor=self._auditor)
        self._reconciler = Reconciler(
            app.registry,
            app.store,
            clock=clock,
            audit=app.audit,
            worker_id=worker_id,
            telemetry=app.telemetry,
        )

    async def _io(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:  # noqa: ANN401
        if not reads_block(self._app.store):
            return fn(*args, **kwargs)
        return await asyncio.to_thread(fn, *args, **kwargs)

    # --- plans ---------------------------------------------------------------------------------

    async def list_plans(
        self, principal: Principal, *, state: PlanState | None = None, limit: int = 50
    ) -> list[PlanRecord]:
        """The tenant's plans this principal may decide or asked for, newest first.

        With AUDIT_READ_PERMISSION, every plan of the tenant.
        """
        records = await self._io(
            self._app.store.list_plans,
            tenant_id=principal.tenant_id,
            state=state,
            limit=_PLAN_SCAN,
        )
        return [r for r in records if may_see_plan(r, principal)][: _bounded(limit)]

    async def get_plan(self, principal: Principal, plan_id: str) -> PlanRecord:
        """One plan of the tenant; NOT_FOUND otherwise.

        Inside the tenant too, a plan the principal neither asked for, may decide, nor
        may audit is NOT_FOUND, exactly like a missing one.
        """
        record = await self._app.writes.get_plan(plan_id, principal)
        if not may_see_plan(record, principal):
            raise WriteRefusedError(ErrorCode.NOT_FOUND, _NO_PLAN)
        return record

    async def issue_token(self, principal: Principal, plan_id: str) -> ConfirmationToken:
        """A one-time confirmation token for this principal (requester or approver)."""
        await self.get_plan(principal, plan_id)
        return await self._app.writes.issue_token(plan_id, principal)

    async def confirm(self, principal: Principal, plan_id: str, token: str) -> PlanRecord:
        """Confirm or approve with a token issued to this principal."""
        await self.get_plan(principal, plan_id)
        return await self._app.writes.confirm(plan_id, token, principal)

    async def confirm_and_execute(
        self, principal: Principal, plan_id: str
    ) -> tuple[PlanRecord, WriteOutcome | None]:
        """A person's Confirm in the console: a token issued to them and used at once.

        A CONFIRM plan confirmed by its requester then runs once under its key (the
        outcome is returned); an APPROVE plan records this approval and runs once the
        required approvals are in and the requester executes it (outcome None).
        """
        token = await self.issue_token(principal, plan_id)
        record = await self._app.writes.confirm(plan_id, token.value, principal)
        if record.plan.confirmation is ConfirmationMode.APPROVE:
            return record, None
        outcome = await self.execute(principal, plan_id)
        return await self.get_plan(principal, plan_id), outcome

    async def execute(self, principal: Principal, plan_id: str) -> WriteOutcome:
        """Run a confirmed plan once (only its requester); a repeat returns the same outcome.

        A refusal before any execution record exists (not confirmed, expired, another
        person's plan, a moved target) raises WriteRefusedError with its code; once a
        record exists, its outcome is returned, whatever it is (failed, unknown).
        """
        await self.get_plan(principal, plan_id)
        outcome = await self._app.writes.execute_plan(plan_id, principal)
        code = outcome.envelope.error_type
        if outcome.record is None and code is not None:
            raise WriteRefusedError(code, outcome.envelope.summary)
        return outcome

    async def reject(self, principal: Principal, plan_id: str, reason: str | None) -> PlanRecord:
        """Reject a plan that has not run; the reason goes to the audit."""
        await self.get_plan(principal, plan_id)
        return await self._app.writes.reject(plan_id, principal, reason=reason)

    async def revise(self, principal: Principal, plan_id: str, arguments: str) -> Envelope:
        """New arguments for a plan: a new plan through all four checks; the old one closes."""
        await self.get_plan(principal, plan_id)
        return await self._app.gate.revise_plan(plan_id, arguments, principal)

    # --- executions ----------------------------------------------------------------------------

    async def list_executions(
        self,
        principal: Principal,
        *,
        status: ExecutionStatus | None = None,
        limit: int = 50,
    ) -> list[ExecutionRecord]:
        """The tenant's execution records (EXECUTIONS_OPERATE_PERMISSION)."""
        _require(principal, EXECUTIONS_OPERATE_PERMISSION)
        return await self._io(
            self._app.store.list_executions,
            status=status,
            tenant_id=principal.tenant_id,
            limit=_bounded(limit),
        )

    async def get_execution(self, principal: Principal, key: str) -> ExecutionRecord:
        """One execution record of the tenant; NOT_FOUND otherwise.

        Its own user reads it; anyone else of the tenant needs EXECUTIONS_OPERATE_PERMISSION
        and without it is told NOT_FOUND, as for a missing key.
        """
        record = await self._io(self._app.store.get_execution, key) if check_key(key) else None
        if (
            record is None
            or record.tenant_id != principal.tenant_id
            or (
                record.user_id != principal.user_id
                and EXECUTIONS_OPERATE_PERMISSION not in principal.permissions
            )
        ):
            raise WriteRefusedError(ErrorCode.NOT_FOUND, _NO_EXECUTION)
        return record

    async def _operated(self, principal: Principal, key: str) -> ExecutionRecord:
        record = await self.get_execution(principal, key)
        _require(principal, EXECUTIONS_OPERATE_PERMISSION)
        return record

    async def reconcile(self, principal: Principal, key: str) -> ExecutionRecord:
        """Ask the tool's reconcile hook about one UNKNOWN record now; the record after.

        A record whose next check is later is made due first (a compare-and-set: a
        reconciler that moved it meanwhile wins); a settled record is a CONFLICT.
        """
        record = await self._operated(principal, key)
        now = self._clock.now()
        if record.status is not ExecutionStatus.UNKNOWN:
            stale = record.status is ExecutionStatus.RUNNING and (
                record.lease_expires_at is None or record.lease_expires_at <= now
            )
            if not stale:
                raise WriteRefusedError(
                    ErrorCode.CONFLICT,
                    f"Only an UNKNOWN record can be reconciled; this one is {record.status}.",
                )
        elif record.next_check_at is None or record.next_check_at > now:
            due = record.moved(ExecutionStatus.UNKNOWN, next_check_at=now, updated_at=now)
            await self._io(
                self._app.store.replace_execution,
                due,
                expect_status=record.status,
                expect_version=record.version,
            )
        await self._reconciler.run_once(key=key, tenant_id=principal.tenant_id)
        return await self.get_execution(principal, key)

    async def resolve(
        self,
        principal: Principal,
        key: str,
        *,
        succeeded: bool,
        note: str,
        business_id: str | None = None,
    ) -> ExecutionRecord:
        """Settle an UNKNOWN record by a person who checked downstream, with a reason."""
        record = await self._operated(principal, key)
        tool = self._app.registry.get(record.tool) if record.tool in self._app.registry else None
        retention = tool.spec.idempotency.retention_seconds if tool is not None else 86_400.0
        return await asyncio.to_thread(
            resolve_by_person,
            self._app.store,
            key,
            succeeded=succeeded,
            operator=principal.user_id,
            note=note,
            business_id=business_id,
            clock=self._clock,
            audit=self._app.audit,
            retention_seconds=retention,
            telemetry=self._app.telemetry,
        )

    # --- audit, raw results, runs --------------------------------------------------------------

    async def search_audit(self, principal: Principal, search: AuditSearch) -> AuditPage:
        """The tenant's audit events matching `search` (AUDIT_READ_PERMISSION)."""
        _require(principal, AUDIT_READ_PERMISSION)
        limit = _bounded(search.limit)
        before = None if search.cursor is None else decode_cursor(search.cursor)
        found = await self._io(
            self._app.store.search_audit,
            tenant_id=principal.tenant_id,
            tool=search.tool,
            decision=search.decision,
            code=search.code,
            user_id=search.user_id,
            tool_call_id=search.call_id,
            since=search.since,
            until=search.until,
            before_seq=before,
            limit=limit + 1,
        )
        page = found[:limit]
        more = len(found) > limit
        return AuditPage(
            events=[event for _, event in page],
            next_cursor=encode_cursor(page[-1][0]) if more else None,
        )

    async def call_timeline(self, principal: Principal, call_id: str) -> list[AuditEvent]:
        """Every audit event of one tool call, in order (its stages), inside the tenant.

        Without AUDIT_READ_PERMISSION, only the principal's own events of it; NOT_FOUND
        when there are none to show.
        """
        found = await self._io(
            self._app.store.search_audit,
            tenant_id=principal.tenant_id,
            tool_call_id=call_id,
            user_id=None if AUDIT_READ_PERMISSION in principal.permissions else principal.user_id,
            limit=_TIMELINE_LIMIT,
        )
        if not found:
            raise _refuse(ErrorCode.NOT_FOUND, _NO_CALL)
        return [event for _, event in reversed(found)]

    async def raw(self, principal: Principal, ref: str) -> RawRecord:
        """A raw record by ref (RAW_READ_PERMISSION), audited; NOT_FOUND across tenants.

        Its owner reads it too (`RawResults.read` holds that rule); a malformed ref is
        NOT_FOUND like a missing one.
        """
        return await self._raw.aread(ref, principal)

    async def list_runs(
        self, principal: Principal, *, state: RunState | None = None, limit: int = 50
    ) -> list[RunRecord]:
        """The principal's runs (the tenant's with AUDIT_READ_PERMISSION), newest first."""
        everyone = AUDIT_READ_PERMISSION in principal.permissions
        return await self._io(
            self._app.store.list_runs,
            tenant_id=principal.tenant_id,
            state=state,
            user_id=None if everyone else principal.user_id,
            limit=_bounded(limit),
        )

    async def get_run(self, principal: Principal, run_id: str) -> RunRecord:
        """One run; NOT_FOUND across tenants (and for another user's without permission)."""
        record = await self._io(self._app.store.get_run, run_id) if plausible_id(run_id) else None
        if record is None or not may_see_run(record, principal):
            raise _refuse(ErrorCode.NOT_FOUND, _NO_RUN)
        return record

    async def replay(self, principal: Principal, run_id: str) -> ReplayReport:
        """Re-run a stored run from its recorded model replies and compare the outcomes.

        As `handrail replay` does: the recorded replies are fed back by a scripted model
        under the recorded budget and a frozen clock, as the run's own principal; reads
        run again through the application's gate (its policy, audited), writes never run
        again. Nothing is stored. A run whose document cannot be read is a CONFLICT.
        Only the run's own user replays it: its reads run again as that user, so an
        auditor who may read the run may not make them (PERMISSION_DENIED).
        """
        from handrail.clock import FixedClock  # noqa: PLC0415 - the loop loads when asked for
        from handrail.errors import ConfigurationError  # noqa: PLC0415
        from handrail.loop.agent import AgentLoop, read_run  # noqa: PLC0415
        from handrail.loop.answers import EvidenceChecker  # noqa: PLC0415
        from handrail.loop.models import ScriptedModelClient  # noqa: PLC0415

        record = await self.get_run(principal, run_id)
        if record.user_id != principal.user_id:
            raise _refuse(ErrorCode.PERMISSION_DENIED, "Only the run's own user may replay it.")
        try:
            data = read_run(record)
        except ConfigurationError:
            raise _refuse(ErrorCode.CONFLICT, "The run's record cannot be replayed.") from None
        store = self._app.store
        loop = AgentLoop(
            gate=self._app.gate,
            model=ScriptedModelClient(data.replies, record_requests=False),
            store=store,
            budget=data.limits,
            clock=FixedClock(),
            checker=EvidenceChecker(store),
        )
        return await loop.replay(run_id)
