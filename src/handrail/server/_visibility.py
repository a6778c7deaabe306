"""Who may see which record inside a tenant, and which ids are worth asking the store about.

Owns the service's permission names and the visibility rules `Operations` applies
before anything else: a record the principal may not see is refused exactly like a
missing one. It never reads a store and never decides a plan (the writes do).
"""

from __future__ import annotations

import re

from handrail.plans import PlanRecord
from handrail.principal import Principal
from handrail.runs import RunRecord
from handrail.spec import ConfirmationMode

__all__ = [
    "AUDIT_READ_PERMISSION",
    "EXECUTIONS_OPERATE_PERMISSION",
    "PLANS_DECIDE_PERMISSION",
    "check_key",
    "may_see_plan",
    "may_see_run",
    "plausible_id",
]

AUDIT_READ_PERMISSION = "handrail.audit.read"
"""Search the tenant's audit trail and read every run of the tenant (not only one's own)."""
EXECUTIONS_OPERATE_PERMISSION = "handrail.executions.operate"
"""List the tenant's executions, reconcile an UNKNOWN one, resolve one by hand."""
PLANS_DECIDE_PERMISSION = "handrail.plans.decide"
"""Over the API, take and use confirmation tokens (confirm or approve a plan).

A machine credential deciding for a person must be given this on purpose: an agent
host holding a user's API key must not confirm that user's plans by itself. People
deciding in the console need no such permission; they are the person.
"""

_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_KEY = re.compile(r"[A-Za-z0-9_:.-]{1,128}")


def plausible_id(value: str) -> bool:
    """Whether `value` has the shape of a plan or run id (anything else is never stored)."""
    return _ID.fullmatch(value) is not None


def check_key(value: str) -> bool:
    """Whether `value` has the shape of an idempotency key."""
    return _KEY.fullmatch(value) is not None


def may_see_plan(record: PlanRecord, principal: Principal) -> bool:
    """Its requester, an approver of an APPROVE plan, or an auditor of the same tenant."""
    plan = record.plan
    if plan.tenant_id != principal.tenant_id:
        return False
    return (
        plan.user_id == principal.user_id
        or AUDIT_READ_PERMISSION in principal.permissions
        or (
            plan.confirmation is ConfirmationMode.APPROVE
            and plan.approver_permission is not None
            and plan.approver_permission in principal.permissions
        )
    )


def may_see_run(record: RunRecord, principal: Principal) -> bool:
    """Its user, or an auditor of the same tenant."""
    return record.tenant_id == principal.tenant_id and (
        record.user_id == principal.user_id or AUDIT_READ_PERMISSION in principal.permissions
    )
