"""The HTTP API's audit: a paginated search of the tenant's trail, and one call's stages.

The search needs `handrail.audit.read`; pages are newest first and continue with the
opaque `next_cursor`. A call's timeline shows the caller's own events of it (every
event with the permission); none to show is 404.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query

from handrail.server.api._deps import Limit, Ops
from handrail.server.api._views import event_view
from handrail.server.auth import ApiPrincipal
from handrail.server.operations import AuditSearch

__all__ = ["router"]

router = APIRouter(prefix="/audit", tags=["audit"])

Text = Annotated[str | None, Query(min_length=1, max_length=256)]


@router.get("", summary="Search the tenant's audit events, newest first")
async def search(  # noqa: PLR0917 - one query parameter per filter
    principal: ApiPrincipal,
    ops: Ops,
    tool: Text = None,
    decision: Text = None,
    code: Text = None,
    user: Text = None,
    call_id: Text = None,
    since: datetime | None = None,
    until: datetime | None = None,
    cursor: Annotated[str | None, Query(max_length=64)] = None,
    limit: Limit = 50,
) -> dict[str, Any]:
    page = await ops.search_audit(
        principal,
        AuditSearch(
            tool=tool,
            decision=decision,
            code=code,
            user_id=user,
            call_id=call_id,
            since=since,
            until=until,
            cursor=cursor,
            limit=limit,
        ),
    )
    return {"events": [event_view(e) for e in page.events], "next_cursor": page.next_cursor}


@router.get("/calls/{call_id}", summary="Every audit event of one tool call, in order")
async def timeline(principal: ApiPrincipal, ops: Ops, call_id: str) -> dict[str, Any]:
    events = await ops.call_timeline(principal, call_id)
    return {"call_id": call_id, "events": [event_view(e) for e in events]}
