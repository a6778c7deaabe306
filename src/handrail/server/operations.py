"""What the service does for a principal, shared by the HTTP API and the console.

Every operation takes the authenticated Principal and stays inside its tenant: a plan,
execution, audit event, raw record or run of another tenant is NOT_FOUND, exactly like
a missing one (WriteRefusedError/ToolError with `ErrorCode.NOT_FOUND`). Operations
that look past the principal's own records need a permission (below). Blocking store
calls run in worker threads. Nothing here knows HTTP.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from handrail.events import AuditEvent
from handrail.execution import ExecutionRecord, ExecutionStatus
from handrail.plans import PlanRecord, PlanState
from handrail.principal import Principal
from handrail.raw import RawRecord
from handrail.runs import RunRecord, RunState

if TYPE_CHECKING:
    from handrail.app import Handrail
    from handrail.clock import Clock
    from handrail.envelope import Envelope
    from handrail.writes.confirmation import ConfirmationToken
    from handrail.writes.outcome import WriteOutcome

__all__ = [
    "AUDIT_READ_PERMISSION",
    "EXECUTIONS_OPERATE_PERMISSION",
    "AuditPage",
    "AuditSearch",
    "Operations",
]

AUDIT_READ_PERMISSION = "handrail.audit.read"
"""Search the tenant's audit trail and read every run of the tenant (not only one's own)."""
EXECUTIONS_OPERATE_PERMISSION = "handrail.executions.operate"
"""List the tenant's executions, reconcile an UNKNOWN one, resolve one by hand."""


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


@dataclass(frozen=True, kw_only=True, slots=True)
class AuditPage:
    """One page of matching events, newest first; `next_cursor` fetches the older ones."""

    events: Sequence[AuditEvent]
    next_cursor: str | None


class Operations:
    """The service's operations over one application, for authenticated principals."""

    def __init__(self, app: Handrail, *, clock: Clock) -> None:
        self._app = app
        self._clock = clock

    # --- plans ---------------------------------------------------------------------------------

    async def list_plans(
        self, principal: Principal, *, state: PlanState | None = None, limit: int = 50
    ) -> list[PlanRecord]:
        """The tenant's plans this principal may decide or asked for, newest first."""
        raise NotImplementedError

    async def get_plan(self, principal: Principal, plan_id: str) -> PlanRecord:
        """One plan of the tenant; NOT_FOUND otherwise."""
        raise NotImplementedError

    async def issue_token(self, principal: Principal, plan_id: str) -> ConfirmationToken:
        """A one-time confirmation token for this principal (requester or approver)."""
        raise NotImplementedError

    async def confirm(self, principal: Principal, plan_id: str, token: str) -> PlanRecord:
        """Confirm or approve with a token issued to this principal."""
        raise NotImplementedError

    async def confirm_and_execute(
        self, principal: Principal, plan_id: str
    ) -> tuple[PlanRecord, WriteOutcome | None]:
        """A person's Confirm in the console: a token issued to them and used at once.

        A CONFIRM plan confirmed by its requester then runs once under its key (the
        outcome is returned); an APPROVE plan records this approval and runs once the
        required approvals are in and the requester executes it (outcome None).
        """
        raise NotImplementedError

    async def execute(self, principal: Principal, plan_id: str) -> WriteOutcome:
        """Run a confirmed plan once (only its requester); a repeat returns the same outcome."""
        raise NotImplementedError

    async def reject(self, principal: Principal, plan_id: str, reason: str | None) -> PlanRecord:
        """Reject a plan that has not run; the reason goes to the audit."""
        raise NotImplementedError

    async def revise(self, principal: Principal, plan_id: str, arguments: str) -> Envelope:
        """New arguments for a plan: a new plan through all four checks; the old one closes."""
        raise NotImplementedError

    # --- executions ----------------------------------------------------------------------------

    async def list_executions(
        self,
        principal: Principal,
        *,
        status: ExecutionStatus | None = None,
        limit: int = 50,
    ) -> list[ExecutionRecord]:
        """The tenant's execution records (EXECUTIONS_OPERATE_PERMISSION)."""
        raise NotImplementedError

    async def get_execution(self, principal: Principal, key: str) -> ExecutionRecord:
        """One execution record of the tenant; NOT_FOUND otherwise."""
        raise NotImplementedError

    async def reconcile(self, principal: Principal, key: str) -> ExecutionRecord:
        """Ask the tool's reconcile hook about one UNKNOWN record now; the record after."""
        raise NotImplementedError

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
        raise NotImplementedError

    # --- audit, raw results, runs --------------------------------------------------------------

    async def search_audit(self, principal: Principal, search: AuditSearch) -> AuditPage:
        """The tenant's audit events matching `search` (AUDIT_READ_PERMISSION)."""
        raise NotImplementedError

    async def call_timeline(self, principal: Principal, call_id: str) -> list[AuditEvent]:
        """Every audit event of one tool call, in order (its stages), inside the tenant."""
        raise NotImplementedError

    async def raw(self, principal: Principal, ref: str) -> RawRecord:
        """A raw record by ref (RAW_READ_PERMISSION), audited; NOT_FOUND across tenants."""
        raise NotImplementedError

    async def list_runs(
        self, principal: Principal, *, state: RunState | None = None, limit: int = 50
    ) -> list[RunRecord]:
        """The principal's runs (the tenant's with AUDIT_READ_PERMISSION), newest first."""
        raise NotImplementedError

    async def get_run(self, principal: Principal, run_id: str) -> RunRecord:
        """One run; NOT_FOUND across tenants (and for another user's without permission)."""
        raise NotImplementedError
