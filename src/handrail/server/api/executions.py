"""The HTTP API's executions: list, the UNKNOWN queue, one record, reconcile, resolve.

Operators hold `handrail.executions.operate`; a record's own user may read it. A
record of another tenant is 404, the same body as a missing key.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from handrail.execution import ExecutionStatus
from handrail.server.api._deps import Limit, Ops
from handrail.server.api._views import execution_view
from handrail.server.auth import ApiPrincipal

__all__ = ["router"]

router = APIRouter(prefix="/executions", tags=["executions"])


class ResolveBody(BaseModel):
    """What the operator found downstream, and why they say so."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    succeeded: bool
    note: str = Field(min_length=1, max_length=2000)
    business_id: str | None = Field(default=None, min_length=1, max_length=256)


@router.get("", summary="The tenant's execution records, most recently updated first")
async def list_executions(
    principal: ApiPrincipal, ops: Ops, status: ExecutionStatus | None = None, limit: Limit = 50
) -> dict[str, Any]:
    records = await ops.list_executions(principal, status=status, limit=limit)
    return {"executions": [execution_view(r) for r in records]}


@router.get("/unknown", summary="The UNKNOWN queue: writes whose outcome is not known")
async def unknown(principal: ApiPrincipal, ops: Ops, limit: Limit = 50) -> dict[str, Any]:
    records = await ops.list_executions(principal, status=ExecutionStatus.UNKNOWN, limit=limit)
    return {"executions": [execution_view(r) for r in records]}


@router.get("/{key}", summary="One execution record by its idempotency key")
async def get_execution(principal: ApiPrincipal, ops: Ops, key: str) -> dict[str, Any]:
    return execution_view(await ops.get_execution(principal, key))


@router.post("/{key}/reconcile", summary="Ask the tool's reconcile hook about it now")
async def reconcile(principal: ApiPrincipal, ops: Ops, key: str) -> dict[str, Any]:
    return execution_view(await ops.reconcile(principal, key))


@router.post("/{key}/resolve", summary="Settle an UNKNOWN record by hand, with a note")
async def resolve(principal: ApiPrincipal, ops: Ops, key: str, body: ResolveBody) -> dict[str, Any]:
    record = await ops.resolve(
        principal, key, succeeded=body.succeeded, note=body.note, business_id=body.business_id
    )
    return execution_view(record)
